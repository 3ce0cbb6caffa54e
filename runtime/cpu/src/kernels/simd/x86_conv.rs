//! The convolution kernels' x86 entry points, one per ISA: the `W · patches` GEMM over a
//! row-major or an implicit (row-offset) `B`, and the depthwise taps (planar and
//! channels-innermost). Re-exported by `x86.rs`; the generic bodies are in `gemm.rs` and
//! `taps.rs`.

use super::gemm;

/// `y [m, n] = a [m, k] · b [k, n]` (f32, row-major, `y`'s rows at stride `ldy`; see
/// [`gemm::gemm_kn`]) with the 6×16 AVX2 micro-kernel.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_kn(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, y: &mut [f32], ldy: usize) {
    assert!(ldy >= n && (m == 0 || y.len() >= (m - 1) * ldy + n));
    // SAFETY: y is exclusively borrowed and holds m rows of n at stride ldy.
    unsafe {
        if n <= 8 {
            // One vector of columns: a 16-wide tile would be half padding.
            gemm::gemm_kn::<gemm::Y, 6, 1>(a, m, k, b, n, y.as_mut_ptr(), ldy)
        } else {
            gemm::gemm_kn::<gemm::Y, 6, 2>(a, m, k, b, n, y.as_mut_ptr(), ldy)
        }
    }
}

/// [`matmul_kn`] with the 8×32 AVX-512 micro-kernel.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2, FMA and F16C. (Lengths are checked.)
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn matmul_kn_avx512(a: &[f32], m: usize, k: usize, b: &[f32], n: usize, y: &mut [f32], ldy: usize) {
    assert!(ldy >= n && (m == 0 || y.len() >= (m - 1) * ldy + n));
    // SAFETY: y is exclusively borrowed and holds m rows of n at stride ldy.
    unsafe {
        if n <= 16 {
            // One vector of columns (a 4×4 map): a 32-wide tile would be half padding.
            gemm::gemm_kn::<gemm::Z, 8, 1>(a, m, k, b, n, y.as_mut_ptr(), ldy)
        } else {
            gemm::gemm_kn::<gemm::Z, 8, 2>(a, m, k, b, n, y.as_mut_ptr(), ldy)
        }
    }
}

/// `y [m, n] = a [m, k] · B`, row `kk` of `B` at `b[rows(kk)..][..n]` (see
/// [`gemm::gemm_kn_rows`]), with the 6×16 AVX2 micro-kernel.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_kn_rows(
    a: &[f32],
    m: usize,
    k: usize,
    b: &[f32],
    rows: impl Fn(usize) -> usize,
    n: usize,
    y: &mut [f32],
    ldy: usize,
) {
    assert!(ldy >= n && (m == 0 || y.len() >= (m - 1) * ldy + n));
    // SAFETY: y is exclusively borrowed and holds m rows of n at stride ldy.
    unsafe {
        if n <= 8 {
            gemm::gemm_kn_rows::<gemm::Y, 6, 1>(a, m, k, b, rows, n, y.as_mut_ptr(), ldy)
        } else {
            gemm::gemm_kn_rows::<gemm::Y, 6, 2>(a, m, k, b, rows, n, y.as_mut_ptr(), ldy)
        }
    }
}

/// [`matmul_kn_rows`] with the 8×32 AVX-512 micro-kernel.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2, FMA and F16C. (Lengths are checked.)
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_kn_rows_avx512(
    a: &[f32],
    m: usize,
    k: usize,
    b: &[f32],
    rows: impl Fn(usize) -> usize,
    n: usize,
    y: &mut [f32],
    ldy: usize,
) {
    assert!(ldy >= n && (m == 0 || y.len() >= (m - 1) * ldy + n));
    // SAFETY: y is exclusively borrowed and holds m rows of n at stride ldy.
    unsafe {
        if n <= 16 {
            gemm::gemm_kn_rows::<gemm::Z, 8, 1>(a, m, k, b, rows, n, y.as_mut_ptr(), ldy)
        } else {
            gemm::gemm_kn_rows::<gemm::Z, 8, 2>(a, m, k, b, rows, n, y.as_mut_ptr(), ldy)
        }
    }
}

/// [`super::taps`] with 8-lane vectors.
///
/// # Safety
/// The CPU must support AVX2 and FMA. (Bounds are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn taps(w: &[f32], off: &[usize], src: &[f32], acc: &mut [f32]) {
    // SAFETY: AVX2/FMA per this function's contract.
    unsafe { super::taps::taps::<gemm::Y>(w, off, src, acc) }
}

/// [`super::taps`] with 16-lane vectors.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA. (Bounds are checked.)
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn taps_avx512(w: &[f32], off: &[usize], src: &[f32], acc: &mut [f32]) {
    // SAFETY: AVX-512F per this function's contract.
    unsafe { super::taps::taps::<gemm::Z>(w, off, src, acc) }
}

/// [`super::taps_cl`] with 8-lane vectors.
///
/// # Safety
/// The CPU must support AVX2 and FMA. (Bounds are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn taps_cl(w: &[f32], pairs: &[(usize, usize)], x: &[f32], y: &mut [f32]) {
    // SAFETY: AVX2/FMA per this function's contract.
    unsafe { super::taps::taps_cl::<gemm::Y>(w, pairs, x, y) }
}

/// [`super::taps_cl`] with 16-lane vectors.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA. (Bounds are checked.)
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn taps_cl_avx512(w: &[f32], pairs: &[(usize, usize)], x: &[f32], y: &mut [f32]) {
    // SAFETY: AVX-512F per this function's contract.
    unsafe { super::taps::taps_cl::<gemm::Z>(w, pairs, x, y) }
}
