//! Channels-first pointwise layers that reached Kestrel channels-last, and their epilogues.
//!
//! A 1×1 convolution (or a channel concatenation, lowered to placing dense layers) on an NCHW
//! map often arrives as `Transpose(channels → last) → Dense → Transpose(back)`: two copies of the
//! map around a product. On `x [1…, C, S…]` that is exactly a 1×1 `Conv2d` on the view
//! `[C, 1, S]`, which multiplies the map in place. After that rewrite a per-channel bias and an
//! activation that followed the second transpose become the convolution's own.

use super::channels::per_channel;
use super::{
    between_transposes, dims, forward_through_views, rewrite_each, rewrite_each_named, sole_consumer, FusionReport,
    Transposed,
};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{Activation, BinaryOp, Conv2d, Op, Proj, Reshape};

/// `Transpose(P) → Dense → Transpose(P⁻¹)` where `P` moves axis `k` of `x [1…, C, S…]` last
/// (only unit axes before `k`) → a 1×1 `Conv2d` on `[C, 1, ΠS]` with the dense weight viewed
/// `[O, C, 1, 1]`, reshape views around it.
pub(super) fn channels_last_dense(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "channels-last dense as 1x1 conv", match_channels_last_dense);
}

fn match_channels_last_dense(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Dense(d) = b.ops()[n] else { return None };
    let Transposed { nodes, x, y, xd, perm, k } = between_transposes(b, n, d.x, d.y)?;
    // P moves k last and keeps the other axes in order.
    if !perm.iter().copied().eq((0..xd.len()).filter(|&a| a != k).chain([k])) {
        return None;
    }
    let (c, s) = (xd[k], xd[k + 1..].iter().product::<usize>());
    let (o, cols) = b.shape_of(d.proj.w)?.as_matrix()?;
    if cols != c {
        return None;
    }
    // The weight as [O, C, 1, 1], same values and encoding.
    let w_vals = b.weight_values(d.proj.w)?.to_vec();
    let dtype = b.weight_dtype(d.proj.w)?;
    let name = format!("{}.as_conv", b.tensor_name(d.proj.w).unwrap_or("w"));
    let w = b.weight_as(&name, &[o, c, 1, 1], w_vals, dtype).ok()?;
    let mut ops = Vec::new();
    let xin = if xd == [c, 1, s] {
        x
    } else {
        let t = b.new_activation("pointwise_in", &[c, 1, s]).ok()?;
        ops.push(Op::Reshape(Reshape { x, y: t }));
        t
    };
    let direct = dims(b, y)? == [o, 1, s];
    let yout = if direct { y } else { b.new_activation("pointwise_out", &[o, 1, s]).ok()? };
    ops.push(Op::Conv2d(Conv2d {
        clamp: None,
        residual: None,
        x: xin,
        proj: Proj { w, b: d.proj.b },
        stride: [1, 1],
        pad: [0; 4],
        dilation: [1, 1],
        groups: 1,
        act: d.act,
        y: yout,
    }));
    if !direct {
        ops.push(Op::Reshape(Reshape { x: yout, y }));
    }
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}

/// An activation-free `Conv2d`, reshape views, then `Binary Add` of a constant holding one value
/// per output channel → that bias folded into the convolution; an activation-free `Conv2d`,
/// views, then a `Unary` activation → the convolution's activation. The views are kept.
pub(super) fn conv_epilogue(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each_named(b, report, match_conv_epilogue);
}

