//! Generic 2-D convolution, NCHW per sample: `x [C, H, W]`, weight `[O, C/g, kh, kw]` in any
//! encoding (viewed as the matrix `[O, C/g·kh·kw]`), optional bias `[O]`, output `[O, H', W']`.
//! Stride, padding (top, left, bottom, right; zeros), dilation and groups.

use crate::kernels::linear::ProjW;
pub use kestrel_rt_core::params::Conv2dParams;
use kestrel_rt_format::ops::Activation;

mod depthwise;
mod depthwise_cl;
mod parts;
mod phases;
use depthwise::Depthwise;
use depthwise_cl::{channels_last_depthwise, cl_scratch, depthwise_cl, run_channels_last};
pub use parts::{conv2d_part, conv2d_part_unit, conv2d_splits};
use phases::MAX_TAPS;
pub(crate) use phases::{fill_padding, split_phases, Bands, PhaseGeom, TapOffsets};

/// Scratch for [`conv2d`] at least: one decoded weight row (the direct loop).
pub fn conv2d_scratch(p: &Conv2dParams) -> usize {
    p.patch_len()
}

/// Scratch for [`conv2d`]'s fast paths (what the planner reserves): the depthwise kernel's
/// padded input planes when each group has one input channel, else one group's input split
/// into stride-phase planes (none for a 1×1, stride-1, unpadded convolution), a chunk of the
/// GEMM's product and the weights decoded to f32 (used when they are stored in another
/// encoding).
pub fn conv2d_scratch_fast(p: &Conv2dParams) -> usize {
    let fast = if p.c / p.groups == 1 {
        Depthwise::of(p).scratch().max(if channels_last_depthwise(p) { cl_scratch(p) } else { 0 })
    } else {
        gemm_scratch(p)
    };
    fast.max(conv2d_scratch(p))
}

/// `y [O, H', W']` = act(conv(x, w) + b). With [`conv2d_scratch_fast`] scratch: one input channel per
/// group (depthwise, or a single-channel input) through [`Depthwise`] — the input plane padded
/// and split by stride phase once, then one contiguous multiply-add per tap over the whole
/// output plane — and otherwise, per group, the weights `[O/g, C/g·kh·kw]` times the patches
/// `[C/g·kh·kw, H'·W']`, read in place from the input's stride-phase planes
/// ([`matmul_kn_rows`](crate::kernels::simd::matmul_kn_rows), an implicit GEMM: no patch
/// matrix is built; a 1×1 unpadded stride-1 convolution multiplies its input itself through
/// [`matmul_kn`](crate::kernels::simd::matmul_kn)). With less scratch (a file planned before
/// these paths): a direct loop, each weight row decoded once.
pub fn conv2d(p: &Conv2dParams, proj: &ProjW<'_>, act: Activation, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    conv2d_clamped(p, proj, act, None, x, y, scratch);
}

/// [`conv2d`], then the layer's clamp where it has one (in the activation's pass).
pub fn conv2d_clamped(
    p: &Conv2dParams,
    proj: &ProjW<'_>,
    act: Activation,
    clamp: Option<crate::kernels::Clamp>,
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
) {
    conv2d_residual(p, proj, (act, clamp, None), x, y, scratch);
}

/// [`conv2d_clamped`] with a residual `r [O, H', W']` added before the activation (`y =
/// clamp(act(conv(x) + b + r))`, a ResNet block's skip connection): each output plane, or chunk
/// of rows, gets its residual in the epilogue pass while it is in cache, not in an `Add` of its
/// own over memory.
///
/// # Panics
/// If `r` is shorter than the output (`O·H'·W'`).
pub fn conv2d_residual(
    p: &Conv2dParams,
    proj: &ProjW<'_>,
    (act, clamp, residual): (Activation, Option<crate::kernels::Clamp>, Option<&[f32]>),
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let n = p.o * p.oh * p.ow;
    let epi = Epi::new(p, act, clamp, residual);
    if run_channels_last(p) && scratch.len() >= cl_scratch(p) {
        depthwise_cl(p, proj, x, y, scratch);
        return finish(proj, epi, &mut y[..n], Finish::Planes { plane: p.oh * p.ow, o0: 0 });
    }
    if p.c / p.groups == 1 {
        let dw = Depthwise::of(p);
        if scratch.len() >= dw.scratch() {
            return dw.run(p, proj, epi, x, y, scratch);
        }
    } else if scratch.len() >= gemm_scratch(p) {
        return conv2d_gemm(p, proj, epi, x, y, scratch, 0..p.o);
    }
    conv2d_direct(p, proj, x, y, scratch);
    epi.apply(&mut y[..n], 0);
}

