//! Concatenation geometry: [`ConcatParams`] of a `Concat` node, checked against its pieces'
//! shapes.

use crate::error::ShapeError;
use kestrel_rt_format::ops::{Concat, TensorId, MAX_CONCAT_INPUTS};
use kestrel_rt_format::Shape;

/// Geometry of one concatenation: every piece seen as `[outer, n_i, inner]` around the axis, the
/// output as `[outer, total, inner]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConcatParams {
    /// Product of the axes before the joined one.
    pub outer: usize,
    /// Product of the axes after it (contiguous elements per index).
    pub inner: usize,
    /// The output's length on the axis (`Σ n_i`).
    pub total: usize,
    /// Pieces.
    pub pieces: usize,
    /// Each piece's length on the axis (the first `pieces` entries).
    pub n: [usize; MAX_CONCAT_INPUTS],
    /// Each piece's first index on the output's axis (the first `pieces` entries).
    pub offset: [usize; MAX_CONCAT_INPUTS],
}

impl ConcatParams {
    /// Params of `op`, `shape_of` giving each piece's shape: the pieces agree except on the axis,
    /// which every piece has.
    pub fn new(op: &Concat, shape_of: impl Fn(TensorId) -> Result<Shape, ShapeError>) -> Result<Self, ShapeError> {
        const OP: &str = "Concat";
        let inputs = op.inputs();
        let first = shape_of(*inputs.first().ok_or(ShapeError::Invalid { op: OP, what: "no pieces" })?)?;
        let axis = op.axis as usize;
        if axis >= first.rank() {
            return Err(ShapeError::Mismatch { op: OP, what: "axis (< rank)", expected: first.rank(), found: axis });
        }
        let dims = first.dims();
        let outer = dims[..axis].iter().try_fold(1usize, |a, &d| a.checked_mul(d as usize));
        let inner = dims[axis + 1..].iter().try_fold(1usize, |a, &d| a.checked_mul(d as usize));
        let (Some(outer), Some(inner)) = (outer, inner) else {
            return Err(ShapeError::Invalid { op: OP, what: "element count overflows" });
        };
        let mut p = Self {
            outer,
            inner,
            total: 0,
            pieces: inputs.len(),
            n: [0; MAX_CONCAT_INPUTS],
            offset: [0; MAX_CONCAT_INPUTS],
        };
        for (i, &x) in inputs.iter().enumerate() {
            let s = shape_of(x)?;
            let agrees = s.rank() == first.rank()
                && s.dims().iter().zip(dims).enumerate().all(|(k, (a, b))| k == axis || a == b);
            if !agrees {
                return Err(ShapeError::Invalid { op: OP, what: "pieces differ off the axis" });
            }
            p.n[i] = s.dim(axis);
            p.offset[i] = p.total;
            p.total = p.total.checked_add(p.n[i]).ok_or(ShapeError::Invalid { op: OP, what: "axis too long" })?;
        }
        if outer.checked_mul(p.total).and_then(|v| v.checked_mul(inner)).is_none() {
            return Err(ShapeError::Invalid { op: OP, what: "element count overflows" });
        }
        Ok(p)
    }

    /// Elements of piece `i` per sample (`outer · n_i · inner`).
    pub fn piece_len(&self, i: usize) -> usize {
        self.outer * self.n[i] * self.inner
    }

    /// Elements of the output per sample.
    pub fn out_len(&self) -> usize {
        self.outer * self.total * self.inner
    }
}
