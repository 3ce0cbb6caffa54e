//! Kestrel's CPU runtime: `no_std`, no allocation in `run`.
//!
//! [`Model::parse`] validates a `.kes` file once (every node's tensor roles, shapes, kernel
//! weights, the arena plan); a [`Session`] binds it to a caller's arena (any alignment, size from
//! [`Model::arena_bytes`]) and [`Session::run`] executes batches without touching the heap.
//! With `std`, [`threads::set_threads`] starts a worker pool once and large dense layers are
//! split across it (still allocation-free per run).
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod error;
mod exec;
mod graph;
pub mod kernels;
pub mod math;
pub mod model;
#[cfg(feature = "std")]
pub mod panics;
pub mod session;
pub mod shapes;
#[cfg(feature = "std")]
pub mod threads;

pub use error::{LoadError, RunError, ShapeError};
#[cfg(feature = "alloc")]
pub use graph::Table;
pub use kernels::linear::{linear, ProjW};
pub use model::{minimum_scratch_bytes, required_scratch_bytes, Model};

/// Most copies of the scratch region a session uses (one per thread).
pub const MAX_SCRATCH_COPIES: usize = 64;
pub use session::{Input, Session};
