//! x86_64 AVX2 element-wise math (vectorised exp, erf, erfc; GELU and softmax) and the FMA
//! peak-throughput probes of `kestrel bench gemm`. Re-exported from [`super::x86`].

use core::arch::x86_64::*;

/// Independent FMA chains per round of the peak probes: two FMA pipes × up to 5 cycles of
/// latency need at least 10 in flight; 16 leave margin.
pub const PROBE_CHAINS: usize = 16;

/// Runs `iters` rounds of [`PROBE_CHAINS`] independent `vfmadd231ps` on `$reg` registers
/// (written in assembly: the compiler either folds a constant recurrence away or spills a long
/// accumulator array, and a peak probe must be exactly the instructions it claims).
macro_rules! fma_probe_asm {
    ($iters:expr, $reg:literal) => {{
        let mut n = $iters;
        // SAFETY: register-only arithmetic on vector registers 0-15 (zeroed first, declared
        // clobbered); the loop counter is the only input.
        unsafe {
            core::arch::asm!(
                concat!("vxorps ", $reg, "0, ", $reg, "0, ", $reg, "0"),
                concat!("vxorps ", $reg, "1, ", $reg, "1, ", $reg, "1"),
                concat!("vxorps ", $reg, "2, ", $reg, "2, ", $reg, "2"),
                concat!("vxorps ", $reg, "3, ", $reg, "3, ", $reg, "3"),
                concat!("vxorps ", $reg, "4, ", $reg, "4, ", $reg, "4"),
                concat!("vxorps ", $reg, "5, ", $reg, "5, ", $reg, "5"),
                concat!("vxorps ", $reg, "6, ", $reg, "6, ", $reg, "6"),
                concat!("vxorps ", $reg, "7, ", $reg, "7, ", $reg, "7"),
                concat!("vxorps ", $reg, "8, ", $reg, "8, ", $reg, "8"),
                concat!("vxorps ", $reg, "9, ", $reg, "9, ", $reg, "9"),
                concat!("vxorps ", $reg, "10, ", $reg, "10, ", $reg, "10"),
                concat!("vxorps ", $reg, "11, ", $reg, "11, ", $reg, "11"),
                concat!("vxorps ", $reg, "12, ", $reg, "12, ", $reg, "12"),
                concat!("vxorps ", $reg, "13, ", $reg, "13, ", $reg, "13"),
                concat!("vxorps ", $reg, "14, ", $reg, "14, ", $reg, "14"),
                concat!("vxorps ", $reg, "15, ", $reg, "15, ", $reg, "15"),
                "test {n}, {n}",
                "jz 3f",
                "2:",
                concat!("vfmadd231ps ", $reg, "3, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "4, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "5, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "6, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "7, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "8, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "9, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "10, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "11, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "12, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "13, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "14, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "15, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "0, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "3, ", $reg, "1, ", $reg, "2"),
                concat!("vfmadd231ps ", $reg, "4, ", $reg, "1, ", $reg, "2"),
                "dec {n}",
                "jnz 2b",
                "3:",
                n = inout(reg) n,
                out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
                out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
                out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
                out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
                options(nomem, nostack),
            );
        }
        n
    }};
}

/// The peak-throughput probe: `iters` rounds of [`PROBE_CHAINS`] 8-lane FMAs
/// (`iters · 16 · 8 · 2` flops). Returns the loop counter's final value (0).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn fma_probe_avx2(iters: usize) -> usize {
    fma_probe_asm!(iters, "ymm")
}

/// [`fma_probe_avx2`] with 16-lane AVX-512 FMAs (`iters · 16 · 16 · 2` flops).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn fma_probe_avx512(iters: usize) -> usize {
    fma_probe_asm!(iters, "zmm")
}

/// The Cephes `expf` polynomial for `e^r − 1 − r` over `r²` (highest degree first), shared by
/// [`exp8`] and [`exp16`].
const EXP_P: [f32; 6] = [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];

