//! 3-D Conv, MaxPool, AveragePool and ConvTranspose through the converter (issue 33, "1-D and 3-D
//! convolution and pooling"), against f64 references written here from the ONNX definitions:
//!
//! - Conv: `y[n, o, p] = b[o] + Σ x[n, c, p·s + t·d − pads_begin]·W[o, c mod C/g, t]` over the
//!   input channels `c` of `o`'s group and the taps `t` whose position is inside the input (the
//!   padding reads 0), on every axis;
//! - MaxPool and AveragePool: the window's input elements, their max or their sum over their
//!   count (count_include_pad 0) or over the window's taps inside the padded input (1, the extra
//!   taps of ceil mode not counted), with ONNX's output lengths (floor or ceil, a last window
//!   starting past the input and its padding dropped; auto_pad SAME_UPPER, SAME_LOWER, VALID);
//! - ConvTranspose: `y[n, o, p] = b[o] + Σ x[n, c, i]·W[c, o mod C_out/g, t]` over
//!   `i·s + t·d − pads_begin = p`.
//!
//! Geometries: kernels to 3 (and a 4-tap depth window), strides to 3, dilations to 2, explicit
//! pads (asymmetric) and auto_pad, ceil_mode, count_include_pad, groups (depthwise included), a
//! fixed first axis N of 1 or 2 (the whole input one sample), with and without bias, a fused
//! ReLU; named cases (C3D/I3D/R(2+1)D-style layers) then seeded random ones. Inputs are seeded
//! non-zero values. Each model runs on Kestrel's CPU runtime, on tract (a second opinion), and
//! on the wgpu backend when a GPU (lavapipe in CI) is present; each must match the reference (a
//! max pool exactly: it selects an input).

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, unravel};
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, verify, ConvertOptions, InputTensor};
use kestrel_rt_wgpu::{GpuContext, GpuSession};
use proto::{f32_tensor, float_value, i64_attr, int_attr, ints_attr, str_attr, Msg};
use std::path::PathBuf;

/// f32 sums against the f64 reference: `|err| ≤ REL·|want| + ABS·max|want|` (twice the
/// `F32_KERNEL` tolerance of `kestrel_rt_reference`, which this crate does not depend on: a
/// convolution here sums up to 108 products).
const REL: f64 = 1e-5;
/// See [`REL`].
const ABS: f64 = 2e-5;

/// Seeded values in ±[0.05, 2).
fn nonzero(n: usize, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u = rng.uniform();
            (0.05 + 1.95 * u.abs()).copysign(u)
        })
        .collect()
}

/// Outputs outside the tolerance (exact when `exact`) and the largest error relative to the
/// largest |want|.
fn compare(got: &[f32], want: &[f64], exact: bool) -> (usize, f64) {
    assert_eq!(got.len(), want.len(), "output length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    let (rel, abs) = if exact { (0.0, 0.0) } else { (REL, ABS) };
    let mut wrong = 0;
    let mut worst = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        let err = (f64::from(g) - w).abs();
        if err.is_nan() || err > rel * w.abs() + abs * scale {
            wrong += 1;
        }
        worst = worst.max(err / scale);
    }
    (wrong, worst)
}

fn model_path(name: &str) -> PathBuf {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    std::env::temp_dir().join(format!("kestrel-conv3d-{}-{safe}.onnx", std::process::id()))
}

/// A model of `nodes` (in order) reading graph input `x` of `shape` and the initializers,
/// writing `y`; opset 19.
fn model(nodes: Vec<Msg>, shape: &[usize], initializers: Vec<Msg>) -> Vec<u8> {
    let mut graph = Msg::default();
    for n in nodes {
        graph = graph.msg(1, n);
    }
    graph = graph.str(2, "g");
    for t in initializers {
        graph = graph.msg(5, t);
    }
    graph = graph.msg(11, float_value("x", Some(shape))).msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 19)).str(2, "conv3d.rs").msg(7, graph).0
}

