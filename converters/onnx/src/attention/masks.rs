//! The masks of ONNX Attention's full expansion, each `[B|1, Hk|1, G|1, Sq|1, Skv]` (heads
//! grouped by key head, as the scores are): the given `attn_mask` as an additive f32 mask padded
//! with −∞ to the keys, and the structural "may attend" mask: causal and sliding-window bands offset by the cache, the key padding of
//! `nonpad_kv_seqlen`.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::TypedConcat;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::change_axes::{wire_with_rank_broadcast, AxisOp};
use tract_onnx::tract_core::ops::logic::{self, Iff};
use tract_onnx::tract_hir::internal::{bail, ensure, DimLike};

/// `attn_mask` (rank 1 to 4, broadcast right-aligned against `[B, Hq, Sq, Skv]`) as the additive
/// f32 mask the scores get: a boolean one as 0 where true and −∞ where false (the reference's
/// `Where(mask, 0, −∞)`), padded along the keys to `kv_len` with −∞ (as the reference pads a
/// mask shorter than the keys with a cache), brought to rank 5 with the query heads grouped
/// `[Hk, G]`.
pub(super) fn user_mask(
    prefix: &str,
    model: &mut TypedModel,
    m: OutletId,
    kv_len: usize,
    (hq, hk): (usize, usize),
) -> TractResult<OutletId> {
    let fact = model.outlet_fact(m)?.clone();
    ensure!(
        fact.datum_type == DatumType::Bool || fact.datum_type.is_float(),
        "Attention: attn_mask of type {:?} (bool or float)",
        fact.datum_type
    );
    let rank = fact.rank();
    ensure!((1..=4).contains(&rank), "Attention: attn_mask of rank {rank} (1 to 4)");
    let dims: Vec<usize> = fact.shape.iter().map(|d| Ok(d.to_usize()?)).collect::<TractResult<_>>()?;
    let mut m = m;
    if fact.datum_type == DatumType::Bool {
        m = additive_of(&format!("{prefix}.mask_additive"), model, m)?;
    } else if fact.datum_type != DatumType::F32 {
        m = model.wire_node(format!("{prefix}.mask_f32"), cast(DatumType::F32), &[m])?[0];
    }
    let last = dims[rank - 1];
    if last < kv_len {
        let mut pad_shape = dims.clone();
        pad_shape[rank - 1] = kv_len - last;
        let n = pad_shape.iter().product();
        let pad = Tensor::from_shape(&pad_shape, &vec![f32::NEG_INFINITY; n])?;
        let pad = model.add_const(format!("{prefix}.mask_pad"), pad)?;
        m = model.wire_node(format!("{prefix}.mask_padded"), TypedConcat { axis: rank - 1 }, &[m, pad])?[0];
    } else if last > kv_len && last != 1 {
        bail!("Attention: attn_mask covers {last} keys, there are {kv_len}");
    }
    for i in rank..4 {
        m = model.wire_node(format!("{prefix}.mask_rank_{i}"), AxisOp::Add(0), &[m])?[0];
    }
    let h = model.outlet_fact(m)?.shape[1].to_usize()?;
    m = if h == 1 {
        model.wire_node(format!("{prefix}.mask_groups"), AxisOp::Add(2), &[m])?[0]
    } else if h == hq {
        let split = AxisOp::Reshape(1, tvec![hq.to_dim()], tvec![hk.to_dim(), (hq / hk).to_dim()]);
        model.wire_node(format!("{prefix}.mask_groups"), split, &[m])?[0]
    } else {
        bail!("Attention: attn_mask over {h} heads, there are {hq} query heads")
    };
    Ok(m)
}

/// The attention's shape and structure for [`structural`].
pub(super) struct Band {
    pub sq: usize,
    pub skv: usize,
    /// The past's length (the causal and window offset without `nonpad_kv_seqlen`).
    pub past: usize,
    pub causal: bool,
    pub left: Option<usize>,
    pub right: Option<usize>,
}

impl Band {
    /// Whether query `i` may attend key `j` at offset `off` (the query block's first position).
    fn allows(&self, i: i64, j: i64, off: i64) -> bool {
        let p = i + off;
        (!self.causal || j <= p)
            && self.left.is_none_or(|l| p - j <= l as i64)
            && self.right.is_none_or(|r| j - p <= r as i64)
    }
}

