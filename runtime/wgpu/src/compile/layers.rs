//! Dispatches of the layer and generic ops.

use super::{numel, split_per, Ctx, Dispatch, Params, Region};
use crate::kernels::Kernel;
use crate::GpuError;
use kestrel_cpu::kernels::conv::Conv2dParams;
use kestrel_cpu::kernels::pool::Pool2dParams;
use kestrel_cpu::kernels::rnn::{RnnCell, RnnParams};
use kestrel_cpu::kernels::slice::SliceParams;
use kestrel_format::ops::{NormAxis, Op, TensorId};
use kestrel_format::{TensorKind, MAX_RANK};

pub(super) fn compile(ctx: &mut Ctx<'_, '_>, node: u32, op: &Op) -> Result<Vec<Dispatch>, GpuError> {
    let shape = |id| ctx.info(id).map(|t| t.shape);
    Ok(match *op {
        Op::Dense(o) => {
            let x = shape(o.x)?;
            let proj = ctx.proj(o.proj)?;
            let out = ctx.info(o.proj.w)?.shape.dim(0);
            let rows = x.numel().unwrap_or(0) / x.last().max(1);
            vec![ctx.dense(ctx.act(o.x)?, rows, out, proj, o.act as u32, ctx.act(o.y)?, None)?]
        }
        Op::LayerNorm(o) => {
            let x = shape(o.x)?;
            // Rows of d features `inner` apart: the last axis, or channels-first [C, S…].
            let (d, inner) = match o.axis {
                NormAxis::Last => (x.last(), 1),
                NormAxis::Channels => {
                    let c = x.dim(0);
                    (c, x.numel().unwrap_or(0) / c.max(1))
                }
            };
            // One thread or one workgroup (`row_split`) per row (per position for channels-first).
            let rows = x.numel().unwrap_or(0) / d.max(1);
            let split = ctx.row_split(rows, d, inner == 1);
            let mut p = Params::new(split_per(rows, split)?)?
                .u(2, ctx.act(o.x)?.base)?
                .u(3, ctx.act(o.y)?.base)?
                .u(4, d)?
                .f(5, o.eps)
                .b(6, o.beta.is_some())
                .u(7, inner)?
                .w(8, ctx.weight(o.gamma)?);
            if let Some(b) = o.beta {
                p = p.w(12, ctx.weight(b)?);
            }
            vec![p.done(if split { Kernel::LayerNormSplit } else { Kernel::LayerNorm })]
        }
        Op::Unary(o) => {
            let n = numel(&ctx.info(o.x)?)?;
            vec![Params::new(n)?
                .u(2, ctx.act(o.x)?.base)?
                .u(3, ctx.act(o.y)?.base)?
                .u(4, o.op as usize)?
                .done(Kernel::Unary)]
        }
        Op::Binary(o) => {
            let y = shape(o.y)?;
            let r = y.rank();
            let mut p = Params::new(y.numel().unwrap_or(0))?.u(2, ctx.act(o.y)?.base)?.u(3, o.op as usize)?.u(4, r)?;
            for k in 0..r {
                p = p.u(5 + k, y.dim(k))?;
            }
            p = operand(ctx, p, 11, o.a, &broadcast_strides(&dims(&shape(o.a)?), r))?;
            p = operand(ctx, p, 24, o.b, &broadcast_strides(&dims(&shape(o.b)?), r))?;
            vec![p.done(Kernel::Strided)]
        }
        Op::Softmax(o) => {
            let x = shape(o.x)?;
            let n = x.last();
            vec![ctx.softmax(ctx.act(o.x)?.base, ctx.act(o.y)?.base, x.numel().unwrap_or(0) / n.max(1), n)?]
        }
        Op::PatchEmbed(o) => {
            let x = shape(o.x)?;
            let (c, h, w, p) = (x.dim(0), x.dim(1), x.dim(2), o.patch as usize);
            let out = ctx.info(o.proj.w)?.shape.dim(0);
            let (xr, proj, y) = (ctx.act(o.x)?, ctx.proj(o.proj)?, ctx.act(o.y)?);
            ctx.patch_dense(xr, (c, h, w, p), out, proj, 0, y, false)?
        }
        Op::Embedding(o) => {
            let ids = shape(o.ids)?;
            let table = ctx.info(o.table)?;
            let (vocab, d) = table.shape.as_matrix().ok_or_else(|| GpuError::Model("table shape".into()))?;
            let mut p = Params::new(ids.dim(0) * d)?
                .u(2, ctx.act(o.ids)?.base)?
                .u(3, ctx.act(o.y)?.base)?
                .u(4, ids.dim(0))?
                .u(5, d)?
                .u(6, vocab)?
                .b(7, o.pos.is_some())
                .w(8, ctx.weight(o.table)?);
            if let Some(pos) = o.pos {
                p = p.w(12, ctx.weight(pos)?);
            }
            vec![p.done(Kernel::Embedding)]
        }
        Op::Reduce(o) => {
            let x = shape(o.x)?;
            let a = o.axis as usize;
            let outer: usize = x.dims()[..a].iter().map(|&v| v as usize).product();
            let inner: usize = x.dims()[a + 1..].iter().map(|&v| v as usize).product();
            let (n, outputs) = (x.dim(a), outer * inner);
            let split = ctx.row_split(outputs, n, inner == 1);
            vec![Params::new(split_per(outputs, split)?)?
                .u(2, ctx.act(o.x)?.base)?
                .u(3, ctx.act(o.y)?.base)?
                .u(4, o.op as usize)?
                .u(5, n)?
                .u(6, inner)?
                .done(if split { Kernel::ReduceSplit } else { Kernel::Reduce })]
        }
        Op::Reshape(_) => Vec::new(),
        Op::Transpose(o) => {
            let x = shape(o.x)?;
            let y = shape(o.y)?;
            let r = x.rank();
            let xs = contiguous_strides(&dims(&x));
            let mut src = [0usize; MAX_RANK];
            for k in 0..r {
                src[k] = xs[o.perm[k] as usize];
            }
            let mut p = Params::new(y.numel().unwrap_or(0))?.u(2, ctx.act(o.y)?.base)?.u(3, 100)?.u(4, r)?;
            for k in 0..r {
                p = p.u(5 + k, y.dim(k))?;
            }
            vec![operand(ctx, p, 11, o.x, &src[..r])?.done(Kernel::Strided)]
        }
        Op::Slice(o) => {
            // The strided copy over `[outer, len, inner]`, reading `x` from the window's start
            // with the window's step, zeros outside `offset..offset + count` (op 101).
            let p = SliceParams::new(&shape(o.x)?, &o).map_err(|e| GpuError::Model(e.to_string()))?;
            let x = ctx.act(o.x)?;
            let p = Params::new(p.out_len())?
                .u(2, ctx.act(o.y)?.base)?
                .u(3, 101)?
                .u(4, 3)?
                .u(5, p.outer)?
                .u(6, p.len)?
                .u(7, p.inner)?
                .u(11, 0)?
                .u(12, x.base + p.start * p.inner)?
                .u(13, x.stride)?
                .u(14, p.n * p.inner)?
                .u(15, p.step * p.inner)?
                .u(16, 1)?
                .u(37, 1)?
                .u(38, p.offset)?
                .u(39, p.count)?;
            vec![p.done(Kernel::Strided)]
        }
        Op::MatMul(o) => {
            let (a, b, y) = (shape(o.a)?, shape(o.b)?, shape(o.y)?);
            let (da, db) = (dims(&a), dims(&b));
            let (ra, rb) = (da.len(), db.len());
            let (m, k) = (da[ra - 2], da[ra - 1]);
            let n = if o.transpose_b { db[rb - 2] } else { db[rb - 1] };
            let batch_rank = y.rank() - 2;
            let batches: usize = y.dims()[..batch_rank].iter().map(|&v| v as usize).product();
            let sa = broadcast_strides(&da[..ra - 2], batch_rank);
            let sb = broadcast_strides(&db[..rb - 2], batch_rank);
            let a_reg = ctx.act(o.a)?;
            let mut p = Params::new(batches * m * n)?
                .region(2, a_reg)?
                .u(7, ctx.act(o.y)?.base)?
                .u(8, m)?
                .u(9, k)?
                .u(10, n)?
                .b(11, o.transpose_b)
                .u(12, batch_rank)?;
            for ax in 0..batch_rank {
                p = p.u(13 + ax, y.dim(ax))?.u(19 + ax, sa[ax] * m * k)?.u(25 + ax, sb[ax] * k * n)?;
            }
            p = if ctx.info(o.b)?.kind == TensorKind::Weight {
                p.u(4, 1)?.w(31, ctx.weight(o.b)?)
            } else {
                p.region(5, ctx.act(o.b)?)?
            };
            // Tiled through workgroup memory where the 32 × 32 output tiles fill the device, as
            // dense layers (`Tuning::dense_tile_min_workgroups`), and a tile has rows enough.
            let tiles = batches.saturating_mul(m.div_ceil(32)).saturating_mul(n.div_ceil(32));
            if m >= super::TILE_MIN_ROWS && ctx.tiles_fill(tiles) {
                let per = tiles.checked_mul(crate::kernels::WORKGROUP as usize);
                let per = per.ok_or_else(|| GpuError::Model(format!("a {m}x{k}x{n} product overflows")))?;
                let mut d = p.u(35, batches * m * n)?.done(Kernel::MatMulTile);
                d.params[1] = super::word(per)?;
                vec![d]
            } else {
                vec![p.done(Kernel::MatMul)]
            }
        }
        Op::Conv2d(o) => {
            let u = |v: u32| v as usize;
            let c = Conv2dParams::new(
                &shape(o.x)?,
                &shape(o.proj.w)?,
                [u(o.stride[0]), u(o.stride[1])],
                [u(o.pad[0]), u(o.pad[1]), u(o.pad[2]), u(o.pad[3])],
                [u(o.dilation[0]), u(o.dilation[1])],
                u(o.groups),
            )
            .map_err(|e| GpuError::Model(e.to_string()))?;
            let (w, b) = ctx.proj(o.proj)?;
            let vals = [
                c.c,
                c.h,
                c.w,
                c.o,
                c.kh,
                c.kw,
                c.stride[0],
                c.stride[1],
                c.pad[0],
                c.pad[1],
                c.dilation[0],
                c.dilation[1],
                c.groups,
                c.oh,
                c.ow,
            ];
            // A patchifying convolution (kernel = stride, no padding or dilation, one group,
            // the map divided into whole patches) is a patch gather and a dense layer over the
            // patches, written channels-first: its dot products then split across threads like
            // any dense layer's (a ViT's patch embedding at batch 1 is otherwise a few hundred
            // threads each walking every tap).
            let patchify = c.kh == c.kw
                && c.stride == [c.kh, c.kw]
                && c.pad == [0, 0, 0, 0]
                && c.dilation == [1, 1]
                && c.groups == 1
                && c.h % c.kh == 0
                && c.w % c.kw == 0;
            if patchify {
                let (xr, y) = (ctx.act(o.x)?, ctx.act(o.y)?);
                return ctx.patch_dense(xr, (c.c, c.h, c.w, c.kh), c.o, (w, b), o.act as u32, y, true);
            }
            // Tiled through workgroup memory (implicit GEMM) where the tiles fill the device
            // (`Tuning::dense_tile_min_workgroups`, as dense layers) and a group has channels
            // enough for them; register-blocked (4 channels × 4 columns per thread) where a
            // group's output channels come in fours; one thread per output otherwise.
            let n = c.o / c.groups;
            let tiles = c.groups * (c.oh * c.ow).div_ceil(32) * n.div_ceil(32);
            let tiled = n >= CONV_TILE_MIN_CHANNELS
                && c.oh * c.ow >= ctx.tuning.conv_tile_min_pixels
                && tiles.saturating_mul(ctx.cap) >= ctx.tuning.dense_tile_min_workgroups;
            let blocked = n.is_multiple_of(4);
            let per = if tiled {
                tiles * crate::kernels::WORKGROUP as usize
            } else if blocked {
                (c.o / 4) * c.oh * c.ow.div_ceil(4)
            } else {
                c.o * c.oh * c.ow
            };
            let mut p = Params::new(per)?.u(2, ctx.act(o.x)?.base)?.u(3, ctx.act(o.y)?.base)?;
            for (i, v) in vals.into_iter().enumerate() {
                p = p.u(4 + i, v)?;
            }
            p = p.b(19, b.is_some()).w(20, w).u(28, o.act as usize)?;
            if let Some(b) = b {
                p = p.w(24, b);
            }
            vec![p.done(if tiled {
                Kernel::Conv2dTile
            } else if blocked {
                Kernel::Conv2dBlock
            } else {
                Kernel::Conv2d
            })]
        }
        Op::Pool2d(o) => {
            let c = Pool2dParams::of(&o, &shape(o.x)?).map_err(|e| GpuError::Model(e.to_string()))?;
            let vals = [
                c.c,
                c.h,
                c.w,
                c.kind as usize,
                c.kh,
                c.kw,
                c.stride[0],
                c.stride[1],
                c.pad[0],
                c.pad[1],
                c.dilation[0],
                c.dilation[1],
                usize::from(c.count_include_pad),
                c.oh,
                c.ow,
            ];
            let mut p = Params::new(c.c * c.oh * c.ow)?.u(2, ctx.act(o.x)?.base)?.u(3, ctx.act(o.y)?.base)?;
            for (i, v) in vals.into_iter().enumerate() {
                p = p.u(4 + i, v)?;
            }
            vec![p.done(Kernel::Pool2d)]
        }
        Op::Lstm(o) => {
            let p = RnnParams::of_lstm(&o, |id| shape(id).map_err(|_| rnn_lookup(op)))
                .map_err(|e| GpuError::Model(e.to_string()))?;
            rnn(ctx, &p, o.x, o.y, [Some(o.w), Some(o.r), Some(o.b), o.h0, o.c0])?
        }
        Op::Gru(o) => {
            let p = RnnParams::of_gru(&o, |id| shape(id).map_err(|_| rnn_lookup(op)))
                .map_err(|e| GpuError::Model(e.to_string()))?;
            rnn(ctx, &p, o.x, o.y, [Some(o.w), Some(o.r), Some(o.b), o.h0, None])?
        }
        // Exhaustive: an op added to the format fails to compile here until it is lowered.
        Op::Attention(_) | Op::AftFull(_) | Op::AftLocal(_) | Op::AftSimple(_) | Op::AftConv(_) | Op::Fastformer(_) => {
            return Err(GpuError::Model(format!(
                "node {node}: {} is a mechanism (lowered in mechanisms.rs)",
                op.name()
            )))
        }
    })
}

