//! The vectorised math layer (`kernels::simd::vmath`) against the f64 definitions of the
//! element-wise table (`UnaryOp::reference`, `BinaryOp::reference`: std/libm f64 functions),
//! for every ISA this CPU supports, the entry points called directly: random inputs over each
//! function's whole domain (uniform f32 bit patterns, so every binade from subnormals to
//! `f32::MAX`, plus uniform values where the function is not saturated) and the edges (±0,
//! subnormals, ±∞, NaN, the overflow and underflow thresholds, multiples of π/2, the reduction's
//! limit), each within its named bound in ulps (`vmath::ULP_BOUNDS`, `vmath::pow_ulp_bound`).
//! NaN exactly where the definition is NaN, the definition's infinities, and zeros with the
//! definition's sign.

use crate::common_simd::isas;
use kestrel_rt_cpu::kernels::simd::vmath::{self, Operand2, ULP_BOUNDS};
use kestrel_rt_cpu::kernels::simd::Isa;
use kestrel_rt_format::ops::{BinaryOp, UnaryOp};

/// `y = op(x)` through `isa`'s entry point (false where `op` has no vector form).
fn unary_on(isa: Isa, op: UnaryOp, x: &[f32]) -> Option<Vec<f32>> {
    let mut y = vec![0.0f32; x.len()];
    assert!(isa.supported());
    // SAFETY: the ISA is supported (checked); lengths equal.
    let done = unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx2Vnni => vmath::unary_avx2(op, x, &mut y),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => vmath::unary_avx512(op, x, &mut y),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => vmath::unary_neon(op, x, &mut y),
            _ => false,
        }
    };
    done.then_some(y)
}

/// `y = pow(a, b)` through `isa`'s entry point.
fn pow_on(isa: Isa, a: Operand2<'_>, b: Operand2<'_>, n: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; n];
    assert!(isa.supported());
    // SAFETY: the ISA is supported (checked); slice operands hold n values (the callers).
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx2Vnni => vmath::pow_avx2(a, b, &mut y),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => vmath::pow_avx512(a, b, &mut y),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => vmath::pow_neon(a, b, &mut y),
            _ => unreachable!("no vector pow on {}", isa.name()),
        }
    }
    y
}

/// The spacing of f32 values at magnitude `w` (the subnormal spacing below the normal range).
fn ulp(w: f64) -> f64 {
    let w = w.abs();
    let e = if w < f64::from(f32::MIN_POSITIVE) { -126 } else { w.log2().floor() as i32 };
    2f64.powi(e - 23)
}

/// How far `got` is from the definition `want`, in ulps of the f32 result: 0 for equal values
/// (NaN and NaN, equal infinities), ∞ for a NaN, an infinity or a zero's sign the definition
/// does not give.
fn ulps(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let want32 = want as f32;
    if got.is_nan() {
        return f64::INFINITY;
    }
    if want32.is_infinite() || got.is_infinite() {
        // The definition overflows f32 (or got did): the same infinity, or a finite value
        // within the bound of a rounded definition just past f32::MAX.
        return if got == want32 { 0.0 } else { (f64::from(got) - want).abs() / ulp(f64::from(f32::MAX)) };
    }
    if want == 0.0 {
        return if got == 0.0 && got.is_sign_negative() == want.is_sign_negative() {
            0.0
        } else if got == 0.0 {
            f64::INFINITY
        } else {
            f64::from(got).abs() / ulp(0.0)
        };
    }
    (f64::from(got) - want).abs() / ulp(want)
}

/// A deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform over every f32 bit pattern (NaNs included): every binade equally often.
    fn bits(&mut self) -> f32 {
        f32::from_bits((self.next() >> 32) as u32)
    }
    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
}

