//! Fusion passes: each pattern fuses in every spelling we know, the fused model computes the
//! same outputs, and a replacement that is wrong is rejected by the numerical check.

use kestrel::demo::Rng;
use kestrel::format::ops::*;
use kestrel::fuse::fuse;
use kestrel::{Input, Model, ModelBuilder};

fn scalar(b: &mut ModelBuilder, name: &str, v: f32) -> TensorId {
    b.weight(name, &[1], vec![v]).unwrap()
}

/// x [6, 8] → Dense → GELU spelled out → Dense → Relu → output.
fn mlp(order_half_first: bool, divide: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("mlp");
    let mut rng = Rng::new(3);
    let x = b.input("x", &[6, 8]).unwrap();
    let w1 = b.weight("w1", &[16, 8], rng.vec(128, 0.4)).unwrap();
    let b1 = b.weight("b1", &[16], rng.vec(16, 0.1)).unwrap();
    let h = b.op(|y| Op::Dense(Dense { x, proj: Proj { w: w1, b: Some(b1) }, act: Activation::None, y })).unwrap();
    let c = if divide {
        scalar(&mut b, "sqrt2", std::f32::consts::SQRT_2)
    } else {
        scalar(&mut b, "inv_sqrt2", std::f32::consts::FRAC_1_SQRT_2)
    };
    let op = if divide { BinaryOp::Div } else { BinaryOp::Mul };
    let s = b.op(|y| Op::Binary(Binary { a: h, b: c, op, y })).unwrap();
    let e = b.op(|y| Op::Unary(Unary { x: s, op: UnaryOp::Erf, y })).unwrap();
    let one = scalar(&mut b, "one", 1.0);
    let a = b.op(|y| Op::Binary(Binary { a: one, b: e, op: BinaryOp::Add, y })).unwrap();
    let half = scalar(&mut b, "half", 0.5);
    let g = if order_half_first {
        let hx = b.op(|y| Op::Binary(Binary { a: h, b: half, op: BinaryOp::Mul, y })).unwrap();
        b.op(|y| Op::Binary(Binary { a: hx, b: a, op: BinaryOp::Mul, y })).unwrap()
    } else {
        let m = b.op(|y| Op::Binary(Binary { a, b: h, op: BinaryOp::Mul, y })).unwrap();
        b.op(|y| Op::Binary(Binary { a: m, b: half, op: BinaryOp::Mul, y })).unwrap()
    };
    let w2 = b.weight("w2", &[4, 16], rng.vec(64, 0.4)).unwrap();
    let o = b.op(|y| Op::Dense(Dense { x: g, proj: Proj { w: w2, b: None }, act: Activation::None, y })).unwrap();
    let r = b.op(|y| Op::Unary(Unary { x: o, op: UnaryOp::Relu, y })).unwrap();
    b.output(r);
    b
}

fn run(b: &ModelBuilder) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let x = Rng::new(9).vec(2 * 48, 2.0);
    model.session(2).unwrap().run_vec(&[Input::F32(&x)]).unwrap().remove(0)
}

#[test]
fn gelu_and_dense_activations_fuse_in_every_spelling() {
    for (half_first, divide) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut b = mlp(half_first, divide);
        let want = run(&b);
        assert_eq!(b.ops().len(), 8);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("gelu(erf)"), Some(&1), "{report:?}");
        assert_eq!(report.fused.get("dense+activation"), Some(&2), "{report:?}");
        assert!(report.rejected.is_empty(), "{report:?}");
        let acts: Vec<Activation> = b
            .ops()
            .iter()
            .map(|o| match o {
                Op::Dense(d) => d.act,
                other => panic!("unfused node {other:?}"),
            })
            .collect();
        assert_eq!(acts, vec![Activation::Gelu, Activation::Relu]);
        let got = run(&b);
        let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(err <= 1e-5 * scale, "fused model differs by {err} (scale {scale})");
        // The compacted file drops the constants the pattern used.
        let names: Vec<String> = {
            let bytes = kestrel::format::aligned_copy(&b.build().unwrap());
            let f = kestrel::format::KesFile::parse(&bytes).unwrap();
            (0..f.tensor_count()).map(|i| f.tensor(i).unwrap().name.to_string()).collect()
        };
        assert!(!names.iter().any(|n| n == "half" || n == "one" || n.contains("sqrt2")), "{names:?}");
    }
}

#[test]
fn a_lookalike_with_the_wrong_constant_is_left_alone() {
    let mut b = ModelBuilder::new("lookalike");
    let x = b.input("x", &[4]).unwrap();
    let c = scalar(&mut b, "c", 0.8);
    let s = b.op(|y| Op::Binary(Binary { a: x, b: c, op: BinaryOp::Mul, y })).unwrap();
    let e = b.op(|y| Op::Unary(Unary { x: s, op: UnaryOp::Erf, y })).unwrap();
    let one = scalar(&mut b, "one", 1.0);
    let a = b.op(|y| Op::Binary(Binary { a: e, b: one, op: BinaryOp::Add, y })).unwrap();
    let m = b.op(|y| Op::Binary(Binary { a, b: x, op: BinaryOp::Mul, y })).unwrap();
    let half = scalar(&mut b, "half", 0.5);
    let g = b.op(|y| Op::Binary(Binary { a: m, b: half, op: BinaryOp::Mul, y })).unwrap();
    b.output(g);
    let report = fuse(&mut b);
    assert!(report.fused.is_empty(), "{report:?}");
    assert_eq!(b.ops().len(), 5);
}
