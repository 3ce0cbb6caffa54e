//! Weight encodings: zero-copy views that decode rows to f32, and (with `alloc`) the encoders.
//!
//! Every weight is seen as a matrix `[rows, cols]` ([`Shape::as_matrix`](crate::Shape::as_matrix)):
//! the first axis is the output channel (a dense weight is stored `[out, in]`), the rest is the row.
//!
//! | dtype | data | scales |
//! |---|---|---|
//! | f32 | `rows*cols` f32 | none |
//! | f16 | `rows*cols` f16 | none |
//! | int8 | `rows*cols` i8, symmetric, `x = q * scale[row]` | `rows` f32 |
//! | int4 | per row `ceil(cols/32)*16` bytes; element `j` is the low nibble of byte `j/2` when `j` is even, the high nibble otherwise, two's complement in `-8..=7`; `x = q * scale[row][j/32]` | `rows*ceil(cols/32)` f16 |

use crate::dtype::{DType, INT4_GROUP};
use half::f16;

/// Why a weight view or encoding could not be made.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum WeightError {
    /// The data slice has the wrong number of elements/bytes.
    #[error("{dtype:?} weight [{rows}, {cols}]: expected {expected} data elements, found {found}")]
    DataLength {
        /// Storage dtype.
        dtype: DType,
        /// Rows of the matrix view.
        rows: usize,
        /// Columns of the matrix view.
        cols: usize,
        /// Expected element count.
        expected: usize,
        /// Actual element count.
        found: usize,
    },
    /// The scale slice has the wrong length.
    #[error("{dtype:?} weight [{rows}, {cols}]: expected {expected} scales, found {found}")]
    ScaleLength {
        /// Storage dtype.
        dtype: DType,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Expected scale count.
        expected: usize,
        /// Actual scale count.
        found: usize,
    },
    /// A value to encode in a quantised encoding is NaN or infinite (f32 and f16 weights hold
    /// both exactly).
    #[error("cannot encode a non-finite weight value at index {index}")]
    NonFinite {
        /// Flat index of the bad value.
        index: usize,
    },
    /// A quantisation scale does not fit in f16.
    #[error("int4 group scale {scale} at row {row} overflows f16")]
    ScaleOverflow {
        /// The scale in f32.
        scale: f32,
        /// Row of the group.
        row: usize,
    },
    /// `I32` is not a weight encoding.
    #[error("dtype {0:?} is not a weight encoding")]
    NotAWeightDType(DType),
}

/// The stored elements of a weight, borrowed from the file (or an owned encoding).
#[derive(Clone, Copy, Debug)]
pub enum WeightData<'a> {
    /// Plain f32.
    F32(&'a [f32]),
    /// Half precision.
    F16(&'a [f16]),
    /// Int8 with one f32 scale per row.
    I8 {
        /// Quantised values, row-major.
        q: &'a [i8],
        /// One scale per row.
        scales: &'a [f32],
    },
    /// Packed int4 with one f16 scale per group of 32 along the row.
    I4 {
        /// Packed nibbles, `int4_row_bytes(cols)` per row.
        q: &'a [u8],
        /// `rows * int4_groups(cols)` scales.
        scales: &'a [f16],
    },
}

/// Number of int4 groups in a row of `cols` elements.
pub const fn int4_groups(cols: usize) -> usize {
    cols.div_ceil(INT4_GROUP)
}

/// Bytes of one packed int4 row of `cols` elements (padded to whole groups).
pub const fn int4_row_bytes(cols: usize) -> usize {
    int4_groups(cols) * INT4_GROUP / 2
}

/// Expected `(data elements, scale elements)` of a `[rows, cols]` weight stored as `dtype`,
/// counted in the dtype's own storage unit (bytes for int4 data), `None` on overflow.
pub fn storage_counts(dtype: DType, rows: usize, cols: usize) -> Option<(usize, usize)> {
    let n = rows.checked_mul(cols)?;
    Some(match dtype {
        DType::F32 | DType::F16 | DType::I32 => (n, 0),
        DType::I8 => (n, rows),
        DType::I4 => (rows.checked_mul(int4_row_bytes(cols))?, rows.checked_mul(int4_groups(cols))?),
    })
}

/// Expected `(data bytes, scale bytes)` of a `[rows, cols]` weight stored as `dtype`.
pub fn storage_bytes(dtype: DType, rows: usize, cols: usize) -> Option<(usize, usize)> {
    let (d, s) = storage_counts(dtype, rows, cols)?;
    Some(match dtype {
        DType::F32 | DType::I32 => (d.checked_mul(4)?, 0),
        DType::F16 => (d.checked_mul(2)?, 0),
        DType::I8 => (d, s.checked_mul(4)?),
        DType::I4 => (d, s.checked_mul(2)?),
    })
}

/// A weight matrix `[rows, cols]` in any encoding; kernels read it row by row in f32.
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    rows: usize,
    cols: usize,
    data: WeightData<'a>,
}

