//! Materialised permutation of axes (rank ≤ `MAX_RANK`, 8): `y[i_0, .., i_{r-1}] = x[..]` with
//! output axis `k` taken from input axis `perm[k]`.
//!
//! The permutation is first simplified (axes of size 1 dropped, output axes that are also
//! adjacent in the input merged), then copied by one of two loops: when the last output axis is
//! the input's last axis, rows (one contiguous copy per output row); otherwise 2-D transposes
//! of the blocks between the output's last axis and the output axis that is the input's last
//! (16 × 16 register blocks on AVX-512, 8 × 8 tiles elsewhere), one per index of the other axes.

use crate::error::ShapeError;
use crate::kernels::simd::{multiversion::multiversion, Isa};
use crate::kernels::strided::for_each_index;
use kestrel_rt_format::{Shape, MAX_RANK};

/// A permute copy of an input of shape `x` into shape `y`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransposeParams {
    /// Output shape: `y.dim(k) == x.dim(perm[k])`.
    pub y: Shape,
    /// Element count.
    pub n: usize,
    /// The simplified permutation: output dims (size-1 axes dropped, axes contiguous in both
    /// merged), `rank` of them, ...
    dims: [usize; MAX_RANK],
    /// ... and the input stride (elements) of each.
    src_strides: [usize; MAX_RANK],
    rank: usize,
}

impl TransposeParams {
    /// Params for input shape `x` and `perm` (only the first `x.rank()` entries are read, so
    /// the op's `[u8; MAX_RANK]` can be passed as is); they must be a permutation of `0..rank`.
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
        // Simplified: size-1 axes dropped, an axis merged into the one before it when that one
        // steps over it in the input too.
        let (mut md, mut ms, mut rank) = ([0usize; MAX_RANK], [0usize; MAX_RANK], 0);
        for k in 0..r {
            let (d, s) = (dims[k] as usize, src_strides[k]);
            if d == 1 {
                continue;
            }
            if rank > 0 && ms[rank - 1] == s * d {
                md[rank - 1] *= d;
                ms[rank - 1] = s;
            } else {
                (md[rank], ms[rank]) = (d, s);
                rank += 1;
            }
        }
        Ok(Self { y, n, dims: md, src_strides: ms, rank })
    }
}

/// Scratch for [`transpose`]: none.
pub fn transpose_scratch(_p: &TransposeParams) -> usize {
    0
}

/// Copies `x` permuted into `y` (`p.n` elements each). `scratch` is unused.
pub fn transpose(p: &TransposeParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    transpose_on(crate::kernels::simd::isa(), p, x, y, scratch)
}

/// [`transpose`] on `isa` (the tests pass each tier in turn).
pub fn transpose_on(isa: Isa, p: &TransposeParams, x: &[f32], y: &mut [f32], _scratch: &mut [f32]) {
    let (x, y) = (&x[..p.n], &mut y[..p.n]);
    let r = p.rank;
    if p.n == 0 {
        return;
    }
    if r == 0 || p.src_strides[r - 1] == 1 {
        // Rows: the last axis (or all, merged) contiguous on both sides.
        let last = if r == 0 { 1 } else { p.dims[r - 1] };
        for_each_index(&p.dims[..r.saturating_sub(1)], [&p.src_strides], |i, [off]| {
            super::slice::copy(&mut y[i * last..(i + 1) * last], &x[off..off + last]);
        });
        return;
    }
    // Blocks: output axis `k` is the input's last (stride 1; r ≥ 2 after the merge).
    let k = (0..r - 1).find(|&a| p.src_strides[a] == 1).expect("an axis of input stride 1");
    let mut dst_strides = [0usize; MAX_RANK];
    let mut acc = 1;
    for a in (0..r).rev() {
        dst_strides[a] = acc;
        acc *= p.dims[a];
    }
    // The other axes' index space, with both offsets.
    let (mut od, mut os, mut ot, mut m) = ([0usize; MAX_RANK], [0usize; MAX_RANK], [0usize; MAX_RANK], 0);
    for a in (0..r - 1).filter(|&a| a != k) {
        (od[m], os[m], ot[m]) = (p.dims[a], p.src_strides[a], dst_strides[a]);
        m += 1;
    }
    let (rows, cols, ld_src, ld_dst) = (p.dims[r - 1], p.dims[k], p.src_strides[r - 1], dst_strides[k]);
    for_each_index(&od[..m], [&os, &ot], |_, [so, d]| {
        // Cache tiles of C × C: each touches C source and C destination rows (pages, for
        // long rows) at a time.
        const C: usize = 64;
        for r0 in (0..rows).step_by(C) {
            for c0 in (0..cols).step_by(C) {
                let (src, dst) = (&x[so + r0 * ld_src + c0..], &mut y[d + c0 * ld_dst + r0..]);
                block_on(isa, src, C.min(rows - r0), C.min(cols - c0), ld_src, dst, ld_dst);
            }
        }
    });
}

/// `dst[c·ld_dst + r] = src[r·ld_src + c]` for `r < rows`, `c < cols`: the AVX-512 16 × 16
/// register blocks where `isa` is AVX-512, else [`tiles`] compiled for the tier.
fn block_on(isa: Isa, src: &[f32], rows: usize, cols: usize, ld_src: usize, dst: &mut [f32], ld_dst: usize) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.supported() {
        // SAFETY: AVX-512F (with AVX2/FMA/F16C) checked; the kernel checks lengths.
        return unsafe { crate::kernels::simd::x86::transpose_f32_avx512(src, rows, cols, ld_src, dst, ld_dst) };
    }
    tiles_on(isa, src, rows, cols, ld_src, dst, ld_dst)
}

multiversion!(
    /// [`block_on`]'s portable loops.
    fn tiles / tiles_on(src: &[f32], rows: usize, cols: usize, ld_src: usize, dst: &mut [f32], ld_dst: usize) => tiles_body
);

/// [`block_on`] in 8 × 8 tiles (each read as 8 source rows of 8, written as 8 destination rows
/// of 8), the edges element by element.
#[inline(always)]
fn tiles_body(src: &[f32], rows: usize, cols: usize, ld_src: usize, dst: &mut [f32], ld_dst: usize) {
    const T: usize = 8;
    let (rf, cf) = (rows - rows % T, cols - cols % T);
    for r0 in (0..rf).step_by(T) {
        for c0 in (0..cf).step_by(T) {
            let mut t = [[0f32; T]; T];
            for (i, row) in t.iter_mut().enumerate() {
                *row = src[(r0 + i) * ld_src + c0..][..T].try_into().expect("T elements");
            }
            for j in 0..T {
                let d: &mut [f32; T] = (&mut dst[(c0 + j) * ld_dst + r0..][..T]).try_into().expect("T elements");
                *d = core::array::from_fn(|i| t[i][j]);
            }
        }
    }
    for r in 0..rows {
        let cs = if r < rf { cf..cols } else { 0..cols };
        for c in cs {
            dst[c * ld_dst + r] = src[r * ld_src + c];
        }
    }
}
