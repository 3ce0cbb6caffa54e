//! The channels-first passes of `kestrel_rt::fuse`: a layer norm between transposes to and from
//! channels-last becomes one channels-first `LayerNorm`, and a constant per-channel scale after a
//! convolution or a dense layer is folded into its weights; the fused model computes what the
//! original did, and look-alikes that are not these patterns are left alone.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::fuse::{fuse, FusionReport};
use kestrel_rt::{Input, Model, ModelBuilder};

const C: usize = 6;
const H: usize = 3;
/// As many columns as channels: a constant along W has C values without being per channel.
const W: usize = 6;

/// How a test block is written.
#[derive(Clone, Copy, Debug)]
struct Spelling {
    /// The transposes: `[0, 2, 3, 1]` and back (timm), or `[0, 3, 2, 1]` twice (spatial axes
    /// swapped too), or a block on `[C, H, W]` with `[1, 2, 0]` and `[2, 0, 1]`.
    perm: &'static [u8],
    back: &'static [u8],
    /// The layer scale's shape: `[C, 1, 1]` or `[1, C, 1, 1]`.
    gamma_rank4: bool,
    /// The 1×1 convolution has a bias.
    bias: bool,
}

const TIMM: Spelling = Spelling { perm: &[0, 2, 3, 1], back: &[0, 3, 1, 2], gamma_rank4: false, bias: true };
const SWAPPED: Spelling = Spelling { perm: &[0, 3, 2, 1], back: &[0, 3, 2, 1], gamma_rank4: true, bias: false };
const CHW: Spelling = Spelling { perm: &[1, 2, 0], back: &[2, 0, 1], gamma_rank4: false, bias: true };

fn perm6(p: &[u8]) -> [u8; 8] {
    let mut out = [0, 1, 2, 3, 4, 5, 0, 0];
    out[..p.len()].copy_from_slice(p);
    out
}

fn transpose(b: &mut ModelBuilder, x: TensorId, p: &[u8]) -> TensorId {
    b.op(|y| Op::Transpose(Transpose { x, perm: perm6(p), y })).unwrap()
}

/// A ConvNeXt block's tail as the converter lowers it: `x` → transpose → LayerNorm (last axis)
/// → transpose back → 1×1 conv (`[C, 1, H·W]` views) → layer scale `Mul` → residual `Add`.
fn block(sp: Spelling) -> ModelBuilder {
    let mut b = ModelBuilder::new("block");
    let mut rng = Rng::new(5);
    let rank4 = sp.perm.len() == 4;
    let xd: Vec<usize> = if rank4 { vec![1, C, H, W] } else { vec![C, H, W] };
    let x = b.input("x", &xd).unwrap();
    let t = transpose(&mut b, x, sp.perm);
    let g: Vec<f32> = (0..C).map(|i| 1.0 + 0.1 * i as f32).collect();
    let gamma = b.weight("ln_gamma", &[C], g).unwrap();
    let beta = b.weight("ln_beta", &[C], rng.vec(C, 0.5)).unwrap();
    let n = b.op(|y| Op::LayerNorm(LayerNorm { x: t, gamma, beta: Some(beta), eps: 1e-6, axis: NormAxis::Last, y }));
    let back = transpose(&mut b, n.unwrap(), sp.back);
    let v = b.reshape(back, &[C, 1, H * W]).unwrap();
    let w = b.weight("pw", &[C, C, 1, 1], rng.vec(C * C, 0.5)).unwrap();
    let bias = sp.bias.then(|| b.weight("pw_bias", &[C], rng.vec(C, 0.5)).unwrap());
    let conv = b
        .op(|y| {
            Op::Conv2d(Conv2d {
                clamp: None,
                residual: None,
                x: v,
                proj: Proj { w, b: bias },
                stride: [1, 1],
                pad: [0; 4],
                dilation: [1, 1],
                groups: 1,
                act: Activation::None,
                y,
            })
        })
        .unwrap();
    let cv = b.reshape(conv, &xd).unwrap();
    let ls_dims: &[usize] = if sp.gamma_rank4 { &[1, C, 1, 1] } else { &[C, 1, 1] };
    let ls = b.weight("layer_scale", ls_dims, (0..C).map(|i| 0.5 - 0.15 * i as f32).collect()).unwrap();
    let scaled = b.op(|y| Op::Binary(Binary { a: cv, b: ls, op: BinaryOp::Mul, y })).unwrap();
    let out = b.op(|y| Op::Binary(Binary { a: scaled, b: x, op: BinaryOp::Add, y })).unwrap();
    b.output(out);
    b
}

