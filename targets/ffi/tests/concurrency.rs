//! Handles freed while other threads use them, at the C ABI (issue 35): several threads run a
//! session (and read its getters) while another thread frees it, and several threads read a
//! model's metadata and open, run and free sessions on it while another thread frees the model.
//! Every call must return success or a typed status (`KESTREL_ERR_CLOSED` for a handle freed
//! under it, `KESTREL_ERR_BUSY` for a session another thread is running); the getters of
//! immutable facts (backend, device, f16, the model's metadata) never return `BUSY`; every
//! successful run's outputs equal a single-threaded reference bit for bit; nothing crashes or
//! hangs. Bounded in rounds and time (`KESTREL_STRESS_SECONDS`, default 6 s per scenario).
//!
//! Before the fix (handles were `Box` addresses, and a free did not wait for or outlive a call in
//! flight) the first scenario died with SIGSEGV inside the run within its first rounds.

use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, KestrelSession, Status};
use std::ffi::{c_char, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const CLOSED: Status = Status::KESTREL_ERR_CLOSED;
const BUSY: Status = Status::KESTREL_ERR_BUSY;
const OK: Status = Status::KESTREL_OK;

/// A handle crossing threads (the ABI's handles are plain tokens).
#[derive(Clone, Copy)]
struct H(usize);

impl H {
    fn model(self) -> *mut KestrelModel {
        self.0 as *mut KestrelModel
    }
    fn session(self) -> *mut KestrelSession {
        self.0 as *mut KestrelSession
    }
}

fn model_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/kestrel-cli/models/fmnist_vit_super.int8.kes")
}

fn load() -> *mut KestrelModel {
    let path = std::ffi::CString::new(model_path().to_str().expect("utf-8 path")).expect("path");
    let mut m = std::ptr::null_mut();
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    assert_eq!(unsafe { kestrel_model_load_path(path.as_ptr(), &mut m) }, OK, "{}", last());
    m
}

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

/// Per-sample element counts of input 0 and output 0.
fn sizes(m: *mut KestrelModel) -> (usize, usize, usize, usize) {
    let mut info = KestrelTensorInfo { name: std::ptr::null(), dtype: 0, rank: 0, dims: [0; KESTREL_MAX_RANK] };
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(kestrel_model_input_info(m, 0, &mut info), OK);
        let n_in = info.dims[..info.rank].iter().product();
        let rank_in = info.rank;
        assert_eq!(kestrel_model_output_info(m, 0, &mut info), OK);
        (n_in, rank_in, info.dims[..info.rank].iter().product(), info.rank)
    }
}

/// One batch-1 run of `s` on `x` into `y`; the status.
fn run(s: H, x: &[f32], y: &mut [f32], dims_in: &[usize], dims_out: &[usize]) -> Status {
    let t = KestrelTensor { dtype: 0, data: x.as_ptr().cast(), shape: dims_in.as_ptr(), rank: dims_in.len() };
    let o = KestrelOutput { data: y.as_mut_ptr(), shape: dims_out.as_ptr(), rank: dims_out.len() };
    // SAFETY: buffers of the model's sizes; the handle may be freed by another thread at any time,
    // which is what is tested.
    unsafe { kestrel_session_run(s.session(), &t, 1, &o, 1, std::ptr::null_mut()) }
}

/// The model's input and output dims at batch 1 (`[1, per-sample...]`).
fn dims(m: *mut KestrelModel, output: bool) -> Vec<usize> {
    let mut info = KestrelTensorInfo { name: std::ptr::null(), dtype: 0, rank: 0, dims: [0; KESTREL_MAX_RANK] };
    // SAFETY: a valid out-pointer.
    let s = unsafe {
        if output {
            kestrel_model_output_info(m, 0, &mut info)
        } else {
            kestrel_model_input_info(m, 0, &mut info)
        }
    };
    assert_eq!(s, OK);
    std::iter::once(1).chain(info.dims[..info.rank].iter().copied()).collect()
}

