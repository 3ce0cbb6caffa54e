//! Non-maximum suppression: the CPU kernel against the f64 reference (the ONNX definition), on
//! random boxes in both encodings with random limits, ties among the scores, degenerate and
//! flipped boxes, NaN scores; and its shape checks.

use kestrel_rt_cpu::kernels::nms::{nms, NmsLimits, NmsParams};
use kestrel_rt_reference::nms as reference;
use proptest::prelude::*;

/// The kernel's selected rows (those before the first `-1`), as index triples, with the
/// output's rows the converter's bound (`B·C·min(max_out, N)`, at least 1).
fn run(
    (b, c, n): (usize, usize, usize),
    center: bool,
    limits: NmsLimits,
    boxes: &[f32],
    scores: &[f32],
) -> Vec<[usize; 3]> {
    let per_class = if limits.max_out >= n as f32 {
        n
    } else if limits.max_out > 0.0 {
        limits.max_out as usize
    } else {
        0
    };
    let bound = (b * c * per_class).max(1);
    let p =
        NmsParams::new(&[b as u32, n as u32, 4], &[b as u32, c as u32, n as u32], &[bound as u32, 3], center).unwrap();
    let mut order = vec![0f32; p.scratch()];
    let mut out = vec![7f32; bound * 3];
    let rows = nms(&p, limits, boxes, scores, &mut order, &mut out).unwrap();
    assert!(out[rows * 3..].iter().all(|&v| v == -1.0), "unused rows are -1");
    out[..rows * 3].chunks_exact(3).map(|r| [r[0] as usize, r[1] as usize, r[2] as usize]).collect()
}

/// Whether some pair of boxes has an IoU within `margin` of the threshold (where f32 and f64
/// may decide differently).
fn near_threshold(boxes: &[f64], (b, n): (usize, usize), center: bool, t: f64, margin: f64) -> bool {
    (0..b).any(|bi| {
        let bx = |i: usize| &boxes[(bi * n + i) * 4..(bi * n + i) * 4 + 4];
        (0..n).any(|i| (0..n).any(|j| reference::iou(bx(i), bx(j), center).is_some_and(|v| (v - t).abs() < margin)))
    })
}

/// Sizes `(B, C, N)`, the box encoding, boxes, scores, max out, IoU and score thresholds.
type Case = (usize, usize, usize, bool, Vec<f32>, Vec<f32>, f32, f32, Option<f32>);

fn case() -> impl Strategy<Value = Case> {
    (1usize..3, 1usize..4, 1usize..12, any::<bool>())
        .prop_flat_map(|(b, c, n, center)| {
            (
                Just((b, c, n, center)),
                // Coordinates on a coarse grid (so that boxes touch, nest and coincide), some
                // flipped, some negative (centre boxes of negative width or height).
                prop::collection::vec((-4i32..12).prop_map(|v| v as f32 * 0.25), b * n * 4),
                // Scores from a few values: ties are common.
                prop::collection::vec((0i32..6).prop_map(|v| v as f32 * 0.2 - 0.1), b * c * n),
                0i32..14,
                0.0f32..1.0,
                prop::option::of(-0.2f32..0.9),
            )
        })
        .prop_map(|((b, c, n, center), boxes, scores, max_out, iou, score)| {
            (b, c, n, center, boxes, scores, max_out as f32, iou, score)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn kernel_matches_the_reference((b, c, n, center, boxes, scores, max_out, iou, score) in case()) {
        let b64: Vec<f64> = boxes.iter().map(|&v| f64::from(v)).collect();
        prop_assume!(!near_threshold(&b64, (b, n), center, f64::from(iou), 1e-5));
        let s64: Vec<f64> = scores.iter().map(|&v| f64::from(v)).collect();
        let want = reference::nms(&b64, &s64, (b, c, n), center, f64::from(max_out), f64::from(iou), score.map(f64::from));
        let got = run((b, c, n), center, NmsLimits { max_out, iou, score }, &boxes, &scores);
        prop_assert_eq!(got, want);
    }
}

#[test]
fn nan_scores_come_last_and_limits_saturate() {
    // Three disjoint boxes: NaN, 0.5, 0.9 → 0.9, 0.5, then the NaN.
    let boxes = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0];
    let scores = [f32::NAN, 0.5, 0.9];
    let all = NmsLimits { max_out: 1e9, iou: 0.5, score: None };
    assert_eq!(run((1, 1, 3), false, all, &boxes, &scores), vec![[0, 0, 2], [0, 0, 1], [0, 0, 0]]);
    // A score threshold drops the NaN (NaN > t is false); a negative or NaN limit keeps none.
    let above = NmsLimits { score: Some(0.1), ..all };
    assert_eq!(run((1, 1, 3), false, above, &boxes, &scores), vec![[0, 0, 2], [0, 0, 1]]);
    for max_out in [-3.0, 0.0, f32::NAN] {
        assert!(run((1, 1, 3), false, NmsLimits { max_out, ..all }, &boxes, &scores).is_empty());
    }
}

#[test]
fn nan_and_infinite_coordinates_neither_suppress_nor_are_suppressed() {
    // Box 1 overlaps box 0 fully; boxes 2 and 3 have a NaN and an infinite coordinate.
    let boxes = [0.0, 0.0, 2.0, 2.0, 0.0, 0.0, 2.0, 2.0, f32::NAN, 0.0, 2.0, 2.0, 0.0, 0.0, f32::INFINITY, 2.0];
    let scores = [0.9, 0.8, 0.95, 0.7];
    let limits = NmsLimits { max_out: 10.0, iou: 0.5, score: None };
    // 2 first (highest), kept; 0 kept (no overlap with a NaN box); 1 suppressed by 0; 3 (area
    // infinite: IoU NaN) kept.
    assert_eq!(run((1, 1, 4), false, limits, &boxes, &scores), vec![[0, 0, 2], [0, 0, 0], [0, 0, 3]]);
    // An IoU threshold of 0 (the default): any overlap suppresses.
    let touching = [0.0, 0.0, 2.0, 2.0, 1.9, 1.9, 4.0, 4.0, 2.0, 2.0, 4.0, 4.0];
    let z = NmsLimits { max_out: 10.0, iou: 0.0, score: None };
    assert_eq!(run((1, 1, 3), false, z, &touching, &[0.9, 0.8, 0.7]), vec![[0, 0, 0], [0, 0, 2]]);
}

#[test]
fn shapes_are_checked() {
    let ok = NmsParams::new(&[1, 5, 4], &[1, 2, 5], &[10, 3], false);
    assert!(ok.is_ok());
    for (bx, sc, out) in [
        (&[1u32, 5, 3][..], &[1u32, 2, 5][..], &[10u32, 3][..]),
        (&[1, 5, 4], &[2, 2, 5], &[10, 3]),
        (&[1, 5, 4], &[1, 2, 4], &[10, 3]),
        (&[1, 5, 4], &[1, 2, 5], &[11, 3]),
        (&[1, 5, 4], &[1, 2, 5], &[0, 3]),
        (&[1, 5, 4], &[1, 2, 5], &[10, 2]),
        (&[5, 4], &[1, 2, 5], &[10, 3]),
    ] {
        assert!(NmsParams::new(bx, sc, out, false).is_err(), "{bx:?} {sc:?} {out:?}");
    }
}
