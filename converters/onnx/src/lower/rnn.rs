//! ONNX `LSTM` and `GRU` → Kestrel `Lstm` / `Gru`; ONNX `RNN`, and any recurrence whose weights,
//! biases, peepholes or initial states are computed at run time, → the recurrence unrolled into
//! generic ops ([`steps`]).
//!
//! tract imports an ONNX LSTM or RNN as a `Scan` over a cell body and a GRU as its fused `GruSeq`,
//! which hides the recurrence's structure (and tract ignores the `direction`, `activations`,
//! `clip` and `input_forget` attributes). So the converter registers its own parsers for the three
//! op types ([`register`], called by `load.rs`): they produce [`RnnHir`], which keeps the ONNX
//! attributes and types as one [`RnnNode`] per ONNX output the node has (every Kestrel op has one
//! output; a model that reads Y and Y_h gets two recurrent nodes). [`RnnNode`] evaluates by
//! wiring tract's own implementation (`CommonRec`) into a small model and running it, so constant
//! folding and `--verify` compute what tract always did (a reversed direction included).
//! [`Lowerer::try_rnn`] then maps an LSTM/GRU node with constant parameters to one Kestrel op and
//! anything else to the unrolled steps, or names what is not supported (non-default activations,
//! clip, input_forget, a non-trivial or computed `sequence_lens`). Both GRU forms convert
//! (`linear_before_reset` 1, PyTorch's, and 0, ONNX's default: `Gru::reset`), and LSTM peepholes
//! are the op's optional `p`.

mod steps;

use super::{f32s, zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{BinaryOp, Gru, GruReset, Lstm, Op, RnnDirection, RnnOutput, Slice, TensorId};
use tract_onnx::model::{OnnxOpRegister, ParsingContext};
use tract_onnx::ops::rec::common::CommonRec;
use tract_onnx::ops::rec::{gru::GRU, lstm::LSTM, rnn::RNN};
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::{ensure, EvalContext, EvalOp, StaticName};
use tract_onnx::tract_hir::internal::{expand, Expansion, InferenceOp, InferenceResult, Solver, TensorProxy};
use tract_onnx::tract_hir::ops as hir_ops;

/// Registers the LSTM and GRU parsers on tract's ONNX op register (replacing tract's own).
pub(crate) fn register(reg: &mut OnnxOpRegister) {
    reg.insert("LSTM", parse_lstm);
    reg.insert("GRU", parse_gru);
    reg.insert("RNN", parse_rnn);
}

/// Which cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum CellKind {
    Lstm,
    Gru,
    /// ONNX `RNN`: `h = tanh(x_t Wᵀ + h Rᵀ + Wb + Rb)` (no Kestrel op of its own: unrolled).
    Rnn,
}

/// The ONNX node's attributes and input/output slots, as read from the file.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RnnSpec {
    cell: CellKind,
    /// `direction`: forward, reverse or bidirectional.
    direction: String,
    /// `layout`: 0 `[T, B, I]`, 1 `[B, T, I]`.
    layout: i64,
    /// `activations`, when given.
    activations: Option<Vec<String>>,
    /// `clip`, when given.
    clip: Option<f32>,
    /// LSTM `input_forget`.
    input_forget: i64,
    /// GRU `linear_before_reset`.
    linear_before_reset: bool,
    /// Positions, in the node's input list, of the optional inputs.
    bias: Option<usize>,
    seq_lens: Option<usize>,
    h0: Option<usize>,
    c0: Option<usize>,
    peepholes: Option<usize>,
    /// Positions, in the node's output list, of Y, Y_h, Y_c.
    outputs: [Option<usize>; 3],
}

impl Eq for RnnSpec {}