/// Numerical Recipes' `erfcc` Chebyshev coefficients (`C[0]` the constant term), shared by
/// [`erfc8`] and [`erfc16`].
const ERFC_C: [f32; 10] = [
    -1.265_512_2,
    1.000_023_7,
    0.374_091_96,
    0.096_784_18,
    -0.186_288_06,
    0.278_868_07,
    -1.135_204,
    1.488_515_9,
    -0.822_152_2,
    0.170_872_77,
];

/// `e^x` for 8 lanes, meant for `x ≤ 0` (the callers' range: softmax after subtracting the row
/// maximum, erfc's Gaussian factor): Cody–Waite reduction `x = n·ln2 + r`, a degree-6
/// polynomial for `e^r` (the Cephes `expf` coefficients), and `2^n` built in the exponent bits.
/// Below −87.3 (where `e^x` leaves the normal f32 range) the result is 0; above 88.37 it is ∞
/// (`2^n` past the exponent bits: early by at most 0.35 of the exponent, outside the callers'
/// range; e^x overflows at 88.72); NaN stays NaN.
#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    // SAFETY: AVX2/FMA available in every caller.
    unsafe {
        let x_in = x;
        let lo = _mm256_set1_ps(-87.336_54);
        let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo);
        let hi = _mm256_set1_ps(88.376_26);
        let overflow = _mm256_cmp_ps::<_CMP_GT_OQ>(x, hi);
        let x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            x,
            _mm256_set1_ps(core::f32::consts::LOG2_E),
        ));
        // ln 2 split in two: n·0.693359375 is exact for |n| < 2^12.
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(EXP_P[0]);
        for &c in &EXP_P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let r2 = _mm256_mul_ps(r, r);
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
        let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        )));
        let e = _mm256_andnot_ps(underflow, _mm256_mul_ps(y, pow2));
        let e = _mm256_blendv_ps(e, _mm256_set1_ps(f32::INFINITY), overflow);
        // `max` above turned NaN lanes into the lower bound: give them back.
        _mm256_blendv_ps(e, x_in, _mm256_cmp_ps::<_CMP_UNORD_Q>(x_in, x_in))
    }
}

/// `erf(x)` for 8 lanes: the odd/even rational approximation `x·P(x²)/Q(x²)` on x clamped
/// to [−4, 4] (beyond, erf is ±1 in f32), the form and coefficients Eigen and XLA use for f32;
/// at most 4.2e-7 from the exact erf (checked against f64 in `runtime/cpu/tests/simd.rs`).
#[inline(always)]
unsafe fn erf8(x: __m256) -> __m256 {
    const A: [f32; 7] = [
        -1.609_603_3e-2,
        -2.954_6e-3,
        -7.349_906_3e-4,
        -5.692_506_4e-5,
        -2.101_024e-6,
        2.770_681_4e-8,
        -2.726_142_3e-10,
    ];
    const B: [f32; 5] = [-1.426_473_9e-2, -7.373_329e-3, -1.682_827e-3, -2.133_740_6e-4, -1.456_607_2e-5];
    // SAFETY: AVX2/FMA available in every caller.
    unsafe {
        let x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(4.0)), _mm256_set1_ps(-4.0));
        let x2 = _mm256_mul_ps(x, x);
        let mut p = _mm256_set1_ps(A[6]);
        for &a in A[..6].iter().rev() {
            p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(a));
        }
        let mut q = _mm256_set1_ps(B[4]);
        for &b in B[..4].iter().rev() {
            q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(b));
        }
        _mm256_div_ps(_mm256_mul_ps(x, p), q)
    }
}

