//! Depthwise convolution channels-innermost, for output maps of at most [`CL_MAX_PLANE`]
//! pixels, eight channels at a time: their planes moved into one padded `[Hp, Wp, 8]` plane,
//! every output pixel's taps summed with the channels in vector lanes and up to eight pixels in
//! registers ([`simd::taps_cl`](crate::kernels::simd::taps_cl)), the sums moved back (the caller
//! adds the bias with the activation, per plane).

use super::{Conv2dParams, MAX_TAPS};
use crate::kernels::linear::ProjW;
use crate::kernels::simd::{ClBlock, ClTaps};

/// Output planes up to which a depthwise convolution (one input channel per output channel)
/// runs channels-innermost on x86 (AVX2, AVX-512): every vector operation full width across
/// eight channels, eight output pixels in registers per weight load, instead of per channel a
/// handful of taps over a plane too small to vectorise well, its rows copied in and out one
/// short row at a time. Measured on Zen 3 (AVX2; `gemm_ab conv C×H×W dw K S P`, best of three
/// interleaved processes, against the per-channel planes and, on 7 × 7 maps, the previous
/// channels-innermost kernel; benches/results/amd-epyc-zen3-2core-shared-vm/depthwise-cl/):
/// 7 × 7 outputs 1.8–2.7×, stride 2 into 14 × 14 1.95–2.25× and into 28 × 28 1.16–1.22×, 5 × 5
/// stride 1 on 14 × 14 and 28 × 28 1.22–1.75×, 3 × 3 stride 1 on 14 × 14 and 28 × 28
/// 1.05–1.08×. Larger outputs keep the planes, whose rows are long enough for them (3 × 3 on
/// 56 × 56 and 112 × 112 measured 0.8× channels-innermost). Files plan the scratch: one
/// converted before a change of the limit takes this path where its scratch holds it, else the
/// per-channel planes.
const CL_MAX_PLANE: usize = 28 * 28;

/// The limit where the blocks are moved element by element (no x86 vector kernel): the 6×6
/// and 7×7 maps whose per-channel planes are too small for any vector width.
const CL_MAX_PLANE_PORTABLE: usize = 64;

/// Whether a depthwise convolution may run channels-innermost on some CPU (its scratch is
/// planned for it).
pub(super) fn channels_last_depthwise(p: &Conv2dParams) -> bool {
    p.groups == p.c && p.o == p.c && p.oh * p.ow <= CL_MAX_PLANE && p.kh * p.kw <= MAX_TAPS
}

/// Whether it runs channels-innermost on this CPU.
pub(super) fn run_channels_last(p: &Conv2dParams) -> bool {
    #[cfg(target_arch = "x86_64")]
    let vector = {
        use crate::kernels::simd::{isa, Isa};
        matches!(isa(), Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let vector = false;
    channels_last_depthwise(p) && (vector || p.oh * p.ow <= CL_MAX_PLANE_PORTABLE)
}

/// The padded input's sides `Hp × Wp`.
fn padded(p: &Conv2dParams) -> (usize, usize) {
    (p.h.saturating_add(p.pad[0]).saturating_add(p.pad[2]), p.w.saturating_add(p.pad[1]).saturating_add(p.pad[3]))
}

/// Channels per block: one AVX2 vector.
const BLOCK: usize = 8;

/// One block's padded input `[Hp·Wp, 8]` and output `[H'·W', 8]`, the weights blocked
/// `[⌈C/8⌉, kh·kw, 8]`, and one decoded weight row.
pub(super) fn cl_scratch(p: &Conv2dParams) -> usize {
    let (hp, wp) = padded(p);
    let taps = p.kh * p.kw;
    let per_block = hp.saturating_mul(wp).saturating_add(p.oh.saturating_mul(p.ow));
    let weights = p.c.div_ceil(BLOCK).saturating_mul(taps);
    per_block.saturating_add(weights).saturating_mul(BLOCK).saturating_add(taps)
}

/// Depthwise convolution channels-innermost (see [`CL_MAX_PLANE`]), eight channels at a time
/// ([`simd::depthwise_cl8`](crate::kernels::simd::depthwise_cl8)): their planes moved into one
/// padded `[Hp, Wp, 8]` plane (its border zeroed once per call), every tap of every output pixel
/// summed in tap order (the padding's taps add zero products), the sums moved back to the
/// channels' output planes (no bias: the caller adds it).
pub(super) fn depthwise_cl(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (c, taps, plane, hw) = (p.c, p.kh * p.kw, p.oh * p.ow, p.h * p.w);
    let (hp, wp) = padded(p);
    let blocks = c.div_ceil(BLOCK);
    let (xb, rest) = scratch.split_at_mut(hp * wp * BLOCK);
    let (yb, rest) = rest.split_at_mut(plane * BLOCK);
    let (wb, wrow) = rest.split_at_mut(blocks * taps * BLOCK);
    xb.fill(0.0);
    // The last block's lanes past C stay zero.
    wb[(blocks - 1) * taps * BLOCK..].fill(0.0);
    for oc in 0..c {
        let row = match proj.w.as_f32() {
            Some(d) => &d[oc * taps..(oc + 1) * taps],
            None => {
                proj.w.decode_row(oc, &mut wrow[..taps]);
                &wrow[..taps]
            }
        };
        let at = (oc / BLOCK) * taps * BLOCK + oc % BLOCK;
        for (t, &v) in row.iter().enumerate() {
            wb[at + t * BLOCK] = v;
        }
    }
    let mut off = [0usize; MAX_TAPS];
    for (t, o) in off[..taps].iter_mut().enumerate() {
        *o = ((t / p.kw) * p.dilation[0] * wp + (t % p.kw) * p.dilation[1]) * BLOCK;
    }
    let taps_g = ClTaps {
        c: BLOCK,
        oh: p.oh,
        ow: p.ow,
        row: p.stride[0] * wp * BLOCK,
        col: p.stride[1] * BLOCK,
        off: &off[..taps],
    };
    for jb in 0..blocks {
        let rows = (c - jb * BLOCK).min(BLOCK);
        let b = ClBlock { rows, h: p.h, w: p.w, pt: p.pad[0], pl: p.pad[1], hp, wp, taps: taps_g };
        crate::kernels::simd::depthwise_cl8(
            &b,
            &x[jb * BLOCK * hw..],
            &wb[jb * taps * BLOCK..(jb + 1) * taps * BLOCK],
            xb,
            yb,
            &mut y[jb * BLOCK * plane..],
        );
    }
}
