//! ONNX ScatterElements and ScatterND (every reduction) and GatherND (index tuples, batch_dims),
//! with indices and updates as graph inputs (known only at run time) and as initializers, on
//! seeded random shapes: the converted model on the CPU and, when there is one, on the GPU,
//! against a reference written here from ONNX's definitions (in f64, updates applied in order).

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, ravel, unravel};
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, ConvertOptions};
use kestrel_rt_wgpu::GpuSession;
use proto::{f32_tensor, float_value, i64_attr, i64_tensor, i64_value, str_attr, Msg};

const REDUCTIONS: [&str; 5] = ["none", "add", "mul", "max", "min"];

/// One ONNX node over data `x [xs]`, indices `i [is]` and (for a scatter) updates `u [us]`;
/// indices and updates are graph inputs, or initializers holding the given values.
struct Case<'a> {
    op: &'a str,
    attrs: Vec<Msg>,
    xs: Vec<usize>,
    is: Vec<usize>,
    us: Option<Vec<usize>>,
    const_idx: Option<&'a [i64]>,
    const_upd: Option<&'a [f32]>,
}

impl Case<'_> {
    fn onnx(&self) -> Vec<u8> {
        let mut node = Msg::default().str(1, "x").str(1, "i");
        if self.us.is_some() {
            node = node.str(1, "u");
        }
        node = node.str(2, "y").str(3, "n").str(4, self.op);
        for a in &self.attrs {
            node = node.msg(5, a.clone());
        }
        let mut graph = Msg::default().msg(1, node).str(2, "g").msg(11, float_value("x", Some(&self.xs)));
        graph = match self.const_idx {
            Some(v) => graph.msg(5, i64_tensor("i", &self.is, v)),
            None => graph.msg(11, i64_value("i", &self.is)),
        };
        if let Some(us) = &self.us {
            graph = match self.const_upd {
                Some(v) => graph.msg(5, f32_tensor("u", us, v)),
                None => graph.msg(11, float_value("u", Some(us))),
            };
        }
        graph = graph.msg(12, float_value("y", None));
        Msg::default().int(1, 9).msg(8, Msg::default().int(2, 18)).str(2, "scatter.rs").msg(7, graph).0
    }

    /// Converts and runs on every backend there is: one output per backend, or the first error.
    fn run(&self, name: &str, x: &[f32], idx: &[i64], upd: &[f32], n_out: usize) -> Result<Vec<Vec<f32>>, String> {
        let path = std::env::temp_dir().join(format!("kestrel-scatter-{}-{name}.onnx", std::process::id()));
        std::fs::write(&path, self.onnx()).unwrap();
        let conv = convert(&path, &ConvertOptions::default()).map_err(|e| e.to_string());
        std::fs::remove_file(&path).ok();
        let model = kestrel_rt::Model::from_bytes(&conv?.kes).unwrap();
        let mut inputs = vec![Input::F32(x)];
        if self.const_idx.is_none() {
            inputs.push(Input::I64(idx));
        }
        if self.us.is_some() && self.const_upd.is_none() {
            inputs.push(Input::F32(upd));
        }
        let mut y = vec![0f32; n_out];
        model.session(1).unwrap().run(&inputs, &mut [&mut y]).map_err(|e| e.to_string())?;
        let mut outs = vec![y];
        if let Some(ctx) = gpu() {
            let cpu = model.cpu().unwrap();
            let mut g = vec![0f32; n_out];
            GpuSession::new(&ctx, &cpu, 1)
                .and_then(|mut s| s.run(&inputs, &mut [g.as_mut_slice()]))
                .map_err(|e| format!("wgpu: {e}"))?;
            outs.push(g);
        }
        Ok(outs)
    }
}

fn combine(red: &str, old: f64, v: f64) -> f64 {
    match red {
        "none" => v,
        "add" => old + v,
        "mul" => old * v,
        "max" => old.max(v),
        "min" => old.min(v),
        _ => unreachable!(),
    }
}

/// `got` against the f64 reference: exact, but for sums and products of several updates (formed
/// in f32, in another order than the reference's) within 1e-6 relative.
fn check(name: &str, got: &[f32], want: &[f64], red: &str) {
    assert_eq!(got.len(), want.len(), "{name}");
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = if red == "mul" || red == "add" { 1e-6 * w.abs().max(1.0) } else { 0.0 };
        assert!((g as f64 - w).abs() <= tol, "{name}: element {k}: {g} vs {w}");
    }
}

