//! Fallible allocation for sizes that come from a file or an input.
//!
//! `vec![0; n]` aborts the process when `n` bytes cannot be had; everything here returns
//! [`Error::OutOfMemory`] instead, naming what the memory was for.

use crate::Error;

/// A vector of `n` default (zero) values, allocated fallibly.
pub fn zeroed_vec<T: Copy + Default>(n: usize, what: &str) -> Result<Vec<T>, Error> {
    let oom = || Error::OutOfMemory {
        what: what.to_string(),
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    };
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom())?;
    v.resize(n, T::default());
    Ok(v)
}

/// An empty vector with room for `n` values, allocated fallibly.
pub fn with_capacity<T>(n: usize, what: &str) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        what: what.to_string(),
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    Ok(v)
}

/// Parses a byte count as people write it: `1073741824`, `512MiB`, `2GiB`, `1.5G`, `64k`
/// (k/M/G/T and KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB powers of 1000).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("{text:?} is not a byte count (e.g. 512MiB, 2GiB)"))?;
    let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => return Err(format!("unknown unit {other:?} in {text:?} (use KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
    };
    let bytes = value * factor;
    if !bytes.is_finite() || bytes < 1.0 || bytes > usize::MAX as f64 {
        return Err(format!("{text:?} is not a usable byte count"));
    }
    Ok(bytes as usize)
}

/// A byte count for humans: `1.5 GiB`, `512 MiB`, `300 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        let e = zeroed_vec::<f32>(usize::MAX / 2, "a test").unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        assert!(e.to_string().contains("a test"), "{e}");
        assert!(with_capacity::<u64>(usize::MAX / 4, "x").is_err());
        assert_eq!(zeroed_vec::<u8>(3, "x").unwrap(), vec![0, 0, 0]);
    }

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("3 MB"), Ok(3_000_000));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("5 parsecs").is_err());
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(300), "300 B");
    }
}
