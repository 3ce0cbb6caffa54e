//! Opt-in int8 attention internals (`kestrel convert --calibrate DATA.npy --int8-attention`) and
//! their measured accuracy cost.
//!
//! Every fused attention op (Standard, Optimised, Efficient, Super) gets `Internals::Int8`: its
//! scores and weighted values (where the heads are wide and long enough) and its output
//! projection (where its weights are integer) multiply in int8 on the CPU, with scales taken at
//! run time (see `kestrel_rt_cpu`'s `attention_q8`). AFT and Fastformer keep f32 internals.
//!
//! The cost is measured, not assumed: the last fifth of the calibration samples (at least one,
//! when there are two or more) is held out of calibration, and the converted model is compared
//! on both slices with the f32 model (f32 weights, activations and internals: the whole
//! quantisation's cost) and with the same file with f32 internals (this option's own cost):
//! top-1 agreement per output row and the largest error.

use crate::error::ConvertError;
use crate::verify::{compare, run_kestrel, InputData, InputTensor};
use kestrel_rt::format::ops::{Internals, MechanismOp as M, Op};
use kestrel_rt::format::DType;
use kestrel_rt::ModelBuilder;
use serde::{Deserialize, Serialize};

/// One comparison of two models' outputs on the same samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// Samples run.
    pub samples: usize,
    /// Output rows (last-axis vectors) compared for top-1.
    pub rows: usize,
    /// Fraction of rows whose argmax agrees.
    pub top1_agreement: f64,
    /// Largest absolute difference over every output element.
    pub max_abs_err: f64,
    /// `max_abs_err` over the reference's largest |output|.
    pub max_rel_err: f64,
}

/// What `--int8-attention` did and what it costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InternalsReport {
    /// Attention ops given int8 internals.
    pub attention_ops: usize,
    /// Of those, the ops whose heads are wide and long enough for the CPU to multiply in int8
    /// (`kestrel_rt_cpu::kernels::attention_q8::pays`: at least 48 columns per head over at least
    /// 48 tokens); the others keep f32 products at run time.
    #[serde(default)]
    pub int8_ops: usize,
    /// On the calibration samples, against the f32 model.
    pub calibration_vs_f32: Agreement,
    /// On the held-out samples, against the f32 model (none with a single sample).
    pub held_out_vs_f32: Option<Agreement>,
    /// On the calibration samples, against the same file with f32 internals.
    pub calibration_vs_f32_internals: Agreement,
    /// On the held-out samples, against the same file with f32 internals.
    pub held_out_vs_f32_internals: Option<Agreement>,
}

/// Samples `start..start + n` of every input.
fn slice(samples: &[InputTensor], start: usize, n: usize) -> Vec<InputTensor> {
    samples
        .iter()
        .map(|s| {
            let k: usize = s.shape[1..].iter().product();
            let mut shape = s.shape.clone();
            shape[0] = n;
            let data = match &s.data {
                InputData::F32(d) => InputData::F32(d[start * k..(start + n) * k].to_vec()),
                InputData::I64(d) => InputData::I64(d[start * k..(start + n) * k].to_vec()),
            };
            InputTensor { shape, data }
        })
        .collect()
}

/// The calibration samples and the held-out slice: the last fifth (at least one sample) when
/// there are two or more, else everything calibrates and nothing is held out.
pub fn split(samples: &[InputTensor]) -> (Vec<InputTensor>, Option<Vec<InputTensor>>) {
    let batch = samples.first().and_then(|s| s.shape.first().copied()).unwrap_or(0);
    if batch < 2 {
        return (samples.to_vec(), None);
    }
    let held = (batch / 5).max(1);
    (slice(samples, 0, batch - held), Some(slice(samples, batch - held, held)))
}

