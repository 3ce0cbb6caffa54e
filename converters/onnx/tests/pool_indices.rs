//! ONNX MaxPool with its `Indices` output through the converter, against a reference written
//! here from ONNX's definition (onnxruntime's rule): each output's index is the first input
//! element holding the window's maximum, the window's taps taken in row-major order, numbered
//! over the whole input tensor (`N`, `C`, then the spatial axes row-major, or column-major with
//! `storage_order` 1). Seeded random geometries, 1-D, 2-D and 3-D: strides, dilations, explicit
//! and asymmetric pads, ceil mode, SAME_UPPER/SAME_LOWER/VALID, a fixed `N` of 1 or 2, on random
//! non-zero inputs, half of them drawn from few levels so that windows hold ties. Kestrel's
//! values and indices must equal the reference exactly (on the CPU, and on the GPU when there
//! is one); tract's (a second opinion) must too on the inputs without ties.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, ravel, unravel};
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, run_tract, ConvertOptions, InputTensor};
use proto::{float_value, i64_attr, ints_attr, str_attr, Msg};

/// One MaxPool node with both outputs over `x` of `shape` (`[N, C, spatial…]`).
#[derive(Clone, Debug)]
struct Pool {
    shape: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// Every axis' padding before, then every axis' padding after (with `auto_pad` unset).
    pads: Vec<usize>,
    /// `None` (explicit pads), or "SAME_UPPER", "SAME_LOWER", "VALID".
    auto_pad: Option<&'static str>,
    ceil: bool,
    storage_order: i64,
}

impl Pool {
    fn nd(&self) -> usize {
        self.kernel.len()
    }

    fn onnx(&self) -> Vec<u8> {
        let mut node = Msg::default()
            .str(1, "x")
            .str(2, "y")
            .str(2, "z")
            .str(3, "pool")
            .str(4, "MaxPool")
            .msg(5, ints_attr("kernel_shape", &self.kernel))
            .msg(5, ints_attr("strides", &self.strides))
            .msg(5, ints_attr("dilations", &self.dilations))
            .msg(5, i64_attr("ceil_mode", i64::from(self.ceil)))
            .msg(5, i64_attr("storage_order", self.storage_order));
        node = match self.auto_pad {
            None => node.msg(5, ints_attr("pads", &self.pads)),
            Some(a) => node.msg(5, str_attr("auto_pad", a)),
        };
        // The indices: an INT64 tensor (elem_type 7) of unknown shape.
        let z = Msg::default().str(1, "z").msg(2, Msg::default().msg(1, Msg::default().int(1, 7)));
        let graph = Msg::default()
            .msg(1, node)
            .str(2, "pool")
            .msg(11, float_value("x", Some(&self.shape)))
            .msg(12, float_value("y", None))
            .msg(12, z);
        Msg::default().int(1, 9).msg(8, Msg::default().int(2, 12)).str(2, "pool_indices.rs").msg(7, graph).0
    }

    /// Axis `a` under ONNX's rules: (padding before, output length).
    fn axis(&self, a: usize) -> (usize, usize) {
        let (len, s) = (self.shape[2 + a], self.strides[a]);
        let span = self.dilations[a] * (self.kernel[a] - 1) + 1;
        match self.auto_pad {
            None => {
                let (b, e) = (self.pads[a], self.pads[self.nd() + a]);
                let room = len + b + e - span;
                let mut out = if self.ceil { room.div_ceil(s) } else { room / s } + 1;
                if self.ceil && (out - 1) * s >= len + b {
                    out -= 1;
                }
                (b, out)
            }
            Some("VALID") => (0, (len - span) / s + 1),
            Some(mode) => {
                let out = len.div_ceil(s);
                let total = ((out - 1) * s + span).saturating_sub(len);
                (if mode == "SAME_UPPER" { total / 2 } else { total - total / 2 }, out)
            }
        }
    }

