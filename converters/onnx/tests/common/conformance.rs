//! One ONNX backend node test case (as `converters/conformance/generate.py` writes it) run
//! through Kestrel (convert, then the CPU runtime) and through tract (the ONNX file run as it
//! is), each compared with the case's expected outputs.
//!
//! Shared by the full-suite runner (`examples/conformance.rs`) and the CI sample test
//! (`tests/conformance.rs`), which include this file with `#[path]`.

use kestrel_rt_cpu::panics::catch_quietly;
use kestrel_rt_format::FeedDType;
use kestrel_rt_onnx::{ConvertError, ConvertOptions};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tract_onnx::prelude::*;

/// numpy-style `allclose` tolerances: `|found − expected| ≤ atol + rtol·|expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

/// f32 outputs (the ONNX backend tests' own rtol, an atol for values computed in another order).
pub const F32_TOL: Tol = Tol { rtol: 1e-3, atol: 1e-5 };
/// f64 outputs: Kestrel computes in f32, so the f32 tolerance.
pub const F64_TOL: Tol = F32_TOL;
/// f16 outputs: expected values rounded to f16 (ε = 2⁻¹⁰), Kestrel's computed in f32.
pub const F16_TOL: Tol = Tol { rtol: 4e-3, atol: 1e-3 };
/// Integer and bool outputs: exact.
pub const EXACT: Tol = Tol { rtol: 0.0, atol: 0.0 };

/// The tolerance for an expected output of element type `dt`; a float case's own tolerances
/// (case.json) widen it where they are larger.
pub fn tolerance(dt: DatumType, case: &CaseMeta) -> Tol {
    let named = match dt {
        DatumType::F32 => F32_TOL,
        DatumType::F64 => F64_TOL,
        DatumType::F16 => F16_TOL,
        _ => return EXACT,
    };
    Tol { rtol: named.rtol.max(case.rtol), atol: named.atol.max(case.atol) }
}

/// One input or output as `case.json` describes it (the harness reads its name; the element
/// type and shapes are there for people).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct IoMeta {
    /// The ONNX graph's name for it.
    pub name: String,
}

/// `case.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct CaseMeta {
    /// The case's name (`test_abs`).
    pub name: String,
    /// The op under test.
    pub main_op: String,
    /// The default domain's opset.
    pub opset: Option<i64>,
    /// A function body expanded into primitive ops (`_expanded`).
    pub expanded: bool,
    /// The case's own relative tolerance.
    pub rtol: f64,
    /// The case's own absolute tolerance.
    pub atol: f64,
    /// Graph inputs.
    pub inputs: Vec<IoMeta>,
    /// Graph outputs.
    pub outputs: Vec<IoMeta>,
    /// Why the case is out of scope (types or domains), if it is.
    pub out_of_scope: Option<String>,
    /// `constants` for the constant-parameter variant of a case (every graph input but the
    /// first stored as an initializer); absent for the standard's own form.
    #[serde(default)]
    pub variant: Option<String>,
}

/// How one engine did on one case.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    /// `pass` or `fail`.
    pub status: String,
    /// Where it failed: convert, load, feed, run, compare, panic, timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The error, for a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The failure's classes for grouping (numbers and node names taken out): one per blocker
    /// of a refused conversion, else the message's first line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
    /// Largest |found − expected| over the outputs compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_abs: Option<f64>,
    /// `max_abs` over the largest |expected|.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rel: Option<f64>,
    /// How tract ran it: `optimized`, or a fallback after optimisation failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Outcome {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.status == "pass"
    }

    fn fail(stage: &str, message: String, classes: Vec<String>) -> Self {
        let classes = if classes.is_empty() { vec![class_of(&message)] } else { classes };
        Outcome {
            status: "fail".into(),
            stage: Some(stage.into()),
            message: Some(message),
            classes,
            ..Outcome::default()
        }
    }
}

