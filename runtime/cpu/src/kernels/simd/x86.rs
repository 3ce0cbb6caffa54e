//! x86_64 AVX2 + FMA + F16C kernels (and AVX-VNNI for int8 × int8).
//!
//! The dense product is a register-blocked micro-kernel over 4 activation rows × 2 weight rows
//! (8 accumulators of 8 lanes): each 8-wide weight vector is loaded and dequantised in registers
//! once (f16 by `vcvtph2ps`, int8 by sign extension and `vcvtdq2ps`, int4 by nibble unpacking and
//! the group's scale) and used for 4 rows of `x`. The per-encoding loaders are `#[inline(always)]`
//! and only ever called from the `#[target_feature]` entry points, so they compile with AVX2.

use super::gemm;
use super::gemv512;
use super::loaders::{DenseW, Loader, I4W, I8W};
use super::q8_512;
use core::arch::x86_64::*;
use half::f16;
use kestrel_format::weight::{int4_groups, int4_row_bytes};
use kestrel_format::{WeightData, WeightView};

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY (whole fn): AVX available in every caller.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: AVX2 available in every caller.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }
}

/// `Σ a·b`, 4 independent 8-lane accumulators.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load reads indices < n of both slices.
    unsafe {
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8 * k)), _mm256_loadu_ps(pb.add(i + 8 * k)), *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }
}

/// `y += a·x` over the common length.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let (py, px) = (y.as_mut_ptr(), x.as_ptr());
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    // SAFETY: indices < n of both slices.
    unsafe {
        while i + 8 <= n {
            _mm256_storeu_ps(py.add(i), _mm256_fmadd_ps(av, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i))));
            i += 8;
        }
        while i < n {
            *py.add(i) += a * *px.add(i);
            i += 1;
        }
    }
}

/// Columns per cache block: a multiple of the int4 group (32), so blocks start on group
/// boundaries; 4 rows of `x` × 256 columns = 4 KiB stay in L1 across the weight rows.
const KC: usize = 256;

/// Cache lines ahead that the GEMV blocks prefetch each weight row (2 KiB).
const GEMV_PF_LINES: usize = 32;

/// A contiguous range of weight bytes to prefetch into L2 while a GEMV block runs: `step` cache
/// lines per 8 columns, from `p` through `end` (the next block of weight rows; see `gemv512.rs`).
#[derive(Clone, Copy)]
struct NextBlock {
    p: *const u8,
    end: *const u8,
    step: usize,
}

impl NextBlock {
    const NONE: NextBlock = NextBlock { p: core::ptr::null(), end: core::ptr::null(), step: 0 };

    /// Weight rows `o0..min(o0 + n, out)` of `w` (nothing when `o0 >= out`), spread over the
    /// `steps` 8-column steps of the current block.
    fn rows<L: Loader>(w: &L, o0: usize, n: usize, out: usize, steps: usize) -> NextBlock {
        if o0 >= out || w.cols() == 0 {
            return NextBlock::NONE;
        }
        let (a, b) = (w.addr(o0, 0), w.addr((o0 + n).min(out) - 1, w.cols() - 1));
        let lines = (b as usize - a as usize) / 64 + 1;
        NextBlock { p: a, end: b, step: lines.div_ceil(steps.max(1)) }
    }
}

