//! Recurrences and scans with no fused Kestrel op, unrolled at conversion (`lower/scan.rs`,
//! `lower/rnn/steps.rs`): LSTMs, GRUs (both reset forms) and RNNs whose W, R, B, initial states
//! and peepholes are graph inputs (as ONNX's own tests feed them) match tract on random inputs,
//! in every direction and both layouts, one sequence or a fixed batch of two; the same nodes with
//! constant weights keep the fused `Lstm`/`Gru` op; an ONNX `Scan` with two states, two scanned
//! inputs on different axes (one reversed), an outer value read by its body and two scan
//! outputs (one reversed) matches a direct f64 computation and tract; a Scan past the unrolling
//! limit is a blocker that says so. Where there is a GPU, it agrees with the CPU.

use crate::common;
use crate::proto;

use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{convert, run_kestrel, verify, ConvertError, ConvertOptions, InputTensor};
use proto::{f32_tensor, float_value, i64_attr, i64s_attr, str_attr, Msg};
use std::path::PathBuf;

const REL_TOL: f64 = 1e-4;
const T: usize = 4;
const I: usize = 3;
const H: usize = 5;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    Lstm,
    /// `linear_before_reset`.
    Gru(bool),
    Rnn,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru(_) => 3,
            Cell::Rnn => 1,
        }
    }
}

/// A recurrence's graph: X, W, R, B, initial_h (initial_c and P for an LSTM); each parameter a
/// graph input, or an initializer with `consts`' values where given. Returns the model and the
/// graph inputs (name, shape) in order.
fn recurrence(
    cell: Cell,
    direction: &str,
    layout: i64,
    n: usize,
    consts: Option<&[Vec<f32>]>,
) -> (Vec<u8>, Vec<(String, Vec<usize>)>) {
    let dirs = if direction == "bidirectional" { 2 } else { 1 };
    let g = cell.gates();
    let xs = if layout == 1 { vec![n, T, I] } else { vec![T, n, I] };
    let hs = if layout == 1 { vec![n, dirs, H] } else { vec![dirs, n, H] };
    let mut params: Vec<(&str, Vec<usize>)> = vec![
        ("w", vec![dirs, g * H, I]),
        ("r", vec![dirs, g * H, H]),
        ("b", vec![dirs, 2 * g * H]),
        ("h0", hs.clone()),
    ];
    if cell == Cell::Lstm {
        params.push(("c0", hs));
        params.push(("p", vec![dirs, 3 * H]));
    }
    let mut node = Msg::default().str(1, "x").str(1, "w").str(1, "r").str(1, "b").str(1, "").str(1, "h0");
    if cell == Cell::Lstm {
        node = node.str(1, "c0").str(1, "p");
    }
    let outs: &[&str] = if cell == Cell::Lstm { &["y", "y_h", "y_c"] } else { &["y", "y_h"] };
    for o in outs {
        node = node.str(2, o);
    }
    let op = match cell {
        Cell::Lstm => "LSTM",
        Cell::Gru(_) => "GRU",
        Cell::Rnn => "RNN",
    };
    node = node
        .str(3, "rec")
        .str(4, op)
        .msg(5, i64_attr("hidden_size", H as i64))
        .msg(5, i64_attr("layout", layout))
        .msg(5, str_attr("direction", direction));
    if cell == Cell::Gru(true) {
        node = node.msg(5, i64_attr("linear_before_reset", 1));
    }
    let mut graph = Msg::default().msg(1, node).str(2, "g").msg(11, float_value("x", Some(&xs)));
    let mut inputs = vec![("x".to_string(), xs)];
    for (k, (name, shape)) in params.into_iter().enumerate() {
        match consts {
            Some(v) => graph = graph.msg(5, f32_tensor(name, &shape, &v[k])),
            None => {
                graph = graph.msg(11, float_value(name, Some(&shape)));
                inputs.push((name.to_string(), shape));
            }
        }
    }
    for o in outs {
        graph = graph.msg(12, float_value(o, None));
    }
    (Msg::default().int(1, 9).msg(8, Msg::default().int(2, 14)).str(2, "unrolled.rs").msg(7, graph).0, inputs)
}

fn write(name: &str, onnx: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("kestrel-unrolled-{}-{name}.onnx", std::process::id()));
    std::fs::write(&path, onnx).unwrap();
    path
}

fn random_inputs(inputs: &[(String, Vec<usize>)], rng: &mut Rng) -> Vec<InputTensor> {
    inputs.iter().map(|(_, s)| InputTensor::f32(s, rng.vec(s.iter().product(), 0.8))).collect()
}

