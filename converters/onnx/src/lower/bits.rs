//! Integer bit operations (ONNX BitShift, BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot) on
//! integers held as exact f32 values, lowered exactly with generic ops, for every integer width
//! and signedness ONNX allows.
//!
//! - Shifts by `b` (ONNX's reference semantics): left is `a·2^b` wrapped to the type's width
//!   (`fmod` by 2^w, then back into the signed range for signed types: two's complement); right
//!   is `floor(a / 2^b)` (arithmetic for signed types). A shift amount outside `0..w` gives 0
//!   (and −1 for a negative value shifted right).
//! - And, or, xor: the operands' bits as a trailing axis (`floor(u / 2^i) mod 2` for the low L
//!   bits, L = w for unsigned and w − 1 for signed types, at most 24: f32 holds integers exactly
//!   to 2^24, as the sessions check at the input), combined bit by bit (`·`, `max`, `≠`) and
//!   summed back with their weights 2^i. A signed value is its low bits plus −2^L times its sign
//!   (`u = x + 2^L·(x < 0)`); the sign combines like any bit (the bits above L of a value below
//!   2^24 in magnitude all equal its sign).
//! - Not: `−1 − x` (signed), `2^w − 1 − x` (unsigned; exact for 8 and 16 bits).

use super::{f32s, Lowerer, Res, Val};
use kestrel_rt_format::ops::{BinaryOp, Op, Reduce, ReduceOp, TensorId, Unary, UnaryOp};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;

/// The most low bits decomposed: f32 holds integers exactly to 2^24.
const MAX_BITS: u32 = 24;

/// An operand of a bitwise op: its bits `[.., L]`, and its sign (signed types), as tensors or
/// constant values.
enum Bits {
    Act { bits: TensorId, sign: Option<TensorId> },
    Const { bits: Vec<f32>, sign: Option<Vec<f32>>, shape: Vec<usize> },
}

