//! `kestrel bench scaling`: time per sample and memory against the token count T, d fixed, for
//! every mechanism (the Fastformer paper's efficiency figure, on Kestrel's CPU runtime).
//!
//! For each mechanism and each T on a doubling ladder (`--min-t` … `--max-t`), a one-layer model
//! `x [T, d] → mechanism → y [T, d]` is built in code with **random weights** (timing only; the
//! mechanism fused with its projections, no norm or MLP around it), then timed at batch 1 on the
//! CPU runtime: one warm-up run, `--reps` timed passes of `n` samples each, `n` chosen so a pass
//! lasts at least `--min-pass-ms`; the median µs/sample over passes and the min/max spread are
//! reported.
//!
//! Memory comes from the model file, not from measurement: **arena bytes** = the memory plan's
//! per-sample activation bytes + the scratch bytes the kernels ask for (what a batch-1 session
//! needs, less [`kestrel_rt_cpu::model::ARENA_ALIGN`] bytes of alignment slack), and **weight bytes**
//! = the stored weights (f32). Before building, both are predicted exactly from the shapes and
//! the kernels' own scratch functions ([`predict`]); a size whose weights + arena would exceed
//! `--mem-cap-mib` is skipped and reported with the reason, never dropped silently. After
//! building, the model's own plan is checked against the prediction.
//!
//! A least-squares slope of log(value) against log(T) is fitted per mechanism for time (over all
//! sizes, and over the largest four, where the T-independent projections no longer dominate),
//! arena bytes and weight bytes: ≈ 1 is linear, ≈ 2 quadratic.

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::{DType, TensorKind};
use kestrel_rt::{Input, Model};
use kestrel_rt_cpu::kernels::aft::{
    aft_conv_scratch, aft_full_scratch_fast, aft_local_scratch, aft_simple_scratch, AftConvParams, AftFullParams,
    AftLocalParams, AftShape,
};
use kestrel_rt_cpu::kernels::attention::{attention_scratch_fast, AttentionParams};
use kestrel_rt_cpu::kernels::fastformer::{fastformer_scratch, FastformerParams};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// AFT-local window s (as in `kestrel bench paper`).
pub const AFT_LOCAL_WINDOW: usize = 8;
/// AFT-conv kernel size (s × s).
pub const AFT_CONV_KERNEL: usize = 3;
/// Rank r of AFT-full's factorised position bias w = u vᵀ (u, v `[T, r]`).
pub const AFT_FULL_RANK: usize = 8;

/// The flags of `kestrel bench scaling` (flattened into `kestrel bench`'s arguments).
#[derive(Args, Debug, Clone)]
pub struct ScalingArgs {
    /// `scaling` only: model width d, fixed while T grows.
    #[arg(long = "d", default_value_t = 64)]
    pub d: usize,
    /// `scaling` only: smallest token count T.
    #[arg(long, default_value_t = 64)]
    pub min_t: usize,
    /// `scaling` only: largest token count T (`--min-t` × a power of two).
    #[arg(long, default_value_t = 16384)]
    pub max_t: usize,
    /// `scaling` only: heads of the multi-head mechanisms (Standard, Optimised, Efficient, Super,
    /// AFT-conv, Fastformer); must divide d.
    #[arg(long, default_value_t = 1)]
    pub heads: usize,
    /// `scaling` only: mechanisms to run (comma-separated; default: all nine): standard,
    /// optimised, efficient, super, aft-full, aft-local, aft-simple, aft-conv, fastformer.
    #[arg(long, value_delimiter = ',')]
    pub mechanisms: Vec<String>,
    /// `scaling` only: skip a size whose weights + arena would exceed this many MiB.
    #[arg(long, default_value_t = 1024)]
    pub mem_cap_mib: u64,
    /// `scaling` only: a timed pass runs enough samples to last at least this long.
    #[arg(long, default_value_t = 50)]
    pub min_pass_ms: u64,
    /// `scaling` only: write the log-log PNG here (default with `--out`: OUT/scaling.png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// `scaling` only: one model per mechanism for every T in `--min-t..=--max-t` (format 2.0
    /// bounded dims: `builder::bounded_sweep`), planned once at `--max-t` and run at each T
    /// (`Session::set_input_shapes`), instead of a model built at each T: time follows the
    /// actual T while memory stays the bound's.
    #[arg(long)]
    pub bounded: bool,
}

