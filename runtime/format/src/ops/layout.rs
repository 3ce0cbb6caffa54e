//! The layout ops: views and copies that move values without arithmetic.

use super::TensorId;

/// Reshape/flatten: a view. The output shares the input's arena bytes (same offset).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reshape {
    /// Input.
    pub x: TensorId,
    /// Output, same element count, same arena offset.
    pub y: TensorId,
}

/// Permutation of per-sample axes (materialised: our kernels read contiguous tensors).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Transpose {
    /// Input.
    pub x: TensorId,
    /// `perm[i]` is the input axis that becomes output axis i; entries past the rank are unused.
    pub perm: [u8; crate::dtype::MAX_RANK],
    /// Output.
    pub y: TensorId,
}

/// A strided window of one axis, placed at an offset of a zero-filled output: the input seen as
/// `[outer, n, inner]` around `axis`, the output as `[outer, len, inner]`, with
/// `y[o, offset + j, i] = x[o, start + j·step, i]` for `j < count` and zeros elsewhere on the
/// axis. One copy for ONNX `Slice`, a single-index `Gather`, a piece of a `Concat` and constant
/// padding along one axis (which exporters otherwise leave as one-hot products).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Slice {
    /// Input (an activation).
    pub x: TensorId,
    /// The per-sample axis the window runs along.
    pub axis: u32,
    /// First input index read.
    pub start: u32,
    /// Input indices between two reads (≥ 1).
    pub step: u32,
    /// Indices read (≥ 1).
    pub count: u32,
    /// Output index of the first read.
    pub offset: u32,
    /// The output's length on the axis (≥ `offset + count`).
    pub len: u32,
    /// Output.
    pub y: TensorId,
}

/// Selection by index along one axis (numpy `take`, ONNX `Gather`): `x` seen as `[outer, n,
/// inner]` around `axis`, `idx` holding `k` indices (any shape), the output `[outer, k, inner]`
/// with `y[o, j, i] = x[o, idx[j], i]`; its shape is `x`'s with `axis` replaced by `idx`'s axes.
/// `idx` is an f32 weight (constant indices, shared by every sample) or an f32 activation (one
/// set per sample, computed at run time); either holds integer values (exact in f32 below 2^24).
/// An index `v` with `-n ≤ v < 0` counts from the end (`v + n`); any other value outside `0..n`
/// (or not an integer) is out of range: a constant one is refused when the model loads, a
/// computed one is a run-time error on the CPU (`RunError::IndexOutOfRange`) and a zero block on
/// backends that cannot stop a dispatch (wgpu).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gather {
    /// Input (an f32 activation).
    pub x: TensorId,
    /// Indices: an f32 weight or an f32 activation holding integers.
    pub idx: TensorId,
    /// The per-sample axis of `x` indexed.
    pub axis: u32,
    /// Output.
    pub y: TensorId,
}
