//! The x86_64 vectors of the math layer: `F8` (AVX2 + FMA) and `F16` (AVX-512F), each a
//! [`VecF`] the generic functions of the parent module run on.

use super::*;
use core::arch::x86_64::*;
use core::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Sub};

/// Implements the arithmetic operators of a wrapper over `$t` by `$add` ... intrinsics.
macro_rules! ops {
    ($w:ident, $add:ident, $sub:ident, $mul:ident, $div:ident, $and:expr, $or:expr, $xor:expr) => {
        impl Add for $w {
            type Output = Self;
            #[inline(always)]
            fn add(self, b: Self) -> Self {
                // SAFETY: a value of this type proves its ISA (`VecF`'s contract).
                $w(unsafe { $add(self.0, b.0) })
            }
        }
        impl Sub for $w {
            type Output = Self;
            #[inline(always)]
            fn sub(self, b: Self) -> Self {
                // SAFETY: as above.
                $w(unsafe { $sub(self.0, b.0) })
            }
        }
        impl Mul for $w {
            type Output = Self;
            #[inline(always)]
            fn mul(self, b: Self) -> Self {
                // SAFETY: as above.
                $w(unsafe { $mul(self.0, b.0) })
            }
        }
        impl Div for $w {
            type Output = Self;
            #[inline(always)]
            fn div(self, b: Self) -> Self {
                // SAFETY: as above.
                $w(unsafe { $div(self.0, b.0) })
            }
        }
        impl Neg for $w {
            type Output = Self;
            #[inline(always)]
            fn neg(self) -> Self {
                self ^ <$w as VecF>::splat(-0.0)
            }
        }
        impl BitAnd for $w {
            type Output = Self;
            #[inline(always)]
            fn bitand(self, b: Self) -> Self {
                // SAFETY: as above.
                $w(unsafe { $and(self.0, b.0) })
            }
        }
        impl BitOr for $w {
            type Output = Self;
            #[inline(always)]
            fn bitor(self, b: Self) -> Self {
                // SAFETY: as above.
                $w(unsafe { $or(self.0, b.0) })
            }
        }
        impl BitXor for $w {
            type Output = Self;
            #[inline(always)]
            fn bitxor(self, b: Self) -> Self {
                // SAFETY: as above.
                $w(unsafe { $xor(self.0, b.0) })
            }
        }
    };
}

/// 8 lanes of AVX2 + FMA.
#[derive(Clone, Copy)]
pub(in super::super) struct F8(__m256);
ops!(F8, _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_div_ps, _mm256_and_ps, _mm256_or_ps, _mm256_xor_ps);

/// 2^k for integral k in [−126, 127] (as f32 lanes), from the exponent bits.
#[inline(always)]
unsafe fn pow2_8(k: __m256) -> __m256 {
    // SAFETY: AVX2 in every caller.
    unsafe {
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127))))
    }
}

