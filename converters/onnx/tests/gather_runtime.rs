//! ONNX Gather and GatherElements with indices known only at run time (a second graph input of
//! int64), and both with constant indices, on seeded random shapes and axes: the
//! converted model on the CPU and, when there is one, on the GPU, against a reference written
//! here (the indexing itself: exact). An index outside `0..N` at run time is a run-time error.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, ravel, unravel};
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, ConvertOptions};
use kestrel_rt_wgpu::GpuSession;
use proto::{float_value, i64_attr, i64_tensor, i64_value, Msg};

/// `op` over data `x [xs]` and indices `[is]` (a graph input, or an initializer holding `idx`).
fn model(op: &str, axis: usize, xs: &[usize], is: &[usize], constant: Option<&[i64]>) -> Vec<u8> {
    let node =
        Msg::default().str(1, "x").str(1, "i").str(2, "y").str(3, "g").str(4, op).msg(5, i64_attr("axis", axis as i64));
    let mut graph = Msg::default().msg(1, node).str(2, "g").msg(11, float_value("x", Some(xs)));
    match constant {
        Some(v) => graph = graph.msg(5, i64_tensor("i", is, v)),
        None => graph = graph.msg(11, i64_value("i", is)),
    }
    graph = graph.msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "gather_runtime.rs").msg(7, graph).0
}

