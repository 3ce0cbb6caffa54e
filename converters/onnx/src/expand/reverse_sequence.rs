//! ONNX `ReverseSequence`: along the time axis, each batch entry's first `sequence_lens[b]`
//! elements reversed and the rest kept. Expanded as a `GatherElements` along the time axis at
//! `t < L_b ? L_b − 1 − t : t` (a constant when the lengths are; computed otherwise).

use super::{tensor_ints, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{GatherElements, MultiBroadcastTo};
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::logic::{self, Iff};
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 2, "ReverseSequence has 2 inputs (input, sequence_lens), found {}", node.input.len());
    let batch = node.get_attr_opt::<i64>("batch_axis")?.unwrap_or(1);
    let time = node.get_attr_opt::<i64>("time_axis")?.unwrap_or(0);
    if !matches!((batch, time), (0, 1) | (1, 0)) {
        bail!("ReverseSequence: batch_axis {batch} and time_axis {time} (one 0, the other 1)");
    }
    Ok((expand(ReverseSequence { batch: batch as usize, time: time as usize }), vec![]))
}

#[derive(Clone, Debug)]
struct ReverseSequence {
    batch: usize,
    time: usize,
}

impl Expansion for ReverseSequence {
    fn name(&self) -> StaticName {
        "ReverseSequence".into()
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
        s.equals(&inputs[1].rank, 1)?;
        s.equals(&inputs[1].shape[0], &inputs[0].shape[self.batch])?;
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let fact = w.fact(inputs[0])?;
        let rank = fact.rank();
        ensure!(rank >= 2, "ReverseSequence: input of rank {rank} (at least 2)");
        let lens = w.fact(inputs[1])?;
        ensure!(lens.datum_type.is_integer(), "ReverseSequence: sequence_lens of type {:?}", lens.datum_type);
        ensure!(
            lens.rank() == 1 && lens.shape[0] == fact.shape[self.batch],
            "ReverseSequence: sequence_lens of shape {:?} for {} batch entries",
            lens.shape,
            fact.shape[self.batch]
        );
        let t_len = fact.shape[self.time]
            .to_usize()
            .map_err(|_| format_err!("ReverseSequence: time axis length {} unknown", fact.shape[self.time]))?;
        if let Some(k) = &lens.konst {
            if let Some(bad) = tensor_ints(k)?.iter().find(|&&l| l < 0 || l as usize > t_len) {
                bail!("ReverseSequence: sequence length {bad} outside 0..={t_len}");
            }
        }
        // Time indices along the time axis, lengths along the batch axis, both of full rank.
        let mut tshape = vec![1usize; rank];
        tshape[self.time] = t_len;
        let t = tensor1(&(0..t_len as i64).collect::<Vec<_>>()).into_shape(&tshape)?;
        let t = w.konst("time", t)?;
        let mut l = w.node("lens", cast(i64::datum_type()), &[inputs[1]])?;
        for a in (0..rank).filter(|&a| a != self.batch) {
            l = w.node(&format!("lens.axis{a}"), AxisOp::Add(a), &[l])?;
        }
        let inside = w.compare("inside", logic::comp_lt(), t, l)?;
        let one = w.scalar("one", 1.0, i64::datum_type())?;
        let last = w.binary("last", math::sub(), l, one)?;
        let mirrored = w.binary("mirrored", math::sub(), last, t)?;
        let t_full = w.node("time.full", MultiBroadcastTo::new(w.fact(mirrored)?.shape.clone()), &[t])?;
        let index = w.node("index", Iff, &[inside, mirrored, t_full])?;
        let index = w.node("index.full", MultiBroadcastTo::new(fact.shape.clone()), &[index])?;
        Ok(tvec![w.node("gather", GatherElements { axis: self.time }, &[inputs[0], index])?])
    }
}
