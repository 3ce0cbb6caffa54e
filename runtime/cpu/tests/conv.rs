//! Property tests of the convolution kernel's paths (GEMM, small-plane transposed GEMM, 1×1,
//! depthwise phase planes, depthwise channels-innermost, grouped, and the direct loop a file
//! with less scratch falls back to) on random geometry, against the f64 reference
//! (`kestrel_rt_reference::layers::conv2d`), for every weight encoding.

use crate::common_layers::cases::*;
use crate::common_layers::*;
use kestrel_rt_cpu::kernels::conv::{
    conv2d, conv2d_clamped, conv2d_part, conv2d_part_unit, conv2d_residual, conv2d_scratch, conv2d_scratch_fast,
    conv2d_splits, Conv2dParams,
};
use kestrel_rt_cpu::kernels::{epilogue, Clamp, Elementwise};
use kestrel_rt_cpu::ProjW;
use kestrel_rt_format::ops::Activation;
use kestrel_rt_reference::layers as r;
use kestrel_rt_reference::testing::act as act_of;
use proptest::prelude::*;

proptest! {
    #![proptest_config(config())]

    #[test]
    fn conv2d_random_geometry_matches_reference(
        (case, xs, ws) in conv_case(),
        dt in dtype(),
        bias in any::<bool>(),
        bs in vals(16),
        act in prop::sample::select(Activation::ALL),
    ) {
        let (c, h, w, o, kh, kw, stride, pad, dilation, groups) = case;
        let ws_shape = [o, c / groups, kh, kw];
        let p = Conv2dParams::new(&shape(&[c, h, w]), &shape(&ws_shape), stride, pad, dilation, groups).unwrap();
        let run = |x: &[f32], ws: &[f32], bs: &[f32], fast: bool| {
            let mut wt = TestWeight::new(dt, &ws_shape, ws);
            let mut bt = TestWeight::new(dt, &[o], &bs[..o]);
            let spec = r::ConvSpec { stride, pad, dilation, groups };
            let (want, oh, ow) =
                r::conv2d(&f64s(x), [c, h, w], &wt.decoded, ws_shape, bias.then_some(&bt.decoded[..]), spec);
            let want: Vec<f64> = want.iter().map(|&v| r::act(act_of(act), v)).collect();
            assert_eq!((p.oh, p.ow), (oh, ow));
            let proj = ProjW { w: wt.view(), b: bias.then(|| bt.view()), act_scale: None };
            let mut y = out(o * oh * ow);
            let n = if fast { conv2d_scratch_fast(&p) } else { conv2d_scratch(&p) };
            conv2d(&p, &proj, act, x, &mut y, &mut scratch(n));
            (y, want)
        };
        for fast in [true, false] {
            let what = format!("conv2d {case:?} {dt:?} bias {bias} {act:?} fast {fast}");
            let (y, want) = run(&xs, &ws, &bs, fast);
            let (mag, mag_want) = run(&abs(&xs), &abs(&ws), &abs(&bs), fast);
            assert_close_dot(&what, &y, &want, &mag, &mag_want);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// A layer's clamp after its activation (`conv2d_clamped`, the planner's scratch): against
    /// the reference (activation, then `min(max(v, lo), hi)` in f64), and, where the epilogue is
    /// a ReLU and/or a clamp (which the depthwise kernel applies as it copies each row out, with
    /// the bias), equal to the unfused layer (no activation) followed by `epilogue` over the
    /// whole output.
    #[test]
    fn conv2d_clamped_matches_reference_and_unfused_epilogue(
        (case, xs, ws) in conv_case(),
        bias in any::<bool>(),
        bs in vals(16),
        act in prop::sample::select(Activation::ALL),
        (lo, width, clamped) in (-1.5f32..0.5, 0.0f32..2.0, any::<bool>()),
    ) {
        let (c, h, w, o, kh, kw, stride, pad, dilation, groups) = case;
        let ws_shape = [o, c / groups, kh, kw];
        let p = Conv2dParams::new(&shape(&[c, h, w]), &shape(&ws_shape), stride, pad, dilation, groups).unwrap();
        let clamp = clamped.then_some(Clamp { lo, hi: lo + width });
        let mut wt = TestWeight::new(kestrel_rt_format::DType::F32, &ws_shape, &ws);
        let mut bt = TestWeight::new(kestrel_rt_format::DType::F32, &[o], &bs[..o]);
        let mut wa = TestWeight::new(kestrel_rt_format::DType::F32, &ws_shape, &abs(&ws));
        let mut ba = TestWeight::new(kestrel_rt_format::DType::F32, &[o], &abs(&bs[..o]));
        let spec = r::ConvSpec { stride, pad, dilation, groups };
        let reference = |x: &[f32], wt: &TestWeight, bt: &TestWeight, clamp: Option<Clamp>| {
            let (y, _, _) = r::conv2d(&f64s(x), [c, h, w], &wt.decoded, ws_shape, bias.then_some(&bt.decoded[..]), spec);
            let y = y.into_iter().map(|v| r::act(act_of(act), v));
            y.map(|v| clamp.map_or(v, |c| v.max(f64::from(c.lo)).min(f64::from(c.hi)))).collect::<Vec<f64>>()
        };
        let want = reference(&xs, &wt, &bt, clamp);
        let mag_want = reference(&abs(&xs), &wa, &ba, None);
        let n = o * p.oh * p.ow;
        let run = |x: &[f32], wt: &mut TestWeight, bt: &mut TestWeight, act: Activation, clamp: Option<Clamp>| {
            let proj = ProjW { w: wt.view(), b: bias.then(|| bt.view()), act_scale: None };
            let mut y = out(n);
            conv2d_clamped(&p, &proj, act, clamp, x, &mut y, &mut scratch(conv2d_scratch_fast(&p)));
            y
        };
        let y = run(&xs, &mut wt, &mut bt, act, clamp);
        let mag = run(&abs(&xs), &mut wa, &mut ba, act, None);
        assert_close_dot(&format!("conv2d_clamped {case:?} bias {bias} {act:?} {clamp:?}"), &y, &want, &mag, &mag_want);
        if Elementwise::of(act, clamp).is_some() {
            let mut unfused = run(&xs, &mut wt, &mut bt, Activation::None, None);
            epilogue(act, clamp, &mut unfused);
            prop_assert!(y == unfused, "{:?} {:?} {:?}: fused {:?} vs unfused {:?}", case, act, clamp, y, unfused);
        }
    }
}

/// Layers whose implicit-GEMM product exceeds one chunk (multiplied a few output rows at a
/// time: O/g · rows · wq ≤ 64 Ki), with row counts that leave a partial last chunk, partial
/// 32-pixel panels and depths past one 256-deep block, against the reference (seeded
/// pseudo-random values, all nonzero).
#[test]
fn conv2d_chunked_patches_match_reference() {
    // (C, H, W, O, kh, kw, stride, pad, dilation, groups)
    let cases: [ConvCase; 10] = [
        (64, 21, 20, 9, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        (48, 30, 27, 5, 3, 3, [2, 2], [1, 0, 1, 1], [1, 1], 1),
        (64, 18, 18, 6, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 2),
        // 64 · 34 columns a row: chunks of 30, 30 and 4 rows.
        (4, 64, 32, 64, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        // Two groups of 40 channels · 9 taps = 360 deep; stride 2 and dilation 2 (wq = 37).
        (80, 70, 70, 130, 3, 3, [2, 2], [2, 2, 2, 2], [2, 2], 2),
        // Depthwise 12×12 on a 2×2 output: 144 taps, more than the tap table holds (121),
        // through the per-channel planes (the channels-innermost path takes at most 121).
        (3, 13, 13, 3, 12, 12, [1, 1], [0, 0, 0, 0], [1, 1], 3),
        // Kernels over 121 taps through the paths that read the tap-offset table (it used to
        // hand the first 121 taps tap 0's offset): depthwise 1×150 by stride phases, and a dense
        // 12×12 by the implicit GEMM.
        (2, 1, 400, 2, 1, 150, [1, 2], [0, 3, 0, 3], [1, 2], 2),
        (2, 20, 20, 3, 12, 12, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        // More than 64 output channels a group: chunks of 64 channels (and the rest) by more
        // output rows than a chunk of all of them would hold.
        (16, 40, 40, 150, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        (32, 36, 30, 200, 3, 3, [1, 2], [1, 1, 0, 1], [1, 1], 2),
    ];
    check_fixed_cases(&cases);
}

/// Depthwise layers on output planes up to 28 × 28 (channels-innermost, eight channels a block
/// on x86): channel counts of one block, several, and a partial last block; rows of at least
/// eight pixels (each block of sums transposed straight into the output rows, the row's last
/// pixels recomputed) and narrower; strides, dilation, asymmetric padding, 3×3, 5×5 and 7×7
/// kernels; against the reference, the scratch NaN-filled (an unzeroed border or weight lane
/// shows).
#[test]
fn conv2d_depthwise_channels_innermost_match_reference() {
    // (C, H, W, O, kh, kw, stride, pad, dilation, groups)
    let cases: [ConvCase; 9] = [
        (8, 14, 14, 8, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 8),
        (29, 14, 14, 29, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 29),
        (21, 28, 28, 21, 5, 5, [2, 2], [2, 2, 2, 2], [1, 1], 21),
        (40, 7, 7, 40, 5, 5, [1, 1], [2, 2, 2, 2], [1, 1], 40),
        (17, 13, 11, 17, 3, 3, [1, 2], [0, 2, 1, 0], [2, 1], 17),
        (12, 9, 30, 12, 7, 7, [1, 1], [3, 3, 3, 3], [1, 1], 12),
        (9, 6, 9, 9, 3, 3, [1, 1], [1, 0, 1, 1], [1, 1], 9),
        (33, 27, 23, 33, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 33),
        // One pixel wide, seven rows (flattened plane of seven: below one block of eight).
        (10, 7, 1, 10, 3, 1, [1, 1], [1, 0, 1, 0], [1, 1], 10),
    ];
    check_fixed_cases(&cases);
}

/// Padded planes over the size from which the stride phases store only their padding
/// (`BORDER_FILL_MIN`, 4,096 elements a phase plane): depthwise and grouped layers at strides
/// 1–4 with asymmetric padding and dilation, whose phase rectangles start and end at every
/// offset; the NaN-filled scratch makes any padding cell left unwritten show in the output.
#[test]
fn conv2d_large_phase_planes_match_reference() {
    // (C, H, W, O, kh, kw, stride, pad, dilation, groups)
    let cases: [ConvCase; 7] = [
        (2, 70, 70, 2, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 2),
        (2, 66, 67, 2, 3, 3, [1, 1], [0, 2, 1, 0], [1, 1], 2),
        (3, 131, 129, 3, 3, 3, [2, 2], [1, 0, 2, 1], [1, 1], 3),
        (2, 140, 133, 2, 5, 5, [2, 2], [2, 2, 2, 2], [2, 2], 2),
        (2, 280, 260, 2, 4, 3, [3, 4], [1, 3, 2, 0], [1, 1], 2),
        (2, 260, 200, 4, 7, 7, [4, 3], [3, 2, 3, 1], [1, 2], 2),
        // Grouped (2 channels a group) through the implicit GEMM's phase planes.
        (4, 96, 90, 4, 3, 3, [2, 1], [1, 1, 0, 2], [1, 1], 2),
    ];
    check_fixed_cases(&cases);
}

/// Ungrouped layers whose plane has at most a quarter as many pixels as output channels, with
/// weights stored in every encoding: those not in f32 multiply transposed through the dense
/// kernels (the weights dequantised as they are packed, never decoded whole) rather than by the
/// implicit GEMM; planes from 16 pixels (below, every encoding takes the small-plane path),
/// padded, strided, dilated and 1×1.
#[test]
fn conv2d_encoded_weights_on_small_maps_match_reference() {
    // (C, H, W, O, kh, kw, stride, pad, dilation, groups)
    let cases: [ConvCase; 5] = [
        (16, 4, 4, 64, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        (24, 9, 9, 100, 3, 3, [2, 2], [1, 1, 1, 1], [1, 1], 1),
        (40, 7, 7, 200, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        (32, 9, 8, 96, 3, 3, [1, 1], [0, 1, 1, 0], [2, 1], 1),
        (48, 5, 6, 130, 1, 1, [1, 1], [0, 0, 0, 0], [1, 1], 1),
    ];
    for dt in DTYPES {
        check_cases(&cases, dt);
    }
}

/// Each case with seeded pseudo-random values (all nonzero) and a bias, f32 weights, the
/// planner's scratch (NaN-filled), against the reference.
fn check_fixed_cases(cases: &[ConvCase]) {
    check_cases(cases, kestrel_rt_format::DType::F32);
}

/// [`check_fixed_cases`] with weights (and bias) stored as `dt`, against the reference on the
/// decoded values; every layer with a bias and a residual.
fn check_cases(cases: &[ConvCase], dt: kestrel_rt_format::DType) {
    let mut seed = 0x9E37_79B9u32;
    let mut next = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let v = f32::from((seed >> 9) as u16) / 32768.0 - 1.0;
        if v.abs() < 1e-3 {
            0.5
        } else {
            v
        }
    };
    for &case in cases {
        let (c, h, w, o, kh, kw, stride, pad, dilation, groups) = case;
        let ws_shape = [o, c / groups, kh, kw];
        let p = Conv2dParams::new(&shape(&[c, h, w]), &shape(&ws_shape), stride, pad, dilation, groups).unwrap();
        let xs: Vec<f32> = (0..c * h * w).map(|_| next()).collect();
        let ws: Vec<f32> = (0..o * (c / groups) * kh * kw).map(|_| next()).collect();
        let bs: Vec<f32> = (0..o).map(|_| next()).collect();
        // A residual too (each path adds it to its planes or chunks of rows at their offsets).
        let rs: Vec<f32> = (0..o * p.oh * p.ow).map(|_| next()).collect();
        let run = |x: &[f32], ws: &[f32], bs: &[f32], rs: &[f32]| {
            let mut wt = TestWeight::new(dt, &ws_shape, ws);
            let mut bt = TestWeight::new(dt, &[o], bs);
            let spec = r::ConvSpec { stride, pad, dilation, groups };
            let (want, _, _) = r::conv2d(&f64s(x), [c, h, w], &wt.decoded, ws_shape, Some(&bt.decoded[..]), spec);
            let want: Vec<f64> = want.iter().zip(rs).map(|(&v, &r)| v + f64::from(r)).collect();
            let proj = ProjW { w: wt.view(), b: Some(bt.view()), act_scale: None };
            let mut y = out(o * p.oh * p.ow);
            let epi = (Activation::None, None, Some(rs));
            conv2d_residual(&p, &proj, epi, x, &mut y, &mut scratch(conv2d_scratch_fast(&p)));
            (y, want)
        };
        let (y, want) = run(&xs, &ws, &bs, &rs);
        let (mag, mag_want) = run(&abs(&xs), &abs(&ws), &abs(&bs), &abs(&rs));
        assert_close_dot(&format!("conv2d {case:?} {dt:?}"), &y, &want, &mag, &mag_want);
    }
}

proptest! {
    #![proptest_config(config())]

    /// A residual added before the activation and clamp (`conv2d_residual`, `y = clamp(act(conv(x)
    /// + b + r))`, a ResNet block's skip connection folded in) on every path, with the planner's
    /// scratch and with the minimum (the direct loop): against the reference, and, bit for bit,
    /// against the layer without its epilogue followed by the residual's add and `epilogue` over
    /// the whole output (where the epilogue is a ReLU and/or a clamp).
    #[test]
    fn conv2d_residual_matches_reference_and_unfused_add(
        (case, xs, ws) in conv_case(),
        rs in vals(4096),
        bias in any::<bool>(),
        bs in vals(16),
        act in prop::sample::select(Activation::ALL),
        (lo, width, clamped) in (-1.5f32..0.5, 0.0f32..2.0, any::<bool>()),
        fast in any::<bool>(),
    ) {
        let (c, h, w, o, kh, kw, stride, pad, dilation, groups) = case;
        let ws_shape = [o, c / groups, kh, kw];
        let p = Conv2dParams::new(&shape(&[c, h, w]), &shape(&ws_shape), stride, pad, dilation, groups).unwrap();
        let n = o * p.oh * p.ow;
        // The residual: the drawn values cycled over the output (never all zeros).
        let res: Vec<f32> = rs.iter().copied().cycle().take(n).collect();
        let clamp = clamped.then_some(Clamp { lo, hi: lo + width });
        let mut wt = TestWeight::new(kestrel_rt_format::DType::F32, &ws_shape, &ws);
        let mut bt = TestWeight::new(kestrel_rt_format::DType::F32, &[o], &bs[..o]);
        let mut wa = TestWeight::new(kestrel_rt_format::DType::F32, &ws_shape, &abs(&ws));
        let mut ba = TestWeight::new(kestrel_rt_format::DType::F32, &[o], &abs(&bs[..o]));
        let spec = r::ConvSpec { stride, pad, dilation, groups };
        let reference = |x: &[f32], wt: &TestWeight, bt: &TestWeight, res: &[f32], clamp: Option<Clamp>| {
            let (y, _, _) = r::conv2d(&f64s(x), [c, h, w], &wt.decoded, ws_shape, bias.then_some(&bt.decoded[..]), spec);
            let y = y.into_iter().zip(res).map(|(v, &r)| r::act(act_of(act), v + f64::from(r)));
            y.map(|v| clamp.map_or(v, |c| v.max(f64::from(c.lo)).min(f64::from(c.hi)))).collect::<Vec<f64>>()
        };
        let want = reference(&xs, &wt, &bt, &res, clamp);
        let mag_want = reference(&abs(&xs), &wa, &ba, &abs(&res), None);
        let room = if fast { conv2d_scratch_fast(&p) } else { conv2d_scratch(&p) };
        let run = |x: &[f32], wt: &mut TestWeight, bt: &mut TestWeight, epi: (Activation, Option<Clamp>, Option<&[f32]>)| {
            let proj = ProjW { w: wt.view(), b: bias.then(|| bt.view()), act_scale: None };
            let mut y = out(n);
            conv2d_residual(&p, &proj, epi, x, &mut y, &mut scratch(room));
            y
        };
        let y = run(&xs, &mut wt, &mut bt, (act, clamp, Some(&res)));
        let mag = run(&abs(&xs), &mut wa, &mut ba, (act, None, Some(&abs(&res))));
        assert_close_dot(&format!("conv2d_residual {case:?} bias {bias} {act:?} {clamp:?} fast {fast}"), &y, &want, &mag, &mag_want);
        if Elementwise::of(act, clamp).is_some() {
            let mut unfused = run(&xs, &mut wt, &mut bt, (Activation::None, None, None));
            unfused.iter_mut().zip(&res).for_each(|(v, &r)| *v += r);
            epilogue(act, clamp, &mut unfused);
            prop_assert!(y == unfused, "{:?} {:?} {:?}: fused {:?} vs unfused {:?}", case, act, clamp, y, unfused);
        }
    }
}

/// Ungrouped and depthwise layers split by output channels (`conv2d_part`, as threads split
/// them) equal the whole layer bit for bit: f32 weights (read in place) and int8 (each part
/// decodes its rows), a residual, an activation and a clamp, parts of 1 to 40 channels cut
/// anywhere (below the 32 rows from which the whole takes the packed-weights GEMM, so each part
/// must keep the whole's kernel; across the depthwise kernel's 8-channel blocks), on the
/// implicit GEMM (3×3, strided), the 1×1 path, a layer whose weights are past 1 MiB (the
/// row-major kernels) and depthwise layers channels-innermost and by phase planes.
#[test]
fn conv2d_parts_equal_the_whole_bit_for_bit() {
    // (C, H, W, O, kh, kw, stride, pad, dilation, groups)
    let cases: [ConvCase; 12] = [
        // Depthwise: channels-innermost (≤ 28 × 28 outputs on x86) and by phase planes.
        (37, 28, 28, 37, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 37),
        (24, 70, 66, 24, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 24),
        (20, 61, 61, 20, 5, 5, [2, 2], [2, 2, 2, 2], [1, 1], 20),
        (64, 20, 20, 64, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        (48, 23, 19, 40, 3, 3, [2, 2], [1, 0, 1, 1], [1, 1], 1),
        (128, 16, 16, 48, 1, 1, [1, 1], [0; 4], [1, 1], 1),
        (300, 12, 12, 100, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        (3, 30, 30, 16, 7, 7, [2, 2], [3, 3, 3, 3], [1, 1], 1),
        // Chunks of 64 channels by 23 rows (the whole: 64, 64, 22 channels; a part: its own).
        (16, 40, 40, 150, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1),
        // Grouped, split by whole groups: 4 groups of 8 → 12, 8 strided groups of 8 → 8 (as
        // RegNet's), 3 groups of a 1×1 with 80 channels each (chunks of 64 and 16).
        (32, 20, 20, 48, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 4),
        (64, 15, 14, 64, 3, 3, [2, 2], [1, 1, 1, 1], [1, 1], 8),
        (48, 30, 10, 240, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 3),
    ];
    let mut rng = kestrel_rt_reference::testing::Rng::new(77);
    let mut vals = |n: usize, a: f64| -> Vec<f32> { (0..n).map(|_| rng.nz(a)).collect() };
    for (i, &(c, h, w, o, kh, kw, stride, pad, dilation, groups)) in cases.iter().enumerate() {
        let ws_shape = [o, c / groups, kh, kw];
        let p = Conv2dParams::new(&shape(&[c, h, w]), &shape(&ws_shape), stride, pad, dilation, groups).unwrap();
        let (plane, n) = (p.oh * p.ow, o * p.oh * p.ow);
        let x = vals(c * h * w, 1.0);
        let ws = vals(o * (c / groups) * kh * kw, 0.2);
        let bs = vals(o, 0.5);
        let res = vals(n, 1.0);
        for dt in [kestrel_rt_format::DType::F32, kestrel_rt_format::DType::I8] {
            let mut wt = TestWeight::new(dt, &ws_shape, &ws);
            let mut bt = TestWeight::new(kestrel_rt_format::DType::F32, &[o], &bs);
            let proj = ProjW { w: wt.view(), b: Some(bt.view()), act_scale: None };
            let room = conv2d_scratch_fast(&p);
            assert!(conv2d_splits(&p, &proj, room), "case {i} {dt:?}: expected to split");
            let epi = (Activation::Relu, Some(Clamp { lo: 0.0, hi: 2.5 }), Some(&res[..]));
            let mut whole = out(n);
            conv2d_residual(&p, &proj, epi, &x, &mut whole, &mut scratch(room));
            // Cuts: every channel (or group, `unit` channels) alone near the start, then uneven
            // parts.
            let unit = conv2d_part_unit(&p, &proj);
            let units = o / unit;
            let mut cuts = vec![0, 1, 2, 9];
            let mut at = 9;
            while at < units {
                at = (at + 1 + (vals(1, 1.0)[0].abs() * 39.0) as usize).min(units);
                cuts.push(at);
            }
            cuts.retain(|&c| c <= units);
            cuts.push(units);
            cuts.dedup();
            cuts.iter_mut().for_each(|c| *c *= unit);
            let mut parts = out(n);
            for pair in cuts.windows(2) {
                let (o0, o1) = (pair[0], pair[1]);
                conv2d_part(&p, &proj, epi, &x, &mut parts[o0 * plane..o1 * plane], &mut scratch(room), o0..o1);
            }
            let same = whole.iter().zip(&parts).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "case {i} {dt:?}: parts {cuts:?} differ from the whole");
        }
    }
}
