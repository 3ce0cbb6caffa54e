//! Quantised ONNX graphs (QDQ and QOperator formats, as onnxruntime's quantisation tools write
//! them) computed in f32 with the integers' exact values: tract's `QuantizeLinearU8/I8`
//! (`clamp(round_half_even(x · 1/scale) + zero_point)`), `DequantizeLinearF32`
//! (`(x − zero_point) · scale`) and its quantised `EinSum` (QLinearMatMul, MatMulInteger,
//! QLinearConv: `round((Σ a'·b' + bias·sa·sb) / sc + c0)` clamped to the output type, with
//! `a' = sa·(a − a0)`, `b' = sb·(b − b0)`, per-tensor or per-axis parameters), each as the same
//! arithmetic with generic ops. Integer tensors are f32 values (exact to 2^24, as everywhere).
//! The quantisation parameters of QuantizeLinear/DequantizeLinear must be constants; those of
//! the quantised products and convolutions may be computed at run time (the standard's test
//! cases feed them as inputs). DynamicQuantizeLinear computes its own from the data's range
//! (reductions over the whole tensor, then the same element-wise arithmetic).

use super::linear::Operand;
use super::{f32s, Lowerer, Res, Val};
use kestrel_rt_format::ops::{BinaryOp, Op, Reduce, ReduceOp, TensorId, Unary, UnaryOp};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::InOut;
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat};
use tract_onnx::tract_core::ops::einsum::EinSum;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_core::ops::quant::{DequantizeLinearF32, QuantizeLinearI8, QuantizeLinearU8};

/// A quantisation parameter: constant values, or a tensor and its logical shape.
enum QParam {
    Const(Vec<f32>),
    Act(TensorId, Vec<usize>),
}

