//! x86_64 AVX2 + FMA + F16C kernels (and AVX-VNNI for int8 × int8), and the f32 dense product's
//! entry points per tier.
//!
//! The dense product (`x · Wᵀ`, weights in any encoding) is the driver of `f32_driver.rs` over
//! this ISA's vectors and weight decodes (`loaders.rs`): dot products below
//! [`gemm::MIN_ROWS`] rows (8-lane AVX2 blocks of 4 rows × 2 weight rows; AVX-512's GEMV at 16
//! lanes below 4 rows), the packed GEMM of `gemm.rs` from there. Everything is `#[inline(always)]`
//! into the `#[target_feature]` entry points, so it compiles for their ISA.

use super::f32_driver::{dots, gemm as packed, DenseOp, DotKernel, GemmKernel, GEMV_MAX_ROWS};
use super::f32_weights::{weights, Load};
use super::gemm;
use super::loaders::{hsum, Y, Z};
use super::q8_512;
use core::arch::x86_64::*;
use kestrel_rt_format::weight::{int4_groups, int4_row_bytes};
use kestrel_rt_format::{WeightData, WeightView};

#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: AVX2 available in every caller.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }
}

/// `Σ a·b`, 4 independent 8-lane accumulators.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: every load reads indices < n of both slices.
    unsafe {
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i + 8 * k)), _mm256_loadu_ps(pb.add(i + 8 * k)), *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
            i += 8;
        }
        let mut s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }
}

/// `y += a·x` over the common length.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let (py, px) = (y.as_mut_ptr(), x.as_ptr());
    let av = _mm256_set1_ps(a);
    let mut i = 0;
    // SAFETY: indices < n of both slices.
    unsafe {
        while i + 8 <= n {
            _mm256_storeu_ps(py.add(i), _mm256_fmadd_ps(av, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i))));
            i += 8;
        }
        while i < n {
            *py.add(i) += a * *px.add(i);
            i += 1;
        }
    }
}

/// The AVX-512 GEMV (below [`gemm::MIN_ROWS`] rows): the driver's dot products at 16 lanes, the
/// stream and the 8-row blocks each compiled on its own, one target-feature function per kernel
/// and encoding (in one function, the CIFAR head's int8 GEMV through the blocks measured 5–6 %
/// slower than before the shared driver; compiled apart, 3 %).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2, FMA and F16C; the rest as [`super::f32_driver::dots`].
#[inline(always)]
unsafe fn gemv_avx512<L: Load<Z>>(op: DenseOp<'_, L>) {
    /// Writes a not-inlined AVX-512 wrapper `$name` of the driver's `$f`.
    macro_rules! own_fn {
        ($name:ident, $f:ident $(, $g:expr)?) => {
            #[inline(never)]
            #[target_feature(enable = "avx512f,avx2,fma,f16c")]
            unsafe fn $name<L: Load<Z>>(op: DenseOp<'_, L>) {
                // SAFETY: the caller's contract.
                unsafe { super::f32_driver::$f::<Z, L $(, $g)?>(op) }
            }
        };
    }
    own_fn!(stream, gemv_stream);
    own_fn!(blocks, dot_blocks, { gemm::MIN_ROWS });
    // SAFETY: the caller's contract.
    unsafe {
        if <Z as DotKernel>::stream(L::LINE_COLS, op.w.cols()) {
            stream(op)
        } else {
            blocks(op)
        }
    }
}

/// One tier's dense entry points: `$wt` over a slice and `$wt_ptr` at a row stride, with that
/// tier's GEMM tiles (`gemm_tiers` parameters `$tiers`) and, below `$gemv_rows` rows, its
/// GEMV `$gemv` (after `$first`, which may take the call: true when it did).
macro_rules! dense_entry_points {
    ($features:literal, $needs:literal, $what:literal, $v:ty, [$($tiers:literal),*], $first:path, $gemv:path,
     $gemv_rows:expr, $wt:ident, $wt_ptr:ident) => {
        #[doc = concat!("`y [rows, out] = x [rows, in] · Wᵀ` for any weight encoding (no bias) ", $what)]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; `x.len() >= rows·in`, `y.len() >= rows·out`.")]
        #[target_feature(enable = $features)]
        pub unsafe fn $wt(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
            assert!(y.len() >= rows * w.rows());
            // SAFETY: y is exclusively borrowed and long enough for stride `out`.
            unsafe { $wt_ptr(x, rows, w, y.as_mut_ptr(), w.rows()) }
        }

        #[doc = concat!("[`", stringify!($wt), "`] into `rows` rows of `out` f32 at row stride `ldy` (a column block of a wider output: threads split a layer by output features).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; `x.len() >= rows·in`; `y` points at `rows` rows of `w.rows()` writable f32 at stride `ldy ≥ w.rows()`, which no one else accesses meanwhile.")]
        #[target_feature(enable = $features)]
        pub unsafe fn $wt_ptr(x: &[f32], rows: usize, w: &WeightView<'_>, y: *mut f32, ldy: usize) {
            let out = w.rows();
            // SAFETY: the caller's contract; the view's data lengths were validated by
            // `WeightView::new`.
            unsafe {
                if !gemm_tiers::<$v, $($tiers),*>(x, rows, w, y, ldy) && !$first(x, rows, w, y, ldy) {
                    if rows < $gemv_rows {
                        weights!(w, l => $gemv(DenseOp { x, rows, w: l, out, y, ldy }))
                    } else {
                        weights!(w, l => dots::<Y, _>(DenseOp { x, rows, w: l, out, y, ldy }))
                    }
                }
            }
        }
    };
}

