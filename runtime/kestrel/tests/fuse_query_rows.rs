//! `Sdpa` fusion of the attention forms the timm and Hugging Face family exports left unfused
//! (issue 33, item 4), as classes on small graphs built here:
//!
//! - weights cut by query rows after the softmax (tract pushes a graph's slice of the attention
//!   output up through the product with values): one row kept (a class token's), with and
//!   without a bias; the rows split into two slices, each with its own product with values (TNT,
//!   CvT, CrossViT); a unit axis moved past the keys and back after the cut;
//! - the key axis split by a view for biases added there (MViTv2's decomposed relative position,
//!   `[.., Tq, kh, kw]` plus `[.., kh, 1]` and `[.., 1, kw]`);
//! - the forms no fused node computes, reported with a reason that names them: a softmax over the
//!   queries (GroupViT), scores also read by another output, a sink column whose constant also
//!   biases the keys; constant queries (a pooling head's probe) now fuse, and so do weights mixed
//!   with a constant map before the product with values (ConViT: tests/fuse_mixed.rs).
//!
//! Each fused graph computes the same outputs on seeded random inputs as the graph it replaces.

use crate::common_fuse;

use common_fuse::{binary, fuses_to, op, reported};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::{fuse, unfused_attention};
use kestrel_rt::ModelBuilder;

fn rows(b: &mut ModelBuilder, x: TensorId, start: u32, count: u32) -> TensorId {
    let axis = b.shape_of(x).unwrap().rank() as u32 - 2;
    op(b, |y| Op::Slice(Slice { x, axis, start, step: 1, count, offset: 0, len: count, y }))
}

const H: usize = 2;
const T: usize = 6;
const D: usize = 4;

