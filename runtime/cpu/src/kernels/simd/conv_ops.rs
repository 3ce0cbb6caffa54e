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
    matmul_kn_part(a, (m, m), k, b, n, y, ldy)
}

/// Whether [`matmul_kn_rows`] multiplies an `m × k` weight matrix packed per call (given enough
/// columns): a caller then gains by giving it long rows of patches per call, each packing paid
/// over more columns. x86 (AVX2, AVX-512) below 1 MiB of weights; never elsewhere.
pub fn packs_weights(m: usize, k: usize) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 => super::gemm_pa::takes(m, k, usize::MAX),
        _ => {
            let _ = (m, k);
            false
        }
    }
}

/// [`matmul_kn`] over `m` rows of a product of `whole_m` rows (`a` and `y` the part's rows): the
/// kernel is chosen for the whole product, so each row sums exactly as it would in the whole
/// (a layer split across threads by output channels gives the same bits).
pub fn matmul_kn_part(
    a: &[f32],
    (m, whole_m): (usize, usize),
    k: usize,
    b: &[f32],
    n: usize,
    y: &mut [f32],
    ldy: usize,
) {
    let y_len = if m == 0 { 0 } else { (m - 1) * ldy + n };
    assert!(a.len() >= m * k && b.len() >= k * n && y.len() >= y_len && ldy >= n, "matmul_kn: slices too short");
    let mm = (m, whole_m.max(m));
    by_tier!(avx2: x86::matmul_kn(a, mm, k, b, n, y, ldy), avx512: x86::matmul_kn_avx512(a, mm, k, b, n, y, ldy), other: {
        // One loop whatever the whole product: every part sums as the whole.
        let _ = mm;
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

/// The geometry of a channels-innermost depthwise convolution ([`taps_cl`]) over a padded input
/// `x [Hp, Wp, C]`: output pixel `(oy, ox)`'s tap `t` reads `x[oy·row + ox·col + off[t] ..][..C]`.
#[derive(Clone, Copy, Debug)]
pub struct ClTaps<'a> {
    /// Channels `C` (the innermost axis of `x`, `w` and `y`).
    pub c: usize,
    /// Output rows `H'`.
    pub oh: usize,
    /// Output columns `W'`.
    pub ow: usize,
    /// Elements of `x` between output rows' origins (`sh·Wp·C`).
    pub row: usize,
    /// Elements of `x` between neighbouring output pixels' origins (`sw·C`).
    pub col: usize,
    /// Each tap's offset from its output pixel's origin (`(ky·dh·Wp + kx·dw)·C`), in tap order.
    pub off: &'a [usize],
}

impl ClTaps<'_> {
    /// Whether `w`, `x` and `y` of these lengths hold every element [`taps_cl`] touches.
    pub fn fits(&self, w: usize, x: usize, y: usize) -> bool {
        let (c, taps) = (self.c, self.off.len());
        let Some(pixels) = self.oh.checked_mul(self.ow) else { return false };
        if pixels == 0 || c == 0 {
            return true;
        }
        let last = (self.oh - 1).checked_mul(self.row).zip((self.ow - 1).checked_mul(self.col));
        let Some(last) = last.and_then(|(a, b)| a.checked_add(b)) else { return false };
        taps.checked_mul(c).is_some_and(|n| n <= w)
            && pixels.checked_mul(c).is_some_and(|n| n <= y)
            && self.off.iter().all(|&o| last.checked_add(o).and_then(|e| e.checked_add(c)).is_some_and(|e| e <= x))
    }
}

/// `y[(oy·W' + ox)·C + c] = Σ_t w[t·C + c] · x[oy·row + ox·col + off[t] + c]` (taps in order):
/// a depthwise convolution channels-innermost over its padded input (weights `[taps, C]`, output
/// `[H'·W', C]`). x86: a vector of channels times up to eight neighbouring pixels in registers
/// across the taps, fused multiply-adds; elsewhere one pass per tap.
///
/// # Panics
/// When a tap reads past `w` or `x`, or `y` is shorter than `H'·W'·C`.
pub fn taps_cl(g: &ClTaps<'_>, w: &[f32], x: &[f32], y: &mut [f32]) {
    by_tier!(avx2: x86::taps_cl(g, w, x, y), avx512: x86::taps_cl_avx512(g, w, x, y), other: {
        assert!(g.fits(w.len(), x.len(), y.len()), "taps_cl: a tap reads past its weights or input");
        let c = g.c;
        for (px, yr) in y.chunks_exact_mut(c.max(1)).take(g.oh * g.ow).enumerate() {
            let o = (px / g.ow) * g.row + (px % g.ow) * g.col;
            yr.fill(0.0);
            for (t, &ot) in g.off.iter().enumerate() {
                for ((a, &wv), &v) in yr.iter_mut().zip(&w[t * c..(t + 1) * c]).zip(&x[o + ot..o + ot + c]) {
                    *a += wv * v;
                }
            }
        }
    })
}

/// One block of up to eight channels of a channels-innermost depthwise convolution
/// ([`depthwise_cl8`]): the channels' `H × W` planes moved into a padded `[Hp, Wp, 8]` plane,
/// their taps ([`ClTaps`] with `c = 8`) into `[H'·W', 8]`, and that moved back to the channels'
/// output planes.
#[derive(Clone, Copy, Debug)]
pub struct ClBlock<'a> {
    /// Channels in the block (1–8); the lanes past them compute zeros that are never stored.
    pub rows: usize,
    /// Input plane height `H`.
    pub h: usize,
    /// Input plane width `W`.
    pub w: usize,
    /// Zero rows above the input in the padded plane.
    pub pt: usize,
    /// Zero columns left of the input in the padded plane.
    pub pl: usize,
    /// Padded plane height `Hp ≥ pt + H`.
    pub hp: usize,
    /// Padded plane width `Wp ≥ pl + W`.
    pub wp: usize,
    /// The taps over the padded plane (`c = 8`, `row = sh·Wp·8`, `col = sw·8`).
    pub taps: ClTaps<'a>,
}

