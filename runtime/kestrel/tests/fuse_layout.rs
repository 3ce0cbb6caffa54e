//! Layout passes: chains of reshapes and transposes collapsed to one transpose (MobileViT's
//! unfold), channels-last dense layers between transposes run as 1×1 convolutions, and the bias
//! and activation after them folded in. Each fused model computes the same outputs.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::fuse;
use kestrel_rt::{Input, Model, ModelBuilder};

fn run(b: &ModelBuilder, n: usize) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let x = Rng::new(9).vec(2 * n, 2.0);
    model.session(2).unwrap().run_vec(&[Input::F32(&x)]).unwrap().remove(0)
}

fn perm(p: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a[..p.len()].copy_from_slice(p);
    a
}

fn count(b: &ModelBuilder, f: impl Fn(&Op) -> bool) -> usize {
    b.ops().iter().filter(|o| f(o)).count()
}

/// MobileViT's unfold as timm exports it: `[C, H, W]` → reshape `[C·nh, ph, nw, pw]` →
/// transpose → reshapes → two transposes → `[P, N, C]`, then a dense layer on it.
fn unfold() -> ModelBuilder {
    let (c, nh, ph, nw, pw) = (6usize, 2usize, 2usize, 3usize, 2usize);
    let mut b = ModelBuilder::new("unfold");
    let x = b.input("x", &[c, nh * ph, nw * pw]).unwrap();
    let r = |b: &mut ModelBuilder, x, d: &[usize]| b.reshape(x, d).unwrap();
    let t = |b: &mut ModelBuilder, x, p: &[u8]| b.op(|y| Op::Transpose(Transpose { x, perm: perm(p), y })).unwrap();
    let a = r(&mut b, x, &[c * nh, ph, nw, pw]);
    let a = t(&mut b, a, &[0, 2, 1, 3]); // [c·nh, nw, ph, pw]
    let a = r(&mut b, a, &[1, c, nh * nw, ph * pw]);
    let a = t(&mut b, a, &[0, 3, 1, 2]); // [1, P, C, N]
    let a = t(&mut b, a, &[0, 1, 3, 2]); // [1, P, N, C]
    let a = r(&mut b, a, &[ph * pw, nh * nw, c]);
    let mut rng = Rng::new(4);
    let w = b.weight("w", &[5, c], rng.vec(5 * c, 0.5)).unwrap();
    let y =
        b.op(|y| Op::Dense(Dense { clamp: None, x: a, proj: Proj { w, b: None }, act: Activation::None, y })).unwrap();
    b.output(y);
    b
}

#[test]
fn a_chain_of_transposes_collapses_to_one() {
    let mut b = unfold();
    let want = run(&b, 6 * 4 * 6);
    assert_eq!(count(&b, |o| matches!(o, Op::Transpose(_))), 3);
    let report = fuse(&mut b);
    assert_eq!(report.fused.get("layout chain as one transpose"), Some(&1), "{report:?}");
    assert_eq!(count(&b, |o| matches!(o, Op::Transpose(_))), 1, "{:?}", b.ops());
    assert_eq!(run(&b, 6 * 4 * 6), want, "a transpose moves values exactly");
}

/// `x [1, C, H, W]` → transpose channels last → dense (+ its bias) → transpose back → a bias
/// `[C', 1, 1]` → SiLU: a 1×1 convolution with its bias and activation.
fn channels_last_conv(bias_after: bool) -> ModelBuilder {
    let (c, h, w, o) = (5usize, 3usize, 4usize, 7usize);
    let mut b = ModelBuilder::new("nhwc");
    let mut rng = Rng::new(5);
    let x = b.input("x", &[1, c, h, w]).unwrap();
    let a = b.op(|y| Op::Transpose(Transpose { x, perm: perm(&[0, 2, 3, 1]), y })).unwrap();
    let wt = b.weight("w", &[o, c], rng.vec(o * c, 0.5)).unwrap();
    let bias = b.weight("b", &[o], rng.vec(o, 0.5)).unwrap();
    let d = b
        .op(|y| Op::Dense(Dense { clamp: None, x: a, proj: Proj { w: wt, b: Some(bias) }, act: Activation::None, y }))
        .unwrap();
    let mut t = b.op(|y| Op::Transpose(Transpose { x: d, perm: perm(&[0, 3, 1, 2]), y })).unwrap();
    if bias_after {
        let c2 = b.weight("c", &[o, 1, 1], rng.vec(o, 0.5)).unwrap();
        t = b.op(|y| Op::Binary(Binary { a: t, b: c2, op: BinaryOp::Add, y })).unwrap();
    }
    let s = b.op(|y| Op::Unary(Unary { x: t, op: UnaryOp::Silu, y })).unwrap();
    b.output(s);
    b
}

