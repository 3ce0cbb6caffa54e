//! `kestrel bench paper`: Table 5 of "You Need to Pay Better Attention" (DESIGN.md §4), with
//! tract running the same ONNX in the same process.
//!
//! The models are the paper's four at their real shapes with random weights (timing only),
//! exported by `benches/paper/export_paper_models.py` into `--models` (one directory per model,
//! the fixture layout: model.onnx + meta.json). For each model: Kestrel (converted from that ONNX,
//! f32 weights) at batch 1 and batched, Kestrel with int8 weights at batch 1, and tract (the
//! same ONNX, optimised plan for each batch size) at batch 1 and batched. Every figure is a
//! median over `--reps` timed passes of `--samples` samples after a warm-up pass; the "5,000
//! samples" seconds are 5000 × the median µs/sample (extrapolated unless `--samples 5000`). At
//! each batch size the three runtimes' passes are interleaved ([`time_interleaved`]): the
//! peer ratios are taken over the same stretch of time.

use crate::bench::{
    apply_isa, kestrel_pass, make_feeds, scaling_flags_only_there, time_interleaved, time_kestrel, BenchArgs, Feed,
    Pass, Stats,
};
use anyhow::{bail, Context, Result};
use kestrel_rt::format::DType;
use kestrel_rt::Model;
use kestrel_rt_cli::backend::{Backend, BackendArgs};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;

/// Paper samples.
const PAPER_SAMPLES: f64 = 5000.0;

/// The paper's M2 seconds for 5,000 samples (DESIGN.md §4): `(task, mechanism, heads, s)`.
const PAPER: &[(&str, &str, usize, f64)] = &[
    ("mnist", "standard", 1, 2.53),
    ("mnist", "standard", 2, 2.72),
    ("mnist", "standard", 4, 3.27),
    ("mnist", "optimised", 1, 2.45),
    ("mnist", "optimised", 2, 2.64),
    ("mnist", "optimised", 4, 3.16),
    ("mnist", "efficient", 1, 2.32),
    ("mnist", "super", 1, 2.50),
    ("cifar100", "standard", 1, 35.68),
    ("cifar100", "standard", 2, 41.34),
    ("cifar100", "standard", 4, 51.52),
    ("cifar100", "standard", 6, 55.47),
    ("cifar100", "optimised", 1, 34.51),
    ("cifar100", "optimised", 2, 40.70),
    ("cifar100", "optimised", 4, 51.01),
    ("cifar100", "optimised", 6, 52.18),
    ("cifar100", "efficient", 1, 32.29),
    ("cifar100", "super", 1, 33.45),
    ("imdb", "standard", 1, 0.219),
    ("imdb", "standard", 2, 0.247),
    ("imdb", "standard", 4, 0.284),
    ("imdb", "optimised", 1, 0.213),
    ("imdb", "optimised", 2, 0.242),
    ("imdb", "optimised", 4, 0.284),
    ("imdb", "efficient", 1, 0.208),
    ("imdb", "super", 1, 0.221),
    ("amazon", "standard", 1, 1.43),
    ("amazon", "standard", 2, 1.54),
    ("amazon", "standard", 4, 2.09),
    ("amazon", "optimised", 1, 1.40),
    ("amazon", "optimised", 2, 1.52),
    ("amazon", "optimised", 4, 2.05),
    ("amazon", "efficient", 1, 1.23),
    ("amazon", "super", 1, 1.22),
];

const TASKS: &[&str] = &["mnist", "cifar100", "imdb", "amazon"];
const MECHS: &[&str] =
    &["standard", "optimised", "efficient", "super", "aft_full", "aft_local", "aft_simple", "aft_conv", "fastformer"];

/// One benchmark row.
struct Row {
    task: String,
    mechanism: String,
    heads: usize,
    name: String,
    kes_b1: Stats,
    kes_bb: Stats,
    kes_i8_b1: Stats,
    /// Batched, int8 weights, one thread.
    kes_i8_bb: Stats,
    /// Batched with `--threads` threads (None with one thread).
    kes_bb_mt: Option<Stats>,
    tract_b1: Option<Stats>,
    tract_bb: Option<Stats>,
    paper_s: Option<f64>,
}

