//! The int8 × int8 products of calibrated activations, dispatched by ISA: exact i32 sums
//! (`q8_accumulate_i8`), the same finished to f32 inside the GEMM's tiles (`q8_dense_i8`),
//! int4 weights (`q8_int4`), and the aarch64 dot-product detection.

use super::isa;
#[cfg(target_arch = "aarch64")]
use super::neon;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::Isa;
#[cfg(target_arch = "x86_64")]
use super::{has_avx512_vnni, has_avx_vnni, x86};

/// Input features up to which an int8 × int8 product is exact in i32 (`127² · K < 2³¹`):
/// [`q8_accumulate_i8`]'s domain.
pub const Q8_EXACT_MAX_COLS: usize = 1 << 17;

/// `acc[r·out + o] += Σ_k q(x[r·cols + k]) · w[o·cols + k]` in wrapping i32 (exact for
/// `cols <= Q8_EXACT_MAX_COLS`), `q` being [`kestrel_format::weight::quantize_act`] at scale
/// `1 / inv`, with a packed integer GEMM where the CPU has one (x86_64: AVX-512 VNNI, else
/// AVX-VNNI at 256 bits; aarch64: the dot-product instructions). Returns
/// false, touching nothing, elsewhere: the caller runs the dot products ([`dot_i8`]), which give
/// the same integers.
pub fn q8_accumulate_i8(x: &[f32], rows: usize, inv: f32, w: &[i8], cols: usize, out: usize, acc: &mut [i32]) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if has_avx512_vnni() => {
            // SAFETY: AVX-512F/BW/VNNI and AVX2/FMA/F16C detected; the kernel checks lengths.
            unsafe { x86::q8_i8_avx512vnni(x, rows, inv, w, cols, out, acc) };
            true
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Vnni | Isa::Avx512 if has_avx_vnni() => {
            // SAFETY: AVX2/FMA/F16C and AVX-VNNI detected; the kernel checks lengths.
            unsafe { x86::q8_i8_avxvnni(x, rows, inv, w, cols, out, acc) };
            true
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon if has_dotprod() => {
            // SAFETY: FEAT_DotProd detected; the kernel checks lengths.
            unsafe { neon::q8_i8_dotprod(x, rows, inv, w, cols, out, acc) };
            true
        }
        _ => {
            let _ = (x, rows, inv, w, cols, out, acc);
            false
        }
    }
}

/// Rows from which [`q8_dense_i8`] may finish inside the kernel (the AVX-512 packed GEMM's side
/// of its GEMV line); `linear_q8` splits such layers across threads by rows only.
pub const Q8_FUSED_MIN_ROWS: usize = 4;

/// How [`q8_dense_i8`] turns a row's exact integer sums into f32 outputs:
/// `y[o] = f32(Σ) · scales[o] · x_scale (+ bias[o])`, the operation order of `linear_q8`'s
/// portable path (the weight scale, then the activation scale, then the bias).
pub struct Q8Finish<'a> {
    /// One scale per output (the int8 weight rows' scales).
    pub scales: &'a [f32],
    /// The calibrated activation scale.
    pub x_scale: f32,
    /// f32 bias per output, if any.
    pub bias: Option<&'a [f32]>,
}

/// `y = (q(x) · W_qᵀ) · scales · x_scale + bias` (int8 weights, `y` overwritten) with the exact
/// sums finished inside the integer GEMM's tiles, where the CPU has such a kernel for this shape
/// (AVX-512 VNNI or AVX-VNNI, from 4 rows); false, touching nothing, elsewhere (the caller accumulates with
/// [`q8_accumulate_i8`] and finishes in a pass of its own: the same f32 values).
#[allow(clippy::too_many_arguments)]
pub fn q8_dense_i8(
    x: &[f32],
    rows: usize,
    inv: f32,
    w: &[i8],
    cols: usize,
    out: usize,
    fin: &Q8Finish<'_>,
    y: &mut [f32],
) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F/BW/VNNI and AVX2/FMA/F16C detected; the kernel checks lengths.
        Isa::Avx512 if has_avx512_vnni() => unsafe { x86::q8_dense_i8_avx512vnni(x, rows, inv, w, cols, out, fin, y) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA/F16C and AVX-VNNI detected; the kernel checks lengths.
        Isa::Avx2Vnni | Isa::Avx512 if has_avx_vnni() => unsafe {
            x86::q8_dense_i8_avxvnni(x, rows, inv, w, cols, out, fin, y)
        },
        _ => {
            let _ = (x, rows, inv, w, cols, out, fin, y);
            false
        }
    }
}

/// Whether this CPU has the aarch64 dot-product instructions (`sdot`) that
/// [`q8_accumulate_i8`] uses there.
#[cfg(all(target_arch = "aarch64", feature = "std"))]
pub fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}
/// Whether this CPU has the aarch64 dot-product instructions (`sdot`) that
/// [`q8_accumulate_i8`] uses there.
#[cfg(all(target_arch = "aarch64", not(feature = "std")))]
pub fn has_dotprod() -> bool {
    cfg!(target_feature = "dotprod")
}
/// Whether this CPU has the aarch64 dot-product instructions (`sdot`) that
/// [`q8_accumulate_i8`] uses there.
#[cfg(not(target_arch = "aarch64"))]
pub fn has_dotprod() -> bool {
    false
}

/// `y[r·out + o] = Σ_chunks Σ_groups (Σ_k q(x[r, k]) · w[o, k]) · scale(o, group)` for int4
/// weights (`q`, `scales` as `WeightData::I4`) with calibrated activations, in f32 in the order of
/// the portable loop (`WeightView::dot_row_q8` per 256-input chunk, chunks added to `y`), with a
/// packed integer GEMM where the CPU has one (x86_64: AVX-512 VNNI). Returns false, touching
/// nothing, elsewhere.
#[allow(clippy::too_many_arguments)]
pub fn q8_int4(
    x: &[f32],
    rows: usize,
    inv: f32,
    q: &[u8],
    scales: &[half::f16],
    cols: usize,
    out: usize,
    y: &mut [f32],
) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if has_avx512_vnni() => {
            // SAFETY: AVX-512F/BW/VNNI and AVX2/FMA/F16C detected; the kernel checks lengths.
            unsafe { x86::q8_i4_avx512vnni(x, rows, inv, q, scales, cols, out, y) };
            true
        }
        _ => {
            let _ = (x, rows, inv, q, scales, cols, out, y);
            false
        }
    }
}
