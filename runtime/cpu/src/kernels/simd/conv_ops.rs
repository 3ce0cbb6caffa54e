//! The convolution products and the depthwise taps, dispatched per ISA: `W · patches` over a
//! row-major or an implicit (row-offset) `B`, and the depthwise taps (planar into an
//! accumulator, planar row by row into the output, channels-innermost). x86 entry points in
//! `x86_conv.rs`, bodies in `gemm.rs` and `taps.rs`; the plain loops here elsewhere.

#[cfg(target_arch = "x86_64")]
use super::x86;
use super::{axpy, isa, Isa};

/// `y [m, n] = a [m, k] · b [k, n]`, f32 row-major, `y`'s rows at stride `ldy ≥ n` (a
/// convolution's weights times its patches, or times its input for a 1×1 convolution: no
/// transposes). x86: the register-blocked GEMM micro-kernels reading `b` in place; elsewhere one
/// [`axpy`] per `(row, k)`. Each output sums over `k` in order. Panics if a slice is too short.
pub fn matmul_kn(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, y: &mut [f32], ldy: usize) {
    let y_len = if m == 0 { 0 } else { (m - 1) * ldy + n };
    assert!(a.len() >= m * k && b.len() >= k * n && y.len() >= y_len && ldy >= n, "matmul_kn: slices too short");
    by_tier!(avx2: x86::matmul_kn(a, m, k, b, n, y, ldy), avx512: x86::matmul_kn_avx512(a, m, k, b, n, y, ldy), other: {
        for o in 0..m {
            let yr = &mut y[o * ldy..o * ldy + n];
            yr.fill(0.0);
            for kk in 0..k {
                axpy(yr, a[o * k + kk], &b[kk * n..(kk + 1) * n]);
            }
        }
    })
}

/// `acc[j] = Σ_t w[t] · src[off[t] + j]` (taps in order): a depthwise convolution's taps over
/// its stride-phase planes. x86: four vectors of `acc` held in registers across every tap, one
/// fused multiply-add per tap and element (AVX-512: 16 lanes); elsewhere one pass per tap.
///
/// # Panics
/// When a tap reads past `src` (`off[t] + acc.len() > src.len()`) or `off` is shorter than `w`.
pub fn taps(w: &[f32], off: &[usize], src: &[f32], acc: &mut [f32]) {
    assert!(off.len() >= w.len(), "taps: {} offsets for {} weights", off.len(), w.len());
    by_tier!(avx2: x86::taps(w, off, src, acc), avx512: x86::taps_avx512(w, off, src, acc), other: {
        let n = acc.len();
        acc.fill(0.0);
        for (&wv, &o) in w.iter().zip(off) {
            for (a, &v) in acc.iter_mut().zip(&src[o..o + n]) {
                *a += wv * v;
            }
        }
    })
}

/// The vector width of [`taps_rows`] on this CPU: rows narrower than it run element by element,
/// and a row of `ow` columns computes `ow` rounded up to it (its last vector overlapping), so a
/// caller with an alternative (the accumulator path of [`taps`], whose rows run together into
/// vectors) compares the two.
pub fn taps_rows_lanes() -> usize {
    match isa() {
        Isa::Avx2 | Isa::Avx2Vnni => 8,
        // AVX-512's 16 lanes; elsewhere the plain loops, whose per-row passes cost more than the
        // accumulator's bias pass and copy on short rows.
        _ => 16,
    }
}

