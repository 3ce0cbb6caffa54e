//! ONNX → Kestrel (`.kes`) converter.
//!
//! [`convert`] loads an ONNX file with tract-onnx, fixes the batch axis of every input to 1,
//! types and declutters the graph, and lowers every tract node to Kestrel ops through
//! [`kestrel_rt::ModelBuilder`]. Kestrel activations are per sample and the runtime loops over the
//! batch, so the graph is converted **at batch 1** and keeps the leading 1 in every per-sample
//! shape (an image input `[N, 1, 64, 64]` becomes per-sample `[1, 1, 64, 64]`); a reshape that
//! folds the batch into other axes stays correct. Integer inputs (token ids) become flat i32
//! `input_ids` tensors fed as i64.
//!
//! Constants are folded at conversion time and become weights only where a lowered node reads
//! them. Weights are encoded as [`ConvertOptions::weights`]; **1-D weights (biases, norm scales)
//! and scalars always stay f32**, whatever the choice. [`verify`] runs the ONNX model with tract
//! and the `.kes` with Kestrel on the same inputs and compares them.

mod attention;
mod attr_types;
mod attrs;
mod attrs_table;
mod batch_norm;
mod calibrate;
mod dims;
mod error;
mod expand;
mod internals;
mod load;
mod lower;
mod masked_scatter;
mod npy;
mod ops_table;
mod quant;
mod random;
mod report;
mod run_dims;
mod subgraph_types;
mod validate;
mod verify;

pub use calibrate::{CalibratedTensor, CalibrationReport};
pub use error::{Blocker, ConvertError, UnboundDim, SUPPORTED};
pub use internals::{Agreement, InternalsReport};
pub use kestrel_rt_format::DType;
pub use npy::{read_npy, write_npy_f32};
pub use ops_table::{remedy, supported_ops_markdown, OnnxOp, ONNX_OPS};
pub use quant::{parse_dtype, WeightQuant};
pub use report::{BoundedDims, BoundedSym, FusedPattern, Report};
pub use verify::{compare, run_kestrel, run_tract, verify, InputData, InputTensor, ShapedOutput, VerifyReport};

use kestrel_rt::ModelBuilder;
use kestrel_rt_format::{FeedDType, InputSpec, KesFile, MetadataSpec, OutputKind, OutputSpec, Shape};
use lower::{Lowerer, QuantChoice, Val};
use std::collections::BTreeMap;
use std::path::Path;
use tract_onnx::prelude::*;

/// How to convert.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvertOptions {
    /// Encoding of weights of rank ≥ 2: f32, f16, int8 or int4 (1-D weights stay f32).
    pub weights: DType,
    /// Weight names (or substrings of names) kept at f16 when `weights` is int8 or int4.
    pub keep_f16: Vec<String>,
    /// Keep the first and last weight-bearing layers at f16 when `weights` is int8 or int4.
    pub keep_first_last: bool,
    /// Calibration samples, one `.npy` per model input (leading axis = samples): when given,
    /// the inputs of integer-weight projections get static int8 scales (see the `calibrate` module).
    pub calibrate: Vec<std::path::PathBuf>,
    /// Plan the smallest scratch region (slower kernels: row-at-a-time attention, direct
    /// convolution), for microcontrollers.
    pub min_memory: bool,
    /// int8 scores and weighted values in every fused attention op (needs `calibrate`: the
    /// cost is measured on a held-out fifth of its samples, see [`InternalsReport`]).
    pub int8_attention: bool,
    /// Values of the inputs' symbolic dims other than the batch (`--dim NAME=N`): an export
    /// with `dynamic_axes` (a sequence length, an image size) converts at these sizes.
    pub dims: Vec<(String, usize)>,
    /// Symbolic dims with a range (`--dim NAME=MIN..MAX`, `NAME=..MAX` for `1..=MAX`): name, min,
    /// max. The file holds the graph at every maximum and bindings that let a run take any size
    /// in range (format 2.0; found by converting at several sizes and comparing, see the `dims`
    /// module). A range of one value fixes the dim as [`Self::dims`] does.
    pub bounds: Vec<(String, usize, usize)>,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        Self {
            weights: DType::F32,
            keep_f16: Vec::new(),
            keep_first_last: false,
            calibrate: Vec::new(),
            min_memory: false,
            int8_attention: false,
            dims: Vec::new(),
            bounds: Vec::new(),
        }
    }
}

