//! Fused multi-head attention of "You Need to Pay Better Attention" (DESIGN.md §1): one kernel
//! for the Standard, Optimised, Efficient and Super variants, with an optional causal mask and an
//! optional additive score bias `[T]`, `[T, T]` or `[H, T, T]` (a key-padding bias, a causal or
//! shifted-window mask, a relative-position bias: [`attention_masked`]).
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
//! `H_i = softmax(Q_i K_iᵀ · scale + mask) V_i`, `y = concat_i(H_i) W^O + b^O`. Super's W^A `[T, T]`
//! mixes tokens from the left and is applied once per layer, shared by all heads; in causal mode
//! only its lower triangle (including the diagonal) is read. Scores are computed a block of
//! queries at a time: all T of them up to [`ONE_BLOCK_MAX_T`] tokens (a `[T, T]` block of at most
//! 256 KiB), else [`QB`] (O(QB·T) memory, never T × T).

use crate::error::{expect_eq, ShapeError};
use crate::kernels::attention_q8::Q8Head;
use crate::kernels::linear::{matmul_nt, ProjW};
use crate::kernels::simd::softmax as softmax_in_place;
use crate::kernels::simd::{axpy as axpy_simd, dot_f32};
use kestrel_rt_format::ops::AttentionVariant;
use kestrel_rt_format::WeightView;

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
    /// int8 scores and weighted values (`Internals::Int8`, [`super::attention_q8`]) on the
    /// blocked path, for heads where they pay ([`super::attention_q8::pays`]), and the output
    /// projection's input in int8 where its weights are integer; the row-at-a-time path and the
    /// other heads stay f32.
    pub int8: bool,
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

/// [`check_dims`], and a finite score `scale`.
pub(crate) fn check_dims_scale(
    op: &'static str,
    t: usize,
    d: usize,
    heads: usize,
    scale: f32,
) -> Result<(), ShapeError> {
    check_dims(op, t, d, heads)?;
    if !scale.is_finite() {
        return Err(ShapeError::Invalid { op, what: "scale must be finite" });
    }
    Ok(())
}

/// The four projections of an AFT layer or a Fastformer layer, each with its bias: W^Q, W^K and
/// W^V from the input, and the output projection (W^O; Fastformer's W^R).
#[derive(Clone, Copy, Debug)]
pub struct Qkvo<'a> {
    /// W^Q `[d, d]` and bias.
    pub q: ProjW<'a>,
    /// W^K `[d, d]` and bias (`[h, d]` and `[h]` for AFT-conv: one key channel per head).
    pub k: ProjW<'a>,
    /// W^V `[d, d]` and bias.
    pub v: ProjW<'a>,
    /// W^O (Fastformer: W^R) `[d, d]` and bias.
    pub o: ProjW<'a>,
}

/// The weights of an AFT-full, AFT-local, AFT-conv or Fastformer layer: its four projections
/// and the mechanism's own weights `w` (what each holds: the layer's alias in `aft` or
/// `fastformer`).
#[derive(Clone, Copy, Debug)]
pub struct MechanismWeights<'a, W> {
    /// W^Q, W^K, W^V and W^O `[d, d]` with their biases (AFT-conv: W^K `[h, d]`).
    pub proj: Qkvo<'a>,
    /// The mechanism's position bias or scoring vectors.
    pub w: W,
}

impl Qkvo<'_> {
    /// Checks the projections in the order q, k, v, o: W^K `[kout, d]`, the others `[d, d]`.
    pub(crate) fn check(&self, op: &'static str, d: usize, kout: usize) -> Result<(), ShapeError> {
        self.q.check(op, d, d)?;
        self.k.check(op, kout, d)?;
        self.v.check(op, d, d)?;
        self.o.check(op, d, d)
    }

    /// Splits Q, K and V (`[T, d]` each, in that order) off the front of `scratch` and projects
    /// `x [T, d]` into them; returns them and the rest of `scratch`.
    pub(crate) fn project<'s>(
        &self,
        x: &[f32],
        t: usize,
        d: usize,
        scratch: &'s mut [f32],
    ) -> ([&'s mut [f32]; 3], &'s mut [f32]) {
        let (qb, rest) = scratch.split_at_mut(t * d);
        let (kb, rest) = rest.split_at_mut(t * d);
        let (vb, rest) = rest.split_at_mut(t * d);
        let x = &x[..t * d];
        self.q.apply(x, t, qb);
        self.k.apply(x, t, kb);
        self.v.apply(x, t, vb);
        ([qb, kb, vb], rest)
    }
}

