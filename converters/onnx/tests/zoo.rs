//! The real-world zoo (`converters/zoo/`, written by `python -m kestrel_torch.zoo`): common
//! architectures from torch.nn, transformers and timm, each exported with the legacy and the
//! dynamo exporter. Every one converts and matches onnxruntime's output within 1e-4 (relative to
//! the output's scale), except the ones listed in [`BLOCKED`], which must fail with a blocker
//! naming the ONNX op — and must be removed from the list the day they convert.

use crate::common;

use common::gpu;
use kestrel_rt::Input;
use kestrel_rt_onnx::{
    compare, convert, model_dirs, read_npy, run_kestrel, ConvertError, ConvertOptions, DType, InputData, InputTensor,
    ONNX_OPS,
};
use kestrel_rt_wgpu::GpuSession;
use std::path::{Path, PathBuf};

/// Zoo models that do not convert yet: (name prefix, the ONNX op that blocks them).
const BLOCKED: &[(&str, &str)] = &[];

/// Exports committed under `converters/zoo/`.
const COMMITTED: usize = 35;

const REL_TOL: f64 = 1e-4;

fn zoo() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../zoo");
    let dirs = model_dirs(&dir).unwrap_or_else(|e| panic!("no zoo at {}: {e}", dir.display()));
    assert_eq!(dirs.len(), COMMITTED, "zoo exports in {}", dir.display());
    dirs
}

fn inputs(d: &Path) -> Vec<InputTensor> {
    let mut v = vec![read_npy(d.join("input.npy")).unwrap()];
    for i in 1.. {
        let p = d.join(format!("input{i}.npy"));
        if !p.exists() {
            break;
        }
        v.push(read_npy(p).unwrap());
    }
    v
}

#[test]
fn every_zoo_model_converts_and_matches_onnxruntime() {
    let mut failures = Vec::new();
    let mut converted = 0;
    for d in zoo() {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("meta.json")).unwrap()).unwrap();
        let result = convert(d.join("model.onnx"), &ConvertOptions::default());
        if let Some((_, op)) = BLOCKED.iter().find(|(p, _)| name.starts_with(p)) {
            match result {
                Err(ConvertError::Unsupported { blockers, .. }) if blockers.iter().any(|b| b.op == *op) => {
                    println!("{name}: blocked as expected by {op}");
                }
                Ok(_) => failures.push(format!("{name} converts now: remove it from BLOCKED")),
                Err(e) => failures.push(format!("{name}: expected a blocker naming {op}, got: {e}")),
            }
            continue;
        }
        let conv = match result {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let expected = read_npy(d.join("output.npy")).unwrap();
        let InputData::F32(want) = expected.data else { panic!("{name}: output.npy is not f32") };
        let got = match run_kestrel(&conv.kes, &inputs(&d)) {
            Ok(g) => g,
            Err(e) => {
                failures.push(format!("{name}: run: {e}"));
                continue;
            }
        };
        let last = expected.shape.last().copied().unwrap_or(1);
        let (abs, rel, top1, _) = compare(&[want], &got[..1], &[last]).unwrap();
        println!(
            "{name}: max abs {abs:.2e}, rel {rel:.2e}, top-1 agreement {top1:.2}, {} Kestrel nodes",
            conv.report.kestrel_nodes
        );
        if rel > REL_TOL {
            failures.push(format!("{name}: relative error {rel:.2e} > {REL_TOL:.0e}"));
        }
        if let Err(e) = masked_attention_fused(&name, &meta, &conv) {
            failures.push(format!("{name}: {e}"));
        }
        if let Err(e) = no_subsampling_pools(&name, &meta, &conv) {
            failures.push(format!("{name}: {e}"));
        }
        // Every ONNX op of a model that converts is in the documented table.
        for op in meta["onnx_ops"].as_object().unwrap().keys() {
            if !ONNX_OPS.iter().any(|o| o.op == op) {
                failures.push(format!("{name}: converts with ONNX op {op}, missing from ONNX_OPS"));
            }
        }
        converted += 1;
    }
    println!("{converted} zoo exports converted");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// ResNet's strided 1×1 shortcut convolutions (tract's per-axis `Downsample`, lowered to 1×1
/// max pools) are folded back into strided `Conv2d`s: the only pools left are the ONNX model's
/// own pools.
fn no_subsampling_pools(
    name: &str,
    meta: &serde_json::Value,
    conv: &kestrel_rt_onnx::Conversion,
) -> Result<(), String> {
    if !name.starts_with("resnet18") {
        return Ok(());
    }
    let onnx =
        ["MaxPool", "AveragePool", "GlobalMaxPool"].iter().filter_map(|o| meta["onnx_ops"][o].as_u64()).sum::<u64>();
    let pools = conv.report.kestrel_ops.get("Pool2d").copied().unwrap_or(0) as u64;
    if pools != onnx {
        return Err(format!(
            "{pools} Pool2d nodes for {onnx} ONNX pools (subsamplings not folded), rejected: {:?}",
            conv.report.fusion_rejected
        ));
    }
    Ok(())
}

