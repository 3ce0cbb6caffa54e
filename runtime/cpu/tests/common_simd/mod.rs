//! Shared by the SIMD kernel tests (`simd.rs`, `simd_conv.rs`).

#![allow(dead_code)]

use kestrel_rt_cpu::kernels::simd::{self, Isa};
use proptest::prelude::*;

/// The SIMD ISAs this CPU supports (the dispatched entry points run the scalar loops elsewhere).
pub fn isas() -> Vec<Isa> {
    let all = [Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512, Isa::Neon];
    let found: Vec<Isa> = all.into_iter().filter(|i| i.supported()).collect();
    if found.is_empty() {
        eprintln!("no SIMD ISA on this CPU: only the scalar kernels run here");
    }
    found
}

/// `softmax(scale · xs)` through every ISA's kernel (AVX-512: scaled inside its passes; AVX2:
/// a scaling pass, then its softmax; elsewhere the dispatched path) against the f64 softmax of
/// the scaled values, per element: 1e-6 relative plus the rounding of `x − max` in f32, plus
/// 1e-30.
pub fn check_softmax(xs: &[f32], scale: f32, what: &str) -> Result<(), TestCaseError> {
    let sx: Vec<f32> = xs.iter().map(|&v| v * scale).collect();
    let m = sx.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let e: Vec<f64> = sx.iter().map(|&v| (f64::from(v) - m).exp()).collect();
    let sum: f64 = e.iter().sum();
    for isa in isas() {
        let mut got = xs.to_vec();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: supported ISAs only.
        unsafe {
            if isa == Isa::Avx512 {
                simd::x86::softmax_scaled_avx512(&mut got, scale)
            } else {
                got.iter_mut().for_each(|v| *v *= scale);
                simd::x86::softmax(&mut got)
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        simd::softmax_scaled(&mut got, scale);
        for ((&g, &e), &x) in got.iter().zip(&e).zip(&sx) {
            let w = e / sum;
            // A −∞ score has weight 0 (its spread, infinite, would make the bound NaN).
            let spread = if x.is_finite() { m - f64::from(x) } else { 0.0 };
            let bound = (1e-6 + f64::from(f32::EPSILON) * spread) * w + 1e-30;
            prop_assert!((f64::from(g) - w).abs() <= bound, "{} {what} {g} vs {w}", isa.name());
        }
    }
    Ok(())
}
