//! Kestrel: an on-device inference runtime for efficient-attention models.
//!
//! This facade crate loads `.kes` files (memory-mapped or from bytes), builds models in code
//! ([`ModelBuilder`]) and runs them on the CPU through [`kestrel_rt_cpu`] with an owned arena.
//! Embedded users depend on `kestrel-rt-cpu` directly (no_std, caller-provided arena).
//!
//! [`backend`] decides where a model runs (CPU, GPU, or AUTO's choice between them, and the GPU
//! arithmetic) for the CLI and the C ABI alike; the GPU is the wgpu backend, compiled in with the
//! cargo feature `gpu`. [`Storage`] holds a model's bytes (read, mapped or copied).

pub mod backend;
pub mod builder;
pub mod demo;
pub mod fuse;
pub mod image;
pub mod mechanisms;
pub mod mem;
mod model;
pub mod npy;
pub mod plan;
pub mod profile;
mod storage;

pub use builder::ModelBuilder;
pub use kestrel_rt_cpu::session::Input;
pub use kestrel_rt_format as format;
pub use model::{dims_error as model_dims_error, BoundedDim, Model, Session};
pub use storage::Storage;

/// Errors of the facade: I/O, loading, building and running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a file failed.
    // Not `source`: the message already ends with the OS error, and a source would print it
    // twice in a chain (`{:#}`).
    #[error("{path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is malformed.
    #[error(transparent)]
    Format(#[from] kestrel_rt_format::Error),
    /// The model does not validate.
    #[error(transparent)]
    Load(#[from] kestrel_rt_cpu::LoadError),
    /// A run failed.
    #[error(transparent)]
    Run(#[from] kestrel_rt_cpu::RunError),
    /// A run's input shapes do not fit the model: a bounded dim out of its range, two inputs
    /// disagreeing on one, a fixed axis or a rank that differs (the message names the dim and
    /// the input; `run` is the typed error).
    #[error("{message}")]
    Dims {
        /// The error in the model's own names.
        message: String,
        /// The typed error (not a `source`: the message says all it says, in the model's names).
        run: kestrel_rt_cpu::RunError,
    },
    /// The GPU backend failed (cargo feature `gpu`): lowering the model at new input sizes, or
    /// a run (a GPU session's own shape errors are [`Error::Dims`], as the CPU's).
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] kestrel_rt_wgpu::GpuError),
    /// A `.npy` file is unreadable or has the wrong shape or dtype.
    #[error("{0}")]
    Npy(String),
    /// Building a model in code failed.
    #[error("building the model: {0}")]
    Build(String),
    /// An allocation sized by a file or an input could not be made.
    #[error("not enough memory for {what}: {} ({bytes} bytes) could not be allocated", mem::human_bytes(*bytes))]
    OutOfMemory {
        /// What the memory was for.
        what: String,
        /// Bytes asked for.
        bytes: u64,
    },
    /// A session would take more memory than the caller's budget allows (nothing allocated).
    #[error("{what} needs {}, over the memory budget of {}", mem::human_bytes(*needed), mem::human_bytes(*budget))]
    OverBudget {
        /// What the memory is for.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// The budget.
        budget: u64,
    },
}
