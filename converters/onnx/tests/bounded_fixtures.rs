//! Issue 34's acceptance models (`tests/data/dynamic/`, see its README), each converted **once**
//! with its dims bounded (`ConvertOptions::bounds`: BERT and `nn.TransformerEncoder` over
//! `sequence` in 1..=64, the CNN over `h` and `w` in 16..=64; the batch stays the batch): every
//! onnxruntime reference case (sequence 1, 5, 13, 64 and a padded batch of 2; images 16×16,
//! 17×23, 32×48, 64×64) runs from that one file at its own sizes, on the CPU and on the GPU
//! (lavapipe in CI), within 1e-4 of onnxruntime, in sessions that change size between runs and
//! come back; the transformers' attention stays fused.

use crate::common;
use crate::dynamic;

use common::gpu;
use dynamic::{cases, fixture, max_abs_diff, Case};
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, ConvertOptions, InputTensor};
use kestrel_rt_wgpu::GpuSession;

const TOL: f32 = 1e-4;

/// Each input's per-sample shape (the case arrays all have a leading batch axis).
fn per_sample(case: &Case) -> Vec<Vec<usize>> {
    case.inputs.iter().map(|t| t.shape[1..].to_vec()).collect()
}

fn check_outputs(what: &str, case: &Case, got: &[Vec<f32>]) {
    assert_eq!(got.len(), case.expected.len(), "{what}: outputs");
    for (i, ((shape, want), got)) in case.expected.iter().zip(got).enumerate() {
        assert_eq!(got.len(), shape.iter().product::<usize>(), "{what}: output {i} of shape {shape:?}");
        let err = max_abs_diff(want, got);
        println!("{what}: output {i} {shape:?}: max abs err {err:.2e}");
        assert!(err <= TOL, "{what}: output {i}: max abs err {err:.2e} > {TOL:.0e}");
    }
}

fn check(model: &str, attention: usize) {
    let f = fixture(model);
    let opts = ConvertOptions { bounds: f.bounds(), ..ConvertOptions::default() };
    let conv = convert(&f.onnx, &opts).unwrap_or_else(|e| panic!("{model}: converting with bounds: {e}"));
    let ops = &conv.report.kestrel_ops;
    assert_eq!(ops.get("Attention").copied().unwrap_or(0), attention, "{model}: {ops:?}");
    assert!(attention == 0 || !ops.contains_key("Softmax"), "{model}: {ops:?}");
    let model_ = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let dims = model_.dims().unwrap();
    assert_eq!(dims.len(), f.symbols.len(), "{model}: {dims:?}");
    for (d, s) in dims.iter().zip(f.symbols) {
        assert_eq!((d.name.as_str(), d.min, d.max), (s.name, s.min, s.max), "{model}");
    }
    let cs = cases(model);
    let cap = cs.iter().map(|c| c.inputs[0].shape[0]).max().unwrap();
    // One CPU session for every case, in order and then backwards (sizes change between runs).
    let mut cpu = model_.session(cap).unwrap();
    for case in cs.iter().chain(cs.iter().rev()) {
        let what = format!("{model} {} (CPU)", case.name);
        let shapes = per_sample(case);
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let ins: Vec<Input<'_>> = case.inputs.iter().map(InputTensor::as_input).collect();
        let got = cpu.run_vec_shaped(&ins, &refs).unwrap_or_else(|e| panic!("{what}: {e}"));
        check_outputs(&what, case, &got);
    }
    // The same on the GPU.
    let Some(ctx) = gpu() else { return };
    let core = model_.cpu().unwrap();
    let mut g = GpuSession::new(&ctx, &core, cap).unwrap();
    for case in cs.iter().chain(cs.iter().rev()) {
        let what = format!("{model} {} (GPU)", case.name);
        let shapes = per_sample(case);
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        g.set_input_shapes(&core, &refs).unwrap_or_else(|e| panic!("{what}: {e}"));
        let ins: Vec<Input<'_>> = case.inputs.iter().map(InputTensor::as_input).collect();
        let batch = case.inputs[0].shape[0];
        let mut outs: Vec<Vec<f32>> =
            case.expected.iter().map(|(s, _)| vec![0f32; s.iter().product::<usize>()]).collect();
        let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        assert_eq!(g.run(&ins, &mut refs).unwrap_or_else(|e| panic!("{what}: {e}")), batch);
        check_outputs(&what, case, &outs);
    }
}

#[test]
fn bert_legacy_one_file_runs_every_sequence_length() {
    check("bert_legacy", 2);
}

#[test]
fn transformer_dynamo_one_file_runs_every_sequence_length() {
    check("transformer_dynamo", 2);
}

#[test]
fn cnn_hw_one_file_runs_every_image_size() {
    check("cnn_hw", 0);
}