impl Row {
    /// Kestrel's fastest configuration (µs/sample, label) over batch 1, batched, int8 batched
    /// and batched on every thread: what Table 5 is compared with.
    fn best(&self, bb: usize, threads: usize) -> (f64, String) {
        let mut best = (self.kes_b1.us_per_sample, "f32 b1".to_string());
        let mut cand = vec![
            (self.kes_bb.us_per_sample, format!("f32 b{bb}")),
            (self.kes_i8_b1.us_per_sample, "int8 b1".to_string()),
            (self.kes_i8_bb.us_per_sample, format!("int8 b{bb}")),
        ];
        if let Some(m) = self.kes_bb_mt {
            cand.push((m.us_per_sample, format!("f32 b{bb} {threads}T")));
        }
        for c in cand {
            if c.0 < best.0 {
                best = c;
            }
        }
        best
    }
}

fn paper_seconds(task: &str, mech: &str, heads: usize) -> Option<f64> {
    PAPER.iter().find(|(t, m, h, _)| *t == task && *m == mech && *h == heads).map(|p| p.3)
}

/// The exported model directories in table order: `(task, mechanism, heads, dir)`.
fn model_dirs(root: &Path, only: &[String]) -> Result<Vec<(String, String, usize, PathBuf)>> {
    let mut out = Vec::new();
    for task in TASKS {
        for mech in MECHS {
            for h in 1..=8 {
                let name = format!("{task}_{mech}_h{h}");
                let dir = root.join(&name);
                if dir.join("model.onnx").exists()
                    && (only.is_empty() || only.iter().any(|o| name.contains(o.as_str())))
                {
                    out.push((task.to_string(), mech.to_string(), h, dir));
                }
            }
        }
    }
    if out.is_empty() {
        bail!(
            "no exported paper models under {} (run: PYTHONPATH=converters/python python3 \
             benches/paper/export_paper_models.py --out {})",
            root.display(),
            root.display()
        );
    }
    Ok(out)
}

/// A [`crate::bench::Pass`] running tract on `onnx` with an optimised plan for batch
/// `batch` (built here, once), on the same data as `feed`.
fn tract_pass(onnx: &Path, feed: &Feed, per_shape: &[usize], batch: usize) -> Result<impl FnMut(usize) -> Result<()>> {
    let mut shape = vec![batch];
    shape.extend_from_slice(per_shape);
    let (dt, tensor) = match feed {
        Feed::F32 { per, data } => (f32::datum_type(), Tensor::from_shape(&shape, &data[..batch * per])?),
        Feed::I64 { per, data } => (i64::datum_type(), Tensor::from_shape(&shape, &data[..batch * per])?),
    };
    // As the converter does: keep the exported symbolic batch axis (intermediate value infos
    // name it), type the model, then bind the symbol to `batch`.
    // tract runs with its panics caught (a panic there is an error for this row, not an abort).
    let tract_panic = |m: String| anyhow::anyhow!("tract panicked on {}: {m}", onnx.display());
    let plan = kestrel_rt_cpu::panics::catch_quietly(|| -> Result<_> {
        let model = tract_onnx::onnx().model_for_path(onnx)?;
        let fact = model.input_fact(0)?.clone();
        let mut symbols = std::collections::HashMap::new();
        let mut symbolic = false;
        if let Some(TDim::Sym(s)) = fact.shape.dims().next().and_then(|d| d.concretize()) {
            symbols.insert(s, TDim::Val(batch as i64));
            symbolic = true;
        }
        let model = if symbolic { model } else { model.with_input_fact(0, InferenceFact::dt_shape(dt, &shape))? };
        model.into_typed()?.set_symbols(&symbols)?.into_optimized()?.into_runnable()
    })
    .map_err(tract_panic)??;
    Ok(move |n: usize| {
        let mut done = 0;
        while done < n {
            // The input clone is a memcpy of one batch, negligible next to the model.
            kestrel_rt_cpu::panics::catch_quietly(|| plan.run(tvec![tensor.clone().into()]))
                .map_err(|m| anyhow::anyhow!("tract panicked while running: {m}"))??;
            done += batch;
        }
        Ok(())
    })
}

