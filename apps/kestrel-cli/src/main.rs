//! `kestrel`: the command-line tool.

mod bench;
mod bench_gemm;
mod bench_ops;
mod bench_paper;
mod convert;
mod devices;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use kestrel_rt::format::ops::MechanismOp as M;
use kestrel_rt::format::{limbs, DType, FeedDType, OutputKind, TensorKind};
use kestrel_rt::{npy, Input};
use kestrel_rt_cli::backend;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "kestrel", version, about = "On-device inference for efficient-attention models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Weights {
    F32,
    F16,
    Int8,
    Int4,
}

impl From<Weights> for DType {
    fn from(w: Weights) -> Self {
        match w {
            Weights::F32 => DType::F32,
            Weights::F16 => DType::F16,
            Weights::Int8 => DType::I8,
            Weights::Int4 => DType::I4,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Build the demo model (every attention mechanism) in code, write it as a .kes file,
    /// memory-map it back and classify a batch of synthetic images with it.
    Demo {
        /// Weight encoding.
        #[arg(long, value_enum, default_value = "f32")]
        weights: Weights,
        /// Where to write the model.
        #[arg(long, short, default_value = "target/kestrel-demo.kes")]
        out: PathBuf,
        /// Images in the batch.
        #[arg(long, default_value_t = 3)]
        batch: usize,
    },
    /// Convert an ONNX model to a .kes file (quantising weights) and print the report.
    Convert {
        /// The .onnx file.
        onnx: PathBuf,
        /// Where to write the .kes file.
        #[arg(long, short)]
        out: PathBuf,
        /// Weight encoding (biases and norm parameters stay f32).
        #[arg(long, value_enum, default_value = "f32")]
        weights: Weights,
        /// Keep weights whose name contains this text in f16 (repeatable).
        #[arg(long = "keep-f16")]
        keep_f16: Vec<String>,
        /// Keep the first and last weight-bearing layers in f16.
        #[arg(long)]
        keep_first_last: bool,
        /// Plan the smallest scratch region (slower kernels: row-at-a-time attention, direct
        /// convolution): for microcontrollers, where RAM matters more than speed.
        #[arg(long)]
        min_memory: bool,
        /// Calibrate int8 activations on these samples (one .npy per model input, samples on
        /// the first axis): dense layers and mechanism input projections with int8/int4 weights
        /// then multiply in integers. Residual adds, norms and (without --int8-attention) mechanism
        /// internals stay f32.
        #[arg(long, value_name = "DATA.npy")]
        calibrate: Vec<PathBuf>,
        /// With --calibrate: fused attention also multiplies its scores, weighted values and
        /// output projection in int8 on the CPU (scales taken at run time; softmax, norms and
        /// residuals stay f32).
        /// The last fifth of the calibration samples is held out, and the report gives the
        /// cost (top-1 agreement, largest error) against the f32 model and f32 internals.
        #[arg(long, requires = "calibrate")]
        int8_attention: bool,
        /// The size of a symbolic input dim (repeatable): an export with dynamic axes (a
        /// sequence length, an image height) converts at this size, e.g. `--dim sequence=128`;
        /// or a range, `--dim sequence=..128` (1 to 128) or `--dim h=32..224`: the file then runs
        /// any size in it (format 2.0; found by converting at several sizes). A symbolic first
        /// axis is the batch and needs none. Every symbolic dim left without one is listed in the
        /// error, with the inputs that carry it.
        #[arg(long = "dim", value_name = "NAME=N|NAME=MIN..MAX", value_parser = kestrel_rt_cli::parse_dim)]
        dims: Vec<kestrel_rt_cli::DimArg>,
        /// Also run the ONNX model (tract) and the converted model (Kestrel) on the same inputs
        /// and report the differences: on INPUTS.npy if given (repeatable: each file at its own
        /// size with bounded dims), else on 4 seeded random samples (with bounded dims: at the
        /// minimum, an odd middle value and the maximum of every dim).
        #[arg(long, value_name = "INPUTS.npy", num_args = 0..=1, default_missing_value = "")]
        // Strings, not PathBufs: clap's path parser rejects the empty value that stands for
        // "no file given" (`--verify` alone).
        verify: Vec<String>,
        /// Print the report (and verification) as one JSON object.
        #[arg(long)]
        json: bool,
        /// Metadata to record in the file: labels, task, image preprocessing (see convert.rs).
        #[arg(long, value_name = "META.json")]
        meta: Option<PathBuf>,
        /// Class labels, one a line (replaces the labels of --meta).
        #[arg(long, value_name = "LABELS.txt")]
        labels: Option<PathBuf>,
    },
    /// Run a model on .npy inputs (batch = first axis) and write its outputs as .npy.
    Run {
        /// The .kes file.
        model: PathBuf,
        /// Input arrays in the model's input order (float32/float64 or int32/int64 token ids).
        #[arg(long = "input", short, required = true)]
        inputs: Vec<PathBuf>,
        /// Where to write each output (float32), in the model's output order.
        #[arg(long = "output", short)]
        outputs: Vec<PathBuf>,
        #[command(flatten)]
        backend: backend::BackendArgs,
    },
    /// List GPU adapters (wgpu) with backend, features and limits.
    Devices,
    /// Time a model (µs/sample, samples/s), or `bench paper`: the paper's Table 5 with tract beside it.
    Bench(bench::BenchArgs),
    /// Print a model file's metadata, graph, tensors and memory plan.
    Inspect {
        /// The .kes file.
        model: PathBuf,
    },
    /// Classify images (files or folders) with a bundled or given model; --eval on a labelled folder.
    Classify(kestrel_rt_cli::classify::ClassifyArgs),
    /// Per-op latency of a model: table, --json, --trace (Chrome trace), --plot (PNG).
    Profile(kestrel_rt_cli::profile::ProfileArgs),
}

fn main() {
    let mut out = String::new();
    let result = run(Cli::parse(), &mut out);
    // A closed pipe (`kestrel inspect m.kes | head`) is not an error worth a panic.
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: writing output: {e}");
            std::process::exit(1);
        }
    }
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli, w: &mut String) -> Result<()> {
    match cli.command {
        Command::Demo { weights, out, batch } => demo(w, weights.into(), &out, batch),
        Command::Inspect { model } => inspect(w, &model),
        Command::Classify(args) => kestrel_rt_cli::classify::run(w, &args),
        Command::Profile(args) => kestrel_rt_cli::profile::run(w, &args),
        Command::Bench(args) if args.model == "paper" => bench_paper::run_cli(w, &args),
        Command::Bench(args) if args.model == "ops" => bench_ops::run_cli(w, &args),
        Command::Bench(args) => bench::run(w, &args),
        Command::Run { model, inputs, outputs, backend } => run_model(w, &model, &inputs, &outputs, &backend),
        Command::Devices => devices::run(w),
        Command::Convert {
            onnx,
            out,
            weights,
            keep_f16,
            keep_first_last,
            min_memory,
            calibrate,
            int8_attention,
            dims,
            verify,
            json,
            meta,
            labels,
        } => {
            // Every input file is checked before the conversion starts (none is a FIFO or a
            // directory, which would block or fail only after it).
            let verify_files: Vec<PathBuf> = verify.iter().filter(|v| !v.is_empty()).map(PathBuf::from).collect();
            for p in std::iter::once(&onnx).chain(&calibrate).chain(&meta).chain(&labels).chain(&verify_files) {
                kestrel_rt_cli::check_input_file(p)?;
            }
            let (dims, bounds) = kestrel_rt_cli::split_dims(&dims).map_err(anyhow::Error::msg)?;
            // `--verify` alone: seeded random inputs (also when files are given beside it).
            let verify = (!verify.is_empty())
                .then(|| convert::Verify { files: verify_files, random: verify.iter().any(String::is_empty) });
            let opts = kestrel_rt_onnx::ConvertOptions {
                weights: weights.into(),
                keep_f16,
                keep_first_last,
                calibrate,
                min_memory,
                int8_attention,
                dims,
                bounds,
            };
            let meta = convert::MetaEdit::load(meta.as_deref(), labels.as_deref())?;
            convert::run(w, &onnx, &out, &opts, verify.as_ref(), json, &meta)
        }
    }
}

