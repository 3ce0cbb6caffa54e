//! Attention Free Transformer mechanisms (DESIGN.md §2): AFT-full, AFT-local, AFT-simple and
//! AFT-conv, each fused with its Q/K/V projections and the output projection W^O.
//!
//! All four compute `Y_t = σ(Q_t) ⊙ Σ_t' exp(K_t' + w_tt') ⊙ V_t' / Σ_t' exp(K_t' + w_tt')`
//! with a different position bias w, then `y = Y W^Oᵀ + b^O`. Keys enter as
//! `E = exp(K − max_t' K)` (per channel; the ratio is unchanged, and K ≈ 100 cannot overflow)
//! and biases as `exp(w − M)` with M the largest bias that row (or head kernel) uses.
//!
//! * AFT-full: `num = exp(w)(E ⊙ V)`, `den = exp(w) E`, one bias row at a time: memory O(T·d).
//! * AFT-local and AFT-conv: w is zero outside a window, so `exp(w) = 1 + (exp(w) − 1)`: global
//!   sums over all t' plus a banded (or s×s neighbourhood) correction with `exp(w) − 1`.
//! * AFT-simple: `w = 0`, a per-channel softmax over t'.
//!
//! Causal mode (full, local, simple) sums over `t' ≤ t` only. Limitation of the shared per-channel
//! key maximum in causal full/local: a channel whose keys rise by more than ~80 after token t
//! underflows token t's sums (AFT-simple uses a running maximum and has no such limit).

use crate::error::{expect_eq, ShapeError};
use crate::kernels::attention::{axpy, check_dims};
use crate::kernels::attention::{block_rows, transpose_into};
pub use crate::kernels::attention::{MechanismWeights, Qkvo};
use crate::kernels::linear::matmul_nt;
use crate::kernels::simd;
use crate::math::{exp, exp_excess};
use kestrel_rt_format::WeightView;

/// Sizes and flags every AFT variant over a token sequence shares (full, local, simple).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AftShape {
    /// Tokens T.
    pub t: usize,
    /// Features d.
    pub d: usize,
    /// Sum over t' ≤ t only.
    pub causal: bool,
}

/// Sizes and flags of an AFT-full layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AftFullParams {
    /// Tokens, features, causal.
    pub shape: AftShape,
    /// 0 for a full `[T, T]` bias; r for a factorised bias with u, v `[T, r]`.
    pub rank: usize,
}

/// AFT-full's pairwise position bias w.
#[derive(Clone, Copy, Debug)]
pub enum AftBiasW<'a> {
    /// Full `[T, T]` matrix.
    Full(WeightView<'a>),
    /// w = u vᵀ.
    Factorised {
        /// u `[T, r]`.
        u: WeightView<'a>,
        /// v `[T, r]`.
        v: WeightView<'a>,
    },
}

/// The weights of an AFT-full layer: the projections and the position bias.
pub type AftFullWeights<'a> = MechanismWeights<'a, AftBiasW<'a>>;

/// Sizes and flags of an AFT-local layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AftLocalParams {
    /// Tokens, features, causal.
    pub shape: AftShape,
    /// Window s ≥ 1: w_tt' is used where |t − t'| < s and is 0 elsewhere.
    pub window: usize,
}

/// The weights of an AFT-local layer: the projections and w `[T, T]`, or its band
/// `[T, 2s − 1]` (only |t − t'| < s is read).
pub type AftLocalWeights<'a> = MechanismWeights<'a, WeightView<'a>>;

/// Sizes and flags of an AFT-simple layer: the shared ones alone.
pub type AftSimpleParams = AftShape;

/// The weights of an AFT-simple layer: its four projections.
pub type AftSimpleWeights<'a> = Qkvo<'a>;

/// Sizes of an AFT-conv layer on a `grid_h × grid_w` token grid (row-major, T = grid_h·grid_w).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AftConvParams {
    /// Tokens T = grid_h · grid_w.
    pub t: usize,
    /// Features d.
    pub d: usize,
    /// Heads h ≥ 1, dividing d (one key channel per head).
    pub heads: usize,
    /// Odd kernel size s.
    pub kernel: usize,
    /// Grid rows.
    pub grid_h: usize,
    /// Grid columns.
    pub grid_w: usize,
}

