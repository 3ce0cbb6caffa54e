//! The README's main command and `inspect`, run as a user would run them.

use crate::support;
use support::kestrel;

#[test]
fn demo_writes_a_model_that_inspect_reads() {
    let dir = std::env::temp_dir().join(format!("kestrel-rt-cli-{}", std::process::id()));
    let path = dir.join("demo.kes");
    let path_s = path.to_str().unwrap();
    for weights in ["f32", "int8", "int4"] {
        let (ok, stdout, stderr) = kestrel(&["demo", "--weights", weights, "--out", path_s, "--batch", "2"]);
        assert!(ok, "demo --weights {weights} failed: {stderr}");
        assert!(stdout.contains("fastformer") && stdout.contains("aft-conv"), "{stdout}");
        // One line per image with a class and a probability.
        let rows = stdout.lines().filter(|l| l.contains("class-")).count();
        assert_eq!(rows, 2, "{stdout}");
    }
    let (ok, stdout, stderr) = kestrel(&["inspect", path_s]);
    assert!(ok, "{stderr}");
    for needle in ["kestrel-demo-every-mechanism", "Attention", "AftConv", "Fastformer", "int4", "arena"] {
        assert!(stdout.contains(needle), "inspect output lacks {needle}:\n{stdout}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A converted HF BERT (attention mask input): `inspect` shows each fused Attention node's
/// variant, heads and its mask tensor.
#[test]
fn inspect_shows_the_mask_of_fused_attention() {
    let dir = support::scratch_dir("cli-mask");
    let kes = dir.join("bert.kes");
    let onnx = concat!(env!("CARGO_MANIFEST_DIR"), "/../../converters/zoo/bert-legacy17/model.onnx");
    let (ok, _, stderr) = kestrel(&["convert", onnx, "-o", kes.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let (ok, stdout, stderr) = kestrel(&["inspect", kes.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let masked: Vec<&str> =
        stdout.lines().filter(|l| l.contains("Attention") && l.contains("(Standard, 4 heads, mask ")).collect();
    assert_eq!(masked.len(), 2, "{stdout}");
    assert!(masked.iter().all(|l| l.contains("[16, 16])")), "{masked:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_files_are_clear_errors_not_panics() {
    let dir = support::scratch_dir("cli-bad");
    let junk = dir.join("junk.kes");
    std::fs::write(&junk, b"definitely not a model").unwrap();
    let (ok, _, stderr) = kestrel(&["inspect", junk.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.starts_with("error:") && !stderr.contains("panicked"), "{stderr}");
    let (ok, _, stderr) = kestrel(&["inspect", dir.join("missing.kes").to_str().unwrap()]);
    assert!(!ok && stderr.contains("missing.kes"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn run_reads_npy_batches_and_writes_npy_outputs() {
    let dir = support::scratch_dir("cli-run");
    let model = dir.join("demo.kes");
    let (ok, _, stderr) = kestrel(&["demo", "--out", model.to_str().unwrap(), "--batch", "1"]);
    assert!(ok, "{stderr}");
    let x = dir.join("x.npy");
    let data: Vec<f32> = (0..4 * 256).map(|i| ((i % 97) as f32 * 0.13).sin()).collect();
    kestrel_rt::npy::write_f32(&x, &[4, 1, 16, 16], &data).unwrap();
    let y = dir.join("y.npy");
    let (ok, stdout, stderr) =
        kestrel(&["run", model.to_str().unwrap(), "--input", x.to_str().unwrap(), "--output", y.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("batch 4"), "{stdout}");
    let kestrel_rt::npy::Array::F32 { shape, data: probs } = kestrel_rt::npy::read(&y).unwrap() else {
        panic!("f32 output")
    };
    assert_eq!(shape, vec![4, 10]);
    for p in probs.chunks(10) {
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
    // The same samples through the library give the same numbers.
    let m = kestrel_rt::Model::load(&model).unwrap();
    let want = m.session(4).unwrap().run_vec(&[kestrel_rt::Input::F32(&data)]).unwrap().remove(0);
    assert_eq!(probs, want);
    // A wrong shape is a clear error.
    kestrel_rt::npy::write_f32(&x, &[4, 16, 16], &data).unwrap();
    let (ok, _, stderr) = kestrel(&["run", model.to_str().unwrap(), "--input", x.to_str().unwrap()]);
    assert!(!ok && stderr.contains("expected shape"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A model whose int64 input and output are read by bit operations (held exactly as byte limbs):
/// `kestrel run` takes and writes int64 arrays over the whole range, encoding and decoding the
/// limbs itself.
#[test]
fn run_takes_and_writes_integers_beyond_f32s_range() {
    use crate::proto::{i64_tensor, i64_value, Msg};
    let dir = support::scratch_dir("cli-run-limbs");
    let key: Vec<i64> = vec![-1, 0x5555_5555_5555_5555, 1 << 40, i64::MIN];
    let node = Msg::default().str(1, "a").str(1, "k").str(2, "y").str(3, "xor").str(4, "BitwiseXor");
    let graph = Msg::default()
        .msg(1, node)
        .str(2, "g")
        .msg(5, i64_tensor("k", &[4], &key))
        .msg(11, i64_value("a", &[4]))
        .msg(12, i64_value("y", &[4]));
    let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 18)).str(2, "cli.rs").msg(7, graph).0;
    let (onnx_path, kes, a_path, y_path) =
        (dir.join("xor.onnx"), dir.join("xor.kes"), dir.join("a.npy"), dir.join("y.npy"));
    std::fs::write(&onnx_path, onnx).unwrap();
    let (ok, stdout, stderr) = kestrel(&["convert", onnx_path.to_str().unwrap(), "-o", kes.to_str().unwrap()]);
    assert!(ok, "{stdout}{stderr}");
    let (ok, stdout, stderr) = kestrel(&["inspect", kes.to_str().unwrap()]);
    assert!(ok && stdout.contains("input      a [4, 8] per sample, fed as I64Limbs"), "{stdout}{stderr}");
    assert!(stdout.contains("output     y (I64Limbs)"), "{stdout}");
    let a: Vec<i64> = vec![123_456_789_012_345, -98_765_432_109, (1 << 24) + 1, 7];
    kestrel_rt::npy::write_i64(&a_path, &[4], &a).unwrap();
    let (ok, stdout, stderr) = kestrel(&[
        "run",
        kes.to_str().unwrap(),
        "--input",
        a_path.to_str().unwrap(),
        "--output",
        y_path.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("int64"), "{stdout}");
    let kestrel_rt::npy::Array::I64 { shape, data } = kestrel_rt::npy::read(&y_path).unwrap() else {
        panic!("an int64 output")
    };
    assert_eq!(shape, vec![4]);
    let want: Vec<i64> = a.iter().zip(&key).map(|(x, k)| x ^ k).collect();
    assert_eq!(data, want);
    // Floats where the model takes integers: a clear error.
    kestrel_rt::npy::write_f32(&a_path, &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let (ok, _, stderr) = kestrel(&["run", kes.to_str().unwrap(), "--input", a_path.to_str().unwrap()]);
    assert!(!ok && stderr.contains("int64 or int32 array"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn convert_quantises_fuses_and_verifies_the_readme_model() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../converters/fixtures/mnist_vit_super_h1");
    let out = std::env::temp_dir().join(format!("kestrel-rt-cli-convert-{}.kes", std::process::id()));
    let (ok, stdout, stderr) = kestrel(&[
        "convert",
        fixture.join("model.onnx").to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--weights",
        "int8",
        "--verify",
        fixture.join("input.npy").to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("--json prints one JSON object");
    assert_eq!(v["report"]["weights_dtype"], "int8");
    let fused: Vec<(String, u64)> = v["report"]["fused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["name"].as_str().unwrap().to_string(), f["count"].as_u64().unwrap()))
        .collect();
    assert!(fused.contains(&("attention".to_string(), 2)), "{fused:?}");
    assert!(v["report"]["ratio"].as_f64().unwrap() < 0.27, "int8 file is {} of the ONNX file", v["report"]["ratio"]);
    assert!(v["verify"]["top1_agreement"].as_f64().unwrap() >= 0.75, "{}", v["verify"]);
    assert!(v["verify"]["max_rel_err"].as_f64().unwrap() < 0.05, "{}", v["verify"]);
    // The written file runs.
    let (ok, stdout, stderr) =
        kestrel(&["run", out.to_str().unwrap(), "--input", fixture.join("input.npy").to_str().unwrap()]);
    assert!(ok, "{stderr}");
    // Each output named as the ONNX graph names it.
    assert!(stdout.contains("output 0   logits [4, 10]"), "{stdout}");
    std::fs::remove_file(&out).ok();
    // A missing input is a clear error.
    let (ok, _, stderr) = kestrel(&["convert", "/nonexistent/model.onnx", "-o", out.to_str().unwrap()]);
    assert!(!ok && stderr.contains("nonexistent"), "{stderr}");
}

#[test]
fn bench_json_is_one_object_with_the_documented_keys() {
    let dir = std::env::temp_dir().join(format!("kestrel-rt-cli-bench-{}", std::process::id()));
    let path = dir.join("demo.kes");
    let path_s = path.to_str().unwrap();
    let (ok, _, stderr) = kestrel(&["demo", "--out", path_s]);
    assert!(ok, "{stderr}");
    for isa in [None, Some("scalar")] {
        let mut args = vec!["bench", path_s, "--samples", "3", "--reps", "3", "--batch", "2", "--json"];
        if let Some(i) = isa {
            args.extend(["--isa", i]);
        }
        let (ok, stdout, stderr) = kestrel(&args);
        assert!(ok, "{stderr}");
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
        let get = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {stdout}"));
        let (med, lo, hi, sps) =
            (get("us_per_sample"), get("us_per_sample_min"), get("us_per_sample_max"), get("samples_per_s"));
        assert!(lo > 0.0 && lo <= med && med <= hi, "{stdout}");
        assert!((sps - 1e6 / med).abs() <= 1e-6 * sps, "{stdout}");
        if let Some(i) = isa {
            assert_eq!(v["isa"], i);
        }
    }
    // Threads: reported in the JSON; a bad count is a clear error.
    let (ok, stdout, stderr) = kestrel(&["bench", path_s, "--threads", "2", "--samples", "8", "--reps", "2", "--json"]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["threads"], 2, "{stdout}");
    let (ok, _, stderr) = kestrel(&["bench", path_s, "--threads", "0"]);
    assert!(!ok && stderr.contains("thread count"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}
