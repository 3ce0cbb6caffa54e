//! `Sdpa` fusion of talking-heads attention (issue 33, item 4: CaiT's `TalkingHeadAttn`,
//! EfficientFormerV2's `talking_head1`/`talking_head2`), as the ONNX converter writes it: each
//! mixing a pointwise `Conv2d` over the scores viewed `[H, 1, T·T]` between reshape views, before
//! the softmax (scores scaled and biased behind it, a scale between it and the softmax), after it,
//! or both; 1 to 4 heads, grouped key heads, constant and computed biases. Each fuses to one
//! `Sdpa` node with `mix_pre`/`mix_post` computing what the graph did on seeded random inputs;
//! mixings the node does not take (a bias between the mixing and the softmax, a mixing with an
//! activation) are reported with their reason.

use crate::common_fuse;

use common_fuse::{binary, fuses_to, op};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::ModelBuilder;

const T: usize = 5;
const D: usize = 4;
const DV: usize = 3;

/// How the block is written.
#[derive(Clone, Copy, Debug)]
struct Form {
    /// Query heads (the mixing's channels).
    heads: usize,
    /// Key/value heads (`heads` a multiple; grouped when fewer, a broadcast product).
    kv_heads: usize,
    pre: bool,
    post: bool,
    /// 0 none, 1 a constant `[H, T, T]` (EfficientFormerV2's attention biases), 2 an input `[T, T]`.
    bias: u8,
    /// A scale between the mixing and the softmax.
    scale_after: bool,
    /// The pre-softmax mixing followed by a ReLU (not taken).
    act: bool,
    /// A bias added between the mixing and the softmax (not taken).
    bias_after: bool,
}

const PLAIN: Form =
    Form { heads: 4, kv_heads: 4, pre: true, post: true, bias: 0, scale_after: false, act: false, bias_after: false };

/// A pointwise mixing of `h` heads of `[h, T, T]` scores (viewed `[h, 1, T·T]` and back).
fn mixing(b: &mut ModelBuilder, rng: &mut Rng, x: TensorId, h: usize, act: Activation) -> TensorId {
    let v = b.reshape(x, &[h, 1, T * T]).unwrap();
    let w = b.weight_as("mix_w", &[h, h, 1, 1], rng.vec(h * h, 0.8), DType::F32).unwrap();
    let c = b.weight_as("mix_b", &[h], rng.vec(h, 0.5), DType::F32).unwrap();
    let m = op(b, |y| {
        Op::Conv2d(Conv2d {
            x: v,
            proj: Proj { w, b: Some(c) },
            stride: [1, 1],
            pad: [0; 4],
            dilation: [1, 1],
            groups: 1,
            act,
            clamp: None,
            residual: None,
            y,
        })
    });
    b.reshape(m, &[h, T, T]).unwrap()
}

/// The block: `q [H, T, D]` (grouped: `[Hk, H/Hk, T, D]` beside keys and values `[Hk, 1, T, ..]`),
/// scores `q·kᵀ · 0.4`, the bias, the mixings around the softmax, the product with values.
fn block(f: Form) -> ModelBuilder {
    let mut b = ModelBuilder::new("talking");
    let mut rng = Rng::new(7);
    let (h, hk) = (f.heads, f.kv_heads);
    let (qd, kd, vd) = if hk == h {
        (vec![h, T, D], vec![h, T, D], vec![h, T, DV])
    } else {
        (vec![hk, h / hk, T, D], vec![hk, 1, T, D], vec![hk, 1, T, DV])
    };
    let q = b.input("q", &qd).unwrap();
    let k = b.input("k", &kd).unwrap();
    let v = b.input("v", &vd).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s = b.reshape(s, &[h, T, T]).unwrap();
    let c = b.weight_as("scale", &[1], vec![0.4], DType::F32).unwrap();
    let mut s = binary(&mut b, s, c, BinaryOp::Mul);
    match f.bias {
        1 => {
            let t = b.weight_as("bias", &[h, T, T], rng.vec(h * T * T, 1.0), DType::F32).unwrap();
            s = binary(&mut b, s, t, BinaryOp::Add);
        }
        2 => {
            let t = b.input("mask", &[T, T]).unwrap();
            s = binary(&mut b, s, t, BinaryOp::Add);
        }
        _ => {}
    }
    if f.pre {
        let act = if f.act { Activation::Relu } else { Activation::None };
        s = mixing(&mut b, &mut rng, s, h, act);
    }
    if f.bias_after {
        let t = b.weight_as("late_bias", &[h, T, T], rng.vec(h * T * T, 1.0), DType::F32).unwrap();
        s = binary(&mut b, s, t, BinaryOp::Add);
    }
    if f.scale_after {
        let c = b.weight_as("late_scale", &[1], vec![1.5], DType::F32).unwrap();
        s = binary(&mut b, s, c, BinaryOp::Mul);
    }
    let mut w = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    if f.post {
        w = mixing(&mut b, &mut rng, w, h, Activation::None);
    }
    if hk != h {
        w = b.reshape(w, &[hk, h / hk, T, T]).unwrap();
    }
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: w, b: v, transpose_b: false, y }));
    b.output(o);
    b
}

