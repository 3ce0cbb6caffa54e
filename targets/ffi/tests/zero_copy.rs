//! Runs through the C ABI allocate nothing (issue 35, item 2): `kestrel_session_run` on CPU
//! sessions, in steady state, counted by a global allocator on every thread — with 1 and with 3
//! threads (the pool's workers counted too), with profiling on, with f32 inputs and with i32 and
//! i64 token ids — while the outputs land in the caller's own buffers and the inputs are left as
//! they were; and `kestrel_classify`/`kestrel_image_to_input` on images (item 4).
//!
//! No libtest harness (`harness = false`): the allocation counter and the thread count are
//! process-wide, and libtest's main thread allocates at moments the scheduler picks.

#[path = "support/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;

use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, KestrelSession, Status};
use kestrel_rt_reference::alloc_count::{count, Counting};
use std::ffi::CStr;
use std::path::Path;

#[global_allocator]
static GLOBAL: Counting = Counting;

const OK: Status = Status::KESTREL_OK;
const RUNS: usize = 50;

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

fn load(path: &Path) -> *mut KestrelModel {
    let path = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("path");
    let mut m = std::ptr::null_mut();
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    assert_eq!(unsafe { kestrel_model_load_path(path.as_ptr(), &mut m) }, OK, "{}", last());
    m
}

fn dims(m: *mut KestrelModel, output: bool, batch: usize) -> Vec<usize> {
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
    std::iter::once(batch).chain(t.dims[..t.rank].iter().copied()).collect()
}

/// `RUNS` runs of a fresh CPU session (after one warm-up run) on `data` (`dtype`), profiled or
/// not; the outputs of the last run and the allocations counted during the `RUNS` runs.
fn steady_state(
    m: *mut KestrelModel,
    dtype: u32,
    data: *const std::ffi::c_void,
    batch: usize,
    profiling: bool,
) -> (Vec<f32>, usize) {
    let (dims_in, dims_out) = (dims(m, false, batch), dims(m, true, batch));
    let mut y = vec![f32::NAN; dims_out.iter().product()];
    let mut s: *mut KestrelSession = std::ptr::null_mut();
    // SAFETY: valid handles and out-pointers; `data` holds `product(dims_in)` elements of `dtype`.
    unsafe {
        assert_eq!(kestrel_session_new(m, 0, batch, &mut s), OK, "{}", last());
        assert_eq!(kestrel_session_set_profiling(s, profiling), OK);
    }
    let t = KestrelTensor { dtype, data, shape: dims_in.as_ptr(), rank: dims_in.len() };
    let o = KestrelOutput { data: y.as_mut_ptr(), shape: dims_out.as_ptr(), rank: dims_out.len() };
    let mut b = 0usize;
    let bp: *mut usize = &mut b;
    // SAFETY: as above; the output buffer is `y` and `bp` is `b`, which live through every run.
    let run = || unsafe { kestrel_session_run(s, &t, 1, &o, 1, bp) };
    assert_eq!(run(), OK, "{}", last());
    let (statuses, allocs) = count(|| (0..RUNS).map(|_| run()).fold(OK, |acc, s| if s != OK { s } else { acc }));
    assert_eq!(statuses, OK, "{}", last());
    assert_eq!(b, batch);
    if profiling {
        let mut n = 0;
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { kestrel_session_profile_count(s, &mut n) }, OK);
        assert!(n > 0, "a profiled run has entries");
    }
    // SAFETY: a live session.
    assert_eq!(unsafe { kestrel_session_free(s) }, OK);
    assert!(y.iter().all(|v| v.is_finite()), "the caller's output buffer was written");
    (y, allocs)
}

fn set_threads(n: usize) {
    // SAFETY: NULL out is allowed.
    assert_eq!(unsafe { kestrel_set_threads(n, std::ptr::null_mut()) }, OK, "{}", last());
}

fn image_models() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/kestrel-cli/models");
    for name in ["fmnist_vit_super.int8.kes", "fmnist_aftconv.int8.kes"] {
        let m = load(&dir.join(name));
        let batch = 4;
        let n: usize = dims(m, false, batch).iter().product();
        let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0).collect();
        let before = x.clone();
        let mut want = None;
        for (threads, profiling) in [(1, false), (1, true), (3, false), (3, true)] {
            set_threads(threads);
            let (y, allocs) = steady_state(m, 0, x.as_ptr().cast(), batch, profiling);
            assert_eq!(
                allocs, 0,
                "{name}: {threads} threads, profiling {profiling}: {allocs} allocations in {RUNS} runs"
            );
            let want = want.get_or_insert(y.clone());
            assert!(y == *want, "{name}: outputs differ at {threads} threads");
            println!("{name}: batch {batch}, {threads} thread(s), profiling {profiling}: 0 allocations in {RUNS} runs");
        }
        assert!(x == before, "{name}: the input buffer is read, never written");
        // SAFETY: a live model.
        assert_eq!(unsafe { kestrel_model_free(m) }, OK);
    }
    set_threads(1);
}

