//! `kestrel convert`: ONNX → `.kes`, the report, and optional verification against tract.

use anyhow::bail;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kestrel_rt::format::{Colour, Layout, MetadataSpec, OutputKind, PreprocessSpec};
use kestrel_rt_onnx::{ConvertOptions, InputData, InputTensor, VerifyReport};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn spinner(msg: String) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(msg);
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// The conversion's stages on one indicatif bar: a bar where the step count is known (lowering
/// per node), a spinner otherwise.
struct Bar(ProgressBar);

impl kestrel_rt_onnx::Progress for Bar {
    fn stage(&mut self, name: &str, steps: u64) {
        let template =
            if steps > 0 { "{msg} [{bar:30}] {pos}/{len} [{elapsed}]" } else { "{spinner} {msg} [{elapsed}]" };
        self.0.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
        self.0.set_length(steps);
        self.0.set_position(0);
        self.0.set_message(name.to_string());
    }

    fn step(&mut self) {
        self.0.inc(1);
    }
}

/// What `--verify` asks for: the arrays given (each verified at its own size) and whether to
/// verify on seeded random inputs too (`--verify` alone).
#[derive(Clone, Debug, Default)]
pub struct Verify {
    /// One `.npy` per run (a model with one input).
    pub files: Vec<PathBuf>,
    /// Seeded random inputs: 4 samples, at each size of [`size_points`].
    pub random: bool,
}

/// One verification: what it ran on (a file, or `random`) and the comparison.
struct Verified {
    source: String,
    report: VerifyReport,
}

/// Converts, writes, prints the report and, if asked, verifies.
pub fn run(
    w: &mut String,
    onnx: &Path,
    out: &Path,
    opts: &ConvertOptions,
    verify: Option<&Verify>,
    json: bool,
    meta: &MetaEdit,
) -> Result<()> {
    let mut bar = Bar(spinner(format!("converting {}", onnx.display())));
    let conv = kestrel_rt_onnx::convert_with(onnx, opts, &mut bar, |m| meta.apply(m));
    bar.0.finish_and_clear();
    let conv = conv.with_context(|| format!("converting {}", onnx.display()))?;
    meta.check(&conv.kes)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, &conv.kes).with_context(|| format!("writing {}", out.display()))?;
    let verification = match verify {
        None => Vec::new(),
        Some(v) => verify_all(onnx, &conv.kes, opts, v)?,
    };
    let worst = Worst::of(&verification);
    if json {
        let mut obj = serde_json::json!({ "report": conv.report, "output": out.display().to_string() });
        if let Some(v) = &worst {
            // Over every run (the one run's own numbers when there is one).
            obj["verify"] = serde_json::json!({
                "batch": v.batch,
                "max_abs_err": v.max_abs_err,
                "max_rel_err": v.max_rel_err,
                "top1_agreement": v.top1_agreement,
            });
            obj["verify_runs"] = verification
                .iter()
                .map(|r| {
                    let dims: serde_json::Map<String, Value> =
                        r.report.dims.iter().map(|(n, v)| (n.clone(), Value::from(*v))).collect();
                    serde_json::json!({
                        "inputs": r.source,
                        "dims": dims,
                        "batch": r.report.batch,
                        "max_abs_err": r.report.max_abs_err,
                        "max_rel_err": r.report.max_rel_err,
                        "top1_agreement": r.report.top1_agreement,
                    })
                })
                .collect();
        }
        writeln!(w, "{}", serde_json::to_string_pretty(&obj)?)?;
    } else {
        write!(w, "{}", conv.report.to_table())?;
        writeln!(w, "written    {}", out.display())?;
        let several = verification.len() > 1;
        for Verified { source, report: v } in &verification {
            let at: String = v.dims.iter().map(|(n, x)| format!("{n}={x}, ")).collect();
            let from = if several && source != "random" { format!(" ({source})") } else { String::new() };
            writeln!(
                w,
                "verify     {at}batch {}: max abs err {:.3e}, max rel err {:.3e}, top-1 agreement {:.1}%{from}",
                v.batch,
                v.max_abs_err,
                v.max_rel_err,
                v.top1_agreement * 100.0
            )?;
        }
        if let Some(v) = worst.filter(|_| several) {
            writeln!(
                w,
                "verify     worst of {} runs: max abs err {:.3e}, max rel err {:.3e}, top-1 agreement {:.1}%",
                verification.len(),
                v.max_abs_err,
                v.max_rel_err,
                v.top1_agreement * 100.0
            )?;
        }
    }
    Ok(())
}