/// `data` of `shape` with its axes permuted (`out` axis `i` is axis `perm[i]`).
fn permute(data: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let strides: Vec<usize> = (0..shape.len()).map(|a| shape[a + 1..].iter().product()).collect();
    (0..data.len())
        .map(|mut e| {
            let mut src = 0;
            for i in (0..out.len()).rev() {
                src += (e % out[i]) * strides[perm[i]];
                e /= out[i];
            }
            data[src]
        })
        .collect()
}

/// On the GPU, when there is one: the model's outputs against the CPU's `cpu` (batch 1).
fn gpu_agrees(name: &str, kes: &[u8], feeds: &[InputTensor], cpu: &[Vec<f32>]) {
    let Some(ctx) = common::gpu() else { return };
    let model = kestrel_rt::Model::from_bytes(kes).unwrap();
    let model = model.cpu().unwrap();
    let mut outs: Vec<Vec<f32>> = cpu.iter().map(|o| vec![0f32; o.len()]).collect();
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
    let inputs: Vec<kestrel_rt::Input<'_>> = feeds.iter().map(|f| kestrel_rt::Input::F32(f32_data(f))).collect();
    kestrel_rt_wgpu::GpuSession::new(&ctx, &model, 1)
        .and_then(|mut s| s.run(&inputs, &mut refs))
        .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
    let (_, rel, _, _) = kestrel_rt_onnx::compare(cpu, &outs, &vec![1; outs.len()]).unwrap();
    assert!(rel <= REL_TOL, "{name}: GPU vs CPU relative error {rel:.2e}");
}

fn f32_data(t: &InputTensor) -> &[f32] {
    match &t.data {
        kestrel_rt_onnx::InputData::F32(v) => v,
        kestrel_rt_onnx::InputData::I64(_) => unreachable!("f32 inputs only"),
    }
}