/// Progress of a conversion, for a progress bar: stages, and steps within a stage.
pub trait Progress {
    /// A new stage begins with `steps` steps (0 when the count is not known).
    fn stage(&mut self, _name: &str, _steps: u64) {}
    /// One step of the current stage is done.
    fn step(&mut self) {}
}

/// No progress reporting.
impl Progress for () {}

/// A converted model.
#[derive(Clone, Debug)]
pub struct Conversion {
    /// The `.kes` file bytes.
    pub kes: Vec<u8>,
    /// What the conversion did.
    pub report: Report,
}

/// Converts the ONNX file at `onnx_path` to a `.kes` model.
pub fn convert(onnx_path: impl AsRef<Path>, opts: &ConvertOptions) -> Result<Conversion, ConvertError> {
    convert_with(onnx_path, opts, &mut (), |_| {})
}

/// [`convert`], reporting its stages (load, lowering per node, fusion, calibration, encoding)
/// to `progress`.
pub fn convert_with_progress(
    onnx_path: impl AsRef<Path>,
    opts: &ConvertOptions,
    progress: &mut dyn Progress,
) -> Result<Conversion, ConvertError> {
    convert_with(onnx_path, opts, progress, |_| {})
}

/// As [`convert`], and `edit` then completes the metadata the converter derived from the ONNX
/// graph (model name, input and output names, shapes, dtypes) before the file is written: class
/// labels, task, image preprocessing. The writer validates the result (finite floats, tensor
/// ids).
pub fn convert_with_meta(
    onnx_path: impl AsRef<Path>,
    opts: &ConvertOptions,
    edit: impl FnOnce(&mut MetadataSpec),
) -> Result<Conversion, ConvertError> {
    convert_with(onnx_path, opts, &mut (), edit)
}

/// [`convert_with_progress`] and [`convert_with_meta`] together. With
/// [`ConvertOptions::bounds`], the model is converted at the bound and at probe sizes, and the
/// file gets bounded dims (the `dims` module).
pub fn convert_with(
    onnx_path: impl AsRef<Path>,
    opts: &ConvertOptions,
    progress: &mut dyn Progress,
    edit: impl FnOnce(&mut MetadataSpec),
) -> Result<Conversion, ConvertError> {
    // A NonZero's count is a run-time dim: bounded dims even without an input's.
    if opts.bounds.is_empty() && !run_dims::may_have(onnx_path.as_ref()) {
        convert_fixed(onnx_path.as_ref(), opts, progress, edit)
    } else {
        dims::convert_bounded(onnx_path.as_ref(), opts, progress, edit)
    }
}

/// One conversion at fixed sizes, with its report.
pub(crate) fn convert_fixed(
    path: &Path,
    opts: &ConvertOptions,
    progress: &mut dyn Progress,
    edit: impl FnOnce(&mut MetadataSpec),
) -> Result<Conversion, ConvertError> {
    convert_fixed_routed(path, opts, progress, edit, None)
}

/// [`convert_fixed`] with constants routed through slices ([`dims::corner`]).
pub(crate) fn convert_fixed_routed(
    path: &Path,
    opts: &ConvertOptions,
    progress: &mut dyn Progress,
    edit: impl FnOnce(&mut MetadataSpec),
    corners: Option<&mut dims::corner::Corners>,
) -> Result<Conversion, ConvertError> {
    let (kes, report) = convert_core(path, opts, progress, edit, true, corners)?;
    let report =
        report.ok_or(ConvertError::BoundedDims { path: path.display().to_string(), message: "no report".into() })?;
    Ok(Conversion { kes, report })
}