/// timm's ConvNeXt (both exports): every `LayerNorm2d` (permute → layer_norm → permute back)
/// runs as one channels-first `LayerNorm` with no `Transpose` left, every layer scale (`Mul` by
/// γ `[C, 1, 1]` after a block's last 1×1 conv) is folded into that conv, and the result still
/// matches onnxruntime within the zoo's tolerance.
#[test]
fn convnext_runs_channels_first_with_its_layer_scales_folded() {
    use kestrel_rt::format::ops::{BinaryOp, NormAxis, Op};
    for name in ["convnext_atto-legacy17", "convnext_atto-dynamo18"] {
        let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../zoo").join(name);
        let conv = convert(d.join("model.onnx"), &ConvertOptions::default()).unwrap();
        let r = &conv.report;
        assert_eq!(r.kestrel_ops.get("Transpose"), None, "{name}: {:?}", r.kestrel_ops);
        let fused = |p: &str| r.fused.iter().find(|f| f.name == p).map_or(0, |f| f.count);
        // The stem, three downsamples and four blocks; four blocks with a layer scale each.
        assert_eq!((fused("layer-norm (channels-first)"), fused("conv+scale")), (8, 4), "{name}: {:?}", r.fused);
        assert!(r.fusion_rejected.is_empty(), "{name}: {:?}", r.fusion_rejected);
        let bytes = kestrel_rt::format::aligned_copy(&conv.kes);
        let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
        let ops: Vec<Op> = (0..f.op_count()).map(|n| f.op(n).unwrap()).collect();
        let muls = ops.iter().filter(|o| matches!(o, Op::Binary(b) if b.op == BinaryOp::Mul)).count();
        let channels = ops.iter().filter(|o| matches!(o, Op::LayerNorm(l) if l.axis == NormAxis::Channels)).count();
        assert_eq!((muls, channels), (0, 8), "{name}");
        let expected = read_npy(d.join("output.npy")).unwrap();
        let InputData::F32(want) = expected.data else { panic!("{name}: output.npy is not f32") };
        let got = run_kestrel(&conv.kes, &inputs(&d)).unwrap();
        let last = expected.shape.last().copied().unwrap_or(1);
        let (abs, rel, top1, _) = compare(&[want], &got[..1], &[last]).unwrap();
        println!("{name}: max abs {abs:.2e}, rel {rel:.2e}, top-1 agreement {top1:.2}");
        assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e} > {REL_TOL:.0e}");
    }
}

/// MobileNetV3's squeeze-excitation gates, ONNX HardSigmoid (α = 1/6, β = 1/2; tract expands
/// each into `Mul`, `Add`, `Min` and `Max`), become the activation of the SE block's second
/// Dense in both exports: one `dense+hardsigmoid` per HardSigmoid node, no Binary Min or Max
/// left, no Binary with a one-element constant (what the gate's steps were: 44 Binary and 10
/// Unary ops before, 17 and 1 after), and the output still matches onnxruntime's.
#[test]
fn mobilenetv3_gates_fuse_into_their_dense_layers() {
    use kestrel_rt::format::ops::{Activation, BinaryOp, Op};
    for name in ["mobilenetv3-legacy17", "mobilenetv3-dynamo18"] {
        let d = zoo().into_iter().find(|d| d.ends_with(name)).unwrap_or_else(|| panic!("{name} not in the zoo"));
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("meta.json")).unwrap()).unwrap();
        let gates = meta["onnx_ops"]["HardSigmoid"].as_u64().unwrap() as usize;
        assert!(gates > 0, "{name}: no HardSigmoid in the export");
        let conv = convert(d.join("model.onnx"), &ConvertOptions::default()).unwrap();
        let fused = conv.report.fused.iter().find(|f| f.name == "dense+hardsigmoid").map_or(0, |f| f.count);
        assert_eq!(fused, gates, "{name}: {:?}", conv.report.fused);
        let bytes = kestrel_rt::format::aligned_copy(&conv.kes);
        let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
        let ops: Vec<Op> = (0..f.op_count()).map(|n| f.op(n).unwrap()).collect();
        let dense_gates = ops.iter().filter(|o| matches!(o, Op::Dense(d) if d.act == Activation::HardSigmoid)).count();
        assert_eq!(dense_gates, gates, "{name}");
        let scalar = |t: u32| f.weight(t).is_ok_and(|w| w.len() == 1);
        let binary: Vec<_> = ops.iter().filter_map(|o| if let Op::Binary(b) = o { Some(*b) } else { None }).collect();
        for b in &binary {
            assert!(matches!(b.op, BinaryOp::Add | BinaryOp::Mul), "{name}: a Binary {:?} is left", b.op);
            assert!(!scalar(b.a) && !scalar(b.b), "{name}: a Binary {:?} with a scalar constant is left", b.op);
        }
        let expected = read_npy(d.join("output.npy")).unwrap();
        let InputData::F32(want) = expected.data else { panic!("{name}: output.npy is not f32") };
        let got = run_kestrel(&conv.kes, &inputs(&d)).unwrap();
        let (_, rel, _, _) = compare(&[want], &got[..1], &[*expected.shape.last().unwrap()]).unwrap();
        println!("{name}: {gates} gates fused, {} Binary ops left, relative error {rel:.2e}", binary.len());
        assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e} > {REL_TOL:.0e}");
    }
}

