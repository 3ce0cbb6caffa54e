//! `kestrel bench scaling`: the memory figures are exact (from the built models' plans, checked
//! against the prediction used for the memory cap), linear mechanisms hold no T×T buffer, skips are
//! reported, and the command writes its table, JSON and plot. No timing is asserted.

use indicatif::ProgressBar;
use kestrel_rt_cli::scaling::{
    conv_grid, footprint, layer_model, loglog_slope, predict, sweep, Config, Mechanism, Series,
};
use std::time::Duration;

use crate::support;
use support::kestrel;

fn config(sizes: &[usize], d: usize, cap: u64) -> Config {
    Config {
        d,
        heads: 1,
        sizes: sizes.to_vec(),
        mechanisms: Mechanism::ALL.to_vec(),
        mem_cap_bytes: cap,
        reps: 1,
        min_pass: Duration::ZERO,
        time: false,
        bounded: false,
    }
}

/// `f(T) = a·T + b` exactly on a doubling ladder: f(4T) − f(2T) = 2 (f(2T) − f(T)).
fn is_linear(v: &[(usize, u64)]) -> bool {
    v.windows(3).all(|w| {
        assert_eq!((w[1].0, w[2].0), (2 * w[0].0, 4 * w[0].0), "doubling ladder");
        let (a, b, c) = (w[0].1 as i128, w[1].1 as i128, w[2].1 as i128);
        c - b == 2 * (b - a)
    })
}

fn arena(s: &Series) -> Vec<(usize, u64)> {
    s.points.iter().map(|p| (p.t, p.footprint.arena())).collect()
}

fn weights(s: &Series) -> Vec<(usize, u64)> {
    s.points.iter().map(|p| (p.t, p.footprint.weights)).collect()
}

#[test]
fn arena_is_exactly_linear_in_t_for_every_mechanism() {
    // From T = 512: up to ONE_BLOCK_MAX_T (256) tokens attention scores all queries in one
    // block ([T, T] ≤ 256 KiB, a constant bound), beyond it blocks of 64 queries.
    const _: () = assert!(kestrel_rt_cpu::kernels::attention::ONE_BLOCK_MAX_T < 512);
    let cfg = config(&[512, 1024, 2048, 4096], 32, u64::MAX);
    let series = sweep(&cfg, &ProgressBar::hidden()).unwrap();
    assert_eq!(series.len(), 9);
    for s in &series {
        assert_eq!(s.points.len(), 4, "{:?}: every size built", s.mechanism);
        assert!(s.skipped.is_empty());
        let a = arena(s);
        // The linear mechanisms (AFT-simple, AFT-local, AFT-conv, Fastformer) must hold no T×T
        // buffer. So must the others: Standard/Optimised/Efficient/Super compute the scores of a
        // block of 64 queries at a time ([64, T]) and AFT-full one bias row, so their arena is
        // O(T·d) too (their *time* is quadratic). A T×T buffer would break this exact second
        // difference.
        assert!(is_linear(&a), "{:?}: arena {a:?} is not a·T + b", s.mechanism);
        // And it is O(T·d): below 12 f32 of [T, d] (the [64, T] score block is 2 of them at
        // d = 32) plus a constant (a T×T f32 buffer at T = 1024, d = 32 alone is 32 T·d floats).
        for &(t, bytes) in &a {
            assert!(bytes <= 12 * 4 * (t * 32) as u64 + 65536, "{:?} T={t}: {bytes} bytes", s.mechanism);
        }
        assert!((s.arena_slope().unwrap() - 1.0).abs() < 0.05, "{:?}", s.mechanism);
    }
}