/// What follows the bias: the layer's residual, then its activation, then its clamp. The fast
/// paths apply it to each output plane (or chunk of rows) as they finish it, while it is in
/// cache, not in a pass over the whole output.
#[derive(Clone, Copy)]
struct Epi<'r> {
    act: Activation,
    clamp: Option<crate::kernels::Clamp>,
    /// The residual over the whole output (`O·H'·W'`, checked).
    residual: Option<&'r [f32]>,
}

impl<'r> Epi<'r> {
    /// The epilogue of a layer `p`.
    ///
    /// # Panics
    /// If `residual` is shorter than the layer's output (`O·H'·W'`).
    fn new(
        p: &Conv2dParams,
        act: Activation,
        clamp: Option<crate::kernels::Clamp>,
        residual: Option<&'r [f32]>,
    ) -> Self {
        let n = p.o * p.oh * p.ow;
        if let Some(r) = residual {
            assert!(r.len() >= n, "conv2d: residual of {} values for {n} outputs", r.len());
        }
        Epi { act, clamp, residual }
    }

    /// The residual of the `n` outputs from flat index `at` of the layer's output on.
    #[cfg_attr(target_arch = "x86_64", inline(always))]
    fn residual_at(self, at: usize, n: usize) -> Option<&'r [f32]> {
        self.residual.map(|r| &r[at..at + n])
    }

    /// The activation and clamp of `y` (after its residual).
    #[cfg_attr(target_arch = "x86_64", inline(always))]
    fn activate(self, y: &mut [f32]) {
        crate::kernels::epilogue(self.act, self.clamp, y);
    }

    /// The epilogue of `y`, the outputs from flat index `at` of the layer's output on.
    #[cfg_attr(target_arch = "x86_64", inline(always))]
    fn apply(self, y: &mut [f32], at: usize) {
        if let Some(r) = self.residual {
            // `y + 1·r` through the detected ISA's vectors (this pass may be compiled for the
            // baseline): one rounding, the plain sum's bits.
            let n = y.len();
            crate::kernels::simd::axpy(y, 1.0, &r[at..at + n]);
        }
        crate::kernels::epilogue(self.act, self.clamp, y);
    }
}

/// Whether the patches of `p` are its input itself (1×1 kernel, stride 1, no padding).
fn pointwise(p: &Conv2dParams) -> bool {
    p.kh == 1 && p.kw == 1 && p.stride == [1, 1] && p.pad == [0; 4]
}

/// Output planes below which an ungrouped convolution multiplies transposed (`yᵀ = patchesᵀ ·
/// Wᵀ`, the dense kernels: a few rows against many weights) instead of `W · patches` (whose
/// register tile spans 32 output pixels).
const SMALL_PLANE: usize = 16;

/// Whether [`conv2d_gemm`] takes the transposed small-plane path.
fn small_plane(p: &Conv2dParams) -> bool {
    p.groups == 1 && p.oh * p.ow < SMALL_PLANE
}

/// Whether an ungrouped convolution with weights stored in another encoding than f32 (int8, int4,
/// f16) multiplies transposed like a small plane (`yᵀ = patchesᵀ · Wᵀ`, the dense kernels, which
/// dequantise the weights as they pack them, reading each stored byte once): where its plane has
/// at most a quarter as many pixels as it has output channels, decoding every weight to f32 for
/// the implicit GEMM moves more data than gathering the patches (ResNet-18's 512-channel 3 × 3
/// layers on 7 × 7 with int8 weights: 2.25 → 2.03 ms; its 256-channel 14 × 14 layers, where the
/// gather of 196 × 2304 patches costs more, 1.43 → 2.07 ms, so they keep the implicit GEMM).
/// Taken only when `room`, the scratch left for the decoded weights, holds the patches and the
/// transposed output instead (a file planned for the decoded weights always has it then).
fn decode_costs_more(p: &Conv2dParams, proj: &ProjW<'_>, room: usize) -> bool {
    let plane = p.oh * p.ow;
    p.groups == 1
        && proj.w.as_f32().is_none()
        && !patchify(p)
        && plane.saturating_mul(4) <= p.o
        && plane.saturating_mul(p.patch_len().saturating_add(p.o)) <= room
}

