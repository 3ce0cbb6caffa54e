//! Kestrel's CPU runtime: `no_std`, no allocation in `run`.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod kernels;
pub mod error;
pub mod math;
pub mod shapes;

pub use error::{LoadError, RunError, ShapeError};
pub use kernels::linear::{linear, ProjW};
