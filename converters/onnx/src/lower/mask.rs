//! Boolean mask subgraphs (an attention mask built from a 0/1 integer input, as transformers
//! exports it): booleans are f32 activations holding exactly 0 or 1.
//!
//! `Cast(int → bool)` of integer ids → an `Embedding` into the table `[[0], [1]]` (an id other
//! than 0 or 1 is a run-time error naming it, never a silent clamp); `And` → `Mul`, `Or` → `Max`,
//! `Xor` → `|a − b|`, `Not` → `1 − x`; `Where`/`Iff` with a computed condition →
//! `When(a, c) + Unless(b, c)`, exact for any branch values (±∞ included: a constant's
//! ±∞ is stored exactly, as an f32 weight).

use super::{Lowerer, Res, Val};
use kestrel_rt_format::ops::{Binary, BinaryOp, Embedding, Op, TensorId, Unary, UnaryOp};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::Cast;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::logic::Iff;

impl Lowerer<'_> {
    fn is_bool(&self, o: OutletId) -> bool {
        self.model.outlet_fact(o).is_ok_and(|f| f.datum_type == bool::datum_type())
    }

    /// Lowers the node if it is part of a boolean mask computation; `Ok(false)` otherwise.
    pub(super) fn try_mask(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if let Some(c) = node.op_as::<Cast>() {
            let Val::Act { id, shape, int: true } = self.val(node.inputs[0])? else { return Ok(false) };
            if c.to != bool::datum_type() {
                return Ok(false);
            }
            let table = self.weight_f32(OutletId::new(self.node, 0), "mask_as_f32", &[2, 1], vec![0.0, 1.0])?;
            let y = self.b.op(|y| Op::Embedding(Embedding { ids: id, table, pos: None, y }))?;
            let n: usize = shape.iter().product();
            let y = self.reshape(y, &[n, 1], &shape)?;
            self.out(y, shape);
            self.count_fused("int-mask-as-f32");
            return Ok(true);
        }
        if let Some(op) = node.op_as::<TypedBinOp>() {
            if !node.inputs.iter().all(|&i| self.is_bool(i)) {
                return Ok(false);
            }
            let (a, b) = (node.inputs[0], node.inputs[1]);
            match op.0.name() {
                "And" => self.binary(BinaryOp::Mul, a, b)?,
                "Or" => self.binary(BinaryOp::Max, a, b)?,
                "Xor" => {
                    self.binary(BinaryOp::Sub, a, b)?;
                    let Val::Act { id, shape, .. } = self.val(OutletId::new(self.node, 0))? else {
                        return Err(self.bad("an activation", "a constant".into()));
                    };
                    let y = self.b.op(|y| Op::Unary(Unary { x: id, op: UnaryOp::Abs, y }))?;
                    self.out(y, shape);
                }
                _ => return Ok(false),
            }
            return Ok(true);
        }
        if let Some(op) = node.op_as::<ElementWiseOp>() {
            if op.0.name() != "Not" || !self.is_bool(node.inputs[0]) {
                return Ok(false);
            }
            let (x, shape) = self.act(node.inputs[0])?;
            let y = self.one_minus(x)?;
            self.out(y, shape);
            return Ok(true);
        }
        if node.op_is::<Iff>() && matches!(self.val(node.inputs[0])?, Val::Act { .. }) {
            self.iff_computed()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// `1 − x`.
    fn one_minus(&mut self, x: TensorId) -> Res<TensorId> {
        let one = self.weight_f32(OutletId::new(self.node, 0), "one", &[1], vec![1.0])?;
        Ok(self.b.op(|y| Op::Binary(Binary { a: one, b: x, op: BinaryOp::Sub, y }))?)
    }

    /// `where(c, a, b)` with a computed condition: `When(a, c) + Unless(b, c)` (each branch
    /// where the condition picks it, 0 elsewhere), exact for any branch values: an infinity or
    /// NaN in the branch not taken never reaches the output.
    fn iff_computed(&mut self) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let (c, _) = self.act(node.inputs[0])?;
        let mut terms = Vec::with_capacity(2);
        for (slot, pick) in [(1usize, BinaryOp::When), (2, BinaryOp::Unless)] {
            let o = node.inputs[slot];
            let v = self.val(o)?;
            // A zero constant branch contributes nothing.
            if let Val::Const(t) = &v {
                if super::f32s(t)?.iter().all(|&x| x == 0.0) {
                    continue;
                }
            }
            let branch = self.operand_id(o, &v)?;
            terms.push(self.b.op(|y| Op::Binary(Binary { a: branch, b: c, op: pick, y }))?);
        }
        let y = match terms.as_slice() {
            // Both branches zero: When(c, c) + … is not needed, a zero is c·0.
            [] => {
                let zero = self.weight_f32(OutletId::new(self.node, 0), "zero", &[1], vec![0.0])?;
                self.b.op(|y| Op::Binary(Binary { a: zero, b: c, op: BinaryOp::When, y }))?
            }
            [one] => *one,
            [a, b] => {
                let (a, b) = (*a, *b);
                self.b.op(|y| Op::Binary(Binary { a, b, op: BinaryOp::Add, y }))?
            }
            _ => unreachable!("at most two branches"),
        };
        let ys: Vec<usize> =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect()).unwrap_or_default();
        // The product broadcasts the condition and the branches; make the output shape exact.
        let y = if ys.iter().product::<usize>() == out.iter().product::<usize>() {
            self.reshape(y, &ys, &out)?
        } else {
            return Err(self
                .bad(&format!("a where() whose operands broadcast to {out:?}"), format!("a result of shape {ys:?}")));
        };
        self.out(y, out);
        self.count_fused("where-as-select");
        Ok(())
    }
}