/// A shape with a leading 1 (the batch axis) and 1..=3 axes of 1..=4.
fn shape(rng: &mut Rng) -> Vec<usize> {
    let rank = 1 + below(rng, 3);
    std::iter::once(1).chain((0..rank).map(|_| 1 + below(rng, 4))).collect()
}

/// `m` indices into `0..n` (negative ones counting from the end, at random), distinct when
/// `distinct` (ONNX requires it for reduction `none` at run time).
fn indices(rng: &mut Rng, m: usize, n: usize, distinct: bool) -> Vec<i64> {
    let mut pool: Vec<usize> = (0..n).collect();
    (0..m)
        .map(|_| {
            let i = if distinct { pool.remove(below(rng, pool.len())) } else { below(rng, n) };
            if below(rng, 2) == 1 {
                i as i64 - n as i64
            } else {
                i as i64
            }
        })
        .collect()
}

fn norm(i: i64, n: usize) -> usize {
    if i < 0 {
        (i + n as i64) as usize
    } else {
        i as usize
    }
}

#[test]
fn scatter_elements_matches_reference_for_every_reduction() {
    let mut rng = Rng::new(0x5CA7);
    for case in 0..40 {
        let xs = shape(&mut rng);
        let axis = 1 + below(&mut rng, xs.len() - 1);
        let red = REDUCTIONS[case % 5];
        let constant = case % 4 >= 2;
        let n = xs[axis];
        // Along `axis`, 1..=n updates per column (distinct places when at run time with `none`).
        let m = 1 + below(&mut rng, n);
        let us: Vec<usize> = xs.iter().enumerate().map(|(a, &d)| if a == axis { m } else { d }).collect();
        let count: usize = us.iter().product();
        let distinct = red == "none" && !constant;
        let mut idx = vec![0i64; count];
        // One column of indices per position off the axis.
        let cols: usize = count / m;
        let mut per_col: Vec<Vec<i64>> = (0..cols).map(|_| indices(&mut rng, m, n, distinct)).collect();
        for (e, slot) in idx.iter_mut().enumerate() {
            let at = unravel(e, &us);
            let col: Vec<usize> = at.iter().enumerate().filter(|&(a, _)| a != axis).map(|(_, &v)| v).collect();
            let off: Vec<usize> = us.iter().enumerate().filter(|&(a, _)| a != axis).map(|(_, &v)| v).collect();
            *slot = per_col[ravel(&col, &off)][at[axis]];
        }
        per_col.clear();
        let x = rng.vec(xs.iter().product(), 2.0);
        let u = rng.vec(count, 2.0);
        let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for e in 0..count {
            let mut at = unravel(e, &us);
            at[axis] = norm(idx[e], n);
            let k = ravel(&at, &xs);
            want[k] = combine(red, want[k], u[e] as f64);
        }
        let c = Case {
            op: "ScatterElements",
            attrs: vec![i64_attr("axis", axis as i64), str_attr("reduction", red)],
            xs: xs.clone(),
            is: us.clone(),
            us: Some(us.clone()),
            const_idx: constant.then_some(idx.as_slice()),
            const_upd: (constant && case % 2 == 1).then_some(u.as_slice()),
        };
        let name = format!("{case}: ScatterElements {red} x {xs:?} axis {axis} updates {us:?} constant {constant}");
        for got in c.run(&format!("e{case}"), &x, &idx, &u, want.len()).unwrap_or_else(|e| panic!("{name}: {e}")) {
            check(&name, &got, &want, red);
        }
    }
}

