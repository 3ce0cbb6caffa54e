//! Reduction over one axis: a fold row of the format's table (mean, sum, max, min, product,
//! L2 norm…: its map, combine and finish, [`Fold`]) or the index of the first or last maximum or
//! minimum (as an f32 value, [`ReduceOp::arg`]'s rule), optionally keeping the axis with size 1.

use crate::error::ShapeError;
use kestrel_rt_format::ops::{Fold, FoldVisitor, ReduceOp};
use kestrel_rt_format::{Shape, MAX_RANK};

/// Reduction of axis `axis` of `[outer, n, inner]` to `[outer, inner]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceParams {
    /// The function.
    pub op: ReduceOp,
    /// Product of the axes before the reduced one.
    pub outer: usize,
    /// Length of the reduced axis.
    pub n: usize,
    /// Product of the axes after the reduced one.
    pub inner: usize,
    /// Output shape (the axis removed, or kept with size 1 when `keep_dims`).
    pub y: Shape,
}

impl ReduceParams {
    /// Params reducing `axis` of an input of shape `x`; the axis must exist and be non-empty.
    pub fn new(op: ReduceOp, x: &Shape, axis: usize, keep_dims: bool) -> Result<Self, ShapeError> {
        const OP: &str = "Reduce";
        let r = x.rank();
        if axis >= r {
            return Err(ShapeError::Mismatch {
                op: OP,
                what: "axis (must be below the rank)",
                expected: r,
                found: axis,
            });
        }
        let n = x.dim(axis);
        if n == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "reduced axis is empty" });
        }
        let overflow = ShapeError::Invalid { op: OP, what: "element count overflows" };
        let prod = |s: &[u32]| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d as usize));
        let outer = prod(&x.dims()[..axis]).ok_or(overflow)?;
        let inner = prod(&x.dims()[axis + 1..]).ok_or(overflow)?;
        let mut dims = [0u32; MAX_RANK];
        let mut k = 0;
        for (i, &d) in x.dims().iter().enumerate() {
            if i != axis {
                dims[k] = d;
                k += 1;
            } else if keep_dims {
                dims[k] = 1;
                k += 1;
            }
        }
        let y = Shape::new(&dims[..k]).ok_or(overflow)?;
        Ok(Self { op, outer, n, inner, y })
    }
}

/// Scratch for [`reduce`]: none.
pub fn reduce_scratch(_p: &ReduceParams) -> usize {
    0
}

/// Reduces `x` (`outer·n·inner` elements) into `y` (`outer·inner`). `scratch` is unused.
pub fn reduce(p: &ReduceParams, x: &[f32], y: &mut [f32], _scratch: &mut [f32]) {
    let (n, inner) = (p.n, p.inner);
    let slab = n * inner;
    if inner == 0 || p.outer == 0 {
        return;
    }
    if let Some((max, last)) = p.op.arg() {
        for (xs, ys) in x[..p.outer * slab].chunks_exact(slab).zip(y[..p.outer * inner].chunks_exact_mut(inner)) {
            for (i, o) in ys.iter_mut().enumerate() {
                let mut best = 0;
                let mut b = xs[i];
                for j in 1..n {
                    let v = xs[j * inner + i];
                    if (max && v > b) || (!max && v < b) || (last && v == b) {
                        (best, b) = (j, v);
                    }
                }
                *o = best as f32;
            }
        }
        return;
    }
    // The fold rows: one loop nest per row of the table, chosen here, outside the loops.
    p.op.visit_fold(FoldRun { p, x, y });
}

/// [`fold`] for the row the visitor is given.
struct FoldRun<'a> {
    p: &'a ReduceParams,
    x: &'a [f32],
    y: &'a mut [f32],
}

impl FoldVisitor for FoldRun<'_> {
    type Out = ();
    fn visit<F: Fold>(self) {
        fold::<F>(self.p, self.x, self.y);
    }
}

/// A fold row's reduction (`F`'s map, combine and finish), `n` and `inner` non-zero.
fn fold<F: Fold>(p: &ReduceParams, x: &[f32], y: &mut [f32]) {
    let (n, inner) = (p.n, p.inner);
    let nf = n as f32;
    if inner == 1 {
        // The last axis (a global pool's merged H·W): each output reduces one contiguous row,
        // eight lanes at a time.
        for (xr, o) in x[..p.outer * n].chunks_exact(n).zip(&mut y[..p.outer]) {
            *o = F::finish(row_reduce::<F>(xr), nf);
        }
        return;
    }
    let slab = n * inner;
    for (xs, ys) in x[..p.outer * slab].chunks_exact(slab).zip(y[..p.outer * inner].chunks_exact_mut(inner)) {
        ys.iter_mut().zip(&xs[..inner]).for_each(|(o, &v)| *o = F::map(v));
        for xr in xs.chunks_exact(inner).skip(1) {
            ys.iter_mut().zip(xr).for_each(|(o, &v)| *o = F::combine(*o, F::map(v)));
        }
        ys.iter_mut().for_each(|o| *o = F::finish(*o, nf));
    }
}

/// `F`'s fold of a contiguous row over eight lanes (then the lanes, then the tail), from
/// `F::INIT`.
#[inline(always)]
fn row_reduce<F: Fold>(xs: &[f32]) -> f32 {
    let mut lanes = [F::INIT; 8];
    let mut chunks = xs.chunks_exact(8);
    for ch in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(ch) {
            *l = F::combine(*l, F::map(v));
        }
    }
    let r = lanes.iter().fold(F::INIT, |a, &v| F::combine(a, v));
    chunks.remainder().iter().fold(r, |a, &v| F::combine(a, F::map(v)))
}
