//! Property tests of the element-wise kernels (`Unary`, `Binary`) against the rows of the
//! format's element-wise tables (`kestrel_rt_format::ops::{UnaryOp, BinaryOp}`, their f64
//! definitions through `kestrel_rt_reference::layers`): every row on random values from its test
//! domain, on special values, with numpy broadcasting and weight operands in every encoding.

use crate::common_layers::cases::*;
use crate::common_layers::*;
use kestrel_rt_cpu::error::ShapeError;
use kestrel_rt_cpu::kernels::elementwise::{
    binary, binary_on, binary_scratch, unary, unary_on, unary_scratch, BinaryParams, Operand, UnaryParams,
};
use kestrel_rt_cpu::kernels::simd::Isa;
use kestrel_rt_format::ops::{Activation, BinaryOp, UnaryOp};
use kestrel_rt_format::{DType, WeightView};
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::layers as r;
use kestrel_rt_reference::testing::into_domain;
use kestrel_rt_reference::tolerance::{F32_APPROX, F32_KERNEL};
use proptest::prelude::*;

// ---------------------------------------------------------------- unary

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_unary_op_matches_reference(dims in prop::collection::vec(1usize..5, 0..4), seed in vals(256)) {
        let s = shape(&dims);
        let n = s.numel().unwrap();
        for &op in UnaryOp::ALL {
            let x: Vec<f32> = seed[..n].iter().map(|&v| into_domain(op.test_domain(), v)).collect();
            let p = UnaryParams::new(op, &s).unwrap();
            let mut y = out(n);
            unary(&p, &x, &mut y, &mut scratch(unary_scratch(&p)));
            let want = r::unary(unary_fn(op), &f64s(&x));
            assert_close(&format!("unary {op:?}"), &y, &want, F32_KERNEL);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// The piecewise-linear functions over both kinks (±3 for the hard ones) and the saturated
    /// ranges beyond them, which `vals` (|x| < 2) never reaches: the Unary kernel and the fused
    /// activation of dense and conv layers (`kernels::activate`) for each.
    #[test]
    fn piecewise_activations_match_reference_across_their_kinks(
        x in prop::collection::vec(-8f32..8.0, 1..300),
    ) {
        for (op, a) in [
            (UnaryOp::HardSigmoid, Activation::HardSigmoid),
            (UnaryOp::HardSwish, Activation::HardSwish),
            (UnaryOp::Relu, Activation::Relu),
        ] {
            let want = r::unary(unary_fn(op), &f64s(&x));
            assert_eq!(want, f64s(&x).iter().map(|&v| r::act(act(a), v)).collect::<Vec<_>>());
            let p = UnaryParams::new(op, &shape(&[x.len()])).unwrap();
            let mut y = out(x.len());
            unary(&p, &x, &mut y, &mut scratch(unary_scratch(&p)));
            assert_close(&format!("unary {op:?}"), &y, &want, F32_KERNEL);
            let mut z = x.clone();
            kestrel_rt_cpu::kernels::activate(a, &mut z);
            assert_close(&format!("activate {a:?}"), &z, &want, F32_KERNEL);
        }
    }
}

// ---------------------------------------------------------------- binary

/// The builds of the element-wise loops this CPU runs (`binary_on`, `unary_on`): the portable
/// one always and each x86 tier it has.
fn tiers() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512].into_iter().filter(|i| i.supported()).collect()
}

/// Runs one binary case; `a_w`/`b_w` make that operand a weight in the given encoding.
/// The values where element-wise functions differ most: zeros of both signs, ties and halves
/// (comparisons, rounding, logic), the saturating ranges, ±∞ and NaN (the predicates).
const SPECIALS: [f32; 17] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    1.5,
    2.5,
    -2.5,
    3.0,
    -3.0,
    1e-3,
    0.25,
    30.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
];

/// `y` against the f64 definition `want`: NaN exactly where the definition is NaN, an infinity
/// exactly where it is that infinity, and within `F32_APPROX` of it elsewhere (its floor taken
/// against a scale of 1, the specials' order; the fast GELU and sigmoid forms are in it).
fn assert_same_specials(what: &str, inputs: &[(f32, f32)], y: &[f32], want: &[f64]) {
    for ((&(a, b), &v), &w) in inputs.iter().zip(y).zip(want) {
        let ok = if w.is_nan() {
            v.is_nan()
        } else if w.is_infinite() || w.abs() > f64::from(f32::MAX) {
            f64::from(v) == w || (v.is_infinite() && v.is_sign_positive() == w.is_sign_positive())
        } else {
            let err = (f64::from(v) - w).abs();
            err <= F32_APPROX.atol_frac + F32_APPROX.rtol * w.abs()
        };
        assert!(ok, "{what}({a}, {b}) = {v}, the definition gives {w}");
    }
}