/// Times, interleaved ([`time_interleaved`]), Kestrel with f32 and with int8 weights and, when it
/// builds, tract, all at batch `batch` on one thread. Returns (f32, int8, tract).
#[allow(clippy::too_many_arguments)]
fn time_side_by_side(
    m32: &Model,
    m8: &Model,
    feeds: &[Feed],
    tract: Option<(&Path, &[usize])>,
    batch: usize,
    samples: usize,
    reps: usize,
    notes: &mut Vec<String>,
    name: &str,
) -> Result<(Stats, Stats, Option<Stats>)> {
    let cpu = BackendArgs::new(Backend::Cpu);
    let (mut k32, _) = kestrel_pass(m32, feeds, batch, &cpu)?;
    let (mut k8, _) = kestrel_pass(m8, feeds, batch, &cpu)?;
    // tract cannot always build an optimised plan (its codegen fails on some exported graphs):
    // the row then says "-" and the note records tract's error.
    let mut t = match tract.map(|(onnx, shape)| tract_pass(onnx, &feeds[0], shape, batch)).transpose() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("[bench paper] {name}: tract failed at batch {batch}: {e:#}");
            notes.push(format!(
                "{name}: tract failed at batch {batch}: {}",
                format!("{e:#}").lines().next().unwrap_or("")
            ));
            None
        }
    };
    let mut passes: Vec<&mut Pass<'_>> = vec![&mut k32, &mut k8];
    if let Some(t) = t.as_mut() {
        passes.push(t);
    }
    let mut stats = time_interleaved(samples, reps, &mut passes)?.into_iter();
    let (s32, s8) = (stats.next().unwrap_or_default(), stats.next().unwrap_or_default());
    Ok((s32, s8, stats.next()))
}

fn per_sample_shape(dir: &Path) -> Result<Vec<usize>> {
    let path = dir.join("meta.json");
    kestrel_rt_cli::check_input_file(&path)?;
    let meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let shape = meta["input"]["shape"].as_array().context("meta.json: input.shape")?;
    Ok(shape.iter().skip(1).map(|v| v.as_u64().unwrap_or(0) as usize).collect())
}

fn convert(onnx: &Path, weights: DType) -> Result<Model> {
    kestrel_rt_cli::check_input_file(onnx)?;
    let opts = kestrel_rt_onnx::ConvertOptions { weights, ..Default::default() };
    let conv = kestrel_rt_onnx::convert(onnx, &opts).with_context(|| format!("converting {}", onnx.display()))?;
    Ok(Model::from_bytes(&conv.kes)?)
}

fn tract_label(tract: &Option<(&Path, &[usize])>) -> &'static str {
    if tract.is_some() {
        ", tract"
    } else {
        ""
    }
}

/// `kestrel bench paper` from the command line: its flag checks, the ISA, then [`run`].
pub fn run_cli(w: &mut String, a: &BenchArgs) -> Result<()> {
    if a.backend.backend != Backend::Cpu {
        bail!("`kestrel bench paper` times the CPU runtime (and tract); time a GPU with `kestrel bench M.kes --backend wgpu`");
    }
    let isa = apply_isa(a.isa.as_deref())?;
    scaling_flags_only_there(a)?;
    run(w, a, isa)
}

/// `kestrel bench paper`.
pub fn run(w: &mut String, a: &BenchArgs, isa: &str) -> Result<()> {
    let dirs = model_dirs(&a.models, &a.only)?;
    // Everything compared with tract runs on one thread (tract's plans are single-threaded);
    // only the extra batched column uses `--threads`.
    let threads = a.threads;
    let set = |n: usize| kestrel_rt_cpu::threads::set_threads(n).map_err(|e| anyhow::anyhow!("threads: {e}"));
    set(1)?;
    let bb = a.paper_batch.max(1);
    // Whole batches for the batched runs.
    let samples_bb = a.samples.div_ceil(bb) * bb;
    let mut rows = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for (task, mech, heads, dir) in dirs {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        eprintln!("[bench paper] {name}: converting");
        let onnx = dir.join("model.onnx");
        let model = convert(&onnx, DType::F32)?;
        let m8 = convert(&onnx, DType::I8)?;
        let feeds = make_feeds(&model, None, bb)?;
        // tract's input shape comes from meta.json (not read with --no-tract).
        let shape = if a.no_tract { Vec::new() } else { per_sample_shape(&dir)? };
        let tract = (!a.no_tract).then_some((onnx.as_path(), shape.as_slice()));
        eprintln!("[bench paper] {name}: kestrel f32, kestrel int8{} at batch 1, interleaved", tract_label(&tract));
        let (kes_b1, kes_i8_b1, tract_b1) =
            time_side_by_side(&model, &m8, &feeds, tract, 1, a.samples, a.reps, &mut notes, &name)?;
        eprintln!("[bench paper] {name}: the same at batch {bb}");
        let (kes_bb, kes_i8_bb, tract_bb) =
            time_side_by_side(&model, &m8, &feeds, tract, bb, samples_bb, a.reps, &mut notes, &name)?;
        drop(m8);
        let kes_bb_mt = if threads > 1 {
            set(threads)?;
            let s = time_kestrel(&model, &feeds, samples_bb, bb, a.reps);
            set(1)?;
            Some(s?)
        } else {
            None
        };
        drop(model);
        let paper_s = paper_seconds(&task, &mech, heads);
        let row = Row {
            task,
            mechanism: mech,
            heads,
            name,
            kes_b1,
            kes_bb,
            kes_i8_b1,
            kes_i8_bb,
            kes_bb_mt,
            tract_b1,
            tract_bb,
            paper_s,
        };
        eprintln!(
            "[bench paper] {}: kestrel {:.1} µs/sample (batch {bb}: {:.1}), int8 {:.1}, tract {}",
            row.name,
            row.kes_b1.us_per_sample,
            row.kes_bb.us_per_sample,
            row.kes_i8_b1.us_per_sample,
            row.tract_b1.map_or("-".into(), |s| format!("{:.1}", s.us_per_sample))
        );
        rows.push(row);
        write_outputs(&rows, &notes, a, bb, isa)?;
    }
    set(threads)?;
    let md = write_outputs(&rows, &notes, a, bb, isa)?;
    w.push_str(&md);
    writeln!(
        w,
        "written to {} (chart: cargo run --release -p kestrel-bench -- chart {})",
        a.paper_out().display(),
        a.paper_out().display()
    )?;
    Ok(())
}

