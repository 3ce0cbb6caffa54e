//! Ops whose parameters are tensors, constant or fed at run time (as ONNX's own test cases feed
//! them): Dropout with `ratio` and `training_mode`, DynamicQuantizeLinear (its scale and zero
//! point computed from the data), ConvInteger with run-time zero points. Each model is written
//! here as an ONNX protobuf, converted with the default options and run on seeded random
//! non-zero inputs on the CPU and, when there is one, the GPU, against a reference written here
//! from ONNX's definitions (onnxruntime's where ONNX leaves a case open); integer outputs and
//! the identities compare exactly.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_format::FeedDType;
use kestrel_rt_onnx::{convert, run_tract, ConvertOptions, InputTensor};
use proto::{f32_tensor, ints_attr, Msg};

// ONNX element types.
const FLOAT: i64 = 1;
const UINT8: i64 = 2;
const INT8: i64 = 3;
const INT32: i64 = 6;
const BOOL: i64 = 9;

/// A `ValueInfoProto` of element type `elem`, with its shape when given.
fn value(name: &str, elem: i64, dims: Option<&[usize]>) -> Msg {
    let mut t = Msg::default().int(1, elem);
    if let Some(dims) = dims {
        t = t.msg(2, dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64))));
    }
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, t))
}

/// An initializer of an integer or bool element type, values in `int32_data` (field 5).
fn int_tensor(name: &str, elem: i64, dims: &[usize], v: &[i64]) -> Msg {
    let t = dims.iter().fold(Msg::default(), |m, &d| m.int(1, d as i64)).int(2, elem).str(8, name);
    v.iter().fold(t, |m, &x| m.int(5, x))
}

fn node(op: &str, ins: &[&str], outs: &[&str]) -> Msg {
    let n = ins.iter().fold(Msg::default(), |m, i| m.str(1, i));
    outs.iter().fold(n, |m, o| m.str(2, o)).str(3, outs[0]).str(4, op)
}

fn model(node: Msg, inits: Vec<Msg>, inputs: Vec<Msg>, outputs: Vec<Msg>, opset: i64) -> Vec<u8> {
    let mut g = Msg::default().msg(1, node).str(2, "g");
    for t in inits {
        g = g.msg(5, t);
    }
    for i in inputs {
        g = g.msg(11, i);
    }
    for o in outputs {
        g = g.msg(12, o);
    }
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, opset)).str(2, "runtime_params.rs").msg(7, g).0
}

fn path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kestrel-runtime-params-{}-{name}.onnx", std::process::id()))
}

/// Converts `onnx`; the conversion error as text.
fn convert_bytes(name: &str, onnx: &[u8]) -> Result<Vec<u8>, String> {
    let p = path(name);
    std::fs::write(&p, onnx).unwrap();
    let conv = convert(&p, &ConvertOptions::default());
    std::fs::remove_file(&p).ok();
    conv.map(|c| c.kes).map_err(|e| e.to_string())
}

/// Converts and runs on `inputs` (values; each fed as the `.kes` input takes it) on the CPU and
/// the GPU when there is one: per backend, every output.
fn run(name: &str, onnx: &[u8], inputs: &[Vec<f64>]) -> Vec<Vec<Vec<f32>>> {
    let kes = convert_bytes(name, onnx).unwrap_or_else(|e| panic!("{name}: {e}"));
    let model = kestrel_rt::Model::from_bytes(&kes).unwrap();
    let cpu = model.cpu().unwrap();
    let specs: Vec<_> = cpu.file().meta().inputs().collect();
    assert_eq!(specs.len(), inputs.len(), "{name}: inputs");
    enum Feed {
        F32(Vec<f32>),
        I64(Vec<i64>),
        I32(Vec<i32>),
    }
    let feeds: Vec<Feed> = specs
        .iter()
        .zip(inputs)
        .map(|(s, v)| match s.feed {
            FeedDType::F32 => Feed::F32(v.iter().map(|&x| x as f32).collect()),
            FeedDType::I64 => Feed::I64(v.iter().map(|&x| x as i64).collect()),
            FeedDType::I32 => Feed::I32(v.iter().map(|&x| x as i32).collect()),
            FeedDType::I64Limbs => {
                Feed::F32(v.iter().flat_map(|&x| kestrel_rt::format::limbs::encode(x as i64)).collect())
            }
        })
        .collect();
    let ins: Vec<Input<'_>> = feeds
        .iter()
        .map(|f| match f {
            Feed::F32(v) => Input::F32(v),
            Feed::I64(v) => Input::I64(v),
            Feed::I32(v) => Input::I32(v),
        })
        .collect();
    let sizes: Vec<usize> = (0..cpu.output_count())
        .map(|i| cpu.output(i).unwrap().shape.dims().iter().map(|&d| d as usize).product())
        .collect();
    let mut outs = vec![model.session(1).unwrap().run_vec(&ins).unwrap_or_else(|e| panic!("{name}: {e}"))];
    if let Some(ctx) = common::gpu() {
        let mut g: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0f32; n]).collect();
        let mut refs: Vec<&mut [f32]> = g.iter_mut().map(Vec::as_mut_slice).collect();
        kestrel_rt_wgpu::GpuSession::new(&ctx, &cpu, 1)
            .and_then(|mut s| s.run(&ins, &mut refs))
            .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
        outs.push(g);
    }
    outs
}

