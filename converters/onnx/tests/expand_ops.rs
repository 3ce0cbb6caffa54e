//! The ONNX ops tract's importer has no parser for, expanded by the converter
//! (`src/expand/`): Col2Im, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, CumProd, LpPool,
//! CenterCropPad, SwiGLU, Upsample, ReverseSequence, AffineGrid, MaxUnpool, CausalConvWithState,
//! TensorScatter and Det. Each is built as a one-node model over random (never zero) inputs in
//! several geometries and attribute settings, converted, run on the CPU and, when there is one,
//! the GPU, and held against its definition written here in f64 (onnx's reference
//! implementation, read op by op).

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::{below, ravel, unravel};
use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{
    f32_tensor, float_attr, float_value, i64_attr, i64_tensor, i64_value, i64s_attr, one_node_model, str_attr, Msg,
};

/// Largest error allowed against the f64 definition, relative to `max(1, |want|)`.
const TOL: f64 = 1e-4;

/// Random values in `[lo, hi)`, none zero.
fn values(rng: &mut Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let v = lo + (rng.uniform() + 1.0) * 0.5 * (hi - lo);
            if v == 0.0 {
                0.25
            } else {
                v
            }
        })
        .collect()
}

/// A node `op` reading `inputs`, writing `y`, with `attrs`.
fn node(op: &str, inputs: &[&str], attrs: Vec<Msg>) -> Msg {
    let mut n = Msg::default();
    for i in inputs {
        n = n.str(1, i);
    }
    n = n.str(2, "y").str(3, "n").str(4, op);
    attrs.into_iter().fold(n, |n, a| n.msg(5, a))
}

