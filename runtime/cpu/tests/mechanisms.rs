//! Property tests of the fused mechanism kernels (attention, AFT, Fastformer) against the plain
//! f64 references in `kestrel_rt_reference::mechanisms`, in every weight encoding, plus named
//! checks of the properties the efficient forms must keep (stability, locality, causality).

use crate::common_mech::layers::*;
use crate::common_mech::{max_diff, seeded_input, to_f64, Rng, TProj, DTYPES, TW};
use kestrel_rt_cpu::kernels::aft::*;
use kestrel_rt_cpu::kernels::attention::*;
use kestrel_rt_cpu::kernels::fastformer::*;
use kestrel_rt_cpu::ShapeError;
use kestrel_rt_format::ops::AttentionVariant;
use kestrel_rt_format::DType;
use kestrel_rt_reference::mechanisms as reference;
use kestrel_rt_reference::testing::random_mask;
use kestrel_rt_reference::tolerance::F32_KERNEL;
use kestrel_rt_reference::{assert_close, compare};
use proptest::prelude::*;

const CASES: u32 = 192;

// ---------------------------------------------------------------- strategies

fn dim() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![4usize, 8, 12, 16])
}

fn heads() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![1usize, 2, 4])
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DTYPES.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn attention_matches_reference(
        t in 1usize..=24, d in dim(), h in heads(), causal: bool, v in 0usize..4,
        dt in dtype(), seed: u64,
    ) {
        let p = attn_params(t, d, h, causal, variant(v));
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut layer = AttnLayer::random(&mut rng, dt, &p);
        let want = layer.reference(&p, &x);
        assert_close(&format!("{p:?} {dt:?}"), &layer.run(&p, &x), &want, F32_KERNEL);
        assert_close(&format!("{p:?} {dt:?} row-wise"), &layer.run_rowwise(&p, &x), &want, F32_KERNEL);
    }

    /// G sequences `[G, T, d]` (MobileViT's attention over each patch pixel's tokens): each
    /// sequence equals the reference on it alone, with the projections over all G·T rows (the
    /// planned scratch) and one sequence at a time (the single-sequence scratch).
    #[test]
    fn grouped_attention_matches_reference_per_sequence(
        g in 2usize..=5, t in 1usize..=20, d in dim(), h in heads(), causal: bool, v in 0usize..4,
        dt in dtype(), seed: u64,
    ) {
        let p = attn_params(t, d, h, causal, variant(v));
        let (mut rng, x) = seeded_input(seed, g * t * d);
        let mut layer = AttnLayer::random(&mut rng, dt, &p);
        let want: Vec<f64> = x.chunks_exact(t * d).flat_map(|xs| layer.reference(&p, xs)).collect();
        for scratch in [attention_scratch_groups(&p, g), attention_scratch_fast(&p)] {
            let got = layer.run_groups(&p, g, &x, scratch);
            assert_close(&format!("{p:?} {dt:?} G = {g}, scratch {scratch}"), &got, &want, F32_KERNEL);
        }
    }

    /// G sequences with a mask: one all share (`[T, T]` or `[H, T, T]`: Swin's relative-position
    /// bias) or one block per sequence (`[G, 1, T, T]` or `[G, H, T, T]`: its shifted-window
    /// mask, one per window), each sequence against the reference with its own mask, on both
    /// scratch sizes (all G·T rows projected at once, and one sequence at a time).
    #[test]
    fn grouped_attention_with_masks_matches_reference_per_sequence(
        g in 2usize..=4, t in 1usize..=16, d in dim(), h in heads(), causal: bool, v in 0usize..4,
        per_group: bool, per_head: bool, seed: u64,
    ) {
        let p = attn_params(t, d, h, causal, variant(v));
        let (mut rng, x) = seeded_input(seed, g * t * d);
        let mut layer = AttnLayer::random(&mut rng, DType::F32, &p);
        let blocks = if per_head { h } else { 1 } * if per_group { g } else { 1 };
        let mask: Vec<f32> = (0..blocks).flat_map(|_| random_mask(&mut rng, t, true, causal, -100.0, true)).collect();
        let n = mask.len() / if per_group { g } else { 1 };
        let want: Vec<f64> = x
            .chunks_exact(t * d)
            .enumerate()
            .flat_map(|(k, xs)| {
                let m = if per_group { &mask[k * n..(k + 1) * n] } else { &mask[..] };
                layer.reference_masked(&p, xs, Some(m))
            })
            .collect();
        for scratch in [attention_scratch_groups(&p, g), attention_scratch_fast(&p)] {
            let got = layer.run_groups_masked(&p, g, &x, (&mask, per_group), scratch);
            let what = format!("{p:?} G = {g} per group {per_group} per head {per_head}, scratch {scratch}");
            assert_close(&what, &got, &want, F32_KERNEL);
        }
    }

    /// An additive mask (`[T]` per key or `[T, T]` per query and key; masked positions f32::MIN,
    /// −∞ or −1e4, kept ones 0 or a random bias; never a row with every visible key masked) on
    /// every path: planned, blocks of 5 queries (ragged, several per sample) and row-wise.
    #[test]
    fn masked_attention_matches_reference(
        t in 1usize..=24, d in dim(), h in heads(), causal: bool, v in 0usize..4,
        dt in dtype(), per_query: bool, fill in 0usize..3, bias: bool, seed: u64,
    ) {
        let p = attn_params(t, d, h, causal, variant(v));
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut layer = AttnLayer::random(&mut rng, dt, &p);
        let fill = [f32::MIN, f32::NEG_INFINITY, -1e4][fill];
        let mask = random_mask(&mut rng, t, per_query, causal, fill, bias);
        let want = layer.reference_masked(&p, &x, Some(&mask));
        let what = format!("{p:?} {dt:?} mask {mask:?}");
        for path in [Path::Planned, Path::Blocks(5), Path::RowWise] {
            assert_close(&format!("{what} {path:?}"), &layer.run_masked(&p, &x, &mask, path), &want, F32_KERNEL);
        }
    }

    /// A per-head score bias `[H, T, T]` (Swin's relative-position bias plus a shifted-window
    /// mask, T5's bucketed bias: each head its own `[T, T]` block, masked positions f32::MIN, −∞
    /// or −1e4, kept ones a random bias) on every path: planned, blocks of 5 queries and
    /// row-wise.
    #[test]
    fn per_head_bias_matches_reference(
        t in 1usize..=24, d in dim(), h in heads(), causal: bool, v in 0usize..4,
        dt in dtype(), fill in 0usize..3, seed: u64,
    ) {
        let p = attn_params(t, d, h, causal, variant(v));
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut layer = AttnLayer::random(&mut rng, dt, &p);
        let fill = [f32::MIN, f32::NEG_INFINITY, -1e4][fill];
        let mask: Vec<f32> = (0..h).flat_map(|_| random_mask(&mut rng, t, true, causal, fill, true)).collect();
        let want = layer.reference_masked(&p, &x, Some(&mask));
        let what = format!("{p:?} {dt:?} per-head mask {mask:?}");
        for path in [Path::Planned, Path::Blocks(5), Path::RowWise] {
            assert_close(&format!("{what} {path:?}"), &layer.run_masked(&p, &x, &mask, path), &want, F32_KERNEL);
        }
    }

    #[test]
    fn aft_full_matches_reference(
        t in 1usize..=24, d in dim(), causal: bool, rank in 0usize..=5, dt in dtype(), seed: u64,
    ) {
        let p = AftFullParams { shape: AftShape { t, d, causal }, rank };
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut layer = AftFullLayer::random(&mut rng, dt, &p, 0.0);
        let want = layer.reference(&p, &x);
        assert_close(&format!("{p:?} {dt:?}"), &layer.run(&p, &x), &want, F32_KERNEL);
        assert_close(&format!("{p:?} {dt:?} row-wise"), &layer.run_rowwise(&p, &x), &want, F32_KERNEL);
    }

    #[test]
    fn aft_local_matches_reference(
        t in 1usize..=24, d in dim(), causal: bool, window in 1usize..=28, dt in dtype(),
        seed: u64,
    ) {
        let p = AftLocalParams { shape: AftShape { t, d, causal }, window };
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut layer = AftLocalLayer::random(&mut rng, dt, &p, 0.0);
        let want = layer.reference(&p, &x);
        assert_close(&format!("{p:?} {dt:?}"), &layer.run(&p, &x), &want, F32_KERNEL);
        // w stored as its band [T, 2s − 1] (when narrower than T).
        let mut banded = AftLocalLayer::random_band(&mut rng, dt, &p, 0.0);
        let want = banded.reference(&p, &x);
        assert_close(&format!("{p:?} {dt:?} band"), &banded.run(&p, &x), &want, F32_KERNEL);
    }

    #[test]
    fn aft_simple_matches_reference(
        t in 1usize..=24, d in dim(), causal: bool, dt in dtype(), seed: u64,
    ) {
        let p = AftSimpleParams { t, d, causal };
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut layer = Proj4::random(&mut rng, dt, d, d, 0.0);
        let want = simple_reference(&layer, &p, &x);
        assert_close(&format!("{p:?} {dt:?}"), &simple_run(&mut layer, &p, &x), &want, F32_KERNEL);
    }

    #[test]
    fn aft_conv_matches_direct_reference(
        gh in 1usize..=5, gw in 1usize..=5, d in dim(), h in heads(),
        kernel in prop::sample::select(vec![1usize, 3, 5]), dt in dtype(), seed: u64,
    ) {
        let p = AftConvParams { t: gh * gw, d, heads: h, kernel, grid_h: gh, grid_w: gw };
        let (mut rng, x) = seeded_input(seed, p.t * d);
        let mut layer = AftConvLayer::random(&mut rng, dt, &p, 0.0);
        let want = layer.reference(&p, &x);
        assert_close(&format!("{p:?} {dt:?}"), &layer.run(&p, &x), &want, F32_KERNEL);
    }

    #[test]
    fn fastformer_matches_reference(
        t in 1usize..=24, d in dim(), h in heads(), dt in dtype(), seed: u64,
    ) {
        let p = ff_params(t, d, h);
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut layer = FfLayer::random(&mut rng, dt, &p, 0.0);
        let want = layer.reference(&p, &x);
        assert_close(&format!("{p:?} {dt:?}"), &layer.run(&p, &x), &want, F32_KERNEL);
    }

    /// Perturbing tokens after `cut` leaves outputs up to `cut` unchanged: bit for bit where the
    /// kernel reads nothing later (attention, AFT-simple), within f32 rounding for AFT-full and
    /// AFT-local (their shared per-channel key maximum spans all tokens).
    #[test]
    fn causal_outputs_ignore_later_tokens(
        t in 2usize..=16, d in dim(), h in heads(), mech in 0usize..7, cut_frac in 0.0f64..1.0,
        dt in dtype(), seed: u64,
    ) {
        let cut = ((t - 1) as f64 * cut_frac) as usize;
        let (mut rng, x) = seeded_input(seed, t * d);
        let mut x2 = x.clone();
        for v in &mut x2[(cut + 1) * d..] {
            *v += 3.0 * rng.normal();
        }
        let n = (cut + 1) * d;
        let (y1, y2, exact) = match mech {
            0..=3 => {
                let p = attn_params(t, d, h, true, variant(mech));
                let mut l = AttnLayer::random(&mut rng, dt, &p);
                (l.run(&p, &x), l.run(&p, &x2), true)
            }
            4 => {
                let p = AftFullParams { shape: AftShape { t, d, causal: true }, rank: 0 };
                let mut l = AftFullLayer::random(&mut rng, dt, &p, 0.0);
                (l.run(&p, &x), l.run(&p, &x2), false)
            }
            5 => {
                let p = AftLocalParams { shape: AftShape { t, d, causal: true }, window: 1 + (seed % 4) as usize };
                let mut l = AftLocalLayer::random(&mut rng, dt, &p, 0.0);
                (l.run(&p, &x), l.run(&p, &x2), false)
            }
            _ => {
                let p = AftSimpleParams { t, d, causal: true };
                let mut l = Proj4::random(&mut rng, dt, d, d, 0.0);
                (simple_run(&mut l, &p, &x), simple_run(&mut l, &p, &x2), true)
            }
        };
        // The perturbation must reach the later outputs, or the test proves nothing.
        prop_assert!(max_diff(&y1[n..], &y2[n..], t * d - n) > 1e-3);
        if exact {
            prop_assert_eq!(&y1[..n], &y2[..n]);
        } else {
            assert_close("causal prefix", &y2[..n], &to_f64(&y1[..n]), F32_KERNEL);
        }
    }
}

