//! Bounded dims (format 2.0, issue 34) through the C functions: `kestrel_model_dim_count` /
//! `kestrel_model_dim_info`, `kestrel_session_set_input_shapes`, and the session's current
//! shapes (`kestrel_session_input_info` / `kestrel_session_output_info`). The committed fixture
//! (`tests/data/bounded_dims.kes`, `sequence` in 2..=16; regenerate with
//! `KESTREL_BLESS_FIXTURES=1 cargo test -p kestrel-rt-ffi --test suite bounded_dims::`) runs at many
//! lengths, each equal to the graph built at that length; two sessions of one model run
//! different lengths at once on two threads; setting shapes and running allocate nothing; every
//! bad argument is a typed status with a message naming the input, the dim and its range, and
//! leaves the session at the bound, running.

use crate::bounded;
#[cfg(feature = "wgpu")]
use crate::gpu;

use bounded::{D, SYM, TMAX, TMIN};
use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, KestrelSession, Status};
use kestrel_rt_reference::alloc_count::count_this_thread as count;
use std::ffi::CStr;
use std::path::Path;

const OK: Status = Status::KESTREL_OK;

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

fn data_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data"))
}

#[test]
fn committed_fixtures_are_current() {
    for (name, bytes) in bounded::files() {
        let path = data_dir().join(&name);
        if std::env::var_os("KESTREL_BLESS_FIXTURES").is_some() {
            std::fs::write(&path, &bytes).expect("writing a fixture");
            continue;
        }
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == bytes,
            "targets/ffi/tests/data/{name} is stale: regenerate it with \
             `KESTREL_BLESS_FIXTURES=1 cargo test -p kestrel-rt-ffi --test suite bounded_dims::` and commit it"
        );
        assert!(bytes.len() < 100_000, "{name}: {} bytes", bytes.len());
    }
}

/// Sends handles to another thread (the ABI allows it; raw pointers are not `Send`).
struct Handle<T>(*mut T);
impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Handle<T> {}
// SAFETY: handles are registry tokens, usable from any thread.
unsafe impl<T> Send for Handle<T> {}

fn load(bytes: &[u8]) -> *mut KestrelModel {
    let mut m = std::ptr::null_mut();
    // SAFETY: valid buffer and out-pointer.
    assert_eq!(unsafe { kestrel_model_load_memory(bytes.as_ptr(), bytes.len(), &mut m) }, OK, "{}", last());
    m
}

fn session(m: *mut KestrelModel, capacity: usize) -> *mut KestrelSession {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid handle and out-pointer.
    assert_eq!(unsafe { kestrel_session_new(m, 0, capacity, &mut s) }, OK, "{}", last());
    s
}

fn free(m: *mut KestrelModel, s: *mut KestrelSession) {
    // SAFETY: live handles.
    unsafe {
        assert_eq!(kestrel_session_free(s), OK);
        assert_eq!(kestrel_model_free(m), OK);
    }
}

fn empty_info() -> KestrelTensorInfo {
    KestrelTensorInfo { name: std::ptr::null(), dtype: 9, rank: 0, dims: [0; KESTREL_MAX_RANK] }
}

/// The session's current per-sample shape of input (`output` false) or output `i`.
fn shape(s: *mut KestrelSession, output: bool, i: usize) -> Vec<usize> {
    let mut t = empty_info();
    // SAFETY: a valid out-pointer.
    let st = unsafe {
        if output {
            kestrel_session_output_info(s, i, &mut t)
        } else {
            kestrel_session_input_info(s, i, &mut t)
        }
    };
    assert_eq!(st, OK, "{}", last());
    t.dims[..t.rank].to_vec()
}

fn set(s: *mut KestrelSession, shapes: &[&[usize]]) -> Status {
    let ranks: Vec<usize> = shapes.iter().map(|s| s.len()).collect();
    let dims: Vec<usize> = shapes.concat();
    // SAFETY: arrays of the lengths given.
    unsafe { kestrel_session_set_input_shapes(s, dims.as_ptr(), ranks.as_ptr(), ranks.len()) }
}

/// Runs batch `batch` of `x` at the session's current shapes into `outs` (sized by the caller).
fn run_into(s: *mut KestrelSession, batch: usize, x: &[f32], outs: &mut [Vec<f32>]) -> Status {
    let per = shape(s, false, 0);
    let in_shape: Vec<usize> = std::iter::once(batch).chain(per).collect();
    let out_shapes: Vec<Vec<usize>> =
        (0..outs.len()).map(|i| std::iter::once(batch).chain(shape(s, true, i)).collect()).collect();
    let t = KestrelTensor { dtype: 0, data: x.as_ptr().cast(), shape: in_shape.as_ptr(), rank: in_shape.len() };
    let o: Vec<KestrelOutput> = outs
        .iter_mut()
        .zip(&out_shapes)
        .map(|(y, sh)| KestrelOutput { data: y.as_mut_ptr(), shape: sh.as_ptr(), rank: sh.len() })
        .collect();
    // SAFETY: buffers of the shapes given (the caller sized them).
    unsafe { kestrel_session_run(s, &t, 1, o.as_ptr(), o.len(), std::ptr::null_mut()) }
}

