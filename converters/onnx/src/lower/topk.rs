//! ONNX TopK (both outputs) lowered exactly with generic ops, by ranks: along the axis (moved
//! last, `[P, N]`), each element's rank is the number of elements that come before it in the
//! order asked (`x_j > x_i` for the largest, `x_j < x_i` for the smallest; an equal element
//! with a lower index comes first, as ONNX orders ties), from the pairwise comparisons `[P, N, N]`
//! summed over j. The one-hot `[P, N, K]` of the ranks below K picks the values (`When` and a
//! Sum: exact) and the indices (the constant `0..N` picked the same way, as f32 values).
//! Quadratic in the axis length: an axis over [`MAX_PAIRS`] pairs per output is refused.
//!
//! A k computed at run time ([`TopKAt`], a run-time dim): the graph is built at the k typed,
//! the one-hot `[K, P, N]` with K leading (so a smaller k is its leading rows), and k itself kept
//! as the run-time dim's source.

use super::{f32s, Lowerer, Res, Val};
use crate::run_dims::{TopKAt, KEPT};
use kestrel_rt_format::ops::{BinaryOp, Op, Reduce, ReduceOp, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::Topk;

/// The most pairwise comparisons (elements of the `[P, N, N]` intermediate) a TopK may take.
const MAX_PAIRS: usize = 1 << 26;

impl Lowerer<'_> {
    /// Lowers TopK (tract's, or [`TopKAt`] with k computed at run time); `Ok(false)` for
    /// anything else.
    pub(super) fn try_topk(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let (axis, largest, at) = if let Some(op) = node.op_as::<Topk>() {
            (op.axis, op.largest, None)
        } else if let Some(op) = node.op_as::<TopKAt>() {
            (op.axis, op.largest, Some(op.clone()))
        } else {
            return Ok(false);
        };
        let (x, xs) = self.act(node.inputs[0])?;
        let (k, kept_k) = match (self.val(node.inputs[1])?, &at) {
            (Val::Const(t), _) => match f32s(&t)?.as_slice() {
                [k] if *k >= 0.0 => (*k as usize, None),
                v => return Err(self.bad("one non-negative k", format!("{v:?}"))),
            },
            // k computed at run time: the graph at the value typed, k kept as the run-time
            // dim's source (one element per sample).
            (Val::Act { shape, .. }, Some(op)) if shape.iter().product::<usize>() == 1 => {
                // Through `act`: integer ids read as values.
                let (id, shape) = self.act(node.inputs[1])?;
                (op.count, Some((id, shape, op.sym.clone())))
            }
            (Val::Act { .. }, _) => return Err(self.unsupported("TopK with k computed at run time")),
        };
        let n = xs[axis];
        if k == 0 || k > n {
            return Err(self.bad(&format!("k in 1..={n}"), format!("{k}")));
        }
        let p: usize = xs.iter().product::<usize>() / n;
        if p.saturating_mul(n).saturating_mul(n) > MAX_PAIRS {
            return Err(self.unsupported(&format!(
                "TopK over {p}×{n} elements: {} pairwise comparisons, over {MAX_PAIRS}",
                p.saturating_mul(n * n)
            )));
        }
        let here = OutletId::new(self.node, 0);
        if let Some((id, shape, sym)) = kept_k {
            // Its own node (an input is written by no node, and a run reads the value after
            // the node that writes it): `k + 0`, kept whole.
            let zero = self.weight_f32(here, "topk_k_zero", &[1], vec![0.0])?;
            let one: Vec<usize> = vec![1; shape.len().max(1)];
            let kk = self.reshape(id, &shape, &one)?;
            let kk = self.binary_op(kk, zero, BinaryOp::Add)?;
            self.b.keep(kk, &format!("{KEPT}{sym}"))?;
        }
        // [P, N] with the axis last.
        let r = xs.len();
        let perm: Vec<usize> = (0..r).filter(|&a| a != axis).chain([axis]).collect();
        let (xt, ts) = self.transpose(x, &xs, &perm)?;
        let xi = self.reshape(xt, &ts, &[p, n, 1])?;
        let xj = self.reshape(xt, &ts, &[p, 1, n])?;
        let before = self.binary_op(xj, xi, if largest { BinaryOp::Greater } else { BinaryOp::Less })?;
        let equal = self.binary_op(xj, xi, BinaryOp::Equal)?;
        let lower: Vec<f32> = (0..n * n).map(|e| f32::from(e % n < e / n)).collect();
        let lower = self.weight_f32(here, "topk_lower_index", &[n, n], lower)?;
        let tie = self.binary_op(equal, lower, BinaryOp::When)?;
        let ahead = self.binary_op(before, tie, BinaryOp::Add)?;
        let rank = self.b.op(|y| Op::Reduce(Reduce { x: ahead, op: ReduceOp::Sum, axis: 2, keep_dims: true, y }))?;
        let rank = self.reshape(rank, &[p, n, 1], &[1, p, n])?;
        // The one-hot [K, P, N] of the ranks below K, K leading: at a run-time k, the leading
        // rows of the bound's.
        let ks: Vec<f32> = (0..k).map(|i| i as f32).collect();
        let ks = self.weight_f32(here, "topk_ranks", &[k, 1, 1], ks)?;
        let onehot = self.binary_op(rank, ks, BinaryOp::Equal)?;
        let values = self.reshape(xt, &ts, &[1, p, n])?;
        let iota: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let iota = self.weight_f32(here, "topk_indices", &[1, 1, n], iota)?;
        // Both outputs: [K, P] → [P, K] → the input's axes with the axis K long.
        let mut out_shape = xs.clone();
        out_shape[axis] = k;
        let back: Vec<usize> = (0..r).map(|a| perm.iter().position(|&q| q == a).unwrap_or(a)).collect();
        let mut kept: Vec<usize> = ts.clone();
        kept[r - 1] = k;
        for (slot, src) in [(0usize, values), (1, iota)] {
            let picked = self.binary_op(src, onehot, BinaryOp::When)?;
            let y = self.b.op(|y| Op::Reduce(Reduce { x: picked, op: ReduceOp::Sum, axis: 2, keep_dims: false, y }))?;
            let (y, _) = self.transpose(y, &[k, p], &[1, 0])?;
            let y = self.reshape(y, &[p, k], &kept)?;
            let (y, ys) = self.transpose(y, &kept, &back)?;
            let y: TensorId = self.reshape(y, &ys, &out_shape)?;
            self.vals.insert(OutletId::new(self.node, slot), Val::Act { id: y, shape: out_shape.clone(), int: false });
        }
        self.count_fused(if at.is_some() { "topk-by-ranks-with-a-run-time-k" } else { "topk-by-ranks" });
        Ok(true)
    }
}
