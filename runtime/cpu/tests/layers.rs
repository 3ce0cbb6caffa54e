//! Property tests of the layer and generic op kernels against the f64 references in
//! `kestrel_rt_reference::layers`, for every op variant and every weight encoding (the reference
//! gets the decoded weights, so encodings share one tolerance), plus shape-check errors.

use crate::common_layers::cases::*;
use crate::common_layers::*;
use kestrel_rt_cpu::error::{RunError, ShapeError};
use kestrel_rt_cpu::kernels::conv::{conv2d, conv2d_scratch, conv2d_scratch_fast, Conv2dParams};
use kestrel_rt_cpu::kernels::elementwise::{BinaryParams, Operand, UnaryParams};
use kestrel_rt_cpu::kernels::embed::{
    embedding, embedding_scratch, patch_embed, patch_embed_scratch, EmbeddingParams, PatchEmbedParams,
};
use kestrel_rt_cpu::kernels::linear::{linear_q8, Q8_CHUNK};
use kestrel_rt_cpu::kernels::matmul::{matmul, matmul_scratch, MatMulParams};
use kestrel_rt_cpu::kernels::reduce::{reduce, reduce_scratch, ReduceParams};
use kestrel_rt_cpu::kernels::slice::{slice, SliceParams};
use kestrel_rt_cpu::kernels::softmax::{softmax, softmax_scratch, SoftmaxParams};
use kestrel_rt_cpu::kernels::transpose::{transpose, transpose_scratch, TransposeParams};
use kestrel_rt_cpu::{linear, ProjW};
use kestrel_rt_format::ops::{Activation, BinaryOp, ReduceOp, Slice, UnaryOp};
use kestrel_rt_format::{DType, WeightView};
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::layers as r;
use kestrel_rt_reference::tolerance::{EXACT, F32_APPROX, F32_KERNEL};
use proptest::prelude::*;

// ---------------------------------------------------------------- fused activations

proptest! {
    #![proptest_config(config())]

    /// The fused activation pass (every convolution's and dense layer's epilogue) computes the
    /// element-wise function it stands for (`Activation::as_unary`, the mapping the fusion passes
    /// fold through): against that function's f64 reference over its domain and past it, with
    /// NaN and the infinities mixed in.
    #[test]
    fn fused_activations_match_their_element_wise_reference(
        mut xs in prop::collection::vec(-8.0f32..8.0, 1..300),
    ) {
        xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0]);
        for &a in &Activation::ALL[1..] {
            let u = a.as_unary().expect("every activation but the identity is a function");
            let mut y = xs.clone();
            kestrel_rt_cpu::kernels::activate(a, &mut y);
            let want: Vec<f64> = xs.iter().map(|&x| u.reference(f64::from(x))).collect();
            assert_close(&format!("activate {a:?} as {u:?}"), &y, &want, F32_APPROX);
        }
    }
}

// ---------------------------------------------------------------- dense (linear / ProjW)

proptest! {
    #![proptest_config(config())]

    #[test]
    fn linear_matches_reference_for_every_activation_and_encoding(
        (rows, inp, out, x, w, b) in dense_case(),
        dt in dtype(),
        bias in any::<bool>(),
    ) {
        let run = |x: &[f32], w: &[f32], b: &[f32], a: Activation| {
            let mut wt = TestWeight::matrix(dt, out, inp, w);
            let mut bt = TestWeight::matrix(dt, 1, out, b);
            let want = r::dense(&f64s(x), rows, &wt.decoded, out, bias.then_some(&bt.decoded[..]), act(a));
            let (wv, bv) = (wt.view(), bt.view());
            let mut y = out_buf(rows * out);
            linear(x, rows, &wv, bias.then_some(&bv), a, &mut y);
            (y, want)
        };
        let (mag, mag_want) = run(&abs(&x), &abs(&w), &abs(&b), Activation::None);
        let (z, z_want) = run(&x, &w, &b, Activation::None);
        assert_close_dot(&format!("linear None {dt:?}"), &z, &z_want, &mag, &mag_want);
        for &a in &Activation::ALL[1..] {
            // The floor comes from Σ|x·w| (see `assert_close_dot`); f32 GELU's 1 + erf(·),
            // which cancels for z < 0, also has an absolute error of that scale.
            let (y, want) = run(&x, &w, &b, a);
            assert_close_dot(&format!("linear {a:?} {dt:?}"), &y, &want, &mag, &mag_want);
        }
    }

    #[test]
    fn proj_apply_is_dense_without_activation((rows, inp, out, x, w, b) in dense_case(), dt in dtype()) {
        let mut wt = TestWeight::matrix(dt, out, inp, &w);
        let mut bt = TestWeight::matrix(dt, 1, out, &b);
        let proj = ProjW { w: wt.view(), b: Some(bt.view()), act_scale: None };
        proj.check("Dense", out, inp).unwrap();
        let mut y = out_buf(rows * out);
        proj.apply(&x, rows, &mut y);
        let want = r::dense(&f64s(&x), rows, &wt.decoded, out, Some(&bt.decoded), r::Act::None);
        assert_close("ProjW::apply", &y, &want, F32_KERNEL);
    }
}

