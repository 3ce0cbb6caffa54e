//! EinSum (ONNX MatMul, Gemm) → `Dense` or `MatMul`; Conv → `Conv2d` (3-D: `conv3d.rs`).

use super::pool::Spatial;
use super::{f32s, zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{Activation, Conv2d, Dense, MatMul, Op, Proj, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat};
use tract_onnx::tract_core::ops::einsum::EinSum;

/// One operand of a contraction: an activation or a constant, with its axes' labels.
#[derive(Clone)]
pub(super) enum Operand {
    Act(TensorId, Vec<usize>),
    Const(OutletId, Arc<Tensor>),
}

impl Operand {
    fn shape(&self) -> Vec<usize> {
        match self {
            Operand::Act(_, s) => s.clone(),
            Operand::Const(_, t) => t.shape().to_vec(),
        }
    }
}

fn prod(dims: &[usize]) -> usize {
    dims.iter().product()
}

impl Lowerer<'_> {
    fn operand(&self, o: OutletId) -> Res<Operand> {
        match self.val(o)? {
            Val::Act { id, shape, int: false } => Ok(Operand::Act(id, shape)),
            Val::Act { int: true, .. } => Err(self.bad("an f32 operand", "integer ids".into())),
            Val::Const(t) => Ok(Operand::Const(o, t)),
        }
    }

    /// Drops the axes of `labels` absent from `target` (all size 1) and permutes the rest into
    /// `target` order. Returns the arranged activation or constant and its dims.
    fn arrange(&mut self, x: &Operand, labels: &[char], target: &[char]) -> Res<(Operand, Vec<usize>)> {
        let shape = x.shape();
        let kept: Vec<usize> = (0..labels.len()).filter(|&i| target.contains(&labels[i])).collect();
        let kept_dims: Vec<usize> = kept.iter().map(|&i| shape[i]).collect();
        let kept_labels: Vec<char> = kept.iter().map(|&i| labels[i]).collect();
        let perm: Vec<usize> =
            target.iter().map(|c| kept_labels.iter().position(|k| k == c)).collect::<Option<_>>().ok_or_else(|| {
                self.bad("every contraction axis in its operand", format!("{labels:?} vs {target:?}"))
            })?;
        let dims: Vec<usize> = perm.iter().map(|&p| kept_dims[p]).collect();
        match x {
            Operand::Act(id, s) => {
                let id = self.reshape(*id, s, &kept_dims)?;
                let (id, _) = self.transpose(id, &kept_dims, &perm)?;
                Ok((Operand::Act(id, dims.clone()), dims))
            }
            Operand::Const(o, t) => {
                let t = (**t)
                    .clone()
                    .into_shape(&kept_dims)
                    .and_then(|t| t.permute_axes(&perm))
                    .map_err(|e| self.bad("a reshapeable constant", format!("{e}")))?;
                Ok((Operand::Const(*o, Arc::new(t)), dims))
            }
        }
    }

    fn weight_from(&mut self, x: &Operand, usage: &'static str, dims: &[usize]) -> Res<TensorId> {
        match x {
            Operand::Const(o, t) => {
                let v = f32s(t)?;
                self.weight(*o, usage, dims, v)
            }
            Operand::Act(..) => Err(self.bad("a constant weight", "an activation".into())),
        }
    }

    /// Lowers a two-input EinSum.
    pub(super) fn einsum(&mut self, op: &EinSum) -> Res<()> {
        let node = self.model.node(self.node);
        if let Some(qp) = op.q_params {
            return self.einsum_q(op, qp);
        }
        if node.inputs.len() == 1 {
            return self.einsum_unary(op);
        }
        if node.inputs.len() != 2 {
            return Err(self.unsupported("einsums of more than two inputs"));
        }
        let ops = [self.operand(node.inputs[0])?, self.operand(node.inputs[1])?];
        self.einsum_of(op, ops, true)
    }

    /// An einsum of one operand (a transpose, a diagonal, a sum over axes, or any mix): linear in
    /// the input, so one `Dense` over the flattened input with the constant 0/1 matrix that sends
    /// each element on every repeated label's diagonal to its output position (summed when a
    /// label is absent from the output).
    fn einsum_unary(&mut self, op: &EinSum) -> Res<()> {
        let node = self.model.node(self.node);
        let (x, xs) = self.act(node.inputs[0])?;
        let out = self.out_shape()?;
        let n_in: usize = xs.iter().product();
        let n_out: usize = out.iter().product();
        let axes: Vec<(Vec<usize>, Option<usize>)> =
            op.axes.iter_all_axes().map(|a| (a.inputs[0].to_vec(), a.outputs[0].first().copied())).collect();
        let mut w = zeros([n_out, n_in], "an einsum's 0/1 matrix")?;
        let mut coords = vec![0usize; xs.len()];
        for e in 0..n_in {
            let mut rest = e;
            for (k, &d) in xs.iter().enumerate().rev() {
                coords[k] = rest % d;
                rest /= d;
            }
            let mut oc = vec![0usize; out.len()];
            let mut on_diagonal = true;
            for (ins, o) in &axes {
                let Some(&first) = ins.first() else { continue };
                on_diagonal &= ins.iter().all(|&p| coords[p] == coords[first]);
                if let Some(q) = o {
                    oc[*q] = coords[first];
                }
            }
            if on_diagonal {
                let o = oc.iter().zip(&out).fold(0usize, |acc, (&c, &d)| acc * d + c);
                w[o * n_in + e] = 1.0;
            }
        }
        let w = self.weight_f32(OutletId::new(self.node, 0), "einsum", &[n_out, n_in], w)?;
        let flat = self.reshape(x, &xs, &[1, n_in])?;
        let (y, ys) = self.dense_along(flat, &[1, n_in], 1, w, n_out)?;
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        self.count_fused("einsum-of-one-operand-as-dense");
        Ok(())
    }

    /// The float einsum of two operands; `fuse_after` lets a Dense take the bias and the
    /// activation that follow the node (a quantised einsum's requantisation comes first).
    pub(super) fn einsum_of(&mut self, op: &EinSum, ops: [Operand; 2], fuse_after: bool) -> Res<()> {
        let (li, ri) = if matches!(ops[0], Operand::Act(..)) { (0, 1) } else { (1, 0) };
        let (l, r) = (&ops[li], &ops[ri]);
        let (sl, sr) = (l.shape(), r.shape());
        let out_shape = self.out_shape()?;
        let mut labels_l = vec!['?'; sl.len()];
        let mut labels_r = vec!['?'; sr.len()];
        let mut out_labels = vec!['?'; out_shape.len()];
        let (mut batch, mut lfree, mut rfree, mut k) = (vec![], vec![], vec![], vec![]);
        for axis in op.axes.iter_all_axes() {
            let one = |v: &TVec<usize>| -> Res<Option<usize>> {
                match v.len() {
                    0 => Ok(None),
                    1 => Ok(Some(v[0])),
                    _ => Err(self.unsupported("repeated einsum axis")),
                }
            };
            let (pl, pr, po) = (one(&axis.inputs[li])?, one(&axis.inputs[ri])?, one(&axis.outputs[0])?);
            let c = axis.repr;
            if let Some(p) = pl {
                labels_l[p] = c;
            }
            if let Some(p) = pr {
                labels_r[p] = c;
            }
            if let Some(p) = po {
                out_labels[p] = c;
            }
            match (pl, pr, po) {
                (Some(a), Some(b), Some(_)) => {
                    let (dl, dr) = (sl[a], sr[b]);
                    if dl == dr && dl > 1 {
                        batch.push((a, c));
                    } else if dr == 1 {
                        lfree.push((a, c));
                    } else if dl == 1 {
                        rfree.push((b, c));
                    } else {
                        return Err(self.bad("broadcastable batch axes", format!("{dl} vs {dr}")));
                    }
                }
                (Some(a), None, Some(_)) => lfree.push((a, c)),
                (None, Some(b), Some(_)) => rfree.push((b, c)),
                (Some(a), Some(_), None) => k.push((a, c)),
                (Some(a), None, None) if sl[a] == 1 => {}
                (None, Some(b), None) if sr[b] == 1 => {}
                (None, None, Some(_)) => {}
                _ => return Err(self.unsupported("sum over an axis of one operand only")),
            }
        }
        for v in [&mut batch, &mut lfree, &mut rfree, &mut k] {
            v.sort();
        }
        let lab = |v: &[(usize, char)]| v.iter().map(|x| x.1).collect::<Vec<char>>();
        let (batch, lfree, rfree, k) = (lab(&batch), lab(&lfree), lab(&rfree), lab(&k));
        // An axis' length: the larger of the operands' (a broadcast axis is 1 on one side).
        let dim_of = |c: char| -> usize {
            let l = labels_l.iter().position(|&x| x == c).map_or(1, |p| sl[p]);
            let r = labels_r.iter().position(|&x| x == c).map_or(1, |p| sr[p]);
            l.max(r)
        };
        let bd: Vec<usize> = batch.iter().map(|&c| dim_of(c)).collect();
        let md: Vec<usize> = lfree.iter().map(|&c| dim_of(c)).collect();
        let nd: Vec<usize> = rfree.iter().map(|&c| dim_of(c)).collect();
        let (m, n, kk) = (prod(&md), prod(&nd), k.iter().map(|&c| dim_of(c)).product::<usize>());

        if fuse_after && batch.is_empty() && k.len() == 1 && rfree.len() == 1 && matches!(r, Operand::Const(..)) {
            if let Some(done) = self.pointwise_conv(l, r, (&labels_l, &labels_r, &out_labels), k[0], rfree[0])? {
                return Ok(done);
            }
        }
        let target_l: Vec<char> = batch.iter().chain(&lfree).chain(&k).copied().collect();
        let (la, la_dims) = self.arrange(l, &labels_l, &target_l)?;
        let Operand::Act(lid, _) = la else { return Err(self.bad("an activation operand", "a constant".into())) };
        let mid: Vec<char> = batch.iter().chain(&lfree).chain(&rfree).copied().collect();
        let mid_dims: Vec<usize> = bd.iter().chain(&md).chain(&nd).copied().collect();

        let y = if batch.is_empty() && matches!(r, Operand::Const(..)) {
            // Dense: x [.., K] · Wᵀ with W stored [N, K].
            let target_r: Vec<char> = rfree.iter().chain(&k).copied().collect();
            let (ra, _) = self.arrange(r, &labels_r, &target_r)?;
            let w = self.weight_from(&ra, "dense", &[n, kk])?;
            // Size-1 row axes after the first (a seq-first exporter's batch axis) are dropped:
            // `[T, K]` or `[1, T, K]`, the token layouts the fusion passes look for.
            let rows: Vec<usize> = md.iter().enumerate().filter(|&(i, &v)| i == 0 || v != 1).map(|(_, &v)| v).collect();
            let x_dims: Vec<usize> = rows.iter().copied().chain([kk]).collect();
            let x = self.reshape(lid, &la_dims, &x_dims)?;
            let bias = if fuse_after { self.dense_bias(&rfree, &out_labels, &out_shape, n)? } else { None };
            // An activation right after (bias) commutes with the reshapes and transposes below.
            let tail = OutletId::new(self.pending_bias.unwrap_or(self.node), 0);
            let act = match self.match_activation(tail).filter(|_| fuse_after) {
                Some((act, m)) => {
                    self.pending_act = Some((act_label("dense", act), m));
                    act
                }
                None => Activation::None,
            };
            let y = self.b.op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b: bias }, act, y }))?;
            let y_dims: Vec<usize> = rows.iter().copied().chain([n]).collect();
            self.reshape(y, &y_dims, &mid_dims)?
        } else {
            let a_dims: Vec<usize> = bd.iter().copied().chain([m, kk]).collect();
            let a = self.reshape(lid, &la_dims, &a_dims)?;
            let natural: Vec<char> = batch.iter().chain(&k).chain(&rfree).copied().collect();
            let kept: Vec<char> = labels_r.iter().copied().filter(|c| natural.contains(c)).collect();
            let (b, transpose_b) = match r {
                Operand::Act(id, s) if kept == natural => {
                    let dims: Vec<usize> = bd.iter().copied().chain([kk, n]).collect();
                    (self.reshape(*id, s, &dims)?, false)
                }
                _ => {
                    let target_r: Vec<char> = batch.iter().chain(&rfree).chain(&k).copied().collect();
                    let (ra, ra_dims) = self.arrange(r, &labels_r, &target_r)?;
                    let dims: Vec<usize> = bd.iter().copied().chain([n, kk]).collect();
                    let id = match ra {
                        Operand::Act(id, _) => self.reshape(id, &ra_dims, &dims)?,
                        c @ Operand::Const(..) => self.weight_from(&c, "matmul", &dims)?,
                    };
                    (id, true)
                }
            };
            let y = self.b.op(|y| Op::MatMul(MatMul { a, b, transpose_b, y }))?;
            let y_dims: Vec<usize> = bd.iter().copied().chain([m, n]).collect();
            self.reshape(y, &y_dims, &mid_dims)?
        };
        let order: Vec<char> = out_labels.iter().copied().filter(|c| mid.contains(c)).collect();
        let perm: Vec<usize> = order.iter().map(|c| mid.iter().position(|x| x == c).unwrap_or(0)).collect();
        let (y, y_dims) = self.transpose(y, &mid_dims, &perm)?;
        let y = self.reshape(y, &y_dims, &out_shape)?;
        let bias = self.pending_bias.take();
        if let Some(add) = bias {
            self.skip.insert(add);
            self.count_fused("dense+bias");
        }
        if let Some((name, m)) = self.pending_act.take() {
            self.take(&m, y, out_shape);
            self.count_fused(name);
            return Ok(());
        }
        let val = Val::Act { id: y, shape: out_shape, int: false };
        match bias {
            Some(add) => self.absorb(add, val),
            None => self.set_out(val),
        }
        Ok(())
    }

    /// A constant weight `W [N, K]` times an activation laid out `[1, K, H, W]` into an output
    /// laid out `[1.., N, H, W]` — a 1×1 convolution in NCHW, as tract rewrites them — lowers
    /// to `Conv2d` on `[K, 1, P]` (P = H·W, at least 2): the product
    /// runs in place, with no transposes to and from a channels-last layout. A constant
    /// per-channel Add right after becomes its bias. `None` (nothing added) for other layouts.
    fn pointwise_conv(
        &mut self,
        l: &Operand,
        r: &Operand,
        (labels_l, labels_r, out_labels): (&[char], &[char], &[char]),
        kc: char,
        nc: char,
    ) -> Res<Option<()>> {
        let Operand::Act(lid, sl) = l else { return Ok(None) };
        let out_shape = self.out_shape()?;
        let Some(pk) = labels_l.iter().position(|&c| c == kc) else { return Ok(None) };
        let spatial = &labels_l[pk + 1..];
        let p: usize = sl[pk + 1..].iter().product();
        // Only an NCHW map (rank 4, batch 1, channels on axis 1): a `[1, T, d]` product over the
        // tokens (an attention's W^A) has the same shape pattern and must stay a MatMul/Dense
        // for the mechanism fusions.
        if p < 2 || sl.len() != 4 || pk != 1 || sl[0] != 1 {
            return Ok(None);
        }
        // The output, size-1 axes aside, must be N then the spatial axes in the input's order.
        let order: Vec<char> = out_labels
            .iter()
            .zip(&out_shape)
            .filter(|&(c, &d)| d != 1 || *c == nc || spatial.contains(c))
            .map(|(&c, _)| c)
            .collect();
        let expect: Vec<char> = std::iter::once(nc).chain(spatial.iter().copied()).collect();
        if order != expect {
            return Ok(None);
        }
        let (kk, n) = (sl[pk], out_shape[out_labels.iter().position(|&c| c == nc).unwrap_or(0)]);
        let (ra, _) = self.arrange(r, labels_r, &[nc, kc])?;
        let w = self.weight_from(&ra, "conv", &[n, kk, 1, 1])?;
        let x = self.reshape(*lid, sl, &[kk, 1, p])?;
        let n_axis = out_labels.iter().position(|&c| c == nc).unwrap_or(0);
        let bias = self.channel_bias(&out_shape, n_axis, n)?;
        let tail = OutletId::new(bias.map_or(self.node, |(add, _)| add), 0);
        let act = self.match_activation(tail);
        let y = self.b.op(|y| {
            Op::Conv2d(Conv2d {
                clamp: None,
                residual: None,
                x,
                proj: Proj { w, b: bias.map(|(_, b)| b) },
                stride: [1, 1],
                pad: [0; 4],
                dilation: [1, 1],
                groups: 1,
                act: act.as_ref().map_or(Activation::None, |a| a.0),
                y,
            })
        })?;
        let y = self.reshape(y, &[n, 1, p], &out_shape)?;
        self.count_fused("pointwise conv");
        if bias.is_some() {
            self.count_fused("conv+bias");
        }
        self.finish_with(y, out_shape, bias.map(|(add, _)| add), act, "conv");
        Ok(Some(()))
    }

    /// Records `y` as the value of the lowered node, or of the bias Add and activation it
    /// absorbed (those nodes are skipped), counting the fused activation as `{what}+{act}`.
    pub(super) fn finish_with(
        &mut self,
        y: TensorId,
        shape: Vec<usize>,
        bias: Option<usize>,
        act: Option<(Activation, super::fuse::Matched)>,
        what: &str,
    ) {
        let val = Val::Act { id: y, shape: shape.clone(), int: false };
        match (bias, act) {
            (bias, Some((a, m))) => {
                if let Some(add) = bias {
                    self.skip.insert(add);
                }
                self.take(&m, y, shape);
                self.count_fused(act_label(what, a));
            }
            (Some(add), None) => self.absorb(add, val),
            (None, None) => self.set_out(val),
        }
    }

    /// The Add right after this node when it is the only consumer, keeps the output shape and
    /// adds a constant: its node id, the constant's outlet and value.
    fn const_add_after(&self, out_shape: &[usize]) -> Option<(usize, OutletId, Arc<Tensor>)> {
        let outlet = OutletId::new(self.node, 0);
        if self.model.output_outlets().is_ok_and(|o| o.contains(&outlet)) {
            return None;
        }
        let succ = self.model.outlet_successors(outlet);
        if succ.len() != 1 {
            return None;
        }
        let add = self.model.node(succ[0].node);
        let is_add = add.op_as::<TypedBinOp>().is_some_and(|b| b.0.name() == "Add");
        let same_shape = add.outputs[0].fact.shape.as_concrete() == Some(out_shape);
        if !is_add || !same_shape || add.inputs.len() != 2 {
            return None;
        }
        let other = add.inputs[1 - succ[0].slot];
        let t = self.model.outlet_fact(other).ok()?.konst.clone()?;
        Some((add.id, other, t))
    }

    /// The constant Add right after this node (its only consumer, same output shape) whose
    /// other operand holds `n` values along output axis `axis` (size 1 elsewhere): a
    /// per-channel bias. Returns the Add's node and the bias weight `[n]`.
    fn channel_bias(&mut self, out_shape: &[usize], axis: usize, n: usize) -> Res<Option<(usize, TensorId)>> {
        let Some((add, other, t)) = self.const_add_after(out_shape) else { return Ok(None) };
        // Right-aligned against the output: every axis but `axis` of size 1.
        let (rank, ts) = (out_shape.len(), t.shape());
        if t.len() != n || ts.len() > rank {
            return Ok(None);
        }
        let aligned = ts.iter().enumerate().all(|(i, &d)| d == 1 || (rank - ts.len() + i == axis && d == n));
        if !aligned {
            return Ok(None);
        }
        let v = f32s(&t)?;
        let id = self.weight(other, "bias", &[n], v)?;
        Ok(Some((add, id)))
    }

    /// A constant bias `[N]` added right after this contraction (its only consumer), when the
    /// Dense output's last axis is the output's last axis. Marks the Add as pending absorption.
    fn dense_bias(
        &mut self,
        rfree: &[char],
        out_labels: &[char],
        out_shape: &[usize],
        n: usize,
    ) -> Res<Option<TensorId>> {
        if rfree.len() != 1 || out_labels.last() != Some(&rfree[0]) {
            return Ok(None);
        }
        let Some((add, other, t)) = self.const_add_after(out_shape) else { return Ok(None) };
        let squeezed: Vec<usize> = t.shape().iter().copied().skip_while(|&d| d == 1).collect();
        if t.len() != n || !(squeezed == [n] || n == 1) {
            return Ok(None);
        }
        let v = f32s(&t)?;
        let id = self.weight(other, "bias", &[n], v)?;
        self.pending_bias = Some(add);
        Ok(Some(id))
    }

    /// Lowers a 1-D or 2-D float convolution (NCHW at batch 1, or CHW) to `Conv2d`; a 3-D one
    /// goes to [`Self::conv3d`].
    pub(super) fn conv(&mut self, op: &Conv) -> Res<()> {
        let node = self.model.node(self.node);
        if let Some(qp) = op.q_params {
            return self.conv_q(op, qp);
        }
        if node.inputs.len() != 3 {
            return Err(self.bad("data, kernel and bias inputs", format!("{} inputs", node.inputs.len())));
        }
        self.conv_float(op)
    }

    /// The float convolution of inputs 0 (data), 1 (kernel) and 2 (bias).
    pub(super) fn conv_float(&mut self, op: &Conv) -> Res<()> {
        let node = self.model.node(self.node);
        if matches!(self.val(node.inputs[1])?, Val::Act { .. }) {
            return self.conv_runtime_kernel(&op.pool_spec, op.kernel_fmt, op.group);
        }
        if op.pool_spec.kernel_shape.len() == 3 {
            return self.conv3d(op);
        }
        let ps = &op.pool_spec;
        // A 1-D convolution (text CNNs, tract's 1-D Downsample-free convs) runs as a 2-D one of
        // height 1; channels-last layouts (tract's declutter may pick them) are transposed around
        // Conv2d.
        let sp = self.spatial_in(ps, "convolution")?;
        let Spatial { x, ref cs, nd, images, .. } = sp;
        let Val::Const(kernel) = self.val(node.inputs[1])? else {
            return Err(self.bad("a constant kernel", "an activation".into()));
        };
        let perm: &[usize] = match (op.kernel_fmt, nd) {
            (KernelFormat::OIHW, 2) => &[0, 1, 2, 3],
            (KernelFormat::HWIO, 2) => &[3, 2, 0, 1],
            (KernelFormat::OHWI, 2) => &[0, 3, 1, 2],
            (KernelFormat::OIHW, _) => &[0, 1, 2],
            (KernelFormat::HWIO, _) => &[2, 1, 0],
            (KernelFormat::OHWI, _) => &[0, 2, 1],
        };
        let kernel = (*kernel).clone().permute_axes(perm).map_err(|e| self.bad("a conv kernel", format!("{e}")))?;
        let kernel = if nd == 1 {
            let k = kernel.shape().to_vec();
            kernel.into_shape(&[k[0], k[1], 1, k[2]]).map_err(|e| self.bad("a 1-D conv kernel", format!("{e}")))?
        } else {
            kernel
        };
        // N images stacked on the channel axis: the kernel (and bias) once per image, N times
        // the groups.
        let mut kdims = kernel.shape().to_vec();
        let kv = f32s(&kernel)?.repeat(images);
        kdims[0] *= images;
        let w = self.weight(node.inputs[1], "conv", &kdims, kv)?;
        let b = match self.val(node.inputs[2])? {
            Val::Const(t) => {
                let v = f32s(&t)?;
                if v.iter().all(|&x| x == 0.0) {
                    None
                } else {
                    let v = if v.len() == 1 { vec![v[0]; kdims[0]] } else { v.repeat(images) };
                    Some(self.weight(node.inputs[2], "bias", &[kdims[0]], v)?)
                }
            }
            Val::Act { .. } => return Err(self.bad("a constant bias", "an activation".into())),
        };
        let pads = ps.computed_padding(&cs[1..]);
        let (s, d) = (ps.strides(), ps.dilations());
        let (pad, stride, dilation) = if nd == 1 {
            ([0, pads[0].pad_before, 0, pads[0].pad_after].map(|p| p as u32), [1, s[0] as u32], [1, d[0] as u32])
        } else {
            (
                [pads[0].pad_before, pads[1].pad_before, pads[0].pad_after, pads[1].pad_after].map(|p| p as u32),
                [s[0] as u32, s[1] as u32],
                [d[0] as u32, d[1] as u32],
            )
        };
        let groups = u32::try_from(op.group * images).map_err(|_| self.unsupported("group count beyond u32"))?;
        let act = self.match_activation(OutletId::new(self.node, 0));
        let a = act.as_ref().map_or(Activation::None, |a| a.0);
        let y = self.b.op(|y| {
            Op::Conv2d(Conv2d {
                clamp: None,
                residual: None,
                x,
                proj: Proj { w, b },
                stride,
                pad,
                dilation,
                groups,
                act: a,
                y,
            })
        })?;
        let out = self.out_shape()?;
        let ys =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect::<Vec<_>>()).unwrap_or_default();
        let y = self.spatial_out(y, ys, &sp, &out)?;
        self.finish_with(y, out, None, act, "conv");
        Ok(())
    }
}

/// The name a fused activation is counted under: `{what}+{activation}`.
fn act_label(what: &str, act: Activation) -> &'static str {
    match (what, act) {
        ("dense", Activation::Relu) => "dense+relu",
        ("dense", Activation::Gelu | Activation::GeluTanh) => "dense+gelu",
        ("dense", Activation::Silu) => "dense+silu",
        ("dense", Activation::HardSwish) => "dense+hardswish",
        ("dense", Activation::HardSigmoid) => "dense+hardsigmoid",
        (_, Activation::Relu) => "conv+relu",
        (_, Activation::Gelu | Activation::GeluTanh) => "conv+gelu",
        (_, Activation::Silu) => "conv+silu",
        (_, Activation::HardSwish) => "conv+hardswish",
        (_, Activation::HardSigmoid) => "conv+hardsigmoid",
        (_, Activation::None) => "none",
    }
}
