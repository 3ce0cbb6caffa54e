//! Property tests of the pooling kernel against the f64 reference
//! (`kestrel_rt_reference::layers::pool2d`), and its geometry checks. Besides the small random
//! windows and the fixed cases shared with `layers.rs`: the whole window space (max and both
//! average divisors; kernels, strides and dilations; asymmetric padding, after the input up to
//! past the window's extent; ONNX ceil mode's extra padding after; 1-D as height 1 or width 1,
//! and 2-D; extents from one to thousands, kernels beyond the 121 taps whose phase offsets are
//! tabled), every geometry through each of its paths (`pool2d_path`: the row loops with the
//! minimal scratch, then the planner's) and each build of the loops this CPU runs (portable,
//! AVX2, AVX-512, called directly, and the dispatch); and issue 33's 1-D pool.

use crate::common_layers::cases::*;
use crate::common_layers::*;
use kestrel_rt_cpu::error::ShapeError;
use kestrel_rt_cpu::kernels::pool::{
    pool2d, pool2d_on, pool2d_path, pool2d_scratch, pool2d_scratch_fast, Pool2dParams, PoolPath,
};
use kestrel_rt_cpu::kernels::simd::{self, Isa};
use kestrel_rt_format::ops::PoolKind;
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::layers as r;
use kestrel_rt_reference::testing::{pool_fn, Rng};
use kestrel_rt_reference::tolerance::{compare, EXACT};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::Once;

// ---------------------------------------------------------------- pool2d

/// The builds of the pooling loops this CPU runs, called directly through `pool2d_on`: the
/// portable one (`Isa::Scalar`) always, the AVX2 and AVX-512 ones where the CPU has them, NEON
/// on aarch64 (each with its `simd::pool_taps`; a missing one is said once on stderr: its loops
/// are then not run here).
fn tiers() -> Vec<Isa> {
    static SAID: Once = Once::new();
    #[cfg(target_arch = "aarch64")]
    let all = [Isa::Scalar, Isa::Neon];
    #[cfg(not(target_arch = "aarch64"))]
    let all = [Isa::Scalar, Isa::Avx2, Isa::Avx512];
    let (run, missing): (Vec<Isa>, Vec<Isa>) = all.into_iter().partition(|i| i.supported());
    if !missing.is_empty() {
        SAID.call_once(|| {
            let names: Vec<_> = missing.iter().map(|i| i.name()).collect();
            eprintln!("pool2d: this CPU lacks {names:?}; those builds of the pooling loops are not run here");
        });
    }
    run
}

/// Runs [`pool2d`] on one geometry for max and both average divisors against the reference,
/// with the minimal scratch (the row loops) and the planner's (max pools: the stride phases),
/// through the dispatch and through every build in [`tiers`]: max is exact (it selects an
/// input), an average sums, so it takes `F32_KERNEL` with the floor from the same pool of |x|
/// (as [`assert_close_dot`]). Returns the paths taken, or `None` if the geometry has a window
/// wholly in the padding (rejected by `Pool2dParams::new`; see `pool2d_rejects_empty_windows`).
fn check_pool2d(what: &str, case: PoolCase, xs: &[f32]) -> Option<BTreeSet<PoolPath>> {
    let (c, h, w, kernel, stride, pad, dilation) = case;
    let x = &xs[..c * h * w];
    let spec = r::PoolSpec { kernel, stride, pad, dilation };
    let mut paths = BTreeSet::new();
    for (kind, cip) in [(PoolKind::Max, false), (PoolKind::Avg, false), (PoolKind::Avg, true)] {
        let p = match Pool2dParams::new(kind, &shape(&[c, h, w]), kernel, stride, pad, dilation, cip) {
            Ok(p) => p,
            Err(ShapeError::Invalid { what: "a pooling window lies entirely in the padding", .. }) => return None,
            Err(e) => panic!("{what}: {e}"),
        };
        let reference = |x: &[f32]| {
            let (want, oh, ow) = r::pool2d(&f64s(x), [c, h, w], pool_fn(kind, cip), spec);
            assert_eq!((p.oh, p.ow), (oh, ow), "{what}");
            want
        };
        let want = reference(x);
        assert_eq!(p.y_shape(), Some(shape(&[c, p.oh, p.ow])));
        let mag = (kind == PoolKind::Avg).then(|| (abs(x), reference(&abs(x))));
        for n in [pool2d_scratch(&p), pool2d_scratch_fast(&p)] {
            let path = pool2d_path(&p, n);
            paths.insert(path);
            // `None`: the dispatch.
            for tier in std::iter::once(None).chain(tiers().into_iter().map(Some)) {
                let run = |x: &[f32]| {
                    let mut y = out(c * p.oh * p.ow);
                    match tier {
                        None => pool2d(&p, x, &mut y, &mut scratch(n)),
                        Some(isa) => pool2d_on(isa, &p, x, &mut y, &mut scratch(n)),
                    }
                    y
                };
                let who = tier.map_or("dispatched", |i| i.name());
                let label = format!("pool2d {what} {kind:?} count_include_pad {cip} {path:?} {who}");
                let y = run(x);
                match &mag {
                    None => assert_close(&label, &y, &want, EXACT),
                    Some((xa, mag_want)) => assert_close_dot(&label, &y, &want, &run(xa), mag_want),
                }
            }
        }
    }
    Some(paths)
}

