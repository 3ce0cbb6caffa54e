//! A masked scatter: `ScatterND(data, Transpose(NonZero(mask)), Slice(F, 0, …))`, how both
//! PyTorch exporters write `data.masked_scatter(mask, source)` (Hugging Face's multimodal models
//! put image or audio features where the token ids hold a placeholder this way). Its output has
//! the data's shape: the `j`-th set entry of the mask (row-major) takes `F[j]`, the others keep
//! the data. The size the data decide (NonZero's count) cancels out, so [`mark`] rewrites the
//! pattern, before tract reads the graph, into one node of fixed shapes, [`MaskedScatter`] —
//! no run-time dim, and no dependence between two counts that a bound could not satisfy (the
//! features' rows and the placeholders' count agree in every valid input, not at the bound).
//!
//! Lowered (`lower/nonzero.rs`) as: the mask's inclusive running count `c` (log-step shifted
//! adds), `F` gathered at `c − 1` (an unset entry reads a discarded element; more set entries
//! than `F` holds is the run-time index error ONNX Runtime gives too), and `When`/`Unless` of
//! the mask between that and the data. Exact.

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::{GraphProto, NodeProto, TensorProto};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::{ensure, format_err, EvalContext, EvalOp, StaticName};
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, expand, Expansion, InferenceOp, InferenceResult, Solver, TensorProxy,
};

/// The op type [`mark`] gives a masked scatter.
pub(crate) const OP_TYPE: &str = "KestrelMaskedScatter";

/// Rewrites every masked scatter of the main graph (see the module docs) into
/// [`OP_TYPE`]`(data, mask, F)`; the NonZero, Transpose and Slice it
/// read stay for any other reader (and are pruned when there is none).
pub(crate) fn mark(g: &mut GraphProto) {
    let producer: std::collections::HashMap<String, usize> =
        g.node.iter().enumerate().flat_map(|(i, n)| n.output.iter().map(move |o| (o.clone(), i))).collect();
    let node_of = |name: &str| producer.get(name).map(|&i| &g.node[i]);
    let mut rewrites = Vec::new();
    for (i, n) in g.node.iter().enumerate() {
        if n.op_type != "ScatterND" || !default_domain(n) || n.input.len() != 3 {
            continue;
        }
        if n.attribute.iter().any(|a| a.name == "reduction" && a.s != b"none") {
            continue;
        }
        let Some(t) = node_of(&n.input[1]).filter(|t| t.op_type == "Transpose" && default_domain(t)) else { continue };
        let perm_ok = t.attribute.iter().find(|a| a.name == "perm").is_none_or(|a| a.ints == [1, 0]);
        let Some(z) = t.input.first().and_then(|i| node_of(i)).filter(|z| z.op_type == "NonZero" && default_domain(z))
        else {
            continue;
        };
        let Some(u) = node_of(&n.input[2]).filter(|u| u.op_type == "Slice" && default_domain(u)) else { continue };
        // F[0:k] along axis 0, step 1: the updates are F's first `count` values in any valid
        // model (a different length is an invalid ScatterND).
        let konst = |k: usize| u.input.get(k).filter(|s| !s.is_empty()).map(|s| const_ints(g, s));
        let from_zero = konst(1) == Some(Some(vec![0]));
        let axis_zero = matches!(konst(3), None | Some(Some(_))) && konst(3).flatten().is_none_or(|a| a == [0]);
        let step_one = konst(4).is_none_or(|s| s == Some(vec![1]));
        if perm_ok && from_zero && axis_zero && step_one {
            rewrites.push((i, z.input[0].clone(), u.input[0].clone()));
        }
    }
    for (i, mask, source) in rewrites {
        let n = &mut g.node[i];
        n.op_type = OP_TYPE.to_string();
        n.input = vec![n.input[0].clone(), mask, source];
        n.attribute.clear();
    }
}

fn default_domain(n: &NodeProto) -> bool {
    n.domain.is_empty() || n.domain == "ai.onnx"
}

/// The int64 values of a constant (an initializer or a `Constant` node's tensor), if it is one.
fn const_ints(g: &GraphProto, name: &str) -> Option<Vec<i64>> {
    let t: &TensorProto = g.initializer.iter().find(|t| t.name == name).or_else(|| {
        let c = g.node.iter().find(|n| n.op_type == "Constant" && n.output.first().is_some_and(|o| o == name))?;
        c.attribute.iter().find(|a| a.name == "value").and_then(|a| a.t.as_ref())
    })?;
    if t.data_type != tract_onnx::pb::tensor_proto::DataType::Int64 as i32 {
        return None;
    }
    if !t.int64_data.is_empty() {
        return Some(t.int64_data.clone());
    }
    t.raw_data
        .len()
        .is_multiple_of(8)
        .then(|| t.raw_data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())).collect())
}

pub(crate) fn parse(_ctx: &ParsingContext, _node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    Ok((expand(MaskedScatterHir), vec![]))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct MaskedScatterHir;

impl Expansion for MaskedScatterHir {
    fn name(&self) -> StaticName {
        "MaskedScatter".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 3)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].shape, &inputs[0].shape)?;
        s.equals(&inputs[1].shape, &inputs[0].shape)?;
        s.equals(&inputs[2].datum_type, &inputs[0].datum_type)?;
        s.equals(&inputs[2].rank, 1)
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        model.wire_node(prefix, MaskedScatter, inputs)
    }
}

/// `out = data`, with the `j`-th set entry of `mask` (row-major) taking `source[j]`.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct MaskedScatter;

impl tract_onnx::tract_core::ops::Op for MaskedScatter {
    fn name(&self) -> StaticName {
        "MaskedScatter".into()
    }

    fn as_typed(&self) -> Option<&dyn TypedOp> {
        Some(self)
    }
}

impl EvalOp for MaskedScatter {
    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        ensure!(inputs.len() == 3, "MaskedScatter takes data, mask and source");
        let dt = inputs[0].datum_type();
        let data = inputs[0].cast_to::<f64>()?;
        let mask = inputs[1].cast_to::<f64>()?;
        let source = inputs[2].cast_to::<f64>()?;
        let (d, m, f) = (
            data.to_plain_array_view::<f64>()?,
            mask.to_plain_array_view::<f64>()?,
            source.to_plain_array_view::<f64>()?,
        );
        let f: Vec<f64> = f.iter().copied().collect();
        let mut out: Vec<f64> = d.iter().copied().collect();
        let mut j = 0;
        for (o, &set) in out.iter_mut().zip(m.iter()) {
            if set != 0.0 {
                *o = *f.get(j).ok_or_else(|| {
                    format_err!("masked scatter: the mask sets more entries than the {} values given", f.len())
                })?;
                j += 1;
            }
        }
        let t = Tensor::from_shape(data.shape(), &out)?;
        Ok(tvec![t.cast_to_dt(dt)?.into_owned().into_tvalue()])
    }

    fn eval_out_of_plan(&self, inputs: TVec<TValue>) -> TractResult<Option<TVec<TValue>>> {
        Ok(Some(EvalOp::eval(self, &EvalContext::out_of_plan(), inputs)?))
    }
}

impl TypedOp for MaskedScatter {
    fn as_op(&self) -> &dyn tract_onnx::tract_core::ops::Op {
        self
    }

    fn as_op_mut(&mut self) -> &mut dyn tract_onnx::tract_core::ops::Op {
        self
    }

    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec![inputs[0].datum_type.fact(inputs[0].shape.clone())])
    }
}
