//! The f32 dense kernels' weight loaders (x86_64): a weight matrix of any stored encoding read
//! 8 columns at a time and dequantised in registers, shared by the AVX2 GEMV (`x86.rs`), the
//! AVX-512 GEMV (`gemv512.rs`) and the packed GEMMs (`gemm.rs`).

use super::nibble;
use core::arch::x86_64::*;
use half::f16;
use kestrel_format::INT4_GROUP;

/// A weight matrix read 8 columns at a time, dequantised in registers.
pub(super) trait Loader {
    /// Columns.
    fn cols(&self) -> usize;
    /// Columns `k..k+8` of row `o`, dequantised except for the per-row scale
    /// (`k % 8 == 0`, `k + 8 <= cols`).
    unsafe fn load(&self, o: usize, k: usize) -> __m256;
    /// Element `(o, k)`, same convention (for the column tail).
    fn get(&self, o: usize, k: usize) -> f32;
    /// Factor applied to row `o`'s sums.
    fn row_scale(&self, o: usize) -> f32;
    /// Address of the byte holding element `(o, k)` (`k < cols`), for software prefetches.
    fn addr(&self, o: usize, k: usize) -> *const u8;
    /// Columns per 64-byte cache line.
    const LINE_COLS: usize;
}

/// An element type a weight matrix is stored in densely (no per-row scale): f32 or f16.
pub(super) trait Dense: Copy {
    /// Columns per 64-byte cache line.
    const LINE_COLS: usize;
    /// The 8 elements at `p` as f32 lanes.
    unsafe fn load8(p: *const Self) -> __m256;
    /// The element as f32.
    fn widen(self) -> f32;
}

impl Dense for f32 {
    const LINE_COLS: usize = 16;
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: 8 floats at p (the caller's contract).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Dense for f16 {
    const LINE_COLS: usize = 32;
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        // SAFETY: 8 halves at p (the caller's contract); F16C available in every caller.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// A dense `[rows, cols]` matrix of `T` (the slice, `cols`).
pub(super) struct DenseW<'a, T>(pub(super) &'a [T], pub(super) usize);
/// f32 weights.
pub(super) type F32W<'a> = DenseW<'a, f32>;
/// f16 weights.
pub(super) type F16W<'a> = DenseW<'a, f16>;

impl<T: Dense> Loader for DenseW<'_, T> {
    const LINE_COLS: usize = T::LINE_COLS;
    #[inline(always)]
    fn cols(&self) -> usize {
        self.1
    }
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> __m256 {
        debug_assert!(k + 8 <= self.1);
        // SAFETY: (o, k..k+8) is inside the [rows, cols] matrix (callers' loop bounds).
        unsafe { T::load8(self.0.as_ptr().add(o * self.1 + k)) }
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        self.0[o * self.1 + k].widen()
    }
    #[inline(always)]
    fn addr(&self, o: usize, k: usize) -> *const u8 {
        self.0.as_ptr().wrapping_add(o * self.1 + k).cast()
    }
    #[inline(always)]
    fn row_scale(&self, _: usize) -> f32 {
        1.0
    }
}

pub(super) struct I8W<'a>(pub(super) &'a [i8], pub(super) &'a [f32], pub(super) usize);
impl Loader for I8W<'_> {
    const LINE_COLS: usize = 64;
    #[inline(always)]
    fn cols(&self) -> usize {
        self.2
    }
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> __m256 {
        debug_assert!(k + 8 <= self.2);
        // SAFETY: 8 bytes inside the matrix.
        unsafe {
            let q = _mm_loadl_epi64(self.0.as_ptr().add(o * self.2 + k).cast());
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))
        }
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        f32::from(self.0[o * self.2 + k])
    }
    #[inline(always)]
    fn addr(&self, o: usize, k: usize) -> *const u8 {
        self.0.as_ptr().wrapping_add(o * self.2 + k).cast()
    }
    #[inline(always)]
    fn row_scale(&self, o: usize) -> f32 {
        self.1[o]
    }
}

pub(super) struct I4W<'a> {
    pub(super) q: &'a [u8],
    pub(super) scales: &'a [f16],
    pub(super) cols: usize,
    pub(super) row_bytes: usize,
    pub(super) groups: usize,
}
impl Loader for I4W<'_> {
    const LINE_COLS: usize = 128;
    #[inline(always)]
    fn cols(&self) -> usize {
        self.cols
    }
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> __m256 {
        debug_assert!(k + 8 <= self.cols && k.is_multiple_of(8));
        // SAFETY: 4 bytes (8 nibbles) inside row o's packed bytes; the group scale index is
        // < groups; AVX2/F16C available in every caller.
        unsafe {
            let p = self.q.as_ptr().add(o * self.row_bytes + k / 2);
            let b = _mm_cvtsi32_si128(p.cast::<i32>().read_unaligned());
            let m = _mm_set1_epi8(0x0f);
            let lo = _mm_and_si128(b, m);
            let hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
            // Element 2j is byte j's low nibble, 2j+1 its high nibble; sign-extend 4 → 8 bits.
            let n = _mm_unpacklo_epi8(lo, hi);
            let eight = _mm_set1_epi8(8);
            let n = _mm_sub_epi8(_mm_xor_si128(n, eight), eight);
            let v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(n));
            // The group's f16 scale by `vcvtph2ps` (F16C is enabled here; `half::f16::to_f32`
            // would detect the feature again at run time on every call, ~1 ns per 8 weights).
            let h = self.scales.get_unchecked(o * self.groups + k / INT4_GROUP).to_bits();
            let s = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))));
            _mm256_mul_ps(v, s)
        }
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        let row = &self.q[o * self.row_bytes..(o + 1) * self.row_bytes];
        nibble(row, k) * self.scales[o * self.groups + k / INT4_GROUP].to_f32()
    }
    #[inline(always)]
    fn addr(&self, o: usize, k: usize) -> *const u8 {
        self.q.as_ptr().wrapping_add(o * self.row_bytes + k / 2)
    }
    #[inline(always)]
    fn row_scale(&self, _: usize) -> f32 {
        1.0
    }
}
