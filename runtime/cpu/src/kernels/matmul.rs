//! Batched matrix product over the last two axes, numpy broadcasting of the leading (batch)
//! axes: `a [.., M, K] · b [.., K, N]`, or `b [.., N, K]` with `transpose_b`; `b` may be a
//! weight in any encoding.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::elementwise::{broadcast_dims, broadcast_strides, dims_of, Operand};
use crate::kernels::strided::for_each_index;
use kestrel_rt_format::weight::dot_f32;
use kestrel_rt_format::{Shape, WeightView, MAX_RANK};

/// Shapes of a batched matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatMulParams {
    /// Rows of each `a` matrix.
    pub m: usize,
    /// Contraction length.
    pub k: usize,
    /// Columns of each output matrix.
    pub n: usize,
    /// `b` is read as `[.., N, K]`.
    pub transpose_b: bool,
    /// `b` is a weight (its rows are decoded through scratch when not stored as f32).
    pub b_is_weight: bool,
    /// `b`'s shape.
    pub b: Shape,
    /// Output shape: broadcast batch axes, then `[M, N]`.
    pub y: Shape,
    a_numel: usize,
    b_numel: usize,
    b_matrix: (usize, usize),
    batch_rank: usize,
    batch_dims: [usize; MAX_RANK],
    a_strides: [usize; MAX_RANK],
    b_strides: [usize; MAX_RANK],
}

impl MatMulParams {
    /// Params for `a` and `b` of rank ≥ 2 with matching contraction length and broadcastable
    /// batch axes.
    pub fn new(a: &Shape, b: &Shape, transpose_b: bool, b_is_weight: bool) -> Result<Self, ShapeError> {
        const OP: &str = "MatMul";
        let (da, ra) = dims_of(a);
        let (db, rb) = dims_of(b);
        if ra < 2 || rb < 2 {
            return Err(ShapeError::Invalid { op: OP, what: "operands must have rank at least 2" });
        }
        let (m, k) = (da[ra - 2], da[ra - 1]);
        let (kb, n) = if transpose_b { (db[rb - 1], db[rb - 2]) } else { (db[rb - 2], db[rb - 1]) };
        expect_eq(OP, "contraction length of b", k, kb)?;
        let (batch_dims, batch_rank) = broadcast_dims(OP, &da[..ra - 2], &db[..rb - 2])?;
        let mut a_strides = broadcast_strides(&da[..ra - 2], batch_rank);
        let mut b_strides = broadcast_strides(&db[..rb - 2], batch_rank);
        a_strides.iter_mut().for_each(|s| *s *= m * k);
        b_strides.iter_mut().for_each(|s| *s *= k * n);
        let mut yd = batch_dims;
        yd[batch_rank] = m;
        yd[batch_rank + 1] = n;
        let overflow = ShapeError::Invalid { op: OP, what: "element count overflows" };
        let y = Shape::from_usize(&yd[..batch_rank + 2]).ok_or(overflow)?;
        y.numel().ok_or(overflow)?;
        Ok(Self {
            m,
            k,
            n,
            transpose_b,
            b_is_weight,
            b: *b,
            y,
            a_numel: a.numel().ok_or(overflow)?,
            b_numel: b.numel().ok_or(overflow)?,
            b_matrix: b.as_matrix().ok_or(overflow)?,
            batch_rank,
            batch_dims,
            a_strides,
            b_strides,
        })
    }

    /// Checks the operands' lengths, and that a weight `b` is viewed as its shape's matrix
    /// (`[shape[0], product(rest)]`), which the kernel relies on to decode rows.
    pub fn check_operands(&self, a: &[f32], b: &Operand<'_>) -> Result<(), ShapeError> {
        const OP: &str = "MatMul";
        expect_eq(OP, "a elements", self.a_numel, a.len())?;
        b.check_len(OP, "b elements", self.b_numel)?;
        match b {
            Operand::Weight(w) => {
                if !self.b_is_weight {
                    return Err(ShapeError::Invalid { op: OP, what: "b is a weight but params say activation" });
                }
                expect_eq(OP, "b weight matrix rows", self.b_matrix.0, w.rows())?;
                expect_eq(OP, "b weight matrix cols", self.b_matrix.1, w.cols())
            }
            Operand::Act(_) => Ok(()),
        }
    }
}

/// Scratch for [`matmul`]: one decoded row of a weight `b`'s matrix view, 0 for an activation.
pub fn matmul_scratch(p: &MatMulParams) -> usize {
    if p.b_is_weight {
        p.b_matrix.1
    } else {
        0
    }
}

/// `len` consecutive elements of `b` from flat index `start` in f32: borrowed when stored as
/// f32, else decoded (the whole matrix row holding them, cached by row index) into `buf`.
fn segment<'r>(b: &Operand<'r>, start: usize, len: usize, buf: &'r mut [f32], cached: &mut usize) -> &'r [f32] {
    match b {
        Operand::Act(s) => &s[start..start + len],
        Operand::Weight(w) => match w.as_f32() {
            Some(s) => &s[start..start + len],
            None => {
                let c = w.cols();
                let r = start / c;
                if *cached != r {
                    w.decode_row(r, &mut buf[..c]);
                    *cached = r;
                }
                &buf[start % c..][..len]
            }
        },
    }
}

/// `y [.., M, N] = a [.., M, K] · b` per broadcast batch index.
pub fn matmul(p: &MatMulParams, a: &[f32], b: Operand<'_>, y: &mut [f32], scratch: &mut [f32]) {
    let (m, k, n) = (p.m, p.k, p.n);
    let mn = m * n;
    if mn == 0 {
        return;
    }
    if k == 0 {
        // A sum over an empty contraction (a run-time dim at 0): zeros.
        y[..p.y.numel().unwrap_or(0)].fill(0.0);
        return;
    }
    let mut cached = usize::MAX;
    for_each_index(&p.batch_dims[..p.batch_rank], [&p.a_strides, &p.b_strides], |bi, [oa, ob]| {
        let ym = &mut y[bi * mn..(bi + 1) * mn];
        let am = &a[oa..oa + m * k];
        // `b` stored as f32 (an activation or an f32 weight): the packed GEMM kernels the dense
        // layers and convolutions use, `a · bᵀ` as a dense product with `b` as its weight rows,
        // `a · b` reading `b`'s rows in place. Other encodings: the loops below, each row decoded
        // once per batch index.
        if let Some(bs) = b.as_f32() {
            if p.transpose_b {
                if let Ok(w) = WeightView::f32(n, k, &bs[ob..ob + n * k]) {
                    return crate::kernels::linear::matmul_nt(am, m, &w, ym);
                }
            } else {
                return crate::kernels::simd::matmul_kn(am, m, k, &bs[ob..ob + k * n], n, ym, n);
            }
        }
        if p.transpose_b {
            for j in 0..n {
                let seg = segment(&b, ob + j * k, k, &mut *scratch, &mut cached);
                for i in 0..m {
                    ym[i * n + j] = dot_f32(&am[i * k..(i + 1) * k], seg);
                }
            }
        } else {
            ym.fill(0.0);
            for kk in 0..k {
                let seg = segment(&b, ob + kk * n, n, &mut *scratch, &mut cached);
                for i in 0..m {
                    let av = am[i * k + kk];
                    ym[i * n..(i + 1) * n].iter_mut().zip(seg).for_each(|(o, &bv)| *o += av * bv);
                }
            }
        }
    });
}