impl Lowerer<'_> {
    /// Lowers the integer bit ops; `Ok(false)` for anything else.
    pub(super) fn try_bits(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let name = if let Some(op) = node.op_as::<TypedBinOp>() {
            op.0.name().to_string()
        } else if let Some(op) = node.op_as::<ElementWiseOp>() {
            op.0.name().to_string()
        } else {
            return Ok(false);
        };
        if !matches!(name.as_str(), "BitAnd" | "BitOr" | "BitXor" | "ShiftLeft" | "ShiftRight" | "BitNot") {
            return Ok(false);
        }
        let dt =
            self.model.outlet_fact(node.inputs[0]).map_err(|e| self.bad("a typed input", format!("{e}")))?.datum_type;
        let (w, signed) = match dt {
            DatumType::I8 => (8, true),
            DatumType::I16 => (16, true),
            DatumType::I32 => (32, true),
            DatumType::I64 => (64, true),
            DatumType::U8 => (8, false),
            DatumType::U16 => (16, false),
            DatumType::U32 => (32, false),
            DatumType::U64 => (64, false),
            DatumType::Bool => (1, false),
            other => return Err(self.unsupported(&format!("{name} on {other:?}"))),
        };
        let out = self.out_shape()?;
        let y = match name.as_str() {
            "BitNot" => {
                let (x, _) = self.act(node.inputs[0])?;
                let top = if signed { -1.0 } else { (2f64.powi(w) - 1.0) as f32 };
                let c = self.scalar(top)?;
                self.binary_op(c, x, BinaryOp::Sub)?
            }
            "ShiftLeft" | "ShiftRight" => self.shift(name == "ShiftLeft", w, signed)?,
            op => self.bitwise(op, w, signed)?,
        };
        let y = self.reshape_to(y, &out)?;
        self.out(y, out);
        self.count_fused("integer-bits");
        Ok(true)
    }

    /// A scalar f32 constant.
    fn scalar(&mut self, v: f32) -> Res<TensorId> {
        self.weight_f32(OutletId::new(self.node, 0), "bits_constant", &[1], vec![v])
    }

    /// `a << b` or `a >> b` on a `w`-bit integer type.
    fn shift(&mut self, left: bool, w: i32, signed: bool) -> Res<TensorId> {
        let node = self.model.node(self.node);
        let (a, _) = self.act(node.inputs[0])?;
        let here = OutletId::new(self.node, 0);
        // 2^b and whether b lies in 0..w.
        let (p, valid) = match self.val(node.inputs[1])? {
            Val::Const(t) => {
                let mut dims: Vec<usize> = t.shape().iter().copied().skip_while(|&d| d == 1).collect();
                if dims.is_empty() {
                    dims.push(1);
                }
                let b = f32s(&t)?;
                let p: Vec<f32> =
                    b.iter().map(|&b| if (0.0..w as f32).contains(&b) { 2f32.powi(b as i32) } else { 1.0 }).collect();
                let valid: Vec<f32> = b.iter().map(|&b| f32::from((0.0..w as f32).contains(&b))).collect();
                (self.weight_f32(here, "shift_powers", &dims, p)?, self.weight_f32(here, "shift_valid", &dims, valid)?)
            }
            Val::Act { .. } => {
                let (b, _) = self.act(node.inputs[1])?;
                let zero = self.scalar(0.0)?;
                let width = self.scalar(w as f32)?;
                let lo = self.binary_op(b, zero, BinaryOp::GreaterEq)?;
                let hi = self.binary_op(b, width, BinaryOp::Less)?;
                let valid = self.binary_op(lo, hi, BinaryOp::And)?;
                // 2^b only where b is valid (0 elsewhere, masked below): exact powers of two.
                let b = self.binary_op(b, valid, BinaryOp::When)?;
                let two = self.scalar(2.0)?;
                (self.binary_op(two, b, BinaryOp::Pow)?, valid)
            }
        };
        if left {
            let t = self.binary_op(a, p, BinaryOp::Mul)?;
            let modulus = self.scalar(2f64.powi(w) as f32)?;
            let mut m = self.binary_op(t, modulus, BinaryOp::Fmod)?;
            if signed {
                // Back into [−2^(w−1), 2^(w−1)): two's complement.
                let half = self.scalar(2f64.powi(w - 1) as f32)?;
                let neg_half = self.scalar(-(2f64.powi(w - 1)) as f32)?;
                let hi = self.binary_op(m, half, BinaryOp::GreaterEq)?;
                let lo = self.binary_op(m, neg_half, BinaryOp::Less)?;
                let wrap = self.binary_op(lo, hi, BinaryOp::Sub)?;
                let wrap = self.binary_op(wrap, modulus, BinaryOp::Mul)?;
                m = self.binary_op(m, wrap, BinaryOp::Add)?;
            } else {
                // fmod of a non-negative value: already in [0, 2^w).
            }
            return self.binary_op(m, valid, BinaryOp::When);
        }
        let q = self.binary_op(a, p, BinaryOp::Div)?;
        let f = self.b.op(|y| Op::Unary(Unary { x: q, op: UnaryOp::Floor, y }))?;
        let kept = self.binary_op(f, valid, BinaryOp::When)?;
        if !signed {
            return Ok(kept);
        }
        // Out of range: −1 for a negative value, 0 otherwise.
        let zero = self.scalar(0.0)?;
        let negative = self.binary_op(a, zero, BinaryOp::Less)?;
        let fill = self.binary_op(zero, negative, BinaryOp::Sub)?;
        let fill = self.binary_op(fill, valid, BinaryOp::Unless)?;
        self.binary_op(kept, fill, BinaryOp::Add)
    }

    /// The low `l` bits of an operand (and its sign for signed types), as a trailing axis.
    fn bits_of(&mut self, o: OutletId, l: u32, signed: bool) -> Res<(Bits, usize)> {
        let low = 2f64.powi(l as i32) as f32;
        match self.val(o)? {
            Val::Const(t) => {
                let v = f32s(&t)?;
                let shape = t.shape().to_vec();
                let sign: Vec<f32> = v.iter().map(|&x| f32::from(signed && x < 0.0)).collect();
                let bits: Vec<f32> = v
                    .iter()
                    .zip(&sign)
                    .flat_map(|(&x, &s)| {
                        let u = x + s * low;
                        (0..l).map(move |i| (u / 2f32.powi(i as i32)).floor() % 2.0)
                    })
                    .collect();
                let rank = shape.len();
                Ok((Bits::Const { bits, sign: signed.then_some(sign), shape }, rank))
            }
            Val::Act { .. } => {
                let (x, xs) = self.act(o)?;
                let mut u = x;
                let mut sign = None;
                if signed {
                    let zero = self.scalar(0.0)?;
                    let s = self.binary_op(x, zero, BinaryOp::Less)?;
                    let lw = self.scalar(low)?;
                    let shift = self.binary_op(s, lw, BinaryOp::Mul)?;
                    u = self.binary_op(x, shift, BinaryOp::Add)?;
                    sign = Some(s);
                }
                let col: Vec<usize> = xs.iter().copied().chain([1]).collect();
                let u = self.reshape(u, &xs, &col)?;
                let powers: Vec<f32> = (0..l).map(|i| 2f32.powi(i as i32)).collect();
                let powers = self.weight_f32(OutletId::new(self.node, 0), "bit_weights", &[l as usize], powers)?;
                let q = self.binary_op(u, powers, BinaryOp::Div)?;
                let f = self.b.op(|y| Op::Unary(Unary { x: q, op: UnaryOp::Floor, y }))?;
                let two = self.scalar(2.0)?;
                let bits = self.binary_op(f, two, BinaryOp::Fmod)?;
                Ok((Bits::Act { bits, sign }, xs.len()))
            }
        }
    }

    /// And, or or xor of two `w`-bit integers, bit by bit.
    fn bitwise(&mut self, op: &str, w: i32, signed: bool) -> Res<TensorId> {
        let node = self.model.node(self.node);
        let (ia, ib) = (node.inputs[0], node.inputs[1]);
        let l = if signed { (w - 1) as u32 } else { w as u32 }.min(MAX_BITS);
        let f = match op {
            "BitAnd" => BinaryOp::Mul,
            "BitOr" => BinaryOp::Max,
            _ => BinaryOp::NotEqual,
        };
        let (a, ra) = self.bits_of(ia, l, signed)?;
        let (b, rb) = self.bits_of(ib, l, signed)?;
        let here = OutletId::new(self.node, 0);
        // A constant operand becomes a weight (its leading 1-axes dropped: numpy broadcasting).
        let as_ids = |lw: &mut Self, v: Bits, usage: &'static str| -> Res<(TensorId, Option<TensorId>)> {
            match v {
                Bits::Act { bits, sign } => Ok((bits, sign)),
                Bits::Const { bits, sign, shape } => {
                    let mut dims: Vec<usize> = shape.iter().copied().skip_while(|&d| d == 1).collect();
                    let sdims = if dims.is_empty() { vec![1] } else { dims.clone() };
                    dims.push(l as usize);
                    let bits = lw.weight_f32(here, usage, &dims, bits)?;
                    let sign = sign.map(|s| lw.weight_f32(here, "bits_sign", &sdims, s)).transpose()?;
                    Ok((bits, sign))
                }
            }
        };
        let (bits_a, sign_a) = as_ids(self, a, "bits_a")?;
        let (bits_b, sign_b) = as_ids(self, b, "bits_b")?;
        let r = self.binary_op(bits_a, bits_b, f)?;
        let powers: Vec<f32> = (0..l).map(|i| 2f32.powi(i as i32)).collect();
        let powers = self.weight_f32(here, "bit_weights", &[l as usize], powers)?;
        let weighted = self.binary_op(r, powers, BinaryOp::Mul)?;
        let rank = self.b.shape_of(weighted).map(|s| s.dims().len()).unwrap_or(ra.max(rb) + 1);
        let axis = rank.saturating_sub(1) as u32;
        let mut y = self.b.op(|y| Op::Reduce(Reduce { x: weighted, op: ReduceOp::Sum, axis, keep_dims: false, y }))?;
        if let (Some(sa), Some(sb)) = (sign_a, sign_b) {
            let s = self.binary_op(sa, sb, f)?;
            let low = self.scalar(2f64.powi(l as i32) as f32)?;
            let s = self.binary_op(s, low, BinaryOp::Mul)?;
            y = self.binary_op(y, s, BinaryOp::Sub)?;
        }
        Ok(y)
    }
}