/// `b` with every weight stored f32 and no activation scales: the f32 model.
pub fn f32_model(b: &ModelBuilder) -> ModelBuilder {
    let mut r = b.clone();
    r.set_weight_dtype(DType::F32);
    for id in 0..r.tensor_count() as u32 {
        if r.is_weight(id) {
            r.set_weight_dtype_of(id, DType::F32);
        }
    }
    r.clear_act_scales();
    r
}

/// Runs `a` and `want` on `samples` (64 at a time) and compares.
fn agreement(a: &[u8], want: &[u8], last: &[usize], samples: &[InputTensor]) -> Result<Agreement, ConvertError> {
    let batch = samples.first().and_then(|s| s.shape.first().copied()).unwrap_or(0);
    let (mut out_a, mut out_w): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (Vec::new(), Vec::new());
    for start in (0..batch).step_by(64) {
        let part = slice(samples, start, 64.min(batch - start));
        for (all, got) in [(&mut out_a, run_kestrel(a, &part)?), (&mut out_w, run_kestrel(want, &part)?)] {
            all.resize(got.len(), Vec::new());
            for (o, g) in all.iter_mut().zip(got) {
                o.extend(g);
            }
        }
    }
    let (max_abs_err, max_rel_err, top1_agreement, rows) = compare(&out_w, &out_a, last)?;
    Ok(Agreement { samples: batch, rows, top1_agreement, max_abs_err, max_rel_err })
}

/// Gives every attention op of `b` (already calibrated) int8 internals and measures the cost
/// against `f32` ([`f32_model`] of `b` before calibration) and against `b` as it was, on the
/// calibration samples and the held-out ones.
pub fn apply(
    b: &mut ModelBuilder,
    f32: &ModelBuilder,
    calibration: &[InputTensor],
    held_out: Option<&[InputTensor]>,
) -> Result<InternalsReport, ConvertError> {
    let f32_internals = b.build()?;
    let attention_ops = b.set_attention_internals(Internals::Int8);
    if attention_ops == 0 {
        let ops: Vec<&str> = b.ops().iter().map(Op::name).collect();
        return Err(ConvertError::Calibrate {
            expected: "a fused attention op (Standard, Optimised, Efficient or Super) for --int8-attention".into(),
            found: format!("none among {} ops (AFT and Fastformer keep f32 internals)", ops.len()),
        });
    }
    let int8_ops = b
        .ops()
        .iter()
        .filter(|op| match op.mechanism() {
            Some(M::Attention(a)) => b.shape_of(a.x).is_some_and(|s| {
                // [T, d], or [G, T, d] for G sequences.
                let dims = s.dims();
                let t = if dims.len() >= 2 { dims[dims.len() - 2] as usize } else { 1 };
                let d = s.last();
                kestrel_rt_cpu::kernels::attention_q8::pays(t, d / (a.heads as usize).max(1))
            }),
            // Only attention has int8 internals; the layer ops have no internals at all.
            Some(M::AftFull(_) | M::AftLocal(_) | M::AftSimple(_) | M::AftConv(_) | M::Fastformer(_)) | None => false,
        })
        .count();
    let int8 = b.build()?;
    let reference = f32.build()?;
    let last: Vec<usize> = b.outputs().iter().map(|&o| b.shape_of(o).map_or(1, |s| s.last().max(1))).collect();
    let both = |samples: &[InputTensor]| -> Result<(Agreement, Agreement), ConvertError> {
        Ok((agreement(&int8, &reference, &last, samples)?, agreement(&int8, &f32_internals, &last, samples)?))
    };
    let (calibration_vs_f32, calibration_vs_f32_internals) = both(calibration)?;
    let (held_out_vs_f32, held_out_vs_f32_internals) = match held_out {
        Some(h) => {
            let (a, b) = both(h)?;
            (Some(a), Some(b))
        }
        None => (None, None),
    };
    Ok(InternalsReport {
        attention_ops,
        int8_ops,
        calibration_vs_f32,
        held_out_vs_f32,
        calibration_vs_f32_internals,
        held_out_vs_f32_internals,
    })
}
