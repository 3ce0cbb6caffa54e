//! Fastformer additive attention (DESIGN.md §3), fused with its projections. O(T·d).
//!
//! With q_t, k_t, v_t the projected rows and head i owning columns `i·c .. (i+1)·c`:
//! `α_i = softmax_t(q_t · wqa[i] · scale)`, `g = Σ_t α_{i,t} q_t` on head i's columns;
//! `p_t = g ⊙ k_t`, `β_i = softmax_t(p_t · wka[i] · scale)`, `G = Σ_t β_{i,t} p_t` likewise;
//! `u_t = G ⊙ v_t`, `y_t = W^R u_t + b^R + q_t`. The scoring vectors span all d features (the
//! official `Linear(d, h)`); per-head c-vectors are the block-diagonal special case.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::attention::{axpy, check_dims_scale, MechanismWeights};
use crate::kernels::simd::softmax as softmax_in_place;
use kestrel_rt_format::WeightView;

const OP: &str = "fastformer";

/// Sizes and the score scale of a Fastformer layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FastformerParams {
    /// Tokens T.
    pub t: usize,
    /// Features d.
    pub d: usize,
    /// Heads h ≥ 1, dividing d.
    pub heads: usize,
    /// Score scale, normally 1/√c.
    pub scale: f32,
}

/// Fastformer's scoring vectors, one per head over all d features.
#[derive(Clone, Copy, Debug)]
pub struct FastformerScores<'a> {
    /// Query scoring vectors `[h, d]`.
    pub wqa: WeightView<'a>,
    /// Key scoring vectors `[h, d]`.
    pub wka: WeightView<'a>,
}

/// The weights of a Fastformer layer: W^Q, W^K, W^V and W^R (as `o`) `[d, d]` with their
/// biases, and the scoring vectors.
pub type FastformerWeights<'a> = MechanismWeights<'a, FastformerScores<'a>>;

impl FastformerParams {
    /// Checks every weight against the sizes.
    pub fn check(&self, w: &FastformerWeights<'_>) -> Result<(), ShapeError> {
        check_dims_scale(OP, self.t, self.d, self.heads, self.scale)?;
        let d = self.d;
        w.proj.check(OP, d, d)?;
        expect_eq(OP, "wqa rows (heads)", self.heads, w.w.wqa.rows())?;
        expect_eq(OP, "wqa cols", d, w.w.wqa.cols())?;
        expect_eq(OP, "wka rows (heads)", self.heads, w.w.wka.rows())?;
        expect_eq(OP, "wka cols", d, w.w.wka.cols())
    }
}

/// f32 scratch elements [`fastformer`] needs for one sample.
pub fn fastformer_scratch(p: &FastformerParams) -> usize {
    3 * p.t * p.d + p.t + 2 * p.d
}

/// `out[head cols] = Σ_t softmax_t(rows_t · score[head] · scale) rows_t[head cols]`, per head.
fn pool(rows: &[f32], p: &FastformerParams, score: &WeightView<'_>, alpha: &mut [f32], out: &mut [f32]) {
    let (d, c) = (p.d, p.d / p.heads);
    out.fill(0.0);
    for i in 0..p.heads {
        for (a, row) in alpha.iter_mut().zip(rows.chunks_exact(d)) {
            *a = score.dot_row(i, row) * p.scale;
        }
        softmax_in_place(alpha);
        let o = &mut out[i * c..(i + 1) * c];
        for (&a, row) in alpha.iter().zip(rows.chunks_exact(d)) {
            axpy(o, a, &row[i * c..(i + 1) * c]);
        }
    }
}

/// One sample: `x [T, d] -> y [T, d]`. Requires `p.check(w)` to have passed and
/// `scratch.len() >= fastformer_scratch(p)`; `x` and `y` hold at least T·d elements.
pub fn fastformer(p: &FastformerParams, w: &FastformerWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (t, d) = (p.t, p.d);
    let ([qb, kb, vb], rest) = w.proj.project(x, t, d, scratch);
    let (alpha, rest) = rest.split_at_mut(t);
    let (g, rest) = rest.split_at_mut(d);
    let gk = &mut rest[..d];

    pool(qb, p, &w.w.wqa, alpha, g);
    for row in kb.chunks_exact_mut(d) {
        row.iter_mut().zip(&*g).for_each(|(k, &g)| *k *= g);
    }
    pool(kb, p, &w.w.wka, alpha, gk);
    for row in vb.chunks_exact_mut(d) {
        row.iter_mut().zip(&*gk).for_each(|(v, &g)| *v *= g);
    }
    let y = &mut y[..t * d];
    w.proj.o.apply(vb, t, y);
    axpy(y, 1.0, qb);
}
