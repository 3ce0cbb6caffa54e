//! 2-D pooling geometry: [`Pool2dParams`] of a `Pool2d` node, checked against its input shape.

use super::Window2d;
use crate::error::{expect_eq, ShapeError};
use core::ops::Deref;
use kestrel_rt_format::ops::{Pool2d, PoolKind};
use kestrel_rt_format::Shape;

/// Shapes and hyper-parameters of a 2-D pooling: what it computes around the [`Window2d`] it
/// slides (whose fields read through, `p.kh`, `p.oh`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dParams {
    /// Max or average.
    pub kind: PoolKind,
    /// Average divisor `kh·kw` (else the number of taps inside the input).
    pub count_include_pad: bool,
    /// Channels C.
    pub c: usize,
    /// The window over the `H × W` input plane, and the output size `H' × W'`.
    pub window: Window2d,
    /// Output columns `inner[0] .. inner[1]` have every tap inside the input columns.
    pub inner: [usize; 2],
}

/// The window's fields, read through (the kernels read `p.kh`, `p.stride`, … and `p.row`,
/// `p.col` as those of the pooling).
impl Deref for Pool2dParams {
    type Target = Window2d;
    #[inline]
    fn deref(&self) -> &Window2d {
        &self.window
    }
}

/// Whether each of the `out` windows along an axis has a tap inside the input `p0 .. p0 + len`
/// (padded coordinates). O(out): the first tap at or past `p0` decides.
fn every_window_hits(len: usize, k: usize, s: usize, d: usize, p0: usize, out: usize) -> bool {
    (0..out).all(|o| {
        let start = o * s;
        let u = if start >= p0 { 0 } else { (p0 - start).div_ceil(d) };
        u < k && start + u * d < p0 + len
    })
}

impl Pool2dParams {
    /// Validates `x [C, H, W]` and the hyper-parameters and computes H', W': sizes ≥ 1, every
    /// window holding at least one input element, `count_include_pad` only for averages.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: PoolKind,
        x: &Shape,
        kernel: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 4],
        dilation: [usize; 2],
        count_include_pad: bool,
    ) -> Result<Self, ShapeError> {
        const OP: &str = "Pool2d";
        expect_eq(OP, "input rank ([C, H, W])", 3, x.rank())?;
        if kernel.contains(&0) || stride.contains(&0) || dilation.contains(&0) {
            return Err(ShapeError::Invalid { op: OP, what: "kernel, stride and dilation must be ≥ 1" });
        }
        if count_include_pad && kind == PoolKind::Max {
            return Err(ShapeError::Invalid { op: OP, what: "count_include_pad applies to average pooling only" });
        }
        let window = Window2d::new(OP, [x.dim(1), x.dim(2)], kernel, stride, pad, dilation)?;
        let Window2d { h, w, kh, kw, oh, ow, .. } = window;
        if !every_window_hits(h, kh, stride[0], dilation[0], pad[0], oh)
            || !every_window_hits(w, kw, stride[1], dilation[1], pad[1], ow)
        {
            return Err(ShapeError::Invalid { op: OP, what: "a pooling window lies entirely in the padding" });
        }
        // Column j is inner when j·sw ≥ pl and j·sw + (kw − 1)·dw < pl + W.
        let lo = pad[1].div_ceil(stride[1]).min(ow);
        let last = (w + pad[1] - 1).checked_sub((kw - 1) * dilation[1]).map_or(0, |v| v / stride[1] + 1);
        let hi = last.clamp(lo, ow);
        let inner = [lo, hi];
        Ok(Self { kind, count_include_pad, c: x.dim(0), window, inner })
    }

    /// [`new`](Self::new) with an op's attributes.
    pub fn of(op: &Pool2d, x: &Shape) -> Result<Self, ShapeError> {
        let u = |v: u32| v as usize;
        Self::new(
            op.kind,
            x,
            op.kernel.map(u),
            op.stride.map(u),
            op.pad.map(u),
            op.dilation.map(u),
            op.count_include_pad,
        )
    }

    /// Output shape `[C, H', W']`.
    pub fn y_shape(&self) -> Option<Shape> {
        Shape::from_usize(&[self.c, self.oh, self.ow])
    }
}
