//! Dispatch of the fused attention mechanisms.

use super::layers::{proj, proj_in, shape, weight};
use super::numel;
use super::{info, OpIo};
use crate::error::{RunError, ShapeError};
use crate::graph::Graph;
use crate::kernels::aft::*;
use crate::kernels::attention::{
    attention_groups_masked, attention_masked, attention_scratch, attention_scratch_fast, attention_scratch_groups,
    AttentionParams, AttentionWeights,
};
use crate::kernels::fastformer::{
    fastformer, fastformer_scratch, FastformerParams, FastformerScores, FastformerWeights,
};
#[cfg(feature = "std")]
use crate::threads::SharedMut;
use kestrel_rt_core::shapes::check_group_mask;
use kestrel_rt_format::ops::{AftBias, MechanismOp, Op, Proj, TensorId};

/// Kernel params and weights of one mechanism node.
enum Prep<'a> {
    /// With the sequences per sample (`G` of a `[G, T, d]` input, else 1) and the score bias.
    Attention(AttentionParams, AttentionWeights<'a>, usize, Option<MaskSrc<'a>>),
    AftFull(AftFullParams, AftFullWeights<'a>),
    AftLocal(AftLocalParams, AftLocalWeights<'a>),
    AftSimple(AftSimpleParams, AftSimpleWeights<'a>),
    AftConv(AftConvParams, AftConvWeights<'a>),
    Fastformer(FastformerParams, FastformerWeights<'a>),
}

/// Where an attention node's additive score bias comes from, and whether it holds one block per
/// sequence (`[G, 1 or H, T, T]` over a `[G, T, d]` input).
#[derive(Clone, Copy)]
enum MaskSrc<'a> {
    /// An activation: one mask per sample.
    Act(TensorId, bool),
    /// A constant (a weight stored as f32): the same for every sample.
    Weight(&'a [f32], bool),
}

fn prepare<'a>(file: &Graph<'_, 'a>, op: &Op) -> Result<Prep<'a>, ShapeError> {
    let td = |x| -> Result<(usize, usize), ShapeError> {
        let s = shape(file, x)?;
        if s.rank() != 2 {
            return Err(ShapeError::Mismatch {
                op: op.name(),
                what: "input rank ([T, d])",
                expected: 2,
                found: s.rank(),
            });
        }
        Ok((s.dim(0), s.dim(1)))
    };
    // Projections of the node's input carry its calibrated int8 scale (`pin`); the others read
    // intermediates of the kernel and stay f32 (`pj`).
    let x_id = op.main_input();
    let pin = |p: Proj| proj_in(file, p, x_id);
    let opin = |p: Option<Proj>| p.map(|p| proj_in(file, p, x_id)).transpose();
    let pj = |p: Proj| proj(file, p);
    let opj = |p: Option<Proj>| p.map(|p| proj(file, p)).transpose();
    // W^Q, W^K, W^V from the input, and the output projection from the kernel's own values.
    let qkvo =
        |q, k, v, o| -> Result<Qkvo<'_>, ShapeError> { Ok(Qkvo { q: pin(q)?, k: pin(k)?, v: pin(v)?, o: pj(o)? }) };
    let Some(mechanism) = op.mechanism() else {
        return Err(ShapeError::Invalid { op: op.name(), what: "not a mechanism" });
    };
    let prep = match mechanism {
        MechanismOp::Attention(o) => {
            // `[G, T, d]`: G sequences of the same weights (checked at load: no mask then).
            let s = shape(file, o.x)?;
            let (groups, (t, d)) = match s.rank() {
                3 => (s.dim(0), (s.dim(1), s.dim(2))),
                _ => (1, td(o.x)?),
            };
            let p = AttentionParams {
                t,
                d,
                heads: o.heads as usize,
                causal: o.causal,
                scale: o.scale,
                variant: o.variant,
                int8: o.internals == kestrel_rt_format::ops::Internals::Int8,
            };
            let w = AttentionWeights { q: pin(o.q)?, k: opin(o.k)?, v: opin(o.v)?, align: opj(o.align)?, o: pj(o.o)? };
            p.check(&w)?;
            let mask = match o.mask {
                None => None,
                Some(m) => {
                    let info = file.tensor(m).map_err(super::lookup_err)?;
                    check_group_mask(op.name(), &info.shape, groups, t, p.heads)?;
                    let per_group = info.shape.rank() == 4;
                    if info.kind == kestrel_rt_format::TensorKind::Weight {
                        // The loader admits only f32 weights in the mask slot.
                        let values = weight(file, m)?.as_f32().ok_or(ShapeError::Invalid {
                            op: op.name(),
                            what: "a constant attention mask must be stored as f32",
                        })?;
                        Some(MaskSrc::Weight(values, per_group))
                    } else {
                        Some(MaskSrc::Act(m, per_group))
                    }
                }
            };
            Prep::Attention(p, w, groups, mask)
        }
        MechanismOp::AftFull(o) => {
            let (t, d) = td(o.x)?;
            let (bias, rank) = match o.bias {
                AftBias::Full(w) => (AftBiasW::Full(weight(file, w)?), 0),
                AftBias::Factorised { u, v } => {
                    let (u, v) = (weight(file, u)?, weight(file, v)?);
                    let rank = u.cols();
                    (AftBiasW::Factorised { u, v }, rank)
                }
            };
            let p = AftFullParams { shape: AftShape { t, d, causal: o.causal }, rank };
            let w = AftFullWeights { proj: qkvo(o.q, o.k, o.v, o.o)?, w: bias };
            p.check(&w)?;
            Prep::AftFull(p, w)
        }
        MechanismOp::AftLocal(o) => {
            let (t, d) = td(o.x)?;
            let p = AftLocalParams { shape: AftShape { t, d, causal: o.causal }, window: o.window as usize };
            let w = AftLocalWeights { proj: qkvo(o.q, o.k, o.v, o.o)?, w: weight(file, o.w)? };
            p.check(&w)?;
            Prep::AftLocal(p, w)
        }
        MechanismOp::AftSimple(o) => {
            let (t, d) = td(o.x)?;
            let p = AftSimpleParams { t, d, causal: o.causal };
            let w = qkvo(o.q, o.k, o.v, o.o)?;
            p.check(&w)?;
            Prep::AftSimple(p, w)
        }
        MechanismOp::AftConv(o) => {
            let (t, d) = td(o.x)?;
            let p = AftConvParams {
                t,
                d,
                heads: o.heads as usize,
                kernel: o.kernel as usize,
                grid_h: o.grid[0] as usize,
                grid_w: o.grid[1] as usize,
            };
            let w = AftConvWeights { proj: qkvo(o.q, o.k, o.v, o.o)?, w: weight(file, o.w)? };
            p.check(&w)?;
            Prep::AftConv(p, w)
        }
        MechanismOp::Fastformer(o) => {
            let (t, d) = td(o.x)?;
            let p = FastformerParams { t, d, heads: o.heads as usize, scale: o.scale };
            let w = FastformerWeights {
                proj: qkvo(o.q, o.k, o.v, o.r)?,
                w: FastformerScores { wqa: weight(file, o.wqa)?, wka: weight(file, o.wka)? },
            };
            p.check(&w)?;
            Prep::Fastformer(p, w)
        }
    };
    Ok(prep)
}

pub(super) fn scratch_elems(file: &Graph<'_, '_>, op: &Op, fast: bool) -> Result<usize, ShapeError> {
    Ok(match prepare(file, op)? {
        Prep::Attention(p, _, g, _) if fast && g > 1 => attention_scratch_groups(&p, g).max(attention_scratch_fast(&p)),
        Prep::Attention(p, _, _, _) if fast => attention_scratch_fast(&p),
        Prep::Attention(p, _, _, _) => attention_scratch(&p),
        Prep::AftFull(p, _) if fast => aft_full_scratch_fast(&p),
        Prep::AftFull(p, _) => aft_full_scratch(&p),
        Prep::AftLocal(p, _) => aft_local_scratch(&p),
        Prep::AftSimple(p, _) => aft_simple_scratch(&p),
        Prep::AftConv(p, _) => aft_conv_scratch(&p),
        Prep::Fastformer(p, _) => fastformer_scratch(&p),
    })
}

pub(super) fn execute(file: &Graph<'_, '_>, op: &Op, io: &mut OpIo<'_>) -> Result<(), RunError> {
    let prep = prepare(file, op).map_err(|_| RunError::Internal("a validated node failed its check"))?;
    let batch = io.batch;
    let (acts, out, scratch, spare) = io.split_spare();
    let x_info = info(file, op.main_input())?;
    let x_all = acts.region(&x_info)?;
    let n = numel(&x_info)?;
    // The attention score bias: `[T]`, `[T, T]` or `[H, T, T]` per sample (an activation, `mn`
    // elements apart), or one constant for every sample (`mn` = 0), validated at load.
    let mask = match prep {
        Prep::Attention(.., Some(MaskSrc::Act(m, per_group))) => {
            let mi = info(file, m)?;
            Some((acts.region(&mi)?, numel(&mi)?, per_group))
        }
        Prep::Attention(.., Some(MaskSrc::Weight(values, per_group))) => Some((values, 0, per_group)),
        Prep::Attention(.., None)
        | Prep::AftFull(..)
        | Prep::AftLocal(..)
        | Prep::AftSimple(..)
        | Prep::AftConv(..)
        | Prep::Fastformer(..) => None,
    };
    // Sample s's mask (an activation's own, a constant's whole), and whether it is per sequence.
    let sample_mask =
        |s: usize| mask.map(|(all, mn, per_group)| (if mn == 0 { all } else { &all[s * mn..(s + 1) * mn] }, per_group));
    let one = |s: usize, x: &[f32], y: &mut [f32], scratch: &mut [f32]| match &prep {
        Prep::Attention(p, w, 1, _) => attention_masked(p, w, x, sample_mask(s).map(|(m, _)| m), y, scratch),
        Prep::Attention(p, w, g, _) => attention_groups_masked(p, w, *g, x, sample_mask(s), y, scratch),
        Prep::AftFull(p, w) => aft_full(p, w, x, y, scratch),
        Prep::AftLocal(p, w) => aft_local(p, w, x, y, scratch),
        Prep::AftSimple(p, w) => aft_simple(p, w, x, y, scratch),
        Prep::AftConv(p, w) => aft_conv(p, w, x, y, scratch),
        Prep::Fastformer(p, w) => fastformer(p, w, x, y, scratch),
    };
    // Samples in parallel: one scratch copy per task (the session's arena holds `1 + spare`
    // copies), samples dealt round-robin. Each sample runs the same code on its own scratch,
    // so results do not depend on the thread count.
    #[cfg(feature = "std")]
    {
        let per = scratch.len();
        let copies = spare.len().checked_div(per).map_or(usize::MAX, |c| c + 1);
        let tasks = crate::threads::threads().min(copies).min(batch);
        if tasks >= 2 {
            let (outs, copies) = (SharedMut::new(out), crate::threads::ScratchCopies::new(scratch, spare));
            crate::threads::for_each(tasks, &|t| {
                // SAFETY: task t alone uses scratch copy t and the output of samples ≡ t
                // (mod tasks).
                let sc = unsafe { copies.of(t) };
                for s in (t..batch).step_by(tasks) {
                    // SAFETY: as above.
                    let y = unsafe { outs.part(s * n, n) };
                    one(s, &x_all[s * n..(s + 1) * n], y, sc);
                }
            });
            return Ok(());
        }
    }
    let _ = spare;
    for s in 0..batch {
        one(s, &x_all[s * n..(s + 1) * n], &mut out[s * n..(s + 1) * n], scratch);
    }
    Ok(())
}
