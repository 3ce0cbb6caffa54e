//! Dispatches of the fused mechanisms: the projections are dense dispatches into scratch, the
//! mechanism's core is one kernel (two or three for the AFT exponentials and Fastformer's
//! pooling), and the output projection reads the core's result.

use super::{Ctx, Dispatch, Params, Region};
use crate::kernels::Kernel;
use crate::GpuError;
use kestrel_format::ops::{AftBias, AttentionVariant, Op};

/// Query rows per workgroup of `attend` (`BQ` in `attention.wgsl`).
const ATTEND_ROWS: usize = 16;
/// Head columns per workgroup of `attend` (`CT` in `attention.wgsl`).
const ATTEND_COLS: usize = 64;
/// Widest head `attend_rows` takes (one chunk of its output columns per thread).
const ATTEND_ROWS_MAX_COLS: usize = 16;

pub(super) fn compile(ctx: &mut Ctx<'_, '_>, node: u32, op: &Op) -> Result<Vec<Dispatch>, GpuError> {
    let x_id = op.main_input();
    let xs = ctx.info(x_id)?.shape;
    // `[T, d]`; attention also takes `[G, T, d]`, G sequences per sample (no mask then).
    let (groups, t, d) = match (op, xs.rank()) {
        (_, 2) => (1, xs.dim(0), xs.dim(1)),
        (Op::Attention(_), 3) => (xs.dim(0), xs.dim(1), xs.dim(2)),
        _ => return Err(GpuError::Model(format!("node {node}: mechanism input must be [T, d]"))),
    };
    let td = t * d;
    let x = ctx.act(x_id)?;
    let y = ctx.act(op.output())?;
    let mut v = Vec::new();
    match *op {
        Op::Attention(o) => {
            // The projections run over all G·T rows; the kernels walk G·batch sequences.
            let (rows, gtd) = (groups * t, groups * td);
            // The Q, K and V projections (those the variant has), in one dispatch where they allow.
            let q = ctx.scratch(gtd);
            let mut projs = vec![(ctx.proj(o.q)?, q)];
            let k = match o.k {
                Some(p) => {
                    let k = ctx.scratch(gtd);
                    projs.push((ctx.proj(p)?, k));
                    k
                }
                None => x,
            };
            let val = match (o.v, o.align) {
                (Some(p), _) => {
                    let r = ctx.scratch(gtd);
                    projs.push((ctx.proj(p)?, r));
                    r
                }
                (None, Some(a)) if o.variant == AttentionVariant::Super => {
                    let r = ctx.scratch(gtd);
                    let (aw, ab) = ctx.proj(a)?;
                    let mut p = Params::new(gtd)?
                        .u(2, x.base)?
                        .u(3, r.base)?
                        .u(4, t)?
                        .u(5, d)?
                        .b(6, o.causal)
                        .b(7, ab.is_some())
                        .w(8, aw);
                    if let Some(ab) = ab {
                        p = p.w(12, ab);
                    }
                    v.push(p.done(Kernel::AlignTokens));
                    r
                }
                _ => x,
            };
            v.extend(ctx.dense_parts(x, rows, d, &projs)?);
            let heads_out = ctx.scratch(gtd);
            // Per sequence: regions strided by T·d, G sequences per sample (P19); with one
            // sequence that is every region's own stride.
            let seq = |r: super::Region| super::Region { base: r.base, stride: td };
            // One workgroup per (sample, head, block of ATTEND_ROWS query rows, ATTEND_COLS-column
            // chunk of the head's output): `attend`, flash style, covers every head width, T,
            // causal and mask. Heads wider than a chunk recompute their scores per chunk, in
            // parallel workgroups rather than one after another.
            // Software adapters with short rows and heads of at most 16 columns: `attend_rows`, a
            // thread per (row, sixteen output columns) and no barriers (wider heads would
            // recompute their scores per chunk: on lavapipe a c = 64 head took 3.5× as long as
            // `attend`, a c = 16 one under half).
            let c = d / (o.heads as usize).max(1);
            let rows_form =
                c <= ATTEND_ROWS_MAX_COLS && t.saturating_mul(c.div_ceil(4) + 4) <= ctx.tuning.attend_rows_max_steps;
            let (per, kernel) = if rows_form {
                (o.heads as usize * t * c.div_ceil(16), Kernel::AttendRows)
            } else {
                let blocks = o.heads as usize * t.div_ceil(ATTEND_ROWS) * c.div_ceil(ATTEND_COLS).max(1);
                (blocks * crate::kernels::WORKGROUP as usize, Kernel::Attend)
            };
            let mut p = Params::new(groups * per)?
                .region(2, seq(q))?
                .region(4, seq(k))?
                .region(6, seq(val))?
                .region(8, seq(heads_out))?
                .u(10, t)?
                .u(11, d)?
                .u(12, o.heads as usize)?
                .b(13, o.causal)
                .f(14, o.scale)
                .u(19, groups)?;
            if let Some(m) = o.mask {
                // `[T]` or `[T, T]` per sample (the loader checked the shape).
                let mr = ctx.act(m)?;
                p = p.b(15, true).region(16, mr)?.b(18, mr.stride != t);
            }
            v.push(p.done(kernel));
            v.push(ctx.dense(heads_out, rows, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        Op::AftFull(o) => {
            let (q, e, ev) = project_exp(ctx, &mut v, x, t, d, d, (o.q, o.k, o.v))?;
            let mut p = Params::new(td)?.u(2, q.base)?.u(3, e.base)?.u(4, ev.base)?.u(5, td)?.u(6, t)?.u(7, d)?;
            p = p.b(8, o.causal);
            p = match o.bias {
                AftBias::Full(w) => p.w(12, ctx.weight(w)?),
                AftBias::Factorised { u, v: vv } => {
                    // u vᵀ once per run into shared scratch; the core then reads it like a full bias.
                    let rank = ctx.info(u)?.shape.as_matrix().map(|m| m.1).unwrap_or(0);
                    let bias = ctx.scratch_shared(t * t);
                    v.push(
                        Params::new(t * t)?
                            .u(2, bias)?
                            .u(3, t)?
                            .u(4, rank)?
                            .w(12, ctx.weight(u)?)
                            .w(16, ctx.weight(vv)?)
                            .done(Kernel::AftBias),
                    );
                    p.b(9, true).u(11, bias)?
                }
            };
            v.push(p.done(Kernel::AftFull));
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        Op::AftLocal(o) => {
            let (q, e, ev) = project_exp(ctx, &mut v, x, t, d, d, (o.q, o.k, o.v))?;
            v.push(
                Params::new(td)?
                    .u(2, q.base)?
                    .u(3, e.base)?
                    .u(4, ev.base)?
                    .u(5, td)?
                    .u(6, t)?
                    .u(7, d)?
                    .b(8, o.causal)
                    .u(9, o.window as usize)?
                    .w(12, ctx.weight(o.w)?)
                    .done(Kernel::AftLocal),
            );
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        Op::AftSimple(o) => {
            let (q, k, val) = (ctx.scratch(td), ctx.scratch(td), ctx.scratch(td));
            v.push(ctx.dense(x, t, d, ctx.proj(o.q)?, 0, q, None)?);
            v.push(ctx.dense(x, t, d, ctx.proj(o.k)?, 0, k, None)?);
            v.push(ctx.dense(x, t, d, ctx.proj(o.v)?, 0, val, None)?);
            // One workgroup per (sample, channel).
            v.push(
                Params::new(d * crate::kernels::WORKGROUP as usize)?
                    .u(2, q.base)?
                    .u(3, k.base)?
                    .u(4, val.base)?
                    .u(5, td)?
                    .u(6, t)?
                    .u(7, d)?
                    .b(8, o.causal)
                    .done(Kernel::AftSimple),
            );
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        Op::AftConv(o) => {
            let h = o.heads as usize;
            let (q, e, ev) = project_exp(ctx, &mut v, x, t, d, h, (o.q, o.k, o.v))?;
            v.push(
                Params::new(td)?
                    .u(2, q.base)?
                    .u(3, e.base)?
                    .u(4, ev.base)?
                    .u(5, t)?
                    .u(6, d)?
                    .u(7, h)?
                    .u(8, o.kernel as usize)?
                    .u(9, o.grid[0] as usize)?
                    .u(10, o.grid[1] as usize)?
                    .w(12, ctx.weight(o.w)?)
                    .done(Kernel::AftConv),
            );
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        Op::Fastformer(o) => {
            let h = o.heads as usize;
            let (q, k, val) = (ctx.scratch(td), ctx.scratch(td), ctx.scratch(td));
            let alpha = ctx.scratch(h * t);
            let (g1, g2) = (ctx.scratch(d), ctx.scratch(d));
            v.push(ctx.dense(x, t, d, ctx.proj(o.q)?, 0, q, None)?);
            v.push(ctx.dense(x, t, d, ctx.proj(o.k)?, 0, k, None)?);
            v.push(ctx.dense(x, t, d, ctx.proj(o.v)?, 0, val, None)?);
            for (rows, score, g, target) in [(q, o.wqa, g1, k), (k, o.wka, g2, val)] {
                v.push(
                    Params::new(h * t)?
                        .region(2, rows)?
                        .u(4, alpha.base)?
                        .u(5, t)?
                        .u(6, d)?
                        .u(7, h)?
                        .f(8, o.scale)
                        .w(12, ctx.weight(score)?)
                        .done(Kernel::FfScores),
                );
                v.push(ctx.softmax(alpha.base, alpha.base, h, t)?);
                v.push(
                    Params::new(d)?
                        .region(2, rows)?
                        .u(4, alpha.base)?
                        .u(5, g.base)?
                        .u(6, t)?
                        .u(7, d)?
                        .u(8, h)?
                        .done(Kernel::FfPool),
                );
                v.push(Params::new(td)?.region(2, target)?.u(4, g.base)?.u(5, d)?.done(Kernel::FfScaleRows));
            }
            v.push(ctx.dense(val, t, d, ctx.proj(o.r)?, 0, y, Some(q))?);
        }
        // Exhaustive: an op added to the format fails to compile here until it is routed.
        Op::Dense(_)
        | Op::LayerNorm(_)
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Softmax(_)
        | Op::PatchEmbed(_)
        | Op::Embedding(_)
        | Op::Reduce(_)
        | Op::Reshape(_)
        | Op::Slice(_)
        | Op::Transpose(_)
        | Op::MatMul(_)
        | Op::Conv2d(_)
        | Op::Pool2d(_)
        | Op::Lstm(_)
        | Op::Gru(_) => {
            return Err(GpuError::Model(format!(
                "node {node}: {} is not a mechanism (lowered in layers.rs)",
                op.name()
            )))
        }
    }
    Ok(v)
}

/// Q, K (`kcols` channels) and V projections into scratch, then V ← exp(K − max) ⊙ V and
/// K ← exp(K − max). Returns (Q, E, E ⊙ V).
#[allow(clippy::type_complexity)]
fn project_exp(
    ctx: &mut Ctx<'_, '_>,
    v: &mut Vec<Dispatch>,
    x: Region,
    t: usize,
    d: usize,
    kcols: usize,
    (pq, pk, pv): (kestrel_format::ops::Proj, kestrel_format::ops::Proj, kestrel_format::ops::Proj),
) -> Result<(Region, Region, Region), GpuError> {
    let (q, e, ev) = (ctx.scratch(t * d), ctx.scratch(t * kcols), ctx.scratch(t * d));
    v.push(ctx.dense(x, t, d, ctx.proj(pq)?, 0, q, None)?);
    v.push(ctx.dense(x, t, kcols, ctx.proj(pk)?, 0, e, None)?);
    v.push(ctx.dense(x, t, d, ctx.proj(pv)?, 0, ev, None)?);
    v.push(Params::new(d)?.region(2, e)?.region(4, ev)?.u(6, t)?.u(7, d)?.u(8, kcols)?.done(Kernel::ExpValues));
    v.push(Params::new(kcols)?.region(2, e)?.u(4, t)?.u(5, kcols)?.done(Kernel::ExpKeys));
    Ok((q, e, ev))
}
