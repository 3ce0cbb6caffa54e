//! The four attention mechanisms of "You Need to Pay Better Attention", written out with dense
//! layers, head reshapes/transposes, two matrix products, a scale and a softmax, fused into one
//! `Attention` node.
//!
//! The matcher is deliberately loose about layout (any chain of reshapes and transposes between
//! a projection and the score product, the scale on q, k or the scores, multiply or divide, an
//! additive causal mask, an additive or subtracted computed bias such as a padding mask or T5's
//! relative bias, constant biases added or subtracted such as Swin's relative-position bias and
//! shifted-window mask, EfficientFormer's learned table or ALiBi's, and masked fills with a
//! constant condition (`s·keep + fill`, a sliding window), combined into one additive mask
//! ([`score_mask`](super::score_mask)); these become the fused node's causal flag or `mask`
//! input, per head where they differ by head): it reads off the variant, the heads, the scale and
//! the weights, and the numerical check decides whether the fused node really computes the same
//! thing.

use super::score_mask::{broadcast_to, combine, MaskStep};
use super::{around_shape, rewrite_each, scalar, skip_nan_guard, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;
use kestrel_rt_format::DType;

/// Walks back from `t` through reshapes, transposes and multiplications/divisions by a scalar
/// (folded into `scale`), collecting the nodes; returns the first tensor that is none of those.
pub(super) fn through_layout(b: &ModelBuilder, mut t: TensorId, nodes: &mut Vec<usize>, scale: &mut f32) -> TensorId {
    while let Some(p) = b.producer(t) {
        match b.ops()[p] {
            Op::Reshape(r) => t = r.x,
            Op::Transpose(r) => t = r.x,
            Op::Binary(bin) if matches!(bin.op, BinaryOp::Mul | BinaryOp::Div) => {
                let (x, s) = if let Some(s) = scalar(b, bin.b) {
                    (bin.a, if bin.op == BinaryOp::Div { 1.0 / s } else { s })
                } else if let (Some(s), BinaryOp::Mul) = (scalar(b, bin.a), bin.op) {
                    (bin.b, s)
                } else {
                    return t;
                };
                *scale *= s;
                t = x;
            }
            _ => return t,
        }
        nodes.push(p);
    }
    t
}

/// Walks forward from `t` through sole-consumer reshapes and transposes.
pub(super) fn forward_layout(b: &ModelBuilder, mut t: TensorId, nodes: &mut Vec<usize>) -> TensorId {
    while let Some(c) = sole_consumer(b, t) {
        match b.ops()[c] {
            Op::Reshape(r) => t = r.y,
            Op::Transpose(r) => t = r.y,
            _ => return t,
        }
        nodes.push(c);
    }
    t
}

/// Follows reshape views back to the tensor they view, collecting the view nodes.
pub(super) fn root_view(b: &ModelBuilder, mut t: TensorId, nodes: &mut Vec<usize>) -> TensorId {
    while let Some(p) = b.producer(t) {
        let Op::Reshape(r) = b.ops()[p] else { break };
        nodes.push(p);
        t = r.x;
    }
    t
}

/// [`root_view`], unless the root is not a `[T, d]`, `[1, T, d]` or `[G, T, d]` tensor (Swin's
/// window partition ends in a transpose to `[1, nH, nW, w, w, C]`, viewed as `[G, T, C]`): then
/// the view of that shape nearest the root.
pub(super) fn sequence_view(b: &ModelBuilder, t: TensorId, nodes: &mut Vec<usize>) -> TensorId {
    let mut chain = vec![(t, None)];
    let mut at = t;
    while let Some(p) = b.producer(at) {
        let Op::Reshape(r) = b.ops()[p] else { break };
        chain.push((r.x, Some(p)));
        at = r.x;
    }
    let end = if sequences(b, at).is_some() {
        chain.len() - 1
    } else {
        chain.iter().rposition(|&(v, _)| sequences(b, v).is_some()).unwrap_or(chain.len() - 1)
    };
    nodes.extend(chain[1..=end].iter().filter_map(|&(_, p)| p));
    chain[end].0
}

/// Tokens and features of a `[T, d]` or `[1, T, d]` tensor.
pub(super) fn tokens(b: &ModelBuilder, t: TensorId) -> Option<(usize, usize)> {
    let s = b.shape_of(t)?;
    match s.dims() {
        [t, d] => Some((*t as usize, *d as usize)),
        [1, t, d] => Some((*t as usize, *d as usize)),
        _ => None,
    }
}

/// Sequences, tokens and features of a `[T, d]`, `[1, T, d]` or `[G, T, d]` tensor (G
/// independent sequences per sample, as MobileViT attends over each patch pixel's tokens).
pub(super) fn sequences(b: &ModelBuilder, t: TensorId) -> Option<(usize, usize, usize)> {
    let s = b.shape_of(t)?;
    match s.dims() {
        [g, t, d] => Some((*g as usize, *t as usize, *d as usize)),
        _ => tokens(b, t).map(|(t, d)| (1, t, d)),
    }
}

/// The projection producing `t` from `x`: a bias-optional, activation-free dense layer.
pub(super) fn projection(b: &ModelBuilder, t: TensorId) -> Option<(usize, Dense)> {
    let p = b.producer(t)?;
    match b.ops()[p] {
        Op::Dense(d) if d.act == Activation::None => Some((p, d)),
        _ => None,
    }
}

/// The output projection reading `t`: through layout views (pushed to `nodes`) to its sole
/// reader, an activation-free dense layer (pushed too).
pub(super) fn output_projection(b: &ModelBuilder, t: TensorId, nodes: &mut Vec<usize>) -> Option<Dense> {
    let on = sole_consumer(b, forward_layout(b, t, nodes))?;
    match b.ops()[on] {
        Op::Dense(od) if od.act == Activation::None => {
            nodes.push(on);
            Some(od)
        }
        _ => None,
    }
}

/// `W^A X + b^A` written as transpose → dense over tokens (→ transpose, which the layout walk
/// may already have passed) (→ an add of a per-token constant, when a converter could not fold
/// b^A into the dense bias): returns the nodes, the dense layer and the values of b^A if they
/// must be assembled into a new weight.
fn token_mixing(b: &ModelBuilder, v: TensorId, x: TensorId, t: usize) -> Option<(Vec<usize>, Proj, Option<Vec<f32>>)> {
    let mut nodes = Vec::new();
    let mut v = v;
    let mut extra_bias: Option<Vec<f32>> = None;
    if let Some(p) = b.producer(v) {
        if let Op::Binary(bin) = b.ops()[p] {
            if bin.op != BinaryOp::Add {
                return None;
            }
            let (other, c) = if b.is_weight(bin.b) { (bin.a, bin.b) } else { (bin.b, bin.a) };
            let vals = b.weight_values(c)?;
            if vals.len() != t {
                return None;
            }
            extra_bias = Some(vals.to_vec());
            nodes.push(p);
            v = through_layout(b, other, &mut nodes, &mut 1.0);
        }
    }
    if let Some(t2) = b.producer(v) {
        if let Op::Transpose(tr2) = b.ops()[t2] {
            nodes.push(t2);
            v = tr2.x;
        }
    }
    let (dn, d) = projection(b, v)?;
    let t1 = b.producer(d.x)?;
    let Op::Transpose(tr1) = b.ops()[t1] else { return None };
    nodes.extend([t1, dn]);
    if root_view(b, tr1.x, &mut nodes) != x {
        return None;
    }
    let bias = match (extra_bias, d.proj.b) {
        (None, _) => None,
        (Some(e), None) => Some(e),
        (Some(e), Some(own)) => Some(e.iter().zip(b.weight_values(own)?).map(|(a, c)| a + c).collect()),
    };
    Some((nodes, d.proj, bias))
}

/// Fuses every attention block it can prove.
pub(super) fn attention(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "attention", |b, i| {
        matches!(b.ops()[i], Op::Softmax(_)).then(|| match_attention(b, i)).flatten()
    });
}

