//! Scatters (ONNX ScatterElements, Scatter, ScatterND, every reduction) and the index tuples
//! they share with GatherND, lowered exactly with generic ops.
//!
//! Both scatters are one shape of computation: the data seen as `[A, N, B]` (N the axis written
//! into), the updates as `[A, M, B]` and a 0/1 one-hot `[A, M, B or 1, N]` saying which of the N
//! places each update goes to. Each update is picked onto its place by `When` (0 elsewhere,
//! whatever it holds, so ±∞ and NaN updates stay exact) and the M updates are combined by a
//! `Reduce` over M (Sum; Prod / Max / Min for those reductions, the places an update does not
//! reach filled with 1 / −∞ / +∞ by `Unless`). Reduction `none` keeps the data where no update
//! goes (`Unless` of the written mask) and adds the picked updates; the other reductions
//! combine the data with the reduced updates by the same binary op.
//!
//! ScatterElements: A = the data's axes before `axis`, B those after, M the updates' length on
//! `axis`; the one-hot is that of each update's index. ScatterND: A = 1, N = the rows of the
//! data seen as `[prod(dims[..k]), prod(dims[k..])]`, B the row length, M the index tuples; the
//! one-hot is that of each tuple's flat row (per row, so `[1, M, 1, N]`).
//!
//! Constant indices fix every move at conversion time: negative indices count from the end, an
//! index outside the data is an error, and for reduction `none` a place written twice takes the
//! last update (as ONNX Runtime and tract do; ONNX leaves it undefined). Where each place takes
//! at most one update (always for `none`: the last), the updates are not picked by a one-hot but
//! gathered: one `Gather` of the update rows by the constant row each place takes (any row where
//! none), combined with the data by the reduction's op, and `When`/`Unless` of the constant
//! written mask choose between that and the data — weights and work the size of the output, where
//! the one-hot is M·N (a slice assignment written as every element's index tuple, Longformer's
//! chunked attention: 2.6·10^10 elements). Only a reduction with places updated several times
//! needs the one-hot. Indices known only
//! at run time: integer ids through an `Embedding` (an id outside `0..N` is a run-time error),
//! f32 values (computed by the graph, or an integer input read as values) compared with
//! `0..N` and `−N..0`, so one outside the data writes nothing; repeated run-time indices with
//! reduction `none` are summed (ONNX requires them distinct).