dense_entry_points!(
    "avx2,fma,f16c",
    "AVX2, FMA and F16C",
    "with AVX2: the packed 6×16 GEMM ([`super::gemm`]) from [`gemm::MIN_ROWS`] rows (the transposed-`x` kernel up to [`gemm::SMALL_M_MAX`] rows of f32), the driver's dot products below.",
    gemm::Y,
    [6, 2, 6, 2],
    int4_gemv,
    dots::<Y, _>,
    GEMV_MAX_ROWS,
    matmul_wt,
    matmul_wt_ptr
);
dense_entry_points!(
    "avx512f,avx2,fma,f16c",
    "AVX-512F, AVX2, FMA and F16C",
    "with the AVX-512 packed 8×32 GEMM from [`gemm::MIN_ROWS`] rows, the 16-lane GEMV below (up to six rows of `x` per weight load).",
    gemm::Z,
    [12, 1, 8, 2],
    no_first,
    gemv_avx512,
    gemm::MIN_ROWS,
    matmul_wt_avx512,
    matmul_wt_avx512_ptr
);

/// AVX2's int4 GEMV ([`super::i4_gemv`]) for 1–3 rows of `x` and int4 weights: true when it
/// took the call.
///
/// # Safety
/// AVX2, FMA and F16C available; `x` and `y` as [`matmul_wt_ptr`] (checked here: `x`).
#[inline(always)]
unsafe fn int4_gemv(x: &[f32], rows: usize, w: &WeightView<'_>, y: *mut f32, ldy: usize) -> bool {
    let WeightData::I4 { q, scales } = w.data() else { return false };
    if rows == 0 || rows > super::i4_gemv::MAX_ROWS {
        return false;
    }
    let (out, l) = (w.rows(), super::f32_weights::I4W::new(q, scales, w.cols()));
    assert!(x.len() >= rows * w.cols() && ldy >= out);
    // SAFETY: the caller's contract on y and the features; x checked; the view's data lengths
    // were validated by `WeightView::new`.
    unsafe { super::i4_gemv::gemv_i4(DenseOp { x, rows, w: &l, out, y, ldy }) };
    true
}

/// No call taken first (the AVX-512 tier's int4 GEMV is its own, `gemv_avx512`).
#[inline(always)]
fn no_first(_: &[f32], _: usize, _: &WeightView<'_>, _: *mut f32, _: usize) -> bool {
    false
}

/// The entry points' GEMM tiers, with vectors `V`: from [`gemm::MIN_ROWS`] to
/// [`gemm::SMALL_M_MAX`] rows of f32 the transposed-`x` kernel (`SMR`×`SNV` vectors), from
/// [`gemm::MIN_ROWS`] rows the packed GEMM (`MR`×`NV` vectors). Returns false, having written
/// nothing, below [`gemm::MIN_ROWS`] rows (the caller's dot-product kernels take them). Checks
/// `x` and `ldy`.
///
/// # Safety
/// `V`'s instructions available; `y` as [`matmul_wt_ptr`].
#[inline(always)]
unsafe fn gemm_tiers<V: GemmKernel<Pack = Y>, const SMR: usize, const SNV: usize, const MR: usize, const NV: usize>(
    x: &[f32],
    rows: usize,
    w: &WeightView<'_>,
    y: *mut f32,
    ldy: usize,
) -> bool {
    let (out, inp) = (w.rows(), w.cols());
    assert!(x.len() >= rows * inp && ldy >= out);
    // SAFETY: lengths checked; the view's data lengths were validated by `WeightView::new`.
    unsafe {
        let f32_rows = if let WeightData::F32(d) = w.data() { Some(d) } else { None };
        if let (Some(d), true) = (f32_rows, (gemm::MIN_ROWS..=gemm::SMALL_M_MAX).contains(&rows)) {
            gemm::gemm_small_m::<V, SMR, SNV>(DenseOp { x, rows, w: &super::f32_weights::DenseW(d, inp), out, y, ldy })
        } else if rows >= gemm::MIN_ROWS {
            weights!(w, l => packed::<V, _, MR, NV>(DenseOp { x, rows, w: l, out, y, ldy }))
        } else {
            return false;
        }
    }
    true
}

