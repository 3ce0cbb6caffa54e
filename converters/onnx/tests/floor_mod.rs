//! ONNX `Mod` (`fmod = 0`) on shape values, as the legacy exporter traces LongT5's padding of the
//! sequence to a multiple of the block (`pad = -len % block`: `Neg(Shape)`, `Mod`, `Pad`):
//! tract's parser computes the truncated remainder for shape values (`-6 rem 4 = -2`), so the
//! padded length folded to 4 instead of 8 and typing the model failed (LongT5's legacy export:
//! `broadcast((16), (0))`). The converter reads `Mod` itself (`src/expand/floor_mod.rs`). The
//! tiny local attention of `kestrel_torch/longt5.py` (6 tokens in blocks of 4) converts and
//! matches onnxruntime's saved output (2 samples) within 1e-4 on the CPU and on the GPU.

use crate::common;

use kestrel_rt_onnx::{convert, read_npy, ConvertOptions, InputData};

#[test]
fn a_sequence_padded_to_a_multiple_of_the_block_converts_and_matches_onnxruntime() {
    let data = |s: &str| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(s);
    let conv = convert(data("longt5.onnx"), &ConvertOptions::default()).unwrap();
    let x = read_npy(data("longt5_in.npy")).unwrap();
    let y = read_npy(data("longt5_out.npy")).unwrap();
    let last = *y.shape.last().unwrap();
    let InputData::F32(want) = y.data else { panic!("longt5: output is not f32") };
    common::matches_onnxruntime("longt5", &conv.kes, &[x], &want, last, 1e-4);
}
