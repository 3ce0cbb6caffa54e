//! Every SIMD kernel against the scalar kernels and the f64 reference, on random inputs.
//!
//! The ISA-specific entry points are called directly (not through the process-wide dispatch),
//! for every ISA this CPU supports; on a CPU without one the tests say so on stderr.

use crate::common_simd::{check_softmax, isas};
use kestrel_rt_cpu::kernels::linear::linear_scalar_body;
use kestrel_rt_cpu::kernels::simd::{self, Isa};
use kestrel_rt_format::weight::{EncodedWeight, ViewStore};
use kestrel_rt_format::{DType, WeightView};
use kestrel_rt_reference::tolerance::{assert_close, F32_APPROX, F32_KERNEL};
use proptest::prelude::*;

/// `x · Wᵀ` through every f32 dense kernel this CPU runs (one table for every ISA; the
/// dispatch picks one), called directly: `(ISA name, y)` each.
fn simd_matmuls(x: &[f32], rows: usize, w: &WeightView<'_>) -> Vec<(&'static str, Vec<f32>)> {
    let ran: Vec<_> = simd::F32_KERNELS
        .iter()
        .filter(|k| k.isa.supported())
        .map(|k| {
            let mut y = vec![f32::NAN; rows * w.rows()];
            // SAFETY: supported() checked the kernel's instructions; lengths as the contract.
            unsafe { (k.dense)(x, rows, w, &mut y) };
            (k.isa.name(), y)
        })
        .collect();
    if ran.is_empty() {
        eprintln!("no SIMD f32 dense kernel on this CPU: only the scalar kernels run here");
    }
    ran
}

/// `rows` rows of x, `out` weight rows, `inp` columns, random values.
fn case_with(
    rows: std::ops::Range<usize>,
    out: std::ops::Range<usize>,
    inp: impl Strategy<Value = usize>,
) -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    (rows, out, inp).prop_flat_map(|(rows, out, inp)| {
        (
            Just(rows),
            Just(out),
            Just(inp),
            proptest::collection::vec(-2.0f32..2.0, rows * inp),
            proptest::collection::vec(-1.0f32..1.0, out * inp),
        )
    })
}

fn case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    case_with(1..10, 1..10, prop_oneof![1usize..200, 250usize..700])
}

/// Every ISA's `x · Wᵀ` against the scalar kernel and the f64 reference on the decoded weights.
fn check_matmul(rows: usize, out: usize, inp: usize, x: &[f32], wv: &[f32], dt: u8) {
    let dtype = DType::from_u8(dt).unwrap();
    let e = EncodedWeight::encode(dtype, out, inp, wv).unwrap();
    let mut store = ViewStore::default();
    let w = e.view(&mut store);
    let mut scalar = vec![0.0f32; rows * out];
    linear_scalar_body(x, rows, &w, None, &mut scalar);
    // f64 reference on the decoded weights (the encoding's rounding is not the kernel's error).
    let dec = e.decode();
    let want: Vec<f64> = (0..rows * out)
        .map(|i| {
            let (r, o) = (i / out, i % out);
            (0..inp).map(|k| f64::from(x[r * inp + k]) * f64::from(dec[o * inp + k])).sum()
        })
        .collect();
    assert_close("scalar linear", &scalar, &want, F32_APPROX);
    let scalar64: Vec<f64> = scalar.iter().map(|&v| f64::from(v)).collect();
    for (name, got) in simd_matmuls(x, rows, &w) {
        assert_close(&format!("{name} {dtype:?} matmul_wt"), &got, &want, F32_APPROX);
        assert_close(&format!("{name} {dtype:?} vs scalar"), &got, &scalar64, F32_APPROX);
    }
}

/// Shapes for the few-row (GEMV) kernels: 1–3 rows, several 8-row weight blocks and a partial
/// one (the AVX-512 kernel prefetches the next block), columns with and without a 16-lane tail.
fn gemv_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    case_with(1..4, 1..44, prop_oneof![1usize..40, 250usize..600])
}

fn gemm_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    case_with(6..42, 1..80, prop_oneof![1usize..40, 250usize..600, 1000usize..1100])
}