fn budget() -> Duration {
    let secs = std::env::var("KESTREL_STRESS_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(6.0);
    Duration::from_secs_f64(secs)
}

/// A small deterministic generator (each thread its own).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The test's input and its single-threaded outputs.
struct Reference {
    x: Vec<f32>,
    y: Vec<f32>,
    dims_in: Vec<usize>,
    dims_out: Vec<usize>,
}

fn reference(m: *mut KestrelModel) -> Reference {
    let (n_in, _, n_out, _) = sizes(m);
    let x: Vec<f32> = (0..n_in).map(|i| ((i * 37 % 101) as f32) / 101.0).collect();
    let mut y = vec![0f32; n_out];
    let (dims_in, dims_out) = (dims(m, false), dims(m, true));
    let mut s = std::ptr::null_mut();
    // SAFETY: valid handles and out-pointers.
    unsafe {
        assert_eq!(kestrel_session_new(m, 0, 1, &mut s), OK, "{}", last());
        assert_eq!(run(H(s as usize), &x, &mut y, &dims_in, &dims_out), OK, "{}", last());
        assert_eq!(kestrel_session_free(s), OK);
    }
    Reference { x, y, dims_in, dims_out }
}

/// Counts of what the threads saw.
#[derive(Default)]
struct Seen {
    ok_runs: AtomicUsize,
    closed: AtomicUsize,
    busy: AtomicUsize,
}

fn expect(status: Status, allowed: &[Status], what: &str) {
    assert!(allowed.contains(&status), "{what}: {status:?} ({}), expected one of {allowed:?}", last());
}

/// Three threads run one session (and read its getters) while a fourth frees it after a random
/// delay; the model is freed too, first or last.
#[test]
fn session_freed_while_threads_run_it() {
    const RUNNERS: usize = 3;
    const MAX_ROUNDS: usize = 400;
    let model = load();
    let r = Arc::new(reference(model));
    let seen = Arc::new(Seen::default());
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < MAX_ROUNDS && start.elapsed() < budget() {
        rounds += 1;
        let m = if rounds % 2 == 0 { load() } else { model };
        let mut s = std::ptr::null_mut();
        // SAFETY: valid handles and out-pointers.
        assert_eq!(unsafe { kestrel_session_new(m, 0, 1, &mut s) }, OK, "{}", last());
        let (s, mh) = (H(s as usize), H(m as usize));
        let go = Arc::new(Barrier::new(RUNNERS + 1));
        let mut threads = Vec::new();
        for t in 0..RUNNERS {
            let (r, seen, go) = (r.clone(), seen.clone(), go.clone());
            threads.push(std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (rounds * 31 + t) as u64);
                let mut y = vec![0f32; r.y.len()];
                go.wait();
                loop {
                    // SAFETY: valid out-pointers; the handle may be freed under the call.
                    let getter = unsafe {
                        match rng.below(4) {
                            0 => kestrel_session_backend(s.session(), &mut 0u32),
                            1 => kestrel_session_device(s.session(), &mut std::ptr::null::<c_char>()),
                            2 => kestrel_session_gpu_f16(s.session(), &mut false),
                            _ => OK,
                        }
                    };
                    expect(getter, &[OK, CLOSED], "an immutable session getter");
                    let status = run(s, &r.x, &mut y, &r.dims_in, &r.dims_out);
                    expect(status, &[OK, BUSY, CLOSED], "kestrel_session_run");
                    match status {
                        OK => {
                            assert!(y == r.y, "a run's outputs differ from the reference");
                            seen.ok_runs.fetch_add(1, Ordering::Relaxed);
                        }
                        BUSY => {
                            seen.busy.fetch_add(1, Ordering::Relaxed);
                            std::thread::yield_now();
                        }
                        _ => {
                            seen.closed.fetch_add(1, Ordering::Relaxed);
                            // Closed for good: every later call says so.
                            expect(run(s, &r.x, &mut y, &r.dims_in, &r.dims_out), &[CLOSED], "a run after close");
                            // SAFETY: as above.
                            let p = unsafe { kestrel_session_profile_count(s.session(), &mut 0) };
                            expect(p, &[CLOSED], "profile_count after close");
                            return;
                        }
                    }
                }
            }));
        }
        let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ rounds as u64);
        let delay = Duration::from_micros(rng.below(3000));
        let free_model_first = rng.below(2) == 0;
        go.wait();
        std::thread::sleep(delay);
        // SAFETY: handles from this test; freeing them while other threads use them is the test.
        unsafe {
            if free_model_first && mh.0 != model as usize {
                assert_eq!(kestrel_model_free(mh.model()), OK, "{}", last());
            }
            assert_eq!(kestrel_session_free(s.session()), OK, "{}", last());
            // A double free does nothing and says the handle is closed.
            assert_eq!(kestrel_session_free(s.session()), CLOSED);
            if !free_model_first && mh.0 != model as usize {
                assert_eq!(kestrel_model_free(mh.model()), OK, "{}", last());
            }
        }
        for t in threads {
            t.join().expect("a runner thread panicked");
        }
    }
    // SAFETY: the shared model, freed once.
    unsafe {
        assert_eq!(kestrel_model_free(model), OK);
        assert_eq!(kestrel_model_free(model), CLOSED);
    }
    let (ok, busy, closed) =
        (seen.ok_runs.load(Ordering::Relaxed), seen.busy.load(Ordering::Relaxed), seen.closed.load(Ordering::Relaxed));
    println!(
        "{rounds} rounds × {RUNNERS} runner threads + 1 freeing thread in {:.1} s: {ok} runs OK (outputs identical), \
         {busy} BUSY, {closed} CLOSED",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(closed, rounds * RUNNERS, "every runner saw its session closed");
    assert!(ok > 0, "no run succeeded");
}