/// `erfc(x)` for 8 lanes: the Chebyshev fit `t·exp(−z² + P(t))`, `t = 1/(1 + z/2)`, `z = |x|`,
/// of Numerical Recipes' `erfcc` (fractional error below 1.2e-7 in exact arithmetic), and
/// `2 − erfc(|x|)` for negative x. Relative accuracy holds in the tail, where `1 + erf`
/// would cancel.
#[inline(always)]
unsafe fn erfc8(x: __m256) -> __m256 {
    // SAFETY: AVX2/FMA available in every caller.
    unsafe {
        let one = _mm256_set1_ps(1.0);
        let z = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
        let t = _mm256_div_ps(one, _mm256_fmadd_ps(z, _mm256_set1_ps(0.5), one));
        let mut p = _mm256_set1_ps(ERFC_C[9]);
        for &c in ERFC_C[1..9].iter().rev() {
            p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
        }
        // −z² + C0 + t·p
        let arg = _mm256_fmadd_ps(t, p, _mm256_fnmadd_ps(z, z, _mm256_set1_ps(ERFC_C[0])));
        let e = _mm256_mul_ps(t, exp8(arg));
        let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
        _mm256_blendv_ps(e, _mm256_sub_ps(_mm256_set1_ps(2.0), e), neg)
    }
}

/// Below this x, GELU takes the erfc form (`1 + erf` would lose relative accuracy to
/// cancellation: at −2 it is 0.046, so erf's 4.2e-7 absolute error is 1e-5 relative).
const GELU_ERFC_BELOW: f32 = -2.0;

/// Exact (erf) GELU in place, 8 lanes at a time (the tail through a padded copy, so every
/// element gets the same arithmetic): `0.5·x·(1 + erf(x/√2))` with the cheap rational erf, and
/// for vectors with a lane below [`GELU_ERFC_BELOW`], `0.5·x·erfc(−x/√2)` blended into those
/// lanes (relative accuracy in the negative tail).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gelu(y: &mut [f32]) {
    #[inline(always)]
    unsafe fn gelu8(x: __m256) -> __m256 {
        // SAFETY: AVX2/FMA available (caller).
        unsafe {
            let h = _mm256_mul_ps(x, _mm256_set1_ps(0.5));
            let e = erf8(_mm256_mul_ps(x, _mm256_set1_ps(core::f32::consts::FRAC_1_SQRT_2)));
            let g = _mm256_fmadd_ps(h, e, h);
            let tail = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(GELU_ERFC_BELOW));
            if _mm256_movemask_ps(tail) == 0 {
                return g;
            }
            let ec = erfc8(_mm256_mul_ps(x, _mm256_set1_ps(-core::f32::consts::FRAC_1_SQRT_2)));
            _mm256_blendv_ps(g, _mm256_mul_ps(h, ec), tail)
        }
    }
    map(y, |v| unsafe { gelu8(v) });
}

/// One register of f32 lanes, as [`map`] loads and stores it.
trait Lanes: Copy {
    /// Lanes (at most 16).
    const L: usize;
    unsafe fn loadu(p: *const f32) -> Self;
    unsafe fn storeu(p: *mut f32, v: Self);
}

impl Lanes for __m256 {
    const L: usize = 8;
    #[inline(always)]
    unsafe fn loadu(p: *const f32) -> Self {
        // SAFETY: 8 f32 at p; AVX available in every caller.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn storeu(p: *mut f32, v: Self) {
        // SAFETY: 8 f32 at p; AVX available in every caller.
        unsafe { _mm256_storeu_ps(p, v) }
    }
}

impl Lanes for __m512 {
    const L: usize = 16;
    #[inline(always)]
    unsafe fn loadu(p: *const f32) -> Self {
        // SAFETY: 16 f32 at p; AVX-512F available in every caller.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn storeu(p: *mut f32, v: Self) {
        // SAFETY: 16 f32 at p; AVX-512F available in every caller.
        unsafe { _mm512_storeu_ps(p, v) }
    }
}

