//! The vectorised f32 math layer of the element-wise kernels: exp, log, log1p and, from them or
//! by their own polynomials, erf, the trigonometric and hyperbolic functions and their
//! inverses, softplus, tanh, pow with a run-time exponent, and the roundings — written once,
//! generically over [`VecF`] (one register of f32 lanes and the handful of operations the
//! functions need), and compiled per ISA: AVX2 + FMA (8 lanes), AVX-512F (16 lanes) and NEON
//! (4 lanes). The entry points ([`unary_avx2`], [`pow_avx512`], ...) run one loop per function
//! with the function inlined into it; the tail goes through a padded copy, so every element
//! gets the same arithmetic.
//!
//! **Method.** Cody–Waite range reductions (`x = n·ln2 + r` for exp, `x = q·π/2 + r` in four
//! parts for the trigonometric functions, `x = 2^e·m` with `m ∈ [√½, √2)` for log) and
//! polynomials fitted for this file (weighted least squares iterated towards the minimax
//! relative error, on the reduced interval, coefficients rounded to f32: the fit's own error is
//! under 0.6 ulp everywhere; `exp` keeps the Cephes coefficients the softmax kernels use). The
//! bounds each function is tested to, against the f64 definitions (`runtime/cpu/tests/
//! vmath.rs`, random inputs over the whole domain and the edges), are [`ULP_BOUNDS`].
//!
//! **Special values.** NaN in gives NaN out; ±0 keep their sign where the function is odd; the
//! infinities and the overflow and underflow thresholds give what libm gives (e^x is ∞ from
//! 88.73 and a subnormal, then 0, below −87.34). `sin`, `cos` and `tan` reduce exactly for
//! `|x| ≤ 6000` (four-part π/2 with 12-bit leading parts: every step exact or within half an
//! ulp of the reduced argument); a vector with a lane beyond (or an infinity or NaN) is
//! computed lane by lane with libm (Payne–Hanek), so huge arguments cost speed, not accuracy.

// Without a SIMD ISA (microcontrollers) only the bounds and the operand type are used: the
// element-wise kernels keep their scalar loops there.
#![cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code, unused_macros))]

use core::ops::{Add, BitAnd, BitOr, BitXor, Div, Mul, Neg, Sub};
use kestrel_rt_format::ops::UnaryOp;

/// The tested error bound of each vectorised function, in units in the last place of the f32
/// result (the distance to the correctly rounded f64 definition divided by the spacing of f32
/// values at the result; below the smallest normal, the subnormal spacing). Inputs anywhere in
/// the function's domain (for `Pow`, the bound is `ULP_BOUNDS` plus `|b|/4` ulp: an error of
/// one ulp in `log2 a` is amplified by the exponent, as pow's own condition number is).
pub const ULP_BOUNDS: &[(UnaryOp, f64)] = &[
    (UnaryOp::Exp, 2.0),
    (UnaryOp::Sigmoid, 3.0),
    (UnaryOp::Silu, 4.0),
    (UnaryOp::GeluTanh, 8.0),
    (UnaryOp::Log, 2.0),
    (UnaryOp::Erf, 8.0),
    (UnaryOp::Softplus, 3.0),
    (UnaryOp::Sin, 2.0),
    (UnaryOp::Cos, 2.0),
    (UnaryOp::Tan, 4.0),
    (UnaryOp::Asin, 2.0),
    (UnaryOp::Acos, 2.0),
    (UnaryOp::Atan, 2.0),
    (UnaryOp::Sinh, 3.0),
    (UnaryOp::Cosh, 3.0),
    (UnaryOp::Tanh, 3.0),
    (UnaryOp::Asinh, 3.0),
    (UnaryOp::Acosh, 3.0),
    (UnaryOp::Atanh, 3.0),
    (UnaryOp::Floor, 0.0),
    (UnaryOp::Ceil, 0.0),
    (UnaryOp::Round, 0.0),
    (UnaryOp::Sqrt, 0.5),
    (UnaryOp::Rsqrt, 1.5),
];

/// The tested bound of `op` at `x`, in ulps: [`ULP_BOUNDS`], and for the tanh GELU also
/// `3·|u|` with `u = 2·√(2/π)·(x + 0.044715·x³)` — in the negative tail the result is about
/// `x·e^u`, so the roundings of `u` in f32 (as in the scalar form) move it by a few `|u|·2^−24`
/// relatively; the function's own condition number there is about `3·|u|`.
pub fn ulp_bound(op: UnaryOp, x: f32) -> Option<f64> {
    let base = ULP_BOUNDS.iter().find(|&&(o, _)| o == op)?.1;
    Some(match op {
        UnaryOp::GeluTanh => {
            let x = f64::from(x);
            let u = 2.0 * 0.797_884_6 * (x + 0.044_715 * x * x * x);
            base + 3.0 * u.abs()
        }
        _ => base,
    })
}

