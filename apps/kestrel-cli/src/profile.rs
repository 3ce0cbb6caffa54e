//! `kestrel profile`: per-op latency of a model on the CPU (numbers from
//! [`kestrel_rt::profile`]: a host clock around each node) or on the GPU ([`gpu_profile`]: GPU
//! timestamp queries around each node's compute pass), as a table, JSON, a Chrome trace and a
//! PNG bar chart. Each op also gets a roofline line: FLOPs ([`kestrel_rt::profile::op_flops`]),
//! bytes moved ([`kestrel_rt::profile::op_bytes`]), their ratio (arithmetic intensity), the
//! achieved GFLOP/s and GB/s at its median time, and on the GPU its compute dispatches per run.

use crate::backend::{Backend, BackendArgs, GpuRunner, On, Runner};
use crate::classify::BUNDLED;
use anyhow::{bail, Context, Result};
use clap::Args;
use kestrel_rt::format::DType;
use kestrel_rt::profile::{OpTiming, PartTiming, Profile, Timed};
use kestrel_rt::{npy, Input, Model};
use kestrel_rt_wgpu::TimingSource;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `kestrel profile` arguments.
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// A .kes file or a bundled model's name (default: the first bundled model).
    pub model: Option<String>,
    /// Measured runs.
    #[arg(long, short = 'n', default_value_t = 100)]
    pub runs: usize,
    /// Unmeasured warm-up runs.
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Batch size (random inputs; ignored with --input).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Input array (.npy, batch = first axis) instead of seeded random inputs.
    #[arg(long, value_name = "X.npy")]
    pub input: Option<PathBuf>,
    /// Where the model runs.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Write a Chrome trace (chrome://tracing, Perfetto): one event per op per run.
    #[arg(long, value_name = "OUT.json")]
    pub trace: Option<PathBuf>,
    /// Print the profile as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write a PNG bar chart of the per-op mean latency.
    #[arg(long, value_name = "OUT.png")]
    pub plot: Option<PathBuf>,
    /// Rows in the table and bars in the chart (0: all).
    #[arg(long, default_value_t = 25)]
    pub top: usize,
    /// CPU threads (the caller plus a pool of workers; large dense layers are split across them).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

fn load(model: Option<&str>) -> Result<(Model, String)> {
    match model {
        None => Ok((Model::from_bytes(BUNDLED[0].bytes)?, format!("bundled {}", BUNDLED[0].name))),
        Some(name) => match BUNDLED.iter().find(|b| b.name == name) {
            Some(b) => Ok((Model::from_bytes(b.bytes)?, format!("bundled {}", b.name))),
            None => Ok((crate::load_model(name)?, name.to_string())),
        },
    }
}

