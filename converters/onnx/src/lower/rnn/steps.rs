//! A recurrence (LSTM, GRU, RNN) unrolled into generic ops, for what the fused `Lstm`/`Gru`
//! ops cannot take: weights, biases, peepholes or initial states computed at run time (graph
//! inputs, as ONNX's own tests feed them, or tensors computed from them), and ONNX `RNN`, which
//! has no Kestrel op of its own. Models exported with constant weights keep the fused ops.
//!
//! Per direction `d`: the input projection of every step at once, `XW = X · W_dᵀ (+ biases)`
//! (one `MatMul`, the N sequences and T steps as its leading axes), then per step
//! (`t` = 0‥T−1, or T−1‥0 for a reversed direction) the step's rows `x_t` (a `Slice`), the
//! recurrent product `h · R_dᵀ` (a `MatMul` `[N, H] · [G·H, H]ᵀ`; none while `h` is the zero
//! initial state), the gates as `Slice`s, and the cell's equations with `Binary` and `Unary`
//! ops (ONNX's, with the default activations; `docs/onnx-ops.md`). Y is the steps' states
//! placed on the time axis, Y_h/Y_c the last step's; directions are placed on their axis. Each
//! step's ops count against the converter's unrolling budget (`scan::MAX_UNROLLED`).

use super::{CellKind, Lowerer, Res, RnnSpec, Val};
use kestrel_rt_format::ops::{BinaryOp, MatMul, Op, RnnDirection, RnnOutput, TensorId, Unary, UnaryOp};
use tract_onnx::prelude::*;

/// Ops one step of one direction makes, at most (for the unrolling budget).
const OPS_PER_STEP: usize = 32;

/// An activation with its shape.
type Act = (TensorId, Vec<usize>);

