//! The runtime's integration tests, one test binary (each file in `tests/` a module: `cargo test
//! -p kestrel-rt --test suite <file>::` runs one file's tests), except those that count
//! allocations with their own global allocator (`bounded_dims`, `no_alloc`, `rnn_session`,
//! `run_dims`, `threads`: a binary each, declared in Cargo.toml). One binary rather than one per
//! file: each links the runtime and wgpu, and linking them was minutes of every clean build.
//! `autotests = false`, so a new file must be declared here or in Cargo.toml;
//! [`every_test_file_is_built`] fails otherwise.

mod common_dims;
mod common_fuse;
#[cfg(feature = "gpu")]
mod common_gpu;
mod common_graph;
mod common_ops;

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
mod fuse_score_forms;
mod fuse_sdpa_forms;
mod fuse_sinks;
mod fuse_softcap;
mod fuse_split_values;
mod fuse_talking;
mod memory;
mod model_reference;
mod npy;
mod ops_mechanisms;
mod ops_session;
mod planner;
mod profile;
mod rank8_ops;
mod roundtrip;
mod validation;

/// Every `tests/*.rs` file is a module above or a `[[test]]` of its own in Cargo.toml (with
/// `autotests = false`, Cargo would not build one that is neither: its tests would silently
/// never run).
#[test]
fn every_test_file_is_built() {
    let root = env!("CARGO_MANIFEST_DIR");
    let manifest = std::fs::read_to_string(format!("{root}/Cargo.toml")).expect("Cargo.toml reads");
    let declared: Vec<&str> =
        include_str!("main.rs").lines().filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';')).collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(format!("{root}/tests")).expect("tests/ lists") {
        let name = entry.expect("tests/ entry").file_name().into_string().expect("a UTF-8 file name");
        if let Some(stem) = name.strip_suffix(".rs").filter(|&s| s != "main") {
            let own_binary = manifest.contains(&format!("path = \"tests/{name}\""));
            if !declared.contains(&stem) && !own_binary {
                missing.push(name);
            }
        }
    }
    assert!(missing.is_empty(), "test files neither modules of tests/main.rs nor [[test]]s in Cargo.toml: {missing:?}");
}