/// Every cell, direction and layout, one sequence and a fixed batch of two, all parameters
/// given at run time: Kestrel (unrolled: no `Lstm`/`Gru` node) against tract, every output.
/// Layout 1 is checked against tract on its layout-0 twin, inputs and outputs moved between the
/// layouts (tract's own layout-1 recurrence disagrees with ONNX's reference for two directions
/// over N > 1 sequences; see `tests/rnn.rs`).
#[test]
fn recurrences_with_run_time_weights_match_tract() {
    let mut rng = Rng::new(0x5CA7);
    let mut worst = 0f64;
    for cell in [Cell::Lstm, Cell::Gru(false), Cell::Gru(true), Cell::Rnn] {
        for direction in ["forward", "reverse", "bidirectional"] {
            for (layout, n) in [(0, 1), (0, 2), (1, 2)] {
                let name = format!("{cell:?}-{direction}-{layout}-{n}");
                let (onnx0, inputs0) = recurrence(cell, direction, 0, n, None);
                let path0 = write(&format!("{name}-0"), &onnx0);
                let feeds0 = random_inputs(&inputs0, &mut rng);
                let conv0 = convert(&path0, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
                let v = verify(&path0, &conv0.kes, &feeds0).unwrap_or_else(|e| panic!("{name}: {e}"));
                std::fs::remove_file(&path0).ok();
                assert_eq!(v.tract.len(), if cell == Cell::Lstm { 3 } else { 2 }, "{name}");
                assert!(v.max_rel_err <= REL_TOL, "{name}: relative error {:.2e} against tract", v.max_rel_err);
                worst = worst.max(v.max_rel_err);
                let (onnx, inputs) = recurrence(cell, direction, layout, n, None);
                let path = write(&name, &onnx);
                let conv = convert(&path, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
                std::fs::remove_file(&path).ok();
                for c in [&conv0, &conv] {
                    let ops = &c.report.kestrel_ops;
                    assert!(ops.get("Lstm").is_none() && ops.get("Gru").is_none(), "{name}: {ops:?}");
                    assert!(ops.get("MatMul").is_some(), "{name}: {ops:?}");
                }
                if layout == 0 {
                    continue;
                }
                // Layout 1: x [N, T, I] and the states [N, dirs, H] from layout 0's [T, N, I] and
                // [dirs, N, H]; Y [N, T, dirs, H] from [T, dirs, N, H], Y_h/Y_c [N, dirs, H].
                let feeds: Vec<InputTensor> = inputs0
                    .iter()
                    .zip(&inputs)
                    .zip(&feeds0)
                    .map(|(((n0, s0), (n1, s1)), f)| {
                        assert_eq!(n0, n1);
                        let moved = matches!(n0.as_str(), "x" | "h0" | "c0");
                        let data = if moved { permute(f32_data(f), s0, &[1, 0, 2]) } else { f32_data(f).to_vec() };
                        InputTensor::f32(s1, data)
                    })
                    .collect();
                let got = run_kestrel(&conv.kes, &feeds).unwrap_or_else(|e| panic!("{name}: {e}"));
                gpu_agrees(&name, &conv.kes, &feeds, &got);
                let dirs = if direction == "bidirectional" { 2 } else { 1 };
                let want: Vec<Vec<f32>> = v
                    .tract
                    .iter()
                    .enumerate()
                    .map(|(k, o)| {
                        if k == 0 {
                            permute(o, &[T, dirs, n, H], &[2, 0, 1, 3])
                        } else {
                            permute(o, &[dirs, n, H], &[1, 0, 2])
                        }
                    })
                    .collect();
                let (_, rel, _, _) = kestrel_rt_onnx::compare(&want, &got, &vec![H; want.len()]).unwrap();
                assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e} against tract (layout 0)");
                worst = worst.max(rel);
            }
        }
    }
    println!("run-time recurrence parameters: worst relative error {worst:.2e} against tract");
}

/// The same LSTM and GRU with constant parameters keep their fused op (one per output read),
/// and agree with the unrolled form fed the same values.
#[test]
fn constant_parameters_keep_the_fused_op_and_agree_with_the_unrolled_form() {
    let mut rng = Rng::new(0xF00D);
    for cell in [Cell::Lstm, Cell::Gru(true)] {
        let name = format!("{cell:?}-const");
        let (onnx, inputs) = recurrence(cell, "bidirectional", 0, 1, None);
        let feeds = random_inputs(&inputs, &mut rng);
        let values: Vec<Vec<f32>> = feeds[1..].iter().map(|f| f32_data(f).to_vec()).collect();
        let (konst, _) = recurrence(cell, "bidirectional", 0, 1, Some(&values));
        let (p_run, p_const) = (write(&format!("{name}-run"), &onnx), write(&name, &konst));
        let fused = convert(&p_const, &ConvertOptions::default()).unwrap();
        let op = if cell == Cell::Lstm { "Lstm" } else { "Gru" };
        let outputs = if cell == Cell::Lstm { 3 } else { 2 };
        assert_eq!(fused.report.kestrel_ops.get(op), Some(&outputs), "{name}: {:?}", fused.report.kestrel_ops);
        let unrolled = convert(&p_run, &ConvertOptions::default()).unwrap();
        let a = run_kestrel(&fused.kes, &feeds[..1]).unwrap();
        let b = run_kestrel(&unrolled.kes, &feeds).unwrap();
        std::fs::remove_file(&p_run).ok();
        std::fs::remove_file(&p_const).ok();
        let (_, rel, _, _) = kestrel_rt_onnx::compare(&a, &b, &vec![H; a.len()]).unwrap();
        assert!(rel <= REL_TOL, "{name}: fused vs unrolled relative error {rel:.2e}");
    }
}

fn node(inputs: &[&str], outputs: &[&str], op: &str) -> Msg {
    let mut n = Msg::default();
    for i in inputs {
        n = n.str(1, i);
    }
    for o in outputs {
        n = n.str(2, o);
    }
    n.str(4, op)
}

/// A Scan (opset 11) over `t` steps: states s1, s2 `[2]`; scanned x1 `[t, 2]` (axis 0,
/// forwards) and x2 `[2, t]` (axis 1, backwards); outer k `[2]` read by the body; per step
/// `s1 += a`, `s2 = tanh(s2 ⊙ c) + k`, emitting `s1 ⊙ c` on axis 0 forwards and `s2 − a` on
/// axis 1 backwards (a, c the step's x1 row and x2 column).
fn scan_model(t: usize) -> Vec<u8> {
    let v2 = |n: &str| float_value(n, Some(&[2]));
    let body = Msg::default()
        .msg(1, node(&["s1", "a"], &["s1n"], "Add"))
        .msg(1, node(&["s2", "c"], &["m"], "Mul"))
        .msg(1, node(&["m"], &["th"], "Tanh"))
        .msg(1, node(&["th", "k"], &["s2n"], "Add"))
        .msg(1, node(&["s1n", "c"], &["o1"], "Mul"))
        .msg(1, node(&["s2n", "a"], &["o2"], "Sub"))
        .str(2, "body")
        .msg(11, v2("s1"))
        .msg(11, v2("s2"))
        .msg(11, v2("a"))
        .msg(11, v2("c"))
        .msg(12, v2("s1n"))
        .msg(12, v2("s2n"))
        .msg(12, v2("o1"))
        .msg(12, v2("o2"));
    let scan = node(&["s1_0", "s2_0", "x1", "x2"], &["s1_t", "s2_t", "y1", "y2"], "Scan")
        .str(3, "scan")
        .msg(5, Msg::default().str(1, "body").int(20, 5).msg(6, body))
        .msg(5, i64_attr("num_scan_inputs", 2))
        .msg(5, i64s_attr("scan_input_axes", &[0, 1]))
        .msg(5, i64s_attr("scan_input_directions", &[0, 1]))
        .msg(5, i64s_attr("scan_output_axes", &[0, 1]))
        .msg(5, i64s_attr("scan_output_directions", &[0, 1]));
    let mut graph = Msg::default().msg(1, scan).str(2, "g");
    for (name, shape) in [("s1_0", vec![2]), ("s2_0", vec![2]), ("x1", vec![t, 2]), ("x2", vec![2, t]), ("k", vec![2])]
    {
        graph = graph.msg(11, float_value(name, Some(&shape)));
    }
    for o in ["s1_t", "s2_t", "y1", "y2"] {
        graph = graph.msg(12, float_value(o, None));
    }
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 11)).str(2, "unrolled.rs").msg(7, graph).0
}

