//! `kestrel profile`: per-op latency of a model on the CPU (numbers from
//! [`kestrel_rt::profile`]: a host clock around each node) or on the GPU ([`gpu_profile`]: GPU
//! timestamp queries around each node's compute pass), as a table, JSON, a Chrome trace and a
//! PNG bar chart. Each op also gets a roofline line: FLOPs ([`kestrel_rt::profile::op_flops`]),
//! bytes moved ([`kestrel_rt::profile::op_bytes`]), their ratio (arithmetic intensity), the
//! achieved GFLOP/s and GB/s at its median time, and on the GPU its compute dispatches per run.
//!
//! A model with bounded dims (format 2.0) is profiled at the sizes asked for (`--dim
//! sequence=8,32`, one profile each, or an `--input` array's own size), at its bound (every dim
//! at its maximum) otherwise; times, FLOPs and bytes are all at the size run (the costs are read
//! through the table the run is specialised to, [`kestrel_rt::profile::table_at`]).

use crate::backend::{Backend, BackendArgs, On, Runner};
use crate::classify::BUNDLED;
use anyhow::{bail, Context, Result};
use clap::Args;
use kestrel_rt::format::DType;
use kestrel_rt::profile::{OpTiming, PartTiming, Profile, Timed};
use kestrel_rt::{npy, BoundedDim, Input, Model};
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
    /// Input array (.npy, batch = first axis) instead of seeded random inputs. On a model with
    /// bounded dims, of any size within them ([batch, ...] or one sample): profiled at that size.
    #[arg(long, value_name = "X.npy")]
    pub input: Option<PathBuf>,
    /// A model with bounded dims (`kestrel convert --dim NAME=..MAX`): profile it at these values
    /// of a dim (`--dim sequence=8,16,64`; repeatable for other dims, one value each), one profile
    /// per value, every node's times, FLOPs and bytes at that size. Without it (or --input) the
    /// model is profiled at its bound, every dim at its maximum.
    #[arg(long = "dim", value_name = "NAME=V[,V...]")]
    pub dims: Vec<String>,
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
    if !args.dims.is_empty() && args.input.is_some() {
        bail!("--dim and --input both set the sizes (the array's shape is its size): give one of them");
    }
    kestrel_rt_cpu::threads::set_threads(args.threads).map_err(|e| anyhow::anyhow!("--threads: {e}"))?;
    let (model, source) = load(args.model.as_deref())?;
    let cpu = model.cpu()?;
    if cpu.input_count() != 1 {
        bail!("profile feeds one input; this model has {} (give a single-input model)", cpu.input_count());
    }
    let t = cpu.input(0)?;
    let name = cpu.file().meta().model_name().to_string();
    let bounds = model.dims()?;
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
    let given = match &args.input {
        Some(p) => {
            crate::check_input_file(p)?;
            Some(npy::read(p)?)
        }
        None => {
            fits(args.batch)?;
            None
        }
    };
    // The input's per-sample shape in each profile: each --dim size, a bounded model's array's
    // own, else the file's (None: every bounded dim at its maximum).
    let sizes: Vec<Option<Vec<usize>>> = if !args.dims.is_empty() {
        let sweep = crate::DimSweep::parse(&args.dims)?;
        let mut sizes = Vec::new();
        for &v in &sweep.values {
            sizes.push(model.input_shapes_at(&sweep.at(v))?.into_iter().next());
        }
        sizes
    } else {
        match (&given, bounds.is_empty()) {
            (Some(a), false) => {
                let own = crate::sample_shape(a.shape(), t.shape.rank()).with_context(|| {
                    format!(
                        "--input: an array of shape {:?}; the model's input `{}` has rank {} per sample (give [batch, ...] or one sample)",
                        a.shape(),
                        t.name,
                        t.shape.rank()
                    )
                })?;
                vec![Some(own.to_vec())]
            }
            _ => vec![None],
        }
    };
    let batch = match &given {
        Some(a) => {
            let per: Vec<u32> = match sizes.first() {
                Some(Some(s)) => s.iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect(),
                _ => t.shape.dims().to_vec(),
            };
            let p = args.input.as_deref().unwrap_or(Path::new("-"));
            let batch = npy::batch_of(a, &per, &format!("input ({})", p.display()))?;
            fits(batch)?;
            batch
        }
        None => args.batch,
    };
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
    let mut runner = runner.filter(Runner::is_gpu);
    let backend = runner.as_ref().map_or_else(|| "cpu".to_string(), Runner::on);
    let mut profiles = Vec::with_capacity(sizes.len());
    for size in &sizes {
        let made;
        let array = match &given {
            Some(a) => a,
            None => {
                made = random_input(&t, size.as_deref(), batch);
                &made
            }
        };
        let shapes: Option<[&[usize]; 1]> = size.as_deref().map(|s| [s]);
        let shapes = shapes.as_ref().map(|s| &s[..]);
        let feed = [array.input()];
        let (prof, timing) = match runner.as_mut() {
            None => {
                let prof = kestrel_rt::profile::profile_shaped(&model, &feed, shapes, args.warmup, args.runs)?;
                (prof, Timing::HostClock)
            }
            Some(r) => gpu_profile(&model, r, &feed, shapes, args.warmup, args.runs)?,
        };
        profiles.push((prof, timing));
    }
    if profiles.iter().any(|p| p.1 == Timing::WholeSubmission) {
        eprintln!(
            "notice: the adapter has no timestamp queries: only whole-submission times are known, no per-op times"
        );
    }
    // Several sizes: one trace and one plot each, the size in the file name.
    let several = profiles.len() > 1;
    let path_for = |p: &Path, prof: &Profile| if several { sized_path(p, prof) } else { p.to_path_buf() };
    for (prof, _) in &profiles {
        if let Some(p) = &args.trace {
            write_file(&path_for(p, prof), prof.chrome_trace(&name).as_bytes())?;
        }
        if let Some(p) = &args.plot {
            plot(prof, &path_for(p, prof), &name, args.top)?;
        }
    }
    let sized = Sizes { bounds: &bounds, defaulted: args.dims.is_empty() && args.input.is_none() };
    if args.json {
        let mut js: Vec<serde_json::Value> =
            profiles.iter().map(|(p, t)| to_json(p, &name, &source, &backend, *t, &bounds)).collect();
        let j = if several { serde_json::Value::Array(js) } else { js.pop().unwrap_or_default() };
        writeln!(w, "{}", serde_json::to_string_pretty(&j)?)?;
    } else {
        for (i, (prof, timing)) in profiles.iter().enumerate() {
            if i > 0 {
                writeln!(w)?;
            }
            write_table(w, prof, &name, &source, &backend, *timing, args.top, &sized)?;
            if let Some(p) = &args.trace {
                writeln!(w, "trace      {} ({} op events)", path_for(p, prof).display(), prof.ops.len() * prof.runs)?;
            }
            if let Some(p) = &args.plot {
                writeln!(w, "plot       {}", path_for(p, prof).display())?;
            }
        }
    }
    Ok(())
}

