//! Weight encodings: which dtype each weight gets, and the quantisation error it costs.

use kestrel_rt_format::weight::EncodedWeight;
use kestrel_rt_format::DType;
use serde::{Deserialize, Serialize};

/// How one weight was stored, and what it cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeightQuant {
    /// Weight name (the ONNX initializer or constant node it came from).
    pub name: String,
    /// Shape as stored.
    pub shape: Vec<usize>,
    /// Encoding (`f32`, `f16`, `int8`, `int4`).
    pub dtype: String,
    /// Bytes of data and scales.
    pub bytes: usize,
    /// Signal-to-quantisation-noise ratio in dB, 10·log10(Σw² / Σ(w−ŵ)²); `None` means exact
    /// (infinite; JSON has no infinity).
    pub sqnr_db: Option<f64>,
}

/// Picks the encoding of a weight: 1-D weights (biases, norm scales) and scalars always stay f32;
/// names matching `keep_f16` or flagged as first/last layer drop to at most f16 precision loss.
pub(crate) fn choose(base: DType, shape: &[usize], name: &str, keep_f16: &[String], first_or_last: bool) -> DType {
    if shape.iter().filter(|&&d| d > 1).count() <= 1 {
        return DType::F32;
    }
    let keep = first_or_last || keep_f16.iter().any(|k| !k.is_empty() && name.contains(k.as_str()));
    match base {
        DType::I8 | DType::I4 if keep => DType::F16,
        other => other,
    }
}

/// Encodes `values` as `dtype` in memory, decodes them back and measures the error.
/// The weight table of the model `b` writes: every weight an op reads, after fusion (split
/// projections, folded constants, weights viewed as convolutions or patches; selection matrices
/// the fusion replaced are gone) and in the encoding it is written in.
pub(crate) fn written(b: &kestrel_rt::ModelBuilder) -> Vec<WeightQuant> {
    let mut used = vec![false; b.tensor_count()];
    for op in b.ops() {
        op.for_each_input(|t| {
            if let Some(u) = used.get_mut(t as usize) {
                *u = true;
            }
        });
    }
    (0..b.tensor_count() as u32)
        .filter(|&id| used[id as usize] && b.is_weight(id))
        .filter_map(|id| {
            let shape: Vec<usize> = b.shape_of(id)?.dims().iter().map(|&d| d as usize).collect();
            Some(measure(b.tensor_name(id)?, &shape, b.weight_values(id)?, b.weight_dtype(id)?))
        })
        .collect()
}

pub(crate) fn measure(name: &str, shape: &[usize], values: &[f32], dtype: DType) -> WeightQuant {
    let rows = shape.first().copied().unwrap_or(1).max(1);
    let cols = (values.len() / rows).max(1);
    let (decoded, bytes) = match EncodedWeight::encode(dtype, rows, cols, values) {
        Ok(w) => {
            let bytes = kestrel_rt_format::weight::storage_bytes(dtype, rows, cols).map_or(0, |(d, s)| d + s);
            (w.decode(), bytes)
        }
        Err(_) => (values.to_vec(), values.len() * 4),
    };
    let (mut signal, mut noise) = (0f64, 0f64);
    for (&w, &q) in values.iter().zip(&decoded) {
        signal += f64::from(w) * f64::from(w);
        noise += (f64::from(w) - f64::from(q)).powi(2);
    }
    let sqnr_db = (noise > 0.0).then(|| 10.0 * (signal / noise).log10());
    WeightQuant { name: name.to_string(), shape: shape.to_vec(), dtype: dtype.name().to_string(), bytes, sqnr_db }
}

/// Parses `f32`, `f16`, `int8` or `int4` (case-insensitive).
pub fn parse_dtype(s: &str) -> Option<DType> {
    match s.to_ascii_lowercase().as_str() {
        "f32" => Some(DType::F32),
        "f16" => Some(DType::F16),
        "int8" | "i8" => Some(DType::I8),
        "int4" | "i4" => Some(DType::I4),
        _ => None,
    }
}