/// Every row of the element-wise tables (`kestrel_rt_format::ops::{UnaryOp, BinaryOp}`) through
/// the CPU kernels on [`SPECIALS`] (every pair for the binary rows), against the rows' f64
/// definitions: the values random tests never reach.
#[test]
fn every_elementwise_row_on_special_values() {
    let n = SPECIALS.len();
    for &op in UnaryOp::ALL {
        let p = UnaryParams::new(op, &shape(&[n])).unwrap();
        let want = r::unary(unary_fn(op), &f64s(&SPECIALS));
        let inputs: Vec<(f32, f32)> = SPECIALS.iter().map(|&x| (x, 0.0)).collect();
        for isa in tiers() {
            let mut y = out(n);
            unary_on(isa, &p, &SPECIALS, &mut y, &mut scratch(unary_scratch(&p)));
            assert_same_specials(&format!("{op:?} {}", isa.name()), &inputs, &y, &want);
        }
        let mut y = out(n);
        unary(&p, &SPECIALS, &mut y, &mut scratch(unary_scratch(&p)));
        assert_same_specials(&format!("{op:?}"), &inputs, &y, &want);
    }
    let inputs: Vec<(f32, f32)> = SPECIALS.iter().flat_map(|&a| SPECIALS.iter().map(move |&b| (a, b))).collect();
    let (a, b): (Vec<f32>, Vec<f32>) = inputs.iter().copied().unzip();
    // Every pair through each operand form: same shapes (the flat loop), `[n, n]` against a
    // column `[n, 1]` (one value per row: the scalar loops), `[n, 1, n]` against `[n, 1]` (the
    // two-sided broadcast, by rows), on each side.
    let b_col: Vec<f32> = SPECIALS.to_vec();
    type Form<'a> = (&'a [usize], &'a [usize], &'a [f32], &'a [f32]);
    let forms: [Form<'_>; 5] = [
        (&[n * n], &[n * n], &a, &b),
        (&[n, n], &[n, 1], &b, &b_col),
        (&[n, 1], &[n, n], &b_col, &b),
        (&[1, 1, n], &[n, 1], &SPECIALS, &b_col),
        (&[n, 1], &[1, 1, n], &b_col, &SPECIALS),
    ];
    for &op in BinaryOp::ALL {
        for (sa, sb, av, bv) in forms {
            let p = BinaryParams::new(op, &shape(sa), &shape(sb)).unwrap();
            let (want, _) = r::binary(binary_fn(op), &f64s(av), sa, &f64s(bv), sb);
            let pairs = broadcast_pairs(av, sa, bv, sb);
            for isa in tiers().into_iter().map(Some).chain([None]) {
                let mut y = out(p.n);
                let sc = &mut scratch(binary_scratch(&p));
                match isa {
                    Some(isa) => binary_on(isa, &p, Operand::Act(av), Operand::Act(bv), &mut y, sc),
                    None => binary(&p, Operand::Act(av), Operand::Act(bv), &mut y, sc),
                }
                let who = isa.map_or("dispatched", |i| i.name());
                assert_same_specials(&format!("{op:?} {sa:?} {sb:?} {who}"), &pairs, &y, &want);
            }
        }
    }
}

/// The operand pairs of a numpy broadcast of `av [sa]` and `bv [sb]`, output order.
fn broadcast_pairs(av: &[f32], sa: &[usize], bv: &[f32], sb: &[usize]) -> Vec<(f32, f32)> {
    let r = sa.len().max(sb.len());
    let pad = |s: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, r - s.len()).chain(s.iter().copied()).collect() };
    let (pa, pb) = (pad(sa), pad(sb));
    let ys: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let at = |idx: &[usize], s: &[usize]| idx.iter().zip(s).fold(0, |o, (&i, &d)| o * d + if d == 1 { 0 } else { i });
    (0..ys.iter().product::<usize>())
        .map(|mut i| {
            let mut idx = vec![0; r];
            for k in (0..r).rev() {
                (idx[k], i) = (i % ys[k], i / ys[k]);
            }
            (av[at(&idx, &pa)], bv[at(&idx, &pb)])
        })
        .collect()
}

