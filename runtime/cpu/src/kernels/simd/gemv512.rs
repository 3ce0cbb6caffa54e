//! AVX-512 GEMV (`y [rows, N] = x [rows, K] · Wᵀ` for fewer than [`MAX_ROWS`] rows of `x`): the
//! batch-1 path, where each weight is used once per row of `x` and the time is the weights'
//! trip from memory plus their dequantisation. Two kernels, chosen by shape:
//!
//! * [`gemv_stream`], when a row of `x` fits in L1 beside the weight stream (`K ≤`
//!   [`STREAM_MAX_COLS`]) or the weights are f32: one weight row at a time, so the matrix is read
//!   as **one sequential stream**, every cache line prefetched into L1 [`PF_BYTES`] ahead (across
//!   row ends: the next row follows in memory); eight accumulators per row, each summing every
//!   eighth 16-column step, cover the FMA latency. `x` is read again for every weight row.
//! * [`gemv_blocks`] otherwise: eight weight rows side by side, 16 columns per step, so each
//!   load of `x` serves eight rows (a long int8 row reads 4 bytes of `x` per weight byte, from L2
//!   once `x` outgrows L1); the next 8-row block is prefetched into L2 evenly over the current
//!   block's steps (f16 also prefetches each row into L1; f32 weights always stream).
//!
//! Measured on one Zen 5 core of a shared VM. In one process, the two kernels' calls interleaved
//! (2560 × 4096 matrix, 42 MB as f32, median of 57 calls each, three runs): the stream takes
//! 0.84–0.88× the 8-row kernel's time for f32, 0.83× for f16, 0.73× for int4, and the same for
//! int8 (10.5 MB, served from L3). A plain AVX-512 read of the same 42 MB with the same prefetch
//! ran at 0.62–0.75× of the stream's time: the rest of the gap is the second load stream (`x`)
//! and the FMAs, not the prefetch pattern. On the CIFAR head's 20,736-column rows (`kestrel bench
//! gemm`, old and new binaries alternated, weights evicted before each call) the stream was faster
//! for f32 (5,131–6,614 µs against 6,363–7,736) but slower for int8 (1,697–2,729 against
//! 1,523–1,625) and no better for f16, hence the rule above.
//!
//! Both sum per row and lane over `k` in a fixed order, then reduce the 16 lanes, then add the
//! column tail (`K % 16`) in scalar: results equal the scalar kernels' up to f32 summation order
//! (`runtime/cpu/tests/simd.rs`), and a row's result depends only on that row and the shape (any
//! split of the output features across threads gives the same bits).

use super::loaders::{Loader, F16W, F32W, I4W, I8W};
use core::arch::x86_64::*;
use kestrel_format::INT4_GROUP;

/// Rows of `x` below which [`gemv`] is used (from there the AVX2 4-row blocks reuse each
/// weight load across rows).
pub const MAX_ROWS: usize = 4;

/// Weight rows per block.
const O: usize = 8;

/// Cache lines ahead that each weight row is prefetched by [`gemv_blocks`] (f16; 2 KiB as in
/// `x86.rs`).
const PF_LINES: usize = 32;

/// Bytes ahead of the current step that [`gemv_stream`] prefetches the weight stream into L1
/// (measured on Zen 5: 8 KiB beat 4 KiB and 16 KiB).
const PF_BYTES: usize = 8 * 1024;

/// Accumulators per row in [`gemv_stream`] (16-column steps in flight).
const A: usize = 8;

/// Longest row of `x` (f32 columns, 32 KiB) that [`gemv_stream`] reads once per weight row.
const STREAM_MAX_COLS: usize = 8 * 1024;

/// A [`Loader`] that also reads 16 columns at a time.
pub(super) trait Loader16: Loader {
    /// Whether [`gemv_blocks`] prefetches this encoding's rows into L1 (measured: it helps f32
    /// and f16, where the bytes per FMA are many; not int8/int4).
    const PREFETCH: bool;
    /// f32 weights: [`gemv_stream`] whatever `K` (rereading `x` costs no more than the weights).
    const F32: bool = false;
    /// Columns `k..k+16` of row `o`, dequantised except for the per-row scale
    /// (`k % 16 == 0`, `k + 16 <= cols`).
    unsafe fn load16(&self, o: usize, k: usize) -> __m512;
}