fn match_attention(b: &mut ModelBuilder, softmax: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Softmax(sm) = b.ops()[softmax] else { return None };
    let mut nodes = vec![softmax];
    let mut scale = 1.0f32;
    // Scores: scalar scalings, additive terms and masked fills between the product and the
    // softmax, nearest the softmax first: constant terms (a causal mask, a learned or
    // relative-position bias, ALiBi's subtracted one, a shifted-window mask), each with its
    // coefficient (the scale after it, negated where subtracted) and the tensor it is added to;
    // masked fills' 0/1 factors (`s·keep + fill`); at most one computed bias (a padding mask,
    // T5's relative bias) with its coefficient.
    let mut s = sm.x;
    let mut steps: Vec<Step> = Vec::new();
    let mut bias: Option<(TensorId, f32)> = None;
    let scores = loop {
        let p = b.producer(s)?;
        match b.ops()[p] {
            Op::MatMul(m) => break (p, m),
            // A masked fill lowered as `s·keep + fill` or `When(s, keep) + fill`: keep a constant
            // (checked to be 0 or 1).
            Op::Binary(bin) if is_keep(b, &bin) => {
                let (x, m) = if b.is_weight(bin.b) { (bin.a, bin.b) } else { (bin.b, bin.a) };
                if bin.op == BinaryOp::Mul && scalar(b, m).is_some() {
                    let mut n = Vec::new();
                    s = through_layout(b, s, &mut n, &mut scale);
                    nodes.extend(n);
                    continue;
                }
                steps.push(Step::Keep(m, bin.y));
                s = x;
            }
            Op::Binary(bin) if matches!(bin.op, BinaryOp::Add | BinaryOp::Sub) => {
                let sub = bin.op == BinaryOp::Sub;
                let coef = if sub { -scale } else { scale };
                if b.is_weight(bin.b) || (!sub && b.is_weight(bin.a)) {
                    // A constant term (`w - s` is not one: the scores negated).
                    let (x, m) = if b.is_weight(bin.b) { (bin.a, bin.b) } else { (bin.b, bin.a) };
                    steps.push(Step::Add(m, coef, bin.y));
                    s = x;
                } else if b.is_weight(bin.a) {
                    return None;
                } else {
                    // A computed bias (a padding mask): the operand that does not lead back to
                    // the score product (subtracted: the second).
                    if bias.is_some() {
                        return None;
                    }
                    let (x, m) = if sub || leads_to_product(b, bin.a) { (bin.a, bin.b) } else { (bin.b, bin.a) };
                    if sub && !leads_to_product(b, x) {
                        return None;
                    }
                    bias = Some((m, coef));
                    s = x;
                }
            }
            // Layout ops between the product and the softmax (an exporter's head transposes);
            // the numerical check rejects any that moved the key axis.
            Op::Binary(_) | Op::Reshape(_) | Op::Transpose(_) => {
                let mut n = Vec::new();
                let x = through_layout(b, s, &mut n, &mut scale);
                if n.is_empty() {
                    return None;
                }
                s = x;
                nodes.extend(n);
                continue;
            }
            _ => return None,
        }
        nodes.push(p);
    };
    let (mm1, m1) = scores;
    nodes.push(mm1);
    let q_src = through_layout(b, m1.a, &mut nodes, &mut scale);
    let k_src = through_layout(b, m1.b, &mut nodes, &mut scale);
    // Weighted sum of values.
    let mut probs = forward_layout(b, sm.y, &mut nodes);
    let after_guard = skip_nan_guard(b, probs, &mut nodes);
    let guarded = after_guard != probs;
    if guarded {
        probs = forward_layout(b, after_guard, &mut nodes);
    }
    let mm2 = sole_consumer(b, probs)?;
    let Op::MatMul(m2) = b.ops()[mm2] else { return None };
    if m2.a != probs {
        return None;
    }
    nodes.push(mm2);
    let mut unused = 1.0f32;
    let v_src = through_layout(b, m2.b, &mut nodes, &mut unused);
    if unused != 1.0 {
        return None;
    }
    let od = output_projection(b, m2.y, &mut nodes)?;
    // Projections and the variant; projections may read different reshape views of the input.
    let (qn, qd) = projection(b, q_src)?;
    nodes.push(qn);
    let x = sequence_view(b, qd.x, &mut nodes);
    let (g, t, d) = sequences(b, x)?;
    let mut views = Vec::new();
    let is_x = |b: &ModelBuilder, t: TensorId, views: &mut Vec<usize>| sequence_view(b, t, views) == x;
    let k = if is_x(b, k_src, &mut views) {
        None
    } else {
        let (kn, kd) = projection(b, k_src)?;
        is_x(b, kd.x, &mut views).then_some(())?;
        nodes.push(kn);
        Some(kd.proj)
    };
    let (v, align) = if is_x(b, v_src, &mut views) {
        (None, None)
    } else if let Some((vn, vd)) = projection(b, v_src).filter(|(_, vd)| sequence_view(b, vd.x, &mut Vec::new()) == x) {
        sequence_view(b, vd.x, &mut views);
        nodes.push(vn);
        (Some(vd.proj), None)
    } else {
        let (mix, mut proj, bias) = token_mixing(b, v_src, x, t)?;
        nodes.extend(mix);
        if let Some(values) = bias {
            proj.b = Some(b.weight("attention_ba", &[t], values).ok()?);
        }
        (None, Some(proj))
    };
    nodes.extend(views);
    let variant = AttentionVariant::from_projections(k.is_some(), v.is_some(), align.is_some())?;
    // The node's projections are all `[d, d]`: a block whose inner width differs from the model
    // width (T5's heads × d_kv, multi-query keys and values) is left to `Sdpa` between its
    // dense layers rather than proposed and refused by the node's own shape check.
    let square = |p: &Proj| b.shape_of(p.w).is_some_and(|s| s.dims() == [d as u32, d as u32]);
    if !square(&qd.proj) || !square(&od.proj) || !k.iter().chain(v.iter()).all(square) {
        return None;
    }
    // Heads: the score product's leading axes are the G sequences times the heads.
    let sdims = b.shape_of(m1.a)?;
    let lead: usize = sdims.dims().iter().rev().skip(2).map(|&v| v as usize).product();
    let heads = if g > 0 && lead.is_multiple_of(g) { lead / g } else { 0 };
    if heads == 0 || d % heads != 0 {
        return None;
    }
    // The constant terms and masked fills combined into one additive mask: the node's causal
    // flag where that is a causal mask, else its constant mask.
    let (causal, const_bias) = match constant_mask(b, &steps, g * heads, t, guarded)? {
        None => (false, None),
        Some(m) if causal_blocks(&m, t) => (true, None),
        Some(m) => (false, Some(compress(m, g, heads, t))),
    };
    // The computed bias becomes the fused node's mask: `[T]` per key, `[T, T]` per query and
    // key or `[H, T, T]` per head once its leading unit axes (batch, broadcast heads) are
    // dropped; over G sequences also `[G, 1 or H, T, T]`, a block per sequence.
    let mask_src = match bias {
        None => None,
        Some((m, _)) => Some((m, mask_shape(b, m, g, t, heads)?)),
    };
    nodes.sort_unstable();
    nodes.dedup();
    let x = keep_shared_views(b, &mut nodes, x, od.y, (g, t, d), mask_src.as_ref().map(|m| m.0))?;
    // Build: reshape views adapt the input, the mask and the output to the fused node's shapes.
    let y = od.y;
    let mut mask_ops = Vec::new();
    let act_mask = match &mask_src {
        None => None,
        Some((m, dims)) if b.shape_of(*m)?.dims().iter().map(|&v| v as usize).eq(dims.iter().copied()) => Some(*m),
        Some((m, dims)) => {
            let mr = b.new_activation("attention_mask", dims).ok()?;
            mask_ops.push(Op::Reshape(Reshape { x: *m, y: mr }));
            Some(mr)
        }
    };
    // A computed bias scaled after its addition, or subtracted: times its coefficient.
    let act_mask = match (act_mask, bias) {
        (Some(m), Some((_, coef))) if coef != 1.0 => {
            let c = b.weight_as("attention_mask_scale", &[1], vec![coef], DType::F32).ok()?;
            let dims: Vec<usize> = b.shape_of(m)?.dims().iter().map(|&v| v as usize).collect();
            let y = b.new_activation("attention_mask", &dims).ok()?;
            mask_ops.push(Op::Binary(Binary { a: m, b: c, op: BinaryOp::Mul, y }));
            Some(y)
        }
        (m, _) => m,
    };
    let const_mask = match const_bias {
        None => None,
        Some((dims, values)) => {
            let name = steps.iter().find_map(|st| b.tensor_name(st.weight())).unwrap_or("attention").to_string();
            Some((mask_weight(b, &name, &dims, values)?, dims))
        }
    };
    let mask_in = match (act_mask, const_mask) {
        (m, None) => m,
        (None, Some((w, _))) => Some(w),
        // Both: their sum, computed per sample before the node (broadcast to the wider shape).
        (Some(m), Some((w, wd))) => {
            let md: Vec<usize> = b.shape_of(m)?.dims().iter().map(|&v| v as usize).collect();
            let dims = broadcast_dims(&md, &wd)?;
            let sum = b.new_activation("attention_mask", &dims).ok()?;
            mask_ops.push(Op::Binary(Binary { a: m, b: w, op: BinaryOp::Add, y: sum }));
            Some(sum)
        }
    };
    let dims: &[usize] = if g > 1 { &[g, t, d] } else { &[t, d] };
    let ops = around_shape(b, x, y, dims, |xin, yout| {
        Op::Attention(Attention {
            x: xin,
            variant,
            heads: heads as u32,
            causal,
            scale,
            q: qd.proj,
            k,
            v,
            align,
            o: od.proj,
            mask: mask_in,
            y: yout,
            internals: Internals::F32,
        })
    })?;
    let inputs = match mask_src {
        Some((m, _)) => vec![x, m],
        None => vec![x],
    };
    mask_ops.extend(ops);
    Some((Region { nodes, inputs, output: y }, mask_ops))
}

