//! AFT-simple written out (σ(Q) ⊙ Σ_t softmax_t(K) ⊙ V, then the output projection) fused into
//! one `AftSimple` node. As for attention, the matcher is loose about layout and the numerical
//! check decides.

use super::attention::{forward_layout, output_projection, projection, root_view, through_layout, tokens};
use super::{around_tokens, rewrite_each, rewrite_each_named, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;

/// Fuses every non-causal AFT-simple block it can prove.
pub(super) fn aft_simple(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "aft-simple", |b, i| {
        matches!(b.ops()[i], Op::Softmax(_)).then(|| match_aft_simple(b, i)).flatten()
    });
}

/// For `Binary(op)(a, b)` where one side is `side`, the other side.
pub(super) fn other_operand(bin: &Binary, side: TensorId) -> Option<TensorId> {
    if bin.a == side {
        Some(bin.b)
    } else if bin.b == side {
        Some(bin.a)
    } else {
        None
    }
}

fn match_aft_simple(b: &mut ModelBuilder, softmax: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Softmax(sm) = b.ops()[softmax] else { return None };
    let mut nodes = vec![softmax];
    let mut unit = 1.0f32;
    // softmax over tokens of K (transposes around it are layout).
    let k_src = through_layout(b, sm.x, &mut nodes, &mut unit);
    let (kn, kd) = projection(b, k_src)?;
    nodes.push(kn);
    let x = root_view(b, kd.x, &mut nodes);
    let (t, d) = tokens(b, x)?;
    // ⊙ V
    let w = forward_layout(b, sm.y, &mut nodes);
    let (mul, vd) = gated_projection(b, w, x, &mut nodes, &mut unit)?;
    // Σ over tokens
    let rn = sole_consumer(b, mul.y)?;
    let Op::Reduce(red) = b.ops()[rn] else { return None };
    if red.op != ReduceOp::Sum {
        return None;
    }
    nodes.push(rn);
    // σ(Q) ⊙ Σ
    let s = forward_layout(b, red.y, &mut nodes);
    let gn = sole_consumer(b, s)?;
    let Op::Binary(gate) = b.ops()[gn] else { return None };
    if gate.op != BinaryOp::Mul {
        return None;
    }
    nodes.push(gn);
    let sig = other_operand(&gate, s)?;
    let sn = b.producer(sig)?;
    let Op::Unary(Unary { x: q_pre, op: UnaryOp::Sigmoid, .. }) = b.ops()[sn] else { return None };
    nodes.push(sn);
    let q_src = through_layout(b, q_pre, &mut nodes, &mut unit);
    let (qn, qd) = projection(b, q_src)?;
    (root_view(b, qd.x, &mut nodes) == x).then_some(())?;
    nodes.push(qn);
    // Output projection.
    let od = output_projection(b, gate.y, &mut nodes)?;
    if unit != 1.0 {
        return None;
    }
    nodes.sort_unstable();
    nodes.dedup();
    let y = od.y;
    let ops = around_tokens(b, x, y, (t, d), |xin, yout| {
        Op::AftSimple(AftSimple { x: xin, causal: false, q: qd.proj, k: kd.proj, v: vd.proj, o: od.proj, y: yout })
    })?;
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}

/// Fuses every Fastformer block it can prove: additive attention over q (α, global query g),
/// p = g ⊙ k, additive attention over p (β, global key G), u = G ⊙ v, W^R u + b^R + q.
pub(super) fn fastformer(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "fastformer", |b, i| {
        matches!(b.ops()[i], Op::Softmax(_)).then(|| match_fastformer(b, i)).flatten()
    });
}

/// One additive-attention pooling starting at `softmax`: scores `src · w` (scaled) → softmax over
/// tokens → weighted sum of `src`'s heads. Returns (src, scoring weight, scale, pooled tensor).
fn additive_pool(
    b: &ModelBuilder,
    softmax: usize,
    nodes: &mut Vec<usize>,
) -> Option<(TensorId, TensorId, f32, TensorId)> {
    let Op::Softmax(sm) = b.ops()[softmax] else { return None };
    nodes.push(softmax);
    let mut scale = 1.0f32;
    let score = through_layout(b, sm.x, nodes, &mut scale);
    let (an, ad) = projection(b, score)?;
    nodes.push(an);
    // The scores may read a reshaped view of the source (one head: `[1, T, 1, d]`) while the
    // weighted sum reads another; both lead back to the same tensor.
    let src = root_view(b, ad.x, nodes);
    let w = forward_layout(b, sm.y, nodes);
    let mn = sole_consumer(b, w)?;
    let Op::Binary(mul) = b.ops()[mn] else { return None };
    if mul.op != BinaryOp::Mul || through_layout(b, other_operand(&mul, w)?, nodes, &mut 1.0) != src {
        return None;
    }
    nodes.push(mn);
    let rn = sole_consumer(b, mul.y)?;
    let Op::Reduce(red) = b.ops()[rn] else { return None };
    if red.op != ReduceOp::Sum {
        return None;
    }
    nodes.push(rn);
    Some((src, ad.proj.w, scale, forward_layout(b, red.y, nodes)))
}