// ---------------------------------------------------------------- named properties

/// Keys near 100 (exp(100) overflows f32) stay finite and accurate in every AFT variant and in
/// Fastformer, in every encoding.
#[test]
fn large_keys_are_stable() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        for causal in [false, true] {
            let seed = 7 + n as u64 + 100 * u64::from(causal);
            let mut rng = Rng::new(seed);
            let (t, d) = (9, 8);
            let x = rng.normal_vec(t * d);
            let what = format!("{dt:?} causal={causal}");

            for rank in [0, 3] {
                let p = AftFullParams { shape: AftShape { t, d, causal }, rank };
                let mut l = AftFullLayer::random(&mut rng, dt, &p, 100.0);
                let want = l.reference(&p, &x);
                assert_close(&format!("aft_full rank {rank} {what}"), &l.run(&p, &x), &want, F32_KERNEL);
                let got = l.run_rowwise(&p, &x);
                assert_close(&format!("aft_full rank {rank} row-wise {what}"), &got, &want, F32_KERNEL);
            }

            let p = AftLocalParams { shape: AftShape { t, d, causal }, window: 2 };
            let mut l = AftLocalLayer::random(&mut rng, dt, &p, 100.0);
            assert_close(&format!("aft_local {what}"), &l.run(&p, &x), &l.reference(&p, &x), F32_KERNEL);

            let p = AftSimpleParams { t, d, causal };
            let mut l = Proj4::random(&mut rng, dt, d, d, 100.0);
            let got = simple_run(&mut l, &p, &x);
            assert_close(&format!("aft_simple {what}"), &got, &simple_reference(&l, &p, &x), F32_KERNEL);

            let p = AftConvParams { t: 12, d, heads: 2, kernel: 3, grid_h: 3, grid_w: 4 };
            let xc = rng.normal_vec(12 * d);
            let mut l = AftConvLayer::random(&mut rng, dt, &p, 100.0);
            assert_close(&format!("aft_conv {dt:?}"), &l.run(&p, &xc), &l.reference(&p, &xc), F32_KERNEL);

            let p = ff_params(t, d, 2);
            let mut l = FfLayer::random(&mut rng, dt, &p, 100.0);
            assert_close(&format!("fastformer {dt:?}"), &l.run(&p, &x), &l.reference(&p, &x), F32_KERNEL);
        }
    }
}

