//! Dispatches of the layer and generic ops.

use super::{numel, split_per, Ctx, Dispatch, Params};
use crate::kernels::Kernel;
use crate::params::{
    chain, concat, conv, embedding, gather, layer_norm, linear_attn, matmul, matmul_tile, pool, reduce, rnn, sdpa,
    strided, unary, window, Field,
};
use crate::GpuError;
use kestrel_rt_core::error::ShapeError;
use kestrel_rt_core::params::{
    ConcatParams, Conv2dParams, GatherParams, LinearAttnParams, Pool2dParams, RnnCell, RnnParams, SliceParams,
};
use kestrel_rt_format::ops::{Activation, GruReset, LayerOp, LinearOutput, NormAxis, Op, TensorId};
use kestrel_rt_format::{TensorKind, MAX_RANK};

pub(super) fn compile(ctx: &mut Ctx<'_, '_>, node: u32, op: &Op) -> Result<Vec<Dispatch>, GpuError> {
    let shape = |id| ctx.info(id).map(|t| t.shape);
    let Some(layer) = op.layer() else {
        return Err(GpuError::Model(format!("node {node}: {} is a mechanism (lowered in mechanisms.rs)", op.name())));
    };
    Ok(match layer {
        // A sequential selection whose output size the data decide (a run-time dim, which this
        // backend refuses anyway): the CPU runs it.
        LayerOp::Nms(_) => {
            return Err(GpuError::Unsupported(format!(
                "node {node}: non-maximum suppression (Nms) runs on the CPU backend only"
            )))
        }
        LayerOp::Dense(o) => {
            let x = shape(o.x)?;
            let proj = ctx.proj(o.proj)?;
            let out = ctx.info(o.proj.w)?.shape.dim(0);
            let rows = x.numel().unwrap_or(0) / x.last().max(1);
            vec![ctx.dense(ctx.act(o.x)?, rows, out, proj, o.act as u32, ctx.act(o.y)?, None)?]
        }
        LayerOp::LayerNorm(o) => {
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
                .set(layer_norm::x_base, ctx.act(o.x)?.base)?
                .set(layer_norm::y_base, ctx.act(o.y)?.base)?
                .set(layer_norm::d, d)?
                .set(layer_norm::eps, o.eps)?
                .set(layer_norm::has_beta, o.beta.is_some())?
                .set(layer_norm::inner, inner)?
                .set(layer_norm::gamma, ctx.weight(o.gamma)?)?;
            if let Some(b) = o.beta {
                p = p.set(layer_norm::beta, ctx.weight(b)?)?;
            }
            vec![p.done(if split { Kernel::LayerNormSplit } else { Kernel::LayerNorm })]
        }
        LayerOp::Unary(o) => {
            let n = numel(&ctx.info(o.x)?)?;
            vec![Params::new(n)?
                .set(unary::x_base, ctx.act(o.x)?.base)?
                .set(unary::y_base, ctx.act(o.y)?.base)?
                .set(unary::op, o.op as usize)?
                .done(Kernel::Unary)]
        }
        LayerOp::Chain(o) => {
            let n = numel(&ctx.info(o.x)?)?;
            let mut p = Params::new(n)?
                .set(chain::x_base, ctx.act(o.x)?.base)?
                .set(chain::y_base, ctx.act(o.y)?.base)?
                .set(chain::n_steps, o.steps.as_slice().len())?
                .set(chain::channels, o.channels as usize)?
                .set(chain::inner, o.inner as usize)?
                .set_all(chain::steps, o.steps.words().map(|w| w as usize))?;
            if let Some(c) = o.c {
                p = p.set(chain::c, ctx.weight(c)?)?;
            }
            vec![p.done(Kernel::Chain)]
        }
        LayerOp::Binary(o) => {
            let y = shape(o.y)?;
            let r = y.rank();
            let p = strided_out(ctx, o.y, o.op as usize)?;
            let p = operand(ctx, p, OPERAND_A, o.a, &broadcast_strides(&dims(&shape(o.a)?), r))?;
            vec![operand(ctx, p, OPERAND_B, o.b, &broadcast_strides(&dims(&shape(o.b)?), r))?.done(Kernel::Strided)]
        }
        LayerOp::Softmax(o) => {
            let x = shape(o.x)?;
            let n = x.last();
            vec![ctx.softmax(ctx.act(o.x)?.base, ctx.act(o.y)?.base, x.numel().unwrap_or(0) / n.max(1), n)?]
        }
        LayerOp::PatchEmbed(o) => {
            let x = shape(o.x)?;
            let (c, h, w, p) = (x.dim(0), x.dim(1), x.dim(2), o.patch as usize);
            let out = ctx.info(o.proj.w)?.shape.dim(0);
            let (xr, proj, y) = (ctx.act(o.x)?, ctx.proj(o.proj)?, ctx.act(o.y)?);
            ctx.patch_dense(xr, (c, h, w, p), out, proj, 0, y, false)?
        }
        LayerOp::Embedding(o) => {
            let ids = shape(o.ids)?;
            let table = ctx.info(o.table)?;
            let (vocab, d) = table.shape.as_matrix().ok_or_else(|| GpuError::Model("table shape".into()))?;
            let mut p = Params::new(ids.dim(0) * d)?
                .set(embedding::ids_base, ctx.act(o.ids)?.base)?
                .set(embedding::y_base, ctx.act(o.y)?.base)?
                .set(embedding::tokens, ids.dim(0))?
                .set(embedding::d, d)?
                .set(embedding::vocab, vocab)?
                .set(embedding::has_pos, o.pos.is_some())?
                .set(embedding::table, ctx.weight(o.table)?)?;
            if let Some(pos) = o.pos {
                p = p.set(embedding::pos, ctx.weight(pos)?)?;
            }
            vec![p.done(Kernel::Embedding)]
        }
        LayerOp::Reduce(o) => {
            let x = shape(o.x)?;
            let a = o.axis as usize;
            let outer: usize = x.dims()[..a].iter().map(|&v| v as usize).product();
            let inner: usize = x.dims()[a + 1..].iter().map(|&v| v as usize).product();
            let (n, outputs) = (x.dim(a), outer * inner);
            // An index reduction scans its row in order on one thread.
            let split = o.op.arg().is_none() && ctx.row_split(outputs, n, inner == 1);
            vec![Params::new(split_per(outputs, split)?)?
                .set(reduce::x_base, ctx.act(o.x)?.base)?
                .set(reduce::y_base, ctx.act(o.y)?.base)?
                .set(reduce::op, o.op as usize)?
                .set(reduce::n, n)?
                .set(reduce::inner, inner)?
                .done(if split { Kernel::ReduceSplit } else { Kernel::Reduce })]
        }
        LayerOp::Reshape(_) => Vec::new(),
        LayerOp::Transpose(o) => {
            let x = shape(o.x)?;
            let r = x.rank();
            let xs = contiguous_strides(&dims(&x));
            let mut src = [0usize; MAX_RANK];
            for k in 0..r {
                src[k] = xs[o.perm[k] as usize];
            }
            let p = strided_out(ctx, o.y, STRIDED_COPY)?;
            vec![operand(ctx, p, OPERAND_A, o.x, &src[..r])?.done(Kernel::Strided)]
        }
        LayerOp::Slice(o) => {
            // The strided copy over `[outer, len, inner]`, reading `x` from the window's start
            // with the window's step, zeros outside `offset..offset + count` (op 101).
            let p = SliceParams::new(&shape(o.x)?, o).map_err(|e| GpuError::Model(e.to_string()))?;
            let x = ctx.act(o.x)?;
            let window = Params::new(p.out_len())?
                .set(strided::y_base, ctx.act(o.y)?.base)?
                .set(strided::op, STRIDED_WINDOW)?
                .set(strided::rank, 3)?
                .set_all(strided::dims, [p.outer, p.len, p.inner])?
                .set(strided::a_kind, 0)?
                .set(strided::a, super::Region { base: x.base + p.start * p.inner, stride: x.stride })?
                .set_all(strided::a_strides, [p.n * p.inner, p.step * p.inner, 1])?
                .set(strided::window_axis, 1)?
                .set(strided::window_first, p.offset)?
                .set(strided::window_count, p.count)?;
            vec![window.done(Kernel::Strided)]
        }
        LayerOp::Concat(o) => {
            // One dispatch per piece, each copying its `[outer, n_i · inner]` rows into place.
            let p = ConcatParams::new(o, |t| {
                ctx.info(t)
                    .map(|i| i.shape)
                    .map_err(|_| ShapeError::Invalid { op: "Concat", what: "a piece is not in the tensor table" })
            })
            .map_err(|e| GpuError::Model(e.to_string()))?;
            let y = ctx.act(o.y)?;
            let mut out = Vec::with_capacity(p.pieces);
            for (i, &x) in o.inputs().iter().enumerate() {
                if p.piece_len(i) == 0 {
                    continue;
                }
                out.push(
                    Params::new(p.piece_len(i))?
                        .set(concat::x, ctx.act(x)?)?
                        .set(concat::y, y)?
                        .set(concat::run, p.n[i] * p.inner)?
                        .set(concat::row, p.total * p.inner)?
                        .set(concat::at, p.offset[i] * p.inner)?
                        .done(Kernel::Concat),
                );
            }
            out
        }
        LayerOp::Gather(o) => {
            // One thread per output element of `[outer, k, inner]`.
            let p =
                GatherParams::new(&shape(o.x)?, &shape(o.idx)?, o.axis).map_err(|e| GpuError::Model(e.to_string()))?;
            let constant = ctx.info(o.idx)?.kind == TensorKind::Weight;
            let mut g = Params::new(p.out_len())?
                .set(gather::x, ctx.act(o.x)?)?
                .set(gather::y_base, ctx.act(o.y)?.base)?
                .set(gather::n, p.n)?
                .set(gather::k, p.k)?
                .set(gather::inner, p.inner)?
                .set(gather::idx_const, constant)?;
            g = if constant { g.set(gather::idx_w, ctx.weight(o.idx)?)? } else { g.set(gather::idx, ctx.act(o.idx)?)? };
            vec![g.done(Kernel::Gather)]
        }
        LayerOp::MatMul(o) => {
            let (a, b, y) = (shape(o.a)?, shape(o.b)?, shape(o.y)?);
            let (da, db) = (dims(&a), dims(&b));
            let (ra, rb) = (da.len(), db.len());
            let (m, k) = (da[ra - 2], da[ra - 1]);
            let n = if o.transpose_b { db[rb - 2] } else { db[rb - 1] };
            let batch_rank = y.rank() - 2;
            let batches: usize = y.dims()[..batch_rank].iter().map(|&v| v as usize).product();
            let sa = broadcast_strides(&da[..ra - 2], batch_rank);
            let sb = broadcast_strides(&db[..rb - 2], batch_rank);
            // Tiled through workgroup memory where the 32 × 32 output tiles fill the device, as
            // dense layers (`Tuning::dense_tile_min_workgroups`), and a tile has rows enough.
            let tiles = batches.saturating_mul(m.div_ceil(32)).saturating_mul(n.div_ceil(32));
            let tiled = m >= super::TILE_MIN_ROWS && ctx.tiles_fill(tiles);
            let per = if tiled { tiles.checked_mul(crate::kernels::WORKGROUP as usize) } else { Some(batches * m * n) };
            let per = per.ok_or_else(|| GpuError::Model(format!("a {m}x{k}x{n} product overflows")))?;
            let weight = ctx.info(o.b)?.kind == TensorKind::Weight;
            let mut p = Params::new(per)?
                .set(matmul::a, ctx.act(o.a)?)?
                .set(matmul::b_kind, usize::from(weight))?
                .set(matmul::y_base, ctx.act(o.y)?.base)?
                .set(matmul::m, m)?
                .set(matmul::k, k)?
                .set(matmul::n, n)?
                .set(matmul::transpose_b, o.transpose_b)?
                .set(matmul::batch_rank, batch_rank)?
                .set_all(matmul::dims, (0..batch_rank).map(|ax| y.dim(ax)))?
                .set_all(matmul::a_strides, (0..batch_rank).map(|ax| sa[ax] * m * k))?
                .set_all(matmul::b_strides, (0..batch_rank).map(|ax| sb[ax] * k * n))?;
            p = if weight { p.set(matmul::b_w, ctx.weight(o.b)?)? } else { p.set(matmul::b, ctx.act(o.b)?)? };
            if tiled {
                vec![p.set(matmul_tile::y_stride, batches * m * n)?.done(Kernel::MatMulTile)]
            } else {
                vec![p.done(Kernel::MatMul)]
            }
        }
        LayerOp::Sdpa(o) => {
            let bias_shape = o.bias.map(shape).transpose()?;
            let g = kestrel_rt_core::shapes::SdpaDims::new(
                &shape(o.q)?,
                &shape(o.k)?,
                &shape(o.v)?,
                bias_shape.as_ref(),
                o.k_transposed,
            )
            .map_err(|e| GpuError::Model(e.to_string()))?;
            // A thread per (query row, sixteen output columns): `sdpa_rows`.
            let per = g.hq * g.tq * g.dv.div_ceil(16);
            let mut p = Params::new(per)?
                .set(sdpa::q, ctx.act(o.q)?)?
                .set(sdpa::k, ctx.act(o.k)?)?
                .set(sdpa::v, ctx.act(o.v)?)?
                .set(sdpa::o, ctx.act(o.y)?)?
                .set(sdpa::tq, g.tq)?
                .set(sdpa::tk, g.tk)?
                .set(sdpa::d, g.d)?
                .set(sdpa::dv, g.dv)?
                .set(sdpa::group, g.hq / g.hk)?
                .set(sdpa::scale, o.scale)?
                .set(sdpa::causal, o.causal)?
                .set(sdpa::k_transposed, o.k_transposed)?
                .set(sdpa::softcap, o.softcap)?
                .set(sdpa::has_bias, o.bias.is_some())?
                .set(sdpa::has_sink, o.sink.is_some())?;
            if let Some(z) = o.sink {
                let per_head = shape(z)?.numel() != Some(1);
                p = p.set(sdpa::sink_per_head, per_head)?.set(sdpa::sink_w, ctx.weight(z)?)?;
            }
            if let Some(b) = o.bias {
                let [sh, si, sj] = g.bias_strides;
                p = p.set(sdpa::bias_sh, sh)?.set(sdpa::bias_si, si)?.set(sdpa::bias_sj, sj)?;
                p = if ctx.info(b)?.kind == TensorKind::Weight {
                    p.set(sdpa::bias_const, true)?.set(sdpa::bias_w, ctx.weight(b)?)?
                } else {
                    p.set(sdpa::bias_const, false)?.set(sdpa::bias, ctx.act(b)?)?
                };
            }
            // Talking heads: every head's scores per thread, one value per head in registers
            // (`SDPA_TALKING_MAX_HEADS` in the shader).
            let talking = o.mix_pre.is_some() || o.mix_post.is_some();
            if talking && g.hq > 16 {
                return Err(GpuError::Unsupported(format!(
                    "node {node}: Sdpa with talking heads over {} query heads (the GPU kernel mixes at most 16)",
                    g.hq
                )));
            }
            p = p
                .set(sdpa::hq, g.hq)?
                .set(sdpa::has_mix_pre, o.mix_pre.is_some())?
                .set(sdpa::has_mix_post, o.mix_post.is_some())?;
            if let Some(w) = o.mix_pre {
                p = p.set(sdpa::mix_pre_w, ctx.weight(w)?)?;
            }
            if let Some(w) = o.mix_post {
                p = p.set(sdpa::mix_post_w, ctx.weight(w)?)?;
            }
            vec![p.done(if talking { Kernel::SdpaTalking } else { Kernel::SdpaRows })]
        }
        LayerOp::LinearAttn(o) => {
            let bad = |_| ShapeError::Invalid { op: "LinearAttn", what: "a tensor the graph does not hold" };
            let g = LinearAttnParams::of(o, |id| shape(id).map_err(bad)).map_err(|e| GpuError::Model(e.to_string()))?;
            // The state column a thread holds in registers (`LINEAR_ATTN_MAX_DK` in the shader).
            if g.dk > 256 {
                return Err(GpuError::Unsupported(format!(
                    "node {node}: LinearAttn with a key width Dk = {} (the GPU kernel holds at most 256)",
                    g.dk
                )));
            }
            // A thread per (sequence, key/value head, state column): `linear_attn`.
            let mut p = Params::new(g.n * g.hkv * g.dv)?
                .set(linear_attn::q, ctx.act(o.q)?)?
                .set(linear_attn::k, ctx.act(o.k)?)?
                .set(linear_attn::v, ctx.act(o.v)?)?
                .set(linear_attn::o, ctx.act(o.y)?)?
                .set(linear_attn::n, g.n)?
                .set(linear_attn::t, g.t)?
                .set(linear_attn::hq, g.hq)?
                .set(linear_attn::hkv, g.hkv)?
                .set(linear_attn::dk, g.dk)?
                .set(linear_attn::dv, g.dv)?
                .set(linear_attn::scale, o.scale)?
                .set(linear_attn::has_state, o.state.is_some())?
                .set(linear_attn::gated, o.decay.is_some())?
                .set(linear_attn::delta, o.beta.is_some())?
                .set(linear_attn::decay_per_key, g.decay_per_key)?
                .set(linear_attn::beta_per_head, g.beta_per_head)?
                .set(linear_attn::write_state, o.output == LinearOutput::State)?;
            if let Some(s) = o.state {
                p = p.set(linear_attn::state, ctx.act(s)?)?;
            }
            if let Some(d) = o.decay {
                p = p.set(linear_attn::decay, ctx.act(d)?)?;
            }
            if let Some(b) = o.beta {
                p = p.set(linear_attn::beta, ctx.act(b)?)?;
            }
            vec![p.done(Kernel::LinearAttn)]
        }
        LayerOp::Conv2d(o) => {
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
            // A residual: the convolution without its activation, then `y += r` and the
            // activation as element-wise dispatches in place (`y = act(conv(x) + b + r)`).
            let act = if o.residual.is_some() { Activation::None } else { o.act };
            let mut after = Vec::new();
            if let Some(r) = o.residual {
                after = residual_then_act(ctx, r, o.y, o.act)?;
            }
            if patchify {
                let (xr, y) = (ctx.act(o.x)?, ctx.act(o.y)?);
                let mut d = ctx.patch_dense(xr, (c.c, c.h, c.w, c.kh), c.o, (w, b), act as u32, y, true)?;
                d.extend(after);
                return Ok(d);
            }
            // Tiled through workgroup memory (implicit GEMM) where the tiles fill the device
            // (`Tuning::dense_tile_min_workgroups`, as dense layers) and a group has channels
            // enough for them; register-blocked (4 channels × 4 columns per thread) where a
            // group's output channels come in fours; one thread per output otherwise.
            let n = c.o / c.groups;
            let tiles = c.groups * (c.oh * c.ow).div_ceil(32) * n.div_ceil(32);
            let tiled =
                n >= CONV_TILE_MIN_CHANNELS && c.oh * c.ow >= ctx.tuning.conv_tile_min_pixels && ctx.tiles_fill(tiles);
            let blocked = n.is_multiple_of(4);
            let per = if tiled {
                tiles * crate::kernels::WORKGROUP as usize
            } else if blocked {
                (c.o / 4) * c.oh * c.ow.div_ceil(4)
            } else {
                c.o * c.oh * c.ow
            };
            let (x, y) = (ctx.act(o.x)?.base, ctx.act(o.y)?.base);
            let p = Params::new(per)?;
            let mut p = window(p, x, y, [c.c, c.h, c.w], [c.kh, c.kw], c.stride, c.pad, c.dilation, [c.oh, c.ow])?
                .set(conv::o, c.o)?
                .set(conv::groups, c.groups)?
                .set(conv::has_bias, b.is_some())?
                .set(conv::weight, w)?
                .set(conv::activation, act as usize)?;
            if let Some(b) = b {
                p = p.set(conv::bias, b)?;
            }
            let mut d = vec![p.done(if tiled {
                Kernel::Conv2dTile
            } else if blocked {
                Kernel::Conv2dBlock
            } else {
                Kernel::Conv2d
            })];
            d.extend(after);
            d
        }
        LayerOp::Pool2d(o) => {
            let c = Pool2dParams::of(o, &shape(o.x)?).map_err(|e| GpuError::Model(e.to_string()))?;
            let (x, y) = (ctx.act(o.x)?.base, ctx.act(o.y)?.base);
            let p = Params::new(c.c * c.oh * c.ow)?;
            let p = window(p, x, y, [c.c, c.h, c.w], [c.kh, c.kw], c.stride, c.pad, c.dilation, [c.oh, c.ow])?
                .set(pool::kind, c.kind as usize)?
                .set(pool::count_include_pad, c.count_include_pad)?;
            vec![p.done(Kernel::Pool2d)]
        }
        LayerOp::Lstm(o) => {
            let p = RnnParams::of_lstm(o, |id| shape(id).map_err(|_| rnn_lookup(op)))
                .map_err(|e| GpuError::Model(e.to_string()))?;
            rnn(ctx, &p, o.x, o.y, [Some(o.w), Some(o.r), Some(o.b), o.h0, o.c0, o.p])?
        }
        LayerOp::Gru(o) => {
            let p = RnnParams::of_gru(o, |id| shape(id).map_err(|_| rnn_lookup(op)))
                .map_err(|e| GpuError::Model(e.to_string()))?;
            rnn(ctx, &p, o.x, o.y, [Some(o.w), Some(o.r), Some(o.b), o.h0, None, None])?
        }
    })
}