/// Checks every backend's output against `want`.
fn check(what: &str, got: Result<Vec<Vec<f32>>, String>, want: &[f64]) {
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    for (backend, y) in got.iter().enumerate() {
        assert_eq!(y.len(), want.len(), "{what}, backend {backend}: output size");
        for (i, (&g, &w)) in y.iter().zip(want).enumerate() {
            let err = (g as f64 - w).abs() / w.abs().max(1.0);
            assert!(err <= TOL, "{what}, backend {backend}: element {i} is {g}, expected {w} (error {err:.2e})");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Col2Im

/// Col2Im in f64: each column `c·K + j` (block offset `j` of channel `c`) at block `l` added at
/// `block_index · stride + offset · dilation − pad_before` when inside the image.
#[allow(clippy::too_many_arguments)]
fn col2im_ref(
    x: &[f32],
    c: usize,
    image: &[usize],
    block: &[usize],
    dil: &[usize],
    pads: &[usize],
    strides: &[usize],
    blocks: &[usize],
) -> Vec<f64> {
    let d = image.len();
    let k: usize = block.iter().product();
    let l: usize = blocks.iter().product();
    let img: usize = image.iter().product();
    let mut y = vec![0f64; c * img];
    for ch in 0..c {
        for j in 0..k {
            let off = unravel(j, block);
            for b in 0..l {
                let bi = unravel(b, blocks);
                let pos: Vec<i64> =
                    (0..d).map(|a| (bi[a] * strides[a] + off[a] * dil[a]) as i64 - pads[a] as i64).collect();
                if pos.iter().zip(image).all(|(&p, &n)| p >= 0 && (p as usize) < n) {
                    let p: Vec<usize> = pos.iter().map(|&p| p as usize).collect();
                    y[ch * img + ravel(&p, image)] += x[(ch * k + j) * l + b] as f64;
                }
            }
        }
    }
    y
}

#[test]
fn col2im_matches_the_definition() {
    let mut rng = Rng::new(0xC011);
    // (channels, image, block, dilations, pads [before…, after…], strides)
    #[allow(clippy::type_complexity)]
    let cases: [(usize, &[usize], &[usize], &[usize], &[usize], &[usize]); 7] = [
        // timm VOLO's outlook attention: 3×3 blocks, stride 2, padding 1.
        (4, &[12, 12], &[3, 3], &[1, 1], &[1, 1, 1, 1], &[2, 2]),
        (1, &[5, 5], &[1, 5], &[1, 1], &[0, 0, 0, 0], &[1, 1]),
        (2, &[6, 6], &[2, 2], &[1, 5], &[0, 0, 0, 0], &[1, 1]),
        (3, &[5, 5], &[1, 5], &[1, 1], &[0, 1, 0, 1], &[1, 1]),
        // The last image row past the last block (an output padding of 1).
        (2, &[7, 8], &[2, 3], &[1, 1], &[0, 1, 0, 0], &[2, 2]),
        (2, &[9], &[3], &[2], &[1, 2], &[3]),
        (2, &[3, 4, 5], &[1, 2, 2], &[1, 1, 1], &[0, 0, 1, 0, 0, 1], &[1, 2, 1]),
    ];
    for (case, &(c, image, block, dil, pads, strides)) in cases.iter().enumerate() {
        let d = image.len();
        let blocks: Vec<usize> =
            (0..d).map(|a| (image[a] + pads[a] + pads[d + a] - dil[a] * (block[a] - 1) - 1) / strides[a] + 1).collect();
        let k: usize = block.iter().product();
        let l: usize = blocks.iter().product();
        let shape = [1, c * k, l];
        let x = values(&mut rng, c * k * l, -1.0, 1.0);
        let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        let attrs = vec![
            i64s_attr("dilations", &as_i64(dil)),
            i64s_attr("pads", &as_i64(pads)),
            i64s_attr("strides", &as_i64(strides)),
        ];
        let inits =
            vec![i64_tensor("image_shape", &[d], &as_i64(image)), i64_tensor("block_shape", &[d], &as_i64(block))];
        let onnx = one_node_model(node("Col2Im", &["x", "image_shape", "block_shape"], attrs), &shape, inits, 18, "t");
        let want = col2im_ref(&x, c, image, block, dil, pads, strides, &blocks);
        check(
            &format!("col2im case {case}"),
            convert_and_run(&format!("col2im-{case}"), &onnx, &[Input::F32(&x)], want.len()),
            &want,
        );
    }
}

#[test]
fn col2im_refuses_malformed_geometry() {
    let x = vec![0.5f32; 9 * 4];
    // (image_shape, block_shape, attributes, what the error says)
    type Bad<'a> = (&'a [i64], &'a [i64], Vec<Msg>, &'a str);
    let bad: [Bad; 3] = [
        (&[5, 5], &[3, 3], vec![i64s_attr("strides", &[2])], "strides has 1 values"),
        (&[5, 5], &[3, 3], vec![i64s_attr("dilations", &[0, 1])], "dilations holds 0"),
        (&[5, 5], &[3], vec![], "block_shape 1"),
    ];
    for (image, block, attrs, want) in bad {
        let inits =
            vec![i64_tensor("image_shape", &[image.len()], image), i64_tensor("block_shape", &[block.len()], block)];
        let onnx =
            one_node_model(node("Col2Im", &["x", "image_shape", "block_shape"], attrs), &[1, 9, 4], inits, 18, "t");
        let err =
            convert_and_run("col2im-bad", &onnx, &[Input::F32(&x)], 25).expect_err("a malformed Col2Im converted");
        assert!(err.contains(want), "error `{err}` does not say `{want}`");
    }
}

// ---------------------------------------------------------------------------------------------
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss

/// The loss in f64 over scores `x [N, C, D]` (D the trailing axes flattened) at targets `t [N, D]`.
fn nll_ref(
    x: &[f64],
    (n, c, dd): (usize, usize, usize),
    t: &[i64],
    w: Option<&[f32]>,
    ii: Option<i64>,
    reduction: &str,
) -> Vec<f64> {
    let mut loss = vec![0f64; n * dd];
    let mut total = 0f64;
    for i in 0..n {
        for d in 0..dd {
            let tv = t[i * dd + d];
            if Some(tv) == ii {
                continue;
            }
            let wt = w.map_or(1.0, |w| w[tv as usize] as f64);
            loss[i * dd + d] = -x[(i * c + tv as usize) * dd + d] * wt;
            total += wt;
        }
    }
    match reduction {
        "none" => loss,
        "sum" => vec![loss.iter().sum()],
        _ => vec![loss.iter().sum::<f64>() / total],
    }
}

/// `log_softmax` over axis 1 of `[N, C, D]` in f64.
fn log_softmax(x: &[f32], n: usize, c: usize, dd: usize) -> Vec<f64> {
    let mut y = vec![0f64; x.len()];
    for i in 0..n {
        for d in 0..dd {
            let at = |k: usize| (i * c + k) * dd + d;
            let m = (0..c).map(|k| x[at(k)] as f64).fold(f64::MIN, f64::max);
            let s: f64 = (0..c).map(|k| (x[at(k)] as f64 - m).exp()).sum();
            for k in 0..c {
                y[at(k)] = x[at(k)] as f64 - m - s.ln();
            }
        }
    }
    y
}

#[test]
fn losses_match_the_definition() {
    let mut rng = Rng::new(0x1055);
    let shapes: [&[usize]; 4] = [&[3, 5], &[2, 4, 3], &[2, 3, 2, 3], &[1, 6, 4]];
    let mut case = 0;
    for shape in shapes {
        for reduction in ["none", "sum", "mean"] {
            for (weighted, ii) in [(false, None), (true, None), (false, Some(1i64)), (true, Some(-1)), (true, Some(2))]
            {
                for sce in [false, true] {
                    case += 1;
                    let (n, c) = (shape[0], shape[1]);
                    let dd: usize = shape[2..].iter().product();
                    let x = values(&mut rng, n * c * dd, -2.0, 2.0);
                    let mut t: Vec<i64> = (0..n * dd).map(|_| below(&mut rng, c) as i64).collect();
                    // Some targets ignored (always one kept, so a mean is defined).
                    if let Some(ii) = ii {
                        for v in t.iter_mut().skip(1).step_by(3) {
                            *v = ii;
                        }
                    }
                    let w = values(&mut rng, c, 0.2, 1.5);
                    let mut tshape = vec![n];
                    tshape.extend(&shape[2..]);
                    let mut inits = vec![i64_tensor("t", &tshape, &t)];
                    let mut ins = vec!["x", "t"];
                    if weighted {
                        inits.push(f32_tensor("w", &[c], &w));
                        ins.push("w");
                    }
                    let mut attrs = vec![str_attr("reduction", reduction)];
                    if let Some(ii) = ii {
                        attrs.push(i64_attr("ignore_index", ii));
                    }
                    let op = if sce { "SoftmaxCrossEntropyLoss" } else { "NegativeLogLikelihoodLoss" };
                    let onnx = one_node_model(node(op, &ins, attrs), shape, inits, 13, "t");
                    let xs = if sce { log_softmax(&x, n, c, dd) } else { x.iter().map(|&v| v as f64).collect() };
                    let want = nll_ref(&xs, (n, c, dd), &t, weighted.then_some(&w[..]), ii, reduction);
                    let what = format!("{op} {shape:?} {reduction} weighted {weighted} ignore {ii:?}");
                    check(&what, convert_and_run(&format!("loss-{case}"), &onnx, &[Input::F32(&x)], want.len()), &want);
                }
            }
        }
    }
}

/// A model with scores `x` and targets `t` both graph inputs (targets computed at run time).
fn two_input_model(node: Msg, x_shape: &[usize], t_shape: &[usize], opset: i64) -> Vec<u8> {
    let graph = Msg::default()
        .msg(1, node)
        .str(2, "g")
        .msg(11, float_value("x", Some(x_shape)))
        .msg(11, i64_value("t", t_shape))
        .msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, opset)).str(2, "t").msg(7, graph).0
}

