//! Integer bit operations on 32- and 64-bit integer types over their whole range: the values
//! held as byte limbs (`kestrel_rt_format::limbs`: a trailing axis of 8 f32 values, each byte of
//! the 64-bit two's-complement value, least significant first), on which every step is exact in
//! f32.
//!
//! - A value enters the limb form from a graph input fed as limbs, from a constant (its integers
//!   split at conversion time), or from an f32 activation (`floor(x / 2^8k) mod 256`, exact for
//!   any integral f32).
//! - And, or, xor: each limb's 8 bits as one more trailing axis (`floor(l / 2^i) mod 2`), combined
//!   bit by bit (`·`, `max`, `≠`) and summed back with their weights.
//! - Not: `255 − l` on the type's bytes (all 8 for signed types: sign extension is kept).
//! - Shifts: the 64 bits as a trailing axis, through a barrel shifter: the amount's 6 binary
//!   digits, each selecting a fixed shift by 2^k (a `Slice` placed at an offset of a zero-filled
//!   output; right shifts of signed types fill with the sign). An amount outside `0..w` gives 0
//!   (−1 for a negative value shifted right), as the narrower lowering does. Left shifts wrap to
//!   the type's width (two's complement).
//! - A limb value read by any other op is read as f32 (`Σ l_k·2^8k` when it lies in
//!   `-2^24..2^24`, NaN beyond: never a rounded integer).
//!
//! Narrower types (8 and 16 bits, bool) keep the f32 lowering of `bits.rs`, exact for them.

use super::{f32s, Lowerer, Res, Val};
use kestrel_rt_format::limbs::LIMBS;
use kestrel_rt_format::ops::{BinaryOp, Op, Reduce, ReduceOp, Slice, TensorId, Unary, UnaryOp};
use std::collections::HashMap;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;

/// Bits per limb.
const LIMB_BITS: usize = 8;
/// Bits of the whole value.
const BITS: usize = LIMBS * LIMB_BITS;

/// A wide integer bit operation: its tract name, the type's width and signedness.
pub(crate) struct WideOp {
    pub name: String,
    pub width: u32,
    pub signed: bool,
}

/// Whether `node` is an integer bit operation on a 32- or 64-bit type (lowered on limbs).
pub(crate) fn wide_bit_op(model: &TypedModel, node: &TypedNode) -> Option<WideOp> {
    let name = if let Some(op) = node.op_as::<TypedBinOp>() {
        op.0.name().to_string()
    } else if let Some(op) = node.op_as::<ElementWiseOp>() {
        op.0.name().to_string()
    } else {
        return None;
    };
    if !matches!(name.as_str(), "BitAnd" | "BitOr" | "BitXor" | "ShiftLeft" | "ShiftRight" | "BitNot") {
        return None;
    }
    let dt = model.outlet_fact(*node.inputs.first()?).ok()?.datum_type;
    let (width, signed) = wide_type(dt)?;
    Some(WideOp { name, width, signed })
}

/// The width and signedness of the integer types held as limbs.
pub(crate) fn wide_type(dt: DatumType) -> Option<(u32, bool)> {
    match dt {
        DatumType::I32 => Some((32, true)),
        DatumType::I64 => Some((64, true)),
        DatumType::U32 => Some((32, false)),
        DatumType::U64 => Some((64, false)),
        _ => None,
    }
}

/// Whether a graph input is read by a wide bit operation, directly or through axis changes
/// (the broadcast of a lower-rank operand): it is then fed as limbs.
pub(crate) fn feeds_wide_op(model: &TypedModel, outlet: OutletId) -> bool {
    let mut stack = vec![outlet];
    let mut seen = std::collections::HashSet::new();
    while let Some(o) = stack.pop() {
        for i in model.outlet_successors(o) {
            let node = model.node(i.node);
            if wide_bit_op(model, node).is_some() {
                return true;
            }
            if node.op_is::<AxisOp>() && seen.insert(node.id) {
                stack.push(OutletId::new(node.id, 0));
            }
        }
    }
    false
}

/// Whether `node` is lowered on limbs: a wide bit operation, or an axis change of a limb value.
pub(crate) fn on_limbs(model: &TypedModel, node: &TypedNode, wide: &HashMap<OutletId, (TensorId, Vec<usize>)>) -> bool {
    wide_bit_op(model, node).is_some()
        || (node.op_is::<AxisOp>() && node.inputs.first().is_some_and(|i| wide.contains_key(i)))
}

