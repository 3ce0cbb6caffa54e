//! `Sdpa` fusion of attention with constant queries (issue 33, item 4): learned query tokens
//! folded with their projection at conversion (a pooling head's probe: SigLIP's MAP head, AIMv2,
//! VideoPrism, SAM3; BLIP-2's Q-Former queries), as classes on small graphs built here:
//!
//! - `Q · kᵀ` with the constant the left factor, broadcast over the heads;
//! - `k · Qᵀ` as tract writes it (keys × queries, `[.., Tk, Tq]`), laid out queries × keys for the
//!   softmax by a transpose of the last two axes, by a view (one query), or by a transpose that
//!   also moves the heads, with a scale before or after the transpose; the constant stored
//!   `[.., D, Tq]` or `[.., Tq, D]` (transposed by the product);
//! - with and without a scale, a constant bias and a computed mask; several heads; `Tq ≠ Tk`;
//! - forms left unfused, reported with a reason that names them.
//!
//! Each fused graph computes the same outputs on seeded random inputs as the graph it replaces,
//! its queries the constant made an activation (a constant plus a zero constant).

use crate::common_fuse;

use common_fuse::{assert_same_outputs, binary, op};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::{fuse, unfused_attention};
use kestrel_rt::ModelBuilder;

/// Fuses a copy of `b`: one `Sdpa` node reading the constant made an activation (by the fusion
/// where `rewritten`, else by the graph), no softmax left, nothing reported, the same outputs.
fn fuses(b: &ModelBuilder, rewritten: bool) {
    let mut fused = b.clone();
    let report = fuse(&mut fused);
    let sdpa: Vec<Sdpa> =
        fused.ops().iter().filter_map(|o| if let Op::Sdpa(s) = o { Some(*s) } else { None }).collect();
    assert_eq!(sdpa.len(), 1, "{report:?}\n{:?}\n{:?}", unfused_attention(&fused), fused.ops());
    let made_here = report.fused.get("constant queries made an activation").copied();
    assert_eq!(made_here, rewritten.then_some(1), "{report:?}");
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Softmax(_))), "{:?}", fused.ops());
    assert!(unfused_attention(&fused).is_empty());
    // The queries: a constant plus a zero constant (through views).
    let mut q = sdpa[0].q;
    let made = loop {
        match fused.producer(q).map(|p| fused.ops()[p]) {
            Some(Op::Reshape(r)) => q = r.x,
            Some(Op::Binary(bin)) => {
                break bin.op == BinaryOp::Add
                    && fused.is_weight(bin.a)
                    && fused.weight_values(bin.b) == Some(&[0.0][..])
            }
            _ => break false,
        }
    };
    assert!(made, "{:?}", fused.ops());
    assert_same_outputs(b, &fused);
}

/// Leaves `b` unfused; the one report's reason contains `why`.
fn reported(b: &ModelBuilder, why: &str) {
    let mut fused = b.clone();
    fuse(&mut fused);
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Sdpa(_))), "{:?}", fused.ops());
    let left = unfused_attention(&fused);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].reason.contains("constant queries"), "{left:?}");
    assert!(left[0].reason.contains(why), "{left:?}");
}

fn matmul(b: &mut ModelBuilder, a: TensorId, c: TensorId, transpose_b: bool) -> TensorId {
    op(b, |y| Op::MatMul(MatMul { a, b: c, transpose_b, y }))
}

fn transpose(b: &mut ModelBuilder, x: TensorId, perm: &[u8]) -> TensorId {
    let mut p = [0u8; 8];
    p[..perm.len()].copy_from_slice(perm);
    op(b, |y| Op::Transpose(Transpose { x, perm: p, y }))
}

const H: usize = 2;
const TK: usize = 6;
const TQ: usize = 3;
const D: usize = 4;

