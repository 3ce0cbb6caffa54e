//! `kestrel bench ops`: a roofline benchmark of every op kind the CPU runtime has, so that slow
//! generic ops are visible.
//!
//! **Cases.** One table ([`cases()`]) generated from a few lists: every [`UnaryOp`], every
//! [`BinaryOp`] in six broadcast forms (same shape, a scalar on either side, per-channel `[C, 1, 1]`
//! against `[C, H, W]`, a row `[W]`, a two-sided `[C, 1, W]` against `[H, 1]`), every [`ReduceOp`]
//! over the last and a middle axis, softmax, layer norm (last axis and channels), transposes,
//! slices (a window, a stride-2 subsample, a piece of a concat, a pad), gathers (constant and
//! computed indices) at four working-set sizes (4 KiB, 128 KiB, 2 MiB, 64 MiB of inputs + outputs:
//! L1, L2, L3 and DRAM here); pooling and every convolution form on MobileNetV2-like maps; dense at
//! GEMV and GEMM shapes, matmul, SDPA, LSTM/GRU, embedding and each attention mechanism at one
//! shape. Each case is a one-node model built with [`ModelBuilder`](kestrel_rt::ModelBuilder), f32 weights, random values in
//! the op's domain.
//!
//! **Timing.** A batch-1 CPU session (`--threads` sets the pool); the node alone is timed with a
//! clock read before and after it ([`kestrel_rt_cpu::Session::run_with`]'s hooks, as
//! [`kestrel_rt::profile`] does), so the session's input and output copies are not counted. Its
//! **copy peer**, a `memcpy` of half the case's bytes into another buffer (so the same number of
//! bytes is read + written), is timed the same way, interleaved with it: after warm-up, five
//! rounds of (op runs for `case_ms / 5`, copies for `case_ms / 10`). Both take the median run,
//! less the measured cost of a clock read; copies shorter than 2 µs are repeated within one
//! timed interval (a 4 KiB copy takes about as long as reading the clock). As the session copies
//! the op's inputs in before it and its output out after it, the copy's source is refreshed from
//! another buffer before each interval and its destination read out after it (untimed), and the
//! buffers sit at different offsets within a page (no 4K aliasing).
//!
//! **Roofline.** Bytes and FLOPs from the runtime's cost model ([`kestrel_rt::profile::op_bytes`]:
//! inputs + output + weights once; [`kestrel_rt::profile::op_flops`]: none for data movement). A
//! case is memory-bound when its FLOP/byte is below the machine balance at its size (FMA peak ÷
//! its copy peer's bandwidth): its efficiency is its GB/s over the copy's (target ≥ 50 %);
//! otherwise compute-bound, efficiency = GFLOP/s over the FMA peak (target ≥ 60 %). The peak is
//! `kestrel bench gemm`'s probe ([`crate::bench_gemm::peak_gflops`]) × threads, measured at the
//! start and the end of the run (the higher is used).

mod cases;
mod report;

use anyhow::{bail, Context, Result};
use kestrel_rt::format::ops::*;
use kestrel_rt::{Input, Model};
use serde::Serialize;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use cases::*;
use report::*;

/// Timed rounds per case (op runs, then copies, in turn).
const ROUNDS: usize = 5;

// ---------------------------------------------------------------- timing

/// Median and fastest of a set of run times (ns).
#[derive(Clone, Copy, Debug, Default)]
struct Times {
    median_ns: f64,
    min_ns: f64,
    runs: usize,
}

fn summarise(mut ns: Vec<f64>) -> Times {
    ns.sort_by(f64::total_cmp);
    let n = ns.len();
    let median_ns = if n == 0 {
        0.0
    } else if n % 2 == 1 {
        ns[n / 2]
    } else {
        0.5 * (ns[n / 2 - 1] + ns[n / 2])
    };
    Times { median_ns, min_ns: ns.first().copied().unwrap_or(0.0), runs: n }
}