/// GELU in place through `isa`'s kernel (a supported ISA; the scalar GELU off x86).
fn gelu_on(isa: Isa, got: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: supported ISAs only.
    unsafe {
        if isa == Isa::Avx512 {
            simd::x86::gelu_avx512(got)
        } else {
            simd::x86::gelu(got)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        got.iter_mut().for_each(|v| *v = kestrel_rt_cpu::math::gelu(*v));
    }
}

/// Sigmoid and SiLU of `xs` through the dispatch and every ISA this CPU supports (x86: its
/// entry points; elsewhere the dispatched kernels again): `(who, sigmoid, silu)` each.
fn sigmoid_silu_runs(xs: &[f32]) -> Vec<(&'static str, Vec<f32>, Vec<f32>)> {
    let mut runs = Vec::new();
    let (mut s, mut u) = (xs.to_vec(), xs.to_vec());
    simd::sigmoid(&mut s);
    simd::silu(&mut u);
    runs.push(("dispatched", s, u));
    for isa in isas() {
        let (mut s, mut u) = (xs.to_vec(), xs.to_vec());
        #[cfg(target_arch = "x86_64")]
        // SAFETY: supported ISAs only.
        unsafe {
            if isa == Isa::Avx512 {
                simd::x86::sigmoid_avx512(&mut s);
                simd::x86::silu_avx512(&mut u);
            } else {
                simd::x86::sigmoid(&mut s);
                simd::x86::silu(&mut u);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            simd::sigmoid(&mut s);
            simd::silu(&mut u);
        }
        runs.push((isa.name(), s, u));
    }
    runs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn matmul_matches_scalar_and_f64((rows, out, inp, x, wv) in case(), dt in 0u8..4) {
        check_matmul(rows, out, inp, &x, &wv, dt);
    }

    #[test]
    fn gemv_matches_scalar_and_f64((rows, out, inp, x, wv) in gemv_case(), dt in 0u8..4) {
        check_matmul(rows, out, inp, &x, &wv, dt);
    }

    /// Shapes for the packed GEMM: row tails of its 6- and 8-row micro-kernels, partial 16- and
    /// 32-feature panels, column blocks of 256 (and 1024 for the few-row kernel) with ragged ends.
    #[test]
    fn packed_gemm_matches_scalar_and_f64((rows, out, inp, x, wv) in gemm_case(), dt in 0u8..4) {
        check_matmul(rows, out, inp, &x, &wv, dt);
    }

    /// The vectorised GELU against the f64 definition, element by element: within 3e-5
    /// relative (the negative tail included, where `1 + erf` would cancel).
    #[test]
    fn gelu_matches_f64(xs in proptest::collection::vec(prop_oneof![-9.5f32..9.5, -40.0f32..40.0], 0..100)) {
        let want: Vec<f64> = xs.iter().map(|&x| {
            let x = f64::from(x);
            0.5 * x * libm::erfc(-x / std::f64::consts::SQRT_2)
        }).collect();
        for isa in isas() {
            let mut got = xs.clone();
            gelu_on(isa, &mut got);
            for ((&g, &w), &x) in got.iter().zip(&want).zip(&xs) {
                prop_assert!((f64::from(g) - w).abs() <= 3e-5 * w.abs() + 1e-37, "{} gelu({x}) = {g}, want {w}", isa.name());
            }
        }
    }

    /// Special values through the vector GELU: +∞ and huge inputs pass through, NaN stays NaN
    /// (the reciprocal's Newton step must not turn ∞ · 0 into NaN).
    #[test]
    fn gelu_specials(_x in 0..1i32) {
        for isa in isas() {
            let mut got = [f32::INFINITY, f32::NAN, 1e30, 3e38, -1e30];
            gelu_on(isa, &mut got);
            prop_assert_eq!(got[0], f32::INFINITY, "{}", isa.name());
            prop_assert!(got[1].is_nan(), "{}", isa.name());
            prop_assert!((got[2] / 1e30 - 1.0).abs() <= 3e-5, "{} {}", isa.name(), got[2]);
            prop_assert!((got[3] / 3e38 - 1.0).abs() <= 3e-5, "{} {}", isa.name(), got[3]);
            prop_assert_eq!(got[4], 0.0, "{}", isa.name());
        }
    }

    /// The vectorised σ and SiLU (`x·σ(x)`, one pass) of every ISA against f64, element by
    /// element within 1e-6 relative plus 1e-30 (results that underflow f32's normal range):
    /// saturating arguments (e^−x over- and underflowing), tiny ones, lengths that leave SIMD
    /// tails.
    #[test]
    fn sigmoid_and_silu_match_f64(
        xs in proptest::collection::vec(prop_oneof![-30.0f32..30.0, -120.0f32..120.0, -1e-3f32..1e-3], 0..70),
    ) {
        let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
        let want_s: Vec<f64> = xs.iter().map(|&x| sig(f64::from(x))).collect();
        let want_u: Vec<f64> = xs.iter().map(|&x| f64::from(x) * sig(f64::from(x))).collect();
        for (who, s, u) in &sigmoid_silu_runs(&xs) {
            for (k, &x) in xs.iter().enumerate() {
                let (ws, wu) = (want_s[k], want_u[k]);
                prop_assert!((f64::from(s[k]) - ws).abs() <= 1e-6 * ws.abs() + 1e-30, "{who} sigmoid({x}) = {}, want {ws}", s[k]);
                prop_assert!((f64::from(u[k]) - wu).abs() <= 1e-6 * wu.abs() + 1e-30, "{who} silu({x}) = {}, want {wu}", u[k]);
            }
        }
    }

    /// The vectorised softmax against the f64 softmax, per element: 1e-6 relative plus the
    /// rounding of `x − max` in f32 (an ulp of |x − max| moves e^(x − max) by that much
    /// relatively), plus 1e-30 for underflowing entries; rows with a wide spread of values.
    #[test]
    fn softmax_matches_f64(xs in proptest::collection::vec(-60.0f32..60.0, 1..90)) {
        check_softmax(&xs, 1.0, "softmax")?;
    }

    /// The scaled softmax (attention scores: `softmax(scale · x)`, either sign) against f64, the
    /// bound as above on the scaled values; every tail length of the masked AVX-512 path.
    #[test]
    fn scaled_softmax_matches_f64(xs in proptest::collection::vec(-60.0f32..60.0, 1..70), scale in prop_oneof![-2.0f32..-0.05, 0.05f32..2.0]) {
        check_softmax(&xs, scale, "scaled softmax")?;
    }

    /// The vectorised `e^(v − m)` (one maximum, and one per element) against f64: 1e-6 relative
    /// plus the rounding of `v − m` in f32 (as for softmax), plus 1e-37 where it underflows; NaN
    /// stays NaN.
    #[test]
    fn exp_sub_matches_f64(xs in proptest::collection::vec(-95.0f32..40.0, 1..70), ms in proptest::collection::vec(0.0f32..60.0, 70)) {
        let m = xs.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        // Per-element maxima at least as large as the value (the kernels' contract).
        let each: Vec<f32> = xs.iter().zip(&ms).map(|(&v, &d)| v + d).collect();
        let bound = |x: f32, m: f32, w: f64| (1e-6 + f64::from(f32::EPSILON) * f64::from(m - x)) * w + 1e-37;
        for isa in isas() {
            let (mut one, mut per) = (xs.clone(), xs.clone());
            #[cfg(target_arch = "x86_64")]
            // SAFETY: supported ISAs only.
            unsafe { simd::x86::exp_sub(&mut one, m); simd::x86::exp_sub_each(&mut per, &each); }
            #[cfg(not(target_arch = "x86_64"))]
            { one.iter_mut().for_each(|v| *v = kestrel_rt_cpu::math::exp(*v - m)); per.iter_mut().zip(&each).for_each(|(v, &m)| *v = kestrel_rt_cpu::math::exp(*v - m)); }
            for (i, &x) in xs.iter().enumerate() {
                let w = (f64::from(x) - f64::from(m)).exp();
                prop_assert!((f64::from(one[i]) - w).abs() <= bound(x, m, w), "{} exp({x} - {m}) = {}, want {w}", isa.name(), one[i]);
                let w = (f64::from(x) - f64::from(each[i])).exp();
                prop_assert!((f64::from(per[i]) - w).abs() <= bound(x, each[i], w), "{} exp({x} - {}) = {}, want {w}", isa.name(), each[i], per[i]);
            }
            let mut nan = vec![0.5f32, f32::NAN, -1.0];
            #[cfg(target_arch = "x86_64")]
            // SAFETY: supported ISAs only.
            unsafe { simd::x86::exp_sub(&mut nan, 1.0) };
            #[cfg(not(target_arch = "x86_64"))]
            simd::exp_sub(&mut nan, 1.0);
            prop_assert!(nan[1].is_nan(), "{}: NaN in, {} out", isa.name(), nan[1]);
        }
    }

    /// The vectorised AFT gate `σ(q)·num·s/den` against f64: 2e-6 relative (σ's exp and
    /// reciprocal, the products and the division), with and without `den`.
    #[test]
    fn sigmoid_gate_matches_f64(
        q in proptest::collection::vec(-40.0f32..40.0, 1..70),
        num in proptest::collection::vec(-5.0f32..5.0, 70),
        den in proptest::collection::vec(0.05f32..9.0, 70),
        s in 0.1f32..3.0,
    ) {
        for isa in isas() {
            for with_den in [true, false] {
                let d = with_den.then_some(&den[..]);
                let mut got = q.clone();
                #[cfg(target_arch = "x86_64")]
                // SAFETY: supported ISAs only; num and den hold 70 ≥ q.len() elements.
                unsafe { simd::x86::sigmoid_gate(&mut got, &num, d, s) };
                #[cfg(not(target_arch = "x86_64"))]
                got.iter_mut().enumerate().for_each(|(i, v)| *v = kestrel_rt_cpu::math::sigmoid(*v) * num[i] * s / d.map_or(1.0, |d| d[i]));
                for (i, &x) in q.iter().enumerate() {
                    let sig = 1.0 / (1.0 + (-f64::from(x)).exp());
                    let w = sig * f64::from(num[i]) * f64::from(s) / d.map_or(1.0, |d| f64::from(d[i]));
                    prop_assert!((f64::from(got[i]) - w).abs() <= 2e-6 * w.abs() + 1e-37, "{} gate(q={x}) = {}, want {w}", isa.name(), got[i]);
                }
            }
        }
    }

    #[test]
    fn dot_and_axpy_match_scalar(a in proptest::collection::vec(-3.0f32..3.0, 0..300), s in -2.0f32..2.0) {
        let b: Vec<f32> = a.iter().enumerate().map(|(i, v)| (i as f32 * 0.7).sin() - 0.3 * v).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        let norm: f64 = a.iter().zip(&b).map(|(x, y)| (f64::from(*x) * f64::from(*y)).abs()).sum();
        let axpy_want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| f64::from(*y) + f64::from(s) * f64::from(*x)).collect();
        for isa in isas() {
            let (got, mut y) = (simd_dot(isa, &a, &b), b.clone());
            simd_axpy(isa, &mut y, s, &a);
            if let Some(got) = got {
                // A sum of n terms in f32: error ≤ n·u·Σ|terms| (u = 2⁻²⁴), a bound, not a guess.
                let bound = a.len() as f64 * f64::from(f32::EPSILON) * norm + 1e-30;
                prop_assert!((f64::from(got) - want).abs() <= bound, "{} dot {} vs {}", isa.name(), got, want);
                assert_close(&format!("{} axpy", isa.name()), &y, &axpy_want, F32_KERNEL);
            }
        }
    }

    #[test]
    fn int8_dot_is_exact(a in proptest::collection::vec(-127i8..=127, 0..700), seed in 0u32..1000) {
        let b: Vec<i8> = a.iter().enumerate().map(|(i, _)| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 7) % 255) as i32 - 127).map(|v| v as i8).collect();
        let want = simd::dot_i8_scalar(&a, &b);
        let exact: i64 = a.iter().zip(&b).map(|(x, y)| i64::from(*x) * i64::from(*y)).sum();
        prop_assert_eq!(i64::from(want), exact);
        for isa in isas() {
            if let Some(got) = simd_dot_i8(isa, &a, &b) {
                prop_assert_eq!(got, want, "{}", isa.name());
            }
        }
    }

    #[test]
    fn int4_group_dot_is_exact(bytes in proptest::collection::vec(any::<u8>(), 16), xq in proptest::collection::vec(-127i8..=127, 0..=32)) {
        let want = simd::dot_i4_group_scalar(&bytes, &xq);
        for isa in isas() {
            if let Some(got) = simd_dot_i4(isa, &bytes, &xq) {
                prop_assert_eq!(got, want, "{}", isa.name());
            }
        }
    }
}

