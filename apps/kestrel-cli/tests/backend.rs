//! `kestrel run --backend cpu|wgpu|auto`, `--adapter`, and `kestrel devices`, run as a user would.
//! The GPU cases skip (with a message) when no adapter exists, unless `KESTREL_REQUIRE_GPU=1`.

use kestrel_rt::npy::{self, Array};

use crate::support;
use support::{have_gpu, kestrel};

fn f32s(path: &std::path::Path) -> Vec<f32> {
    match npy::read(path).unwrap() {
        Array::F32 { data, .. } => data,
        Array::I64 { .. } => panic!("expected f32"),
    }
}

#[test]
fn run_on_every_backend_gives_the_same_outputs() {
    let dir = support::scratch_dir("cli-backend");
    let model = dir.join("demo.kes");
    std::fs::write(&model, kestrel_rt::demo::image_model(3, kestrel_rt::format::DType::I8).unwrap()).unwrap();
    let input = dir.join("x.npy");
    npy::write_f32(&input, &[3, 1, 16, 16], &kestrel_rt::demo::Rng::new(9).vec(3 * 256, 1.0)).unwrap();
    let (m, x) = (model.to_str().unwrap(), input.to_str().unwrap());
    let run = |backend: &str, extra: &[&str]| {
        let out = dir.join(format!("y-{backend}.npy"));
        let mut args = vec!["run", m, "--input", x, "--output", out.to_str().unwrap(), "--backend", backend];
        args.extend_from_slice(extra);
        let (ok, stdout, stderr) = kestrel(&args);
        (ok, stdout, stderr, out)
    };
    let (ok, stdout, stderr, cpu_out) = run("cpu", &[]);
    assert!(ok && stdout.contains("(cpu)"), "{stdout}{stderr}");
    let want = f32s(&cpu_out);
    // auto with an adapter that does not exist: a one-line notice, then the CPU.
    let (ok, stdout, stderr, _) = run("auto", &["--adapter", "no-such-adapter"]);
    assert!(ok && stdout.contains("(cpu)"), "{stdout}{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.starts_with("notice:")).count(), 1, "{stderr}");
    if !have_gpu() {
        let (ok, _, stderr, _) = run("wgpu", &[]);
        assert!(!ok && stderr.starts_with("error:") && !stderr.contains("panicked"), "{stderr}");
        return;
    }
    // wgpu with a bad adapter is an error naming the adapters.
    let (ok, _, stderr, _) = run("wgpu", &["--adapter", "no-such-adapter"]);
    assert!(!ok && stderr.contains("no adapter matches") && !stderr.contains("panicked"), "{stderr}");
    // The third run's budget fits one sample: the batch of 3 runs as 3 chunks on the GPU.
    let one = kestrel_rt::Model::load(&model).unwrap().arena_bytes(1).unwrap().to_string();
    // auto times the named adapter against the CPU, takes the faster and says what it measured.
    for (backend, budget) in [("wgpu", "2GiB"), ("auto", "2GiB"), ("wgpu", one.as_str())] {
        let (ok, stdout, stderr, out) = run(backend, &["--adapter", "0", "--memory-budget", budget]);
        if backend == "auto" {
            assert!(ok && stderr.contains("ms per run"), "{stdout}{stderr}");
            let gpu = stderr.contains("auto chose the GPU");
            assert!(gpu || stderr.contains("the CPU is faster than the GPU"), "{stderr}");
            assert!(stdout.contains(if gpu { "(wgpu:" } else { "(cpu)" }), "{stdout}{stderr}");
        } else {
            assert!(ok && stdout.contains("(wgpu:"), "{backend}: {stdout}{stderr}");
        }
        assert_eq!(stderr.contains("runs in chunks of 1 samples"), budget == one, "{stderr}");
        let got = f32s(&out);
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(err <= 1e-4 * scale, "{backend}: max error {err} vs scale {scale}");
    }
    // `kestrel bench` on the GPU: the JSON names the adapter.
    let (ok, stdout, stderr) =
        kestrel(&["bench", m, "--backend", "wgpu", "--samples", "6", "--batch", "3", "--reps", "2", "--json"]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert!(v["backend"].as_str().unwrap().starts_with("wgpu: "), "{stdout}");
    assert!(v["us_per_sample"].as_f64().unwrap() > 0.0, "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn devices_lists_adapters_with_limits() {
    let (ok, stdout, stderr) = kestrel(&["devices"]);
    assert!(ok, "{stderr}");
    if have_gpu() {
        for needle in ["[0]", "backend", "features", "timestamp-query", "max_storage_buffer_binding_size"] {
            assert!(stdout.contains(needle), "devices output lacks {needle}:\n{stdout}");
        }
        // The limits and features the device is created with: WebGPU's defaults and no optional
        // feature under KESTREL_WGPU_LIMITS=webgpu.
        let (ok, stdout, stderr) = support::kestrel_env(&["devices"], &[("KESTREL_WGPU_LIMITS", "webgpu")]);
        assert!(ok, "{stderr}");
        for needle in [
            "created with WebGPU's default limits",
            "requested   none",
            "max_compute_workgroup_storage_size 16384",
            "max_compute_invocations_per_workgroup 256",
            "max_storage_buffers_per_shader_stage 8",
        ] {
            assert!(stdout.contains(needle), "devices output lacks {needle}:\n{stdout}");
        }
        let (ok, stdout, stderr) = support::kestrel_env(&["devices"], &[("KESTREL_WGPU_LIMITS", "adapter")]);
        assert!(ok && stdout.contains("created with the adapter's limits"), "{stdout}{stderr}");
        let (ok, _, stderr) = support::kestrel_env(&["devices"], &[("KESTREL_WGPU_LIMITS", "phone")]);
        assert!(!ok && stderr.contains("KESTREL_WGPU_LIMITS=\"phone\" is unknown"), "{stderr}");
    } else {
        assert!(stdout.contains("no GPU adapters"), "{stdout}");
    }
}

/// A batch whose activations exceed the adapter's buffer limits (lavapipe binds at most
/// 128 MiB) runs on the GPU in chunks of the largest halving of the batch that fits, with the
/// same numbers as the CPU.
#[test]
fn a_batch_over_the_gpu_buffer_limits_runs_in_chunks() {
    use kestrel_rt::format::ops::{Op, Unary, UnaryOp};
    use kestrel_rt_cli::backend::{Backend, BackendArgs, Runner};
    if !have_gpu() {
        return;
    }
    // 512 KiB per sample in, 512 KiB out: 160 samples take about 160 MiB of activations.
    let n = 1 << 17;
    let batch = 160;
    let mut b = kestrel_rt::ModelBuilder::new("wide");
    let x = b.input("x", &[n]).unwrap();
    let y = b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Relu, y })).unwrap();
    b.output(y);
    let model = kestrel_rt::Model::from_bytes(&b.build().unwrap()).unwrap();
    let data: Vec<f32> = (0..batch * n).map(|i| ((i % 1013) as f32 * 0.37).sin()).collect();
    let want: Vec<f32> = data.iter().map(|v| v.max(0.0)).collect();
    let args = BackendArgs { adapter: Some("0".into()), ..BackendArgs::new(Backend::Wgpu) };
    let mut runner = Runner::new(&model, batch, &args).unwrap();
    assert!(runner.is_gpu());
    let limit = kestrel_rt_wgpu::adapters()[0].limits.max_storage_buffer_binding_size as usize;
    if limit < batch * n * 8 {
        assert!(runner.capacity() < batch, "capacity {} under a {limit}-byte binding limit", runner.capacity());
    }
    let got = runner.run_vec(&[kestrel_rt::Input::F32(&data)]).unwrap().remove(0);
    assert_eq!(got, want);
    // `profile` times the batch as one run: over the limits it says so instead of chunking.
    if limit < batch * n * 8 {
        let path = std::env::temp_dir().join(format!("kestrel-wide-{}.kes", std::process::id()));
        std::fs::write(&path, b.build().unwrap()).unwrap();
        let args = ["profile", path.to_str().unwrap(), "--backend", "wgpu", "--adapter", "0", "--runs", "1", "--batch"];
        let (ok, _, stderr) = kestrel(&[&args[..], &["160"]].concat());
        assert!(!ok && stderr.contains("does not fit") && stderr.contains("samples per run"), "{stderr}");
        std::fs::remove_file(&path).ok();
    }
}
