//! SIMD kernels with runtime ISA dispatch: the dense products (`x · Wᵀ` for f32, f16, int8 and
//! int4 weights with f32 activations; int8 × int8/int4 in integers) and the f32 dot/axpy used by
//! the attention score loops.
//!
//! The ISA is detected once and cached in an atomic: with the `std` feature through
//! `is_x86_feature_detected!` / `is_aarch64_feature_detected!`; without it (the `no_std` core)
//! from the compile-time `target_feature`s. [`set_isa`] forces an ISA (benchmarks force
//! [`Isa::Scalar`] to measure the reference kernels; it refuses an ISA the CPU lacks).
//!
//! Every function here returns the scalar kernels' result up to f32 summation order; the tests
//! (`runtime/cpu/tests/simd.rs`) compare each ISA with the scalar path on random inputs.

use core::sync::atomic::{AtomicU8, Ordering};
use kestrel_rt_format::ops::UnaryOp;
use kestrel_rt_format::weight::dot_f32 as dot_f32_scalar;
use kestrel_rt_format::WeightView;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod f32_driver;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod f32_weights;
#[cfg(target_arch = "x86_64")]
mod gemm;
#[cfg(target_arch = "x86_64")]
mod gemm_pa;
#[cfg(target_arch = "x86_64")]
mod i4_gemv;
#[cfg(target_arch = "x86_64")]
mod i8_avx2;
#[cfg(target_arch = "x86_64")]
mod loaders;
pub(crate) mod multiversion;
#[cfg(target_arch = "aarch64")]
pub mod neon;
mod pool_taps;
mod q8;
#[cfg(target_arch = "x86_64")]
mod q8_512;
#[cfg(target_arch = "x86_64")]
mod q8_avx;
#[cfg(target_arch = "x86_64")]
mod q8_avx2;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod q8_driver;
#[cfg(target_arch = "x86_64")]
mod q8_i4_avx2;
#[cfg(target_arch = "aarch64")]
mod q8_neon;
mod rows;
#[cfg(target_arch = "x86_64")]
mod taps;
pub mod vmath;
#[cfg(target_arch = "x86_64")]
pub mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_conv;
#[cfg(target_arch = "x86_64")]
mod x86_math;
#[cfg(target_arch = "x86_64")]
mod x86_q8;
#[cfg(target_arch = "x86_64")]
mod x86_rows;
pub use pool_taps::pool_taps;
pub use q8::{
    has_dotprod, q8_accumulate_i8, q8_dense_i8, q8_int4, Q8AccumulateFn, Q8DenseFn, Q8Finish, Q8Int4, Q8Kernels,
    Q8Operands, Q8_EXACT_MAX_COLS, Q8_FUSED_MIN_ROWS, Q8_KERNELS,
};
pub use rows::{
    abs_max, axpy_rows, exp_excess, layer_norm_rows, quantize_rows_i8, quantize_rows_i8_scalar, transpose_f32,
    StridedRows,
};

/// Rows from which the x86 dense kernels switch from dot products to the GEMM kernels (which
/// sum every output in one order whatever the row count; the dot products sum in another).
/// A layer split by rows across threads keeps every part on the whole's side of this line.
pub const GEMM_MIN_ROWS: usize = 8;

/// An instruction set the kernels can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust (the reference kernels).
    Scalar,
    /// x86_64 AVX2 + FMA + F16C (int8 × int8 through `vpmaddubsw`/`vpmaddwd`: the packed AVX2
    /// kernels, `q8_avx2.rs`).
    Avx2,
    /// x86_64 AVX2 + FMA + F16C with AVX-VNNI (`vpdpbusd`): the packed int8 × int8 kernels.
    Avx2Vnni,
    /// x86_64 AVX-512F on top of AVX2 + FMA + F16C: the packed 8×32 GEMM for dense layers of
    /// 8 rows or more, the 16-lane GEMV below 4; int8 × int8 through the packed AVX-512 VNNI
    /// kernels when the CPU has AVX-512 VNNI and BW, else the AVX-VNNI or AVX2 packed kernels.
    Avx512,
    /// aarch64 NEON (Advanced SIMD); int8 × int8 through `sdot` when the CPU has the
    /// dot-product extension.
    Neon,
}

