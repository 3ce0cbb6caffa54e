//! What the `Sdpa` pattern ([`sdpa`](super::sdpa)) walks through between the score product, the
//! softmax and the product with values: scalar scales, transposes of the keys, views that keep or
//! regroup the key axis, and the tests for attention-shaped scores.

use super::score_forms::mixes_heads;
use super::{dims, scalar, sole_consumer};
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;
use kestrel_rt_format::MAX_RANK;

/// Is `t` attention-shaped scores: from a product of two activations, through element-wise
/// functions of one or two operands and views? Those the pattern does not fuse (a product by an
/// activation, a clamp) leave the softmax attention-shaped, reported with the reason.
pub(super) fn attention_shaped(b: &ModelBuilder, t: TensorId, depth: usize) -> bool {
    let Some(p) = b.producer(t) else { return false };
    match b.ops()[p] {
        Op::MatMul(m) => !b.is_weight(m.a) && !b.is_weight(m.b),
        _ if depth == 0 => false,
        Op::Binary(bin) => attention_shaped(b, bin.a, depth - 1) || attention_shaped(b, bin.b, depth - 1),
        Op::Unary(u) => attention_shaped(b, u.x, depth - 1),
        Op::Chain(c) => attention_shaped(b, c.x, depth - 1),
        // Scores cut or picked (a relative shift's slice, a gathered window).
        Op::Slice(sl) => attention_shaped(b, sl.x, depth - 1),
        Op::Gather(g) => attention_shaped(b, g.x, depth - 1),
        // Score products concatenated on the key axis (Pegasus-X's global and local keys).
        Op::Concat(c) => c.xs.iter().take_while(|&&x| x != NONE).any(|&x| attention_shaped(b, x, depth - 1)),
        Op::Reshape(r) => attention_shaped(b, r.x, depth - 1),
        Op::Transpose(r) => attention_shaped(b, r.x, depth - 1),
        // Talking heads: the score heads mixed by a pointwise layer (reported, not fused).
        Op::Conv2d(_) | Op::Dense(_) => mixes_heads(b, p),
        _ => false,
    }
}

/// Does `t` come, through additions, subtractions of a bias, scalar scales, products by a
/// constant (masked fills), views and element-wise functions, from a product of two activations?
pub(super) fn leads_to_scores(b: &ModelBuilder, t: TensorId, depth: usize) -> bool {
    let Some(p) = b.producer(t) else { return false };
    match b.ops()[p] {
        Op::MatMul(m) => !b.is_weight(m.a) && !b.is_weight(m.b),
        _ if depth == 0 => false,
        Op::Binary(bin) if bin.op == BinaryOp::Add => {
            leads_to_scores(b, bin.a, depth - 1) || leads_to_scores(b, bin.b, depth - 1)
        }
        Op::Binary(bin) if bin.op == BinaryOp::Sub => leads_to_scores(b, bin.a, depth - 1),
        Op::Binary(bin) if matches!(bin.op, BinaryOp::Mul | BinaryOp::Div | BinaryOp::When) => {
            (b.is_weight(bin.b) && leads_to_scores(b, bin.a, depth - 1))
                || (bin.op == BinaryOp::Mul && b.is_weight(bin.a) && leads_to_scores(b, bin.b, depth - 1))
        }
        // A soft cap (`tanh(s / c) · c`, Gemma 2's) is fused; other element-wise functions are
        // not, but the softmax is attention-shaped (reported with the function as the reason).
        Op::Unary(u) => leads_to_scores(b, u.x, depth - 1),
        Op::Reshape(r) => leads_to_scores(b, r.x, depth - 1),
        Op::Transpose(r) => leads_to_scores(b, r.x, depth - 1),
        // A head mixing (talking heads, sdpa_talking) of the scores.
        Op::Conv2d(c) => leads_to_scores(b, c.x, depth - 1),
        _ => false,
    }
}

/// `x · s` or `x / s` (`s` a one-element weight): `x` and the factor.
pub(super) fn scaled(b: &ModelBuilder, bin: &Binary) -> Option<(TensorId, f32)> {
    match bin.op {
        BinaryOp::Mul => match (scalar(b, bin.b), scalar(b, bin.a)) {
            (Some(s), _) => Some((bin.a, s)),
            (None, Some(s)) => Some((bin.b, s)),
            _ => None,
        },
        BinaryOp::Div => scalar(b, bin.b).map(|s| (bin.a, 1.0 / s)),
        _ => None,
    }
}

/// Walks back from `t` (read by node `reader`) through scalar scales (folded into `scale`) and,
/// where `swap` is given, at most one transpose of the last two axes (flipping it); each step's
/// output read only by the node after it.
pub(super) fn back_through_scales(
    b: &ModelBuilder,
    mut t: TensorId,
    mut reader: usize,
    nodes: &mut Vec<usize>,
    scale: &mut f32,
    mut swap: Option<&mut bool>,
) -> TensorId {
    while let Some(p) = b.producer(t) {
        if sole_consumer(b, t) != Some(reader) {
            break;
        }
        match b.ops()[p] {
            Op::Binary(bin) => match scaled(b, &bin) {
                Some((x, s)) => {
                    *scale *= s;
                    t = x;
                }
                None => break,
            },
            Op::Transpose(tr) => {
                let Some(flag) = swap.as_deref_mut() else { break };
                if !swaps_last_two(b, &tr) {
                    break;
                }
                *flag = !*flag;
                swap = None;
                t = tr.x;
            }
            _ => break,
        }
        nodes.push(p);
        reader = p;
    }
    t
}