#[test]
fn losses_take_targets_at_run_time() {
    let mut rng = Rng::new(0x1056);
    let (n, c, dd) = (3usize, 5usize, 4usize);
    for (k, (op, reduction)) in
        [("NegativeLogLikelihoodLoss", "mean"), ("SoftmaxCrossEntropyLoss", "none"), ("SoftmaxCrossEntropyLoss", "sum")]
            .into_iter()
            .enumerate()
    {
        let x = values(&mut rng, n * c * dd, -2.0, 2.0);
        let mut t: Vec<i64> = (0..n * dd).map(|_| below(&mut rng, c) as i64).collect();
        t[2] = 3;
        t[5] = 3;
        let attrs = vec![str_attr("reduction", reduction), i64_attr("ignore_index", 3)];
        let onnx = two_input_model(node(op, &["x", "t"], attrs), &[n, c, dd], &[n, dd], 13);
        let xs =
            if op.starts_with("Softmax") { log_softmax(&x, n, c, dd) } else { x.iter().map(|&v| v as f64).collect() };
        let want = nll_ref(&xs, (n, c, dd), &t, None, Some(3), reduction);
        let got = convert_and_run(&format!("loss-rt-{k}"), &onnx, &[Input::F32(&x), Input::I64(&t)], want.len());
        check(&format!("{op} {reduction}, run-time targets"), got, &want);
    }
}

