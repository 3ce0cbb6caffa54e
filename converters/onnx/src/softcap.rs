//! ONNX Attention's `softcap` (opset 23: `softcap · tanh(scores / softcap)` on the scaled scores,
//! before the mask is added and the softmax taken; Gemma 2's `attn_logit_softcapping`). tract's
//! importer refuses the attribute, so [`take`] removes it from every Attention node before
//! tract reads the graph, remembering each node's cap by name, and [`expand`] expands the
//! `Sdpa` op tract makes of such a node with the cap put back (the expansion of the nodes
//! without one stays tract's own). The lowering then sees the products, the scale, the cap
//! (`Div`, `Tanh`, `Mul`), the mask and the softmax, which the `Sdpa` fusion takes back as one
//! node with its `softcap`.

use crate::error::Blocker;
use std::collections::HashMap;
use tract_onnx::pb::{AttributeProto, GraphProto};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::{wire_with_rank_broadcast, AxisOp};
use tract_onnx::tract_core::ops::einsum::EinSum;
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_core::ops::nn::{Softmax, SoftmaxKind};
use tract_onnx::tract_hir::internal::{bail, ensure, DimLike};
use tract_transformers::ops::scaled_masked_softmax::ScaledMaskedSoftmax;
use tract_transformers::ops::sdpa::Sdpa;

/// Soft caps taken off Attention nodes, by node name (tract names the node's `Sdpa`
/// `<name>.sdpa`).
#[derive(Debug, Default)]
pub(crate) struct SoftCaps(HashMap<String, f32>);

impl SoftCaps {
    /// The cap of the Attention node tract's `Sdpa` node `sdpa_name` was made from.
    fn of(&self, sdpa_name: &str) -> Option<(&str, f32)> {
        let onnx = sdpa_name.strip_suffix(".sdpa")?;
        self.0.get_key_value(onnx).map(|(k, &c)| (k.as_str(), c))
    }
}

/// Removes `softcap` from every ONNX Attention node (a non-zero one remembered by node name; a
/// node without a name gets one, unique in the graph). A cap that is not a finite number is a
/// blocker. The sign of a cap does not matter (`c · tanh(s / c)` is even in `c`): its magnitude is
/// kept.
pub(crate) fn take(g: &mut GraphProto) -> Result<SoftCaps, Vec<Blocker>> {
    let mut caps = HashMap::new();
    let mut blockers = Vec::new();
    let mut taken = std::collections::HashSet::new();
    let names: std::collections::HashSet<String> = g.node.iter().map(|n| n.name.clone()).collect();
    for (i, n) in g.node.iter_mut().enumerate() {
        if n.op_type != "Attention" || !(n.domain.is_empty() || n.domain == "ai.onnx") {
            continue;
        }
        let Some(at) = n.attribute.iter().position(|a| a.name == "softcap") else { continue };
        let a: AttributeProto = n.attribute.remove(at);
        let c = a.f;
        if c == 0.0 {
            continue;
        }
        if !c.is_finite() {
            blockers.push(Blocker {
                op: "Attention".into(),
                node: n.name.clone(),
                why: format!("bad attribute: softcap {c} (a finite number, 0 for none)"),
                remedy: None,
            });
            continue;
        }
        if n.name.is_empty() {
            let mut k = 0;
            n.name = loop {
                let name = format!("attention_softcap_{i}_{k}");
                if !names.contains(&name) && !taken.contains(&name) {
                    break name;
                }
                k += 1;
            };
        }
        if !taken.insert(n.name.clone()) {
            blockers.push(Blocker {
                op: "Attention".into(),
                node: n.name.clone(),
                why: "not supported: a soft cap on two Attention nodes of the same name".into(),
                remedy: None,
            });
            continue;
        }
        caps.insert(n.name.clone(), c.abs());
    }
    if blockers.is_empty() {
        Ok(SoftCaps(caps))
    } else {
        Err(blockers)
    }
}

/// Expands every tract `Sdpa` node: with its Attention node's soft cap where it had one
/// ([`capped`]), else as tract does. Every cap must find its node. Returns whether any was
/// expanded.
pub(crate) fn expand(model: &mut TypedModel, caps: &SoftCaps) -> TractResult<bool> {
    let mut any = false;
    let mut used = std::collections::HashSet::new();
    while let Some(id) = model.nodes().iter().find(|n| n.op_is::<Sdpa>()).map(|n| n.id) {
        let node = model.node(id);
        let Some(op) = node.op_as::<Sdpa>().cloned() else { break };
        let patch = match caps.of(&node.name) {
            Some((name, c)) => {
                used.insert(name.to_string());
                capped(model, node, &op, c)?
            }
            None => match op.patch_sdpa(model, node)? {
                Some(p) => p,
                None => break,
            },
        };
        patch.apply(model)?;
        any = true;
    }
    if let Some(missing) = caps.0.keys().find(|k| !used.contains(*k)) {
        bail!("not supported: the soft cap of Attention `{missing}` (tract's expansion of the node was not found)");
    }
    if any {
        model.compact()?;
    }
    Ok(any)
}

