//! Slice geometry: [`SliceParams`] of a `Slice` node, checked against its input shape.

use crate::error::ShapeError;
use kestrel_rt_format::ops::Slice;
use kestrel_rt_format::Shape;

/// Geometry of one slice, checked against the input shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceParams {
    /// Product of the axes before the sliced one.
    pub outer: usize,
    /// The input's length on the axis.
    pub n: usize,
    /// Product of the axes after it (contiguous elements per index).
    pub inner: usize,
    /// First input index read.
    pub start: usize,
    /// Input indices between two reads.
    pub step: usize,
    /// Indices read.
    pub count: usize,
    /// Output index of the first read.
    pub offset: usize,
    /// The output's length on the axis.
    pub len: usize,
}

impl SliceParams {
    /// Params of `op` on an input of shape `x`: the window must lie inside both axes.
    pub fn new(x: &Shape, op: &Slice) -> Result<Self, ShapeError> {
        const OP: &str = "Slice";
        let axis = op.axis as usize;
        if axis >= x.rank() {
            return Err(ShapeError::Mismatch { op: OP, what: "axis (< rank)", expected: x.rank(), found: axis });
        }
        let u = |v: u32| v as usize;
        let (start, step, count, offset, len) = (u(op.start), u(op.step), u(op.count), u(op.offset), u(op.len));
        let n = x.dim(axis);
        let last = (count.checked_sub(1))
            .and_then(|c| c.checked_mul(step))
            .and_then(|v| v.checked_add(start))
            .filter(|_| step > 0);
        // A window of no element (`count` 0: a run-time dim at 0) reads nothing.
        if step == 0 || (count > 0 && last.is_none_or(|l| l >= n)) {
            return Err(ShapeError::Invalid { op: OP, what: "the window reads past the input's axis" });
        }
        if offset.checked_add(count).is_none_or(|e| e > len) {
            return Err(ShapeError::Invalid { op: OP, what: "the window ends past the output's axis" });
        }
        let dims = x.dims();
        let outer = dims[..axis].iter().try_fold(1usize, |a, &d| a.checked_mul(d as usize));
        let inner = dims[axis + 1..].iter().try_fold(1usize, |a, &d| a.checked_mul(d as usize));
        let (Some(outer), Some(inner)) = (outer, inner) else {
            return Err(ShapeError::Invalid { op: OP, what: "element count overflows" });
        };
        if outer.checked_mul(len).and_then(|v| v.checked_mul(inner)).is_none() {
            return Err(ShapeError::Invalid { op: OP, what: "element count overflows" });
        }
        Ok(Self { outer, n, inner, start, step, count, offset, len })
    }

    /// Output elements per sample.
    pub fn out_len(&self) -> usize {
        self.outer * self.len * self.inner
    }
}