fn run(b: &ModelBuilder) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let n = model.cpu().unwrap().input(0).unwrap().shape.numel().unwrap();
    // An offset along the positions so that the channel means differ per position.
    let x: Vec<f32> = Rng::new(11).vec(2 * n, 2.0).iter().enumerate().map(|(i, v)| v + (i % 7) as f32).collect();
    model.session(2).unwrap().run_vec(&[Input::F32(&x)]).unwrap().remove(0)
}

fn assert_same(want: &[f32], got: &[f32], what: &str) {
    assert_within(want, got, 1e-5, what);
}

fn assert_within(want: &[f32], got: &[f32], rtol: f32, what: &str) {
    let err = got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(err <= rtol * scale, "{what}: fused model differs by {err} (scale {scale})");
}

fn count(b: &ModelBuilder, f: impl Fn(&Op) -> bool) -> usize {
    b.ops().iter().filter(|o| f(o)).count()
}

fn transposes(b: &ModelBuilder) -> usize {
    count(b, |o| matches!(o, Op::Transpose(_)))
}

/// `Mul`s left in the graph: Binary nodes, and steps of element-wise chains (a scale left alone
/// may run in one pass with the activation after it).
fn muls(b: &ModelBuilder) -> usize {
    let mul_step = |s: &ChainStep| matches!(s, ChainStep::Binary { op: BinaryOp::Mul, .. });
    b.ops()
        .iter()
        .map(|o| match o {
            Op::Binary(Binary { op: BinaryOp::Mul, .. }) => 1,
            Op::Chain(c) => c.steps.as_slice().iter().filter(|s| mul_step(s)).count(),
            _ => 0,
        })
        .sum()
}

#[test]
fn a_convnext_block_loses_its_transposes_and_its_layer_scale() {
    for sp in [TIMM, SWAPPED, CHW] {
        let mut b = block(sp);
        let want = run(&b);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("layer-norm (channels-first)"), Some(&1), "{sp:?}: {report:?}");
        assert_eq!(report.fused.get("conv+scale"), Some(&1), "{sp:?}: {report:?}");
        assert!(report.rejected.is_empty(), "{sp:?}: {report:?}");
        assert_eq!((transposes(&b), muls(&b)), (0, 0), "{sp:?}: {:?}", b.ops());
        let ln: Vec<LayerNorm> = b
            .ops()
            .iter()
            .filter_map(|o| match o {
                Op::LayerNorm(l) => Some(*l),
                _ => None,
            })
            .collect();
        assert_eq!(ln.len(), 1);
        assert_eq!(ln[0].axis, NormAxis::Channels);
        assert_eq!(b.shape_of(ln[0].x).unwrap().dims(), [C as u32, H as u32, W as u32], "{sp:?}");
        assert_same(&want, &run(&b), &format!("{sp:?}"));
    }
}

