//! Materialised permutation of axes (rank ≤ 6): `y[i_0, .., i_{r-1}] = x[..]` with output axis
//! `k` taken from input axis `perm[k]`.

use crate::error::ShapeError;
use crate::kernels::strided::{for_each_index, outer_dims};
use kestrel_rt_format::{Shape, MAX_RANK};

/// A permute copy of an input of shape `x` into shape `y`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransposeParams {
    /// Output shape: `y.dim(k) == x.dim(perm[k])`.
    pub y: Shape,
    /// Element count.
    pub n: usize,
    /// Input stride (elements) of each output axis.
    src_strides: [usize; MAX_RANK],
}

impl TransposeParams {
    /// Params for input shape `x` and `perm` (only the first `x.rank()` entries are read, so
    /// the op's `[u8; 6]` can be passed as is); they must be a permutation of `0..rank`.
    pub fn new(x: &Shape, perm: &[u8]) -> Result<Self, ShapeError> {
        const OP: &str = "Transpose";
        let r = x.rank();
        if perm.len() < r {
            return Err(ShapeError::Mismatch { op: OP, what: "perm entries", expected: r, found: perm.len() });
        }
        let mut seen = [false; MAX_RANK];
        for &p in &perm[..r] {
            let p = p as usize;
            if p >= r || seen[p] {
                return Err(ShapeError::Invalid { op: OP, what: "perm is not a permutation of the axes" });
            }
            seen[p] = true;
        }
        let n = x.numel().ok_or(ShapeError::Invalid { op: OP, what: "element count overflows" })?;
        let mut in_strides = [0usize; MAX_RANK];
        let mut acc = 1usize;
        for i in (0..r).rev() {
            in_strides[i] = acc;
            acc *= x.dim(i);
        }
        let mut dims = [0u32; MAX_RANK];
        let mut src_strides = [0usize; MAX_RANK];
        for k in 0..r {
            let p = perm[k] as usize;
            dims[k] = x.dims()[p];
            src_strides[k] = in_strides[p];
        }
        let y = Shape::new(&dims[..r]).ok_or(ShapeError::Invalid { op: OP, what: "rank exceeds 6" })?;
        Ok(Self { y, n, src_strides })
    }
}

/// Scratch for [`transpose`]: none.
pub fn transpose_scratch(_p: &TransposeParams) -> usize {
    0
}

/// Copies `x` permuted into `y` (`p.n` elements each). `scratch` is unused.
pub fn transpose(p: &TransposeParams, x: &[f32], y: &mut [f32], _scratch: &mut [f32]) {
    if p.n == 0 {
        return;
    }
    let r = p.y.rank();
    let last = p.y.last();
    let s_last = if r == 0 { 0 } else { p.src_strides[r - 1] };
    let (dims, outer) = outer_dims(&p.y);
    for_each_index(&dims[..outer], [&p.src_strides], |i, [off]| {
        for (j, o) in y[i * last..(i + 1) * last].iter_mut().enumerate() {
            *o = x[off + j * s_last];
        }
    });
}
