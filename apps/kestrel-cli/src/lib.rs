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
