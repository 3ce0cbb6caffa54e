//! ONNX MatMul with numpy broadcasting of the batch axes, both operands broadcasting (ONNX's
//! `test_matmul_bcast`: `[3, 1, 3, 4] · [1, 2, 4, 2] → [3, 2, 3, 2]`, which the lowering once
//! sized by the left operand's unit axis), against an f64 reference: the right operand a
//! constant (a Dense or a MatMul against a weight) or a second graph input (a MatMul of two
//! activations), over seeded random shapes of rank 2 to 4 on each side.

use crate::arrays;
use crate::proto;

use arrays::below;
use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{convert, verify, ConvertOptions, InputTensor};
use proto::{f32_tensor, float_value, Msg};

/// numpy `matmul` in f64 for operands of rank ≥ 2: the batch axes broadcast.
fn reference(a: &[f32], sa: &[usize], b: &[f32], sb: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
    let rank = sa.len().max(sb.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        std::iter::repeat_n(1, rank - s.len()).chain(s[..s.len() - 2].iter().copied()).collect()
    };
    let (ba, bb) = (pad(sa), pad(sb));
    let bo: Vec<usize> = ba.iter().zip(&bb).map(|(&x, &y)| x.max(y)).collect();
    let count: usize = bo.iter().product();
    let mut y = Vec::with_capacity(count * m * n);
    for g in 0..count {
        // The batch index in each operand (a unit axis reads index 0).
        let (mut ia, mut ib, mut rest) = (0, 0, g);
        let mut idx = vec![0; rank - 2];
        for d in (0..rank - 2).rev() {
            idx[d] = rest % bo[d];
            rest /= bo[d];
        }
        for d in 0..rank - 2 {
            ia = ia * ba[d] + if ba[d] == 1 { 0 } else { idx[d] };
            ib = ib * bb[d] + if bb[d] == 1 { 0 } else { idx[d] };
        }
        for i in 0..m {
            for j in 0..n {
                let s: f64 =
                    (0..k).map(|t| f64::from(a[ia * m * k + i * k + t]) * f64::from(b[ib * k * n + t * n + j])).sum();
                y.push(s);
            }
        }
    }
    let shape = bo.into_iter().chain([m, n]).collect();
    (y, shape)
}

fn model(sa: &[usize], sb: &[usize], b: Option<&[f32]>) -> Vec<u8> {
    let node = Msg::default().str(1, "a").str(1, "b").str(2, "y").str(3, "mm").str(4, "MatMul");
    let mut graph = Msg::default().msg(1, node).str(2, "g").msg(11, float_value("a", Some(sa)));
    match b {
        Some(v) => graph = graph.msg(5, f32_tensor("b", sb, v)),
        None => graph = graph.msg(11, float_value("b", Some(sb))),
    }
    graph = graph.msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 17)).str(2, "matmul_broadcast.rs").msg(7, graph).0
}

#[test]
fn broadcast_matmul_matches_reference() {
    let mut rng = Rng::new(0x0B_CA57);
    let mut shapes: Vec<(Vec<usize>, Vec<usize>)> = vec![(vec![3, 1, 3, 4], vec![1, 2, 4, 2])];
    for _ in 0..30 {
        let (m, k, n) = (1 + below(&mut rng, 4), 1 + below(&mut rng, 5), 1 + below(&mut rng, 4));
        let (ra, rb) = (2 + below(&mut rng, 3), 2 + below(&mut rng, 3));
        let rank = ra.max(rb);
        // Batch axes: each 1 on one side, the same length on both, or 1 on both.
        let full: Vec<usize> = (0..rank - 2).map(|_| 1 + below(&mut rng, 3)).collect();
        let side = |r: usize, rng: &mut Rng| -> Vec<usize> {
            full[rank - r..].iter().map(|&d| if below(rng, 3) == 0 { 1 } else { d }).collect()
        };
        let mut sa = side(ra, &mut rng);
        sa.extend([m, k]);
        let mut sb = side(rb, &mut rng);
        sb.extend([k, n]);
        shapes.push((sa, sb));
    }
    for (case, (sa, sb)) in shapes.iter().enumerate() {
        let a: Vec<f32> = rng.vec(sa.iter().product(), 1.0);
        let b: Vec<f32> = rng.vec(sb.iter().product(), 1.0);
        let (want, shape) = reference(&a, sa, &b, sb);
        for constant in [true, false] {
            let path =
                std::env::temp_dir().join(format!("kestrel-mm-bcast-{}-{case}-{constant}.onnx", std::process::id()));
            std::fs::write(&path, model(sa, sb, constant.then_some(&b[..]))).unwrap();
            let mut feeds = vec![InputTensor::f32(sa, a.clone())];
            if !constant {
                feeds.push(InputTensor::f32(sb, b.clone()));
            }
            let r = convert(&path, &ConvertOptions::default())
                .map_err(|e| e.to_string())
                .and_then(|c| verify(&path, &c.kes, &feeds).map_err(|e| e.to_string()));
            std::fs::remove_file(&path).ok();
            let what = format!("{sa:?} · {sb:?} → {shape:?} (b constant: {constant})");
            let v = r.unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = &v.kestrel[0];
            assert_eq!(got.len(), want.len(), "{what}: output length");
            let scale = want.iter().fold(1e-6f64, |s, v| s.max(v.abs()));
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!((f64::from(g) - w).abs() <= 1e-5 * scale + 1e-5 * w.abs(), "{what}: element {i}: {g} vs {w}");
            }
        }
    }
}
