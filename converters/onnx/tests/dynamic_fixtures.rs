//! The bounded-dynamic-shape fixtures (issue 34; `tests/data/dynamic/`, see its README) at fixed
//! sizes: for every model and reference case, the conversion with that case's symbol values
//! (`ConvertOptions::dims`; the batch stays symbolic) run on the Kestrel CPU runtime matches
//! onnxruntime's saved output within 1e-4, and the attention layers of the two transformers and of
//! the ALiBi block fuse.
//! The baseline that the bounded conversion (one `.kes` for every size within the bounds) extends.

use crate::dynamic;

use dynamic::{cases, fixture, max_abs_diff};
use kestrel_rt_onnx::{convert, run_kestrel, ConvertOptions};

const TOL: f32 = 1e-4;

/// Converts `model` at each case's sizes and checks the outputs; `attention` is the number of
/// fused `Attention` nodes expected.
fn check(model: &str, attention: usize) {
    let f = fixture(model);
    // The last conversion and the sizes it was made at (cases sharing sizes share it).
    let (mut kes, mut at): (Vec<u8>, Vec<(String, usize)>) = (Vec::new(), Vec::new());
    for case in cases(model) {
        let what = format!("{model} {} {:?}", case.name, case.dims);
        if kes.is_empty() || at != case.dims {
            let opts = ConvertOptions { dims: case.dims.clone(), ..ConvertOptions::default() };
            let conv = convert(&f.onnx, &opts).unwrap_or_else(|e| panic!("{what}: converting: {e}"));
            let ops = &conv.report.kestrel_ops;
            assert_eq!(
                ops.get("Attention").copied().unwrap_or(0),
                attention,
                "{what}: {ops:?}, rejected: {:?}",
                conv.report.fusion_rejected
            );
            assert!(attention == 0 || !ops.contains_key("Softmax"), "{what}: {ops:?}");
            (kes, at) = (conv.kes, case.dims.clone());
        }
        let got = run_kestrel(&kes, &case.inputs).unwrap_or_else(|e| panic!("{what}: running: {e}"));
        assert_eq!(got.len(), case.expected.len(), "{what}: outputs");
        for (i, ((shape, want), got)) in case.expected.iter().zip(&got).enumerate() {
            assert_eq!(got.len(), shape.iter().product::<usize>(), "{what}: output {i} of shape {shape:?}");
            let err = max_abs_diff(want, got);
            println!("{what}: output {i} {shape:?}: max abs err {err:.2e}");
            assert!(err <= TOL, "{what}: output {i}: max abs err {err:.2e} > {TOL:.0e}");
        }
    }
}

#[test]
fn bert_legacy_matches_onnxruntime_at_each_fixed_sequence() {
    check("bert_legacy", 2);
}

#[test]
fn transformer_dynamo_matches_onnxruntime_at_each_fixed_sequence() {
    check("transformer_dynamo", 2);
}

/// Self-attention with ALiBi's subtracted per-head score bias and a sliding-window masked fill
/// (issue 33 item 4): one `Attention` node, the bias and the fill combined into its constant
/// `[h, T, T]` mask (−∞ outside the window).
#[test]
fn alibi_window_fuses_and_matches_onnxruntime_at_each_fixed_sequence() {
    check("alibi_window", 1);
}

#[test]
fn cnn_hw_matches_onnxruntime_at_each_fixed_size() {
    check("cnn_hw", 0);
}

#[test]
fn every_case_lies_within_its_model_bounds() {
    for model in dynamic::MODELS {
        let f = fixture(model);
        let cs = cases(model);
        assert!(cs.len() >= 4, "{model}: {} cases", cs.len());
        // Each upper bound is reached by some case.
        for (k, s) in f.symbols.iter().enumerate() {
            assert!(cs.iter().any(|c| c.dims[k].1 == s.max), "{model}: no case at {} = {}", s.name, s.max);
        }
        assert_eq!(f.bounds().len(), f.symbols.len());
    }
}
