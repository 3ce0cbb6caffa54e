//! `.npy` input and output files (f32 and i64) through npyz.

use crate::error::ConvertError;
use crate::verify::{InputData, InputTensor};
use npyz::WriterBuilder;
use std::path::Path;

/// Reads an f32 or i64 `.npy` array (i32 is widened to i64, f64 narrowed to f32).
pub fn read_npy(path: impl AsRef<Path>) -> Result<InputTensor, ConvertError> {
    let path = path.as_ref();
    let p = path.display().to_string();
    let err = |m: String| ConvertError::Npy { path: p.clone(), message: m };
    let bytes = std::fs::read(path).map_err(|source| ConvertError::Io { path: p.clone(), source })?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| err(format!("not a .npy file: {e}")))?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => return Err(err(format!("expected a plain f32 or i64 array, found {other:?}"))),
    };
    let data = match &descr[1..] {
        "f4" => InputData::F32(npy.into_vec::<f32>().map_err(|e| err(e.to_string()))?),
        "f8" => InputData::F32(
            npy.into_vec::<f64>().map_err(|e| err(e.to_string()))?.into_iter().map(|v| v as f32).collect(),
        ),
        "i8" => InputData::I64(npy.into_vec::<i64>().map_err(|e| err(e.to_string()))?),
        "i4" => {
            InputData::I64(npy.into_vec::<i32>().map_err(|e| err(e.to_string()))?.into_iter().map(i64::from).collect())
        }
        _ => return Err(err(format!("expected dtype <f4 or <i8, found {descr}"))),
    };
    Ok(InputTensor { shape, data })
}

/// Writes an f32 array as `.npy`.
pub fn write_npy_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), ConvertError> {
    let path = path.as_ref();
    let p = path.display().to_string();
    let io = |source| ConvertError::Io { path: p.clone(), source };
    let file = std::fs::File::create(path).map_err(io)?;
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut w = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(&shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .map_err(io)?;
    w.extend(data.iter().copied()).map_err(io)?;
    w.finish().map_err(io)
}