/// The worst numbers over several verifications (the first one's batch).
struct Worst {
    batch: usize,
    max_abs_err: f64,
    max_rel_err: f64,
    top1_agreement: f64,
}

impl Worst {
    fn of(runs: &[Verified]) -> Option<Self> {
        let first = runs.first()?;
        Some(runs.iter().map(|r| &r.report).fold(
            Self { batch: first.report.batch, max_abs_err: 0.0, max_rel_err: 0.0, top1_agreement: 1.0 },
            |w, r| Self {
                batch: w.batch,
                max_abs_err: w.max_abs_err.max(r.max_abs_err),
                max_rel_err: w.max_rel_err.max(r.max_rel_err),
                top1_agreement: w.top1_agreement.min(r.top1_agreement),
            },
        ))
    }
}

/// Every verification `--verify` asks for: each file at its own size (any size within the
/// bounded dims' ranges: tract is typed at it, the file run at it; outside them, an error naming
/// the file, the dim and its range), then seeded random inputs at each size of [`size_points`].
fn verify_all(onnx: &Path, kes: &[u8], opts: &ConvertOptions, v: &Verify) -> Result<Vec<Verified>> {
    let mut sets: Vec<(String, Vec<InputTensor>)> = Vec::new();
    for p in &v.files {
        sets.push((p.display().to_string(), vec![kestrel_rt_onnx::read_npy(p)?]));
    }
    if v.random {
        let model = kestrel_rt::Model::from_bytes(kes)?;
        for at in size_points(&model.dims()?) {
            let dims: Vec<(String, usize)> = opts.dims.iter().chain(&at).cloned().collect();
            let layouts = kestrel_rt_onnx::input_layouts(onnx, &dims)?;
            sets.push(("random".into(), random_inputs(kes, &layouts, &at)?));
        }
    }
    let pb = spinner("verifying against tract".into());
    let (total, mut out) = (sets.len(), Vec::with_capacity(sets.len()));
    for (i, (source, inputs)) in sets.into_iter().enumerate() {
        pb.set_message(format!("verifying against tract ({}/{total})", i + 1));
        match kestrel_rt_onnx::verify(onnx, kes, &inputs) {
            Ok(report) => out.push(Verified { source, report }),
            Err(e) => {
                pb.finish_and_clear();
                let on = if source == "random" { "random inputs".to_string() } else { source };
                return Err(anyhow::Error::new(e).context(format!("verifying on {on}")));
            }
        }
    }
    pb.finish_and_clear();
    Ok(out)
}

/// The sizes random inputs are verified at: every bounded dim at its minimum, at an odd value
/// in the middle of its range (the middle, or one past it when that is even) and at its
/// maximum, in turn; sizes that coincide once. One size, with no values, for a model of fixed
/// sizes.
pub fn size_points(dims: &[kestrel_rt::BoundedDim]) -> Vec<Vec<(String, usize)>> {
    let middle = |d: &kestrel_rt::BoundedDim| {
        let m = d.min + (d.max - d.min) / 2;
        if m % 2 == 1 {
            m
        } else if m < d.max {
            m + 1
        } else {
            m.saturating_sub(1).max(d.min)
        }
    };
    let picks: [&dyn Fn(&kestrel_rt::BoundedDim) -> usize; 3] = [&|d| d.min, &middle, &|d| d.max];
    let mut points: Vec<Vec<(String, usize)>> = Vec::new();
    for pick in picks {
        // A run-time dim follows the data, not a size given.
        let p: Vec<(String, usize)> = dims.iter().filter(|d| !d.run_time).map(|d| (d.name.clone(), pick(d))).collect();
        if !points.contains(&p) {
            points.push(p);
        }
    }
    points
}

