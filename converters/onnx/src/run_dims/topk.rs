//! ONNX `TopK` with its `k` computed at run time (a graph input, or a value the graph computes
//! from data): the output's axis is `k` long, a size the data decide, so `k` becomes a run-time
//! dim named `topk:<node>` with the range `1..=N` (N the axis length), converted at the bound
//! and probed like a NonZero's count (see the module above). The run reads it from `k` itself
//! (kept by the lowering under `run_dim:<symbol>`). A `k` that is a constant, or that tract
//! folds to one (`Min(Shape(x)[axis], 5)`), is no run-time dim: the node becomes tract's own
//! `Topk` as before.

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::{ensure, format_err, EvalContext, EvalOp, StaticName};
use tract_onnx::tract_core::ops::array::Topk;
use tract_onnx::tract_core::ops::Op;
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, expand, DimLike, Expansion, InferenceOp, InferenceResult, Solver,
    TensorProxy,
};

/// The prefix of a TopK's run-time dim's symbol name (`topk:<node name>`).
pub(crate) const PREFIX: &str = "topk:";

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let axis = node.get_attr_opt("axis")?.unwrap_or(-1i64);
    let largest = node.get_attr_opt("largest")?.unwrap_or(1i64) == 1;
    // No symbol: a TopK inside a subgraph, which only a constant k can size.
    let sym = node.get_attr_opt::<String>(super::ATTR_SYM)?;
    let count = node.get_attr_opt::<i64>(super::ATTR_VALUE)?;
    ensure!(count.is_none_or(|c| c >= 1), "a run-time dim's value must be at least 1, found {count:?}");
    Ok((expand(TopKHir { axis, largest, sym, count: count.map(|c| c as usize) }), vec![]))
}

/// `TopK` as read by the importer: tract's rules; wired as tract's `Topk` when `k` is a
/// constant, else as [`TopKAt`] at `count` (the axis length when `None`: the bound).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct TopKHir {
    axis: i64,
    largest: bool,
    sym: Option<String>,
    count: Option<usize>,
}

impl Expansion for TopKHir {
    fn name(&self) -> StaticName {
        "Topk".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2)?;
        check_output_arity(outputs, 2)?;
        s.equals(&inputs[0].datum_type, &outputs[0].datum_type)?;
        s.equals(&outputs[1].datum_type, i64::datum_type())?;
        s.equals(&inputs[0].rank, &outputs[0].rank)?;
        s.equals(&inputs[0].rank, &outputs[1].rank)?;
        s.equals(&inputs[1].rank, 1)?;
        s.equals(&inputs[1].shape[0], 1.to_dim())?;
        let axis = self.axis;
        s.given(&inputs[0].rank, move |s, rank| {
            let axis = if axis >= 0 { axis } else { axis + rank } as usize;
            for ix in (0..rank as usize).filter(|&ix| ix != axis) {
                s.equals(&inputs[0].shape[ix], &outputs[0].shape[ix])?;
                s.equals(&inputs[0].shape[ix], &outputs[1].shape[ix])?;
            }
            // A constant k sizes the axis (a computed one is sized when wired).
            s.given(&inputs[1].value, move |s, k| {
                if let Ok(k) = k.cast_to::<TDim>().and_then(|t| t.try_as_plain_ram()?.to_scalar::<TDim>().cloned()) {
                    s.equals(&outputs[0].shape[axis], k.clone())?;
                    s.equals(&outputs[1].shape[axis], k)?;
                }
                Ok(())
            })
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let fact = model.outlet_fact(inputs[0])?.clone();
        let rank = fact.rank() as i64;
        ensure!((-rank..rank).contains(&self.axis), "TopK: axis {} of a rank-{rank} input", self.axis);
        let axis = if self.axis >= 0 { self.axis } else { self.axis + rank } as usize;
        if let Some(k) = model.outlet_fact(inputs[1])?.konst.clone() {
            let k = k.cast_to::<TDim>()?.try_as_plain_ram()?.to_scalar::<TDim>()?.clone();
            return model.wire_node(prefix, Topk { axis, largest: self.largest, fallback_k: k }, inputs);
        }
        let Some(sym) = self.sym.clone() else {
            return Err(format_err!(
                "TopK inside a subgraph (If, Loop, Scan body) with k computed at run time: a size the data decide, \
                 supported in the main graph only"
            ));
        };
        let bound = fact.shape[axis].to_usize().map_err(|_| {
            format_err!(
                "TopK `{sym}` with k computed at run time over an axis of {} (a size known when converting is needed)",
                fact.shape[axis]
            )
        })?;
        let count = self.count.unwrap_or(bound);
        ensure!((1..=bound).contains(&count), "TopK `{sym}`: k = {count} over an axis of {bound}");
        model.wire_node(prefix, TopKAt { sym, count, bound, axis, largest: self.largest }, inputs)
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(2)
    }
}

/// `TopK` with `k` computed at run time, typed at one value of it: both outputs `count` long
/// on `axis`, `bound` (the axis length) the most it can be.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct TopKAt {
    /// The run-time dim's symbol.
    pub sym: String,
    /// The k the graph is typed at.
    pub count: usize,
    /// The axis length (the range's maximum).
    pub bound: usize,
    /// The axis, counted from the first.
    pub axis: usize,
    /// Whether the largest come first (else the smallest).
    pub largest: bool,
}

sized_by_data_op!(TopKAt, "Topk");

impl EvalOp for TopKAt {
    /// tract's `Topk` (constant folding), when k is the one typed.
    fn eval(&self, ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let k = inputs[1].cast_to_scalar::<i64>()?;
        ensure!(k == self.count as i64, "TopK `{}`: k = {k} where the graph is typed for {}", self.sym, self.count);
        let op = Topk { axis: self.axis, largest: self.largest, fallback_k: (self.count as i64).into() };
        EvalOp::eval(&op, ctx, inputs)
    }

    tract_onnx::tract_core::op_out_of_plan!();
}

impl TypedOp for TopKAt {
    tract_onnx::tract_core::as_op!();

    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let mut values = inputs[0].without_value();
        values.shape.set(self.axis, self.count.to_dim());
        let mut indices = values.clone();
        indices.datum_type = i64::datum_type();
        Ok(tvec![values, indices])
    }
}
