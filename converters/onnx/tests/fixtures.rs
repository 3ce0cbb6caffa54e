//! Converts every fixture under `converters/fixtures/<name>/{model.onnx, input.npy, output.npy}`
//! (written by the PyTorch side) and compares Kestrel at f32 with `output.npy`.

use kestrel_onnx::{compare, convert, read_npy, run_kestrel, ConvertOptions, InputData};
use std::path::PathBuf;

#[test]
fn every_fixture_converts_and_matches_at_f32() {
    // KESTREL_FIXTURES overrides the directory (to try fixtures that live elsewhere).
    let dir = std::env::var_os("KESTREL_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        println!("no fixtures at {}", dir.display());
        return;
    };
    let mut dirs: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join("model.onnx").exists()).collect();
    dirs.sort();
    let mut failures = Vec::new();
    for d in &dirs {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let result = (|| -> Result<f64, String> {
            let conv = convert(d.join("model.onnx"), &ConvertOptions::default()).map_err(|e| e.to_string())?;
            let input = read_npy(d.join("input.npy")).map_err(|e| e.to_string())?;
            let expected = read_npy(d.join("output.npy")).map_err(|e| e.to_string())?;
            let InputData::F32(want) = expected.data else { return Err("output.npy is not f32".into()) };
            let got = run_kestrel(&conv.kes, &[input]).map_err(|e| e.to_string())?;
            let last = expected.shape.last().copied().unwrap_or(1);
            let (abs, rel, top1, _) = compare(&[want], &got[..1], &[last]).map_err(|e| e.to_string())?;
            println!("{name}: max abs {abs:.3e}, max rel {rel:.3e}, top-1 {top1:.3}\n{}", conv.report.to_table());
            Ok(rel)
        })();
        match result {
            Ok(rel) if rel <= 1e-4 => {}
            Ok(rel) => failures.push(format!("{name}: max rel {rel:.3e} > 1e-4")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} fixtures failed:\n{}", failures.len(), dirs.len(), failures.join("\n"));
}
