//! ONNX `Pad` in every mode, with and without its `constant_value` input, held against the
//! definition (numpy's `pad`): `constant` fills with the value, `edge` repeats the edge and
//! `reflect` mirrors without repeating it, and the value input is read in `constant` mode only.
//! PyTorch's dynamo exporter writes the value input for every mode; tract's importer padded
//! with it in `edge` and `reflect` mode too (hf/mimi_encoder: 64 % of the output off).

use crate::common;
use crate::proto;

use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{f32_tensor, i64_tensor, one_node_model, str_attr, Msg};

/// The padded array by the definition: each output coordinate mapped to its input coordinate
/// per axis (or to the fill value).
fn reference(x: &[f32], shape: &[usize], pads: &[(usize, usize)], mode: &str, value: f32) -> (Vec<f32>, Vec<usize>) {
    let out: Vec<usize> = shape.iter().zip(pads).map(|(&n, &(b, a))| n + b + a).collect();
    let total: usize = out.iter().product();
    let mut y = Vec::with_capacity(total);
    for flat in 0..total {
        let (mut rest, mut src, mut inside) = (flat, 0usize, true);
        let mut stride = 1;
        let mut coords = vec![0usize; out.len()];
        for a in (0..out.len()).rev() {
            coords[a] = rest % out[a];
            rest /= out[a];
        }
        for a in (0..out.len()).rev() {
            let (n, r) = (shape[a] as i64, coords[a] as i64 - pads[a].0 as i64);
            let c = match mode {
                "edge" => r.clamp(0, n - 1),
                "reflect" => {
                    if r < 0 {
                        -r
                    } else if r >= n {
                        2 * (n - 1) - r
                    } else {
                        r
                    }
                }
                _ => {
                    inside &= (0..n).contains(&r);
                    r.clamp(0, n - 1)
                }
            };
            src += c as usize * stride;
            stride *= shape[a];
        }
        y.push(if inside { x[src] } else { value });
    }
    (y, out)
}

#[test]
fn every_mode_with_and_without_the_value_input_matches_the_definition() {
    let mut rng = Rng::new(0x9AD5);
    type Case<'a> = (&'a [usize], &'a [(usize, usize)]);
    let cases: [Case; 5] = [
        (&[1, 32, 2], &[(0, 0), (0, 0), (2, 0)]),
        (&[1, 4, 5], &[(0, 0), (1, 2), (3, 1)]),
        (&[1, 3, 4, 5], &[(0, 0), (0, 0), (2, 3), (1, 2)]),
        (&[1, 6, 7], &[(0, 0), (0, 0), (0, 4)]),
        (&[1, 2, 3, 3], &[(0, 0), (1, 1), (2, 2), (2, 0)]),
    ];
    for (case, &(shape, pads)) in cases.iter().enumerate() {
        for mode in ["constant", "edge", "reflect"] {
            // Reflection needs a pad narrower than its axis.
            if mode == "reflect" && shape.iter().zip(pads).any(|(&n, &(b, a))| b.max(a) >= n) {
                continue;
            }
            // The value input absent, a scalar, or a one-element tensor (ONNX's function bodies
            // write `[1]`).
            let forms: [(bool, &[usize]); 3] = [(false, &[]), (true, &[]), (true, &[1])];
            for (with_value, value_dims) in forms {
                let n: usize = shape.iter().product();
                let x: Vec<f32> = (0..n).map(|_| rng.uniform() * 3.0).collect();
                let value = 7.5f32;
                let flat: Vec<i64> = pads.iter().map(|p| p.0 as i64).chain(pads.iter().map(|p| p.1 as i64)).collect();
                let mut node = Msg::default().str(1, "x").str(1, "pads");
                let mut inits = vec![i64_tensor("pads", &[flat.len()], &flat)];
                if with_value {
                    node = node.str(1, "value");
                    inits.push(f32_tensor("value", value_dims, &[value]));
                }
                let node = node.str(2, "y").str(3, "pad").str(4, "Pad").msg(5, str_attr("mode", mode));
                let onnx = one_node_model(node, shape, inits, 18, "t");
                let fill = if with_value { value } else { 0.0 };
                let (want, _) = reference(&x, shape, pads, mode, fill);
                let got = convert_and_run(
                    &format!("pad-{case}-{mode}-{with_value}-{}", value_dims.len()),
                    &onnx,
                    &[Input::F32(&x)],
                    want.len(),
                )
                .unwrap_or_else(|e| panic!("case {case} {mode} value {with_value}: {e}"));
                for (backend, y) in got.iter().enumerate() {
                    assert_eq!(y, &want, "case {case} {shape:?} {pads:?} {mode} value {with_value}, backend {backend}");
                }
            }
        }
    }
}