/// A single key channel that rises by 100 over the sequence (the running maximum in causal
/// AFT-simple must rescale its prefix sums).
#[test]
fn aft_simple_causal_survives_rising_keys() {
    let (t, d) = (12, 4);
    let mut rng = Rng::new(3);
    let mut x = rng.normal_vec(t * d);
    for (i, row) in x.chunks_exact_mut(d).enumerate() {
        row[0] = 12.0 * i as f32;
    }
    let p = AftSimpleParams { t, d, causal: true };
    let mut l = Proj4::random(&mut rng, DType::F32, d, d, 0.0);
    let got = simple_run(&mut l, &p, &x);
    assert!(got.iter().all(|v| v.is_finite()));
    assert_close("aft_simple rising keys", &got, &simple_reference(&l, &p, &x), F32_KERNEL);
}

/// With s ≥ T every pair is inside the window, so AFT-local is AFT-full with the same w.
#[test]
fn aft_local_with_window_at_least_t_equals_aft_full() {
    for (n, dt) in DTYPES.into_iter().enumerate() {
        for causal in [false, true] {
            for (t, extra) in [(1, 0), (5, 0), (11, 3)] {
                let mut rng = Rng::new(40 + n as u64);
                let d = 8;
                let x = rng.normal_vec(t * d);
                let pl = AftLocalParams { shape: AftShape { t, d, causal }, window: t + extra };
                let mut local = AftLocalLayer::random(&mut rng, dt, &pl, 0.0);
                let pf = AftFullParams { shape: AftShape { t, d, causal }, rank: 0 };
                let w = Some(TW::new(DType::F32, t, t, &local.w_values()));
                let mut full = AftFullLayer { p: local.p_decoded(), w, uv: None };
                let yl = local.run(&pl, &x);
                let yf = full.run(&pf, &x);
                assert_close(&format!("local==full {dt:?} t={t}"), &yl, &to_f64(&yf), F32_KERNEL);
            }
        }
    }
}