/// Fuses a copy of the block to one `Sdpa` node ([`fuses_to`]) with the mixings `f` asks for and
/// no convolution left.
fn fuses(f: Form) {
    let fused = fuses_to(&block(f), 1);
    let nodes: Vec<Sdpa> =
        fused.ops().iter().filter_map(|o| if let Op::Sdpa(s) = o { Some(*s) } else { None }).collect();
    assert_eq!((nodes[0].mix_pre.is_some(), nodes[0].mix_post.is_some()), (f.pre, f.post), "{f:?}");
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Conv2d(_))), "{f:?}: {:?}", fused.ops());
}

/// Leaves the block unfused ([`common_fuse::reported`]: its one report's reason contains `why`).
fn reported(f: Form, why: &str) {
    common_fuse::reported(&block(f), why);
}

#[test]
fn mixings_before_and_after_the_softmax_fuse() {
    for (pre, post) in [(true, true), (true, false), (false, true)] {
        for heads in [1, 3, 4] {
            fuses(Form { heads, kv_heads: heads, pre, post, ..PLAIN });
        }
    }
}

/// EfficientFormerV2's form: a constant bias per head behind the mixing; an input mask; a scale
/// between the mixing and the softmax (taken into the mixing).
#[test]
fn biases_and_scales_around_the_mixing_fuse() {
    fuses(Form { bias: 1, ..PLAIN });
    fuses(Form { bias: 2, post: false, ..PLAIN });
    fuses(Form { scale_after: true, bias: 1, ..PLAIN });
}

#[test]
fn grouped_key_heads_fuse() {
    fuses(Form { kv_heads: 2, ..PLAIN });
    fuses(Form { kv_heads: 1, heads: 3, pre: false, ..PLAIN });
}

#[test]
fn mixings_the_node_does_not_take_are_reported() {
    reported(Form { act: true, post: false, ..PLAIN }, "followed by an activation");
    reported(Form { bias_after: true, ..PLAIN }, "between the head mixing and the softmax");
}

/// More query heads than the GPU kernel mixes (16): the wgpu session refuses the fused model with
/// the reason, and AUTO places it on the CPU, saying why.
#[cfg(feature = "gpu")]
#[test]
fn the_gpu_refuses_more_heads_than_it_mixes_and_auto_takes_the_cpu() {
    use kestrel_rt::backend::{place, Backend, Placement, Request};
    if !crate::common_gpu::have_gpu() {
        return;
    }
    let fused = fuses_to(&block(Form { heads: 17, kv_heads: 17, ..PLAIN }), 1);
    let owned = kestrel_rt::Model::from_bytes(&fused.build().unwrap()).unwrap();
    let cpu = owned.cpu().unwrap();
    let want = "Sdpa with talking heads over 17 query heads (the GPU kernel mixes at most 16)";
    let r = Request { backend: Backend::Wgpu, adapter: Some("0"), ..Default::default() };
    match place(&r, &cpu, 1) {
        Err(why) => assert!(why.to_string().contains(want), "{why}"),
        Ok(_) => panic!("WGPU took 17 talking heads"),
    }
    let r = Request { backend: Backend::Auto, adapter: Some("0"), ..Default::default() };
    match place(&r, &cpu, 1) {
        Ok(Placement::Cpu { fallback: Some(why) }) => assert!(why.to_string().contains(want), "{why}"),
        _ => panic!("AUTO did not fall back to the CPU with the reason"),
    }
}
