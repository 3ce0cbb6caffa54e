//! The element-wise functions, one table each for [`UnaryOp`] and [`BinaryOp`]: a function is
//! one row, and everything else about it comes from that row.
//!
//! A row gives the function's on-disk code, the names ONNX importers give it (tract's
//! element-wise op names, which the converter maps through [`UnaryOp::from_importer_name`] and
//! [`BinaryOp::from_importer_name`]), its WGSL expression (in `x`, or `a` and `b`; the wgpu
//! backend assembles its `unary_fn`/`binary_fn` from them, [`UnaryOp::wgsl_fn`],
//! [`BinaryOp::wgsl_fn`]), its f32 value (the CPU kernels' scalar path, [`UnaryOp::eval`]; hot
//! functions also have vectorised loops in the CPU crate, tested against this) and its f64
//! reference ([`UnaryOp::reference`]: the oracle of every kernel test). The shape rule is the
//! op's (`Unary`: the input's shape; `Binary`: numpy broadcasting).
//!
//! Booleans are f32 values 0 and 1: comparisons and predicates give 1 for true and 0 for false;
//! logical inputs count any non-zero value as true.
//!
//! Adding a function is one row here (with a fresh code): the format, the CPU runtime, the f64
//! reference, the wgpu shaders and the converter's mapping all follow.

use super::record;
use crate::sqrtf;
use libm::{
    acosf, acoshf, asinf, asinhf, atanf, atanhf, ceilf, cosf, coshf, erff, expf, fabsf, floorf, fmodf, logf, powf,
    rintf, sinf, sinhf, tanf, tanhf,
};

/// Declares an element-wise function table: the code enum (through `code_enum!`), then
/// `eval`, `reference`, `wgsl`, the importer names and the generated WGSL function.
macro_rules! elementwise_table {
    (
        $(#[$m:meta])* $name:ident ($($arg:ident),+) call $call:tt -> $wgsl_fn:literal
        kernel $kernel:ident ($($argty:ty),+) {
            $(
                $(#[doc = $doc:literal])+
                $v:ident = $code:literal, [$($imp:literal),*], domain [$lo:literal, $hi:literal],
                wgsl $wgsl:literal, f32 $f32:expr, f64 $f64:expr;
            )+
        }
    ) => {
        code_enum!(
            $(#[$m])* $name { $($(#[doc = $doc])+ $v = $code),+ }
        );

        /// A loop over elements that is generic over the function it applies (see
        /// `with_fn`): monomorphised once per function, so the function is inlined into the
        /// loop, which the compiler vectorises where the function allows.
        pub trait $kernel {
            /// What the loop returns.
            type Out;
            /// Runs the loop with `f`.
            fn run<F: Fn($($argty),+) -> f32 + Copy>(self, f: F) -> Self::Out;
        }

        impl $name {
            /// Runs `k` with this function's f32 definition as a closure: the match on the
            /// function is taken once, outside `k`'s loop, and `k` gets one copy per function
            /// (no per-element dispatch). Kernels use it on the targets where code size is not
            /// the constraint.
            #[inline(always)]
            pub fn with_fn<K: $kernel>(self, k: K) -> K::Out {
                match self {
                    $($name::$v => k.run($f32),)+
                }
            }

            /// The function in f32 (the CPU kernels' scalar path).
            #[inline]
            pub fn eval(self, $($arg: f32),+) -> f32 {
                match self {
                    $($name::$v => ($f32) $call,)+
                }
            }

            /// The function in f64, written from its definition: the reference every kernel
            /// (CPU and WGSL) is tested against.
            pub fn reference(self, $($arg: f64),+) -> f64 {
                match self {
                    $($name::$v => ($f64) $call,)+
                }
            }

            /// The WGSL expression of the function (of `x`, or of `a` and `b`), in f32.
            pub const fn wgsl(self) -> &'static str {
                match self {
                    $($name::$v => $wgsl,)+
                }
            }

            /// The interval the kernel tests draw inputs from (every operand): where the
            /// function is defined and well conditioned (a positive base for a power, a divisor
            /// away from 0, [−0.95, 0.95] for arcsin).
            pub const fn test_domain(self) -> [f32; 2] {
                match self {
                    $($name::$v => [$lo, $hi],)+
                }
            }

            /// The names ONNX importers (tract) give the function's op.
            pub const fn importer_names(self) -> &'static [&'static str] {
                match self {
                    $($name::$v => &[$($imp),*],)+
                }
            }

            /// The function an importer's op name stands for, `None` if no row names it.
            pub fn from_importer_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|f| f.importer_names().contains(&name))
            }

            /// The function's name as shown in reports.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$v => stringify!($v),)+
                }
            }

            /// The WGSL function computing every row, selected by its code (the one the wgpu
            /// backend's element-wise kernels call).
            #[cfg(feature = "alloc")]
            pub fn wgsl_fn() -> alloc::string::String {
                use core::fmt::Write;
                let mut s = alloc::string::String::new();
                let _ = writeln!(s, "// Generated from kestrel_rt_format::ops::{} (elementwise.rs).", stringify!($name));
                let _ = writeln!(s, "{}", $wgsl_fn);
                let _ = writeln!(s, "    switch op {{");
                for f in Self::ALL {
                    let _ = writeln!(s, "        case {}u: {{ return {}; }}", *f as u32, f.wgsl());
                }
                // Unreachable: the loader rejects unknown codes.
                let _ = writeln!(s, "        default: {{ return bitcast<f32>(0x7fc00000u); }}");
                let _ = writeln!(s, "    }}\n}}");
                s
            }
        }
    };
}