// ------------------------------------------------------- int8 activations (calibrated)

fn q8_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>, Vec<f32>)> {
    // Input widths below, at and across the quantisation chunk (and int4 group) boundaries.
    (
        prop_oneof![1usize..4, 4usize..20],
        prop::sample::select(vec![1, 7, 31, 32, 33, 95, Q8_CHUNK - 1, Q8_CHUNK, Q8_CHUNK + 5, 600]),
        prop_oneof![1usize..6, 30usize..40],
    )
        .prop_flat_map(|(rows, inp, out)| {
            (Just(rows), Just(inp), Just(out), vals(rows * inp), vals(out * inp), vals(out))
        })
}

proptest! {
    #![proptest_config(config())]

    /// `linear_q8` against the f64 dense reference fed the quantised activations: the
    /// activations are quantised by the one function the format defines
    /// (`weight::quantize_act`: round half away, clamp ±127), dequantised in f64, and the whole
    /// product (integer weights × integer activations, both scales, bias, activation) is
    /// checked at `F32_KERNEL`. Scales below amax/127 make some inputs saturate.
    #[test]
    fn linear_q8_matches_reference_on_quantised_activations(
        (rows, inp, out, x, w, b) in q8_case(),
        int4 in any::<bool>(),
        range in 0.3f32..1.5,
        bias in any::<bool>(),
    ) {
        let dt = if int4 { DType::I4 } else { DType::I8 };
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = amax / 127.0 * range;
        let mut q = vec![0i8; x.len()];
        kestrel_rt_format::weight::quantize_act(&x, 1.0 / s, &mut q);
        prop_assert!(q.iter().all(|&v| (-127..=127).contains(&v)));
        let xq: Vec<f64> = q.iter().map(|&v| f64::from(v) * f64::from(s)).collect();
        let run = |x: &[f32], xq: &[f64], w: &[f32], b: &[f32], a: Activation| {
            let mut wt = TestWeight::matrix(dt, out, inp, w);
            let mut bt = TestWeight::matrix(DType::F32, 1, out, b);
            let want = r::dense(xq, rows, &wt.decoded, out, bias.then_some(&bt.decoded[..]), act(a));
            let (wv, bv) = (wt.view(), bt.view());
            let mut y = out_buf(rows * out);
            linear_q8(x, rows, &wv, bias.then_some(&bv), a, s, &mut y);
            (y, want)
        };
        let xq_abs: Vec<f64> = xq.iter().map(|v| v.abs()).collect();
        // |x| quantises to |q| (rounding is symmetric), so the magnitude run matches too.
        let (mag, mag_want) = run(&abs(&x), &xq_abs, &abs(&w), &abs(&b), Activation::None);
        for a in [Activation::None, Activation::Relu] {
            let (y, want) = run(&x, &xq, &w, &b, a);
            assert_close_dot(&format!("linear_q8 {a:?} {dt:?} inp {inp}"), &y, &want, &mag, &mag_want);
        }
        // ProjW routes to the integer path only for a calibrated input and integer weights.
        let mut wt = TestWeight::matrix(dt, out, inp, &w);
        let proj = ProjW { w: wt.view(), b: None, act_scale: Some(s) };
        let (mut y1, mut y2) = (out_buf(rows * out), out_buf(rows * out));
        proj.apply(&x, rows, &mut y1);
        linear_q8(&x, rows, &proj.w, None, Activation::None, s, &mut y2);
        prop_assert_eq!(y1, y2);
    }
}

#[test]
fn linear_q8_with_float_weights_is_plain_linear() {
    let x = [0.3f32, -1.2, 0.7, 2.0];
    let w = [0.5f32, -0.25, 1.5, 0.75, -1.0, 0.2, 0.1, 0.9];
    let wv = WeightView::f32(2, 4, &w).unwrap();
    let (mut a, mut b) = ([0f32; 2], [0f32; 2]);
    linear_q8(&x, 1, &wv, None, Activation::None, 0.001, &mut a);
    linear(&x, 1, &wv, None, Activation::None, &mut b);
    assert_eq!(a, b);
}

fn out_buf(n: usize) -> Vec<f32> {
    out(n)
}

#[test]
fn proj_check_rejects_wrong_shapes() {
    let w = [1.0f32; 6];
    let b = [1.0f32; 3];
    let proj =
        ProjW { w: WeightView::f32(2, 3, &w).unwrap(), b: Some(WeightView::f32(1, 3, &b).unwrap()), act_scale: None };
    assert!(matches!(proj.check("Dense", 3, 3), Err(ShapeError::Mismatch { expected: 3, found: 2, .. })));
    assert!(matches!(proj.check("Dense", 2, 4), Err(ShapeError::Mismatch { expected: 4, found: 3, .. })));
    assert!(matches!(proj.check("Dense", 2, 3), Err(ShapeError::Mismatch { what: "bias length", .. })));
}

// ---------------------------------------------------------------- softmax

