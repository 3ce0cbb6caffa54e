//! ONNX MaxPool and AveragePool through the converter against an f64 reference written here from
//! the ONNX definition (issue 33): 1-D and 2-D; ceil_mode 0 and 1; count_include_pad 0 and 1;
//! dilations; strides; explicit, asymmetric pads; auto_pad SAME_UPPER, SAME_LOWER and VALID. Each
//! model is one pooling node written as an ONNX protobuf here (the few messages a one-node graph
//! needs), converted with the default options and run by Kestrel and by tract (`verify`). Kestrel
//! must match the reference (a max pool exactly: it selects an input; an average within
//! [`F32_KERNEL`]); tract, a second opinion, must too (a disagreement between tract and the
//! reference would put the reference in doubt before Kestrel).
//!
//! The reference's rules, as ONNX (and ONNX Runtime) define them: an explicit axis has
//! `⌊(L + pads − extent) / stride⌋ + 1` outputs, or `⌈…⌉ + 1` in ceil mode, less a last window
//! that would start past the input and the padding before it; SAME has `⌈L / stride⌉` outputs
//! and the padding they need split evenly, the odd element after (SAME_UPPER) or before
//! (SAME_LOWER); VALID has no padding. A max takes the window's input elements; an average
//! divides their sum by their count, or with count_include_pad by the window's taps inside the
//! padded input (the extra taps of ceil mode beyond it are not counted).

use arrays::unravel;
use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{convert, verify, ConvertOptions, InputTensor};
use std::path::PathBuf;

/// `kestrel_rt_reference::tolerance::F32_KERNEL` (1e-5 of the element plus 1e-5 of the output's
/// largest magnitude), which this crate does not depend on: f32 sums against the f64 reference.
const F32_KERNEL: (f64, f64) = (1e-5, 1e-5);

use crate::arrays;
use crate::proto;
use proto::{float_value, int_attr, ints_attr, str_attr, Msg};

// ---------------------------------------------------------------- cases and the reference

/// ONNX's `auto_pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// One pooling node: `MaxPool` or `AveragePool` over `x` of `shape` (`[1, C, L]` or
/// `[1, C, H, W]`); `pads` in ONNX's order (every axis' start, then every axis' end), read when
/// `auto_pad` is NOTSET.
#[derive(Clone, Debug)]
struct Pool {
    max: bool,
    shape: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
    auto_pad: AutoPad,
    ceil: bool,
    count_include_pad: bool,
}

impl Pool {
    /// A 1-D pool with explicit pads `[before, after]`.
    fn d1(max: bool, c: usize, len: usize, k: usize, s: usize, d: usize, pads: [usize; 2]) -> Self {
        Pool {
            max,
            shape: vec![1, c, len],
            kernel: vec![k],
            strides: vec![s],
            dilations: vec![d],
            pads: pads.to_vec(),
            auto_pad: AutoPad::NotSet,
            ceil: false,
            count_include_pad: false,
        }
    }

    /// A 2-D pool with explicit pads `[top, left, bottom, right]`.
    fn d2(max: bool, chw: [usize; 3], k: [usize; 2], s: [usize; 2], d: [usize; 2], pads: [usize; 4]) -> Self {
        Pool {
            max,
            shape: vec![1, chw[0], chw[1], chw[2]],
            kernel: k.to_vec(),
            strides: s.to_vec(),
            dilations: d.to_vec(),
            pads: pads.to_vec(),
            auto_pad: AutoPad::NotSet,
            ceil: false,
            count_include_pad: false,
        }
    }

    fn ceil(self) -> Self {
        Pool { ceil: true, ..self }
    }

    fn cip(self) -> Self {
        Pool { count_include_pad: true, ..self }
    }

    fn auto(self, auto_pad: AutoPad) -> Self {
        Pool { auto_pad, pads: vec![0; self.pads.len()], ..self }
    }

