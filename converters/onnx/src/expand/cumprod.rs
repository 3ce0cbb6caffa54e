//! ONNX `CumProd`: the running product along an axis (`exclusive`: the element itself left
//! out, `reverse`: from the end). Expanded as a log-step scan: with `y = x` (shifted by one,
//! ones filling in, when exclusive), `y ← y · shift(y, k)` for `k = 1, 2, 4, …` below the axis
//! length, `shift` a slice and a pad with ones; ⌈log₂ n⌉ multiplications. The axis must be a
//! constant.

use super::{const_ints, resolve_axis, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{MultiBroadcastTo, Pad, PadMode, Slice};
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 2, "CumProd has 2 inputs (x, axis), found {}", node.input.len());
    let flag = |name: &str| -> TractResult<bool> {
        match node.get_attr_opt::<i64>(name)?.unwrap_or(0) {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(format_err!("CumProd: attribute {name} is {v} (0 or 1)")),
        }
    };
    Ok((expand(CumProd { exclusive: flag("exclusive")?, reverse: flag("reverse")? }), vec![]))
}

#[derive(Clone, Debug)]
struct CumProd {
    exclusive: bool,
    reverse: bool,
}

impl Expansion for CumProd {
    fn name(&self) -> StaticName {
        "CumProd".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].shape, &inputs[0].shape)?;
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let axis = const_ints(model, inputs[1], "CumProd", "axis")?;
        ensure!(axis.len() == 1, "CumProd: axis holds {} values (one)", axis.len());
        let mut w = Wiring::new(model, prefix);
        let fact = w.fact(inputs[0])?;
        let axis = resolve_axis("CumProd", "axis", axis[0], fact.rank())?;
        let n = fact.shape[axis]
            .to_usize()
            .map_err(|_| format_err!("CumProd: axis length {} unknown", fact.shape[axis]))?;
        let one = tensor0(1f64).cast_to_dt(fact.datum_type)?.into_owned().into_arc_tensor();
        if n <= 1 {
            if !self.exclusive {
                return Ok(tvec![inputs[0]]);
            }
            // Nothing before the only element: ones.
            let one = w.konst("one", one.as_ref().clone().broadcast_into_rank(fact.rank())?)?;
            return Ok(tvec![w.node("ones", MultiBroadcastTo::new(fact.shape.clone()), &[one])?]);
        }
        let rank = fact.rank();
        // `y` moved k steps along the scan (toward the end, or the start when reversed), ones
        // filling in.
        let reverse = self.reverse;
        let shift = |w: &mut Wiring, name: &str, y: OutletId, k: usize| -> TractResult<OutletId> {
            let (slice, pad) =
                if reverse { (Slice::new(axis, k, n), (0, k)) } else { (Slice::new(axis, 0, n - k), (k, 0)) };
            let cut = w.node(&format!("{name}.slice"), slice, &[y])?;
            let mut pads = vec![(0, 0); rank];
            pads[axis] = pad;
            w.node(&format!("{name}.pad"), Pad { pads, mode: PadMode::Constant(one.clone()) }, &[cut])
        };
        let mut y = if self.exclusive { shift(&mut w, "exclusive", inputs[0], 1)? } else { inputs[0] };
        let mut k = 1;
        while k < n {
            let s = shift(&mut w, &format!("shift{k}"), y, k)?;
            y = w.binary(&format!("step{k}"), math::mul(), y, s)?;
            k *= 2;
        }
        Ok(tvec![y])
    }
}
