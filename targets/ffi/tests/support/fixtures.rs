//! Test fixtures for the C and JNI binding tests: two committed ONNX fixtures converted to `.kes`
//! (f32 weights) with their inputs and PyTorch's outputs as raw little-endian arrays.
//! Shared by `targets/ffi/tests/c_abi.rs` and `targets/android/jni/tests/java.rs` (`#[path]`).

use std::path::{Path, PathBuf};

/// The image fixture: float input `[4, 1, 64, 64]` → logits `[4, 10]`.
pub const IMAGE: &str = "mnist_vit_super_h1";
/// The text fixture: i64 token ids `[4, 32]` → logits `[4, 2]`.
pub const TEXT: &str = "imdb_text_efficient_h1";

fn repo_root() -> PathBuf {
    // Both users sit two levels below the repository root (targets/<x>/).
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut p = here.to_path_buf();
    while !p.join("converters/fixtures").is_dir() {
        assert!(p.pop(), "converters/fixtures not found above {}", here.display());
    }
    p
}

fn le_bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn convert(name: &str, stem: &str, dir: &Path) {
    let fx = repo_root().join("converters/fixtures").join(name);
    let opts = kestrel_rt_onnx::ConvertOptions::default();
    let conv =
        kestrel_rt_onnx::convert(fx.join("model.onnx"), &opts).unwrap_or_else(|e| panic!("converting {name}: {e}"));
    std::fs::write(dir.join(format!("{stem}.kes")), &conv.kes).expect("writing .kes");
    let input = kestrel_rt_onnx::read_npy(fx.join("input.npy")).expect("input.npy");
    let bytes: Vec<u8> = match &input.data {
        kestrel_rt_onnx::InputData::F32(v) => le_bytes_f32(v),
        kestrel_rt_onnx::InputData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    std::fs::write(dir.join(format!("{stem}_input.bin")), bytes).expect("writing input");
    let expected = kestrel_rt_onnx::read_npy(fx.join("output.npy")).expect("output.npy");
    let kestrel_rt_onnx::InputData::F32(want) = &expected.data else { panic!("{name}: output.npy is not float") };
    std::fs::write(dir.join(format!("{stem}_expected.bin")), le_bytes_f32(want)).expect("writing expected");
}

/// Converts the fixtures into `dir` (once per directory): `image.kes`, `image_input.bin`,
/// `image_expected.bin`, `text.kes`, `text_input.bin`, `text_expected.bin`.
pub fn prepare(dir: &Path) {
    std::fs::create_dir_all(dir).expect("creating the fixture directory");
    convert(IMAGE, "image", dir);
    convert(TEXT, "text", dir);
}

/// The directory holding this test binary (`target/<profile>/deps`), where cargo writes the
/// library's `.a`/`.so` built for this very test run (the copies one level up are only refreshed
/// by `cargo build`, so they may be stale).
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().expect("test binary directory").to_path_buf()
}

/// Runs `cmd`, failing the test with its output if it fails; returns stdout.
pub fn run(cmd: &mut std::process::Command) -> String {
    run_both(cmd).0
}

/// Runs `cmd`, failing the test with its output if it fails; returns stdout and stderr.
pub fn run_both(cmd: &mut std::process::Command) -> (String, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    (stdout, stderr)
}

/// Whether a tool is on PATH; fails instead when `require_env` is set (CI sets it, so a missing
/// tool cannot silently skip a check).
pub fn have_tool(tool: &str, require_env: &str) -> bool {
    let found = std::process::Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    if !found {
        assert!(std::env::var_os(require_env).is_none(), "{tool} is required ({require_env} is set) but not found");
        eprintln!("note: {tool} not found: that part of the test is skipped (set {require_env} to make it fail)");
    }
    found
}
