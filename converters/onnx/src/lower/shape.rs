//! Axis and reduction ops: AxisOp → `Reshape`/`Transpose`, Softmax, Reduce, Gather → `Embedding`.

use super::{f32s, Lowerer, Res, Val};
use kestrel_rt_format::ops::{Binary, BinaryOp, Embedding, Op, Reduce, ReduceOp, Softmax, TensorId};
use kestrel_rt_format::ops::{Unary, UnaryOp};
use tract_onnx::prelude::{Arc, OutletId, Tensor};
use tract_onnx::tract_core::ops::array::Gather;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::nn::{Reduce as TReduce, Reducer, RmsNorm, Softmax as TSoftmax, SoftmaxKind};
use tract_transformers::ops::scaled_masked_softmax::ScaledMaskedSoftmax;

impl Lowerer<'_> {
    /// The max (min) of an empty set of a bool or integer type: the type's least (greatest)
    /// value, as ONNX defines it (f32 activations would give −∞ / +∞), a constant of the
    /// output's shape and type (exact; an output beyond f32's range leaves as limbs).
    fn empty_integer_extreme(&mut self, max: bool, dt: tract_onnx::prelude::DatumType) -> Res<()> {
        use tract_onnx::prelude::DatumType as D;
        let out = self.out_shape()?;
        let n: usize = out.iter().product();
        macro_rules! filled {
            ($t:ty) => {
                Tensor::from_shape(&out, &vec![if max { <$t>::MIN } else { <$t>::MAX }; n])
            };
        }
        let t = match dt {
            D::Bool => Tensor::from_shape(&out, &vec![!max; n]),
            D::I8 => filled!(i8),
            D::I16 => filled!(i16),
            D::I32 => filled!(i32),
            D::I64 => filled!(i64),
            D::U8 => filled!(u8),
            D::U16 => filled!(u16),
            D::U32 => filled!(u32),
            D::U64 => filled!(u64),
            _ => return Err(self.unsupported(&format!("the extreme of an empty set of {dt:?}"))),
        }
        .map_err(|e| self.bad("a constant", format!("{e}")))?;
        self.set_out(Val::Const(Arc::new(t)));
        Ok(())
    }

    /// Lowers the node if it is an axis, softmax, reduce or gather op; `Ok(false)` otherwise.
    pub(super) fn try_shape(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if let Some(op) = node.op_as::<AxisOp>() {
            let out = self.out_shape()?;
            match (self.val(node.inputs[0])?, op) {
                (Val::Act { id, int: true, .. }, AxisOp::Add(_) | AxisOp::Rm(_) | AxisOp::Reshape(..)) => {
                    self.set_out(Val::Act { id, shape: out, int: true });
                }
                (Val::Act { id, shape, int }, AxisOp::Move(from, to)) => {
                    let mut perm: Vec<usize> = (0..shape.len()).collect();
                    let a = perm.remove(*from);
                    perm.insert(*to, a);
                    if int && perm.iter().filter(|&&p| shape[p] != 1).is_sorted() {
                        // Only axes of length 1 move (XLNet's `[1, T]` ids to `[T, 1]`): the
                        // elements keep their order, the ids stay ids.
                        self.set_out(Val::Act { id, shape: out, int: true });
                    } else {
                        // Ids moved across each other: as exact f32 values (what reads them
                        // next, a Gather, takes values as indices).
                        let (x, shape) = self.act(node.inputs[0])?;
                        let (y, ys) = self.transpose(x, &shape, &perm)?;
                        self.out(y, ys);
                    }
                }
                (Val::Act { id, shape, .. }, _) => {
                    let y = self.reshape(id, &shape, &out)?;
                    self.out(y, out);
                }
                (Val::Const(_), _) => return Err(self.bad("an activation", "a constant".into())),
            }
            return Ok(true);
        }
        if let Some(op) = node.op_as::<ScaledMaskedSoftmax>() {
            self.scaled_masked_softmax(op)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<TSoftmax>() {
            if op.quant_output_dt.is_some() {
                return Err(self.unsupported(&format!("softmax over axes {:?}", op.axes)));
            }
            if let Some(ln) = self.log_of_softmax(op) {
                self.log_softmax(node.inputs[0], &op.axes, ln)?;
                return Ok(true);
            }
            if op.axes.len() != 1 {
                return Err(self.unsupported(&format!("softmax over axes {:?}", op.axes)));
            }
            let (x, shape) = self.act(node.inputs[0])?;
            let r = shape.len();
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(op.axes[0], r - 1);
            let (x, xs) = self.transpose(x, &shape, &perm)?;
            let y = self.b.op(|y| Op::Softmax(Softmax { x, y }))?;
            let (y, ys) = self.transpose(y, &xs, &perm)?;
            self.out(y, ys);
            return Ok(true);
        }
        if let Some(op) = node.op_as::<RmsNorm>() {
            // RMS norm (not preceded by a mean subtraction, which fuses to LayerNorm):
            // x · 1/√(mean(x²) + ε) over one axis, in generic ops.
            let eps =
                f32s(&op.eps)?.first().copied().ok_or_else(|| self.bad("a scalar ε", "an empty tensor".into()))?;
            let (x, shape) = self.act(node.inputs[0])?;
            let axis = op.axis as u32;
            let sq = self.b.op(|y| Op::Binary(Binary { a: x, b: x, op: BinaryOp::Mul, y }))?;
            let m = self.b.op(|y| Op::Reduce(Reduce { x: sq, op: ReduceOp::Mean, axis, keep_dims: true, y }))?;
            let e = self.weight_f32(OutletId::new(self.node, 0), "rms_eps", &[1], vec![eps])?;
            let me = self.b.op(|y| Op::Binary(Binary { a: m, b: e, op: BinaryOp::Add, y }))?;
            let s = self.b.op(|y| Op::Unary(Unary { x: me, op: UnaryOp::Sqrt, y }))?;
            let r = self.b.op(|y| Op::Unary(Unary { x: s, op: UnaryOp::Reciprocal, y }))?;
            let y = self.b.op(|y| Op::Binary(Binary { a: x, b: r, op: BinaryOp::Mul, y }))?;
            self.out(y, shape);
            return Ok(true);
        }
        if let Some(op) = node.op_as::<TReduce>() {
            if self.try_layer_norm()? {
                return Ok(true);
            }
            // The row of the format's reduction table naming tract's reducer (`Sum`, `All`,
            // `ArgMax(true)`…); a mean of squares is the squares' mean.
            let kind = match op.reducer {
                Reducer::MeanOfSquares => ReduceOp::Mean,
                r => ReduceOp::from_importer_name(&format!("{r:?}"))
                    .ok_or_else(|| self.unsupported(&format!("reducer {r:?}")))?,
            };
            let dt = self
                .model
                .outlet_fact(node.inputs[0])
                .map_err(|e| self.bad("a typed input", format!("{e}")))?
                .datum_type;
            let empty = op.axes.iter().any(|&a| self.val(node.inputs[0]).is_ok_and(|v| v.shape().get(a) == Some(&0)));
            if empty && !dt.is_float() && matches!(op.reducer, Reducer::Max | Reducer::Min) {
                return self.empty_integer_extreme(op.reducer == Reducer::Max, dt).map(|()| true);
            }
            let (mut x, mut shape) = self.act(node.inputs[0])?;
            if op.reducer == Reducer::MeanOfSquares {
                let xx = x;
                x = self.b.op(|y| Op::Binary(Binary { a: xx, b: xx, op: BinaryOp::Mul, y }))?;
            }
            // Contiguous axes (a global pool's H and W) reduce as one merged axis; a sum then
            // multiplied by 1/count (tract's mean) becomes a Mean, absorbing the Mul.
            let mut axes: Vec<usize> = op.axes.to_vec();
            axes.sort_unstable();
            let contiguous = axes.len() > 1 && axes.windows(2).all(|w| w[1] == w[0] + 1);
            let count: usize = axes.iter().map(|&a| shape[a]).product();
            let mean = (kind == ReduceOp::Sum).then(|| self.mean_scale_after(self.node, count)).flatten();
            let kind = if mean.is_some() { ReduceOp::Mean } else { kind };
            if contiguous || mean.is_some() {
                let (a0, a1) = (axes[0], axes[axes.len() - 1]);
                let merged: Vec<usize> =
                    shape[..a0].iter().copied().chain([count]).chain(shape[a1 + 1..].iter().copied()).collect();
                let out: Vec<usize> =
                    shape.iter().enumerate().map(|(i, &d)| if axes.contains(&i) { 1 } else { d }).collect();
                if contiguous || axes.len() == 1 {
                    let xm = self.reshape(x, &shape, &merged)?;
                    let r =
                        self.b.op(|y| Op::Reduce(Reduce { x: xm, op: kind, axis: a0 as u32, keep_dims: true, y }))?;
                    let kept: Vec<usize> =
                        merged.iter().enumerate().map(|(i, &d)| if i == a0 { 1 } else { d }).collect();
                    let y = self.reshape(r, &kept, &out)?;
                    let val = Val::Act { id: y, shape: out, int: false };
                    match mean {
                        Some(m) => {
                            self.count_fused("sum+scale as mean");
                            self.absorb(m, val);
                        }
                        None => self.set_out(val),
                    }
                    return Ok(true);
                }
            }
            let kind = if mean.is_some() { ReduceOp::Sum } else { kind };
            for &axis in &op.axes {
                let xx = x;
                x = self.b.op(|y| Op::Reduce(Reduce { x: xx, op: kind, axis: axis as u32, keep_dims: true, y }))?;
                shape[axis] = 1;
            }
            self.out(x, shape);
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Gather>().filter(|_| matches!(self.val(node.inputs[0]), Ok(Val::Const(_)))) {
            let out = self.out_shape()?;
            let (Val::Const(table), Val::Act { id: ids, shape: ids_shape, int }) =
                (self.val(node.inputs[0])?, self.val(node.inputs[1])?)
            else {
                return Err(self.unsupported("gather needs a constant table and indices computed at run time"));
            };
            // Any axis of a table of any rank: the gathered axis moved first and the others
            // flattened, `[V, D]` (a constant transpose), rows picked, and the picked rows'
            // axes put back where ONNX has them (`table.shape[..axis] + idx + table.shape[axis+1..]`).
            let (axis, dims) = (op.axis, table.shape().to_vec());
            if axis >= dims.len() {
                return Err(self.bad("a gather axis within the table's rank", format!("{axis} of {dims:?}")));
            }
            let rest: Vec<usize> = dims.iter().enumerate().filter(|&(a, _)| a != axis).map(|(_, &d)| d).collect();
            let (v, d) = (dims[axis], rest.iter().product::<usize>());
            let order: Vec<usize> = std::iter::once(axis).chain((0..dims.len()).filter(|&a| a != axis)).collect();
            let moved = (*table)
                .clone()
                .permute_axes(&order)
                .and_then(|t| t.into_shape(&[v, d]))
                .map_err(|e| self.bad("a table to gather rows from", format!("{e}")))?;
            let picked: Vec<usize> = ids_shape.iter().chain(&rest).copied().collect();
            let n: usize = ids_shape.iter().product();
            let y = if !int {
                self.gather_rows_by_values(&moved, ids, &ids_shape, picked.clone())?
            } else {
                let table = self.weight(node.inputs[0], "embedding", &[v, d], f32s(&moved)?)?;
                let y = self.b.op(|y| Op::Embedding(Embedding { ids, table, pos: None, y }))?;
                self.reshape(y, &[n, d], &picked)?
            };
            // [idx.., before.., after..] → [before.., idx.., after..].
            let (k, before) = (ids_shape.len(), axis);
            let perm: Vec<usize> = (k..k + before).chain(0..k).chain(k + before..picked.len()).collect();
            let y = if before > 0 { self.transpose(y, &picked, &perm)?.0 } else { y };
            self.out(y, out);
            return Ok(true);
        }
        Ok(false)
    }
}

impl Lowerer<'_> {
    /// Rows of a constant table `[V, D]` picked by indices the graph computed as f32 values
    /// (position ids from a cumulative sum over a padding mask, as RoBERTa-style encoders build
    /// them): the indices' one-hot `[J, V]` (`Equal` against `0..V` and `−V..0`) times the table,
    /// a Dense with the table as its exact f32 weight (one 1 and zeros per row: exact for finite
    /// tables). An index outside `−V..V` picks a zero row: the graph computed it.
    fn gather_rows_by_values(
        &mut self,
        table: &Tensor,
        idx: TensorId,
        idx_shape: &[usize],
        out: Vec<usize>,
    ) -> Res<TensorId> {
        let node = self.model.node(self.node);
        let (v, d) = (table.shape()[0], table.shape()[1]);
        let j: usize = idx_shape.iter().product();
        let t = f32s(table)?;
        if t.iter().any(|x| !x.is_finite()) {
            return Err(self.unsupported("a non-finite table picked by computed indices"));
        }
        let onehot = self.one_hot_of(idx, idx_shape, false, v)?;
        // Dense weights are stored [out, in]: the table transposed, [D, V].
        let mut w = super::zeros([d, v], "a gathered table's weight")?;
        for r in 0..v {
            for c in 0..d {
                w[c * v + r] = t[r * d + c];
            }
        }
        let w = self.weight_f32(node.inputs[0], "gathered_rows", &[d, v], w)?;
        let y = self.b.op(|y| {
            Op::Dense(kestrel_rt_format::ops::Dense {
                clamp: None,
                x: onehot,
                proj: kestrel_rt_format::ops::Proj { w, b: None },
                act: kestrel_rt_format::ops::Activation::None,
                y,
            })
        })?;
        let y = self.reshape(y, &[j, d], &out)?;
        self.count_fused("gather-rows-by-computed-indices");
        Ok(y)
    }

    /// A log-softmax: tract's Softmax of kind `LogSoftmax` (`Some(None)`), or a Softmax whose
    /// only consumer is an `Ln` (tract's expansion of ONNX LogSoftmax, `ln(softmax(x))`:
    /// `Some(Some(ln node))`).
    fn log_of_softmax(&self, op: &TSoftmax) -> Option<Option<usize>> {
        if op.kind == SoftmaxKind::LogSoftmax {
            return Some(None);
        }
        let ln = self.only_succ(self.node)?;
        ln.op_as::<ElementWiseOp>().is_some_and(|e| e.0.name() == "Ln").then_some(Some(ln.id))
    }

    /// `log_softmax(x) = (x − max) − ln Σ exp(x − max)` over `axes`. ln(softmax(x)) computed
    /// as written underflows: an element more than ~104 below its row's maximum has a softmax
    /// of 0 in f32 and a log-softmax of −inf where the value is finite (−10564 for ONNX's
    /// `test_logsoftmax_large_number` on random data; a −1e9 attention mask gives −inf, not
    /// about −1e9). The result is the Ln node's (`ln`), which is absorbed, else this node's.
    fn log_softmax(&mut self, x: OutletId, axes: &[usize], ln: Option<usize>) -> Res<()> {
        let (x, shape) = self.act(x)?;
        let reduce = |l: &mut Self, mut t: TensorId, op: ReduceOp| -> Res<TensorId> {
            for &axis in axes {
                let a = t;
                t = l.b.op(|y| Op::Reduce(Reduce { x: a, op, axis: axis as u32, keep_dims: true, y }))?;
            }
            Ok(t)
        };
        let m = reduce(self, x, ReduceOp::Max)?;
        let c = self.b.op(|y| Op::Binary(Binary { a: x, b: m, op: BinaryOp::Sub, y }))?;
        let e = self.b.op(|y| Op::Unary(Unary { x: c, op: UnaryOp::Exp, y }))?;
        let s = reduce(self, e, ReduceOp::Sum)?;
        let l = self.b.op(|y| Op::Unary(Unary { x: s, op: UnaryOp::Log, y }))?;
        let y = self.b.op(|y| Op::Binary(Binary { a: c, b: l, op: BinaryOp::Sub, y }))?;
        let val = Val::Act { id: y, shape, int: false };
        match ln {
            Some(n) => {
                self.count_fused("softmax+ln as log-softmax");
                self.absorb(n, val);
            }
            None => self.set_out(val),
        }
        Ok(())
    }

    /// tract's `ScaledMaskedSoftmax` (from an expanded ONNX Attention): `softmax(x·s + m)` over
    /// the last axis for an additive mask; for a boolean mask the scores where it is false are
    /// −∞ (a constant mask folded into an additive 0/−∞ constant, an activation's picked by
    /// `When`/`Unless`), and with `post_softmax_mask` the weights there are zeroed after.
    fn scaled_masked_softmax(&mut self, op: &ScaledMaskedSoftmax) -> Res<()> {
        let node = self.model.node(self.node);
        let here = OutletId::new(self.node, 0);
        let out = self.out_shape()?;
        let (x, _) = self.act(node.inputs[0])?;
        let scale = super::f32s(&op.scale)?.first().copied().ok_or_else(|| self.bad("a scale", "none".into()))?;
        let sw = self.weight_f32(here, "softmax_scale", &[1], vec![scale])?;
        let scaled = self.binary_op(x, sw, BinaryOp::Mul)?;
        let boolean =
            self.model.outlet_fact(node.inputs[1]).is_ok_and(|f| f.datum_type == tract_onnx::prelude::DatumType::Bool);
        let mv = self.val(node.inputs[1])?;
        let (scores, mask) = match (&mv, boolean) {
            (Val::Const(t), true) => {
                let m = super::f32s(t)?;
                let additive: Vec<f32> = m.iter().map(|&v| if v != 0.0 { 0.0 } else { f32::NEG_INFINITY }).collect();
                let t =
                    Arc::new(Tensor::from_shape(t.shape(), &additive).map_err(|e| self.bad("a mask", format!("{e}")))?);
                let a = self.operand_id(node.inputs[1], &Val::Const(t))?;
                let kept = self.operand_id(node.inputs[1], &mv)?;
                (self.binary_op(scaled, a, BinaryOp::Add)?, Some(kept))
            }
            (_, true) => {
                let m = self.operand_id(node.inputs[1], &mv)?;
                let kept = self.binary_op(scaled, m, BinaryOp::When)?;
                let fill = self.weight_f32(here, "masked_fill", &[1], vec![f32::NEG_INFINITY])?;
                let masked = self.binary_op(fill, m, BinaryOp::Unless)?;
                (self.binary_op(kept, masked, BinaryOp::Add)?, Some(m))
            }
            (_, false) => {
                let m = self.operand_id(node.inputs[1], &mv)?;
                (self.binary_op(scaled, m, BinaryOp::Add)?, None)
            }
        };
        let mut y = self.b.op(|y| Op::Softmax(Softmax { x: scores, y }))?;
        // A boolean mask also zeroes the weights it masks after the softmax, as ONNX Attention
        // defines it since opset 23: a row masked entirely gives 0, never NaN or uniform weights
        // (elsewhere the masked weights are already 0).
        if op.post_softmax_mask || mask.is_some() {
            let m = match (mask, &mv) {
                (Some(m), _) => m,
                (None, v) => self.operand_id(node.inputs[1], v)?,
            };
            y = self.binary_op(y, m, BinaryOp::When)?;
        }
        let y = self.reshape_to(y, &out)?;
        self.out(y, out);
        Ok(())
    }
}