    /// The model: one node `y = pool(x)`, opset 19 (AveragePool's dilations).
    fn onnx(&self) -> Vec<u8> {
        let op = if self.max { "MaxPool" } else { "AveragePool" };
        let mut node = Msg::default()
            .str(1, "x")
            .str(2, "y")
            .str(3, "pool")
            .str(4, op)
            .msg(5, ints_attr("kernel_shape", &self.kernel))
            .msg(5, ints_attr("strides", &self.strides))
            .msg(5, ints_attr("dilations", &self.dilations))
            .msg(5, int_attr("ceil_mode", self.ceil));
        node = match self.auto_pad {
            AutoPad::NotSet => node.msg(5, ints_attr("pads", &self.pads)),
            AutoPad::SameUpper => node.msg(5, str_attr("auto_pad", "SAME_UPPER")),
            AutoPad::SameLower => node.msg(5, str_attr("auto_pad", "SAME_LOWER")),
            AutoPad::Valid => node.msg(5, str_attr("auto_pad", "VALID")),
        };
        if !self.max {
            node = node.msg(5, int_attr("count_include_pad", self.count_include_pad));
        }
        let graph = Msg::default()
            .msg(1, node)
            .str(2, "pool")
            .msg(11, float_value("x", Some(&self.shape)))
            .msg(12, float_value("y", None));
        // ModelProto: ir_version 1, opset_import 8 (version 2), producer_name 2, graph 7.
        Msg::default().int(1, 9).msg(8, Msg::default().int(2, 19)).str(2, "pool_windows.rs").msg(7, graph).0
    }

    fn nd(&self) -> usize {
        self.kernel.len()
    }

    /// Spatial axis `a` under ONNX's rules: (padding before, padding after, output length).
    fn axis(&self, a: usize) -> (usize, usize, usize) {
        let (len, s) = (self.shape[2 + a], self.strides[a]);
        let span = self.dilations[a] * (self.kernel[a] - 1) + 1;
        match self.auto_pad {
            AutoPad::NotSet => {
                let (b, e) = (self.pads[a], self.pads[self.nd() + a]);
                let room = len + b + e - span;
                let mut out = if self.ceil { room.div_ceil(s) } else { room / s } + 1;
                if self.ceil && (out - 1) * s >= len + b {
                    out -= 1;
                }
                (b, e, out)
            }
            AutoPad::Valid => (0, 0, (len - span) / s + 1),
            AutoPad::SameUpper | AutoPad::SameLower => {
                let out = len.div_ceil(s);
                let total = ((out - 1) * s + span).saturating_sub(len);
                let (small, large) = (total / 2, total - total / 2);
                if self.auto_pad == AutoPad::SameUpper {
                    (small, large, out)
                } else {
                    (large, small, out)
                }
            }
        }
    }

    /// The output shape (`[1, C, outputs…]`).
    fn out_shape(&self) -> Vec<usize> {
        self.shape[..2].iter().copied().chain((0..self.nd()).map(|a| self.axis(a).2)).collect()
    }

    /// The pool of `x` in f64, or `None` if a window holds no input element (ONNX would give −∞
    /// or a division by zero there; Kestrel refuses such a model).
    fn reference(&self, x: &[f32]) -> Option<Vec<f64>> {
        let nd = self.nd();
        let len = &self.shape[2..];
        let axes: Vec<_> = (0..nd).map(|a| self.axis(a)).collect();
        let outs: Vec<usize> = axes.iter().map(|a| a.2).collect();
        let (plane, n_out, taps) = (len.iter().product::<usize>(), outs.iter().product(), self.kernel.iter().product());
        let mut y = Vec::new();
        for xc in x.chunks_exact(plane) {
            for o in 0..n_out {
                let oi = unravel(o, &outs);
                let (mut max, mut sum, mut inside, mut padded) = (f64::NEG_INFINITY, 0.0, 0usize, 0usize);
                for t in 0..taps {
                    let ti = unravel(t, &self.kernel);
                    let (mut at, mut is_in, mut is_padded) = (0, true, true);
                    for a in 0..nd {
                        // The tap's coordinate in the padded input.
                        let p = oi[a] * self.strides[a] + ti[a] * self.dilations[a];
                        let (b, e, _) = axes[a];
                        is_padded &= p < b + len[a] + e;
                        is_in &= p >= b && p < b + len[a];
                        at = at * len[a] + p.saturating_sub(b);
                    }
                    padded += usize::from(is_padded);
                    if is_in {
                        let v = f64::from(xc[at]);
                        max = max.max(v);
                        sum += v;
                        inside += 1;
                    }
                }
                if inside == 0 {
                    return None;
                }
                let count = if self.count_include_pad { padded } else { inside };
                y.push(if self.max { max } else { sum / count as f64 });
            }
        }
        Some(y)
    }
}

