//! ONNX GridSample through the converter: every interpolation mode (linear, nearest, cubic,
//! under their opset-16 names too) × padding mode (zeros, border, reflection) × `align_corners`,
//! on 2-D images, 3-D volumes and 1-D signals, a first axis N of 1 or 2 (the whole input one sample), the grid
//! a graph input (known only at run time) or an initializer, against an f64 reference written
//! here from ONNX's reference implementation (`onnx/reference/ops/op_grid_sample.py`: the N-D
//! interpolation as nested 1-D ones, each tap read through the padding mode). Grids mix random
//! points inside and around [−1, 1], points far outside (several reflections) and points exactly
//! on pixel centres, pixel edges (nearest's ties) and the corners. Each model runs on Kestrel's
//! CPU runtime at batch 2 (two samples with their own input and grid) and, when a GPU (lavapipe
//! in CI) is present, on the wgpu backend.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, ConvertOptions};
use kestrel_rt_wgpu::GpuSession;
use proto::{f32_tensor, float_value, i64_attr, str_attr, Msg};

/// f32 sums against the f64 reference: `|err| ≤ REL·|want| + ABS·max|want|`.
const REL: f64 = 1e-5;
/// See [`REL`].
const ABS: f64 = 2e-5;

const MODES: [&str; 3] = ["linear", "nearest", "cubic"];
const PADS: [&str; 3] = ["zeros", "border", "reflection"];

/// One GridSample node over `x [xs]` and `grid [gs]`.
#[derive(Clone, Debug)]
struct Case {
    mode: &'static str,
    pad: &'static str,
    align: bool,
    opset: i64,
    xs: Vec<usize>,
    gs: Vec<usize>,
    /// The grid as an initializer holding these values.
    const_grid: Option<Vec<f32>>,
}

impl Case {
    fn out_shape(&self) -> Vec<usize> {
        let k = self.xs.len() - 2;
        [self.xs[0], self.xs[1]].into_iter().chain(self.gs[1..=k].iter().copied()).collect()
    }

    fn onnx(&self) -> Vec<u8> {
        // Opset 16 names linear and cubic `bilinear` and `bicubic`.
        let mode = match (self.opset, self.mode) {
            (16, "linear") => "bilinear",
            (16, "cubic") => "bicubic",
            (_, m) => m,
        };
        let node = Msg::default()
            .str(1, "x")
            .str(1, "grid")
            .str(2, "y")
            .str(3, "gs")
            .str(4, "GridSample")
            .msg(5, str_attr("mode", mode))
            .msg(5, str_attr("padding_mode", self.pad))
            .msg(5, i64_attr("align_corners", i64::from(self.align)));
        let mut graph = Msg::default().msg(1, node).str(2, "g").msg(11, float_value("x", Some(&self.xs)));
        graph = match &self.const_grid {
            Some(v) => graph.msg(5, f32_tensor("grid", &self.gs, v)),
            None => graph.msg(11, float_value("grid", Some(&self.gs))),
        };
        graph = graph.msg(12, float_value("y", None));
        Msg::default().int(1, 9).msg(8, Msg::default().int(2, self.opset)).str(2, "grid_sample.rs").msg(7, graph).0
    }

    /// Converts and runs the batch (`x` and, for a grid input, `grid`: every sample's, one after
    /// the other) on every backend there is: one output per backend, or the first error.
    fn run(&self, name: &str, x: &[f32], grid: &[f32], batch: usize) -> Result<Vec<Vec<f32>>, String> {
        let path = std::env::temp_dir().join(format!("kestrel-grid-sample-{}-{name}.onnx", std::process::id()));
        std::fs::write(&path, self.onnx()).unwrap();
        let conv = convert(&path, &ConvertOptions::default()).map_err(|e| e.to_string());
        std::fs::remove_file(&path).ok();
        let model = kestrel_rt::Model::from_bytes(&conv?.kes).unwrap();
        let mut inputs = vec![Input::F32(x)];
        if self.const_grid.is_none() {
            inputs.push(Input::F32(grid));
        }
        let n_out = batch * self.out_shape().iter().product::<usize>();
        let mut y = vec![0f32; n_out];
        model.session(batch).unwrap().run(&inputs, &mut [&mut y]).map_err(|e| e.to_string())?;
        let mut outs = vec![y];
        if let Some(ctx) = gpu() {
            let cpu = model.cpu().unwrap();
            let mut g = vec![0f32; n_out];
            GpuSession::new(&ctx, &cpu, batch)
                .and_then(|mut s| s.run(&inputs, &mut [g.as_mut_slice()]))
                .map_err(|e| format!("wgpu: {e}"))?;
            outs.push(g);
        }
        Ok(outs)
    }

    // ------------------------------------------------------------ the reference

