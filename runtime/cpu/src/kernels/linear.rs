//! Dense layer: `y[r, o] = act(Σ_i x[r, i] · W[o, i] + b[o])` for weights in any encoding.

use crate::math::activate;
use kestrel_format::ops::Activation;
use kestrel_format::WeightView;

/// Computes `y = act(x Wᵀ + b)` for `rows` rows.
///
/// * `x`: `[rows, in]`, `w`: `[out, in]` (any encoding), `b`: `[out]` (a `[1, out]` view),
///   `y`: `[rows, out]`. Dequantisation is fused into the dot products: no scratch needed.
pub fn linear(x: &[f32], rows: usize, w: &WeightView<'_>, b: Option<&WeightView<'_>>, act: Activation, y: &mut [f32]) {
    let (out, inp) = (w.rows(), w.cols());
    debug_assert_eq!(x.len(), rows * inp);
    debug_assert_eq!(y.len(), rows * out);
    for o in 0..out {
        let bias = b.map_or(0.0, |b| b.get(0, o));
        for r in 0..rows {
            y[r * out + o] = w.dot_row(o, &x[r * inp..(r + 1) * inp]) + bias;
        }
    }
    if act != Activation::None {
        activate(act, y);
    }
}

/// A dense projection's weights: `w [out, in]` and optional bias `[out]`, in any encoding.
#[derive(Clone, Copy, Debug)]
pub struct ProjW<'a> {
    /// Weight `[out, in]`.
    pub w: WeightView<'a>,
    /// Bias, viewed as `[1, out]`.
    pub b: Option<WeightView<'a>>,
}

impl ProjW<'_> {
    /// Output features.
    pub fn out_features(&self) -> usize {
        self.w.rows()
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.w.cols()
    }

    /// `y [rows, out] = x [rows, in] · Wᵀ + b`.
    #[inline]
    pub fn apply(&self, x: &[f32], rows: usize, y: &mut [f32]) {
        linear(x, rows, &self.w, self.b.as_ref(), Activation::None, y);
    }

    /// Checks `w` is `[out, in]` and the bias has `out` elements.
    pub fn check(&self, op: &'static str, out: usize, inp: usize) -> Result<(), crate::error::ShapeError> {
        crate::error::expect_eq(op, "weight rows (out features)", out, self.w.rows())?;
        crate::error::expect_eq(op, "weight cols (in features)", inp, self.w.cols())?;
        if let Some(b) = &self.b {
            crate::error::expect_eq(op, "bias length", out, b.len())?;
        }
        Ok(())
    }
}
