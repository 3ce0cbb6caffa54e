//! Property tests of the recurrent kernels (LSTM with and without peepholes, GRU with either
//! `linear_before_reset`) against the f64 reference in `kestrel_rt_reference::rnn`: every
//! direction, every output, with and without initial states, every weight encoding (the
//! reference gets the decoded weights), random non-zero inputs; the vectorised σ and tanh against
//! libm; and the shape checks.

use crate::common_layers::*;
use kestrel_rt_cpu::error::ShapeError;
use kestrel_rt_cpu::kernels::rnn::{rnn, rnn_scratch, RnnCell, RnnParams, RnnWeights};
use kestrel_rt_cpu::kernels::simd;
use kestrel_rt_format::ops::{GruReset, RnnDirection, RnnOutput};
use kestrel_rt_format::DType;
use kestrel_rt_reference::rnn::{self as r, Cell, RnnRef};
use kestrel_rt_reference::testing::{rnn_pick, rnn_reversed};
use kestrel_rt_reference::tolerance::{F32_APPROX, F32_KERNEL};
use kestrel_rt_reference::{assert_close, assert_close_at_scale};
use proptest::prelude::*;

/// 64 cases per property (fast), unless `PROPTEST_CASES` asks for another count.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// `(T, I, H)`: up to 9 steps, hidden sizes on both sides of the 8-lane SIMD width.
fn dims() -> impl Strategy<Value = (usize, usize, usize)> {
    (1usize..10, 1usize..14, 1usize..21)
}

/// One layer's values: x, w, r, b, h0, c0, LSTM peepholes (non-zero; weights scaled so that
/// gates are not all saturated).
type Values = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>);

fn values(t: usize, i: usize, h: usize) -> impl Strategy<Value = Values> {
    let rows = 2 * 4 * h; // the largest case: a bidirectional LSTM
    (vals(t * i), vals(rows * i), vals(rows * h), vals(2 * 2 * 4 * h), vals(2 * h), vals(2 * h), vals(2 * 3 * h))
        .prop_map(move |(x, w, r, b, h0, c0, p)| {
            let scale = |v: Vec<f32>, k: f32| v.into_iter().map(|a| a * k).collect::<Vec<_>>();
            let (kw, kr) = (1.0 / (i as f32).sqrt(), 1.0 / (h as f32).sqrt());
            (x, scale(w, kw), scale(r, kr), scale(b, 0.5), h0, c0, scale(p, 0.5))
        })
}

/// The cells and their variants: LSTM without and with peepholes, GRU with the reset gate on
/// the recurrent product (`linear_before_reset = 1`) and on the state (0).
const VARIANTS: [(RnnCell, Variant); 4] = [
    (RnnCell::Lstm, Variant { peep: false, reset: GruReset::Product }),
    (RnnCell::Lstm, Variant { peep: true, reset: GruReset::Product }),
    (RnnCell::Gru, Variant { peep: false, reset: GruReset::Product }),
    (RnnCell::Gru, Variant { peep: false, reset: GruReset::State }),
];

/// An LSTM's peepholes, a GRU's reset gate.
#[derive(Clone, Copy, Debug)]
struct Variant {
    peep: bool,
    reset: GruReset,
}

fn cell_of(c: RnnCell) -> Cell {
    match c {
        RnnCell::Lstm => Cell::Lstm,
        RnnCell::Gru => Cell::Gru,
    }
}