use kestrel_rt::mechanisms::Case;
pub use kestrel_rt::mechanisms::Mechanism;

/// The case of `m` that `kestrel bench scaling` times: `heads` heads (where it has heads), not
/// causal, AFT-full rank [`AFT_FULL_RANK`], AFT-local window [`AFT_LOCAL_WINDOW`] (band bias),
/// AFT-conv kernel [`AFT_CONV_KERNEL`].
pub fn case(m: Mechanism, heads: usize) -> Case {
    Case { heads, rank: AFT_FULL_RANK, window: AFT_LOCAL_WINDOW, kernel: AFT_CONV_KERNEL, band: true, ..Case::new(m) }
}

/// How a quantity is expected to grow with T.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// O(T).
    Linear,
    /// O(T²).
    Quadratic,
}

impl Growth {
    /// "linear" / "quadratic".
    pub fn name(self) -> &'static str {
        match self {
            Growth::Linear => "linear",
            Growth::Quadratic => "quadratic",
        }
    }
}

/// What the scaling report says of each mechanism: its settings and expected growth.
pub trait Expectations {
    /// The settings of this mechanism in words.
    fn settings(self, heads: usize) -> String;
    /// Expected growth of time per sample (the algorithm's cost at fixed d).
    fn time_growth(self) -> Growth;
    /// Expected growth of the weights.
    fn weight_growth(self) -> Growth;
}

impl Expectations for Mechanism {
    fn settings(self, heads: usize) -> String {
        let h = if self.has_heads() { format!("h={heads}") } else { String::new() };
        match self {
            Mechanism::AftFull => format!("w = u v^T, rank {AFT_FULL_RANK}"),
            Mechanism::AftLocal => format!("window s={AFT_LOCAL_WINDOW}"),
            Mechanism::AftConv => format!("{h}, {AFT_CONV_KERNEL}x{AFT_CONV_KERNEL} kernel, near-square grid"),
            Mechanism::Super => format!("{h}, W^A T x T"),
            _ => h,
        }
    }

    fn time_growth(self) -> Growth {
        match self {
            Mechanism::Standard
            | Mechanism::Optimised
            | Mechanism::Efficient
            | Mechanism::Super
            | Mechanism::AftFull => Growth::Quadratic,
            Mechanism::AftLocal | Mechanism::AftSimple | Mechanism::AftConv | Mechanism::Fastformer => Growth::Linear,
        }
    }

    // Super's W^A is T×T by definition; AFT-local stores only its band `[T, 2s − 1]` (linear
    // in T).
    fn weight_growth(self) -> Growth {
        match self {
            Mechanism::Super => Growth::Quadratic,
            Mechanism::Standard
            | Mechanism::Optimised
            | Mechanism::Efficient
            | Mechanism::AftFull
            | Mechanism::AftLocal
            | Mechanism::AftSimple
            | Mechanism::AftConv
            | Mechanism::Fastformer => Growth::Linear,
        }
    }
}

pub use kestrel_rt::mechanisms::conv_grid;

/// Checks the layer's sizes before anything is built.
fn check_sizes(m: Mechanism, t: usize, d: usize, heads: usize) -> Result<()> {
    if t == 0 || d == 0 || heads == 0 {
        bail!("T, d and heads must be at least 1");
    }
    if m.has_heads() && !d.is_multiple_of(heads) {
        bail!("--heads {heads} must divide --d {d}");
    }
    Ok(())
}

/// Builds the one-layer model `x [T, d] → m → y [T, d]` with seeded random weights (uniform,
/// ±1/√fan_in), stored f32 ([`kestrel_rt::demo::layer_model`] of [`case`]).
pub fn layer_model(m: Mechanism, t: usize, d: usize, heads: usize, seed: u64) -> Result<Vec<u8>> {
    check_sizes(m, t, d, heads)?;
    Ok(kestrel_rt::demo::layer_model(&case(m, heads), t, d, DType::F32, seed)?)
}

/// Memory of one layer model at one T.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Footprint {
    /// The plan's activation bytes per sample.
    pub activations: u64,
    /// The plan's scratch bytes (once per session).
    pub scratch: u64,
    /// Stored weight bytes (data + scales).
    pub weights: u64,
}