/// Whether `p` cuts its input into non-overlapping patches (a ViT's patch embedding: kernel =
/// stride, no padding, no dilation, one group): each patch row is then a contiguous copy.
fn patchify(p: &Conv2dParams) -> bool {
    p.groups == 1 && p.kh * p.kw > 1 && p.stride == [p.kh, p.kw] && p.pad == [0; 4] && p.dilation == [1, 1]
}

/// Scratch of [`conv2d_gemm`]: a chunk of one group's product and its phase planes, then the
/// decoded weights (or, small planes: the phase planes, the transposed patches and the
/// transposed output).
fn gemm_scratch(p: &Conv2dParams) -> usize {
    // Saturating: a geometry too large to plan never takes this path (the planner cannot
    // reserve usize::MAX, and `conv2d` falls back to the direct loop).
    let (k, plane) = (p.patch_len(), p.oh.saturating_mul(p.ow));
    let rows = plane.saturating_mul(k.saturating_add(p.o));
    if patchify(p) {
        return rows;
    }
    let built = product_len(p).saturating_add(planes_len(p));
    built.saturating_add(if small_plane(p) { rows } else { p.o.saturating_mul(k) })
}

/// Room for one group's input padded and split into stride phases: every row of the patch
/// matrix is then a contiguous run of them (the GEMM reads it in place), and small planes
/// gather their patches from there with no bounds checks (a 3×3 layer on a 2×2 map spent most
/// of its time computing which columns were inside the input).
fn planes_len(p: &Conv2dParams) -> usize {
    if pointwise(p) {
        0
    } else {
        (p.c / p.groups).saturating_mul(Depthwise::of(p).set())
    }
}

/// f32 elements of the implicit GEMM's product computed at a time: 64 Ki (256 KiB), so a chunk
/// is still in L2 when it is copied into y (the product of a large layer is not).
const PRODUCT_CHUNK: usize = 1 << 16;

/// Output channels per chunk of the implicit GEMM's product: the packed GEMM's group of weight
/// rows (`gemm_pa`), which it packs once per call. A chunk of all the channels of a wide layer
/// held few output rows (192 channels of 56 × 56: 5 rows, 290 columns), so every weight was
/// packed again for every 290 columns and each chunk ended in a mostly empty 32-column panel:
/// 163 GFLOP/s against 192 for the same layer with 64 channels (Zen 5).
const SLICE_M: usize = 64;

/// Output rows per chunk of the implicit GEMM's product `[O/g, rows·wq]` (at least one).
fn chunk_rows(p: &Conv2dParams) -> usize {
    let row = (p.o / p.groups).saturating_mul(Depthwise::of(p).geom.wq);
    (PRODUCT_CHUNK / row.max(1)).clamp(1, p.oh.max(1))
}

/// Room for the product the implicit GEMM computes before it is copied into y: `[O/g, rows ·
/// wq]` for a chunk of output rows (phase-plane rows of `wq` columns: the last `wq − W'` of each
/// are discarded); none for 1×1 unpadded stride-1 convolutions (straight into y) or small
/// planes (their own path).
fn product_len(p: &Conv2dParams) -> usize {
    if pointwise(p) || small_plane(p) {
        0
    } else {
        (p.o / p.groups).saturating_mul(chunk_rows(p)).saturating_mul(Depthwise::of(p).geom.wq)
    }
}