/// Reshape views of the input that the rest of the graph reads too stay in the graph (say a
/// residual branch reads `[1, T, d]` while the projections read a `[T, d]` view of it, as
/// `nn.TransformerEncoder`'s first layer does): they leave the region, and the region's input
/// becomes the one tensor its nodes then read from outside, which must still be `[T, d]` or
/// `[1, T, d]` (`[G, T, d]` for G sequences). Returns the (possibly new) input, `None` if the region cannot be cut that way.
fn keep_shared_views(
    b: &ModelBuilder,
    nodes: &mut Vec<usize>,
    x: TensorId,
    out: TensorId,
    gtd: (usize, usize, usize),
    bias: Option<TensorId>,
) -> Option<TensorId> {
    let escapes = |nodes: &[usize], n: usize| {
        let y = b.ops()[n].output();
        y != out && (b.escapes(y) || b.consumers(y).iter().any(|c| !nodes.contains(c)))
    };
    let mut cut = false;
    while let Some(i) = nodes.iter().position(|&n| matches!(b.ops()[n], Op::Reshape(_)) && escapes(nodes, n)) {
        nodes.remove(i);
        cut = true;
    }
    if !cut {
        return Some(x);
    }
    let produced: Vec<TensorId> = nodes.iter().map(|&n| b.ops()[n].output()).collect();
    let mut outside = Vec::new();
    for &n in nodes.iter() {
        b.ops()[n].for_each_input(|t| {
            if !b.is_weight(t) && !produced.contains(&t) && Some(t) != bias && !outside.contains(&t) {
                outside.push(t);
            }
        });
    }
    match outside[..] {
        [x2] if sequences(b, x2) == Some(gtd) => Some(x2),
        _ => None,
    }
}

