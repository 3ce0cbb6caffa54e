//! Attention with no elements (no keys, no queries), as the converter keeps empty tensors, through
//! the fusion passes: the plain `Sdpa` form, weights mixed with a constant map (`sdpa_mixed`),
//! scores concatenated from products on the key axis (`sdpa_concat_keys`) and constant queries
//! (`const_queries`). A softmax with no elements is left as it is and not reported (fuse/
//! sdpa_pass.rs `has_elements`: the passes' row walks need rows), the graph computing what it
//! did; a constant part with no keys beside a part with keys is reported with a reason naming it
//! (sdpa_concat_keys.rs refuses a constant factor with no elements). Without those guards the
//! constant bias over no keys and the constant part with no keys (stored keys last, transposed at
//! fuse time) panic in a pass (`chunks(0)`), and the other forms are reported as unfused
//! attention.

use crate::common_fuse;

use common_fuse::{assert_same_outputs, binary, op, reported, run};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::{fuse, unfused_attention};
use kestrel_rt::ModelBuilder;

const H: usize = 2;
const D: usize = 4;

/// The forms of the module doc.
#[derive(Clone, Copy, Debug)]
enum Form {
    Plain,
    /// A constant bias `[H, tq, tk]` added to the scores (the pattern's mask walk, by rows of
    /// `tk`).
    Biased,
    Mixed,
    ConcatKeys,
    ConstQueries,
}

const FORMS: [Form; 5] = [Form::Plain, Form::Biased, Form::Mixed, Form::ConcatKeys, Form::ConstQueries];

fn matmul(b: &mut ModelBuilder, a: TensorId, c: TensorId, transpose_b: bool) -> TensorId {
    op(b, |y| Op::MatMul(MatMul { a, b: c, transpose_b, y }))
}

/// Attention of `tq` queries over `tk` keys in `form`: scores scaled, the softmax, the product
/// with values `[H, tk, D]`. ConcatKeys: the keys in two parts, `tk` each (where
/// `constant_part`: the first constant, the second of 2 keys), each product padded into the key axis and the pads summed; the
/// weights cut back per part, each times its values, summed.
fn attention(form: Form, tq: usize, tk: usize, constant_part: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("empty");
    let mut rng = Rng::new(5);
    let q = match form {
        Form::ConstQueries => {
            let qc = b.weight("queries", &[H, tq, D], rng.vec(H * tq * D, 1.0)).unwrap();
            let zero = b.weight("zero", &[1], vec![0.0]).unwrap();
            binary(&mut b, qc, zero, BinaryOp::Add)
        }
        _ => b.input("q", &[H, tq, D]).unwrap(),
    };
    let scale = b.weight("scale", &[1], vec![0.5]).unwrap();
    if let Form::ConcatKeys = form {
        let sizes = [tk, if constant_part { 2 } else { tk }];
        let len = sizes[0] + sizes[1];
        let (mut sum, mut values, mut at) = (None, Vec::new(), 0u32);
        for (i, &n) in sizes.iter().enumerate() {
            // The constant keys stored `[H, D, n]` (laid out key rows first at fuse time).
            let constant = i == 0 && constant_part;
            let (k, v) = if constant {
                let k = b.weight("k0", &[H, D, n], rng.vec(H * n * D, 1.0)).unwrap();
                (k, b.weight("v0", &[H, n, D], rng.vec(H * n * D, 1.0)).unwrap())
            } else {
                (b.input(&format!("k{i}"), &[H, n, D]).unwrap(), b.input(&format!("v{i}"), &[H, n, D]).unwrap())
            };
            values.push(v);
            let s = matmul(&mut b, q, k, !constant);
            let (count, offset) = (n as u32, at);
            let padded = op(&mut b, |y| {
                Op::Slice(Slice { x: s, axis: 2, start: 0, step: 1, count, offset, len: len as u32, y })
            });
            sum = Some(match sum {
                None => padded,
                Some(acc) => binary(&mut b, acc, padded, BinaryOp::Add),
            });
            at += count;
        }
        let s = binary(&mut b, sum.unwrap(), scale, BinaryOp::Mul);
        let w = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
        let (mut out, mut at) = (None, 0u32);
        for (&n, &v) in sizes.iter().zip(&values) {
            let (start, count) = (at, n as u32);
            let cut =
                op(&mut b, |y| Op::Slice(Slice { x: w, axis: 2, start, step: 1, count, offset: 0, len: count, y }));
            let o = matmul(&mut b, cut, v, false);
            out = Some(match out {
                None => o,
                Some(acc) => binary(&mut b, acc, o, BinaryOp::Add),
            });
            at += count;
        }
        b.output(out.unwrap());
        return b;
    }
    let k = b.input("k", &[H, tk, D]).unwrap();
    let v = b.input("v", &[H, tk, D]).unwrap();
    let s = matmul(&mut b, q, k, true);
    let mut s = binary(&mut b, s, scale, BinaryOp::Mul);
    if let Form::Biased = form {
        let bias = b.weight("bias", &[H, tq, tk], rng.vec(H * tq * tk, 1.0)).unwrap();
        s = binary(&mut b, s, bias, BinaryOp::Add);
    }
    let mut w = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    if let Form::Mixed = form {
        let gate = b.weight("gate", &[H, 1, 1], rng.vec(H, 1.0)).unwrap();
        w = binary(&mut b, gate, w, BinaryOp::Mul);
        let map = b.weight("map", &[H, tq, tk], rng.vec(H * tq * tk, 1.0)).unwrap();
        w = binary(&mut b, w, map, BinaryOp::Add);
    }
    let o = matmul(&mut b, w, v, false);
    b.output(o);
    b
}

/// Fuses a copy of `b`: its softmax (with no elements) is kept, no `Sdpa` node made, nothing
/// reported, and the graph computes what it did.
fn left_alone(b: &ModelBuilder) {
    let mut fused = b.clone();
    let report = fuse(&mut fused);
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Sdpa(_))), "{report:?}");
    assert!(fused.ops().iter().any(|o| matches!(o, Op::Softmax(_))), "{report:?}");
    assert!(unfused_attention(&fused).is_empty());
    assert!(unfused_attention(b).is_empty());
    assert_same_outputs(b, &fused);
}

/// No keys: the scores `[H, tq, 0]`, the output `[H, tq, D]` (zeros: a sum over no keys).
#[test]
fn attention_over_no_keys_is_left_alone() {
    for form in FORMS {
        println!("{form:?}");
        let b = attention(form, 3, 0, false);
        left_alone(&b);
        // Batch 2, but 1 for constant queries: `run_vec` infers the batch from the first input,
        // there the keys, with no elements.
        let out = run(&b);
        let batch = if matches!(form, Form::ConstQueries) { 1 } else { 2 };
        assert_eq!(out.len(), batch * H * 3 * D);
        assert!(out.iter().all(|&v| v == 0.0));
    }
}

/// No queries: the scores `[H, 0, tk]`, the output `[H, 0, D]`.
#[test]
fn attention_of_no_queries_is_left_alone() {
    for form in FORMS {
        println!("{form:?}");
        let b = attention(form, 0, 3, false);
        left_alone(&b);
        assert!(run(&b).is_empty());
    }
}

/// Scores concatenated from a constant part with no keys and a part with two: the softmax has
/// elements, and the constant factor with none is named.
#[test]
fn a_constant_part_with_no_keys_is_reported() {
    reported(&attention(Form::ConcatKeys, 3, 0, true), "a constant factor with no elements");
}