/// AFT-local keeps global connectivity: with s = 1, a token far outside every window still
/// changes token 0's output (w is 0 there, not −∞), in line with the reference.
#[test]
fn aft_local_keeps_global_connectivity() {
    for causal in [false, true] {
        let (t, d) = (16, 8);
        let mut rng = Rng::new(11);
        let x = rng.normal_vec(t * d);
        let p = AftLocalParams { shape: AftShape { t, d, causal }, window: 1 };
        let mut l = AftLocalLayer::random(&mut rng, DType::F32, &p, 0.0);
        let mut x2 = x.clone();
        // Token 10 is outside the s = 1 window of tokens 0..10 and of 11..16.
        for v in &mut x2[10 * d..11 * d] {
            *v += 2.0;
        }
        let (y1, y2) = (l.run(&p, &x), l.run(&p, &x2));
        let far = if causal { 12 } else { 0 };
        assert!(max_diff(&y1[far * d..], &y2[far * d..], d) > 1e-3, "token {far} ignores token 10 (causal={causal})");
        assert_close("global connectivity", &y2, &l.reference(&p, &x2), F32_KERNEL);
    }
}

/// Causal Super attention reads only the lower triangle of W^A: changing the strict upper
/// triangle leaves the output bit for bit unchanged (f32 weights, so the lower triangle keeps its
/// exact values; quantised rows would rescale).
#[test]
fn super_causal_ignores_upper_triangle_of_wa() {
    for h in [1, 2, 4] {
        let (t, d) = (10, 8);
        let mut rng = Rng::new(h as u64);
        let x = rng.normal_vec(t * d);
        let p = attn_params(t, d, h, true, AttentionVariant::Super);
        let mut l = AttnLayer::random(&mut rng, DType::F32, &p);
        let y1 = l.run(&p, &x);
        assert_close("super causal", &y1, &l.reference(&p, &x), F32_KERNEL);
        let a = l.align.as_mut().unwrap();
        let mut vals: Vec<f32> = a.w.dec.iter().map(|&v| v as f32).collect();
        for i in 0..t {
            for j in i + 1..t {
                vals[i * t + j] = 5.0 * rng.normal();
            }
        }
        a.w = TW::new(DType::F32, t, t, &vals);
        assert_eq!(y1, l.run(&p, &x));
        // Non-causal Super does read the upper triangle.
        let pn = attn_params(t, d, h, false, AttentionVariant::Super);
        let yn = l.run(&pn, &x);
        assert_close("super non-causal", &yn, &l.reference(&pn, &x), F32_KERNEL);
    }
}