fn demo(w: &mut String, dtype: DType, out: &PathBuf, batch: usize) -> Result<()> {
    if batch == 0 {
        bail!("--batch must be at least 1");
    }
    let t0 = Instant::now();
    let bytes = kestrel_rt::demo::image_model(7, dtype).context("building the demo model")?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    let built = t0.elapsed();
    let model = kestrel_rt_cli::load_model(out)?;
    let mut session = model.session(batch)?;
    let cpu = session.model();
    writeln!(
        w,
        "model      {} ({} bytes, weights {}, {} nodes)",
        out.display(),
        bytes.len(),
        dtype.name(),
        cpu.file().op_count()
    )?;
    writeln!(w, "mechanisms {}", kestrel_rt::demo::mechanisms().join(", "))?;
    writeln!(w, "arena      {} bytes for batch {batch}", cpu.arena_bytes(batch).unwrap_or(0))?;
    writeln!(w, "built      in {:.1} ms", built.as_secs_f64() * 1e3)?;
    // Synthetic images: smooth patterns that differ per sample.
    let mut images = kestrel_rt::mem::zeroed_vec::<f32>(batch.saturating_mul(256), "the demo images")?;
    for (s, img) in images.chunks_mut(256).enumerate() {
        for (i, v) in img.iter_mut().enumerate() {
            let (r, c) = ((i / 16) as f32, (i % 16) as f32);
            *v = ((r * 0.3 + s as f32).sin() * (c * 0.2 - s as f32 * 0.5).cos()) * 0.8;
        }
    }
    let t1 = Instant::now();
    let probs = session.run_vec(&[Input::F32(&images)])?;
    let ran = t1.elapsed();
    writeln!(w, "ran        batch {batch} in {:.3} ms", ran.as_secs_f64() * 1e3)?;
    writeln!(w)?;
    writeln!(w, "{:<8} {:<10} {:>8}   top-3", "image", "class", "prob")?;
    for (s, p) in probs[0].chunks(10).enumerate() {
        let mut idx: Vec<usize> = (0..10).collect();
        idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
        let top: Vec<String> = idx[..3].iter().map(|&i| format!("{i}:{:.3}", p[i])).collect();
        writeln!(w, "{:<8} {:<10} {:>8.4}   {}", s, format!("class-{}", idx[0]), p[idx[0]], top.join(" "))?;
    }
    Ok(())
}

