//! ONNX TopK (values and indices, largest and smallest, any axis, ties) on seeded random
//! shapes with repeated values: the converted model on the CPU and, when there is one, on the
//! GPU, against a reference written here (a stable sort: equal values in index order).

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, ravel, unravel};
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, ConvertOptions};
use kestrel_rt_wgpu::GpuSession;
use proto::{float_value, i64_attr, i64_tensor, Msg};

fn model(xs: &[usize], axis: usize, k: usize, largest: bool) -> Vec<u8> {
    let node = Msg::default()
        .str(1, "x")
        .str(1, "k")
        .str(2, "values")
        .str(2, "indices")
        .str(3, "t")
        .str(4, "TopK")
        .msg(5, i64_attr("axis", axis as i64))
        .msg(5, i64_attr("largest", i64::from(largest)));
    let graph = Msg::default()
        .msg(1, node)
        .str(2, "g")
        .msg(5, i64_tensor("k", &[1], &[k as i64]))
        .msg(11, float_value("x", Some(xs)))
        .msg(12, float_value("values", None))
        .msg(12, float_value("indices", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "topk.rs").msg(7, graph).0
}

#[test]
fn topk_matches_a_stable_sort() {
    let mut rng = Rng::new(0x70C4);
    for case in 0..24 {
        let rank = 1 + below(&mut rng, 3);
        let xs: Vec<usize> = std::iter::once(1).chain((0..rank).map(|_| 1 + below(&mut rng, 6))).collect();
        let axis = 1 + below(&mut rng, rank);
        let n = xs[axis];
        let k = 1 + below(&mut rng, n);
        let largest = case % 2 == 0;
        // Few distinct values, so ties are common; ±0 and a negative scale.
        let x: Vec<f32> = (0..xs.iter().product()).map(|_| (below(&mut rng, 5) as f32 - 2.0) * 0.75).collect();
        let mut os = xs.clone();
        os[axis] = k;
        let count: usize = os.iter().product();
        let (mut values, mut indices) = (vec![0f32; count], vec![0f32; count]);
        for e in 0..count {
            let at = unravel(e, &os);
            let mut order: Vec<usize> = (0..n).collect();
            let key = |i: usize| {
                let mut p = at.clone();
                p[axis] = i;
                x[ravel(&p, &xs)]
            };
            // A stable sort keeps equal values in index order, as ONNX asks.
            order.sort_by(|&a, &b| {
                let (va, vb) = (key(a), key(b));
                if largest {
                    vb.partial_cmp(&va).unwrap()
                } else {
                    va.partial_cmp(&vb).unwrap()
                }
            });
            let i = order[at[axis]];
            values[e] = key(i);
            indices[e] = i as f32;
        }
        let name = format!("{case}: TopK x {xs:?} axis {axis} k {k} largest {largest}");
        let path = std::env::temp_dir().join(format!("kestrel-topk-{}-{case}.onnx", std::process::id()));
        std::fs::write(&path, model(&xs, axis, k, largest)).unwrap();
        let conv = convert(&path, &ConvertOptions::default());
        std::fs::remove_file(&path).ok();
        let m = kestrel_rt::Model::from_bytes(&conv.unwrap_or_else(|e| panic!("{name}: {e}")).kes).unwrap();
        let (mut v, mut i) = (vec![0f32; count], vec![0f32; count]);
        m.session(1).unwrap().run(&[Input::F32(&x)], &mut [&mut v, &mut i]).unwrap();
        assert_eq!((&v, &i), (&values, &indices), "{name} (CPU)");
        if let Some(ctx) = gpu() {
            let cpu = m.cpu().unwrap();
            let (mut v, mut i) = (vec![0f32; count], vec![0f32; count]);
            GpuSession::new(&ctx, &cpu, 1)
                .and_then(|mut s| s.run(&[Input::F32(&x)], &mut [v.as_mut_slice(), i.as_mut_slice()]))
                .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
            assert_eq!((&v, &i), (&values, &indices), "{name} (GPU)");
        }
    }
}
