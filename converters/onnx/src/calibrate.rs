//! Static int8 activation calibration (`kestrel convert --calibrate data.npy`).
//!
//! Which activations: the input of every dense layer whose weights are int8 or int4, and the
//! input of every fused mechanism whose Q/K/V projections are (the runtime multiplies those in
//! integers: `kestrel_rt_cpu::kernels::linear::linear_q8`). Everything else — residual adds,
//! layer norms, softmax, the mechanisms' internal products and their output projections — keeps
//! f32 activations, and activations are still *stored* as f32 in the arena.
//!
//! How: the converted model is run on the calibration samples with every such activation made
//! an extra graph output; each gets the symmetric scale `max|x| / 127` over all samples (no
//! sample of the calibration set saturates).

use crate::error::ConvertError;
use crate::verify::{InputData, InputTensor};
use kestrel_rt::format::ops::{LayerOp, OpClass};
use kestrel_rt::format::{DType, TensorId};
use kestrel_rt::{Input, Model, ModelBuilder};
use serde::{Deserialize, Serialize};

/// One calibrated activation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibratedTensor {
    /// Activation name.
    pub name: String,
    /// Largest |x| seen over the calibration samples.
    pub abs_max: f32,
    /// The int8 scale stored (`abs_max / 127`).
    pub scale: f32,
    /// What reads it in integers (op kinds).
    pub consumers: Vec<String>,
}

/// What calibration did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CalibrationReport {
    /// Samples run.
    pub samples: usize,
    /// Activations given a scale.
    pub tensors: Vec<CalibratedTensor>,
    /// Activations left f32 because they were zero on every sample (their consumers
    /// multiply in f32).
    #[serde(default)]
    pub uncalibrated: Vec<String>,
}

fn integer(b: &ModelBuilder, w: TensorId) -> bool {
    matches!(b.weight_dtype(w), Some(DType::I8 | DType::I4))
}

/// The activations read by integer projections, with the kinds of the ops reading them.
fn targets(b: &ModelBuilder) -> Vec<(TensorId, Vec<String>)> {
    let mut out: Vec<(TensorId, Vec<String>)> = Vec::new();
    for op in b.ops() {
        // Exhaustive: an op added to the format must say here whether it reads a calibrated
        // input (its integer projection quantises the activation it reads).
        let (x, w) = match op.class() {
            // Every mechanism quantises its input for W^Q (and W^K, W^V where it has them).
            OpClass::Mechanism(m) => (m.x(), m.q().w),
            OpClass::Layer(LayerOp::Dense(d)) => (d.x, d.proj.w),
            // No int8-activation kernels: integer convolutions and recurrences dequantise their
            // weights against f32 activations.
            OpClass::Layer(LayerOp::Conv2d(_) | LayerOp::PatchEmbed(_) | LayerOp::Lstm(_) | LayerOp::Gru(_)) => {
                continue
            }
            OpClass::Layer(LayerOp::Embedding(_)) => continue,
            // No projections: arithmetic, normalisation, pooling and layout.
            OpClass::Layer(LayerOp::MatMul(_) | LayerOp::Unary(_) | LayerOp::Binary(_) | LayerOp::Softmax(_)) => {
                continue
            }
            OpClass::Layer(LayerOp::Sdpa(_) | LayerOp::Gather(_) | LayerOp::Chain(_) | LayerOp::Nms(_)) => continue,
            OpClass::Layer(LayerOp::Concat(_) | LayerOp::LinearAttn(_)) => continue,
            OpClass::Layer(LayerOp::Reduce(_) | LayerOp::LayerNorm(_) | LayerOp::Pool2d(_)) => continue,
            OpClass::Layer(LayerOp::Reshape(_) | LayerOp::Slice(_) | LayerOp::Transpose(_)) => continue,
        };
        if !integer(b, w) {
            continue;
        }
        if b.is_weight(x) {
            continue;
        }
        match out.iter_mut().find(|(t, _)| *t == x) {
            Some((_, kinds)) => kinds.push(op.name().to_string()),
            None => out.push((x, vec![op.name().to_string()])),
        }
    }
    out
}