/// Runs `kestrel profile`.
pub fn run(w: &mut String, args: &ProfileArgs) -> Result<()> {
    if args.runs == 0 || args.batch == 0 {
        bail!("--runs and --batch must be at least 1");
    }
    kestrel_rt_cpu::threads::set_threads(args.threads).map_err(|e| anyhow::anyhow!("--threads: {e}"))?;
    let (model, source) = load(args.model.as_deref())?;
    let cpu = model.cpu()?;
    if cpu.input_count() != 1 {
        bail!("profile feeds one input; this model has {} (give a single-input model)", cpu.input_count());
    }
    let t = cpu.input(0)?;
    let per = t.shape.numel().unwrap_or(0);
    let name = cpu.file().meta().model_name().to_string();
    // A profile times the batch as one run: it must fit the memory budget whole.
    let fits = |batch: usize| -> Result<()> {
        if args.backend.capacity_within(&model, batch)? < batch {
            bail!(
                "profiling batch {batch} as one run needs {} of working memory, over --memory-budget {}",
                kestrel_rt::mem::human_bytes(model.arena_bytes(batch).map_or(u64::MAX, |b| b as u64)),
                kestrel_rt::mem::human_bytes(args.backend.memory_budget as u64)
            );
        }
        Ok(())
    };
    if args.input.is_none() {
        fits(args.batch)?;
    }
    let array = match &args.input {
        Some(p) => {
            crate::check_input_file(p)?;
            let a = npy::read(p)?;
            npy::batch_of(&a, t.shape.dims(), &format!("input ({})", p.display()))?;
            a
        }
        None => {
            let n = per * args.batch;
            let mut shape = vec![args.batch];
            shape.extend(t.shape.dims().iter().map(|&d| d as usize));
            if t.dtype == DType::I32 {
                npy::Array::I64 { shape, data: (0..n).map(|k| (k * 7 % 10) as i64).collect() }
            } else {
                let mut rng = kestrel_rt::demo::Rng::new(42);
                npy::Array::F32 { shape, data: rng.vec(n, 1.0) }
            }
        }
    };
    let feed: Input<'_> = array.input();
    let batch = array.shape().first().copied().unwrap_or(1);
    fits(batch)?;
    // An explicit CPU backend profiles directly; otherwise a GPU session, or the CPU session
    // `auto` fell back to (dropped: the CPU profiler binds its own arena).
    let runner = match args.backend.backend {
        Backend::Cpu => None,
        _ => Some(Runner::new(&model, batch, &args.backend)?),
    };
    if let Some(r) = runner.as_ref().filter(|r| r.capacity() < batch) {
        bail!(
            "profiling batch {batch} as one run does not fit {} (at most {} samples per run there); give a smaller --batch or --input",
            r.on(),
            r.capacity()
        );
    }
    let on = runner.as_ref().map(Runner::on);
    let (prof, backend, timing) = match runner.map(|r| r.on) {
        None | Some(On::Cpu(_)) => {
            let prof = kestrel_rt::profile::profile(&model, &[feed], args.warmup, args.runs)?;
            (prof, "cpu".to_string(), Timing::HostClock)
        }
        Some(On::Gpu(mut gpu)) => {
            let (prof, timing) = gpu_profile(&model, &mut gpu, &[feed], args.warmup, args.runs)?;
            (prof, on.unwrap_or_default(), timing)
        }
    };
    let backend = backend.as_str();
    if timing == Timing::WholeSubmission {
        eprintln!(
            "notice: the adapter has no timestamp queries: only whole-submission times are known, no per-op times"
        );
    }
    if let Some(p) = &args.trace {
        write_file(p, prof.chrome_trace(&name).as_bytes())?;
    }
    if let Some(p) = &args.plot {
        plot(&prof, p, &name, args.top)?;
    }
    if args.json {
        writeln!(w, "{}", serde_json::to_string_pretty(&to_json(&prof, &name, &source, backend, timing))?)?;
    } else {
        write_table(w, &prof, &name, &source, backend, timing, args.top)?;
        if let Some(p) = &args.trace {
            writeln!(w, "trace      {} ({} op events)", p.display(), prof.ops.len() * prof.runs)?;
        }
        if let Some(p) = &args.plot {
            writeln!(w, "plot       {}", p.display())?;
        }
    }
    Ok(())
}

/// How a profile's per-op times were measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// The CPU runtime, a host clock read before and after every node.
    HostClock,
    /// GPU timestamp queries around each node's compute pass.
    GpuTimestamps,
    /// The adapter has no timestamp queries: only whole-submission wall times, no per-op times.
    WholeSubmission,
}

impl Timing {
    /// One line for humans (and the JSON's `timing` field).
    pub fn describe(self) -> &'static str {
        match self {
            Timing::HostClock => "host clock around each node (run_with hooks)",
            Timing::GpuTimestamps => {
                "GPU timestamp queries around each node's compute pass; run totals are host wall time \
                 from input upload to mapped outputs"
            }
            Timing::WholeSubmission => "whole-submission host wall time only (the adapter has no timestamp queries)",
        }
    }
}

