//! Output-shape inference for every op, shared by the loader (which checks the declared output
//! shape) and by model builders (which create the output tensor from it).
//!
//! Shapes are per sample: an activation has no batch axis. A weight operand of `Binary` or
//! `MatMul` broadcasts over the batch like any leading axis.

use crate::error::expect_eq;
use crate::error::ShapeError;
use crate::params::{LinearAttnParams, Pool2dParams, RnnParams};
use kestrel_rt_format::ops::{Op, TensorId};
use kestrel_rt_format::{Shape, MAX_RANK};

fn mismatch(op: &'static str, what: &'static str, expected: usize, found: usize) -> ShapeError {
    ShapeError::Mismatch { op, what, expected, found }
}

fn shape(op: &'static str, dims: &[usize]) -> Result<Shape, ShapeError> {
    Shape::from_usize(dims).ok_or(ShapeError::Invalid { op, what: "output rank or dim too large" })
}

/// Numpy broadcasting of two shapes (aligned on the right).
pub fn broadcast(op: &'static str, a: &Shape, b: &Shape) -> Result<Shape, ShapeError> {
    let rank = a.rank().max(b.rank());
    let mut dims = [0usize; MAX_RANK];
    for (i, out) in dims.iter_mut().enumerate().take(rank) {
        let da = if i < rank - a.rank() { 1 } else { a.dim(i - (rank - a.rank())) };
        let db = if i < rank - b.rank() { 1 } else { b.dim(i - (rank - b.rank())) };
        *out = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => return Err(mismatch(op, "broadcast dim", x, y)),
        };
    }
    shape(op, &dims[..rank])
}

