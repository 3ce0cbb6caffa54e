//! ONNX `Mod` with its ONNX values on shape arithmetic. With `fmod = 0` the remainder takes the
//! divisor's sign (Python's `%`: `−16 mod 128 = 112`); tract's parser corrects its truncated
//! remainder for numbers, but wires the plain one for `TDim` values (the shape arithmetic it
//! folds while typing the model), where `−16 rem 128 = −16`. A length padded to a multiple of a
//! block, `pad = (−len) mod block` (LongT5's local attention, traced by the legacy exporter:
//! `Neg(Shape(x)[1])`, `Mod`, `Pad`), then pads by `−len`: the padded axis folds to 0 and the
//! first broadcast against it fails (`broadcast((16), (0))`).
//!
//! Read here: `fmod = 1` as tract does (its `Rem`); `fmod = 0` on `TDim` values as
//! `((a rem b) + b) rem b`, the remainder with the divisor's sign (tract's `TDim` remainder takes
//! positive divisors only, as every block size is); on numbers as tract and ONNX Runtime compute
//! it, `a rem b`, plus `b` where the two have opposite signs; unsigned types need no correction.

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::wire_cast;
use tract_onnx::tract_core::ops::change_axes::wire_rank_broadcast;
use tract_onnx::tract_core::ops::{logic, math};
use tract_onnx::tract_hir::internal::{
    expand, BinIntoHir, Expansion, InferenceOp, InferenceResult, Solver, StaticName, TensorProxy, TractErrorContext,
};
use tract_onnx::tract_hir::ops::binary::rules;

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    if node.get_attr_opt::<i64>("fmod")? == Some(1) {
        Ok((math::Rem.into_hir(), vec![]))
    } else {
        Ok((expand(FloorMod), vec![]))
    }
}

/// `Mod` with `fmod = 0`: the remainder with the divisor's sign (see the module).
#[derive(Clone, Debug)]
struct FloorMod;

impl Expansion for FloorMod {
    fn name(&self) -> StaticName {
        "FloorMod".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        rules(s, inputs, outputs, move |a, b| {
            a.common_super_type(b).with_context(|| format!("Mod: no common type for {a:?} and {b:?}"))
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let (a, b) = (model.outlet_fact(inputs[0])?.datum_type, model.outlet_fact(inputs[1])?.datum_type);
        let dt = a.common_super_type(b).with_context(|| format!("Mod: no common type for {a:?} and {b:?}"))?;
        let wires = wire_rank_broadcast(prefix, model, inputs)?;
        let wires = wire_cast(prefix, model, &wires, dt)?;
        if dt.is_unsigned() {
            return model.wire_node(prefix, math::rem(), &wires);
        }
        let r = model.wire_node(format!("{prefix}.rem"), math::rem(), &wires)?[0];
        let shifted = model.wire_node(format!("{prefix}.shifted"), math::add(), &[r, wires[1]])?[0];
        if dt == DatumType::TDim {
            return model.wire_node(prefix, math::rem(), &[shifted, wires[1]]);
        }
        // Numbers: ONNX Runtime's rule, `r + b` where `r` and `b` have opposite signs (`r` kept
        // where it is 0 or NaN): exact for integers without the second remainder's overflow, and
        // for floats where `r + b` is not a remainder at all (`−2.5 mod ∞ = ∞`, as tract and
        // onnxruntime give).
        let zero = model.add_const(format!("{prefix}.zero"), Tensor::zero_scalar_dt(dt)?)?;
        let mut cmp =
            |name: &str, op: Box<dyn tract_onnx::tract_core::ops::binary::BinMiniOp>, x: OutletId, y: OutletId| {
                let w = wire_rank_broadcast(format!("{prefix}.{name}"), model, &[x, y])?;
                Ok::<_, TractError>(model.wire_node(format!("{prefix}.{name}"), TypedBinOp(op, None), &w)?[0])
            };
        let r_neg = cmp("r_neg", Box::new(logic::CompLT), r, zero)?;
        let r_pos = cmp("r_pos", Box::new(logic::CompGT), r, zero)?;
        let b_neg = cmp("b_neg", Box::new(logic::CompLT), wires[1], zero)?;
        let b_pos = cmp("b_pos", Box::new(logic::CompGT), wires[1], zero)?;
        let neg_pos = model.wire_node(format!("{prefix}.neg_pos"), logic::and(), &[r_neg, b_pos])?[0];
        let pos_neg = model.wire_node(format!("{prefix}.pos_neg"), logic::and(), &[r_pos, b_neg])?[0];
        let adjust = model.wire_node(format!("{prefix}.adjust"), logic::or(), &[neg_pos, pos_neg])?[0];
        model.wire_node(prefix, logic::Iff, &[adjust, shifted, r])
    }
}