fn run_model(
    w: &mut String,
    path: &PathBuf,
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    backend: &backend::BackendArgs,
) -> Result<()> {
    let model = kestrel_rt_cli::load_model(path)?;
    let cpu = model.cpu()?;
    if inputs.len() != cpu.input_count() {
        bail!("the model takes {} input(s), {} given with --input", cpu.input_count(), inputs.len());
    }
    if outputs.len() > cpu.output_count() {
        bail!("the model has {} output(s), {} given with --output", cpu.output_count(), outputs.len());
    }
    let mut arrays = Vec::new();
    let mut batch = 0;
    // Inputs given without a batch axis (exactly their per-sample shapes) give outputs without one.
    let mut single = true;
    // A model with bounded dims takes each array's own per-sample shape (its shape less a
    // leading batch axis, when it has one more axis than the model's input).
    let bounded = cpu.file().dims().is_some();
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    for (i, p) in inputs.iter().enumerate() {
        kestrel_rt_cli::check_input_file(p)?;
        let mut a = npy::read(p)?;
        let t = cpu.input(i)?;
        // Integers the model holds exactly as byte limbs (the inputs of 32- and 64-bit bit
        // operations): encoded here, the array gaining the limbs' axis.
        let tensor = cpu.file().inputs().get(i);
        if cpu.file().meta().inputs().any(|m| Some(m.tensor) == tensor && m.feed == FeedDType::I64Limbs) {
            a = a.into_limbs().with_context(|| format!("input {i} ({})", p.display()))?;
        }
        let per_sample: Vec<u32> = if bounded {
            let dims = a.shape();
            let rank = t.shape.rank();
            let own = match dims.len() {
                n if n == rank => dims,
                n if n == rank + 1 => &dims[1..],
                n => bail!(
                    "input {i} ({}): an array of rank {n}, the model's input `{}` has rank {rank} per sample (give [batch, ...] or one sample)",
                    p.display(),
                    t.name
                ),
            };
            shapes.push(own.to_vec());
            own.iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect()
        } else {
            t.shape.dims().to_vec()
        };
        let b = npy::batch_of(&a, &per_sample, &format!("input {i} ({})", p.display()))?;
        single &= npy::is_single_sample(&a, &per_sample);
        if i > 0 && b != batch {
            bail!("input {i} has batch {b}, input 0 has batch {batch}");
        }
        batch = b;
        if let npy::Array::F32 { data, .. } = &a {
            if let Some((n, first)) = npy::non_finite(data) {
                eprintln!(
                    "warning: input {i} ({}): {n} of {} values are NaN or infinite (the first at element {first}); the outputs they reach will be too",
                    p.display(),
                    data.len()
                );
            }
        }
        arrays.push(a);
    }
    let feeds: Vec<Input<'_>> = arrays.iter().map(npy::Array::input).collect();
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let backend::Ran { outputs: results, shapes: out_shapes, elapsed, on } =
        backend::run_vec(&model, batch, &feeds, bounded.then_some(refs.as_slice()), backend)?;
    writeln!(w, "ran        {} on batch {batch} in {:.3} ms ({on})", path.display(), elapsed.as_secs_f64() * 1e3)?;
    if bounded {
        let given: Vec<String> = shapes.iter().map(|s| format!("{s:?}")).collect();
        writeln!(w, "shapes     {} (per sample; bounded dims)", given.join(", "))?;
    }
    for (i, data) in results.iter().enumerate() {
        let t = cpu.output(i)?;
        // The model's own output name (the ONNX graph's) where the metadata has one, else the
        // tensor's.
        let id = cpu.file().outputs().nth(i);
        let meta = cpu.file().meta().outputs().find(|o| Some(o.tensor) == id);
        let name = meta.map_or(t.name, |o| o.name);
        let mut shape = if single && !inputs.is_empty() { vec![] } else { vec![batch] };
        shape.extend(out_shapes.get(i).cloned().unwrap_or_default());
        if meta.is_some_and(|o| o.kind == OutputKind::I64Limbs) {
            // Integers held exactly as byte limbs: decoded, written as int64.
            shape.pop();
            let mut ints = vec![0i64; data.len() / limbs::LIMBS];
            limbs::decode_into(data, &mut ints).map_err(|e| anyhow::anyhow!("output {i} ({name}): {e}"))?;
            writeln!(w, "output {i}   {name} {shape:?} int64")?;
            if let Some(out) = outputs.get(i) {
                npy::write_i64(out, &shape, &ints)?;
                writeln!(w, "           written to {}", out.display())?;
            }
            continue;
        }
        writeln!(w, "output {i}   {name} {:?}", shape)?;
        if let Some((n, first)) = npy::non_finite(data) {
            eprintln!(
                "warning: output {i} ({name}): {n} of {} values are NaN or infinite (the first at element {first})",
                data.len()
            );
        }
        if let Some(out) = outputs.get(i) {
            npy::write_f32(out, &shape, data)?;
            writeln!(w, "           written to {}", out.display())?;
        }
    }
    Ok(())
}

