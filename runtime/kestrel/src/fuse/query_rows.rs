//! Attention weights cut by query rows after the softmax. tract pushes a graph's slice of the
//! attention output up through the product with values, so a block whose output only the class
//! token's row is read (a ViT's last block, CrossViT's cross-attention, PiT's pooling) computes
//! `Slice(softmax(s), rows) · v`, and a block whose class token and patch tokens go different
//! ways (TNT, CvT, CrossViT, Funnel, GroupViT) reads the weights through two slices that
//! partition the query rows, each with its own product with values.
//!
//! Weights cut by query rows are the attention of those queries only: the `Sdpa` pattern
//! ([`sdpa`](super::sdpa)) takes one slice after the softmax, cuts the queries (and a bias's
//! rows) alike, and its node computes the kept rows only. Weights read by several such slices are
//! split first ([`split_chains`], by the pass in [`sdpa_pass`](super::sdpa_pass)): the score
//! chain (the product through the softmax) is copied for every slice after the first, so each
//! slice has its own; each part is then fused, and the split is kept only where every part fuses
//! (otherwise the copies would compute the scores again).

use super::sdpa_walk::leads_to_scores;
use super::{dims, sole_consumer};
use crate::builder::{remap_op, Region};
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;
use std::collections::HashMap;

/// Does `sl` cut query rows: the second-to-last axis of its input (rank 2 or more), no padding?
pub(super) fn query_rows(b: &ModelBuilder, sl: &Slice) -> bool {
    let r = dims(b, sl.x).map_or(0, |d| d.len());
    r >= 2 && sl.axis as usize == r - 2 && sl.offset == 0 && sl.len == sl.count && sl.count > 0 && sl.step > 0
}

/// The bias `x` (`[hb, tq or 1, tk]`) with its query rows cut as `sl` cuts the weights': a
/// constant's rows picked here, an activation's by a `Slice` pushed to `ops`; `x` itself where its
/// rows are broadcast.
pub(super) fn slice_bias_rows(
    b: &mut ModelBuilder,
    x: TensorId,
    sl: Slice,
    tq: usize,
    ops: &mut Vec<Op>,
) -> Result<TensorId, String> {
    let d = dims(b, x).ok_or("shape")?;
    if d.len() != 3 || d[1] == 1 {
        return Ok(x);
    }
    if d[1] != tq {
        return Err(format!("a bias of {} query rows where the scores have {tq}", d[1]));
    }
    let (start, step, count) = (sl.start as usize, sl.step as usize, sl.count as usize);
    if start + step * (count - 1) >= tq {
        return Err("a cut of the query rows past the scores' end".into());
    }
    let want = [d[0], count, d[2]];
    if b.is_weight(x) {
        let v = b.weight_values(x).ok_or("bias values")?;
        let mut rows = Vec::with_capacity(want.iter().product());
        for h in 0..d[0] {
            for i in 0..count {
                let at = (h * tq + start + i * step) * d[2];
                rows.extend_from_slice(&v[at..at + d[2]]);
            }
        }
        return b.weight_as("sdpa_bias_rows", &want, rows, kestrel_rt_format::DType::F32).map_err(|e| e.to_string());
    }
    let y = b.new_activation("sdpa_bias_rows", &want).map_err(|e| e.to_string())?;
    ops.push(Op::Slice(Slice { x, axis: 1, y, ..sl }));
    Ok(y)
}

/// The readers of `t` (a softmax's weights) when there are two or more and every one cuts query
/// rows.
pub(super) fn row_slices(b: &ModelBuilder, t: TensorId) -> Option<Vec<usize>> {
    let readers = b.consumers(t);
    let cuts = readers.iter().all(|&c| matches!(b.ops()[c], Op::Slice(sl) if query_rows(b, &sl)));
    (readers.len() >= 2 && cuts && !b.escapes(t)).then_some(readers)
}

/// The score chain ending in softmax node `at`: the nodes from the score product (a product of
/// two activations) to the softmax, each output read only by the next, in graph order.
pub(super) fn score_chain(b: &ModelBuilder, at: usize) -> Option<Vec<usize>> {
    let Op::Softmax(sm) = b.ops()[at] else { return None };
    let (mut chain, mut t, mut reader) = (vec![at], sm.x, at);
    for _ in 0..32 {
        let p = b.producer(t)?;
        (sole_consumer(b, t)? == reader).then_some(())?;
        chain.push(p);
        t = match b.ops()[p] {
            Op::MatMul(m) if !b.is_weight(m.a) && !b.is_weight(m.b) => {
                chain.reverse();
                return Some(chain);
            }
            Op::Binary(bin) if leads_to_scores(b, bin.a, 8) => bin.a,
            Op::Binary(bin) if leads_to_scores(b, bin.b, 8) => bin.b,
            Op::Unary(u) => u.x,
            Op::Reshape(r) => r.x,
            Op::Transpose(r) => r.x,
            _ => return None,
        };
        reader = p;
    }
    None
}

/// Gives every slice reading softmax node `at`'s weights after the first its own copy of the score
/// chain `chain` ([`score_chain`]): the weights each slice now reads, the original's first.
pub(super) fn split_chains(b: &mut ModelBuilder, at: usize, chain: &[usize]) -> Result<Vec<TensorId>, String> {
    let Op::Softmax(sm) = b.ops()[at] else { return Err("not a softmax".into()) };
    let readers = b.consumers(sm.y);
    let mut weights = vec![sm.y];
    // Last reader first: inserting before a reader moves only the nodes after it.
    for &c in readers[1..].iter().rev() {
        let mut map: HashMap<TensorId, TensorId> = HashMap::new();
        let mut ops = Vec::with_capacity(chain.len() + 1);
        for &n in chain {
            let op = b.ops()[n];
            let y = op.output();
            let d = dims(b, y).ok_or("a score tensor without a shape")?;
            let z = b.new_activation("query_rows_scores", &d).map_err(|e| e.to_string())?;
            map.insert(y, z);
            ops.push(remap_op(&op, |t| map.get(&t).copied().unwrap_or(t)));
        }
        let copy = map[&sm.y];
        let reader = remap_op(&b.ops()[c], |t| if t == sm.y { copy } else { t });
        ops.push(reader);
        let region = Region { nodes: vec![c], inputs: Vec::new(), output: reader.output() };
        b.replace(&region, ops).map_err(|e| format!("splitting the attention weights by query rows: {e}"))?;
        weights.push(copy);
    }
    Ok(weights)
}