/// `q·kᵀ / √d` (`[1, H, T, T]`) plus an optional bias, its softmax; q, k, v inputs `[H, T, D]`.
fn scores(b: &mut ModelBuilder, bias: Option<TensorId>) -> (TensorId, TensorId) {
    let q = b.input("q", &[H, T, D]).unwrap();
    let k = b.input("k", &[H, T, D]).unwrap();
    let v = b.input("v", &[H, T, D]).unwrap();
    let s = op(b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s = b.reshape(s, &[1, H, T, T]).unwrap();
    let c = b.weight("scale", &[1], vec![0.5]).unwrap();
    let mut s = binary(b, s, c, BinaryOp::Mul);
    if let Some(x) = bias {
        s = binary(b, s, x, BinaryOp::Add);
    }
    (op(b, |y| Op::Softmax(Softmax { x: s, y })), v)
}

/// `w [1, H, n, T]` times the values, as `[H, n, D]`.
fn times_values(b: &mut ModelBuilder, w: TensorId, v: TensorId, n: usize) -> TensorId {
    let w = b.reshape(w, &[H, n, T]).unwrap();
    op(b, |y| Op::MatMul(MatMul { a: w, b: v, transpose_b: false, y }))
}

#[test]
fn one_query_row_cut_after_the_softmax_fuses() {
    for bias in ["none", "constant", "computed"] {
        let mut b = ModelBuilder::new("cls_row");
        let mut rng = Rng::new(5);
        let x = match bias {
            "constant" => Some(b.weight("bias", &[1, H, T, T], rng.vec(H * T * T, 1.0)).unwrap()),
            "computed" => Some(b.input("bias", &[1, H, T, T]).unwrap()),
            _ => None,
        };
        let (p, v) = scores(&mut b, x);
        let cls = rows(&mut b, p, 0, 1);
        let o = times_values(&mut b, cls, v, 1);
        b.output(o);
        let fused = fuses_to(&b, 1);
        assert!(fused.ops().iter().any(|o| matches!(o, Op::Slice(_))), "{bias}: the queries are cut");
    }
}

/// tract's axis moves after a cut to one row: `[1, H, 1, T]` → `[1, H, T, 1]` → `[1, H, 1, T]`.
#[test]
fn a_unit_axis_moved_past_the_keys_and_back_is_one_view() {
    let mut b = ModelBuilder::new("moved");
    let (p, v) = scores(&mut b, None);
    let cls = rows(&mut b, p, 0, 1);
    let moved = b.reshape(cls, &[1, H, T, 1]).unwrap();
    let back = b.reshape(moved, &[1, H, 1, T]).unwrap();
    let o = times_values(&mut b, back, v, 1);
    b.output(o);
    fuses_to(&b, 1);
}

/// The class token's row and the patch rows go different ways (TNT, CvT, CrossViT): two slices,
/// each with its own product with values; a bias (constant or computed) is cut alike for each
/// part.
#[test]
fn weights_split_by_query_rows_fuse_one_node_per_part() {
    for bias in ["none", "constant", "computed"] {
        let mut b = ModelBuilder::new("split_rows");
        let mut rng = Rng::new(9);
        let x = match bias {
            "constant" => Some(b.weight("bias", &[1, H, T, T], rng.vec(H * T * T, 1.0)).unwrap()),
            "computed" => Some(b.input("bias", &[1, H, T, T]).unwrap()),
            _ => None,
        };
        let (p, v) = scores(&mut b, x);
        let cls = rows(&mut b, p, 0, 1);
        let rest = rows(&mut b, p, 1, (T - 1) as u32);
        let o1 = times_values(&mut b, cls, v, 1);
        let v2 = op(&mut b, |y| Op::Unary(Unary { x: v, op: UnaryOp::Tanh, y }));
        let o2 = times_values(&mut b, rest, v2, T - 1);
        b.output(o1);
        b.output(o2);
        fuses_to(&b, 2);
    }
}

/// A part that does not fuse (its weights feed something other than a product with values)
/// leaves the whole softmax as it was, reported with the part and its reason.
#[test]
fn a_split_whose_part_does_not_fuse_is_left_whole_and_reported() {
    let mut b = ModelBuilder::new("split_rows_unfused");
    let (p, v) = scores(&mut b, None);
    let cls = rows(&mut b, p, 0, 1);
    let rest = rows(&mut b, p, 1, (T - 1) as u32);
    let o1 = times_values(&mut b, cls, v, 1);
    let odd = op(&mut b, |y| Op::Unary(Unary { x: rest, op: UnaryOp::Tanh, y }));
    b.output(o1);
    b.output(odd);
    let mut fused = b.clone();
    fuse(&mut fused);
    assert_eq!(fused.ops().iter().filter(|o| matches!(o, Op::Softmax(_))).count(), 1);
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Sdpa(_))));
    let left = unfused_attention(&fused);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].reason.contains("cut into 2 parts by query rows; part 2"), "{left:?}");
}

/// MViTv2's decomposed relative position: the scores `[H, T, T]` with `T = 6 = 2 · 3` keys viewed
/// as `[H, T, 2, 3]`, a computed `[H, T, 2, 1]` and `[H, T, 1, 3]` added there (and, in a second
/// form, one computed term plus a constant), viewed back for the softmax.
#[test]
fn biases_added_where_the_key_axis_is_split_fuse() {
    for form in ["two computed", "computed and constant", "one computed"] {
        let mut b = ModelBuilder::new("mvit");
        let mut rng = Rng::new(3);
        let q = b.input("q", &[H, T, D]).unwrap();
        let k = b.input("k", &[H, T, D]).unwrap();
        let v = b.input("v", &[H, T, D]).unwrap();
        let rh = b.input("rel_h", &[H, T, 2, 1]).unwrap();
        let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
        let split = b.reshape(s, &[H, T, 2, 3]).unwrap();
        let mut s = binary(&mut b, split, rh, BinaryOp::Add);
        match form {
            "two computed" => {
                let rw = b.input("rel_w", &[H, T, 1, 3]).unwrap();
                s = binary(&mut b, s, rw, BinaryOp::Add);
            }
            "computed and constant" => {
                let c = b.weight("rel_w", &[1, 1, 3], rng.vec(3, 1.0)).unwrap();
                s = binary(&mut b, s, c, BinaryOp::Add);
            }
            _ => {}
        }
        let s = b.reshape(s, &[H, T, T]).unwrap();
        let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
        let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
        b.output(o);
        fuses_to(&b, 1);
    }
}

