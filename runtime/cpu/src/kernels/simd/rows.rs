//! Row kernels dispatched by ISA (AVX-512 where the CPU has it, else portable loops): the
//! LayerNorm rows, the per-row int8 quantiser and absolute maximum of the int8 attention
//! internals, a strided 2-D transpose, AFT-local's window weights and weighted row sums.

use super::{axpy, isa};
#[cfg(target_arch = "x86_64")]
use super::{has_avx512_vnni, x86, Isa};

/// Layer norm over rows of `d` contiguous features with γ and β decoded (`g`, `b`), where the
/// CPU has a vector kernel (AVX-512: [`x86::layer_norm_rows_avx512`]); false elsewhere (the
/// caller's portable loop runs).
#[inline]
pub fn layer_norm_rows(x: &[f32], y: &mut [f32], d: usize, g: &[f32], b: &[f32], eps: f32) -> bool {
    debug_assert!(x.len() == y.len() && x.len().is_multiple_of(d.max(1)) && g.len() >= d && b.len() >= d);
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F (and AVX2/FMA) detected; lengths as asserted by the callers.
        Isa::Avx512 if d > 0 && g.len() >= d && b.len() >= d && x.len() == y.len() => {
            unsafe { x86::layer_norm_rows_avx512(x, y, d, g, b, eps) };
            true
        }
        _ => {
            let _ = (x, y, d, g, b, eps);
            false
        }
    }
}

/// `rows` rows of `cols` floats in `src`, row `r` at `src[r·stride..]`: the input of the
/// per-row int8 quantiser ([`quantize_rows_i8`]).
#[derive(Clone, Copy, Debug)]
pub struct StridedRows<'a> {
    /// The floats.
    pub src: &'a [f32],
    /// Rows.
    pub rows: usize,
    /// Floats per row.
    pub cols: usize,
    /// Floats from one row's start to the next (`>= cols`).
    pub stride: usize,
}

/// Quantises the rows of `src` to int8 with a scale per row, `max|x| / 127` (0 for an all-zero
/// row), rounding to nearest even: into `q` (`rows·cols`, contiguous) and `scales` (`rows`).
/// Returns false if a row holds ∞ or NaN (the caller then keeps f32 arithmetic; what was
/// written is meaningless). AVX-512 (F/BW): vector kernel; elsewhere the portable loop (the
/// same bytes and scales).
pub fn quantize_rows_i8(src: StridedRows<'_>, q: &mut [i8], scales: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 && has_avx512_vnni() {
        // SAFETY: AVX-512F/BW (with AVX2/FMA/F16C) detected; the kernel checks lengths.
        return unsafe { x86::quantize_rows_i8_avx512(src, q, scales) };
    }
    quantize_rows_i8_scalar(src, q, scales)
}

/// The portable [`quantize_rows_i8`].
pub fn quantize_rows_i8_scalar(src: StridedRows<'_>, q: &mut [i8], scales: &mut [f32]) -> bool {
    let StridedRows { src, rows, cols, stride } = src;
    for r in 0..rows {
        let row = &src[r * stride..r * stride + cols];
        if !row.iter().all(|v| v.is_finite()) {
            return false;
        }
        let scale = row.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        scales[r] = scale;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for (o, &v) in q[r * cols..(r + 1) * cols].iter_mut().zip(row) {
            // |v · inv| ≤ 127 up to one rounding: no clamp needed.
            *o = libm::rintf(v * inv) as i8;
        }
    }
    true
}

/// `max |x|` (0 for an empty slice), or `None` if an element is ∞ or NaN: AVX-512 vector
/// kernel, elsewhere the portable fold.
pub fn abs_max(x: &[f32]) -> Option<f32> {
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 {
        // SAFETY: AVX-512F (with AVX2/FMA/F16C) detected.
        return unsafe { x86::abs_max_avx512(x) };
    }
    x.iter().all(|v| v.is_finite()).then(|| x.iter().fold(0f32, |m, v| m.max(v.abs())))
}

/// `dst[c·ld_dst + r] = src[r·ld_src + c]` for `r < rows`, `c < cols` (a strided 2-D
/// transpose; other elements of `dst` untouched): 16 × 16 register blocks on AVX-512, else the
/// element loop.
pub fn transpose_f32(src: &[f32], rows: usize, cols: usize, ld_src: usize, dst: &mut [f32], ld_dst: usize) {
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 {
        // SAFETY: AVX-512F (with AVX2/FMA/F16C) detected; the kernel checks lengths.
        return unsafe { x86::transpose_f32_avx512(src, rows, cols, ld_src, dst, ld_dst) };
    }
    for r in 0..rows {
        for c in 0..cols {
            dst[c * ld_dst + r] = src[r * ld_src + c];
        }
    }
}

/// `band[j] ← exp(band[j] − m) − exp(−m)` for `m ≥ max(band, 0)` (AFT-local's window weights):
/// AVX-512 vector kernel (within 2e-6 relative of f64, `runtime/cpu/tests/simd.rs`), elsewhere
/// the scalar [`crate::math::exp_excess`].
pub fn exp_excess(band: &mut [f32], m: f32) {
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 {
        // SAFETY: AVX-512F (with AVX2/FMA/F16C) detected.
        return unsafe { x86::exp_excess_avx512(band, m) };
    }
    band.iter_mut().for_each(|w| *w = crate::math::exp_excess(*w, m));
}

/// `y += Σ_j a[j] · x[j·d..(j+1)·d]` with `d = y.len()` (a weighted sum of `a.len()` rows):
/// AVX-512 holds 64 columns of `y` in registers across the rows; elsewhere one [`axpy`] per row.
pub fn axpy_rows(y: &mut [f32], a: &[f32], x: &[f32]) {
    let d = y.len();
    assert!(x.len() >= a.len() * d, "axpy_rows: {} rows of {d} in {} values", a.len(), x.len());
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 {
        // SAFETY: AVX-512F (with AVX2/FMA/F16C) detected; x's length checked.
        return unsafe { x86::axpy_rows_avx512(y, a, x) };
    }
    for (j, &aj) in a.iter().enumerate() {
        axpy(y, aj, &x[j * d..(j + 1) * d]);
    }
}