/// Applies `f` to `y` one register (8 or 16 lanes) at a time; the tail through a padded copy,
/// so every element gets the same arithmetic.
#[inline(always)]
fn map<V: Lanes>(y: &mut [f32], f: impl Fn(V) -> V) {
    let mut chunks = y.chunks_exact_mut(V::L);
    for c in &mut chunks {
        // SAFETY: c holds V::L f32; V's instructions available in every caller.
        unsafe { V::storeu(c.as_mut_ptr(), f(V::loadu(c.as_ptr()))) };
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let mut buf = [0.0f32; 16];
        buf[..tail.len()].copy_from_slice(tail);
        // SAFETY: buf holds 16 ≥ V::L f32.
        unsafe { V::storeu(buf.as_mut_ptr(), f(V::loadu(buf.as_ptr()))) };
        tail.copy_from_slice(&buf[..tail.len()]);
    }
}

/// Softmax of `row` in place: the maximum subtracted, [`exp8`], the sum, one scale.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax(row: &mut [f32]) {
    if row.is_empty() {
        return;
    }
    let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    // SAFETY: AVX2/FMA available here (this function's contract).
    unsafe { exp_sub(row, m) };
    let s: f32 = row.iter().sum();
    let inv = _mm256_set1_ps(1.0 / s);
    map(row, |v| _mm256_mul_ps(v, inv));
}

/// `σ(x) = 1 / (1 + e^−x)` for 8 lanes, from `e = e^−|x|` (never overflows): `1 / (1 + e)` for
/// x ≥ 0 and `e / (1 + e)` below.
#[inline(always)]
unsafe fn sigmoid8(x: __m256) -> __m256 {
    // SAFETY: AVX2/FMA available in every caller.
    unsafe {
        let e = exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0)));
        let r = _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_add_ps(_mm256_set1_ps(1.0), e));
        let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
        _mm256_blendv_ps(r, _mm256_mul_ps(e, r), neg)
    }
}

/// `v[i] ← e^(v[i] − m)` for `v[i] ≤ m` (a maximum subtracted).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_sub(v: &mut [f32], m: f32) {
    let mv = _mm256_set1_ps(m);
    // SAFETY (closure): AVX2/FMA available here.
    map(v, |x| unsafe { exp8(_mm256_sub_ps(x, mv)) });
}

/// `v[i] ← e^(v[i] − m[i])` for `v[i] ≤ m[i]`, over `v.len()` elements (`m.len() >= v.len()`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn exp_sub_each(v: &mut [f32], m: &[f32]) {
    let m = &m[..v.len()];
    let mut vc = v.chunks_exact_mut(8);
    let mut mc = m.chunks_exact(8);
    for (c, mm) in (&mut vc).zip(&mut mc) {
        // SAFETY: both chunks hold 8 f32.
        unsafe {
            let x = _mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), _mm256_loadu_ps(mm.as_ptr()));
            _mm256_storeu_ps(c.as_mut_ptr(), exp8(x));
        }
    }
    let (tail, mt) = (vc.into_remainder(), mc.remainder());
    for (v, &m) in tail.iter_mut().zip(mt) {
        *v -= m;
    }
    // SAFETY (closure): AVX2/FMA available here.
    map(tail, |x| unsafe { exp8(x) });
}