impl<'a> WeightView<'a> {
    /// Checks lengths and builds a view.
    pub fn new(rows: usize, cols: usize, data: WeightData<'a>) -> Result<Self, WeightError> {
        let dtype = match data {
            WeightData::F32(_) => DType::F32,
            WeightData::F16(_) => DType::F16,
            WeightData::I8 { .. } => DType::I8,
            WeightData::I4 { .. } => DType::I4,
        };
        let (nd, ns) = storage_counts(dtype, rows, cols).ok_or(WeightError::DataLength {
            dtype,
            rows,
            cols,
            expected: usize::MAX,
            found: 0,
        })?;
        let (found_d, found_s) = match data {
            WeightData::F32(d) => (d.len(), 0),
            WeightData::F16(d) => (d.len(), 0),
            WeightData::I8 { q, scales } => (q.len(), scales.len()),
            WeightData::I4 { q, scales } => (q.len(), scales.len()),
        };
        if found_d != nd {
            return Err(WeightError::DataLength { dtype, rows, cols, expected: nd, found: found_d });
        }
        if found_s != ns {
            return Err(WeightError::ScaleLength { dtype, rows, cols, expected: ns, found: found_s });
        }
        Ok(Self { rows, cols, data })
    }

    /// A plain f32 view of `data` as `[rows, cols]`.
    pub fn f32(rows: usize, cols: usize, data: &'a [f32]) -> Result<Self, WeightError> {
        Self::new(rows, cols, WeightData::F32(data))
    }

    /// Rows of the matrix view.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the matrix view.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Total element count.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// True for a weight with no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage encoding.
    pub fn dtype(&self) -> DType {
        match self.data {
            WeightData::F32(_) => DType::F32,
            WeightData::F16(_) => DType::F16,
            WeightData::I8 { .. } => DType::I8,
            WeightData::I4 { .. } => DType::I4,
        }
    }

