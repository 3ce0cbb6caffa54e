//! Boolean mask subgraphs (an attention mask built from a 0/1 integer input, as transformers
//! exports it): booleans are f32 activations holding exactly 0 or 1.
//!
//! `Cast(int → bool)` of integer ids → an `Embedding` into the table `[[0], [1]]` (an id other
//! than 0 or 1 is a run-time error naming it, never a silent clamp); `And` → `Mul`, `Or` → `Max`,
//! `Xor` → `|a − b|`, `Not` → `1 − x`; `Where`/`Iff` with a computed condition →
//! `c·a + (1 − c)·b`, exact for a 0/1 condition and finite branches (±∞ constants are stored as
//! ±f32::MAX, so a masked fill stays finite).

use super::{Lowerer, Res, Val};
use kestrel_format::ops::{Binary, BinaryOp, Embedding, Op, TensorId, Unary, UnaryOp};
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

    /// `where(c, a, b)` with a computed 0/1 condition: `c·a + (1 − c)·b`.
    fn iff_computed(&mut self) -> Res<()> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let (c, _) = self.act(node.inputs[0])?;
        let not_c = self.one_minus(c)?;
        let mut terms = Vec::with_capacity(2);
        for (slot, keep) in [(1usize, c), (2, not_c)] {
            let o = node.inputs[slot];
            let v = self.val(o)?;
            // A zero constant branch contributes nothing.
            if let Val::Const(t) = &v {
                if super::f32s(t)?.iter().all(|&x| x == 0.0) {
                    continue;
                }
            }
            let branch = self.operand_id(o, &v)?;
            terms.push(self.b.op(|y| Op::Binary(Binary { a: keep, b: branch, op: BinaryOp::Mul, y }))?);
        }
        let y = match terms.as_slice() {
            [] => self.b.op(|y| Op::Binary(Binary { a: c, b: not_c, op: BinaryOp::Mul, y }))?, // c·(1−c) = 0
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
        self.count_fused("where-as-arithmetic");
        Ok(())
    }
}