/// `R` rows of `x` (from `r0`) times `O` rows of `W` (from `o0`) over columns `k0..k1`
/// (`k0 % 8 == 0`); the sums are stored in `y`, or added to it when `add`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block<L: Loader, const R: usize, const O: usize>(
    x: &[f32],
    r0: usize,
    w: &L,
    o0: usize,
    (out, ldy): (usize, usize),
    (k0, k1, add): (usize, usize, bool),
    y: *mut f32,
    mut next: NextBlock,
) {
    let inp = w.cols();
    let k8 = k0 + (k1 - k0) / 8 * 8;
    let xp = x.as_ptr();
    // SAFETY: rows r0..r0+R of x and o0..o0+O of W exist (callers' bounds); k < k8 ≤ k1 ≤ inp.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); O]; R];
        let mut k = k0;
        while k < k8 {
            for _ in 0..next.step {
                if next.p <= next.end {
                    _mm_prefetch::<_MM_HINT_T1>(next.p.cast());
                    next.p = next.p.wrapping_add(64);
                }
            }
            // A GEMV streams W once from memory: prefetch each row GEMV_PF_LINES cache lines
            // ahead, once per line, to keep more misses in flight than the hardware prefetchers
            // do for 8 streams. Measured on the MNIST paper model at batch 1: f32 2,190 → 1,720
            // µs per sample; int8 got slower (550–625 → 670 µs), so 1-byte encodings do not.
            let ahead = GEMV_PF_LINES * L::LINE_COLS;
            if R == 1 && L::LINE_COLS <= 32 && k % L::LINE_COLS == 0 && k + ahead < inp {
                for j in 0..O {
                    _mm_prefetch::<_MM_HINT_T0>(w.addr(o0 + j, k + ahead).cast());
                }
            }
            let mut wv = [_mm256_setzero_ps(); O];
            for (j, wv) in wv.iter_mut().enumerate() {
                *wv = w.load(o0 + j, k);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = _mm256_loadu_ps(xp.add((r0 + r) * inp + k));
                for (j, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_fmadd_ps(wv[j], xv, *acc);
                }
            }
            k += 8;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, acc) in acc.iter().enumerate() {
                let mut s = hsum(*acc);
                for kk in k8..k1 {
                    s += w.get(o0 + j, kk) * x[(r0 + r) * inp + kk];
                }
                let v = s * w.row_scale(o0 + j);
                debug_assert!(o0 + j < out);
                let yv = y.add((r0 + r) * ldy + o0 + j);
                *yv = if add { *yv + v } else { v };
            }
        }
    }
}

/// Longest row of `x` (f32 columns, 32 KiB) that [`gemv_stream`] reads once per f16 weight row.
const STREAM_MAX_COLS: usize = 8 * 1024;

/// Bytes ahead that [`gemv_stream`] prefetches the weight stream into L1.
const STREAM_PF_BYTES: usize = 8 * 1024;

/// The AVX2 batch-1 GEMV for f32 and f16 weights, as in `gemv512.rs`: one weight row at a time, so
/// the matrix is one sequential stream, each cache line prefetched [`STREAM_PF_BYTES`] ahead; 8
/// accumulators of 8 lanes per row (64 columns per step), added in a fixed tree, then the 8 lanes,
/// then the scalar column tail (timings in [`matmul_impl`]). int8/int4 keep the 8-row blocks (their 8-lane
/// widening loads made the stream slower: MNIST head int8 345–352 → 394–399 µs).
///
/// # Safety
/// As [`matmul_impl`]; the CPU must support AVX2, FMA and F16C.
#[inline(always)]
unsafe fn gemv_stream<L: Loader>(x: &[f32], rows: usize, w: &L, out: usize, y: *mut f32, ldy: usize) {
    const A: usize = 8;
    let inp = w.cols();
    let k8 = inp / 8 * 8;
    let ka = inp / (8 * A) * (8 * A);
    // SAFETY: every (o, k) read is < (out, inp); x indices < rows·inp; y per the caller's
    // contract. Prefetch addresses may run past the matrix (`wrapping_add`): prefetches never fault.
    unsafe {
        for o in 0..out {
            for r in 0..rows {
                let xr = x.as_ptr().add(r * inp);
                let mut acc = [_mm256_setzero_ps(); A];
                let mut k = 0;
                while k < ka {
                    if r == 0 {
                        let mut c = 0;
                        while c < 8 * A {
                            _mm_prefetch::<_MM_HINT_T0>(w.addr(o, k + c).wrapping_add(STREAM_PF_BYTES).cast());
                            c += L::LINE_COLS;
                        }
                    }
                    macro_rules! step {
                        ($($a:literal)*) => {$(
                            acc[$a] = _mm256_fmadd_ps(w.load(o, k + 8 * $a), _mm256_loadu_ps(xr.add(k + 8 * $a)), acc[$a]);
                        )*};
                    }
                    step!(0 1 2 3 4 5 6 7);
                    k += 8 * A;
                }
                while k < k8 {
                    acc[0] = _mm256_fmadd_ps(w.load(o, k), _mm256_loadu_ps(xr.add(k)), acc[0]);
                    k += 8;
                }
                let t = _mm256_add_ps(
                    _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])),
                    _mm256_add_ps(_mm256_add_ps(acc[4], acc[5]), _mm256_add_ps(acc[6], acc[7])),
                );
                let mut s = hsum(t);
                for kk in k8..inp {
                    s += w.get(o, kk) * *xr.add(kk);
                }
                *y.add(r * ldy + o) = s * w.row_scale(o);
            }
        }
    }
}