proptest! {
    #![proptest_config(config())]

    #[test]
    fn softmax_matches_reference(
        (dims, x) in prop::collection::vec(1usize..6, 1..4).prop_flat_map(|d| {
            let n: usize = d.iter().product();
            (Just(d), prop::collection::vec(-8.0f32..8.0, n))
        }),
    ) {
        let p = SoftmaxParams::new(&shape(&dims)).unwrap();
        let mut y = out(x.len());
        softmax(&p, &x, &mut y, &mut scratch(softmax_scratch(&p)));
        assert_close("softmax", &y, &r::softmax(&f64s(&x), *dims.last().unwrap()), F32_KERNEL);
    }
}

#[test]
fn element_count_overflow_is_a_shape_error() {
    let huge = shape(&[u32::MAX as usize; 3]);
    assert!(matches!(UnaryParams::new(UnaryOp::Exp, &huge), Err(ShapeError::Invalid { op: "Unary", .. })));
    assert!(matches!(SoftmaxParams::new(&huge), Err(ShapeError::Invalid { op: "Softmax", .. })));
    assert!(matches!(
        BinaryParams::new(BinaryOp::Add, &huge, &shape(&[1])),
        Err(ShapeError::Invalid { op: "Binary", .. })
    ));
}

#[test]
fn softmax_of_empty_rows_computes_nothing() {
    // An empty axis (a run-time dim at 0): no element, nothing read or written.
    for dims in [[3, 0], [0, 5]] {
        let p = SoftmaxParams::new(&shape(&dims)).unwrap();
        assert_eq!(p.rows * p.n, 0, "{dims:?}");
        let mut y = [7.0f32; 2];
        softmax(&p, &[], &mut y, &mut []);
        assert_eq!(y, [7.0; 2], "{dims:?}");
    }
}

// ---------------------------------------------------------------- reduce

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_reduce_op_matches_reference(
        (dims, axis, x) in prop::collection::vec(1usize..5, 1..5).prop_flat_map(|d| {
            let n: usize = d.iter().product();
            (Just(d.clone()), 0..d.len(), vals(n))
        }),
        keep_dims in any::<bool>(),
    ) {
        let out_n = x.len() / dims[axis];
        // With fewer than 4 outputs a mixed-sign sum can cancel to ~0 in every output, where
        // f32 cannot give 1e-5 relative; use one sign there (the kernel does not branch on it).
        let x: Vec<f32> = if out_n < 4 { x.iter().map(|v| v.abs()).collect() } else { x };
        for &op in ReduceOp::ALL {
            let p = ReduceParams::new(op, &shape(&dims), axis, keep_dims).unwrap();
            let mut want_shape = dims.clone();
            if keep_dims { want_shape[axis] = 1 } else { want_shape.remove(axis); }
            prop_assert_eq!(p.y, shape(&want_shape));
            let mut y = out(out_n);
            reduce(&p, &x, &mut y, &mut scratch(reduce_scratch(&p)));
            let tol = if matches!(op, ReduceOp::Max | ReduceOp::Min) || op.arg().is_some() { EXACT } else { F32_KERNEL };
            assert_close(&format!("reduce {op:?}"), &y, &r::reduce(reduce_fn(op), &f64s(&x), &dims, axis), tol);
        }
    }

    #[test]
    fn mean_pooling_over_tokens((t, d, x) in (1usize..12, 4usize..16).prop_flat_map(|(t, d)| (Just(t), Just(d), vals(t * d)))) {
        let p = ReduceParams::new(ReduceOp::Mean, &shape(&[t, d]), 0, false).unwrap();
        prop_assert_eq!(p.y, shape(&[d]));
        let mut y = out(d);
        reduce(&p, &x, &mut y, &mut []);
        let want: Vec<f64> = (0..d).map(|j| (0..t).map(|i| f64::from(x[i * d + j])).sum::<f64>() / t as f64).collect();
        assert_close("mean pool", &y, &want, F32_KERNEL);
    }
}

proptest! {
    #![proptest_config(config())]

    /// The index reductions on rows full of ties (values from {−1, 0, 1, 2}): the first or the
    /// last extreme, as `ReduceOp::arg` defines it, exactly.
    #[test]
    fn index_reductions_pick_the_first_or_last_of_ties(
        (dims, axis, x) in prop::collection::vec(1usize..6, 1..4).prop_flat_map(|d| {
            let n: usize = d.iter().product();
            (Just(d.clone()), 0..d.len(), prop::collection::vec(prop::sample::select(vec![-1f32, 0.0, 1.0, 2.0]), n))
        }),
    ) {
        for &op in ReduceOp::ALL.iter().filter(|o| o.arg().is_some()) {
            let p = ReduceParams::new(op, &shape(&dims), axis, false).unwrap();
            let mut y = out(x.len() / dims[axis]);
            reduce(&p, &x, &mut y, &mut scratch(reduce_scratch(&p)));
            assert_close(&format!("reduce {op:?}"), &y, &r::reduce(reduce_fn(op), &f64s(&x), &dims, axis), EXACT);
        }
    }
}