// SAFETY: `F8` values are built only by `load`/`splat` inside the AVX2 entry points.
unsafe impl VecF for F8 {
    type M = __m256;
    const L: usize = 8;
    #[inline(always)]
    fn splat(v: f32) -> Self {
        // SAFETY: (every method) AVX2/FMA available (the trait's contract).
        F8(unsafe { _mm256_set1_ps(v) })
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: p readable for 8 f32 (the caller).
        F8(unsafe { _mm256_loadu_ps(p) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: p writable for 8 f32 (the caller).
        unsafe { _mm256_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    fn fma(self, b: Self, c: Self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_fmadd_ps(self.0, b.0, c.0) })
    }
    #[inline(always)]
    fn min(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_min_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn max(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_max_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_sqrt_ps(self.0) })
    }
    #[inline(always)]
    fn round(self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn floor(self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn ceil(self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn trunc(self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn andnot(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_andnot_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn lt(self, b: Self) -> __m256 {
        // SAFETY: see `splat`.
        unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, b.0) }
    }
    #[inline(always)]
    fn le(self, b: Self) -> __m256 {
        // SAFETY: see `splat`.
        unsafe { _mm256_cmp_ps::<_CMP_LE_OQ>(self.0, b.0) }
    }
    #[inline(always)]
    fn eq(self, b: Self) -> __m256 {
        // SAFETY: see `splat`.
        unsafe { _mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, b.0) }
    }
    #[inline(always)]
    fn nan(self) -> __m256 {
        // SAFETY: see `splat`.
        unsafe { _mm256_cmp_ps::<_CMP_UNORD_Q>(self.0, self.0) }
    }
    #[inline(always)]
    fn select(m: __m256, a: Self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F8(unsafe { _mm256_blendv_ps(b.0, a.0, m) })
    }
    #[inline(always)]
    fn mand(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see `splat`.
        unsafe { _mm256_and_ps(a, b) }
    }
    #[inline(always)]
    fn mor(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see `splat`.
        unsafe { _mm256_or_ps(a, b) }
    }
    #[inline(always)]
    fn mnot(a: __m256) -> __m256 {
        // SAFETY: see `splat`.
        unsafe { _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1))) }
    }
    #[inline(always)]
    fn any(m: __m256) -> bool {
        // SAFETY: see `splat`.
        unsafe { _mm256_movemask_ps(m) != 0 }
    }
    #[inline(always)]
    fn ldexp(self, n: Self) -> Self {
        // Two steps of 2^(n/2) (each a normal power of two): one rounding, at the second.
        // SAFETY: see `splat`.
        unsafe {
            let h = _mm256_round_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
                n.0,
                _mm256_set1_ps(0.5),
            ));
            let r = _mm256_sub_ps(n.0, h);
            F8(_mm256_mul_ps(_mm256_mul_ps(self.0, pow2_8(h)), pow2_8(r)))
        }
    }
    #[inline(always)]
    fn frexp(self) -> (Self, Self) {
        // SAFETY: see `splat`.
        unsafe {
            let sub = _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, _mm256_set1_ps(f32::MIN_POSITIVE));
            let x = _mm256_blendv_ps(self.0, _mm256_mul_ps(self.0, _mm256_set1_ps(8_388_608.0)), sub);
            let bits = _mm256_castps_si256(x);
            let e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32::<23>(bits), _mm256_set1_epi32(127)));
            let e = _mm256_sub_ps(e, _mm256_and_ps(sub, _mm256_set1_ps(23.0)));
            let m =
                _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007f_ffff)), _mm256_set1_epi32(0x3f80_0000));
            (F8(_mm256_castsi256_ps(m)), F8(e))
        }
    }
}

/// 16 lanes of AVX-512F.
#[derive(Clone, Copy)]
pub(in super::super) struct F16(__m512);

#[inline(always)]
unsafe fn and512(a: __m512, b: __m512) -> __m512 {
    // SAFETY: AVX-512F in every caller.
    unsafe { _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))) }
}
#[inline(always)]
unsafe fn or512(a: __m512, b: __m512) -> __m512 {
    // SAFETY: AVX-512F in every caller.
    unsafe { _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))) }
}
#[inline(always)]
unsafe fn xor512(a: __m512, b: __m512) -> __m512 {
    // SAFETY: AVX-512F in every caller.
    unsafe { _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))) }
}
ops!(F16, _mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps, _mm512_div_ps, and512, or512, xor512);