pub use kestrel_rt_core::shapes::check_key_mask;

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
        self.variant.has_k()
    }

    fn has_v(&self) -> bool {
        self.variant.has_v()
    }

    fn is_super(&self) -> bool {
        self.variant.has_align()
    }

    /// Splits Q, the heads' output, K (where the variant has W^K) and V (where it has W^V or
    /// W^A), `n` elements each (empty where absent), off the front of `scratch`; returns them
    /// and the rest.
    fn split_qkv<'s>(&self, scratch: &'s mut [f32], n: usize) -> ([&'s mut [f32]; 4], &'s mut [f32]) {
        let (q, rest) = scratch.split_at_mut(n);
        let (heads_out, rest) = rest.split_at_mut(n);
        let (kbuf, rest) = rest.split_at_mut(if self.has_k() { n } else { 0 });
        let (vbuf, rest) = rest.split_at_mut(if self.has_v() || self.is_super() { n } else { 0 });
        ([q, heads_out, kbuf, vbuf], rest)
    }

    /// Checks every weight against the sizes and the variant.
    pub fn check(&self, w: &AttentionWeights<'_>) -> Result<(), ShapeError> {
        check_dims_scale(OP, self.t, self.d, self.heads, self.scale)?;
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

/// Query rows per block of the score products for long sequences: a `[QB, T]` score block
/// stays in L1/L2.
pub const QB: usize = 64;

/// Heads of at most this many columns over at most this many keys run from registers
/// ([`crate::kernels::simd::small_head`], where the CPU has AVX-512).
pub const SMALL_HEAD: usize = 16;

/// Up to this many tokens, all queries form one block (scores `[T, T]` ≤ 256 KiB, in L2): the
/// keys are packed and `V_hᵀ` built once per head instead of once per [`QB`] queries (CIFAR-100,
/// T = 144: three blocks of 64/64/16 become one).
pub const ONE_BLOCK_MAX_T: usize = 256;

/// Query rows per block the planner reserves scratch for (attention and AFT-full).
pub(crate) fn block_rows(t: usize) -> usize {
    if t <= ONE_BLOCK_MAX_T {
        t
    } else {
        QB
    }
}

/// f32 scratch elements [`attention`] needs for one sample at least (the row-at-a-time path,
/// O(T) scores). Files written before the blocked path reserve exactly this.
pub fn attention_scratch(p: &AttentionParams) -> usize {
    let td = p.t * p.d;
    let k = if p.has_k() { td } else { 0 };
    let v = if p.has_v() || p.is_super() { td } else { 0 };
    let a = if p.is_super() { p.t } else { 0 };
    2 * td + k + v + p.t + a
}

/// f32 scratch elements for [`attention`]'s blocked GEMM path (what the planner reserves; still
/// linear in T: scores are computed a block of [`QB`] queries at a time, never `T × T`, except
/// up to [`ONE_BLOCK_MAX_T`] tokens, where one block holds every query).
pub fn attention_scratch_fast(p: &AttentionParams) -> usize {
    attention_scratch_blocked(p, block_rows(p.t))
}

/// [`attention_scratch_fast`] for blocks of `qb` query rows (`QB` for files planned before
/// one-block attention; the kernel takes the largest block its scratch allows).
pub fn attention_scratch_blocked(p: &AttentionParams, qb: usize) -> usize {
    blocked_scratch(p, 1, qb)
}

/// Scratch of [`attention_groups`]: G sequences projected at once (`G·T` rows), one block of
/// every sequence's queries at a time.
pub fn attention_scratch_groups(p: &AttentionParams, groups: usize) -> usize {
    blocked_scratch(p, groups.max(1), block_rows(p.t))
}

fn blocked_scratch(p: &AttentionParams, groups: usize, qb: usize) -> usize {
    let td = p.t * p.d * groups;
    let k = if p.has_k() { td } else { 0 };
    let v = if p.has_v() || p.is_super() { td } else { 0 };
    let a = if p.is_super() { p.t + if p.causal { 0 } else { 2 * p.t * p.d } } else { 0 };
    let c = p.d / p.heads.max(1);
    let qb = qb.min(p.t);
    // V_hᵀ [c, T] and the scores [qb, T]; with several heads also the gathered K_h [T, c] and
    // the Q and O blocks [qb, c] (one head reads and writes [T, d] rows in place).
    let gathered = if p.heads > 1 { p.t * c + 2 * qb * c } else { 0 };
    let q8 = if p.int8 { super::attention_q8::scratch(p.t, c, qb) } else { 0 };
    let fast = 2 * td + k + v + a + c * p.t + gathered + qb * p.t + q8;
    fast.max(attention_scratch(p))
}

/// One sample without a key mask: [`attention_masked`] with `mask = None`.
pub fn attention(p: &AttentionParams, w: &AttentionWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    attention_masked(p, w, x, None, y, scratch);
}

/// The first `n` mask values of query `i` in head `h`: the `[T]` key mask itself, row `i` of a
/// `[T, T]` mask, or row `i` of head `h`'s block of an `[H, T, T]` mask (told apart by length:
/// `H·T·T` with H > 1 is per head, `T·T` with T > 1 per query).
#[inline]
fn mask_row<'m>(mask: Option<&'m [f32]>, p: &AttentionParams, h: usize, i: usize, n: usize) -> Option<&'m [f32]> {
    let t = p.t;
    mask.map(|m| {
        let row = if p.heads > 1 && m.len() == p.heads * t * t {
            (h * t + i) * t
        } else if m.len() >= t * t && t > 1 {
            i * t
        } else {
            0
        };
        &m[row..row + n]
    })
}

