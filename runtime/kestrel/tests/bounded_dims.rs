//! Bounded dims at run time (format 2.0): a graph written at the bound `T = TMAX`, with the
//! bindings of every integer that follows `T`, runs at each `T` within the bounds exactly as the
//! same graph built at that `T` does (position table read to its first `T` rows, causal
//! attention, a slice whose count follows `T`, a mean over `T`), allocating nothing; sizes
//! outside the bounds, inputs that disagree and fixed axes that differ are typed errors naming
//! the dim and the input, and the session still runs afterwards.
//!
//! The bindings come from `builder::bounded_sweep` (the graph built at every size, each integer
//! that varies fitted), as the converter's probing finds them for ONNX exports.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::{Op, Softmax};
use kestrel_rt::{Error, Input, Model, ModelBuilder};
use kestrel_rt_reference::alloc_count::count_this_thread as count;

const TMAX: usize = 29;
const D: usize = 8;

/// The graph at sequence length `t`: `x [t, D] + pos[..t]`, a dense layer, causal attention of
/// two heads, the rows after the first (`t - 1` of them), a softmax, and the mean over rows.
fn build(t: usize) -> Vec<u8> {
    kestrel_rt::demo::bounded_rows_model(t, TMAX).unwrap()
}

/// The bound's file with bindings for every integer that follows `T` (`builder::bounded_sweep`:
/// the graph built at every `T` in `2..=TMAX`, each integer fitted through all of them).
fn bounded() -> Vec<u8> {
    kestrel_rt::builder::bounded_sweep("T", 2, TMAX, |t| Ok(build(t))).unwrap()
}

fn run(model: &Model, t: usize, batch: usize, x: &[f32]) -> Vec<Vec<f32>> {
    let mut s = model.session(batch).unwrap();
    let out = s.run_vec(&[Input::F32(x)]).unwrap();
    assert_eq!(s.output_shape(0), Some(vec![2, t - 1, D / 2]));
    out
}

#[test]
fn every_size_within_the_bounds_matches_the_graph_built_at_that_size() {
    let bytes = bounded();
    let model = Model::from_bytes(&bytes).unwrap();
    let dims = model.dims().unwrap();
    assert_eq!(dims.len(), 1);
    assert_eq!((dims[0].name.as_str(), dims[0].min, dims[0].max), ("T", 2, TMAX));
    let mut s = model.session(3).unwrap();
    let mut rng = Rng::new(7);
    for t in [2, 3, 5, 16, 17, TMAX - 1, TMAX, 9, 2] {
        for batch in [1, 3] {
            let x = rng.vec(batch * t * D, 1.0);
            let got = s.run_vec_shaped(&[Input::F32(&x)], &[&[t, D]]).unwrap();
            assert_eq!(s.input_shape(0), Some(vec![t, D]));
            assert_eq!(s.output_shape(0), Some(vec![2, t - 1, D / 2]));
            assert_eq!(s.output_shape(1), Some(vec![2, D / 2]));
            let direct = Model::from_bytes(&build(t)).unwrap();
            let want = run(&direct, t, batch, &x);
            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.len(), w.len(), "T = {t}, output {o}");
                let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst <= 1e-6, "T = {t}, batch {batch}, output {o}: max |diff| {worst}");
            }
        }
    }
}

#[test]
fn runs_at_any_size_allocate_nothing() {
    let bytes = bounded();
    let model = Model::from_bytes(&bytes).unwrap();
    let mut s = model.session(2).unwrap();
    let x = Rng::new(3).vec(2 * TMAX * D, 1.0);
    let mut a = vec![0f32; 2 * 2 * (TMAX - 1) * (D / 2)];
    let mut m = [0f32; 2 * 2 * (D / 2)];
    for t in [TMAX, 6, 13, 2] {
        let (r, n) = count(|| {
            let (ya, ym) = (&mut a[..2 * 2 * (t - 1) * (D / 2)], &mut m[..]);
            s.run_shaped(&[Input::F32(&x[..2 * t * D])], &[&[t, D]], &mut [ya, ym])
        });
        assert_eq!(r.unwrap(), 2);
        assert_eq!(n, 0, "T = {t}: {n} allocations");
    }
}

#[test]
fn shapes_outside_the_bounds_are_typed_errors_and_the_session_goes_on() {
    let bytes = bounded();
    let model = Model::from_bytes(&bytes).unwrap();
    let mut s = model.session(1).unwrap();
    let msg = |r: Result<(), Error>| match r {
        Err(e @ Error::Dims { .. }) => e.to_string(),
        other => panic!("expected a dims error, got {other:?}"),
    };
    let e = msg(s.set_input_shapes(&[&[TMAX + 1, D]]));
    assert!(e.contains("`x`") && e.contains("`T`") && e.contains("2..=29") && e.contains("30"), "{e}");
    let e = msg(s.set_input_shapes(&[&[1, D]]));
    assert!(e.contains("outside its range"), "{e}");
    let e = msg(s.set_input_shapes(&[&[5, D + 1]]));
    assert!(e.contains("axis 1") && e.contains("fixed"), "{e}");
    let e = msg(s.set_input_shapes(&[&[5]]));
    assert!(e.contains("rank 2"), "{e}");
    assert!(matches!(s.set_input_shapes(&[]), Err(Error::Run(_))));
    // Still at the bound (never set), and still running any size.
    assert_eq!(s.input_shape(0), Some(vec![TMAX, D]));
    let x = Rng::new(1).vec(7 * D, 1.0);
    let out = s.run_vec_shaped(&[Input::F32(&x)], &[&[7, D]]).unwrap();
    assert_eq!(out[0].len(), 2 * 6 * (D / 2));
    // A run whose data does not match the shapes set is a length error, as before.
    assert!(s.run_vec(&[Input::F32(&x[..6 * D])]).is_err());
    // An error keeps the sizes the session had.
    assert!(s.set_input_shapes(&[&[TMAX + 5, D]]).is_err());
    assert_eq!(s.input_shape(0), Some(vec![7, D]));
    assert_eq!(s.run_vec(&[Input::F32(&x)]).unwrap()[0].len(), 2 * 6 * (D / 2));
}

#[test]
fn a_file_of_fixed_sizes_takes_only_its_own_shapes() {
    let model = Model::from_bytes(&build(5)).unwrap();
    assert!(model.dims().unwrap().is_empty());
    let mut s = model.session(1).unwrap();
    s.set_input_shapes(&[&[5, D]]).unwrap();
    assert!(matches!(s.set_input_shapes(&[&[4, D]]), Err(Error::Dims { .. })));
}

/// A graph whose structure changes with `T` gets no bounded dims: refused by name.
#[test]
fn bounded_sweep_refuses_a_graph_that_changes_with_the_size() {
    let e = kestrel_rt::builder::bounded_sweep("T", 2, 6, |t| {
        let mut b = ModelBuilder::new("changes");
        let x = b.input("x", &[t, D]).unwrap();
        let y = if t > 4 { b.op(|y| Op::Softmax(Softmax { x, y })).unwrap() } else { x };
        let y = b.op(|out| Op::Softmax(Softmax { x: y, y: out })).unwrap();
        b.output(y);
        Ok(b.build().unwrap())
    })
    .unwrap_err();
    assert!(e.to_string().contains("structure differs at T = "), "{e}");
}
