//! A strided window of one axis placed at an offset of a zero-filled output ([`Slice`]): the
//! input seen as `[outer, n, inner]`, the output as `[outer, len, inner]`,
//! `y[o, offset + j, i] = x[o, start + j·step, i]` for `j < count`, zeros elsewhere.
//!
//! Per outer index the window is one contiguous copy when `step` is 1 (or one row is taken),
//! a strided pick when one element is taken per row (`inner` 1: a stride-2 subsample of the
//! last axis), else one copy of `inner` elements per row.
//!
//! [`Slice`]: kestrel_rt_format::ops::Slice

use crate::kernels::copy_short;
use crate::kernels::simd::multiversion::multiversion;
pub use kestrel_rt_core::params::SliceParams;

multiversion!(
    /// Writes the window of `x` (one sample, `outer·n·inner` elements) into `y`
    /// (`outer·len·inner`); compiled for the detected x86 tier (its strided picks vectorise to
    /// the tier's width), portable elsewhere.
    pub fn slice / slice_on(p: &SliceParams, x: &[f32], y: &mut [f32]) => slice_body
);

/// Rows up to this many elements are copied by [`copy_short`] (no call into `memcpy`).
const SHORT: usize = 64;

/// Copies a row: short ones by [`copy_short`], long ones by `memcpy`.
#[inline(always)]
pub(crate) fn copy(dst: &mut [f32], src: &[f32]) {
    if dst.len() <= SHORT {
        copy_short(dst, src);
    } else {
        dst.copy_from_slice(src);
    }
}

#[inline(always)]
fn slice_body(p: &SliceParams, x: &[f32], y: &mut [f32]) {
    let (inner, len, n, step) = (p.inner, p.len, p.n, p.step);
    let (olen, ilen, run) = (len * inner, n * inner, p.count * inner);
    if olen == 0 || p.outer == 0 {
        return;
    }
    if ilen == 0 {
        // An empty input axis (a run-time dim at 0): the window reads nothing.
        y[..p.outer * olen].fill(0.0);
        return;
    }
    for (out, src) in y[..p.outer * olen].chunks_exact_mut(olen).zip(x[..p.outer * ilen].chunks_exact(ilen)) {
        let (head, rest) = out.split_at_mut(p.offset * inner);
        head.fill(0.0);
        let (win, tail) = rest.split_at_mut(run);
        tail.fill(0.0);
        if run == 0 {
            continue;
        }
        let src = &src[p.start * inner..];
        if step == 1 || p.count == 1 {
            copy(win, &src[..run]);
        } else if inner == 1 {
            pick(win, src, step);
        } else {
            for (j, w) in win.chunks_exact_mut(inner).enumerate() {
                copy(w, &src[j * step * inner..][..inner]);
            }
        }
    }
}

/// `dst[j] = src[j·step]` (`dst` not empty).
#[inline(always)]
fn pick(dst: &mut [f32], src: &[f32], step: usize) {
    let n = dst.len();
    let (last, head) = dst.split_last_mut().expect("n ≥ 1");
    match step {
        // Pairs and triples: strides LLVM vectorises (`step_by` it does not).
        2 => head.iter_mut().zip(src[..2 * (n - 1)].chunks_exact(2)).for_each(|(d, s)| *d = s[0]),
        3 => head.iter_mut().zip(src[..3 * (n - 1)].chunks_exact(3)).for_each(|(d, s)| *d = s[0]),
        _ => head.iter_mut().zip(src.iter().step_by(step)).for_each(|(d, &s)| *d = s),
    }
    *last = src[(n - 1) * step];
}
