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
//! Backends: the CPU runtime. `KESTREL_BACKEND_WGPU` is part of the ABI but returns
//! `KESTREL_ERR_UNSUPPORTED` until the wgpu backend is linked in; `KESTREL_BACKEND_AUTO` falls
//! back to the CPU.

pub mod abi;
pub mod core;
pub mod handles;
pub mod status;

pub use handles::{KestrelModel, KestrelSession};
pub use status::Status;
