//! Element-wise ops: every [`UnaryOp`], and every [`BinaryOp`] with numpy broadcasting of
//! per-sample shapes (rank ≤ [`MAX_RANK`]), where either operand may be a weight.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::simd::{self, multiversion::multiversion, vmath::Operand2};
use crate::kernels::strided::{for_each_index, outer_dims};
use crate::math;
use kestrel_rt_format::ops::{BinaryKernel, BinaryOp, UnaryKernel, UnaryOp};
use kestrel_rt_format::{Shape, WeightData, WeightView, MAX_RANK};

/// One input of an element-wise or matmul kernel, row-major in its logical shape (the shape
/// itself lives in the kernel's params): an activation, or a weight in any encoding.
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    /// An f32 activation of this sample.
    Act(&'a [f32]),
    /// A weight, flattened row-major; its matrix view is [`Shape::as_matrix`] of its shape.
    Weight(WeightView<'a>),
}

impl<'a> Operand<'a> {
    /// Element count.
    pub fn len(&self) -> usize {
        match self {
            Operand::Act(s) => s.len(),
            Operand::Weight(w) => w.len(),
        }
    }

    /// True when the operand has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole operand as f32 without copying, when it is stored as f32.
    #[inline]
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self {
            Operand::Act(s) => Some(s),
            Operand::Weight(w) => w.as_f32(),
        }
    }

    /// Flat element `i` in f32 (weights decoded on the fly).
    #[inline]
    pub fn at(&self, i: usize) -> f32 {
        match self {
            Operand::Act(s) => s[i],
            Operand::Weight(w) => match w.data() {
                WeightData::F32(d) => d[i],
                _ => {
                    let c = w.cols();
                    w.get(i / c, i % c)
                }
            },
        }
    }

    /// Checks the operand holds exactly `numel` elements.
    pub fn check_len(&self, op: &'static str, what: &'static str, numel: usize) -> Result<(), ShapeError> {
        expect_eq(op, what, numel, self.len())
    }
}

/// Dims of `s` as `usize`, padded with zeros, and its rank.
pub(crate) fn dims_of(s: &Shape) -> ([usize; MAX_RANK], usize) {
    let mut d = [0usize; MAX_RANK];
    for (o, &v) in d.iter_mut().zip(s.dims()) {
        *o = v as usize;
    }
    (d, s.rank())
}

/// numpy broadcasting of two dim lists aligned on the right: the output dims and rank.
pub(crate) fn broadcast_dims(
    op: &'static str,
    a: &[usize],
    b: &[usize],
) -> Result<([usize; MAX_RANK], usize), ShapeError> {
    let r = a.len().max(b.len());
    if r > MAX_RANK {
        return Err(ShapeError::Invalid { op, what: "broadcast rank exceeds 6" });
    }
    let mut out = [0usize; MAX_RANK];
    for i in 0..r {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(ShapeError::Mismatch { op, what: "broadcast dim", expected: da, found: db });
        };
    }
    Ok((out, r))
}

/// Strides (in elements) with which an operand of dims `src` is read along each axis of an
/// output of rank `r`: 0 on a broadcast (size-1 or missing) axis.
pub(crate) fn broadcast_strides(src: &[usize], r: usize) -> [usize; MAX_RANK] {
    let mut st = [0usize; MAX_RANK];
    let off = r - src.len();
    let mut acc = 1usize;
    for j in (0..src.len()).rev() {
        st[off + j] = if src[j] == 1 { 0 } else { acc };
        acc *= src[j];
    }
    st
}

/// Element-wise unary op over `n` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnaryParams {
    /// The function.
    pub op: UnaryOp,
    /// Element count of input and output.
    pub n: usize,
}

impl UnaryParams {
    /// Params for `op` over an input of shape `x` (the output has the same shape).
    pub fn new(op: UnaryOp, x: &Shape) -> Result<Self, ShapeError> {
        let n = x.numel().ok_or(ShapeError::Invalid { op: "Unary", what: "element count overflows" })?;
        Ok(Self { op, n })
    }
}

