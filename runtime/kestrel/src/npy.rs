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
///
/// The header is checked against the file before any data is read: the element count must
/// not overflow and must match the data bytes the file holds, so a header claiming more
/// elements than the file has is an error, not an allocation of that size.
pub fn read(path: impl AsRef<Path>) -> Result<Array, Error> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| Error::Io { path: path.display().to_string(), error })?;
    parse(&bytes).map_err(|e| npy_err(path, e))
}

/// Parses the bytes of a `.npy` file ([`read`] without the file; the error names no path).
pub fn parse(bytes: &[u8]) -> Result<Array, String> {
    let header_len = header_len(bytes)?;
    let npy = npyz::NpyFile::new(bytes).map_err(|e| format!("not a .npy file: {e}"))?;
    if npy.order() != npyz::Order::C {
        return Err("Fortran-ordered arrays are not supported; save with C order".into());
    }
    let descr = npy.dtype().descr().trim_matches('\'').to_string();
    let item: u64 = match descr.as_str() {
        "<f4" | "<i4" => 4,
        "<f8" | "<i8" => 8,
        other => return Err(format!("dtype {other} is not supported (float32, float64, int32 or int64)")),
    };
    let mut shape = Vec::with_capacity(npy.shape().len());
    let mut numel: u64 = 1;
    for &d in npy.shape() {
        let dim = usize::try_from(d).map_err(|_| format!("shape {:?}: dimension {d} is too large", npy.shape()))?;
        numel = numel.checked_mul(d).ok_or_else(|| format!("shape {:?}: the element count overflows", npy.shape()))?;
        shape.push(dim);
    }
    let data_bytes = (bytes.len() - header_len) as u64;
    let want = numel.checked_mul(item).ok_or_else(|| format!("shape {shape:?}: the byte count overflows"))?;
    if want != data_bytes {
        return Err(format!(
            "shape {shape:?} of {descr} needs {want} data bytes, the file holds {data_bytes} (truncated or corrupt)"
        ));
    }
    let bad = |e: std::io::Error| format!("reading {descr} data: {e}");
    Ok(match descr.as_str() {
        "<f4" => Array::F32 { shape, data: npy.into_vec::<f32>().map_err(bad)? },
        "<f8" => {
            let wide = npy.into_vec::<f64>().map_err(bad)?;
            let mut data = Vec::with_capacity(wide.len());
            for (i, v) in wide.into_iter().enumerate() {
                let n = v as f32;
                if v.is_finite() && !n.is_finite() {
                    return Err(format!("element {i} ({v}) does not fit in float32"));
                }
                data.push(n);
            }
            Array::F32 { shape, data }
        }
        "<i8" => Array::I64 { shape, data: npy.into_vec::<i64>().map_err(bad)? },
        _ => Array::I64 { shape, data: npy.into_vec::<i32>().map_err(bad)?.into_iter().map(i64::from).collect() },
    })
}

/// Bytes before the data: magic, version, header length field and the header itself.
fn header_len(bytes: &[u8]) -> Result<usize, String> {
    const MAGIC: &[u8] = b"\x93NUMPY";
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (field, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("not a .npy file this reader knows (format version {v})")),
    };
    start
        .checked_add(field)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| format!("truncated .npy header ({field} header bytes declared, {} in the file)", bytes.len() - start))
}

/// Non-finite values in a float array: `(count, index of the first)`.
pub fn non_finite(data: &[f32]) -> Option<(usize, usize)> {
    let first = data.iter().position(|v| !v.is_finite())?;
    Some((data[first..].iter().filter(|v| !v.is_finite()).count(), first))
}

/// Writes a float32 array.
pub fn write_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), Error> {
    use npyz::WriterBuilder;
    let path = path.as_ref();
    let io = |error| Error::Io { path: path.display().to_string(), error };
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
