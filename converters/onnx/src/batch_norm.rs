//! ONNX `BatchNormalization` with `training_mode = 1`: the output normalised by the statistics
//! of the input itself (its mean and population variance over every axis but the channels'),
//! not by the `input_mean` and `input_var` inputs, which only feed the optional running-mean
//! and running-variance outputs (`input · momentum + current · (1 − momentum)`; onnx's
//! reference, `op_batch_normalization.py`). Exporters write it for a `batch_norm` called with
//! `training=True` in an eval-mode model: timm's weight-standardised convolutions (`StdConv2d`,
//! the ResNet-V2 backbones of hybrid ViTs and NFNets) normalise their weights that way.
//!
//! tract's importer reads every `BatchNormalization` as the inference form: with its extra
//! outputs it refuses the node ("Wrong number of outputs"), and without them it would silently
//! use `input_mean`/`input_var`. So [`mark`] renames such nodes before tract reads the graph,
//! and [`parse`] expands them here into reductions and element-wise ops, which convert like any
//! others (folded to constants where the input is a weight).

use tract_onnx::model::{OnnxOpRegister, ParsingContext};
use tract_onnx::pb::{GraphProto, NodeProto};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::{wire_with_rank_broadcast, AxisOp};
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_core::ops::nn::{Reduce, Reducer};
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, ensure, expand, DimLike, Expansion, InferenceOp, InferenceResult, Solver,
    StaticName, TensorProxy,
};

/// The op type a training-mode node is renamed to before tract reads the graph.
const TRAINING: &str = "BatchNormalizationTrainingMode";

/// Registers the parser of the renamed nodes.
pub(crate) fn register(reg: &mut OnnxOpRegister) {
    reg.insert(TRAINING, parse);
}

/// Renames every `BatchNormalization` node of `g` with `training_mode = 1` (see the module
/// docs); the others stay tract's.
pub(crate) fn mark(g: &mut GraphProto) {
    for n in g.node.iter_mut().filter(|n| n.op_type == "BatchNormalization" && n.domain.is_empty()) {
        if n.attribute.iter().any(|a| a.name == "training_mode" && a.i != 0) {
            n.op_type = TRAINING.to_string();
        }
    }
}

fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let epsilon = node.get_attr_opt::<f32>("epsilon")?.unwrap_or(1e-5);
    let momentum = node.get_attr_opt::<f32>("momentum")?.unwrap_or(0.9);
    ensure!(epsilon.is_finite() && epsilon >= 0.0, "bad attribute: epsilon {epsilon} (a finite number ≥ 0)");
    ensure!(momentum.is_finite(), "bad attribute: momentum {momentum} (a finite number)");
    let outputs = node.output.len();
    ensure!((1..=3).contains(&outputs), "BatchNormalization in training mode has 1 to 3 outputs, found {outputs}");
    Ok((expand(BatchNormTraining { epsilon, momentum, outputs }), vec![]))
}

/// The expansion of a training-mode node.
#[derive(Clone, Debug)]
struct BatchNormTraining {
    epsilon: f32,
    momentum: f32,
    /// Outputs the node has: `Y`, then optionally `running_mean` and `running_var`.
    outputs: usize,
}

