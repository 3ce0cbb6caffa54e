//! ONNX `NonMaxSuppression` (typed by [`crate::run_dims`] at one value `v` of its count, a
//! run-time dim) as Kestrel's `Nms` op, which writes the bound's `M` rows of `(batch, class,
//! box)` (the unused ones `-1`); the count (the rows whose batch index is not `-1`, summed) is
//! kept as the run-time dim's source, and the output is the first `v` rows. Scores and limits
//! may be constants (f32 weights) or computed; boxes are an activation.

use super::{Lowerer, Res, Val};
use crate::run_dims::{NmsAt, KEPT};
use kestrel_rt_format::ops::{BinaryOp, Nms, Op, Reduce, ReduceOp, Slice, TensorId};
use tract_onnx::prelude::*;

impl Lowerer<'_> {
    /// An operand of the `Nms` op in its own shape: an activation, or a constant as an f32
    /// weight.
    fn nms_operand(&mut self, o: OutletId, usage: &'static str) -> Res<(TensorId, Vec<usize>)> {
        let shape = match self.val(o)? {
            Val::Const(t) => t.shape().to_vec(),
            Val::Act { shape, .. } => shape,
        };
        Ok((self.f32_operand(o, usage, &shape)?, shape))
    }

    /// Lowers [`NmsAt`]; `Ok(false)` for anything else.
    pub(super) fn try_nms(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<NmsAt>() else { return Ok(false) };
        let op = op.clone();
        let inputs = node.inputs.clone();
        let (boxes, bs) = self.act(inputs[0])?;
        let (scores, ss) = self.nms_operand(inputs[1], "nms_scores")?;
        if bs.len() != 3 || ss.len() != 3 || bs[2] != 4 || bs[0] != ss[0] || bs[1] != ss[2] {
            return Err(self.bad("boxes [B, N, 4] and scores [B, C, N]", format!("{bs:?}, {ss:?}")));
        }
        let mut limits = [None; 3];
        for (k, (slot, usage)) in limits.iter_mut().zip(["nms_max_out", "nms_iou", "nms_score"]).enumerate() {
            if let Some(i) = op.limit_input(k) {
                // An empty limit is an absent one (as the standard's reference reads it).
                if matches!(self.val(inputs[i])?, Val::Const(t) if t.len() == 0) {
                    continue;
                }
                let (id, shape) = self.nms_operand(inputs[i], usage)?;
                if shape.iter().product::<usize>() != 1 {
                    return Err(self.bad("a one-element limit", format!("{shape:?}")));
                }
                *slot = Some(id);
            }
        }
        let [max_out, iou, score] = limits;
        let m = op.bound;
        let all = self.b.op_declared(&[m, 3], |y| {
            Op::Nms(Nms { boxes, scores, max_out, iou, score, center_point_box: op.center, y })
        })?;
        // The count: rows whose batch index is a batch (≥ 0, the unused ones −1).
        let here = OutletId::new(self.node, 0);
        let col =
            self.b.op(|y| Op::Slice(Slice { x: all, axis: 1, start: 0, step: 1, count: 1, offset: 0, len: 1, y }))?;
        let half = self.weight_f32(here, "nms_unused", &[1], vec![-0.5])?;
        let used = self.binary_op(col, half, BinaryOp::Greater)?;
        let count = self.b.op(|y| Op::Reduce(Reduce { x: used, op: ReduceOp::Sum, axis: 0, keep_dims: true, y }))?;
        // Kept as the node writes it (a reshape is a view no node writes).
        self.b.keep(count, &format!("{KEPT}{}", op.sym))?;
        let v = op.count as u32;
        let out =
            self.b.op(|y| Op::Slice(Slice { x: all, axis: 0, start: 0, step: 1, count: v, offset: 0, len: v, y }))?;
        self.set_out(Val::Act { id: out, shape: vec![op.count, 3], int: false });
        self.count_fused("nms-with-a-run-time-count");
        Ok(true)
    }
}
