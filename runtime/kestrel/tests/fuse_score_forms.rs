//! `Sdpa` fusion of the score forms Hugging Face's and timm's exports write between the score
//! product and the softmax (`kestrel_rt::fuse`'s `score_forms`): a floor `max(s, finfo.min)`
//! after the masks (XGLM), a masked fill with a computed condition lowered as
//! `When(fill, m) + Unless(s, m)` (XLM, FlauBERT, FSMT; one pick shared by two layers), a
//! product of the scores by a constant holding 0 and `1/√d` (GPT's causal mask with the scale
//! folded in) or one value throughout (Swin V2's logit scale). Each fuses to one `Sdpa` node and
//! the fused model computes the same outputs as the graph it replaces on seeded random inputs
//! (padding masks drawn from an input, so rows are partly and, with two masks, fully masked).
//! The forms that cannot fold are left with a reason naming them: a floor above −1e30, a fill
//! above −1e30, and talking heads (CaiT: scores mixed across heads before the softmax).

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::{fuse, unfused_attention};
use kestrel_rt::{Input, Model, ModelBuilder};

const H: usize = 2;
const T: usize = 6;
const D: usize = 4;

fn op(b: &mut ModelBuilder, f: impl FnOnce(TensorId) -> Op) -> TensorId {
    b.op(f).unwrap()
}

fn bin(b: &mut ModelBuilder, a: TensorId, c: TensorId, op_: BinaryOp) -> TensorId {
    op(b, |y| Op::Binary(Binary { a, b: c, op: op_, y }))
}

fn scalar(b: &mut ModelBuilder, name: &str, v: f32) -> TensorId {
    b.weight(name, &[1], vec![v]).unwrap()
}

/// The inputs: q, k, v `[H, T, D]` and `p [1, 1, 1, T]` (a key is padding where `p < 0`).
fn inputs(b: &mut ModelBuilder) -> [TensorId; 4] {
    let q = b.input("q", &[H, T, D]).unwrap();
    let k = b.input("k", &[H, T, D]).unwrap();
    let v = b.input("v", &[H, T, D]).unwrap();
    let p = b.input("p", &[1, 1, 1, T]).unwrap();
    [q, k, v, p]
}

/// `q·kᵀ/√D` as `[1, H, T, T]`.
fn scores(b: &mut ModelBuilder, q: TensorId, k: TensorId) -> TensorId {
    let s = op(b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s4 = b.reshape(s, &[1, H, T, T]).unwrap();
    let scale = scalar(b, "scale", 1.0 / (D as f32).sqrt());
    bin(b, s4, scale, BinaryOp::Mul)
}

/// Softmax over the keys, the product with `v`, the output.
fn finish(mut b: ModelBuilder, s: TensorId, v: TensorId) -> ModelBuilder {
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let p3 = b.reshape(p, &[H, T, T]).unwrap();
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p3, b: v, transpose_b: false, y }));
    b.output(o);
    b
}

/// The padding condition `p < 0` (1 where masked), `[1, 1, 1, T]`.
fn padding(b: &mut ModelBuilder, p: TensorId) -> TensorId {
    let zero = scalar(b, "zero", 0.0);
    bin(b, p, zero, BinaryOp::Less)
}

fn run(b: &ModelBuilder) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let cpu = model.cpu().unwrap();
    let mut rng = Rng::new(53);
    let feeds: Vec<Vec<f32>> =
        (0..cpu.input_count()).map(|i| rng.vec(2 * cpu.input(i).unwrap().shape.numel().unwrap(), 2.0)).collect();
    let inputs: Vec<Input<'_>> = feeds.iter().map(|f| Input::F32(f)).collect();
    model.session(2).unwrap().run_vec(&inputs).unwrap().remove(0)
}

fn count(b: &ModelBuilder, name: &str) -> usize {
    b.ops().iter().filter(|o| o.name() == name).count()
}

/// Fuses `before` and checks it became `sdpa` `Sdpa` nodes and no softmax, computing the same.
fn assert_fuses(before: &ModelBuilder, sdpa: usize, what: &str) {
    let mut fused = before.clone();
    let report = fuse(&mut fused);
    assert_eq!(count(&fused, "Sdpa"), sdpa, "{what}: {report:?}");
    assert_eq!(count(&fused, "Softmax"), 0, "{what}: {report:?}");
    assert!(unfused_attention(&fused).is_empty(), "{what}");
    let (want, got) = (run(before), run(&fused));
    assert!(want.iter().chain(&got).all(|v| v.is_finite()), "{what}");
    assert!(want.iter().any(|v| *v != 0.0), "{what}");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = want.iter().zip(&got).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= 1e-5 * scale, "{what}: err {err} of {scale}");
}

