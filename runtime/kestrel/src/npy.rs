//! `.npy` arrays in and out of sessions: the batch is the first axis.

use crate::Error;
use kestrel_cpu::session::Input;
use std::path::Path;

/// An array read from a `.npy` file: f32 data or integer token ids.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// float32 (float64 files are narrowed, each value checked to be representable).
    F32 {
        /// Shape, batch first.
        shape: Vec<usize>,
        /// Row-major data.
        data: Vec<f32>,
    },
    /// int64 (int32 files are widened).
    I64 {
        /// Shape, batch first.
        shape: Vec<usize>,
        /// Row-major data.
        data: Vec<i64>,
    },
}

impl Array {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Array::F32 { shape, .. } | Array::I64 { shape, .. } => shape,
        }
    }

    /// A session input over this array's data.
    pub fn input(&self) -> Input<'_> {
        match self {
            Array::F32 { data, .. } => Input::F32(data),
            Array::I64 { data, .. } => Input::I64(data),
        }
    }

    /// Element type name as numpy spells it.
    pub fn dtype_name(&self) -> &'static str {
        match self {
            Array::F32 { .. } => "float32",
            Array::I64 { .. } => "int64",
        }
    }
}

fn npy_err(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Npy(format!("{}: {what}", path.display()))
}

/// Reads a `.npy` file of float32/float64/int32/int64 (little-endian, C order).
pub fn read(path: impl AsRef<Path>) -> Result<Array, Error> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| npy_err(path, format!("not a .npy file: {e}")))?;
    if npy.order() != npyz::Order::C {
        return Err(npy_err(path, "Fortran-ordered arrays are not supported; save with C order"));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = npy.dtype().descr().trim_matches('\'').to_string();
    let bad = |e: std::io::Error| npy_err(path, format!("reading {descr} data: {e}"));
    Ok(match descr.as_str() {
        "<f4" => Array::F32 { shape, data: npy.into_vec::<f32>().map_err(bad)? },
        "<f8" => {
            let wide = npy.into_vec::<f64>().map_err(bad)?;
            let mut data = Vec::with_capacity(wide.len());
            for (i, v) in wide.into_iter().enumerate() {
                let n = v as f32;
                if v.is_finite() && !n.is_finite() {
                    return Err(npy_err(path, format!("element {i} ({v}) does not fit in float32")));
                }
                data.push(n);
            }
            Array::F32 { shape, data }
        }
        "<i8" => Array::I64 { shape, data: npy.into_vec::<i64>().map_err(bad)? },
        "<i4" => Array::I64 { shape, data: npy.into_vec::<i32>().map_err(bad)?.into_iter().map(i64::from).collect() },
        other => {
            return Err(npy_err(path, format!("dtype {other} is not supported (float32, float64, int32 or int64)")))
        }
    })
}

/// Writes a float32 array.
pub fn write_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), Error> {
    use npyz::WriterBuilder;
    let path = path.as_ref();
    let io = |source| Error::Io { path: path.display().to_string(), source };
    let file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut w = npyz::WriteOptions::new().default_dtype().shape(&shape).writer(file).begin_nd().map_err(io)?;
    w.extend(data.iter().copied()).map_err(io)?;
    w.finish().map_err(io)
}

/// Checks `array` is a batch of samples of `per_sample` shape (a leading batch axis, then the
/// per-sample dims) and returns the batch size.
pub fn batch_of(array: &Array, per_sample: &[u32], what: &str) -> Result<usize, Error> {
    let s = array.shape();
    let want: Vec<usize> = per_sample.iter().map(|&d| d as usize).collect();
    if s.len() != want.len() + 1 || s[1..] != want[..] || s[0] == 0 {
        let want_s = want.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        return Err(Error::Npy(format!("{what}: expected shape [batch ≥ 1, {want_s}], found {s:?}")));
    }
    Ok(s[0])
}