/// A constant's integers as 64-bit two's complement (`u64` as its bit pattern).
fn const_ints(t: &Tensor) -> Option<Vec<i64>> {
    let plain = t.try_as_plain_ram().ok()?;
    match t.datum_type() {
        DatumType::U64 => plain.as_slice::<u64>().ok().map(|s| s.iter().map(|&v| v as i64).collect()),
        DatumType::Bool => plain.as_slice::<bool>().ok().map(|s| s.iter().map(|&v| i64::from(v)).collect()),
        dt if dt.is_integer() => {
            let c = t.cast_to::<i64>().ok()?;
            let v = c.try_as_plain_ram().ok()?.as_slice::<i64>().ok()?.to_vec();
            Some(v)
        }
        // Integral floats (a folded cast) are taken as they are.
        _ => f32s(t).ok().filter(|v| v.iter().all(|x| x.fract() == 0.0)).map(|v| v.iter().map(|&x| x as i64).collect()),
    }
}

/// A constant's shape as a weight: its leading 1-axes dropped (numpy broadcasting).
fn weight_dims(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().skip_while(|&d| d == 1).collect()
}

/// An operand's bits: an activation `[.., 8, 8]` or a constant weight of the same layout.
struct WideBits(TensorId);

impl Lowerer<'_> {
    fn here(&self) -> OutletId {
        OutletId::new(self.node, 0)
    }

    fn wconst(&mut self, usage: &'static str, dims: &[usize], v: Vec<f32>) -> Res<TensorId> {
        let here = self.here();
        self.weight_f32(here, usage, dims, v)
    }

    fn rank_of(&self, id: TensorId) -> Res<usize> {
        self.b.shape_of(id).map(|s| s.dims().len()).ok_or_else(|| self.bad("a known tensor", format!("tensor {id}")))
    }

    fn unary_op(&mut self, x: TensorId, op: UnaryOp) -> Res<TensorId> {
        Ok(self.b.op(|y| Op::Unary(Unary { x, op, y }))?)
    }

    /// Sum over the last axis (dropped).
    fn sum_last(&mut self, x: TensorId) -> Res<TensorId> {
        let axis = (self.rank_of(x)? - 1) as u32;
        Ok(self.b.op(|y| Op::Reduce(Reduce { x, op: ReduceOp::Sum, axis, keep_dims: false, y }))?)
    }

    /// `count` elements of the last axis from `start`, placed at `offset` of a zero-filled axis
    /// of `len`.
    fn slice_last(&mut self, x: TensorId, start: u32, count: u32, offset: u32, len: u32) -> Res<TensorId> {
        let axis = (self.rank_of(x)? - 1) as u32;
        Ok(self.b.op(|y| Op::Slice(Slice { x, axis, start, step: 1, count, offset, len, y }))?)
    }

    /// Lowers an integer bit operation on a 32- or 64-bit type, or an axis change of a limb
    /// value; `Ok(false)` for anything else.
    pub(super) fn try_wide_bits(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if let Some(op) = node.op_as::<AxisOp>() {
            let Some((l, shape)) = self.wide.get(&node.inputs[0]).cloned() else { return Ok(false) };
            let out = self.out_shape()?;
            let with = |s: &[usize]| -> Vec<usize> { s.iter().copied().chain([LIMBS]).collect() };
            let y = match op {
                AxisOp::Move(from, to) => {
                    // The limbs stay last.
                    let mut perm: Vec<usize> = (0..=shape.len()).collect();
                    let a = perm.remove(*from);
                    perm.insert(*to, a);
                    self.transpose(l, &with(&shape), &perm)?.0
                }
                _ => self.reshape(l, &with(&shape), &with(&out))?,
            };
            self.wide.insert(self.here(), (y, out));
            return Ok(true);
        }
        let Some(op) = wide_bit_op(self.model, node) else { return Ok(false) };
        let out = self.out_shape()?;
        let y = match op.name.as_str() {
            "BitNot" => {
                let (l, _) = self.wide_act(node.inputs[0])?;
                let bytes = if op.signed { LIMBS } else { op.width as usize / LIMB_BITS };
                let top: Vec<f32> = (0..LIMBS).map(|k| if k < bytes { 255.0 } else { 0.0 }).collect();
                let top = self.wconst("limbs_not", &[LIMBS], top)?;
                self.binary_op(top, l, BinaryOp::Sub)?
            }
            "ShiftLeft" | "ShiftRight" => self.wide_shift(op.name == "ShiftLeft", op.width, op.signed)?,
            name => {
                let f = match name {
                    "BitAnd" => BinaryOp::Mul,
                    "BitOr" => BinaryOp::Max,
                    _ => BinaryOp::NotEqual,
                };
                let WideBits(a) = self.wide_bits(node.inputs[0])?;
                let WideBits(b) = self.wide_bits(node.inputs[1])?;
                let r = self.binary_op(a, b, f)?;
                self.limbs_of_bits(r)?
            }
        };
        let want: Vec<usize> = out.iter().copied().chain([LIMBS]).collect();
        let y = self.reshape_to(y, &want)?;
        self.wide.insert(self.here(), (y, out));
        self.count_fused("integer-bits-limbs");
        Ok(true)
    }

    /// An operand as a limb activation `[shape.., 8]` and its logical shape.
    fn wide_act(&mut self, o: OutletId) -> Res<(TensorId, Vec<usize>)> {
        if let Some((id, shape)) = self.wide.get(&o) {
            return Ok((*id, shape.clone()));
        }
        match self.val(o)? {
            Val::Const(t) => {
                let v =
                    const_ints(&t).ok_or_else(|| self.bad("an integer constant", format!("{:?}", t.datum_type())))?;
                let shape = t.shape().to_vec();
                let mut dims = weight_dims(&shape);
                dims.push(LIMBS);
                let limbs: Vec<f32> = v.iter().flat_map(|&x| kestrel_rt_format::limbs::encode(x)).collect();
                let w = self.wconst("limbs_constant", &dims, limbs)?;
                // An activation (the shifts slice it): the constant plus a zero, as
                // `output_act` makes a constant output.
                let z = self.wconst("zero", &[1], vec![0.0])?;
                let y = self.binary_op(w, z, BinaryOp::Add)?;
                Ok((y, shape))
            }
            Val::Act { .. } => {
                let (x, shape) = self.act(o)?;
                let l = self.limbs_of_value(x, &shape)?;
                Ok((l, shape))
            }
        }
    }

    /// An operand's bits `[.., 8, 8]` (limb, bit), as an activation or a constant weight.
    fn wide_bits(&mut self, o: OutletId) -> Res<WideBits> {
        if !self.wide.contains_key(&o) {
            if let Val::Const(t) = self.val(o)? {
                let v =
                    const_ints(&t).ok_or_else(|| self.bad("an integer constant", format!("{:?}", t.datum_type())))?;
                let mut dims = weight_dims(t.shape());
                dims.extend([LIMBS, LIMB_BITS]);
                let bits: Vec<f32> =
                    v.iter().flat_map(|&x| (0..BITS).map(move |j| ((x as u64 >> j) & 1) as f32)).collect();
                return Ok(WideBits(self.wconst("limbs_bits", &dims, bits)?));
            }
        }
        let (l, _) = self.wide_act(o)?;
        Ok(WideBits(self.bits_of_limbs(l)?))
    }

    /// `[.., 8]` limbs to `[.., 8, 8]` bits: `floor(l / 2^i) mod 2`.
    fn bits_of_limbs(&mut self, l: TensorId) -> Res<TensorId> {
        let dims = self.dims_of(l);
        let col: Vec<usize> = dims.iter().copied().chain([1]).collect();
        let c = self.reshape(l, &dims, &col)?;
        self.binary_digits(c, LIMB_BITS)
    }

    /// The low `n` binary digits of non-negative integers `[.., 1]` as a last axis `[.., n]`:
    /// `floor(x / 2^i) mod 2` (exact: scalings by powers of two and floors).
    fn binary_digits(&mut self, x: TensorId, n: usize) -> Res<TensorId> {
        let inv: Vec<f32> = (0..n).map(|i| 0.5f32.powi(i as i32)).collect();
        let inv = self.wconst("binary_digit_scales", &[n], inv)?;
        let q = self.binary_op(x, inv, BinaryOp::Mul)?;
        let q = self.unary_op(q, UnaryOp::Floor)?;
        let two = self.wconst("two", &[1], vec![2.0])?;
        self.binary_op(q, two, BinaryOp::Fmod)
    }

    /// `[.., 8, 8]` bits back to `[.., 8]` limbs.
    fn limbs_of_bits(&mut self, bits: TensorId) -> Res<TensorId> {
        let w: Vec<f32> = (0..LIMB_BITS).map(|i| 2f32.powi(i as i32)).collect();
        let w = self.wconst("limb_bit_weights", &[LIMB_BITS], w)?;
        let r = self.binary_op(bits, w, BinaryOp::Mul)?;
        self.sum_last(r)
    }

    /// An integral f32 activation `[shape..]` as limbs `[shape.., 8]`: `q_k = floor(x / 2^8k)`,
    /// `l_k = q_k − 256·floor(q_k / 256)` (exact: scalings by powers of two and floors).
    fn limbs_of_value(&mut self, x: TensorId, shape: &[usize]) -> Res<TensorId> {
        let col: Vec<usize> = shape.iter().copied().chain([1]).collect();
        let c = self.reshape(x, shape, &col)?;
        let inv: Vec<f32> = (0..LIMBS).map(|k| 2f32.powi(-8 * k as i32)).collect();
        let inv = self.wconst("limb_scales", &[LIMBS], inv)?;
        let q = self.binary_op(c, inv, BinaryOp::Mul)?;
        let q = self.unary_op(q, UnaryOp::Floor)?;
        let down = self.wconst("limb_down", &[1], vec![1.0 / 256.0])?;
        let hi = self.binary_op(q, down, BinaryOp::Mul)?;
        let hi = self.unary_op(hi, UnaryOp::Floor)?;
        let up = self.wconst("limb_up", &[1], vec![256.0])?;
        let hi = self.binary_op(hi, up, BinaryOp::Mul)?;
        self.binary_op(q, hi, BinaryOp::Sub)
    }

    /// A limb value's low three bytes as a number (`Σ_{k<3} l_k·2^8k`, exact) and the sum of
    /// its five high bytes (0 for a small non-negative value, 5·255 for a small negative one).
    fn low_and_high(&mut self, l: TensorId) -> Res<(TensorId, TensorId)> {
        let low = self.wconst("limb_low_weights", &[LIMBS], vec![1.0, 256.0, 65536.0, 0.0, 0.0, 0.0, 0.0, 0.0])?;
        let low = self.binary_op(l, low, BinaryOp::Mul)?;
        let low = self.sum_last(low)?;
        let high = self.wconst("limb_high_mask", &[LIMBS], vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])?;
        let high = self.binary_op(l, high, BinaryOp::Mul)?;
        let high = self.sum_last(high)?;
        Ok((low, high))
    }

    /// A limb value `[shape.., 8]` as f32 values `[shape..]`: exact in `-2^24..2^24`, NaN
    /// beyond (never a rounded integer).
    fn value_of_limbs(&mut self, l: TensorId, signed: bool) -> Res<TensorId> {
        let (low, high) = self.low_and_high(l)?;
        let zero = self.wconst("zero", &[1], vec![0.0])?;
        let mut ok = self.binary_op(high, zero, BinaryOp::Equal)?;
        let mut v = low;
        if signed {
            // Bytes 3..8 all 255: a negative value of at most 24 bits, low − 2^24.
            let full = self.wconst("limb_high_full", &[1], vec![5.0 * 255.0])?;
            let neg = self.binary_op(high, full, BinaryOp::Equal)?;
            let off = self.wconst("limb_sign_offset", &[1], vec![16_777_216.0])?;
            let off = self.binary_op(neg, off, BinaryOp::Mul)?;
            v = self.binary_op(low, off, BinaryOp::Sub)?;
            ok = self.binary_op(ok, neg, BinaryOp::Or)?;
        }
        let here = self.here();
        let nan = self.weight_elementwise(here, "limb_not_exact", &[1], vec![f32::NAN])?;
        let kept = self.binary_op(v, ok, BinaryOp::When)?;
        let lost = self.binary_op(nan, ok, BinaryOp::Unless)?;
        self.binary_op(kept, lost, BinaryOp::Add)
    }

    /// A constant graph output of integers f32 cannot all hold exactly (beyond ±2^24: a type's
    /// extreme, a hash constant) as a limb activation `[shape.., 8]`; `None` for any other.
    pub(crate) fn limbs_constant_output(&mut self, o: OutletId) -> Res<Option<TensorId>> {
        let Val::Const(t) = self.val(o)? else { return Ok(None) };
        if !t.datum_type().is_integer() || t.datum_type() == DatumType::Bool {
            return Ok(None);
        }
        let Some(v) = const_ints(&t) else { return Ok(None) };
        let unsigned = t.datum_type() == DatumType::U64;
        let exact = |x: i64| if unsigned { (x as u64) <= 1 << 24 } else { (-(1 << 24)..=1 << 24).contains(&x) };
        if v.iter().all(|&x| exact(x)) {
            return Ok(None);
        }
        let node = self.node;
        self.node = o.node;
        let dims: Vec<usize> = t.shape().iter().copied().chain([LIMBS]).collect();
        let limbs: Vec<f32> = v.iter().flat_map(|&x| kestrel_rt_format::limbs::encode(x)).collect();
        let made = self.wconst("limbs_constant_output", &dims, limbs).and_then(|w| {
            let z = self.wconst("zero", &[1], vec![0.0])?;
            self.binary_op(w, z, BinaryOp::Add)
        });
        self.node = node;
        made.map(Some)
    }

    /// Gives a limb value read by an op other than a wide bit operation its f32 form (once).
    pub(super) fn value_of_wide(&mut self, o: OutletId) -> Res<()> {
        let Some((l, shape)) = self.wide.get(&o).cloned() else { return Ok(()) };
        let dt = self.model.outlet_fact(o).map_err(|e| self.bad("a typed value", format!("{e}")))?.datum_type;
        let signed = wide_type(dt).is_none_or(|(_, s)| s);
        let v = self.value_of_limbs(l, signed)?;
        self.set_input(o, Val::Act { id: v, shape, int: false });
        let key = "integers of 32- and 64-bit bit operations";
        if !self.notices.iter().any(|n| n.starts_with(key)) {
            let name = &self.model.node(self.node).name;
            self.notices.push(format!(
                "{key} are read as f32 values by other ops (node `{name}` and any others): exact in \
                 -2^24..2^24, NaN beyond"
            ));
        }
        Ok(())
    }

    /// `a << b` or `a >> b` on a 32- or 64-bit type, on the value's 64 bits.
    fn wide_shift(&mut self, left: bool, w: u32, signed: bool) -> Res<TensorId> {
        let node = self.model.node(self.node);
        let (l, _) = self.wide_act(node.inputs[0])?;
        let (digits, valid) = self.shift_amount(node.inputs[1], w)?;
        let bits = self.bits_of_limbs(l)?;
        let dims = self.dims_of(bits);
        let flat: Vec<usize> = dims[..dims.len() - 2].iter().copied().chain([BITS]).collect();
        let mut x = self.reshape(bits, &dims, &flat)?;
        let sign = if signed && !left { Some(self.slice_last(x, (BITS - 1) as u32, 1, 0, 1)?) } else { None };
        for (k, d) in digits.into_iter().enumerate() {
            let t = 1u32 << k;
            let n = BITS as u32 - t;
            let mut shifted = if left {
                self.slice_last(x, 0, n, t, BITS as u32)?
            } else {
                self.slice_last(x, t, n, 0, BITS as u32)?
            };
            if let Some(s) = sign {
                let fill: Vec<f32> = (0..BITS).map(|j| f32::from(j >= n as usize)).collect();
                let fill = self.wconst("shift_sign_fill", &[BITS], fill)?;
                let fill = self.binary_op(s, fill, BinaryOp::Mul)?;
                shifted = self.binary_op(shifted, fill, BinaryOp::Add)?;
            }
            let step = self.binary_op(shifted, x, BinaryOp::Sub)?;
            let step = self.binary_op(step, d, BinaryOp::Mul)?;
            x = self.binary_op(x, step, BinaryOp::Add)?;
        }
        // An amount outside 0..w: 0, or the sign for a signed value shifted right.
        let kept = self.binary_op(x, valid, BinaryOp::When)?;
        x = match sign {
            Some(s) => {
                let fill = self.binary_op(s, valid, BinaryOp::Unless)?;
                self.binary_op(kept, fill, BinaryOp::Add)?
            }
            None => kept,
        };
        if left && (w as usize) < BITS {
            // Wrapped to w bits: the bits above w are the sign bit (signed) or 0.
            let low: Vec<f32> = (0..BITS).map(|j| f32::from(j < w as usize)).collect();
            let mask = self.wconst("shift_width_mask", &[BITS], low)?;
            let kept = self.binary_op(x, mask, BinaryOp::Mul)?;
            x = if signed {
                let top = self.slice_last(x, w - 1, 1, 0, 1)?;
                let high: Vec<f32> = (0..BITS).map(|j| f32::from(j >= w as usize)).collect();
                let high = self.wconst("shift_width_fill", &[BITS], high)?;
                let ext = self.binary_op(top, high, BinaryOp::Mul)?;
                self.binary_op(kept, ext, BinaryOp::Add)?
            } else {
                kept
            };
        }
        let xd = self.dims_of(x);
        let split: Vec<usize> = xd[..xd.len() - 1].iter().copied().chain([LIMBS, LIMB_BITS]).collect();
        let x = self.reshape(x, &xd, &split)?;
        self.limbs_of_bits(x)
    }

    /// A shift amount as its 6 binary digits and whether it lies in `0..w`, each `[.., 1]` (to
    /// broadcast against the 64 bits), 0 where it does not.
    fn shift_amount(&mut self, o: OutletId, w: u32) -> Res<(Vec<TensorId>, TensorId)> {
        const DIGITS: usize = 6;
        if !self.wide.contains_key(&o) {
            if let Val::Const(t) = self.val(o)? {
                let v =
                    const_ints(&t).ok_or_else(|| self.bad("an integer constant", format!("{:?}", t.datum_type())))?;
                let mut dims = weight_dims(t.shape());
                dims.push(1);
                let ok: Vec<bool> = v.iter().map(|&b| (0..i64::from(w)).contains(&b)).collect();
                let valid: Vec<f32> = ok.iter().map(|&k| f32::from(k)).collect();
                let valid = self.wconst("shift_valid", &dims, valid)?;
                let mut digits = Vec::with_capacity(DIGITS);
                for k in 0..DIGITS {
                    let d: Vec<f32> =
                        v.iter().zip(&ok).map(|(&b, &k_ok)| f32::from(k_ok && (b >> k) & 1 == 1)).collect();
                    digits.push(self.wconst("shift_digit", &dims, d)?);
                }
                return Ok((digits, valid));
            }
        }
        // The amount as an f32 value where it is small (0..2^24), and whether it lies in 0..w.
        let (amount, shape) = match self.wide.get(&o).cloned() {
            Some((l, shape)) => {
                let (low, high) = self.low_and_high(l)?;
                // Any byte above the third set: a huge (or negative) amount, out of range.
                let big = self.wconst("shift_out_of_range", &[1], vec![16_777_216.0])?;
                let high = self.binary_op(high, big, BinaryOp::Mul)?;
                (self.binary_op(low, high, BinaryOp::Add)?, shape)
            }
            None => self.act(o)?,
        };
        let zero = self.wconst("zero", &[1], vec![0.0])?;
        let width = self.wconst("shift_width", &[1], vec![w as f32])?;
        let lo = self.binary_op(amount, zero, BinaryOp::GreaterEq)?;
        let hi = self.binary_op(amount, width, BinaryOp::Less)?;
        let valid = self.binary_op(lo, hi, BinaryOp::And)?;
        let amount = self.binary_op(amount, valid, BinaryOp::When)?;
        let col: Vec<usize> = shape.iter().copied().chain([1]).collect();
        let amount = self.reshape(amount, &shape, &col)?;
        let valid = self.reshape(valid, &shape, &col)?;
        let all = self.binary_digits(amount, DIGITS)?;
        let mut digits = Vec::with_capacity(DIGITS);
        for k in 0..DIGITS {
            digits.push(self.slice_last(all, k as u32, 1, 0, 1)?);
        }
        Ok((digits, valid))
    }
}