    /// Rows `r0..r1` as a view of their own (no copy; scales follow their rows). `None` when
    /// the range is empty, reversed or past the last row.
    pub fn row_range(&self, r0: usize, r1: usize) -> Option<WeightView<'a>> {
        if r0 >= r1 || r1 > self.rows {
            return None;
        }
        let c = self.cols;
        let data = match self.data {
            WeightData::F32(d) => WeightData::F32(d.get(r0 * c..r1 * c)?),
            WeightData::F16(d) => WeightData::F16(d.get(r0 * c..r1 * c)?),
            WeightData::I8 { q, scales } => WeightData::I8 { q: q.get(r0 * c..r1 * c)?, scales: scales.get(r0..r1)? },
            WeightData::I4 { q, scales } => {
                let (rb, g) = (int4_row_bytes(c), int4_groups(c));
                WeightData::I4 { q: q.get(r0 * rb..r1 * rb)?, scales: scales.get(r0 * g..r1 * g)? }
            }
        };
        Some(WeightView { rows: r1 - r0, cols: c, data })
    }

    /// The first `n` rows (`n` ≤ [`rows`](Self::rows)), `n` = 0 included: an empty view of the
    /// same encoding (a bounded weight read to no row, a run-time dim at 0).
    pub fn leading_rows(&self, n: usize) -> Option<WeightView<'a>> {
        if n > self.rows {
            return None;
        }
        if n > 0 {
            return self.row_range(0, n);
        }
        let data = match self.data {
            WeightData::F32(d) => WeightData::F32(&d[..0]),
            WeightData::F16(d) => WeightData::F16(&d[..0]),
            WeightData::I8 { q, scales } => WeightData::I8 { q: &q[..0], scales: &scales[..0] },
            WeightData::I4 { q, scales } => WeightData::I4 { q: &q[..0], scales: &scales[..0] },
        };
        Some(WeightView { rows: 0, cols: self.cols, data })
    }

    /// The stored data.
    pub fn data(&self) -> WeightData<'a> {
        self.data
    }

    /// The whole tensor as f32 if it is stored as f32 (no copy).
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self.data {
            WeightData::F32(d) => Some(d),
            _ => None,
        }
    }

    /// Row `r` in f32: borrowed when stored as f32, otherwise decoded into `buf[..cols]`.
    ///
    /// Panics if `r >= rows` or `buf` is shorter than `cols` for a non-f32 weight; kernels size
    /// their scratch from validated shapes.
    #[inline]
    pub fn row<'b>(&'b self, r: usize, buf: &'b mut [f32]) -> &'b [f32] {
        let c = self.cols;
        match self.data {
            WeightData::F32(d) => &d[r * c..(r + 1) * c],
            _ => {
                let out = &mut buf[..c];
                self.decode_row(r, out);
                out
            }
        }
    }

    /// Decodes row `r` into `out` (`out.len() == cols`).
    #[inline]
    pub fn decode_row(&self, r: usize, out: &mut [f32]) {
        let c = self.cols;
        match self.data {
            WeightData::F32(d) => out.copy_from_slice(&d[r * c..(r + 1) * c]),
            WeightData::F16(d) => {
                for (o, v) in out.iter_mut().zip(&d[r * c..(r + 1) * c]) {
                    *o = v.to_f32();
                }
            }
            WeightData::I8 { q, scales } => {
                let s = scales[r];
                for (o, &v) in out.iter_mut().zip(&q[r * c..(r + 1) * c]) {
                    *o = f32::from(v) * s;
                }
            }
            WeightData::I4 { q, scales } => {
                let rb = int4_row_bytes(c);
                let g = int4_groups(c);
                let qrow = &q[r * rb..(r + 1) * rb];
                let srow = &scales[r * g..(r + 1) * g];
                for (gi, (chunk, s)) in out.chunks_mut(INT4_GROUP).zip(srow).enumerate() {
                    let s = s.to_f32();
                    let bytes = &qrow[gi * INT4_GROUP / 2..];
                    for (j, o) in chunk.iter_mut().enumerate() {
                        *o = f32::from(int4_nibble(bytes[j / 2], j % 2 == 1)) * s;
                    }
                }
            }
        }
    }

    /// Decodes the whole matrix into `out` (`out.len() == rows * cols`).
    pub fn decode_into(&self, out: &mut [f32]) {
        for (r, row) in out.chunks_mut(self.cols.max(1)).take(self.rows).enumerate() {
            self.decode_row(r, row);
        }
    }

    /// Element `(r, c)` decoded (slow; for references and tests).
    pub fn get(&self, r: usize, c: usize) -> f32 {
        let i = r * self.cols + c;
        match self.data {
            WeightData::F32(d) => d[i],
            WeightData::F16(d) => d[i].to_f32(),
            WeightData::I8 { q, scales } => f32::from(q[i]) * scales[r],
            WeightData::I4 { q, scales } => {
                let b = q[r * int4_row_bytes(self.cols) + c / 2];
                f32::from(int4_nibble(b, c % 2 == 1)) * scales[r * int4_groups(self.cols) + c / INT4_GROUP].to_f32()
            }
        }
    }

    /// `dot(row r, x)` with dequantisation fused into the loop (no scratch needed).
    #[inline]
    pub fn dot_row(&self, r: usize, x: &[f32]) -> f32 {
        let c = self.cols;
        match self.data {
            WeightData::F32(d) => dot_f32(&d[r * c..(r + 1) * c], x),
            WeightData::F16(d) => d[r * c..(r + 1) * c].iter().zip(x).map(|(w, x)| w.to_f32() * x).sum(),
            WeightData::I8 { q, scales } => {
                let acc: f32 = q[r * c..(r + 1) * c].iter().zip(x).map(|(&w, x)| f32::from(w) * x).sum();
                acc * scales[r]
            }
            WeightData::I4 { q, scales } => {
                let rb = int4_row_bytes(c);
                let g = int4_groups(c);
                let qrow = &q[r * rb..(r + 1) * rb];
                let mut total = 0.0f32;
                for (gi, xs) in x[..c].chunks(INT4_GROUP).enumerate() {
                    let bytes = &qrow[gi * INT4_GROUP / 2..];
                    let mut acc = 0.0f32;
                    for (j, &xv) in xs.iter().enumerate() {
                        acc += f32::from(int4_nibble(bytes[j / 2], j % 2 == 1)) * xv;
                    }
                    total += acc * scales[r * g + gi].to_f32();
                }
                total
            }
        }
    }
}

