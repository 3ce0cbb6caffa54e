//! tract's `Fft` (ONNX DFT, forward and inverse, and the FFTs PyTorch exports for FNet-style
//! mixing): complex values as a last axis of 2 (real, imaginary), the transform along `axis` of
//! length N. The transform is linear in the 2N reals of a line, so it is one `Dense` with the
//! constant `[2N, 2N]` matrix of cos/sin terms (`e^{∓2πi·kn/N}`, computed in f64, stored f32)
//! applied to the line laid out `[…, N·2]` (the axis moved next to the pair). Unnormalised, as
//! tract's op (the importer divides an inverse by N after it). Its rounding is the Dense's, not
//! an FFT's: each output sums 2N products.

use super::{zeros, Lowerer, Res};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::fft::Fft;

impl Lowerer<'_> {
    /// Lowers tract's `Fft`; `Ok(false)` for anything else.
    pub(super) fn try_fft(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<Fft>() else { return Ok(false) };
        let (x, xs) = self.act(node.inputs[0])?;
        let r = xs.len();
        if r < 2 || xs[r - 1] != 2 || op.axis >= r - 1 {
            return Err(self.bad(
                "complex values as a last axis of 2, transformed along another",
                format!("{xs:?} along {}", op.axis),
            ));
        }
        let n = xs[op.axis];
        // W[(k, c'), (m, c)]: forward e^{−iθ}, inverse e^{+iθ}, θ = 2π·k·m/N.
        let sign = if op.inverse { 1.0 } else { -1.0 };
        let mut w = zeros([2 * n, 2 * n], "a DFT's matrix")?;
        for k in 0..n {
            for m in 0..n {
                let theta = 2.0 * std::f64::consts::PI * ((k * m) % n) as f64 / n as f64;
                let (c, s) = (theta.cos(), sign * theta.sin());
                // (a + ib)(c + is) = (ac − bs) + i(as + bc)
                w[(2 * k) * 2 * n + 2 * m] = c as f32;
                w[(2 * k) * 2 * n + 2 * m + 1] = -s as f32;
                w[(2 * k + 1) * 2 * n + 2 * m] = s as f32;
                w[(2 * k + 1) * 2 * n + 2 * m + 1] = c as f32;
            }
        }
        let w = self.weight_f32(OutletId::new(self.node, 0), "dft", &[2 * n, 2 * n], w)?;
        // [..., N, ..., 2] → [rest…, N, 2] → [rest…, 2N].
        let perm: Vec<usize> = (0..r - 1).filter(|&a| a != op.axis).chain([op.axis, r - 1]).collect();
        let (xt, ts) = self.transpose(x, &xs, &perm)?;
        let flat: Vec<usize> = ts[..r - 2].iter().copied().chain([2 * n]).collect();
        let xf = self.reshape(xt, &ts, &flat)?;
        let (y, ys) = self.dense_along(xf, &flat, r - 2, w, 2 * n)?;
        let y = self.reshape(y, &ys, &ts)?;
        let back: Vec<usize> = (0..r).map(|a| perm.iter().position(|&p| p == a).unwrap_or(a)).collect();
        let (y, ys) = self.transpose(y, &ts, &back)?;
        self.out(y, ys);
        self.count_fused("dft-as-dense");
        Ok(true)
    }
}