use super::{ints, zeros, Lowerer, Res, Val};
use crate::error::ConvertError;
use kestrel_rt_format::ops::{BinaryOp, Gather, Op, Reduce, ReduceOp, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{ScatterElements, ScatterNd, ScatterReduction};

/// The largest flat index an f32 holds exactly.
const F32_EXACT: usize = 1 << 24;

/// The dims of a scatter, `data [A, N, B]`, `updates [A, M, B]`, one-hot `[A, M, B1, N]`.
#[derive(Clone, Copy)]
struct Dims {
    a: usize,
    n: usize,
    b: usize,
    m: usize,
    /// B, or 1 when one one-hot row serves a whole row of B (ScatterND).
    b1: usize,
}

impl Lowerer<'_> {
    /// Lowers ScatterElements and ScatterND; `Ok(false)` for anything else.
    pub(super) fn try_scatter(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if let Some(op) = node.op_as::<ScatterElements>() {
            self.scatter_elements(op.axis, op.reduction)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<ScatterNd>() {
            self.scatter_nd(op.reduction)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// An f32 operand viewed as `view` (its element count): an activation (ids read as values)
    /// reshaped, or a constant stored as an exact f32 weight of that shape.
    pub(super) fn f32_operand(&mut self, o: OutletId, usage: &'static str, view: &[usize]) -> Res<TensorId> {
        match self.val(o)? {
            Val::Const(t) => {
                let v = super::f32s(&t)?;
                self.weight_f32(o, usage, view, v)
            }
            Val::Act { .. } => {
                let (x, xs) = self.act(o)?;
                self.reshape(x, &xs, view)
            }
        }
    }

    /// The updates: an activation viewed as `view`, or a constant's values.
    fn updates(&mut self, o: OutletId, view: &[usize]) -> Res<Operand> {
        match self.val(o)? {
            Val::Const(t) => Ok(Operand::Const(super::f32s(&t)?)),
            Val::Act { .. } => {
                let (x, xs) = self.act(o)?;
                Ok(Operand::Act(self.reshape(x, &xs, view)?))
            }
        }
    }

    /// ONNX ScatterElements (and the older Scatter) on `axis`.
    fn scatter_elements(&mut self, axis: usize, red: ScatterReduction) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let ds = self.val(node.inputs[0])?.shape();
        let idx = self.val(node.inputs[1])?;
        let us = idx.shape();
        let r = ds.len();
        if axis >= r || us.len() != r || self.val(node.inputs[2])?.shape() != us {
            return Err(self.bad(&format!("indices and updates of one shape, rank {r}"), format!("{us:?}")));
        }
        if (0..r).any(|a| a != axis && us[a] != ds[a]) {
            return Err(self.unsupported(&format!(
                "updates {us:?} shorter than the data {ds:?} on an axis other than the scattered one"
            )));
        }
        let d = Dims {
            a: ds[..axis].iter().product(),
            n: ds[axis],
            b: ds[axis + 1..].iter().product(),
            m: us[axis],
            b1: ds[axis + 1..].iter().product(),
        };
        if d.n == 0 || d.a * d.m * d.b == 0 {
            return Err(self.unsupported("a scatter over an empty axis or with no updates"));
        }
        let places = match idx {
            Val::Const(t) => {
                let idx = ints(self, &t)?;
                // Update e = (p, j, q) goes to (p, idx[e], q).
                let targets = idx
                    .iter()
                    .enumerate()
                    .map(|(e, &i)| {
                        let (p, q) = (e / (d.m * d.b), e % d.b);
                        let i = self.in_axis(i, d.n)?;
                        Ok(((p * d.n + i) * d.b + q, i))
                    })
                    .collect::<Res<Vec<_>>>()?;
                Places::Const(Konst::new(&targets, d, red)?)
            }
            Val::Act { id, shape, int } => {
                let oh = self.one_hot_of(id, &shape, int, d.n)?;
                Places::Act(self.reshape(oh, &[d.a * d.m * d.b, d.n], &[d.a, d.m, d.b, d.n])?)
            }
        };
        let data = self.f32_operand(node.inputs[0], "scatter_data", &[d.a, d.n, d.b])?;
        let upd = self.updates(node.inputs[2], &[d.a, d.m, d.b, 1])?;
        let (y, how) = self.scatter_into(data, upd, places, d, red)?;
        let y = self.reshape(y, &[d.a, d.n, d.b], &out)?;
        self.out(y, out);
        self.count_fused(if how == How::Gathered {
            "scatter-elements-as-gather"
        } else {
            "scatter-elements-as-one-hot-pick"
        });
        Ok(())
    }

    /// ONNX ScatterND: updates `[idx…, dims[k..]]` written into the rows of the data that the
    /// index tuples `[idx…, k]` name.
    fn scatter_nd(&mut self, red: ScatterReduction) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let ds = self.val(node.inputs[0])?.shape();
        let idx = self.val(node.inputs[1])?;
        let is = idx.shape();
        let k = *is.last().ok_or_else(|| self.bad("indices of rank ≥ 1", "a scalar".into()))?;
        if k == 0 || k > ds.len() {
            return Err(self.bad(&format!("index tuples of 1..={} elements", ds.len()), format!("{k}")));
        }
        let us: Vec<usize> = is[..is.len() - 1].iter().chain(&ds[k..]).copied().collect();
        let updates_shape = self.val(node.inputs[2])?.shape();
        if updates_shape != us {
            return Err(self.bad(&format!("updates of shape {us:?}"), format!("{updates_shape:?}")));
        }
        let d = Dims {
            a: 1,
            n: ds[..k].iter().product(),
            b: ds[k..].iter().product(),
            m: is[..is.len() - 1].iter().product(),
            b1: 1,
        };
        if d.n == 0 || d.m * d.b == 0 {
            return Err(self.unsupported("a scatter into no rows or with no updates"));
        }
        let places = match idx {
            Val::Const(t) => {
                let rows = self.flat_rows(&ints(self, &t)?, &[], &ds[..k])?;
                let targets: Vec<(usize, usize)> = rows.iter().map(|&r| (r, r)).collect();
                Places::Const(Konst::new(&targets, d, red)?)
            }
            Val::Act { id, shape, int } => {
                let oh = self.tuple_one_hot(id, &shape, int, &[], &ds[..k])?;
                Places::Act(self.reshape(oh, &[d.m, d.n], &[1, d.m, 1, d.n])?)
            }
        };
        let data = self.f32_operand(node.inputs[0], "scatter_data", &[1, d.n, d.b])?;
        let upd = self.updates(node.inputs[2], &[1, d.m, d.b, 1])?;
        let (y, how) = self.scatter_into(data, upd, places, d, red)?;
        let y = self.reshape(y, &[1, d.n, d.b], &out)?;
        self.out(y, out);
        self.count_fused(if how == How::Gathered { "scatter-nd-as-gather" } else { "scatter-nd-as-one-hot-pick" });
        Ok(())
    }

    /// `i` on an axis of length `n`, counted from the end when negative; outside `−n..n` an error.
    fn in_axis(&self, i: i64, n: usize) -> Res<usize> {
        let j = if i < 0 { i + n as i64 } else { i };
        if !(0..n as i64).contains(&j) {
            return Err(self.bad(&format!("indices in -{n}..{n}"), format!("{i}")));
        }
        Ok(j as usize)
    }

    /// The flat rows that constant index tuples (`idx`, `dims.len()` components each) name in
    /// data whose leading axes are `batch ++ dims` (negative components counted from the end).
    /// The tuples are in `batch`'s row-major order, an equal run per batch entry, each tuple
    /// addressing rows within its own batch entry (GatherND's `batch_dims`).
    pub(super) fn flat_rows(&self, idx: &[i64], batch: &[usize], dims: &[usize]) -> Res<Vec<usize>> {
        let rows = idx.len() / dims.len().max(1);
        let per_batch = rows / batch.iter().product::<usize>().max(1);
        let inner: usize = dims.iter().product();
        idx.chunks(dims.len())
            .enumerate()
            .map(|(r, tuple)| {
                let flat = tuple
                    .iter()
                    .zip(dims)
                    .try_fold(0usize, |f, (&i, &d)| -> Res<usize> { Ok(f * d + self.in_axis(i, d)?) })?;
                Ok(r / per_batch.max(1) * inner + flat)
            })
            .collect()
    }

    /// The one-hot `[M, R]` of index tuples known at run time (`idx`, logical shape `[M…, k]`)
    /// over the `R = prod(batch ++ dims)` rows they address (`batch` as in
    /// [`Lowerer::flat_rows`]). One component and no batch: [`Lowerer::one_hot_of`] directly.
    /// Otherwise the components as f32 values, each counted from the end when negative, their
    /// flat row `Σ cᵢ·strideᵢ` plus the batch entry's first row (exact: R < 2²⁴), and a tuple
    /// with a component outside its axis mapped to −R−1, which matches no row (it picks or
    /// writes nothing).
    pub(super) fn tuple_one_hot(
        &mut self,
        idx: TensorId,
        shape: &[usize],
        int: bool,
        batch: &[usize],
        dims: &[usize],
    ) -> Res<TensorId> {
        let k = dims.len();
        let m: usize = shape[..shape.len() - 1].iter().product();
        let inner: usize = dims.iter().product();
        let r = inner * batch.iter().product::<usize>();
        if k == 1 && batch.is_empty() {
            return self.one_hot_of(idx, shape, int, r);
        }
        if r >= F32_EXACT {
            return Err(self.unsupported(&format!("run-time index tuples into {r} rows (f32 is exact to 2^24)")));
        }
        let v = if int { self.ids_as_values(idx, shape)? } else { idx };
        let v = self.reshape(v, shape, &[m, k])?;
        let here = OutletId::new(self.node, 0);
        let zero = self.weight_f32(here, "zero", &[1], vec![0.0])?;
        let dim_row = self.weight_f32(here, "index_dims", &[1, k], dims.iter().map(|&d| d as f32).collect())?;
        let strides: Vec<f32> = (0..k).map(|i| dims[i + 1..].iter().product::<usize>() as f32).collect();
        let strides = self.weight_f32(here, "index_strides", &[1, k], strides)?;
        // c + d·(c < 0): negative components counted from the end.
        let negative = self.binary_op(v, zero, BinaryOp::Less)?;
        let shift = self.binary_op(negative, dim_row, BinaryOp::Mul)?;
        let c = self.binary_op(v, shift, BinaryOp::Add)?;
        // Whether every component lies in its axis.
        let lo = self.binary_op(c, zero, BinaryOp::GreaterEq)?;
        let hi = self.binary_op(c, dim_row, BinaryOp::Less)?;
        let ok = self.binary_op(lo, hi, BinaryOp::And)?;
        let all = self.b.op(|y| Op::Reduce(Reduce { x: ok, op: ReduceOp::Min, axis: 1, keep_dims: true, y }))?;
        let terms = self.binary_op(c, strides, BinaryOp::Mul)?;
        let mut flat =
            self.b.op(|y| Op::Reduce(Reduce { x: terms, op: ReduceOp::Sum, axis: 1, keep_dims: true, y }))?;
        if !batch.is_empty() {
            let per_batch = (m / batch.iter().product::<usize>().max(1)).max(1);
            let first: Vec<f32> = (0..m).map(|i| (i / per_batch * inner) as f32).collect();
            let first = self.weight_f32(here, "batch_first_rows", &[m, 1], first)?;
            flat = self.binary_op(flat, first, BinaryOp::Add)?;
        }
        let nowhere = self.weight_f32(here, "index_nowhere", &[1], vec![-(r as f32) - 1.0])?;
        let kept = self.binary_op(flat, all, BinaryOp::When)?;
        let moved = self.binary_op(nowhere, all, BinaryOp::Unless)?;
        let flat = self.binary_op(kept, moved, BinaryOp::Add)?;
        self.one_hot_of(flat, &[m, 1], false, r)
    }

    /// Combines the updates `[A, M, B, 1]` into `data [A, N, B]` at the places `onehot
    /// [A, M, B1, N]` marks, by the reduction `red` (see the module docs). With constant
    /// indices (`konst`) the fills and the written mask are constants, and so is the whole
    /// combination when the updates are constants too (Kestrel computes no op on two weights).
    /// Returns `[A, N, B]` and how the updates were placed.
    fn scatter_into(
        &mut self,
        data: TensorId,
        upd: Operand,
        places: Places,
        d: Dims,
        red: ScatterReduction,
    ) -> Res<(TensorId, How)> {
        let here = OutletId::new(self.node, 0);
        if let (Operand::Act(u), Places::Const(k)) = (&upd, &places) {
            if k.gatherable(red, d) {
                return Ok((self.scatter_gathered(data, *u, k, d, red)?, How::Gathered));
            }
        }
        if d.a.saturating_mul(d.m).saturating_mul(d.b).saturating_mul(d.n) > super::MAX_COMPOSED {
            return Err(self.unsupported(&format!(
                "a scatter of {} updates into {} places: its one-hot pick [{}, {}, {}, {}] is over the {} elements a composition may take",
                d.a * d.m * d.b,
                d.a * d.n * d.b,
                d.a,
                d.m,
                d.b,
                d.n,
                super::MAX_COMPOSED
            )));
        }
        let (onehot, konst) = match &places {
            Places::Act(id) => (Some(*id), None),
            Places::Const(k) => (None, Some(k)),
        };
        let fill = match red {
            ScatterReduction::None | ScatterReduction::Add => 0.0,
            ScatterReduction::Mul => 1.0,
            ScatterReduction::Max => f32::NEG_INFINITY,
            ScatterReduction::Min => f32::INFINITY,
        };
        let combined = match (upd, konst) {
            (Operand::Const(u), Some(k)) => {
                let mut c = vec![fill; d.a * d.n * d.b];
                for &(dst, src) in &k.moves {
                    let v = u[src];
                    c[dst] = match red {
                        ScatterReduction::None | ScatterReduction::Add => c[dst] + v,
                        ScatterReduction::Mul => c[dst] * v,
                        ScatterReduction::Max => c[dst].max(v),
                        ScatterReduction::Min => c[dst].min(v),
                    };
                }
                self.weight_f32(here, "scatter_combined", &[d.a, d.n, d.b], c)?
            }
            (upd, _) => {
                let upd = match upd {
                    Operand::Act(id) => id,
                    Operand::Const(u) => self.weight_f32(here, "scatter_updates", &[d.a, d.m, d.b, 1], u)?,
                };
                let onehot = match (onehot, konst) {
                    (Some(id), _) => id,
                    (None, Some(k)) => {
                        let w = k.one_hot(d, red)?;
                        self.weight_f32(here, "scatter_one_hot", &[d.a, d.m, d.b1, d.n], w)?
                    }
                    (None, None) => unreachable!("one of the two is set"),
                };
                let mut picked = self.binary_op(upd, onehot, BinaryOp::When)?;
                if fill != 0.0 {
                    let elsewhere = match konst {
                        Some(k) => {
                            let e = k.one_hot(d, red)?.iter().map(|&h| if h == 0.0 { fill } else { 0.0 }).collect();
                            self.weight_f32(here, "scatter_fill", &[d.a, d.m, d.b1, d.n], e)?
                        }
                        None => {
                            let f = self.weight_f32(here, "scatter_fill", &[1], vec![fill])?;
                            self.binary_op(f, onehot, BinaryOp::Unless)?
                        }
                    };
                    picked = self.binary_op(picked, elsewhere, BinaryOp::Add)?;
                }
                let reduce = match red {
                    ScatterReduction::None | ScatterReduction::Add => ReduceOp::Sum,
                    ScatterReduction::Mul => ReduceOp::Prod,
                    ScatterReduction::Max => ReduceOp::Max,
                    ScatterReduction::Min => ReduceOp::Min,
                };
                let c = self.b.op(|y| Op::Reduce(Reduce { x: picked, op: reduce, axis: 1, keep_dims: false, y }))?;
                self.transpose(c, &[d.a, d.b, d.n], &[0, 2, 1])?.0
            }
        };
        let op = match red {
            ScatterReduction::None => {
                let written = match konst {
                    Some(k) => self.weight_f32(here, "scatter_written", &[d.a, d.n, d.b1], k.written.clone())?,
                    None => {
                        let x = onehot.ok_or_else(|| self.bad("a one-hot", "none".into()))?;
                        let w =
                            self.b.op(|y| Op::Reduce(Reduce { x, op: ReduceOp::Max, axis: 1, keep_dims: false, y }))?;
                        self.transpose(w, &[d.a, d.b1, d.n], &[0, 2, 1])?.0
                    }
                };
                let kept = self.binary_op(data, written, BinaryOp::Unless)?;
                return Ok((self.binary_op(kept, combined, BinaryOp::Add)?, How::Picked));
            }
            ScatterReduction::Add => BinaryOp::Add,
            ScatterReduction::Mul => BinaryOp::Mul,
            ScatterReduction::Max => BinaryOp::Max,
            ScatterReduction::Min => BinaryOp::Min,
        };
        Ok((self.binary_op(data, combined, op)?, How::Picked))
    }

    /// The scatter of updates `[A, M, B, 1]` (an activation) into `data [A, N, B]` at constant
    /// places where each place takes at most one update row ([`Konst::gatherable`]): the rows
    /// gathered onto the places (`Gather` by the constant source row of each, any row where none
    /// is written), combined with the data by the reduction's op, and the data kept where nothing
    /// is written (`When`/`Unless` of the constant written mask: exact, whatever the unused
    /// gathered rows hold). Returns `[A, N, B]`.
    fn scatter_gathered(
        &mut self,
        data: TensorId,
        upd: TensorId,
        k: &Konst,
        d: Dims,
        red: ScatterReduction,
    ) -> Res<TensorId> {
        let here = OutletId::new(self.node, 0);
        let (rows, row, places) = (d.a * d.m * d.b1, d.b / d.b1, d.a * d.n * d.b1);
        let u = self.reshape(upd, &[d.a, d.m, d.b, 1], &[rows, row])?;
        let source: Vec<f32> = k.source.iter().map(|&e| e as f32).collect();
        let idx = self.weight_f32(here, "scatter_source_rows", &[places], source)?;
        let g = self.b.op(|y| Op::Gather(Gather { x: u, idx, axis: 0, y }))?;
        let g = self.reshape(g, &[places, row], &[d.a, d.n, d.b])?;
        let v = match red {
            ScatterReduction::None => g,
            ScatterReduction::Add => self.binary_op(data, g, BinaryOp::Add)?,
            ScatterReduction::Mul => self.binary_op(data, g, BinaryOp::Mul)?,
            ScatterReduction::Max => self.binary_op(data, g, BinaryOp::Max)?,
            ScatterReduction::Min => self.binary_op(data, g, BinaryOp::Min)?,
        };
        let written = self.weight_f32(here, "scatter_written", &[d.a, d.n, d.b1], k.written.clone())?;
        let kept = self.binary_op(data, written, BinaryOp::Unless)?;
        let put = self.binary_op(v, written, BinaryOp::When)?;
        self.binary_op(kept, put, BinaryOp::Add)
    }
}

/// How a scatter's updates reached their places.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    /// Gathered by constant source rows ([`Lowerer::scatter_gathered`]).
    Gathered,
    /// Picked by a one-hot, or combined at conversion time.
    Picked,
}

