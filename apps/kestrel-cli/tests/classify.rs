//! `kestrel classify` and `kestrel profile` on the bundled models and sample images, as a user
//! runs them, plus the preprocessing against the PyTorch reference.

use kestrel_rt_cli::classify::{Classifier, BUNDLED};
use kestrel_rt_cli::preprocess::{decode, ImagePrep, InputPrep};
use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::support;
use std::time::Instant;
use support::have_gpu;

/// Preprocessing of lossless files: same f32 arithmetic up to summation order.
const PREP_TOL: f32 = 1e-4;
/// JPEG files: decoders (libjpeg in PIL, zune-jpeg here) may differ by a level or two per pixel,
/// i.e. 2/255/std ≈ 0.02 after normalisation.
const JPEG_TOL: f32 = 0.1;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples")
}

/// `kestrel` run from the repository root (the bundled models' paths are relative to it).
fn kestrel(args: &[&str]) -> (bool, String, String) {
    support::kestrel_in(Some(&root()), args)
}

fn tmp(name: &str) -> PathBuf {
    support::scratch_dir(&format!("classify-{name}"))
}

fn npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    match kestrel_rt::npy::read(path).unwrap() {
        kestrel_rt::npy::Array::F32 { shape, data } => (shape, data),
        other => panic!("{}: expected float32, found {}", path.display(), other.dtype_name()),
    }
}

#[test]
fn preprocessing_matches_the_pytorch_reference() {
    let dir = samples().join("preprocess");
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let clf = Classifier::open(None).unwrap();
    // The reference was computed with the bundled model's own preprocessing.
    let p = &meta["preprocess"];
    assert_eq!(clf.prep.mean, vec![p["mean"][0].as_f64().unwrap() as f32]);
    assert_eq!(clf.prep.std, vec![p["std"][0].as_f64().unwrap() as f32]);
    assert_eq!(clf.prep.size, [28, 28]);
    for (list, npy, tol) in [("files", "reference.npy", PREP_TOL), ("jpeg_files", "reference_jpeg.npy", JPEG_TOL)] {
        let files: Vec<&str> = meta[list].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        let (shape, want) = npy_f32(&dir.join(npy));
        assert_eq!(shape, vec![files.len(), 1, 28, 28]);
        assert!(!files.is_empty());
        for (i, f) in files.iter().enumerate() {
            let px = decode(&dir.join(f)).unwrap();
            let mut got = Vec::new();
            clf.prep.apply(&px, &mut got);
            let want = &want[i * 784..(i + 1) * 784];
            let err = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(err <= tol, "{f}: max abs diff {err} > {tol}");
            // Not a vacuous comparison: the images have contrast.
            let spread = want.iter().copied().fold(f32::MIN, f32::max) - want.iter().copied().fold(f32::MAX, f32::min);
            assert!(spread > 1.0, "{f}: reference is flat");
        }
    }
}

/// `classify` goes through `InputPrep::load` (colour and resize one row at a time); the
/// PyTorch reference above checks `decode` + `apply`. The two must agree bit for bit, for
/// every sample image (grey, RGB, RGBA, 16-bit, palette, JPEG, BMP; smaller, equal to and
/// larger than the model's size) and for grey and RGB models, with and without a resize.
#[test]
fn row_by_row_loading_equals_decoding_the_whole_image() {
    let dir = samples().join("preprocess");
    let clf = Classifier::open(None).unwrap();
    let grey = clf.prep.clone();
    let rgb = InputPrep { channels: 3, mean: vec![0.5; 3], std: vec![0.25; 3], ..grey.clone() };
    let cropped = InputPrep { resize: [32, 30], ..rgb.clone() };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e != "json" && e != "npy"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    // A 28x28 test image: the model's own size (no resize for the grey model).
    files.push(samples().join("fmnist/bag/00018.png"));
    for f in &files {
        for prep in [&grey, &rgb, &cropped] {
            let (mut whole, mut rows) = (Vec::new(), Vec::new());
            prep.apply(&decode(f).unwrap(), &mut whole);
            let loaded = prep.load(f).unwrap();
            assert_eq!((loaded.height, loaded.width, loaded.channels), (prep.resize[0], prep.resize[1], prep.channels));
            prep.apply(&loaded, &mut rows);
            assert_eq!(whole.len(), prep.numel());
            assert!(whole == rows, "{}: {} channel(s), resize {:?}", f.display(), prep.channels, prep.resize);
        }
    }
}

