//! ONNX `LinearAttention` (opset 27) through the converter, on seeded random geometries over the
//! op's whole space: every update rule, grouped-query and multi-query heads, a per-key or
//! per-head decay, a per-head or shared update rate, with and without a past state, a fixed first
//! axis of 1 or 2, the default or an explicit scale, either output or both, operands as graph
//! inputs or as initializers. Each converted model's outputs against the f64 reference
//! (`kestrel_rt_reference::linear_attn`, written from the definition) and against the
//! converter's evaluation of the ONNX node run by tract (`verify`), on the CPU and, when there
//! is one, on the GPU. Malformed nodes are refused with a clear error.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{compare, convert, run_kestrel, verify, ConvertOptions, InputTensor};
use kestrel_rt_reference::linear_attn::{linear_attention, LinearAttnIn};
use proto::{f32_tensor, float_attr, float_value, i64_attr, str_attr, Msg};

/// Largest error relative to the largest |reference value|, per output.
const REL_TOL: f64 = 1e-4;

const RULES: [&str; 4] = ["linear", "gated", "delta", "gated_delta"];

/// One generated node: its attributes, operand shapes and values.
struct Case {
    rule: &'static str,
    hq: usize,
    hkv: usize,
    b: usize,
    t: usize,
    dk: usize,
    dv: usize,
    /// 0 for the default `1/√Dk`.
    scale: f32,
    /// `(name, shape, values, as an initializer)` in input order; absent optional inputs skipped.
    operands: Vec<(&'static str, Vec<usize>, Vec<f32>, bool)>,
    /// Which outputs the model reads: output, present_state.
    outputs: [bool; 2],
}

fn uniform(rng: &mut Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| lo + (hi - lo) * (rng.uniform() + 1.0) * 0.5).collect()
}

fn case(rng: &mut Rng, i: usize) -> Case {
    let rule = RULES[i % 4];
    let hkv = 1 + below(rng, 2);
    let hq = hkv * (1 + below(rng, 3));
    let (b, t, dk, dv) = (1 + below(rng, 2), 1 + below(rng, 6), 1 + below(rng, 9), 1 + below(rng, 7));
    let scale = if below(rng, 2) == 0 { 0.0 } else { 0.75 + 0.5 * rng.uniform() };
    let constant = |rng: &mut Rng| below(rng, 4) == 0;
    let mut operands = vec![("q", vec![b, t, hq * dk], uniform(rng, b * t * hq * dk, -1.0, 1.0), false)];
    // Keys of unit length per head, as the delta rules expect (bounded updates).
    let mut k = uniform(rng, b * t * hkv * dk, -1.0, 1.0);
    for row in k.chunks_mut(dk) {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-3);
        row.iter_mut().for_each(|x| *x /= n);
    }
    let c = constant(rng);
    operands.push(("k", vec![b, t, hkv * dk], k, c));
    let c = constant(rng);
    operands.push(("v", vec![b, t, hkv * dv], uniform(rng, b * t * hkv * dv, -1.0, 1.0), c));
    if below(rng, 2) == 0 {
        let c = constant(rng);
        operands.push(("past_state", vec![b, hkv, dk, dv], uniform(rng, b * hkv * dk * dv, -1.0, 1.0), c));
    }
    if rule.starts_with("gated") {
        let w = if below(rng, 2) == 0 { hkv } else { hkv * dk };
        let c = constant(rng);
        operands.push(("decay", vec![b, t, w], uniform(rng, b * t * w, -1.0, 0.0), c));
    }
    if rule.contains("delta") {
        let w = if below(rng, 2) == 0 { 1 } else { hkv };
        let c = constant(rng);
        operands.push(("beta", vec![b, t, w], uniform(rng, b * t * w, 0.0, 1.0), c));
    }
    let outputs = match below(rng, 3) {
        0 => [true, true],
        1 => [true, false],
        _ => [false, true],
    };
    Case { rule, hq, hkv, b, t, dk, dv, scale, operands, outputs }
}

/// The model: one LinearAttention node (opset 27), optional inputs named where present and left
/// as `""` before a later present one.
fn model(c: &Case) -> Vec<u8> {
    let names: Vec<&str> = c.operands.iter().map(|o| o.0).collect();
    let mut node = Msg::default();
    for slot in ["q", "k", "v", "past_state", "decay", "beta"] {
        let later = ["q", "k", "v", "past_state", "decay", "beta"]
            .iter()
            .skip_while(|&&s| s != slot)
            .any(|s| names.contains(s));
        if names.contains(&slot) {
            node = node.str(1, slot);
        } else if later {
            node = node.str(1, "");
        }
    }
    node = node.str(2, if c.outputs[0] { "y" } else { "" });
    if c.outputs[1] {
        node = node.str(2, "state");
    }
    node = node
        .str(3, "la")
        .str(4, "LinearAttention")
        .msg(5, str_attr("update_rule", c.rule))
        .msg(5, i64_attr("q_num_heads", c.hq as i64))
        .msg(5, i64_attr("kv_num_heads", c.hkv as i64));
    if c.scale != 0.0 {
        node = node.msg(5, float_attr("scale", c.scale));
    }
    let mut graph = Msg::default().msg(1, node).str(2, "g");
    for (name, shape, values, konst) in &c.operands {
        graph = if *konst {
            graph.msg(5, f32_tensor(name, shape, values))
        } else {
            graph.msg(11, float_value(name, Some(shape)))
        };
    }
    if c.outputs[0] {
        graph = graph.msg(12, float_value("y", None));
    }
    if c.outputs[1] {
        graph = graph.msg(12, float_value("state", None));
    }
    Msg::default().int(1, 10).msg(8, Msg::default().int(2, 27)).str(2, "linear_attention.rs").msg(7, graph).0
}