/// [`pow`]'s error bound for exponent `b`, in ulps (see [`ULP_BOUNDS`]).
pub fn pow_ulp_bound(b: f32) -> f64 {
    4.0 + f64::from(b.abs()) / 64.0
}

/// One register of f32 lanes and the operations the math layer is written in.
///
/// # Safety
/// A value of an implementing type exists only in code compiled for its ISA and run after that
/// ISA was detected (the types are private to this module and built only inside the ISA's
/// `#[target_feature]` entry points): the safe methods rely on it.
pub(super) unsafe trait VecF:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
{
    /// A lane mask (a comparison's result).
    type M: Copy;
    /// Lanes (at most 16).
    const L: usize;
    /// Every lane `v`.
    fn splat(v: f32) -> Self;
    /// # Safety
    /// `p` readable for `L` f32.
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `p` writable for `L` f32.
    unsafe fn store(self, p: *mut f32);
    /// `self·b + c`, one rounding.
    fn fma(self, b: Self, c: Self) -> Self;
    /// The smaller (lanes with a NaN: either operand).
    fn min(self, b: Self) -> Self;
    /// The larger (lanes with a NaN: either operand).
    fn max(self, b: Self) -> Self;
    /// Correctly rounded √.
    fn sqrt(self) -> Self;
    /// Rounded to the nearest integer, halves to even.
    fn round(self) -> Self;
    /// ⌊x⌋.
    fn floor(self) -> Self;
    /// ⌈x⌉.
    fn ceil(self) -> Self;
    /// Rounded toward zero.
    fn trunc(self) -> Self;
    /// `!self & b` bitwise.
    fn andnot(self, b: Self) -> Self;
    /// `self < b` (false with a NaN).
    fn lt(self, b: Self) -> Self::M;
    /// `self ≤ b` (false with a NaN).
    fn le(self, b: Self) -> Self::M;
    /// `self = b` (false with a NaN).
    fn eq(self, b: Self) -> Self::M;
    /// Lanes that are NaN.
    fn nan(self) -> Self::M;
    /// `m ? a : b` per lane.
    fn select(m: Self::M, a: Self, b: Self) -> Self;
    /// Both masks.
    fn mand(a: Self::M, b: Self::M) -> Self::M;
    /// Either mask.
    fn mor(a: Self::M, b: Self::M) -> Self::M;
    /// The complement of a mask.
    fn mnot(a: Self::M) -> Self::M;
    /// Whether any lane is set.
    fn any(m: Self::M) -> bool;
    /// `self·2^n` for integral `n` in [−252, 254], one rounding (gradual underflow, ∞ on
    /// overflow).
    fn ldexp(self, n: Self) -> Self;
    /// `(m, e)` with `self = m·2^e`, `m ∈ [1, 2)`, `e` integral: for positive finite non-zero
    /// lanes (subnormals included); anything for the others.
    fn frexp(self) -> (Self, Self);
}

/// `f` applied lane by lane (the rare lanes the vector forms leave to libm).
#[inline(always)]
fn lanes<V: VecF>(v: V, f: impl Fn(f32) -> f32) -> V {
    let mut b = [0.0f32; 16];
    // SAFETY: b holds 16 ≥ V::L f32.
    unsafe {
        v.store(b.as_mut_ptr());
        b[..V::L].iter_mut().for_each(|x| *x = f(*x));
        V::load(b.as_ptr())
    }
}

#[inline(always)]
fn k<V: VecF>(v: f32) -> V {
    V::splat(v)
}

/// `Σ c[i]·x^i` (Horner; `c` lowest degree first).
#[inline(always)]
fn poly<V: VecF>(x: V, c: &[f32]) -> V {
    let mut p = k::<V>(c[c.len() - 1]);
    for &ci in c[..c.len() - 1].iter().rev() {
        p = p.fma(x, k(ci));
    }
    p
}

/// |x|.
#[inline(always)]
fn abs<V: VecF>(x: V) -> V {
    k::<V>(-0.0).andnot(x)
}

/// The sign bit of `x` (as a value: −0 or +0).
#[inline(always)]
fn sign<V: VecF>(x: V) -> V {
    x & k(-0.0)
}

/// NaN in the lanes where `x` is NaN, `r` elsewhere.
#[inline(always)]
fn keep_nan<V: VecF>(x: V, r: V) -> V {
    V::select(x.nan(), x, r)
}

