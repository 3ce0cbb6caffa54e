//! ONNX MaxPool's `Indices` output (tract's `MaxPool` with index outputs, then tract-onnx's
//! `OnnxMaxPoolIndices`), 1-D, 2-D or 3-D, every window geometry the pool path takes (strides,
//! dilations, explicit, same and ceil-mode padding), exactly with generic ops.
//!
//! The values are the pool's own `Pool2d`s ([`Lowerer::pool`]). For the indices, every window
//! is gathered from the `[N·C, L]` planes (L the spatial size) by one `Gather` of constant
//! indices, `[N·C, P, T]` (P outputs, T taps); its `ArgMax` along the taps is the first tap
//! holding the maximum in the window's row-major order (onnxruntime's and tract's tie rule); the
//! one-hot of that tap (`Equal` with `0..T`) picks the tap's index from a constant `[P, T]`
//! table (`When` and a `Sum`: exact). A tap in the padding gathers the window's first input tap
//! and carries its index, so it never changes the maximum or the index chosen, and no padding
//! value is ever read.
//!
//! tract's `MaxPool` numbers a tap within its (image, channel) plane, row-major; the
//! `OnnxMaxPoolIndices` after it makes that ONNX's index into the whole input (the planes before
//! it counted, the spatial part column-major for `storage_order` 1). That op's type is private
//! to tract-onnx, so its map is read off by evaluating it on probes (every in-plane index in
//! plane 0; index 0 in every plane) and composed into the table and a constant per-plane
//! offset: the node is absorbed. Indices are f32 values, exact below 2^24 (a larger input is
//! refused). The graph is per sample: with the batch as the first axis, a run of B samples
//! numbers each sample's indices from its own start, as ONNX does at batch 1 (the conversion
//! report says so).

use super::{Lowerer, Res, Val};
use kestrel_rt_format::ops::{BinaryOp, Gather, Op, PoolKind, Reduce, ReduceOp};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::MaxPool;
use tract_onnx::tract_core::ops::nn::DataFormat;

/// The largest input whose indices are exact as f32 values.
const MAX_EXACT: usize = 1 << 24;