/// The weights of an AFT-conv layer: the projections (W^K `[h, d]`, one key channel per head)
/// and w `[h, s, s]` viewed as `[h, s·s]`; as a PyTorch (cross-correlation) kernel, tap `(a, b)`
/// links token `(y, x)` to `(y + a − s/2, x + b − s/2)`.
pub type AftConvWeights<'a> = MechanismWeights<'a, WeightView<'a>>;

impl AftShape {
    /// Checks every weight of an AFT-simple layer against the sizes.
    pub fn check(&self, w: &AftSimpleWeights<'_>) -> Result<(), ShapeError> {
        self.check_proj("aft_simple", w)
    }

    /// T ≥ 1, d ≥ 1 and the four projections `[d, d]`, as `op`.
    fn check_proj(&self, op: &'static str, proj: &Qkvo<'_>) -> Result<(), ShapeError> {
        check_dims(op, self.t, self.d, 1)?;
        proj.check(op, self.d, self.d)
    }
}

impl AftFullParams {
    /// Checks every weight against the sizes.
    pub fn check(&self, w: &AftFullWeights<'_>) -> Result<(), ShapeError> {
        const OP: &str = "aft_full";
        self.shape.check_proj(OP, &w.proj)?;
        let t = self.shape.t;
        match &w.w {
            AftBiasW::Full(b) => {
                expect_eq(OP, "rank (0 for a full bias)", 0, self.rank)?;
                expect_eq(OP, "w rows", t, b.rows())?;
                expect_eq(OP, "w cols", t, b.cols())
            }
            AftBiasW::Factorised { u, v } => {
                if self.rank == 0 {
                    return Err(ShapeError::Invalid { op: OP, what: "factorised bias needs rank ≥ 1" });
                }
                expect_eq(OP, "u rows", t, u.rows())?;
                expect_eq(OP, "u cols (rank)", self.rank, u.cols())?;
                expect_eq(OP, "v rows", t, v.rows())?;
                expect_eq(OP, "v cols (rank)", self.rank, v.cols())
            }
        }
    }
}

impl AftLocalParams {
    /// Checks every weight against the sizes.
    pub fn check(&self, w: &AftLocalWeights<'_>) -> Result<(), ShapeError> {
        const OP: &str = "aft_local";
        let AftShape { t, d, .. } = self.shape;
        check_dims(OP, t, d, 1)?;
        if self.window == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "window must be at least 1" });
        }
        w.proj.check(OP, d, d)?;
        expect_eq(OP, "w rows", t, w.w.rows())?;
        match kestrel_rt_format::ops::AftLocal::is_band(t, self.window, w.w.cols()) {
            Some(_) => Ok(()),
            None => Err(ShapeError::Invalid { op: OP, what: "w must be [T, T] or its band [T, 2s - 1] (2s - 1 < T)" }),
        }
    }

    fn band(&self) -> usize {
        kestrel_rt_format::ops::AftLocal::w_cols(self.shape.t, self.window)
    }
}

impl AftConvParams {
    /// Checks every weight against the sizes.
    pub fn check(&self, w: &AftConvWeights<'_>) -> Result<(), ShapeError> {
        const OP: &str = "aft_conv";
        check_dims(OP, self.t, self.d, self.heads)?;
        let cells = self.grid_h.checked_mul(self.grid_w);
        expect_eq(OP, "T (grid_h · grid_w)", cells.unwrap_or(usize::MAX), self.t)?;
        if self.kernel.is_multiple_of(2) || self.kernel.checked_mul(self.kernel).is_none() {
            return Err(ShapeError::Invalid { op: OP, what: "kernel size must be odd (and its square fit in usize)" });
        }
        w.proj.check(OP, self.d, self.heads)?;
        expect_eq(OP, "w rows (heads)", self.heads, w.w.rows())?;
        expect_eq(OP, "w cols (kernel²)", self.kernel * self.kernel, w.w.cols())
    }
}