fn dims(s: &kestrel_format::Shape) -> Vec<usize> {
    s.dims().iter().map(|&v| v as usize).collect()
}

fn contiguous_strides(d: &[usize]) -> Vec<usize> {
    let mut st = vec![0; d.len()];
    let mut acc = 1;
    for i in (0..d.len()).rev() {
        st[i] = acc;
        acc *= d[i];
    }
    st
}

/// Strides with which an operand of dims `src` is read along each axis of a rank-`r` output
/// (numpy broadcasting: 0 on a missing or size-1 axis).
fn broadcast_strides(src: &[usize], r: usize) -> Vec<usize> {
    let mut st = vec![0; r];
    let off = r - src.len();
    let cs = contiguous_strides(src);
    for j in 0..src.len() {
        st[off + j] = if src[j] == 1 { 0 } else { cs[j] };
    }
    st
}

/// The Add after a slice: a `Slice` whose output only the next node reads (or a reshape of it
/// that only the node after reads), an element-wise `Add` of it and a tensor of as many elements
/// (a weight, or an activation: a ViT's class-token constant plus position embedding), runs in
/// the slice's dispatch (the window plus operand b, P40), which writes the Add's output; the Add
/// (and the reshape) dispatch nothing. Only where the arena allows, as the residual epilogue: the
/// Add's output must not overlap the slice's input, and may overlap an activation operand only
/// exactly. Returns how many following nodes were absorbed.
pub(super) fn slice_add_epilogue(
    ctx: &Ctx<'_, '_>,
    node: u32,
    op: &Op,
    dispatches: &mut [Dispatch],
    uses: &std::collections::HashMap<TensorId, u32>,
) -> Result<usize, GpuError> {
    let (Op::Slice(s), [d]) = (op, dispatches) else { return Ok(0) };
    if d.kernel != Kernel::Strided || d.params[3] != 101 {
        return Ok(0);
    }
    let Some((next, fed, b, other)) = super::add_after(ctx, node, s.y, uses)? else { return Ok(0) };
    let (ft, ot, bt) = (ctx.info(fed)?, ctx.info(other)?, ctx.info(b.y)?);
    let numel = ft.shape.numel();
    if ot.shape.numel() != numel || bt.shape.numel() != numel {
        return Ok(0);
    }
    let (x, y) = (ctx.act(s.x)?, ctx.act(b.y)?);
    let r = if ot.kind == TensorKind::Activation { Some(ctx.act(other)?) } else { None };
    if !super::fused_add_fits(y, x, r, ctx.cap) {
        return Ok(0);
    }
    // The dispatch's output view is [outer, len, inner]; the operand, as many elements, is read
    // with that view's contiguous strides.
    let view = [d.params[5] as usize, d.params[6] as usize, d.params[7] as usize];
    let p = operand(ctx, Params(d.params), 24, other, &contiguous_strides(&view))?.u(2, y.base)?.u(40, 1)?;
    *d = p.done(Kernel::Strided);
    Ok((next - node) as usize)
}

