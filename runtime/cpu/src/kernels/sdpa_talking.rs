//! Talking-heads attention ([`Sdpa`](kestrel_rt_format::ops::Sdpa) with `mix_pre` and/or
//! `mix_post`: CaiT's and EfficientFormerV2's head mixings), a block of queries at a time over
//! every head: each head's scores `Q_h[block] · K_hᵀ` over every key as one product through the
//! dense kernels (`[Hq, QB, Tk]` in scratch), scaled, capped and biased as
//! [`sdpa_rows`](super::sdpa::sdpa_rows) does, mixed across the heads (`z'[g] = Σ_h W[g, h] · z[h]
//! + c[g]`: `Hq` axpys over a head's whole block, since the mixing is the same for every score),
//! each row's softmax (with its sink; a causal query's unseen keys 0), the weights mixed alike,
//! then `O_h[block] = W_h · V_h` as one product per head. The scratch is planned at load
//! ([`talking_scratch`]); nothing is allocated here.

use super::attention::axpy;
use super::sdpa::{capped_scale, head_scores, head_sink, row_softmax, SdpaParams};
use super::simd::matmul_kn;

/// The node's head mixings, each `Hq · (Hq + 1)` values (row `g`: `W[g, 0..Hq]`, then `c[g]`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mix<'a> {
    /// Mixes the scores before the softmax.
    pub pre: Option<&'a [f32]>,
    /// Mixes the weights after it.
    pub post: Option<&'a [f32]>,
}

/// A block's scores over every head (`Hq · QB · Tk` f32) are kept within this many elements
/// (128 KiB: in L2 between the products, the mixings and the softmax).
const BLOCK_SCORES: usize = 32 * 1024;

/// Scratch per query of a block: its scores and their mixing over every head (`2 · Hq · Tk`) and
/// its outputs (`Hq · Dv`).
fn per_query(p: &SdpaParams) -> usize {
    let g = &p.g;
    2 * g.hq * g.tk + g.hq * g.dv
}

/// Queries per block the planner reserves scratch for: [`BLOCK_SCORES`] over `Hq · Tk`, between
/// 16 (the products' packing amortised) and 64, at most `Tq`.
pub fn talking_rows(p: &SdpaParams) -> usize {
    let g = &p.g;
    (BLOCK_SCORES / (g.hq * g.tk).max(1)).clamp(16, 64).min(g.tq).max(1)
}

/// Scratch for [`sdpa_talking`] in blocks of `rows` queries.
pub fn talking_scratch_for(p: &SdpaParams, rows: usize) -> usize {
    rows * per_query(p)
}

/// Scratch for [`sdpa_talking`] in blocks of [`talking_rows`] (what the planner reserves).
pub fn talking_scratch(p: &SdpaParams) -> usize {
    talking_scratch_for(p, talking_rows(p))
}

/// Queries per block with `scratch` elements: as many as fit, at most [`talking_rows`] (0 when
/// not one fits).
pub fn block_rows(p: &SdpaParams, scratch: usize) -> usize {
    (scratch / per_query(p).max(1)).min(talking_rows(p))
}

/// `to[g] = Σ_h m[g, h] · scale · from[h] + m[g, Hq]` over blocks of `blk` elements (`Hq` of them
/// in `from` and `to`): the mixing of every score of a block at once.
fn mix_heads(from: &[f32], to: &mut [f32], blk: usize, m: &[f32], scale: f32) {
    let hq = from.len() / blk;
    for (row, out) in m.chunks_exact(hq + 1).zip(to.chunks_exact_mut(blk)) {
        out.fill(row[hq]);
        for (&w, x) in row[..hq].iter().zip(from.chunks_exact(blk)) {
            axpy(out, w * scale, x);
        }
    }
}