impl Footprint {
    /// Activations (batch 1) + scratch: the arena of a batch-1 session, less alignment slack.
    pub fn arena(&self) -> u64 {
        self.activations + self.scratch
    }

    /// Weights + arena: what a batch-1 session keeps resident.
    pub fn resident(&self) -> u64 {
        self.arena() + self.weights
    }
}

/// The footprint of a layer model predicted without building it: the planner places x and y
/// (both `[T, d]` f32, 64-byte aligned, live at the same node), scratch is the kernel's own
/// `*_scratch` function, weights are 4 bytes per f32 element.
pub fn predict(m: Mechanism, t: usize, d: usize, heads: usize) -> Result<Footprint> {
    check_sizes(m, t, d, heads)?;
    let align = kestrel_rt::format::TENSOR_ALIGN as u64;
    let act = ((t * d * 4) as u64).div_ceil(align) * align;
    let scale = 1.0 / ((d / heads) as f32).sqrt();
    let attention =
        |variant| attention_scratch_fast(&AttentionParams { t, d, heads, causal: false, scale, variant, int8: false });
    let shape = AftShape { t, d, causal: false };
    let elems = match m {
        Mechanism::Standard | Mechanism::Optimised | Mechanism::Efficient | Mechanism::Super => {
            attention(m.attention_variant().context("internal: an attention mechanism without a variant")?)
        }
        Mechanism::AftFull => aft_full_scratch_fast(&AftFullParams { shape, rank: AFT_FULL_RANK }),
        Mechanism::AftLocal => aft_local_scratch(&AftLocalParams { shape, window: AFT_LOCAL_WINDOW }),
        Mechanism::AftSimple => aft_simple_scratch(&shape),
        Mechanism::AftConv => {
            let (grid_h, grid_w) = conv_grid(t);
            aft_conv_scratch(&AftConvParams { t, d, heads, kernel: AFT_CONV_KERNEL, grid_h, grid_w })
        }
        Mechanism::Fastformer => fastformer_scratch(&FastformerParams { t, d, heads, scale }),
    };
    let weights = case(m, heads).weight_shapes(t, d).iter().map(|s| s.dims.iter().product::<usize>() as u64 * 4).sum();
    Ok(Footprint { activations: 2 * act, scratch: elems as u64 * 4, weights })
}

/// The footprint of a built model, from its memory plan and tensor table.
pub fn footprint(model: &Model) -> Result<Footprint> {
    let cpu = model.cpu()?;
    let plan = cpu.plan();
    let f = cpu.file();
    let mut weights = 0;
    for id in 0..f.tensor_count() {
        let t = f.tensor(id)?;
        if t.kind == TensorKind::Weight {
            weights += t.len + t.scale_len;
        }
    }
    Ok(Footprint { activations: plan.arena_bytes_per_sample, scratch: plan.scratch_bytes, weights })
}

/// Time per sample of one measured point.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Median µs/sample over the passes.
    pub median_us: f64,
    /// Fastest pass.
    pub min_us: f64,
    /// Slowest pass.
    pub max_us: f64,
    /// Samples per timed pass.
    pub samples_per_pass: usize,
    /// Timed passes.
    pub passes: usize,
}

/// Times `model` (input `[T, d]`) at batch 1: one warm-up run, then `reps` passes of enough
/// samples to last `min_pass` each. Errors if the output is not finite.
pub fn time_model(model: &Model, t: usize, d: usize, reps: usize, min_pass: Duration) -> Result<Timing> {
    time_session(&mut model.session(1)?, t, d, reps, min_pass)
}

/// [`time_model`] on a session already open (at the input shape `[T, d]`).
pub fn time_session(
    session: &mut kestrel_rt::Session<'_>,
    t: usize,
    d: usize,
    reps: usize,
    min_pass: Duration,
) -> Result<Timing> {
    let x = Rng::new(0x5ca1e).vec(t * d, 1.0);
    let mut y = vec![0f32; t * d];
    let t0 = Instant::now();
    session.run(&[Input::F32(&x)], &mut [&mut y])?;
    let warm = t0.elapsed().as_secs_f64().max(1e-7);
    if let Some(i) = y.iter().position(|v| !v.is_finite()) {
        bail!("output element {i} is {} (kernel bug or overflow)", y[i]);
    }
    let n = ((min_pass.as_secs_f64() / warm).ceil() as usize).clamp(1, 100_000);
    let mut us = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        for _ in 0..n {
            session.run(&[Input::F32(&x)], &mut [&mut y])?;
        }
        us.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    us.sort_by(f64::total_cmp);
    let k = us.len();
    let median_us = if k % 2 == 1 { us[k / 2] } else { 0.5 * (us[k / 2 - 1] + us[k / 2]) };
    Ok(Timing { median_us, min_us: us[0], max_us: us[k - 1], samples_per_pass: n, passes: k })
}

