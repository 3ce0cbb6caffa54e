//! Hard sigmoid, `clamp(x/6 + 1/2, 0, 1)`, as exporters and tract write it out: tract expands
//! ONNX `HardSigmoid(α, β)` into `Mul α`, `Add β`, `Min 1`, `Max 0` (both MobileNetV3 exports'
//! squeeze-excitation gates); PyTorch's `relu6(x + 3) / 6` exports as `Add 3`, `Clip(0, 6)`
//! (tract: `Max 0`, `Min 6`) and `Div 6` or `Mul 1/6`.
//!
//! A chain of scalar steps on one value (each a binary op with a one-element constant, each
//! intermediate read only by the next step) is matched structurally, then verified numerically:
//! tract evaluates the chain's own nodes on probe values across both kinks (±3) and far into the
//! saturated ranges, and the chain is taken only if every result equals hard sigmoid within f32
//! rounding ([`HSIG_ATOL`]). So ONNX's default `HardSigmoid` (α = 0.2, Keras's hard sigmoid) or
//! an unrelated clamp stays generic ops. The matched chain becomes the activation of the Dense or
//! Conv2d producing `x` when `x` has no other reader ([`Lowerer::match_activation`]), else one
//! `Unary HardSigmoid` ([`Lowerer::try_hard_sigmoid`]).

use super::fuse::Matched;
use super::{f32s, Lowerer, Res};
use kestrel_rt_format::ops::{Op, Unary, UnaryOp};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;

/// Most scalar steps a chain may take (tract's HardSigmoid is 4, `relu6(x + 3)/6` is 4).
const MAX_STEPS: usize = 6;

/// Largest difference from hard sigmoid a matched chain may show on the probes: a few f32
/// roundings of values in [0, 1] (an f32 α of 1/6 differs from 1/6 by ~1e-9 relative).
pub(crate) const HSIG_ATOL: f64 = 1e-6;

/// The probe values: a grid over [-8, 8], each kink and its neighbours, and large magnitudes.
fn probes() -> Vec<f32> {
    let mut v: Vec<f32> = (-64..=64).map(|i| i as f32 / 8.0).collect();
    for k in [-3.0f32, 3.0] {
        v.extend([k, k - 1e-3, k + 1e-3, k - 1e-6, k + 1e-6]);
    }
    v.extend([-1e6, -100.0, -3.5, 0.1, 1e-7, -1e-7, 3.5, 100.0, 1e6]);
    v
}

/// Hard sigmoid in f64, the reference of the check.
fn hard_sigmoid(x: f64) -> f64 {
    (x / 6.0 + 0.5).clamp(0.0, 1.0)
}

impl Lowerer<'_> {
    /// The hard-sigmoid chain reading `x` when `x` has no other reader (and is not a graph
    /// output): the nodes to absorb into `x`'s producer as its activation.
    pub(super) fn match_hard_sigmoid(&self, x: OutletId) -> Option<Matched> {
        if x.slot != 0 {
            return None;
        }
        let first = self.only_succ(x.node)?;
        self.hard_sigmoid_from(first, x)
    }

    /// The node being lowered, a binary op, as the first step of a hard-sigmoid chain on one of
    /// its inputs (which may have other readers): lowered to `Unary HardSigmoid`, the chain's
    /// other nodes skipped. `Ok(false)` when it starts no such chain.
    pub(super) fn try_hard_sigmoid(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let found = node.inputs.iter().find_map(|&x| Some((x, self.hard_sigmoid_from(node, x)?)));
        let Some((x, m)) = found else { return Ok(false) };
        let (xid, shape) = self.act(x)?;
        let y = self.b.op(|y| Op::Unary(Unary { x: xid, op: UnaryOp::HardSigmoid, y }))?;
        self.take(&m, y, shape);
        self.count_fused("hardsigmoid");
        Ok(true)
    }

    /// The longest chain of scalar steps from `first` (which reads `x`) that computes hard
    /// sigmoid of `x`, at least two steps long.
    fn hard_sigmoid_from(&self, first: &TypedNode, x: OutletId) -> Option<Matched> {
        let fact = self.model.outlet_fact(x).ok()?;
        if fact.datum_type != f32::datum_type() || fact.konst.is_some() {
            return None;
        }
        let shape = fact.shape.as_concrete()?.to_vec();
        let mut nodes = Vec::new();
        let (mut n, mut cur) = (first, x);
        loop {
            if !self.scalar_step(n, cur, &shape) {
                break;
            }
            nodes.push(n.id);
            cur = OutletId::new(n.id, 0);
            match self.only_succ(n.id) {
                Some(next) if nodes.len() < MAX_STEPS => n = next,
                _ => break,
            }
        }
        (2..=nodes.len())
            .rev()
            .find(|&len| self.computes_hard_sigmoid(x, &nodes[..len]))
            .map(|len| Matched { nodes: nodes[..len].to_vec(), last: nodes[len - 1] })
    }

    /// `n` applies one of `+ − × ÷ max min` to `cur` and a one-element constant (`cur` first for
    /// `−` and `÷`), keeping `cur`'s shape.
    fn scalar_step(&self, n: &TypedNode, cur: OutletId, shape: &[usize]) -> bool {
        let Some(op) = n.op_as::<TypedBinOp>() else { return false };
        let name = op.0.name();
        let ordered = matches!(name, "Sub" | "Div");
        let known = ordered || matches!(name, "Add" | "Mul" | "Max" | "Min");
        let operand_ok = n.inputs.len() == 2
            && (n.inputs[0] == cur || (!ordered && n.inputs[1] == cur))
            && self.const_with(n, cur).is_some_and(|t| t.len() == 1);
        let same_shape = n.outputs[0].fact.shape.as_concrete() == Some(shape);
        known && operand_ok && same_shape
    }

    /// Runs `nodes` (a chain of scalar steps from `x`) with tract on the probes and compares with
    /// hard sigmoid.
    fn computes_hard_sigmoid(&self, x: OutletId, nodes: &[usize]) -> bool {
        let probes = probes();
        let got = self.eval_chain(x, nodes, &probes);
        got.is_some_and(|g| {
            g.len() == probes.len()
                && g.iter().zip(&probes).all(|(&y, &p)| (f64::from(y) - hard_sigmoid(f64::from(p))).abs() <= HSIG_ATOL)
        })
    }

    /// The chain's output for the probe values laid along the last axis of `x`'s rank (the
    /// one-element constants broadcast over them).
    fn eval_chain(&self, x: OutletId, nodes: &[usize], probes: &[f32]) -> Option<Vec<f32>> {
        let rank = self.model.outlet_fact(x).ok()?.rank().max(1);
        let mut dims = vec![1usize; rank];
        dims[rank - 1] = probes.len();
        let mut value = tensor1(probes).into_shape(&dims).ok()?;
        let mut cur = x;
        for &id in nodes {
            let n = self.model.node(id);
            let inputs: TVec<TValue> = n
                .inputs
                .iter()
                .map(|&i| {
                    if i == cur {
                        Some(value.clone().into_tvalue())
                    } else {
                        self.model.outlet_fact(i).ok()?.konst.clone().map(|k| k.into_tvalue())
                    }
                })
                .collect::<Option<_>>()?;
            let out = n.op.eval_out_of_plan(inputs).ok()??;
            value = out.into_iter().next()?.into_tensor();
            cur = OutletId::new(id, 0);
        }
        f32s(&value).ok()
    }
}