/// Every row of the reduction table (`kestrel_rt_format::ops::ReduceOp`) through the CPU kernel
/// against the row's f64 definition, on values from the row's test domain: rows of 1 to 19
/// along the last axis (the eight-lane loop, its lanes and its tail) and along a strided axis,
/// plus rows of ties for the index rows; and every importer name maps back to its row.
#[test]
fn every_reduce_row_through_cpu_and_reference() {
    let mut rng = kestrel_rt_reference::testing::Rng::new(33);
    for &op in ReduceOp::ALL {
        let [lo, hi] = op.test_domain();
        for n in 1..20usize {
            for (dims, axis) in [(vec![3, n], 1usize), (vec![n, 5], 0), (vec![2, n, 3], 1)] {
                let len: usize = dims.iter().product();
                let mut x: Vec<f32> = (0..len).map(|_| lo + (hi - lo) * rng.unit() as f32).collect();
                if op.arg().is_some() && n % 2 == 0 {
                    x.iter_mut().for_each(|v| *v = v.round());
                }
                let p = ReduceParams::new(op, &shape(&dims), axis, false).unwrap();
                let mut y = out(len / n);
                reduce(&p, &x, &mut y, &mut scratch(reduce_scratch(&p)));
                let tol =
                    if matches!(op, ReduceOp::Max | ReduceOp::Min) || op.arg().is_some() { EXACT } else { F32_KERNEL };
                let want = r::reduce(reduce_fn(op), &f64s(&x), &dims, axis);
                assert_close(&format!("reduce {} {dims:?} axis {axis}", op.name()), &y, &want, tol);
            }
        }
        for name in op.importer_names() {
            assert_eq!(ReduceOp::from_importer_name(name), Some(op), "{name}");
        }
    }
}

#[test]
fn reduce_check_rejects_bad_axis() {
    assert!(matches!(
        ReduceParams::new(ReduceOp::Sum, &shape(&[2, 3]), 2, false),
        Err(ShapeError::Mismatch { op: "Reduce", expected: 2, found: 2, .. })
    ));
    // The index of an extreme of nothing is undefined: refused. A fold over nothing is not.
    assert!(matches!(ReduceParams::new(ReduceOp::ArgMax, &shape(&[2, 0]), 1, false), Err(ShapeError::Invalid { .. })));
    assert!(ReduceParams::new(ReduceOp::Max, &shape(&[2, 0]), 1, false).is_ok());
}

/// A fold over an empty axis (a run-time dim at 0) gives the ONNX empty-set value of its
/// reduction (`test_reduce_*_empty_set`: sum 0, product 1, max −∞, min +∞, L2 0; the mean is
/// 0/0, NaN as numpy's), at every output position, through every ISA tier.
#[test]
fn folds_over_an_empty_axis_give_the_empty_set_values() {
    let empty_set = |op: ReduceOp| -> Option<f32> {
        Some(match op {
            ReduceOp::Sum | ReduceOp::L2 => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
            ReduceOp::Mean => f32::NAN,
            _ => return None,
        })
    };
    for &op in ReduceOp::ALL {
        for (dims, axis, outputs) in [(&[2usize, 0, 3][..], 1, 6), (&[4, 0][..], 1, 4), (&[0][..], 0, 1)] {
            let p = ReduceParams::new(op, &shape(dims), axis, true);
            let Some(want) = empty_set(op) else {
                assert!(p.is_err(), "{op:?} over an empty axis must be refused");
                continue;
            };
            let p = p.unwrap();
            use kestrel_rt_cpu::kernels::simd::Isa;
            let tiers = [Isa::Scalar, Isa::Avx2, Isa::Avx512, kestrel_rt_cpu::kernels::simd::isa()];
            for isa in tiers.into_iter().filter(|i| i.supported()) {
                let mut y = vec![7.0f32; outputs];
                kestrel_rt_cpu::kernels::reduce::reduce_on(isa, &p, &[], &mut y, &mut []);
                for v in &y {
                    assert!(v.to_bits() == want.to_bits() || (v.is_nan() && want.is_nan()), "{op:?} {dims:?}: {y:?}");
                }
            }
        }
    }
}