    /// (values, indices) by ONNX's definition, or `None` when a window holds no input.
    fn reference(&self, x: &[f32]) -> Option<(Vec<f32>, Vec<f32>)> {
        let nd = self.nd();
        let dims = &self.shape[2..];
        let axes: Vec<_> = (0..nd).map(|a| self.axis(a)).collect();
        let outs: Vec<usize> = axes.iter().map(|a| a.1).collect();
        let plane: usize = dims.iter().product();
        let taps: usize = self.kernel.iter().product();
        let (mut ys, mut zs) = (Vec::new(), Vec::new());
        for (pi, xc) in x.chunks_exact(plane).enumerate() {
            for o in 0..outs.iter().product() {
                let oi = unravel(o, &outs);
                let mut best: Option<(f32, Vec<usize>)> = None;
                for t in 0..taps {
                    let ti = unravel(t, &self.kernel);
                    let at: Option<Vec<usize>> = (0..nd)
                        .map(|a| {
                            let p = (oi[a] * self.strides[a] + ti[a] * self.dilations[a]) as isize - axes[a].0 as isize;
                            (0..dims[a] as isize).contains(&p).then_some(p as usize)
                        })
                        .collect();
                    let Some(at) = at else { continue };
                    let v = xc[ravel(&at, dims)];
                    if best.as_ref().is_none_or(|(b, _)| v > *b) {
                        best = Some((v, at));
                    }
                }
                let (v, at) = best?;
                let within = if self.storage_order == 1 {
                    // Column-major: the first spatial axis moves fastest.
                    let rev: Vec<usize> = at.iter().rev().copied().collect();
                    let rdims: Vec<usize> = dims.iter().rev().copied().collect();
                    ravel(&rev, &rdims)
                } else {
                    ravel(&at, dims)
                };
                ys.push(v);
                zs.push((pi * plane + within) as f32);
            }
        }
        Some((ys, zs))
    }
}

/// `n` non-zero values; with `levels`, drawn from a few multiples of 0.25 (ties in windows).
fn input(n: usize, rng: &mut Rng, levels: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u = rng.uniform();
            if levels {
                (1 + below(rng, 4)) as f32 * 0.25 * u.signum()
            } else {
                (0.05 + 1.95 * u.abs()).copysign(u)
            }
        })
        .collect()
}

/// Converts, runs on the CPU (and the GPU when there is one); every backend's two outputs.
fn run_kestrel(name: &str, onnx: &[u8], x: &[f32], n_out: usize) -> Vec<[Vec<f32>; 2]> {
    let path = std::env::temp_dir().join(format!("kestrel-pool-indices-{}-{name}.onnx", std::process::id()));
    std::fs::write(&path, onnx).unwrap();
    let conv = convert(&path, &ConvertOptions::default());
    std::fs::remove_file(&path).ok();
    let conv = conv.unwrap_or_else(|e| panic!("{name}: {e}"));
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let (mut y, mut z) = (vec![0f32; n_out], vec![0f32; n_out]);
    model.session(1).unwrap().run(&[Input::F32(x)], &mut [&mut y, &mut z]).unwrap();
    let mut outs = vec![[y, z]];
    if let Some(ctx) = common::gpu() {
        let cpu = model.cpu().unwrap();
        let (mut y, mut z) = (vec![0f32; n_out], vec![0f32; n_out]);
        kestrel_rt_wgpu::GpuSession::new(&ctx, &cpu, 1)
            .and_then(|mut s| s.run(&[Input::F32(x)], &mut [y.as_mut_slice(), z.as_mut_slice()]))
            .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
        outs.push([y, z]);
    }
    outs
}

fn check(name: &str, pool: &Pool, x: Vec<f32>, ties: bool) {
    let (want_y, want_z) = pool.reference(&x).unwrap_or_else(|| panic!("{name}: a window without input"));
    let onnx = pool.onnx();
    for (b, [y, z]) in run_kestrel(name, &onnx, &x, want_y.len()).iter().enumerate() {
        assert_eq!(y, &want_y, "{name}: values on backend {b} ({pool:?})");
        assert_eq!(z, &want_z, "{name}: indices on backend {b} ({pool:?})");
    }
    if !ties {
        let path = std::env::temp_dir().join(format!("kestrel-pool-indices-t-{}-{name}.onnx", std::process::id()));
        std::fs::write(&path, &onnx).unwrap();
        let t = run_tract(&path, &[InputTensor::f32(&pool.shape, x)]);
        std::fs::remove_file(&path).ok();
        let t = t.unwrap_or_else(|e| panic!("{name}: tract: {e}"));
        assert_eq!(t[0].1, want_y, "{name}: tract's values ({pool:?})");
        assert_eq!(t[1].1, want_z, "{name}: tract's indices ({pool:?})");
    }
}