// ---------------------------------------------------------------- pool2d

proptest! {
    #![proptest_config(config())]

    #[test]
    fn pool2d_matches_reference((case, xs) in pool_case()) {
        let hit = check_pool2d(&format!("{case:?}"), case, &xs).is_some();
        prop_assume!(hit);
    }

    /// NaN inputs: a max pool passes over them (the reference's `f64::max` from −∞: a window
    /// of NaN alone gives −∞), a mean propagates them, on every path and build (the phase path's
    /// SIMD selects included).
    #[test]
    fn pool2d_nan_inputs_match_reference(
        (case, xs, nan) in pool_case().prop_flat_map(|(case, xs)| {
            let n = xs.len();
            (Just(case), Just(xs), proptest::collection::vec(proptest::bool::weighted(0.2), n))
        })
    ) {
        let xs: Vec<f32> = xs.iter().zip(&nan).map(|(&v, &n)| if n { f32::NAN } else { v }).collect();
        let hit = check_pool2d(&format!("NaN {case:?}"), case, &xs).is_some();
        prop_assume!(hit);
    }

    #[test]
    fn pool2d_fixed_cases_match_reference(xs in vals(2 * 12 * 40)) {
        // Every fixed case on each draw (none may go untested by chance).
        for (case, &geometry) in POOL_CASES.iter().enumerate() {
            let hit = check_pool2d(&format!("case {case}"), geometry, &xs).is_some();
            prop_assert!(hit, "fixed case {} has an empty window", case);
        }
    }
}

/// `Pool2dParams::new` rejects exactly the geometries with a window that holds no input element
/// (brute force over small ones, dilation wider than the input included).
#[test]
fn pool2d_rejects_empty_windows() {
    let mut rejected = 0;
    for (len, k, s, d, p0, p1) in small_pool_geometries() {
        let Some(span) = d.checked_mul(k - 1).map(|v| v + 1) else { continue };
        if len + p0 + p1 < span {
            continue;
        }
        let out = (len + p0 + p1 - span) / s + 1;
        let empty = (0..out).any(|o| (0..k).all(|u| !(p0..p0 + len).contains(&(o * s + u * d))));
        let r = Pool2dParams::new(PoolKind::Max, &shape(&[1, 1, len]), [1, k], [1, s], [0, p0, 0, p1], [1, d], false);
        assert_eq!(r.is_err(), empty, "len {len} k {k} s {s} d {d} pad {p0},{p1}: {r:?}");
        rejected += usize::from(empty);
    }
    assert!(rejected > 0);
}

fn small_pool_geometries() -> Vec<(usize, usize, usize, usize, usize, usize)> {
    let mut v = Vec::new();
    for len in 1..6 {
        for k in 1..4 {
            for s in 1..4 {
                for d in 1..5 {
                    for p0 in 0..6 {
                        for p1 in 0..6 {
                            v.push((len, k, s, d, p0, p1));
                        }
                    }
                }
            }
        }
    }
    v
}

