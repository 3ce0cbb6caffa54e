//! ONNX GridSample (opset 16 to 22: linear, nearest and cubic interpolation; zeros, border and
//! reflection padding; `align_corners` 0 and 1; any number of spatial axes, 2-D images and 3-D
//! volumes among them) lowered exactly, to f32 rounding, with generic ops.
//!
//! ONNX's definition (its reference `op_grid_sample.py`) is separable: each grid component is
//! unnormalised to a pixel coordinate along its own axis, rounded half to even for nearest,
//! and moved into the image by the padding mode when it lies outside the axis' bounds (border:
//! clamped to `[0, S − 1]`; reflection: reflected off the bounds, `[−½, S − ½]` or `[0, S − 1]`
//! with `align_corners`, until inside); the sample is then the N-D interpolation of the taps
//! around it, each tap index outside the image read as 0 (zeros), at the clamped index (border)
//! or at the reflected index (reflection). So every output point `p` has one weight row per
//! spatial axis, `w_d[p, i]` over the axis' S pixels, and `y[c, p] = Σ x[c, i₁, …, i_k] ·
//! Π_d w_d[p, i_d]`.
//!
//! A weight row is the interpolation kernel at each index's distance from the coordinate —
//! linear: `relu(1 − |u − j|)`; cubic: Keys' kernel with A = −0.75 where `|u − j| < 2`; nearest:
//! `u == j` — over the indices the taps can reach (`−1..=S` for linear, `−2..=S+1` for cubic
//! once the coordinate is padded into the image), then folded onto the S pixels by a constant
//! 0/1 `Dense` saying which pixel each tap index reads (with zeros padding the taps outside the
//! image are simply not there). A grid computed at run time gets those rows from element-wise
//! ops on the coordinates; a constant grid gets them computed here, as constants.
//!
//! The contraction: the last spatial axis by one batched `MatMul` of the input seen as
//! `[N, C·S₁…S_{k−1}, S_k]` with its rows `[N, P, S_k]`, giving `[N, C·S₁…S_{k−1}, P]`; then
//! each other axis, innermost first, by a `Mul` with its rows as `[N, 1, S_d, P]` and a `Sum`
//! over S_d. The largest tensor is `N·C·S₁…S_{k−1}·P` elements; over [`MAX_ELEMENTS`] the node is
//! refused.

