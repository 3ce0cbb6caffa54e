//! Converts the tiny ONNX models of `tests/data` with every weight encoding and compares Kestrel
//! with tract at batch 1 and 3.

use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{
    convert, read_npy, verify, write_npy_f32, ConvertError, ConvertOptions, DType, InputData, InputTensor, Report,
};
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Random inputs for a test model at `batch`.
fn inputs(model: &str, batch: usize, seed: u64) -> Vec<InputTensor> {
    let mut rng = Rng::new(seed);
    let f = |rng: &mut Rng, dims: &[usize]| {
        let n: usize = dims.iter().product();
        InputTensor::f32(dims, rng.vec(n, 2.0))
    };
    match model {
        "mlp" => vec![f(&mut rng, &[batch, 16])],
        "vit" => vec![f(&mut rng, &[batch, 1, 16, 16])],
        "cnn" => vec![f(&mut rng, &[batch, 2, 9, 9])],
        "misc" | "select" | "assemble" | "trilu" => vec![f(&mut rng, &[batch, 4, 6])],
        "nhwc" => vec![f(&mut rng, &[batch, 6, 6, 3])],
        "pool" => vec![f(&mut rng, &[batch, 3, 10, 9]), f(&mut rng, &[batch, 6, 6, 4])],
        "hard_sigmoid" => vec![f(&mut rng, &[batch, 8]), f(&mut rng, &[batch, 3, 6, 6])],
        "logic" => {
            let mask = (0..batch * 4).map(|_| i64::from(rng.uniform() > 0.0)).collect();
            vec![f(&mut rng, &[batch, 4]), InputTensor::i64(&[batch, 4], mask)]
        }
        "text" => {
            let ids = (0..batch * 8).map(|_| ((rng.uniform() + 1.0) * 25.0) as i64 % 50).collect();
            vec![InputTensor::i64(&[batch, 8], ids)]
        }
        _ => unreachable!(),
    }
}

const MODELS: &[&str] = &["mlp", "vit", "cnn", "text", "misc", "select", "nhwc", "assemble", "pool", "logic"];

fn opts(weights: DType) -> ConvertOptions {
    ConvertOptions { weights, ..ConvertOptions::default() }
}

fn check(model: &str, weights: DType, max_rel: f64) -> f64 {
    let conv = convert(data(&format!("{model}.onnx")), &opts(weights)).unwrap_or_else(|e| panic!("{model}: {e}"));
    let mut worst_top1 = 1.0f64;
    for (batch, seed) in [(1, 11), (3, 12)] {
        let v = verify(data(&format!("{model}.onnx")), &conv.kes, &inputs(model, batch, seed))
            .unwrap_or_else(|e| panic!("{model} {weights:?} batch {batch}: {e}"));
        println!(
            "{model:5} {:5} batch {batch}: max abs {:.3e}, max rel {:.3e}, top-1 {:.3} over {} rows",
            weights.name(),
            v.max_abs_err,
            v.max_rel_err,
            v.top1_agreement,
            v.rows
        );
        assert!(v.max_rel_err <= max_rel, "{model} {weights:?} batch {batch}: rel {} > {max_rel}", v.max_rel_err);
        worst_top1 = worst_top1.min(v.top1_agreement);
    }
    worst_top1
}

#[test]
fn f32_matches_tract() {
    for m in MODELS {
        check(m, DType::F32, 1e-4);
    }
}

#[test]
fn f16_matches_tract() {
    for m in MODELS {
        check(m, DType::F16, 1e-2);
    }
}

#[test]
fn int8_and_int4_top1() {
    for m in MODELS {
        let top1 = check(m, DType::I8, 1.0);
        if *m == "mlp" || *m == "vit" {
            assert!(top1 >= 0.9, "{m}: int8 top-1 agreement {top1} < 0.9");
        }
        check(m, DType::I4, f64::INFINITY);
    }
}

