//! Pooling's reduction over taps: `acc[j] = max_t src[off[t] + j]` or `Σ_t src[off[t] + j]`
//! (a max or average pool's window over its stride-phase planes, as [`super::taps`] is the
//! depthwise convolution's). AVX2, AVX-512 and NEON hold blocks of four vectors of `acc` in
//! registers across every tap (one store per element); elsewhere one pass per tap.
//!
//! The max is `v > a ? v : a` per tap with `a` starting at −∞, so `a` never holds NaN: a NaN
//! input is passed over, and the result equals the fold with `f32::max` (the portable loops',
//! and the f64 reference's `max`), one `maxps` (x86: `max(v, a)` returns `a` when either is
//! NaN) or a compare and a select (NEON: `fmax` would propagate the NaN). Written with
//! intrinsics because the compiler would not keep the block in registers: with `f32::max` (three
//! instructions per tap for its NaN checks) it spilled the block, and in plain Rust the select
//! became a branch on the data. A sum adds the taps in order from 0, as the portable loop does
//! (the same result, bit for bit).

use super::Isa;

/// The portable loops: per tap one pass over `acc` (`f32::max` or `+`).
fn portable<const MAX: bool>(off: &[usize], src: &[f32], acc: &mut [f32]) {
    let n = acc.len();
    acc.fill(if MAX { f32::NEG_INFINITY } else { 0.0 });
    for &o in off {
        for (a, &v) in acc.iter_mut().zip(&src[o..o + n]) {
            *a = if MAX { a.max(v) } else { *a + v };
        }
    }
}

/// `acc[j] = max_t src[off[t] + j]` (`MAX`; −∞ with no taps) or `Σ_t src[off[t] + j]`, taps in
/// order, on `isa`'s kernel where this CPU runs it (AVX2 for `Avx2Vnni`; a tier the CPU lacks
/// or `Scalar`: the portable loops). A NaN input never wins a max (see the module's notes); the
/// results are the same on every ISA.
///
/// # Panics
/// When a tap reads past `src` (`off[t] + acc.len() > src.len()`).
pub fn pool_taps<const MAX: bool>(isa: Isa, off: &[usize], src: &[f32], acc: &mut [f32]) {
    let n = acc.len();
    assert!(off.iter().all(|&o| o <= src.len() && src.len() - o >= n), "pool_taps: a tap reads past its source");
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA/F16C checked by `supported()`.
        Isa::Avx2 | Isa::Avx2Vnni if isa.supported() => unsafe { x86::pool_taps_avx2::<MAX>(off, src, acc) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F/AVX2/FMA/F16C checked by `supported()`.
        Isa::Avx512 if isa.supported() => unsafe { x86::pool_taps_avx512::<MAX>(off, src, acc) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON checked by `supported()`.
        Isa::Neon if isa.supported() => unsafe { block::<super::neon::N2, MAX>(off, src, acc) },
        _ => portable::<MAX>(off, src, acc),
    }
}

/// A vector's per-lane `v > a ? v : a` (on top of [`super::f32_driver::Vf`]).
///
/// # Safety
/// As [`super::f32_driver::Vf`]: called only where the ISA's instructions are enabled.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) unsafe trait MaxV: super::f32_driver::Vf {
    /// Per lane `v > a ? v : a` (`a` when either is NaN).
    unsafe fn keep_max(a: Self, v: Self) -> Self;
}

/// [`pool_taps`]' register block: four vectors of `acc` across every tap, then single vectors,
/// then the scalar tail (the same select or sum per element).
///
/// # Safety
/// The CPU must support `V`'s instructions; every `off[t] + acc.len() ≤ src.len()` (checked by
/// [`pool_taps`]).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
unsafe fn block<V: MaxV, const MAX: bool>(off: &[usize], src: &[f32], acc: &mut [f32]) {
    let n = acc.len();
    let init = if MAX { f32::NEG_INFINITY } else { 0.0 };
    let (sp, ap) = (src.as_ptr(), acc.as_mut_ptr());
    let l = V::L;
    let mut j = 0;
    // SAFETY: every read is src[off[t] + j + i] with j + i < n (checked by the caller); every
    // write is acc[j + i], j + i < n; the instructions per this function's contract.
    unsafe {
        let step = |a: V, p: *const f32| if MAX { V::keep_max(a, V::load(p)) } else { V::add(a, V::load(p)) };
        let start = V::splat(&init);
        while j + 4 * l <= n {
            let mut a = [start; 4];
            for &o in off {
                let p = sp.add(o + j);
                for (v, a) in a.iter_mut().enumerate() {
                    *a = step(*a, p.add(v * l));
                }
            }
            for (v, a) in a.iter().enumerate() {
                V::store(ap.add(j + v * l), *a);
            }
            j += 4 * l;
        }
        while j + l <= n {
            let mut a = start;
            for &o in off {
                a = step(a, sp.add(o + j));
            }
            V::store(ap.add(j), a);
            j += l;
        }
    }
    for (jj, out) in acc.iter_mut().enumerate().skip(j) {
        let mut a = init;
        for &o in off {
            let v = src[o + jj];
            a = if MAX {
                if v > a {
                    v
                } else {
                    a
                }
            } else {
                a + v
            };
        }
        *out = a;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::loaders::{Y, Z};
    use super::{block, MaxV};
    use core::arch::x86_64::{_mm256_max_ps, _mm512_max_ps};

    // SAFETY: called only from the AVX2 entry point below (AVX enabled).
    unsafe impl MaxV for Y {
        #[inline(always)]
        unsafe fn keep_max(a: Self, v: Self) -> Self {
            // SAFETY: AVX per the trait's contract; `max(v, a)` returns `a` on NaN.
            unsafe { Y(_mm256_max_ps(v.0, a.0)) }
        }
    }

    // SAFETY: called only from the AVX-512 entry point below (AVX-512F enabled).
    unsafe impl MaxV for Z {
        #[inline(always)]
        unsafe fn keep_max(a: Self, v: Self) -> Self {
            // SAFETY: AVX-512F per the trait's contract; `max(v, a)` returns `a` on NaN.
            unsafe { Z(_mm512_max_ps(v.0, a.0)) }
        }
    }

    /// [`super::pool_taps`] with 8-lane AVX2 vectors.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; bounds checked by the caller.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn pool_taps_avx2<const MAX: bool>(off: &[usize], src: &[f32], acc: &mut [f32]) {
        // SAFETY: per this function's contract.
        unsafe { block::<Y, MAX>(off, src, acc) }
    }

    /// [`super::pool_taps`] with 16-lane AVX-512 vectors.
    ///
    /// # Safety
    /// AVX-512F, AVX2, FMA and F16C; bounds checked by the caller.
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn pool_taps_avx512<const MAX: bool>(off: &[usize], src: &[f32], acc: &mut [f32]) {
        // SAFETY: per this function's contract.
        unsafe { block::<Z, MAX>(off, src, acc) }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::super::neon::N2;
    use super::MaxV;
    use core::arch::aarch64::{vbslq_f32, vcgtq_f32};

    // SAFETY: NEON is baseline on aarch64.
    unsafe impl MaxV for N2 {
        #[inline(always)]
        unsafe fn keep_max(a: Self, v: Self) -> Self {
            // SAFETY: NEON. A compare and a select, `v > a ? v : a` (`fmax` would return NaN).
            unsafe { N2(vbslq_f32(vcgtq_f32(v.0, a.0), v.0, a.0), vbslq_f32(vcgtq_f32(v.1, a.1), v.1, a.1)) }
        }
    }
}
