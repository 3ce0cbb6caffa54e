//! Stride-phase planes: a channel's input padded and split by stride phase ([`PhaseGeom`],
//! [`split_phases`]), so every tap of a strided or dilated window reads a contiguous run of one
//! plane, at an offset [`TapOffsets`] computes once per call. The depthwise convolution, the
//! implicit GEMM and the pools read their windows from these planes.

use kestrel_rt_core::params::Window2d;

/// Where [`split_phases`] puts an `h × w` plane padded by `pt` rows and `pl` columns in front:
/// `sh·sw` phase planes of `hq × wq`, phase `(ry, rx)` holding the padded plane's
/// `(ry + i·sh, rx + j·sw)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PhaseGeom {
    pub h: usize,
    pub w: usize,
    pub pt: usize,
    pub pl: usize,
    pub stride: [usize; 2],
    pub hq: usize,
    pub wq: usize,
    /// Per row phase `ry` (strides up to [`SPAN_PHASES`]): the phase rows the input rows land
    /// in ([`phase_span`]), so [`fill_padding`] divides by no runtime stride per channel.
    rows: [(usize, usize); SPAN_PHASES],
    /// Per column phase `rx`: the phase columns the input columns land in.
    cols: [(usize, usize); SPAN_PHASES],
}

/// Phase planes from which [`fill_padding`] stores only the padding: below it one `memset` of the
/// whole set costs less than a fill per row (measured with `kestrel bench ops --only depthwise`,
/// AVX-512: a 3×3 depthwise layer on 96 × 24 × 24, stride 2, took 25 → 39 µs filling by rows;
/// on 32 × 192 × 192 filling by rows took 940 → 880 µs at stride 1, 498 → 448 µs at stride 2).
const BORDER_FILL_MIN: usize = 4096;

/// Strides up to which [`PhaseGeom`] keeps where the input lands in each phase (larger strides
/// fill whole planes before the copies).
const SPAN_PHASES: usize = 4;

impl PhaseGeom {
    /// The phases of `win`'s padded plane: `⌈padded height / sh⌉` rows (plus one, so the last
    /// rows' scratch columns read inside the plane) of `⌈padded width / sw⌉` columns
    /// (saturating: a geometry too large to plan never splits).
    pub(crate) fn of(win: &Window2d) -> Self {
        let hp = win.h.saturating_add(win.pad[0]).saturating_add(win.pad[2]);
        let wp = win.w.saturating_add(win.pad[1]).saturating_add(win.pad[3]);
        PhaseGeom {
            h: win.h,
            w: win.w,
            pt: win.pad[0],
            pl: win.pad[1],
            stride: win.stride,
            hq: hp.div_ceil(win.stride[0]).saturating_add(1),
            wq: wp.div_ceil(win.stride[1]),
            rows: core::array::from_fn(|r| spans(win.h, win.pad[0], win.stride[0], r)),
            cols: core::array::from_fn(|r| spans(win.w, win.pad[1], win.stride[1], r)),
        }
    }
}

/// [`phase_span`] as a pair, for residues `r` below the stride (else empty).
fn spans(n: usize, pad: usize, stride: usize, r: usize) -> (usize, usize) {
    if stride == 0 || r >= stride {
        return (0, 0);
    }
    let s = phase_span(n, pad, stride, r);
    (s.start, s.end)
}

/// Splits `xc [h, w]` into its stride phases (see [`PhaseGeom`]); `fill` everywhere else (the
/// padding: 0 for a convolution, −∞ for a max pool).
#[cfg_attr(target_arch = "x86_64", inline(always))]
pub(crate) fn split_phases(g: &PhaseGeom, xc: &[f32], fill: f32, planes: &mut [f32]) {
    fill_padding(g, fill, planes);
    split_rows(g, xc, planes, 0..g.h);
}

