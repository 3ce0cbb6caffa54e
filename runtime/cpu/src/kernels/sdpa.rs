//! Scaled dot-product attention on activations ([`Sdpa`](kestrel_rt_format::ops::Sdpa)): queries,
//! keys and values computed by the graph (rotary embeddings, grouped-query heads, QK-norm,
//! cross-attention), one query row at a time: its scores over the keys it sees in one row of
//! scratch (`Tk` elements, the only buffer: the `[Hq, Tq, Tk]` scores are never stored), scaled
//! and soft-capped where the node has a cap, the bias added, the masked softmax of [`attention`](super::attention) (with a sink: its
//! logit joins the row's maximum and the denominator, [`sink_softmax`]), and the weighted sum of
//! values accumulated straight into the output row.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::attention::{axpy, masked_softmax};
use kestrel_rt_core::shapes::SdpaDims;
use kestrel_rt_format::weight::dot_f32;
use kestrel_rt_format::Shape;

/// The checked geometry and attributes of one node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SdpaParams {
    /// Heads, lengths, widths and the bias's broadcast strides.
    pub g: SdpaDims,
    /// Multiplies `q · k`.
    pub scale: f32,
    /// Query `i` sees keys `0..=i`.
    pub causal: bool,
    /// Keys stored `[Hk, D, Tk]`.
    pub k_transposed: bool,
    /// Soft cap `c` of the scaled scores, `c · tanh(s / c)` (0: none).
    pub softcap: f32,
}

impl SdpaParams {
    /// Params for the node's per-sample shapes (checked by [`SdpaDims::new`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        q: &Shape,
        k: &Shape,
        v: &Shape,
        bias: Option<&Shape>,
        scale: f32,
        causal: bool,
        k_transposed: bool,
        softcap: f32,
    ) -> Result<Self, ShapeError> {
        if !(softcap.is_finite() && softcap >= 0.0) {
            return Err(ShapeError::Invalid { op: "Sdpa", what: "the soft cap must be finite and not negative" });
        }
        Ok(Self { g: SdpaDims::new(q, k, v, bias, k_transposed)?, scale, causal, k_transposed, softcap })
    }

    /// Query rows (`Hq · Tq`), the unit of work.
    pub fn rows(&self) -> usize {
        self.g.hq * self.g.tq
    }

    /// Checks the operand lengths (`bias`: its element count, without one `None`).
    pub fn check(&self, q: usize, k: usize, v: usize, y: usize, bias: Option<usize>) -> Result<(), ShapeError> {
        const OP: &str = "Sdpa";
        let g = &self.g;
        expect_eq(OP, "query elements", g.hq * g.tq * g.d, q)?;
        expect_eq(OP, "key elements", g.hk * g.tk * g.d, k)?;
        expect_eq(OP, "value elements", g.hk * g.tk * g.dv, v)?;
        expect_eq(OP, "output elements", g.hq * g.tq * g.dv, y)?;
        expect_eq(OP, "bias elements", g.bias_len, bias.unwrap_or(0))
    }
}

/// Scratch for [`sdpa_rows`] at least: one row of scores (`Tk`).
pub fn sdpa_scratch(p: &SdpaParams) -> usize {
    p.g.tk
}

/// A block's scores (`QB · Tk` f32) are kept within this many elements (128 KiB: in L2 between
/// the two products and the softmax).
const BLOCK_SCORES: usize = 32 * 1024;

/// Fewest query rows a block is multiplied in (below, a row at a time).
const MIN_BLOCK: usize = 4;

/// Query rows per block of the blocked path: [`BLOCK_SCORES`] over `Tk`, between 16 (the
/// products' packing amortised) and 64, at most `Tq`.
pub fn block_queries(p: &SdpaParams) -> usize {
    (BLOCK_SCORES / p.g.tk.max(1)).clamp(16, 64).min(p.g.tq).max(1)
}

/// Scratch for [`sdpa_rows`]'s blocked path (what the planner reserves): a block's scores.
pub fn sdpa_scratch_fast(p: &SdpaParams) -> usize {
    (block_queries(p) * p.g.tk).max(sdpa_scratch(p))
}

/// Query rows `rows` (flat `h · Tq + i`) of one sample: `y` holds exactly those rows' outputs
/// (`rows.len() · Dv` elements), `q`, `k`, `v` and `bias` the whole sample's operands (lengths
/// as [`SdpaParams::check`]), `sink` the node's sink logits (`Hq` or one; `None`: no sink),
/// `scratch` at least [`sdpa_scratch`] elements. With room for [`MIN_BLOCK`] rows of scores or
/// more ([`sdpa_scratch_fast`] reserves [`block_queries`]), a head's rows go in blocks through
/// the GEMM kernels ([`block`]); otherwise one row at a time ([`one_by_one`]).
#[allow(clippy::too_many_arguments)]
pub fn sdpa_rows(
    p: &SdpaParams,
    rows: core::ops::Range<usize>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: Option<&[f32]>,
    sink: Option<&[f32]>,
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let (tq, tk, dv) = (p.g.tq, p.g.tk, p.g.dv);
    let qb = (scratch.len() / tk.max(1)).min(block_queries(p));
    if qb < MIN_BLOCK || tk == 0 || p.g.d == 0 || dv == 0 {
        return one_by_one(p, rows, (q, k, v, bias, sink), y, scratch);
    }
    let mut r = rows.start;
    while r < rows.end {
        // A block: rows of one head, ending at the head's last query or the range's end.
        let end = rows.end.min((r / tq + 1) * tq).min(r + qb);
        let out = &mut y[(r - rows.start) * dv..(end - rows.start) * dv];
        if end - r < MIN_BLOCK {
            one_by_one(p, r..end, (q, k, v, bias, sink), out, scratch);
        } else {
            block(p, r..end, (q, k, v, bias, sink), out, scratch);
        }
        r = end;
    }
}