impl WeightView<'_> {
    /// Integer dot product of row `r`'s columns `col0 .. col0 + xq.len()` with int8 activations
    /// `xq`, multiplied in i32 and scaled by the weight's scales (not the activations'):
    /// `Σ_j q_w[r, col0 + j] · xq[j] · scale_w`. `None` for f32/f16 weights (no integer form),
    /// and for int4 when `col0` is not at a group boundary (a multiple of 32).
    #[inline]
    pub fn dot_row_q8(&self, r: usize, col0: usize, xq: &[i8]) -> Option<f32> {
        let c = self.cols;
        let n = xq.len().min(c.saturating_sub(col0));
        match self.data {
            WeightData::F32(_) | WeightData::F16(_) => None,
            WeightData::I8 { q, scales } => {
                let row = &q[r * c + col0..r * c + col0 + n];
                // |q| ≤ 127 on both sides: Σ over fewer than 2^17 terms fits in i32.
                let acc: i32 = row.iter().zip(xq).map(|(&w, &x)| i32::from(w) * i32::from(x)).sum();
                Some(acc as f32 * scales[r])
            }
            WeightData::I4 { q, scales } => {
                if !col0.is_multiple_of(INT4_GROUP) {
                    return None;
                }
                let rb = int4_row_bytes(c);
                let g = int4_groups(c);
                let qrow = &q[r * rb..(r + 1) * rb];
                let mut total = 0.0f32;
                for (k, xs) in xq[..n].chunks(INT4_GROUP).enumerate() {
                    let gi = col0 / INT4_GROUP + k;
                    let bytes = &qrow[gi * INT4_GROUP / 2..];
                    let mut acc = 0i32;
                    for (j, &xv) in xs.iter().enumerate() {
                        acc += i32::from(int4_nibble(bytes[j / 2], j % 2 == 1)) * i32::from(xv);
                    }
                    total += acc as f32 * scales[r * g + gi].to_f32();
                }
                Some(total)
            }
        }
    }

    /// True for encodings with an integer form ([`dot_row_q8`](Self::dot_row_q8)): int8, int4.
    pub fn is_integer(&self) -> bool {
        matches!(self.data, WeightData::I8 { .. } | WeightData::I4 { .. })
    }
}

/// Rounds half away from zero.
fn round_half_away(x: f32) -> f32 {
    // no_std has no f32::round; this is exact for |x| < 2^23.
    let t = x as i32 as f32;
    let frac = x - t;
    if frac >= 0.5 {
        t + 1.0
    } else if frac <= -0.5 {
        t - 1.0
    } else {
        t
    }
}

/// Quantises `x` to int8 with a static (calibrated) scale: `round_half_away(x / scale)` clamped
/// to ±127. Values beyond ±127·scale saturate; that is the calibration's choice of range.
#[inline]
pub fn quantize_act(x: &[f32], inv_scale: f32, out: &mut [i8]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = round_half_away(v * inv_scale).clamp(-127.0, 127.0) as i8;
    }
}

/// Plain f32 dot product with four accumulators (vectorises well).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}

#[inline]
fn int4_nibble(byte: u8, high: bool) -> i8 {
    let n = if high { byte >> 4 } else { byte & 0x0f };
    ((n << 4) as i8) >> 4
}

