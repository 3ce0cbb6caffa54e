//! ONNX's `Attention` op (opsets 23–25) as the onnx reference (`onnx/reference/ops/op_attention.py`)
//! defines it, for the semantics tract's importer refuses or ignores and Kestrel parses itself
//! (`src/attention/`): sliding windows, the causal mask offset by a past key/value cache
//! (bottom-right aligned) and by `nonpad_kv_seqlen`, the key padding of `nonpad_kv_seqlen`, a
//! boolean mask (with `false` entries: tract added it as 0/1), masks shorter than the keys,
//! `qk_matmul_output` in its four modes, the present key/value outputs, rows with no key to
//! attend (0). Each one-node model runs on seeded random inputs against an f64 reference written
//! from the onnx reference; malformed attributes are refused by name.

use crate::common;

use crate::proto;

use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{convert, run_kestrel, ConvertOptions, InputData, InputTensor};
use proto::{float_attr, i64_attr, Msg};

/// A tensor's `ValueInfoProto` of ONNX element type `elem` (1 FLOAT, 7 INT64, 9 BOOL), its shape
/// when given.
fn value(name: &str, elem: i64, dims: Option<&[usize]>) -> Msg {
    let mut tensor = Msg::default().int(1, elem);
    if let Some(dims) = dims {
        tensor = tensor.msg(2, dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64))));
    }
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, tensor))
}

/// The given mask: its shape (rank 1 to 4, right-aligned against `[1, Hq, Sq, Skv]`, the last
/// axis possibly shorter than the keys) and whether it is boolean.
#[derive(Clone)]
struct Mask {
    shape: Vec<usize>,
    boolean: bool,
}

/// One Attention node's configuration (batch 1, 4-D inputs).
#[derive(Clone, Default)]
struct Case {
    hq: usize,
    hk: usize,
    sq: usize,
    /// New keys.
    s: usize,
    /// Past keys (0: no cache inputs).
    past: usize,
    d: usize,
    dv: usize,
    mask: Option<Mask>,
    causal: bool,
    window: (i64, i64),
    nonpad: Option<i64>,
    softcap: f32,
    scale: Option<f32>,
    /// `Some(mode)`: the node has `qk_matmul_output`.
    qk: Option<i64>,
    present: bool,
}

impl Case {
    fn skv(&self) -> usize {
        self.past + self.s
    }

    fn model(&self) -> Vec<u8> {
        let at = |n: &str, on: bool| if on { n.to_string() } else { String::new() };
        let inputs = ["q", "k", "v"].map(String::from).into_iter().chain([at("mask", self.mask.is_some())]).chain([
            at("past_key", self.past > 0),
            at("past_value", self.past > 0),
            at("nonpad", self.nonpad.is_some()),
        ]);
        let inputs: Vec<String> = inputs.collect();
        let last = inputs.iter().rposition(|s| !s.is_empty()).unwrap_or(2);
        let outputs = [
            "y".to_string(),
            at("present_key", self.present),
            at("present_value", self.present),
            at("qk", self.qk.is_some()),
        ];
        let last_out = outputs.iter().rposition(|s| !s.is_empty()).unwrap_or(0);
        let mut node = Msg::default();
        for i in &inputs[..=last] {
            node = node.str(1, i);
        }
        for o in &outputs[..=last_out] {
            node = node.str(2, o);
        }
        node = node.str(3, "attn").str(4, "Attention");
        let mut attrs = vec![];
        if self.causal {
            attrs.push(i64_attr("is_causal", 1));
        }
        if self.window != (-1, -1) {
            attrs.push(i64_attr("left_window_size", self.window.0));
            attrs.push(i64_attr("right_window_size", self.window.1));
        }
        if self.softcap != 0.0 {
            attrs.push(float_attr("softcap", self.softcap));
        }
        if let Some(s) = self.scale {
            attrs.push(float_attr("scale", s));
        }
        if let Some(m) = self.qk {
            attrs.push(i64_attr("qk_matmul_output_mode", m));
        }
        for a in attrs {
            node = node.msg(5, a);
        }
        let mut g = Msg::default().msg(1, node).str(2, "g");
        let (hq, hk, sq, s, p, d, dv) = (self.hq, self.hk, self.sq, self.s, self.past, self.d, self.dv);
        g = g.msg(11, value("q", 1, Some(&[1, hq, sq, d])));
        g = g.msg(11, value("k", 1, Some(&[1, hk, s, d]))).msg(11, value("v", 1, Some(&[1, hk, s, dv])));
        if let Some(m) = &self.mask {
            g = g.msg(11, value("mask", if m.boolean { 9 } else { 1 }, Some(&m.shape)));
        }
        if p > 0 {
            g = g
                .msg(11, value("past_key", 1, Some(&[1, hk, p, d])))
                .msg(11, value("past_value", 1, Some(&[1, hk, p, dv])));
        }
        if self.nonpad.is_some() {
            g = g.msg(11, value("nonpad", 7, Some(&[1])));
        }
        for o in outputs.iter().filter(|o| !o.is_empty()) {
            g = g.msg(12, value(o, 1, None));
        }
        Msg::default().int(1, 9).msg(8, Msg::default().int(2, 25)).str(2, "test").msg(7, g).0
    }
}

