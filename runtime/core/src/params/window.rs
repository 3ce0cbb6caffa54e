//! The 2-D sliding-window geometry that convolution ([`Conv2dParams`](super::Conv2dParams)) and
//! pooling ([`Pool2dParams`](super::Pool2dParams)) share: [`Window2d`], its output size computed
//! once for both.

use crate::error::ShapeError;

/// A window of `kh × kw` taps sliding over an `H × W` plane: stride, padding, dilation and the
/// output size `H' × W'` they give (`H' = ⌊(H + pad_top + pad_bottom − dilation_h·(kh − 1) − 1)
/// / stride_h⌋ + 1`, `W'` alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window2d {
    /// Input height H.
    pub h: usize,
    /// Input width W.
    pub w: usize,
    /// Kernel (window) height.
    pub kh: usize,
    /// Kernel (window) width.
    pub kw: usize,
    /// Stride (h, w).
    pub stride: [usize; 2],
    /// Padding (top, left, bottom, right).
    pub pad: [usize; 4],
    /// Dilation (h, w).
    pub dilation: [usize; 2],
    /// Output height H'.
    pub oh: usize,
    /// Output width W'.
    pub ow: usize,
}

/// Output length along one axis (`None` if it would be < 1 or overflows).
fn out_len(len: usize, k: usize, s: usize, d: usize, p0: usize, p1: usize) -> Option<usize> {
    let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let padded = len.checked_add(p0)?.checked_add(p1)?;
    (padded >= span).then(|| (padded - span) / s + 1)
}

impl Window2d {
    /// The window over an `[h, w]` plane and its output size: an error (of `op`) if either
    /// output side would be < 1. The caller has checked kernel, stride and dilation ≥ 1 (each op
    /// with its own message).
    pub(super) fn new(
        op: &'static str,
        [h, w]: [usize; 2],
        [kh, kw]: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 4],
        dilation: [usize; 2],
    ) -> Result<Self, ShapeError> {
        let oh = out_len(h, kh, stride[0], dilation[0], pad[0], pad[2])
            .ok_or(ShapeError::Invalid { op, what: "output height would be < 1" })?;
        let ow = out_len(w, kw, stride[1], dilation[1], pad[1], pad[3])
            .ok_or(ShapeError::Invalid { op, what: "output width would be < 1" })?;
        Ok(Self { h, w, kh, kw, stride, pad, dilation, oh, ow })
    }

    /// Input row of output row `i`'s tap `u`, if it is inside the input.
    #[inline]
    pub fn row(&self, i: usize, u: usize) -> Option<usize> {
        (i * self.stride[0] + u * self.dilation[0]).checked_sub(self.pad[0]).filter(|&r| r < self.h)
    }

    /// Input column of output column `j`'s tap `v`, if it is inside the input.
    #[inline]
    pub fn col(&self, j: usize, v: usize) -> Option<usize> {
        (j * self.stride[1] + v * self.dilation[1]).checked_sub(self.pad[1]).filter(|&c| c < self.w)
    }
}