impl Lowerer<'_> {
    /// Lowers a `MaxPool` with its indices output; `Ok(false)` for anything else.
    pub(super) fn try_pool_indices(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<MaxPool>() else { return Ok(false) };
        if op.with_index_outputs.is_none() {
            return Ok(false);
        }
        if node.outputs.len() != 2 {
            return Err(self.bad("a MaxPool with values and indices", format!("{} outputs", node.outputs.len())));
        }
        let ps = op.pool_spec.clone();
        if !matches!(ps.data_format, DataFormat::NCHW | DataFormat::CHW) {
            return Err(self.unsupported(&format!("MaxPool indices in data format {:?}", ps.data_format)));
        }
        // The values: the pool path as it is.
        self.pool(&ps, PoolKind::Max, false)?;
        let sp = self.spatial_in(&ps, "pooling")?;
        let nd = sp.nd;
        let planes = sp.chw[0];
        let dims: Vec<usize> = sp.cs[1..].to_vec();
        let l: usize = dims.iter().product();
        if planes.saturating_mul(l) >= MAX_EXACT {
            return Err(self.unsupported(&format!(
                "MaxPool indices into {} elements (f32 holds indices exactly below 2^24)",
                planes.saturating_mul(l)
            )));
        }
        let geo = ps.computed_padding(&dims);
        let (strides, dilations) = (ps.strides(), ps.dilations());
        let k: Vec<usize> = ps.kernel_shape.to_vec();
        let outs: Vec<usize> = geo.iter().map(|g| g.convoluted).collect();
        let p: usize = outs.iter().product();
        let t: usize = k.iter().product();
        // Each window's taps as in-plane row-major indices; `None` in the padding.
        let mut src: Vec<u32> = Vec::with_capacity(p * t);
        let unravel = |mut i: usize, shape: &[usize]| -> Vec<usize> {
            let mut c = vec![0; shape.len()];
            for (a, &d) in shape.iter().enumerate().rev() {
                c[a] = i % d;
                i /= d;
            }
            c
        };
        for o in 0..p {
            let oc = unravel(o, &outs);
            let taps: Vec<Option<usize>> = (0..t)
                .map(|tap| {
                    let tc = unravel(tap, &k);
                    (0..nd).try_fold(0usize, |flat, a| {
                        let pos = (oc[a] * strides[a] + tc[a] * dilations[a]) as isize - geo[a].pad_before as isize;
                        (0..dims[a] as isize).contains(&pos).then(|| flat * dims[a] + pos as usize)
                    })
                })
                .collect();
            let Some(first) = taps.iter().flatten().next().copied() else {
                return Err(self.bad("every pooling window over some input", format!("window {oc:?} all padding")));
            };
            src.extend(taps.iter().map(|v| v.unwrap_or(first) as u32));
        }
        let here = OutletId::new(self.node, 1);
        let x = self.reshape(sp.x, &sp.chw, &[planes, l])?;
        let local: Vec<f32> = src.iter().map(|&v| v as f32).collect();
        let idx = self.weight_f32(here, "pool_taps", &[p, t], local.clone())?;
        let windows = self.b.op(|y| Op::Gather(Gather { x, idx, axis: 1, y }))?;
        let best =
            self.b.op(|y| Op::Reduce(Reduce { x: windows, op: ReduceOp::ArgMax, axis: 2, keep_dims: true, y }))?;
        let iota: Vec<f32> = (0..t).map(|i| i as f32).collect();
        let iota = self.weight_f32(here, "pool_tap_numbers", &[1, 1, t], iota)?;
        let onehot = self.binary_op(best, iota, BinaryOp::Equal)?;

        // The ONNX conversion after the pool, when it is the indices' only reader.
        let succ = self.model.outlet_successors(here);
        let onnx = match succ {
            [only] if self.model.node(only.node).op.name() == "OnnxMaxPoolIndices" => Some(only.node),
            _ => None,
        };
        let (table, offsets, target) = match onnx {
            Some(n) => {
                let (map, offsets) = self.probe_indices(n, planes, l)?;
                let table: Vec<f32> = src.iter().map(|&v| map[v as usize]).collect();
                (table, Some(offsets), n)
            }
            None => (local, None, self.node),
        };
        let table = self.weight_f32(here, "pool_tap_indices", &[1, p, t], table)?;
        let picked = self.binary_op(table, onehot, BinaryOp::When)?;
        let mut y = self.b.op(|y| Op::Reduce(Reduce { x: picked, op: ReduceOp::Sum, axis: 2, keep_dims: true, y }))?;
        if let Some(off) = offsets {
            let off = self.weight_f32(here, "pool_plane_offsets", &[planes, 1, 1], off)?;
            y = self.binary_op(y, off, BinaryOp::Add)?;
        }
        let f = &self.model.node(target).outputs[if onnx.is_some() { 0 } else { 1 }].fact;
        let shape = f
            .shape
            .as_concrete()
            .map(|s| s.to_vec())
            .ok_or_else(|| self.bad("a concrete indices shape", format!("{f:?}")))?;
        if shape.iter().product::<usize>() != planes * p {
            return Err(self.bad(&format!("{} indices", planes * p), format!("shape {shape:?}")));
        }
        let y = self.reshape(y, &[planes, p, 1], &shape)?;
        let val = Val::Act { id: y, shape, int: false };
        if sp.images == 1
            && node.inputs.first().is_some_and(|i| self.model.outlet_fact(*i).is_ok_and(|f| f.rank() == nd + 2))
        {
            // The per-sample graph holds one image: a run of B samples numbers each within its
            // own sample.
            self.notices.push(format!(
                "MaxPool `{}`: its indices count from the start of each sample (ONNX's at batch 1); \
                 in a run of several samples, sample n's are n·C·{} below ONNX's over the whole batch",
                node.name,
                dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("·")
            ));
        }
        match onnx {
            Some(n) => {
                self.absorb(n, val);
                self.count_fused("maxpool-onnx-indices");
            }
            None => {
                self.vals.insert(here, val);
            }
        }
        self.count_fused("maxpool-indices");
        Ok(true)
    }

    /// The map tract-onnx's `OnnxMaxPoolIndices` (node `n`) applies, read off by evaluating it:
    /// the index it gives each in-plane index of plane 0, and each plane's offset.
    fn probe_indices(&self, n: usize, planes: usize, l: usize) -> Res<(Vec<f32>, Vec<f32>)> {
        let op = &self.model.node(n).op;
        let eval = |shape: &[usize], v: Vec<i64>| -> Res<Vec<i64>> {
            let t = Tensor::from_shape(shape, &v).map_err(|e| self.bad("a probe tensor", format!("{e}")))?;
            let out = kestrel_rt_cpu::panics::catch_quietly(|| op.eval_out_of_plan(tvec![t.into_tvalue()]))
                .map_err(|e| self.bad("an index conversion tract evaluates", e))?
                .map_err(|e| self.bad("an index conversion tract evaluates", format!("{e}")))?
                .ok_or_else(|| self.bad("a stateless index conversion", "a stateful op".into()))?;
            let y = out.into_iter().next().ok_or_else(|| self.bad("one output", "none".into()))?;
            let y = y.cast_to::<i64>().map_err(|e| self.bad("integer indices", format!("{e}")))?;
            let v = y.try_as_plain_ram().and_then(|r| r.as_slice::<i64>().map(|s| s.to_vec()));
            v.map_err(|e| self.bad("integer indices", format!("{e}")))
        };
        let within = eval(&[1, 1, l], (0..l as i64).collect())?;
        let bases = eval(&[planes, 1, 1], vec![0; planes])?;
        let bad = within.len() != l
            || bases.len() != planes
            || within.iter().chain(&bases).any(|&v| v < 0 || v as usize >= MAX_EXACT);
        if bad {
            return Err(self.bad(
                &format!("indices into {} elements", planes * l),
                format!("{} and {} probe values", within.len(), bases.len()),
            ));
        }
        let offsets = bases.iter().map(|&b| (b - within[0]) as f32).collect();
        Ok((within.iter().map(|&v| v as f32).collect(), offsets))
    }
}
