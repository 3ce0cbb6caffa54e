//! 2-D convolution geometry: [`Conv2dParams`] of a `Conv2d` node, checked against its input and
//! weight shapes.

use crate::error::{expect_eq, ShapeError};
use kestrel_format::ops::Conv2d;
use kestrel_format::Shape;

/// Shapes and hyper-parameters of a 2-D convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    /// Input channels C.
    pub c: usize,
    /// Input height H.
    pub h: usize,
    /// Input width W.
    pub w: usize,
    /// Output channels O.
    pub o: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride (h, w).
    pub stride: [usize; 2],
    /// Padding (top, left, bottom, right).
    pub pad: [usize; 4],
    /// Dilation (h, w).
    pub dilation: [usize; 2],
    /// Groups g (C and O are multiples of g).
    pub groups: usize,
    /// Output height H'.
    pub oh: usize,
    /// Output width W'.
    pub ow: usize,
}

impl Conv2dParams {
    /// Validates `x [C, H, W]` and the weight shape `w [O, C/g, kh, kw]` and computes H', W'
    /// (an error if either would be < 1).
    pub fn new(
        x: &Shape,
        w: &Shape,
        stride: [usize; 2],
        pad: [usize; 4],
        dilation: [usize; 2],
        groups: usize,
    ) -> Result<Self, ShapeError> {
        const OP: &str = "Conv2d";
        expect_eq(OP, "input rank", 3, x.rank())?;
        expect_eq(OP, "weight rank", 4, w.rank())?;
        if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "stride, dilation and groups must be ≥ 1" });
        }
        let (c, h, wd) = (x.dim(0), x.dim(1), x.dim(2));
        let (o, cg, kh, kw) = (w.dim(0), w.dim(1), w.dim(2), w.dim(3));
        if kh == 0 || kw == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "empty kernel" });
        }
        if c % groups != 0 || o % groups != 0 {
            return Err(ShapeError::Invalid { op: OP, what: "channels must be multiples of groups" });
        }
        expect_eq(OP, "weight input channels (C/groups)", c / groups, cg)?;
        let out = |len: usize, p0: usize, p1: usize, k: usize, s: usize, d: usize| {
            let span = d.checked_mul(k - 1)?.checked_add(1)?;
            let padded = len.checked_add(p0)?.checked_add(p1)?;
            (padded >= span).then(|| (padded - span) / s + 1)
        };
        let oh = out(h, pad[0], pad[2], kh, stride[0], dilation[0])
            .ok_or(ShapeError::Invalid { op: OP, what: "output height would be < 1" })?;
        let ow = out(wd, pad[1], pad[3], kw, stride[1], dilation[1])
            .ok_or(ShapeError::Invalid { op: OP, what: "output width would be < 1" })?;
        Ok(Self { c, h, w: wd, o, kh, kw, stride, pad, dilation, groups, oh, ow })
    }

    /// [`new`](Self::new) with an op's attributes, `x` its input's shape and `w` its weight's.
    pub fn of(op: &Conv2d, x: &Shape, w: &Shape) -> Result<Self, ShapeError> {
        let u = |v: u32| v as usize;
        Self::new(x, w, op.stride.map(u), op.pad.map(u), op.dilation.map(u), u(op.groups))
    }

    /// Input channels per group times kernel area: the weight matrix's columns.
    pub fn patch_len(&self) -> usize {
        self.c / self.groups * self.kh * self.kw
    }

    /// Output shape `[O, H', W']`.
    pub fn y_shape(&self) -> Option<Shape> {
        Shape::from_usize(&[self.o, self.oh, self.ow])
    }
}
