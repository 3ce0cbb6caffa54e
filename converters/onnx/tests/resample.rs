//! ONNX ConvTranspose and Resize through the converter (issue 33: the detection and
//! segmentation blockers), on seeded random configurations, against references:
//!
//! - ConvTranspose: an f64 reference written here from the ONNX definition
//!   (`y[n, o, p] = b[o] + Σ x[n, c, i]·W[c, o mod C_out/g, t]` over the input channels `c` of
//!   `o`'s group and the positions with `i·s + t·d − pads_begin = p` on every axis), 1-D and 2-D,
//!   kernels to 4, strides to 3, dilations to 2, pads, output padding, 1–3 groups, a fixed first
//!   axis N of 1 or 2 (the whole input one sample), with and without bias;
//! - Resize: every interpolation mode × coordinate transformation × nearest rounding, up and
//!   down, by scales and by sizes, antialiased, with `exclude_outside`, `tf_crop_and_resize`
//!   with an extrapolation value, against tract running the ONNX file (ONNX's own reference
//!   outputs check the same modes in the conformance cases: `docs/onnx-conformance.md`).
//!
//! Each model runs on Kestrel's CPU runtime and, when a GPU (lavapipe in CI) is present, on the
//! wgpu backend, each held to the reference.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, unravel};
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, verify, ConvertOptions, InputTensor};
use kestrel_rt_wgpu::{GpuContext, GpuSession};
use proto::{f32_tensor, float_attr, i64_attr, i64s_attr, ints_attr, one_node_model, str_attr, Msg};
use std::path::PathBuf;

/// f32 sums against the f64 reference: `|err| ≤ REL·|want| + ABS·max|want|` (the
/// `F32_KERNEL` tolerance of `kestrel_rt_reference`, which this crate does not depend on).
const REL: f64 = 1e-5;
/// See [`REL`] (twice `F32_KERNEL`'s: a transposed convolution sums up to 48 products).
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

/// Outputs outside the tolerance and the largest error relative to the largest |want|.
fn compare(got: &[f32], want: &[f64]) -> (usize, f64) {
    assert_eq!(got.len(), want.len(), "output length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    let mut wrong = 0;
    let mut worst = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        let err = (f64::from(g) - w).abs();
        if err.is_nan() || err > REL * w.abs() + ABS * scale {
            wrong += 1;
        }
        worst = worst.max(err / scale);
    }
    (wrong, worst)
}

fn model_path(name: &str) -> PathBuf {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    std::env::temp_dir().join(format!("kestrel-resample-{}-{safe}.onnx", std::process::id()))
}

/// Converts `onnx`, runs it on `x` (one sample: the whole input) by Kestrel on the CPU, by tract,
/// and on the GPU when there is one; returns (Kestrel CPU, tract, Kestrel GPU) outputs and the
/// names of the Kestrel ops.
fn run(name: &str, onnx: &[u8], shape: &[usize], x: &[f32], ctx: Option<&GpuContext>) -> Outputs {
    let path = model_path(name);
    std::fs::write(&path, onnx).unwrap();
    let conv = convert(&path, &ConvertOptions::default());
    let result = conv
        .as_ref()
        .map_err(|e| e.to_string())
        .and_then(|c| verify(&path, &c.kes, &[InputTensor::f32(shape, x.to_vec())]).map_err(|e| e.to_string()));
    std::fs::remove_file(&path).ok();
    let v = result.unwrap_or_else(|e| panic!("{name}: {e}"));
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
    Outputs { kestrel: v.kestrel[0].clone(), tract: v.tract[0].clone(), gpu, ops }
}

struct Outputs {
    kestrel: Vec<f32>,
    tract: Vec<f32>,
    gpu: Option<Vec<f32>>,
    ops: Vec<&'static str>,
}