/// What reading the clock twice costs (the median of many back-to-back pairs), ns: taken off
/// every timed run (the op's and the copy's alike).
fn clock_overhead_ns() -> f64 {
    let ns = (0..20_001)
        .map(|_| {
            let t = Instant::now();
            t.elapsed().as_nanos() as f64
        })
        .collect();
    summarise(ns).median_ns
}

/// Runs `f` (one timed interval of `per` runs, returning its ns) until at least `min_runs`
/// intervals and `secs` of wall time, pushing each interval's time less the clock's cost, over
/// `per`, into `out`.
fn run_for(
    secs: f64,
    min_runs: usize,
    clock: f64,
    per: usize,
    out: &mut Vec<f64>,
    mut f: impl FnMut() -> Result<f64>,
) -> Result<()> {
    let t0 = Instant::now();
    let mut n = 0;
    while n < min_runs || t0.elapsed().as_secs_f64() < secs {
        out.push((f()? - clock).max(0.5) / per as f64);
        n += 1;
    }
    Ok(())
}

/// The time of a node that does almost nothing (`Neg` of one element): what every node costs
/// beyond its kernel's work (dispatch, shapes, the timing hooks), ns.
fn node_floor_ns(case_s: f64, clock: f64, threads: usize) -> Result<f64> {
    let c = CaseDef {
        family: "unary",
        name: "node floor".into(),
        variant: "Neg".into(),
        shape: "[1]".into(),
        spec: Spec::Unary { op: UnaryOp::Neg, x: vec![1] },
    };
    let (model, feeds) = build(&c, 1)?;
    Ok(time_case(&model, &feeds, 8, case_s, clock, threads)?.0.median_ns)
}

/// The `len` bytes of `buf` (which has 4096 to spare) starting at byte `phase` of a page.
fn page_phase(buf: &mut [u8], len: usize, phase: usize) -> &mut [u8] {
    let at = (phase + 4096 - buf.as_ptr() as usize % 4096) % 4096;
    &mut buf[at..at + len]
}

/// A copy peer's timed interval is at least this long (copies repeated within it): a single
/// L1-sized copy takes about as long as the clock read, so it is measured over many.
const COPY_INTERVAL_NS: f64 = 2_000.0;

/// Times the model's node(s) at batch 1 and a copy of `bytes` (half read, half written),
/// interleaved in [`ROUNDS`] rounds after a warm-up: `case_s` of op runs, half that of copies.
fn time_case(
    model: &Model,
    feeds: &[Feed],
    bytes: usize,
    case_s: f64,
    clock: f64,
    threads: usize,
) -> Result<(Times, Times)> {
    let cpu = model.cpu()?;
    let arena_len = cpu.arena_bytes_threads(1, threads).context("the arena size overflows")?;
    let mut arena = kestrel_rt::mem::zeroed_vec::<u8>(arena_len, "the session's arena")?;
    let table = kestrel_rt_cpu::Table::new(&cpu)?;
    let mut session = kestrel_rt_cpu::Session::new(&cpu, &mut arena, 1)?.with_table(&table)?;
    let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
    let mut outs = kestrel_rt::profile::output_buffers(&cpu, 1)?;
    let mut o: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    let started = Cell::new(Instant::now());
    let spent = Cell::new(0.0f64);
    let mut op_run = || -> Result<f64> {
        spent.set(0.0);
        session.run_with(
            &inputs,
            &mut o,
            |_, _| started.set(Instant::now()),
            |_, _| spent.set(spent.get() + started.get().elapsed().as_nanos() as f64),
        )?;
        Ok(spent.get())
    };
    // The copy's buffers, each at its own offset within a 4 KiB page (no 4K aliasing between
    // the source and the destination): `stage` → `src` before each timed interval and `dst` →
    // `sink` after it, untimed, as the session copies its inputs in before the node and its
    // output out after it (so the copied bytes start and end as warm as the op's).
    let half = (bytes / 2).max(1);
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|i| vec![1 + i as u8; half + 4096]).collect();
    let [stage, src, dst, sink] = &mut bufs[..] else { unreachable!("four buffers") };
    let (stage, src) = (page_phase(stage, half, 0), page_phase(src, half, 1024));
    let (dst, sink) = (page_phase(dst, half, 2048), page_phase(sink, half, 3072));
    let repeats = Cell::new(1usize);
    let mut copy_run = || -> Result<f64> {
        src.copy_from_slice(stage);
        let t0 = Instant::now();
        for _ in 0..repeats.get() {
            dst.copy_from_slice(std::hint::black_box(&*src));
            std::hint::black_box(&mut *dst);
        }
        let ns = t0.elapsed().as_nanos() as f64;
        sink.copy_from_slice(dst);
        Ok(ns)
    };
    let (mut op_ns, mut copy_ns, mut warm) = (Vec::new(), Vec::new(), Vec::new());
    run_for(case_s / 10.0, 2, clock, 1, &mut Vec::new(), &mut op_run)?;
    run_for(case_s / 20.0, 3, clock, 1, &mut warm, &mut copy_run)?;
    let one = summarise(warm).median_ns.max(1.0);
    repeats.set(((COPY_INTERVAL_NS / one).ceil() as usize).clamp(1, 10_000));
    for _ in 0..ROUNDS {
        run_for(case_s / ROUNDS as f64, 1, clock, 1, &mut op_ns, &mut op_run)?;
        run_for(case_s / (2 * ROUNDS) as f64, 1, clock, repeats.get(), &mut copy_ns, &mut copy_run)?;
    }
    Ok((summarise(op_ns), summarise(copy_ns)))
}

