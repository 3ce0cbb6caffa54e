//! Walking a row-major index space while tracking where each index starts in strided inputs
//! (broadcast operands, permuted sources, batched matrix operands).

use kestrel_rt_format::{Shape, MAX_RANK};

/// Calls `f(i, starts)` for every index `i` of the row-major index space `dims` (in order), where
/// `starts[k]` is that index's offset in input `k`: Σ_axis index[axis] · `strides[k][axis]`.
/// An empty `dims` is one index.
#[inline]
pub(crate) fn for_each_index<const N: usize>(
    dims: &[usize],
    strides: [&[usize; MAX_RANK]; N],
    mut f: impl FnMut(usize, [usize; N]),
) {
    let count: usize = dims.iter().product();
    let mut idx = [0usize; MAX_RANK];
    let mut off = [0usize; N];
    for i in 0..count {
        f(i, off);
        // Odometer: advance the last axis, carrying into earlier ones.
        let mut ax = dims.len();
        while ax > 0 {
            ax -= 1;
            idx[ax] += 1;
            for (o, s) in off.iter_mut().zip(&strides) {
                *o += s[ax];
            }
            if idx[ax] < dims[ax] {
                break;
            }
            for (o, s) in off.iter_mut().zip(&strides) {
                *o -= s[ax] * idx[ax];
            }
            idx[ax] = 0;
        }
    }
}

/// The dims of `shape` except its last axis (the rows a last-axis loop walks).
#[inline]
pub(crate) fn outer_dims(shape: &Shape) -> ([usize; MAX_RANK], usize) {
    let mut d = [0usize; MAX_RANK];
    let r = shape.rank().saturating_sub(1);
    for (o, &v) in d.iter_mut().zip(&shape.dims()[..r]) {
        *o = v as usize;
    }
    (d, r)
}
