//! Kestrel's wgpu backend: every op of the CPU runtime as WGSL compute kernels.
//!
//! * [`GpuContext`] opens an adapter (by name, index, `KESTREL_ADAPTER` or the best one) and
//!   its device; [`GpuError::NoAdapter`] tells the caller to fall back to the CPU.
//! * [`GpuSession::new`] lowers a validated [`kestrel_rt_core::Model`] to dispatches, uploads the
//!   model file once (weights stay in their stored encoding: f32, f16, int8 with per-row
//!   scales, int4 with group-32 f16 scales, dequantised in the shaders), and allocates the
//!   arena (the file's memory plan scaled by the batch capacity, plus GPU scratch), the
//!   parameter blocks, the input staging and the readback buffer.
//! * [`GpuSession::run`] writes the inputs into the mapped input staging, records one command
//!   encoder (the input copies, one compute pass of every dispatch, the output copies), submits
//!   it once and reads the outputs through the mapped readback buffer; the same wait maps the
//!   input staging again, so a steady-state run creates no GPU object ([`GpuCounts`], checked
//!   in the tests). [`GpuSession::run_profiled`] records a pass per node with timestamp queries.
//!
//! Kernels live in `src/shaders/*.wgsl`, one file per family plus a shared preamble; shapes and
//! scalars are passed in a 64-word uniform parameter block, never baked into shader text, and
//! pipelines are cached by [`Variant`] (a [`Kernel`] entry point at an [`Arith`]metic).
//!
//! **Precision.** [`SessionOptions::precision`] picks the arithmetic of the dot-product families
//! (dense, matmul, convolution, attention, Fastformer; [`Family::has_f16`]):
//! [`Precision::F32`] (the default: the CPU's arithmetic, f16 weights decoded exactly by bit
//! manipulation), [`Precision::F16`] (f16 products of f16-rounded factors, summed four at a time
//! in f16 and accumulated in f32; needs `SHADER_F16`, which [`GpuContext`] requests wherever the
//! adapter has it, else [`GpuError::F16Unsupported`]) or [`Precision::Auto`] (f16 where
//! available, else f32). Element-wise ops, norms, softmax, reductions, embeddings and the AFT
//! cores are f32 at every precision.
//!
//! Dense layers are workgroup-cooperative: up to 64 threads share an output, each summing a
//! strided share of the row, and the partial sums meet in a shared-memory tree.

mod compile;
pub mod device;
mod error;
pub mod kernels;
mod params;
mod session;
mod tuning;

pub use device::{
    adapters, AdapterChoice, AdapterSummary, DeviceLimits, DeviceOptions, GpuContext, ADAPTER_ENV, LIMITS_ENV,
};
pub use error::{GpuError, ACTIVATION_ARENA};
pub use kernels::{Arith, DenseInput, Family, Kernel, Variant};
pub use session::{GpuCounts, GpuSession, NodeTiming, Precision, Profile, SessionOptions, TimingSource};
pub use tuning::{Tuning, SUBGROUPS_ENV, TILE_ENV};

/// The wgpu version this backend is built on (for adapter info, features and limits types).
pub use wgpu;
