//! Attention forms the timm family exports left unfused, on real timm architectures at tiny sizes
//! (`kestrel_torch/query_rows.py`: random init, legacy export at opset 17): BEiT with average
//! pooling (the last block's weights cut to the patch rows after the softmax, its constant
//! relative-position bias cut alike), TNT (the outer attention's weights read through two slices
//! of query rows, the class token's and the patches', each with its own product with values),
//! and MViTv2 (the decomposed relative-position bias added where the key axis is split into
//! `[kh, kw]`). Each converts with every softmax fused (no unfused attention reported), and matches
//! onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

use crate::common;

/// Converts fixture `query_rows_<name>`: every softmax fused into `sdpa` Sdpa nodes, the CPU and
/// GPU runs matching onnxruntime's output ([`common::fixture_fuses_every_softmax`]).
fn fuses_and_matches_onnxruntime(name: &str, sdpa: usize) {
    common::fixture_fuses_every_softmax(&format!("query_rows_{name}"), sdpa);
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