/// `q[i] ← σ(q[i]) · num[i] · s / den[i]` over `q.len()` elements (`den` absent: 1).
///
/// # Safety
/// The CPU must support AVX2 and FMA; `num` (and `den`) hold at least `q.len()` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sigmoid_gate(q: &mut [f32], num: &[f32], den: Option<&[f32]>, s: f32) {
    let n = q.len();
    assert!(num.len() >= n && den.is_none_or(|d| d.len() >= n));
    let sv = _mm256_set1_ps(s);
    let n8 = n / 8 * 8;
    let (qp, np) = (q.as_mut_ptr(), num.as_ptr());
    let mut i = 0;
    // SAFETY: i + 8 <= n8 <= every slice's length.
    unsafe {
        while i < n8 {
            let g = _mm256_mul_ps(sigmoid8(_mm256_loadu_ps(qp.add(i))), _mm256_mul_ps(_mm256_loadu_ps(np.add(i)), sv));
            let g = match den {
                Some(d) => _mm256_div_ps(g, _mm256_loadu_ps(d.as_ptr().add(i))),
                None => g,
            };
            _mm256_storeu_ps(qp.add(i), g);
            i += 8;
        }
    }
    if n8 < n {
        let mut buf = [0.0f32; 8];
        let tail = &mut q[n8..];
        buf[..tail.len()].copy_from_slice(tail);
        // SAFETY (closure): AVX2/FMA available here.
        map(&mut buf, |x| unsafe { sigmoid8(x) });
        for (j, q) in tail.iter_mut().enumerate() {
            let g = buf[j] * (num[n8 + j] * s);
            *q = match den {
                Some(d) => g / d[n8 + j],
                None => g,
            };
        }
    }
}

/// `e^x` for 16 lanes (AVX-512F): the reduction and polynomial of [`exp8`], with `2^n` applied
/// by `vscalefps`, which underflows gracefully to 0 (no clamp needed) and keeps NaN.
#[inline(always)]
pub(super) unsafe fn exp16(x: __m512) -> __m512 {
    // SAFETY: AVX-512F available in every caller.
    unsafe {
        // Clamped to where the result is 0 or ∞ anyway (e^-104 is below the smallest subnormal,
        // e^89 above f32::MAX): beyond |n| ~ 2^12 the range reduction below loses r, and a
        // score of -3e38 (a mask fill) gave NaN. `max`/`min` return the second operand, x, when
        // it is NaN, so NaN stays NaN.
        let x = _mm512_min_ps(_mm512_set1_ps(89.0), _mm512_max_ps(_mm512_set1_ps(-104.0), x));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
            x,
            _mm512_set1_ps(core::f32::consts::LOG2_E),
        ));
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm512_set1_ps(EXP_P[0]);
        for &c in &EXP_P[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let r2 = _mm512_mul_ps(r, r);
        let y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
        _mm512_scalef_ps(y, n)
    }
}

/// `erfc(x)` for 16 lanes: [`erfc8`]'s fit (relative accuracy everywhere, the tail included).
#[inline(always)]
unsafe fn erfc16(x: __m512) -> __m512 {
    // SAFETY: AVX-512F available in every caller.
    unsafe {
        let one = _mm512_set1_ps(1.0);
        // |x| capped at 16 (erfc(16) ≈ 1e-113 is 0 in f32 either way), so that ∞ takes the
        // Newton step below finite (∞ · 0 would be NaN); NaN stays NaN (`min` returns it).
        let z = _mm512_min_ps(_mm512_set1_ps(16.0), _mm512_abs_ps(x));
        // t = 1 / (1 + z/2) by `vrcp14ps` and one Newton step (relative error ~2⁻²⁸ before
        // rounding, under the fit's own): `vdivps` on 16 lanes cost more than the rest of the
        // formula together (GELU over an MLP's 8,192 activations: 2.3× faster).
        let den = _mm512_fmadd_ps(z, _mm512_set1_ps(0.5), one);
        let r = _mm512_rcp14_ps(den);
        let t = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(den, r, one), r);
        let mut p = _mm512_set1_ps(ERFC_C[9]);
        for &c in ERFC_C[1..9].iter().rev() {
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
        }
        let arg = _mm512_fmadd_ps(t, p, _mm512_fnmadd_ps(z, z, _mm512_set1_ps(ERFC_C[0])));
        let e = _mm512_mul_ps(t, exp16(arg));
        let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
        _mm512_mask_sub_ps(e, neg, _mm512_set1_ps(2.0), e)
    }
}

