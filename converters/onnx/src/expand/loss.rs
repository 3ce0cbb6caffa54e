//! ONNX `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`, expanded as their
//! definitions (onnx's function bodies and reference implementation):
//!
//! - NLL of `x [N, C, d…]` at the targets `t [N, d…]` with optional class weights `w [C]`:
//!   `loss[n, d…] = −x[n, t, d…] · w[t]` (`w` 1 without weights), 0 where `t = ignore_index`;
//!   `reduction` `none` gives `loss`, `sum` its sum, `mean` its sum divided by the sum of the
//!   weights picked (the count of targets not ignored, without weights).
//! - SoftmaxCrossEntropyLoss: the NLL of `log_softmax(scores, axis 1)`, and that log-softmax as
//!   the optional second output.
//!
//! The pick `x[n, t, d…]` is a one-hot mask `[t = c]` over the class axis (a comparison of the
//! targets with the class indices), multiplied in and summed over that axis: a target out of
//! `0..C` (an ignored one) picks nothing, and a target equal to `ignore_index` is masked out
//! when `ignore_index` is itself a class. The targets may be computed at run time.

use super::Wiring;
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::nn::{Reduce, Reducer};
use tract_onnx::tract_core::ops::{logic, math};
use tract_onnx::tract_hir::infer::IntoExp;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

/// The attributes both losses share.
#[derive(Clone, Debug)]
struct Loss {
    op: &'static str,
    reduction: Reduction,
    ignore_index: Option<i64>,
    /// A weight input (the third).
    weighted: bool,
}

fn parse_loss(node: &NodeProto, op: &'static str) -> TractResult<Loss> {
    let reduction = match node.get_attr_opt::<&str>("reduction")?.unwrap_or("mean") {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => bail!("{op}: reduction `{other}` (none, sum or mean)"),
    };
    let inputs = node.input.iter().filter(|i| !i.is_empty()).count();
    ensure!(
        (2..=3).contains(&inputs) && !node.input[0].is_empty() && !node.input[1].is_empty(),
        "{op} has 2 or 3 inputs (scores, targets, optional weights), found {:?}",
        node.input
    );
    Ok(Loss { op, reduction, ignore_index: node.get_attr_opt::<i64>("ignore_index")?, weighted: inputs == 3 })
}

pub(super) fn parse_nll(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let loss = parse_loss(node, "NegativeLogLikelihoodLoss")?;
    let outputs = node.output.iter().filter(|o| !o.is_empty()).count();
    ensure!(outputs == 1, "NegativeLogLikelihoodLoss has 1 output, found {outputs}");
    Ok((expand(LossOp { loss, log_prob: false, outputs: 1 }), vec![]))
}

pub(super) fn parse_sce(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let loss = parse_loss(node, "SoftmaxCrossEntropyLoss")?;
    let outputs = node.output.iter().filter(|o| !o.is_empty()).count();
    ensure!(
        (1..=2).contains(&outputs) && node.output.first().is_some_and(|o| !o.is_empty()),
        "SoftmaxCrossEntropyLoss has the loss and an optional log_prob output, found {:?}",
        node.output
    );
    Ok((expand(LossOp { loss, log_prob: true, outputs }), vec![]))
}

/// Either loss: `log_prob` is the softmax cross-entropy (the NLL of the log-softmax, which is
/// the second output when there are 2).
#[derive(Clone, Debug)]
struct LossOp {
    loss: Loss,
    log_prob: bool,
    outputs: usize,
}

