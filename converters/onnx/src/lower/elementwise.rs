//! Binary ops (`TypedBinOp`) → `Binary`; element-wise math (`ElementWiseOp`) → `Unary`: each by
//! the importer names in the format's element-wise tables (`kestrel_rt_format::ops::{UnaryOp,
//! BinaryOp}`), plus the few tract ops with parameters (IsInf's signs, a constant power,
//! LeakyRelu's slope, the tanh GELU's exactness).

use super::{f32s, Lowerer, Res, Val};
use kestrel_rt_format::ops::{Binary, BinaryOp, Op, TensorId, Unary, UnaryOp};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::Trilu;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::math::{IsInf, PowConst};
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
            // tract's `SubF` is `b − a`; every other binary op is a row of the format's table.
            let (kind, swap) = match name {
                "SubF" => (BinaryOp::Sub, true),
                other => match BinaryOp::from_importer_name(other) {
                    Some(f) => (f, false),
                    None => return Err(self.unsupported(&format!("binary {other}"))),
                },
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
                "GeluApproximate" if op.0.downcast_ref::<GeluApproximate>().is_some_and(|g| !g.fast_impl) => {
                    unary(self, x, UnaryOp::GeluTanh)?
                }
                "IsInf" => {
                    let f = op.0.downcast_ref::<IsInf>().ok_or_else(|| self.bad("an IsInf", name.to_string()))?;
                    let f = match (f.detect_positive, f.detect_negative) {
                        (true, true) => UnaryOp::IsInf,
                        (true, false) => UnaryOp::IsPosInf,
                        (false, true) => UnaryOp::IsNegInf,
                        (false, false) => return Err(self.unsupported("IsInf detecting neither sign")),
                    };
                    unary(self, x, f)?
                }
                "PowConst" => {
                    let e = op.0.downcast_ref::<PowConst>().ok_or_else(|| self.bad("a PowConst", name.to_string()))?;
                    self.pow_const(x, e.exponent)?
                }
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
                other => match UnaryOp::from_importer_name(other) {
                    Some(f) => unary(self, x, f)?,
                    None => return Err(self.unsupported(&format!("element-wise {other}"))),
                },
            };
            self.out(y, shape);
            return Ok(true);
        }
        Ok(false)
    }

    /// `Trilu` (a triangle of the last two axes kept, the rest zeroed) of an activation:
    /// `When(x, mask)` (exact: a zeroed element is 0 whatever x holds there). A constant diagonal
    /// offset `k` makes the 0/1 mask `[M, N]` a weight; a `k` computed at run time compares the
    /// constant `j − i` with it (`≥ k` upper, `≤ k` lower). `Ok(false)` for any other op.
    pub(super) fn try_trilu(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<Trilu>() else { return Ok(false) };
        let (x, shape) = self.act(node.inputs[0])?;
        let [.., m, n] = shape[..] else {
            return Err(self.bad("an input of rank ≥ 2", format!("{shape:?}")));
        };
        let src = OutletId::new(self.node, 0);
        let k = match node.inputs.get(1).map(|&i| self.val(i)).transpose()? {
            Some(Val::Const(t)) => {
                let v = f32s(&t)?;
                match v.as_slice() {
                    [k] => *k as i64,
                    _ => return Err(self.bad("a scalar diagonal offset k", format!("{} values", v.len()))),
                }
            }
            None => 0,
            Some(Val::Act { shape: ks, .. }) => {
                if ks.iter().product::<usize>() != 1 {
                    return Err(self.bad("a scalar diagonal offset k", format!("{ks:?}")));
                }
                let (k, ks) = self.act(node.inputs[1])?;
                let k = self.reshape(k, &ks, &[1])?;
                let diff: Vec<f32> = (0..m * n).map(|p| (p % n) as f32 - (p / n) as f32).collect();
                let diff = self.weight_f32(src, "trilu_offsets", &[m, n], diff)?;
                let cmp = if op.upper { BinaryOp::GreaterEq } else { BinaryOp::LessEq };
                let mask = self.binary_op(diff, k, cmp)?;
                let y = self.binary_op(x, mask, BinaryOp::When)?;
                self.out(y, shape);
                return Ok(true);
            }
        };
        let keep = |i: usize, j: usize| {
            let (i, j) = (i as i64, j as i64);
            if op.upper {
                j >= i + k
            } else {
                j <= i + k
            }
        };
        let mask: Vec<f32> = (0..m * n).map(|p| if keep(p / n, p % n) { 1.0 } else { 0.0 }).collect();
        let w = self.weight_f32(src, "trilu_mask", &[m, n], mask)?;
        let y = self.b.op(|y| Op::Binary(Binary { a: x, b: w, op: BinaryOp::When, y }))?;
        self.out(y, shape);
        Ok(true)
    }

    /// `x^e` for a constant exponent: the integer powers a network writes by hand (x², x³ in the
    /// tanh GELU, x⁴) as products, ½ as a square root, −1 as a reciprocal, anything else as a
    /// Binary Pow against the constant.
    fn pow_const(&mut self, x: TensorId, e: f32) -> Res<TensorId> {
        let mul = |l: &mut Self, a: TensorId, b: TensorId| -> Res<TensorId> {
            Ok(l.b.op(|y| Op::Binary(Binary { a, b, op: BinaryOp::Mul, y }))?)
        };
        let unary = |l: &mut Self, x: TensorId, op: UnaryOp| -> Res<TensorId> {
            Ok(l.b.op(|y| Op::Unary(Unary { x, op, y }))?)
        };
        Ok(match e {
            1.0 => x,
            2.0 => unary(self, x, UnaryOp::Square)?,
            3.0 => {
                let x2 = unary(self, x, UnaryOp::Square)?;
                mul(self, x2, x)?
            }
            4.0 => {
                let x2 = unary(self, x, UnaryOp::Square)?;
                unary(self, x2, UnaryOp::Square)?
            }
            0.5 => unary(self, x, UnaryOp::Sqrt)?,
            -0.5 => unary(self, x, UnaryOp::Rsqrt)?,
            -1.0 => unary(self, x, UnaryOp::Reciprocal)?,
            e => {
                let src = OutletId::new(self.node, 0);
                let w = self.weight_f32(src, "exponent", &[1], vec![e])?;
                self.b.op(|y| Op::Binary(Binary { a: x, b: w, op: BinaryOp::Pow, y }))?
            }
        })
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
        let mut y = self.b.op(|y| Op::Binary(Binary { a: ia, b: ib, op, y }))?;
        // Integers held as f32 values divide toward zero: the quotient truncated,
        // q − fmod(q, 1).
        let int_out = self.model.outlet_fact(OutletId::new(self.node, 0)).is_ok_and(|f| f.datum_type.is_integer());
        if op == BinaryOp::Div && int_out {
            let q = y;
            let one = self.weight_f32(OutletId::new(self.node, 0), "truncate", &[1], vec![1.0])?;
            let frac = self.b.op(|y| Op::Binary(Binary { a: q, b: one, op: BinaryOp::Fmod, y }))?;
            y = self.b.op(|y| Op::Binary(Binary { a: q, b: frac, op: BinaryOp::Sub, y }))?;
        }
        let y = self.reshape_to(y, &out)?;
        self.out(y, out);
        Ok(())
    }

    pub(super) fn operand_id(&mut self, o: OutletId, v: &Val) -> Res<TensorId> {
        match v {
            Val::Act { id, int: false, .. } => Ok(*id),
            Val::Act { id, shape, int: true } => self.ids_as_values(*id, shape),
            Val::Const(t) => {
                let mut dims: Vec<usize> = t.shape().iter().copied().skip_while(|&d| d == 1).collect();
                if dims.is_empty() {
                    dims.push(1);
                }
                let v = f32s(t)?;
                self.weight_elementwise(o, "binary", &dims, v)
            }
        }
    }
}
