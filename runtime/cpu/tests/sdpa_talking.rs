//! Property tests of the `Sdpa` kernel with talking heads (the scores mixed across the heads
//! before the softmax, the weights after it: `mix_pre`, `mix_post`) against the f64 reference
//! (`kestrel_rt_reference::layers::sdpa_mixed`): random mixing matrices and biases, 1 to 12
//! query heads (grouped onto 1 to 4 key heads), either mixing or both, causal, keys transposed,
//! soft caps, bias forms (per score, per key, shared by the heads, a fully masked row where
//! only the weights are mixed), with and without sinks, in blocks of 1 query to all of them (the
//! scratch given decides), under every ISA the CPU runs; and a mixing weight perturbed by a
//! little fails the comparison.

use crate::common_layers::*;
use kestrel_rt_cpu::kernels::sdpa::SdpaParams;
use kestrel_rt_cpu::kernels::sdpa_talking::{sdpa_talking, talking_scratch_for, Mix};
use kestrel_rt_cpu::kernels::simd::{self, Isa};
use kestrel_rt_reference::layers as r;
use kestrel_rt_reference::tolerance::{compare, F32_KERNEL};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// One configuration.
#[derive(Clone, Debug)]
struct Case {
    hk: usize,
    group: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
    causal: bool,
    k_transposed: bool,
    softcap: f32,
    /// 0 none, 1 `[Hq, Tq, Tk]`, 2 `[Tk]`, 3 `[Tq, Tk]`, 4 `[Tq, Tk]` with row 0 fully masked
    /// (−∞; only without `mix_pre`, whose sums of −∞ with weights of both signs are NaN).
    bias: u8,
    /// 0 before the softmax only, 1 after it only, 2 both.
    mix: u8,
    sink: bool,
    /// Queries per block (the scratch given holds this many).
    block: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..5, 1usize..4, 1usize..20, 1usize..9),
        (1usize..9, 1usize..13),
        any::<(bool, bool, bool, bool)>(),
        (0u8..5, 0u8..3, 1usize..20),
    )
        .prop_map(|((hk, group, tq, tk), (d, dv), (causal, k_transposed, cap, sink), (bias, mix, block))| Case {
            hk,
            group,
            tq,
            tk,
            d,
            dv,
            causal,
            k_transposed,
            softcap: if cap { 2.5 } else { 0.0 },
            bias: if bias == 4 && mix != 1 { 3 } else { bias },
            mix,
            sink,
            block: block.min(tq),
        })
}

fn bias_dims(c: &Case) -> Option<Vec<usize>> {
    match c.bias {
        1 => Some(vec![c.hk * c.group, c.tq, c.tk]),
        2 => Some(vec![c.tk]),
        3 | 4 => Some(vec![c.tq, c.tk]),
        _ => None,
    }
}

/// The operands: q, k, v, bias, sink, mix_pre, mix_post.
type Ops = [Vec<f32>; 7];

/// The kernel's output and the reference's for `ops`, the kernel given `kernel_pre` and
/// `kernel_post` as its mixings (the reference `ops[5]`, `ops[6]`).
fn run(c: &Case, ops: &Ops, kernel_pre: &[f32], kernel_post: &[f32]) -> (Vec<f32>, Vec<f64>) {
    let hq = c.hk * c.group;
    let qd = [hq, c.tq, c.d];
    let kd = if c.k_transposed { [c.hk, c.d, c.tk] } else { [c.hk, c.tk, c.d] };
    let vd = [c.hk, c.tk, c.dv];
    let bd = bias_dims(c);
    let scale = 0.35;
    let p = SdpaParams::new(
        &shape(&qd),
        &shape(&kd),
        &shape(&vd),
        bd.as_ref().map(|d| shape(d)).as_ref(),
        scale,
        c.causal,
        c.k_transposed,
        c.softcap,
    )
    .unwrap();
    let (pre, post) = (c.mix != 1, c.mix != 0);
    let mix = Mix { pre: pre.then_some(kernel_pre), post: post.then_some(kernel_post) };
    let mut y = out(hq * c.tq * c.dv);
    let mut sc = scratch(talking_scratch_for(&p, c.block));
    let bias = bd.as_ref().map(|_| &ops[3][..]);
    let sink = c.sink.then_some(&ops[4][..]);
    sdpa_talking(&p, mix, 0..c.tq, &ops[0], &ops[1], &ops[2], bias, sink, &mut y, &mut sc);
    let [bias64, sink64, pre64, post64] = [3, 4, 5, 6].map(|i| f64s(&ops[i]));
    let want = r::sdpa_mixed(
        (&f64s(&ops[0]), &qd),
        (&f64s(&ops[1]), &kd),
        (&f64s(&ops[2]), &vd),
        bd.as_ref().map(|d| (&bias64[..], &d[..])),
        f64::from(scale),
        c.causal,
        c.k_transposed,
        f64::from(c.softcap),
        c.sink.then_some(&sink64[..]),
        (pre.then_some(&pre64[..]), post.then_some(&post64[..])),
    );
    (y, want)
}