/// Does `t` come from a matrix product, through layout ops, scalings and additions (the score
/// side of a masked sum, as opposed to the mask)?
fn leads_to_product(b: &ModelBuilder, mut t: TensorId) -> bool {
    for _ in 0..16 {
        let Some(p) = b.producer(t) else { return false };
        t = match b.ops()[p] {
            Op::MatMul(_) => return true,
            Op::Reshape(r) => r.x,
            Op::Transpose(r) => r.x,
            Op::Binary(bin) if b.is_weight(bin.b) => bin.a,
            Op::Binary(bin) if b.is_weight(bin.a) => bin.b,
            Op::Binary(bin) if matches!(bin.op, BinaryOp::Add | BinaryOp::Sub) => {
                return leads_to_product(b, bin.a) || leads_to_product(b, bin.b)
            }
            _ => return false,
        };
    }
    false
}

/// The fused mask shape of a computed score bias `m`: its dims without leading 1s must be `[T]`
/// (per key), `[T, T]` (per query and key) or `[H, T, T]` (per head); anything else is not
/// fused.
fn mask_shape(b: &ModelBuilder, m: TensorId, g: usize, t: usize, heads: usize) -> Option<Vec<usize>> {
    let s = b.shape_of(m)?;
    let dims: Vec<usize> = s.dims().iter().map(|&v| v as usize).skip_while(|&v| v == 1).collect();
    match dims[..] {
        [] if t == 1 => Some(vec![1]),
        [n] if n == t => Some(vec![t]),
        [r, n] if r == t && n == t => Some(vec![t, t]),
        [h, r, n] if h == heads && r == t && n == t => Some(vec![heads, t, t]),
        [q, h, r, n] if g > 1 && q == g && (h == 1 || h == heads) && r == t && n == t => Some(dims),
        _ => None,
    }
}