/// HF BERT and DistilBERT (an `attention_mask` input): every attention layer (one ONNX Softmax
/// each) is one fused `Attention` node with the padding mask as its mask input, and no softmax
/// is left. `nn.TransformerEncoder`, the ViTs (timm's vit_tiny and deit, HF ViT) and MobileViT
/// (attention over each patch pixel's tokens: `[G, T, d]` nodes, its packed qkv split): every
/// layer fused (no mask). Other models (LeViT's per-head biases): nothing required.
fn masked_attention_fused(
    name: &str,
    meta: &serde_json::Value,
    conv: &kestrel_rt_onnx::Conversion,
) -> Result<(), String> {
    let masked = name.starts_with("bert-") || name.starts_with("distilbert-");
    let unmasked = ["torch_encoder-", "vit_tiny-", "deit_tiny", "hf_vit-", "mobilevit_xxs-"];
    if !masked && !unmasked.iter().any(|p| name.starts_with(p)) {
        return Ok(());
    }
    let layers = meta["onnx_ops"]["Softmax"].as_u64().ok_or("meta.json lists no Softmax")? as usize;
    let ops = &conv.report.kestrel_ops;
    let attention = ops.get("Attention").copied().unwrap_or(0);
    if attention != layers || ops.contains_key("Softmax") {
        return Err(format!(
            "{attention} fused Attention nodes for {layers} layers, kestrel ops {ops:?}, rejected: {:?}",
            conv.report.fusion_rejected
        ));
    }
    if !masked {
        return Ok(());
    }
    let bytes = kestrel_rt::format::aligned_copy(&conv.kes);
    let f = kestrel_rt::format::KesFile::parse(&bytes).map_err(|e| e.to_string())?;
    let masked = (0..f.op_count())
        .filter(|&n| matches!(f.op(n), Ok(kestrel_rt::format::ops::Op::Attention(a)) if a.mask.is_some()))
        .count();
    if masked != layers {
        return Err(format!("{masked} of {layers} Attention nodes have a mask input"));
    }
    println!("{name}: {layers} attention layers fused with their padding mask");
    Ok(())
}

/// The same models on the wgpu backend (f32 arithmetic): within 1e-4 of onnxruntime too.
#[test]
fn every_converted_zoo_model_matches_onnxruntime_on_the_gpu() {
    let Some(ctx) = gpu() else { return };
    println!("GPU: {}", ctx.describe());
    let mut failures = Vec::new();
    for d in zoo() {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        if BLOCKED.iter().any(|(p, _)| name.starts_with(p)) {
            continue;
        }
        let conv = convert(d.join("model.onnx"), &ConvertOptions::default()).unwrap();
        let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
        let cpu = model.cpu().unwrap();
        let feeds = inputs(&d);
        let batch = feeds[0].shape[0];
        let expected = read_npy(d.join("output.npy")).unwrap();
        let InputData::F32(want) = expected.data else { panic!("{name}: output.npy is not f32") };
        let mut got = vec![0f32; want.len()];
        let ins: Vec<Input<'_>> = feeds.iter().map(InputTensor::as_input).collect();
        let run = GpuSession::new(&ctx, &cpu, batch).and_then(|mut s| s.run(&ins, &mut [got.as_mut_slice()]));
        if let Err(e) = run {
            failures.push(format!("{name}: wgpu: {e}"));
            continue;
        }
        let last = expected.shape.last().copied().unwrap_or(1);
        let (abs, rel, _, _) = compare(&[want], &[got], &[last]).unwrap();
        println!("{name}: wgpu max abs {abs:.2e}, rel {rel:.2e}");
        if rel > REL_TOL {
            failures.push(format!("{name}: wgpu relative error {rel:.2e} > {REL_TOL:.0e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// int8 weights: top-1 agreement with onnxruntime's f32 output, reported (random weights make
/// it indicative only) and required to stay above chance.
#[test]
fn int8_top1_agreement_is_reported() {
    let opts = ConvertOptions { weights: DType::I8, ..ConvertOptions::default() };
    for d in zoo() {
        let name = d.file_name().unwrap().to_string_lossy().to_string();
        if BLOCKED.iter().any(|(p, _)| name.starts_with(p)) {
            continue;
        }
        let conv = convert(d.join("model.onnx"), &opts).unwrap();
        let expected = read_npy(d.join("output.npy")).unwrap();
        let InputData::F32(want) = expected.data else { panic!("{name}: output.npy is not f32") };
        let got = run_kestrel(&conv.kes, &inputs(&d)).unwrap();
        let last = expected.shape.last().copied().unwrap_or(1);
        let (_, rel, top1, _) = compare(&[want], &got[..1], &[last]).unwrap();
        println!("{name}: int8 top-1 agreement {top1:.2}, max rel {rel:.2e}, {} bytes", conv.kes.len());
        assert!(rel.is_finite(), "{name}: int8 output not finite");
    }
}
