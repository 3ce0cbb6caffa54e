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