/// Outputs sized for batch `batch` at the session's current shapes, run.
fn run(s: *mut KestrelSession, batch: usize, x: &[f32]) -> Vec<Vec<f32>> {
    let mut outs: Vec<Vec<f32>> =
        (0..2).map(|i| vec![f32::NAN; batch * shape(s, true, i).iter().product::<usize>()]).collect();
    assert_eq!(run_into(s, batch, x, &mut outs), OK, "{}", last());
    outs
}

fn input(batch: usize, t: usize, seed: usize) -> Vec<f32> {
    (0..batch * t * D).map(|i| (((i * 37 + seed * 11) % 101) as f32) / 50.0 - 1.0).collect()
}

/// The graph built at length `t`, run on `x` at batch `batch`.
fn reference(t: usize, batch: usize, x: &[f32]) -> Vec<Vec<f32>> {
    let bytes = bounded::build(t);
    let m = load(&bytes);
    let s = session(m, batch);
    let y = run(s, batch, x);
    free(m, s);
    y
}

fn close(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
    for (o, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: output {o}");
        let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-6, "{what}: output {o}: max |diff| {worst}");
    }
}

#[test]
fn the_model_names_its_dims() {
    let bytes = bounded::bounded();
    let m = load(&bytes);
    let mut n = 99;
    let mut d = KestrelDimInfo { name: std::ptr::null(), min: 0, max: 0 };
    // SAFETY: valid handles and out-pointers (and a NULL one, refused).
    unsafe {
        assert_eq!(kestrel_model_dim_count(m, &mut n), OK);
        assert_eq!(n, 1);
        assert_eq!(kestrel_model_dim_info(m, 0, &mut d), OK);
        assert_eq!(CStr::from_ptr(d.name).to_str().unwrap(), SYM);
        assert_eq!((d.min, d.max), (TMIN, TMAX));
        assert_eq!(kestrel_model_dim_info(m, 1, &mut d), Status::KESTREL_ERR_INDEX);
        assert!(last().contains("dim 1 does not exist"), "{}", last());
        assert_eq!(kestrel_model_dim_info(m, 0, std::ptr::null_mut()), Status::KESTREL_ERR_NULL_POINTER);
        assert_eq!(kestrel_model_dim_count(std::ptr::null(), &mut n), Status::KESTREL_ERR_NULL_POINTER);
        // The model's input info is the bound.
        let mut t = empty_info();
        assert_eq!(kestrel_model_input_info(m, 0, &mut t), OK);
        assert_eq!(&t.dims[..t.rank], &[TMAX, D]);
        assert_eq!(kestrel_model_free(m), OK);
        assert_eq!(kestrel_model_dim_count(m, &mut n), Status::KESTREL_ERR_CLOSED);
    }
    // A model of fixed sizes has none.
    let bytes = bounded::build(5);
    let m = load(&bytes);
    // SAFETY: as above.
    unsafe {
        assert_eq!(kestrel_model_dim_count(m, &mut n), OK);
        assert_eq!(n, 0);
        assert_eq!(kestrel_model_dim_info(m, 0, &mut d), Status::KESTREL_ERR_INDEX);
        assert_eq!(kestrel_model_free(m), OK);
    }
}

#[test]
fn every_length_runs_as_the_graph_built_at_it() {
    let bytes = bounded::bounded();
    let m = load(&bytes);
    let s = session(m, 3);
    assert_eq!(shape(s, false, 0), [TMAX, D], "at the bound until set");
    assert_eq!(shape(s, true, 0), [2, TMAX - 1, D / 2]);
    for (k, t) in [2, 3, 5, 9, 12, TMAX - 1, TMAX, 7, 2].into_iter().enumerate() {
        assert_eq!(set(s, &[&[t, D]]), OK, "T = {t}: {}", last());
        assert_eq!(shape(s, false, 0), [t, D]);
        assert_eq!(shape(s, true, 0), [2, t - 1, D / 2]);
        assert_eq!(shape(s, true, 1), [2, D / 2]);
        for batch in [1, 3] {
            let x = input(batch, t, k);
            close(&run(s, batch, &x), &reference(t, batch, &x), &format!("T = {t}, batch {batch}"));
        }
    }
    free(m, s);
}

