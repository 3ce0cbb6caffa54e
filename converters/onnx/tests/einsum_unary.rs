//! ONNX Einsum of one operand (transposes, diagonals, sums over axes, mixes of them) on seeded
//! random inputs: the converted model on the CPU and, when there is one, on the GPU, against the
//! equation evaluated here by its definition.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{ravel, unravel};
use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{float_value, str_attr, Msg};

/// `equation` over `x` of shape `xs` by its definition: every assignment of the labels, the
/// output the sum of the input elements it reads.
fn reference(equation: &str, x: &[f32], xs: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let (lhs, rhs) = equation.split_once("->").unwrap();
    let lhs: Vec<char> = lhs.chars().collect();
    let rhs: Vec<char> = rhs.chars().collect();
    let mut labels: Vec<char> = lhs.clone();
    labels.dedup();
    labels.sort();
    labels.dedup();
    let dim = |c: char| xs[lhs.iter().position(|&l| l == c).unwrap()];
    let ls: Vec<usize> = labels.iter().map(|&c| dim(c)).collect();
    let os: Vec<usize> = rhs.iter().map(|&c| dim(c)).collect();
    let mut y = vec![0f64; os.iter().product::<usize>().max(1)];
    for e in 0..ls.iter().product() {
        let v = unravel(e, &ls);
        let at = |c: char| v[labels.iter().position(|&l| l == c).unwrap()];
        let xi: Vec<usize> = lhs.iter().map(|&c| at(c)).collect();
        let oi: Vec<usize> = rhs.iter().map(|&c| at(c)).collect();
        y[ravel(&oi, &os)] += x[ravel(&xi, xs)] as f64;
    }
    (y, os)
}

#[test]
fn einsums_of_one_operand_match_their_definition() {
    let mut rng = Rng::new(0xE15);
    for (case, (equation, xs)) in [
        ("bij->bji", vec![1, 3, 4]),
        ("bii->bi", vec![1, 4, 4]),
        ("bij->b", vec![1, 3, 5]),
        ("bijk->bk", vec![1, 2, 3, 4]),
        ("biij->bji", vec![1, 3, 3, 2]),
        ("bij->bi", vec![1, 5, 2]),
    ]
    .into_iter()
    .enumerate()
    {
        let x = rng.vec(xs.iter().product(), 2.0);
        let (want, _) = reference(equation, &x, &xs);
        let node =
            Msg::default().str(1, "x").str(2, "y").str(3, "e").str(4, "Einsum").msg(5, str_attr("equation", equation));
        let graph = Msg::default()
            .msg(1, node)
            .str(2, "g")
            .msg(11, float_value("x", Some(&xs)))
            .msg(12, float_value("y", None));
        let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "einsum_unary.rs").msg(7, graph).0;
        let outs = convert_and_run(&format!("einsum{case}"), &onnx, &[Input::F32(&x)], want.len())
            .unwrap_or_else(|e| panic!("{equation}: {e}"));
        for got in outs {
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!((g as f64 - w).abs() <= 1e-5 * w.abs().max(1.0), "{equation}: element {i}: {g} vs {w}");
            }
        }
    }
}
