//! The residual pass: `Conv2d → Add(·, r) → Relu` (a ResNet block's skip connection) becomes one
//! convolution with `r` as its residual and the ReLU as its activation, whichever operand of
//! the `Add` the convolution is and whether the skip is the block's input or another
//! convolution's output (the downsampling branch); the fused model computes the same outputs.
//! What must not fuse stays: an activation already applied before the `Add`, a broadcasting
//! `Add`, an `Add` of a constant (a bias: the bias pass's), a convolution output read twice.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::fuse;
use kestrel_rt::{Input, Model, ModelBuilder};

const C: usize = 4;
const HW: usize = 5;

fn run(b: &ModelBuilder) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let x = Rng::new(9).vec(2 * C * HW * HW, 2.0);
    model.session(2).unwrap().run_vec(&[Input::F32(&x)]).unwrap().remove(0)
}

fn conv(b: &mut ModelBuilder, rng: &mut Rng, x: u32, act: Activation) -> u32 {
    let w = b.weight("w", &[C, C, 3, 3], rng.vec(C * C * 9, 0.3)).unwrap();
    let bias = b.weight("b", &[C], rng.vec(C, 0.3)).unwrap();
    b.op(|y| {
        Op::Conv2d(Conv2d {
            x,
            proj: Proj { w, b: Some(bias) },
            stride: [1, 1],
            pad: [1; 4],
            dilation: [1, 1],
            groups: 1,
            act,
            clamp: None,
            residual: None,
            y,
        })
    })
    .unwrap()
}

fn add(b: &mut ModelBuilder, a: u32, c: u32) -> u32 {
    b.op(|y| Op::Binary(Binary { a, b: c, op: BinaryOp::Add, y })).unwrap()
}

fn relu(b: &mut ModelBuilder, x: u32) -> u32 {
    b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Relu, y })).unwrap()
}

/// `x → conv → relu → conv → Add(·, skip) → relu`, the skip the block's input or (`downsample`)
/// a third convolution of it, the convolution on the left of the `Add` or (`swap`) the right.
fn block(downsample: bool, swap: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("resblock");
    let mut rng = Rng::new(3);
    let x = b.input("x", &[C, HW, HW]).unwrap();
    let skip = if downsample { conv(&mut b, &mut rng, x, Activation::None) } else { x };
    let h = conv(&mut b, &mut rng, x, Activation::Relu);
    let h = conv(&mut b, &mut rng, h, Activation::None);
    let s = if swap { add(&mut b, skip, h) } else { add(&mut b, h, skip) };
    let y = relu(&mut b, s);
    b.output(y);
    b
}

fn names(b: &ModelBuilder) -> Vec<&'static str> {
    b.ops().iter().map(|o| o.name()).collect()
}

fn close(want: &[f32], got: &[f32]) {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = want.iter().zip(got).fold(0f32, |m, (a, g)| m.max((a - g).abs()));
    assert!(want.len() == got.len() && err <= 1e-5 * scale, "error {err:e} of {scale}");
}

#[test]
fn a_skip_connection_folds_into_the_convolution_before_it() {
    for (downsample, swap) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut b = block(downsample, swap);
        let want = run(&b);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("conv+residual"), Some(&1), "{report:?}");
        let convs = if downsample { 3 } else { 2 };
        assert_eq!(names(&b), vec!["Conv2d"; convs], "{downsample} {swap}: {:?} {report:?}", b.ops());
        // The fused node: the residual and the block's ReLU.
        let fused: Vec<Conv2d> = b
            .ops()
            .iter()
            .filter_map(|o| match o {
                Op::Conv2d(c) if c.residual.is_some() => Some(*c),
                _ => None,
            })
            .collect();
        assert_eq!(fused.len(), 1);
        assert_eq!(fused[0].act, Activation::Relu);
        close(&want, &run(&b));
    }
}

#[test]
fn what_is_not_a_residual_stays() {
    // The activation before the Add: conv → relu → Add (a pre-activation block's order).
    let mut b = ModelBuilder::new("relu first");
    let mut rng = Rng::new(4);
    let x = b.input("x", &[C, HW, HW]).unwrap();
    let h = conv(&mut b, &mut rng, x, Activation::Relu);
    let s = add(&mut b, h, x);
    b.output(s);
    // A broadcasting Add: a `[C, 1, 1]` activation (a pooled gate's shape).
    let mut b2 = ModelBuilder::new("broadcast");
    let x2 = b2.input("x", &[C, HW, HW]).unwrap();
    let h2 = conv(&mut b2, &mut rng, x2, Activation::None);
    let rows = b2.op(|y| Op::Reduce(Reduce { x: x2, op: ReduceOp::Mean, axis: 2, keep_dims: true, y })).unwrap();
    let pooled = b2.op(|y| Op::Reduce(Reduce { x: rows, op: ReduceOp::Mean, axis: 1, keep_dims: true, y })).unwrap();
    let s2 = add(&mut b2, h2, pooled);
    b2.output(s2);
    // The convolution's output read by a second node too.
    let mut b3 = ModelBuilder::new("two readers");
    let x3 = b3.input("x", &[C, HW, HW]).unwrap();
    let h3 = conv(&mut b3, &mut rng, x3, Activation::None);
    let s3 = add(&mut b3, h3, x3);
    let t3 = add(&mut b3, s3, h3);
    b3.output(t3);
    for mut b in [b, b2, b3] {
        let want = run(&b);
        let before = names(&b);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("conv+residual"), None, "{report:?}");
        assert!(b.ops().iter().all(|o| !matches!(o, Op::Conv2d(Conv2d { residual: Some(_), .. }))));
        assert_eq!(
            names(&b).iter().filter(|n| **n == "Binary").count(),
            before.iter().filter(|n| **n == "Binary").count()
        );
        close(&want, &run(&b));
    }
}
