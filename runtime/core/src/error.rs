//! The errors every backend shares: loading and validating a model (`LoadError`), a shape that
//! does not fit its op (`ShapeError`), and running it (`RunError`).

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
pub fn expect_eq(op: &'static str, what: &'static str, expected: usize, found: usize) -> Result<(), ShapeError> {
    if expected == found {
        Ok(())
    } else {
        Err(ShapeError::Mismatch { op, what, expected, found })
    }
}

/// Why a model file was rejected by the CPU runtime.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum LoadError {
    /// The container is malformed (see [`kestrel_rt_format::Error`]).
    #[error(transparent)]
    Format(#[from] kestrel_rt_format::Error),
    /// A tensor's shape does not fit the op.
    #[error("node {node} ({op}): {source}")]
    Shape {
        /// Node index.
        node: u32,
        /// Op name.
        op: &'static str,
        /// The mismatch.
        source: ShapeError,
    },
    /// A tensor slot holds the wrong kind of tensor (a weight where an activation is read, an
    /// i32 tensor where f32 is needed, ...).
    #[error("node {node} ({op}): tensor {tensor} in slot `{slot}` must be {expected}, found {found}")]
    TensorRole {
        /// Node index.
        node: u32,
        /// Op name.
        op: &'static str,
        /// Tensor id.
        tensor: u32,
        /// Slot name.
        slot: &'static str,
        /// What the slot needs.
        expected: &'static str,
        /// What the tensor is.
        found: &'static str,
    },
    /// The declared output shape differs from the one the op computes.
    #[error("node {node} ({op}): output tensor {tensor} is declared {declared}, the op computes {computed}")]
    OutputShape {
        /// Node index.
        node: u32,
        /// Op name.
        op: &'static str,
        /// Output tensor id.
        tensor: u32,
        /// Shape in the tensor table.
        declared: kestrel_rt_format::Shape,
        /// Shape the op produces.
        computed: kestrel_rt_format::Shape,
    },
    /// An activation is read before any node (or the caller) provides it.
    #[error("node {node} ({op}): reads tensor {tensor} before any node writes it")]
    UseBeforeDefinition {
        /// Node index.
        node: u32,
        /// Op name.
        op: &'static str,
        /// Tensor id.
        tensor: u32,
    },
    /// An activation is written twice (by two nodes, or a node writes a graph input).
    #[error("node {node} ({op}): writes tensor {tensor}, which is already defined")]
    Redefinition {
        /// Node index.
        node: u32,
        /// Op name.
        op: &'static str,
        /// Tensor id.
        tensor: u32,
    },
    /// A node's output overlaps one of its inputs in the arena.
    #[error("node {node} ({op}): output tensor {output} overlaps input tensor {input} in the arena plan")]
    Overlap {
        /// Node index.
        node: u32,
        /// Op name.
        op: &'static str,
        /// Output tensor id.
        output: u32,
        /// Input tensor id.
        input: u32,
    },
    /// A reshape's output does not share its input's arena bytes.
    #[error("node {node} (Reshape): output offset {output_offset} must equal input offset {input_offset}")]
    ReshapeAlias {
        /// Node index.
        node: u32,
        /// Input arena offset.
        input_offset: u64,
        /// Output arena offset.
        output_offset: u64,
    },
    /// A memory-plan size is not a multiple of its required alignment.
    #[error("memory plan: {what} is {value} bytes, not a multiple of {align}")]
    PlanAlignment {
        /// Which size.
        what: &'static str,
        /// The size.
        value: u64,
        /// Required multiple.
        align: u64,
    },
    /// An allocation sized by the file failed (the decoded table of
    /// [`Table::new`](crate::Table::new)).
    #[error("out of memory: {bytes} bytes for {what}")]
    OutOfMemory {
        /// What was being allocated.
        what: &'static str,
        /// Its size.
        bytes: u64,
    },
    /// The plan's scratch region is smaller than the ops need.
    #[error("memory plan: scratch is {found} bytes, the ops need {required}")]
    ScratchTooSmall {
        /// Bytes needed.
        required: u64,
        /// Bytes in the plan.
        found: u64,
    },
    /// A graph output is never produced.
    #[error("graph output tensor {tensor} is never written")]
    OutputNeverWritten {
        /// Tensor id.
        tensor: u32,
    },
}

