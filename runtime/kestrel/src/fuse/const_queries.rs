//! Constant queries as one `Sdpa` node. Learned query tokens folded with their projection at
//! conversion (a pooling head's probe: SigLIP's MAP head, AIMv2, VideoPrism, SAM3; BLIP-2's
//! Q-Former queries) make the queries a weight. A product's left factor is always an activation
//! (the converter makes a constant one as below, and `Q · kᵀ` so written is the `Sdpa` pattern's
//! own form), so tract's form is the one to take: `k · Qᵀ`, the constant the right factor
//! (`[.., D, Tq]`, or `[.., Tq, D]` transposed by the product), scores `[.., Tk, Tq]`, then views
//! and transposes (and element-wise steps that commute with them: functions of one operand, a
//! scalar operand) that lay them out `[.., Tq, Tk]` for the softmax over the keys, which is
//! checked by tracing every score's position through them. `Q · kᵀ` with `Q` a constant made an
//! activation is the pattern's, but for a constant shared by the key heads (broadcast by the
//! product), which is broadcast to the product's batch here.
//!
//! The runtime has no op reading a weight as queries, so the product is first rewritten as a
//! product of activations ([`as_activation_product`]): the constant, laid out `[B.., Tq, D]` at
//! the product's batch `B` (transposed and broadcast here, at fuse time, as a new weight), plus a
//! one-element zero weight (an `Add`, as the converter makes a constant an activation), times the
//! keys transposed by the product, `q · kᵀ` `[B.., Tq, Tk]`, the element-wise steps after it and
//! a view to the layout the softmax's side had. That rewrite is checked numerically like every
//! fusion; the `Sdpa` pattern then takes the softmax as any other (scales, biases, masks, heads,
//! query rows), checked in turn, and the two are kept only together. Weights split back by
//! columns, each range times its own values (Pegasus-X's global tokens attending to themselves
//! and to the blocks), have their values joined between the two
//! ([`concat_values`](super::sdpa_concat_keys::concat_values), checked too).

