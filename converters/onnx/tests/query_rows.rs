//! Attention forms the timm family exports left unfused, on real timm architectures at tiny sizes
//! (`kestrel_torch/query_rows.py`: random init, legacy export at opset 17): BEiT with average
//! pooling (the last block's weights cut to the patch rows after the softmax, its constant
//! relative-position bias cut alike), TNT (the outer attention's weights read through two slices
//! of query rows, the class token's and the patches', each with its own product with values),
//! and MViTv2 (the decomposed relative-position bias added where the key axis is split into
//! `[kh, kw]`). Each converts with every softmax fused (no unfused attention reported), and matches
//! onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

mod common;

use kestrel_rt_onnx::{convert, read_npy, ConvertOptions, InputData};
use std::path::PathBuf;

const REL_TOL: f64 = 1e-4;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Converts fixture `name`: no softmax left, nothing reported unfused, `sdpa` Sdpa nodes; the
/// CPU and GPU runs match onnxruntime's output.
fn fuses_and_matches_onnxruntime(name: &str, sdpa: usize) {
    let conv = convert(data(&format!("query_rows_{name}.onnx")), &ConvertOptions::default()).unwrap();
    let ops = &conv.report.kestrel_ops;
    assert!(!ops.contains_key("Softmax"), "{name}: {ops:?}, {:?}", conv.report.unfused_attention);
    assert!(conv.report.unfused_attention.is_empty(), "{name}: {:?}", conv.report.unfused_attention);
    assert_eq!(ops.get("Sdpa"), Some(&sdpa), "{name}: {ops:?}, rejected: {:?}", conv.report.fusion_rejected);

    let x = read_npy(data(&format!("query_rows_{name}_in.npy"))).unwrap();
    let y = read_npy(data(&format!("query_rows_{name}_out.npy"))).unwrap();
    let last = *y.shape.last().unwrap();
    let InputData::F32(want) = y.data else { panic!("output is not f32") };
    common::matches_onnxruntime(name, &conv.kes, &[x], &want, last, REL_TOL);
}

/// BEiT's last block: the weights cut to the patch rows (the first block is the projection-fused
/// `Attention`; the last, cut, one `Sdpa` over the patch queries).
#[test]
fn beit_patch_rows_cut_after_the_softmax_fuse() {
    fuses_and_matches_onnxruntime("beit", 1);
}

/// TNT's outer attention, its weights read through two slices of query rows: one `Sdpa` per part.
#[test]
fn tnt_weights_split_by_query_rows_fuse_one_node_per_part() {
    fuses_and_matches_onnxruntime("tnt", 2);
}

/// MViTv2's decomposed relative-position bias added where the key axis is split.
#[test]
fn mvitv2_relative_position_on_split_keys_fuses() {
    fuses_and_matches_onnxruntime("mvitv2", 2);
}
