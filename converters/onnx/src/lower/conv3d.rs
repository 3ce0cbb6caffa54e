//! 3-D convolution (tract's `Conv` on `[N, C, D, H, W]`, ONNX Conv with a 5-D input) and 3-D
//! transposed convolution (tract's `Deconv`, ONNX ConvTranspose), lowered exactly to `Conv2d`.
//!
//! ONNX defines `y[o, z, i, j] = b[o] + Σ x[c, z·s_d + t·d_d − p_d, i·s_h + u·d_h − p_h,
//! j·s_w + v·d_w − p_w]·W[o, c, t, u, v]` over the input channels `c` of `o`'s group, the taps
//! `(t, u, v)`, and positions inside the input (the padding reads 0). Per depth output `z`, that
//! is a 2-D convolution over (H, W) whose input channels are the pairs `(c, t)`: the `k_d`
//! depth planes `x[c, z·s_d + t·d_d − p_d]` (a zero plane where that falls in the padding), with
//! the kernel `W` viewed as `[O, (C/g)·k_d, k_h, k_w]` (`c` major, so each group's channels stay
//! contiguous). So:
//!
//! 1. one exact 0/1 `Dense` along D (`[k_d·D', D]`: row `t·D' + z` picks plane
//!    `z·s_d + t·d_d − p_d`, or is zero in the padding) gives the `k_d` taps of every output
//!    depth; skipped when it is the identity (a depth window of 1, stride 1, no padding);
//! 2. a `Transpose` makes the output depth `z` the leading axis, `[D', N, C, k_d, H, W]`, the
//!    `D'·N` stacks of `C·k_d` planes on the channel axis of one `Conv2d` with `D'·N·g` groups
//!    (as [`super::pool::Spatial::images`] stacks a fixed first axis), its weight the kernel
//!    view repeated `D'·N` times, with the (H, W) stride, dilation and padding of the node;
//! 3. the output `[D'·N·O, H', W']` is transposed back to `[N·O, D', H', W']`.
//!
//! Every output element is the same sum of products ONNX's definition gives (the zero taps of
//! the padding included); the arithmetic is the direct convolution's, the weight is stored
//! `D'·N` times (a performance follow-up: a `Conv2d` over several images sharing one weight).
//!
//! ConvTranspose 3-D: as in [`super::deconv`], a 0/1 zero-insertion `Dense` along each spatial
//! axis, then the stride-1, unpadded 3-D convolution above with the spatially flipped kernel.

