//! Where a model runs: `--backend cpu|wgpu|auto`, `--adapter NAME|INDEX` and `--gpu-precision`
//! for every command that runs a model (`run`, `classify`, `profile`, `bench`), and [`Runner`],
//! one session on the chosen backend behind a single `run`.
//!
//! The choice itself is the facade's ([`kestrel_rt::backend::place`]), the same as the C ABI's:
//! `auto` takes the GPU when its runs measured faster than the CPU's on this model (timed on the
//! model's first session, at most 50 ms, then cached for the process) and says so, with both
//! times, in a one-line notice on stderr; it falls back to the CPU with a notice saying why when
//! the CPU measured faster, no adapter exists, the device cannot be created, the GPU cannot run
//! this model (an op without a kernel, a buffer over the adapter's limits), or the only adapter
//! is a software renderer (lavapipe, SwiftShader: slower than the CPU runtime) that
//! `--adapter`/`KESTREL_ADAPTER` did not name. `wgpu` never falls back: those are errors.

use anyhow::{Context, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;
use kestrel_rt::backend::{place, NoGpu, Placement, Request};
pub use kestrel_rt::backend::{Backend, GpuPrecision};
use kestrel_rt::{Input, Model};
use kestrel_rt_wgpu::{Arith, GpuContext, GpuSession};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A clap parser for one of the facade's small enums (`Backend`, `GpuPrecision`): its names,
/// each with its help line.
fn named<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
    about: fn(T) -> &'static str,
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(all.iter().map(|&v| PossibleValue::new(name(v)).help(about(v))))
        .try_map(move |s| all.iter().copied().find(|&v| name(v) == s).ok_or("unknown value"))
}

/// The backend flags shared by the commands that run a model.
#[derive(Args, Clone, Debug, Default)]
pub struct BackendArgs {
    /// Where to run: cpu, wgpu, or auto (GPU if available, else CPU).
    #[arg(long, default_value = "cpu", value_parser = named(Backend::ALL, Backend::name, Backend::about))]
    pub backend: Backend,
    /// GPU adapter by name substring or index (see `kestrel devices`); default: env
    /// KESTREL_ADAPTER, else the best adapter.
    #[arg(long, value_name = "NAME|INDEX")]
    pub adapter: Option<String>,
    /// GPU arithmetic of the dot-product kernels: f32 (default), f16 (f16 products, f32 sums;
    /// an error without SHADER_F16), or auto (f16 where the device has it).
    #[arg(long, default_value = "f32", value_parser = named(GpuPrecision::ALL, GpuPrecision::name, GpuPrecision::about))]
    pub gpu_precision: GpuPrecision,
    /// Most working memory (arena) one session may take, e.g. 512MiB, 2GiB: a larger batch
    /// runs in chunks that fit (a notice says so); a model whose single sample needs more is an
    /// error naming the size.
    #[arg(long, value_name = "BYTES", default_value = "2GiB", value_parser = parse_bytes)]
    pub memory_budget: usize,
}

/// Parses a byte count as people write it: `1073741824`, `512MiB`, `2GiB`, `1.5G`, `64k`
/// (k/M/G/T and KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB powers of 1000).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("{text:?} is not a byte count (e.g. 512MiB, 2GiB)"))?;
    let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => return Err(format!("unknown unit {other:?} in {text:?} (use KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
    };
    let bytes = value * factor;
    if !bytes.is_finite() || bytes < 1.0 || bytes > usize::MAX as f64 {
        return Err(format!("{text:?} is not a usable byte count"));
    }
    Ok(bytes as usize)
}

/// `--memory-budget`'s default.
pub const DEFAULT_MEMORY_BUDGET: usize = 2 << 30;

impl BackendArgs {
    /// The flags for `backend` with the default adapter choice and f32 arithmetic.
    pub fn new(backend: Backend) -> Self {
        Self { backend, memory_budget: DEFAULT_MEMORY_BUDGET, ..Self::default() }
    }

