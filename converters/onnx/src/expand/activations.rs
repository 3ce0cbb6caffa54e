//! Activations whose tract parsers compute the wrong function: `Celu` (tract's expansion drops
//! the `α·` factor of the negative branch: `min(0, exp(x/α) − 1)`, wrong for every negative x
//! when α ≠ 1) and `Swish` (tract reads it as SiLU and ignores `alpha`). Each is wired here from
//! its ONNX definition:
//!
//! - `Celu_α(x) = max(0, x) + α·(exp(min(0, x)/α) − 1)` — the same as ONNX's
//!   `max(0, x) + min(0, α·(exp(x/α) − 1))`, without an `exp` of a large positive x;
//! - `Swish_α(x) = x · sigmoid(α·x)` (opset 24).

use super::Wiring;
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::{math, nn};
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, ensure, expand, Expansion, InferenceOp, InferenceResult, Solver, StaticName,
    TensorProxy,
};
use tract_onnx::tract_hir::ops::element_wise::ElementWiseIntoHir;

/// Which activation, with its α.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Celu,
    Swish,
}

#[derive(Clone, Debug)]
struct Activation {
    kind: Kind,
    alpha: f32,
}

fn parse_kind(node: &NodeProto, kind: Kind) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let name = match kind {
        Kind::Celu => "Celu",
        Kind::Swish => "Swish",
    };
    ensure!(node.input.len() == 1, "{name} has 1 input, found {}", node.input.len());
    let alpha = node.get_attr_opt::<f32>("alpha")?.unwrap_or(1.0);
    ensure!(alpha.is_finite(), "{name}: attribute alpha {alpha} (a finite number)");
    match kind {
        Kind::Celu => ensure!(alpha != 0.0, "{name}: attribute alpha is 0 (x/α is undefined)"),
        // α = 1 is SiLU: tract's own op, which the lowering runs as one unary function.
        Kind::Swish if alpha == 1.0 => {
            return Ok((tract_onnx::tract_core::ops::nn::silu::silu().into_hir(), vec![]));
        }
        Kind::Swish => {}
    }
    Ok((expand(Activation { kind, alpha }), vec![]))
}

pub(super) fn parse_celu(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    parse_kind(node, Kind::Celu)
}

pub(super) fn parse_swish(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    parse_kind(node, Kind::Swish)
}

impl Expansion for Activation {
    fn name(&self) -> StaticName {
        match self.kind {
            Kind::Celu => "Celu".into(),
            Kind::Swish => "Swish".into(),
        }
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].shape, &inputs[0].shape)?;
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let x = inputs[0];
        let dt = w.fact(x)?.datum_type;
        ensure!(dt.is_float(), "{}: a float input, found {dt:?}", self.name());
        let alpha = w.scalar("alpha", self.alpha as f64, dt)?;
        let y = match self.kind {
            Kind::Celu => {
                let zero = w.scalar("zero", 0.0, dt)?;
                let one = w.scalar("one", 1.0, dt)?;
                let pos = w.binary("pos", math::max(), x, zero)?;
                let neg = w.binary("neg", math::min(), x, zero)?;
                let scaled = w.binary("neg_over_alpha", math::div(), neg, alpha)?;
                let e = w.node("exp", math::exp(), &[scaled])?;
                let em1 = w.binary("exp_minus_one", math::sub(), e, one)?;
                let branch = w.binary("alpha_branch", math::mul(), alpha, em1)?;
                w.binary("y", math::add(), pos, branch)?
            }
            Kind::Swish => {
                let gate_in = w.binary("alpha_x", math::mul(), alpha, x)?;
                let sig = w.node("sigmoid", nn::sigmoid(), &[gate_in])?;
                w.binary("y", math::mul(), x, sig)?
            }
        };
        Ok(tvec![y])
    }
}