/// Fuses `b` and checks its one softmax is left, reported with a reason holding `why`.
fn assert_left(mut b: ModelBuilder, why: &str) {
    fuse(&mut b);
    assert_eq!(count(&b, "Softmax"), 1);
    let left = unfused_attention(&b);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].reason.contains(why), "{left:?}");
}

/// XGLM: `max(s + causal + padding, floor)`, the causal mask a constant of `finfo.min` and the
/// padding mask `finfo.min` where `p < 0` (both: −∞, which the floor lifts; query 0 sees only
/// key 0, so where key 0 is padding its row is masked everywhere: uniform weights either way).
fn floored(floor: f32, padded: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("floor");
    let [q, k, v, p] = inputs(&mut b);
    let mut s = scores(&mut b, q, k);
    let causal: Vec<f32> = (0..T * T).map(|f| if f % T > f / T { f32::MIN } else { 0.0 }).collect();
    let causal = b.weight("causal", &[1, 1, T, T], causal).unwrap();
    s = bin(&mut b, s, causal, BinaryOp::Add);
    if padded {
        let m = padding(&mut b, p);
        let min = scalar(&mut b, "min", f32::MIN);
        let pad = bin(&mut b, m, min, BinaryOp::Mul);
        s = bin(&mut b, s, pad, BinaryOp::Add);
    }
    let c = scalar(&mut b, "floor", floor);
    s = bin(&mut b, s, c, BinaryOp::Max);
    finish(b, s, v)
}

#[test]
fn a_floor_of_the_masked_scores_folds_into_the_bias() {
    for padded in [true, false] {
        for floor in [f32::MIN, -1e30] {
            assert_fuses(&floored(floor, padded), 1, &format!("floor {floor}, padded {padded}"));
        }
        // Above −1e30 the fused node's `σ·s + c` on a fully masked row is not uniform.
        assert_left(floored(-1e4, padded), "Max of the scores");
    }
}

/// XLM: `where(m, fill, s)` lowered as `When(fill, m) + Unless(s, m)` (or, `fill_first` false,
/// `where(!m, s, fill)` as `When(s, m') + Unless(fill, m')`), `layers` blocks sharing the pick of
/// the fill.
fn where_filled(fill: f32, fill_first: bool, layers: usize) -> ModelBuilder {
    let mut b = ModelBuilder::new("where");
    let [q, k, v, p] = inputs(&mut b);
    let mut m = padding(&mut b, p);
    if !fill_first {
        let one = scalar(&mut b, "one", 1.0);
        m = bin(&mut b, one, m, BinaryOp::Sub);
    }
    let f = scalar(&mut b, "fill", fill);
    let (fill_pick, score_pick) =
        if fill_first { (BinaryOp::When, BinaryOp::Unless) } else { (BinaryOp::Unless, BinaryOp::When) };
    let picked = bin(&mut b, f, m, fill_pick);
    let mut x = q;
    for _ in 0..layers {
        let s = scores(&mut b, x, k);
        let kept = bin(&mut b, s, m, score_pick);
        let s = bin(&mut b, picked, kept, BinaryOp::Add);
        let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
        let p3 = b.reshape(p, &[H, T, T]).unwrap();
        x = op(&mut b, |y| Op::MatMul(MatMul { a: p3, b: v, transpose_b: false, y }));
    }
    b.output(x);
    b
}

#[test]
fn a_masked_fill_with_a_computed_condition_fuses() {
    for fill_first in [true, false] {
        for layers in [1, 2] {
            assert_fuses(&where_filled(f32::MIN, fill_first, layers), layers, &format!("{fill_first} {layers}"));
        }
        // A fill of −5 is no mask: the fused node would add it to the scores it replaces.
        assert_left(where_filled(-5.0, fill_first, 1), "masked fill (computed condition)");
    }
}

/// GPT: `s·(keep/√D) + fill` (the scale folded into the causal keep, so the constant holds 0 and
/// `1/√D`); with `keep` false, Swin V2's `s·τ`, a per-head constant `[1, H, 1, 1]` holding one value.
fn scaled_constant(keep: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("scaled");
    let [q, k, v, _] = inputs(&mut b);
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s = b.reshape(s, &[1, H, T, T]).unwrap();
    let s = if keep {
        let inv = 1.0 / (D as f32).sqrt();
        let kv: Vec<f32> = (0..T * T).map(|f| if f % T > f / T { 0.0 } else { inv }).collect();
        let keep = b.weight("keep", &[1, 1, T, T], kv).unwrap();
        let s = bin(&mut b, s, keep, BinaryOp::Mul);
        let fv: Vec<f32> = (0..T * T).map(|f| if f % T > f / T { -1e4 } else { 0.0 }).collect();
        let fill = b.weight("fill", &[1, 1, T, T], fv).unwrap();
        bin(&mut b, s, fill, BinaryOp::Add)
    } else {
        let tau = b.weight("tau", &[1, H, 1, 1], vec![1.7; H]).unwrap();
        bin(&mut b, s, tau, BinaryOp::Mul)
    };
    finish(b, s, v)
}