#[test]
fn scatter_nd_matches_reference_for_every_reduction() {
    let mut rng = Rng::new(0x5CA8);
    for case in 0..40 {
        let xs = shape(&mut rng);
        let red = REDUCTIONS[case % 5];
        let constant = case % 4 >= 2;
        // Tuples of k components address the rows of xs[..k] (the batch axis included: 0).
        let k = 1 + below(&mut rng, xs.len());
        let rows: usize = xs[..k].iter().product();
        let row: usize = xs[k..].iter().product();
        let m = 1 + below(&mut rng, rows);
        let mut pool: Vec<usize> = (0..rows).collect();
        let flat: Vec<usize> = (0..m)
            .map(|_| {
                if red == "none" && !constant {
                    pool.remove(below(&mut rng, pool.len()))
                } else {
                    below(&mut rng, rows)
                }
            })
            .collect();
        let idx: Vec<i64> = flat
            .iter()
            .flat_map(|&r| {
                let t = unravel(r, &xs[..k]);
                t.into_iter()
                    .zip(&xs[..k])
                    .map(|(c, &d)| if c % 2 == 1 { c as i64 - d as i64 } else { c as i64 })
                    .collect::<Vec<_>>()
            })
            .collect();
        let is = vec![m, k];
        let us: Vec<usize> = std::iter::once(m).chain(xs[k..].iter().copied()).collect();
        let x = rng.vec(xs.iter().product(), 2.0);
        let u = rng.vec(m * row, 2.0);
        let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for (e, &r) in flat.iter().enumerate() {
            for j in 0..row {
                want[r * row + j] = combine(red, want[r * row + j], u[e * row + j] as f64);
            }
        }
        let c = Case {
            op: "ScatterND",
            attrs: vec![str_attr("reduction", red)],
            xs: xs.clone(),
            is: is.clone(),
            us: Some(us.clone()),
            const_idx: constant.then_some(idx.as_slice()),
            const_upd: (constant && case % 2 == 1).then_some(u.as_slice()),
        };
        let name = format!("{case}: ScatterND {red} x {xs:?} indices {is:?} constant {constant}");
        for got in c.run(&format!("n{case}"), &x, &idx, &u, want.len()).unwrap_or_else(|e| panic!("{name}: {e}")) {
            check(&name, &got, &want, red);
        }
    }
}

#[test]
fn gather_nd_with_run_time_tuples_and_batch_dims_matches_reference() {
    let mut rng = Rng::new(0x6A7D);
    for case in 0..24 {
        // batch_dims 1 has the batch axis (1) and possibly another shared.
        let xs: Vec<usize> =
            std::iter::once(1).chain((0..2 + below(&mut rng, 2)).map(|_| 1 + below(&mut rng, 4))).collect();
        let b = case % 3;
        let k = 1 + below(&mut rng, xs.len() - b);
        let mid = 1 + below(&mut rng, 3);
        let is: Vec<usize> = xs[..b].iter().copied().chain([mid, k]).collect();
        let dims = &xs[b..b + k];
        let batches: usize = xs[..b].iter().product();
        let per: usize = dims.iter().product();
        let row: usize = xs[b + k..].iter().product();
        let tuples = batches * mid;
        let flat: Vec<usize> = (0..tuples).map(|_| below(&mut rng, per)).collect();
        let idx: Vec<i64> = flat
            .iter()
            .flat_map(|&r| {
                let t = unravel(r, dims);
                t.into_iter()
                    .zip(dims)
                    .map(|(c, &d)| if c % 2 == 0 { c as i64 } else { c as i64 - d as i64 })
                    .collect::<Vec<_>>()
            })
            .collect();
        let x = rng.vec(xs.iter().product(), 2.0);
        let want: Vec<f64> = (0..tuples)
            .flat_map(|t| {
                let first = (t / mid) * per + flat[t];
                (0..row).map(move |j| first * row + j)
            })
            .map(|e| x[e] as f64)
            .collect();
        let c = Case {
            op: "GatherND",
            attrs: vec![i64_attr("batch_dims", b as i64)],
            xs: xs.clone(),
            is: is.clone(),
            us: None,
            const_idx: None,
            const_upd: None,
        };
        let name = format!("{case}: GatherND x {xs:?} indices {is:?} batch_dims {b}");
        for got in c.run(&format!("g{case}"), &x, &idx, &[], want.len()).unwrap_or_else(|e| panic!("{name}: {e}")) {
            check(&name, &got, &want, "none");
        }
        // The same tuples as a constant (negative components counted from the end): one Gather
        // of their flat rows.
        let cc = Case {
            op: "GatherND",
            attrs: vec![i64_attr("batch_dims", b as i64)],
            xs: xs.clone(),
            is: is.clone(),
            us: None,
            const_idx: Some(idx.as_slice()),
            const_upd: None,
        };
        let outs = cc.run(&format!("g{case}c"), &x, &idx, &[], want.len());
        for got in outs.unwrap_or_else(|e| panic!("{name} (constant): {e}")) {
            check(&format!("{name} (constant)"), &got, &want, "none");
        }
        // A component past its axis picks nothing (zeros), never another row: with k ≥ 2, the
        // tuple (0, …, d) would alias the next row if its flat index were taken as it is.
        if k >= 2 && row > 0 {
            let mut bad = idx.clone();
            bad[k - 1] = dims[k - 1] as i64;
            let outs = c.run(&format!("g{case}b"), &x, &bad, &[], want.len()).unwrap_or_else(|e| panic!("{name}: {e}"));
            for got in outs {
                assert!(
                    got[..row].iter().all(|&v| v == 0.0),
                    "{name}: an index past its axis picked {:?}",
                    &got[..row]
                );
                check(&name, &got[row..], &want[row..], "none");
            }
        }
    }
}