/// Scratch for [`unary`]: none.
pub fn unary_scratch(_p: &UnaryParams) -> usize {
    0
}

/// The scalar function of a [`UnaryOp`] in f32: the CPU's fast forms of GELU and the sigmoid
/// family (shared with the fused activations), the format table's f32 definition otherwise.
#[inline]
pub fn unary_fn(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Gelu => math::gelu(x),
        UnaryOp::GeluTanh => math::gelu_tanh(x),
        UnaryOp::Sigmoid => math::sigmoid(x),
        UnaryOp::Silu => x * math::sigmoid(x),
        UnaryOp::HardSwish => x * math::hard_sigmoid(x),
        UnaryOp::HardSigmoid => math::hard_sigmoid(x),
        op => op.eval(x),
    }
}

multiversion!(
    /// `y = op(x)` element-wise (`p.n` elements). `scratch` is unused. Compiled for the
    /// detected x86 tier (the loops vectorise to its width), portable elsewhere.
    pub fn unary / unary_on(p: &UnaryParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) => unary_body
);

#[inline(always)]
fn unary_body(p: &UnaryParams, x: &[f32], y: &mut [f32], _scratch: &mut [f32]) {
    let (x, y) = (&x[..p.n], &mut y[..p.n]);
    macro_rules! map {
        ($f:expr) => {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = $f(v);
            }
        };
    }
    macro_rules! in_place {
        ($f:path) => {{
            y.copy_from_slice(x);
            $f(y);
        }};
    }
    // The vectorised math layer (exp, log, erf, softplus, the trigonometric and hyperbolic
    // functions and their inverses, tanh, the roundings, √, 1/√) where the ISA has it: straight
    // from `x` into `y`.
    if simd::unary_map(p.op, x, y) {
        return;
    }
    // One loop per function so each vectorises or at least avoids a per-element branch.
    match p.op {
        UnaryOp::Relu => map!(|v: f32| if v <= 0.0 { 0.0 } else { v }),
        UnaryOp::Neg => map!(|v: f32| -v),
        UnaryOp::Abs => map!(libm::fabsf),
        UnaryOp::Reciprocal => map!(|v: f32| 1.0 / v),
        UnaryOp::HardSwish => map!(|v: f32| v * math::hard_sigmoid(v)),
        UnaryOp::HardSigmoid => map!(math::hard_sigmoid),
        // The vectorised GELU, and the sigmoid and tanh of the recurrent kernels (x86; libm
        // elsewhere): in place on a copy.
        UnaryOp::Gelu => in_place!(crate::kernels::simd::gelu),
        UnaryOp::Sigmoid => in_place!(crate::kernels::simd::sigmoid),
        UnaryOp::Tanh => in_place!(crate::kernels::simd::tanh),
        UnaryOp::Silu => in_place!(crate::kernels::simd::silu),
        UnaryOp::GeluTanh => in_place!(crate::kernels::simd::gelu_tanh),
        // Every other function: one loop per function from the format's table (the function
        // inlined into its loop), or, on a microcontroller, one loop with the match inside.
        op if FN_LOOPS => op.with_fn(Map { x, y }),
        op => map!(|v| unary_fn(op, v)),
    }
}

/// Whether the element-wise kernels get one loop per function and operand form (the format
/// table's `with_fn`): on the 64-bit targets; a microcontroller keeps one loop per form with the
/// function chosen per element (its flash budget).
const FN_LOOPS: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// `y[i] = f(x[i])`.
struct Map<'a> {
    x: &'a [f32],
    y: &'a mut [f32],
}

impl UnaryKernel for Map<'_> {
    type Out = ();
    #[inline(always)]
    fn run<F: Fn(f32) -> f32 + Copy>(self, f: F) {
        for (o, &v) in self.y.iter_mut().zip(self.x) {
            *o = f(v);
        }
    }
}