impl ClBlock<'_> {
    /// Whether buffers of these lengths hold everything [`depthwise_cl8`] reads and writes.
    pub fn fits(&self, x: usize, w: usize, xb: usize, yb: usize, y: usize) -> bool {
        let plane = self.taps.oh.checked_mul(self.taps.ow);
        let hw = self.h.checked_mul(self.w);
        (1..=8).contains(&self.rows)
            && self.taps.c == 8
            && self.pt.checked_add(self.h).is_some_and(|r| r <= self.hp)
            && self.pl.checked_add(self.w).is_some_and(|c| c <= self.wp)
            && self.hp.checked_mul(self.wp).and_then(|n| n.checked_mul(8)).is_some_and(|n| n <= xb)
            && hw.and_then(|n| n.checked_mul(self.rows)).is_some_and(|n| n <= x)
            && plane.and_then(|n| n.checked_mul(self.rows)).is_some_and(|n| n <= y)
            && self.taps.fits(w, xb, yb)
    }
}

/// A block of up to eight channels of a depthwise convolution, channels-innermost: `x [rows, H,
/// W]` moved into the interior of `xb [Hp, Wp, 8]` (whose border the caller has zeroed: only the
/// interior is written), `yb [H'·W', 8]` = the taps over `xb` with weights `w [taps, 8]`
/// ([`taps_cl`]'s sums, taps in order), then `y [rows, H'·W']` = `yb`'s first `rows` lanes.
/// x86 (AVX2 and AVX-512 CPUs): eight-by-eight transposes in registers, masked at the edges;
/// elsewhere element by element.
///
/// # Panics
/// When a buffer is shorter than the block needs ([`ClBlock::fits`]).
pub fn depthwise_cl8(b: &ClBlock<'_>, x: &[f32], w: &[f32], xb: &mut [f32], yb: &mut [f32], y: &mut [f32]) {
    by_tier!(avx2: x86::depthwise_cl8(b, x, w, xb, yb, y), avx512: x86::depthwise_cl8(b, x, w, xb, yb, y), other: {
        assert!(b.fits(x.len(), w.len(), xb.len(), yb.len(), y.len()), "depthwise_cl8: a buffer is too short");
        let hw = b.h * b.w;
        for r in 0..b.rows {
            for iy in 0..b.h {
                for ix in 0..b.w {
                    xb[((iy + b.pt) * b.wp + b.pl + ix) * 8 + r] = x[r * hw + iy * b.w + ix];
                }
            }
        }
        taps_cl(&b.taps, w, xb, yb);
        let plane = b.taps.oh * b.taps.ow;
        for r in 0..b.rows {
            for px in 0..plane {
                y[r * plane + px] = yb[px * 8 + r];
            }
        }
    })
}

/// The operands of [`matmul_kn_rows`]: `a [m, k]` (f32, row-major) and the implicit `B`, whose
/// row `kk` is `b[rows(kk) ..][..n]`. `rows` is a trait object, not a type parameter: it is
/// called once per row of `B` and block of `k` (the x86 kernels table the offsets before the
/// micro-kernels run), and as a type parameter every caller's closure compiled both tiers' GEMM
/// again (the kernel tests' four closures: 431 s, the slowest test target of a clean build).
pub struct KnRows<'a> {
    /// Rows of `a` (and of `y`).
    pub m: usize,
    /// Rows of the whole product the kernel is chosen for: `m`, or more where these rows are
    /// part of a product split across threads (each row then sums as in the whole).
    pub whole_m: usize,
    /// Columns of `a`, rows of `B`.
    pub k: usize,
    /// Columns of `B` (and of `y`).
    pub n: usize,
    /// The left matrix, `m · k` f32.
    pub a: &'a [f32],
    /// Where the rows of `B` lie.
    pub b: &'a [f32],
    /// The offset in `b` of each row of `B`.
    pub rows: &'a dyn Fn(usize) -> usize,
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
    rows: &dyn Fn(usize) -> usize,
    n: usize,
    y: &mut [f32],
    ldy: usize,
) {
    matmul_kn_rows_part(a, (m, m), k, b, rows, n, y, ldy)
}

/// [`matmul_kn_rows`] over `m` rows of a product of `whole_m` rows (as [`matmul_kn_part`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_kn_rows_part(
    a: &[f32],
    (m, whole_m): (usize, usize),
    k: usize,
    b: &[f32],
    rows: &dyn Fn(usize) -> usize,
    n: usize,
    y: &mut [f32],
    ldy: usize,
) {
    let y_len = if m == 0 { 0 } else { (m - 1) * ldy + n };
    assert!(a.len() >= m * k && y.len() >= y_len && ldy >= n, "matmul_kn_rows: slices too short");
    let p = KnRows { m, whole_m: whole_m.max(m), k, n, a, b, rows };
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