/// `n` non-zero values, magnitudes in [0.05, 2), from `seed`.
fn nonzero(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let u = rng.uniform();
            (0.05 + 1.95 * u.abs()).copysign(u)
        })
        .collect()
}

/// How far `got` is from `want`: outputs outside the pool's tolerance (max: exact, average:
/// [`F32_KERNEL`]) and the largest error relative to `want`'s largest magnitude.
fn compare(max: bool, got: &[f32], want: &[f64]) -> (usize, f64) {
    assert_eq!(got.len(), want.len(), "output length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let (rtol, atol) = if max { (0.0, 0.0) } else { F32_KERNEL };
    let mut wrong = 0;
    let mut worst = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        let err = (f64::from(g) - w).abs();
        // A NaN error counts as wrong.
        if err.is_nan() || err > rtol * w.abs() + atol * scale {
            wrong += 1;
        }
        worst = worst.max(err / scale);
    }
    (wrong, worst)
}

/// A scratch path for one model file (unique per test process and case).
fn model_path(name: &str) -> PathBuf {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    std::env::temp_dir().join(format!("kestrel-pool-windows-{}-{safe}.onnx", std::process::id()))
}

/// Converts and runs `pool` on seeded inputs; panics unless Kestrel and tract both match the
/// reference. Returns (Kestrel's outputs outside tolerance, its largest error) for the report.
fn check(name: &str, pool: &Pool, seed: u64) -> (usize, f64) {
    let path = model_path(name);
    std::fs::write(&path, pool.onnx()).unwrap();
    let x = nonzero(pool.shape.iter().product(), seed);
    let want = pool.reference(&x).unwrap_or_else(|| panic!("{name}: a window without input ({pool:?})"));
    let result = convert(&path, &ConvertOptions::default())
        .map_err(|e| e.to_string())
        .and_then(|conv| verify(&path, &conv.kes, &[InputTensor::f32(&pool.shape, x)]).map_err(|e| e.to_string()));
    std::fs::remove_file(&path).ok();
    let v = result.unwrap_or_else(|e| panic!("{name}: {e} ({pool:?})"));
    let (kestrel, tract) = (&v.kestrel[0], &v.tract[0]);
    assert_eq!(want.len(), pool.out_shape().iter().product::<usize>());
    assert_eq!(tract.len(), want.len(), "{name}: tract's output length ({pool:?})");
    assert_eq!(kestrel.len(), want.len(), "{name}: Kestrel's output length ({pool:?})");
    let (t_wrong, t_err) = compare(pool.max, tract, &want);
    assert_eq!(t_wrong, 0, "{name}: tract disagrees with the reference (max error {t_err:.2e}) ({pool:?})");
    let (wrong, err) = compare(pool.max, kestrel, &want);
    assert_eq!(
        wrong,
        0,
        "{name}: {wrong} of {} outputs wrong, max error {err:.3e} of the scale ({pool:?})",
        want.len()
    );
    (wrong, err)
}

// ---------------------------------------------------------------- tests