/// numpy broadcasting of two dim lists (aligned on the right).
fn broadcast_dims(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let at = |d: &[usize], i: usize| if i + d.len() >= r { d[i + d.len() - r] } else { 1 };
    (0..r)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}

/// A product of the scores by a constant (`s·w`, `w·s`) or a selection by one (`When(s, w)`:
/// `s` where `w ≠ 0`, else 0 — what a masked fill with a constant condition is lowered to).
pub(super) fn is_keep(b: &ModelBuilder, bin: &Binary) -> bool {
    match bin.op {
        BinaryOp::Mul => b.is_weight(bin.a) || b.is_weight(bin.b),
        BinaryOp::When => b.is_weight(bin.b) && !b.is_weight(bin.a),
        _ => false,
    }
}

/// A step between the score product and the softmax (see [`match_attention`]).
enum Step {
    /// `+ coef · w`, added to the tensor named last.
    Add(TensorId, f32, TensorId),
    /// `· keep`, multiplying the tensor named last.
    Keep(TensorId, TensorId),
}

impl Step {
    fn weight(&self) -> TensorId {
        match *self {
            Step::Add(w, ..) | Step::Keep(w, _) => w,
        }
    }
}

/// The additive mask equal to the constant `steps` ([`score_mask::combine`]) over `rows` blocks
/// of `T×T` scores (each step's tensor must hold them, sequence-major, then head-major,
/// query-major: the numerical check rejects any other layout): `Some(None)` without steps, `None`
/// where the steps have no such mask.
fn constant_mask(b: &ModelBuilder, steps: &[Step], rows: usize, t: usize, guarded: bool) -> Option<Option<Vec<f32>>> {
    if steps.is_empty() {
        return Some(None);
    }
    let n = rows * t * t;
    let mut full = Vec::with_capacity(steps.len());
    for st in steps {
        let (w, at) = match *st {
            Step::Add(w, _, at) | Step::Keep(w, at) => (w, at),
        };
        let od: Vec<usize> = b.shape_of(at)?.dims().iter().map(|&v| v as usize).collect();
        let cd: Vec<usize> = b.shape_of(w)?.dims().iter().map(|&v| v as usize).collect();
        let values = broadcast_to(b.weight_values(w)?, &cd, &od)?;
        if values.len() != n {
            return None;
        }
        full.push(match *st {
            Step::Add(_, coef, _) => MaskStep::Add { values, coef },
            Step::Keep(..) => MaskStep::Keep(values),
        });
    }
    combine(&full, n, t, guarded, None).ok().map(Some)
}

