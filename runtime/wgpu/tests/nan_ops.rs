//! ONNX's NaN rules for Max, Min, Relu and Clip on both backends: Max and Min of a NaN operand
//! are NaN (numpy's `maximum`/`minimum`; WGSL's and IEEE's `max`/`min` would return the other
//! operand), Relu(NaN) and a clamp of NaN are NaN — as element-wise ops, with a weight operand
//! (the strided kernel), and fused into a dense layer (its ReLU and its clamp, the fusion of
//! Max/Min by constants).

use crate::common;

use common::{gpu, Feed};
use kestrel_rt::format::ops::*;
use kestrel_rt::{Input, ModelBuilder};
use kestrel_rt_wgpu::GpuSession;

const N: usize = 12;

/// Values with NaN, ±∞, zeros and ordinary numbers on both sides of 0.
fn xs() -> Vec<f32> {
    vec![f32::NAN, -2.0, 0.5, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 7.0, f32::NAN, 3.0, -1.5, 1.0]
}

/// A second operand, NaN where `xs` is not (and once where it is too).
fn ys() -> Vec<f32> {
    vec![1.0, f32::NAN, 0.25, -1.0, 2.0, f32::NAN, 5.0, -7.0, f32::NAN, 3.0, f32::INFINITY, -0.5]
}

/// Runs `model` on the CPU and, when there is a device, the GPU; each output is checked
/// against `want`: NaN exactly where `want` is NaN, else equal.
fn check(what: &str, b: ModelBuilder, feeds: &[Feed], want: &[f32]) {
    let model = kestrel_rt::Model::from_bytes(&b.build().unwrap()).unwrap();
    let mut outs = vec![("cpu", common::run_cpu(&model, feeds, 1).remove(0))];
    if let Some(g) = gpu() {
        let cpu = model.cpu().unwrap();
        let mut s = GpuSession::new(&g, &cpu, 1).unwrap();
        let mut out = vec![0f32; want.len()];
        let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
        s.run(&inputs, &mut [&mut out]).unwrap();
        outs.push(("gpu", out));
    }
    for (who, got) in outs {
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let ok = if w.is_nan() { g.is_nan() } else { g == w };
            assert!(ok, "{what} on the {who}: element {i}: {g}, want {w}; got {got:?}");
        }
    }
}

fn onnx_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

fn onnx_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.min(b)
    }
}

#[test]
fn max_and_min_propagate_nan() {
    for (op, f) in [(BinaryOp::Max, onnx_max as fn(f32, f32) -> f32), (BinaryOp::Min, onnx_min)] {
        // Two activations of one shape.
        let mut b = ModelBuilder::new("nan");
        let x = b.input("x", &[N]).unwrap();
        let y = b.input("y", &[N]).unwrap();
        let z = b.op(|z| Op::Binary(Binary { a: x, b: y, op, y: z })).unwrap();
        b.output(z);
        let want: Vec<f32> = xs().iter().zip(ys()).map(|(&a, b)| f(a, b)).collect();
        check(&format!("{op:?} of activations"), b, &[Feed::F32(xs()), Feed::F32(ys())], &want);
        // A weight row broadcast over rows of an activation, the weight first.
        let mut b = ModelBuilder::new("nan");
        let x = b.input("x", &[2, N / 2]).unwrap();
        let w = b.weight("w", &[N / 2], ys()[..N / 2].to_vec()).unwrap();
        let z = b.op(|z| Op::Binary(Binary { a: w, b: x, op, y: z })).unwrap();
        b.output(z);
        let want: Vec<f32> = xs().iter().enumerate().map(|(i, &v)| f(ys()[i % (N / 2)], v)).collect();
        check(&format!("{op:?} of a weight row"), b, &[Feed::F32(xs())], &want);
    }
}

#[test]
fn relu_and_a_dense_layers_relu_and_clamp_propagate_nan() {
    let relu = |v: f32| if v.is_nan() { v } else { v.max(0.0) };
    let mut b = ModelBuilder::new("nan");
    let x = b.input("x", &[N]).unwrap();
    let z = b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Relu, y })).unwrap();
    b.output(z);
    let want: Vec<f32> = xs().iter().map(|&v| relu(v)).collect();
    check("Relu", b, &[Feed::F32(xs())], &want);
    // A dense layer of one feature per row (weight 1: each row's NaN stays in its row), with a
    // ReLU, a clamp, or both.
    let finite = xs();
    for (act, clamp) in
        [(Activation::Relu, None), (Activation::None, Some([-1.0f32, 6.0])), (Activation::Relu, Some([-1.0, 6.0]))]
    {
        let mut b = ModelBuilder::new("nan");
        let x = b.input("x", &[N, 1]).unwrap();
        let w = b.weight("w", &[1, 1], vec![1.0]).unwrap();
        let c = clamp.map(|c| b.weight("clamp", &[2], c.to_vec()).unwrap());
        let z = b.op(|y| Op::Dense(Dense { clamp: c, x, proj: Proj { w, b: None }, act, y })).unwrap();
        b.output(z);
        let want: Vec<f32> = finite
            .iter()
            .map(|&v| {
                let v = if act == Activation::Relu { relu(v) } else { v };
                match clamp {
                    Some([lo, hi]) if !v.is_nan() => v.clamp(lo, hi),
                    _ => v,
                }
            })
            .collect();
        check(&format!("dense {act:?} clamp {clamp:?}"), b, &[Feed::F32(finite.clone())], &want);
    }
}
