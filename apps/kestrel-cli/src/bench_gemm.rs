//! `kestrel bench gemm`: the f32 dense kernels' GFLOP/s on the paper models' large shapes, as a
//! fraction of this machine's measured peak.
//!
//! **Peak** (per core): the kernels' ISA probe ([`kestrel_rt_cpu::kernels::simd::fma_probe`]):
//! 16 independent FMA chains of the widest vectors the GEMM uses (AVX-512: 16 lanes), timed over
//! ~50 ms, best of several runs, one thread. It is the FMA throughput the core actually sustains
//! at its current clock (not a datasheet figure), so the percentage is kernel efficiency.
//! With `--threads T` the reference peak is T × the one-core peak.
//!
//! **GEMM**: `kestrel_rt_cpu::linear` (the runtime's dense entry point: ISA dispatch, packing,
//! thread split) on random f32 inputs and weights, `y [M, N] = x [M, K] · Wᵀ`, timed after a
//! warm-up call, repeated for at least `--min-ms` per shape; the median call gives GFLOP/s
//! (2·M·N·K flops).
//!
//! **GEMV** (batch 1: M = 1): the weights are read once per call and the FLOPs are few, so the
//! bound is memory bandwidth. Reported as weight bytes per second against the measured **read
//! bandwidth** (one thread streaming a 256 MiB buffer, 8× the largest L3 seen here, through the
//! SIMD dot kernel, best of 5); a 64 MiB buffer is streamed between timed calls so the weights
//! come from DRAM, as they do inside a model whose weights outgrow the cache.

use anyhow::{Context, Result};
use kestrel_rt::format::ops::Activation;
use kestrel_rt::format::weight::EncodedWeight;
use kestrel_rt::format::{DType, WeightView};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// The shapes timed: (label, M, N, K). M = tokens × batch.
pub const SHAPES: &[(&str, usize, usize, usize)] = &[
    ("mnist head, batch 32", 32, 2048, 4096),
    ("mnist head 2, batch 32", 32, 1024, 2048),
    ("cifar head, batch 32", 32, 2048, 20736),
    ("mnist MLP up, batch 32", 2048, 128, 64),
    ("cifar projection, batch 1", 144, 144, 144),
    ("cifar MLP up, batch 1", 144, 288, 144),
    ("cifar projection, batch 32", 4608, 144, 144),
    ("cifar MLP up, batch 32", 4608, 288, 144),
    ("cifar MLP down, batch 32", 4608, 144, 288),
    ("square 1024", 1024, 1024, 1024),
];

/// The batch-1 heads timed as GEMVs: (label, N, K).
pub const GEMV_SHAPES: &[(&str, usize, usize)] =
    &[("mnist head, batch 1", 2048, 4096), ("mnist head 2, batch 1", 1024, 2048), ("cifar head, batch 1", 2048, 20736)];

/// One GEMV's result (its JSON object in `gemm.json`).
#[derive(Clone, Debug, Serialize)]
pub struct GemvRow {
    /// Label.
    pub shape: String,
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// Weight encoding.
    pub dtype: String,
    /// Weight bytes read per call.
    #[serde(rename = "weight_bytes")]
    pub bytes: usize,
    /// Median µs per call.
    pub us: f64,
    /// Weight bytes / median time, GB/s.
    pub gbs: f64,
    /// `gbs` / the measured read bandwidth.
    pub fraction_of_bandwidth: f64,
}