fn sigmoid32(x: f32) -> f32 {
    1.0 / (1.0 + expf(-x))
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + libm::exp(-x))
}

fn hard_sigmoid32(x: f32) -> f32 {
    (x * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0)
}

fn hard_sigmoid64(x: f64) -> f64 {
    (x / 6.0 + 0.5).clamp(0.0, 1.0)
}

fn gelu_tanh64(x: f64) -> f64 {
    let k = libm::sqrt(2.0 / core::f64::consts::PI);
    0.5 * x * (1.0 + libm::tanh(k * (x + 0.044715 * x * x * x)))
}

fn gelu_tanh32(x: f32) -> f32 {
    const K: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + tanhf(K * (x + 0.044715 * x * x * x)))
}

fn sign32(x: f32) -> f32 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

fn sign64(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

elementwise_table! {
    /// Element-wise unary functions (the table is the definition of each; see the module docs).
    UnaryOp(x) call (x) -> "fn unary_fn(op: u32, x: f32) -> f32 {" kernel UnaryKernel (f32) {
        /// max(x, 0), NaN for NaN (ONNX's Relu; `f32::max` would give 0).
        Relu = 0, ["Relu"], domain [-4.0, 4.0], wgsl "relu_(x)",
            f32 |x: f32| if x <= 0.0 { 0.0 } else { x }, f64 |x: f64| if x <= 0.0 { 0.0 } else { x };
        /// Exact GELU, x·Φ(x) = x/2·(1 + erf(x/√2)).
        Gelu = 1, ["GeluExact"], domain [-4.0, 4.0], wgsl "gelu(x)",
            f32 |x: f32| 0.5 * x * (1.0 + erff(x * core::f32::consts::FRAC_1_SQRT_2)),
            f64 |x: f64| 0.5 * x * (1.0 + libm::erf(x / core::f64::consts::SQRT_2));
        /// tanh-approximated GELU, x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
        GeluTanh = 2, [], domain [-4.0, 4.0], wgsl "gelu_tanh(x)", f32 gelu_tanh32, f64 gelu_tanh64;
        /// Logistic sigmoid 1/(1 + e^−x).
        Sigmoid = 3, ["Sigmoid"], domain [-4.0, 4.0], wgsl "sigmoid(x)", f32 sigmoid32, f64 sigmoid64;
        /// tanh.
        Tanh = 4, ["Tanh"], domain [-4.0, 4.0], wgsl "tanh(x)", f32 tanhf, f64 libm::tanh;
        /// e^x.
        Exp = 5, ["Exp"], domain [-4.0, 4.0], wgsl "exp(x)", f32 expf, f64 libm::exp;
        /// Natural log.
        Log = 6, ["Ln"], domain [0.05, 4.0], wgsl "log(x)", f32 logf, f64 libm::log;
        /// Square root.
        Sqrt = 7, ["Sqrt"], domain [0.05, 4.0], wgsl "sqrt(x)", f32 sqrtf, f64 libm::sqrt;
        /// −x.
        Neg = 8, ["Neg"], domain [-4.0, 4.0], wgsl "-x", f32 |x: f32| -x, f64 |x: f64| -x;
        /// |x|.
        Abs = 9, ["Abs"], domain [-4.0, 4.0], wgsl "abs(x)", f32 fabsf, f64 libm::fabs;
        /// erf(x).
        Erf = 10, ["Erf"], domain [-4.0, 4.0], wgsl "erf_(x)", f32 erff, f64 libm::erf;
        /// 1/x.
        Reciprocal = 11, ["Recip"], domain [0.25, 4.0], wgsl "1.0 / x", f32 |x: f32| 1.0 / x, f64 |x: f64| 1.0 / x;
        /// SiLU (swish), x·σ(x).
        Silu = 12, ["Silu"], domain [-4.0, 4.0], wgsl "x * sigmoid(x)", f32 |x: f32| x * sigmoid32(x), f64 |x: f64| x * sigmoid64(x);
        /// Hard swish, x·min(max(x/6 + 1/2, 0), 1) (MobileNetV3).
        HardSwish = 13, ["HardSwish"], domain [-4.0, 4.0], wgsl "x * clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)",
            f32 |x: f32| x * hard_sigmoid32(x), f64 |x: f64| x * hard_sigmoid64(x);
        /// Hard sigmoid, min(max(x/6 + 1/2, 0), 1) (as `Activation::HardSigmoid`).
        HardSigmoid = 14, [], domain [-4.0, 4.0], wgsl "clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)", f32 hard_sigmoid32, f64 hard_sigmoid64;
        /// 1 where x is NaN, else 0 (ONNX IsNaN). The WGSL tests the bits: shader compilers may
        /// assume that floats are never NaN.
        IsNan = 15, ["IsNan"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u)",
            f32 |x: f32| f32::from(x.is_nan()), f64 |x: f64| f64::from(x.is_nan());
        /// 1 where x is +∞ or −∞, else 0 (ONNX IsInf with both signs detected).
        IsInf = 16, [], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u)",
            f32 |x: f32| f32::from(x.is_infinite()), f64 |x: f64| f64::from(x.is_infinite());
        /// 1 where x is +∞, else 0 (ONNX IsInf, detect_negative = 0).
        IsPosInf = 17, [], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, bitcast<u32>(x) == 0x7f800000u)",
            f32 |x: f32| f32::from(x == f32::INFINITY), f64 |x: f64| f64::from(x == f64::INFINITY);
        /// 1 where x is −∞, else 0 (ONNX IsInf, detect_positive = 0).
        IsNegInf = 18, [], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, bitcast<u32>(x) == 0xff800000u)",
            f32 |x: f32| f32::from(x == f32::NEG_INFINITY), f64 |x: f64| f64::from(x == f64::NEG_INFINITY);
        /// −1, 0 or 1 by the sign of x (0 and NaN pass through).
        Sign = 19, ["Sign"], domain [-4.0, 4.0], wgsl "select(select(x, -1.0, x < 0.0), 1.0, x > 0.0)", f32 sign32, f64 sign64;
        /// ⌊x⌋.
        Floor = 20, ["Floor"], domain [-4.0, 4.0], wgsl "floor(x)", f32 floorf, f64 libm::floor;
        /// ⌈x⌉.
        Ceil = 21, ["Ceil"], domain [-4.0, 4.0], wgsl "ceil(x)", f32 ceilf, f64 libm::ceil;
        /// x rounded to the nearest integer, halves to even (ONNX Round).
        Round = 22, ["RoundHalfToEven"], domain [-4.0, 4.0], wgsl "round(x)", f32 rintf, f64 libm::rint;
        /// sin x.
        Sin = 23, ["Sin"], domain [-4.0, 4.0], wgsl "sin(x)", f32 sinf, f64 libm::sin;
        /// cos x.
        Cos = 24, ["Cos"], domain [-4.0, 4.0], wgsl "cos(x)", f32 cosf, f64 libm::cos;
        /// tan x.
        Tan = 25, ["Tan"], domain [-1.4, 1.4], wgsl "tan(x)", f32 tanf, f64 libm::tan;
        /// arcsin x (in WGSL through atan2: some drivers' asin and acos are far less accurate,
        /// 3e-4 relative on lavapipe).
        Asin = 26, ["Asin"], domain [-0.95, 0.95], wgsl "atan2(x, sqrt((1.0 - x) * (1.0 + x)))", f32 asinf, f64 libm::asin;
        /// arccos x.
        Acos = 27, ["Acos"], domain [-0.95, 0.95], wgsl "atan2(sqrt((1.0 - x) * (1.0 + x)), x)", f32 acosf, f64 libm::acos;
        /// arctan x.
        Atan = 28, ["Atan"], domain [-4.0, 4.0], wgsl "atan(x)", f32 atanf, f64 libm::atan;
        /// sinh x.
        Sinh = 29, ["Sinh"], domain [-4.0, 4.0], wgsl "sinh(x)", f32 sinhf, f64 libm::sinh;
        /// cosh x.
        Cosh = 30, ["Cosh"], domain [-4.0, 4.0], wgsl "cosh(x)", f32 coshf, f64 libm::cosh;
        /// arsinh x.
        Asinh = 31, ["Asinh"], domain [-4.0, 4.0], wgsl "asinh(x)", f32 asinhf, f64 libm::asinh;
        /// arcosh x.
        Acosh = 32, ["Acosh"], domain [1.05, 4.0], wgsl "acosh(x)", f32 acoshf, f64 libm::acosh;
        /// artanh x.
        Atanh = 33, ["Atanh"], domain [-0.95, 0.95], wgsl "atanh(x)", f32 atanhf, f64 libm::atanh;
        /// Logical not: 1 where x = 0, else 0.
        Not = 34, ["Not"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, x == 0.0)", f32 |x: f32| f32::from(x == 0.0), f64 |x: f64| f64::from(x == 0.0);
        /// 1/√x.
        Rsqrt = 35, ["Rsqrt"], domain [0.05, 4.0], wgsl "inverseSqrt(x)", f32 |x: f32| 1.0 / sqrtf(x), f64 |x: f64| 1.0 / libm::sqrt(x);
        /// x² (tract's `Square`; also `Pow(x, 2)`).
        Square = 36, ["Square"], domain [-4.0, 4.0], wgsl "x * x", f32 |x: f32| x * x, f64 |x: f64| x * x;
        /// Softplus, ln(1 + e^x), computed as max(x, 0) + ln(1 + e^−|x|) (no overflow).
        Softplus = 37, [], domain [-4.0, 4.0], wgsl "max(x, 0.0) + log(1.0 + exp(-abs(x)))",
            f32 |x: f32| x.max(0.0) + libm::log1pf(expf(-fabsf(x))),
            f64 |x: f64| x.max(0.0) + libm::log1p(libm::exp(-libm::fabs(x)));
        /// Softsign, x/(1 + |x|).
        Softsign = 38, [], domain [-4.0, 4.0], wgsl "x / (1.0 + abs(x))", f32 |x: f32| x / (1.0 + fabsf(x)), f64 |x: f64| x / (1.0 + libm::fabs(x));
    }
}

