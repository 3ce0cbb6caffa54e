//! Chains of layout ops collapsed to at most one `Transpose`.
//!
//! Exporters move axes in steps: MobileViT's unfold is four reshapes and three transposes
//! (`[C, H, W]` → `[P, N, C]`), its fold the same backwards, and a head split is often a reshape,
//! a transpose and a reshape. Any chain of reshapes and transposes is a permutation of the
//! elements; when that permutation is one transpose of some reshape of the input (it always is
//! for the chains exporters write), the chain becomes `Reshape → Transpose → Reshape` (views
//! are free), or one `Reshape` when the elements do not move at all.
//!
//! The permutation is computed exactly (an index array run through the chain) and decomposed
//! from the innermost output axis outwards: each output axis is a run of equal strides in the
//! input; the axes must then tile the input as a mixed radix (strides 1, e₀, e₀e₁, … once
//! sorted), which gives the input's dims and the transpose's `perm`. The decomposition is
//! checked against the whole index array, and the rewrite is verified numerically like every
//! fusion.

use super::{dims, rewrite_each, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{Op, Reshape, TensorId, Transpose};
use kestrel_rt_format::MAX_RANK;

/// Largest chain (elements) whose permutation is computed: exporters' layout chains sit on
/// activations far below this.
const MAX_ELEMS: usize = 1 << 22;

/// Collapses every chain of reshapes and transposes holding two transposes or more.
pub(super) fn layout_chains(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "layout chain as one transpose", match_chain);
}

fn layout(op: &Op) -> Option<(TensorId, TensorId)> {
    match *op {
        Op::Reshape(r) => Some((r.x, r.y)),
        Op::Transpose(t) => Some((t.x, t.y)),
        _ => None,
    }
}

/// The chain starting at node `first` (a layout op whose input is not itself the sole output
/// of a layout op), if it holds two transposes or more.
fn match_chain(b: &mut ModelBuilder, first: usize) -> Option<(Region, Vec<Op>)> {
    let (x, mut y) = layout(&b.ops()[first])?;
    if let Some(p) = b.producer(x) {
        if layout(&b.ops()[p]).is_some() && sole_consumer(b, x) == Some(first) {
            return None;
        }
    }
    let mut nodes = vec![first];
    while let Some(next) = sole_consumer(b, y) {
        let Some((_, ny)) = layout(&b.ops()[next]) else { break };
        nodes.push(next);
        y = ny;
    }
    let transposes = nodes.iter().filter(|&&n| matches!(b.ops()[n], Op::Transpose(_))).count();
    if transposes < 2 {
        return None;
    }
    let perm = chain_permutation(b, &nodes)?;
    let (in_dims, axes) = decompose(&perm)?;
    let (xd, yd) = (dims(b, x)?, dims(b, y)?);
    let identity = axes.iter().enumerate().all(|(i, &a)| a == i);
    let mut ops = Vec::new();
    if identity {
        ops.push(Op::Reshape(Reshape { x, y }));
    } else {
        if in_dims.len() > MAX_RANK {
            return None;
        }
        let xin = if xd == in_dims {
            x
        } else {
            let t = b.new_activation("layout_in", &in_dims).ok()?;
            ops.push(Op::Reshape(Reshape { x, y: t }));
            t
        };
        let out_dims: Vec<usize> = axes.iter().map(|&a| in_dims[a]).collect();
        let mut p = [0u8; MAX_RANK];
        for (o, &a) in axes.iter().enumerate() {
            p[o] = u8::try_from(a).ok()?;
        }
        if yd == out_dims {
            ops.push(Op::Transpose(Transpose { x: xin, perm: p, y }));
        } else {
            let t = b.new_activation("layout_out", &out_dims).ok()?;
            ops.push(Op::Transpose(Transpose { x: xin, perm: p, y: t }));
            ops.push(Op::Reshape(Reshape { x: t, y }));
        }
    }
    if ops.iter().filter(|o| matches!(o, Op::Transpose(_))).count() >= transposes {
        return None;
    }
    nodes.sort_unstable();
    Some((Region { nodes, inputs: vec![x], output: y }, ops))
}

/// `perm[o]` = the input element (flat index) that output element `o` of the chain holds.
pub(super) fn chain_permutation(b: &ModelBuilder, nodes: &[usize]) -> Option<Vec<usize>> {
    let (x, _) = layout(&b.ops()[nodes[0]])?;
    let n = b.shape_of(x)?.numel()?;
    if n == 0 || n > MAX_ELEMS {
        return None;
    }
    let mut idx: Vec<usize> = (0..n).collect();
    for &node in nodes {
        let Op::Transpose(t) = b.ops()[node] else { continue };
        let d = dims(b, t.x)?;
        let r = d.len();
        let perm: Vec<usize> = t.perm[..r].iter().map(|&p| p as usize).collect();
        // Input strides, read in output-axis order.
        let mut stride = vec![1usize; r];
        for a in (0..r.saturating_sub(1)).rev() {
            stride[a] = stride[a + 1] * d[a + 1];
        }
        let out: Vec<usize> = perm.iter().map(|&a| d[a]).collect();
        let ostride: Vec<usize> = perm.iter().map(|&a| stride[a]).collect();
        let mut next = Vec::with_capacity(n);
        let mut pos = vec![0usize; r];
        for _ in 0..n {
            next.push(idx[pos.iter().zip(&ostride).map(|(p, s)| p * s).sum::<usize>()]);
            for a in (0..r).rev() {
                pos[a] += 1;
                if pos[a] < out[a] {
                    break;
                }
                pos[a] = 0;
            }
        }
        idx = next;
    }
    Some(idx)
}

