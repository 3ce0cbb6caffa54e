//! Reduction over one axis: mean, sum, max, min, product, or the index of the first or last
//! maximum or minimum (as an f32 value, [`ReduceOp::arg`]'s rule), optionally keeping the axis
//! with size 1.

use crate::error::ShapeError;
use kestrel_format::ops::ReduceOp;
use kestrel_format::{Shape, MAX_RANK};

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
    if inner == 1 {
        // The last axis (a global pool's merged H·W): each output reduces one contiguous row,
        // eight lanes at a time.
        for (xr, o) in x[..p.outer * n].chunks_exact(n).zip(&mut y[..p.outer]) {
            *o = match p.op {
                ReduceOp::Mean => row_reduce(xr, 0.0, |a, v| a + v) * (1.0 / n as f32),
                ReduceOp::Sum => row_reduce(xr, 0.0, |a, v| a + v),
                ReduceOp::Max => row_reduce(xr, f32::NEG_INFINITY, f32::max),
                ReduceOp::Min => row_reduce(xr, f32::INFINITY, f32::min),
                ReduceOp::Prod => row_reduce(xr, 1.0, |a, v| a * v),
                _ => unreachable!("index reductions return above"),
            };
        }
        return;
    }
    for (xs, ys) in x[..p.outer * slab].chunks_exact(slab).zip(y[..p.outer * inner].chunks_exact_mut(inner)) {
        ys.copy_from_slice(&xs[..inner]);
        for xr in xs.chunks_exact(inner).skip(1) {
            match p.op {
                ReduceOp::Mean | ReduceOp::Sum => ys.iter_mut().zip(xr).for_each(|(o, &v)| *o += v),
                ReduceOp::Max => ys.iter_mut().zip(xr).for_each(|(o, &v)| *o = o.max(v)),
                ReduceOp::Min => ys.iter_mut().zip(xr).for_each(|(o, &v)| *o = o.min(v)),
                ReduceOp::Prod => ys.iter_mut().zip(xr).for_each(|(o, &v)| *o *= v),
                _ => unreachable!("index reductions return above"),
            }
        }
        if p.op == ReduceOp::Mean {
            let inv = 1.0 / n as f32;
            ys.iter_mut().for_each(|o| *o *= inv);
        }
    }
}

/// `f`-fold of a contiguous row over eight lanes (then the lanes, then the tail), from `init`.
#[inline(always)]
fn row_reduce(xs: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut lanes = [init; 8];
    let mut chunks = xs.chunks_exact(8);
    for ch in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(ch) {
            *l = f(*l, v);
        }
    }
    let r = lanes.iter().fold(init, |a, &v| f(a, v));
    chunks.remainder().iter().fold(r, |a, &v| f(a, v))
}