/// `y[i] = f(a[i], b[i])`.
struct Zip<'a> {
    y: &'a mut [f32],
    a: &'a [f32],
    b: &'a [f32],
}

impl BinaryKernel for Zip<'_> {
    type Out = ();
    #[inline(always)]
    fn run<F: Fn(f32, f32) -> f32 + Copy>(self, f: F) {
        for ((o, &u), &v) in self.y.iter_mut().zip(self.a).zip(self.b) {
            *o = f(u, v);
        }
    }
}

/// `y[i] = f(x[i], s)`, or `f(s, x[i])` where `scalar_left`.
struct WithScalar<'a> {
    y: &'a mut [f32],
    x: &'a [f32],
    s: f32,
    scalar_left: bool,
}

impl BinaryKernel for WithScalar<'_> {
    type Out = ();
    #[inline(always)]
    fn run<F: Fn(f32, f32) -> f32 + Copy>(self, f: F) {
        let s = self.s;
        if self.scalar_left {
            for (o, &v) in self.y.iter_mut().zip(self.x) {
                *o = f(s, v);
            }
        } else {
            for (o, &v) in self.y.iter_mut().zip(self.x) {
                *o = f(v, s);
            }
        }
    }
}

/// `y[r·run + j] = f(x[r·run + j], s[r])` (`f(s[r], …)` where `swapped`) for every run `r`.
struct PerRun<'a> {
    y: &'a mut [f32],
    x: &'a [f32],
    s: &'a [f32],
    run: usize,
    swapped: bool,
}

impl BinaryKernel for PerRun<'_> {
    type Out = ();
    #[inline(always)]
    fn run<F: Fn(f32, f32) -> f32 + Copy>(self, f: F) {
        let rows = self.y.chunks_exact_mut(self.run).zip(self.x.chunks_exact(self.run)).zip(self.s);
        if self.swapped {
            for ((yr, xr), &c) in rows {
                for (o, &v) in yr.iter_mut().zip(xr) {
                    *o = f(c, v);
                }
            }
        } else {
            for ((yr, xr), &c) in rows {
                for (o, &v) in yr.iter_mut().zip(xr) {
                    *o = f(v, c);
                }
            }
        }
    }
}

/// The general broadcast loop: both operands read through their strides, one output row of the
/// last axis at a time.
struct Strided<'a, GA, GB> {
    p: &'a BinaryParams,
    ga: GA,
    gb: GB,
    y: &'a mut [f32],
}

impl<GA: Fn(usize) -> f32, GB: Fn(usize) -> f32> BinaryKernel for Strided<'_, GA, GB> {
    type Out = ();
    #[inline(always)]
    fn run<F: Fn(f32, f32) -> f32 + Copy>(self, f: F) {
        let Strided { p, ga, gb, y } = self;
        let r = p.y.rank();
        let last = p.y.last();
        let (sa, sb) = if r == 0 { (0, 0) } else { (p.a_strides[r - 1], p.b_strides[r - 1]) };
        let (dims, outer) = outer_dims(&p.y);
        for_each_index(&dims[..outer], [&p.a_strides, &p.b_strides], |i, [oa, ob]| {
            let row = &mut y[i * last..(i + 1) * last];
            match (sa, sb) {
                // The row of one operand contiguous, the other's one value (a broadcast column).
                (1, 0) => {
                    let c = gb(ob);
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = f(ga(oa + j), c);
                    }
                }
                (0, 1) => {
                    let c = ga(oa);
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = f(c, gb(ob + j));
                    }
                }
                _ => {
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = f(ga(oa + j * sa), gb(ob + j * sb));
                    }
                }
            }
        });
    }
}

