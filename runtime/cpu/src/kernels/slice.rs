//! A strided window of one axis placed at an offset of a zero-filled output ([`Slice`]): the
//! input seen as `[outer, n, inner]`, the output as `[outer, len, inner]`,
//! `y[o, offset + j, i] = x[o, start + j·step, i]` for `j < count`, zeros elsewhere.
//!
//! [`Slice`]: kestrel_rt_format::ops::Slice

pub use kestrel_rt_core::params::SliceParams;

/// Writes the window of `x` (one sample, `outer·n·inner` elements) into `y` (`outer·len·inner`).
pub fn slice(p: &SliceParams, x: &[f32], y: &mut [f32]) {
    let (inner, len, n) = (p.inner, p.len, p.n);
    for o in 0..p.outer {
        let out = &mut y[o * len * inner..(o + 1) * len * inner];
        let src = &x[o * n * inner..(o + 1) * n * inner];
        out[..p.offset * inner].fill(0.0);
        out[(p.offset + p.count) * inner..].fill(0.0);
        for j in 0..p.count {
            let from = (p.start + j * p.step) * inner;
            let to = (p.offset + j) * inner;
            out[to..to + inner].copy_from_slice(&src[from..from + inner]);
        }
    }
}