fn token_ids() {
    let dir = std::env::temp_dir().join(format!("kestrel-rt-ffi-zero-copy-{}", std::process::id()));
    fixtures::prepare(&dir);
    let m = load(&dir.join("text.kes"));
    let bytes = std::fs::read(dir.join("text_input.bin")).expect("text input");
    let ids64: Vec<i64> = bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    let ids32: Vec<i32> = ids64.iter().map(|&v| i32::try_from(v).expect("ids fit i32")).collect();
    let batch = ids64.len() / dims(m, false, 1).iter().product::<usize>();
    let (y64, a64) = steady_state(m, 2, ids64.as_ptr().cast(), batch, false);
    let (y32, a32) = steady_state(m, 1, ids32.as_ptr().cast(), batch, false);
    assert_eq!((a64, a32), (0, 0), "token ids: {a64} (i64) and {a32} (i32) allocations in {RUNS} runs");
    assert!(y64 == y32, "i32 and i64 ids give the same outputs");
    // SAFETY: a live model.
    assert_eq!(unsafe { kestrel_model_free(m) }, OK);
    let _ = std::fs::remove_dir_all(&dir);
    println!("text model: batch {batch}, i64 and i32 ids: 0 allocations in {RUNS} runs each");
}

/// `kestrel_classify` and `kestrel_image_to_input` (issue 35, item 4) in steady state: after the
/// first call (which makes the session's and the model's buffers), `RUNS` calls on images of the
/// same size allocate nothing, on 1 and 3 threads, for an RGBA image that is resized and
/// colour-converted (40×30) and a grey one of the model's size (28×28).
fn classify_images() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/kestrel-cli/models/fmnist_vit_super.int8.kes");
    let m = load(&path);
    let numel: usize = dims(m, false, 1).iter().product();
    for threads in [1, 3] {
        set_threads(threads);
        let mut s: *mut KestrelSession = std::ptr::null_mut();
        // SAFETY: a live model and a valid out-pointer.
        assert_eq!(unsafe { kestrel_session_new(m, 0, 1, &mut s) }, OK, "{}", last());
        for (w, h, format, bpp) in [(40usize, 30usize, 0u32, 4usize), (28, 28, 3, 1)] {
            let stride = w * bpp + 3;
            let px: Vec<u8> = (0..stride * h).map(|i| (i * 7 % 256) as u8).collect();
            let mut out = [KestrelClass { index: 0, probability: 0.0, label: std::ptr::null() }; 3];
            let mut x = vec![0f32; numel];
            // SAFETY: `px` holds `h` rows of `stride` bytes, `out` 3 entries and `x` `numel` floats.
            let classify = |out: &mut [KestrelClass; 3]| unsafe {
                kestrel_classify(s, px.as_ptr(), w, h, stride, format, 3, out.as_mut_ptr())
            };
            // SAFETY: as above.
            let to_input = |x: &mut Vec<f32>| unsafe {
                kestrel_image_to_input(m, px.as_ptr(), w, h, stride, format, x.as_mut_ptr(), x.len())
            };
            assert_eq!(classify(&mut out), OK, "{}", last());
            assert_eq!(to_input(&mut x), OK, "{}", last());
            let (statuses, allocs) = count(|| {
                (0..RUNS).map(|_| classify(&mut out)).chain((0..RUNS).map(|_| to_input(&mut x))).fold(OK, |acc, s| {
                    if s != OK {
                        s
                    } else {
                        acc
                    }
                })
            });
            assert_eq!(statuses, OK, "{}", last());
            assert_eq!(allocs, 0, "{w}x{h} format {format}, {threads} threads: {allocs} allocations");
            assert!(out[0].probability >= out[1].probability && !out[0].label.is_null());
            println!("classify + image_to_input {w}x{h} (format {format}), {threads} thread(s): 0 allocations in {RUNS} + {RUNS} calls");
        }
        // SAFETY: a live session.
        assert_eq!(unsafe { kestrel_session_free(s) }, OK);
    }
    set_threads(1);
    // SAFETY: a live model.
    assert_eq!(unsafe { kestrel_model_free(m) }, OK);
}

fn main() {
    let (v, n) = count(|| std::hint::black_box(Vec::<u8>::with_capacity(64)));
    drop(v);
    assert_eq!(n, 1, "the counting allocator counts");
    image_models();
    token_ids();
    classify_images();
    println!("test zero_copy ... ok");
}