/// A decoder exported by dynamo: causal masks from the length, `sequence + 1` dims in its
/// value_info.
#[test]
fn gpt2_dynamo_one_file_runs_every_sequence_length() {
    check("gpt2_dynamo", 2);
}

/// A score bias `[h, T, T]` and a mask `[T, T]` that tract folds at each length: the attention
/// fuses with the two combined into its mask `[h, T, T]`, which the file keeps at the bound's
/// size with a length axis leading (`[T, h, T]`): a run reads its leading `T` rows, slices the
/// other length axis and transposes back (the fused node's mask input an activation).
#[test]
fn alibi_window_one_file_slices_its_size_dependent_constants() {
    check("alibi_window", 1);
    let f = fixture("alibi_window");
    let conv = convert(&f.onnx, &ConvertOptions { bounds: f.bounds(), ..ConvertOptions::default() }).unwrap();
    // The fused node's one mask constant: its leading rows read, one slice, one transpose.
    let ops = &conv.report.kestrel_ops;
    assert_eq!((ops.get("Slice").copied(), ops.get("Transpose").copied()), (Some(1), Some(1)), "{ops:?}");
}

/// Runs every case of `model` from `kes` in one CPU session; each output within `tol` of
/// onnxruntime's. Returns the outputs by case name.
fn run_every_case(what: &str, model: &str, kes: &[u8], tol: f32) -> Vec<(String, Vec<f32>)> {
    let m = kestrel_rt::Model::from_bytes(kes).unwrap();
    let cs = cases(model);
    let mut s = m.session(cs.iter().map(|c| c.inputs[0].shape[0]).max().unwrap()).unwrap();
    let mut out = Vec::new();
    for case in cs {
        let shapes = per_sample(&case);
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let ins: Vec<Input<'_>> = case.inputs.iter().map(InputTensor::as_input).collect();
        let mut got = s.run_vec_shaped(&ins, &refs).unwrap_or_else(|e| panic!("{what} {}: {e}", case.name));
        let err = max_abs_diff(&case.expected[0].1, &got[0]);
        println!("{what} {}: max abs err {err:.2e}", case.name);
        assert!(err < tol, "{what} {}: {err}", case.name);
        out.push((case.name, got.swap_remove(0)));
    }
    out
}

/// `--calibrate` with bounded dims: the samples (here at sequence 13) calibrate int8
/// activations once, at their size; the bound's file stores those scales and runs every length
/// like the file converted and calibrated at 13 (at 13) and like onnxruntime within int8's error;
/// with `--int8-attention` too.
#[test]
fn calibrated_int8_bert_runs_every_length() {
    let f = fixture("bert_legacy");
    let cal: Vec<std::path::PathBuf> =
        f.inputs.iter().map(|i| dynamic::dir().join(format!("bert_legacy_s13_{i}.npy"))).collect();
    let int8 =
        ConvertOptions { weights: kestrel_rt_onnx::DType::I8, calibrate: cal.clone(), ..ConvertOptions::default() };
    let bounded = convert(&f.onnx, &ConvertOptions { bounds: f.bounds(), ..int8.clone() }).unwrap();
    let calibration = bounded.report.calibration.as_ref().expect("a calibration report");
    assert!(!calibration.tensors.is_empty(), "{calibration:?}");
    let fixed = convert(&f.onnx, &ConvertOptions { dims: vec![("sequence".into(), 13)], ..int8.clone() }).unwrap();
    assert_eq!(calibration, fixed.report.calibration.as_ref().unwrap(), "the same scales as calibrating at 13");
    let outs = run_every_case("int8 calibrated bert", "bert_legacy", &bounded.kes, 5e-2);
    let at13 = &outs.iter().find(|(n, _)| n == "s13").expect("a case at 13").1;
    let case = dynamic::case(&f, "s13");
    let ins: Vec<Input<'_>> = case.inputs.iter().map(InputTensor::as_input).collect();
    let m = kestrel_rt::Model::from_bytes(&fixed.kes).unwrap();
    let want = m.session(1).unwrap().run_vec(&ins).unwrap();
    let d = max_abs_diff(&want[0], at13);
    assert!(d < 1e-3, "bounded vs fixed at 13: {d}");
    // Samples outside the range are refused by name.
    let narrow = vec![("sequence".to_string(), 20, 64)];
    let e = convert(&f.onnx, &ConvertOptions { bounds: narrow, ..int8.clone() }).unwrap_err().to_string();
    assert!(e.contains("`sequence` = 13") && e.contains("20..=64"), "{e}");
    // --int8-attention: measured at the samples' size, the bound's attention set to int8.
    let q = convert(&f.onnx, &ConvertOptions { bounds: f.bounds(), int8_attention: true, ..int8 }).unwrap();
    assert!(q.report.int8_internals.is_some());
    run_every_case("int8 attention bert", "bert_legacy", &q.kes, 5e-2);
}
