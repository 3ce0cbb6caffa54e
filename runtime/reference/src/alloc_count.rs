//! A counting global allocator for the "allocates nothing" tests: it forwards to the system
//! allocator and counts allocations and reallocations two ways. [`count`] counts those made on
//! **every** thread (a thread pool's workers included); [`count_this_thread`] only those of the
//! calling thread. A test binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: kestrel_rt_reference::alloc_count::Counting = kestrel_rt_reference::alloc_count::Counting;
//! ```
//!
//! The process-wide counter needs a `harness = false` test with its own `main`: libtest's main
//! thread allocates (its table of running tests, its first channel wait) just after it starts a
//! test, at a moment that depends on the scheduler, and those allocations land in whatever
//! section is being counted. The per-thread counter works under the harness, which runs tests on
//! parallel threads: only the thread inside [`count_this_thread`] is measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The allocator: the system allocator plus a process-wide and a per-thread counter.
pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// `const` thread-locals never allocate.
thread_local! {
    static THREAD_ON: Cell<bool> = const { Cell::new(false) };
    static THREAD_ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    if ON.load(Ordering::Relaxed) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
    // `try_with`: the allocator can be called while thread-locals are being torn down.
    let _ = THREAD_ON.try_with(|c| {
        if c.get() {
            let _ = THREAD_ALLOCS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: forwards every call to the system allocator; only adds a counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its result with the number of allocations made meanwhile on any
/// thread (counted only when [`Counting`] is the global allocator).
pub fn count<R>(f: impl FnOnce() -> R) -> (R, usize) {
    ALLOCS.store(0, Ordering::SeqCst);
    ON.store(true, Ordering::SeqCst);
    let r = f();
    ON.store(false, Ordering::SeqCst);
    (r, ALLOCS.load(Ordering::SeqCst))
}

/// Runs `f` and returns its result with the number of allocations made meanwhile on the calling
/// thread alone (counted only when [`Counting`] is the global allocator).
pub fn count_this_thread<R>(f: impl FnOnce() -> R) -> (R, usize) {
    THREAD_ALLOCS.with(|n| n.set(0));
    THREAD_ON.with(|c| c.set(true));
    let r = f();
    THREAD_ON.with(|c| c.set(false));
    (r, THREAD_ALLOCS.with(|n| n.get()))
}