// SAFETY: `F16` values are built only by `load`/`splat` inside the AVX-512 entry points.
unsafe impl VecF for F16 {
    type M = __mmask16;
    const L: usize = 16;
    #[inline(always)]
    fn splat(v: f32) -> Self {
        // SAFETY: (every method) AVX-512F available (the trait's contract).
        F16(unsafe { _mm512_set1_ps(v) })
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: p readable for 16 f32 (the caller).
        F16(unsafe { _mm512_loadu_ps(p) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: p writable for 16 f32 (the caller).
        unsafe { _mm512_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    fn fma(self, b: Self, c: Self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_fmadd_ps(self.0, b.0, c.0) })
    }
    #[inline(always)]
    fn min(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_min_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn max(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_max_ps(self.0, b.0) })
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_sqrt_ps(self.0) })
    }
    #[inline(always)]
    fn round(self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn floor(self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn ceil(self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn trunc(self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(self.0) })
    }
    #[inline(always)]
    fn andnot(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_castps_si512(self.0), _mm512_castps_si512(b.0))) })
    }
    #[inline(always)]
    fn lt(self, b: Self) -> __mmask16 {
        // SAFETY: see `splat`.
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, b.0) }
    }
    #[inline(always)]
    fn le(self, b: Self) -> __mmask16 {
        // SAFETY: see `splat`.
        unsafe { _mm512_cmp_ps_mask::<_CMP_LE_OQ>(self.0, b.0) }
    }
    #[inline(always)]
    fn eq(self, b: Self) -> __mmask16 {
        // SAFETY: see `splat`.
        unsafe { _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, b.0) }
    }
    #[inline(always)]
    fn nan(self) -> __mmask16 {
        // SAFETY: see `splat`.
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(self.0, self.0) }
    }
    #[inline(always)]
    fn select(m: __mmask16, a: Self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F16(unsafe { _mm512_mask_blend_ps(m, b.0, a.0) })
    }
    #[inline(always)]
    fn mand(a: __mmask16, b: __mmask16) -> __mmask16 {
        a & b
    }
    #[inline(always)]
    fn mor(a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }
    #[inline(always)]
    fn mnot(a: __mmask16) -> __mmask16 {
        !a
    }
    #[inline(always)]
    fn any(m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn ldexp(self, n: Self) -> Self {
        // SAFETY: see `splat`. `vscalefps`: one rounding, gradual underflow.
        F16(unsafe { _mm512_scalef_ps(self.0, n.0) })
    }
    #[inline(always)]
    fn frexp(self) -> (Self, Self) {
        // SAFETY: see `splat`. `vgetmantps`/`vgetexpps` normalise subnormals.
        unsafe {
            (F16(_mm512_getmant_ps::<_MM_MANT_NORM_1_2, _MM_MANT_SIGN_ZERO>(self.0)), F16(_mm512_getexp_ps(self.0)))
        }
    }
}

/// `y = op(x)` with 8-lane AVX2 vectors; false (nothing written) where `op` has no vector form.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `y.len() == x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn unary_avx2(op: UnaryOp, x: &[f32], y: &mut [f32]) -> bool {
    run!(F8, op, x, y)
}

/// [`unary_avx2`] with 16-lane AVX-512 vectors.
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA); `y.len() == x.len()`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn unary_avx512(op: UnaryOp, x: &[f32], y: &mut [f32]) -> bool {
    run!(F16, op, x, y)
}

/// `y[i] = pow(a[i], b[i])` with 8-lane AVX2 vectors.
///
/// # Safety
/// The CPU must support AVX2 and FMA; slice operands as long as `y`.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::redundant_closure)] // the closure inlines, the fn item did not (see `run!`)
pub unsafe fn pow_avx2(a: Operand2<'_>, b: Operand2<'_>, y: &mut [f32]) {
    map2::<F8>(
        a,
        b,
        y,
        #[inline(always)]
        |u, v| pow(u, v),
    )
}

/// [`pow_avx2`] with 16-lane AVX-512 vectors.
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA); slice operands as long as `y`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::redundant_closure)] // the closure inlines, the fn item did not (see `run!`)
pub unsafe fn pow_avx512(a: Operand2<'_>, b: Operand2<'_>, y: &mut [f32]) {
    map2::<F16>(
        a,
        b,
        y,
        #[inline(always)]
        |u, v| pow(u, v),
    )
}
