//! `kestrel run`, `bench --dim`, `profile --dim` and `inspect` on a model with bounded dims
//! (format 2.0): each `.npy` runs at its own size, the bench times and the profiler costs each
//! size given, and sizes out of range are errors naming the dim.

use crate::support;
use kestrel_rt::format::ops::{Dense, Op, Proj, Softmax};
use kestrel_rt::ModelBuilder;
use support::{kestrel, scratch_dir};

/// `x [T, 8] -> dense -> softmax`, `T` in 2..=12.
fn model() -> Vec<u8> {
    kestrel_rt::builder::bounded_sweep("T", 2, 12, |t| {
        let mut b = ModelBuilder::new("bounded");
        let x = b.input("x", &[t, 8])?;
        let w = b.weight("w", &[8, 8], (0..64).map(|i| (i as f32 * 0.37).sin()).collect())?;
        let h = b.op(|y| Op::Dense(Dense { x, proj: Proj { w, b: None }, act: Default::default(), clamp: None, y }))?;
        let s = b.op(|y| Op::Softmax(Softmax { x: h, y }))?;
        b.output(s);
        b.build()
    })
    .unwrap()
}

/// A scratch directory `name` holding [`model`] as `m.kes`, and that file's path.
fn model_in(name: &str) -> (std::path::PathBuf, String) {
    let dir = scratch_dir(name);
    let m = dir.join("m.kes");
    std::fs::write(&m, model()).unwrap();
    let m = m.to_str().unwrap().to_string();
    (dir, m)
}

