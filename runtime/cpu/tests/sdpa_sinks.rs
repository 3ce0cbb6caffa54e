//! Property tests of the `Sdpa` kernel with attention sinks (a learned logit per head in the
//! softmax's denominator, no value row) against the f64 reference
//! (`kestrel_rt_reference::layers::sdpa`): per-head and shared sinks small beside the scores,
//! dominating them, very negative and −∞ (no sink); grouped heads, causal, keys transposed, soft
//! caps, every bias form (per key, one per row, shared by the heads, a fully masked row); a row
//! at a time (the minimum scratch) and in blocks of 4–8 rows through the GEMM kernels (the
//! planner's scratch holds more), the rows split in two ranges as threads split them; and a
//! sink perturbed by a little fails the comparison.

use crate::common_layers::*;
use kestrel_rt_cpu::kernels::sdpa::{sdpa, sdpa_rows, sdpa_scratch, sdpa_scratch_fast, SdpaParams};
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
    /// 0 none, 1 `[Hq, Tq, Tk]`, 2 `[Hq, Tq, 1]`, 3 `[Tk]`, 4 `[Tq, Tk]` with row 0 fully masked.
    bias: u8,
    /// 0 small (beside the scores), 1 dominating, 2 very negative, 3 −∞.
    regime: u8,
    per_head: bool,
    /// Rows per block of scores the scratch holds: 0 the minimum (a row at a time), 1 what the
    /// planner reserves (`sdpa_scratch_fast`), else 4–8.
    block: usize,
    /// Where the rows are split in two calls (as threads split them), as a fraction of 8.
    split: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..3, 1usize..4, prop_oneof![1usize..6, 6usize..20], 1usize..9),
        (1usize..9, 1usize..21),
        any::<(bool, bool, bool, bool)>(),
        (0u8..5, 0u8..4),
        (prop_oneof![Just(0usize), Just(1usize), 4usize..9], 0usize..8),
    )
        .prop_map(
            |((hk, group, tq, tk), (d, dv), (causal, k_transposed, cap, per_head), (bias, regime), (block, split))| {
                Case {
                    hk,
                    group,
                    tq,
                    tk,
                    d,
                    dv,
                    causal,
                    k_transposed,
                    softcap: if cap { 2.5 } else { 0.0 },
                    bias,
                    regime,
                    per_head,
                    block,
                    split,
                }
            },
        )
}

fn bias_dims(c: &Case) -> Option<Vec<usize>> {
    let hq = c.hk * c.group;
    match c.bias {
        1 => Some(vec![hq, c.tq, c.tk]),
        2 => Some(vec![hq, c.tq, 1]),
        3 => Some(vec![c.tk]),
        4 => Some(vec![c.tq, c.tk]),
        _ => None,
    }
}

/// The kernel's output and the reference's, for operands `ops` (q, k, v, bias, sink).
fn run(c: &Case, ops: &[Vec<f32>; 5], kernel_sink: &[f32]) -> (Vec<f32>, Vec<f64>) {
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
    let mut y = out(hq * c.tq * c.dv);
    let n = match c.block {
        0 => sdpa_scratch(&p),
        1 => sdpa_scratch_fast(&p),
        b => (b * c.tk).max(sdpa_scratch(&p)),
    };
    let mut sc = scratch(n);
    let bias = bd.as_ref().map(|_| &ops[3][..]);
    // −∞ sinks are no sink: half those cases pass none (the softmax without a sink).
    let kernel_sink = if c.regime == 3 && c.split % 2 == 1 { None } else { Some(kernel_sink) };
    if c.split == 0 {
        sdpa(&p, &ops[0], &ops[1], &ops[2], bias, kernel_sink, &mut y, &mut sc);
    } else {
        let rows = p.rows();
        let at = rows * c.split / 8;
        let (y0, y1) = y.split_at_mut(at * c.dv);
        sdpa_rows(&p, 0..at, &ops[0], &ops[1], &ops[2], bias, kernel_sink, y0, &mut sc);
        sdpa_rows(&p, at..rows, &ops[0], &ops[1], &ops[2], bias, kernel_sink, y1, &mut sc);
    }
    let (bias64, sink64) = (f64s(&ops[3]), f64s(&ops[4]));
    let want = r::sdpa(
        (&f64s(&ops[0]), &qd),
        (&f64s(&ops[1]), &kd),
        (&f64s(&ops[2]), &vd),
        bd.as_ref().map(|d| (&bias64[..], &d[..])),
        f64::from(scale),
        c.causal,
        c.k_transposed,
        f64::from(c.softcap),
        Some(&sink64),
    );
    (y, want)
}