#[test]
fn preprocessing_resizes_grey_and_colour_alike() {
    // A grey image and its RGB copy (R = G = B) give the same grey input: 0.299 + 0.587 + 0.114 = 1.
    let clf = Classifier::open(None).unwrap();
    let prep: &InputPrep = &clf.prep;
    let h = 37;
    let w = 23;
    let grey: Vec<f32> = (0..h * w).map(|i| (i * 37 % 251) as f32).collect();
    let rgb: Vec<f32> = grey.iter().flat_map(|&v| [v, v, v]).collect();
    let a = kestrel_rt_cli::preprocess::Pixels { height: h, width: w, channels: 1, data: grey };
    let b = kestrel_rt_cli::preprocess::Pixels { height: h, width: w, channels: 3, data: rgb };
    let (mut x, mut y) = (Vec::new(), Vec::new());
    prep.apply(&a, &mut x);
    prep.apply(&b, &mut y);
    assert_eq!(x.len(), 784);
    let err = x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max);
    assert!(err < 1e-4, "{err}");
    // A constant image stays constant through the resize (weights sum to 1).
    let c = kestrel_rt_cli::preprocess::Pixels { height: 50, width: 9, channels: 1, data: vec![200.0; 450] };
    let mut z = Vec::new();
    prep.apply(&c, &mut z);
    let want = (200.0 / 255.0 - prep.mean[0]) / prep.std[0];
    assert!(z.iter().all(|v| (v - want).abs() < 1e-4), "{:?}", &z[..4]);
}

