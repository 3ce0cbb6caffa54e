//! ConViT's gated positional self-attention (a softmax attention mixed with a constant attention
//! map, renormalised), exported by `kestrel_torch/convit.py` (tiny, random init) with the legacy
//! and the dynamo exporter: the position softmax folds to a constant, and the content softmax of
//! each of the 2 blocks fuses into an `Sdpa` (the mix split by linearity, `runtime/kestrel`'s
//! `fuse/sdpa_mixed.rs`); no unfused attention reported, and the output matches onnxruntime's
//! saved output (2 samples) within 1e-4 on the CPU and on the GPU.

use crate::common;

#[test]
fn convit_legacy_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("convit", 2);
}

#[test]
fn convit_dynamo_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("convit_dynamo", 2);
}