impl RnnSpec {
    fn parse(cell: CellKind, pb: &NodeProto) -> TractResult<Self> {
        let mut inputs = tract_onnx::model::optional_inputs(pb).skip(3);
        let mut outputs = tract_onnx::model::optional_outputs(pb);
        let mut next = || inputs.next().flatten();
        let (bias, seq_lens, h0, c0, peepholes) = (next(), next(), next(), next(), next());
        let mut out = || outputs.next().flatten();
        let outputs = [out(), out(), out()];
        Ok(Self {
            cell,
            direction: pb.get_attr_opt::<String>("direction")?.unwrap_or_else(|| "forward".into()),
            layout: pb.get_attr_opt::<i64>("layout")?.unwrap_or(0),
            activations: pb.get_attr_opt_vec::<String>("activations")?,
            clip: pb.get_attr_opt::<f32>("clip")?,
            input_forget: pb.get_attr_opt::<i64>("input_forget")?.unwrap_or(0),
            linear_before_reset: pb.get_attr_opt::<i64>("linear_before_reset")?.unwrap_or(0) != 0,
            bias,
            seq_lens,
            h0,
            c0,
            peepholes,
            outputs,
        })
    }

    fn gates(&self) -> usize {
        match self.cell {
            CellKind::Lstm => 4,
            CellKind::Gru => 3,
            CellKind::Rnn => 1,
        }
    }

    fn kestrel_direction(&self) -> Option<RnnDirection> {
        Some(match self.direction.as_str() {
            "forward" => RnnDirection::Forward,
            "reverse" => RnnDirection::Reverse,
            "bidirectional" => RnnDirection::Bidirectional,
            _ => return None,
        })
    }

    /// Why Kestrel's op cannot compute this node (attributes only; the inputs are checked by the
    /// lowering), `None` when it can.
    fn unsupported(&self) -> Option<String> {
        let dirs = self.kestrel_direction().map(RnnDirection::dirs);
        let Some(dirs) = dirs else { return Some(format!("direction `{}`", self.direction)) };
        if let Some(acts) = &self.activations {
            let default: &[&str] = match self.cell {
                CellKind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
                CellKind::Gru => &["Sigmoid", "Tanh"],
                CellKind::Rnn => &["Tanh"],
            };
            let want: Vec<&str> = (0..dirs).flat_map(|_| default.iter().copied()).collect();
            if acts.len() != want.len() || acts.iter().zip(&want).any(|(a, w)| !a.eq_ignore_ascii_case(w)) {
                return Some(format!("activations {acts:?} (only the default {:?} per direction)", default));
            }
        }
        if let Some(c) = self.clip {
            return Some(format!("clip {c} (cell clipping)"));
        }
        if self.input_forget != 0 {
            return Some("input_forget = 1 (coupled input and forget gates)".into());
        }
        if !(self.layout == 0 || self.layout == 1) {
            return Some(format!("layout {}", self.layout));
        }
        None
    }
}

fn parse_lstm(_ctx: &ParsingContext, pb: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let body = LSTM {
        f: Box::new(hir_ops::nn::sigmoid()),
        g: Box::new(hir_ops::math::tanh()),
        h: Box::new(hir_ops::math::tanh()),
    };
    let common = CommonRec::from_node_and_options(pb, 3, 0, Box::new(body))?;
    Ok((expand(RnnHir { spec: RnnSpec::parse(CellKind::Lstm, pb)?, common }), vec![]))
}

fn parse_rnn(_ctx: &ParsingContext, pb: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let body = RNN { fore: Box::new(hir_ops::math::tanh()), back: Box::new(hir_ops::math::tanh()) };
    let common = CommonRec::from_node_and_options(pb, 3, 0, Box::new(body))?;
    Ok((expand(RnnHir { spec: RnnSpec::parse(CellKind::Rnn, pb)?, common }), vec![]))
}

fn parse_gru(_ctx: &ParsingContext, pb: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let body = GRU {
        f: Box::new(hir_ops::nn::sigmoid()),
        g: Box::new(hir_ops::math::tanh()),
        linear_before_reset: pb.get_attr_opt::<i64>("linear_before_reset")?.unwrap_or(0) != 0,
    };
    let common = CommonRec::from_node_and_options(pb, 3, 0, Box::new(body))?;
    Ok((expand(RnnHir { spec: RnnSpec::parse(CellKind::Gru, pb)?, common }), vec![]))
}

