//! Convolutions whose kernel is computed at run time (a graph input, or a tensor the graph
//! computes: dynamic filters, ONNX's expanded CausalConvWithState), 1-D, 2-D and 3-D, every
//! stride, dilation, padding and group count, lowered exactly as im2col and a product:
//!
//! - the patches: one exact 0/1 `Dense` along the input's flattened spatial axis `[N·C, S]`,
//!   whose row `(k, p)` picks the input element kernel tap `k` reads for output position `p`
//!   (no 1 where the tap falls in the padding: it reads a zero), giving `[N, g, C/g·K, P]`;
//! - the kernel `[O, C/g, k…]` viewed `[g, O/g, C/g·K]` and one `MatMul` against the patches
//!   (broadcast over the N images): `[N, g, O/g, P]`;
//! - the bias (constant or computed) added per output channel.
//!
//! The patch matrix has `K·P × S` elements, so a large image is refused by the composed-constant
//! bound (`super::MAX_COMPOSED`) rather than attempted; a constant kernel takes the `Conv2d` path.

use super::pool::Spatial;
use super::{f32s, zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{BinaryOp, MatMul, Op, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::{KernelFormat, PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::nn::DataFormat;

impl Lowerer<'_> {
    /// The convolution of the node's input with the kernel in input 1, an activation
    /// `[O, C/g, k…]` (OIHW), `group` groups, the bias in input 2; records the output.
    pub(super) fn conv_runtime_kernel(&mut self, ps: &PoolSpec, fmt: KernelFormat, group: usize) -> Res<()> {
        let node = self.model.node(self.node);
        if fmt != KernelFormat::OIHW {
            return Err(self.unsupported(&format!("a kernel computed at run time in format {fmt:?}")));
        }
        let sp = self.spatial_in(ps, "convolution")?;
        let (kw, kshape) = self.act(node.inputs[1])?;
        let pads = ps.computed_padding(&sp.cs[1..]);
        let spatial: Vec<usize> = pads.iter().map(|d| d.convoluted).collect();
        let (o, y, p) = self.im2col_product(&sp, ps, kw, &kshape, group)?;
        self.runtime_conv_out(&sp, y, o, p, &spatial)?;
        self.count_fused("conv-with-run-time-kernel-as-im2col");
        Ok(())
    }

    /// ConvTranspose (tract's `Deconv`) with the kernel in input 1 an activation (ONNX's
    /// `[C, O/g, k…]`, which tract's importer hands over as `[O, C/g, k…]`): the zero
    /// insertion, padding and cropping of [`super::deconv`] along each spatial axis, then the
    /// im2col product with the kernel flipped on every spatial axis (the flattened taps
    /// reversed: one 0/1 Dense); records the output.
    pub(super) fn deconv_runtime_kernel(&mut self, op: &tract_onnx::tract_core::ops::cnn::Deconv) -> Res<()> {
        let node = self.model.node(self.node);
        let ps = &op.pool_spec;
        let sp = self.spatial_in(ps, "transposed convolution")?;
        let nd = sp.nd;
        let (kw, kshape) = self.act(node.inputs[1])?;
        let g = op.group;
        let c = sp.cs[0];
        let ks: Vec<usize> = ps.kernel_shape.to_vec();
        // tract's importer hands the kernel over as [O, C/g, k…] (its OIHW).
        if kshape.len() != nd + 2 || kshape[2..] != ks[..] || g == 0 || c % g != 0 || kshape[1] * g != c {
            return Err(self.bad(&format!("a kernel [O, {c}/{g}, {ks:?}]"), format!("{kshape:?}")));
        }
        let (cg, o) = (c / g, kshape[0]);
        let k: usize = ks.iter().product();
        let (s, d) = (ps.strides(), ps.dilations());
        let (mut z, mut zs) = (sp.x, sp.chw.clone());
        let mut zdims = Vec::new();
        let mut outdims = Vec::new();
        for a in 0..nd {
            let axis = zs.len() - nd + a;
            let (len, kk) = (sp.cs[1 + a], ks[a]);
            let adj = op.adjustments.get(a).copied().unwrap_or(0);
            let geo = ps
                .padding
                .compute_one_for_deconv(a, &len, kk, d[a], s[a], adj)
                .map_err(|e| self.bad("a transposed convolution's padding", format!("{e}")))?;
            let (sel, m_len, identity) =
                super::deconv::zero_insertion(len, kk, s[a], d[a], geo.pad_before, geo.deconvoluted)?;
            if !identity {
                let sw = self.weight_f32(node.inputs[0], "zero_insertion", &[m_len, len], sel)?;
                (z, zs) = self.dense_along(z, &zs, axis, sw, m_len)?;
            }
            zdims.push(m_len);
            outdims.push(geo.deconvoluted);
        }
        // The kernel [O, C/g, K] with its taps reversed (every spatial axis flipped).
        let kw = self.reshape(kw, &kshape, &[o, cg, k])?;
        let rev: Vec<f32> = (0..k * k).map(|e| f32::from(e / k + e % k == k - 1)).collect();
        let rev = self.weight_f32(OutletId::new(self.node, 0), "kernel_flip", &[k, k], rev)?;
        let (kw, kfs) = self.dense_along(kw, &[o, cg, k], 2, rev, k)?;
        let conv_k: Vec<usize> = [o, cg].into_iter().chain(ks.iter().copied()).collect();
        let kw = self.reshape(kw, &kfs, &conv_k)?;
        // The stride-1, unpadded convolution of the zero-inserted input.
        let zsp = Spatial {
            x: z,
            cs: std::iter::once(c).chain(zdims.iter().copied()).collect(),
            chw: zs,
            nd,
            channels_last: false,
            images: sp.images,
        };
        let geometry = PoolSpec {
            data_format: DataFormat::NCHW,
            kernel_shape: ps.kernel_shape.clone(),
            padding: PaddingSpec::Valid,
            dilations: Some(d.iter().copied().collect()),
            strides: Some(ks.iter().map(|_| 1).collect()),
            input_channels: c,
            output_channels: o,
        };
        let (o, y, p) = self.im2col_product(&zsp, &geometry, kw, &conv_k, g)?;
        self.runtime_conv_out(&sp, y, o, p, &outdims)?;
        self.count_fused("conv-transpose-with-run-time-kernel-as-im2col");
        Ok(())
    }

    /// Adds the bias in input 2 (constant or computed) to `y [N, O, P]` and records it, in the
    /// layout `sp` came in, with the output's spatial dims `spatial`.
    fn runtime_conv_out(&mut self, sp: &Spatial, y: TensorId, o: usize, p: usize, spatial: &[usize]) -> Res<()> {
        let node = self.model.node(self.node);
        let n = sp.images;
        let mut y = y;
        match self.val(node.inputs[2])? {
            Val::Const(t) => {
                let v = f32s(&t)?;
                if v.iter().any(|&b| b != 0.0) {
                    let v = if v.len() == 1 { vec![v[0]; o] } else { v };
                    if v.len() != o {
                        return Err(self.bad(&format!("a bias of {o} values"), format!("{}", v.len())));
                    }
                    let b = self.weight(node.inputs[2], "bias", &[o, 1], v)?;
                    y = self.binary_op(y, b, BinaryOp::Add)?;
                }
            }
            Val::Act { .. } => {
                let (b, bs) = self.act(node.inputs[2])?;
                if bs.iter().product::<usize>() != o {
                    return Err(self.bad(&format!("a bias of {o} values"), format!("{bs:?}")));
                }
                let b = self.reshape(b, &bs, &[o, 1])?;
                y = self.binary_op(y, b, BinaryOp::Add)?;
            }
        }
        let out = self.out_shape()?;
        // [N, O, P] → the `[N·O, spatial…]` form `spatial_out` takes (1-D: height 1).
        let ys: Vec<usize> = if sp.nd == 1 {
            vec![n * o, 1, spatial[0]]
        } else {
            std::iter::once(n * o).chain(spatial.iter().copied()).collect()
        };
        let y = self.reshape(y, &[n, o, p], &ys)?;
        let y = self.spatial_out(y, ys, sp, &out)?;
        self.out(y, out);
        Ok(())
    }

    /// im2col of `sp` for the geometry of `ps` and the product with the kernel `kw` (logical
    /// shape `kshape`, `[O, C/g, k…]`): returns O, `[N, O, P]` and P.
    fn im2col_product(
        &mut self,
        sp: &Spatial,
        ps: &PoolSpec,
        kw: TensorId,
        kshape: &[usize],
        group: usize,
    ) -> Res<(usize, TensorId, usize)> {
        let nd = sp.nd;
        let (n, c) = (sp.images, sp.cs[0]);
        let input: Vec<usize> = sp.cs[1..].to_vec();
        let ks: Vec<usize> = ps.kernel_shape.to_vec();
        if kshape.len() != nd + 2 || kshape[2..] != ks[..] || group == 0 || c % group != 0 || kshape[1] * group != c {
            return Err(self.bad(&format!("a kernel [O, {}/{group}, {ks:?}]", c), format!("{kshape:?}")));
        }
        let o = kshape[0];
        if !o.is_multiple_of(group) {
            return Err(self.bad(&format!("output channels divisible by {group} groups"), format!("{o}")));
        }
        let pads = ps.computed_padding(&input);
        let (strides, dilations) = (ps.strides(), ps.dilations());
        let outdims: Vec<usize> = pads.iter().map(|d| d.convoluted).collect();
        let s: usize = input.iter().product();
        let p: usize = outdims.iter().product();
        let k: usize = ks.iter().product();
        // Row (tap, position) → the input element it reads, or none (padding).
        let mut w = zeros([k * p, s], "a convolution's patch selection")?;
        for tap in 0..k {
            let kt = unravel(tap, &ks);
            for pos in 0..p {
                let pt = unravel(pos, &outdims);
                let mut flat = 0usize;
                let mut inside = true;
                for a in 0..nd {
                    let i = (pt[a] * strides[a] + kt[a] * dilations[a]) as i64 - pads[a].pad_before as i64;
                    if i < 0 || i >= input[a] as i64 {
                        inside = false;
                        break;
                    }
                    flat = flat * input[a] + i as usize;
                }
                if inside {
                    w[(tap * p + pos) * s + flat] = 1.0;
                }
            }
        }
        let here = OutletId::new(self.node, 0);
        let w = self.weight_f32(here, "im2col", &[k * p, s], w)?;
        let x2 = self.reshape(sp.x, &sp.chw, &[n * c, s])?;
        let (patches, _) = self.dense_along(x2, &[n * c, s], 1, w, k * p)?;
        let cg = c / group;
        let patches = self.reshape(patches, &[n * c, k * p], &[n, group, cg * k, p])?;
        let kw = self.reshape(kw, kshape, &[group, o / group, cg * k])?;
        let y = self.b.op(|y| Op::MatMul(MatMul { a: kw, b: patches, transpose_b: false, y }))?;
        let y = self.reshape(y, &[n, group, o / group, p], &[n, o, p])?;
        Ok((o, y, p))
    }
}

/// Index `i` of a row-major array of `dims` as one index per dimension.
fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for (k, &d) in dims.iter().enumerate().rev() {
        idx[k] = i % d;
        i /= d;
    }
    idx
}