/// Seeded inputs: q, k, v, mask (a boolean one as 0/1, a third false, a float one with a third
/// −∞, row 1 of both masked entirely), past key and value.
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Vec<f32>,
    pk: Vec<f32>,
    pv: Vec<f32>,
}

fn inputs(c: &Case, seed: u64) -> Inputs {
    let mut rng = Rng::new(seed);
    let (q, k, v) = (rng.vec(c.hq * c.sq * c.d, 2.0), rng.vec(c.hk * c.s * c.d, 2.0), rng.vec(c.hk * c.s * c.dv, 2.0));
    let (pk, pv) = (rng.vec(c.hk * c.past * c.d, 2.0), rng.vec(c.hk * c.past * c.dv, 2.0));
    let mask = match &c.mask {
        None => vec![],
        Some(m) => {
            let rank = m.shape.len();
            let (last, n) = (m.shape[rank - 1], m.shape.iter().product::<usize>());
            let rows_axis = if rank >= 2 { m.shape[rank - 2] } else { 1 };
            (0..n)
                .map(|f| {
                    let row = (f / last) % rows_axis;
                    let r = rng.uniform();
                    let masked = (rank >= 2 && row == 1) || r < -1.0 / 3.0;
                    match (m.boolean, masked) {
                        (true, m) => f32::from(u8::from(!m)),
                        (false, true) => f32::NEG_INFINITY,
                        (false, false) => r,
                    }
                })
                .collect()
        }
    };
    Inputs { q, k, v, mask, pk, pv }
}