/// Exact GELU in place, 16 lanes at a time (AVX-512F): `0.5·x·erfc(−x/√2)` for every lane —
/// one formula, relative accuracy in the negative tail and no erf/erfc blend (about 2.5× the
/// AVX2 kernel's throughput on activations with a negative tail). The tail of `y` goes through
/// a padded copy, so every element gets the same arithmetic.
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn gelu_avx512(y: &mut [f32]) {
    #[inline(always)]
    unsafe fn gelu16(x: __m512) -> __m512 {
        // SAFETY: AVX-512F available (caller).
        unsafe {
            let e = erfc16(_mm512_mul_ps(x, _mm512_set1_ps(-core::f32::consts::FRAC_1_SQRT_2)));
            _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5)), e)
        }
    }
    // Four vectors per step, written out: each is a ~25-deep dependent chain; four independent
    // ones side by side (MNIST ViT fixture, two MLPs of 8,192 activations: about 1 µs of the
    // run's 13 µs of GELU saved).
    let mut quads = y.chunks_exact_mut(64);
    for c in &mut quads {
        // SAFETY: c holds 64 f32.
        unsafe {
            let p = c.as_mut_ptr();
            let (a, b) = (gelu16(_mm512_loadu_ps(p)), gelu16(_mm512_loadu_ps(p.add(16))));
            let (e, f) = (gelu16(_mm512_loadu_ps(p.add(32))), gelu16(_mm512_loadu_ps(p.add(48))));
            _mm512_storeu_ps(p, a);
            _mm512_storeu_ps(p.add(16), b);
            _mm512_storeu_ps(p.add(32), e);
            _mm512_storeu_ps(p.add(48), f);
        }
    }
    map(quads.into_remainder(), |v| unsafe { gelu16(v) });
}

/// Softmax of `scale · row` in place, 16 lanes at a time (AVX-512F): one pass scales and finds
/// the maximum, one takes [`exp16`]`(v − max)` and sums, one multiplies by the reciprocal of
/// the sum; the maximum and the sum are vector reductions (no serial chain through the row) and
/// the tail is masked, so a 16-key attention row is one register throughout. Any finite
/// `scale` (the maximum is taken of the scaled values).
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn softmax_scaled_avx512(row: &mut [f32], scale: f32) {
    let n = row.len();
    if n == 0 {
        return;
    }
    let full = n / 16 * 16;
    let tail = (n - full) as u32;
    let tmask: __mmask16 = ((1u32 << tail) - 1) as __mmask16;
    let sc = _mm512_set1_ps(scale);
    let p = row.as_mut_ptr();
    // SAFETY: every access is inside `row` (full chunks below `full`, the tail masked).
    unsafe {
        let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i < full {
            let v = _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), sc);
            _mm512_storeu_ps(p.add(i), v);
            mx = _mm512_max_ps(v, mx);
            i += 16;
        }
        if tail > 0 {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tmask, p.add(full)), sc);
            _mm512_mask_storeu_ps(p.add(full), tmask, v);
            mx = _mm512_mask_max_ps(mx, tmask, v, mx);
        }
        let m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
        let mut sum = _mm512_setzero_ps();
        i = 0;
        while i < full {
            let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), m));
            _mm512_storeu_ps(p.add(i), e);
            sum = _mm512_add_ps(sum, e);
            i += 16;
        }
        if tail > 0 {
            let e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tmask, p.add(full)), m));
            _mm512_mask_storeu_ps(p.add(full), tmask, e);
            sum = _mm512_mask_add_ps(sum, tmask, sum, e);
        }
        let inv = _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(sum));
        i = 0;
        while i < full {
            _mm512_storeu_ps(p.add(i), _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), inv));
            i += 16;
        }
        if tail > 0 {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(tmask, p.add(full)), inv);
            _mm512_mask_storeu_ps(p.add(full), tmask, v);
        }
    }
}

