//! Quantised ONNX graphs as onnxruntime's quantisation tools write them: a QDQ chain
//! (QuantizeLinear → DequantizeLinear around f32 ops, u8 and i8) and QLinearMatMul /
//! MatMulInteger (the QOperator form) with a constant, per-column quantised B, on seeded random
//! inputs: the converted model on the CPU and, when there is one, on the GPU, against a
//! reference written here from ONNX's definitions (round half to even, saturation).

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{f32_tensor, float_value, Msg};

/// A tensor initializer of an integer element type (`elem`: 2 UINT8, 3 INT8, 6 INT32), values
/// in `int32_data`.
fn int_tensor(name: &str, elem: i64, dims: &[usize], v: &[i64]) -> Msg {
    let t = dims.iter().fold(Msg::default(), |m, &d| m.int(1, d as i64)).int(2, elem).str(8, name);
    v.iter().fold(t, |m, &x| m.int(5, x))
}

fn value(name: &str, elem: i64, dims: &[usize]) -> Msg {
    let shape = dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64)));
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, Msg::default().int(1, elem).msg(2, shape)))
}

fn node(op: &str, ins: &[&str], out: &str) -> Msg {
    let n = ins.iter().fold(Msg::default(), |m, i| m.str(1, i));
    n.str(2, out).str(3, out).str(4, op)
}