/// Integer `Σ a·b` of two int8 slices (values in ±127), 32 lanes per step: `vpmaddubsw` +
/// `vpmaddwd`, or with `VNNI` the AVX-VNNI `vpdpbusd`; the tail in scalar.
///
/// # Safety
/// AVX2 (and AVX-VNNI with `VNNI`) available in every caller.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_i8_by<const VNNI: bool>(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    let mut acc = _mm256_setzero_si256();
    let mut i = 0;
    // SAFETY: indices < n; the instructions per the caller.
    unsafe {
        while i + 32 <= n {
            let va = _mm256_loadu_si256(a.as_ptr().add(i).cast());
            let vb = _mm256_loadu_si256(b.as_ptr().add(i).cast());
            if VNNI {
                let (u, s) = super::i8_avx2::sign_split(va, vb);
                // VEX-encoded AVX-VNNI `vpdpbusd` (acc += Σ₄ u8·i8 per i32 lane), written when
                // the MSRV predated `_mm256_dpbusd_avx_epi32` (stable since 1.89, which
                // `q8_avx.rs` uses).
                core::arch::asm!(
                    "{{vex}} vpdpbusd {acc}, {u}, {s}",
                    acc = inout(ymm_reg) acc,
                    u = in(ymm_reg) u,
                    s = in(ymm_reg) s,
                    options(pure, nomem, nostack),
                );
            } else {
                acc = super::i8_avx2::madd(acc, va, vb);
            }
            i += 32;
        }
        let mut s = hsum_i32(acc);
        while i < n {
            s += i32::from(*a.get_unchecked(i)) * i32::from(*b.get_unchecked(i));
            i += 1;
        }
        s
    }
}

/// Integer `Σ a·b` of two int8 slices (values in ±127) with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    // SAFETY: AVX2 per the contract.
    unsafe { dot_i8_by::<false>(a, b) }
}

/// [`dot_i8`] with AVX-VNNI `vpdpbusd` (u8 × i8 → i32 in one instruction).
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn dot_i8_vnni(a: &[i8], b: &[i8]) -> i32 {
    // SAFETY: AVX2 and AVX-VNNI per the contract.
    unsafe { dot_i8_by::<true>(a, b) }
}

/// `y[r·out + o] = Σ q(x[r, k]) · w[o, k] · scale(o, k / 32)` for int4 weights with the AVX-512
/// VNNI kernels (the streaming [`super::q8_512::gemv_i4`] up to 6 rows, else the packed
/// [`super::q8_512::gemm_i4`]): f32 in the portable loop's order (per group an exact
/// i32 sum, scaled; per 256-input chunk a partial), so equal to it bit for bit. `y` is overwritten.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI (plus AVX2, FMA, F16C).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
pub unsafe fn q8_i4_avx512vnni(op: &super::Q8Int4<'_>, y: &mut [f32]) {
    let super::Q8Operands { x, rows, w: (q, scales), cols, out, .. } = *op;
    assert!(
        x.len() >= rows * cols
            && q.len() >= out * int4_row_bytes(cols)
            && scales.len() >= out * int4_groups(cols)
            && y.len() >= rows * out
    );
    // SAFETY: features per the contract; lengths checked.
    unsafe {
        if rows <= q8_512::I4_GEMV_MAX_ROWS {
            q8_512::gemv_i4(op, y)
        } else {
            q8_512::gemm_i4(op, y)
        }
    }
}

/// One int4 group (16 packed bytes) times up to 32 int8 activations.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_i4_group(bytes: &[u8], xq: &[i8]) -> i32 {
    assert!(bytes.len() >= 16 && xq.len() <= 32);
    let mut xs = [0i8; 32];
    xs[..xq.len()].copy_from_slice(xq);
    // SAFETY: 16 bytes and 32 activations in bounds (asserted / stack copy).
    unsafe {
        let b = _mm_loadu_si128(bytes.as_ptr().cast());
        let m = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(b, m);
        let hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        let eight = _mm_set1_epi8(8);
        let first = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
        let second = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight);
        let w = _mm256_set_m128i(second, first);
        let x = _mm256_loadu_si256(xs.as_ptr().cast());
        hsum_i32(super::i8_avx2::madd(_mm256_setzero_si256(), w, x))
    }
}

// The convolution GEMMs and depthwise taps live in `x86_conv.rs`.
pub use super::x86_conv::{
    depthwise_cl8, matmul_kn, matmul_kn_avx512, matmul_kn_rows, matmul_kn_rows_avx512, taps, taps_avx512, taps_cl,
    taps_cl_avx512, taps_rows, taps_rows_avx512,
};

// The FMA peak probes and the vectorised GELU/softmax live in `x86_math.rs`.
pub use super::x86_math::{
    exp_sub, exp_sub_each, fma_probe_avx2, fma_probe_avx512, gelu, gelu_avx512, sigmoid, sigmoid_avx512, sigmoid_gate,
    silu, silu_avx512, small_head_avx512, softmax, softmax_scaled_avx512, tanh, PROBE_CHAINS,
};

// The int8 product and attention-internals wrappers live in `x86_q8.rs`.
pub use super::x86_q8::{
    abs_max_avx512, q8_dense_i8_avx512vnni, q8_dense_i8_avxvnni, q8_i8_avx512vnni, q8_i8_avxvnni,
    quantize_rows_i8_avx512, transpose_f32_avx512,
};
pub use super::x86_rows::{axpy_rows_avx512, exp_excess_avx512, layer_norm_rows_avx512};
