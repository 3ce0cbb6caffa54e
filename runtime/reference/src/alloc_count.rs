//! A counting global allocator for the "allocates nothing" tests: it forwards to the system
//! allocator and, while counting is on, counts allocations and reallocations made on **every**
//! thread (a thread pool's workers included). A test binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: kestrel_reference::alloc_count::Counting = kestrel_reference::alloc_count::Counting;
//! ```
//!
//! and measures with [`count`]. The counter is process-wide, so such a binary must be a
//! `harness = false` test with its own `main`: libtest's main thread allocates (its table of
//! running tests, its first channel wait) just after it starts a test, at a moment that depends on
//! the scheduler, and those allocations land in whatever section is being counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The allocator: the system allocator plus a process-wide counter.
pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

fn note() {
    if ON.load(Ordering::Relaxed) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
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
