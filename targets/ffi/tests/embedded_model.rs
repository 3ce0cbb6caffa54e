//! The firmware's committed model (`targets/embedded/model/mnist_vit_super_h1.int8.kes`, which
//! CI builds into the Cortex-M image) must be exactly what the converter makes today, so the
//! embedded run never tests a stale file. (It lives here because `targets/embedded` is its own
//! workspace, built for the microcontroller.)

use std::path::Path;

#[test]
fn committed_firmware_model_is_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let onnx = root.join("converters/fixtures/mnist_vit_super_h1/model.onnx");
    let opts =
        kestrel_rt_onnx::ConvertOptions { weights: kestrel_rt_onnx::DType::I8, min_memory: true, ..Default::default() };
    let made = kestrel_rt_onnx::convert(&onnx, &opts).expect("converting mnist_vit_super_h1").kes;
    let committed = std::fs::read(root.join("targets/embedded/model/mnist_vit_super_h1.int8.kes"))
        .expect("reading the committed firmware model");
    assert!(
        made == committed,
        "targets/embedded/model/mnist_vit_super_h1.int8.kes is stale ({} bytes committed, {} converted): rebuild it with \
         `cargo run -p kestrel-rt-cli -- convert converters/fixtures/mnist_vit_super_h1/model.onnx \
         -o targets/embedded/model/mnist_vit_super_h1.int8.kes --weights int8 --min-memory`",
        committed.len(),
        made.len()
    );
}
