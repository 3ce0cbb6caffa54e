//! AFT-conv written out with two depth-wise convolutions fused into one `AftConv` node.
//!
//! Exporters (ours included) write the stabilised form of DESIGN.md §2 Eq. 6 per head i:
//!
//! ```text
//! num = conv(e^K ⊙ V, kern) + c ⊙ Σ_t e^K ⊙ V      kern = exp(w − m) − exp(−m),  c = exp(−m)
//! den = conv(e^K,     kern) + c ⊙ Σ_t e^K
//! Y   = W^O (σ(Q) ⊙ num / den)                      (the gate before or after the division)
//! ```
//!
//! with the kernel and c folded to constants. Dividing num and den by c gives the op's form
//! (kernel exp(w) − 1, plain token sums), so the fused node stores `w = ln(kern / c + 1)`; the
//! token grid and kernel size come from the denominator's convolution. As elsewhere the matcher is
//! loose about layout and the numerical check decides.

use super::aft::{other_operand, stable_exp, StableExp};
use super::attention::{forward_layout, output_projection, projection, root_view};
use super::{around_tokens, rewrite_each, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;

/// Fuses every AFT-conv block it can prove.
pub(super) fn aft_conv(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "aft-conv", |b, i| {
        let Op::Unary(Unary { op: UnaryOp::Exp, .. }) = b.ops()[i] else { return None };
        match_aft_conv(b, i)
    });
}

/// The nodes that read `t` once reshape/transpose views are looked through (the views go to
/// `nodes`), with the view each reads.
fn uses_through_views(b: &ModelBuilder, t: TensorId, nodes: &mut Vec<usize>) -> Option<Vec<(usize, TensorId)>> {
    if b.escapes(t) {
        return None;
    }
    let mut out = Vec::new();
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        for c in b.consumers(t) {
            match b.ops()[c] {
                Op::Reshape(r) if !b.escapes(r.y) => {
                    nodes.push(c);
                    stack.push(r.y);
                }
                Op::Transpose(r) if !b.escapes(r.y) => {
                    nodes.push(c);
                    stack.push(r.y);
                }
                _ => out.push((c, t)),
            }
        }
    }
    Some(out)
}

/// The three uses of a stabilised exponential: a product (`⊙ V`, only for e^K), a depth-wise
/// convolution and a sum over tokens.
#[derive(Default)]
struct Uses {
    product: Option<(usize, Binary, TensorId)>,
    conv: Option<(usize, Conv2d)>,
    sum: Option<(usize, Reduce)>,
}

fn classify(b: &ModelBuilder, t: TensorId, nodes: &mut Vec<usize>) -> Option<Uses> {
    let mut u = Uses::default();
    for (n, read) in uses_through_views(b, t, nodes)? {
        match b.ops()[n] {
            Op::Binary(m) if m.op == BinaryOp::Mul && u.product.is_none() => u.product = Some((n, m, read)),
            Op::Conv2d(c) if u.conv.is_none() && c.residual.is_none() => u.conv = Some((n, c)),
            Op::Reduce(r) if r.op == ReduceOp::Sum && u.sum.is_none() => u.sum = Some((n, r)),
            _ => return None,
        }
    }
    Some(u)
}

/// A depth-wise, stride-1, "same"-padded convolution without bias: (channels, kernel size, grid).
fn depthwise(b: &ModelBuilder, c: &Conv2d) -> Option<(usize, usize, [usize; 2])> {
    let w = b.shape_of(c.proj.w)?;
    let x = b.shape_of(c.x)?;
    let ([o, 1, kh, kw], [ch, gh, gw]) = (w.dims(), x.dims()) else { return None };
    let s = *kh as usize;
    let p = (s / 2) as u32;
    let plain = c.proj.b.is_none() && c.stride == [1, 1] && c.dilation == [1, 1] && c.pad == [p, p, p, p];
    (plain && kh == kw && s % 2 == 1 && o == ch && c.groups == *o).then_some((
        *o as usize,
        s,
        [*gh as usize, *gw as usize],
    ))
}

/// `conv + c ⊙ sum` (either operand order): the conv's and the sum's outputs arrive through views.
/// Returns the per-head constant c and the combined tensor.
fn conv_plus_scaled_sum(
    b: &ModelBuilder,
    conv_out: TensorId,
    sum_out: TensorId,
    heads: usize,
    nodes: &mut Vec<usize>,
) -> Option<(Vec<f32>, TensorId)> {
    let conv_v = forward_layout(b, conv_out, nodes);
    let an = sole_consumer(b, conv_v)?;
    let Op::Binary(add) = b.ops()[an] else { return None };
    if add.op != BinaryOp::Add {
        return None;
    }
    nodes.push(an);
    let sum_v = forward_layout(b, sum_out, nodes);
    let mn = sole_consumer(b, sum_v)?;
    let Op::Binary(mul) = b.ops()[mn] else { return None };
    if mul.op != BinaryOp::Mul || other_operand(&add, conv_v)? != mul.y {
        return None;
    }
    nodes.push(mn);
    let c = b.weight_values(other_operand(&mul, sum_v)?)?;
    (c.len() == heads).then(|| (c.to_vec(), add.y))
}