// ---------------------------------------------------------------------------------------------
// CumProd, LpPool, CenterCropPad, SwiGLU, Upsample, ReverseSequence

#[test]
fn cumprod_matches_the_definition() {
    let mut rng = Rng::new(0xC0F0);
    let shape = [2usize, 3, 9];
    let n: usize = shape.iter().product();
    for axis in [0i64, 1, 2, -1] {
        for exclusive in [false, true] {
            for reverse in [false, true] {
                // Magnitudes around 1, both signs: the product neither vanishes nor explodes.
                let x: Vec<f32> = values(&mut rng, n, 0.6, 1.6)
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| if i % 4 == 1 { -v } else { v })
                    .collect();
                let a = if axis < 0 { (axis + 3) as usize } else { axis as usize };
                let mut want = vec![0f64; n];
                for (i, w) in want.iter_mut().enumerate() {
                    let idx = unravel(i, &shape);
                    let mut p = 1f64;
                    for j in 0..shape[a] {
                        let take = match (reverse, exclusive) {
                            (false, false) => j <= idx[a],
                            (false, true) => j < idx[a],
                            (true, false) => j >= idx[a],
                            (true, true) => j > idx[a],
                        };
                        if take {
                            let mut s = idx.clone();
                            s[a] = j;
                            p *= x[ravel(&s, &shape)] as f64;
                        }
                    }
                    *w = p;
                }
                let attrs = vec![i64_attr("exclusive", exclusive as i64), i64_attr("reverse", reverse as i64)];
                let onnx = one_node_model(
                    node("CumProd", &["x", "axis"], attrs),
                    &shape,
                    vec![i64_tensor("axis", &[], &[axis])],
                    26,
                    "t",
                );
                let what = format!("CumProd axis {axis} exclusive {exclusive} reverse {reverse}");
                check(&what, convert_and_run("cumprod", &onnx, &[Input::F32(&x)], n), &want);
            }
        }
    }
}

#[test]
fn lp_pool_matches_the_definition() {
    let mut rng = Rng::new(0x1900);
    let shape = [1usize, 2, 7, 6];
    let x = values(&mut rng, 84, -2.0, 2.0);
    // (p, kernel, strides, dilations, pads [top, left, bottom, right])
    type Case = (i64, [usize; 2], [usize; 2], [usize; 2], [usize; 4]);
    let cases: [Case; 5] = [
        (2, [2, 2], [1, 1], [1, 1], [0; 4]),
        (3, [3, 2], [2, 1], [1, 1], [1, 0, 1, 1]),
        (1, [2, 3], [1, 2], [2, 1], [0; 4]),
        (4, [3, 3], [2, 2], [1, 1], [2, 2, 2, 2]),
        (3, [2, 2], [3, 3], [2, 2], [0, 1, 1, 0]),
    ];
    for (case, &(p, k, s, d, pads)) in cases.iter().enumerate() {
        let out: Vec<usize> =
            (0..2).map(|a| (shape[2 + a] + pads[a] + pads[2 + a] - d[a] * (k[a] - 1) - 1) / s[a] + 1).collect();
        let mut want = vec![];
        for ch in 0..2 {
            for oy in 0..out[0] {
                for ox in 0..out[1] {
                    let mut acc = 0f64;
                    for ky in 0..k[0] {
                        for kx in 0..k[1] {
                            let iy = (oy * s[0] + ky * d[0]) as i64 - pads[0] as i64;
                            let ix = (ox * s[1] + kx * d[1]) as i64 - pads[1] as i64;
                            if (0..7).contains(&iy) && (0..6).contains(&ix) {
                                acc += (x[(ch * 7 + iy as usize) * 6 + ix as usize] as f64).abs().powi(p as i32);
                            }
                        }
                    }
                    want.push(acc.powf(1.0 / p as f64));
                }
            }
        }
        let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        let attrs = vec![
            i64_attr("p", p),
            i64s_attr("kernel_shape", &as_i64(&k)),
            i64s_attr("strides", &as_i64(&s)),
            i64s_attr("dilations", &as_i64(&d)),
            i64s_attr("pads", &as_i64(&pads)),
        ];
        let onnx = one_node_model(node("LpPool", &["x"], attrs), &shape, vec![], 22, "t");
        check(&format!("LpPool case {case}"), convert_and_run("lppool", &onnx, &[Input::F32(&x)], want.len()), &want);
    }
}