/// The onnx reference, in f64: `(y [Hq, Sq, Dv], qk [Hq, Sq, Skv] for the node's mode,
/// present key, present value)`.
fn reference(c: &Case, x: &Inputs) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (hq, hk, sq, skv, d, dv, p) = (c.hq, c.hk, c.sq, c.skv(), c.d, c.dv, c.past);
    let cat = |past: &[f32], new: &[f32], w: usize| -> Vec<f64> {
        (0..hk * skv * w)
            .map(|f| {
                let (h, j, e) = (f / (skv * w), f / w % skv, f % w);
                f64::from(if j < p { past[(h * p + j) * w + e] } else { new[(h * c.s + j - p) * w + e] })
            })
            .collect()
    };
    let (kf, vf) = (cat(&x.pk, &x.k, d), cat(&x.pv, &x.v, dv));
    let bias = |h: usize, i: usize, j: usize| -> f64 {
        let mut b = 0.0;
        if let Some(m) = &c.mask {
            let r = m.shape.len();
            let last = m.shape[r - 1];
            let idx = [0usize, h, i, j];
            let v = if j >= last {
                None
            } else {
                let mut f = 0;
                for (a, &n) in m.shape.iter().enumerate() {
                    f = f * n + if n == 1 { 0 } else { idx[4 - r + a] };
                }
                Some(x.mask[f])
            };
            b += match (m.boolean, v) {
                (_, None) => f64::NEG_INFINITY,
                (true, Some(0.0)) => f64::NEG_INFINITY,
                (true, Some(_)) => 0.0,
                (false, Some(v)) => f64::from(v),
            };
        }
        let off = match c.nonpad {
            Some(n) => n - sq as i64,
            None => p as i64,
        };
        let diff = i as i64 + off - j as i64;
        let inside = (!c.causal || diff >= 0)
            && (c.window.0 < 0 || diff <= c.window.0)
            && (c.window.1 < 0 || -diff <= c.window.1)
            && c.nonpad.is_none_or(|n| (j as i64) < n);
        if inside {
            b
        } else {
            f64::NEG_INFINITY
        }
    };
    let scale = c.scale.map_or(1.0 / (d as f64).sqrt(), f64::from);
    let cap = f64::from(c.softcap.max(0.0));
    let (mut y, mut qk) = (vec![0f64; hq * sq * dv], vec![0f64; hq * sq * skv]);
    for h in 0..hq {
        let g = h / (hq / hk);
        for i in 0..sq {
            let capped: Vec<f64> = (0..skv)
                .map(|j| {
                    let dot: f64 =
                        (0..d).map(|e| f64::from(x.q[(h * sq + i) * d + e]) * kf[(g * skv + j) * d + e]).sum();
                    let s = scale * dot;
                    if cap > 0.0 {
                        cap * (s / cap).tanh()
                    } else {
                        s
                    }
                })
                .collect();
            let biased: Vec<f64> = (0..skv).map(|j| capped[j] + bias(h, i, j)).collect();
            let all_masked = (0..skv).all(|j| bias(h, i, j) == f64::NEG_INFINITY);
            let mx = biased.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = biased.iter().map(|b| if all_masked { 0.0 } else { (b - mx).exp() }).collect();
            let total: f64 = e.iter().sum();
            let w: Vec<f64> = e.iter().map(|x| if all_masked { 0.0 } else { x / total }).collect();
            for j in 0..skv {
                for o in 0..dv {
                    y[(h * sq + i) * dv + o] += w[j] * vf[(g * skv + j) * dv + o];
                }
                qk[(h * sq + i) * skv + j] = match c.qk.unwrap_or(0) {
                    0 | 1 => capped[j],
                    2 => biased[j],
                    _ => w[j],
                };
            }
        }
    }
    (y, qk, kf, vf)
}

fn convert_model(name: &str, c: &Case) -> Result<Vec<u8>, String> {
    let path = std::env::temp_dir().join(format!("kestrel-onnx-attention-{}-{name}.onnx", std::process::id()));
    std::fs::write(&path, c.model()).map_err(|e| e.to_string())?;
    let conv = convert(&path, &ConvertOptions::default()).map_err(|e| e.to_string());
    std::fs::remove_file(&path).ok();
    Ok(conv?.kes)
}

/// Converts and runs `c` on seeded inputs, every output against the reference (`−∞` exactly).
fn check(name: &str, c: &Case, seed: u64) {
    let x = inputs(c, seed);
    let kes = convert_model(name, c).unwrap_or_else(|e| panic!("{name}: {e}"));
    let f = |shape: &[usize], v: &[f32]| InputTensor { shape: shape.to_vec(), data: InputData::F32(v.to_vec()) };
    let (hq, hk, sq, s, p, d, dv) = (c.hq, c.hk, c.sq, c.s, c.past, c.d, c.dv);
    let mut feeds = vec![f(&[1, hq, sq, d], &x.q), f(&[1, hk, s, d], &x.k), f(&[1, hk, s, dv], &x.v)];
    if let Some(m) = &c.mask {
        feeds.push(f(&m.shape, &x.mask));
    }
    if p > 0 {
        feeds.push(f(&[1, hk, p, d], &x.pk));
        feeds.push(f(&[1, hk, p, dv], &x.pv));
    }
    if let Some(n) = c.nonpad {
        feeds.push(InputTensor { shape: vec![1], data: InputData::I64(vec![n]) });
    }
    let mut runs = vec![("cpu", run_kestrel(&kes, &feeds).unwrap_or_else(|e| panic!("{name}: {e}")))];
    if let Some(ctx) = common::gpu() {
        let model = kestrel_rt::Model::from_bytes(&kes).unwrap();
        let cpu = model.cpu().unwrap();
        let ins: Vec<kestrel_rt::Input<'_>> = feeds.iter().map(InputTensor::as_input).collect();
        let mut outs: Vec<Vec<f32>> = runs[0].1.iter().map(|o| vec![0f32; o.len()]).collect();
        let mut slots: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
        kestrel_rt_wgpu::GpuSession::new(&ctx, &cpu, 1)
            .and_then(|mut s| s.run(&ins, &mut slots))
            .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
        runs.push(("wgpu", outs));
    }
    let (y, qk, kf, vf) = reference(c, &x);
    let mut want = vec![("y", y)];
    if c.present {
        want.push(("present_key", kf));
        want.push(("present_value", vf));
    }
    if c.qk.is_some() {
        want.push(("qk_matmul_output", qk));
    }
    for (backend, got) in &runs {
        assert_eq!(got.len(), want.len(), "{name} {backend}: outputs");
        compare(&format!("{name} {backend}"), &want, got);
    }
}

