//! Reduction over one axis: a fold row of the format's table (mean, sum, max, min, product,
//! L2 norm…: its map, combine and finish, [`Fold`]) or the index of the first or last maximum or
//! minimum (as an f32 value, [`ReduceOp::arg`]'s rule), optionally keeping the axis with size 1.

use crate::error::ShapeError;
use crate::kernels::simd::{multiversion::multiversion, Isa};
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
    /// Params reducing `axis` of an input of shape `x`; the axis must exist, and be non-empty
    /// for an index reduction.
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
        // A fold over an empty axis (a run-time dim at 0) is its identity (`reduce`); the index
        // of an extreme of nothing is undefined.
        if n == 0 && op.arg().is_some() {
            return Err(ShapeError::Invalid { op: OP, what: "an index reduction (ArgMax, ArgMin) over an empty axis" });
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
pub fn reduce(p: &ReduceParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    reduce_on(crate::kernels::simd::isa(), p, x, y, scratch)
}

/// [`reduce`] compiled for `isa` (the loops vectorise to the x86 tier's width; portable
/// elsewhere): the tests pass each tier in turn.
pub fn reduce_on(isa: Isa, p: &ReduceParams, x: &[f32], y: &mut [f32], _scratch: &mut [f32]) {
    if p.inner == 0 || p.outer == 0 {
        return;
    }
    if p.n == 0 {
        // Over an empty axis (a run-time dim at 0): the fold's identity, finished at n = 0, as
        // ONNX's empty-set cases define it (sum 0, product 1, max −∞, min +∞, L2 0; the mean
        // 0/0, NaN). An index reduction was refused by its params.
        if let Some(v) = p.op.visit_fold(EmptyFold) {
            y[..p.outer * p.inner].fill(v);
        }
        return;
    }
    if p.op.arg().is_some() {
        return arg_on(isa, p, x, y);
    }
    // The fold rows: one loop nest per row of the table, chosen here, outside the loops.
    p.op.visit_fold(FoldRun { isa, p, x, y });
}

multiversion!(
    /// The index reductions ([`ReduceOp::arg`]).
    fn arg / arg_on(p: &ReduceParams, x: &[f32], y: &mut [f32]) => arg_body
);

#[inline(always)]
fn arg_body(p: &ReduceParams, x: &[f32], y: &mut [f32]) {
    let (n, inner) = (p.n, p.inner);
    let slab = n * inner;
    if let Some((max, last)) = p.op.arg() {
        let (xs, ys) = (&x[..p.outer * slab], &mut y[..p.outer * inner]);
        match (max, last) {
            (true, false) => arg_rows::<true, false>(xs, ys, n, inner),
            (true, true) => arg_rows::<true, true>(xs, ys, n, inner),
            (false, false) => arg_rows::<false, false>(xs, ys, n, inner),
            (false, true) => arg_rows::<false, true>(xs, ys, n, inner),
        }
    }
}

/// The index reduction of `xs` (`[outer, n, inner]`) into `ys` (`[outer, inner]`).
#[inline(always)]
fn arg_rows<const MAX: bool, const LAST: bool>(xs: &[f32], ys: &mut [f32], n: usize, inner: usize) {
    if inner == 1 {
        for (xr, o) in xs.chunks_exact(n).zip(ys) {
            *o = arg_row::<MAX, LAST>(xr) as f32;
        }
    } else {
        for (xs, ys) in xs.chunks_exact(n * inner).zip(ys.chunks_exact_mut(inner)) {
            arg_columns::<MAX, LAST>(xs, ys);
        }
    }
}

/// Whether `v` replaces the best value `b` so far (index rule of [`ReduceOp::arg`]: strictly
/// better, or equal when the last extreme is wanted; a NaN never replaces, and a NaN best is
/// never replaced).
#[inline(always)]
fn better<const MAX: bool, const LAST: bool>(v: f32, b: f32) -> bool {
    (MAX && v > b) || (!MAX && v < b) || (LAST && v == b)
}

/// The index of a contiguous row's first (or last) maximum (or minimum) under [`better`]'s rule,
/// in two vectorised passes: the extreme value, then where it is. As the sequential rule never
/// takes a NaN, the best value is `row[0]` if it is NaN (index 0), else the extreme of the
/// non-NaN values, and the index is the first (or last) element equal to it.
#[inline(always)]
fn arg_row<const MAX: bool, const LAST: bool>(row: &[f32]) -> usize {
    let first = row[0];
    if first.is_nan() {
        return 0;
    }
    let pick = |a: f32, v: f32| if (MAX && v > a) || (!MAX && v < a) { v } else { a };
    // NaN compares false: a lane keeps its value.
    let mut lanes = [first; 8];
    let mut chunks = row.chunks_exact(8);
    for ch in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(ch) {
            *l = pick(*l, v);
        }
    }
    let m = chunks.remainder().iter().fold(lanes.iter().fold(first, |a, &v| pick(a, v)), |a, &v| pick(a, v));
    // Where it is: the first (last) block of 16 holding it, found without early exits inside
    // a block, then the element.
    let has = |c: &[f32]| c.iter().fold(false, |a, &v| a | (v == m));
    if LAST {
        let b = row.rchunks(16).position(has).unwrap_or(0);
        let end = row.len() - 16 * b;
        let start = end.saturating_sub(16);
        start + row[start..end].iter().rposition(|&v| v == m).unwrap_or(0)
    } else {
        let b = row.chunks(16).position(has).unwrap_or(0);
        16 * b + row[16 * b..].iter().position(|&v| v == m).unwrap_or(0)
    }
}

