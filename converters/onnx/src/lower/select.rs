//! Selections without a Kestrel op of their own, lowered exactly with generic ops:
//! `Iff` with a constant condition (masked fill) → `When` by a 0/1 mask + Add of the filled values;
//! `Slice` and a `Gather` of constant indices forming a window (evenly spaced, increasing) → a
//! Dense with a one-hot f32 weight over the selected axis (moved last with a Transpose when
//! needed; the fusion passes turn it into a `Slice` or fold it into a projection), or a `Slice`
//! where that weight would pass the composed-constant bound; any other constant selection, and
//! indices known only at run time → one Kestrel `Gather` (a copy per index); a `Scan` that is an
//! inclusive cumulative sum (ONNX CumSum) → a Dense with a lower-triangular f32 weight of ones.

use super::{f32s, ints, zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{
    Binary, BinaryOp, Embedding, Gather as GatherOp, Op, Pool2d, PoolKind, Reduce, ReduceOp, Slice as SliceOp, TensorId,
};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{CumSum, Gather, GatherElements, GatherNd, OneHot, Slice};
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::logic::Iff;
use tract_onnx::tract_core::ops::scan::{InputMapping, Scan};
use tract_onnx::tract_core::ops::source::TypedSource;
use tract_onnx::tract_core::ops::Downsample;

pub(super) fn squeeze_leading(shape: &[usize]) -> Vec<usize> {
    let s: Vec<usize> = shape.iter().copied().skip_while(|&d| d == 1).collect();
    if s.is_empty() {
        vec![1]
    } else {
        s
    }
}

/// Index axes longer than this cannot be addressed exactly by f32 indices (2^24).
const EXACT_INDEX: usize = 1 << 24;

/// `(start, step)` when `rows` are increasing and evenly spaced (one row: step 1), else `None`.
fn window_of(rows: &[usize]) -> Option<(usize, usize)> {
    let (&first, rest) = rows.split_first()?;
    let step = match rest.first() {
        Some(&second) if second > first => second - first,
        Some(_) => return None,
        None => 1,
    };
    rows.windows(2).all(|w| w[1] == w[0] + step).then_some((first, step))
}

impl Lowerer<'_> {
    /// Lowers `Iff`, `Gather` on an activation and `Slice`; `Ok(false)` for anything else.
    pub(super) fn try_select(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if node.op_is::<Iff>() {
            self.iff()?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Gather>() {
            let idx = match self.val(node.inputs[1])? {
                Val::Const(idx) => idx,
                Val::Act { id, shape, int } => {
                    self.gather_runtime(op.axis, id, &shape, int)?;
                    return Ok(true);
                }
            };
            let idx = ints(self, &idx)?;
            self.select(op.axis, &idx)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<OneHot>() {
            self.one_hot(op)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<GatherElements>() {
            self.gather_elements(op.axis)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Downsample>() {
            // Every stride-th element from `modulo` (tract's form of a strided 1×1 convolution's
            // input and of strided slices).
            let (x, xs) = self.act(node.inputs[0])?;
            if op.stride == 0 {
                return Err(self.bad("a non-zero stride", "0".into()));
            }
            if op.stride < 0 {
                // Backwards from the last element (a negative-step `Slice`, `x[::-1]`): every
                // |stride|-th element of `modulo..n`, last first, as one selection (a `Gather`).
                let n = *xs.get(op.axis).ok_or_else(|| self.bad("the axis in range", format!("{}", op.axis)))?;
                let idx: Vec<i64> =
                    (op.modulo.min(n)..n).rev().step_by(op.stride.unsigned_abs()).map(|i| i as i64).collect();
                self.select(op.axis, &idx)?;
                return Ok(true);
            }
            // A spatial axis of an NCHW map from its first element: a 1×1 max pool with that
            // stride (an exact selection, without a one-hot matrix).
            if xs.len() == 4 && xs[0] == 1 && (op.axis == 2 || op.axis == 3) && op.modulo == 0 {
                let s = op.stride as u32;
                let stride = if op.axis == 2 { [s, 1] } else { [1, s] };
                let chw = xs[1..].to_vec();
                let x = self.reshape(x, &xs, &chw)?;
                let y = self.b.op(|y| {
                    Op::Pool2d(Pool2d {
                        x,
                        kind: PoolKind::Max,
                        kernel: [1, 1],
                        stride,
                        pad: [0; 4],
                        dilation: [1, 1],
                        count_include_pad: false,
                        y,
                    })
                })?;
                let out = self.out_shape()?;
                let y = self.reshape(y, &out[1..], &out)?;
                self.out(y, out);
                return Ok(true);
            }
            let idx: Vec<i64> = (op.modulo..xs[op.axis]).step_by(op.stride as usize).map(|i| i as i64).collect();
            self.select(op.axis, &idx)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<GatherNd>() {
            self.gather_nd(op.batch_dims)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<CumSum>() {
            self.cumsum(op.axis, op.exclusive, op.reverse)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Slice>() {
            let (start, end) = (op.start.to_i64(), op.end.to_i64());
            let (Ok(start), Ok(end)) = (start, end) else {
                return Err(self.unsupported("slice with symbolic bounds"));
            };
            let idx: Vec<i64> = (start..end).collect();
            self.select(op.axis, &idx)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The axis of a Scan that computes an inclusive cumulative sum from a zero state: body
    /// `state' = x_t + state`, emitted at every step, one element per step, forwards.
    pub(super) fn cumsum_axis(&self, op: &Scan) -> Option<usize> {
        let node = self.model.node(self.node);
        let (InputMapping::Scan(info), InputMapping::State) = (op.input_mapping.first()?, op.input_mapping.get(1)?)
        else {
            return None;
        };
        let simple = op.skip == 0 && !op.reset_every_turn && info.chunk == 1 && op.input_mapping.len() == 2;
        let [out] = op.output_mapping.as_slice() else { return None };
        let emits =
            out.state && out.scan.as_ref().is_some_and(|(slot, i)| *slot == 0 && i.axis == info.axis && i.chunk == 1);
        let zero_init =
            matches!(self.val(node.inputs[1]).ok()?, Val::Const(t) if f32s(&t).ok()?.iter().all(|&v| v == 0.0));
        let body = &op.body;
        let ops: Vec<_> = body.nodes().iter().filter(|n| !n.op_is::<TypedSource>()).collect();
        let [add] = ops.as_slice() else { return None };
        let is_add = add.op_as::<TypedBinOp>().is_some_and(|b| b.0.name() == "Add")
            && add.inputs.iter().all(|i| body.input_outlets().is_ok_and(|ins| ins.contains(i)))
            && body.output_outlets().ok()?.first().is_some_and(|o| o.node == add.id);
        (simple && emits && zero_init && is_add).then_some(info.axis)
    }

    /// Cumulative sum over `axis`: `y_t = Σ_{s≤t} x_s`, a Dense with `W[t, s] = [s ≤ t]`
    /// (`s < t` when exclusive; `s ≥ t` / `s > t` when reversed).
    pub(super) fn cumsum(&mut self, axis: usize, exclusive: bool, reverse: bool) -> Res<()> {
        let node = self.model.node(self.node);
        let (x, xs) = self.act(node.inputs[0])?;
        let n = xs[axis];
        let keep = |t: usize, s: usize| match (reverse, exclusive) {
            (false, false) => s <= t,
            (false, true) => s < t,
            (true, false) => s >= t,
            (true, true) => s > t,
        };
        let mut w = zeros([n, n], "a cumulative sum's triangular weight")?;
        for (i, v) in w.iter_mut().enumerate() {
            if keep(i / n, i % n) {
                *v = 1.0;
            }
        }
        let w = self.weight_f32(OutletId::new(self.node, 0), "cumsum", &[n, n], w)?;
        self.along_axis(x, &xs, axis, w, n)?;
        self.count_fused("cumsum-as-triangular-dense");
        Ok(())
    }

    /// Applies a Dense with weight `w [k, n]` along `axis` of `x` (moved last and back), and
    /// records the node's output.
    fn along_axis(&mut self, x: TensorId, xs: &[usize], axis: usize, w: TensorId, k: usize) -> Res<()> {
        let out = self.out_shape()?;
        let (y, ys) = self.dense_along(x, xs, axis, w, k)?;
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        Ok(())
    }

    /// A Dense with weight `w [k, n]` along `axis` of `x`; returns the result (axis now `k` long).
    pub(super) fn dense_along(
        &mut self,
        x: TensorId,
        xs: &[usize],
        axis: usize,
        w: TensorId,
        k: usize,
    ) -> Res<(TensorId, Vec<usize>)> {
        self.dense_along_biased(x, xs, axis, w, None, k)
    }

    /// ONNX GatherND: every index tuple `[.., k]` picks a row of `x` seen as
    /// `[prod(dims[..b + k]), prod(dims[b + k..])]` (b = batch_dims: a tuple addresses rows
    /// within its own entry of the first b axes). Constant indices: one `Gather` of the tuples'
    /// flat rows. Indices known at run time (ids, or f32 values the graph
    /// computed: CLIP's `[row, argmax]` end-of-text lookup): the tuple's flat row (each
    /// component counted from the end when negative, a tuple outside the data picking nothing),
    /// its one-hot, and each row picked by `When` and summed (exact).
    fn gather_nd(&mut self, batch_dims: usize) -> Res<()> {
        let node = self.model.node(self.node);
        let (x, xs) = self.act(node.inputs[0])?;
        let idx = self.val(node.inputs[1])?;
        let idx_shape = idx.shape();
        let b = batch_dims;
        let k = *idx_shape.last().ok_or_else(|| self.bad("indices of rank ≥ 1", "a scalar".into()))?;
        if k == 0 || b + k > xs.len() || idx_shape.len() <= b || idx_shape[..b] != xs[..b] {
            return Err(self.bad(
                &format!("index tuples of 1..={} elements after {b} batch axes of {xs:?}", xs.len() - b.min(xs.len())),
                format!("{idx_shape:?}"),
            ));
        }
        let (batch, dims) = (&xs[..b], &xs[b..b + k]);
        let outer: usize = xs[..b + k].iter().product();
        let inner: usize = xs[b + k..].iter().product();
        let rows: usize = idx_shape[..idx_shape.len() - 1].iter().product();
        let out = self.out_shape()?;
        let x2 = self.reshape(x, &xs, &[outer, inner])?;
        let (y, ys) = match idx {
            Val::Const(t) => {
                // The tuples' flat rows: one Gather of rows.
                let flat: Vec<usize> = self.flat_rows(&ints(self, &t)?, batch, dims)?;
                let idx = self.index_weight(node.inputs[1], "gather_nd_rows", &flat, outer)?;
                let y = self.b.op(|y| Op::Gather(GatherOp { x: x2, idx, axis: 0, y }))?;
                self.count_fused("gather-nd-as-gather");
                (y, vec![rows, inner])
            }
            Val::Act { id, shape, int } => {
                let onehot = self.tuple_one_hot(id, &shape, int, batch, dims)?;
                self.count_fused("gather-nd-at-run-time-as-one-hot-pick");
                (self.pick_rows(x2, outer, inner, onehot, rows)?, vec![rows, inner])
            }
        };
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        Ok(())
    }

    /// `y[j] = x[r_j]` for the rows `x [N, P]` a one-hot `[J, N]` selects: each element picked
    /// by `When` (the rest 0, whatever they hold) and summed over N (exact). `[J, P]`.
    pub(super) fn pick_rows(&mut self, x: TensorId, n: usize, p: usize, onehot: TensorId, j: usize) -> Res<TensorId> {
        if j.saturating_mul(n).saturating_mul(p) > super::MAX_COMPOSED {
            return Err(self.unsupported(&format!(
                "a run-time pick of {j} rows of {p} from {n}: [{j}, {n}, {p}] is over the {} elements a composition may take",
                super::MAX_COMPOSED
            )));
        }
        let xt = self.reshape(x, &[n, p], &[1, n, p])?;
        let onehot = self.reshape(onehot, &[j, n], &[j, n, 1])?;
        let picked = self.binary_op(xt, onehot, BinaryOp::When)?;
        Ok(self.b.op(|y| Op::Reduce(Reduce { x: picked, op: ReduceOp::Sum, axis: 1, keep_dims: false, y }))?)
    }

    /// `y[.., j, ..] = x[.., idx[j], ..]` on `axis` with integer indices known only at run time
    /// (`ids`, logical shape `ids_shape`): one Kestrel `Gather` reading the indices as f32
    /// values. Integer ids first become exact f32 values through an `Embedding` into the table
    /// `0, 1, …, N−1` (an id outside `0..N`, negative ones included, is a run-time error naming
    /// it, as before); indices the graph computed as f32 values (an ArgMax's: CLIP's end-of-text
    /// token) are read as they are, negative ones counting from the end, and one that is not an
    /// integer in `−N..N` is a run-time error on the CPU (`IndexOutOfRange`) and a zero block on
    /// the GPU.
    fn gather_runtime(&mut self, axis: usize, ids: TensorId, ids_shape: &[usize], int: bool) -> Res<()> {
        let node = self.model.node(self.node);
        let here = OutletId::new(self.node, 0);
        let out = self.out_shape()?;
        let (x, xs) = self.act(node.inputs[0])?;
        let n = xs[axis];
        let j: usize = ids_shape.iter().product();
        if n == 0 || j == 0 {
            return Err(self.unsupported("gather over an empty axis or with no indices"));
        }
        if n > EXACT_INDEX {
            return Err(self.unsupported(&format!("a gather over an axis of {n} (indices exact in f32 below 2^24)")));
        }
        let idx = if int {
            let arange: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let table = self.weight_f32(here, "index_values", &[n, 1], arange)?;
            let v = self.b.op(|y| Op::Embedding(Embedding { ids, table, pos: None, y }))?;
            self.reshape(v, &[j, 1], &[j])?
        } else {
            self.reshape(ids, ids_shape, &[j])?
        };
        let (y, ys) = self.gather_along(x, &xs, axis, idx, j)?;
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        self.count_fused("gather-at-run-time");
        Ok(())
    }

    /// A Kestrel `Gather` of `x` (dims `xs`) along `axis` by the 1-D indices `idx` (`k` of them,
    /// a weight or an activation); returns it and its dims (`xs` with the axis `k` long).
    fn gather_along(
        &mut self,
        x: TensorId,
        xs: &[usize],
        axis: usize,
        idx: TensorId,
        k: usize,
    ) -> Res<(TensorId, Vec<usize>)> {
        let axis_u = u32::try_from(axis).map_err(|_| self.unsupported("a gather axis past u32"))?;
        let y = self.b.op(|y| Op::Gather(GatherOp { x, idx, axis: axis_u, y }))?;
        let mut ys = xs.to_vec();
        ys[axis] = k;
        Ok((y, ys))
    }

    /// The f32 weight `[k]` of indices `rows`, each in `0..n` (exact below 2^24).
    fn index_weight(&mut self, src: OutletId, usage: &'static str, rows: &[usize], n: usize) -> Res<TensorId> {
        if n > EXACT_INDEX {
            return Err(self.unsupported(&format!("a gather over an axis of {n} (indices exact in f32 below 2^24)")));
        }
        let values: Vec<f32> = rows.iter().map(|&r| r as f32).collect();
        self.weight_f32(src, usage, &[rows.len()], values)
    }

    /// ONNX GatherElements on `axis`: `y[i, j, k] = x[i, idx[i, j, k], k]` (`idx` of `x`'s rank,
    /// the other axes as long as `x`'s), exactly with generic ops: a one-hot `[idx…, N]` of the
    /// indices (a constant for constant indices, negative ones counted from the end; at run
    /// time an `Embedding` of the ids into `0..N` and an `Equal`, an index outside `0..N` a
    /// run-time error), each element picked by `When` from `x` with its axis moved last and a
    /// unit axis in its place, `[i, 1, k, N]`, and summed over N.
    fn gather_elements(&mut self, axis: usize) -> Res<()> {
        let node = self.model.node(self.node);
        let here = OutletId::new(self.node, 0);
        let out = self.out_shape()?;
        // The data: an activation, or a constant (a registered buffer, as RoBERTa's token type
        // ids) arranged here and stored as an exact f32 weight.
        let data = self.val(node.inputs[0])?;
        let xs = data.shape();
        let r = xs.len();
        let n = xs[axis];
        if out.len() != r || (0..r).any(|a| a != axis && out[a] != xs[a]) || n == 0 {
            return Err(self.unsupported(&format!("indices {out:?} on other axes than the data's {xs:?}")));
        }
        let m: usize = out.iter().product();
        let oh_shape: Vec<usize> = out.iter().copied().chain([n]).collect();
        let onehot = match self.val(node.inputs[1])? {
            Val::Const(t) => {
                let idx = ints(self, &t)?;
                let mut w = zeros([m, n], "a gather's one-hot weight")?;
                for (e, &i) in idx.iter().enumerate() {
                    let i = if i < 0 { i + n as i64 } else { i };
                    if !(0..n as i64).contains(&i) {
                        return Err(self.bad(&format!("indices in -{n}..{n}"), format!("{i}")));
                    }
                    w[e * n + i as usize] = 1.0;
                }
                self.weight_f32(here, "gather_one_hot", &oh_shape, w)?
            }
            Val::Act { id, shape, int } => {
                let oh = self.one_hot_of(id, &shape, int, n)?;
                self.reshape(oh, &[m, n], &oh_shape)?
            }
        };
        // x with the gathered axis last and a unit axis in its place.
        let perm: Vec<usize> = (0..r).filter(|&a| a != axis).chain([axis]).collect();
        let ts: Vec<usize> = perm.iter().map(|&a| xs[a]).collect();
        let mut xu: Vec<usize> = ts[..r - 1].to_vec();
        xu.insert(axis, 1);
        xu.push(n);
        let xt = match data {
            Val::Const(t) => {
                let t =
                    (*t).clone().permute_axes(&perm).map_err(|e| self.bad("a permutable constant", format!("{e}")))?;
                let v = f32s(&t)?;
                self.weight_f32(node.inputs[0], "gathered_elements", &xu, v)?
            }
            Val::Act { .. } => {
                let (x, _) = self.act(node.inputs[0])?;
                let (xt, ts) = self.transpose(x, &xs, &perm)?;
                self.reshape(xt, &ts, &xu)?
            }
        };
        let picked = self.b.op(|y| Op::Binary(Binary { a: xt, b: onehot, op: BinaryOp::When, y }))?;
        let y =
            self.b.op(|y| Op::Reduce(Reduce { x: picked, op: ReduceOp::Sum, axis: r as u32, keep_dims: false, y }))?;
        self.out(y, out);
        self.count_fused("gather-elements-as-one-hot-pick");
        Ok(())
    }

    /// ONNX OneHot with a constant depth D and values: the indices' one-hot on a new axis. The
    /// indices as values (integers exact to 2^24; ids another op reads as a table's indices read
    /// as values), truncated as ONNX casts them (`t = x − fmod(x, 1)`), compared with `0..D` and
    /// with `−D..0` (negative indices count from the end; one outside `−D..D` gives an all-off
    /// row, as ONNX defines), scaled to the values; the new axis moved into place.
    fn one_hot(&mut self, op: &OneHot) -> Res<()> {
        let node = self.model.node(self.node);
        let here = OutletId::new(self.node, 0);
        let out = self.out_shape()?;
        let d = op.dim;
        let (on, off) = (f32s(&op.on)?.first().copied().unwrap_or(1.0), f32s(&op.off)?.first().copied().unwrap_or(0.0));
        if d == 0 {
            return Err(self.unsupported("one-hot of depth 0"));
        }
        if let Val::Const(_) = self.val(node.inputs[0])? {
            return Err(self.bad("indices computed at run time", "a constant".into()));
        }
        // Ids another op reads as a table's indices are read as values here.
        let (x, shape) = self.act(node.inputs[0])?;
        let n: usize = shape.iter().product();
        let x = self.reshape(x, &shape, &[n, 1])?;
        let one = self.weight_f32(here, "one", &[1], vec![1.0])?;
        let frac = self.binary_op(x, one, BinaryOp::Fmod)?;
        let t = self.binary_op(x, frac, BinaryOp::Sub)?;
        let mut y = self.one_hot_of(t, &[n, 1], false, d)?;
        if on - off != 1.0 {
            let s = self.weight_f32(here, "one_hot_scale", &[1], vec![on - off])?;
            y = self.binary_op(y, s, BinaryOp::Mul)?;
        }
        if off != 0.0 {
            let o = self.weight_f32(here, "one_hot_off", &[1], vec![off])?;
            y = self.binary_op(y, o, BinaryOp::Add)?;
        }
        let in_shape = shape;
        // [indices…, D] → D moved to `axis`.
        let flat: Vec<usize> = in_shape.iter().copied().chain([d]).collect();
        let n: usize = in_shape.iter().product();
        let y = self.reshape(y, &[n, d], &flat)?;
        let r = flat.len();
        let perm: Vec<usize> = (0..op.axis).chain([r - 1]).chain(op.axis..r - 1).collect();
        let (y, ys) = self.transpose(y, &flat, &perm)?;
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        self.count_fused("one-hot");
        Ok(())
    }

    /// The 0/1 one-hot `[m, n]` of `m` indices into an axis of length n (`idx` of logical shape
    /// `idx_shape`): integer ids through an `Embedding` into `0..n` (an id outside it is a run-time
    /// error naming it) and an `Equal` against `0..n`; indices the graph computed as f32 values
    /// compared with `0..n` and with `−n..0` (negative ones count from the end), so one outside
    /// `−n..n` has an all-zero row.
    pub(super) fn one_hot_of(&mut self, idx: TensorId, idx_shape: &[usize], int: bool, n: usize) -> Res<TensorId> {
        let here = OutletId::new(self.node, 0);
        let m: usize = idx_shape.iter().product();
        let arange: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let row = self.weight_f32(here, "index_positions", &[1, n], arange.clone())?;
        if int {
            let table = self.weight_f32(here, "index_values", &[n, 1], arange)?;
            let values = self.b.op(|y| Op::Embedding(Embedding { ids: idx, table, pos: None, y }))?;
            return self.binary_op(values, row, BinaryOp::Equal);
        }
        let x = self.reshape(idx, idx_shape, &[m, 1])?;
        let neg: Vec<f32> = (0..n).map(|i| i as f32 - n as f32).collect();
        let neg = self.weight_f32(here, "index_negative_positions", &[1, n], neg)?;
        let e1 = self.binary_op(x, row, BinaryOp::Equal)?;
        let e2 = self.binary_op(x, neg, BinaryOp::Equal)?;
        self.binary_op(e1, e2, BinaryOp::Max)
    }

    /// `y[.., j, ..] = x[.., idx[j], ..]` on `axis` (indices counted from the end when
    /// negative). A window (increasing, evenly spaced: ONNX `Slice`, a strided `Downsample`, a
    /// single index) is a Dense with a one-hot weight, which the fusion passes make a `Slice` or
    /// fold into a projection, or a `Slice` itself where that weight would pass
    /// [`MAX_COMPOSED`](super::MAX_COMPOSED) elements; any other selection (repeats, reversals,
    /// permutations) is one `Gather` with the indices as a weight.
    fn select(&mut self, axis: usize, idx: &[i64]) -> Res<()> {
        let node = self.model.node(self.node);
        let (x, xs) = self.act(node.inputs[0])?;
        let n = xs[axis];
        let k = idx.len();
        let mut rows = Vec::with_capacity(k);
        for &i in idx {
            let i = if i < 0 { i + n as i64 } else { i };
            if i < 0 || i as usize >= n {
                return Err(self.bad(&format!("indices in 0..{n}"), format!("{i}")));
            }
            rows.push(i as usize);
        }
        let window = window_of(&rows);
        if let (Some((start, step)), true) = (window, k.saturating_mul(n) > super::MAX_COMPOSED) {
            let out = self.out_shape()?;
            let u = |v: usize| u32::try_from(v).map_err(|_| self.unsupported("a slice past u32 elements"));
            let (axis, start, step, count) = (u(axis)?, u(start)?, u(step)?, u(k)?);
            let y = self.b.op(|y| Op::Slice(SliceOp { x, axis, start, step, count, offset: 0, len: count, y }))?;
            let mut ys = xs.clone();
            ys[axis as usize] = k;
            let y = self.reshape(y, &ys, &out)?;
            self.out(y, out);
            self.count_fused("select-as-slice");
            return Ok(());
        }
        if window.is_none() {
            let out = self.out_shape()?;
            let idx = self.index_weight(node.inputs[0], "select_rows", &rows, n)?;
            let (y, ys) = self.gather_along(x, &xs, axis, idx, k)?;
            let y = self.reshape(y, &ys, &out)?;
            self.out(y, out);
            self.count_fused("select-as-gather");
            return Ok(());
        }
        let mut w = zeros([k, n], "a selection's 0/1 weight")?;
        for (j, &i) in rows.iter().enumerate() {
            w[j * n + i] = 1.0;
        }
        let w = self.weight_f32(node.inputs[0], "select", &[k, n], w)?;
        self.along_axis(x, &xs, axis, w, k)?;
        self.count_fused("select-as-one-hot-dense");
        Ok(())
    }

    /// `where(c, t, f)` with a constant condition: `When(t, c) + When(f, 1−c)` (each branch
    /// where it is selected, else 0, whatever its value: NaN and ±∞ included), a constant branch
    /// folded into an added f32 weight.
    fn iff(&mut self) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let Val::Const(cond) = self.val(node.inputs[0])? else {
            return Err(self.unsupported("select with a non-constant condition"));
        };
        let bcast = |l: &Self, t: &Tensor| -> Res<Vec<f32>> {
            let t = t.cast_to::<f32>().map_err(|e| l.bad("a numeric constant", format!("{e}")))?;
            let b = t.broadcast_to_shape(&out).map_err(|e| l.bad("a broadcastable constant", format!("{e}")))?;
            f32s(&b)
        };
        let keep = bcast(self, &cond)?;
        let wshape = squeeze_leading(&out);
        let mut acts: Vec<TensorId> = Vec::new();
        let mut bias = vec![0f32; keep.len()];
        let mut has_bias = false;
        for (slot, usage) in [(1usize, "iff_true"), (2, "iff_false")] {
            let mask: Vec<f32> = keep.iter().map(|&c| if slot == 1 { c } else { 1.0 - c }).collect();
            match self.val(node.inputs[slot])? {
                Val::Const(t) => {
                    for ((b, v), m) in bias.iter_mut().zip(bcast(self, &t)?).zip(&mask) {
                        if *m != 0.0 {
                            *b += v;
                        }
                    }
                    has_bias = true;
                }
                Val::Act { id, int: false, .. } => {
                    // `When`, not a product: an unselected NaN or ±∞ must not leak (NaN·0 is NaN;
                    // a softmax row with every key masked is NaN, and the exporters' guard after
                    // it selects 0 there).
                    let m = self.weight_f32(node.inputs[0], usage, &wshape, mask)?;
                    acts.push(self.b.op(|y| Op::Binary(Binary { a: id, b: m, op: BinaryOp::When, y }))?);
                }
                Val::Act { int: true, .. } => return Err(self.bad("f32 branches", "integer ids".into())),
            }
        }
        let mut y = acts[0];
        if let Some(&other) = acts.get(1) {
            let a = y;
            y = self.b.op(|y| Op::Binary(Binary { a, b: other, op: BinaryOp::Add, y }))?;
        }
        if has_bias {
            let src = node.inputs[if matches!(self.val(node.inputs[1])?, Val::Const(_)) { 1 } else { 2 }];
            let w = self.weight_f32(src, "iff_fill", &wshape, bias)?;
            let a = y;
            y = self.b.op(|y| Op::Binary(Binary { a, b: w, op: BinaryOp::Add, y }))?;
        }
        let y = self.reshape_to(y, &out)?;
        self.out(y, out);
        self.count_fused("masked-fill");
        Ok(())
    }
}
