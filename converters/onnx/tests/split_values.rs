//! Attention whose weights are split back by columns after the softmax, each range multiplied
//! with its own values and the products summed (the converter distributes a product with
//! concatenated values over the concatenation): Pegasus-X's global branch at the first layer
//! (`pegasus_x_global`, `kestrel_torch/pegasus_x.py`: the learned global tokens, constants, as
//! queries against the keys joined `[global; tokens]`) and LongT5's local attention (`longt5`,
//! `kestrel_torch/longt5.py`: each block against the keys of three blocks joined; and
//! `longt5_one_block`, one padded block as the measured export has it: the padded query rows cut
//! right after the softmax, the weights transposed and cut on the key axis there). And Pegasus-X's
//! local attention over two blocks (`pegasus_x_blocks`: the global tokens' keys and values shared
//! by the blocks, constants in the first layer and activations in the second), whose scores are
//! concatenated from the two products: the shared keys and values broadcast over the blocks and
//! joined with the block's own. Each softmax
//! fuses into one `Sdpa` over the values joined (`runtime/kestrel`'s `fuse/sdpa_concat_keys.rs`,
//! after `fuse/const_queries.rs` for constant queries); no unfused attention reported, and the
//! output matches onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

use crate::common;

#[test]
fn pegasus_x_global_legacy_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("pegasus_x_global", 1);
}

#[test]
fn pegasus_x_global_dynamo_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("pegasus_x_global_dynamo", 1);
}

#[test]
fn longt5_local_attention_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("longt5", 1);
}

#[test]
fn longt5_one_padded_block_fuses_every_softmax() {
    common::fixture_fuses_every_softmax("longt5_one_block", 1);
}

#[test]
fn pegasus_x_blocks_fuse_every_softmax() {
    common::fixture_fuses_every_softmax("pegasus_x_blocks", 2);
}
