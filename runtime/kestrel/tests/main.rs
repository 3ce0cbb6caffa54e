//! The runtime's integration tests, one test binary: each file in `tests/` is a module (`cargo test
//! -p kestrel-rt --test suite <file>::` runs one file's tests), except `threads` (it counts
//! allocations on every thread, so it has its own `main` without libtest's harness: a `[[test]]` in
//! Cargo.toml). The tests that check a call allocates nothing count per thread with the global
//! allocator below. One binary rather than one per file: each links the runtime and wgpu, and
//! linking them was minutes of every clean build. `autotests = false`, so a new file must be
//! declared here or in Cargo.toml; [`every_test_file_is_built`] fails otherwise.

// Counts allocations per thread for the tests that check a call allocates nothing
// (`alloc_count::count_this_thread`: tests run on parallel threads, each counts its own).
#[global_allocator]
static GLOBAL: kestrel_rt_reference::alloc_count::Counting = kestrel_rt_reference::alloc_count::Counting;

mod common_dims;
mod common_fuse;
#[cfg(feature = "gpu")]
mod common_gpu;
mod common_graph;
mod common_ops;

mod bounded_dims;
mod bounded_dims_gpu;
mod dead_nodes;
mod fuse;
mod fuse_affine;
mod fuse_chain;
mod fuse_channels;
mod fuse_concat;
mod fuse_concat_keys;
mod fuse_const_queries;
mod fuse_empty;
mod fuse_layout;
mod fuse_mixed;
mod fuse_query_rows;
mod fuse_residual;
mod fuse_score_forms;
mod fuse_sdpa_forms;
mod fuse_sinks;
mod fuse_softcap;
mod fuse_split_values;
mod fuse_talking;
mod memory;
mod model_reference;
mod no_alloc;
mod npy;
mod ops_mechanisms;
mod ops_session;
mod planner;
mod profile;
mod rank8_ops;
mod rnn_session;
mod roundtrip;
mod run_dims;
mod validation;

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