/// Per-op GPU latency of `model`: `warmup` unmeasured runs, then `runs` runs of
/// [`GpuSession::run_profiled`](kestrel_rt_wgpu::GpuSession::run_profiled), gathered into the same
/// [`Profile`] the CPU profiler makes. Op times come from timestamp queries where the adapter
/// has them (else the profile has run totals and no ops: see the returned [`Timing`]). In the
/// Chrome trace a run's ops are laid end to end from the run's start (GPU passes run in order;
/// the gaps between them are not measured).
pub fn gpu_profile(
    model: &Model,
    gpu: &mut GpuRunner,
    inputs: &[Input<'_>],
    warmup: usize,
    runs: usize,
) -> Result<(Profile, Timing)> {
    if runs == 0 {
        bail!("profile: at least one measured run is needed");
    }
    let cpu = model.cpu()?;
    let file = *cpu.file();
    let batch = kestrel_rt::profile::batch_of(&cpu, inputs)?;
    let dispatches = gpu.session.node_dispatch_counts();
    let mut outs = kestrel_rt::profile::output_buffers(&cpu, batch)?;
    let mut o: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    for _ in 0..warmup {
        gpu.session.run(inputs, &mut o).context("warm-up run on the GPU")?;
    }
    let arena_bytes = cpu
        .arena_bytes_threads(batch, kestrel_rt_cpu::threads::threads())
        .context("the arena size for this batch overflows")?;
    let mut prof = Profile::empty(&file, batch, warmup, runs, arena_bytes);
    prof.dispatches_per_run = Some(dispatches.iter().sum());
    let mut slot: Vec<Option<usize>> = Vec::new();
    let mut timing = Timing::GpuTimestamps;
    let origin = Instant::now();
    for r in 0..runs {
        let t0 = Instant::now();
        let (_, p) = gpu.session.run_profiled(inputs, &mut o).context("profiled run on the GPU")?;
        prof.total_ns.push(t0.elapsed().as_nanos() as u64);
        let start = (t0 - origin).as_nanos() as u64;
        prof.run_start_ns.push(start);
        if p.source != TimingSource::Timestamps {
            timing = Timing::WholeSubmission;
            continue;
        }
        if r == 0 {
            slot = vec![None; p.nodes.len()];
            for t in p.nodes.iter().filter(|t| t.duration.is_some()) {
                slot[t.node as usize] = Some(prof.ops.len());
                let mut op = OpTiming::for_node(&file, t.node, batch, runs)?;
                op.dispatches = dispatches.get(t.node as usize).copied();
                op.parts =
                    t.dispatches.iter().map(|d| PartTiming { kernel: d.0, ns: Vec::with_capacity(runs) }).collect();
                prof.ops.push(op);
            }
        }
        let mut at = start;
        for t in &p.nodes {
            let (Some(d), Some(Some(i))) = (t.duration, slot.get(t.node as usize)) else { continue };
            let ns = d.as_nanos() as u64;
            let op = &mut prof.ops[*i];
            op.ns.push(ns);
            for (part, (_, pd)) in op.parts.iter_mut().zip(&t.dispatches) {
                part.ns.push(pd.as_nanos() as u64);
            }
            op.start_ns.push(at);
            at += ns;
        }
    }
    if timing == Timing::WholeSubmission {
        prof.ops.clear();
    } else if let Some(o) = prof.ops.iter().find(|o| o.ns.len() != runs) {
        bail!("profile: node {} ({}) was timed in {} of {runs} runs", o.node, o.op, o.ns.len());
    }
    Ok((prof, timing))
}

fn write_file(p: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(p, bytes).with_context(|| format!("writing {}", p.display()))
}

fn us(ns: f64) -> f64 {
    ns / 1e3
}

/// `count / ns`: per-nanosecond is giga-per-second; `None` for a zero time.
fn per_ns(count: u64, ns: u64) -> Option<f64> {
    (ns > 0).then(|| count as f64 / ns as f64)
}

/// The profile as a JSON object (ops sorted by cost, times in microseconds).
pub fn to_json(prof: &Profile, name: &str, source: &str, backend: &str, timing: Timing) -> serde_json::Value {
    let ops: Vec<serde_json::Value> = prof
        .by_cost()
        .into_iter()
        .map(|i| {
            let o = &prof.ops[i];
            serde_json::json!({
                "node": o.node,
                "op": o.op,
                "output": o.output,
                "flops": o.flops,
                "bytes": o.bytes,
                "intensity_flop_per_byte": o.intensity(),
                "dispatches": o.dispatches,
                "mean_us": us(o.mean_ns()),
                "p50_us": us(o.percentile_ns(50.0) as f64),
                "p90_us": us(o.percentile_ns(90.0) as f64),
                "p99_us": us(o.percentile_ns(99.0) as f64),
                "share": prof.share(i),
                "gflops_p50": o.gflops(),
                "gbps_p50": o.gbps(),
                "parts": o.parts.iter().map(|p| serde_json::json!({
                    "kernel": p.kernel,
                    "mean_us": us(p.mean_ns()),
                    "p50_us": us(p.percentile_ns(50.0) as f64),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "model": name,
        "source": source,
        "backend": backend,
        "timing": timing.describe(),
        "batch": prof.batch,
        "warmup": prof.warmup,
        "runs": prof.runs,
        "nodes": prof.nodes,
        "executed_ops": prof.ops.len(),
        "arena_bytes": prof.arena_bytes,
        "weight_bytes": prof.weight_bytes,
        "known_flops": prof.known_flops(),
        "known_bytes": prof.known_bytes(),
        "dispatches_per_run": prof.dispatches_per_run,
        "total": {
            "mean_us": us(prof.mean_total_ns()),
            "p50_us": us(prof.percentile_total_ns(50.0) as f64),
            "p90_us": us(prof.percentile_total_ns(90.0) as f64),
            "p99_us": us(prof.percentile_total_ns(99.0) as f64),
            "ops_mean_us": us(prof.ops_mean_ns()),
            "gflops_p50": per_ns(prof.known_flops(), prof.percentile_total_ns(50.0)),
            "gbps_p50": per_ns(prof.known_bytes(), prof.percentile_total_ns(50.0)),
        },
        "ops": ops,
    })
}

fn write_table(
    w: &mut String,
    prof: &Profile,
    name: &str,
    source: &str,
    backend: &str,
    timing: Timing,
    top: usize,
) -> Result<()> {
    writeln!(w, "model      {name} ({source})")?;
    writeln!(
        w,
        "runs       {} measured after {} warm-up, batch {}, backend {backend}",
        prof.runs, prof.warmup, prof.batch
    )?;
    writeln!(
        w,
        "memory     arena {} bytes (batch {}), weights {} bytes",
        prof.arena_bytes, prof.batch, prof.weight_bytes
    )?;
    let total = prof.mean_total_ns();
    let p50 = prof.percentile_total_ns(50.0);
    writeln!(
        w,
        "total      mean {:.1} µs, p50 {:.1}, p90 {:.1}, p99 {:.1} µs; per-op sum {:.1} µs; {:.3} GFLOP/s, {:.3} GB/s (p50) over {:.2} MFLOP, {:.2} MB",
        us(total),
        us(p50 as f64),
        us(prof.percentile_total_ns(90.0) as f64),
        us(prof.percentile_total_ns(99.0) as f64),
        us(prof.ops_mean_ns()),
        per_ns(prof.known_flops(), p50).unwrap_or(0.0),
        per_ns(prof.known_bytes(), p50).unwrap_or(0.0),
        prof.known_flops() as f64 / 1e6,
        prof.known_bytes() as f64 / 1e6,
    )?;
    writeln!(
        w,
        "           (per op at its median time; FLOPs from the op shapes, a multiply-add = 2; bytes: activations at the"
    )?;
    writeln!(w, "           batch + weights in their stored encoding, each read once; FLOP/B = arithmetic intensity)")?;
    if let Some(d) = prof.dispatches_per_run {
        writeln!(w, "dispatches {d} compute dispatches per run")?;
    }
    writeln!(w, "timing     {}", timing.describe())?;
    writeln!(w)?;
    if prof.ops.is_empty() {
        writeln!(w, "no per-op times: {}", timing.describe())?;
        return Ok(());
    }
    let gpu = prof.dispatches_per_run.is_some();
    write!(
        w,
        "{:>4}  {:<11} {:<24} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8} {:>10} {:>7} {:>8}",
        "node", "op", "output", "mean µs", "p50", "p90", "p99", "share", "GFLOP/s", "bytes", "FLOP/B", "GB/s"
    )?;
    writeln!(w, "{}", if gpu { format!(" {:>5}", "disp") } else { String::new() })?;
    let order = prof.by_cost();
    let shown = if top == 0 { order.len() } else { top.min(order.len()) };
    for &i in &order[..shown] {
        let o = &prof.ops[i];
        let out: String = o.output.chars().take(24).collect();
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |g| format!("{g:.2}"));
        write!(
            w,
            "{:>4}  {:<11} {:<24} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>5.1}% {:>8} {:>10} {:>7} {:>8}",
            o.node,
            o.op,
            out,
            us(o.mean_ns()),
            us(o.percentile_ns(50.0) as f64),
            us(o.percentile_ns(90.0) as f64),
            us(o.percentile_ns(99.0) as f64),
            prof.share(i) * 100.0,
            opt(o.gflops()),
            o.bytes.map_or("-".to_string(), |b| b.to_string()),
            opt(o.intensity()),
            opt(o.gbps()),
        )?;
        writeln!(
            w,
            "{}",
            if gpu {
                format!(" {:>5}", o.dispatches.map_or("-".to_string(), |d| d.to_string()))
            } else {
                String::new()
            }
        )?;
        // A node of several GPU dispatches: each one's time beneath it.
        if o.parts.len() > 1 {
            for p in &o.parts {
                writeln!(
                    w,
                    "{:>4}  {:<11} {:<24} {:>9.2} {:>9.2}",
                    "",
                    "",
                    format!("  └ {}", p.kernel),
                    us(p.mean_ns()),
                    us(p.percentile_ns(50.0) as f64)
                )?;
            }
        }
    }
    if shown < order.len() {
        let rest: f64 = order[shown..].iter().map(|&i| prof.share(i)).sum();
        writeln!(w, "      … {} more ops, {:.1}% of the time (--top 0 shows all)", order.len() - shown, rest * 100.0)?;
    }
    Ok(())
}

/// Horizontal bar chart of the most expensive ops' mean latency.
pub fn plot(prof: &Profile, path: &Path, name: &str, top: usize) -> Result<()> {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    crate::plot::register_font();
    let order = prof.by_cost();
    let shown = if top == 0 { order.len() } else { top.min(order.len()) };
    let rows = &order[..shown];
    let (left, top_px, row_h, bar_w) = (260i32, 50i32, 22i32, 520i32);
    let (wpx, hpx) = ((left + bar_w + 120) as u32, (top_px + row_h * rows.len() as i32 + 20) as u32);
    let max = rows.first().map_or(1.0, |&i| prof.ops[i].mean_ns()).max(1.0);
    let mut buf = vec![255u8; (wpx * hpx * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (wpx, hpx)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("drawing the plot: {e}");
        root.fill(&WHITE).map_err(err)?;
        let title = format!(
            "{name}: mean {:.1} µs per run (batch {}, {} runs), per-op mean latency",
            us(prof.mean_total_ns()),
            prof.batch,
            prof.runs
        )
        .replace('µ', "u");
        root.draw(&Text::new(title, (10, 12), ("sans-serif", 15).into_font())).map_err(err)?;
        let font = ("sans-serif", 12).into_font();
        for (r, &i) in rows.iter().enumerate() {
            let o = &prof.ops[i];
            let y = top_px + r as i32 * row_h;
            let label = format!("#{} {} {}", o.node, o.op, o.output.chars().take(18).collect::<String>());
            root.draw(&Text::new(
                label,
                (8, y + row_h / 2),
                TextStyle::from(font.clone()).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
            let len = ((o.mean_ns() / max) * f64::from(bar_w)).round().max(1.0) as i32;
            let colour = if o.mechanism { RGBColor(214, 96, 77) } else { RGBColor(67, 147, 195) };
            root.draw(&Rectangle::new([(left, y + 3), (left + len, y + row_h - 3)], colour.filled())).map_err(err)?;
            let v = format!("{:.1} us ({:.1}%)", us(o.mean_ns()), prof.share(i) * 100.0);
            root.draw(&Text::new(
                v,
                (left + len + 6, y + row_h / 2),
                TextStyle::from(font.clone()).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    crate::plot::save_rgb(path, wpx, hpx, buf)
}