#[test]
fn pool2d_check_rejects_bad_geometry() {
    let new = |x: &[usize], k: [usize; 2], s: [usize; 2], pad, kind, cip| {
        Pool2dParams::new(kind, &shape(x), k, s, pad, [1, 1], cip)
    };
    let z = [0usize; 4];
    let (max, avg) = (PoolKind::Max, PoolKind::Avg);
    assert!(matches!(
        new(&[2, 5], [2, 2], [1, 1], z, max, false),
        Err(ShapeError::Mismatch { expected: 3, found: 2, .. })
    ));
    assert!(matches!(new(&[1, 5, 5], [0, 2], [1, 1], z, max, false), Err(ShapeError::Invalid { .. })));
    assert!(matches!(new(&[1, 5, 5], [2, 2], [1, 0], z, avg, false), Err(ShapeError::Invalid { .. })));
    assert!(matches!(new(&[1, 5, 5], [2, 2], [1, 1], z, max, true), Err(ShapeError::Invalid { .. })));
    assert!(matches!(
        new(&[1, 2, 5], [3, 3], [1, 1], z, avg, true),
        Err(ShapeError::Invalid { what: "output height would be < 1", .. })
    ));
    assert!(matches!(
        new(&[1, 5, 2], [3, 3], [1, 1], z, avg, false),
        Err(ShapeError::Invalid { what: "output width would be < 1", .. })
    ));
    assert!(matches!(
        new(&[1, 4, 4], [2, 2], [1, 1], [2, 0, 0, 0], max, false),
        Err(ShapeError::Invalid { what: "a pooling window lies entirely in the padding", .. })
    ));
    let p = new(&[3, 9, 10], [3, 3], [2, 2], [1, 1, 1, 1], avg, true).unwrap();
    assert_eq!((p.oh, p.ow), (5, 5));
    assert_eq!(p.inner, [1, 5]);
}

// ---------------------------------------------------------------- the window space

/// One axis of a window: `[input length, kernel, stride, dilation, pad before, pad after]`.
type Axis = [usize; 6];

/// The unit axis of a 1-D pool (what the converter gives a 1-D pool as its height).
const UNIT: Axis = [1, 1, 1, 1, 0, 0];

/// ONNX ceil mode's output length along an axis (a last window starting past the input and the
/// padding before it dropped, as tract and ONNX Runtime do), and the padding after that the
/// converter adds so that the floor length of `Pool2d` equals it.
fn ceil_extra([len, k, s, d, p0, p1]: Axis) -> usize {
    let (span, padded) = (d * (k - 1) + 1, len + p0 + p1);
    let mut out = (padded - span).div_ceil(s) + 1;
    if (out - 1) * s >= len + p0 {
        out -= 1;
    }
    ((out - 1) * s + span).saturating_sub(padded)
}

/// An axis of length in `len`, kernel in `k`, stride in `s`, dilation in `d`: padding before
/// below the window's extent (a first window in the padding only is empty), padding after up to
/// the extent plus a stride (past the extent, the last window still reaches the input when the
/// stride is long), at least enough for one window; ONNX ceil mode's extra padding after on a
/// coin flip.
fn axis(
    len: std::ops::Range<usize>,
    k: std::ops::Range<usize>,
    s: std::ops::Range<usize>,
    d: std::ops::Range<usize>,
) -> impl Strategy<Value = Axis> {
    (len, k, s, d, any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(len, k, s, d, r0, r1, ceil)| {
        let span = d * (k - 1) + 1;
        let p0 = r0 as usize % span;
        let p1 = (r1 as usize % (span + s)).max(span.saturating_sub(len + p0));
        let a = [len, k, s, d, p0, p1];
        if ceil {
            [len, k, s, d, p0, p1 + ceil_extra(a)]
        } else {
            a
        }
    })
}

