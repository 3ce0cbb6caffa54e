//! ONNX `LinearAttention` (opset 27) → Kestrel `LinearAttn`: linear attention with a recurrent
//! state, every update rule ONNX defines (linear, gated, delta, gated delta), grouped-query heads,
//! a per-key or per-head decay, a per-head or shared update rate, an optional past state, both
//! outputs.
//!
//! tract has no importer for the op, so the converter registers its own parser ([`register`]):
//! it reads the attributes and which optional inputs and outputs the node has, and types the
//! node as one [`LinearAttnNode`] per output the model reads (every Kestrel op has one output).
//! The node evaluates ONNX's definition (`onnx/reference/ops/op_linear_attention.py`) token by
//! token in f64, so constant folding and `--verify` compute what the standard defines, apart
//! from the runtime's kernels. [`Lowerer::try_linear_attention`] maps each to one `LinearAttn`
//! op; operands held as constants in the model become activations first.

use super::{Lowerer, Res};
use kestrel_rt_format::ops::{LinearAttn, LinearOutput, LinearRule, Op};
use tract_onnx::model::{OnnxOpRegister, ParsingContext};
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::{bail, ensure, EvalContext, EvalOp, StaticName};
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, expand, Expansion, InferenceOp, InferenceResult, Solver, TensorProxy,
};

/// Registers the parser on tract's ONNX op register.
pub(crate) fn register(reg: &mut OnnxOpRegister) {
    reg.insert("LinearAttention", parse);
}

/// The node's attributes and which optional inputs and outputs it has.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Spec {
    rule: LinearRule,
    q_heads: usize,
    kv_heads: usize,
    /// `scale`; 0 (the default) for `1/√Dk`.
    scale: f32,
    has_state: bool,
    has_decay: bool,
    has_beta: bool,
    /// The node's outputs that are named: `output`, `present_state`.
    outputs: [bool; 2],
}

impl Eq for Spec {}

fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let given = |list: &[String], i: usize| list.get(i).is_some_and(|s| !s.is_empty());
    let rule = match node.get_attr_opt::<String>("update_rule")?.as_deref().unwrap_or("gated_delta") {
        "linear" => LinearRule::Linear,
        "gated" => LinearRule::Gated,
        "delta" => LinearRule::Delta,
        "gated_delta" => LinearRule::GatedDelta,
        other => bail!("bad attribute: update_rule {other:?} (linear, gated, delta or gated_delta)"),
    };
    let heads = |name: &str| -> TractResult<usize> {
        match node.get_attr_opt::<i64>(name)? {
            Some(h) if h > 0 => Ok(h as usize),
            Some(h) => bail!("bad attribute: {name} {h} (a positive number of heads)"),
            None => bail!("LinearAttention: the attribute {name} is required"),
        }
    };
    let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    ensure!(
        q_heads.is_multiple_of(kv_heads),
        "bad attribute: q_num_heads {q_heads} (a multiple of kv_num_heads {kv_heads})"
    );
    let scale = node.get_attr_opt::<f32>("scale")?.unwrap_or(0.0);
    ensure!(scale.is_finite(), "bad attribute: scale {scale} (a finite number; 0 for 1/sqrt(d_k))");
    if let Some(c) = node.get_attr_opt::<i64>("chunk_size")? {
        // A tuning hint that does not change the result (ONNX): any positive value reads alike.
        ensure!(c > 0, "bad attribute: chunk_size {c} (a positive number of tokens)");
    }
    let ins = &node.input;
    ensure!(
        given(ins, 0) && given(ins, 1) && given(ins, 2) && ins.len() <= 6,
        "LinearAttention has query, key, value and up to three optional inputs, found {:?}",
        ins
    );
    let (has_state, has_decay, has_beta) = (given(ins, 3), given(ins, 4), given(ins, 5));
    ensure!(
        has_decay == rule.gated(),
        "LinearAttention: update_rule {rule:?} {} a decay input",
        if rule.gated() { "requires" } else { "forbids" }
    );
    ensure!(
        has_beta == rule.delta(),
        "LinearAttention: update_rule {rule:?} {} a beta input",
        if rule.delta() { "requires" } else { "forbids" }
    );
    let outputs = [given(&node.output, 0), given(&node.output, 1)];
    ensure!(node.output.len() <= 2, "LinearAttention has at most 2 outputs, found {}", node.output.len());
    let spec = Spec { rule, q_heads, kv_heads, scale, has_state, has_decay, has_beta, outputs };
    Ok((expand(LinearAttnHir(spec)), vec![]))
}

