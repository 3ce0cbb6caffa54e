//! The f32 dense kernels' x86_64 pieces for the driver (`f32_driver.rs`): the vectors ([`Y`],
//! AVX2 8 lanes; [`Z`], AVX-512 16 lanes) and each weight encoding's decode of a vector of
//! columns in registers (f16 by `vcvtph2ps`, int8 by sign extension and `vcvtdq2ps`, int4 by
//! nibble unpacking and the group's scale), used by the dot products (`x86.rs`) and the packed
//! GEMMs (`gemm.rs`: always 8 columns at a time, [`Y`]).

use super::f32_driver::{DotKernel, Vf};
use super::f32_weights::{Load, F16W, F32W, I4W, I8W};
use core::arch::x86_64::*;

/// Implements [`Vf`] for a one-register wrapper: the same operations, the intrinsics of its
/// width. `$safety` names the target features every caller has.
macro_rules! impl_vf {
    ($t:ident($reg:ty), $lanes:expr, $safety:literal, zero: $zero:ident, load: $load:ident,
     splat: |$sp:ident| $splat:expr, fma: $fma:ident, add: $add:ident, store: $store:ident,
     hsum: |$hv:ident| $hsum:expr) => {
        #[doc = concat!($safety, ": ", stringify!($lanes), " lanes.")]
        #[derive(Clone, Copy)]
        pub(super) struct $t(pub(super) $reg);

        // SAFETY: called only from entry points with `$safety` enabled (the trait's contract).
        unsafe impl Vf for $t {
            const L: usize = $lanes;
            #[inline(always)]
            unsafe fn zero() -> Self {
                // SAFETY (all methods): the features of `$safety` available in every caller;
                // pointers valid per caller.
                unsafe { $t($zero()) }
            }
            #[inline(always)]
            unsafe fn load(p: *const f32) -> Self {
                unsafe { $t($load(p)) }
            }
            #[inline(always)]
            unsafe fn splat($sp: *const f32) -> Self {
                unsafe { $t($splat) }
            }
            #[inline(always)]
            unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
                unsafe { $t($fma(a.0, b.0, c.0)) }
            }
            #[inline(always)]
            unsafe fn add(a: Self, b: Self) -> Self {
                unsafe { $t($add(a.0, b.0)) }
            }
            #[inline(always)]
            unsafe fn store(p: *mut f32, v: Self) {
                unsafe { $store(p, v.0) }
            }
            #[inline(always)]
            unsafe fn hsum(v: Self) -> f32 {
                let $hv = v.0;
                unsafe { $hsum }
            }
            #[inline(always)]
            unsafe fn prefetch_l1(p: *const u8) {
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
            }
            #[inline(always)]
            unsafe fn prefetch_l2(p: *const u8) {
                unsafe { _mm_prefetch::<_MM_HINT_T1>(p.cast()) }
            }
        }
    };
}

impl_vf!(Y(__m256), 8, "AVX2 + FMA", zero: _mm256_setzero_ps, load: _mm256_loadu_ps,
    splat: |p| _mm256_broadcast_ss(&*p), fma: _mm256_fmadd_ps, add: _mm256_add_ps, store: _mm256_storeu_ps,
    hsum: |v| hsum(v));
impl_vf!(Z(__m512), 16, "AVX-512F", zero: _mm512_setzero_ps, load: _mm512_loadu_ps,
    splat: |p| _mm512_set1_ps(*p), fma: _mm512_fmadd_ps, add: _mm512_add_ps, store: _mm512_storeu_ps,
    hsum: |v| _mm512_reduce_add_ps(v));

/// The 8 lanes' sum: halves, then pairs, then the last two.
#[inline(always)]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY (whole fn): AVX available in every caller.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

/// Longest row of `x` (f32 columns, 32 KiB) that the streaming GEMV reads once per weight row
/// of an encoding other than f32 (beside the weight stream in L1).
const STREAM_MAX_COLS: usize = 8 * 1024;

/// AVX2: 256 columns per block (a multiple of the int4 group, so blocks start on group
/// boundaries; 4 rows of `x` × 256 columns = 4 KiB stay in L1 across the weight rows); a GEMV
/// streams f32 weights (16 columns per cache line), and f16 (32) with rows of `x` that fit in L1.
impl DotKernel for Y {
    const KC: usize = 256;
    #[inline(always)]
    fn stream(line_cols: usize, cols: usize) -> bool {
        line_cols == 16 || (line_cols == 32 && cols <= STREAM_MAX_COLS)
    }
}

/// AVX-512 (the GEMV only): f32 weights always stream (rereading `x` costs no more than the
/// weights), other encodings while a row of `x` fits in L1 beside the stream.
impl DotKernel for Z {
    const KC: usize = 256;
    /// 6 rows × 4 accumulators: 24 of the 32 AVX-512 registers.
    const STREAM_ROWS: usize = 6;
    #[inline(always)]
    fn stream(line_cols: usize, cols: usize) -> bool {
        line_cols == 16 || cols <= STREAM_MAX_COLS
    }
}