/// A geometry from its channels and two axes (height, width).
fn geometry(c: usize, [h, kh, sh, dh, pt, pb]: Axis, [w, kw, sw, dw, pl, pr]: Axis) -> PoolCase {
    (c, h, w, [kh, kw], [sh, sw], [pt, pl, pb, pr], [dh, dw])
}

/// Whether `Pool2dParams` takes the geometry (every window holds an input element).
fn accepted(g: &PoolCase) -> bool {
    let &(c, h, w, kernel, stride, pad, dilation) = g;
    Pool2dParams::new(PoolKind::Max, &shape(&[c, h, w]), kernel, stride, pad, dilation, false).is_ok()
}

/// The window space: small 2-D windows; 1-D pools thousands long as height 1 (the converter's
/// form) and as width 1, kernels up to 259 taps, strides and dilations up to 12; 2-D kernels up
/// to 13×13 (beyond the 121 tabled tap offsets); a few rows thousands wide. With a seed for the
/// input values.
fn window_case() -> impl Strategy<Value = (PoolCase, u64)> {
    prop_oneof![
        (1usize..4, axis(1..12, 1..5, 1..4, 1..4), axis(1..12, 1..5, 1..4, 1..4)),
        (1usize..3, Just(UNIT), axis(1000..6000, 1..260, 1..13, 1..13)),
        (1usize..3, axis(1000..6000, 1..260, 1..13, 1..13), Just(UNIT)),
        (1usize..3, axis(8..48, 1..14, 1..5, 1..4), axis(8..160, 1..14, 1..5, 1..4)),
        (1usize..3, axis(1..6, 1..4, 1..3, 1..3), axis(500..3000, 1..64, 1..9, 1..9)),
    ]
    .prop_map(|(c, ah, aw)| geometry(c, ah, aw))
    .prop_filter("a window in the padding only", accepted)
    .prop_flat_map(|g| (Just(g), any::<u64>()))
}

/// `n` non-zero values (magnitudes in [0.1, 2)) from `seed`.
fn seeded(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.nz(2.0)).collect()
}

/// 256 cases (64 on aarch64) unless `PROPTEST_CASES` asks for another count. The walk over the
/// geometry space (paths, padding, phases) is the same code on every architecture and the x86 run
/// takes its 256; aarch64 runs the NEON taps on a quarter of them, because CI runs it under QEMU,
/// where the 256 took 141 s of the CPU suite's 296 (one thread), the suite's longest test by 5×.
fn window_config() -> ProptestConfig {
    let default = if cfg!(target_arch = "aarch64") { 64 } else { 256 };
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(window_config())]

    #[test]
    fn pool2d_window_space_matches_reference((case, seed) in window_case()) {
        let (c, h, w, ..) = case;
        let hit = check_pool2d(&format!("{case:?}"), case, &seeded(c * h * w, seed));
        prop_assert!(hit.is_some(), "accepted geometry rejected: {:?}", case);
    }
}

