//! Softmax over the last axis (row maximum subtracted before exp).

use crate::error::ShapeError;
use crate::kernels::simd::softmax as softmax_in_place;
use kestrel_rt_format::Shape;

/// Softmax over rows of `n` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoftmaxParams {
    /// Rows (product of all axes but the last).
    pub rows: usize,
    /// Row length (the last axis).
    pub n: usize,
}

impl SoftmaxParams {
    /// Params for an input of shape `x` (output the same). An empty axis (a run-time dim at 0)
    /// gives no row: nothing to compute.
    pub fn new(x: &Shape) -> Result<Self, ShapeError> {
        const OP: &str = "Softmax";
        let total = x.numel().ok_or(ShapeError::Invalid { op: OP, what: "element count overflows" })?;
        let n = x.last();
        if total == 0 {
            return Ok(Self { rows: 0, n });
        }
        Ok(Self { rows: total / n, n })
    }
}

/// Scratch for [`softmax`]: none.
pub fn softmax_scratch(_p: &SoftmaxParams) -> usize {
    0
}

/// `y[r, :] = softmax(x[r, :])` for each row. `scratch` is unused.
pub fn softmax(p: &SoftmaxParams, x: &[f32], y: &mut [f32], _scratch: &mut [f32]) {
    let len = p.rows * p.n;
    if len == 0 {
        return;
    }
    y[..len].copy_from_slice(&x[..len]);
    for row in y[..len].chunks_exact_mut(p.n) {
        softmax_in_place(row);
    }
}
