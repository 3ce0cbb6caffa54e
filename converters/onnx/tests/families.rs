//! The CI sample of the enumerated model families (`tests/data/families/`, a few of the smallest
//! exports of `python -m kestrel_torch.families`; the full run and its table are
//! `examples/families.rs` and `docs/model-families.md`), held against `expected.txt`: an export
//! listed `pass` must still convert and match onnxruntime's `output.npy` within 1e-4 of the
//! largest |output|. Exports that newly pass are printed, not failed;
//! `KESTREL_UPDATE_FAMILIES=1` rewrites the file.

use kestrel_rt_cpu::panics::catch_quietly;
use kestrel_rt_onnx::{compare, convert, model_dirs, read_npy, run_kestrel, ConvertOptions, InputData};
use std::collections::BTreeMap;
use std::path::Path;

const REL_TOL: f64 = 1e-4;

/// Converts one export and compares Kestrel with onnxruntime: `Ok(relative error)` within the
/// bound, else why not.
fn check(d: &Path) -> Result<f64, String> {
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
    let last = expected.shape.last().copied().unwrap_or(1);
    let InputData::F32(want) = expected.data else { return Err("output.npy is not float32".into()) };
    let got = run_kestrel(&conv.kes, &inputs).map_err(|e| format!("run: {e}"))?;
    let first = got.first().ok_or("no output")?;
    let (abs, rel, _, _) =
        compare(std::slice::from_ref(&want), std::slice::from_ref(first), &[last]).map_err(|e| e.to_string())?;
    if rel <= REL_TOL {
        Ok(rel)
    } else {
        Err(format!("largest error {abs:.3e}, {rel:.2e} of the largest |output| (bound {REL_TOL:.0e})"))
    }
}

/// `name pass|fail` per line; `#` starts a comment.
fn read_expected(path: &Path) -> BTreeMap<String, bool> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [name, "pass"] => (name.to_string(), true),
            [name, "fail"] => (name.to_string(), false),
            _ => panic!("{}: `{l}` is not `<export> pass|fail`", path.display()),
        })
        .collect()
}

#[test]
fn families_sample_holds_its_expectations() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/families");
    let expected_path = root.join("expected.txt");
    let dirs = model_dirs(&root).expect("the sample folder");
    assert!(!dirs.is_empty(), "no exports under {}", root.display());
    let mut now = BTreeMap::new();
    for d in &dirs {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let result = catch_quietly(|| check(d)).unwrap_or_else(|panic| Err(format!("panicked: {panic}")));
        match &result {
            Ok(rel) => println!("{name}: pass (relative error {rel:.1e})"),
            Err(e) => println!("{name}: fail: {}", e.lines().next().unwrap_or_default()),
        }
        now.insert(name, result);
    }

    if std::env::var("KESTREL_UPDATE_FAMILIES").is_ok_and(|v| v == "1") {
        let mut text = String::from(
            "# Kestrel on the CI sample of the model families, one `<export> pass|fail` per line.\n\
             # Written by KESTREL_UPDATE_FAMILIES=1 cargo test -p kestrel-rt-onnx --test suite families::.\n",
        );
        for (name, r) in &now {
            text.push_str(&format!("{name} {}\n", if r.is_ok() { "pass" } else { "fail" }));
        }
        std::fs::write(&expected_path, text).expect("writing expected.txt");
        return;
    }

    let expected = read_expected(&expected_path);
    let mut regressions = Vec::new();
    for (name, &want) in &expected {
        match now.get(name) {
            None => regressions.push(format!("{name}: listed in expected.txt but not in the sample")),
            Some(Err(e)) if want => regressions.push(format!("{name}: no longer passes: {e}")),
            _ => {}
        }
    }
    for (name, r) in &now {
        if r.is_ok() && expected.get(name) != Some(&true) {
            println!("{name} newly passes (KESTREL_UPDATE_FAMILIES=1 records it)");
        }
    }
    assert!(regressions.is_empty(), "{} regression(s):\n{}", regressions.len(), regressions.join("\n"));
}
