//! The CLI's integration tests, one test binary: each file in `tests/` is a module (`cargo test -p
//! kestrel-rt-cli --test suite <file>::` runs one file's tests). One binary rather than one per
//! file: each test binary links the crate and its dependencies and compiles, at opt-level 2, its
//! own copy of the generic code it uses (proptest's, std's, the crate's own), and one binary per
//! file multiplied that by the number of files. `autotests = false` in Cargo.toml, so a new file
//! must be declared here or as a `[[test]]` there; [`every_test_file_is_built`] fails otherwise.

mod bad_inputs;
/// ONNX messages by hand (the converter tests' writer).
#[path = "../../../converters/onnx/tests/common/proto.rs"]
mod proto;
mod support;

mod backend;
mod bench_ops;
mod bounded;
mod bounded_verify;
mod classify;
mod cli;
mod reliability;
mod scaling;
mod sdk_classify;

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