#[test]
fn int8_keeps_first_last_and_named_weights_at_f16() {
    let o =
        ConvertOptions { weights: DType::I8, keep_f16: vec!["w_".into()], keep_first_last: true, ..Default::default() };
    let conv = convert(data("mlp.onnx"), &o).unwrap();
    for w in &conv.report.weights {
        let expected = if w.shape.len() <= 1 { "f32" } else { "f16" };
        assert_eq!(w.dtype, expected, "{}", w.name);
    }
    let o = ConvertOptions { weights: DType::I8, keep_first_last: true, ..Default::default() };
    let conv = convert(data("mlp.onnx"), &o).unwrap();
    let dtypes: Vec<&str> =
        conv.report.weights.iter().filter(|w| w.shape.len() > 1).map(|w| w.dtype.as_str()).collect();
    assert_eq!(dtypes, ["f16", "int8", "f16"], "{}", conv.report.to_table());
}

/// Trilu on an activation (both triangles, k = ±1 and 0) is exact: `When(x, mask)`.
#[test]
fn trilu_of_an_activation_is_exact() {
    let conv = convert(data("trilu.onnx"), &opts(DType::F32)).unwrap();
    let v = verify(data("trilu.onnx"), &conv.kes, &inputs("trilu", 3, 5)).unwrap();
    assert_eq!(v.tract.len(), 3);
    assert_eq!(v.max_abs_err, 0.0, "{v:?}");
    // Each output keeps some of x and zeroes some of it.
    for out in &v.kestrel {
        assert!(out.contains(&0.0) && out.iter().any(|&x| x != 0.0));
    }
}

#[test]
fn selections_lower_to_exact_generic_ops() {
    let conv = convert(data("select.onnx"), &opts(DType::I8)).unwrap();
    let fused: Vec<&str> = conv.report.fused.iter().map(|f| f.name.as_str()).collect();
    for p in ["masked-fill", "select-as-one-hot-dense", "cumsum-as-triangular-dense"] {
        assert!(fused.contains(&p), "{p} not in {fused:?}");
    }
    // Masks, one-hot and triangular weights stay f32 even at int8: the results are exact.
    let v = verify(data("select.onnx"), &conv.kes, &inputs("select", 3, 9)).unwrap();
    assert!(v.max_rel_err < 1e-6, "{}", v.max_rel_err);
    assert_eq!(v.tract.len(), 4);
    let conv = convert(data("assemble.onnx"), &opts(DType::I4)).unwrap();
    let fused: Vec<&str> = conv.report.fused.iter().map(|f| f.name.as_str()).collect();
    // Concat pieces and constant padding (windows): slices, no products, the placed pieces one
    // Concat; the reflect pad's selecting product (not a window) as a 1×1 convolution, no
    // transposes around it.
    assert_eq!(
        fused,
        [
            "concat-as-placing-dense",
            "pad-as-selecting-dense",
            "channels-last dense as 1x1 conv",
            "one-hot dense as slice",
            "placed slices as concat"
        ]
    );
    assert_eq!(conv.report.kestrel_ops.get("Slice"), Some(&3), "{:?}", conv.report.kestrel_ops);
    assert_eq!(conv.report.kestrel_ops.get("Concat"), Some(&1), "{:?}", conv.report.kestrel_ops);
    let v = verify(data("assemble.onnx"), &conv.kes, &inputs("assemble", 3, 10)).unwrap();
    assert!(v.max_rel_err < 1e-6, "{}", v.max_rel_err);
    assert_eq!(v.tract.len(), 5);
    let conv = convert(data("nhwc.onnx"), &ConvertOptions::default()).unwrap();
    assert_eq!(conv.report.kestrel_ops.get("Conv2d"), Some(&1));
}

