//! Layer norm over the last axis: `y = (x − mean) / √(var + ε) · γ + β` (biased variance).

use crate::error::{expect_eq, ShapeError};
use kestrel_format::{Shape, WeightView};

/// Layer norm over rows of `d` features.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormParams {
    /// Rows (product of all axes but the last).
    pub rows: usize,
    /// Features normalised together (the last axis).
    pub d: usize,
    /// ε added to the variance.
    pub eps: f32,
}

impl LayerNormParams {
    /// Params for an input of shape `x` (output the same), checking `gamma` and `beta` hold
    /// `d` elements each (any encoding, any matrix view of a `[d]` vector).
    pub fn new(x: &Shape, gamma: &WeightView<'_>, beta: Option<&WeightView<'_>>, eps: f32) -> Result<Self, ShapeError> {
        const OP: &str = "LayerNorm";
        let n = x.numel().ok_or(ShapeError::Invalid { op: OP, what: "element count overflows" })?;
        let d = x.last();
        if d == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "last axis is empty" });
        }
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(ShapeError::Invalid { op: OP, what: "eps must be finite and non-negative" });
        }
        expect_eq(OP, "gamma elements", d, gamma.len())?;
        if let Some(b) = beta {
            expect_eq(OP, "beta elements", d, b.len())?;
        }
        Ok(Self { rows: n / d, d, eps })
    }
}

/// Scratch for [`layer_norm`]: γ and β decoded to f32 (`2·d`).
pub fn layer_norm_scratch(p: &LayerNormParams) -> usize {
    2 * p.d
}

/// Normalises each of the `p.rows` rows of `x` into `y` (`rows·d` elements each).
pub fn layer_norm(
    p: &LayerNormParams,
    gamma: &WeightView<'_>,
    beta: Option<&WeightView<'_>>,
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let d = p.d;
    let (g, rest) = scratch[..2 * d].split_at_mut(d);
    gamma.decode_into(g);
    let b = match beta {
        Some(bv) => {
            bv.decode_into(rest);
            Some(&*rest)
        }
        None => None,
    };
    let inv_d = 1.0 / d as f32;
    for (xr, yr) in x[..p.rows * d].chunks_exact(d).zip(y[..p.rows * d].chunks_exact_mut(d)) {
        let mean = sum_lanes(xr, |v| v) * inv_d;
        let var = sum_lanes(xr, |v| (v - mean) * (v - mean)) * inv_d;
        let inv = 1.0 / libm::sqrtf(var + p.eps);
        match b {
            Some(b) => {
                for (((o, &v), &gg), &bb) in yr.iter_mut().zip(xr).zip(g.iter()).zip(b) {
                    *o = (v - mean) * inv * gg + bb;
                }
            }
            None => {
                for ((o, &v), &gg) in yr.iter_mut().zip(xr).zip(g.iter()) {
                    *o = (v - mean) * inv * gg;
                }
            }
        }
    }
}

/// `Σ f(v)` with 8 independent partial sums (lane `i` takes elements `≡ i mod 8`), added
/// pairwise at the end: the compiler turns it into one SIMD accumulator (a plain `sum()` is a
/// serial chain it may not reorder), and the error bound is that of 8 shorter sums.
#[inline]
fn sum_lanes(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += f(v);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}
