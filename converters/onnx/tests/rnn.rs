//! ONNX LSTM and GRU → Kestrel `Lstm` / `Gru` (models from `tests/data/make_rnn_models.py`):
//! two-layer bidirectional nn.LSTM / nn.GRU exports and a reverse-direction LSTM node match
//! tract (`verify`, at batch 3) and onnxruntime's saved outputs, on the CPU and on the GPU;
//! recurrences built here (a fixed batch of sequences, GRUs with `linear_before_reset = 0`,
//! LSTMs with peepholes) match tract; the ONNX features Kestrel's ops do not have are blockers
//! that say what they are.

use crate::common;
use crate::proto;

use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{
    compare, convert, read_npy, run_kestrel, verify, ConvertError, ConvertOptions, DType, InputData, InputTensor,
};
use kestrel_rt_wgpu::GpuSession;
use proto::{f32_tensor, float_value, i64_attr, str_attr, Msg};
use std::path::PathBuf;

const REL_TOL: f64 = 1e-4;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The saved batch of 3 inputs and onnxruntime's output for it.
fn io(name: &str) -> (kestrel_rt_onnx::InputTensor, Vec<f32>, usize) {
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
    for (name, op, what) in [("lstm_clip", "LSTM", "clip")] {
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
        let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
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

/// ONNX's GRU in its default form (`linear_before_reset = 0`, the reset gate on the state
/// before the recurrent product: Keras/TensorFlow exports), saved by `make_rnn_models.py`,
/// converts (one `Gru` per output read) and matches tract at batch 3.
#[test]
fn gru_with_the_reset_gate_on_the_state_matches_tract() {
    let path = data("gru_lbr0.onnx");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    assert!(conv.report.kestrel_ops.get("Gru").is_some_and(|&n| n >= 1), "{:?}", conv.report.kestrel_ops);
    // The saved batch of 3 of the same shape as this model's input ([N, T, I]).
    let (x, _, _) = io("lstm_reverse");
    let v = verify(&path, &conv.kes, &[x]).unwrap();
    println!("gru_lbr0: vs tract max abs {:.2e}, rel {:.2e}", v.max_abs_err, v.max_rel_err);
    assert_eq!(v.batch, 3);
    assert!(v.max_rel_err <= REL_TOL, "gru_lbr0: relative error {:.2e} against tract", v.max_rel_err);
}

/// The weights of a fixed-batch recurrence: W, R, B, the initial states as `[dirs, N, H]`, and
/// the LSTM's peepholes `[dirs, 3H]`.
struct Weights {
    w: Vec<f32>,
    r: Vec<f32>,
    b: Vec<f32>,
    h0: Vec<f32>,
    c0: Vec<f32>,
    p: Vec<f32>,
}

/// One recurrence to build: the cell, ONNX's layout and direction, N sequences, whether it has
/// initial states, and its variant (an LSTM with peepholes; a GRU with `linear_before_reset = 0`
/// rather than 1).
#[derive(Clone, Copy, Debug)]
struct Spec {
    lstm: bool,
    layout: i64,
    direction: &'static str,
    n: usize,
    states: bool,
    variant: bool,
}

impl Spec {
    fn dirs(&self) -> usize {
        if self.direction == "bidirectional" {
            2
        } else {
            1
        }
    }

    fn weights(&self, rng: &mut Rng) -> Weights {
        let (g, dirs, n) = (if self.lstm { 4 } else { 3 }, self.dirs(), self.n);
        Weights {
            w: rng.vec(dirs * g * H * I, 0.5),
            r: rng.vec(dirs * g * H * H, 0.5),
            b: rng.vec(dirs * 2 * g * H, 0.5),
            h0: rng.vec(dirs * n * H, 0.5),
            c0: rng.vec(dirs * n * H, 0.5),
            p: rng.vec(dirs * 3 * H, 0.5),
        }
    }
}

const T: usize = 4;
const I: usize = 3;
const H: usize = 5;

/// An LSTM or GRU node over `n` sequences at once (ONNX's batch axis a fixed N: a BiLSTM over an
/// image's rows, the conformance "batchwise" cases), every output read, non-zero initial states
/// when it has them (laid out `[N, dirs, H]` for layout 1), peepholes for an LSTM variant.
fn fixed_batch_model(spec: &Spec, layout: i64, wt: &Weights) -> (Vec<u8>, Vec<usize>) {
    let Spec { lstm, n, states, variant, direction, .. } = *spec;
    let dirs = spec.dirs();
    let g = if lstm { 4 } else { 3 };
    let xs = if layout == 1 { vec![n, T, I] } else { vec![T, n, I] };
    let (hs, state_vals): (Vec<usize>, Vec<Vec<f32>>) = {
        let lay = |v: &[f32]| -> Vec<f32> {
            if layout == 0 {
                return v.to_vec();
            }
            (0..n).flat_map(|b| (0..dirs).flat_map(move |d| (0..H).map(move |k| v[(d * n + b) * H + k]))).collect()
        };
        (if layout == 1 { vec![n, dirs, H] } else { vec![dirs, n, H] }, vec![lay(&wt.h0), lay(&wt.c0)])
    };
    let mut node = Msg::default().str(1, "x").str(1, "w").str(1, "r").str(1, "b");
    let state_names: &[&str] = if lstm { &["h0", "c0"] } else { &["h0"] };
    if states || (lstm && variant) {
        node = node.str(1, "");
        for s in state_names {
            node = node.str(1, if states { s } else { "" });
        }
    }
    if lstm && variant {
        node = node.str(1, "p");
    }
    node = node.str(2, "y").str(2, "y_h");
    if lstm {
        node = node.str(2, "y_c");
    }
    node = node
        .str(3, "rnn")
        .str(4, if lstm { "LSTM" } else { "GRU" })
        .msg(5, i64_attr("hidden_size", H as i64))
        .msg(5, i64_attr("layout", layout))
        .msg(5, str_attr("direction", direction));
    if !lstm && !variant {
        node = node.msg(5, i64_attr("linear_before_reset", 1));
    }
    let mut graph = Msg::default()
        .msg(1, node)
        .str(2, "g")
        .msg(5, f32_tensor("w", &[dirs, g * H, I], &wt.w))
        .msg(5, f32_tensor("r", &[dirs, g * H, H], &wt.r))
        .msg(5, f32_tensor("b", &[dirs, 2 * g * H], &wt.b));
    if states {
        for (k, s) in state_names.iter().enumerate() {
            graph = graph.msg(5, f32_tensor(s, &hs, &state_vals[k]));
        }
    }
    if lstm && variant {
        graph = graph.msg(5, f32_tensor("p", &[dirs, 3 * H], &wt.p));
    }
    graph = graph.msg(11, float_value("x", Some(&xs)));
    for o in ["y", "y_h", "y_c"].iter().take(if lstm { 3 } else { 2 }) {
        graph = graph.msg(12, float_value(o, None));
    }
    (Msg::default().int(1, 9).msg(8, Msg::default().int(2, 14)).str(2, "rnn.rs").msg(7, graph).0, xs)
}

/// Kestrel on the model (and the GPU against the CPU when there is one); tract on its layout-0
/// twin (tract's own layout-1 recurrence is wrong for two directions over N > 1 sequences: it
/// disagrees with ONNX's reference implementation, which Kestrel matches), its outputs moved
/// into layout 1's order. Returns (Kestrel, tract) outputs.
#[allow(clippy::type_complexity)]
fn run_fixed_batch(spec: &Spec, wt: &Weights, x0: &[f32], name: &str) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let (layout, dirs, n) = (spec.layout, spec.dirs(), spec.n);
    let file = |layout: i64| {
        let (onnx, xs) = fixed_batch_model(spec, layout, wt);
        let path = std::env::temp_dir()
            .join(format!("kestrel-rnn-batch-{}-{name}-{layout}.onnx", std::process::id()).replace(' ', "_"));
        std::fs::write(&path, onnx).unwrap();
        (path, xs)
    };
    // x0: [T, N, I]; layout 1 reads [N, T, I].
    let x1: Vec<f32> = (0..n)
        .flat_map(|b| (0..T).flat_map(move |t| (0..I).map(move |i| (b, t, i))))
        .map(|(b, t, i)| x0[(t * n + b) * I + i])
        .collect();
    let (p0, xs0) = file(0);
    let conv0 = convert(&p0, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let v = verify(&p0, &conv0.kes, &[InputTensor::f32(&xs0, x0.to_vec())]).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut tract = v.tract;
    let (path, xs, x) = if layout == 0 {
        (p0.clone(), xs0, x0.to_vec())
    } else {
        let (p, xs) = file(1);
        (p, xs, x1)
    };
    let conv = convert(&path, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&p0).ok();
    let kestrel = run_kestrel(&conv.kes, &[InputTensor::f32(&xs, x.clone())]).unwrap_or_else(|e| panic!("{name}: {e}"));
    if layout == 1 {
        // Y [T, dirs, N, H] → [N, T, dirs, H]; Y_h, Y_c [dirs, N, H] → [N, dirs, H].
        tract[0] = (0..n * T * dirs * H)
            .map(|e| {
                let (b, t, d, k) = (e / (T * dirs * H), e / (dirs * H) % T, e / H % dirs, e % H);
                tract[0][((t * dirs + d) * n + b) * H + k]
            })
            .collect();
        for o in tract.iter_mut().skip(1) {
            *o = (0..n * dirs * H)
                .map(|e| {
                    let (b, d, k) = (e / (dirs * H), e / H % dirs, e % H);
                    o[(d * n + b) * H + k]
                })
                .collect();
        }
    }
    if let Some(ctx) = gpu() {
        let cpu = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
        let cpu = cpu.cpu().unwrap();
        let mut outs: Vec<Vec<f32>> = kestrel.iter().map(|o| vec![0f32; o.len()]).collect();
        let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        GpuSession::new(&ctx, &cpu, 1)
            .and_then(|mut s| s.run(&[Input::F32(&x)], &mut refs))
            .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
        let (_, rel, _, _) = compare(&kestrel, &outs, &vec![1; outs.len()]).unwrap();
        assert!(rel <= REL_TOL, "{name}: GPU vs CPU {rel:.2e}");
    }
    (kestrel, tract)
}

/// Kestrel against tract on `spec` (every output); returns the relative error.
fn check_against_tract(spec: Spec, rng: &mut Rng) -> f64 {
    let name = format!("{spec:?}");
    let wt = spec.weights(rng);
    let x0 = rng.vec(T * spec.n * I, 1.0);
    let (kestrel, tract) = run_fixed_batch(&spec, &wt, &x0, &name);
    assert_eq!(kestrel.len(), if spec.lstm { 3 } else { 2 }, "{name}");
    let (_, rel, _, _) = compare(&tract, &kestrel, &vec![H; tract.len()]).unwrap();
    assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e} against tract");
    rel
}

#[test]
fn recurrences_over_a_fixed_batch_match_tract() {
    let mut rng = Rng::new(0x2AA7);
    for lstm in [true, false] {
        for layout in [0, 1] {
            for direction in ["forward", "bidirectional"] {
                for n in [2, 3] {
                    let spec = Spec { lstm, layout, direction, n, states: true, variant: false };
                    check_against_tract(spec, &mut rng);
                }
            }
        }
    }
}

/// GRUs with `linear_before_reset = 0` (ONNX's default) and LSTMs with peepholes `P`: every
/// direction, with and without initial states, one sequence and a fixed batch of two in either
/// layout, against tract (and the GPU against the CPU where there is one).
#[test]
fn reset_gate_on_the_state_and_peepholes_match_tract() {
    let mut rng = Rng::new(0x9EE9);
    let mut worst = 0f64;
    for lstm in [true, false] {
        for direction in ["forward", "reverse", "bidirectional"] {
            for states in [false, true] {
                for (layout, n) in [(0, 1), (0, 2), (1, 2)] {
                    let spec = Spec { lstm, layout, direction, n, states, variant: true };
                    worst = worst.max(check_against_tract(spec, &mut rng));
                }
            }
        }
    }
    println!("GRU linear_before_reset = 0 and LSTM peepholes: worst relative error {worst:.2e} against tract");
}