/// Geometries reaching each path and feature on purpose (the random ones reach them by chance),
/// each asserted to take the paths it is here for.
#[test]
fn pool2d_paths_match_reference() {
    use PoolPath::*;
    // (what, geometry, the paths of its max pool with the minimal and the planner's scratch)
    let cases: &[(&str, PoolCase, [PoolPath; 2])] = &[
        ("1-d separable, 7 taps, stride 3", (2, 1, 4099, [1, 7], [1, 3], [0, 3, 0, 5], [1, 2]), [Rows, Separable]),
        (
            "1-d separable, 122 taps, stride 2",
            (1, 1, 3001, [1, 122], [1, 2], [0, 60, 0, 61], [1, 1]),
            [Rows, Separable],
        ),
        (
            "1-d separable, 200 taps, stride 1",
            (1, 1, 2000, [1, 200], [1, 1], [0, 199, 0, 0], [1, 1]),
            [Rows, Separable],
        ),
        ("2-d phases, 12×12 taps", (2, 30, 40, [12, 12], [2, 3], [5, 6, 4, 7], [1, 1]), [Rows, Phased]),
        ("2-d phases, 11×11 taps (tabled)", (1, 40, 50, [11, 11], [3, 2], [0, 10, 10, 0], [1, 2]), [Rows, Phased]),
        ("pairs, wide", (2, 4, 2051, [2, 2], [2, 2], [0; 4], [1, 1]), [Pairs, Pairs]),
        ("global, 1000 wide", (2, 3, 1000, [3, 1000], [1, 1], [0; 4], [1, 1]), [Global, Global]),
        ("global, 7×9", (3, 7, 9, [7, 9], [1, 1], [0; 4], [1, 1]), [Global, Global]),
        ("global, one column", (2, 33, 1, [33, 1], [1, 1], [0; 4], [1, 1]), [Global, Global]),
        ("two windows a row, padded", (2, 3, 1000, [3, 1000], [1, 1], [0, 1, 0, 0], [1, 1]), [Rows, Separable]),
        ("3×3 stride 1, small map", (5, 7, 7, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]), [Rows, Phased]),
        ("3×3 stride 2, odd map", (3, 13, 11, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]), [Rows, Phased]),
        ("1-d as width 1", (1, 5000, 1, [150, 1], [7, 1], [70, 0, 80, 0], [3, 1]), [Rows, Rows]),
        ("padding after past the extent", (1, 1, 50, [1, 3], [1, 20], [0, 1, 0, 9], [1, 2]), [Rows, Phased]),
        ("ceil mode's extra padding", (2, 9, 2001, [3, 3], [2, 2], [1, 1, 2, 2], [1, 1]), [Rows, Separable]),
        ("separable, stride 3 columns, dilated", (2, 5, 130, [3, 4], [2, 3], [1, 2, 2, 3], [2, 2]), [Rows, Separable]),
        ("separable, odd padded row, stride 2", (3, 6, 97, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]), [Rows, Separable]),
        ("separable, padding past the extent", (1, 2, 100, [2, 3], [1, 20], [0, 1, 1, 9], [1, 2]), [Rows, Separable]),
        ("phases below the separable width", (2, 9, 95, [3, 3], [2, 2], [1, 1, 2, 2], [1, 1]), [Rows, Phased]),
        // Taller maps: the phase planes split and pooled a band of output rows at a time.
        ("phases in bands, stride 2", (2, 90, 90, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]), [Rows, Phased]),
        ("phases in bands, stride 1, dilated", (2, 100, 80, [5, 3], [1, 1], [4, 2, 3, 1], [2, 1]), [Rows, Phased]),
        ("phases in bands, stride 3", (1, 200, 60, [4, 4], [3, 3], [1, 2, 0, 1], [1, 1]), [Rows, Phased]),
    ];
    for (i, &(what, g, want)) in cases.iter().enumerate() {
        let (c, h, w, kernel, stride, pad, dilation) = g;
        let p = Pool2dParams::new(PoolKind::Max, &shape(&[c, h, w]), kernel, stride, pad, dilation, false).unwrap();
        let got = [pool2d_path(&p, pool2d_scratch(&p)), pool2d_path(&p, pool2d_scratch_fast(&p))];
        assert_eq!(got, want, "{what}");
        assert!(check_pool2d(what, g, &seeded(c * h * w, i as u64)).is_some(), "{what}");
    }
}

