//! ONNX DFT (opset 17: complex and real input, forward and inverse, onesided, any axis) on
//! seeded random signals: the converted model on the CPU and, when there is one, on the GPU,
//! against the transform's definition summed in f64 here.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, ravel, unravel};
use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{float_value, i64_attr, Msg};

#[test]
fn dft_matches_its_definition() {
    let mut rng = Rng::new(0xDF7);
    for case in 0..16 {
        // [1, A, B, C] with C = 1 (real) or 2 (complex); the transform along A or B.
        let (a, b) = (1 + below(&mut rng, 12), 1 + below(&mut rng, 5));
        let c = 1 + below(&mut rng, 2);
        let axis = 1 + below(&mut rng, 2);
        let inverse = case % 3 == 1;
        // (tract's importer types a onesided DFT only along axis 1.)
        let onesided = !inverse && c == 1 && case % 2 == 0 && axis == 1;
        let xs = [1, a, b, c];
        let x = rng.vec(xs.iter().product(), 1.0);
        let n = xs[axis];
        let bins = if onesided { n / 2 + 1 } else { n };
        let mut os = [1, a, b, 2];
        os[axis] = bins;
        let sign = if inverse { 1.0 } else { -1.0 };
        let want: Vec<f64> = (0..os.iter().product::<usize>())
            .map(|e| {
                let o = unravel(e, &os);
                let k = o[axis];
                let (mut re, mut im) = (0f64, 0f64);
                for m in 0..n {
                    let mut at = o.clone();
                    at[axis] = m;
                    at[3] = 0;
                    let xr = x[ravel(&at, &xs)] as f64;
                    let xi = if c == 2 {
                        at[3] = 1;
                        x[ravel(&at, &xs)] as f64
                    } else {
                        0.0
                    };
                    let t = 2.0 * std::f64::consts::PI * (k * m) as f64 / n as f64;
                    let (cs, sn) = (t.cos(), sign * t.sin());
                    re += xr * cs - xi * sn;
                    im += xr * sn + xi * cs;
                }
                let v = if o[3] == 0 { re } else { im };
                if inverse {
                    v / n as f64
                } else {
                    v
                }
            })
            .collect();
        let node = Msg::default()
            .str(1, "x")
            .str(2, "y")
            .str(3, "dft")
            .str(4, "DFT")
            .msg(5, i64_attr("axis", axis as i64))
            .msg(5, i64_attr("inverse", i64::from(inverse)))
            .msg(5, i64_attr("onesided", i64::from(onesided)));
        let graph = Msg::default()
            .msg(1, node)
            .str(2, "g")
            .msg(11, float_value("x", Some(&xs)))
            .msg(12, float_value("y", None));
        let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 17)).str(2, "dft.rs").msg(7, graph).0;
        let name = format!("{case}: DFT x {xs:?} axis {axis} inverse {inverse} onesided {onesided}");
        let outs = convert_and_run(&format!("dft{case}"), &onnx, &[Input::F32(&x)], want.len())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for got in outs {
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // Each output sums 2N products of values up to 1 in f32.
                assert!((g as f64 - w).abs() <= 1e-5 * n as f64, "{name}: element {i}: {g} vs {w}");
            }
        }
    }
}