impl Expansion for LossOp {
    fn name(&self) -> StaticName {
        self.loss.op.into()
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
        check_input_arity(inputs, 2 + self.loss.weighted as usize)?;
        check_output_arity(outputs, self.outputs)?;
        let op = self.loss.op;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals((&inputs[1].rank).bex() + 1, &inputs[0].rank)?;
        s.equals(&inputs[0].shape[0], &inputs[1].shape[0])?;
        if self.loss.weighted {
            s.equals(&inputs[2].rank, 1)?;
            s.equals(&inputs[2].shape[0], &inputs[0].shape[1])?;
        }
        if let Some(lp) = outputs.get(1) {
            s.equals(&lp.datum_type, &inputs[0].datum_type)?;
            s.equals(&lp.shape, &inputs[0].shape)?;
        }
        match self.loss.reduction {
            Reduction::None => s.equals(&outputs[0].shape, &inputs[1].shape)?,
            Reduction::Sum | Reduction::Mean => s.equals(&outputs[0].rank, 0)?,
        }
        s.given(&inputs[0].rank, move |_, r| {
            ensure!(r >= 2, "{op}: scores of rank {r}, expected [N, C, d…]");
            Ok(())
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let op = self.loss.op;
        let fact = w.fact(inputs[0])?;
        let rank = fact.rank();
        ensure!(rank >= 2, "{op}: scores of rank {rank}, expected [N, C, d…]");
        ensure!(fact.datum_type.is_float(), "{op}: scores of type {:?} (a float type)", fact.datum_type);
        let t = w.fact(inputs[1])?;
        ensure!(t.datum_type.is_integer(), "{op}: targets of type {:?} (an integer type)", t.datum_type);
        ensure!(t.rank() + 1 == rank, "{op}: targets of rank {}, scores of rank {rank}", t.rank());
        let weights = self.loss.weighted.then(|| inputs[2]);
        if self.log_prob {
            let lp = log_softmax(&mut w, inputs[0])?;
            let loss = nll(&mut w, &self.loss, lp, inputs[1], weights)?;
            return Ok(if self.outputs == 2 { tvec![loss, lp] } else { tvec![loss] });
        }
        Ok(tvec![nll(&mut w, &self.loss, inputs[0], inputs[1], weights)?])
    }
}

/// `x − max − ln Σ exp(x − max)` over axis 1.
fn log_softmax(w: &mut Wiring, x: OutletId) -> TractResult<OutletId> {
    let max = w.node("lsm.max", Reduce::new(tvec![1], Reducer::Max), &[x])?;
    let centred = w.binary("lsm.centred", math::sub(), x, max)?;
    let e = w.node("lsm.exp", math::exp(), &[centred])?;
    let sum = w.sum("lsm.sum", e, [1])?;
    let log_sum = w.node("lsm.log_sum", math::ln(), &[sum])?;
    w.binary("lsm.log_prob", math::sub(), centred, log_sum)
}

/// The NLL of `x [N, C, d…]` at targets `t [N, d…]` (see the module docs).
fn nll(w: &mut Wiring, loss: &Loss, x: OutletId, t: OutletId, weights: Option<OutletId>) -> TractResult<OutletId> {
    let op = loss.op;
    let fact = w.fact(x)?;
    let (rank, dt) = (fact.rank(), fact.datum_type);
    let c =
        fact.shape[1].to_usize().map_err(|_| format_err!("{op}: the class count {} is not known", fact.shape[1]))?;
    let tdt = w.fact(t)?.datum_type;
    // [N, 1, d…] targets against the classes [1, C, 1…].
    let t1 = w.node("targets", AxisOp::Add(1), &[t])?;
    let mut classes_shape = vec![1usize; rank];
    classes_shape[1] = c;
    let classes = tensor1(&(0..c as i64).collect::<Vec<_>>()).into_shape(&classes_shape)?.cast_to_dt(tdt)?.into_owned();
    let classes = w.konst("classes", classes)?;
    let mut one_hot = w.compare("one_hot", logic::comp_eq(), t1, classes)?;
    if let Some(ii) = loss.ignore_index.filter(|&ii| (0..c as i64).contains(&ii)) {
        let ii = w.scalar("ignore_index", ii as f64, tdt)?;
        let kept = w.compare("kept", logic::comp_ne(), t1, ii)?;
        one_hot = w.binary("one_hot_kept", logic::and(), one_hot, kept)?;
    }
    let mut picks = w.node("picks", cast(dt), &[one_hot])?;
    if let Some(weights) = weights {
        let wf = w.fact(weights)?;
        ensure!(
            wf.rank() == 1 && wf.shape[0].to_usize().ok() == Some(c),
            "{op}: weights of shape {:?}, expected [{c}] (the classes)",
            wf.shape
        );
        let mut wc = w.node("weights.lead", AxisOp::Add(0), &[weights])?;
        for a in 2..rank {
            wc = w.node(&format!("weights.axis{a}"), AxisOp::Add(a), &[wc])?;
        }
        picks = w.binary("weighted_picks", math::mul(), picks, wc)?;
    }
    let picked = w.binary("picked", math::mul(), x, picks)?;
    let picked = w.sum("picked_sum", picked, [1])?;
    let neg = w.node("neg", math::neg(), &[picked])?;
    let per = w.node("loss", AxisOp::Rm(1), &[neg])?;
    let all = 0..rank - 1;
    let scalar = |w: &mut Wiring, name: &str, v: OutletId| -> TractResult<OutletId> {
        let mut v = v;
        for a in (0..rank - 1).rev() {
            v = w.node(&format!("{name}.rm{a}"), AxisOp::Rm(a), &[v])?;
        }
        Ok(v)
    };
    match loss.reduction {
        Reduction::None => Ok(per),
        Reduction::Sum => {
            let s = w.sum("sum", per, all)?;
            scalar(w, "sum", s)
        }
        Reduction::Mean => {
            let s = w.sum("sum", per, all)?;
            let total = w.sum("weight_total", picks, 0..rank)?;
            let total = w.node("weight_total.c", AxisOp::Rm(1), &[total])?;
            let mean = w.binary("mean", math::div(), s, total)?;
            scalar(w, "mean", mean)
        }
    }
}