/// `n` non-zero values of magnitude in [0.05, 2·amp), signs mixed unless `sign` is ±1.
fn nonzero(n: usize, rng: &mut Rng, amp: f32, sign: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u = rng.uniform();
            let m = (0.05 + 1.95 * u.abs()) * amp;
            if sign == 0.0 {
                m.copysign(u)
            } else {
                m * sign
            }
        })
        .collect()
}

// ---------------------------------------------------------------- Dropout

/// Dropout (opset 13) over x `[3, 5]` with its mask output: `ratio` and `training_mode` as
/// initializers (`Some`) or graph inputs (`None`).
fn dropout(ratio: Option<f32>, training: Option<bool>) -> Vec<u8> {
    let n = node("Dropout", &["x", "r", "t"], &["y", "m"]);
    let mut inits = vec![];
    let mut inputs = vec![value("x", FLOAT, Some(&[3, 5]))];
    match ratio {
        Some(r) => inits.push(f32_tensor("r", &[], &[r])),
        None => inputs.push(value("r", FLOAT, Some(&[]))),
    }
    match training {
        Some(t) => inits.push(int_tensor("t", BOOL, &[], &[i64::from(t)])),
        None => inputs.push(value("t", BOOL, Some(&[]))),
    }
    model(n, inits, inputs, vec![value("y", FLOAT, None), value("m", BOOL, None)], 13)
}

#[test]
fn dropout_is_the_identity_in_inference_and_refused_when_random() {
    let mut rng = Rng::new(0xD20);
    let x = nonzero(15, &mut rng, 1.0, 0.0);
    let xf: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    // Constant parameters: inference (training off, or a ratio of 0) is the identity.
    for (ratio, training) in [(0.0, true), (0.4, false), (0.0, false)] {
        let name = format!("dropout {ratio} {training}");
        for outs in run(&name, &dropout(Some(ratio), Some(training)), std::slice::from_ref(&xf)) {
            assert_eq!(outs[0], x, "{name}: y");
            assert_eq!(outs[1], vec![1.0; 15], "{name}: mask");
        }
    }
    // Constant random dropout: refused, clearly.
    let e = convert_bytes("dropout random", &dropout(Some(0.3), Some(true))).unwrap_err();
    assert!(e.contains("not supported: random dropout in training mode"), "{e}");
    // Parameters fed at run time: the identity where the run is inference, NaN where it asks
    // for random dropout.
    let onnx = dropout(None, None);
    for (r, t, identity) in [(0.0, 1.0, true), (0.5, 0.0, true), (0.0, 0.0, true), (0.5, 1.0, false)] {
        let name = format!("dropout run-time {r} {t}");
        for outs in run(&name, &onnx, &[xf.clone(), vec![r], vec![t]]) {
            if identity {
                assert_eq!(outs[0], x, "{name}: y");
                assert_eq!(outs[1], vec![1.0; 15], "{name}: mask");
            } else {
                assert!(outs.iter().flatten().all(|v| v.is_nan()), "{name}: {outs:?}");
            }
        }
    }
}

// ---------------------------------------------------------------- DynamicQuantizeLinear

/// ONNX DynamicQuantizeLinear as onnxruntime computes it, in f32: (y, scale, zero point).
fn dynamic_quantize(x: &[f32]) -> (Vec<f32>, f32, f32) {
    let lo = x.iter().fold(0f32, |a, &v| a.min(v));
    let hi = x.iter().fold(0f32, |a, &v| a.max(v));
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    let y = x.iter().map(|&v| ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0)).collect();
    (y, scale, zp)
}

fn dql_model(shape: &[usize]) -> Vec<u8> {
    let n = node("DynamicQuantizeLinear", &["x"], &["y", "s", "z"]);
    let outs = vec![value("y", UINT8, None), value("s", FLOAT, None), value("z", UINT8, None)];
    model(n, vec![], vec![value("x", FLOAT, Some(shape))], outs, 11)
}