/// ONNX's Max, Min, Relu and Clip propagate NaN (numpy's `maximum`/`minimum`): so do the
/// format's rows (their f64 definitions, the reference of the tests above) and the fused forms
/// on the CPU, a dense layer's ReLU and its clamp (fused from Max/Min by constants).
#[test]
fn max_min_relu_and_clamp_propagate_nan() {
    let nan = f32::NAN;
    for (a, b) in [(nan, 1.0), (1.0, nan), (nan, f32::NEG_INFINITY), (f32::INFINITY, nan), (nan, nan)] {
        assert!(BinaryOp::Max.eval(a, b).is_nan() && BinaryOp::Min.eval(a, b).is_nan(), "({a}, {b})");
        let (a, b) = (f64::from(a), f64::from(b));
        assert!(r::binary_scalar(binary_fn(BinaryOp::Max), a, b).is_nan(), "f64 ({a}, {b})");
        assert!(r::binary_scalar(binary_fn(BinaryOp::Min), a, b).is_nan(), "f64 ({a}, {b})");
    }
    assert_eq!((BinaryOp::Max.eval(-1.0, 2.0), BinaryOp::Min.eval(-1.0, 2.0)), (2.0, -1.0));
    assert!(UnaryOp::Relu.eval(nan).is_nan());
    assert_eq!((UnaryOp::Relu.eval(-2.0), UnaryOp::Relu.eval(3.0)), (0.0, 3.0));
    let xs = [nan, -2.0, 0.5, 7.0, f32::NEG_INFINITY, f32::INFINITY];
    let mut z = xs;
    kestrel_rt_cpu::kernels::activate(Activation::Relu, &mut z);
    assert!(z[0].is_nan());
    assert_eq!(&z[1..], &[0.0, 0.5, 7.0, 0.0, f32::INFINITY]);
    let clamp = kestrel_rt_cpu::kernels::Clamp { lo: -1.0, hi: 6.0 };
    for act in [Activation::None, Activation::Relu] {
        let mut z = xs;
        kestrel_rt_cpu::kernels::epilogue(act, Some(clamp), &mut z);
        assert!(z[0].is_nan(), "{act:?}");
        let lo = if act == Activation::Relu { 0.0 } else { -1.0 };
        assert_eq!(&z[1..], &[lo, 0.5, 6.0, lo, 6.0], "{act:?}");
    }
}

