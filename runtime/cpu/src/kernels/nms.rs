//! Non-maximum suppression (ONNX `NonMaxSuppression`), greedy per batch and class, as the
//! standard defines it: the boxes whose score is above the score threshold (every box when
//! there is none), taken by score, highest first (equal scores in index order; a NaN score
//! after every other), each kept unless its IoU with a box kept before it, in the same batch
//! and class, is above the IoU threshold, until `max_out` are kept. A box of zero or negative
//! area suppresses nothing and is suppressed by nothing.
//!
//! The output is `[bound, 3]` rows of `(batch, class, box)` as f32 values (exact below 2^24),
//! in batch, then class, then selection order; the rows past the count are `-1`. The count is
//! returned (the run-time dim the converter slices the output to).

use crate::error::ShapeError;

/// Sizes of one NMS: `boxes [batches, n, 4]`, `scores [batches, classes, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NmsParams {
    /// Batches (ONNX `num_batches`).
    pub batches: usize,
    /// Classes per batch.
    pub classes: usize,
    /// Boxes per batch.
    pub n: usize,
    /// Boxes given as `[x_center, y_center, width, height]` (else two corners `[y1, x1, y2, x2]`,
    /// in either order).
    pub center_point_box: bool,
    /// The output's rows (the most boxes it can select).
    pub bound: usize,
}

impl NmsParams {
    /// Checks the shapes: `boxes [B, N, 4]`, `scores [B, C, N]`, the output `[bound, 3]` with
    /// `1 ≤ bound ≤ B·C·N < 2^24`.
    pub fn new(boxes: &[u32], scores: &[u32], out: &[u32], center_point_box: bool) -> Result<Self, ShapeError> {
        let bad = |what| ShapeError::Invalid { op: "Nms", what };
        let (&[batches, n, four], &[sb, classes, sn], &[bound, three]) = (boxes, scores, out) else {
            return Err(bad("boxes [B, N, 4], scores [B, C, N] and an output [M, 3]"));
        };
        if four != 4 || three != 3 || sb != batches || sn != n {
            return Err(bad("boxes [B, N, 4], scores [B, C, N] and an output [M, 3]"));
        }
        let (batches, classes, n, bound) = (batches as usize, classes as usize, n as usize, bound as usize);
        let most = batches.saturating_mul(classes).saturating_mul(n);
        if bound == 0 || bound > most || most >= 1 << 24 {
            return Err(bad("an output of 1..=B·C·N rows (B·C·N below 2^24)"));
        }
        Ok(Self { batches, classes, n, center_point_box, bound })
    }

    /// Scratch f32 elements: one batch's box order.
    pub fn scratch(&self) -> usize {
        self.n
    }
}

/// The thresholds of one run: at most `max_out` boxes per batch and class (values below 0 are
/// 0), kept when their IoU with every kept box is at most `iou`, among the boxes scoring above
/// `score` (every box when `None`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NmsLimits {
    /// ONNX `max_output_boxes_per_class`.
    pub max_out: f32,
    /// ONNX `iou_threshold`.
    pub iou: f32,
    /// ONNX `score_threshold`.
    pub score: Option<f32>,
}

/// A box's extent `(x_min, x_max, y_min, y_max)`.
fn extent(b: &[f32], center: bool) -> (f32, f32, f32, f32) {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        (b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh)
    } else {
        (b[1].min(b[3]), b[1].max(b[3]), b[0].min(b[2]), b[0].max(b[2]))
    }
}

/// Whether box `a` suppresses box `b` (their IoU above `t`; the standard's reference order of
/// tests, so that degenerate boxes suppress nothing).
fn suppresses(a: &[f32], b: &[f32], center: bool, t: f32) -> bool {
    let (ax0, ax1, ay0, ay1) = extent(a, center);
    let (bx0, bx1, by0, by1) = extent(b, center);
    let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
    let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
    // NaN coordinates overlap nothing.
    let overlap = ix1 > ix0 && iy1 > iy0;
    if !overlap {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    let area_a = (ax1 - ax0) * (ay1 - ay0);
    let area_b = (bx1 - bx0) * (by1 - by0);
    let union = area_a + area_b - inter;
    let positive = inter > 0.0 && area_a > 0.0 && area_b > 0.0 && union > 0.0;
    if !positive {
        return false;
    }
    inter / union > t
}

/// Runs NMS: `boxes [B, N, 4]`, `scores [B, C, N]`, `out [bound, 3]`, `order` at least
/// [`NmsParams::scratch`] long. Returns how many rows were written (the rest are `-1`).
pub fn nms(
    p: &NmsParams,
    limits: NmsLimits,
    boxes: &[f32],
    scores: &[f32],
    order: &mut [f32],
    out: &mut [f32],
) -> Result<usize, ShapeError> {
    let bad = |what| ShapeError::Invalid { op: "Nms", what };
    let (b_, c_, n) = (p.batches, p.classes, p.n);
    if boxes.len() < b_ * n * 4 || scores.len() < b_ * c_ * n || out.len() < p.bound * 3 || order.len() < n {
        return Err(bad("buffers smaller than the shapes"));
    }
    // At most N per class; NaN or negative keep none.
    let max_out = if limits.max_out >= n as f32 {
        n
    } else if limits.max_out > 0.0 {
        limits.max_out as usize
    } else {
        0
    };
    out[..p.bound * 3].fill(-1.0);
    let mut rows = 0usize;
    for b in 0..b_ {
        let bx = &boxes[b * n * 4..(b + 1) * n * 4];
        for c in 0..c_ {
            let sc = &scores[(b * c_ + c) * n..(b * c_ + c + 1) * n];
            let mut m = 0usize;
            for (i, &s) in sc.iter().enumerate() {
                if limits.score.is_none_or(|t| s > t) {
                    order[m] = i as f32;
                    m += 1;
                }
            }
            let order = &mut order[..m];
            // Highest first, equal scores by index, NaN last.
            order.sort_unstable_by(|&i, &j| {
                let (si, sj) = (sc[i as usize], sc[j as usize]);
                let key = |s: f32| if s.is_nan() { f32::NEG_INFINITY } else { s };
                key(sj)
                    .partial_cmp(&key(si))
                    .unwrap_or(core::cmp::Ordering::Equal)
                    .then(si.is_nan().cmp(&sj.is_nan()))
                    .then(i.partial_cmp(&j).unwrap_or(core::cmp::Ordering::Equal))
            });
            let first = rows;
            for &i in order.iter() {
                if rows - first >= max_out {
                    break;
                }
                let i = i as usize;
                let cand = &bx[i * 4..i * 4 + 4];
                let suppressed = out[first * 3..rows * 3].chunks_exact(3).any(|r| {
                    let k = r[2] as usize;
                    suppresses(&bx[k * 4..k * 4 + 4], cand, p.center_point_box, limits.iou)
                });
                if suppressed {
                    continue;
                }
                if rows == p.bound {
                    return Err(bad("more boxes selected than the output's rows"));
                }
                out[rows * 3..rows * 3 + 3].copy_from_slice(&[b as f32, c as f32, i as f32]);
                rows += 1;
            }
        }
    }
    Ok(rows)
}
