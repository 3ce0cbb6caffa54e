//! `kestrel bench ops --quick`: every unary and binary op and every op family is timed, each case
//! against its copy peer, and the results (JSON, table, roofline PNG) are consistent.

use crate::support;
use kestrel_rt::format::ops::{BinaryOp, ReduceOp, UnaryOp};
use support::kestrel;

#[test]
fn quick_run_covers_every_op_and_family() {
    let dir = support::scratch_dir("bench-ops");
    let out = dir.to_str().unwrap();
    let (ok, stdout, stderr) = kestrel(&["bench", "ops", "--quick", "--case-ms", "1", "--json", "--out", out]);
    assert!(ok, "{stderr}");
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let cases = j["cases"].as_array().expect("cases");
    let variants = |op: &str| -> Vec<String> {
        cases.iter().filter(|c| c["op"] == op).map(|c| c["variant"].as_str().unwrap().to_string()).collect()
    };
    let (unary, binary, reduce) = (variants("Unary"), variants("Binary"), variants("Reduce"));
    for op in UnaryOp::ALL {
        assert!(unary.contains(&format!("{op:?}")), "Unary {op:?} missing");
    }
    for op in BinaryOp::ALL {
        // Every broadcast form of every binary op.
        let n = binary.iter().filter(|v| **v == format!("{op:?}")).count();
        assert_eq!(n, 6, "Binary {op:?}: {n} broadcast forms");
    }
    for op in ReduceOp::ALL {
        assert!(reduce.contains(&format!("{op:?}")), "Reduce {op:?} missing");
    }
    for c in cases {
        assert!(c["gbs"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["copy_gbs"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["bytes"].as_u64().unwrap() > 0 && c["us"].as_f64().unwrap() > 0.0, "{c}");
        let (eff, target) = (c["efficiency"].as_f64().unwrap(), c["target"].as_f64().unwrap());
        assert!(eff > 0.0 && eff.is_finite(), "{c}");
        assert_eq!(c["meets_target"].as_bool().unwrap(), eff >= target, "{c}");
        match c["bound"].as_str().unwrap() {
            "memory" => assert_eq!(target, 0.5, "{c}"),
            "compute" => assert_eq!(target, 0.6, "{c}"),
            other => panic!("bound {other}"),
        }
    }
    // Sorted worst efficiency first.
    let effs: Vec<f64> = cases.iter().map(|c| c["efficiency"].as_f64().unwrap()).collect();
    assert!(effs.windows(2).all(|w| w[0] <= w[1]), "not sorted by efficiency");
    // Every family, with its count of cases below target.
    let families: Vec<&str> = j["families"].as_array().unwrap().iter().map(|f| f["family"].as_str().unwrap()).collect();
    for f in [
        "unary",
        "binary",
        "reduce",
        "softmax",
        "layernorm",
        "transpose",
        "slice",
        "gather",
        "embedding",
        "pool",
        "conv",
        "dense",
        "matmul",
        "sdpa",
        "rnn",
        "mechanism",
    ] {
        assert!(families.contains(&f), "family {f} missing: {families:?}");
    }
    let below: u64 = j["families"].as_array().unwrap().iter().map(|f| f["below_target"].as_u64().unwrap()).sum();
    assert_eq!(below, j["cases_below_target"].as_u64().unwrap());
    assert_eq!(below as usize, cases.iter().filter(|c| c["meets_target"] == false).count());
    // Every mechanism and convolution form.
    assert_eq!(variants("Conv2d").len(), 9, "{:?}", variants("Conv2d"));
    let mechanisms = cases.iter().filter(|c| c["family"] == "mechanism").count();
    assert_eq!(mechanisms, kestrel_rt::mechanisms::Mechanism::ALL.len());
    assert!(j["peak_gflops"].as_f64().unwrap() > 0.0 && j["node_floor_ns"].as_f64().unwrap() > 0.0);
    // The files.
    let md = std::fs::read_to_string(dir.join("ops.md")).unwrap();
    assert!(md.contains("| family | cases | below target |") && md.contains("meets target"), "{md}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ops.json")).unwrap()).expect("ops.json parses");
    assert_eq!(saved["cases"].as_array().unwrap().len(), cases.len());
    let png = std::fs::read(dir.join("ops.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn only_filters_cases_and_wrong_flags_are_errors() {
    let (ok, stdout, stderr) = kestrel(&["bench", "ops", "--quick", "--case-ms", "1", "--only", "softmax", "--json"]);
    assert!(ok, "{stderr}");
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let cases = j["cases"].as_array().unwrap();
    assert!(!cases.is_empty() && cases.iter().all(|c| c["family"] == "softmax"), "{stdout}");
    let (ok, _, stderr) = kestrel(&["bench", "ops", "--quick", "--only", "no-such-op"]);
    assert!(!ok && stderr.contains("matches none"), "{stderr}");
    let (ok, _, stderr) = kestrel(&["bench", "ops", "--quick", "--batch", "2"]);
    assert!(!ok && stderr.contains("batch 1"), "{stderr}");
    let (ok, _, stderr) = kestrel(&["bench", "gemm", "--quick"]);
    assert!(!ok && stderr.contains("belong to `kestrel bench ops`"), "{stderr}");
}