#[test]
fn a_channels_last_dense_between_transposes_runs_as_a_pointwise_conv() {
    for bias_after in [false, true] {
        let mut b = channels_last_conv(bias_after);
        let want = run(&b, 5 * 12);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("channels-last dense as 1x1 conv"), Some(&1), "{report:?}");
        assert_eq!(report.fused.get("conv+activation (after views)"), Some(&1), "{report:?}");
        let bias = report.fused.get("conv+bias (after views)").copied();
        assert_eq!(bias, bias_after.then_some(1), "{report:?}");
        let kinds: Vec<&str> = b.ops().iter().filter(|o| !matches!(o, Op::Reshape(_))).map(|o| o.name()).collect();
        assert_eq!(kinds, ["Conv2d"], "{:?}", b.ops());
        let got = run(&b, 5 * 12);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = want.iter().zip(&got).fold(0f32, |m, (a, g)| m.max((a - g).abs()));
        assert!(err <= 1e-5 * scale, "error {err:e} of {scale}");
    }
}

/// A transpose pair around a dense layer that moves an axis with a non-unit axis before it (here
/// H and W swap behind 3 channels) is no pointwise convolution: it stays, and the matcher does
/// not even attempt it.
#[test]
fn a_dense_between_other_transposes_is_left_alone() {
    let mut b = ModelBuilder::new("hw");
    let mut rng = Rng::new(6);
    let x = b.input("x", &[1, 3, 4, 5]).unwrap();
    let a = b.op(|y| Op::Transpose(Transpose { x, perm: perm(&[0, 1, 3, 2]), y })).unwrap();
    let wt = b.weight("w", &[2, 4], rng.vec(8, 0.5)).unwrap();
    let d = b
        .op(|y| Op::Dense(Dense { clamp: None, x: a, proj: Proj { w: wt, b: None }, act: Activation::None, y }))
        .unwrap();
    let t = b.op(|y| Op::Transpose(Transpose { x: d, perm: perm(&[0, 1, 3, 2]), y })).unwrap();
    b.output(t);
    let report = fuse(&mut b);
    assert_eq!(report.fused.get("channels-last dense as 1x1 conv"), None, "{report:?}");
    // Not even attempted: the matcher refuses it before the numerical check would.
    assert!(report.rejected.is_empty(), "{report:?}");
    assert_eq!(count(&b, |o| matches!(o, Op::Transpose(_))), 2);
}

