//! Dims of value infos and graph outputs named by a symbol no graph input carries are hints
//! tract cannot check: PyTorch's dynamo exporter names data-dependent sizes `u0`, `u1`,
//! `(u0//4)`, and tract took each name as a fact, contradicted by the sizes it inferred itself
//! (hf/audioflamingo3 and hf/glmasr: "Output mismatch after rewiring expansion", a Transpose of
//! a NonZero expected `u0`; hf/higgs_audio_v2: "Impossible to unify Sym(u2) with Sym(u1)"). They
//! are forgotten before tract reads the graph; the inputs' own symbols are kept.

use crate::common;
use crate::proto;

use common::convert_and_run;
use kestrel_rt::Input;
use proto::{float_value_sym, i64_tensor, Msg};

fn node(op: &str, inputs: &[&str], output: &str) -> Msg {
    let n = inputs.iter().fold(Msg::default(), |m, i| m.str(1, i));
    n.str(2, output).str(3, output).str(4, op)
}

/// `y = relu(reshape(x, [b, 2, 3]) + t)`, with `x [b, 6]` (`b` a number or the batch symbol)
/// and the intermediates' and output's dims as `hints` name them.
fn model(x_dims: &[&str], hints: &[(&str, &[&str])]) -> Vec<u8> {
    let mut graph = Msg::default()
        .msg(1, node("Reshape", &["x", "shape"], "t"))
        .msg(1, node("Add", &["t", "t"], "u"))
        .msg(1, node("Relu", &["u"], "y"))
        .str(2, "g")
        .msg(5, i64_tensor("shape", &[3], &[-1, 2, 3]))
        .msg(11, float_value_sym("x", x_dims));
    let out = hints.iter().find(|(n, _)| *n == "y").map_or(&["1", "2", "3"][..], |(_, d)| d);
    graph = graph.msg(12, float_value_sym("y", out));
    for (name, dims) in hints.iter().filter(|(n, _)| *n != "y") {
        graph = graph.msg(13, float_value_sym(name, dims));
    }
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 18)).str(2, "value_info_symbols.rs").msg(7, graph).0
}

/// A case: the input's dims, and the value infos' (name, dims).
type Case<'a> = (&'a [&'a str], Vec<(&'a str, &'a [&'a str])>);

#[test]
fn value_info_dims_named_by_unknown_symbols_are_forgotten() {
    let x: Vec<f32> = (0..6).map(|i| i as f32 - 2.5).collect();
    let want: Vec<f32> = x.iter().map(|v| (2.0 * v).max(0.0)).collect();
    let cases: [Case; 4] = [
        // An exporter's name for a size the graph fixes.
        (&["1", "6"], vec![("t", &["1", "u0", "3"])]),
        // Two names for one size ("Impossible to unify Sym(u2) with Sym(u1)").
        (&["1", "6"], vec![("t", &["1", "u1", "3"]), ("u", &["1", "u2", "3"]), ("y", &["1", "u2", "3"])]),
        // An expression of one.
        (&["1", "6"], vec![("t", &["1", "(u0//4)", "3"])]),
        // The batch symbol kept beside them.
        (&["batch", "6"], vec![("t", &["batch", "u0", "3"]), ("y", &["batch", "2", "3"])]),
    ];
    for (i, (xd, hints)) in cases.iter().enumerate() {
        let onnx = model(xd, hints);
        let outs = convert_and_run(&format!("value-info-{i}"), &onnx, &[Input::F32(&x)], 6)
            .unwrap_or_else(|e| panic!("case {i} {hints:?}: {e}"));
        for y in outs {
            assert_eq!(y, want, "case {i}");
        }
    }
}