/// Convolution as a GEMM per group: `y_g [O/g, H'·W'] = W_g [O/g, K] · patches_g [K, H'·W']`
/// with `K = C/g·kh·kw`, then the bias.
///
/// `part`: the output channels computed (all of them, or a part of an ungrouped layer that
/// [`conv2d_splits`] allows: `y` then holds only those channels' planes, and every output is
/// summed as in the whole).
fn conv2d_gemm(
    p: &Conv2dParams,
    proj: &ProjW<'_>,
    epi: Epi<'_>,
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
    part: core::ops::Range<usize>,
) {
    let (cg, og, k) = (p.c / p.groups, p.o / p.groups, p.patch_len());
    let plane = p.oh * p.ow;
    if patchify(p) {
        // Patches as rows `[H'·W', C·kh·kw]` (each kernel row one contiguous copy), through the
        // dense kernels (`[patches, K] · Wᵀ`, any weight encoding), then transposed to y.
        let (xt, rest) = scratch.split_at_mut(plane * k);
        let yt = &mut rest[..plane * p.o];
        for (i, row) in xt.chunks_exact_mut(k).enumerate() {
            let (py, px) = (i / p.ow, i % p.ow);
            for (j, seg) in row.chunks_exact_mut(p.kw).enumerate() {
                let (ci, ky) = (j / p.kh, j % p.kh);
                let at = (ci * p.h + py * p.kh + ky) * p.w + px * p.kw;
                super::copy_short(seg, &x[at..at + p.kw]);
            }
        }
        // A dense layer over the patches, split across the pool as any (bit-identical).
        crate::kernels::linear::linear(xt, plane, &proj.w, None, Activation::None, yt);
        transpose2d(yt, plane, p.o, &mut y[..p.o * plane]);
        finish(proj, epi, &mut y[..p.o * plane], Finish::Planes { plane, o0: 0 });
        return;
    }
    let (prod, rest) = scratch.split_at_mut(product_len(p));
    let (planes, wbuf) = rest.split_at_mut(planes_len(p));
    let ph = Depthwise::of(p);
    if small_plane(p) || decode_costs_more(p, proj, wbuf.len()) {
        let (xt, rest) = wbuf.split_at_mut(plane * k);
        let yt = &mut rest[..plane * p.o];
        if pointwise(p) {
            transpose2d(&x[..k * plane], k, plane, xt);
        } else {
            // The patches straight in rows `[H'·W', K]` (a handful of pixels: element copies).
            split_channels(p, &ph, x, p.c, planes);
            im2row_phased(p, &ph, planes, xt);
        }
        // A dense layer over the patches, split across the pool as any (bit-identical).
        crate::kernels::linear::linear(xt, plane, &proj.w, None, Activation::None, yt);
        transpose2d(yt, plane, p.o, &mut y[..p.o * plane]);
        finish(proj, epi, &mut y[..p.o * plane], Finish::Planes { plane, o0: 0 });
        return;
    }
    // The weight rows computed: every group's, or the part's (one group).
    let (o0, o1) = (part.start, part.end);
    let whole = o0 == 0 && o1 == p.o;
    debug_assert!(whole || p.groups == 1);
    let a: &[f32] = match (proj.w.as_f32(), whole) {
        (Some(d), true) => d,
        (Some(d), false) => &d[o0 * k..o1 * k],
        (None, true) => {
            proj.w.decode_into(wbuf);
            wbuf
        }
        (None, false) => {
            let rows = proj.w.row_range(o0, o1).expect("conv2d: a part within the layer's channels");
            rows.decode_into(wbuf);
            &wbuf[..(o1 - o0) * k]
        }
    };
    // Rows of each group's product computed here (the part's), of `og` in the whole.
    let m = if whole { og } else { o1 - o0 };
    for g in 0..p.groups {
        let xg = &x[g * cg * p.h * p.w..(g + 1) * cg * p.h * p.w];
        let ag = &a[g * m * k..(g + 1) * m * k];
        let yg = &mut y[g * m * plane..(g + 1) * m * plane];
        if pointwise(p) {
            crate::kernels::simd::matmul_kn_part(ag, (m, og), k, xg, plane, yg, plane);
            continue;
        }
        // The implicit GEMM: patch row `(ci, tap)` is channel ci's phase planes from the tap's
        // offset on, and column `oy·wq + ox` of it is output pixel (oy, ox)'s input (columns
        // `ox ≥ W'` fall between output rows: computed, then dropped). The planes' extra row
        // (`Depthwise::hq`) keeps every such run inside the channel's planes. A chunk of output
        // rows at a time (see `PRODUCT_CHUNK`), copied into y with the bias.
        let (taps, set, wq) = (p.kh * p.kw, ph.set(), ph.geom.wq);
        let off = TapOffsets::new(p.kh, p.kw, p.stride, p.dilation, ph.geom.hq * ph.geom.wq, ph.geom.wq);
        // Chunks of at most `SLICE_M` output channels (of the whole layer's count, so a part
        // multiplies the same columns as the whole: the same kernels, the same sums) by as
        // many output rows as the product's room then holds.
        // Only where the GEMM packs its weights per call: the row-major kernels stream larger
        // weights once per call whatever the columns (ResNet's 512 × 4608 on 7 × 7 took 1.45 →
        // 1.60 ms in chunks of 64 channels).
        let slice = if crate::kernels::simd::packs_weights(og, k) { SLICE_M } else { og.max(1) };
        let rows = (prod.len() / og.min(slice).saturating_mul(wq).max(1)).clamp(1, p.oh);
        split_channels(p, &ph, xg, cg, planes);
        for oy0 in (0..p.oh).step_by(rows) {
            let oy1 = (oy0 + rows).min(p.oh);
            let n = (oy1 - oy0) * wq;
            let row_of = |kk: usize| (kk / taps) * set + off.get(kk % taps) + oy0 * wq;
            for m0 in (0..m).step_by(slice) {
                let mv = slice.min(m - m0);
                let (am, b) = (&ag[m0 * k..(m0 + mv) * k], &planes[..cg * set]);
                crate::kernels::simd::matmul_kn_rows_part(am, (mv, og), k, b, &row_of, n, prod, n);
                let chunk = Chunk { c0: g * og + o0 + m0, ow: p.ow, wq, plane, rows: oy0..oy1 };
                finish(proj, epi, &mut yg[m0 * plane..], Finish::Chunk(&prod[..mv * n], &chunk));
            }
        }
    }
    if pointwise(p) {
        finish(proj, epi, &mut y[..(o1 - o0) * plane], Finish::Planes { plane, o0 });
    }
}