/// Issue 33: the reported 1-D max pool (ONNX `[1, 1, 220000]`, kernel 200, stride 10, dilation
/// 10, pads 100/100 → 21,821 outputs) as the converter lowers it (height 1), max and both
/// averages, every path and build. Before the fix (`TapOffsets` read its unfilled table for the
/// first 121 taps of a larger kernel) 16,129 of the 21,821 max outputs were wrong here, by up
/// to 0.039 of the output's scale.
#[test]
fn issue33_reported_one_d_dilated_pool() {
    let g: PoolCase = (1, 1, 220_000, [1, 200], [1, 10], [0, 100, 0, 100], [1, 10]);
    let (_, _, w, kernel, stride, pad, dilation) = g;
    let p = Pool2dParams::new(PoolKind::Max, &shape(&[1, 1, w]), kernel, stride, pad, dilation, false).unwrap();
    assert_eq!(p.ow, 21_821);
    assert_eq!(pool2d_path(&p, pool2d_scratch_fast(&p)), PoolPath::Separable);
    let x = seeded(w, 33);
    let (want, _, _) =
        r::pool2d(&f64s(&x), [1, 1, w], pool_fn(PoolKind::Max, false), r::PoolSpec { kernel, stride, pad, dilation });
    let mut y = out(p.ow);
    pool2d(&p, &x, &mut y, &mut scratch(pool2d_scratch_fast(&p)));
    let wrong = y.iter().zip(&want).filter(|(g, w)| f64::from(**g) != **w).count();
    let cmp = compare(&y, &want, EXACT);
    eprintln!("issue 33: {wrong} of {} max outputs wrong, max error {:.3} of the output scale", p.ow, cmp.max_rel_err);
    assert_eq!(wrong, 0);
    check_pool2d("issue 33", g, &x).expect("accepted");
}

// ---------------------------------------------------------------- simd::pool_taps

proptest! {
    #![proptest_config(config())]

    /// The phase path's taps block (`simd::pool_taps`: `acc[j]` = max or sum over `t` of
    /// `src[off[t] + j]`) on every build this CPU runs (the portable loops, AVX2, AVX-512, NEON)
    /// against f64: up to a 7×7 window's 49 taps, lengths around the four-vector blocks and the
    /// scalar tails, some inputs NaN. A max is exact (NaN passed over, as `f64::max` from −∞);
    /// a sum adds in tap order (`F32_KERNEL`, floor from the sum of |x|; NaN propagates), and
    /// every build gives the portable loops' values exactly.
    #[test]
    fn pool_taps_match_f64(
        (off, src, n) in (1usize..50, 0usize..200, 0usize..40).prop_flat_map(|(taps, n, extra)| (
            proptest::collection::vec(0usize..=extra, taps),
            proptest::collection::vec(prop_oneof![8 => nz(), 1 => Just(f32::NAN)], n + extra),
            Just(n),
        ))
    ) {
        let (o_ref, s_ref) = (&off, &src);
        let column = |j: usize| o_ref.iter().map(move |&o| f64::from(s_ref[o + j]));
        let want_max: Vec<f64> = (0..n).map(|j| column(j).fold(f64::NEG_INFINITY, f64::max)).collect();
        let want_sum: Vec<f64> = (0..n).map(|j| column(j).sum()).collect();
        let mag: Vec<f64> = (0..n).map(|j| column(j).map(f64::abs).sum()).collect();
        let mut portable = [out(n), out(n)];
        simd::pool_taps::<true>(Isa::Scalar, &off, &src, &mut portable[0]);
        simd::pool_taps::<false>(Isa::Scalar, &off, &src, &mut portable[1]);
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()));
        for isa in tiers() {
            let (mut max, mut sum) = (out(n), out(n));
            simd::pool_taps::<true>(isa, &off, &src, &mut max);
            simd::pool_taps::<false>(isa, &off, &src, &mut sum);
            let who = isa.name();
            assert_close(&format!("pool_taps max {who}"), &max, &want_max, EXACT);
            for (j, (&g, (&w, &m))) in sum.iter().zip(want_sum.iter().zip(&mag)).enumerate() {
                let ok = if w.is_nan() { g.is_nan() } else { (f64::from(g) - w).abs() <= 1e-5 * m + 1e-30 };
                prop_assert!(ok, "pool_taps sum {} [{}]: {} vs {}", who, j, g, w);
            }
            prop_assert!(same(&max, &portable[0]) && same(&sum, &portable[1]), "pool_taps {} differs from the portable loops", who);
        }
    }
}

/// A tap reading past the source is refused (a panic, never a read outside it).
#[test]
#[should_panic(expected = "reads past")]
fn pool_taps_checks_bounds() {
    let src = vec![1.0f32; 40];
    let mut acc = vec![0.0f32; 33];
    simd::pool_taps::<true>(kestrel_rt_cpu::kernels::simd::isa(), &[0, 8], &src, &mut acc);
}