#[test]
fn sessions_of_one_model_run_different_lengths_at_once() {
    let bytes = bounded::bounded();
    let m = Handle(load(&bytes));
    let want: Vec<(usize, Vec<f32>, Vec<Vec<f32>>)> = [3usize, 11]
        .iter()
        .map(|&t| {
            let x = input(2, t, t);
            let y = reference(t, 2, &x);
            (t, x, y)
        })
        .collect();
    std::thread::scope(|scope| {
        for (t, x, y) in &want {
            scope.spawn(move || {
                let m = m;
                let s = session(m.0, 2);
                assert_eq!(set(s, &[&[*t, D]]), OK, "{}", last());
                for i in 0..40 {
                    close(&run(s, 2, x), y, &format!("T = {t}, run {i}"));
                    assert_eq!(shape(s, false, 0), [*t, D], "another session's sizes leaked in");
                }
                // SAFETY: a live session.
                assert_eq!(unsafe { kestrel_session_free(s) }, OK);
            });
        }
    });
    // SAFETY: a live model.
    assert_eq!(unsafe { kestrel_model_free(m.0) }, OK);
}

#[test]
fn setting_shapes_and_running_allocate_nothing() {
    let bytes = bounded::bounded();
    let m = load(&bytes);
    let s = session(m, 2);
    let x = input(2, TMAX, 1);
    let mut outs = [vec![0f32; 2 * 2 * (TMAX - 1) * (D / 2)], vec![0f32; 2 * 2 * (D / 2)]];
    for t in [TMAX, 6, 13, 2] {
        let (ranks, dims) = ([2usize], [t, D]);
        let (ins, outs_shape) = ([2, t, D], [[2, 2, t - 1, D / 2], [2, 2, D / 2, 0]]);
        let ti = KestrelTensor { dtype: 0, data: x.as_ptr().cast(), shape: ins.as_ptr(), rank: 3 };
        let (a, b) = outs.split_at_mut(1);
        let o = [
            KestrelOutput { data: a[0].as_mut_ptr(), shape: outs_shape[0].as_ptr(), rank: 4 },
            KestrelOutput { data: b[0].as_mut_ptr(), shape: outs_shape[1].as_ptr(), rank: 3 },
        ];
        let (st, n) = count(|| {
            // SAFETY: arrays of the lengths given; buffers at least the shapes' sizes.
            unsafe {
                let st = kestrel_session_set_input_shapes(s, dims.as_ptr(), ranks.as_ptr(), 1);
                if st != OK {
                    return st;
                }
                kestrel_session_run(s, &ti, 1, o.as_ptr(), 2, std::ptr::null_mut())
            }
        });
        assert_eq!(st, OK, "T = {t}: {}", last());
        assert_eq!(n, 0, "T = {t}: {n} allocations");
    }
    free(m, s);
}

