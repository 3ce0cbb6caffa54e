//! Kestrel: an on-device inference runtime for efficient-attention models.
//!
//! This facade crate loads `.kes` files (memory-mapped or from bytes), builds models in code
//! ([`ModelBuilder`]) and runs them on the CPU through [`kestrel_cpu`] with an owned arena.
//! Embedded users depend on `kestrel-cpu` directly (no_std, caller-provided arena).

pub mod builder;
pub mod demo;
pub mod fuse;
mod model;
pub mod npy;
pub mod plan;
pub mod profile;

pub use builder::ModelBuilder;
pub use kestrel_cpu::session::Input;
pub use kestrel_format as format;
pub use model::{Model, Session};

/// Errors of the facade: I/O, loading, building and running.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is malformed.
    #[error(transparent)]
    Format(#[from] kestrel_format::Error),
    /// The model does not validate.
    #[error(transparent)]
    Load(#[from] kestrel_cpu::LoadError),
    /// A run failed.
    #[error(transparent)]
    Run(#[from] kestrel_cpu::RunError),
    /// A `.npy` file is unreadable or has the wrong shape or dtype.
    #[error("{0}")]
    Npy(String),
    /// Building a model in code failed.
    #[error("building the model: {0}")]
    Build(String),
}