/// Element-wise binary op with numpy broadcasting of the two operands' per-sample shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryParams {
    /// The function.
    pub op: BinaryOp,
    /// Left operand's shape.
    pub a: Shape,
    /// Right operand's shape.
    pub b: Shape,
    /// Output (broadcast) shape.
    pub y: Shape,
    /// Output element count.
    pub n: usize,
    a_elems: usize,
    b_elems: usize,
    a_strides: [usize; MAX_RANK],
    b_strides: [usize; MAX_RANK],
}

impl BinaryParams {
    /// Broadcasts `a` against `b`; a typed error if a pair of dims is neither equal nor 1.
    pub fn new(op: BinaryOp, a: &Shape, b: &Shape) -> Result<Self, ShapeError> {
        const OP: &str = "Binary";
        let (da, ra) = dims_of(a);
        let (db, rb) = dims_of(b);
        let (dy, r) = broadcast_dims(OP, &da[..ra], &db[..rb])?;
        let y = Shape::from_usize(&dy[..r]).ok_or(ShapeError::Invalid { op: OP, what: "output dim overflows u32" })?;
        let overflow = ShapeError::Invalid { op: OP, what: "element count overflows" };
        Ok(Self {
            op,
            a: *a,
            b: *b,
            y,
            n: y.numel().ok_or(overflow)?,
            a_elems: a.numel().ok_or(overflow)?,
            b_elems: b.numel().ok_or(overflow)?,
            a_strides: broadcast_strides(&da[..ra], r),
            b_strides: broadcast_strides(&db[..rb], r),
        })
    }

    /// Checks the operands (activations or weights) hold as many elements as their shapes.
    pub fn check_operands(&self, a: &Operand<'_>, b: &Operand<'_>) -> Result<(), ShapeError> {
        a.check_len("Binary", "left operand elements", self.a_elems)?;
        b.check_len("Binary", "right operand elements", self.b_elems)
    }
}

/// Scratch for [`binary`]: none (non-f32 weights are decoded element by element).
pub fn binary_scratch(_p: &BinaryParams) -> usize {
    0
}

/// The scalar function of a [`BinaryOp`] in f32: the format table's definition.
#[inline]
pub fn binary_fn(op: BinaryOp, a: f32, b: f32) -> f32 {
    op.eval(a, b)
}

/// Row length up to which a weight operand is decoded into a stack buffer.
const ROW_BUF: usize = 1024;

/// `y[i] = op(a[i], b[i])` over equal lengths, one loop per op (vectorised by the compiler).
#[inline(always)]
pub(crate) fn zip_op(op: BinaryOp, y: &mut [f32], a: &[f32], b: &[f32]) {
    if op == BinaryOp::Pow && simd::pow_map(Operand2::Slice(a), Operand2::Slice(b), y) {
        return;
    }
    if FN_LOOPS {
        return op.with_fn(Zip { y, a, b });
    }
    macro_rules! zip {
        ($f:expr) => {
            for ((o, &u), &v) in y.iter_mut().zip(a).zip(b) {
                *o = $f(u, v);
            }
        };
    }
    match op {
        BinaryOp::Add => zip!(|u: f32, v: f32| u + v),
        BinaryOp::Sub => zip!(|u: f32, v: f32| u - v),
        BinaryOp::Mul => zip!(|u: f32, v: f32| u * v),
        BinaryOp::Div => zip!(|u: f32, v: f32| u / v),
        op => zip!(|u, v| binary_fn(op, u, v)),
    }
}

/// Whether `b` equals the trailing axes of `y` (after dropping leading 1s of `b`): then `b`
/// repeats as a whole block along `y`'s leading axes.
fn is_trailing(b: &Shape, y: &Shape) -> bool {
    let bd: [usize; MAX_RANK] = core::array::from_fn(|i| if i < b.rank() { b.dim(i) } else { 0 });
    let first = bd[..b.rank()].iter().position(|&v| v != 1).unwrap_or(b.rank());
    let bt = &bd[first..b.rank()];
    bt.len() <= y.rank() && bt.iter().zip(y.rank() - bt.len()..y.rank()).all(|(&v, i)| v == y.dim(i))
}

