//! Talking-heads attention ([`Sdpa`](kestrel_rt_format::ops::Sdpa) with `mix_pre` and/or
//! `mix_post`: CaiT's and EfficientFormerV2's head mixings), one query at a time over every
//! head: the query's scores for all `Hq` heads in scratch (`Hq · Tk`), scaled, capped and biased
//! as [`sdpa_rows`](super::sdpa::sdpa_rows) does, mixed across the heads (`z'[g] = Σ_h W[g, h] ·
//! z[h] + c[g]`), each head's softmax (with its sink), the weights mixed alike (over every key,
//! the masked ones 0), then each head's weighted sum of values. The scratch is planned at load
//! ([`talking_scratch`]); nothing is allocated here.

use super::attention::axpy;
use super::sdpa::{sink_softmax, SdpaParams};
use super::simd::softmax;
use kestrel_rt_format::weight::dot_f32;

/// The node's head mixings, each `Hq · (Hq + 1)` values (row `g`: `W[g, 0..Hq]`, then `c[g]`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mix<'a> {
    /// Mixes the scores before the softmax.
    pub pre: Option<&'a [f32]>,
    /// Mixes the weights after it.
    pub post: Option<&'a [f32]>,
}

/// Scratch for [`talking_query`]: the query's scores over every head and their mixing (`Hq · Tk`
/// each) and the query's outputs (`Hq · Dv`).
pub fn talking_scratch(p: &SdpaParams) -> usize {
    let g = &p.g;
    2 * g.hq * g.tk + g.hq * g.dv
}

/// Mixes columns `0..n` of the rows `from` (`Hq` rows of `tk`) across the rows into `to`:
/// `to[g][j] = Σ_h m[g, h] · from[h][j] + m[g, Hq]` (along the keys, a row at a time).
fn mix_heads(from: &[f32], to: &mut [f32], tk: usize, n: usize, m: &[f32]) {
    let hq = from.len() / tk;
    for (row, out) in m.chunks_exact(hq + 1).zip(to.chunks_exact_mut(tk)) {
        let out = &mut out[..n];
        out.fill(row[hq]);
        for (&w, x) in row[..hq].iter().zip(from.chunks_exact(tk)) {
            axpy(out, w, &x[..n]);
        }
    }
}

/// Each head's softmax over its first `n` scores (with its sink; a row of −∞ gives zeros), the
/// keys after them 0.
fn softmax_heads(s: &mut [f32], tk: usize, n: usize, sink: Option<&[f32]>) {
    for (h, row) in s.chunks_exact_mut(tk).enumerate() {
        let (seen, masked) = row.split_at_mut(n);
        match sink.map(|z| if z.len() == 1 { z[0] } else { z[h] }) {
            Some(z) => sink_softmax(seen, 1.0, None, z),
            None => {
                let mx = seen.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                if mx == f32::NEG_INFINITY {
                    seen.fill(0.0);
                } else {
                    softmax(seen);
                }
            }
        }
        masked.fill(0.0);
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
    let (mut a, rest) = scratch.split_at_mut(hq * tk);
    let (mut b, rest) = rest.split_at_mut(hq * tk);
    let out = &mut rest[..hq * dv];
    let n = if p.causal { (i + 1).min(tk) } else { tk };
    for (h, s) in a.chunks_exact_mut(tk).enumerate() {
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
        if p.softcap > 0.0 {
            for x in s.iter_mut() {
                *x = p.softcap * libm::tanhf(*x * p.scale / p.softcap);
            }
        } else {
            s.iter_mut().for_each(|x| *x *= p.scale);
        }
        if let Some(bv) = bias {
            let bv = &bv[h * bh + i * bi..];
            for (j, x) in s.iter_mut().enumerate() {
                *x += bv[j * bj];
            }
        }
    }
    // `a` holds the current rows, `b` the other buffer.
    if let Some(m) = mix.pre {
        mix_heads(a, b, tk, n, m);
        core::mem::swap(&mut a, &mut b);
    }
    softmax_heads(a, tk, n, sink);
    let n = match mix.post {
        Some(m) => {
            mix_heads(a, b, tk, tk, m);
            core::mem::swap(&mut a, &mut b);
            tk
        }
        None => n,
    };
    for (h, (s, o)) in a.chunks_exact(tk).zip(out.chunks_exact_mut(dv)).enumerate() {
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
