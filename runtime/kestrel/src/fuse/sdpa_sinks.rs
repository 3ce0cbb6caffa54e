//! Attention sinks for the `Sdpa` pattern ([`sdpa`](super::sdpa)): a learned logit per head that
//! joins the softmax's denominator with no value row, `w_j = e^{s_j} / (Σ e^{s_j'} + e^{sink_h})`,
//! the node's `sink` input. Models write it in two forms, both taken here:
//!
//! - **padded keys** (GPT-OSS, FLiNT): the scores concatenated with a sink column, which tract
//!   lowers to a slice padding the key axis by one column plus an addition of the sink in the new
//!   column (a constant, zero on the keys); the softmax; the sink column cut off before the product with values ([`padded_sink`],
//!   [`cuts_sink`]);
//! - **log-sum-exp gate** (GraniteMoeHybrid's sliding-window layers): `softmax(s)·V ·
//!   sigmoid(logsumexp(s) − sink)`, the same weights (`σ(lse − z) = e^{lse} / (e^{lse} + e^z)`):
//!   the softmax's input also read by `Log(ReduceSum(Exp(s)))`, the gate multiplying the product
//!   with values ([`lse_gate`], [`gated_output`]).
//!
//! Besides, the stable softmax written out, `softmax(s − max_j s)` (HunYuan's vision encoder):
//! the same weights wherever a row's maximum is finite ([`row_max_shift`]).

use super::score_mask::broadcast_to;
use super::{dims, sole_consumer};
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;

/// A sink found on the walk back from the softmax: one logit per score row (the softmax's flat
/// row order), in the softmax's units, and how the graph wrote it.
pub(super) struct Sink {
    pub rows: Vec<f32>,
    /// The padded form's key count (the softmax's columns `0..tk` are the scores), to be cut
    /// after the softmax; `None` for the gate form.
    pub padded: Option<usize>,
    /// The gate form's gate (the sigmoid's output, or a view of it), multiplying the product
    /// with values.
    pub gate: Option<TensorId>,
}

/// The last axis of `t` (its dims, the last dim).
fn last(b: &ModelBuilder, t: TensorId) -> Option<(Vec<usize>, usize)> {
    let d = dims(b, t)?;
    let l = *d.last()?;
    Some((d, l))
}

/// `add` (an addition before the softmax where neither term comes from the scores) as the
/// padded form: one term a slice writing `tk` scores into `tk + 1` columns (offset 0), the other
/// a constant sink column (a weight of `tk + 1` columns, zero on the first `tk`, broadcast to the
/// scores). The padded scores (the walk goes on from them), the pad's node, and the sink: its
/// rows' logits times `scale`
/// (the scales between the addition and the softmax). `None` where it is not that form.
pub(super) fn padded_sink(
    b: &ModelBuilder,
    add: &Binary,
    at: usize,
    scale: f32,
) -> Option<(TensorId, Vec<usize>, Sink)> {
    let pad_of = |t: TensorId| -> Option<(usize, Slice)> {
        let p = b.producer(t)?;
        let Op::Slice(sl) = b.ops()[p] else { return None };
        let (d, n) = last(b, sl.x)?;
        let ok = sl.axis as usize + 1 == d.len()
            && sl.start == 0
            && sl.step == 1
            && sl.offset == 0
            && sl.count as usize == n
            && sl.len as usize == n + 1
            && sole_consumer(b, t) == Some(at);
        ok.then_some((p, sl))
    };
    let (pad, sl, other) = match (pad_of(add.a), pad_of(add.b)) {
        (Some((p, sl)), _) => (p, sl, add.b),
        (_, Some((p, sl))) => (p, sl, add.a),
        _ => return None,
    };
    let tk = sl.count as usize;
    let (yd, _) = last(b, add.y)?;
    let nodes = vec![pad];
    // The sink column's values and their dims (last dim 1). (A slice placing a constant column
    // is no valid node: tract folds it into such a constant.)
    if !b.is_weight(other) {
        return None;
    }
    let (mut cd, n) = last(b, other)?;
    let v = b.weight_values(other)?;
    if n != tk + 1 || v.chunks(n).any(|r| r[..tk].iter().any(|&x| x != 0.0)) {
        return None;
    }
    let col: Vec<f32> = v.chunks(n).map(|r| r[tk]).collect();
    *cd.last_mut()? = 1;
    let mut rd = yd;
    *rd.last_mut()? = 1;
    let rows = broadcast_to(&col, &cd, &rd)?.into_iter().map(|z| z * scale).collect();
    Some((sl.x, nodes, Sink { rows, padded: Some(tk), gate: None }))
}

