//! The depthwise convolution over stride-phase planes (one input channel per group): each
//! channel's input padded and split by stride phase once, every tap one contiguous multiply-add
//! over the output plane ([`simd::taps`](crate::kernels::simd::taps)), each output row then
//! copied out with its bias and the layer's ReLU or clamp applied on the way (the output written
//! once; other activations run over the finished plane). Where the output rows are at least two
//! vectors wide the taps write them themselves, bias included, bit for bit the same.

use super::{fill_padding, split_phases, Bands, Conv2dParams, Epi, PhaseGeom, TapOffsets};
use crate::kernels::linear::ProjW;

/// The depthwise kernel's geometry (one input channel per group). Each input plane is padded
/// and split by stride phase into `sh·sw` planes of `hq × wq`: phase `(ry, rx)` holds the padded
/// input's `(ry + i·sh, rx + j·sw)`. Output pixel `(oy, ox)`'s tap `(ky, kx)` is then element
/// `(oy + ky·dh / sh, ox + kx·dw / sw)` of phase `(ky·dh mod sh, kx·dw mod sw)`, so each tap is
/// one contiguous multiply-add over an accumulator of `H' × wq` (the columns from `W'` on are
/// scratch, never read back), whatever the stride and dilation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Depthwise {
    /// Where the phase planes put the padded input ([`PhaseGeom::of`] the window).
    pub(super) geom: PhaseGeom,
    /// Phase planes (`sh · sw`).
    phases: usize,
    /// Accumulator length `H' · wq`.
    acc: usize,
    /// Taps per weight row `kh · kw`.
    taps: usize,
}

impl Depthwise {
    pub(super) fn of(p: &Conv2dParams) -> Self {
        let geom = PhaseGeom::of(&p.window);
        Self {
            geom,
            phases: p.stride[0].saturating_mul(p.stride[1]),
            acc: p.oh.saturating_mul(geom.wq),
            taps: p.kh * p.kw,
        }
    }

    /// One channel's phase planes.
    pub(super) fn set(&self) -> usize {
        self.phases.saturating_mul(self.geom.hq).saturating_mul(self.geom.wq)
    }

    /// Phase planes, the accumulator and one decoded weight row.
    pub(super) fn scratch(&self) -> usize {
        self.set().saturating_add(self.acc).saturating_add(self.taps)
    }

    /// Writes input channel `xc [H, W]` into the phase planes (zeros in the padding).
    #[cfg_attr(target_arch = "x86_64", inline(always))]
    pub(super) fn split(&self, xc: &[f32], planes: &mut [f32]) {
        split_phases(&self.geom, xc, 0.0, planes);
    }

