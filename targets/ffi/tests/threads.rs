//! The thread count at the C ABI (issue 35, item 2): `kestrel_set_threads`, `kestrel_threads`,
//! `kestrel_default_threads`. Every bundled model (Super attention and AFT-conv ViTs) at batch 8,
//! run through `kestrel_session_run` with 1, 2, 3 and 4 threads, must give the one-thread outputs
//! bit for bit — sessions made after the change (one scratch copy per thread, mechanism ops over
//! samples in parallel) and a session made before it (dense layers split, mechanism ops on its one
//! copy). Bad arguments give their statuses and change nothing.
//!
//! No libtest harness (`harness = false`): the count is process-wide, so the checks run in order
//! on one thread.

use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, KestrelSession, Status};
use std::ffi::CStr;
use std::path::Path;

const OK: Status = Status::KESTREL_OK;
const BATCH: usize = 8;

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

fn threads_now() -> usize {
    let mut n = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { kestrel_threads(&mut n) }, OK, "{}", last());
    n
}

fn set(n: usize) -> usize {
    let mut now = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { kestrel_set_threads(n, &mut now) }, OK, "{}", last());
    assert_eq!(now, threads_now());
    now
}

fn load(name: &str) -> *mut KestrelModel {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/kestrel-cli/models").join(name);
    let path = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("path");
    let mut m = std::ptr::null_mut();
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    assert_eq!(unsafe { kestrel_model_load_path(path.as_ptr(), &mut m) }, OK, "{}", last());
    m
}

fn info(m: *mut KestrelModel, output: bool) -> Vec<usize> {
    let mut t = KestrelTensorInfo { name: std::ptr::null(), dtype: 0, rank: 0, dims: [0; KESTREL_MAX_RANK] };
    // SAFETY: a valid out-pointer.
    let s = unsafe {
        if output {
            kestrel_model_output_info(m, 0, &mut t)
        } else {
            kestrel_model_input_info(m, 0, &mut t)
        }
    };
    assert_eq!(s, OK, "{}", last());
    std::iter::once(BATCH).chain(t.dims[..t.rank].iter().copied()).collect()
}

fn session(m: *mut KestrelModel) -> *mut KestrelSession {
    let mut s = std::ptr::null_mut();
    // SAFETY: a valid handle and out-pointer.
    assert_eq!(unsafe { kestrel_session_new(m, 0, BATCH, &mut s) }, OK, "{}", last());
    s
}

/// One batch-8 run of `s`; the outputs.
fn run(s: *mut KestrelSession, x: &[f32], dims_in: &[usize], dims_out: &[usize]) -> Vec<f32> {
    let mut y = vec![0f32; dims_out.iter().product()];
    let t = KestrelTensor { dtype: 0, data: x.as_ptr().cast(), shape: dims_in.as_ptr(), rank: dims_in.len() };
    let o = KestrelOutput { data: y.as_mut_ptr(), shape: dims_out.as_ptr(), rank: dims_out.len() };
    let mut batch = 0;
    // SAFETY: buffers of the shapes given.
    assert_eq!(unsafe { kestrel_session_run(s, &t, 1, &o, 1, &mut batch) }, OK, "{}", last());
    assert_eq!(batch, BATCH);
    y
}

fn arena(m: *mut KestrelModel) -> usize {
    let mut n = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { kestrel_model_arena_bytes(m, BATCH, &mut n) }, OK, "{}", last());
    n
}

fn bad_arguments() {
    assert_eq!(threads_now(), 1, "the C ABI starts with one thread and starts none by itself");
    let mut d = 0;
    // SAFETY: valid or deliberately NULL/misaligned out-pointers (never written then).
    unsafe {
        assert_eq!(kestrel_default_threads(&mut d), OK);
        assert!((1..=4).contains(&d), "default {d}");
        assert_eq!(kestrel_threads(std::ptr::null_mut()), Status::KESTREL_ERR_NULL_POINTER);
        assert_eq!(kestrel_default_threads(std::ptr::null_mut()), Status::KESTREL_ERR_NULL_POINTER);
        let mut words = [0usize; 2];
        let odd = words.as_mut_ptr().cast::<u8>().add(1).cast::<usize>();
        assert_eq!(kestrel_threads(odd), Status::KESTREL_ERR_MISALIGNED);
        assert_eq!(kestrel_set_threads(2, odd), Status::KESTREL_ERR_MISALIGNED);
        assert_eq!(words, [0, 0], "nothing written through a misaligned pointer");
        assert_eq!(kestrel_set_threads(257, &mut d), Status::KESTREL_ERR_INVALID_ARGUMENT);
        assert!(last().contains("257") && last().contains("1..=256"), "{}", last());
        assert_eq!(kestrel_set_threads(usize::MAX, std::ptr::null_mut()), Status::KESTREL_ERR_INVALID_ARGUMENT);
    }
    assert_eq!(threads_now(), 1, "a refused count changes nothing");
    // NULL `out` is allowed for the setter.
    // SAFETY: NULL out.
    assert_eq!(unsafe { kestrel_set_threads(1, std::ptr::null_mut()) }, OK);
    println!("bad arguments: statuses as documented (default here: {d} threads)");
}

fn results_do_not_depend_on_the_count() {
    for name in ["fmnist_vit_super.int8.kes", "fmnist_aftconv.int8.kes", "digits_vit_super.int8.kes"] {
        set(1);
        let m = load(name);
        let (dims_in, dims_out) = (info(m, false), info(m, true));
        let x: Vec<f32> = (0..dims_in.iter().product()).map(|i: usize| ((i * 37 % 101) as f32) / 50.0 - 1.0).collect();
        let early = session(m);
        let arena1 = arena(m);
        let want = run(early, &x, &dims_in, &dims_out);
        assert!(want.iter().all(|v| v.is_finite()) && want.iter().any(|&v| v != 0.0), "{name}: outputs {want:?}");
        for n in [2, 3, 4, 1] {
            assert_eq!(set(n), n);
            let s = session(m);
            let got = run(s, &x, &dims_in, &dims_out);
            assert!(got == want, "{name}: {n} threads, a new session: outputs differ from one thread's");
            let again = run(early, &x, &dims_in, &dims_out);
            assert!(again == want, "{name}: {n} threads, the session made at one thread: outputs differ");
            // One scratch copy per thread (when the model has a scratch region at all).
            let a = arena(m);
            assert!(if n == 1 { a == arena1 } else { a >= arena1 }, "{name}: arena {a} at {n} threads, {arena1} at 1");
            // SAFETY: a live session.
            assert_eq!(unsafe { kestrel_session_free(s) }, OK);
        }
        // SAFETY: live handles.
        unsafe {
            assert_eq!(kestrel_session_free(early), OK);
            assert_eq!(kestrel_model_free(m), OK);
        }
        println!("{name}: batch {BATCH}, 1/2/3/4 threads: outputs bit-identical");
    }
}

fn zero_is_the_default() {
    let mut d = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { kestrel_default_threads(&mut d) }, OK);
    assert_eq!(set(0), d);
    set(1);
    println!("0 asks for the default ({d})");
}

fn main() {
    bad_arguments();
    results_do_not_depend_on_the_count();
    zero_is_the_default();
    println!("test threads ... ok");
}