use super::deconv::zero_insertion;
use super::pool::Spatial;
use super::{f32s, zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{Activation, Conv2d, Op, Proj, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::{Conv, Deconv, KernelFormat};

/// A 3-D convolution over `x [N·C, D, H, W]` (`N` images stacked on the channel axis).
struct Volume {
    x: TensorId,
    n: usize,
    c: usize,
    dims: [usize; 3],
    /// The kernel `[O, C/groups, k_d, k_h, k_w]` and the constant it comes from.
    w: Vec<f32>,
    w_src: OutletId,
    o: usize,
    k: [usize; 3],
    groups: usize,
    stride: [usize; 3],
    dilation: [usize; 3],
    before: [usize; 3],
    after: [usize; 3],
    /// Output spatial dims (D', H', W').
    out: [usize; 3],
    /// The bias `[O]` (absent when zero) and the constant it comes from.
    bias: Option<(Vec<f32>, OutletId)>,
    act: Activation,
}

impl Lowerer<'_> {
    /// Lowers a 3-D float convolution (NCDHW, or channels-last) to `Conv2d`.
    pub(super) fn conv3d(&mut self, op: &Conv) -> Res<()> {
        let node = self.model.node(self.node);
        if op.q_params.is_some() || node.inputs.len() != 3 {
            return Err(self.unsupported("quantised convolution"));
        }
        let ps = &op.pool_spec;
        let sp = self.spatial_in(ps, "convolution")?;
        let Spatial { x, ref cs, images, .. } = sp;
        let Val::Const(kernel) = self.val(node.inputs[1])? else {
            return Err(self.bad("a constant kernel", "an activation".into()));
        };
        let perm: &[usize] = match op.kernel_fmt {
            KernelFormat::OIHW => &[0, 1, 2, 3, 4],
            KernelFormat::HWIO => &[4, 3, 0, 1, 2],
            KernelFormat::OHWI => &[0, 4, 1, 2, 3],
        };
        if kernel.rank() != 5 {
            return Err(self.bad("a kernel of rank 5", format!("{:?}", kernel.shape())));
        }
        let kernel = (*kernel).clone().permute_axes(perm).map_err(|e| self.bad("a conv kernel", format!("{e}")))?;
        let ks = kernel.shape().to_vec();
        let g = op.group;
        if g == 0 || ks[0] % g != 0 || cs[0] != ks[1] * g {
            return Err(self.bad(&format!("{} input channels in {g} groups", cs[0]), format!("a kernel {ks:?}")));
        }
        let bias = self.volume_bias(node.inputs[2], ks[0])?;
        let pads = ps.computed_padding(&cs[1..]);
        let (s, d) = (ps.strides(), ps.dilations());
        let act = self.match_activation(OutletId::new(self.node, 0));
        let v = Volume {
            x,
            n: images,
            c: cs[0],
            dims: [cs[1], cs[2], cs[3]],
            w: f32s(&kernel)?,
            w_src: node.inputs[1],
            o: ks[0],
            k: [ks[2], ks[3], ks[4]],
            groups: g,
            stride: [s[0], s[1], s[2]],
            dilation: [d[0], d[1], d[2]],
            before: [0, 1, 2].map(|a| pads[a].pad_before),
            after: [0, 1, 2].map(|a| pads[a].pad_after),
            out: [0, 1, 2].map(|a| pads[a].convoluted),
            bias,
            act: act.as_ref().map_or(Activation::None, |a| a.0),
        };
        let (y, ys) = self.volume_conv(v)?;
        let out = self.out_shape()?;
        let y = self.spatial_out(y, ys, &sp, &out)?;
        self.finish_with(y, out, None, act, "conv");
        self.count_fused("conv3d-as-depth-taps-and-conv2d");
        Ok(())
    }

    /// Lowers a 3-D transposed convolution: zero insertion along each spatial axis and the
    /// stride-1 3-D convolution with the flipped kernel.
    pub(super) fn deconv3d(&mut self, op: &Deconv) -> Res<()> {
        let node = self.model.node(self.node);
        let ps = &op.pool_spec;
        let sp = self.spatial_in(ps, "transposed convolution")?;
        let Spatial { x, ref cs, ref chw, images, .. } = sp;
        let Val::Const(kernel) = self.val(node.inputs[1])? else {
            return Err(self.bad("a constant kernel", "an activation".into()));
        };
        // [C_out, C_in / g, kd, kh, kw] (as in the 2-D lowering), flipped on the spatial axes.
        let ks = kernel.shape().to_vec();
        if ks.len() != 5 {
            return Err(self.bad("a kernel of rank 5", format!("{ks:?}")));
        }
        let (co, ci_g, k) = (ks[0], ks[1], [ks[2], ks[3], ks[4]]);
        let g = op.group;
        if g == 0 || co % g != 0 || cs[0] != ci_g * g {
            return Err(self.bad(
                &format!("{} input channels in {g} groups", cs[0]),
                format!("a kernel {ks:?} ({ci_g} per group)"),
            ));
        }
        let kv = f32s(&kernel)?;
        let taps = k[0] * k[1] * k[2];
        let mut flipped = zeros([co * ci_g, taps], "a transposed convolution's kernel")?;
        for (dst, src) in flipped.chunks_mut(taps).zip(kv.chunks(taps)) {
            for (i, v) in dst.iter_mut().enumerate() {
                *v = src[taps - 1 - i];
            }
        }
        let bias = self.volume_bias(node.inputs[2], co)?;
        let (s, d) = (ps.strides(), ps.dilations());
        let (mut z, mut zs) = (x, chw.clone());
        let mut out = [0usize; 3];
        for a in 0..3 {
            let (len, adj) = (cs[1 + a], op.adjustments.get(a).copied().unwrap_or(0));
            let geo = ps
                .padding
                .compute_one_for_deconv(a, &len, k[a], d[a], s[a], adj)
                .map_err(|e| self.bad("a transposed convolution's padding", format!("{e}")))?;
            out[a] = geo.deconvoluted;
            let (sel, m_len, identity) = zero_insertion(len, k[a], s[a], d[a], geo.pad_before, out[a])?;
            if !identity {
                let sw = self.weight_f32(node.inputs[0], "zero_insertion", &[m_len, len], sel)?;
                (z, zs) = self.dense_along(z, &zs, 1 + a, sw, m_len)?;
            }
        }
        let act = self.match_activation(OutletId::new(self.node, 0));
        let v = Volume {
            x: z,
            n: images,
            c: cs[0],
            dims: [zs[1], zs[2], zs[3]],
            w: flipped,
            w_src: node.inputs[1],
            o: co,
            k,
            groups: g,
            stride: [1; 3],
            dilation: [d[0], d[1], d[2]],
            before: [0; 3],
            after: [0; 3],
            out,
            bias,
            act: act.as_ref().map_or(Activation::None, |a| a.0),
        };
        let (y, ys) = self.volume_conv(v)?;
        let out = self.out_shape()?;
        let y = self.spatial_out(y, ys, &sp, &out)?;
        self.finish_with(y, out, None, act, "conv");
        self.count_fused("conv-transpose-as-zero-insertion-and-conv");
        Ok(())
    }

    /// A convolution's bias input: `None` when all zero, else `o` values (a single value
    /// broadcast).
    fn volume_bias(&self, src: OutletId, o: usize) -> Res<Option<(Vec<f32>, OutletId)>> {
        match self.val(src)? {
            Val::Const(t) => {
                let v = f32s(&t)?;
                match v.len() {
                    _ if v.iter().all(|&b| b == 0.0) => Ok(None),
                    1 => Ok(Some((vec![v[0]; o], src))),
                    n if n == o => Ok(Some((v, src))),
                    n => Err(self.bad(&format!("a bias of 1 or {o} values"), format!("{n}"))),
                }
            }
            Val::Act { .. } => Err(self.bad("a constant bias", "an activation".into())),
        }
    }

    /// The 3-D convolution as depth taps and one `Conv2d` (see the module docs); returns
    /// `[N·O, D', H', W']`.
    fn volume_conv(&mut self, v: Volume) -> Res<(TensorId, Vec<usize>)> {
        let Volume { n, c, dims: [dd, h, w], o, k: [kd, kh, kw], groups: g, .. } = v;
        let [od, oh, ow] = v.out;
        let x5 = [n, c, dd, h, w];
        let x = self.reshape(v.x, &[n * c, dd, h, w], &x5)?;
        // The depth taps: [D', N, C, kd, H, W].
        let mut sel = zeros([kd * od, dd], "a 3-D convolution's depth taps")?;
        let mut identity = kd == 1 && od == dd;
        for t in 0..kd {
            for z in 0..od {
                let pos = (z * v.stride[0] + t * v.dilation[0]) as i64 - v.before[0] as i64;
                if (0..dd as i64).contains(&pos) {
                    sel[(t * od + z) * dd + pos as usize] = 1.0;
                }
                identity &= pos == z as i64;
            }
        }
        let taps = if identity {
            let (y, _) = self.transpose(x, &x5, &[2, 0, 1, 3, 4])?;
            y
        } else {
            let src = OutletId::new(self.node, 0);
            let sw = self.weight_f32(src, "depth_taps", &[kd * od, dd], sel)?;
            let (xl, xls) = self.transpose(x, &x5, &[0, 1, 3, 4, 2])?;
            let y = self.b.op(|y| {
                Op::Dense(kestrel_rt_format::ops::Dense {
                    clamp: None,
                    x: xl,
                    proj: Proj { w: sw, b: None },
                    act: Activation::None,
                    y,
                })
            })?;
            let ys = [n, c, h, w, kd * od];
            debug_assert_eq!(xls[..4], ys[..4]);
            let split = [n, c, h, w, kd, od];
            let y = self.reshape(y, &ys, &split)?;
            let (y, _) = self.transpose(y, &split, &[5, 0, 1, 4, 2, 3])?;
            y
        };
        let stacks = od * n;
        let planes = [stacks * c * kd, h, w];
        let taps = self.reshape(taps, &[od, n, c, kd, h, w], &planes)?;
        // The kernel [O, C/g, kd, kh, kw] viewed as [O, (C/g)·kd, kh, kw], once per stack.
        let ci = (c / g) * kd;
        let copies_bytes = (stacks - 1) * v.w.len() * 4;
        if copies_bytes > 4 << 20 {
            let node = &self.model.node(self.node).name;
            self.notices.push(format!(
                "3-D convolution `{node}`: its weight is stored {stacks} times (once per output depth \
                 and image: {} MiB more than once, as f32)",
                copies_bytes >> 20
            ));
        }
        let wid = self.weight(v.w_src, "conv", &[stacks * o, ci, kh, kw], v.w.repeat(stacks))?;
        let b = match v.bias {
            Some((b, src)) => Some(self.weight(src, "bias", &[stacks * o], b.repeat(stacks))?),
            None => None,
        };
        let u = |x: usize| u32::try_from(x).map_err(|_| self.unsupported("convolution geometry beyond u32"));
        let stride = [u(v.stride[1])?, u(v.stride[2])?];
        let dilation = [u(v.dilation[1])?, u(v.dilation[2])?];
        let pad = [u(v.before[1])?, u(v.before[2])?, u(v.after[1])?, u(v.after[2])?];
        let groups = u(g * stacks)?;
        let act = v.act;
        let y = self.b.op(|y| {
            Op::Conv2d(Conv2d {
                clamp: None,
                residual: None,
                x: taps,
                proj: Proj { w: wid, b },
                stride,
                pad,
                dilation,
                groups,
                act,
                y,
            })
        })?;
        let ys =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect::<Vec<_>>()).unwrap_or_default();
        if ys != [stacks * o, oh, ow] {
            return Err(self.bad(&format!("a convolution output [{}, {oh}, {ow}]", stacks * o), format!("{ys:?}")));
        }
        // [D'·N·O, H', W'] → [N·O, D', H', W'].
        let y = self.reshape(y, &ys, &[od, n * o, oh * ow])?;
        let (y, _) = self.transpose(y, &[od, n * o, oh * ow], &[1, 0, 2])?;
        let to = vec![n * o, od, oh, ow];
        let y = self.reshape(y, &[n * o, od, oh * ow], &to)?;
        Ok((y, to))
    }
}