/// The permutation of a `[H, A, B]` transpose to `[H, B, A]`.
pub(super) const SWAP_LAST_TWO: [u8; MAX_RANK] = [0, 2, 1, 3, 4, 5, 0, 0];

/// Does `tr` swap the last two axes of its input (and only those)?
pub(super) fn swaps_last_two(b: &ModelBuilder, tr: &Transpose) -> bool {
    let r = b.shape_of(tr.x).map_or(0, |s| s.rank());
    r >= 2
        && (0..r).all(|i| {
            let want = if i + 2 == r {
                r - 1
            } else if i + 1 == r {
                r - 2
            } else {
                i
            };
            usize::from(tr.perm[i]) == want
        })
}

/// The key/value heads of a product whose queries have leading axes `qb` and keys `kb`: `Some(Hk)`
/// where `kb` (left-padded with ones) is a prefix of `qb` followed by ones, so query head `h`
/// (flat over `qb`) reads key head `h / (Hq / Hk)`.
pub(super) fn kv_heads(qb: &[usize], kb: &[usize]) -> Option<usize> {
    if kb.len() > qb.len() {
        return None;
    }
    let padded: Vec<usize> = std::iter::repeat_n(1, qb.len() - kb.len()).chain(kb.iter().copied()).collect();
    let p = (0..qb.len()).find(|&i| padded[i] != qb[i]).unwrap_or(qb.len());
    padded[p..].iter().all(|&d| d == 1).then(|| qb[..p].iter().product())
}

/// Is `y` a view of `x` that keeps the last (key) axis? Such a view only regroups the rows of
/// scores or weights (heads × queries, in flat order), which a softmax over the keys does not see.
pub(super) fn keeps_keys(b: &ModelBuilder, x: TensorId, y: TensorId) -> bool {
    match (dims(b, x), dims(b, y)) {
        (Some(a), Some(c)) => a.len() >= 2 && c.len() >= 2 && a.last() == c.last(),
        _ => false,
    }
}

/// The root of a chain of views ending in `r` (node `at`) whose output keeps the root's key
/// axis ([`keeps_keys`]), each view read only by the next: the root and the chain's other nodes.
pub(super) fn view_root_keeping_keys(b: &ModelBuilder, r: Reshape, at: usize) -> Option<(TensorId, Vec<usize>)> {
    let (mut t, mut reader, mut chain) = (r.x, at, Vec::new());
    for _ in 0..4 {
        let p = b.producer(t)?;
        let Op::Reshape(v) = b.ops()[p] else { return None };
        (sole_consumer(b, t)? == reader).then_some(())?;
        chain.push(p);
        if keeps_keys(b, v.x, r.y) {
            return Some((v.x, chain));
        }
        (t, reader) = (v.x, p);
    }
    None
}

/// A chain of views from node `c` (reading `x`), each read only by the next, to the first whose
/// output keeps `x`'s key axis ([`keeps_keys`]): that output and the chain's nodes.
pub(super) fn views_to_keys(b: &ModelBuilder, x: TensorId, c: usize) -> Option<(TensorId, Vec<usize>)> {
    let mut chain = vec![c];
    for _ in 0..4 {
        let Op::Reshape(r) = b.ops()[*chain.last()?] else { return None };
        if keeps_keys(b, x, r.y) {
            return Some((r.y, chain));
        }
        chain.push(sole_consumer(b, r.y)?);
    }
    None
}

/// Which of two added terms that both come from score products carries the attention: the one
/// reached from a product of activations through scales and row views only (the other, a
/// relative-position or content-to-position product, then enters as an additive bias computed
/// outside the node). When both qualify the first is taken (the softmax of a sum does not depend
/// on which term is the node's product and which its bias); `None` when neither does.
pub(super) fn main_scores(b: &ModelBuilder, a: TensorId, c: TensorId) -> Option<(TensorId, TensorId)> {
    let direct = |mut t: TensorId| loop {
        let Some(p) = b.producer(t) else { return false };
        match b.ops()[p] {
            Op::MatMul(m) => return !b.is_weight(m.a) && !b.is_weight(m.b),
            Op::Reshape(r) if keeps_keys(b, r.x, r.y) => t = r.x,
            Op::Binary(bin) => match scaled(b, &bin) {
                Some((x, _)) => t = x,
                None => return false,
            },
            _ => return false,
        }
    };
    match (direct(a), direct(c)) {
        (true, _) => Some((a, c)),
        (false, true) => Some((c, a)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::kv_heads;

    #[test]
    fn key_heads_are_a_prefix_of_the_query_heads() {
        assert_eq!(kv_heads(&[8], &[8]), Some(8));
        assert_eq!(kv_heads(&[8], &[1]), Some(1));
        assert_eq!(kv_heads(&[8], &[]), Some(1));
        assert_eq!(kv_heads(&[2, 4], &[2, 1]), Some(2));
        assert_eq!(kv_heads(&[2, 4], &[4]), None);
        assert_eq!(kv_heads(&[2, 4], &[1, 4]), None);
        assert_eq!(kv_heads(&[4], &[2, 4]), None);
    }
}
