//! Fallible allocation for sizes that come from a file or an input.
//!
//! `vec![0; n]` aborts the process when `n` bytes cannot be had; everything here returns
//! [`Error::OutOfMemory`] instead, naming what the memory was for.

use crate::Error;

/// A vector of `n` default (zero) values, allocated fallibly.
pub fn zeroed_vec<T: Copy + Default>(n: usize, what: &str) -> Result<Vec<T>, Error> {
    let mut v = with_capacity(n, what)?;
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
    fn byte_counts_print() {
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(300), "300 B");
    }
}