/// The scaled weights replace the originals (same names, the constant gone from the file).
#[test]
fn the_layer_scale_is_folded_into_the_weight_rows_and_the_bias() {
    let mut b = block(TIMM);
    fuse(&mut b);
    let conv = conv_of(&b);
    let orig = block(TIMM);
    let old_w = orig.weight_values(conv_of(&orig).proj.w).unwrap().to_vec();
    let old_b = orig.weight_values(conv_of(&orig).proj.b.unwrap()).unwrap().to_vec();
    let w = b.weight_values(conv.proj.w).unwrap();
    let bias = b.weight_values(conv.proj.b.unwrap()).unwrap();
    for o in 0..C {
        let g = 0.5 - 0.15 * o as f32;
        for i in 0..C {
            assert_eq!(w[o * C + i], old_w[o * C + i] * g);
        }
        assert_eq!(bias[o], old_b[o] * g);
    }
    assert_eq!(b.tensor_name(conv.proj.w), Some("pw"));
    let bytes = kestrel_rt::format::aligned_copy(&b.build().unwrap());
    let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
    let names: Vec<String> = (0..f.tensor_count()).map(|i| f.tensor(i).unwrap().name.to_string()).collect();
    assert!(!names.iter().any(|n| n == "layer_scale"), "{names:?}");
}

fn conv_of(b: &ModelBuilder) -> Conv2d {
    b.ops()
        .iter()
        .find_map(|o| match o {
            Op::Conv2d(c) => Some(*c),
            _ => None,
        })
        .unwrap()
}

/// Replaces node `i` of `b` by `op` (same output), for building look-alikes from [`block`].
fn with_node(mut b: ModelBuilder, i: usize, op: Op) -> ModelBuilder {
    let region = kestrel_rt::builder::Region { nodes: vec![i], inputs: vec![], output: b.ops()[i].output() };
    b.replace(&region, vec![op]).unwrap();
    b
}

fn fused(b: ModelBuilder) -> (ModelBuilder, FusionReport) {
    fused_within(b, 1e-5)
}

/// [`fuse`], checking the model computes what it did within `rtol` of the output scale (f32
/// rounding; f16 weights round scaled rows differently, within f16's precision).
fn fused_within(mut b: ModelBuilder, rtol: f32) -> (ModelBuilder, FusionReport) {
    let want = run(&b);
    let report = fuse(&mut b);
    assert_within(&want, &run(&b), rtol, "fused");
    // A look-alike is turned down by the matchers, not by the numerical check.
    assert!(report.rejected.is_empty(), "{report:?}");
    (b, report)
}

/// `x [1, C, S, S]` → transpose `perm` → LayerNorm (last axis) → transpose `back` → output.
fn ln_between(perm: &[u8], back: &[u8], lead: usize) -> ModelBuilder {
    let mut b = ModelBuilder::new("ln");
    let x = b.input("x", &[lead, C, 4, 4]).unwrap();
    let t = transpose(&mut b, x, perm);
    let d = b.shape_of(t).unwrap().dims()[3] as usize;
    let gamma = b.weight("g", &[d], (0..d).map(|i| 1.0 + 0.1 * i as f32).collect()).unwrap();
    let n = b.op(|y| Op::LayerNorm(LayerNorm { x: t, gamma, beta: None, eps: 1e-6, axis: NormAxis::Last, y })).unwrap();
    let y = transpose(&mut b, n, back);
    b.output(y);
    b
}

#[test]
fn transposes_that_are_not_each_others_inverse_are_left_alone() {
    let (b, report) = fused(ln_between(&[0, 2, 3, 1], &[0, 3, 1, 2], 1));
    assert_eq!((transposes(&b), report.fused.get("layer-norm (channels-first)")), (0, Some(&1)));
    // [0, 2, 3, 1] then [0, 3, 2, 1]: not the way back (H and W end up swapped).
    let (b, report) = fused(ln_between(&[0, 2, 3, 1], &[0, 3, 2, 1], 1));
    assert_eq!((transposes(&b), report.fused.get("layer-norm (channels-first)")), (2, None));
    // [0, 1, 3, 2] twice: the norm runs over H, not the channels, which lie before it.
    let (b, report) = fused(ln_between(&[0, 1, 3, 2], &[0, 1, 3, 2], 1));
    assert_eq!((transposes(&b), report.fused.get("layer-norm (channels-first)")), (2, None));
    // x [2, C, S, S]: two maps per sample, not one [C, S…].
    let (b, report) = fused(ln_between(&[0, 2, 3, 1], &[0, 3, 1, 2], 2));
    assert_eq!((transposes(&b), report.fused.get("layer-norm (channels-first)")), (2, None));
}

