//! ONNX's random ops (`RandomNormal`, `RandomUniform`, `RandomNormalLike`, `RandomUniformLike`,
//! `Bernoulli`) are read, whatever their nodes are named (tract's importer took the `…Like` form
//! only from a node whose *name* ends in `Like`: PyTorch's `randn_like`, hf/vibevoice's sampled
//! latents, failed to load; it had no `Bernoulli`). A draw that reaches an output cannot match
//! another runtime's draws: the conversion refuses it, naming the ONNX node, with a remedy. A
//! draw read only for its shape is folded away and the model converts, exact on the CPU and the
//! GPU.

use crate::common;
use crate::proto;

use common::convert_and_run;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, ConvertOptions};
use proto::{float_attr, float_value, i64_attr, i64s_attr, Msg};

fn node(op: &str, name: &str, inputs: &[&str], output: &str, attrs: Vec<Msg>) -> Msg {
    let n = inputs.iter().fold(Msg::default(), |m, i| m.str(1, i));
    attrs.into_iter().fold(n.str(2, output).str(3, name).str(4, op), |m, a| m.msg(5, a))
}

/// A model of `x [1, 3, 4]` and `nodes`, writing `y`.
fn model(nodes: Vec<Msg>) -> Vec<u8> {
    let graph = nodes.into_iter().fold(Msg::default(), |g, n| g.msg(1, n)).str(2, "g");
    let graph = graph.msg(11, float_value("x", Some(&[1, 3, 4]))).msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 18)).str(2, "random_ops.rs").msg(7, graph).0
}

/// The random node `op` named `name`, reading `x` (the `…Like` forms, Bernoulli) or of `x`'s
/// shape, writing `r`.
fn draw(op: &str, name: &str) -> Msg {
    match op {
        "RandomNormal" | "RandomUniform" => node(op, name, &[], "r", vec![i64s_attr("shape", &[1, 3, 4])]),
        "Bernoulli" => node(op, name, &["x"], "r", vec![]),
        _ => node(op, name, &["x"], "r", vec![float_attr("scale", 0.5)]),
    }
}

const OPS: [&str; 5] = ["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli"];

#[test]
fn a_draw_that_reaches_the_output_is_refused_naming_the_node() {
    for op in OPS {
        // `y = x + r`; node names as PyTorch's exporters write them (none ends in `Like`).
        let onnx = model(vec![draw(op, "node_randn"), node("Add", "add", &["x", "r"], "y", vec![])]);
        let path = std::env::temp_dir().join(format!("kestrel-random-{}-{op}.onnx", std::process::id()));
        std::fs::write(&path, onnx).unwrap();
        let e = convert(&path, &ConvertOptions::default()).map(|_| ()).unwrap_err().to_string();
        std::fs::remove_file(&path).ok();
        assert!(e.contains(&format!("{op} `node_randn`")), "{op}: {e}");
        assert!(e.contains("random draw") && e.contains("input"), "{op}: no remedy: {e}");
        assert_eq!(e.matches("node_randn").count(), 1, "{op}: one line per ONNX node: {e}");
    }
    // A draw from a constant input (hf/vibevoice's per-batch scale: a RandomNormalLike of a
    // ConstantOfShape) is refused too, not drawn once while typing and stored as a weight.
    for op in ["RandomNormalLike", "RandomUniformLike", "Bernoulli"] {
        let k = proto::f32_tensor("k", &[1, 3, 4], &[0.5; 12]);
        let graph = Msg::default()
            .msg(1, node(op, "scale_draw", &["k"], "r", vec![]))
            .msg(1, node("Add", "add", &["x", "r"], "y", vec![]))
            .str(2, "g")
            .msg(5, k)
            .msg(11, float_value("x", Some(&[1, 3, 4])))
            .msg(12, float_value("y", None));
        let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 18)).str(2, "random_ops.rs").msg(7, graph).0;
        let path = std::env::temp_dir().join(format!("kestrel-random-const-{}-{op}.onnx", std::process::id()));
        std::fs::write(&path, onnx).unwrap();
        let e = convert(&path, &ConvertOptions::default()).map(|_| ()).unwrap_err().to_string();
        std::fs::remove_file(&path).ok();
        assert!(e.contains(&format!("{op} `scale_draw`")) && e.contains("random draw"), "{op}: {e}");
    }
}

#[test]
fn a_draw_read_only_for_its_shape_converts() {
    let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.75 - 4.0).collect();
    for op in OPS {
        // `y = x + ConstantOfShape(Shape(r), 2.5)`: 2.5 added, whatever was drawn.
        let value = proto::f32_tensor("", &[1], &[2.5]);
        let onnx = model(vec![
            draw(op, "noise"),
            node("Shape", "shape", &["r"], "s", vec![]),
            node("ConstantOfShape", "fill", &["s"], "c", vec![Msg::default().str(1, "value").int(20, 4).msg(5, value)]),
            node("Add", "add", &["x", "c"], "y", vec![]),
        ]);
        let outs = convert_and_run(&format!("random-shape-{op}"), &onnx, &[Input::F32(&x)], 12)
            .unwrap_or_else(|e| panic!("{op}: {e}"));
        for y in outs {
            let want: Vec<f32> = x.iter().map(|v| v + 2.5).collect();
            assert_eq!(y, want, "{op}");
        }
    }
}

#[test]
fn a_random_op_with_a_bad_attribute_is_an_error_not_a_panic() {
    // low ≥ high, a negative scale, an integer dtype, no shape.
    for (op, inputs, attrs) in [
        ("RandomUniformLike", &["x"][..], vec![float_attr("low", 2.0), float_attr("high", 1.0)]),
        ("RandomNormalLike", &["x"], vec![float_attr("scale", -1.0)]),
        ("RandomNormalLike", &["x"], vec![i64_attr("dtype", 7)]),
        ("RandomNormal", &[], vec![]),
    ] {
        let onnx = model(vec![node(op, "bad", inputs, "r", attrs), node("Add", "add", &["x", "r"], "y", vec![])]);
        let path = std::env::temp_dir().join(format!("kestrel-random-bad-{}-{op}.onnx", std::process::id()));
        std::fs::write(&path, onnx).unwrap();
        let r = convert(&path, &ConvertOptions::default());
        std::fs::remove_file(&path).ok();
        assert!(r.is_err(), "{op}");
    }
}