/// Queries `queries` of one sample over every head (operands as
/// [`sdpa_rows`](super::sdpa::sdpa_rows)); the outputs, `Hq` blocks of `queries.len()` rows of
/// `Dv` (head `g`'s block is output rows `g · Tq + queries`), are left in the returned part of
/// `scratch` (at least [`talking_scratch_for`] `queries.len()` elements).
#[allow(clippy::too_many_arguments)]
pub fn talking_block<'s>(
    p: &SdpaParams,
    mix: Mix<'_>,
    queries: core::ops::Range<usize>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: Option<&[f32]>,
    sink: Option<&[f32]>,
    scratch: &'s mut [f32],
) -> &'s [f32] {
    let g = &p.g;
    let (hq, tq, tk, d, dv) = (g.hq, g.tq, g.tk, g.d, g.dv);
    let group = hq / g.hk;
    let [bh, bi, bj] = g.bias_strides;
    let (i0, nb) = (queries.start, queries.len());
    let blk = nb * tk;
    let (mut cur, rest) = scratch.split_at_mut(hq * blk);
    let (mut other, rest) = rest.split_at_mut(hq * blk);
    let out = &mut rest[..hq * nb * dv];
    // Every head's scores over every key (a causal query's unseen ones are dropped below).
    for (h, s) in cur.chunks_exact_mut(blk).enumerate() {
        let qh = &q[(h * tq + i0) * d..(h * tq + i0 + nb) * d];
        let kh = &k[h / group * tk * d..(h / group + 1) * tk * d];
        head_scores(p, (qh, nb), kh, tk, s);
    }
    // The scale, taken into the soft cap where there is one.
    let scale = capped_scale(p, cur);
    let bias_row = |h: usize, r: usize| bias.map(|b| (&b[h * bh + (i0 + r) * bi..], bj));
    let seen = |r: usize| if p.causal { (i0 + r + 1).min(tk) } else { tk };
    // What the softmax takes: the mixed scores (scale and bias applied before the mixing, the
    // scale folded into its weights where there is no bias), or the scores themselves.
    let (scale, biased) = match mix.pre {
        Some(m) => {
            let folded = if bias.is_some() {
                for (hr, row) in cur.chunks_exact_mut(tk).enumerate() {
                    match bias_row(hr / nb, hr % nb) {
                        Some((b, 1)) => row.iter_mut().zip(b).for_each(|(x, &c)| *x = *x * scale + c),
                        Some((b, _)) => row.iter_mut().for_each(|x| *x = *x * scale + b[0]),
                        None => {}
                    }
                }
                1.0
            } else {
                scale
            };
            mix_heads(cur, other, blk, m, folded);
            core::mem::swap(&mut cur, &mut other);
            (1.0, false)
        }
        None => (scale, true),
    };
    for (hr, row) in cur.chunks_exact_mut(tk).enumerate() {
        let (h, r) = (hr / nb, hr % nb);
        let (s, unseen) = row.split_at_mut(seen(r));
        row_softmax(s, scale, bias_row(h, r).filter(|_| biased), head_sink(sink, h));
        unseen.fill(0.0);
    }
    if let Some(m) = mix.post {
        mix_heads(cur, other, blk, m, 1.0);
        core::mem::swap(&mut cur, &mut other);
    }
    for (h, (w, o)) in cur.chunks_exact(blk).zip(out.chunks_exact_mut(nb * dv)).enumerate() {
        matmul_kn(w, nb, tk, &v[h / group * tk * dv..(h / group + 1) * tk * dv], dv, o, dv);
    }
    out
}

/// Queries `queries` of one sample over every head, in blocks of as many as `scratch` holds
/// ([`block_rows`]; at least [`talking_scratch_for`] one query); `y` the whole sample's output
/// (`Hq · Tq · Dv`).
#[allow(clippy::too_many_arguments)]
pub fn sdpa_talking(
    p: &SdpaParams,
    mix: Mix<'_>,
    queries: core::ops::Range<usize>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: Option<&[f32]>,
    sink: Option<&[f32]>,
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let (tq, dv) = (p.g.tq, p.g.dv);
    let qb = block_rows(p, scratch.len()).max(1);
    let mut i0 = queries.start;
    while i0 < queries.end {
        let i1 = (i0 + qb).min(queries.end);
        let out = talking_block(p, mix, i0..i1, q, k, v, bias, sink, scratch);
        for (h, rows) in out.chunks_exact((i1 - i0) * dv).enumerate() {
            y[(h * tq + i0) * dv..(h * tq + i1) * dv].copy_from_slice(rows);
        }
        i0 = i1;
    }
}