#[test]
fn center_crop_pad_matches_the_definition() {
    let mut rng = Rng::new(0xCC09);
    let shape = [5usize, 6, 3];
    let x = values(&mut rng, 90, -1.0, 1.0);
    // (axes, target lengths)
    let cases: [(Option<&[i64]>, &[i64]); 4] =
        [(None, &[3, 9, 3]), (Some(&[0, 1]), &[8, 4]), (Some(&[-1, 0]), &[2, 5]), (Some(&[1]), &[7])];
    for (case, &(axes, target)) in cases.iter().enumerate() {
        let axes_u: Vec<usize> = match axes {
            Some(a) => a.iter().map(|&a| if a < 0 { (a + 3) as usize } else { a as usize }).collect(),
            None => vec![0, 1, 2],
        };
        let mut out = shape.to_vec();
        for (&a, &t) in axes_u.iter().zip(target) {
            out[a] = t as usize;
        }
        let n: usize = out.iter().product();
        // Output index o on an axis reads input o + (in − out)/2 when cropping, o − (out − in)/2
        // when padding.
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let o = unravel(i, &out);
                let src: Vec<i64> = (0..3)
                    .map(|a| {
                        let (have, want) = (shape[a] as i64, out[a] as i64);
                        if have >= want {
                            o[a] as i64 + (have - want) / 2
                        } else {
                            o[a] as i64 - (want - have) / 2
                        }
                    })
                    .collect();
                if src.iter().zip(&shape).all(|(&s, &l)| s >= 0 && (s as usize) < l) {
                    let s: Vec<usize> = src.iter().map(|&s| s as usize).collect();
                    x[ravel(&s, &shape)] as f64
                } else {
                    0.0
                }
            })
            .collect();
        let attrs = axes.map(|a| vec![i64s_attr("axes", a)]).unwrap_or_default();
        let inits = vec![i64_tensor("shape", &[target.len()], target)];
        let onnx = one_node_model(node("CenterCropPad", &["x", "shape"], attrs), &shape, inits, 18, "t");
        check(&format!("CenterCropPad case {case}"), convert_and_run("ccp", &onnx, &[Input::F32(&x)], n), &want);
    }
}

#[test]
fn swiglu_matches_the_definition() {
    let mut rng = Rng::new(0x5A16);
    let shape = [3usize, 8];
    let a = values(&mut rng, 24, -3.0, 3.0);
    let b = values(&mut rng, 24, -2.0, 2.0);
    for alpha in [1.0f32, 0.5, 1.702] {
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&a, &b)| {
                let a = a as f64;
                a / (1.0 + (-(alpha as f64) * a).exp()) * b as f64
            })
            .collect();
        let attrs = vec![float_attr("alpha", alpha)];
        let onnx =
            one_node_model(node("SwiGLU", &["x", "b"], attrs), &shape, vec![f32_tensor("b", &shape, &b)], 28, "t");
        check(&format!("SwiGLU alpha {alpha}"), convert_and_run("swiglu", &onnx, &[Input::F32(&a)], 24), &want);
    }
}

#[test]
fn upsample_matches_the_definition() {
    let mut rng = Rng::new(0x0905);
    let shape = [1usize, 2, 3, 4];
    let x = values(&mut rng, 24, -1.0, 1.0);
    for (mode, scales) in
        [("nearest", [1.0f32, 1.0, 2.0, 3.0]), ("nearest", [1.0, 1.0, 1.5, 2.5]), ("linear", [1.0, 1.0, 2.0, 2.0])]
    {
        let out: Vec<usize> = shape.iter().zip(&scales).map(|(&d, &s)| (d as f32 * s).floor() as usize).collect();
        let n: usize = out.iter().product();
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let o = unravel(i, &out);
                let (ch, oy, ox) = (o[1], o[2], o[3]);
                let at = |y: usize, x_: usize| x[(ch * 3 + y) * 4 + x_] as f64;
                if mode == "nearest" {
                    let sy = ((oy as f32 / scales[2]).floor() as usize).min(2);
                    let sx = ((ox as f32 / scales[3]).floor() as usize).min(3);
                    at(sy, sx)
                } else {
                    let fy = (oy as f64 / scales[2] as f64).min(2.0);
                    let fx = (ox as f64 / scales[3] as f64).min(3.0);
                    let (y0, x0) = (fy.floor() as usize, fx.floor() as usize);
                    let (y1, x1) = ((y0 + 1).min(2), (x0 + 1).min(3));
                    let (dy, dx) = (fy - y0 as f64, fx - x0 as f64);
                    at(y0, x0) * (1.0 - dy) * (1.0 - dx)
                        + at(y0, x1) * (1.0 - dy) * dx
                        + at(y1, x0) * dy * (1.0 - dx)
                        + at(y1, x1) * dy * dx
                }
            })
            .collect();
        let onnx = one_node_model(
            node("Upsample", &["x", "scales"], vec![str_attr("mode", mode)]),
            &shape,
            vec![f32_tensor("scales", &[4], &scales)],
            9,
            "t",
        );
        check(&format!("Upsample {mode} {scales:?}"), convert_and_run("upsample", &onnx, &[Input::F32(&x)], n), &want);
    }
}