/// The conversion at fixed sizes (`opts.bounds` is not read): the file, and the report when
/// `with_report` (its weight statistics cost a pass over every weight; the probes of bounded
/// dims skip it). `corners`: constants of bounded dims to route through slices, after fusion.
pub(crate) fn convert_core(
    path: &Path,
    opts: &ConvertOptions,
    progress: &mut dyn Progress,
    edit: impl FnOnce(&mut MetadataSpec),
    with_report: bool,
    corners: Option<&mut dims::corner::Corners>,
) -> Result<(Vec<u8>, Option<Report>), ConvertError> {
    progress.stage("loading with tract (type, declutter)", 0);
    let p = path.display().to_string();
    let bind = load::DimBinding { batch: 1, dims: &opts.dims, shapes: None };
    let (model, inputs, onnx_nodes) = load::load_typed_named(path, &bind)?;
    let name = path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
    let mut b = ModelBuilder::new(&name);
    b.set_weight_dtype(opts.weights);
    b.min_scratch = opts.min_memory;
    b.meta.producer = format!("kestrel-rt-onnx {}", env!("CARGO_PKG_VERSION"));
    let choice =
        QuantChoice { base: opts.weights, keep_f16: opts.keep_f16.clone(), keep_first_last: opts.keep_first_last };
    let mut l = Lowerer::new(&model, b, choice);
    let mut notices = Vec::new();
    let input_outlets = model.input_outlets().map_err(error::tract_err(&p, "list the inputs"))?.to_vec();
    for (inp, &outlet) in inputs.iter().zip(&input_outlets) {
        // Integers are token ids where a table lookup (or a boolean mask) reads them, and
        // otherwise f32 values (exact up to 2^24; the runtime refuses larger ones).
        let bound =
            if [DatumType::I64, DatumType::I32].contains(&inp.dt) { lower::read_as_ids(&model, outlet) } else { None };
        let int = bound.is_some();
        // Integers read by a bit operation on a 32- or 64-bit type: exact over their whole
        // range, as byte limbs (a trailing axis of 8; `kestrel_rt_format::limbs`).
        let wide = !int && lower::wide::wide_type(inp.dt).is_some() && lower::wide::feeds_wide_op(&model, outlet);
        if wide {
            notices.push(format!(
                "input `{}` is {:?} read by integer bit operations: Kestrel takes it exactly, each integer as {} \
                 byte limbs on a trailing axis (encode with `kestrel_rt::format::limbs::encode`)",
                inp.name,
                inp.dt,
                kestrel_rt_format::limbs::LIMBS
            ));
        } else if !int && inp.dt != DatumType::F32 {
            notices.push(format!(
                "input `{}` is {:?} in the ONNX graph: Kestrel takes it as f32{}",
                inp.name,
                inp.dt,
                if inp.dt == DatumType::Bool {
                    " (0 or 1)"
                } else if inp.dt.is_integer() {
                    " values (integers fed as they are, exact up to 2^24; no wraparound)"
                } else {
                    ""
                }
            ));
        }
        // The graph input has the user's per-sample shape (the ONNX shape without its batch
        // axis); inside, a free reshape view restores the leading 1 the lowering works with. An
        // input without a batch axis (a scalar, a fixed first axis N > 1) is one whole sample.
        let user_shape: Vec<usize> = match inp.shape.split_first() {
            Some((1, rest)) if inp.batched => rest.to_vec(),
            _ => inp.shape.clone(),
        };
        if !inp.batched {
            notices.push(format!(
                "input `{}` has no batch axis (declared {:?}): one sample is the whole input",
                inp.name, inp.shape
            ));
        }
        let (id, kshape, feed) = if wide {
            let limbs = kestrel_rt_format::limbs::LIMBS;
            let shape: Vec<usize> = user_shape.iter().copied().chain([limbs]).collect();
            (l.b.input(&inp.name, &shape)?, shape, FeedDType::I64Limbs)
        } else if int {
            let n = inp.shape.iter().product();
            let feed = if inp.dt == i32::datum_type() { FeedDType::I32 } else { FeedDType::I64 };
            (l.b.input_ids(&inp.name, n)?, vec![n], feed)
        } else {
            let feed = match inp.dt {
                DatumType::I32 | DatumType::I16 | DatumType::U16 | DatumType::I8 | DatumType::U8 => FeedDType::I32,
                dt if dt.is_integer() => FeedDType::I64,
                _ => FeedDType::F32,
            };
            (l.b.input(&inp.name, &user_shape)?, user_shape.clone(), feed)
        };
        if let Some(b) = bound {
            l.id_bounds.insert(id, b);
        }
        if wide {
            let inner_shape: Vec<usize> = inp.shape.iter().copied().chain([kestrel_rt_format::limbs::LIMBS]).collect();
            let inner = if user_shape != inp.shape { l.b.reshape(id, &inner_shape)? } else { id };
            l.wide.insert(outlet, (inner, inp.shape.clone()));
        } else {
            let inner = if !int && user_shape != inp.shape { l.b.reshape(id, &inp.shape)? } else { id };
            l.set_input(outlet, Val::Act { id: inner, shape: inp.shape.clone(), int });
        }
        let shape = Shape::from_usize(&kshape).ok_or_else(|| ConvertError::BadInput {
            input: inp.name.clone(),
            expected: format!("at most {} axes", kestrel_rt_format::MAX_RANK),
            found: format!("{kshape:?}"),
        })?;
        l.b.meta.inputs.push(InputSpec { name: inp.name.clone(), tensor: id, feed, shape, preprocess: None });
    }
    l.run(progress)?;
    notices.append(&mut l.notices);
    if !l.blockers.is_empty() {
        // In the user's vocabulary: the ONNX op type and node each tract node comes from.
        let mut seen = std::collections::HashSet::new();
        let blockers: Vec<Blocker> = std::mem::take(&mut l.blockers)
            .into_iter()
            .map(|b| match onnx_nodes.origin(&b.node) {
                Some((op, node)) => Blocker {
                    remedy: ops_table::remedy(op).map(str::to_string),
                    op: op.to_string(),
                    node: node.to_string(),
                    why: b.why,
                },
                None => b,
            })
            // One line per ONNX node, even when tract split it into several.
            .filter(|b| seen.insert((b.op.clone(), b.node.clone())))
            .collect();
        return Err(ConvertError::Unsupported { path: p, blockers });
    }
    // Whether the model has a batch axis: some input has one (else every input is one whole
    // sample, and so is every output).
    let batched = inputs.iter().any(|i| i.batched);
    for &o in model.output_outlets().map_err(error::tract_err(&p, "list the outputs"))? {
        // Integers of bit operations on 32- and 64-bit types leave as limbs, exactly.
        // So do constant integer outputs f32 cannot hold exactly.
        let wide = match l.wide.get(&o) {
            Some(&(id, _)) => Some(id),
            None => l.limbs_constant_output(o)?,
        };
        let id = match wide {
            Some(id) => id,
            None => l.output_act(o)?.0,
        };
        // Outputs drop the leading batch-1 axis too (a view), when the inputs have one.
        let id = match l.b.shape_of(id).map(|s| s.dims().to_vec()) {
            Some(d) if batched && d.len() >= 2 && d[0] == 1 => {
                let rest: Vec<usize> = d[1..].iter().map(|&v| v as usize).collect();
                l.b.reshape(id, &rest)?
            }
            _ => id,
        };
        let node = model.node(o.node);
        let label = model.outlet_label(o).unwrap_or(&node.name).to_string();
        let kind = if wide.is_some() {
            OutputKind::I64Limbs
        } else if node.op.name() == "Softmax" {
            OutputKind::Probabilities
        } else if label.contains("logit") {
            OutputKind::Logits
        } else {
            OutputKind::Other
        };
        l.b.output(id);
        l.b.meta.outputs.push(OutputSpec { name: label, tensor: id, kind });
    }
    // Mechanism and element-wise fusion over Kestrel's own graph, every rewrite verified.
    progress.stage("fusing (each rewrite verified numerically)", 0);
    let fusion = kestrel_rt::fuse::fuse(&mut l.b);
    let unfused_attention = kestrel_rt::fuse::unfused_attention(&l.b)
        .into_iter()
        .map(|u| report::UnfusedAttention { softmax: u.name, reason: u.reason })
        .collect();
    let mut corners = corners;
    if let Some(c) = corners.as_deref_mut().filter(|c| !c.is_empty()) {
        c.apply(&mut l.b).map_err(|message| ConvertError::BoundedDims { path: p.clone(), message })?;
    }
    edit(&mut l.b.meta);
    for (name, count) in &fusion.fused {
        l.fused.push((name.clone(), *count));
    }
    let preset = corners.as_ref().and_then(|c| c.scales.clone());
    let (calibration, int8_internals) = if let Some(report) = preset.filter(|_| opts.calibrate.is_empty()) {
        progress.stage("int8 activation scales from the calibration at the samples' size", 0);
        calibrate::apply_scales(&mut l.b, &report)?;
        // --int8-attention measured there too.
        let internals = corners.as_ref().and_then(|c| c.internals.clone());
        if internals.is_some() {
            l.b.set_attention_internals(kestrel_rt_format::ops::Internals::Int8);
        }
        (Some(report), internals)
    } else if opts.calibrate.is_empty() {
        if opts.int8_attention {
            return Err(ConvertError::Calibrate {
                expected: "calibration data (--calibrate) with --int8-attention, to measure its cost".into(),
                found: "none".into(),
            });
        }
        (None, None)
    } else {
        progress.stage("calibrating int8 activations", 0);
        let samples = opts.calibrate.iter().map(read_npy).collect::<Result<Vec<_>, _>>()?;
        if opts.int8_attention {
            // The last fifth of the samples is held out of calibration to measure the cost on.
            let f32 = internals::f32_model(&l.b);
            let (cal, held) = internals::split(&samples);
            let c = calibrate::calibrate(&mut l.b, &cal)?;
            progress.stage("int8 attention internals: measuring the accuracy cost", 0);
            (Some(c), Some(internals::apply(&mut l.b, &f32, &cal, held.as_deref())?))
        } else {
            (Some(calibrate::calibrate(&mut l.b, &samples)?), None)
        }
    };
    progress.stage("encoding weights, planning memory", 0);
    let kes = l.b.build()?;
    if !with_report {
        return Ok((kes, None));
    }
    let weights = quant::written(&l.b);

    let mut tract_ops = BTreeMap::new();
    for n in model.nodes() {
        *tract_ops.entry(n.op.name().to_string()).or_insert(0) += 1;
    }
    let aligned = kestrel_rt_format::aligned_copy(&kes);
    let file = KesFile::parse(&aligned).map_err(kestrel_rt::Error::from)?;
    let mut kestrel_ops = BTreeMap::new();
    for op in file.ops() {
        let op = op.map_err(kestrel_rt::Error::from)?;
        *kestrel_ops.entry(op.name().to_string()).or_insert(0) += 1;
    }
    let plan = file.plan();
    let onnx_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let report = Report {
        model: name,
        weights_dtype: opts.weights.name().to_string(),
        onnx_bytes,
        kes_bytes: kes.len() as u64,
        ratio: if onnx_bytes > 0 { kes.len() as f64 / onnx_bytes as f64 } else { 0.0 },
        tract_nodes: model.nodes().len(),
        tract_ops,
        kestrel_nodes: file.op_count() as usize,
        kestrel_ops,
        fused: l.fused.iter().map(|(name, count)| FusedPattern { name: name.clone(), count: *count }).collect(),
        fusion_rejected: fusion.rejected,
        unfused_attention,
        merged_duplicates: fusion.merged_duplicates,
        calibration,
        int8_internals,
        params: weights.iter().map(|w| w.shape.iter().product::<usize>() as u64).sum(),
        arena_bytes_per_sample: plan.arena_bytes_per_sample,
        scratch_bytes: plan.scratch_bytes,
        weights,
        notices,
        bounded_dims: None,
    };
    Ok((kes, Some(report)))
}

