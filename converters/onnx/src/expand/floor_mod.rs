//! ONNX `Mod` with its ONNX values on shape arithmetic. With `fmod = 0` the remainder takes the
//! divisor's sign (Python's `%`: `−16 mod 128 = 112`); tract's parser corrects its truncated
//! remainder for numbers, but wires the plain one for `TDim` values (the shape arithmetic it
//! folds while typing the model), where `−16 rem 128 = −16`. A length padded to a multiple of a
//! block, `pad = (−len) mod block` (LongT5's local attention, traced by the legacy exporter:
//! `Neg(Shape(x)[1])`, `Mod`, `Pad`), then pads by `−len`: the padded axis folds to 0 and the
//! first broadcast against it fails (`broadcast((16), (0))`).
//!
//! Read here: `fmod = 1` as tract does (its `Rem`); `fmod = 0` as `((a rem b) + b) rem b`, the
//! remainder with the divisor's sign for any signs wherever `rem` truncates (integers: `a rem b`
//! has `a`'s sign and `|a rem b| < |b|`, so adding `b` lands on `b`'s side) and for `TDim` values
//! with a positive divisor (tract's `TDim` remainder takes positive divisors only, as every
//! block size is); unsigned types need no correction.

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cast::wire_cast;
use tract_onnx::tract_core::ops::change_axes::wire_rank_broadcast;
use tract_onnx::tract_core::ops::math;
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
        model.wire_node(prefix, math::rem(), &[shifted, wires[1]])
    }
}
