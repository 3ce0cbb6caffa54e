//! `Sdpa` fusion of soft-capped attention scores, `c · tanh(s / c)` before the mask (Gemma 2,
//! T5Gemma, Grok): the spellings both ONNX exporters write (`Div(s, c)`, `Tanh`, `Mul(·, c)`),
//! the divisor as a multiplication by `1/c`, the cap's factor on either side, and the
//! attention's scale before the cap (on the scores or on the queries) or after it. Each fuses to
//! one `Sdpa` node with the cap, and the fused model computes the same outputs on seeded random
//! inputs as the graph it replaces; a bias added before the cap is not the node's form and is
//! reported as such.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::{fuse, unfused_attention};
use kestrel_rt::{Input, Model, ModelBuilder};

fn run(b: &ModelBuilder, sizes: &[usize]) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let mut rng = Rng::new(29);
    // Amplitude 3: scores of a few units, so a cap of 1 to 2 saturates many of them.
    let feeds: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.vec(2 * n, 3.0)).collect();
    let inputs: Vec<Input<'_>> = feeds.iter().map(|f| Input::F32(f)).collect();
    model.session(2).unwrap().run_vec(&inputs).unwrap().remove(0)
}

fn assert_same(before: &ModelBuilder, fused: &ModelBuilder, sizes: &[usize]) {
    let (a, c) = (run(before, sizes), run(fused, sizes));
    assert!(a.iter().chain(&c).all(|v| v.is_finite()));
    assert!(a.iter().any(|v| *v != 0.0));
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = a.iter().zip(&c).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(err <= 1e-5 * scale, "{err} of {scale}");
}

fn op(b: &mut ModelBuilder, f: impl FnOnce(TensorId) -> Op) -> TensorId {
    b.op(f).unwrap()
}

fn scalar(b: &mut ModelBuilder, name: &str, v: f32) -> TensorId {
    b.weight(name, &[1], vec![v]).unwrap()
}

fn bin(b: &mut ModelBuilder, a: TensorId, c: TensorId, op_: BinaryOp) -> TensorId {
    op(b, |y| Op::Binary(Binary { a, b: c, op: op_, y }))
}

/// Where the attention's scale `1/√D` sits.
#[derive(Clone, Copy, Debug)]
enum ScaleAt {
    /// On the scores before the cap (Gemma 2's exports: `Mul(q·kᵀ, s)`).
    Scores,
    /// On the queries before the product.
    Queries,
    /// On the capped scores, after the cap.
    AfterCap,
}

/// How the cap is written.
#[derive(Clone, Copy, Debug)]
struct Cap {
    c: f32,
    /// `Mul(s, 1/c)` instead of `Div(s, c)`.
    mul_inverse: bool,
    /// `Mul(c, tanh)` instead of `Mul(tanh, c)`.
    factor_first: bool,
}

/// Grouped-query attention (`q [2, 2, T, D]`, `k`, `v [2, 1, T, ·]`: a broadcast product), keys
/// transposed by a `Transpose` as the exporters write them, the scale where `at` says, the soft
/// cap as `cap` says, then an additive mask `[T, T]` (an input, or a constant with a fully
/// masked row), the softmax and the product with values.
fn gemma_block(at: ScaleAt, cap: Option<Cap>, constant_mask: bool) -> (ModelBuilder, Vec<usize>) {
    let (t, d, dv) = (5usize, 8usize, 6usize);
    let mut b = ModelBuilder::new("softcap");
    let q = b.input("q", &[2, 2, t, d]).unwrap();
    let k = b.input("k", &[2, 1, t, d]).unwrap();
    let v = b.input("v", &[2, 1, t, dv]).unwrap();
    let mut sizes = vec![4 * t * d, 2 * t * d, 2 * t * dv];
    let mask = if constant_mask {
        // Causal, as transformers writes it (the most negative f32), and row 2 fully masked.
        let vals: Vec<f32> = (0..t * t).map(|f| if f / t == 2 || f % t > f / t { f32::MIN } else { 0.0 }).collect();
        b.weight("mask", &[t, t], vals).unwrap()
    } else {
        sizes.push(t * t);
        b.input("mask", &[t, t]).unwrap()
    };
    let s = 1.0 / (d as f32).sqrt();
    let q = match at {
        ScaleAt::Queries => {
            let w = scalar(&mut b, "qs", s);
            bin(&mut b, q, w, BinaryOp::Mul)
        }
        _ => q,
    };
    let kt = op(&mut b, |y| Op::Transpose(Transpose { x: k, perm: [0, 1, 3, 2, 4, 5, 0, 0], y }));
    let mut sc = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: kt, transpose_b: false, y }));
    if let ScaleAt::Scores = at {
        let w = scalar(&mut b, "ss", s);
        sc = bin(&mut b, sc, w, BinaryOp::Mul);
    }
    if let Some(cap) = cap {
        sc = if cap.mul_inverse {
            let w = scalar(&mut b, "inv_cap", 1.0 / cap.c);
            bin(&mut b, w, sc, BinaryOp::Mul)
        } else {
            let w = scalar(&mut b, "cap_div", cap.c);
            bin(&mut b, sc, w, BinaryOp::Div)
        };
        sc = op(&mut b, |y| Op::Unary(Unary { x: sc, op: UnaryOp::Tanh, y }));
        let w = scalar(&mut b, "cap_mul", cap.c);
        sc = if cap.factor_first { bin(&mut b, w, sc, BinaryOp::Mul) } else { bin(&mut b, sc, w, BinaryOp::Mul) };
    }
    if let ScaleAt::AfterCap = at {
        let w = scalar(&mut b, "as", s);
        sc = bin(&mut b, sc, w, BinaryOp::Mul);
    }
    sc = bin(&mut b, sc, mask, BinaryOp::Add);
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: sc, y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
    b.output(o);
    (b, sizes)
}

