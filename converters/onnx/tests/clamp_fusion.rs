//! Clip after layers, as exporters write it (ONNX `Clip` with constant bounds; tract splits it
//! into `Max` and `Min`): a ReLU6 after a convolution, a hard tanh after a dense layer, a `Clip`
//! with only an upper bound after a depthwise convolution. Every bound folds into its layer's
//! clamp (`layer+clamp` in the report, no element-wise node left), and the converted model
//! matches tract on seeded random inputs.

use crate::proto;

use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{convert, verify, ConvertOptions, InputTensor};
use proto::{f32_tensor, float_value, Msg};

fn model() -> Vec<u8> {
    let node = |op: &str, ins: &[&str], out: &str| {
        ins.iter().fold(Msg::default(), |n, i| n.str(1, i)).str(2, out).str(3, out).str(4, op)
    };
    let mut rng = Rng::new(0xC11F);
    let ints = |name: &str, v: &[i64]| v.iter().fold(Msg::default().str(1, name).int(20, 7), |a, &x| a.int(8, x));
    let int = |name: &str, v: i64| Msg::default().str(1, name).int(20, 2).int(3, v);
    let conv = node("Conv", &["x", "w1", "b1"], "c1")
        .msg(5, ints("pads", &[1, 1, 1, 1]))
        .msg(5, ints("kernel_shape", &[3, 3]));
    let dw = node("Conv", &["r6", "w2"], "c2")
        .msg(5, ints("pads", &[1, 1, 1, 1]))
        .msg(5, ints("strides", &[2, 2]))
        .msg(5, int("group", 6))
        .msg(5, ints("kernel_shape", &[3, 3]));
    let graph = Msg::default()
        .msg(1, conv)
        .msg(1, node("Clip", &["c1", "zero", "six"], "r6"))
        .msg(1, dw)
        .msg(1, node("Clip", &["c2", "", "half"], "u"))
        .msg(1, node("Flatten", &["u"], "f"))
        .msg(1, node("Gemm", &["f", "w3", "b3"], "g").msg(5, int("transB", 1)))
        .msg(1, node("Clip", &["g", "minus_one", "one"], "out"))
        .str(2, "g")
        .msg(5, f32_tensor("w1", &[6, 3, 3, 3], &rng.vec(162, 0.6)))
        .msg(5, f32_tensor("b1", &[6], &rng.vec(6, 0.3)))
        .msg(5, f32_tensor("w2", &[6, 1, 3, 3], &rng.vec(54, 0.6)))
        .msg(5, f32_tensor("w3", &[5, 6 * 4 * 4], &rng.vec(480, 0.3)))
        .msg(5, f32_tensor("b3", &[5], &rng.vec(5, 0.3)))
        .msg(5, f32_tensor("zero", &[], &[0.0]))
        .msg(5, f32_tensor("six", &[], &[6.0]))
        .msg(5, f32_tensor("half", &[], &[0.5]))
        .msg(5, f32_tensor("one", &[], &[1.0]))
        .msg(5, f32_tensor("minus_one", &[], &[-1.0]))
        .msg(11, float_value("x", Some(&[1, 3, 8, 8])))
        .msg(12, float_value("out", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "clamp_fusion.rs").msg(7, graph).0
}

#[test]
fn clips_after_layers_fold_into_their_clamps_and_match_tract() {
    let path = std::env::temp_dir().join(format!("kestrel-clamp-fusion-{}.onnx", std::process::id()));
    std::fs::write(&path, model()).unwrap();
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    let clamps = conv.report.fused.iter().find(|f| f.name == "layer+clamp").map_or(0, |f| f.count);
    // ReLU6: the ReLU into the convolution, its 6 as the clamp; the upper-only Clip; the hard
    // tanh's two bounds (Max then Min) — four bounds, three layers.
    assert!(clamps >= 3, "{}", conv.report.to_table());
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let cpu = model.cpu().unwrap();
    let ops: Vec<&str> = (0..cpu.file().op_count()).map(|i| cpu.file().op(i).unwrap().name()).collect();
    assert!(!ops.contains(&"Binary"), "an element-wise bound is left: {ops:?}");
    let mut rng = Rng::new(3);
    for batch in [1, 3] {
        let x = InputTensor::f32(&[batch, 3, 8, 8], rng.vec(batch * 192, 2.0));
        let v = verify(&path, &conv.kes, &[x]).unwrap();
        assert!(v.max_abs_err <= 1e-5, "batch {batch}: max abs err {}", v.max_abs_err);
    }
    std::fs::remove_file(path).ok();
}