elementwise_table! {
    /// Element-wise binary functions with numpy broadcasting (the table is the definition of
    /// each; see the module docs).
    BinaryOp(a, b) call (a, b) -> "fn binary_fn(op: u32, a: f32, b: f32) -> f32 {" kernel BinaryKernel (f32, f32) {
        /// a + b.
        Add = 0, ["Add"], domain [-4.0, 4.0], wgsl "a + b", f32 |a: f32, b: f32| a + b, f64 |a: f64, b: f64| a + b;
        /// a − b.
        Sub = 1, ["Sub"], domain [-4.0, 4.0], wgsl "a - b", f32 |a: f32, b: f32| a - b, f64 |a: f64, b: f64| a - b;
        /// a · b.
        Mul = 2, ["Mul"], domain [-4.0, 4.0], wgsl "a * b", f32 |a: f32, b: f32| a * b, f64 |a: f64, b: f64| a * b;
        /// a / b.
        Div = 3, ["Div"], domain [0.25, 4.0], wgsl "a / b", f32 |a: f32, b: f32| a / b, f64 |a: f64, b: f64| a / b;
        /// max(a, b), NaN if either is NaN (ONNX's and numpy's `maximum`; IEEE's `maxNum`, Rust's
        /// `f32::max` and WGSL's `max` would return the other operand).
        Max = 4, ["Max"], domain [-4.0, 4.0], wgsl "max_(a, b)",
            f32 |a: f32, b: f32| if a.is_nan() || a > b { a } else { b },
            f64 |a: f64, b: f64| if a.is_nan() || a > b { a } else { b };
        /// min(a, b), NaN if either is NaN (ONNX's and numpy's `minimum`).
        Min = 5, ["Min"], domain [-4.0, 4.0], wgsl "min_(a, b)",
            f32 |a: f32, b: f32| if a.is_nan() || a < b { a } else { b },
            f64 |a: f64, b: f64| if a.is_nan() || a < b { a } else { b };
        /// a^b (C's pow: a negative base takes integer exponents only, else NaN).
        Pow = 6, ["Pow"], domain [0.5, 2.0], wgsl "pow_(a, b)", f32 powf, f64 libm::pow;
        /// 1 where a < b, else 0.
        Less = 7, ["LT"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a < b)",
            f32 |a: f32, b: f32| f32::from(a < b), f64 |a: f64, b: f64| f64::from(a < b);
        /// 1 where a > b, else 0.
        Greater = 8, ["GT"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a > b)",
            f32 |a: f32, b: f32| f32::from(a > b), f64 |a: f64, b: f64| f64::from(a > b);
        /// 1 where a ≤ b, else 0.
        LessEq = 9, ["LTE"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a <= b)",
            f32 |a: f32, b: f32| f32::from(a <= b), f64 |a: f64, b: f64| f64::from(a <= b);
        /// 1 where a ≥ b, else 0.
        GreaterEq = 10, ["GTE"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a >= b)",
            f32 |a: f32, b: f32| f32::from(a >= b), f64 |a: f64, b: f64| f64::from(a >= b);
        /// 1 where a = b, else 0.
        Equal = 11, ["Eq"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a == b)",
            f32 |a: f32, b: f32| f32::from(a == b), f64 |a: f64, b: f64| f64::from(a == b);
        /// 1 where a ≠ b, else 0.
        NotEqual = 12, ["NE"], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a != b)",
            f32 |a: f32, b: f32| f32::from(a != b), f64 |a: f64, b: f64| f64::from(a != b);
        /// The remainder of a/b truncated toward zero, with a's sign (C's fmod; ONNX Mod with
        /// fmod = 1).
        Fmod = 13, ["Rem"], domain [0.25, 4.0], wgsl "fmod_(a, b)", f32 fmodf, f64 libm::fmod;
        /// a where b ≠ 0, else 0: with [`BinaryOp::Unless`], `Where(c, a, b)` is
        /// `When(a, c) + Unless(b, c)`, exact for any a and b (a NaN or ∞ in the branch not
        /// taken never reaches the output).
        When = 14, [], domain [-4.0, 4.0], wgsl "select(0.0, a, b != 0.0)",
            f32 |a: f32, b: f32| if b != 0.0 { a } else { 0.0 }, f64 |a: f64, b: f64| if b != 0.0 { a } else { 0.0 };
        /// a where b = 0, else 0 (see [`BinaryOp::When`]).
        Unless = 15, [], domain [-4.0, 4.0], wgsl "select(a, 0.0, b != 0.0)",
            f32 |a: f32, b: f32| if b != 0.0 { 0.0 } else { a }, f64 |a: f64, b: f64| if b != 0.0 { 0.0 } else { a };
        /// Logical and: 1 where a ≠ 0 and b ≠ 0, else 0.
        And = 16, [], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a != 0.0 && b != 0.0)",
            f32 |a: f32, b: f32| f32::from(a != 0.0 && b != 0.0), f64 |a: f64, b: f64| f64::from(a != 0.0 && b != 0.0);
        /// Logical or: 1 where a ≠ 0 or b ≠ 0, else 0.
        Or = 17, [], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, a != 0.0 || b != 0.0)",
            f32 |a: f32, b: f32| f32::from(a != 0.0 || b != 0.0), f64 |a: f64, b: f64| f64::from(a != 0.0 || b != 0.0);
        /// Logical exclusive or: 1 where exactly one of a and b is non-zero, else 0.
        Xor = 18, [], domain [-4.0, 4.0], wgsl "select(0.0, 1.0, (a != 0.0) != (b != 0.0))",
            f32 |a: f32, b: f32| f32::from((a != 0.0) != (b != 0.0)), f64 |a: f64, b: f64| f64::from((a != 0.0) != (b != 0.0));
    }
}