/// Kernels on zero extents (what follows a run-time dim at 0): nothing read past, zeros where
/// an output has elements and its window none.
#[test]
fn kernels_take_zero_extents() {
    use kestrel_rt_cpu::kernels::gather::{gather, GatherParams};
    // A slice of no element from an empty axis into a padded output: zeros.
    let op = Slice { x: 0, axis: 1, start: 0, step: 1, count: 0, offset: 0, len: 2, y: 1 };
    let p = SliceParams::new(&shape(&[3, 0]), &op).unwrap();
    let mut y = [7.0f32; 6];
    slice(&p, &[], &mut y);
    assert_eq!(y, [0.0; 6]);
    // A slice of no element from a full axis, into an empty output.
    let op = Slice { x: 0, axis: 0, start: 0, step: 1, count: 0, offset: 0, len: 0, y: 1 };
    let p = SliceParams::new(&shape(&[4, 2]), &op).unwrap();
    slice(&p, &[1.0; 8], &mut []);
    // Gathers by no index, and of empty rows.
    let p = GatherParams::new(&shape(&[4, 2]), &shape(&[0]), 0).unwrap();
    gather(&p, &[1.0; 8], &[], &mut []).unwrap();
    let p = GatherParams::new(&shape(&[3, 0]), &shape(&[2]), 0).unwrap();
    gather(&p, &[], &[2.0, 0.0], &mut []).unwrap();
    assert!(gather(&p, &[], &[3.0, 0.0], &mut []).is_err(), "an index out of range is still an error");
    let p = GatherParams::new(&shape(&[0, 2]), &shape(&[0]), 0).unwrap();
    gather(&p, &[], &[], &mut []).unwrap();
    assert!(GatherParams::new(&shape(&[0, 2]), &shape(&[1]), 0).is_err(), "an index into an empty axis");
    // Matrix products: M = 0 writes nothing; K = 0 sums over nothing: zeros.
    let p = MatMulParams::new(&shape(&[0, 3]), &shape(&[3, 2]), false, false).unwrap();
    matmul(&p, &[], Operand::Act(&[1.0; 6]), &mut [], &mut []);
    let p = MatMulParams::new(&shape(&[2, 0]), &shape(&[0, 3]), false, false).unwrap();
    let mut y = [7.0f32; 6];
    matmul(&p, &[], Operand::Act(&[]), &mut y, &mut []);
    assert_eq!(y, [0.0; 6]);
}

// ---------------------------------------------------------------- transpose

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_permutation_up_to_rank_4_matches_reference(dims in prop::collection::vec(1usize..5, 4), x in vals(256)) {
        for rank in 0..=4 {
            let d = &dims[..rank];
            let n: usize = d.iter().product();
            for perm in perms(rank) {
                let pu8: Vec<u8> = perm.iter().map(|&v| v as u8).collect();
                let p = TransposeParams::new(&shape(d), &pu8).unwrap();
                let (want, ys) = r::transpose(&f64s(&x[..n]), d, &perm);
                prop_assert_eq!(p.y, shape(&ys));
                let mut y = out(n);
                transpose(&p, &x[..n], &mut y, &mut scratch(transpose_scratch(&p)));
                assert_close(&format!("transpose {d:?} {perm:?}"), &y, &want, EXACT);
            }
        }
    }
}

#[test]
fn transpose_rank_6_and_op_perm_array() {
    let d = [2usize, 1, 3, 2, 2, 3];
    let x: Vec<f32> = (0..72).map(|i| i as f32).collect();
    let perm = [5u8, 0, 3, 1, 4, 2];
    let p = TransposeParams::new(&shape(&d), &perm).unwrap();
    let mut y = out(72);
    transpose(&p, &x, &mut y, &mut []);
    let (want, _) = r::transpose(&f64s(&x), &d, &[5, 0, 3, 1, 4, 2]);
    assert_close("transpose rank 6", &y, &want, EXACT);
    // The op stores 6 entries; only the first `rank` are read.
    let p2 = TransposeParams::new(&shape(&[3, 4]), &[1, 0, 7, 7, 7, 7]).unwrap();
    assert_eq!(p2.y, shape(&[4, 3]));
}

#[test]
fn transpose_check_rejects_non_permutations() {
    assert!(matches!(TransposeParams::new(&shape(&[2, 3]), &[0, 0]), Err(ShapeError::Invalid { .. })));
    assert!(matches!(TransposeParams::new(&shape(&[2, 3]), &[0, 2]), Err(ShapeError::Invalid { .. })));
    assert!(matches!(TransposeParams::new(&shape(&[2, 3]), &[0]), Err(ShapeError::Mismatch { .. })));
}

// ---------------------------------------------------------------- slice

proptest! {
    #![proptest_config(config())]

    /// Every axis of a rank-3 input, random windows (start, step, count) placed at random
    /// offsets of a longer output: exact copies and exact zeros.
    #[test]
    fn slice_windows_match_reference(
        dims in prop::collection::vec(1usize..6, 3),
        axis in 0usize..3,
        (a, b, c, pad_before, pad_after) in (0usize..6, 1usize..4, 1usize..6, 0usize..3, 0usize..3),
        x in vals(216),
    ) {
        let n = dims[axis];
        let start = a % n;
        let step = b;
        let count = c.min((n - 1 - start) / step + 1);
        let (offset, len) = (pad_before, pad_before + count + pad_after);
        let op = Slice { x: 0, axis: axis as u32, start: start as u32, step: step as u32, count: count as u32,
            offset: offset as u32, len: len as u32, y: 1 };
        let p = SliceParams::new(&shape(&dims), &op).unwrap();
        let numel: usize = dims.iter().product();
        let (want, ys) = r::slice(&f64s(&x[..numel]), &dims, axis, [start, step, count, offset, len]);
        prop_assert_eq!(p.out_len(), ys.iter().product::<usize>());
        let mut y = out(p.out_len());
        slice(&p, &x[..numel], &mut y);
        assert_close(&format!("slice {dims:?} axis {axis} {start}+{step}k x{count} at {offset} of {len}"), &y, &want, EXACT);
    }
}