/// The int4 columns `k..k+2n` from the `n` packed bytes in `b`'s low lanes, as sign-extended
/// bytes in order (element 2j is byte j's low nibble, 2j+1 its high one).
#[inline(always)]
unsafe fn nibbles(b: __m128i) -> __m128i {
    // SAFETY: SSE2 in every caller.
    unsafe {
        let m = _mm_set1_epi8(0x0f);
        let n = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16::<4>(b), m));
        let eight = _mm_set1_epi8(8);
        _mm_sub_epi8(_mm_xor_si128(n, eight), eight)
    }
}

/// The f16 scale `h` (bits) in every lane, by `vcvtph2ps` (`half::f16::to_f32` would detect F16C
/// again at run time on every call, ~1 ns per 8 weights).
#[inline(always)]
unsafe fn scale_ps(h: u16) -> __m128 {
    // SAFETY: F16C in every caller.
    unsafe { _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))) }
}

/// The decodes that are one load and one widening, at one width: f32, f16 (`vcvtph2ps`), int8
/// (sign extension, `vcvtdq2ps`).
macro_rules! plain_loads {
    ($v:ident, $n:literal, f32: $f32:ident, f16: |$h:ident| $f16:expr, i8: |$q:ident| $i8:expr) => {
        impl Load<$v> for F32W<'_> {
            #[inline(always)]
            unsafe fn load(&self, o: usize, k: usize) -> $v {
                debug_assert!(k + $n <= self.1);
                // SAFETY (all three): (o, k..k + lanes) is inside the matrix (the trait's
                // contract); the vector's features, and F16C, in every caller.
                unsafe { $v($f32(self.ptr(o, k))) }
            }
        }
        impl Load<$v> for F16W<'_> {
            #[inline(always)]
            unsafe fn load(&self, o: usize, k: usize) -> $v {
                debug_assert!(k + $n <= self.1);
                // SAFETY: as for the f32 load above.
                unsafe {
                    let $h = self.ptr(o, k).cast();
                    $v($f16)
                }
            }
        }
        impl Load<$v> for I8W<'_> {
            #[inline(always)]
            unsafe fn load(&self, o: usize, k: usize) -> $v {
                debug_assert!(k + $n <= self.2);
                // SAFETY: as for the f32 load above.
                unsafe {
                    let $q = self.0.as_ptr().add(o * self.2 + k).cast();
                    $v($i8)
                }
            }
        }
    };
}

plain_loads!(Y, 8, f32: _mm256_loadu_ps, f16: |h| _mm256_cvtph_ps(_mm_loadu_si128(h)),
    i8: |q| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(q))));
plain_loads!(Z, 16, f32: _mm512_loadu_ps, f16: |h| _mm512_cvtph_ps(_mm256_loadu_si256(h)),
    i8: |q| _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))));

// SAFETY (both int4 `load`s): (o, k..k + lanes) is inside the matrix (the trait's contract); the
// vector's features, and F16C, in every caller.
impl Load<Y> for I4W<'_> {
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> Y {
        // SAFETY: see the comment above these two impls.
        debug_assert!(k + 8 <= self.cols && k.is_multiple_of(8));
        // 4 bytes: 8 nibbles of one group.
        unsafe {
            let b = _mm_cvtsi32_si128(self.ptr(o, k).cast::<i32>().read_unaligned());
            let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(nibbles(b)));
            Y(_mm256_mul_ps(v, _mm256_broadcastss_ps(scale_ps(self.scale_bits(o, k)))))
        }
    }
}

impl Load<Z> for I4W<'_> {
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> Z {
        debug_assert!(k + 16 <= self.cols && k.is_multiple_of(16));
        // SAFETY: see the comment above these two impls.
        // 8 bytes, each doubled, zero-extended to 16 lanes; the odd lanes shifted right by 4:
        // each lane's low 4 bits are its nibble, which `vpermps` (it reads only those) looks up
        // in a 16-entry table of the signed values as f32; times the group's scale (16 columns
        // never straddle a group of 32). Three vector operations fewer per 16 weights than
        // masking, interleaving, a byte table and `vcvtdq2ps`; the same f32 values.
        unsafe {
            let b = _mm_loadl_epi64(self.ptr(o, k).cast());
            let d = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
            let n = _mm512_srlv_epi32(d, _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
            let lut =
                _mm512_setr_ps(0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0);
            let v = _mm512_permutexvar_ps(n, lut);
            Z(_mm512_mul_ps(v, _mm512_broadcastss_ps(scale_ps(self.scale_bits(o, k)))))
        }
    }
}
