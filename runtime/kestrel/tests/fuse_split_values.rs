//! Attention whose scores are one product over keys joined before it and whose weights are split
//! back by column ranges, each range multiplied with its own values and the products summed
//! (Pegasus-X's global tokens attending to themselves and to the blocks: the queries learned
//! tokens, the keys the global tokens' joined with the block's), as a class on small graphs built
//! here: two or three parts, activation queries or constant ones (`k · Qᵀ` then transposed, as
//! tract writes them), and LongT5's local attention (query rows cut by one slice, the weights cut
//! on the key axis between a transpose and the transpose back, the products transposed after), and
//! Pegasus-X's local attention over several blocks (global keys and values shared by the blocks,
//! broadcast over them by the rewrite of `fuse/sdpa_concat_keys.rs`). Each fuses into one `Sdpa` node over the values joined and computes the
//! same outputs on seeded random inputs as the graph it replaces; products with values that are
//! not summed are reported with a reason that names the split.

use crate::common_fuse;

use common_fuse::{binary, fuses_to, op, reported};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::ModelBuilder;

const H: usize = 2;
const TQ: usize = 3;
const D: usize = 4;

fn matmul(b: &mut ModelBuilder, a: TensorId, c: TensorId, transpose_b: bool) -> TensorId {
    op(b, |y| Op::MatMul(MatMul { a, b: c, transpose_b, y }))
}

/// Attention of `TQ` queries (learned constants where `constant_queries`) over keys joined from
/// parts of `sizes` keys, the weights cut back per part and each times its values; the products
/// summed where `summed`, else each an output.
fn split(sizes: &[usize], constant_queries: bool, summed: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("split_values");
    let mut rng = Rng::new(23);
    let mut keys = [NONE; MAX_CONCAT_INPUTS];
    let mut values = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        keys[i] = b.input(&format!("k{i}"), &[H, n, D]).unwrap();
        values.push(b.input(&format!("v{i}"), &[H, n, D]).unwrap());
    }
    let k = op(&mut b, |y| Op::Concat(Concat { xs: keys, axis: 1, y }));
    let s = if constant_queries {
        // `k · Qᵀ` `[H, Tk, TQ]`, transposed to `[H, TQ, Tk]`.
        let q = b.weight("queries", &[H, TQ, D], rng.vec(H * TQ * D, 1.0)).unwrap();
        let s = matmul(&mut b, k, q, true);
        let mut perm = [0u8; kestrel_rt::format::MAX_RANK];
        perm[..3].copy_from_slice(&[0, 2, 1]);
        op(&mut b, |y| Op::Transpose(Transpose { x: s, perm, y }))
    } else {
        let q = b.input("q", &[H, TQ, D]).unwrap();
        matmul(&mut b, q, k, true)
    };
    let c = b.weight("scale", &[1], vec![0.5]).unwrap();
    let s = binary(&mut b, s, c, BinaryOp::Mul);
    let w = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let (mut out, mut at) = (None, 0u32);
    for (&n, &v) in sizes.iter().zip(&values) {
        let (start, count) = (at, n as u32);
        let cut = op(&mut b, |y| Op::Slice(Slice { x: w, axis: 2, start, step: 1, count, offset: 0, len: count, y }));
        let o = matmul(&mut b, cut, v, false);
        if summed {
            out = Some(match out {
                None => o,
                Some(acc) => binary(&mut b, acc, o, BinaryOp::Add),
            });
        } else {
            b.output(o);
        }
        at += count;
    }
    if let Some(o) = out {
        b.output(o);
    }
    b
}

/// Activation queries, two or three parts.
#[test]
fn weights_split_by_columns_fuse() {
    for sizes in [&[2, 5][..], &[1, 3, 4]] {
        println!("{sizes:?}");
        fuses_to(&split(sizes, false, true), 1);
    }
}

/// Constant queries (`k · Qᵀ`, transposed): the product made one of activations, the values
/// joined, then one `Sdpa` node.
#[test]
fn constant_queries_with_weights_split_by_columns_fuse() {
    for sizes in [&[2, 5][..], &[1, 3, 4]] {
        println!("{sizes:?}");
        fuses_to(&split(sizes, true, true), 1);
    }
}

fn transpose(b: &mut ModelBuilder, x: TensorId, p: &[u8]) -> TensorId {
    let mut perm = [0u8; kestrel_rt::format::MAX_RANK];
    perm[..p.len()].copy_from_slice(p);
    op(b, |y| Op::Transpose(Transpose { x, perm, y }))
}