fn graph_model(nodes: Vec<Msg>, inits: Vec<Msg>, inputs: Vec<Msg>, out: &str) -> Vec<u8> {
    let mut g = Msg::default().str(2, "g");
    for n in nodes {
        g = g.msg(1, n);
    }
    for t in inits {
        g = g.msg(5, t);
    }
    for i in inputs {
        g = g.msg(11, i);
    }
    g = g.msg(12, float_value(out, None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "quantized.rs").msg(7, g).0
}

/// ONNX's saturating quantisation: round half to even, plus the zero point, clamped.
fn quantise(x: f64, scale: f64, zp: i64, lo: i64, hi: i64) -> i64 {
    let r = (x / scale).round_ties_even() as i64 + zp;
    r.clamp(lo, hi)
}

fn run(name: &str, onnx: &[u8], inputs: &[Input<'_>], n_out: usize) -> Vec<Vec<f32>> {
    convert_and_run(name, onnx, inputs, n_out).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn a_qdq_chain_matches_onnx_quantisation() {
    let mut rng = Rng::new(0x0D0D);
    for (case, (elem, lo, hi)) in [(2i64, 0i64, 255i64), (3, -128, 127)].into_iter().enumerate() {
        let n = 64;
        let (scale, zp) = (0.05f32, if elem == 2 { 128 } else { -3 });
        // Values over and past the representable range (saturation) and on half steps (ties).
        let mut x: Vec<f32> = rng.vec(n, 9.0);
        x[0] = 2.5 * scale;
        x[1] = -3.5 * scale;
        let onnx = graph_model(
            vec![node("QuantizeLinear", &["x", "s", "z"], "q"), node("DequantizeLinear", &["q", "s", "z"], "y")],
            vec![f32_tensor("s", &[], &[scale]), int_tensor("z", elem, &[], &[zp])],
            vec![float_value("x", Some(&[n]))],
            "y",
        );
        // ONNX's reference in f32: x / scale, rounded half to even. Kestrel multiplies by the
        // reciprocal tract's importer stores, which can land one ulp away: on an exact tie that
        // decides the other way, so a value within 1e-6 of a tie may be one step off.
        for got in run(&format!("qdq{case}"), &onnx, &[Input::F32(&x)], n) {
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                let q = v / scale;
                let want = ((quantise(q as f64, 1.0, zp, lo, hi) - zp) as f32) * scale;
                let near_tie = ((q.abs().fract()) - 0.5).abs() < 1e-6;
                let ok = g == want || (near_tie && (g - want).abs() <= scale * 1.001);
                assert!(ok, "QDQ chain (type {elem}), element {i}: x {v}, got {g}, want {want}");
            }
        }
    }
}

#[test]
fn qlinear_matmul_and_matmul_integer_match_their_definitions() {
    let mut rng = Rng::new(0x0A11);
    for case in 0..6 {
        let (m, k, n) = (1 + below(&mut rng, 4), 1 + below(&mut rng, 8), 1 + below(&mut rng, 5));
        let a: Vec<i64> = (0..m * k).map(|_| below(&mut rng, 256) as i64).collect();
        let b: Vec<i64> = (0..k * n).map(|_| below(&mut rng, 256) as i64 - 128).collect();
        let (a0, sa) = (below(&mut rng, 256) as i64, 0.02f32);
        let b0 = 0i64;
        let sb: Vec<f32> = (0..n).map(|j| 0.01 + 0.003 * j as f32).collect();
        let (c0, sc) = (below(&mut rng, 256) as i64, 0.7f32);
        let af: Vec<f32> = a.iter().map(|&v| v as f32).collect();
        if case % 2 == 0 {
            // QLinearMatMul: u8 A (graph input), i8 B per column, u8 output.
            let onnx = graph_model(
                vec![node("QLinearMatMul", &["a", "sa", "a0", "b", "sb", "b0", "sc", "c0"], "y")],
                vec![
                    f32_tensor("sa", &[], &[sa]),
                    int_tensor("a0", 2, &[], &[a0]),
                    int_tensor("b", 3, &[k, n], &b),
                    f32_tensor("sb", &[n], &sb),
                    int_tensor("b0", 3, &[n], &vec![b0; n]),
                    f32_tensor("sc", &[], &[sc]),
                    int_tensor("c0", 2, &[], &[c0]),
                ],
                vec![value("a", 2, &[m, k])],
                "y",
            );
            let want: Vec<f32> = (0..m * n)
                .map(|e| {
                    let (i, j) = (e / n, e % n);
                    let acc: f64 = (0..k)
                        .map(|t| (sa as f64 * (a[i * k + t] - a0) as f64) * (sb[j] as f64 * (b[t * n + j] - b0) as f64))
                        .sum();
                    quantise(acc, sc as f64, c0, 0, 255) as f32
                })
                .collect();
            let a_ids: Vec<i64> = a.clone();
            for got in run(&format!("qlm{case}"), &onnx, &[Input::I64(&a_ids)], m * n) {
                // f32 sums in another order may move a value that sits on a rounding boundary.
                let off = got.iter().zip(&want).filter(|(g, w)| (*g - *w).abs() > 1.0).count();
                let exact = got.iter().zip(&want).filter(|(g, w)| g == w).count();
                assert!(off == 0 && exact * 10 >= want.len() * 9, "QLinearMatMul {case}: {got:?} vs {want:?}");
            }
        } else {
            // MatMulInteger: u8 A with a zero point, i8 B, i32 output (exact).
            let onnx = graph_model(
                vec![node("MatMulInteger", &["a", "b", "a0"], "y")],
                vec![int_tensor("b", 3, &[k, n], &b), int_tensor("a0", 2, &[], &[a0])],
                vec![value("a", 2, &[m, k])],
                "y",
            );
            let want: Vec<f32> = (0..m * n)
                .map(|e| {
                    let (i, j) = (e / n, e % n);
                    (0..k).map(|t| (a[i * k + t] - a0) * b[t * n + j]).sum::<i64>() as f32
                })
                .collect();
            for got in run(&format!("mmi{case}"), &onnx, &[Input::F32(&af)], m * n) {
                assert_eq!(got, want, "MatMulInteger {case}");
            }
        }
    }
}

#[test]
fn qlinear_conv_matches_its_definition() {
    let mut rng = Rng::new(0xC0A7);
    for case in 0..4 {
        let (c, o, h, w, k) =
            (1 + below(&mut rng, 3), 1 + below(&mut rng, 3), 4 + below(&mut rng, 3), 4 + below(&mut rng, 3), 3);
        let x: Vec<i64> = (0..c * h * w).map(|_| below(&mut rng, 256) as i64).collect();
        let wt: Vec<i64> = (0..o * c * k * k).map(|_| below(&mut rng, 256) as i64 - 128).collect();
        let bias: Vec<i64> = (0..o).map(|_| below(&mut rng, 2000) as i64 - 1000).collect();
        let (x0, xs) = (below(&mut rng, 256) as i64, 0.03f32);
        let ws: Vec<f32> = (0..o).map(|i| 0.005 + 0.002 * i as f32).collect();
        let (y0, ys) = (below(&mut rng, 256) as i64, 0.4f32);
        let pad = case % 2;
        let (oh, ow) = (h + 2 * pad - k + 1, w + 2 * pad - k + 1);
        let want: Vec<f32> = (0..o * oh * ow)
            .map(|e| {
                let (oc, p) = (e / (oh * ow), e % (oh * ow));
                let (py, px) = (p / ow, p % ow);
                let mut acc = bias[oc] as f64 * xs as f64 * ws[oc] as f64;
                for ic in 0..c {
                    for ky in 0..k {
                        for kx in 0..k {
                            let (iy, ix) = (py + ky, px + kx);
                            if iy < pad || ix < pad || iy - pad >= h || ix - pad >= w {
                                continue;
                            }
                            let xv = x[(ic * h + iy - pad) * w + ix - pad];
                            let wv = wt[((oc * c + ic) * k + ky) * k + kx];
                            acc += (xs as f64 * (xv - x0) as f64) * (ws[oc] as f64 * wv as f64);
                        }
                    }
                }
                quantise(acc, ys as f64, y0, 0, 255) as f32
            })
            .collect();
        let node = node("QLinearConv", &["x", "xs", "x0", "w", "ws", "w0", "ys", "y0", "b"], "y")
            .msg(5, proto::ints_attr("pads", &[pad, pad, pad, pad]));
        let onnx = graph_model(
            vec![node],
            vec![
                f32_tensor("xs", &[], &[xs]),
                int_tensor("x0", 2, &[], &[x0]),
                int_tensor("w", 3, &[o, c, k, k], &wt),
                f32_tensor("ws", &[o], &ws),
                int_tensor("w0", 3, &[o], &vec![0; o]),
                f32_tensor("ys", &[], &[ys]),
                int_tensor("y0", 2, &[], &[y0]),
                int_tensor("b", 6, &[o], &bias),
            ],
            vec![value("x", 2, &[1, c, h, w])],
            "y",
        );
        for got in run(&format!("qlc{case}"), &onnx, &[Input::I64(&x)], want.len()) {
            // f32 sums in another order may move a value sitting on a rounding boundary by one.
            let off = got.iter().zip(&want).filter(|(g, w)| (*g - *w).abs() > 1.0).count();
            let exact = got.iter().zip(&want).filter(|(g, w)| g == w).count();
            assert!(off == 0 && exact * 10 >= want.len() * 9, "QLinearConv {case}: {got:?} vs {want:?}");
        }
    }
}
