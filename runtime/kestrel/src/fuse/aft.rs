//! AFT-simple written out (σ(Q) ⊙ Σ_t softmax_t(K) ⊙ V, then the output projection) fused into
//! one `AftSimple` node. As for attention, the matcher is loose about layout and the numerical
//! check decides.

use super::attention::{forward_layout, projection, root_view, through_layout, tokens};
use super::{sole_consumer, try_replace, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_format::ops::*;

/// Fuses every non-causal AFT-simple block it can prove.
pub(super) fn aft_simple(b: &mut ModelBuilder, report: &mut FusionReport) {
    let mut i = 0;
    while i < b.ops().len() {
        if let Op::Softmax(_) = b.ops()[i] {
            if let Some((region, ops)) = match_aft_simple(b, i) {
                if try_replace(b, &region, ops, "aft-simple", report) {
                    continue;
                }
            }
        }
        i += 1;
    }
}

/// For `Binary(op)(a, b)` where one side is `side`, the other side.
fn other_operand(bin: &Binary, side: TensorId) -> Option<TensorId> {
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
    let mn = sole_consumer(b, w)?;
    let Op::Binary(mul) = b.ops()[mn] else { return None };
    if mul.op != BinaryOp::Mul {
        return None;
    }
    nodes.push(mn);
    let v_src = through_layout(b, other_operand(&mul, w)?, &mut nodes, &mut unit);
    let (vn, vd) = projection(b, v_src)?;
    (root_view(b, vd.x, &mut nodes) == x).then_some(())?;
    nodes.push(vn);
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
    let merged = forward_layout(b, gate.y, &mut nodes);
    let on = sole_consumer(b, merged)?;
    let Op::Dense(od) = b.ops()[on] else { return None };
    if od.act != Activation::None || unit != 1.0 {
        return None;
    }
    nodes.push(on);
    nodes.sort_unstable();
    nodes.dedup();
    let y = od.y;
    let td = [t as u32, d as u32];
    let mut ops = Vec::new();
    let xin = if b.shape_of(x)?.dims() == td {
        x
    } else {
        let xr = b.new_activation("aft_in", &[t, d]).ok()?;
        ops.push(Op::Reshape(Reshape { x, y: xr }));
        xr
    };
    let direct = b.shape_of(y)?.dims() == td;
    let yout = if direct { y } else { b.new_activation("aft_out", &[t, d]).ok()? };
    ops.push(Op::AftSimple(AftSimple {
        x: xin,
        causal: false,
        q: qd.proj,
        k: kd.proj,
        v: vd.proj,
        o: od.proj,
        y: yout,
    }));
    if !direct {
        ops.push(Op::Reshape(Reshape { x: yout, y }));
    }
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}

/// Fuses every Fastformer block it can prove: additive attention over q (α, global query g),
/// p = g ⊙ k, additive attention over p (β, global key G), u = G ⊙ v, W^R u + b^R + q.
pub(super) fn fastformer(b: &mut ModelBuilder, report: &mut FusionReport) {
    let mut i = 0;
    while i < b.ops().len() {
        if let Op::Softmax(_) = b.ops()[i] {
            if let Some((region, ops)) = match_fastformer(b, i) {
                if try_replace(b, &region, ops, "fastformer", report) {
                    continue;
                }
            }
        }
        i += 1;
    }
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
    let src = ad.x;
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

fn match_fastformer(b: &mut ModelBuilder, softmax: usize) -> Option<(Region, Vec<Op>)> {
    let mut nodes = Vec::new();
    // α over q → g.
    let (q, wqa, scale_a, g) = additive_pool(b, softmax, &mut nodes)?;
    let (qn, qd) = projection(b, q)?;
    nodes.push(qn);
    let x = root_view(b, qd.x, &mut nodes);
    let (t, d) = tokens(b, x)?;
    // p = g ⊙ k.
    let pn = sole_consumer(b, g)?;
    let Op::Binary(pm) = b.ops()[pn] else { return None };
    if pm.op != BinaryOp::Mul {
        return None;
    }
    nodes.push(pn);
    let k_src = through_layout(b, other_operand(&pm, g)?, &mut nodes, &mut 1.0);
    let (kn, kd) = projection(b, k_src)?;
    (root_view(b, kd.x, &mut nodes) == x).then_some(())?;
    nodes.push(kn);
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
    let un = sole_consumer(b, big_g)?;
    let Op::Binary(um) = b.ops()[un] else { return None };
    if um.op != BinaryOp::Mul {
        return None;
    }
    nodes.push(un);
    let v_src = through_layout(b, other_operand(&um, big_g)?, &mut nodes, &mut 1.0);
    let (vn, vd) = projection(b, v_src)?;
    (root_view(b, vd.x, &mut nodes) == x).then_some(())?;
    nodes.push(vn);
    let u = forward_layout(b, um.y, &mut nodes);
    let rn = sole_consumer(b, u)?;
    let Op::Dense(rd) = b.ops()[rn] else { return None };
    if rd.act != Activation::None {
        return None;
    }
    nodes.push(rn);
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
    let td = [t as u32, d as u32];
    let mut ops = Vec::new();
    let xin = if b.shape_of(x)?.dims() == td {
        x
    } else {
        let xr = b.new_activation("fastformer_in", &[t, d]).ok()?;
        ops.push(Op::Reshape(Reshape { x, y: xr }));
        xr
    };
    let direct = b.shape_of(y)?.dims() == td;
    let yout = if direct { y } else { b.new_activation("fastformer_out", &[t, d]).ok()? };
    ops.push(Op::Fastformer(Fastformer {
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
    }));
    if !direct {
        ops.push(Op::Reshape(Reshape { x: yout, y }));
    }
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}