/// Why a run (or session creation) failed. Nothing is silently clamped or truncated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// A token id is outside `-vocab..vocab` (a negative id counts from the end, as in ONNX
    /// `Gather`).
    #[error("token id {id} at position {position} is outside the vocabulary (-{vocab}..{vocab})")]
    TokenIdOutOfRange {
        /// Flat position of the id in the input.
        position: usize,
        /// The id.
        id: i32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// A gather index computed at run time is not an integer in `-len..len`.
    #[error("gather index {} at position {position} is not an integer in -{len}..{len}", f32::from_bits(*value_bits))]
    IndexOutOfRange {
        /// Flat position of the index in the batch's indices (sample-major).
        position: usize,
        /// The index value's f32 bits (`f32::from_bits` gives it back; NaN payloads kept).
        value_bits: u32,
        /// The indexed axis's length.
        len: usize,
    },
    /// An integer fed to an f32 input (an ONNX integer input taken as values) has no exact f32.
    #[error("input {input}: integer {value} at position {position} has no exact f32 value (|v| > 2^24)")]
    IntegerNotExact {
        /// Input index.
        input: usize,
        /// Flat position.
        position: usize,
        /// The value.
        value: i64,
    },
    /// An i64 token id does not fit in i32.
    #[error("input {input}: token id {id} at position {position} does not fit in i32")]
    IdTooLarge {
        /// Input index.
        input: usize,
        /// Flat position.
        position: usize,
        /// The id.
        id: i64,
    },
    /// The caller's arena is too small.
    #[error("arena too small: need {needed} bytes for batch {batch}, got {found}")]
    ArenaTooSmall {
        /// Bytes needed (including 64 bytes of alignment slack).
        needed: usize,
        /// Bytes given.
        found: usize,
        /// Batch capacity asked for.
        batch: usize,
    },
    /// Batch capacity 0, or a size overflow.
    #[error("{}", CapacityMsg { max: *max, found: *found })]
    BadCapacity {
        /// Largest capacity whose arena size fits in usize.
        max: usize,
        /// Capacity asked for.
        found: usize,
    },
    /// Wrong number of inputs or outputs.
    #[error("expected {expected} {what}, got {found}")]
    Arity {
        /// "inputs" or "outputs".
        what: &'static str,
        /// Expected count.
        expected: usize,
        /// Given count.
        found: usize,
    },
    /// An input or output has a length that is not `batch × per-sample elements`.
    #[error(
        "{what} {index}: {found} elements is not a whole batch of {per_sample}-element samples (batch 1..={capacity})"
    )]
    Length {
        /// "input" or "output".
        what: &'static str,
        /// Index.
        index: usize,
        /// Elements per sample.
        per_sample: usize,
        /// Elements given.
        found: usize,
        /// Session batch capacity.
        capacity: usize,
    },
    /// The inputs imply different batch sizes.
    #[error("input {index} has batch {found}, input 0 has batch {expected}")]
    BatchMismatch {
        /// Input index.
        index: usize,
        /// Batch of input 0.
        expected: usize,
        /// Batch of this input.
        found: usize,
    },
    /// An input's element type does not match the model.
    #[error("input {index}: the model takes {expected}, got {found}")]
    InputDType {
        /// Input index.
        index: usize,
        /// What the model takes.
        expected: &'static str,
        /// What was given.
        found: &'static str,
    },
    /// The model changed under the session (cannot happen with a validated model).
    #[error("internal error: {0}")]
    Internal(&'static str),
    /// A run's input shape gives a bounded dim (format 2.0) a value outside its range.
    #[error("input {input} axis {axis}: dim #{sym} = {value} is outside its range {min}..={max}")]
    DimOutOfRange {
        /// Input index.
        input: usize,
        /// Axis of the per-sample shape.
        axis: usize,
        /// Symbol index (the file's dims section names it).
        sym: u32,
        /// The value the shape gives.
        value: usize,
        /// Smallest value allowed.
        min: u32,
        /// Largest value allowed.
        max: u32,
    },
    /// Two input axes that share a bounded dim disagree.
    #[error(
        "input {input} axis {axis} gives dim #{sym} = {found}, input {first_input} axis {first_axis} gave {expected}"
    )]
    DimMismatch {
        /// Symbol index.
        sym: u32,
        /// Input index of the disagreeing axis.
        input: usize,
        /// Its axis.
        axis: usize,
        /// Its value.
        found: usize,
        /// The input that gave the value first.
        first_input: usize,
        /// Its axis.
        first_axis: usize,
        /// The value it gave.
        expected: usize,
    },
    /// A run-time dim (format 2.0 [`SymSource`](kestrel_rt_format::Target::SymSource): a size
    /// the data decide, such as the number of non-zero entries a `NonZero` finds) came out of
    /// its range in this run, or the samples of a batch disagree on it.
    #[error("node {node}: run-time dim #{sym} = {value} (sample {sample}) {why} (range {min}..={max})")]
    RunDim {
        /// The node that wrote the value.
        node: u32,
        /// Symbol index (the file's dims section names it).
        sym: u32,
        /// The value (an integer read from the tensor; −1 when not a whole number).
        value: i64,
        /// The sample it came from.
        sample: u32,
        /// What is wrong with it.
        why: RunDimFault,
        /// Smallest value the file supports.
        min: u32,
        /// Largest value (the size memory is planned for).
        max: u32,
    },
    /// A run's input shape differs from what the model takes on a fixed axis (or on an axis
    /// that follows the bounded dims).
    #[error("input {input} axis {axis}: expected {expected}, got {found}")]
    InputShape {
        /// Input index.
        input: usize,
        /// Axis of the per-sample shape.
        axis: usize,
        /// What the model takes.
        expected: usize,
        /// What was given.
        found: usize,
    },
    /// A run's input shape has the wrong rank.
    #[error("input {input}: expected a per-sample shape of rank {expected}, got rank {found}")]
    InputRank {
        /// Input index.
        input: usize,
        /// The model's per-sample rank.
        expected: usize,
        /// The rank given.
        found: usize,
    },
    /// At the dims a run asks for, a node's shapes are not valid (the bounds the file declares
    /// hold a size its graph cannot take: the converter checks a few sizes, not every one).
    #[error("at these input sizes node {node} ({op}) is not valid: {source}")]
    Specialise {
        /// Node index.
        node: u32,
        /// Op name.
        op: &'static str,
        /// Why.
        source: ShapeError,
    },
}

