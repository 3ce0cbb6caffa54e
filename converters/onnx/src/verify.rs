//! Running the ONNX model with tract and the `.kes` with Kestrel on the same inputs.

use crate::error::{tract_err, ConvertError};
use crate::load::{load_typed, DimBinding};
use kestrel_rt::Input;
use serde::{Deserialize, Serialize};
use std::path::Path;
use tract_onnx::prelude::*;

/// Input values.
#[derive(Clone, Debug, PartialEq)]
pub enum InputData {
    /// f32 values.
    F32(Vec<f32>),
    /// i64 values (token ids).
    I64(Vec<i64>),
}

/// One input with its full shape (leading axis = batch).
#[derive(Clone, Debug, PartialEq)]
pub struct InputTensor {
    /// Full shape, batch first.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: InputData,
}

impl InputTensor {
    /// An f32 input.
    pub fn f32(shape: &[usize], data: Vec<f32>) -> Self {
        Self { shape: shape.to_vec(), data: InputData::F32(data) }
    }
    /// An i64 input.
    pub fn i64(shape: &[usize], data: Vec<i64>) -> Self {
        Self { shape: shape.to_vec(), data: InputData::I64(data) }
    }
    /// Its values as the runtime's [`Input`] (whole batch).
    pub fn as_input(&self) -> Input<'_> {
        match &self.data {
            InputData::F32(d) => Input::F32(d),
            InputData::I64(d) => Input::I64(d),
        }
    }
}

/// How close Kestrel is to tract.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Batch size run.
    pub batch: usize,
    /// The bounded dims' values the inputs were given at (name, value), in the file's order:
    /// the size verified (empty for a model of fixed sizes).
    #[serde(default)]
    pub dims: Vec<(String, usize)>,
    /// Largest |kestrel − tract| over every output element.
    pub max_abs_err: f64,
    /// `max_abs_err` / largest |tract output|.
    pub max_rel_err: f64,
    /// Fraction of rows (last-axis vectors of every output) whose argmax agrees.
    pub top1_agreement: f64,
    /// Rows compared for top-1.
    pub rows: usize,
    /// tract's outputs (flattened, batch included).
    pub tract: Vec<Vec<f32>>,
    /// Kestrel's outputs (flattened, batch included).
    pub kestrel: Vec<Vec<f32>>,
}

/// One output: full shape (batch first) and row-major values.
pub type ShapedOutput = (Vec<usize>, Vec<f32>);

/// Runs the ONNX model with tract at the inputs' batch size: typed and optimised, or — when
/// tract's own optimiser fails on the model (tract 0.21's codegen rejects some constant
/// left-hand matrix products, e.g. AFT's `exp(w)·(e^K ⊙ V)`, with "No packing for …") — the
/// typed, decluttered graph run without codegen, which computes the same ONNX semantics.
pub fn run_tract(onnx_path: impl AsRef<Path>, inputs: &[InputTensor]) -> Result<Vec<ShapedOutput>, ConvertError> {
    let path = onnx_path.as_ref();
    let p = path.display().to_string();
    // Symbolic input dims take their sizes from the arrays given.
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|i| i.shape.clone()).collect();
    let batch = batch_of(path, inputs)?;
    let (model, loaded) = load_typed(path, &DimBinding { batch, dims: &[], shapes: Some(shapes) })?;
    if loaded.len() != inputs.len() {
        return Err(ConvertError::Verify {
            expected: format!("{} inputs", loaded.len()),
            found: format!("{}", inputs.len()),
        });
    }
    let mut tv = TVec::new();
    for (l, i) in loaded.iter().zip(inputs) {
        if l.shape != i.shape {
            return Err(ConvertError::Verify {
                expected: format!("input `{}` of shape {:?}", l.name, l.shape),
                found: format!("{:?}", i.shape),
            });
        }
        let t = match &i.data {
            InputData::F32(d) => Tensor::from_shape(&i.shape, d),
            InputData::I64(d) => Tensor::from_shape(&i.shape, d),
        }
        .and_then(|t| t.cast_to_dt(l.dt).map(|c| c.into_owned()))
        .map_err(tract_err(&p, "build an input tensor"))?;
        tv.push(t.into_tvalue());
    }
    let outs = crate::error::contain(&p, "run the model", || {
        let plan = match model.clone().into_optimized().and_then(|m| m.into_runnable()) {
            Ok(plan) => plan,
            Err(_) => model.into_runnable().map_err(tract_err(&p, "prepare the model"))?,
        };
        let mut state = plan.spawn().map_err(tract_err(&p, "prepare the model"))?;
        state
            .run_plan_with_eval(tv, |ctx, mut op_state, node, inputs| {
                // Shape arithmetic tract keeps as `TDim` goes in again as i64 where an op
                // evaluates numbers only (a CumSum over a mask built from shapes, in dynamo
                // exports), as the lowering's constant folds do.
                let numbers = crate::load::shape_values_as_numbers(&inputs);
                let eval = tract_onnx::tract_core::plan::eval;
                eval(ctx, op_state.as_deref_mut(), node, inputs).or_else(|e| {
                    let Some(n) = numbers else { return Err(e) };
                    // The outputs back in the types the graph declares.
                    eval(ctx, op_state, node, n)?
                        .into_iter()
                        .zip(&node.outputs)
                        .map(|(o, slot)| match slot.fact.datum_type {
                            DatumType::TDim if o.datum_type() != DatumType::TDim => {
                                Ok(o.cast_to::<TDim>()?.into_owned().into_tvalue())
                            }
                            _ => Ok(o),
                        })
                        .collect()
                })
            })
            .map_err(tract_err(&p, "run the model"))
    })?;
    outs.into_iter()
        .map(|o| {
            let t = o.cast_to::<f32>().map_err(tract_err(&p, "read an output"))?;
            let v = t
                .try_as_plain_ram()
                .and_then(|v| v.as_slice::<f32>().map(|s| s.to_vec()))
                .map_err(tract_err(&p, "read an output"))?;
            Ok((o.shape().to_vec(), v))
        })
        .collect()
}