/// Four seeded random samples shaped like the model's inputs (token ids in 0..10); an input
/// without a batch axis in the ONNX graph (a fixed first axis N > 1) is given as exactly its
/// declared shape, one whole sample. A model with bounded dims takes them at the size `at`
/// (`layouts` read at it too); a model of fixed sizes, with `at` empty, at its own.
fn random_inputs(
    kes: &[u8],
    layouts: &[kestrel_rt_onnx::InputLayout],
    at: &[(String, usize)],
) -> Result<Vec<InputTensor>> {
    let model = kestrel_rt::Model::from_bytes(kes)?;
    let cpu = model.cpu()?;
    let meta = cpu.file().meta();
    // Each input's per-sample shape in the file (token ids flat) at that size.
    let sized = if at.is_empty() { None } else { Some(model.input_shapes_at(at)?) };
    let mut rng = kestrel_rt::demo::Rng::new(42);
    let batch = 4;
    let mut out = Vec::new();
    for (i, spec) in meta.inputs().enumerate() {
        let t = cpu.input(i)?;
        let len = match sized.as_ref().and_then(|s| s.get(i)) {
            Some(s) => s.iter().product(),
            None => t.shape.numel().unwrap_or(0),
        };
        let (shape, n) = match layouts.get(i) {
            Some(l) if !l.batched => (l.shape.clone(), l.shape.iter().product()),
            // At a bounded size, the ONNX input's own shape there (less its batch axis).
            Some(l) if sized.is_some() => {
                (std::iter::once(batch).chain(l.shape.iter().skip(1).copied()).collect(), batch * len)
            }
            _ => {
                let shape: Vec<usize> =
                    std::iter::once(batch).chain(spec.shape.dims().iter().map(|&d| d as usize)).collect();
                (shape, batch * len)
            }
        };
        let data = if t.dtype == kestrel_rt::format::DType::I32 && spec.name.to_ascii_lowercase().contains("mask") {
            // A padding mask (`attention_mask`): 1 for the kept tokens, then 0s, a different
            // number of them per sample, never all padding.
            InputData::I64((0..n).map(|k| i64::from(k % len.max(1) < len - (k / len.max(1)) % len.max(1))).collect())
        } else if t.dtype == kestrel_rt::format::DType::I32 {
            InputData::I64((0..n).map(|k| (k * 7 % 10) as i64).collect())
        } else {
            InputData::F32(rng.vec(n, 1.0))
        };
        out.push(InputTensor { shape, data });
    }
    Ok(out)
}

/// Metadata the user adds to the converted file: `--meta META.json` and `--labels LABELS.txt`.
///
/// `META.json` (every key optional): `{"name": …, "task": …, "labels": […], "input": NAME,
/// "input_shape": [c, h, w], "output_kind": "logits"|"probabilities", "preprocess": {"layout":
/// "chw"|"hwc", "colour": "grey"|"rgb", "resize": [h, w], "pixel_scale": f, "mean": […],
/// "std": […]}}`. The preprocessing applies to the input named `input` (default: the first);
/// `input_shape`, when given, must equal that input's per-sample shape. `LABELS.txt` holds one
/// class label a line and replaces `labels`.
#[derive(Clone, Debug, Default)]
pub struct MetaEdit {
    name: Option<String>,
    task: Option<String>,
    labels: Option<Vec<String>>,
    input: Option<String>,
    input_shape: Option<Vec<u32>>,
    output_kind: Option<OutputKind>,
    preprocess: Option<PreprocessSpec>,
}