#[test]
fn slice_params_reject_windows_outside_either_axis() {
    let op = |start, step, count, offset, len| Slice { x: 0, axis: 1, start, step, count, offset, len, y: 1 };
    let x = shape(&[2, 5]);
    assert!(SliceParams::new(&x, &op(0, 2, 3, 0, 3)).is_ok());
    // A window of no element (a run-time dim at 0), wherever it starts.
    assert!(SliceParams::new(&x, &op(0, 1, 0, 0, 1)).is_ok());
    assert!(SliceParams::new(&x, &op(9, 1, 0, 0, 0)).is_ok());
    for bad in [
        op(0, 2, 4, 0, 4),
        op(5, 1, 1, 0, 1),
        op(0, 0, 1, 0, 1),
        op(0, 0, 0, 0, 1),
        op(0, 1, 1, 1, 1),
        op(0, 1, 2, 1, 2),
        op(u32::MAX, 1, 1, 0, 1),
        op(1, u32::MAX, 2, 0, 2),
        op(0, 1, 1, u32::MAX, 1),
    ] {
        assert!(matches!(SliceParams::new(&x, &bad), Err(ShapeError::Invalid { op: "Slice", .. })), "{bad:?}");
    }
    let mut far = op(0, 1, 1, 0, 1);
    far.axis = 2;
    assert!(matches!(SliceParams::new(&x, &far), Err(ShapeError::Mismatch { op: "Slice", .. })));
}

// ---------------------------------------------------------------- matmul

proptest! {
    #![proptest_config(config())]

    #[test]
    fn matmul_matches_reference((sa, sb, tb, av, bv) in matmul_case(), b_w in weight_choice()) {
        let run = |av: &[f32], bv: &[f32]| {
            let mut bt = b_w.map(|dt| TestWeight::new(dt, &sb, bv));
            let rb = bt.as_ref().map_or_else(|| f64s(bv), |t| t.decoded.clone());
            let b = bt.as_mut().map_or(Operand::Act(bv), |t| Operand::Weight(t.view()));
            let p = MatMulParams::new(&shape(&sa), &shape(&sb), tb, b_w.is_some()).unwrap();
            p.check_operands(av, &b).unwrap();
            let (want, ys) = r::matmul(&f64s(av), &sa, &rb, &sb, tb);
            assert_eq!(p.y, shape(&ys));
            let mut y = out(want.len());
            matmul(&p, av, b, &mut y, &mut scratch(matmul_scratch(&p)));
            (y, want)
        };
        let (y, want) = run(&av, &bv);
        let (mag, mag_want) = run(&abs(&av), &abs(&bv));
        assert_close_dot(&format!("matmul {sa:?} {sb:?} tb:{tb} b:{b_w:?}"), &y, &want, &mag, &mag_want);
    }
}

#[test]
fn matmul_broadcasts_batch_axes_of_a_weight() {
    // a [2, 3, 2, 4] · b [3, 4, 5] (a rank-3 weight): batch [2] of a against [3] of b.
    let (sa, sb) = ([2usize, 3, 2, 4], [3usize, 4, 5]);
    let av: Vec<f32> = (0..48).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
    let bv: Vec<f32> = (0..60).map(|i| (i as f32 * 0.53).cos() - 0.2).collect();
    for dt in DTYPES {
        let mut bt = TestWeight::new(dt, &sb, &bv);
        let p = MatMulParams::new(&shape(&sa), &shape(&sb), false, true).unwrap();
        let b = Operand::Weight(bt.view());
        p.check_operands(&av, &b).unwrap();
        let mut y = out(2 * 3 * 2 * 5);
        matmul(&p, &av, b, &mut y, &mut scratch(matmul_scratch(&p)));
        let (want, _) = r::matmul(&f64s(&av), &sa, &bt.decoded, &sb, false);
        assert_close(&format!("matmul weight batch {dt:?}"), &y, &want, F32_KERNEL);
    }
}

#[test]
fn matmul_check_rejects_wrong_shapes() {
    let k_mismatch = MatMulParams::new(&shape(&[2, 3]), &shape(&[4, 5]), false, false).unwrap_err();
    assert_eq!(
        k_mismatch,
        ShapeError::Mismatch { op: "MatMul", what: "contraction length of b", expected: 3, found: 4 }
    );
    assert!(matches!(MatMulParams::new(&shape(&[3]), &shape(&[3, 5]), false, false), Err(ShapeError::Invalid { .. })));
    assert!(matches!(
        MatMulParams::new(&shape(&[2, 2, 3]), &shape(&[3, 3, 4]), false, false),
        Err(ShapeError::Mismatch { what: "broadcast dim", .. })
    ));
    let p = MatMulParams::new(&shape(&[2, 3]), &shape(&[3, 4]), false, true).unwrap();
    let w = [0.0f32; 12];
    let flat = Operand::Weight(WeightView::f32(1, 12, &w).unwrap());
    assert!(matches!(
        p.check_operands(&[0.0; 6], &flat),
        Err(ShapeError::Mismatch { what: "b weight matrix rows", .. })
    ));
}

