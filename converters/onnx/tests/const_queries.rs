//! Constant queries on real timm attention-pooling heads at tiny sizes
//! (`kestrel_torch/const_queries.py`: random init, legacy export at opset 17): a ViT with the MAP
//! head (SigLIP's probe, one learned query) and with an attention pool of three latents (a
//! Q-Former's several queries), whose queries tract folds with their projection into a constant
//! and whose scores it writes as the keys times it (`k · Qᵀ`) viewed or transposed for the
//! softmax. Each converts with every softmax fused (no unfused attention reported), and matches
//! onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

use crate::common;

/// Converts fixture `const_queries_<name>`: every softmax fused into `sdpa` Sdpa nodes, the CPU and
/// GPU runs matching onnxruntime's output ([`common::fixture_fuses_every_softmax`]).
fn fuses_and_matches_onnxruntime(name: &str, sdpa: usize) {
    common::fixture_fuses_every_softmax(&format!("const_queries_{name}"), sdpa);
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