#[test]
fn a_transposed_map_read_elsewhere_is_left_alone() {
    // The channels-last map is also a graph output.
    let mut b = block(TIMM);
    let t = b.ops()[0].output();
    b.output(t);
    let (b, report) = fused(b);
    assert_eq!(transposes(&b), 2, "{report:?}");
    // The normalised map is read by something else too.
    let mut b = ln_between(&[0, 2, 3, 1], &[0, 3, 1, 2], 1);
    let n = b.ops()[1].output();
    b.output(n);
    let (b, report) = fused(b);
    assert_eq!(transposes(&b), 2, "{report:?}");
}

#[test]
fn a_scale_that_is_not_per_channel_or_after_an_activation_is_left_alone() {
    // C values along W: not one value per output channel.
    let b = block(TIMM);
    let mul = b.ops().iter().position(|o| matches!(o, Op::Binary(Binary { op: BinaryOp::Mul, .. }))).unwrap();
    let Op::Binary(m) = b.ops()[mul] else { panic!() };
    let mut b = b;
    let along_w = b.weight("along_w", &[W], (0..W).map(|i| 0.5 + i as f32).collect()).unwrap();
    let b = with_node(b, mul, Op::Binary(Binary { b: along_w, ..m }));
    let (b, report) = fused(b);
    assert_eq!(muls(&b), 1, "{report:?}");
    assert_eq!(report.fused.get("conv+scale"), None);
    // A scalar: not a layer scale, but a scale the affine fold takes into the convolution's
    // weights (an activation-free layer), checked numerically like every rewrite.
    let mut b = block(TIMM);
    let s = b.weight("s", &[1], vec![0.25]).unwrap();
    let b = with_node(b, mul, Op::Binary(Binary { b: s, ..m }));
    let (b, report) = fused(b);
    assert_eq!((muls(&b), report.fused.get("conv+scale")), (0, Some(&1)), "{report:?}");
    // After a fused activation: γ·gelu(z) is not gelu(γ·z).
    let b = block(TIMM);
    let conv = b.ops().iter().position(|o| matches!(o, Op::Conv2d(_))).unwrap();
    let c = conv_of(&b);
    let b = with_node(b, conv, Op::Conv2d(Conv2d { act: Activation::Gelu, ..c }));
    let (b, report) = fused(b);
    assert_eq!(muls(&b), 1, "{report:?} {:?}", b.ops());
    // The conv output read by something else too.
    let mut b = block(TIMM);
    b.output(c.y);
    let (b, _) = fused(b);
    assert_eq!(muls(&b), 1);
}

