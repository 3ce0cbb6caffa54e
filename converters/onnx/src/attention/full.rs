//! ONNX Attention's full expansion (see the module above): the reference's computation op by op,
//! in f32, with the query heads grouped by key head (`[B, Hk, G, Sq, D]` against
//! `[B, Hk, 1, Skv, D]`), so grouped-query attention needs no repeated keys.

use super::masks::{self, Band};
use super::{Heads, OnnxAttention};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::change_axes::{wire_with_rank_broadcast, AxisOp};
use tract_onnx::tract_core::ops::einsum::EinSum;
use tract_onnx::tract_core::ops::logic::Iff;
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_core::ops::nn::{Softmax, SoftmaxKind};
use tract_onnx::tract_hir::internal::{ensure, DimLike};
use tract_transformers::ops::scaled_masked_softmax::ScaledMaskedSoftmax;

/// Wires the attention of `h` (4-D heads, caches in front): returns the output `[B, Hq, Sq, Dv]`
/// and, when the node has one, `qk_matmul_output` `[B, Hq, Sq, Skv]` (both f32).
pub(super) fn wire(
    op: &OnnxAttention,
    prefix: &str,
    model: &mut TypedModel,
    h: &Heads,
    mask: Option<OutletId>,
    nonpad: Option<OutletId>,
) -> TractResult<(OutletId, Option<OutletId>)> {
    let f32_of = |model: &mut TypedModel, x: OutletId, name: &str| -> TractResult<OutletId> {
        if model.outlet_fact(x)?.datum_type == DatumType::F32 {
            return Ok(x);
        }
        Ok(model.wire_node(format!("{prefix}.{name}_f32"), cast(DatumType::F32), &[x])?[0])
    };
    let (q, k, v) = (f32_of(model, h.q, "q")?, f32_of(model, h.k, "k")?, f32_of(model, h.v, "v")?);
    let qs = model.outlet_fact(q)?.shape.to_tvec();
    let ks = model.outlet_fact(k)?.shape.to_tvec();
    let (hq, hk, sq, d, skv) =
        (qs[1].to_usize()?, ks[1].to_usize()?, qs[2].to_usize()?, qs[3].to_usize()?, ks[2].to_usize()?);
    let group = hq / hk;
    let split = AxisOp::Reshape(1, tvec![hq.to_dim()], tvec![hk.to_dim(), group.to_dim()]);
    let merge = AxisOp::Reshape(1, tvec![hk.to_dim(), group.to_dim()], tvec![hq.to_dim()]);
    let q = model.wire_node(format!("{prefix}.q_groups"), split, &[q])?[0];
    let k = model.wire_node(format!("{prefix}.k_groups"), AxisOp::Add(2), &[k])?[0];
    let v = model.wire_node(format!("{prefix}.v_groups"), AxisOp::Add(2), &[v])?[0];

    let konst = |model: &mut TypedModel, name: &str, x: f32| model.add_const(format!("{prefix}.{name}"), tensor0(x));
    let scores = model.wire_node(
        format!("{prefix}.scores"),
        EinSum::new("bhgmk,bhgnk->bhgmn".parse()?, DatumType::F32),
        &[q, k],
    )?[0];
    let scale = op.scale.unwrap_or_else(|| (d as f32).sqrt().recip());
    let s = konst(model, "scale", scale)?;
    let mut capped = wire_with_rank_broadcast(format!("{prefix}.scaled"), model, math::mul(), &[scores, s])?[0];
    if op.softcap != 0.0 {
        let c = konst(model, "softcap", op.softcap)?;
        let inner = wire_with_rank_broadcast(format!("{prefix}.softcap_div"), model, math::div(), &[capped, c])?[0];
        let t = model.wire_node(format!("{prefix}.softcap_tanh"), math::tanh(), &[inner])?[0];
        capped = wire_with_rank_broadcast(format!("{prefix}.softcap_mul"), model, math::mul(), &[t, c])?[0];
    }

    let mut additive = match mask {
        Some(m) => Some(masks::user_mask(&format!("{prefix}.attn_mask"), model, m, skv, (hq, hk))?),
        None => None,
    };
    let band = Band { sq, skv, past: h.past, causal: op.is_causal, left: op.window.0, right: op.window.1 };
    if let Some(n) = nonpad {
        let batch = model.outlet_fact(n)?.shape.iter().next().cloned();
        ensure!(
            batch.as_ref() == Some(&qs[0]),
            "Attention: nonpad_kv_seqlen of shape {:?} (one length per batch, {})",
            model.outlet_fact(n)?.shape,
            qs[0]
        );
    }
    // Every mask is additive (0 where a key may be attended, −∞ where not, the float mask's
    // values), the form the fusion passes take: the boolean ones through `Where(m, 0, −∞)`,
    // folded where constant.
    if let Some(band) = masks::structural(&format!("{prefix}.band"), model, &band, nonpad)? {
        let c = masks::additive_of(&format!("{prefix}.band_additive"), model, band)?;
        additive = Some(match additive {
            Some(f) => wire_with_rank_broadcast(format!("{prefix}.mask_band"), model, math::add(), &[f, c])?[0],
            None => c,
        });
    }
    let weights = match additive {
        Some(f) => {
            // A row with no key to attend (all −∞; the reference decides it on the mask, with
            // finite scores the same) softmaxes to NaN, which the exporters' guard after the
            // softmax (the fusion passes know it) turns into the reference's zeros.
            let sms = ScaledMaskedSoftmax { scale: tensor0(1f32).into_arc_tensor(), post_softmax_mask: false };
            let p = model.wire_node(format!("{prefix}.softmax"), sms, &[capped, f])?[0];
            let nan = model.wire_node(format!("{prefix}.softmax_is_nan"), math::is_nan(), &[p])?[0];
            let zero = konst(model, "softmax_zero", 0.0)?;
            wire_with_rank_broadcast(format!("{prefix}.softmax_nan_guard"), model, Iff, &[nan, zero, p])?[0]
        }
        None => model.wire_node(
            format!("{prefix}.softmax"),
            Softmax::new(tvec![4], None, SoftmaxKind::Softmax),
            &[capped],
        )?[0],
    };
    let y = model.wire_node(
        format!("{prefix}.att_out"),
        EinSum::new("bhgmn,bhgnv->bhgmv".parse()?, DatumType::F32),
        &[weights, v],
    )?[0];
    let y = model.wire_node(format!("{prefix}.heads"), merge.clone(), &[y])?[0];
    if !op.has_qk {
        return Ok((y, None));
    }
    let qk = match op.qk_mode {
        // The reference's modes 0 and 1 both give the scaled (and capped) scores.
        0 | 1 => capped,
        2 => match additive {
            Some(f) => wire_with_rank_broadcast(format!("{prefix}.qk_bias"), model, math::add(), &[capped, f])?[0],
            None => capped,
        },
        _ => weights,
    };
    let qk = model.wire_node(format!("{prefix}.qk_heads"), merge, &[qk])?[0];
    Ok((y, Some(qk)))
}