#[test]
fn weights_are_quadratic_only_where_the_definition_says_so() {
    let cfg = config(&[64, 128, 256, 512], 16, u64::MAX);
    for s in sweep(&cfg, &ProgressBar::hidden()).unwrap() {
        let w = weights(&s);
        match s.mechanism {
            // Super's W^A is T×T by definition: exactly 4 T² bytes on top of a linear part.
            // AFT-local stores only its band [T, 2s − 1]: linear like the rest.
            Mechanism::Super => {
                let rest: Vec<(usize, u64)> = w.iter().map(|&(t, b)| (t, b - 4 * (t * t) as u64)).collect();
                assert!(is_linear(&rest), "{:?}: {w:?} minus 4T² is not linear", s.mechanism);
                assert!(!is_linear(&w));
            }
            _ => assert!(is_linear(&w), "{:?}: weights {w:?} not linear in T", s.mechanism),
        }
    }
}

#[test]
fn prediction_equals_the_built_plan_at_unaligned_sizes() {
    // T·d·4 not a multiple of 64 (the planner rounds up) and a non-square AFT-conv grid.
    for (t, d) in [(99usize, 8usize), (100, 24), (37, 16)] {
        for m in Mechanism::ALL {
            let bytes = layer_model(m, t, d, 1, 1).unwrap();
            let model = kestrel_rt::Model::from_bytes(&bytes).unwrap();
            assert_eq!(footprint(&model).unwrap(), predict(m, t, d, 1).unwrap(), "{m:?} T={t} d={d}");
        }
    }
    // Heads > 1 where a mechanism has heads.
    for m in Mechanism::ALL {
        let bytes = layer_model(m, 64, 32, 4, 2).unwrap();
        let model = kestrel_rt::Model::from_bytes(&bytes).unwrap();
        assert_eq!(footprint(&model).unwrap(), predict(m, 64, 32, 4).unwrap(), "{m:?} h=4");
    }
    assert_eq!(conv_grid(99), (9, 11));
    assert_eq!(conv_grid(128), (8, 16));
    assert_eq!(conv_grid(37), (1, 37));
    assert!(layer_model(Mechanism::Standard, 64, 30, 4, 1).is_err(), "heads must divide d");
}

#[test]
fn sizes_over_the_memory_cap_are_skipped_with_a_reason() {
    // 1 MiB: Super (T×T weights) goes over at T = 512, d = 16; nothing else does (AFT-local's
    // band is linear in T).
    let cfg = config(&[128, 256, 512], 16, 1 << 20);
    let series = sweep(&cfg, &ProgressBar::hidden()).unwrap();
    for s in &series {
        let skipped: Vec<usize> = s.skipped.iter().map(|k| k.t).collect();
        match s.mechanism {
            Mechanism::Super => {
                assert_eq!(skipped, [512], "{:?}", s.mechanism);
                let k = &s.skipped[0];
                assert!(k.reason.contains("> cap") && k.reason.contains("T x T"), "{}", k.reason);
                assert!(k.predicted.resident() > 1 << 20);
                assert_eq!(s.max_t(), Some(256));
            }
            _ => assert!(skipped.is_empty(), "{:?} skipped {skipped:?}", s.mechanism),
        }
    }
}

#[test]
fn loglog_slope_recovers_powers() {
    let lin: Vec<(usize, f64)> = [64, 128, 256].iter().map(|&t| (t, 3.0 * t as f64)).collect();
    let quad: Vec<(usize, f64)> = [64, 128, 256].iter().map(|&t| (t, 0.5 * (t * t) as f64)).collect();
    assert!((loglog_slope(&lin).unwrap() - 1.0).abs() < 1e-12);
    assert!((loglog_slope(&quad).unwrap() - 2.0).abs() < 1e-12);
    assert_eq!(loglog_slope(&lin[..1]), None);
}

