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