/// Seeded inputs of `batch` samples for input `t`, at the per-sample `shape` (`None`: its own).
fn random_input(t: &kestrel_rt::format::TensorInfo<'_>, shape: Option<&[usize]>, batch: usize) -> npy::Array {
    let mut full = vec![batch];
    match shape {
        Some(s) => full.extend_from_slice(s),
        None => full.extend(t.shape.dims().iter().map(|&d| d as usize)),
    }
    let n: usize = full.iter().product();
    if t.dtype == DType::I32 {
        npy::Array::I64 { shape: full, data: (0..n).map(|k| (k * 7 % 10) as i64).collect() }
    } else {
        let mut rng = kestrel_rt::demo::Rng::new(42);
        npy::Array::F32 { shape: full, data: rng.vec(n, 1.0) }
    }
}

/// `p` with the profile's dim values before its extension: `trace.json` at `T = 8` is
/// `trace-T8.json`.
fn sized_path(p: &Path, prof: &Profile) -> PathBuf {
    let tag: String = prof.dims.iter().map(|(n, v)| format!("-{n}{v}")).collect();
    let stem = p.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let name = match p.extension() {
        Some(e) => format!("{stem}{tag}.{}", e.to_string_lossy()),
        None => format!("{stem}{tag}"),
    };
    p.with_file_name(name)
}

/// What the table says of a profile's sizes: the model's bounded dims, and whether the sizes
/// were left to the default (the bound).
pub struct Sizes<'b> {
    /// The model's bounded dims (empty: fixed sizes).
    pub bounds: &'b [BoundedDim],
    /// No --dim or --input set the sizes.
    pub defaulted: bool,
}

