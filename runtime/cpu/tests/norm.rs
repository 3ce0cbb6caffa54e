//! Property tests of the layer norm kernel (last axis and channels-first) against the f64
//! references in `kestrel_rt_reference::layers`, for every weight encoding, plus its shape checks.

use crate::common_layers::*;
use kestrel_rt_cpu::error::ShapeError;
use kestrel_rt_cpu::kernels::norm::{channels_chunk, layer_norm, layer_norm_scratch, LayerNormParams};
use kestrel_rt_format::ops::NormAxis;
use kestrel_rt_format::WeightView;
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::layers as r;
use kestrel_rt_reference::tolerance::F32_KERNEL;
use proptest::prelude::*;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn layer_norm_matches_reference(
        (rows, d, x, g, b) in (1usize..4, 4usize..100).prop_flat_map(|(rows, d)| {
            (Just(rows), Just(d), vals(rows * d), vals(d), vals(d))
        }),
        dt in dtype(),
        with_beta in any::<bool>(),
        eps in prop::sample::select(vec![1e-6f32, 1e-5, 1e-3]),
    ) {
        let mut gt = TestWeight::new(dt, &[d], &g);
        let mut bt = TestWeight::new(dt, &[d], &b);
        let (gv, bv) = (gt.view(), bt.view());
        let beta = with_beta.then_some(&bv);
        let p = LayerNormParams::new(&shape(&[rows, d]), &gv, beta, eps).unwrap();
        let mut y = out(rows * d);
        layer_norm(&p, &gv, beta, &x, &mut y, &mut scratch(layer_norm_scratch(&p)));
        let want = r::layer_norm(&f64s(&x), d, &gt.decoded, with_beta.then_some(&bt.decoded[..]), f64::from(eps));
        assert_close("layer_norm", &y, &want, F32_KERNEL);
    }
}

proptest! {
    #![proptest_config(config())]

    /// Channels-first `[C, S…]`: C = 1 (each position constant: y = β) or from 4 (as the
    /// last-axis test: fewer random values may lie so close together that f32 inputs cannot
    /// resolve their deviations to 1e-5) past a vector's lanes, S from one position past
    /// the kernel's chunk of positions for the small C (a partial last chunk), the spatial axes
    /// flattened or not; each
    /// position's values shifted by its own offset (of the values' magnitude), so that the
    /// means differ across positions.
    #[test]
    fn layer_norm_channels_matches_reference(
        (c, hw, x, g, b) in (prop_oneof![Just(1usize), 4usize..40], prop::sample::select(vec![(1usize, 1usize), (2, 3), (5, 7), (8, 8), (9, 17)]))
            .prop_flat_map(|(c, hw)| (Just(c), Just(hw), vals(c * hw.0 * hw.1), vals(c), vals(c))),
        offset in -1.0f32..1.0,
        dt in dtype(),
        with_beta in any::<bool>(),
        flat in any::<bool>(),
        eps in prop::sample::select(vec![1e-6f32, 1e-5, 1e-3]),
    ) {
        let s = hw.0 * hw.1;
        let x: Vec<f32> = x.iter().enumerate().map(|(i, v)| v + offset * ((i % s) as f32 / s as f32)).collect();
        let mut gt = TestWeight::new(dt, &[c], &g);
        let mut bt = TestWeight::new(dt, &[c], &b);
        let (gv, bv) = (gt.view(), bt.view());
        let beta = with_beta.then_some(&bv);
        let dims = if flat { shape(&[c, s]) } else { shape(&[c, hw.0, hw.1]) };
        let p = LayerNormParams::with_axis(&dims, &gv, beta, eps, NormAxis::Channels).unwrap();
        prop_assert_eq!((p.rows, p.d, p.inner), (1, c, s));
        let mut y = out(c * s);
        layer_norm(&p, &gv, beta, &x, &mut y, &mut scratch(layer_norm_scratch(&p)));
        let want = r::layer_norm_channels(&f64s(&x), c, &gt.decoded, with_beta.then_some(&bt.decoded[..]), f64::from(eps));
        assert_close("layer_norm channels", &y, &want, F32_KERNEL);
    }
}

