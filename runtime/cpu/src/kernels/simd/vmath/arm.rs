//! The aarch64 vector of the math layer: `F4` (NEON), a [`VecF`] the generic functions of the
//! parent module run on.

use super::*;
use core::arch::aarch64::*;
use core::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Sub};

/// 4 lanes of NEON.
#[derive(Clone, Copy)]
pub(in super::super) struct F4(float32x4_t);

macro_rules! bin {
    ($tr:ident, $f:ident, $e:expr) => {
        impl $tr for F4 {
            type Output = Self;
            #[inline(always)]
            fn $f(self, b: Self) -> Self {
                // SAFETY: NEON is baseline on aarch64.
                F4(unsafe { $e(self.0, b.0) })
            }
        }
    };
}
#[inline(always)]
unsafe fn bits(f: impl Fn(uint32x4_t, uint32x4_t) -> uint32x4_t, a: float32x4_t, b: float32x4_t) -> float32x4_t {
    // SAFETY: NEON is baseline on aarch64.
    unsafe { vreinterpretq_f32_u32(f(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b))) }
}
bin!(Add, add, vaddq_f32);
bin!(Sub, sub, vsubq_f32);
bin!(Mul, mul, vmulq_f32);
bin!(Div, div, vdivq_f32);
bin!(BitAnd, bitand, |a, b| bits(|a, b| vandq_u32(a, b), a, b));
bin!(BitOr, bitor, |a, b| bits(|a, b| vorrq_u32(a, b), a, b));
bin!(BitXor, bitxor, |a, b| bits(|a, b| veorq_u32(a, b), a, b));
impl Neg for F4 {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        // SAFETY: NEON is baseline on aarch64.
        F4(unsafe { vnegq_f32(self.0) })
    }
}

/// 2^k for integral k in [−126, 127].
#[inline(always)]
unsafe fn pow2_4(k: float32x4_t) -> float32x4_t {
    // SAFETY: NEON is baseline on aarch64.
    unsafe { vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(vcvtnq_s32_f32(k), vdupq_n_s32(127)))) }
}

// SAFETY: NEON is baseline on aarch64.
unsafe impl VecF for F4 {
    type M = uint32x4_t;
    const L: usize = 4;
    #[inline(always)]
    fn splat(v: f32) -> Self {
        // SAFETY: (every method) NEON is baseline on aarch64.
        F4(unsafe { vdupq_n_f32(v) })
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: p readable for 4 f32 (the caller).
        F4(unsafe { vld1q_f32(p) })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: p writable for 4 f32 (the caller).
        unsafe { vst1q_f32(p, self.0) }
    }
    #[inline(always)]
    fn fma(self, b: Self, c: Self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vfmaq_f32(c.0, self.0, b.0) })
    }
    #[inline(always)]
    fn min(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vminq_f32(self.0, b.0) })
    }
    #[inline(always)]
    fn max(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vmaxq_f32(self.0, b.0) })
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vsqrtq_f32(self.0) })
    }
    #[inline(always)]
    fn round(self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vrndnq_f32(self.0) })
    }
    #[inline(always)]
    fn floor(self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vrndmq_f32(self.0) })
    }
    #[inline(always)]
    fn ceil(self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vrndpq_f32(self.0) })
    }
    #[inline(always)]
    fn trunc(self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vrndq_f32(self.0) })
    }
    #[inline(always)]
    fn andnot(self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { bits(|a, b| vbicq_u32(b, a), self.0, b.0) })
    }
    #[inline(always)]
    fn lt(self, b: Self) -> uint32x4_t {
        // SAFETY: see `splat`.
        unsafe { vcltq_f32(self.0, b.0) }
    }
    #[inline(always)]
    fn le(self, b: Self) -> uint32x4_t {
        // SAFETY: see `splat`.
        unsafe { vcleq_f32(self.0, b.0) }
    }
    #[inline(always)]
    fn eq(self, b: Self) -> uint32x4_t {
        // SAFETY: see `splat`.
        unsafe { vceqq_f32(self.0, b.0) }
    }
    #[inline(always)]
    fn nan(self) -> uint32x4_t {
        // SAFETY: see `splat`.
        unsafe { vmvnq_u32(vceqq_f32(self.0, self.0)) }
    }
    #[inline(always)]
    fn select(m: uint32x4_t, a: Self, b: Self) -> Self {
        // SAFETY: see `splat`.
        F4(unsafe { vbslq_f32(m, a.0, b.0) })
    }
    #[inline(always)]
    fn mand(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see `splat`.
        unsafe { vandq_u32(a, b) }
    }
    #[inline(always)]
    fn mor(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see `splat`.
        unsafe { vorrq_u32(a, b) }
    }
    #[inline(always)]
    fn mnot(a: uint32x4_t) -> uint32x4_t {
        // SAFETY: see `splat`.
        unsafe { vmvnq_u32(a) }
    }
    #[inline(always)]
    fn any(m: uint32x4_t) -> bool {
        // SAFETY: see `splat`.
        unsafe { vmaxvq_u32(m) != 0 }
    }
    #[inline(always)]
    fn ldexp(self, n: Self) -> Self {
        // Two steps of 2^(n/2) (each a normal power of two): one rounding, at the second.
        // SAFETY: see `splat`.
        unsafe {
            let h = vrndmq_f32(vmulq_f32(n.0, vdupq_n_f32(0.5)));
            let r = vsubq_f32(n.0, h);
            F4(vmulq_f32(vmulq_f32(self.0, pow2_4(h)), pow2_4(r)))
        }
    }
    #[inline(always)]
    fn frexp(self) -> (Self, Self) {
        // SAFETY: see `splat`.
        unsafe {
            let sub = vcltq_f32(self.0, vdupq_n_f32(f32::MIN_POSITIVE));
            let x = vbslq_f32(sub, vmulq_f32(self.0, vdupq_n_f32(8_388_608.0)), self.0);
            let b = vreinterpretq_u32_f32(x);
            let e = vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32::<23>(b)), vdupq_n_s32(127)));
            let e = vsubq_f32(e, vbslq_f32(sub, vdupq_n_f32(23.0), vdupq_n_f32(0.0)));
            let m = vorrq_u32(vandq_u32(b, vdupq_n_u32(0x007f_ffff)), vdupq_n_u32(0x3f80_0000));
            (F4(vreinterpretq_f32_u32(m)), F4(e))
        }
    }
}

/// `y = op(x)` with 4-lane NEON vectors; false (nothing written) where `op` has no vector form.
///
/// # Safety
/// NEON (baseline on aarch64); `y.len() == x.len()`.
#[target_feature(enable = "neon")]
pub unsafe fn unary_neon(op: UnaryOp, x: &[f32], y: &mut [f32]) -> bool {
    run!(F4, op, x, y)
}

/// `y[i] = pow(a[i], b[i])` with 4-lane NEON vectors.
///
/// # Safety
/// NEON (baseline on aarch64); slice operands as long as `y`.
#[target_feature(enable = "neon")]
#[allow(clippy::redundant_closure)] // the closure inlines, the fn item did not (see `run!`)
pub unsafe fn pow_neon(a: Operand2<'_>, b: Operand2<'_>, y: &mut [f32]) {
    map2::<F4>(
        a,
        b,
        y,
        #[inline(always)]
        |u, v| pow(u, v),
    )
}
