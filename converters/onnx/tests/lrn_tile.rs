//! ONNX LRN (every window size, even and odd, wider than the channels) and Tile (constant
//! repeats on every axis) on seeded random inputs: the converted model on the CPU and, when
//! there is one, on the GPU, against references written here from ONNX's definitions.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, ravel, unravel};
use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{float_attr, float_value, i64_attr, i64_tensor, Msg};

fn model(node: Msg, xs: &[usize], inits: Vec<Msg>) -> Vec<u8> {
    let mut g = Msg::default().msg(1, node).str(2, "g");
    for t in inits {
        g = g.msg(5, t);
    }
    g = g.msg(11, float_value("x", Some(xs))).msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "lrn_tile.rs").msg(7, g).0
}

fn run(name: &str, onnx: &[u8], x: &[f32], n_out: usize) -> Vec<Vec<f32>> {
    convert_and_run(name, onnx, &[Input::F32(x)], n_out).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn lrn_matches_its_definition() {
    let mut rng = Rng::new(0x1A7);
    for case in 0..12 {
        let xs = [1, 1 + below(&mut rng, 7), 1 + below(&mut rng, 4), 1 + below(&mut rng, 4)];
        let size = 1 + below(&mut rng, 8);
        let (alpha, beta, bias) =
            (1e-2 + rng.uniform().abs() * 1e-1, 0.5 + rng.uniform().abs() * 0.5, 1.0 + rng.uniform().abs());
        let x = rng.vec(xs.iter().product(), 2.0);
        let c = xs[1];
        let want: Vec<f64> = (0..x.len())
            .map(|e| {
                let at = unravel(e, &xs);
                let lo = at[1].saturating_sub((size - 1) / 2);
                let hi = (at[1] + (size - 1).div_ceil(2)).min(c - 1);
                let s: f64 = (lo..=hi)
                    .map(|ch| {
                        let mut p = at.clone();
                        p[1] = ch;
                        (x[ravel(&p, &xs)] as f64).powi(2)
                    })
                    .sum();
                x[e] as f64 / (bias as f64 + alpha as f64 / size as f64 * s).powf(beta as f64)
            })
            .collect();
        let node = Msg::default()
            .str(1, "x")
            .str(2, "y")
            .str(3, "lrn")
            .str(4, "LRN")
            .msg(5, i64_attr("size", size as i64))
            .msg(5, float_attr("alpha", alpha))
            .msg(5, float_attr("beta", beta))
            .msg(5, float_attr("bias", bias));
        let name = format!("{case}: LRN x {xs:?} size {size}");
        for got in run(&format!("lrn{case}"), &model(node, &xs, vec![]), &x, want.len()) {
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!((g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0), "{name}: element {i}: {g} vs {w}");
            }
        }
    }
}

#[test]
fn tile_matches_its_definition() {
    let mut rng = Rng::new(0x711E);
    for case in 0..12 {
        let xs: Vec<usize> =
            std::iter::once(1).chain((0..1 + below(&mut rng, 3)).map(|_| 1 + below(&mut rng, 4))).collect();
        let reps: Vec<i64> =
            xs.iter().enumerate().map(|(a, _)| if a == 0 { 1 } else { 1 + below(&mut rng, 3) as i64 }).collect();
        let os: Vec<usize> = xs.iter().zip(&reps).map(|(&d, &r)| d * r as usize).collect();
        let x = rng.vec(xs.iter().product(), 2.0);
        let want: Vec<f32> = (0..os.iter().product::<usize>())
            .map(|e| {
                let o = unravel(e, &os);
                let at: Vec<usize> = o.iter().zip(&xs).map(|(&i, &d)| i % d).collect();
                x[ravel(&at, &xs)]
            })
            .collect();
        let node = Msg::default().str(1, "x").str(1, "r").str(2, "y").str(3, "tile").str(4, "Tile");
        let name = format!("{case}: Tile x {xs:?} repeats {reps:?}");
        let onnx = model(node, &xs, vec![i64_tensor("r", &[reps.len()], &reps)]);
        for got in run(&format!("tile{case}"), &onnx, &x, want.len()) {
            assert_eq!(got, want, "{name}");
        }
    }
}