/// Panics unless every engine's output is within tolerance of `want`.
fn hold(name: &str, out: &Outputs, want: &[f64], what: &dyn std::fmt::Debug) {
    for (engine, got) in
        [("Kestrel", Some(&out.kestrel)), ("tract", Some(&out.tract)), ("Kestrel wgpu", out.gpu.as_ref())]
    {
        let Some(got) = got else { continue };
        let (wrong, err) = compare(got, want);
        assert_eq!(
            wrong,
            0,
            "{name}: {engine}: {wrong} of {} outputs wrong, max error {err:.2e} ({what:?})",
            want.len()
        );
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
    len: Vec<usize>,
    k: Vec<usize>,
    s: Vec<usize>,
    d: Vec<usize>,
    /// Every axis' begin, then every axis' end.
    pads: Vec<usize>,
    out_pad: Vec<usize>,
    bias: bool,
}

impl Deconv {
    fn nd(&self) -> usize {
        self.len.len()
    }

    fn x_shape(&self) -> Vec<usize> {
        [self.n, self.groups * self.cin_g].into_iter().chain(self.len.iter().copied()).collect()
    }

    fn out_len(&self, a: usize) -> i64 {
        let nd = self.nd();
        ((self.len[a] - 1) * self.s[a] + self.d[a] * (self.k[a] - 1) + 1 + self.out_pad[a]) as i64
            - (self.pads[a] + self.pads[nd + a]) as i64
    }

    fn out_shape(&self) -> Vec<usize> {
        [self.n, self.groups * self.cout_g]
            .into_iter()
            .chain((0..self.nd()).map(|a| self.out_len(a) as usize))
            .collect()
    }

    fn onnx(&self, w: &[f32], b: &[f32]) -> Vec<u8> {
        let cin = self.groups * self.cin_g;
        let wdims: Vec<usize> = [cin, self.cout_g].into_iter().chain(self.k.iter().copied()).collect();
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
        one_node_model(node, &self.x_shape(), inits, 17, "resample.rs")
    }

    /// The ONNX definition in f64.
    fn reference(&self, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f64> {
        let nd = self.nd();
        let (cin, cout) = (self.groups * self.cin_g, self.groups * self.cout_g);
        let out: Vec<usize> = (0..nd).map(|a| self.out_len(a) as usize).collect();
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
                            for a in 0..nd {
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
    assert_eq!(want.len(), dc.out_shape().iter().product::<usize>());
    let out = run(name, &dc.onnx(&w, &b), &dc.x_shape(), &x, ctx);
    assert!(out.ops.contains(&"Conv2d"), "{name}: {:?}", out.ops);
    hold(name, &out, &want, dc);
}

/// The decoder layers of U-Nets, FCNs and GAN generators as PyTorch writes them, then seeded
/// random geometries.
#[test]
fn conv_transpose_matches_reference() {
    let ctx = gpu();
    let mut rng = Rng::new(0x0D3C_0417);
    let d2 = |groups, cin_g, cout_g, len: [usize; 2], k: [usize; 2], s: [usize; 2], pads: [usize; 4]| Deconv {
        n: 1,
        groups,
        cin_g,
        cout_g,
        len: len.to_vec(),
        k: k.to_vec(),
        s: s.to_vec(),
        d: vec![1, 1],
        pads: pads.to_vec(),
        out_pad: vec![0, 0],
        bias: true,
    };
    let named: Vec<(&str, Deconv)> = vec![
        ("U-Net up 2x2 s2", d2(1, 8, 4, [5, 6], [2, 2], [2, 2], [0; 4])),
        ("FCN/GAN 4x4 s2 p1", d2(1, 3, 5, [4, 5], [4, 4], [2, 2], [1; 4])),
        ("3x3 s2 p1 output_padding 1", Deconv { out_pad: vec![1, 1], ..d2(1, 4, 3, [5, 4], [3, 3], [2, 2], [1; 4]) }),
        ("depthwise 3x3 s1 p1", d2(6, 1, 1, [6, 5], [3, 3], [1, 1], [1; 4])),
        ("no bias, fixed batch 2", Deconv { n: 2, bias: false, ..d2(2, 2, 3, [3, 4], [3, 2], [2, 3], [0, 1, 1, 0]) }),
    ];
    for (name, dc) in &named {
        check_deconv(name, dc, &mut rng, ctx.as_ref());
    }
    let mut done = 0;
    while done < 40 {
        let nd = 1 + below(&mut rng, 2);
        let mut dc = Deconv {
            n: 1 + below(&mut rng, 2),
            groups: 1 + below(&mut rng, 3),
            cin_g: 1 + below(&mut rng, 2),
            cout_g: 1 + below(&mut rng, 3),
            len: vec![],
            k: vec![],
            s: vec![],
            d: vec![],
            pads: vec![0; 2 * nd],
            out_pad: vec![],
            bias: below(&mut rng, 3) != 0,
        };
        for a in 0..nd {
            let (k, s, d) = (1 + below(&mut rng, 4), 1 + below(&mut rng, 3), 1 + below(&mut rng, 2));
            dc.len.push(1 + below(&mut rng, if nd == 1 { 12 } else { 6 }));
            dc.k.push(k);
            dc.s.push(s);
            dc.d.push(d);
            // ONNX: output padding below the stride or the dilation.
            dc.out_pad.push(below(&mut rng, s.max(d)));
            dc.pads[a] = below(&mut rng, d * (k - 1) + 1);
            dc.pads[nd + a] = below(&mut rng, d * (k - 1) + 1);
        }
        if (0..nd).any(|a| dc.out_len(a) < 1) {
            continue;
        }
        check_deconv(&format!("random {done}"), &dc, &mut rng, ctx.as_ref());
        done += 1;
    }
}

// ---------------------------------------------------------------- Resize

/// One Resize node (opset 19) over `x` of `shape`, by `scales` or by `sizes` on `axes` (all when
/// empty).
#[derive(Clone, Debug)]
struct Resize {
    shape: Vec<usize>,
    mode: &'static str,
    coord: &'static str,
    nearest: &'static str,
    scales: Vec<f32>,
    sizes: Vec<i64>,
    axes: Vec<i64>,
    antialias: bool,
    exclude_outside: bool,
    cubic_a: f32,
    roi: Vec<f32>,
    extrapolation: f32,
}

impl Resize {
    fn new(shape: &[usize], mode: &'static str, coord: &'static str) -> Self {
        Resize {
            shape: shape.to_vec(),
            mode,
            coord,
            nearest: "round_prefer_floor",
            scales: vec![],
            sizes: vec![],
            axes: vec![],
            antialias: false,
            exclude_outside: false,
            cubic_a: -0.75,
            roi: vec![],
            extrapolation: 0.0,
        }
    }

    fn onnx(&self) -> Vec<u8> {
        let mut inits = vec![];
        // Inputs X, roi, scales, sizes; an absent optional input is an empty name.
        let mut node = Msg::default().str(1, "x");
        if self.roi.is_empty() {
            node = node.str(1, "");
        } else {
            node = node.str(1, "roi");
            inits.push(f32_tensor("roi", &[self.roi.len()], &self.roi));
        }
        if self.scales.is_empty() {
            node = node.str(1, "").str(1, "sizes");
            inits.push(proto::i64_tensor("sizes", &[self.sizes.len()], &self.sizes));
        } else {
            node = node.str(1, "scales");
            inits.push(f32_tensor("scales", &[self.scales.len()], &self.scales));
        }
        let mut node = node
            .str(2, "y")
            .str(3, "resize")
            .str(4, "Resize")
            .msg(5, str_attr("mode", self.mode))
            .msg(5, str_attr("coordinate_transformation_mode", self.coord))
            .msg(5, str_attr("nearest_mode", self.nearest))
            .msg(5, i64_attr("antialias", i64::from(self.antialias)))
            .msg(5, i64_attr("exclude_outside", i64::from(self.exclude_outside)))
            .msg(5, float_attr("cubic_coeff_a", self.cubic_a))
            .msg(5, float_attr("extrapolation_value", self.extrapolation));
        if !self.axes.is_empty() {
            node = node.msg(5, i64s_attr("axes", &self.axes));
        }
        one_node_model(node, &self.shape, inits, 19, "resample.rs")
    }
}

/// tract's output is the reference here: Resize's modes are checked against ONNX's own outputs
/// by the conformance cases, and this test covers the geometries and layouts they do not.
fn check_resize(name: &str, r: &Resize, rng: &mut Rng, ctx: Option<&GpuContext>) {
    let x = nonzero(r.shape.iter().product(), rng);
    let out = run(name, &r.onnx(), &r.shape, &x, ctx);
    let want: Vec<f64> = out.tract.iter().map(|&v| f64::from(v)).collect();
    hold(name, &out, &want, r);
}

#[test]
fn resize_matches_tract_in_every_mode() {
    let ctx = gpu();
    let mut rng = Rng::new(0x0005_12E5);
    let coords = [
        "half_pixel",
        "half_pixel_symmetric",
        "pytorch_half_pixel",
        "align_corners",
        "asymmetric",
        "tf_half_pixel_for_nn",
    ];
    let nearests = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"];
    // YOLO's and FPN's 2× nearest upsampling, U-Net's bilinear upsampling (align_corners both
    // ways), and a segmentation head's 8× bilinear upsampling.
    let mut cases: Vec<(String, Resize)> = vec![
        (
            "yolo nearest 2x".into(),
            Resize { scales: vec![1.0, 1.0, 2.0, 2.0], ..Resize::new(&[1, 3, 5, 4], "nearest", "asymmetric") },
        ),
        (
            "unet bilinear 2x".into(),
            Resize { scales: vec![1.0, 1.0, 2.0, 2.0], ..Resize::new(&[1, 2, 4, 6], "linear", "half_pixel") },
        ),
        (
            "unet bilinear align_corners".into(),
            Resize { sizes: vec![1, 2, 9, 11], ..Resize::new(&[1, 2, 5, 6], "linear", "align_corners") },
        ),
        (
            "seg head 8x".into(),
            Resize { scales: vec![1.0, 1.0, 8.0, 8.0], ..Resize::new(&[1, 2, 3, 2], "linear", "pytorch_half_pixel") },
        ),
    ];
    for (m, mode) in ["nearest", "linear", "cubic"].into_iter().enumerate() {
        for (c, coord) in coords.into_iter().enumerate() {
            if coord == "tf_half_pixel_for_nn" && mode != "nearest" {
                continue;
            }
            let h = 2 + below(&mut rng, 5);
            let w = 2 + below(&mut rng, 6);
            let shape = [1, 1 + below(&mut rng, 2), h, w];
            let mut r = Resize::new(&shape, mode, coord);
            r.nearest = nearests[(m + c) % 4];
            // Up on one axis, down on the other, by scales or by sizes; non-integer factors.
            let (sh, sw) =
                ([0.5f32, 1.5, 2.0, 3.0, 0.75][below(&mut rng, 5)], [2.5f32, 0.6, 1.0, 1.75][below(&mut rng, 4)]);
            if below(&mut rng, 2) == 0 {
                r.scales = vec![1.0, 1.0, sh, sw];
            } else {
                r.sizes = vec![1, shape[1] as i64, ((h as f32 * sh) as i64).max(1), ((w as f32 * sw) as i64).max(1)];
            }
            cases.push((format!("{mode} {coord} {}", r.nearest), r));
        }
    }
    // Antialiased downscaling, exclude_outside with another cubic coefficient, resized axes
    // given as `axes` in reverse order, a 3-D channels-last-style tensor, and tf_crop_and_resize
    // with an extrapolation value.
    for mode in ["linear", "cubic"] {
        cases.push((
            format!("{mode} antialias"),
            Resize {
                scales: vec![1.0, 1.0, 0.4, 0.6],
                antialias: true,
                ..Resize::new(&[1, 2, 10, 9], mode, "half_pixel")
            },
        ));
    }
    cases.push((
        "cubic exclude_outside a=-0.5".into(),
        Resize {
            scales: vec![1.0, 1.0, 1.7, 0.8],
            exclude_outside: true,
            cubic_a: -0.5,
            ..Resize::new(&[1, 1, 5, 6], "cubic", "half_pixel")
        },
    ));
    cases.push((
        "axes 3,2".into(),
        Resize { sizes: vec![7, 3], axes: vec![3, 2], ..Resize::new(&[1, 2, 5, 4], "linear", "half_pixel") },
    ));
    cases.push((
        "3-D last axis".into(),
        Resize { scales: vec![1.0, 1.0, 2.5], ..Resize::new(&[1, 6, 4], "linear", "asymmetric") },
    ));
    cases.push((
        "tf_crop_and_resize extrapolation".into(),
        Resize {
            sizes: vec![1, 1, 4, 5],
            roi: vec![0.0, 0.0, -0.2, 0.1, 1.0, 1.0, 0.9, 1.3],
            extrapolation: 7.5,
            ..Resize::new(&[1, 1, 6, 5], "linear", "tf_crop_and_resize")
        },
    ));
    for (name, r) in &cases {
        check_resize(name, r, &mut rng, ctx.as_ref());
    }
}

/// A model that resizes the first axis is refused with the reason, not run wrongly.
#[test]
fn resizing_the_first_axis_is_refused() {
    let r = Resize { scales: vec![2.0, 1.0, 1.0], ..Resize::new(&[1, 2, 3], "nearest", "asymmetric") };
    let path = model_path("first axis");
    std::fs::write(&path, r.onnx()).unwrap();
    let err = convert(&path, &ConvertOptions::default()).err().map(|e| e.to_string());
    std::fs::remove_file(&path).ok();
    let err = err.expect("resizing the batch axis must be refused");
    assert!(err.contains("first (batch) axis"), "{err}");
}
