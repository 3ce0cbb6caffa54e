//! Fused multi-head attention of "You Need to Pay Better Attention" (DESIGN.md §1): one kernel
//! for the Standard, Optimised, Efficient and Super variants, with an optional causal mask.
//!
//! Head i of a sample `x [T, d]` (c = d/h, columns `i·c .. (i+1)·c`):
//!
//! | variant | queries | keys | values |
//! |---|---|---|---|
//! | Standard | X W^Q + b | X W^K + b | X W^V + b |
//! | Optimised | X W^Q + b | X W^K + b | X |
//! | Efficient | X W^Q + b | X | X |
//! | Super | X W^Q + b | X | W^A X + b^A |
//!
//! `H_i = softmax(Q_i K_iᵀ · scale) V_i`, `y = concat_i(H_i) W^O + b^O`. Super's W^A `[T, T]`
//! mixes tokens from the left and is applied once per layer, shared by all heads; in causal mode
//! only its lower triangle (including the diagonal) is read. Scores are O(T) per query row.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::linear::ProjW;
use crate::kernels::simd::{axpy as axpy_simd, dot_f32};
use crate::math::softmax_in_place;
use kestrel_format::ops::AttentionVariant;

const OP: &str = "attention";

/// Sizes and flags of one attention layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    /// Tokens T.
    pub t: usize,
    /// Features d.
    pub d: usize,
    /// Heads h ≥ 1, dividing d.
    pub heads: usize,
    /// Lower-triangular mask on the scores (and on W^A for Super).
    pub causal: bool,
    /// Score scale, normally 1/√c.
    pub scale: f32,
    /// Which mechanism.
    pub variant: AttentionVariant,
}

/// The weights of one attention layer; which optional ones are present follows the variant.
#[derive(Clone, Copy, Debug)]
pub struct AttentionWeights<'a> {
    /// W^Q `[d, d]` and b^Q.
    pub q: ProjW<'a>,
    /// W^K `[d, d]`: Standard and Optimised only.
    pub k: Option<ProjW<'a>>,
    /// W^V `[d, d]`: Standard only.
    pub v: Option<ProjW<'a>>,
    /// W^A `[T, T]` and b^A `[T]`: Super only.
    pub align: Option<ProjW<'a>>,
    /// W^O `[d, d]` and b^O.
    pub o: ProjW<'a>,
}

/// Checks `t ≥ 1`, `d ≥ 1`, `heads ≥ 1` and `heads | d` (shared by the mechanism kernels).
pub(crate) fn check_dims(op: &'static str, t: usize, d: usize, heads: usize) -> Result<(), ShapeError> {
    if t == 0 || d == 0 || heads == 0 {
        return Err(ShapeError::Invalid { op, what: "T, d and heads must be at least 1" });
    }
    if !d.is_multiple_of(heads) {
        return Err(ShapeError::Invalid { op, what: "heads must divide d" });
    }
    Ok(())
}

/// Checks that an optional weight is present exactly when the op needs it.
pub(crate) fn check_present<T>(
    op: &'static str,
    what: &'static str,
    needed: bool,
    w: &Option<T>,
) -> Result<(), ShapeError> {
    match (needed, w.is_some()) {
        (true, false) | (false, true) => {
            Err(ShapeError::Mismatch { op, what, expected: usize::from(needed), found: usize::from(w.is_some()) })
        }
        _ => Ok(()),
    }
}

/// `y += a · x` over the common length.
#[inline]
pub(crate) fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    axpy_simd(y, a, x);
}

impl AttentionParams {
    fn has_k(&self) -> bool {
        matches!(self.variant, AttentionVariant::Standard | AttentionVariant::Optimised)
    }

    fn has_v(&self) -> bool {
        self.variant == AttentionVariant::Standard
    }

    fn is_super(&self) -> bool {
        self.variant == AttentionVariant::Super
    }