/// Random operands for `c` (values in ±[0.05, 2), the sink by its regime).
fn operands(c: &Case) -> impl Strategy<Value = [Vec<f32>; 5]> {
    let hq = c.hk * c.group;
    let nb = bias_dims(c).map_or(0, |d| d.iter().product());
    let (regime, tk, masked_row) = (c.regime, c.tk, c.bias == 4);
    (
        vals(hq * c.tq * c.d),
        vals(c.hk * c.tk * c.d),
        vals(c.hk * c.tk * c.dv),
        vals(nb),
        vals(if c.per_head { hq } else { 1 }),
    )
        .prop_map(move |(q, k, v, mut bias, sink)| {
            if masked_row {
                bias[..tk].fill(f32::NEG_INFINITY);
            }
            let sink = sink
                .iter()
                .map(|&z| match regime {
                    0 => z,
                    1 => 25.0 + z,
                    2 => -1.0e4 * z.abs(),
                    _ => f32::NEG_INFINITY,
                })
                .collect();
            [q, k, v, bias, sink]
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sdpa_with_a_sink_matches_the_reference((c, ops) in case().prop_flat_map(|c| (Just(c.clone()), operands(&c)))) {
        let (got, want) = run(&c, &ops, &ops[4]);
        let cmp = compare(&got, &want, F32_KERNEL);
        prop_assert!(cmp.pass, "{c:?}: {cmp:?}");
    }
}

/// A sink beside the scores, perturbed by 0.02: the kernel's output no longer matches the
/// reference's (the tests above would catch a sink misapplied).
#[test]
fn a_perturbed_sink_fails() {
    let c = Case {
        hk: 2,
        group: 2,
        tq: 3,
        tk: 5,
        d: 4,
        dv: 6,
        causal: false,
        k_transposed: false,
        softcap: 0.0,
        bias: 0,
        regime: 0,
        per_head: true,
        block: 4,
        split: 0,
    };
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let ops = operands(&c).new_tree(&mut runner).unwrap().current();
    let (got, want) = run(&c, &ops, &ops[4]);
    assert!(compare(&got, &want, F32_KERNEL).pass);
    let nudged: Vec<f32> = ops[4].iter().map(|z| z + 0.02).collect();
    let (got, want) = run(&c, &ops, &nudged);
    assert!(!compare(&got, &want, F32_KERNEL).pass, "a sink off by 0.02 passed");
    // Without the sink at all.
    let none = vec![f32::NEG_INFINITY; ops[4].len()];
    let (got, want) = run(&c, &ops, &none);
    assert!(!compare(&got, &want, F32_KERNEL).pass, "no sink passed");
}

/// Every key masked (−∞) beside a finite sink: zero rows, as the reference.
#[test]
fn a_fully_masked_row_beside_a_sink_is_zero() {
    let c = Case {
        hk: 1,
        group: 1,
        tq: 2,
        tk: 3,
        d: 2,
        dv: 2,
        causal: false,
        k_transposed: false,
        softcap: 0.0,
        bias: 4,
        regime: 0,
        per_head: false,
        block: 0,
        split: 0,
    };
    let ops = [vec![0.5; 4], vec![0.25; 6], vec![1.0; 6], vec![0.0; 6], vec![0.3]];
    let mut ops = ops;
    ops[3][..3].fill(f32::NEG_INFINITY);
    let (got, want) = run(&c, &ops, &ops[4]);
    assert_eq!(&got[..2], &[0.0, 0.0]);
    assert!(compare(&got, &want, F32_KERNEL).pass);
}
