//! Host side of the firmware build: validates the model with the CPU runtime (std, on the
//! host), sizes the static arena from it, takes the first sample of the fixture's `input.npy`,
//! runs the model on it on the host to get the expected class, and writes `model.kes` and
//! `consts.rs` into OUT_DIR for the firmware to `include!`. Also puts `memory.x` on the linker
//! path.
//!
//! Inputs (env overrides): `KESTREL_FIRMWARE_MODEL` (default `model/mnist_vit_super_h1.int8.kes`),
//! `KESTREL_FIRMWARE_INPUT` (default the fixture's `input.npy`), `KESTREL_FIRMWARE_SAMPLE` (0).

#[path = "src/argmax.rs"]
mod argmax;

use argmax::argmax;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let env_path = |var: &str, default: &str| {
        println!("cargo:rerun-if-env-changed={var}");
        std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| dir.join(default))
    };
    let model_path = env_path("KESTREL_FIRMWARE_MODEL", "model/mnist_vit_super_h1.int8.kes");
    let input_path = env_path("KESTREL_FIRMWARE_INPUT", "../../converters/fixtures/mnist_vit_super_h1/input.npy");
    println!("cargo:rerun-if-env-changed=KESTREL_FIRMWARE_SAMPLE");
    let sample: usize = std::env::var("KESTREL_FIRMWARE_SAMPLE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    println!("cargo:rerun-if-changed={}", model_path.display());
    println!("cargo:rerun-if-changed={}", input_path.display());
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/argmax.rs");

    // memory.x for cortex-m-rt's link.x.
    std::fs::copy(dir.join("memory.x"), out.join("memory.x")).expect("copying memory.x");
    println!("cargo:rustc-link-search={}", out.display());

    let bytes = std::fs::read(&model_path).unwrap_or_else(|e| panic!("reading {}: {e}", model_path.display()));
    let aligned = kestrel_rt_format::aligned_copy(&bytes);
    let model = kestrel_rt_cpu::Model::parse(&aligned)
        .unwrap_or_else(|e| panic!("{} does not validate: {e}", model_path.display()));
    assert!(model.input_count() == 1 && model.output_count() == 1, "the firmware runs one-input, one-output models");
    let input = model.input(0).expect("input 0");
    assert!(input.dtype == kestrel_rt_format::DType::F32, "the firmware feeds an f32 input");
    let in_len = input.shape.numel().expect("input size");
    let out_len = model.output(0).expect("output 0").shape.numel().expect("output size");
    let arena_bytes = model.arena_bytes(1).expect("arena size");

    let x = read_npy_f32_sample(&input_path, in_len, sample);
    // The expected result, computed on the host with the same runtime.
    let mut arena = vec![0u8; arena_bytes];
    let mut session = kestrel_rt_cpu::Session::new(&model, &mut arena, 1).expect("host session");
    let mut logits = vec![0f32; out_len];
    session.run(&[kestrel_rt_cpu::Input::F32(&x)], &mut [&mut logits]).expect("host run");
    let class = argmax(&logits);

    std::fs::write(out.join("model.kes"), &bytes).expect("writing model.kes");
    let mut src = String::new();
    writeln!(src, "/// Arena bytes for batch 1 (`Model::arena_bytes(1)`, computed on the host).").unwrap();
    writeln!(src, "pub const ARENA_BYTES: usize = {arena_bytes};").unwrap();
    writeln!(src, "/// Elements of the output.\npub const OUTPUT_LEN: usize = {out_len};").unwrap();
    writeln!(
        src,
        "/// The class the host's CPU runtime computed for the sample.\npub const HOST_CLASS: usize = {class};"
    )
    .unwrap();
    writeln!(src, "/// The host's logits.\npub static HOST_LOGITS: [f32; {out_len}] = {};", floats(&logits)).unwrap();
    writeln!(src, "/// Sample {sample} of {} (in flash).", input_path.display()).unwrap();
    writeln!(src, "pub static INPUT: [f32; {in_len}] = {};", floats(&x)).unwrap();
    std::fs::write(out.join("consts.rs"), src).expect("writing consts.rs");
}

/// A Rust array expression with the exact values (`f32::from_bits` is const).
fn floats(v: &[f32]) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("f32::from_bits({:#010x})", x.to_bits())).collect();
    format!("[{}]", items.join(", "))
}

/// Sample `sample` (`len` elements) of a little-endian float32 `.npy` array, C order.
fn read_npy_f32_sample(path: &Path, len: usize, sample: usize) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(b.len() > 10 && &b[..6] == b"\x93NUMPY", "{} is not a .npy file", path.display());
    let (header_len, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        _ => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
    };
    let header = std::str::from_utf8(&b[start..start + header_len]).expect("npy header");
    assert!(header.contains("'descr': '<f4'"), "{}: expected little-endian float32, header {header}", path.display());
    assert!(header.contains("'fortran_order': False"), "{}: expected C order", path.display());
    let data = &b[start + header_len..];
    let from = sample * len * 4;
    let chunk = data
        .get(from..from + len * 4)
        .unwrap_or_else(|| panic!("{}: no sample {sample} of {len} floats", path.display()));
    chunk.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