/// The importer's op: tract's shape rules, typed as one [`RnnNode`] per output.
#[derive(Clone, Debug)]
pub(crate) struct RnnHir {
    spec: RnnSpec,
    common: CommonRec,
}

impl Expansion for RnnHir {
    fn name(&self) -> StaticName {
        match self.spec.cell {
            CellKind::Lstm => "LSTM".into(),
            CellKind::Gru => "GRU".into(),
            CellKind::Rnn => "RNN".into(),
        }
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(self.spec.outputs.iter().flatten().count())
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        self.common.rules(s, inputs, outputs)
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut outs = tvec![0.into(); self.nboutputs()?];
        let which = [RnnOutput::Y, RnnOutput::Hidden, RnnOutput::Cell];
        for (k, slot) in self.spec.outputs.iter().enumerate() {
            if let Some(slot) = *slot {
                let op = RnnNode { spec: self.spec.clone(), which: which[k], slot, common: self.common.clone() };
                let name = format!("{prefix}.{}", ["Y", "Y_h", "Y_c"][k]);
                outs[slot] = model.wire_node(name, op, inputs)?[0];
            }
        }
        Ok(outs)
    }
}

/// One output of an ONNX LSTM/GRU node, typed.
#[derive(Clone, Debug)]
pub(crate) struct RnnNode {
    spec: RnnSpec,
    /// Which output.
    which: RnnOutput,
    /// Its position among the ONNX node's outputs (and `CommonRec`'s).
    slot: usize,
    /// tract's implementation, for evaluation.
    common: CommonRec,
}

impl PartialEq for RnnNode {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec && self.which == other.which && self.slot == other.slot
    }
}

impl Eq for RnnNode {}

impl tract_onnx::tract_core::ops::Op for RnnNode {
    fn name(&self) -> StaticName {
        match self.spec.cell {
            CellKind::Lstm => "LSTM".into(),
            CellKind::Gru => "GRU".into(),
            CellKind::Rnn => "RNN".into(),
        }
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("{:?} of direction {}, layout {}", self.which, self.spec.direction, self.spec.layout)])
    }

    fn as_typed(&self) -> Option<&dyn TypedOp> {
        Some(self)
    }
}

impl EvalOp for RnnNode {
    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let reverse = self.spec.direction == "reverse";
        let seq_axis = if self.spec.layout == 1 { 1 } else { 0 };
        let mut model = TypedModel::default();
        let mut wires = tvec![];
        for (i, t) in inputs.into_iter().enumerate() {
            let mut t = t.into_tensor();
            // tract's implementation runs a single direction forwards whatever `direction` says:
            // a reverse layer runs it on the time-reversed input and reverses Y back.
            if i == 0 && reverse {
                t = reverse_axis(&t, seq_axis)?;
            }
            wires.push(model.add_const(format!("input.{i}"), t.into_arc_tensor())?);
        }
        let outs = Expansion::wire(&self.common, "rnn", &mut model, &wires)?;
        model.select_output_outlets(&[outs[self.slot]])?;
        let mut out = model.into_runnable()?.run(tvec![])?;
        let y = out.remove(0);
        Ok(tvec![if reverse && self.which == RnnOutput::Y {
            reverse_axis(&y.into_tensor(), seq_axis)?.into_tvalue()
        } else {
            y
        }])
    }

    fn eval_out_of_plan(&self, inputs: TVec<TValue>) -> TractResult<Option<TVec<TValue>>> {
        Ok(Some(EvalOp::eval(self, &EvalContext::out_of_plan(), inputs)?))
    }
}

