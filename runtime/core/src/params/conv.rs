//! 2-D convolution geometry: [`Conv2dParams`] of a `Conv2d` node, checked against its input and
//! weight shapes.

use super::Window2d;
use crate::error::{expect_eq, ShapeError};
use core::ops::Deref;
use kestrel_rt_format::ops::Conv2d;
use kestrel_rt_format::Shape;

/// Shapes and hyper-parameters of a 2-D convolution: channels and groups around the
/// [`Window2d`] its kernel slides (whose fields read through, `p.kh`, `p.oh`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    /// Input channels C.
    pub c: usize,
    /// Output channels O.
    pub o: usize,
    /// Groups g (C and O are multiples of g).
    pub groups: usize,
    /// The kernel's window over the `H × W` input plane, and the output size `H' × W'`.
    pub window: Window2d,
}

/// The window's fields, read through (the kernels read `p.kh`, `p.stride`, … as those of the
/// convolution).
impl Deref for Conv2dParams {
    type Target = Window2d;
    #[inline]
    fn deref(&self) -> &Window2d {
        &self.window
    }
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
        let window = Window2d::new(OP, [h, wd], [kh, kw], stride, pad, dilation)?;
        Ok(Self { c, o, groups, window })
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