impl Loader16 for F32W<'_> {
    const PREFETCH: bool = true;
    const F32: bool = true;
    #[inline(always)]
    unsafe fn load16(&self, o: usize, k: usize) -> __m512 {
        debug_assert!(k + 16 <= self.1);
        // SAFETY: (o, k..k+16) inside the matrix (callers' bounds); AVX-512F in every caller.
        unsafe { _mm512_loadu_ps(self.0.as_ptr().add(o * self.1 + k)) }
    }
}

impl Loader16 for F16W<'_> {
    const PREFETCH: bool = true;
    #[inline(always)]
    unsafe fn load16(&self, o: usize, k: usize) -> __m512 {
        debug_assert!(k + 16 <= self.1);
        // SAFETY: 16 halves (32 bytes) inside the matrix; AVX-512F in every caller.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(self.0.as_ptr().add(o * self.1 + k).cast())) }
    }
}

impl Loader16 for I8W<'_> {
    const PREFETCH: bool = false;
    #[inline(always)]
    unsafe fn load16(&self, o: usize, k: usize) -> __m512 {
        debug_assert!(k + 16 <= self.2);
        // SAFETY: 16 bytes inside the matrix; AVX-512F in every caller.
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(self.0.as_ptr().add(o * self.2 + k).cast()))) }
    }
}

impl Loader16 for I4W<'_> {
    const PREFETCH: bool = false;
    #[inline(always)]
    unsafe fn load16(&self, o: usize, k: usize) -> __m512 {
        debug_assert!(k + 16 <= self.cols && k.is_multiple_of(16));
        // 8 bytes → 16 nibbles in order (low nibble first) → signed bytes through a 16-entry
        // table → 16 f32, times the group's scale (16 columns never straddle a group of 32).
        // SAFETY: 8 bytes inside row o's packed bytes; the group index is < groups; AVX-512F,
        // SSSE3 and F16C in every caller.
        unsafe {
            let b = _mm_loadl_epi64(self.q.as_ptr().add(o * self.row_bytes + k / 2).cast());
            let m = _mm_set1_epi8(0x0f);
            let n = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16::<4>(b), m));
            let lut = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
            let v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(lut, n)));
            let h = self.scales.get_unchecked(o * self.groups + k / INT4_GROUP).to_bits();
            let s = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))));
            _mm512_mul_ps(v, s)
        }
    }
}

/// `y[r·ldy + o] = Σ_k x[r·K + k] · W[o, k] · scale(o)` for `r < rows`, `o < out`.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2, FMA and F16C; `x.len() >= rows·K`, and `y` valid for
/// writes at `r·ldy + o` for every `r < rows`, `o < out` (`ldy >= out`); `w` has `out` rows.
#[inline(always)]
pub(super) unsafe fn gemv<L: Loader16>(x: &[f32], rows: usize, w: &L, out: usize, y: *mut f32, ldy: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        if L::F32 || w.cols() <= STREAM_MAX_COLS {
            gemv_stream(x, rows, w, out, y, ldy)
        } else {
            gemv_blocks(x, rows, w, out, y, ldy)
        }
    }
}

/// [`gemv`] one weight row at a time (see the module notes).
///
/// # Safety
/// As [`gemv`].
/// Not inlined: each kernel compiled on its own, as a target-feature function.
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn gemv_stream<L: Loader16>(x: &[f32], rows: usize, w: &L, out: usize, y: *mut f32, ldy: usize) {
    let inp = w.cols();
    debug_assert!(x.len() >= rows * inp && ldy >= out);
    let k16 = inp / 16 * 16;
    // Whole groups of A steps; the remaining steps go to accumulator 0.
    let ka = inp / (16 * A) * (16 * A);
    // SAFETY: every (o, k) read is < (out, inp); every x index < rows·inp; y per the contract.
    // Prefetch addresses may run past the matrix (`wrapping_add`): a prefetch never faults.
    unsafe {
        for o in 0..out {
            for r in 0..rows {
                let xr = x.as_ptr().add(r * inp);
                let mut acc = [_mm512_setzero_ps(); A];
                let mut k = 0;
                while k < ka {
                    // Each line once (first pass over x only; later rows of x find W in L1/L2).
                    if r == 0 {
                        let mut c = 0;
                        while c < 16 * A {
                            _mm_prefetch::<_MM_HINT_T0>(w.addr(o, k + c).wrapping_add(PF_BYTES).cast());
                            c += L::LINE_COLS;
                        }
                    }
                    // Unrolled by hand with constant indices: as a loop, LLVM kept the int4
                    // accumulators on the stack (a store-forwarding chain per FMA).
                    macro_rules! step {
                        ($($a:literal)*) => {$(
                            acc[$a] = _mm512_fmadd_ps(w.load16(o, k + 16 * $a), _mm512_loadu_ps(xr.add(k + 16 * $a)), acc[$a]);
                        )*};
                    }
                    step!(0 1 2 3 4 5 6 7);
                    k += 16 * A;
                }
                while k < k16 {
                    acc[0] = _mm512_fmadd_ps(w.load16(o, k), _mm512_loadu_ps(xr.add(k)), acc[0]);
                    k += 16;
                }
                let t = _mm512_add_ps(
                    _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])),
                    _mm512_add_ps(_mm512_add_ps(acc[4], acc[5]), _mm512_add_ps(acc[6], acc[7])),
                );
                let mut s = _mm512_reduce_add_ps(t);
                for kk in k16..inp {
                    s += w.get(o, kk) * *xr.add(kk);
                }
                *y.add(r * ldy + o) = s * w.row_scale(o);
            }
        }
    }
}