#[cfg(feature = "alloc")]
pub use encode::*;

#[cfg(feature = "alloc")]
mod encode {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// An owned encoded weight: raw little-endian data and scale bytes, as stored in the file.
    #[derive(Clone, Debug, PartialEq)]
    pub struct EncodedWeight {
        /// Storage dtype.
        pub dtype: DType,
        /// Rows of the matrix view.
        pub rows: usize,
        /// Columns of the matrix view.
        pub cols: usize,
        /// Data bytes.
        pub data: Vec<u8>,
        /// Scale bytes (empty for f32/f16).
        pub scales: Vec<u8>,
    }

    impl EncodedWeight {
        /// Encodes `values` (`rows * cols` f32, row-major) as `dtype`.
        pub fn encode(dtype: DType, rows: usize, cols: usize, values: &[f32]) -> Result<Self, WeightError> {
            let expected = rows * cols;
            if values.len() != expected {
                return Err(WeightError::DataLength { dtype: DType::F32, rows, cols, expected, found: values.len() });
            }
            // f32 and f16 hold ±∞ (an attention mask's fill) and NaN (an element-wise operand's
            // value) exactly; a quantised encoding has neither.
            let quantised = matches!(dtype, DType::I8 | DType::I4);
            if let Some(index) = values.iter().position(|v| quantised && !v.is_finite()) {
                return Err(WeightError::NonFinite { index });
            }
            let (data, scales) = match dtype {
                DType::F32 => (bytemuck::cast_slice::<f32, u8>(values).to_vec(), Vec::new()),
                DType::F16 => {
                    let h: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
                    (bytemuck::cast_slice::<f16, u8>(&h).to_vec(), Vec::new())
                }
                DType::I8 => {
                    let (q, s) = quantize_i8(rows, cols, values);
                    (bytemuck::cast_slice::<i8, u8>(&q).to_vec(), bytemuck::cast_slice::<f32, u8>(&s).to_vec())
                }
                DType::I4 => {
                    let (q, s) = quantize_i4(rows, cols, values)?;
                    (q, bytemuck::cast_slice::<f16, u8>(&s).to_vec())
                }
                DType::I32 => return Err(WeightError::NotAWeightDType(dtype)),
            };
            Ok(Self { dtype, rows, cols, data, scales })
        }