/// Is `sl` the cut of the sink column after the softmax: the first `tk` of `tk + 1` columns?
pub(super) fn cuts_sink(b: &ModelBuilder, sl: &Slice, tk: usize) -> bool {
    let Some((d, n)) = last(b, sl.x) else { return false };
    sl.axis as usize + 1 == d.len()
        && n == tk + 1
        && sl.start == 0
        && sl.step == 1
        && sl.offset == 0
        && sl.count as usize == tk
        && sl.len as usize == tk
}

/// Follows single-reader views forward from `t`: the last tensor and the views' nodes.
fn views_forward(b: &ModelBuilder, mut t: TensorId, nodes: &mut Vec<usize>) -> TensorId {
    while let Some(c) = sole_consumer(b, t) {
        let Op::Reshape(r) = b.ops()[c] else { break };
        nodes.push(c);
        t = r.y;
    }
    t
}

/// The gate form at the softmax's input `s` (read by `reader`, the softmax, and one other node):
/// `sigmoid(Log(ReduceSum_last(Exp(s))) − z)` (or `+ (−z)`, views anywhere after the sum), `z`
/// a constant. The nodes from the `Exp` to the gate's last view, and the sink (`z` per score
/// row); `Err` names what differs, `Ok(None)` where `s` is read otherwise (not this form).
pub(super) fn lse_gate(b: &ModelBuilder, s: TensorId, reader: usize) -> Result<Option<(Vec<usize>, Sink)>, String> {
    let others: Vec<usize> = b.consumers(s).into_iter().filter(|&c| c != reader).collect();
    let [e] = others[..] else { return Ok(None) };
    let Op::Unary(exp) = b.ops()[e] else { return Ok(None) };
    if exp.op != UnaryOp::Exp || b.escapes(s) {
        return Ok(None);
    }
    let not = |what: &str| {
        Err(format!(
            "the scores' exponentials feed {what}, not a log-sum-exp gate (sigmoid(logsumexp(s) − sink)) of the output"
        ))
    };
    let (sd, _) = last(b, s).ok_or("shape")?;
    let mut nodes = vec![e];
    let Some(rn) = sole_consumer(b, exp.y) else { return not("more than one node") };
    let Op::Reduce(r) = b.ops()[rn] else { return not(b.ops()[rn].name()) };
    if r.op != ReduceOp::Sum || r.axis as usize + 1 != sd.len() {
        return not("a reduction other than a sum over the keys");
    }
    nodes.push(rn);
    let sum = views_forward(b, r.y, &mut nodes);
    let Some(ln) = sole_consumer(b, sum) else { return not("a sum read more than once") };
    let Op::Unary(log) = b.ops()[ln] else { return not("a sum not taken its log") };
    if log.op != UnaryOp::Log {
        return not("a sum not taken its log");
    }
    nodes.push(ln);
    let lse = views_forward(b, log.y, &mut nodes);
    let Some(sn) = sole_consumer(b, lse) else { return not("a log-sum-exp read more than once") };
    // The offset by the sink (none: a sink of 0, the subtraction folded away).
    let offset = match b.ops()[sn] {
        Op::Binary(bin) if bin.op == BinaryOp::Sub && bin.a == lse && b.is_weight(bin.b) => Some((bin.b, 1.0, bin.y)),
        Op::Binary(bin) if bin.op == BinaryOp::Add && bin.a == lse && b.is_weight(bin.b) => Some((bin.b, -1.0, bin.y)),
        Op::Binary(bin) if bin.op == BinaryOp::Add && bin.b == lse && b.is_weight(bin.a) => Some((bin.a, -1.0, bin.y)),
        Op::Unary(u) if u.op == UnaryOp::Sigmoid => None,
        _ => return not("a log-sum-exp not offset by a constant sink"),
    };
    let logit = match offset {
        Some((_, _, y)) => {
            nodes.push(sn);
            views_forward(b, y, &mut nodes)
        }
        None => lse,
    };
    let Some(gn) = sole_consumer(b, logit) else { return not("a gate logit read more than once") };
    if !matches!(b.ops()[gn], Op::Unary(u) if u.op == UnaryOp::Sigmoid) {
        return not("a log-sum-exp offset by a constant and not taken its sigmoid");
    }
    nodes.push(gn);
    let gate = views_forward(b, b.ops()[gn].output(), &mut nodes);
    // One logit per score row: the constant broadcast to the offset's shape, in the scores'
    // row order (the sum dropped or kept the key axis; either way one value a row).
    let rows_n = sd[..sd.len() - 1].iter().product::<usize>();
    let rows = match offset {
        Some((z, sign, y)) => {
            let (zd, od) = (dims(b, z).ok_or("shape")?, dims(b, y).ok_or("shape")?);
            let vals = b.weight_values(z).ok_or("sink values")?;
            broadcast_to(vals, &zd, &od)
                .filter(|v| v.len() == rows_n)
                .ok_or("a gate's sink that does not broadcast to one value per score row")?
                .into_iter()
                .map(|v| v * sign)
                .collect()
        }
        None => vec![0.0; rows_n],
    };
    Ok(Some((nodes, Sink { rows, padded: None, gate: Some(gate) })))
}