/// The updates: an activation `[A, M, B, 1]`, or constant values.
enum Operand {
    Act(TensorId),
    Const(Vec<f32>),
}

/// Where the updates go: the one-hot `[A, M, B1, N]` computed at run time, or fixed by constant
/// indices.
enum Places {
    Act(TensorId),
    Const(Konst),
}

/// What constant indices fix at conversion time.
struct Konst {
    /// The updates' targets: `targets[e]` is the flat place in `[A, N, B1]` update row e writes,
    /// and its index on N.
    targets: Vec<(usize, usize)>,
    /// The `[A, N, B1]` 0/1 mask of the elements written.
    written: Vec<f32>,
    /// For each place in `[A, N, B1]`, the update row it takes (0 where none): the last one
    /// written there.
    source: Vec<usize>,
    /// Whether no place is written twice.
    distinct: bool,
    /// Every element move, (flat position in `[A, N, B]`, flat position in the updates), in
    /// update order, only the last to each position for reduction `none`.
    moves: Vec<(usize, usize)>,
}

impl Konst {
    /// From the updates' targets (`targets[e]`: the flat place in `[A, N, B1]` update row e
    /// writes, and its index on N), each update row `d.b / d.b1` elements long.
    fn new(targets: &[(usize, usize)], d: Dims, red: ScatterReduction) -> Res<Self> {
        let mut written = zeros([d.a, d.n, d.b1], "a scatter's written mask")?;
        let mut source = vec![0usize; written.len()];
        let mut distinct = true;
        for (e, &(place, _)) in targets.iter().enumerate() {
            distinct &= written[place] == 0.0;
            written[place] = 1.0;
            source[place] = e;
        }
        let row = d.b / d.b1;
        let mut moves = Vec::new();
        moves.try_reserve_exact(targets.len() * row).map_err(|_| {
            ConvertError::Kestrel(kestrel_rt::Error::OutOfMemory { what: "a scatter's moves".into(), bytes: u64::MAX })
        })?;
        for (e, &(place, _)) in targets.iter().enumerate() {
            if red != ScatterReduction::None || source[place] == e {
                moves.extend((0..row).map(|j| (place * row + j, e * row + j)));
            }
        }
        let mut t = Vec::new();
        t.try_reserve_exact(targets.len()).map_err(|_| {
            ConvertError::Kestrel(kestrel_rt::Error::OutOfMemory {
                what: "a scatter's targets".into(),
                bytes: u64::MAX,
            })
        })?;
        t.extend_from_slice(targets);
        Ok(Self { targets: t, written, source, distinct, moves })
    }

