//! Scalar f32 math for `no_std` (libm), shared by every kernel (a leaf: the vectorised
//! dispatchers over it, `kernels::activate` and `kernels::simd::softmax`, are elsewhere).

/// e^x.
#[inline]
pub fn exp(x: f32) -> f32 {
    libm::expf(x)
}

/// √x: with `std` the LLVM intrinsic (a loop over it vectorises: `vsqrtps`), without it
/// [`kestrel_rt_format::sqrtf`] (one element at a time; never libm's legacy-SSE `sqrtss`). Both
/// are correctly rounded.
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(feature = "std")]
    {
        f32::sqrt(x)
    }
    #[cfg(not(feature = "std"))]
    {
        kestrel_rt_format::sqrtf(x)
    }
}

/// Logistic sigmoid, stable for large |x|.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + libm::expf(-x))
    } else {
        let e = libm::expf(x);
        e / (1.0 + e)
    }
}

/// Exact GELU: x·Φ(x) = 0.5·x·erfc(−x/√2) (the erfc form keeps relative accuracy in the
/// negative tail, where 1 + erf(·) cancels).
#[inline]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * libm::erfcf(-x * core::f32::consts::FRAC_1_SQRT_2)
}

/// tanh-approximated GELU: 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), computed as
/// x·σ(2u) (identical maths, no cancellation for negative x).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const K: f32 = 0.797_884_6; // sqrt(2/pi)
    x * sigmoid(2.0 * K * (x + 0.044_715 * x * x * x))
}

/// Hard sigmoid: clamp(x/6 + 1/2, 0, 1) = relu6(x + 3)/6 (NaN stays NaN).
#[inline]
pub fn hard_sigmoid(x: f32) -> f32 {
    (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)
}

/// The scalar softmax (libm `expf`).
#[inline]
pub fn softmax_scalar(row: &mut [f32]) {
    let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut s = 0.0;
    for v in row.iter_mut() {
        *v = libm::expf(*v - m);
        s += *v;
    }
    let inv = 1.0 / s;
    row.iter_mut().for_each(|v| *v *= inv);
}

/// `exp(w − m) − exp(−m)` for `m ≥ max(w, 0)`, without overflow or cancellation near w = 0
/// (the scalar reference of [`crate::kernels::simd::exp_excess`]).
#[inline]
pub fn exp_excess(w: f32, m: f32) -> f32 {
    if w >= 0.0 {
        -libm::expf(w - m) * libm::expm1f(-w)
    } else {
        libm::expf(-m) * libm::expm1f(w)
    }
}