/// Random operands for `c` (values in ±[0.05, 2); the mixing weights divided by Hq, as a
/// learned mixing of Hq heads keeps the scores' scale).
fn operands(c: &Case) -> impl Strategy<Value = Ops> {
    let hq = c.hk * c.group;
    let nb = bias_dims(c).map_or(0, |d| d.iter().product());
    let (tk, masked_row) = (c.tk, c.bias == 4);
    (
        (vals(hq * c.tq * c.d), vals(c.hk * c.tk * c.d), vals(c.hk * c.tk * c.dv)),
        (vals(nb), vals(hq), vals(hq * (hq + 1)), vals(hq * (hq + 1))),
    )
        .prop_map(move |((q, k, v), (mut bias, sink, pre, post))| {
            if masked_row {
                bias[..tk].fill(f32::NEG_INFINITY);
            }
            let per_head = |m: Vec<f32>| m.iter().map(|&w| w / hq as f32).collect::<Vec<f32>>();
            [q, k, v, bias, sink, per_head(pre), per_head(post)]
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sdpa_with_talking_heads_matches_the_reference((c, ops) in case().prop_flat_map(|c| (Just(c.clone()), operands(&c)))) {
        // Under every ISA this CPU runs (the products, axpys and softmax dispatch on it).
        for isa in Isa::ALL.into_iter().filter(|i| i.supported()) {
            simd::set_isa(isa);
            let (got, want) = run(&c, &ops, &ops[5], &ops[6]);
            let cmp = compare(&got, &want, F32_KERNEL);
            prop_assert!(cmp.pass, "{c:?} under {}: {cmp:?}", isa.name());
        }
        simd::set_isa(simd::detect());
    }
}

/// Either mixing with one weight off by 0.05 (and, after the softmax, one bias): the kernel's
/// output no longer matches the reference's.
#[test]
fn a_perturbed_mixing_weight_fails() {
    let c = Case {
        hk: 3,
        group: 1,
        tq: 3,
        tk: 5,
        d: 4,
        dv: 6,
        causal: true,
        k_transposed: false,
        softcap: 0.0,
        bias: 1,
        mix: 2,
        sink: false,
        block: 2,
    };
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let ops = operands(&c).new_tree(&mut runner).unwrap().current();
    let (got, want) = run(&c, &ops, &ops[5], &ops[6]);
    assert!(compare(&got, &want, F32_KERNEL).pass);
    let nudged = |m: &[f32], at: usize| -> Vec<f32> {
        let mut m = m.to_vec();
        m[at] += 0.05;
        m
    };
    for at in [0, 1, 5] {
        let (got, want) = run(&c, &ops, &nudged(&ops[5], at), &ops[6]);
        assert!(!compare(&got, &want, F32_KERNEL).pass, "mix_pre[{at}] off by 0.05 passed");
        let (got, want) = run(&c, &ops, &ops[5], &nudged(&ops[6], at));
        assert!(!compare(&got, &want, F32_KERNEL).pass, "mix_post[{at}] off by 0.05 passed");
    }
    // The post-softmax bias (column Hq of a row).
    let (got, want) = run(&c, &ops, &ops[5], &nudged(&ops[6], 3));
    assert!(!compare(&got, &want, F32_KERNEL).pass, "a mix_post bias off by 0.05 passed");
}

/// The identity mixing with zero biases gives plain attention (the reference without mixing).
#[test]
fn the_identity_mixing_is_plain_attention() {
    let c = Case {
        hk: 2,
        group: 2,
        tq: 4,
        tk: 6,
        d: 3,
        dv: 5,
        causal: true,
        k_transposed: true,
        softcap: 2.5,
        bias: 2,
        mix: 2,
        sink: true,
        block: 3,
    };
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut ops = operands(&c).new_tree(&mut runner).unwrap().current();
    let hq = 4;
    let eye: Vec<f32> = (0..hq * (hq + 1)).map(|x| if x % (hq + 2) == 0 { 1.0 } else { 0.0 }).collect();
    ops[5] = eye.clone();
    ops[6] = eye;
    let (got, _) = run(&c, &ops, &ops[5], &ops[6]);
    let qd = [hq, c.tq, c.d];
    let want = r::sdpa(
        (&f64s(&ops[0]), &qd),
        (&f64s(&ops[1]), &[c.hk, c.d, c.tk]),
        (&f64s(&ops[2]), &[c.hk, c.tk, c.dv]),
        Some((&f64s(&ops[3]), &[c.tk])),
        0.35,
        true,
        true,
        2.5,
        Some(&f64s(&ops[4])),
    );
    assert!(compare(&got, &want, F32_KERNEL).pass);
}
