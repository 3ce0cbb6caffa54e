//! Talking-heads attention ([`Sdpa`](kestrel_rt_format::ops::Sdpa) with `mix_pre` and/or
//! `mix_post`: CaiT's and EfficientFormerV2's head mixings), one query at a time over every
//! head: the query's scores for all `Hq` heads in scratch (`Hq · Tk`), scaled, capped and biased
//! as [`sdpa_rows`](super::sdpa::sdpa_rows) does, mixed across the heads (`z'[g] = Σ_h W[g, h] ·
//! z[h] + c[g]`), each head's softmax (with its sink), the weights mixed alike (over every key,
//! the masked ones 0), then each head's weighted sum of values. The scratch is planned at load
//! ([`talking_scratch`]); nothing is allocated here.

use super::attention::axpy;
use super::sdpa::{sink_softmax, SdpaParams};
use kestrel_rt_format::weight::dot_f32;

/// The node's head mixings, each `Hq · (Hq + 1)` values (row `g`: `W[g, 0..Hq]`, then `c[g]`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mix<'a> {
    /// Mixes the scores before the softmax.
    pub pre: Option<&'a [f32]>,
    /// Mixes the weights after it.
    pub post: Option<&'a [f32]>,
}

/// Scratch for [`talking_query`]: the query's scores over every head (`Hq · Tk`), one column
/// across the heads (`Hq`) and the query's outputs (`Hq · Dv`).
pub fn talking_scratch(p: &SdpaParams) -> usize {
    let g = &p.g;
    g.hq * g.tk + g.hq + g.hq * g.dv
}

/// Mixes columns `0..n` of the rows `s` (`Hq` rows of `tk`) across the rows: `s[g][j] ← Σ_h
/// m[g, h] · s[h][j] + m[g, Hq]`, `col` `Hq` elements of scratch.
fn mix_heads(s: &mut [f32], tk: usize, n: usize, m: &[f32], col: &mut [f32]) {
    let hq = col.len();
    for j in 0..n {
        for (h, c) in col.iter_mut().enumerate() {
            *c = s[h * tk + j];
        }
        for (g, row) in m.chunks_exact(hq + 1).enumerate() {
            s[g * tk + j] = dot_f32(col, &row[..hq]) + row[hq];
        }
    }
}

/// Query `i` of one sample over every head (operands as [`sdpa_rows`](super::sdpa::sdpa_rows));
/// the outputs, `Hq` rows of `Dv` (head `g`'s row is output row `g · Tq + i`), are left in the
/// returned part of `scratch` (at least [`talking_scratch`] elements).
#[allow(clippy::too_many_arguments)]
pub fn talking_query<'s>(
    p: &SdpaParams,
    mix: Mix<'_>,
    i: usize,
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
    let (scores, rest) = scratch.split_at_mut(hq * tk);
    let (col, rest) = rest.split_at_mut(hq);
    let out = &mut rest[..hq * dv];
    let n = if p.causal { (i + 1).min(tk) } else { tk };
    for (h, s) in scores.chunks_exact_mut(tk).enumerate() {
        let s = &mut s[..n];
        let qi = &q[(h * tq + i) * d..(h * tq + i + 1) * d];
        let kh = &k[h / group * tk * d..(h / group + 1) * tk * d];
        if p.k_transposed {
            s.fill(0.0);
            for (c, &qc) in qi.iter().enumerate() {
                axpy(s, qc, &kh[c * tk..c * tk + n]);
            }
        } else {
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = dot_f32(qi, &kh[j * d..(j + 1) * d]);
            }
        }
        for x in s.iter_mut() {
            let scaled = *x * p.scale;
            *x = if p.softcap > 0.0 { p.softcap * libm::tanhf(scaled / p.softcap) } else { scaled };
        }
        if let Some(b) = bias {
            let b = &b[h * bh + i * bi..];
            for (j, x) in s.iter_mut().enumerate() {
                *x += b[j * bj];
            }
        }
    }
    if let Some(m) = mix.pre {
        mix_heads(scores, tk, n, m, col);
    }
    for (h, s) in scores.chunks_exact_mut(tk).enumerate() {
        // A sink of −∞ is none: the masked softmax (a row of −∞ gives zeros).
        let z = sink.map_or(f32::NEG_INFINITY, |z| if z.len() == 1 { z[0] } else { z[h] });
        sink_softmax(&mut s[..n], 1.0, None, z);
        s[n..].fill(0.0);
    }
    let n = match mix.post {
        Some(m) => {
            mix_heads(scores, tk, tk, m, col);
            tk
        }
        None => n,
    };
    for (h, (s, o)) in scores.chunks_exact(tk).zip(out.chunks_exact_mut(dv)).enumerate() {
        o.fill(0.0);
        let vh = &v[h / group * tk * dv..(h / group + 1) * tk * dv];
        for (j, &w) in s[..n].iter().enumerate() {
            axpy(o, w, &vh[j * dv..(j + 1) * dv]);
        }
    }
    out
}

/// Queries `queries` of one sample over every head; `y` the whole sample's output (`Hq · Tq ·
/// Dv`).
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
    for i in queries {
        let out = talking_query(p, mix, i, q, k, v, bias, sink, scratch);
        for (h, row) in out.chunks_exact(dv).enumerate() {
            y[(h * tq + i) * dv..(h * tq + i + 1) * dv].copy_from_slice(row);
        }
    }
}