multiversion!(
    /// `y = op(a, b)` broadcast to `p.y`; `y` holds `p.n` elements. `scratch` is unused.
    /// Compiled for the detected x86 tier (the loops vectorise to its width), portable
    /// elsewhere.
    pub fn binary / binary_on(p: &BinaryParams, a: Operand<'_>, b: Operand<'_>, y: &mut [f32], scratch: &mut [f32]) => binary_body
);

#[inline(always)]
fn binary_body(p: &BinaryParams, a: Operand<'_>, b: Operand<'_>, y: &mut [f32], _scratch: &mut [f32]) {
    // Same shapes (residual adds, gates): one flat loop per op, which the compiler vectorises.
    if let (Some(sa), Some(sb), true) = (a.as_f32(), b.as_f32(), p.a == p.y && p.b == p.y) {
        zip_op(p.op, &mut y[..p.n], &sa[..p.n], &sb[..p.n]);
        return;
    }
    // One operand a single value (a clamp bound, a scale, a threshold): one flat loop.
    if let (Some(sa), true) = (a.as_f32(), p.a == p.y && p.b_elems == 1) {
        scalar_op(p.op, &mut y[..p.n], &sa[..p.n], b.at(0), false);
        return;
    }
    if let (Some(sb), true) = (b.as_f32(), p.b == p.y && p.a_elems == 1) {
        scalar_op(p.op, &mut y[..p.n], &sb[..p.n], a.at(0), true);
        return;
    }
    // `a` full-shape and `b` repeating along the leading axes (a bias or position embedding):
    // flat loops over blocks of b's length; a weight `b` in any encoding is decoded a row at a
    // time, once per call.
    if let (Some(sa), true) = (a.as_f32(), p.a == p.y && is_trailing(&p.b, &p.y)) {
        let m = b.len();
        if m > 0 && p.n.is_multiple_of(m) {
            match (&b, b.as_f32()) {
                (_, Some(sb)) => {
                    for (yc, ac) in y[..p.n].chunks_exact_mut(m).zip(sa[..p.n].chunks_exact(m)) {
                        zip_op(p.op, yc, ac, &sb[..m]);
                    }
                    return;
                }
                (Operand::Weight(wb), None) if wb.cols() <= ROW_BUF => {
                    let c = wb.cols();
                    let mut buf = [0.0f32; ROW_BUF];
                    for r in 0..wb.rows() {
                        wb.decode_row(r, &mut buf[..c]);
                        for k in 0..p.n / m {
                            let o = k * m + r * c;
                            zip_op(p.op, &mut y[o..o + c], &sa[o..o + c], &buf[..c]);
                        }
                    }
                    return;
                }
                _ => {}
            }
        }
    }
    // One operand full-shape, the other constant over trailing axes (a per-channel scale or
    // shift of `[C, H, W]`, a gate of `[C, 1, 1]`): one vectorised loop per run of `y`.
    if let (Some(sa), true) = (a.as_f32(), p.a == p.y) {
        if by_runs(p, sa, &b, &p.b_strides, false, y) {
            return;
        }
    }
    if let (Some(sb), true) = (b.as_f32(), p.b == p.y) {
        if by_runs(p, sb, &a, &p.a_strides, true, y) {
            return;
        }
    }
    match (a.as_f32(), b.as_f32()) {
        (Some(sa), Some(sb)) if by_rows(p, sa, sb, y) => {}
        (Some(sa), Some(sb)) => binary_loop(p, |i| sa[i], |i| sb[i], y),
        (Some(sa), None) => binary_loop(p, |i| sa[i], |i| b.at(i), y),
        (None, Some(sb)) => binary_loop(p, |i| a.at(i), |i| sb[i], y),
        (None, None) => binary_loop(p, |i| a.at(i), |i| b.at(i), y),
    }
}