/// The batch `inputs` are given at: the leading axis of the first input that has a batch axis
/// in the ONNX graph (given with it; an input with a fixed first axis N > 1, or given as exactly
/// its per-sample shape, is one whole sample and says nothing), or 1.
fn batch_of(path: &Path, inputs: &[InputTensor]) -> Result<usize, ConvertError> {
    let shapes = Some(inputs.iter().map(|i| i.shape.clone()).collect());
    let (_, loaded) = load_typed(path, &DimBinding { batch: 1, dims: &[], shapes })?;
    Ok(loaded.iter().zip(inputs).find(|(l, _)| l.batched).map_or(1, |(l, i)| {
        if i.shape.len() == l.shape.len() {
            i.shape.first().copied().unwrap_or(1)
        } else {
            1
        }
    }))
}

/// Runs a `.kes` model with Kestrel on `inputs`, in a session as large as the largest whole
/// number of samples any input holds (the session itself checks that they agree). A model with
/// bounded dims runs at the inputs' own sizes.
pub fn run_kestrel(kes: &[u8], inputs: &[InputTensor]) -> Result<Vec<Vec<f32>>, ConvertError> {
    use kestrel_rt_format::{limbs, FeedDType, OutputKind};
    let model = kestrel_rt::Model::from_bytes(kes)?;
    let cpu = model.cpu()?;
    let file = *cpu.file();
    let meta = file.meta();
    // Integers the model holds as byte limbs (`kestrel_rt_format::limbs`) go in encoded.
    let encoded: Vec<Option<Vec<f32>>> = inputs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let tensor = file.inputs().get(i);
            let limbs_in = meta.inputs().any(|m| Some(m.tensor) == tensor && m.feed == FeedDType::I64Limbs);
            match &x.data {
                InputData::I64(d) if limbs_in => Some(d.iter().flat_map(|&v| limbs::encode(v)).collect()),
                _ => None,
            }
        })
        .collect();
    let feeds: Vec<Input<'_>> = inputs
        .iter()
        .zip(&encoded)
        .map(|(x, e)| match e {
            Some(e) => Input::F32(e),
            None => x.as_input(),
        })
        .collect();
    let shaped = bounded_shapes(&model, inputs)?;
    let batch = feeds
        .iter()
        .enumerate()
        .filter_map(|(i, x)| {
            let n: usize = match &shaped {
                Some((shapes, _)) => shapes.get(i)?.iter().product(),
                None => cpu.input(i).ok()?.shape.dims().iter().map(|&d| d as usize).product(),
            };
            let len = match x {
                Input::F32(d) => d.len(),
                Input::I64(d) => d.len(),
                Input::I32(d) => d.len(),
            };
            (n > 0).then(|| len / n)
        })
        .max()
        .unwrap_or(1);
    let mut session = model.session(batch.max(1))?;
    let mut outs = match &shaped {
        Some((shapes, _)) => {
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            session.run_vec_shaped(&feeds, &refs)?
        }
        None => session.run_vec(&feeds)?,
    };
    // Integers held as limbs come out as their values (in f32, as tract's are read).
    for (i, o) in outs.iter_mut().enumerate() {
        let tensor = file.outputs().get(i);
        if meta.outputs().any(|m| Some(m.tensor) == tensor && m.kind == OutputKind::I64Limbs) {
            *o = o.chunks(limbs::LIMBS).map(|c| limbs::decode(c).map_or(f32::NAN, |v| v as f32)).collect();
        }
    }
    Ok(outs)
}

