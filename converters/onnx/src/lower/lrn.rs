//! ONNX LRN (AlexNet, Inception v1, ZFNet; tract-onnx-opl's `Lrn`), exactly as the definition
//! composes it: `y = x / (bias + α/size · Σ x²)^β`, the sum over the window of channels
//! `[c − ⌊(size−1)/2⌋, c + ⌈(size−1)/2⌉]` clipped to the channels, taken as one `Dense` along the
//! channel axis (axis 1) with a constant 0/1 band weight `[C, C]` over the squares.

use super::{zeros, Lowerer, Res};
use kestrel_rt_format::ops::{BinaryOp, Op, Unary, UnaryOp};
use tract_onnx::prelude::*;
use tract_onnx_opl::lrn::Lrn;

impl Lowerer<'_> {
    /// Lowers `Lrn`; `Ok(false)` for anything else.
    pub(super) fn try_lrn(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<Lrn>() else { return Ok(false) };
        let (x, xs) = self.act(node.inputs[0])?;
        if xs.len() < 2 || op.size == 0 {
            return Err(self.bad("an input [N, C, …] and a window of at least 1", format!("{xs:?}, size {}", op.size)));
        }
        let c = xs[1];
        let (below, above) = ((op.size - 1) / 2, (op.size - 1).div_ceil(2));
        let mut band = zeros([c, c], "LRN's channel window")?;
        for out in 0..c {
            for src in out.saturating_sub(below)..=(out + above).min(c - 1) {
                band[out * c + src] = 1.0;
            }
        }
        let here = OutletId::new(self.node, 0);
        let band = self.weight_f32(here, "lrn_window", &[c, c], band)?;
        let sq = self.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Square, y }))?;
        let (sum, ss) = self.dense_along(sq, &xs, 1, band, c)?;
        let sum = self.reshape(sum, &ss, &xs)?;
        let scale = self.weight_f32(here, "lrn_scale", &[1], vec![op.alpha / op.size as f32])?;
        let bias = self.weight_f32(here, "lrn_bias", &[1], vec![op.bias])?;
        let beta = self.weight_f32(here, "lrn_beta", &[1], vec![op.beta])?;
        let t = self.binary_op(sum, scale, BinaryOp::Mul)?;
        let t = self.binary_op(t, bias, BinaryOp::Add)?;
        let d = self.binary_op(t, beta, BinaryOp::Pow)?;
        let y = self.binary_op(x, d, BinaryOp::Div)?;
        self.out(y, xs);
        self.count_fused("lrn");
        Ok(true)
    }
}