/// Each output against its reference: within 1e-5 of the largest finite value, −∞ exactly.
fn compare(name: &str, want: &[(&str, Vec<f64>)], got: &[Vec<f32>]) {
    for ((what, w), g) in want.iter().zip(got) {
        assert_eq!(g.len(), w.len(), "{name} {what}: length");
        let finite: Vec<f64> = w.iter().copied().filter(|v| v.is_finite()).collect();
        assert!(finite.iter().any(|v| *v != 0.0), "{name} {what}: reference all zeros");
        let scale = finite.iter().fold(0f64, |m, v| m.max(v.abs()));
        for (i, (g, w)) in g.iter().zip(w).enumerate() {
            let g = f64::from(*g);
            let ok = if w.is_finite() { (g - w).abs() <= 1e-5 * scale } else { g == *w };
            assert!(ok, "{name} {what}[{i}]: {g} against {w} (of {scale})");
        }
    }
}

fn base() -> Case {
    Case { hq: 4, hk: 2, sq: 5, s: 7, d: 8, dv: 6, window: (-1, -1), ..Case::default() }
}

#[test]
fn sliding_windows_alone_and_with_causal() {
    check("bidirectional", &Case { window: (1, 2), ..base() }, 1);
    check("left", &Case { window: (2, -1), causal: true, ..base() }, 2);
    check("right", &Case { window: (-1, 0), hq: 2, hk: 2, ..base() }, 3);
}

#[test]
fn causal_over_a_past_cache_is_offset_by_its_length() {
    let c = Case { sq: 3, s: 3, past: 4, causal: true, present: true, ..base() };
    check("past_causal", &c, 4);
    let c = Case { window: (2, -1), softcap: 1.5, scale: Some(0.3), ..c };
    check("past_window_cap", &c, 5);
}

#[test]
fn boolean_masks_with_false_entries_and_masked_rows() {
    let m = |shape: &[usize]| Some(Mask { shape: shape.to_vec(), boolean: true });
    check("bool_rank2", &Case { mask: m(&[5, 7]), ..base() }, 6);
    check("bool_rank3_heads_causal", &Case { mask: m(&[4, 5, 7]), causal: true, ..base() }, 7);
    check("bool_rank1_window", &Case { mask: m(&[7]), window: (1, 1), ..base() }, 8);
}

#[test]
fn a_mask_shorter_than_the_keys_is_padded() {
    let c = Case { sq: 2, s: 2, past: 5, present: true, ..base() };
    check("short_float", &Case { mask: Some(Mask { shape: vec![1, 4, 2, 5], boolean: false }), ..c.clone() }, 9);
    check("short_bool", &Case { mask: Some(Mask { shape: vec![2, 6], boolean: true }), ..c }, 10);
}