    /// ONNX's `_gs_denormalize`, in f32 as the reference's numpy computes it.
    fn denormalise(&self, g: f32, len: usize) -> f32 {
        if self.align {
            (g + 1.0) / 2.0 * (len as f32 - 1.0)
        } else {
            ((g + 1.0) * len as f32 - 1.0) / 2.0
        }
    }

    /// ONNX's `_prepare_border` for one axis.
    fn border(&self, len: usize) -> (f64, f64) {
        if self.align {
            (0.0, len as f64 - 1.0)
        } else {
            (-0.5, len as f64 - 0.5)
        }
    }

    /// ONNX's `_pixel_at_array`: `data[i]` through the padding mode.
    fn pixel_at(&self, data: &[f64], i: i64) -> f64 {
        let d = data.len() as i64;
        match self.pad {
            "zeros" => {
                if (0..d).contains(&i) {
                    data[i as usize]
                } else {
                    0.0
                }
            }
            "border" => data[i.clamp(0, d - 1) as usize],
            _ => {
                let (lo, hi) = self.border(data.len());
                data[reflect(i as f64, lo, hi) as i64 as usize]
            }
        }
    }

    /// ONNX's `_gs_{linear,cubic}_interpolation_1d_with_x`.
    fn interpolate_1d(&self, data: &[f64], x: f64) -> f64 {
        let x0 = x.floor();
        let t = x - x0;
        let x0 = x0 as i64;
        if self.mode == "linear" {
            (1.0 - t) * self.pixel_at(data, x0) + t * self.pixel_at(data, x0 + 1)
        } else {
            let a = -0.75;
            let c = [
                ((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a,
                ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
                ((a + 2.0) * (1.0 - t) - (a + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0,
                ((a * (2.0 - t) - 5.0 * a) * (2.0 - t) + 8.0 * a) * (2.0 - t) - 4.0 * a,
            ];
            (0..4).map(|k| c[k] * self.pixel_at(data, x0 - 1 + k as i64)).sum()
        }
    }

    /// ONNX's `_gs_*_interpolation_nd_with_x`: the leading axis last, over the 1-D results of the
    /// sub-arrays.
    fn interpolate_nd(&self, data: &[f64], dims: &[usize], x: &[f64]) -> f64 {
        if dims.len() == 1 {
            return self.interpolate_1d(data, x[0]);
        }
        let inner: usize = dims[1..].iter().product();
        let res: Vec<f64> =
            (0..dims[0]).map(|i| self.interpolate_nd(&data[i * inner..][..inner], &dims[1..], &x[1..])).collect();
        self.interpolate_1d(&res, x[0])
    }

    /// ONNX's `_pixel_at_ndarray`.
    fn pixel_at_nd(&self, data: &[f64], dims: &[usize], x: &[i64]) -> f64 {
        if dims.len() == 1 {
            return self.pixel_at(data, x[0]);
        }
        let (d, inner) = (dims[0] as i64, dims[1..].iter().product::<usize>());
        let i = match self.pad {
            "zeros" if !(0..d).contains(&x[0]) => return 0.0,
            "zeros" => x[0],
            "border" => x[0].clamp(0, d - 1),
            _ => {
                let (lo, hi) = self.border(dims[0]);
                reflect(x[0] as f64, lo, hi) as i64
            }
        };
        self.pixel_at_nd(&data[i as usize * inner..][..inner], &dims[1..], &x[1..])
    }

    /// ONNX's `GridSample._run` for one sample, in f64.
    fn reference(&self, x: &[f32], grid: &[f32]) -> Vec<f64> {
        let (n, c) = (self.xs[0], self.xs[1]);
        let dims = &self.xs[2..];
        let k = dims.len();
        let plane: usize = dims.iter().product();
        let p: usize = self.gs[1..=k].iter().product();
        let mut y = Vec::with_capacity(n * c * p);
        for b in 0..n {
            for ch in 0..c {
                let data: Vec<f64> = x[(b * c + ch) * plane..][..plane].iter().map(|&v| f64::from(v)).collect();
                for q in 0..p {
                    let g = &grid[(b * p + q) * k..][..k];
                    // The grid holds (x, y, z…): the last axis first.
                    let mut u: Vec<f32> = (0..k).map(|d| self.denormalise(g[k - 1 - d], dims[d])).collect();
                    if self.mode == "nearest" {
                        u.iter_mut().for_each(|v| *v = v.round_ties_even());
                    }
                    for (d, v) in u.iter_mut().enumerate() {
                        let (lo, hi) = self.border(dims[d]);
                        let w = f64::from(*v);
                        if w < lo || w > hi {
                            match self.pad {
                                "border" => *v = w.clamp(0.0, dims[d] as f64 - 1.0) as f32,
                                "reflection" => *v = reflect(w, lo, hi) as f32,
                                _ => {}
                            }
                        }
                    }
                    let u: Vec<f64> = u.into_iter().map(f64::from).collect();
                    y.push(if self.mode == "nearest" {
                        let i: Vec<i64> = u.iter().map(|&v| v as i64).collect();
                        self.pixel_at_nd(&data, dims, &i)
                    } else {
                        self.interpolate_nd(&data, dims, &u)
                    });
                }
            }
        }
        y
    }
}

/// ONNX's `_gs_reflect` (a zero range, where ONNX's reference divides by zero, gives `lo`, as
/// tract does).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let rng = hi - lo;
    if rng == 0.0 {
        return lo;
    }
    if x < lo {
        let dx = lo - x;
        let n = (dx / rng) as i64;
        let r = dx - n as f64 * rng;
        if n % 2 == 0 {
            lo + r
        } else {
            hi - r
        }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / rng) as i64;
        let r = dx - n as f64 * rng;
        if n % 2 == 0 {
            hi - r
        } else {
            lo + r
        }
    } else {
        x
    }
}

/// A normalised grid value for an axis of `len` pixels: random inside and around [−1, 1], far
/// outside, or exactly on a pixel centre, a pixel edge (either convention's), a corner.
fn grid_value(rng: &mut Rng, len: usize) -> f32 {
    let l = len as f32;
    match below(rng, 10) {
        0..=3 => rng.uniform() * 1.4,
        4 => rng.uniform() * 6.0,
        // Pixel centres (align_corners 0), possibly one or two pixels outside.
        5 => (2.0 * (below(rng, len + 4) as f32 - 2.0) + 1.0) / l - 1.0,
        // Pixel edges (align_corners 0), the centres of align_corners 1.
        6 => 2.0 * (below(rng, len + 5) as f32 - 2.0) / l - 1.0,
        7 if len > 1 => 2.0 * (below(rng, len + 2) as f32 - 1.0) / (l - 1.0) - 1.0,
        // Half-way between align_corners 1 centres (nearest's ties there).
        8 if len > 1 => (2.0 * below(rng, len + 2) as f32 - 1.0) / (l - 1.0) - 1.0,
        _ => [-1.0, 1.0, 0.0, -1.5, 1.5, -2.0, 2.0, -3.0][below(rng, 8)],
    }
}

/// A grid `[N, O…, k]` for an input with spatial `dims`.
fn grid(rng: &mut Rng, gs: &[usize], dims: &[usize]) -> Vec<f32> {
    let k = dims.len();
    (0..gs.iter().product::<usize>()).map(|e| grid_value(rng, dims[k - 1 - e % k])).collect()
}

/// Panics unless `got` holds `want` within the tolerance.
fn hold(name: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name}: output length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
    for (e, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(err <= REL * w.abs() + ABS * scale, "{name}: element {e}: {g} vs {w} (error {err:.3e})");
    }
}

fn check(case: &Case, name: &str, rng: &mut Rng) {
    let per_x: usize = case.xs.iter().product();
    let per_g: usize = case.gs.iter().product();
    let dims = &case.xs[2..];
    let x = rng.vec(2 * per_x, 2.0);
    let (grid, batch_grid) = match &case.const_grid {
        Some(g) => (g.clone(), [g.clone(), g.clone()].concat()),
        None => {
            let g = [grid(rng, &case.gs, dims), grid(rng, &case.gs, dims)].concat();
            (g.clone(), g)
        }
    };
    let mut want = case.reference(&x[..per_x], &grid[..per_g]);
    want.extend(case.reference(&x[per_x..], &batch_grid[per_g..]));
    let outs = case.run(name, &x, &batch_grid, 2).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (backend, got) in ["cpu", "wgpu"].iter().zip(&outs) {
        hold(&format!("{name} ({backend}, {case:?})"), got, &want);
    }
}

/// Every mode × padding × align_corners on 2-D images, with the grid given at run time and as an
/// initializer, under both opsets' mode names.
#[test]
fn grid_sample_2d_matches_reference_for_every_mode() {
    let mut rng = Rng::new(0x6121D);
    let mut case_no = 0;
    for mode in MODES {
        for pad in PADS {
            for align in [false, true] {
                for constant in [false, true] {
                    case_no += 1;
                    let xs = vec![
                        1 + below(&mut rng, 2),
                        1 + below(&mut rng, 3),
                        1 + below(&mut rng, 5),
                        1 + below(&mut rng, 5),
                    ];
                    let gs = vec![xs[0], 1 + below(&mut rng, 4), 1 + below(&mut rng, 5), 2];
                    let const_grid = constant.then(|| grid(&mut rng, &gs, &xs[2..]));
                    let opset = [16, 20, 22][case_no % 3];
                    let case = Case { mode, pad, align, opset, xs, gs, const_grid };
                    check(&case, &format!("2d{case_no}"), &mut rng);
                }
            }
        }
    }
}

/// The same on 3-D volumes (`[N, C, D, H, W]`, grid `[N, D', H', W', 3]`), cubic included (ONNX
/// defines it for any number of axes).
#[test]
fn grid_sample_3d_matches_reference_for_every_mode() {
    let mut rng = Rng::new(0x6121E);
    let mut case_no = 0;
    for mode in MODES {
        for pad in PADS {
            for align in [false, true] {
                for constant in [false, true] {
                    case_no += 1;
                    let xs: Vec<usize> = vec![
                        1 + below(&mut rng, 2),
                        1 + below(&mut rng, 2),
                        1 + below(&mut rng, 4),
                        1 + below(&mut rng, 4),
                        1 + below(&mut rng, 4),
                    ];
                    let gs = vec![xs[0], 1 + below(&mut rng, 3), 1 + below(&mut rng, 3), 1 + below(&mut rng, 3), 3];
                    let const_grid = constant.then(|| grid(&mut rng, &gs, &xs[2..]));
                    let case = Case { mode, pad, align, opset: 22, xs, gs, const_grid };
                    check(&case, &format!("3d{case_no}"), &mut rng);
                }
            }
        }
    }
}

/// 1-D signals (`[N, C, W]`, grid `[N, W', 1]`), every mode × padding × align_corners.
#[test]
fn grid_sample_1d_matches_reference_for_every_mode() {
    let mut rng = Rng::new(0x61220);
    let mut case_no = 0;
    for mode in MODES {
        for pad in PADS {
            for align in [false, true] {
                case_no += 1;
                let xs = vec![1, 1 + below(&mut rng, 3), 1 + below(&mut rng, 6)];
                let gs = vec![1, 1 + below(&mut rng, 6), 1];
                let const_grid = (case_no % 2 == 0).then(|| grid(&mut rng, &gs, &xs[2..]));
                let case = Case { mode, pad, align, opset: 22, xs, gs, const_grid };
                check(&case, &format!("1d{case_no}"), &mut rng);
            }
        }
    }
}

/// Larger images, every grid point on a pixel edge or centre of either convention (where
/// nearest rounds half to even and the tent and cubic weights have their kinks), at run time.
#[test]
fn grid_sample_on_pixel_centres_and_edges() {
    let mut rng = Rng::new(0x6121F);
    for (i, (mode, pad)) in MODES.iter().flat_map(|m| PADS.iter().map(move |p| (*m, *p))).enumerate() {
        for align in [false, true] {
            let xs = vec![1, 2, 6, 7];
            let gs = vec![1, 5, 8, 2];
            let case = Case { mode, pad, align, opset: 22, xs: xs.clone(), gs: gs.clone(), const_grid: None };
            let per_x: usize = xs.iter().product();
            let x = rng.vec(2 * per_x, 2.0);
            let g: Vec<f32> = (0..2 * gs.iter().product::<usize>())
                .map(|e| {
                    let len = xs[3 - e % 2] as f32;
                    let j = below(&mut rng, 2 * xs[3 - e % 2] + 7) as f32 - 3.0;
                    // Half-pixel steps of either convention.
                    if below(&mut rng, 2) == 0 {
                        j / len - 1.0
                    } else {
                        j / (len - 1.0) - 1.0
                    }
                })
                .collect();
            let per_g = g.len() / 2;
            let mut want = case.reference(&x[..per_x], &g[..per_g]);
            want.extend(case.reference(&x[per_x..], &g[per_g..]));
            let name = format!("edges{i}{align}");
            let outs = case.run(&name, &x, &g, 2).unwrap_or_else(|e| panic!("{name}: {e}"));
            for (backend, got) in ["cpu", "wgpu"].iter().zip(&outs) {
                hold(&format!("{name} ({backend}, {mode} {pad} align {align})"), got, &want);
            }
            // Nearest picks pixels: exactly.
            if mode == "nearest" {
                for got in &outs {
                    assert!(got.iter().zip(&want).all(|(&g, &w)| f64::from(g) == w), "{name}: nearest not exact");
                }
            }
        }
    }
}

/// A grid sample whose intermediates would be too large is refused with a clear blocker.
#[test]
fn grid_sample_too_large_is_refused() {
    let case = Case {
        mode: "linear",
        pad: "zeros",
        align: false,
        opset: 22,
        xs: vec![1, 64, 256, 256],
        gs: vec![1, 256, 256, 2],
        const_grid: None,
    };
    let err = case.run("large", &[], &[], 1).expect_err("a 2^30-element intermediate must be refused");
    assert!(err.contains("GridSample") && err.contains("intermediate"), "{err}");
}
