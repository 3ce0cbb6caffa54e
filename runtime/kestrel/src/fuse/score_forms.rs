//! Score forms between the score product and the softmax that the `Sdpa` pattern
//! ([`sdpa`](super::sdpa)) folds into its scale and bias, and the one it reports by name:
//!
//! - **A floor on the scores**, `max(x, c)` with a scalar `c` (Hugging Face's XGLM, and other
//!   decoders, clamp the masked scores at `torch.finfo.min` so that a padding mask added to a
//!   causal mask cannot reach −∞). With `c` (in the softmax's units) at most
//!   [`ABSORBS`](super::score_mask) (−1e30), `max(σ·s + B, c)` is `σ·s + max(B, c)` for every
//!   score product `|σ·s| < 1e22`: where `B ≥ c` both are `σ·s + B` (or a masked value whose
//!   weight is 0 beside any visible key), and where `B < c` (−∞) both are `c` (`σ·s + c` rounds
//!   to `c`). A row masked everywhere is all `c` either way: uniform weights, as the clamped
//!   softmax gives (no NaN: the floor replaces its −∞). So the floor is folded into the bias:
//!   `max(B, c)`, and dropped where there is no bias (`σ·s ≥ c` for any finite score). A floor
//!   above −1e30 is left unfused (on a row it masks everywhere the fused node's `σ·s + c` would
//!   not be uniform).
//! - **A masked fill with a computed condition**, `where(m, fill, s)` lowered as
//!   `When(fill, m) + Unless(s, m)` (or the branches the other way round): Hugging Face's XLM,
//!   FlauBERT and FSMT mask padded keys so. It is `s + When(fill, m)` where `m` masks: with
//!   `fill` (scaled) at most −1e30, a masked score `s + fill` rounds to `fill`, so a partly
//!   masked row keeps the same weights (0 where masked) and a row masked everywhere is uniform
//!   either way; with `fill` −∞ a row masked everywhere is NaN in the softmax and zeros in the
//!   fused node (as for an additive −∞ padding mask, which the fused nodes take too).
//! - **A product of the scores by a constant** holding 0 and one other value `k` (GPT's causal
//!   `w·b` with the `1/√d` scale folded into `b`), or one value throughout (Swin V2's logit
//!   scale, `exp(min(τ, log 100))` per head, equal across heads at initialisation): the scale
//!   `k` times a 0/1 masked fill.
//! - **Talking heads** (CaiT): the scores mixed across heads (a pointwise convolution or a dense
//!   layer over the head axis) before the softmax. The fused nodes take each head's own scores,
//!   so these are left unfused, with that reason.

use super::{dims, scalar, sole_consumer};
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;

/// A scalar floor folds only at or below this (in the softmax's units; see the module docs).
pub(super) const FLOOR_MAX: f32 = -1e30;

/// `max(x, c)` (either operand order) with `c` a one-element constant: `x` and `c`.
pub(super) fn floor(b: &ModelBuilder, bin: &Binary) -> Option<(TensorId, f32)> {
    if bin.op != BinaryOp::Max {
        return None;
    }
    match (scalar(b, bin.b), scalar(b, bin.a)) {
        (Some(c), _) if !b.is_weight(bin.a) => Some((bin.a, c)),
        (None, Some(c)) if !b.is_weight(bin.b) => Some((bin.b, c)),
        _ => None,
    }
}

/// `where(m, fill, s)` as lowered: `When(fill, m) + Unless(s, m)` or `When(s, m) + Unless(fill,
/// m)`, the fill a one-element constant, the scores' pick read by the addition only.
#[derive(Clone, Copy, Debug)]
pub(super) struct WhereFill {
    /// The scores (the branch that is not the fill).
    pub scores: TensorId,
    /// The node picking the scores (`When` or `Unless`).
    pub scores_node: usize,
    /// The condition `m`.
    pub cond: TensorId,
    /// The fill's constant (one element) and its value.
    pub fill: TensorId,
    pub value: f32,
    /// The pick that keeps the fill where it is taken: `When` (fill where `m ≠ 0`) or `Unless`.
    pub fill_op: BinaryOp,
    /// The node picking the fill, where the addition is its only reader (then part of the region).
    pub fill_node: Option<usize>,
}

