//! The CPU kernels' integration tests, one test binary: each file in `tests/` is a module (`cargo
//! test -p kestrel-rt-cpu --test suite <file>::` runs one file's tests), except `threads` (it
//! counts allocations on every thread, so it has its own `main` without libtest's harness: a
//! `[[test]]` in Cargo.toml). One binary rather than one per file: each test binary links the crate
//! and its dependencies and compiles, at opt-level 2, its own copy of the generic code it uses
//! (proptest's, std's, the crate's own), and one binary per file multiplied that by the number of
//! files. `autotests = false` in Cargo.toml, so a new file must be declared here or as a `[[test]]`
//! there; [`every_test_file_is_built`] fails otherwise.

mod common_layers;
mod common_mech;
mod common_simd;

mod attention_int8;
mod concat;
mod conv;
mod elementwise;
mod gemv_rows;
mod layers;
mod layout;
mod linear_attn;
mod mechanisms;
mod nms;
mod norm;
mod pool;
mod rnn;
mod sdpa_sinks;
mod sdpa_talking;
mod simd;
mod simd_conv;
mod simd_rows;
mod softmax_extremes;
mod vmath;

/// Every `tests/*.rs` file is a module above or a `[[test]]` of its own in Cargo.toml (with
/// `autotests = false`, Cargo would not build one that is neither: its tests would silently
/// never run).
#[test]
fn every_test_file_is_built() {
    kestrel_rt_reference::test_files::assert_every_test_file_is_built(
        env!("CARGO_MANIFEST_DIR"),
        include_str!("main.rs"),
    );
}