// ---------------------------------------------------------------- conv2d

proptest! {
    #![proptest_config(config())]

    #[test]
    fn conv2d_matches_reference(case in 0..CONV_CASES.len(), dt in dtype(), bias in any::<bool>(), xs in vals(512), ws in vals(512)) {
        let (c, h, w, o, kh, kw, stride, pad, dilation, groups) = CONV_CASES[case];
        let cg = c / groups;
        let ws_shape = [o, cg, kh, kw];
        let p = Conv2dParams::new(&shape(&[c, h, w]), &shape(&ws_shape), stride, pad, dilation, groups).unwrap();
        let run = |x: &[f32], ws: &[f32], fast: bool| {
            let mut wt = TestWeight::new(dt, &ws_shape, &ws[..o * cg * kh * kw]);
            let mut bt = TestWeight::new(dt, &[o], &ws[..o]);
            let spec = r::ConvSpec { stride, pad, dilation, groups };
            let (want, oh, ow) =
                r::conv2d(&f64s(x), [c, h, w], &wt.decoded, ws_shape, bias.then_some(&bt.decoded[..]), spec);
            assert_eq!((p.oh, p.ow), (oh, ow));
            assert_eq!(p.y_shape(), Some(shape(&[o, oh, ow])));
            let proj = ProjW { w: wt.view(), b: bias.then(|| bt.view()), act_scale: None };
            proj.check("Conv2d", p.o, p.patch_len()).unwrap();
            let mut y = out(o * oh * ow);
            // The im2col + GEMM path with the planner's scratch, the direct loop with the minimum.
            let n = if fast { conv2d_scratch_fast(&p) } else { conv2d_scratch(&p) };
            conv2d(&p, &proj, Activation::None, x, &mut y, &mut scratch(n));
            (y, want)
        };
        let x = &xs[..c * h * w];
        for fast in [true, false] {
            let (y, want) = run(x, &ws, fast);
            let (mag, mag_want) = run(&abs(x), &abs(&ws), fast);
            assert_close_dot(&format!("conv2d case {case} {dt:?} fast {fast}"), &y, &want, &mag, &mag_want);
        }
    }
}

#[test]
fn conv2d_check_rejects_wrong_shapes() {
    let new = |x: &[usize], w: &[usize], pad, dil, g| Conv2dParams::new(&shape(x), &shape(w), [1, 1], pad, dil, g);
    let z = [0usize; 4];
    assert!(matches!(
        new(&[4, 5, 5], &[4, 3, 3, 3], z, [1, 1], 2),
        Err(ShapeError::Mismatch { expected: 2, found: 3, .. })
    ));
    assert!(matches!(new(&[3, 5, 5], &[3, 1, 3, 3], z, [1, 1], 2), Err(ShapeError::Invalid { .. })));
    assert!(matches!(
        new(&[1, 2, 5], &[1, 1, 3, 3], z, [1, 1], 1),
        Err(ShapeError::Invalid { what: "output height would be < 1", .. })
    ));
    assert!(matches!(
        new(&[1, 5, 4], &[1, 1, 3, 3], z, [1, 2], 1),
        Err(ShapeError::Invalid { what: "output width would be < 1", .. })
    ));
    assert!(new(&[1, 2, 5], &[1, 1, 3, 3], [1, 0, 0, 0], [1, 1], 1).is_ok());
    assert!(matches!(new(&[1, 5], &[1, 1, 3, 3], z, [1, 1], 1), Err(ShapeError::Mismatch { what: "input rank", .. })));
    let p = new(&[2, 5, 5], &[3, 2, 3, 3], z, [1, 1], 1).unwrap();
    let w = [0.0f32; 3 * 17];
    let proj = ProjW { w: WeightView::f32(3, 17, &w).unwrap(), b: None, act_scale: None };
    assert!(matches!(
        proj.check("Conv2d", p.o, p.patch_len()),
        Err(ShapeError::Mismatch { expected: 18, found: 17, .. })
    ));
}

// ---------------------------------------------------------------- embeddings