/// One case's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// The op under test.
    pub op: String,
    /// A function body expanded into primitive ops.
    pub expanded: bool,
    /// The default domain's opset.
    pub opset: Option<i64>,
    /// `constants` for a constant-parameter variant (see [`CaseMeta::variant`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Why the case is out of scope, if it is (then neither engine ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_scope: Option<String>,
    /// Kestrel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kestrel: Option<Outcome>,
    /// tract.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tract: Option<Outcome>,
}

/// The case folders (those holding a `case.json`) under `root`, sorted, whose name contains
/// `only` when given.
pub fn case_dirs(root: &Path, only: Option<&str>) -> std::io::Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").is_file())
        .filter(|p| only.is_none_or(|o| p.file_name().is_some_and(|n| n.to_string_lossy().contains(o))))
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// Reads `case.json`.
pub fn read_meta(dir: &Path) -> Result<CaseMeta, String> {
    let text = std::fs::read_to_string(dir.join("case.json")).map_err(|e| format!("{}: {e}", dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}/case.json: {e}", dir.display()))
}

/// Runs one case: Kestrel always, tract when `with_tract`. Panics are caught per engine.
pub fn run_case(dir: &Path, with_tract: bool) -> CaseResult {
    let meta = match read_meta(dir) {
        Ok(m) => m,
        Err(e) => {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let failed = Some(Outcome::fail("load", e, Vec::new()));
            return CaseResult {
                name,
                op: "?".into(),
                expanded: false,
                opset: None,
                variant: None,
                out_of_scope: None,
                kestrel: failed.clone(),
                tract: with_tract.then_some(failed).flatten(),
            };
        }
    };
    let mut result = CaseResult {
        name: meta.name.clone(),
        op: meta.main_op.clone(),
        expanded: meta.expanded,
        opset: meta.opset,
        variant: meta.variant.clone(),
        out_of_scope: meta.out_of_scope.clone(),
        kestrel: None,
        tract: None,
    };
    if meta.out_of_scope.is_some() {
        return result;
    }
    let data = match read_data(dir, &meta) {
        Ok(d) => d,
        Err(e) => {
            let failed = Some(Outcome::fail("load", e, Vec::new()));
            result.kestrel = failed.clone();
            result.tract = with_tract.then_some(failed).flatten();
            return result;
        }
    };
    let model = dir.join("model.onnx");
    result.kestrel = Some(guarded(|| kestrel_case(&model, &meta, &data)));
    if with_tract {
        result.tract = Some(guarded(|| tract_case(&model, &meta, &data)));
    }
    result
}

/// A case's arrays.
pub struct CaseData {
    /// Inputs, in graph order.
    pub inputs: Vec<Tensor>,
    /// Expected outputs, in graph order.
    pub outputs: Vec<Tensor>,
}

fn read_data(dir: &Path, meta: &CaseMeta) -> Result<CaseData, String> {
    let read = |what: &str, n: usize| -> Result<Vec<Tensor>, String> {
        (0..n).map(|i| read_npy(&dir.join(format!("{what}_{i}.npy")))).collect()
    };
    Ok(CaseData { inputs: read("input", meta.inputs.len())?, outputs: read("output", meta.outputs.len())? })
}

/// Reads a `.npy` of any of numpy's plain numeric or bool dtypes (little-endian, C order) as a
/// tract tensor of the same element type.
pub fn read_npy(path: &Path) -> Result<Tensor, String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(|e| err(&e))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| err(&e))?;
    if npy.order() != npyz::Order::C {
        return Err(err(&"Fortran-ordered array"));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => return Err(err(&format!("dtype {:?} is not a plain array", other.descr()))),
    };
    macro_rules! tensor {
        ($t:ty) => {{
            let v: Vec<$t> = npy.into_vec().map_err(|e| err(&e))?;
            Tensor::from_shape(&shape, &v).map_err(|e| err(&e))
        }};
    }
    match descr.trim_start_matches(['<', '|', '=']) {
        "f4" => tensor!(f32),
        "f8" => tensor!(f64),
        "f2" => {
            // npyz reads f16 only with its `half` feature: the data is the file's last 2·n bytes.
            let n: usize = shape.iter().product();
            let raw = bytes.get(bytes.len().saturating_sub(2 * n)..).filter(|r| r.len() == 2 * n);
            let raw = raw.ok_or_else(|| err(&"truncated f16 data"))?;
            let little = descr.starts_with('<') || (descr.starts_with('=') && cfg!(target_endian = "little"));
            let v: Vec<f16> = raw
                .chunks_exact(2)
                .map(|b| {
                    f16::from_bits(if little {
                        u16::from_le_bytes([b[0], b[1]])
                    } else {
                        u16::from_be_bytes([b[0], b[1]])
                    })
                })
                .collect();
            Tensor::from_shape(&shape, &v).map_err(|e| err(&e))
        }
        "b1" => tensor!(bool),
        "i1" => tensor!(i8),
        "i2" => tensor!(i16),
        "i4" => tensor!(i32),
        "i8" => tensor!(i64),
        "u1" => tensor!(u8),
        "u2" => tensor!(u16),
        "u4" => tensor!(u32),
        "u8" => tensor!(u64),
        _ => Err(err(&format!("dtype {descr} is not read"))),
    }
}

