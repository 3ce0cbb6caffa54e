//! tract's `Fft` (ONNX DFT, forward and inverse, and the FFTs PyTorch exports for FNet-style
//! mixing): complex values as a last axis of 2 (real, imaginary), the transform along `axis` of
//! length N. The transform is linear in the 2N reals of a line, so it is one `Dense` with the
//! constant `[2N, 2N]` matrix of cos/sin terms (`e^{∓2πi·kn/N}`, computed in f64, stored f32)
//! applied to the line laid out `[…, N·2]` (the axis moved next to the pair). Unnormalised, as
//! tract's op (the importer divides an inverse by N after it). Its rounding is the Dense's, not
//! an FFT's: each output sums 2N products.
//!
//! tract's `Stft` (ONNX STFT with a constant frame step and a constant window or frame length):
//! frames of N complex values every `stride` along `axis`, each scaled by the window (zero-padded
//! to N, centred, as tract's op) and transformed. Frame `f`'s bin `k` is
//! `Σ_m w_m·x[f·stride + m]·e^{−2πi·km/N}`: a strided 1-D convolution of the line with the
//! `[2N, 2, N]` kernel of windowed cos/sin terms (real and imaginary as 2 input channels, bin and
//! part as 2N output channels), one `Conv2d` over the `[R·2, 1, T]` lines (`R` of them as
//! groups). The window is folded into the kernel; the rounding is each output's sum of 2N
//! products.

use super::{f32s, zeros, Lowerer, Res};
use kestrel_rt_format::ops::{Activation, Conv2d, Op, Proj, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::fft::{Fft, Stft};

impl Lowerer<'_> {
    /// The activation `src` of complex values (a last axis of 2: real, imaginary), transformed
    /// along `axis`, another axis.
    fn complex_input(&mut self, src: OutletId, axis: usize) -> Res<(TensorId, Vec<usize>)> {
        let (x, xs) = self.act(src)?;
        let r = xs.len();
        if r < 2 || xs[r - 1] != 2 || axis >= r - 1 {
            return Err(self
                .bad("complex values as a last axis of 2, transformed along another", format!("{xs:?} along {axis}")));
        }
        Ok((x, xs))
    }

    /// Lowers tract's `Fft`; `Ok(false)` for anything else.
    pub(super) fn try_fft(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<Fft>() else { return Ok(false) };
        let (x, xs) = self.complex_input(node.inputs[0], op.axis)?;
        let r = xs.len();
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

    /// Lowers tract's `Stft`; `Ok(false)` for anything else.
    pub(super) fn try_stft(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<Stft>() else { return Ok(false) };
        let (x, xs) = self.complex_input(node.inputs[0], op.axis)?;
        let r = xs.len();
        let (n, stride, t) = (op.frame, op.stride, xs[op.axis]);
        if n == 0 || stride == 0 || t < n {
            return Err(self.bad(
                "a frame of at least 1 value within the signal, a step of at least 1",
                format!("frame {n}, step {stride}, signal {t}"),
            ));
        }
        let frames = (t - n) / stride + 1;
        // The window zero-padded to N and centred (tract's `Stft`); all ones without one.
        let mut window = vec![1f64; n];
        if let Some(w) = &op.window {
            let w = f32s(w)?;
            if w.len() > n {
                return Err(self.bad(&format!("a window of at most {n} values"), format!("{}", w.len())));
            }
            let left = (n - w.len()) / 2;
            window = vec![0f64; n];
            for (i, &v) in w.iter().enumerate() {
                window[left + i] = f64::from(v);
            }
        }
        // [R, 2, T] lines: the other axes first, then the (real, imaginary) pair, then time.
        let rest: Vec<usize> = (0..r - 1).filter(|&a| a != op.axis).collect();
        let lines: usize = rest.iter().map(|&a| xs[a]).product();
        let perm: Vec<usize> = rest.iter().copied().chain([r - 1, op.axis]).collect();
        let (xt, ts) = self.transpose(x, &xs, &perm)?;
        let planes = [lines * 2, 1, t];
        let xp = self.reshape(xt, &ts, &planes)?;
        // W[(k, c'), c, 0, m] = w_m·(e^{−iθ} applied to part c, giving part c'), θ = 2π·k·m/N:
        // (a + ib)(cos θ − i sin θ) = (a cos θ + b sin θ) + i(b cos θ − a sin θ).
        let mut kernel = zeros([2 * n, 2, 1, n], "an STFT's kernel")?;
        for k in 0..n {
            for (m, &wm) in window.iter().enumerate() {
                let theta = 2.0 * std::f64::consts::PI * ((k * m) % n) as f64 / n as f64;
                let (c, s) = (theta.cos() * wm, theta.sin() * wm);
                let at = |out: usize, part: usize| (out * 2 + part) * n + m;
                kernel[at(2 * k, 0)] = c as f32;
                kernel[at(2 * k, 1)] = s as f32;
                kernel[at(2 * k + 1, 0)] = -s as f32;
                kernel[at(2 * k + 1, 1)] = c as f32;
            }
        }
        let out_channels = lines * 2 * n;
        let w = self.weight_f32(OutletId::new(self.node, 0), "stft", &[out_channels, 2, 1, n], kernel.repeat(lines))?;
        let groups = u32::try_from(lines).map_err(|_| self.unsupported("more than 2^32 STFT lines"))?;
        let stride_w = u32::try_from(stride).map_err(|_| self.unsupported("an STFT step beyond u32"))?;
        let y = self.b.op(|y| {
            Op::Conv2d(Conv2d {
                clamp: None,
                residual: None,
                x: xp,
                proj: Proj { w, b: None },
                stride: [1, stride_w],
                pad: [0; 4],
                dilation: [1, 1],
                groups,
                act: Activation::None,
                y,
            })
        })?;
        let conv_out = [out_channels, 1, frames];
        let ys =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect::<Vec<_>>()).unwrap_or_default();
        if ys != conv_out {
            return Err(self.bad(&format!("a convolution output {conv_out:?}"), format!("{ys:?}")));
        }
        // [rest…, N, 2, frames] → the input's axes with `frames, N` in the framed axis' place.
        let split: Vec<usize> = rest.iter().map(|&a| xs[a]).chain([n, 2, frames]).collect();
        let y = self.reshape(y, &ys, &split)?;
        let k = rest.len();
        let mut back = Vec::with_capacity(r + 1);
        for a in 0..r - 1 {
            if a == op.axis {
                back.extend([k + 2, k]);
            } else {
                back.push(rest.iter().position(|&b| b == a).unwrap_or(0));
            }
        }
        back.push(k + 1);
        let (y, ys) = self.transpose(y, &split, &back)?;
        self.out(y, ys);
        self.count_fused("stft-as-conv");
        Ok(true)
    }
}
