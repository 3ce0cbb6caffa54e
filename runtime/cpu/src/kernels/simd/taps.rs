//! The depthwise convolution's inner product over taps (x86): `acc[j] = Σ_t w[t] · src[off[t] +
//! j]`, blocks of four vectors of `acc` kept in registers across every tap (one store per
//! element, instead of a load and a store of `acc` per tap).

use super::gemm::Vf;
use core::arch::x86_64::{_mm_cvtss_f32, _mm_fmadd_ss, _mm_set_ss};

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

/// `y[c] = Σ_i w[t_i·C + c] · x[o_i + c]` for `c < C = y.len()`, over the `(t_i, o_i)` pairs in
/// order: a channels-innermost depthwise convolution's output pixel (`t_i` a tap inside the
/// input, `o_i` its input pixel's offset in `x [H·W, C]`), four vectors of channels held in
/// registers across the taps.
///
/// # Safety
/// The CPU must support `V`'s instructions. (Bounds are checked.)
#[inline(always)]
pub(super) unsafe fn taps_cl<V: Vf>(w: &[f32], pairs: &[(usize, usize)], x: &[f32], y: &mut [f32]) {
    let c = y.len();
    assert!(
        pairs.iter().all(|&(t, o)| t.checked_mul(c).is_some_and(|at| at <= w.len() && w.len() - at >= c)
            && o <= x.len()
            && x.len() - o >= c),
        "taps_cl: a tap reads past its weights or input"
    );
    let (wp, xp, yp) = (w.as_ptr(), x.as_ptr(), y.as_mut_ptr());
    let l = V::L;
    let mut j = 0;
    // SAFETY: reads w[t·C + j + i] and x[o + j + i] with j + i < C (checked above); writes
    // y[j + i], j + i < C.
    unsafe {
        while j + 4 * l <= c {
            let mut a = [V::zero(); 4];
            for &(t, o) in pairs {
                let (pw, px) = (wp.add(t * c + j), xp.add(o + j));
                for (v, a) in a.iter_mut().enumerate() {
                    *a = V::fma(V::load(pw.add(v * l)), V::load(px.add(v * l)), *a);
                }
            }
            for (v, a) in a.iter().enumerate() {
                V::store(yp.add(j + v * l), *a);
            }
            j += 4 * l;
        }
        while j + l <= c {
            let mut a = V::zero();
            for &(t, o) in pairs {
                a = V::fma(V::load(wp.add(t * c + j)), V::load(xp.add(o + j)), a);
            }
            V::store(yp.add(j), a);
            j += l;
        }
    }
    for (jj, out) in y.iter_mut().enumerate().skip(j) {
        let mut a = 0.0f32;
        for &(t, o) in pairs {
            // SAFETY: FMA available in every caller (`V`'s instructions include it).
            a = unsafe { _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[t * c + jj]), _mm_set_ss(x[o + jj]), _mm_set_ss(a))) };
        }
        *out = a;
    }
}
