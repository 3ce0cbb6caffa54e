//! Integer graph inputs read by arithmetic rather than a table lookup are taken as exact f32
//! values (issue 33: ONNX's `test_add_uint8`, `test_mod_*`, an image fed as uint8): integer
//! division truncates, Mod keeps the divisor's sign, casts to integers truncate, and the
//! comparison and cast to float are exact, on the CPU and on the GPU, held to tract on the same
//! inputs; an integer beyond 2^24 (no exact f32) is a run-time error naming it.

use crate::common;
use crate::proto;

use common::gpu;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, verify, ConvertOptions, InputTensor};
use kestrel_rt_wgpu::GpuSession;
use proto::{i64_attr, i64_tensor, Msg};

/// A tensor `ValueInfoProto` of element type `elem` (7 INT64, 2 UINT8, 1 FLOAT).
fn value(name: &str, elem: i64, dims: Option<&[usize]>) -> Msg {
    let mut t = Msg::default().int(1, elem);
    if let Some(dims) = dims {
        t = t.msg(2, dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64))));
    }
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, t))
}

fn node(inputs: &[&str], output: &str, op: &str) -> Msg {
    let n = inputs.iter().fold(Msg::default(), |m, i| m.str(1, i));
    n.str(2, output).str(3, output).str(4, op)
}

/// `y = float((x / 3) + (x mod 4) + (x > 2)) + float(p) · 2`, x int64 `[1, 8]`, p uint8 `[1, 8]`.
fn model() -> Vec<u8> {
    let graph = Msg::default()
        .msg(1, node(&["x", "three"], "q", "Div"))
        .msg(1, node(&["x", "four"], "r", "Mod"))
        .msg(1, node(&["x", "two"], "g", "Greater"))
        .msg(1, node(&["g"], "gi", "Cast").msg(5, i64_attr("to", 7)))
        .msg(1, node(&["q", "r"], "qr", "Add"))
        .msg(1, node(&["qr", "gi"], "s", "Add"))
        .msg(1, node(&["s"], "sf", "Cast").msg(5, i64_attr("to", 1)))
        .msg(1, node(&["p"], "pf", "Cast").msg(5, i64_attr("to", 1)))
        .msg(1, node(&["pf", "pf"], "p2", "Add"))
        .msg(1, node(&["sf", "p2"], "y", "Add"))
        .str(2, "g")
        .msg(5, i64_tensor("three", &[], &[3]))
        .msg(5, i64_tensor("four", &[], &[4]))
        .msg(5, i64_tensor("two", &[], &[2]))
        .msg(11, value("x", 7, Some(&[1, 8])))
        .msg(11, value("p", 2, Some(&[1, 8])))
        .msg(12, value("y", 1, None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 17)).str(2, "integer_inputs.rs").msg(7, graph).0
}

#[test]
fn integer_inputs_as_values_match_tract_on_cpu_and_gpu() {
    let path = std::env::temp_dir().join(format!("kestrel-int-inputs-{}.onnx", std::process::id()));
    std::fs::write(&path, model()).unwrap();
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    assert!(conv.report.notices.iter().any(|n| n.contains("`x`") && n.contains("values")), "{:?}", conv.report.notices);
    let x: Vec<i64> = vec![-9, -7, -4, -1, 0, 5, 11, 16_777_216];
    let p: Vec<i64> = vec![0, 1, 7, 128, 200, 254, 255, 3];
    let feeds = [InputTensor::i64(&[1, 8], x.clone()), InputTensor::i64(&[1, 8], p.clone())];
    let v = verify(&path, &conv.kes, &feeds).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(v.kestrel, v.tract, "Kestrel vs tract");
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    if let Some(ctx) = gpu() {
        let cpu = model.cpu().unwrap();
        let mut g = vec![0f32; 8];
        GpuSession::new(&ctx, &cpu, 1)
            .unwrap()
            .run(&[Input::I64(&x), Input::I64(&p)], &mut [g.as_mut_slice()])
            .unwrap();
        assert_eq!(g, v.tract[0], "wgpu vs tract");
    }
    // 2^24 + 1 has no exact f32: a run-time error naming it, on both backends.
    let mut big = x.clone();
    big[3] = (1 << 24) + 1;
    let mut y = vec![0f32; 8];
    let e = model.session(1).unwrap().run(&[Input::I64(&big), Input::I64(&p)], &mut [&mut y]).unwrap_err();
    assert!(e.to_string().contains("16777217"), "{e}");
    if let Some(ctx) = gpu() {
        let cpu = model.cpu().unwrap();
        let e = GpuSession::new(&ctx, &cpu, 1)
            .unwrap()
            .run(&[Input::I64(&big), Input::I64(&p)], &mut [y.as_mut_slice()])
            .unwrap_err();
        assert!(e.to_string().contains("16777217"), "{e}");
    }
}