fn match_aft_conv(b: &mut ModelBuilder, exp_node: usize) -> Option<(Region, Vec<Op>)> {
    let StableExp { mut nodes, ek, kd, x, t, d } = stable_exp(b, exp_node)?;
    let heads = b.shape_of(kd.proj.w)?.as_matrix()?.0;
    if heads == 0 || d % heads != 0 {
        return None;
    }
    // e^K: ⊙ V, the denominator's convolution and its token sum.
    let ek_uses = classify(b, ek, &mut nodes)?;
    let ((mn, mul, ek_read), (dcn, dconv), (dsn, dsum)) = (ek_uses.product?, ek_uses.conv?, ek_uses.sum?);
    let v_src = other_operand(&mul, ek_read)?;
    let v_src = root_view(b, v_src, &mut nodes);
    let (vn, vd) = projection(b, v_src)?;
    (root_view(b, vd.x, &mut nodes) == x).then_some(())?;
    nodes.extend([mn, vn, dcn, dsn]);
    let (ch, s, grid) = depthwise(b, &dconv)?;
    if ch != heads || grid[0] * grid[1] != t {
        return None;
    }
    // e^K ⊙ V: the numerator's convolution (one channel per value feature) and token sum.
    let ekv_uses = classify(b, mul.y, &mut nodes)?;
    if ekv_uses.product.is_some() {
        return None;
    }
    let ((ncn, nconv), (nsn, nsum)) = (ekv_uses.conv?, ekv_uses.sum?);
    nodes.extend([ncn, nsn]);
    let (nch, ns, ngrid) = depthwise(b, &nconv)?;
    if nch != d || ns != s || ngrid != grid {
        return None;
    }
    let (c_num, num) = conv_plus_scaled_sum(b, nconv.y, nsum.y, heads, &mut nodes)?;
    let (c_den, den) = conv_plus_scaled_sum(b, dconv.y, dsum.y, heads, &mut nodes)?;
    if c_num != c_den {
        return None;
    }
    // σ(Q) ⊙ num ÷ den, the gate applied before or after the division (÷ as a division or a
    // product with the reciprocal).
    let (q_pre, ratio) = gate_and_divide(b, num, den, &mut nodes)?;
    let q_pre = root_view(b, q_pre, &mut nodes);
    let (qn, qd) = projection(b, q_pre)?;
    (root_view(b, qd.x, &mut nodes) == x).then_some(())?;
    nodes.push(qn);
    let od = output_projection(b, ratio, &mut nodes)?;
    // w = ln(kern / c + 1) from the denominator's kernel [h, 1, s, s].
    let kern = b.weight_values(dconv.proj.w)?;
    let mut w = Vec::with_capacity(heads * s * s);
    for (i, taps) in kern.chunks(s * s).enumerate() {
        for &k in taps {
            let e = k / c_den[i] + 1.0;
            if !(e.is_finite() && e > 0.0) {
                return None;
            }
            w.push(e.ln());
        }
    }
    let w_id = b.weight("aft_conv_w", &[heads, s, s], w).ok()?;
    nodes.sort_unstable();
    nodes.dedup();
    let y = od.y;
    let (q, k, v, o) = (qd.proj, kd.proj, vd.proj, od.proj);
    let (heads, kernel, grid) = (heads as u32, s as u32, [grid[0] as u32, grid[1] as u32]);
    let ops = around_tokens(b, x, y, (t, d), |xin, yout| {
        Op::AftConv(AftConv { x: xin, heads, kernel, grid, q, k, v, w: w_id, o, y: yout })
    })?;
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}

/// `σ(Q) ⊙ num ÷ den` in either order; returns Q's pre-activation and the result.
fn gate_and_divide(
    b: &ModelBuilder,
    num: TensorId,
    den: TensorId,
    nodes: &mut Vec<usize>,
) -> Option<(TensorId, TensorId)> {
    // ÷ den applied to `a` (through views): the quotient.
    let divide = |a: TensorId, nodes: &mut Vec<usize>| -> Option<TensorId> {
        let a = forward_layout(b, a, nodes);
        let n = sole_consumer(b, a)?;
        let Op::Binary(op) = b.ops()[n] else { return None };
        match op.op {
            BinaryOp::Div if op.a == a && op.b == den => {}
            BinaryOp::Mul => {
                let rn = b.producer(other_operand(&op, a)?)?;
                let Op::Unary(Unary { x: r_in, op: UnaryOp::Reciprocal, .. }) = b.ops()[rn] else { return None };
                (r_in == den).then_some(())?;
                nodes.push(rn);
            }
            _ => return None,
        }
        nodes.push(n);
        Some(op.y)
    };
    // σ(Q) ⊙ a: Q's pre-activation and the product.
    let gate = |a: TensorId, nodes: &mut Vec<usize>| -> Option<(TensorId, TensorId)> {
        let a = forward_layout(b, a, nodes);
        let n = sole_consumer(b, a)?;
        let Op::Binary(m) = b.ops()[n] else { return None };
        if m.op != BinaryOp::Mul {
            return None;
        }
        let sn = b.producer(other_operand(&m, a)?)?;
        let Op::Unary(Unary { x: q_pre, op: UnaryOp::Sigmoid, .. }) = b.ops()[sn] else { return None };
        nodes.extend([n, sn]);
        Some((q_pre, m.y))
    };
    let mut trial = nodes.clone();
    if let Some(r) = divide(num, &mut trial).and_then(|r| gate(r, &mut trial)) {
        *nodes = trial;
        return Some(r);
    }
    let (q_pre, gated) = gate(num, nodes)?;
    Some((q_pre, divide(gated, nodes)?))
}