/// f32 scratch elements [`aft_full`] needs for one sample.
pub fn aft_full_scratch(p: &AftFullParams) -> usize {
    let AftShape { t, d, .. } = p.shape;
    3 * t * d + t + 2 * d + t.max(p.rank)
}

/// f32 scratch elements for [`aft_full`]'s blocked GEMM path (what the planner reserves): a
/// block of queries' weights `[qb, T]` (all queries up to T = 256, else 64: linear in T), the
/// transposed `e^K` and `e^K ⊙ V`, and the block's numerators and denominators.
pub fn aft_full_scratch_fast(p: &AftFullParams) -> usize {
    let AftShape { t, d, .. } = p.shape;
    let qb = block_rows(t);
    (4 * t * d + qb * t + 2 * qb * d + qb * p.rank.max(1) + t.max(p.rank)).max(aft_full_scratch(p))
}

/// f32 scratch elements [`aft_local`] needs for one sample.
pub fn aft_local_scratch(p: &AftLocalParams) -> usize {
    let AftShape { t, d, .. } = p.shape;
    3 * t * d + 4 * d + p.band()
}

/// f32 scratch elements [`aft_simple`] needs for one sample.
pub fn aft_simple_scratch(p: &AftSimpleParams) -> usize {
    3 * p.t * p.d + 3 * p.d
}

/// f32 scratch elements [`aft_conv`] needs for one sample.
pub fn aft_conv_scratch(p: &AftConvParams) -> usize {
    let taps = p.kernel * p.kernel;
    2 * p.t * p.d + p.t * p.heads + p.heads * taps + taps + 2 * p.d + 3 * p.heads
}

/// Replaces each column of `k [rows, cols]` by `exp(k − max over rows)`; `m` is `[cols]` scratch.
fn exp_keys(k: &mut [f32], cols: usize, m: &mut [f32]) {
    m.fill(f32::NEG_INFINITY);
    for row in k.chunks_exact(cols) {
        for (m, &v) in m.iter_mut().zip(row) {
            *m = m.max(v);
        }
    }
    for row in k.chunks_exact_mut(cols) {
        simd::exp_sub_each(row, m);
    }
}

/// `q ← σ(q) ⊙ num / den`.
#[inline]
fn gate(q: &mut [f32], num: &[f32], den: &[f32]) {
    simd::sigmoid_gate(q, num, Some(den), 1.0);
}

/// Turns the projected K into `E = exp(K − max)` and V into `E ⊙ V` (same-width keys; `m`:
/// scratch of `d`).
fn exp_values(kb: &mut [f32], vb: &mut [f32], d: usize, m: &mut [f32]) {
    exp_keys(kb, d, m);
    for (v, &e) in vb.iter_mut().zip(kb.iter()) {
        *v *= e;
    }
}

/// AFT-full, one sample: `x [T, d] -> y [T, d]`. Requires `p.check(w)` to have passed and
/// `scratch.len() >= aft_full_scratch(p)`; `x` and `y` hold at least T·d elements.
///
/// With [`aft_full_scratch_fast`] elements (files planned by this version), a block of queries
/// at a time: their position weights `E_blk = exp(w − row max)` (masked when causal), then
/// `num = E_blk · (e^K ⊙ V)` and `den = E_blk · e^K` as two GEMMs through the dense kernels.
/// With less, one query row at a time with axpys.
pub fn aft_full(p: &AftFullParams, w: &AftFullWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    if scratch.len() >= aft_full_scratch_fast(p) {
        return aft_full_blocked(p, w, x, y, scratch);
    }
    let AftShape { t, d, causal } = p.shape;
    let ([qb, e, ev], rest) = w.proj.project(x, t, d, scratch);
    let (ew, rest) = rest.split_at_mut(t);
    let (num, rest) = rest.split_at_mut(d);
    let (den, rest) = rest.split_at_mut(d);
    let wbuf = &mut rest[..t.max(p.rank)];
    exp_values(e, ev, d, num);

    for i in 0..t {
        let n = if causal { i + 1 } else { t };
        let ew = &mut ew[..n];
        match &w.w {
            AftBiasW::Full(b) => ew.copy_from_slice(&b.row(i, wbuf)[..n]),
            AftBiasW::Factorised { u, v } => {
                let ui = u.row(i, wbuf);
                for (j, wj) in ew.iter_mut().enumerate() {
                    *wj = v.dot_row(j, ui);
                }
            }
        }
        let mw = ew.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        simd::exp_sub(ew, mw);
        num.fill(0.0);
        den.fill(0.0);
        simd::axpy_rows(num, ew, &ev[..n * d]);
        simd::axpy_rows(den, ew, &e[..n * d]);
        gate(&mut qb[i * d..(i + 1) * d], num, den);
    }
    w.proj.o.apply(qb, t, &mut y[..t * d]);
}

