//! Layer norm, `y = (x − mean) / √(var + ε) · γ + β` (biased variance), over the last axis
//! (rows of `d` contiguous features) or over the channels of a channels-first map (`[C, S…]`:
//! each of the `S` positions over its `C` values, stride `S`), the latter accumulated across
//! channels as contiguous rows of positions: no transposes, one vector lane per position.

use crate::error::{expect_eq, ShapeError};
use kestrel_rt_format::ops::NormAxis;
use kestrel_rt_format::{Shape, WeightView};

/// Elements of a channels-first map normalised together (`C` rows of a chunk of positions):
/// 32 KiB, so that a chunk stays in L1 across the three passes over it.
const CHANNELS_BLOCK: usize = 8192;

/// Positions per chunk of a channels-first map (see [`CHANNELS_BLOCK`]): a multiple of 16 (whole
/// vectors) from 16 to 1024, at most `S`. Fewer, longer rows than a fixed chunk cost less loop
/// overhead on small channel counts.
pub fn channels_chunk(p: &LayerNormParams) -> usize {
    let per_block = (CHANNELS_BLOCK / p.d.max(1)).clamp(16, 1024) / 16 * 16;
    per_block.min(p.inner)
}

/// Layer norm over `rows` rows of `d` features, each feature `inner` elements after the
/// previous: the last axis is `inner = 1`; channels-first `[C, S…]` is one row of `d = C`
/// with `inner = S`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormParams {
    /// Rows (product of all axes but the last; 1 for channels-first).
    pub rows: usize,
    /// Features normalised together (the last axis, or the channels).
    pub d: usize,
    /// Distance between a row's consecutive features (1, or the positions `S` of a
    /// channels-first map).
    pub inner: usize,
    /// ε added to the variance.
    pub eps: f32,
}

impl LayerNormParams {
    /// Params for an input of shape `x` normalised over its last axis (output the same shape),
    /// checking `gamma` and `beta` hold `d` elements each (any encoding, any matrix view of a
    /// `[d]` vector).
    pub fn new(x: &Shape, gamma: &WeightView<'_>, beta: Option<&WeightView<'_>>, eps: f32) -> Result<Self, ShapeError> {
        Self::with_axis(x, gamma, beta, eps, NormAxis::Last)
    }

    /// [`new`](Self::new) for either axis: [`NormAxis::Channels`] normalises `x [C, S…]` over
    /// its first axis.
    pub fn with_axis(
        x: &Shape,
        gamma: &WeightView<'_>,
        beta: Option<&WeightView<'_>>,
        eps: f32,
        axis: NormAxis,
    ) -> Result<Self, ShapeError> {
        const OP: &str = "LayerNorm";
        let n = x.numel().ok_or(ShapeError::Invalid { op: OP, what: "element count overflows" })?;
        // A scalar is one feature either way.
        let d = match axis {
            NormAxis::Last => x.last(),
            NormAxis::Channels => x.dims().first().map_or(1, |&c| c as usize),
        };
        if d == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "normalised axis is empty" });
        }
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(ShapeError::Invalid { op: OP, what: "eps must be finite and non-negative" });
        }
        expect_eq(OP, "gamma elements", d, gamma.len())?;
        if let Some(b) = beta {
            expect_eq(OP, "beta elements", d, b.len())?;
        }
        Ok(match axis {
            NormAxis::Last => Self { rows: n / d, d, inner: 1, eps },
            NormAxis::Channels => Self { rows: 1, d, inner: n / d, eps },
        })
    }
}

/// Scratch for [`layer_norm`]: γ and β decoded to f32 (`2·d`), and for channels-first maps a
/// chunk's means and inverse deviations (`2·`[`channels_chunk`]).
pub fn layer_norm_scratch(p: &LayerNormParams) -> usize {
    let stats = if p.inner > 1 { 2 * channels_chunk(p) } else { 0 };
    2 * p.d + stats
}