/// ONNX pooling (`pool.onnx`): MaxPool 3×3 s2 p1, AveragePool 2×2 s2 in ceil mode on an odd
/// width with and without count_include_pad, AveragePool 2×2 s2 count_include_pad, AveragePool
/// 3×3 s2 p1 count_include_pad in ceil mode (a window past the explicit padding: rescaled by a
/// constant map), MaxPool 2×2 dilation 2, GlobalMaxPool and GlobalAveragePool (tract's
/// reductions), and an AveragePool between NHWC transposes. Each output matches tract: max
/// pools exactly (they select an input), averages within 1e-5 of the output's scale.
#[test]
fn pooling_matches_tract() {
    use kestrel_rt::format::ops::{BinaryOp, Op, Pool2d, PoolKind, ReduceOp};
    let conv = convert(data("pool.onnx"), &ConvertOptions::default()).unwrap();
    let ops = &conv.report.kestrel_ops;
    // avg2_ceil and avg2_ceil_pad lower to the same node (merged as duplicates).
    assert_eq!(ops.get("Pool2d"), Some(&6), "{ops:?}");
    assert!(ops.contains_key("Reduce"), "global pools lower to reductions: {ops:?}");
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let cpu = model.cpu().unwrap();
    let all: Vec<Op> = cpu.file().ops().collect::<Result<_, _>>().unwrap();
    let pools: Vec<Pool2d> = all.iter().filter_map(|op| if let Op::Pool2d(p) = op { Some(*p) } else { None }).collect();
    let has = |kind, kernel, stride, pad, dilation, cip| {
        pools.iter().any(|p| {
            (p.kind, p.kernel, p.stride, p.pad, p.dilation, p.count_include_pad)
                == (kind, kernel, stride, pad, dilation, cip)
        })
    };
    let (max, avg) = (PoolKind::Max, PoolKind::Avg);
    assert!(has(max, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], false), "{pools:?}");
    // Ceil mode on the odd width: one extra column of padding on the right. Without explicit
    // padding, count_include_pad counts only input taps, so both variants are written as 0.
    assert!(has(avg, [2, 2], [2, 2], [0, 0, 0, 1], [1, 1], false), "{pools:?}");
    assert!(has(avg, [2, 2], [2, 2], [0, 0, 0, 0], [1, 1], true), "{pools:?}");
    // Ceil mode past the explicit padding (height 10): one extra row, and the rescale map.
    assert!(has(avg, [3, 3], [2, 2], [1, 1, 2, 1], [1, 1], true), "{pools:?}");
    assert!(has(max, [2, 2], [1, 1], [0, 0, 0, 0], [2, 2], false), "{pools:?}");
    assert!(has(avg, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], false), "{pools:?}");
    // The rescale: a Mul by an exact [H', W'] map, the only Mul (GlobalAveragePool's sum times
    // 1/(H·W) is one Mean over the merged H·W axis).
    let map = conv.report.weights.iter().find(|w| w.name.ends_with(".divisor")).expect("a rescale map");
    assert_eq!((map.shape.as_slice(), map.dtype.as_str()), ([6, 5].as_slice(), "f32"));
    let muls = all.iter().filter(|op| matches!(op, Op::Binary(b) if b.op == BinaryOp::Mul)).count();
    assert_eq!(muls, 1, "{all:?}");
    assert!(all.iter().any(|op| matches!(op, Op::Reduce(r) if r.op == ReduceOp::Mean)), "{all:?}");
    let names =
        ["max3", "avg2_ceil", "avg2_ceil_pad", "avg2_pad", "avg3_ceil_pad", "max2_dil", "gmax", "gavg", "nhwc_avg"];
    for (batch, seed) in [(1, 21), (3, 22)] {
        let v = verify(data("pool.onnx"), &conv.kes, &inputs("pool", batch, seed)).unwrap();
        assert_eq!(v.tract.len(), names.len());
        for (i, name) in names.iter().enumerate() {
            let (t, k) = (&v.tract[i], &v.kestrel[i]);
            assert_eq!(t.len(), k.len(), "{name}");
            let scale = t.iter().fold(0f32, |m, x| m.max(x.abs()));
            let err = t.iter().zip(k).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            let allowed = if name.starts_with("max") || *name == "gmax" { 0.0 } else { 1e-5 * scale };
            assert!(err <= allowed, "{name} batch {batch}: max |kestrel - tract| {err:e} > {allowed:e}");
        }
    }
}

