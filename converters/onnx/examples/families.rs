//! Converts every export of the enumerated model families (`python -m kestrel_torch.families
//! --out OUT`: torchvision, timm, Hugging Face transformers; both PyTorch exporters) and measures
//! each against onnxruntime's `output.npy`: f32 error, int8-weight agreement, fused attention,
//! Kestrel's median latency against onnxruntime's (one thread each). Writes `OUT/results.json`
//! and the table `docs/model-families.md` (totals, blockers ranked by the exports they block,
//! one row per export).
//!
//! ```text
//! cargo run --release -p kestrel-rt-onnx --example families -- OUT [--only FILTER] [--doc PATH]
//! cargo run --release -p kestrel-rt-onnx --example families -- OUT --results A.json --results B.json
//! ```
//!
//! `--only` measures the exports whose path contains FILTER (`/timm/`, say); `--results` measures
//! nothing and writes the table from earlier runs' `results.json` (a run split by source).

use indicatif::{ProgressBar, ProgressStyle};
use kestrel_rt::Input;
use kestrel_rt_cpu::panics::catch_quietly;
use kestrel_rt_onnx::{compare, convert, read_npy, ConvertError, ConvertOptions, DType, InputData, InputTensor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The bound on Kestrel's largest error relative to the largest |onnxruntime output|.
const REL_TOL: f64 = 1e-4;
/// Timed Kestrel runs per export (after one warm-up run); the median is reported.
const RUNS: usize = 7;

/// What happened to one export (or one model that could not be built or exported).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Row {
    source: String,
    model: String,
    family: String,
    kind: String,
    /// `legacy`, `dynamo`, or `build` for a model that could not be built.
    exporter: String,
    params: u64,
    /// `build-failed`, `export-failed`, `blocked` (the converter refused it), `convert-error`,
    /// `run-error`, `mismatch` (converted and ran, error over the bound), `pass`.
    status: String,
    /// The export's or build's error (torch's), or the converter's / runtime's.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Every blocking ONNX op of a refused conversion: (op, why).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    blockers: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    f32_max_abs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    f32_rel: Option<f64>,
    /// int8 weights: top-1 agreement with onnxruntime (classifiers).
    #[serde(skip_serializing_if = "Option::is_none")]
    int8_top1: Option<f64>,
    /// int8 weights: largest error relative to the largest |output| (other outputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    int8_rel: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    int8_error: Option<String>,
    /// Fused attention-like mechanisms (attention, attention on activations, AFT, Fastformer) in the
    /// f32 conversion.
    #[serde(skip_serializing_if = "Option::is_none")]
    attention_fused: Option<usize>,
    /// Softmax nodes in the ONNX graph (an upper bound on the attentions there are to fuse).
    softmax_onnx: usize,
    /// Attention-shaped softmaxes left unfused, `name: reason` (the convert report's list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unfused_attention: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kestrel_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ort_ms: Option<f64>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut out = None;
    let mut only = String::new();
    let mut doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/model-families.md");
    let mut results = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--only" => only = it.next().cloned().unwrap_or_default(),
            "--results" => results.push(PathBuf::from(it.next().expect("--results FILE"))),
            "--doc" => doc = PathBuf::from(it.next().expect("--doc PATH")),
            _ => out = Some(PathBuf::from(a)),
        }
    }
    let out = out.expect("usage: families OUT [--only FILTER] [--doc PATH] [--results FILE]…");
    if !results.is_empty() {
        // Only the table, from earlier runs' results.json (a run split by source, say).
        let mut rows: Vec<Row> = Vec::new();
        for r in &results {
            let text = std::fs::read_to_string(r).unwrap_or_else(|e| panic!("{}: {e}", r.display()));
            rows.extend(serde_json::from_str::<Vec<Row>>(&text).unwrap_or_else(|e| panic!("{}: {e}", r.display())));
        }
        std::fs::write(&doc, markdown(&rows, &not_run(&out), &out))
            .unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        let t = totals(&rows);
        println!(
            "exports attempted {}, exported {}, converted {}, matched {} ({:.1} % of exported); wrote {}",
            t.attempted,
            t.exported,
            t.converted,
            t.matched,
            pct(t.matched, t.exported),
            doc.display()
        );
        return;
    }
    let metas = collect(&out, &only);
    let bar = ProgressBar::new(metas.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    // Rows already measured (an interrupted run's results.json) are kept, not redone; the file is
    // rewritten after every export, so a run stopped at any point resumes.
    let done: Vec<Row> = std::fs::read_to_string(out.join("results.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let mut rows = Vec::new();
    for (dir, meta) in &metas {
        bar.set_message(dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
        let key =
            (s(meta, "source"), s(meta, "model"), meta.get("exporter").and_then(Value::as_str).unwrap_or("build"));
        if let Some(r) = done.iter().find(|r| {
            (r.source.as_str(), r.model.as_str(), r.exporter.as_str()) == (key.0.as_str(), key.1.as_str(), key.2)
        }) {
            rows.push(r.clone());
            bar.inc(1);
            continue;
        }
        let row = measure(dir, meta);
        if bar.is_hidden() || (row.status != "pass" && !matches!(row.status.as_str(), "build-failed" | "export-failed"))
        {
            let line = format!(
                "{:40} {:12} {}",
                format!("{}/{}-{}", row.source, row.model, row.exporter),
                row.status,
                row.error.as_deref().unwrap_or("").lines().next().unwrap_or("").chars().take(140).collect::<String>()
            );
            // Without a terminal the bar is hidden, and so is its println: one line per export.
            if bar.is_hidden() {
                eprintln!("[{}/{}] {line}", rows.len() + 1, metas.len());
            } else {
                bar.println(line);
            }
        }
        rows.push(row);
        let json = serde_json::to_string_pretty(&rows).expect("rows serialise");
        std::fs::write(out.join("results.json"), json + "\n").expect("writing results.json");
        bar.inc(1);
    }
    bar.finish_with_message("done");
    let json = serde_json::to_string_pretty(&rows).expect("rows serialise");
    std::fs::write(out.join("results.json"), json + "\n").expect("writing results.json");
    let not_run = not_run(&out);
    let text = markdown(&rows, &not_run, &out);
    std::fs::write(&doc, text).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let t = totals(&rows);
    println!(
        "exports attempted {}, exported {}, converted {}, matched within {REL_TOL:.0e} {} ({:.1} % of exported); \
         wrote {} and {}",
        t.attempted,
        t.exported,
        t.converted,
        t.matched,
        pct(t.matched, t.exported),
        out.join("results.json").display(),
        doc.display()
    );
}

/// Every `meta.json` under `OUT/<source>/<name>/`, with timm's fallback members dropped where
/// their family has a member that exported (the family is represented by that member).
fn collect(out: &Path, only: &str) -> Vec<(PathBuf, Value)> {
    let mut all = Vec::new();
    for source in ["torchvision", "timm", "hf"] {
        let Ok(entries) = std::fs::read_dir(out.join(source)) else { continue };
        let mut dirs: Vec<PathBuf> =
            entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join("meta.json").is_file()).collect();
        dirs.sort();
        for d in dirs {
            if !d.to_string_lossy().contains(only) {
                continue;
            }
            let meta: Value = match std::fs::read_to_string(d.join("meta.json")).map(|t| serde_json::from_str(&t)) {
                Ok(Ok(v)) => v,
                _ => continue,
            };
            all.push((d, meta));
        }
    }
    // timm: one member per family — the one that exported, else the first tried.
    let exported = |m: &Value| m.get("exporter").is_some() && m.get("export_error").is_none();
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    for (_, m) in all.iter().filter(|(_, m)| s(m, "source") == "timm") {
        let fam = s(m, "family");
        if exported(m) || !chosen.contains_key(&fam) {
            let better = exported(m) || m.get("exporter").is_some();
            if better || !chosen.contains_key(&fam) {
                chosen.insert(fam, s(m, "model"));
            }
        }
    }
    all.retain(|(_, m)| s(m, "source") != "timm" || chosen.get(&s(m, "family")) == Some(&s(m, "model")));
    all
}

fn s(m: &Value, key: &str) -> String {
    m.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn first_line(e: &str) -> String {
    e.lines().next().unwrap_or_default().to_string()
}

fn inputs(d: &Path) -> Result<Vec<InputTensor>, String> {
    let mut v = vec![read_npy(d.join("input.npy")).map_err(|e| e.to_string())?];
    for i in 1.. {
        let p = d.join(format!("input{i}.npy"));
        if !p.exists() {
            break;
        }
        v.push(read_npy(p).map_err(|e| e.to_string())?);
    }
    Ok(v)
}

fn measure(dir: &Path, meta: &Value) -> Row {
    let mut row = Row {
        source: s(meta, "source"),
        model: s(meta, "model"),
        family: s(meta, "family"),
        kind: s(meta, "kind"),
        exporter: meta.get("exporter").and_then(Value::as_str).unwrap_or("build").to_string(),
        params: meta.get("params").and_then(Value::as_u64).unwrap_or(0),
        softmax_onnx: meta.pointer("/onnx_ops/Softmax").and_then(Value::as_u64).unwrap_or(0) as usize,
        ort_ms: meta.get("ort_median_ms").and_then(Value::as_f64),
        ..Row::default()
    };
    if let Some(e) = meta.get("build_error").and_then(Value::as_str) {
        row.status = "build-failed".into();
        row.error = Some(e.to_string());
        return row;
    }
    if let Some(e) = meta.get("export_error").and_then(Value::as_str) {
        row.status = "export-failed".into();
        row.error = Some(e.to_string());
        return row;
    }
    match catch_quietly(|| measure_export(dir, &mut row)) {
        Ok(()) => {}
        Err(panic) => {
            row.status = "panic".into();
            row.error = Some(format!("panicked: {panic}"));
        }
    }
    row
}

fn measure_export(dir: &Path, row: &mut Row) {
    let onnx = dir.join("model.onnx");
    let conv = match convert(&onnx, &ConvertOptions::default()) {
        Ok(c) => c,
        Err(ConvertError::Unsupported { blockers, .. }) => {
            row.status = "blocked".into();
            row.blockers = blockers.iter().map(|b| (b.op.clone(), b.why.clone())).collect();
            row.error = Some(
                blockers.iter().map(|b| format!("{} `{}`: {}", b.op, b.node, b.why)).collect::<Vec<_>>().join("; "),
            );
            return;
        }
        Err(e) => {
            row.status = "convert-error".into();
            row.error = Some(strip_path(&format!("{e:#}"), &onnx));
            return;
        }
    };
    row.unfused_attention =
        conv.report.unfused_attention.iter().map(|u| format!("{}: {}", u.softmax, u.reason)).collect();
    row.attention_fused = Some(
        conv.report
            .fused
            .iter()
            .filter(|f| matches!(f.name.as_str(), "attention" | "sdpa" | "fastformer") || f.name.starts_with("aft-"))
            .map(|f| f.count)
            .sum(),
    );
    let data = match inputs(dir) {
        Ok(d) => d,
        Err(e) => {
            row.status = "run-error".into();
            row.error = Some(e);
            return;
        }
    };
    let want = match read_npy(dir.join("output.npy")).map(|t| t.data) {
        Ok(InputData::F32(w)) => w,
        Ok(_) => {
            row.status = "run-error".into();
            row.error = Some("output.npy is not float32".into());
            return;
        }
        Err(e) => {
            row.status = "run-error".into();
            row.error = Some(e.to_string());
            return;
        }
    };
    let last = read_npy(dir.join("output.npy")).ok().and_then(|t| t.shape.last().copied()).unwrap_or(1);
    let (got, ms) = match run_timed(&conv.kes, &data, RUNS) {
        Ok(r) => r,
        Err(e) => {
            row.status = "run-error".into();
            row.error = Some(e);
            return;
        }
    };
    row.kestrel_ms = Some(ms);
    match got.first().map(|g| compare(std::slice::from_ref(&want), std::slice::from_ref(g), &[last])) {
        Some(Ok((abs, rel, _, _))) => {
            row.f32_max_abs = Some(abs);
            row.f32_rel = Some(rel);
            let finite = abs.is_finite();
            row.status = if finite && rel <= REL_TOL { "pass" } else { "mismatch" }.into();
            if row.status == "mismatch" {
                row.error = Some(format!("largest error {abs:.3e}, {rel:.2e} of the largest |output|"));
            }
        }
        Some(Err(e)) => {
            row.status = "mismatch".into();
            row.error = Some(e.to_string());
        }
        None => {
            row.status = "run-error".into();
            row.error = Some("Kestrel gave no output".into());
        }
    }
    // int8 weights.
    let opts = ConvertOptions { weights: DType::I8, ..ConvertOptions::default() };
    let classifier = matches!(row.source.as_str(), "torchvision" | "timm") && want.len() == last && last > 1;
    match convert(&onnx, &opts)
        .map_err(|e| first_line(&strip_path(&format!("{e:#}"), &onnx)))
        .and_then(|c| run_timed(&c.kes, &data, 0).map(|(g, _)| g).map_err(|e| first_line(&e)))
    {
        Ok(g) => match g.first().map(|g| compare(std::slice::from_ref(&want), std::slice::from_ref(g), &[last])) {
            Some(Ok((_, rel, top1, _))) => {
                if classifier {
                    row.int8_top1 = Some(top1);
                }
                row.int8_rel = Some(rel);
            }
            Some(Err(e)) => row.int8_error = Some(e.to_string()),
            None => row.int8_error = Some("no output".into()),
        },
        Err(e) => row.int8_error = Some(e),
    }
}

fn strip_path(msg: &str, path: &Path) -> String {
    msg.replace(&format!("{}: ", path.display()), "")
}

/// Runs the model once (its outputs), then `runs` more times; returns the outputs and the median
/// milliseconds of the timed runs (the first run's time when `runs` is 0).
fn run_timed(kes: &[u8], inputs: &[InputTensor], runs: usize) -> Result<(Vec<Vec<f32>>, f64), String> {
    let model = kestrel_rt::Model::from_bytes(kes).map_err(|e| format!("load: {e}"))?;
    let cpu = model.cpu().map_err(|e| format!("load: {e}"))?;
    let per_sample: Option<Vec<usize>> =
        cpu.input(0).ok().map(|t| t.shape.dims().iter().map(|&d| d as usize).collect());
    let batch = match inputs.first() {
        Some(i) if Some(&i.shape) == per_sample.as_ref() => 1,
        Some(i) => i.shape.first().copied().unwrap_or(1).max(1),
        None => 1,
    };
    let mut session = model.session(batch).map_err(|e| format!("session: {e}"))?;
    let feeds: Vec<Input<'_>> = inputs.iter().map(InputTensor::as_input).collect();
    let t0 = Instant::now();
    let out = session.run_vec(&feeds).map_err(|e| format!("run: {e}"))?;
    let mut times = vec![t0.elapsed().as_secs_f64() * 1e3];
    if runs > 0 {
        times.clear();
        for _ in 0..runs {
            let t = Instant::now();
            session.run_vec(&feeds).map_err(|e| format!("run: {e}"))?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok((out, times[times.len() / 2]))
}

/// The exports one blocker class blocks, an example export and its exact text.
type Blocked = (BTreeSet<String>, String, String);

#[derive(Default)]
struct Totals {
    models: usize,
    build_failed: usize,
    attempted: usize,
    exported: usize,
    converted: usize,
    matched: usize,
}

fn totals(rows: &[Row]) -> Totals {
    let models: BTreeSet<(&str, &str)> = rows.iter().map(|r| (r.source.as_str(), r.model.as_str())).collect();
    let exports: Vec<&Row> = rows.iter().filter(|r| r.exporter != "build").collect();
    let exported: Vec<&&Row> = exports.iter().filter(|r| r.status != "export-failed").collect();
    Totals {
        models: models.len(),
        build_failed: rows.iter().filter(|r| r.status == "build-failed").count(),
        attempted: exports.len(),
        exported: exported.len(),
        converted: exported
            .iter()
            .filter(|r| !matches!(r.status.as_str(), "blocked" | "convert-error" | "panic"))
            .count(),
        matched: exported.iter().filter(|r| r.status == "pass").count(),
    }
}

fn pct(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

/// A failure's class for ranking: numbers and quoted names taken out.
fn class(text: &str) -> String {
    let mut out = String::new();
    let mut in_tick = false;
    let mut last_digit = false;
    for c in text.chars() {
        if c == '`' {
            in_tick = !in_tick;
            if in_tick {
                out.push_str("`…`");
            }
            continue;
        }
        if in_tick {
            continue;
        }
        if c.is_ascii_digit() {
            if !last_digit {
                out.push('N');
            }
            last_digit = true;
            continue;
        }
        last_digit = false;
        out.push(c);
    }
    out.chars().take(200).collect()
}

fn not_run(out: &Path) -> Vec<(String, String, Vec<String>)> {
    let mut v = Vec::new();
    for source in ["torchvision", "timm", "hf"] {
        let p = out.join(source).join("not_run.json");
        if let Ok(Ok(j)) = std::fs::read_to_string(&p).map(|t| serde_json::from_str::<Value>(&t)) {
            let models: Vec<String> = j
                .get("models")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|m| m.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            v.push((source.to_string(), s(&j, "reason"), models));
        }
    }
    v
}

fn skipped(out: &Path) -> Vec<(String, usize, usize)> {
    let mut v = Vec::new();
    for source in ["torchvision", "timm", "hf"] {
        let p = out.join(source).join("enumerated.json");
        if let Ok(Ok(j)) = std::fs::read_to_string(&p).map(|t| serde_json::from_str::<Value>(&t)) {
            let n = j.get("models").and_then(Value::as_array).map_or(0, Vec::len);
            let k = j.get("skipped").and_then(Value::as_array).map_or(0, Vec::len);
            v.push((source.to_string(), n, k));
        }
    }
    v
}

fn fmt_e(v: Option<f64>) -> String {
    v.map_or_else(|| "".into(), |x| format!("{x:.1e}"))
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ").chars().take(160).collect()
}

fn markdown(rows: &[Row], not_run: &[(String, String, Vec<String>)], out: &Path) -> String {
    let t = totals(rows);
    let mut m = String::new();
    let _ = writeln!(
        m,
        "# Model families through the converter\n\n\
         Generated by `cargo run --release -p kestrel-rt-onnx --example families -- OUT` over the exports of\n\
         `python -m kestrel_torch.families --out OUT` (`converters/python/kestrel_torch/families.py`); do not edit by\n\
         hand. The models come from the libraries' registries, not from a list: every torchvision\n\
         classification model under 50 M parameters, the smallest member of every timm architecture family\n\
         (by registering module) that builds and exports, and every Hugging Face `AutoModel` type built from\n\
         a tiny configuration (random init, nothing downloaded; encoder-decoders export their encoder). Each\n\
         is exported with the legacy exporter (opset 17) and the dynamo exporter (opset 18), static shapes,\n\
         batch 1; onnxruntime's output on the same inputs is the reference.\n\n\
         \"Matched\" means Kestrel's largest absolute error is at most {REL_TOL:.0e} of the largest |output|. int8:\n\
         weights of rank ≥ 2 stored int8 — top-1 agreement with onnxruntime for the torchvision/timm\n\
         classifiers, else the relative error. Attention: fused attention/AFT/Fastformer ops, beside the\n\
         Softmax nodes of the ONNX graph. Time: Kestrel's median of {RUNS} runs against onnxruntime's median\n\
         (both one thread, batch 1, this machine; the bench was run on a shared 2-core VM, so times are\n\
         indicative).\n"
    );
    let _ = writeln!(m, "## Totals\n");
    let _ = writeln!(m, "| | count |\n|---|---|");
    let _ = writeln!(m, "| models (source × model) | {} |", t.models);
    let _ = writeln!(m, "| models that could not be built (tiny config, inputs) | {} |", t.build_failed);
    let _ = writeln!(m, "| exports attempted | {} |", t.attempted);
    let _ = writeln!(
        m,
        "| exported (torch's exporter and onnxruntime succeeded) | {} ({:.1} %) |",
        t.exported,
        pct(t.exported, t.attempted)
    );
    let _ = writeln!(m, "| converted | {} ({:.1} % of exported) |", t.converted, pct(t.converted, t.exported));
    let _ = writeln!(
        m,
        "| **converted and matched onnxruntime within {REL_TOL:.0e}** | **{} ({:.1} % of exported; target 95 %)** |",
        t.matched,
        pct(t.matched, t.exported)
    );
    let _ = writeln!(m);
    let _ = writeln!(m, "Per source:\n\n| source | models | build failed | exports | exported | converted | matched | % |\n|---|---|---|---|---|---|---|---|");
    for source in ["torchvision", "timm", "hf"] {
        let r: Vec<Row> = rows.iter().filter(|r| r.source == source).cloned().collect();
        let t = totals(&r);
        let _ = writeln!(
            m,
            "| {source} | {} | {} | {} | {} | {} | {} | {:.1} |",
            t.models,
            t.build_failed,
            t.attempted,
            t.exported,
            t.converted,
            t.matched,
            pct(t.matched, t.exported)
        );
    }
    let _ = writeln!(m);
    let sk = skipped(out);
    if !sk.is_empty() || !not_run.is_empty() {
        let _ = writeln!(m, "Enumerated and not run:\n");
        for (source, n, k) in &sk {
            let _ = writeln!(m, "- {source}: {n} enumerated, {k} left out at enumeration (see `OUT/{source}/enumerated.json`: over 50 M parameters, or no member builds)");
        }
        for source in ["torchvision", "timm", "hf"] {
            if rows.iter().any(|r| r.source == source) {
                continue;
            }
            // Exports written by the Python side but not in these results: say so, with counts.
            let (mut ok, mut failed) = (0, 0);
            for e in std::fs::read_dir(out.join(source)).into_iter().flatten().flatten() {
                if let Ok(Ok(v)) =
                    std::fs::read_to_string(e.path().join("meta.json")).map(|t| serde_json::from_str::<Value>(&t))
                {
                    if v.get("exporter").is_some() {
                        if v.get("export_error").is_some() {
                            failed += 1
                        } else {
                            ok += 1
                        }
                    }
                }
            }
            if ok + failed > 0 {
                let _ = writeln!(
                    m,
                    "- {source}: **not measured in this table**: {} exports attempted, {ok} exported (before timm's one-per-family selection), none converted here yet — run the example over `OUT/{source}`",
                    ok + failed
                );
            }
        }
        for (source, reason, models) in not_run {
            let _ = writeln!(m, "- {source}: {} not run — {reason}: {}", models.len(), models.join(", "));
        }
        let _ = writeln!(m);
    }

    // Blockers ranked by the exports they block.
    let mut by: BTreeMap<String, Blocked> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.exporter != "build" && r.status != "export-failed" && r.status != "pass") {
        let name = format!("{}/{}-{}", r.source, r.model, r.exporter);
        if r.status == "blocked" {
            for (op, why) in &r.blockers {
                let key = format!("{op}: {}", class(why));
                let e = by.entry(key).or_insert_with(|| (BTreeSet::new(), name.clone(), format!("{op}: {why}")));
                e.0.insert(name.clone());
            }
        } else {
            let text = r.error.clone().unwrap_or_default();
            let key = format!("({}) {}", r.status, class(&first_line(&text)));
            let e = by.entry(key).or_insert_with(|| (BTreeSet::new(), name.clone(), first_line(&text)));
            e.0.insert(name.clone());
        }
    }
    let mut ranked: Vec<(&String, &Blocked)> = by.iter().collect();
    ranked.sort_by(|a, b| b.1 .0.len().cmp(&a.1 .0.len()).then(a.0.cmp(b.0)));
    let _ = writeln!(
        m,
        "## Blockers, ranked by the exports they block\n\n\
         One line per blocking ONNX op and reason (numbers and node names folded); an export with several\n\
         blockers counts under each. `(mismatch)`: converted and ran but the error is over the bound;\n\
         `(convert-error)`/`(run-error)`/`(panic)`: the converter or runtime failed otherwise.\n\n\
         | # | exports | blocker | example export | exact text (example) |\n|---|---|---|---|---|"
    );
    for (i, (key, (set, example, text))) in ranked.iter().enumerate() {
        let _ = writeln!(m, "| {} | {} | {} | `{}` | {} |", i + 1, set.len(), cell(key), example, cell(text));
    }
    let _ = writeln!(m);

    // Export failures (torch's), grouped.
    let mut ex: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.status == "export-failed" || r.status == "build-failed") {
        let text = r.error.clone().unwrap_or_default();
        let key = format!("{}: {}", r.status, class(&text).chars().take(90).collect::<String>());
        let e = ex.entry(key).or_insert((0, format!("{}/{}-{}", r.source, r.model, r.exporter)));
        e.0 += 1;
    }
    let mut exr: Vec<_> = ex.into_iter().collect();
    exr.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    let _ = writeln!(
        m,
        "## Build and export failures (not the converter's)\n\n| count | failure | example |\n|---|---|---|"
    );
    for (key, (n, example)) in exr.iter().take(60) {
        let _ = writeln!(m, "| {n} | {} | `{example}` |", cell(key));
    }
    if exr.len() > 60 {
        let _ = writeln!(m, "| … | {} more classes in `results.json` | |", exr.len() - 60);
    }
    let _ = writeln!(m);

    let _ = writeln!(
        m,
        "## Every export\n\n| source | model | family | kind | exporter | params | status | f32 rel err | int8 | attention fused / ONNX Softmax | Kestrel ms | ORT ms | blocker or error |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let int8 = match (r.int8_top1, r.int8_rel, &r.int8_error) {
            (Some(t), _, _) => format!("top-1 {:.0} %", 100.0 * t),
            (None, Some(e), _) => format!("rel {e:.1e}"),
            (_, _, Some(e)) => format!("error: {}", cell(&e.chars().take(60).collect::<String>())),
            _ => String::new(),
        };
        let attn = r.attention_fused.map_or_else(String::new, |a| format!("{a} / {}", r.softmax_onnx));
        let err = if r.status == "blocked" {
            let ops: BTreeSet<&str> = r.blockers.iter().map(|(o, _)| o.as_str()).collect();
            format!("blocked by {}", ops.into_iter().collect::<Vec<_>>().join(", "))
        } else if r.status == "pass" {
            String::new()
        } else {
            r.error.as_deref().map(first_line).unwrap_or_default()
        };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.source,
            r.model,
            r.family,
            r.kind,
            r.exporter,
            if r.params > 0 { format!("{:.2} M", r.params as f64 / 1e6) } else { String::new() },
            r.status,
            fmt_e(r.f32_rel),
            int8,
            attn,
            r.kestrel_ms.map_or_else(String::new, |x| format!("{x:.2}")),
            r.ort_ms.map_or_else(String::new, |x| format!("{x:.2}")),
            cell(&err)
        );
    }
    m
}