/// The AFT-conv kernel treats w as a cross-correlation kernel (PyTorch's conv2d): an
/// asymmetric kernel on a non-square grid distinguishes it from a flipped convolution.
#[test]
fn aft_conv_kernel_orientation() {
    let p = AftConvParams { t: 15, d: 4, heads: 1, kernel: 3, grid_h: 3, grid_w: 5 };
    let mut rng = Rng::new(5);
    let x = rng.normal_vec(p.t * p.d);
    let mut l = AftConvLayer::random(&mut rng, DType::F32, &p, 0.0);
    let mut taps = vec![0.0f32; 9];
    taps[5] = 4.0; // (a, b) = (1, 2): the right-hand neighbour
    l.w = TW::new(DType::F32, 1, 9, &taps);
    let got = l.run(&p, &x);
    assert_close("conv orientation", &got, &l.reference(&p, &x), F32_KERNEL);
    let flipped: Vec<f64> = l.w.dec.iter().rev().copied().collect();
    let wrong = reference::aft_conv(&to_f64(&x), [3, 5], 4, 1, 3, &l.p.dense(), &flipped);
    assert!(!compare(&got, &wrong, F32_KERNEL).pass);
}

/// `check` rejects shapes the kernels cannot run.
#[test]
fn check_rejects_bad_shapes() {
    let mut rng = Rng::new(9);
    let p = attn_params(4, 8, 2, false, AttentionVariant::Standard);
    let mut l = AttnLayer::random(&mut rng, DType::F32, &p);
    let w = AttentionWeights { q: l.q.view(), k: None, v: None, align: None, o: l.o.view() };
    assert!(matches!(p.check(&w), Err(ShapeError::Mismatch { .. })));
    let bad = AttentionParams { heads: 3, ..p };
    let mut l = AttnLayer::random(&mut rng, DType::F32, &p);
    let w = AttentionWeights {
        q: l.q.view(),
        k: l.k.as_mut().map(TProj::view),
        v: l.v.as_mut().map(TProj::view),
        align: None,
        o: l.o.view(),
    };
    assert!(p.check(&w).is_ok());
    assert!(matches!(bad.check(&w), Err(ShapeError::Invalid { .. })));

    let p = AftLocalParams { shape: AftShape { t: 5, d: 4, causal: false }, window: 2 };
    let mut l = AftLocalLayer::random(&mut rng, DType::F32, &p, 0.0);
    let pr = &mut l.p;
    let w = AftLocalWeights { proj: pr.view(), w: l.w.view() };
    assert!(p.check(&w).is_ok());
    for bad in [AftLocalParams { window: 0, ..p }, AftLocalParams { shape: AftShape { t: 6, ..p.shape }, ..p }] {
        assert!(bad.check(&w).is_err(), "{bad:?}");
    }

    let p = AftConvParams { t: 6, d: 4, heads: 2, kernel: 3, grid_h: 2, grid_w: 3 };
    let mut l = AftConvLayer::random(&mut rng, DType::F32, &p, 0.0);
    let pr = &mut l.p;
    let w = AftConvWeights { proj: pr.view(), w: l.w.view() };
    assert!(p.check(&w).is_ok());
    for bad in [AftConvParams { grid_w: 2, ..p }, AftConvParams { kernel: 2, ..p }, AftConvParams { heads: 1, ..p }] {
        assert!(bad.check(&w).is_err(), "{bad:?}");
    }

    let p = AftFullParams { shape: AftShape { t: 5, d: 4, causal: false }, rank: 2 };
    let mut l = AftFullLayer::random(&mut rng, DType::F32, &p, 0.0);
    let (u, v) = l.uv.as_mut().unwrap();
    let pr = &mut l.p;
    let bias = AftBiasW::Factorised { u: u.view(), v: v.view() };
    let w = AftFullWeights { proj: pr.view(), w: bias };
    assert!(p.check(&w).is_ok());
    for bad in [AftFullParams { rank: 0, ..p }, AftFullParams { rank: 3, ..p }] {
        assert!(bad.check(&w).is_err(), "{bad:?}");
    }

    let p = ff_params(5, 8, 2);
    let mut l = FfLayer::random(&mut rng, DType::F32, &p, 0.0);
    let w = l.weights();
    assert!(p.check(&w).is_ok());
    assert!(FastformerParams { heads: 4, ..p }.check(&w).is_err());
}