/// Every element of a tensor as f64 (bool as 0/1).
pub fn values_f64(t: &Tensor) -> Result<Vec<f64>, String> {
    let view = t.try_as_plain_ram().map_err(|e| e.to_string())?;
    macro_rules! conv {
        ($t:ty, $f:expr) => {
            view.as_slice::<$t>().map_err(|e| e.to_string())?.iter().map($f).collect()
        };
    }
    Ok(match t.datum_type() {
        DatumType::F32 => conv!(f32, |&x| f64::from(x)),
        DatumType::F64 => conv!(f64, |&x| x),
        DatumType::F16 => conv!(f16, |&x| x.to_f64()),
        DatumType::Bool => conv!(bool, |&x| f64::from(u8::from(x))),
        DatumType::I8 => conv!(i8, |&x| f64::from(x)),
        DatumType::I16 => conv!(i16, |&x| f64::from(x)),
        DatumType::I32 => conv!(i32, |&x| f64::from(x)),
        DatumType::I64 => conv!(i64, |&x| x as f64),
        DatumType::U8 => conv!(u8, |&x| f64::from(x)),
        DatumType::U16 => conv!(u16, |&x| f64::from(x)),
        DatumType::U32 => conv!(u32, |&x| f64::from(x)),
        DatumType::U64 => conv!(u64, |&x| x as f64),
        DatumType::TDim => {
            let dims = view.as_slice::<TDim>().map_err(|e| e.to_string())?;
            dims.iter().map(|d| d.to_i64().map(|v| v as f64).map_err(|e| e.to_string())).collect::<Result<_, _>>()?
        }
        dt => return Err(format!("element type {dt:?} is not compared")),
    })
}

/// Every element of an integer or bool tensor as a 64-bit two's-complement pattern (`u64` as
/// its bits, unlike [`values_i64`]); `None` for other element types.
fn values_bits64(t: &Tensor) -> Option<Result<Vec<i64>, String>> {
    if t.datum_type() == DatumType::U64 {
        let view = match t.try_as_plain_ram() {
            Ok(v) => v,
            Err(e) => return Some(Err(e.to_string())),
        };
        return Some(view.as_slice::<u64>().map_err(|e| e.to_string()).map(|s| s.iter().map(|&x| x as i64).collect()));
    }
    values_i64(t)
}

