//! `Sdpa` fusion of attention forms exporters write beyond the plain one (`tests/fuse.rs` has
//! that): score rows regrouped by views between the product and the softmax (multi-query
//! attention as GPT-BigCode and Falcon write it, per-window heads), and scores that add a second
//! product (content plus position scores, as Persimmon, GLM-4 and conformer encoders write
//! them). Each fuses to one `Sdpa` node, and the fused model computes the same outputs on seeded
//! random inputs as the graph it replaces.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::fuse;
use kestrel_rt::{Input, Model, ModelBuilder};

fn run(b: &ModelBuilder, sizes: &[usize]) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let mut rng = Rng::new(21);
    let feeds: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.vec(2 * n, 2.0)).collect();
    let inputs: Vec<Input<'_>> = feeds.iter().map(|f| Input::F32(f)).collect();
    model.session(2).unwrap().run_vec(&inputs).unwrap().remove(0)
}

fn assert_same(before: &ModelBuilder, fused: &ModelBuilder, sizes: &[usize]) {
    let (a, c) = (run(before, sizes), run(fused, sizes));
    assert!(a.iter().chain(&c).all(|v| v.is_finite()));
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = a.iter().zip(&c).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(err <= 1e-5 * scale, "{err} of {scale}");
}

fn op(b: &mut ModelBuilder, f: impl FnOnce(TensorId) -> Op) -> TensorId {
    b.op(f).unwrap()
}

/// Multi-query attention with the heads folded into the query rows: `q [T·H, D]` (rows in
/// (token, head) order) against one key/value head, the scores `[T·H, T]` viewed as `[T, H, T]`
/// for the softmax, a full constant bias added before that view and a per-row mask after it,
/// the weights viewed back to `[T·H, T]` for the product with values.
#[test]
fn score_rows_regrouped_by_views_fuse() {
    let (t, h, d, dv) = (4usize, 3usize, 5usize, 6usize);
    let mut b = ModelBuilder::new("mqa");
    let mut rng = Rng::new(7);
    let qx = b.input("q", &[t * h, d]).unwrap();
    let k = b.input("k", &[t, d]).unwrap();
    let v = b.input("v", &[t, dv]).unwrap();
    let mask = b.input("mask", &[t, 1, t]).unwrap();
    let q = op(&mut b, |y| Op::Unary(Unary { x: qx, op: UnaryOp::Tanh, y }));
    let sc = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let bias = b.weight("bias", &[t * h, t], rng.vec(t * h * t, 0.5)).unwrap();
    let sc = op(&mut b, |y| Op::Binary(Binary { a: sc, b: bias, op: BinaryOp::Add, y }));
    let view = b.reshape(sc, &[t, h, t]).unwrap();
    let sc = op(&mut b, |y| Op::Binary(Binary { a: view, b: mask, op: BinaryOp::Add, y }));
    let s = b.weight("s", &[1], vec![1.0 / (d as f32).sqrt()]).unwrap();
    let sc = op(&mut b, |y| Op::Binary(Binary { a: sc, b: s, op: BinaryOp::Mul, y }));
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: sc, y }));
    let flat = b.reshape(p, &[t * h, t]).unwrap();
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: flat, b: v, transpose_b: false, y }));
    b.output(o);
    let mut fused = b.clone();
    let report = fuse(&mut fused);
    assert_eq!(report.fused.get("sdpa"), Some(&1), "{report:?}");
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Softmax(_) | Op::MatMul(_))), "{:?}", fused.ops());
    assert!(kestrel_rt::fuse::unfused_attention(&fused).is_empty());
    assert_same(&b, &fused, &[t * h * d, t * d, t * dv, t * t]);
}

/// Scores that add a second product of activations (`q·kᵀ + q·rᵀ`, content and position), then
/// a scale: the first product is the node's, the second enters as its additive bias.
#[test]
fn an_added_second_score_product_becomes_the_bias() {
    let (h, t, d) = (2usize, 5usize, 4usize);
    let mut b = ModelBuilder::new("relpos");
    let q = b.input("q", &[h, t, d]).unwrap();
    let k = b.input("k", &[h, t, d]).unwrap();
    let r = b.input("r", &[h, t, d]).unwrap();
    let v = b.input("v", &[h, t, d]).unwrap();
    let content = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let position = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: r, transpose_b: true, y }));
    let sc = op(&mut b, |y| Op::Binary(Binary { a: content, b: position, op: BinaryOp::Add, y }));
    let s = b.weight("s", &[1], vec![(d as f32).sqrt()]).unwrap();
    let sc = op(&mut b, |y| Op::Binary(Binary { a: sc, b: s, op: BinaryOp::Div, y }));
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: sc, y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
    b.output(o);
    let mut fused = b.clone();
    let report = fuse(&mut fused);
    assert_eq!(report.fused.get("sdpa"), Some(&1), "{report:?}");
    assert!(fused.ops().iter().any(|o| matches!(o, Op::Sdpa(s) if s.bias.is_some())));
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Softmax(_))));
    assert_same(&b, &fused, &[h * t * d; 4]);
}