fn dims(s: &kestrel_rt_format::Shape) -> Vec<usize> {
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
) -> Result<usize, GpuError> {
    let (Op::Slice(s), [d]) = (op, dispatches) else { return Ok(0) };
    if d.kernel != Kernel::Strided || d.get(strided::op) != STRIDED_WINDOW {
        return Ok(0);
    }
    let Some((next, fed, b, other)) = super::add_after(ctx, node, s.y)? else { return Ok(0) };
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
    let view = [0, 1, 2].map(|i| d.get(strided::dims.at(i)));
    let p = operand(ctx, d.edit(), OPERAND_B, other, &contiguous_strides(&view))?;
    *d = p.reset(strided::y_base, y.base)?.set(strided::window_add, true)?.done(Kernel::Strided);
    Ok((next - node) as usize)
}

/// The `strided` op codes past the binary ops: a copy of operand a (a transpose), and a window
/// of operand a (a slice).
const STRIDED_COPY: usize = 100;
const STRIDED_WINDOW: usize = 101;

/// A `strided` block writing tensor `y` (its dims the output axes) with `op`.
fn strided_out(ctx: &Ctx<'_, '_>, y: TensorId, op: usize) -> Result<Params, GpuError> {
    let shape = ctx.info(y)?.shape;
    Params::new(shape.numel().unwrap_or(0))?
        .set(strided::y_base, ctx.act(y)?.base)?
        .set(strided::op, op)?
        .set(strided::rank, shape.rank())?
        .set_all(strided::dims, (0..shape.rank()).map(|k| shape.dim(k)))
}

