//! Detection post-processing: non-maximum suppression.

use super::TensorId;

/// Non-maximum suppression (ONNX `NonMaxSuppression`): `boxes [B, N, 4]` and `scores
/// [B, C, N]` (per sample), greedy per batch and class: the boxes scoring above `score` (every
/// box when absent), highest score first (equal scores in index order, NaN last), each kept
/// unless its IoU with a box kept before it in its batch and class is above `iou` (0 when
/// absent), at most `max_out` per batch and class (none when absent; a value above N is N).
/// `max_out`, `iou` and `score` are one-element f32 tensors, weights or activations (computed
/// at run time). The output `[M, 3]` holds the kept boxes' `(batch, class, box)` indices as f32
/// values (exact: `B·C·N < 2^24`), in batch, class and selection order, the rows past the
/// last kept box `-1`; `M ≤ B·C·N` is the most it can keep. A box of zero or negative area
/// suppresses nothing and is suppressed by nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Nms {
    /// Boxes `[B, N, 4]`: corners `[y1, x1, y2, x2]` (either order), or `[x_center, y_center,
    /// width, height]` with `center_point_box`.
    pub boxes: TensorId,
    /// Scores `[B, C, N]`.
    pub scores: TensorId,
    /// The most boxes kept per batch and class (`[1]`).
    pub max_out: Option<TensorId>,
    /// The IoU above which a box is suppressed (`[1]`).
    pub iou: Option<TensorId>,
    /// The score a box must be above to be considered (`[1]`).
    pub score: Option<TensorId>,
    /// Boxes given by their centre, width and height.
    pub center_point_box: bool,
    /// Output `[M, 3]`.
    pub y: TensorId,
}
