//! The depthwise convolution's inner product over taps (x86): `acc[j] = Σ_t w[t] · src[off[t] +
//! j]`, blocks of four vectors of `acc` kept in registers across every tap (one store per
//! element, instead of a load and a store of `acc` per tap); and channels-innermost, eight
//! channels in a vector's lanes and up to eight output pixels in registers (`taps_cl`,
//! `depthwise_cl8`).

use super::gemm::{transpose8, Vf, Y};
use core::arch::x86_64::{
    __m256i, _mm256_loadu_si256, _mm256_maskload_ps, _mm256_setzero_ps, _mm_cvtss_f32, _mm_fmadd_ss, _mm_set_ss,
};

/// `acc[j] = Σ_t w[t] · src[off[t] + j]` for `j < acc.len()`, taps in order, each a fused
/// multiply-add (the tail past the last whole vector through the scalar `vfmadd…ss`, the same
/// arithmetic).
///
/// # Safety
/// The CPU must support `V`'s instructions. (Bounds are checked: every `off[t] + acc.len()` is
/// within `src`.)
#[inline(always)]
pub(super) unsafe fn taps<V: Vf>(w: &[f32], off: &[usize], src: &[f32], acc: &mut [f32]) {
    let (n, taps) = (acc.len(), w.len().min(off.len()));
    assert!(off[..taps].iter().all(|&o| o <= src.len() && src.len() - o >= n), "taps: a tap reads past its source");
    let (sp, ap) = (src.as_ptr(), acc.as_mut_ptr());
    let l = V::L;
    let mut j = 0;
    // SAFETY: every read is src[off[t] + j + i] with j + i < n (checked above); every write is
    // acc[j + i] with j + i < n.
    unsafe {
        while j + 4 * l <= n {
            let mut a = [V::zero(); 4];
            for (wt, &o) in w[..taps].iter().zip(&off[..taps]) {
                let wv = V::splat(wt);
                let p = sp.add(o + j);
                for (v, a) in a.iter_mut().enumerate() {
                    *a = V::fma(wv, V::load(p.add(v * l)), *a);
                }
            }
            for (v, a) in a.iter().enumerate() {
                V::store(ap.add(j + v * l), *a);
            }
            j += 4 * l;
        }
        while j + l <= n {
            let mut a = V::zero();
            for (wt, &o) in w[..taps].iter().zip(&off[..taps]) {
                a = V::fma(V::splat(wt), V::load(sp.add(o + j)), a);
            }
            V::store(ap.add(j), a);
            j += l;
        }
    }
    for (jj, o) in acc.iter_mut().enumerate().skip(j) {
        let mut a = 0.0f32;
        for (&wt, &o) in w[..taps].iter().zip(&off[..taps]) {
            // SAFETY: FMA available in every caller (`V`'s instructions include it).
            a = unsafe { _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(wt), _mm_set_ss(src[o + jj]), _mm_set_ss(a))) };
        }
        *o = a;
    }
}