/// Copies input rows `rows` of `xc [h, w]` into their cells of the phase planes, and nothing
/// else: the padding ([`fill_padding`]) and the other rows' cells keep what they hold, so planes
/// reused from channel to channel are padded once per call and filled a band at a time
/// ([`Bands`]).
#[cfg_attr(target_arch = "x86_64", inline(always))]
pub(crate) fn split_rows(g: &PhaseGeom, xc: &[f32], planes: &mut [f32], rows: core::ops::Range<usize>) {
    let (h, w, pt, pl) = (g.h, g.w, g.pt, g.pl);
    let [sh, sw] = g.stride;
    let plane = g.hq * g.wq;
    let (r0, r1) = (rows.start.min(h), rows.end.min(h));
    if r0 >= r1 {
        return;
    }
    let xc = &xc[r0 * w..r1 * w];
    if sh == 1 && sw == 1 {
        // One phase: the plane padded, each input row one short copy (no index arithmetic per
        // row: the general loop's divisions by the runtime strides cost as much as the copies).
        for (r, xr) in xc.chunks_exact(w).enumerate() {
            let at = (r0 + r + pt) * g.wq + pl;
            crate::kernels::copy_short(&mut planes[at..at + w], xr);
        }
        return;
    }
    for (r, xr) in xc.chunks_exact(w).enumerate() {
        let pr = r0 + r + pt;
        // Strides of 2 (the common case) by shifts, not divisions by a runtime value.
        let (ry, i) = if sh == 2 { (pr & 1, pr >> 1) } else { (pr % sh, pr / sh) };
        if sw == 2 && w >= 2 {
            // Input column 2t + u lands in phase (u + pl) mod 2 at column t + (u + pl) / 2:
            // one pass over pairs (deinterleaved by the compiler).
            let row = |rx: usize| (ry * 2 + rx) * plane + i * g.wq;
            let (r0, r1) = (row(pl % 2) + pl / 2, row((1 + pl) % 2) + pl.div_ceil(2));
            let (pairs, odd) = (w / 2, w % 2);
            // The two destinations lie in different phase planes: disjoint slices.
            let (d0, d1) = if r0 < r1 {
                let (a, b) = planes.split_at_mut(r1);
                (&mut a[r0..r0 + pairs + odd], &mut b[..pairs])
            } else {
                let (a, b) = planes.split_at_mut(r0);
                (&mut b[..pairs + odd], &mut a[r1..r1 + pairs])
            };
            for ((e, o), pair) in d0.iter_mut().zip(d1.iter_mut()).zip(xr.chunks_exact(2)) {
                *e = pair[0];
                *o = pair[1];
            }
            if odd == 1 {
                d0[pairs] = xr[w - 1];
            }
            continue;
        }
        for rx in 0..sw {
            // Input columns j with (j + pl) mod sw = rx land at phase column (j + pl) / sw.
            let j0 = (rx + sw - pl % sw) % sw;
            if j0 >= w {
                continue;
            }
            let base = (ry * sw + rx) * plane + i * g.wq + (j0 + pl) / sw;
            let dst = &mut planes[base..base + (w - j0).div_ceil(sw)];
            if sw == 1 {
                crate::kernels::copy_short(dst, xr);
            } else {
                for (d, &v) in dst.iter_mut().zip(xr[j0..].iter().step_by(sw)) {
                    *d = v;
                }
            }
        }
    }
}

/// Where the inputs of one residue class land in a phase plane: `x` positions `0..n` with
/// `(x + pad) mod stride = r` go to phase positions `start..end` (contiguous; empty when none).
#[inline]
fn phase_span(n: usize, pad: usize, stride: usize, r: usize) -> core::ops::Range<usize> {
    let first = (r + stride - pad % stride) % stride;
    if first >= n {
        return 0..0;
    }
    let start = (first + pad) / stride;
    start..start + (n - first).div_ceil(stride)
}

/// `fill` in every element of `planes` that [`split_phases`] does not copy an input into (the
/// padding of each phase plane, and anything past the last plane). On large planes only that:
/// the written cells of phase `(ry, rx)` are one rectangle (rows from [`phase_span`] of the
/// input rows, columns from that of the input columns), so only its border is stored, not the
/// whole plane before the copies overwrite most of it.
#[cfg_attr(target_arch = "x86_64", inline(always))]
pub(crate) fn fill_padding(g: &PhaseGeom, fill: f32, planes: &mut [f32]) {
    let [sh, sw] = g.stride;
    let (plane, wq) = (g.hq * g.wq, g.wq);
    if sh > SPAN_PHASES || sw > SPAN_PHASES || plane < BORDER_FILL_MIN {
        planes.fill(fill);
        return;
    }
    let set = (sh * sw * plane).min(planes.len());
    let (mut ry, mut rx) = (0, 0);
    for pp in planes[..set].chunks_mut(plane) {
        let (rows, cols) = (g.rows[ry], g.cols[rx]);
        // The next phase, row-major (no division per plane).
        rx += 1;
        if rx == sw {
            (ry, rx) = (ry + 1, 0);
        }
        let (rows, cols) = (rows.0..rows.1, cols.0..cols.1);
        if rows.is_empty() || cols.is_empty() || pp.len() < plane {
            pp.fill(fill);
            continue;
        }
        // Before the first written cell, between each written row's end and the next one's
        // start, and after the last.
        let first = rows.start * wq + cols.start;
        pp[..first].fill(fill);
        let mut at = first;
        for i in rows {
            let start = i * wq + cols.start;
            crate::kernels::fill_short(&mut pp[at..start], fill);
            at = i * wq + cols.end;
        }
        pp[at..].fill(fill);
    }
    planes[set..].fill(fill);
}

/// Taps per kernel whose phase-plane offsets [`TapOffsets`] keeps (a 11×11 kernel).
pub(super) const MAX_TAPS: usize = 121;

