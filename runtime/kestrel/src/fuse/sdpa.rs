//! Attention on computed activations as one `Sdpa` node: `MatMul(q, k)` (k transposed by the
//! product's flag, by a transpose of its last two axes, or stored `[.., D, Tk]`), scalar scales
//! on q, k or the scores (multiplied or divided), a soft cap of the scores (`tanh(s / c) · c`,
//! Gemma 2's, with scales on either side of it), additive biases after it (constants or
//! activations: masks, relative-position biases), a softmax over the keys, and
//! `MatMul(weights, v)`; talking heads, the scores or weights mixed across the heads by a
//! pointwise convolution around the softmax, become the node's head mixings (`sdpa_talking`). Query
//! and key/value heads are the products' leading axes: equal (multi-head), or the keys' a prefix
//! of the queries' with ones after it (grouped-query and multi-query attention, a broadcast
//! product). Every intermediate must be read by the next node only. Runs after every other pass
//! has settled, so the projection-fused `Attention` keeps every block it can take; the numerical
//! check of [`try_replace`](super::try_replace) decides whether the node computes the same thing.

use super::query_rows::{query_rows, slice_bias_rows};
use super::score_forms::{floor, head_mixing_at, scaled_keep, where_fill, FLOOR_MAX};
use super::score_mask::{broadcast_to, combine, MaskStep};
use super::sdpa_reasons::{before_softmax, constant_operand, neither_term_scores, scores_shared, weights_used};
use super::sdpa_sinks::{cuts_sink, gated_output, lse_gate, padded_sink, per_head, row_max_shift, Sink};
use super::sdpa_talking::{head_mix, mix_weight, post_mix, HeadMix};
use super::sdpa_walk::{
    back_through_scales, keeps_keys, kv_heads, leads_to_scores, main_scores, scaled, swaps_last_two,
    view_root_keeping_keys, views_to_keys, SWAP_LAST_TWO,
};
use super::{dims, scalar, skip_nan_guard, sole_consumer};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;
use kestrel_rt_format::DType;

/// One additive bias term of the scores: the tensor and the scale applied to it afterwards
/// (negated where subtracted); or, with `keep`, a masked fill's constant factor of the scores,
/// `keep_scale` times 0 or 1.
struct Term {
    t: TensorId,
    scale: f32,
    /// The shape of the scores it is added to.
    at: Vec<usize>,
    keep: bool,
    keep_scale: f32,
    /// A fill picked by the condition `t` (a masked fill with a computed condition): the fill's
    /// one-element constant and its pick (`When` or `Unless`); the term is `pick(fill, t)`.
    fill: Option<(TensorId, BinaryOp)>,
}

impl Term {
    fn add(t: TensorId, scale: f32, at: Vec<usize>) -> Self {
        Term { t, scale, at, keep: false, keep_scale: 1.0, fill: None }
    }

    /// A constant term (a bias, or a masked fill's keep): not a pick by a computed condition.
    fn constant(&self, b: &ModelBuilder) -> bool {
        b.is_weight(self.t) && self.fill.is_none()
    }
}