/// The operands of one sample: `q`, `k`, `v`, the bias and the sinks.
type Operands<'a> = (&'a [f32], &'a [f32], &'a [f32], Option<&'a [f32]>, Option<&'a [f32]>);

/// Rows `rows` of one head (flat `h · Tq + i`) in one block: their scores over the keys the last
/// of them sees by one GEMM (`Q · Kᵀ`: the dense kernels over `K` as `[Tk, D]` weights, or
/// `Q · K` for keys stored `[D, Tk]`), each row's soft cap, bias and softmax as
/// [`one_by_one`]'s (the keys it does not see weighted 0), then the outputs by one GEMM
/// (`W · V`). `scratch` holds the block's scores.
fn block(p: &SdpaParams, rows: core::ops::Range<usize>, ops: Operands<'_>, y: &mut [f32], scratch: &mut [f32]) {
    let (q, k, v, bias, sink) = ops;
    let g = &p.g;
    let (tq, tk, d, dv) = (g.tq, g.tk, g.d, g.dv);
    let (h, i0, nb) = (rows.start / tq, rows.start % tq, rows.len());
    let hk = h / (g.hq / g.hk);
    let [bh, bi, bj] = g.bias_strides;
    let seen = |i: usize| if p.causal { (i + 1).min(tk) } else { tk };
    let qh = &q[rows.start * d..rows.end * d];
    let kh = &k[hk * tk * d..(hk + 1) * tk * d];
    // Keys in the product: the ones the block's last row sees (all of them stored transposed,
    // whose rows are the key axis's full length).
    let ld = if p.k_transposed { tk } else { seen(i0 + nb - 1) };
    let s = &mut scratch[..nb * ld];
    head_scores(p, (qh, nb), kh, ld, s);
    let (scale, sink_h) = (capped_scale(p, s), head_sink(sink, h));
    for (rr, row) in s.chunks_exact_mut(ld).enumerate() {
        let i = i0 + rr;
        let (sv, unseen) = row.split_at_mut(seen(i).min(ld));
        row_softmax(sv, scale, bias.map(|b| (&b[h * bh + i * bi..], bj)), sink_h);
        unseen.fill(0.0);
    }
    super::simd::matmul_kn(s, nb, ld, &v[hk * tk * dv..(hk * tk + ld) * dv], dv, y, dv);
}

/// The scores of `nb` query rows `qh` (`[nb, D]`) of one head over its first `keys` keys `kh`
/// (the head's `[Tk, D]`, or `[D, Tk]` stored transposed, where `keys` must be `Tk`) into `s`
/// (`[nb, keys]`), by one GEMM: the dense kernels over the keys as `[keys, D]` weights, or
/// `matmul_kn` for transposed keys. Shared with the talking-heads blocks.
pub(crate) fn head_scores(p: &SdpaParams, (qh, nb): (&[f32], usize), kh: &[f32], keys: usize, s: &mut [f32]) {
    let (tk, d) = (p.g.tk, p.g.d);
    if p.k_transposed {
        debug_assert_eq!(keys, tk, "transposed keys: every key's column");
        super::simd::matmul_kn(qh, nb, d, kh, tk, s, tk);
    } else {
        let kv = kestrel_rt_format::WeightView::f32(keys, d, &kh[..keys * d]).expect("K_h view: keys·D elements");
        super::linear::matmul_nt(qh, nb, &kv, s);
    }
}

/// Applies the node's soft cap to scores `s` where it has one (the scale taken into it) and
/// returns the scale the softmax then applies (1 after a cap, else the node's).
pub(crate) fn capped_scale(p: &SdpaParams, s: &mut [f32]) -> f32 {
    if p.softcap > 0.0 {
        soft_cap(s, p.scale, p.softcap);
        1.0
    } else {
        p.scale
    }
}

/// Head `h`'s sink logit: the node's one shared value or its per-head one (`None`: no sink).
pub(crate) fn head_sink(sink: Option<&[f32]>, h: usize) -> Option<f32> {
    sink.map(|z| if z.len() == 1 { z[0] } else { z[h] })
}