/// The importer's op: one [`LinearAttnNode`] per named output.
#[derive(Clone, Debug)]
struct LinearAttnHir(Spec);

impl Expansion for LinearAttnHir {
    fn name(&self) -> StaticName {
        "LinearAttention".into()
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(self.0.outputs.iter().filter(|&&o| o).count())
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        let sp = &self.0;
        check_input_arity(inputs, 3 + sp.has_state as usize + sp.has_decay as usize + sp.has_beta as usize)?;
        check_output_arity(outputs, self.nboutputs()?)?;
        for x in &inputs[..3] {
            s.equals(&x.rank, 3)?;
        }
        let mut k = 0;
        if sp.outputs[0] {
            s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
            s.equals(&outputs[0].rank, 3)?;
            k = 1;
        }
        if sp.outputs[1] {
            // present_state in past_state's type, or the query's without one (ONNX's reference).
            let from = if sp.has_state { &inputs[3] } else { &inputs[0] };
            s.equals(&outputs[k].datum_type, &from.datum_type)?;
            s.equals(&outputs[k].rank, 4)?;
        }
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut outs = tvec![];
        for (which, name) in [(LinearOutput::Output, "output"), (LinearOutput::State, "present_state")] {
            if self.0.outputs[which as usize] {
                let op = LinearAttnNode { spec: self.0.clone(), which };
                outs.push(model.wire_node(format!("{prefix}.{name}"), op, inputs)?[0]);
            }
        }
        Ok(outs)
    }
}

/// One output of an ONNX LinearAttention node, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LinearAttnNode {
    spec: Spec,
    which: LinearOutput,
}

/// The dims of a node's operands: sequences `B`, tokens `T`, head widths `Dk` and `Dv`.
struct Dims {
    b: usize,
    t: usize,
    dk: usize,
    dv: usize,
}

impl LinearAttnNode {
    /// The operand slots: state, decay and beta positions among the inputs.
    fn slots(&self) -> [Option<usize>; 3] {
        let sp = &self.spec;
        let state = sp.has_state.then_some(3);
        let decay = sp.has_decay.then_some(3 + sp.has_state as usize);
        let beta = sp.has_beta.then_some(3 + sp.has_state as usize + sp.has_decay as usize);
        [state, decay, beta]
    }

    /// `1/√Dk` for a scale of 0.
    fn scale(&self, dk: usize) -> f32 {
        if self.spec.scale == 0.0 {
            1.0 / (dk as f32).sqrt()
        } else {
            self.spec.scale
        }
    }

    fn dims(&self, q: &[usize], v: &[usize]) -> TractResult<Dims> {
        let sp = &self.spec;
        ensure!(q.len() == 3 && v.len() == 3, "LinearAttention: query and value must be rank 3");
        ensure!(
            q[2].is_multiple_of(sp.q_heads) && v[2].is_multiple_of(sp.kv_heads),
            "LinearAttention: packed widths {} and {} are not multiples of the heads {} and {}",
            q[2],
            v[2],
            sp.q_heads,
            sp.kv_heads
        );
        Ok(Dims { b: q[0], t: q[1], dk: q[2] / sp.q_heads, dv: v[2] / sp.kv_heads })
    }
}

impl tract_onnx::tract_core::ops::Op for LinearAttnNode {
    fn name(&self) -> StaticName {
        "LinearAttention".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("{:?} ({:?}), heads {}/{}", self.which, self.spec.rule, self.spec.q_heads, self.spec.kv_heads)])
    }

    fn as_typed(&self) -> Option<&dyn TypedOp> {
        Some(self)
    }
}

impl EvalOp for LinearAttnNode {
    fn eval_out_of_plan(&self, inputs: TVec<TValue>) -> TractResult<Option<TVec<TValue>>> {
        Ok(Some(EvalOp::eval(self, &EvalContext::out_of_plan(), inputs)?))
    }

