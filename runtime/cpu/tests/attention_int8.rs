//! Attention with int8 internals (`AttentionParams::int8`, the file's `Internals::Int8`): the
//! scores and the weighted values as int8 × int8 products, against the f64 reference of the f32
//! mechanism at the named `INT8_INTERNALS` tolerance, on every variant, head count, causality,
//! weight encoding and block size; the f32 path on the same layer must differ (the integer path
//! ran) and non-finite activations must still propagate.

use crate::common_mech::layers::*;
use crate::common_mech::{Rng, DTYPES};
use kestrel_rt_cpu::kernels::attention::*;
use kestrel_rt_format::DType;
use kestrel_rt_reference::compare;
use kestrel_rt_reference::tolerance::{F32_KERNEL, INT8_INTERNALS};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn int8_internals_match_the_f32_reference(
        t in 48usize..=100,
        (d, heads) in prop::sample::select(vec![(48usize, 1usize), (64, 1), (96, 1), (96, 2), (128, 2)]),
        causal: bool,
        v in 0usize..4,
        dt in prop::sample::select(DTYPES.to_vec()),
        qb in prop::sample::select(vec![0usize, 16]),
        seed: u64,
    ) {
        let p = AttentionParams { int8: true, ..attn_params(t, d, heads, causal, variant(v)) };
        let mut rng = Rng::new(seed);
        let x = rng.normal_vec(t * d);
        let mut layer = AttnLayer::random(&mut rng, dt, &p);
        let want = layer.reference(&p, &x);
        // 0: the planned block (all queries); 16: several blocks of 16 queries.
        let got = if qb == 0 { layer.run(&p, &x) } else { layer.run_blocks(&p, &x, qb) };
        let c = compare(&got, &want, INT8_INTERNALS);
        prop_assert!(c.pass, "{p:?} {dt:?} qb {qb}: {c:?}");
        let f32_path = layer.run(&AttentionParams { int8: false, ..p }, &x);
        prop_assert!(compare(&f32_path, &want, F32_KERNEL).pass);
        prop_assert_ne!(got, f32_path, "{:?}: the int8 internals did not run", p);
    }
}

/// int8 internals with a per-head score bias `[H, T, T]` (each head's own block, some keys
/// masked with f32::MIN) or a shared `[T, T]` one: the bias is added to the int8 scores'
/// f32 rows, so the result meets the same tolerance against the f64 reference.
#[test]
fn int8_internals_with_a_per_head_bias_match_the_reference() {
    for (seed, (t, d, heads, causal)) in
        [(64usize, 64usize, 1usize, false), (72, 128, 2, true), (50, 96, 2, false)].into_iter().enumerate()
    {
        let p = AttentionParams { int8: true, ..attn_params(t, d, heads, causal, variant(seed % 4)) };
        let mut rng = Rng::new(seed as u64 + 40);
        let x = rng.normal_vec(t * d);
        let mut layer = AttnLayer::random(&mut rng, DType::I8, &p);
        let mut mrng = kestrel_rt_reference::testing::Rng::new(seed as u64);
        for per_head in [false, true] {
            let blocks = if per_head { heads } else { 1 };
            let mask: Vec<f32> = (0..blocks)
                .flat_map(|_| kestrel_rt_reference::testing::random_mask(&mut mrng, t, true, causal, f32::MIN, true))
                .collect();
            let want = layer.reference_masked(&p, &x, Some(&mask));
            for path in [Path::Planned, Path::Blocks(16)] {
                let got = layer.run_masked(&p, &x, &mask, path);
                let c = compare(&got, &want, INT8_INTERNALS);
                assert!(c.pass, "{p:?} per head {per_head} {path:?}: {c:?}");
            }
        }
    }
}

/// Rows of the output with the largest int8 error, printed: how the tolerance was chosen
/// (`cargo test --release -p kestrel-rt-cpu --test suite -- --nocapture attention_int8::worst`).
#[test]
fn worst_int8_error_over_fixed_layers() {
    let mut worst = 0f64;
    for seed in 0..24u64 {
        let (t, d, heads) =
            ([48, 64, 80, 97][seed as usize % 4], [48, 64, 96][seed as usize % 3], 1 + seed as usize % 2);
        let heads = if d / heads < kestrel_rt_cpu::kernels::attention_q8::MIN_COLS { 1 } else { heads };
        let p = AttentionParams { int8: true, ..attn_params(t, d, heads, seed % 5 == 0, variant(seed as usize % 4)) };
        let mut rng = Rng::new(seed);
        let x = rng.normal_vec(t * d);
        // int8 weights: the output projection reads the heads' outputs in int8 too.
        let mut layer = AttnLayer::random(&mut rng, DType::I8, &p);
        let c = compare(&layer.run(&p, &x), &layer.reference(&p, &x), INT8_INTERNALS);
        assert!(c.pass, "{p:?}: {c:?}");
        worst = worst.max(c.max_rel_err);
    }
    println!("worst int8-internals error: {:.2} % of the output's largest magnitude", worst * 100.0);
}

/// Heads below `attention_q8::MIN_COLS` columns or `MIN_KEYS` keys keep f32 products with int8
/// internals asked for: bit-identical to the f32 path.
#[test]
fn narrow_heads_and_short_sequences_stay_f32() {
    use kestrel_rt_cpu::kernels::attention_q8::{pays, MIN_COLS, MIN_KEYS};
    assert!(!pays(MIN_KEYS - 1, 64) && !pays(64, MIN_COLS - 1) && pays(MIN_KEYS, MIN_COLS));
    for (t, d, heads) in [(32, 64, 1), (64, 64, 2), (64, 32, 1), (20, 128, 1)] {
        let p = AttentionParams { int8: true, ..attn_params(t, d, heads, false, variant(0)) };
        let mut rng = Rng::new(t as u64);
        let x = rng.normal_vec(t * d);
        // f32 weights: the output projection stays f32 too (with integer weights it reads the
        // heads' outputs in int8 whatever the heads).
        let mut layer = AttnLayer::random(&mut rng, DType::F32, &p);
        assert_eq!(layer.run(&p, &x), layer.run(&AttentionParams { int8: false, ..p }, &x), "{p:?}");
    }
}

/// A NaN in the input reaches the output through the int8 path's f32 fallback, as in f32.
#[test]
fn non_finite_inputs_propagate() {
    let p = AttentionParams { int8: true, ..attn_params(64, 64, 1, false, variant(0)) };
    let mut rng = Rng::new(7);
    let mut x = rng.normal_vec(64 * 64);
    x[5 * 64 + 3] = f32::NAN;
    let mut layer = AttnLayer::random(&mut rng, DType::F32, &p);
    let got = layer.run(&p, &x);
    let f32_path = layer.run(&AttentionParams { int8: false, ..p }, &x);
    for (g, f) in got.iter().zip(&f32_path) {
        assert_eq!(g.is_nan(), f.is_nan());
    }
    assert!(got.iter().any(|v| v.is_nan()));
}