/// `t` with `axis` reversed (f32).
fn reverse_axis(t: &Tensor, axis: usize) -> TractResult<Tensor> {
    let a = t.cast_to::<f32>()?.into_owned().into_plain_array::<f32>()?;
    let mut r = a.clone();
    r.invert_axis(tract_ndarray::Axis(axis));
    Ok(r.as_standard_layout().to_owned().into_tensor())
}

impl TypedOp for RnnNode {
    fn as_op(&self) -> &dyn tract_onnx::tract_core::ops::Op {
        self
    }

    fn as_op_mut(&mut self) -> &mut dyn tract_onnx::tract_core::ops::Op {
        self
    }

    /// ONNX's shapes: X `[T, B, I]` (layout 0) or `[B, T, I]`; Y `[T, dirs, B, H]` or
    /// `[B, T, dirs, H]`; Y_h, Y_c `[dirs, B, H]` or `[B, dirs, H]`.
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() >= 3, "{:?}: X, W and R are required", self.spec.cell);
        let x = &inputs[0].shape;
        ensure!(x.rank() == 3, "{:?}: X must have rank 3, found {:?}", self.spec.cell, x);
        let dirs = inputs[1].shape[0].clone();
        let h = inputs[2].shape.last().cloned().unwrap_or_else(|| 1.to_dim());
        let (t, b) = if self.spec.layout == 1 { (x[1].clone(), x[0].clone()) } else { (x[0].clone(), x[1].clone()) };
        let shape: TVec<TDim> = match (self.which, self.spec.layout == 1) {
            (RnnOutput::Y, false) => tvec![t, dirs, b, h],
            (RnnOutput::Y, true) => tvec![b, t, dirs, h],
            (_, false) => tvec![dirs, b, h],
            (_, true) => tvec![b, dirs, h],
        };
        Ok(tvec![inputs[0].datum_type.fact(shape)])
    }
}

