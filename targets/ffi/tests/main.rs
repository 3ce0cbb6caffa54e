//! The C ABI's integration tests, one test binary: each file in `tests/` is a module (`cargo test
//! -p kestrel-rt-ffi --test suite <file>::` runs one file's tests), except `threads`, `zero_copy`
//! and `stack` (each has its own `main` without libtest's harness: process-wide thread counts,
//! allocation counters and stack sizes; `[[test]]`s in Cargo.toml). One binary rather than one per
//! file: each test binary links the crate and its dependencies and compiles, at opt-level 2, its
//! own copy of the generic code it uses (proptest's, std's, the crate's own), and one binary per
//! file multiplied that by the number of files. `autotests = false` in Cargo.toml, so a new file
//! must be declared here or as a `[[test]]` there; [`every_test_file_is_built`] fails otherwise.

// Counts allocations per thread for the tests that check a call allocates nothing
// (`alloc_count::count_this_thread`: tests run on parallel threads, each counts its own).
#[global_allocator]
static GLOBAL: kestrel_rt_reference::alloc_count::Counting = kestrel_rt_reference::alloc_count::Counting;

#[path = "support/bounded.rs"]
mod bounded;
#[path = "support/fixtures.rs"]
mod fixtures;
#[cfg(feature = "wgpu")]
#[path = "support/gpu.rs"]
mod gpu;

mod bounded_classify;
mod bounded_dims;
mod c_abi;
mod concurrency;
mod embedded_model;
mod header;
mod model_sources;

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