#[test]
fn json_output_has_the_documented_shape() {
    let folder = samples().join("fmnist");
    let (ok, stdout, stderr) = kestrel(&["classify", folder.to_str().unwrap(), "--json", "--top", "3", "--quiet"]);
    assert!(ok, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("one JSON document");
    let arr = v.as_array().expect("a JSON array");
    let clf = Classifier::open(None).unwrap();
    let n_files = walk(&folder).len();
    assert_eq!(arr.len(), n_files);
    for item in arr {
        let obj = item.as_object().unwrap();
        assert_eq!(obj.len(), 2, "{item}");
        assert!(Path::new(obj["path"].as_str().unwrap()).exists());
        let preds = obj["predictions"].as_array().unwrap();
        assert_eq!(preds.len(), 3);
        let mut last = f64::INFINITY;
        let mut sum = 0.0;
        for p in preds {
            let p = p.as_object().unwrap();
            assert_eq!(p.len(), 3);
            let index = p["index"].as_u64().unwrap() as usize;
            assert_eq!(p["label"].as_str().unwrap(), clf.labels[index]);
            let prob = p["probability"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&prob) && prob <= last, "{item}");
            last = prob;
            sum += prob;
        }
        assert!(sum <= 1.0 + 1e-5);
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn bad_files_get_their_own_errors_and_the_rest_is_classified() {
    let dir = tmp("bad");
    let good = samples().join("fmnist/ankle-boot/00000.png");
    let bytes = std::fs::read(&good).unwrap();
    let truncated = dir.join("truncated.png");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let text = dir.join("notes.png");
    std::fs::write(&text, "this is a text file, not a PNG\n").unwrap();
    let missing = dir.join("missing.png");
    let args = [good.to_str().unwrap(), truncated.to_str().unwrap(), text.to_str().unwrap(), missing.to_str().unwrap()];
    let mut cmd = vec!["classify", "--json"];
    cmd.extend(args);
    let (ok, stdout, stderr) = kestrel(&cmd);
    assert!(!ok, "bad files must make the exit status non-zero");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for bad in [&truncated, &text, &missing] {
        let name = bad.file_name().unwrap().to_str().unwrap();
        assert!(
            stderr.lines().any(|l| l.starts_with("error:") && l.contains(name)),
            "no error line for {name}:\n{stderr}"
        );
    }
    assert!(stderr.contains("3 of 4 file(s) could not be classified"), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("the good file is still reported as JSON");
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["path"].as_str().unwrap(), good.to_str().unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn folder_evaluation_counts_every_sample_and_plots() {
    let dir = tmp("eval");
    let plot = dir.join("confusion.png");
    let folder = samples().join("fmnist");
    let (ok, stdout, stderr) =
        kestrel(&["classify", folder.to_str().unwrap(), "--eval", "--json", "--plot", plot.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let n = walk(&folder).len();
    assert_eq!(v["images"].as_u64().unwrap() as usize, n);
    let confusion: Vec<Vec<u64>> = serde_json::from_value(v["confusion"].clone()).unwrap();
    assert_eq!(confusion.len(), 10);
    // Every row holds exactly the images of its class folder.
    let labels: Vec<String> = serde_json::from_value(v["labels"].clone()).unwrap();
    for (i, row) in confusion.iter().enumerate() {
        let folder_name = labels[i].to_lowercase().replace(' ', "-");
        let count = std::fs::read_dir(folder.join(&folder_name)).unwrap().count() as u64;
        assert_eq!(row.iter().sum::<u64>(), count, "class {}", labels[i]);
    }
    let diag: u64 = (0..10).map(|i| confusion[i][i]).sum();
    assert_eq!(diag, v["correct"].as_u64().unwrap());
    // The bundled model is trained: most of the bundled test images are right (its full
    // test-set accuracy is in docs/trained-models.md).
    assert!(v["accuracy"].as_f64().unwrap() >= 0.75, "{stdout}");
    let png = image::open(&plot).expect("the plot is a PNG");
    assert!(png.width() > 300 && png.height() > 300);
    // Human-readable form.
    let (ok, stdout, stderr) = kestrel(&["classify", folder.to_str().unwrap(), "--eval"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("accuracy") && stdout.contains("confusion matrix"), "{stdout}");
    // A folder whose names are not classes is a clear error.
    let (ok, _, stderr) = kestrel(&["classify", samples().join("preprocess").to_str().unwrap(), "--eval"]);
    assert!(!ok && stderr.contains("not in a folder named after a class"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn digits_model_reads_its_samples() {
    let (ok, stdout, stderr) = kestrel(&[
        "classify",
        samples().join("digits").to_str().unwrap(),
        "--model",
        "digits-vit-super",
        "--eval",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["images"].as_u64().unwrap(), 20);
    assert!(v["accuracy"].as_f64().unwrap() >= 0.75, "{stdout}");
    assert_eq!(BUNDLED.len(), 3);
}

/// Probabilities on the GPU vs the CPU: f32 kernels with another summation order, through a
/// softmax (probabilities are ≤ 1, so an absolute bound).
const GPU_PROB_TOL: f64 = 1e-4;
/// With `--gpu-precision f16`: products of f16-rounded factors give logit errors of about 1e-3
/// relative (kestrel-rt-wgpu's F16_KERNEL); logits of a few units then move a softmax probability
/// by at most about 1e-2 (∂p/∂z ≤ 1/4 per logit, a few logits).
const GPU_F16_PROB_TOL: f64 = 2e-2;

#[test]
fn classify_runs_on_the_gpu_with_the_cpu_results() {
    if !have_gpu() {
        return;
    }
    let folder = samples().join("fmnist");
    let dir = folder.to_str().unwrap();
    let run = |backend: &str, precision: &str| {
        let (ok, stdout, stderr) = kestrel(&[
            "classify",
            dir,
            "--json",
            "--quiet",
            "-k",
            "10",
            "--batch",
            "8",
            "--backend",
            backend,
            "--gpu-precision",
            precision,
        ]);
        assert!(ok, "{backend}: {stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let mut rows: Vec<(String, Vec<(u64, f64)>)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let preds = r["predictions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (p["index"].as_u64().unwrap(), p["probability"].as_f64().unwrap()))
                    .collect();
                (r["path"].as_str().unwrap().to_string(), preds)
            })
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        (rows, stderr)
    };
    let (cpu, _) = run("cpu", "f32");
    assert!(cpu.len() >= 8, "a folder of samples, more than one batch");
    let f16 = kestrel_rt_wgpu::GpuContext::new(&kestrel_rt_wgpu::AdapterChoice::Auto).is_ok_and(|c| c.has_f16());
    if !f16 {
        assert!(
            std::env::var("KESTREL_REQUIRE_F16").map_or(true, |v| v != "1"),
            "KESTREL_REQUIRE_F16=1 but no SHADER_F16"
        );
        eprintln!("SKIPPED: f16 arithmetic (the adapter has no SHADER_F16)");
    }
    for (precision, tol) in [("f32", GPU_PROB_TOL), ("f16", GPU_F16_PROB_TOL)] {
        if precision == "f16" && !f16 {
            continue;
        }
        let (gpu, stderr) = run("wgpu", precision);
        assert!(!stderr.contains("running on the CPU"), "{stderr}");
        assert_eq!(cpu.len(), gpu.len());
        for ((path, c), (_, g)) in cpu.iter().zip(&gpu) {
            assert_eq!(c[0].0, g[0].0, "{precision}: {path}: top-1 differs");
            for &(i, p) in c {
                let q = g.iter().find(|&&(j, _)| j == i).map(|&(_, q)| q).unwrap();
                assert!((p - q).abs() <= tol, "{precision}: {path}: class {i}: cpu {p} vs gpu {q}");
            }
        }
    }
    // The human-readable summary names the backend: auto with a named adapter times it against
    // the CPU and runs on the faster; auto alone skips a software renderer (lavapipe in CI) with
    // a notice.
    let img = samples().join("fmnist/bag/00018.png");
    let (ok, stdout, stderr) = kestrel(&["classify", img.to_str().unwrap(), "--backend", "auto", "--adapter", "0"]);
    let on = if stderr.contains("auto chose the GPU") { "(wgpu: " } else { "(cpu)" };
    assert!(ok && stderr.contains("ms per run") && stdout.contains(on), "{stdout}{stderr}");
    let software =
        kestrel_rt_wgpu::adapters().iter().all(|a| a.info.device_type == kestrel_rt_wgpu::wgpu::DeviceType::Cpu);
    if software && std::env::var_os(kestrel_rt_wgpu::ADAPTER_ENV).is_none() {
        let (ok, stdout, stderr) = kestrel(&["classify", img.to_str().unwrap(), "--backend", "auto"]);
        assert!(ok && stdout.contains("(cpu)") && stderr.contains("software renderer"), "{stdout}{stderr}");
    }
    // An adapter that does not exist is an error with --backend wgpu, a notice with auto.
    let (ok, _, stderr) = kestrel(&["classify", img.to_str().unwrap(), "--backend", "wgpu", "--adapter", "no-such"]);
    assert!(!ok && stderr.contains("no-such"), "{stderr}");
    let (ok, stdout, stderr) =
        kestrel(&["classify", img.to_str().unwrap(), "--backend", "auto", "--adapter", "no-such"]);
    assert!(ok && stderr.contains("running on the CPU") && stdout.contains("(cpu)"), "{stdout}{stderr}");
}

#[test]
fn profiler_writes_a_trace_with_one_event_per_op_per_run() {
    check_profile("cpu", "host clock");
}

#[test]
fn gpu_profiler_times_every_op_with_timestamp_queries() {
    if have_gpu() {
        check_profile("wgpu", "GPU timestamp queries");
    }
}

fn check_profile(backend: &str, timing: &str) {
    let dir = tmp(&format!("profile-{backend}"));
    let trace = dir.join("trace.json");
    let plot = dir.join("profile.png");
    let runs = 7;
    let (ok, stdout, stderr) = kestrel(&[
        "profile",
        "--runs",
        &runs.to_string(),
        "--warmup",
        "2",
        "--batch",
        "3",
        "--json",
        "--trace",
        trace.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--backend",
        backend,
    ]);
    assert!(ok, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert!(v["backend"].as_str().unwrap().starts_with(backend), "{stdout}");
    assert!(v["timing"].as_str().unwrap().starts_with(timing), "{stdout}");
    let ops = v["ops"].as_array().unwrap();
    assert_eq!(ops.len() as u64, v["executed_ops"].as_u64().unwrap());
    assert!(!ops.is_empty());
    assert_eq!(v["batch"].as_u64().unwrap(), 3);
    let share: f64 = ops.iter().map(|o| o["share"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-6, "{share}");
    let means: Vec<f64> = ops.iter().map(|o| o["mean_us"].as_f64().unwrap()).collect();
    assert!(means.windows(2).all(|w| w[0] >= w[1]), "sorted by cost");
    for o in ops {
        let (p50, p90, p99) =
            (o["p50_us"].as_f64().unwrap(), o["p90_us"].as_f64().unwrap(), o["p99_us"].as_f64().unwrap());
        assert!(p50 <= p90 && p90 <= p99, "{o}");
    }
    assert!(ops.iter().any(|o| o["op"] == "Attention" && o["gflops_p50"].as_f64().is_some()), "{stdout}");
    assert!(v["arena_bytes"].as_u64().unwrap() > 0 && v["weight_bytes"].as_u64().unwrap() > 0);
    // Roofline: every executed op moves bytes; intensity = FLOPs / bytes; GB/s at the median;
    // compute dispatches per node on the GPU (summing to the header's count), null on the CPU.
    let gpu = backend == "wgpu";
    let mut dispatches = 0;
    for o in ops {
        let bytes = o["bytes"].as_u64().unwrap_or_else(|| panic!("bytes: {o}"));
        assert!(bytes > 0 && o["gbps_p50"].as_f64().is_some(), "{o}");
        if let Some(f) = o["flops"].as_u64() {
            let i = o["intensity_flop_per_byte"].as_f64().unwrap();
            assert!((i - f as f64 / bytes as f64).abs() <= 1e-9 * i.max(1.0), "{o}");
        }
        let parts = o["parts"].as_array().unwrap_or_else(|| panic!("parts: {o}"));
        match o["dispatches"].as_u64() {
            Some(d) => {
                assert!(gpu && d >= 1, "{o}");
                dispatches += d;
                // Each dispatch timed on its own (entry point and time), summing to the node's.
                assert_eq!(parts.len() as u64, d, "{o}");
                let sum: f64 = parts.iter().map(|p| p["mean_us"].as_f64().unwrap()).sum();
                assert!((sum - o["mean_us"].as_f64().unwrap()).abs() <= 1e-6 * sum.max(1.0) + 1e-3, "{o}");
                assert!(parts.iter().all(|p| p["kernel"].as_str().is_some_and(|k| !k.is_empty())), "{o}");
            }
            None => assert!(!gpu && o["dispatches"].is_null() && parts.is_empty(), "{o}"),
        }
    }
    assert_eq!(v["known_bytes"].as_u64().unwrap(), ops.iter().map(|o| o["bytes"].as_u64().unwrap()).sum::<u64>());
    assert_eq!(v["dispatches_per_run"].as_u64(), gpu.then_some(dispatches), "{stdout}");

    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).expect("trace is JSON");
    let events = t["traceEvents"].as_array().unwrap();
    let op_events: Vec<&Value> = events.iter().filter(|e| e["cat"] == "op").collect();
    assert_eq!(op_events.len(), ops.len() * runs);
    for o in ops {
        let node = o["node"].as_u64().unwrap();
        let n = op_events.iter().filter(|e| e["args"]["node"].as_u64() == Some(node)).count();
        assert_eq!(n, runs, "node {node}");
    }
    for e in &op_events {
        assert_eq!(e["ph"], "X");
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0);
    }
    assert_eq!(events.iter().filter(|e| e["cat"] == "run").count(), runs);
    let png = image::open(&plot).expect("the plot is a PNG");
    assert!(png.width() > 300);

    // Human-readable table.
    let (ok, stdout, stderr) = kestrel(&["profile", "--runs", "3", "--warmup", "0", "--backend", backend]);
    assert!(ok, "{stderr}");
    for needle in ["total", "arena", "weights", "p99", "GFLOP/s", "GB/s", "FLOP/B", "Attention", timing] {
        assert!(stdout.contains(needle), "{needle}:\n{stdout}");
    }
    assert_eq!(stdout.contains("dispatches per run"), backend == "wgpu", "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn readme_first_command_classifies_a_bundled_image() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let block = readme.split("```sh\n").nth(1).expect("a sh block").split("```").next().unwrap();
    let cmd = block.lines().find(|l| !l.trim().is_empty()).unwrap().trim();
    let prefix = "cargo run --release -p kestrel-rt-cli -- ";
    assert!(cmd.starts_with(prefix), "README's first command: {cmd}");
    let args: Vec<&str> = cmd[prefix.len()..].split_whitespace().collect();
    assert_eq!(args[0], "classify");
    let t = Instant::now();
    let (ok, stdout, stderr) = kestrel(&args);
    let elapsed = t.elapsed();
    assert!(ok, "{stderr}");
    // The image is a test-set ankle boot; the output names classes with probabilities.
    assert!(stdout.contains("1. ") && stdout.contains('%'), "{stdout}");
    // Generous bound for a loaded CI machine (it takes milliseconds).
    assert!(elapsed.as_secs_f64() < 5.0, "{elapsed:?}");
}

#[test]
fn convert_records_labels_and_preprocessing_from_meta_json() {
    let dir = tmp("meta");
    let onnx = root().join("converters/fixtures/mnist28_aftconv_classifier_h4/model.onnx");
    let meta = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/fmnist_vit_super.meta.json");
    let out = dir.join("m.kes");
    let (ok, _, stderr) = kestrel(&[
        "convert",
        onnx.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--weights",
        "int8",
        "--meta",
        meta.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let clf = Classifier::open(Some(out.to_str().unwrap())).unwrap();
    assert_eq!(clf.labels[9], "Ankle boot");
    assert_eq!(clf.prep.size, [28, 28]);
    assert_eq!(clf.prep.mean, vec![0.286]);
    // The converted (random-weight) model classifies with that metadata.
    let img = samples().join("fmnist/coat/00006.png");
    let (ok, stdout, stderr) = kestrel(&["classify", img.to_str().unwrap(), "--model", out.to_str().unwrap()]);
    assert!(ok && stdout.contains("1. "), "{stderr}");
    // --labels replaces the labels; a wrong count is a clear error.
    let labels = dir.join("labels.txt");
    std::fs::write(&labels, "a\nb\nc\n").unwrap();
    let (ok, _, stderr) = kestrel(&[
        "convert",
        onnx.to_str().unwrap(),
        "-o",
        dir.join("bad.kes").to_str().unwrap(),
        "--meta",
        meta.to_str().unwrap(),
        "--labels",
        labels.to_str().unwrap(),
    ]);
    assert!(!ok && stderr.contains("3 labels given") && stderr.contains("10 classes"), "{stderr}");
    // A model without preprocessing metadata cannot be used by classify, and says why.
    let plain = dir.join("plain.kes");
    let (ok, _, stderr) = kestrel(&["convert", onnx.to_str().unwrap(), "-o", plain.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = kestrel(&["classify", img.to_str().unwrap(), "--model", plain.to_str().unwrap()]);
    assert!(!ok && stderr.contains("no image preprocessing"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn malformed_pixel_buffers_do_not_panic() {
    let clf = Classifier::open(None).unwrap();
    for px in [
        kestrel_rt_cli::preprocess::Pixels { height: 0, width: 0, channels: 1, data: vec![] },
        kestrel_rt_cli::preprocess::Pixels { height: 5, width: 5, channels: 3, data: vec![1.0; 7] },
    ] {
        let mut x = Vec::new();
        clf.prep.apply(&px, &mut x);
        assert_eq!(x.len(), 784);
        assert!(x.iter().all(|v| (v + clf.prep.mean[0] / clf.prep.std[0]).abs() < 1e-6));
    }
}