#[test]
fn nonpad_kv_seqlen_pads_keys_and_offsets_causal_and_windows() {
    check("nonpad", &Case { nonpad: Some(5), ..base() }, 11);
    check("nonpad_causal", &Case { nonpad: Some(6), causal: true, ..base() }, 12);
    let m = Some(Mask { shape: vec![5, 7], boolean: false });
    check("nonpad_causal_window_mask", &Case { nonpad: Some(7), causal: true, window: (2, -1), mask: m, ..base() }, 13);
    // A query block longer than the valid keys: its first rows see no key (0).
    check("nonpad_negative_offset", &Case { nonpad: Some(3), causal: true, ..base() }, 14);
}

#[test]
fn qk_matmul_output_in_every_mode() {
    for mode in 0..4 {
        for (boolean, causal, cap) in [(false, false, 0.0), (true, true, 2.0), (false, true, 0.0)] {
            let c = Case {
                mask: Some(Mask { shape: vec![1, 1, 5, 7], boolean }),
                causal,
                softcap: cap,
                qk: Some(mode),
                ..base()
            };
            check(&format!("qk_mode{mode}_{boolean}_{causal}_{cap}"), &c, 20 + mode as u64);
        }
    }
    let c = Case { sq: 2, s: 2, past: 3, present: true, qk: Some(2), causal: true, ..base() };
    check("qk_with_present", &c, 30);
}

#[test]
fn malformed_attributes_are_refused_by_name() {
    let err = |c: &Case| convert_model("bad", c).expect_err("converted");
    let e = err(&Case { qk: Some(5), ..base() });
    assert!(e.contains("qk_matmul_output_mode 5"), "{e}");
    let e = err(&Case { window: (-2, -1), ..base() });
    assert!(e.contains("left_window_size -2"), "{e}");
    let e = err(&Case { softcap: f32::INFINITY, ..base() });
    assert!(e.contains("softcap"), "{e}");
    let e = err(&Case { mask: Some(Mask { shape: vec![3, 5, 7], boolean: true }), ..base() });
    assert!(e.contains("attn_mask over 3 heads"), "{e}");
}

/// The Kestrel ops a case converts to.
fn ops(name: &str, c: &Case) -> std::collections::BTreeMap<String, usize> {
    let path = std::env::temp_dir().join(format!("kestrel-onnx-attention-ops-{}-{name}.onnx", std::process::id()));
    std::fs::write(&path, c.model()).unwrap();
    let conv = convert(&path, &ConvertOptions::default());
    std::fs::remove_file(&path).ok();
    conv.unwrap_or_else(|e| panic!("{name}: {e}")).report.kestrel_ops.into_iter().collect()
}

/// Every form but `qk_matmul_output` (which reads an intermediate) fuses back into one `Sdpa`:
/// the masks are one additive mask (boolean ones through `Where(m, 0, −∞)`, the bands
/// constants), the NaN guard after the softmax is the fused node's zero rows.
#[test]
fn every_mask_form_fuses_into_one_sdpa() {
    let f = |shape: &[usize]| Some(Mask { shape: shape.to_vec(), boolean: false });
    let b = |shape: &[usize]| Some(Mask { shape: shape.to_vec(), boolean: true });
    for (name, c) in [
        ("window", Case { window: (1, 2), ..base() }),
        ("causal_window", Case { window: (2, -1), causal: true, ..base() }),
        ("float_mask", Case { mask: f(&[5, 7]), ..base() }),
        ("float_mask_causal_cap", Case { mask: f(&[5, 7]), causal: true, softcap: 2.0, ..base() }),
        ("bool_mask", Case { mask: b(&[4, 5, 7]), ..base() }),
        ("past_causal", Case { sq: 3, s: 3, past: 4, causal: true, ..base() }),
        ("nonpad_causal", Case { nonpad: Some(5), causal: true, ..base() }),
    ] {
        let ops = ops(name, &c);
        assert_eq!(ops.get("Sdpa"), Some(&1), "{name}: {ops:?}");
        assert!(!ops.contains_key("Softmax") && !ops.contains_key("MatMul"), "{name}: {ops:?}");
    }
    let ops = ops("qk3", &Case { qk: Some(3), ..base() });
    assert_eq!(ops.get("Softmax"), Some(&1), "qk_matmul_output: {ops:?}");
}