/// Output rows `rows` of every channel of an implicit GEMM's product chunk (see
/// [`Finish::Chunk`]).
struct Chunk {
    /// The layer's channel of the product's first row.
    c0: usize,
    /// Output columns, and columns of each product row per output row (`wq ≥ ow`).
    ow: usize,
    wq: usize,
    /// Output pixels per channel.
    plane: usize,
    /// The output rows the chunk holds.
    rows: core::ops::Range<usize>,
}

/// What a convolution's finishing pass ([`finish`]) writes.
#[derive(Clone, Copy)]
enum Finish<'a> {
    /// An implicit GEMM's product chunk into its output rows (see [`Chunk`]).
    Chunk(&'a [f32], &'a Chunk),
    /// Output planes of `plane` pixels in place, the first the layer's channel `o0`.
    Planes { plane: usize, o0: usize },
}

/// A convolution's outputs finished: `+ b[o]` and the residual, in one pass with a ReLU or
/// clamp, then any other activation over the rows while they are in L1 — a product chunk
/// copied into its output rows on the way (the first `ow` of each `wq` columns), or output
/// planes in place. Compiled for the detected x86 ISA (built for the baseline, SSE2, the
/// separate bias, copy, residual and activation passes took 6 % of ResNet-18's time and 14 %
/// of MobileNetV2's). The same operations in the same order as those passes (one rounding
/// each), so the same bits.
fn finish(proj: &ProjW<'_>, epi: Epi<'_>, y: &mut [f32], job: Finish<'_>) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::simd::{isa, Isa};
        match isa() {
            // SAFETY: AVX-512F/AVX2/FMA detected by `isa()`.
            Isa::Avx512 => return unsafe { finish_avx512(proj, epi, y, job) },
            // SAFETY: AVX2/FMA detected by `isa()`.
            Isa::Avx2 | Isa::Avx2Vnni => return unsafe { finish_avx2(proj, epi, y, job) },
            _ => {}
        }
    }
    finish_body(proj, epi, y, job)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn finish_avx512(proj: &ProjW<'_>, epi: Epi<'_>, y: &mut [f32], job: Finish<'_>) {
    finish_body(proj, epi, y, job)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn finish_avx2(proj: &ProjW<'_>, epi: Epi<'_>, y: &mut [f32], job: Finish<'_>) {
    finish_body(proj, epi, y, job)
}

#[cfg_attr(target_arch = "x86_64", inline(always))]
fn finish_body(proj: &ProjW<'_>, epi: Epi<'_>, y: &mut [f32], job: Finish<'_>) {
    use crate::kernels::{relu, Elementwise};
    // A ReLU or clamp on the way (the same function of each element as the epilogue's pass);
    // other activations over the rows after.
    match Elementwise::of(epi.act, epi.clamp) {
        Some(Elementwise::Identity) => finish_store(proj, epi, y, job, (|v| v, true), false),
        Some(Elementwise::Relu) => finish_store(proj, epi, y, job, (relu, false), false),
        Some(Elementwise::Clamp(k)) => finish_store(proj, epi, y, job, (move |v| k.one(v), false), false),
        None => finish_store(proj, epi, y, job, (|v| v, true), true),
    }
}

/// [`finish_body`] with `f` (the identity when `ident`) applied to each output as it is stored,
/// and the epilogue's activation after when `activate`. No `+ 0.0` where there is no bias (it
/// would turn a −0 into +0).
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn finish_store(
    proj: &ProjW<'_>,
    epi: Epi<'_>,
    y: &mut [f32],
    job: Finish<'_>,
    (f, ident): (impl Fn(f32) -> f32 + Copy, bool),
    activate: bool,
) {
    let (prod, c) = match job {
        Finish::Chunk(prod, c) => (prod, c),
        Finish::Planes { plane, o0 } => {
            for (o, yp) in y.chunks_exact_mut(plane.max(1)).enumerate() {
                // The layer's channel of this plane.
                let o = o0 + o;
                let bias = proj.b.map_or(0.0, |b| b.get(o / b.cols(), o % b.cols()));
                match (epi.residual_at(o * plane, yp.len()), bias != 0.0) {
                    (Some(r), true) => yp.iter_mut().zip(r).for_each(|(v, &r)| *v = f((*v + bias) + r)),
                    (Some(r), false) => yp.iter_mut().zip(r).for_each(|(v, &r)| *v = f(*v + r)),
                    (None, true) => yp.iter_mut().for_each(|v| *v = f(*v + bias)),
                    (None, false) if !ident => yp.iter_mut().for_each(|v| *v = f(*v)),
                    (None, false) => {}
                }
                if activate {
                    epi.activate(yp);
                }
            }
            return;
        }
    };
    let (ow, wq) = (c.ow, c.wq);
    let n = c.rows.len() * wq;
    if n == 0 || ow == 0 {
        return;
    }
    for (o, pr) in prod.chunks_exact(n).enumerate() {
        // The layer's channel of product row o.
        let oc = c.c0 + o;
        let bias = proj.b.map_or(0.0, |b| b.get(oc / b.cols(), oc % b.cols()));
        let at = o * c.plane + c.rows.start * ow;
        let yo = &mut y[at..at + c.rows.len() * ow];
        let residual = epi.residual_at(oc * c.plane + c.rows.start * ow, c.rows.len() * ow);
        for (i, (yr, pr)) in yo.chunks_exact_mut(ow).zip(pr.chunks_exact(wq)).enumerate() {
            let pr = &pr[..ow];
            // Index loops: iterator chains were left out of line, built for the baseline.
            match (residual, bias != 0.0) {
                (Some(r), true) => {
                    let r = &r[i * ow..(i + 1) * ow];
                    for j in 0..ow {
                        yr[j] = f((pr[j] + bias) + r[j]);
                    }
                }
                (Some(r), false) => {
                    let r = &r[i * ow..(i + 1) * ow];
                    for j in 0..ow {
                        yr[j] = f(pr[j] + r[j]);
                    }
                }
                (None, true) => {
                    for j in 0..ow {
                        yr[j] = f(pr[j] + bias);
                    }
                }
                (None, false) => {
                    for j in 0..ow {
                        yr[j] = f(pr[j]);
                    }
                }
            }
        }
        if activate {
            epi.activate(yo);
        }
    }
}

/// `y [cols, rows] = xᵀ` for `x [rows, cols]`: whole 8×8 blocks through a register-sized
/// array (the compiler turns them into shuffles), the edges element by element.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn transpose2d(x: &[f32], rows: usize, cols: usize, y: &mut [f32]) {
    const B: usize = 8;
    let (x, y) = (&x[..rows * cols], &mut y[..rows * cols]);
    let (r8, c8) = (rows / B * B, cols / B * B);
    for r0 in (0..r8).step_by(B) {
        for c0 in (0..c8).step_by(B) {
            let mut blk = [[0.0f32; B]; B];
            for (i, b) in blk.iter_mut().enumerate() {
                b.copy_from_slice(&x[(r0 + i) * cols + c0..][..B]);
            }
            for j in 0..B {
                let dst = &mut y[(c0 + j) * rows + r0..][..B];
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = blk[i][j];
                }
            }
        }
    }
    for r in 0..rows {
        let cs = if r < r8 { c8..cols } else { 0..cols };
        for c in cs {
            y[c * rows + r] = x[r * cols + c];
        }
    }
}