/// Issue 33's report: MaxPool over `[1, 1, 220000]`, kernel 200, stride 10, dilation 10, pads
/// 100/100 (21,821 outputs; before the fix, 13,159 of them wrong on this input, by up to 0.170
/// of the output scale), its averages, and the same window as a 2-D pool along the width (the
/// path the 1-D pool takes, height 1) and along the height (one output column: the row loops,
/// which is why the reported 2-D counterpart passed).
#[test]
fn issue33_reported_one_d_pool() {
    let one_d = Pool::d1(true, 1, 220_000, 200, 10, 10, [100, 100]);
    assert_eq!(one_d.out_shape(), [1, 1, 21_821]);
    let (wrong, err) = check("issue 33 max", &one_d, 33);
    eprintln!("issue 33: {wrong} of 21821 wrong, max error {err:.3e} of the output scale");
    check("issue 33 avg", &Pool { max: false, ..one_d.clone() }, 34);
    check("issue 33 avg cip", &Pool { max: false, ..one_d.clone() }.cip(), 35);
    check("issue 33 as width", &Pool::d2(true, [1, 1, 220_000], [1, 200], [1, 10], [1, 10], [0, 100, 0, 100]), 36);
    check("issue 33 as height", &Pool::d2(true, [1, 220_000, 1], [200, 1], [10, 1], [10, 1], [100, 0, 100, 0]), 37);
}

/// Fixed cases, one or more features each.
#[test]
fn onnx_pools_match_reference() {
    use AutoPad::*;
    let cases: Vec<(&str, Pool)> = vec![
        ("1-d max ceil", Pool::d1(true, 3, 11, 3, 2, 1, [1, 0]).ceil()),
        ("1-d avg ceil cip (rescaled)", Pool::d1(false, 2, 10, 3, 2, 1, [1, 1]).ceil().cip()),
        ("1-d avg ceil cip, no pads", Pool::d1(false, 2, 12, 4, 3, 1, [0, 0]).ceil().cip()),
        ("1-d avg ceil, no cip", Pool::d1(false, 2, 12, 4, 3, 1, [0, 0]).ceil()),
        ("1-d avg dilated asymmetric", Pool::d1(false, 2, 40, 5, 2, 3, [2, 4])),
        ("1-d avg dilated ceil cip", Pool::d1(false, 1, 41, 5, 3, 2, [3, 1]).ceil().cip()),
        ("1-d max same upper", Pool::d1(true, 2, 50, 4, 3, 1, [0, 0]).auto(SameUpper)),
        ("1-d max same lower dilated", Pool::d1(true, 2, 50, 4, 3, 2, [0, 0]).auto(SameLower)),
        ("1-d avg same lower cip", Pool::d1(false, 2, 31, 4, 2, 1, [0, 0]).auto(SameLower).cip()),
        ("1-d avg same upper", Pool::d1(false, 2, 31, 4, 2, 1, [0, 0]).auto(SameUpper)),
        ("1-d max valid", Pool::d1(true, 2, 53, 5, 4, 1, [0, 0]).auto(Valid)),
        ("1-d max 150 taps ceil", Pool::d1(true, 1, 5000, 150, 7, 3, [70, 80]).ceil()),
        ("1-d avg 150 taps ceil cip", Pool::d1(false, 1, 5000, 150, 7, 3, [70, 80]).ceil().cip()),
        ("1-d max 122 taps stride 2", Pool::d1(true, 2, 3001, 122, 2, 1, [60, 61])),
        ("2-d max ceil", Pool::d2(true, [3, 10, 9], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]).ceil()),
        ("2-d avg ceil cip (rescaled)", Pool::d2(false, [3, 10, 9], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]).ceil().cip()),
        ("2-d avg dilated asymmetric", Pool::d2(false, [2, 9, 11], [2, 3], [1, 2], [2, 1], [1, 0, 0, 2])),
        ("2-d avg dilated cip", Pool::d2(false, [2, 9, 11], [2, 3], [1, 2], [2, 1], [1, 0, 0, 2]).cip()),
        ("2-d max 12x12 taps", Pool::d2(true, [2, 30, 40], [12, 12], [2, 3], [1, 1], [5, 6, 4, 7])),
        ("2-d max 2x2 pairs", Pool::d2(true, [2, 8, 10], [2, 2], [2, 2], [1, 1], [0; 4])),
        ("2-d avg 2x2 ceil odd", Pool::d2(false, [2, 9, 11], [2, 2], [2, 2], [1, 1], [0; 4]).ceil()),
        ("2-d max same upper", Pool::d2(true, [2, 7, 8], [3, 2], [2, 2], [1, 1], [0; 4]).auto(SameUpper)),
        ("2-d avg same lower cip", Pool::d2(false, [2, 7, 8], [3, 3], [2, 2], [1, 1], [0; 4]).auto(SameLower).cip()),
        ("2-d avg same upper dilated", Pool::d2(false, [2, 9, 8], [3, 2], [2, 1], [2, 3], [0; 4]).auto(SameUpper)),
        ("2-d avg valid", Pool::d2(false, [2, 7, 9], [2, 2], [2, 2], [1, 1], [0; 4]).auto(Valid)),
        ("2-d max wide rows", Pool::d2(true, [1, 3, 2000], [2, 40], [1, 5], [1, 4], [1, 20, 0, 30]).ceil()),
    ];
    for (i, (name, pool)) in cases.iter().enumerate() {
        check(name, pool, 100 + i as u64);
    }
}

