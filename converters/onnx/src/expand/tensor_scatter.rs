//! ONNX `TensorScatter` (opset 24, a KV-cache update): `update` written into `past_cache` along
//! the sequence axis from each batch entry's `write_indices[b]` (0 when absent; modulo the
//! cache length in `circular` mode). Expanded as a `ScatterElements` along that axis at
//! `write_indices[b] + j` (`j` the update's position), the indices constant or computed at run
//! time.

use super::{resolve_axis, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{MultiBroadcastTo, ScatterElements, ScatterReduction};
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let op = "TensorScatter";
    let given = |i: usize| node.input.get(i).is_some_and(|s| !s.is_empty());
    ensure!(
        given(0) && given(1) && node.input.len() <= 3,
        "{op}: inputs {:?} (past_cache, update, write_indices?)",
        node.input
    );
    let circular = match node.get_attr_opt::<&str>("mode")?.unwrap_or("linear") {
        "linear" => false,
        "circular" => true,
        other => bail!("{op}: mode `{other}` (linear or circular)"),
    };
    let axis = node.get_attr_opt::<i64>("axis")?.unwrap_or(-2);
    Ok((expand(TensorScatter { axis, circular, indices: given(2) }), vec![]))
}

#[derive(Clone, Debug)]
struct TensorScatter {
    axis: i64,
    circular: bool,
    /// A write_indices input.
    indices: bool,
}

impl Expansion for TensorScatter {
    fn name(&self) -> StaticName {
        "TensorScatter".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2 + self.indices as usize)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&inputs[1].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].shape, &inputs[0].shape)?;
        s.equals(&inputs[1].rank, &inputs[0].rank)?;
        if self.indices {
            s.equals(&inputs[2].rank, 1)?;
            s.equals(&inputs[2].shape[0], &inputs[0].shape[0])?;
        }
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let op = "TensorScatter";
        let mut w = Wiring::new(model, prefix);
        let (past, update) = (w.fact(inputs[0])?, w.fact(inputs[1])?);
        let rank = past.rank();
        ensure!(rank >= 2 && update.rank() == rank, "{op}: past_cache {:?} and update {:?}", past.shape, update.shape);
        let axis = resolve_axis(op, "axis", self.axis, rank)?;
        ensure!(axis > 0, "{op}: axis {} is the batch axis", self.axis);
        for a in (0..rank).filter(|&a| a != axis) {
            ensure!(
                past.shape[a] == update.shape[a],
                "{op}: update {:?} differs from past_cache {:?} off the axis",
                update.shape,
                past.shape
            );
        }
        let len =
            past.shape[axis].to_usize().map_err(|_| format_err!("{op}: cache length {} unknown", past.shape[axis]))?;
        let seq = update.shape[axis]
            .to_usize()
            .map_err(|_| format_err!("{op}: update length {} unknown", update.shape[axis]))?;
        ensure!(seq <= len, "{op}: an update of {seq} positions into a cache of {len}");
        // The update's positions along the axis, then each entry's write index added.
        let mut jshape = vec![1usize; rank];
        jshape[axis] = seq;
        let j = tensor1(&(0..seq as i64).collect::<Vec<_>>()).into_shape(&jshape)?;
        let mut index = w.konst("positions", j)?;
        if self.indices {
            let mut start = w.node("start", cast(i64::datum_type()), &[inputs[2]])?;
            for a in 1..rank {
                start = w.node(&format!("start.axis{a}"), AxisOp::Add(a), &[start])?;
            }
            index = w.binary("index", math::add(), start, index)?;
            if self.circular {
                let n = w.scalar("length", len as f64, i64::datum_type())?;
                index = w.binary("index.wrapped", math::rem(), index, n)?;
            }
        }
        let index = w.node("index.full", MultiBroadcastTo::new(update.shape.clone()), &[index])?;
        let scatter = ScatterElements { axis, reduction: ScatterReduction::None };
        Ok(tvec![w.node("scatter", scatter, &[inputs[0], index, inputs[1]])?])
    }
}
