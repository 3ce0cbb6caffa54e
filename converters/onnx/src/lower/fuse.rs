//! Pattern fusion over tract's decomposed graph: layer norm (tract's expansion of ONNX
//! LayerNormalization), exact GELU (`x · 0.5 · (1 + erf(x/√2))`, either multiplication order),
//! and ReLU/GELU folded into a preceding Dense. Every match requires the intermediate values to
//! have no other consumer (and not be graph outputs); anything else falls back to generic ops.

use super::{f32s, Lowerer, Res};
use kestrel_rt_format::ops::{Activation, LayerNorm, NormAxis, Op};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::nn::{GeluApproximate, GeluExact, Reduce, Reducer, RmsNorm};

/// A matched pattern: the nodes it covers and the node whose output it produces.
pub(crate) struct Matched {
    pub nodes: Vec<usize>,
    pub last: usize,
}

impl Lowerer<'_> {
    fn is_output(&self, node: usize) -> bool {
        self.model.output_outlets().is_ok_and(|o| o.contains(&OutletId::new(node, 0)))
    }

    /// The only consumer of `node`'s output, if it has exactly one and is not a graph output.
    pub(super) fn only_succ(&self, node: usize) -> Option<&TypedNode> {
        if self.is_output(node) {
            return None;
        }
        match self.model.outlet_successors(OutletId::new(node, 0)) {
            [one] => Some(self.model.node(one.node)),
            _ => None,
        }
    }

    fn bin<'n>(&self, n: &'n TypedNode, name: &str) -> Option<&'n TypedNode> {
        (n.op_as::<TypedBinOp>().is_some_and(|b| b.0.name() == name) && n.inputs.len() == 2).then_some(n)
    }

    /// The constant operand of binary node `n` whose other operand is `act`.
    pub(super) fn const_with(&self, n: &TypedNode, act: OutletId) -> Option<Arc<Tensor>> {
        let other = match (n.inputs[0] == act, n.inputs[1] == act) {
            (true, false) => n.inputs[1],
            (false, true) => n.inputs[0],
            _ => return None,
        };
        self.model.outlet_fact(other).ok()?.konst.clone()
    }

    fn scalar_with(&self, n: &TypedNode, act: OutletId) -> Option<f32> {
        let t = self.const_with(n, act)?;
        let v = f32s(&t).ok()?;
        (v.len() == 1).then(|| v[0])
    }

    /// The node right after `node` (its only consumer) when it multiplies by the scalar `1/count`
    /// (a sum turned into a mean), or divides by `count`.
    pub(super) fn mean_scale_after(&self, node: usize, count: usize) -> Option<usize> {
        let n = self.only_succ(node)?;
        let act = OutletId::new(node, 0);
        let want = 1.0 / count as f64;
        if let Some(m) = self.bin(n, "Mul") {
            let s = f64::from(self.scalar_with(m, act)?);
            return ((s - want).abs() <= 1e-6 * want).then_some(m.id);
        }
        let d = self.bin(n, "Div")?;
        (d.inputs[0] == act).then_some(())?;
        let s = f64::from(self.scalar_with(d, act)?);
        ((s - count as f64).abs() <= 1e-6 * count as f64).then_some(d.id)
    }

    fn unary<'n>(&self, n: &'n TypedNode, name: &str) -> Option<&'n TypedNode> {
        n.op_as::<ElementWiseOp>().is_some_and(|e| e.0.name() == name).then_some(n)
    }

    /// Exact GELU on `x`: `Mul(x, 1/√2)` (or `Div(x, √2)`), Erf, `Add 1`, then `Mul 0.5` and
    /// `Mul x` in either order. `x` must feed only the pattern.
    pub(super) fn match_gelu(&self, x: OutletId) -> Option<Matched> {
        if self.is_output(x.node) {
            return None;
        }
        let succ = self.model.outlet_successors(x);
        if succ.len() != 2 {
            return None;
        }
        let close = |v: f32, want: f32| (v - want).abs() < 1e-4;
        for s in succ {
            let n0 = self.model.node(s.node);
            let scaled = self
                .bin(n0, "Mul")
                .and_then(|n| self.scalar_with(n, x))
                .is_some_and(|c| close(c, std::f32::consts::FRAC_1_SQRT_2))
                || (self.bin(n0, "Div").is_some_and(|n| n.inputs[0] == x)
                    && self.scalar_with(n0, x).is_some_and(|c| close(c, std::f32::consts::SQRT_2)));
            if !scaled {
                continue;
            }
            let n1 = self.only_succ(n0.id).and_then(|n| self.unary(n, "Erf"))?;
            let n2 = self.only_succ(n1.id).and_then(|n| self.bin(n, "Add"))?;
            if !self.scalar_with(n2, OutletId::new(n1.id, 0)).is_some_and(|c| close(c, 1.0)) {
                return None;
            }
            let n3 = self.only_succ(n2.id).and_then(|n| self.bin(n, "Mul"))?;
            let a = OutletId::new(n2.id, 0);
            let n4 = self.only_succ(n3.id).and_then(|n| self.bin(n, "Mul"))?;
            let m3 = OutletId::new(n3.id, 0);
            let ok = if self.scalar_with(n3, a).is_some_and(|c| close(c, 0.5)) {
                self.const_with(n4, m3).is_none() && n4.inputs.contains(&x) && n4.inputs.contains(&m3)
            } else {
                n3.inputs.contains(&x)
                    && n3.inputs.contains(&a)
                    && self.scalar_with(n4, m3).is_some_and(|c| close(c, 0.5))
            };
            let other = succ.iter().find(|o| o.node != n0.id)?;
            let covers_x = other.node == n3.id || other.node == n4.id;
            return (ok && covers_x).then(|| Matched { nodes: vec![n0.id, n1.id, n2.id, n3.id, n4.id], last: n4.id });
        }
        None
    }

    /// ReLU (`Max(x, 0)`), GELU (tract's fused `GeluExact` / `GeluApproximate`, or the
    /// decomposed erf form), SiLU, hard swish or hard sigmoid (a verified chain of scalar steps,
    /// `hard_sigmoid.rs`) applied to `x` alone.
    pub(super) fn match_activation(&self, x: OutletId) -> Option<(Activation, Matched)> {
        // A quantised op's float result is requantised before anything after it reads it.
        if self.quantised {
            return None;
        }
        if let Some(m) = self.match_gelu(x) {
            return Some((Activation::Gelu, m));
        }
        if let Some(n) = self.only_succ(x.node) {
            if let Some(e) = n.op_as::<ElementWiseOp>() {
                let act = if e.0.is::<GeluExact>() {
                    Some(Activation::Gelu)
                } else if e.0.downcast_ref::<GeluApproximate>().is_some_and(|g| !g.fast_impl) {
                    Some(Activation::GeluTanh)
                } else {
                    match e.0.name().as_ref() {
                        "Silu" => Some(Activation::Silu),
                        "HardSwish" => Some(Activation::HardSwish),
                        _ => None,
                    }
                };
                if let Some(act) = act {
                    return Some((act, Matched { nodes: vec![n.id], last: n.id }));
                }
            }
        }
        if let Some(m) = self.match_hard_sigmoid(x) {
            return Some((Activation::HardSigmoid, m));
        }
        let n = self.only_succ(x.node).and_then(|n| self.bin(n, "Max"))?;
        let t = self.const_with(n, x)?;
        let zero = f32s(&t).ok()?.iter().all(|&v| v == 0.0) && t.len() == 1;
        zero.then(|| (Activation::Relu, Matched { nodes: vec![n.id], last: n.id }))
    }

    /// Skips the matched nodes and gives the last one the value `(id, shape)`.
    pub(super) fn take(&mut self, m: &Matched, id: kestrel_rt_format::ops::TensorId, shape: Vec<usize>) {
        for &n in &m.nodes {
            self.skip.insert(n);
        }
        self.absorb(m.last, super::Val::Act { id, shape, int: false });
    }

    /// Layer norm as tract expands ONNX LayerNormalization, starting at the `Reduce<Sum>` being
    /// lowered: mean (`Mul 1/n`), `Sub`, `Reduce<MeanOfSquares>`, `Add ε`, `Rsqrt`, `Mul`,
    /// optional `Mul γ` and `Add β`. Lowered to `LayerNorm` (with Transposes if the axis is not
    /// last). `Ok(false)` when the pattern does not match.
    pub(super) fn try_layer_norm(&mut self) -> Res<bool> {
        let Some((m, axis, eps, gamma, beta)) = self.match_layer_norm() else { return Ok(false) };
        let node = self.model.node(self.node);
        let (x, xs) = self.act(node.inputs[0])?;
        let d = xs[axis];
        let gsrc = gamma.as_ref().map(|g| g.0).unwrap_or(OutletId::new(self.node, 0));
        let gvals = match &gamma {
            Some((_, t)) => f32s(t)?,
            None => vec![1.0; d],
        };
        let gamma = self.weight(gsrc, "ln_gamma", &[d], gvals)?;
        let beta = match &beta {
            Some((o, t)) => Some(self.weight(*o, "ln_beta", &[d], f32s(t)?)?),
            None => None,
        };
        let r = xs.len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(axis, r - 1);
        let (x, ts) = self.transpose(x, &xs, &perm)?;
        let y = self.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps, axis: NormAxis::Last, y }))?;
        let (y, ys) = self.transpose(y, &ts, &perm)?;
        self.take(&m, y, ys);
        self.count_fused("layer-norm");
        Ok(true)
    }

    #[allow(clippy::type_complexity)]
    fn match_layer_norm(
        &self,
    ) -> Option<(Matched, usize, f32, Option<(OutletId, Arc<Tensor>)>, Option<(OutletId, Arc<Tensor>)>)> {
        let n0 = self.model.node(self.node);
        let red = n0.op_as::<Reduce>()?;
        if red.reducer != Reducer::Sum || red.axes.len() != 1 {
            return None;
        }
        let axis = red.axes[0];
        let x = n0.inputs[0];
        let xs = self.model.outlet_fact(x).ok()?.shape.as_concrete()?.to_vec();
        let d = xs[axis] as f32;
        let n1 = self.only_succ(n0.id).and_then(|n| self.bin(n, "Mul"))?;
        if !self.scalar_with(n1, OutletId::new(n0.id, 0)).is_some_and(|c| (c * d - 1.0).abs() < 1e-5) {
            return None;
        }
        let n2 = self.only_succ(n1.id).and_then(|n| self.bin(n, "Sub"))?;
        if n2.inputs[0] != x || n2.inputs[1] != OutletId::new(n1.id, 0) || self.is_output(n2.id) {
            return None;
        }
        let dd = OutletId::new(n2.id, 0);
        let (mut nodes, mut last, eps) = match self.only_succ(n2.id).and_then(|n| Some((n, n.op_as::<RmsNorm>()?))) {
            // tract ≥ 0.23 fuses mean-of-squares, `Add ε`, `Rsqrt` and `Mul` into `RmsNorm`.
            Some((n3, rms)) if rms.axis == axis => {
                let eps = f32s(&rms.eps).ok()?.first().copied()?;
                (vec![n0.id, n1.id, n2.id, n3.id], n3.id, eps)
            }
            _ => self.match_rms_tail(dd, axis, vec![n0.id, n1.id, n2.id])?,
        };
        // γ and β: constants with `d` elements laid along `axis`.
        let along = |t: &Tensor| {
            let s = t.shape();
            t.len() == xs[axis] && s.len() <= xs.len() && {
                let off = xs.len() - s.len();
                s.iter().enumerate().all(|(i, &v)| v == 1 || i + off == axis)
            }
        };
        let param = |name: &str, last: &mut usize, nodes: &mut Vec<usize>| -> Option<(OutletId, Arc<Tensor>)> {
            let n = self.only_succ(*last).and_then(|n| self.bin(n, name))?;
            let prev = OutletId::new(*last, 0);
            let t = self.const_with(n, prev).filter(|t| along(t))?;
            let src = if n.inputs[0] == prev { n.inputs[1] } else { n.inputs[0] };
            nodes.push(n.id);
            *last = n.id;
            Some((src, t))
        };
        let gamma = param("Mul", &mut last, &mut nodes);
        let beta = param("Add", &mut last, &mut nodes);
        Some((Matched { nodes, last }, axis, eps, gamma, beta))
    }

    /// tract < 0.23's expansion of the normalisation of the centred `dd`: `Reduce<MeanOfSquares>`,
    /// `Add ε`, `Rsqrt`, `Mul dd`. Returns the covered nodes (appended to `nodes`), the last one
    /// and ε.
    fn match_rms_tail(&self, dd: OutletId, axis: usize, mut nodes: Vec<usize>) -> Option<(Vec<usize>, usize, f32)> {
        let succ = self.model.outlet_successors(dd);
        if succ.len() != 2 {
            return None;
        }
        let (n3, n6) = {
            let a = self.model.node(succ[0].node);
            let b = self.model.node(succ[1].node);
            if a.op_is::<Reduce>() {
                (a, b)
            } else {
                (b, a)
            }
        };
        let r3 = n3.op_as::<Reduce>()?;
        if r3.reducer != Reducer::MeanOfSquares || r3.axes.as_slice() != [axis] {
            return None;
        }
        let n4 = self.only_succ(n3.id).and_then(|n| self.bin(n, "Add"))?;
        let eps = self.scalar_with(n4, OutletId::new(n3.id, 0))?;
        let n5 = self.only_succ(n4.id).and_then(|n| self.unary(n, "Rsqrt"))?;
        let n6b = self.only_succ(n5.id).and_then(|n| self.bin(n, "Mul"))?;
        if n6b.id != n6.id || !n6.inputs.contains(&dd) || !n6.inputs.contains(&OutletId::new(n5.id, 0)) {
            return None;
        }
        nodes.extend([n3.id, n4.id, n5.id, n6.id]);
        Some((nodes, n6.id, eps))
    }
}
