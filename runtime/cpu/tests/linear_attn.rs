//! Property tests of the linear-attention kernel (`LinearAttn`, ONNX `LinearAttention`) against
//! the f64 reference in `kestrel_rt_reference::linear_attn`: every update rule, grouped-query
//! heads, per-key and per-head decays, per-head and shared update rates, with and without a past
//! state, both outputs, on random non-zero inputs; and the shape checks.

use crate::common_layers::*;
use kestrel_rt_core::params::LinearAttnParams;
use kestrel_rt_cpu::error::ShapeError;
use kestrel_rt_cpu::kernels::linear_attn::{linear_attn, LinearAttnIn, LinearAttnKernel};
use kestrel_rt_format::ops::{LinearAttn, LinearOutput, LinearRule, TensorId};
use kestrel_rt_format::Shape;
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::linear_attn as r;
use kestrel_rt_reference::tolerance::F32_KERNEL;
use proptest::prelude::*;

/// 64 cases per property (fast), unless `PROPTEST_CASES` asks for another count.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// One configuration: rule, `[N, T]`, `[Hkv, group]`, `[Dk, Dv]`, a past state, the decay per
/// key, the rate per head.
#[derive(Clone, Copy, Debug)]
struct Geo {
    rule: LinearRule,
    n: usize,
    t: usize,
    hkv: usize,
    group: usize,
    dk: usize,
    dv: usize,
    state: bool,
    decay_per_key: bool,
    beta_per_head: bool,
}

fn geo() -> impl Strategy<Value = Geo> {
    (
        prop::sample::select(LinearRule::ALL.to_vec()),
        (1usize..3, 1usize..8),
        (1usize..3, 1usize..4),
        (1usize..19, 1usize..21),
        any::<(bool, bool, bool)>(),
    )
        .prop_map(|(rule, (n, t), (hkv, group), (dk, dv), (state, decay_per_key, beta_per_head))| Geo {
            rule,
            n,
            t,
            hkv,
            group,
            dk,
            dv,
            state,
            decay_per_key,
            beta_per_head,
        })
}

/// The operand shapes of `g` (ids 0..6: q, k, v, state, decay, beta).
fn shapes(g: &Geo) -> [Vec<usize>; 6] {
    let hq = g.hkv * g.group;
    [
        vec![g.n, g.t, hq * g.dk],
        vec![g.n, g.t, g.hkv * g.dk],
        vec![g.n, g.t, g.hkv * g.dv],
        vec![g.n, g.hkv, g.dk, g.dv],
        vec![g.n, g.t, if g.decay_per_key { g.hkv * g.dk } else { g.hkv }],
        vec![g.n, g.t, if g.beta_per_head { g.hkv } else { 1 }],
    ]
}

fn node(g: &Geo, output: LinearOutput, scale: f32) -> LinearAttn {
    LinearAttn {
        q: 0,
        k: 1,
        v: 2,
        state: g.state.then_some(3),
        decay: g.rule.gated().then_some(4),
        beta: g.rule.delta().then_some(5),
        rule: g.rule,
        q_heads: (g.hkv * g.group) as u32,
        kv_heads: g.hkv as u32,
        scale,
        output,
        y: 6,
    }
}

fn params(o: &LinearAttn, sh: &[Vec<usize>; 6]) -> Result<LinearAttnParams, ShapeError> {
    LinearAttnParams::of(o, |id: TensorId| Ok(Shape::from_usize(&sh[id as usize]).unwrap()))
}

/// Operand values: queries and values in ±[0.05, 2), keys of unit length per head (as the delta
/// rules expect), the state in ±[0.05, 2), decays in [−1, −0.05], rates in [0.05, 1].
fn values(g: Geo) -> impl Strategy<Value = (Geo, [Vec<f32>; 6])> {
    let sh = shapes(&g);
    let n = |i: usize| sh[i].iter().product::<usize>();
    (vals(n(0)), vals(n(1)), vals(n(2)), vals(n(3)), vals(n(4)), vals(n(5))).prop_map(move |(q, mut k, v, s, d, b)| {
        for row in k.chunks_mut(g.dk) {
            let len = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= len);
        }
        let decay = d.iter().map(|x| -x.abs().min(1.0)).collect();
        let beta = b.iter().map(|x| x.abs().min(1.0)).collect();
        (g, [q, k, v, s, decay, beta])
    })
}

