//! Talking heads for the `Sdpa` pattern ([`sdpa`](super::sdpa)): the scores mixed across the
//! heads by a learned `[H, H]` matrix and bias before the softmax, the weights again after it
//! (CaiT's `proj_l` and `proj_w`, EfficientFormerV2's `talking_head1` and `talking_head2`). The
//! converter writes each mixing, however exported (a MatMul or Gemm over the head axis moved
//! last, a 1×1 Conv, an Einsum), as a pointwise `Conv2d` over the scores viewed `[H, 1, Tq·Tk]`
//! (the heads its channels, each head's scores in their flat order) between reshape views; such
//! a mixing becomes the node's `mix_pre` or `mix_post` (`[H, H + 1]`: each row the weights
//! then the bias). A mixing in another form (a dense layer over heads moved last by transposes,
//! a grouped or strided convolution, one with an activation) is reported with its reason.

use super::{dims, sole_consumer};
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;

/// A head mixing found: the tensor it reads, and its rows `[W[g, 0..H], c[g]]` for each output
/// head `g` (`H · (H + 1)` values).
pub(super) struct HeadMix {
    pub(super) x: TensorId,
    pub(super) heads: usize,
    pub(super) rows: Vec<f32>,
}

/// Node `n` as a head mixing: a pointwise `Conv2d` (1×1, stride 1, no padding or groups, no
/// activation or clamp) with as many output channels as input channels, its weight and bias
/// constants. `Ok(None)` where `n` is no convolution; `Err` (the reason) for a convolution that
/// mixes otherwise.
pub(super) fn head_mix(b: &ModelBuilder, n: usize) -> Result<Option<HeadMix>, String> {
    let Op::Conv2d(c) = b.ops()[n] else { return Ok(None) };
    let (w, x) = (dims(b, c.proj.w).unwrap_or_default(), dims(b, c.x).unwrap_or_default());
    let why = |what: &str| Err(format!("talking heads: a head mixing (Conv2d {x:?} -> weight {w:?}) {what}"));
    if w.len() != 4 || w[2] != 1 || w[3] != 1 || w[0] != w[1] || x.first() != Some(&w[1]) {
        return why("that is no pointwise mixing of as many heads as it reads");
    }
    if c.groups != 1 || c.stride != [1, 1] || c.dilation != [1, 1] || c.pad != [0; 4] {
        return why("with groups, strides, dilation or padding");
    }
    if c.residual.is_some() {
        return why("with a residual");
    }
    if c.act != Activation::None || c.clamp.is_some() {
        return why("followed by an activation or bounds");
    }
    let h = w[0];
    let Some(wv) = b.weight_values(c.proj.w) else { return why("whose weight is computed") };
    let bias = match c.proj.b {
        Some(t) => match b.weight_values(t) {
            Some(v) if v.len() == h => v.to_vec(),
            _ => return why("whose bias is computed or of another size"),
        },
        None => vec![0.0; h],
    };
    if super::skipped("talking") {
        return why("left as it is (KESTREL_FUSE_SKIP=talking)");
    }
    let mut rows = Vec::with_capacity(h * (h + 1));
    for g in 0..h {
        rows.extend_from_slice(&wv[g * h..(g + 1) * h]);
        rows.push(bias[g]);
    }
    Ok(Some(HeadMix { x: c.x, heads: h, rows }))
}

/// After the softmax: the weights `probs` read (each step by the next only) by reshape views,
/// a head mixing ([`head_mix`]) and reshape views after it. The mixed weights' tensor, the
/// nodes passed and the mixing; `Ok(None)` where no mixing follows the views.
pub(super) fn post_mix(b: &ModelBuilder, probs: TensorId) -> Result<Option<(TensorId, Vec<usize>, HeadMix)>, String> {
    let (mut t, mut nodes) = (probs, Vec::new());
    let mix = loop {
        let Some(c) = sole_consumer(b, t) else { return Ok(None) };
        match b.ops()[c] {
            Op::Reshape(r) => t = r.y,
            Op::Conv2d(_) => match head_mix(b, c)? {
                Some(m) => {
                    t = b.ops()[c].output();
                    nodes.push(c);
                    break m;
                }
                None => return Ok(None),
            },
            _ => return Ok(None),
        }
        nodes.push(c);
    };
    // The views back to the scores' shape.
    while let Some(c) = sole_consumer(b, t) {
        let Op::Reshape(r) = b.ops()[c] else { break };
        nodes.push(c);
        t = r.y;
    }
    Ok(Some((t, nodes, mix)))
}

/// The node's mixing weight (`[H, H + 1]`, each row scaled by `scale`: the scales between a
/// mixing before the softmax and the softmax), checked against the node's query heads `hq`.
pub(super) fn mix_weight(
    b: &mut ModelBuilder,
    m: &HeadMix,
    scale: f32,
    hq: usize,
    name: &str,
) -> Result<TensorId, String> {
    if m.heads != hq {
        return Err(format!(
            "talking heads: a mixing of {} heads where the scores have {hq} (the head axis is not the mixing's)",
            m.heads
        ));
    }
    let rows: Vec<f32> = m.rows.iter().map(|&w| w * scale).collect();
    b.weight_as(name, &[hq, hq + 1], rows, kestrel_rt_format::DType::F32).map_err(|e| e.to_string())
}
