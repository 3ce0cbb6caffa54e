//! Kestrel's C ABI (`include/kestrel.h`), for iOS and Android apps and any C-callable host.
//!
//! - [`core`]: the safe Rust layer (shared [`core::LoadedModel`], [`core::SessionCore`] with an
//!   owned arena, backend choice, per-op timings) that the ABI and the JNI bindings
//!   (`targets/android`) both call.
//! - [`abi`]: the `extern "C"` functions. Every one catches panics and errors at the boundary,
//!   returns a [`Status`] and leaves a message in the thread-local `kestrel_last_error()`.
//! - Handles are registered while alive, so NULL, misaligned, freed and wrong-kind handles are
//!   rejected without being dereferenced.
//!
//! - [`gpu`] (cargo feature `wgpu`, on by default): the wgpu backend (`kestrel-wgpu`) behind
//!   `KESTREL_BACKEND_WGPU` and `KESTREL_BACKEND_AUTO`, with one shared device per process.
//!
//! Backends: the CPU runtime, and the wgpu backend when the `wgpu` feature is on. A CPU-only
//! build (`--no-default-features`) answers `KESTREL_BACKEND_WGPU` with `KESTREL_ERR_UNSUPPORTED`
//! and a message saying the library was built without it; `KESTREL_BACKEND_AUTO` uses the CPU.

pub mod abi;
pub mod core;
pub mod error;
#[cfg(feature = "wgpu")]
pub mod gpu;
pub mod handles;
pub mod precision;
pub mod status;

pub use handles::{KestrelModel, KestrelSession};
pub use status::Status;