/// A layer's clamp, `y = min(max(y, lo), hi)` in place: two `strided` dispatches, `y` against
/// each bound of the f32 weight `[lo, hi]` (`clamp`) read as a one-element weight.
pub(super) fn clamp(ctx: &Ctx<'_, '_>, clamp: TensorId, y: TensorId) -> Result<Vec<Dispatch>, GpuError> {
    let w = ctx.weight(clamp)?;
    if w.dt != 0 || ctx.info(clamp)?.shape.numel() != Some(2) {
        return Err(GpuError::Model(format!("clamp {clamp}: expected an f32 weight [lo, hi]")));
    }
    let shape = ctx.info(y)?.shape;
    let r = shape.rank();
    let full = broadcast_strides(&dims(&shape), r);
    [(kestrel_rt_format::ops::BinaryOp::Max, 0), (kestrel_rt_format::ops::BinaryOp::Min, 1)]
        .into_iter()
        .map(|(op, k)| {
            let p = operand(ctx, strided_out(ctx, y, op as usize)?, OPERAND_A, y, &full)?;
            p.set_all(OPERAND_B.strides, (0..r).map(|_| 0))?
                .set(OPERAND_B.kind, 1)?
                .set(OPERAND_B.weight, super::Wd { off: w.off + k, cols: 1, ..w })
                .map(|p| p.done(Kernel::Strided))
        })
        .collect()
}