/// x [T, K] → Dense → Mul by `[N]` (or `[1, N]`) → Dense with the rows scaled; a `[T, 1]`
/// constant (per token, not per feature; T = N here) stays a Mul.
#[test]
fn a_dense_layer_takes_a_per_feature_scale_and_not_a_per_token_one() {
    let dense = |scale_dims: &[usize], dtype: DType, g: f32| {
        let mut b = ModelBuilder::new("dense");
        b.set_weight_dtype(dtype);
        let mut rng = Rng::new(8);
        let x = b.input("x", &[8, 16]).unwrap();
        let w = b.weight("w", &[8, 16], rng.vec(128, 0.5)).unwrap();
        let bias = b.weight_as("bias", &[8], rng.vec(8, 0.5), DType::F32).unwrap();
        let d = b
            .op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b: Some(bias) }, act: Activation::None, y }))
            .unwrap();
        let n: usize = scale_dims.iter().product();
        let s = b.weight_as("s", scale_dims, (0..n).map(|i| g * (1.0 + 0.25 * i as f32)).collect(), DType::F32);
        let s = s.unwrap();
        let m = b.op(|y| Op::Binary(Binary { a: s, b: d, op: BinaryOp::Mul, y })).unwrap();
        let r = b.op(|y| Op::Unary(Unary { x: m, op: UnaryOp::Relu, y })).unwrap();
        b.output(r);
        b
    };
    for dims in [&[8usize][..], &[1, 8]] {
        let (b, report) = fused(dense(dims, DType::F32, 0.5));
        assert_eq!(report.fused.get("dense+scale"), Some(&1), "{dims:?}: {report:?}");
        // With the Mul gone the ReLU fuses into the Dense too.
        assert_eq!(b.ops().len(), 1, "{dims:?}: {:?}", b.ops());
    }
    let (b, report) = fused(dense(&[8, 1], DType::F32, 0.5));
    assert_eq!((muls(&b), report.fused.get("dense+scale")), (1, None));
    // int8 rows have their own scales: folding is exact, and done.
    let (b, report) = fused(dense(&[8], DType::I8, 0.5));
    assert_eq!(report.fused.get("dense+scale"), Some(&1), "{report:?}");
    assert_eq!(b.ops().len(), 1);
    // f16: a layer scale of 1e-6 would push the rows below f16's range: not folded. One of 0.5
    // folds, and the folded weight stays f16.
    let (b, report) = fused_within(dense(&[8], DType::F16, 1e-6), 2e-3);
    assert_eq!((muls(&b), report.fused.get("dense+scale")), (1, None));
    let (b, report) = fused_within(dense(&[8], DType::F16, 0.5), 2e-3);
    assert_eq!(report.fused.get("dense+scale"), Some(&1), "{report:?}");
    let Op::Dense(d) = b.ops()[0] else { panic!("{:?}", b.ops()) };
    assert_eq!(b.weight_dtype(d.proj.w), Some(DType::F16));
}

/// Two dense heads summed then halved (a distilled ViT's output): the half goes into both
/// heads' weights and biases and the Mul is gone. Not when a head has an activation, when the
/// constant is not one value, or when a head's output is read elsewhere.
#[test]
fn a_scalar_after_two_summed_dense_layers_goes_into_their_weights() {
    let heads = |act: Activation, scale: &[f32], escape: bool| {
        let mut b = ModelBuilder::new("heads");
        let mut rng = Rng::new(9);
        let x = b.input("x", &[2, 12]).unwrap();
        let mut head = |b: &mut ModelBuilder, name: &str, act| {
            let w = b.weight(name, &[5, 12], rng.vec(60, 0.5)).unwrap();
            let bias = b.weight_as(&format!("{name}_b"), &[5], rng.vec(5, 0.5), DType::F32).unwrap();
            b.op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b: Some(bias) }, act, y })).unwrap()
        };
        let h1 = head(&mut b, "head", act);
        let h2 = head(&mut b, "head_dist", Activation::None);
        let s = b.op(|y| Op::Binary(Binary { a: h1, b: h2, op: BinaryOp::Add, y })).unwrap();
        let c = b.weight_as("half", &[scale.len()], scale.to_vec(), DType::F32).unwrap();
        let m = b.op(|y| Op::Binary(Binary { a: s, b: c, op: BinaryOp::Mul, y })).unwrap();
        b.output(m);
        if escape {
            b.output(h2);
        }
        b
    };
    let want = run(&heads(Activation::None, &[0.5], false));
    let (b, report) = fused(heads(Activation::None, &[0.5], false));
    assert_eq!(report.fused.get("scale into summed dense layers"), Some(&1), "{report:?}");
    assert_eq!((muls(&b), b.ops().len()), (0, 3), "{:?}", b.ops());
    assert_same(&want, &run(&b), "halved heads");
    for (act, scale, escape) in [
        (Activation::Relu, &[0.5f32][..], false),
        (Activation::None, &[0.5, 0.25, 1.0, 2.0, 0.5], false),
        (Activation::None, &[0.5], true),
    ] {
        let (b, report) = fused(heads(act, scale, escape));
        assert_eq!(
            (muls(&b), report.fused.get("scale into summed dense layers")),
            (1, None),
            "{act:?} {scale:?} {escape}"
        );
    }
}
