//! tract's `Deconv` (ONNX ConvTranspose), 1-D, 2-D and 3-D, every stride, dilation, padding (explicit
//! and SAME), output padding and group count, lowered exactly to a zero-insertion and a
//! convolution.
//!
//! Per spatial axis, with input length `L`, kernel `k`, stride `s`, dilation `d`, padding before
//! `p` and output length `O` (output padding included), ONNX defines
//! `y[o] = Σ x[i]·W[t]` over `i·s + t·d − p = o`. That is a stride-1, unpadded convolution with
//! the spatially flipped kernel over `z`, `O + d·(k − 1)` long, where `z[m] = x[i]` when
//! `m + p − d·(k − 1) = i·s` and 0 otherwise. `z` is one exact 0/1 `Dense` along each spatial
//! axis (the zeros between the samples, the padding and any cropping in one matrix), and the
//! convolution is `Conv2d` with the channel grouping unchanged and the flipped kernel as its
//! weight (quantised like any convolution's). The convolution also multiplies the inserted
//! zeros: `s²` times the arithmetic of a direct transposed convolution. A 3-D transposed
//! convolution inserts the zeros along D, H and W the same way and runs the 3-D convolution of
//! [`super::conv3d`].

use super::pool::Spatial;
use super::{f32s, zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{Activation, Conv2d, Op, Proj};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::{Deconv, KernelFormat};

impl Lowerer<'_> {
    /// Lowers the node if it is a `Deconv`; `Ok(false)` otherwise.
    pub(super) fn try_deconv(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<Deconv>() else { return Ok(false) };
        if node.inputs.len() != 3 {
            return Err(self.bad("data, kernel and bias inputs", format!("{} inputs", node.inputs.len())));
        }
        if op.kernel_format != KernelFormat::OIHW {
            return Err(self.unsupported(&format!("transposed convolution kernel format {:?}", op.kernel_format)));
        }
        if matches!(self.val(node.inputs[1])?, Val::Act { .. }) {
            self.deconv_runtime_kernel(op)?;
            return Ok(true);
        }
        if op.pool_spec.kernel_shape.len() == 3 {
            self.deconv3d(op)?;
            return Ok(true);
        }
        let ps = &op.pool_spec;
        let sp = self.spatial_in(ps, "transposed convolution")?;
        let Spatial { x, ref cs, ref chw, nd, images, .. } = sp;
        let Val::Const(kernel) = self.val(node.inputs[1])? else {
            return Err(self.bad("a constant kernel", "an activation".into()));
        };
        // [C_out, C_in / g, kh, kw] (a 1-D kernel gains height 1), flipped on both spatial axes.
        let ks = kernel.shape().to_vec();
        if ks.len() != nd + 2 {
            return Err(self.bad(&format!("a kernel of rank {}", nd + 2), format!("{ks:?}")));
        }
        let (co, ci_g) = (ks[0], ks[1]);
        let (kh, kw) = if nd == 1 { (1, ks[2]) } else { (ks[2], ks[3]) };
        let g = op.group;
        if g == 0 || co % g != 0 || cs[0] != ci_g * g {
            return Err(self.bad(
                &format!("{} input channels in {g} groups", cs[0]),
                format!("a kernel {ks:?} ({ci_g} per group)"),
            ));
        }
        let kv = f32s(&kernel)?;
        let mut flipped = zeros([co, ci_g, kh, kw], "a transposed convolution's kernel")?;
        for oc in 0..co * ci_g {
            for y in 0..kh {
                for x in 0..kw {
                    flipped[(oc * kh + y) * kw + x] = kv[(oc * kh + (kh - 1 - y)) * kw + (kw - 1 - x)];
                }
            }
        }
        // N images stacked on the channel axis: the kernel (and bias) once per image, N times
        // the groups.
        let co_n = co * images;
        let w = self.weight(node.inputs[1], "deconv", &[co_n, ci_g, kh, kw], flipped.repeat(images))?;
        let b = match self.val(node.inputs[2])? {
            Val::Const(t) => {
                let v = f32s(&t)?;
                match v.len() {
                    _ if v.iter().all(|&b| b == 0.0) => None,
                    1 => Some(self.weight(node.inputs[2], "bias", &[co_n], vec![v[0]; co_n])?),
                    n if n == co => Some(self.weight(node.inputs[2], "bias", &[co_n], v.repeat(images))?),
                    n => return Err(self.bad(&format!("a bias of 1 or {co} values"), format!("{n}"))),
                }
            }
            Val::Act { .. } => return Err(self.bad("a constant bias", "an activation".into())),
        };
        let out = self.out_shape()?;
        let (s, d) = (ps.strides(), ps.dilations());
        // Zero insertion, padding and cropping: a 0/1 Dense along each spatial axis of [C, H, W].
        let (mut z, mut zs) = (x, chw.clone());
        let mut conv_out = [1usize; 2];
        let mut dil = [1u32; 2];
        for a in 0..nd {
            let axis = a + 3 - nd;
            let (len, k) = (cs[1 + a], ps.kernel_shape[a]);
            let adj = op.adjustments.get(a).copied().unwrap_or(0);
            let geo = ps
                .padding
                .compute_one_for_deconv(a, &len, k, d[a], s[a], adj)
                .map_err(|e| self.bad("a transposed convolution's padding", format!("{e}")))?;
            let o = geo.deconvoluted;
            let (sel, m_len, identity) = zero_insertion(len, k, s[a], d[a], geo.pad_before, o)?;
            if !identity {
                let sw = self.weight_f32(node.inputs[0], "zero_insertion", &[m_len, len], sel)?;
                (z, zs) = self.dense_along(z, &zs, axis, sw, m_len)?;
            }
            conv_out[axis - 1] = o;
            dil[axis - 1] = u32::try_from(d[a]).map_err(|_| self.unsupported("dilation beyond u32"))?;
        }
        let groups = u32::try_from(g * images).map_err(|_| self.unsupported("group count beyond u32"))?;
        let act = self.match_activation(OutletId::new(self.node, 0));
        let a = act.as_ref().map_or(Activation::None, |a| a.0);
        let y = self.b.op(|y| {
            Op::Conv2d(Conv2d {
                clamp: None,
                residual: None,
                x: z,
                proj: Proj { w, b },
                stride: [1, 1],
                pad: [0; 4],
                dilation: dil,
                groups,
                act: a,
                y,
            })
        })?;
        let ys =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect::<Vec<_>>()).unwrap_or_default();
        if ys != [co_n, conv_out[0], conv_out[1]] {
            return Err(self.bad(
                &format!("a convolution output [{co_n}, {}, {}]", conv_out[0], conv_out[1]),
                format!("{ys:?} from {zs:?}"),
            ));
        }
        let y = self.spatial_out(y, ys, &sp, &out)?;
        self.finish_with(y, out, None, act, "conv");
        self.count_fused("conv-transpose-as-zero-insertion-and-conv");
        Ok(true)
    }
}

/// One axis' zero insertion, padding and cropping for a transposed convolution of input length
/// `len`, kernel `k`, stride `s`, dilation `d`, padding before `p` and output length `o`: the
/// 0/1 matrix `[m, len]` with `m = o + d·(k − 1)` (`z[m] = x[i]` when `m + p − d·(k − 1) = i·s`),
/// `m`, and whether the matrix is the identity.
pub(super) fn zero_insertion(
    len: usize,
    k: usize,
    s: usize,
    d: usize,
    p: usize,
    o: usize,
) -> Res<(Vec<f32>, usize, bool)> {
    let (p, reach) = (p as i64, (d * (k - 1)) as i64);
    let m_len = o + d * (k - 1);
    let mut sel = zeros([m_len, len], "a transposed convolution's zero insertion")?;
    let mut identity = m_len == len;
    for m in 0..m_len {
        let pos = m as i64 + p - reach;
        let hit = (pos >= 0 && pos % s as i64 == 0).then(|| (pos / s as i64) as usize).filter(|&i| i < len);
        if let Some(i) = hit {
            sel[m * len + i] = 1.0;
        }
        identity &= hit == Some(m);
    }
    Ok((sel, m_len, identity))
}
