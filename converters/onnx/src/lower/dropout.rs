//! ONNX Dropout with its `ratio` and `training_mode` inputs (opset 12+), as tract-onnx imports
//! it (its own `Dropout` op, left in the graph when decluttering cannot prove inference mode).
//!
//! Dropout drops nothing in inference (`training_mode` false) or with a ratio of 0: the output
//! is the input and the mask is all true. In training mode with a ratio above 0 it drops
//! elements at random, which Kestrel does not do (it draws no random numbers): with constant
//! parameters that is refused at conversion. Parameters computed at run time (the standard's
//! test cases feed them as inputs) cannot be checked at conversion: the identity is guarded by
//! the run-time condition, so a run that asks for random dropout yields NaN in both outputs
//! (`0 / 0` added), never a silently undropped tensor; the conversion report says so.

use super::{f32s, Lowerer, Res, Val};
use kestrel_rt_format::ops::{BinaryOp, Op, TensorId, Unary, UnaryOp};
use tract_onnx::prelude::*;

/// A Dropout parameter: a constant value, or an activation (`[1]`).
enum Param {
    Const(f32),
    Act(TensorId),
}

impl Lowerer<'_> {
    /// Lowers tract-onnx's `Dropout` (with 1 or 2 outputs); `Ok(false)` for anything else.
    pub(super) fn try_dropout(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        // tract-onnx's op type is private: it is known by its name and its inputs (x, then an
        // optional float ratio and an optional bool training mode).
        if node.op.name() != "Dropout" || node.outputs.len() > 2 || node.inputs.is_empty() {
            return Ok(false);
        }
        let (mut ratio, mut training) = (None, None);
        for &i in &node.inputs[1..] {
            let dt = self.model.outlet_fact(i).map_err(|e| self.bad("a typed input", format!("{e}")))?.datum_type;
            let slot = if dt == bool::datum_type() { &mut training } else { &mut ratio };
            if slot.is_some() {
                return Err(
                    self.bad("a Dropout of x, ratio and training_mode", format!("{} inputs", node.inputs.len()))
                );
            }
            *slot = Some(i);
        }
        let (x, xs) = self.act(node.inputs[0])?;
        let param = |l: &mut Self, o: Option<OutletId>, default: f32, what: &str| -> Res<Param> {
            let Some(o) = o else { return Ok(Param::Const(default)) };
            match l.val(o)? {
                Val::Const(t) => match f32s(&t)?.as_slice() {
                    [v] => Ok(Param::Const(*v)),
                    v => Err(l.bad(&format!("one {what} value"), format!("{} values", v.len()))),
                },
                Val::Act { .. } => {
                    let (t, ts) = l.act(o)?;
                    if ts.iter().product::<usize>() != 1 {
                        return Err(l.bad(&format!("one {what} value"), format!("shape {ts:?}")));
                    }
                    Ok(Param::Act(l.reshape(t, &ts, &[1])?))
                }
            }
        };
        // ONNX's defaults: inference, ratio 0.5.
        let training = param(self, training, 0.0, "training_mode")?;
        let ratio = param(self, ratio, 0.5, "ratio")?;
        if let Param::Const(r) = ratio {
            if !(0.0..1.0).contains(&r) {
                return Err(self.bad("a ratio in [0, 1)", format!("{r}")));
            }
        }
        let here = OutletId::new(self.node, 0);
        // 1 where the run is inference (nothing dropped), from whichever parameter is computed.
        let inference = match (training, ratio) {
            (Param::Const(0.0), _) => None,
            (_, Param::Const(0.0)) => None,
            (Param::Const(_), Param::Const(r)) => {
                return Err(self.unsupported(&format!("random dropout in training mode (ratio {r})")));
            }
            (Param::Act(t), Param::Const(_)) => Some(self.b.op(|y| Op::Unary(Unary { x: t, op: UnaryOp::Not, y }))?),
            (Param::Const(_), Param::Act(r)) => {
                let zero = self.weight_f32(here, "dropout_zero", &[1], vec![0.0])?;
                Some(self.binary_op(r, zero, BinaryOp::Equal)?)
            }
            (Param::Act(t), Param::Act(r)) => {
                let zero = self.weight_f32(here, "dropout_zero", &[1], vec![0.0])?;
                let no_ratio = self.binary_op(r, zero, BinaryOp::Equal)?;
                let not_training = self.b.op(|y| Op::Unary(Unary { x: t, op: UnaryOp::Not, y }))?;
                Some(self.binary_op(not_training, no_ratio, BinaryOp::Or)?)
            }
        };
        let mask_shape = xs.clone();
        match inference {
            None => {
                self.set_out(Val::Act { id: x, shape: xs, int: false });
                if node.outputs.len() == 2 {
                    let ones = tract_onnx::prelude::tract_ndarray::ArrayD::from_elem(mask_shape, true).into_tensor();
                    self.vals.insert(OutletId::new(self.node, 1), Val::Const(ones.into_arc_tensor()));
                }
                self.count_fused("dropout-inference");
            }
            Some(inference) => {
                // 0 / 1 = 0 when nothing is dropped, 0 / 0 = NaN when the run asks for random
                // dropout.
                let zero = self.weight_f32(here, "dropout_zero", &[1], vec![0.0])?;
                let guard = self.binary_op(zero, inference, BinaryOp::Div)?;
                let y = self.binary_op(x, guard, BinaryOp::Add)?;
                self.out(y, xs);
                if node.outputs.len() == 2 {
                    let n = mask_shape.iter().product::<usize>();
                    let ones = self.weight_f32(here, "dropout_mask", &mask_shape, vec![1.0; n])?;
                    let mask = self.binary_op(ones, guard, BinaryOp::Add)?;
                    self.vals.insert(OutletId::new(self.node, 1), Val::Act { id: mask, shape: mask_shape, int: false });
                }
                let note = format!(
                    "Dropout `{}`: its ratio or training mode is computed at run time; a run that asks for \
                     random dropout (training mode, ratio above 0) yields NaN (Kestrel draws no random numbers)",
                    node.name
                );
                self.notices.push(note);
                self.count_fused("dropout-guarded");
            }
        }
        Ok(true)
    }
}
