//! The reductions over one axis, one table ([`ReduceOp`]): a reduction is one row, and
//! everything else about it comes from that row.
//!
//! A row gives the reduction's on-disk code, the names ONNX importers give it (tract's
//! `Reducer` values as `Debug` writes them, which the converter maps through
//! [`ReduceOp::from_importer_name`]), the interval its tests draw inputs from, and its kind:
//!
//! - `fold`: a map-fold-finish. Every element `x` is mapped (`|x|`, `x²`, or `x` itself), the
//!   mapped values are combined by an associative, commutative `combine(a, b)` from the identity
//!   `init`, and the result is finished with the axis length `n` (the mean divides by `n`, an L2
//!   norm takes the square root). The row gives these in f32 (the CPU kernel: [`Fold`], one
//!   monomorphised loop per row, [`ReduceOp::visit_fold`]), in f64 (the reference,
//!   [`ReduceOp::reference`]) and in WGSL (the wgpu backend's `reduce_part`, `reduce_init`,
//!   `reduce_combine` and `reduce_finish` are generated from them,
//!   [`ReduceOp::wgsl_fn`]). The WGSL init is an expression of `first`, the mapped first
//!   element of the row (a workgroup's threads past the row's end hold it: `first` itself for
//!   a maximum, which needs no infinity).
//! - `arg`: an index reduction (the index of the first or last maximum or minimum, written as
//!   its f32 value) under the one rule of [`ReduceOp::arg`]; every backend implements that rule
//!   once, the row says which extreme and which of equal ones.
//!
//! The shape rule is the op's ([`super::Reduce`]: the axis removed, or kept with size 1).
//!
//! Adding a reduction is one row here (with a fresh code): the format, the CPU runtime, the f64
//! reference, the wgpu shader and the converter's mapping all follow.

use super::record;
use crate::sqrtf;

/// A fold reduction's f32 arithmetic (the CPU kernels'), one zero-sized type per `fold` row of
/// [`ReduceOp`]'s table; reached through [`ReduceOp::visit_fold`], so that a kernel matches on
/// the reduction once, outside its loops, and each loop is compiled for one row.
pub trait Fold {
    /// The row.
    const OP: ReduceOp;
    /// The identity of [`combine`](Self::combine).
    const INIT: f32;
    /// The map applied to every element before it is combined.
    fn map(x: f32) -> f32;
    /// Combines two partial results (associative and commutative).
    fn combine(a: f32, b: f32) -> f32;
    /// The result from the combined value and the axis length `n`.
    fn finish(a: f32, n: f32) -> f32;
}

/// A computation generic over a fold row ([`ReduceOp::visit_fold`]).
pub trait FoldVisitor {
    /// What the computation returns.
    type Out;
    /// Runs the computation for row `F`.
    fn visit<F: Fold>(self) -> Self::Out;
}

