//! Attention weights mixed with a constant attention map before the product with values, as one
//! `Sdpa` node plus the constant map's own product. ConViT's gated positional self-attention,
//! `attn = (1 − σ(g_h))·softmax(s·q·kᵀ) + σ(g_h)·softmax(pos)` with `pos` input-independent (a
//! constant once folded), renormalised `attn / Σ_j attn` and multiplied with the values, is the
//! class `attn = a ⊙ softmax(scores) + C`: `a` a constant per score row (per head, or shared),
//! `C` a constant map (per head or shared), either of them absent, optionally renormalised.
//! By linearity of the product with values,
//!
//! `attn · V = a ⊙ (softmax(scores) · V) + C · V`,
//!
//! and the renormalisation divides each row by `a_r + Σ_j C_rj` (the softmax's row sums to 1):
//! an identity where every row's total is 1 within [`RENORM_TOL`] (ConViT's: `1 − σ(g) + σ(g)`),
//! which is checked here at fuse time; another total is refused with the row and its value.
//!
//! The rewrite ([`fuse_mixed`]) replaces the softmax, the mix, the renormalisation and the
//! product with values by the softmax, its product with the values, the product scaled by `a`
//! (a weight of one value per row), the constant map made an activation (`Add(C, 0)`, as the
//! converter makes a constant a product's left factor) times the values, and their sum; it is
//! checked numerically like every fusion (on the softmax's real rows, so the renormalisation's
//! identity is checked too), then the `Sdpa` pattern takes the softmax as any other, checked in
//! turn, and the two are kept only together.

