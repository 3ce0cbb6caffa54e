//! `.npy` arrays in and out of sessions: the batch is the first axis.

use crate::Error;
use kestrel_rt_cpu::session::Input;
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
    // `fs::read` allocates fallibly (an error, not an abort, for a file larger than memory).
    let bytes = std::fs::read(path).map_err(|error| Error::Io { path: path.display().to_string(), error })?;
    parse(&bytes).map_err(|e| npy_err(path, e))
}

/// Parses the bytes of a `.npy` file ([`read`] without the file; the error names no path).
///
/// The header is parsed here, not by a general `.npy` library: its shape is untrusted input
/// (an element count that overflows, or far more elements than the file holds) and is checked
/// with checked arithmetic against the data bytes present before anything is allocated.
pub fn parse(bytes: &[u8]) -> Result<Array, String> {
    let (header, data) = split_header(bytes)?;
    let descr = dict_value(header, "descr")?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    match dict_value(header, "fortran_order")?.as_str() {
        "False" => {}
        "True" => return Err("Fortran-ordered arrays are not supported; save with C order".into()),
        other => return Err(format!("fortran_order {other:?} is not True or False")),
    }
    let shape_text = dict_value(header, "shape")?;
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("shape {shape_text} is not a tuple"))?;
    let mut shape = Vec::new();
    let mut numel: u64 = 1;
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let d: u64 =
            part.trim_end_matches('L').parse().map_err(|_| format!("shape {shape_text}: {part:?} is not a size"))?;
        numel = numel.checked_mul(d).ok_or_else(|| format!("shape {shape_text}: the element count overflows"))?;
        shape.push(usize::try_from(d).map_err(|_| format!("shape {shape_text}: dimension {d} is too large"))?);
    }
    let item: u64 = match descr {
        "<f4" | "<i4" => 4,
        "<f8" | "<i8" => 8,
        other => {
            return Err(format!("dtype {other} is not supported (float32, float64, int32 or int64, little-endian)"))
        }
    };
    let want = numel.checked_mul(item).ok_or_else(|| format!("shape {shape:?}: the byte count overflows"))?;
    if want != data.len() as u64 {
        return Err(format!(
            "shape {shape:?} of {descr} needs {want} data bytes, the file holds {} (truncated or corrupt)",
            data.len()
        ));
    }
    // The data is exactly `numel` items: the allocations below are bounded by the file.
    Ok(match descr {
        "<f4" => Array::F32 {
            shape,
            data: data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        },
        "<f8" => {
            let mut out = Vec::with_capacity(data.len() / 8);
            for (i, b) in data.chunks_exact(8).enumerate() {
                let v = f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                let n = v as f32;
                if v.is_finite() && !n.is_finite() {
                    return Err(format!("element {i} ({v}) does not fit in float32"));
                }
                out.push(n);
            }
            Array::F32 { shape, data: out }
        }
        "<i8" => Array::I64 {
            shape,
            data: data
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect(),
        },
        _ => Array::I64 {
            shape,
            data: data.chunks_exact(4).map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))).collect(),
        },
    })
}

/// The first bytes of every `.npy` file.
const MAGIC: &[u8] = b"\x93NUMPY";

/// The header text and the data bytes after it.
fn split_header(bytes: &[u8]) -> Result<(&str, &[u8]), String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (no \\x93NUMPY magic)".into());
    }
    let (field, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("not a .npy file this reader knows (format version {v})")),
    };
    let end = start.checked_add(field).filter(|&end| end <= bytes.len()).ok_or_else(|| {
        format!("truncated .npy header ({field} header bytes declared, {} in the file)", bytes.len() - start)
    })?;
    let header = std::str::from_utf8(&bytes[start..end]).map_err(|_| "the .npy header is not text".to_string())?;
    Ok((header, &bytes[end..]))
}

/// The value text of `key` in the header's Python dict literal (`{'descr': '<f4', ...}`):
/// a quoted string, `True`/`False`, or a parenthesised tuple.
fn dict_value(header: &str, key: &str) -> Result<String, String> {
    let at = [format!("'{key}'"), format!("\"{key}\"")]
        .iter()
        .find_map(|k| header.find(k.as_str()).map(|i| i + k.len()))
        .ok_or_else(|| format!("the .npy header has no {key:?}"))?;
    let rest = header[at..].trim_start();
    let rest = rest.strip_prefix(':').ok_or_else(|| format!("the .npy header's {key:?} has no value"))?.trim_start();
    let end = match rest.chars().next() {
        Some(q @ ('\'' | '"')) => rest[1..].find(q).map(|i| i + 2),
        Some('(') => rest.find(')').map(|i| i + 1),
        Some(_) => rest.find([',', '}']),
        None => None,
    }
    .ok_or_else(|| format!("the .npy header's {key:?} value is not terminated"))?;
    Ok(rest[..end].trim().to_string())
}

/// Non-finite values in a float array: `(count, index of the first)`.
pub fn non_finite(data: &[f32]) -> Option<(usize, usize)> {
    let first = data.iter().position(|v| !v.is_finite())?;
    Some((data[first..].iter().filter(|v| !v.is_finite()).count(), first))
}

