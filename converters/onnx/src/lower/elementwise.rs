//! Binary ops (`TypedBinOp`) → `Binary`; element-wise math (`ElementWiseOp`) → `Unary`.

use super::{f32s, Lowerer, Res, Val};
use kestrel_format::ops::{Binary, BinaryOp, Op, TensorId, Unary, UnaryOp};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::nn::{GeluApproximate, LeakyRelu};

impl Lowerer<'_> {
    /// Lowers the node if it is a binary or element-wise op; `Ok(false)` if it is neither.
    pub(super) fn try_elementwise(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if let Some(op) = node.op_as::<TypedBinOp>() {
            if self.try_hard_sigmoid()? {
                return Ok(true);
            }
            let name = op.0.name();
            if name == "Mul" || name == "Div" {
                for &x in &node.inputs {
                    let Some(m) = self.match_gelu(x).filter(|m| m.nodes[0] == self.node) else { continue };
                    let (xid, shape) = self.act(x)?;
                    let y = self.b.op(|y| Op::Unary(Unary { x: xid, op: UnaryOp::Gelu, y }))?;
                    self.take(&m, y, shape);
                    self.count_fused("gelu");
                    return Ok(true);
                }
            }
            let (kind, swap) = match name {
                "Add" => (BinaryOp::Add, false),
                "Sub" => (BinaryOp::Sub, false),
                "SubF" => (BinaryOp::Sub, true),
                "Mul" => (BinaryOp::Mul, false),
                "Div" => (BinaryOp::Div, false),
                "Max" => (BinaryOp::Max, false),
                "Min" => (BinaryOp::Min, false),
                "Pow" => (BinaryOp::Pow, false),
                other => return Err(self.unsupported(&format!("binary {other}"))),
            };
            let (mut a, mut b) = (node.inputs[0], node.inputs[1]);
            if swap {
                std::mem::swap(&mut a, &mut b);
            }
            self.binary(kind, a, b)?;
            return Ok(true);
        }
        if let Some(op) = node.op_as::<ElementWiseOp>() {
            let name = op.0.name();
            let (x, shape) = self.act(node.inputs[0])?;
            let unary = |l: &mut Self, x: TensorId, op: UnaryOp| -> Res<TensorId> {
                Ok(l.b.op(|y| Op::Unary(Unary { x, op, y }))?)
            };
            let y = match name.as_str() {
                "Abs" => unary(self, x, UnaryOp::Abs)?,
                "Exp" => unary(self, x, UnaryOp::Exp)?,
                "Ln" => unary(self, x, UnaryOp::Log)?,
                "Sqrt" => unary(self, x, UnaryOp::Sqrt)?,
                "Recip" => unary(self, x, UnaryOp::Reciprocal)?,
                "Tanh" => unary(self, x, UnaryOp::Tanh)?,
                "Erf" => unary(self, x, UnaryOp::Erf)?,
                "Neg" => unary(self, x, UnaryOp::Neg)?,
                "Sigmoid" => unary(self, x, UnaryOp::Sigmoid)?,
                "GeluExact" => unary(self, x, UnaryOp::Gelu)?,
                "GeluApproximate" if op.0.downcast_ref::<GeluApproximate>().is_some_and(|g| !g.fast_impl) => {
                    unary(self, x, UnaryOp::GeluTanh)?
                }
                "Silu" => unary(self, x, UnaryOp::Silu)?,
                "HardSwish" => unary(self, x, UnaryOp::HardSwish)?,
                "LeakyRelu" => {
                    // max(x, αx) for 0 ≤ α ≤ 1; min(x, αx) above 1 (the same function).
                    let alpha =
                        op.0.downcast_ref::<LeakyRelu>()
                            .map(|l| l.alpha)
                            .ok_or_else(|| self.bad("a LeakyRelu", name.to_string()))?;
                    if alpha.is_nan() || alpha < 0.0 {
                        return Err(self.unsupported(&format!("LeakyRelu with negative alpha {alpha}")));
                    }
                    let src = OutletId::new(self.node, 0);
                    let a = self.weight_f32(src, "leaky_relu_alpha", &[1], vec![alpha])?;
                    let ax = self.b.op(|y| Op::Binary(Binary { a: x, b: a, op: BinaryOp::Mul, y }))?;
                    let pick = if alpha <= 1.0 { BinaryOp::Max } else { BinaryOp::Min };
                    self.b.op(|y| Op::Binary(Binary { a: x, b: ax, op: pick, y }))?
                }
                "Rsqrt" => {
                    let s = unary(self, x, UnaryOp::Sqrt)?;
                    unary(self, s, UnaryOp::Reciprocal)?
                }
                "Square" => self.b.op(|y| Op::Binary(Binary { a: x, b: x, op: BinaryOp::Mul, y }))?,
                other => return Err(self.unsupported(&format!("element-wise {other}"))),
            };
            self.out(y, shape);
            return Ok(true);
        }
        Ok(false)
    }

    /// A binary op; a constant operand becomes a weight with its leading 1-axes dropped (numpy
    /// broadcasting makes that equivalent). `max(x, 0)` becomes `Unary Relu`.
    pub(super) fn binary(&mut self, op: BinaryOp, a: OutletId, b: OutletId) -> Res<()> {
        let out = self.out_shape()?;
        let (va, vb) = (self.val(a)?, self.val(b)?);
        if let (BinaryOp::Max, Val::Act { id, int: false, .. }, Val::Const(t)) = (op, &va, &vb) {
            if f32s(t)?.iter().all(|&v| v == 0.0) && t.len() == 1 {
                let (x, s) = (*id, out.clone());
                let y = self.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Relu, y }))?;
                self.out(y, s);
                return Ok(());
            }
        }
        let ia = self.operand_id(a, &va)?;
        let ib = self.operand_id(b, &vb)?;
        let y = self.b.op(|y| Op::Binary(Binary { a: ia, b: ib, op, y }))?;
        let ys: Vec<usize> =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect()).unwrap_or_default();
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        Ok(())
    }

    pub(super) fn operand_id(&mut self, o: OutletId, v: &Val) -> Res<TensorId> {
        match v {
            Val::Act { id, int: false, .. } => Ok(*id),
            Val::Act { int: true, .. } => Err(self.bad("f32 operands", "integer ids".into())),
            Val::Const(t) => {
                let mut dims: Vec<usize> = t.shape().iter().copied().skip_while(|&d| d == 1).collect();
                if dims.is_empty() {
                    dims.push(1);
                }
                let v = f32s(t)?;
                self.weight(o, "binary", &dims, v)
            }
        }
    }
}