        /// A view over this encoding. The byte vectors are re-aligned by copying into typed
        /// vectors held in `store` (the file reader views aligned bytes directly instead).
        pub fn view<'a>(&self, store: &'a mut ViewStore) -> WeightView<'a> {
            store.fill(self);
            let data = match self.dtype {
                DType::F32 | DType::I32 => WeightData::F32(&store.f32s),
                DType::F16 => WeightData::F16(&store.f16s),
                DType::I8 => WeightData::I8 { q: &store.i8s, scales: &store.f32s },
                DType::I4 => WeightData::I4 { q: &store.u8s, scales: &store.f16s },
            };
            WeightView::new(self.rows, self.cols, data).expect("encoder produced consistent lengths")
        }

        /// Decodes the whole weight back to f32.
        pub fn decode(&self) -> Vec<f32> {
            let mut store = ViewStore::default();
            let v = self.view(&mut store);
            let mut out = vec![0.0; self.rows * self.cols];
            v.decode_into(&mut out);
            out
        }
    }

    /// Typed, aligned copies backing [`EncodedWeight::view`].
    #[derive(Default, Debug)]
    pub struct ViewStore {
        f32s: Vec<f32>,
        f16s: Vec<f16>,
        i8s: Vec<i8>,
        u8s: Vec<u8>,
    }

    impl ViewStore {
        fn fill(&mut self, w: &EncodedWeight) {
            self.f32s.clear();
            self.f16s.clear();
            self.i8s.clear();
            self.u8s.clear();
            let f32s =
                |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
            let f16s = |b: &[u8]| b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect::<Vec<_>>();
            match w.dtype {
                DType::F32 | DType::I32 => self.f32s = f32s(&w.data),
                DType::F16 => self.f16s = f16s(&w.data),
                DType::I8 => {
                    self.i8s = w.data.iter().map(|&b| b as i8).collect();
                    self.f32s = f32s(&w.scales);
                }
                DType::I4 => {
                    self.u8s = w.data.clone();
                    self.f16s = f16s(&w.scales);
                }
            }
        }
    }

    /// Symmetric per-row int8: `scale = max|row| / 127`, `q = round(x / scale)`.
    pub fn quantize_i8(rows: usize, cols: usize, values: &[f32]) -> (Vec<i8>, Vec<f32>) {
        let mut q = vec![0i8; rows * cols];
        let mut scales = vec![0f32; rows];
        for r in 0..rows {
            let row = &values[r * cols..(r + 1) * cols];
            let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = amax / 127.0;
            scales[r] = s;
            if s > 0.0 {
                for (o, &v) in q[r * cols..(r + 1) * cols].iter_mut().zip(row) {
                    // |v / s| <= 127 by construction of s.
                    *o = round_half_away(v / s).clamp(-127.0, 127.0) as i8;
                }
            }
        }
        (q, scales)
    }

    /// Symmetric grouped int4 (group 32 along the row): `scale = max|group| / 7` rounded to
    /// f16, `q = round(x / scale)` in `-7..=7`, packed two per byte, low nibble first.
    pub fn quantize_i4(rows: usize, cols: usize, values: &[f32]) -> Result<(Vec<u8>, Vec<f16>), WeightError> {
        let g = int4_groups(cols);
        let rb = int4_row_bytes(cols);
        let mut q = vec![0u8; rows * rb];
        let mut scales = vec![f16::ZERO; rows * g];
        for r in 0..rows {
            let row = &values[r * cols..(r + 1) * cols];
            for (gi, grp) in row.chunks(INT4_GROUP).enumerate() {
                let amax = grp.iter().fold(0f32, |m, v| m.max(v.abs()));
                let s32 = amax / 7.0;
                let s = f16::from_f32(s32);
                if !s.is_finite() {
                    return Err(WeightError::ScaleOverflow { scale: s32, row: r });
                }
                // Round the scale up if f16 rounding made it smaller than needed.
                let s = if s.to_f32() < s32 { f16::from_bits(s.to_bits() + 1) } else { s };
                scales[r * g + gi] = s;
                let sf = s.to_f32();
                if sf == 0.0 {
                    continue;
                }
                for (j, &v) in grp.iter().enumerate() {
                    let n = round_half_away(v / sf).clamp(-7.0, 7.0) as i8;
                    let col = gi * INT4_GROUP + j;
                    let byte = &mut q[r * rb + col / 2];
                    let nib = (n as u8) & 0x0f;
                    *byte |= if col % 2 == 1 { nib << 4 } else { nib };
                }
            }
        }
        Ok((q, scales))
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn matrix() -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
        (1usize..6, 1usize..80)
            .prop_flat_map(|(r, c)| (Just(r), Just(c), proptest::collection::vec(-4.0f32..4.0, r * c)))
    }

    proptest! {
        #[test]
        fn f32_and_f16_round_trip((r, c, v) in matrix()) {
            let e = EncodedWeight::encode(DType::F32, r, c, &v).unwrap();
            prop_assert_eq!(e.decode(), v.clone());
            let h = EncodedWeight::encode(DType::F16, r, c, &v).unwrap();
            for (a, b) in h.decode().iter().zip(&v) {
                prop_assert!((a - b).abs() <= 4.0 * 2f32.powi(-11));
            }
        }

        #[test]
        fn int8_error_is_bounded_by_half_a_step((r, c, v) in matrix()) {
            let e = EncodedWeight::encode(DType::I8, r, c, &v).unwrap();
            let d = e.decode();
            for row in 0..r {
                let amax = v[row * c..(row + 1) * c].iter().fold(0f32, |m, x| m.max(x.abs()));
                let step = amax / 127.0;
                // Half a step, plus f32 rounding: `v / s` carries up to 127·u of absolute error before
                // rounding to q, and `q · s` another 127·u relative to the step (u = 2⁻²⁴), so the exact
                // bound is s·(0.5 + 254·u) = 0.5·s·(1 + 3.03e-5). 1e-5 was too tight (a CI failure).
                let bound = 0.5 * step * (1.0 + 508.0 * f32::EPSILON / 2.0) * (1.0 + 1e-6) + 1e-12;
                for j in 0..c {
                    let i = row * c + j;
                    prop_assert!((d[i] - v[i]).abs() <= bound, "{} vs {} (step {})", d[i], v[i], step);
                }
            }
        }

        #[test]
        fn int4_error_is_bounded_by_half_a_step((r, c, v) in matrix()) {
            let e = EncodedWeight::encode(DType::I4, r, c, &v).unwrap();
            prop_assert_eq!(e.data.len(), r * int4_row_bytes(c));
            let d = e.decode();
            for row in 0..r {
                for (gi, grp) in v[row * c..(row + 1) * c].chunks(INT4_GROUP).enumerate() {
                    let amax = grp.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let step = amax / 7.0 * (1.0 + 2f32.powi(-10));
                    for (j, &x) in grp.iter().enumerate() {
                        let i = row * c + gi * INT4_GROUP + j;
                        prop_assert!((d[i] - x).abs() <= 0.5 * step + 1e-6, "{} vs {}", d[i], x);
                    }
                }
            }
        }

        #[test]
        fn dot_row_matches_decode_then_dot((r, c, v) in matrix(), dt in 0u8..4) {
            let dtype = DType::from_u8(dt).unwrap();
            let e = EncodedWeight::encode(dtype, r, c, &v).unwrap();
            let mut store = ViewStore::default();
            let view = e.view(&mut store);
            let x: Vec<f32> = (0..c).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut buf = alloc::vec![0.0; c];
            for row in 0..r {
                let decoded = view.row(row, &mut buf).to_vec();
                let want: f64 = decoded.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                let got = view.dot_row(row, &x);
                prop_assert!((f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()) * (c as f64).sqrt());
                for (j, &d) in decoded.iter().enumerate() {
                    prop_assert_eq!(view.get(row, j), d);
                }
            }
        }
    }

    #[test]
    fn int4_nibbles_sign_extend() {
        assert_eq!(int4_nibble(0x0f, false), -1);
        assert_eq!(int4_nibble(0x78, true), 7);
        assert_eq!(int4_nibble(0x80, true), -8);
    }

    #[test]
    fn non_finite_weights_are_rejected_by_quantised_encodings() {
        for dtype in [DType::I8, DType::I4] {
            let err = EncodedWeight::encode(dtype, 1, 3, &[1.0, f32::NAN, 2.0]).unwrap_err();
            assert_eq!(err, WeightError::NonFinite { index: 1 }, "{dtype:?}");
            let err = EncodedWeight::encode(dtype, 1, 3, &[1.0, 2.0, f32::NEG_INFINITY]).unwrap_err();
            assert_eq!(err, WeightError::NonFinite { index: 2 }, "{dtype:?}");
        }
    }

    /// ±∞ (a mask's fill) and NaN (an element-wise operand's value) are stored exactly in f32
    /// and f16.
    #[test]
    fn non_finite_weights_encode_exactly_in_f32_and_f16() {
        let v = [1.0, f32::NEG_INFINITY, f32::INFINITY, -2.5, f32::NAN];
        for dtype in [DType::F32, DType::F16] {
            let e = EncodedWeight::encode(dtype, 1, 5, &v).unwrap();
            let back: Vec<f32> = match dtype {
                DType::F32 => bytemuck::cast_slice::<u8, f32>(&e.data).to_vec(),
                _ => bytemuck::cast_slice::<u8, f16>(&e.data).iter().map(|h| h.to_f32()).collect(),
            };
            assert_eq!(back[..4], v[..4], "{dtype:?}");
            assert!(back[4].is_nan(), "{dtype:?}: {}", back[4]);
        }
    }

    #[test]
    fn wrong_lengths_are_typed_errors() {
        let d = [0.0f32; 5];
        assert!(matches!(WeightView::f32(2, 3, &d), Err(WeightError::DataLength { expected: 6, found: 5, .. })));
    }
}
