//! `kestrel convert --dim NAME=MIN..MAX --verify`: the bounded file is verified against tract at
//! several sizes: alone, on seeded random inputs at each dim's minimum, an odd middle value and
//! its maximum; with `.npy` files (repeatable), at each file's own size; one per line and in the
//! JSON's `verify_runs`, `verify` holding the worst. A file outside the range is an error naming
//! the file, the dim and its range.

use crate::support;
use std::path::PathBuf;
use support::{kestrel, scratch_dir};

/// The converter's bounded fixtures (`nn.TransformerEncoder`, `src [batch, sequence, 32]`).
fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../converters/onnx/tests/data/dynamic")
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn bounded_dims_verify_at_several_sizes() {
    let dir = scratch_dir("bounded-verify");
    let onnx = data().join("transformer_dynamo.onnx");
    let out = dir.join("t.kes");
    let convert = |extra: &[&str]| {
        let mut args = vec!["convert", s(&onnx), "-o", s(&out)];
        args.extend_from_slice(extra);
        kestrel(&args)
    };

    // Random inputs: min, odd middle, max, then the worst of them.
    let (ok, text, err) = convert(&["--dim", "sequence=..64", "--verify"]);
    assert!(ok, "{err}");
    for at in ["sequence=1, batch 4", "sequence=33, batch 4", "sequence=64, batch 4", "worst of 3 runs"] {
        assert!(text.contains(&format!("verify     {at}")), "{at} missing:\n{text}");
    }

    // Files, each at its size, in the JSON report.
    let (s13, s5) = (data().join("transformer_dynamo_s13_src.npy"), data().join("transformer_dynamo_s5_src.npy"));
    let (ok, text, err) = convert(&["--dim", "sequence=2..16", "--verify", s(&s13), "--verify", s(&s5), "--json"]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let runs = j["verify_runs"].as_array().unwrap_or_else(|| panic!("verify_runs: {text}"));
    assert_eq!(runs.len(), 2, "{text}");
    for (run, t) in runs.iter().zip([13, 5]) {
        assert_eq!(run["dims"]["sequence"], t, "{run}");
        assert_eq!(run["batch"], 2, "{run}");
        assert!(run["max_abs_err"].as_f64().unwrap() < 1e-4, "{run}");
        assert!(run["max_rel_err"].as_f64().unwrap() < 1e-4, "{run}");
    }
    let worst = runs.iter().map(|r| r["max_abs_err"].as_f64().unwrap()).fold(0.0, f64::max);
    assert_eq!(j["verify"]["max_abs_err"].as_f64(), Some(worst), "{text}");

    // Outside the range: the file, the dim and the range.
    let (ok, _, err) = convert(&["--dim", "sequence=2..12", "--verify", s(&s5), "--verify", s(&s13)]);
    assert!(!ok, "converted and verified out of range");
    for want in ["transformer_dynamo_s13_src.npy", "`sequence` = 13 is outside its range 2..=12"] {
        assert!(err.contains(want), "{want:?} missing: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");

    // A fixed size verifies as before: one line, no dims.
    let (ok, text, err) = convert(&["--dim", "sequence=5", "--verify", s(&s5)]);
    assert!(ok, "{err}");
    assert!(text.contains("verify     batch 2: max abs err"), "{text}");
    std::fs::remove_dir_all(dir).ok();
}