// ---------------------------------------------------------------- results

/// One case's result (its JSON object in `ops.json`).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Family and op form, e.g. `binary Add per-channel`.
    pub case: String,
    /// Family (`unary`, `binary`, `reduce`, `conv`, ...).
    pub family: String,
    /// The op kind as the file names it (`Unary`, `Conv2d`, ...).
    pub op: String,
    /// The function or form (`Relu`, `Add`, `3x3 depthwise`, ...).
    pub variant: String,
    /// Shapes in words (per sample, batch 1).
    pub shape: String,
    /// Where the case's bytes fit on this machine: L1, L2, L3, DRAM.
    pub level: String,
    /// Bytes moved ([`kestrel_rt::profile::op_bytes`]: inputs + output + weights once).
    pub bytes: u64,
    /// FLOPs ([`kestrel_rt::profile::op_flops`]; 0 for data movement).
    pub flops: u64,
    /// FLOP per byte.
    pub flop_per_byte: f64,
    /// Median time of the node, µs.
    pub us: f64,
    /// Fastest run, µs.
    pub us_min: f64,
    /// Timed runs.
    pub runs: usize,
    /// bytes / median time.
    pub gbs: f64,
    /// FLOPs / median time.
    pub gflops: f64,
    /// The copy peer's median time, µs.
    pub copy_us: f64,
    /// The copy peer's bandwidth (the same bytes read + written), GB/s.
    pub copy_gbs: f64,
    /// Machine balance at this size: FMA peak / copy bandwidth, FLOP per byte.
    pub balance: f64,
    /// `memory` (FLOP/byte below the balance) or `compute`.
    pub bound: &'static str,
    /// memory: gbs / copy_gbs; compute: gflops / peak.
    pub efficiency: f64,
    /// The target efficiency for the bound.
    pub target: f64,
    /// efficiency ≥ target.
    pub meets_target: bool,
}

/// Per-family counts.
#[derive(Clone, Debug, Serialize)]
pub struct Family {
    /// Family name.
    pub family: String,
    /// Cases.
    pub cases: usize,
    /// Cases below their target.
    pub below_target: usize,
    /// Median efficiency.
    pub median_efficiency: f64,
    /// The least efficient case.
    pub worst_case: String,
    /// Its efficiency.
    pub worst_efficiency: f64,
}