const LOG2_E: f32 = core::f32::consts::LOG2_E;
/// log2(e) − LOG2_E.
const LOG2_E_LO: f32 = 1.925_963e-8;
/// ln 2 in two parts: `n·LN2_HI` is exact for |n| < 2^15.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// ln 2 rounded to f32, and the rest.
const LN2_F: f32 = core::f32::consts::LN_2;
const LN2_F_LO: f32 = -1.904_654_3e-9;
/// The Cephes `expf` polynomial: `e^r ≈ 1 + r + r²·P(r)` on `|r| ≤ ln2/2` (lowest degree first).
const EXP_P: [f32; 6] = [0.5, 0.166_666_65, 4.166_579_6e-2, 8.333_452e-3, 1.398_2e-3, 1.987_569_1e-4];
/// `ln(1 + f) ≈ f − f²/2 + f³·P(f)` on `f ∈ [√½ − 1, √2 − 1]` (fitted; 0.11 ulp).
const LOG_P: [f32; 8] = [
    3.333_333e-1,
    -2.500_082e-1,
    2.000_122_5e-1,
    -1.662_337e-1,
    1.420_181_4e-1,
    -1.316_010_5e-1,
    1.276_113_5e-1,
    -7.634_154e-2,
];
/// `sin r ≈ r + r³·S(r²)` on `|r| ≤ π/4` (fitted; 0.06 ulp).
const SIN_P: [f32; 4] = [-1.666_666_7e-1, 8.333_329e-3, -1.983_931_3e-4, 2.718_128e-6];
/// `cos r ≈ 1 − r²/2 + r⁴·C(r²)` on `|r| ≤ π/4` (fitted; 0.01 ulp).
const COS_P: [f32; 4] = [4.166_666_8e-2, -1.388_888_3e-3, 2.479_946_1e-5, -2.720_579_2e-7];
/// `atan t ≈ t + t³·A(t²)` on `|t| ≤ tan(π/8)` (fitted; 0.05 ulp).
const ATAN_P: [f32; 5] = [-3.333_331_6e-1, 1.999_847_1e-1, -1.424_354_6e-1, 1.059_391_2e-1, -6.078_477e-2];
/// `asin s ≈ s + s³·B(s²)` on `|s| ≤ 1/2` (fitted; 0.09 ulp).
const ASIN_P: [f32; 5] = [1.666_675_2e-1, 7.495_300_5e-2, 4.547_002_5e-2, 2.418_133_8e-2, 4.216_308_5e-2];
/// `sinh a ≈ a + a³·H(a²)` on `|a| ≤ 1` (fitted; 0.09 ulp).
const SINH_P: [f32; 4] = [1.666_666_7e-1, 8.333_35e-3, 1.983_616_1e-4, 2.816_940_4e-6];
/// Cephes `tanhf`'s odd polynomial for |x| < 0.625: `tanh x ≈ x + x·z·P(z)`, `z = x²` (lowest
/// degree first).
const TANH_P: [f32; 5] = [-3.333_328e-1, 1.333_144_2e-1, -5.373_971_6e-2, 2.063_909e-2, -5.704_988_7e-3];
/// The rational erf of the x86 GELU kernels (`x·P(x²)/Q(x²)` on [−4, 4], 4.2e-7 absolute).
const ERF_A: [f32; 7] =
    [-1.609_603_3e-2, -2.954_6e-3, -7.349_906_3e-4, -5.692_506_4e-5, -2.101_024e-6, 2.770_681_4e-8, -2.726_142_3e-10];
const ERF_B: [f32; 5] = [-1.426_473_9e-2, -7.373_329e-3, -1.682_827e-3, -2.133_740_6e-4, -1.456_607_2e-5];
/// π/2 in four parts, the first three of 12 significant bits (`q·part` exact for q < 2^12).
const PIO2_A: f32 = 1.570_800_8;
const PIO2_B: f32 = -4.453_584_6e-6;
const PIO2_C: f32 = -8.706_138e-10;
const PIO2_D: f32 = 6.223_372e-14;
/// π/2, π/4 and π rounded to f32, and the rests.
const PIO2_HI: f32 = core::f32::consts::FRAC_PI_2;
const PIO2_LO: f32 = -4.371_139e-8;
const PIO4_HI: f32 = core::f32::consts::FRAC_PI_4;
const PIO4_LO: f32 = -2.185_569_4e-8;
const PI_HI: f32 = core::f32::consts::PI;
const PI_LO: f32 = -8.742_278e-8;
/// Where the trigonometric reduction stays exact (q < 2^12).
const TRIG_MAX: f32 = 6000.0;

/// `e^x·2^s` without the NaN fix-up (NaN lanes give anything): `x` clamped to [−150, 90]
/// (beyond, 0 or ∞ either way), `x = n·ln2 + r`, the polynomial, `2^(n+s)` applied by
/// [`VecF::ldexp`]. `s` integral in [−100, 100].
#[inline(always)]
fn exp_raw<V: VecF>(x: V, s: f32) -> V {
    let x = x.max(k(-150.0)).min(k(90.0));
    let n = (x * k(LOG2_E)).round();
    let r = (-n).fma(k(LN2_HI), x);
    let r = (-n).fma(k(LN2_LO), r);
    let y = poly(r, &EXP_P).fma(r * r, r) + k(1.0);
    y.ldexp(n + k(s))
}