/// The int8 × int8 product in exact integers: `Σ_k quantize_act(x[r, k]) · w[o, k]`, `[rows, out]`.
fn q8_reference(x: &[f32], rows: usize, inv: f32, w: &[i8], cols: usize, out: usize) -> Vec<i32> {
    let mut xq = vec![0i8; x.len()];
    kestrel_rt_format::weight::quantize_act(x, inv, &mut xq);
    let mut acc = vec![0i32; rows * out];
    for r in 0..rows {
        for o in 0..out {
            let s: i64 = (0..cols).map(|k| i64::from(xq[r * cols + k]) * i64::from(w[o * cols + k])).sum();
            acc[r * out + o] = i32::try_from(s).expect("fits i32 below Q8_EXACT_MAX_COLS");
        }
    }
    acc
}

/// Activations for the int8 tests: ordinary values, exact halves of the scale 0.25 (the
/// rounding tie), values far past the clamp, ±∞ and NaN.
fn q8_act() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -40.0f32..40.0,
        2 => (-200i32..200).prop_map(|n| (n as f32 + 0.5) * 0.25),
        1 => prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY), Just(1e9f32), Just(-3e38f32)],
    ]
}

/// Every packed int8 GEMM this CPU has, against [`q8_reference`], bit for bit (accumulating onto
/// what `acc` held, as the contract says).
fn check_q8(rows: usize, out: usize, cols: usize, x: &[f32], w: &[i8]) {
    let inv = 4.0; // scale 0.25
    let want = q8_reference(x, rows, inv, w, cols, out);
    let run = |name: &str, f: &dyn Fn(&mut [i32])| {
        // Onto a non-zero start: the kernels accumulate.
        let base: Vec<i32> = (0..rows * out).map(|i| i as i32 * 7 - 100).collect();
        let mut acc = base.clone();
        f(&mut acc);
        let got: Vec<i32> = acc.iter().zip(&base).map(|(a, b)| a.wrapping_sub(*b)).collect();
        assert_eq!(got, want, "{name} q8, rows {rows} out {out} cols {cols}");
    };
    // Through the dispatch on every platform (the packed kernels where the CPU has them, else
    // the portable i32 loop): each output is its exact sum × the row scale × the activation
    // scale (0.25, exact), converted once.
    let scales: Vec<f32> = (0..out).map(|o| 0.003 + o as f32 * 0.001).collect();
    let wv = WeightView::new(out, cols, kestrel_rt_format::WeightData::I8 { q: w, scales: &scales }).unwrap();
    let mut y = vec![f32::NAN; rows * out];
    kestrel_rt_cpu::kernels::linear::linear_q8(
        x,
        rows,
        &wv,
        None,
        kestrel_rt_format::ops::Activation::None,
        1.0 / inv,
        &mut y,
    );
    let expect: Vec<f32> = want.iter().enumerate().map(|(i, &a)| a as f32 * scales[i % out] * 0.25).collect();
    assert_eq!(y, expect, "linear_q8 int8, rows {rows} out {out} cols {cols}");
    // With an f32 bias (the packed GEMM finishes in its tiles where it can): the same order,
    // `(sum · scale) · x_scale + bias`, bit for bit.
    let bias: Vec<f32> = (0..out).map(|o| o as f32 * 0.37 - 5.0).collect();
    let bv = WeightView::f32(1, out, &bias).unwrap();
    let mut y = vec![f32::NAN; rows * out];
    let relu = kestrel_rt_format::ops::Activation::Relu;
    kestrel_rt_cpu::kernels::linear::linear_q8(x, rows, &wv, Some(&bv), relu, 1.0 / inv, &mut y);
    let expect: Vec<f32> = expect.iter().enumerate().map(|(i, &v)| (v + bias[i % out]).max(0.0)).collect();
    assert_eq!(y, expect, "linear_q8 int8 + bias + relu, rows {rows} out {out} cols {cols}");
    // Every packed int8 kernel this CPU has (one table for every ISA; the dispatch picks one),
    // called directly: exact sums onto what `acc` held, and the in-tile finish's f32 bits,
    // `(sum · scale) · x_scale + bias`.
    let fin = simd::Q8Finish { scales: &scales, x_scale: 1.0 / inv, bias: Some(&bias) };
    let finished: Vec<f32> =
        want.iter().enumerate().map(|(i, &a)| a as f32 * scales[i % out] * 0.25 + bias[i % out]).collect();
    let op = simd::Q8Operands { x, rows, inv, w, cols, out };
    let mut ran = false;
    for k in simd::Q8_KERNELS.iter().filter(|k| (k.supported)()) {
        // SAFETY: the kernels' instructions are detected; they check lengths.
        run(k.name, &|acc| unsafe { (k.accumulate)(&op, acc) });
        let mut y = vec![f32::NAN; rows * out];
        // SAFETY: as above.
        if unsafe { (k.dense)(&op, &fin, &mut y) } {
            assert_eq!(y, finished, "{} in-tile finish, rows {rows} out {out} cols {cols}", k.name);
        } else {
            assert!(rows < simd::Q8_FUSED_MIN_ROWS, "{} declined {rows} rows", k.name);
        }
        ran = true;
    }
    if !ran {
        eprintln!(
            "no packed int8 GEMM on this CPU (AVX-512 VNNI, AVX-VNNI, AVX2, aarch64 dotprod): only the dot products run"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Rows across the GEMV/GEMM line, tiles (8) and row blocks (64); outputs across the
    /// 32-wide panels; inputs across the 64-byte steps and the 256-input blocks.
    #[test]
    fn int8_gemm_is_exact(
        (rows, out, cols, x, w) in (prop_oneof![1usize..12, 60usize..70], 1usize..70, prop_oneof![1usize..70, 250usize..530])
            .prop_flat_map(|(rows, out, cols)| (
                Just(rows), Just(out), Just(cols),
                proptest::collection::vec(q8_act(), rows * cols),
                proptest::collection::vec(-127i8..=127, out * cols),
            )),
    ) {
        check_q8(rows, out, cols, &x, &w);
    }
}

/// `(rows, out, cols, x, bytes, scales)`: `rows × cols` activations from `act` and an
/// `[out (1..40), cols]` int4 matrix of arbitrary packed bytes (every nibble, -8 included, and
/// garbage in a row's padding past `cols`) with group scales in ±2.
fn raw_int4_case<A: Strategy<Value = f32>>(
    rows: impl Strategy<Value = usize>,
    cols: impl Strategy<Value = usize>,
    act: impl Fn() -> A,
) -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<u8>, Vec<f32>)> {
    (rows, 1usize..40, cols).prop_flat_map(move |(rows, out, cols)| {
        let rb = kestrel_rt_format::weight::int4_row_bytes(cols);
        let g = kestrel_rt_format::weight::int4_groups(cols);
        (
            Just(rows),
            Just(out),
            Just(cols),
            proptest::collection::vec(act(), rows * cols),
            proptest::collection::vec(any::<u8>(), out * rb),
            proptest::collection::vec(-2.0f32..2.0, out * g),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// int4 weights from arbitrary packed bytes and scales — every nibble, -8 included (the
    /// encoder's symmetric quantiser only writes -7..7), and garbage in a row's padding past
    /// `cols` — through every ISA's dense kernels (GEMV and GEMM shapes) against the scalar ones.
    #[test]
    fn int4_kernels_take_every_nibble(
        (rows, out, cols, x, bytes, sc) in raw_int4_case(prop_oneof![1usize..4, 8usize..20], prop_oneof![1usize..70, 250usize..300], || -2.0f32..2.0),
    ) {
        let scales: Vec<half::f16> = sc.iter().map(|&v| half::f16::from_f32(v)).collect();
        let w = WeightView::new(out, cols, kestrel_rt_format::WeightData::I4 { q: &bytes, scales: &scales }).unwrap();
        let mut scalar = vec![0.0f32; rows * out];
        linear_scalar_body(&x, rows, &w, None, &mut scalar);
        let scalar64: Vec<f64> = scalar.iter().map(|&v| f64::from(v)).collect();
        for (name, got) in simd_matmuls(&x, rows, &w) {
            assert_close(&format!("{name} int4 (raw bytes) matmul_wt"), &got, &scalar64, F32_APPROX);
        }
    }
}

/// The portable int4 × int8 loop (`WeightView::dot_row_q8` per 256-input chunk) for `[rows, out]`.
fn q8_i4_reference(x: &[f32], rows: usize, inv: f32, w: &WeightView<'_>) -> Vec<f32> {
    let (out, cols) = (w.rows(), w.cols());
    let mut y = vec![0.0f32; rows * out];
    let mut q = [0i8; 256];
    for r in 0..rows {
        for c0 in (0..cols).step_by(256) {
            let n = 256.min(cols - c0);
            kestrel_rt_format::weight::quantize_act(&x[r * cols + c0..r * cols + c0 + n], inv, &mut q[..n]);
            for o in 0..out {
                y[r * out + o] += w.dot_row_q8(o, c0, &q[..n]).expect("int4 at a chunk boundary");
            }
        }
    }
    y
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The int4 × int8 kernels against the portable loop, bit for bit — with arbitrary packed
    /// bytes (every nibble, -8 included, and garbage in a row's padding past `cols`) and
    /// scales, not only what the encoder writes.
    #[test]
    fn int4_q8_gemm_matches_the_portable_loop_bit_for_bit(
        (rows, out, cols, x, bytes, sc) in raw_int4_case(prop_oneof![1usize..10, 60usize..70], prop_oneof![1usize..70, 250usize..530], q8_act),
    ) {
        let scales: Vec<half::f16> = sc.iter().map(|&v| half::f16::from_f32(v)).collect();
        let w = WeightView::new(out, cols, kestrel_rt_format::WeightData::I4 { q: &bytes, scales: &scales }).unwrap();
        let inv = 4.0;
        let want = q8_i4_reference(&x, rows, inv, &w);
        // Through the dispatch on every platform: the activation scale (0.25, a power of two)
        // is applied after, exactly.
        let mut y = vec![f32::NAN; rows * out];
        kestrel_rt_cpu::kernels::linear::linear_q8(&x, rows, &w, None, kestrel_rt_format::ops::Activation::None, 1.0 / inv, &mut y);
        let scaled: Vec<f32> = want.iter().map(|v| v * 0.25).collect();
        prop_assert_eq!(&y, &scaled, "linear_q8 int4, rows {} out {} cols {}", rows, out, cols);
        #[cfg(target_arch = "x86_64")]
        if simd::has_avx512_vnni() {
            let mut y = vec![f32::NAN; rows * out];
            let op = simd::Q8Operands { x: &x, rows, inv, w: (&bytes[..], &scales[..]), cols, out };
            // SAFETY: AVX-512F/BW/VNNI detected (with AVX2/FMA/F16C on every such CPU).
            unsafe { simd::x86::q8_i4_avx512vnni(&op, &mut y) };
            prop_assert_eq!(y, want, "avx512-vnni int4 q8, rows {} out {} cols {}", rows, out, cols);
        }
    }
}

/// Every row count 1–70 (every tail of the 8-row AVX-512 and 6-row AVX2 tiles, and the even
/// splits of the rows into tiles the GEMMs use when the count is not a multiple of the tile), in
/// every weight encoding, against the f64 reference and the scalar kernel (the calibrated int8
/// and int4 kernels bit for bit against their portable loops); two blocks of inputs
/// (past the packed GEMM's 512), a partial panel of outputs. And the convolution GEMM
/// (`matmul_kn`: `a [m, k] · b [k, n]`) at every `m` 1–70 against f64.
#[test]
fn every_row_count_matches_f64_in_every_encoding() {
    let (out, inp) = (37, 530);
    let mut seed = 0x853c_49e6_748f_ea9bu64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let wv: Vec<f32> = (0..out * inp).map(|_| next()).collect();
    let x: Vec<f32> = (0..70 * inp).map(|_| 2.0 * next()).collect();
    let (k, n) = (inp, 45);
    let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
    // Integer weights for the calibrated (int8-activation) kernels: int8, and int4 with
    // arbitrary bytes and scales.
    let w8: Vec<i8> = wv.iter().map(|&v| (v * 127.0) as i8).collect();
    let w4: Vec<u8> = w8.iter().map(|&v| v as u8).collect();
    let (rb, g) = (kestrel_rt_format::weight::int4_row_bytes(inp), kestrel_rt_format::weight::int4_groups(inp));
    let s4: Vec<half::f16> = wv[..out * g].iter().map(|&v| half::f16::from_f32(v)).collect();
    let w4v = WeightView::new(out, inp, kestrel_rt_format::WeightData::I4 { q: &w4[..out * rb], scales: &s4 }).unwrap();
    for rows in 1..=70 {
        for dt in 0u8..4 {
            check_matmul(rows, out, inp, &x[..rows * inp], &wv, dt);
        }
        check_q8(rows, out, inp, &x[..rows * inp], &w8);
        let want: Vec<f32> = q8_i4_reference(&x[..rows * inp], rows, 4.0, &w4v).iter().map(|v| v * 0.25).collect();
        let mut y = vec![f32::NAN; rows * out];
        let act = kestrel_rt_format::ops::Activation::None;
        kestrel_rt_cpu::kernels::linear::linear_q8(&x[..rows * inp], rows, &w4v, None, act, 0.25, &mut y);
        assert_eq!(y, want, "linear_q8 int4, rows {rows}");
        let a = &x[..rows * k];
        let want: Vec<f64> = (0..rows * n)
            .map(|i| (0..k).map(|kk| f64::from(a[(i / n) * k + kk]) * f64::from(b[kk * n + i % n])).sum())
            .collect();
        for isa in Isa::ALL.into_iter().filter(|i| i.supported()) {
            if let Some(got) = simd_matmul_kn(isa, a, rows, k, &b, n) {
                assert_close(&format!("{isa:?} matmul_kn m {rows}"), &got, &want, F32_APPROX);
            }
        }
    }
}

/// The int4 × int8 product on rows longer than the AVX-512 GEMV's 4,096-input span (partial
/// spans, chunks and groups, a partial block of 16 weight rows, garbage padding nibbles), 1–5
/// rows of `x` (the GEMV and the packed GEMM), bit for bit against the portable loop.
#[test]
fn int4_q8_on_long_rows_matches_the_portable_loop_bit_for_bit() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (out, cols) in [(17, 4096 + 300), (33, 8192 + 33), (5, 4096), (16, 12_288 + 250)] {
        let (rb, g) = (kestrel_rt_format::weight::int4_row_bytes(cols), kestrel_rt_format::weight::int4_groups(cols));
        let bytes: Vec<u8> = (0..out * rb).map(|_| next() as u8).collect();
        let scales: Vec<half::f16> =
            (0..out * g).map(|_| half::f16::from_f32((next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)).collect();
        let x: Vec<f32> = (0..5 * cols).map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 80.0).collect();
        let w = WeightView::new(out, cols, kestrel_rt_format::WeightData::I4 { q: &bytes, scales: &scales }).unwrap();
        for rows in 1..=5 {
            let x = &x[..rows * cols];
            let want: Vec<f32> = q8_i4_reference(x, rows, 4.0, &w).iter().map(|v| v * 0.25).collect();
            let mut y = vec![f32::NAN; rows * out];
            kestrel_rt_cpu::kernels::linear::linear_q8(
                x,
                rows,
                &w,
                None,
                kestrel_rt_format::ops::Activation::None,
                0.25,
                &mut y,
            );
            assert_eq!(y, want, "linear_q8 int4, rows {rows} out {out} cols {cols}");
        }
    }
}

/// The AVX-512 and AVX2 GEMVs have two kernels each, by row length and encoding: rows of up to
/// 8,192 inputs (the proptests) stream one weight row at a time (AVX2: f32 and f16 only), longer
/// ones take eight weight rows per load of `x` (except f32, which always streams). Long rows here: two 8-row blocks and a partial one, a ragged column tail, 1–3
/// rows of `x`, every encoding, random values.
#[test]
fn gemv_on_long_rows_matches_scalar_and_f64() {
    let (out, inp) = (19, 8192 + 77);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let wv: Vec<f32> = (0..out * inp).map(|_| next()).collect();
    let x: Vec<f32> = (0..3 * inp).map(|_| 2.0 * next()).collect();
    for dt in 0u8..4 {
        for rows in 1..=3 {
            check_matmul(rows, out, inp, &x[..rows * inp], &wv, dt);
        }
    }
}

/// The GEMV's second pass over inputs (more than 24,576 of them for one row, 8,192 for three) and the GEMM over 1–5 rows.
#[test]
fn int8_gemm_is_exact_past_one_pass() {
    let cols = 24576 + 77;
    let out = 11;
    let w: Vec<i8> = (0..out * cols).map(|i| ((i * 37 + 11) % 255) as i32 - 127).map(|v| v as i8).collect();
    let x: Vec<f32> = (0..5 * cols).map(|i| ((i * 53 % 1001) as f32 - 500.0) * 0.07).collect();
    for rows in 1..=5 {
        check_q8(rows, out, cols, &x[..rows * cols], &w);
    }
}

/// `a [m, k] · b [k, n]` (the convolution GEMM) for `isa` (None: not available here).
/// (x86 only: elsewhere the dispatched entry point's portable loop is what runs.)
#[cfg(target_arch = "x86_64")]
fn simd_matmul_kn(isa: Isa, a: &[f32], m: usize, k: usize, b: &[f32], n: usize) -> Option<Vec<f32>> {
    let mut y = vec![f32::NAN; m * n];
    match isa {
        // SAFETY: only called for supported ISAs.
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { simd::x86::matmul_kn(a, (m, m), k, b, n, &mut y, n) },
        // SAFETY: only called for supported ISAs.
        Isa::Avx512 => unsafe { simd::x86::matmul_kn_avx512(a, (m, m), k, b, n, &mut y, n) },
        _ => return None,
    }
    Some(y)
}

#[cfg(not(target_arch = "x86_64"))]
fn simd_matmul_kn(_isa: Isa, _a: &[f32], _m: usize, _k: usize, _b: &[f32], _n: usize) -> Option<Vec<f32>> {
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Rows around the 6- and 8-row tiles (up to five whole tiles, each prefetching the next
    /// one's rows of `a`, and a remainder), columns around the 16/32-lane panels (tails through
    /// the zero-padded copy) and across several of the column chunks a shallow `b` is walked
    /// in (500–700 columns: 1 to 14 chunks for depths under 40), rows of `b` within 128 bytes
    /// of 4 KiB apart (1,000–1,055 columns: chunks copied into a padded buffer first, the last
    /// one partial), depths across one and two 256-deep blocks.
    #[test]
    fn matmul_kn_matches_f64(
        (m, n, k, a, b) in (1usize..44, prop_oneof![1usize..70, 500usize..700, 1000usize..1056], prop_oneof![0usize..40, 250usize..300, 505usize..530]).prop_flat_map(|(m, n, k)| (
            Just(m), Just(n), Just(k),
            proptest::collection::vec(-1.0f32..1.0, m * k),
            proptest::collection::vec(-2.0f32..2.0, k * n),
        ))
    ) {
        let want: Vec<f64> = (0..m * n)
            .map(|i| (0..k).map(|j| f64::from(a[(i / n) * k + j]) * f64::from(b[j * n + i % n])).sum())
            .collect();
        // The dispatched entry point (scalar fallback included), then every ISA directly.
        let mut y = vec![f32::NAN; m * n];
        simd::matmul_kn(&a, m, k, &b, n, &mut y, n);
        assert_close("matmul_kn (dispatched)", &y, &want, F32_APPROX);
        for isa in isas() {
            if let Some(got) = simd_matmul_kn(isa, &a, m, k, &b, n) {
                assert_close(&format!("{} matmul_kn", isa.name()), &got, &want, F32_APPROX);
            }
        }
    }
}

/// [`simd::matmul_kn`] with weights of at least `PF_MIN_A` elements (whole tiles prefetch the
/// next tile's rows of `a`): 64 tiles of 8 rows and a remainder of 3, three depth blocks, a
/// full column panel and a tail; every ISA here.
#[test]
fn matmul_kn_large_a_matches_f64() {
    let (m, k, n) = (515usize, 530usize, 41usize);
    let mut s = 11u32;
    let mut next = move || {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        f64::from(s >> 8) / f64::from(1u32 << 24) * 2.0 - 1.0
    };
    let a: Vec<f32> = (0..m * k).map(|_| next() as f32).collect();
    let b: Vec<f32> = (0..k * n).map(|_| next() as f32).collect();
    let want: Vec<f64> =
        (0..m * n).map(|i| (0..k).map(|j| f64::from(a[(i / n) * k + j]) * f64::from(b[j * n + i % n])).sum()).collect();
    let mut y = vec![f32::NAN; m * n];
    simd::matmul_kn(&a, m, k, &b, n, &mut y, n);
    assert_close("matmul_kn large a (dispatched)", &y, &want, F32_APPROX);
    for isa in isas() {
        if let Some(got) = simd_matmul_kn(isa, &a, m, k, &b, n) {
            assert_close(&format!("{isa:?} matmul_kn large a"), &got, &want, F32_APPROX);
        }
    }
}

fn simd_dot(isa: Isa, a: &[f32], b: &[f32]) -> Option<f32> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only called for supported ISAs.
        Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 => Some(unsafe { simd::x86::dot_f32(a, b) }),
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline.
        Isa::Neon => Some(unsafe { simd::neon::dot_f32(a, b) }),
        _ => None,
    }
}

fn simd_axpy(isa: Isa, y: &mut [f32], s: f32, x: &[f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only called for supported ISAs.
        Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 => unsafe { simd::x86::axpy(y, s, x) },
        _ => {
            for (y, &x) in y.iter_mut().zip(x) {
                *y += s * x;
            }
        }
    }
}

fn simd_dot_i8(isa: Isa, a: &[i8], b: &[i8]) -> Option<i32> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only called for supported ISAs.
        Isa::Avx2 => Some(unsafe { simd::x86::dot_i8(a, b) }),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only called for supported ISAs.
        Isa::Avx2Vnni => Some(unsafe { simd::x86::dot_i8_vnni(a, b) }),
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline.
        Isa::Neon => Some(unsafe { simd::neon::dot_i8(a, b) }),
        _ => None,
    }
}

