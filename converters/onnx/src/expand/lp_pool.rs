//! ONNX `LpPool`: the p-norm of every window, `(Σ |x|^p)^(1/p)`, expanded as `|x|^p`, a zero
//! pad (the node's padding, SAME's, and ceil mode's past the end: padded values count 0), the
//! unpadded average pool with the node's kernel, strides and dilations times the window size
//! (the sum), and the `1/p` power.

use super::{check_ints, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::{Pad, PadMode};
use tract_onnx::tract_core::ops::cnn::{PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_core::ops::nn::DataFormat;
use tract_onnx::tract_hir::internal::{
    bail, ensure, expand, format_err, DimLike, Expansion, InferenceOp, InferenceResult, Solver, StaticName, TensorProxy,
};
use tract_onnx::tract_hir::ops::cnn::HirSumPool;

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let op = "LpPool";
    ensure!(node.input.len() == 1, "{op} has 1 input, found {}", node.input.len());
    let kernel = node.get_attr_opt_vec::<i64>("kernel_shape")?.ok_or_else(|| format_err!("{op}: no kernel_shape"))?;
    let d = kernel.len();
    ensure!(d >= 1, "{op}: kernel_shape is empty");
    let kernel = check_ints(op, "kernel_shape", Some(&kernel), d, 1, 1)?;
    let strides = check_ints(op, "strides", node.get_attr_opt_vec::<i64>("strides")?.as_deref(), d, 1, 1)?;
    let dilations = check_ints(op, "dilations", node.get_attr_opt_vec::<i64>("dilations")?.as_deref(), d, 1, 1)?;
    let p = node.get_attr_opt::<i64>("p")?.unwrap_or(2);
    ensure!(p >= 1, "{op}: attribute p {p} (an integer ≥ 1)");
    let ceil = match node.get_attr_opt::<i64>("ceil_mode")?.unwrap_or(0) {
        0 => false,
        1 => true,
        v => bail!("{op}: attribute ceil_mode {v} (0 or 1)"),
    };
    let pads = node.get_attr_opt_vec::<i64>("pads")?;
    let padding = match (node.get_attr_opt::<&str>("auto_pad")?.unwrap_or("NOTSET"), pads) {
        ("NOTSET", pads) => {
            let pads = check_ints(op, "pads", pads.as_deref(), 2 * d, 0, 0)?;
            PaddingSpec::ExplicitOnnxPool(pads[..d].into(), pads[d..].into(), ceil)
        }
        (_, Some(_)) => bail!("{op}: both pads and auto_pad"),
        ("VALID", None) => PaddingSpec::Valid,
        ("SAME_UPPER", None) => PaddingSpec::SameUpper,
        ("SAME_LOWER", None) => PaddingSpec::SameLower,
        (other, None) => bail!("{op}: auto_pad `{other}` (NOTSET, VALID, SAME_UPPER or SAME_LOWER)"),
    };
    let spec =
        PoolSpec::new(DataFormat::NCHW, kernel.into(), padding, Some(dilations.into()), Some(strides.into()), 0, 0);
    Ok((expand(LpPool { pool: HirSumPool::new(spec, false, false), p }), vec![]))
}

#[derive(Clone, Debug)]
struct LpPool {
    /// The (unnormalised) sum pool of the node's geometry: its rules give the output shape.
    pool: HirSumPool,
    p: i64,
}

impl Expansion for LpPool {
    fn name(&self) -> StaticName {
        "LpPool".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        self.pool.rules(s, inputs, outputs)
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let fact = w.fact(inputs[0])?;
        let spec = &self.pool.pool_spec;
        let d = spec.kernel_shape.len();
        ensure!(fact.rank() == d + 2, "LpPool: input of rank {} for a {d}-D kernel", fact.rank());
        ensure!(fact.datum_type.is_float(), "LpPool: input of type {:?} (a float type)", fact.datum_type);
        let spatial: Vec<usize> = fact.shape.iter().skip(2).map(|d| d.to_usize()).collect::<Result<_, _>>()?;
        let (dil, strides) = (spec.dilations(), spec.strides());
        let geo = spec.padding.compute(&spatial, &spec.kernel_shape, &dil, &strides);
        // The padding (the node's, SAME's, and ceil mode's past the end) as zeros, read by an
        // unpadded pool: zeros add nothing to Σ |x|^p, and every window then holds all K taps.
        let mut pads = vec![(0, 0); d + 2];
        for a in 0..d {
            let field = dil[a] * (spec.kernel_shape[a] - 1) + 1;
            let g = &geo[a];
            let padded = spatial[a] + g.pad_before + g.pad_after;
            ensure!(g.convoluted >= 1, "LpPool: no window fits on spatial axis {a}");
            let reach = (g.convoluted - 1) * strides[a] + field;
            pads[2 + a] = (g.pad_before, g.pad_after + reach.saturating_sub(padded));
        }
        let abs = w.node("abs", math::abs(), &[inputs[0]])?;
        let mut powered = match self.p {
            1 => abs,
            2 => w.binary("square", math::mul(), abs, abs)?,
            p => w.node("pow", math::pow_const(p as f32), &[abs])?,
        };
        if pads.iter().any(|&p| p != (0, 0)) {
            let zero = Tensor::zero_scalar_dt(fact.datum_type)?.into_arc_tensor();
            powered = w.node("pad", Pad { pads, mode: PadMode::Constant(zero) }, &[powered])?;
        }
        // The window mean times its size K: the sum (a mean is the pool the lowering has).
        let valid = PoolSpec { padding: PaddingSpec::Valid, ..spec.clone() };
        let name = w.name("mean");
        let mean = HirSumPool::new(valid, false, true).wire(&name, w.model, &[powered])?[0];
        let k: usize = spec.kernel_shape.iter().product();
        let k = w.scalar("window", k as f64, fact.datum_type)?;
        let sum = w.binary("sum", math::mul(), mean, k)?;
        Ok(tvec![match self.p {
            1 => sum,
            2 => w.node("sqrt", math::sqrt(), &[sum])?,
            p => w.node("root", math::pow_const(1.0 / p as f32), &[sum])?,
        }])
    }
}