/// Seeded random pools: 1-D (lengths to 300, kernels to 40) and 2-D (sides to 16, kernels to
/// 5), max and both average divisors, strides to 4, dilations to 3, explicit pads below the
/// window's extent in either mode or auto_pad; geometries with a window holding no input are
/// drawn again.
#[test]
fn random_onnx_pools_match_reference() {
    let mut rng = Rng::new(0x0033_5EED);
    let mut below = |n: usize| ((rng.uniform() + 1.0) * 0.5 * n as f32) as usize % n;
    let mut done = 0;
    while done < 60 {
        let nd = 1 + below(2);
        let max = below(3) == 0;
        let c = 1 + below(2);
        let (mut shape, mut kernel, mut strides, mut dilations) = (vec![1, c], vec![], vec![], vec![]);
        let (mut before, mut after) = (vec![], vec![]);
        for _ in 0..nd {
            let (len, k) = if nd == 1 { (1 + below(300), 1 + below(40)) } else { (1 + below(16), 1 + below(5)) };
            let (s, d) = (1 + below(4), 1 + below(3));
            let span = d * (k - 1) + 1;
            shape.push(len);
            kernel.push(k);
            strides.push(s);
            dilations.push(d);
            before.push(below(span));
            after.push(below(span));
        }
        let auto_pad =
            [AutoPad::NotSet, AutoPad::NotSet, AutoPad::SameUpper, AutoPad::SameLower, AutoPad::Valid][below(5)];
        let pool = Pool {
            max,
            shape,
            kernel,
            strides,
            dilations,
            pads: before.into_iter().chain(after).collect(),
            auto_pad,
            ceil: auto_pad == AutoPad::NotSet && below(2) == 0,
            count_include_pad: !max && below(2) == 0,
        };
        let pool = if auto_pad == AutoPad::NotSet { pool } else { pool.auto(auto_pad) };
        // At least one output per axis, and every window holding an input element.
        let fits = (0..nd).all(|a| {
            let (b, e) = match auto_pad {
                AutoPad::NotSet => (pool.pads[a], pool.pads[nd + a]),
                _ => (0, 0),
            };
            let extent = pool.dilations[a] * (pool.kernel[a] - 1) + 1;
            let room = if auto_pad == AutoPad::SameUpper || auto_pad == AutoPad::SameLower { extent } else { 0 };
            pool.shape[2 + a] + b + e + room >= extent
        });
        if !fits || pool.reference(&vec![1.0; pool.shape.iter().product()]).is_none() {
            continue;
        }
        check(&format!("random {done}"), &pool, 1000 + done as u64);
        done += 1;
    }
}
