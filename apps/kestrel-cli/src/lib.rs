//! The `kestrel` CLI's image apps as a library (the binary in `main.rs` calls into it; the
//! tests use it directly): backend selection, `classify`, `profile`, `bench scaling`, image
//! preprocessing and plotting helpers.

pub mod backend;
pub mod classify;
pub mod machine;
pub mod plot;
pub mod preprocess;
pub mod profile;
pub mod scaling;

use std::path::Path;

/// Loads a `.kes` file for a command: read into memory (never mapped: a file truncated while a
/// command runs cannot crash it), every error naming the path once.
pub fn load_model(path: impl AsRef<Path>) -> anyhow::Result<kestrel::Model> {
    let path = path.as_ref();
    match kestrel::Model::load(path) {
        Ok(m) => Ok(m),
        // I/O errors already name the path.
        Err(e @ kestrel::Error::Io { .. }) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("loading {}", path.display()))),
    }
}
