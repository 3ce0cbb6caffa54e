//! Errors of the CPU runtime.

/// A tensor's shape does not fit the op that uses it (found while validating a model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A size differs from what the op needs.
    #[error("{op}: {what}: expected {expected}, found {found}")]
    Mismatch {
        /// Op name.
        op: &'static str,
        /// Which size (e.g. "wq rows").
        what: &'static str,
        /// Expected value.
        expected: usize,
        /// Found value.
        found: usize,
    },
    /// A parameter combination the op does not support.
    #[error("{op}: {what}")]
    Invalid {
        /// Op name.
        op: &'static str,
        /// Explanation.
        what: &'static str,
    },
}

/// Shorthand for a [`ShapeError::Mismatch`] check.
#[inline]
pub fn expect_eq(
    op: &'static str,
    what: &'static str,
    expected: usize,
    found: usize,
) -> Result<(), ShapeError> {
    if expected == found {
        Ok(())
    } else {
        Err(ShapeError::Mismatch { op, what, expected, found })
    }
}

/// A failure found while running a model on concrete inputs (shapes were already validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// A token id is negative or not below the vocabulary size.
    #[error("token id {id} at position {position} is out of range for a vocabulary of {vocab}")]
    TokenIdOutOfRange {
        /// Index of the offending id in the input.
        position: usize,
        /// The id found.
        id: i32,
        /// Rows of the embedding table.
        vocab: usize,
    },
}