/// e^x.
#[inline(always)]
pub(super) fn exp<V: VecF>(x: V) -> V {
    keep_nan(x, exp_raw(x, 0.0))
}

/// `(ln m', e')` parts of `ln x = e'·ln2 + ln m'` for positive finite `x`: `x = m·2^e`,
/// `m ∈ [√½, √2)`; returns `(ln(m), e)`.
#[inline(always)]
fn log_parts<V: VecF>(x: V) -> (V, V) {
    let (m, e) = x.frexp();
    let hi = k::<V>(core::f32::consts::SQRT_2).le(m);
    let m = V::select(hi, m * k(0.5), m);
    let e = V::select(hi, e + k(1.0), e);
    let f = m - k(1.0);
    let f2 = f * f;
    let l = (f2 * f).fma(poly(f, &LOG_P), f2.fma(k(-0.5), f));
    (l, e)
}

/// ln x (NaN below 0, −∞ at ±0, ∞ at ∞).
#[inline(always)]
pub(super) fn log<V: VecF>(x: V) -> V {
    let (l, e) = log_parts(x);
    let r = e.fma(k(LN2_HI), e.fma(k(LN2_LO), l));
    let r = V::select(x.eq(k(f32::INFINITY)), x, r);
    let r = V::select(x.eq(k(0.0)), k(f32::NEG_INFINITY), r);
    V::select(V::mor(x.lt(k(0.0)), x.nan()), k(f32::NAN), r)
}

/// ln(1 + u) for `u ≥ −1`: `ln w` of `w = 1 + u` plus the rounding `w` lost, `(u − (w − 1))/w`.
#[inline(always)]
fn log1p<V: VecF>(u: V) -> V {
    let w = u + k(1.0);
    let l = log(w);
    let c = (u - (w - k(1.0))) / w;
    V::select(V::mor(w.eq(k(f32::INFINITY)), w.eq(k(0.0))), l, l + c)
}

/// σ(x) = 1/(1 + e^−x) from `e = e^−|x|` (never overflows): `1/(1 + e)` for x ≥ 0, `e/(1 + e)`
/// below.
#[inline(always)]
pub(super) fn sigmoid<V: VecF>(x: V) -> V {
    let e = exp_raw(-abs(x), 0.0);
    let r = k::<V>(1.0) / (k::<V>(1.0) + e);
    keep_nan(x, V::select(x.lt(k(0.0)), e * r, r))
}

/// `x·σ(u)`: for u < 0 as `(x·E/(1 + e))·2^−24` with `E = e^u·2^24`, so that a σ(u) below the
/// normal range keeps its bits until the product (−∞·0 is NaN, as the definition's).
#[inline(always)]
fn times_sigmoid<V: VecF>(x: V, u: V) -> V {
    let big = exp_raw(-abs(u), 24.0);
    let e = big * k(1.0 / 16_777_216.0);
    let r = k::<V>(1.0) / (k::<V>(1.0) + e);
    let neg = ((x * big) * r) * k(1.0 / 16_777_216.0);
    // σ(−∞) = 0 exactly (the clamped exp leaves a tiny value).
    let neg = V::select(u.eq(k(f32::NEG_INFINITY)), x * k(0.0), neg);
    keep_nan(u, V::select(u.lt(k(0.0)), neg, x * r))
}

/// SiLU x·σ(x).
#[inline(always)]
pub(super) fn silu<V: VecF>(x: V) -> V {
    times_sigmoid(x, x)
}

/// tanh-approximated GELU `x/2·(1 + tanh(u))`, `u = √(2/π)·(x + 0.044715·x³)`, computed as
/// `x·σ(2u)` (the same function, no cancellation for negative x).
#[inline(always)]
pub(super) fn gelu_tanh<V: VecF>(x: V) -> V {
    const K2: f32 = 2.0 * 0.797_884_6; // 2·√(2/π)
    let u = x * (x * x).fma(k(K2 * 0.044_715), k(K2));
    times_sigmoid(x, u)
}

/// ln(1 + e^x) = max(x, 0) + ln(1 + e^−|x|).
#[inline(always)]
pub(super) fn softplus<V: VecF>(x: V) -> V {
    let r = x.max(k(0.0)) + log1p(exp_raw(-abs(x), 0.0));
    keep_nan(x, r)
}

/// erf(x): the rational form on x clamped to [−4, 4] (erf is ±1 in f32 beyond).
#[inline(always)]
pub(super) fn erf<V: VecF>(x: V) -> V {
    let c = x.max(k(-4.0)).min(k(4.0));
    let z = c * c;
    // The ratio first: `c·P` alone would go subnormal (and lose bits) for tiny c.
    let r = c * (poly(z, &ERF_A) / poly(z, &ERF_B));
    keep_nan(x, r)
}