/// Is every `T×T` block of `m` a causal mask: 0 on and below the diagonal, very negative above?
fn causal_blocks(m: &[f32], t: usize) -> bool {
    let tt = t * t;
    tt > 0 && m.chunks(tt).all(|blk| (0..tt).all(|k| if k % t <= k / t { blk[k] == 0.0 } else { blk[k] <= -1e4 }))
}

/// The `G·H·T·T` mask `sum` in the smallest form the mask slot takes: `[T, T]` when every
/// sequence and head has the same block, `[H, T, T]` when only heads differ, else `[G, 1, T, T]`
/// or `[G, H, T, T]` (one block per sequence). Swin's relative-position bias plus its
/// shifted-window mask (per window), EfficientFormer's and LeViT's gathered bias tables, T5's
/// bias with static positions, ALiBi's with its window.
fn compress(mut sum: Vec<f32>, g: usize, heads: usize, t: usize) -> (Vec<usize>, Vec<f32>) {
    let (tt, per_group) = (t * t, heads * t * t);
    let same = |v: &[f32], size: usize| v.chunks(size).all(|blk| blk == &v[..size]);
    if same(&sum, per_group) {
        // Every sequence alike: one `[H, T, T]` block, or `[T, T]` if the heads share it.
        sum.truncate(per_group);
        if same(&sum, tt) {
            sum.truncate(tt);
            return (vec![t, t], sum);
        }
        return (vec![heads, t, t], sum);
    }
    if sum.chunks(per_group).all(|grp| same(grp, tt)) {
        let one: Vec<f32> = sum.chunks(per_group).flat_map(|grp| grp[..tt].iter().copied()).collect();
        return (vec![g, 1, t, t], one);
    }
    (vec![g, heads, t, t], sum)
}

/// The f32 weight `{base}.attention_bias` holding `values`: one already in the graph with that
/// name and those values (layers sharing a bias constant share the mask), else a new one (named
/// apart with a suffix where another mask holds the name): one name per distinct mask, the same
/// in every conversion of a model, as bounded dims' corner constants are found by name.
fn mask_weight(b: &mut ModelBuilder, base: &str, dims: &[usize], values: Vec<f32>) -> Option<TensorId> {
    let want: Vec<u32> = dims.iter().map(|&d| d as u32).collect();
    for k in 0.. {
        let name = if k == 0 { format!("{base}.attention_bias") } else { format!("{base}.attention_bias.{k}") };
        let taken = (0..b.tensor_count() as TensorId).find(|&id| b.is_weight(id) && b.tensor_name(id) == Some(&*name));
        match taken {
            None => return b.weight_as(&name, dims, values, DType::F32).ok(),
            Some(id)
                if b.shape_of(id).is_some_and(|s| s.dims() == &want[..])
                    && b.weight_values(id) == Some(&values[..])
                    && b.weight_dtype(id) == Some(DType::F32) =>
            {
                return Some(id)
            }
            Some(_) => {}
        }
    }
    None
}
