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
//! SIMD dot kernel, best of 5, the buffer evicted first); a 64 MiB buffer is streamed and the
//! weights' cache lines flushed (`clflush` on x86_64) between timed calls so the weights come from
//! DRAM, as they do inside a model whose weights outgrow the cache, even where the last-level
//! cache is larger than the flush buffer.

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

/// Evicts `s` from every cache level: on x86_64 `clflush` of each 64-byte line, then `mfence`
/// (a streamed flush buffer does not evict from a last-level cache larger than itself, such as a
/// VM's 480 MiB L3); elsewhere nothing (the callers also stream a flush buffer).
fn evict<T>(s: &[T]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `clflush` of addresses inside a live slice (SSE2, baseline on x86_64).
    unsafe {
        use std::arch::x86_64::{_mm_clflush, _mm_mfence};
        let p = s.as_ptr().cast::<u8>();
        for off in (0..std::mem::size_of_val(s)).step_by(64) {
            _mm_clflush(p.add(off));
        }
        _mm_mfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = s;
}

/// Evicts a weight view's bytes (data and scales) from every cache level ([`evict`]).
fn evict_weights(w: &WeightView<'_>) {
    use kestrel_rt::format::WeightData;
    match w.data() {
        WeightData::F32(d) => evict(d),
        WeightData::F16(d) => evict(d),
        WeightData::I8 { q, scales } => {
            evict(q);
            evict(scales);
        }
        WeightData::I4 { q, scales } => {
            evict(q);
            evict(scales);
        }
    }
}

/// One thread's read bandwidth in GB/s: a 256 MiB buffer, evicted from the caches first
/// ([`evict`]), streamed through the SIMD dot kernel (its two halves against each other), best
/// of `runs`.
pub fn read_bandwidth_gbs(runs: usize) -> f64 {
    let buf = values(64 << 20, 3);
    let (a, b) = buf.split_at(buf.len() / 2);
    std::hint::black_box(kestrel_rt_cpu::kernels::simd::dot_f32(a, b));
    (0..runs.max(1))
        .map(|_| {
            evict(&buf);
            let t0 = Instant::now();
            std::hint::black_box(kestrel_rt_cpu::kernels::simd::dot_f32(std::hint::black_box(a), b));
            (buf.len() * 4) as f64 / t0.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// The activation scale the calibrated (`q8`) rows quantise `x` with: the inputs are uniform in
/// [-1, 1), so ±127 steps span them.
const Q8_X_SCALE: f32 = 1.0 / 127.0;

/// `y = x · Wᵀ` through the runtime's dense entry point: f32 activations (`q8` false), or
/// activations quantised at [`Q8_X_SCALE`] (`q8`: the calibrated int8 path, integer weights).
fn dense(x: &[f32], m: usize, w: &WeightView<'_>, q8: bool, y: &mut [f32]) {
    if q8 {
        kestrel_rt_cpu::kernels::linear::linear_q8(x, m, w, None, Activation::None, Q8_X_SCALE, y);
    } else {
        kestrel_rt_cpu::linear(x, m, w, None, Activation::None, y);
    }
}

/// Times `y [1, N] = x [1, K] · Wᵀ` with the weights evicted from the caches before every call
/// (by streaming `flush`, then [`evict_weights`]): median µs per call over at least `min_ms` of
/// calls. `q8`: calibrated
/// int8 activations (integer weights only).
pub fn time_gemv(n: usize, k: usize, dtype: DType, q8: bool, flush: &[f32], min_ms: f64) -> Result<(f64, usize)> {
    let (x, enc) = problem(1, n, k, dtype)?;
    let bytes = enc.data.len() + enc.scales.len();
    let mut store = kestrel_rt::format::weight::ViewStore::default();
    let w: WeightView<'_> = enc.view(&mut store);
    let mut y = vec![0.0f32; n];
    dense(&x, 1, &w, q8, &mut y);
    let (fa, fb) = flush.split_at(flush.len() / 2);
    let mut secs = Vec::new();
    let mut timed = 0.0;
    while secs.len() < 5 || timed * 1e3 < min_ms {
        std::hint::black_box(kestrel_rt_cpu::kernels::simd::dot_f32(std::hint::black_box(fa), fb));
        evict_weights(&w);
        let t0 = Instant::now();
        dense(std::hint::black_box(&x), 1, &w, q8, &mut y);
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
    time_dense(m, n, k, dtype, false, min_ms)
}

/// [`time_shape`], with calibrated int8 activations when `q8`.
pub fn time_dense(m: usize, n: usize, k: usize, dtype: DType, q8: bool, min_ms: f64) -> Result<(f64, f64)> {
    let (x, enc) = problem(m, n, k, dtype)?;
    let mut store = kestrel_rt::format::weight::ViewStore::default();
    let w: WeightView<'_> = enc.view(&mut store);
    let mut y = vec![0.0f32; m * n];
    dense(&x, m, &w, q8, &mut y);
    let flops = 2.0 * (m * n * k) as f64;
    let mut secs = Vec::new();
    let start = Instant::now();
    while secs.len() < 3 || start.elapsed().as_secs_f64() * 1e3 < min_ms {
        let t0 = Instant::now();
        dense(std::hint::black_box(&x), m, &w, q8, &mut y);
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
            let encodings = [
                (DType::F32, false),
                (DType::F16, false),
                (DType::I8, false),
                (DType::I4, false),
                (DType::I8, true),
                (DType::I4, true),
            ];
            for (dtype, q8) in encodings {
                pb.set_message(format!("{label} {dtype:?}"));
                let (us, bytes) = time_gemv(n, k, dtype, q8, &flush, min_ms)?;
                let gbs = bytes as f64 / us / 1e3;
                gemv.push(GemvRow {
                    shape: label.to_string(),
                    n,
                    k,
                    dtype: encoding_name(dtype, q8),
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
        "read_bandwidth_method": "one thread streaming 256 MiB (evicted first) through the SIMD dot kernel, best of 5",
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
             kernel, best of 5). Each call's weights are evicted first (a 64 MiB buffer streamed and, on x86_64, the weights' lines \
             flushed between calls), as in a model whose weights outgrow the cache. The GEMVs run on {threads} thread(s); the % is of the one-thread bandwidth.\n"
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

/// A weight encoding's name in the tables: `f32`, `f16`, `i8`, `i4`; with calibrated int8
/// activations `i8 x q8`, `i4 x q8`.
fn encoding_name(dtype: DType, q8: bool) -> String {
    let d = format!("{dtype:?}").to_lowercase();
    if q8 {
        format!("{d} x q8")
    } else {
        d
    }
}

/// The row counts of `kestrel bench gemm --rows-sweep`: small, around the tile multiples, and
/// real token counts (ViT-Tiny's 37 and 197).
pub const SWEEP_M: &[usize] =
    &[1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 37, 63, 64, 65, 100, 127, 128, 129, 197, 255, 256, 257, 300];

/// The square layer widths (K = N) of the sweep.
pub const SWEEP_KN: &[usize] = &[192, 384, 768];

/// The tile multiple each sweep row is compared with: the AVX-512 GEMM's 8 rows.
pub const SWEEP_TILE: usize = 8;

/// One (width, encoding, M) point of the rows sweep (its JSON object in `gemm_rows.json`).
#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    /// K = N.
    pub kn: usize,
    /// Rows of x.
    pub m: usize,
    /// Weight encoding (`encoding_name`).
    pub dtype: String,
    /// Median GFLOP/s.
    pub gflops: f64,
    /// The next multiple of [`SWEEP_TILE`] at or above `m`.
    pub next_tile_m: usize,
    /// `gflops` at `next_tile_m`.
    pub next_tile_gflops: f64,
    /// `gflops / next_tile_gflops`.
    pub ratio: f64,
}

/// `kestrel bench gemm --rows-sweep`: GFLOP/s against the row count M at K = N = 192, 384, 768
/// for each weight encoding (f32 activations; int8 also with calibrated activations), each M
/// compared with the next multiple of the tile; writes `gemm_rows.md` and `gemm_rows.json`.
pub fn run_sweep(w: &mut String, isa: &str, threads: usize, json: bool, out: Option<&Path>, min_ms: f64) -> Result<()> {
    let encodings = [(DType::F32, false), (DType::I8, false), (DType::I4, false), (DType::I8, true), (DType::I4, true)];
    let mut ms: Vec<usize> = SWEEP_M.iter().flat_map(|&m| [m, m.div_ceil(SWEEP_TILE) * SWEEP_TILE]).collect();
    ms.sort_unstable();
    ms.dedup();
    let pb = indicatif::ProgressBar::new((SWEEP_KN.len() * encodings.len() * ms.len()) as u64);
    pb.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("template"));
    let mut rows = Vec::new();
    for &kn in SWEEP_KN {
        for (dtype, q8) in encodings {
            let mut rate = std::collections::BTreeMap::new();
            for &m in &ms {
                pb.set_message(format!("{kn} {} M={m}", encoding_name(dtype, q8)));
                rate.insert(m, time_dense(m, kn, kn, dtype, q8, min_ms)?.0);
                pb.inc(1);
            }
            for &m in SWEEP_M {
                let nt = m.div_ceil(SWEEP_TILE) * SWEEP_TILE;
                let (g, gn) = (rate[&m], rate[&nt]);
                rows.push(SweepRow {
                    kn,
                    m,
                    dtype: encoding_name(dtype, q8),
                    gflops: g,
                    next_tile_m: nt,
                    next_tile_gflops: gn,
                    ratio: g / gn,
                });
            }
        }
    }
    pb.finish_and_clear();
    let machine = kestrel_rt_cli::machine::describe(isa);
    let obj = serde_json::json!({
        "machine": machine,
        "load_average": kestrel_rt_cli::machine::load_average(),
        "threads": threads,
        "tile": SWEEP_TILE,
        "method": "kestrel_rt_cpu::linear (f32 activations) or linear_q8 (x q8: activations quantised at 1/127), random data, median call over the minimum time per point",
        "rows": rows,
    });
    let mut md = String::new();
    writeln!(
        md,
        "# GFLOP/s against the row count M (`kestrel bench gemm --rows-sweep`)\n\nMachine: {} ({} logical cores), Kestrel kernels \
         `{isa}`, {threads} thread(s). `y [M, N] = x [M, K] · Wᵀ` through the runtime's dense entry point, K = N, median call over \
         ≥ {min_ms} ms per point. Each cell: GFLOP/s, and in brackets the ratio to the rate at the next multiple of {SWEEP_TILE} rows \
         (the GEMM tile). `x q8`: calibrated int8 activations (the integer kernels).\n",
        machine["cpu"].as_str().unwrap_or("?"),
        machine["logical_cores"],
    )?;
    for &kn in SWEEP_KN {
        writeln!(md, "\n## K = N = {kn}\n")?;
        let names: Vec<String> = encodings.iter().map(|&(d, q)| encoding_name(d, q)).collect();
        let mut head = vec!["M".to_string()];
        head.extend(names.iter().cloned());
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        let align = format!("|---:|{}", "---:|".repeat(names.len()));
        let cells = SWEEP_M.iter().map(|&m| {
            let mut c = vec![m.to_string()];
            for n in &names {
                if let Some(r) = rows.iter().find(|r| r.kn == kn && r.m == m && &r.dtype == n) {
                    c.push(format!("{:.1} ({:.2})", r.gflops, r.ratio));
                }
            }
            c.join(" | ")
        });
        md_table(&mut md, &head, &align, cells)?;
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("gemm_rows.md"), &md)?;
        std::fs::write(dir.join("gemm_rows.json"), serde_json::to_string_pretty(&obj)? + "\n")?;
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