/// sin and cos of `r ∈ [−π/4, π/4]`.
#[inline(always)]
fn sincos_r<V: VecF>(r: V) -> (V, V) {
    let z = r * r;
    let s = (z * r).fma(poly(z, &SIN_P), r);
    let c = (z * z).fma(poly(z, &COS_P), z.fma(k(-0.5), k(1.0)));
    (s, c)
}

/// For `a = |x| ≤ TRIG_MAX`: `(r, q)` with `a = q·π/2 + r`, `|r| ≤ π/4`, `q` integral.
#[inline(always)]
fn reduce_pio2<V: VecF>(a: V) -> (V, V) {
    let q = (a * k(core::f32::consts::FRAC_2_PI)).round();
    let r = (-q).fma(k(PIO2_A), a);
    let r = (-q).fma(k(PIO2_B), r);
    let r = (-q).fma(k(PIO2_C), r);
    ((-q).fma(k(PIO2_D), r), q)
}

/// The lanes where `q` (integral) is odd, and where `q mod 4 ≥ 2`.
#[inline(always)]
fn quadrant<V: VecF>(q: V) -> (V::M, V::M) {
    let h = q * k(0.5);
    let odd = V::mnot((h.floor()).eq(h));
    let f = q * k(0.25);
    let f = f - f.floor();
    (odd, k::<V>(0.5).le(f))
}

/// Whether any lane needs libm's reduction (|x| beyond [`TRIG_MAX`], ∞ or NaN).
#[inline(always)]
fn trig_far<V: VecF>(a: V) -> bool {
    V::any(V::mnot(a.le(k(TRIG_MAX))))
}

/// sin x.
#[inline(always)]
pub(super) fn sin<V: VecF>(x: V) -> V {
    let a = abs(x);
    if trig_far(a) {
        return lanes(x, libm::sinf);
    }
    let (r, q) = reduce_pio2(a);
    let (s, c) = sincos_r(r);
    let (odd, neg) = quadrant(q);
    let v = V::select(odd, c, s);
    v ^ V::select(neg, k(-0.0), k(0.0)) ^ sign(x)
}

/// cos x.
#[inline(always)]
pub(super) fn cos<V: VecF>(x: V) -> V {
    let a = abs(x);
    if trig_far(a) {
        return lanes(x, libm::cosf);
    }
    let (r, q) = reduce_pio2(a);
    let (s, c) = sincos_r(r);
    // cos(r + qπ/2) = sin(r + (q+1)π/2).
    let (odd, neg) = quadrant(q + k(1.0));
    let v = V::select(odd, c, s);
    v ^ V::select(neg, k(-0.0), k(0.0))
}

/// tan x: `sin r / cos r` for even q, `−cos r / sin r` for odd q.
#[inline(always)]
pub(super) fn tan<V: VecF>(x: V) -> V {
    let a = abs(x);
    if trig_far(a) {
        return lanes(x, libm::tanf);
    }
    let (r, q) = reduce_pio2(a);
    let (s, c) = sincos_r(r);
    let (odd, _) = quadrant(q);
    let v = V::select(odd, -c, s) / V::select(odd, s, c);
    v ^ sign(x)
}

/// `asin s ≈ s + s³·B(s²)` for `|s| ≤ 1/2` (with `z = s²` given).
#[inline(always)]
fn asin_poly<V: VecF>(s: V, z: V) -> V {
    (s * z).fma(poly(z, &ASIN_P), s)
}

/// arcsin x: the polynomial below |x| = 1/2, else `π/2 − 2·asin(√((1 − |x|)/2))`.
#[inline(always)]
pub(super) fn asin<V: VecF>(x: V) -> V {
    let a = abs(x);
    let small = a.le(k(0.5));
    let zb = (k::<V>(1.0) - a) * k(0.5);
    let z = V::select(small, a * a, zb);
    let s = V::select(small, a, zb.sqrt());
    let p = asin_poly(s, z);
    let big = p.fma(k(-2.0), k(PIO2_HI)) + k(PIO2_LO);
    V::select(small, p, big) ^ sign(x)
}

/// arccos x: `π/2 − asin x` below |x| = 1/2, else from `asin(√((1 − |x|)/2))`.
#[inline(always)]
pub(super) fn acos<V: VecF>(x: V) -> V {
    let a = abs(x);
    let small = a.le(k(0.5));
    let zb = (k::<V>(1.0) - a) * k(0.5);
    let z = V::select(small, a * a, zb);
    let s = V::select(small, a, zb.sqrt());
    let p = asin_poly(s, z);
    let mid = k::<V>(PIO2_HI) - ((p ^ sign(x)) - k(PIO2_LO));
    let pos = p * k(2.0);
    let neg = k::<V>(PI_HI) - (pos - k(PI_LO));
    let big = V::select(x.lt(k(0.0)), neg, pos);
    V::select(small, mid, big)
}