/// [`taps`] written row by row into an output plane: `y[r·ow + j] = Σ_t w[t] · src[off[t] + r·ld
/// + j]`, then `+ bias` when `bias ≠ 0`, for every row `r < y.len() / ow` and `j < ow` — the
/// values [`taps`] into an accumulator of rows `ld` apart, a bias pass and a row copy give, bit
/// for bit (taps in order, each a fused multiply-add from zero, the bias added last and not at
/// all when zero), without the accumulator's store, the bias pass and the copy. Blocks of four
/// vectors in registers across every tap, then one of the one to four left (a row's last
/// partial vector recomputed overlapping the one before); rows narrower than a vector through
/// the scalar `vfmadd…ss` (callers take those through the accumulator: `super::taps_rows_lanes`).
///
/// # Safety
/// The CPU must support `V`'s instructions. (Bounds are checked: `ld ≥ ow` and every `off[t] +
/// (rows − 1)·ld + ow` within `src`.)
#[inline(always)]
pub(super) unsafe fn taps_rows<V: Vf>(
    w: &[f32],
    off: &[usize],
    src: &[f32],
    ld: usize,
    bias: f32,
    ow: usize,
    y: &mut [f32],
) {
    let taps = w.len().min(off.len());
    let rows = y.len().checked_div(ow).unwrap_or(0);
    if rows == 0 {
        return;
    }
    let span = (rows - 1) * ld + ow;
    assert!(
        ld >= ow && off[..taps].iter().all(|&o| o <= src.len() && src.len() - o >= span),
        "taps_rows: a tap reads past its source"
    );
    let l = V::L;
    let (sp, yp, wp) = (src.as_ptr(), y.as_mut_ptr(), w.as_ptr());
    // SAFETY: every read is src[off[t] + r·ld + j + i] with r < rows, j + i < ow (checked above);
    // every write is y[r·ow + j + i] with j + i < ow, r < rows = y.len() / ow.
    unsafe {
        let (bv, add) = (V::splat(&bias), bias != 0.0);
        for r in 0..rows {
            let (s, yr) = (sp.add(r * ld), yp.add(r * ow));
            if ow < l {
                for j in 0..ow {
                    let mut a = 0.0f32;
                    for (t, &o) in off[..taps].iter().enumerate() {
                        a = _mm_cvtss_f32(_mm_fmadd_ss(
                            _mm_set_ss(*wp.add(t)),
                            _mm_set_ss(*s.add(o + j)),
                            _mm_set_ss(a),
                        ));
                    }
                    *yr.add(j) = if add { a + bias } else { a };
                }
                continue;
            }
            // Blocks of four vectors, then one block of the 1–4 vectors left, its last vector
            // overlapping the one before where the row ends inside it (the same values again).
            let mut j = 0;
            while j + 4 * l <= ow {
                row_block::<V, 4>(wp, &off[..taps], s, yr, [j, j + l, j + 2 * l, j + 3 * l], add, bv);
                j += 4 * l;
            }
            let last = ow - l;
            match (ow - j).div_ceil(l) {
                0 => {}
                1 => row_block::<V, 1>(wp, &off[..taps], s, yr, [last], add, bv),
                2 => row_block::<V, 2>(wp, &off[..taps], s, yr, [j, last], add, bv),
                3 => row_block::<V, 3>(wp, &off[..taps], s, yr, [j, j + l, last], add, bv),
                _ => row_block::<V, 4>(wp, &off[..taps], s, yr, [j, j + l, j + 2 * l, last], add, bv),
            }
        }
    }
}

/// `K` vectors of one output row of [`taps_rows`], at columns `at` (`yr[at[k]..][..L] = Σ_t
/// w[t] · s[off[t] + at[k]..]`, `+ bv` with `add`), held in registers across every tap.
///
/// # Safety
/// `V`'s instructions available; every `s[off[t] + at[k] ..][..L]` readable and `yr[at[k]..][..L]`
/// writable.
#[inline(always)]
unsafe fn row_block<V: Vf, const K: usize>(
    wp: *const f32,
    off: &[usize],
    s: *const f32,
    yr: *mut f32,
    at: [usize; K],
    add: bool,
    bv: V,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let mut a = [V::zero(); K];
        for (t, &o) in off.iter().enumerate() {
            let (wv, p) = (V::splat(wp.add(t)), s.add(o));
            for k in 0..K {
                a[k] = V::fma(wv, V::load(p.add(at[k])), a[k]);
            }
        }
        for k in 0..K {
            V::store(yr.add(at[k]), if add { V::add(a[k], bv) } else { a[k] });
        }
    }
}