fn simd_dot_i4(isa: Isa, bytes: &[u8], xq: &[i8]) -> Option<i32> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only called for supported ISAs.
        Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 => Some(unsafe { simd::x86::dot_i4_group(bytes, xq) }),
        _ => {
            let _ = (bytes, xq);
            None
        }
    }
}

#[test]
fn dispatch_picks_a_supported_isa_and_refuses_missing_ones() {
    let best = simd::detect();
    assert!(best.supported());
    assert_eq!(simd::isa(), best);
    for isa in Isa::ALL {
        assert_eq!(Isa::from_name(isa.name()), Some(isa));
        if !isa.supported() {
            assert!(!simd::set_isa(isa), "{} accepted without CPU support", isa.name());
        }
    }
    assert_eq!(simd::isa(), best);
}

/// NaN and ±∞ through the vectorised σ and SiLU of every ISA: NaN stays NaN, σ(+∞) = 1 and
/// σ(−∞) ≈ 0 (below 1e-30), SiLU(+∞) = +∞, huge arguments saturate instead of giving NaN.
#[test]
fn sigmoid_and_silu_keep_nan_and_saturate_at_infinity() {
    let xs = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -1e30, 1e30];
    let check = |who: &str, s: &[f32], u: &[f32]| {
        assert!(s[0].is_nan() && u[0].is_nan(), "{who}: NaN lost: {s:?} {u:?}");
        assert_eq!((s[1], s[3]), (1.0, 0.5), "{who}: {s:?}");
        assert!(s[2] >= 0.0 && s[2] < 1e-30, "{who}: {s:?}");
        assert_eq!((u[1], u[3]), (f32::INFINITY, 0.0), "{who}: {u:?}");
        assert!(s[4] >= 0.0 && s[4] < 1e-30 && s[5] == 1.0, "{who}: {s:?}");
    };
    for (who, s, u) in sigmoid_silu_runs(&xs) {
        check(who, &s, &u);
    }
}