/// Offset of each tap `(ky, kx)` (in `ky·kw + kx` order) into one channel's phase planes:
/// `(ky·dh mod sh, kx·dw mod sw)`'s plane, row `ky·dh / sh`, column `kx·dw / sw` — computed
/// once per call (the divisions by the stride cost more than the copies they index when done
/// per element). Kernels above [`MAX_TAPS`] taps compute them on demand.
pub(crate) struct TapOffsets {
    off: [usize; MAX_TAPS],
    /// How many leading entries of `off` are computed: `kh·kw`, or 0 above [`MAX_TAPS`] (the
    /// table is then left unfilled and every offset is computed on demand).
    tabled: usize,
    geom: (usize, [usize; 2], [usize; 2], usize, usize),
}

impl TapOffsets {
    /// For a `kh × kw` kernel with `stride` and `dilation` over phase planes of `plane`
    /// elements and rows of `wq`.
    #[cfg_attr(target_arch = "x86_64", inline(always))]
    pub(crate) fn new(kh: usize, kw: usize, stride: [usize; 2], dilation: [usize; 2], plane: usize, wq: usize) -> Self {
        let taps = kh * kw;
        let tabled = if taps <= MAX_TAPS { taps } else { 0 };
        let mut t = Self { off: [0; MAX_TAPS], tabled, geom: (kw, stride, dilation, plane, wq) };
        for i in 0..tabled {
            t.off[i] = t.compute(i);
        }
        t
    }

    fn compute(&self, t: usize) -> usize {
        let (kw, [sh, sw], [dh, dw], plane, wq) = self.geom;
        let (ky, kx) = (t / kw, t % kw);
        let (ry, qy) = ((ky * dh) % sh, (ky * dh) / sh);
        let (rx, qx) = ((kx * dw) % sw, (kx * dw) / sw);
        (ry * sw + rx) * plane + qy * wq + qx
    }

    /// The first `taps` offsets as a slice, when they are tabled (a kernel of at most
    /// [`MAX_TAPS`] taps).
    pub(crate) fn table(&self, taps: usize) -> Option<&[usize]> {
        self.off[..self.tabled].get(..taps)
    }

    /// Tap `t`'s offset: from the table when it holds the kernel's taps, else computed (a
    /// kernel above [`MAX_TAPS`] taps leaves the table unfilled, so its first taps must not
    /// read it either: issue 33, where they all read tap 0's offset).
    #[cfg_attr(target_arch = "x86_64", inline(always))]
    pub(crate) fn get(&self, t: usize) -> usize {
        if t < self.tabled {
            self.off[t]
        } else {
            self.compute(t)
        }
    }
}

/// f32 of phase rows (all the phases of one channel) that a band of output rows reads, about:
/// 16 KiB, a third of a 48 KiB L1 data cache, beside the band's accumulator and output rows.
/// Whole planes of a large map (52 KiB per channel for a 112 × 112 input at stride 2) were
/// written to L2 by the split and read back from there by every tap.
const BAND_F32: usize = 4096;

/// A phase-plane kernel's output rows a band at a time, each band's input rows split into the
/// planes just before it reads them (in L1), each input row once per channel: `through(oy1)`
/// before computing output rows up to `oy1`.
pub(crate) struct Bands {
    /// Output rows per band.
    pub(crate) rows: usize,
    /// The last padded input row output row 0 reads: `(kh − 1)·dh`.
    reach: usize,
    /// Input rows split so far for the current channel.
    done: usize,
}

impl Bands {
    /// Bands over the phase planes `g` of a window `kh` rows tall at row dilation `dh`.
    pub(crate) fn new(g: &PhaseGeom, kh: usize, dh: usize) -> Self {
        let per_row = g.stride[0].saturating_mul(g.stride[1]).saturating_mul(g.wq).max(1);
        Bands { rows: (BAND_F32 / per_row).max(1), reach: kh.saturating_sub(1).saturating_mul(dh), done: 0 }
    }

    /// A new channel: none of its rows are split yet.
    pub(crate) fn restart(&mut self) {
        self.done = 0;
    }

    /// Splits the input rows of `xc` that output rows below `oy1` read and are not split yet
    /// (output row `oy` reads padded rows `oy·sh ..= oy·sh + reach`).
    #[cfg_attr(target_arch = "x86_64", inline(always))]
    pub(crate) fn through(&mut self, g: &PhaseGeom, xc: &[f32], planes: &mut [f32], oy1: usize) {
        let last = oy1.saturating_sub(1).saturating_mul(g.stride[0]).saturating_add(self.reach);
        let need = last.saturating_add(1).saturating_sub(g.pt).min(g.h);
        if need > self.done {
            split_rows(g, xc, planes, self.done..need);
            self.done = need;
        }
    }
}