/// Three threads read a model's metadata and open, run and free their own sessions on it while a
/// fourth frees the model after a random delay: metadata calls return OK or CLOSED, sessions
/// opened before the free keep running after it.
#[test]
fn model_freed_while_threads_read_it_and_open_sessions() {
    const USERS: usize = 3;
    const MAX_ROUNDS: usize = 400;
    let first = load();
    let r = Arc::new(reference(first));
    // SAFETY: a live model, freed once.
    unsafe { assert_eq!(kestrel_model_free(first), OK) };
    let sessions_after_free = Arc::new(AtomicUsize::new(0));
    let closed_seen = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < MAX_ROUNDS && start.elapsed() < budget() {
        rounds += 1;
        let m = H(load() as usize);
        let go = Arc::new(Barrier::new(USERS + 1));
        let freed = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for t in 0..USERS {
            let (r, go, freed, after, closed_seen) =
                (r.clone(), go.clone(), freed.clone(), sessions_after_free.clone(), closed_seen.clone());
            threads.push(std::thread::spawn(move || {
                let mut rng = Rng(0xA076_1D64_78BD_642F ^ (rounds * 17 + t) as u64);
                let mut y = vec![0f32; r.y.len()];
                let mut mine: Vec<H> = Vec::new();
                go.wait();
                loop {
                    // SAFETY: valid out-pointers; the model may be freed under any call.
                    let status = unsafe {
                        let mut info = KestrelTensorInfo {
                            name: std::ptr::null(),
                            dtype: 0,
                            rank: 0,
                            dims: [0; KESTREL_MAX_RANK],
                        };
                        let mut p: *const c_char = std::ptr::null();
                        let mut n = 0usize;
                        match rng.below(8) {
                            0 => kestrel_model_name(m.model(), &mut p),
                            1 => kestrel_model_task(m.model(), &mut p),
                            2 => kestrel_model_label_count(m.model(), &mut n),
                            3 => kestrel_model_label(m.model(), 0, &mut p),
                            4 => kestrel_model_input_info(m.model(), 0, &mut info),
                            5 => kestrel_model_output_info(m.model(), 0, &mut info),
                            6 => kestrel_model_arena_bytes(m.model(), 2, &mut n),
                            _ => {
                                let mut s = std::ptr::null_mut();
                                let st = kestrel_session_new(m.model(), 0, 1, &mut s);
                                if st == OK {
                                    mine.push(H(s as usize));
                                }
                                st
                            }
                        }
                    };
                    expect(status, &[OK, CLOSED], "a model call");
                    if status == CLOSED {
                        assert!(freed.load(Ordering::Acquire), "CLOSED before the model was freed");
                        closed_seen.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    if let Some(&s) = mine.last() {
                        assert_eq!(run(s, &r.x, &mut y, &r.dims_in, &r.dims_out), OK, "{}", last());
                        assert!(y == r.y, "a run's outputs differ from the reference");
                    }
                    if mine.len() > 2 {
                        // SAFETY: this thread's own session.
                        assert_eq!(unsafe { kestrel_session_free(mine.remove(0).session()) }, OK);
                    }
                }
                // The model is freed: this thread's sessions still run, then are freed.
                for s in mine {
                    assert_eq!(run(s, &r.x, &mut y, &r.dims_in, &r.dims_out), OK, "{}", last());
                    assert!(y == r.y, "a run after the model's free differs from the reference");
                    after.fetch_add(1, Ordering::Relaxed);
                    // SAFETY: this thread's own session.
                    assert_eq!(unsafe { kestrel_session_free(s.session()) }, OK);
                }
            }));
        }
        let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ rounds as u64);
        go.wait();
        std::thread::sleep(Duration::from_micros(rng.below(2000)));
        freed.store(true, Ordering::Release);
        // SAFETY: the round's model, freed while the users use it (the test).
        unsafe {
            assert_eq!(kestrel_model_free(m.model()), OK, "{}", last());
            assert_eq!(kestrel_model_free(m.model()), CLOSED);
        }
        for t in threads {
            t.join().expect("a user thread panicked");
        }
    }
    let closed = closed_seen.load(Ordering::Relaxed);
    println!(
        "{rounds} rounds × {USERS} user threads + 1 freeing thread in {:.1} s: {closed} calls saw CLOSED, {} sessions \
         ran after their model was freed",
        start.elapsed().as_secs_f64(),
        sessions_after_free.load(Ordering::Relaxed)
    );
    assert_eq!(closed, rounds * USERS, "every user saw the model closed");
}

