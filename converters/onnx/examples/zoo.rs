//! Converts every model of the real-world zoo (`converters/zoo/*`, written by
//! `python -m kestrel_torch.zoo`) and prints one line each: converted or the converter's error,
//! Kestrel's max relative error against onnxruntime's `output.npy`, the fused patterns.
//!
//! ```text
//! cargo run -p kestrel-rt-onnx --example zoo [-- FILTER]
//! ```

use kestrel_rt_onnx::{compare, convert, read_npy, run_kestrel, ConvertOptions, InputData};
use std::path::PathBuf;

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../zoo");
    let mut dirs = kestrel_rt_onnx::model_dirs(&dir).expect("converters/zoo");
    dirs.retain(|p| p.to_string_lossy().contains(&filter));
    for d in dirs {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let line = (|| -> Result<String, String> {
            let conv = convert(d.join("model.onnx"), &ConvertOptions::default()).map_err(|e| format!("{e:#}"))?;
            let mut inputs = vec![read_npy(d.join("input.npy")).map_err(|e| e.to_string())?];
            for i in 1.. {
                let p = d.join(format!("input{i}.npy"));
                if !p.exists() {
                    break;
                }
                inputs.push(read_npy(p).map_err(|e| e.to_string())?);
            }
            let expected = read_npy(d.join("output.npy")).map_err(|e| e.to_string())?;
            let InputData::F32(want) = expected.data else { return Err("output.npy is not f32".into()) };
            let got = run_kestrel(&conv.kes, &inputs).map_err(|e| format!("run: {e}"))?;
            let last = expected.shape.last().copied().unwrap_or(1);
            let (_, rel, _, _) = compare(&[want], &got[..1], &[last]).map_err(|e| e.to_string())?;
            let fused: Vec<String> = conv.report.fused.iter().map(|f| format!("{} x{}", f.name, f.count)).collect();
            Ok(format!("ok   rel {rel:.1e}  nodes {}  {}", conv.report.kestrel_nodes, fused.join(", ")))
        })();
        match line {
            Ok(l) => println!("{name:32} {l}"),
            Err(e) => println!("{name:32} FAIL {}", e.replace('\n', "\n      ")),
        }
    }
}
