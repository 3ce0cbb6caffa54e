//! `nn.TransformerEncoder` called with `src_key_padding_mask` (built from a 0/1 int64 mask input;
//! model from `tests/data/make_masked_encoder.py`): every attention layer fuses into one
//! `Attention` node whose mask input is the padding bias, and the converted model matches
//! onnxruntime's saved output (3 samples, two of them padded) on the CPU and on the GPU.

use crate::common;

use kestrel_rt::format::ops::Op;
use kestrel_rt_onnx::{convert, read_npy, ConvertOptions, InputData, InputTensor};
use std::path::PathBuf;

const REL_TOL: f64 = 1e-4;
const LAYERS: usize = 2;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn io() -> (Vec<InputTensor>, Vec<f32>, usize) {
    let ids = read_npy(data("torch_encoder_mask_ids.npy")).unwrap();
    let mask = read_npy(data("torch_encoder_mask_mask.npy")).unwrap();
    let y = read_npy(data("torch_encoder_mask_out.npy")).unwrap();
    let last = *y.shape.last().unwrap();
    let InputData::F32(want) = y.data else { panic!("output is not f32") };
    (vec![ids, mask], want, last)
}

#[test]
fn transformer_encoder_with_a_padding_mask_fuses_and_matches_onnxruntime() {
    let conv = convert(data("torch_encoder_mask.onnx"), &ConvertOptions::default()).unwrap();
    let ops = &conv.report.kestrel_ops;
    assert_eq!(ops.get("Attention"), Some(&LAYERS), "{ops:?}, rejected: {:?}", conv.report.fusion_rejected);
    assert!(!ops.contains_key("Softmax"), "{ops:?}");
    let bytes = kestrel_rt::format::aligned_copy(&conv.kes);
    let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
    let masks: Vec<_> = (0..f.op_count())
        .filter_map(|n| match f.op(n).unwrap() {
            Op::Attention(a) => Some(f.tensor(a.mask.expect("an Attention node without its mask")).unwrap().shape),
            _ => None,
        })
        .collect();
    // The key padding mask, one bias per key ([T]).
    assert!(masks.iter().all(|s| s.dims() == [8]), "{masks:?}");

    let (feeds, want, last) = io();
    common::matches_onnxruntime("masked encoder", &conv.kes, &feeds, &want, last, REL_TOL);
}