#[test]
fn run_bench_and_inspect_take_any_size_within_the_bounds() {
    let (dir, m) = model_in("bounded");
    let m = m.as_str();
    let (ok, out, err) = kestrel(&["inspect", m]);
    assert!(ok, "{err}");
    assert!(out.contains("format 2.0") && out.contains("T 2..=12"), "{out}");

    let x = dir.join("x.npy");
    kestrel_rt::npy::write_f32(&x, &[3, 5, 8], &(0..120).map(|i| (i as f32 * 0.1).cos()).collect::<Vec<_>>()).unwrap();
    let y = dir.join("y.npy");
    let (ok, out, err) = kestrel(&["run", m, "--input", x.to_str().unwrap(), "--output", y.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("[3, 5, 8]") && out.contains("shapes     [5, 8]"), "{out}");
    let y = kestrel_rt::npy::read(&y).unwrap();
    assert_eq!(y.shape(), [3, 5, 8]);

    let big = dir.join("big.npy");
    kestrel_rt::npy::write_f32(&big, &[13, 8], &[0.5; 104]).unwrap();
    let (ok, _, err) = kestrel(&["run", m, "--input", big.to_str().unwrap()]);
    assert!(!ok && err.contains("`T`") && err.contains("2..=12"), "{err}");

    let (ok, out, err) = kestrel(&["bench", m, "--dim", "T=2,7,12", "--samples", "4", "--reps", "1"]);
    assert!(ok, "{err}");
    for row in ["| 2 | [[2, 8]]", "| 7 | [[7, 8]]", "| 12 | [[12, 8]]"] {
        assert!(out.contains(row), "{row} missing:\n{out}");
    }
    let (ok, _, err) = kestrel(&["bench", m, "--dim", "T=40"]);
    assert!(!ok && err.contains("outside its range 2..=12"), "{err}");
}

/// One profile's Dense and Softmax costs at `T` for `batch` samples: the dense layer `2 · 8T · 8`
/// FLOPs and `x`, `y` (8T f32 each, at the batch) plus the 8×8 weight once; the softmax `5 · 8T`.
fn check_costs(p: &serde_json::Value, t: u64, batch: u64) {
    assert_eq!(p["dims"]["T"], t, "{p}");
    assert_eq!(p["input_shapes"], serde_json::json!([[t, 8]]), "{p}");
    assert_eq!(p["batch"], batch, "{p}");
    let op = |name: &str| p["ops"].as_array().unwrap().iter().find(|o| o["op"] == name).unwrap().clone();
    assert_eq!(op("Dense")["flops"], batch * 2 * 8 * t * 8, "T = {t}");
    assert_eq!(op("Dense")["bytes"], batch * 2 * 4 * 8 * t + 4 * 64, "T = {t}");
    assert_eq!(op("Softmax")["flops"], batch * 5 * 8 * t, "T = {t}");
    assert_eq!(p["known_flops"], batch * (2 * 8 * t * 8 + 5 * 8 * t), "T = {t}");
}

#[test]
fn profile_costs_each_size_within_the_bounds_at_that_size() {
    let (dir, m) = model_in("bounded-profile");
    let m = m.as_str();
    let quick = ["--runs", "2", "--warmup", "0"];
    let profile = |extra: &[&str]| kestrel(&[&["profile", m][..], &quick, extra].concat());

    // --dim: one profile per size, each node's FLOPs and bytes at that size.
    let (ok, out, err) = profile(&["--backend", "cpu", "--dim", "T=3,9", "--json"]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let sizes = j.as_array().unwrap_or_else(|| panic!("an array, one per size: {out}"));
    assert_eq!(sizes.len(), 2);
    check_costs(&sizes[0], 3, 1);
    check_costs(&sizes[1], 9, 1);
    assert_eq!(sizes[0]["at_bound"], false);

    // The table says the sizes; several sizes give one trace each, named by size.
    let trace = dir.join("t.json");
    let (ok, out, err) = profile(&["--backend", "cpu", "--dim", "T=3,9", "--trace", trace.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("dims       T=3, input [3, 8] per sample, bounds T 2..=12: FLOPs, bytes and times at these sizes"),
        "{out}"
    );
    assert!(out.contains("dims       T=9, input [9, 8] per sample"), "{out}");
    assert!(dir.join("t-T3.json").is_file() && dir.join("t-T9.json").is_file(), "{out}");

    // No --dim: at the bound, and it says so.
    let (ok, out, err) = profile(&["--backend", "cpu"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("dims       T=12, input [12, 8] per sample, bounds T 2..=12: the bound, every dim at its maximum"),
        "{out}"
    );
    let (ok, out, err) = profile(&["--backend", "cpu", "--json"]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    check_costs(&j, 12, 1);
    assert_eq!(j["at_bound"], true);

    // An array of any size within the bounds runs at its own size.
    let x = dir.join("x.npy");
    kestrel_rt::npy::write_f32(&x, &[3, 5, 8], &(0..120).map(|i| (i as f32 * 0.1).cos()).collect::<Vec<_>>()).unwrap();
    let (ok, out, err) = profile(&["--backend", "cpu", "--input", x.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    check_costs(&serde_json::from_str(&out).unwrap(), 5, 3);

    // Out of range: the typed error naming the dim and its range, no panic.
    let (ok, _, err) = profile(&["--backend", "cpu", "--dim", "T=3,13"]);
    assert!(!ok && err.contains("`T` = 13 is outside its range 2..=12") && !err.contains("panicked"), "{err}");
    let big = dir.join("big.npy");
    kestrel_rt::npy::write_f32(&big, &[13, 8], &[0.5; 104]).unwrap();
    let (ok, _, err) = profile(&["--backend", "cpu", "--input", big.to_str().unwrap()]);
    assert!(!ok && err.contains("`T`") && err.contains("2..=12") && !err.contains("panicked"), "{err}");
    let (ok, _, err) = profile(&["--dim", "T=3", "--input", x.to_str().unwrap()]);
    assert!(!ok && err.contains("give one of them"), "{err}");

    // On a GPU the same sizes cost the same.
    if support::have_gpu() {
        let (ok, out, err) = profile(&["--backend", "wgpu", "--dim", "T=3,9", "--json"]);
        assert!(ok, "{err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        check_costs(&j[0], 3, 1);
        check_costs(&j[1], 9, 1);
    }
}