/// Runs one configuration for every output the cell has and compares with the reference.
#[allow(clippy::too_many_arguments)]
fn check(
    (cell, var): (RnnCell, Variant),
    direction: RnnDirection,
    (t, i, h): (usize, usize, usize),
    v: &Values,
    dt: DType,
    h0: bool,
    c0: bool,
) {
    let c0 = c0 && cell == RnnCell::Lstm;
    let dirs = direction.dirs();
    let g = cell.gates() * h;
    let rows = dirs * g;
    let mut wt = TestWeight::matrix(dt, rows, i, &v.1[..rows * i]);
    let mut rt = TestWeight::matrix(dt, rows, h, &v.2[..rows * h]);
    let mut bt = TestWeight::matrix(DType::F32, dirs, 2 * g, &v.3[..dirs * 2 * g]);
    let mut ht = TestWeight::matrix(DType::F32, dirs, h, &v.4[..dirs * h]);
    let mut ct = TestWeight::matrix(DType::F32, dirs, h, &v.5[..dirs * h]);
    let mut pt = TestWeight::matrix(DType::F32, dirs, 3 * h, &v.6[..dirs * 3 * h]);
    let x = &v.0[..t * i];
    let reference = r::rnn(
        &f64s(x),
        t,
        i,
        &RnnRef {
            cell: cell_of(cell),
            hidden: h,
            reversed: rnn_reversed(direction),
            w: &wt.decoded,
            r: &rt.decoded,
            b: &bt.decoded,
            h0: h0.then_some(&ht.decoded[..]),
            c0: c0.then_some(&ct.decoded[..]),
            p: var.peep.then_some(&pt.decoded[..]),
            linear_before_reset: var.reset == GruReset::Product,
        },
    );
    let wts = RnnWeights {
        w: wt.view(),
        r: rt.view(),
        b: bt.view(),
        h0: h0.then(|| ht.view()),
        c0: c0.then(|| ct.view()),
        p: var.peep.then(|| pt.view()),
    };
    let outputs: &[RnnOutput] = match cell {
        RnnCell::Lstm => RnnOutput::ALL,
        RnnCell::Gru => &[RnnOutput::Y, RnnOutput::Hidden],
    };
    for &output in outputs {
        let sh = |d: &[usize]| shape(d);
        let p = RnnParams::new(
            cell,
            &sh(&[t, i]),
            &sh(&[rows, i]),
            &sh(&[rows, h]),
            &sh(&[dirs, 2 * g]),
            h0.then(|| sh(&[dirs, h])).as_ref(),
            c0.then(|| sh(&[dirs, h])).as_ref(),
            h,
            direction,
            output,
        )
        .and_then(|p| p.with_peepholes(var.peep.then(|| sh(&[dirs, 3 * h])).as_ref()))
        .and_then(|p| p.with_reset(var.reset))
        .unwrap();
        wts.check(&p).unwrap();
        let want = rnn_pick(&reference, output);
        assert_eq!(p.y_shape().unwrap().numel(), Some(want.len()));
        let mut y = out(want.len());
        rnn(&p, &wts, x, &mut y, &mut scratch(rnn_scratch(&p)));
        let what = format!("{cell:?} {var:?} {direction:?} {output:?} T={t} I={i} H={h} {dt:?} h0={h0} c0={c0}");
        // The states are sums and differences of gate products in (−1, 1) (the cell state of up
        // to T of them): their rounding is relative to 1 however small an output ends up (a case
        // on record: H = 1, T = 4, a hidden state of −3.4e-6 off by 4.4e-9, 1.3e-3 of itself).
        assert_close_at_scale(&what, &y, &want, F32_APPROX, 1.0);
    }
}

proptest! {
    #![proptest_config(config())]

    /// Each case runs both cells in both variants (the GRU has no cell state: `c0` is the
    /// LSTM's only).
    #[test]
    fn lstm_and_gru_match_reference(
        (d, v) in dims().prop_flat_map(|d| (Just(d), values(d.0, d.1, d.2))),
        direction in prop::sample::select(RnnDirection::ALL.to_vec()),
        dt in dtype(),
        h0 in any::<bool>(),
        c0 in any::<bool>(),
    ) {
        for cell in VARIANTS {
            check(cell, direction, d, &v, dt, h0, c0);
        }
    }

    /// The vectorised σ and tanh against f64 over a wide range, tiny arguments included (tanh's
    /// polynomial branch), at lengths that leave SIMD tails.
    #[test]
    fn simd_sigmoid_and_tanh_match_f64(
        xs in prop::collection::vec(prop_oneof![-30.0f32..30.0, -1.0f32..1.0, -1e-3f32..1e-3], 1..40),
    ) {
        let want_s: Vec<f64> = xs.iter().map(|&x| kestrel_rt_reference::mechanisms::sigmoid(f64::from(x))).collect();
        let want_t: Vec<f64> = xs.iter().map(|&x| f64::from(x).tanh()).collect();
        let (mut s, mut t) = (xs.clone(), xs.clone());
        simd::sigmoid(&mut s);
        simd::tanh(&mut t);
        // Element-wise relative accuracy (no floor from the largest element).
        let tol = kestrel_rt_reference::Tolerance { atol_frac: 0.0, ..F32_KERNEL };
        for (k, &x) in xs.iter().enumerate() {
            assert_close(&format!("sigmoid({x})"), &s[k..=k], &want_s[k..=k], tol);
            assert_close(&format!("tanh({x})"), &t[k..=k], &want_t[k..=k], tol);
        }
    }
}

