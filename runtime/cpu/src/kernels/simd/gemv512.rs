//! AVX-512 GEMV (`y [rows, N] = x [rows, K] · Wᵀ` for fewer than [`MAX_ROWS`] rows of `x`): the
//! batch-1 path, where each weight is used once per row of `x` and the time is the weights'
//! trip from memory plus their dequantisation.
//!
//! Eight weight rows at a time, 16 columns per step: eight independent FMA chains (enough to
//! cover the FMA latency on two pipes) and eight sequential streams. The eight rows are one
//! contiguous region of the matrix, and so is the next block: it is prefetched into L2 evenly
//! over the current block's steps, so DRAM always has the next 8 rows in flight (f32 and f16 also
//! keep the AVX2 kernel's per-row prefetch into L1, which measured faster for them; int8/int4 do
//! not). Against the AVX2 kernel this halves the instructions per weight (one 16-lane widening
//! load, convert and FMA per 16 int8 or f16 weights). Measured with `kestrel bench gemm` on the
//! MNIST head (2048 × 4096, batch 1, weights evicted from the caches before each call, one Zen 5
//! core): int8 679 → 275 µs, f16 835 → 545 µs, f32 1,305 → 1,096 µs — all three now at ~30 GB/s
//! of weights, ~75 % of the measured single-thread read bandwidth.
//!
//! Sums run over `k` in order per lane, then the 16 lanes are reduced, then the column tail
//! (`K % 16`) is added in scalar: results equal the scalar kernels' up to f32 summation order
//! (`runtime/cpu/tests/simd.rs`).

use super::x86::{Loader, F16W, F32W, I4W, I8W};
use core::arch::x86_64::*;
use kestrel_format::INT4_GROUP;

/// Rows of `x` below which [`gemv`] is used (from there the AVX2 4-row blocks reuse each
/// weight load across rows).
pub const MAX_ROWS: usize = 4;

/// Weight rows per block.
const O: usize = 8;

/// Cache lines ahead that each weight row is prefetched (f32/f16; 2 KiB as in `x86.rs`).
const PF_LINES: usize = 32;

/// A [`Loader`] that also reads 16 columns at a time.
pub(super) trait Loader16: Loader {
    /// Whether the GEMV prefetches this encoding's rows in software (measured: it helps f32 and
    /// f16, where the bytes per FMA are many; not int8/int4).
    const PREFETCH: bool;
    /// Columns `k..k+16` of row `o`, dequantised except for the per-row scale
    /// (`k % 16 == 0`, `k + 16 <= cols`).
    unsafe fn load16(&self, o: usize, k: usize) -> __m512;
}

impl Loader16 for F32W<'_> {
    const PREFETCH: bool = true;
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