#[test]
fn unsupported_op_is_named() {
    match convert(data("unsupported.onnx"), &ConvertOptions::default()) {
        Err(ConvertError::Unsupported { path, blockers }) => {
            assert!(path.ends_with("unsupported.onnx"), "{path}");
            assert_eq!(blockers.len(), 1, "{blockers:?}");
            assert_eq!(blockers[0].op, "RandomNormal");
            assert_eq!(blockers[0].node, "randomnormal_3");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

/// Every blocker at once, in ONNX's vocabulary, one line each, the path once: a node after an
/// unsupported one is still lowered (it reads a stand-in, a boolean one too) and reports its own
/// problem.
#[test]
fn every_blocker_is_listed_at_once() {
    let e = convert(data("unsupported_many.onnx"), &ConvertOptions::default()).unwrap_err();
    let ConvertError::Unsupported { blockers, .. } = &e else { panic!("expected Unsupported, got {e:?}") };
    let ops: Vec<&str> = blockers.iter().map(|b| b.op.as_str()).collect();
    assert_eq!(ops, ["RandomNormal", "IsInf"], "{blockers:?}");
    let text = e.to_string();
    assert_eq!(text.matches("unsupported_many.onnx").count(), 1, "{text}");
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains("2 nodes cannot be converted") && text.contains("IsInf `isinf_7`"), "{text}");
    // One line per blocker, each with at most its remedy (a random draw's is the longest, about
    // 260 characters): no list of the supported ops dumped into the message.
    assert!(text.len() < 800, "no op list dumped into the message: {text}");
    // Ops the importer does not know are listed before tract is asked, all of them, with the
    // remedy for onnxruntime's contrib ops.
    let e = convert(data("contrib_ops.onnx"), &ConvertOptions::default()).unwrap_err();
    let ConvertError::Unsupported { blockers, .. } = &e else { panic!("expected Unsupported, got {e:?}") };
    let ops: Vec<&str> = blockers.iter().map(|b| b.op.as_str()).collect();
    assert_eq!(ops, ["com.microsoft:EmbedLayerNormalization", "com.microsoft:DecoderAttention"], "{blockers:?}");
    assert!(blockers.iter().all(|b| b.remedy.as_deref().is_some_and(|r| r.contains("contrib op"))), "{e}");
}

#[test]
fn bad_files_are_typed_errors() {
    let missing = convert(data("nope.onnx"), &ConvertOptions::default());
    assert!(matches!(missing, Err(ConvertError::Io { .. })), "{missing:?}");
    let not_onnx = convert(data("make_models.py"), &ConvertOptions::default());
    assert!(matches!(not_onnx, Err(ConvertError::Tract { .. })), "{not_onnx:?}");
    let conv = convert(data("mlp.onnx"), &ConvertOptions::default()).unwrap();
    let wrong = verify(data("mlp.onnx"), &conv.kes, &inputs("misc", 1, 1));
    assert!(matches!(wrong, Err(ConvertError::Verify { .. })), "{wrong:?}");
}

#[test]
fn verify_numbers_are_consistent() {
    let conv = convert(data("mlp.onnx"), &ConvertOptions::default()).unwrap();
    let v = verify(data("mlp.onnx"), &conv.kes, &inputs("mlp", 3, 5)).unwrap();
    assert_eq!(v.batch, 3);
    assert_eq!(v.rows, 3);
    assert_eq!(v.tract.len(), 1);
    assert_eq!(v.tract[0].len(), 30);
    let max_abs = v.tract[0].iter().zip(&v.kestrel[0]).map(|(a, b)| f64::from((a - b).abs())).fold(0.0, f64::max);
    assert_eq!(v.max_abs_err, max_abs);
    let max_ref = v.tract[0].iter().map(|a| f64::from(a.abs())).fold(0.0, f64::max);
    assert!((v.max_rel_err - max_abs / max_ref).abs() < 1e-12);
    assert_eq!(v.top1_agreement, 1.0);
    // Probabilities: each row sums to 1.
    for row in v.kestrel[0].chunks(10) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}

#[test]
fn report_round_trips_through_json() {
    let conv = convert(data("vit.onnx"), &opts(DType::I8)).unwrap();
    let r = &conv.report;
    println!("{}", r.to_table());
    assert_eq!(r.model, "vit");
    assert_eq!(r.kes_bytes as usize, conv.kes.len());
    assert!(r.params > 0 && r.arena_bytes_per_sample > 0);
    // The hand-built ViT's attention fuses (no Softmax left), and its patchifying conv plus
    // token transpose becomes one patch embedding.
    let ops = &r.kestrel_ops;
    assert!(ops.get("PatchEmbed") == Some(&1) && ops.get("Attention") == Some(&1), "{ops:?}");
    assert!(!ops.contains_key("Conv2d") && !ops.contains_key("Transpose"), "{ops:?}");
    assert!(!r.kestrel_ops.contains_key("Softmax"));
    assert!(r.weights.iter().any(|w| w.dtype == "int8" && w.sqnr_db.is_some_and(|d| d > 30.0)));
    assert!(r.weights.iter().filter(|w| w.shape.len() <= 1).all(|w| w.dtype == "f32" && w.sqnr_db.is_none()));
    let back: Report = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(&back, r);
}

#[test]
fn metadata_describes_inputs_and_outputs() {
    let conv = convert(data("text.onnx"), &ConvertOptions::default()).unwrap();
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let cpu = model.cpu().unwrap();
    let meta = cpu.file().meta();
    assert_eq!(meta.model_name(), "text");
    let input = meta.inputs().next().unwrap();
    assert_eq!(input.name, "ids");
    assert_eq!(input.feed, kestrel_rt::format::FeedDType::I64);
    let conv = convert(data("vit.onnx"), &ConvertOptions::default()).unwrap();
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let input = model.cpu().unwrap().input(0).unwrap();
    // The graph input has the ONNX shape without its batch axis ([N, 1, 16, 16] → [1, 16, 16]).
    assert_eq!(input.shape.dims(), [1, 16, 16]);
}

#[test]
fn fusions_are_reported() {
    let count = |r: &Report, name: &str| r.fused.iter().find(|f| f.name == name).map_or(0, |f| f.count);
    let mlp = convert(data("mlp.onnx"), &ConvertOptions::default()).unwrap().report;
    assert_eq!((count(&mlp, "dense+bias"), count(&mlp, "dense+relu"), count(&mlp, "dense+gelu")), (3, 1, 1));
    assert_eq!(mlp.kestrel_ops.get("Dense"), Some(&3));
    assert!(!mlp.kestrel_ops.contains_key("Unary"), "{:?}", mlp.kestrel_ops);
    let vit = convert(data("vit.onnx"), &ConvertOptions::default()).unwrap().report;
    assert_eq!(count(&vit, "layer-norm"), 3);
    assert_eq!(vit.kestrel_ops.get("LayerNorm"), Some(&3));
    assert_eq!(count(&vit, "dense+relu"), 1);
}

/// Hard sigmoid (`hard_sigmoid.onnx`, every pre-activation past both kinks somewhere): ONNX
/// HardSigmoid (α 1/6, β 1/2) and `relu6(x + 3)/6` written out (Add, Clip, Div) become the
/// activation of the Dense or Conv2d before them (one of each per layer kind), the `× 1/6` form
/// on a Dense output that a residual Add also reads becomes one `Unary HardSigmoid`, and
/// HardSigmoid with ONNX's default α = 0.2 stays arithmetic, one element-wise chain. The result
/// matches tract.
#[test]
fn hard_sigmoid_fuses_into_its_producer_or_a_unary() {
    use kestrel_rt::format::ops::{Activation, BinaryOp, ChainStep, Op, UnaryOp};
    let count = |r: &Report, name: &str| r.fused.iter().find(|f| f.name == name).map_or(0, |f| f.count);
    let conv = convert(data("hard_sigmoid.onnx"), &ConvertOptions::default()).unwrap();
    let r = &conv.report;
    let found = (count(r, "dense+hardsigmoid"), count(r, "conv+hardsigmoid"), count(r, "hardsigmoid"));
    assert_eq!(found, (2, 2, 1), "{:?}", r.fused);
    let bytes = kestrel_rt::format::aligned_copy(&conv.kes);
    let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
    let ops: Vec<Op> = (0..f.op_count()).map(|n| f.op(n).unwrap()).collect();
    let fused = |want: Activation| {
        ops.iter()
            .filter(|o| match o {
                Op::Dense(d) => d.act == want,
                Op::Conv2d(c) => c.act == want,
                _ => false,
            })
            .count()
    };
    assert_eq!(fused(Activation::HardSigmoid), 4);
    let unary = |u: UnaryOp| ops.iter().filter(|o| matches!(o, Op::Unary(x) if x.op == u)).count();
    assert_eq!((unary(UnaryOp::HardSigmoid), unary(UnaryOp::Relu)), (1, 0));
    // Left as Binary: the residual Add; α = 0.2's Mul, Add, Min and Relu (its Max 0) are one
    // element-wise chain.
    let binary: Vec<BinaryOp> =
        ops.iter().filter_map(|o| if let Op::Binary(b) = o { Some(b.op) } else { None }).collect();
    assert_eq!(binary, [BinaryOp::Add], "{:?}", r.kestrel_ops);
    let chains: Vec<Vec<ChainStep>> = ops
        .iter()
        .filter_map(|o| if let Op::Chain(c) = o { Some(c.steps.as_slice().to_vec()) } else { None })
        .collect();
    let scalar = |op| ChainStep::Binary { op, c_first: false, per_channel: false };
    let alpha = [scalar(BinaryOp::Mul), scalar(BinaryOp::Add), scalar(BinaryOp::Min), ChainStep::Unary(UnaryOp::Relu)];
    assert_eq!(chains, [alpha.to_vec()], "{:?}", r.kestrel_ops);
    check("hard_sigmoid", DType::F32, 1e-5);
}

#[test]
fn npy_inputs_feed_verify() {
    let ids = read_npy(data("text_ids.npy")).unwrap();
    assert_eq!(ids.shape, [2, 8]);
    assert!(matches!(&ids.data, InputData::I64(v) if v[1] == 7));
    let conv = convert(data("text.onnx"), &ConvertOptions::default()).unwrap();
    let v = verify(data("text.onnx"), &conv.kes, &[ids]).unwrap();
    assert!(v.max_rel_err < 1e-4, "{}", v.max_rel_err);
    let out = std::env::temp_dir().join(format!("kestrel-rt-onnx-{}.npy", std::process::id()));
    write_npy_f32(&out, &[2, 4], &v.kestrel[0]).unwrap();
    let back = read_npy(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    assert_eq!(back, InputTensor::f32(&[2, 4], v.kestrel[0].clone()));
    let err = read_npy(data("mlp.onnx")).unwrap_err();
    assert!(err.to_string().contains("not a .npy file"), "{err}");
}

/// `--calibrate`: the inputs of the int8 projections (dense layers and the fused attention's
/// Q/K/V) get scales `max|x| / 127` over the calibration samples, stored in the file; the model
/// then runs those products in integers (its outputs change) and still agrees with tract.
#[test]
fn calibrated_int8_activations() {
    let dir = std::env::temp_dir().join(format!("kestrel-calib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cal = dir.join("cal.npy");
    let samples = inputs("vit", 32, 21);
    let InputData::F32(values) = &samples[0].data else { unreachable!() };
    write_npy_f32(&cal, &samples[0].shape, values).unwrap();
    let plain = convert(data("vit.onnx"), &opts(DType::I8)).unwrap();
    let o = ConvertOptions { weights: DType::I8, calibrate: vec![cal.clone()], ..Default::default() };
    let conv = convert(data("vit.onnx"), &o).unwrap();
    let c = conv.report.calibration.as_ref().expect("calibration report");
    println!("{}", conv.report.to_table());
    assert_eq!(c.samples, 32);
    assert!(c.tensors.iter().any(|t| t.consumers.iter().any(|k| k == "Attention")), "{c:?}");
    assert!(c.tensors.iter().any(|t| t.consumers.iter().any(|k| k == "Dense")), "{c:?}");
    for t in &c.tensors {
        assert!(t.abs_max > 0.0 && (t.scale - t.abs_max / 127.0).abs() <= 1e-6 * t.scale, "{t:?}");
    }
    // The scales are in the file, on activations only.
    let aligned = kestrel_rt::format::aligned_copy(&conv.kes);
    let file = kestrel_rt::format::KesFile::parse(&aligned).unwrap();
    let stored: Vec<f32> = (0..file.tensor_count()).filter_map(|i| file.tensor(i).unwrap().act_scale).collect();
    assert_eq!(stored.len(), c.tensors.len());
    let mut want: Vec<f32> = c.tensors.iter().map(|t| t.scale).collect();
    let mut got = stored.clone();
    want.sort_by(f32::total_cmp);
    got.sort_by(f32::total_cmp);
    assert_eq!(got, want);
    // Integer products change the outputs, within int8 accuracy of tract's f32.
    let test = inputs("vit", 8, 22);
    let a = kestrel_rt_onnx::run_kestrel(&plain.kes, &test).unwrap();
    let b = kestrel_rt_onnx::run_kestrel(&conv.kes, &test).unwrap();
    assert_ne!(a, b, "calibrated scales were not used");
    let v = verify(data("vit.onnx"), &conv.kes, &test).unwrap();
    println!("calibrated int8: max rel {:.3e}, top-1 {:.3}", v.max_rel_err, v.top1_agreement);
    assert!(v.max_rel_err < 0.05, "{}", v.max_rel_err);
    // Bad calibration requests are errors: f32 weights (nothing to calibrate), wrong arity.
    let f32_cal = ConvertOptions { calibrate: vec![cal.clone()], ..Default::default() };
    let e = convert(data("vit.onnx"), &f32_cal).unwrap_err().to_string();
    assert!(e.starts_with("calibrate:") && e.contains("int8 or int4 weights"), "{e}");
    let two = ConvertOptions { weights: DType::I8, calibrate: vec![cal.clone(), cal.clone()], ..Default::default() };
    let e = convert(data("vit.onnx"), &two).unwrap_err().to_string();
    assert!(e.contains("one calibration array per model input"), "{e}");
    let wrong = dir.join("wrong.npy");
    write_npy_f32(&wrong, &[2, 5], &[0.5; 10]).unwrap();
    let o = ConvertOptions { weights: DType::I8, calibrate: vec![wrong], ..Default::default() };
    assert!(convert(data("vit.onnx"), &o).is_err());
    std::fs::remove_dir_all(&dir).ok();
}

/// `--int8-attention` (with `--calibrate`): every fused attention op of the MNIST ViT fixture
/// (T = 64, d = 64: the int8 path, not the small-head one) gets int8 internals in the file, the
/// outputs change and stay close to tract's f32, and the report measures the cost on the
/// calibration samples and the held-out fifth, against the f32 model and f32 internals.
#[test]
fn int8_attention_internals() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mnist_vit_standard_h1");
    let (model, cal) = (dir.join("model.onnx"), dir.join("input.npy"));
    let calibrated = ConvertOptions { weights: DType::I8, calibrate: vec![cal.clone()], ..Default::default() };
    let o = ConvertOptions { int8_attention: true, ..calibrated.clone() };
    let conv = convert(&model, &o).unwrap();
    println!("{}", conv.report.to_table());
    let r = conv.report.int8_internals.as_ref().expect("int8 internals report");
    assert_eq!((r.attention_ops, r.int8_ops), (2, 2));
    // 4 samples: 3 calibrate, 1 held out.
    assert_eq!(conv.report.calibration.as_ref().unwrap().samples, 3);
    assert_eq!((r.calibration_vs_f32.samples, r.held_out_vs_f32.as_ref().unwrap().samples), (3, 1));
    for a in [&r.calibration_vs_f32, &r.calibration_vs_f32_internals, r.held_out_vs_f32.as_ref().unwrap()] {
        assert!(a.max_abs_err > 0.0 && a.max_rel_err < 0.1, "{a:?}");
        assert!((0.0..=1.0).contains(&a.top1_agreement) && a.rows == a.samples, "{a:?}");
    }
    let aligned = kestrel_rt::format::aligned_copy(&conv.kes);
    let file = kestrel_rt::format::KesFile::parse(&aligned).unwrap();
    let mut seen = 0;
    for op in file.ops() {
        if let kestrel_rt::format::ops::Op::Attention(a) = op.unwrap() {
            assert_eq!(a.internals, kestrel_rt::format::ops::Internals::Int8);
            seen += 1;
        }
    }
    assert_eq!(seen, 2);
    let test = vec![kestrel_rt_onnx::read_npy(&cal).unwrap()];
    let plain = convert(&model, &calibrated).unwrap();
    let a = kestrel_rt_onnx::run_kestrel(&plain.kes, &test).unwrap();
    let b = kestrel_rt_onnx::run_kestrel(&conv.kes, &test).unwrap();
    assert_ne!(a, b, "the int8 internals were not used");
    let v = verify(&model, &conv.kes, &test).unwrap();
    println!("int8 internals vs tract: max rel {:.3e}, top-1 {:.3}", v.max_rel_err, v.top1_agreement);
    assert!(v.max_rel_err < 0.1, "{}", v.max_rel_err);
    // Without calibration data the option is refused, naming what is missing.
    let e = convert(&model, &ConvertOptions { weights: DType::I8, int8_attention: true, ..Default::default() })
        .unwrap_err()
        .to_string();
    assert!(e.contains("--int8-attention") && e.contains("--calibrate"), "{e}");
}

/// The progress hooks see every stage, and one lowering step per tract node.
#[test]
fn progress_reports_stages_and_lowering_steps() {
    #[derive(Default)]
    struct Log(Vec<(String, u64, u64)>);
    impl kestrel_rt_onnx::Progress for Log {
        fn stage(&mut self, name: &str, steps: u64) {
            self.0.push((name.to_string(), steps, 0));
        }
        fn step(&mut self) {
            if let Some(s) = self.0.last_mut() {
                s.2 += 1;
            }
        }
    }
    let mut log = Log::default();
    let conv = kestrel_rt_onnx::convert_with_progress(data("vit.onnx"), &opts(DType::I8), &mut log).unwrap();
    let names: Vec<&str> = log.0.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names[0].starts_with("loading") && names[1] == "lowering" && names[2].starts_with("fusing"), "{names:?}");
    let (_, steps, done) = &log.0[1];
    assert_eq!((*steps as usize, *done), (conv.report.tract_nodes, *steps));
}