fn match_conv_epilogue(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>, &'static str)> {
    let Op::Conv2d(cv) = b.ops()[n] else { return None };
    if cv.act != Activation::None || cv.clamp.is_some() {
        return None;
    }
    let mut nodes = vec![n];
    let (t, en, eop) = forward_through_views(b, cv.y, &mut nodes)?;
    let (mut conv, out, pattern) = match eop {
        Op::Unary(u) => {
            let act = Activation::of_unary(u.op)?;
            (Conv2d { act, ..cv }, u.y, "conv+activation (after views)")
        }
        // `x + c`, `c + x`, or `x − c` (a bias of −c).
        Op::Binary(add) if matches!(add.op, BinaryOp::Add | BinaryOp::Sub) => {
            let (c, other) = if b.is_weight(add.b) { (add.b, add.a) } else { (add.a, add.b) };
            if other != t || !b.is_weight(c) || (add.op == BinaryOp::Sub && add.b != c) {
                return None;
            }
            let sign = if add.op == BinaryOp::Sub { -1.0 } else { 1.0 };
            let od = dims(b, add.y)?;
            let yd = dims(b, cv.y)?;
            if od.iter().product::<usize>() != yd.iter().product::<usize>() {
                return None;
            }
            // Channel of each element of the sum: the conv's `[O, H, W]` layout, flat.
            let per = yd[1..].iter().product::<usize>().max(1);
            let values = b.weight_values(c)?.to_vec();
            let bias: Vec<f32> =
                per_channel(&values, &dims(b, c)?, &od, |i| i / per, yd[0])?.into_iter().map(|v| sign * v).collect();
            let merged: Vec<f32> = match cv.proj.b {
                Some(old) => b.weight_values(old)?.iter().zip(&bias).map(|(a, c)| a + c).collect(),
                None => bias,
            };
            let bid = b.weight("folded_bias", &[yd[0]], merged).ok()?;
            (Conv2d { proj: Proj { b: Some(bid), ..cv.proj }, ..cv }, add.y, "conv+bias (after views)")
        }
        _ => return None,
    };
    nodes.push(en);
    let yd = dims(b, cv.y)?;
    let direct = dims(b, out)? == yd;
    let y = if direct { out } else { b.new_activation("conv_fused", &yd).ok()? };
    conv.y = y;
    let mut ops = vec![Op::Conv2d(conv)];
    if !direct {
        ops.push(Op::Reshape(Reshape { x: y, y: out }));
    }
    nodes.sort_unstable();
    // A residual (added before the activation and the bias's sum alike) is the region's input too.
    let inputs = core::iter::once(cv.x).chain(cv.residual).collect();
    Some((Region { nodes, inputs, output: out }, ops, pattern))
}

/// A patchifying `Conv2d` (kernel = stride = p, no padding, one group, no activation, `[C, H,
/// W]` with H and W multiples of p) whose output only reaches the graph through reshapes and
/// transposes that put it in token order (`[O, H'·W']` → `[H'·W', O]`: a ViT's
/// `flatten(2).transpose(1, 2)`) → one `PatchEmbed` straight into tokens, the weight viewed
/// `[O, C·p·p]`: the convolution's transpose back to channels-first and the graph's transpose to
/// tokens both go.
pub(super) fn patch_embed(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "patchifying conv as patch embedding", match_patch_embed);
}

fn match_patch_embed(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Conv2d(cv) = b.ops()[n] else { return None };
    let wd = dims(b, cv.proj.w)?;
    let xd = dims(b, cv.x)?;
    let p = *wd.get(2)?;
    let square = wd.len() == 4 && wd[3] == p && p > 1 && cv.stride == [p as u32, p as u32];
    let plain = cv.pad == [0; 4] && cv.dilation == [1, 1] && cv.groups == 1 && cv.act == Activation::None;
    if !square || !plain || xd.len() != 3 || xd[1] % p != 0 || xd[2] % p != 0 {
        return None;
    }
    let (o, t) = (wd[0], (xd[1] / p) * (xd[2] / p));
    // The layout chain after the convolution, and the longest prefix of it that ends in token order.
    let mut chain = Vec::new();
    let mut y = cv.y;
    while let Some(c) = sole_consumer(b, y) {
        match b.ops()[c] {
            Op::Reshape(r) => y = r.y,
            Op::Transpose(tr) => y = tr.y,
            _ => break,
        }
        chain.push(c);
    }
    let token_order: Vec<usize> = (0..t * o).map(|k| (k % o) * t + k / o).collect();
    let end = (1..=chain.len())
        .rev()
        .find(|&m| super::layout::chain_permutation(b, &chain[..m]).is_some_and(|perm| perm == token_order))?;
    let out = b.ops()[chain[end - 1]].output();
    let w_vals = b.weight_values(cv.proj.w)?.to_vec();
    let dtype = b.weight_dtype(cv.proj.w)?;
    let name = format!("{}.as_patches", b.tensor_name(cv.proj.w).unwrap_or("w"));
    let w = b.weight_as(&name, &[o, wd[1] * p * p], w_vals, dtype).ok()?;
    let tokens = if dims(b, out)? == [t, o] { out } else { b.new_activation("patch_tokens", &[t, o]).ok()? };
    let mut ops = vec![Op::PatchEmbed(kestrel_rt_format::ops::PatchEmbed {
        x: cv.x,
        proj: Proj { w, b: cv.proj.b },
        patch: p as u32,
        y: tokens,
    })];
    if tokens != out {
        ops.push(Op::Reshape(Reshape { x: tokens, y: out }));
    }
    let mut nodes: Vec<usize> = core::iter::once(n).chain(chain[..end].iter().copied()).collect();
    nodes.sort_unstable();
    Some((Region { nodes, inputs: vec![cv.x], output: out }, ops))
}