/// A convolution's residual and activation after it, in place on its output `y`: `y += r` (a
/// `strided` Add of the activation `r`, of `y`'s shape), then the activation as a `unary`
/// dispatch (none for [`Activation::None`]).
fn residual_then_act(ctx: &Ctx<'_, '_>, r: TensorId, y: TensorId, act: Activation) -> Result<Vec<Dispatch>, GpuError> {
    use kestrel_rt_format::ops::BinaryOp;
    let shape = ctx.info(y)?.shape;
    if ctx.info(r)?.kind != TensorKind::Activation || ctx.info(r)?.shape != shape {
        return Err(GpuError::Model(format!("residual {r}: expected an activation of the output's shape")));
    }
    let full = broadcast_strides(&dims(&shape), shape.rank());
    let p = operand(ctx, strided_out(ctx, y, BinaryOp::Add as usize)?, OPERAND_A, y, &full)?;
    let mut d = vec![operand(ctx, p, OPERAND_B, r, &full)?.done(Kernel::Strided)];
    if let Some(u) = act.as_unary() {
        let yb = ctx.act(y)?.base;
        d.push(
            Params::new(shape.numel().unwrap_or(0))?
                .set(unary::x_base, yb)?
                .set(unary::y_base, yb)?
                .set(unary::op, u as usize)?
                .done(Kernel::Unary),
        );
    }
    Ok(d)
}

