//! Kestrel's backend-neutral core (`no_std`, no allocation): what every backend shares.
//!
//! * [`Model::parse`] validates a `.kes` file once: every node's tensor roles and dtypes, output
//!   shapes, definitions before uses, no output overlapping its inputs, reshape aliasing, the
//!   arena plan's alignment. A backend adds its own per-node checks through
//!   [`Model::parse_with`] (the CPU backend: its kernels' weight shapes and scratch).
//! * [`shapes::output_shape`]: every op's output shape from its inputs' shapes.
//! * [`cost`]: every op's FLOPs and compulsory bytes moved, from the shapes and encodings of
//!   a [`graph::Graph`] (the file's, or a table at a run's sizes: the profilers' roofline on
//!   every backend).
//! * [`params`]: the geometry of convolutions, pooling, slices and recurrences, derived from a
//!   node's shapes, that the CPU kernels and the wgpu lowering both read.
//! * [`slots`]: what each input slot of an op accepts.
//! * [`graph`]: tensor lookups over a file, optionally through a prebuilt table.
//! * The error types ([`LoadError`], [`ShapeError`], [`RunError`]) and [`Input`].
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod cost;
pub mod error;
pub mod graph;
mod input;
pub mod model;
pub mod params;
pub mod shapes;
pub mod slots;
#[cfg(feature = "alloc")]
mod specialise;

pub use error::{LoadError, RunDimFault, RunError, ShapeError};
#[cfg(feature = "alloc")]
pub use graph::Table;
pub use input::{batch_of, exact_f32, Input};
pub use model::Model;