#[test]
fn dynamic_quantize_linear_matches_its_definition() {
    let mut rng = Rng::new(0x0D91);
    for case in 0..12 {
        let shape: Vec<usize> = (0..1 + below(&mut rng, 3)).map(|_| 1 + below(&mut rng, 6)).collect();
        let n: usize = shape.iter().product();
        // Mixed signs, all positive (zero point 0), all negative (zero point 255); amplitudes
        // from 0.01 to 100.
        let sign = [0.0, 1.0, -1.0][case % 3];
        let amp = [0.01, 1.0, 100.0, 3.7][case % 4];
        let x = nonzero(n, &mut rng, amp, sign);
        let (y, scale, zp) = dynamic_quantize(&x);
        let onnx = dql_model(&shape);
        let name = format!("dql {case}");
        for outs in run(&name, &onnx, &[x.iter().map(|&v| f64::from(v)).collect()]) {
            assert_eq!(outs[0], y, "{name}: y of {x:?}");
            assert_eq!(outs[1], [scale], "{name}: scale of {x:?}");
            assert_eq!(outs[2], [zp], "{name}: zero point of {x:?}");
        }
        let p = path(&name);
        std::fs::write(&p, &onnx).unwrap();
        let t = run_tract(&p, &[InputTensor::f32(&shape, x.clone())]);
        std::fs::remove_file(&p).ok();
        let t = t.unwrap_or_else(|e| panic!("{name}: tract: {e}"));
        assert_eq!((&t[0].1, t[1].1[0], t[2].1[0]), (&y, scale, zp), "{name}: tract");
    }
    // An all-zero input: onnxruntime's scale 1 (not the 0 / 0 of the formula), zero point 0.
    for outs in run("dql zeros", &dql_model(&[4]), &[vec![0.0; 4]]) {
        assert_eq!(outs, [vec![0.0; 4], vec![1.0], vec![0.0]], "dql zeros");
    }
}

// ---------------------------------------------------------------- ConvInteger

/// ConvInteger's definition: `Σ (x − x0)·(w − w0[o])` over the window, pads contributing 0.
#[allow(clippy::too_many_arguments)]
fn conv_integer(
    x: &[i64],
    w: &[i64],
    x0: i64,
    w0: &[i64],
    [c, h, wd]: [usize; 3],
    o: usize,
    k: usize,
    pad: usize,
) -> Vec<f32> {
    let (oh, ow) = (h + 2 * pad - k + 1, wd + 2 * pad - k + 1);
    (0..o * oh * ow)
        .map(|e| {
            let (oc, p) = (e / (oh * ow), e % (oh * ow));
            let (py, px) = (p / ow, p % ow);
            let z = if w0.len() > 1 { w0[oc] } else { w0[0] };
            let mut acc = 0i64;
            for ic in 0..c {
                for ky in 0..k {
                    for kx in 0..k {
                        let (iy, ix) = (py + ky, px + kx);
                        if iy < pad || ix < pad || iy - pad >= h || ix - pad >= wd {
                            continue;
                        }
                        acc +=
                            (x[(ic * h + iy - pad) * wd + ix - pad] - x0) * (w[((oc * c + ic) * k + ky) * k + kx] - z);
                    }
                }
            }
            acc as f32
        })
        .collect()
}

#[test]
fn conv_integer_with_run_time_zero_points_matches_its_definition() {
    let mut rng = Rng::new(0x0C17);
    for case in 0..8 {
        let (c, o, h, w, k) =
            (1 + below(&mut rng, 3), 1 + below(&mut rng, 3), 3 + below(&mut rng, 4), 3 + below(&mut rng, 4), 2);
        let pad = case % 2;
        // u8 data; the kernel u8 (even cases) or i8; its zero point per output channel or one.
        let signed = case % 4 >= 2;
        let welem = if signed { INT8 } else { UINT8 };
        let wshift = if signed { 128 } else { 0 };
        let x: Vec<i64> = (0..c * h * w).map(|_| 1 + below(&mut rng, 255) as i64).collect();
        let wt: Vec<i64> = (0..o * c * k * k).map(|_| 1 + below(&mut rng, 255) as i64 - wshift).collect();
        let x0 = 1 + below(&mut rng, 255) as i64;
        let per_channel = case % 3 != 0;
        let w0: Vec<i64> = (0..if per_channel { o } else { 1 }).map(|_| below(&mut rng, 255) as i64 - wshift).collect();
        let want = conv_integer(&x, &wt, x0, &w0, [c, h, w], o, k, pad);
        // The kernel a graph input (every parameter at run time) or, in cases 4 to 7, an
        // initializer with run-time zero points.
        let kernel_input = case < 4;
        let n = node("ConvInteger", &["x", "w", "x0", "w0"], &["y"]).msg(5, ints_attr("pads", &[pad; 4]));
        let w0_dims: Vec<usize> = if per_channel { vec![o] } else { vec![] };
        let mut inputs = vec![
            value("x", UINT8, Some(&[1, c, h, w])),
            value("x0", UINT8, Some(&[])),
            value("w0", welem, Some(&w0_dims)),
        ];
        let mut inits = vec![];
        let mut feeds: Vec<Vec<f64>> =
            vec![x.iter().map(|&v| v as f64).collect(), vec![x0 as f64], w0.iter().map(|&v| v as f64).collect()];
        if kernel_input {
            inputs.insert(1, value("w", welem, Some(&[o, c, k, k])));
            feeds.insert(1, wt.iter().map(|&v| v as f64).collect());
        } else {
            inits.push(int_tensor("w", welem, &[o, c, k, k], &wt));
        }
        let onnx = model(n, inits, inputs, vec![value("y", INT32, None)], 10);
        let name = format!("convinteger {case}");
        for outs in run(&name, &onnx, &feeds) {
            assert_eq!(outs[0], want, "{name}");
        }
    }
}

