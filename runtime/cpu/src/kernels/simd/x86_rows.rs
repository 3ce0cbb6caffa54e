//! AVX-512 row kernels: LayerNorm rows, AFT-local's window weights and weighted row sums
//! (dispatched from `rows.rs`).

use super::x86_math::exp16;
use core::arch::x86_64::*;

/// `Σ (v − c)^e` over `n` floats at `p` (`e` = 1: `c` is 0; `e` = 2: squares of `v − c`),
/// 16 lanes and two accumulators, the tail masked. (No closure: a closure's body does not take
/// its caller's target features and would call every intrinsic out of line.)
///
/// # Safety
/// AVX-512F in the caller; `p` readable for `n` floats.
#[inline(always)]
unsafe fn sum16<const SQUARES: bool>(p: *const f32, n: usize, c: f32) -> f32 {
    // SAFETY: masked loads stay within the n floats.
    unsafe {
        let vc = _mm512_set1_ps(c);
        let term = |v: __m512| {
            if SQUARES {
                let d = _mm512_sub_ps(v, vc);
                _mm512_mul_ps(d, d)
            } else {
                v
            }
        };
        let (mut a, mut b) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut i = 0;
        while i + 32 <= n {
            a = _mm512_add_ps(a, term(_mm512_loadu_ps(p.add(i))));
            b = _mm512_add_ps(b, term(_mm512_loadu_ps(p.add(i + 16))));
            i += 32;
        }
        while i < n {
            let m = if n - i >= 16 { !0 } else { ((1u32 << (n - i)) - 1) as __mmask16 };
            a = _mm512_add_ps(a, _mm512_maskz_mov_ps(m, term(_mm512_maskz_loadu_ps(m, p.add(i)))));
            i += 16;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(a, b))
    }
}

/// Layer norm of `rows` rows of `d` contiguous features (AVX-512F): per row the mean, then
/// the biased variance of `x − mean` (two passes, as the portable loop), then
/// `(x − mean) · inv · γ + β` with `inv = 1/√(var + ε)`.
///
/// # Safety
/// AVX-512F (and AVX2/FMA) in the CPU; `x`, `y` hold `rows·d` floats, `g`, `b` hold `d`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn layer_norm_rows_avx512(x: &[f32], y: &mut [f32], d: usize, g: &[f32], b: &[f32], eps: f32) {
    let inv_d = 1.0 / d as f32;
    for (xr, yr) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
        // SAFETY: every pointer stays within its row (d floats) or g/b (d floats); masked tails.
        unsafe {
            let mean = sum16::<false>(xr.as_ptr(), d, 0.0) * inv_d;
            let var = sum16::<true>(xr.as_ptr(), d, mean) * inv_d;
            // √ by the VEX instruction (`kestrel_rt_format::sqrtf`, inlined here; libm's legacy-SSE
            // `sqrtss` made this kernel 6× slower).
            let sd = kestrel_rt_format::sqrtf(var + eps);
            let (vm, inv) = (_mm512_set1_ps(mean), _mm512_set1_ps(1.0 / sd));
            let mut i = 0;
            while i < d {
                let m = if d - i >= 16 { !0 } else { ((1u32 << (d - i)) - 1) as __mmask16 };
                let v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xr.as_ptr().add(i)), vm), inv);
                let o = _mm512_fmadd_ps(
                    v,
                    _mm512_maskz_loadu_ps(m, g.as_ptr().add(i)),
                    _mm512_maskz_loadu_ps(m, b.as_ptr().add(i)),
                );
                _mm512_mask_storeu_ps(yr.as_mut_ptr().add(i), m, o);
                i += 16;
            }
        }
    }
}

