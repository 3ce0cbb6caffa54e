//! Byte layout constants of the `.kes` container (see `docs/FORMAT.md`), bounds-checked
//! little-endian field access, and the checksum.

use crate::error::Error;

/// The eight magic bytes at offset 0.
pub const MAGIC: [u8; 8] = *b"KESTREL\0";
/// The major version this crate reads and writes. Files with another major are rejected.
pub const VERSION_MAJOR: u16 = 1;
/// The major version of files with bounded dims (a dims section, `docs/FORMAT.md` §11): a 1.x
/// reader refuses them rather than skip the section and run every size at the bound.
pub const VERSION_MAJOR_DIMS: u16 = 2;
/// The minor version this crate writes. Files with a newer minor (same major) are read.
pub const VERSION_MINOR: u16 = 1;
/// Alignment of the buffer base, of every weight and scale offset, and of every activation
/// arena offset.
pub const TENSOR_ALIGN: usize = 64;

pub(crate) const HEADER_LEN: u64 = 64;
pub(crate) const OFF_MAJOR: usize = 8;
pub(crate) const OFF_MINOR: usize = 10;
pub(crate) const OFF_FLAGS: usize = 12;
pub(crate) const OFF_FILE_LEN: usize = 16;
pub(crate) const OFF_CHECKSUM: usize = 24;
pub(crate) const OFF_SECTION_COUNT: usize = 28;
pub(crate) const OFF_SECTION_TABLE: usize = 32;
pub(crate) const SECTION_ENTRY_LEN: u64 = 24;
pub(crate) const MAX_SECTIONS: u32 = 64;
/// Alignment of every section offset (the weights section: [`TENSOR_ALIGN`]).
pub(crate) const SECTION_ALIGN: u64 = 8;

pub(crate) const TENSOR_HEADER_LEN: u64 = 16;
pub(crate) const TENSOR_ENTRY_LEN: u64 = 72;
/// A tensor entry holding dims 6 and 7 at [`TENSOR_ENTRY_LEN`] (tensors of rank 7 and 8).
pub(crate) const TENSOR_ENTRY_LEN_RANK8: u64 = 80;
pub(crate) const GRAPH_HEADER_LEN: u64 = 16;
pub(crate) const META_HEADER_LEN: u64 = 48;
pub(crate) const META_STRREF_LEN: u64 = 8;
pub(crate) const META_INPUT_LEN: u64 = 72;
/// A metadata input holding dims 6 and 7 at [`META_INPUT_LEN`] (inputs of rank 7 and 8).
pub(crate) const META_INPUT_LEN_RANK8: u64 = 80;
pub(crate) const META_OUTPUT_LEN: u64 = 16;

/// Section ids.
pub mod section {
    /// Model metadata.
    pub const META: u32 = 1;
    /// Tensor table.
    pub const TENSORS: u32 = 2;
    /// Graph: op records, inputs, outputs.
    pub const GRAPH: u32 = 3;
    /// Memory plan.
    pub const PLAN: u32 = 4;
    /// Weights blob.
    pub const WEIGHTS: u32 = 5;
    /// Bounded dims (format 2.0).
    pub const DIMS: u32 = 6;

    /// The name of a known section id.
    pub fn name(id: u32) -> &'static str {
        match id {
            META => "metadata",
            TENSORS => "tensors",
            GRAPH => "graph",
            PLAN => "plan",
            WEIGHTS => "weights",
            DIMS => "dims",
            _ => "unknown",
        }
    }
}

/// `b[off..off + len]`, or [`Error::Truncated`].
#[inline]
pub(crate) fn sub<'a>(b: &'a [u8], off: u64, len: u64, what: &'static str) -> Result<&'a [u8], Error> {
    let available = b.len() as u64;
    let trunc = |needed| Error::Truncated { what, needed, available };
    let end = off.checked_add(len).ok_or(trunc(u64::MAX))?;
    if end > available {
        return Err(trunc(end));
    }
    // Both fit in `b.len()`, hence in usize.
    b.get(off as usize..end as usize).ok_or(trunc(end))
}

#[inline]
fn arr<const N: usize>(b: &[u8], off: u64, what: &'static str) -> Result<[u8; N], Error> {
    let s = sub(b, off, N as u64, what)?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Ok(a)
}

/// Little-endian `u8` at `off`.
#[inline]
pub(crate) fn u8_at(b: &[u8], off: u64, what: &'static str) -> Result<u8, Error> {
    Ok(arr::<1>(b, off, what)?[0])
}

/// Little-endian `u16` at `off`.
#[inline]
pub(crate) fn u16_at(b: &[u8], off: u64, what: &'static str) -> Result<u16, Error> {
    arr(b, off, what).map(u16::from_le_bytes)
}

/// Little-endian `u32` at `off`.
#[inline]
pub(crate) fn u32_at(b: &[u8], off: u64, what: &'static str) -> Result<u32, Error> {
    arr(b, off, what).map(u32::from_le_bytes)
}

/// Little-endian `u64` at `off`.
#[inline]
pub(crate) fn u64_at(b: &[u8], off: u64, what: &'static str) -> Result<u64, Error> {
    arr(b, off, what).map(u64::from_le_bytes)
}

