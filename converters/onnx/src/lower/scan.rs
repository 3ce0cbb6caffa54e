//! `Scan` (ONNX `Scan`, and any Scan tract's importers build) → its body unrolled.
//!
//! A Scan with a static trip count is lowered by lowering its body once per iteration with a
//! nested [`Lowerer`] that shares the parent's builder, weights, names and counters: each
//! iteration's body inputs are the scan inputs' chunks (a `Slice` each; a reversed input reads
//! its chunks from the end), the full inputs as they are, and the states the previous iteration
//! produced; each scan output is its iterations' pieces placed on the scanned axis (halves
//! concatenated pairwise, by placing `Slice`s and an `Add`), a last-value output is the final
//! iteration's value. Constants inside the body are the same outlet with the same values every
//! iteration, so they become one weight, not one per iteration. Anything the body holds that does
//! not lower is a blocker named after the body's node. The one Scan that keeps a kernel of its own
//! is an inclusive cumulative sum (`select.rs`: a triangular Dense). (ONNX LSTM, GRU and RNN have
//! their own parsers and lowering, `rnn.rs`.)
//!
//! Unrolling costs one copy of the body's nodes per iteration: at most [`MAX_UNROLLED`] node
//! copies in a whole model (nested scans and unrolled recurrences count too); a model past it
//! is refused with the count, never half built.