/// The fields of one operand of the `strided` kernel (`operand` in `elementwise.wgsl`).
struct Operand {
    kind: Field<usize>,
    act: Field<super::Region>,
    strides: Field<usize>,
    weight: Field<super::Wd>,
}

const OPERAND_A: Operand =
    Operand { kind: strided::a_kind, act: strided::a, strides: strided::a_strides, weight: strided::a_w };
const OPERAND_B: Operand =
    Operand { kind: strided::b_kind, act: strided::b, strides: strided::b_strides, weight: strided::b_w };

/// Sets operand `o`: tensor `id` read with `strides` per output axis.
fn operand(ctx: &Ctx<'_, '_>, p: Params, o: Operand, id: u32, strides: &[usize]) -> Result<Params, GpuError> {
    let p = p.set_all(o.strides, strides.iter().copied())?;
    if ctx.info(id)?.kind == TensorKind::Weight {
        p.set(o.kind, 1)?.set(o.weight, ctx.weight(id)?)
    } else {
        p.set(o.kind, 0)?.set(o.act, ctx.act(id)?)
    }
}

/// Sets the window fields convolution and pooling share.
#[allow(clippy::too_many_arguments)]
fn window(
    p: Params,
    x_base: usize,
    y_base: usize,
    chw: [usize; 3],
    k: [usize; 2],
    s: [usize; 2],
    pad: [usize; 4],
    dl: [usize; 2],
    out: [usize; 2],
) -> Result<Params, GpuError> {
    let bases = [x_base, y_base];
    // Each argument's fields, in its order.
    let fields: [(&[Field<usize>], &[usize]); 7] = [
        (&[window::x_base, window::y_base], &bases),
        (&[window::c, window::h, window::w], &chw),
        (&[window::kh, window::kw], &k),
        (&[window::sh, window::sw], &s),
        (&[window::pad_top, window::pad_left], &pad[..2]),
        (&[window::dh, window::dw], &dl),
        (&[window::oh, window::ow], &out),
    ];
    let mut p = p;
    for (fields, values) in fields {
        for (&f, &v) in fields.iter().zip(values) {
            p = p.set(f, v)?;
        }
    }
    Ok(p)
}

