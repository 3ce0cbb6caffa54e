//! The convolution kernels' x86 entry points, one per ISA: the `W · patches` GEMM over a
//! row-major or an implicit (row-offset) `B`, and the depthwise taps (planar and
//! channels-innermost). Re-exported by `x86.rs`; the generic bodies are in `gemm.rs` and
//! `taps.rs`.

use super::gemm::{self, Vf};
use super::gemm_pa;

/// One ISA's entry points: the same bodies, the target features, vector type `$v` and
/// micro-kernel rows `$mr` of that ISA. Where `n` fits in one vector of columns, the GEMMs
/// take a one-vector tile (a two-vector tile would be half padding).
macro_rules! conv_entry_points {
    ($features:literal, $needs:literal, $v:ty, $mr:literal, $tile:literal,
     $kn:ident, $kn_rows:ident, $pa:ident, $taps:ident, $taps_rows:ident, $taps_cl:ident) => {
        #[doc = concat!("[`gemm_pa::gemm_pa`] with the ", $tile, " micro-kernel: its own frame (its stack buffers, ~72 KiB, never add to the row-major path's).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; as [`gemm_pa::gemm_pa`] on `y`.")]
        #[target_feature(enable = $features)]
        #[inline(never)]
        unsafe fn $pa(p: &super::KnRows<'_>, y: *mut f32, ldy: usize) {
            // SAFETY: the caller's contract.
            unsafe { gemm_pa::gemm_pa::<$v, $mr, 2>(p, y, ldy) }
        }

        #[doc = concat!("`y [m, n] = a [m, k] · b [k, n]` (f32, row-major, `y`'s rows at stride `ldy`; see [`gemm::gemm_kn`]) with the ", $tile, " micro-kernel; over weights packed per call where [`gemm_pa::takes`] ([`gemm_pa::gemm_pa`]) for `whole_m` rows (`m`, or the rows of the whole product these `m` are part of: every part then sums as the whole).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, ". (Lengths are checked.)")]
        #[target_feature(enable = $features)]
        pub unsafe fn $kn(a: &[f32], (m, whole_m): (usize, usize), k: usize, b: &[f32], n: usize, y: &mut [f32], ldy: usize) {
            assert!(ldy >= n && (m == 0 || y.len() >= (m - 1) * ldy + n));
            // SAFETY: y is exclusively borrowed and holds m rows of n at stride ldy.
            unsafe {
                if gemm_pa::takes(whole_m, k, n) {
                    assert!(b.len() >= k * n, "matmul_kn: b is shorter than k·n");
                    $pa(&super::KnRows { m, whole_m, k, n, a, b, rows: &|kk| kk * n }, y.as_mut_ptr(), ldy)
                } else if n <= <$v>::L {
                    gemm::gemm_kn::<$v, $mr, 1>(a, m, k, b, n, y.as_mut_ptr(), ldy)
                } else {
                    gemm::gemm_kn::<$v, $mr, 2>(a, m, k, b, n, y.as_mut_ptr(), ldy)
                }
            }
        }

        #[doc = concat!("`y [m, n] = a [m, k] · B`, row `kk` of `B` at `b[rows(kk)..][..n]` ([`super::KnRows`]; see [`gemm::gemm_kn_rows`]), with the ", $tile, " micro-kernel; over weights packed per call where [`gemm_pa::takes`] ([`gemm_pa::gemm_pa`]).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, ". (Lengths are checked.)")]
        #[target_feature(enable = $features)]
        pub unsafe fn $kn_rows(p: &super::KnRows<'_>, y: &mut [f32], ldy: usize) {
            assert!(ldy >= p.n && (p.m == 0 || y.len() >= (p.m - 1) * ldy + p.n));
            // SAFETY: y is exclusively borrowed and holds m rows of n at stride ldy.
            unsafe {
                if gemm_pa::takes(p.whole_m, p.k, p.n) {
                    $pa(p, y.as_mut_ptr(), ldy)
                } else if p.n <= <$v>::L {
                    gemm::gemm_kn_rows::<$v, $mr, 1>(p, y.as_mut_ptr(), ldy)
                } else {
                    gemm::gemm_kn_rows::<$v, $mr, 2>(p, y.as_mut_ptr(), ldy)
                }
            }
        }

        #[doc = concat!("[`super::taps`] with ", stringify!($v), " vectors.")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, ". (Bounds are checked.)")]
        #[target_feature(enable = $features)]
        pub unsafe fn $taps(w: &[f32], off: &[usize], src: &[f32], acc: &mut [f32]) {
            // SAFETY: the target features per this function's contract.
            unsafe { super::taps::taps::<$v>(w, off, src, acc) }
        }

        #[doc = concat!("[`super::taps_rows`] with ", stringify!($v), " vectors.")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, ". (Bounds are checked.)")]
        #[target_feature(enable = $features)]
        pub unsafe fn $taps_rows(w: &[f32], off: &[usize], src: &[f32], ld: usize, bias: f32, ow: usize, y: &mut [f32]) {
            // SAFETY: the target features per this function's contract.
            unsafe { super::taps::taps_rows::<$v>(w, off, src, ld, bias, ow, y) }
        }

        #[doc = concat!("[`super::taps_cl`] with ", stringify!($v), " vectors.")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, ". (Bounds are checked.)")]
        #[target_feature(enable = $features)]
        pub unsafe fn $taps_cl(g: &super::ClTaps<'_>, w: &[f32], x: &[f32], y: &mut [f32]) {
            // SAFETY: the target features per this function's contract.
            unsafe { super::taps::taps_cl::<$v>(g, w, x, y) }
        }
    };
}

conv_entry_points!(
    "avx2,fma,f16c",
    "AVX2, FMA and F16C",
    gemm::Y,
    6,
    "6×16 AVX2",
    matmul_kn,
    matmul_kn_rows,
    matmul_pa,
    taps,
    taps_rows,
    taps_cl
);
conv_entry_points!(
    "avx512f,avx2,fma,f16c",
    "AVX-512F, AVX2, FMA and F16C",
    gemm::Z,
    8,
    "8×32 AVX-512",
    matmul_kn_avx512,
    matmul_kn_rows_avx512,
    matmul_pa_avx512,
    taps_avx512,
    taps_rows_avx512,
    taps_cl_avx512
);

/// [`super::depthwise_cl8`] with AVX2 vectors (eight lanes: the block's width, also on AVX-512
/// CPUs).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn depthwise_cl8(
    b: &super::ClBlock<'_>,
    x: &[f32],
    w: &[f32],
    xb: &mut [f32],
    yb: &mut [f32],
    y: &mut [f32],
) {
    // SAFETY: the target features per this function's contract.
    unsafe { super::taps::depthwise_cl8(b, x, w, xb, yb, y) }
}
