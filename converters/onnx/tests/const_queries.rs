//! Constant queries on real timm attention-pooling heads at tiny sizes
//! (`kestrel_torch/const_queries.py`: random init, legacy export at opset 17): a ViT with the MAP
//! head (SigLIP's probe, one learned query) and with an attention pool of three latents (a
//! Q-Former's several queries), whose queries tract folds with their projection into a constant
//! and whose scores it writes as the keys times it (`k · Qᵀ`) viewed or transposed for the
//! softmax. Each converts with every softmax fused (no unfused attention reported), and matches
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
    let conv = convert(data(&format!("const_queries_{name}.onnx")), &ConvertOptions::default()).unwrap();
    let ops = &conv.report.kestrel_ops;
    assert!(!ops.contains_key("Softmax"), "{name}: {ops:?}, {:?}", conv.report.unfused_attention);
    assert!(conv.report.unfused_attention.is_empty(), "{name}: {:?}", conv.report.unfused_attention);
    assert_eq!(ops.get("Sdpa"), Some(&sdpa), "{name}: {ops:?}, rejected: {:?}", conv.report.fusion_rejected);

    let x = read_npy(data(&format!("const_queries_{name}_in.npy"))).unwrap();
    let y = read_npy(data(&format!("const_queries_{name}_out.npy"))).unwrap();
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

/// SigLIP's MAP head: one probe, its scores `[.., Tk, 1]` viewed as `[.., 1, Tk]` (the block
/// before it is the projection-fused `Attention`).
#[test]
fn a_map_head_probe_fuses() {
    fuses_and_matches_onnxruntime("map", 1);
}

/// Three latents (a Q-Former's several queries): the scores `[.., Tk, 3]` transposed to `[.., 3, Tk]`.
#[test]
fn several_latent_queries_fuse() {
    fuses_and_matches_onnxruntime("latents", 1);
}