    /// ONNX's definition, token by token in f64 (see the reference's `_run`).
    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let sp = &self.spec;
        let f = |t: &TValue| -> TractResult<Vec<f64>> {
            Ok(t.cast_to::<f64>()?.try_as_plain_ram()?.as_slice::<f64>()?.to_vec())
        };
        let (q, k, v) = (f(&inputs[0])?, f(&inputs[1])?, f(&inputs[2])?);
        let d = self.dims(inputs[0].shape(), inputs[2].shape())?;
        let (hq, hkv, dk, dv) = (sp.q_heads, sp.kv_heads, d.dk, d.dv);
        ensure!(inputs[1].shape() == [d.b, d.t, hkv * dk], "LinearAttention: key shape {:?}", inputs[1].shape());
        ensure!(inputs[2].shape()[..2] == [d.b, d.t], "LinearAttention: value shape {:?}", inputs[2].shape());
        let [state, decay, beta] = self.slots();
        let mut s = match state {
            Some(i) => {
                ensure!(inputs[i].shape() == [d.b, hkv, dk, dv], "LinearAttention: past_state shape");
                f(&inputs[i])?
            }
            None => vec![0.0; d.b * hkv * dk * dv],
        };
        let side = |slot: Option<usize>, widths: [usize; 2], what: &str| -> TractResult<Option<(Vec<f64>, usize)>> {
            let Some(i) = slot else { return Ok(None) };
            let sh = inputs[i].shape();
            ensure!(
                sh.len() == 3 && sh[..2] == [d.b, d.t] && widths.contains(&sh[2]),
                "LinearAttention: {what} shape {sh:?}"
            );
            Ok(Some((f(&inputs[i])?, sh[2])))
        };
        let decay = side(decay, [hkv, hkv * dk], "decay")?;
        let beta = side(beta, [hkv, 1], "beta")?;
        let scale = self.scale(dk) as f64;
        let group = hq / hkv;
        let mut y = vec![0.0f64; d.b * d.t * hq * dv];
        for b in 0..d.b {
            for i in 0..d.t {
                let row = b * d.t + i;
                for g in 0..hkv {
                    let st = &mut s[(b * hkv + g) * dk * dv..][..dk * dv];
                    if let Some((dec, w)) = &decay {
                        for (r, sr) in st.chunks_mut(dv).enumerate() {
                            let e = if *w == hkv { dec[row * w + g] } else { dec[row * w + g * dk + r] }.exp();
                            sr.iter_mut().for_each(|x| *x *= e);
                        }
                    }
                    let kt = &k[row * hkv * dk + g * dk..][..dk];
                    let mut vt = v[row * hkv * dv + g * dv..][..dv].to_vec();
                    if let Some((bet, w)) = &beta {
                        let bt = bet[row * w + if *w == 1 { 0 } else { g }];
                        for (c, x) in vt.iter_mut().enumerate() {
                            let read: f64 = (0..dk).map(|r| st[r * dv + c] * kt[r]).sum();
                            *x = bt * (*x - read);
                        }
                    }
                    for (r, sr) in st.chunks_mut(dv).enumerate() {
                        sr.iter_mut().zip(&vt).for_each(|(x, u)| *x += kt[r] * u);
                    }
                    for h in g * group..(g + 1) * group {
                        let qt = &q[row * hq * dk + h * dk..][..dk];
                        for c in 0..dv {
                            y[row * hq * dv + h * dv + c] =
                                scale * (0..dk).map(|r| qt[r] * st[r * dv + c]).sum::<f64>();
                        }
                    }
                }
            }
        }
        let (vals, shape, dt) = match self.which {
            LinearOutput::Output => (y, vec![d.b, d.t, hq * dv], inputs[0].datum_type()),
            LinearOutput::State => {
                let dt = state.map_or(inputs[0].datum_type(), |i| inputs[i].datum_type());
                (s, vec![d.b, hkv, dk, dv], dt)
            }
        };
        let t = tract_ndarray::ArrayD::from_shape_vec(shape, vals)?.into_tensor();
        Ok(tvec![t.cast_to_dt(dt)?.into_owned().into_tvalue()])
    }
}