/// Writes an operand block (see `operand` in `elementwise.wgsl`) at word `o`.
fn operand(ctx: &Ctx<'_, '_>, mut p: Params, o: usize, id: u32, strides: &[usize]) -> Result<Params, GpuError> {
    for (k, &s) in strides.iter().enumerate() {
        p = p.u(o + 3 + k, s)?;
    }
    if ctx.info(id)?.kind == TensorKind::Weight {
        Ok(p.u(o, 1)?.w(o + 9, ctx.weight(id)?))
    } else {
        let r: Region = ctx.act(id)?;
        p.u(o + 1, r.base)?.u(o + 2, r.stride)
    }
}

fn rnn_lookup(op: &Op) -> kestrel_cpu::error::ShapeError {
    kestrel_cpu::error::ShapeError::Invalid { op: op.name(), what: "tensor lookup failed" }
}

/// An LSTM/GRU: the input projection of every step and both directions as one dense dispatch
/// into scratch (`[T, dirs·G·H]` per sample, no bias), then the recurrence (`rnn.wgsl`), one
/// workgroup per sample and direction. `ids`: w, r, b, h0, c0.
fn rnn(
    ctx: &mut Ctx<'_, '_>,
    p: &RnnParams,
    x: TensorId,
    y: TensorId,
    ids: [Option<TensorId>; 5],
) -> Result<Vec<Dispatch>, GpuError> {
    let [Some(w), Some(r), Some(b), h0, c0] = ids else {
        return Err(GpuError::Model("a recurrent node without its weights".into()));
    };
    let (dirs, g, h) = (p.dirs(), p.gate_rows(), p.hidden);
    let xw = ctx.scratch(p.t * dirs * g);
    let state = ctx.scratch(dirs * (g + 3 * h));
    let project = ctx.dense(ctx.act(x)?, p.t, dirs * g, (ctx.weight(w)?, None), 0, xw, None)?;
    let yr = ctx.act(y)?;
    let mut q = Params::new(dirs * crate::kernels::WORKGROUP as usize)?
        .region(2, xw)?
        .region(4, yr)?
        .region(6, state)?
        .u(8, p.t)?
        .u(9, h)?
        .u(10, dirs)?
        .u(11, usize::from(p.cell == RnnCell::Gru))?
        .u(12, p.direction as usize)?
        .u(13, p.output as usize)?
        .b(14, h0.is_some())
        .b(15, c0.is_some())
        .w(16, ctx.weight(r)?)
        .w(20, ctx.weight(b)?);
    if let Some(h0) = h0 {
        q = q.w(24, ctx.weight(h0)?);
    }
    if let Some(c0) = c0 {
        q = q.w(28, ctx.weight(c0)?);
    }
    Ok(vec![project, q.done(Kernel::Rnn)])
}

/// Fewest output channels per group for the tiled convolution (`conv2d_tile`'s tiles are 32
/// channels wide: a depthwise layer would stage 31 clamped channels per useful one).
const CONV_TILE_MIN_CHANNELS: usize = 16;