/// Scales a row of scores and adds the key mask (`row[j] = row[j]·scale + mask[j]`), then
/// softmaxes it in place. A row whose every score is −∞ (every key masked with −∞) gets zero
/// weights instead of 0/0; a finite bias such as f32::MIN on every key leaves equal scores,
/// so uniform weights (what PyTorch and onnxruntime compute for HF's masks).
#[inline]
pub(crate) fn masked_softmax(row: &mut [f32], scale: f32, mask: Option<&[f32]>) {
    match mask {
        // Scaled inside the softmax's passes.
        None => crate::kernels::simd::softmax_scaled(row, scale),
        Some(m) => {
            let mut mx = f32::NEG_INFINITY;
            for (v, &b) in row.iter_mut().zip(m) {
                *v = *v * scale + b;
                mx = mx.max(*v);
            }
            if mx == f32::NEG_INFINITY {
                row.fill(0.0);
            } else {
                softmax_in_place(row);
            }
        }
    }
}

/// One sample: `x [T, d] -> y [T, d]`, with an optional additive mask: T elements (`[T]`, one
/// bias per key, for every query), T·T (`[T, T]`, query-major, shared by every head) or H·T·T
/// (`[H, T, T]`, head-major: head h, query i reads `mask[(h·T + i)·T ..]`), added to the scaled
/// scores before the softmax (see [`masked_softmax`]). Requires `p.check(w)` to have passed
/// and `scratch.len() >= attention_scratch(p)`; `x` and `y` hold at least T·d elements.
///
/// With [`attention_scratch_fast`] elements of scratch (files planned by this version), the
/// blocked path: per head, the keys `K_h [T, c]` are gathered contiguous (with more than one
/// head); per block of [`QB`]
/// queries, the scores `S = Q_blk K_hᵀ · scale` and the outputs `S V_h` are two GEMMs through
/// the dense kernels (SIMD, any ISA), with the row softmax (and the causal mask) between them.
/// With less (older files), one query row at a time with SIMD dot products and axpys.
pub fn attention_masked(
    p: &AttentionParams,
    w: &AttentionWeights<'_>,
    x: &[f32],
    mask: Option<&[f32]>,
    y: &mut [f32],
    scratch: &mut [f32],
) {
    // The planned block size, or blocks of QB for files planned before one-block attention,
    // or (older still) one query row at a time.
    let Some(qb) =
        [block_rows(p.t), QB.min(p.t)].into_iter().find(|&qb| scratch.len() >= attention_scratch_blocked(p, qb))
    else {
        return attention_rowwise(p, w, x, mask, y, scratch);
    };
    blocked(p, w, 1, qb, x, (mask, false), y, scratch);
}

