//! The `kestrel` CLI's image apps as a library (the binary in `main.rs` calls into it; the
//! tests use it directly): `classify`, `profile`, image preprocessing and plotting helpers.

pub mod classify;
pub mod plot;
pub mod preprocess;
pub mod profile;
