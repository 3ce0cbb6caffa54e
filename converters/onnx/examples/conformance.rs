//! The ONNX backend node test cases through Kestrel and tract, and the conformance table.
//!
//! ```text
//! python converters/conformance/generate.py /tmp/onnx-cases
//! cargo run --release -p kestrel-rt-onnx --example conformance -- /tmp/onnx-cases [--out DIR]
//!     [--only SUBSTR] [--doc PATH] [--no-tract] [--timeout SECONDS]
//! ```
//!
//! Every case (`model.onnx`, `input_<i>.npy`, `output_<i>.npy`, `case.json`) is converted and
//! run by Kestrel at batch 1 and run by tract from the ONNX file, each compared with the
//! expected outputs (`tests/common/conformance.rs`, shared with the CI sample test). Writes
//! `OUT/results.json` (default OUT: `target/conformance`) and, for a full run, the Markdown
//! table (default `docs/onnx-conformance.md`).

#[path = "../tests/common/conformance.rs"]
mod harness;

use harness::{CaseResult, Outcome};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// A case still running after this long is recorded as a failure (its thread is left behind).
const DEFAULT_TIMEOUT_S: u64 = 120;

struct Args {
    cases: PathBuf,
    out: PathBuf,
    only: Option<String>,
    doc: Option<PathBuf>,
    tract: bool,
    timeout: Duration,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut cases, mut out, mut only, mut doc, mut tract, mut timeout) =
        (None, None, None, None, true, Duration::from_secs(DEFAULT_TIMEOUT_S));
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--only" => only = Some(value("--only")?),
            "--doc" => doc = Some(PathBuf::from(value("--doc")?)),
            "--no-tract" => tract = false,
            "--timeout" => {
                let s = value("--timeout")?;
                timeout = Duration::from_secs(s.parse().map_err(|_| format!("--timeout {s}: not a number"))?);
            }
            _ if a.starts_with("--") => return Err(format!("unknown option {a}")),
            _ if cases.is_none() => cases = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument {a}")),
        }
    }
    let cases = cases.ok_or("usage: conformance CASES_DIR [--out DIR] [--only SUBSTR] [--doc PATH] [--no-tract]")?;
    // The table covers the whole suite: written by default only for a full run with tract.
    let doc = doc.or_else(|| (only.is_none() && tract).then(|| workspace_root().join("docs/onnx-conformance.md")));
    let out = out.unwrap_or_else(|| workspace_root().join("target/conformance"));
    Ok(Args { cases, out, only, doc, tract, timeout })
}

/// Runs a case on its own thread; past `timeout` it is a failure and the thread is left behind.
fn run_with_timeout(dir: &Path, tract: bool, timeout: Duration) -> CaseResult {
    let (tx, rx) = mpsc::channel();
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(harness::run_case(&d, tract));
    });
    rx.recv_timeout(timeout).unwrap_or_else(|_| {
        let meta = harness::read_meta(dir).ok();
        let failed = Outcome {
            status: "fail".into(),
            stage: Some("timeout".into()),
            message: Some(format!("still running after {} s", timeout.as_secs())),
            classes: vec!["timeout".into()],
            ..Outcome::default()
        };
        CaseResult {
            name: meta.as_ref().map_or_else(|| dir.display().to_string(), |m| m.name.clone()),
            op: meta.as_ref().map_or_else(|| "?".into(), |m| m.main_op.clone()),
            expanded: meta.as_ref().is_some_and(|m| m.expanded),
            opset: meta.as_ref().and_then(|m| m.opset),
            variant: meta.as_ref().and_then(|m| m.variant.clone()),
            out_of_scope: None,
            kestrel: Some(failed.clone()),
            tract: tract.then_some(failed),
        }
    })
}

