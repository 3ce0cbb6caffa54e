//! Selections without a Kestrel op of their own, lowered exactly with generic ops:
//! `Iff` with a constant condition (masked fill) → Mul by a 0/1 mask + Add of the filled values;
//! `Gather` of constant indices from an activation and `Slice` → a Dense with a one-hot f32
//! weight over the selected axis (moved last with a Transpose when needed); a `Scan` that is an
//! inclusive cumulative sum (ONNX CumSum) → a Dense with a lower-triangular f32 weight of ones.

use super::{f32s, zeros, Lowerer, Res, Val};
use kestrel_format::ops::{Binary, BinaryOp, Op, Pool2d, PoolKind, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{CumSum, Gather, GatherNd, Slice};
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

impl Lowerer<'_> {
    /// Lowers `Iff`, `Gather` on an activation and `Slice`; `Ok(false)` for anything else.
    pub(super) fn try_select(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if node.op_is::<Iff>() {
            self.iff()?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Gather>() {
            let Val::Const(idx) = self.val(node.inputs[1])? else {
                return Err(self.unsupported("gather from an activation with non-constant indices"));
            };
            let idx: Vec<i64> = idx
                .cast_to::<i64>()
                .ok()
                .and_then(|t| t.try_as_plain_ram().and_then(|v| v.as_slice::<i64>().map(|s| s.to_vec())).ok())
                .ok_or_else(|| self.bad("integer indices", format!("{:?}", idx.datum_type())))?;
            self.select(op.axis, &idx)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Scan>() {
            let axis = self.cumsum_axis(op).ok_or_else(|| self.unsupported("a scan other than an inclusive cumsum"))?;
            self.cumsum(axis, false, false)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Downsample>() {
            // Every stride-th element from `modulo` (tract's form of a strided 1×1 convolution's
            // input and of strided slices).
            let (x, xs) = self.act(node.inputs[0])?;
            if op.stride <= 0 {
                return Err(self.unsupported(&format!("downsampling with stride {}", op.stride)));
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
    fn cumsum_axis(&self, op: &Scan) -> Option<usize> {
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
    fn cumsum(&mut self, axis: usize, exclusive: bool, reverse: bool) -> Res<()> {
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

    /// ONNX GatherND with constant indices `[.., k]` on an activation: every index tuple picks a
    /// row of `x` seen as `[prod(dims[..k]), prod(dims[k..])]`, so the whole op is a one-hot
    /// Dense over that leading axis.
    fn gather_nd(&mut self, batch_dims: usize) -> Res<()> {
        let node = self.model.node(self.node);
        let Val::Const(idx) = self.val(node.inputs[1])? else {
            return Err(self.unsupported("GatherND with computed indices"));
        };
        if batch_dims != 0 {
            return Err(self.unsupported(&format!("GatherND with batch_dims {batch_dims}")));
        }
        let (x, xs) = self.act(node.inputs[0])?;
        let idx_shape = idx.shape().to_vec();
        let k = *idx_shape.last().ok_or_else(|| self.bad("indices of rank ≥ 1", "a scalar".into()))?;
        if k == 0 || k > xs.len() {
            return Err(self.bad(&format!("index tuples of 1..={} elements", xs.len()), format!("{k}")));
        }
        let idx: Vec<i64> = idx
            .cast_to::<i64>()
            .ok()
            .and_then(|t| t.try_as_plain_ram().and_then(|v| v.as_slice::<i64>().map(|s| s.to_vec())).ok())
            .ok_or_else(|| self.bad("integer indices", format!("{:?}", idx.datum_type())))?;
        let outer: usize = xs[..k].iter().product();
        let inner: usize = xs[k..].iter().product();
        let rows = idx.len() / k;
        let mut w = zeros([rows, outer], "a GatherND's one-hot weight")?;
        for (r, tuple) in idx.chunks(k).enumerate() {
            let mut flat = 0usize;
            for (&i, &d) in tuple.iter().zip(&xs[..k]) {
                let i = if i < 0 { i + d as i64 } else { i };
                if i < 0 || i as usize >= d {
                    return Err(self.bad(&format!("indices in 0..{d}"), format!("{i}")));
                }
                flat = flat * d + i as usize;
            }
            w[r * outer + flat] = 1.0;
        }
        let w = self.weight_f32(node.inputs[1], "gather_nd", &[rows, outer], w)?;
        let x2 = self.reshape(x, &xs, &[outer, inner])?;
        let (y, ys) = self.dense_along(x2, &[outer, inner], 0, w, rows)?;
        let out = self.out_shape()?;
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        self.count_fused("gather-nd-as-one-hot-dense");
        Ok(())
    }

    /// `y[.., j, ..] = x[.., idx[j], ..]` on `axis`, as a Dense with a one-hot weight.
    fn select(&mut self, axis: usize, idx: &[i64]) -> Res<()> {
        let node = self.model.node(self.node);
        let (x, xs) = self.act(node.inputs[0])?;
        let n = xs[axis];
        let k = idx.len();
        let mut w = zeros([k, n], "a selection's 0/1 weight")?;
        for (j, &i) in idx.iter().enumerate() {
            let i = if i < 0 { i + n as i64 } else { i };
            if i < 0 || i as usize >= n {
                return Err(self.bad(&format!("indices in 0..{n}"), format!("{i}")));
            }
            w[j * n + i as usize] = 1.0;
        }
        let w = self.weight_f32(node.inputs[0], "select", &[k, n], w)?;
        self.along_axis(x, &xs, axis, w, k)?;
        self.count_fused("select-as-one-hot-dense");
        Ok(())
    }

    /// `where(c, t, f)` with a constant condition: `t·c + f·(1−c)`, a constant branch folded
    /// into an added f32 weight.
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
                    let m = self.weight_f32(node.inputs[0], usage, &wshape, mask)?;
                    acts.push(self.b.op(|y| Op::Binary(Binary { a: id, b: m, op: BinaryOp::Mul, y }))?);
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
        let ys: Vec<usize> =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect()).unwrap_or_default();
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        self.count_fused("masked-fill");
        Ok(())
    }
}
