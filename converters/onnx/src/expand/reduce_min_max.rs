//! `ReduceMax` and `ReduceMin` with their ONNX values where tract computes others: tract's
//! reduction starts from the type's most negative (most positive) finite value, not from −∞
//! (+∞), so a constant row of −∞ (+∞), or an empty set, folds to `f32::MIN` (`f32::MAX`). The
//! exporters' guard after a fully masked softmax (`ReduceMax` of the bias row = −∞ ⇒ the row is
//! masked) then folds to "not masked", and NaN reaches the output; `ReduceMax` over an empty
//! axis gives −3.4e38 for −∞.
//!
//! The reduction is wired here as [`ExactMinMax`], a typed op whose evaluation (tract's
//! constant folding, during inference and in the typed declutter passes) folds floats from ∓∞
//! and propagates NaN, as ONNX's reference (numpy's `maximum.reduce`) does; integers keep
//! tract's evaluation (their empty-set value is the type's bound, as ONNX says). After the
//! declutter passes [`restore`] puts tract's own `Reduce` back, which the lowering reads: what
//! runs is unchanged, only the constants folded on the way are.

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ndarray::{ArrayD, Axis};
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::nn::{Reduce, Reducer};
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, AxesMapping, EvalContext, EvalOp, Expansion,
    InferenceOp, InferenceResult, Op, Solver, StaticName, TensorProxy,
};

/// The parsed node: which reduction, its axes (an attribute before opset 18, an input from 18)
/// and its options.
#[derive(Clone, Debug)]
struct MinMax {
    max: bool,
    /// The `axes` attribute (opsets < 18); `None`: every axis.
    axes: Option<Vec<i64>>,
    /// Whether the axes come as a second input (opset ≥ 18 with two inputs).
    axes_input: bool,
    keep_dims: bool,
    /// With empty axes (absent input or an empty tensor), reduce nothing (opset ≥ 18).
    noop_with_empty_axes: bool,
}

fn parse(ctx: &ParsingContext, node: &NodeProto, max: bool) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let name = if max { "ReduceMax" } else { "ReduceMin" };
    ensure!((1..=2).contains(&node.input.len()), "{name} has 1 or 2 inputs, found {}", node.input.len());
    let keep_dims = match node.get_attr_opt::<i64>("keepdims")?.unwrap_or(1) {
        0 => false,
        1 => true,
        v => bail!("{name}: attribute keepdims is {v} (0 or 1)"),
    };
    let op = if ctx.onnx_operator_set_version >= 18 {
        let noop = match node.get_attr_opt::<i64>("noop_with_empty_axes")?.unwrap_or(0) {
            0 => false,
            1 => true,
            v => bail!("{name}: attribute noop_with_empty_axes is {v} (0 or 1)"),
        };
        let axes_input = node.input.len() == 2 && !node.input[1].is_empty();
        MinMax { max, axes: None, axes_input, keep_dims, noop_with_empty_axes: noop }
    } else {
        ensure!(node.input.len() == 1, "{name} (opset < 18) has 1 input, found {}", node.input.len());
        let axes = node.get_attr_opt_vec::<i64>("axes")?;
        MinMax { max, axes, axes_input: false, keep_dims, noop_with_empty_axes: false }
    };
    Ok((expand(op), vec![]))
}

pub(super) fn parse_max(ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    parse(ctx, node, true)
}

pub(super) fn parse_min(ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    parse(ctx, node, false)
}