/// Every element of an integer or bool tensor as i64; `None` for other element types.
fn values_i64(t: &Tensor) -> Option<Result<Vec<i64>, String>> {
    let view = match t.try_as_plain_ram() {
        Ok(v) => v,
        Err(e) => return Some(Err(e.to_string())),
    };
    macro_rules! conv {
        ($t:ty) => {
            view.as_slice::<$t>()
                .map_err(|e| e.to_string())
                .and_then(|s| s.iter().map(|&x| i64::try_from(x).map_err(|_| format!("{x} overflows i64"))).collect())
        };
    }
    Some(match t.datum_type() {
        DatumType::Bool => {
            view.as_slice::<bool>().map_err(|e| e.to_string()).map(|s| s.iter().map(|&b| i64::from(b)).collect())
        }
        DatumType::I8 => conv!(i8),
        DatumType::I16 => conv!(i16),
        DatumType::I32 => conv!(i32),
        DatumType::I64 => conv!(i64),
        DatumType::U8 => conv!(u8),
        DatumType::U16 => conv!(u16),
        DatumType::U32 => conv!(u32),
        DatumType::U64 => conv!(u64),
        _ => return None,
    })
}

/// Runs `f` with panics caught: a panic is a failure at stage `panic`.
fn guarded(f: impl FnOnce() -> Outcome) -> Outcome {
    catch_quietly(f).unwrap_or_else(|message| Outcome::fail("panic", format!("panicked: {message}"), Vec::new()))
}