    /// The largest batch, at most `want`, whose working memory fits `--memory-budget`; an
    /// error naming the flag when not even one sample fits.
    pub fn capacity_within(&self, model: &Model, want: usize) -> Result<usize> {
        model.capacity_within(want, self.memory_budget).map_err(|e| match e {
            kestrel_rt::Error::OverBudget { .. } => anyhow::anyhow!("{e} (raise it with --memory-budget)"),
            e => e.into(),
        })
    }
}

/// A session on the backend the flags chose. Its capacity is the batch asked for, or less when
/// that batch's working memory would exceed `--memory-budget`: [`run`](Runner::run) then
/// splits larger batches into chunks of the capacity.
pub struct Runner<'m> {
    /// The session.
    pub on: On<'m>,
    /// Samples per run of the session.
    capacity: usize,
    /// Elements per sample of each input and output.
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

/// Where a [`Runner`] runs.
pub enum On<'m> {
    /// The CPU runtime.
    Cpu(Box<kestrel_rt::Session<'m>>),
    /// The wgpu backend.
    Gpu(Box<GpuRunner>),
}

/// The GPU side of a [`Runner`].
pub struct GpuRunner {
    /// The session (weights uploaded, buffers allocated).
    pub session: GpuSession,
    /// The adapter, described for humans.
    pub adapter: String,
    /// The device, held while the session lives.
    _ctx: Arc<GpuContext>,
}

impl<'m> Runner<'m> {
    /// Opens a session on the backend `args` choose (see the module docs for `auto`) for
    /// batches of `capacity` samples (fewer per run when the budget says so; see [`Runner`]).
    pub fn new(model: &'m Model, capacity: usize, args: &BackendArgs) -> Result<Self> {
        let cpu = model.cpu()?;
        let numel = |t: kestrel_rt::format::TensorInfo<'_>| t.shape.numel().unwrap_or(0);
        let inputs = (0..cpu.input_count()).map(|i| cpu.input(i).map(numel)).collect::<Result<_, _>>()?;
        let outputs = (0..cpu.output_count()).map(|i| cpu.output(i).map(numel)).collect::<Result<_, _>>()?;
        let fits = args.capacity_within(model, capacity)?;
        if fits < capacity {
            eprintln!(
                "notice: batch {capacity} runs in chunks of {fits} samples (the working memory of the whole batch would exceed --memory-budget {})",
                kestrel_rt::mem::human_bytes(args.memory_budget as u64)
            );
        }
        let (on, capacity) = Self::open(model, fits, args)?;
        Ok(Runner { on, capacity, inputs, outputs })
    }

    /// The session and its capacity: `capacity`, or fewer samples on a GPU whose buffer limits
    /// cannot hold that many (a notice says so).
    fn open(model: &'m Model, capacity: usize, args: &BackendArgs) -> Result<(On<'m>, usize)> {
        let request = Request {
            backend: args.backend,
            precision: args.gpu_precision,
            adapter: args.adapter.as_deref(),
            split_batches: true,
        };
        let placed = match place(&request, &model.cpu()?, capacity) {
            Ok(p) => p,
            Err(NoGpu::Unavailable(e)) => return Err(e).context("--backend wgpu"),
            Err(NoGpu::Refused { error, .. }) => return Err(error).context("creating the GPU session"),
            Err(e) => return Err(e).context("--backend wgpu"),
        };
        match placed {
            Placement::Cpu { fallback } => {
                if let Some(why) = fallback {
                    let hint =
                        if matches!(why, NoGpu::Software { .. }) { " (name it with --adapter to use it)" } else { "" };
                    eprintln!("notice: {why}{hint}; running on the CPU");
                }
                Ok((On::Cpu(Box::new(model.session(capacity)?)), capacity))
            }
            Placement::Gpu(g) => {
                if let Some(m) = &g.auto {
                    eprintln!("notice: auto chose the GPU, faster than the CPU on this model ({m})");
                }
                if g.capacity < capacity {
                    eprintln!(
                        "notice: batch {capacity} runs on the GPU in chunks of {} samples (the adapter's buffer limits, `kestrel devices`)",
                        g.capacity
                    );
                }
                let runner = GpuRunner { session: g.session, adapter: g.ctx.describe(), _ctx: g.ctx };
                Ok((On::Gpu(Box::new(runner)), g.capacity))
            }
        }
    }