#[cfg(test)]
mod tests {
    //! Layouts an ONNX file does not reach directly (tract's importer makes every convolution
    //! NCHW with an OIHW kernel): 3-D convolutions built as tract ops, lowered, and run by Kestrel
    //! and by tract on the same input.
    use super::super::{Lowerer, QuantChoice, Val};
    use kestrel_rt::{Input, ModelBuilder};
    use kestrel_rt_format::ops::Op;
    use kestrel_rt_format::DType;
    use tract_onnx::prelude::*;
    use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat, PaddingSpec, PoolSpec};
    use tract_onnx::tract_core::ops::nn::DataFormat;

    /// Seeded non-zero values.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 + seed) % 101) as f32 / 25.0 - 2.02).collect()
    }

    /// Lowers a one-convolution tract graph on an input of `shape`; returns the Kestrel ops and
    /// the largest |kestrel − tract| relative to tract's largest output.
    fn lower_and_run(shape: &[usize], kernel: &[usize], op: Conv) -> (Vec<Op>, f32) {
        let mut m = TypedModel::default();
        let x = m.add_source("x", f32::fact(shape)).unwrap();
        let k = Tensor::from_shape(kernel, &values(kernel.iter().product(), 3)).unwrap();
        let k = m.add_const("k", k).unwrap();
        let o = op.output_channels();
        let b = m.add_const("b", Tensor::from_shape(&[o], &values(o, 7)).unwrap()).unwrap();
        let y = m.wire_node("conv", op, &[x, k, b]).unwrap();
        m.select_output_outlets(&y).unwrap();
        let choice = QuantChoice { base: DType::F32, keep_f16: Vec::new(), keep_first_last: false };
        let mut l = Lowerer::new(&m, ModelBuilder::new("conv"), choice);
        let id = l.b.input("x", shape).unwrap();
        l.set_input(x, Val::Act { id, shape: shape.to_vec(), int: false });
        l.run(&mut ()).unwrap();
        assert!(l.blockers.is_empty(), "{:?}", l.blockers);
        let (out, _) = l.act(y[0]).unwrap();
        l.b.output(out);
        let kes = l.b.build().unwrap();
        let data = values(shape.iter().product(), 11);
        let model = kestrel_rt::Model::from_bytes(&kes).unwrap();
        let got = model.session(1).unwrap().run_vec(&[Input::F32(&data)]).unwrap().remove(0);
        let t = Tensor::from_shape(shape, &data).unwrap();
        let want = m.into_runnable().unwrap().run(tvec![t.into()]).unwrap().remove(0);
        let want = want.try_as_plain_ram().unwrap().as_slice::<f32>().unwrap().to_vec();
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |a, (g, w)| a.max((g - w).abs()));
        let cpu = model.cpu().unwrap();
        (cpu.file().ops().collect::<Result<_, _>>().unwrap(), err / scale)
    }

    #[test]
    fn three_d_layouts_and_kernel_formats_match_tract() {
        let explicit = |b: &[usize], a: &[usize]| PaddingSpec::Explicit(b.into(), a.into());
        let conv = |fmt, kfmt, k: &[usize], pad, s: &[usize], ci, co, group| Conv {
            pool_spec: PoolSpec::new(fmt, k.into(), pad, Some((&[1usize, 2, 1][..]).into()), Some(s.into()), ci, co),
            kernel_fmt: kfmt,
            group,
            q_params: None,
        };
        // (name, input shape, kernel shape, op, Transposes expected)
        type Case = (&'static str, Vec<usize>, Vec<usize>, Conv, usize);
        let cases: Vec<Case> = vec![
            (
                "ndhwc, hwio kernel",
                vec![1, 5, 6, 7, 3],
                vec![2, 3, 2, 3, 4],
                conv(
                    DataFormat::NHWC,
                    KernelFormat::HWIO,
                    &[2, 3, 2],
                    explicit(&[1, 2, 0], &[0, 1, 1]),
                    &[1, 2, 2],
                    3,
                    4,
                    1,
                ),
                // to channels first, the depth taps' two, the output depths back, to channels last
                5,
            ),
            (
                "ncdhw, ohwi kernel",
                vec![1, 2, 4, 6, 5],
                vec![3, 3, 3, 2, 2],
                conv(DataFormat::NCHW, KernelFormat::OHWI, &[3, 3, 2], PaddingSpec::SameUpper, &[2, 1, 2], 2, 3, 1),
                3,
            ),
            (
                "cdhw, oihw kernel, 2 groups",
                vec![4, 5, 5, 6],
                vec![6, 2, 2, 3, 3],
                conv(
                    DataFormat::CHW,
                    KernelFormat::OIHW,
                    &[2, 3, 3],
                    explicit(&[1, 1, 1], &[1, 1, 0]),
                    &[2, 1, 1],
                    4,
                    6,
                    2,
                ),
                3,
            ),
        ];
        for (name, shape, kernel, op, transposes) in cases {
            let (ops, rel) = lower_and_run(&shape, &kernel, op);
            assert!(rel <= 1e-5, "{name}: max |kestrel - tract| / max |tract| = {rel:e}");
            let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
            assert_eq!(count(&|o| matches!(o, Op::Conv2d(_))), 1, "{name}: {ops:?}");
            assert_eq!(count(&|o| matches!(o, Op::Transpose(_))), transposes, "{name}: {ops:?}");
        }
    }
}