/// The output shape of `op`, given a lookup of every tensor's shape. For `Reshape` the output
/// shape cannot be inferred: it returns `declared` after checking the element counts agree.
pub fn output_shape(
    op: &Op,
    shape_of: impl Fn(TensorId) -> Shape,
    declared: Option<Shape>,
) -> Result<Shape, ShapeError> {
    let name = op.name();
    let d2 = |id: TensorId| -> Result<(usize, usize), ShapeError> {
        shape_of(id).as_matrix().ok_or(ShapeError::Invalid { op: name, what: "weight too large" })
    };
    match op {
        Op::Dense(o) => {
            let x = shape_of(o.x);
            let (out, inp) = d2(o.proj.w)?;
            if x.rank() == 0 {
                return Err(ShapeError::Invalid { op: name, what: "input must have rank >= 1" });
            }
            if x.last() != inp {
                return Err(mismatch(name, "input features (weight cols)", inp, x.last()));
            }
            let mut dims = [0usize; MAX_RANK];
            for (i, &d) in x.dims().iter().enumerate() {
                dims[i] = d as usize;
            }
            dims[x.rank() - 1] = out;
            shape(name, &dims[..x.rank()])
        }
        // Either axis: the output has the input's shape (γ and β are checked by the kernel's
        // params, `LayerNormParams::with_axis`, when a model loads).
        Op::LayerNorm(o) => nonscalar(name, shape_of(o.x)),
        Op::Unary(o) => Ok(shape_of(o.x)),
        // The constants and the channel geometry are checked by the kernels' params.
        Op::Chain(o) => Ok(shape_of(o.x)),
        Op::Softmax(o) => nonscalar(name, shape_of(o.x)),
        Op::Binary(o) => broadcast(name, &shape_of(o.a), &shape_of(o.b)),
        Op::PatchEmbed(o) => {
            let x = shape_of(o.x);
            if x.rank() != 3 {
                return Err(mismatch(name, "input rank ([C, H, W])", 3, x.rank()));
            }
            let (c, h, w, p) = (x.dim(0), x.dim(1), x.dim(2), o.patch as usize);
            if h % p != 0 || w % p != 0 {
                return Err(ShapeError::Invalid {
                    op: name,
                    what: "image H and W must be multiples of the patch size",
                });
            }
            let (d, k) = d2(o.proj.w)?;
            if k != c * p * p {
                return Err(mismatch(name, "weight cols (C·p·p)", c * p * p, k));
            }
            shape(name, &[(h / p) * (w / p), d])
        }
        Op::Embedding(o) => {
            let ids = shape_of(o.ids);
            if ids.rank() != 1 {
                return Err(mismatch(name, "ids rank", 1, ids.rank()));
            }
            let (_, d) = d2(o.table)?;
            shape(name, &[ids.dim(0), d])
        }
        Op::Reduce(o) => {
            let x = shape_of(o.x);
            let axis = o.axis as usize;
            if axis >= x.rank() {
                return Err(mismatch(name, "axis (< rank)", x.rank(), axis));
            }
            // A fold over an empty axis is its identity; an extreme's index is undefined there.
            if x.dim(axis) == 0 && o.op.arg().is_some() {
                return Err(ShapeError::Invalid { op: name, what: "an index reduction over an empty axis" });
            }
            let mut dims = [0usize; MAX_RANK];
            let mut n = 0;
            for (i, &d) in x.dims().iter().enumerate() {
                if i == axis {
                    if o.keep_dims {
                        dims[n] = 1;
                        n += 1;
                    }
                } else {
                    dims[n] = d as usize;
                    n += 1;
                }
            }
            shape(name, &dims[..n])
        }
        Op::Reshape(o) => {
            let declared =
                declared.ok_or(ShapeError::Invalid { op: name, what: "reshape needs a declared output shape" })?;
            let (a, b) = (shape_of(o.x).numel(), declared.numel());
            if a != b {
                return Err(mismatch(name, "element count", a.unwrap_or(usize::MAX), b.unwrap_or(usize::MAX)));
            }
            Ok(declared)
        }
        Op::Slice(o) => {
            let x = shape_of(o.x);
            let axis = o.axis as usize;
            if axis >= x.rank() {
                return Err(mismatch(name, "axis (< rank)", x.rank(), axis));
            }
            // A window of no element (`count` 0, a run-time dim at 0) reads nothing.
            let n = x.dim(axis) as u64;
            let last = u64::from(o.start) + (u64::from(o.count).max(1) - 1) * u64::from(o.step);
            if o.step == 0 || (o.count > 0 && last >= n) {
                return Err(ShapeError::Invalid { op: name, what: "the window reads past the input's axis" });
            }
            if u64::from(o.offset) + u64::from(o.count) > u64::from(o.len) {
                return Err(ShapeError::Invalid { op: name, what: "the window ends past the output's axis" });
            }
            let mut dims = [0usize; MAX_RANK];
            for (i, out) in dims.iter_mut().enumerate().take(x.rank()) {
                *out = if i == axis { o.len as usize } else { x.dim(i) };
            }
            shape(name, &dims[..x.rank()])
        }
        Op::Concat(o) => {
            // Pieces agree except on the axis; the output's axis is the sum of theirs.
            let first = shape_of(o.xs[0]);
            let axis = o.axis as usize;
            if axis >= first.rank() {
                return Err(mismatch(name, "axis (< rank)", first.rank(), axis));
            }
            let mut dims = [0usize; MAX_RANK];
            for (i, out) in dims.iter_mut().enumerate().take(first.rank()) {
                *out = if i == axis { 0 } else { first.dim(i) };
            }
            for &x in o.inputs() {
                let s = shape_of(x);
                if s.rank() != first.rank() {
                    return Err(mismatch(name, "piece rank", first.rank(), s.rank()));
                }
                for (i, out) in dims.iter_mut().enumerate().take(first.rank()) {
                    if i == axis {
                        *out =
                            out.checked_add(s.dim(i)).ok_or(ShapeError::Invalid { op: name, what: "axis too long" })?;
                    } else if s.dim(i) != *out {
                        return Err(mismatch(name, "piece dim off the axis", *out, s.dim(i)));
                    }
                }
            }
            shape(name, &dims[..first.rank()])
        }
        Op::Gather(o) => {
            crate::params::GatherParams::with_output(&shape_of(o.x), &shape_of(o.idx), o.axis).map(|r| r.1)
        }
        Op::Nms(o) => {
            // boxes [B, N, 4], scores [B, C, N], each limit one element; the output [M, 3] as
            // declared, 1 ≤ M ≤ B·C·N < 2^24 (its rows are the most it can keep).
            let (bx, sc) = (shape_of(o.boxes), shape_of(o.scores));
            let bad = |what| ShapeError::Invalid { op: name, what };
            let (&[b, n, four], &[sb, c, sn]) = (bx.dims(), sc.dims()) else {
                return Err(bad("boxes [B, N, 4] and scores [B, C, N]"));
            };
            if four != 4 || sb != b || sn != n {
                return Err(bad("boxes [B, N, 4] and scores [B, C, N]"));
            }
            for t in [o.max_out, o.iou, o.score].into_iter().flatten() {
                if shape_of(t).dims().iter().map(|&d| d as usize).product::<usize>() != 1 {
                    return Err(bad("each limit (max_out, iou, score) must hold one element"));
                }
            }
            let most = (b as usize).saturating_mul(c as usize).saturating_mul(n as usize);
            let y = declared.ok_or(bad("the output's rows must be declared"))?;
            match *y.dims() {
                [m, 3] if m >= 1 && m as usize <= most && most < 1 << 24 => Ok(y),
                _ => Err(bad("an output [M, 3] with 1 <= M <= B·C·N < 2^24")),
            }
        }
        Op::Transpose(o) => {
            let x = shape_of(o.x);
            let mut seen = [false; MAX_RANK];
            let mut dims = [0usize; MAX_RANK];
            for (i, out) in dims.iter_mut().enumerate().take(x.rank()) {
                let p = o.perm[i] as usize;
                if p >= x.rank() || seen[p] {
                    return Err(ShapeError::Invalid { op: name, what: "perm is not a permutation of the input axes" });
                }
                seen[p] = true;
                *out = x.dim(p);
            }
            shape(name, &dims[..x.rank()])
        }
        Op::MatMul(o) => {
            let (a, b) = (shape_of(o.a), shape_of(o.b));
            if a.rank() < 2 || b.rank() < 2 {
                return Err(ShapeError::Invalid { op: name, what: "operands must have rank >= 2" });
            }
            let (m, k) = (a.dim(a.rank() - 2), a.dim(a.rank() - 1));
            let (kb, n) = if o.transpose_b {
                (b.dim(b.rank() - 1), b.dim(b.rank() - 2))
            } else {
                (b.dim(b.rank() - 2), b.dim(b.rank() - 1))
            };
            if k != kb {
                return Err(mismatch(name, "inner dimension K", k, kb));
            }
            let la = Shape::new(&a.dims()[..a.rank() - 2]).unwrap_or(a);
            let lb = Shape::new(&b.dims()[..b.rank() - 2]).unwrap_or(b);
            let lead = broadcast(name, &la, &lb)?;
            let mut dims = [0usize; MAX_RANK];
            for (i, &d) in lead.dims().iter().enumerate() {
                dims[i] = d as usize;
            }
            let r = lead.rank();
            if r + 2 > MAX_RANK {
                return Err(ShapeError::Invalid { op: name, what: "output rank too large" });
            }
            dims[r] = m;
            dims[r + 1] = n;
            shape(name, &dims[..r + 2])
        }
        Op::Conv2d(o) => {
            let x = shape_of(o.x);
            let w = shape_of(o.proj.w);
            if x.rank() != 3 {
                return Err(mismatch(name, "input rank ([C, H, W])", 3, x.rank()));
            }
            if w.rank() != 4 {
                return Err(mismatch(name, "weight rank ([O, C/g, kh, kw])", 4, w.rank()));
            }
            let g = o.groups as usize;
            let (c, h, wd) = (x.dim(0), x.dim(1), x.dim(2));
            let (oc, cg, kh, kw) = (w.dim(0), w.dim(1), w.dim(2), w.dim(3));
            if c % g != 0 || oc % g != 0 {
                return Err(ShapeError::Invalid { op: name, what: "channels must be divisible by groups" });
            }
            if cg != c / g {
                return Err(mismatch(name, "weight in-channels (C/groups)", c / g, cg));
            }
            let out = |len: usize, k: usize, s: u32, d: u32, p0: u32, p1: u32| -> Option<usize> {
                let eff = (k - 1).checked_mul(d as usize)? + 1;
                let padded = len.checked_add(p0 as usize)?.checked_add(p1 as usize)?;
                padded.checked_sub(eff).map(|v| v / s as usize + 1)
            };
            let ho = out(h, kh, o.stride[0], o.dilation[0], o.pad[0], o.pad[2]);
            let wo = out(wd, kw, o.stride[1], o.dilation[1], o.pad[1], o.pad[3]);
            let y = match (ho, wo, kh > 0 && kw > 0) {
                (Some(ho), Some(wo), true) if ho > 0 && wo > 0 => shape(name, &[oc, ho, wo])?,
                _ => return Err(ShapeError::Invalid { op: name, what: "kernel larger than the padded input" }),
            };
            // A residual is added element by element: exactly the output's shape.
            if let Some(r) = o.residual {
                if shape_of(r) != y {
                    return Err(ShapeError::Invalid { op: name, what: "residual shape must equal the output's" });
                }
            }
            Ok(y)
        }
        Op::Pool2d(o) => Pool2dParams::of(o, &shape_of(o.x))?
            .y_shape()
            .ok_or(ShapeError::Invalid { op: name, what: "output rank or dim too large" }),
        Op::Lstm(o) => RnnParams::of_lstm(o, |id| Ok(shape_of(id)))?
            .y_shape()
            .ok_or(ShapeError::Invalid { op: name, what: "output rank or dim too large" }),
        Op::Gru(o) => RnnParams::of_gru(o, |id| Ok(shape_of(id)))?
            .y_shape()
            .ok_or(ShapeError::Invalid { op: name, what: "output rank or dim too large" }),
        Op::LinearAttn(o) => LinearAttnParams::of(o, |id| Ok(shape_of(id)))?
            .y_shape(o.output)
            .ok_or(ShapeError::Invalid { op: name, what: "output rank or dim too large" }),
        Op::Attention(o) => {
            // `[T, d]`, or `[G, T, d]`: G independent sequences per sample (MobileViT's
            // patch-pixel axis, Swin's windows), which share a mask or read one block of it each.
            let x = shape_of(o.x);
            if x.rank() == 3 {
                if let Some(m) = o.mask {
                    check_group_mask(name, &shape_of(m), x.dim(0), x.dim(1), o.heads as usize)?;
                }
                return Ok(x);
            }
            let x = tokens(name, x)?;
            if let Some(m) = o.mask {
                check_key_mask(name, &shape_of(m), x.dim(0), o.heads as usize)?;
            }
            Ok(x)
        }
        Op::Sdpa(o) => {
            let q = shape_of(o.q);
            let g = SdpaDims::new(&q, &shape_of(o.k), &shape_of(o.v), o.bias.map(&shape_of).as_ref(), o.k_transposed)?;
            if let Some(sink) = o.sink {
                let n = shape_of(sink).numel().unwrap_or(usize::MAX);
                if n != 1 && n != g.hq {
                    return Err(mismatch(name, "sink elements (1 or the query heads Hq)", g.hq, n));
                }
            }
            for mix in [o.mix_pre, o.mix_post].into_iter().flatten() {
                let n = shape_of(mix).numel().unwrap_or(usize::MAX);
                if n != g.hq * (g.hq + 1) {
                    return Err(mismatch(name, "head-mixing elements (Hq · (Hq + 1))", g.hq * (g.hq + 1), n));
                }
            }
            let mut dims = [g.hq, g.tq, g.dv];
            if q.rank() == 2 {
                return shape(name, &dims[1..]);
            }
            dims[0] = g.hq;
            shape(name, &dims)
        }
        Op::AftFull(o) => tokens(name, shape_of(o.x)),
        Op::AftLocal(o) => tokens(name, shape_of(o.x)),
        Op::AftSimple(o) => tokens(name, shape_of(o.x)),
        Op::AftConv(o) => tokens(name, shape_of(o.x)),
        Op::Fastformer(o) => tokens(name, shape_of(o.x)),
    }
}

