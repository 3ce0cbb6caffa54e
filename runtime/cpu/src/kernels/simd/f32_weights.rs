//! The vector ([`Vf`]) and the weight encodings of the f32-activation dense driver
//! (`f32_driver.rs`): f32 and f16 ([`DenseW`]), int8 with a scale per row ([`I8W`]), int4 in
//! groups ([`I4W`]); their portable element reads and addresses ([`Weights`], used for the column
//! tails and prefetches), the per-ISA chunk decode ([`Load`]), and [`weights!`], which picks one
//! from a `WeightView`.

use half::f16;
use kestrel_rt_format::INT4_GROUP;

/// One SIMD register of f32 lanes (or a fixed group of registers used as one).
///
/// # Safety
/// Implementations are called only where their ISA's instructions are enabled (the ISA's
/// `#[target_feature]` entry points); pointer arguments are valid for `L` lanes.
pub(super) unsafe trait Vf: Copy {
    /// Lanes.
    const L: usize;
    /// All lanes zero.
    unsafe fn zero() -> Self;
    /// `L` f32 from `p` (unaligned).
    unsafe fn load(p: *const f32) -> Self;
    /// `*p` in every lane.
    unsafe fn splat(p: *const f32) -> Self;
    /// `a · b + c`, fused.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// `a + b`.
    unsafe fn add(a: Self, b: Self) -> Self;
    /// The lanes to `p` (unaligned).
    unsafe fn store(p: *mut f32, v: Self);
    /// The sum of the lanes, in this ISA's fixed reduction order.
    unsafe fn hsum(v: Self) -> f32;
    /// Prefetches the line at `p` into L1 (a hint: never faults; a no-op where the ISA has none).
    unsafe fn prefetch_l1(p: *const u8);
    /// Prefetches the line at `p` into L2 (as [`Self::prefetch_l1`]).
    unsafe fn prefetch_l2(p: *const u8);
}

/// A weight matrix of one encoding: the portable part (shape, element reads, addresses).
pub(super) trait Weights {
    /// Columns per 64-byte cache line.
    const LINE_COLS: usize;
    /// Columns.
    fn cols(&self) -> usize;
    /// Element `(o, k)`, dequantised except for the per-row scale (the column tails).
    fn get(&self, o: usize, k: usize) -> f32;
    /// Factor applied to row `o`'s sums.
    fn row_scale(&self, o: usize) -> f32;
    /// Address of the byte holding element `(o, k)` (`k < cols`), for software prefetches.
    fn addr(&self, o: usize, k: usize) -> *const u8;
}

/// A weight matrix read `V::L` columns at a time (one ISA's decode of the encoding).
pub(super) trait Load<V: Vf>: Weights {
    /// Columns `k..k+V::L` of row `o`, dequantised except for the per-row scale
    /// (`k % V::L == 0`, `k + V::L <= cols`; the caller's ISA enabled).
    unsafe fn load(&self, o: usize, k: usize) -> V;
}

/// An element type a weight matrix is stored in densely (no per-row scale): f32 or f16.
pub(super) trait Dense: Copy {
    /// Columns per 64-byte cache line.
    const LINE_COLS: usize;
    /// The element as f32.
    fn widen(self) -> f32;
}

impl Dense for f32 {
    const LINE_COLS: usize = 16;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Dense for f16 {
    const LINE_COLS: usize = 32;
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

impl<T: Dense> DenseW<'_, T> {
    /// Pointer to element `(o, k)` (the loads' address: in bounds).
    ///
    /// # Safety
    /// `o · cols + k` is at most the slice's length.
    #[inline(always)]
    pub(super) unsafe fn ptr(&self, o: usize, k: usize) -> *const T {
        // SAFETY: the caller's contract.
        unsafe { self.0.as_ptr().add(o * self.1 + k) }
    }
}

impl<T: Dense> Weights for DenseW<'_, T> {
    const LINE_COLS: usize = T::LINE_COLS;
    #[inline(always)]
    fn cols(&self) -> usize {
        self.1
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        self.0[o * self.1 + k].widen()
    }
    #[inline(always)]
    fn row_scale(&self, _: usize) -> f32 {
        1.0
    }
    #[inline(always)]
    fn addr(&self, o: usize, k: usize) -> *const u8 {
        self.0.as_ptr().wrapping_add(o * self.1 + k).cast()
    }
}