#[inline(always)]
unsafe fn matmul_impl<L: Loader>(x: &[f32], rows: usize, w: &L, out: usize, y: *mut f32, ldy: usize) {
    // A GEMV over f32 weights (16 columns per cache line), or f16 (32) with rows of x that fit in
    // L1: one sequential stream ([`gemv_stream`]). Measured against the 8-row blocks below
    // (`kestrel bench gemm --isa avx2`, weights evicted, old and new binaries alternated three
    // times on a Zen 5 core): MNIST head f32 1,340–1,419 → 875–1,173 µs, f16 538–642 → 413–514;
    // second head f32 297–350 → 193–238, f16 162–182 → 103–116; CIFAR head f32 6,147–6,821 →
    // 5,393–5,686 (its f16 rows, 20,736 inputs, stay on the blocks).
    if rows < 4 && (L::LINE_COLS == 16 || (L::LINE_COLS == 32 && w.cols() <= STREAM_MAX_COLS)) {
        // SAFETY: the caller's contract.
        return unsafe { gemv_stream(x, rows, w, out, y, ldy) };
    }
    // Column blocks of KC outermost (partial sums accumulate in `y`), then weight-row pairs,
    // then rows of `x`: the x block and the weight rows stay in cache, so a batch reads the
    // weights from memory once, not once per 4 rows, and long rows do not evict `x`.
    // SAFETY: `block` is called with in-bounds row/output/column ranges.
    unsafe {
        let inp = w.cols();
        let r4 = rows / 4 * 4;
        let o2 = out / 2 * 2;
        let mut k0 = 0;
        loop {
            // Few rows (a GEMV): no reuse of `x` to protect, and whole weight rows keep the
            // hardware prefetcher on long sequential streams.
            let k1 = if rows > 4 && inp - k0 > KC { k0 + KC } else { inp };
            let kr = (k0, k1, k0 > 0);
            let mut o = 0;
            if rows < 4 {
                // A GEMV (or a few rows): eight weight rows at a time, eight sequential streams
                // in flight for the prefetcher and eight independent FMA chains per x row
                // (measured: the MNIST paper model's 2048×4096 head GEMV went from ~15 to
                // ~30 GB/s; two rows at a time left it latency-bound).
                while o + 8 <= out {
                    // The next 8 weight rows prefetched into L2 during the first pass.
                    let next = NextBlock::rows(w, o + 8, 8, out, (k1 - k0) / 8);
                    for r in 0..rows {
                        block::<L, 1, 8>(x, r, w, o, (out, ldy), kr, y, if r == 0 { next } else { NextBlock::NONE });
                    }
                    o += 8;
                }
            }
            while o < o2 {
                let mut r = 0;
                while r < r4 {
                    block::<L, 4, 2>(x, r, w, o, (out, ldy), kr, y, NextBlock::NONE);
                    r += 4;
                }
                while r < rows {
                    block::<L, 1, 2>(x, r, w, o, (out, ldy), kr, y, NextBlock::NONE);
                    r += 1;
                }
                o += 2;
            }
            if o < out {
                let mut r = 0;
                while r < r4 {
                    block::<L, 4, 1>(x, r, w, o, (out, ldy), kr, y, NextBlock::NONE);
                    r += 4;
                }
                while r < rows {
                    block::<L, 1, 1>(x, r, w, o, (out, ldy), kr, y, NextBlock::NONE);
                    r += 1;
                }
            }
            if k1 >= inp {
                break;
            }
            k0 = k1;
        }
    }
}

