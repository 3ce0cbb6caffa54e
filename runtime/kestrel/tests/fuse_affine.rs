//! Affine steps after a layer folded into it: a scalar or per-channel `Mul`, `Div`, `Add` or
//! `Sub` by a constant after an activation-free `Dense` or `Conv2d` becomes its weights' scale or
//! its bias (`channels.rs`, `pointwise.rs`, `elementwise.rs`), checked on random chains
//! (proptest) against the unfused graph; a zero scale, which would change what 0·∞ gives, is
//! not folded.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::fuse;
use kestrel_rt::{Input, Model, ModelBuilder};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
struct Step {
    op: BinaryOp,
    per_channel: bool,
    c_first: bool,
}

fn any_step() -> impl Strategy<Value = Step> {
    (0..4usize, any::<bool>(), any::<bool>()).prop_map(|(i, per_channel, c_first)| {
        let op = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div][i];
        // A constant on the left folds only for the commutative two (c − x and c / x are not
        // affine in x's bias or scale this way); those stay right.
        Step { op, per_channel, c_first: c_first && matches!(op, BinaryOp::Add | BinaryOp::Mul) }
    })
}

/// `x` → a Dense `[6, 8] → [6, 5]` or a Conv2d `[3, 6, 6] → [4, 6, 6]` (bias or not) → `steps`.
fn graph(conv: bool, bias: bool, steps: &[Step], seed: u64) -> (ModelBuilder, usize) {
    let mut b = ModelBuilder::new("affine");
    let mut rng = Rng::new(seed);
    let (mut t, channels, cdims, n) = if conv {
        let x = b.input("x", &[3, 6, 6]).unwrap();
        let w = b.weight("w", &[4, 3, 3, 3], rng.vec(108, 0.4)).unwrap();
        let bb = bias.then(|| b.weight("b", &[4], rng.vec(4, 0.3)).unwrap());
        let y = b
            .op(|y| {
                Op::Conv2d(Conv2d {
                    x,
                    proj: Proj { w, b: bb },
                    stride: [1, 1],
                    pad: [1; 4],
                    dilation: [1, 1],
                    groups: 1,
                    act: Activation::None,
                    clamp: None,
                    residual: None,
                    y,
                })
            })
            .unwrap();
        (y, 4, vec![4, 1, 1], 108)
    } else {
        let x = b.input("x", &[6, 8]).unwrap();
        let w = b.weight("w", &[5, 8], rng.vec(40, 0.4)).unwrap();
        let bb = bias.then(|| b.weight("b", &[5], rng.vec(5, 0.3)).unwrap());
        let y =
            b.op(|y| Op::Dense(Dense { x, proj: Proj { w, b: bb }, act: Activation::None, clamp: None, y })).unwrap();
        (y, 5, vec![5], 48)
    };
    for (k, s) in steps.iter().enumerate() {
        let (dims, len): (&[usize], usize) = if s.per_channel { (&cdims, channels) } else { (&[1], 1) };
        // Magnitudes in [0.5, 2) of either sign: no division by 0, no zero scale.
        let vals: Vec<f32> = rng.vec(len, 1.0).into_iter().map(|v| v.signum() * (0.5 + 1.5 * v.abs())).collect();
        let c = b.weight(&format!("c{k}"), dims, vals).unwrap();
        let (a, bb) = if s.c_first { (c, t) } else { (t, c) };
        t = b.op(|y| Op::Binary(Binary { a, b: bb, op: s.op, y })).unwrap();
    }
    b.output(t);
    (b, n)
}

fn run(b: &ModelBuilder, x: &[f32]) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    model.session(2).unwrap().run_vec(&[Input::F32(x)]).unwrap().remove(0)
}

fn close(got: &[f32], want: &[f32]) -> bool {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1e-5 * scale + 1e-5 * w.abs())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any run of 1 to 5 scalar or per-channel Add/Sub/Mul/Div by constants after an
    /// activation-free Dense or Conv2d folds into it: no Binary is left, and the output is the
    /// unfused graph's.
    #[test]
    fn affine_steps_after_a_layer_fold_into_it(
        steps in prop::collection::vec(any_step(), 1..6),
        conv in any::<bool>(),
        bias in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let (mut b, n) = graph(conv, bias, &steps, seed);
        let x = Rng::new(seed + 7).vec(2 * n, 2.0);
        let want = run(&b, &x);
        let report = fuse(&mut b);
        let got = run(&b, &x);
        prop_assert!(close(&got, &want), "{steps:?}: {got:?} vs {want:?}");
        let left: Vec<&Op> = b.ops().iter().filter(|o| !matches!(o, Op::Dense(_) | Op::Conv2d(_) | Op::Reshape(_))).collect();
        prop_assert!(left.is_empty(), "{:?} {:?} {:?}", steps, report, left);
    }
}

/// A zero scale is not folded (0·∞ is NaN after a layer that overflowed, 0 in its weights), and
/// the layer's overflow comes out as it did.
#[test]
fn a_zero_scale_is_left_alone() {
    let mut b = ModelBuilder::new("zero");
    let x = b.input("x", &[4]).unwrap();
    let w = b.weight("w", &[2, 4], vec![10.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]).unwrap();
    let d = b.op(|y| Op::Dense(Dense { x, proj: Proj { w, b: None }, act: Activation::None, clamp: None, y })).unwrap();
    let z = b.weight("z", &[2], vec![0.0, 2.0]).unwrap();
    let m = b.op(|y| Op::Binary(Binary { a: d, b: z, op: BinaryOp::Mul, y })).unwrap();
    b.output(m);
    // Row 0 overflows to ∞ (3e38 · 10), which the zero scale makes NaN.
    let x = [3e38, 1.0, 0.0, 0.0];
    let want = run(&b, &x[..]);
    assert!(want[0].is_nan() && want[1] == 2.0, "{want:?}");
    let report = fuse(&mut b);
    assert!(report.fused.is_empty(), "{report:?}");
    let got = run(&b, &x[..]);
    assert!(got[0].is_nan() && got[1] == 2.0, "{got:?}");
}