/// `g ⊙ k`: the sole reader of `g`, a `Mul` whose other operand is (through layout views, whose
/// scales multiply `scale`) a projection `k` of `x`; the product and the projection, their
/// nodes pushed to `nodes`.
fn gated_projection(
    b: &ModelBuilder,
    g: TensorId,
    x: TensorId,
    nodes: &mut Vec<usize>,
    scale: &mut f32,
) -> Option<(Binary, Dense)> {
    let mn = sole_consumer(b, g)?;
    let Op::Binary(mul) = b.ops()[mn] else { return None };
    if mul.op != BinaryOp::Mul {
        return None;
    }
    nodes.push(mn);
    let src = through_layout(b, other_operand(&mul, g)?, nodes, scale);
    let (pn, proj) = projection(b, src)?;
    (root_view(b, proj.x, nodes) == x).then_some(())?;
    nodes.push(pn);
    Some((mul, proj))
}

fn match_fastformer(b: &mut ModelBuilder, softmax: usize) -> Option<(Region, Vec<Op>)> {
    let mut nodes = Vec::new();
    // α over q → g.
    let (q, wqa, scale_a, g) = additive_pool(b, softmax, &mut nodes)?;
    let (qn, qd) = projection(b, q)?;
    nodes.push(qn);
    let x = root_view(b, qd.x, &mut nodes);
    let (t, d) = tokens(b, x)?;
    // p = g ⊙ k.
    let (pm, kd) = gated_projection(b, g, x, &mut nodes, &mut 1.0)?;
    // β over p → G: the second softmax is the one whose scores read p.
    let p = pm.y;
    let second = (0..b.ops().len()).find(|&i| {
        i != softmax
            && matches!(b.ops()[i], Op::Softmax(_))
            && additive_pool(b, i, &mut Vec::new()).is_some_and(|(src, ..)| src == p)
    })?;
    let (_, wka, scale_b, big_g) = additive_pool(b, second, &mut nodes)?;
    if (scale_a - scale_b).abs() > 1e-6 * scale_a.abs() {
        return None;
    }
    // u = G ⊙ v, then W^R u + b^R, then + q.
    let (um, vd) = gated_projection(b, big_g, x, &mut nodes, &mut 1.0)?;
    let rd = output_projection(b, um.y, &mut nodes)?;
    let an = sole_consumer(b, rd.y)?;
    let Op::Binary(add) = b.ops()[an] else { return None };
    if add.op != BinaryOp::Add || through_layout(b, other_operand(&add, rd.y)?, &mut Vec::new(), &mut 1.0) != q {
        return None;
    }
    nodes.push(an);
    let heads = b.shape_of(wqa)?.as_matrix()?.0;
    nodes.sort_unstable();
    nodes.dedup();
    let y = add.y;
    let ops = around_tokens(b, x, y, (t, d), |xin, yout| {
        Op::Fastformer(Fastformer {
            x: xin,
            heads: heads as u32,
            scale: scale_a,
            q: qd.proj,
            k: kd.proj,
            v: vd.proj,
            wqa,
            wka,
            r: rd.proj,
            y: yout,
        })
    })?;
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}

/// Fuses AFT-full written out as `σ(Q) ⊙ [E·(e^K ⊙ V)] / [E·e^K]` with a constant
/// `E = exp(w − row max)` (exporters fold the position biases into it): w is recovered as ln E
/// (a per-row shift cancels in the ratio); zeros above the diagonal mean the causal form.
pub(super) fn aft_full(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each_named(b, report, |b, i| {
        let Op::Unary(Unary { op: UnaryOp::Exp, .. }) = b.ops()[i] else { return None };
        let (region, ops) = match_aft_full(b, i)?;
        let pattern = match ops.iter().find(|o| !matches!(o, Op::Reshape(_))) {
            Some(Op::AftLocal(_)) => "aft-local",
            Some(Op::AftSimple(_)) => "aft-simple",
            _ => "aft-full",
        };
        Some((region, ops, pattern))
    });
}