/// arctan x: reduced to `|t| ≤ tan(π/8)` by `atan a = π/4 + atan((a − 1)/(a + 1))` above
/// tan(π/8) and `π/2 + atan(−1/a)` above tan(3π/8).
#[inline(always)]
pub(super) fn atan<V: VecF>(x: V) -> V {
    let a = abs(x);
    let big = k::<V>(2.414_213_7).lt(a);
    let mid = k::<V>(0.414_213_57).lt(a);
    let num = V::select(big, k(-1.0), V::select(mid, a - k(1.0), a));
    let den = V::select(big, a, V::select(mid, a + k(1.0), k(1.0)));
    let t = num / den;
    let z = t * t;
    let p = (t * z).fma(poly(z, &ATAN_P), t);
    let (hi, lo) = (
        V::select(big, k(PIO2_HI), V::select(mid, k(PIO4_HI), k(0.0))),
        V::select(big, k(PIO2_LO), V::select(mid, k(PIO4_LO), k(0.0))),
    );
    (hi + (p + lo)) ^ sign(x)
}

/// `(e^a/2, e^−a/2)` for `a ≥ 0` (∞ and 0 from a ≈ 89.4, where sinh and cosh overflow).
#[inline(always)]
fn half_exps<V: VecF>(a: V) -> (V, V) {
    let h = exp_raw(a, -1.0);
    (h, k::<V>(0.25) / h)
}

/// sinh x: an odd polynomial below |x| = 1, else `e^|x|/2 − e^−|x|/2` with the sign of x.
#[inline(always)]
pub(super) fn sinh<V: VecF>(x: V) -> V {
    let a = abs(x);
    let z = a * a;
    let small = (z * a).fma(poly(z, &SINH_P), a);
    let (h, g) = half_exps(a);
    let r = V::select(a.lt(k(1.0)), small, h - g) ^ sign(x);
    keep_nan(x, r)
}

/// cosh x = e^|x|/2 + e^−|x|/2.
#[inline(always)]
pub(super) fn cosh<V: VecF>(x: V) -> V {
    let (h, g) = half_exps(abs(x));
    keep_nan(x, h + g)
}

/// tanh x: Cephes' polynomial below |x| = 0.625, else `±(1 − e)/(1 + e)`, `e = e^−2|x|`.
#[inline(always)]
pub(super) fn tanh<V: VecF>(x: V) -> V {
    let a = abs(x);
    let e = exp_raw(a * k(-2.0), 0.0);
    let big = (k::<V>(1.0) - e) / (k::<V>(1.0) + e);
    let z = x * x;
    let small = (z * a).fma(poly(z, &TANH_P), a);
    let r = V::select(a.lt(k(0.625)), small, big) ^ sign(x);
    keep_nan(x, r)
}

/// `ln w + c` where `ln_arg` gives `(w, c)`: the shared tail of asinh and acosh (one log).
#[inline(always)]
fn log_plus<V: VecF>(w: V, c: V) -> V {
    log(w) + c
}

/// Above this, `asinh a = ln a + ln 2` and `acosh a` likewise (the rest is under 2^-26).
const ARC_BIG: f32 = 4096.0;

/// arsinh x = ±ln1p(a + a²/(1 + √(1 + a²))), `a = |x|`; `ln a + ln 2` for large a.
#[inline(always)]
pub(super) fn asinh<V: VecF>(x: V) -> V {
    let a = abs(x);
    let big = k::<V>(ARC_BIG).lt(a);
    let z = a * a;
    let t = a + z / (k::<V>(1.0) + (z + k(1.0)).sqrt());
    let w = t + k(1.0);
    let c = (t - (w - k(1.0))) / w;
    let r = log_plus(V::select(big, a, w), V::select(big, k(LN2_F), c));
    keep_nan(x, r ^ sign(x))
}

/// arcosh x = ln1p(d + √(d·(x + 1))), `d = x − 1`; `ln x + ln 2` for large x; NaN below 1.
#[inline(always)]
pub(super) fn acosh<V: VecF>(x: V) -> V {
    let big = k::<V>(ARC_BIG).lt(x);
    let d = x - k(1.0);
    let t = d + (d * (x + k(1.0))).sqrt();
    let w = t + k(1.0);
    let c = (t - (w - k(1.0))) / w;
    let r = log_plus(V::select(big, x, w), V::select(big, k(LN2_F), c));
    let r = V::select(big, r + k(LN2_F_LO), r);
    V::select(V::mor(x.lt(k(1.0)), x.nan()), k(f32::NAN), r)
}

/// artanh x = ±ln1p(2a/(1 − a))/2, `a = |x|` (±∞ at ±1, NaN beyond).
#[inline(always)]
pub(super) fn atanh<V: VecF>(x: V) -> V {
    let a = abs(x);
    let r = log1p((a + a) / (k::<V>(1.0) - a)) * k(0.5);
    keep_nan(x, r ^ sign(x))
}

