//! The converter's integration tests, one test binary (each file in `tests/` a module: `cargo
//! test -p kestrel-rt-onnx --test suite <file>::` runs one file's tests). One binary rather than
//! one per file: each links tract, the runtime and wgpu, and linking ~55 of them was minutes of
//! every clean build. `autotests = false` in Cargo.toml, so a new file must be declared here;
//! [`every_test_file_is_built`] fails otherwise.

#[path = "common/arrays.rs"]
mod arrays;
mod common;
#[path = "common/dynamic.rs"]
mod dynamic;
#[path = "common/conformance.rs"]
mod harness;
#[path = "common/proto.rs"]
mod proto;

mod batchnorm_training;
mod bounded_dims_convert;
mod bounded_fixtures;
mod bounded_verify;
mod clamp_fusion;
mod concat_keys;
mod conformance;
mod const_queries;
mod conv3d;
mod conv_runtime_kernel;
mod convert;
mod dft;
mod dynamic_fixtures;
mod einsum_unary;
mod empty_outputs;
mod expand_ops;
mod families;
mod fixtures;
mod floor_mod;
mod gather_runtime;
mod grid_sample;
mod ids_transpose;
mod ignored_attrs;
mod importer_fixes;
mod integer_bits;
mod integer_inputs;
mod linear_attention;
mod log_softmax;
mod lrn_tile;
mod masked_attention;
mod matmul_broadcast;
mod mixed_attention;
mod nan_constants;
mod negative_steps;
mod nonzero;
mod onnx_attention;
mod ops_doc;
mod pad_modes;
mod pool_indices;
mod pool_windows;
mod quantized;
mod query_rows;
mod random_ops;
mod resample;
mod rnn;
mod runtime_params;
mod scatter;
mod score_bias;
mod sinks;
mod sized_by_data;
mod softcap_attention;
mod split_values;
mod stft;
mod symbolic_dims;
mod talking_heads;
mod topk;
mod unrolled;
mod value_info_symbols;
mod zoo;

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