/// Whether every bounded dim of `prof` is at its maximum (`None` for a model of fixed sizes).
fn at_bound(prof: &Profile, bounds: &[BoundedDim]) -> Option<bool> {
    (!bounds.is_empty()).then(|| bounds.iter().all(|b| prof.dims.iter().any(|(n, v)| *n == b.name && *v == b.max)))
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

/// Per-op GPU latency of `model` on `runner`'s GPU session: `warmup` unmeasured runs, then `runs`
/// runs of [`GpuSession::run_profiled`](kestrel_rt_wgpu::GpuSession::run_profiled), gathered into
/// the same [`Profile`] the CPU profiler makes. With `shapes` (a model with bounded dims) the
/// session is first set to those per-sample input shapes, and the FLOPs and bytes are counted at
/// them. Op times come from timestamp queries where the adapter has them (else the profile has
/// run totals and no ops: see the returned [`Timing`]). In the Chrome trace a run's ops are laid
/// end to end from the run's start (GPU passes run in order; the gaps between them are not
/// measured).
pub fn gpu_profile(
    model: &Model,
    runner: &mut Runner<'_>,
    inputs: &[Input<'_>],
    shapes: Option<&[&[usize]]>,
    warmup: usize,
    runs: usize,
) -> Result<(Profile, Timing)> {
    if runs == 0 {
        bail!("profile: at least one measured run is needed");
    }
    if let Some(shapes) = shapes {
        runner.set_input_shapes(model, shapes)?;
    }
    let On::Gpu(gpu) = &mut runner.on else { bail!("gpu_profile: the session is not on a GPU") };
    let cpu = model.cpu()?;
    let file = *cpu.file();
    // The costs at the sizes the session runs.
    let table = kestrel_rt::profile::table_at(&cpu, shapes)?;
    let graph = kestrel_rt::profile::Graph::with_table(&file, Some(&table));
    let batch = kestrel_rt::profile::batch_at(&graph, inputs)?;
    let dispatches = gpu.session.node_dispatch_counts();
    let mut outs = kestrel_rt::profile::output_buffers_at(&graph, batch)?;
    let mut o: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    for _ in 0..warmup {
        gpu.session.run(inputs, &mut o).context("warm-up run on the GPU")?;
    }
    let arena_bytes = cpu
        .arena_bytes_threads(batch, kestrel_rt_cpu::threads::threads())
        .context("the arena size for this batch overflows")?;
    let mut prof = Profile::empty(&graph, batch, warmup, runs, arena_bytes);
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
                let mut op = OpTiming::for_node(&graph, t.node, batch, runs)?;
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
pub fn to_json(
    prof: &Profile,
    name: &str,
    source: &str,
    backend: &str,
    timing: Timing,
    bounds: &[BoundedDim],
) -> serde_json::Value {
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
        "input_shapes": prof.input_shapes,
        "dims": prof.dims.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        "at_bound": at_bound(prof, bounds),
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

#[allow(clippy::too_many_arguments)]
fn write_table(
    w: &mut String,
    prof: &Profile,
    name: &str,
    source: &str,
    backend: &str,
    timing: Timing,
    top: usize,
    sizes: &Sizes<'_>,
) -> Result<()> {
    writeln!(w, "model      {name} ({source})")?;
    writeln!(
        w,
        "runs       {} measured after {} warm-up, batch {}, backend {backend}",
        prof.runs, prof.warmup, prof.batch
    )?;
    if let Some(bound) = at_bound(prof, sizes.bounds) {
        let at: Vec<String> = prof.dims.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let ranges: Vec<String> = sizes.bounds.iter().map(|b| format!("{} {}..={}", b.name, b.min, b.max)).collect();
        let shapes: Vec<String> = prof.input_shapes.iter().map(|s| format!("{s:?}")).collect();
        let why = match (bound, sizes.defaulted) {
            (true, true) => {
                "the bound, every dim at its maximum (--dim NAME=V[,V...] or an --input array profiles other sizes)"
            }
            (true, false) => "the bound, every dim at its maximum",
            (false, _) => "FLOPs, bytes and times at these sizes",
        };
        writeln!(
            w,
            "dims       {}, input {} per sample, bounds {}: {why}",
            at.join(", "),
            shapes.join(", "),
            ranges.join(", ")
        )?;
    }
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
