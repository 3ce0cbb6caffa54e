//! The Kestrel model file (`.kes`).
//!
//! * [`dtype`]: storage dtypes and shapes.
//! * [`weight`]: weight encodings (f32, f16, int8 per-channel, int4 grouped), zero-copy views
//!   and, with `alloc`, the encoders.
//! * [`ops`]: the op set and its record encoding.
//!
//! The reader is `no_std` and never panics on malformed input; the writer needs `std`.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod dtype;
pub mod ops;
pub mod weight;

pub use dtype::{DType, Shape, INT4_GROUP, MAX_RANK};
pub use ops::{Op, OpError, TensorId, NONE};
pub use weight::{WeightData, WeightError, WeightView};