fn inspect(w: &mut String, path: &PathBuf) -> Result<()> {
    let model = kestrel_rt_cli::load_model(path)?;
    let cpu = model.cpu()?;
    let f = cpu.file();
    let meta = f.meta();
    let (major, minor) = f.version();
    writeln!(w, "file       {} ({} bytes, format {major}.{minor})", path.display(), model.bytes().len())?;
    writeln!(w, "name       {}", meta.model_name())?;
    writeln!(w, "task       {}", meta.task())?;
    // What the application feeds and reads (integers as limbs say so: `docs/FORMAT.md`).
    for i in meta.inputs() {
        writeln!(w, "input      {} {:?} per sample, fed as {:?}", i.name, i.shape.dims(), i.feed)?;
    }
    for o in meta.outputs() {
        writeln!(w, "output     {} ({:?})", o.name, o.kind)?;
    }
    let plan = cpu.plan();
    writeln!(w, "arena      {} bytes/sample + {} scratch bytes", plan.arena_bytes_per_sample, plan.scratch_bytes)?;
    if let Some(d) = f.dims() {
        let mut syms = Vec::new();
        for i in 0..d.sym_count() {
            let s = d.sym(i)?;
            syms.push(format!("{} {}..={}", s.name, s.min, s.max));
        }
        writeln!(
            w,
            "dims       {} ({} bindings; the graph below is at every maximum)",
            syms.join(", "),
            d.binding_count()
        )?;
    }
    writeln!(w)?;
    writeln!(w, "{:>4}  {:<12} {:<24} {:<7} {:>12}", "id", "kind", "name", "dtype", "bytes")?;
    let mut weight_bytes = 0u64;
    for id in 0..f.tensor_count() {
        let t = f.tensor(id)?;
        let kind = match t.kind {
            TensorKind::Weight => "weight",
            TensorKind::Activation => "activation",
        };
        if t.kind == TensorKind::Weight {
            weight_bytes += t.len + t.scale_len;
        }
        writeln!(
            w,
            "{id:>4}  {kind:<12} {:<24} {:<7} {:>12}  {}",
            t.name,
            t.dtype.name(),
            t.len + t.scale_len,
            t.shape
        )?;
    }
    writeln!(w)?;
    writeln!(w, "weights    {weight_bytes} bytes")?;
    writeln!(w)?;
    writeln!(w, "{:>4}  {:<12} output", "node", "op")?;
    for n in 0..f.op_count() {
        let op = f.op(n)?;
        let y = f.tensor(op.output())?;
        let mut ins = Vec::new();
        op.for_each_input(|id| ins.push(id.to_string()));
        // Attention's flags, and its key mask (an input listed above) by name.
        let detail = match op.mechanism() {
            Some(M::Attention(a)) => {
                let mask = match a.mask {
                    Some(m) => {
                        let t = f.tensor(m)?;
                        format!(", mask {m} ({} {})", t.name, t.shape)
                    }
                    None => String::new(),
                };
                format!("  ({:?}, {} heads{}{mask})", a.variant, a.heads, if a.causal { ", causal" } else { "" })
            }
            Some(M::AftFull(_) | M::AftLocal(_) | M::AftSimple(_) | M::AftConv(_) | M::Fastformer(_)) | None => {
                String::new()
            }
        };
        writeln!(w, "{n:>4}  {:<12} {} {}  <- [{}]{detail}", op.name(), y.name, y.shape, ins.join(", "))?;
    }
    Ok(())
}
