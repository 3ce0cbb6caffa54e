//! Where a model runs: `--backend cpu|wgpu|auto` and `--adapter NAME|INDEX` for every command
//! that runs a model (`run`, `classify`, `profile`), and [`Runner`], one session on the chosen
//! backend behind a single `run`.
//!
//! `auto` prefers a GPU and falls back to the CPU with a one-line notice on stderr when no
//! adapter exists, the device cannot be created, the GPU cannot run this model (an op without a
//! kernel, a buffer over the adapter's limits), or the only adapter is a software renderer
//! (lavapipe, SwiftShader: slower than the CPU runtime) that `--adapter`/`KESTREL_ADAPTER` did
//! not name — the same rule as the C ABI's `KESTREL_BACKEND_AUTO`. `wgpu` never falls back:
//! those are errors.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use kestrel::{Input, Model};
use kestrel_wgpu::{AdapterChoice, Arith, GpuContext, GpuError, GpuSession, Precision, SessionOptions};
use std::time::{Duration, Instant};

/// Where a model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The CPU runtime.
    #[default]
    Cpu,
    /// The wgpu backend (an error if no GPU adapter exists or it cannot run the model).
    Wgpu,
    /// A GPU when one exists and can run the model, else the CPU with a one-line notice.
    Auto,
}

/// The backend flags shared by the commands that run a model.
#[derive(Args, Clone, Debug, Default)]
pub struct BackendArgs {
    /// Where to run: cpu, wgpu, or auto (GPU if available, else CPU).
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: Backend,
    /// GPU adapter by name substring or index (see `kestrel devices`); default: env
    /// KESTREL_ADAPTER, else the best adapter.
    #[arg(long, value_name = "NAME|INDEX")]
    pub adapter: Option<String>,
    /// GPU arithmetic of the dot-product kernels: f32 (default), f16 (f16 products, f32 sums;
    /// an error without SHADER_F16), or auto (f16 where the device has it).
    #[arg(long, value_enum, default_value = "f32")]
    pub gpu_precision: GpuPrecision,
}

/// `--gpu-precision`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum GpuPrecision {
    /// f32 everywhere.
    #[default]
    F32,
    /// f16 products with f32 accumulation in the dot-product kernels.
    F16,
    /// f16 where the device has SHADER_F16, else f32.
    Auto,
}

impl From<GpuPrecision> for Precision {
    fn from(p: GpuPrecision) -> Self {
        match p {
            GpuPrecision::F32 => Precision::F32,
            GpuPrecision::F16 => Precision::F16,
            GpuPrecision::Auto => Precision::Auto,
        }
    }
}

impl BackendArgs {
    /// The flags for `backend` with the default adapter choice and f32 arithmetic.
    pub fn new(backend: Backend) -> Self {
        Self { backend, ..Self::default() }
    }
}

/// A session on the backend the flags chose, for batches up to its capacity.
pub enum Runner<'m> {
    /// The CPU runtime.
    Cpu(Box<kestrel::Session<'m>>),
    /// The wgpu backend.
    Gpu(Box<GpuRunner>),
}

/// The GPU side of a [`Runner`].
pub struct GpuRunner {
    /// The session (weights uploaded, buffers allocated).
    pub session: GpuSession,
    /// The adapter, described for humans.
    pub adapter: String,
    /// Elements per sample of each input and output.
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

impl<'m> Runner<'m> {
    /// Opens a session on the backend `args` choose (see the module docs for `auto`).
    pub fn new(model: &'m Model, capacity: usize, args: &BackendArgs) -> Result<Self> {
        let fallback = |why: String| -> Result<Self> {
            eprintln!("notice: {why}; running on the CPU");
            Ok(Runner::Cpu(Box::new(model.session(capacity)?)))
        };
        let ctx = match args.backend {
            Backend::Cpu => return Ok(Runner::Cpu(Box::new(model.session(capacity)?))),
            Backend::Wgpu => open(args).context("--backend wgpu")?,
            Backend::Auto => match open(args) {
                Ok(c) => c,
                Err(e) => return fallback(format!("no usable GPU ({e})")),
            },
        };
        let named = args.adapter.is_some() || std::env::var_os(kestrel_wgpu::ADAPTER_ENV).is_some();
        if args.backend == Backend::Auto
            && !named
            && ctx.adapter_info().device_type == kestrel_wgpu::wgpu::DeviceType::Cpu
        {
            return fallback(format!(
                "the only GPU adapter is a software renderer ({}), slower than the CPU runtime (name it with --adapter to use it)",
                ctx.describe()
            ));
        }
        let cpu = model.cpu()?;
        let opts = SessionOptions { precision: args.gpu_precision.into() };
        let session = match GpuSession::with_options(&ctx, &cpu, capacity, &opts) {
            Ok(s) => s,
            Err(e) if args.backend == Backend::Auto => {
                return fallback(format!("the GPU ({}) cannot run this model ({e})", ctx.describe()))
            }
            Err(e) => return Err(e).context("creating the GPU session"),
        };
        let numel = |t: kestrel::format::TensorInfo<'_>| t.shape.numel().unwrap_or(0);
        let inputs = (0..cpu.input_count()).map(|i| cpu.input(i).map(numel)).collect::<Result<_, _>>()?;
        let outputs = (0..cpu.output_count()).map(|i| cpu.output(i).map(numel)).collect::<Result<_, _>>()?;
        Ok(Runner::Gpu(Box::new(GpuRunner { session, adapter: ctx.describe(), inputs, outputs })))
    }

    /// Where the session runs: `cpu`, or `wgpu: <adapter>`.
    pub fn on(&self) -> String {
        match self {
            Runner::Cpu(_) => "cpu".into(),
            Runner::Gpu(g) => {
                let arith = if g.session.arith() == Arith::F16 { ", f16 arithmetic" } else { "" };
                format!("wgpu: {}{arith}", g.adapter)
            }
        }
    }

    /// Whether the session runs on the GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Runner::Gpu(_))
    }

    /// Runs a batch (inferred from the input lengths) into caller-provided outputs; returns the
    /// batch size.
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize> {
        match self {
            Runner::Cpu(s) => Ok(s.run(inputs, outputs)?),
            Runner::Gpu(g) => g.session.run(inputs, outputs).context("running on the GPU"),
        }
    }

    /// Runs a batch and returns freshly allocated outputs (sized for the batch the inputs hold).
    pub fn run_vec(&mut self, inputs: &[Input<'_>]) -> Result<Vec<Vec<f32>>> {
        match self {
            Runner::Cpu(s) => Ok(s.run_vec(inputs)?),
            Runner::Gpu(g) => {
                let batch = batch_of(&g.inputs, inputs);
                let mut outs: Vec<Vec<f32>> = g.outputs.iter().map(|&n| vec![0f32; n * batch]).collect();
                let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
                g.session.run(inputs, &mut refs).context("running on the GPU")?;
                Ok(outs)
            }
        }
    }
}

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

/// Runs `feeds` (batch `batch`) once on the chosen backend; returns the outputs, the run's wall
/// time and where it ran (`kestrel run`).
pub fn run_vec(
    model: &Model,
    batch: usize,
    feeds: &[Input<'_>],
    args: &BackendArgs,
) -> Result<(Vec<Vec<f32>>, Duration, String)> {
    let mut runner = Runner::new(model, batch, args)?;
    let t0 = Instant::now();
    let out = runner.run_vec(feeds)?;
    Ok((out, t0.elapsed(), runner.on()))
}

fn open(args: &BackendArgs) -> Result<GpuContext, GpuError> {
    GpuContext::new(&AdapterChoice::from_env_or(args.adapter.as_deref()))
}