/// The geometry of an [`Sdpa`](kestrel_rt_format::ops::Sdpa) node, checked: queries `[Hq, Tq, D]`,
/// keys `[Hk, Tk, D]` (`[Hk, D, Tk]` transposed), values `[Hk, Tk, Dv]`, `Hq` a multiple of `Hk`,
/// and the bias's strides over `[Hq, Tq, Tk]` (0 along a broadcast axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdpaDims {
    /// Query heads.
    pub hq: usize,
    /// Key/value heads (`hq / hk` query heads share each).
    pub hk: usize,
    /// Queries.
    pub tq: usize,
    /// Keys.
    pub tk: usize,
    /// Query/key width.
    pub d: usize,
    /// Value width.
    pub dv: usize,
    /// The bias's element strides along `[Hq, Tq, Tk]` (`[0; 3]` without one).
    pub bias_strides: [usize; 3],
    /// The bias's element count (0 without one).
    pub bias_len: usize,
}

impl SdpaDims {
    /// Checks the shapes (see the op's documentation) and derives the geometry.
    pub fn new(q: &Shape, k: &Shape, v: &Shape, bias: Option<&Shape>, k_transposed: bool) -> Result<Self, ShapeError> {
        const OP: &str = "Sdpa";
        let r = q.rank();
        if r != 2 && r != 3 {
            return Err(ShapeError::Invalid { op: OP, what: "queries must be [Hq, Tq, D] or [Tq, D]" });
        }
        expect_eq(OP, "key rank (that of the queries)", r, k.rank())?;
        expect_eq(OP, "value rank (that of the queries)", r, v.rank())?;
        let three = |s: &Shape| if r == 3 { [s.dim(0), s.dim(1), s.dim(2)] } else { [1, s.dim(0), s.dim(1)] };
        let ([hq, tq, d], [hk, k1, k2], [hv, tv, dv]) = (three(q), three(k), three(v));
        let (tk, dk) = if k_transposed { (k2, k1) } else { (k1, k2) };
        expect_eq(OP, "key width (query width D)", d, dk)?;
        expect_eq(OP, "value heads (key heads)", hk, hv)?;
        expect_eq(OP, "values (keys Tk)", tk, tv)?;
        if hk == 0 || hq % hk != 0 {
            return Err(mismatch(OP, "query heads (a multiple of the key heads)", hk, hq));
        }
        if hq == 0 || tq == 0 || tk == 0 || d == 0 || dv == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "an empty axis" });
        }
        let overflow = ShapeError::Invalid { op: OP, what: "element count overflows" };
        hq.checked_mul(tq).and_then(|n| n.checked_mul(tk.max(dv))).ok_or(overflow)?;
        let (mut bias_strides, mut bias_len) = ([0; 3], 0);
        if let Some(b) = bias {
            let br = b.rank();
            if br > 3 && b.dims()[..br - 3].iter().any(|&x| x != 1) {
                return Err(ShapeError::Invalid { op: OP, what: "bias axes before the last three must be 1" });
            }
            let full = [hq, tq, tk];
            let mut stride = 1;
            for a in (0..3).rev() {
                let bd = if a + br >= 3 { b.dim(a + br - 3) } else { 1 };
                if bd != 1 && bd != full[a] {
                    return Err(mismatch(OP, "bias dim (1 or that of [Hq, Tq, Tk])", full[a], bd));
                }
                bias_strides[a] = if bd == 1 { 0 } else { stride };
                stride *= bd;
            }
            bias_len = stride;
        }
        Ok(Self { hq, hk, tq, tk, d, dv, bias_strides, bias_len })
    }
}

