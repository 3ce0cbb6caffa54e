//! ONNX `CenterCropPad`: each listed axis cropped to its target length around the centre (the
//! start rounded down) or padded with zeros on both sides (an odd extra on the end); a slice
//! and a zero pad. The target shape must be a constant.

use super::{const_ints, resolve_axis, tensor_ints, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{Pad, PadMode, Slice};
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 2, "CenterCropPad has 2 inputs (input_data, shape), found {}", node.input.len());
    Ok((expand(CenterCropPad { axes: node.get_attr_opt_vec::<i64>("axes")? }), vec![]))
}

#[derive(Clone, Debug)]
struct CenterCropPad {
    axes: Option<Vec<i64>>,
}

impl CenterCropPad {
    /// Each cropped or padded axis with its target length.
    fn targets(&self, rank: usize, shape: &[i64]) -> TractResult<Vec<(usize, usize)>> {
        let op = "CenterCropPad";
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a.iter().map(|&a| resolve_axis(op, "axis", a, rank)).collect::<TractResult<_>>()?,
            None => (0..rank).collect(),
        };
        ensure!(shape.len() == axes.len(), "{op}: shape holds {} values for {} axes", shape.len(), axes.len());
        let mut seen = vec![false; rank];
        let mut out = vec![];
        for (&a, &len) in axes.iter().zip(shape) {
            ensure!(!std::mem::replace(&mut seen[a], true), "{op}: axis {a} listed twice");
            if len < 1 {
                bail!("{op}: target length {len} on axis {a} (each must be ≥ 1)");
            }
            out.push((a, len as usize));
        }
        Ok(out)
    }
}

impl Expansion for CenterCropPad {
    fn name(&self) -> StaticName {
        "CenterCropPad".into()
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
        s.equals(&outputs[0].rank, &inputs[0].rank)?;
        s.given_2(&inputs[0].rank, &inputs[1].value, move |s, rank, shape| {
            let targets = self.targets(rank as usize, &tensor_ints(&shape)?)?;
            for a in 0..rank as usize {
                match targets.iter().find(|t| t.0 == a) {
                    Some(&(_, len)) => s.equals(&outputs[0].shape[a], len.to_dim())?,
                    None => s.equals(&outputs[0].shape[a], &inputs[0].shape[a])?,
                }
            }
            Ok(())
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let shape = const_ints(model, inputs[1], "CenterCropPad", "shape")?;
        let mut w = Wiring::new(model, prefix);
        let fact = w.fact(inputs[0])?;
        let rank = fact.rank();
        let mut y = inputs[0];
        let mut pads = vec![(0usize, 0usize); rank];
        for (a, len) in self.targets(rank, &shape)? {
            let have = fact.shape[a]
                .to_usize()
                .map_err(|_| format_err!("CenterCropPad: axis {a} has an unknown length {}", fact.shape[a]))?;
            if have > len {
                let start = (have - len) / 2;
                y = w.node(&format!("crop{a}"), Slice::new(a, start, start + len), &[y])?;
            } else if have < len {
                let before = (len - have) / 2;
                pads[a] = (before, len - have - before);
            }
        }
        if pads.iter().any(|&p| p != (0, 0)) {
            let zero = Tensor::zero_scalar_dt(fact.datum_type)?.into_arc_tensor();
            y = w.node("pad", Pad { pads, mode: PadMode::Constant(zero) }, &[y])?;
        }
        Ok(tvec![y])
    }
}