/// Every spelling fuses to one `Sdpa` with the cap (the scale after the cap scales the cap too)
/// and computes what the graph did.
#[test]
fn soft_capped_scores_fuse_in_every_spelling() {
    let s = 1.0 / 8f32.sqrt();
    let mut n = 0;
    for at in [ScaleAt::Scores, ScaleAt::Queries, ScaleAt::AfterCap] {
        for (c, mul_inverse, factor_first) in [(1.5, false, false), (2.0, true, true), (50.0, false, true)] {
            for constant_mask in [false, true] {
                let cap = Cap { c, mul_inverse, factor_first };
                let what = format!("{at:?} {cap:?} constant mask {constant_mask}");
                let (b, sizes) = gemma_block(at, Some(cap), constant_mask);
                let mut fused = b.clone();
                let report = fuse(&mut fused);
                assert_eq!(report.fused.get("sdpa"), Some(&1), "{what}: {report:?}");
                let sdpa: Vec<&Sdpa> = fused
                    .ops()
                    .iter()
                    .filter_map(|o| match o {
                        Op::Sdpa(s) => Some(s),
                        _ => None,
                    })
                    .collect();
                assert_eq!(sdpa.len(), 1, "{what}");
                let want_cap = if let ScaleAt::AfterCap = at { c * s } else { c };
                assert!((sdpa[0].softcap - want_cap).abs() <= 1e-6 * want_cap, "{what}: {:?}", sdpa[0]);
                assert!((sdpa[0].scale - s).abs() <= 1e-6, "{what}: {:?}", sdpa[0]);
                assert!(sdpa[0].bias.is_some(), "{what}");
                assert!(!fused.ops().iter().any(|o| matches!(o, Op::Softmax(_) | Op::Unary(_))), "{what}");
                assert!(unfused_attention(&fused).is_empty(), "{what}");
                assert_same(&b, &fused, &sizes);
                n += 1;
            }
        }
    }
    assert_eq!(n, 18);
}

/// The cap changes the outputs (so the fused node's cap is what makes them agree): the same
/// block without the cap computes something else.
#[test]
fn the_cap_is_not_a_no_op_on_these_inputs() {
    let cap = Cap { c: 1.5, mul_inverse: false, factor_first: false };
    let (capped, sizes) = gemma_block(ScaleAt::Scores, Some(cap), false);
    let (uncapped, _) = gemma_block(ScaleAt::Scores, None, false);
    let (a, c) = (run(&capped, &sizes), run(&uncapped, &sizes));
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a.iter().zip(&c).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff > 1e-2 * scale, "{diff} of {scale}");
}

/// A bias added before the tanh is not a soft cap of the scores (the node adds its bias after
/// the cap): left unfused, and reported with that reason.
#[test]
fn a_bias_before_the_cap_is_reported_not_fused() {
    let (t, d) = (4usize, 4usize);
    let mut b = ModelBuilder::new("bias before cap");
    let q = b.input("q", &[2, t, d]).unwrap();
    let k = b.input("k", &[2, t, d]).unwrap();
    let v = b.input("v", &[2, t, d]).unwrap();
    let mask = b.input("mask", &[t, t]).unwrap();
    let sc = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let sc = bin(&mut b, sc, mask, BinaryOp::Add);
    let c = scalar(&mut b, "c", 2.0);
    let sc = bin(&mut b, sc, c, BinaryOp::Div);
    let sc = op(&mut b, |y| Op::Unary(Unary { x: sc, op: UnaryOp::Tanh, y }));
    let sc = bin(&mut b, sc, c, BinaryOp::Mul);
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: sc, y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
    b.output(o);
    let mut fused = b.clone();
    let report = fuse(&mut fused);
    assert_eq!(report.fused.get("sdpa"), None, "{report:?}");
    let left = unfused_attention(&fused);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].reason.contains("a bias added before the soft cap"), "{left:?}");
}
