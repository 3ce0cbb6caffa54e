//! Graph outputs with no elements (a `Shape` whose start is past its end, a `Slice` of zero width)
//! convert and run on every backend: a zero-element output is written as nothing, and the other
//! outputs are unaffected.

use crate::common;
use crate::proto;

use proto::{i64_attr, i64_tensor, one_node_model, Msg};

fn node(op: &str, inputs: &[&str], attrs: Vec<Msg>) -> Msg {
    let m = inputs.iter().fold(Msg::default(), |m, i| m.str(1, i)).str(2, "y").str(3, "n").str(4, op);
    attrs.into_iter().fold(m, |m, a| m.msg(5, a))
}

fn x(n: usize) -> Vec<f32> {
    (0..n).map(|i| 0.37 * i as f32 - 1.1).collect()
}

#[test]
fn a_shape_with_start_past_end_is_an_empty_output() {
    let onnx = one_node_model(
        node("Shape", &["x"], vec![i64_attr("start", 2), i64_attr("end", 1)]),
        &[1, 2, 3],
        vec![],
        21,
        "t",
    );
    let xs = x(6);
    let outs = common::convert_and_run("empty-shape", &onnx, &[kestrel_rt::Input::F32(&xs)], 0).unwrap();
    assert!(outs.iter().all(|o| o.is_empty()));
}

#[test]
fn a_zero_width_slice_is_an_empty_output() {
    let inits = vec![i64_tensor("s", &[1], &[2]), i64_tensor("e", &[1], &[2]), i64_tensor("a", &[1], &[2])];
    let onnx = one_node_model(node("Slice", &["x", "s", "e", "a"], vec![]), &[1, 3, 4], inits, 13, "t");
    let xs = x(12);
    let outs = common::convert_and_run("empty-slice", &onnx, &[kestrel_rt::Input::F32(&xs)], 0).unwrap();
    assert!(outs.iter().all(|o| o.is_empty()));
    // The wrong output size is still an error, not a silent write.
    let path = std::env::temp_dir().join(format!("kestrel-test-{}-empty-slice2.onnx", std::process::id()));
    std::fs::write(&path, &onnx).unwrap();
    let kes = kestrel_rt_onnx::convert(&path, &kestrel_rt_onnx::ConvertOptions::default()).unwrap().kes;
    std::fs::remove_file(&path).ok();
    let model = kestrel_rt::Model::from_bytes(&kes).unwrap();
    let mut y = vec![0f32; 1];
    assert!(model.session(1).unwrap().run(&[kestrel_rt::Input::F32(&xs)], &mut [&mut y]).is_err());
}