/// Declares the reduction table: the code enum (through `code_enum!`), the [`Fold`] type of
/// each fold row, the importer names, the test domain, the index rule, the f64 reference and
/// the generated WGSL.
macro_rules! reduce_table {
    (
        $(#[$m:meta])* $name:ident {
            $(
                $(#[doc = $doc:literal])+
                $v:ident = $code:literal, [$($imp:literal),*], domain [$lo:literal, $hi:literal],
                $kind:ident { $($body:tt)* };
            )+
        }
    ) => {
        code_enum!(
            $(#[$m])* $name { $($(#[doc = $doc])+ $v = $code),+ }
        );

        /// The [`Fold`] type of each fold row.
        mod folds {
            use super::*;
            $(reduce_table!(@type $name $v $kind { $($body)* });)+
        }

        impl $name {
            /// For an index reduction, whether it seeks the maximum and whether it keeps the
            /// last of equal extremes; `None` for a fold. One rule for every backend: element
            /// `v` at index `j` replaces the best `b` when `v > b` (`v < b` for a minimum), or
            /// when `v == b` for the last index; the scan starts from index 0 (a NaN never
            /// replaces a number).
            pub const fn arg(self) -> Option<(bool, bool)> {
                match self {
                    $($name::$v => reduce_table!(@arg $kind { $($body)* }),)+
                }
            }

            /// Runs `v` for the fold row's [`Fold`] type; `None` for an index reduction.
            #[inline]
            pub fn visit_fold<V: FoldVisitor>(self, v: V) -> Option<V::Out> {
                match self {
                    $($name::$v => reduce_table!(@visit v, $v $kind { $($body)* }),)+
                }
            }

            /// The reduction of `vals` (one row along the axis, in order) in f64, written from
            /// the row's definition: the reference every kernel (CPU and WGSL) is tested
            /// against. `vals` must not be empty.
            pub fn reference(self, vals: &[f64]) -> f64 {
                if let Some((max, last)) = self.arg() {
                    let mut best = 0;
                    for (j, &v) in vals.iter().enumerate().skip(1) {
                        let b = vals[best];
                        if (max && v > b) || (!max && v < b) || (last && v == b) {
                            best = j;
                        }
                    }
                    return best as f64;
                }
                match self {
                    $($name::$v => reduce_table!(@reference vals, $kind { $($body)* }),)+
                }
            }

            /// A fold row's WGSL: the init (of `first`, the mapped first element), the map (of
            /// `x`), the combine (of `a` and `b`) and the finish (of `a` and the length `n`, an
            /// f32); `None` for an index reduction.
            pub const fn wgsl(self) -> Option<[&'static str; 4]> {
                match self {
                    $($name::$v => reduce_table!(@wgsl $kind { $($body)* }),)+
                }
            }

            /// The interval the kernel tests draw inputs from.
            pub const fn test_domain(self) -> [f32; 2] {
                match self {
                    $($name::$v => [$lo, $hi],)+
                }
            }

            /// The names ONNX importers (tract's `Reducer`, as `Debug` writes it) give the
            /// reduction.
            pub const fn importer_names(self) -> &'static [&'static str] {
                match self {
                    $($name::$v => &[$($imp),*],)+
                }
            }

            /// The reduction an importer's name stands for, `None` if no row names it.
            pub fn from_importer_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|f| f.importer_names().contains(&name))
            }

            /// The reduction's name as shown in reports.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$v => stringify!($v),)+
                }
            }
        }
    };

    (@type $name:ident $v:ident fold {
        init $init:expr,
        wgsl [$($w:literal),+],
        f32 [$map:expr, $combine:expr, $finish:expr],
        f64 [$($r:expr),+] $(,)?
    }) => {
        pub struct $v;
        impl Fold for $v {
            const OP: $name = $name::$v;
            const INIT: f32 = $init;
            #[inline(always)]
            fn map(x: f32) -> f32 {
                ($map)(x)
            }
            #[inline(always)]
            fn combine(a: f32, b: f32) -> f32 {
                ($combine)(a, b)
            }
            #[inline(always)]
            fn finish(a: f32, n: f32) -> f32 {
                ($finish)(a, n)
            }
        }
    };
    (@type $name:ident $v:ident arg { $($t:tt)* }) => {};

    (@arg fold { $($t:tt)* }) => { None };
    (@arg arg { max $max:literal, last $last:literal $(,)? }) => { Some(($max, $last)) };

    (@visit $vis:ident, $v:ident fold { $($t:tt)* }) => { Some($vis.visit::<folds::$v>()) };
    (@visit $vis:ident, $v:ident arg { $($t:tt)* }) => { None };

    (@reference $vals:ident, fold {
        init $init:expr,
        wgsl [$($w:literal),+],
        f32 [$($f:expr),+],
        f64 [$map:expr, $combine:expr, $finish:expr] $(,)?
    }) => {{
        let (map, combine, finish) = ($map, $combine, $finish);
        finish($vals.iter().fold(f64::from($init), |a, &x| combine(a, map(x))), $vals.len() as f64)
    }};
    (@reference $vals:ident, arg { $($t:tt)* }) => { unreachable!("index reductions return above") };

    (@wgsl fold {
        init $init:expr,
        wgsl [$wi:literal, $wm:literal, $wc:literal, $wf:literal],
        $($t:tt)*
    }) => { Some([$wi, $wm, $wc, $wf]) };
    (@wgsl arg { $($t:tt)* }) => { None };
}