use super::score_mask::broadcast_to;
use super::sdpa_adopt::adopt_sdpa;
use super::sdpa_concat_keys::{concat_values, split_columns};
use super::sdpa_reasons::weights_meet_values;
use super::{dims, scalar, sole_consumer, try_replace, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;
use kestrel_rt_format::DType;

/// The largest score tensor whose layout is traced element by element.
const MAX_TRACED: usize = 1 << 24;

/// A product of constant queries and keys behind a softmax's scores, and what turns it into
/// `q · kᵀ`.
pub(super) struct ConstProduct {
    /// The product's node.
    mm: usize,
    /// The keys, and the product's `transpose_b` for them (`[.., Tk, D]` where set).
    k: TensorId,
    k_transposed: bool,
    /// Whether the product is `k · Qᵀ` (keys × queries): the scores' last two axes swapped.
    keys_first: bool,
    /// The node making the constant an activation for `Q · kᵀ`, replaced with the product.
    made: Option<usize>,
    /// The constant queries laid out `[B.., Tq, D]` at the product's batch `B`.
    q_dims: Vec<usize>,
    q_values: Vec<f32>,
    /// The nodes after the product, up to the one writing `t`.
    chain: Vec<usize>,
    /// The element-wise nodes among them (re-applied to `q · kᵀ`, in order).
    steps: Vec<usize>,
    /// The scores laid out queries × keys (`[.., Tq, Tk]` in flat order): the rewrite's output.
    t: TensorId,
}

/// The nodes from the softmax's scores `x` back to a product of an activation by a constant,
/// through views, transposes and element-wise steps (the first operand of a `Binary` that leads
/// there), nearest the product first; `None` where there is no such product.
fn path_to_product(b: &ModelBuilder, x: TensorId, depth: usize) -> Option<Vec<usize>> {
    let p = b.producer(x)?;
    let mut rest = match b.ops()[p] {
        Op::MatMul(m) if !b.is_weight(m.a) && (b.is_weight(m.b) || made_activation(b, m.a).is_some()) => {
            return Some(vec![p])
        }
        _ if depth == 0 => return None,
        Op::Reshape(r) => path_to_product(b, r.x, depth - 1)?,
        Op::Transpose(r) => path_to_product(b, r.x, depth - 1)?,
        Op::Unary(u) => path_to_product(b, u.x, depth - 1)?,
        Op::Binary(bin) => {
            let side = |t: TensorId| if b.is_weight(t) { None } else { path_to_product(b, t, depth - 1) };
            side(bin.a).or_else(|| side(bin.b))?
        }
        _ => return None,
    };
    rest.push(p);
    Some(rest)
}

/// `t` a constant made an activation as the converter makes one, `Add(W, 0)` with a one-element
/// zero: the node and `W`.
fn made_activation(b: &ModelBuilder, t: TensorId) -> Option<(usize, TensorId)> {
    let p = b.producer(t)?;
    let Op::Binary(bin) = b.ops()[p] else { return None };
    let zero = |z: TensorId| scalar(b, z) == Some(0.0);
    match bin.op {
        BinaryOp::Add if b.is_weight(bin.a) && zero(bin.b) => Some((p, bin.a)),
        BinaryOp::Add if b.is_weight(bin.b) && zero(bin.a) => Some((p, bin.b)),
        _ => None,
    }
}

/// `Q · kᵀ` (product node `mm`) with `Q` a constant made an activation ([`made_activation`]) of
/// fewer heads than the product (shared by the key heads): the constant broadcast to the
/// product's batch, so the `Sdpa` pattern finds the key heads a prefix of the query heads.
fn broadcast_queries(b: &ModelBuilder, mm: usize, tk: usize) -> Option<Result<ConstProduct, String>> {
    let Op::MatMul(m) = b.ops()[mm] else { return None };
    let (add, w) = made_activation(b, m.a)?;
    let pd = dims(b, m.y)?;
    let r = pd.len();
    let wd = dims(b, w)?;
    let q_dims: Vec<usize> = pd[..r - 2].iter().copied().chain([pd[r - 2], *wd.last()?]).collect();
    let n = |d: &[usize]| d.iter().product::<usize>();
    if pd[r - 1] != tk || n(&wd) == n(&q_dims) || sole_consumer(b, m.a) != Some(mm) {
        return None;
    }
    let Some(q_values) = broadcast_to(b.weight_values(w)?, &wd, &q_dims) else {
        return Some(Err(format!("constant queries {wd:?} that do not broadcast to the product's {pd:?}")));
    };
    let (k, k_transposed) = (m.b, m.transpose_b);
    let (chain, steps) = (Vec::new(), Vec::new());
    Some(Ok(ConstProduct {
        mm,
        k,
        k_transposed,
        keys_first: false,
        made: Some(add),
        q_dims,
        q_values,
        chain,
        steps,
        t: m.y,
    }))
}

/// `x` (dims `d`, flat) transposed by `perm` (output axis `i` is input axis `perm[i]`).
fn transpose_flat<T: Copy>(x: &[T], d: &[usize], perm: &[usize]) -> Vec<T> {
    let r = d.len();
    let mut strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * d[i + 1];
    }
    let od: Vec<usize> = perm.iter().map(|&p| d[p]).collect();
    (0..x.len())
        .map(|o| {
            let (mut rem, mut at) = (o, 0);
            for a in (0..r).rev() {
                at += (rem % od[a]) * strides[perm[a]];
                rem /= od[a];
            }
            x[at]
        })
        .collect()
}

/// The permutation swapping the last two of `r` axes.
fn swap_last_two(r: usize) -> Vec<usize> {
    (0..r)
        .map(|i| {
            if i + 2 == r {
                r - 1
            } else if i + 1 == r {
                r - 2
            } else {
                i
            }
        })
        .collect()
}

