//! A skip connection into the convolution before it: `Conv2d` (no activation or clamp yet),
//! perhaps reshape views, then `Add` of its output and another activation of exactly its shape (a ResNet, RegNet or
//! MobileNetV2 block's residual) → the convolution with that activation as its `residual`,
//! added in its epilogue (`y = act(conv(x) + b + r)`), so the sum costs no pass of its own over
//! memory; the activation that usually follows (`Relu`) then folds in as any other
//! ([`super::pointwise::conv_epilogue`]). The fused node takes the `Add`'s place in the graph,
//! where the residual has been computed.

use super::{dims, forward_through_views, rewrite_each, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{Activation, BinaryOp, Conv2d, Op, Reshape};

/// Folds every `Add` of an activation after a convolution into it (see the module docs).
pub(super) fn conv_residual(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "conv+residual", match_conv_residual);
}

fn match_conv_residual(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Conv2d(cv) = b.ops()[n] else { return None };
    // The residual is added before the activation and the clamp: only where neither is set yet.
    if cv.act != Activation::None || cv.clamp.is_some() || cv.residual.is_some() {
        return None;
    }
    // Through reshape views (an exporter's `[1, O, H', W']`): the same elements in the same order.
    let mut nodes = vec![n];
    let (t, reader, op) = forward_through_views(b, cv.y, &mut nodes)?;
    let Op::Binary(add) = op else { return None };
    if add.op != BinaryOp::Add {
        return None;
    }
    let r = if add.a == t { add.b } else { add.a };
    if r == t || (add.a != t && add.b != t) || b.is_weight(r) {
        return None;
    }
    // Element by element: no broadcast either way.
    let (yd, ad) = (dims(b, cv.y)?, dims(b, add.y)?);
    if dims(b, r)? != ad || dims(b, t)? != ad || ad.iter().product::<usize>() != yd.iter().product::<usize>() {
        return None;
    }
    nodes.push(reader);
    nodes.sort_unstable();
    let mut ops = Vec::new();
    let residual = if ad == yd {
        r
    } else {
        let v = b.new_activation("residual_view", &yd).ok()?;
        ops.push(Op::Reshape(Reshape { x: r, y: v }));
        v
    };
    let y = if ad == yd { add.y } else { b.new_activation("conv_residual", &yd).ok()? };
    ops.push(Op::Conv2d(Conv2d { residual: Some(residual), y, ..cv }));
    if y != add.y {
        ops.push(Op::Reshape(Reshape { x: y, y: add.y }));
    }
    Some((Region { nodes, inputs: vec![cv.x, r], output: add.y }, ops))
}