use super::{zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{
    Activation, BinaryOp, Dense, MatMul, Op, Proj, Reduce, ReduceOp, TensorId, Unary, UnaryOp,
};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::nn::grid_sample::{GridSample, InterpolationMode, PaddingMode};

/// The most elements any tensor of the lowering (the partial contraction, a weight row block)
/// may have per sample.
const MAX_ELEMENTS: usize = 1 << 26;

/// Keys' cubic convolution coefficient ONNX's GridSample uses.
const CUBIC_A: f64 = -0.75;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Linear,
    Nearest,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pad {
    Zeros,
    Border,
    Reflection,
}

/// How one spatial axis of `size` pixels is sampled.
#[derive(Clone, Copy, Debug)]
struct Rule {
    mode: Mode,
    pad: Pad,
    align: bool,
    size: usize,
}

impl Rule {
    /// The pixel coordinate of a normalised grid value, in f32 as ONNX's reference (and tract)
    /// compute it.
    fn unnormalise(&self, g: f32) -> f32 {
        let s = self.size as f32;
        if self.align {
            (g + 1.0) / 2.0 * (s - 1.0)
        } else {
            ((g + 1.0) * s - 1.0) / 2.0
        }
    }

    /// The bounds a coordinate is padded into: `[−½, S − ½]`, or `[0, S − 1]` with
    /// `align_corners`.
    fn bounds(&self) -> (f64, f64) {
        let s = self.size as f64;
        if self.align {
            (0.0, s - 1.0)
        } else {
            (-0.5, s - 0.5)
        }
    }

    /// The tap indices the weights are computed over (the fold maps them onto `0..S`).
    fn taps(&self) -> (i64, i64) {
        let last = self.size as i64 - 1;
        match (self.pad, self.mode) {
            (Pad::Zeros, _) | (_, Mode::Nearest) => (0, last),
            (_, Mode::Linear) => (-1, last + 1),
            (_, Mode::Cubic) => (-2, last + 2),
        }
    }

    /// The pixel a tap index reads (ONNX's `_pixel_at_array`), `None` for a zero.
    fn pixel(&self, j: f64) -> Option<usize> {
        let last = self.size as f64 - 1.0;
        let i = match self.pad {
            Pad::Zeros => return (j >= 0.0 && j <= last).then_some(j as usize),
            Pad::Border => j.clamp(0.0, last),
            Pad::Reflection => {
                let (lo, hi) = self.bounds();
                reflect(j, lo, hi).trunc()
            }
        };
        (i >= 0.0 && i <= last).then_some(i as usize)
    }

    /// The coordinate `u` moved inside the bounds by the padding mode (ONNX applies it only to
    /// a coordinate outside them).
    fn padded(&self, u: f64) -> f64 {
        let (lo, hi) = self.bounds();
        if u >= lo && u <= hi {
            return u;
        }
        match self.pad {
            Pad::Zeros => u,
            Pad::Border => u.clamp(0.0, self.size as f64 - 1.0),
            Pad::Reflection => reflect(u, lo, hi),
        }
    }

    /// One output point's weights over the axis' pixels (added into `row`, `size` long), from
    /// its grid value: ONNX's reference computation, taps and all.
    fn row(&self, g: f32, row: &mut [f32]) {
        let mut u = self.unnormalise(g);
        if self.mode == Mode::Nearest {
            u = u.round_ties_even();
        }
        // The reference stores the padded coordinate back as f32.
        let u = self.padded(f64::from(u)) as f32 as f64;
        let x0 = u.floor();
        let t = u - x0;
        let mut add = |j: f64, w: f64| {
            if let Some(i) = self.pixel(j) {
                row[i] += w as f32;
            }
        };
        match self.mode {
            Mode::Nearest => add(u.trunc(), 1.0),
            Mode::Linear => {
                add(x0, 1.0 - t);
                add(x0 + 1.0, t);
            }
            Mode::Cubic => {
                for (k, w) in cubic_coeffs(t).into_iter().enumerate() {
                    add(x0 - 1.0 + k as f64, w);
                }
            }
        }
    }
}

/// ONNX's `_gs_reflect`: `x` reflected off the nearer bound until within `[lo, hi]`.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let rng = hi - lo;
    if rng == 0.0 {
        return lo;
    }
    let fold = |dx: f64, near: f64, far: f64, sign: f64| {
        let n = (dx / rng).trunc();
        let r = dx - n * rng;
        if n % 2.0 == 0.0 {
            near + sign * r
        } else {
            far - sign * r
        }
    };
    if x < lo {
        fold(lo - x, lo, hi, 1.0)
    } else if x > hi {
        fold(x - hi, hi, lo, -1.0)
    } else {
        x
    }
}

/// Keys' cubic weights of the taps at offsets −1, 0, 1, 2 from `⌊u⌋`, `t = u − ⌊u⌋`.
fn cubic_coeffs(t: f64) -> [f64; 4] {
    let a = CUBIC_A;
    let outer = |s: f64| ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a;
    let inner = |s: f64| ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0;
    [outer(t + 1.0), inner(t), inner(1.0 - t), outer(2.0 - t)]
}

/// One axis' weight rows `[N, P, S]`: computed at run time or constant.
enum Rows {
    Act(TensorId),
    Const(Vec<f32>),
}