impl MetaEdit {
    /// Reads `--meta` and `--labels` (both optional).
    pub fn load(meta: Option<&Path>, labels: Option<&Path>) -> Result<Self> {
        let mut e = match meta {
            None => Self::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
                let v: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
                Self::from_json(&v).with_context(|| format!("in {}", p.display()))?
            }
        };
        if let Some(p) = labels {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let l: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
            if l.is_empty() {
                bail!("{}: no labels (one label a line expected)", p.display());
            }
            e.labels = Some(l);
        }
        Ok(e)
    }

    fn from_json(v: &Value) -> Result<Self> {
        let obj = v.as_object().context("expected a JSON object")?;
        let string = |k: &str| -> Result<Option<String>> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => bail!("\"{k}\": expected a string, found {other}"),
            }
        };
        let labels = match obj.get("labels") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(
                a.iter()
                    .map(|l| l.as_str().map(String::from).with_context(|| format!("\"labels\": {l} is not a string")))
                    .collect::<Result<Vec<_>>>()?,
            ),
            Some(other) => bail!("\"labels\": expected an array of strings, found {other}"),
        };
        let input_shape = match obj.get("input_shape") {
            None | Some(Value::Null) => None,
            Some(v) => Some(u32s(v, "input_shape")?),
        };
        let output_kind = match string("output_kind")?.as_deref() {
            None => None,
            Some("logits") => Some(OutputKind::Logits),
            Some("probabilities") => Some(OutputKind::Probabilities),
            Some("embedding") => Some(OutputKind::Embedding),
            Some("other") => Some(OutputKind::Other),
            Some(k) => bail!("\"output_kind\": expected logits, probabilities, embedding or other, found {k:?}"),
        };
        let preprocess = match obj.get("preprocess") {
            None | Some(Value::Null) => None,
            Some(p) => Some(preprocess_from_json(p).context("in \"preprocess\"")?),
        };
        Ok(Self {
            name: string("name")?,
            task: string("task")?,
            labels,
            input: string("input")?,
            input_shape,
            output_kind,
            preprocess,
        })
    }

    /// Writes the edits into the converter's metadata.
    pub fn apply(&self, m: &mut MetadataSpec) {
        if let Some(n) = &self.name {
            m.name.clone_from(n);
        }
        if let Some(t) = &self.task {
            m.task.clone_from(t);
        }
        if let Some(l) = &self.labels {
            m.labels.clone_from(l);
        }
        if let Some(p) = &self.preprocess {
            let target = match &self.input {
                Some(name) => m.inputs.iter_mut().find(|i| &i.name == name),
                None => m.inputs.first_mut(),
            };
            if let Some(i) = target {
                i.preprocess = Some(p.clone());
            }
        }
        if let (Some(k), Some(o)) = (self.output_kind, m.outputs.first_mut()) {
            o.kind = k;
        }
    }

    /// Checks the written file against the edits: the named input exists, its shape matches
    /// `input_shape`, mean/std have one value per channel, the label count matches the output.
    pub fn check(&self, kes: &[u8]) -> Result<()> {
        if self.preprocess.is_none() && self.labels.is_none() && self.input_shape.is_none() {
            return Ok(());
        }
        let model = kestrel_rt::Model::from_bytes(kes)?;
        let cpu = model.cpu()?;
        let meta = cpu.file().meta();
        let input = match &self.input {
            Some(name) => meta.inputs().find(|i| i.name == name).with_context(|| {
                let names: Vec<&str> = meta.inputs().map(|i| i.name).collect();
                format!("--meta names input {name:?}; the model's inputs are {names:?}")
            })?,
            None => meta.inputs().next().context("the model has no inputs")?,
        };
        let dims = input.shape.dims();
        if let Some(s) = &self.input_shape {
            if s.as_slice() != dims {
                bail!("--meta says input_shape {s:?}; the model's input {:?} is {dims:?}", input.name);
            }
        }
        if let Some(p) = &self.preprocess {
            let channels = match p.layout {
                Layout::Chw => dims.len().checked_sub(3).map(|i| dims[i]),
                Layout::Hwc => dims.last().copied(),
            };
            let want = match p.colour {
                Colour::Grey => 1,
                Colour::Rgb => 3,
            };
            if channels != Some(want) {
                bail!("preprocessing: colour {:?} needs {want} channel(s); input shape is {dims:?}", p.colour);
            }
            for (what, v) in [("mean", &p.mean), ("std", &p.std)] {
                if v.len() != want as usize {
                    bail!("preprocessing: {what} has {} value(s), expected {want}", v.len());
                }
            }
            if let Some([rh, rw]) = p.resize {
                let (h, w) = match p.layout {
                    Layout::Chw => (dims[dims.len() - 2], dims[dims.len() - 1]),
                    Layout::Hwc => (dims[dims.len() - 3], dims[dims.len() - 2]),
                };
                if rh < h || rw < w {
                    bail!("preprocessing: resize {rh}x{rw} is smaller than the input {h}x{w} (it is cropped to it)");
                }
            }
        }
        if let Some(l) = &self.labels {
            let out = cpu.output(0)?;
            let classes = out.shape.dims().last().copied().unwrap_or(0) as usize;
            if l.len() != classes {
                bail!("{} labels given; the model's output {:?} has {classes} classes", l.len(), out.name);
            }
        }
        Ok(())
    }
}