/// The numpy broadcast of dims `a` and `c`.
fn broadcast_dims(a: &[usize], c: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(c.len());
    let at = |d: &[usize], i: usize| if i + d.len() < r { 1 } else { d[i + d.len() - r] };
    (0..r)
        .map(|i| match (at(a, i), at(c, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}

/// Computed terms added where the scores are viewed unlike the softmax's grouping and not at
/// every score's size (MViTv2's decomposed relative position: `[.., Tq, kh, kw]` plus `[.., kh,
/// 1]` and `[.., 1, kw]`): those added at one view are summed there with broadcasting (plus a
/// zero constant where they do not fill it) into one term of `full` values, computed in the
/// region (`ops`; their tensors become region `inputs`). The terms, and the tensors so made.
fn sum_regrouped(
    b: &mut ModelBuilder,
    terms: Vec<Term>,
    full: usize,
    grouped: &dyn Fn(&[usize]) -> bool,
    ops: &mut Vec<Op>,
    inputs: &mut Vec<TensorId>,
) -> Result<(Vec<Term>, Vec<TensorId>), String> {
    let mut out = Vec::new();
    let mut groups: Vec<(Vec<usize>, Vec<Term>)> = Vec::new();
    for term in terms {
        let n = dims(b, term.t).map(|d| d.iter().product::<usize>());
        if term.keep || term.constant(b) || term.fill.is_some() || grouped(&term.at) || n == Some(full) {
            out.push(term);
        } else if let Some((_, g)) = groups.iter_mut().find(|(at, _)| *at == term.at) {
            g.push(term);
        } else {
            groups.push((term.at.clone(), vec![term]));
        }
    }
    let e = |e: crate::Error| e.to_string();
    let mut made = Vec::new();
    for (at, group) in groups {
        let mut sum: Option<TensorId> = None;
        for term in group {
            inputs.push(term.t);
            let mut t = term.t;
            let d = dims(b, t).ok_or("shape")?;
            if term.scale != 1.0 {
                let f = b.weight_as("sdpa_bias_scale", &[1], vec![term.scale], DType::F32).map_err(e)?;
                let y = b.new_activation("sdpa_bias", &d).map_err(e)?;
                ops.push(Op::Binary(Binary { a: t, b: f, op: BinaryOp::Mul, y }));
                t = y;
            }
            sum = Some(match sum {
                None => t,
                Some(prev) => {
                    let sd = broadcast_dims(&dims(b, prev).ok_or("shape")?, &d)
                        .ok_or("two score biases that do not broadcast together")?;
                    let y = b.new_activation("sdpa_bias", &sd).map_err(e)?;
                    ops.push(Op::Binary(Binary { a: prev, b: t, op: BinaryOp::Add, y }));
                    y
                }
            });
        }
        let mut t = sum.ok_or("an empty group of terms")?;
        let d = dims(b, t).ok_or("shape")?;
        if broadcast_dims(&d, &at).as_deref() != Some(&at[..]) || at.iter().product::<usize>() != full {
            return Err("a score bias that does not broadcast to the scores it is added to".into());
        }
        if d.iter().product::<usize>() != full {
            let zeros = b.weight_as("sdpa_bias_zeros", &at, vec![0.0; full], DType::F32).map_err(e)?;
            let y = b.new_activation("sdpa_bias", &at).map_err(e)?;
            ops.push(Op::Binary(Binary { a: t, b: zeros, op: BinaryOp::Add, y }));
            t = y;
        }
        made.push(t);
        out.push(Term::add(t, 1.0, at));
    }
    Ok((out, made))
}

pub(super) fn match_sdpa(b: &mut ModelBuilder, softmax: usize) -> Result<(Region, Vec<Op>), String> {
    let Op::Softmax(sm) = b.ops()[softmax] else { return Err("not a softmax".into()) };
    let mut nodes = vec![softmax];
    // Walking back from the softmax: scales seen so far apply to everything further back.
    let (mut s, mut reader, mut scale) = (sm.x, softmax, 1.0f32);
    let mut terms: Vec<Term> = Vec::new();
    // The soft cap, once its tanh is passed: `σ · tanh(x)` with σ the scales after the tanh
    // (its factor `c` among them) is `|σ| · tanh(σ x / |σ|)` (tanh is odd), so the cap is the
    // scale gathered so far and every scale further back (the divisor `c` among them) goes
    // on multiplying the node's `scale`.
    let mut softcap: Option<f32> = None;
    // A floor `max(scores, c)` nearest the softmax, `c` in the softmax's units (score_forms).
    let mut floor_at: Option<f32> = None;
    // An attention sink (sdpa_sinks), and the row maximum of a stable softmax written out, whose
    // reduction reads the scores beside the subtraction.
    let (mut sink, mut row_max): (Option<Sink>, Option<usize>) = (None, None);
    // Talking heads (sdpa_talking): the scores' head mixing, with the scales between it and the
    // softmax (taken into its weights; the scale starts again at 1 behind it).
    let mut mix_pre: Option<(HeadMix, f32)> = None;
    let (mm1n, mm1) = loop {
        let p = b.producer(s).ok_or("the scores are a graph input")?;
        if sole_consumer(b, s) != Some(reader) {
            if let Some(rn) = row_max.take() {
                nodes.push(rn);
            } else if let Some((gate, found)) = if s == sm.x { lse_gate(b, s, reader)? } else { None } {
                nodes.extend(gate);
                sink = Some(found);
            } else {
                return Err(scores_shared(b, s, reader));
            }
        }
        match b.ops()[p] {
            Op::MatMul(m) => break (p, m),
            // A view that keeps the key axis: the flat order of the score rows stays.
            Op::Reshape(r) if keeps_keys(b, r.x, r.y) => s = r.x,
            // A chain of views that keeps the key axis as a whole (SHViT's `[T, T]` viewed as
            // `[1, T, h, w]` then `[1, T, T]`): one view of the chain's root.
            Op::Reshape(r) if view_root_keeping_keys(b, r, p).is_some() => {
                let (root, chain) = view_root_keeping_keys(b, r, p).ok_or("view")?;
                nodes.push(p);
                nodes.extend(&chain);
                reader = *chain.last().unwrap_or(&p);
                s = root;
                continue;
            }
            // Any other view (the key axis split, MViTv2's `[.., Tq, kh, kw]`): the flat order of
            // the scores stays, so each term is placed by the shape it is added at, and the
            // softmax's grouping is checked against the product's below.
            Op::Reshape(r) => s = r.x,
            // `where(m, fill, s)` with a computed condition: `s + When(fill, m)` (score_forms).
            Op::Binary(bin) if where_fill(b, &bin, p).is_some() => {
                let w = where_fill(b, &bin, p).ok_or("where")?;
                if softcap.is_some() {
                    return Err("a masked fill before the soft cap".into());
                }
                let filled = w.value * scale;
                if !(scale > 0.0 && (filled == f32::NEG_INFINITY || filled <= FLOOR_MAX)) {
                    return Err(format!(
                        "a masked fill (computed condition) with {filled} in the softmax's units: the fused node adds \
                         the fill, which equals replacing the score only for a fill of −1e30 or less"
                    ));
                }
                let at = dims(b, bin.y).ok_or("shape")?;
                if dims(b, w.scores) != Some(at.clone()) {
                    return Err("a masked fill that broadcasts the scores to a larger shape".into());
                }
                terms.push(Term { fill: Some((w.fill, w.fill_op)), ..Term::add(w.cond, scale, at) });
                nodes.push(p);
                nodes.extend(w.fill_node);
                nodes.push(w.scores_node);
                reader = w.scores_node;
                s = w.scores;
                continue;
            }
            // A floor `max(x, c)` (score_forms): folded into the bias.
            Op::Binary(bin) if floor(b, &bin).is_some() => {
                let (x, c) = floor(b, &bin).ok_or("floor")?;
                if !terms.is_empty() || softcap.is_some() || floor_at.is_some() {
                    return Err("a floor (Max) of the scores with a bias, soft cap or floor after it".into());
                }
                let c = c * scale;
                if !(scale > 0.0 && c <= FLOOR_MAX) {
                    return Err(format!(
                        "Max of the scores and {c} (in the softmax's units): only a floor of −1e30 or less (torch.finfo.min) \
                         leaves every row's weights as the fused node computes them"
                    ));
                }
                floor_at = Some(c);
                s = x;
            }
            Op::Binary(bin) if bin.op == BinaryOp::Add => {
                if softcap.is_some() {
                    return Err("a bias added before the soft cap".into());
                }
                let (x, t) = match (leads_to_scores(b, bin.a, 8), leads_to_scores(b, bin.b, 8)) {
                    (true, false) => (bin.a, bin.b),
                    (false, true) => (bin.b, bin.a),
                    // Two products (content and position scores): the direct one is the
                    // attention's, the other an additive bias computed before the node.
                    (true, true) => main_scores(b, bin.a, bin.b).ok_or(
                        "an addition of two score products, neither a direct product (keys concatenated from two \
                         products, as global + local attention writes them)",
                    )?,
                    (false, false) => match padded_sink(b, &bin, p, scale) {
                        Some((x, pad, found)) if sink.is_none() && terms.is_empty() && softcap.is_none() => {
                            nodes.push(p);
                            reader = pad[0];
                            nodes.extend(pad);
                            sink = Some(found);
                            s = x;
                            continue;
                        }
                        Some(_) => return Err("a bias, soft cap or second sink after the scores' sink column".into()),
                        None => return Err(neither_term_scores(b, &bin)),
                    },
                };
                if dims(b, x) != dims(b, bin.y) {
                    return Err("a bias that broadcasts the scores to a larger shape".into());
                }
                terms.push(Term::add(t, scale, dims(b, x).ok_or("shape")?));
                s = x;
            }
            // `s − max_j s`: the same weights (where a row's maximum is finite), but not beside a
            // sink, whose logit the shift would move.
            Op::Binary(bin) if sink.is_none() && row_max_shift(b, &bin).is_some() => {
                row_max = row_max_shift(b, &bin);
                s = bin.a;
            }
            Op::Binary(bin) if bin.op == BinaryOp::Sub => {
                if softcap.is_some() {
                    return Err("a bias subtracted before the soft cap".into());
                }
                if !leads_to_scores(b, bin.a, 8) || leads_to_scores(b, bin.b, 8) {
                    return Err("a subtraction that is not a bias taken from the scores".into());
                }
                if dims(b, bin.a) != dims(b, bin.y) {
                    return Err("a bias that broadcasts the scores to a larger shape".into());
                }
                terms.push(Term::add(bin.b, -scale, dims(b, bin.a).ok_or("shape")?));
                s = bin.a;
            }
            // A masked fill lowered as `s·keep + fill` (keep checked to be 0 or 1).
            Op::Binary(bin)
                if (bin.op == BinaryOp::Mul
                    && [bin.a, bin.b].iter().any(|&w| b.is_weight(w) && scalar(b, w).is_none()))
                    || (bin.op == BinaryOp::When && b.is_weight(bin.b) && !b.is_weight(bin.a)) =>
            {
                // `When(s, keep)` selects where a product would multiply: the same for finite
                // scores, and a 0/1 keep is what `scaled_keep` accepts below.
                let (x, m) = if b.is_weight(bin.b) { (bin.a, bin.b) } else { (bin.b, bin.a) };
                if softcap.is_some() {
                    return Err("a masked fill before the soft cap".into());
                }
                if dims(b, x) != dims(b, bin.y) {
                    return Err("a masked fill that broadcasts the scores to a larger shape".into());
                }
                // A scale folded into the keep (0 or k): the scale applies to everything before.
                let values = b.weight_values(m).ok_or("keep values")?;
                let keep_scale = match scaled_keep(values) {
                    Some((k, _)) => k,
                    None => {
                        let v = values.iter().find(|&&v| v != 0.0 && v != 1.0).copied().unwrap_or(0.0);
                        return Err(format!(
                            "a product of the scores by a constant holding {v} and other nonzero values (a masked fill \
                             keeps 0 or 1; a scale is one value)"
                        ));
                    }
                };
                if bin.op == BinaryOp::When && keep_scale != 1.0 {
                    return Err(format!("a selection by a constant holding {keep_scale} (a masked fill keeps 0 or 1)"));
                }
                let at = dims(b, x).ok_or("shape")?;
                if values.iter().all(|&v| v != 0.0) {
                    // No zero: a plain scale (Swin V2's logit scale), not a fill.
                    scale *= keep_scale;
                } else {
                    terms.push(Term { keep: true, keep_scale, ..Term::add(m, scale, at) });
                    scale *= keep_scale;
                }
                s = x;
            }
            Op::Binary(bin) => match scaled(b, &bin) {
                Some((x, f)) => {
                    scale *= f;
                    s = x;
                }
                None => return Err(format!("{:?} by a non-scalar between the score product and the softmax", bin.op)),
            },
            Op::Unary(u) if u.op == UnaryOp::Tanh => {
                if softcap.is_some() {
                    return Err("two soft caps (tanh) between the score product and the softmax".into());
                }
                let cap = scale.abs();
                if !(cap.is_finite() && cap > 0.0) {
                    return Err(format!("a soft cap (tanh) scaled by {scale}"));
                }
                softcap = Some(cap);
                s = u.x;
            }
            Op::Conv2d(_) if mix_pre.is_none() && head_mix(b, p)?.is_some() => {
                let m = head_mix(b, p)?.ok_or("mixing")?;
                if !terms.is_empty() || softcap.is_some() || floor_at.is_some() || sink.is_some() || row_max.is_some() {
                    return Err(
                        "talking heads: a bias, soft cap, floor or sink between the head mixing and the softmax \
                                (the fused node mixes the scaled, capped and biased scores)"
                            .into(),
                    );
                }
                s = m.x;
                mix_pre = Some((m, scale));
                scale = 1.0;
            }
            op => {
                if let Some(m) = head_mixing_at(b, p) {
                    let (mi, mo) = (dims(b, b.ops()[m].main_input()), dims(b, b.ops()[m].output()));
                    return Err(format!(
                        "talking heads: the scores mixed across heads ({} {:?} -> {:?}) between the score product \
                         and the softmax in a form not taken (the fused node takes a pointwise Conv2d over the \
                         heads between views)",
                        b.ops()[m].name(),
                        mi.unwrap_or_default(),
                        mo.unwrap_or_default()
                    ));
                }
                return Err(before_softmax(b, &op));
            }
        }
        nodes.push(p);
        reader = p;
    };
    nodes.push(mm1n);
    // Queries and keys, through their scalar scales (and a transpose of the keys' last two axes).
    let q = back_through_scales(b, mm1.a, mm1n, &mut nodes, &mut scale, None);
    let mut k_transposed = !mm1.transpose_b;
    let k = back_through_scales(b, mm1.b, mm1n, &mut nodes, &mut scale, Some(&mut k_transposed));
    // The weighted sum of values.
    let mut probs = sm.y;
    let mut guarded = false;
    // The weights transposed (keys × queries) and multiplied from the left by values laid out
    // `[.., Dv, Tk]` (EfficientViT's, SHViT's `v @ attnᵀ`): the transpose of `weights · vᵀ`.
    let mut weights_transposed = false;
    // Query rows cut from the weights (the class token's row of a last block, after tract pushed
    // the graph's slice up): the node computes those queries only (query_rows).
    let mut qslice: Option<Slice> = None;
    let mut sink_cut = false;
    let mut mix_post: Option<HeadMix> = None;
    let mm2n = loop {
        let after = skip_nan_guard(b, probs, &mut nodes);
        guarded |= after != probs;
        probs = after;
        let c = sole_consumer(b, probs).ok_or("the attention weights are read elsewhere")?;
        match b.ops()[c] {
            Op::Reshape(r) if keeps_keys(b, r.x, r.y) => {
                nodes.push(c);
                probs = r.y;
            }
            // Views that move a unit axis past the keys and back (`[.., 1, Tk]` → `[.., Tk, 1]` →
            // `[.., 1, Tk]`, tract's axis moves after a cut to one query row): one view.
            Op::Reshape(_) if views_to_keys(b, probs, c).is_some() => {
                let (y, chain) = views_to_keys(b, probs, c).ok_or("view")?;
                nodes.extend(chain);
                probs = y;
            }
            Op::Transpose(tr) if !weights_transposed && qslice.is_none() && swaps_last_two(b, &tr) => {
                nodes.push(c);
                probs = tr.y;
                weights_transposed = true;
            }
            Op::Slice(sl)
                if !sink_cut
                    && !weights_transposed
                    && sink.as_ref().and_then(|z| z.padded).is_some_and(|tk| cuts_sink(b, &sl, tk)) =>
            {
                nodes.push(c);
                probs = sl.y;
                sink_cut = true;
            }
            Op::Slice(sl) if !weights_transposed && qslice.is_none() && query_rows(b, &sl) => {
                nodes.push(c);
                probs = sl.y;
                qslice = Some(sl);
            }
            // The weights mixed across the heads (talking heads, sdpa_talking).
            _ if mix_post.is_none() && !weights_transposed => match post_mix(b, probs)? {
                Some((y, chain, m)) => {
                    nodes.extend(chain);
                    probs = y;
                    mix_post = Some(m);
                }
                None => break c,
            },
            _ => break c,
        }
    };
    let Op::MatMul(mm2) = b.ops()[mm2n] else {
        return Err(weights_used(b, probs, mm2n));
    };
    let (weights, v) = if weights_transposed { (mm2.b, mm2.a) } else { (mm2.a, mm2.b) };
    if weights != probs || (weights_transposed && mm2.transpose_b) {
        return Err(if weights_transposed {
            "the transposed weights are not the right factor of a plain product with values"
        } else {
            "the weights are not the left factor of a plain product with values"
        }
        .into());
    }
    nodes.push(mm2n);
    if sink.as_ref().is_some_and(|z| z.padded.is_some()) && !sink_cut {
        return Err("the scores padded with a sink column whose weights are not cut back to the keys".into());
    }
    // The gate form's output: the product with values times the gate.
    let mut gated = None;
    if let Some(gate) = sink.as_ref().and_then(|z| z.gate) {
        if weights_transposed || qslice.is_some() {
            return Err("a log-sum-exp gated softmax with weights transposed or cut by query rows".into());
        }
        let (gn, y) = gated_output(b, mm2.y, gate)?;
        nodes.extend(gn);
        gated = Some(y);
    }
    // Values laid out `[.., Dv, Tk]`: multiplied from the left, or transposed by the product.
    let values_cf = weights_transposed || mm2.transpose_b;
    for (what, t) in [("queries", q), ("keys", k), ("values", v)] {
        if b.is_weight(t) {
            return Err(constant_operand(what));
        }
    }
    // Shapes: `[qb.., Tq, D]`, keys `[kb.., Tk, D]` (or `[kb.., D, Tk]`), values `[vb.., Tk, Dv]`.
    let (qd, kd, vd) = (dims(b, q).ok_or("shape")?, dims(b, k).ok_or("shape")?, dims(b, v).ok_or("shape")?);
    if qd.len() < 2 || kd.len() < 2 || vd.len() < 2 {
        return Err("an operand of rank below 2".into());
    }
    let (qb, kb, vb) = (&qd[..qd.len() - 2], &kd[..kd.len() - 2], &vd[..vd.len() - 2]);
    let (tq, d) = (qd[qd.len() - 2], qd[qd.len() - 1]);
    let tk = if k_transposed { kd[kd.len() - 1] } else { kd[kd.len() - 2] };
    let (dv, tkv) = if values_cf { (vd[vd.len() - 2], vd[vd.len() - 1]) } else { (vd[vd.len() - 1], vd[vd.len() - 2]) };
    if tkv != tk {
        return Err("values of another length than the keys".into());
    }
    let hk = kv_heads(qb, kb).ok_or("key heads that are not a prefix of the query heads")?;
    if kb.iter().product::<usize>() != hk {
        return Err("key heads that are not a prefix of the query heads".into());
    }
    // The node's heads and queries are the rows of the scores as the softmax sees them (views
    // between the product and the softmax may regroup them): `rows` score rows in flat order,
    // `hq` groups of `tq`. Row r reads key head r / (rows / hk) under any grouping whose head
    // count is a multiple of hk.
    let rows = qb.iter().product::<usize>() * tq;
    let fd = dims(b, sm.x).ok_or("shape")?;
    let (tq, hq) = (fd[fd.len() - 2], fd[..fd.len() - 2].iter().product::<usize>());
    if hq * tq != rows || !hq.is_multiple_of(hk) {
        return Err("score rows regrouped across key heads".into());
    }
    // With a sink column a row whose every key is masked gets zero weights, as the node's.
    let guarded = guarded || sink.as_ref().is_some_and(|z| z.padded.is_some());
    let sink = match sink {
        Some(z) if z.rows.len() == rows => {
            let z = per_head(&z.rows, tq).ok_or("a sink that differs between the query rows of a head")?;
            Some(b.weight_as("sdpa_sink", &[hq], z, DType::F32).map_err(|e| e.to_string())?)
        }
        Some(_) => return Err("a sink of another row count than the scores".into()),
        None => None,
    };
    let mix_pre = match mix_pre {
        Some((m, sc)) => Some(mix_weight(b, &m, sc, hq, "sdpa_mix_pre")?),
        None => None,
    };
    let mix_post = match mix_post {
        Some(m) => Some(mix_weight(b, &m, 1.0, hq, "sdpa_mix_post")?),
        None => None,
    };
    // The weights' rows after a cut of the query rows: `tq_out` queries per head.
    let tq_out = match qslice {
        Some(sl) => {
            let sd = dims(b, sl.x).ok_or("shape")?;
            if sd[sd.len() - 2] != tq || sd[..sd.len() - 2].iter().product::<usize>() != hq {
                return Err("query rows cut where the weights' rows are grouped unlike the softmax's".into());
            }
            sl.count as usize
        }
        None => tq,
    };
    let rows_out = hq * tq_out;
    let pd = dims(b, probs).ok_or("shape")?;
    let pb = &pd[..pd.len() - 2];
    let hp: usize = pb.iter().product();
    if weights_transposed && (hp != hq || pd[pd.len() - 2] != tk || pd[pd.len() - 1] != tq) {
        return Err("transposed weights regrouped unlike the scores".into());
    }
    let prow = if weights_transposed { pd[pd.len() - 1] } else { pd[pd.len() - 2] };
    if hp * prow != rows_out
        || !hp.is_multiple_of(hk)
        || kv_heads(pb, vb) != Some(hk)
        || vb.iter().product::<usize>() != hk
    {
        return Err("values grouped unlike the keys".into());
    }
    // The bias: each term's leading axes all ones (shared by the heads) or all the queries'.
    let mut bias_ops = Vec::new();
    let mut inputs = vec![q, k, v];
    let mut consts: Vec<(Vec<usize>, Vec<f32>)> = Vec::new();
    let mut acts: Vec<TensorId> = Vec::new();
    // The constant terms and masked fills at full size (flat, in the scores' order), combined
    // into one additive mask: required with a masked fill, and checked without one (a row
    // masked with −∞ everywhere).
    let full = terms
        .iter()
        .filter(|term| term.constant(b))
        .map(|term| {
            let values = b.weight_values(term.t).ok_or("bias values")?;
            let full = broadcast_to(values, &dims(b, term.t).ok_or("shape")?, &term.at)
                .filter(|v| v.len() == rows * tk)
                .ok_or("a constant term that does not broadcast to the scores")?;
            Ok(if term.keep {
                MaskStep::Keep(full.iter().map(|&v| v / term.keep_scale).collect())
            } else {
                MaskStep::Add { values: full, coef: term.scale }
            })
        })
        .collect::<Result<Vec<_>, &str>>();
    let keeps = terms.iter().any(|term| term.keep);
    // The floor goes on the constant mask where every term is constant, else on the bias's sum.
    let has_acts = terms.iter().any(|term| !term.keep && !term.constant(b));
    let const_floor = floor_at.filter(|_| !has_acts);
    let mut combined = None;
    match full {
        Ok(steps) if !steps.is_empty() => {
            let m = combine(&steps, rows * tk, tk, guarded, const_floor)?;
            if keeps {
                let shared = m.chunks(tq * tk).all(|blk| blk == &m[..tq * tk]);
                let (shape, m) = if shared { (vec![1, tq, tk], m[..tq * tk].to_vec()) } else { (vec![hq, tq, tk], m) };
                combined = Some((shape, m));
            }
        }
        Err(e) if keeps => return Err(e.into()),
        _ => {}
    }
    let grouped = |at: &[usize]| {
        let r = at.len();
        r >= 2 && at[r - 2] == tq && at[r - 1] == tk && at[..r - 2].iter().product::<usize>() == hq
    };
    let (terms, made) = sum_regrouped(b, terms, rows * tk, &grouped, &mut bias_ops, &mut inputs)?;
    for term in &terms {
        let constant = term.constant(b);
        if term.keep || (keeps && constant) {
            continue;
        }
        let bd = dims(b, term.t).ok_or("shape")?;
        let r = bd.len();
        let (tqb, tkb) = (if r >= 2 { bd[r - 2] } else { 1 }, if r >= 1 { bd[r - 1] } else { 1 });
        let lead = &bd[..r.saturating_sub(2)];
        let heads = &term.at[..term.at.len() - 2];
        let mut materialise = false;
        let want = if !grouped(&term.at) {
            // Added where the scores were viewed otherwise: a term with every score's own value
            // keeps its meaning in the flat order; a constant is stored so (a computed one is
            // summed so by `sum_regrouped`).
            if bd.iter().product::<usize>() != rows * tk {
                if !constant {
                    return Err("a broadcast bias added where the score rows are grouped unlike the softmax's".into());
                }
                materialise = true;
            }
            [hq, tq, tk]
        } else {
            let hb = if lead.iter().all(|&x| x == 1) {
                1
            } else {
                let padded: Vec<usize> = std::iter::repeat_n(1, heads.len().saturating_sub(lead.len()))
                    .chain(lead.iter().copied())
                    .collect();
                if padded != heads && !constant {
                    return Err("a computed bias broadcast over some head axes and not others".into());
                }
                materialise = padded != heads;
                hq
            };
            [hb, tqb, tkb]
        };
        if constant {
            let values = b.weight_values(term.t).ok_or("bias values")?;
            // A constant broadcast over some head axes and not others (Swin's shifted-window
            // mask `[windows, 1, T, T]` beside heads): stored at every head's size.
            let (want, values) = if materialise {
                let full = broadcast_to(values, &bd, &term.at)
                    .filter(|v| v.len() == rows * tk)
                    .ok_or("a constant bias that does not broadcast to the scores")?;
                ([hq, tq, tk], full)
            } else {
                (want, values.to_vec())
            };
            consts.push((want.to_vec(), values.iter().map(|&x| x * term.scale).collect()));
        } else {
            if !made.contains(&term.t) {
                inputs.push(term.t);
            }
            let mut t = term.t;
            if let Some((fill, op)) = term.fill {
                // The masked fill's term, `pick(fill, m)`, computed in the node's region.
                let y = b.new_activation("sdpa_fill", &bd).map_err(|e| e.to_string())?;
                bias_ops.push(Op::Binary(Binary { a: fill, b: t, op, y }));
                t = y;
            }
            if dims(b, t).as_deref() != Some(&want[..]) {
                let view = b.new_activation("sdpa_bias", &want).map_err(|e| e.to_string())?;
                bias_ops.push(Op::Reshape(Reshape { x: t, y: view }));
                t = view;
            }
            if term.scale != 1.0 {
                let f =
                    b.weight_as("sdpa_bias_scale", &[1], vec![term.scale], DType::F32).map_err(|e| e.to_string())?;
                let y = b.new_activation("sdpa_bias", &want).map_err(|e| e.to_string())?;
                bias_ops.push(Op::Binary(Binary { a: t, b: f, op: BinaryOp::Mul, y }));
                t = y;
            }
            acts.push(t);
        }
    }
    // Constant terms summed into one f32 weight (broadcast to their common shape).
    let mut bias = None;
    if let Some((shape, m)) = combined {
        bias = Some(b.weight_as("sdpa_bias", &shape, m, DType::F32).map_err(|e| e.to_string())?);
    } else if !consts.is_empty() {
        let shape: Vec<usize> = (0..3).map(|a| consts.iter().map(|(d, _)| d[a]).max().unwrap_or(1)).collect();
        let n: usize = shape.iter().product();
        let mut sum = vec![0f32; n];
        for (d, values) in &consts {
            for (flat, out) in sum.iter_mut().enumerate() {
                let (h, i, j) = (flat / (shape[1] * shape[2]), flat / shape[2] % shape[1], flat % shape[2]);
                let at = |x: usize, n: usize| if n == 1 { 0 } else { x };
                *out += values[(at(h, d[0]) * d[1] + at(i, d[1])) * d[2] + at(j, d[2])];
            }
        }
        if let Some(c) = const_floor {
            sum.iter_mut().filter(|v| !v.is_nan()).for_each(|v| *v = v.max(c));
        }
        bias = Some(b.weight_as("sdpa_bias", &shape, sum, DType::F32).map_err(|e| e.to_string())?);
    }
    for t in acts {
        bias = Some(match bias {
            None => t,
            Some(prev) => {
                let (pd, td) = (dims(b, prev).ok_or("shape")?, dims(b, t).ok_or("shape")?);
                let sd: Vec<usize> = pd.iter().zip(&td).map(|(&x, &y)| x.max(y)).collect();
                let y = b.new_activation("sdpa_bias", &sd).map_err(|e| e.to_string())?;
                bias_ops.push(Op::Binary(Binary { a: t, b: prev, op: BinaryOp::Add, y }));
                y
            }
        });
    }
    if let (Some(c), Some(x), true) = (floor_at, bias, has_acts) {
        let f = b.weight_as("sdpa_floor", &[1], vec![c], DType::F32).map_err(|e| e.to_string())?;
        let y = b.new_activation("sdpa_bias", &dims(b, x).ok_or("shape")?).map_err(|e| e.to_string())?;
        bias_ops.push(Op::Binary(Binary { a: x, b: f, op: BinaryOp::Max, y }));
        bias = Some(y);
    }
    // Query rows cut after the softmax: the bias's rows cut alike.
    if let (Some(sl), Some(x)) = (qslice, bias) {
        bias = Some(slice_bias_rows(b, x, sl, tq, &mut bias_ops)?);
    }
    // Reshape views to the node's `[H, T, D]` operands, and from its output to the product's.
    let mut ops = bias_ops;
    let mut view = |b: &mut ModelBuilder, t: TensorId, want: [usize; 3]| -> Result<TensorId, String> {
        if dims(b, t).as_deref() == Some(&want[..]) {
            return Ok(t);
        }
        let y = b.new_activation("sdpa_in", &want).map_err(|e| e.to_string())?;
        ops.push(Op::Reshape(Reshape { x: t, y }));
        Ok(y)
    };
    let mut q3 = view(b, q, [hq, tq, d])?;
    let k3 = view(b, k, if k_transposed { [hk, d, tk] } else { [hk, tk, d] })?;
    let v3 = if values_cf {
        let vt = view(b, v, [hk, dv, tk])?;
        let y = b.new_activation("sdpa_v", &[hk, tk, dv]).map_err(|e| e.to_string())?;
        ops.push(Op::Transpose(Transpose { x: vt, perm: SWAP_LAST_TWO, y }));
        y
    } else {
        view(b, v, [hk, tk, dv])?
    };
    if let Some(sl) = qslice {
        let y = b.new_activation("sdpa_q_rows", &[hq, tq_out, d]).map_err(|e| e.to_string())?;
        ops.push(Op::Slice(Slice { x: q3, axis: 1, y, ..sl }));
        q3 = y;
    }
    let out = gated.unwrap_or(mm2.y);
    // The node's output, `[hq, tq, dv]` (transposed to `[hq, dv, tq]` for transposed weights).
    let want = if weights_transposed { [hq, dv, tq] } else { [hq, tq_out, dv] };
    let direct = dims(b, out).as_deref() == Some(&want[..]);
    let o = if direct { out } else { b.new_activation("sdpa_out", &want).map_err(|e| e.to_string())? };
    let y =
        if weights_transposed { b.new_activation("sdpa_out", &[hq, tq, dv]).map_err(|e| e.to_string())? } else { o };
    let softcap = softcap.unwrap_or(0.0);
    ops.push(Op::Sdpa(Sdpa {
        q: q3,
        k: k3,
        v: v3,
        bias,
        scale,
        causal: false,
        k_transposed,
        softcap,
        sink,
        mix_pre,
        mix_post,
        y,
    }));
    if weights_transposed {
        ops.push(Op::Transpose(Transpose { x: y, perm: SWAP_LAST_TWO, y: o }));
    }
    if !direct {
        ops.push(Op::Reshape(Reshape { x: o, y: out }));
    }
    nodes.sort_unstable();
    nodes.dedup();
    let mut unique: Vec<TensorId> = Vec::new();
    for t in inputs {
        if !unique.contains(&t) {
            unique.push(t);
        }
    }
    let inputs = unique;
    Ok((Region { nodes, inputs, output: out }, ops))
}

#[cfg(test)]
mod tests {
    use crate::fuse::{fuse, unfused_attention};
    use crate::ModelBuilder;
    use kestrel_rt_format::ops::*;

    /// Scores cut by a slice before the softmax (a key dropped): attention-shaped, not fused
    /// (the slice is no score bias), and reported with the slice as the reason.
    #[test]
    fn a_softmax_over_sliced_scores_is_reported_unfused() {
        let mut b = ModelBuilder::new("sliced");
        let q = b.input("q", &[2, 4, 4]).unwrap();
        let k = b.input("k", &[2, 4, 4]).unwrap();
        let v = b.input("v", &[2, 3, 4]).unwrap();
        let s = b.op(|y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y })).unwrap();
        let cut =
            b.op(|y| Op::Slice(Slice { x: s, axis: 2, start: 1, step: 1, count: 3, offset: 0, len: 3, y })).unwrap();
        let p = b.op(|y| Op::Softmax(Softmax { x: cut, y })).unwrap();
        let o = b.op(|y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y })).unwrap();
        b.output(o);
        fuse(&mut b);
        let left = unfused_attention(&b);
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].reason.contains("Slice"), "{left:?}");
    }
}
