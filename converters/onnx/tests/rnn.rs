//! ONNX LSTM and GRU → Kestrel `Lstm` / `Gru` (models from `tests/data/make_rnn_models.py`):
//! two-layer bidirectional nn.LSTM / nn.GRU exports and a reverse-direction LSTM node match
//! tract (`verify`, at batch 3) and onnxruntime's saved outputs, on the CPU and on the GPU;
//! the ONNX features Kestrel's ops do not have are blockers that say what they are.

mod common;

use common::gpu;
use kestrel::Input;
use kestrel_onnx::{compare, convert, read_npy, run_kestrel, verify, ConvertError, ConvertOptions, DType, InputData};
use kestrel_wgpu::GpuSession;
use std::path::PathBuf;

const REL_TOL: f64 = 1e-4;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The saved batch of 3 inputs and onnxruntime's output for it.
fn io(name: &str) -> (kestrel_onnx::InputTensor, Vec<f32>, usize) {
    let x = read_npy(data(&format!("{name}_in.npy"))).unwrap();
    let y = read_npy(data(&format!("{name}_out.npy"))).unwrap();
    let last = *y.shape.last().unwrap();
    let InputData::F32(want) = y.data else { panic!("{name}: output is not f32") };
    (x, want, last)
}

#[test]
fn recurrent_models_match_tract_and_onnxruntime() {
    for (name, op, nodes) in [("lstm_bi2", "Lstm", 6), ("gru_bi2", "Gru", 4), ("lstm_reverse", "Lstm", 1)] {
        let path = data(&format!("{name}.onnx"));
        let conv = convert(&path, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ops = &conv.report.kestrel_ops;
        // One Kestrel node per ONNX output read (PyTorch's h_n and c_n concatenate every layer's
        // Y_h and Y_c, so lstm_bi2 reads all three outputs of both layers and gru_bi2 Y and Y_h
        // of both), and no Scan or loop left.
        assert_eq!(ops.get(op), Some(&nodes), "{name}: {ops:?}");
        let (x, want, last) = io(name);
        let got = run_kestrel(&conv.kes, std::slice::from_ref(&x)).unwrap();
        let (abs, rel, top1, _) = compare(std::slice::from_ref(&want), &got[..1], &[last]).unwrap();
        println!("{name}: vs onnxruntime max abs {abs:.2e}, rel {rel:.2e}, top-1 {top1:.2}");
        assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e} against onnxruntime");
        let v = verify(&path, &conv.kes, std::slice::from_ref(&x)).unwrap();
        println!("{name}: vs tract max abs {:.2e}, rel {:.2e}", v.max_abs_err, v.max_rel_err);
        assert_eq!(v.batch, 3);
        assert!(v.max_rel_err <= REL_TOL, "{name}: relative error {:.2e} against tract", v.max_rel_err);
        // tract (through the importer's op, which delegates to tract's implementation) agrees
        // with onnxruntime too.
        let (_, rel_tract, _, _) = compare(&[want], &v.tract[..1], &[last]).unwrap();
        assert!(rel_tract <= REL_TOL, "{name}: tract vs onnxruntime {rel_tract:.2e}");
    }
}

#[test]
fn int8_recurrent_weights_stay_close() {
    let opts = ConvertOptions { weights: DType::I8, ..ConvertOptions::default() };
    for name in ["lstm_bi2", "gru_bi2"] {
        let conv = convert(data(&format!("{name}.onnx")), &opts).unwrap();
        // The recurrent matrices are int8 (a scale per gate row); biases and states stay f32.
        let int8 = conv.report.weights.iter().filter(|w| w.dtype == "int8").count();
        assert!(int8 >= 4, "{name}: {int8} int8 weights");
        let (x, want, last) = io(name);
        let got = run_kestrel(&conv.kes, &[x]).unwrap();
        let (_, rel, _, _) = compare(&[want], &got[..1], &[last]).unwrap();
        println!("{name}: int8 weights, rel {rel:.2e}");
        assert!(rel < 0.05, "{name}: int8 relative error {rel:.2e}");
    }
}

#[test]
fn unsupported_recurrent_features_are_named() {
    for (name, op, what) in [("lstm_clip", "LSTM", "clip"), ("gru_lbr0", "GRU", "linear_before_reset = 0")] {
        match convert(data(&format!("{name}.onnx")), &ConvertOptions::default()) {
            Err(ConvertError::Unsupported { blockers, .. }) => {
                assert!(
                    blockers.iter().any(|b| b.op == op && b.why.contains(what)),
                    "{name}: {blockers:?} should name {op} and {what}"
                );
            }
            other => panic!("{name}: expected a blocker, got {other:?}"),
        }
    }
}

#[test]
fn recurrent_models_match_onnxruntime_on_the_gpu() {
    let Some(ctx) = gpu() else { return };
    for name in ["lstm_bi2", "gru_bi2", "lstm_reverse"] {
        let conv = convert(data(&format!("{name}.onnx")), &ConvertOptions::default()).unwrap();
        let model = kestrel::Model::from_bytes(&conv.kes).unwrap();
        let cpu = model.cpu().unwrap();
        let (x, want, last) = io(name);
        let InputData::F32(xs) = &x.data else { unreachable!() };
        let mut got = vec![0f32; want.len()];
        let mut s = GpuSession::new(&ctx, &cpu, x.shape[0]).unwrap();
        s.run(&[Input::F32(xs)], &mut [got.as_mut_slice()]).unwrap();
        let (_, rel, _, _) = compare(&[want], &[got], &[last]).unwrap();
        println!("{name}: wgpu vs onnxruntime rel {rel:.2e}");
        assert!(rel <= REL_TOL, "{name}: wgpu relative error {rel:.2e}");
    }
}