reduce_table! {
    /// Reductions over one axis (the table is the definition of each; see the module docs).
    ReduceOp {
        /// Arithmetic mean.
        Mean = 0, [], domain [-4.0, 4.0], fold {
            init 0.0,
            wgsl ["0.0", "x", "a + b", "a * (1.0 / n)"],
            f32 [|x: f32| x, |a: f32, b: f32| a + b, |a: f32, n: f32| a * (1.0 / n)],
            f64 [|x: f64| x, |a: f64, b: f64| a + b, |a: f64, n: f64| a / n],
        };
        /// Sum.
        Sum = 1, ["Sum"], domain [-4.0, 4.0], fold {
            init 0.0,
            wgsl ["0.0", "x", "a + b", "a"],
            f32 [|x: f32| x, |a: f32, b: f32| a + b, |a: f32, _n: f32| a],
            f64 [|x: f64| x, |a: f64, b: f64| a + b, |a: f64, _n: f64| a],
        };
        /// Maximum (of booleans, 0/1 values: any).
        Max = 2, ["Max", "Any"], domain [-4.0, 4.0], fold {
            init f32::NEG_INFINITY,
            wgsl ["first", "x", "max(a, b)", "a"],
            f32 [|x: f32| x, f32::max, |a: f32, _n: f32| a],
            f64 [|x: f64| x, f64::max, |a: f64, _n: f64| a],
        };
        /// Minimum (of booleans: all).
        Min = 3, ["Min", "All"], domain [-4.0, 4.0], fold {
            init f32::INFINITY,
            wgsl ["first", "x", "min(a, b)", "a"],
            f32 [|x: f32| x, f32::min, |a: f32, _n: f32| a],
            f64 [|x: f64| x, f64::min, |a: f64, _n: f64| a],
        };
        /// Product.
        Prod = 4, ["Prod"], domain [0.5, 1.5], fold {
            init 1.0,
            wgsl ["1.0", "x", "a * b", "a"],
            f32 [|x: f32| x, |a: f32, b: f32| a * b, |a: f32, _n: f32| a],
            f64 [|x: f64| x, |a: f64, b: f64| a * b, |a: f64, _n: f64| a],
        };
        /// The index (as an f32 value) of the first maximum along the axis (ONNX ArgMax,
        /// `select_last_index` 0); a NaN is never taken over a number.
        ArgMax = 5, ["ArgMax(false)"], domain [-4.0, 4.0], arg { max true, last false };
        /// The index of the first minimum (ONNX ArgMin).
        ArgMin = 6, ["ArgMin(false)"], domain [-4.0, 4.0], arg { max false, last false };
        /// The index of the last maximum (ONNX ArgMax, `select_last_index` 1).
        ArgMaxLast = 7, ["ArgMax(true)"], domain [-4.0, 4.0], arg { max true, last true };
        /// The index of the last minimum (ONNX ArgMin, `select_last_index` 1).
        ArgMinLast = 8, ["ArgMin(true)"], domain [-4.0, 4.0], arg { max false, last true };
        /// The Euclidean norm √(Σ x²) (ONNX ReduceL2; tract expands it to `Square`, `Sum` and
        /// `Sqrt` before the converter sees it, so no importer name).
        L2 = 9, [], domain [-4.0, 4.0], fold {
            init 0.0,
            wgsl ["0.0", "x * x", "a + b", "sqrt(a)"],
            f32 [|x: f32| x * x, |a: f32, b: f32| a + b, |a: f32, _n: f32| sqrtf(a)],
            f64 [|x: f64| x * x, |a: f64, b: f64| a + b, |a: f64, _n: f64| libm::sqrt(a)],
        };
    }
}

