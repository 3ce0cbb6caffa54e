//! ONNX `MaxUnpool`: the values `X` written into a zero tensor at the indices `I` (flat over the
//! whole unpooled tensor, as MaxPool's indices are), `(in − 1)·stride − pads + kernel` long per
//! spatial axis; a larger `output_shape` (a constant) adds zeros after it, as onnx's reference
//! does. Expanded as one `ScatterElements` along the flattened tensor, a reshape and a zero pad;
//! the indices may be computed at run time.

use super::{check_ints, const_ints, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{Pad, PadMode, ScatterElements, ScatterReduction};
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let op = "MaxUnpool";
    let inputs = node.input.iter().filter(|i| !i.is_empty()).count();
    ensure!((2..=3).contains(&inputs), "{op} has 2 or 3 inputs (X, I, optional output_shape), found {inputs}");
    let kernel = node.get_attr_opt_vec::<i64>("kernel_shape")?.ok_or_else(|| format_err!("{op}: no kernel_shape"))?;
    let d = kernel.len();
    ensure!(d >= 1, "{op}: kernel_shape is empty");
    let kernel = check_ints(op, "kernel_shape", Some(&kernel), d, 1, 1)?;
    let strides = check_ints(op, "strides", node.get_attr_opt_vec::<i64>("strides")?.as_deref(), d, 1, 1)?;
    let pads = check_ints(op, "pads", node.get_attr_opt_vec::<i64>("pads")?.as_deref(), 2 * d, 0, 0)?;
    Ok((expand(MaxUnpool { kernel, strides, pads, output_shape: inputs == 3 }), vec![]))
}

#[derive(Clone, Debug)]
struct MaxUnpool {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    pads: Vec<usize>,
    /// An output_shape input (the third).
    output_shape: bool,
}

impl MaxUnpool {
    /// The default output shape for an input of `shape` `[N, C, *spatial]`.
    fn default_shape(&self, shape: &[usize]) -> TractResult<Vec<usize>> {
        let d = self.kernel.len();
        ensure!(shape.len() == d + 2, "MaxUnpool: X of rank {} for a {d}-D kernel", shape.len());
        let mut out = shape[..2].to_vec();
        for a in 0..d {
            let full = (shape[2 + a].max(1) - 1) * self.strides[a] + self.kernel[a];
            let (pb, pe) = (self.pads[a], self.pads[d + a]);
            if full <= pb + pe {
                bail!("MaxUnpool: the pads ({pb}, {pe}) leave nothing of spatial axis {a}");
            }
            out.push(full - pb - pe);
        }
        Ok(out)
    }
}

impl Expansion for MaxUnpool {
    fn name(&self) -> StaticName {
        "MaxUnpool".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2 + self.output_shape as usize)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&inputs[1].shape, &inputs[0].shape)?;
        s.equals(&outputs[0].rank, &inputs[0].rank)?;
        if self.output_shape {
            s.given(&inputs[2].value, move |s, v| {
                let v: Vec<TDim> = super::tensor_ints(&v)?.into_iter().map(|d| d.to_dim()).collect();
                s.equals(&outputs[0].shape, v.into_iter().collect::<TVec<_>>())
            })
        } else {
            s.given(&inputs[0].shape, move |s, shape| {
                let shape: Vec<usize> = shape.iter().map(|d| d.to_usize()).collect::<Result<_, _>>()?;
                let out: TVec<TDim> = self.default_shape(&shape)?.into_iter().map(|d| d.to_dim()).collect();
                s.equals(&outputs[0].shape, out)
            })
        }
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let shape = model.outlet_fact(inputs[0])?.shape.clone();
        let shape: Vec<usize> = shape.iter().map(|d| d.to_usize()).collect::<Result<_, _>>()?;
        let inferred = self.default_shape(&shape)?;
        let out: Vec<usize> = if self.output_shape {
            const_ints(model, inputs[2], "MaxUnpool", "output_shape")?.into_iter().map(|d| d.max(0) as usize).collect()
        } else {
            inferred.clone()
        };
        ensure!(
            out.len() == inferred.len() && out.iter().zip(&inferred).all(|(o, i)| o >= i),
            "MaxUnpool: output_shape {out:?} smaller than the unpooled shape {inferred:?}"
        );
        let mut w = Wiring::new(model, prefix);
        let x = w.fact(inputs[0])?;
        ensure!(out[..2] == inferred[..2], "MaxUnpool: output_shape {out:?} changes N or C of X {shape:?}");
        let total: usize = inferred.iter().product();
        let flat_x = tvec![x.shape.iter().product::<TDim>()];
        let zeros = Tensor::zero_dt(x.datum_type, &[total])?;
        let zeros = w.konst("zeros", zeros)?;
        let updates = w.node("updates", AxisOp::Reshape(0, x.shape.to_tvec(), flat_x.clone()), &[inputs[0]])?;
        let index = w.node("index.i64", cast(i64::datum_type()), &[inputs[1]])?;
        let index = w.node("index", AxisOp::Reshape(0, x.shape.to_tvec(), flat_x), &[index])?;
        let op = ScatterElements { axis: 0, reduction: ScatterReduction::None };
        let y = w.node("scatter", op, &[zeros, index, updates])?;
        let unpooled = AxisOp::Reshape(0, tvec![total.to_dim()], inferred.iter().map(|d| d.to_dim()).collect());
        let mut y = w.node("unpooled", unpooled, &[y])?;
        // A larger output_shape: zeros after the unpooled values (onnx's reference).
        if out != inferred {
            let pads = out.iter().zip(&inferred).map(|(o, i)| (0, o - i)).collect();
            let zero = Tensor::zero_scalar_dt(x.datum_type)?.into_arc_tensor();
            y = w.node("pad", Pad { pads, mode: PadMode::Constant(zero) }, &[y])?;
        }
        Ok(tvec![y])
    }
}
