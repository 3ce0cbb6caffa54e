//! `--backend cpu|wgpu|auto` and `--adapter NAME|INDEX` for commands that run a model.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use kestrel::{Input, Model};
use kestrel_wgpu::{AdapterChoice, GpuContext, GpuError, GpuSession};
use std::time::{Duration, Instant};

/// Where a model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The CPU runtime.
    #[default]
    Cpu,
    /// The wgpu backend (an error if no GPU adapter exists).
    Wgpu,
    /// A GPU when one exists, else the CPU with a one-line notice on stderr.
    Auto,
}

/// The backend flags shared by running commands.
#[derive(Args, Clone, Debug, Default)]
pub struct BackendArgs {
    /// Where to run: cpu, wgpu, or auto (GPU if available, else CPU).
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: Backend,
    /// GPU adapter by name substring or index (see `kestrel devices`); default: env
    /// KESTREL_ADAPTER, else the best adapter.
    #[arg(long, value_name = "NAME|INDEX")]
    pub adapter: Option<String>,
}

/// Runs `feeds` (batch `batch`) on the chosen backend; returns the outputs, the run's wall time
/// and a label of where it ran.
pub fn run_vec(
    model: &Model,
    batch: usize,
    feeds: &[Input<'_>],
    args: &BackendArgs,
) -> Result<(Vec<Vec<f32>>, Duration, String)> {
    let gpu = match args.backend {
        Backend::Cpu => None,
        Backend::Wgpu => Some(open(args).context("--backend wgpu")?),
        Backend::Auto => match open(args) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("notice: no usable GPU ({e}); running on the CPU");
                None
            }
        },
    };
    match gpu {
        None => {
            let mut session = model.session(batch)?;
            let t0 = Instant::now();
            let out = session.run_vec(feeds)?;
            Ok((out, t0.elapsed(), "cpu".into()))
        }
        Some(ctx) => {
            let cpu = model.cpu()?;
            let mut session = match GpuSession::new(&ctx, &cpu, batch) {
                Ok(s) => s,
                Err(e) if args.backend == Backend::Auto => {
                    eprintln!("notice: the GPU cannot run this model ({e}); running on the CPU");
                    let mut session = model.session(batch)?;
                    let t0 = Instant::now();
                    let out = session.run_vec(feeds)?;
                    return Ok((out, t0.elapsed(), "cpu".into()));
                }
                Err(e) => return Err(e).context("creating the GPU session"),
            };
            let mut outs: Vec<Vec<f32>> = (0..cpu.output_count())
                .map(|i| cpu.output(i).map(|t| vec![0f32; t.shape.numel().unwrap_or(0) * batch]))
                .collect::<Result<_, _>>()?;
            let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
            let t0 = Instant::now();
            session.run(feeds, &mut refs).context("running on the GPU")?;
            Ok((outs, t0.elapsed(), format!("wgpu: {}", ctx.describe())))
        }
    }
}

fn open(args: &BackendArgs) -> Result<GpuContext, GpuError> {
    GpuContext::new(&AdapterChoice::from_env_or(args.adapter.as_deref()))
}