impl TypedOp for LinearAttnNode {
    fn as_op(&self) -> &dyn tract_onnx::tract_core::ops::Op {
        self
    }

    fn as_op_mut(&mut self) -> &mut dyn tract_onnx::tract_core::ops::Op {
        self
    }

    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        let sp = &self.spec;
        let (q, v) = (&inputs[0].shape, &inputs[2].shape);
        ensure!(q.rank() == 3 && v.rank() == 3, "LinearAttention: query and value must be rank 3");
        // The operands' shapes against one another where they are known (the lowering and the
        // runtime check them again).
        if let (Some(qs), Some(vs)) = (q.as_concrete(), v.as_concrete()) {
            let d = self.dims(qs, vs)?;
            let (b, t, hkv) = (d.b, d.t, sp.kv_heads);
            let [state, decay, beta] = self.slots();
            let mut want: Vec<(usize, &str, Vec<Vec<usize>>)> =
                vec![(1, "key", vec![vec![b, t, hkv * d.dk]]), (2, "value", vec![vec![b, t, vs[2]]])];
            want.extend(state.map(|i| (i, "past_state", vec![vec![b, hkv, d.dk, d.dv]])));
            want.extend(decay.map(|i| (i, "decay", vec![vec![b, t, hkv], vec![b, t, hkv * d.dk]])));
            want.extend(beta.map(|i| (i, "beta", vec![vec![b, t, hkv], vec![b, t, 1]])));
            for (i, what, shapes) in want {
                if let Some(s) = inputs[i].shape.as_concrete() {
                    ensure!(
                        shapes.iter().any(|w| w.as_slice() == s),
                        "LinearAttention: {what} of shape {s:?}, expected {}",
                        shapes.iter().map(|w| format!("{w:?}")).collect::<Vec<_>>().join(" or ")
                    );
                }
            }
        }
        let shape: TVec<TDim> = match self.which {
            LinearOutput::Output => tvec![q[0].clone(), q[1].clone(), (v[2].clone() / sp.kv_heads) * sp.q_heads],
            LinearOutput::State => {
                tvec![q[0].clone(), sp.kv_heads.to_dim(), q[2].clone() / sp.q_heads, v[2].clone() / sp.kv_heads]
            }
        };
        let dt = match (self.which, self.slots()[0]) {
            (LinearOutput::State, Some(i)) => inputs[i].datum_type,
            _ => inputs[0].datum_type,
        };
        Ok(tvec![dt.fact(shape)])
    }
}

impl Lowerer<'_> {
    /// An ONNX LinearAttention output ([`LinearAttnNode`]) → `LinearAttn`.
    pub(super) fn try_linear_attention(&mut self) -> Res<bool> {
        let node = self.tnode();
        let Some(op) = node.op_as::<LinearAttnNode>() else { return Ok(false) };
        let (spec, which, slots) = (op.spec.clone(), op.which, op.slots());
        let inputs = node.inputs.clone();
        let scale_of = |dk: usize| op.scale(dk);
        let mut ids = Vec::with_capacity(inputs.len());
        for &i in &inputs {
            ids.push(self.act_or_const(i)?);
        }
        let (q, qs) = &ids[0];
        let (_, vs) = &ids[2];
        if qs.len() != 3 || vs.len() != 3 || qs[2] % spec.q_heads != 0 {
            return Err(self.bad("query and value [B, T, H·D]", format!("{qs:?}, {vs:?}")));
        }
        let dk = qs[2] / spec.q_heads;
        let at = |slot: Option<usize>| slot.map(|i| ids[i].0);
        let la = LinearAttn {
            q: *q,
            k: ids[1].0,
            v: ids[2].0,
            state: at(slots[0]),
            decay: at(slots[1]),
            beta: at(slots[2]),
            rule: spec.rule,
            q_heads: spec.q_heads as u32,
            kv_heads: spec.kv_heads as u32,
            scale: scale_of(dk),
            output: which,
            y: Default::default(),
        };
        let y = self.b.op(|y| Op::LinearAttn(LinearAttn { y, ..la }))?;
        let shape = self.out_shape()?;
        self.out(y, shape);
        self.count_fused("linear-attention");
        Ok(true)
    }
}