/// Runs `b` on `samples` and stores a scale on every activation an integer projection reads.
pub fn calibrate(b: &mut ModelBuilder, samples: &[InputTensor]) -> Result<CalibrationReport, ConvertError> {
    let bad = |expected: String, found: String| ConvertError::Calibrate { expected, found };
    if samples.len() != b.inputs().len() {
        return Err(bad(
            format!("one calibration array per model input ({})", b.inputs().len()),
            format!("{}", samples.len()),
        ));
    }
    let batch = samples[0].shape.first().copied().unwrap_or(0);
    if batch == 0 || samples.iter().any(|s| s.shape.first() != Some(&batch)) {
        return Err(bad("calibration arrays with the same non-zero leading (sample) axis".into(), format!("{batch}")));
    }
    for (i, s) in samples.iter().enumerate() {
        if let InputData::F32(d) = &s.data {
            if let Some((n, first)) = kestrel_rt::npy::non_finite(d) {
                return Err(bad(
                    format!("finite calibration data (input {i})"),
                    format!("{n} NaN or infinite value(s), the first at element {first}"),
                ));
            }
        }
    }
    let targets = targets(b);
    if targets.is_empty() {
        return Err(bad(
            "int8 or int4 weights to calibrate for (use --weights int8|int4)".into(),
            "no dense layer or mechanism with integer weights".into(),
        ));
    }
    b.clear_act_scales();
    let mut probe = b.clone();
    let first_extra = probe.outputs().len();
    for &(t, _) in &targets {
        probe.output(t);
    }
    let model = Model::from_bytes(&probe.build()?)?;
    let chunk = batch.min(64);
    let mut session = model.session(chunk)?;
    let per_sample: Vec<usize> = samples.iter().map(|s| s.shape[1..].iter().product()).collect();
    let mut abs_max = vec![0f32; targets.len()];
    for start in (0..batch).step_by(chunk) {
        let n = chunk.min(batch - start);
        let feeds: Vec<Input<'_>> = samples
            .iter()
            .zip(&per_sample)
            .map(|(s, &k)| match &s.data {
                InputData::F32(d) => Input::F32(&d[start * k..(start + n) * k]),
                InputData::I64(d) => Input::I64(&d[start * k..(start + n) * k]),
            })
            .collect();
        let outs = session.run_vec(&feeds)?;
        for (m, o) in abs_max.iter_mut().zip(&outs[first_extra..]) {
            *m = o.iter().fold(*m, |m, v| m.max(v.abs()));
        }
    }
    let mut report = CalibrationReport { samples: batch, tensors: Vec::new(), uncalibrated: Vec::new() };
    for ((t, consumers), m) in targets.into_iter().zip(abs_max) {
        let name = b.tensor_name(t).unwrap_or("?").to_string();
        if !m.is_finite() {
            return Err(bad(
                format!("finite activations on the calibration data (`{name}`)"),
                format!("max |x| = {m}: the model overflows or produces NaN on these samples"),
            ));
        }
        if m == 0.0 {
            // All zeros on every sample: no scale can be chosen; its consumers stay f32.
            report.uncalibrated.push(name);
            continue;
        }
        let scale = m / 127.0;
        b.set_act_scale(t, scale)?;
        report.tensors.push(CalibratedTensor { name, abs_max: m, scale, consumers });
    }
    if report.tensors.is_empty() {
        return Err(bad(
            "calibration data on which the integer layers see non-zero activations".into(),
            format!(
                "all {} calibrated activation(s) are zero on every sample ({})",
                report.uncalibrated.len(),
                report.uncalibrated.join(", ")
            ),
        ));
    }
    Ok(report)
}

/// Stores the scales of `report` (a calibration of the same graph at another size: bounded
/// dims) on `b`'s calibration targets, matched by name. Every scale must find its activation.
pub(crate) fn apply_scales(b: &mut ModelBuilder, report: &CalibrationReport) -> Result<(), ConvertError> {
    b.clear_act_scales();
    let targets = targets(b);
    for t in &report.tensors {
        let ids: Vec<TensorId> =
            targets.iter().map(|(id, _)| *id).filter(|&id| b.tensor_name(id) == Some(&t.name)).collect();
        if ids.is_empty() {
            return Err(ConvertError::Calibrate {
                expected: format!("activation `{}` (calibrated at the samples' size) at the bound", t.name),
                found: "no such calibration target".into(),
            });
        }
        for id in ids {
            b.set_act_scale(id, t.scale)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_rt::format::ops::{Activation, Dense, Op, Proj};

    /// x [2, 4] → Dense(int8 w [3, 4]) → y.
    fn model() -> ModelBuilder {
        let mut b = ModelBuilder::new("calib");
        let x = b.input("x", &[2, 4]).unwrap();
        let w = b.weight_as("w", &[3, 4], (0..12).map(|i| (i as f32 * 0.7).sin()).collect(), DType::I8).unwrap();
        let y =
            b.op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b: None }, act: Activation::None, y })).unwrap();
        b.output(y);
        b
    }

    fn samples(values: Vec<f32>) -> Vec<InputTensor> {
        vec![InputTensor { shape: vec![values.len() / 8, 2, 4], data: InputData::F32(values) }]
    }

    #[test]
    fn calibrates_the_integer_layer_input() {
        let mut b = model();
        let r = calibrate(&mut b, &samples((0..24).map(|i| i as f32 - 7.0).collect())).unwrap();
        assert_eq!(r.tensors.len(), 1);
        assert_eq!(r.tensors[0].abs_max, 16.0);
        assert!(r.uncalibrated.is_empty());
    }

    #[test]
    fn all_zero_activations_are_an_error_not_a_silent_no_op() {
        let e = calibrate(&mut model(), &samples(vec![0.0; 24])).unwrap_err().to_string();
        assert!(e.contains("zero on every sample") && e.contains('x'), "{e}");
    }

    #[test]
    fn non_finite_data_is_an_error() {
        let mut v = vec![1.0; 24];
        v[5] = f32::NAN;
        let e = calibrate(&mut model(), &samples(v)).unwrap_err().to_string();
        assert!(e.contains("finite calibration data") && e.contains("element 5"), "{e}");
    }
}