/// Attention of one head for heads of at most 16 columns over at most 16 keys (MobileViT: c = 8,
/// T = 16), straight from registers: the keys transposed (`kt`, `c` rows of `n` at stride `ks`)
/// are held one row per register; per query, the scores are `c` FMAs into one vector, the
/// softmax runs on it (masked lanes: keys past `n`, or past the query when `causal`), and the
/// output is `m` FMAs of value rows (`v`, stride `vs`). `q` rows (`c` columns) at stride `qs`,
/// output rows at stride `os`; query `r` is token `i0 + r` (for the causal limit). Sums run in
/// another order than the GEMM path's, within the f32 kernel tolerance of the f64 reference.
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA); `c, n ≤ 16`, `n ≥ 1`; `q`, `kt`, `v` and
/// `out` hold the rows the strides address.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn small_head_avx512(
    (q, qs): (&[f32], usize),
    (kt, ks): (&[f32], usize),
    (v, vs): (&[f32], usize),
    (out, os): (&mut [f32], usize),
    (rows, c, n): (usize, usize, usize),
    (i0, causal, scale): (usize, bool, f32),
) {
    debug_assert!(c <= 16 && (1..=16).contains(&n));
    debug_assert!(rows == 0 || (q.len() >= (rows - 1) * qs + c && out.len() >= (rows - 1) * os + c));
    debug_assert!(kt.len() >= (c.max(1) - 1) * ks + n && v.len() >= (n - 1) * vs + c);
    let cm: __mmask16 = ((1u32 << c) - 1) as __mmask16;
    // SAFETY: every load/store is masked to the c columns or n keys the contract guarantees.
    unsafe {
        let mut krow = [_mm512_setzero_ps(); 16];
        let nm: __mmask16 = ((1u32 << n) - 1) as __mmask16;
        for (u, kr) in krow.iter_mut().enumerate().take(c) {
            *kr = _mm512_maskz_loadu_ps(nm, kt.as_ptr().add(u * ks));
        }
        let sc = _mm512_set1_ps(scale);
        let mut p = [0.0f32; 16];
        for r in 0..rows {
            let m = if causal { (i0 + r + 1).min(n) } else { n };
            let mm: __mmask16 = ((1u32 << m) - 1) as __mmask16;
            let qr = q.as_ptr().add(r * qs);
            let mut s = _mm512_setzero_ps();
            for (u, kr) in krow.iter().enumerate().take(c) {
                s = _mm512_fmadd_ps(_mm512_set1_ps(*qr.add(u)), *kr, s);
            }
            let s = _mm512_mul_ps(s, sc);
            let mx = _mm512_mask_reduce_max_ps(mm, s);
            // Lanes past the visible keys: exp(0) computed, then zeroed.
            let e = _mm512_maskz_mov_ps(mm, exp16(_mm512_maskz_sub_ps(mm, s, _mm512_set1_ps(mx))));
            let pv = _mm512_mul_ps(e, _mm512_set1_ps(1.0 / _mm512_reduce_add_ps(e)));
            _mm512_storeu_ps(p.as_mut_ptr(), pv);
            let mut o = _mm512_setzero_ps();
            for (j, &pj) in p.iter().enumerate().take(m) {
                o = _mm512_fmadd_ps(_mm512_set1_ps(pj), _mm512_maskz_loadu_ps(cm, v.as_ptr().add(j * vs)), o);
            }
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(r * os), cm, o);
        }
    }
}