/// GroupViT's group assignment: the scores transposed before the softmax (over the queries).
#[test]
fn a_softmax_over_the_queries_is_reported_as_such() {
    let mut b = ModelBuilder::new("over_queries");
    let q = b.input("q", &[H, T, D]).unwrap();
    let k = b.input("k", &[H, T, D]).unwrap();
    let v = b.input("v", &[H, T, D]).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let st = op(&mut b, |y| Op::Transpose(Transpose { x: s, perm: [0, 2, 1, 3, 4, 5, 0, 0], y }));
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: st, y }));
    let pt = op(&mut b, |y| Op::Transpose(Transpose { x: p, perm: [0, 2, 1, 3, 4, 5, 0, 0], y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: pt, b: v, transpose_b: false, y }));
    b.output(o);
    reported(&b, "a softmax over the queries");
}

/// A pooling head's probe: constant queries, whose scores tract writes as the keys times the
/// constant (`k · Qᵀ`, `[H, T, 1]`) viewed as `[H, 1, T]` for the softmax: fused, the constant
/// made an activation (tests/fuse_const_queries.rs has the forms).
#[test]
fn constant_queries_fuse_and_a_classifier_is_not_attention() {
    let mut b = ModelBuilder::new("probe");
    let mut rng = Rng::new(4);
    let q = b.weight("probe", &[H, D, 1], rng.vec(H * D, 1.0)).unwrap();
    let k = b.input("k", &[H, T, D]).unwrap();
    let v = b.input("v", &[H, T, D]).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: k, b: q, transpose_b: false, y }));
    let s = b.reshape(s, &[H, 1, T]).unwrap();
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
    b.output(o);
    fuses_to(&b, 1);
    // A classifier's softmax over a product by a constant is no attention: not reported.
    let mut c = ModelBuilder::new("classifier");
    let x = c.input("x", &[T, D]).unwrap();
    let w = c.weight("w", &[D, 3], rng.vec(3 * D, 1.0)).unwrap();
    let s = op(&mut c, |y| Op::MatMul(MatMul { a: x, b: w, transpose_b: false, y }));
    let p = op(&mut c, |y| Op::Softmax(Softmax { x: s, y }));
    c.output(p);
    fuse(&mut c);
    assert!(unfused_attention(&c).is_empty());
}

/// Attention sinks through the scores' log-sum-exp: the scores read by a reduction too.
#[test]
fn scores_also_read_by_a_log_sum_exp_are_reported_as_such() {
    let mut b = ModelBuilder::new("sinks");
    let q = b.input("q", &[H, T, D]).unwrap();
    let k = b.input("k", &[H, T, D]).unwrap();
    let v = b.input("v", &[H, T, D]).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
    let e = op(&mut b, |y| Op::Unary(Unary { x: s, op: UnaryOp::Exp, y }));
    b.output(o);
    b.output(e);
    reported(&b, "log-sum-exp");
}

/// Attention sinks as tract lowers their concatenation, the scores padded with one key column and
/// the column cut after the softmax, but the constant added after the pad is nonzero on the keys
/// too (a bias and a sink in one term): reported, naming the sink form it misses (the sink forms
/// that fuse are tested in `fuse_sinks.rs`).
#[test]
fn a_sink_column_with_a_bias_on_the_keys_is_reported() {
    let mut b = ModelBuilder::new("sink_column");
    let mut rng = Rng::new(6);
    let q = b.input("q", &[H, T, D]).unwrap();
    let k = b.input("k", &[H, T, D]).unwrap();
    let v = b.input("v", &[H, T, D]).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let (t, n) = (T as u32, T as u32 + 1);
    let padded = op(&mut b, |y| Op::Slice(Slice { x: s, axis: 2, start: 0, step: 1, count: t, offset: 0, len: n, y }));
    let sink = b.weight("sink", &[H, 1, T + 1], rng.vec(H * (T + 1), 1.0)).unwrap();
    let s = binary(&mut b, padded, sink, BinaryOp::Add);
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let p = op(&mut b, |y| Op::Slice(Slice { x: p, axis: 2, start: 0, step: 1, count: t, offset: 0, len: t, y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
    b.output(o);
    reported(&b, "an attention sink: one column of zeros on the keys");
}