/// Kestrel: convert with the default options, run the `.kes` at batch 1, compare.
fn kestrel_case(model: &Path, meta: &CaseMeta, data: &CaseData) -> Outcome {
    let path = model.display().to_string();
    let conversion = match kestrel_rt_onnx::convert(model, &ConvertOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            let classes = match &e {
                ConvertError::Unsupported { blockers, .. } => {
                    let mut c: Vec<String> =
                        blockers.iter().map(|b| normalise(&format!("{}: {}", b.op, b.why))).collect();
                    c.sort();
                    c.dedup();
                    c
                }
                _ => Vec::new(),
            };
            return Outcome::fail("convert", e.to_string().replace(&path, "model.onnx"), classes);
        }
    };
    let kes = match kestrel_rt::Model::from_bytes(&conversion.kes) {
        Ok(m) => m,
        Err(e) => return Outcome::fail("load", format!("loading the .kes: {e}"), Vec::new()),
    };
    let cpu = match kes.cpu() {
        Ok(c) => c,
        Err(e) => return Outcome::fail("load", format!("loading the .kes: {e}"), Vec::new()),
    };
    let file = *cpu.file();
    let specs: Vec<_> = file.meta().inputs().collect();
    // Owned feeds first, borrowed as `Input`s after.
    enum Feed {
        F32(Vec<f32>),
        I64(Vec<i64>),
        I32(Vec<i32>),
    }
    let mut feeds = Vec::with_capacity(specs.len());
    for spec in &specs {
        let Some(i) = meta.inputs.iter().position(|m| m.name == spec.name) else {
            return Outcome::fail(
                "feed",
                format!("the .kes input `{}` is not one of the case's inputs", spec.name),
                Vec::new(),
            );
        };
        let t = &data.inputs[i];
        let mut per_sample: Vec<usize> = spec.shape.dims().iter().map(|&d| d as usize).collect();
        // Integers fed as limbs: the per-sample shape has one more axis, the limbs'.
        let limbs = spec.feed == FeedDType::I64Limbs;
        if limbs {
            per_sample.pop();
        }
        let shape = t.shape();
        let int_spec = spec.feed != FeedDType::F32;
        let batch1 = shape == per_sample.as_slice()
            || (shape.first() == Some(&1) && shape[1..] == per_sample[..])
            // Integer inputs are fed flat (`input_ids`): the element count is what matters.
            || (int_spec && t.len() == per_sample.iter().product::<usize>());
        if !batch1 {
            return Outcome::fail(
                "feed",
                format!(
                    "input `{}` of shape {shape:?} is not one sample of per-sample shape {per_sample:?}",
                    spec.name
                ),
                Vec::new(),
            );
        }
        let dt = t.datum_type();
        let not_taken = || {
            Outcome::fail(
                "feed",
                format!("input dtype {dt:?} not taken (the .kes input `{}` takes {:?})", spec.name, spec.feed),
                Vec::new(),
            )
        };
        let feed = match spec.feed {
            FeedDType::F32 => match dt {
                DatumType::F32 | DatumType::F64 | DatumType::F16 | DatumType::Bool => match values_f64(t) {
                    Ok(v) => Feed::F32(v.into_iter().map(|x| x as f32).collect()),
                    Err(e) => return Outcome::fail("feed", e, Vec::new()),
                },
                _ => return not_taken(),
            },
            FeedDType::I64Limbs => match values_bits64(t) {
                Some(Ok(v)) => Feed::F32(v.iter().flat_map(|&x| kestrel_rt::format::limbs::encode(x)).collect()),
                Some(Err(e)) => return Outcome::fail("feed", e, Vec::new()),
                None => return not_taken(),
            },
            FeedDType::I64 | FeedDType::I32 => match values_i64(t) {
                Some(Ok(v)) if spec.feed == FeedDType::I64 => Feed::I64(v),
                Some(Ok(v)) => match v.into_iter().map(i32::try_from).collect::<Result<Vec<_>, _>>() {
                    Ok(v) => Feed::I32(v),
                    Err(e) => return Outcome::fail("feed", format!("input `{}`: {e}", spec.name), Vec::new()),
                },
                Some(Err(e)) => return Outcome::fail("feed", e, Vec::new()),
                None => return not_taken(),
            },
        };
        feeds.push(feed);
    }
    let inputs: Vec<kestrel_rt::Input<'_>> = feeds
        .iter()
        .map(|f| match f {
            Feed::F32(v) => kestrel_rt::Input::F32(v),
            Feed::I64(v) => kestrel_rt::Input::I64(v),
            Feed::I32(v) => kestrel_rt::Input::I32(v),
        })
        .collect();
    let mut out_shapes = Vec::new();
    for i in 0..cpu.output_count() {
        match cpu.output(i) {
            Ok(t) => out_shapes.push(t.shape.dims().iter().map(|&d| d as usize).collect::<Vec<usize>>()),
            Err(e) => return Outcome::fail("load", format!("output {i}: {e}"), Vec::new()),
        }
    }
    let mut session = match kes.session(1) {
        Ok(s) => s,
        Err(e) => return Outcome::fail("load", format!("a session at batch 1: {e}"), Vec::new()),
    };
    let mut outs: Vec<Vec<f32>> = out_shapes.iter().map(|s| vec![0f32; s.iter().product()]).collect();
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    match session.run(&inputs, &mut refs) {
        Ok(1) => {}
        Ok(b) => {
            return Outcome::fail("run", format!("ran a batch of {b}, not 1 (a model without inputs?)"), Vec::new())
        }
        Err(e) => return Outcome::fail("run", format!("running: {e}"), Vec::new()),
    }
    // An output whose size the data decide (a run-time dim: NonZero's count) is at the run's
    // size: the leading part of its buffer, sized at the bound.
    for (i, (s, o)) in out_shapes.iter_mut().zip(outs.iter_mut()).enumerate() {
        if let Some(now) = session.output_shape(i) {
            o.truncate(now.iter().product());
            *s = now;
        }
    }
    let kinds: Vec<_> = file.meta().outputs().map(|o| o.kind).collect();
    let mut found: Vec<(Vec<usize>, Vec<f64>)> = Vec::with_capacity(outs.len());
    for (i, (mut s, v)) in out_shapes.into_iter().zip(outs).enumerate() {
        if kinds.get(i) != Some(&kestrel_rt::format::OutputKind::I64Limbs) {
            found.push((s, v.into_iter().map(f64::from).collect()));
            continue;
        }
        // Integers as limbs: decoded exactly, read as the expected type (u64 as its bits).
        s.pop();
        let mut ints = vec![0i64; v.len() / kestrel_rt::format::limbs::LIMBS];
        if let Err(e) = kestrel_rt::format::limbs::decode_into(&v, &mut ints) {
            return Outcome::fail("compare", format!("output {i}: {e}"), Vec::new());
        }
        let unsigned = data.outputs.get(i).is_some_and(|t| t.datum_type() == DatumType::U64);
        let v = ints.into_iter().map(|x| if unsigned { x as u64 as f64 } else { x as f64 }).collect();
        found.push((s, v));
    }
    compare_outputs(meta, data, &found, ShapeRule::LeadingOne)
}