#[test]
fn scatter_with_a_constant_index_outside_the_data_is_a_clear_error() {
    let c = Case {
        op: "ScatterElements",
        attrs: vec![i64_attr("axis", 1)],
        xs: vec![1, 3],
        is: vec![1, 1],
        us: Some(vec![1, 1]),
        const_idx: Some(&[3]),
        const_upd: None,
    };
    let e = c.run("bad", &[1.0, 2.0, 3.0], &[], &[5.0], 3).unwrap_err();
    assert!(e.contains("indices in -3..3") && e.contains('3'), "{e}");
}

#[test]
fn a_scatter_too_large_to_compose_is_a_blocker_not_an_allocation() {
    // Every element of a [1, 64, 64, 32] map written through index tuples at run time: the
    // one-hot pick would be 131,072 × 131,072 elements.
    let xs = [1usize, 64, 64, 32];
    let m: usize = xs.iter().product();
    let c = Case {
        op: "ScatterND",
        attrs: vec![],
        xs: xs.to_vec(),
        is: vec![m, 4],
        us: Some(vec![m]),
        const_idx: None,
        const_upd: None,
    };
    let e = c.run("huge", &vec![0.5; m], &[], &[], m).unwrap_err();
    assert!(e.contains("ScatterN") && e.contains("over the"), "{e}");
}

#[test]
fn a_constant_slice_assignment_gathers_instead_of_a_one_hot() {
    // `x[:, 8:40, 4:36, :] = u` written as every element's index tuple (the legacy exporter's
    // index_put; hf/longformer's chunked attention): 32,768 tuples into 131,072 rows, a one-hot
    // of 4.3·10^9 elements — a blocker before, now a Gather of the update rows. Reductions with
    // distinct places gather too.
    let xs = [1usize, 64, 64, 32];
    let (r0, r1) = (8..40, 4..36);
    let m = r0.len() * r1.len() * xs[3];
    let idx: Vec<i64> = r0
        .clone()
        .flat_map(|i| r1.clone().flat_map(move |j| (0..xs[3]).flat_map(move |k| [0, i as i64, j as i64, k as i64])))
        .collect();
    let mut rng = Rng::new(0x511CE);
    let x = rng.vec(xs.iter().product(), 2.0);
    let u = rng.vec(m, 2.0);
    for red in ["none", "add", "max"] {
        let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for (e, t) in idx.chunks(4).enumerate() {
            let k = ravel(&[0, t[1] as usize, t[2] as usize, t[3] as usize], &xs);
            want[k] = combine(red, want[k], u[e] as f64);
        }
        let c = Case {
            op: "ScatterND",
            attrs: vec![str_attr("reduction", red)],
            xs: xs.to_vec(),
            is: vec![r0.len(), r1.len(), xs[3], 4],
            us: Some(vec![r0.len(), r1.len(), xs[3]]),
            const_idx: Some(&idx),
            const_upd: None,
        };
        let name = format!("slice assignment, reduction {red}");
        for got in c.run(&format!("slice-{red}"), &x, &idx, &u, want.len()).unwrap_or_else(|e| panic!("{name}: {e}")) {
            check(&name, &got, &want, red);
        }
    }
}
