//! Element-wise patterns: GELU written out with erf, and an activation following a dense layer.

use super::{scalar, sole_consumer, try_replace, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_format::ops::{Activation, Binary, BinaryOp, Dense, Op, Unary, UnaryOp};

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * b.abs()
}

/// For `Binary(a, b)` with one operand a scalar weight, returns `(other operand, scalar)`.
fn with_scalar(b: &ModelBuilder, op: &Binary) -> Option<(u32, f32)> {
    if let Some(s) = scalar(b, op.b) {
        Some((op.a, s))
    } else {
        scalar(b, op.a).map(|s| (op.b, s))
    }
}

/// `x·0.5·(1 + erf(x/√2))` in any association order → `Unary(Gelu)`.
pub(super) fn gelu_erf(b: &mut ModelBuilder, report: &mut FusionReport) {
    let mut i = 0;
    while i < b.ops().len() {
        if let Some((region, x)) = match_gelu_erf(b, i) {
            let y = region.output;
            if try_replace(b, &region, vec![Op::Unary(Unary { x, op: UnaryOp::Gelu, y })], "gelu(erf)", report) {
                continue;
            }
        }
        i += 1;
    }
}

fn match_gelu_erf(b: &ModelBuilder, erf_node: usize) -> Option<(Region, u32)> {
    let ops = b.ops();
    let Op::Unary(Unary { x: scaled, op: UnaryOp::Erf, y: e }) = ops[erf_node] else { return None };
    // erf's argument: x·(1/√2) or x/√2.
    let pre = b.producer(scaled)?;
    let Op::Binary(bin) = ops[pre] else { return None };
    let (x, s) = with_scalar(b, &bin)?;
    let ok = match bin.op {
        BinaryOp::Mul => close(s, core::f32::consts::FRAC_1_SQRT_2),
        BinaryOp::Div => bin.b != x && close(s, core::f32::consts::SQRT_2),
        _ => false,
    };
    if !ok || sole_consumer(b, scaled)? != erf_node {
        return None;
    }
    // 1 + erf(.)
    let add = sole_consumer(b, e)?;
    let Op::Binary(ab) = ops[add] else { return None };
    if ab.op != BinaryOp::Add || !close(with_scalar(b, &ab)?.1, 1.0) {
        return None;
    }
    // (1 + erf) · x · 0.5 in either order: m1 multiplies by x or by x·0.5.
    let m1 = sole_consumer(b, ab.y)?;
    let Op::Binary(mb) = ops[m1] else { return None };
    if mb.op != BinaryOp::Mul {
        return None;
    }
    let other = if mb.a == ab.y { mb.b } else { mb.a };
    let mut nodes = vec![pre, erf_node, add, m1];
    let output = if other == x {
        // ((1 + erf)·x)·0.5
        let m2 = sole_consumer(b, mb.y)?;
        let Op::Binary(hb) = ops[m2] else { return None };
        if hb.op != BinaryOp::Mul || !close(with_scalar(b, &hb)?.1, 0.5) {
            return None;
        }
        nodes.push(m2);
        hb.y
    } else {
        // (x·0.5)·(1 + erf)
        let half = b.producer(other)?;
        let Op::Binary(hb) = ops[half] else { return None };
        let (hx, h) = with_scalar(b, &hb)?;
        if hb.op != BinaryOp::Mul || hx != x || !close(h, 0.5) || sole_consumer(b, other)? != m1 {
            return None;
        }
        nodes.push(half);
        mb.y
    };
    nodes.sort_unstable();
    Some((Region { nodes, inputs: vec![x], output }, x))
}

/// `Dense(act: None)` followed by its only consumer `Relu`/`Gelu`/`GeluTanh` → one `Dense`.
pub(super) fn dense_activation(b: &mut ModelBuilder, report: &mut FusionReport) {
    let mut i = 0;
    while i < b.ops().len() {
        if let Op::Dense(d) = b.ops()[i] {
            if d.act == Activation::None {
                if let Some(n) = sole_consumer(b, d.y) {
                    if let Op::Unary(u) = b.ops()[n] {
                        let act = match u.op {
                            UnaryOp::Relu => Some(Activation::Relu),
                            UnaryOp::Gelu => Some(Activation::Gelu),
                            UnaryOp::GeluTanh => Some(Activation::GeluTanh),
                            _ => None,
                        };
                        if let Some(act) = act {
                            let region = Region { nodes: vec![i, n], inputs: vec![d.x], output: u.y };
                            let fused = Op::Dense(Dense { x: d.x, proj: d.proj, act, y: u.y });
                            if try_replace(b, &region, vec![fused], "dense+activation", report) {
                                continue;
                            }
                        }
                    }
                }
            }
        }
        i += 1;
    }
}