impl Lowerer<'_> {
    /// Lowers GridSample; `Ok(false)` for anything else.
    pub(super) fn try_grid_sample(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<GridSample>() else { return Ok(false) };
        let (mode, pad, align) = (
            match op.mode {
                InterpolationMode::Bilinear => Mode::Linear,
                InterpolationMode::Nearest => Mode::Nearest,
                InterpolationMode::Bicubic => Mode::Cubic,
            },
            match op.padding_mode {
                PaddingMode::Zeros => Pad::Zeros,
                PaddingMode::Border => Pad::Border,
                PaddingMode::Reflection => Pad::Reflection,
            },
            op.align_corners,
        );
        let (x, xs) = match self.val(node.inputs[0])? {
            Val::Act { .. } => self.act(node.inputs[0])?,
            Val::Const(_) => {
                return Err(self.unsupported("GridSample of a constant input (only its grid may be a constant)"))
            }
        };
        let grid = self.val(node.inputs[1])?;
        let gs = grid.shape();
        let out = self.out_shape()?;
        let k = xs.len().saturating_sub(2);
        if k == 0 || gs.len() != k + 2 || gs[0] != xs[0] || gs[k + 1] != k {
            return Err(
                self.bad("an input [N, C, S…] and a grid [N, O…, k] with k spatial axes", format!("{xs:?}, {gs:?}"))
            );
        }
        let (n, c) = (xs[0], xs[1]);
        let p: usize = gs[1..=k].iter().product();
        if xs.iter().chain(&gs).any(|&d| d == 0) {
            return Err(self.unsupported("GridSample with an empty axis"));
        }
        let rules: Vec<Rule> = xs[2..].iter().map(|&size| Rule { mode, pad, align, size }).collect();
        // The largest tensors: the partial contraction `[N, C·S₁…S_{k−1}, P]` and the weight rows
        // `[N, P, taps]` of an axis.
        let inner: usize = c * xs[2..xs.len() - 1].iter().product::<usize>();
        let widest = rules.iter().map(|r| (r.taps().1 - r.taps().0 + 1) as usize).max().unwrap_or(1);
        let largest = n.saturating_mul(p).saturating_mul(inner.max(widest));
        if largest > MAX_ELEMENTS {
            return Err(self.unsupported(&format!(
                "GridSample of {xs:?} at {p} points: a {largest}-element intermediate, over {MAX_ELEMENTS}"
            )));
        }
        let rows: Vec<Rows> = match grid {
            Val::Const(t) => {
                let g = super::f32s(&t)?;
                rules
                    .iter()
                    .enumerate()
                    .map(|(d, r)| {
                        let mut w = zeros([n, p, r.size], "GridSample's weight rows")?;
                        for (q, row) in w.chunks_mut(r.size).enumerate() {
                            r.row(g[q * k + (k - 1 - d)], row);
                        }
                        Ok(Rows::Const(w))
                    })
                    .collect::<Res<_>>()?
            }
            Val::Act { .. } => {
                let (g, gshape) = self.act(node.inputs[1])?;
                let g = self.reshape(g, &gshape, &[n, p, k])?;
                rules
                    .iter()
                    .enumerate()
                    .map(|(d, r)| Ok(Rows::Act(self.grid_rows(g, k, k - 1 - d, r)?)))
                    .collect::<Res<_>>()?
            }
        };
        let y = self.contract(x, &xs, rows, p)?;
        let y = self.reshape(y, &[n, c, p], &out)?;
        self.out(y, out);
        self.count_fused("grid-sample-as-separable-weights");
        Ok(true)
    }

    /// `y[n, c, p] = Σ x[n, c, i₁…i_k] Π_d rows_d[n, p, i_d]`: the last axis by a MatMul, each
    /// other one by a Mul and a Sum (see the module docs). Returns `[N, C, P]`.
    fn contract(&mut self, x: TensorId, xs: &[usize], rows: Vec<Rows>, p: usize) -> Res<TensorId> {
        let here = OutletId::new(self.node, 0);
        let (n, k) = (xs[0], xs.len() - 2);
        let sizes = &xs[2..];
        let mut r: usize = xs[1] * sizes[..k - 1].iter().product::<usize>();
        let mut rows = rows;
        let last = rows.pop().ok_or_else(|| self.bad("a spatial axis", "none".into()))?;
        let s = sizes[k - 1];
        let b = match last {
            Rows::Act(id) => id,
            Rows::Const(w) => self.weight_f32(here, "grid_sample_rows", &[n, p, s], w)?,
        };
        let a = self.reshape(x, xs, &[n, r, s])?;
        let mut t = self.b.op(|y| Op::MatMul(MatMul { a, b, transpose_b: true, y }))?;
        for (d, rows) in rows.into_iter().enumerate().rev() {
            let s = sizes[d];
            r /= s;
            let w = match rows {
                Rows::Act(id) => {
                    let (wt, ws) = self.transpose(id, &[n, p, s], &[0, 2, 1])?;
                    self.reshape(wt, &ws, &[n, 1, s, p])?
                }
                Rows::Const(w) => {
                    let mut wt = zeros([n, s, p], "GridSample's weight rows")?;
                    for (e, v) in w.into_iter().enumerate() {
                        let (b, q, i) = (e / (p * s), e / s % p, e % s);
                        wt[(b * s + i) * p + q] = v;
                    }
                    self.weight_f32(here, "grid_sample_rows", &[n, 1, s, p], wt)?
                }
            };
            let tv = self.reshape(t, &[n, r * s, p], &[n, r, s, p])?;
            let m = self.binary_op(tv, w, BinaryOp::Mul)?;
            t = self.b.op(|y| Op::Reduce(Reduce { x: m, op: ReduceOp::Sum, axis: 2, keep_dims: false, y }))?;
        }
        Ok(t)
    }

    /// A scalar f32 constant `[1]`.
    fn gs_scalar(&mut self, v: f32) -> Res<TensorId> {
        self.weight_f32(OutletId::new(self.node, 0), "grid_sample_scalar", &[1], vec![v])
    }

    /// `x op v`, `v` a scalar constant.
    fn gs_with(&mut self, x: TensorId, op: BinaryOp, v: f32) -> Res<TensorId> {
        let c = self.gs_scalar(v)?;
        self.binary_op(x, c, op)
    }

    fn gs_unary(&mut self, x: TensorId, op: UnaryOp) -> Res<TensorId> {
        Ok(self.b.op(|y| Op::Unary(Unary { x, op, y }))?)
    }

    /// The weight rows `[N, P, S]` of the axis `r` describes, from component `comp` of the grid
    /// `g [N, P, k]` computed at run time.
    fn grid_rows(&mut self, g: TensorId, k: usize, comp: usize, r: &Rule) -> Res<TensorId> {
        let here = OutletId::new(self.node, 0);
        let s = r.size as f32;
        // The component: [N, P, 1].
        let gc = if k == 1 {
            g
        } else {
            let pick: Vec<f32> = (0..k).map(|i| f32::from(u8::from(i == comp))).collect();
            let pick = self.weight_f32(here, "grid_sample_component", &[1, k], pick)?;
            self.b.op(|y| {
                Op::Dense(Dense { clamp: None, x: g, proj: Proj { w: pick, b: None }, act: Activation::None, y })
            })?
        };
        // The pixel coordinate, in the reference's order of operations.
        let t = self.gs_with(gc, BinaryOp::Add, 1.0)?;
        let mut u = if r.align {
            let t = self.gs_with(t, BinaryOp::Mul, 0.5)?;
            self.gs_with(t, BinaryOp::Mul, s - 1.0)?
        } else {
            let t = self.gs_with(t, BinaryOp::Mul, s)?;
            let t = self.gs_with(t, BinaryOp::Add, -1.0)?;
            self.gs_with(t, BinaryOp::Mul, 0.5)?
        };
        if r.mode == Mode::Nearest {
            u = self.gs_unary(u, UnaryOp::Round)?;
        }
        if r.pad != Pad::Zeros {
            u = self.pad_coordinate(u, r)?;
        }
        // The kernel at every tap index.
        let (j0, j1) = r.taps();
        let e = (j1 - j0 + 1) as usize;
        let js: Vec<f32> = (j0..=j1).map(|j| j as f32).collect();
        let js = self.weight_f32(here, "grid_sample_taps", &[e], js)?;
        let w = match r.mode {
            Mode::Nearest => self.binary_op(u, js, BinaryOp::Equal)?,
            Mode::Linear => {
                let d = self.binary_op(u, js, BinaryOp::Sub)?;
                let d = self.gs_unary(d, UnaryOp::Abs)?;
                let one = self.gs_scalar(1.0)?;
                let w = self.binary_op(one, d, BinaryOp::Sub)?;
                self.gs_unary(w, UnaryOp::Relu)?
            }
            Mode::Cubic => self.cubic_kernel(u, js)?,
        };
        if (j0, j1) == (0, r.size as i64 - 1) {
            return Ok(w);
        }
        // Fold the tap indices onto the pixels they read.
        let mut fold = zeros([r.size, e], "GridSample's tap fold")?;
        for (col, j) in (j0..=j1).enumerate() {
            if let Some(i) = r.pixel(j as f64) {
                fold[i * e + col] += 1.0;
            }
        }
        let fold = self.weight_f32(here, "grid_sample_fold", &[r.size, e], fold)?;
        Ok(self.b.op(|y| {
            Op::Dense(Dense { clamp: None, x: w, proj: Proj { w: fold, b: None }, act: Activation::None, y })
        })?)
    }

    /// Keys' cubic kernel (A = −0.75) of the distance `|u − j|`: `((A+2)s − (A+3))s² + 1` for
    /// s ≤ 1, `((As − 5A)s + 8A)s − 4A` for 1 < s < 2, else 0.
    fn cubic_kernel(&mut self, u: TensorId, js: TensorId) -> Res<TensorId> {
        let a = CUBIC_A as f32;
        let d = self.binary_op(u, js, BinaryOp::Sub)?;
        let s = self.gs_unary(d, UnaryOp::Abs)?;
        let s2 = self.binary_op(s, s, BinaryOp::Mul)?;
        let i = self.gs_with(s, BinaryOp::Mul, a + 2.0)?;
        let i = self.gs_with(i, BinaryOp::Add, -(a + 3.0))?;
        let i = self.binary_op(i, s2, BinaryOp::Mul)?;
        let inner = self.gs_with(i, BinaryOp::Add, 1.0)?;
        let o = self.gs_with(s, BinaryOp::Mul, a)?;
        let o = self.gs_with(o, BinaryOp::Add, -5.0 * a)?;
        let o = self.binary_op(o, s, BinaryOp::Mul)?;
        let o = self.gs_with(o, BinaryOp::Add, 8.0 * a)?;
        let o = self.binary_op(o, s, BinaryOp::Mul)?;
        let outer = self.gs_with(o, BinaryOp::Add, -4.0 * a)?;
        let near = self.gs_with(s, BinaryOp::LessEq, 1.0)?;
        let within = self.gs_with(s, BinaryOp::Less, 2.0)?;
        let inner = self.binary_op(inner, near, BinaryOp::When)?;
        let outer = self.binary_op(outer, within, BinaryOp::When)?;
        let outer = self.binary_op(outer, near, BinaryOp::Unless)?;
        self.binary_op(inner, outer, BinaryOp::Add)
    }

    /// The coordinate `u` moved inside the bounds by border or reflection padding, where it is
    /// outside them (inside it is kept as it is). Reflection off `[lo, hi]` (range ρ) is the
    /// triangle wave `lo + ρ − |fmod(|u − lo|, 2ρ) − ρ|`.
    fn pad_coordinate(&mut self, u: TensorId, r: &Rule) -> Res<TensorId> {
        let (lo, hi) = r.bounds();
        let (lo, hi) = (lo as f32, hi as f32);
        let below = self.gs_with(u, BinaryOp::Less, lo)?;
        let above = self.gs_with(u, BinaryOp::Greater, hi)?;
        let outside = self.binary_op(below, above, BinaryOp::Or)?;
        let moved = match r.pad {
            Pad::Border => {
                let v = self.gs_with(u, BinaryOp::Max, 0.0)?;
                self.gs_with(v, BinaryOp::Min, r.size as f32 - 1.0)?
            }
            Pad::Reflection if hi == lo => self.gs_scalar(lo)?,
            Pad::Reflection => {
                let rng = hi - lo;
                let v = self.gs_with(u, BinaryOp::Add, -lo)?;
                let v = self.gs_unary(v, UnaryOp::Abs)?;
                let v = self.gs_with(v, BinaryOp::Fmod, 2.0 * rng)?;
                let v = self.gs_with(v, BinaryOp::Add, -rng)?;
                let v = self.gs_unary(v, UnaryOp::Abs)?;
                let top = self.gs_scalar(rng + lo)?;
                self.binary_op(top, v, BinaryOp::Sub)?
            }
            Pad::Zeros => return Ok(u),
        };
        let moved = self.binary_op(moved, outside, BinaryOp::When)?;
        let kept = self.binary_op(u, outside, BinaryOp::Unless)?;
        self.binary_op(moved, kept, BinaryOp::Add)
    }
}
