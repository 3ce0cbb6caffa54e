//! `run` performs zero heap allocations: proved with a counting global allocator.

use kestrel_rt::demo::{image_model, text_model, Rng};
use kestrel_rt::format::DType;
use kestrel_rt::{Input, Model};
use kestrel_rt_reference::alloc_count::count_this_thread as count;

// Counted per thread by main.rs's global allocator: the harness runs tests on parallel threads,
// and only the thread inside `count_this_thread` is measured.

#[test]
fn counter_sees_allocations() {
    let (v, n) = count(|| vec![1u8; 10]);
    assert_eq!(v.len(), 10);
    assert!(n >= 1, "the counting allocator is not in effect");
}

#[test]
fn run_allocates_nothing_for_every_mechanism_and_encoding() {
    for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
        let model = Model::from_bytes(&image_model(1, dtype).unwrap()).unwrap();
        let mut sess = model.session(3).unwrap();
        let x = Rng::new(2).vec(3 * 256, 1.0);
        let mut out = vec![0f32; 30];
        let mut one = vec![0f32; 10];
        // Parsing, session creation and the runs are all inside the counted region except the
        // owned arena, which was allocated by `session` above.
        let (r, n) = count(|| {
            sess.run(&[Input::F32(&x)], &mut [&mut out])?;
            sess.run(&[Input::F32(&x[..256])], &mut [&mut one])
        });
        r.unwrap();
        assert_eq!(n, 0, "{dtype:?}: run allocated {n} times");
        assert!(out.iter().any(|&v| v != 0.0));
    }
}

#[test]
fn run_allocates_nothing_with_token_ids() {
    let model = Model::from_bytes(&text_model(1, DType::F32).unwrap()).unwrap();
    let mut sess = model.session(1).unwrap();
    let ids: Vec<i64> = (0..24).collect();
    let mut out = vec![0f32; 2];
    let (r, n) = count(|| sess.run(&[Input::I64(&ids)], &mut [&mut out]));
    r.unwrap();
    assert_eq!(n, 0, "run allocated {n} times");
}

#[test]
fn the_no_std_core_runs_over_a_stack_arena_without_allocating() {
    let bytes = kestrel_rt::format::aligned_copy(&image_model(1, DType::I8).unwrap());
    let ((), n) = count(|| {
        let model = kestrel_rt_cpu::Model::parse(&bytes).unwrap();
        let mut arena = [0u8; 128 * 1024];
        assert!(model.arena_bytes(1).unwrap() <= arena.len());
        let mut s = kestrel_rt_cpu::Session::new(&model, &mut arena, 1).unwrap();
        let x = [0.25f32; 256];
        let mut out = [0f32; 10];
        s.run(&[Input::F32(&x)], &mut [&mut out]).unwrap();
        assert!((out.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    });
    assert_eq!(n, 0, "parse + session + run allocated {n} times");
}