impl Expansion for BatchNormTraining {
    fn name(&self) -> StaticName {
        "BatchNormTraining".into()
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
        check_input_arity(inputs, 5)?;
        check_output_arity(outputs, self.outputs)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&inputs[0].shape, &outputs[0].shape)?;
        for o in &outputs[1..] {
            s.equals(&o.datum_type, &inputs[0].datum_type)?;
            s.equals(&o.shape, &inputs[3].shape)?;
        }
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let fact = model.outlet_fact(inputs[0])?.clone();
        let (rank, dt) = (fact.rank(), fact.datum_type);
        ensure!(rank >= 2, "BatchNormalization: input of rank {rank} (needs a channels axis, axis 1)");
        let c = fact.shape[1].to_usize()?;
        for (i, what) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
            let f = model.outlet_fact(inputs[i])?;
            ensure!(
                f.rank() == 1 && f.shape[0].to_usize().ok() == Some(c),
                "BatchNormalization: {what} of shape {:?}, expected [{c}] (the channels)",
                f.shape
            );
        }
        // Every axis but the channels', and how many values each channel's statistics cover.
        let axes: TVec<usize> = (0..rank).filter(|&a| a != 1).collect();
        let mut count = 1usize;
        for &a in &axes {
            count = count.saturating_mul(fact.shape[a].to_usize()?);
        }
        ensure!(count > 0, "BatchNormalization in training mode over an empty input");
        let konst = |model: &mut TypedModel, name: &str, v: f32| -> TractResult<OutletId> {
            model.add_const(format!("{prefix}.{name}"), tensor0(v).cast_to_dt(dt)?.into_owned())
        };
        let binary = |model: &mut TypedModel, name: &str, op, a: OutletId, b: OutletId| -> TractResult<OutletId> {
            Ok(wire_with_rank_broadcast(format!("{prefix}.{name}"), model, op, &[a, b])?[0])
        };
        let reduce = Reduce::new(axes.clone(), Reducer::Sum);
        let inv_n = konst(model, "inv_count", 1.0 / count as f32)?;
        let sum = model.wire_node(format!("{prefix}.sum"), reduce.clone(), &[inputs[0]])?[0];
        let mean = binary(model, "mean", math::mul(), sum, inv_n)?;
        let centred = binary(model, "centred", math::sub(), inputs[0], mean)?;
        let squares = binary(model, "squares", math::mul(), centred, centred)?;
        let sq_sum = model.wire_node(format!("{prefix}.sq_sum"), reduce, &[squares])?[0];
        let var = binary(model, "var", math::mul(), sq_sum, inv_n)?;
        let eps = konst(model, "epsilon", self.epsilon)?;
        let var_eps = binary(model, "var_eps", math::add(), var, eps)?;
        let std = model.wire_node(format!("{prefix}.std"), math::sqrt(), &[var_eps])?[0];
        let normed = binary(model, "normed", math::div(), centred, std)?;
        // scale and B `[C]` as `[1, C, 1, …]`.
        let per_channel = |model: &mut TypedModel, name: &str, v: OutletId| -> TractResult<OutletId> {
            let mut w = model.wire_node(format!("{prefix}.{name}.lead"), AxisOp::Add(0), &[v])?[0];
            for a in 2..rank {
                w = model.wire_node(format!("{prefix}.{name}.axis{a}"), AxisOp::Add(a), &[w])?[0];
            }
            Ok(w)
        };
        let scale = per_channel(model, "scale", inputs[1])?;
        let bias = per_channel(model, "bias", inputs[2])?;
        let scaled = binary(model, "scaled", math::mul(), normed, scale)?;
        let mut outs = tvec![binary(model, "y", math::add(), scaled, bias)?];
        // The running statistics: `input · momentum + current · (1 − momentum)`, `[C]`.
        for (k, (current, input)) in
            [(mean, inputs[3]), (var, inputs[4])].into_iter().enumerate().take(self.outputs - 1)
        {
            let name = ["running_mean", "running_var"][k];
            let mut cur = current;
            for &a in axes.iter().rev() {
                cur = model.wire_node(format!("{prefix}.{name}.rm{a}"), AxisOp::Rm(a), &[cur])?[0];
            }
            let m = konst(model, &format!("{name}.momentum"), self.momentum)?;
            let rest = konst(model, &format!("{name}.rest"), 1.0 - self.momentum)?;
            let kept = binary(model, &format!("{name}.kept"), math::mul(), input, m)?;
            let new = binary(model, &format!("{name}.new"), math::mul(), cur, rest)?;
            outs.push(binary(model, name, math::add(), kept, new)?);
        }
        Ok(outs)
    }
}
