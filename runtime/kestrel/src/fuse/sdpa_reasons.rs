//! Why the `Sdpa` pattern ([`sdpa`](super::sdpa)) leaves an attention-shaped softmax, worded by
//! the form met, for the forms no fused node computes:
//!
//! - **scores read by another node** besides the next step to the softmax (other than the
//!   attention-sink gate `sigmoid(logsumexp(s) − sink)` and the row maximum of a stable softmax,
//!   which [`sdpa_sinks`](super::sdpa_sinks) takes): a fused node would compute the scores a
//!   second time;
//! - **a softmax over the queries** (the scores transposed before it: GroupViT's group
//!   assignment normalises each key over the groups): not an `Sdpa` of any operand order. The
//!   node's weights sum to 1 over the axis its product with values sums over; these sum to 1
//!   over the queries while the product sums over the keys (swapping queries and keys makes the
//!   product sum over the queries instead). Written over the keys, `w_ij = exp(s_ij − lse_i' s_i'j)`
//!   needs a bias of minus each key's log-sum-exp over the queries, computed from the same
//!   scores in a pass of its own; and GroupViT's eval form (`hard_softmax`) keeps only the
//!   one-hot of the argmax over the queries (`y_hard − y_soft + y_soft`, the soft weights
//!   cancelling), divided by each group's count plus ε, which no softmax computes;
//! - **weights gated or mixed before the product with values** by an activation, or by a
//!   constant in a form [`sdpa_mixed`](super::sdpa_mixed) does not take (it takes ConViT's gated
//!   positional self-attention, `(1 − σ(g))·softmax(q·kᵀ) + σ(g)·softmax(pos)`, renormalised,
//!   and says why where it does not): the fused nodes multiply the softmax's own weights with
//!   the values;
//! - **scores padded on the key axis** (a slice writing them into a longer key axis, as tract
//!   lowers a concatenation): with a new column that is no constant logit per head (a constant
//!   one, FLiNT's and GPT-OSS's sinks, is the node's sink: [`sdpa_sinks`](super::sdpa_sinks));
//!   padded score products that tile the key axis (keys concatenated from several products:
//!   Pegasus-X's local blocks and global tokens) are joined into one product by
//!   [`sdpa_concat_keys`](super::sdpa_concat_keys), which says why where it does not;
//! - **constant queries** (learned query tokens folded with their projection: a pooling head's
//!   probe, BLIP-2's Q-Former queries) in a form [`const_queries`](super::const_queries) does not
//!   rewrite: tract writes their scores as the keys times the constant (`k · Qᵀ`, `[.., Tk, Tq]`)
//!   viewed or transposed to `[.., Tq, Tk]`, which is no product of two activations; such a
//!   softmax is found by [`constant_queries`] and reported (`const_queries` names the step it
//!   does not take where it finds the product).

use super::dims;
use super::sdpa_walk::attention_shaped;
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
        " (a log-sum-exp or maximum of the scores not in the forms taken: an attention-sink gate \
         sigmoid(logsumexp(s) − sink) multiplying the product with values, or s − max(s)): a fused node would \
         compute the scores a second time"
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
                 assignment normalises over the groups): no Sdpa computes it, whose weights sum to 1 over the keys \
                 the product with values sums over, while these sum to 1 over the queries (as an Sdpa over the \
                 keys it would need a bias of minus each key's log-sum-exp over the queries, a second pass over \
                 the same scores; GroupViT's eval form keeps only a one-hot of the argmax over the queries, \
                 straight-through y_hard − y_soft + y_soft, which is no softmax at all)"
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
                "a {:?} with {kind} {d:?} (weights gated or mixed before the product with values): the fused \
                 nodes multiply the softmax's own weights with the values",
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

/// Is softmax `sm` over scores of constant queries: the keys times a constant (`k · Qᵀ`, the keys'
/// rows the softmax's axis), through views, transposes and element-wise steps, and its weights
/// (through views and transposes) the left or right factor of a product with activation values?
pub(super) fn constant_queries(b: &ModelBuilder, sm: &Softmax) -> bool {
    let Some(&tk) = dims(b, sm.x).as_deref().and_then(<[usize]>::last) else { return false };
    keys_times_constant(b, sm.x, tk, 12) && weights_meet_values(b, sm.y)
}

fn keys_times_constant(b: &ModelBuilder, t: TensorId, tk: usize, depth: usize) -> bool {
    let Some(p) = b.producer(t) else { return false };
    match b.ops()[p] {
        Op::MatMul(m) => {
            let rows = dims(b, m.a).and_then(|d| d.len().checked_sub(2).map(|i| d[i]));
            !b.is_weight(m.a) && b.is_weight(m.b) && rows == Some(tk)
        }
        _ if depth == 0 => false,
        Op::Reshape(r) => keys_times_constant(b, r.x, tk, depth - 1),
        Op::Transpose(r) => keys_times_constant(b, r.x, tk, depth - 1),
        Op::Unary(u) => keys_times_constant(b, u.x, tk, depth - 1),
        Op::Binary(bin) => keys_times_constant(b, bin.a, tk, depth - 1) || keys_times_constant(b, bin.b, tk, depth - 1),
        _ => false,
    }
}

/// Do the weights `w` (through views and transposes) meet a product of two activations?
pub(super) fn weights_meet_values(b: &ModelBuilder, mut w: TensorId) -> bool {
    for _ in 0..8 {
        let readers = b.consumers(w);
        let [c] = readers[..] else { return false };
        match b.ops()[c] {
            Op::Reshape(r) => w = r.y,
            Op::Transpose(r) => w = r.y,
            Op::MatMul(m) => return !b.is_weight(m.a) && !b.is_weight(m.b),
            _ => return false,
        }
    }
    false
}

/// A slice writing `t`'s input into a longer last axis (a pad: output index `offset`, length
/// `len > count`): whether that input is attention-shaped scores.
fn padded_keys(b: &ModelBuilder, t: TensorId) -> Option<bool> {
    let p = b.producer(t)?;
    let Op::Slice(sl) = b.ops()[p] else { return None };
    let r = dims(b, sl.x)?.len();
    (r >= 1 && sl.axis as usize == r - 1 && (sl.offset > 0 || sl.len > sl.count)).then(|| attention_shaped(b, sl.x, 12))
}

/// An addition before the softmax where neither term comes from the score product through the
/// steps the pattern takes.
pub(super) fn neither_term_scores(b: &ModelBuilder, add: &Binary) -> String {
    match (padded_keys(b, add.a), padded_keys(b, add.b)) {
        (Some(true), Some(true)) => "keys concatenated from two score products (each padded on the key axis and \
             added: local and global attention as Pegasus-X writes it): the fused nodes take one score product"
            .into(),
        (Some(true), _) | (_, Some(true)) => "the scores padded on the key axis with another term added in the new \
             columns that is not one constant logit per row (an attention sink: one column of zeros on the keys and \
             the logit in the new column, cut after the softmax): the fused nodes' sink is a constant per head"
            .into(),
        _ => {
            let name = |t: TensorId| b.producer(t).map_or("an input", |p| b.ops()[p].name());
            format!(
                "an addition of a {} and a {} where neither term comes from the score product",
                name(add.a),
                name(add.b)
            )
        }
    }
}