/// Normalises each of the `p.rows` rows of `x` into `y` (`rows·d·inner` elements each).
pub fn layer_norm(
    p: &LayerNormParams,
    gamma: &WeightView<'_>,
    beta: Option<&WeightView<'_>>,
    x: &[f32],
    y: &mut [f32],
    scratch: &mut [f32],
) {
    let d = p.d;
    let (g, rest) = scratch.split_at_mut(d);
    let (bs, stats) = rest.split_at_mut(d);
    gamma.decode_into(g);
    // No β: zeros (one loop for both; the firmware counts bytes).
    match beta {
        Some(bv) => bv.decode_into(bs),
        None => bs.fill(0.0),
    }
    let b = &*bs;
    if p.inner > 1 {
        return channels(p, g, b, x, y, stats);
    }
    if super::simd::layer_norm_rows(&x[..p.rows * d], &mut y[..p.rows * d], d, g, b, p.eps) {
        return;
    }
    let inv_d = 1.0 / d as f32;
    for (xr, yr) in x[..p.rows * d].chunks_exact(d).zip(y[..p.rows * d].chunks_exact_mut(d)) {
        let mean = sum_lanes(xr, |v| v) * inv_d;
        let var = sum_lanes(xr, |v| (v - mean) * (v - mean)) * inv_d;
        let inv = 1.0 / crate::math::sqrt(var + p.eps);
        for (((o, &v), &gg), &bb) in yr.iter_mut().zip(xr).zip(g.iter()).zip(b) {
            *o = (v - mean) * inv * gg + bb;
        }
    }
}

/// Channels-first `x [C, S]` (`C = p.d`, `S = p.inner`): per chunk of positions, the sums
/// over channels accumulate row by row into per-position statistics (contiguous, so one vector
/// lane per position), then each row is normalised. Compiled for the detected x86 ISA (the
/// loops vectorise to its width), portable elsewhere.
fn channels(p: &LayerNormParams, g: &[f32], b: &[f32], x: &[f32], y: &mut [f32], stats: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::simd::{isa, Isa};
        match isa() {
            // SAFETY: AVX-512F/AVX2/FMA detected by `isa()`.
            Isa::Avx512 => return unsafe { channels_avx512(p, g, b, x, y, stats) },
            // SAFETY: AVX2/FMA detected by `isa()`.
            Isa::Avx2 | Isa::Avx2Vnni => return unsafe { channels_avx2(p, g, b, x, y, stats) },
            _ => {}
        }
    }
    channels_body(p, g, b, x, y, stats)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn channels_avx512(p: &LayerNormParams, g: &[f32], b: &[f32], x: &[f32], y: &mut [f32], st: &mut [f32]) {
    channels_body(p, g, b, x, y, st)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn channels_avx2(p: &LayerNormParams, g: &[f32], b: &[f32], x: &[f32], y: &mut [f32], st: &mut [f32]) {
    channels_body(p, g, b, x, y, st)
}

/// [`channels`]' body, compiled per ISA.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn channels_body(p: &LayerNormParams, g: &[f32], b: &[f32], x: &[f32], y: &mut [f32], stats: &mut [f32]) {
    let (c, s) = (p.d, p.inner);
    let chunk = channels_chunk(p);
    let (mean, inv) = stats[..2 * chunk].split_at_mut(chunk);
    let (x, y) = (&x[..c * s], &mut y[..c * s]);
    let inv_c = 1.0 / c as f32;
    let mut at = 0;
    while at < s {
        let n = chunk.min(s - at);
        let (mean, inv) = (&mut mean[..n], &mut inv[..n]);
        let row = |ch: usize| &x[ch * s + at..][..n];
        // Mean, then the centred second moment (two passes, as the last-axis kernel).
        mean.copy_from_slice(row(0));
        for ch in 1..c {
            for (m, &v) in mean.iter_mut().zip(row(ch)) {
                *m += v;
            }
        }
        mean.iter_mut().for_each(|m| *m *= inv_c);
        inv.fill(0.0);
        for ch in 0..c {
            for ((a, &v), &m) in inv.iter_mut().zip(row(ch)).zip(mean.iter()) {
                *a += (v - m) * (v - m);
            }
        }
        inv.iter_mut().for_each(|a| *a = 1.0 / crate::math::sqrt(*a * inv_c + p.eps));
        for ch in 0..c {
            let (gg, bb) = (g[ch], b[ch]);
            let yr = &mut y[ch * s + at..][..n];
            for (((o, &v), &m), &iv) in yr.iter_mut().zip(row(ch)).zip(mean.iter()).zip(inv.iter()) {
                *o = (v - m) * iv * gg + bb;
            }
        }
        at += n;
    }
}

/// `Σ f(v)` with 8 independent partial sums (lane `i` takes elements `≡ i mod 8`), added
/// pairwise at the end: the compiler turns it into one SIMD accumulator (a plain `sum()` is a
/// serial chain it may not reorder), and the error bound is that of 8 shorter sums.
#[inline]
fn sum_lanes(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut chunks = xs.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += f(v);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}
