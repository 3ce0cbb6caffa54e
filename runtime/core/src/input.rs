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