/// A channels-innermost depthwise convolution ([`super::ClTaps`]), `y [H'·W', C]` from `x`,
/// `w [taps, C]`: one vector of channels at a time (the last one overlapping the one before
/// where `C` is not a whole number of vectors; the scalar `vfmadd…ss` below one vector), and
/// for it each output row in blocks of up to eight pixels held in registers across every tap
/// (one weight load per tap and block: loads per multiply-add 9/8, where one pixel's vectors
/// of channels take two). Taps in order, each a fused multiply-add from zero.
///
/// # Safety
/// The CPU must support `V`'s instructions. (Bounds are checked.)
#[inline(always)]
pub(super) unsafe fn taps_cl<V: Vf>(g: &super::ClTaps<'_>, w: &[f32], x: &[f32], y: &mut [f32]) {
    let (c, off) = (g.c, g.off);
    let Some(pixels) = g.oh.checked_mul(g.ow).filter(|&n| n > 0 && c > 0) else { return };
    assert!(g.fits(w.len(), x.len(), y.len()), "taps_cl: a tap reads past its weights or input");
    let (wp, xp, yp) = (w.as_ptr(), x.as_ptr(), y.as_mut_ptr());
    let l = V::L;
    if c < l {
        for px in 0..pixels {
            let o = (px / g.ow) * g.row + (px % g.ow) * g.col;
            for j in 0..c {
                let mut a = 0.0f32;
                for (t, &ot) in off.iter().enumerate() {
                    // SAFETY: FMA available in every caller (`V`'s instructions include it).
                    a = unsafe {
                        _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[t * c + j]), _mm_set_ss(x[o + ot + j]), _mm_set_ss(a)))
                    };
                }
                y[px * c + j] = a;
            }
        }
        return;
    }
    // SAFETY: reads w[t·C + j + i] (t < taps, j + i < C), x[oy·row + ox·col + off[t] + j + i]
    // (oy < H', ox < W', j + i < C) and writes y[(oy·W' + ox)·C + j + i]: all within the lengths
    // `fits` checked.
    unsafe {
        let mut j = 0;
        loop {
            let jj = j.min(c - l);
            for oy in 0..g.oh {
                let (xr, yr) = (xp.add(oy * g.row + jj), yp.add(oy * g.ow * c + jj));
                let blk = |ox: usize| (xr.add(ox * g.col), yr.add(ox * c));
                let mut ox = 0;
                while ox + 8 <= g.ow {
                    let (s, d) = blk(ox);
                    cl_block::<V, 8>(wp.add(jj), c, off, s, g.col, d);
                    ox += 8;
                }
                let (s, d) = blk(ox);
                match g.ow - ox {
                    1 => cl_block::<V, 1>(wp.add(jj), c, off, s, g.col, d),
                    2 => cl_block::<V, 2>(wp.add(jj), c, off, s, g.col, d),
                    3 => cl_block::<V, 3>(wp.add(jj), c, off, s, g.col, d),
                    4 => cl_block::<V, 4>(wp.add(jj), c, off, s, g.col, d),
                    5 => cl_block::<V, 5>(wp.add(jj), c, off, s, g.col, d),
                    6 => cl_block::<V, 6>(wp.add(jj), c, off, s, g.col, d),
                    7 => cl_block::<V, 7>(wp.add(jj), c, off, s, g.col, d),
                    _ => {}
                }
            }
            if jj + l >= c {
                break;
            }
            j += l;
        }
    }
}

/// `K` neighbouring output pixels of [`taps_cl`] for one vector of channels: `d[k·C..][..L] =
/// Σ_t w[t·C..][..L] · s[k·col + off[t]..][..L]` ([`cl_sums`]).
///
/// # Safety
/// `V`'s instructions available; every read and write within the caller's buffers.
#[inline(always)]
unsafe fn cl_block<V: Vf, const K: usize>(
    w: *const f32,
    c: usize,
    off: &[usize],
    s: *const f32,
    col: usize,
    d: *mut f32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for (k, a) in cl_sums::<V, K>(w, c, off, s, col).iter().enumerate() {
            V::store(d.add(k * c), *a);
        }
    }
}

/// The sums of `K` neighbouring output pixels for one vector of channels, `Σ_t w[t·C..][..L] ·
/// s[k·col + off[t]..][..L]` for `k < K`, held in registers across the taps (taps in order, each
/// a fused multiply-add from zero).
///
/// # Safety
/// `V`'s instructions available; every read within the caller's buffers.
#[inline(always)]
unsafe fn cl_sums<V: Vf, const K: usize>(w: *const f32, c: usize, off: &[usize], s: *const f32, col: usize) -> [V; K] {
    // SAFETY: the caller's contract.
    unsafe {
        let mut a = [V::zero(); K];
        for (t, &o) in off.iter().enumerate() {
            let (wv, p) = (V::load(w.add(t * c)), s.add(o));
            for (k, a) in a.iter_mut().enumerate() {
                *a = V::fma(wv, V::load(p.add(k * col)), *a);
            }
        }
        a
    }
}