impl MinMax {
    fn name(&self) -> &'static str {
        if self.max {
            "ReduceMax"
        } else {
            "ReduceMin"
        }
    }

    /// The reduced axes, sorted and deduplicated, for an input of `rank` axes given the axes
    /// input's values (`None`: no axes input).
    fn resolve(&self, rank: usize, given: Option<&[i64]>) -> TractResult<Vec<usize>> {
        let listed: Option<Vec<i64>> = match (given, &self.axes) {
            (Some(g), _) => Some(g.to_vec()),
            (None, Some(a)) => Some(a.clone()),
            (None, None) => None,
        };
        let listed = match listed {
            Some(l) if !l.is_empty() => l,
            Some(_) | None if self.noop_with_empty_axes => return Ok(vec![]),
            _ => return Ok((0..rank).collect()),
        };
        let r = rank as i64;
        let mut axes = Vec::with_capacity(listed.len());
        for a in listed {
            ensure!((-r..r).contains(&a), "{}: axis {a} out of range for rank {rank}", self.name());
            axes.push(if a < 0 { (a + r) as usize } else { a as usize });
        }
        axes.sort_unstable();
        axes.dedup();
        Ok(axes)
    }

    fn output_shape(&self, shape: &[TDim], axes: &[usize]) -> TVec<TDim> {
        shape
            .iter()
            .enumerate()
            .filter_map(|(i, d)| match (axes.contains(&i), self.keep_dims) {
                (false, _) => Some(d.clone()),
                (true, true) => Some(1.to_dim()),
                (true, false) => None,
            })
            .collect()
    }
}

impl Expansion for MinMax {
    fn name(&self) -> StaticName {
        MinMax::name(self).into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1 + usize::from(self.axes_input))?;
        check_output_arity(outputs, 1)?;
        s.equals(&inputs[0].datum_type, &outputs[0].datum_type)?;
        if self.axes_input {
            s.given_2(&inputs[0].shape, &inputs[1].value, move |s, shape, axes| {
                let axes = axes.cast_to::<i64>()?;
                let axes = self.resolve(shape.len(), Some(axes.try_as_plain_ram()?.as_slice::<i64>()?))?;
                s.equals(&outputs[0].shape, self.output_shape(&shape, &axes))
            })
        } else {
            s.given(&inputs[0].shape, move |s, shape| {
                let axes = self.resolve(shape.len(), None)?;
                s.equals(&outputs[0].shape, self.output_shape(&shape, &axes))
            })
        }
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let fact = model.outlet_fact(inputs[0])?.clone();
        let given = if self.axes_input {
            match &model.outlet_fact(inputs[1])?.konst {
                Some(t) => Some(t.cast_to::<i64>()?.try_as_plain_ram()?.as_slice::<i64>()?.to_vec()),
                None => bail!("{}: the axes input must be a constant (it is computed at run time here)", self.name()),
            }
        } else {
            None
        };
        let axes = self.resolve(fact.rank(), given.as_deref())?;
        if axes.is_empty() {
            // noop_with_empty_axes: the input itself.
            return Ok(tvec![inputs[0]]);
        }
        let mut wire = inputs[0];
        let tdim = fact.datum_type == TDim::datum_type();
        if tdim {
            let cast = tract_onnx::tract_core::ops::cast::cast(i64::datum_type());
            wire = model.wire_node(format!("{prefix}.cast_from_tdim"), cast, &[wire])?[0];
        }
        wire =
            model.wire_node(prefix, ExactMinMax { axes: axes.iter().copied().collect(), max: self.max }, &[wire])?[0];
        if tdim {
            let cast = tract_onnx::tract_core::ops::cast::cast(TDim::datum_type());
            wire = model.wire_node(format!("{prefix}.cast_to_tdim"), cast, &[wire])?[0];
        }
        if !self.keep_dims {
            for &axis in axes.iter().rev() {
                wire = model.wire_node(format!("{prefix}.rm{axis}"), AxisOp::Rm(axis), &[wire])?[0];
            }
        }
        Ok(tvec![wire])
    }
}

/// tract's `Reduce` of `Max` or `Min` over `axes` (kept, length 1), evaluated with ONNX's values
/// for floats: folds from −∞ (max) or +∞ (min), NaN propagates.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct ExactMinMax {
    pub axes: TVec<usize>,
    pub max: bool,
}

impl ExactMinMax {
    /// tract's op for the same reduction.
    pub(crate) fn tract(&self) -> Reduce {
        Reduce::new(self.axes.clone(), if self.max { Reducer::Max } else { Reducer::Min })
    }