/// Both operands in f32 and each read along `y`'s last axis contiguously (stride 1) or as one
/// value (stride 0), rows of at least 2: one vectorised loop per output row (a two-sided
/// broadcast `[C, 1, W] · [H, 1]`). False, having written nothing, otherwise.
#[inline(always)]
fn by_rows(p: &BinaryParams, sa: &[f32], sb: &[f32], y: &mut [f32]) -> bool {
    let r = p.y.rank();
    let last = p.y.last();
    if r == 0 || last < 2 {
        return false;
    }
    let (ta, tb) = (p.a_strides[r - 1], p.b_strides[r - 1]);
    if ta > 1 || tb > 1 {
        return false;
    }
    if FN_LOOPS && p.op != BinaryOp::Pow {
        // The function chosen once, outside the rows (short rows pay no dispatch each).
        p.op.with_fn(Rows { p, sa, sb, y, t: (ta, tb) });
        return true;
    }
    let (dims, outer) = outer_dims(&p.y);
    for_each_index(&dims[..outer], [&p.a_strides, &p.b_strides], |i, [oa, ob]| {
        let row = &mut y[i * last..(i + 1) * last];
        match (ta, tb) {
            (1, 1) => zip_op(p.op, row, &sa[oa..oa + last], &sb[ob..ob + last]),
            (1, _) => scalar_op(p.op, row, &sa[oa..oa + last], sb[ob], false),
            (_, 1) => scalar_op(p.op, row, &sb[ob..ob + last], sa[oa], true),
            _ => row.fill(binary_fn(p.op, sa[oa], sb[ob])),
        }
    });
    true
}

/// [`by_rows`]' loops for one function: each output row from `sa` and `sb` read contiguously
/// (stride 1) or as one value (stride 0) along the last axis (`t`: the two strides).
struct Rows<'a> {
    p: &'a BinaryParams,
    sa: &'a [f32],
    sb: &'a [f32],
    y: &'a mut [f32],
    t: (usize, usize),
}

impl BinaryKernel for Rows<'_> {
    type Out = ();
    #[inline(always)]
    fn run<F: Fn(f32, f32) -> f32 + Copy>(self, f: F) {
        let Rows { p, sa, sb, y, t } = self;
        let last = p.y.last();
        let (dims, outer) = outer_dims(&p.y);
        for_each_index(&dims[..outer], [&p.a_strides, &p.b_strides], |i, [oa, ob]| {
            let row = &mut y[i * last..(i + 1) * last];
            match t {
                (1, 1) => {
                    for ((o, &u), &v) in row.iter_mut().zip(&sa[oa..oa + last]).zip(&sb[ob..ob + last]) {
                        *o = f(u, v);
                    }
                }
                (1, _) => {
                    let c = sb[ob];
                    for (o, &u) in row.iter_mut().zip(&sa[oa..oa + last]) {
                        *o = f(u, c);
                    }
                }
                (_, 1) => {
                    let c = sa[oa];
                    for (o, &v) in row.iter_mut().zip(&sb[ob..ob + last]) {
                        *o = f(c, v);
                    }
                }
                _ => row.fill(f(sa[oa], sb[ob])),
            }
        });
    }
}