/// Writes table.md, results.csv and results.json (after every row); returns the Markdown.
fn write_outputs(rows: &[Row], notes: &[String], a: &BenchArgs, bb: usize, isa: &str) -> Result<String> {
    let out = a.paper_out();
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let machine = machine_description(isa);
    let mut md = markdown(rows, a, bb, &machine);
    for n in notes {
        let _ = writeln!(md, "\n- {n}");
    }
    std::fs::write(out.join("table.md"), &md)?;
    std::fs::write(out.join("results.csv"), csv(rows, bb))?;
    let mut j = json(rows, a, bb, &machine);
    j["notes"] = serde_json::json!(notes);
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(&j)? + "\n")?;
    Ok(md)
}

fn secs(us: f64) -> f64 {
    us * PAPER_SAMPLES / 1e6
}

fn machine_description(isa: &str) -> serde_json::Value {
    kestrel_rt_cli::machine::describe(isa)
}

fn markdown(rows: &[Row], a: &BenchArgs, bb: usize, machine: &serde_json::Value) -> String {
    let mut s = String::new();
    let t = a.threads;
    let _ = writeln!(s, "# Table 5 benchmark (`kestrel bench paper`)\n");
    let _ = writeln!(
        s,
        "Machine: {} ({} logical cores, ISA flags {}), Kestrel kernels `{}`. Random weights (timing only), the \
         paper's model shapes. Each figure: median of {} passes of {} samples after a warm-up pass (spread in \
         results.csv); seconds for 5,000 samples = 5000 × median µs/sample. Batched runs use batch {bb}. Every \
         column runs one thread except \"{t}T\" (Kestrel's worker pool); tract runs its optimised plan on one \
         thread in the same process. At each batch size the Kestrel f32, Kestrel int8 and tract passes are \
         interleaved (one of each in turn, every repetition), so a slow spell of the shared machine falls on all \
         three.\n\n\
         - *vs tract* (the peer comparison): Kestrel f32 and int8 weights at batch 1, one thread, over tract at \
         batch 1.\n\
         - *vs paper* (Table 5): Kestrel's fastest configuration on this machine (batch 1 or {bb}, f32 or int8, \
         1 or {t} threads; the paper does not state its batch size) over the paper's M2 seconds.\n",
        machine["cpu"].as_str().unwrap_or("?"),
        machine["logical_cores"],
        machine["isa_flags"]
            .as_array()
            .map(|f| f.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        machine["kestrel_isa"].as_str().unwrap_or("?"),
        a.reps,
        a.samples,
    );
    let mt = if t > 1 { format!(" | f32 b{bb} {t}T") } else { String::new() };
    let _ = writeln!(
        s,
        "| model | f32 b1 | f32 b{bb}{mt} | int8 b1 | int8 b{bb} | tract b1 | tract b{bb} | f32/tract b1 | int8/tract b1 | paper M2 s | best (config) | best/paper |"
    );
    let _ =
        writeln!(s, "|---|---:|---:|{}---:|---:|---:|---:|---:|---:|---:|---:|---:|", if t > 1 { "---:|" } else { "" });
    for r in rows {
        let f = |st: &Stats| format!("{:.3}", secs(st.us_per_sample));
        let o = |st: Option<Stats>| st.map_or("-".into(), |st| f(&st));
        let ratio = |k: &Stats| r.tract_b1.map_or("-".into(), |t| format!("{:.2}", k.us_per_sample / t.us_per_sample));
        let (best, label) = r.best(bb, t);
        let mtv = if t > 1 { format!(" | {}", o(r.kes_bb_mt)) } else { String::new() };
        let _ = writeln!(
            s,
            "| {} | {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {:.3} ({label}) | {} |",
            r.name,
            f(&r.kes_b1),
            f(&r.kes_bb),
            mtv,
            f(&r.kes_i8_b1),
            f(&r.kes_i8_bb),
            o(r.tract_b1),
            o(r.tract_bb),
            ratio(&r.kes_b1),
            ratio(&r.kes_i8_b1),
            r.paper_s.map_or("-".into(), |p| format!("{p}")),
            secs(best),
            r.paper_s.map_or("-".into(), |p| format!("{:.3}", secs(best) / p)),
        );
    }
    let _ = writeln!(s, "\nAll figures are seconds for 5,000 samples.");
    s
}

fn csv(rows: &[Row], bb: usize) -> String {
    let mut s = String::from("task,mechanism,heads,model,batched_batch");
    for k in
        ["kestrel_b1", "kestrel_bb", "kestrel_int8_b1", "kestrel_int8_bb", "kestrel_bb_threads", "tract_b1", "tract_bb"]
    {
        let _ = write!(s, ",{k}_us_median,{k}_us_min,{k}_us_max,{k}_s_5000");
    }
    s.push_str(",paper_m2_s,kestrel_b1_over_paper,kestrel_best_over_paper\n");
    for r in rows {
        let _ = write!(s, "{},{},{},{},{bb}", r.task, r.mechanism, r.heads, r.name);
        for st in
            [Some(r.kes_b1), Some(r.kes_bb), Some(r.kes_i8_b1), Some(r.kes_i8_bb), r.kes_bb_mt, r.tract_b1, r.tract_bb]
        {
            match st {
                Some(t) => {
                    let _ = write!(
                        s,
                        ",{:.3},{:.3},{:.3},{:.4}",
                        t.us_per_sample,
                        t.us_per_sample_min,
                        t.us_per_sample_max,
                        secs(t.us_per_sample)
                    );
                }
                None => s.push_str(",,,,"),
            }
        }
        match r.paper_s {
            Some(p) => {
                let best = r.best(bb, 0).0;
                let _ = writeln!(s, ",{p},{:.4},{:.4}", secs(r.kes_b1.us_per_sample) / p, secs(best) / p);
            }
            None => s.push_str(",,,\n"),
        }
    }
    s
}

fn best_json((us, label): (f64, String)) -> serde_json::Value {
    serde_json::json!({ "us_per_sample": us, "config": label, "seconds_per_5000": secs(us) })
}

fn stats_json(s: &Stats) -> serde_json::Value {
    serde_json::json!({
        "us_per_sample": s.us_per_sample,
        "us_per_sample_min": s.us_per_sample_min,
        "us_per_sample_max": s.us_per_sample_max,
        "samples_per_s": s.samples_per_s,
        "seconds_per_5000": secs(s.us_per_sample),
    })
}

fn json(rows: &[Row], a: &BenchArgs, bb: usize, machine: &serde_json::Value) -> serde_json::Value {
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "task": r.task, "mechanism": r.mechanism, "heads": r.heads, "model": r.name,
                "kestrel_b1": stats_json(&r.kes_b1),
                "kestrel_batched": stats_json(&r.kes_bb),
                "kestrel_int8_b1": stats_json(&r.kes_i8_b1),
                "kestrel_int8_batched": stats_json(&r.kes_i8_bb),
                "kestrel_batched_threads": r.kes_bb_mt.as_ref().map(stats_json),
                "kestrel_best": best_json(r.best(bb, a.threads)),
                "kestrel_best_over_paper": r.paper_s.map(|p| secs(r.best(bb, a.threads).0) / p),
                "tract_b1": r.tract_b1.as_ref().map(stats_json),
                "tract_batched": r.tract_bb.as_ref().map(stats_json),
                "paper_m2_s": r.paper_s,
                "kestrel_b1_over_paper": r.paper_s.map(|p| secs(r.kes_b1.us_per_sample) / p),
            })
        })
        .collect();
    serde_json::json!({
        "machine": machine,
        "weights": "random (timing only); the paper's model shapes",
        "samples_per_pass": a.samples,
        "reps": a.reps,
        "batched_batch": bb,
        "threads": a.threads,
        "rows": rows,
    })
}
