//! Concatenation along one axis: pieces copied side by side, one pass over the output.

use super::record::{bad, Slots};
use super::{OpError, TensorId, NONE};

/// The most pieces one [`Concat`] record holds: every tensor slot of a record but the output's
/// ([`MAX_OP_TENSORS`](super::MAX_OP_TENSORS) − 1). A longer concatenation is a chain: the first
/// op's output is the next op's first piece.
pub const MAX_CONCAT_INPUTS: usize = super::record::MAX_OP_TENSORS - 1;

/// Concatenation (ONNX `Concat`): pieces `x_0 … x_{n−1}` (1 ≤ n ≤ [`MAX_CONCAT_INPUTS`]) whose
/// shapes agree except on the per-sample `axis`, each seen as `[outer, n_i, inner]` around it,
/// give `y [outer, Σ n_i, inner]` with `y[o, (Σ_{k<i} n_k) + j, i'] = x_i[o, j, i']`. The pieces
/// are activations of one dtype, f32 or i32 (ids copied bit for bit), and `y` has that dtype.
/// The record always has [`MAX_CONCAT_INPUTS`] piece slots, the first `n` present and the rest
/// absent (`0xFFFFFFFF`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Concat {
    /// The pieces in order, the first `n` present, the rest [`NONE`].
    pub xs: [TensorId; MAX_CONCAT_INPUTS],
    /// The per-sample axis the pieces are joined along.
    pub axis: u32,
    /// Output.
    pub y: TensorId,
}

impl Default for Concat {
    fn default() -> Self {
        Self { xs: [NONE; MAX_CONCAT_INPUTS], axis: 0, y: 0 }
    }
}

impl Concat {
    /// A concatenation of `pieces` (1..=[`MAX_CONCAT_INPUTS`] of them, else `None`).
    pub fn new(pieces: &[TensorId], axis: u32, y: TensorId) -> Option<Self> {
        if pieces.is_empty() || pieces.len() > MAX_CONCAT_INPUTS || pieces.contains(&NONE) {
            return None;
        }
        let mut xs = [NONE; MAX_CONCAT_INPUTS];
        xs[..pieces.len()].copy_from_slice(pieces);
        Some(Self { xs, axis, y })
    }

    /// The pieces present, in order.
    pub fn inputs(&self) -> &[TensorId] {
        let n = self.xs.iter().position(|&t| t == NONE).unwrap_or(MAX_CONCAT_INPUTS);
        &self.xs[..n]
    }
}

/// The piece slots: every one written (absent ones as [`NONE`]); when decoding, the first must
/// be present and no present piece may follow an absent one.
pub(super) fn pieces<S: Slots>(s: &mut S, xs: &mut [TensorId; MAX_CONCAT_INPUTS]) -> Result<(), OpError> {
    for x in xs.iter_mut() {
        s.slot(x);
    }
    if S::DECODE {
        if xs[0] == NONE {
            return Err(OpError::MissingTensor { op: s.op(), slot: "x0" });
        }
        if let Some(gap) = xs.windows(2).position(|w| w[0] == NONE && w[1] != NONE) {
            return Err(bad(s.op(), "pieces (a present piece after an absent one)", gap as u32 + 1));
        }
    }
    Ok(())
}