fn families(rows: &[Row]) -> Vec<Family> {
    let mut by: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by.entry(&r.family).or_default().push(r);
    }
    let mut out: Vec<Family> = by
        .into_iter()
        .map(|(family, rs)| {
            let worst = rs.iter().min_by(|a, b| a.efficiency.total_cmp(&b.efficiency)).expect("non-empty");
            Family {
                family: family.to_string(),
                cases: rs.len(),
                below_target: rs.iter().filter(|r| !r.meets_target).count(),
                median_efficiency: summarise(rs.iter().map(|r| r.efficiency).collect()).median_ns,
                worst_case: format!("{} {} ({})", worst.case, worst.shape, worst.level),
                worst_efficiency: worst.efficiency,
            }
        })
        .collect();
    out.sort_by(|a, b| b.below_target.cmp(&a.below_target).then(a.family.cmp(&b.family)));
    out
}

/// The median copy bandwidth per level (the plot's slopes, the report's header).
fn copy_by_level(rows: &[Row]) -> Vec<(&'static str, f64)> {
    ["L1", "L2", "L3", "DRAM"]
        .into_iter()
        .filter_map(|l| {
            let v: Vec<f64> = rows.iter().filter(|r| r.level == l).map(|r| r.copy_gbs).collect();
            (!v.is_empty()).then(|| (l, summarise(v).median_ns))
        })
        .collect()
}

/// `kestrel bench ops` from the command line.
pub fn run_cli(w: &mut String, a: &crate::bench::BenchArgs) -> Result<()> {
    if !a.scaling.mechanisms.is_empty() || a.scaling.plot.is_some() {
        bail!("--mechanisms and --plot belong to `kestrel bench scaling`");
    }
    if a.batch != 1 || a.input.is_some() || a.no_tract {
        bail!("`kestrel bench ops` runs batch 1 on built-in one-node models: --batch, --input and --no-tract do not apply");
    }
    if a.backend.backend != kestrel_rt_cli::backend::Backend::Cpu {
        bail!("`kestrel bench ops` times the CPU runtime (--backend cpu)");
    }
    kestrel_rt_cpu::threads::set_threads(a.threads).map_err(|e| anyhow::anyhow!("--threads: {e}"))?;
    let isa = crate::bench::apply_isa(a.isa.as_deref())?;
    let case_ms = a.ops.case_ms.unwrap_or(if a.ops.quick { 3.0 } else { 100.0 });
    if !case_ms.is_finite() || case_ms <= 0.0 {
        bail!("--case-ms must be a positive number of milliseconds");
    }
    run(w, isa, a.threads, a.ops.quick, case_ms, &a.only, a.json, a.out.as_deref())
}

