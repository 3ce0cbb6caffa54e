//! Element-wise patterns: GELU written out with erf, and an activation following a dense layer.

use super::{back_through_views, rewrite_each, rewrite_each_named, scalar, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{Activation, Binary, BinaryOp, Dense, Op, Unary, UnaryOp};

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
    rewrite_each(b, report, "gelu(erf)", |b, i| {
        let (region, x) = match_gelu_erf(b, i)?;
        let y = region.output;
        Some((region, vec![Op::Unary(Unary { x, op: UnaryOp::Gelu, y })]))
    });
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
    rewrite_each(b, report, "dense+activation", |b, i| {
        let Op::Dense(d) = b.ops()[i] else { return None };
        if d.act != Activation::None {
            return None;
        }
        let n = sole_consumer(b, d.y)?;
        let Op::Unary(u) = b.ops()[n] else { return None };
        // Deliberately these three (the transformer MLP's), as before the shared mapping.
        let act = Activation::of_unary(u.op)
            .filter(|a| matches!(a, Activation::Relu | Activation::Gelu | Activation::GeluTanh))?;
        let region = Region { nodes: vec![i, n], inputs: vec![d.x], output: u.y };
        Some((region, vec![Op::Dense(Dense { clamp: None, x: d.x, proj: d.proj, act, y: u.y })]))
    });
}

/// A constant added to (or subtracted from) an activation-free `Dense`'s output, directly or
/// after reshape views (exporters write `[T, 1] → [T] → [T, 1] + b` for one-output projections,
/// and a graph may add a scalar, subtract a mean, or add a bias to a layer that has one) → the
/// constant folded into the `Dense`'s bias (summed with the one it has), the views kept. The
/// constant must have `out` elements or one, and for `out` elements either `out == 1` or the
/// sum's last axis be the features (`[.., out]`, the constant `[1, .., out]`); the numerical
/// check proves the rest.
pub(super) fn dense_bias_through_views(b: &mut ModelBuilder, report: &mut FusionReport) {
    use kestrel_rt_format::ops::Reshape;
    rewrite_each_named(b, report, |b, i| {
        let (region, dense, bias, views) = match_bias_through_views(b, i)?;
        let (out, y) = (bias.len(), region.output);
        let dims: Vec<usize> =
            b.shape_of(dense.y).map(|s| s.dims().iter().map(|&v| v as usize).collect()).unwrap_or_default();
        let direct =
            b.shape_of(y).map(|s| s.dims().iter().map(|&v| v as usize).collect::<Vec<_>>()) == Some(dims.clone());
        let bid = b.weight("folded_bias", &[out], bias).ok()?;
        let dy = if direct { y } else { b.new_activation("dense_biased", &dims).ok()? };
        let mut proj = dense.proj;
        proj.b = Some(bid);
        let mut ops = vec![Op::Dense(Dense { y: dy, proj, ..dense })];
        if !direct {
            ops.push(Op::Reshape(Reshape { x: dy, y }));
        }
        Some((region, ops, if views { "dense+bias (through views)" } else { "dense+bias" }))
    });
}

fn match_bias_through_views(b: &ModelBuilder, add_node: usize) -> Option<(Region, Dense, Vec<f32>, bool)> {
    let Op::Binary(add) = b.ops()[add_node] else { return None };
    let (view, c, sign) = match (add.op, b.weight_values(add.a), b.weight_values(add.b)) {
        (BinaryOp::Add, None, Some(c)) => (add.a, c, 1.0),
        (BinaryOp::Add, Some(c), None) => (add.b, c, 1.0),
        (BinaryOp::Sub, None, Some(c)) => (add.a, c, -1.0),
        _ => return None,
    };
    // Back through reshapes (each output read only by the next step).
    let mut nodes = vec![add_node];
    let t = back_through_views(b, view, &mut nodes)?;
    let views = nodes.len() >= 2;
    let dn = b.producer(t)?;
    let Op::Dense(dense) = b.ops()[dn] else { return None };
    if dense.act != Activation::None
        || dense.clamp.is_some()
        || super::is_selection(b, dense.proj.w)
        || sole_consumer(b, t)? != *nodes.last()?
    {
        return None;
    }
    nodes.push(dn);
    let out = b.shape_of(dense.proj.w)?.as_matrix()?.0;
    let cid = if view == add.a { add.b } else { add.a };
    let (sum_dims, c_dims) = (b.shape_of(add.y)?, b.shape_of(cid)?);
    let features_last = sum_dims.dims().last().is_some_and(|&l| l as usize == out)
        && c_dims.dims().split_last().is_some_and(|(&l, rest)| l as usize == out && rest.iter().all(|&v| v == 1));
    let per_feature = c.len() == out && (out == 1 || features_last);
    if !(per_feature || c.len() == 1) || sum_dims.numel()? != b.shape_of(dense.y)?.numel()? {
        return None;
    }
    let c: Vec<f32> = if c.len() == 1 { vec![c[0]; out] } else { c.to_vec() };
    let old = match dense.proj.b {
        Some(old) => b.weight_values(old)?.to_vec(),
        None => vec![0.0; out],
    };
    let bias: Vec<f32> = old.iter().zip(&c).map(|(o, v)| o + sign * v).collect();
    nodes.sort_unstable();
    Some((Region { nodes, inputs: vec![dense.x], output: add.y }, dense, bias, views))
}