/// Runs `$body` with `$l` bound to the loader of `$w`'s encoding (`$inp` columns).
macro_rules! with_loader {
    ($w:expr, $inp:expr, $l:ident => $body:expr) => {
        match $w.data() {
            WeightData::F32(d) => {
                let $l = &DenseW(d, $inp);
                $body
            }
            WeightData::F16(d) => {
                let $l = &DenseW(d, $inp);
                $body
            }
            WeightData::I8 { q, scales } => {
                let $l = &I8W(q, scales, $inp);
                $body
            }
            WeightData::I4 { q, scales } => {
                let $l = &I4W { q, scales, cols: $inp, row_bytes: int4_row_bytes($inp), groups: int4_groups($inp) };
                $body
            }
        }
    };
}

/// `y [rows, out] = x [rows, in] · Wᵀ` for any weight encoding (no bias): the packed 6×16 GEMM
/// ([`super::gemm`]) from [`gemm::MIN_ROWS`] rows (the transposed-`x` kernel up to
/// [`gemm::SMALL_M_MAX`] rows of f32), the dot-product kernels below.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `x.len() >= rows·in`, `y.len() >= rows·out`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_wt(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
    assert!(y.len() >= rows * w.rows());
    // SAFETY: y is exclusively borrowed and long enough for stride `out`.
    unsafe { matmul_wt_ptr(x, rows, w, y.as_mut_ptr(), w.rows()) }
}

/// [`matmul_wt`] into `rows` rows of `out` f32 at row stride `ldy` (a column block of a wider
/// output: threads split a layer by output features).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `x.len() >= rows·in`; `y` points at `rows` rows of
/// `w.rows()` writable f32 at stride `ldy ≥ w.rows()`, which no one else accesses meanwhile.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_wt_ptr(x: &[f32], rows: usize, w: &WeightView<'_>, y: *mut f32, ldy: usize) {
    let (out, inp) = (w.rows(), w.cols());
    // SAFETY: the caller's contract; the view's data lengths were validated by `WeightView::new`.
    unsafe {
        if !gemm_tiers::<gemm::Y, 6, 2, 6, 2>(x, rows, w, y, ldy) {
            with_loader!(w, inp, l => matmul_impl(x, rows, l, out, y, ldy))
        }
    }
}

/// [`matmul_wt_ptr`]'s GEMM tiers, with vectors `V`: from [`gemm::MIN_ROWS`] to
/// [`gemm::SMALL_M_MAX`] rows of f32 the transposed-`x` kernel (`SMR`×`SNV` vectors), from
/// [`gemm::MIN_ROWS`] rows the packed GEMM (`MR`×`NV` vectors). Returns false, having written
/// nothing, below [`gemm::MIN_ROWS`] rows (the caller's dot-product kernels take them). Checks
/// `x` and `ldy`.
///
/// # Safety
/// `V`'s instructions available; `y` as [`matmul_wt_ptr`].
#[inline(always)]
unsafe fn gemm_tiers<V: gemm::Vf, const SMR: usize, const SNV: usize, const MR: usize, const NV: usize>(
    x: &[f32],
    rows: usize,
    w: &WeightView<'_>,
    y: *mut f32,
    ldy: usize,
) -> bool {
    let (out, inp) = (w.rows(), w.cols());
    assert!(x.len() >= rows * inp && ldy >= out);
    // SAFETY: lengths checked; the view's data lengths were validated by `WeightView::new`.
    unsafe {
        let f32_rows = if let WeightData::F32(d) = w.data() { Some(d) } else { None };
        if let (Some(d), true) = (f32_rows, (gemm::MIN_ROWS..=gemm::SMALL_M_MAX).contains(&rows)) {
            gemm::gemm_small_m::<V, SMR, SNV>(x, rows, &DenseW(d, inp), out, y, ldy)
        } else if rows >= gemm::MIN_ROWS {
            with_loader!(w, inp, l => gemm::gemm::<V, _, MR, NV>(x, rows, l, out, y, ldy))
        } else {
            return false;
        }
    }
    true
}