/// A long sequence (T = 64, H = 48) through the packed GEMM rows and the threaded GEMV size.
#[test]
fn long_sequence_matches_reference() {
    let (t, i, h) = (64, 40, 48);
    let mut rng = kestrel_rt_reference::testing::Rng::new(7);
    let mut nz = |n: usize, k: f64| (0..n).map(|_| rng.nz(k)).collect::<Vec<f32>>();
    let v: Values = (
        nz(t * i, 1.0),
        nz(8 * h * i, 0.15),
        nz(8 * h * h, 0.15),
        nz(16 * h, 0.5),
        nz(2 * h, 1.0),
        nz(2 * h, 1.0),
        nz(6 * h, 0.5),
    );
    for cell in VARIANTS {
        check(cell, RnnDirection::Bidirectional, (t, i, h), &v, DType::F32, true, true);
    }
}

#[test]
fn shape_checks_reject_bad_weights() {
    let s = shape;
    let new = |cell, w: &[usize], r: &[usize], b: &[usize], h0: Option<&[usize]>, output| {
        RnnParams::new(
            cell,
            &s(&[5, 3]),
            &s(w),
            &s(r),
            &s(b),
            h0.map(s).as_ref(),
            None,
            4,
            RnnDirection::Bidirectional,
            output,
        )
    };
    let (lstm, gru) = (RnnCell::Lstm, RnnCell::Gru);
    let ok = new(lstm, &[32, 3], &[32, 4], &[2, 32], Some(&[2, 4]), RnnOutput::Cell).unwrap();
    assert_eq!(ok.y_shape(), Some(s(&[2, 4])));
    assert_eq!(new(gru, &[24, 3], &[24, 4], &[2, 24], None, RnnOutput::Y).unwrap().y_shape(), Some(s(&[5, 2, 4])));
    assert!(matches!(
        new(lstm, &[16, 3], &[32, 4], &[2, 32], None, RnnOutput::Y),
        Err(ShapeError::Mismatch { expected: 32, found: 16, .. })
    ));
    assert!(matches!(
        new(lstm, &[2, 16, 3], &[32, 4], &[2, 32], None, RnnOutput::Y),
        Err(ShapeError::Mismatch { what: "w rank", .. })
    ));
    assert!(matches!(
        new(lstm, &[32, 3], &[32, 5], &[2, 32], None, RnnOutput::Y),
        Err(ShapeError::Mismatch { expected: 4, found: 5, .. })
    ));
    assert!(matches!(
        new(lstm, &[32, 3], &[32, 4], &[1, 32], None, RnnOutput::Y),
        Err(ShapeError::Mismatch { what: "b rows (dirs)", .. })
    ));
    assert!(matches!(
        new(lstm, &[32, 3], &[32, 4], &[2, 32], Some(&[2, 5]), RnnOutput::Y),
        Err(ShapeError::Mismatch { what: "initial state cols (hidden)", .. })
    ));
    assert!(matches!(
        new(gru, &[24, 3], &[24, 4], &[2, 24], None, RnnOutput::Cell),
        Err(ShapeError::Invalid { what: "a GRU has no cell state", .. })
    ));
    // Peepholes [dirs, 3H], an LSTM's only; the reset gate's place, a GRU's only.
    let peep = |p: &[usize]| ok.with_peepholes(Some(&s(p)));
    assert!(peep(&[2, 12]).unwrap().has_p);
    assert!(matches!(peep(&[2, 16]), Err(ShapeError::Mismatch { what: "p cols (3·hidden)", .. })));
    assert!(matches!(peep(&[1, 12]), Err(ShapeError::Mismatch { what: "p rows (dirs)", .. })));
    assert!(matches!(peep(&[24]), Err(ShapeError::Mismatch { what: "p rank", .. })));
    let g = new(gru, &[24, 3], &[24, 4], &[2, 24], None, RnnOutput::Y).unwrap();
    assert!(matches!(g.with_peepholes(Some(&s(&[2, 12]))), Err(ShapeError::Invalid { .. })));
    assert!(matches!(ok.with_reset(GruReset::State), Err(ShapeError::Invalid { .. })));
    assert_eq!(g.with_reset(GruReset::State).unwrap().reset, GruReset::State);
    // Peepholes take 3H more scratch; a layer without them what it always did.
    assert_eq!(rnn_scratch(&peep(&[2, 12]).unwrap()), rnn_scratch(&ok) + 12);
}