fn u32s(v: &Value, what: &str) -> Result<Vec<u32>> {
    let a = v.as_array().with_context(|| format!("\"{what}\": expected an array of integers"))?;
    a.iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .with_context(|| format!("\"{what}\": {x} is not a non-negative integer"))
        })
        .collect()
}

fn f32s(v: &Value, what: &str) -> Result<Vec<f32>> {
    let a = v.as_array().with_context(|| format!("\"{what}\": expected an array of numbers"))?;
    a.iter().map(|x| x.as_f64().map(|x| x as f32).with_context(|| format!("\"{what}\": {x} is not a number"))).collect()
}

fn preprocess_from_json(v: &Value) -> Result<PreprocessSpec> {
    let obj = v.as_object().context("expected a JSON object")?;
    let s = |k: &str, default: &'static str| obj.get(k).and_then(Value::as_str).unwrap_or(default).to_string();
    let layout = match s("layout", "chw").as_str() {
        "chw" => Layout::Chw,
        "hwc" => Layout::Hwc,
        l => bail!("\"layout\": expected chw or hwc, found {l:?}"),
    };
    let colour = match s("colour", "rgb").as_str() {
        "grey" | "gray" => Colour::Grey,
        "rgb" => Colour::Rgb,
        c => bail!("\"colour\": expected grey or rgb, found {c:?}"),
    };
    let resize = match obj.get("resize") {
        None | Some(Value::Null) => None,
        Some(r) => match u32s(r, "resize")?.as_slice() {
            &[h, w] if h > 0 && w > 0 => Some([h, w]),
            other => bail!("\"resize\": expected [height, width] > 0, found {other:?}"),
        },
    };
    let pixel_scale = match obj.get("pixel_scale") {
        None => 1.0 / 255.0,
        Some(x) => x.as_f64().context("\"pixel_scale\": expected a number")? as f32,
    };
    let channels = if colour == Colour::Grey { 1 } else { 3 };
    let mean = obj.get("mean").map(|m| f32s(m, "mean")).transpose()?.unwrap_or_else(|| vec![0.0; channels]);
    let std = obj.get("std").map(|m| f32s(m, "std")).transpose()?.unwrap_or_else(|| vec![1.0; channels]);
    if std.iter().any(|&x| x == 0.0 || !x.is_finite()) || !pixel_scale.is_finite() {
        bail!("\"std\" must be finite and non-zero, \"pixel_scale\" finite");
    }
    Ok(PreprocessSpec { layout, colour, resize, mean, std, pixel_scale })
}