    /// Where the session runs: `cpu`, or `wgpu: <adapter>`.
    pub fn on(&self) -> String {
        match &self.on {
            On::Cpu(_) => "cpu".into(),
            On::Gpu(g) => {
                let arith = if g.session.arith() == Arith::F16 { ", f16 arithmetic" } else { "" };
                format!("wgpu: {}{arith}", g.adapter)
            }
        }
    }

    /// Sets the per-sample input shapes of the next runs (graph input order, no batch axis) for
    /// a model with bounded dims (format 2.0; `kestrel convert --dim NAME=..MAX`), on either
    /// backend: each node then computes only that size. A shape out of its bounds is an error
    /// naming the dim, its range and the input.
    pub fn set_input_shapes(&mut self, model: &Model, shapes: &[&[usize]]) -> Result<()> {
        let numel = |s: Option<Vec<usize>>| s.map_or(0, |s| s.iter().product::<usize>());
        match &mut self.on {
            On::Cpu(s) => {
                s.set_input_shapes(shapes)?;
                self.inputs = (0..self.inputs.len()).map(|i| numel(s.input_shape(i))).collect();
                self.outputs = (0..self.outputs.len()).map(|i| numel(s.output_shape(i))).collect();
            }
            On::Gpu(g) => {
                let cpu = model.cpu()?;
                g.session.set_input_shapes(&cpu, shapes).map_err(|e| match e {
                    kestrel_rt_wgpu::GpuError::Run(e) => anyhow::Error::from(kestrel_rt::model_dims_error(&cpu, e)),
                    e => anyhow::Error::from(e).context("setting the GPU session's input shapes"),
                })?;
                self.inputs = (0..self.inputs.len()).map(|i| numel(g.session.input_shape(i))).collect();
                self.outputs = (0..self.outputs.len()).map(|i| numel(g.session.output_shape(i))).collect();
            }
        }
        Ok(())
    }

    /// Output `i`'s per-sample shape at the current input shapes.
    pub fn output_shape(&self, i: usize) -> Option<Vec<usize>> {
        match &self.on {
            On::Cpu(s) => s.output_shape(i),
            On::Gpu(g) => g.session.output_shape(i),
        }
    }