/// [`matmul_wt`] with the AVX-512 packed 8×32 GEMM from [`gemm::MIN_ROWS`] rows (fewer rows:
/// the AVX2 dot-product kernels, which are bandwidth-bound there).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2, FMA and F16C; lengths as [`matmul_wt`].
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn matmul_wt_avx512(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
    assert!(y.len() >= rows * w.rows());
    // SAFETY: y is exclusively borrowed and long enough for stride `out`.
    unsafe { matmul_wt_avx512_ptr(x, rows, w, y.as_mut_ptr(), w.rows()) }
}

/// [`matmul_wt_avx512`] into rows at stride `ldy` (see [`matmul_wt_ptr`]).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2, FMA and F16C; the rest as [`matmul_wt_ptr`].
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn matmul_wt_avx512_ptr(x: &[f32], rows: usize, w: &WeightView<'_>, y: *mut f32, ldy: usize) {
    let (out, inp) = (w.rows(), w.cols());
    // SAFETY: the caller's contract; the view's data lengths were validated by `WeightView::new`.
    unsafe {
        if !gemm_tiers::<gemm::Z, 12, 1, 8, 2>(x, rows, w, y, ldy) {
            if rows < gemv512::MAX_ROWS {
                with_loader!(w, inp, l => gemv512::gemv(x, rows, l, out, y, ldy))
            } else {
                with_loader!(w, inp, l => matmul_impl(x, rows, l, out, y, ldy))
            }
        }
    }
}

/// `vpdpbusd` (unsigned × signed) take. `w = -128` never occurs (weights and activations are
/// clamped to ±127).
#[inline(always)]
unsafe fn sign_split(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
    // SAFETY: AVX2 available in every caller.
    unsafe { (_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)) }
}

/// `Σ a·b` in i32 over 32 int8 lanes: `vpmaddubsw` (pairs, ≤ 2·127² fits i16) then `vpmaddwd`.
#[inline(always)]
unsafe fn madd32(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    // SAFETY: AVX2 available in every caller.
    unsafe {
        let (u, s) = sign_split(a, b);
        let p16 = _mm256_maddubs_epi16(u, s);
        _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
    }
}

/// Integer `Σ a·b` of two int8 slices (values in ±127) with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    // SAFETY: indices < n.
    unsafe {
        while i + 32 <= n {
            let va = _mm256_loadu_si256(a.as_ptr().add(i).cast());
            let vb = _mm256_loadu_si256(b.as_ptr().add(i).cast());
            acc = madd32(acc, va, vb);
            i += 32;
        }
        let mut s = hsum_i32(acc);
        while i < n {
            s += i32::from(*a.get_unchecked(i)) * i32::from(*b.get_unchecked(i));
            i += 1;
        }
        s
    }
}