/// The score steps the pattern takes after the layout is queries × keys: `[H, TQ, TK]` scores
/// plus a bias (`"constant"` `[1, TQ, TK]`, a `"mask"` input `[H, TQ, TK]`, or `"none"`).
fn biased(b: &mut ModelBuilder, s: TensorId, bias: &str, rng: &mut Rng) -> TensorId {
    let shape = b.shape_of(s).unwrap();
    let dims: Vec<usize> = shape.dims().iter().map(|&d| d as usize).collect();
    let r = dims.len();
    match bias {
        "constant" => {
            let mut bd = vec![1; r];
            bd[r - 2..].copy_from_slice(&dims[r - 2..]);
            let c = b.weight("bias", &bd, rng.vec(TQ * TK, 1.0)).unwrap();
            binary(b, s, c, BinaryOp::Add)
        }
        "mask" => {
            let m = b.input("mask", &dims).unwrap();
            binary(b, s, m, BinaryOp::Add)
        }
        _ => s,
    }
}

/// Softmax of `s` times values `[.., TK, D]` viewed to the scores' batch, as the output.
fn attend(b: &mut ModelBuilder, s: TensorId, v: TensorId) {
    let p = op(b, |y| Op::Softmax(Softmax { x: s, y }));
    let o = matmul(b, p, v, false);
    b.output(o);
}

/// `Q · kᵀ`: a product's left factor is an activation, so the constant is one as the converter
/// makes it (plus a zero constant), which the `Sdpa` pattern takes as computed queries: per head
/// `[H, TQ, D]` as it is, or `[1, TQ, D]` shared by the key heads `[H, TK, D]` (the product
/// broadcasts it), then broadcast to the heads by the fusion.
#[test]
fn constant_queries_times_the_keys_fuse() {
    for (bias, scaled, heads) in
        [("none", false, 1), ("constant", true, 1), ("mask", true, 1), ("none", true, H), ("mask", false, H)]
    {
        let mut b = ModelBuilder::new("q_kt");
        let mut rng = Rng::new(7);
        let qc = b.weight("queries", &[heads, TQ, D], rng.vec(heads * TQ * D, 1.0)).unwrap();
        let zero = b.weight("zero", &[1], vec![0.0]).unwrap();
        let q = binary(&mut b, qc, zero, BinaryOp::Add);
        let k = b.input("k", &[H, TK, D]).unwrap();
        let v = b.input("v", &[H, TK, D]).unwrap();
        let mut s = matmul(&mut b, q, k, true);
        if scaled {
            let c = b.weight("scale", &[1], vec![0.5]).unwrap();
            s = binary(&mut b, s, c, BinaryOp::Mul);
        }
        let s = biased(&mut b, s, bias, &mut rng);
        attend(&mut b, s, v);
        fuses(&b, heads == 1);
    }
}

/// `k · Qᵀ` as tract writes it: keys `[1, H, TK, D]` times the constant `[1, H, D, TQ]`, the
/// scores `[1, H, TK, TQ]` transposed to `[1, H, TQ, TK]`, a scale before or after the transpose,
/// then a bias.
#[test]
fn keys_times_transposed_constant_queries_fuse() {
    for bias in ["none", "constant", "mask"] {
        for scale_first in [false, true] {
            let mut b = ModelBuilder::new("k_qt");
            let mut rng = Rng::new(8);
            let q = b.weight("queries", &[1, H, D, TQ], rng.vec(H * TQ * D, 1.0)).unwrap();
            let k = b.input("k", &[1, H, TK, D]).unwrap();
            let v = b.input("v", &[1, H, TK, D]).unwrap();
            let c = b.weight("scale", &[1], vec![0.5]).unwrap();
            let mut s = matmul(&mut b, k, q, false);
            if scale_first {
                s = binary(&mut b, s, c, BinaryOp::Mul);
            }
            s = transpose(&mut b, s, &[0, 1, 3, 2]);
            if !scale_first {
                s = binary(&mut b, c, s, BinaryOp::Mul);
            }
            let s = biased(&mut b, s, bias, &mut rng);
            attend(&mut b, s, v);
            fuses(&b, true);
        }
    }
}