    /// The reduction of `x`'s values (as f64: every f16/f32/f64 value is exact in it, and the
    /// result is one of them or ±∞ or NaN, exact back in the input's type).
    fn fold(&self, x: &ArrayD<f64>) -> ArrayD<f64> {
        let (start, max) = if self.max { (f64::NEG_INFINITY, true) } else { (f64::INFINITY, false) };
        let pick = move |acc: &f64, v: &f64| {
            if acc.is_nan() || v.is_nan() {
                f64::NAN
            } else if (max && *v > *acc) || (!max && *v < *acc) {
                *v
            } else {
                *acc
            }
        };
        let mut y = x.clone();
        for &axis in &self.axes {
            y = y.fold_axis(Axis(axis), start, pick).insert_axis(Axis(axis));
        }
        y
    }
}

impl Op for ExactMinMax {
    fn name(&self) -> StaticName {
        if self.max {
            "ExactReduceMax".into()
        } else {
            "ExactReduceMin".into()
        }
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("axes: {:?}", self.axes)])
    }

    tract_onnx::tract_core::op_as_typed_op!();
}

impl EvalOp for ExactMinMax {
    fn eval(&self, ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        ensure!(inputs.len() == 1, "{}: 1 input, found {}", self.name(), inputs.len());
        let dt = inputs[0].datum_type();
        if !dt.is_float() {
            return EvalOp::eval(&self.tract(), ctx, inputs);
        }
        let x = inputs[0].cast_to::<f64>()?;
        let y = self.fold(&x.to_plain_array_view::<f64>()?.to_owned());
        Ok(tvec![Tensor::from(y).cast_to_dt(dt)?.into_owned().into_tvalue()])
    }

    tract_onnx::tract_core::op_out_of_plan!();
}

impl TypedOp for ExactMinMax {
    tract_onnx::tract_core::as_op!();

    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        self.tract().output_facts(inputs)
    }

    fn axes_mapping(&self, inputs: &[&TypedFact], outputs: &[&TypedFact]) -> TractResult<AxesMapping> {
        self.tract().axes_mapping(inputs, outputs)
    }
}

/// Puts tract's own `Reduce` back in place of every [`ExactMinMax`] (after the constants are
/// folded): the same reduction, which the lowering reads.
pub(crate) fn restore(model: &mut TypedModel) {
    for id in 0..model.nodes().len() {
        if let Some(op) = model.node(id).op_as::<ExactMinMax>() {
            let tract = op.tract();
            model.node_mut(id).op = Box::new(tract);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(max: bool, axes: &[usize], shape: &[usize], v: &[f32]) -> Vec<f32> {
        let op = ExactMinMax { axes: axes.iter().copied().collect(), max };
        let x = Tensor::from_shape(shape, v).unwrap();
        let y = op.eval_out_of_plan(tvec![x.into_tvalue()]).unwrap().unwrap();
        y[0].try_as_plain_ram().unwrap().as_slice::<f32>().unwrap().to_vec()
    }

    #[test]
    fn infinite_rows_and_empty_sets_fold_to_infinities() {
        let inf = f32::INFINITY;
        assert_eq!(eval(true, &[1], &[2, 2], &[-inf, -inf, 1.0, -inf]), [-inf, 1.0]);
        assert_eq!(eval(false, &[1], &[2, 2], &[inf, inf, -2.0, inf]), [inf, -2.0]);
        assert_eq!(eval(true, &[1], &[3, 0], &[]), [-inf; 3]);
        assert_eq!(eval(false, &[0, 1], &[0, 4], &[]), [inf]);
        // tract's own reduction gives the finite bounds for the same inputs.
        let x = Tensor::from_shape(&[1, 2], &[-inf, -inf]).unwrap();
        let t = Reduce::new(tvec![1], Reducer::Max).eval_out_of_plan(tvec![x.into_tvalue()]).unwrap().unwrap();
        assert_eq!(t[0].try_as_plain_ram().unwrap().as_slice::<f32>().unwrap(), [f32::MIN]);
    }

    #[test]
    fn nan_propagates_and_ordinary_rows_match() {
        let y = eval(true, &[0], &[3], &[1.0, f32::NAN, 2.0]);
        assert!(y[0].is_nan());
        assert_eq!(eval(true, &[0], &[3, 2], &[1.0, -5.0, 7.0, -6.0, 3.0, -7.0]), [7.0, -5.0]);
        assert_eq!(eval(false, &[1], &[3, 2], &[1.0, -5.0, 7.0, -6.0, 3.0, -7.0]), [-5.0, -6.0, -7.0]);
    }
}
