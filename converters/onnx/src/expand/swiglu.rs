//! ONNX `SwiGLU` (opset 28): `Swish_α(A) · B = A · sigmoid(α·A) · B`, A and B of one shape.

use super::Wiring;
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::{math, nn};
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, ensure, expand, Expansion, InferenceOp, InferenceResult, Solver, StaticName,
    TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 2, "SwiGLU has 2 inputs (A, B), found {}", node.input.len());
    let alpha = node.get_attr_opt::<f32>("alpha")?.unwrap_or(1.0);
    ensure!(alpha.is_finite(), "SwiGLU: attribute alpha {alpha} (a finite number)");
    Ok((expand(SwiGlu { alpha }), vec![]))
}

#[derive(Clone, Debug)]
struct SwiGlu {
    alpha: f32,
}

impl Expansion for SwiGlu {
    fn name(&self) -> StaticName {
        "SwiGLU".into()
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
        s.equals(&inputs[1].datum_type, &inputs[0].datum_type)?;
        s.equals(&inputs[1].shape, &inputs[0].shape)?;
        s.equals(&outputs[0].shape, &inputs[0].shape)?;
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let (a, b) = (w.fact(inputs[0])?, w.fact(inputs[1])?);
        ensure!(a.shape == b.shape, "SwiGLU: A {:?} and B {:?} differ in shape (no broadcasting)", a.shape, b.shape);
        let mut gate_in = inputs[0];
        if self.alpha != 1.0 {
            let alpha = w.scalar("alpha", self.alpha as f64, a.datum_type)?;
            gate_in = w.binary("alpha_a", math::mul(), inputs[0], alpha)?;
        }
        let sig = w.node("sigmoid", nn::sigmoid(), &[gate_in])?;
        let swish = w.binary("swish", math::mul(), inputs[0], sig)?;
        Ok(tvec![w.binary("y", math::mul(), swish, inputs[1])?])
    }
}