/// Converts `onnx`, runs it on `x` of `shape` (one sample: the whole input) by Kestrel on the CPU, by
/// tract, and on the GPU when there is one; panics unless each matches `want`. Returns the
/// names of the Kestrel ops.
fn run_and_hold(
    name: &str,
    onnx: &[u8],
    (shape, x): (&[usize], &[f32]),
    want: &[f64],
    exact: bool,
    ctx: Option<&GpuContext>,
    what: &dyn std::fmt::Debug,
) -> Vec<&'static str> {
    let path = model_path(name);
    std::fs::write(&path, onnx).unwrap();
    let conv = convert(&path, &ConvertOptions::default());
    let result = conv
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|c| verify(&path, &c.kes, &[InputTensor::f32(shape, x.to_vec())]).map_err(|e| e.to_string()));
    std::fs::remove_file(&path).ok();
    let v = result.unwrap_or_else(|e| panic!("{name}: {e} ({what:?})"));
    let kes = &conv.unwrap().kes;
    let model = kestrel_rt::Model::from_bytes(kes).unwrap();
    let cpu = model.cpu().unwrap();
    let ops = cpu.file().ops().map(|o| o.unwrap().name()).collect();
    let gpu = ctx.map(|ctx| {
        let mut got = vec![0f32; v.kestrel[0].len()];
        GpuSession::new(ctx, &cpu, 1)
            .and_then(|mut s| s.run(&[Input::F32(x)], &mut [got.as_mut_slice()]))
            .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
        got
    });
    for (engine, got) in
        [("Kestrel", Some(&v.kestrel[0])), ("tract", Some(&v.tract[0])), ("Kestrel wgpu", gpu.as_ref())]
    {
        let Some(got) = got else { continue };
        let (wrong, err) = compare(got, want, exact && engine != "tract");
        assert_eq!(
            wrong,
            0,
            "{name}: {engine}: {wrong} of {} outputs wrong, max error {err:.2e} ({what:?})",
            want.len()
        );
    }
    ops
}

// ---------------------------------------------------------------- geometry

/// ONNX's `auto_pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// The spatial geometry shared by the three ops' forward direction (Conv and the pools).
#[derive(Clone, Debug)]
struct Geo {
    len: [usize; 3],
    k: [usize; 3],
    s: [usize; 3],
    d: [usize; 3],
    /// Every axis' begin, then every axis' end; read when `auto_pad` is NOTSET.
    pads: [usize; 6],
    auto_pad: AutoPad,
    /// Pools only.
    ceil: bool,
}

impl Geo {
    fn explicit(len: [usize; 3], k: [usize; 3], s: [usize; 3], d: [usize; 3], pads: [usize; 6]) -> Self {
        Geo { len, k, s, d, pads, auto_pad: AutoPad::NotSet, ceil: false }
    }