/// Each input's per-sample shape, and the bounded dims' values (name, value) there.
pub(crate) type BoundedShapes = (Vec<Vec<usize>>, Vec<(String, usize)>);

/// Each input's per-sample shape for a `.kes` with bounded dims, and the dims' values there
/// (name, value, in the file's order): an array with one axis more than the model's input has
/// a leading batch axis, one of the input's rank is one sample (token ids, which the file takes
/// flat, as the product of the axes after the batch). A size outside a dim's range, a fixed
/// axis that differs or a rank that fits neither is an error naming the input, the dim and its
/// range. `None` for a model of fixed sizes.
pub(crate) fn bounded_shapes(
    model: &kestrel_rt::Model,
    inputs: &[InputTensor],
) -> Result<Option<BoundedShapes>, ConvertError> {
    use kestrel_rt_format::Target;
    let cpu = model.cpu()?;
    let file = cpu.file();
    let Some(dims) = file.dims() else { return Ok(None) };
    if inputs.len() != cpu.input_count() {
        return Err(ConvertError::Verify {
            expected: format!("{} inputs", cpu.input_count()),
            found: format!("{}", inputs.len()),
        });
    }
    let mut shapes = Vec::with_capacity(inputs.len());
    for (i, x) in inputs.iter().enumerate() {
        let t = cpu.input(i).map_err(kestrel_rt::Error::from)?;
        let rank = t.shape.rank();
        let flat_ids = t.dtype == kestrel_rt_format::DType::I32 && rank == 1 && x.shape.len() > 2;
        shapes.push(match x.shape.len() {
            _ if flat_ids => vec![x.shape[1..].iter().product()],
            n if n == rank => x.shape.clone(),
            n if n == rank + 1 => x.shape[1..].to_vec(),
            _ => {
                return Err(ConvertError::Verify {
                    expected: format!(
                        "input {i} (`{}`) of rank {rank} per sample, or {} with a batch axis",
                        t.name,
                        rank + 1
                    ),
                    found: format!("an array of shape {:?}", x.shape),
                })
            }
        });
    }
    // Each dim's value: the input axis that is the dim itself.
    let mut values = Vec::new();
    let mut ranges = Vec::new();
    for s in 0..dims.sym_count() {
        let sym = dims.sym(s).map_err(kestrel_rt::Error::from)?;
        ranges.push(format!("{} {}..={}", sym.name, sym.min, sym.max));
        let at = (0..dims.binding_count()).filter_map(|b| dims.binding(b).ok()).find_map(|b| match b.target {
            Target::TensorDim { tensor, axis } if b.expr.as_sym() == Some(s as usize) => {
                let k = file.inputs().position(|id| id == tensor)?;
                shapes.get(k)?.get(usize::from(axis)).copied()
            }
            _ => None,
        });
        if let Some(v) = at {
            values.push((sym.name.to_string(), v));
        }
    }
    let given = |k: usize| format!("input {k} of shape {:?}", inputs[k].shape);
    let want = model.input_shapes_at(&values).map_err(|e| ConvertError::Verify {
        expected: format!("sizes within the file's bounded dims ({})", ranges.join(", ")),
        found: format!("{}: {e}", (0..inputs.len()).map(given).collect::<Vec<_>>().join(", ")),
    })?;
    for (k, (w, g)) in want.iter().zip(&shapes).enumerate() {
        if w != g {
            let at: Vec<String> = values.iter().map(|(n, v)| format!("{n}={v}")).collect();
            return Err(ConvertError::Verify {
                expected: format!("input {k} of per-sample shape {w:?} at {}", at.join(", ")),
                found: given(k),
            });
        }
    }
    Ok(Some((shapes, values)))
}