/// The edges every function is tried on.
fn edges() -> Vec<f32> {
    let mut v = vec![
        0.0,
        f32::from_bits(1),
        f32::from_bits(0x0000_ffff),
        f32::MIN_POSITIVE,
        1e-30,
        1e-10,
        2.4e-4,
        0.5,
        0.625,
        1.0,
        1.5,
        2.5,
        core::f32::consts::FRAC_PI_2,
        core::f32::consts::PI,
        10.0,
        30.0,
        87.33,
        87.34,
        88.72,
        88.723,
        88.73,
        89.41,
        89.42,
        103.9,
        104.0,
        200.0,
        4096.0,
        4097.0,
        6000.0,
        6000.5,
        1e5,
        1e10,
        1e30,
        f32::MAX,
        f32::INFINITY,
    ];
    // Near multiples of π/2 (the reduction's hard cases) and around the arguments where the
    // formulas switch (the next f32 either side).
    for k in [1.0f64, 2.0, 3.0, 4.0, 10.0, 100.0, 1000.0, 3000.0, 3819.0] {
        v.push((k * core::f64::consts::FRAC_PI_2) as f32);
    }
    for t in [0.5f32, 0.625, 1.0, 0.414_213_57, 2.414_213_7, 4096.0, f32::MIN_POSITIVE] {
        v.push(f32::from_bits(t.to_bits() - 1));
        v.push(f32::from_bits(t.to_bits() + 1));
    }
    let neg: Vec<f32> = v.iter().map(|&x| -x).collect();
    v.extend(neg);
    v.push(f32::NAN);
    v.push(-f32::NAN);
    v
}

/// Where random inputs are dense for `op` (the whole f32 line is also drawn, by bit pattern).
fn dense_range(op: UnaryOp) -> (f32, f32) {
    match op {
        UnaryOp::Exp | UnaryOp::Sinh | UnaryOp::Cosh => (-110.0, 92.0),
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.0, 8.0),
        UnaryOp::Acosh => (1.0, 8.0),
        UnaryOp::Asin | UnaryOp::Acos | UnaryOp::Atanh => (-1.0, 1.0),
        UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Tan => (-7000.0, 7000.0),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => (-20.0, 20.0),
        _ => (-12.0, 12.0),
    }
}

/// The f64 definition of `op` at `x`: the table's, except where its f64 form is itself
/// inaccurate — arcosh is NaN below 1 (libm's f64 acosh returns numbers for some x < 1), and
/// the tanh GELU is taken as `x·σ(2u)` (the table's `x/2·(1 + tanh u)` cancels to 0 in f64
/// below x ≈ −6, where the function is still ~1e-16).
fn reference(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Acosh if x < 1.0 => f64::NAN,
        UnaryOp::GeluTanh => {
            let u = (2.0 / core::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            if x == f64::NEG_INFINITY {
                f64::NAN
            } else {
                x / (1.0 + (-2.0 * u).exp())
            }
        }
        _ => op.reference(x),
    }
}

/// Every vectorised function within its bound on every ISA; the worst case is printed.
#[test]
fn every_vector_function_within_its_ulp_bound() {
    let isas = isas();
    for &(op, bound) in ULP_BOUNDS {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ op as u64);
        let (lo, hi) = dense_range(op);
        let mut x = edges();
        for i in 0..60_000 {
            x.push(if i % 2 == 0 { rng.bits() } else { rng.uniform(lo, hi) });
        }
        // A few ones near the domain's small end (|x| of 1e-3..1: the odd functions' cancellation).
        for _ in 0..2_000 {
            let v = rng.uniform(-1.0, 1.0);
            x.push(v * v * v);
        }
        for &isa in &isas {
            let y = unary_on(isa, op, &x).unwrap_or_else(|| panic!("{op:?} has no vector form on {}", isa.name()));
            let mut worst = (0.0f64, 0.0f32, 0.0f32, 0.0f64);
            for (&xi, &yi) in x.iter().zip(&y) {
                let want = reference(op, f64::from(xi));
                let raw = ulps(yi, want);
                // As a fraction of the bound (which may depend on x), reported in ulps.
                let u = if raw == 0.0 { 0.0 } else { raw / vmath::ulp_bound(op, xi).unwrap() * bound };
                if u > worst.0 || (u.is_nan() && !worst.0.is_nan()) {
                    worst = (u, xi, yi, want);
                }
            }
            eprintln!(
                "{:>5} {op:?}: worst {:.3} ulp (scaled to the bound at x = 0) at x = {:e} (got {:e}, want {:e})",
                isa.name(),
                worst.0,
                worst.1,
                worst.2,
                worst.3
            );
            assert!(
                worst.0 <= bound,
                "{} {op:?}: {} ulp at x = {:e} (got {:e}, the definition {:e}), bound {bound}",
                isa.name(),
                worst.0,
                worst.1,
                worst.2,
                worst.3
            );
        }
    }
}