fn check_binary(
    op: BinaryOp,
    sa: &[usize],
    sb: &[usize],
    av: &[f32],
    bv: &[f32],
    a_w: Option<DType>,
    b_w: Option<DType>,
) {
    let mut at = a_w.map(|dt| TestWeight::new(dt, sa, av));
    let mut bt = b_w.map(|dt| TestWeight::new(dt, sb, bv));
    let ra = at.as_ref().map_or_else(|| f64s(av), |t| t.decoded.clone());
    let rb = bt.as_ref().map_or_else(|| f64s(bv), |t| t.decoded.clone());
    let a = at.as_mut().map_or(Operand::Act(av), |t| Operand::Weight(t.view()));
    let b = bt.as_mut().map_or(Operand::Act(bv), |t| Operand::Weight(t.view()));
    let p = BinaryParams::new(op, &shape(sa), &shape(sb)).unwrap();
    p.check_operands(&a, &b).unwrap();
    let (want, ys) = r::binary(binary_fn(op), &ra, sa, &rb, sb);
    assert_eq!(p.y, shape(&ys), "broadcast shape of {sa:?} and {sb:?}");
    let mut y = out(p.n);
    binary(&p, a, b, &mut y, &mut scratch(binary_scratch(&p)));
    assert_close(&format!("binary {op:?} {sa:?} {sb:?} a:{a_w:?} b:{b_w:?}"), &y, &want, F32_KERNEL);
    for isa in tiers() {
        let mut y = out(p.n);
        binary_on(isa, &p, a, b, &mut y, &mut scratch(binary_scratch(&p)));
        let what = format!("binary {op:?} {sa:?} {sb:?} a:{a_w:?} b:{b_w:?} {}", isa.name());
        assert_close(&what, &y, &want, F32_KERNEL);
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_binary_op_broadcasts_like_numpy(
        (sa, sb) in broadcast_pair(4),
        av in vals(256),
        bv in vals(256),
        a_w in weight_choice(),
        b_w in weight_choice(),
    ) {
        let (na, nb) = (shape(&sa).numel().unwrap(), shape(&sb).numel().unwrap());
        for &op in BinaryOp::ALL {
            let (a, b) = binary_values(op, &av[..na], &bv[..nb]);
            check_binary(op, &sa, &sb, &a, &b, a_w, b_w);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// A squeeze-excitation gate: `[C, H, W]` against one value per channel (`[C, 1, 1]`, with
    /// or without a leading 1), on either side, an activation or a weight in any encoding.
    #[test]
    fn per_channel_operands_broadcast_like_numpy(
        (c, h, w) in (1usize..20, 1usize..6, 1usize..6),
        lead in any::<bool>(),
        gate_left in any::<bool>(),
        gate_w in weight_choice(),
        mv in vals(20 * 36),
        gv in vals(20),
    ) {
        let pre: &[usize] = if lead { &[1] } else { &[] };
        let map: Vec<usize> = pre.iter().copied().chain([c, h, w]).collect();
        let gate: Vec<usize> = pre.iter().copied().chain([c, 1, 1]).collect();
        for &op in BinaryOp::ALL {
            if gate_left {
                let (g, m) = binary_values(op, &gv[..c], &mv[..c * h * w]);
                check_binary(op, &gate, &map, &g, &m, gate_w, None);
            } else {
                let (m, g) = binary_values(op, &mv[..c * h * w], &gv[..c]);
                check_binary(op, &map, &gate, &m, &g, None, gate_w);
            }
        }
    }
}

#[test]
fn binary_named_broadcast_cases() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 4], &[]),                          // scalar
        (&[], &[2, 3]),                          // scalar on the left
        (&[3, 4], &[4]),                         // row
        (&[3, 4], &[3, 1]),                      // column
        (&[2, 1, 4], &[3, 1]),                   // both broadcast, rank mismatch
        (&[2, 3, 4], &[1, 3, 4]),                // leading 1
        (&[1, 2, 1, 3, 1, 2], &[2, 1, 3, 2, 1]), // rank 6
        (&[2, 3, 5], &[2, 3, 5]),                // same shapes (the flat fast path)
        (&[1, 5, 3, 2], &[1, 5, 1, 1]),          // a per-channel gate: runs zipped with it
        (&[4, 1, 1], &[4, 2, 2]),                // the gate on the left
        (&[2, 3, 2, 2], &[2, 3, 1, 1]),          // one value per run over two outer axes
        (&[2, 3, 2, 2], &[3, 1, 1]),             // per run, but repeated along axis 0
        (&[1, 1], &[3, 4]),                      // one element with unit dims, on the left
        (&[2, 1, 4], &[1, 3, 1]),                // rows of a against one value of b per row
        (&[1, 3, 1], &[2, 1, 4]),                // the same, swapped
        (&[4, 1, 33], &[5, 1]),                  // two-sided, rows of 33 (by rows)
        (&[5, 1], &[4, 1, 33]),                  // the same, swapped
        (&[3, 2, 17], &[3, 1, 17]),              // rows zipped with a repeated row
        (&[3, 1, 17], &[3, 4, 1]),               // contiguous rows against one value each
    ];
    for &(sa, sb) in cases {
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let av: Vec<f32> = (0..na).map(|i| 0.3 + (i as f32 * 0.71).sin()).collect();
        let bv: Vec<f32> = (0..nb).map(|i| 0.9 + 0.5 * (i as f32 * 1.3).cos()).collect();
        for &op in BinaryOp::ALL {
            let (a, b) = binary_values(op, &av, &bv);
            check_binary(op, sa, sb, &a, &b, None, None);
            for dt in DTYPES {
                check_binary(op, sa, sb, &a, &b, None, Some(dt));
                check_binary(op, sa, sb, &a, &b, Some(dt), None);
            }
        }
    }
}

#[test]
fn binary_check_rejects_incompatible_shapes() {
    let e = BinaryParams::new(BinaryOp::Add, &shape(&[2, 3]), &shape(&[4, 3])).unwrap_err();
    assert_eq!(e, ShapeError::Mismatch { op: "Binary", what: "broadcast dim", expected: 2, found: 4 });
    let p = BinaryParams::new(BinaryOp::Add, &shape(&[2, 3]), &shape(&[3])).unwrap();
    let a = [0.0f32; 6];
    let w = [0.0f32; 4];
    let bw = Operand::Weight(WeightView::f32(1, 4, &w).unwrap());
    assert!(matches!(
        p.check_operands(&Operand::Act(&a), &bw),
        Err(ShapeError::Mismatch { expected: 3, found: 4, .. })
    ));
    assert!(matches!(
        p.check_operands(&Operand::Act(&a[..5]), &bw),
        Err(ShapeError::Mismatch { expected: 6, found: 5, .. })
    ));
}
