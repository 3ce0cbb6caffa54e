//! Attention sinks (a learned logit per head in the softmax's denominator, no value row) in the
//! two forms Hugging Face models write, exported by `kestrel_torch/sinks.py` (tiny, random init,
//! legacy export at opset 17): GPT-OSS's sink column concatenated to the scores (a sliding-window
//! mask, grouped-query heads, the max subtracted before the softmax) and cut after it, and
//! GraniteMoeHybrid's `sigmoid(logsumexp(s) − sink)` gate on the output. Each converts with every
//! softmax fused into an `Sdpa` with a sink (no unfused attention reported), and matches
//! onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

use crate::common;

/// Converts fixture `sinks_<name>`: every softmax fused into `sdpa` Sdpa nodes, the CPU and
/// GPU runs matching onnxruntime's output ([`common::fixture_fuses_every_softmax`]).
fn fuses_and_matches_onnxruntime(name: &str, sdpa: usize) {
    common::fixture_fuses_every_softmax(&format!("sinks_{name}"), sdpa);
}

/// GPT-OSS's form: the sink column padded onto the scores, cut after the softmax.
#[test]
fn a_sink_column_fuses() {
    fuses_and_matches_onnxruntime("padded", 2);
}

/// GraniteMoeHybrid's form: the log-sum-exp gate on the product with values.
#[test]
fn a_log_sum_exp_gate_fuses() {
    fuses_and_matches_onnxruntime("gate", 2);
}