/// [`sdpa_rows`] a row at a time: its scores in one row of `scratch`, the weighted sum of values
/// accumulated straight into its output row.
fn one_by_one(p: &SdpaParams, rows: core::ops::Range<usize>, ops: Operands<'_>, y: &mut [f32], scratch: &mut [f32]) {
    let (q, k, v, bias, sink) = ops;
    let g = &p.g;
    let (tq, tk, d, dv) = (g.tq, g.tk, g.d, g.dv);
    let group = g.hq / g.hk;
    let [bh, bi, bj] = g.bias_strides;
    let scores = &mut scratch[..tk];
    for (r, out) in rows.zip(y.chunks_exact_mut(dv)) {
        let (h, i) = (r / tq, r % tq);
        let hk = h / group;
        let n = if p.causal { (i + 1).min(tk) } else { tk };
        let s = &mut scores[..n];
        let qi = &q[r * d..(r + 1) * d];
        let kh = &k[hk * tk * d..(hk + 1) * tk * d];
        if p.k_transposed {
            // `[D, Tk]`: the row as a sum of key rows scaled by the query's entries.
            s.fill(0.0);
            for (c, &qc) in qi.iter().enumerate() {
                axpy(s, qc, &kh[c * tk..c * tk + n]);
            }
        } else {
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = dot_f32(qi, &kh[j * d..(j + 1) * d]);
            }
        }
        let scale = capped_scale(p, s);
        row_softmax(s, scale, bias.map(|b| (&b[h * bh + i * bi..], bj)), head_sink(sink, h));
        out.fill(0.0);
        let vh = &v[hk * tk * dv..(hk + 1) * tk * dv];
        for (j, &w) in s.iter().enumerate() {
            axpy(out, w, &vh[j * dv..(j + 1) * dv]);
        }
    }
}

/// The softmax of one row of scores as `Sdpa` takes it: `s_j · scale + bias_j` (`bias`: the row's
/// values from its start and their key stride, 1 or 0: one value for the row), with the head's
/// sink logit where it has one ([`sink_softmax`]); a row whose every logit is −∞ gets zeros.
pub(crate) fn row_softmax(s: &mut [f32], scale: f32, bias: Option<(&[f32], usize)>, sink: Option<f32>) {
    match (bias, sink) {
        (b, Some(z)) => sink_softmax(s, scale, b, z),
        (Some((b, 1)), None) => {
            let n = s.len();
            masked_softmax(s, scale, Some(&b[..n]))
        }
        (Some((b, _)), None) => {
            // Broadcast along the keys: one value for the row.
            let c = b[0];
            if c == f32::NEG_INFINITY {
                s.fill(0.0);
            } else {
                s.iter_mut().for_each(|x| *x = *x * scale + c);
                masked_softmax(s, 1.0, None);
            }
        }
        (None, None) => masked_softmax(s, scale, None),
    }
}

/// `s ← c · tanh(scale · s / c)`: |·| ≤ c, finite for finite scores (the quotient is formed
/// last, so a tiny cap saturates the tanh rather than making 0 · ∞).
pub(crate) fn soft_cap(s: &mut [f32], scale: f32, c: f32) {
    for x in s {
        *x = c * libm::tanhf(*x * scale / c);
    }
}

/// The softmax of a row of scores with a sink: `s_j ← s_j · scale + bias_j` (`bias`: the row's
/// values from its start, with the key stride 1 or 0), then `w_j = e^{s_j − m} / (Σ e^{s_j' − m} +
/// e^{sink − m})`, `m` the largest of the scores and the sink (the stable form: no term above 1).
/// A row whose scores and sink are all −∞ gets zeros, as [`masked_softmax`]; a fully masked row
/// beside a finite sink gets zeros too (every key's weight `e^{−∞}`).
pub fn sink_softmax(s: &mut [f32], scale: f32, bias: Option<(&[f32], usize)>, sink: f32) {
    let mut m = sink;
    match bias {
        Some((b, 1)) => {
            for (x, &c) in s.iter_mut().zip(b) {
                *x = *x * scale + c;
                m = m.max(*x);
            }
        }
        Some((b, _)) => {
            let c = b[0];
            for x in s.iter_mut() {
                *x = *x * scale + c;
                m = m.max(*x);
            }
        }
        None => {
            for x in s.iter_mut() {
                *x *= scale;
                m = m.max(*x);
            }
        }
    }
    if m == f32::NEG_INFINITY || m.is_nan() {
        s.fill(if m.is_nan() { f32::NAN } else { 0.0 });
        return;
    }
    let mut total = libm::expf(sink - m);
    for x in s.iter_mut() {
        *x = libm::expf(*x - m);
        total += *x;
    }
    let inv = 1.0 / total;
    s.iter_mut().for_each(|x| *x *= inv);
}

/// Every query row of one sample (see [`sdpa_rows`]).
#[allow(clippy::too_many_arguments)]
pub fn sdpa(
    p: &SdpaParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: Option<&[f32]>,
    sink: Option<&[f32]>,
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let rows = p.rows();
    sdpa_rows(p, 0..rows, q, k, v, bias, sink, &mut y[..rows * p.g.dv], scratch);
}
