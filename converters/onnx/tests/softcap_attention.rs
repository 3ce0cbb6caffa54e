//! ONNX Attention with `softcap` (opset 23: `c · tanh(s / c)` on the scaled scores, before the
//! mask), which tract's importer refuses: the converter takes the cap off before tract reads
//! the node and puts it back in the expansion, and the `Sdpa` fusion takes the block back as
//! one node with the cap. Grouped-query 4-D attention with an additive mask (one row fully
//! masked: a zero row; fused), 3-D attention with head counts, a scale and a negative cap (no cap,
//! as the onnx reference and onnxruntime read it; a form the fusion leaves as the expansion), each against an f64 reference on seeded random inputs, on the CPU and
//! (where there is one) the GPU; a cap that is not a number is refused by name.

use crate::common;

use crate::proto;

use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{float_attr, float_value, i64_attr, Msg};

/// One Attention node over graph inputs `q`, `k`, `v` and, when `mask` is given, an additive
/// `attn_mask` of that shape, with `attrs`, writing `y`.
fn attention_model(q: &[usize], k: &[usize], v: &[usize], mask: Option<&[usize]>, attrs: Vec<Msg>) -> Vec<u8> {
    let mut node = Msg::default().str(1, "q").str(1, "k").str(1, "v");
    if mask.is_some() {
        node = node.str(1, "mask");
    }
    node = node.str(2, "y").str(3, "attn").str(4, "Attention");
    for a in attrs {
        node = node.msg(5, a);
    }
    let mut graph = Msg::default().msg(1, node).str(2, "g");
    graph =
        graph.msg(11, float_value("q", Some(q))).msg(11, float_value("k", Some(k))).msg(11, float_value("v", Some(v)));
    if let Some(m) = mask {
        graph = graph.msg(11, float_value("mask", Some(m)));
    }
    graph = graph.msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 23)).str(2, "test").msg(7, graph).0
}

/// `y[h, i] = Σ_j softmax_j(c · tanh(scale · q[h, i] · k[h', j] / c) + mask[i, j]) v[h', j]`
/// (`h' = h / (Hq / Hk)`), per head `[Hq, T, D]` against `[Hk, S, D]`; a row masked entirely
/// (−∞) is zeros.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    (hq, hk, t, s, d, dv): (usize, usize, usize, usize, usize, usize),
    scale: f64,
    c: f64,
) -> Vec<f64> {
    let mut y = vec![0f64; hq * t * dv];
    for h in 0..hq {
        let g = h / (hq / hk);
        for i in 0..t {
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    let dot: f64 =
                        (0..d).map(|e| f64::from(q[(h * t + i) * d + e]) * f64::from(k[(g * s + j) * d + e])).sum();
                    let x = scale * dot;
                    let capped = if c > 0.0 { c * (x / c).tanh() } else { x };
                    capped + mask.map_or(0.0, |m| f64::from(m[i * s + j]))
                })
                .collect();
            let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if mx == f64::NEG_INFINITY {
                continue;
            }
            let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
            let total: f64 = w.iter().sum();
            for (j, wj) in w.iter().enumerate() {
                for e in 0..dv {
                    y[(h * t + i) * dv + e] += wj / total * f64::from(v[(g * s + j) * dv + e]);
                }
            }
        }
    }
    y
}

fn ops_of(name: &str, onnx: &[u8]) -> Result<std::collections::BTreeMap<String, usize>, String> {
    let path = std::env::temp_dir().join(format!("kestrel-softcap-{}-{name}.onnx", std::process::id()));
    std::fs::write(&path, onnx).map_err(|e| e.to_string())?;
    let conv = kestrel_rt_onnx::convert(&path, &kestrel_rt_onnx::ConvertOptions::default()).map_err(|e| e.to_string());
    std::fs::remove_file(&path).ok();
    Ok(conv?.report.kestrel_ops.into_iter().collect())
}

fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    assert!(want.iter().any(|v| *v != 0.0), "{what}: reference all zeros");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let err = got.iter().zip(want).fold(0f64, |m, (g, w)| m.max((f64::from(*g) - w).abs()));
    assert!(err <= 1e-5 * scale, "{what}: max error {err} of {scale}");
}