/// LongT5's form: the block padded to `T` query rows, of which one slice keeps the first `KEPT`;
/// the weights transposed (keys second to last), cut into the three blocks' keys there and each
/// cut transposed back, multiplied with its block's values, the product's heads moved beside the
/// rows (`[KEPT, H, D]`), the products summed.
#[test]
fn longt5_weights_cut_between_transposes_fuse() {
    const T: usize = 4;
    const KEPT: usize = 3;
    let mut b = ModelBuilder::new("longt5");
    let n = 2;
    let q = b.input("q", &[H, T, D]).unwrap();
    let mut keys = [NONE; MAX_CONCAT_INPUTS];
    let mut values = Vec::new();
    for (i, key) in keys.iter_mut().enumerate().take(3) {
        *key = b.input(&format!("k{i}"), &[H, n, D]).unwrap();
        values.push(b.input(&format!("v{i}"), &[H, n, D]).unwrap());
    }
    let k = op(&mut b, |y| Op::Concat(Concat { xs: keys, axis: 1, y }));
    let s = matmul(&mut b, q, k, true);
    let bias = b.input("bias", &[H, T, 3 * n]).unwrap();
    let s = binary(&mut b, s, bias, BinaryOp::Add);
    let w = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let count = KEPT as u32;
    let rows = op(&mut b, |y| Op::Slice(Slice { x: w, axis: 1, start: 0, step: 1, count, offset: 0, len: count, y }));
    let wt = transpose(&mut b, rows, &[0, 2, 1]);
    let mut out = None;
    for (i, &v) in values.iter().enumerate() {
        let (start, count) = ((i * n) as u32, n as u32);
        let cut = op(&mut b, |y| Op::Slice(Slice { x: wt, axis: 1, start, step: 1, count, offset: 0, len: count, y }));
        let cut = transpose(&mut b, cut, &[0, 2, 1]);
        let o = matmul(&mut b, cut, v, false);
        let o = transpose(&mut b, o, &[1, 0, 2]);
        out = Some(match out {
            None => o,
            Some(acc) => binary(&mut b, acc, o, BinaryOp::Add),
        });
    }
    b.output(out.unwrap());
    fuses_to(&b, 1);
}

/// Pegasus-X's local attention over several blocks: each block's queries scored against the
/// global tokens' keys (shared by the blocks: the blocks merged into the rows, `[H, NB·T, D]`)
/// and against its own block's keys, the two products padded into the key axis and summed, the
/// weights cut back and each part times its values (the global values likewise shared): one
/// `Sdpa` node, the shared keys and values broadcast over the blocks.
#[test]
fn blocks_scored_against_shared_keys_fuse() {
    const NB: usize = 3;
    const T: usize = 4;
    const G: usize = 2;
    let mut b = ModelBuilder::new("blocks");
    let q = b.input("q", &[H, NB, T, D]).unwrap();
    let (kg, vg) = (b.input("kg", &[H, G, D]).unwrap(), b.input("vg", &[H, G, D]).unwrap());
    let (k, v) = (b.input("k", &[H, NB, T, D]).unwrap(), b.input("v", &[H, NB, T, D]).unwrap());
    let len = (G + T) as u32;
    let pad = |b: &mut ModelBuilder, x: TensorId, offset: u32, count: u32| {
        op(b, |y| Op::Slice(Slice { x, axis: 3, start: 0, step: 1, count, offset, len, y }))
    };
    let qg = b.reshape(q, &[H, NB * T, D]).unwrap();
    let sg = matmul(&mut b, qg, kg, true);
    let sg = b.reshape(sg, &[H, NB, T, G]).unwrap();
    let sg = pad(&mut b, sg, 0, G as u32);
    let sl = matmul(&mut b, q, k, true);
    let sl = pad(&mut b, sl, G as u32, T as u32);
    let s = binary(&mut b, sg, sl, BinaryOp::Add);
    let c = b.weight("scale", &[1], vec![0.5]).unwrap();
    let s = binary(&mut b, s, c, BinaryOp::Mul);
    let w = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let cut = |b: &mut ModelBuilder, start: u32, count: u32| {
        op(b, |y| Op::Slice(Slice { x: w, axis: 3, start, step: 1, count, offset: 0, len: count, y }))
    };
    let wg = cut(&mut b, 0, G as u32);
    let wg = b.reshape(wg, &[H, NB * T, G]).unwrap();
    let og = matmul(&mut b, wg, vg, false);
    let og = b.reshape(og, &[H, NB, T, D]).unwrap();
    let wl = cut(&mut b, G as u32, T as u32);
    let ol = matmul(&mut b, wl, v, false);
    let o = binary(&mut b, og, ol, BinaryOp::Add);
    b.output(o);
    fuses_to(&b, 1);
}

/// The products with values each an output (not summed): reported, naming the split.
#[test]
fn products_with_values_not_summed_are_reported() {
    reported(&split(&[2, 5], false, false), "the attention weights split into 2 column ranges");
}