    /// The depthwise convolution, compiled for the detected x86 ISA (the copies and the
    /// per-tap loops vectorise to its width), portable elsewhere.
    pub(super) fn run(
        &self,
        p: &Conv2dParams,
        proj: &ProjW<'_>,
        epi: Epi<'_>,
        x: &[f32],
        y: &mut [f32],
        scratch: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::kernels::simd::{isa, Isa};
            match isa() {
                // SAFETY: AVX-512F/AVX2/FMA detected by `isa()`.
                Isa::Avx512 => return unsafe { dw_avx512(self, p, proj, epi, x, y, scratch) },
                // SAFETY: AVX2/FMA detected by `isa()`.
                Isa::Avx2 | Isa::Avx2Vnni => return unsafe { dw_avx2(self, p, proj, epi, x, y, scratch) },
                _ => {}
            }
        }
        self.run_body(p, proj, epi, x, y, scratch)
    }

    #[cfg_attr(target_arch = "x86_64", inline(always))]
    fn run_body(
        &self,
        p: &Conv2dParams,
        proj: &ProjW<'_>,
        epi: Epi<'_>,
        x: &[f32],
        y: &mut [f32],
        scratch: &mut [f32],
    ) {
        let og = p.o / p.groups;
        let (oh, ow) = (p.oh, p.ow);
        let plane = oh * ow;
        let (planes, rest) = scratch.split_at_mut(self.set());
        let (acc, wbuf) = rest.split_at_mut(self.acc);
        let off = TapOffsets::new(p.kh, p.kw, p.stride, p.dilation, self.geom.hq * self.geom.wq, self.geom.wq);
        // The planes padded once (every channel's split writes the same cells), then each
        // channel's split a band of output rows at a time, just before the band's taps read it
        // (see `Bands`: a large map's planes no longer make a round trip through L2).
        fill_padding(&self.geom, 0.0, planes);
        let mut bands = Bands::new(&self.geom, p.kh, p.dilation[0]);
        let mut channel = usize::MAX;
        // The taps write each output row straight into the output
        // ([`simd::taps_rows`](crate::kernels::simd::taps_rows): no accumulator store, bias pass
        // or row copy) where a row is at least two vectors and its vectors cover no more columns
        // than the accumulator's row (`wq`). Otherwise the accumulator, whose rows run together
        // into blocks of four vectors: measured on MNASNet (AVX2) the row path took 14-wide rows
        // 0.88× as fast (two vectors, one weight broadcast per 16 outputs instead of 32), and a
        // 12-wide row 0.92× (16 columns against the accumulator's 14); from 24 columns on it
        // was 1.07–1.34× as fast.
        let l = crate::kernels::simd::taps_rows_lanes();
        let rowwise = ow >= 2 * l && ow.div_ceil(l) * l <= self.geom.wq;
        let (taps, wq) = (p.kh * p.kw, self.geom.wq);
        for (oc, yp) in y[..p.o * plane].chunks_exact_mut(plane).enumerate() {
            // One input channel per group: output channels oc of group oc / og read channel
            // oc / og (all of them read channel 0 when the input has one channel).
            let c = oc / og;
            let xc = &x[c * p.h * p.w..(c + 1) * p.h * p.w];
            if c != channel {
                bands.restart();
                channel = c;
            }
            let wr = proj.w.row(oc, wbuf);
            let bias = proj.b.map_or(0.0, |b| b.get(oc / b.cols(), oc % b.cols()));
            for oy0 in (0..oh).step_by(bands.rows) {
                let oy1 = (oy0 + bands.rows).min(oh);
                bands.through(&self.geom, xc, planes, oy1);
                // Output row oy reads phase rows from oy on: the band's planes start at row oy0.
                let src = &planes[oy0 * wq..];
                let (yb, at) = (&mut yp[oy0 * ow..oy1 * ow], oc * plane + oy0 * ow);
                if let (true, Some(offs)) = (rowwise, off.table(taps)) {
                    // Rows straight into the output (the same values as the accumulator's path).
                    crate::kernels::simd::taps_rows(&wr[..taps], offs, src, wq, bias, ow, yb);
                    epi.apply(yb, at);
                    continue;
                }
                let accb = &mut acc[..(oy1 - oy0) * wq];
                taps_body(p, &off, wr, src, accb);
                copy_out(yb, accb, (ow, wq), bias, (epi, at));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dw_avx512(
    g: &Depthwise,
    p: &Conv2dParams,
    proj: &ProjW<'_>,
    epi: Epi<'_>,
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
) {
    g.run_body(p, proj, epi, x, y, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dw_avx2(
    g: &Depthwise,
    p: &Conv2dParams,
    proj: &ProjW<'_>,
    epi: Epi<'_>,
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
) {
    g.run_body(p, proj, epi, x, y, scratch)
}

/// `acc = Σ_taps w[ky, kx] · phase(ky, kx)[shifted]`, taps in `(ky, kx)` order: through
/// [`simd::taps`](crate::kernels::simd::taps) (x86: blocks of the accumulator held in registers
/// across every tap, written with intrinsics — the compiler kept a plain-Rust block on the
/// stack, 3× slower), else one contiguous multiply-add over the whole accumulator per tap.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn taps_body(p: &Conv2dParams, off: &TapOffsets, w: &[f32], planes: &[f32], acc: &mut [f32]) {
    let taps = p.kh * p.kw;
    if let Some(offs) = off.table(taps) {
        return crate::kernels::simd::taps(&w[..taps], offs, planes, acc);
    }
    let n = acc.len();
    acc.fill(0.0);
    for (t, &wv) in w[..p.kh * p.kw].iter().enumerate() {
        let base = off.get(t);
        for (a, &v) in acc.iter_mut().zip(&planes[base..base + n]) {
            *a += wv * v;
        }
    }
}

/// Output plane `yp [H', W']` from the accumulator `acc [H', wq]`: the bias over the whole
/// accumulator (contiguous: full vectors, where the rows of a small map, 6 or 12 wide, would run
/// in short blocks), each row one short copy, then the epilogue over the plane (in cache).
/// Fusing the bias and a ReLU/clamp into the row copies ([`map_short`](crate::kernels::map_short))
/// was measured 0.74–0.92× as fast on the 3×3 depthwise layers of `kestrel bench ops` (interleaved
/// rounds, AVX-512), so the passes stay separate.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn copy_out(yp: &mut [f32], acc: &mut [f32], (ow, wq): (usize, usize), bias: f32, (epi, at): (Epi<'_>, usize)) {
    if bias != 0.0 {
        acc.iter_mut().for_each(|a| *a += bias);
    }
    for (yr, ar) in yp.chunks_exact_mut(ow).zip(acc.chunks_exact(wq)) {
        crate::kernels::copy_short(yr, &ar[..ow]);
    }
    epi.apply(yp, at);
}