proptest! {
    #![proptest_config(config())]

    #[test]
    fn patch_embed_matches_reference(
        (c, p, gh, gw, d) in (1usize..4, 1usize..5, 1usize..4, 1usize..4, 2usize..7),
        dt in dtype(),
        bias in any::<bool>(),
        xs in vals(3 * 16 * 9),
        ws in vals(6 * 48),
    ) {
        let (h, w) = (gh * p, gw * p);
        let k = c * p * p;
        let run = |x: &[f32], ws: &[f32]| {
            let mut wt = TestWeight::matrix(dt, d, k, &ws[..d * k]);
            let mut bt = TestWeight::new(dt, &[d], &ws[..d]);
            let want = r::patch_embed(&f64s(x), [c, h, w], p, &wt.decoded, d, bias.then_some(&bt.decoded[..]));
            let proj = ProjW { w: wt.view(), b: bias.then(|| bt.view()), act_scale: None };
            let prm = PatchEmbedParams::new(&shape(&[c, h, w]), p, &proj).unwrap();
            assert_eq!(prm.tokens(), gh * gw);
            let mut y = out(gh * gw * d);
            patch_embed(&prm, &proj, x, &mut y, &mut scratch(patch_embed_scratch(&prm)));
            (y, want)
        };
        let x = &xs[..c * h * w];
        let (y, want) = run(x, &ws);
        let (mag, mag_want) = run(&abs(x), &abs(&ws));
        assert_close_dot(&format!("patch_embed {dt:?}"), &y, &want, &mag, &mag_want);
    }

    #[test]
    fn embedding_matches_reference(
        (vocab, d, t, extra) in (1usize..10, 1usize..9, 1usize..7, 0usize..3),
        ids in prop::collection::vec(any::<u32>(), 6),
        dt in dtype(),
        dt_pos in dtype(),
        with_pos in any::<bool>(),
        table in vals(10 * 8),
        pos in vals(9 * 8),
    ) {
        // Every id in -vocab..vocab: a negative one counts from the end (ONNX `Gather`).
        let ids: Vec<i32> = ids[..t].iter().map(|&i| (i as usize % (2 * vocab)) as i32 - vocab as i32).collect();
        let mut tt = TestWeight::matrix(dt, vocab, d, &table[..vocab * d]);
        let mut pt = TestWeight::matrix(dt_pos, t + extra, d, &pos[..(t + extra) * d]);
        let (tv, pv) = (tt.view(), pt.view());
        let posv = with_pos.then_some(&pv);
        let p = EmbeddingParams::new(&shape(&[t]), &tv, posv).unwrap();
        let mut y = out(t * d);
        embedding(&p, &tv, posv, &ids, &mut y, &mut scratch(embedding_scratch(&p))).unwrap();
        let want = r::embedding(&ids, &tt.decoded, d, with_pos.then_some(&pt.decoded[..])).unwrap();
        assert_close(&format!("embedding {dt:?} pos {with_pos} {dt_pos:?}"), &y, &want, F32_KERNEL);
    }

    #[test]
    fn out_of_range_token_ids_are_run_time_errors(
        (vocab, t) in (1usize..10, 1usize..7),
        at in 0usize..6,
        bad in prop_oneof![Just(-1i32), Just(-7i32), Just(i32::MIN), Just(0i32), Just(7i32), Just(i32::MAX)],
        dt in dtype(),
    ) {
        let at = at % t;
        // Non-negative choices are shifted to ≥ vocab, negative ones below -vocab (-vocab..0 counts
        // from the end).
        let bad = if bad >= 0 { bad.saturating_add(vocab as i32) } else { bad.saturating_sub(vocab as i32) };
        let mut ids = vec![0i32; t];
        ids[at] = bad;
        let d = 3;
        let table: Vec<f32> = (0..vocab * d).map(|i| 0.5 + i as f32).collect();
        let mut tt = TestWeight::matrix(dt, vocab, d, &table);
        let tv = tt.view();
        let p = EmbeddingParams::new(&shape(&[t]), &tv, None).unwrap();
        let mut y = out(t * d);
        let e = embedding(&p, &tv, None, &ids, &mut y, &mut []).unwrap_err();
        prop_assert_eq!(e, RunError::TokenIdOutOfRange { position: at, id: bad, vocab });
        prop_assert_eq!(r::embedding(&ids, &tt.decoded, d, None), Err(at));
    }
}

#[test]
fn embedding_checks_reject_wrong_shapes() {
    let w = [0.0f32; 24];
    let table = WeightView::f32(6, 4, &w).unwrap();
    let short_pos = WeightView::f32(2, 4, &w[..8]).unwrap();
    let narrow_pos = WeightView::f32(4, 3, &w[..12]).unwrap();
    assert!(matches!(
        EmbeddingParams::new(&shape(&[2, 3]), &table, None),
        Err(ShapeError::Mismatch { what: "ids rank", .. })
    ));
    assert!(matches!(
        EmbeddingParams::new(&shape(&[3]), &table, Some(&short_pos)),
        Err(ShapeError::Mismatch { expected: 3, found: 2, .. })
    ));
    assert!(matches!(
        EmbeddingParams::new(&shape(&[3]), &table, Some(&narrow_pos)),
        Err(ShapeError::Mismatch { expected: 4, found: 3, .. })
    ));
    let proj = ProjW { w: WeightView::f32(2, 12, &w).unwrap(), b: None, act_scale: None };
    assert!(matches!(PatchEmbedParams::new(&shape(&[3, 4, 5]), 2, &proj), Err(ShapeError::Invalid { .. })));
    assert!(matches!(
        PatchEmbedParams::new(&shape(&[2, 4, 4]), 2, &proj),
        Err(ShapeError::Mismatch { expected: 8, found: 12, .. })
    ));
    assert!(PatchEmbedParams::new(&shape(&[3, 4, 4]), 2, &proj).is_ok());
    assert!(matches!(
        PatchEmbedParams::new(&shape(&[4, 4]), 2, &proj),
        Err(ShapeError::Mismatch { what: "input rank", .. })
    ));
}