impl ReduceOp {
    /// The WGSL functions of every row, selected by its code (the wgpu backend's reduction
    /// kernels, `norm.wgsl`, call them): `reduce_part` (a loop per fold row inside one switch,
    /// so that no loop branches per element), `reduce_init`, `reduce_combine` (the workgroup
    /// tree's step), `reduce_finish`, and the index rows' `reduce_is_arg`, `reduce_arg_max` and
    /// `reduce_arg_last`.
    #[cfg(feature = "alloc")]
    pub fn wgsl_fn() -> alloc::string::String {
        use alloc::string::String;
        use alloc::vec::Vec;
        use core::fmt::Write;
        let codes = |f: &dyn Fn(ReduceOp) -> bool| -> String {
            let c: Vec<String> =
                Self::ALL.iter().filter(|&&o| f(o)).map(|&o| alloc::format!("op == {}u", o as u32)).collect();
            if c.is_empty() {
                "false".into()
            } else {
                c.join(" || ")
            }
        };
        let folds: Vec<(u32, [&str; 4])> = Self::ALL.iter().filter_map(|&o| Some((o as u32, o.wgsl()?))).collect();
        let mut s = String::new();
        let _ = writeln!(s, "// Generated from kestrel_rt_format::ops::ReduceOp (reduce.rs).");
        for (c, [_, map, combine, _]) in &folds {
            let _ = writeln!(s, "fn reduce_map_{c}(x: f32) -> f32 {{ return {map}; }}");
            let _ = writeln!(s, "fn reduce_combine_{c}(a: f32, b: f32) -> f32 {{ return {combine}; }}");
        }
        let _ = writeln!(s, "fn reduce_is_arg(op: u32) -> bool {{ return {}; }}", codes(&|o| o.arg().is_some()));
        let _ = writeln!(
            s,
            "fn reduce_arg_max(op: u32) -> bool {{ return {}; }}",
            codes(&|o| matches!(o.arg(), Some((true, _))))
        );
        let _ = writeln!(
            s,
            "fn reduce_arg_last(op: u32) -> bool {{ return {}; }}",
            codes(&|o| matches!(o.arg(), Some((_, true))))
        );
        // The fold of act[x + j·inner], j = j0, j0 + step, … < n (j0 < n).
        let _ = writeln!(s, "fn reduce_part(x: u32, inner: u32, j0: u32, step: u32, n: u32, op: u32) -> f32 {{");
        let _ = writeln!(s, "    var acc = 0.0;\n    switch op {{");
        for (c, _) in &folds {
            let _ = writeln!(s, "        case {c}u: {{");
            let _ = writeln!(s, "            acc = reduce_map_{c}(act[x + j0 * inner]);");
            let _ = writeln!(s, "            for (var j = j0 + step; j < n; j += step) {{");
            let _ = writeln!(s, "                acc = reduce_combine_{c}(acc, reduce_map_{c}(act[x + j * inner]));");
            let _ = writeln!(s, "            }}\n        }}");
        }
        let _ = writeln!(s, "        default: {{}}\n    }}\n    return acc;\n}}");
        // What a workgroup's threads past the row's end hold, from the row's first element x0.
        let _ = writeln!(s, "fn reduce_init(op: u32, x0: f32) -> f32 {{\n    switch op {{");
        for (c, [init, ..]) in &folds {
            let _ = writeln!(s, "        case {c}u: {{ let first = reduce_map_{c}(x0); return {init}; }}");
        }
        let _ = writeln!(s, "        default: {{ return 0.0; }}\n    }}\n}}");
        let _ = writeln!(s, "fn reduce_combine(op: u32, a: f32, b: f32) -> f32 {{\n    switch op {{");
        for (c, _) in &folds {
            let _ = writeln!(s, "        case {c}u: {{ return reduce_combine_{c}(a, b); }}");
        }
        let _ = writeln!(s, "        default: {{ return a; }}\n    }}\n}}");
        let _ = writeln!(s, "fn reduce_finish(op: u32, a: f32, n: f32) -> f32 {{\n    switch op {{");
        for (c, [.., finish]) in &folds {
            let _ = writeln!(s, "        case {c}u: {{ return {finish}; }}");
        }
        let _ = writeln!(s, "        default: {{ return a; }}\n    }}\n}}");
        s
    }
}