/// A row whose every key is masked: with a finite fill (f32::MIN, what transformers writes) the
/// scores are all equal in f32, so the weights are uniform and the head output is the mean of
/// the values (PyTorch and onnxruntime compute the same); with −∞ the weights are zero (no
/// NaN). Other rows are unaffected by the masked row. On every path.
#[test]
fn fully_masked_rows_are_uniform_or_zero_never_nan() {
    let (t, d, h) = (6, 8, 2);
    let mut rng = Rng::new(5);
    let x = rng.normal_vec(t * d);
    // Optimised: V = X, so the uniform head output is the mean of the input rows.
    for variant in [AttentionVariant::Optimised, AttentionVariant::Standard] {
        let p = attn_params(t, d, h, false, variant);
        let mut l = AttnLayer::random(&mut rng, DType::F32, &p);
        // Row 2 of a [T, T] mask masks every key; the other rows keep keys 0 and 3.
        let mut mask = vec![f32::MIN; t * t];
        for i in (0..t).filter(|&i| i != 2) {
            mask[i * t] = 0.0;
            mask[i * t + 3] = 0.0;
        }
        let want = l.reference_masked(&p, &x, Some(&mask));
        for path in [Path::Planned, Path::Blocks(4), Path::RowWise] {
            let finite = l.run_masked(&p, &x, &mask, path);
            assert!(finite.iter().all(|v| v.is_finite()), "{path:?}: {finite:?}");
            // Rows other than 2 match the reference.
            for i in (0..t).filter(|&i| i != 2) {
                assert_close(
                    &format!("{path:?} row {i}"),
                    &finite[i * d..(i + 1) * d],
                    &want[i * d..(i + 1) * d],
                    F32_KERNEL,
                );
            }
            // Row 2: uniform weights, so every head outputs the mean of its values, and the row is
            // (mean of V) W^Oᵀ + b^O, V = X (Optimised) or X W^Vᵀ + b^V (Standard; linear, so
            // the mean of V is V of the mean input row).
            let mean_x: Vec<f64> =
                (0..d).map(|f| (0..t).map(|j| f64::from(x[j * d + f])).sum::<f64>() / t as f64).collect();
            let mean_v = match &l.v {
                Some(v) => v.dense().apply(&mean_x, 1, d),
                None => mean_x,
            };
            let uniform = l.o.dense().apply(&mean_v, 1, d);
            assert_close(&format!("{path:?} row 2 uniform"), &finite[2 * d..3 * d], &uniform, F32_KERNEL);
            // With −∞ the row's head outputs are 0, so its output is W^O's bias.
            let mut inf = mask.clone();
            inf.iter_mut().filter(|v| **v == f32::MIN).for_each(|v| *v = f32::NEG_INFINITY);
            let got = l.run_masked(&p, &x, &inf, path);
            assert!(got.iter().all(|v| v.is_finite()), "{path:?} −∞: {got:?}");
            let want_inf = l.reference_masked(&p, &x, Some(&inf));
            assert_close(&format!("{path:?} −∞"), &got, &want_inf, F32_KERNEL);
            let bias_o: Vec<f64> = l.o.b.as_ref().map_or(vec![0.0; d], |b| b.dec.clone());
            assert_close(&format!("{path:?} −∞ row 2 = b^O"), &got[2 * d..3 * d], &bias_o, F32_KERNEL);
        }
    }
}