/// The structural "may attend" mask, boolean, `[1, 1, 1, Sq, Skv]` (a constant: causal and
/// window bands at the past's offset) or `[B, 1, 1, Sq, Skv]` (from `nonpad_kv_seqlen`: keys
/// `j < n[b]`, the bands at offset `n[b] − Sq`); `None` where every key may be attended.
pub(super) fn structural(
    prefix: &str,
    model: &mut TypedModel,
    band: &Band,
    nonpad: Option<OutletId>,
) -> TractResult<Option<OutletId>> {
    let (sq, skv) = (band.sq, band.skv);
    let grid = |f: &dyn Fn(i64, i64) -> f32| -> TractResult<Tensor> {
        let v: Vec<f32> = (0..sq * skv).map(|x| f((x / skv) as i64, (x % skv) as i64)).collect();
        Tensor::from_shape(&[1, 1, 1, sq, skv], &v)
    };
    let Some(n) = nonpad else {
        let off = band.past as i64;
        let v: Vec<bool> = (0..sq * skv).map(|x| band.allows((x / skv) as i64, (x % skv) as i64, off)).collect();
        if v.iter().all(|&a| a) {
            return Ok(None);
        }
        return Ok(Some(model.add_const(format!("{prefix}.band"), Tensor::from_shape(&[1, 1, 1, sq, skv], &v)?)?));
    };
    let nf = model.outlet_fact(n)?.clone();
    ensure!(nf.rank() == 1, "Attention: nonpad_kv_seqlen of rank {} (1: one length per batch)", nf.rank());
    let mut n = model.wire_node(format!("{prefix}.nonpad_f32"), cast(DatumType::F32), &[n])?[0];
    for i in 1..5 {
        n = model.wire_node(format!("{prefix}.nonpad_axis_{i}"), AxisOp::Add(i), &[n])?[0];
    }
    // Each condition `a ≤ b` (or `a < b`) of a constant grid and the lengths, all true for `n[b]`.
    let sqf = sq as i64;
    let mut conds: Vec<(Tensor, bool, bool)> = vec![
        // Padding: j < n.
        (grid(&|_, j| j as f32)?, true, true),
    ];
    if band.causal {
        // j ≤ i + n − Sq  ⇔  j − i + Sq ≤ n.
        conds.push((grid(&|i, j| (j - i + sqf) as f32)?, true, false));
    }
    if let Some(l) = band.left {
        // i + n − Sq − j ≤ L  ⇔  n ≤ L + j − i + Sq.
        conds.push((grid(&|i, j| (l as i64 + j - i + sqf) as f32)?, false, false));
    }
    if let Some(r) = band.right {
        // j − (i + n − Sq) ≤ R  ⇔  j − i + Sq − R ≤ n.
        conds.push((grid(&|i, j| (j - i + sqf - r as i64) as f32)?, true, false));
    }
    let mut allowed: Option<OutletId> = None;
    for (k, (t, grid_first, strict)) in conds.into_iter().enumerate() {
        let c = model.add_const(format!("{prefix}.nonpad_grid_{k}"), t)?;
        let op = TypedBinOp(if strict { logic::comp_lt() } else { logic::comp_lte() }, None);
        let ins = if grid_first { [c, n] } else { [n, c] };
        let cond = wire_with_rank_broadcast(format!("{prefix}.nonpad_cond_{k}"), model, op, &ins)?[0];
        allowed = Some(and(&format!("{prefix}.nonpad_and_{k}"), model, allowed, Some(cond))?.unwrap_or(cond));
    }
    Ok(allowed)
}

/// A boolean mask as an additive f32 one: 0 where true, −∞ where false (a constant folded).
pub(super) fn additive_of(name: &str, model: &mut TypedModel, mask: OutletId) -> TractResult<OutletId> {
    if let Some(t) = model.outlet_fact(mask)?.konst.clone() {
        let v: Vec<f32> =
            t.to_plain_array_view::<bool>()?.iter().map(|&a| if a { 0.0 } else { f32::NEG_INFINITY }).collect();
        return model.add_const(name, Tensor::from_shape(t.shape(), &v)?);
    }
    let zero = model.add_const(format!("{name}.zero"), tensor0(0f32))?;
    let inf = model.add_const(format!("{name}.neg_inf"), tensor0(f32::NEG_INFINITY))?;
    Ok(wire_with_rank_broadcast(name, model, Iff, &[mask, zero, inf])?[0])
}

/// `a ∧ b` where both are given, else the one given.
pub(super) fn and(
    name: &str,
    model: &mut TypedModel,
    a: Option<OutletId>,
    b: Option<OutletId>,
) -> TractResult<Option<OutletId>> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(wire_with_rank_broadcast(name, model, logic::and(), &[a, b])?[0]),
        (a, b) => a.or(b),
    })
}
