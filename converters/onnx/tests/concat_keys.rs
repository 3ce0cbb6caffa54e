//! Pegasus-X's local block attention (one softmax over two score products concatenated on the
//! key axis: the global tokens' keys and the block's own), exported by `kestrel_torch/pegasus_x.py`
//! (tiny, random init) with the legacy and the dynamo exporter; the first block's global tokens
//! are constants, the second's activations. Each block's softmax fuses into an `Sdpa` over the
//! concatenated keys and values (`runtime/kestrel`'s `fuse/sdpa_concat_keys.rs`); no unfused
//! attention reported, and the output matches onnxruntime's saved output (2 samples) within 1e-4
//! on the CPU and on the GPU.

use crate::common;

#[test]
fn pegasus_x_legacy_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("pegasus_x", 2);
}

#[test]
fn pegasus_x_dynamo_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("pegasus_x_dynamo", 2);
}