/// Writes a float32 array (format 1.0, little-endian, C order; [`encode_f32`] in memory).
///
/// The element count of `shape` must equal `data.len()` (an error, before the file is created).
pub fn write_f32(path: impl AsRef<Path>, shape: &[usize], data: &[f32]) -> Result<(), Error> {
    write_le(path.as_ref(), "<f4", shape, data.len(), data.iter().map(|v| v.to_le_bytes()))
}

/// Writes an int64 array (as [`write_f32`] writes float32: the element count of `shape` must
/// equal `data.len()`).
pub fn write_i64(path: impl AsRef<Path>, shape: &[usize], data: &[i64]) -> Result<(), Error> {
    write_le(path.as_ref(), "<i8", shape, data.len(), data.iter().map(|v| v.to_le_bytes()))
}

/// Writes `count` little-endian items of `descr` in `shape`.
fn write_le<const N: usize>(
    path: &Path,
    descr: &str,
    shape: &[usize],
    count: usize,
    items: impl Iterator<Item = [u8; N]>,
) -> Result<(), Error> {
    use std::io::Write as _;
    let header = header(descr, shape, count).map_err(|e| npy_err(path, e))?;
    let io = |error| Error::Io { path: path.display().to_string(), error };
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    file.write_all(&header).map_err(io)?;
    for v in items {
        file.write_all(&v).map_err(io)?;
    }
    file.into_inner().map_err(|e| io(e.into_error()))?;
    Ok(())
}

impl Array {
    /// An integer array as the byte limbs an input fed as limbs takes
    /// ([`FeedDType::I64Limbs`](kestrel_rt_format::FeedDType::I64Limbs)): f32, one more axis of
    /// [`LIMBS`](kestrel_rt_format::limbs::LIMBS). A float array is refused (integers expected).
    pub fn into_limbs(self) -> Result<Array, Error> {
        use kestrel_rt_format::limbs::{encode, LIMBS};
        match self {
            Array::I64 { mut shape, data } => {
                shape.push(LIMBS);
                Ok(Array::F32 { shape, data: data.iter().flat_map(|&v| encode(v)).collect() })
            }
            Array::F32 { .. } => Err(Error::Npy(
                "an integer input held exactly as byte limbs takes an int64 or int32 array, not float32".into(),
            )),
        }
    }
}

/// The bytes of the `.npy` file [`write_f32`] writes.
pub fn encode_f32(shape: &[usize], data: &[f32]) -> Result<Vec<u8>, Error> {
    let mut out = header("<f4", shape, data.len()).map_err(Error::Npy)?;
    out.reserve(data.len() * 4);
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

/// A `.npy` preamble and header for `count` items of `descr` in `shape` (C order): the magic,
/// the version, the header length, then the header dict padded with spaces and a newline so the
/// data starts at a multiple of 64 bytes, as NumPy writes it. Version 1.0 (a 16-bit header
/// length) unless the header needs more, then 2.0 (32-bit).
fn header(descr: &str, shape: &[usize], count: usize) -> Result<Vec<u8>, String> {
    let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if numel != Some(count) {
        return Err(format!("shape {shape:?} does not hold the {count} values given"));
    }
    let dims = match shape {
        [d] => format!("({d},)"),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // The header length after a preamble of `preamble` bytes: dict, spaces, newline, so the
    // data starts at a multiple of 64.
    let padded = |preamble: usize| (preamble + dict.len() + 1).div_ceil(64) * 64 - preamble;
    let mut out = Vec::with_capacity(padded(12) + 12);
    out.extend_from_slice(MAGIC);
    let len = match u16::try_from(padded(10)) {
        Ok(len) => {
            out.extend_from_slice(&[1, 0]);
            out.extend_from_slice(&len.to_le_bytes());
            usize::from(len)
        }
        Err(_) => {
            let len =
                u32::try_from(padded(12)).map_err(|_| format!("the .npy header for shape {shape:?} is too long"))?;
            out.extend_from_slice(&[2, 0]);
            out.extend_from_slice(&len.to_le_bytes());
            len as usize
        }
    };
    let data_start = out.len() + len;
    out.extend_from_slice(dict.as_bytes());
    out.resize(data_start - 1, b' ');
    out.push(b'\n');
    Ok(out)
}

/// Checks `array` is a batch of samples of `per_sample` shape (a leading batch axis, then the
/// per-sample dims) or one sample of exactly that shape (no batch axis: what a model whose
/// inputs have none, such as a fixed first axis N > 1, takes as declared), and returns the batch
/// size (1 for a single sample; see [`is_single_sample`]).
pub fn batch_of(array: &Array, per_sample: &[u32], what: &str) -> Result<usize, Error> {
    let s = array.shape();
    if is_single_sample(array, per_sample) {
        return Ok(1);
    }
    let want: Vec<usize> = per_sample.iter().map(|&d| d as usize).collect();
    if s.len() != want.len() + 1 || s[1..] != want[..] || s[0] == 0 {
        let want_s = want.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        let one = want.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        return Err(Error::Npy(format!(
            "{what}: expected shape [batch ≥ 1, {want_s}] or [{one}] (one sample), found {s:?}"
        )));
    }
    Ok(s[0])
}

/// Whether `array` is one sample given without a batch axis: its shape is exactly `per_sample`
/// (outputs are then written without a batch axis too).
pub fn is_single_sample(array: &Array, per_sample: &[u32]) -> bool {
    let s = array.shape();
    s.len() == per_sample.len() && s.iter().zip(per_sample).all(|(&a, &b)| a == b as usize)
}
