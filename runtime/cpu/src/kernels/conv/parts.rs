//! A convolution in parts of its output channels, each summing exactly as the whole: how
//! threads split a layer ([`conv2d_splits`], [`conv2d_part`]).

use super::depthwise::Depthwise;
use super::depthwise_cl::{cl_scratch, run_channels_last};
use super::{
    conv2d_gemm, conv2d_residual, decode_costs_more, gemm_scratch, patchify, planes_len, product_len, small_plane,
    Conv2dParams, Epi,
};
use crate::kernels::linear::ProjW;
use kestrel_rt_format::ops::Activation;

/// Whether `p`, given `scratch` elements of scratch (a copy per part), can be computed in parts
/// of its output channels ([`conv2d_part`]) that each sum exactly as the whole: an ungrouped
/// layer (more than one input channel) on the implicit-GEMM or 1×1 path (not the transposed
/// small-plane, patch or decoded-weight paths, which run whole), whose kernels are chosen for the
/// whole product ([`simd::matmul_kn_part`](crate::kernels::simd::matmul_kn_part)); or a
/// depthwise layer (one output channel per input channel, no bias or an f32 one), whose
/// channels are independent: a part is the depthwise layer of its channels, on the same path.
pub fn conv2d_splits(p: &Conv2dParams, proj: &ProjW<'_>, scratch: usize) -> bool {
    if grouped_part(p, proj) {
        // Whole groups, each multiplied as in the whole (its own implicit GEMM of O/g rows).
        return scratch >= gemm_scratch(p);
    }
    if depthwise_part(p, proj) {
        // The whole on the path its parts take (a part's smaller scratch need must not move it
        // to the channels-innermost path where the whole runs by phase planes).
        let cl = run_channels_last(p) && scratch >= cl_scratch(p);
        return cl || (!run_channels_last(p) && scratch >= Depthwise::of(p).scratch());
    }
    let room = scratch.saturating_sub(product_len(p)).saturating_sub(planes_len(p));
    p.groups == 1
        && p.c > 1
        && p.o > 1
        && scratch >= gemm_scratch(p)
        && !patchify(p)
        && !small_plane(p)
        && !decode_costs_more(p, proj, room)
}

/// Output channels `part` of [`conv2d_residual`] (where [`conv2d_splits`]): `y` holds those
/// channels' planes (`part.len() · H'·W'`), the residual (if any) is the whole layer's; every
/// output equals the whole layer's bit for bit (threads split a layer so).
///
/// # Panics
/// If the layer does not split ([`conv2d_splits`]), `part` is empty or past `O`, or a slice is
/// short.
pub fn conv2d_part(
    p: &Conv2dParams,
    proj: &ProjW<'_>,
    (act, clamp, residual): (Activation, Option<crate::kernels::Clamp>, Option<&[f32]>),
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
    part: core::ops::Range<usize>,
) {
    assert!(conv2d_splits(p, proj, scratch.len()), "conv2d_part: a layer that does not split");
    assert!(part.start < part.end && part.end <= p.o, "conv2d_part: channels {part:?} of {}", p.o);
    let n = part.len() * p.oh * p.ow;
    if grouped_part(p, proj) {
        // The grouped layer of groups g0..g1: their input channels, weight rows, bias values and
        // residual planes; each group computed as the whole computes it.
        let (og, cg, plane) = (p.o / p.groups, p.c / p.groups, p.oh * p.ow);
        assert!(
            part.start.is_multiple_of(og) && part.end.is_multiple_of(og),
            "conv2d_part: channels {part:?} are not whole groups of {og}"
        );
        let (g0, g1) = (part.start / og, part.end / og);
        let g = g1 - g0;
        let shape = |d: &[usize]| kestrel_rt_format::Shape::from_usize(d).expect("conv2d_part: shape");
        let sub = Conv2dParams::new(
            &shape(&[g * cg, p.h, p.w]),
            &shape(&[g * og, cg, p.kh, p.kw]),
            p.stride,
            p.pad,
            p.dilation,
            g,
        )
        .expect("conv2d_part: a part of a valid layer");
        let part_proj = ProjW {
            w: proj.w.row_range(part.start, part.end).expect("conv2d_part: channels within the layer"),
            b: bias_part(proj, &part),
            act_scale: proj.act_scale,
        };
        let xs = &x[g0 * cg * p.h * p.w..g1 * cg * p.h * p.w];
        let rs = residual.map(|r| &r[part.start * plane..part.end * plane]);
        return conv2d_residual(&sub, &part_proj, (act, clamp, rs), xs, &mut y[..n], scratch);
    }
    if depthwise_part(p, proj) {
        // The depthwise layer of channels o0..o1: its input planes, weight rows, bias values and
        // residual planes.
        let (o0, o1, plane) = (part.start, part.end, p.oh * p.ow);
        let c = o1 - o0;
        let shape = |d: &[usize]| kestrel_rt_format::Shape::from_usize(d).expect("conv2d_part: shape");
        let sub =
            Conv2dParams::new(&shape(&[c, p.h, p.w]), &shape(&[c, 1, p.kh, p.kw]), p.stride, p.pad, p.dilation, c)
                .expect("conv2d_part: a part of a valid layer");
        let w = proj.w.row_range(o0, o1).expect("conv2d_part: channels within the layer");
        let part_proj = ProjW { w, b: bias_part(proj, &part), act_scale: proj.act_scale };
        let xs = &x[o0 * p.h * p.w..o1 * p.h * p.w];
        let rs = residual.map(|r| &r[o0 * plane..o1 * plane]);
        return conv2d_residual(&sub, &part_proj, (act, clamp, rs), xs, &mut y[..n], scratch);
    }
    conv2d_gemm(p, proj, Epi::new(p, act, clamp, residual), x, &mut y[..n], scratch, part);
}

/// The bias values of output channels `part` (an f32 bias, [`conv2d_splits`]).
fn bias_part<'a>(proj: &ProjW<'a>, part: &core::ops::Range<usize>) -> Option<kestrel_rt_format::WeightView<'a>> {
    proj.b.map(|b| {
        let v = b.as_f32().expect("conv2d_part: an f32 bias (conv2d_splits)");
        kestrel_rt_format::WeightView::f32(1, part.len(), &v[part.clone()]).expect("conv2d_part: bias part")
    })
}

/// Output channels a part of `p` holds a multiple of: a group's (`O/g`) for a grouped layer
/// split by whole groups, else 1.
pub fn conv2d_part_unit(p: &Conv2dParams, proj: &ProjW<'_>) -> usize {
    if grouped_part(p, proj) {
        p.o / p.groups
    } else {
        1
    }
}

/// Whether `p` is a grouped layer (neither one group nor one input channel a group: RegNet's,
/// ResNeXt's) [`conv2d_part`] splits by whole groups, with no bias or an f32 one.
fn grouped_part(p: &Conv2dParams, proj: &ProjW<'_>) -> bool {
    p.groups > 1 && p.c / p.groups > 1 && proj.b.is_none_or(|b| b.as_f32().is_some_and(|v| v.len() == p.o))
}

/// Whether `p` is a depthwise layer [`conv2d_part`] splits by channels: one output channel per
/// input channel, more than one, and no bias or an f32 one (a part's bias is a slice of it).
fn depthwise_part(p: &Conv2dParams, proj: &ProjW<'_>) -> bool {
    p.groups == p.c && p.o == p.c && p.c > 1 && proj.b.is_none_or(|b| b.as_f32().is_some_and(|v| v.len() == p.o))
}