/// The constant-query product behind softmax `sm`: `None` where its scores come from no product
/// with one constant operand laid out queries × keys (a classifier's softmax over classes, a
/// softmax over the queries); else the product, or why it cannot be rewritten.
pub(super) fn const_product(b: &ModelBuilder, sm: &Softmax) -> Option<Result<ConstProduct, String>> {
    let path = path_to_product(b, sm.x, 12)?;
    let mm = path[0];
    let Op::MatMul(m) = b.ops()[mm] else { return None };
    let pd = dims(b, m.y)?;
    let r = pd.len();
    let batch = &pd[..r - 2];
    let tk = *dims(b, sm.x)?.last()?;
    if !b.is_weight(m.b) {
        return broadcast_queries(b, mm, tk);
    }
    // The keys' rows the scores' rows (`[.., Tk, D]`); the constant `[.., D, Tq]` or, transposed
    // by the product, `[.., Tq, D]`.
    let (qc, q_rows_first, k, tq) = (m.b, m.transpose_b, m.a, pd[r - 1]);
    if pd[r - 2] != tk {
        return None;
    }
    // Follow the path forward to the first tensor laid out queries × keys.
    let mut chain = Vec::new();
    let mut steps = Vec::new();
    let mut t = m.y;
    let n: usize = pd.iter().product();
    if n > MAX_TRACED {
        return Some(Err(format!("constant queries whose scores {pd:?} are too large to trace their layout")));
    }
    let iota: Vec<u32> = (0..n as u32).collect();
    let want = transpose_flat(&iota, &pd, &swap_last_two(r));
    let (mut at, mut ad) = (iota, pd.clone());
    for &node in &path[1..] {
        if at == want && ad.last() == Some(&tk) {
            break;
        }
        if sole_consumer(b, t) != Some(node) {
            if !weights_meet_values(b, sm.y) {
                return None;
            }
            return Some(Err(format!(
                "constant queries whose scores (k·Qᵀ {pd:?}) are read by another node before they are laid out \
                 queries × keys"
            )));
        }
        let op = b.ops()[node];
        match op {
            Op::Reshape(_) => {}
            Op::Transpose(tr) => {
                let perm: Vec<usize> = tr.perm[..ad.len()].iter().map(|&p| usize::from(p)).collect();
                at = transpose_flat(&at, &ad, &perm);
            }
            Op::Unary(_) => steps.push(node),
            Op::Binary(bin) if [bin.a, bin.b].iter().any(|&o| o != t && scalar(b, o).is_some()) => steps.push(node),
            _ if !weights_meet_values(b, sm.y) => return None,
            _ => {
                let other = match op {
                    Op::Binary(bin) => {
                        let o = if bin.a == t { bin.b } else { bin.a };
                        let kind = if b.is_weight(o) { "a constant" } else { "an activation" };
                        format!(" with {kind} {:?}", dims(b, o).unwrap_or_default())
                    }
                    _ => String::new(),
                };
                return Some(Err(format!(
                    "constant queries whose scores (k·Qᵀ {pd:?}, keys × queries) meet a {}{other} before they \
                     are laid out queries × keys: only views, transposes and steps of one element each (a \
                     function, a scalar) are taken there",
                    op.name()
                )));
            }
        }
        ad = dims(b, op.output())?;
        t = op.output();
        chain.push(node);
    }
    if !(at == want && ad.last() == Some(&tk)) {
        // Never laid out queries × keys: a softmax over the constant's side, no attention.
        return None;
    }
    // The constant, laid out `[.., Tq, D]`, broadcast to the product's batch.
    let cd = dims(b, qc)?;
    let cr = cd.len();
    let mut values = b.weight_values(qc)?.to_vec();
    let mut rows_first = cd.clone();
    if !q_rows_first {
        values = transpose_flat(&values, &cd, &swap_last_two(cr));
        rows_first.swap(cr - 2, cr - 1);
    }
    let d = rows_first[cr - 1];
    let q_dims: Vec<usize> = batch.iter().copied().chain([tq, d]).collect();
    let Some(q_values) = broadcast_to(&values, &rows_first, &q_dims) else {
        return Some(Err(format!("constant queries {cd:?} that do not broadcast to the product's {pd:?}")));
    };
    Some(Ok(ConstProduct {
        mm,
        k,
        k_transposed: true,
        keys_first: true,
        made: None,
        q_dims,
        q_values,
        chain,
        steps,
        t,
    }))
}