/// The two conformance cases' geometries and both storage orders, fixed.
#[test]
fn fixed_pools_with_indices_match_onnx() {
    let p2 = |k: [usize; 2], s: [usize; 2], pads: [usize; 4], order: i64| Pool {
        shape: vec![1, 2, 5, 6],
        kernel: k.to_vec(),
        strides: s.to_vec(),
        dilations: vec![1, 1],
        pads: pads.to_vec(),
        auto_pad: None,
        ceil: false,
        storage_order: order,
    };
    let mut rng = Rng::new(0x1D8);
    for (i, pool) in [
        p2([5, 5], [1, 1], [2, 2, 2, 2], 0),
        p2([2, 2], [2, 2], [0; 4], 1),
        p2([3, 2], [2, 1], [1, 0, 0, 1], 1),
        Pool {
            shape: vec![2, 3, 4, 3, 5],
            kernel: vec![2, 2, 3],
            strides: vec![1, 2, 2],
            dilations: vec![1, 1, 1],
            pads: vec![1, 0, 1, 0, 1, 1],
            auto_pad: None,
            ceil: true,
            storage_order: 1,
        },
    ]
    .iter()
    .enumerate()
    {
        let x = input(pool.shape.iter().product(), &mut rng, false);
        check(&format!("fixed {i}"), pool, x, false);
    }
}

/// Seeded random geometries: 1-D (lengths to 40, kernels to 6), 2-D (sides to 9, kernels to
/// 4), 3-D (sides to 6, kernels to 3); strides to 3, dilations to 2, N 1 or 2, C 1 to 3.
#[test]
fn random_pools_with_indices_match_onnx() {
    let mut rng = Rng::new(0x1D8_5EED);
    let mut done = 0;
    while done < 48 {
        let nd = 1 + below(&mut rng, 3);
        let (n, c) = (1 + below(&mut rng, 2), 1 + below(&mut rng, 3));
        let mut pool = Pool {
            shape: vec![n, c],
            kernel: vec![],
            strides: vec![],
            dilations: vec![],
            pads: vec![],
            auto_pad: None,
            ceil: below(&mut rng, 2) == 0,
            storage_order: below(&mut rng, 2) as i64,
        };
        let mut after = vec![];
        for _ in 0..nd {
            let (len, k) = match nd {
                1 => (1 + below(&mut rng, 40), 1 + below(&mut rng, 6)),
                2 => (1 + below(&mut rng, 9), 1 + below(&mut rng, 4)),
                _ => (1 + below(&mut rng, 6), 1 + below(&mut rng, 3)),
            };
            let (s, d) = (1 + below(&mut rng, 3), 1 + below(&mut rng, 2));
            let span = d * (k - 1) + 1;
            pool.shape.push(len);
            pool.kernel.push(k);
            pool.strides.push(s);
            pool.dilations.push(d);
            // ONNX: pads below the kernel's extent.
            pool.pads.push(below(&mut rng, span));
            after.push(below(&mut rng, span));
        }
        pool.pads.extend(after);
        pool.auto_pad = [None, None, None, Some("SAME_UPPER"), Some("SAME_LOWER"), Some("VALID")][below(&mut rng, 6)];
        if pool.auto_pad.is_some() {
            pool.ceil = false;
            pool.pads = vec![0; 2 * nd];
        }
        let fits = (0..nd).all(|a| {
            let span = pool.dilations[a] * (pool.kernel[a] - 1) + 1;
            let padded = pool.shape[2 + a] + pool.pads[a] + pool.pads[nd + a];
            pool.auto_pad.is_some_and(|m| m != "VALID") || padded >= span
        });
        if !fits || pool.reference(&vec![1.0; pool.shape.iter().product()]).is_none() {
            continue;
        }
        let ties = below(&mut rng, 2) == 0;
        let x = input(pool.shape.iter().product(), &mut rng, ties);
        check(&format!("random {done}"), &pool, x, ties);
        done += 1;
    }
}