/// Splits each of `cg` input channels `x [cg, H, W]` into its stride phases (see
/// [`Depthwise`]), channel `ci` at `planes[ci · set ..]`.
fn split_channels(p: &Conv2dParams, ph: &Depthwise, x: &[f32], cg: usize, planes: &mut [f32]) {
    let (hw, set) = (p.h * p.w, ph.set());
    for (ci, pl) in planes[..cg * set].chunks_exact_mut(set).enumerate() {
        ph.split(&x[ci * hw..(ci + 1) * hw], pl);
    }
}

/// The patches of all channels as rows `xt [H'·W', C·kh·kw]` from their phase planes.
fn im2row_phased(p: &Conv2dParams, ph: &Depthwise, planes: &[f32], xt: &mut [f32]) {
    let (taps, k) = (p.kh * p.kw, p.patch_len());
    let off = TapOffsets::new(p.kh, p.kw, p.stride, p.dilation, ph.geom.hq * ph.geom.wq, ph.geom.wq);
    let set = ph.set();
    for oy in 0..p.oh {
        for ox in 0..p.ow {
            let row = &mut xt[(oy * p.ow + ox) * k..][..k];
            let at = oy * ph.geom.wq + ox;
            for (ci, rc) in row.chunks_exact_mut(taps).enumerate() {
                let base = ci * set + at;
                for (t, v) in rc.iter_mut().enumerate() {
                    *v = planes[base + off.get(t)];
                }
            }
        }
    }
}