impl Lowerer<'_> {
    /// Lowers tract's quantise / dequantise ops; `Ok(false)` for anything else.
    pub(super) fn try_quant(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if let Some(op) = node.op_as::<DequantizeLinearF32>() {
            let (x, shape) = self.act(node.inputs[0])?;
            let zp = self.scalar_weight(op.zero_point as f32)?;
            let scale = self.scalar_weight(op.scale)?;
            let d = self.binary_op(x, zp, BinaryOp::Sub)?;
            let y = self.binary_op(d, scale, BinaryOp::Mul)?;
            self.out(y, shape);
            self.count_fused("dequantize-linear");
            return Ok(true);
        }
        let Some(ew) = node.op_as::<ElementWiseOp>() else { return Ok(false) };
        let (inv, zp, lo, hi) = if let Some(q) = ew.0.downcast_ref::<QuantizeLinearU8>() {
            (q.scale, q.zero_point as f32, 0.0, 255.0)
        } else if let Some(q) = ew.0.downcast_ref::<QuantizeLinearI8>() {
            (q.scale, q.zero_point as f32, -128.0, 127.0)
        } else {
            return Ok(false);
        };
        let (x, shape) = self.act(node.inputs[0])?;
        let s = self.scalar_weight(inv)?;
        let y = self.binary_op(x, s, BinaryOp::Mul)?;
        let y = self.requantise(y, None, zp, lo, hi)?;
        self.out(y, shape);
        self.count_fused("quantize-linear");
        Ok(true)
    }

    /// Lowers tract-onnx's `DynamicQuantizeLinearU8` (ONNX DynamicQuantizeLinear: outputs y,
    /// y_scale, y_zero_point); `Ok(false)` for anything else. As onnxruntime computes it, with
    /// the data's range widened to hold 0, `lo = min(0, min x)`, `hi = max(0, max x)`:
    /// `y_scale = (hi − lo) / 255` (1 when `hi = lo`, an all-zero input, where the division
    /// would give 0 and every quotient below NaN), `y_zero_point = clamp(round_half_even(−lo /
    /// y_scale), 0, 255)`, `y = clamp(round_half_even(x / y_scale) + y_zero_point, 0, 255)`:
    /// the same f32 operations in the same order, so the results are those of onnxruntime
    /// and tract bit for bit (tract leaves the all-zero input's scale 0).
    pub(super) fn try_dynamic_quantize(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        // tract-onnx's op type is private: known by its name and its three outputs.
        if node.op.name() != "DynamicQuantizeLinearU8" {
            return Ok(false);
        }
        if node.inputs.len() != 1 || node.outputs.len() != 3 {
            return Err(self.bad(
                "one input and three outputs",
                format!("{} inputs, {} outputs", node.inputs.len(), node.outputs.len()),
            ));
        }
        let (x, xs) = self.act(node.inputs[0])?;
        let n: usize = xs.iter().product();
        let flat = self.reshape(x, &xs, &[n])?;
        let reduce = |l: &mut Self, op: ReduceOp| -> Res<TensorId> {
            Ok(l.b.op(|y| Op::Reduce(Reduce { x: flat, op, axis: 0, keep_dims: true, y }))?)
        };
        let (mx, mn) = (reduce(self, ReduceOp::Max)?, reduce(self, ReduceOp::Min)?);
        let zero = self.scalar_weight(0.0)?;
        let hi = self.binary_op(mx, zero, BinaryOp::Max)?;
        let lo = self.binary_op(mn, zero, BinaryOp::Min)?;
        let range = self.binary_op(hi, lo, BinaryOp::Sub)?;
        let q = self.scalar_weight(255.0)?;
        let scale = self.binary_op(range, q, BinaryOp::Div)?;
        // + 1 exactly where the range is 0 (the scale is then 0 + 1).
        let empty = self.binary_op(range, zero, BinaryOp::Equal)?;
        let scale = self.binary_op(scale, empty, BinaryOp::Add)?;
        let neg = self.b.op(|y| Op::Unary(Unary { x: lo, op: UnaryOp::Neg, y }))?;
        let zp = self.binary_op(neg, scale, BinaryOp::Div)?;
        let zp = self.requantise(zp, None, 0.0, 0.0, 255.0)?;
        let y = self.binary_op(x, scale, BinaryOp::Div)?;
        let y = self.requantise(y, Some(zp), 0.0, 0.0, 255.0)?;
        self.out(y, xs);
        for (slot, t) in [(1, scale), (2, zp)] {
            let v = self.reshape(t, &[1], &[])?;
            self.vals.insert(OutletId::new(self.node, slot), Val::Act { id: v, shape: Vec::new(), int: false });
        }
        self.count_fused("dynamic-quantize-linear");
        Ok(true)
    }

    /// An exact scalar f32 weight.
    fn scalar_weight(&mut self, v: f32) -> Res<TensorId> {
        self.weight_f32(OutletId::new(self.node, 0), "quantisation", &[1], vec![v])
    }

    /// `clamp(round_half_even(y) + zp, lo, hi)`; `zp_w` a per-axis zero point weight (else the
    /// scalar `zp`).
    fn requantise(&mut self, y: TensorId, zp_w: Option<TensorId>, zp: f32, lo: f32, hi: f32) -> Res<TensorId> {
        let r = self.b.op(|o| Op::Unary(Unary { x: y, op: UnaryOp::Round, y: o }))?;
        let z = match zp_w {
            Some(w) => w,
            None => self.scalar_weight(zp)?,
        };
        let r = self.binary_op(r, z, BinaryOp::Add)?;
        if lo.is_finite() {
            let l = self.scalar_weight(lo)?;
            let h = self.scalar_weight(hi)?;
            let r = self.binary_op(r, l, BinaryOp::Max)?;
            return self.binary_op(r, h, BinaryOp::Min);
        }
        Ok(r)
    }

    /// A quantisation parameter (input `slot`): constant values, or a tensor the graph feeds
    /// (the standard's test cases pass them as inputs).
    fn qparam(&mut self, slot: usize) -> Res<QParam> {
        let node = self.model.node(self.node);
        match self.val(node.inputs[slot])? {
            Val::Const(t) => Ok(QParam::Const(f32s(&t)?)),
            Val::Act { .. } => {
                let (x, xs) = self.act(node.inputs[slot])?;
                Ok(QParam::Act(x, xs))
            }
        }
    }

    /// The axis of `data` (an input or the output) a per-axis parameter in input `slot` runs
    /// along, as tract's reference places it.
    fn qparam_axis(&self, op: &EinSum, data: InOut, slot: usize) -> usize {
        op.axes.axis((InOut::In(slot), 0)).ok().and_then(|a| a.interface(data).first().copied()).unwrap_or(0)
    }

    /// `values` (1 or `shape[axis]` of them) broadcast over `shape` along `axis`.
    fn along(values: &[f32], shape: &[usize], axis: usize) -> Vec<f32> {
        let n: usize = shape.iter().product();
        if values.len() <= 1 {
            return vec![values.first().copied().unwrap_or(0.0); n];
        }
        let inner: usize = shape[axis + 1..].iter().product();
        (0..n).map(|e| values[(e / inner) % shape[axis]]).collect()
    }

    /// A parameter as a tensor broadcasting along `axis` of a tensor of rank `rank`: `[1]` for
    /// one value, else `[len, 1, …, 1]` (the trailing axes).
    fn qparam_weight(&mut self, p: &QParam, rank: usize, axis: usize) -> Res<TensorId> {
        let shape = |len: usize| -> Vec<usize> {
            if len <= 1 {
                vec![1]
            } else {
                std::iter::once(len).chain(std::iter::repeat_n(1, rank - axis - 1)).collect()
            }
        };
        match p {
            QParam::Const(values) => {
                let v = if values.is_empty() { vec![0.0] } else { values.clone() };
                self.weight_f32(OutletId::new(self.node, 0), "quantisation", &shape(v.len()), v)
            }
            QParam::Act(id, xs) => {
                let len: usize = xs.iter().product();
                self.reshape(*id, xs, &shape(len))
            }
        }
    }

    /// Operand `slot` (0 or 1) of a quantised einsum dequantised: `scale · (x − zero_point)`
    /// (parameters in inputs `zp_slot` and `zp_slot + 1`).
    fn dequantised(&mut self, op: &EinSum, slot: usize, zp_slot: usize) -> Res<Operand> {
        let node = self.model.node(self.node);
        let (zp, scale) = (self.qparam(zp_slot)?, self.qparam(zp_slot + 1)?);
        let o = node.inputs[slot];
        let (za, sa) =
            (self.qparam_axis(op, InOut::In(slot), zp_slot), self.qparam_axis(op, InOut::In(slot), zp_slot + 1));
        match (self.val(o)?, &zp, &scale) {
            (Val::Const(t), QParam::Const(zp), QParam::Const(scale)) => {
                let shape = t.shape().to_vec();
                let v = f32s(&t)?;
                let (z, s) = (Self::along(zp, &shape, za), Self::along(scale, &shape, sa));
                let d: Vec<f32> = v.iter().zip(z.iter().zip(&s)).map(|(&x, (&z, &s))| s * (x - z)).collect();
                let t = tract_onnx::prelude::tract_ndarray::ArrayD::from_shape_vec(shape, d)
                    .map_err(|e| self.bad("a dequantised constant", format!("{e}")))?
                    .into_tensor();
                Ok(Operand::Const(o, t.into_arc_tensor()))
            }
            (v, _, _) => {
                let (x, shape) = match v {
                    Val::Const(t) => {
                        let shape = t.shape().to_vec();
                        (self.weight_f32(o, "quantised_operand", &shape, f32s(&t)?)?, shape)
                    }
                    Val::Act { .. } => self.act(o)?,
                };
                let r = shape.len();
                let z = self.qparam_weight(&zp, r, za)?;
                let s = self.qparam_weight(&scale, r, sa)?;
                let d = self.binary_op(x, z, BinaryOp::Sub)?;
                Ok(Operand::Act(self.binary_op(d, s, BinaryOp::Mul)?, shape))
            }
        }
    }

    /// A quantised convolution (tract's `Conv` with quantisation parameters: QLinearConv,
    /// ConvInteger; inputs x, kernel, bias, x0, x_scale, k0, k_scale, y0, y_scale): the data
    /// dequantised as an activation, the kernel and the bias (scaled by x_scale·k_scale)
    /// dequantised at conversion (per output channel), the float convolution, then the
    /// requantisation. The kernel and its zero point and scale may be computed at run time
    /// (then the kernel is dequantised as an activation and convolved by the run-time-kernel
    /// path); the data scale and the bias scale the bias, so they are constants (a computed
    /// kernel scale only with a zero bias).
    pub(super) fn conv_q(&mut self, op: &Conv, qp: DatumType) -> Res<()> {
        let node = self.model.node(self.node);
        let ins: Vec<OutletId> = node.inputs.to_vec();
        if ins.len() != 9 {
            return Err(self.bad("a quantised convolution of 9 inputs", format!("{}", ins.len())));
        }
        if op.kernel_fmt != KernelFormat::OIHW {
            return Err(self.unsupported(&format!("a quantised convolution kernel in format {:?}", op.kernel_fmt)));
        }
        let konst = |l: &Self, slot: usize, what: &str| -> Res<Arc<Tensor>> {
            match l.val(ins[slot])? {
                Val::Const(t) => Ok(t),
                Val::Act { .. } => {
                    Err(l.unsupported(&format!("a quantised convolution's {what} computed at run time")))
                }
            }
        };
        let scalar = |l: &Self, slot: usize, what: &str| -> Res<f32> {
            let t: Arc<Tensor> = konst(l, slot, what)?;
            match f32s(&t)?.as_slice() {
                [v] => Ok(*v),
                v => Err(l.unsupported(&format!("a per-channel {what} ({} values)", v.len()))),
            }
        };
        // The data's and the output's parameters: scalars, constant or computed (the standard's
        // cases feed them as inputs); the data scale also scales the bias, so it is a constant.
        let xs = scalar(self, 4, "data scale")?;
        let tensor_of = |l: &mut Self, slot: usize, what: &str| -> Res<TensorId> {
            match l.val(ins[slot])? {
                Val::Const(_) => {
                    let v = scalar(l, slot, what)?;
                    l.scalar_weight(v)
                }
                Val::Act { .. } => {
                    let (t, ts) = l.act(ins[slot])?;
                    if ts.iter().product::<usize>() != 1 {
                        return Err(l.unsupported(&format!("a per-channel {what}")));
                    }
                    l.reshape(t, &ts, &[1])
                }
            }
        };
        let kshape = self.val(ins[1])?.shape();
        let o = *kshape.first().ok_or_else(|| self.bad("a kernel of rank ≥ 3", "a scalar".into()))?;
        let per_o: usize = kshape[1..].iter().product();
        let pick = |v: &[f32], i: usize| if v.len() > 1 { v[i] } else { v.first().copied().unwrap_or(0.0) };
        // The kernel's parameters: constants, or (scalar or per output channel) tensors computed
        // at run time, shaped [O, 1, …] to broadcast over the kernel.
        let pshape: Vec<usize> = std::iter::once(o).chain(std::iter::repeat_n(1, kshape.len() - 1)).collect();
        let kparam = |l: &mut Self, slot: usize, what: &str| -> Res<QParam> {
            match l.val(ins[slot])? {
                Val::Const(t) => {
                    let v = f32s(&t)?;
                    if v.len() > 1 && v.len() != o {
                        return Err(l.bad(&format!("a {what} of 1 or {o} values"), format!("{}", v.len())));
                    }
                    Ok(QParam::Const(v))
                }
                Val::Act { .. } => {
                    let (t, ts) = l.act(ins[slot])?;
                    let len: usize = ts.iter().product();
                    let to = match len {
                        1 => vec![1],
                        _ if len == o => pshape.clone(),
                        _ => return Err(l.bad(&format!("a {what} of 1 or {o} values"), format!("shape {ts:?}"))),
                    };
                    Ok(QParam::Act(l.reshape(t, &ts, &to)?, to))
                }
            }
        };
        let (k0, ks) = (kparam(self, 5, "kernel zero point")?, kparam(self, 6, "kernel scale")?);
        let as_tensor = |l: &Self, shape: Vec<usize>, v: Vec<f32>| -> Res<Arc<Tensor>> {
            Ok(tract_onnx::prelude::tract_ndarray::ArrayD::from_shape_vec(shape, v)
                .map_err(|e| l.bad("a dequantised constant", format!("{e}")))?
                .into_tensor()
                .into_arc_tensor())
        };
        // The kernel dequantised: at conversion when it and its parameters are constant, else as
        // an activation (a constant kernel with computed parameters becomes an exact weight).
        let kd = match (self.val(ins[1])?, &k0, &ks) {
            (Val::Const(kernel), QParam::Const(k0), QParam::Const(ks)) => {
                let v: Vec<f32> = f32s(&kernel)?
                    .iter()
                    .enumerate()
                    .map(|(e, &k)| pick(ks, e / per_o) * (k - pick(k0, e / per_o)))
                    .collect();
                Val::Const(as_tensor(self, kshape.clone(), v)?)
            }
            (kv, _, _) => {
                let k = match kv {
                    Val::Const(kernel) => self.weight_f32(ins[1], "quantised_kernel", &kshape, f32s(&kernel)?)?,
                    Val::Act { .. } => self.act(ins[1])?.0,
                };
                let param = |l: &mut Self, p: &QParam| -> Res<TensorId> {
                    match p {
                        QParam::Const(v) if v.len() > 1 => {
                            l.weight_f32(OutletId::new(l.node, 0), "quantisation", &pshape, v.to_vec())
                        }
                        QParam::Const(v) => l.scalar_weight(pick(v, 0)),
                        QParam::Act(t, _) => Ok(*t),
                    }
                };
                let z = param(self, &k0)?;
                let sc = param(self, &ks)?;
                let d = self.binary_op(k, z, BinaryOp::Sub)?;
                Val::Act { id: self.binary_op(d, sc, BinaryOp::Mul)?, shape: kshape.clone(), int: false }
            }
        };
        let bias_t = konst(self, 2, "bias")?;
        let bias = f32s(&bias_t)?;
        // The bias in the float convolution's units, bias·x_scale·k_scale: a constant, so a kernel
        // scale computed at run time only goes with a zero bias (ConvInteger has none).
        let bd: Vec<f32> = match &ks {
            QParam::Const(ks) => (0..o).map(|i| pick(&bias, i) * xs * pick(ks, i)).collect(),
            QParam::Act(..) if bias.iter().all(|&b| b == 0.0) => vec![0.0; o],
            QParam::Act(..) => {
                return Err(self.unsupported("a quantised convolution's bias with a kernel scale computed at run time"))
            }
        };
        let bd = as_tensor(self, vec![o], bd)?;
        // The data dequantised.
        let (x, shape) = self.act(ins[0])?;
        let z = tensor_of(self, 3, "data zero point")?;
        let s = self.scalar_weight(xs)?;
        let d = self.binary_op(x, z, BinaryOp::Sub)?;
        let xd = self.binary_op(d, s, BinaryOp::Mul)?;
        // The float convolution reads the dequantised operands in the inputs' places.
        let saved: Vec<(OutletId, Option<Val>)> = ins[..3].iter().map(|&i| (i, self.vals.get(&i).cloned())).collect();
        self.vals.insert(ins[0], Val::Act { id: xd, shape, int: false });
        self.vals.insert(ins[1], kd);
        self.vals.insert(ins[2], Val::Const(bd));
        self.quantised = true;
        let done = self.conv_float(op);
        self.quantised = false;
        for (i, v) in saved {
            match v {
                Some(v) => self.vals.insert(i, v),
                None => self.vals.remove(&i),
            };
        }
        done?;
        let (y, shape) = self.act(OutletId::new(self.node, 0))?;
        let s = tensor_of(self, 8, "output scale")?;
        let y = self.binary_op(y, s, BinaryOp::Div)?;
        let (lo, hi) = match qp.unquantized() {
            DatumType::I8 => (-128.0, 127.0),
            DatumType::U8 => (0.0, 255.0),
            _ => (f32::NEG_INFINITY, f32::INFINITY),
        };
        let y0 = tensor_of(self, 7, "output zero point")?;
        let y = self.requantise(y, Some(y0), 0.0, lo, hi)?;
        self.out(y, shape);
        self.count_fused("quantised-conv");
        Ok(())
    }

    /// A quantised einsum (9 inputs: A, B, bias, A0, Ascale, B0, Bscale, C0, Cscale; output type
    /// `qp`), as tract's reference defines it.
    pub(super) fn einsum_q(&mut self, op: &EinSum, qp: DatumType) -> Res<()> {
        let node = self.model.node(self.node);
        if node.inputs.len() != 9 {
            return Err(self.bad("a quantised einsum of 9 inputs", format!("{}", node.inputs.len())));
        }
        let a = self.dequantised(op, 0, 3)?;
        let b = self.dequantised(op, 1, 5)?;
        let (sa, sb) = (self.qparam(4)?, self.qparam(6)?);
        let (bias, c0, sc) = (self.qparam(2)?, self.qparam(7)?, self.qparam(8)?);
        self.einsum_of(op, [a, b], false)?;
        let here = OutletId::new(self.node, 0);
        let (y, shape) = self.act(here)?;
        let r = shape.len();
        let out = InOut::Out(0);
        // (y + bias·sa·sb) / sc + c0, rounded, clamped for 8-bit outputs.
        let mut y = y;
        let terms = [
            (&bias, self.qparam_axis(op, out, 2)),
            (&sa, self.qparam_axis(op, out, 4)),
            (&sb, self.qparam_axis(op, out, 6)),
        ];
        let zero_bias = matches!(&bias, QParam::Const(v) if v.iter().all(|&x| x == 0.0));
        if !zero_bias {
            if let (QParam::Const(b), QParam::Const(a), QParam::Const(s)) = (&bias, &sa, &sb) {
                let n = b.len().max(a.len()).max(s.len());
                let axis = terms.iter().find(|(p, _)| matches!(p, QParam::Const(v) if v.len() > 1)).map_or(0, |t| t.1);
                let pick = |v: &[f32], i: usize| if v.len() > 1 { v[i] } else { v.first().copied().unwrap_or(0.0) };
                let folded: Vec<f32> = (0..n).map(|i| pick(b, i) * pick(a, i) * pick(s, i)).collect();
                let w = self.qparam_weight(&QParam::Const(folded), r, axis)?;
                y = self.binary_op(y, w, BinaryOp::Add)?;
            } else {
                // bias·sa·sb from a computed term first (Kestrel computes no op on two weights).
                let first_act = terms.iter().position(|(p, _)| matches!(p, QParam::Act(..))).unwrap_or(0);
                let mut t = self.qparam_weight(terms[first_act].0, r, terms[first_act].1)?;
                for (i, (p, axis)) in terms.iter().enumerate() {
                    if i != first_act {
                        let w = self.qparam_weight(p, r, *axis)?;
                        t = self.binary_op(t, w, BinaryOp::Mul)?;
                    }
                }
                y = self.binary_op(y, t, BinaryOp::Add)?;
            }
        }
        let s = self.qparam_weight(&sc, r, self.qparam_axis(op, out, 8))?;
        y = self.binary_op(y, s, BinaryOp::Div)?;
        let zp = self.qparam_weight(&c0, r, self.qparam_axis(op, out, 7))?;
        let (lo, hi) = match qp.unquantized() {
            DatumType::I8 => (-128.0, 127.0),
            DatumType::U8 => (0.0, 255.0),
            _ => (f32::NEG_INFINITY, f32::INFINITY),
        };
        let y = self.requantise(y, Some(zp), 0.0, lo, hi)?;
        self.out(y, shape);
        self.count_fused("quantised-einsum");
        Ok(())
    }
}