/// `y = E·s` along tokens, written transpose (node `t1`) → dense(E, no bias) → transpose:
/// returns E's id and the result.
fn token_product(b: &ModelBuilder, t1: usize, nodes: &mut Vec<usize>) -> Option<(TensorId, TensorId)> {
    let Op::Transpose(tr1) = b.ops()[t1] else { return None };
    let dn = sole_consumer(b, tr1.y)?;
    let Op::Dense(dd) = b.ops()[dn] else { return None };
    if dd.proj.b.is_some() || dd.act != Activation::None {
        return None;
    }
    let t2 = sole_consumer(b, dd.y)?;
    let Op::Transpose(tr2) = b.ops()[t2] else { return None };
    nodes.extend([t1, dn, t2]);
    Some((dd.proj.w, tr2.y))
}

/// The keys' stabilised exponential `e^(K − max_t K)` at `exp_node` (the shift cancels, so any
/// subtracted reduction is accepted): the nodes read, e^K, K's projection, the block's input x
/// and its `(T, d)`.
pub(super) struct StableExp {
    pub nodes: Vec<usize>,
    pub ek: TensorId,
    pub kd: Dense,
    pub x: TensorId,
    pub t: usize,
    pub d: usize,
}

pub(super) fn stable_exp(b: &ModelBuilder, exp_node: usize) -> Option<StableExp> {
    let Op::Unary(Unary { x: shifted, y: ek, .. }) = b.ops()[exp_node] else { return None };
    let mut nodes = vec![exp_node];
    let sn = b.producer(shifted)?;
    let Op::Binary(sub) = b.ops()[sn] else { return None };
    if sub.op != BinaryOp::Sub {
        return None;
    }
    nodes.push(sn);
    if let Some(mn) = b.producer(sub.b).filter(|&n| matches!(b.ops()[n], Op::Reduce(_))) {
        nodes.push(mn);
    }
    // K may arrive through reshape views (one head: `[T, 1] → [T] → [T, 1]`).
    let k = root_view(b, sub.a, &mut nodes);
    let (kn, kd) = projection(b, k)?;
    nodes.push(kn);
    let x = root_view(b, kd.x, &mut nodes);
    let (t, d) = tokens(b, x)?;
    Some(StableExp { nodes, ek, kd, x, t, d })
}