// ---------------------------------------------------------------- QLinearConv

/// QLinearConv with the kernel's scale and zero point (per output channel) fed at run time and
/// no bias: the requantised float convolution; with a bias, a run-time kernel scale is refused
/// (the bias is scaled by it at conversion).
#[test]
fn qlinear_conv_with_run_time_kernel_parameters_matches_its_definition() {
    let mut rng = Rng::new(0x0C18);
    let (c, o, h, w, k) = (2, 3, 5, 4, 2);
    let x: Vec<i64> = (0..c * h * w).map(|_| 1 + below(&mut rng, 255) as i64).collect();
    let wt: Vec<i64> = (0..o * c * k * k).map(|_| below(&mut rng, 255) as i64 - 127).collect();
    let (x0, xs, y0, ys) = (1 + below(&mut rng, 250) as i64, 0.02f32, 1 + below(&mut rng, 250) as i64, 0.3f32);
    let ws: Vec<f32> = (0..o).map(|i| 0.004 + 0.003 * i as f32).collect();
    let w0: Vec<i64> = (0..o).map(|_| below(&mut rng, 21) as i64 - 10).collect();
    let acc = conv_integer(&x, &wt, x0, &w0, [c, h, w], o, k, 1);
    let (oh, ow) = (h + 1, w + 1);
    let want: Vec<f32> = acc
        .iter()
        .enumerate()
        .map(|(e, &a)| {
            let y = f64::from(a) * f64::from(xs) * f64::from(ws[e / (oh * ow)]) / f64::from(ys);
            (y.round_ties_even() as i64 + y0).clamp(0, 255) as f32
        })
        .collect();
    let ins = ["x", "xs", "x0", "w", "ws", "w0", "ys", "y0"];
    let inits = || {
        vec![
            f32_tensor("xs", &[], &[xs]),
            int_tensor("x0", UINT8, &[], &[x0]),
            int_tensor("w", INT8, &[o, c, k, k], &wt),
            f32_tensor("ys", &[], &[ys]),
            int_tensor("y0", UINT8, &[], &[y0]),
        ]
    };
    let inputs =
        || vec![value("x", UINT8, Some(&[1, c, h, w])), value("ws", FLOAT, Some(&[o])), value("w0", INT8, Some(&[o]))];
    let n = node("QLinearConv", &ins, &["y"]).msg(5, ints_attr("pads", &[1; 4]));
    let onnx = model(n, inits(), inputs(), vec![value("y", UINT8, None)], 10);
    let feeds = [
        x.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        ws.iter().map(|&v| f64::from(v)).collect(),
        w0.iter().map(|&v| v as f64).collect(),
    ];
    for outs in run("qlinearconv run-time kernel parameters", &onnx, &feeds) {
        // f32 sums in another order may move a value sitting on a rounding boundary by one.
        let off = outs[0].iter().zip(&want).filter(|(g, w)| (*g - *w).abs() > 1.0).count();
        let exact = outs[0].iter().zip(&want).filter(|(g, w)| g == w).count();
        assert!(off == 0 && exact * 10 >= want.len() * 9, "{:?} vs {want:?}", outs[0]);
    }
    let mut with_bias = ins.to_vec();
    with_bias.push("b");
    let n = node("QLinearConv", &with_bias, &["y"]).msg(5, ints_attr("pads", &[1; 4]));
    let mut b = inits();
    b.push(int_tensor("b", INT32, &[o], &vec![100; o]));
    let e = convert_bytes("qlinearconv bias", &model(n, b, inputs(), vec![value("y", UINT8, None)], 10)).unwrap_err();
    assert!(e.contains("bias with a kernel scale computed at run time"), "{e}");
}
