//! Run-time dims (format 2.0 `SymSource`): a size the data decide during a run (the count of
//! positive entries here, as a `NonZero`'s count is), read right after the node that computes
//! it, with every size that follows it set before the next node runs; memory planned once, at
//! the bound. Outputs that follow it come at each run's size, a count of 0 included (empty
//! outputs; a sum over nothing is 0). A value outside the file's range (0 for a file whose range
//! starts at 1, as files written before 0 was allowed), a batch whose samples disagree, and a GPU
//! session are clear errors, and the session runs on.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::{Binary, BinaryOp, Op, Reduce, ReduceOp, Slice};
use kestrel_rt::{Error, Input, Model, ModelBuilder};
use kestrel_rt_reference::alloc_count::count_this_thread as count;

const N: usize = 12;

/// `count = Σ (x > 0)` (`[1]`), `y = (2·x)[..n]` and `s = Σ y`: the graph at `n`.
fn build(n: usize) -> Result<Vec<u8>, Error> {
    let mut b = ModelBuilder::new("run_dims");
    let x = b.input("x", &[N])?;
    let zero = b.weight("zero", &[1], vec![0.0])?;
    let two = b.weight("two", &[1], vec![2.0])?;
    let gt = b.op(|y| Op::Binary(Binary { a: x, b: zero, op: BinaryOp::Greater, y }))?;
    let c = b.op(|y| Op::Reduce(Reduce { x: gt, op: ReduceOp::Sum, axis: 0, keep_dims: true, y }))?;
    let z = b.op(|y| Op::Binary(Binary { a: x, b: two, op: BinaryOp::Mul, y }))?;
    let n = n as u32;
    let head = b.op(|y| Op::Slice(Slice { x: z, axis: 0, start: 0, step: 1, count: n, offset: 0, len: n, y }))?;
    let s = b.op(|y| Op::Reduce(Reduce { x: head, op: ReduceOp::Sum, axis: 0, keep_dims: true, y }))?;
    b.output(c);
    b.output(head);
    b.output(s);
    b.build()
}

/// The file: `n` in `0..=N`, read from the count (node 1's output, `reduce_1`).
fn model() -> Model {
    model_from(0)
}

/// The file with `n` in `min..=N`.
fn model_from(min: usize) -> Model {
    let kes =
        kestrel_rt::builder::bounded_sweep_run_dims(&[("n", min, N)], &[("n", "reduce_1")], |at| build(at[0])).unwrap();
    Model::from_bytes(&kes).unwrap()
}

/// The outputs by the definition: the count, `2·x` up to it, and its sum (0 over nothing).
fn want(x: &[f32], positives: usize) -> (Vec<f64>, f64) {
    let y: Vec<f64> = x.iter().take(positives).map(|&v| 2.0 * f64::from(v)).collect();
    let sum = y.iter().sum();
    (y, sum)
}

/// `x` with exactly `positives` positive entries (the others negative), none zero.
fn sample(rng: &mut Rng, positives: usize) -> Vec<f32> {
    let mut x: Vec<f32> = rng.vec(N, 1.0).iter().map(|v| -(v.abs() + 0.1)).collect();
    for v in x.iter_mut().take(positives) {
        *v = -*v;
    }
    // Spread the positives around.
    for i in (1..N).rev() {
        let j = (rng.vec(1, 1.0)[0].abs() * 1e4) as usize % (i + 1);
        x.swap(i, j);
    }
    x
}