/// `ys[i]` = the index over the rows of `xs` (`[n, inner]`, `inner = ys.len()`) of column `i`'s
/// extreme under [`better`]'s rule: the rows swept in order, a block of columns at a time, the
/// best values so far on the stack beside the indices (written as f32 into `ys`).
#[inline(always)]
fn arg_columns<const MAX: bool, const LAST: bool>(xs: &[f32], ys: &mut [f32]) {
    const B: usize = 256;
    let inner = ys.len();
    let mut best = [0f32; B];
    for c0 in (0..inner).step_by(B) {
        let w = B.min(inner - c0);
        let (bv, yb) = (&mut best[..w], &mut ys[c0..c0 + w]);
        bv.copy_from_slice(&xs[c0..c0 + w]);
        yb.fill(0.0);
        for (j, xr) in xs.chunks_exact(inner).enumerate().skip(1) {
            let jf = j as f32;
            for ((b, o), &v) in bv.iter_mut().zip(yb.iter_mut()).zip(&xr[c0..c0 + w]) {
                let t = better::<MAX, LAST>(v, *b);
                *b = if t { v } else { *b };
                *o = if t { jf } else { *o };
            }
        }
    }
}

/// A fold row's value over no element: its init, finished at `n` = 0.
struct EmptyFold;

impl FoldVisitor for EmptyFold {
    type Out = f32;
    fn visit<F: Fold>(self) -> f32 {
        F::finish(F::INIT, 0.0)
    }
}

/// [`fold`] for the row the visitor is given.
struct FoldRun<'a> {
    isa: Isa,
    p: &'a ReduceParams,
    x: &'a [f32],
    y: &'a mut [f32],
}

impl FoldVisitor for FoldRun<'_> {
    type Out = ();
    fn visit<F: Fold>(self) {
        fold_on::<F>(self.isa, self.p, self.x, self.y);
    }
}

multiversion!(
    /// A fold row's reduction.
    fn fold / fold_on<F: Fold>(p: &ReduceParams, x: &[f32], y: &mut [f32]) => fold_body
);

/// A fold row's reduction (`F`'s map, combine and finish), `n` and `inner` non-zero.
#[inline(always)]
fn fold_body<F: Fold>(p: &ReduceParams, x: &[f32], y: &mut [f32]) {
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