/// A ViT's patch embedding as exported: `Conv2d` (kernel = stride = 4) → `[O, T]` view →
/// transpose to tokens `[T, O]` → one `PatchEmbed`; a convolution with padding is left alone.
#[test]
fn a_patchifying_conv_then_token_transpose_becomes_a_patch_embedding() {
    for pad in [0u32, 1] {
        let (c, h, w, p, o) = (3usize, 8usize, 12usize, 4usize, 5usize);
        let mut b = ModelBuilder::new("patches");
        let mut rng = Rng::new(7);
        let x = b.input("x", &[c, h, w]).unwrap();
        let wt = b.weight("w", &[o, c, p, p], rng.vec(o * c * p * p, 0.5)).unwrap();
        let bias = b.weight("b", &[o], rng.vec(o, 0.5)).unwrap();
        let y = b
            .op(|y| {
                Op::Conv2d(Conv2d {
                    clamp: None,
                    residual: None,
                    x,
                    proj: Proj { w: wt, b: Some(bias) },
                    stride: [p as u32; 2],
                    pad: [pad; 4],
                    dilation: [1, 1],
                    groups: 1,
                    act: Activation::None,
                    y,
                })
            })
            .unwrap();
        let t = b.shape_of(y).unwrap().numel().unwrap() / o;
        let flat = b.reshape(y, &[o, t]).unwrap();
        let tokens = b.op(|y| Op::Transpose(Transpose { x: flat, perm: perm(&[1, 0]), y })).unwrap();
        b.output(tokens);
        let want = run(&b, c * h * w);
        let report = fuse(&mut b);
        let fused = report.fused.get("patchifying conv as patch embedding").copied();
        assert_eq!(fused, (pad == 0).then_some(1), "{report:?}");
        assert!(report.rejected.is_empty(), "the padded conv is not even attempted: {report:?}");
        if pad == 0 {
            let kinds: Vec<&str> = b.ops().iter().filter(|o| !matches!(o, Op::Reshape(_))).map(|o| o.name()).collect();
            assert_eq!(kinds, ["PatchEmbed"], "{:?}", b.ops());
        }
        let got = run(&b, c * h * w);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = want.iter().zip(&got).fold(0f32, |m, (a, g)| m.max((a - g).abs()));
        assert!(err <= 1e-5 * scale, "error {err:e} of {scale}");
    }
}

/// A distilled ViT's tail as the converter writes it: the final LayerNorm over `[1, T, d]`, one
/// transpose (tokens last) read by two one-hot picks of tokens 0 and 1 (the class and
/// distillation tokens), a head on each, their sum. After fusion: no transpose and no product
/// for the picks, and each head's LayerNorm over its own row only.
#[test]
fn class_token_picks_become_row_slices_with_their_own_norm() {
    let (t, d) = (6usize, 8usize);
    let mut b = ModelBuilder::new("tail");
    let mut rng = Rng::new(11);
    let x = b.input("x", &[1, t, d]).unwrap();
    let gamma = b.weight("g", &[d], rng.vec(d, 1.0)).unwrap();
    let beta = Some(b.weight("b", &[d], rng.vec(d, 1.0)).unwrap());
    let n = b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps: 1e-5, axis: NormAxis::Last, y })).unwrap();
    let tr = b.op(|y| Op::Transpose(Transpose { x: n, perm: perm(&[0, 2, 1]), y })).unwrap();
    let mut heads = Vec::new();
    for token in 0..2 {
        let mut pick = vec![0.0; t];
        pick[token] = 1.0;
        let w = b.weight(&format!("pick{token}"), &[1, t], pick).unwrap();
        let s = b
            .op(|y| Op::Dense(Dense { clamp: None, x: tr, proj: Proj { w, b: None }, act: Activation::None, y }))
            .unwrap();
        let s = b.reshape(s, &[1, d]).unwrap();
        let hw = b.weight(&format!("head{token}"), &[3, d], rng.vec(3 * d, 0.5)).unwrap();
        heads.push(
            b.op(|y| Op::Dense(Dense { clamp: None, x: s, proj: Proj { w: hw, b: None }, act: Activation::None, y }))
                .unwrap(),
        );
    }
    let y = b.op(|y| Op::Binary(Binary { a: heads[0], b: heads[1], op: BinaryOp::Add, y })).unwrap();
    b.output(y);
    let want = run(&b, t * d);
    let report = fuse(&mut b);
    assert_eq!(report.fused.get("shared selection input unshared"), Some(&2), "{report:?}");
    assert_eq!(report.fused.get("row slice before layer norm"), Some(&2), "{report:?}");
    assert_eq!(count(&b, |o| matches!(o, Op::Transpose(_))), 0, "{:?}", b.ops());
    assert_eq!(count(&b, |o| matches!(o, Op::Slice(_))), 2, "{:?}", b.ops());
    for op in b.ops() {
        if let Op::LayerNorm(ln) = op {
            let rows: u32 = b.shape_of(ln.x).unwrap().dims().iter().rev().skip(1).product();
            assert_eq!(rows, 1, "each head normalises its own row: {:?}", b.ops());
        }
    }
    let got = run(&b, t * d);
    let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= 1e-5, "{err}: {got:?} vs {want:?}");
}