use super::score_mask::broadcast_to;
use super::sdpa_adopt::adopt_sdpa;
use super::sdpa_walk::keeps_keys;
use super::{dims, sole_consumer, try_replace, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;
use kestrel_rt_format::DType;

/// How far a renormalised row's total (`a_r + Σ_j C_rj`) may be from 1 for the renormalisation
/// to be taken as an identity: f32 rounding of a sum of a few hundred terms near 1.
pub(super) const RENORM_TOL: f64 = 1e-5;

/// The form found after a softmax.
struct Mixed {
    /// The nodes from the softmax to the product with values.
    nodes: Vec<usize>,
    /// One gate value per score row (`None`: no gate, 1).
    gate: Option<Vec<f32>>,
    /// The constant map at every weight's position, flat in the weights' order (`None`: none).
    map: Option<Vec<f32>>,
    /// The product with values.
    mm: MatMul,
}

/// Follows single-reader views keeping the key axis forward from `t`, pushing their nodes.
fn views(b: &ModelBuilder, mut t: TensorId, nodes: &mut Vec<usize>) -> TensorId {
    while let Some(c) = sole_consumer(b, t) {
        match b.ops()[c] {
            Op::Reshape(r) if keeps_keys(b, r.x, r.y) => {
                nodes.push(c);
                t = r.y;
            }
            _ => break,
        }
    }
    t
}

/// The other operand of `bin` when one is `t` and the other a weight.
fn constant_beside(b: &ModelBuilder, bin: &Binary, t: TensorId) -> Option<TensorId> {
    let other = if bin.a == t { bin.b } else { bin.a };
    (b.is_weight(other) && (bin.a == t || bin.b == t)).then_some(other)
}

/// `w`'s renormalisation `w / Σ_last w` (or `w · 1/Σ_last w`, views between): the nodes after the
/// sum and the normalised tensor; `None` where `w` is read otherwise.
fn renormalised(b: &ModelBuilder, w: TensorId) -> Option<(Vec<usize>, TensorId)> {
    let readers = b.consumers(w);
    if readers.len() != 2 || b.escapes(w) {
        return None;
    }
    let rank = dims(b, w)?.len();
    let (rn, dn) = match (b.ops()[readers[0]], b.ops()[readers[1]]) {
        (Op::Reduce(_), _) => (readers[0], readers[1]),
        (_, Op::Reduce(_)) => (readers[1], readers[0]),
        _ => return None,
    };
    let Op::Reduce(r) = b.ops()[rn] else { return None };
    if r.op != ReduceOp::Sum || r.axis as usize + 1 != rank {
        return None;
    }
    let mut nodes = vec![rn];
    let mut t = r.y;
    let mut reciprocal = false;
    loop {
        let c = sole_consumer(b, t)?;
        match b.ops()[c] {
            Op::Reshape(v) => t = v.y,
            Op::Unary(u) if u.op == UnaryOp::Reciprocal && !reciprocal => {
                reciprocal = true;
                t = u.y;
            }
            Op::Binary(bin) if c == dn => {
                let by_sum = bin.a == w && bin.b == t;
                let by_recip = bin.b == w && bin.a == t;
                let ok = match bin.op {
                    BinaryOp::Div => !reciprocal && by_sum,
                    BinaryOp::Mul => reciprocal && (by_sum || by_recip),
                    _ => false,
                };
                if !ok || dims(b, bin.y) != dims(b, w) {
                    return None;
                }
                nodes.push(c);
                return Some((nodes, bin.y));
            }
            _ => return None,
        }
        nodes.push(c);
    }
}

/// The mixed form after softmax node `at`: `None` where its weights (through views) do not feed
/// a product or a sum with a constant; else the form or why it is not one this rewrite takes.
fn find(b: &ModelBuilder, at: usize) -> Option<Result<Mixed, String>> {
    let Op::Softmax(sm) = b.ops()[at] else { return None };
    let sd = dims(b, sm.y)?;
    let (n, tk) = (sd.iter().product::<usize>(), *sd.last()?);
    let rows = n / tk.max(1);
    let mut nodes = vec![at];
    let mut t = views(b, sm.y, &mut nodes);
    let (mut gate, mut map): (Option<Vec<f32>>, Option<Vec<f32>>) = (None, None);
    // The gate and the map, in either order (at most one of each), each at the weights' size.
    while let Some(c) = sole_consumer(b, t) {
        let Op::Binary(bin) = b.ops()[c] else { break };
        let Some(k) = constant_beside(b, &bin, t) else { break };
        let (kd, yd) = (dims(b, k)?, dims(b, bin.y)?);
        if yd.iter().product::<usize>() != n || yd.last() != Some(&tk) {
            return Some(Err(format!(
                "the attention weights {sd:?} broadcast to {yd:?} by a constant {kd:?} before the product with values"
            )));
        }
        let Some(full) = broadcast_to(b.weight_values(k)?, &kd, &yd) else {
            return Some(Err(format!("a constant {kd:?} that does not broadcast to the attention weights {yd:?}")));
        };
        match bin.op {
            BinaryOp::Mul if gate.is_none() && map.is_none() => {
                if full.chunks(tk).any(|r| r.iter().any(|v| v.to_bits() != r[0].to_bits())) {
                    return Some(Err(format!(
                        "the attention weights multiplied by a constant {kd:?} that differs along the keys (a gate \
                         mixing two attentions scales whole rows)"
                    )));
                }
                gate = Some(full.chunks(tk).map(|r| r[0]).collect());
            }
            BinaryOp::Add if map.is_none() => map = Some(full),
            _ => break,
        }
        nodes.push(c);
        t = views(b, bin.y, &mut nodes);
    }
    if gate.is_none() && map.is_none() {
        return None;
    }
    let what = "the attention weights mixed with a constant attention map (a·softmax + C, as ConViT's gated \
                positional self-attention)";
    if let Some((renorm, y)) = renormalised(b, t) {
        // Each row's total: the softmax's 1 times the gate, plus the map's row.
        for r in 0..rows {
            let g = gate.as_ref().map_or(1.0, |g| f64::from(g[r]));
            let c: f64 = map.as_ref().map_or(0.0, |m| m[r * tk..(r + 1) * tk].iter().map(|&v| f64::from(v)).sum());
            if (g + c - 1.0).abs() > RENORM_TOL || !(g + c).is_finite() {
                return Some(Err(format!(
                    "{what}, renormalised where row {r}'s total (gate plus the map's row) is {:.6}, not 1 within \
                     {RENORM_TOL:e}: the renormalisation is no identity",
                    g + c
                )));
            }
        }
        nodes.extend(renorm);
        t = views(b, y, &mut nodes);
    }
    let Some(c) = sole_consumer(b, t) else {
        return Some(Err(format!("{what}, read by more than one node: no product with values alone")));
    };
    let Op::MatMul(mm) = b.ops()[c] else {
        return Some(Err(format!("{what}, feeding a {}, not a product with values", b.ops()[c].name())));
    };
    let (ad, yd) = (dims(b, mm.a)?, dims(b, mm.y)?);
    if mm.a != t || b.is_weight(mm.b) || ad.len() != yd.len() || ad[..ad.len() - 2] != yd[..yd.len() - 2] {
        return Some(Err(format!(
            "{what}, not the left factor of a product with activation values at the weights' batch"
        )));
    }
    nodes.push(c);
    Some(Ok(Mixed { nodes, gate, map, mm }))
}

/// Rewrites the form `m` after softmax node `at` as `a ⊙ (softmax · V) + C · V` (module doc),
/// checked numerically: the new softmax's output, or why not.
fn rewrite(b: &mut ModelBuilder, at: usize, m: &Mixed, report: &mut FusionReport) -> Result<TensorId, String> {
    let e = |e: crate::Error| e.to_string();
    let Op::Softmax(sm) = b.ops()[at] else { return Err("not a softmax".into()) };
    let (ad, yd) = (dims(b, m.mm.a).ok_or("shape")?, dims(b, m.mm.y).ok_or("shape")?);
    let mut ops = Vec::new();
    let w = b.new_activation("sdpa_mixed_weights", &dims(b, sm.y).ok_or("shape")?).map_err(e)?;
    ops.push(Op::Softmax(Softmax { x: sm.x, y: w }));
    let wv = b.new_activation("sdpa_mixed_weights", &ad).map_err(e)?;
    ops.push(Op::Reshape(Reshape { x: w, y: wv }));
    let last = m.gate.is_none() && m.map.is_none();
    let mut o = if last { m.mm.y } else { b.new_activation("sdpa_mixed_out", &yd).map_err(e)? };
    ops.push(Op::MatMul(MatMul { a: wv, y: o, ..m.mm }));
    if let Some(g) = &m.gate {
        let mut gd = yd.clone();
        *gd.last_mut().ok_or("shape")? = 1;
        let gw = b.weight_as("sdpa_mixed_gate", &gd, g.clone(), DType::F32).map_err(e)?;
        let y = if m.map.is_none() { m.mm.y } else { b.new_activation("sdpa_mixed_out", &yd).map_err(e)? };
        ops.push(Op::Binary(Binary { a: o, b: gw, op: BinaryOp::Mul, y }));
        o = y;
    }
    if let Some(c) = &m.map {
        let cw = b.weight_as("sdpa_mixed_map", &ad, c.clone(), DType::F32).map_err(e)?;
        let zero = b.weight_as("sdpa_mixed_map_zero", &[1], vec![0.0], DType::F32).map_err(e)?;
        let ca = b.new_activation("sdpa_mixed_map", &ad).map_err(e)?;
        ops.push(Op::Binary(Binary { a: cw, b: zero, op: BinaryOp::Add, y: ca }));
        let cv = b.new_activation("sdpa_mixed_map_out", &yd).map_err(e)?;
        ops.push(Op::MatMul(MatMul { a: ca, y: cv, ..m.mm }));
        ops.push(Op::Binary(Binary { a: o, b: cv, op: BinaryOp::Add, y: m.mm.y }));
    }
    let mut nodes = m.nodes.clone();
    nodes.sort_unstable();
    let region = Region { nodes, inputs: vec![sm.x, m.mm.b], output: m.mm.y };
    if try_replace(b, &region, ops, "attention mixed with a constant map, split by linearity", report) {
        Ok(w)
    } else {
        Err(report.rejected.last().cloned().unwrap_or_else(|| "the numerical check failed".into()))
    }
}

/// Fuses softmax node `at`, whose weights are mixed with a constant attention map (module doc),
/// as one `Sdpa` node plus the map's product in `b`: `None` where it is not that form, else
/// `Ok` or why not (`b` then unchanged).
pub(super) fn fuse_mixed(b: &mut ModelBuilder, at: usize, report: &mut FusionReport) -> Option<Result<(), String>> {
    let m = match find(b, at)? {
        Ok(m) => m,
        Err(why) => return Some(Err(why)),
    };
    let mut scratch = b.clone();
    let mut r = FusionReport::default();
    let w = match rewrite(&mut scratch, at, &m, &mut r) {
        Ok(w) => w,
        Err(why) => return Some(Err(why)),
    };
    let why = |w: String| format!("the softmax of an attention mixed with a constant map: {w}");
    Some(adopt_sdpa(b, scratch, w, r, report).map_err(why))
}