/// The Scan of [`scan_model`] computed directly in f64: final s1, s2, then y1 `[t, 2]`, y2
/// `[2, t]`.
fn scan_reference(t: usize, s1: &[f32], s2: &[f32], x1: &[f32], x2: &[f32], k: &[f32]) -> Vec<Vec<f32>> {
    let mut s1: Vec<f64> = s1.iter().map(|&v| v as f64).collect();
    let mut s2: Vec<f64> = s2.iter().map(|&v| v as f64).collect();
    let (mut y1, mut y2) = (vec![0f64; t * 2], vec![0f64; 2 * t]);
    for i in 0..t {
        let col = t - 1 - i;
        for j in 0..2 {
            let a = x1[i * 2 + j] as f64;
            let c = x2[j * t + col] as f64;
            s1[j] += a;
            s2[j] = (s2[j] * c).tanh() + k[j] as f64;
            y1[i * 2 + j] = s1[j] * c;
            y2[j * t + col] = s2[j] - a;
        }
    }
    [s1, s2, y1, y2].into_iter().map(|v| v.into_iter().map(|x| x as f32).collect()).collect()
}

#[test]
fn scan_with_states_reversed_axes_and_an_outer_value_matches_a_reference_and_tract() {
    let mut rng = Rng::new(0x5CA9);
    let t = 6;
    let path = write("scan", &scan_model(t));
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    let shapes = [vec![2], vec![2], vec![t, 2], vec![2, t], vec![2]];
    let vals: Vec<Vec<f32>> = shapes.iter().map(|s| rng.vec(s.iter().product(), 1.0)).collect();
    let feeds: Vec<InputTensor> = shapes.iter().zip(&vals).map(|(s, v)| InputTensor::f32(s, v.clone())).collect();
    let want = scan_reference(t, &vals[0], &vals[1], &vals[2], &vals[3], &vals[4]);
    let got = run_kestrel(&conv.kes, &feeds).unwrap();
    gpu_agrees("scan", &conv.kes, &feeds, &got);
    let (abs, rel, _, _) = kestrel_rt_onnx::compare(&want, &got, &[2, 2, 2, t]).unwrap();
    println!("scan: vs the f64 reference max abs {abs:.2e}, rel {rel:.2e}");
    assert!(rel <= REL_TOL, "scan: relative error {rel:.2e} against the reference");
    let v = verify(&path, &conv.kes, &feeds).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(v.max_rel_err <= REL_TOL, "scan: relative error {:.2e} against tract", v.max_rel_err);
}

#[test]
fn a_scan_past_the_unrolling_limit_is_a_named_blocker() {
    let path = write("scan-long", &scan_model(40_000));
    let res = convert(&path, &ConvertOptions::default());
    std::fs::remove_file(&path).ok();
    match res {
        Err(ConvertError::Unsupported { blockers, .. }) => {
            assert!(
                blockers
                    .iter()
                    .any(|b| b.op == "Scan" && b.why.contains("40000 iterations") && b.why.contains("65536")),
                "{blockers:?}"
            );
        }
        other => panic!("expected a blocker, got {:?}", other.map(|c| c.report.kestrel_ops)),
    }
}