/// Wide maps (several chunks of positions, a partial last one; from 16 positions a chunk for
/// many channels to 1024 for few) on fixed random inputs: what the proptest's small shapes do not
/// reach.
#[test]
fn layer_norm_channels_matches_reference_on_wide_maps() {
    let mut rng = kestrel_rt_reference::testing::Rng::new(7);
    for (c, chunks) in [(96usize, 3usize), (600, 4), (4, 2)] {
        let g: Vec<f32> = (0..c).map(|_| 1.0 + rng.uniform(0.5)).collect();
        let b: Vec<f32> = (0..c).map(|_| rng.uniform(0.5)).collect();
        let (gv, bv) = (WeightView::f32(1, c, &g).unwrap(), WeightView::f32(1, c, &b).unwrap());
        let chunk = {
            let wide = LayerNormParams::with_axis(&shape(&[c, 1 << 16]), &gv, None, 1e-6, NormAxis::Channels).unwrap();
            channels_chunk(&wide)
        };
        let s = chunks * chunk + 5;
        let x: Vec<f32> = (0..c * s).map(|i| rng.uniform(2.0) + (i % s) as f32 * 0.001).collect();
        let p = LayerNormParams::with_axis(&shape(&[c, s]), &gv, Some(&bv), 1e-6, NormAxis::Channels).unwrap();
        assert_eq!(layer_norm_scratch(&p), 2 * c + 2 * chunk);
        let mut y = out(c * s);
        layer_norm(&p, &gv, Some(&bv), &x, &mut y, &mut scratch(layer_norm_scratch(&p)));
        let want = r::layer_norm_channels(&f64s(&x), c, &f64s(&g), Some(&f64s(&b)), 1e-6);
        assert_close(&format!("layer_norm channels [{c}, {s}] (chunks of {chunk})"), &y, &want, F32_KERNEL);
    }
}

#[test]
fn layer_norm_check_rejects_wrong_shapes() {
    let g = [1.0f32; 4];
    let gv = WeightView::f32(1, 4, &g).unwrap();
    let bad = WeightView::f32(1, 3, &g[..3]).unwrap();
    assert!(matches!(
        LayerNormParams::new(&shape(&[2, 5]), &gv, None, 1e-5),
        Err(ShapeError::Mismatch { what: "gamma elements", expected: 5, found: 4, .. })
    ));
    assert!(matches!(
        LayerNormParams::new(&shape(&[2, 4]), &gv, Some(&bad), 1e-5),
        Err(ShapeError::Mismatch { what: "beta elements", expected: 4, found: 3, .. })
    ));
    assert!(matches!(LayerNormParams::new(&shape(&[2, 0]), &gv, None, 1e-5), Err(ShapeError::Invalid { .. })));
    // Channels-first: γ and β hold C (the first axis) values, not the last axis' count.
    let ch = |dims: &[usize], beta| LayerNormParams::with_axis(&shape(dims), &gv, beta, 1e-5, NormAxis::Channels);
    assert!(ch(&[4, 3, 5], None).is_ok());
    assert!(matches!(
        ch(&[5, 4], None),
        Err(ShapeError::Mismatch { what: "gamma elements", expected: 5, found: 4, .. })
    ));
    assert!(matches!(
        ch(&[4, 2], Some(&bad)),
        Err(ShapeError::Mismatch { what: "beta elements", expected: 4, found: 3, .. })
    ));
    assert!(matches!(ch(&[0, 4], None), Err(ShapeError::Invalid { .. })));
    assert!(matches!(LayerNormParams::new(&shape(&[2, 4]), &gv, None, f32::NAN), Err(ShapeError::Invalid { .. })));
}