#[test]
fn a_scale_folded_into_a_constant_of_the_scores_fuses() {
    for keep in [true, false] {
        assert_fuses(&scaled_constant(keep), 1, &format!("keep {keep}"));
    }
}

/// CaiT's talking heads: the scores `[H, T, T]` mixed across heads by a pointwise convolution
/// before the softmax fuse (`Sdpa`'s `mix_pre`; every mixing form: `fuse_talking.rs`).
#[test]
fn talking_heads_fuse() {
    let mut b = ModelBuilder::new("talking");
    let [q, k, v, _] = inputs(&mut b);
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s = b.reshape(s, &[H, 1, T * T]).unwrap();
    let w = b.weight("mix", &[H, H, 1, 1], Rng::new(3).vec(H * H, 1.0)).unwrap();
    let proj = Proj { w, b: None };
    let mixed = op(&mut b, |y| {
        Op::Conv2d(Conv2d {
            x: s,
            proj,
            stride: [1, 1],
            pad: [0; 4],
            dilation: [1, 1],
            groups: 1,
            act: Activation::None,
            clamp: None,
            residual: None,
            y,
        })
    });
    let s = b.reshape(mixed, &[1, H, T, T]).unwrap();
    assert_fuses(&finish(b, s, v), 1, "talking heads");
}

/// SHViT and EfficientViT (MSRA): the scores viewed through a chain that splits and merges the
/// key axis, and the weights transposed and multiplied from the left by values `[H, D, T]`
/// (`v @ attnᵀ`, through views that split the keys again).
#[test]
fn transposed_weights_after_a_chain_of_views_fuse() {
    let mut b = ModelBuilder::new("transposed");
    let [q, k, _, _] = inputs(&mut b);
    let v = b.input("v_cf", &[H, D, T]).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s = b.reshape(s, &[H, T, 2, T / 2]).unwrap();
    let s = b.reshape(s, &[H, T, T]).unwrap();
    let scale = scalar(&mut b, "scale", 0.5);
    let s = bin(&mut b, s, scale, BinaryOp::Mul);
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let pt = op(&mut b, |y| Op::Transpose(Transpose { x: p, perm: [0, 2, 1, 3, 4, 5, 0, 0], y }));
    let pt = b.reshape(pt, &[H, 2, T / 2, T]).unwrap();
    let pt = b.reshape(pt, &[H, T, T]).unwrap();
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: v, b: pt, transpose_b: false, y }));
    b.output(o);
    assert_fuses(&b, 1, "transposed weights");
}

/// Swin's shifted windows: scores `[W, H, T, T]` plus a relative-position bias `[1, H, T, T]` and
/// a window mask `[W, 1, T, T]` (−100 between regions), broadcast over the heads but not the
/// windows: stored at every (window, head)'s size.
#[test]
fn a_constant_broadcast_over_heads_but_not_windows_fuses() {
    const W: usize = 2;
    let mut b = ModelBuilder::new("windows");
    let q = b.input("q", &[W * H, T, D]).unwrap();
    let k = b.input("k", &[W * H, T, D]).unwrap();
    let v = b.input("v", &[W * H, T, D]).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s = b.reshape(s, &[W, H, T, T]).unwrap();
    let rpb = b.weight("rpb", &[1, H, T, T], Rng::new(7).vec(H * T * T, 1.0)).unwrap();
    let s = bin(&mut b, s, rpb, BinaryOp::Add);
    let mask: Vec<f32> =
        (0..W * T * T).map(|f| if f / (T * T) == 1 && (f / T % T < 3) != (f % T < 3) { -100.0 } else { 0.0 }).collect();
    let mask = b.weight("mask", &[W, 1, T, T], mask).unwrap();
    let s = bin(&mut b, s, mask, BinaryOp::Add);
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let p3 = b.reshape(p, &[W * H, T, T]).unwrap();
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p3, b: v, transpose_b: false, y }));
    b.output(o);
    assert_fuses(&b, 1, "windows");
}

/// XGLM's dynamo export: values `[H, D, T]` transposed by the product (`weights · vᵀ`).
#[test]
fn values_transposed_by_the_product_fuse() {
    let mut b = ModelBuilder::new("values_t");
    let [q, k, _, _] = inputs(&mut b);
    let v = b.input("v_cf", &[H, D, T]).unwrap();
    let s = scores(&mut b, q, k);
    let s = b.reshape(s, &[H, T, T]).unwrap();
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: true, y }));
    b.output(o);
    assert_fuses(&b, 1, "values transposed");
}