/// The expansion of one `Sdpa` node with a soft cap `c`: queries grouped by key head
/// (`[B, Hk, G, M, D]` against `[B, Hk, 1, N, D]`), the scores `q · kᵀ`, scaled (tract's
/// `scale`, else `1/√D`), capped `c · tanh(s / c)`, then the mask added and the softmax taken
/// (tract's own masked softmax, scale 1, so boolean and additive masks read as tract reads them),
/// the product with values, and the heads merged back.
fn capped(model: &TypedModel, node: &TypedNode, op: &Sdpa, c: f32) -> TractResult<TypedModelPatch> {
    use AxisOp::{Add, Reshape, Rm};
    if op.is_causal {
        // tract keeps the flag only for lengths it does not know; the loader binds them all.
        bail!("not supported: a soft cap on causal attention over lengths unknown at load");
    }
    let facts = model.node_input_facts(node.id)?;
    let acc = op.acc_datum_type;
    let mut g = TypedModel::default();
    let mut q = g.add_source("q", facts[0].clone())?;
    let mut k = g.add_source("k", facts[1].clone())?;
    let mut v = g.add_source("v", facts[2].clone())?;
    let mut mask = facts.get(3).map(|m| g.add_source("mask", (*m).clone())).transpose()?;
    let rank3 = facts[0].rank() == 3;
    if rank3 {
        q = g.wire_node("q_heads", Add(1), &[q])?[0];
        k = g.wire_node("k_heads", Add(1), &[k])?[0];
        v = g.wire_node("v_heads", Add(1), &[v])?[0];
        if let Some(m) = &mut mask {
            *m = g.wire_node("mask_heads", Add(1), &[*m])?[0];
        }
    }
    let qs = g.outlet_fact(q)?.shape.to_tvec();
    let ks = g.outlet_fact(k)?.shape.to_tvec();
    ensure!(qs.len() == 4 && ks.len() == 4, "Sdpa operands of rank {} and {}", qs.len(), ks.len());
    let (hq, hk) = (qs[1].to_usize()?, ks[1].to_usize()?);
    ensure!(hk > 0 && hq % hk == 0, "{hq} query heads over {hk} key heads");
    let group = hq / hk;
    let split = Reshape(1, tvec![hq.to_dim()], tvec![hk.to_dim(), group.to_dim()]);
    q = g.wire_node("q_groups", split.clone(), &[q])?[0];
    k = g.wire_node("k_groups", Add(2), &[k])?[0];
    v = g.wire_node("v_groups", Add(2), &[v])?[0];
    if let Some(m) = &mut mask {
        *m = if g.outlet_fact(*m)?.shape[1].is_one() {
            g.wire_node("mask_groups", Add(2), &[*m])?[0]
        } else {
            g.wire_node("mask_groups", split, &[*m])?[0]
        };
        if g.outlet_fact(*m)?.datum_type != acc && g.outlet_fact(*m)?.datum_type != DatumType::Bool {
            *m = g.wire_node("mask_cast", tract_onnx::tract_core::ops::cast::cast(acc), &[*m])?[0];
        }
    }
    let scale = match &op.scale {
        Some(t) => t.cast_to_scalar::<f32>()?,
        None => (ks[3].to_usize()? as f32).sqrt().recip(),
    };
    let scores = g.wire_node("scores", EinSum::new("bhgmk,bhgnk->bhgmn".parse()?, acc), &[q, k])?[0];
    let konst = |g: &mut TypedModel, name: &str, x: f32| g.add_const(name, tensor0(x).cast_to_dt(acc)?.into_owned());
    let s = konst(&mut g, "scale", scale)?;
    let scaled = wire_with_rank_broadcast("scaled", &mut g, math::mul(), &[scores, s])?[0];
    let cw = konst(&mut g, "softcap", c)?;
    let inner = wire_with_rank_broadcast("softcap_div", &mut g, math::div(), &[scaled, cw])?[0];
    let t = g.wire_node("softcap_tanh", math::tanh(), &[inner])?[0];
    let capped = wire_with_rank_broadcast("softcap_mul", &mut g, math::mul(), &[t, cw])?[0];
    let weights = match mask {
        Some(m) => {
            let one = tensor0(1f32).cast_to_dt(acc)?.into_owned();
            let sms = ScaledMaskedSoftmax { scale: one.into_arc_tensor(), post_softmax_mask: false };
            g.wire_node("softmax", sms, &[capped, m])?[0]
        }
        None => g.wire_node("softmax", Softmax::new(tvec![4], None, SoftmaxKind::Softmax), &[capped])?[0],
    };
    let mut y = g.wire_node("att_out", EinSum::new("bhgmn,bhgnv->bhgmv".parse()?, acc), &[weights, v])?[0];
    y = g.wire_node("heads", Reshape(1, tvec![hk.to_dim(), group.to_dim()], tvec![hq.to_dim()]), &[y])?[0];
    if rank3 {
        y = g.wire_node("heads_rank3", Rm(1), &[y])?[0];
    }
    if g.outlet_fact(y)?.datum_type != facts[0].datum_type {
        y = g.wire_node("cast_out", tract_onnx::tract_core::ops::cast::cast(facts[0].datum_type), &[y])?[0];
    }
    g.select_output_outlets(&[y])?;
    let mut patch = TypedModelPatch::new(format!("Expand soft-capped SDPA node {}", node.name));
    patch.model = g.into_decluttered()?;
    for (i, input) in patch.model.input_outlets()?.to_vec().into_iter().enumerate() {
        patch.taps.insert(input, node.inputs[i]);
    }
    let out = patch.model.output_outlets()?[0];
    patch.shunt_outside(model, node.id.into(), out)?;
    Ok(patch)
}