/// One built (and, with [`Config::time`], timed) size of one mechanism.
#[derive(Clone, Debug)]
pub struct Point {
    /// Tokens.
    pub t: usize,
    /// Memory (from the built model's plan, equal to the prediction).
    pub footprint: Footprint,
    /// Time; `None` when [`Config::time`] is false (memory figures only).
    pub timing: Option<Timing>,
}

/// A size that was not run, and why.
#[derive(Clone, Debug)]
pub struct Skipped {
    /// Tokens.
    pub t: usize,
    /// The predicted footprint.
    pub predicted: Footprint,
    /// Why, in words.
    pub reason: String,
}

/// One mechanism's sweep.
#[derive(Clone, Debug)]
pub struct Series {
    /// Which.
    pub mechanism: Mechanism,
    /// Measured sizes, increasing T.
    pub points: Vec<Point>,
    /// Skipped sizes.
    pub skipped: Vec<Skipped>,
}

/// Least-squares slope of ln(v) against ln(t) (at least two points, all positive).
pub fn loglog_slope(pts: &[(usize, f64)]) -> Option<f64> {
    let pts: Vec<(f64, f64)> =
        pts.iter().filter(|(t, v)| *t > 0 && *v > 0.0).map(|&(t, v)| ((t as f64).ln(), v.ln())).collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Points fitted for the "largest sizes" time slope.
pub const TOP_POINTS: usize = 4;

impl Series {
    fn times(&self) -> Vec<(usize, f64)> {
        self.points.iter().filter_map(|p| p.timing.map(|s| (p.t, s.median_us))).collect()
    }
    /// Time slope over every measured size.
    pub fn time_slope(&self) -> Option<f64> {
        loglog_slope(&self.times())
    }
    /// Time slope over the largest [`TOP_POINTS`] measured sizes.
    pub fn time_slope_top(&self) -> Option<f64> {
        let t = self.times();
        loglog_slope(&t[t.len().saturating_sub(TOP_POINTS)..])
    }
    /// Arena-bytes slope over every measured size.
    pub fn arena_slope(&self) -> Option<f64> {
        loglog_slope(&self.points.iter().map(|p| (p.t, p.footprint.arena() as f64)).collect::<Vec<_>>())
    }
    /// Weight-bytes slope over every measured size.
    pub fn weight_slope(&self) -> Option<f64> {
        loglog_slope(&self.points.iter().map(|p| (p.t, p.footprint.weights as f64)).collect::<Vec<_>>())
    }
    /// Largest measured T.
    pub fn max_t(&self) -> Option<usize> {
        self.points.last().map(|p| p.t)
    }
}

/// What to sweep.
#[derive(Clone, Debug)]
pub struct Config {
    /// Width.
    pub d: usize,
    /// Heads of the multi-head mechanisms.
    pub heads: usize,
    /// Token counts, increasing.
    pub sizes: Vec<usize>,
    /// Mechanisms, in order.
    pub mechanisms: Vec<Mechanism>,
    /// Skip sizes whose weights + arena exceed this.
    pub mem_cap_bytes: u64,
    /// Timed passes per point.
    pub reps: usize,
    /// Minimum duration of a pass.
    pub min_pass: Duration,
    /// Only build and plan (no timing): used by tests of the memory figures.
    pub time: bool,
    /// One bounded model per mechanism, run at each size (`--bounded`).
    pub bounded: bool,
}

impl Config {
    /// From the flags (validated: a ladder of doublings, known mechanism names).
    pub fn from_args(a: &ScalingArgs, reps: usize) -> Result<Config> {
        if a.d == 0 || a.heads == 0 || a.min_t == 0 {
            bail!("--d, --heads and --min-t must be at least 1");
        }
        if a.max_t < a.min_t {
            bail!("--max-t {} is below --min-t {}", a.max_t, a.min_t);
        }
        let mut sizes = vec![a.min_t];
        while let Some(&t) = sizes.last().filter(|&&t| t < a.max_t) {
            sizes.push(t.checked_mul(2).context("--max-t too large")?);
        }
        if sizes.last() != Some(&a.max_t) {
            bail!(
                "--max-t {} is not --min-t {} times a power of two (the sizes double: {:?})",
                a.max_t,
                a.min_t,
                sizes
            );
        }
        let mechanisms = if a.mechanisms.is_empty() {
            Mechanism::ALL.to_vec()
        } else {
            a.mechanisms
                .iter()
                .map(|s| {
                    Mechanism::from_name(s).with_context(|| {
                        format!("unknown mechanism {s:?} (one of: {})", Mechanism::ALL.map(Mechanism::name).join(", "))
                    })
                })
                .collect::<Result<_>>()?
        };
        if reps == 0 {
            bail!("--reps must be at least 1");
        }
        Ok(Config {
            d: a.d,
            heads: a.heads,
            sizes,
            mechanisms,
            mem_cap_bytes: a.mem_cap_mib.checked_mul(1 << 20).context("--mem-cap-mib too large")?,
            reps,
            min_pass: Duration::from_millis(a.min_pass_ms),
            time: true,
            bounded: a.bounded,
        })
    }
}

/// Runs the sweep: for each mechanism and size, predict, skip (with the reason) or build, check
/// the plan against the prediction, and time. `progress` is advanced once per (mechanism, T);
/// skip notices are printed on stderr as they happen.
pub fn sweep(cfg: &Config, progress: &ProgressBar) -> Result<Vec<Series>> {
    if cfg.bounded {
        return sweep_bounded(cfg, progress);
    }
    let mut out = Vec::new();
    for &m in &cfg.mechanisms {
        check_sizes(m, cfg.sizes[0], cfg.d, cfg.heads)?;
        let mut series = Series { mechanism: m, points: Vec::new(), skipped: Vec::new() };
        for &t in &cfg.sizes {
            progress.set_message(format!("{} T={t}", m.name()));
            let predicted = predict(m, t, cfg.d, cfg.heads)?;
            if predicted.resident() > cfg.mem_cap_bytes {
                let mut reason = format!(
                    "weights {} + arena {} = {} > cap {}",
                    mib(predicted.weights),
                    mib(predicted.arena()),
                    mib(predicted.resident()),
                    mib(cfg.mem_cap_bytes)
                );
                if m == Mechanism::Super {
                    reason.push_str(" (W^A is T x T by definition)");
                }
                progress.suspend(|| eprintln!("skipped: {} T={t}: {reason}", m.name()));
                series.skipped.push(Skipped { t, predicted, reason });
                progress.inc(1);
                continue;
            }
            let bytes = layer_model(m, t, cfg.d, cfg.heads, 0x5eed ^ t as u64)
                .with_context(|| format!("building {} at T={t}", m.name()))?;
            let model = Model::from_bytes(&bytes)?;
            drop(bytes);
            let fp = footprint(&model)?;
            if fp != predicted {
                bail!(
                    "{} T={t}: the model's memory plan ({fp:?}) differs from the prediction ({predicted:?}); \
                     the memory cap would be wrong",
                    m.name()
                );
            }
            let timing = if cfg.time {
                Some(
                    time_model(&model, t, cfg.d, cfg.reps, cfg.min_pass)
                        .with_context(|| format!("running {} at T={t}", m.name()))?,
                )
            } else {
                None
            };
            series.points.push(Point { t, footprint: fp, timing });
            progress.inc(1);
        }
        out.push(series);
    }
    Ok(out)
}

/// [`sweep`] with `--bounded`: per mechanism one model for every T of the range (built at many
/// sizes with one seed and fitted, `kestrel_rt::builder::bounded_sweep`; a mechanism whose
/// weights change with T other than by their leading rows cannot be, and is skipped with the
/// reason), one session planned at the largest T, timed at each T of the ladder.
fn sweep_bounded(cfg: &Config, progress: &ProgressBar) -> Result<Vec<Series>> {
    let (min, max) = (cfg.sizes[0], *cfg.sizes.last().unwrap_or(&cfg.sizes[0]));
    let mut out = Vec::new();
    for &m in &cfg.mechanisms {
        check_sizes(m, min, cfg.d, cfg.heads)?;
        let mut series = Series { mechanism: m, points: Vec::new(), skipped: Vec::new() };
        progress.set_message(format!("{} (building {min}..={max} and fitting)", m.name()));
        let predicted = predict(m, max, cfg.d, cfg.heads)?;
        let skip = |series: &mut Series, reason: String| {
            progress.suspend(|| eprintln!("skipped: {}: {reason}", m.name()));
            for &t in &cfg.sizes {
                series.skipped.push(Skipped { t, predicted, reason: reason.clone() });
            }
            progress.inc(cfg.sizes.len() as u64);
        };
        if predicted.resident() > cfg.mem_cap_bytes {
            skip(
                &mut series,
                format!("weights + arena at T={max} = {} > cap {}", mib(predicted.resident()), mib(cfg.mem_cap_bytes)),
            );
            out.push(series);
            continue;
        }
        let bytes = match kestrel_rt::builder::bounded_sweep("T", min, max, |t| {
            kestrel_rt::demo::layer_model(&case(m, cfg.heads), t, cfg.d, DType::F32, 0x5eed)
        }) {
            Ok(b) => b,
            Err(e) => {
                skip(&mut series, format!("no bounded model: {e}"));
                out.push(series);
                continue;
            }
        };
        let model = Model::from_bytes(&bytes)?;
        drop(bytes);
        let fp = footprint(&model)?;
        let mut session = model.session(1)?;
        for &t in &cfg.sizes {
            progress.set_message(format!("{} T={t} (bounded)", m.name()));
            session.set_input_shapes(&[&[t, cfg.d]]).with_context(|| format!("{} at T={t}", m.name()))?;
            let timing = if cfg.time {
                Some(
                    time_session(&mut session, t, cfg.d, cfg.reps, cfg.min_pass)
                        .with_context(|| format!("running {} at T={t} (bounded)", m.name()))?,
                )
            } else {
                None
            };
            series.points.push(Point { t, footprint: fp, timing });
            progress.inc(1);
        }
        out.push(series);
    }
    Ok(out)
}

pub(crate) fn mib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", b as f64 / 1024.0)
    }
}

