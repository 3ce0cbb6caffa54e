//! Reference for non-maximum suppression (ONNX `NonMaxSuppression`), in f64, straight from the
//! standard's definition (its reference implementation's order of tests): per batch and class,
//! the boxes scoring above the threshold (all when there is none), sorted by score, highest
//! first, equal scores in index order; each kept unless a box kept before it in that batch and
//! class overlaps it with IoU above the threshold; at most `max_out` kept. NaN scores sort after
//! every other (the standard leaves their order open).

/// Boxes as `[x_center, y_center, width, height]` when `center`, else two corners
/// `[y1, x1, y2, x2]` in either order: `(x_min, x_max, y_min, y_max)`.
fn extent(b: &[f64], center: bool) -> (f64, f64, f64, f64) {
    if center {
        (b[0] - b[2] / 2.0, b[0] + b[2] / 2.0, b[1] - b[3] / 2.0, b[1] + b[3] / 2.0)
    } else {
        (b[1].min(b[3]), b[1].max(b[3]), b[0].min(b[2]), b[0].max(b[2]))
    }
}

/// The IoU of two boxes, `None` where the standard's test suppresses nothing (no overlap, an
/// area of zero or less).
pub fn iou(a: &[f64], b: &[f64], center: bool) -> Option<f64> {
    let (ax0, ax1, ay0, ay1) = extent(a, center);
    let (bx0, bx1, by0, by1) = extent(b, center);
    let (ix0, ix1, iy0, iy1) = (ax0.max(bx0), ax1.min(bx1), ay0.max(by0), ay1.min(by1));
    if ix1 <= ix0 || iy1 <= iy0 {
        return None;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let (area_a, area_b) = ((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0));
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return None;
    }
    Some(inter / union)
}

/// NMS over `boxes [batches, n, 4]` and `scores [batches, classes, n]`: the selected
/// `(batch, class, box)` triples in output order.
#[allow(clippy::too_many_arguments)]
pub fn nms(
    boxes: &[f64],
    scores: &[f64],
    (batches, classes, n): (usize, usize, usize),
    center: bool,
    max_out: f64,
    iou_threshold: f64,
    score_threshold: Option<f64>,
) -> Vec<[usize; 3]> {
    let max_out = if max_out > 0.0 { (max_out as usize).min(n) } else { 0 };
    let mut out = Vec::new();
    for b in 0..batches {
        let bx = |i: usize| &boxes[(b * n + i) * 4..(b * n + i) * 4 + 4];
        for c in 0..classes {
            let sc = &scores[(b * classes + c) * n..(b * classes + c + 1) * n];
            let mut cand: Vec<usize> = (0..n).filter(|&i| score_threshold.is_none_or(|t| sc[i] > t)).collect();
            let key = |i: usize| if sc[i].is_nan() { f64::NEG_INFINITY } else { sc[i] };
            // Stable: equal keys keep index order (−0 equals +0); among equal keys a NaN after
            // a −∞. The keys are never NaN.
            cand.sort_by(|&i, &j| {
                key(j)
                    .partial_cmp(&key(i))
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(sc[i].is_nan().cmp(&sc[j].is_nan()))
            });
            let mut kept: Vec<usize> = Vec::new();
            for i in cand {
                if kept.len() >= max_out {
                    break;
                }
                if kept.iter().any(|&k| iou(bx(k), bx(i), center).is_some_and(|v| v > iou_threshold)) {
                    continue;
                }
                kept.push(i);
                out.push([b, c, i]);
            }
        }
    }
    out
}
