//! Concatenation along one axis ([`Concat`]): each piece `[outer, n_i, inner]` copied into its
//! place in `[outer, total, inner]`, `outer` contiguous runs of `n_i · inner` elements a piece.
//! Plain copies (ids are copied bit for bit like values); with `std` and several threads a
//! large piece is split into element ranges copied in parallel.
//!
//! [`Concat`]: kestrel_rt_format::ops::Concat

use crate::kernels::slice::copy;
pub use kestrel_rt_core::params::ConcatParams;

/// Pieces of at least this many elements are copied in parallel (with several threads).
#[cfg(feature = "std")]
const PAR_MIN: usize = 1 << 16;

/// Copies piece `i` of one sample (`x`, `outer · n_i · inner` elements) into its place in `y`
/// (`outer · total · inner`).
pub fn concat_piece(p: &ConcatParams, i: usize, x: &[f32], y: &mut [f32]) {
    let run = p.n[i] * p.inner;
    let len = p.outer * run;
    if len == 0 {
        return;
    }
    #[cfg(feature = "std")]
    {
        let threads = crate::threads::threads();
        if threads > 1 && len >= PAR_MIN {
            let tasks = threads.min(len / (PAR_MIN / 4)).max(1);
            let chunk = len.div_ceil(tasks);
            let yp = crate::threads::SharedMut::new(y);
            crate::threads::for_each(tasks, &|t| {
                let (a, b) = ((t * chunk).min(len), ((t + 1) * chunk).min(len));
                copy_range(p, i, x, a..b, |dst, src| {
                    // SAFETY: the tasks' element ranges of the piece are disjoint, and so are
                    // their places in `y`.
                    copy(unsafe { yp.part(dst, src.len()) }, src)
                });
            });
            return;
        }
    }
    copy_range(p, i, x, 0..len, |dst, src| copy(&mut y[dst..dst + src.len()], src));
}

/// Copies elements `range` of piece `i` (flat, within the sample) to their places, `out(start,
/// run)` writing `run` at the output's `start`.
#[inline]
fn copy_range(
    p: &ConcatParams,
    i: usize,
    x: &[f32],
    range: core::ops::Range<usize>,
    mut out: impl FnMut(usize, &[f32]),
) {
    let run = p.n[i] * p.inner;
    let (orow, at) = (p.total * p.inner, p.offset[i] * p.inner);
    let mut e = range.start;
    while e < range.end {
        let (o, j) = (e / run, e % run);
        let n = (run - j).min(range.end - e);
        out(o * orow + at + j, &x[e..e + n]);
        e += n;
    }
}

/// Every piece of one sample into `y`.
pub fn concat(p: &ConcatParams, xs: &[&[f32]], y: &mut [f32]) {
    for (i, x) in xs.iter().enumerate().take(p.pieces) {
        concat_piece(p, i, x, y);
    }
}