/// [`taps`] row by row into an output plane `y [rows, ow]` whose rows lie `ld` apart in `src`,
/// `+ bias` after the taps when `bias ≠ 0`: bit for bit what [`taps`] into an accumulator of rows
/// `ld` apart, the bias added over it and each row copied out give, in one pass. x86: four
/// vectors of a row in registers across every tap, the row's last partial vector overlapping the
/// one before (rows narrower than a vector element by element); elsewhere one pass per tap.
///
/// # Panics
/// When a tap reads past `src` (`off[t] + (rows − 1)·ld + ow > src.len()`), `ld < ow`, or `off`
/// is shorter than `w`.
pub fn taps_rows(w: &[f32], off: &[usize], src: &[f32], ld: usize, bias: f32, ow: usize, y: &mut [f32]) {
    assert!(off.len() >= w.len(), "taps_rows: {} offsets for {} weights", off.len(), w.len());
    by_tier!(avx2: x86::taps_rows(w, off, src, ld, bias, ow, y), avx512: x86::taps_rows_avx512(w, off, src, ld, bias, ow, y), other: {
        let rows = y.len().checked_div(ow).unwrap_or(0);
        let span = rows.saturating_sub(1) * ld + ow;
        assert!(
            rows == 0 || (ld >= ow && off[..w.len()].iter().all(|&o| o <= src.len() && src.len() - o >= span)),
            "taps_rows: a tap reads past its source"
        );
        for (r, yr) in y.chunks_exact_mut(ow.max(1)).take(rows).enumerate() {
            yr.fill(0.0);
            for (&wv, &o) in w.iter().zip(off) {
                for (a, &v) in yr.iter_mut().zip(&src[o + r * ld..o + r * ld + ow]) {
                    *a += wv * v;
                }
            }
            if bias != 0.0 {
                yr.iter_mut().for_each(|a| *a += bias);
            }
        }
    })
}

/// `y[c] = Σ_i w[t_i·C + c] · x[o_i + c]` (`C = y.len()`, pairs `(t_i, o_i)` in order): one
/// output pixel of a channels-innermost depthwise convolution (weights `[taps, C]`, input
/// `[H·W, C]`). x86: four vectors of channels in registers across the taps, fused
/// multiply-adds; elsewhere one pass per tap.
///
/// # Panics
/// When a pair reads past `w` or `x`.
pub fn taps_cl(w: &[f32], pairs: &[(usize, usize)], x: &[f32], y: &mut [f32]) {
    by_tier!(avx2: x86::taps_cl(w, pairs, x, y), avx512: x86::taps_cl_avx512(w, pairs, x, y), other: {
        let c = y.len();
        y.fill(0.0);
        for &(t, o) in pairs {
            for ((a, &wv), &v) in y.iter_mut().zip(&w[t * c..(t + 1) * c]).zip(&x[o..o + c]) {
                *a += wv * v;
            }
        }
    })
}

/// The operands of [`matmul_kn_rows`]: `a [m, k]` (f32, row-major) and the implicit `B`, whose
/// row `kk` is `b[rows(kk) ..][..n]`.
pub struct KnRows<'a, F> {
    /// Rows of `a` (and of `y`).
    pub m: usize,
    /// Columns of `a`, rows of `B`.
    pub k: usize,
    /// Columns of `B` (and of `y`).
    pub n: usize,
    /// The left matrix, `m · k` f32.
    pub a: &'a [f32],
    /// Where the rows of `B` lie.
    pub b: &'a [f32],
    /// The offset in `b` of each row of `B`.
    pub rows: F,
}

/// `y [m, n] = a [m, k] · B` (row stride `ldy`) where row `kk` of the implicit `B` is
/// `b[rows(kk) ..][..n]` — a convolution's patches read in place from its input's phase planes.
/// x86: [`matmul_kn`]'s micro-kernels through a per-block offset table; elsewhere one axpy per
/// `(row of a, kk)`. Each output sums over `kk` in order (within blocks of 256 on x86).
///
/// # Panics
/// When `a`, `y` or a row of `B` (`rows(kk) + n > b.len()`) is out of bounds.
#[allow(clippy::too_many_arguments)]
pub fn matmul_kn_rows(
    a: &[f32],
    m: usize,
    k: usize,
    b: &[f32],
    rows: impl Fn(usize) -> usize,
    n: usize,
    y: &mut [f32],
    ldy: usize,
) {
    let y_len = if m == 0 { 0 } else { (m - 1) * ldy + n };
    assert!(a.len() >= m * k && y.len() >= y_len && ldy >= n, "matmul_kn_rows: slices too short");
    let p = KnRows { m, k, n, a, b, rows };
    by_tier!(
        avx2: x86::matmul_kn_rows(&p, y, ldy),
        avx512: x86::matmul_kn_rows_avx512(&p, y, ldy),
        other: {
            for o in 0..m {
                let yr = &mut y[o * ldy..o * ldy + n];
                yr.fill(0.0);
                for kk in 0..k {
                    let off = (p.rows)(kk);
                    assert!(off <= b.len() && b.len() - off >= n, "matmul_kn_rows: row {kk} outside b");
                    axpy(yr, a[o * k + kk], &b[off..off + n]);
                }
            }
        }
    )
}