/// A `[T]` key mask equals the `[T, T]` mask that repeats it on every row, and a zero mask
/// changes nothing.
#[test]
fn key_mask_broadcasts_over_queries() {
    let (t, d) = (7, 8);
    let mut rng = Rng::new(11);
    let x = rng.normal_vec(t * d);
    for causal in [false, true] {
        let p = attn_params(t, d, 2, causal, AttentionVariant::Standard);
        let mut l = AttnLayer::random(&mut rng, DType::F32, &p);
        let key = random_mask(&mut rng, t, false, causal, f32::MIN, true);
        let full: Vec<f32> = (0..t).flat_map(|_| key.iter().copied()).collect();
        for path in [Path::Planned, Path::RowWise] {
            let a = l.run_masked(&p, &x, &key, path);
            let b = l.run_masked(&p, &x, &full, path);
            assert_eq!(a, b, "{path:?} causal {causal}");
            let z = l.run_masked(&p, &x, &vec![0.0; t], path);
            assert_close(&format!("{path:?} zero mask"), &z, &l.reference(&p, &x), F32_KERNEL);
        }
    }
}

/// An `[H, T, T]` bias whose every head holds the same `[T, T]` block equals that `[T, T]`
/// bias (bit for bit: the same row is added), and heads really read their own blocks: a bias
/// that masks every key but one in head 0 only changes head 0's columns of the heads' output.
#[test]
fn per_head_bias_reads_each_heads_block() {
    let (t, d, h) = (7, 12, 3);
    let mut rng = Rng::new(17);
    let x = rng.normal_vec(t * d);
    for causal in [false, true] {
        let p = attn_params(t, d, h, causal, AttentionVariant::Efficient);
        let mut l = AttnLayer::random(&mut rng, DType::F32, &p);
        let block = random_mask(&mut rng, t, true, causal, f32::MIN, true);
        let same: Vec<f32> = (0..h).flat_map(|_| block.iter().copied()).collect();
        for path in [Path::Planned, Path::Blocks(3), Path::RowWise] {
            assert_eq!(l.run_masked(&p, &x, &block, path), l.run_masked(&p, &x, &same, path), "{path:?}");
            // Head 1 differs from heads 0 and 2: the reference (which reads head h's block)
            // agrees only if the kernel does too.
            let mut differ = same.clone();
            differ[t * t..2 * t * t].iter_mut().for_each(|v| *v += 3.0 * rng.normal());
            let want = l.reference_masked(&p, &x, Some(&differ));
            assert_close(&format!("{path:?} causal {causal}"), &l.run_masked(&p, &x, &differ, path), &want, F32_KERNEL);
            let shared = l.run_masked(&p, &x, &same, path);
            assert!(!compare(&shared, &want, F32_KERNEL).pass, "{path:?}: head 1's own block changed nothing");
        }
    }
}