#[test]
fn reverse_sequence_matches_the_definition() {
    let mut rng = Rng::new(0x4E5E);
    // (shape, batch axis, time axis, lengths)
    let cases: [(&[usize], usize, usize, &[i64]); 3] =
        [(&[4, 5], 0, 1, &[0, 2, 5, 1]), (&[5, 3, 2], 1, 0, &[5, 3, 1]), (&[3, 6, 4], 0, 1, &[6, 4, 2])];
    for (case, &(shape, batch, time, lens)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let x = values(&mut rng, n, -1.0, 1.0);
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let mut idx = unravel(i, shape);
                let l = lens[idx[batch]] as usize;
                if idx[time] < l {
                    idx[time] = l - 1 - idx[time];
                }
                x[ravel(&idx, shape)] as f64
            })
            .collect();
        let attrs = vec![i64_attr("batch_axis", batch as i64), i64_attr("time_axis", time as i64)];
        let inits = vec![i64_tensor("lens", &[lens.len()], lens)];
        let onnx = one_node_model(node("ReverseSequence", &["x", "lens"], attrs), shape, inits, 10, "t");
        check(&format!("ReverseSequence case {case}"), convert_and_run("revseq", &onnx, &[Input::F32(&x)], n), &want);
    }
}

#[test]
fn affine_grid_matches_the_definition() {
    let mut rng = Rng::new(0xAF61);
    let sizes: [&[i64]; 3] = [&[2, 3, 5, 6], &[1, 1, 1, 4], &[2, 1, 3, 4, 5]];
    for size in sizes {
        for align in [false, true] {
            let (n, sp) = (size[0] as usize, size[2..].iter().map(|&v| v as usize).collect::<Vec<_>>());
            let d = sp.len();
            let theta = values(&mut rng, n * d * (d + 1), -1.5, 1.5);
            let coord = |i: usize, len: usize| -> f64 {
                match (align, len) {
                    (true, 1) => -1.0,
                    (true, _) => -1.0 + 2.0 * i as f64 / (len - 1) as f64,
                    (false, _) => -1.0 + (2 * i + 1) as f64 / len as f64,
                }
            };
            let p: usize = sp.iter().product();
            let mut want = vec![];
            for b in 0..n {
                for flat in 0..p {
                    let idx = unravel(flat, &sp);
                    // (x, y, (z,) 1): x along the last spatial axis.
                    let mut h: Vec<f64> = (0..d).map(|j| coord(idx[d - 1 - j], sp[d - 1 - j])).collect();
                    h.push(1.0);
                    for r in 0..d {
                        want.push((0..=d).map(|k| theta[(b * d + r) * (d + 1) + k] as f64 * h[k]).sum::<f64>());
                    }
                }
            }
            let onnx = one_node_model(
                node("AffineGrid", &["x", "size"], vec![i64_attr("align_corners", align as i64)]),
                &[n, d, d + 1],
                vec![i64_tensor("size", &[size.len()], size)],
                20,
                "t",
            );
            let got = convert_and_run("affine", &onnx, &[Input::F32(&theta)], want.len());
            check(&format!("AffineGrid {size:?} align_corners {align}"), got, &want);
        }
    }
}