/// [`dot_i8`] with AVX-VNNI `vpdpbusd` (u8 × i8 → i32 in one instruction).
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn dot_i8_vnni(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    // SAFETY: indices < n.
    unsafe {
        while i + 32 <= n {
            let va = _mm256_loadu_si256(a.as_ptr().add(i).cast());
            let vb = _mm256_loadu_si256(b.as_ptr().add(i).cast());
            let (u, s) = sign_split(va, vb);
            // VEX-encoded AVX-VNNI `vpdpbusd` (acc += Σ₄ u8·i8 per i32 lane), written when the
            // MSRV predated `_mm256_dpbusd_avx_epi32` (stable since 1.89, which `q8_avx.rs` uses).
            core::arch::asm!(
                "{{vex}} vpdpbusd {acc}, {u}, {s}",
                acc = inout(ymm_reg) acc,
                u = in(ymm_reg) u,
                s = in(ymm_reg) s,
                options(pure, nomem, nostack),
            );
            i += 32;
        }
        let mut s = hsum_i32(acc);
        while i < n {
            s += i32::from(*a.get_unchecked(i)) * i32::from(*b.get_unchecked(i));
            i += 1;
        }
        s
    }
}

/// `y[r·out + o] = Σ q(x[r, k]) · w[o, k] · scale(o, k / 32)` for int4 weights with the AVX-512
/// VNNI kernel ([`super::q8_512::gemm_i4`]): f32 in the portable loop's order (per group an exact
/// i32 sum, scaled; per 256-input chunk a partial), so equal to it bit for bit. `y` is overwritten.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI (plus AVX2, FMA, F16C).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn q8_i4_avx512vnni(
    x: &[f32],
    rows: usize,
    inv: f32,
    q: &[u8],
    scales: &[f16],
    cols: usize,
    out: usize,
    y: &mut [f32],
) {
    assert!(
        x.len() >= rows * cols
            && q.len() >= out * int4_row_bytes(cols)
            && scales.len() >= out * int4_groups(cols)
            && y.len() >= rows * out
    );
    // SAFETY: features per the contract; lengths checked.
    unsafe { q8_512::gemm_i4(x, rows, inv, q, scales, cols, out, y) }
}

/// One int4 group (16 packed bytes) times up to 32 int8 activations.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_i4_group(bytes: &[u8], xq: &[i8]) -> i32 {
    assert!(bytes.len() >= 16 && xq.len() <= 32);
    let mut xs = [0i8; 32];
    xs[..xq.len()].copy_from_slice(xq);
    // SAFETY: 16 bytes and 32 activations in bounds (asserted / stack copy).
    unsafe {
        let b = _mm_loadu_si128(bytes.as_ptr().cast());
        let m = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(b, m);
        let hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        let eight = _mm_set1_epi8(8);
        let first = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
        let second = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight);
        let w = _mm256_set_m128i(second, first);
        let x = _mm256_loadu_si256(xs.as_ptr().cast());
        hsum_i32(madd32(_mm256_setzero_si256(), w, x))
    }
}

// The convolution GEMMs and depthwise taps live in `x86_conv.rs`.
pub use super::x86_conv::{
    matmul_kn, matmul_kn_avx512, matmul_kn_rows, matmul_kn_rows_avx512, taps, taps_avx512, taps_cl, taps_cl_avx512,
};

// The FMA peak probes and the vectorised GELU/softmax live in `x86_math.rs`.
pub use super::x86_math::{
    exp_sub, exp_sub_each, fma_probe_avx2, fma_probe_avx512, gelu, gelu_avx512, sigmoid, sigmoid_avx512, sigmoid_gate,
    silu, silu_avx512, small_head_avx512, softmax, softmax_scaled_avx512, tanh, PROBE_CHAINS,
};

// The int8 product and attention-internals wrappers live in `x86_q8.rs`.
pub use super::x86_q8::{
    abs_max_avx512, q8_dense_i8_avx512vnni, q8_dense_i8_avxvnni, q8_i8_avx512vnni, q8_i8_avxvnni,
    quantize_rows_i8_avx512, transpose_f32_avx512,
};
pub use super::x86_rows::{axpy_rows_avx512, exp_excess_avx512, layer_norm_rows_avx512};