/// A graph input as the converter reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputLayout {
    /// The ONNX input name.
    pub name: String,
    /// Its shape at batch 1 (the batch axis included when it has one).
    pub shape: Vec<usize>,
    /// Whether its first axis is the batch (symbolic or 1); an input without one (a fixed first
    /// axis N > 1, a scalar) is one whole sample.
    pub batched: bool,
}

/// The graph's inputs as [`convert`] reads them, in input order; `dims` as
/// [`ConvertOptions::dims`].
pub fn input_layouts(onnx_path: impl AsRef<Path>, dims: &[(String, usize)]) -> Result<Vec<InputLayout>, ConvertError> {
    let bind = load::DimBinding { batch: 1, dims, shapes: None };
    let (_, inputs) = load::load_typed(onnx_path.as_ref(), &bind)?;
    Ok(inputs.into_iter().map(|i| InputLayout { name: i.name, shape: i.shape, batched: i.batched }).collect())
}

/// tract's typed, decluttered graph at batch 1, one node per line (for debugging a lowering).
pub fn dump_tract_graph(onnx_path: impl AsRef<Path>) -> Result<String, ConvertError> {
    let (model, _) = load::load_typed(onnx_path.as_ref(), &load::DimBinding::batch(1))?;
    let mut s = String::new();
    let order = model.eval_order().unwrap_or_default();
    for n in order {
        let node = model.node(n);
        let inputs: Vec<String> = node.inputs.iter().map(|i| format!("#{}", i.node)).collect();
        let fact = &node.outputs[0].fact;
        let konst = if fact.konst.is_some() { " const" } else { "" };
        s.push_str(&format!(
            "#{n} {} [{}] {:?} <- {}{konst}\n",
            node.name,
            node.op.name(),
            fact.shape,
            inputs.join(", ")
        ));
        if let Some(info) = node.op.info().ok().filter(|i| !i.is_empty()) {
            s.push_str(&format!("    {}\n", info.join("; ")));
        }
    }
    Ok(s)
}

/// The folders directly under `dir` that hold a `model.onnx` (the layout of
/// `converters/fixtures/` and `converters/zoo/`), sorted by path.
pub fn model_dirs(dir: impl AsRef<Path>) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    dirs.sort();
    Ok(dirs)
}