    /// Axis `a` under ONNX's rules: (padding before, padding after, output length).
    fn axis(&self, a: usize) -> (usize, usize, usize) {
        let (len, s) = (self.len[a], self.s[a]);
        let span = self.d[a] * (self.k[a] - 1) + 1;
        match self.auto_pad {
            AutoPad::NotSet => {
                let (b, e) = (self.pads[a], self.pads[3 + a]);
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

    /// Whether every axis has at least one output.
    fn fits(&self) -> bool {
        (0..3).all(|a| {
            let span = self.d[a] * (self.k[a] - 1) + 1;
            match self.auto_pad {
                AutoPad::NotSet => self.len[a] + self.pads[a] + self.pads[3 + a] >= span,
                AutoPad::Valid => self.len[a] >= span,
                _ => true,
            }
        })
    }

    fn out(&self) -> [usize; 3] {
        [0, 1, 2].map(|a| self.axis(a).2)
    }

    /// The node's geometry attributes.
    fn attrs(&self, mut node: Msg) -> Msg {
        node = node
            .msg(5, ints_attr("kernel_shape", &self.k))
            .msg(5, ints_attr("strides", &self.s))
            .msg(5, ints_attr("dilations", &self.d));
        match self.auto_pad {
            AutoPad::NotSet => node.msg(5, ints_attr("pads", &self.pads)),
            AutoPad::SameUpper => node.msg(5, str_attr("auto_pad", "SAME_UPPER")),
            AutoPad::SameLower => node.msg(5, str_attr("auto_pad", "SAME_LOWER")),
            AutoPad::Valid => node.msg(5, str_attr("auto_pad", "VALID")),
        }
    }

    /// A random geometry: sides to `max_len`, kernels to 3, strides to 3, dilations to 2, pads
    /// below the window's extent, auto_pad one time in three.
    fn random(rng: &mut Rng, max_len: usize) -> Self {
        let mut g = Geo::explicit([1; 3], [1; 3], [1; 3], [1; 3], [0; 6]);
        for a in 0..3 {
            g.len[a] = 1 + below(rng, max_len);
            g.k[a] = 1 + below(rng, 3);
            g.s[a] = 1 + below(rng, 3);
            g.d[a] = 1 + below(rng, 2);
            let span = g.d[a] * (g.k[a] - 1) + 1;
            g.pads[a] = below(rng, span);
            g.pads[3 + a] = below(rng, span);
        }
        g.auto_pad =
            [AutoPad::NotSet, AutoPad::NotSet, AutoPad::NotSet, AutoPad::SameUpper, AutoPad::SameLower, AutoPad::Valid]
                [below(rng, 6)];
        if g.auto_pad != AutoPad::NotSet {
            g.pads = [0; 6];
        }
        g
    }
}

// ---------------------------------------------------------------- Conv

/// One Conv node over `x [n, groups·cin_g, D, H, W]`, kernel `[groups·cout_g, cin_g, k…]`.
#[derive(Clone, Debug)]
struct Conv {
    n: usize,
    groups: usize,
    cin_g: usize,
    cout_g: usize,
    geo: Geo,
    bias: bool,
    relu: bool,
}

impl Conv {
    fn x_shape(&self) -> Vec<usize> {
        [self.n, self.groups * self.cin_g].into_iter().chain(self.geo.len).collect()
    }

    fn w_shape(&self) -> Vec<usize> {
        [self.groups * self.cout_g, self.cin_g].into_iter().chain(self.geo.k).collect()
    }

    fn onnx(&self, w: &[f32], b: &[f32]) -> Vec<u8> {
        let mut node = Msg::default().str(1, "x").str(1, "w");
        let mut inits = vec![f32_tensor("w", &self.w_shape(), w)];
        if self.bias {
            node = node.str(1, "b");
            inits.push(f32_tensor("b", &[self.groups * self.cout_g], b));
        }
        let out = if self.relu { "c" } else { "y" };
        node = node.str(2, out).str(3, "conv").str(4, "Conv").msg(5, i64_attr("group", self.groups as i64));
        let mut nodes = vec![self.geo.attrs(node)];
        if self.relu {
            nodes.push(Msg::default().str(1, "c").str(2, "y").str(3, "relu").str(4, "Relu"));
        }
        model(nodes, &self.x_shape(), inits)
    }

    fn reference(&self, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f64> {
        let g = &self.geo;
        let (cin, cout) = (self.groups * self.cin_g, self.groups * self.cout_g);
        let axes: Vec<(usize, usize, usize)> = (0..3).map(|a| g.axis(a)).collect();
        let out: Vec<usize> = axes.iter().map(|a| a.2).collect();
        let (plane_in, plane_out, taps) =
            (g.len.iter().product::<usize>(), out.iter().product::<usize>(), g.k.iter().product::<usize>());
        let mut y = vec![0f64; self.n * cout * plane_out];
        for n in 0..self.n {
            for o in 0..cout {
                let grp = o / self.cout_g;
                for p in 0..plane_out {
                    let pi = unravel(p, &out);
                    let mut acc = if self.bias { f64::from(b[o]) } else { 0.0 };
                    for cl in 0..self.cin_g {
                        let c = grp * self.cin_g + cl;
                        for t in 0..taps {
                            let ti = unravel(t, &g.k);
                            let mut at = 0usize;
                            let mut inside = true;
                            for a in 0..3 {
                                let q = (pi[a] * g.s[a] + ti[a] * g.d[a]) as i64 - axes[a].0 as i64;
                                inside &= q >= 0 && q < g.len[a] as i64;
                                at = at * g.len[a] + q.max(0) as usize;
                            }
                            if inside {
                                acc += f64::from(x[(n * cin + c) * plane_in + at])
                                    * f64::from(w[(o * self.cin_g + cl) * taps + t]);
                            }
                        }
                    }
                    y[(n * cout + o) * plane_out + p] = if self.relu { acc.max(0.0) } else { acc };
                }
            }
        }
        y
    }
}

fn check_conv(name: &str, c: &Conv, rng: &mut Rng, ctx: Option<&GpuContext>) {
    let x = nonzero(c.x_shape().iter().product(), rng);
    let w = nonzero(c.w_shape().iter().product(), rng);
    let b = nonzero(c.groups * c.cout_g, rng);
    let want = c.reference(&x, &w, &b);
    assert_eq!(want.len(), c.n * c.groups * c.cout_g * c.geo.out().iter().product::<usize>());
    let ops = run_and_hold(name, &c.onnx(&w, &b), (&c.x_shape(), &x), &want, false, ctx, c);
    // 1×1×1 kernels may become a plain product; every other one is one Conv2d.
    if c.geo.k != [1, 1, 1] {
        assert_eq!(ops.iter().filter(|&&o| o == "Conv2d").count(), 1, "{name}: {ops:?}");
    }
}

/// Video and volume layers as exported (C3D/I3D 3×3×3, R(2+1)D's 1×3×3 then 3×1×1, strided
/// stems, depthwise X3D-style), then seeded random geometries.
#[test]
fn conv3d_matches_reference() {
    let ctx = gpu();
    let mut rng = Rng::new(0x3D_C0_4F);
    let conv = |groups, cin_g, cout_g, geo| Conv { n: 1, groups, cin_g, cout_g, geo, bias: true, relu: false };
    let named: Vec<(&str, Conv)> = vec![
        ("C3D 3x3x3 p1", conv(1, 3, 4, Geo::explicit([4, 5, 6], [3; 3], [1; 3], [1; 3], [1; 6]))),
        (
            "R(2+1)D spatial 1x3x3",
            conv(1, 2, 3, Geo::explicit([3, 6, 5], [1, 3, 3], [1, 2, 2], [1; 3], [0, 1, 1, 0, 1, 1])),
        ),
        (
            "R(2+1)D temporal 3x1x1",
            conv(1, 3, 2, Geo::explicit([6, 4, 4], [3, 1, 1], [2, 1, 1], [1; 3], [1, 0, 0, 1, 0, 0])),
        ),
        (
            "I3D stem 4x3x3 s2 asymmetric",
            conv(1, 2, 3, Geo::explicit([9, 8, 7], [4, 3, 3], [2, 2, 2], [1; 3], [2, 1, 0, 1, 0, 2])),
        ),
        ("dilated 2", conv(1, 2, 2, Geo::explicit([7, 6, 6], [3, 2, 3], [1, 1, 2], [2, 2, 1], [2, 1, 2, 2, 0, 1]))),
        ("groups 2", conv(2, 2, 3, Geo::explicit([4, 5, 5], [3, 3, 2], [1, 2, 1], [1; 3], [1, 1, 0, 1, 0, 1]))),
        ("depthwise 3x3x3", conv(4, 1, 1, Geo::explicit([5, 4, 6], [3; 3], [1; 3], [1; 3], [1; 6]))),
        ("pointwise 1x1x1", conv(1, 4, 3, Geo::explicit([3, 4, 5], [1; 3], [1; 3], [1; 3], [0; 6]))),
        (
            "same upper",
            conv(
                1,
                2,
                2,
                Geo { auto_pad: AutoPad::SameUpper, ..Geo::explicit([5, 6, 7], [3, 2, 3], [2, 2, 3], [1; 3], [0; 6]) },
            ),
        ),
        (
            "same lower",
            conv(
                1,
                2,
                2,
                Geo { auto_pad: AutoPad::SameLower, ..Geo::explicit([5, 6, 7], [2, 3, 3], [2, 1, 2], [1; 3], [0; 6]) },
            ),
        ),
        (
            "valid",
            conv(
                1,
                2,
                3,
                Geo { auto_pad: AutoPad::Valid, ..Geo::explicit([5, 6, 7], [3, 3, 2], [2, 1, 2], [1; 3], [0; 6]) },
            ),
        ),
        (
            "depth of 1 (the depth taps an identity)",
            conv(1, 2, 3, Geo::explicit([1, 5, 6], [1, 3, 3], [1; 3], [1; 3], [0, 1, 1, 0, 1, 1])),
        ),
        (
            "fixed batch 2, groups 3, no bias, ReLU",
            Conv {
                n: 2,
                bias: false,
                relu: true,
                ..conv(3, 2, 2, Geo::explicit([4, 4, 5], [2, 3, 3], [1, 2, 1], [1; 3], [1, 1, 1, 0, 0, 1]))
            },
        ),
    ];
    for (name, c) in &named {
        check_conv(name, c, &mut rng, ctx.as_ref());
    }
    let mut done = 0;
    while done < 30 {
        let geo = Geo::random(&mut rng, 6);
        if !geo.fits() {
            continue;
        }
        let c = Conv {
            n: 1 + below(&mut rng, 2),
            groups: 1 + below(&mut rng, 3),
            cin_g: 1 + below(&mut rng, 2),
            cout_g: 1 + below(&mut rng, 3),
            geo,
            bias: below(&mut rng, 3) != 0,
            relu: below(&mut rng, 4) == 0,
        };
        check_conv(&format!("random conv {done}"), &c, &mut rng, ctx.as_ref());
        done += 1;
    }
}

/// A long clip: the weight is stored once per output depth (160 copies of a 16→16 3×3×3
/// kernel, 4.2 MiB more than once), which the report says; the values still match.
#[test]
fn conv3d_long_clip_reports_its_weight_copies() {
    let mut rng = Rng::new(0x3D_C119);
    let c = Conv {
        n: 1,
        groups: 1,
        cin_g: 16,
        cout_g: 16,
        geo: Geo::explicit([160, 2, 2], [3; 3], [1; 3], [1; 3], [1; 6]),
        bias: true,
        relu: false,
    };
    let x = nonzero(c.x_shape().iter().product(), &mut rng);
    let w = nonzero(c.w_shape().iter().product(), &mut rng);
    let b = nonzero(16, &mut rng);
    let path = model_path("long clip");
    std::fs::write(&path, c.onnx(&w, &b)).unwrap();
    let conv = convert(&path, &ConvertOptions::default());
    std::fs::remove_file(&path).ok();
    let conv = conv.unwrap();
    let notice = conv.report.notices.iter().find(|n| n.contains("3-D convolution"));
    assert!(notice.is_some_and(|n| n.contains("stored 160 times")), "{:?}", conv.report.notices);
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let got = model.session(1).unwrap().run_vec(&[Input::F32(&x)]).unwrap().remove(0);
    let (wrong, err) = compare(&got, &c.reference(&x, &w, &b), false);
    assert_eq!(wrong, 0, "long clip: max error {err:.2e}");
}

// ---------------------------------------------------------------- MaxPool, AveragePool

/// One pooling node over `x [n, c, D, H, W]`.
#[derive(Clone, Debug)]
struct Pool {
    max: bool,
    n: usize,
    c: usize,
    geo: Geo,
    count_include_pad: bool,
}

impl Pool {
    fn x_shape(&self) -> Vec<usize> {
        [self.n, self.c].into_iter().chain(self.geo.len).collect()
    }

    fn onnx(&self) -> Vec<u8> {
        let op = if self.max { "MaxPool" } else { "AveragePool" };
        let mut node = Msg::default().str(1, "x").str(2, "y").str(3, "pool").str(4, op);
        node = self.geo.attrs(node).msg(5, int_attr("ceil_mode", self.geo.ceil));
        if !self.max {
            node = node.msg(5, int_attr("count_include_pad", self.count_include_pad));
        }
        model(vec![node], &self.x_shape(), vec![])
    }

    /// The pool of `x` in f64, or `None` if a window holds no input element (ONNX would give −∞
    /// or a division by zero there; Kestrel refuses such a model).
    fn reference(&self, x: &[f32]) -> Option<Vec<f64>> {
        let g = &self.geo;
        let axes: Vec<_> = (0..3).map(|a| g.axis(a)).collect();
        let outs: Vec<usize> = axes.iter().map(|a| a.2).collect();
        let (plane, n_out, taps) = (g.len.iter().product::<usize>(), outs.iter().product(), g.k.iter().product());
        let mut y = Vec::new();
        for xc in x.chunks_exact(plane) {
            for o in 0..n_out {
                let oi = unravel(o, &outs);
                let (mut max, mut sum, mut inside, mut padded) = (f64::NEG_INFINITY, 0.0, 0usize, 0usize);
                for t in 0..taps {
                    let ti = unravel(t, &g.k);
                    let (mut at, mut is_in, mut is_padded) = (0, true, true);
                    for a in 0..3 {
                        // The tap's coordinate in the padded input.
                        let p = oi[a] * g.s[a] + ti[a] * g.d[a];
                        let (b, e, _) = axes[a];
                        is_padded &= p < b + g.len[a] + e;
                        is_in &= p >= b && p < b + g.len[a];
                        at = at * g.len[a] + p.saturating_sub(b);
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

fn check_pool(name: &str, p: &Pool, rng: &mut Rng, ctx: Option<&GpuContext>) {
    let x = nonzero(p.x_shape().iter().product(), rng);
    let want = p.reference(&x).unwrap_or_else(|| panic!("{name}: a window without input ({p:?})"));
    let ops = run_and_hold(name, &p.onnx(), (&p.x_shape(), &x), &want, p.max, ctx, p);
    assert!(ops.iter().filter(|&&o| o == "Pool2d").count() >= 1, "{name}: {ops:?}");
}

/// Video pools as exported (C3D's 1×2×2 then 2×2×2, I3D's 3×3×3 stride 2 SAME, an
/// average over a clip), every ONNX pooling attribute on its own, then seeded random pools.
#[test]
fn pool3d_matches_reference() {
    let ctx = gpu();
    let mut rng = Rng::new(0x3D_9001);
    let pool = |max, c, geo| Pool { max, n: 1, c, geo, count_include_pad: false };
    let ceil = |g: Geo| Geo { ceil: true, ..g };
    let auto = |g: Geo, auto_pad| Geo { auto_pad, pads: [0; 6], ..g };
    let named: Vec<(&str, Pool)> = vec![
        ("C3D pool1 1x2x2", pool(true, 3, Geo::explicit([4, 6, 6], [1, 2, 2], [1, 2, 2], [1; 3], [0; 6]))),
        ("C3D pool2 2x2x2", pool(true, 2, Geo::explicit([4, 6, 5], [2; 3], [2; 3], [1; 3], [0; 6]))),
        (
            "I3D 3x3x3 s2 same upper",
            pool(true, 2, auto(Geo::explicit([5, 7, 6], [3; 3], [2; 3], [1; 3], [0; 6]), AutoPad::SameUpper)),
        ),
        (
            "clip average 4x3x3 valid",
            pool(false, 2, auto(Geo::explicit([4, 5, 5], [4, 3, 3], [1, 2, 2], [1; 3], [0; 6]), AutoPad::Valid)),
        ),
        (
            "max asymmetric pads",
            pool(true, 2, Geo::explicit([5, 6, 7], [3, 2, 3], [2, 1, 2], [1; 3], [1, 0, 2, 2, 1, 0])),
        ),
        ("max dilated", pool(true, 1, Geo::explicit([7, 6, 8], [2, 3, 2], [1, 2, 1], [2, 1, 3], [1, 1, 0, 0, 1, 2]))),
        ("max ceil", pool(true, 2, ceil(Geo::explicit([6, 7, 5], [3, 2, 3], [2, 2, 2], [1; 3], [1, 0, 1, 1, 0, 0])))),
        (
            "avg asymmetric pads",
            pool(false, 2, Geo::explicit([5, 6, 7], [3, 2, 3], [2, 1, 2], [1; 3], [1, 0, 2, 2, 1, 0])),
        ),
        (
            "avg asymmetric pads cip",
            Pool {
                count_include_pad: true,
                ..pool(false, 2, Geo::explicit([5, 6, 7], [3, 2, 3], [2, 1, 2], [1; 3], [1, 0, 2, 2, 1, 0]))
            },
        ),
        ("avg ceil", pool(false, 2, ceil(Geo::explicit([6, 7, 5], [3, 2, 3], [2, 2, 2], [1; 3], [1, 0, 1, 1, 0, 0])))),
        (
            "avg ceil cip (rescaled on every axis)",
            Pool {
                count_include_pad: true,
                ..pool(false, 2, ceil(Geo::explicit([6, 7, 5], [3, 3, 3], [2, 2, 2], [1; 3], [1; 6])))
            },
        ),
        (
            "avg ceil cip, no pads (the input count)",
            Pool {
                count_include_pad: true,
                ..pool(false, 1, ceil(Geo::explicit([7, 6, 5], [2, 3, 2], [2, 2, 2], [1; 3], [0; 6])))
            },
        ),
        (
            "avg dilated cip same lower",
            Pool {
                count_include_pad: true,
                ..pool(
                    false,
                    2,
                    auto(Geo::explicit([6, 7, 5], [2, 3, 2], [2, 2, 1], [2, 1, 2], [0; 6]), AutoPad::SameLower),
                )
            },
        ),
        (
            "fixed batch 2 avg cip",
            Pool {
                n: 2,
                count_include_pad: true,
                ..pool(false, 3, Geo::explicit([4, 5, 5], [2, 3, 3], [2, 2, 2], [1; 3], [1, 1, 1, 0, 1, 1]))
            },
        ),
        (
            "fixed batch 2 max ceil",
            Pool {
                n: 2,
                ..pool(true, 2, ceil(Geo::explicit([5, 5, 6], [2, 2, 3], [2, 2, 2], [1; 3], [0, 1, 1, 0, 0, 1])))
            },
        ),
    ];
    for (name, p) in &named {
        check_pool(name, p, &mut rng, ctx.as_ref());
    }
    let mut done = 0;
    while done < 40 {
        let mut geo = Geo::random(&mut rng, 7);
        geo.ceil = geo.auto_pad == AutoPad::NotSet && below(&mut rng, 2) == 0;
        let max = below(&mut rng, 3) == 0;
        let p = Pool {
            max,
            n: 1 + below(&mut rng, 2),
            c: 1 + below(&mut rng, 2),
            geo,
            count_include_pad: !max && below(&mut rng, 2) == 0,
        };
        // At least one output per axis, and every window holding an input element.
        if !p.geo.fits() || p.reference(&vec![1.0; p.x_shape().iter().product()]).is_none() {
            continue;
        }
        check_pool(&format!("random pool {done}"), &p, &mut rng, ctx.as_ref());
        done += 1;
    }
}

// ---------------------------------------------------------------- ConvTranspose

/// One ConvTranspose node over `x [n, groups·cin_g, len…]`, kernel `[groups·cin_g, cout_g, k…]`.
#[derive(Clone, Debug)]
struct Deconv {
    n: usize,
    groups: usize,
    cin_g: usize,
    cout_g: usize,
    len: [usize; 3],
    k: [usize; 3],
    s: [usize; 3],
    d: [usize; 3],
    /// Every axis' begin, then every axis' end.
    pads: [usize; 6],
    out_pad: [usize; 3],
    bias: bool,
}

impl Deconv {
    fn x_shape(&self) -> Vec<usize> {
        [self.n, self.groups * self.cin_g].into_iter().chain(self.len).collect()
    }

    fn out_len(&self, a: usize) -> i64 {
        ((self.len[a] - 1) * self.s[a] + self.d[a] * (self.k[a] - 1) + 1 + self.out_pad[a]) as i64
            - (self.pads[a] + self.pads[3 + a]) as i64
    }

    fn onnx(&self, w: &[f32], b: &[f32]) -> Vec<u8> {
        let cin = self.groups * self.cin_g;
        let wdims: Vec<usize> = [cin, self.cout_g].into_iter().chain(self.k).collect();
        let mut node = Msg::default().str(1, "x").str(1, "w");
        let mut inits = vec![f32_tensor("w", &wdims, w)];
        if self.bias {
            node = node.str(1, "b");
            inits.push(f32_tensor("b", &[self.groups * self.cout_g], b));
        }
        let node = node
            .str(2, "y")
            .str(3, "deconv")
            .str(4, "ConvTranspose")
            .msg(5, ints_attr("kernel_shape", &self.k))
            .msg(5, ints_attr("strides", &self.s))
            .msg(5, ints_attr("dilations", &self.d))
            .msg(5, ints_attr("pads", &self.pads))
            .msg(5, ints_attr("output_padding", &self.out_pad))
            .msg(5, i64_attr("group", self.groups as i64));
        model(vec![node], &self.x_shape(), inits)
    }

    /// The ONNX definition in f64.
    fn reference(&self, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f64> {
        let (cin, cout) = (self.groups * self.cin_g, self.groups * self.cout_g);
        let out: Vec<usize> = (0..3).map(|a| self.out_len(a) as usize).collect();
        let (plane_in, plane_out, taps) =
            (self.len.iter().product::<usize>(), out.iter().product::<usize>(), self.k.iter().product::<usize>());
        let mut y = vec![0f64; self.n * cout * plane_out];
        for n in 0..self.n {
            for o in 0..cout {
                let (g, ol) = (o / self.cout_g, o % self.cout_g);
                let yo = &mut y[(n * cout + o) * plane_out..][..plane_out];
                if self.bias {
                    yo.iter_mut().for_each(|v| *v = f64::from(b[o]));
                }
                for c in g * self.cin_g..(g + 1) * self.cin_g {
                    for i in 0..plane_in {
                        let ii = unravel(i, &self.len);
                        let xv = f64::from(x[(n * cin + c) * plane_in + i]);
                        for t in 0..taps {
                            let ti = unravel(t, &self.k);
                            let mut at = 0usize;
                            let mut inside = true;
                            for a in 0..3 {
                                let p = (ii[a] * self.s[a] + ti[a] * self.d[a]) as i64 - self.pads[a] as i64;
                                inside &= p >= 0 && p < out[a] as i64;
                                at = at * out[a] + p.max(0) as usize;
                            }
                            if inside {
                                yo[at] += xv * f64::from(w[(c * self.cout_g + ol) * taps + t]);
                            }
                        }
                    }
                }
            }
        }
        y
    }
}

fn check_deconv(name: &str, dc: &Deconv, rng: &mut Rng, ctx: Option<&GpuContext>) {
    let cin = dc.groups * dc.cin_g;
    let x = nonzero(dc.x_shape().iter().product(), rng);
    let w = nonzero(cin * dc.cout_g * dc.k.iter().product::<usize>(), rng);
    let b = nonzero(dc.groups * dc.cout_g, rng);
    let want = dc.reference(&x, &w, &b);
    let ops = run_and_hold(name, &dc.onnx(&w, &b), (&dc.x_shape(), &x), &want, false, ctx, dc);
    // (Kestrel's fusion may turn a zero insertion into a convolution of its own.)
    assert!(ops.contains(&"Conv2d"), "{name}: {ops:?}");
}

/// 3-D decoders as exported (V-Net/3-D U-Net 2×2×2 stride 2 up-sampling, 4×4×4 stride 2 pad 1,
/// output padding), then seeded random geometries.
#[test]
fn conv_transpose3d_matches_reference() {
    let ctx = gpu();
    let mut rng = Rng::new(0x3D_DEC0);
    let dc = |groups, cin_g, cout_g, len, k, s, pads| Deconv {
        n: 1,
        groups,
        cin_g,
        cout_g,
        len,
        k,
        s,
        d: [1; 3],
        pads,
        out_pad: [0; 3],
        bias: true,
    };
    let named: Vec<(&str, Deconv)> = vec![
        ("3-D U-Net up 2x2x2 s2", dc(1, 4, 3, [2, 3, 3], [2; 3], [2; 3], [0; 6])),
        ("4x4x4 s2 p1", dc(1, 2, 3, [3, 2, 3], [4; 3], [2; 3], [1; 6])),
        ("3x3x3 s2 p1 output_padding 1", Deconv { out_pad: [1; 3], ..dc(1, 3, 2, [2, 3, 2], [3; 3], [2; 3], [1; 6]) }),
        (
            "depthwise, dilated",
            Deconv { d: [2, 1, 2], ..dc(3, 1, 1, [3, 3, 2], [2, 3, 2], [1, 2, 1], [1, 0, 0, 0, 1, 1]) },
        ),
        (
            "no bias, fixed batch 2, groups 2",
            Deconv { n: 2, bias: false, ..dc(2, 2, 2, [2, 3, 2], [3, 2, 2], [2, 1, 3], [0, 1, 1, 1, 0, 0]) },
        ),
    ];
    for (name, d) in &named {
        check_deconv(name, d, &mut rng, ctx.as_ref());
    }
    let mut done = 0;
    while done < 20 {
        let mut d =
            dc(1 + below(&mut rng, 2), 1 + below(&mut rng, 2), 1 + below(&mut rng, 2), [1; 3], [1; 3], [1; 3], [0; 6]);
        d.n = 1 + below(&mut rng, 2);
        d.bias = below(&mut rng, 3) != 0;
        for a in 0..3 {
            let (k, s, dil) = (1 + below(&mut rng, 3), 1 + below(&mut rng, 3), 1 + below(&mut rng, 2));
            d.len[a] = 1 + below(&mut rng, 4);
            d.k[a] = k;
            d.s[a] = s;
            d.d[a] = dil;
            // ONNX: output padding below the stride or the dilation.
            d.out_pad[a] = below(&mut rng, s.max(dil));
            d.pads[a] = below(&mut rng, dil * (k - 1) + 1);
            d.pads[3 + a] = below(&mut rng, dil * (k - 1) + 1);
        }
        if (0..3).any(|a| d.out_len(a) < 1) {
            continue;
        }
        check_deconv(&format!("random deconv {done}"), &d, &mut rng, ctx.as_ref());
        done += 1;
    }
}
