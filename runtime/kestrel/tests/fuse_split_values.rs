//! Attention whose scores are one product over keys joined before it and whose weights are split
//! back by column ranges, each range multiplied with its own values and the products summed
//! (Pegasus-X's global tokens attending to themselves and to the blocks: the queries learned
//! tokens, the keys the global tokens' joined with the block's), as a class on small graphs built
//! here: two or three parts, activation queries or constant ones (`k · Qᵀ` then transposed, as
//! tract writes them). Each fuses into one `Sdpa` node over the values joined and computes the
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

/// The products with values each an output (not summed): reported, naming the split.
#[test]
fn products_with_values_not_summed_are_reported() {
    reported(&split(&[2, 5], false, false), "the attention weights split into 2 column ranges");
}
