//! Optional worker threads (`std` feature): one process-wide pool, created by
//! [`set_threads`] and never per run, that splits the large dense layers, convolutions (by
//! output channels) and mechanism ops of a run across cores. A parallel section ([`for_each`]) allocates nothing: the job is a borrowed closure
//! published through the pool's shared state, tasks are claimed with an atomic counter, and the
//! caller works on tasks itself and returns only when every worker has left the job.
//!
//! With one thread (the default) or without the `std` feature every kernel runs inline on the
//! caller's thread, exactly as before. Results do not depend on the thread count: tasks split a
//! kernel's rows or output columns, and each output element is computed by the same code in the
//! same order whichever thread runs it.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::cell::Cell;
use std::format;
use std::string::{String, ToString};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Most threads a pool may have (a guard against nonsense values, not a tuning knob).
pub const MAX_THREADS: usize = 256;

/// How long an idle worker spins (yielding) for the next job before it sleeps on the condvar:
/// the ops of one run follow each other within microseconds, a futex wake-up costs more.
const SPIN: Duration = Duration::from_micros(200);

/// A bad thread count or a pool that cannot grow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThreadError {
    /// The count is 0 or above [`MAX_THREADS`].
    Count {
        /// The count asked for.
        found: usize,
    },
    /// The operating system refused to start a worker.
    Spawn {
        /// The OS error, as text.
        detail: String,
    },
}

impl core::fmt::Display for ThreadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ThreadError::Count { found } => {
                write!(f, "thread count: expected 1..={MAX_THREADS}, found {found}")
            }
            ThreadError::Spawn { detail } => write!(f, "starting a worker thread: {detail}"),
        }
    }
}

impl std::error::Error for ThreadError {}

/// A published job: a borrowed `Fn(task)` whose lifetime the publisher guarantees (it waits for
/// every worker to leave before the borrow ends).
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    tasks: usize,
}

// SAFETY: the closure is `Sync`, so calling it from several threads through a shared pointer is
// sound; the pointer is only dereferenced while the publisher keeps the closure alive.
unsafe impl Send for Job {}

struct Pool {
    /// Workers spawned (the pool only grows).
    workers: AtomicUsize,
    /// Workers running their loop (set_threads waits for them: start-up allocations belong to
    /// set_threads, never to a run).
    started: AtomicUsize,
    /// Threads a parallel section uses (caller included), ≤ workers + 1.
    active: AtomicUsize,
    /// Bumped for every job; workers compare it with the last one they saw.
    generation: AtomicU64,
    /// Next task index to claim.
    next: AtomicUsize,
    /// Workers that joined the current job and have not left it.
    inside: AtomicUsize,
    /// A task panicked in a worker (re-raised by the caller).
    panicked: AtomicBool,
    job: Mutex<Option<Job>>,
    wake: Condvar,
    done_lock: Mutex<()>,
    done: Condvar,
    /// One parallel section at a time (sessions may run on several caller threads).
    section: Mutex<()>,
    /// Serialises growth of the pool.
    grow: Mutex<()>,
}

static POOL: OnceLock<Pool> = OnceLock::new();

std::thread_local! {
    /// Set in pool workers (and in a caller inside a section): a nested [`for_each`] runs inline.
    static IN_SECTION: Cell<bool> = const { Cell::new(false) };
}

fn pool() -> &'static Pool {
    POOL.get_or_init(|| Pool {
        workers: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
        active: AtomicUsize::new(1),
        generation: AtomicU64::new(0),
        next: AtomicUsize::new(0),
        inside: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
        job: Mutex::new(None),
        wake: Condvar::new(),
        done_lock: Mutex::new(()),
        done: Condvar::new(),
        section: Mutex::new(()),
        grow: Mutex::new(()),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a task panicked while another thread held it; the guarded data
    // (a job pointer or nothing) stays consistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Uses `n` threads (the caller plus `n − 1` workers) for the kernels that split their work.
/// Starts the missing workers now and waits until they run (the pool only grows; lowering `n`
/// leaves workers asleep); runs never start threads. `n = 1` (the default) runs everything inline.
pub fn set_threads(n: usize) -> Result<(), ThreadError> {
    if n == 0 || n > MAX_THREADS {
        return Err(ThreadError::Count { found: n });
    }
    let p = pool();
    let _g = lock(&p.grow);
    while p.workers.load(Ordering::Acquire) < n - 1 {
        let seen = p.generation.load(Ordering::Acquire);
        std::thread::Builder::new()
            .name(format!("kestrel-worker-{}", p.workers.load(Ordering::Relaxed)))
            .spawn(move || worker(pool(), seen))
            .map_err(|e| ThreadError::Spawn { detail: e.to_string() })?;
        p.workers.fetch_add(1, Ordering::AcqRel);
    }
    while p.started.load(Ordering::Acquire) < p.workers.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    p.active.store(n, Ordering::Release);
    Ok(())
}

/// Threads a parallel section uses now (1 unless [`set_threads`] asked for more).
pub fn threads() -> usize {
    POOL.get().map_or(1, |p| p.active.load(Ordering::Acquire))
}

fn worker(p: &'static Pool, mut seen: u64) {
    IN_SECTION.with(|s| s.set(true));
    // Touch what the loop uses once, so that lazy per-thread set-up happens now.
    let _ = std::thread::current().id();
    drop(lock(&p.job));
    p.started.fetch_add(1, Ordering::AcqRel);
    loop {
        // Wait for a new generation: spin (yielding) for a moment, then sleep.
        let t0 = Instant::now();
        let job = loop {
            if p.generation.load(Ordering::Acquire) != seen {
                let g = lock(&p.job);
                let gen = p.generation.load(Ordering::Acquire);
                if gen != seen {
                    seen = gen;
                    if let Some(job) = *g {
                        // Joining under the job lock: the publisher clears the job under the
                        // same lock before it waits for `inside` to drain.
                        p.inside.fetch_add(1, Ordering::AcqRel);
                        break job;
                    }
                }
                continue;
            }
            if t0.elapsed() < SPIN {
                std::thread::yield_now();
                continue;
            }
            let g = lock(&p.job);
            if p.generation.load(Ordering::Acquire) == seen {
                drop(p.wake.wait(g));
            }
        };
        run_tasks(p, job);
        if p.inside.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = lock(&p.done_lock);
            p.done.notify_all();
        }
    }
}

fn run_tasks(p: &Pool, job: Job) {
    loop {
        let t = p.next.fetch_add(1, Ordering::AcqRel);
        if t >= job.tasks {
            break;
        }
        // SAFETY: `job.f` is alive until the publisher has seen `inside == 0` (see `for_each`).
        let f = unsafe { &*job.f };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(t))).is_err() {
            p.panicked.store(true, Ordering::Release);
        }
    }
}