/// One query (a pooling head's probe): the scores `[H, TK, 1]` viewed as `[H, 1, TK]`, no
/// transpose; the constant stored `[H, 1, D]`, transposed by the product.
#[test]
fn a_probe_viewed_as_one_query_row_fuses() {
    for stored_rows_first in [false, true] {
        let mut b = ModelBuilder::new("probe");
        let mut rng = Rng::new(4);
        let q = if stored_rows_first {
            b.weight("probe", &[H, 1, D], rng.vec(H * D, 1.0)).unwrap()
        } else {
            b.weight("probe", &[H, D, 1], rng.vec(H * D, 1.0)).unwrap()
        };
        let k = b.input("k", &[H, TK, D]).unwrap();
        let v = b.input("v", &[H, TK, D]).unwrap();
        let s = matmul(&mut b, k, q, stored_rows_first);
        let s = b.reshape(s, &[H, 1, TK]).unwrap();
        attend(&mut b, s, v);
        fuses(&b, true);
    }
}

/// The product `[H, TK, TQ]` (the constant `[TQ, D]` transposed by the product, broadcast over
/// the heads), a function of one operand (a step that commutes with the layout), a view to
/// `[1, H, TK, TQ]` and a transpose to `[1, H, TQ, TK]`, then a constant bias.
#[test]
fn transposed_scores_through_views_and_functions_fuse() {
    let mut b = ModelBuilder::new("k_qt_views");
    let mut rng = Rng::new(12);
    let q = b.weight("queries", &[TQ, D], rng.vec(TQ * D, 1.0)).unwrap();
    let k = b.input("k", &[H, TK, D]).unwrap();
    let v = b.input("v", &[1, H, TK, D]).unwrap();
    let s = matmul(&mut b, k, q, true);
    let s = op(&mut b, |y| Op::Unary(Unary { x: s, op: UnaryOp::Tanh, y }));
    let s = b.reshape(s, &[1, H, TK, TQ]).unwrap();
    let s = transpose(&mut b, s, &[0, 1, 3, 2]);
    let s = biased(&mut b, s, "constant", &mut rng);
    attend(&mut b, s, v);
    fuses(&b, true);
}

/// An activation added to the scores while they are keys × queries, and weights gated before the
/// product with values: left unfused, reported as constant queries with the form. A classifier's
/// softmax over a product by a constant is not reported.
#[test]
fn constant_queries_left_unfused_are_reported_with_the_form() {
    let mut rng = Rng::new(5);
    // An activation bias `[H, TK, TQ]` added before the transpose.
    let mut b = ModelBuilder::new("bias_before_transpose");
    let q = b.weight("queries", &[H, D, TQ], rng.vec(H * TQ * D, 1.0)).unwrap();
    let k = b.input("k", &[H, TK, D]).unwrap();
    let v = b.input("v", &[H, TK, D]).unwrap();
    let m = b.input("m", &[H, TK, TQ]).unwrap();
    let s = matmul(&mut b, k, q, false);
    let s = binary(&mut b, s, m, BinaryOp::Add);
    let s = transpose(&mut b, s, &[0, 2, 1]);
    attend(&mut b, s, v);
    reported(&b, "meet a Binary with an activation [2, 6, 3] before they are laid out queries × keys");
    // The weights gated before the product with values: the rewrite applies, the pattern not.
    let mut b = ModelBuilder::new("gated");
    let q = b.weight("queries", &[H, D, TQ], rng.vec(H * TQ * D, 1.0)).unwrap();
    let k = b.input("k", &[H, TK, D]).unwrap();
    let v = b.input("v", &[H, TK, D]).unwrap();
    let g = b.weight("gate", &[H, 1, 1], rng.vec(H, 1.0)).unwrap();
    let s = matmul(&mut b, k, q, false);
    let s = transpose(&mut b, s, &[0, 2, 1]);
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let p = binary(&mut b, p, g, BinaryOp::Mul);
    let o = matmul(&mut b, p, v, false);
    b.output(o);
    reported(&b, "weights gated or mixed before the product with values");
    // A classifier's softmax over a product by a constant is no attention: not reported.
    let mut c = ModelBuilder::new("classifier");
    let x = c.input("x", &[TK, D]).unwrap();
    let w = c.weight("w", &[D, 3], rng.vec(3 * D, 1.0)).unwrap();
    let s = matmul(&mut c, x, w, false);
    let p = op(&mut c, |y| Op::Softmax(Softmax { x: s, y }));
    c.output(p);
    fuse(&mut c);
    assert!(unfused_attention(&c).is_empty());
}