#[test]
fn each_run_takes_the_size_its_data_decide() {
    let m = model();
    let dims = m.dims().unwrap();
    assert_eq!(dims.len(), 1);
    assert!(dims[0].run_time && dims[0].min == 0 && dims[0].max == N);
    let mut s = m.session(2).unwrap();
    let mut rng = Rng::new(11);
    // 3 → 0 → 2 → 0 on one session, among others; then counts drawn in 0..=N.
    let drawn: Vec<usize> = (0..24).map(|_| (rng.vec(1, 1.0)[0].abs() * 1e4) as usize % (N + 1)).collect();
    assert!(drawn.contains(&0) && drawn.iter().any(|&c| c > 0), "{drawn:?}");
    for positives in [3, 0, 2, 0, 5, 1, N, 0, 7, 2, N - 1].into_iter().chain(drawn) {
        let x = sample(&mut rng, positives);
        let out = s.run_vec(&[Input::F32(&x)]).unwrap();
        assert_eq!(out[0], vec![positives as f32]);
        assert_eq!(s.output_shape(1), Some(vec![positives]), "{positives} positives");
        assert_eq!(s.output_shape(2), Some(vec![1]), "{positives} positives");
        let (want, sum) = want(&x, positives);
        assert_eq!(out[1].len(), positives);
        for (g, w) in out[1].iter().zip(&want) {
            assert!((f64::from(*g) - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} vs {w}");
        }
        assert!((f64::from(out[2][0]) - sum).abs() <= 1e-5 * sum.abs().max(1.0), "{} vs {sum}", out[2][0]);
    }
    // A batch whose samples agree on 0.
    let x: Vec<f32> = sample(&mut rng, 0).into_iter().chain(sample(&mut rng, 0)).collect();
    let out = s.run_vec(&[Input::F32(&x)]).unwrap();
    assert_eq!((out[0].clone(), out[1].len(), out[2].clone()), (vec![0.0, 0.0], 0, vec![0.0, 0.0]));
    // A batch whose samples agree.
    let a = sample(&mut rng, 4);
    let b = sample(&mut rng, 4);
    let x: Vec<f32> = a.iter().chain(&b).copied().collect();
    let out = s.run_vec(&[Input::F32(&x)]).unwrap();
    assert_eq!(out[1].len(), 8);
    assert_eq!(out[1][4..], b[..4].iter().map(|v| 2.0 * v).collect::<Vec<_>>()[..]);
}

#[test]
fn runs_allocate_nothing_and_fill_the_bound_buffers_leading_part() {
    let m = model();
    let mut s = m.session(1).unwrap();
    let mut rng = Rng::new(5);
    let (mut c, mut y, mut sum) = ([0f32; 1], [7f32; N], [0f32; 1]);
    for positives in [3, 0, 2, 0, N, 1, 0, 6] {
        let x = sample(&mut rng, positives);
        y.fill(7.0);
        sum[0] = 7.0;
        let (r, allocs) = count(|| s.run(&[Input::F32(&x)], &mut [&mut c, &mut y, &mut sum]));
        r.unwrap();
        assert_eq!(allocs, 0, "{positives} positives: {allocs} allocations");
        assert_eq!(c[0], positives as f32);
        assert_eq!(s.output_shape(1), Some(vec![positives]));
        assert_eq!(y[..positives], x[..positives].iter().map(|v| 2.0 * v).collect::<Vec<_>>()[..]);
        assert!(y[positives..].iter().all(|&v| v == 0.0), "the rest of the buffer is zeroed");
        let (_, want_sum) = want(&x, positives);
        assert!((f64::from(sum[0]) - want_sum).abs() <= 1e-5 * want_sum.abs().max(1.0), "{} vs {want_sum}", sum[0]);
    }
}

#[test]
fn out_of_range_and_disagreeing_batches_are_errors_and_the_session_goes_on() {
    // A file whose range starts at 1 (as every file before 0 was allowed): 0 is below it.
    let old = model_from(1);
    assert_eq!(old.dims().unwrap()[0].min, 1);
    let mut s = old.session(1).unwrap();
    let mut rng = Rng::new(3);
    let none = sample(&mut rng, 0);
    let e = s.run_vec(&[Input::F32(&none)]).unwrap_err();
    assert!(e.to_string().contains("run-time dim #0 = 0"), "{e}");
    assert_eq!(s.run_vec(&[Input::F32(&sample(&mut rng, 4))]).unwrap()[1].len(), 4);
    let m = model();
    let mut s = m.session(2).unwrap();
    // Two samples with different counts, 0 against some and some against 0.
    for (a, b) in [(2, 5), (0, 3), (4, 0)] {
        let x: Vec<f32> = sample(&mut rng, a).into_iter().chain(sample(&mut rng, b)).collect();
        let e = s.run_vec(&[Input::F32(&x)]).unwrap_err();
        assert!(e.to_string().contains("differs from sample 0"), "{a} and {b}: {e}");
    }
    // And it runs on.
    let ok = sample(&mut rng, 9);
    let out = s.run_vec(&[Input::F32(&ok)]).unwrap();
    assert_eq!(out[1].len(), 9);
    // A run-time dim cannot be given a value.
    let e = m.input_shapes_at(&[("n".into(), 3)]).unwrap_err();
    assert!(e.to_string().contains("decided by the data"), "{e}");
}

#[test]
fn a_file_whose_run_time_dim_names_a_weight_or_a_wide_tensor_is_refused() {
    // The source must be an activation of one value per sample: the dims section checked at load.
    let e = kestrel_rt::builder::bounded_sweep_run_dims(&[("n", 1, N)], &[("n", "binary_2")], |at| build(at[0]))
        .unwrap_err();
    assert!(e.to_string().contains("one value per sample"), "{e}");
    let e =
        kestrel_rt::builder::bounded_sweep_run_dims(&[("n", 1, N)], &[("n", "two")], |at| build(at[0])).unwrap_err();
    assert!(e.to_string().contains("one value per sample"), "{e}");
}

/// The GPU does not take run-time dims yet (it would read results back mid-run): WGPU is
/// refused saying so, and AUTO runs the model on the CPU with that reason.
#[cfg(feature = "gpu")]
#[test]
fn the_gpu_refuses_run_time_dims_and_auto_says_why() {
    use kestrel_rt::backend::{place, Backend, Placement, Request};
    if kestrel_rt_wgpu::adapters().is_empty() {
        assert!(std::env::var("KESTREL_REQUIRE_GPU").map_or(true, |v| v != "1"), "no GPU adapter");
        eprintln!("SKIPPED: no GPU adapter");
        return;
    }
    let m = model();
    let cpu = m.cpu().unwrap();
    let r = Request { backend: Backend::Wgpu, adapter: Some("0"), ..Default::default() };
    let why = match place(&r, &cpu, 1) {
        Err(why) => why.to_string(),
        Ok(Placement::Gpu(_)) => panic!("WGPU took a model with run-time dims"),
        Ok(Placement::Cpu { .. }) => panic!("WGPU placed on the CPU"),
    };
    assert!(why.contains("sizes the data decide during a run (n"), "{why}");
    let r = Request { backend: Backend::Auto, adapter: Some("0"), ..Default::default() };
    match place(&r, &cpu, 1) {
        Ok(Placement::Cpu { fallback: Some(why) }) => {
            assert!(why.to_string().contains("sizes the data decide"), "{why}")
        }
        _ => panic!("AUTO did not fall back to the CPU with the reason"),
    }
}

/// A range from 0 is for a run-time dim only: a symbol the input shapes give starts at 1, in the
/// file (the dims section is refused) and in the builder.
#[test]
fn a_range_from_0_is_for_run_time_dims_only() {
    use kestrel_rt::format::dims::{opcode, DimsSpec, Target};
    let kes = build(N).unwrap();
    let spec = DimsSpec {
        syms: vec![("n".into(), 0, N as u32)],
        bindings: vec![(Target::InputDim { input: 0, axis: 0 }, vec![opcode::SYM, 0])],
    };
    let e = kestrel_rt::format::attach_dims(&kes, &spec).unwrap_err();
    assert!(e.to_string().contains("0 only for a run-time dim"), "{e}");
    let e = kestrel_rt::builder::bounded_sweep_run_dims(&[("n", 0, N)], &[], |at| build(at[0])).unwrap_err();
    assert!(e.to_string().contains("1 <= min"), "{e}");
}