#[test]
fn the_command_writes_table_json_and_plot_and_reports_skips() {
    let dir = std::env::temp_dir().join(format!("kestrel-scaling-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    let (ok, stdout, stderr) = kestrel(&[
        "bench",
        "scaling",
        "--d",
        "16",
        "--min-t",
        "128",
        "--max-t",
        "512",
        "--reps",
        "1",
        "--min-pass-ms",
        "1",
        "--mechanisms",
        "standard,super,aft-simple",
        "--mem-cap-mib",
        "1",
        "--json",
        "--out",
        out,
    ]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("random weights"), "{stderr}");
    assert!(stderr.contains("skipped: super T=512"), "the skip is printed: {stderr}");
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    let rows = j["mechanisms"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["mechanism"].as_str().unwrap()).collect();
    assert_eq!(names, ["standard", "super", "aft-simple"]);
    for r in rows {
        let n = r["points"].as_array().unwrap().len() + r["skipped"].as_array().unwrap().len();
        assert_eq!(n, 3, "{r}");
        for p in r["points"].as_array().unwrap() {
            assert!(p["us_per_sample"].as_f64().unwrap() > 0.0);
            assert!(p["us_per_sample_min"].as_f64() <= p["us_per_sample_max"].as_f64());
            assert_eq!(
                p["arena_bytes"].as_u64().unwrap(),
                p["activation_bytes"].as_u64().unwrap() + p["scratch_bytes"].as_u64().unwrap()
            );
        }
        assert!(r["time_slope"].as_f64().is_some() && r["arena_slope"].as_f64().is_some());
    }
    assert_eq!(rows[1]["skipped"][0]["t"], 512);
    assert_eq!(rows[1]["max_t"], 256);
    let md = std::fs::read_to_string(dir.join("table.md")).unwrap();
    assert!(md.contains("| super |") && md.contains("skipped") && md.contains("random weights"), "{md}");
    let png = std::fs::read(dir.join("scaling.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(saved["sizes"], serde_json::json!([128, 256, 512]));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_scaling_flags_are_errors() {
    let (ok, _, stderr) = kestrel(&["bench", "scaling", "--min-t", "64", "--max-t", "100"]);
    assert!(!ok && stderr.contains("power of two"), "{stderr}");
    let (ok, _, stderr) = kestrel(&["bench", "scaling", "--max-t", "128", "--mechanisms", "linformer"]);
    assert!(!ok && stderr.contains("unknown mechanism"), "{stderr}");
    let (ok, _, stderr) = kestrel(&["bench", "scaling", "--max-t", "128", "--batch", "4"]);
    assert!(!ok && stderr.contains("batch 1"), "{stderr}");
    let (ok, _, stderr) = kestrel(&["bench", "scaling", "--max-t", "128", "--d", "30", "--heads", "4"]);
    assert!(!ok && stderr.contains("must divide"), "{stderr}");
}

/// `--bounded`: one model per mechanism for the whole ladder, planned at its largest T and run at
/// each T. The mechanisms whose weights do not grow with T (or grow by leading rows) get one, with
/// the bound's memory at every T and a time at every T; the others are skipped with the reason.
#[test]
fn bounded_sweep_runs_one_model_per_mechanism_at_every_size() {
    let cfg = Config { bounded: true, time: true, reps: 1, ..config(&[8, 16, 32], 16, 1 << 30) };
    let series = sweep(&cfg, &ProgressBar::hidden()).unwrap();
    let mut bounded = Vec::new();
    for se in &series {
        if se.points.is_empty() {
            assert_eq!(se.skipped.len(), 3, "{:?}", se.mechanism);
            assert!(se.skipped.iter().all(|k| k.reason.contains("no bounded model")), "{:?}", se.skipped);
            continue;
        }
        bounded.push(se.mechanism);
        assert_eq!(se.points.iter().map(|p| p.t).collect::<Vec<_>>(), [8, 16, 32]);
        assert!(se.points.iter().all(|p| p.footprint == se.points[2].footprint && p.timing.is_some()));
    }
    for m in [Mechanism::Standard, Mechanism::Efficient, Mechanism::Fastformer, Mechanism::AftSimple] {
        assert!(bounded.contains(&m), "{m:?} should run bounded: {bounded:?}");
    }
}
