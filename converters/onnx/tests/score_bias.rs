//! Attention with additive score biases (`kestrel_torch/score_bias.py`, PyTorch modules as their
//! families write them, legacy export at opset 17): Swin's window attention (relative-position
//! bias gathered from its table, plus the shifted-window mask; one window, and a shifted block of
//! four windows, whose attention runs over G = 4 sequences), EfficientFormer / LeViT's learned
//! attention-bias table, and T5's bucketed relative bias plus the padding bias of an
//! `attention_mask` input. Each converts with its attention fused into one `Attention` node whose
//! `mask` input is the bias (`[H, T, T]`: a constant for Swin and LeViT, a per-sample activation
//! for T5 with its padding mask), and matches onnxruntime's saved output (3 samples) within 1e-4
//! on the CPU and on the GPU.

use crate::common;

use kestrel_rt::format::ops::Op;
use kestrel_rt::format::TensorKind;
use kestrel_rt_onnx::{compare, convert, read_npy, run_kestrel, ConvertOptions, InputData, InputTensor};
use std::path::PathBuf;

const REL_TOL: f64 = 1e-4;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The saved inputs (`x`, and T5's `attention_mask`) and onnxruntime's output of a fixture.
fn io(name: &str) -> (Vec<InputTensor>, Vec<f32>, usize) {
    let mut feeds = vec![read_npy(data(&format!("score_bias_{name}_in.npy"))).unwrap()];
    let mask = data(&format!("score_bias_{name}_mask.npy"));
    if mask.exists() {
        feeds.push(read_npy(mask).unwrap());
    }
    let y = read_npy(data(&format!("score_bias_{name}_out.npy"))).unwrap();
    let last = *y.shape.last().unwrap();
    let InputData::F32(want) = y.data else { panic!("output is not f32") };
    (feeds, want, last)
}

/// Converts fixture `name`, checks its one attention fused with a mask of `mask_dims` (a weight
/// when `constant`), and compares the CPU and GPU runs with onnxruntime's output.
fn fuses_and_matches_onnxruntime(name: &str, mask_dims: &[u32], constant: bool) {
    let conv = convert(data(&format!("score_bias_{name}.onnx")), &ConvertOptions::default()).unwrap();
    let ops = &conv.report.kestrel_ops;
    assert!(!ops.contains_key("Softmax") && !ops.contains_key("MatMul"), "{name}: {ops:?}");
    let bytes = kestrel_rt::format::aligned_copy(&conv.kes);
    let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
    let attention: Vec<_> = (0..f.op_count())
        .filter_map(|n| match f.op(n).unwrap() {
            Op::Attention(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(attention.len(), 1, "{name}: {ops:?}, rejected: {:?}", conv.report.fusion_rejected);
    let a = attention[0];
    assert!(!a.causal, "{name}");
    let m = f.tensor(a.mask.unwrap_or_else(|| panic!("{name}: no mask input"))).unwrap();
    assert_eq!(m.shape.dims(), mask_dims, "{name}");
    assert_eq!(m.kind == TensorKind::Weight, constant, "{name}: mask kind {:?}", m.kind);

    let (feeds, want, last) = io(name);
    common::matches_onnxruntime(name, &conv.kes, &feeds, &want, last, REL_TOL);
}

/// Swin: the relative-position bias (its table gathered by a fixed index, folded) plus the
/// shifted-window mask, summed into one constant `[H, T, T]` bias.
#[test]
fn swin_window_attention_fuses_with_its_relative_bias_and_window_mask() {
    fuses_and_matches_onnxruntime("swin", &[2, 16, 16], true);
}

/// A shifted Swin block over four windows (roll, window partition, attention, reverse, roll
/// back): the attention runs over G = 4 sequences per sample with one constant `[G, H, T, T]`
/// mask, the relative-position bias (per head) plus the shifted-window mask (per window).
#[test]
fn shifted_swin_windows_fuse_with_a_mask_per_window() {
    fuses_and_matches_onnxruntime("swin_shifted", &[4, 2, 16, 16], true);
}

/// EfficientFormer / LeViT: `attention_biases[:, attention_bias_idxs]`, a constant `[H, T, T]`.
#[test]
fn levit_attention_fuses_with_its_learned_bias_table() {
    fuses_and_matches_onnxruntime("levit", &[4, 16, 16], true);
}

/// T5: the bucketed relative bias (constant: static positions) plus the padding bias of the
/// `attention_mask` input, a per-sample `[H, T, T]` activation.
#[test]
fn t5_attention_fuses_with_its_bucketed_bias_and_padding_mask() {
    fuses_and_matches_onnxruntime("t5", &[2, 8, 8], false);
}

/// With int8 weights the constant bias stays an f32 weight (the mask slot takes f32 only), the
/// model loads and runs, and its output stays near onnxruntime's (int8 projections: 5e-2).
#[test]
fn a_constant_bias_stays_f32_with_int8_weights() {
    let opts = ConvertOptions { weights: kestrel_rt::format::DType::I8, ..ConvertOptions::default() };
    let conv = convert(data("score_bias_swin.onnx"), &opts).unwrap();
    let bytes = kestrel_rt::format::aligned_copy(&conv.kes);
    let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
    let Some(Op::Attention(a)) = (0..f.op_count()).map(|n| f.op(n).unwrap()).find(|o| matches!(o, Op::Attention(_)))
    else {
        panic!("no Attention node")
    };
    let m = f.tensor(a.mask.expect("no mask")).unwrap();
    assert_eq!((m.kind, m.dtype), (TensorKind::Weight, kestrel_rt::format::DType::F32));
    let (feeds, want, last) = io("swin");
    let got = run_kestrel(&conv.kes, &feeds).unwrap();
    let (_, rel, _, _) = compare(std::slice::from_ref(&want), &got[..1], &[last]).unwrap();
    assert!(rel <= 5e-2, "int8: relative error {rel:.2e}");
}