    /// Whether the updates can be gathered onto their places (each place takes at most one:
    /// reduction `none` keeps the last, the others need distinct places) with indices exact in
    /// f32.
    fn gatherable(&self, red: ScatterReduction, d: Dims) -> bool {
        (red == ScatterReduction::None || self.distinct) && d.a * d.m * d.b1 <= F32_EXACT
    }

    /// The one-hot `[A, M, B1, N]` (see [`one_hot_rows`]).
    fn one_hot(&self, d: Dims, red: ScatterReduction) -> Res<Vec<f32>> {
        one_hot_rows(&self.targets, d.n, red, "a scatter's one-hot weight")
    }
}

/// The constant one-hot `[targets.len(), n]`: row e has a 1 at `targets[e].1`; `targets[e].0`
/// names the element written, so for reduction `none` only the last update to an element keeps
/// its 1 (the last write wins).
fn one_hot_rows(targets: &[(usize, usize)], n: usize, red: ScatterReduction, what: &str) -> Res<Vec<f32>> {
    let mut w = zeros([targets.len(), n], what)?;
    let mut last = std::collections::HashMap::new();
    for (e, &(place, _)) in targets.iter().enumerate() {
        last.insert(place, e);
    }
    for (e, &(place, i)) in targets.iter().enumerate() {
        if red != ScatterReduction::None || last[&place] == e {
            w[e * n + i] = 1.0;
        }
    }
    Ok(w)
}