fn main() -> Result<(), String> {
    let args = parse_args()?;
    let dirs =
        harness::case_dirs(&args.cases, args.only.as_deref()).map_err(|e| format!("{}: {e}", args.cases.display()))?;
    if dirs.is_empty() {
        return Err(format!("no case folders (with a case.json) under {}", args.cases.display()));
    }
    let bar = indicatif::ProgressBar::new(dirs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    let mut results = Vec::with_capacity(dirs.len());
    for dir in &dirs {
        bar.set_message(dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        results.push(run_with_timeout(dir, args.tract, args.timeout));
        bar.inc(1);
    }
    bar.finish_and_clear();

    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
    let results_path = args.out.join("results.json");
    std::fs::write(&results_path, json + "\n").map_err(|e| format!("{}: {e}", results_path.display()))?;
    println!("wrote {}", results_path.display());
    if let Some(doc) = &args.doc {
        let suite = std::fs::read_to_string(args.cases.join("suite.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok());
        std::fs::write(doc, markdown(&results, suite.as_ref())).map_err(|e| format!("{}: {e}", doc.display()))?;
        println!("wrote {}", doc.display());
    }
    let totals = Totals::of(results.iter().filter(|r| r.variant.is_none()));
    let constants = Totals::of(results.iter().filter(|r| r.variant.is_some()));
    if constants.in_scope > 0 {
        println!(
            "constant-parameter variants: {} in scope; Kestrel {} passed; tract {} passed",
            constants.in_scope, constants.kestrel, constants.tract
        );
    }
    println!(
        "{} cases, {} in scope; Kestrel {} passed, {} failed; tract {} passed, {} failed",
        results.len(),
        totals.in_scope,
        totals.kestrel,
        totals.in_scope - totals.kestrel,
        totals.tract,
        totals.in_scope - totals.tract
    );
    println!("{} passed, {} failed", totals.kestrel, totals.in_scope - totals.kestrel);
    Ok(())
}

fn passed(o: &Option<Outcome>) -> bool {
    o.as_ref().is_some_and(Outcome::passed)
}

#[derive(Default)]
struct Totals {
    in_scope: usize,
    kestrel: usize,
    tract: usize,
    both: usize,
    kestrel_only: usize,
    tract_only: usize,
}

impl Totals {
    fn of<'a>(results: impl IntoIterator<Item = &'a CaseResult>) -> Self {
        let mut t = Totals::default();
        for r in results.into_iter().filter(|r| r.out_of_scope.is_none()) {
            let (k, tr) = (passed(&r.kestrel), passed(&r.tract));
            t.in_scope += 1;
            t.kestrel += usize::from(k);
            t.tract += usize::from(tr);
            t.both += usize::from(k && tr);
            t.kestrel_only += usize::from(k && !tr);
            t.tract_only += usize::from(!k && tr);
        }
        t
    }
}

/// Kestrel's failure classes: cases where each appears, and cases where it is the only one
/// (those it would unlock on its own), with an example case.
fn failure_classes(results: &[&CaseResult]) -> Vec<(String, usize, usize, String)> {
    let mut classes: BTreeMap<String, (usize, usize, String)> = BTreeMap::new();
    for r in results.iter().filter(|r| r.out_of_scope.is_none()) {
        let Some(k) = r.kestrel.as_ref().filter(|k| !k.passed()) else { continue };
        for c in &k.classes {
            let e = classes.entry(c.clone()).or_insert((0, 0, r.name.clone()));
            e.0 += 1;
            e.1 += usize::from(k.classes.len() == 1);
        }
    }
    let mut v: Vec<_> = classes.into_iter().map(|(c, (n, alone, ex))| (c, n, alone, ex)).collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    v
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The table: how it was made, totals, Kestrel's failure classes ranked, then per op.
fn markdown(results: &[CaseResult], suite: Option<&serde_json::Value>) -> String {
    use std::fmt::Write;
    let get = |k: &str| suite.and_then(|s| s.get(k)).and_then(|v| v.as_str()).unwrap_or("?").to_string();
    let (standard, variants): (Vec<&CaseResult>, Vec<&CaseResult>) = results.iter().partition(|r| r.variant.is_none());
    let t = Totals::of(standard.iter().copied());
    let v = Totals::of(variants.iter().copied());
    let mut s = String::new();
    let _ = writeln!(s, "# ONNX conformance: the backend node test cases\n");
    let _ = writeln!(
        s,
        "Generated — do not edit. The ONNX standard's own backend *node* test cases (onnx {}, cases generated \
         {}), each converted and run by Kestrel at batch 1 and run by tract (0.23, from the ONNX file, \
         optimised) beside it, both compared with the expected outputs (f32 `rtol 1e-3, atol 1e-5`, f16 \
         `rtol 4e-3, atol 1e-3`, widened to a case's own tolerances; integers and bools exact; NaN where NaN \
         is expected). Regenerate with:\n",
        get("onnx_version"),
        get("generated")
    );
    let _ = writeln!(
        s,
        "```sh\npip install -r converters/conformance/requirements.txt\n\
         python converters/conformance/generate.py /tmp/onnx-cases\n\
         cargo run --release -p kestrel-rt-onnx --example conformance -- /tmp/onnx-cases\n```\n"
    );
    let _ = writeln!(
        s,
        "A case is out of scope only for its types or domains (sequence, optional and map values, string \
         tensors, complex, bfloat16 and 2–8-bit element types, training ops, non-default domains), never for \
         its op. `converters/onnx/tests/conformance.rs` runs a committed sample of the cases in CI.\n"
    );
    let _ = writeln!(
        s,
        "Each in-scope case with more than one graph input is also run in a *constant-parameter* variant \
         (`<case>__constants`): the same model and data with every input but the first stored in the model \
         as an initializer. The standard feeds weights, scales, axes and shapes as graph inputs; exported \
         models hold them as constants. The variant is counted apart: the totals and failure classes below \
         are the standard's own cases.\n"
    );
    let _ = writeln!(s, "## Totals\n");
    let _ = writeln!(s, "| | cases |\n|---|---:|");
    let _ = writeln!(s, "| all cases | {} |", standard.len());
    let _ = writeln!(s, "| out of scope | {} |", standard.len() - t.in_scope);
    let _ = writeln!(s, "| in scope | {} |", t.in_scope);
    let _ = writeln!(s, "| Kestrel passed | {} |", t.kestrel);
    let _ = writeln!(s, "| tract passed | {} |", t.tract);
    let _ = writeln!(s, "| both passed | {} |", t.both);
    let _ = writeln!(s, "| Kestrel only | {} |", t.kestrel_only);
    let _ = writeln!(s, "| tract only | {} |", t.tract_only);
    let _ = writeln!(s, "| constant-parameter variants (in scope) | {} |", v.in_scope);
    let _ = writeln!(s, "| … Kestrel passed | {} |", v.kestrel);
    let _ = writeln!(s, "| … tract passed | {} |", v.tract);
    let _ = writeln!(s, "| … tract only | {} |\n", v.tract_only);

    let _ = writeln!(s, "## What Kestrel fails on, by what fixing it would unlock\n");
    let _ = writeln!(
        s,
        "One line per failure class (a refused node's op and reason, or an error's first line, numbers as \
         `N`). *Alone*: the failing cases where it is the only class, which fixing it alone would unlock; \
         *in*: the cases where it appears.\n"
    );
    let _ = writeln!(s, "| alone | in | class | e.g. |\n|---:|---:|---|---|");
    for (class, n, alone, example) in failure_classes(&standard) {
        let _ = writeln!(s, "| {alone} | {n} | {} | `{example}` |", cell(&class));
    }

    let _ = writeln!(s, "\n## Per ONNX op\n");
    let _ = writeln!(
        s,
        "Kestrel's failures: each class once, with its count. Out-of-scope cases are counted in *cases* but \
         run by neither.\n"
    );
    let _ = writeln!(
        s,
        "| op | cases | out of scope | Kestrel pass | Kestrel fail | tract pass | tract fail | constant-parameter \
         variants: Kestrel / tract passed of | Kestrel's failures |"
    );
    let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|---|---|");
    let mut by_op: BTreeMap<&str, Vec<&CaseResult>> = BTreeMap::new();
    for r in &standard {
        by_op.entry(r.op.as_str()).or_default().push(r);
    }
    for (op, rs) in by_op {
        let vt = Totals::of(variants.iter().copied().filter(|r| r.op == op));
        let vcell =
            if vt.in_scope == 0 { String::new() } else { format!("{} / {} of {}", vt.kestrel, vt.tract, vt.in_scope) };
        let mut oos: BTreeMap<&str, usize> = BTreeMap::new();
        for r in rs.iter().filter_map(|r| r.out_of_scope.as_deref()) {
            *oos.entry(r).or_default() += 1;
        }
        let in_scope: Vec<&&CaseResult> = rs.iter().filter(|r| r.out_of_scope.is_none()).collect();
        let kp = in_scope.iter().filter(|r| passed(&r.kestrel)).count();
        let tp = in_scope.iter().filter(|r| passed(&r.tract)).count();
        let mut fails: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &in_scope {
            if let Some(k) = r.kestrel.as_ref().filter(|k| !k.passed()) {
                for c in &k.classes {
                    *fails.entry(c.as_str()).or_default() += 1;
                }
            }
        }
        let mut fails: Vec<_> = fails.into_iter().collect();
        fails.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let oos = oos.iter().map(|(r, n)| format!("{n} ({r})")).collect::<Vec<_>>().join("; ");
        let fails = fails.iter().map(|(c, n)| format!("{n}× {}", cell(c))).collect::<Vec<_>>().join("<br>");
        let _ = writeln!(
            s,
            "| {op} | {} | {} | {kp} | {} | {tp} | {} | {vcell} | {fails} |",
            rs.len(),
            if oos.is_empty() { "0".to_string() } else { oos },
            in_scope.len() - kp,
            in_scope.len() - tp
        );
    }
    s
}