/// [`aft_full`]'s blocked path (`scratch.len() >= aft_full_scratch_fast(p)`).
fn aft_full_blocked(p: &AftFullParams, w: &AftFullWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (AftShape { t, d, causal }, rank) = (p.shape, p.rank);
    let qb = block_rows(t);
    let ([qbuf, e, ev], rest) = w.proj.project(x, t, d, scratch);
    let (et, rest) = rest.split_at_mut(t * d);
    let (eb, rest) = rest.split_at_mut(qb * t);
    let (numb, rest) = rest.split_at_mut(qb * d);
    let (denb, rest) = rest.split_at_mut(qb * d);
    let (ub, rest) = rest.split_at_mut(qb * rank.max(1));
    let wbuf = &mut rest[..t.max(rank)];
    exp_values(e, ev, d, &mut numb[..d]);
    // e^Kᵀ and (e^K ⊙ V)ᵀ [d, T]: the GEMMs' weight operands (the latter reuses e's space).
    transpose_into(e, t, d, et);
    transpose_into(ev, t, d, e);
    let evt = WeightView::f32(d, t, e).expect("(e^K ⊙ V)ᵀ view: d·T elements");
    let ekt = WeightView::f32(d, t, et).expect("e^Kᵀ view: d·T elements");
    let mut i0 = 0;
    while i0 < t {
        let i1 = (i0 + qb).min(t);
        let nb = i1 - i0;
        let eblk = &mut eb[..nb * t];
        match &w.w {
            AftBiasW::Full(b) => {
                for (r, row) in eblk.chunks_exact_mut(t).enumerate() {
                    row.copy_from_slice(&b.row(i0 + r, wbuf)[..t]);
                }
            }
            AftBiasW::Factorised { u, v } => {
                // w_blk = u_blk vᵀ.
                for (r, ur) in ub[..nb * rank].chunks_exact_mut(rank.max(1)).enumerate() {
                    ur.copy_from_slice(&u.row(i0 + r, wbuf)[..rank]);
                }
                matmul_nt(&ub[..nb * rank], nb, v, eblk);
            }
        }
        for (r, row) in eblk.chunks_exact_mut(t).enumerate() {
            // Keys this query sees: all, or (causal) up to itself; the rest weigh exactly 0.
            let n = if causal { i0 + r + 1 } else { t };
            let m = row[..n].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            simd::exp_sub(&mut row[..n], m);
            row[n..].fill(0.0);
        }
        matmul_nt(eblk, nb, &evt, &mut numb[..nb * d]);
        matmul_nt(eblk, nb, &ekt, &mut denb[..nb * d]);
        gate(&mut qbuf[i0 * d..i1 * d], &numb[..nb * d], &denb[..nb * d]);
        i0 = i1;
    }
    w.proj.o.apply(qbuf, t, &mut y[..t * d]);
}

