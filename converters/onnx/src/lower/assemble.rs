//! Ops that assemble tensors, lowered exactly with generic ops: `Concat` → one placing Dense per
//! activation piece (a one-hot f32 weight `[N, n_i]` along the axis) summed with `Binary Add`,
//! constant pieces added as an f32 weight; `MultiBroadcastTo` → `Add` of an f32 zero weight;
//! `Pad` (constant, edge, reflect) → a selecting Dense per padded axis, plus the constant;
//! `Tile` → a repeating 0/1 Dense per repeated axis.

use super::select::squeeze_leading;
use super::{f32s, zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{Binary, BinaryOp, Op, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{MultiBroadcastTo, Pad, PadMode, Tile, TypedConcat};

/// `[outer, n, inner]` view of `shape` around `axis`.
fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

impl Lowerer<'_> {
    /// Lowers Concat, MultiBroadcastTo and Pad; `Ok(false)` for anything else.
    pub(super) fn try_assemble(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if let Some(op) = node.op_as::<TypedConcat>() {
            self.concat(op.axis)?;
            return Ok(true);
        }
        if node.op_is::<MultiBroadcastTo>() {
            let out = self.out_shape()?;
            let (x, _) = self.act(node.inputs[0])?;
            let zshape = squeeze_leading(&out);
            let zeros = zeros(zshape.iter().copied(), "a broadcast constant")?;
            let z = self.weight_f32(OutletId::new(self.node, 0), "broadcast", &zshape, zeros)?;
            let y = self.b.op(|y| Op::Binary(Binary { a: x, b: z, op: BinaryOp::Add, y }))?;
            self.finish(y, out)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Pad>() {
            self.pad(op)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<Tile>() {
            self.tile(op)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// ONNX Tile with constant repeats: per repeated axis, a 0/1 Dense whose rows read
    /// `0..n` again and again (`m·n` rows).
    fn tile(&mut self, op: &Tile) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let (x, xs) = self.act(node.inputs[0])?;
        let reps: Vec<usize> = op
            .multipliers
            .iter()
            .map(|d| {
                d.to_i64().map(|v| v as usize).map_err(|_| self.unsupported("Tile with repeats computed at run time"))
            })
            .collect::<Res<_>>()?;
        if reps.len() != xs.len() {
            return Err(self.bad(&format!("{} repeats", xs.len()), format!("{}", reps.len())));
        }
        let (mut y, mut ys) = (x, xs.clone());
        for (axis, &m) in reps.iter().enumerate() {
            if m == 1 {
                continue;
            }
            let n = xs[axis];
            let mut w = zeros([m * n, n], "a tile's 0/1 weight")?;
            for r in 0..m * n {
                w[r * n + r % n] = 1.0;
            }
            let w = self.weight_f32(OutletId::new(self.node, 0), "tile", &[m * n, n], w)?;
            (y, ys) = self.dense_along(y, &ys, axis, w, m * n)?;
        }
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        self.count_fused("tile-as-selections");
        Ok(())
    }

    /// Records `y` (reshaped to `out` if the broadcast produced another rank) as the output.
    fn finish(&mut self, y: TensorId, out: Vec<usize>) -> Res<()> {
        let y = self.reshape_to(y, &out)?;
        self.out(y, out);
        Ok(())
    }

    /// Adds a constant of the full output shape (leading 1-axes dropped) to `y`.
    fn add_const(&mut self, y: TensorId, usage: &'static str, out: &[usize], values: Vec<f32>) -> Res<TensorId> {
        let shape = squeeze_leading(out);
        let w = self.weight_f32(OutletId::new(self.node, 0), usage, &shape, values)?;
        Ok(self.b.op(|o| Op::Binary(Binary { a: y, b: w, op: BinaryOp::Add, y: o }))?)
    }

    fn concat(&mut self, axis: usize) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let (outer, total, inner) = split(&out, axis);
        let mut constant = zeros(out.iter().copied(), "a concatenated constant")?;
        let mut has_const = false;
        let mut sum: Option<TensorId> = None;
        let mut offset = 0;
        for &i in &node.inputs {
            let piece = match self.val(i)? {
                Val::Const(t) => {
                    let v = f32s(&t)?;
                    let n = t.shape().get(axis).copied().unwrap_or(1);
                    if v.len() != outer * n * inner {
                        return Err(self.bad("concat pieces of the output's other dims", format!("{:?}", t.shape())));
                    }
                    for o in 0..outer {
                        for j in 0..n {
                            let dst = (o * total + offset + j) * inner;
                            constant[dst..dst + inner].copy_from_slice(&v[(o * n + j) * inner..][..inner]);
                        }
                    }
                    has_const = true;
                    n
                }
                Val::Act { id, shape, int: false } => {
                    let n = shape[axis];
                    let mut w = zeros([total, n], "a concatenation's 0/1 weight")?;
                    for j in 0..n {
                        w[(offset + j) * n + j] = 1.0;
                    }
                    let w = self.weight_f32(i, "concat", &[total, n], w)?;
                    let (y, _) = self.dense_along(id, &shape, axis, w, total)?;
                    sum = Some(match sum {
                        None => y,
                        Some(a) => self.b.op(|o| Op::Binary(Binary { a, b: y, op: BinaryOp::Add, y: o }))?,
                    });
                    n
                }
                Val::Act { int: true, .. } => return Err(self.unsupported("concat of integer ids")),
            };
            offset += piece;
        }
        let mut y = sum.ok_or_else(|| self.bad("an activation piece", "only constants".into()))?;
        if has_const {
            y = self.add_const(y, "concat_const", &out, constant)?;
        }
        self.finish(y, out)?;
        self.count_fused("concat-as-placing-dense");
        Ok(())
    }

    fn pad(&mut self, op: &Pad) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let (mut x, mut xs) = self.act(node.inputs[0])?;
        if op.pads.len() != xs.len() {
            return Err(self.bad("one (before, after) per axis", format!("{:?}", op.pads)));
        }
        for (axis, &(before, after)) in op.pads.iter().enumerate() {
            if before == 0 && after == 0 {
                continue;
            }
            let n = xs[axis];
            let k = n + before + after;
            let mut w = zeros([k, n], "a padding's 0/1 weight")?;
            for j in 0..k {
                let r = j as i64 - before as i64;
                let src = match op.mode {
                    PadMode::Constant(_) => (0..n as i64).contains(&r).then_some(r),
                    PadMode::Edge => Some(r.clamp(0, n as i64 - 1)),
                    PadMode::Reflect => {
                        let last = n as i64 - 1;
                        let m = if r < 0 {
                            -r
                        } else if r > last {
                            2 * last - r
                        } else {
                            r
                        };
                        (0..n as i64).contains(&m).then_some(m)
                    }
                };
                match (src, &op.mode) {
                    (Some(s), _) => w[j * n + s as usize] = 1.0,
                    (None, PadMode::Constant(_)) => {}
                    (None, _) => return Err(self.unsupported("reflect padding wider than the axis")),
                }
            }
            let wid = self.weight_f32(node.inputs[0], "pad", &[k, n], w)?;
            (x, xs) = self.dense_along(x, &xs, axis, wid, k)?;
        }
        if let PadMode::Constant(v) = &op.mode {
            let value = f32s(v)?.first().copied().unwrap_or(0.0);
            if value != 0.0 {
                let mut c = zeros(out.iter().copied(), "a padding constant")?;
                for (flat, cv) in c.iter_mut().enumerate() {
                    let mut rest = flat;
                    let mut inside = true;
                    for a in (0..out.len()).rev() {
                        let coord = rest % out[a];
                        rest /= out[a];
                        let (b, _) = op.pads[a];
                        inside &= coord >= b && coord < b + (out[a] - op.pads[a].0 - op.pads[a].1);
                    }
                    if !inside {
                        *cv = value;
                    }
                }
                x = self.add_const(x, "pad_value", &out, c)?;
                xs = out.clone();
            }
        }
        let y = self.reshape(x, &xs, &out)?;
        self.out(y, out);
        self.count_fused("pad-as-selecting-dense");
        Ok(())
    }
}
