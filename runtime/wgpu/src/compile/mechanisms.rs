//! Dispatches of the fused mechanisms: the projections are dense dispatches into scratch, the
//! mechanism's core is one kernel (two or three for the AFT exponentials and Fastformer's
//! pooling), and the output projection reads the core's result.

use super::{Ctx, Dispatch, Params, Region};
use crate::kernels::Kernel;
use crate::params::{
    aft, aft_bias, aft_conv, aft_full, aft_local, align_tokens, attend, exp_keys, exp_values, ff_pool, ff_scale_rows,
    ff_scores,
};
use crate::GpuError;
use kestrel_rt_format::ops::{AftBias, AttentionVariant, MechanismOp, Op};

/// Query rows per workgroup of `attend` (`BQ` in `attention.wgsl`).
const ATTEND_ROWS: usize = 16;
/// Head columns per workgroup of `attend` (`CT` in `attention.wgsl`).
const ATTEND_COLS: usize = 64;
/// Widest head `attend_rows` takes (one chunk of its output columns per thread).
const ATTEND_ROWS_MAX_COLS: usize = 16;

pub(super) fn compile(ctx: &mut Ctx<'_, '_>, node: u32, op: &Op) -> Result<Vec<Dispatch>, GpuError> {
    let Some(mechanism) = op.mechanism() else {
        return Err(GpuError::Model(format!("node {node}: {} is not a mechanism (lowered in layers.rs)", op.name())));
    };
    let x_id = op.main_input();
    let xs = ctx.info(x_id)?.shape;
    // `[T, d]`; attention also takes `[G, T, d]`, G sequences per sample.
    let shape_err = || GpuError::Model(format!("node {node}: mechanism input must be [T, d]"));
    let (groups, t, d) = match xs.rank() {
        2 => (1, xs.dim(0), xs.dim(1)),
        3 => (xs.dim(0), xs.dim(1), xs.dim(2)),
        _ => return Err(shape_err()),
    };
    // Every mechanism but attention takes `[T, d]` only.
    let one_sequence = || if xs.rank() == 2 { Ok(()) } else { Err(shape_err()) };
    let td = t * d;
    let x = ctx.act(x_id)?;
    let y = ctx.act(op.output())?;
    let mut v = Vec::new();
    match mechanism {
        MechanismOp::Attention(o) => {
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
                        .set(align_tokens::x_base, x.base)?
                        .set(align_tokens::v_base, r.base)?
                        .set(align_tokens::t, t)?
                        .set(align_tokens::d, d)?
                        .set(align_tokens::causal, o.causal)?
                        .set(align_tokens::has_bias, ab.is_some())?
                        .set(align_tokens::a, aw)?;
                    if let Some(ab) = ab {
                        p = p.set(align_tokens::bias, ab)?;
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
            // A device whose workgroup memory cannot hold `attend`'s tiles gets `attend_rows`
            // wherever it applies (heads of at most 16 columns).
            let c = d / (o.heads as usize).max(1);
            let rows_form = c <= ATTEND_ROWS_MAX_COLS
                && (t.saturating_mul(c.div_ceil(4) + 4) <= ctx.tuning.attend_rows_max_steps
                    || !ctx.fits(Kernel::Attend));
            let (per, kernel) = if rows_form {
                (o.heads as usize * t * c.div_ceil(16), Kernel::AttendRows)
            } else {
                let blocks = o.heads as usize * t.div_ceil(ATTEND_ROWS) * c.div_ceil(ATTEND_COLS).max(1);
                (blocks * crate::kernels::WORKGROUP as usize, Kernel::Attend)
            };
            let mut p = Params::new(groups * per)?
                .set(attend::q, seq(q))?
                .set(attend::k, seq(k))?
                .set(attend::v, seq(val))?
                .set(attend::o, seq(heads_out))?
                .set(attend::t, t)?
                .set(attend::d, d)?
                .set(attend::heads, o.heads as usize)?
                .set(attend::causal, o.causal)?
                .set(attend::scale, o.scale)?
                .set(attend::has_mask, o.mask.is_some())?
                .set(attend::groups, groups)?;
            if let Some(m) = o.mask {
                // `[T]`, `[T, T]` or `[H, T, T]`, or per sequence `[G, 1 or H, T, T]` (the loader
                // checked the shape), per sample or a constant weight (f32, shared by every
                // sample).
                let info = ctx.info(m)?;
                let dims = info.shape.dims();
                let rank = dims.len();
                // `[G, 1 or H, T, T]`: a block per sequence.
                let heads_axis = match rank {
                    3 => true,
                    4 => dims[1] > 1,
                    _ => false,
                };
                p = p
                    .set(attend::mask_rows, rank >= 2)?
                    .set(attend::mask_heads, heads_axis)?
                    .set(attend::mask_groups, rank == 4)?;
                p = if info.kind == kestrel_rt_format::TensorKind::Weight {
                    p.set(attend::mask_const, true)?.set(attend::mask_w, ctx.weight(m)?)?
                } else {
                    p.set(attend::mask_const, false)?.set(attend::mask, ctx.act(m)?)?
                };
            }
            v.push(p.done(kernel));
            v.push(ctx.dense(heads_out, rows, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        MechanismOp::AftFull(o) => {
            one_sequence()?;
            let (q, e, ev) = project_exp(ctx, &mut v, x, t, d, d, (o.q, o.k, o.v))?;
            let p = aft_core(td, (q, e, ev), t, d, o.causal)?;
            let p = match o.bias {
                AftBias::Full(w) => p.set(aft_full::scratch_bias, false)?.set(aft_full::w, ctx.weight(w)?)?,
                AftBias::Factorised { u, v: vv } => {
                    // u vᵀ once per run into shared scratch; the core then reads it like a full bias.
                    let rank = ctx.info(u)?.shape.as_matrix().map(|m| m.1).unwrap_or(0);
                    let bias = ctx.scratch_shared(t * t);
                    v.push(
                        Params::new(t * t)?
                            .set(aft_bias::bias_base, bias)?
                            .set(aft_bias::t, t)?
                            .set(aft_bias::rank, rank)?
                            .set(aft_bias::u, ctx.weight(u)?)?
                            .set(aft_bias::v, ctx.weight(vv)?)?
                            .done(Kernel::AftBias),
                    );
                    p.set(aft_full::scratch_bias, true)?.set(aft_full::bias_base, bias)?
                }
            };
            v.push(p.done(Kernel::AftFull));
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        MechanismOp::AftLocal(o) => {
            one_sequence()?;
            let (q, e, ev) = project_exp(ctx, &mut v, x, t, d, d, (o.q, o.k, o.v))?;
            let p = aft_core(td, (q, e, ev), t, d, o.causal)?;
            let p = p.set(aft_local::window, o.window as usize)?.set(aft_local::w, ctx.weight(o.w)?)?;
            v.push(p.done(Kernel::AftLocal));
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        MechanismOp::AftSimple(o) => {
            one_sequence()?;
            let (q, k, val) = (ctx.scratch(td), ctx.scratch(td), ctx.scratch(td));
            v.push(ctx.dense(x, t, d, ctx.proj(o.q)?, 0, q, None)?);
            v.push(ctx.dense(x, t, d, ctx.proj(o.k)?, 0, k, None)?);
            v.push(ctx.dense(x, t, d, ctx.proj(o.v)?, 0, val, None)?);
            // One workgroup per (sample, channel).
            let p = aft_core(d * crate::kernels::WORKGROUP as usize, (q, k, val), t, d, o.causal)?;
            v.push(p.done(Kernel::AftSimple));
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        MechanismOp::AftConv(o) => {
            one_sequence()?;
            let h = o.heads as usize;
            let (q, e, ev) = project_exp(ctx, &mut v, x, t, d, h, (o.q, o.k, o.v))?;
            v.push(
                Params::new(td)?
                    .set(aft_conv::q_base, q.base)?
                    .set(aft_conv::e_base, e.base)?
                    .set(aft_conv::ev_base, ev.base)?
                    .set(aft_conv::t, t)?
                    .set(aft_conv::d, d)?
                    .set(aft_conv::heads, h)?
                    .set(aft_conv::kernel, o.kernel as usize)?
                    .set(aft_conv::grid_h, o.grid[0] as usize)?
                    .set(aft_conv::grid_w, o.grid[1] as usize)?
                    .set(aft_conv::w, ctx.weight(o.w)?)?
                    .done(Kernel::AftConv),
            );
            v.push(ctx.dense(q, t, d, ctx.proj(o.o)?, 0, y, None)?);
        }
        MechanismOp::Fastformer(o) => {
            one_sequence()?;
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
                        .set(ff_scores::rows, rows)?
                        .set(ff_scores::alpha_base, alpha.base)?
                        .set(ff_scores::t, t)?
                        .set(ff_scores::d, d)?
                        .set(ff_scores::heads, h)?
                        .set(ff_scores::scale, o.scale)?
                        .set(ff_scores::w, ctx.weight(score)?)?
                        .done(Kernel::FfScores),
                );
                v.push(ctx.softmax(alpha.base, alpha.base, h, t)?);
                v.push(
                    Params::new(d)?
                        .set(ff_pool::rows, rows)?
                        .set(ff_pool::alpha_base, alpha.base)?
                        .set(ff_pool::out_base, g.base)?
                        .set(ff_pool::t, t)?
                        .set(ff_pool::d, d)?
                        .set(ff_pool::heads, h)?
                        .done(Kernel::FfPool),
                );
                v.push(
                    Params::new(td)?
                        .set(ff_scale_rows::rows, target)?
                        .set(ff_scale_rows::vec_base, g.base)?
                        .set(ff_scale_rows::d, d)?
                        .done(Kernel::FfScaleRows),
                );
            }
            v.push(ctx.dense(val, t, d, ctx.proj(o.r)?, 0, y, Some(q))?);
        }
    }
    Ok(v)
}

/// An AFT core's block (`per` threads per sample) over Q, K and V (or E and E ⊙ V), each `[t, d]`.
fn aft_core(
    per: usize,
    (q, k, v): (Region, Region, Region),
    t: usize,
    d: usize,
    causal: bool,
) -> Result<Params, GpuError> {
    Params::new(per)?
        .set(aft::q_base, q.base)?
        .set(aft::k_base, k.base)?
        .set(aft::v_base, v.base)?
        .set(aft::stride, t * d)?
        .set(aft::t, t)?
        .set(aft::d, d)?
        .set(aft::causal, causal)
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
    (pq, pk, pv): (kestrel_rt_format::ops::Proj, kestrel_rt_format::ops::Proj, kestrel_rt_format::ops::Proj),
) -> Result<(Region, Region, Region), GpuError> {
    let (q, e, ev) = (ctx.scratch(t * d), ctx.scratch(t * kcols), ctx.scratch(t * d));
    v.push(ctx.dense(x, t, d, ctx.proj(pq)?, 0, q, None)?);
    v.push(ctx.dense(x, t, kcols, ctx.proj(pk)?, 0, e, None)?);
    v.push(ctx.dense(x, t, d, ctx.proj(pv)?, 0, ev, None)?);
    v.push(
        Params::new(d)?
            .set(exp_values::k, e)?
            .set(exp_values::v, ev)?
            .set(exp_values::t, t)?
            .set(exp_values::d, d)?
            .set(exp_values::kcols, kcols)?
            .done(Kernel::ExpValues),
    );
    v.push(
        Params::new(kcols)?
            .set(exp_keys::k, e)?
            .set(exp_keys::t, t)?
            .set(exp_keys::kcols, kcols)?
            .done(Kernel::ExpKeys),
    );
    Ok((q, e, ev))
}