/// Runs `f(0) … f(tasks − 1)`, split across the pool's threads when more than one is active,
/// each task exactly once; returns when all are done. Allocation-free. Inline (in order) with
/// one thread, one task, or when called from inside another parallel section.
pub fn for_each(tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    let n = threads();
    if n <= 1 || tasks <= 1 || IN_SECTION.with(Cell::get) {
        (0..tasks).for_each(f);
        return;
    }
    let p = pool();
    let _section = lock(&p.section);
    IN_SECTION.with(|s| s.set(true));
    p.panicked.store(false, Ordering::Release);
    p.next.store(0, Ordering::Release);
    // SAFETY: erasing the closure's lifetime; it outlives every use because this function
    // returns only after the job is withdrawn and every worker that joined it has left.
    let erased: *const (dyn Fn(usize) + Sync) =
        unsafe { core::mem::transmute(f as *const (dyn Fn(usize) + Sync + '_)) };
    {
        let mut g = lock(&p.job);
        *g = Some(Job { f: erased, tasks });
        p.generation.fetch_add(1, Ordering::AcqRel);
        p.wake.notify_all();
    }
    run_tasks(p, Job { f: erased, tasks });
    // No worker may join after this (the job is gone); wait for those inside to leave.
    *lock(&p.job) = None;
    let t0 = Instant::now();
    while p.inside.load(Ordering::Acquire) != 0 {
        if t0.elapsed() < SPIN {
            std::hint::spin_loop();
            continue;
        }
        let g = lock(&p.done_lock);
        if p.inside.load(Ordering::Acquire) != 0 {
            drop(p.done.wait_timeout(g, Duration::from_millis(1)));
        }
    }
    IN_SECTION.with(|s| s.set(false));
    if p.panicked.load(Ordering::Acquire) {
        panic!("kestrel-rt-cpu: a kernel task panicked on a worker thread");
    }
}

/// A mutable slice shared by the tasks of one [`for_each`], each of which writes only its own
/// disjoint parts of it.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut(*mut f32, usize);

// SAFETY: tasks only touch disjoint ranges (each user's contract), and the `&mut` the pointer
// came from outlives the parallel section.
unsafe impl Sync for SharedMut {}
// SAFETY: as above.
unsafe impl Send for SharedMut {}

impl SharedMut {
    /// Shares `s` for one parallel section.
    pub(crate) fn new(s: &mut [f32]) -> Self {
        SharedMut(s.as_mut_ptr(), s.len())
    }

    /// A raw pointer to element `start`, after checking `start..start + len` is in bounds.
    ///
    /// # Safety
    /// Whatever the caller writes through it must not overlap another task's parts.
    pub(crate) unsafe fn ptr_at(&self, start: usize, len: usize) -> *mut f32 {
        assert!(start.checked_add(len).is_some_and(|e| e <= self.1), "SharedMut: range out of bounds");
        // SAFETY: in bounds (checked).
        unsafe { self.0.add(start) }
    }

    /// `start..start + len` as a slice.
    ///
    /// # Safety
    /// No other live slice from this `SharedMut` overlaps the range.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn part(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(start.checked_add(len).is_some_and(|e| e <= self.1), "SharedMut: part out of bounds");
        // SAFETY: in bounds (checked) and disjoint (the caller's contract).
        unsafe { core::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// The scratch copies of one parallel section: the op's own scratch (task 0's) and the
/// session's spare copies after it (task `t`'s is spare copy `t − 1`), `per` elements each.
pub(crate) struct ScratchCopies {
    first: SharedMut,
    rest: SharedMut,
    per: usize,
}

impl ScratchCopies {
    /// Shares `scratch` and `spare` (`per = scratch.len()` elements a copy).
    pub(crate) fn new(scratch: &mut [f32], spare: &mut [f32]) -> Self {
        ScratchCopies { per: scratch.len(), first: SharedMut::new(scratch), rest: SharedMut::new(spare) }
    }

    /// Task `t`'s copy.
    ///
    /// # Safety
    /// Task `t` alone uses copy `t` while the section runs.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn of(&self, t: usize) -> &mut [f32] {
        // SAFETY: the caller's contract (copies are disjoint ranges).
        unsafe {
            if t == 0 {
                self.first.part(0, self.per)
            } else {
                self.rest.part((t - 1) * self.per, self.per)
            }
        }
    }
}
