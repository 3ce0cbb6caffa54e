//! x86_64 entry points of the int8 attention internals and of the in-tile int8 finish (see
//! [`super::q8_dense_i8`]): `#[target_feature]` wrappers that check lengths and call the
//! AVX-512 (`q8_512`) and AVX-VNNI (`q8_avx`) kernels.

use super::{q8_512, q8_avx};

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
pub unsafe fn quantize_rows_i8_avx512(
    src: &[f32],
    rows: usize,
    cols: usize,
    stride: usize,
    q: &mut [i8],
    scales: &mut [f32],
) -> bool {
    if rows == 0 {
        return true;
    }
    assert!(src.len() >= (rows - 1) * stride + cols && q.len() >= rows * cols && scales.len() >= rows);
    // SAFETY: features per the contract; lengths checked.
    unsafe { q8_512::quantize_rows(src.as_ptr(), rows, cols, stride, q.as_mut_ptr(), scales.as_mut_ptr()) }
}

/// `y[r·out + o] = f32(Σ_k q(x[r, k]) · w[o, k]) · scales[o] · x_scale (+ bias[o])`, the exact
/// sums of [`q8_i8_avx512vnni`] finished to f32 inside the packed GEMM's tiles (no zeroing
/// pass, no second pass over `y`). `y` is overwritten. For `rows >= q8_512::GEMV_MAX_ROWS` and
/// `cols > 0`; returns false, touching nothing, otherwise.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI (plus AVX2, FMA, F16C).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub unsafe fn q8_dense_i8_avx512vnni(
    x: &[f32],
    rows: usize,
    inv: f32,
    w: &[i8],
    cols: usize,
    out: usize,
    fin: &super::Q8Finish<'_>,
    y: &mut [f32],
) -> bool {
    let Some(acc) = finish_target(x, rows, w, cols, out, fin, y) else { return false };
    // SAFETY: features per the contract; lengths checked by `finish_target`.
    unsafe { q8_512::gemm(x, rows, inv, w, cols, out, acc, Some(fin)) };
    true
}

/// The in-tile finishes' shared checks: `y`'s first `rows·out` values as the i32 accumulator
/// the GEMM finishes in, or `None` where the packed GEMM does not take the shape (fewer than
/// [`super::Q8_FUSED_MIN_ROWS`] rows, no inputs, or inputs past the exact i32 range). Panics
/// on slices shorter than the shape.
fn finish_target<'y>(
    x: &[f32],
    rows: usize,
    w: &[i8],
    cols: usize,
    out: usize,
    fin: &super::Q8Finish<'_>,
    y: &'y mut [f32],
) -> Option<&'y mut [i32]> {
    if rows < super::Q8_FUSED_MIN_ROWS || cols == 0 || cols > super::Q8_EXACT_MAX_COLS {
        return None;
    }
    assert!(x.len() >= rows * cols && w.len() >= out * cols && y.len() >= rows * out);
    assert!(fin.scales.len() >= out && fin.bias.is_none_or(|b| b.len() >= out));
    Some(bytemuck::cast_slice_mut(&mut y[..rows * out]))
}

/// [`q8_dense_i8_avx512vnni`] at 256 bits with AVX-VNNI ([`super::q8_avx`]).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-VNNI.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn q8_dense_i8_avxvnni(
    x: &[f32],
    rows: usize,
    inv: f32,
    w: &[i8],
    cols: usize,
    out: usize,
    fin: &super::Q8Finish<'_>,
    y: &mut [f32],
) -> bool {
    let Some(acc) = finish_target(x, rows, w, cols, out, fin, y) else { return false };
    // SAFETY: features per the contract; lengths checked by `finish_target`.
    unsafe { q8_avx::gemm(x, rows, inv, w, cols, out, acc, Some(fin)) };
    true
}

const _: () = assert!(q8_512::GEMV_MAX_ROWS == super::Q8_FUSED_MIN_ROWS);

const _: () = assert!(q8_avx::GEMV_MAX_ROWS == super::Q8_FUSED_MIN_ROWS);