/// tract: the ONNX file as it is, with input facts from the arrays, optimised; when
/// optimisation fails, the decluttered typed model (no codegen), then the plain typed one.
fn tract_case(model: &Path, meta: &CaseMeta, data: &CaseData) -> Outcome {
    // The whole chain as the message, its root cause as the class.
    let fail = |stage: &str, what: &str, e: TractError| {
        let class = normalise(&format!("{what}: {}", e.root_cause()));
        Outcome::fail(stage, format!("tract could not {what}: {e:#}"), vec![class])
    };
    let inference = match tract_onnx::onnx().model_for_path(model) {
        Ok(m) => m,
        Err(e) => return fail("convert", "import", e),
    };
    let mut inference = inference;
    for (i, t) in data.inputs.iter().enumerate() {
        if let Err(e) = inference.set_input_fact(i, InferenceFact::dt_shape_from_tensor(t)) {
            return fail("convert", &format!("set input {i}'s fact"), e);
        }
    }
    let (plan, note) = match inference.clone().into_optimized().and_then(|m| m.into_runnable()) {
        Ok(p) => (p, "optimized"),
        Err(opt) => match inference.into_typed() {
            Ok(typed) => match typed.clone().into_decluttered().and_then(|m| m.into_runnable()) {
                Ok(p) => (p, "decluttered (optimisation failed)"),
                Err(_) => match typed.into_runnable() {
                    Ok(p) => (p, "typed (optimisation and declutter failed)"),
                    Err(e) => return fail("convert", "prepare", e),
                },
            },
            Err(e) => {
                drop(opt);
                return fail("convert", "type the model", e);
            }
        },
    };
    let inputs: TVec<TValue> = data.inputs.iter().map(|t| t.clone().into_tvalue()).collect();
    let outs = match plan.run(inputs) {
        Ok(o) => o,
        Err(e) => return fail("run", "run", e),
    };
    let mut found = Vec::with_capacity(outs.len());
    for o in &outs {
        match values_f64(o) {
            Ok(v) => found.push((o.shape().to_vec(), v)),
            Err(e) => return Outcome::fail("compare", e, Vec::new()),
        }
    }
    let mut outcome = compare_outputs(meta, data, &found, ShapeRule::Exact);
    outcome.note = Some(note.to_string());
    outcome
}

/// How an engine's output shape is held against the expected one.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ShapeRule {
    /// The same shape.
    Exact,
    /// The same, or one of them with a leading batch-1 axis the other lacks (Kestrel's outputs
    /// are per sample).
    LeadingOne,
}

fn same_shape(found: &[usize], expected: &[usize], rule: ShapeRule) -> bool {
    // A scalar and a one-element vector compare as numpy's `allclose` (and ONNX's own backend
    // test runner) compare them: equal.
    let scalar_like = |s: &[usize]| s.is_empty() || s == [1];
    found == expected
        || (scalar_like(found) && scalar_like(expected))
        || (rule == ShapeRule::LeadingOne
            && (found.split_first().is_some_and(|(&d, rest)| d == 1 && rest == expected)
                || expected.split_first().is_some_and(|(&d, rest)| d == 1 && rest == found)))
}