/// `1 / (1 + e^−x)` for 16 lanes, without a division (`vdivps` on 16 lanes cost more than the
/// rest together): `vrcp14ps` refined by one Newton step (relative error about 2⁻²⁸, below f32's
/// rounding). Arguments are clamped to ±87 first, so `1 + e^−x` stays finite and [`exp16`]'s
/// range reduction exact (σ beyond is under 2⁻¹²⁵, or 1 in f32, either way); NaN passes
/// through the `max` and `min`.
#[inline(always)]
unsafe fn sigmoid16(x: __m512) -> __m512 {
    // SAFETY: AVX-512F available in every caller.
    unsafe {
        let one = _mm512_set1_ps(1.0);
        // `max(lo, x)` and `min(hi, x)` return their second operand when either is NaN.
        let x = _mm512_min_ps(_mm512_set1_ps(87.0), _mm512_max_ps(_mm512_set1_ps(-87.0), x));
        let d = _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x)));
        let r = _mm512_rcp14_ps(d);
        _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0)))
    }
}

/// `σ(v[i])` in place, 16 lanes at a time ([`sigmoid16`]).
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn sigmoid_avx512(v: &mut [f32]) {
    // SAFETY (closure): AVX-512F available here.
    map(v, |x| unsafe { sigmoid16(x) });
}

/// SiLU `v[i]·σ(v[i])` in place, 16 lanes at a time: `x / (1 + e^−x)` in one pass (no copy).
///
/// # Safety
/// The CPU must support AVX-512F (and AVX2/FMA).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub unsafe fn silu_avx512(v: &mut [f32]) {
    // SAFETY (closure): AVX-512F available here.
    map(v, |x| unsafe {
        // σ below the clamp is 0 (the true value is under 2⁻¹²⁵): x·σ(x) is then −0 for a
        // finite x and NaN for −∞, as x·σ(x) is everywhere else (the AVX2 and scalar forms).
        let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(-87.0));
        let s = _mm512_mask_blend_ps(below, sigmoid16(x), _mm512_setzero_ps());
        _mm512_mul_ps(x, s)
    });
}

/// SiLU `v[i]·σ(v[i])` in place, 8 lanes at a time ([`sigmoid8`], one pass).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn silu(v: &mut [f32]) {
    // SAFETY (closure): AVX2/FMA available here.
    map(v, |x| unsafe { _mm256_mul_ps(x, sigmoid8(x)) });
}

/// `σ(v[i])` in place, 8 lanes at a time ([`sigmoid8`]; the tail through a padded copy).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn sigmoid(v: &mut [f32]) {
    // SAFETY (closure): AVX2/FMA available here.
    map(v, |x| unsafe { sigmoid8(x) });
}

/// Cephes `tanhf`'s odd polynomial for |x| < 0.625: `tanh x ≈ x + x·z·P(z)`, `z = x²`.
const TANH_P: [f32; 5] = [-5.704_988_7e-3, 2.063_909e-2, -5.373_971_6e-2, 1.333_144_2e-1, -3.333_328e-1];

/// `tanh(x)` for 8 lanes: Cephes' polynomial below |x| = 0.625 (relative accuracy near 0, where
/// the exponential form cancels), else `sign(x)·(1 − e)/(1 + e)` with `e = e^(−2|x|)` from
/// [`exp8`] (never overflows; ±1 for large |x|).
#[inline(always)]
unsafe fn tanh8(x: __m256) -> __m256 {
    // SAFETY: AVX2/FMA available in every caller.
    unsafe {
        let sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0));
        let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
        let one = _mm256_set1_ps(1.0);
        let e = exp8(_mm256_mul_ps(a, _mm256_set1_ps(-2.0)));
        let big = _mm256_or_ps(_mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e)), sign);
        let z = _mm256_mul_ps(x, x);
        let mut p = _mm256_set1_ps(TANH_P[0]);
        for &c in &TANH_P[1..] {
            p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(c));
        }
        let small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
        _mm256_blendv_ps(big, small, _mm256_cmp_ps::<_CMP_LT_OQ>(a, _mm256_set1_ps(0.625)))
    }
}

/// `tanh(v[i])` in place, 8 lanes at a time ([`tanh8`]; the tail through a padded copy).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tanh(v: &mut [f32]) {
    // SAFETY (closure): AVX2/FMA available here.
    map(v, |x| unsafe { tanh8(x) });
}