/// G independent sequences `x [G, T, d] -> y [G, T, d]` of the same weights (no mask): with
/// [`attention_scratch_groups`] elements of scratch, the projections run once over all G·T
/// rows (one weight pass instead of G); with less, one sequence at a time
/// ([`attention_masked`]).
pub fn attention_groups(
    p: &AttentionParams,
    w: &AttentionWeights<'_>,
    groups: usize,
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
) {
    attention_groups_masked(p, w, groups, x, None, y, scratch);
}

/// [`attention_groups`] with an additive mask: `(values, false)`, one every sequence shares (as
/// [`attention_masked`] takes it), or `(values, true)`, G equal blocks (`[G, 1, T, T]` or `[G,
/// H, T, T]`: sequence g reads block g, as [`attention_masked`] reads a `[T, T]` or `[H, T, T]`
/// mask).
pub fn attention_groups_masked(
    p: &AttentionParams,
    w: &AttentionWeights<'_>,
    groups: usize,
    x: &[f32],
    mask: Option<(&[f32], bool)>,
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let (values, per_group) = match mask {
        Some((m, pg)) => (Some(m), pg),
        None => (None, false),
    };
    if groups > 1 && scratch.len() >= attention_scratch_groups(p, groups) {
        return blocked(p, w, groups, block_rows(p.t), x, (values, per_group), y, scratch);
    }
    let td = p.t * p.d;
    for (g, (x, y)) in x.chunks_exact(td).zip(y.chunks_exact_mut(td)).take(groups).enumerate() {
        attention_masked(p, w, x, group_mask(values, per_group, groups, g), y, scratch);
    }
}

/// Sequence g's mask: the shared one, or block g of G.
#[inline]
fn group_mask(mask: Option<&[f32]>, per_group: bool, groups: usize, g: usize) -> Option<&[f32]> {
    match mask {
        Some(m) if per_group && groups > 0 => {
            let n = m.len() / groups;
            Some(&m[g * n..(g + 1) * n])
        }
        m => m,
    }
}

