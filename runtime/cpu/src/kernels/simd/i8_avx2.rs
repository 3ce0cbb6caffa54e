//! AVX2's exact int8 dot products without VNNI, shared by the kernels that multiply int8 by
//! int8 on plain AVX2 (`x86.rs`'s `dot_i8`, the q8 driver's `q8_avx2.rs`, the int4 × q8
//! `q8_i4_avx2.rs`): `vpmaddubsw` takes unsigned × signed bytes, so the product `w · x` is
//! taken as `|w| · sign(x, w)`; the adjacent pairs it sums are at most `2 · 127 · 127`, exact in
//! i16 (neither operand is −128: weights and quantised activations are clamped to ±127), and
//! `vpmaddwd` against ones sums pairs of those into i32 lanes.

use core::arch::x86_64::*;

/// `(|w|, sign(x, w))`: the unsigned and signed operands of `vpmaddubsw` (or of `vpdpbusd`)
/// whose products are `w · x`.
///
/// # Safety
/// AVX2 available in the caller.
#[inline(always)]
pub(super) unsafe fn sign_split(w: __m256i, x: __m256i) -> (__m256i, __m256i) {
    // SAFETY: the caller's contract.
    unsafe { (_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)) }
}

/// `acc + Σ₄ w · x` per i32 lane, given `aw = |w|` (a GEMV's rows of `x` share one `|w|`).
///
/// # Safety
/// AVX2 available in the caller.
#[inline(always)]
pub(super) unsafe fn madd_abs(acc: __m256i, x: __m256i, w: __m256i, aw: __m256i) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        let pairs = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

/// `acc + Σ₄ w · x` per i32 lane.
///
/// # Safety
/// AVX2 available in the caller.
#[inline(always)]
pub(super) unsafe fn madd(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe { madd_abs(acc, x, w, _mm256_abs_epi8(w)) }
}