/// `y = op(full, other)` (`op(other, full)` where `swapped`) for `full` of `p.y`'s shape and
/// `other` constant over trailing axes (its `strides`): one vectorised loop per run of `y`.
/// False, having written nothing, where `other` is not constant over runs.
#[inline(always)]
fn by_runs(
    p: &BinaryParams,
    full: &[f32],
    other: &Operand<'_>,
    strides: &[usize; MAX_RANK],
    swapped: bool,
    y: &mut [f32],
) -> bool {
    let Some((t, run)) = scalar_runs(&p.y, strides) else {
        return false;
    };
    // The other operand one f32 value per run, in order (a squeeze-excitation gate): the runs
    // zipped with it, the function chosen once (small maps have runs of 4 or 16).
    if let Some(so) = other.as_f32().filter(|_| FN_LOOPS && one_per_run(&p.y, strides, t)) {
        let (y, x, s) = (&mut y[..p.n], &full[..p.n], &so[..p.n / run]);
        if p.op == BinaryOp::Pow {
            // The vectorised pow, one run at a time.
            for ((yr, xr), &c) in y.chunks_exact_mut(run).zip(x.chunks_exact(run)).zip(s) {
                scalar_op(p.op, yr, xr, c, swapped);
            }
            return true;
        }
        p.op.with_fn(PerRun { y, x, s, run, swapped });
        return true;
    }
    let (dims, _) = outer_dims(&p.y);
    for_each_index(&dims[..t], [strides], |i, [o]| {
        let r = i * run..(i + 1) * run;
        scalar_op(p.op, &mut y[r.clone()], &full[r], other.at(o), swapped);
    });
    true
}

/// The first axis `t` from which every axis of `y` is broadcast in `strides` (stride 0, or
/// size 1), and the length of a run over axes `t..`, when that run has at least 2 elements and
/// starts after axis 0.
fn scalar_runs(y: &Shape, strides: &[usize; MAX_RANK]) -> Option<(usize, usize)> {
    let r = y.rank();
    let mut t = r;
    while t > 0 && (strides[t - 1] == 0 || y.dim(t - 1) == 1) {
        t -= 1;
    }
    let run: usize = (t..r).map(|i| y.dim(i)).product();
    (t > 0 && run >= 2).then_some((t, run))
}

/// Whether an operand read with `strides`, constant over `y`'s axes `t..` (as
/// [`scalar_runs`] found), holds exactly one value per run in run order: it is not broadcast
/// along any axis before `t` that `y` has more than once (so its dims there are `y`'s, and 1
/// from `t` on).
fn one_per_run(y: &Shape, strides: &[usize; MAX_RANK], t: usize) -> bool {
    (0..t).all(|i| y.dim(i) == 1 || strides[i] != 0)
}

/// `y[i] = op(x[i], s)`, or `op(s, x[i])` when `scalar_left`: one loop per op (vectorised).
#[inline(always)]
pub(crate) fn scalar_op(op: BinaryOp, y: &mut [f32], x: &[f32], s: f32, scalar_left: bool) {
    if op == BinaryOp::Pow {
        let (a, b) =
            if scalar_left { (Operand2::One(s), Operand2::Slice(x)) } else { (Operand2::Slice(x), Operand2::One(s)) };
        if simd::pow_map(a, b, y) {
            return;
        }
    }
    if FN_LOOPS {
        return op.with_fn(WithScalar { y, x, s, scalar_left });
    }
    macro_rules! each {
        ($f:expr) => {
            for (o, &v) in y.iter_mut().zip(x) {
                *o = $f(v);
            }
        };
    }
    match (op, scalar_left) {
        (BinaryOp::Add, _) => each!(|v: f32| v + s),
        (BinaryOp::Mul, _) => each!(|v: f32| v * s),
        (BinaryOp::Sub, false) => each!(|v: f32| v - s),
        (BinaryOp::Sub, true) => each!(|v: f32| s - v),
        (BinaryOp::Div, false) => each!(|v: f32| v / s),
        (BinaryOp::Div, true) => each!(|v: f32| s / v),
        (op, false) => each!(|v| binary_fn(op, v, s)),
        (op, true) => each!(|v| binary_fn(op, s, v)),
    }
}

#[inline(always)]
fn binary_loop(p: &BinaryParams, ga: impl Fn(usize) -> f32, gb: impl Fn(usize) -> f32, y: &mut [f32]) {
    if p.n == 0 {
        return;
    }
    let op = p.op;
    if FN_LOOPS {
        return op.with_fn(Strided { p, ga, gb, y });
    }
    Strided { p, ga, gb, y }.run(|u, v| binary_fn(op, u, v));
}