    /// Whether the session runs on the GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self.on, On::Gpu(_))
    }

    /// Samples per run of the session (the batch asked for, or fewer under the budget).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs a batch (inferred from the input lengths) into caller-provided outputs, in chunks
    /// of the session's capacity; returns the batch size. Allocates nothing.
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize> {
        let batch = batch_of(&self.inputs, inputs);
        if batch <= self.capacity {
            return self.run_chunk(inputs, outputs);
        }
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            // Let the session say what is wrong.
            return self.run_chunk(inputs, outputs);
        }
        let (n_in, n_out) = (inputs.len(), outputs.len());
        if n_in > MAX_IO || n_out > MAX_IO {
            anyhow::bail!(
                "batch {batch} is over this session's capacity of {} and the model has more than {MAX_IO} inputs or outputs: run it in batches of at most {0}",
                self.capacity
            );
        }
        let mut start = 0;
        while start < batch {
            let n = self.capacity.min(batch - start);
            let slice = |k: usize| start * k..(start + n) * k;
            let mut chunk_in = [Input::F32(&[]); MAX_IO];
            let mut chunk_out: [&mut [f32]; MAX_IO] = Default::default();
            for ((c, x), &k) in chunk_in.iter_mut().zip(inputs).zip(&self.inputs) {
                *c = match *x {
                    Input::F32(d) => Input::F32(d.get(slice(k)).context("an input shorter than its batch")?),
                    Input::I32(d) => Input::I32(d.get(slice(k)).context("an input shorter than its batch")?),
                    Input::I64(d) => Input::I64(d.get(slice(k)).context("an input shorter than its batch")?),
                };
            }
            for ((c, y), &k) in chunk_out.iter_mut().zip(outputs.iter_mut()).zip(&self.outputs) {
                *c = y.get_mut(slice(k)).context("an output shorter than its batch")?;
            }
            self.run_chunk(&chunk_in[..n_in], &mut chunk_out[..n_out])?;
            start += n;
        }
        Ok(batch)
    }

    fn run_chunk(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize> {
        match &mut self.on {
            On::Cpu(s) => Ok(s.run(inputs, outputs)?),
            On::Gpu(g) => g.session.run(inputs, outputs).context("running on the GPU"),
        }
    }

    /// Runs a batch and returns freshly (and fallibly) allocated outputs, sized for the batch
    /// the inputs hold.
    pub fn run_vec(&mut self, inputs: &[Input<'_>]) -> Result<Vec<Vec<f32>>> {
        let batch = batch_of(&self.inputs, inputs).max(1);
        let mut outs = Vec::with_capacity(self.outputs.len());
        for &n in &self.outputs {
            outs.push(kestrel_rt::mem::zeroed_vec::<f32>(n.saturating_mul(batch), "the outputs")?);
        }
        let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        self.run(inputs, &mut refs)?;
        // An output whose size the data decide (a run-time dim: a NonZero's count) comes at the
        // run's size: the leading part of the buffer sized at the bound.
        for (i, o) in outs.iter_mut().enumerate() {
            let n = self.output_shape(i).map_or(0, |s| s.iter().product::<usize>());
            if n < self.outputs[i] {
                anyhow::ensure!(
                    batch <= self.capacity,
                    "output {i}'s size is decided by the data at each run: a batch of {batch} over the session's \
                     capacity of {} cannot be split into runs; give a larger --batch or fewer samples",
                    self.capacity
                );
                o.truncate(n * batch);
            }
        }
        Ok(outs)
    }
}

/// Most inputs or outputs a batch split into chunks may have (chunk slices live on the stack).
const MAX_IO: usize = 16;

/// The batch the first input holds (the session checks every input against it).
fn batch_of(per_sample: &[usize], inputs: &[Input<'_>]) -> usize {
    let len = match inputs.first() {
        Some(Input::F32(d)) => d.len(),
        Some(Input::I32(d)) => d.len(),
        Some(Input::I64(d)) => d.len(),
        None => 0,
    };
    match per_sample.first() {
        Some(&n) if n > 0 => len / n,
        _ => 0,
    }
}

/// What [`run_vec`] returns.
pub struct Ran {
    /// The outputs, `batch × per-sample` elements each.
    pub outputs: Vec<Vec<f32>>,
    /// Each output's per-sample shape at the run's input shapes.
    pub shapes: Vec<Vec<usize>>,
    /// The run's wall time.
    pub elapsed: Duration,
    /// Where it ran.
    pub on: String,
}

/// Runs `feeds` (batch `batch`) once on the chosen backend (`kestrel run`). With `shapes` (a
/// model with bounded dims) the session is first set to those per-sample input shapes.
pub fn run_vec(
    model: &Model,
    batch: usize,
    feeds: &[Input<'_>],
    shapes: Option<&[&[usize]]>,
    args: &BackendArgs,
) -> Result<Ran> {
    let mut runner = Runner::new(model, batch, args)?;
    if let Some(shapes) = shapes {
        runner.set_input_shapes(model, shapes)?;
    }
    let t0 = Instant::now();
    let outputs = runner.run_vec(feeds)?;
    let elapsed = t0.elapsed();
    let shapes = (0..outputs.len()).map(|i| runner.output_shape(i).unwrap_or_default()).collect();
    Ok(Ran { outputs, shapes, elapsed, on: runner.on() })
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("3 MB"), Ok(3_000_000));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("5 parsecs").is_err());
    }
}