/// The blocked path over `groups` sequences; `mask`: shared, or (`true`) one block per sequence.
#[allow(clippy::too_many_arguments)]
fn blocked(
    p: &AttentionParams,
    w: &AttentionWeights<'_>,
    groups: usize,
    qb: usize,
    x: &[f32],
    (all_masks, per_group): (Option<&[f32]>, bool),
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let (t, d) = (p.t, p.d);
    let td = t * d;
    let rows = groups * t;
    let all = groups * td;
    let c = d / p.heads;
    let ([q, heads_out, kbuf, vbuf], rest) = p.split_qkv(scratch, all);
    let (abuf, rest) = rest.split_at_mut(if p.is_super() { t + if p.causal { 0 } else { 2 * td } } else { 0 });
    let one = p.heads == 1;
    let (kh, rest) = rest.split_at_mut(if one { 0 } else { t * c });
    let (vt, rest) = rest.split_at_mut(c * t);
    let (qblk, rest) = rest.split_at_mut(if one { 0 } else { qb * c });
    let (oblk, rest) = rest.split_at_mut(if one { 0 } else { qb * c });
    let (sblk, q8buf) = rest.split_at_mut(qb * t);
    let mut q8 = p.int8.then(|| Q8Head::new(q8buf, t, c, qb));

    // Super with one head, one sequence, not causal: V_hᵀ is `W^A`'s product itself (`vᵀ =
    // xᵀ W^Aᵀ`, plus b^A per token), written straight into `vt` instead of transposed to `v`
    // by `align_tokens` and back by the block loop.
    let direct_vt = match &w.align {
        Some(a) if one && groups == 1 && !p.causal && w.v.is_none() && abuf.len() >= t * d + t => Some(a),
        _ => None,
    };
    let (keys_all, values_all) = match direct_vt {
        Some(a) => {
            let keys = project_qk(p, w, rows, x, q, kbuf);
            align_tokens_t(a, x, t, d, &mut vt[..td], abuf);
            (keys, &[][..])
        }
        None => project(p, w, rows, x, q, kbuf, vbuf, abuf),
    };

    for g in 0..groups {
        let mask = group_mask(all_masks, per_group, groups, g);
        let keys = &keys_all[g * td..(g + 1) * td];
        let values = if direct_vt.is_some() { &[][..] } else { &values_all[g * td..(g + 1) * td] };
        let q = &q[g * td..(g + 1) * td];
        let heads_out = &mut heads_out[g * td..(g + 1) * td];
        for h in 0..p.heads {
            let col = h * c;
            // Narrow heads over few keys (MobileViT: c = 8, T = 16): scores, softmax and output
            // from registers, no GEMM (whose packing dominates such tiny products). K_hᵀ goes in
            // `vt`; queries, values and outputs are read and written in place at stride d.
            if t <= SMALL_HEAD
                && c <= SMALL_HEAD
                && mask.is_none()
                && direct_vt.is_none()
                && crate::kernels::simd::small_head_available()
            {
                for (j, kr) in keys.chunks_exact(d).take(t).enumerate() {
                    for (u, &kv) in kr[col..col + c].iter().enumerate() {
                        vt[u * t + j] = kv;
                    }
                }
                let done = crate::kernels::simd::small_head(
                    (&q[col..], d),
                    (&vt[..c * t], t),
                    (&values[col..], d),
                    (&mut heads_out[col..], d),
                    (t, c, t),
                    (0, p.causal, p.scale),
                );
                if done {
                    continue;
                }
            }
            // K_h [T, c] contiguous: the keys themselves with one head.
            if !one {
                for (j, kr) in kh.chunks_exact_mut(c).enumerate() {
                    kr.copy_from_slice(&keys[j * d + col..j * d + col + c]);
                }
            }
            let kh: &[f32] = if one { &keys[..td] } else { kh };
            // int8 internals for this head (where they pay: `attention_q8::pays`): keys
            // quantised once (a scale per key, so a causal block reads the first n of them),
            // values with V_hᵀ.
            let q8_keys = crate::kernels::attention_q8::pays(t, c) && q8.as_mut().is_some_and(|q| q.keys(kh, t));
            let mut q8_values = false;
            let mut i0 = 0;
            while i0 < t {
                let i1 = (i0 + qb).min(t);
                let nb = i1 - i0;
                // Keys this block can see: all, or (causal) up to its last query.
                let n = if p.causal { i1 } else { t };
                if !one {
                    for (r, qr) in qblk[..nb * c].chunks_exact_mut(c).enumerate() {
                        qr.copy_from_slice(&q[(i0 + r) * d + col..(i0 + r) * d + col + c]);
                    }
                }
                let qrows: &[f32] = if one { &q[i0 * d..i1 * d] } else { &qblk[..nb * c] };
                // V_hᵀ [c, n] for this block's keys (built once per head when every block sees all
                // T keys).
                if p.causal || i0 == 0 {
                    if direct_vt.is_none() {
                        crate::kernels::simd::transpose_f32(&values[col..], n, c, d, &mut vt[..c * n], n);
                    }
                    q8_values = q8_keys && q8.as_mut().is_some_and(|q| q.values_t(&vt[..c * n], n));
                }
                let s = &mut sblk[..nb * n];
                let int8 = q8_values && q8.as_ref().is_some_and(|q| q.scores(qrows, nb, n, s));
                if !int8 {
                    let kv = WeightView::f32(n, c, &kh[..n * c]).expect("K_h view: n·c elements");
                    matmul_nt(qrows, nb, &kv, s);
                }
                for (r, row) in s.chunks_exact_mut(n).enumerate() {
                    let m = if p.causal { i0 + r + 1 } else { n };
                    masked_softmax(&mut row[..m], p.scale, mask_row(mask, p, h, i0 + r, m));
                    row[m..].fill(0.0);
                }
                let o = if one { &mut heads_out[i0 * d..i1 * d] } else { &mut oblk[..nb * c] };
                match q8.as_mut() {
                    Some(q) if int8 => q.weighted_values(s, nb, n, o),
                    _ => {
                        let vv = WeightView::f32(c, n, &vt[..c * n]).expect("V_hᵀ view: c·n elements");
                        matmul_nt(s, nb, &vv, o);
                    }
                }
                if !one {
                    for (r, orow) in oblk[..nb * c].chunks_exact(c).enumerate() {
                        heads_out[(i0 + r) * d + col..(i0 + r) * d + col + c].copy_from_slice(orow);
                    }
                }
                i0 = i1;
            }
        }
    }
    // int8 internals: the output projection reads the heads' outputs quantised at one scale
    // taken now (`max|O| / 127`) where its weights are integer (an all-zero or non-finite O
    // stays f32).
    let o_scale = if p.int8 && w.o.w.is_integer() {
        crate::kernels::simd::abs_max(&heads_out[..all]).filter(|&a| a > 0.0).map(|a| a / 127.0)
    } else {
        None
    };
    match o_scale {
        Some(s) => ProjW { act_scale: Some(s), ..w.o }.apply(heads_out, rows, &mut y[..all]),
        None => w.o.apply(heads_out, rows, &mut y[..all]),
    }
}

