//! Dense layer: `y[r, o] = act(Σ_i x[r, i] · W[o, i] + b[o])` for weights in any encoding.

use crate::math::activate;
use kestrel_format::ops::Activation;
use kestrel_format::WeightView;

/// Computes `y = act(x Wᵀ + b)` for `rows` rows.
///
/// * `x`: `[rows, in]`, `w`: `[out, in]` (any encoding), `b`: `[out]` (a `[1, out]` view),
///   `y`: `[rows, out]`. Dequantisation is fused into the dot products: no scratch needed.
pub fn linear(
    x: &[f32],
    rows: usize,
    w: &WeightView<'_>,
    b: Option<&WeightView<'_>>,
    act: Activation,
    y: &mut [f32],
) {
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
