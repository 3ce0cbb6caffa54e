//! Kestrel's CPU runtime: `no_std`, no allocation in `run`. One backend over the backend-neutral
//! `kestrel-rt-core` (validation, shapes, op geometry, errors).
//!
//! [`Model::parse`] validates a `.kes` file once (the core's checks of every node, then the CPU
//! kernels' weights and scratch against the arena plan); a [`Session`] binds it to a caller's arena (any alignment, size from
//! [`Model::arena_bytes`]) and [`Session::run`] executes batches without touching the heap.
//! With `std`, [`threads::set_threads`] starts a worker pool once and large dense layers are
//! split across it (still allocation-free per run).
#![no_std]
// The kernels' docs are for the runtime's developers: they name the private helpers and
// constants that decide a path (`cargo doc --document-private-items` renders them).
#![allow(rustdoc::private_intra_doc_links)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "alloc")]
pub mod dims;
mod exec;
pub mod kernels;
pub mod math;
pub mod model;
#[cfg(feature = "std")]
pub mod panics;
pub mod session;
#[cfg(feature = "std")]
pub mod threads;

// The backend-neutral parts live in `kestrel-rt-core`: re-exported at their old paths.
pub use kernels::linear::{linear, ProjW};
pub use kestrel_rt_core::error;
pub(crate) use kestrel_rt_core::graph;
pub use kestrel_rt_core::shapes;
#[cfg(feature = "alloc")]
pub use kestrel_rt_core::Table;
pub use kestrel_rt_core::{LoadError, RunError, ShapeError};
pub use model::{minimum_scratch_bytes, required_scratch_bytes, Model};

/// Most copies of the scratch region a session uses (one per thread).
pub const MAX_SCRATCH_COPIES: usize = 64;
pub use session::{Input, Session};