impl Lowerer<'_> {
    /// An ONNX LSTM/GRU output ([`RnnNode`]) → `Lstm` / `Gru`.
    pub(super) fn try_rnn(&mut self) -> Res<bool> {
        let node = self.tnode();
        let Some(op) = node.op_as::<RnnNode>() else { return Ok(false) };
        let s = op.spec.clone();
        let which = op.which;
        let inputs = node.inputs.clone();
        if let Some(why) = s.unsupported() {
            return Err(self.unsupported(&why));
        }
        let Some(direction) = s.kestrel_direction() else { return Err(self.unsupported("direction")) };
        let dirs = direction.dirs();
        // X: [T, N, I] (layout 0) or [N, T, I]: N independent sequences (N = 1 at batch 1 when
        // Kestrel's sample axis is ONNX's B; a fixed N > 1, as a BiLSTM over an image's rows
        // has, runs as N recurrences on slices, their outputs placed side by side).
        let (x, xs) = self.act(inputs[0])?;
        let batch_axis = if s.layout == 1 { 0 } else { 1 };
        if xs.len() != 3 {
            return Err(self.bad("X of rank 3", format!("{xs:?}")));
        }
        let n = xs[batch_axis];
        let (t, inp) = (xs[1 - batch_axis], xs[2]);
        let konst = |lw: &Self, slot: usize, what: &str| -> Res<Arc<Tensor>> {
            match lw.val(inputs[slot])? {
                Val::Const(c) => Ok(c),
                Val::Act { .. } => {
                    Err(lw.unsupported(&format!("{what} computed from the model's input (a constant is needed)")))
                }
            }
        };
        if let Some(slot) = s.seq_lens {
            let lens = konst(self, slot, "sequence_lens")?;
            let lens = lens.cast_to::<i64>().map_err(|e| self.bad("integer sequence_lens", format!("{e}")))?;
            let all_t =
                lens.try_as_plain_ram().and_then(|v| v.as_slice::<i64>().map(|v| v.iter().all(|&l| l == t as i64)));
            if !all_t.unwrap_or(false) {
                return Err(self.unsupported("sequence_lens shorter than the sequence (padded batches)"));
            }
        }
        // Weights, biases, peepholes or initial states computed at run time (graph inputs, as
        // ONNX's own tests feed them), and every RNN: the recurrence unrolled into generic ops.
        let computed = [Some(1), Some(2), s.bias, s.h0, s.c0, s.peepholes]
            .into_iter()
            .flatten()
            .any(|slot| !matches!(self.val(inputs[slot]), Ok(Val::Const(_))));
        if computed || s.cell == CellKind::Rnn {
            let y = self.rnn_steps(&s, which, &inputs, direction)?;
            let logical = self.out_shape()?;
            let y = self.reshape(y.0, &y.1, &logical)?;
            self.out(y, logical);
            self.count_fused("rnn-unrolled");
            return Ok(true);
        }
        // W [dirs, G·H, I], R [dirs, G·H, H] → [dirs·G·H, I], [dirs·G·H, H].
        let (wc, rc) = (konst(self, 1, "W")?, konst(self, 2, "R")?);
        let (ws, rs) = (wc.shape().to_vec(), rc.shape().to_vec());
        let g = s.gates();
        if rs.len() != 3
            || rs[0] != dirs
            || rs[1] % g != 0
            || ws.len() != 3
            || ws[0] != dirs
            || ws[1] != rs[1]
            || ws[2] != inp
        {
            return Err(
                self.bad(&format!("W [{dirs}, {g}·H, {inp}] and R [{dirs}, {g}·H, H]"), format!("W {ws:?}, R {rs:?}"))
            );
        }
        let h = rs[2];
        if rs[1] != g * h {
            return Err(self.bad(&format!("R [{dirs}, {g}·H, H]"), format!("{rs:?}")));
        }
        let rows = dirs * g * h;
        let w = self.weight(inputs[1], "rnn.w", &[rows, inp], f32s(&wc)?)?;
        let r = self.weight(inputs[2], "rnn.r", &[rows, h], f32s(&rc)?)?;
        let b_vals = match s.bias {
            Some(slot) => {
                let bc = konst(self, slot, "B")?;
                if bc.shape() != [dirs, 2 * g * h] {
                    return Err(self.bad(&format!("B [{dirs}, {}]", 2 * g * h), format!("{:?}", bc.shape())));
                }
                f32s(&bc)?
            }
            None => zeros([dirs, 2 * g * h], "RNN bias")?,
        };
        let b_src = s.bias.map_or(inputs[1], |slot| inputs[slot]);
        let b = self.weight_f32(b_src, "rnn.b", &[dirs, 2 * g * h], b_vals)?;
        // Initial states [dirs, N, H] (layout 0) or [N, dirs, H]: sequence `bi`'s part, zeros left
        // out.
        let state = |lw: &mut Self, slot: Option<usize>, what: &'static str, bi: usize| -> Res<Option<u32>> {
            let Some(slot) = slot else { return Ok(None) };
            let c = konst(lw, slot, what)?;
            let want = if s.layout == 1 { [n, dirs, h] } else { [dirs, n, h] };
            if c.shape() != want {
                return Err(lw.bad(&format!("{what} of shape {want:?}"), format!("{:?}", c.shape())));
            }
            let all = f32s(&c)?;
            let v: Vec<f32> = (0..dirs)
                .flat_map(|d| {
                    let at = if s.layout == 1 { (bi * dirs + d) * h } else { (d * n + bi) * h };
                    all[at..at + h].to_vec()
                })
                .collect();
            if v.iter().all(|&x| x == 0.0) {
                return Ok(None);
            }
            Ok(Some(lw.weight_f32(inputs[slot], what, &[dirs, h], v)?))
        };
        // LSTM peepholes P [dirs, 3H] (P_i, P_o, P_f; shared by every sequence), zeros left out.
        let p = match (s.cell, s.peepholes) {
            (CellKind::Lstm, Some(slot)) => {
                let pc = konst(self, slot, "P")?;
                if pc.shape() != [dirs, 3 * h] {
                    return Err(self.bad(&format!("P [{dirs}, {}]", 3 * h), format!("{:?}", pc.shape())));
                }
                let v = f32s(&pc)?;
                if v.iter().all(|&x| x == 0.0) {
                    None
                } else {
                    Some(self.weight_f32(inputs[slot], "rnn.p", &[dirs, 3 * h], v)?)
                }
            }
            _ => None,
        };
        let reset = if s.linear_before_reset { GruReset::Product } else { GruReset::State };
        let hidden = u32::try_from(h).map_err(|_| self.bad("a hidden size below 2^32", format!("{h}")))?;
        let logical = self.out_shape()?;
        // Each sequence's output in ONNX's layout with a batch axis of 1, and that axis.
        let (piece, axis): (Vec<usize>, usize) = match (which, s.layout == 1) {
            (RnnOutput::Y, false) => (vec![t, dirs, 1, h], 2),
            (RnnOutput::Y, true) => (vec![1, t, dirs, h], 0),
            (_, false) => (vec![dirs, 1, h], 1),
            (_, true) => (vec![1, dirs, h], 0),
        };
        let whole: Vec<usize> = piece.iter().enumerate().map(|(a, &d)| if a == axis { n } else { d }).collect();
        if logical.iter().product::<usize>() != whole.iter().product::<usize>() {
            return Err(self.bad(&format!("an output of {whole:?} elements"), format!("{logical:?}")));
        }
        let mut acc: Option<TensorId> = None;
        for bi in 0..n {
            let xb = if n == 1 {
                x
            } else {
                let a = batch_axis as u32;
                self.b.op(|y| {
                    Op::Slice(Slice { x, axis: a, start: bi as u32, step: 1, count: 1, offset: 0, len: 1, y })
                })?
            };
            let mut one = xs.clone();
            one[batch_axis] = 1;
            let x2 = self.reshape(xb, &one, &[t, inp])?;
            let h0 = state(self, s.h0, "initial_h", bi)?;
            let c0 = match s.cell {
                CellKind::Lstm => state(self, s.c0, "initial_c", bi)?,
                CellKind::Gru | CellKind::Rnn => None,
            };
            let y = match s.cell {
                CellKind::Lstm => {
                    self.b.op(|y| Op::Lstm(Lstm { x: x2, w, r, b, h0, c0, p, hidden, direction, output: which, y }))?
                }
                CellKind::Gru => {
                    self.b.op(|y| Op::Gru(Gru { x: x2, w, r, b, h0, hidden, direction, output: which, reset, y }))?
                }
                CellKind::Rnn => return Err(self.bad("an LSTM or GRU", "RNN".into())),
            };
            let ks: Vec<usize> = match which {
                RnnOutput::Y => vec![t, dirs, h],
                RnnOutput::Hidden | RnnOutput::Cell => vec![dirs, h],
            };
            let y = self.reshape(y, &ks, &piece)?;
            if n == 1 {
                acc = Some(y);
                break;
            }
            // Placed at its index on the batch axis (zeros elsewhere), summed with the others.
            let a = axis as u32;
            let placed = self.b.op(|out| {
                Op::Slice(Slice {
                    x: y,
                    axis: a,
                    start: 0,
                    step: 1,
                    count: 1,
                    offset: bi as u32,
                    len: n as u32,
                    y: out,
                })
            })?;
            acc = Some(match acc {
                None => placed,
                Some(prev) => self.binary_op(prev, placed, BinaryOp::Add)?,
            });
        }
        let y = acc.ok_or_else(|| self.bad("a batch of at least one sequence", "0".into()))?;
        let y = self.reshape(y, &whole, &logical)?;
        self.out(y, logical);
        if n > 1 {
            self.count_fused("rnn-over-a-fixed-batch");
        }
        Ok(true)
    }
}
