//! The CI sample of the ONNX backend node test cases (`tests/data/conformance/`, see its
//! README) and a sample of them on random data (`tests/data/conformance-random/`) through
//! Kestrel, each held against its folder's `expected.txt`: a case listed `pass` must still pass.
//! Cases that newly pass are printed, not failed; `KESTREL_UPDATE_CONFORMANCE=1` rewrites the
//! file. The full suite and the table are `examples/conformance.rs`'s.

use crate::harness;

use std::collections::BTreeMap;
use std::path::Path;

/// `name pass|fail` per line; `#` starts a comment.
fn read_expected(path: &Path) -> BTreeMap<String, bool> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [name, "pass"] => (name.to_string(), true),
            [name, "fail"] => (name.to_string(), false),
            _ => panic!("{}: `{l}` is not `<case> pass|fail`", path.display()),
        })
        .collect()
}

#[test]
fn conformance_sample_holds_its_expectations() {
    holds_expectations("conformance");
}

/// A few of the cases again on random data (`converters/conformance/randomize.py`, see
/// `tests/data/conformance-random/README.md`): activations over both signs and large
/// magnitudes, log-softmax over wide rows.
#[test]
fn random_data_sample_holds_its_expectations() {
    holds_expectations("conformance-random");
}

/// Runs every case under `tests/data/<folder>` and holds the results against its `expected.txt`.
fn holds_expectations(folder: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(folder);
    let expected_path = root.join("expected.txt");
    let dirs = harness::case_dirs(&root, None).expect("the sample folder");
    assert!(!dirs.is_empty(), "no cases under {}", root.display());
    let results: Vec<harness::CaseResult> = dirs.iter().map(|d| harness::run_case(d, false)).collect();
    let now: BTreeMap<String, (bool, Option<String>)> = results
        .iter()
        .map(|r| {
            let k = r.kestrel.as_ref();
            (r.name.clone(), (k.is_some_and(harness::Outcome::passed), k.and_then(|k| k.message.clone())))
        })
        .collect();
    let passed = now.values().filter(|(p, _)| *p).count();
    println!("{passed} passed, {} failed", now.len() - passed);

    if std::env::var("KESTREL_UPDATE_CONFORMANCE").is_ok_and(|v| v == "1") {
        let what = match folder {
            "conformance" => "the CI sample of the ONNX node test cases".to_string(),
            f => format!("tests/data/{f}"),
        };
        let mut text = format!(
            "# Kestrel on {what}, one `<case> pass|fail` per line.\n\
             # Written by KESTREL_UPDATE_CONFORMANCE=1 cargo test -p kestrel-rt-onnx --test suite conformance::.\n",
        );
        for (name, (p, _)) in &now {
            text.push_str(&format!("{name} {}\n", if *p { "pass" } else { "fail" }));
        }
        std::fs::write(&expected_path, text).expect("writing expected.txt");
        println!("rewrote {}", expected_path.display());
        return;
    }

    let expected = read_expected(&expected_path);
    let mut regressions = Vec::new();
    for (name, &want) in &expected {
        match now.get(name) {
            None => regressions.push(format!("{name}: listed in expected.txt but not in the sample")),
            Some((false, message)) if want => {
                regressions.push(format!("{name}: no longer passes: {}", message.as_deref().unwrap_or("?")))
            }
            _ => {}
        }
    }
    let newly: Vec<&String> =
        now.iter().filter(|(n, (p, _))| *p && expected.get(*n) != Some(&true)).map(|(n, _)| n).collect();
    if !newly.is_empty() {
        println!(
            "{} case(s) newly pass (KESTREL_UPDATE_CONFORMANCE=1 records them): {}",
            newly.len(),
            newly.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    let unlisted: Vec<&String> = now.keys().filter(|n| !expected.contains_key(*n)).collect();
    if !unlisted.is_empty() {
        println!("{} case(s) not in expected.txt yet", unlisted.len());
    }
    assert!(regressions.is_empty(), "{} regression(s):\n{}", regressions.len(), regressions.join("\n"));
}
