//! `kestrel bench`: time a model on the CPU runtime or the GPU (µs per sample, samples/s), and
//! `kestrel bench paper`: the paper's Table 5 benchmark with tract beside it (in `bench_paper.rs`,
//! which uses this module's timing helpers; `main` routes `paper` there, so this module does not
//! depend on it),
//! and `kestrel bench scaling`: time and memory against T for every mechanism
//! ([`kestrel_rt_cli::scaling`]); `kestrel bench ops` (a roofline of every op kind) is in
//! `bench_ops/` (cases, timing, report), routed there by `main`.
//!
//! Method: the session (arena) is created once; one warm-up pass over the samples; then
//! `--reps` timed passes, each running `--samples` samples in batches of `--batch` (the last batch
//! may be smaller). A pass's time / samples is one µs-per-sample figure; the report gives the
//! median over passes and the min/max spread. `--json` prints one object (stable keys, see
//! `benches/README.md`).

use anyhow::{bail, Context, Result};
use clap::Args;
use kestrel_rt::format::DType;
use kestrel_rt::{npy, Input, Model};
use kestrel_rt_cli::backend::{Backend, BackendArgs, Runner};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `kestrel bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The .kes model to time, `paper` for the Table 5 benchmark (see `--models`), `scaling`
    /// for time and memory against the token count T (see `--max-t`), `gemm` for the f32
    /// dense kernels' GFLOP/s on the paper models' large shapes against the measured peak, or
    /// `ops` for a roofline of every op kind against a same-size copy and the FMA peak.
    pub model: String,
    /// Input samples (.npy, batch first), cycled to fill the batches; default: synthetic inputs
    /// (uniform [0, 1) for f32 inputs, token ids `i mod 2` for integer inputs).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Samples per timed pass.
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// Batch size (session capacity).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Timed passes (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// CPU threads: the caller plus a pool of workers started once (large dense layers are split
    /// across them; results are bit-identical to one thread).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Force the kernels' instruction set: scalar, avx2, avx2-vnni, avx512, neon (default: the best detected).
    #[arg(long)]
    pub isa: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// `paper` only: directory of exported paper models (benches/paper/export_paper_models.py).
    #[arg(long, default_value = "target/paper-models")]
    pub models: PathBuf,
    /// `paper`, `scaling`, `gemm` and `ops`: where to write the results (`paper`: table.md,
    /// results.csv, results.json; default benches/results/latest. `scaling`: table.md,
    /// results.json, scaling.png; `gemm`: gemm.md, gemm.json; `ops`: ops.md, ops.json, ops.png;
    /// default: nothing written).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `paper` only: batch size of the batched runs.
    #[arg(long, default_value_t = 32)]
    pub paper_batch: usize,
    /// `paper` and `ops`: only models (`ops`: cases) whose name contains this (repeatable).
    #[arg(long)]
    pub only: Vec<String>,
    /// `paper` only: skip tract (Kestrel alone).
    #[arg(long)]
    pub no_tract: bool,
    #[command(flatten)]
    pub scaling: kestrel_rt_cli::scaling::ScalingArgs,
    #[command(flatten)]
    pub ops: OpsArgs,
    /// `gemm` only: GFLOP/s against the row count M (1–300) at K = N = 192, 384, 768 for every
    /// weight encoding, each M against the next multiple of the GEMM tile (gemm_rows.md/.json).
    #[arg(long)]
    pub rows_sweep: bool,
    /// A model file with bounded dims (`kestrel convert --dim NAME=..MAX`): time it at these
    /// values of a dim (`--dim sequence=8,16,32,64`; repeatable for other dims, one value each),
    /// one session changing size between them: a table of time against the dim (and with
    /// `--out`, lengths.md and lengths.json). Without it the model runs at its bound.
    #[arg(long = "dim", value_name = "NAME=V[,V...]")]
    pub dims: Vec<String>,
}

/// The flags of `kestrel bench ops` (flattened into `kestrel bench`'s arguments).
#[derive(Args, Debug, Clone, Default)]
pub struct OpsArgs {
    /// `ops` only: a few shapes (the smallest size of each family, still every unary and binary
    /// op and broadcast form) and short timing: a smoke run.
    #[arg(long)]
    pub quick: bool,
    /// `ops` only: time each case for at least this many ms, its copy peer for half as long
    /// (default 100; 3 with --quick).
    #[arg(long, value_name = "MS")]
    pub case_ms: Option<f64>,
}

impl BenchArgs {
    /// `paper`'s output directory.
    pub fn paper_out(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| PathBuf::from("benches/results/latest"))
    }
}

/// Median and spread of µs per sample over the timed passes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Median µs per sample.
    pub us_per_sample: f64,
    /// Fastest pass.
    pub us_per_sample_min: f64,
    /// Slowest pass.
    pub us_per_sample_max: f64,
    /// 1e6 / median.
    pub samples_per_s: f64,
}

impl Stats {
    /// From per-pass µs/sample figures (at least one).
    pub fn from_passes(mut us: Vec<f64>) -> Stats {
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let median = if n % 2 == 1 { us[n / 2] } else { 0.5 * (us[n / 2 - 1] + us[n / 2]) };
        Stats {
            us_per_sample: median,
            us_per_sample_min: us[0],
            us_per_sample_max: us[n - 1],
            samples_per_s: 1e6 / median,
        }
    }
}

/// Times `pass(n)` (which runs `n` samples) `reps` times after one warm-up pass.
pub fn time_passes(samples: usize, reps: usize, mut pass: impl FnMut(usize) -> Result<()>) -> Result<Stats> {
    let mut stats = time_interleaved(samples, reps, &mut [&mut pass])?;
    Ok(stats.remove(0))
}

/// A timed pass: runs `n` samples.
pub type Pass<'a> = dyn FnMut(usize) -> Result<()> + 'a;

/// Times several passes (runtimes or configurations to compare) interleaved: each is warmed up
/// once, then every repetition times each of them in turn, starting one further along each time.
/// On a shared machine the memory bandwidth and clock drift over seconds; interleaving spreads
/// that over all of them instead of charging it to whichever ran during a slow spell, so their
/// ratios are steadier than those of back-to-back series. Returns one [`Stats`] per pass.
pub fn time_interleaved(samples: usize, reps: usize, passes: &mut [&mut Pass<'_>]) -> Result<Vec<Stats>> {
    let k = passes.len();
    for p in passes.iter_mut() {
        p(samples)?;
    }
    let mut us = vec![Vec::with_capacity(reps); k];
    for rep in 0..reps.max(1) {
        for j in 0..k {
            let i = (rep + j) % k;
            let t0 = Instant::now();
            passes[i](samples)?;
            us[i].push(t0.elapsed().as_secs_f64() * 1e6 / samples as f64);
        }
    }
    Ok(us.into_iter().map(Stats::from_passes).collect())
}

/// Per-sample input data of one model input, owned.
pub enum Feed {
    /// f32 values, `per` per sample.
    F32 { per: usize, data: Vec<f32> },
    /// token ids, `per` per sample.
    I64 { per: usize, data: Vec<i64> },
}

impl Feed {
    /// The first `n` samples' slice (the feed holds at least `n`).
    pub fn input(&self, n: usize) -> Input<'_> {
        match self {
            Feed::F32 { per, data } => Input::F32(&data[..n * per]),
            Feed::I64 { per, data } => Input::I64(&data[..n * per]),
        }
    }
}

/// Feeds of `batch` samples for every input of `model`: from `input` (cycled) or synthetic.
pub fn make_feeds(model: &Model, input: Option<&PathBuf>, batch: usize) -> Result<Vec<Feed>> {
    make_feeds_shaped(model, input, batch, None)
}

/// [`make_feeds`] at per-sample input `shapes` (a model with bounded dims; the file's own
/// shapes when `None`).
pub fn make_feeds_shaped(
    model: &Model,
    input: Option<&PathBuf>,
    batch: usize,
    shapes: Option<&[Vec<usize>]>,
) -> Result<Vec<Feed>> {
    let cpu = model.cpu()?;
    let arrays = match input {
        Some(p) => {
            if cpu.input_count() != 1 {
                bail!("--input gives one array; the model takes {} inputs", cpu.input_count());
            }
            kestrel_rt_cli::check_input_file(p)?;
            vec![npy::read(p).with_context(|| format!("reading {}", p.display()))?]
        }
        None => Vec::new(),
    };
    let mut feeds = Vec::new();
    for i in 0..cpu.input_count() {
        let t = cpu.input(i)?;
        let dims: Vec<u32> = match shapes.and_then(|s| s.get(i)) {
            Some(s) => s.iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect(),
            None => t.shape.dims().to_vec(),
        };
        let per = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d as usize)).context("input shape overflows")?;
        if per == 0 {
            bail!("input {i} ({}) has no elements per sample", t.name);
        }
        let n = per.checked_mul(batch).context("--batch: the input size overflows")?;
        let f32s = || kestrel_rt::mem::with_capacity::<f32>(n, "the benchmark inputs");
        let i64s = || kestrel_rt::mem::with_capacity::<i64>(n, "the benchmark inputs");
        let feed = match arrays.get(i) {
            Some(a) => {
                let samples = npy::batch_of(a, &dims, &format!("input {i}"))?;
                if samples == 0 {
                    bail!("--input holds no samples");
                }
                match a {
                    npy::Array::F32 { data: d, .. } => {
                        let mut data = f32s()?;
                        data.extend(d.iter().copied().cycle().take(n));
                        Feed::F32 { per, data }
                    }
                    npy::Array::I64 { data: d, .. } => {
                        let mut data = i64s()?;
                        data.extend(d.iter().copied().cycle().take(n));
                        Feed::I64 { per, data }
                    }
                }
            }
            None if t.dtype == DType::F32 => {
                let mut s = 0x2545_f491_u32;
                let mut data = f32s()?;
                data.extend((0..n).map(|_| {
                    s ^= s << 13;
                    s ^= s >> 17;
                    s ^= s << 5;
                    (s >> 8) as f32 / (1u32 << 24) as f32
                }));
                Feed::F32 { per, data }
            }
            None => {
                let mut data = i64s()?;
                data.extend((0..n).map(|k| (k % 2) as i64));
                Feed::I64 { per, data }
            }
        };
        feeds.push(feed);
    }
    Ok(feeds)
}

/// Times `model` on the CPU runtime: `samples` samples per pass in batches of `batch`.
pub fn time_kestrel(model: &Model, feeds: &[Feed], samples: usize, batch: usize, reps: usize) -> Result<Stats> {
    time_on(model, feeds, samples, batch, reps, &BackendArgs::new(Backend::Cpu)).map(|(s, _)| s)
}

/// Times `model` on the backend `on` chooses; returns the numbers and where it ran. GPU runs
/// include the input upload and the output readback (a run returns host-visible outputs).
pub fn time_on(
    model: &Model,
    feeds: &[Feed],
    samples: usize,
    batch: usize,
    reps: usize,
    on: &BackendArgs,
) -> Result<(Stats, String)> {
    time_on_shaped(model, feeds, samples, batch, reps, on, None)
}

/// [`time_on`] with the session set to per-sample input `shapes` (a model with bounded dims).
pub fn time_on_shaped(
    model: &Model,
    feeds: &[Feed],
    samples: usize,
    batch: usize,
    reps: usize,
    on: &BackendArgs,
    shapes: Option<&[Vec<usize>]>,
) -> Result<(Stats, String)> {
    let (mut pass, label) = kestrel_pass_shaped(model, feeds, batch, on, shapes)?;
    time_passes(samples, reps, &mut pass).map(|s| (s, label))
}

/// A [`Pass`] running `model` in batches of `batch` on the backend `on` chooses (the session is
/// created here, once), and where it runs.
pub fn kestrel_pass<'a>(
    model: &'a Model,
    feeds: &'a [Feed],
    batch: usize,
    on: &BackendArgs,
) -> Result<(impl FnMut(usize) -> Result<()> + 'a, String)> {
    kestrel_pass_shaped(model, feeds, batch, on, None)
}

/// [`kestrel_pass`] with the session set to per-sample input `shapes` first.
pub fn kestrel_pass_shaped<'a>(
    model: &'a Model,
    feeds: &'a [Feed],
    batch: usize,
    on: &BackendArgs,
    shapes: Option<&[Vec<usize>]>,
) -> Result<(impl FnMut(usize) -> Result<()> + 'a, String)> {
    let mut session = Runner::new(model, batch, on)?;
    if let Some(shapes) = shapes {
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        session.set_input_shapes(model, &refs)?;
    }
    let label = session.on();
    let cpu = model.cpu()?;
    let per_out: Vec<usize> =
        (0..cpu.output_count()).map(|i| session.output_shape(i).map_or(0, |s| s.iter().product::<usize>())).collect();
    let mut outs = Vec::with_capacity(per_out.len());
    for p in &per_out {
        outs.push(kestrel_rt::mem::zeroed_vec::<f32>(p.saturating_mul(batch), "the outputs")?);
    }
    let mut inputs: Vec<Input<'a>> = Vec::with_capacity(feeds.len());
    let pass = move |n: usize| {
        let mut done = 0;
        while done < n {
            let b = batch.min(n - done);
            inputs.clear();
            inputs.extend(feeds.iter().map(|f| f.input(b)));
            // The last batch of a pass may be smaller: outputs sized to it.
            let mut o: Vec<&mut [f32]> = outs.iter_mut().zip(&per_out).map(|(v, p)| &mut v[..b * p]).collect();
            session.run(&inputs, &mut o)?;
            done += b;
        }
        Ok(())
    };
    Ok((pass, label))
}

/// Applies `--isa`; returns the ISA in use.
pub fn apply_isa(isa: Option<&str>) -> Result<&'static str> {
    use kestrel_cpu_simd::{isa as current, set_isa, Isa};
    if let Some(name) = isa {
        let Some(i) = Isa::from_name(name) else {
            bail!("unknown --isa {name:?} (scalar, avx2, avx2-vnni, avx512, neon)")
        };
        if !set_isa(i) {
            bail!("--isa {name}: this CPU does not support it (best: {})", kestrel_cpu_simd::detect().name());
        }
    }
    Ok(current().name())
}

use kestrel_rt_cpu::kernels::simd as kestrel_cpu_simd;

/// `kestrel bench ...`.
/// `--mechanisms` and `--plot` are `bench scaling`'s, `--quick` and `--case-ms` `bench ops`'s.
pub fn scaling_flags_only_there(a: &BenchArgs) -> Result<()> {
    if !a.scaling.mechanisms.is_empty() || a.scaling.plot.is_some() {
        bail!("--mechanisms and --plot belong to `kestrel bench scaling`");
    }
    if a.ops.quick || a.ops.case_ms.is_some() {
        bail!("--quick and --case-ms belong to `kestrel bench ops`");
    }
    Ok(())
}

/// `kestrel bench` for a model file, `scaling` or `gemm` (`paper` is routed to `bench_paper.rs`
/// by the command line, so that module depends on this one and not the reverse).
pub fn run(w: &mut String, a: &BenchArgs) -> Result<()> {
    kestrel_rt_cpu::threads::set_threads(a.threads).map_err(|e| anyhow::anyhow!("--threads: {e}"))?;
    if a.samples == 0 || a.batch == 0 || a.reps == 0 {
        bail!("--samples, --batch and --reps must be at least 1");
    }
    let isa = apply_isa(a.isa.as_deref())?;
    if a.model == "scaling" {
        if a.batch != 1 || a.input.is_some() || !a.only.is_empty() || a.no_tract {
            bail!(
                "`bench scaling` runs batch 1 on built-in models: --batch, --input, --only and --no-tract do not apply"
            );
        }
        if a.backend.backend != Backend::Cpu {
            bail!("`kestrel bench scaling` times the CPU runtime (--backend cpu)");
        }
        return kestrel_rt_cli::scaling::run(w, &a.scaling, a.reps, a.json, a.out.as_deref(), isa);
    }
    scaling_flags_only_there(a)?;
    if a.model == "gemm" {
        if a.backend.backend != Backend::Cpu || a.input.is_some() || !a.only.is_empty() {
            bail!("`kestrel bench gemm` times the CPU dense kernels on built-in shapes: --backend, --input and --only do not apply");
        }
        if a.rows_sweep {
            return crate::bench_gemm::run_sweep(w, isa, a.threads, a.json, a.out.as_deref(), 30.0);
        }
        return crate::bench_gemm::run(w, isa, a.threads, a.json, a.out.as_deref(), 300.0);
    }
    let model = kestrel_rt_cli::load_model(&a.model)?;
    if !a.dims.is_empty() {
        return lengths(w, a, &model, isa);
    }
    let feeds = make_feeds(&model, a.input.as_ref(), a.batch)?;
    // The arena of the session the runner opens: the batch, or the part of it the budget allows.
    let arena = model.cpu()?.arena_bytes_threads(a.backend.capacity_within(&model, a.batch)?, a.threads).unwrap_or(0);
    let (s, on) = time_on(&model, &feeds, a.samples, a.batch, a.reps, &a.backend)?;
    let gpu = on != "cpu";
    let threads = if gpu { 1 } else { a.threads };
    if a.json {
        let j = serde_json::json!({
            "model": a.model,
            "backend": on,
            "isa": if gpu { serde_json::Value::Null } else { isa.into() },
            "threads": threads,
            "batch": a.batch,
            "samples": a.samples,
            "reps": a.reps,
            "arena_bytes": arena,
            "us_per_sample": s.us_per_sample,
            "us_per_sample_min": s.us_per_sample_min,
            "us_per_sample_max": s.us_per_sample_max,
            "samples_per_s": s.samples_per_s,
        });
        writeln!(w, "{j}")?;
    } else {
        writeln!(w, "model        {}", a.model)?;
        if gpu {
            writeln!(w, "backend      {on}, batch {} (times include input upload and output readback)", a.batch)?;
        } else {
            let t = if threads == 1 { "1 thread".to_string() } else { format!("{threads} threads") };
            writeln!(w, "backend      cpu ({isa}, {t}), batch {}, arena {arena} bytes", a.batch)?;
        }
        writeln!(w, "passes       {} × {} samples after 1 warm-up pass", a.reps, a.samples)?;
        writeln!(
            w,
            "µs/sample    {:.2} median (min {:.2}, max {:.2})",
            s.us_per_sample, s.us_per_sample_min, s.us_per_sample_max
        )?;
        writeln!(w, "samples/s    {:.1}", s.samples_per_s)?;
    }
    Ok(())
}

/// `kestrel bench MODEL --dim NAME=V,V,...`: the model timed at each value of one bounded dim
/// (the other dims at the one value given, or their maximum), in one session per value.
fn lengths(w: &mut String, a: &BenchArgs, model: &Model, isa: &str) -> Result<()> {
    let sweep = kestrel_rt_cli::DimSweep::parse(&a.dims)?;
    let (name, fixed) = (&sweep.name, &sweep.fixed);
    let mut rows = Vec::new();
    for &v in &sweep.values {
        let shapes = model.input_shapes_at(&sweep.at(v))?;
        let feeds = make_feeds_shaped(model, a.input.as_ref(), a.batch, Some(&shapes))?;
        let (s, on) = time_on_shaped(model, &feeds, a.samples, a.batch, a.reps, &a.backend, Some(&shapes))?;
        rows.push((v, shapes, s, on));
    }
    let bound = rows.last().map_or(1.0, |r| r.2.us_per_sample);
    let mut md = format!(
        "| {name} | input shapes (per sample) | µs/sample (median) | min | max | samples/s | vs the last |\n|---:|---|---:|---:|---:|---:|---:|\n"
    );
    for (v, shapes, s, _) in &rows {
        md.push_str(&format!(
            "| {v} | {shapes:?} | {:.2} | {:.2} | {:.2} | {:.1} | {:.3} |\n",
            s.us_per_sample,
            s.us_per_sample_min,
            s.us_per_sample_max,
            s.samples_per_s,
            s.us_per_sample / bound
        ));
    }
    let on = rows.first().map(|r| r.3.clone()).unwrap_or_default();
    let j = serde_json::json!({
        "model": a.model,
        "backend": on,
        "isa": isa,
        "threads": a.threads,
        "batch": a.batch,
        "dim": name,
        "fixed": fixed,
        "rows": rows.iter().map(|(v, shapes, s, _)| serde_json::json!({
            "value": v,
            "input_shapes": shapes,
            "us_per_sample": s.us_per_sample,
            "us_per_sample_min": s.us_per_sample_min,
            "us_per_sample_max": s.us_per_sample_max,
            "samples_per_s": s.samples_per_s,
        })).collect::<Vec<_>>(),
    });
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let head = format!(
            "# `kestrel bench {} --dim {}` ({on}, batch {}, {} passes of {} samples)\n\n",
            a.model,
            a.dims.join(" --dim "),
            a.batch,
            a.reps,
            a.samples
        );
        std::fs::write(dir.join("lengths.md"), head + &md)?;
        std::fs::write(dir.join("lengths.json"), serde_json::to_string_pretty(&j)? + "\n")?;
    }
    if a.json {
        writeln!(w, "{j}")?;
    } else {
        writeln!(w, "model        {} ({on}, batch {})", a.model, a.batch)?;
        w.push_str(&md);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Each pass is warmed up once, then timed `reps` times, one of each in turn with the
    /// starting pass rotating; every pass is asked for the full sample count.
    #[test]
    fn interleaved_passes_take_turns() {
        let log = RefCell::new(Vec::new());
        let (mut a, mut b, mut c) = (
            |n: usize| -> Result<()> {
                log.borrow_mut().push(('a', n));
                Ok(())
            },
            |n: usize| -> Result<()> {
                log.borrow_mut().push(('b', n));
                Ok(())
            },
            |n: usize| -> Result<()> {
                log.borrow_mut().push(('c', n));
                Ok(())
            },
        );
        let stats = time_interleaved(7, 3, &mut [&mut a, &mut b, &mut c]).unwrap();
        assert_eq!(stats.len(), 3);
        let order: String = log.borrow().iter().map(|&(p, _)| p).collect();
        assert_eq!(order, "abc/abc/bca/cab".replace('/', ""), "warm-up, then rotating turns");
        assert!(log.borrow().iter().all(|&(_, n)| n == 7));
        // A failing pass is an error, not a figure.
        let mut bad = |_: usize| -> Result<()> { bail!("boom") };
        assert!(time_interleaved(1, 1, &mut [&mut bad]).is_err());
    }
}