/// `a * b + c` in u64, or [`Error::Truncated`] naming `what` on overflow.
pub(crate) fn mul_add(a: u64, b: u64, c: u64, what: &'static str) -> Result<u64, Error> {
    a.checked_mul(b).and_then(|x| x.checked_add(c)).ok_or(Error::Truncated { what, needed: u64::MAX, available: 0 })
}

/// The CRC32 (IEEE, as `crc32fast`) of the whole file with the 4-byte checksum field at offset
/// 24 taken as zero. `None` if `bytes` is shorter than the header.
pub fn checksum(bytes: &[u8]) -> Option<u32> {
    if (bytes.len() as u64) < HEADER_LEN {
        return None;
    }
    let mut h = crc32fast::Hasher::new();
    h.update(bytes.get(..OFF_CHECKSUM)?);
    h.update(&[0u8; 4]);
    h.update(bytes.get(OFF_CHECKSUM + 4..)?);
    Some(h.finalize())
}

/// Recomputes and stores the header checksum of an edited file. For tests and tools that patch
/// files on purpose (a reader never calls it). Returns `false` if `bytes` is shorter than the
/// header.
#[doc(hidden)]
pub fn reseal(bytes: &mut [u8]) -> bool {
    match (checksum(bytes), bytes.get_mut(OFF_CHECKSUM..OFF_CHECKSUM + 4)) {
        (Some(c), Some(field)) => {
            field.copy_from_slice(&c.to_le_bytes());
            true
        }
        _ => false,
    }
}

/// A shape stored as `rank`, six `u32` dims at `dims_off` and, where the entry is long enough
/// to hold them (`ext_off`, `docs/FORMAT.md` §5), dims 6 and 7 at `ext_off`; dims past the rank
/// must be zero. Without `ext_off` the rank is at most [`MAX_RANK_V1`](crate::MAX_RANK_V1).
#[inline]
pub(crate) fn shape_at(
    b: &[u8],
    rank: u8,
    dims_off: u64,
    ext_off: Option<u64>,
    what: &'static str,
) -> Result<crate::Shape, Error> {
    use crate::{MAX_RANK, MAX_RANK_V1};
    let max = if ext_off.is_some() { MAX_RANK } else { MAX_RANK_V1 };
    if usize::from(rank) > max {
        return Err(Error::BadRank { what, found: rank, max: max as u8 });
    }
    let mut dims = [0u32; MAX_RANK];
    for (i, d) in dims.iter_mut().enumerate().take(max) {
        let at = match (i.checked_sub(MAX_RANK_V1), ext_off) {
            (Some(j), Some(ext)) => ext.saturating_add(4 * j as u64),
            _ => dims_off.saturating_add(4 * i as u64),
        };
        *d = u32_at(b, at, what)?;
        if i >= usize::from(rank) && *d != 0 {
            return Err(Error::NonZeroReserved { what: "dims past the rank", found: u64::from(*d) });
        }
    }
    crate::Shape::new(&dims[..usize::from(rank)]).ok_or(Error::BadRank { what, found: rank, max: max as u8 })
}

/// [`str_at`] over a pool already known to be UTF-8: the same bounds and the same errors, the
/// text not validated again (only the ends checked to be character boundaries).
#[inline]
pub(crate) fn str_in<'a>(b: &[u8], at: u64, pool: &'a str, what: &'static str) -> Result<&'a str, Error> {
    let off = u32_at(b, at, what)?;
    let len = u32_at(b, at.saturating_add(4), what)?;
    sub(pool.as_bytes(), u64::from(off), u64::from(len), what)?;
    // In bounds (checked just above), so only a split character makes `get` fail (any part of
    // a character is invalid UTF-8 on its own; an empty name is valid anywhere).
    let (start, end) = (off as usize, off as usize + len as usize);
    if start == end {
        return Ok("");
    }
    pool.get(start..end).ok_or(Error::BadUtf8 { what })
}

/// A UTF-8 string `(offset u32, len u32)` at `at` in `b`, pointing into `pool`.
pub(crate) fn str_at<'a>(b: &[u8], at: u64, pool: &'a [u8], what: &'static str) -> Result<&'a str, Error> {
    let off = u32_at(b, at, what)?;
    let len = u32_at(b, at.saturating_add(4), what)?;
    let s = sub(pool, u64::from(off), u64::from(len), what)?;
    core::str::from_utf8(s).map_err(|_| Error::BadUtf8 { what })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `str_in` (pool validated once) gives what `str_at` (each name validated) gives, errors
    /// included: in range, past the end, an overflowing length, a character split at either end.
    #[test]
    fn str_in_matches_str_at() {
        let pool = "ab\u{e9}c\u{1F426}";
        for off in 0..=pool.len() as u32 + 1 {
            for len in (0..=pool.len() as u32 + 1).chain([u32::MAX]) {
                let mut entry = [0u8; 8];
                entry[..4].copy_from_slice(&off.to_le_bytes());
                entry[4..].copy_from_slice(&len.to_le_bytes());
                let want = str_at(&entry, 0, pool.as_bytes(), "name");
                assert_eq!(str_in(&entry, 0, pool, "name"), want, "{off}+{len}");
            }
        }
        assert_eq!(str_in(&[0u8; 7], 0, pool, "name"), str_at(&[0u8; 7], 0, pool.as_bytes(), "name"));
    }
}
