//! Kestrel's C ABI (`include/kestrel.h`), for iOS and Android apps and any C-callable host.
//!
//! - [`core`]: the safe Rust layer (shared [`core::LoadedModel`], [`core::SessionCore`] with an
//!   owned arena, backend choice, per-op timings) that the ABI and the JNI bindings
//!   (`targets/android`) both call.
//! - [`abi`]: the `extern "C"` functions. Every one catches panics and errors at the boundary,
//!   returns a [`Status`] and leaves a message in the thread-local `kestrel_last_error()`.
//! - [`handles`]: handles are tokens for objects a registry owns by reference count, so NULL,
//!   misaligned, freed (`KESTREL_ERR_CLOSED`) and wrong-kind handles are rejected without being
//!   dereferenced, and a free from any thread at any time is safe: calls in flight keep the
//!   object alive until they end.
//!
//! - [`gpu`]: the status codes of the GPU's errors. Where a session runs (`KESTREL_BACKEND_AUTO`'s
//!   policy, the shared device) is the facade's `kestrel_rt::backend`, as in the CLI; the cargo
//!   feature `wgpu` (on by default) builds it with the wgpu backend (`kestrel/gpu`).
//! - [`codes`]: the ABI codes of the backend and the GPU precision.
//! - [`threads`]: the CPU worker pool's thread count (a process setting) and its mobile default.
//!
//! Backends: the CPU runtime, and the wgpu backend when the `wgpu` feature is on. A CPU-only
//! build (`--no-default-features`) answers `KESTREL_BACKEND_WGPU` with `KESTREL_ERR_UNSUPPORTED`
//! and a message saying the library was built without it; `KESTREL_BACKEND_AUTO` uses the CPU.

pub mod abi;
pub mod codes;
pub mod core;
pub mod error;
pub mod gpu;
pub mod handles;
pub mod status;
pub mod threads;

pub use codes::WGPU_BUILT_IN;
pub use handles::{KestrelModel, KestrelSession};
pub use status::Status;