fn rnn_lookup(op: &Op) -> kestrel_rt_core::ShapeError {
    kestrel_rt_core::ShapeError::Invalid { op: op.name(), what: "tensor lookup failed" }
}

/// An LSTM/GRU: the input projection of every step and both directions as one dense dispatch
/// into scratch (`[T, dirs·G·H]` per sample, no bias), then the recurrence (`rnn.wgsl`), one
/// workgroup per sample and direction. `ids`: w, r, b, h0, c0, the LSTM's peepholes.
fn rnn(
    ctx: &mut Ctx<'_, '_>,
    p: &RnnParams,
    x: TensorId,
    y: TensorId,
    ids: [Option<TensorId>; 6],
) -> Result<Vec<Dispatch>, GpuError> {
    let [Some(w), Some(r), Some(b), h0, c0, peep] = ids else {
        return Err(GpuError::Model("a recurrent node without its weights".into()));
    };
    let (dirs, g, h) = (p.dirs(), p.gate_rows(), p.hidden);
    let xw = ctx.scratch(p.t * dirs * g);
    let state = ctx.scratch(dirs * (g + 3 * h));
    let project = ctx.dense(ctx.act(x)?, p.t, dirs * g, (ctx.weight(w)?, None), 0, xw, None)?;
    let yr = ctx.act(y)?;
    let mut q = Params::new(dirs * crate::kernels::WORKGROUP as usize)?
        .set(rnn::xw, xw)?
        .set(rnn::y, yr)?
        .set(rnn::state, state)?
        .set(rnn::t, p.t)?
        .set(rnn::hidden, h)?
        .set(rnn::dirs, dirs)?
        .set(rnn::cell, usize::from(p.cell == RnnCell::Gru))?
        .set(rnn::direction, p.direction as usize)?
        .set(rnn::output, p.output as usize)?
        .set(rnn::has_h0, h0.is_some())?
        .set(rnn::has_c0, c0.is_some())?
        .set(rnn::reset_state, p.reset == GruReset::State)?
        .set(rnn::has_p, peep.is_some())?
        .set(rnn::r, ctx.weight(r)?)?
        .set(rnn::bias, ctx.weight(b)?)?;
    if let Some(h0) = h0 {
        q = q.set(rnn::h0, ctx.weight(h0)?)?;
    }
    if let Some(c0) = c0 {
        q = q.set(rnn::c0, ctx.weight(c0)?)?;
    }
    if let Some(peep) = peep {
        q = q.set(rnn::p, ctx.weight(peep)?)?;
    }
    Ok(vec![project, q.done(Kernel::Rnn)])
}

/// Fewest output channels per group for the tiled convolution (`conv2d_tile`'s tiles are 32
/// channels wide: a depthwise layer would stage 31 clamped channels per useful one).
const CONV_TILE_MIN_CHANNELS: usize = 16;