use super::{f32s, Lowerer, Res, Val};
use crate::error::ConvertError;
use kestrel_rt::ModelBuilder;
use kestrel_rt_format::ops::{BinaryOp, Op, Slice, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::scan::{InputMapping, Scan};

/// The most node copies unrolling may make in one model (every Scan body's nodes times its
/// iterations, and the ops of unrolled recurrences, together).
pub(crate) const MAX_UNROLLED: usize = 1 << 16;

impl<'m> Lowerer<'m> {
    /// A Scan: an inclusive cumulative sum as a triangular Dense, any other unrolled.
    pub(super) fn try_scan(&mut self) -> Res<bool> {
        let node = self.tnode();
        let Some(op) = node.op_as::<Scan>() else { return Ok(false) };
        if node.outputs.len() == 1 {
            if let Some(axis) = self.cumsum_axis(op) {
                self.cumsum(axis, false, false)?;
                return Ok(true);
            }
        }
        self.unroll_scan(op)?;
        Ok(true)
    }

    /// Reserves `copies` node copies of the unrolling budget, or names why not.
    pub(super) fn reserve_unrolled(&mut self, copies: usize, what: &str) -> Res<()> {
        let total = self.unrolled.saturating_add(copies);
        if total > MAX_UNROLLED {
            return Err(self.unsupported(&format!(
                "{what}: unrolled, {copies} node copies (with those made before, {total}), over the {MAX_UNROLLED} \
                 this converter unrolls in one model"
            )));
        }
        self.unrolled = total;
        Ok(())
    }

    /// A nested lowerer over `body`, holding this one's builder and shared state until
    /// [`Self::take_back`].
    fn lend(&mut self, body: &'m TypedModel) -> Lowerer<'m> {
        let b = std::mem::replace(&mut self.b, ModelBuilder::new(""));
        let choice = super::QuantChoice {
            base: self.choice.base,
            keep_f16: self.choice.keep_f16.clone(),
            keep_first_last: self.choice.keep_first_last,
        };
        let mut sub = Lowerer::new(body, b, choice);
        sub.weights = std::mem::take(&mut self.weights);
        sub.names = std::mem::take(&mut self.names);
        sub.composed = self.composed;
        sub.unrolled = self.unrolled;
        sub.id_bounds = std::mem::take(&mut self.id_bounds);
        sub.ids_values = std::mem::take(&mut self.ids_values);
        sub.quantised = self.quantised;
        sub
    }

    /// Takes back what [`Self::lend`] lent (and what the nested lowering added).
    fn take_back(&mut self, sub: &mut Lowerer<'m>) {
        self.b = std::mem::replace(&mut sub.b, ModelBuilder::new(""));
        self.weights = std::mem::take(&mut sub.weights);
        self.names = std::mem::take(&mut sub.names);
        self.composed = sub.composed;
        self.unrolled = sub.unrolled;
        self.id_bounds = std::mem::take(&mut sub.id_bounds);
        self.ids_values = std::mem::take(&mut sub.ids_values);
        self.notices.append(&mut sub.notices);
        for (name, n) in std::mem::take(&mut sub.fused) {
            for _ in 0..n {
                self.count_fused(&name);
            }
        }
    }

    /// `v` as an f32 activation (a constant becomes a weight plus zero; ids are read as values).
    pub(super) fn val_act(&mut self, v: &Val, usage: &'static str) -> Res<(TensorId, Vec<usize>)> {
        match v {
            Val::Act { id, shape, int: false } => Ok((*id, shape.clone())),
            Val::Act { id, shape, int: true } => Ok((self.ids_as_values(*id, shape)?, shape.clone())),
            Val::Const(t) => {
                let shape = if t.rank() == 0 { vec![1] } else { t.shape().to_vec() };
                let src = OutletId::new(self.node, 0);
                let w = self.weight_f32(src, usage, &shape, f32s(t)?)?;
                let z = self.weight_f32(src, "zero", &[1], vec![0.0])?;
                let y = self.binary_op(w, z, BinaryOp::Add)?;
                Ok((y, shape))
            }
        }
    }

    /// Elements `start..start + count` of `v` on `axis` (a constant sliced here, an activation by
    /// a `Slice`).
    pub(super) fn slice_val(&mut self, v: &Val, axis: usize, start: usize, count: usize) -> Res<Val> {
        let shape = v.shape();
        if shape.get(axis).is_none_or(|&n| start + count > n) {
            return Err(
                self.bad(&format!("an axis {axis} of at least {} elements", start + count), format!("{shape:?}"))
            );
        }
        if start == 0 && count == shape[axis] {
            return Ok(v.clone());
        }
        if let Val::Const(t) = v {
            let s =
                t.slice(axis, start, start + count).map_err(|e| self.bad("a sliceable constant", format!("{e}")))?;
            return Ok(Val::Const(s.into_arc_tensor()));
        }
        let (x, _) = self.val_act(v, "slice")?;
        let mut out = shape.clone();
        out[axis] = count;
        let (a, s, c) = (axis as u32, start as u32, count as u32);
        let y = self.b.op(|y| Op::Slice(Slice { x, axis: a, start: s, step: 1, count: c, offset: 0, len: c, y }))?;
        Ok(Val::Act { id: y, shape: out, int: false })
    }

    /// Pieces concatenated on `axis` (each an activation or a constant, of equal other axes).
    pub(super) fn concat_vals(&mut self, pieces: &[Val], axis: usize) -> Res<Val> {
        let Some(first) = pieces.first() else { return Err(self.bad("at least one piece", "none".into())) };
        if pieces.len() == 1 {
            return Ok(first.clone());
        }
        if pieces.iter().all(|p| matches!(p, Val::Const(_))) {
            let ts: Vec<Tensor> = pieces
                .iter()
                .map(|p| match p {
                    Val::Const(t) => t.cast_to::<f32>().map(|c| c.into_owned()),
                    Val::Act { .. } => unreachable!("all constants"),
                })
                .collect::<TractResult<_>>()
                .map_err(|e| self.bad("f32 constants", format!("{e}")))?;
            let t =
                Tensor::stack_tensors(axis, &ts).map_err(|e| self.bad("constants to concatenate", format!("{e}")))?;
            return Ok(Val::Const(t.into_arc_tensor()));
        }
        // Halves first, then the two placed side by side: every level of the tree copies the
        // output once (T pieces: log₂ T copies), where placing each piece into the whole output
        // and summing would copy it T times.
        if pieces.len() > 2 {
            let (a, b) = pieces.split_at(pieces.len() / 2);
            let halves = [self.concat_vals(a, axis)?, self.concat_vals(b, axis)?];
            return self.concat_vals(&halves, axis);
        }
        let total: usize = pieces.iter().map(|p| p.shape().get(axis).copied().unwrap_or(0)).sum();
        let mut out = first.shape();
        out[axis] = total;
        let mut sum: Option<TensorId> = None;
        let mut offset = 0;
        for p in pieces {
            let (x, s) = self.val_act(p, "concat_piece")?;
            let mut want = out.clone();
            want[axis] = s.get(axis).copied().unwrap_or(0);
            if s != want {
                return Err(self.bad(&format!("pieces shaped {want:?}"), format!("{s:?}")));
            }
            let (a, c, o, l) = (axis as u32, s[axis] as u32, offset as u32, total as u32);
            let placed =
                self.b.op(|y| Op::Slice(Slice { x, axis: a, start: 0, step: 1, count: c, offset: o, len: l, y }))?;
            sum = Some(match sum {
                None => placed,
                Some(prev) => self.binary_op(prev, placed, BinaryOp::Add)?,
            });
            offset += s[axis];
        }
        let id = sum.ok_or_else(|| self.bad("at least one piece", "none".into()))?;
        Ok(Val::Act { id, shape: out, int: false })
    }

    /// Unrolls a Scan (see the module's documentation).
    fn unroll_scan(&mut self, op: &'m Scan) -> Res<()> {
        let node = self.tnode();
        let inputs = node.inputs.clone();
        if op.skip != 0 {
            return Err(self.unsupported(&format!("a Scan skipping its first {} iterations", op.skip)));
        }
        let body = &op.body;
        let (body_in, body_out) = match (body.input_outlets(), body.output_outlets()) {
            (Ok(i), Ok(o)) => (i.to_vec(), o.to_vec()),
            _ => return Err(self.bad("a Scan body with inputs and outputs", "none".into())),
        };
        if body_in.len() != op.input_mapping.len() || body_out.len() != op.output_mapping.len() {
            return Err(self.bad("a Scan mapping every body input and output", format!("{op:?}")));
        }
        let vals: Vec<Val> = inputs.iter().map(|&i| self.val(i)).collect::<Res<_>>()?;
        // The trip count: every scanned input's axis over its chunk, all equal.
        let mut iters: Option<usize> = None;
        for (m, v) in op.input_mapping.iter().zip(&vals) {
            let InputMapping::Scan(info) = m else { continue };
            let n = v.shape().get(info.axis).copied().unwrap_or(0);
            let c = info.chunk.unsigned_abs();
            if c == 0 || n % c != 0 {
                return Err(self.unsupported(&format!("a Scan input of {n} elements scanned by chunks of {c}")));
            }
            if iters.is_some_and(|k| k != n / c) {
                return Err(self.bad("scan inputs of one trip count", format!("{:?} and {}", iters, n / c)));
            }
            iters = Some(n / c);
        }
        let Some(iters) = iters.filter(|&k| k > 0) else {
            return Err(self.unsupported("a Scan without a scanned input of static, non-zero length"));
        };
        // Each body output's per-iteration shape.
        let piece_shapes: Vec<Vec<usize>> = body_out
            .iter()
            .map(|&o| body.outlet_fact(o).ok().and_then(|f| f.shape.as_concrete().map(|s| s.to_vec())))
            .collect::<Option<_>>()
            .ok_or_else(|| self.unsupported("a Scan body whose outputs' shapes are not static"))?;
        for (m, s) in op.output_mapping.iter().zip(&piece_shapes) {
            if let Some((_, info)) = m.scan {
                let e = s.get(info.axis).copied().unwrap_or(0);
                if info.chunk < 0 && e != 1 {
                    return Err(self.unsupported("a reversed Scan output of more than one element per iteration"));
                }
                if m.full_dim_hint.as_ref().is_some_and(|d| d.as_i64() != Some((e * iters) as i64)) {
                    return Err(self.unsupported("a Scan output whose length is not the iterations' pieces"));
                }
            }
        }
        let copies = iters.saturating_mul(body.nodes().len());
        self.reserve_unrolled(
            copies,
            &format!("a Scan of {iters} iterations over a body of {} nodes", body.nodes().len()),
        )?;
        let mut states: Vec<Val> =
            op.input_mapping.iter().zip(&vals).filter(|(m, _)| m.is_state()).map(|(_, v)| v.clone()).collect();
        let mut pieces: Vec<Vec<Val>> = vec![Vec::new(); op.output_mapping.len()];
        let mut last: Vec<Option<Val>> = vec![None; op.output_mapping.len()];
        for i in 0..iters {
            // This iteration's body inputs (built before the builder is lent).
            let mut feed = Vec::with_capacity(vals.len());
            let mut st = states.iter();
            for (m, v) in op.input_mapping.iter().zip(&vals) {
                feed.push(match m {
                    InputMapping::Full => v.clone(),
                    InputMapping::State => {
                        st.next().cloned().ok_or_else(|| self.bad("a value for every state", "too few".into()))?
                    }
                    InputMapping::Scan(info) => {
                        let c = info.chunk.unsigned_abs();
                        let n = v.shape()[info.axis];
                        let start = if info.chunk < 0 { n - (i + 1) * c } else { i * c };
                        self.slice_val(v, info.axis, start, c)?
                    }
                });
            }
            let mut sub = self.lend(body);
            for (&o, v) in body_in.iter().zip(feed) {
                sub.set_input(o, v);
            }
            let ran = sub.run(&mut ());
            let outs: Res<Vec<Val>> = body_out.iter().map(|&o| sub.val(o)).collect();
            let blockers = std::mem::take(&mut sub.blockers);
            self.take_back(&mut sub);
            ran?;
            if !blockers.is_empty() {
                return Err(ConvertError::Unsupported { path: String::new(), blockers });
            }
            let outs = outs?;
            states.clear();
            for (k, (m, v)) in op.output_mapping.iter().zip(outs).enumerate() {
                if m.scan.is_some() {
                    pieces[k].push(v.clone());
                }
                if m.state {
                    states.push(v.clone());
                }
                last[k] = Some(v);
            }
        }
        for (k, m) in op.output_mapping.iter().enumerate() {
            if let Some((slot, info)) = m.scan {
                let mut p = std::mem::take(&mut pieces[k]);
                if info.chunk < 0 {
                    p.reverse();
                }
                let v = self.concat_vals(&p, info.axis)?;
                self.set_slot(slot, v)?;
            }
            if let Some(slot) = m.last_value_slot {
                let v = last[k].clone().ok_or_else(|| self.bad("a last value", "no iteration".into()))?;
                self.set_slot(slot, v)?;
            }
        }
        self.count_fused("scan-unrolled");
        Ok(())
    }

    /// Records output `slot` of the node being lowered, checked against tract's shape.
    fn set_slot(&mut self, slot: usize, v: Val) -> Res<()> {
        let node = self.tnode();
        let want = node.outputs.get(slot).and_then(|o| o.fact.shape.as_concrete().map(|s| s.to_vec()));
        let got = v.shape();
        // A scalar constant and a one-element shape are the same values.
        let same = want.as_ref().is_some_and(|w| {
            w == &got || (w.iter().product::<usize>() == got.iter().product::<usize>() && matches!(v, Val::Const(_)))
        });
        if !same {
            return Err(self.bad(&format!("output {slot} of shape {want:?}"), format!("{got:?}")));
        }
        let v = match v {
            Val::Const(t) if want.as_deref() != Some(t.shape()) => {
                let w = want.unwrap_or_default();
                let t = (*t).clone().into_shape(&w).map_err(|e| self.bad("a reshapable constant", format!("{e}")))?;
                Val::Const(t.into_arc_tensor())
            }
            v => v,
        };
        self.vals.insert(OutletId::new(self.node, slot), v);
        Ok(())
    }
}
