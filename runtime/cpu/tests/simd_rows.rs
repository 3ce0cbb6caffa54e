//! The row kernels of `kestrel_rt_cpu::kernels::simd` (the per-row int8 quantiser of the attention
//! internals, the strided transpose, AFT-local's window weights and weighted row sums): the
//! dispatched kernel against the portable loop or f64, on random inputs.

use kestrel_rt_cpu::kernels::simd;
use proptest::prelude::*;

proptest! {
    /// The per-row int8 quantiser of the attention internals: the dispatched kernel equals the
    /// portable loop (bytes and scales), every byte within ±127 and within half a step of
    /// `x / scale`; a row with ∞ or NaN is refused by both.
    #[test]
    fn quantize_rows_i8_matches_the_portable_loop(
        rows in 1usize..6,
        cols in 1usize..90,
        stride_pad in 0usize..5,
        seed: u64,
        zero_row in any::<bool>(),
        bad in prop_oneof![Just(0.0f32), Just(f32::NAN), Just(f32::INFINITY)],
    ) {
        let stride = cols + stride_pad;
        let mut s = seed | 1;
        let mut x: Vec<f32> = (0..rows * stride).map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * 3.0
        }).collect();
        if zero_row {
            x[..cols].fill(0.0);
        }
        let (mut q, mut sc) = (vec![0i8; rows * cols], vec![0f32; rows]);
        let (mut q2, mut sc2) = (vec![0i8; rows * cols], vec![0f32; rows]);
        let src = simd::StridedRows { src: &x, rows, cols, stride };
        let ok = simd::quantize_rows_i8(src, &mut q, &mut sc);
        let ok2 = simd::quantize_rows_i8_scalar(src, &mut q2, &mut sc2);
        prop_assert!(ok && ok2);
        prop_assert_eq!(&q, &q2);
        prop_assert_eq!(&sc, &sc2);
        for r in 0..rows {
            for c in 0..cols {
                let want = if sc[r] > 0.0 { f64::from(x[r * stride + c]) / f64::from(sc[r]) } else { 0.0 };
                prop_assert!((f64::from(q[r * cols + c]) - want).abs() <= 0.5 + 1e-4);
            }
        }
        if bad != 0.0 {
            x[(rows - 1) * stride + cols - 1] = bad;
            let src = simd::StridedRows { src: &x, rows, cols, stride };
            prop_assert!(!simd::quantize_rows_i8(src, &mut q, &mut sc));
            prop_assert!(!simd::quantize_rows_i8_scalar(src, &mut q2, &mut sc2));
        }
    }
}

proptest! {
    /// The strided 2-D transpose (16 × 16 register blocks on AVX-512) equals the element loop,
    /// across whole and partial blocks, and leaves the rest of `dst` untouched.
    #[test]
    fn transpose_f32_matches_the_element_loop(rows in 0usize..40, cols in 0usize..40, pad in 0usize..3, seed: u64) {
        let (ld_src, ld_dst) = (cols + pad, rows + pad);
        let src: Vec<f32> = (0..rows * ld_src).map(|i| (i as u64 ^ seed) as f32).collect();
        let mut got = vec![-1.0f32; cols.max(1) * ld_dst];
        let mut want = got.clone();
        simd::transpose_f32(&src, rows, cols, ld_src, &mut got, ld_dst);
        for r in 0..rows {
            for c in 0..cols {
                want[c * ld_dst + r] = src[r * ld_src + c];
            }
        }
        prop_assert_eq!(got, want);
    }
}

proptest! {
    /// AFT-local's window weights `exp(w − m) − exp(−m)` (`m ≥ max(w, 0)`) from the dispatched
    /// kernel against f64 (`exp(−m) · expm1(w)`), within 2e-6 relative: across the polynomial's
    /// `|w| < 0.5` and the exponentials' difference beyond it, tiny weights included.
    #[test]
    fn exp_excess_matches_f64(
        w in proptest::collection::vec(prop_oneof![-6.0f32..6.0, -0.6f32..0.6, -1e-3f32..1e-3], 1..40),
        extra in prop_oneof![Just(0.0f32), 0.0f32..0.5, 0.0f32..20.0],
    ) {
        let m = w.iter().fold(0.0f32, |m, &v| m.max(v)) + extra;
        let mut got = w.clone();
        simd::exp_excess(&mut got, m);
        for (&g, &x) in got.iter().zip(&w) {
            let want = (-f64::from(m)).exp() * f64::from(x).exp_m1();
            prop_assert!((f64::from(g) - want).abs() <= 2e-6 * want.abs() + 1e-40, "w {x} m {m}: {g} vs {want}");
            prop_assert_eq!(g.is_sign_negative() && g != 0.0, x < 0.0 && g != 0.0);
        }
        // The scalar reference agrees at the same bar.
        for &x in &w {
            let want = (-f64::from(m)).exp() * f64::from(x).exp_m1();
            let s = kestrel_rt_cpu::math::exp_excess(x, m);
            prop_assert!((f64::from(s) - want).abs() <= 2e-6 * want.abs() + 1e-40);
        }
    }
}

proptest! {
    /// The weighted sum of rows (`y += Σ_j a_j · x_j`, AFT-local's window) against f64, across
    /// 64-column blocks and their masked tails.
    #[test]
    fn axpy_rows_matches_f64(d in 1usize..150, n in 0usize..20, seed: u64) {
        let mut s = seed | 1;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        let y0: Vec<f32> = (0..d).map(|_| next()).collect();
        let a: Vec<f32> = (0..n).map(|_| next()).collect();
        let x: Vec<f32> = (0..n * d).map(|_| next()).collect();
        let mut y = y0.clone();
        simd::axpy_rows(&mut y, &a, &x);
        for c in 0..d {
            let want = f64::from(y0[c]) + (0..n).map(|j| f64::from(a[j]) * f64::from(x[j * d + c])).sum::<f64>();
            let mag = f64::from(y0[c].abs()) + (0..n).map(|j| f64::from((a[j] * x[j * d + c]).abs())).sum::<f64>();
            prop_assert!((f64::from(y[c]) - want).abs() <= 1e-6 * mag + 1e-30, "col {c}: {} vs {want}", y[c]);
        }
    }
}