/// The outputs, element type and shape checked, values within [`tolerance`], NaN where NaN is
/// expected.
fn compare_outputs(meta: &CaseMeta, data: &CaseData, found: &[(Vec<usize>, Vec<f64>)], rule: ShapeRule) -> Outcome {
    if found.len() != data.outputs.len() {
        let m = format!("{} outputs, expected {}", found.len(), data.outputs.len());
        return Outcome::fail("compare", m, Vec::new());
    }
    let (mut max_abs, mut max_ref) = (0f64, 0f64);
    let mut failure = None;
    for (i, ((shape, got), want)) in found.iter().zip(&data.outputs).enumerate() {
        if !same_shape(shape, want.shape(), rule) {
            failure.get_or_insert(format!("output {i} has shape {shape:?}, expected {:?}", want.shape()));
            continue;
        }
        let expected = match values_f64(want) {
            Ok(v) => v,
            Err(e) => return Outcome::fail("compare", e, Vec::new()),
        };
        let tol = tolerance(want.datum_type(), meta);
        let d = diff(&expected, got, tol);
        max_abs = max_abs.max(d.max_abs);
        max_ref = max_ref.max(d.max_ref);
        if d.bad > 0 && failure.is_none() {
            let (at, e, g) = d.first_bad.unwrap_or_default();
            failure = Some(format!(
                "output {i}: {} of {} values outside rtol {} atol {} (first at element {at}: expected {e}, found {g})",
                d.bad,
                expected.len(),
                tol.rtol,
                tol.atol
            ));
        }
    }
    let mut outcome = match failure {
        Some(m) => Outcome::fail("compare", m, vec!["wrong values or shape".to_string()]),
        None => Outcome { status: "pass".into(), ..Outcome::default() },
    };
    outcome.max_abs = Some(max_abs);
    outcome.max_rel = Some(if max_ref > 0.0 { max_abs / max_ref } else { max_abs });
    outcome
}

/// How two arrays differ.
#[derive(Debug, Default)]
struct Diff {
    /// Largest |found − expected| over finite pairs.
    max_abs: f64,
    /// Largest finite |expected|.
    max_ref: f64,
    /// Elements outside the tolerance (NaN against a number counts).
    bad: usize,
    /// The first such element: index, expected, found.
    first_bad: Option<(usize, f64, f64)>,
}

fn diff(expected: &[f64], found: &[f64], tol: Tol) -> Diff {
    let mut d = Diff { bad: expected.len().abs_diff(found.len()), ..Diff::default() };
    for (i, (&e, &g)) in expected.iter().zip(found).enumerate() {
        let ok = if e.is_nan() || g.is_nan() {
            e.is_nan() && g.is_nan()
        } else if e.is_infinite() || g.is_infinite() {
            e == g
        } else {
            let err = (g - e).abs();
            d.max_abs = d.max_abs.max(err);
            d.max_ref = d.max_ref.max(e.abs());
            err <= tol.atol + tol.rtol * e.abs()
        };
        if !ok {
            d.bad += 1;
            d.first_bad.get_or_insert((i, e, g));
        }
    }
    d
}

/// A message reduced to a class for grouping: its first line, quoted names (`` `x` ``) as
/// `` `…` ``, see [`normalise`].
pub fn class_of(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    let mut out = String::with_capacity(line.len());
    let mut quoted = false;
    for c in line.chars() {
        match (c, quoted) {
            ('`', false) => out.push_str("`…"),
            ('`', true) => out.push('`'),
            (_, true) => continue,
            _ => out.push(c),
        }
        quoted ^= c == '`';
    }
    normalise(&out)
}

/// Numbers standing on their own (not part of a name like `f32` or `x_0`) as `N`, at most 160
/// characters.
fn normalise(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut prev: Option<char> = None;
    let mut in_number = false;
    for c in line.chars() {
        if c.is_ascii_digit() && (in_number || !prev.is_some_and(|p| p.is_alphanumeric() || p == '_')) {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else if !(in_number && c == '.') {
            in_number = false;
            out.push(c);
        }
        prev = Some(c);
    }
    if out.chars().count() > 160 {
        out = out.chars().take(159).collect::<String>() + "…";
    }
    out
}