/// int8 weights with one f32 scale per row (the bytes, the scales, `cols`).
pub(super) struct I8W<'a>(pub(super) &'a [i8], pub(super) &'a [f32], pub(super) usize);

impl Weights for I8W<'_> {
    const LINE_COLS: usize = 64;
    #[inline(always)]
    fn cols(&self) -> usize {
        self.2
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        f32::from(self.0[o * self.2 + k])
    }
    #[inline(always)]
    fn row_scale(&self, o: usize) -> f32 {
        self.1[o]
    }
    #[inline(always)]
    fn addr(&self, o: usize, k: usize) -> *const u8 {
        self.0.as_ptr().wrapping_add(o * self.2 + k).cast()
    }
}

/// int4 weights: rows of packed nibbles (low first), one f16 scale per group of [`INT4_GROUP`].
pub(super) struct I4W<'a> {
    /// The packed rows.
    pub(super) q: &'a [u8],
    /// `groups` scales per row.
    pub(super) scales: &'a [f16],
    /// Columns.
    pub(super) cols: usize,
    /// Bytes per packed row.
    pub(super) row_bytes: usize,
    /// Groups per row.
    pub(super) groups: usize,
}

impl<'a> I4W<'a> {
    /// The matrix of `cols` columns stored as `q` and `scales`.
    pub(super) fn new(q: &'a [u8], scales: &'a [f16], cols: usize) -> Self {
        use kestrel_rt_format::weight::{int4_groups, int4_row_bytes};
        I4W { q, scales, cols, row_bytes: int4_row_bytes(cols), groups: int4_groups(cols) }
    }
    /// The f16 bits of the scale of the group holding `(o, k)` (unchecked).
    ///
    /// # Safety
    /// `o` is a row and `k < cols`.
    #[inline(always)]
    pub(super) unsafe fn scale_bits(&self, o: usize, k: usize) -> u16 {
        // SAFETY: the group index is < rows · groups (the caller's contract).
        unsafe { self.scales.get_unchecked(o * self.groups + k / INT4_GROUP).to_bits() }
    }
    /// Pointer to the byte holding `(o, k)` (the loads' address: in bounds).
    ///
    /// # Safety
    /// `(o, k)` is inside the matrix.
    #[inline(always)]
    pub(super) unsafe fn ptr(&self, o: usize, k: usize) -> *const u8 {
        // SAFETY: the caller's contract.
        unsafe { self.q.as_ptr().add(o * self.row_bytes + k / 2) }
    }
}

impl Weights for I4W<'_> {
    const LINE_COLS: usize = 128;
    #[inline(always)]
    fn cols(&self) -> usize {
        self.cols
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        let row = &self.q[o * self.row_bytes..(o + 1) * self.row_bytes];
        super::nibble(row, k) * self.scales[o * self.groups + k / INT4_GROUP].to_f32()
    }
    #[inline(always)]
    fn row_scale(&self, _: usize) -> f32 {
        1.0
    }
    #[inline(always)]
    fn addr(&self, o: usize, k: usize) -> *const u8 {
        self.q.as_ptr().wrapping_add(o * self.row_bytes + k / 2)
    }
}

/// Runs `$body` with `$l` bound to the loader of the [`kestrel_rt_format::WeightView`] `$w`'s
/// encoding.
macro_rules! weights {
    ($w:expr, $l:ident => $body:expr) => {{
        use kestrel_rt_format::WeightData;
        use $crate::kernels::simd::f32_weights::{DenseW, I4W, I8W};
        let inp = $w.cols();
        match $w.data() {
            WeightData::F32(d) => {
                let $l = &DenseW(d, inp);
                $body
            }
            WeightData::F16(d) => {
                let $l = &DenseW(d, inp);
                $body
            }
            WeightData::I8 { q, scales } => {
                let $l = &I8W(q, scales, inp);
                $body
            }
            WeightData::I4 { q, scales } => {
                let $l = &I4W::new(q, scales, inp);
                $body
            }
        }
    }};
}
pub(super) use weights;