fn nonscalar(op: &'static str, s: Shape) -> Result<Shape, ShapeError> {
    if s.rank() == 0 {
        Err(ShapeError::Invalid { op, what: "input must have rank >= 1" })
    } else {
        Ok(s)
    }
}

fn tokens(op: &'static str, s: Shape) -> Result<Shape, ShapeError> {
    if s.rank() != 2 {
        return Err(mismatch(op, "input rank ([T, d])", 2, s.rank()));
    }
    Ok(s)
}

/// Checks the mask of an attention over `[G, T, d]` (G sequences per sample): one that every
/// sequence shares ([`check_key_mask`]'s shapes) or `[G, 1, T, T]` / `[G, H, T, T]` (sequence g
/// reads block g: Swin's shifted-window mask, one per window).
pub fn check_group_mask(
    op: &'static str,
    s: &kestrel_rt_format::Shape,
    groups: usize,
    t: usize,
    heads: usize,
) -> Result<(), ShapeError> {
    match s.dims() {
        [g, h, r, n] => {
            expect_eq(op, "per-sequence mask blocks (sequences G)", groups, *g as usize)?;
            if *h != 1 {
                expect_eq(op, "per-head mask heads", heads, *h as usize)?;
            }
            expect_eq(op, "mask rows (tokens T)", t, *r as usize)?;
            expect_eq(op, "mask columns (tokens T)", t, *n as usize)
        }
        _ => check_key_mask(op, s, t, heads),
    }
}

/// Checks an attention mask's shape (per sample for an activation; a weight's own shape, shared
/// by every sample): `[T]` (per key), `[T, T]` (per query and key, shared by every head) or
/// `[H, T, T]` (per head, query and key; `heads` = H).
pub fn check_key_mask(
    op: &'static str,
    s: &kestrel_rt_format::Shape,
    t: usize,
    heads: usize,
) -> Result<(), ShapeError> {
    match s.dims() {
        [n] => expect_eq(op, "key mask length (tokens T)", t, *n as usize),
        [r, n] => {
            expect_eq(op, "mask rows (tokens T)", t, *r as usize)?;
            expect_eq(op, "mask columns (tokens T)", t, *n as usize)
        }
        [h, r, n] => {
            expect_eq(op, "per-head mask heads", heads, *h as usize)?;
            expect_eq(op, "mask rows (tokens T)", t, *r as usize)?;
            expect_eq(op, "mask columns (tokens T)", t, *n as usize)
        }
        _ => Err(ShapeError::Invalid { op, what: "attention mask must be [T], [T, T] or [H, T, T]" }),
    }
}
