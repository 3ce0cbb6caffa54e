//! ONNX `BatchNormalization` with `training_mode = 1` (timm's weight-standardised convolutions
//! export it): the output is normalised by the input's own statistics, per channel over every
//! other axis, never by the `input_mean`/`input_var` inputs (which only feed the running
//! statistics). Models with 1 and 3 outputs, inputs of rank 2 to 4 and random scales, biases
//! and (deliberately wrong) input statistics are converted and run on the CPU and, when there
//! is one, the GPU, and held against the f64 definition (onnx's reference implementation).

use crate::common;
use crate::proto;

use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{f32_tensor, float_attr, i64_attr, one_node_model, Msg};

/// Largest error allowed against the f64 definition: f32 sums over at most a few hundred
/// values, then one division by the standard deviation.
const TOL: f64 = 2e-5;

/// `Y` in f64: `(x − mean_c) / sqrt(var_c + ε) · scale_c + b_c`, the statistics over every axis
/// but axis 1 (population variance).
fn reference(x: &[f32], shape: &[usize], scale: &[f32], b: &[f32], eps: f32) -> Vec<f64> {
    let c = shape[1];
    let inner: usize = shape[2..].iter().product();
    let n = shape[0] * inner;
    let at = |i: usize, ch: usize, j: usize| (i * c + ch) * inner + j;
    let mut y = vec![0f64; x.len()];
    for ch in 0..c {
        let vals: Vec<f64> =
            (0..shape[0]).flat_map(|i| (0..inner).map(move |j| (i, j))).map(|(i, j)| x[at(i, ch, j)] as f64).collect();
        let mean = vals.iter().sum::<f64>() / n as f64;
        let var = vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let std = (var + eps as f64).sqrt();
        for i in 0..shape[0] {
            for j in 0..inner {
                let k = at(i, ch, j);
                y[k] = (x[k] as f64 - mean) / std * scale[ch] as f64 + b[ch] as f64;
            }
        }
    }
    y
}

#[test]
fn training_mode_normalises_by_the_inputs_own_statistics() {
    let mut rng = Rng::new(0xBA7C);
    let cases: [(&[usize], usize, f32); 6] = [
        (&[2, 3, 4, 5], 1, 1e-5),
        (&[2, 3, 4, 5], 3, 1e-5),
        (&[1, 4, 6, 6], 3, 1e-3),
        (&[3, 5, 7], 1, 1e-5),
        (&[6, 4], 3, 1e-8),
        (&[1, 8, 3, 3], 1, 0.1),
    ];
    for (case, &(shape, outputs, eps)) in cases.iter().enumerate() {
        let c = shape[1];
        let n: usize = shape.iter().product();
        // Inputs off centre and scaled, so the statistics matter.
        let x: Vec<f32> = (0..n).map(|_| 3.0 * rng.uniform() + 1.5).collect();
        let scale: Vec<f32> = (0..c).map(|_| rng.uniform() + 1.2).collect();
        let b: Vec<f32> = (0..c).map(|_| rng.uniform()).collect();
        // Running statistics far from the input's: used, they would give wrong values.
        let mean: Vec<f32> = (0..c).map(|_| 10.0 + rng.uniform()).collect();
        let var: Vec<f32> = (0..c).map(|_| 50.0 + rng.uniform()).collect();
        let mut node = Msg::default();
        for i in ["x", "scale", "b", "mean", "var"] {
            node = node.str(1, i);
        }
        for o in ["y", "running_mean", "running_var"].iter().take(outputs) {
            node = node.str(2, o);
        }
        node = node
            .str(3, "bn")
            .str(4, "BatchNormalization")
            .msg(5, float_attr("epsilon", eps))
            .msg(5, float_attr("momentum", 0.9))
            .msg(5, i64_attr("training_mode", 1));
        let inits = vec![
            f32_tensor("scale", &[c], &scale),
            f32_tensor("b", &[c], &b),
            f32_tensor("mean", &[c], &mean),
            f32_tensor("var", &[c], &var),
        ];
        let onnx = one_node_model(node, shape, inits, 15, "t");
        let want = reference(&x, shape, &scale, &b, eps);
        let got = convert_and_run(&format!("bn-train-{case}"), &onnx, &[Input::F32(&x)], n)
            .unwrap_or_else(|e| panic!("case {case} {shape:?}: {e}"));
        for (backend, y) in got.iter().enumerate() {
            let worst = y.iter().zip(&want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max);
            assert!(worst <= TOL, "case {case} {shape:?} ({outputs} outputs), backend {backend}: error {worst:.2e}");
        }
    }
}

/// The inference form (`training_mode` 0 or absent) still uses the given statistics.
#[test]
fn inference_mode_uses_the_given_statistics() {
    let mut rng = Rng::new(0xBA7D);
    let (shape, c) = ([1usize, 3, 4, 4], 3);
    let n = 48;
    let x: Vec<f32> = (0..n).map(|_| 2.0 * rng.uniform()).collect();
    let (scale, b, mean, var) = ([1.5f32, 0.5, 2.0], [0.1f32, -0.2, 0.3], [0.4f32, -1.0, 2.5], [2.0f32, 0.5, 4.0]);
    let node = Msg::default()
        .str(1, "x")
        .str(1, "scale")
        .str(1, "b")
        .str(1, "mean")
        .str(1, "var")
        .str(2, "y")
        .str(3, "bn")
        .str(4, "BatchNormalization")
        .msg(5, float_attr("epsilon", 1e-5));
    let inits = vec![
        f32_tensor("scale", &[c], &scale),
        f32_tensor("b", &[c], &b),
        f32_tensor("mean", &[c], &mean),
        f32_tensor("var", &[c], &var),
    ];
    let onnx = one_node_model(node, &shape, inits, 15, "t");
    let got = convert_and_run("bn-infer", &onnx, &[Input::F32(&x)], n).unwrap();
    for y in &got {
        for (k, (&g, &xv)) in y.iter().zip(&x).enumerate() {
            let ch = k / 16;
            let w = (xv as f64 - mean[ch] as f64) / (var[ch] as f64 + 1e-5).sqrt() * scale[ch] as f64 + b[ch] as f64;
            assert!((g as f64 - w).abs() <= TOL, "element {k}: {g} vs {w}");
        }
    }
}
