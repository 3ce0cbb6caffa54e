//! Property tests of the pooling kernel against the f64 reference
//! (`kestrel_reference::layers::pool2d`), and its geometry checks.

// Shared with layers.rs; this file uses only part of it.
#[allow(unused_imports)]
mod common_layers;

use common_layers::cases::*;
use common_layers::*;
use kestrel_cpu::error::ShapeError;
use kestrel_cpu::kernels::pool::{pool2d, pool2d_scratch, pool2d_scratch_fast, Pool2dParams};
use kestrel_format::ops::PoolKind;
use kestrel_reference::assert_close;
use kestrel_reference::layers as r;
use kestrel_reference::testing::pool_fn;
use kestrel_reference::tolerance::EXACT;
use proptest::prelude::*;

// ---------------------------------------------------------------- pool2d

/// Runs [`pool2d`] on one geometry for max and both average divisors against the reference:
/// max is exact (it selects an input), an average sums, so it takes `F32_KERNEL` with the floor
/// from the same pool of |x| (as [`assert_close_dot`]). `Ok(false)` if the geometry has a window
/// wholly in the padding (rejected by `Pool2dParams::new`; see `pool2d_rejects_empty_windows`).
fn check_pool2d(what: &str, case: PoolCase, xs: &[f32]) -> Result<bool, TestCaseError> {
    let (c, h, w, kernel, stride, pad, dilation) = case;
    let x = &xs[..c * h * w];
    for (kind, cip) in [(PoolKind::Max, false), (PoolKind::Avg, false), (PoolKind::Avg, true)] {
        let p = match Pool2dParams::new(kind, &shape(&[c, h, w]), kernel, stride, pad, dilation, cip) {
            Ok(p) => p,
            Err(ShapeError::Invalid { what: "a pooling window lies entirely in the padding", .. }) => return Ok(false),
            Err(e) => panic!("{what}: {e}"),
        };
        // The row loops with the minimum scratch, then the planner's (max pools: stride phases).
        for fast in [false, true] {
            let run = |x: &[f32]| {
                let spec = r::PoolSpec { kernel, stride, pad, dilation };
                let (want, oh, ow) = r::pool2d(&f64s(x), [c, h, w], pool_fn(kind, cip), spec);
                assert_eq!((p.oh, p.ow), (oh, ow), "{what}");
                assert_eq!(p.y_shape(), Some(shape(&[c, oh, ow])));
                let mut y = out(c * oh * ow);
                let n = if fast { pool2d_scratch_fast(&p) } else { pool2d_scratch(&p) };
                pool2d(&p, x, &mut y, &mut scratch(n));
                (y, want)
            };
            let label = format!("pool2d {what} {kind:?} count_include_pad {cip} fast {fast}");
            let (y, want) = run(x);
            if kind == PoolKind::Max {
                assert_close(&label, &y, &want, EXACT);
            } else {
                let (mag, mag_want) = run(&abs(x));
                assert_close_dot(&label, &y, &want, &mag, &mag_want);
            }
        }
    }
    Ok(true)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn pool2d_matches_reference((case, xs) in pool_case()) {
        let hit = check_pool2d(&format!("{case:?}"), case, &xs)?;
        prop_assume!(hit);
    }

    #[test]
    fn pool2d_fixed_cases_match_reference(xs in vals(2 * 12 * 40)) {
        // Every fixed case on each draw (none may go untested by chance).
        for (case, &geometry) in POOL_CASES.iter().enumerate() {
            let hit = check_pool2d(&format!("case {case}"), geometry, &xs)?;
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

/// Issue 33: the reported 1-D max pool (ONNX `[1, 1, 220000]`, kernel 200, stride 10, dilation
/// 10, pads 100/100 → 21,821 outputs) as the converter lowers it: height 1.
#[test]
fn issue33_reported_one_d_dilated_max_pool() {
    let (w, kernel, stride, pad, dilation) = (220_000, [1, 200], [1, 10], [0, 100, 0, 100], [1, 10]);
    let x: Vec<f32> =
        (0..w).map(|i| ((i * 7919 % 10007) as f32 / 5003.0 - 1.0) + 0.5f32.copysign(i as f32 % 3.0 - 1.0)).collect();
    let p = Pool2dParams::new(PoolKind::Max, &shape(&[1, 1, w]), kernel, stride, pad, dilation, false).unwrap();
    assert_eq!(p.ow, 21_821);
    let spec = r::PoolSpec { kernel, stride, pad, dilation };
    let (want, _, _) = r::pool2d(&f64s(&x), [1, 1, w], pool_fn(PoolKind::Max, false), spec);
    let mut y = out(p.ow);
    pool2d(&p, &x, &mut y, &mut scratch(pool2d_scratch_fast(&p)));
    let wrong = y.iter().zip(&want).filter(|(g, w)| f64::from(**g) != **w).count();
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let err = y.iter().zip(&want).fold(0f64, |m, (g, w)| m.max((f64::from(*g) - w).abs() / scale));
    eprintln!("issue 33: {wrong} of {} wrong, max error {err:.3} of the output scale", p.ow);
    assert_close("issue 33", &y, &want, EXACT);
}