/// The paper's benchmark size (T = d = 64, as in MNIST and Amazon): longer reductions than the
/// property tests reach, still within the f32 kernel tolerance.
#[test]
fn attention_over_several_query_blocks_matches_reference() {
    // T = 150: one block of 150 queries as planned now; with scratch for QB = 64-row blocks
    // (older files) blocks of 64, 64 and 22 (the last one ragged), causal blocks seeing a growing
    // prefix of the keys. T = 300 (over ONE_BLOCK_MAX_T): QB-row blocks as planned.
    use kestrel_rt_cpu::kernels::attention::{ONE_BLOCK_MAX_T, QB};
    let mut rng = Rng::new(77);
    for (t, d) in [(150, 16), (ONE_BLOCK_MAX_T + 44, 8)] {
        let x = rng.normal_vec(t * d);
        for v in 0..4 {
            for (h, causal) in [(1, false), (2, true), (4, false), (1, true)] {
                let p = attn_params(t, d, h, causal, variant(v));
                let mut l = AttnLayer::random(&mut rng, DTYPES[0], &p);
                let want = l.reference(&p, &x);
                assert_close(&format!("{p:?}"), &l.run(&p, &x), &want, F32_KERNEL);
                assert_close(&format!("{p:?} QB blocks"), &l.run_blocks(&p, &x, QB), &want, F32_KERNEL);
                assert_close(&format!("{p:?} row-wise"), &l.run_rowwise(&p, &x), &want, F32_KERNEL);
            }
        }
    }
}

/// AFT-full past one block of queries (T > 256: blocks of 64, the last ragged), full and
/// factorised position biases, causal and not.
#[test]
fn aft_full_over_several_query_blocks_matches_reference() {
    let (t, d) = (kestrel_rt_cpu::kernels::attention::ONE_BLOCK_MAX_T + 37, 8);
    let mut rng = Rng::new(91);
    let x = rng.normal_vec(t * d);
    for (causal, rank) in [(false, 0), (true, 0), (false, 4), (true, 4)] {
        let p = AftFullParams { shape: AftShape { t, d, causal }, rank };
        let mut l = AftFullLayer::random(&mut rng, DTYPES[0], &p, 0.0);
        let want = l.reference(&p, &x);
        assert_close(&format!("{p:?}"), &l.run(&p, &x), &want, F32_KERNEL);
        assert_close(&format!("{p:?} row-wise"), &l.run_rowwise(&p, &x), &want, F32_KERNEL);
    }
}

#[test]
fn benchmark_size_matches_reference() {
    let (t, d) = (64, 64);
    for (n, dt) in DTYPES.into_iter().enumerate() {
        let mut rng = Rng::new(1000 + n as u64);
        let x = rng.normal_vec(t * d);
        for (v, h, causal) in [(0, 4, false), (1, 2, true), (2, 1, false), (3, 1, true)] {
            let p = attn_params(t, d, h, causal, variant(v));
            let mut l = AttnLayer::random(&mut rng, dt, &p);
            assert_close(&format!("{p:?} {dt:?}"), &l.run(&p, &x), &l.reference(&p, &x), F32_KERNEL);
        }
        let p = AftFullParams { shape: AftShape { t, d, causal: false }, rank: 16 };
        let mut l = AftFullLayer::random(&mut rng, dt, &p, 0.0);
        assert_close(&format!("{p:?} {dt:?}"), &l.run(&p, &x), &l.reference(&p, &x), F32_KERNEL);
        let p = AftLocalParams { shape: AftShape { t, d, causal: true }, window: 7 };
        let mut l = AftLocalLayer::random(&mut rng, dt, &p, 0.0);
        assert_close(&format!("{p:?} {dt:?}"), &l.run(&p, &x), &l.reference(&p, &x), F32_KERNEL);
        let p = AftSimpleParams { t, d, causal: false };
        let mut l = Proj4::random(&mut rng, dt, d, d, 0.0);
        let got = simple_run(&mut l, &p, &x);
        assert_close(&format!("{p:?} {dt:?}"), &got, &simple_reference(&l, &p, &x), F32_KERNEL);
        let p = AftConvParams { t, d, heads: 4, kernel: 5, grid_h: 8, grid_w: 8 };
        let mut l = AftConvLayer::random(&mut rng, dt, &p, 0.0);
        assert_close(&format!("{p:?} {dt:?}"), &l.run(&p, &x), &l.reference(&p, &x), F32_KERNEL);
        let p = ff_params(t, d, 4);
        let mut l = FfLayer::random(&mut rng, dt, &p, 0.0);
        assert_close(&format!("{p:?} {dt:?}"), &l.run(&p, &x), &l.reference(&p, &x), F32_KERNEL);
    }
}