impl Isa {
    /// Every ISA, best last within each architecture.
    pub const ALL: [Isa; 5] = [Isa::Scalar, Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512, Isa::Neon];

    /// A short lower-case name (`scalar`, `avx2`, `avx2-vnni`, `avx512`, `neon`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx2Vnni => "avx2-vnni",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn from_name(s: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == s)
    }

    fn code(self) -> u8 {
        match self {
            Isa::Scalar => 1,
            Isa::Avx2 => 2,
            Isa::Avx2Vnni => 3,
            Isa::Neon => 4,
            Isa::Avx512 => 5,
        }
    }

    fn from_code(c: u8) -> Isa {
        match c {
            2 => Isa::Avx2,
            3 => Isa::Avx2Vnni,
            4 => Isa::Neon,
            5 => Isa::Avx512,
            _ => Isa::Scalar,
        }
    }

    /// Whether this CPU can run the ISA.
    pub fn supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => has_avx2(),
            Isa::Avx2Vnni => has_avx2() && has_avx_vnni(),
            Isa::Avx512 => has_avx2() && has_avx512(),
            Isa::Neon => has_neon(),
        }
    }
}

/// 0: not detected yet.
static ISA: AtomicU8 = AtomicU8::new(0);

/// The ISA the kernels use (detected on first call, then cached).
#[inline]
pub fn isa() -> Isa {
    match ISA.load(Ordering::Relaxed) {
        0 => {
            let best = detect();
            ISA.store(best.code(), Ordering::Relaxed);
            best
        }
        c => Isa::from_code(c),
    }
}

/// The best ISA this CPU supports.
pub fn detect() -> Isa {
    if Isa::Avx512.supported() {
        Isa::Avx512
    } else if Isa::Avx2Vnni.supported() {
        Isa::Avx2Vnni
    } else if Isa::Avx2.supported() {
        Isa::Avx2
    } else if Isa::Neon.supported() {
        Isa::Neon
    } else {
        Isa::Scalar
    }
}

/// Forces the kernels onto `isa` (process-wide). Returns false, changing nothing, when the CPU
/// does not support it.
pub fn set_isa(isa: Isa) -> bool {
    if !isa.supported() {
        return false;
    }
    ISA.store(isa.code(), Ordering::Relaxed);
    true
}