/// A permutation as one transpose: the input's dims (outermost first) and, per output axis
/// (outermost first), the input axis it reads; `None` if it is not a single transpose.
fn decompose(perm: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    let n = perm.len();
    if perm.first() != Some(&0) {
        return None;
    }
    // (extent, stride) per output axis, innermost first.
    let mut axes: Vec<(usize, usize)> = Vec::new();
    let mut block = 1;
    while block < n {
        let stride = perm[block].checked_sub(perm[0])?;
        let rest = n / block;
        let mut e = 1;
        while e < rest && (0..block).all(|r| perm[e * block + r] == e * stride + perm[r]) {
            e += 1;
        }
        // The largest extent dividing the remaining elements (the pattern holds below it).
        let e = (1..=e).rev().find(|&k| rest.is_multiple_of(k))?;
        if e == 1 {
            return None;
        }
        axes.push((e, stride));
        block *= e;
    }
    // The axes must tile the input: strides 1, e, e·e', … once sorted.
    let mut by_stride: Vec<usize> = (0..axes.len()).collect();
    by_stride.sort_by_key(|&a| axes[a].1);
    let mut expect = 1;
    for &a in &by_stride {
        if axes[a].1 != expect {
            return None;
        }
        expect *= axes[a].0;
    }
    if expect != n {
        return None;
    }
    // Input axes outermost first = largest stride first; output axes outermost first.
    let in_axes: Vec<usize> = by_stride.iter().rev().copied().collect();
    let in_dims: Vec<usize> = in_axes.iter().map(|&a| axes[a].0).collect();
    let out: Vec<usize> =
        (0..axes.len()).rev().map(|a| in_axes.iter().position(|&i| i == a).expect("every axis listed")).collect();
    // The whole permutation, from the decomposition.
    let strides: Vec<usize> = out.iter().map(|&ia| axes[in_axes[ia]].1).collect();
    let ext: Vec<usize> = out.iter().map(|&ia| in_dims[ia]).collect();
    let mut pos = vec![0usize; ext.len()];
    for &p in perm {
        if p != pos.iter().zip(&strides).map(|(a, s)| a * s).sum::<usize>() {
            return None;
        }
        for a in (0..ext.len()).rev() {
            pos[a] += 1;
            if pos[a] < ext[a] {
                break;
            }
            pos[a] = 0;
        }
    }
    Some((in_dims, out))
}

#[cfg(test)]
mod tests {
    use super::decompose;

    /// The flat permutation of transposing `dims` by `perm`.
    fn transpose_perm(dims: &[usize], perm: &[usize]) -> Vec<usize> {
        let n: usize = dims.iter().product();
        let mut stride = vec![1usize; dims.len()];
        for a in (0..dims.len() - 1).rev() {
            stride[a] = stride[a + 1] * dims[a + 1];
        }
        let out: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
        let mut pos = vec![0usize; dims.len()];
        (0..n)
            .map(|_| {
                let v = pos.iter().zip(perm).map(|(p, &a)| p * stride[a]).sum();
                for a in (0..dims.len()).rev() {
                    pos[a] += 1;
                    if pos[a] < out[a] {
                        break;
                    }
                    pos[a] = 0;
                }
                v
            })
            .collect()
    }

    #[test]
    fn single_transposes_are_recovered_with_contiguous_axes_merged() {
        // MobileViT's unfold: [C, nh, ph, nw, pw] → [ph, pw, nh, nw, C].
        let p = transpose_perm(&[32, 4, 2, 4, 2], &[2, 4, 1, 3, 0]);
        assert_eq!(decompose(&p), Some((vec![32, 4, 2, 4, 2], vec![2, 4, 1, 3, 0])));
        // Adjacent axes that stay adjacent merge: [a, b, c] → [c, a, b] is [(a·b), c] → [c, (a·b)].
        let p = transpose_perm(&[3, 4, 5], &[2, 0, 1]);
        assert_eq!(decompose(&p), Some((vec![12, 5], vec![1, 0])));
        // The identity is one axis.
        let p: Vec<usize> = (0..24).collect();
        assert_eq!(decompose(&p), Some((vec![24], vec![0])));
    }

    #[test]
    fn permutations_that_are_not_one_transpose_are_refused() {
        assert_eq!(decompose(&[1, 0, 2, 3]), None);
        // A reversal is no transpose.
        assert_eq!(decompose(&[3, 2, 1, 0]), None);
        // Two interleaved transposes of different blocks.
        assert_eq!(decompose(&[0, 2, 1, 3, 4, 5, 6, 7]), None);
    }
}
