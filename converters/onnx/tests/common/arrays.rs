//! Index arithmetic and seeded draws the converter tests that write their own references share
//! (`#[path]`-included; each uses a part).
#![allow(dead_code)]

use kestrel_rt::demo::Rng;

/// Index `i` of a row-major array of `dims` as one index per dimension.
pub fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for (k, &d) in dims.iter().enumerate().rev() {
        idx[k] = i % d;
        i /= d;
    }
    idx
}

/// The row-major flat index of `idx` in an array of `dims`.
pub fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |a, (&i, &d)| a * d + i)
}

/// A seeded draw from `0..n`.
pub fn below(rng: &mut Rng, n: usize) -> usize {
    ((rng.uniform() + 1.0) * 0.5 * n as f32) as usize % n
}
