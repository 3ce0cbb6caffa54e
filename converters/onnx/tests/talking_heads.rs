//! Talking-heads attention (the scores mixed across the heads before the softmax, the weights
//! after it) in the two forms timm writes, exported by `kestrel_torch/talking_heads.py` (tiny,
//! random init) with both PyTorch exporters: CaiT's `TalkingHeadAttn` (a Linear over the head
//! axis moved last, before and after the softmax) and EfficientFormerV2's `Attention2d` (a
//! relative-position bias per head, then 1×1 convolutions over the heads). Each converts with
//! every softmax fused into an `Sdpa` with both head mixings (no unfused attention reported) and
//! matches onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

use crate::common;

use kestrel_rt::format::ops::Op;
use kestrel_rt_onnx::{convert, ConvertOptions};

/// Converts fixture `talking_<name>`: every softmax fused into `sdpa` Sdpa nodes, the CPU and GPU
/// runs matching onnxruntime's output ([`common::fixture_fuses_every_softmax`]); each node mixes
/// the heads before and after its softmax.
fn fuses_and_matches_onnxruntime(name: &str, sdpa: usize) {
    let stem = format!("talking_{name}");
    common::fixture_fuses_every_softmax(&stem, sdpa);
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(format!("{stem}.onnx"));
    let conv = convert(path, &ConvertOptions::default()).unwrap();
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let cpu = model.cpu().unwrap();
    let ops: Vec<Op> = cpu.file().ops().collect::<Result<_, _>>().unwrap();
    let mixed =
        ops.iter().filter(|op| matches!(op, Op::Sdpa(s) if s.mix_pre.is_some() && s.mix_post.is_some())).count();
    assert_eq!(mixed, sdpa, "{stem}: Sdpa nodes mixing the heads before and after the softmax");
}

/// CaiT's form, legacy export: the head axis moved last for each Linear.
#[test]
fn cait_talking_heads_fuse() {
    fuses_and_matches_onnxruntime("cait", 2);
}

#[test]
fn cait_talking_heads_fuse_dynamo() {
    fuses_and_matches_onnxruntime("cait_dynamo", 2);
}

/// EfficientFormerV2's form: a gathered relative-position bias, 1×1 convolutions over the heads.
#[test]
fn efficientformerv2_talking_heads_fuse() {
    fuses_and_matches_onnxruntime("effv2", 1);
}

#[test]
fn efficientformerv2_talking_heads_fuse_dynamo() {
    fuses_and_matches_onnxruntime("effv2_dynamo", 1);
}