impl BinaryOp {
    /// Whether the function gives only 0 or 1 (comparisons and logic).
    pub fn is_predicate(self) -> bool {
        matches!(
            self,
            BinaryOp::Less
                | BinaryOp::Greater
                | BinaryOp::LessEq
                | BinaryOp::GreaterEq
                | BinaryOp::Equal
                | BinaryOp::NotEqual
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
        )
    }
}

impl super::Activation {
    /// The element-wise function computing this fused activation on its own (`None` for the
    /// identity): what a backend runs when it cannot fuse it, and what the fusion passes fold.
    pub const fn as_unary(self) -> Option<UnaryOp> {
        use super::Activation as A;
        match self {
            A::None => None,
            A::Relu => Some(UnaryOp::Relu),
            A::Gelu => Some(UnaryOp::Gelu),
            A::GeluTanh => Some(UnaryOp::GeluTanh),
            A::Silu => Some(UnaryOp::Silu),
            A::HardSwish => Some(UnaryOp::HardSwish),
            A::HardSigmoid => Some(UnaryOp::HardSigmoid),
        }
    }

    /// The fused activation an element-wise function is, where it is one ([`as_unary`]'s
    /// inverse).
    ///
    /// [`as_unary`]: Self::as_unary
    pub fn of_unary(op: UnaryOp) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| a.as_unary() == Some(op))
    }
}