/// Rewrites `c`'s product and the steps after it as `q · kᵀ` with `q` the constant made an
/// activation (see the module's doc), checked numerically; the pattern's name counted in
/// `report`, or why not.
fn as_activation_product(b: &mut ModelBuilder, c: &ConstProduct, report: &mut FusionReport) -> Result<(), String> {
    let e = |e: crate::Error| e.to_string();
    let mut ops = Vec::new();
    let qw = b.weight_as("sdpa_const_queries", &c.q_dims, c.q_values.clone(), DType::F32).map_err(e)?;
    let zero = b.weight_as("sdpa_const_queries_zero", &[1], vec![0.0], DType::F32).map_err(e)?;
    let q = b.new_activation("sdpa_queries", &c.q_dims).map_err(e)?;
    ops.push(Op::Binary(Binary { a: qw, b: zero, op: BinaryOp::Add, y: q }));
    let Op::MatMul(m) = b.ops()[c.mm] else { return Err("the product went missing".into()) };
    // `[B.., Tq, Tk]`: the product's dims, with the last two swapped for `k · Qᵀ`.
    let mut sd = dims(b, m.y).ok_or("shape")?;
    if c.keys_first {
        let r = sd.len();
        sd.swap(r - 2, r - 1);
    }
    // Each new node's output: the rewrite's own `t` for the last where the layout is the same.
    let direct = dims(b, c.t).as_ref() == Some(&sd);
    let count = 1 + c.steps.len();
    let out = |b: &mut ModelBuilder, i: usize| {
        if direct && i + 1 == count {
            Ok(c.t)
        } else {
            b.new_activation("sdpa_scores", &sd).map_err(e)
        }
    };
    let mut s = out(b, 0)?;
    ops.push(Op::MatMul(MatMul { a: q, b: c.k, transpose_b: c.k_transposed, y: s }));
    for (i, &n) in c.steps.iter().enumerate() {
        // The step's input on the chain: the output of the node before it.
        let at = c.chain.iter().position(|&x| x == n).ok_or("a step off the chain")?;
        let input = if at == 0 { m.y } else { b.ops()[c.chain[at - 1]].output() };
        let y = out(b, i + 1)?;
        ops.push(match b.ops()[n] {
            Op::Unary(u) => Op::Unary(Unary { x: s, y, ..u }),
            Op::Binary(bin) if bin.a == input => Op::Binary(Binary { a: s, y, ..bin }),
            Op::Binary(bin) => Op::Binary(Binary { b: s, y, ..bin }),
            _ => return Err("a step that is no element-wise op".into()),
        });
        s = y;
    }
    if !direct {
        ops.push(Op::Reshape(Reshape { x: s, y: c.t }));
    }
    let mut nodes: Vec<usize> = std::iter::once(c.mm).chain(c.made).chain(c.chain.iter().copied()).collect();
    nodes.sort_unstable();
    let region = Region { nodes, inputs: vec![c.k], output: c.t };
    if try_replace(b, &region, ops, "constant queries made an activation", report) {
        Ok(())
    } else {
        Err(report.rejected.last().cloned().unwrap_or_else(|| "the numerical check failed".into()))
    }
}

/// Fuses softmax node `at` over constant queries as one `Sdpa` node in `b` (the product made one
/// of activations, then the `Sdpa` pattern, each checked numerically): `None` where its scores
/// are no constant-query product; else whether it fused, or why not (then `b` is unchanged).
pub(super) fn fuse_const_queries(
    b: &mut ModelBuilder,
    at: usize,
    report: &mut FusionReport,
) -> Option<Result<(), String>> {
    let Op::Softmax(sm) = b.ops()[at] else { return None };
    let found = const_product(b, &sm)?;
    let why = |w: String| format!("constant queries (learned query tokens folded with their projection): {w}");
    let c = match found {
        Ok(c) => c,
        Err(w) => return Some(Err(why(w))),
    };
    let mut scratch = b.clone();
    let mut r = FusionReport::default();
    if let Err(w) = as_activation_product(&mut scratch, &c, &mut r) {
        return Some(Err(why(w)));
    }
    // Weights split back by columns, each range times its own values (Pegasus-X's global tokens
    // attending to themselves and the blocks): the values joined first.
    if let Some(cols) = split_columns(&scratch, sm.y) {
        if let Err(w) = concat_values(&mut scratch, sm.y, &cols, &mut r) {
            return Some(Err(why(w)));
        }
    }
    Some(adopt_sdpa(b, scratch, sm.y, r, report).map_err(why))
}