/// Compares two sets of outputs; `last_dims[i]` is output i's last-axis length (for top-1).
pub fn compare(
    tract: &[Vec<f32>],
    kestrel: &[Vec<f32>],
    last_dims: &[usize],
) -> Result<(f64, f64, f64, usize), ConvertError> {
    if tract.len() != kestrel.len() {
        return Err(ConvertError::Verify {
            expected: format!("{} outputs", tract.len()),
            found: format!("{}", kestrel.len()),
        });
    }
    let (mut max_abs, mut max_ref, mut agree, mut rows) = (0f64, 0f64, 0usize, 0usize);
    for ((t, k), &last) in tract.iter().zip(kestrel).zip(last_dims) {
        if t.len() != k.len() {
            return Err(ConvertError::Verify {
                expected: format!("{} output values", t.len()),
                found: format!("{}", k.len()),
            });
        }
        for (&a, &b) in t.iter().zip(k) {
            max_abs = max_abs.max((f64::from(a) - f64::from(b)).abs());
            max_ref = max_ref.max(f64::from(a).abs());
        }
        let last = last.max(1);
        for (rt, rk) in t.chunks(last).zip(k.chunks(last)) {
            rows += 1;
            agree += usize::from(argmax(rt) == argmax(rk));
        }
    }
    let rel = if max_ref > 0.0 { max_abs / max_ref } else { max_abs };
    Ok((max_abs, rel, if rows == 0 { 1.0 } else { agree as f64 / rows as f64 }, rows))
}

fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| if x > bv { (i, x) } else { (bi, bv) }).0
}

/// Non-finite values in a set of arrays: an error naming the first array that has some
/// (errors and top-1 agreement computed over NaN would be meaningless).
fn finite<'a>(what: &str, arrays: impl IntoIterator<Item = (String, &'a [f32])>) -> Result<(), ConvertError> {
    for (name, data) in arrays {
        if let Some((n, first)) = kestrel_rt::npy::non_finite(data) {
            return Err(ConvertError::Verify {
                expected: format!("finite {what}"),
                found: format!("{n} NaN or infinite value(s) in {name} (the first at element {first})"),
            });
        }
    }
    Ok(())
}

/// Runs both and compares: max abs error, max error relative to max |tract output|, top-1.
/// Non-finite inputs or outputs are an error, not a comparison.
///
/// A `.kes` with bounded dims is verified at the inputs' own sizes (tract typed at them, the
/// file run at them): any size within its ranges; one outside them is an error naming the dim
/// and its range, before either runs. [`VerifyReport::dims`] says which size it was.
pub fn verify(onnx_path: impl AsRef<Path>, kes: &[u8], inputs: &[InputTensor]) -> Result<VerifyReport, ConvertError> {
    let dims = bounded_shapes(&kestrel_rt::Model::from_bytes(kes)?, inputs)?.map(|(_, d)| d).unwrap_or_default();
    let batch = batch_of(onnx_path.as_ref(), inputs)?;
    finite(
        "inputs",
        inputs.iter().enumerate().filter_map(|(i, x)| match &x.data {
            InputData::F32(d) => Some((format!("input {i}"), d.as_slice())),
            InputData::I64(_) => None,
        }),
    )?;
    let t = run_tract(onnx_path, inputs)?;
    let k = run_kestrel(kes, inputs)?;
    finite("outputs", t.iter().enumerate().map(|(i, (_, v))| (format!("tract's output {i}"), v.as_slice())))?;
    finite("outputs", k.iter().enumerate().map(|(i, v)| (format!("Kestrel's output {i}"), v.as_slice())))?;
    let last: Vec<usize> = t.iter().map(|(s, _)| s.last().copied().unwrap_or(1)).collect();
    let tract: Vec<Vec<f32>> = t.into_iter().map(|(_, v)| v).collect();
    let (max_abs_err, max_rel_err, top1_agreement, rows) = compare(&tract, &k, &last)?;
    Ok(VerifyReport { batch, dims, max_abs_err, max_rel_err, top1_agreement, rows, tract, kestrel: k })
}
