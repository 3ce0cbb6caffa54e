//! A graph input's data, as every backend takes it.

/// One input's data. The batch is the leading axis: `len = batch × per-sample elements`.
#[derive(Clone, Copy, Debug)]
pub enum Input<'x> {
    /// f32 data.
    F32(&'x [f32]),
    /// i32 token ids.
    I32(&'x [i32]),
    /// i64 token ids (as ONNX exports them); each must fit in i32.
    I64(&'x [i64]),
}

/// The batch a run's inputs give: each input of `per_sample` elements (by index, from `sizes`)
/// holds `batch × per_sample` elements with one `batch` in `1..=capacity` for all of them. An
/// input with no elements per sample (a graph input read only for its type, as ONNX's `CastLike`
/// does) must be empty and says nothing about the batch; when every input is such, the batch is 1.
pub fn batch_of(
    inputs: &[Input<'_>],
    mut per_sample: impl FnMut(usize) -> Result<usize, crate::RunError>,
    capacity: usize,
) -> Result<usize, crate::RunError> {
    use crate::RunError;
    let mut batch = None;
    for (i, input) in inputs.iter().enumerate() {
        let (n, len) = (per_sample(i)?, input.len());
        let err = RunError::Length { what: "input", index: i, per_sample: n, found: len, capacity };
        if n == 0 {
            if len != 0 {
                return Err(err);
            }
            continue;
        }
        if len == 0 || !len.is_multiple_of(n) || len / n > capacity {
            return Err(err);
        }
        match batch {
            None => batch = Some(len / n),
            Some(b) if b != len / n => return Err(RunError::BatchMismatch { index: i, expected: b, found: len / n }),
            Some(_) => {}
        }
    }
    Ok(batch.unwrap_or(1))
}

/// An integer as the f32 that holds it exactly (|v| ≤ 2²⁴), or `None`.
pub fn exact_f32(v: i64) -> Option<f32> {
    const EXACT: i64 = 1 << 24;
    (-EXACT..=EXACT).contains(&v).then_some(v as f32)
}

impl Input<'_> {
    /// Elements (batch × per-sample).
    pub fn len(&self) -> usize {
        match self {
            Input::F32(d) => d.len(),
            Input::I32(d) => d.len(),
            Input::I64(d) => d.len(),
        }
    }
    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `f32`, `i32` or `i64`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Input::F32(_) => "f32",
            Input::I32(_) => "i32",
            Input::I64(_) => "i64",
        }
    }
}