/// AFT-local, one sample: `x [T, d] -> y [T, d]`. Requires `p.check(w)` to have passed and
/// `scratch.len() >= aft_local_scratch(p)`; `x` and `y` hold at least T·d elements.
pub fn aft_local(p: &AftLocalParams, w: &AftLocalWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (AftShape { t, d, causal }, s) = (p.shape, p.window);
    let ([qb, e, ev], rest) = w.proj.project(x, t, d, scratch);
    let (sum_ev, rest) = rest.split_at_mut(d);
    let (sum_e, rest) = rest.split_at_mut(d);
    let (num, rest) = rest.split_at_mut(d);
    let (den, rest) = rest.split_at_mut(d);
    let band = &mut rest[..p.band()];
    exp_values(e, ev, d, num);
    // w stored as its band: key j of row i is column j + (s − 1) − i.
    let banded = w.w.cols() != t;

    sum_ev.fill(0.0);
    sum_e.fill(0.0);
    if !causal {
        for (evj, ej) in ev.chunks_exact(d).zip(e.chunks_exact(d)) {
            axpy(sum_ev, 1.0, evj);
            axpy(sum_e, 1.0, ej);
        }
    }
    for i in 0..t {
        if causal {
            axpy(sum_ev, 1.0, &ev[i * d..(i + 1) * d]);
            axpy(sum_e, 1.0, &e[i * d..(i + 1) * d]);
        }
        let lo = i.saturating_sub(s - 1);
        let hi = if causal { i } else { i.saturating_add(s - 1).min(t - 1) };
        let n = hi - lo + 1;
        let band = if banded {
            // The stored band row, decoded whole (2s − 1 values); key lo is column lo + s − 1 − i.
            w.w.decode_row(i, &mut band[..w.w.cols()]);
            let c0 = lo + (s - 1) - i;
            &mut band[c0..c0 + n]
        } else {
            // A full [T, T] w (files before band storage): the window's values one by one.
            for (j, b) in band[..n].iter_mut().enumerate() {
                *b = w.w.get(i, lo + j);
            }
            &mut band[..n]
        };
        // w is 0 outside the band, so the row's largest bias is at least 0.
        let m = band.iter().fold(0.0f32, |m, &v| m.max(v));
        let g = exp(-m);
        for (((n, dn), &se), &sv) in num.iter_mut().zip(den.iter_mut()).zip(&*sum_e).zip(&*sum_ev) {
            *n = g * sv;
            *dn = g * se;
        }
        simd::exp_excess(band, m);
        simd::axpy_rows(num, band, &ev[lo * d..(hi + 1) * d]);
        simd::axpy_rows(den, band, &e[lo * d..(hi + 1) * d]);
        gate(&mut qb[i * d..(i + 1) * d], num, den);
    }
    w.proj.o.apply(qb, t, &mut y[..t * d]);
}

/// AFT-simple, one sample: `x [T, d] -> y [T, d]`. Requires `p.check(w)` to have passed and
/// `scratch.len() >= aft_simple_scratch(p)`; `x` and `y` hold at least T·d elements.
pub fn aft_simple(p: &AftSimpleParams, w: &AftSimpleWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (t, d) = (p.t, p.d);
    let ([qb, kb, vb], rest) = w.project(x, t, d, scratch);
    let (num, rest) = rest.split_at_mut(d);
    let (den, rest) = rest.split_at_mut(d);
    let m = &mut rest[..d];
    num.fill(0.0);
    den.fill(0.0);
    if p.causal {
        // Running per-channel maximum: prefix sums are rescaled when the maximum grows.
        m.fill(f32::NEG_INFINITY);
        for i in 0..t {
            let r = i * d..(i + 1) * d;
            for c in 0..d {
                let (kc, vc) = (kb[r.start + c], vb[r.start + c]);
                if kc > m[c] {
                    let f = exp(m[c] - kc);
                    num[c] *= f;
                    den[c] *= f;
                    m[c] = kc;
                }
                let a = exp(kc - m[c]);
                num[c] += a * vc;
                den[c] += a;
            }
            gate(&mut qb[r], num, den);
        }
    } else {
        exp_keys(kb, d, m);
        for (kj, vj) in kb.chunks_exact(d).zip(vb.chunks_exact(d)) {
            for c in 0..d {
                num[c] += kj[c] * vj[c];
                den[c] += kj[c];
            }
        }
        for qi in qb.chunks_exact_mut(d) {
            gate(qi, num, den);
        }
    }
    w.o.apply(qb, t, &mut y[..t * d]);
}

