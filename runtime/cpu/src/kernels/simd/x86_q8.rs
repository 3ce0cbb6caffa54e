//! x86_64 entry points of the int8 products (the shared driver `q8_driver.rs` over the AVX-512
//! VNNI, AVX-VNNI and plain AVX2 kernels, exact sums and the in-tile finish) and of the int8 attention
//! internals' helpers: `#[target_feature]` wrappers that check lengths.

use super::{q8_512, q8_avx, q8_avx2, q8_i4_avx2};

/// [`super::abs_max`] on AVX-512F.
///
/// # Safety
/// The CPU must support AVX-512F (plus AVX2, FMA, F16C).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn abs_max_avx512(x: &[f32]) -> Option<f32> {
    // SAFETY: features per the contract; the kernel reads x.len() floats.
    unsafe { q8_512::abs_max(x.as_ptr(), x.len()) }
}

/// [`super::transpose_f32`] on AVX-512F.
///
/// # Safety
/// The CPU must support AVX-512F (plus AVX2, FMA, F16C).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn transpose_f32_avx512(
    src: &[f32],
    rows: usize,
    cols: usize,
    ld_src: usize,
    dst: &mut [f32],
    ld_dst: usize,
) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(ld_src >= cols && ld_dst >= rows);
    assert!(src.len() >= (rows - 1) * ld_src + cols && dst.len() >= (cols - 1) * ld_dst + rows);
    // SAFETY: features per the contract; lengths checked.
    unsafe { q8_512::transpose_f32(src.as_ptr(), rows, cols, ld_src, dst.as_mut_ptr(), ld_dst) }
}

/// [`super::quantize_rows_i8`] on AVX-512 (F/BW).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW (plus AVX2, FMA, F16C).
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn quantize_rows_i8_avx512(src: super::StridedRows<'_>, q: &mut [i8], scales: &mut [f32]) -> bool {
    let super::StridedRows { src: x, rows, cols, stride } = src;
    if rows == 0 {
        return true;
    }
    assert!(x.len() >= (rows - 1) * stride + cols && q.len() >= rows * cols && scales.len() >= rows);
    // SAFETY: features per the contract; lengths checked.
    unsafe { q8_512::quantize_rows(src, q.as_mut_ptr(), scales.as_mut_ptr()) }
}

super::q8_driver::q8_entry_points!(
    q8_512::Avx512Vnni,
    "avx512f,avx512bw,avx512vnni,avx2,fma,f16c",
    "AVX-512 VNNI",
    q8_i8_avx512vnni,
    q8_dense_i8_avx512vnni
);

super::q8_driver::q8_entry_points!(
    q8_avx::AvxVnni,
    "avx2,fma,f16c,avxvnni",
    "AVX-VNNI (256-bit)",
    q8_i8_avxvnni,
    q8_dense_i8_avxvnni
);

super::q8_driver::q8_entry_points!(
    q8_avx2::Avx2,
    "avx2,fma,f16c",
    "AVX2 (`vpmaddubsw`, no VNNI)",
    q8_i8_avx2,
    q8_dense_i8_avx2
);

/// int4 weights × calibrated int8 activations on plain AVX2 ([`super::q8_i4_avx2`]): `y`
/// overwritten with the portable loop's f32 values, bit for bit.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. (Lengths are checked.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q8_i4_avx2(op: &super::Q8Int4<'_>, y: &mut [f32]) {
    // SAFETY: features per the contract; the kernel checks lengths.
    unsafe { q8_i4_avx2::q8_i4(op, y) }
}
