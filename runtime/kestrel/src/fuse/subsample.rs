//! A strided 1×1 convolution that reached Kestrel as a subsampling and a stride-1 convolution:
//! tract rewrites ONNX's `Conv(kernel 1, stride s)` (ResNet's downsample shortcut) into a
//! `Downsample` per spatial axis, which the lowering turns into 1×1 max pools of stride `s`
//! (exact selections), then the convolution at stride 1. Folding them back gives one strided
//! `Conv2d`, whose kernel gathers the stride-phase columns itself (two ops and a copy of the map
//! fewer per shortcut).

use super::{rewrite_each, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{Conv2d, Op, PoolKind, Reshape};

/// `Pool2d(max, 1×1, stride s₁)` → [further such pools and reshape views, in any order] →
/// `Conv2d(1×1, stride 1, no padding)` → the `Conv2d` at stride `s₁·s₂·…` on the first pool's
/// input.
/// Every intermediate must have the next node as its only consumer; verified numerically.
pub(super) fn strided_pointwise_conv(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "strided 1x1 conv (subsampling folded)", |b, i| {
        let (region, conv) = match_subsampled_conv(b, i)?;
        // The convolution the lowering made of the 1×1 product may run on a flattened
        // `[C, 1, H'·W']` view: the strided one gives `[O, H', W']`, viewed back.
        let (xs, ys) = (b.shape_of(conv.x), b.shape_of(conv.y));
        let out = xs.zip(ys).and_then(|(xs, ys)| {
            let o = ys.dim(0);
            let h = xs.dim(1).div_ceil(conv.stride[0] as usize);
            let w = xs.dim(2).div_ceil(conv.stride[1] as usize);
            (ys.numel()? == o * h * w).then_some((ys, [o, h, w]))
        });
        let ops = match out {
            Some((ys, dims)) if ys.dims().iter().map(|&d| d as usize).eq(dims) => Some(vec![Op::Conv2d(conv)]),
            Some((_, dims)) => b
                .new_activation("conv2d_strided", &dims)
                .ok()
                .map(|t| vec![Op::Conv2d(Conv2d { y: t, ..conv }), Op::Reshape(Reshape { x: t, y: conv.y })]),
            None => None,
        };
        Some((region, ops?))
    });
}

/// A 1×1, unpadded, undilated max pool: a pure subsampling by its stride.
fn subsample(op: &Op) -> Option<(u32, u32, [u32; 2])> {
    match *op {
        Op::Pool2d(p) if p.kind == PoolKind::Max && p.kernel == [1, 1] && p.pad == [0; 4] && p.dilation == [1, 1] => {
            Some((p.x, p.y, p.stride))
        }
        _ => None,
    }
}

fn match_subsampled_conv(b: &ModelBuilder, first: usize) -> Option<(Region, Conv2d)> {
    let (x, mut y, mut stride) = subsample(&b.ops()[first])?;
    let mut nodes = vec![first];
    // Further subsamplings (tract makes one per axis) and reshape views, up to the convolution.
    let conv = loop {
        let next = sole_consumer(b, y)?;
        let op = b.ops()[next];
        nodes.push(next);
        if let Some((_, py, s)) = subsample(&op) {
            stride = [stride[0].checked_mul(s[0])?, stride[1].checked_mul(s[1])?];
            y = py;
            continue;
        }
        match op {
            Op::Reshape(r) => y = r.y,
            Op::Conv2d(conv) if conv.residual.is_none() => break conv,
            _ => return None,
        }
    };
    let w = b.shape_of(conv.proj.w)?;
    let pointwise = w.rank() == 4 && w.dim(2) == 1 && w.dim(3) == 1;
    if !pointwise || conv.x != y || conv.stride != [1, 1] || conv.pad != [0; 4] || conv.dilation != [1, 1] {
        return None;
    }
    // The pool's input must be a [C, H, W] map of the channels the convolution reads (the views
    // in between flatten or add unit axes; the output's size is checked by the caller).
    let (xs, cs) = (b.shape_of(x)?, b.shape_of(conv.x)?);
    if xs.rank() != 3 || cs.rank() != 3 || xs.dim(0) != cs.dim(0) {
        return None;
    }
    nodes.sort_unstable();
    let region = Region { nodes, inputs: vec![x], output: conv.y };
    Some((region, Conv2d { x, stride, ..conv }))
}