/// 1/√x (two correctly rounded steps, as the scalar form).
#[inline(always)]
fn rsqrt<V: VecF>(x: V) -> V {
    k::<V>(1.0) / x.sqrt()
}

/// `a^b` (C's pow): `2^(b·log2|a|)` with the product split exactly by FMA, the sign from an odd
/// integer exponent, NaN for a negative base with a non-integer exponent, and C's special cases
/// (`pow(x, ±0) = 1`, `pow(1, y) = 1`, zeros, infinities).
#[inline(always)]
pub(super) fn pow<V: VecF>(a: V, b: V) -> V {
    let x = abs(a);
    // log2|a| = e + g + gl in extended precision: ln m = f − f²/2 + f³·P(f) with f² split
    // exactly (FMA) and the first sum's rounding kept, then times log2(e) in two parts.
    let (m, e) = x.frexp();
    let hi = k::<V>(core::f32::consts::SQRT_2).le(m);
    let m = V::select(hi, m * k(0.5), m);
    let e = V::select(hi, e + k(1.0), e);
    let f = m - k(1.0);
    let f2 = f * f;
    let f2e = f.fma(f, -f2);
    let u = (f2 * f) * poly(f, &LOG_P);
    let h = f2 * k(-0.5);
    let s1 = f + h;
    let s1e = (f - s1) + h;
    let s2 = s1 + u;
    let s2e = (s1 - s2) + u;
    let l_lo = f2e.fma(k(-0.5), s1e + s2e);
    let g = s2 * k(LOG2_E);
    let gl = s2.fma(k(LOG2_E), -g) + s2.fma(k(LOG2_E_LO), l_lo * k(LOG2_E));
    // y = b·(e + g + gl), the products split exactly.
    let p = b * e;
    let pe = b.fma(e, -p);
    let q = b * g;
    let qe = b.fma(g, -q);
    let y = (p + q).max(k(-200.0)).min(k(200.0));
    let n = y.round();
    let r = ((p - n) + q) + (pe + b.fma(gl, qe));
    let r = r.max(k(-1.0)).min(k(1.0));
    let rr = r * k(LN2_F);
    let m = poly(rr, &EXP_P).fma(rr * rr, rr) + k(1.0);
    let n = n.max(k(-250.0)).min(k(250.0));
    let mut v = m.ldexp(n);
    // Special bases and exponents.
    let zero = k(0.0);
    let inf = k(f32::INFINITY);
    let bneg = b.lt(zero);
    v = V::select(x.eq(zero), V::select(bneg, inf, zero), v);
    v = V::select(x.eq(inf), V::select(bneg, zero, inf), v);
    let binf = abs(b).eq(inf);
    let below1 = x.lt(k(1.0));
    let binf_v = V::select(
        x.eq(k(1.0)),
        k(1.0),
        V::select(V::mand(below1, bneg), inf, V::select(below1, zero, V::select(bneg, zero, inf))),
    );
    v = V::select(binf, binf_v, v);
    // Negative bases (−0 and −∞ included): odd integer exponents negate, non-integers are NaN.
    let bint = b.trunc().eq(b);
    let h = b * k(0.5);
    let odd = V::mand(bint, V::mnot(h.trunc().eq(h)));
    // The sign bit (−0 included): ±1 with a's sign.
    let aneg = (sign(a) | k(1.0)).lt(zero);
    v = V::select(V::mand(aneg, odd), -v, v);
    let nonint = V::mand(V::mnot(bint), V::mnot(binf));
    // (A finite negative base: −∞ takes any exponent, as C's pow.)
    v = V::select(V::mand(V::mand(a.lt(zero), x.lt(inf)), nonint), k(f32::NAN), v);
    v = V::select(V::mor(a.nan(), b.nan()), k(f32::NAN), v);
    V::select(V::mor(b.eq(zero), a.eq(k(1.0))), k(1.0), v)
}

/// `y[i] = f(x[i])`, one register at a time; the tail through a padded copy.
#[inline(always)]
fn map<V: VecF>(x: &[f32], y: &mut [f32], f: impl Fn(V) -> V) {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &mut y[..n]);
    let full = n / V::L * V::L;
    let (px, py) = (x.as_ptr(), y.as_mut_ptr());
    let mut i = 0;
    // SAFETY: i + L ≤ full ≤ n for both slices.
    unsafe {
        while i < full {
            f(V::load(px.add(i))).store(py.add(i));
            i += V::L;
        }
    }
    if full < n {
        let mut b = [0.0f32; 16];
        b[..n - full].copy_from_slice(&x[full..]);
        // SAFETY: b holds 16 ≥ L f32.
        unsafe {
            let v = f(V::load(b.as_ptr()));
            v.store(b.as_mut_ptr());
        }
        y[full..].copy_from_slice(&b[..n - full]);
    }
}

