//! Bounds after a layer: `Max`/`Min` with a constant, and a `Relu`, reading a dense layer's or a
//! convolution's output (through reshape views) → the layer's clamp, `min(max(act(·), lo),
//! hi)`. A ReLU6 (`Clip(0, 6)`: a ReLU folded into the layer, then `Min 6`), a hard tanh or any
//! `Clip` with constant bounds then costs no pass of its own over memory.
//!
//! Exact, NaN included: a bound is folded only in the order the clamp applies them, a lower
//! bound (`Max`, `Relu`) while there is no upper one yet, an upper bound (`Min`) at any time;
//! `Min` then `Max` stays as it is (on a NaN the two orders differ). Runs after every other
//! pass (the others never see a clamp, so none can drop one).

use super::{dims, forward_through_views, rewrite_each_named, scalar, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{BinaryOp, Op, Reshape, TensorId, UnaryOp};
use kestrel_rt_format::DType;

/// Folds every bound that follows a dense layer or a convolution into it, until none is left.
pub(super) fn clamp_epilogue(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each_named(b, report, |b, n| match_clamp(b, n).map(|(r, ops)| (r, ops, "layer+clamp")));
}

/// The layer at node `n`: its output and clamp bounds (`None` when it has none).
fn layer(b: &ModelBuilder, n: usize) -> Option<(TensorId, Option<TensorId>)> {
    match b.ops()[n] {
        Op::Dense(d) => Some((d.y, d.clamp)),
        Op::Conv2d(c) => Some((c.y, c.clamp)),
        _ => None,
    }
}

fn match_clamp(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let (y, clamp) = layer(b, n)?;
    let (lo, hi) = match clamp {
        Some(c) => match b.weight_values(c)? {
            &[lo, hi] => (lo, hi),
            _ => return None,
        },
        None => (f32::NEG_INFINITY, f32::INFINITY),
    };
    let mut nodes = vec![n];
    let (t, reader, op) = forward_through_views(b, y, &mut nodes)?;
    let (lo, hi, out) = match op {
        Op::Binary(bin) if matches!(bin.op, BinaryOp::Max | BinaryOp::Min) => {
            let c = if bin.a == t { scalar(b, bin.b)? } else { scalar(b, bin.a).filter(|_| bin.b == t)? };
            if c.is_nan() {
                return None;
            }
            match bin.op {
                BinaryOp::Max if hi == f32::INFINITY => (lo.max(c), hi, bin.y),
                BinaryOp::Min => (lo, hi.min(c), bin.y),
                _ => return None,
            }
        }
        // A ReLU on a layer without an activation is the layer's activation (the other passes'
        // pattern); after a clamp it is a lower bound of 0.
        Op::Unary(u) if u.op == UnaryOp::Relu && clamp.is_some() && hi == f32::INFINITY => (lo.max(0.0), hi, u.y),
        _ => return None,
    };
    if lo.is_nan() || hi.is_nan() || lo > hi {
        return None;
    }
    // The bound's output has the layer's shape (a scalar bound broadcasts to it), perhaps viewed.
    let yd = dims(b, y)?;
    let od = dims(b, out)?;
    if od.iter().product::<usize>() != yd.iter().product::<usize>() {
        return None;
    }
    nodes.push(reader);
    let bounds = b.weight_as("clamp", &[2], vec![lo, hi], DType::F32).ok()?;
    let direct = od == yd;
    let new_y = if direct { out } else { b.new_activation("clamped", &yd).ok()? };
    let mut ops = vec![match b.ops()[n] {
        Op::Dense(d) => Op::Dense(kestrel_rt_format::ops::Dense { clamp: Some(bounds), y: new_y, ..d }),
        Op::Conv2d(c) => Op::Conv2d(kestrel_rt_format::ops::Conv2d { clamp: Some(bounds), y: new_y, ..c }),
        _ => return None,
    }];
    if !direct {
        ops.push(Op::Reshape(Reshape { x: new_y, y: out }));
    }
    nodes.sort_unstable();
    let x = b.ops()[n].main_input();
    // A convolution's residual is the region's input too.
    let residual = match b.ops()[n] {
        Op::Conv2d(c) => c.residual,
        _ => None,
    };
    Some((Region { nodes, inputs: core::iter::once(x).chain(residual).collect(), output: out }, ops))
}