/// One thread's read bandwidth in GB/s: a 256 MiB buffer streamed through the SIMD dot kernel
/// (its two halves against each other), best of `runs`.
pub fn read_bandwidth_gbs(runs: usize) -> f64 {
    let buf = values(64 << 20, 3);
    let (a, b) = buf.split_at(buf.len() / 2);
    std::hint::black_box(kestrel_rt_cpu::kernels::simd::dot_f32(a, b));
    (0..runs.max(1))
        .map(|_| {
            let t0 = Instant::now();
            std::hint::black_box(kestrel_rt_cpu::kernels::simd::dot_f32(std::hint::black_box(a), b));
            (buf.len() * 4) as f64 / t0.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// Times `y [1, N] = x [1, K] · Wᵀ` with the weights evicted from the caches before every call
/// (by streaming `flush`): median µs per call over at least `min_ms` of calls.
pub fn time_gemv(n: usize, k: usize, dtype: DType, flush: &[f32], min_ms: f64) -> Result<(f64, usize)> {
    let (x, enc) = problem(1, n, k, dtype)?;
    let bytes = enc.data.len() + enc.scales.len();
    let mut store = kestrel_rt::format::weight::ViewStore::default();
    let w: WeightView<'_> = enc.view(&mut store);
    let mut y = vec![0.0f32; n];
    kestrel_rt_cpu::linear(&x, 1, &w, None, Activation::None, &mut y);
    let (fa, fb) = flush.split_at(flush.len() / 2);
    let mut secs = Vec::new();
    let mut timed = 0.0;
    while secs.len() < 5 || timed * 1e3 < min_ms {
        std::hint::black_box(kestrel_rt_cpu::kernels::simd::dot_f32(std::hint::black_box(fa), fb));
        let t0 = Instant::now();
        kestrel_rt_cpu::linear(std::hint::black_box(&x), 1, &w, None, Activation::None, &mut y);
        let dt = t0.elapsed().as_secs_f64();
        secs.push(dt);
        timed += dt;
        std::hint::black_box(&y);
    }
    secs.sort_by(f64::total_cmp);
    Ok((secs[secs.len() / 2] * 1e6, bytes))
}

/// One shape's result (its JSON object in `gemm.json`).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Label.
    pub shape: String,
    /// Rows of x.
    pub m: usize,
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// Weight encoding.
    pub dtype: String,
    /// Median GFLOP/s.
    pub gflops: f64,
    /// Best call's GFLOP/s.
    pub gflops_max: f64,
    /// `gflops` / (threads × one-core peak).
    pub fraction_of_peak: f64,
}

/// The one-core f32 FMA peak in GFLOP/s: best of `runs` probes of ~50 ms.
pub fn peak_gflops(runs: usize) -> f64 {
    use kestrel_rt_cpu::kernels::simd::fma_probe;
    // Calibrate the iteration count to ~50 ms.
    let mut iters = 1 << 16;
    loop {
        let t0 = Instant::now();
        std::hint::black_box(fma_probe(iters));
        if t0.elapsed().as_secs_f64() > 0.01 || iters > 1 << 30 {
            iters = ((iters as f64) * 0.05 / t0.elapsed().as_secs_f64().max(1e-6)) as usize;
            break;
        }
        iters *= 4;
    }
    (0..runs.max(1))
        .map(|_| {
            let t0 = Instant::now();
            let (flops, sum) = fma_probe(iters);
            std::hint::black_box(sum);
            flops as f64 / t0.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// Deterministic values in [-1, 1) (the timing does not depend on them).
fn values(n: usize, seed: u64) -> Vec<f32> {
    kestrel_rt::demo::Rng::new(seed).vec(n, 1.0)
}

/// A dense layer's random inputs `x [rows, k]` and weights `[n, k]` encoded as `dtype`.
fn problem(rows: usize, n: usize, k: usize, dtype: DType) -> Result<(Vec<f32>, EncodedWeight)> {
    let enc = EncodedWeight::encode(dtype, n, k, &values(n * k, 2)).context("encoding the weights")?;
    Ok((values(rows * k, 1), enc))
}

/// Times one shape: median and best GFLOP/s over calls filling at least `min_ms`.
pub fn time_shape(m: usize, n: usize, k: usize, dtype: DType, min_ms: f64) -> Result<(f64, f64)> {
    let (x, enc) = problem(m, n, k, dtype)?;
    let mut store = kestrel_rt::format::weight::ViewStore::default();
    let w: WeightView<'_> = enc.view(&mut store);
    let mut y = vec![0.0f32; m * n];
    kestrel_rt_cpu::linear(&x, m, &w, None, Activation::None, &mut y);
    let flops = 2.0 * (m * n * k) as f64;
    let mut secs = Vec::new();
    let start = Instant::now();
    while secs.len() < 3 || start.elapsed().as_secs_f64() * 1e3 < min_ms {
        let t0 = Instant::now();
        kestrel_rt_cpu::linear(std::hint::black_box(&x), m, &w, None, Activation::None, &mut y);
        secs.push(t0.elapsed().as_secs_f64());
        std::hint::black_box(&y);
    }
    secs.sort_by(f64::total_cmp);
    let median = secs[secs.len() / 2];
    Ok((flops / median / 1e9, flops / secs[0] / 1e9))
}

/// `kestrel bench gemm`: prints (or writes) the table; `json` prints one object.
pub fn run(w: &mut String, isa: &str, threads: usize, json: bool, out: Option<&Path>, min_ms: f64) -> Result<()> {
    let peak1 = peak_gflops(5);
    let peak = peak1 * threads as f64;
    let pb = indicatif::ProgressBar::new(0);
    pb.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("template"));
    let mut rows = Vec::new();
    // KESTREL_GEMM_SHAPES="MxNxK,MxNxK": other shapes instead of the paper's (for tuning).
    let custom: Vec<(String, usize, usize, usize)> = std::env::var("KESTREL_GEMM_SHAPES")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|t| {
                    let d: Vec<usize> = t.split('x').filter_map(|n| n.trim().parse().ok()).collect();
                    (d.len() == 3).then(|| (t.to_string(), d[0], d[1], d[2]))
                })
                .collect()
        })
        .unwrap_or_default();
    let custom_none = custom.is_empty();
    let shapes: Vec<(String, usize, usize, usize)> =
        if custom.is_empty() { SHAPES.iter().map(|&(l, m, n, k)| (l.to_string(), m, n, k)).collect() } else { custom };
    for (label, m, n, k) in shapes {
        for dtype in [DType::F32, DType::I8] {
            pb.set_message(format!("{label} {dtype:?}"));
            let (g, gmax) = time_shape(m, n, k, dtype, min_ms)?;
            rows.push(Row {
                shape: label.clone(),
                m,
                n,
                k,
                dtype: format!("{dtype:?}").to_lowercase(),
                gflops: g,
                gflops_max: gmax,
                fraction_of_peak: g / peak,
            });
            pb.inc(1);
            pb.inc_length(1);
        }
    }
    let mut gemv = Vec::new();
    let bandwidth = read_bandwidth_gbs(5);
    if custom_none {
        let flush = values(16 << 20, 4);
        for &(label, n, k) in GEMV_SHAPES {
            for dtype in [DType::F32, DType::F16, DType::I8] {
                pb.set_message(format!("{label} {dtype:?}"));
                let (us, bytes) = time_gemv(n, k, dtype, &flush, min_ms)?;
                let gbs = bytes as f64 / us / 1e3;
                gemv.push(GemvRow {
                    shape: label.to_string(),
                    n,
                    k,
                    dtype: format!("{dtype:?}").to_lowercase(),
                    bytes,
                    us,
                    gbs,
                    fraction_of_bandwidth: gbs / bandwidth,
                });
                pb.inc(1);
                pb.inc_length(1);
            }
        }
    }
    pb.finish_and_clear();
    let machine = kestrel_rt_cli::machine::describe(isa);
    let obj = serde_json::json!({
        "machine": machine,
        "load_average": kestrel_rt_cli::machine::load_average(),
        "threads": threads,
        "peak_gflops_per_core": peak1,
        "peak_gflops": peak,
        "peak_method": "16 independent FMA chains of the GEMM's widest vectors, best of 5 runs of ~50 ms, one thread; × threads",
        "rows": rows,
        "read_bandwidth_gbs": bandwidth,
        "read_bandwidth_method": "one thread streaming 256 MiB through the SIMD dot kernel, best of 5",
        "gemv": gemv,
    });
    let mut md = String::new();
    writeln!(
        md,
        "# f32 GEMM efficiency (`kestrel bench gemm`)\n\nMachine: {} ({} logical cores), Kestrel kernels `{isa}`, {threads} thread(s). \
         Peak: {peak1:.1} GFLOP/s per core measured by the FMA probe (16 independent FMA chains of the GEMM's vector width, best of 5 × ~50 ms), \
         × {threads} thread(s) = {peak:.1} GFLOP/s. GEMM: `kestrel_rt_cpu::linear` on random data, median call over ≥ {min_ms} ms per shape. \
         int8 rows: int8 weights dequantised while packing (f32 arithmetic), for comparison.\n",
        machine["cpu"].as_str().unwrap_or("?"),
        machine["logical_cores"],
    )?;
    let head = ["shape", "M", "N", "K", "weights", "GFLOP/s (median)", "best", "% of peak"];
    let cells = rows.iter().map(|r| {
        let (gflops, best, peak) = (r.gflops, r.gflops_max, 100.0 * r.fraction_of_peak);
        format!("{} | {} | {} | {} | {} | {gflops:.1} | {best:.1} | {peak:.0}%", r.shape, r.m, r.n, r.k, r.dtype)
    });
    md_table(&mut md, &head, "|---|---:|---:|---:|---|---:|---:|---:|", cells)?;
    if !gemv.is_empty() {
        writeln!(
            md,
            "\n## Batch 1 (GEMV): bandwidth-bound\n\nRead bandwidth: {bandwidth:.1} GB/s (one thread streaming 256 MiB through the SIMD dot \
             kernel, best of 5). Each call's weights are evicted first (a 64 MiB buffer streamed between calls), as in a model whose \
             weights outgrow the cache. The GEMVs run on {threads} thread(s); the % is of the one-thread bandwidth.\n"
        )?;
        let head = ["shape", "N", "K", "weights", "weight MB", "µs (median)", "GB/s", "% of read bandwidth"];
        let cells = gemv.iter().map(|r| {
            let (mb, us, gbs, bw) = (r.bytes as f64 / 1e6, r.us, r.gbs, 100.0 * r.fraction_of_bandwidth);
            format!("{} | {} | {} | {} | {mb:.1} | {us:.0} | {gbs:.1} | {bw:.0}%", r.shape, r.n, r.k, r.dtype)
        });
        md_table(&mut md, &head, "|---|---:|---:|---|---:|---:|---:|---:|", cells)?;
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("gemm.md"), &md)?;
        std::fs::write(dir.join("gemm.json"), serde_json::to_string_pretty(&obj)? + "\n")?;
    }
    if json {
        writeln!(w, "{obj}")?;
    } else {
        w.push_str(&md);
    }
    Ok(())
}

/// A Markdown table: the header cells, the alignment row, then each row's cells (already joined
/// by ` | `), each row framed by `| … |`.
fn md_table(md: &mut String, head: &[&str], align: &str, rows: impl Iterator<Item = String>) -> std::fmt::Result {
    writeln!(md, "| {} |", head.join(" | "))?;
    writeln!(md, "{align}")?;
    for r in rows {
        writeln!(md, "| {r} |")?;
    }
    Ok(())
}
