//! Plain AVX2 (no VNNI) int8 × int8 dense products: the kernels of `q8_avx.rs` without
//! `vpdpbusd`, for every AVX2 CPU before the VNNI ones (Intel before Ice Lake / Alder Lake, AMD
//! before Zen 4), which otherwise take one dot product per output and 256-input chunk.
//!
//! Arithmetic: the activations are stored signed (`quantize_act`'s bytes as they are, no offset,
//! so the driver subtracts nothing) and each 4-way dot is `vpmaddubsw(|w|, sign(x, w))` then
//! `vpmaddwd` against ones: `|w| · (x · sgn w) = x · w`, `|w|` read as unsigned (128 for a −128
//! weight, still exact), `x` never −128 (quantised to ±127) so its sign flip never wraps, and a
//! pair of products is at most 2 · 128 · 127 = 32,512 < 2¹⁵: `vpmaddubsw` never saturates. Every
//! i32 sum is therefore exact and bit-equal to the portable loop (`runtime/cpu/tests/simd.rs`).
//!
//! The kernel of the shared driver (`q8_driver.rs`):
//! * the packed GEMM: a 4 × 16 tile (8 accumulators; each step's two `|w|` vectors computed once
//!   and shared by the tile's rows, only the sign per row), weights packed `[k/4][16][4]` per
//!   panel as `q8_avx.rs` packs them (its 8 × 8 transposes of 4-byte groups).
//! * the GEMV (1–3 rows): weight rows read in place, 32 bytes per load.

use super::i8_avx2::madd_abs;
use super::q8_avx::{hsum, quantize8, store_row, transpose8};
use super::q8_driver::{Q8Kernel, Q8Tile, SliceFinish, Tile};
use core::arch::x86_64::*;

/// Inputs per packed block (a multiple of 32).
const KC: usize = 256;
/// Rows of `x` quantised per block: `RB · KC` = 12 KiB on the stack.
const RB: usize = 48;
/// Output features per packed panel (two vectors of 8).
const NR: usize = 16;
/// Rows per micro-kernel tile: 8 accumulators, the step's two `|w|`, the ones and the
/// temporaries fit the 16 registers (6 rows, as `q8_avx.rs`, would spill).
const MR: usize = 4;

/// The plain AVX2 kernel of the shared int8 driver.
pub(super) struct Avx2;

// SAFETY: every method is called from the `avx2,fma,f16c` entry points only (`x86_q8.rs`), with
// the pointer contracts the trait states.
unsafe impl Q8Kernel for Avx2 {
    const TILE: Q8Tile = Q8Tile { kc: KC, rb: RB, nr: NR, mr: MR, kg: 4, gv: 32, pad: 0 };
    type Bytes = __m256i;
    type Sums = __m256i;
    type Offset = ();
    type Finish = SliceFinish;

    #[inline(always)]
    unsafe fn quantize(x: *const f32, n: usize, inv: f32, out: *mut u8) {
        // SAFETY: indices < n.
        unsafe {
            let gather = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
            let mut i = 0;
            while i + 8 <= n {
                let u = quantize8(x.add(i), inv);
                // ±127 in each i32 → bytes: lane-wise signed packs (never saturating), then the
                // two lanes' first dwords.
                let p = _mm256_packs_epi16(_mm256_packs_epi32(u, u), _mm256_setzero_si256());
                let p = _mm256_permutevar8x32_epi32(p, gather);
                _mm_storel_epi64(out.add(i).cast(), _mm256_castsi256_si128(p));
                i += 8;
            }
            if i < n {
                let xs = core::slice::from_raw_parts(x.add(i), n - i);
                let os = core::slice::from_raw_parts_mut(out.add(i).cast::<i8>(), n - i);
                kestrel_rt_format::weight::quantize_act(xs, inv, os);
            }
        }
    }

    #[inline(always)]
    unsafe fn pack(w: *const i8, cols: usize, o0: usize, n: usize, k0: usize, kn: usize, wp: *mut u8) {
        let wp = wp.cast::<i32>();
        // SAFETY: rows < o0 + n, bytes < k0 + kn; wp holds KC / 4 · 16 words.
        unsafe {
            for h in 0..2 {
                for blk in 0..kn.div_ceil(32) {
                    let mut r = [_mm256_setzero_si256(); 8];
                    for (i, ri) in r.iter_mut().enumerate().take(n.saturating_sub(8 * h)) {
                        *ri = Self::load_row(w.add((o0 + 8 * h + i) * cols + k0), 32 * blk, kn);
                    }
                    for (c, v) in transpose8(&r).into_iter().enumerate() {
                        _mm256_store_si256(wp.add((8 * blk + c) * NR + 8 * h).cast(), v);
                    }
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn tile<const M: usize>(t: &Tile, _ws: &(), fin: Option<&Self::Finish>) {
        let Tile { xb, wp, kp, acc, ldy, ncols, load } = *t;
        let (wp, k4n) = (wp.cast::<i32>(), kp / 4);
        // SAFETY: per the callers' bounds.
        unsafe {
            let mut a = [[_mm256_setzero_si256(); 2]; M];
            for k in 0..k4n {
                let b0 = _mm256_load_si256(wp.add(k * NR).cast());
                let b1 = _mm256_load_si256(wp.add(k * NR + 8).cast());
                let (u0, u1) = (_mm256_abs_epi8(b0), _mm256_abs_epi8(b1));
                for (i, ai) in a.iter_mut().enumerate() {
                    let x = _mm256_set1_epi32(core::ptr::read_unaligned(xb.add(i * KC + 4 * k).cast::<i32>()));
                    ai[0] = madd_abs(ai[0], x, b0, u0);
                    ai[1] = madd_abs(ai[1], x, b1, u1);
                }
            }
            for (i, ai) in a.iter().enumerate() {
                store_row(acc.add(i * ldy), *ai, ncols, load, fin);
            }
        }
    }

    #[inline(always)]
    fn zero() -> __m256i {
        // SAFETY: AVX in every caller.
        unsafe { _mm256_setzero_si256() }
    }

    #[inline(always)]
    unsafe fn load_full(p: *const i8) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }

    #[inline(always)]
    fn dot(acc: __m256i, x: __m256i, w: __m256i) -> __m256i {
        // SAFETY: AVX2 in every caller (the GEMV's rows share `|w|`: the same pure operation on
        // the same vector, computed once after inlining).
        unsafe { madd_abs(acc, x, w, _mm256_abs_epi8(w)) }
    }

    #[inline(always)]
    fn sum_bytes(acc: __m256i, w: __m256i) -> __m256i {
        // Unused (no offset to take back), implemented for the trait: `Σ₄ w` per lane.
        // SAFETY: AVX2 in every caller.
        unsafe { madd_abs(acc, _mm256_set1_epi8(1), w, _mm256_abs_epi8(w)) }
    }

    #[inline(always)]
    fn hsum(v: __m256i) -> i32 {
        // SAFETY: AVX2 in every caller.
        unsafe { hsum(v) }
    }

    super::q8_driver::q8_gemv!(4, 3, 2);
}
