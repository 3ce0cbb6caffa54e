//! ONNX `Upsample` (deprecated since opset 10 for `Resize`): `Resize` with the scales, the
//! asymmetric coordinate transform and, in nearest mode, the floor of the source coordinate
//! (`out = floor(in · scale)` along each axis). The scales come from the attribute (opset 7)
//! or the second input (opset 9), which must be a constant.

use super::{tensor_f32s, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::nn::resize::{CoordTransformer, Interpolator};
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, DimLike, Expansion, InferenceOp, InferenceResult,
    Solver, StaticName, TensorProxy,
};
use tract_onnx_opl::resize::{AspectRatio, CoordTransform, Nearest, Resize};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let interpolator = match node.get_attr_opt::<&str>("mode")?.unwrap_or("nearest") {
        "nearest" => Interpolator::Nearest,
        "linear" | "bilinear" => Interpolator::Linear,
        other => bail!("Upsample: mode `{other}` (nearest or linear)"),
    };
    let scales = node.get_attr_opt_vec::<f32>("scales")?;
    let inputs = if scales.is_some() { 1 } else { 2 };
    ensure!(
        node.input.len() == inputs,
        "Upsample has {inputs} input(s) (X{}), found {}",
        if inputs == 2 { ", scales" } else { "; scales an attribute" },
        node.input.len()
    );
    if let Some(s) = &scales {
        check_scales(s)?;
    }
    Ok((expand(Upsample { interpolator, scales }), vec![]))
}

fn check_scales(scales: &[f32]) -> TractResult<()> {
    if let Some(bad) = scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        bail!("Upsample: scale {bad} (each must be a positive number)");
    }
    Ok(())
}

#[derive(Clone, Debug)]
struct Upsample {
    interpolator: Interpolator,
    /// The scales attribute (opset 7); `None`: the second input.
    scales: Option<Vec<f32>>,
}

impl Upsample {
    fn rules_with<'r, 'p: 'r>(
        s: &mut Solver<'r>,
        scales: Vec<f32>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_scales(&scales)?;
        s.equals(&inputs[0].rank, scales.len() as i64)?;
        for (a, sc) in scales.into_iter().enumerate() {
            s.given(&inputs[0].shape[a], move |s, d| {
                if sc == 1.0 {
                    return s.equals(&outputs[0].shape[a], d);
                }
                let d = d.to_usize()?;
                s.equals(&outputs[0].shape[a], ((d as f32 * sc).floor() as usize).to_dim())
            })?;
        }
        Ok(())
    }
}

impl Expansion for Upsample {
    fn name(&self) -> StaticName {
        "Upsample".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, if self.scales.is_some() { 1 } else { 2 })?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].rank, &inputs[0].rank)?;
        match &self.scales {
            Some(scales) => Self::rules_with(s, scales.clone(), inputs, outputs),
            None => s.given(&inputs[1].value, move |s, v| Self::rules_with(s, tensor_f32s(&v)?, inputs, outputs)),
        }
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let rank = w.fact(inputs[0])?.rank();
        let scales = match &self.scales {
            Some(s) => w.konst("scales", tensor1(s))?,
            None => {
                let f = w.fact(inputs[1])?;
                ensure!(
                    f.konst.is_some(),
                    "Upsample: the scales input must be a constant (it is computed at run time here)"
                );
                inputs[1]
            }
        };
        let n = w.fact(scales)?.shape.iter().product::<TDim>();
        ensure!(n == rank.to_dim(), "Upsample: {n} scales for an input of rank {rank}");
        let op = Resize {
            axes: None,
            coord_transformer: CoordTransform::Plain(CoordTransformer::Asymmetric),
            interpolator: self.interpolator.clone(),
            nearest: Nearest::Floor,
            antialias: false,
            cubic_coeff_a_bits: (-0.75f32).to_bits(),
            exclude_outside: false,
            extrapolation_value_bits: 0f32.to_bits(),
            keep_aspect_ratio_policy: AspectRatio::Stretch,
            optional_roi_input: None,
            optional_scales_input: Some(1),
            optional_sizes_input: None,
        };
        Ok(tvec![w.node("resize", op, &[inputs[0], scales])?])
    }
}