/// 4-D grouped-query attention (4 query heads over 2 key heads), an additive `[1, 1, T, S]`
/// mask with row 1 masked entirely and a third of the rest masked, the default scale, cap 1.5.
#[test]
fn grouped_4d_attention_with_a_soft_cap_and_a_mask() {
    let (hq, hk, t, s, d, dv) = (4usize, 2usize, 5usize, 6usize, 8usize, 7usize);
    let c = 1.5f32;
    let onnx = attention_model(
        &[1, hq, t, d],
        &[1, hk, s, d],
        &[1, hk, s, dv],
        Some(&[1, 1, t, s]),
        vec![float_attr("softcap", c)],
    );
    let ops = ops_of("gqa4d", &onnx).unwrap();
    assert_eq!(ops.get("Sdpa"), Some(&1), "{ops:?}");
    assert!(!ops.contains_key("Softmax") && !ops.contains_key("Unary"), "{ops:?}");
    let mut rng = Rng::new(41);
    let (q, k, v) = (rng.vec(hq * t * d, 2.0), rng.vec(hk * s * d, 2.0), rng.vec(hk * s * dv, 2.0));
    let mask: Vec<f32> = (0..t * s)
        .map(|f| {
            let (i, j) = (f / s, f % s);
            let r = rng.uniform();
            if i == 1 || (j > 0 && r < -1.0 / 3.0) {
                f32::NEG_INFINITY
            } else {
                r
            }
        })
        .collect();
    let want = reference(&q, &k, &v, Some(&mask), (hq, hk, t, s, d, dv), 1.0 / (d as f64).sqrt(), f64::from(c));
    assert!(want[dv..2 * dv].iter().all(|v| *v == 0.0));
    let inputs = [Input::F32(&q), Input::F32(&k), Input::F32(&v), Input::F32(&mask)];
    let outs = common::convert_and_run("gqa4d", &onnx, &inputs, hq * t * dv).unwrap();
    for (b, got) in outs.iter().enumerate() {
        assert_close(&format!("backend {b}"), got, &want);
    }
}

/// 3-D multi-query attention (`[B, T, H·D]` with `q_num_heads`, `kv_num_heads`), a given scale
/// and a negative cap, which caps nothing (the onnx reference and onnxruntime apply a cap only
/// where it is positive), no mask.
#[test]
fn attention_3d_with_a_scale_and_a_negative_cap() {
    let (hq, hk, t, s, d, dv) = (2usize, 1usize, 4usize, 4usize, 6usize, 5usize);
    let (scale, c) = (0.7f32, -2.0f32);
    let onnx = attention_model(
        &[1, t, hq * d],
        &[1, s, hk * d],
        &[1, s, hk * dv],
        None,
        vec![
            float_attr("softcap", c),
            float_attr("scale", scale),
            i64_attr("q_num_heads", 2),
            i64_attr("kv_num_heads", 1),
        ],
    );
    // (This form stays unfused with or without a cap, "the weights are not the left factor of a
    // plain product with values": it checks the expansion itself, op by op.)
    ops_of("mqa3d", &onnx).unwrap();
    let mut rng = Rng::new(43);
    let (q, k, v) = (rng.vec(t * hq * d, 2.0), rng.vec(s * hk * d, 2.0), rng.vec(s * hk * dv, 2.0));
    // Heads first for the reference: [T, H, D] -> [H, T, D].
    let heads = |x: &[f32], n: usize, h: usize, w: usize| -> Vec<f32> {
        (0..h * n * w).map(|f| x[((f / w) % n * h + f / (n * w)) * w + f % w]).collect()
    };
    let want_h = reference(
        &heads(&q, t, hq, d),
        &heads(&k, s, hk, d),
        &heads(&v, s, hk, dv),
        None,
        (hq, hk, t, s, d, dv),
        f64::from(scale),
        f64::from(c),
    );
    // Back to [T, Hq·Dv].
    let want: Vec<f64> =
        (0..t * hq * dv).map(|f| want_h[((f % (hq * dv)) / dv * t + f / (hq * dv)) * dv + f % dv]).collect();
    let inputs = [Input::F32(&q), Input::F32(&k), Input::F32(&v)];
    let outs = common::convert_and_run("mqa3d", &onnx, &inputs, t * hq * dv).unwrap();
    for (b, got) in outs.iter().enumerate() {
        assert_close(&format!("backend {b}"), got, &want);
    }
}

/// A cap that is not a finite number is refused by name, never run.
#[test]
fn a_cap_that_is_not_a_number_is_refused() {
    let onnx =
        attention_model(&[1, 2, 3, 4], &[1, 2, 3, 4], &[1, 2, 3, 4], None, vec![float_attr("softcap", f32::NAN)]);
    let err = ops_of("nan", &onnx).unwrap_err();
    assert!(err.contains("softcap") && err.contains("attn"), "{err}");
}
