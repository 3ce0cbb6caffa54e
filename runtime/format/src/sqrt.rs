//! `√x` in f32 for every crate of the workspace (`no_std`): the one square root scalar code
//! calls.
//!
//! Not `libm::sqrtf`: on x86_64 it is inline assembly of the legacy-SSE `sqrtss`, and executed
//! after 256/512-bit code (the AVX2/AVX-512 kernels leave the upper register halves dirty) each
//! one paid a state transition — **125 ns per call** on an Intel Xeon VM (Sapphire Rapids
//! class) against 1 ns for the VEX `vsqrtss`; ReduceL2 ran at 0–6 % of the copy bandwidth on
//! its sizes. Here the SSE intrinsic, which the compiler encodes as VEX wherever it is inlined
//! into AVX code; `libm` elsewhere. Both are the correctly rounded IEEE square root (tested bit
//! for bit against `libm`). `clippy.toml` disallows `libm::sqrtf` outside this module.

/// `√x`, correctly rounded (NaN for `x < 0` or NaN, `−0` for `−0`, `+∞` for `+∞`).
#[inline(always)]
#[cfg(target_arch = "x86_64")]
pub fn sqrtf(x: f32) -> f32 {
    use core::arch::x86_64::{_mm_cvtss_f32, _mm_set_ss, _mm_sqrt_ss};
    // SSE is part of the x86_64 baseline; the intrinsics touch no memory.
    #[allow(unused_unsafe)]
    // SAFETY: SSE is always available on x86_64.
    unsafe {
        _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x)))
    }
}

/// `√x`, correctly rounded (libm's, off x86_64).
#[inline(always)]
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::disallowed_methods)]
pub fn sqrtf(x: f32) -> f32 {
    libm::sqrtf(x)
}

#[cfg(test)]
mod tests {
    use super::sqrtf;

    /// Bit for bit libm's (the IEEE square root) over every exponent, subnormals, zeros of both
    /// signs, infinities, negatives and NaN.
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn matches_libm_bit_for_bit() {
        let mut checked = 0;
        for bits in (0u32..=u32::MAX).step_by(65_521) {
            let x = f32::from_bits(bits);
            let (got, want) = (sqrtf(x), libm::sqrtf(x));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "sqrtf({x:e}): {got:e} vs {want:e}"
            );
            checked += 1;
        }
        for x in [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-45,
            2.0,
            4.0,
            f32::MAX,
            -1.0,
            f32::NAN,
        ] {
            let (got, want) = (sqrtf(x), libm::sqrtf(x));
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "sqrtf({x:e})");
        }
        assert_eq!(sqrtf(-0.0).to_bits(), (-0.0f32).to_bits());
        assert!(checked > 60_000);
    }
}