/// [`attention`] one query row at a time (O(T) scores, [`attention_scratch`] elements).
fn attention_rowwise(
    p: &AttentionParams,
    w: &AttentionWeights<'_>,
    x: &[f32],
    mask: Option<&[f32]>,
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let (t, d) = (p.t, p.d);
    let td = t * d;
    let ([q, heads_out, kbuf, vbuf], rest) = p.split_qkv(scratch, td);
    let (scores, rest) = rest.split_at_mut(t);
    let arow = &mut rest[..if p.is_super() { t } else { 0 }];

    let (keys, values) = project(p, w, t, x, q, kbuf, vbuf, arow);

    let c = d / p.heads;
    for i in 0..t {
        let n = if p.causal { i + 1 } else { t };
        let s = &mut scores[..n];
        for h in 0..p.heads {
            let col = h * c;
            let qi = &q[i * d + col..i * d + col + c];
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = dot_f32(qi, &keys[j * d + col..j * d + col + c]);
            }
            masked_softmax(s, p.scale, mask_row(mask, p, h, i, n));
            let out = &mut heads_out[i * d + col..i * d + col + c];
            out.fill(0.0);
            for (j, &a) in s.iter().enumerate() {
                axpy(out, a, &values[j * d + col..j * d + col + c]);
            }
        }
    }
    w.o.apply(heads_out, t, &mut y[..td]);
}

