//! `.npy` input and output files, through the facade's [`kestrel_rt::npy`] (one reader for the CLI,
//! the converter and the tests).

use crate::error::ConvertError;
use crate::verify::{InputData, InputTensor};
use kestrel_rt::npy::Array;
use std::path::Path;

/// Reads a float32/float64/int32/int64 `.npy` array as a verification input (int32 is widened
/// to i64, float64 narrowed to f32 with a range check).
pub fn read_npy(path: impl AsRef<Path>) -> Result<InputTensor, ConvertError> {
    Ok(match kestrel_rt::npy::read(path)? {
        Array::F32 { shape, data } => InputTensor { shape, data: InputData::F32(data) },
        Array::I64 { shape, data } => InputTensor { shape, data: InputData::I64(data) },
    })
}

/// Writes a float32 `.npy` array.
pub fn write_npy_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), ConvertError> {
    Ok(kestrel_rt::npy::write_f32(path, shape, data)?)
}
