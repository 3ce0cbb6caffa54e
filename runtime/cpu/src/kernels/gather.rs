//! Selection by index along one axis ([`Gather`]): the input seen as `[outer, n, inner]`, `k`
//! indices, the output `[outer, k, inner]` with `y[o, j, i] = x[o, idx[j], i]`, each index's
//! `inner` elements one contiguous copy.
//!
//! [`Gather`]: kestrel_rt_format::ops::Gather

use crate::error::RunError;
pub use kestrel_rt_core::params::GatherParams;

/// Gathers one sample: `x` (`outer·n·inner` elements), `idx` (`k` values: integers in `-n..n`,
/// negative ones counted from the end), `y` (`outer·k·inner`). An index that is not an integer in
/// `-n..n` is a [`RunError::IndexOutOfRange`] at its position in `idx`, found before anything is
/// written.
pub fn gather(p: &GatherParams, x: &[f32], idx: &[f32], y: &mut [f32]) -> Result<(), RunError> {
    let (n, k, inner) = (p.n, p.k, p.inner);
    let idx = &idx[..k];
    if let Some(position) = idx.iter().position(|&v| p.resolve(v).is_none()) {
        return Err(RunError::IndexOutOfRange { position, value_bits: idx[position].to_bits(), len: n });
    }
    if inner == 0 || k == 0 {
        // An empty output (a run-time dim at 0): nothing to copy.
        return Ok(());
    }
    for o in 0..p.outer {
        let src = &x[o * n * inner..(o + 1) * n * inner];
        let out = &mut y[o * k * inner..(o + 1) * k * inner];
        if inner == 1 {
            for (yv, &v) in out.iter_mut().zip(idx) {
                *yv = p.resolve(v).map_or(0.0, |r| src[r]);
            }
            continue;
        }
        for (row, &v) in out.chunks_exact_mut(inner).zip(idx) {
            if let Some(r) = p.resolve(v) {
                row.copy_from_slice(&src[r * inner..(r + 1) * inner]);
            }
        }
    }
    Ok(())
}