/// The projections both paths start with: `q = X W^Q + b` into `q`, and the keys and values
/// the variant uses (projected into `kbuf` / `vbuf`, token-mixed for Super with `abuf` as
/// [`align_tokens`]' buffer, or `x` itself).
#[allow(clippy::too_many_arguments)]
fn project<'s>(
    p: &AttentionParams,
    w: &AttentionWeights<'_>,
    rows: usize,
    x: &'s [f32],
    q: &mut [f32],
    kbuf: &'s mut [f32],
    vbuf: &'s mut [f32],
    abuf: &mut [f32],
) -> (&'s [f32], &'s [f32]) {
    // `rows` = G·T: every sequence's rows at once; Super's token mixing per sequence.
    let (t, d) = (p.t, p.d);
    let n = rows * d;
    let keys = project_qk(p, w, rows, x, q, kbuf);
    let values: &[f32] = match (&w.v, &w.align) {
        (Some(v), _) => {
            v.apply(&x[..n], rows, vbuf);
            vbuf
        }
        (None, Some(a)) => {
            for (xs, vs) in x[..n].chunks_exact(t * d).zip(vbuf.chunks_exact_mut(t * d)) {
                align_tokens(a, p.causal, xs, t, d, vs, abuf);
            }
            vbuf
        }
        (None, None) => &x[..n],
    };
    (keys, values)
}

/// [`project`]'s queries (into `q`) and keys (projected into `kbuf`, or `x` itself).
fn project_qk<'s>(
    p: &AttentionParams,
    w: &AttentionWeights<'_>,
    rows: usize,
    x: &'s [f32],
    q: &mut [f32],
    kbuf: &'s mut [f32],
) -> &'s [f32] {
    let n = rows * p.d;
    w.q.apply(&x[..n], rows, q);
    match &w.k {
        Some(k) => {
            k.apply(&x[..n], rows, kbuf);
            kbuf
        }
        None => &x[..n],
    }
}

/// `v = W^A x + b^A` (token mixing). Non-causal with `buf` of `2·T·d + T` f32 (what the planner
/// reserves): [`align_tokens_t`] into `buf`, transposed back. Otherwise one row of W^A at a time (`buf`
/// holds T); causal reads only `W^A[i, j]` with `j ≤ i`.
fn align_tokens(a: &ProjW<'_>, causal: bool, x: &[f32], t: usize, d: usize, v: &mut [f32], buf: &mut [f32]) {
    if !causal && buf.len() >= 2 * t * d + t {
        let (vt, rest) = buf.split_at_mut(t * d);
        align_tokens_t(a, x, t, d, vt, rest);
        crate::kernels::simd::transpose_f32(vt, d, t, t, &mut v[..t * d], d);
        return;
    }
    for i in 0..t {
        let row = a.w.row(i, buf);
        let out = &mut v[i * d..(i + 1) * d];
        out.fill(a.b.map_or(0.0, |b| b.get(0, i)));
        let n = if causal { i + 1 } else { t };
        for (j, &aij) in row[..n].iter().enumerate() {
            axpy(out, aij, &x[j * d..(j + 1) * d]);
        }
    }
}

/// Non-causal token mixing transposed: `vt [d, T] = xᵀ W^Aᵀ` plus `b^A[i]` on token `i`'s
/// column, by one GEMM over `xᵀ` (in `buf`, with `b^A` decoded after it: `T·d + T` elements).
fn align_tokens_t(a: &ProjW<'_>, x: &[f32], t: usize, d: usize, vt: &mut [f32], buf: &mut [f32]) {
    let (xt, bias) = buf.split_at_mut(t * d);
    transpose_into(&x[..t * d], t, d, xt);
    matmul_nt(xt, d, &a.w, &mut vt[..t * d]);
    if let Some(b) = a.b {
        let bias = &mut bias[..t];
        b.decode_into(bias);
        for vr in vt[..t * d].chunks_exact_mut(t) {
            for (v, &bi) in vr.iter_mut().zip(&*bias) {
                *v += bi;
            }
        }
    }
}

/// `dst [cols, rows] = srcᵀ` for `src [rows, cols]`.
pub(crate) fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    crate::kernels::simd::transpose_f32(src, rows, cols, cols, dst, rows);
}
