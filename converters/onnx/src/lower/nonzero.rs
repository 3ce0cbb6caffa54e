//! ONNX `NonZero` (typed by [`crate::run_dims`] at one value `v` of its count, a run-time dim)
//! lowered exactly with generic ops, per sample: the input flattened to `[1, N]`, its 0/1 mask
//! `m = x ≠ 0` (NaN counts), the inclusive running count `c` of the mask by ⌈log₂ N⌉ shifted
//! adds (`Slice` into a zero-filled output, then `Add`), the count itself (`c`'s last entry,
//! kept as the run-time dim's source), each entry's rank among the non-zero ones `c·m`
//! (`When`), the one-hot `[v, N]` of the ranks `1..=v`, and its product with the constant table
//! of every flat position's coordinates `[N, rank]`, transposed to ONNX's `[rank, v]`. Every
//! value is a small integer, so all of it is exact in f32 (N ≤ 2^24).
//!
//! The one-hot makes it `v·N` work and memory (`N²` at the bound, where memory is planned): an
//! input over [`MAX_ONEHOT`] such elements is refused.

use super::{Lowerer, Res, Val};
use crate::masked_scatter::MaskedScatter;
use crate::run_dims::{NonZeroAt, KEPT};
use kestrel_rt_format::ops::{BinaryOp, Gather, MatMul, Op, Slice, TensorId};
use tract_onnx::prelude::*;

/// The most elements of the `[count, N]` one-hot at the bound (`N²`; 64 MiB of f32).
const MAX_ONEHOT: usize = 1 << 24;

impl Lowerer<'_> {
    /// Lowers [`NonZeroAt`]; `Ok(false)` for anything else.
    pub(super) fn try_nonzero(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<NonZeroAt>() else { return Ok(false) };
        let op = op.clone();
        let (x, xs) = self.act(node.inputs[0])?;
        let n: usize = xs.iter().product();
        let r = xs.len();
        if r == 0 || n == 0 {
            return Err(self.unsupported("NonZero of a scalar or an empty tensor"));
        }
        if op.bound.saturating_mul(n) > MAX_ONEHOT {
            return Err(self.unsupported(&format!(
                "NonZero over {n} elements: its one-hot would hold {} elements at the bound, over {MAX_ONEHOT}",
                op.bound.saturating_mul(n)
            )));
        }
        let v = op.count;
        let here = OutletId::new(self.node, 0);
        let (m, c) = self.running_count(x, &xs)?;
        let last = (n - 1) as u32;
        let count =
            self.b.op(|y| Op::Slice(Slice { x: c, axis: 1, start: last, step: 1, count: 1, offset: 0, len: 1, y }))?;
        self.b.keep(count, &format!("{KEPT}{}", op.sym))?;
        let rank = self.binary_op(c, m, BinaryOp::When)?;
        let ranks: Vec<f32> = (1..=v).map(|j| j as f32).collect();
        let ranks = self.weight_f32(here, "nonzero_ranks", &[v, 1], ranks)?;
        let onehot = self.binary_op(rank, ranks, BinaryOp::Equal)?;
        let mut table = vec![0f32; n * r];
        for (p, row) in table.chunks_exact_mut(r).enumerate() {
            let mut rem = p;
            for d in (0..r).rev() {
                row[d] = (rem % xs[d]) as f32;
                rem /= xs[d];
            }
        }
        let table = self.weight_f32(here, "nonzero_coordinates", &[n, r], table)?;
        let coords = self.b.op(|y| Op::MatMul(MatMul { a: onehot, b: table, transpose_b: false, y }))?;
        let (out, shape) = self.transpose(coords, &[v, r], &[1, 0])?;
        self.set_out(Val::Act { id: out, shape, int: false });
        self.count_fused("nonzero-with-a-run-time-count");
        Ok(true)
    }

    /// `x` flattened to `[1, N]`: its 0/1 mask `x ≠ 0` (NaN counts) and the mask's inclusive
    /// running count, by ⌈log₂ N⌉ shifted adds (after the step of shift s, `c[i]` sums the mask
    /// over `(i − 2s, i]`).
    fn running_count(&mut self, x: TensorId, xs: &[usize]) -> Res<(TensorId, TensorId)> {
        let n: usize = xs.iter().product();
        let here = OutletId::new(self.node, 0);
        let xf = self.reshape(x, xs, &[1, n])?;
        let zero = self.weight_f32(here, "nonzero_zero", &[1], vec![0.0])?;
        let m = self.binary_op(xf, zero, BinaryOp::NotEqual)?;
        let (mut c, mut s, len) = (m, 1usize, n as u32);
        while s < n {
            let (count, offset) = ((n - s) as u32, s as u32);
            let shifted =
                self.b.op(|y| Op::Slice(Slice { x: c, axis: 1, start: 0, step: 1, count, offset, len, y }))?;
            c = self.binary_op(c, shifted, BinaryOp::Add)?;
            s *= 2;
        }
        Ok((m, c))
    }

    /// Lowers [`MaskedScatter`] (see [`crate::masked_scatter`]); `Ok(false)` for anything else.
    pub(super) fn try_masked_scatter(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        if !node.op_is::<MaskedScatter>() {
            return Ok(false);
        }
        let (d, ds) = self.act(node.inputs[0])?;
        let (m, ms) = self.act(node.inputs[1])?;
        let (f, fs) = self.act(node.inputs[2])?;
        let n: usize = ds.iter().product();
        if ms != ds || fs.len() != 1 || n == 0 || n > F32_EXACT {
            return Err(self.bad("a mask of the data's shape and a 1-D source", format!("{ds:?}, {ms:?}, {fs:?}")));
        }
        let here = OutletId::new(self.node, 0);
        let (set, c) = self.running_count(m, &ms)?;
        let one = self.weight_f32(here, "masked_scatter_one", &[1], vec![1.0])?;
        // The j-th set entry reads F[j] (c − 1 = j there); an unset entry reads an element that
        // `Unless` then drops (−1 counts from the end).
        let idx = self.binary_op(c, one, BinaryOp::Sub)?;
        let picked = self.b.op(|y| Op::Gather(Gather { x: f, idx, axis: 0, y }))?;
        let picked = self.binary_op(picked, set, BinaryOp::When)?;
        let df = self.reshape(d, &ds, &[1, n])?;
        let kept = self.binary_op(df, set, BinaryOp::Unless)?;
        let y = self.binary_op(picked, kept, BinaryOp::Add)?;
        let y = self.reshape(y, &[1, n], &ds)?;
        self.set_out(Val::Act { id: y, shape: ds, int: false });
        self.count_fused("masked-scatter");
        Ok(true)
    }
}

/// The largest element count whose positions an f32 holds exactly.
const F32_EXACT: usize = 1 << 24;