/// The output columns `ox` whose tap `tx = ox·sw + off − pl` lies inside `0..w`, as a range.
#[inline]
fn valid_cols(ow: usize, w: usize, sw: usize, off: usize, pl: usize) -> core::ops::Range<usize> {
    // tx ≥ 0 ⇔ ox·sw ≥ pl − off; tx < w ⇔ ox·sw < w + pl − off.
    let lo = pl.saturating_sub(off).div_ceil(sw);
    let hi = if w + pl > off { (w + pl - off).div_ceil(sw).min(ow) } else { 0 };
    lo.min(hi)..hi
}

/// Grouped (depthwise included) convolution, direct (no im2col), each weight row decoded once.
/// Output-stationary by rows: for every tap `(ci, ky, kx)` and output row, one branch-free
/// `y_row[ox] += w · x_row[ox·sw + off]` over the columns whose tap is inside the input (a
/// contiguous, vectorised axpy at stride 1). Each output accumulates its taps in the same
/// `(ci, ky, kx)` order as a per-pixel loop, then adds the bias.
fn conv2d_direct(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (h, w, kh, kw) = (p.h, p.w, p.kh, p.kw);
    let cg = p.c / p.groups;
    let og = p.o / p.groups;
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let (pt, pl) = (p.pad[0], p.pad[1]);
    let (oh, ow) = (p.oh, p.ow);
    let plane = oh * ow;
    for (oc, yp) in y[..p.o * plane].chunks_exact_mut(plane).enumerate() {
        let c0 = (oc / og) * cg;
        let wr = proj.w.row(oc, scratch);
        let bias = proj.b.map_or(0.0, |b| b.get(oc / b.cols(), oc % b.cols()));
        yp.fill(0.0);
        for ci in 0..cg {
            let xc = &x[(c0 + ci) * h * w..][..h * w];
            for ky in 0..kh {
                let wk = &wr[(ci * kh + ky) * kw..][..kw];
                for (oy, yr) in yp.chunks_exact_mut(ow).enumerate() {
                    let ty = oy * sh + ky * dh;
                    if ty < pt || ty - pt >= h {
                        continue;
                    }
                    let xr = &xc[(ty - pt) * w..][..w];
                    for (kx, &wv) in wk.iter().enumerate() {
                        let off = kx * dw;
                        let cols = valid_cols(ow, w, sw, off, pl);
                        if cols.is_empty() {
                            continue;
                        }
                        let first = cols.start * sw + off - pl;
                        let yseg = &mut yr[cols.clone()];
                        if sw == 1 {
                            let xs = &xr[first..first + yseg.len()];
                            for (o, &v) in yseg.iter_mut().zip(xs) {
                                *o += v * wv;
                            }
                        } else {
                            for (j, o) in yseg.iter_mut().enumerate() {
                                *o += xr[first + j * sw] * wv;
                            }
                        }
                    }
                }
            }
        }
        if bias != 0.0 {
            for v in yp.iter_mut() {
                *v += bias;
            }
        }
    }
}