impl<'m> Lowerer<'m> {
    /// The recurrence's output `which` (ONNX's shape and layout), unrolled.
    pub(super) fn rnn_steps(
        &mut self,
        s: &RnnSpec,
        which: RnnOutput,
        inputs: &[OutletId],
        direction: RnnDirection,
    ) -> Res<Act> {
        let dirs = direction.dirs();
        let g = s.gates();
        let batch_first = s.layout == 1;
        let (x, xs) = self.act(inputs[0])?;
        if xs.len() != 3 {
            return Err(self.bad("X of rank 3", format!("{xs:?}")));
        }
        let (t_axis, n_axis) = if batch_first { (1, 0) } else { (0, 1) };
        let (steps, n, inp) = (xs[t_axis], xs[n_axis], xs[2]);
        let wv = self.val(inputs[1])?;
        let rv = self.val(inputs[2])?;
        let (ws, rs) = (wv.shape(), rv.shape());
        if rs.len() != 3 || rs[0] != dirs || rs[1] % g != 0 || ws.len() != 3 || ws[0] != dirs || ws[1] != rs[1] {
            return Err(
                self.bad(&format!("W [{dirs}, {g}·H, {inp}] and R [{dirs}, {g}·H, H]"), format!("W {ws:?}, R {rs:?}"))
            );
        }
        let h = rs[2];
        if rs[1] != g * h || ws[2] != inp {
            return Err(self
                .bad(&format!("W [{dirs}, {g}·{h}, {inp}], R [{dirs}, {g}·{h}, {h}]"), format!("W {ws:?}, R {rs:?}")));
        }
        let gh = g * h;
        self.reserve_unrolled(
            steps * dirs * OPS_PER_STEP,
            &format!("{:?} of {steps} steps, {dirs} direction(s)", s.cell),
        )?;
        let bv = s.bias.map(|slot| self.val(inputs[slot])).transpose()?;
        if let Some(b) = &bv {
            if b.shape() != [dirs, 2 * gh] {
                return Err(self.bad(&format!("B [{dirs}, {}]", 2 * gh), format!("{:?}", b.shape())));
            }
        }
        // Initial states [dirs, N, H] (layout 0) or [N, dirs, H].
        let state_shape = if batch_first { vec![n, dirs, h] } else { vec![dirs, n, h] };
        let dir_axis = if batch_first { 1 } else { 0 };
        let h0v = s.h0.map(|slot| self.val(inputs[slot])).transpose()?;
        let c0v = if s.cell == CellKind::Lstm { s.c0.map(|slot| self.val(inputs[slot])).transpose()? } else { None };
        for v in [&h0v, &c0v].into_iter().flatten() {
            if v.shape() != state_shape {
                return Err(self.bad(&format!("initial states of shape {state_shape:?}"), format!("{:?}", v.shape())));
            }
        }
        let pv =
            if s.cell == CellKind::Lstm { s.peepholes.map(|slot| self.val(inputs[slot])).transpose()? } else { None };
        if let Some(p) = &pv {
            if p.shape() != [dirs, 3 * h] {
                return Err(self.bad(&format!("P [{dirs}, {}]", 3 * h), format!("{:?}", p.shape())));
            }
        }
        let mut per_dir: Vec<Act> = Vec::with_capacity(dirs);
        for d in 0..dirs {
            let w = self.dir_part(&wv, inputs[1], "rnn.w", 0, d, &[gh, inp])?;
            let r = self.dir_part(&rv, inputs[2], "rnn.r", 0, d, &[gh, h])?;
            // Biases [1, G·H] each, Wb and Rb.
            let (wb, rb) = match &bv {
                Some(b) => {
                    let bd = self.slice_val(b, 0, d, 1)?;
                    let wb = self.slice_val(&bd, 1, 0, gh)?;
                    let rb = self.slice_val(&bd, 1, gh, gh)?;
                    (Some(wb), Some(rb))
                }
                None => (None, None),
            };
            let bsrc = inputs[s.bias.unwrap_or(1)];
            // Biases folded into the input projection: all of them, but Rb's candidate part for
            // a GRU (inside its reset product).
            let mut xw = self.rnn_mm(x, &xs, w, &[gh, inp])?;
            if let Some(wb) = &wb {
                let wb = self.rnn_tid(wb, bsrc, "rnn.wb", &[1, gh])?;
                xw.0 = self.binary_op(xw.0, wb, BinaryOp::Add)?;
            }
            let rb_full = match (&rb, s.cell) {
                (Some(rb), CellKind::Gru) => Some(rb.clone()),
                (Some(rb), _) => {
                    let rb = self.rnn_tid(rb, bsrc, "rnn.rb", &[1, gh])?;
                    xw.0 = self.binary_op(xw.0, rb, BinaryOp::Add)?;
                    None
                }
                (None, _) => None,
            };
            let init =
                |lw: &mut Self, v: &Option<Val>, slot: Option<usize>, usage: &'static str| -> Res<Option<TensorId>> {
                    let (Some(v), Some(slot)) = (v, slot) else { return Ok(None) };
                    let part = lw.slice_val(v, dir_axis, d, 1)?;
                    if let Val::Const(c) = &part {
                        if super::f32s(c)?.iter().all(|&x| x == 0.0) {
                            return Ok(None);
                        }
                    }
                    Ok(Some(lw.rnn_tid(&part, inputs[slot], usage, &[n, h])?))
                };
            let mut hs = init(self, &h0v, s.h0, "rnn.h0")?;
            let mut cs = init(self, &c0v, s.c0, "rnn.c0")?;
            // Peepholes P_i, P_o, P_f, [1, H] each.
            let peep: Option<[TensorId; 3]> = match (&pv, s.peepholes) {
                (Some(p), Some(slot)) => {
                    let pd = self.slice_val(p, 0, d, 1)?;
                    let mut out = [TensorId::default(); 3];
                    for (k, o) in out.iter_mut().enumerate() {
                        let part = self.slice_val(&pd, 1, k * h, h)?;
                        *o = self.rnn_tid(&part, inputs[slot], "rnn.p", &[1, h])?;
                    }
                    Some(out)
                }
                _ => None,
            };
            // A GRU's recurrent bias parts (z, r, h) and, for the default reset, R_h alone.
            let rb_parts: Option<[TensorId; 3]> = match &rb_full {
                Some(rb) => {
                    let mut out = [TensorId::default(); 3];
                    for (k, o) in out.iter_mut().enumerate() {
                        let part = self.slice_val(rb, 1, k * h, h)?;
                        *o = self.rnn_tid(&part, bsrc, "rnn.rb", &[1, h])?;
                    }
                    Some(out)
                }
                None => None,
            };
            let r_h = if s.cell == CellKind::Gru && !s.linear_before_reset {
                let rd = self.slice_val(&rv, 0, d, 1)?;
                let part = self.slice_val(&rd, 1, 2 * h, h)?;
                Some(self.rnn_tid(&part, inputs[2], "rnn.r_h", &[h, h])?)
            } else {
                None
            };
            let mut ys: Vec<Val> = vec![Val::Const(Arc::new(Tensor::default())); steps];
            for k in 0..steps {
                let t = if direction.reversed(d) { steps - 1 - k } else { k };
                let xt = self.rnn_cut(xw.0, &xw.1, t_axis, t, 1)?;
                let mut xt_shape = xw.1.clone();
                xt_shape[t_axis] = 1;
                let xt = self.reshape(xt, &xt_shape, &[n, gh])?;
                let hr = match hs {
                    Some(hp) => Some(self.rnn_mm(hp, &[n, h], r, &[gh, h])?.0),
                    None => None,
                };
                let gate = |lw: &mut Self, a: TensorId, k: usize| lw.rnn_cut(a, &[n, gh], 1, k * h, h);
                let (h_new, c_new) = match s.cell {
                    CellKind::Rnn => {
                        let a = self.add_opt(xt, hr)?;
                        (self.rnn_unary(a, UnaryOp::Tanh)?, None)
                    }
                    CellKind::Lstm => {
                        let a = self.add_opt(xt, hr)?;
                        let (gi, go, gf, gc) =
                            (gate(self, a, 0)?, gate(self, a, 1)?, gate(self, a, 2)?, gate(self, a, 3)?);
                        let pc = |lw: &mut Self, k: usize, c: Option<TensorId>| -> Res<Option<TensorId>> {
                            match (peep, c) {
                                (Some(p), Some(c)) => Ok(Some(lw.binary_op(c, p[k], BinaryOp::Mul)?)),
                                _ => Ok(None),
                            }
                        };
                        let pi = pc(self, 0, cs)?;
                        let i = self.add_opt(gi, pi)?;
                        let i = self.rnn_unary(i, UnaryOp::Sigmoid)?;
                        let cand = self.rnn_unary(gc, UnaryOp::Tanh)?;
                        let ic = self.binary_op(i, cand, BinaryOp::Mul)?;
                        let c_new = match cs {
                            Some(c) => {
                                let pf = pc(self, 2, cs)?;
                                let f = self.add_opt(gf, pf)?;
                                let f = self.rnn_unary(f, UnaryOp::Sigmoid)?;
                                let fc = self.binary_op(f, c, BinaryOp::Mul)?;
                                self.binary_op(fc, ic, BinaryOp::Add)?
                            }
                            None => ic,
                        };
                        let po = pc(self, 1, Some(c_new))?;
                        let o = self.add_opt(go, po)?;
                        let o = self.rnn_unary(o, UnaryOp::Sigmoid)?;
                        let tc = self.rnn_unary(c_new, UnaryOp::Tanh)?;
                        (self.binary_op(o, tc, BinaryOp::Mul)?, Some(c_new))
                    }
                    CellKind::Gru => {
                        let (xz, xr, xh) = (gate(self, xt, 0)?, gate(self, xt, 1)?, gate(self, xt, 2)?);
                        let (hz, hrr, hh) = match hr {
                            Some(a) => (Some(gate(self, a, 0)?), Some(gate(self, a, 1)?), Some(gate(self, a, 2)?)),
                            None => (None, None, None),
                        };
                        let rbp = |k: usize| rb_parts.map(|p| p[k]);
                        let z = self.add_opt(xz, hz)?;
                        let z = self.add_opt(z, rbp(0))?;
                        let z = self.rnn_unary(z, UnaryOp::Sigmoid)?;
                        let rg = self.add_opt(xr, hrr)?;
                        let rg = self.add_opt(rg, rbp(1))?;
                        let rg = self.rnn_unary(rg, UnaryOp::Sigmoid)?;
                        // The candidate's recurrent part: r ⊙ (h R_hᵀ + Rb_h) (linear before
                        // reset) or (r ⊙ h) R_hᵀ + Rb_h.
                        let rec = match (s.linear_before_reset, hs) {
                            (true, _) => match self.add_opt_rev(hh, rbp(2))? {
                                Some(v) => Some(self.binary_op(rg, v, BinaryOp::Mul)?),
                                None => None,
                            },
                            (false, Some(hp)) => {
                                let rh = self.binary_op(rg, hp, BinaryOp::Mul)?;
                                let r_h = r_h.ok_or_else(|| self.bad("R_h", "none".into()))?;
                                let p = self.rnn_mm(rh, &[n, h], r_h, &[h, h])?.0;
                                Some(self.add_opt(p, rbp(2))?)
                            }
                            (false, None) => rbp(2),
                        };
                        let nn = self.add_opt(xh, rec)?;
                        let nn = self.rnn_unary(nn, UnaryOp::Tanh)?;
                        // h' = n + z ⊙ (h − n)
                        let diff = match hs {
                            Some(hp) => self.binary_op(hp, nn, BinaryOp::Sub)?,
                            None => self.rnn_unary(nn, UnaryOp::Neg)?,
                        };
                        let zd = self.binary_op(z, diff, BinaryOp::Mul)?;
                        (self.binary_op(nn, zd, BinaryOp::Add)?, None)
                    }
                };
                hs = Some(h_new);
                cs = c_new;
                if which == RnnOutput::Y {
                    // [N, H] → [1, N, H] (layout 0) or [N, 1, H], placed at t.
                    let one = if batch_first { vec![n, 1, h] } else { vec![1, n, h] };
                    let y = self.reshape(h_new, &[n, h], &one)?;
                    ys[t] = Val::Act { id: y, shape: one, int: false };
                }
            }
            let part = match which {
                RnnOutput::Y => {
                    let v = self.concat_vals(&ys, t_axis)?;
                    let (y, shape) = self.val_act(&v, "rnn.y")?;
                    // [T, N, H] → [T, 1, N, H] (layout 0); [N, T, H] → [N, T, 1, H].
                    let to = if batch_first { vec![n, steps, 1, h] } else { vec![steps, 1, n, h] };
                    (self.reshape(y, &shape, &to)?, to)
                }
                RnnOutput::Hidden | RnnOutput::Cell => {
                    let last = if which == RnnOutput::Hidden { hs } else { cs };
                    let last = match last {
                        Some(v) => v,
                        None => return Err(self.bad("a cell state", "none (not an LSTM)".into())),
                    };
                    let to = if batch_first { vec![n, 1, h] } else { vec![1, n, h] };
                    (self.reshape(last, &[n, h], &to)?, to)
                }
            };
            per_dir.push(part);
        }
        let axis = match (which, batch_first) {
            (RnnOutput::Y, false) => 1,
            (RnnOutput::Y, true) => 2,
            (_, false) => 0,
            (_, true) => 1,
        };
        let pieces: Vec<Val> = per_dir.into_iter().map(|(id, shape)| Val::Act { id, shape, int: false }).collect();
        let v = self.concat_vals(&pieces, axis)?;
        self.val_act(&v, "rnn.out")
    }

    /// Direction `d`'s part of `v` (its axis `axis`), as a tensor of `shape`.
    fn dir_part(
        &mut self,
        v: &Val,
        src: OutletId,
        usage: &'static str,
        axis: usize,
        d: usize,
        shape: &[usize],
    ) -> Res<TensorId> {
        let part = self.slice_val(v, axis, d, 1)?;
        self.rnn_tid(&part, src, usage, shape)
    }

    /// `v` as a tensor of `shape` (as many elements): a constant as an f32 weight, an activation
    /// viewed in that shape.
    fn rnn_tid(&mut self, v: &Val, src: OutletId, usage: &'static str, shape: &[usize]) -> Res<TensorId> {
        let numel: usize = shape.iter().product();
        if v.shape().iter().product::<usize>() != numel {
            return Err(self.bad(&format!("{numel} elements"), format!("{:?}", v.shape())));
        }
        match v {
            Val::Const(c) => {
                let vals = super::f32s(c)?;
                self.weight_f32(src, usage, shape, vals)
            }
            Val::Act { .. } => {
                let (id, from) = self.val_act(v, usage)?;
                self.reshape(id, &from, shape)
            }
        }
    }

    /// `a · bᵀ`, `a [.., K]`, `b [M, K]`: `[.., M]`.
    fn rnn_mm(&mut self, a: TensorId, a_shape: &[usize], b: TensorId, b_shape: &[usize]) -> Res<Act> {
        let y = self.b.op(|y| Op::MatMul(MatMul { a, b, transpose_b: true, y }))?;
        let mut out = a_shape.to_vec();
        if let Some(l) = out.last_mut() {
            *l = b_shape[0];
        }
        Ok((y, out))
    }

    /// `count` elements of an activation from `start` on `axis`.
    fn rnn_cut(&mut self, x: TensorId, shape: &[usize], axis: usize, start: usize, count: usize) -> Res<TensorId> {
        let v = Val::Act { id: x, shape: shape.to_vec(), int: false };
        match self.slice_val(&v, axis, start, count)? {
            Val::Act { id, .. } => Ok(id),
            Val::Const(_) => Err(self.bad("an activation", "a constant".into())),
        }
    }

    fn rnn_unary(&mut self, x: TensorId, op: UnaryOp) -> Res<TensorId> {
        Ok(self.b.op(|y| Op::Unary(Unary { x, op, y }))?)
    }

    /// `a + b`, or `a` without `b`.
    fn add_opt(&mut self, a: TensorId, b: Option<TensorId>) -> Res<TensorId> {
        match b {
            Some(b) => self.binary_op(a, b, BinaryOp::Add),
            None => Ok(a),
        }
    }

    /// `a + b` of two optional terms (`None` when both are absent).
    fn add_opt_rev(&mut self, a: Option<TensorId>, b: Option<TensorId>) -> Res<Option<TensorId>> {
        match (a, b) {
            (Some(a), b) => Ok(Some(self.add_opt(a, b)?)),
            (None, b) => Ok(b),
        }
    }
}
