//! The bounded file run at a probe's sizes against the probe's own conversion, on the same
//! seeded inputs: how a size where the converter's graph differs (an axis of size 1 that tract
//! simplifies away) is still served, and a check of the whole chain (bindings and the runtime's
//! per-run sizes) at the verification points.

use kestrel_rt::{demo::Rng, Input, Model};
use kestrel_rt_format::{aligned_copy, DType, KesFile};

/// Runs `probe` (a file at fixed sizes) and `bounded` at the probe's input shapes, batch 1, on
/// the same inputs (f32 in −1..1, token ids 1); the largest difference relative to the
/// reference's largest magnitude (at least 1), or why the two could not be compared.
pub(crate) fn compare_runs(bounded: &[u8], probe: &[u8]) -> Result<f64, String> {
    let buf = aligned_copy(probe);
    let f = KesFile::parse(&buf).map_err(|e| e.to_string())?;
    let mut rng = Rng::new(0xD135);
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    let mut data: Vec<Result<Vec<f32>, Vec<i64>>> = Vec::new();
    for m in f.meta().inputs() {
        let shape: Vec<usize> = m.shape.dims().iter().map(|&d| d as usize).collect();
        let n: usize = shape.iter().product();
        let ids = f.tensor(m.tensor).map_err(|e| e.to_string())?.dtype == DType::I32;
        data.push(if ids { Err(vec![1; n]) } else { Ok(rng.vec(n, 1.0)) });
        shapes.push(shape);
    }
    let feeds: Vec<Input<'_>> = data
        .iter()
        .map(|d| match d {
            Ok(x) => Input::F32(x),
            Err(ids) => Input::I64(ids),
        })
        .collect();
    let reference = {
        let m = Model::from_bytes(probe).map_err(|e| e.to_string())?;
        let mut s = m.session(1).map_err(|e| e.to_string())?;
        s.run_vec(&feeds).map_err(|e| format!("the conversion at this size does not run: {e}"))?
    };
    let got = {
        let m = Model::from_bytes(bounded).map_err(|e| e.to_string())?;
        let mut s = m.session(1).map_err(|e| e.to_string())?;
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        s.run_vec_shaped(&feeds, &refs).map_err(|e| format!("the bounded file does not run at this size: {e}"))?
    };
    if reference.len() != got.len() || reference.iter().zip(&got).any(|(a, b)| a.len() != b.len()) {
        let lens = |v: &[Vec<f32>]| v.iter().map(Vec::len).collect::<Vec<_>>();
        return Err(format!("output sizes {:?}, the conversion at this size {:?}", lens(&got), lens(&reference)));
    }
    let scale = reference.iter().flatten().fold(1f64, |m, &v| m.max(f64::from(v).abs()));
    let mut err = 0f64;
    for (a, b) in reference.iter().flatten().zip(got.iter().flatten()) {
        if a.is_nan() != b.is_nan() {
            return Err("a NaN where the other has a number".into());
        }
        if !a.is_nan() && a != b {
            err = err.max((f64::from(*a) - f64::from(*b)).abs());
        }
    }
    Ok(err / scale)
}