#[test]
fn max_unpool_matches_the_definition() {
    let mut rng = Rng::new(0x3A9A);
    // (X shape, kernel, strides, pads, output_shape)
    type Case<'a> = (&'a [usize], &'a [i64], &'a [i64], &'a [i64], Option<&'a [i64]>);
    let cases: [Case; 3] = [
        (&[1, 2, 2, 3], &[2, 2], &[2, 2], &[0, 0, 0, 0], None),
        (&[2, 1, 3, 3], &[3, 3], &[2, 2], &[1, 1, 1, 1], Some(&[2, 1, 6, 7])),
        (&[1, 3, 4], &[2], &[2], &[0, 0], None),
    ];
    for (case, &(shape, kernel, strides, pads, output_shape)) in cases.iter().enumerate() {
        let d = kernel.len();
        let mut unpooled = shape[..2].to_vec();
        for a in 0..d {
            unpooled.push(((shape[2 + a] as i64 - 1) * strides[a] - pads[a] - pads[d + a] + kernel[a]) as usize);
        }
        let total: usize = unpooled.iter().product();
        let n: usize = shape.iter().product();
        let x = values(&mut rng, n, -1.0, 1.0);
        // Distinct flat positions in the unpooled tensor, in a random order.
        let mut places: Vec<usize> = (0..total).collect();
        for i in (1..total).rev() {
            places.swap(i, below(&mut rng, i + 1));
        }
        let idx: Vec<i64> = places[..n].iter().map(|&p| p as i64).collect();
        let mut y = vec![0f64; total];
        for (&i, &v) in idx.iter().zip(&x) {
            y[i as usize] = v as f64;
        }
        // A larger output_shape keeps the unpooled values at the start of each axis.
        let out: Vec<usize> = output_shape.map_or(unpooled.clone(), |o| o.iter().map(|&v| v as usize).collect());
        let want: Vec<f64> = (0..out.iter().product())
            .map(|i| {
                let o = unravel(i, &out);
                if o.iter().zip(&unpooled).all(|(a, b)| a < b) {
                    y[ravel(&o, &unpooled)]
                } else {
                    0.0
                }
            })
            .collect();
        let attrs = vec![i64s_attr("kernel_shape", kernel), i64s_attr("strides", strides), i64s_attr("pads", pads)];
        let mut inits = vec![i64_tensor("i", shape, &idx)];
        let mut ins = vec!["x", "i"];
        if let Some(o) = output_shape {
            inits.push(i64_tensor("out", &[o.len()], o));
            ins.push("out");
        }
        let onnx = one_node_model(node("MaxUnpool", &ins, attrs), shape, inits, 22, "t");
        let got = convert_and_run("maxunpool", &onnx, &[Input::F32(&x)], want.len());
        check(&format!("MaxUnpool case {case}"), got, &want);
    }
}

#[test]
fn causal_conv_with_state_matches_the_definition() {
    let mut rng = Rng::new(0xCC27);
    // (batch, channels, length, kernel, past state, bias, silu)
    for (case, &(b, c, t, k, past, bias, silu)) in [
        (2usize, 3usize, 7usize, 4usize, true, true, false),
        (1, 4, 2, 5, false, false, true),
        (2, 2, 5, 3, true, false, true),
        (1, 3, 6, 1, false, true, false),
    ]
    .iter()
    .enumerate()
    {
        let x = values(&mut rng, b * c * t, -1.5, 1.5);
        let wt = values(&mut rng, c * k, -1.0, 1.0);
        let bv = values(&mut rng, c, -0.5, 0.5);
        let pv = values(&mut rng, b * c * (k - 1), -1.0, 1.0);
        // The state then the input, per (batch, channel): K − 1 + T values.
        let mut want = vec![];
        for bi in 0..b {
            for ch in 0..c {
                let mut seq: Vec<f64> =
                    (0..k - 1).map(|j| if past { pv[(bi * c + ch) * (k - 1) + j] as f64 } else { 0.0 }).collect();
                seq.extend((0..t).map(|j| x[(bi * c + ch) * t + j] as f64));
                for o in 0..t {
                    let mut y: f64 = (0..k).map(|j| seq[o + j] * wt[ch * k + j] as f64).sum();
                    if bias {
                        y += bv[ch] as f64;
                    }
                    if silu {
                        y /= 1.0 + (-y).exp();
                    }
                    want.push(y);
                }
            }
        }
        let mut inits = vec![f32_tensor("w", &[c, 1, k], &wt)];
        let mut ins = vec!["x", "w", "", ""];
        if bias {
            inits.push(f32_tensor("b", &[c], &bv));
            ins[2] = "b";
        }
        if past {
            inits.push(f32_tensor("past", &[b, c, k - 1], &pv));
            ins[3] = "past";
        }
        let attrs = vec![str_attr("activation", if silu { "silu" } else { "none" })];
        let onnx = one_node_model(node("CausalConvWithState", &ins, attrs), &[b, c, t], inits, 27, "t");
        let got = convert_and_run("causal-conv", &onnx, &[Input::F32(&x)], want.len());
        check(&format!("CausalConvWithState case {case}"), got, &want);
    }
}

