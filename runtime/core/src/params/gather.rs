//! Gather geometry: [`GatherParams`] of a `Gather` node, checked against its shapes, and the
//! index rule every backend applies ([`GatherParams::resolve`]).

use crate::error::ShapeError;
use kestrel_rt_format::{Shape, MAX_RANK};

/// Geometry of one gather: `x` seen as `[outer, n, inner]` around the axis, `k` indices, the
/// output `[outer, k, inner]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherParams {
    /// Product of the axes before the indexed one.
    pub outer: usize,
    /// The input's length on the axis.
    pub n: usize,
    /// Product of the axes after it (contiguous elements per index).
    pub inner: usize,
    /// Indices (the element count of `idx`).
    pub k: usize,
}

impl GatherParams {
    /// Params of a gather along `axis` of `x` with indices of shape `idx`: the axis inside `x`,
    /// not empty, and the output (`x`'s shape with the axis replaced by `idx`'s axes) within
    /// [`MAX_RANK`] axes and `usize` elements.
    pub fn new(x: &Shape, idx: &Shape, axis: u32) -> Result<Self, ShapeError> {
        Self::with_output(x, idx, axis).map(|(p, _)| p)
    }

    /// [`new`](Self::new) and the output shape.
    pub fn with_output(x: &Shape, idx: &Shape, axis: u32) -> Result<(Self, Shape), ShapeError> {
        const OP: &str = "Gather";
        let axis = axis as usize;
        if axis >= x.rank() {
            return Err(ShapeError::Mismatch { op: OP, what: "axis (< rank)", expected: x.rank(), found: axis });
        }
        let n = x.dim(axis);
        // An empty axis can be indexed by no index at all (a run-time dim at 0) only.
        if n == 0 && idx.numel() != Some(0) {
            return Err(ShapeError::Invalid { op: OP, what: "the indexed axis is empty" });
        }
        let rank = x.rank() - 1 + idx.rank();
        if rank > MAX_RANK {
            return Err(ShapeError::Mismatch {
                op: OP,
                what: "output rank (at most 6)",
                expected: MAX_RANK,
                found: rank,
            });
        }
        let overflow = ShapeError::Invalid { op: OP, what: "element count overflows" };
        let prod = |d: &[u32]| d.iter().try_fold(1usize, |a, &v| a.checked_mul(v as usize));
        let dims = x.dims();
        let (outer, inner, k) = match (prod(&dims[..axis]), prod(&dims[axis + 1..]), prod(idx.dims())) {
            (Some(o), Some(i), Some(k)) => (o, i, k),
            _ => return Err(overflow),
        };
        outer.checked_mul(k).and_then(|v| v.checked_mul(inner)).ok_or(overflow)?;
        let mut out = [0usize; MAX_RANK];
        let parts = dims[..axis].iter().chain(idx.dims()).chain(&dims[axis + 1..]);
        for (o, &d) in out.iter_mut().zip(parts) {
            *o = d as usize;
        }
        let y = Shape::from_usize(&out[..rank]).ok_or(ShapeError::Invalid { op: OP, what: "output dim too large" })?;
        Ok((Self { outer, n, inner, k }, y))
    }

    /// Output elements per sample.
    pub fn out_len(&self) -> usize {
        self.outer * self.k * self.inner
    }

    /// The row an index value reads: `v` itself for an integer in `0..n`, `v + n` for one in
    /// `-n..0` (counted from the end), `None` for anything else (out of range, a fraction, NaN
    /// or an infinity).
    #[inline]
    pub fn resolve(&self, v: f32) -> Option<usize> {
        let n = self.n as f32;
        // Exact: n < 2^24 is checked where indices can reach it, and f32 holds every integer
        // below; larger n compare in f32 as the values do.
        if !(v >= -n && v < n) || v != (v as i64) as f32 {
            return None;
        }
        let i = v as i64;
        Some(if i < 0 { (i + self.n as i64) as usize } else { i as usize })
    }
}