/// AFT-conv, one sample: `x [T, d] -> y [T, d]` with tokens on a row-major
/// `grid_h × grid_w` grid. Requires `p.check(w)` to have passed and
/// `scratch.len() >= aft_conv_scratch(p)`; `x` and `y` hold at least T·d elements.
pub fn aft_conv(p: &AftConvParams, w: &AftConvWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (t, d, h, s) = (p.t, p.d, p.heads, p.kernel);
    let (c, taps, half) = (d / h, s * s, s / 2);
    let (qb, rest) = scratch.split_at_mut(t * d);
    let (e, rest) = rest.split_at_mut(t * h);
    let (ev, rest) = rest.split_at_mut(t * d);
    let (kappa, rest) = rest.split_at_mut(h * taps);
    let (wrow, rest) = rest.split_at_mut(taps);
    let (sum_ev, rest) = rest.split_at_mut(d);
    let (num, rest) = rest.split_at_mut(d);
    let (sum_e, rest) = rest.split_at_mut(h);
    let (den, rest) = rest.split_at_mut(h);
    let g = &mut rest[..h];

    let xs = &x[..t * d];
    w.proj.q.apply(xs, t, qb);
    w.proj.k.apply(xs, t, e);
    w.proj.v.apply(xs, t, ev);
    exp_keys(e, h, den);
    for (evj, ej) in ev.chunks_exact_mut(d).zip(e.chunks_exact(h)) {
        for (evh, &eh) in evj.chunks_exact_mut(c).zip(ej) {
            evh.iter_mut().for_each(|v| *v *= eh);
        }
    }
    sum_ev.fill(0.0);
    sum_e.fill(0.0);
    for (evj, ej) in ev.chunks_exact(d).zip(e.chunks_exact(h)) {
        axpy(sum_ev, 1.0, evj);
        axpy(sum_e, 1.0, ej);
    }
    // Per head: exp(w − M) − exp(−M) on the taps, exp(−M) on the global sums, M = max(w, 0).
    for i in 0..h {
        let wi = w.w.row(i, wrow);
        let m = wi.iter().fold(0.0f32, |m, &v| m.max(v));
        g[i] = exp(-m);
        for (k, &wv) in kappa[i * taps..(i + 1) * taps].iter_mut().zip(wi) {
            *k = exp_excess(wv, m);
        }
    }

    for yy in 0..p.grid_h {
        for xx in 0..p.grid_w {
            let ti = yy * p.grid_w + xx;
            for i in 0..h {
                den[i] = g[i] * sum_e[i];
                for (n, &sv) in num[i * c..(i + 1) * c].iter_mut().zip(&sum_ev[i * c..(i + 1) * c]) {
                    *n = g[i] * sv;
                }
            }
            for a in 0..s {
                let Some(ny) = (yy + a).checked_sub(half).filter(|&v| v < p.grid_h) else {
                    continue;
                };
                for b in 0..s {
                    let Some(nx) = (xx + b).checked_sub(half).filter(|&v| v < p.grid_w) else {
                        continue;
                    };
                    let tj = ny * p.grid_w + nx;
                    for i in 0..h {
                        let k = kappa[i * taps + a * s + b];
                        den[i] += k * e[tj * h + i];
                        axpy(&mut num[i * c..(i + 1) * c], k, &ev[tj * d + i * c..tj * d + (i + 1) * c]);
                    }
                }
            }
            let qi = &mut qb[ti * d..(ti + 1) * d];
            for i in 0..h {
                simd::sigmoid_gate(&mut qi[i * c..(i + 1) * c], &num[i * c..(i + 1) * c], None, 1.0 / den[i]);
            }
        }
    }
    w.proj.o.apply(qb, t, &mut y[..t * d]);
}