#[test]
fn bad_shapes_are_typed_errors_and_the_session_goes_on() {
    let bytes = bounded::bounded();
    let m = load(&bytes);
    let s = session(m, 1);
    let shape_err = |st: Status, want: &[&str]| {
        assert_eq!(st, Status::KESTREL_ERR_SHAPE, "{}", last());
        let msg = last();
        for w in want {
            assert!(msg.contains(w), "{msg:?} lacks {w:?}");
        }
        assert_eq!(shape(s, false, 0), [TMAX, D], "back at the bound after: {msg}");
    };
    assert_eq!(set(s, &[&[5, D]]), OK);
    shape_err(set(s, &[&[TMAX + 1, D]]), &["input 0 (x)", "`sequence` = 17", "2..=16"]);
    assert_eq!(set(s, &[&[5, D]]), OK);
    shape_err(set(s, &[&[1, D]]), &["outside its range"]);
    shape_err(set(s, &[&[5, D + 1]]), &["axis 1", "fixed"]);
    shape_err(set(s, &[&[5]]), &["rank 2"]);
    shape_err(set(s, &[]), &["expected 1"]);
    shape_err(set(s, &[&[5, D], &[5, D]]), &["expected 1"]);
    // SAFETY: each call's arrays are valid for what it claims, or NULL / misaligned on purpose.
    unsafe {
        let (dims, ranks) = ([5usize, D], [2usize]);
        shape_err(
            kestrel_session_set_input_shapes(s, dims.as_ptr(), [9usize].as_ptr(), 1),
            &["above KESTREL_MAX_RANK"],
        );
        let st = kestrel_session_set_input_shapes(s, dims.as_ptr(), std::ptr::null(), 1);
        assert_eq!(st, Status::KESTREL_ERR_NULL_POINTER, "{}", last());
        let st = kestrel_session_set_input_shapes(s, std::ptr::null(), ranks.as_ptr(), 1);
        assert_eq!(st, Status::KESTREL_ERR_NULL_POINTER, "{}", last());
        let words = [0usize; 4];
        let odd = words.as_ptr().cast::<u8>().add(1).cast::<usize>();
        assert_eq!(kestrel_session_set_input_shapes(s, odd, ranks.as_ptr(), 1), Status::KESTREL_ERR_MISALIGNED);
        assert_eq!(kestrel_session_set_input_shapes(s, dims.as_ptr(), odd, 1), Status::KESTREL_ERR_MISALIGNED);
        let st = kestrel_session_set_input_shapes(std::ptr::null_mut(), dims.as_ptr(), ranks.as_ptr(), 1);
        assert_eq!(st, Status::KESTREL_ERR_NULL_POINTER);
        let mut t = empty_info();
        assert_eq!(kestrel_session_input_info(s, 1, &mut t), Status::KESTREL_ERR_INDEX);
        assert_eq!(kestrel_session_output_info(s, 2, &mut t), Status::KESTREL_ERR_INDEX);
        assert_eq!(kestrel_session_output_info(s, 0, std::ptr::null_mut()), Status::KESTREL_ERR_NULL_POINTER);
    }
    // A run at other shapes than the session's is a shape error that says how to set them.
    assert_eq!(set(s, &[&[6, D]]), OK);
    let x = input(1, 7, 0);
    let mut outs = [vec![0f32; 2 * 6 * (D / 2)], vec![0f32; 2 * (D / 2)]];
    let (xs, ys) = ([1usize, 7, D], [[1usize, 2, 6, D / 2], [1, 2, D / 2, 0]]);
    let t = KestrelTensor { dtype: 0, data: x.as_ptr().cast(), shape: xs.as_ptr(), rank: 3 };
    let (a, b) = outs.split_at_mut(1);
    let o = [
        KestrelOutput { data: a[0].as_mut_ptr(), shape: ys[0].as_ptr(), rank: 4 },
        KestrelOutput { data: b[0].as_mut_ptr(), shape: ys[1].as_ptr(), rank: 3 },
    ];
    // SAFETY: buffers of the shapes given.
    let st = unsafe { kestrel_session_run(s, &t, 1, o.as_ptr(), 2, std::ptr::null_mut()) };
    assert_eq!(st, Status::KESTREL_ERR_SHAPE);
    assert!(
        last().contains("[batch 1..=1, 6, 8]") && last().contains("kestrel_session_set_input_shapes"),
        "{}",
        last()
    );
    // And it still runs.
    let x = input(1, 6, 0);
    close(&run(s, 1, &x), &reference(6, 1, &x), "T = 6 after the errors");
    free(m, s);
}

#[test]
fn a_model_of_fixed_sizes_takes_only_its_own_shapes() {
    let bytes = bounded::build(5);
    let m = load(&bytes);
    let s = session(m, 1);
    assert_eq!(set(s, &[&[5, D]]), OK, "{}", last());
    assert_eq!(set(s, &[&[4, D]]), Status::KESTREL_ERR_SHAPE);
    assert!(last().contains("axis 0") && last().contains("fixed"), "{}", last());
    assert_eq!(set(s, &[&[5, D, 1]]), Status::KESTREL_ERR_SHAPE);
    assert_eq!(shape(s, false, 0), [5, D]);
    let x = input(1, 5, 0);
    close(&run(s, 1, &x), &reference(5, 1, &x), "fixed");
    free(m, s);
}

/// A GPU session (wgpu, lavapipe in CI) is lowered again at each length and matches the graph
/// built at it; bad shapes are the same typed errors and leave it at the bound. Skipped without
/// an adapter unless `KESTREL_REQUIRE_GPU=1`.
#[test]
#[cfg(feature = "wgpu")]
fn gpu_sessions_run_every_length_too() {
    let bytes = bounded::bounded();
    let m = load(&bytes);
    let Some(s) = gpu::session_or_skip(m, 2) else { return };
    for (k, t) in [5, 2, TMAX, 12, 5].into_iter().enumerate() {
        assert_eq!(set(s, &[&[t, D]]), OK, "T = {t}: {}", last());
        assert_eq!(shape(s, false, 0), [t, D]);
        assert_eq!(shape(s, true, 0), [2, t - 1, D / 2]);
        let x = input(2, t, k);
        let (got, want) = (run(s, 2, &x), reference(t, 2, &x));
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.len(), w.len(), "T = {t}: output {o}");
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0f32, f32::max);
            assert!(worst <= 1e-4, "GPU, T = {t}, output {o}: max rel err {worst}");
        }
    }
    assert_eq!(set(s, &[&[TMAX + 1, D]]), Status::KESTREL_ERR_SHAPE);
    assert!(last().contains("`sequence` = 17") && last().contains("2..=16"), "{}", last());
    assert_eq!(shape(s, false, 0), [TMAX, D], "back at the bound");
    let x = input(1, TMAX, 9);
    let (got, want) = (run(s, 1, &x), reference(TMAX, 1, &x));
    assert_eq!(got[1].len(), want[1].len());
    free(m, s);
}
