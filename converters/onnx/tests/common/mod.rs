//! What the integration tests that run converted models on the GPU share.

use kestrel_rt_wgpu::{AdapterChoice, GpuContext, GpuError};

/// The GPU device, or `None` (with a message) when there is none and `KESTREL_REQUIRE_GPU` is
/// not set (`.ci/run` sets it after installing lavapipe).
pub fn gpu() -> Option<GpuContext> {
    match GpuContext::new(&AdapterChoice::from_env_or(None)) {
        Ok(c) => Some(c),
        Err(e @ GpuError::NoAdapter { .. }) => {
            assert!(!std::env::var("KESTREL_REQUIRE_GPU").is_ok_and(|v| v == "1"), "KESTREL_REQUIRE_GPU=1 but {e}");
            eprintln!("SKIPPED: {e} (set KESTREL_REQUIRE_GPU=1 to make this a failure)");
            None
        }
        Err(e) => panic!("opening the GPU: {e}"),
    }
}

/// Converts `onnx` (written to a temporary file named after `name`) with the default options and
/// runs it on `inputs` at batch 1 on the CPU and, when there is one, on the GPU: the first
/// output (`n_out` elements) from each backend, or the first error as text.
#[allow(dead_code)]
pub fn convert_and_run(
    name: &str,
    onnx: &[u8],
    inputs: &[kestrel_rt::Input<'_>],
    n_out: usize,
) -> Result<Vec<Vec<f32>>, String> {
    let path = std::env::temp_dir().join(format!("kestrel-test-{}-{name}.onnx", std::process::id()));
    std::fs::write(&path, onnx).map_err(|e| e.to_string())?;
    let conv = kestrel_rt_onnx::convert(&path, &kestrel_rt_onnx::ConvertOptions::default()).map_err(|e| e.to_string());
    std::fs::remove_file(&path).ok();
    let model = kestrel_rt::Model::from_bytes(&conv?.kes).map_err(|e| e.to_string())?;
    let mut y = vec![0f32; n_out];
    model.session(1).map_err(|e| e.to_string())?.run(inputs, &mut [&mut y]).map_err(|e| e.to_string())?;
    let mut outs = vec![y];
    if let Some(ctx) = gpu() {
        let cpu = model.cpu().map_err(|e| e.to_string())?;
        let mut g = vec![0f32; n_out];
        kestrel_rt_wgpu::GpuSession::new(&ctx, &cpu, 1)
            .and_then(|mut s| s.run(inputs, &mut [g.as_mut_slice()]))
            .map_err(|e| format!("wgpu: {e}"))?;
        outs.push(g);
    }
    Ok(outs)
}

/// Runs the converted file `kes` on `feeds` on the CPU and, when there is one, on the GPU (a
/// session of the feeds' batch), each first output compared with `want` (onnxruntime's saved
/// output, `last` its last axis, as `kestrel_rt_onnx::compare` takes it): the relative error of
/// each is printed and must be at most `tol`.
#[allow(dead_code)]
pub fn matches_onnxruntime(
    name: &str,
    kes: &[u8],
    feeds: &[kestrel_rt_onnx::InputTensor],
    want: &[f32],
    last: usize,
    tol: f64,
) {
    use kestrel_rt_onnx::{compare, run_kestrel};
    let got = run_kestrel(kes, feeds).unwrap();
    let (abs, rel, _, _) = compare(&[want.to_vec()], &got[..1], &[last]).unwrap();
    println!("{name}: CPU vs onnxruntime: max abs {abs:.2e}, rel {rel:.2e}");
    assert!(rel <= tol, "{name}: relative error {rel:.2e} over {tol:.0e}");

    let Some(ctx) = gpu() else { return };
    let model = kestrel_rt::Model::from_bytes(kes).unwrap();
    let cpu = model.cpu().unwrap();
    let ins: Vec<kestrel_rt::Input<'_>> = feeds.iter().map(kestrel_rt_onnx::InputTensor::as_input).collect();
    let mut out = vec![0f32; want.len()];
    kestrel_rt_wgpu::GpuSession::new(&ctx, &cpu, feeds[0].shape[0])
        .unwrap()
        .run(&ins, &mut [out.as_mut_slice()])
        .unwrap();
    let (abs, rel, _, _) = compare(&[want.to_vec()], &[out], &[last]).unwrap();
    println!("{name}: wgpu vs onnxruntime: max abs {abs:.2e}, rel {rel:.2e}");
    assert!(rel <= tol, "{name}: wgpu relative error {rel:.2e} over {tol:.0e}");
}

/// Converts fixture `tests/data/<stem>.onnx` with the default options: no softmax left, nothing
/// reported unfused, `sdpa` Sdpa nodes; then [`matches_onnxruntime`] on `<stem>_in.npy` against
/// `<stem>_out.npy` (onnxruntime's output) within 1e-4.
#[allow(dead_code)]
pub fn fixture_fuses_every_softmax(stem: &str, sdpa: usize) {
    use kestrel_rt_onnx::{convert, read_npy, ConvertOptions, InputData};
    let data = |s: String| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(s);
    let conv = convert(data(format!("{stem}.onnx")), &ConvertOptions::default()).unwrap();
    let ops = &conv.report.kestrel_ops;
    assert!(!ops.contains_key("Softmax"), "{stem}: {ops:?}, {:?}", conv.report.unfused_attention);
    assert!(conv.report.unfused_attention.is_empty(), "{stem}: {:?}", conv.report.unfused_attention);
    assert_eq!(ops.get("Sdpa"), Some(&sdpa), "{stem}: {ops:?}, rejected: {:?}", conv.report.fusion_rejected);
    let x = read_npy(data(format!("{stem}_in.npy"))).unwrap();
    let y = read_npy(data(format!("{stem}_out.npy"))).unwrap();
    let last = *y.shape.last().unwrap();
    let InputData::F32(want) = y.data else { panic!("{stem}: output is not f32") };
    matches_onnxruntime(stem, &conv.kes, &[x], &want, last, 1e-4);
}