/// The product with values `y` (through single-reader views) multiplied by the gate (`Mul(y,
/// g)` or `Mul(g, y)`, `g` the gate or a view of it, at the product's shape): the nodes (the
/// views and the product) and the gated output.
pub(super) fn gated_output(b: &ModelBuilder, y: TensorId, gate: TensorId) -> Result<(Vec<usize>, TensorId), String> {
    let not =
        || "the product with values of a log-sum-exp gated softmax is not multiplied by the gate alone".to_string();
    let mut nodes = Vec::new();
    let y = views_forward(b, y, &mut nodes);
    let c = sole_consumer(b, y).ok_or_else(not)?;
    let Op::Binary(m) = b.ops()[c] else { return Err(not()) };
    let g = if m.a == y { m.b } else { m.a };
    if m.op != BinaryOp::Mul || g != gate || dims(b, m.y) != dims(b, y) {
        return Err(not());
    }
    nodes.push(c);
    Ok((nodes, m.y))
}

/// `Sub(x, m)` with `m = ReduceMax_last(x)` (kept dims) read by that subtraction only: the
/// stable softmax written out. The reduction's node.
pub(super) fn row_max_shift(b: &ModelBuilder, bin: &Binary) -> Option<usize> {
    if bin.op != BinaryOp::Sub {
        return None;
    }
    let p = b.producer(bin.b)?;
    let Op::Reduce(r) = b.ops()[p] else { return None };
    let rank = dims(b, bin.a)?.len();
    let ok = r.op == ReduceOp::Max
        && r.keep_dims
        && r.x == bin.a
        && r.axis as usize + 1 == rank
        && sole_consumer(b, bin.b).is_some()
        && b.consumers(bin.a).len() == 2
        && !b.escapes(bin.a);
    ok.then_some(p)
}

/// One sink logit per head from one per score row (`tq` rows a head): `None` where a head's rows
/// differ.
pub(super) fn per_head(rows: &[f32], tq: usize) -> Option<Vec<f32>> {
    rows.chunks(tq.max(1)).map(|c| c.iter().all(|v| v.to_bits() == c[0].to_bits()).then_some(c[0])).collect()
}