/// `band[j] ← exp(band[j] − m) − exp(−m)` (`m ≥ max(band, 0)`: AFT-local's window weights
/// less the `exp(−m)` already in the global sums), 16 lanes (AVX-512F): where `|w| ≥ 0.5` a
/// product with `1 − exp(−|w|)` (no cancellation, no overflow; see the body), elsewhere `exp(−m) · expm1(w)` by its Taylor polynomial to `w⁹` (truncation below 1e-9
/// relative at `|w| = 0.5`). Both exponentials through [`exp16`] (no out-of-line libm call in
/// 512-bit code).
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn exp_excess_avx512(band: &mut [f32], m: f32) {
    // 1/k! for k = 9 down to 2.
    const INV_FACT: [f32; 8] =
        [1.0 / 362_880.0, 1.0 / 40_320.0, 1.0 / 5_040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5];
    // SAFETY: AVX-512F available (the contract); masked loads and stores within `band`.
    unsafe {
        let gm = exp16(_mm512_set1_ps(-m));
        let (vm, one, half) = (_mm512_set1_ps(m), _mm512_set1_ps(1.0), _mm512_set1_ps(0.5));
        let n = band.len();
        let p = band.as_mut_ptr();
        let mut i = 0;
        while i < n {
            let mask = if n - i >= 16 { !0 } else { ((1u32 << (n - i)) - 1) as __mmask16 };
            let w = _mm512_maskz_loadu_ps(mask, p.add(i));
            // |w| ≥ 0.5 without cancellation or overflow: with e = exp(−|w|) ≤ 0.61,
            // w > 0: exp(w − m) · (1 − e); w < 0: exp(−m) · (e − 1).
            let e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(w)));
            let pos = _mm512_mul_ps(exp16(_mm512_sub_ps(w, vm)), _mm512_sub_ps(one, e));
            let neg = _mm512_mul_ps(gm, _mm512_sub_ps(e, one));
            let far = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(w, _mm512_setzero_ps()), neg, pos);
            let mut poly = _mm512_set1_ps(INV_FACT[0]);
            for &c in &INV_FACT[1..] {
                poly = _mm512_fmadd_ps(poly, w, _mm512_set1_ps(c));
            }
            // expm1(w) = w · (1 + w · poly)
            let near = _mm512_mul_ps(gm, _mm512_mul_ps(w, _mm512_fmadd_ps(poly, w, one)));
            let big = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_abs_ps(w), half);
            _mm512_mask_storeu_ps(p.add(i), mask, _mm512_mask_blend_ps(big, near, far));
            i += 16;
        }
    }
}

/// `y += Σ_j a[j] · x[j·d..(j+1)·d]` (`d = y.len()`, `x` holding `a.len()` rows of `d`), 64
/// columns at a time held in four registers across the rows (AVX-512F): one pass over `y`
/// instead of one per row, and no call per row.
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA); `x.len() >= a.len() · y.len()`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn axpy_rows_avx512(y: &mut [f32], a: &[f32], x: &[f32]) {
    let d = y.len();
    debug_assert!(x.len() >= a.len() * d);
    let (py, px) = (y.as_mut_ptr(), x.as_ptr());
    // SAFETY: masked loads and stores stay within y's d columns and x's a.len() rows of d.
    unsafe {
        for c0 in (0..d).step_by(64) {
            let m: [__mmask16; 4] = core::array::from_fn(|k| {
                let left = d.saturating_sub(c0 + 16 * k);
                if left >= 16 {
                    !0
                } else {
                    ((1u32 << left) - 1) as __mmask16
                }
            });
            let mut acc: [__m512; 4] = core::array::from_fn(|k| _mm512_maskz_loadu_ps(m[k], py.add(c0 + 16 * k)));
            for (j, &aj) in a.iter().enumerate() {
                let av = _mm512_set1_ps(aj);
                let row = px.add(j * d + c0);
                for k in 0..4 {
                    acc[k] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m[k], row.add(16 * k)), acc[k]);
                }
            }
            for k in 0..4 {
                _mm512_mask_storeu_ps(py.add(c0 + 16 * k), m[k], acc[k]);
            }
        }
    }
}
