//! ONNX LogSoftmax on random data whose rows spread far wider than exp's f32 range (±300, a
//! −1e9 mask), against an f64 reference written here: `x − max − ln Σ exp(x − max)`.
//!
//! tract expands LogSoftmax into `ln(softmax(x))`, which underflows: an element more than ~104
//! below its row's maximum has a softmax of 0 in f32 and came out −inf (ONNX's
//! `test_logsoftmax_large_number` on random data, `converters/conformance/randomize.py`:
//! expected −10564.87, found −inf). The converter now lowers the pair as a log-softmax.

use crate::common;
use crate::proto;

use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{i64_attr, one_node_model, Msg};

/// f64 log-softmax of `x` (shape `dims`) over the axes `from..=to` taken together.
fn reference(x: &[f32], dims: &[usize], from: usize, to: usize) -> Vec<f64> {
    let outer: usize = dims[..from].iter().product();
    let span: usize = dims[from..=to].iter().product();
    let inner: usize = dims[to + 1..].iter().product();
    let mut y = vec![0f64; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * span + k) * inner + i;
            let max = (0..span).map(|k| f64::from(x[at(k)])).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..span).map(|k| (f64::from(x[at(k)]) - max).exp()).sum();
            for k in 0..span {
                y[at(k)] = f64::from(x[at(k)]) - max - sum.ln();
            }
        }
    }
    y
}

#[test]
fn log_softmax_stays_finite_on_wide_rows() {
    let mut rng = Rng::new(0x1050F7);
    // (shape, axis, opset): opset 13 normalises over one axis, opset 11 over the axis and every
    // axis after it (the input coerced to 2-D).
    let cases: [(&[usize], i64, i64); 6] = [
        (&[1, 8], -1, 13),
        (&[1, 3, 7], 1, 13),
        (&[1, 4, 5, 6], 2, 13),
        (&[1, 4, 5, 6], -1, 13),
        (&[1, 3, 4, 5], 1, 11),
        (&[1, 3, 4, 5], 2, 11),
    ];
    for (c, &(dims, axis, opset)) in cases.iter().enumerate() {
        for (s, scale) in [4f32, 300.0].into_iter().enumerate() {
            let n: usize = dims.iter().product();
            let mut x = rng.vec(n, scale);
            // An additive attention mask's −1e9 on a few elements.
            for e in (0..n).step_by(7) {
                x[e] = -1e9;
            }
            let node = Msg::default()
                .str(1, "x")
                .str(2, "y")
                .str(3, "lsm")
                .str(4, "LogSoftmax")
                .msg(5, i64_attr("axis", axis));
            let onnx = one_node_model(node, dims, vec![], opset, "log_softmax.rs");
            let a = if axis < 0 { dims.len() as i64 + axis } else { axis } as usize;
            let last = if opset < 13 { dims.len() - 1 } else { a };
            let want = reference(&x, dims, a, last);
            let name = format!("case {c}.{s}: LogSoftmax {dims:?} axis {axis} opset {opset}, ±{scale}");
            let outs = convert_and_run(&format!("lsm{c}-{s}"), &onnx, &[Input::F32(&x)], n)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for (backend, got) in ["CPU", "GPU"].iter().zip(&outs) {
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    let err = (f64::from(g) - w).abs();
                    assert!(
                        err <= 1e-4 + 1e-6 * w.abs(),
                        "{name} ({backend}): element {i}: expected {w}, found {g} (error {err:e})"
                    );
                }
            }
        }
    }
}
