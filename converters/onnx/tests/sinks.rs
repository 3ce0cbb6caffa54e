//! Attention sinks (a learned logit per head in the softmax's denominator, no value row) in the
//! two forms Hugging Face models write, exported by `kestrel_torch/sinks.py` (tiny, random init,
//! legacy export at opset 17): GPT-OSS's sink column concatenated to the scores (a sliding-window
//! mask, grouped-query heads, the max subtracted before the softmax) and cut after it, and
//! GraniteMoeHybrid's `sigmoid(logsumexp(s) − sink)` gate on the output. Each converts with every
//! softmax fused into an `Sdpa` with a sink (no unfused attention reported), and matches
//! onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

mod common;

use common::gpu;
use kestrel_rt::Input;
use kestrel_rt_onnx::{compare, convert, read_npy, run_kestrel, ConvertOptions, InputData, InputTensor};
use kestrel_rt_wgpu::GpuSession;
use std::path::PathBuf;

const REL_TOL: f64 = 1e-4;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Converts fixture `name`: no softmax left, nothing reported unfused, `sdpa` Sdpa nodes; the
/// CPU and GPU runs match onnxruntime's output.
fn fuses_and_matches_onnxruntime(name: &str, sdpa: usize) {
    let conv = convert(data(&format!("sinks_{name}.onnx")), &ConvertOptions::default()).unwrap();
    let ops = &conv.report.kestrel_ops;
    assert!(!ops.contains_key("Softmax"), "{name}: {ops:?}, {:?}", conv.report.unfused_attention);
    assert!(conv.report.unfused_attention.is_empty(), "{name}: {:?}", conv.report.unfused_attention);
    assert_eq!(ops.get("Sdpa"), Some(&sdpa), "{name}: {ops:?}, rejected: {:?}", conv.report.fusion_rejected);

    let x = read_npy(data(&format!("sinks_{name}_in.npy"))).unwrap();
    let y = read_npy(data(&format!("sinks_{name}_out.npy"))).unwrap();
    let last = *y.shape.last().unwrap();
    let InputData::F32(want) = y.data else { panic!("output is not f32") };
    let feeds = vec![x];
    let got = run_kestrel(&conv.kes, &feeds).unwrap();
    let (abs, rel, _, _) = compare(std::slice::from_ref(&want), &got[..1], &[last]).unwrap();
    println!("{name}: CPU vs onnxruntime: max abs {abs:.2e}, rel {rel:.2e}");
    assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e}");

    let Some(ctx) = gpu() else { return };
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let cpu = model.cpu().unwrap();
    let ins: Vec<Input<'_>> = feeds.iter().map(InputTensor::as_input).collect();
    let mut out = vec![0f32; want.len()];
    GpuSession::new(&ctx, &cpu, feeds[0].shape[0]).unwrap().run(&ins, &mut [out.as_mut_slice()]).unwrap();
    let (abs, rel, _, _) = compare(&[want], &[out], &[last]).unwrap();
    println!("{name}: wgpu vs onnxruntime: max abs {abs:.2e}, rel {rel:.2e}");
    assert!(rel <= REL_TOL, "{name}: wgpu relative error {rel:.2e}");
}

/// GPT-OSS's form: the sink column padded onto the scores, cut after the softmax.
#[test]
fn a_sink_column_fuses() {
    fuses_and_matches_onnxruntime("padded", 2);
}

/// GraniteMoeHybrid's form: the log-sum-exp gate on the product with values.
#[test]
fn a_log_sum_exp_gate_fuses() {
    fuses_and_matches_onnxruntime("gate", 2);
}