pub(crate) fn slope_s(s: Option<f64>) -> String {
    s.map_or("-".into(), |v| format!("{v:.2}"))
}

/// The machine, as `/proc/cpuinfo` describes it.
pub fn machine_description(isa: &str) -> serde_json::Value {
    crate::machine::describe(isa)
}

mod report;
pub use report::{json, markdown, plot};

/// `kestrel bench scaling`: sweeps, prints the Markdown table (or `--json`), and writes
/// `OUT/table.md`, `OUT/results.json` and the PNG (`--plot`, or `OUT/scaling.png` with `--out`).
pub fn run(w: &mut String, a: &ScalingArgs, reps: usize, json_out: bool, out: Option<&Path>, isa: &str) -> Result<()> {
    let cfg = Config::from_args(a, reps)?;
    let machine = machine_description(isa);
    let total = (cfg.sizes.len() * cfg.mechanisms.len()) as u64;
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    eprintln!(
        "[bench scaling] one-layer models with random weights (timing only), d = {}, T = {:?}, memory cap {}",
        cfg.d,
        cfg.sizes,
        mib(cfg.mem_cap_bytes)
    );
    let mut machine = machine;
    machine["load_average_start"] = crate::machine::load_average().into();
    let series = sweep(&cfg, &pb)?;
    pb.finish_and_clear();
    machine["load_average_end"] = crate::machine::load_average().into();
    let md = markdown(&series, &cfg, &machine);
    let j = json(&series, &cfg, &machine);
    let plot_path = a.plot.clone().or_else(|| out.map(|o| o.join("scaling.png")));
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("table.md"), &md).with_context(|| format!("writing {}/table.md", dir.display()))?;
        std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&j)? + "\n")
            .with_context(|| format!("writing {}/results.json", dir.display()))?;
    }
    if let Some(p) = &plot_path {
        plot(&series, &cfg, p)?;
    }
    if json_out {
        writeln!(w, "{j}")?;
    } else {
        w.push_str(&md);
        if let Some(dir) = out {
            writeln!(w, "\nwritten: {}/table.md, {}/results.json", dir.display(), dir.display())?;
        }
        if let Some(p) = &plot_path {
            writeln!(w, "plot: {}", p.display())?;
        }
    }
    Ok(())
}
