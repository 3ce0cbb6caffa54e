//! Writes a MobileNet-shaped model with element-wise runs no layer can fold, fused
//! (`kestrel_rt::fuse::fuse`), to the path given: the input's per-channel normalisation (`(x −
//! mean) / std`, as exports that fold preprocessing into the model have it) before the stem, and
//! after each activated convolution a BatchNorm placed after the activation (`relu(conv(x))·γ +
//! β`) and a ReLU6 bound. With `KESTREL_FUSE_SKIP=chain` the runs stay separate nodes: the A/B
//! pair for `kestrel profile`.
//!
//! ```sh
//! cargo run --release -p kestrel-rt --example chain_ab -- after.kes
//! KESTREL_FUSE_SKIP=chain cargo run --release -p kestrel-rt --example chain_ab -- before.kes
//! ```

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::ModelBuilder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).ok_or("usage: chain_ab OUT.kes")?;
    let mut b = ModelBuilder::new("chain_ab");
    let mut rng = Rng::new(1);
    let x = b.input("x", &[3, 224, 224])?;
    let mean = b.weight("mean", &[3, 1, 1], vec![0.485, 0.456, 0.406])?;
    let std = b.weight("std", &[3, 1, 1], vec![0.229, 0.224, 0.225])?;
    let t = b.op(|y| Op::Binary(Binary { a: x, b: mean, op: BinaryOp::Sub, y }))?;
    let mut t = b.op(|y| Op::Binary(Binary { a: t, b: std, op: BinaryOp::Div, y }))?;
    // (in, out, kernel, stride, groups)
    let layers = [
        (3, 32, 3, 2, 1),
        (32, 32, 3, 1, 32),
        (32, 16, 1, 1, 1),
        (16, 96, 1, 1, 1),
        (96, 96, 3, 2, 96),
        (96, 24, 1, 1, 1),
        (24, 144, 1, 1, 1),
        (144, 144, 3, 1, 144),
        (144, 24, 1, 1, 1),
    ];
    for (k, &(ci, co, kk, s, g)) in layers.iter().enumerate() {
        let fan = ci / g * kk * kk;
        let w = b.weight(&format!("w{k}"), &[co, ci / g, kk, kk], rng.vec(co * fan, (1.0 / fan as f32).sqrt()))?;
        let p = (kk / 2) as u32;
        let conv = b.op(|y| {
            Op::Conv2d(Conv2d {
                x: t,
                proj: Proj { w, b: None },
                stride: [s as u32; 2],
                pad: [p; 4],
                dilation: [1, 1],
                groups: g as u32,
                act: Activation::None,
                clamp: None,
                residual: None,
                y,
            })
        })?;
        if k % 3 == 2 {
            // The projection: linear, its BatchNorm folds into the weights.
            t = conv;
            continue;
        }
        let r = b.op(|y| Op::Unary(Unary { x: conv, op: UnaryOp::Relu, y }))?;
        let gamma =
            b.weight(&format!("gamma{k}"), &[co, 1, 1], rng.vec(co, 1.0).iter().map(|v| 1.0 + 0.5 * v).collect())?;
        let beta = b.weight(&format!("beta{k}"), &[co, 1, 1], rng.vec(co, 0.2))?;
        let m = b.op(|y| Op::Binary(Binary { a: r, b: gamma, op: BinaryOp::Mul, y }))?;
        let a = b.op(|y| Op::Binary(Binary { a: m, b: beta, op: BinaryOp::Add, y }))?;
        let six = b.weight(&format!("six{k}"), &[1], vec![6.0])?;
        t = b.op(|y| Op::Binary(Binary { a, b: six, op: BinaryOp::Min, y }))?;
    }
    b.output(t);
    let before = b.ops().len();
    let report = kestrel_rt::fuse::fuse(&mut b);
    eprintln!("nodes {before} -> {}; fused {:?}", b.ops().len(), report.fused);
    std::fs::write(&out, b.build()?)?;
    Ok(())
}