/// `y[i] = f(a[i], b[i])` (each of `a`, `b` either a slice of `y`'s length or one value).
#[inline(always)]
fn map2<V: VecF>(a: Operand2<'_>, b: Operand2<'_>, y: &mut [f32], f: impl Fn(V, V) -> V) {
    let n = y.len();
    let full = n / V::L * V::L;
    let py = y.as_mut_ptr();
    let get = |o: &Operand2<'_>, i: usize| -> V {
        match *o {
            // SAFETY: i + L ≤ full ≤ n ≤ s.len() (checked by the entry points).
            Operand2::Slice(s) => unsafe { V::load(s.as_ptr().add(i)) },
            Operand2::One(v) => V::splat(v),
        }
    };
    let mut i = 0;
    while i < full {
        // SAFETY: i + L ≤ full ≤ n = y.len().
        unsafe { f(get(&a, i), get(&b, i)).store(py.add(i)) };
        i += V::L;
    }
    if full < n {
        let fill = |o: &Operand2<'_>| -> [f32; 16] {
            let mut t = [0.0f32; 16];
            match *o {
                Operand2::Slice(s) => t[..n - full].copy_from_slice(&s[full..n]),
                Operand2::One(v) => t.fill(v),
            }
            t
        };
        let (ta, mut tb) = (fill(&a), fill(&b));
        // SAFETY: the buffers hold 16 ≥ L f32.
        unsafe {
            let v = f(V::load(ta.as_ptr()), V::load(tb.as_ptr()));
            v.store(tb.as_mut_ptr());
        }
        y[full..].copy_from_slice(&tb[..n - full]);
    }
}

/// One operand of [`pow_map`]: a slice as long as the output, or one value for every element.
#[derive(Clone, Copy, Debug)]
pub enum Operand2<'a> {
    /// One value per output element.
    Slice(&'a [f32]),
    /// The same value for every element.
    One(f32),
}

/// Whether [`unary_map`] has a vector form of `op`.
pub fn has_unary(op: UnaryOp) -> bool {
    ULP_BOUNDS.iter().any(|&(o, _)| o == op)
}

/// `y = op(x)` over `x.len() = y.len()` elements for a function of [`ULP_BOUNDS`] (false, having
/// written nothing, for any other).
/// A macro, so that the closures are written inside the ISA's `#[target_feature]` entry point
/// (closures inherit its features and inline; from a generic helper they were calls, and the
/// intrinsics inside them calls too).
macro_rules! run {
    ($v:ty, $op:expr, $x:expr, $y:expr) => {{
        type V = $v;
        let (x, y) = ($x, $y);
        // `map` over a closure calling the function (the closure inlines).
        macro_rules! f {
            ($f:ident) => {
                map(
                    x,
                    y,
                    #[inline(always)]
                    |v: V| $f(v),
                )
            };
        }
        match $op {
            UnaryOp::Exp => f!(exp),
            UnaryOp::Sigmoid => f!(sigmoid),
            UnaryOp::Silu => f!(silu),
            UnaryOp::GeluTanh => f!(gelu_tanh),
            UnaryOp::Log => f!(log),
            UnaryOp::Erf => f!(erf),
            UnaryOp::Softplus => f!(softplus),
            UnaryOp::Sin => f!(sin),
            UnaryOp::Cos => f!(cos),
            UnaryOp::Tan => f!(tan),
            UnaryOp::Asin => f!(asin),
            UnaryOp::Acos => f!(acos),
            UnaryOp::Atan => f!(atan),
            UnaryOp::Sinh => f!(sinh),
            UnaryOp::Cosh => f!(cosh),
            UnaryOp::Tanh => f!(tanh),
            UnaryOp::Asinh => f!(asinh),
            UnaryOp::Acosh => f!(acosh),
            UnaryOp::Atanh => f!(atanh),
            UnaryOp::Floor => map(
                x,
                y,
                #[inline(always)]
                |v: V| v.floor(),
            ),
            UnaryOp::Ceil => map(
                x,
                y,
                #[inline(always)]
                |v: V| v.ceil(),
            ),
            UnaryOp::Round => map(
                x,
                y,
                #[inline(always)]
                |v: V| v.round(),
            ),
            UnaryOp::Sqrt => map(
                x,
                y,
                #[inline(always)]
                |v: V| v.sqrt(),
            ),
            UnaryOp::Rsqrt => f!(rsqrt),
            _ => return false,
        }
        true
    }};
}

// ---------------------------------------------------------------- x86_64

#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
pub use x86::{pow_avx2, pow_avx512, unary_avx2, unary_avx512};

// ---------------------------------------------------------------- aarch64

#[cfg(target_arch = "aarch64")]
mod arm;
#[cfg(target_arch = "aarch64")]
pub use arm::{pow_neon, unary_neon};
