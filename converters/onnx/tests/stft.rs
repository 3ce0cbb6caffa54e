//! ONNX STFT (opset 17) with a constant frame step and a constant window or frame length, real
//! and complex signals, one or several signals, onesided or not, on seeded random signals: the
//! converted model on the CPU and, when there is one, on the GPU, against the transform's
//! definition summed in f64 here.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{f32_tensor, float_value, i64_attr, i64_tensor, Msg};

#[test]
fn stft_matches_its_definition() {
    let mut rng = Rng::new(0x57F7);
    for case in 0..24 {
        // Signal [B, T, C], C = 1 (real) or 2 (complex); frames of N every `step`.
        let b = 1 + below(&mut rng, 3);
        let t = 4 + below(&mut rng, 37);
        let c = 1 + below(&mut rng, 2);
        let n = 1 + below(&mut rng, t.min(12));
        let step = 1 + below(&mut rng, 5);
        let windowed = case % 2 == 0;
        // A onesided transform is defined for a real signal only.
        let onesided = c == 1 && case % 3 != 0;
        let x = rng.vec(b * t * c, 1.0);
        let window: Vec<f32> = if windowed { rng.vec(n, 1.0) } else { vec![1.0; n] };
        let frames = (t - n) / step + 1;
        let bins = if onesided { n / 2 + 1 } else { n };
        let mut want = Vec::with_capacity(b * frames * bins * 2);
        for s in 0..b {
            for f in 0..frames {
                for k in 0..bins {
                    let (mut re, mut im) = (0f64, 0f64);
                    for (m, &wm) in window.iter().enumerate() {
                        let at = (s * t + f * step + m) * c;
                        let w = f64::from(wm);
                        let xr = f64::from(x[at]) * w;
                        let xi = if c == 2 { f64::from(x[at + 1]) * w } else { 0.0 };
                        let th = 2.0 * std::f64::consts::PI * (k * m) as f64 / n as f64;
                        // (xr + i·xi)(cos θ − i·sin θ)
                        re += xr * th.cos() + xi * th.sin();
                        im += xi * th.cos() - xr * th.sin();
                    }
                    want.extend([re, im]);
                }
            }
        }
        let mut inits = vec![i64_tensor("step", &[], &[step as i64])];
        let mut node = Msg::default().str(1, "x").str(1, "step");
        if windowed {
            inits.push(f32_tensor("window", &[n], &window));
            node = node.str(1, "window");
        } else {
            inits.push(i64_tensor("length", &[], &[n as i64]));
            node = node.str(1, "").str(1, "length");
        }
        let node = node.str(2, "y").str(3, "stft").str(4, "STFT").msg(5, i64_attr("onesided", i64::from(onesided)));
        let mut graph = Msg::default().msg(1, node).str(2, "g");
        for i in inits {
            graph = graph.msg(5, i);
        }
        let graph = graph.msg(11, float_value("x", Some(&[b, t, c]))).msg(12, float_value("y", None));
        let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 17)).str(2, "stft.rs").msg(7, graph).0;
        let name =
            format!("{case}: STFT x [{b}, {t}, {c}] frame {n} step {step} windowed {windowed} onesided {onesided}");
        let outs = convert_and_run(&format!("stft{case}"), &onnx, &[Input::F32(&x)], want.len())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for got in outs {
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // Each output sums 2N products of values up to 1 in f32.
                assert!((f64::from(g) - w).abs() <= 1e-5 * n as f64, "{name}: element {i}: {g} vs {w}");
            }
        }
    }
}

/// A window longer than the frame, or a frame longer than the signal, is refused by name.
#[test]
fn stft_frame_longer_than_the_signal_is_refused() {
    let node = Msg::default()
        .str(1, "x")
        .str(1, "step")
        .str(1, "")
        .str(1, "length")
        .str(2, "y")
        .str(3, "stft")
        .str(4, "STFT")
        .msg(5, i64_attr("onesided", 0));
    let graph = Msg::default()
        .msg(1, node)
        .str(2, "g")
        .msg(5, i64_tensor("step", &[], &[1]))
        .msg(5, i64_tensor("length", &[], &[9]))
        .msg(11, float_value("x", Some(&[1, 8, 2])))
        .msg(12, float_value("y", None));
    let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 17)).str(2, "stft.rs").msg(7, graph).0;
    let x = vec![0f32; 16];
    assert!(convert_and_run("stft-long", &onnx, &[Input::F32(&x)], 1).is_err());
}