/// [`gemv`] eight weight rows at a time (see the module notes).
///
/// # Safety
/// As [`gemv`].
/// Not inlined: each kernel compiled on its own, as a target-feature function.
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn gemv_blocks<L: Loader16>(x: &[f32], rows: usize, w: &L, out: usize, y: *mut f32, ldy: usize) {
    let inp = w.cols();
    debug_assert!(x.len() >= rows * inp && ldy >= out);
    let k16 = inp / 16 * 16;
    let ahead = PF_LINES * L::LINE_COLS;
    // SAFETY: every (o, k) read is < (out, inp); every x index < rows·inp; y per the contract.
    unsafe {
        let mut o0 = 0;
        while o0 < out {
            let n = O.min(out - o0);
            for r in 0..rows {
                let xr = x.as_ptr().add(r * inp);
                let mut acc = [_mm512_setzero_ps(); O];
                let mut k = 0;
                if n == O {
                    // The next block of weight rows is one contiguous region: prefetch it into L2
                    // during this block, evenly over the steps (first pass over x only).
                    let (mut pf, pf_end, pf_step) = if r == 0 && o0 + O < out && inp > 0 {
                        let last = (o0 + 2 * O).min(out) - 1;
                        let (a, b) = (w.addr(o0 + O, 0), w.addr(last, inp - 1));
                        let lines = (b as usize - a as usize) / 64 + 1;
                        (a, b, lines.div_ceil((k16 / 16).max(1)))
                    } else {
                        (core::ptr::null(), core::ptr::null(), 0)
                    };
                    while k < k16 {
                        for _ in 0..pf_step {
                            if pf <= pf_end {
                                _mm_prefetch::<_MM_HINT_T1>(pf.cast());
                                pf = pf.wrapping_add(64);
                            }
                        }
                        if L::PREFETCH && k % L::LINE_COLS == 0 && k + ahead < inp {
                            for j in 0..O {
                                _mm_prefetch::<_MM_HINT_T0>(w.addr(o0 + j, k + ahead).cast());
                            }
                        }
                        let xv = _mm512_loadu_ps(xr.add(k));
                        // Unrolled by hand with constant indices: as a loop, LLVM kept the int4
                        // accumulators on the stack (a store-forwarding chain per FMA).
                        macro_rules! fma_row {
                            ($($j:literal)*) => {$(
                                acc[$j] = _mm512_fmadd_ps(w.load16(o0 + $j, k), xv, acc[$j]);
                            )*};
                        }
                        fma_row!(0 1 2 3 4 5 6 7);
                        k += 16;
                    }
                } else {
                    // The last, partial block of weight rows.
                    while k < k16 {
                        let xv = _mm512_loadu_ps(xr.add(k));
                        for (j, a) in acc.iter_mut().enumerate().take(n) {
                            *a = _mm512_fmadd_ps(w.load16(o0 + j, k), xv, *a);
                        }
                        k += 16;
                    }
                }
                for (j, a) in acc.iter().enumerate().take(n) {
                    let mut s = _mm512_reduce_add_ps(*a);
                    for kk in k16..inp {
                        s += w.get(o0 + j, kk) * *xr.add(kk);
                    }
                    *y.add(r * ldy + o0 + j) = s * w.row_scale(o0 + j);
                }
            }
            o0 += n;
        }
    }
}