#[test]
fn tensor_scatter_matches_the_definition() {
    let mut rng = Rng::new(0x75CA);
    // (cache shape, axis, update length, write indices, circular)
    type Case<'a> = (&'a [usize], i64, usize, Option<&'a [i64]>, bool);
    let cases: [Case; 4] = [
        (&[2, 3, 6, 4], -2, 2, Some(&[1, 4]), false),
        (&[3, 5, 2], 1, 3, Some(&[4, 0, 3]), true),
        (&[2, 6, 3], 1, 4, None, false),
        (&[2, 2, 5, 3], 2, 5, Some(&[2, 0]), true),
    ];
    for (case, &(shape, axis, seq, starts, circular)) in cases.iter().enumerate() {
        let a = if axis < 0 { (axis + shape.len() as i64) as usize } else { axis as usize };
        let len = shape[a];
        let mut ushape = shape.to_vec();
        ushape[a] = seq;
        let n: usize = shape.iter().product();
        let past = values(&mut rng, n, -1.0, 1.0);
        let update = values(&mut rng, ushape.iter().product(), 2.0, 3.0);
        let mut want: Vec<f64> = past.iter().map(|&v| v as f64).collect();
        for (i, &u) in update.iter().enumerate() {
            let mut idx = unravel(i, &ushape);
            let mut p = starts.map_or(0, |s| s[idx[0]] as usize) + idx[a];
            if circular {
                p %= len;
            }
            idx[a] = p;
            want[ravel(&idx, shape)] = u as f64;
        }
        let mut inits = vec![f32_tensor("u", &ushape, &update)];
        let mut ins = vec!["x", "u"];
        if let Some(s) = starts {
            inits.push(i64_tensor("w", &[s.len()], s));
            ins.push("w");
        }
        let attrs = vec![i64_attr("axis", axis), str_attr("mode", if circular { "circular" } else { "linear" })];
        let onnx = one_node_model(node("TensorScatter", &ins, attrs), shape, inits, 24, "t");
        let got = convert_and_run("tensor-scatter", &onnx, &[Input::F32(&past)], n);
        check(&format!("TensorScatter case {case}"), got, &want);
    }
}

/// The determinant in f64 by Gaussian elimination with partial pivoting.
fn det_ref(m: &[f32], n: usize) -> f64 {
    let mut a: Vec<f64> = m.iter().map(|&v| v as f64).collect();
    let mut det = 1.0;
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| a[i * n + c].abs().total_cmp(&a[j * n + c].abs())).unwrap();
        if p != c {
            for k in 0..n {
                a.swap(c * n + k, p * n + k);
            }
            det = -det;
        }
        let piv = a[c * n + c];
        det *= piv;
        for r in c + 1..n {
            let f = a[r * n + c] / piv;
            for k in c..n {
                a[r * n + k] -= f * a[c * n + k];
            }
        }
    }
    det
}

#[test]
fn det_matches_the_definition() {
    let mut rng = Rng::new(0xDE7);
    let shapes: [&[usize]; 5] = [&[1, 1], &[2, 2], &[3, 3, 3], &[2, 1, 4, 4], &[5, 5]];
    for shape in shapes {
        let r = shape.len();
        let n = shape[r - 1];
        let count: usize = shape[..r - 2].iter().product();
        let x = values(&mut rng, count * n * n, -1.5, 1.5);
        let want: Vec<f64> = (0..count).map(|b| det_ref(&x[b * n * n..(b + 1) * n * n], n)).collect();
        let onnx = one_node_model(node("Det", &["x"], vec![]), shape, vec![], 22, "t");
        check(&format!("Det {shape:?}"), convert_and_run("det", &onnx, &[Input::F32(&x)], count), &want);
    }
}