impl UnaryOp {
    /// Whether the function gives only 0 or 1 (the predicates and logical not).
    pub fn is_predicate(self) -> bool {
        matches!(self, UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf | UnaryOp::Not)
    }

    /// Values the kernel tests mix into their random inputs: where a function's output changes
    /// (NaN and the infinities for the predicates, zero for `Not` and `Sign`, halves for the
    /// roundings), which random values from [`test_domain`](Self::test_domain) never hit.
    pub const fn test_specials(self) -> &'static [f32] {
        match self {
            UnaryOp::IsNan => &[f32::NAN, 1.0],
            UnaryOp::IsInf | UnaryOp::IsPosInf | UnaryOp::IsNegInf => &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN],
            UnaryOp::Not | UnaryOp::Sign => &[0.0],
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => &[0.5, -0.5, 1.5, 2.5, -2.5, 1.0],
            _ => &[],
        }
    }
}

impl BinaryOp {
    /// Values the kernel tests mix into both operands (see [`UnaryOp::test_specials`]): ties
    /// for the comparisons, zeros for the logic and the selects.
    pub const fn test_specials(self) -> &'static [f32] {
        match self {
            BinaryOp::Less
            | BinaryOp::Greater
            | BinaryOp::LessEq
            | BinaryOp::GreaterEq
            | BinaryOp::Equal
            | BinaryOp::NotEqual => &[0.0, 1.0, -1.0],
            BinaryOp::When | BinaryOp::Unless | BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => &[0.0, 1.0],
            _ => &[],
        }
    }
}