proptest! {
    #![proptest_config(config())]

    /// Both outputs of every configuration against the reference.
    #[test]
    fn matches_the_f64_reference(gv in geo().prop_flat_map(values), scale in 0.1f32..1.5) {
        let (g, v) = gv;
        let sh = shapes(&g);
        let f = |i: usize| f64s(&v[i]);
        let want_in = r::LinearAttnIn {
            q: &f(0),
            k: &f(1),
            v: &f(2),
            state: None,
            decay: None,
            beta: None,
        };
        let (s64, d64, b64) = (f(3), f(4), f(5));
        let want_in = r::LinearAttnIn {
            state: g.state.then_some(s64.as_slice()),
            decay: g.rule.gated().then_some((d64.as_slice(), *sh[4].last().unwrap())),
            beta: g.rule.delta().then_some((b64.as_slice(), *sh[5].last().unwrap())),
            ..want_in
        };
        let hq = g.hkv * g.group;
        let (want_y, want_s) =
            r::linear_attention(&want_in, [g.n, g.t], [hq, g.hkv], [g.dk, g.dv], f64::from(scale));
        for (output, want) in [(LinearOutput::Output, &want_y), (LinearOutput::State, &want_s)] {
            let o = node(&g, output, scale);
            let p = params(&o, &sh).unwrap();
            let k = LinearAttnKernel { p, rule: g.rule, scale, output };
            let x = LinearAttnIn {
                q: &v[0],
                k: &v[1],
                v: &v[2],
                state: g.state.then_some(v[3].as_slice()),
                decay: g.rule.gated().then_some(v[4].as_slice()),
                beta: g.rule.delta().then_some(v[5].as_slice()),
            };
            let mut y = vec![f32::NAN; k.y_len()];
            k.check(&x, y.len()).unwrap();
            // Scratch filled with garbage: the kernel must not read what it did not write.
            let mut scratch = vec![f32::NAN; k.scratch()];
            linear_attn(&k, &x, &mut y, &mut scratch);
            assert_close(&format!("{g:?} {output:?}"), &y, want, F32_KERNEL);
        }
    }
}

/// Shapes that do not fit are refused with the axis named.
#[test]
fn bad_shapes_are_refused() {
    let g = Geo {
        rule: LinearRule::GatedDelta,
        n: 1,
        t: 3,
        hkv: 2,
        group: 2,
        dk: 4,
        dv: 5,
        state: true,
        decay_per_key: true,
        beta_per_head: true,
    };
    let good = shapes(&g);
    let o = node(&g, LinearOutput::Output, 0.5);
    assert!(params(&o, &good).is_ok());
    let edits: [(usize, Vec<usize>, &str); 6] = [
        (1, vec![1, 3, 9], "key width"),
        (2, vec![1, 4, 10], "value tokens"),
        (3, vec![1, 2, 4, 4], "state"),
        (4, vec![1, 3, 5], "decay"),
        (5, vec![1, 3, 3], "beta"),
        (0, vec![3, 16], "query rank"),
    ];
    for (slot, s, needle) in edits {
        let mut sh = good.clone();
        sh[slot] = s;
        let e = params(&o, &sh).unwrap_err().to_string();
        assert!(e.contains(needle), "slot {slot}: `{e}` does not name `{needle}`");
    }
    let mut heads = o;
    heads.q_heads = 3;
    assert!(params(&heads, &good).unwrap_err().to_string().contains("multiple"));
    let mut scale = o;
    scale.scale = f32::INFINITY;
    assert!(params(&scale, &good).unwrap_err().to_string().contains("scale"));
}