/// [`RunError::BadCapacity`]'s message: zero, over the largest capacity, or a model whose
/// arena overflows even for one sample (no "between 1 and 0").
struct CapacityMsg {
    max: usize,
    found: usize,
}

impl core::fmt::Display for CapacityMsg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match (self.max, self.found) {
            (_, 0) => write!(f, "batch capacity must be at least 1"),
            (0, _) => write!(f, "the model's working memory (arena) overflows the address space even for one sample"),
            (max, found) => {
                write!(f, "batch capacity {found} is too large: its working memory overflows the address space (at most {max})")
            }
        }
    }
}

#[cfg(test)]
mod capacity_tests {
    use super::RunError;
    use alloc::string::ToString;

    #[test]
    fn capacity_errors_never_say_between_1_and_0() {
        let m = |max, found| RunError::BadCapacity { max, found }.to_string();
        assert_eq!(m(10, 0), "batch capacity must be at least 1");
        assert!(m(0, 3).contains("even for one sample"), "{}", m(0, 3));
        assert!(m(10, 11).contains("at most 10"), "{}", m(10, 11));
        assert!(!m(0, 0).contains("between"));
    }
}

/// What is wrong with a run-time dim's value ([`RunError::RunDim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunDimFault {
    /// Not a whole number ≥ 0.
    NotACount,
    /// Outside the range the file supports.
    OutOfRange,
    /// A sample of the batch gives another value than sample 0.
    Disagrees,
}

impl core::fmt::Display for RunDimFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::NotACount => "is not a count",
            Self::OutOfRange => "is outside the sizes this file supports",
            Self::Disagrees => "differs from sample 0's (a batch shares its sizes)",
        })
    }
}
