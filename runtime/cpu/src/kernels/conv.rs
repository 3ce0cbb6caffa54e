//! Generic 2-D convolution, NCHW per sample: `x [C, H, W]`, weight `[O, C/g, kh, kw]` in any
//! encoding (viewed as the matrix `[O, C/g·kh·kw]`), optional bias `[O]`, output `[O, H', W']`.
//! Stride, padding (top, left, bottom, right; zeros), dilation and groups.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::linear::ProjW;
use kestrel_format::ops::Activation;
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

    /// Input channels per group times kernel area: the weight matrix's columns.
    pub fn patch_len(&self) -> usize {
        self.c / self.groups * self.kh * self.kw
    }

    /// Output shape `[O, H', W']`.
    pub fn y_shape(&self) -> Option<Shape> {
        Shape::from_usize(&[self.o, self.oh, self.ow])
    }

    /// Checks the weight matrix is `[O, C/g·kh·kw]` and the bias (if any) has `O` elements.
    pub fn check_weights(&self, proj: &ProjW<'_>) -> Result<(), ShapeError> {
        proj.check("Conv2d", self.o, self.patch_len())
    }
}

/// Scratch for [`conv2d`] at least: one decoded weight row (the direct loop).
pub fn conv2d_scratch(p: &Conv2dParams) -> usize {
    p.patch_len()
}

/// Scratch for [`conv2d`]'s im2col + GEMM path (ungrouped convolutions; what the planner
/// reserves): the `[H'·W', C·kh·kw]` patches and the `[H'·W', O]` product.
pub fn conv2d_scratch_fast(p: &Conv2dParams) -> usize {
    let plane = p.oh * p.ow;
    let gemm = if p.groups == 1 { plane * p.patch_len() + plane * p.o } else { 0 };
    gemm.max(conv2d_scratch(p))
}

/// `y [O, H', W']` = conv(x, w) + b. Ungrouped with [`conv2d_scratch_fast`] scratch: the
/// patches are gathered (zeros where the window leaves the padded input) and multiplied with
/// the weights by the dense kernels ([`linear`](crate::kernels::linear::linear): SIMD, any
/// encoding, threads), then transposed into `y` with the bias. Otherwise (grouped, or a file
/// planned with less scratch): a direct loop, each weight row decoded once.
pub fn conv2d(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    if p.groups == 1 && scratch.len() >= conv2d_scratch_fast(p) {
        return conv2d_gemm(p, proj, x, y, scratch);
    }
    conv2d_direct(p, proj, x, y, scratch)
}

/// Ungrouped convolution as im2col + GEMM.
fn conv2d_gemm(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (h, w, kh, kw) = (p.h, p.w, p.kh, p.kw);
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let (pt, pl) = (p.pad[0], p.pad[1]);
    let plane = p.oh * p.ow;
    let k = p.patch_len();
    let (patches, rest) = scratch.split_at_mut(plane * k);
    let prod = &mut rest[..plane * p.o];
    for oy in 0..p.oh {
        for ox in 0..p.ow {
            let row = &mut patches[(oy * p.ow + ox) * k..][..k];
            for ci in 0..p.c {
                let xc = &x[ci * h * w..][..h * w];
                for ky in 0..kh {
                    let dst = &mut row[(ci * kh + ky) * kw..][..kw];
                    let ty = oy * sh + ky * dh;
                    if ty < pt || ty - pt >= h {
                        dst.fill(0.0);
                        continue;
                    }
                    let xr = &xc[(ty - pt) * w..][..w];
                    let x0 = ox * sw;
                    if dw == 1 && x0 >= pl && x0 - pl + kw <= w {
                        // The whole window row is inside: one copy.
                        dst.copy_from_slice(&xr[x0 - pl..x0 - pl + kw]);
                    } else {
                        for (kx, d) in dst.iter_mut().enumerate() {
                            let tx = x0 + kx * dw;
                            *d = if tx >= pl && tx - pl < w { xr[tx - pl] } else { 0.0 };
                        }
                    }
                }
            }
        }
    }
    // prod [plane, O] = patches · Wᵀ (f32 activations, as the direct loop), then
    // y [O, plane] = prodᵀ + b.
    crate::kernels::linear::linear(patches, plane, &proj.w, None, Activation::None, prod);
    for (o, yp) in y[..p.o * plane].chunks_exact_mut(plane).enumerate() {
        let bias = proj.b.map_or(0.0, |b| b.get(o / b.cols(), o % b.cols()));
        for (i, v) in yp.iter_mut().enumerate() {
            *v = prod[i * p.o + o] + bias;
        }
    }
}

/// The output columns `ox` whose tap `tx = ox·sw + off − pl` lies inside `0..w`, as a range.
#[inline]
fn valid_cols(ow: usize, w: usize, sw: usize, off: usize, pl: usize) -> core::ops::Range<usize> {
    // tx ≥ 0 ⇔ ox·sw ≥ pl − off; tx < w ⇔ ox·sw < w + pl − off.
    let lo = pl.saturating_sub(off).div_ceil(sw);
    let hi = if w + pl > off { (w + pl - off).div_ceil(sw).min(ow) } else { 0 };
    lo.min(hi)..hi
}

/// Grouped (depthwise included) convolution, direct (no im2col), each weight row decoded once.
/// Output-stationary by rows: for every tap `(ci, ky, kx)` and output row, one branch-free
/// `y_row[ox] += w · x_row[ox·sw + off]` over the columns whose tap is inside the input (a
/// contiguous, vectorised axpy at stride 1). Each output accumulates its taps in the same
/// `(ci, ky, kx)` order as a per-pixel loop, then adds the bias.
fn conv2d_direct(p: &Conv2dParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (h, w, kh, kw) = (p.h, p.w, p.kh, p.kw);
    let cg = p.c / p.groups;
    let og = p.o / p.groups;
    let [sh, sw] = p.stride;
    let [dh, dw] = p.dilation;
    let (pt, pl) = (p.pad[0], p.pad[1]);
    let (oh, ow) = (p.oh, p.ow);
    let plane = oh * ow;
    for (oc, yp) in y[..p.o * plane].chunks_exact_mut(plane).enumerate() {
        let c0 = (oc / og) * cg;
        let wr = proj.w.row(oc, scratch);
        let bias = proj.b.map_or(0.0, |b| b.get(oc / b.cols(), oc % b.cols()));
        yp.fill(0.0);
        for ci in 0..cg {
            let xc = &x[(c0 + ci) * h * w..][..h * w];
            for ky in 0..kh {
                let wk = &wr[(ci * kh + ky) * kw..][..kw];
                for (oy, yr) in yp.chunks_exact_mut(ow).enumerate() {
                    let ty = oy * sh + ky * dh;
                    if ty < pt || ty - pt >= h {
                        continue;
                    }
                    let xr = &xc[(ty - pt) * w..][..w];
                    for (kx, &wv) in wk.iter().enumerate() {
                        let off = kx * dw;
                        let cols = valid_cols(ow, w, sw, off, pl);
                        if cols.is_empty() {
                            continue;
                        }
                        let first = cols.start * sw + off - pl;
                        let yseg = &mut yr[cols.clone()];
                        if sw == 1 {
                            let xs = &xr[first..first + yseg.len()];
                            for (o, &v) in yseg.iter_mut().zip(xs) {
                                *o += v * wv;
                            }
                        } else {
                            for (j, o) in yseg.iter_mut().enumerate() {
                                *o += xr[first + j * sw] * wv;
                            }
                        }
                    }
                }
            }
        }
        if bias != 0.0 {
            for v in yp.iter_mut() {
                *v += bias;
            }
        }
    }
}