/// Every length from 0 to 40 (the tails through the padded copy) gives what the full vectors
/// give.
#[test]
fn tails_match_full_vectors() {
    let x: Vec<f32> = (0..40).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    for &isa in &isas() {
        for &(op, _) in ULP_BOUNDS {
            let full = unary_on(isa, op, &x).unwrap();
            for n in 0..x.len() {
                let part = unary_on(isa, op, &x[..n]).unwrap();
                assert_eq!(
                    part.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    full[..n].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{} {op:?} n = {n}",
                    isa.name()
                );
            }
        }
    }
}

/// pow(a, b): random positive and negative bases over every binade with exponents in
/// [−60, 60] (half of them integers, so negative bases give values), and the grid of C's special
/// cases; each operand also as one value for every element.
#[test]
fn pow_within_its_bound_and_special_cases() {
    let specials_a = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        -3.0,
        10.0,
        f32::from_bits(3),
        -f32::from_bits(3),
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let specials_b = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        1e10,
        -1e10,
        16_777_217.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &u in &specials_a {
        for &v in &specials_b {
            a.push(u);
            b.push(v);
        }
    }
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for i in 0..60_000 {
        let base = match i % 3 {
            0 => rng.bits(),
            1 => rng.uniform(-4.0, 4.0),
            _ => rng.uniform(0.0, 2.0),
        };
        let e = rng.uniform(-60.0, 60.0);
        a.push(if base.is_nan() { 1.5 } else { base });
        b.push(if i % 2 == 0 { e.round() } else { e });
    }
    for &isa in &isas() {
        let y = pow_on(isa, Operand2::Slice(&a), Operand2::Slice(&b), a.len());
        let mut worst = (0.0f64, 0.0f32, 0.0f32);
        let mut worst_ulps = 0.0f64;
        for ((&ai, &bi), &yi) in a.iter().zip(&b).zip(&y) {
            let want = BinaryOp::Pow.reference(f64::from(ai), f64::from(bi));
            let raw = ulps(yi, want);
            let u = if raw == 0.0 { 0.0 } else { raw / vmath::pow_ulp_bound(bi) };
            worst_ulps = worst_ulps.max(raw);
            assert!(u <= 1.0, "{} pow({ai:e}, {bi:e}) = {yi:e}, the definition {want:e}", isa.name());
            if u > worst.0 {
                worst = (u, ai, bi);
            }
        }
        eprintln!(
            "{:>5} Pow: worst {:.3} of the bound at ({:e}, {:e}); worst {:.3} ulp",
            isa.name(),
            worst.0,
            worst.1,
            worst.2,
            worst_ulps
        );
        // One value for every element, on either side: the same results.
        for &s in &[0.5f32, 2.0, -2.0, 3.0] {
            let n = 1000;
            let left = pow_on(isa, Operand2::One(s), Operand2::Slice(&b[..n]), n);
            let right = pow_on(isa, Operand2::Slice(&a[..n]), Operand2::One(s), n);
            let sb = vec![s; n];
            let left_full = pow_on(isa, Operand2::Slice(&sb), Operand2::Slice(&b[..n]), n);
            let right_full = pow_on(isa, Operand2::Slice(&a[..n]), Operand2::Slice(&sb), n);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&left), bits(&left_full), "{} pow({s}, b)", isa.name());
            assert_eq!(bits(&right), bits(&right_full), "{} pow(a, {s})", isa.name());
        }
    }
}