    /// Checks every weight against the sizes and the variant.
    pub fn check(&self, w: &AttentionWeights<'_>) -> Result<(), ShapeError> {
        check_dims(OP, self.t, self.d, self.heads)?;
        if !self.scale.is_finite() {
            return Err(ShapeError::Invalid { op: OP, what: "scale must be finite" });
        }
        let d = self.d;
        w.q.check(OP, d, d)?;
        w.o.check(OP, d, d)?;
        check_present(OP, "W^K present (1) or absent (0)", self.has_k(), &w.k)?;
        check_present(OP, "W^V present (1) or absent (0)", self.has_v(), &w.v)?;
        check_present(OP, "W^A present (1) or absent (0)", self.is_super(), &w.align)?;
        if let Some(k) = &w.k {
            k.check(OP, d, d)?;
        }
        if let Some(v) = &w.v {
            v.check(OP, d, d)?;
        }
        if let Some(a) = &w.align {
            expect_eq(OP, "W^A rows (tokens)", self.t, a.w.rows())?;
            a.check(OP, self.t, self.t)?;
        }
        Ok(())
    }
}

/// f32 scratch elements [`attention`] needs for one sample.
pub fn attention_scratch(p: &AttentionParams) -> usize {
    let td = p.t * p.d;
    let k = if p.has_k() { td } else { 0 };
    let v = if p.has_v() || p.is_super() { td } else { 0 };
    let a = if p.is_super() { p.t } else { 0 };
    2 * td + k + v + p.t + a
}

/// One sample: `x [T, d] -> y [T, d]`. Requires `p.check(w)` to have passed and
/// `scratch.len() >= attention_scratch(p)`; `x` and `y` hold at least T·d elements.
pub fn attention(p: &AttentionParams, w: &AttentionWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (t, d) = (p.t, p.d);
    let td = t * d;
    let (q, rest) = scratch.split_at_mut(td);
    let (heads_out, rest) = rest.split_at_mut(td);
    let (kbuf, rest) = rest.split_at_mut(if p.has_k() { td } else { 0 });
    let (vbuf, rest) = rest.split_at_mut(if p.has_v() || p.is_super() { td } else { 0 });
    let (scores, rest) = rest.split_at_mut(t);
    let arow = &mut rest[..if p.is_super() { t } else { 0 }];

    w.q.apply(&x[..td], t, q);
    let keys: &[f32] = match &w.k {
        Some(k) => {
            k.apply(&x[..td], t, kbuf);
            kbuf
        }
        None => &x[..td],
    };
    let values: &[f32] = match (&w.v, &w.align) {
        (Some(v), _) => {
            v.apply(&x[..td], t, vbuf);
            vbuf
        }
        (None, Some(a)) => {
            align_tokens(a, p.causal, x, t, d, vbuf, arow);
            vbuf
        }
        (None, None) => &x[..td],
    };

    let c = d / p.heads;
    for i in 0..t {
        let n = if p.causal { i + 1 } else { t };
        let s = &mut scores[..n];
        for h in 0..p.heads {
            let col = h * c;
            let qi = &q[i * d + col..i * d + col + c];
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = dot_f32(qi, &keys[j * d + col..j * d + col + c]) * p.scale;
            }
            softmax_in_place(s);
            let out = &mut heads_out[i * d + col..i * d + col + c];
            out.fill(0.0);
            for (j, &a) in s.iter().enumerate() {
                axpy(out, a, &values[j * d + col..j * d + col + c]);
            }
        }
    }
    w.o.apply(heads_out, t, &mut y[..td]);
}

/// `v = W^A x + b^A` (token mixing); causal reads only `W^A[i, j]` with `j ≤ i`.
fn align_tokens(a: &ProjW<'_>, causal: bool, x: &[f32], t: usize, d: usize, v: &mut [f32], arow: &mut [f32]) {
    for i in 0..t {
        let row = a.w.row(i, arow);
        let out = &mut v[i * d..(i + 1) * d];
        out.fill(a.b.map_or(0.0, |b| b.get(0, i)));
        let n = if causal { i + 1 } else { t };
        for (j, &aij) in row[..n].iter().enumerate() {
            axpy(out, aij, &x[j * d..(j + 1) * d]);
        }
    }
}