/// Defines `$name()`: whether the CPU has every x86 feature `$f` (detected at run time with
/// `std`, from the compile-time `target_feature`s without; false off x86_64).
macro_rules! x86_features {
    ($(#[$doc:meta])* $vis:vis $name:ident: $($f:tt),+) => {
        $(#[$doc])*
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        $vis fn $name() -> bool {
            $(std::is_x86_feature_detected!($f))&&+
        }
        $(#[$doc])*
        #[cfg(all(target_arch = "x86_64", not(feature = "std")))]
        $vis fn $name() -> bool {
            cfg!(all($(target_feature = $f),+))
        }
        $(#[$doc])*
        #[cfg(not(target_arch = "x86_64"))]
        $vis fn $name() -> bool {
            false
        }
    };
}

x86_features!(has_avx2: "avx2", "fma", "f16c");
x86_features!(has_avx_vnni: "avxvnni");
x86_features!(has_avx512: "avx512f");

#[cfg(target_arch = "aarch64")]
fn has_neon() -> bool {
    // NEON is part of the aarch64 base ISA.
    true
}
#[cfg(not(target_arch = "aarch64"))]
fn has_neon() -> bool {
    false
}

/// Runs `$avx2` under the AVX2 tiers, `$avx512` under AVX-512 (x86 `#[target_feature]` entry
/// points needing no more than their tier's features, the rest of their contract checked by the
/// caller or inside them), `$other` elsewhere.
macro_rules! by_tier {
    (avx2: $avx2:expr, avx512: $avx512:expr, other: $other:expr) => {
        match isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa()` returns these tiers only after detecting AVX2, FMA and F16C.
            Isa::Avx2 | Isa::Avx2Vnni => unsafe { $avx2 },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa()` returns AVX-512 only after detecting AVX-512F, AVX2, FMA and F16C.
            Isa::Avx512 => unsafe { $avx512 },
            _ => $other,
        }
    };
}

// The convolution products and depthwise taps (after `by_tier!`, which they use).
mod conv_ops;
pub use conv_ops::{
    depthwise_cl8, matmul_kn, matmul_kn_part, matmul_kn_rows, matmul_kn_rows_part, packs_weights, taps, taps_cl,
    taps_rows, taps_rows_lanes, ClBlock, ClTaps, KnRows,
};

/// `Σ a[i]·b[i]` over the common length.
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` only returns Avx2* after detecting AVX2, FMA and F16C.
        Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 => unsafe { x86::dot_f32(a, b) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline on aarch64.
        Isa::Neon => unsafe { neon::dot_f32(a, b) },
        _ => dot_f32_scalar(a, b),
    }
}

/// Exact (erf) GELU in place. x86 AVX2: a vectorised rational erf, and below x = −2 a
/// vectorised erfc (Numerical Recipes' Chebyshev fit with a vectorised exp); AVX-512: that erfc
/// alone, `0.5·x·erfc(−x/√2)`, 16 lanes — both within 3e-5 relative of the f64 GELU everywhere,
/// see `runtime/cpu/tests/simd.rs`; elsewhere the scalar [`crate::math::gelu`] (libm `erfcf`).
#[inline]
pub fn gelu(y: &mut [f32]) {
    by_tier!(
        avx2: x86::gelu(y),
        avx512: x86::gelu_avx512(y),
        other: y.iter_mut().for_each(|v| *v = crate::math::gelu(*v))
    )
}

/// Softmax of `row` in place (maximum subtracted before exp). x86 (AVX2 and up): a vectorised
/// exp (Cephes polynomial, ≤ 2 ulp); elsewhere libm's `expf`.
#[inline]
pub fn softmax(row: &mut [f32]) {
    by_tier!(
        avx2: x86::softmax(row),
        avx512: x86::softmax_scaled_avx512(row, 1.0),
        other: crate::math::softmax_scalar(row)
    )
}

/// Whether [`small_head`] runs on this CPU (AVX-512).
#[inline]
pub fn small_head_available() -> bool {
    cfg!(target_arch = "x86_64") && isa() == Isa::Avx512
}

/// One attention head of at most 16 columns over at most 16 keys from registers
/// ([`x86::small_head_avx512`]: `q` rows, keys transposed, value rows, output rows, each with
/// its stride; `(rows, c, n)`; `(first query's token, causal, scale)`). Returns false, doing
/// nothing, where [`small_head_available`] is false or the sizes are out of its range.
#[allow(clippy::too_many_arguments)]
pub fn small_head(
    q: (&[f32], usize),
    kt: (&[f32], usize),
    v: (&[f32], usize),
    out: (&mut [f32], usize),
    dims: (usize, usize, usize),
    at: (usize, bool, f32),
) -> bool {
    let (rows, c, n) = dims;
    let fits = |(s, stride): (&[f32], usize), count: usize, width: usize| {
        count == 0 || (count - 1).checked_mul(stride).and_then(|o| o.checked_add(width)).is_some_and(|e| e <= s.len())
    };
    if !(1..=16).contains(&c)
        || !(1..=16).contains(&n)
        || !fits(q, rows, c)
        || !fits(kt, c, n)
        || !fits(v, n, c)
        || !fits((&*out.0, out.1), rows, c)
    {
        return false;
    }
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F/AVX2/FMA detected; sizes and lengths checked above.
        Isa::Avx512 => {
            unsafe { x86::small_head_avx512(q, kt, v, out, dims, at) };
            true
        }
        _ => {
            let _ = (q, kt, v, out, dims, at);
            false
        }
    }
}

/// Softmax of `scale · row` in place (attention scores): AVX-512 scales inside
/// its passes ([`x86::softmax_scaled_avx512`]); elsewhere a scaling pass, then [`softmax`].
#[inline]
pub fn softmax_scaled(row: &mut [f32], scale: f32) {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F/AVX2/FMA detected.
        Isa::Avx512 => unsafe { x86::softmax_scaled_avx512(row, scale) },
        _ => {
            row.iter_mut().for_each(|v| *v *= scale);
            softmax(row);
        }
    }
}

/// `v[i] ← e^(v[i] − m)`, for `v[i] ≤ m` (a maximum subtracted). x86 (AVX2 and up): the
/// vectorised exp of [`softmax`]; elsewhere libm's `expf`.
#[inline]
pub fn exp_sub(v: &mut [f32], m: f32) {
    by_tier!(
        avx2: x86::exp_sub(v, m),
        avx512: x86::exp_sub(v, m),
        other: v.iter_mut().for_each(|v| *v = crate::math::exp(*v - m))
    )
}

/// `v[i] ← e^(v[i] − m[i])` over `v.len()` elements, for `v[i] ≤ m[i]`; `m` must be at least
/// as long as `v` (panics otherwise). Kernels as for [`exp_sub`].
#[inline]
pub fn exp_sub_each(v: &mut [f32], m: &[f32]) {
    assert!(m.len() >= v.len(), "exp_sub_each: {} maxima for {} values", m.len(), v.len());
    by_tier!(
        avx2: x86::exp_sub_each(v, m),
        avx512: x86::exp_sub_each(v, m),
        other: v.iter_mut().zip(m).for_each(|(v, &m)| *v = crate::math::exp(*v - m))
    )
}

/// The AFT gate: `q[i] ← σ(q[i]) · num[i] · s / den[i]` (`den` absent: no division) over
/// `q.len()` elements; `num` and `den` must be at least as long (panics otherwise). x86 (AVX2
/// and up): σ from the vectorised exp of `e^−|x|`; elsewhere [`crate::math::sigmoid`].
#[inline]
pub fn sigmoid_gate(q: &mut [f32], num: &[f32], den: Option<&[f32]>, s: f32) {
    assert!(num.len() >= q.len() && den.is_none_or(|d| d.len() >= q.len()), "sigmoid_gate: short num/den");
    by_tier!(avx2: x86::sigmoid_gate(q, num, den, s), avx512: x86::sigmoid_gate(q, num, den, s), other: {
        for (i, q) in q.iter_mut().enumerate() {
            let g = crate::math::sigmoid(*q) * (num[i] * s);
            *q = match den {
                Some(d) => g / d[i],
                None => g,
            };
        }
    })
}

/// `v[i] ← σ(v[i])` (the recurrent layers' gates). x86 (AVX2 and up): σ from the vectorised
/// exp of `e^−|x|`; elsewhere [`crate::math::sigmoid`].
#[inline]
pub fn sigmoid(v: &mut [f32]) {
    by_tier!(
        avx2: x86::sigmoid(v),
        avx512: x86::sigmoid_avx512(v),
        other: v.iter_mut().for_each(|v| *v = crate::math::sigmoid(*v))
    )
}

/// tanh-approximated GELU `v[i] ← x·σ(2·√(2/π)·(x + 0.044715·x³))` in place (GPT-2's and T5
/// v1.1's MLP activation): per block of 256 the argument in one loop, the vectorised [`sigmoid`]
/// over it, the product with the saved inputs in another (the scalar form costs a libm `expf` per
/// element).
#[inline]
pub fn gelu_tanh(v: &mut [f32]) {
    const K2: f32 = 2.0 * 0.797_884_6; // 2·√(2/π)
    let mut saved = [0f32; 256];
    for block in v.chunks_mut(256) {
        let x = &mut saved[..block.len()];
        x.copy_from_slice(block);
        for (u, &xv) in block.iter_mut().zip(x.iter()) {
            *u = K2 * (xv + 0.044_715 * xv * xv * xv);
        }
        sigmoid(block);
        for (o, &xv) in block.iter_mut().zip(x.iter()) {
            // −∞ · σ(−∞): NaN by the definition (−∞·(1 + tanh(−∞))/2), where the vectorised
            // exp's clamped argument leaves σ a denormal above 0.
            let r = *o * xv;
            *o = if xv == f32::NEG_INFINITY { f32::NAN } else { r };
        }
    }
}

/// SiLU `v[i] ← v[i]·σ(v[i])` in place, one pass: x86 `x·σ(x)` with the vectorised sigmoid (16
/// lanes on AVX-512), elsewhere the scalar [`crate::math::sigmoid`].
#[inline]
pub fn silu(v: &mut [f32]) {
    by_tier!(
        avx2: x86::silu(v),
        avx512: x86::silu_avx512(v),
        other: v.iter_mut().for_each(|v| *v *= crate::math::sigmoid(*v))
    )
}

/// `v[i] ← tanh(v[i])` (the recurrent layers' candidates and outputs). x86 (AVX2 and up): an odd
/// polynomial below |x| = 0.625, else `(1 − e^−2|x|)/(1 + e^−2|x|)` with the vectorised exp;
/// elsewhere libm's `tanhf`.
#[inline]
pub fn tanh(v: &mut [f32]) {
    by_tier!(avx2: x86::tanh(v), avx512: x86::tanh(v), other: v.iter_mut().for_each(|v| *v = libm::tanhf(*v)))
}

/// `y[i] = op(x[i])` with the vectorised math layer ([`vmath`]: exp, log, erf, softplus, the
/// trigonometric and hyperbolic functions and their inverses, tanh, the roundings, √ and 1/√)
/// where the ISA has it (AVX2, AVX-512, NEON) and `op` has a vector form; false, writing
/// nothing, otherwise (the caller runs the scalar loop). Panics if the lengths differ.
#[inline]
pub fn unary_map(op: UnaryOp, x: &[f32], y: &mut [f32]) -> bool {
    assert_eq!(x.len(), y.len(), "unary_map: {} inputs for {} outputs", x.len(), y.len());
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA detected; lengths checked.
        Isa::Avx2 | Isa::Avx2Vnni => unsafe { vmath::unary_avx2(op, x, y) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F/AVX2/FMA detected; lengths checked.
        Isa::Avx512 => unsafe { vmath::unary_avx512(op, x, y) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline; lengths checked.
        Isa::Neon => unsafe { vmath::unary_neon(op, x, y) },
        _ => {
            let _ = (op, x, y);
            false
        }
    }
}

/// `y[i] = pow(a[i], b[i])` (C's pow; either operand may be one value for every element) with
/// the vectorised math layer (`vmath::pow_avx2` and its AVX-512 and NEON forms); false,
/// writing nothing, where the ISA has none. Panics if a slice operand is shorter than `y`.
#[inline]
pub fn pow_map(a: vmath::Operand2<'_>, b: vmath::Operand2<'_>, y: &mut [f32]) -> bool {
    for o in [a, b] {
        if let vmath::Operand2::Slice(s) = o {
            assert!(s.len() >= y.len(), "pow_map: {} operands for {} outputs", s.len(), y.len());
        }
    }
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => {
            // SAFETY: AVX2/FMA detected; lengths checked.
            unsafe { vmath::pow_avx2(a, b, y) };
            true
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: AVX-512F/AVX2/FMA detected; lengths checked.
            unsafe { vmath::pow_avx512(a, b, y) };
            true
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => {
            // SAFETY: NEON is baseline; lengths checked.
            unsafe { vmath::pow_neon(a, b, y) };
            true
        }
        _ => {
            let _ = (a, b, y);
            false
        }
    }
}

/// `y[i] += a · x[i]` over the common length.
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    by_tier!(avx2: x86::axpy(y, a, x), avx512: x86::axpy(y, a, x), other: {
        for (y, &x) in y.iter_mut().zip(x) {
            *y += a * x;
        }
    })
}

/// The f32 dense product's signature (`x, rows, w, y`): `y [rows, out] = x [rows, in] · Wᵀ`.
pub type F32DenseFn = unsafe fn(&[f32], usize, &WeightView<'_>, &mut [f32]);

/// One ISA's f32 dense kernels: the shared driver (`f32_driver.rs`) over that ISA's vectors,
/// compiled for it. [`F32_KERNELS`] lists them; the dispatch and the tests walk it.
pub struct F32Kernels {
    /// The ISA they run under (its [`Isa::supported`] is the entry point's safety condition).
    pub isa: Isa,
    /// Whether the dispatch uses them under the session's ISA.
    pub under: fn(Isa) -> bool,
    /// `y = x · Wᵀ` for any weight encoding (no bias).
    ///
    /// # Safety
    /// Only where [`Self::isa`] is supported; `x.len() >= rows·in`, `y.len() >= rows·out`.
    pub dense: F32DenseFn,
}

/// Every f32 dense kernel compiled for this architecture (the dispatch takes the one whose
/// `under` holds for the session's ISA).
pub const F32_KERNELS: &[F32Kernels] = &[
    #[cfg(target_arch = "x86_64")]
    F32Kernels { isa: Isa::Avx2, under: |isa| matches!(isa, Isa::Avx2 | Isa::Avx2Vnni), dense: x86::matmul_wt },
    #[cfg(target_arch = "x86_64")]
    F32Kernels { isa: Isa::Avx512, under: |isa| isa == Isa::Avx512, dense: x86::matmul_wt_avx512 },
    #[cfg(target_arch = "aarch64")]
    F32Kernels { isa: Isa::Neon, under: |isa| isa == Isa::Neon, dense: neon::matmul_wt },
];

/// `y [rows, out] = x [rows, in] · Wᵀ` (no bias) with the SIMD kernels ([`F32_KERNELS`]).
/// Returns false (and leaves `y` alone) when the ISA is scalar; the caller then runs the scalar
/// loop.
#[inline]
pub fn matmul_wt(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) -> bool {
    assert!(x.len() >= rows * w.cols() && y.len() >= rows * w.rows(), "matmul_wt: slices too short");
    let isa = isa();
    let Some(k) = F32_KERNELS.iter().find(|k| (k.under)(isa)) else { return false };
    // SAFETY: `isa()` only returns an ISA this CPU supports, and `under` holds only where
    // `k.isa`'s instructions are part of it; lengths checked above.
    unsafe { (k.dense)(x, rows, w, y) };
    true
}

/// [`matmul_wt`] into `rows` rows of `w.rows()` f32 at row stride `ldy` (a column block of a
/// wider output), where the ISA has such a kernel (x86); returns false, touching nothing,
/// elsewhere.
///
/// # Safety
/// `x.len() >= rows·w.cols()`; `y` points at `rows` rows of `w.rows()` writable f32 at stride
/// `ldy ≥ w.rows()`, which no one else accesses meanwhile.
#[inline]
#[cfg(feature = "std")] // only the thread pool splits by output features
pub(crate) unsafe fn matmul_wt_strided(x: &[f32], rows: usize, w: &WeightView<'_>, y: *mut f32, ldy: usize) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => {
            // SAFETY: features detected; the rest is the caller's contract.
            unsafe { x86::matmul_wt_ptr(x, rows, w, y, ldy) };
            true
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: as above.
            unsafe { x86::matmul_wt_avx512_ptr(x, rows, w, y, ldy) };
            true
        }
        _ => {
            let _ = (x, rows, w, y, ldy);
            false
        }
    }
}

/// Whether [`matmul_wt_strided`] runs on this CPU.
#[inline]
#[cfg(feature = "std")] // only the thread pool splits by output features
pub(crate) fn has_strided_matmul() -> bool {
    matches!(isa(), Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512)
}

/// Integer dot product `Σ a[i]·b[i]` of two int8 slices (common length < 2^17).
#[inline]
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: features detected.
        Isa::Avx2 => unsafe { x86::dot_i8(a, b) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 and AVX-VNNI detected.
        Isa::Avx2Vnni => unsafe { x86::dot_i8_vnni(a, b) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 detected, AVX-VNNI checked.
        Isa::Avx512 if has_avx_vnni() => unsafe { x86::dot_i8_vnni(a, b) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 detected.
        Isa::Avx512 => unsafe { x86::dot_i8(a, b) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is baseline.
        Isa::Neon => unsafe { neon::dot_i8(a, b) },
        _ => dot_i8_scalar(a, b),
    }
}

x86_features!(
    /// Whether this CPU has the AVX-512 int8 GEMM of [`q8_accumulate_i8`] (AVX-512F, BW and VNNI).
    pub has_avx512_vnni: "avx512f", "avx512bw", "avx512vnni"
);

/// Scalar [`dot_i8`].
pub fn dot_i8_scalar(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum()
}

/// One int4 group (32 weights packed in 16 bytes, low nibble first) times up to 32 int8
/// activations, in integers. `bytes.len() >= 16`, `xq.len() <= 32`.
#[inline]
pub fn dot_i4_group(bytes: &[u8], xq: &[i8]) -> i32 {
    by_tier!(
        avx2: x86::dot_i4_group(bytes, xq),
        avx512: x86::dot_i4_group(bytes, xq),
        other: dot_i4_group_scalar(bytes, xq)
    )
}

/// Scalar [`dot_i4_group`].
pub fn dot_i4_group_scalar(bytes: &[u8], xq: &[i8]) -> i32 {
    xq.iter()
        .enumerate()
        .map(|(j, &x)| {
            let b = bytes[j / 2];
            let n = if j % 2 == 1 { b >> 4 } else { b & 0x0f };
            i32::from(((n << 4) as i8) >> 4) * i32::from(x)
        })
        .sum()
}

/// Sign-extended int4 nibble (the f32 kernels' column tails).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline]
pub(crate) fn nibble(bytes: &[u8], j: usize) -> f32 {
    let b = bytes[j / 2];
    let n = if j % 2 == 1 { b >> 4 } else { b & 0x0f };
    f32::from(((n << 4) as i8) >> 4)
}

/// Runs the current ISA's peak-throughput probe for `iters` rounds: 16 independent FMA chains
/// of the widest vectors the dense kernels use (x86: `vfmadd231ps` in assembly, AVX-512 16 lanes
/// or AVX2 8), else a plain f32 multiply-add loop. Returns `(flops, checksum)`: time the call to
/// get one core's f32 peak (the `kestrel bench gemm` method).
pub fn fma_probe(iters: usize) -> (u64, f32) {
    const CHAINS: usize = 16;
    let lanes = match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => 16,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => 8,
        _ => 1,
    };
    let flops = (iters * CHAINS * lanes * 2) as u64;
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F and AVX2/FMA detected.
        Isa::Avx512 => return (flops, unsafe { x86::fma_probe_avx512(iters) } as f32),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2/FMA detected.
        Isa::Avx2 | Isa::Avx2Vnni => return (flops, unsafe { x86::fma_probe_avx2(iters) } as f32),
        _ => {}
    }
    let mut acc = [1.0f32; CHAINS];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = core::hint::black_box(*v) * 0.999_9 + 1e-4;
        }
    }
    (flops, acc.iter().sum())
}