fn run(name: &str, onnx: &[u8], x: &[f32], idx: Option<&[i64]>, n_out: usize) -> Result<Vec<Vec<f32>>, String> {
    let path = std::env::temp_dir().join(format!("kestrel-gather-{}-{name}.onnx", std::process::id()));
    std::fs::write(&path, onnx).unwrap();
    let conv = convert(&path, &ConvertOptions::default()).map_err(|e| e.to_string());
    std::fs::remove_file(&path).ok();
    let model = kestrel_rt::Model::from_bytes(&conv?.kes).unwrap();
    let mut inputs = vec![Input::F32(x)];
    if let Some(i) = idx {
        inputs.push(Input::I64(i));
    }
    let mut outs = Vec::new();
    let mut y = vec![0f32; n_out];
    model.session(1).unwrap().run(&inputs, &mut [&mut y]).map_err(|e| e.to_string())?;
    outs.push(y);
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

#[test]
fn gathers_with_run_time_indices_match_reference() {
    let mut rng = Rng::new(0x6A7E);
    for case in 0..24 {
        let rank = 1 + below(&mut rng, 3);
        // A leading 1 (the batch axis) and `rank` data axes.
        let xs: Vec<usize> = std::iter::once(1).chain((0..rank).map(|_| 1 + below(&mut rng, 5))).collect();
        let axis = 1 + below(&mut rng, rank);
        let n = xs[axis];
        let x: Vec<f32> = rng.vec(xs.iter().product(), 2.0);
        let elements = case % 2 == 1;
        let is: Vec<usize> = if elements {
            xs.iter().enumerate().map(|(a, &d)| if a == axis { 1 + below(&mut rng, 4) } else { d }).collect()
        } else {
            std::iter::once(1).chain((0..below(&mut rng, 2) + 1).map(|_| 1 + below(&mut rng, 3))).collect()
        };
        let idx: Vec<i64> = (0..is.iter().product::<usize>()).map(|_| below(&mut rng, n) as i64).collect();
        let (want, op): (Vec<f32>, &str) = if elements {
            let w = (0..idx.len())
                .map(|e| {
                    let mut at = unravel(e, &is);
                    at[axis] = idx[e] as usize;
                    x[ravel(&at, &xs)]
                })
                .collect();
            (w, "GatherElements")
        } else {
            // Output: xs[..axis] ++ is ++ xs[axis + 1..].
            let os: Vec<usize> = xs[..axis].iter().chain(&is).chain(&xs[axis + 1..]).copied().collect();
            let w = (0..os.iter().product::<usize>())
                .map(|e| {
                    let o = unravel(e, &os);
                    let k = ravel(&o[axis..axis + is.len()], &is);
                    let at: Vec<usize> = o[..axis]
                        .iter()
                        .copied()
                        .chain([idx[k] as usize])
                        .chain(o[axis + is.len()..].iter().copied())
                        .collect();
                    x[ravel(&at, &xs)]
                })
                .collect();
            (w, "Gather")
        };
        let name = format!("{case} {op} x {xs:?} axis {axis} indices {is:?}");
        let runtime = run(&format!("{case}"), &model(op, axis, &xs, &is, None), &x, Some(&idx), want.len());
        for got in runtime.unwrap_or_else(|e| panic!("{name}: {e}")) {
            assert_eq!(got, want, "{name}");
        }
        {
            // Constant indices, negative ones counted from the end.
            let neg: Vec<i64> = idx.iter().map(|&i| if i % 2 == 1 { i - n as i64 } else { i }).collect();
            let c = run(&format!("{case}c"), &model(op, axis, &xs, &is, Some(&neg)), &x, None, want.len());
            for got in c.unwrap_or_else(|e| panic!("{name} (constant): {e}")) {
                assert_eq!(got, want, "{name} (constant)");
            }
        }
        // An index past the axis is a run-time error, never a read out of bounds.
        let mut bad = idx.clone();
        bad[0] = n as i64;
        let e = run(&format!("{case}b"), &model(op, axis, &xs, &is, None), &x, Some(&bad), want.len()).unwrap_err();
        assert!(e.contains(&n.to_string()), "{name}: {e}");
    }
}

/// A constant Gather: a window (evenly spaced, increasing) stays the one-hot selection the fusion
/// passes make a `Slice`; any other selection (repeats, a reversal) is one Kestrel `Gather`, with
/// no one-hot weight; f32 indices the graph computed (an ArgMax's) read past either end.
#[test]
fn constant_selections_are_slices_or_one_gather() {
    let xs = [1usize, 6, 3];
    let x: Vec<f32> = (0..18).map(|v| v as f32).collect();
    for (idx, gather) in [(vec![1i64, 3, 5], false), (vec![4, -1, 0, 4], true), (vec![5, 4, 3, 2], true)] {
        let onnx = model("Gather", 1, &xs, &[idx.len()], Some(&idx));
        let path = std::env::temp_dir().join(format!("kestrel-gather-{}-sel{}.onnx", std::process::id(), idx.len()));
        std::fs::write(&path, &onnx).unwrap();
        let conv = convert(&path, &ConvertOptions::default()).unwrap();
        std::fs::remove_file(&path).ok();
        let ops = &conv.report.kestrel_ops;
        assert_eq!(ops.contains_key("Gather"), gather, "{idx:?}: {ops:?}");
        assert!(!ops.contains_key("Dense"), "{idx:?}: {ops:?}");
        let want: Vec<f32> =
            idx.iter().flat_map(|&i| (0..3).map(move |c| ((i.rem_euclid(6) as usize) * 3 + c) as f32)).collect();
        let y = run(&format!("sel{}", idx.len()), &onnx, &x, None, want.len()).unwrap();
        for got in y {
            assert_eq!(got, want, "{idx:?}");
        }
    }
}

/// A constant table of rank 1 to 4 gathered on any axis by indices known at run time: integer
/// ids fed as an input (an `Embedding` of the table with the axis moved first and the rest
/// flattened), and indices the graph computed as values (an f32 input cast to int64: the
/// one-hot pick). A mixture of experts gathers its `[E, D, F]` expert weights by the routed
/// expert this way (hf/openai_privacy_filter: "gather on axis 0 of a rank-3 table").
#[test]
fn constant_tables_of_any_rank_gathered_on_any_axis_match_reference() {
    let mut rng = Rng::new(0x7AB1E);
    let cases: [(&[usize], usize, &[usize]); 6] = [
        (&[5], 0, &[3]),
        (&[4, 3, 2], 0, &[2]),
        (&[4, 3, 2], 1, &[2, 2]),
        (&[2, 5, 3], 2, &[4]),
        (&[3, 2, 4, 2], 2, &[3]),
        (&[6, 2, 3], 0, &[1, 3]),
    ];
    for (case, &(ts, axis, is)) in cases.iter().enumerate() {
        let n: usize = ts.iter().product();
        let table: Vec<f32> = (0..n).map(|_| rng.uniform() * 4.0).collect();
        let k: usize = is.iter().product();
        let idx: Vec<i64> = (0..k).map(|_| below(&mut rng, ts[axis]) as i64).collect();
        let out: Vec<usize> = ts[..axis].iter().chain(is).chain(&ts[axis + 1..]).copied().collect();
        let want: Vec<f32> = (0..out.iter().product::<usize>())
            .map(|o| {
                let c = unravel(o, &out);
                let j = ravel(&c[axis..axis + is.len()], is);
                let src: Vec<usize> = c[..axis]
                    .iter()
                    .copied()
                    .chain([idx[j] as usize])
                    .chain(c[axis + is.len()..].iter().copied())
                    .collect();
                table[ravel(&src, ts)]
            })
            .collect();
        for computed in [false, true] {
            // Gather(t, i) with i an int64 input, or Cast(x f32 → int64) first.
            let gather = Msg::default()
                .str(1, "t")
                .str(1, "i")
                .str(2, "y")
                .str(3, "g")
                .str(4, "Gather")
                .msg(5, i64_attr("axis", axis as i64));
            let mut graph = Msg::default();
            if computed {
                let cast = Msg::default().str(1, "x").str(2, "i").str(3, "c").str(4, "Cast").msg(5, i64_attr("to", 7));
                graph = graph.msg(1, cast).msg(1, gather).str(2, "g").msg(11, float_value("x", Some(is)));
            } else {
                graph = graph.msg(1, gather).str(2, "g").msg(11, i64_value("i", is));
            }
            graph = graph.msg(5, proto::f32_tensor("t", ts, &table)).msg(12, float_value("y", None));
            let onnx =
                Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "gather_runtime.rs").msg(7, graph).0;
            let path = std::env::temp_dir()
                .join(format!("kestrel-gather-table-{}-{case}-{computed}.onnx", std::process::id()));
            std::fs::write(&path, &onnx).unwrap();
            let conv = convert(&path, &ConvertOptions::default());
            std::fs::remove_file(&path).ok();
            let model =
                kestrel_rt::Model::from_bytes(&conv.unwrap_or_else(|e| panic!("case {case}: {e}")).kes).unwrap();
            let xf: Vec<f32> = idx.iter().map(|&v| v as f32).collect();
            let inputs = if computed { [Input::F32(&xf)] } else { [Input::I64(&idx)] };
            let mut y = vec![0f32; want.len()];
            model.session(1).unwrap().run(&inputs, &mut [&mut y]).unwrap();
            assert_eq!(y, want, "case {case} ({ts:?} axis {axis}, computed {computed}) on the CPU");
            if let Some(ctx) = gpu() {
                let cpu = model.cpu().unwrap();
                let mut g = vec![0f32; want.len()];
                GpuSession::new(&ctx, &cpu, 1).and_then(|mut s| s.run(&inputs, &mut [g.as_mut_slice()])).unwrap();
                assert_eq!(g, want, "case {case} ({ts:?} axis {axis}, computed {computed}) on wgpu");
            }
        }
    }
}