/// Runs the cases (those whose name contains one of `only`, or all), prints the table (or the
/// JSON object) and writes `ops.md`, `ops.json` and `ops.png` under `out`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    w: &mut String,
    isa: &str,
    threads: usize,
    quick: bool,
    case_ms: f64,
    only: &[String],
    json: bool,
    out: Option<&Path>,
) -> Result<()> {
    let load_start = kestrel_rt_cli::machine::load_average();
    let started = std::time::SystemTime::now();
    let wall = Instant::now();
    let peak_start = crate::bench_gemm::peak_gflops(5) * threads as f64;
    let clock = clock_overhead_ns();
    let floor = node_floor_ns(case_ms / 1e3, clock, threads)?;
    let all = cases(quick);
    let lower: Vec<String> = only.iter().map(|s| s.to_lowercase()).collect();
    let chosen: Vec<&CaseDef> = all
        .iter()
        .filter(|c| {
            let key = format!("{} {}", c.name, c.shape).to_lowercase();
            lower.is_empty() || lower.iter().any(|o| key.contains(o.as_str()))
        })
        .collect();
    if chosen.is_empty() {
        bail!("--only matches none of the {} cases", all.len());
    }
    let pb = indicatif::ProgressBar::new(chosen.len() as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut measured = Vec::with_capacity(chosen.len());
    for (i, c) in chosen.iter().enumerate() {
        pb.set_message(format!("{} {}", c.name, c.shape));
        let (model, feeds) = build(c, 0x0B5_0000 + i as u64)?;
        let cpu = model.cpu()?;
        let file = *cpu.file();
        let graph = kestrel_rt::profile::Graph::file(&file);
        let (mut bytes, mut flops, mut kind) = (0u64, 0u64, String::new());
        for n in 0..file.op_count() {
            let op = file.op(n)?;
            bytes += kestrel_rt::profile::op_bytes(&graph, &op, 1).with_context(|| format!("{}: bytes", c.name))?;
            flops += kestrel_rt::profile::op_flops(&graph, &op).unwrap_or(0);
            kind = op.name().to_string();
        }
        let (op_t, copy_t) = time_case(&model, &feeds, bytes as usize, case_ms / 1e3, clock, threads)
            .with_context(|| format!("timing {}", c.name))?;
        measured.push((c, kind, bytes, flops, op_t, copy_t));
        pb.inc(1);
    }
    pb.finish_and_clear();
    let peak_end = crate::bench_gemm::peak_gflops(5) * threads as f64;
    let peak = peak_start.max(peak_end);
    let mut rows: Vec<Row> = measured
        .into_iter()
        .map(|(c, op, bytes, flops, t, copy)| {
            let gbs = bytes as f64 / t.median_ns;
            let gflops = flops as f64 / t.median_ns;
            let copy_gbs = bytes as f64 / copy.median_ns;
            let balance = peak / copy_gbs;
            let intensity = flops as f64 / bytes as f64;
            let compute = intensity >= balance;
            let (efficiency, target) =
                if compute { (gflops / peak, COMPUTE_TARGET) } else { (gbs / copy_gbs, MEMORY_TARGET) };
            Row {
                case: c.name.clone(),
                family: c.family.to_string(),
                op,
                variant: c.variant.clone(),
                shape: c.shape.clone(),
                level: level_of(bytes).to_string(),
                bytes,
                flops,
                flop_per_byte: intensity,
                us: t.median_ns / 1e3,
                us_min: t.min_ns / 1e3,
                runs: t.runs,
                gbs,
                gflops,
                copy_us: copy.median_ns / 1e3,
                copy_gbs,
                balance,
                bound: if compute { "compute" } else { "memory" },
                efficiency,
                target,
                meets_target: efficiency >= target,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.efficiency.total_cmp(&b.efficiency).then(a.case.cmp(&b.case)));
    let fams = families(&rows);
    let copies = copy_by_level(&rows);
    let machine = kestrel_rt_cli::machine::describe(isa);
    let load_end = kestrel_rt_cli::machine::load_average();
    let below = rows.iter().filter(|r| !r.meets_target).count();
    let seconds = wall.elapsed().as_secs_f64();
    let date = started.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let obj = serde_json::json!({
        "machine": machine,
        "load_average_start": load_start,
        "load_average_end": load_end,
        "started_unix": date,
        "seconds": seconds,
        "threads": threads,
        "batch": 1,
        "quick": quick,
        "case_ms": case_ms,
        "only": only,
        "peak_gflops": peak,
        "peak_gflops_start": peak_start,
        "peak_gflops_end": peak_end,
        "peak_method": "kestrel bench gemm's FMA probe (16 independent FMA chains of the widest vectors), best of 5 runs of ~50 ms, one thread; x threads",
        "copy_method": "memcpy of half the case's bytes into another buffer (bytes read + written = the case's bytes), one thread, timed like the op and interleaved with it",
        "clock_overhead_ns": clock,
        "node_floor_ns": floor,
        "node_floor_method": "median time of a Unary Neg node over one element (a 4-byte input), timed as the cases are",
        "targets": { "memory_bound": MEMORY_TARGET, "compute_bound": COMPUTE_TARGET },
        "copy_gbs_by_level": copies.iter().map(|&(l, g)| (l.to_string(), g)).collect::<BTreeMap<_, _>>(),
        "cases_below_target": below,
        "families": fams,
        "cases": rows,
    });
    let md = markdown(&rows, &fams, &copies, &obj, quick)?;
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("ops.md"), &md)?;
        std::fs::write(dir.join("ops.json"), json_lines(&obj)?)?;
        plot(&rows, peak, &copies, &dir.join("ops.png"), &obj)?;
    }
    if json {
        writeln!(w, "{obj}")?;
    } else {
        w.push_str(&md);
    }
    Ok(())
}
