//! ONNX `CausalConvWithState` (opset 27): a stateful causal depthwise 1-D convolution. The
//! input `[B, C, T]` follows the carried state `past_state [B, C, K − 1]` (zeros when absent),
//! each channel is convolved with its own kernel `weight [C, 1, K]` (plus `bias`), optionally
//! through SiLU (`activation` silu or swish), and `present_state` is the last `K − 1` positions
//! of the state and input together. Expanded as a concat (or zero pad), a grouped `Conv` and a
//! slice.

use super::Wiring;
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{Pad, PadMode, Slice, TypedConcat};
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat, PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::nn::DataFormat;
use tract_onnx::tract_core::ops::{math, nn};
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let op = "CausalConvWithState";
    let given = |i: usize| node.input.get(i).is_some_and(|s| !s.is_empty());
    ensure!(
        given(0) && given(1) && node.input.len() <= 4,
        "{op}: inputs {:?} (input, weight, bias?, past_state?)",
        node.input
    );
    let outputs = node.output.iter().filter(|o| !o.is_empty()).count();
    ensure!(
        node.output.first().is_some_and(|o| !o.is_empty()) && outputs <= 2,
        "{op}: outputs {:?} (output, present_state)",
        node.output
    );
    let silu = match node.get_attr_opt::<&str>("activation")?.unwrap_or("none") {
        "none" => false,
        "silu" | "swish" => true,
        other => bail!("{op}: activation `{other}` (none, silu or swish)"),
    };
    Ok((expand(CausalConv { bias: given(2), past: given(3), silu, outputs }), vec![]))
}

#[derive(Clone, Debug)]
struct CausalConv {
    bias: bool,
    past: bool,
    silu: bool,
    outputs: usize,
}

impl Expansion for CausalConv {
    fn name(&self) -> StaticName {
        "CausalConvWithState".into()
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(self.outputs)
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2 + self.bias as usize + self.past as usize)?;
        check_output_arity(outputs, self.outputs)?;
        s.equals(&inputs[0].rank, 3)?;
        s.equals(&inputs[1].rank, 3)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].shape, &inputs[0].shape)?;
        if let Some(present) = outputs.get(1) {
            s.equals(&present.datum_type, &inputs[0].datum_type)?;
            s.equals(&present.rank, 3)?;
            s.equals(&present.shape[0], &inputs[0].shape[0])?;
            s.equals(&present.shape[1], &inputs[0].shape[1])?;
            s.given(&inputs[1].shape[2], move |s, k| {
                let k = k.to_usize()?;
                ensure!(k >= 1, "CausalConvWithState: a kernel of length 0");
                s.equals(&present.shape[2], (k - 1).to_dim())
            })?;
        }
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let op = "CausalConvWithState";
        let mut w = Wiring::new(model, prefix);
        let x = w.fact(inputs[0])?;
        let kernel = w.fact(inputs[1])?;
        ensure!(
            x.rank() == 3 && kernel.rank() == 3,
            "{op}: input {:?} and weight {:?} (rank 3)",
            x.shape,
            kernel.shape
        );
        let c = x.shape[1].to_usize().map_err(|_| format_err!("{op}: channel count {} unknown", x.shape[1]))?;
        let t = x.shape[2].to_usize().map_err(|_| format_err!("{op}: length {} unknown", x.shape[2]))?;
        let k = kernel.shape[2].to_usize()?;
        ensure!(
            k >= 1 && kernel.shape[0].to_usize().ok() == Some(c) && kernel.shape[1].to_usize().ok() == Some(1),
            "{op}: weight of shape {:?}, expected [{c}, 1, K] (depthwise)",
            kernel.shape
        );
        let mut next = 2;
        let bias = if self.bias {
            next += 1;
            inputs[2]
        } else {
            w.konst("bias", Tensor::zero_scalar_dt(x.datum_type)?)?
        };
        let padded = if self.past {
            let past = w.fact(inputs[next])?;
            ensure!(
                past.rank() == 3 && past.shape[1] == x.shape[1] && past.shape[2].to_usize().ok() == Some(k - 1),
                "{op}: past_state of shape {:?}, expected [B, {c}, {}]",
                past.shape,
                k - 1
            );
            w.node("padded", TypedConcat::new(2), &[inputs[next], inputs[0]])?
        } else if k > 1 {
            let zero = Tensor::zero_scalar_dt(x.datum_type)?.into_arc_tensor();
            w.node(
                "padded",
                Pad { pads: vec![(0, 0), (0, 0), (k - 1, 0)], mode: PadMode::Constant(zero) },
                &[inputs[0]],
            )?
        } else {
            inputs[0]
        };
        let spec = PoolSpec::new(DataFormat::NCHW, tvec![k], PaddingSpec::Valid, None, None, c, c);
        let conv = Conv { pool_spec: spec, kernel_fmt: KernelFormat::OIHW, group: c, q_params: None };
        let mut y = w.node("conv", conv, &[padded, inputs[1], bias])?;
        if self.silu {
            let sig = w.node("sigmoid", nn::sigmoid(), &[y])?;
            y = w.binary("silu", math::mul(), y, sig)?;
        }
        let mut outs = tvec![y];
        if self.outputs == 2 {
            outs.push(w.node("present_state", Slice::new(2, t, t + k - 1), &[padded])?);
        }
        Ok(outs)
    }
}
