//! The convolution's SIMD kernels against f64 on random inputs: the implicit GEMM
//! (`matmul_kn_rows`, patch rows at arbitrary offsets) and the depthwise taps (planar and
//! channels-innermost), through the dispatch and every ISA's entry point this CPU supports.

use crate::common_simd::isas;
use kestrel_rt_cpu::kernels::simd::{self, Isa};
use kestrel_rt_reference::tolerance::{assert_close, F32_APPROX};
use proptest::prelude::*;

/// [`simd::matmul_kn_rows`] for `isa` through its entry point (None: not available here).
#[cfg(target_arch = "x86_64")]
fn simd_matmul_kn_rows(isa: Isa, p: &simd::KnRows<'_>) -> Option<Vec<f32>> {
    let mut y = vec![f32::NAN; p.m * p.n];
    match isa {
        // SAFETY: only called for supported ISAs.
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { simd::x86::matmul_kn_rows(p, &mut y, p.n) },
        // SAFETY: only called for supported ISAs.
        Isa::Avx512 => unsafe { simd::x86::matmul_kn_rows_avx512(p, &mut y, p.n) },
        _ => return None,
    }
    Some(y)
}

#[cfg(not(target_arch = "x86_64"))]
fn simd_matmul_kn_rows(_: Isa, _: &simd::KnRows<'_>) -> Option<Vec<f32>> {
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The implicit GEMM (a convolution's patches read in place): rows of `B` at arbitrary,
    /// overlapping offsets into one buffer, with the same tile, tail and depth coverage as
    /// `matmul_kn_matches_f64`; up to five row tiles and a remainder (each whole tile prefetches
    /// the next one's rows of `a`, the last the next panel's or block's first), up to three
    /// blocks of depth, and columns across several of the chunks a block is walked in (a
    /// 256-deep block: 64 columns a chunk, the last one partial).
    #[test]
    fn matmul_kn_rows_matches_f64(
        (m, n, k, a, b, offs) in (1usize..44, prop_oneof![1usize..70, 120usize..300], prop_oneof![0usize..40, 250usize..300, 505usize..530], 0usize..50)
            .prop_flat_map(|(m, n, k, extra)| (
                Just(m), Just(n), Just(k),
                proptest::collection::vec(-1.0f32..1.0, m * k),
                proptest::collection::vec(-2.0f32..2.0, n + extra),
                proptest::collection::vec(0usize..=extra, k),
            ))
    ) {
        let want: Vec<f64> = (0..m * n)
            .map(|i| (0..k).map(|j| f64::from(a[(i / n) * k + j]) * f64::from(b[offs[j] + i % n])).sum())
            .collect();
        let mut y = vec![f32::NAN; m * n];
        simd::matmul_kn_rows(&a, m, k, &b, &|kk| offs[kk], n, &mut y, n);
        assert_close("matmul_kn_rows (dispatched)", &y, &want, F32_APPROX);
        let p = simd::KnRows { m, whole_m: m, k, n, a: &a, b: &b, rows: &|kk: usize| offs[kk] };
        for isa in isas() {
            if let Some(got) = simd_matmul_kn_rows(isa, &p) {
                assert_close(&format!("{} matmul_kn_rows", isa.name()), &got, &want, F32_APPROX);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The packed-weights GEMM (x86: products of at least 128 columns, 128 deep and 32 rows,
    /// `gemm_pa.rs`), through `matmul_kn_rows` and `matmul_kn`: several 64-row groups of packed
    /// weights with a partial last group and a partial last tile (of 8 rows on AVX-512, 6 on
    /// AVX2), depths of one block whose last 8-column step is partial (128–139) to three blocks
    /// (each not a multiple of 8), and below the threshold (1–19: the row-major kernels), columns
    /// across several 32-column panels with a partial last one; rows of `B` at arbitrary offsets.
    #[test]
    fn packed_weight_gemm_matches_f64(
        (m, n, k, a, b, offs) in (60usize..140, 128usize..200, prop_oneof![1usize..20, 128usize..140, 180usize..200, 380usize..400], 0usize..40)
            .prop_flat_map(|(m, n, k, extra)| (
                Just(m), Just(n), Just(k),
                proptest::collection::vec(-1.0f32..1.0, m * k),
                proptest::collection::vec(-2.0f32..2.0, (n + extra).max(k * n)),
                proptest::collection::vec(0usize..=extra, k),
            ))
    ) {
        let want: Vec<f64> = (0..m * n)
            .map(|i| (0..k).map(|j| f64::from(a[(i / n) * k + j]) * f64::from(b[offs[j] + i % n])).sum())
            .collect();
        let p = simd::KnRows { m, whole_m: m, k, n, a: &a, b: &b, rows: &|kk: usize| offs[kk] };
        let mut y = vec![f32::NAN; m * n];
        simd::matmul_kn_rows(&a, m, k, &b, &|kk| offs[kk], n, &mut y, n);
        assert_close("packed matmul_kn_rows (dispatched)", &y, &want, F32_APPROX);
        for isa in isas() {
            if let Some(got) = simd_matmul_kn_rows(isa, &p) {
                assert_close(&format!("{} packed matmul_kn_rows", isa.name()), &got, &want, F32_APPROX);
            }
        }
        // Row-major B (a 1×1 convolution's input), into rows of a wider y.
        let want: Vec<f64> = (0..m * n)
            .map(|i| (0..k).map(|j| f64::from(a[(i / n) * k + j]) * f64::from(b[j * n + i % n])).sum())
            .collect();
        let ldy = n + 3;
        let mut y = vec![f32::NAN; m * ldy];
        simd::matmul_kn(&a, m, k, &b[..k * n], n, &mut y, ldy);
        let got: Vec<f32> = y.chunks(ldy).flat_map(|r| r[..n].to_vec()).collect();
        assert_close("packed matmul_kn (dispatched)", &got, &want, F32_APPROX);
        assert!(y.chunks(ldy).all(|r| r[n..].iter().all(|v| v.is_nan())), "matmul_kn wrote past n in a row of y");
    }
}

/// The planar depthwise taps' signature (`w, off, src, acc`).
type TapsFn = unsafe fn(&[f32], &[usize], &[f32], &mut [f32]);
/// The channels-innermost depthwise convolution's signature (`geometry, w, x, y`).
type TapsClFn = unsafe fn(&simd::ClTaps<'_>, &[f32], &[f32], &mut [f32]);

/// `isa`'s depthwise entry points.
#[cfg(target_arch = "x86_64")]
fn depthwise(isa: Isa) -> (TapsFn, TapsClFn) {
    if isa == Isa::Avx512 {
        (simd::x86::taps_avx512, simd::x86::taps_cl_avx512)
    } else {
        (simd::x86::taps, simd::x86::taps_cl)
    }
}

/// The dispatched depthwise kernels (no per-ISA entry points off x86).
#[cfg(not(target_arch = "x86_64"))]
fn depthwise(_: Isa) -> (TapsFn, TapsClFn) {
    (simd::taps, simd::taps_cl)
}

/// `run(None, y)` (the dispatch) and `run(Some(isa), y)` for every ISA this CPU supports, each
/// into a NaN-filled buffer as long as `want`, against `want`.
fn check_every_isa(what: &str, want: &[f64], run: impl Fn(Option<Isa>, &mut [f32])) {
    let mut got = vec![f32::NAN; want.len()];
    run(None, &mut got);
    assert_close(&format!("{what} (dispatched)"), &got, want, F32_APPROX);
    for isa in isas() {
        let mut got = vec![f32::NAN; want.len()];
        run(Some(isa), &mut got);
        assert_close(&format!("{} {what}", isa.name()), &got, want, F32_APPROX);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The depthwise taps kernel (`acc[j] = Σ_t w[t]·src[off[t] + j]`) of every ISA against f64:
    /// up to a 7×7 kernel's 49 taps, lengths around the 4-vector blocks and scalar tails.
    #[test]
    fn taps_match_f64(
        (w, off, src, n) in (1usize..50, 0usize..150, 0usize..40).prop_flat_map(|(taps, n, extra)| (
            proptest::collection::vec(-1.0f32..1.0, taps),
            proptest::collection::vec(0usize..=extra, taps),
            proptest::collection::vec(-2.0f32..2.0, n + extra),
            Just(n),
        ))
    ) {
        let want: Vec<f64> =
            (0..n).map(|j| w.iter().zip(&off).map(|(&wv, &o)| f64::from(wv) * f64::from(src[o + j])).sum()).collect();
        check_every_isa("taps", &want, |isa, got| match isa {
            None => simd::taps(&w, &off, &src, got),
            // SAFETY: supported ISAs only.
            Some(isa) => unsafe { depthwise(isa).0(&w, &off, &src, got) },
        });
    }
}

/// The row-by-row depthwise taps' signature (`w, off, src, ld, bias, ow, y`).
type TapsRowsFn = unsafe fn(&[f32], &[usize], &[f32], usize, f32, usize, &mut [f32]);

/// `isa`'s row-by-row depthwise taps.
#[cfg(target_arch = "x86_64")]
fn taps_rows_of(isa: Isa) -> TapsRowsFn {
    if isa == Isa::Avx512 {
        simd::x86::taps_rows_avx512
    } else {
        simd::x86::taps_rows
    }
}

/// The dispatched kernel (no per-ISA entry points off x86).
#[cfg(not(target_arch = "x86_64"))]
fn taps_rows_of(_: Isa) -> TapsRowsFn {
    simd::taps_rows
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The depthwise taps written row by row into an output plane (`y[r·ow + j] = Σ_t
    /// w[t]·src[off[t] + r·ld + j] + bias`) against f64, and bit for bit against the same ISA's
    /// accumulator path it replaces (taps over `rows · ld`, the bias added when non-zero, each
    /// row's first `ow` copied): up to 49 taps, rows narrower than a vector, around the 4-vector
    /// blocks and with a partial last vector, rows 0–7 apart beyond their width, zero and
    /// non-zero biases.
    #[test]
    fn taps_rows_match_f64_and_the_accumulator_path(
        (w, off, src, ow, rows, ld, bias) in (1usize..50, 1usize..80, 1usize..5, 0usize..8, 0usize..30, any::<bool>())
            .prop_flat_map(|(taps, ow, rows, pad, extra, zero_bias)| (
                proptest::collection::vec(-1.0f32..1.0, taps),
                proptest::collection::vec(0usize..=extra, taps),
                proptest::collection::vec(-2.0f32..2.0, extra + rows * (ow + pad)),
                Just(ow),
                Just(rows),
                Just(ow + pad),
                if zero_bias { Just(0.0f32).boxed() } else { (-1.0f32..1.0).boxed() },
            ))
    ) {
        let want: Vec<f64> = (0..rows * ow)
            .map(|i| {
                let (r, j) = (i / ow, i % ow);
                let s: f64 = w.iter().zip(&off).map(|(&wv, &o)| f64::from(wv) * f64::from(src[o + r * ld + j])).sum();
                s + f64::from(bias)
            })
            .collect();
        check_every_isa("taps_rows", &want, |isa, got| match isa {
            None => simd::taps_rows(&w, &off, &src, ld, bias, ow, got),
            // SAFETY: supported ISAs only.
            Some(isa) => unsafe { taps_rows_of(isa)(&w, &off, &src, ld, bias, ow, got) },
        });
        // The accumulator path, bit for bit.
        let run = |isa: Option<Isa>| {
            let (mut acc, mut rowwise) = (vec![f32::NAN; rows * ld], vec![f32::NAN; rows * ow]);
            match isa {
                None => {
                    simd::taps(&w, &off, &src, &mut acc);
                    simd::taps_rows(&w, &off, &src, ld, bias, ow, &mut rowwise);
                }
                // SAFETY: supported ISAs only.
                Some(isa) => unsafe {
                    depthwise(isa).0(&w, &off, &src, &mut acc);
                    taps_rows_of(isa)(&w, &off, &src, ld, bias, ow, &mut rowwise);
                },
            }
            if bias != 0.0 {
                acc.iter_mut().for_each(|a| *a += bias);
            }
            let copied: Vec<u32> = acc.chunks_exact(ld).flat_map(|r| r[..ow].iter().map(|v| v.to_bits())).collect();
            let bits: Vec<u32> = rowwise.iter().map(|v| v.to_bits()).collect();
            assert_eq!(bits, copied, "{:?}: taps_rows against the accumulator path", isa.map(|i| i.name()));
        };
        run(None);
        for isa in isas() {
            run(Some(isa));
        }
    }
}

/// A row-by-row tap reading past its source, or rows closer than their width, is refused.
#[test]
#[should_panic(expected = "taps_rows")]
fn taps_rows_checks_bounds() {
    let (w, off, src) = ([1.0f32; 2], [0usize, 3], vec![1.0f32; 20]);
    let mut y = vec![0.0f32; 2 * 8];
    // Row 1 of tap 1 reads 3 + 9 + 8 = 20 — the last element is 19: fine; ld = 10 reads 21.
    simd::taps_rows(&w, &off, &src, 10, 0.0, 8, &mut y);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The channels-innermost depthwise convolution (`y[px·C + c] = Σ_t w[t·C + c]·x[origin(px) +
    /// off[t] + c]` over a padded `[Hp, Wp, C]` input) of every ISA against f64: kernels up to
    /// 5×5 with strides and dilations up to 2, rows of 1–21 pixels (whole and partial blocks of
    /// eight), channel counts below one vector, whole vectors and an overlapping last vector.
    #[test]
    fn taps_cl_match_f64(
        (c, oh, ow, [kh, kw], [sh, sw], [dh, dw], seed) in (
            1usize..40, 1usize..4, 1usize..22, [1usize..6, 1usize..6], [1usize..3, 1usize..3], [1usize..3, 1usize..3], any::<u64>(),
        )
    ) {
        let (hp, wp) = ((oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1);
        let mut rng = seed | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        };
        let taps = kh * kw;
        let w: Vec<f32> = (0..taps * c).map(|_| next()).collect();
        let x: Vec<f32> = (0..hp * wp * c).map(|_| 2.0 * next()).collect();
        let off: Vec<usize> = (0..taps).map(|t| ((t / kw) * dh * wp + (t % kw) * dw) * c).collect();
        let g = simd::ClTaps { c, oh, ow, row: sh * wp * c, col: sw * c, off: &off };
        let want: Vec<f64> = (0..oh * ow * c)
            .map(|i| {
                let (px, j) = (i / c, i % c);
                let o = (px / ow) * g.row + (px % ow) * g.col;
                off.iter().enumerate().map(|(t, &ot)| f64::from(w[t * c + j]) * f64::from(x[o + ot + j])).sum()
            })
            .collect();
        check_every_isa("taps_cl", &want, |isa, got| match isa {
            None => simd::taps_cl(&g, &w, &x, got),
            // SAFETY: supported ISAs only.
            Some(isa) => unsafe { depthwise(isa).1(&g, &w, &x, got) },
        });
    }
}

/// A channels-innermost tap reading past its input is refused (a panic, never a read outside).
#[test]
#[should_panic(expected = "taps_cl")]
fn taps_cl_checks_bounds() {
    let (w, x) = (vec![1.0f32; 2 * 8], vec![1.0f32; 3 * 8]);
    let mut y = vec![0.0f32; 2 * 8];
    // Pixel 1's second tap reads from 8 + 16 = 24: past the 24 elements.
    let g = simd::ClTaps { c: 8, oh: 1, ow: 2, row: 0, col: 8, off: &[0, 16] };
    simd::taps_cl(&g, &w, &x, &mut y);
}

/// A row of the implicit `B` that would run past the buffer is refused (a panic, never a read
/// outside it).
#[test]
#[should_panic(expected = "outside")]
fn matmul_kn_rows_checks_row_bounds() {
    let (a, b) = (vec![1.0f32; 4 * 3], vec![1.0f32; 40]);
    let mut y = vec![0.0f32; 4 * 33];
    // Row 2 starts at 8: 8 + 33 > 40.
    simd::matmul_kn_rows(&a, 4, 3, &b, &|kk| kk * 4, 33, &mut y, 33);
}

/// A row of `B` past `b` in the packed-weights GEMM (128 columns, 128 deep, 32 rows): a panic
/// naming it, before anything is read.
#[test]
#[should_panic(expected = "outside")]
fn packed_weight_gemm_checks_row_bounds() {
    let (m, k, n) = (32usize, 128usize, 128usize);
    let (a, b) = (vec![1.0f32; m * k], vec![1.0f32; k * n]);
    let mut y = vec![0.0f32; m * n];
    // The last row starts at 127 · 128 + 1: one element past b.
    simd::matmul_kn_rows(&a, m, k, &b, &|kk| kk * n + usize::from(kk == k - 1), n, &mut y, n);
}

/// The implicit GEMM with weights of at least `PF_MIN_A` elements (the path whose whole tiles
/// prefetch the next tile's weights): 65 tiles of 8 rows and a remainder of 5, three depth
/// blocks, full column panels and a tail, rows of `B` at arbitrary offsets; every ISA here.
#[test]
fn matmul_kn_rows_large_a_matches_f64() {
    let (m, k, n, extra) = (525usize, 515usize, 45usize, 61usize);
    let mut s = 7u32;
    let mut next = move || {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        f64::from(s >> 8) / f64::from(1u32 << 24) * 2.0 - 1.0
    };
    let a: Vec<f32> = (0..m * k).map(|_| next() as f32).collect();
    let b: Vec<f32> = (0..n + extra).map(|_| next() as f32).collect();
    let offs: Vec<usize> = (0..k).map(|j| (j * 37 + j / 3) % (extra + 1)).collect();
    let want: Vec<f64> = (0..m * n)
        .map(|i| (0..k).map(|j| f64::from(a[(i / n) * k + j]) * f64::from(b[offs[j] + i % n])).sum())
        .collect();
    let mut y = vec![f32::NAN; m * n];
    simd::matmul_kn_rows(&a, m, k, &b, &|kk| offs[kk], n, &mut y, n);
    assert_close("matmul_kn_rows large a (dispatched)", &y, &want, F32_APPROX);
    let p = simd::KnRows { m, whole_m: m, k, n, a: &a, b: &b, rows: &|kk: usize| offs[kk] };
    for isa in isas() {
        if let Some(got) = simd_matmul_kn_rows(isa, &p) {
            assert_close(&format!("{} matmul_kn_rows large a", isa.name()), &got, &want, F32_APPROX);
        }
    }
}