fn match_aft_full(b: &mut ModelBuilder, exp_node: usize) -> Option<(Region, Vec<Op>)> {
    let StableExp { mut nodes, ek, kd, x, t, d } = stable_exp(b, exp_node)?;
    // e^K's two uses: ⊙ V (numerator) and E·e^K (denominator).
    let uses = b.consumers(ek);
    if uses.len() != 2 {
        return None;
    }
    let (mut num_src, mut den) = (None, None);
    let mut e_id = None;
    for u in uses {
        match b.ops()[u] {
            Op::Binary(m) if m.op == BinaryOp::Mul => {
                let (vn, vd) = projection(b, other_operand(&m, ek)?)?;
                (root_view(b, vd.x, &mut nodes) == x).then_some(())?;
                nodes.extend([u, vn]);
                num_src = Some((m.y, vd.proj));
            }
            Op::Transpose(_) => {
                let mut n = Vec::new();
                let (w, y) = token_product(b, u, &mut n)?;
                nodes.extend(n);
                e_id = Some(w);
                den = Some(y);
            }
            _ => return None,
        }
    }
    let ((kv, vproj), den, e_id) = (num_src?, den?, e_id?);
    let (e2, num) = token_product(b, sole_consumer(b, kv)?, &mut nodes)?;
    // The same E on both paths (converters may store two equal copies, e.g. two cumulative sums).
    if e2 != e_id && b.weight_values(e2)? != b.weight_values(e_id)? {
        return None;
    }
    // σ(Q) ⊙ num, then ÷ den (as a division or a product with 1/den).
    let gn = sole_consumer(b, num)?;
    let Op::Binary(gate) = b.ops()[gn] else { return None };
    if gate.op != BinaryOp::Mul {
        return None;
    }
    nodes.push(gn);
    let sn = b.producer(other_operand(&gate, num)?)?;
    let Op::Unary(Unary { x: q_pre, op: UnaryOp::Sigmoid, .. }) = b.ops()[sn] else { return None };
    nodes.push(sn);
    let (qn, qd) = projection(b, q_pre)?;
    (root_view(b, qd.x, &mut nodes) == x).then_some(())?;
    nodes.push(qn);
    let dn = sole_consumer(b, gate.y)?;
    let Op::Binary(div) = b.ops()[dn] else { return None };
    nodes.push(dn);
    match div.op {
        BinaryOp::Div if div.a == gate.y && div.b == den => {}
        BinaryOp::Mul => {
            let rn = b.producer(other_operand(&div, gate.y)?)?;
            let Op::Unary(Unary { x: r_in, op: UnaryOp::Reciprocal, .. }) = b.ops()[rn] else { return None };
            (r_in == den).then_some(())?;
            nodes.push(rn);
        }
        _ => return None,
    }
    let od = output_projection(b, div.y, &mut nodes)?;
    // w = ln E; an all-zero upper triangle is the causal mask.
    let e = b.weight_values(e_id)?;
    if e.len() != t * t || e.iter().any(|&v| v.is_nan() || v < 0.0 || !v.is_finite()) {
        return None;
    }
    let causal = (0..t).all(|i| (i + 1..t).all(|j| e[i * t + j] == 0.0)) && t > 1;
    let mut w = Vec::with_capacity(t * t);
    for i in 0..t {
        for j in 0..t {
            let v = e[i * t + j];
            w.push(if causal && j > i {
                0.0
            } else if v > 0.0 {
                v.ln()
            } else {
                return None;
            });
        }
    }
    // w ≡ 0 wherever it is read: AFT-simple (causal AFT-simple is lowered as cumulative sums,
    // i.e. E the lower triangle of ones).
    if w.iter().all(|&v| v == 0.0) {
        nodes.sort_unstable();
        nodes.dedup();
        let y = od.y;
        let (q, k, o) = (qd.proj, kd.proj, od.proj);
        let ops = around_tokens(b, x, y, (t, d), |xin, yout| {
            Op::AftSimple(AftSimple { x: xin, causal, q, k, v: vproj, o, y: yout })
        })?;
        return Some((Region { nodes, inputs: vec![x], output: y }, ops));
    }
    // AFT-local: outside a band |t − t'| < s each row of w is one constant (the row's shift);
    // subtracting it makes w exactly 0 there, which is AFT-local's definition.
    let window = local_window(&w, t, causal);
    let w = match window {
        Some((_, ref shift)) => (0..t * t).map(|k| w[k] - shift[k / t]).collect(),
        None => w,
    };
    // AFT-local stores its band `[T, 2s − 1]` (linear in T) when narrower than T.
    let w_id = match window {
        Some((s, _)) => {
            let cols = AftLocal::w_cols(t, s);
            b.weight("aft_w", &[t, cols], AftLocal::store_w(&w, t, s)).ok()?
        }
        None => b.weight("aft_w", &[t, t], w).ok()?,
    };
    nodes.sort_unstable();
    nodes.dedup();
    let y = od.y;
    let (q, k, o) = (qd.proj, kd.proj, od.proj);
    let ops = around_tokens(b, x, y, (t, d), |xin, yout| match window {
        Some((s, _)) => {
            Op::AftLocal(AftLocal { x: xin, causal, window: s as u32, q, k, v: vproj, w: w_id, o, y: yout })
        }
        None => Op::AftFull(AftFull { x: xin, causal, q, k, v: vproj, bias: AftBias::Full(w_id), o, y: yout }),
    })?;
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}

/// The smallest window s ≤ T/2 such that every row i of `w` is constant (within float round-off of
/// exp/ln) at every position |i − j| ≥ s it reads (j ≤ i when causal), with that constant per
/// row; `None` when no such window exists.
fn local_window(w: &[f32], t: usize, causal: bool) -> Option<(usize, Vec<f32>)> {
    let reads = |i: usize, j: usize| !causal || j <= i;
    let mut shift = vec![0f32; t];
    let mut s = 1;
    for i in 0..t {
        // The farthest position the row reads stands for the outside value.
        let far = if causal || i >= t - 1 - i { 0 } else { t - 1 };
        if i.abs_diff(far) == 0 {
            continue;
        }
        let c = w[i * t + far];
        shift[i] = c;
        let tol = 1e-5 * (1.0 + c.abs());
        for j in 0..t {
            if reads(i, j) && (w[i * t + j] - c).abs() > tol {
                s = s.max(i.abs_diff(j) + 1);
            }
        }
    }
    // Only a window that saves work counts (s = T − 1 holds trivially).
    (s <= t / 2).then_some((s, shift))
}