/// The reference's outputs, in the model's output order.
fn reference(c: &Case) -> Vec<Vec<f32>> {
    let f64s = |name: &str| -> Option<(Vec<f64>, usize)> {
        let o = c.operands.iter().find(|o| o.0 == name)?;
        Some((o.2.iter().map(|&x| x as f64).collect(), *o.1.last().unwrap()))
    };
    let (q, k, v) = (f64s("q").unwrap().0, f64s("k").unwrap().0, f64s("v").unwrap().0);
    let (state, decay, beta) = (f64s("past_state"), f64s("decay"), f64s("beta"));
    let x = LinearAttnIn {
        q: &q,
        k: &k,
        v: &v,
        state: state.as_ref().map(|s| s.0.as_slice()),
        decay: decay.as_ref().map(|(d, w)| (d.as_slice(), *w)),
        beta: beta.as_ref().map(|(d, w)| (d.as_slice(), *w)),
    };
    let scale = if c.scale == 0.0 { 1.0 / (c.dk as f64).sqrt() } else { c.scale as f64 };
    let (y, s) = linear_attention(&x, [c.b, c.t], [c.hq, c.hkv], [c.dk, c.dv], scale);
    let mut out = Vec::new();
    if c.outputs[0] {
        out.push(y.iter().map(|&x| x as f32).collect());
    }
    if c.outputs[1] {
        out.push(s.iter().map(|&x| x as f32).collect());
    }
    out
}

/// Relative error of `got` against `want`, output by output (`compare` per output).
fn worst(want: &[Vec<f32>], got: &[Vec<f32>]) -> f64 {
    assert_eq!(want.len(), got.len(), "outputs");
    want.iter()
        .zip(got)
        .map(|(w, g)| compare(std::slice::from_ref(w), std::slice::from_ref(g), &[1]).unwrap().1)
        .fold(0.0, f64::max)
}

#[test]
fn linear_attention_matches_the_reference_over_its_space() {
    let mut rng = Rng::new(0x11a7);
    let ctx = gpu();
    for i in 0..32 {
        let c = case(&mut rng, i);
        let name = format!(
            "case {i}: {} Hq {} Hkv {} B {} T {} Dk {} Dv {} scale {} operands {:?} outputs {:?}",
            c.rule,
            c.hq,
            c.hkv,
            c.b,
            c.t,
            c.dk,
            c.dv,
            c.scale,
            c.operands.iter().map(|o| (o.0, o.1.clone(), o.3)).collect::<Vec<_>>(),
            c.outputs
        );
        let path = std::env::temp_dir().join(format!("kestrel-linear-attn-{}-{i}.onnx", std::process::id()));
        std::fs::write(&path, model(&c)).unwrap();
        let conv = convert(&path, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let fed: Vec<&(&str, Vec<usize>, Vec<f32>, bool)> = c.operands.iter().filter(|o| !o.3).collect();
        let inputs: Vec<InputTensor> = fed.iter().map(|o| InputTensor::f32(&o.1, o.2.clone())).collect();
        let want = reference(&c);
        let got = run_kestrel(&conv.kes, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let rel = worst(&want, &got);
        assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e} against the f64 reference");
        let v = verify(&path, &conv.kes, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        std::fs::remove_file(&path).ok();
        assert!(v.max_rel_err <= REL_TOL, "{name}: relative error {:.2e} against tract", v.max_rel_err);
        if let Some(ctx) = &ctx {
            let m = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
            let cpu = m.cpu().unwrap();
            let mut ys: Vec<Vec<f32>> = want.iter().map(|w| vec![f32::NAN; w.len()]).collect();
            let ins: Vec<Input<'_>> = fed.iter().map(|o| Input::F32(&o.2)).collect();
            let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
            kestrel_rt_wgpu::GpuSession::new(ctx, &cpu, 1)
                .and_then(|mut s| s.run(&ins, &mut outs))
                .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
            let rel = worst(&want, &ys);
            assert!(rel <= REL_TOL, "{name}: GPU relative error {rel:.2e}");
        }
    }
}

/// Malformed nodes: a clear conversion error naming the problem, never a panic.
#[test]
fn malformed_linear_attention_is_refused_clearly() {
    // A gated-delta node (case 3) reading its output only.
    let base = || {
        let mut c = case(&mut Rng::new(3), 3);
        c.outputs = [true, false];
        c
    };
    type Edit = fn(&mut Case);
    let edits: [(&str, Edit, &str); 5] = [
        ("heads not a multiple", |c| c.hq = c.hkv + 1, "multiple"),
        ("unknown rule", |c| c.rule = "softmax", "update_rule"),
        ("gated without decay", |c| c.operands.retain(|o| o.0 != "decay"), "decay"),
        (
            "delta without beta",
            |c| {
                c.rule = "delta";
                c.operands.retain(|o| o.0 != "beta" && o.0 != "decay");
            },
            "beta",
        ),
        (
            "bad key width",
            |c| {
                let k = &mut c.operands[1];
                k.1[2] += 1;
                k.2.resize(k.1.iter().product(), 0.25);
            },
            "LinearAttention",
        ),
    ];
    for (what, edit, needle) in edits {
        let mut c = base();
        edit(&mut c);
        let path = std::env::temp_dir().join(format!("kestrel-linear-attn-bad-{}-{what}.onnx", std::process::id()));
        std::fs::write(&path, model(&c)).unwrap();
        let r = convert(&path, &ConvertOptions::default());
        std::fs::remove_file(&path).ok();
        let e = match r {
            Ok(_) => panic!("{what}: converted"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(needle), "{what}: the error does not name `{needle}`: {e}");
    }
}