/// Matches [`WhereFill`] at the addition `add` (node `at`).
pub(super) fn where_fill(b: &ModelBuilder, add: &Binary, at: usize) -> Option<WhereFill> {
    if add.op != BinaryOp::Add {
        return None;
    }
    let pick = |t: TensorId| {
        let n = b.producer(t)?;
        match b.ops()[n] {
            Op::Binary(p) if matches!(p.op, BinaryOp::When | BinaryOp::Unless) => Some((n, p)),
            _ => None,
        }
    };
    let ((na, pa), (nc, pc)) = (pick(add.a)?, pick(add.b)?);
    if pa.b != pc.b || pa.op == pc.op {
        return None;
    }
    let ((fn_, f), (sn, s)) = if scalar(b, pa.a).is_some() { ((na, pa), (nc, pc)) } else { ((nc, pc), (na, pa)) };
    let value = scalar(b, f.a)?;
    if b.is_weight(s.a) || b.is_weight(s.b) || sole_consumer(b, s.y) != Some(at) {
        return None;
    }
    Some(WhereFill {
        scores: s.a,
        scores_node: sn,
        cond: s.b,
        fill: f.a,
        value,
        fill_op: f.op,
        fill_node: (sole_consumer(b, f.y) == Some(at)).then_some(fn_),
    })
}

/// A constant the scores are multiplied by, as a scale and a 0/1 keep: values all 0 or `k`
/// (some `k`, not 0) give `(k, keep)`; `None` where the constant holds two nonzero values.
pub(super) fn scaled_keep(values: &[f32]) -> Option<(f32, Vec<f32>)> {
    let k = values.iter().copied().find(|&v| v != 0.0)?;
    if !k.is_finite() || values.iter().any(|&v| v != 0.0 && v != k) {
        return None;
    }
    Some((k, values.iter().map(|&v| if v == 0.0 { 0.0 } else { 1.0 }).collect()))
}

/// Is node `n` (its output read, through views, by the softmax) a mixing of score heads: a
/// pointwise convolution or dense layer whose input is a score product of two activations
/// through views and scalar scales only? (CaiT's talking heads.)
pub(super) fn mixes_heads(b: &ModelBuilder, n: usize) -> bool {
    let x = match b.ops()[n] {
        Op::Conv2d(c) => {
            let k = dims(b, c.proj.w).unwrap_or_default();
            if k.len() != 4 || k[2] != 1 || k[3] != 1 {
                return false;
            }
            c.x
        }
        Op::Dense(d) => d.x,
        _ => return false,
    };
    let mut t = x;
    for _ in 0..8 {
        let Some(p) = b.producer(t) else { return false };
        t = match b.ops()[p] {
            Op::MatMul(m) => return !b.is_weight(m.a) && !b.is_weight(m.b),
            Op::Reshape(r) => r.x,
            Op::Transpose(r) => r.x,
            Op::Binary(bin) if matches!(bin.op, BinaryOp::Mul | BinaryOp::Div) && scalar(b, bin.b).is_some() => bin.a,
            Op::Binary(bin) if bin.op == BinaryOp::Mul && scalar(b, bin.a).is_some() => bin.b,
            _ => return false,
        };
    }
    false
}

/// The head mixing ([`mixes_heads`]) at node `n` or behind it through views: its node.
pub(super) fn head_mixing_at(b: &ModelBuilder, mut n: usize) -> Option<usize> {
    for _ in 0..8 {
        if mixes_heads(b, n) {
            return Some(n);
        }
        n = match b.ops()[n] {
            Op::Reshape(r) => b.producer(r.x)?,
            Op::Transpose(r) => b.producer(r.x)?,
            _ => return None,
        };
    }
    None
}

/// Gives every reader of a shared fill pick its own copy: `When(fill, m)` or `Unless(fill, m)`,
/// `fill` a one-element constant, read by several additions of a score pick of the same `m`
/// (the layers of XLM share one, after `merge_duplicates`). Each `Sdpa` region then holds its own
/// pick, computed from the condition (the same op on the same inputs: the same values). Returns
/// how many copies were made.
pub(super) fn unshare_fill_picks(b: &mut ModelBuilder) -> usize {
    let mut copies = 0;
    let mut n = 0;
    while n < b.ops().len() {
        let op = b.ops()[n];
        let y = op.output();
        let readers = b.consumers(y);
        let shared = match op {
            Op::Binary(f) if matches!(f.op, BinaryOp::When | BinaryOp::Unless) && scalar(b, f.a).is_some() => {
                readers.len() > 1
                    && !b.escapes(y)
                    && readers.iter().all(|&c| match b.ops()[c] {
                        Op::Binary(add) => where_fill(b, &add, c).is_some_and(|w| w.fill == f.a && w.cond == f.b),
                        _ => false,
                    })
            }
            _ => false,
        };
        if shared {
            // Last reader first: inserting a copy before a reader moves only the nodes after it.
            for &c in readers[1..].iter().rev() {
                let Some(z) = dims(b, y).and_then(|d| b.new_activation("unshared_fill", &d).ok()) else { break };
                let copy = crate::builder::remap_op(&op, |t| if t == y { z } else { t });
                let reader = crate::builder::remap_op(&b.ops()[c], |t| if t == y { z } else { t });
                let region = crate::builder::Region { nodes: vec![c], inputs: Vec::new(), output: reader.output() };
                if b.replace(&region, vec![copy, reader]).is_ok() {
                    copies += 1;
                }
            }
        }
        n += 1;
    }
    copies
}
