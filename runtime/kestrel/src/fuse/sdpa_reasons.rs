//! Why the `Sdpa` pattern ([`sdpa`](super::sdpa)) leaves an attention-shaped softmax, worded by
//! the form met, for the forms no fused node computes:
//!
//! - **scores read by another node** besides the next step to the softmax (attention sinks
//!   applied through the scores' log-sum-exp, GraniteMoeHybrid's and HunYuan's
//!   `sigmoid(logsumexp(s) − sink)` gate): a fused node would compute the scores a second time;
//! - **a softmax over the queries** (the scores transposed before it: GroupViT's group
//!   assignment normalises each key over the groups): the fused nodes normalise over the keys;
//! - **weights gated or mixed before the product with values** (ConViT's gated positional
//!   self-attention, `(1 − σ(g))·softmax(q·kᵀ) + σ(g)·softmax(pos)`, renormalised): the fused
//!   nodes multiply the softmax's own weights with the values;
//! - **constant queries** (learned query tokens folded with their projection: a pooling head's
//!   probe, BLIP-2's Q-Former queries): the fused nodes take queries computed per sample.

use super::dims;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;

/// The node names and shapes of `t`'s readers other than `reader`.
fn others(b: &ModelBuilder, t: TensorId, reader: usize) -> String {
    let mut v: Vec<String> = b
        .consumers(t)
        .into_iter()
        .filter(|&c| c != reader)
        .map(|c| format!("{} {:?}", b.ops()[c].name(), dims(b, b.ops()[c].output()).unwrap_or_default()))
        .collect();
    if b.escapes(t) {
        v.push("the graph's outputs".into());
    }
    v.join(", ")
}

/// The scores' intermediate `t` is read by nodes other than `reader` (the next step to the
/// softmax).
pub(super) fn scores_shared(b: &ModelBuilder, t: TensorId, reader: usize) -> String {
    let name = b.tensor_name(t).unwrap_or("?");
    let lse = b
        .consumers(t)
        .into_iter()
        .any(|c| matches!(b.ops()[c], Op::Unary(u) if u.op == UnaryOp::Exp) || matches!(b.ops()[c], Op::Reduce(_)));
    let why = if lse {
        " (attention sinks through the scores' log-sum-exp, as GraniteMoeHybrid and HunYuan write them): a fused \
         node would compute the scores a second time"
    } else {
        ": a fused node would compute the scores a second time"
    };
    format!("the scores' intermediate `{name}` is also read by {}{why}", others(b, t, reader))
}

/// A node between the score product and the softmax that the pattern does not take.
pub(super) fn before_softmax(b: &ModelBuilder, op: &Op) -> String {
    let (i, o) = (dims(b, op.main_input()).unwrap_or_default(), dims(b, op.output()).unwrap_or_default());
    if let Op::Transpose(tr) = op {
        let r = i.len();
        if r >= 2 && usize::from(tr.perm[r - 1]) == r - 2 && usize::from(tr.perm[r - 2]) == r - 1 {
            return format!(
                "a softmax over the queries (the scores transposed {i:?} -> {o:?} before it, as GroupViT's group \
                 assignment normalises over the groups): the fused nodes normalise over the keys"
            );
        }
    }
    format!("{} {i:?} -> {o:?} between the score product and the softmax", op.name())
}

/// The weights `w` (after the softmax and its views) feed node `c`, not a product with values.
pub(super) fn weights_used(b: &ModelBuilder, w: TensorId, c: usize) -> String {
    let op = b.ops()[c];
    let what = match op {
        Op::Binary(bin) => {
            let other = if bin.a == w { bin.b } else { bin.a };
            let d = dims(b, other).unwrap_or_default();
            let kind = if b.is_weight(other) { "a constant" } else { "an activation" };
            format!(
                "a {:?} with {kind} {d:?} (weights gated or mixed before the product with values, as ConViT's \
                 gated positional self-attention mixes two softmaxes): the fused nodes multiply the softmax's own \
                 weights with the values",
                bin.op
            )
        }
        _ => format!("a {}, not a product with values", op.name()),
    };
    format!("the attention weights feed {what}")
}

/// The product with values or the scores' product reads a constant operand (`what`).
pub(super) fn constant_operand(what: &str) -> String {
    if what == "queries" {
        "constant queries (learned query tokens folded with their projection: a pooling head's probe, BLIP-2's \
         Q-Former queries): the fused nodes take queries computed per sample"
            .into()
    } else {
        format!("constant {what}")
    }
}
