//! Converts every fixture under `converters/fixtures/<name>/{model.onnx, input.npy, output.npy}`
//! (written by the PyTorch side) and compares Kestrel at f32 with `output.npy`.

use kestrel_rt_onnx::{compare, convert, model_dirs, read_npy, run_kestrel, ConvertOptions, InputData};
use std::path::PathBuf;

/// Fixtures committed under `converters/fixtures/` (`KESTREL_FIXTURES` overrides the directory).
const COMMITTED_FIXTURES: usize = 39;

/// Every fixture directory with its name, sorted. Panics if the committed fixtures are missing,
/// so no test here can pass without checking anything.
fn fixture_dirs() -> Vec<(String, PathBuf)> {
    let override_dir = std::env::var_os("KESTREL_FIXTURES").map(PathBuf::from);
    let dir = override_dir.clone().unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures"));
    let dirs = model_dirs(&dir).unwrap_or_else(|e| panic!("no fixtures at {}: {e}", dir.display()));
    if override_dir.is_none() {
        assert!(
            dirs.len() >= COMMITTED_FIXTURES,
            "{} fixtures in {}, expected {COMMITTED_FIXTURES}",
            dirs.len(),
            dir.display()
        );
    }
    dirs.into_iter().map(|d| (d.file_name().unwrap().to_string_lossy().to_string(), d)).collect()
}

#[test]
fn every_fixture_converts_and_matches_at_f32() {
    let dirs = fixture_dirs();
    let mut failures = Vec::new();
    for (name, d) in &dirs {
        let result = (|| -> Result<f64, String> {
            let conv = convert(d.join("model.onnx"), &ConvertOptions::default()).map_err(|e| e.to_string())?;
            let input = read_npy(d.join("input.npy")).map_err(|e| e.to_string())?;
            let expected = read_npy(d.join("output.npy")).map_err(|e| e.to_string())?;
            let InputData::F32(want) = expected.data else { return Err("output.npy is not f32".into()) };
            let got = run_kestrel(&conv.kes, &[input]).map_err(|e| e.to_string())?;
            let last = expected.shape.last().copied().unwrap_or(1);
            let (abs, rel, top1, _) = compare(&[want], &got[..1], &[last]).map_err(|e| e.to_string())?;
            println!("{name}: max abs {abs:.3e}, max rel {rel:.3e}, top-1 {top1:.3}\n{}", conv.report.to_table());
            // Informational: the same at int8 (random weights, so top-1 is only indicative).
            let q = ConvertOptions { weights: kestrel_rt_onnx::DType::I8, ..ConvertOptions::default() };
            if let Ok(c8) = convert(d.join("model.onnx"), &q) {
                let input = read_npy(d.join("input.npy")).map_err(|e| e.to_string())?;
                let got8 = run_kestrel(&c8.kes, &[input]).map_err(|e| e.to_string())?;
                let InputData::F32(want) = read_npy(d.join("output.npy")).map_err(|e| e.to_string())?.data else {
                    return Err("output.npy is not f32".into());
                };
                let (_, rel8, top8, _) = compare(&[want], &got8[..1], &[last]).map_err(|e| e.to_string())?;
                println!("{name} int8: max rel {rel8:.3e}, top-1 {top8:.3}, kes {} bytes", c8.kes.len());
            }
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

/// Every fixture of the four attention mechanisms (and the hand-written variant) and every
/// AFT-full, AFT-local, AFT-simple (causal too), AFT-conv and Fastformer fixture converts to a
/// graph where each layer is one fused node: no softmax, matrix product or token-grid
/// convolution is left, and the report counts the fusions. `nn.MultiheadAttention` (packed
/// in-projection split by gathers) fuses too, after its parts are collapsed into projections.
#[test]
fn mechanism_fixtures_fuse_every_layer() {
    let mut checked = 0;
    for (name, d) in fixture_dirs() {
        let Ok(meta) = std::fs::read_to_string(d.join("meta.json")) else { continue };
        let meta: serde_json::Value = serde_json::from_str(&meta).expect("meta.json is JSON");
        let (pattern, op) = match meta["mechanism"].as_str().unwrap_or("") {
            "standard" | "optimised" | "efficient" | "super" | "handwritten" | "torch_mha" => {
                ("attention", "Attention")
            }
            "aft_simple" => ("aft-simple", "AftSimple"),
            "fastformer" => ("fastformer", "Fastformer"),
            "aft_full" => ("aft-full", "AftFull"),
            "aft_local" => ("aft-local", "AftLocal"),
            "aft_conv" => ("aft-conv", "AftConv"),
            _ => continue,
        };
        let layers = meta["config"]["layers"].as_u64().unwrap_or(1) as usize;
        let report = convert(d.join("model.onnx"), &ConvertOptions::default()).unwrap().report;
        let fused = report.fused.iter().find(|f| f.name == pattern).map_or(0, |f| f.count);
        assert_eq!(fused, layers, "{name}: {fused} {pattern} layers fused of {layers}\n{}", report.to_table());
        assert_eq!(report.kestrel_ops.get(op), Some(&layers), "{name}");
        for gone in ["Softmax", "MatMul"] {
            assert!(
                !report.kestrel_ops.contains_key(gone),
                "{name}: {gone} left after fusion: {:?}",
                report.kestrel_ops
            );
        }
        // Only an image model's patch embedding may remain a convolution.
        let convs = report.kestrel_ops.get("Conv2d").copied().unwrap_or(0);
        assert!(convs <= 1, "{name}: {convs} convolutions left after fusion: {:?}", report.kestrel_ops);
        assert!(report.fusion_rejected.is_empty(), "{name}: {:?}", report.fusion_rejected);
        checked += 1;
    }
    assert!(checked >= 37, "only {checked} mechanism fixtures found");
}

/// Per mechanism, end to end against tract: every fixture's ONNX model run by tract and its
/// conversion run by Kestrel on the same inputs, at f32 (≤ 1e-4 relative) and f16 (≤ 1e-2).
#[test]
fn every_fixture_matches_tract_at_f32_and_f16() {
    let dirs = fixture_dirs();
    let mut failures = Vec::new();
    for (name, d) in &dirs {
        let input = read_npy(d.join("input.npy")).unwrap();
        for (dtype, tol) in [(kestrel_rt_onnx::DType::F32, 1e-4), (kestrel_rt_onnx::DType::F16, 1e-2)] {
            let opts = ConvertOptions { weights: dtype, ..ConvertOptions::default() };
            let conv = convert(d.join("model.onnx"), &opts).unwrap();
            let v = kestrel_rt_onnx::verify(d.join("model.onnx"), &conv.kes, std::slice::from_ref(&input)).unwrap();
            println!("{name} {}: max rel {:.3e}, top-1 {:.3}", dtype.name(), v.max_rel_err, v.top1_agreement);
            if v.max_rel_err > tol {
                failures.push(format!("{name} {}: max rel {:.3e} > {tol:e}", dtype.name(), v.max_rel_err));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