/// [`super::depthwise_cl8`] (AVX2): each input row's channels moved into `xb` eight pixels at a
/// time (eight-by-eight transposes in registers; a row's last pixels as the last eight again,
/// masked loads in rows narrower than eight), the taps ([`taps_cl`] with one vector of eight
/// channels), then `yb` moved back eight pixels at a time (likewise; a plane of fewer than
/// eight pixels through a buffer).
///
/// # Safety
/// AVX2, FMA and F16C available. (Lengths are checked.)
#[inline(always)]
pub(super) unsafe fn depthwise_cl8(
    b: &super::ClBlock<'_>,
    x: &[f32],
    w: &[f32],
    xb: &mut [f32],
    yb: &mut [f32],
    y: &mut [f32],
) {
    assert!(b.fits(x.len(), w.len(), xb.len(), yb.len(), y.len()), "depthwise_cl8: a buffer is too short");
    let (hw, plane) = (b.h * b.w, b.taps.oh * b.taps.ow);
    // SAFETY: `fits` checked every extent: rows · H·W elements of x, the interior of xb
    // ((pt + H) rows of Wp, pl + W ≤ Wp), the taps within xb and yb, rows · H'·W' of y. A block
    // of eight pixels starts at most eight before a row's (or the plane's) end; the masked loads
    // of a narrower row read only its first n lanes, and the tail copy writes only n elements.
    unsafe {
        let xbp = xb.as_mut_ptr();
        for iy in 0..b.h {
            let dst = xbp.add(((iy + b.pt) * b.wp + b.pl) * 8);
            let mut ix = 0;
            while ix < b.w {
                // A row's last pixels: the last eight again where the row has eight (the same
                // values written twice), else masked loads.
                if ix + 8 > b.w && b.w >= 8 {
                    ix = b.w - 8;
                }
                let n = (b.w - ix).min(8);
                let src = x.as_ptr().add(iy * b.w + ix);
                let mut r = [_mm256_setzero_ps(); 8];
                if n == 8 {
                    for (i, v) in r.iter_mut().enumerate().take(b.rows) {
                        *v = Y::load(src.add(i * hw)).0;
                    }
                } else {
                    let m = lanes(n);
                    for (i, v) in r.iter_mut().enumerate().take(b.rows) {
                        *v = _mm256_maskload_ps(src.add(i * hw), m);
                    }
                }
                let t = transpose8(r);
                for (k, v) in t.iter().enumerate().take(n) {
                    Y::store(dst.add((ix + k) * 8), Y(*v));
                }
                ix += 8;
            }
        }
        let g = &b.taps;
        if g.ow >= 8 {
            // Rows of at least eight pixels: each block of eight pixels' sums transposed in
            // registers and stored straight into the channels' output rows (a row's last
            // pixels as its last eight again).
            let (xbp, yp) = (xb.as_ptr(), y.as_mut_ptr());
            for oy in 0..g.oh {
                let mut ox = 0;
                loop {
                    ox = ox.min(g.ow - 8);
                    let a = cl_sums::<Y, 8>(w.as_ptr(), 8, g.off, xbp.add(oy * g.row + ox * g.col), g.col);
                    let t = transpose8(a.map(|v| v.0));
                    for (i, v) in t.iter().enumerate().take(b.rows) {
                        Y::store(yp.add(i * plane + oy * g.ow + ox), Y(*v));
                    }
                    if ox + 8 >= g.ow {
                        break;
                    }
                    ox += 8;
                }
            }
            return;
        }
        taps_cl::<Y>(g, w, xb, yb);
        let (ybp, yp) = (yb.as_ptr(), y.as_mut_ptr());
        let mut px = 0;
        while px < plane {
            if px + 8 > plane && plane >= 8 {
                px = plane - 8;
            }
            let n = (plane - px).min(8);
            let mut r = [_mm256_setzero_ps(); 8];
            for (k, v) in r.iter_mut().enumerate().take(n) {
                *v = Y::load(ybp.add((px + k) * 8)).0;
            }
            let t = transpose8(r);
            if n == 8 {
                for (i, v) in t.iter().enumerate().take(b.rows) {
                    Y::store(yp.add(i * plane + px), Y(*v));
                }
            } else {
                // A plane of fewer than eight pixels: through a buffer (masked stores are
                // microcoded on AMD cores, tens of cycles each).
                let mut tail = [0.0f32; 8];
                for (i, v) in t.iter().enumerate().take(b.rows) {
                    Y::store(tail.as_mut_ptr(), Y(*v));
                    for (k, &e) in tail[..n].iter().enumerate() {
                        *yp.add(i * plane + px + k) = e;
                    }
                }
            }
            px += 8;
        }
    }
}

/// The mask of the first `n` (≤ 8) lanes, for `vmaskmovps` loads.
#[inline(always)]
unsafe fn lanes(n: usize) -> __m256i {
    const M: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
    // SAFETY: 8 - n.min(8) + 8 ≤ 16 elements of M.
    unsafe { _mm256_loadu_si256(M.as_ptr().add(8 - n.min(8)).cast()) }
}
