//! Depthwise convolution channels-innermost, for output maps of at most [`CL_MAX_PLANE`]
//! pixels: input and weights transposed to `[·, C]`, each output pixel's in-bounds taps summed
//! with the channels in registers ([`simd::taps_cl`](crate::kernels::simd::taps_cl)), the result
//! transposed back (the caller adds the bias with the activation, per plane).

use super::{transpose2d, Conv2dParams, MAX_TAPS};
use crate::kernels::linear::ProjW;

/// Output planes up to which a depthwise convolution (one input channel per output channel)
/// runs channels-innermost: one vector multiply-add per output pixel and tap across all
/// channels, instead of per channel a handful of taps over a plane too small to vectorise.
/// 64 pixels (8 × 8) measured on MNASNet 1.0's 480-channel 6 × 6 maps: 99 → 38 µs per node
/// against the per-channel planes (2026-11-29, AVX-512); at 144 its 12 × 12 maps got slower
/// (+22–30 µs a node), so the limit stays below them. Files plan the scratch for the path they
/// will take: one converted before a change of the limit keeps the per-channel path.
const CL_MAX_PLANE: usize = 64;

pub(super) fn channels_last_depthwise(p: &Conv2dParams) -> bool {
    p.groups == p.c && p.o == p.c && p.oh * p.ow <= CL_MAX_PLANE
}

/// The channels-last copies of the input `[H·W, C]`, the weights `[kh·kw, C]` and the output
/// `[H'·W', C]`, and one decoded weight row.
pub(super) fn cl_scratch(p: &Conv2dParams) -> usize {
    let per = (p.h.saturating_mul(p.w)).saturating_add(p.kh * p.kw).saturating_add(p.oh.saturating_mul(p.ow));
    p.c.saturating_mul(per).saturating_add(p.kh * p.kw)
}

/// Depthwise convolution channels-innermost (see [`CL_MAX_PLANE`]): input and weights
/// transposed to `[·, C]`, each output pixel's taps inside the input accumulated in tap order
/// (the padding contributes nothing), the result transposed back (no bias: the caller adds it).
pub(super) fn depthwise_cl(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::simd::{isa, Isa};
        match isa() {
            // SAFETY: AVX-512F/AVX2/FMA detected by `isa()`.
            Isa::Avx512 => return unsafe { depthwise_cl_avx512(p, proj, x, y, scratch) },
            // SAFETY: AVX2/FMA detected by `isa()`.
            Isa::Avx2 | Isa::Avx2Vnni => return unsafe { depthwise_cl_avx2(p, proj, x, y, scratch) },
            _ => {}
        }
    }
    depthwise_cl_body(p, proj, x, y, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn depthwise_cl_avx512(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    depthwise_cl_body(p, proj, x, y, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn depthwise_cl_avx2(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    depthwise_cl_body(p, proj, x, y, scratch)
}

/// [`depthwise_cl`]'s body, compiled per ISA.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn depthwise_cl_body(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (c, hw, taps, plane) = (p.c, p.h * p.w, p.kh * p.kw, p.oh * p.ow);
    let (xt, rest) = scratch.split_at_mut(hw * c);
    let (wt, rest) = rest.split_at_mut(taps * c);
    let (yt, wrow) = rest.split_at_mut(plane * c);
    transpose2d(&x[..c * hw], c, hw, xt);
    match proj.w.as_f32() {
        Some(d) => transpose2d(&d[..c * taps], c, taps, wt),
        None => {
            for oc in 0..c {
                proj.w.decode_row(oc, &mut wrow[..taps]);
                for (t, &v) in wrow[..taps].iter().enumerate() {
                    wt[t * c + oc] = v;
                }
            }
        }
    }
    cl_taps_body(p, xt, wt, yt);
    transpose2d(yt, plane, c, &mut y[..c * plane]);
}

/// The multiply-adds of [`depthwise_cl`]: per output pixel, the taps inside the input listed
/// (tap, input offset) and summed in tap order by [`simd::taps_cl`](crate::kernels::simd::taps_cl)
/// (kernels up to [`MAX_TAPS`] taps), else one pass over the channels per tap.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn cl_taps_body(p: &Conv2dParams, xt: &[f32], wt: &[f32], yt: &mut [f32]) {
    let c = p.c;
    let mut pairs = [(0usize, 0usize); MAX_TAPS];
    for oy in 0..p.oh {
        for ox in 0..p.ow {
            let yr = &mut yt[(oy * p.ow + ox) * c..][..c];
            let mut n = 0;
            taps_inside(p, oy, ox, |t, at| {
                if let Some(slot) = pairs.get_mut(n) {
                    *slot = (t, at * c);
                }
                n += 1;
            });
            if n <= MAX_TAPS {
                crate::kernels::simd::taps_cl(wt, &pairs[..n], xt, yr);
                continue;
            }
            // More taps inside the input than the list holds: one pass over the channels per tap.
            yr.fill(0.0);
            taps_inside(p, oy, ox, |t, at| {
                for ((o, &s), &wv) in yr.iter_mut().zip(&xt[at * c..][..c]).zip(&wt[t * c..][..c]) {
                    *o += wv * s;
                }
            });
        }
    }
}

/// Calls `f(tap, input pixel)` for each tap `ky·kw + kx` of output pixel `(oy, ox)` that lies
/// inside the input (the padding contributes nothing), in tap order; the input pixel is
/// `iy·W + ix`.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn taps_inside(p: &Conv2dParams, oy: usize, ox: usize, mut f: impl FnMut(usize, usize)) {
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let (pt, pl) = (p.pad[0], p.pad[1]);
    for ky in 0..p.kh {
        let iy = oy * sh + ky * dh;
        if iy < pt || iy - pt >= p.h {
            continue;
        }
        for kx in 0..p.kw {
            let ix = ox * sw + kx * dw;
            if ix < pl || ix - pl >= p.w {
                continue;
            }
            f(ky * p.kw + kx, (iy - pt) * p.w + ix - pl);
        }
    }
}