/// Handles are never reused: a freed handle stays CLOSED while new handles are made, and a handle
/// of one kind is never taken for the other.
#[test]
fn freed_handles_stay_closed() {
    let m = load();
    let mut s = std::ptr::null_mut();
    // SAFETY: valid handles and out-pointers.
    unsafe {
        assert_eq!(kestrel_session_new(m, 0, 1, &mut s), OK);
        assert_eq!(kestrel_session_free(s), OK);
        for _ in 0..50 {
            let m2 = load();
            let mut s2 = std::ptr::null_mut();
            assert_eq!(kestrel_session_new(m2, 0, 1, &mut s2), OK);
            assert_ne!(s2, s, "a freed session handle was reused");
            assert_eq!(kestrel_session_backend(s, &mut 0), CLOSED);
            assert_eq!(kestrel_session_backend(s2, &mut 0), OK);
            assert_eq!(kestrel_model_op_count(s2.cast(), &mut 0), Status::KESTREL_ERR_INVALID_HANDLE);
            assert_eq!(kestrel_session_free(s2), OK);
            assert_eq!(kestrel_model_free(m2), OK);
            assert_eq!(kestrel_model_op_count(m2, &mut 0), CLOSED);
        }
        assert_eq!(kestrel_model_free(m), OK);
        assert_eq!(kestrel_session_free(s), CLOSED);
        assert_eq!(kestrel_model_free(m), CLOSED);
    }
}
