//! `kestrel-bench chart DIR`: draws `DIR/chart.png` from `DIR/results.json` written by
//! `kestrel bench paper` (plotters): one column per model, one marker per runtime (Kestrel batch 1,
//! batched, int8; tract batch 1; the paper's M2), seconds for 5,000 samples on a log axis.
//!
//! `kestrel-bench criterion-summary CRITERION_DIR OUT.md`: one Markdown table of every benchmark
//! criterion measured (`TARGET/criterion`, written by `cargo bench -p kestrel-bench --bench
//! kernels`): median time per call with its 95% confidence interval, and GFLOP/s where the
//! benchmark declared a throughput in FLOPs.

use anyhow::{anyhow, bail, Result};
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::Path;

/// What to draw: per series, one value (or none) per label.
struct Chart {
    /// Title.
    title: String,
    /// Column labels (model names).
    labels: Vec<String>,
    /// `(legend, values)`.
    series: Vec<(String, Vec<Option<f64>>)>,
}

/// Where a TTF font is looked for (text needs one; `KESTREL_FONT` overrides).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/Library/Fonts/Arial.ttf",
];

fn register_font() -> Result<()> {
    let path = std::env::var("KESTREL_FONT")
        .ok()
        .or_else(|| FONTS.iter().find(|p| Path::new(p).exists()).map(|p| p.to_string()));
    let Some(path) = path else {
        bail!("no TTF font found (install fonts-dejavu-core or set KESTREL_FONT=/path/to/font.ttf)");
    };
    let bytes: &'static [u8] = Box::leak(std::fs::read(&path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path}: not a usable TTF font"))
}

/// Draws `chart` to a PNG at `path`.
fn draw(path: &Path, chart: &Chart) -> Result<()> {
    register_font()?;
    let n = chart.labels.len();
    let values = chart.series.iter().flat_map(|(_, v)| v.iter().flatten().copied()).filter(|v| *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if n == 0 || !lo.is_finite() {
        bail!("nothing to plot");
    }
    let width = (140 + 34 * n as u32).max(900);
    let root = BitMapBackend::new(path, (width, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let labels = chart.labels.clone();
    let mut c = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(210)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), ((lo / 1.5)..(hi * 1.5)).log_scale())
        .map_err(|e| anyhow!("{e:?}"))?;
    c.configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 13).into_font().transform(FontTransform::Rotate90))
        .y_desc("seconds for 5,000 samples")
        .disable_x_mesh()
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(80, 80, 80),
    ];
    let k = chart.series.len().max(1) as f64;
    for (si, (name, vals)) in chart.series.iter().enumerate() {
        let color = colors[si % colors.len()];
        let off = (si as f64 - (k - 1.0) / 2.0) * 0.12;
        let pts: Vec<(f64, f64)> =
            vals.iter().enumerate().filter_map(|(i, v)| v.filter(|v| *v > 0.0).map(|v| (i as f64 + off, v))).collect();
        c.draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name.as_str())
            .legend(move |(x, y)| Circle::new((x, y), 5, color.filled()));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

fn secs(v: &serde_json::Value) -> Option<f64> {
    v.get("seconds_per_5000").and_then(serde_json::Value::as_f64)
}

/// One criterion benchmark's result.
struct Measured {
    /// `group/function/parameter`, split.
    group: String,
    function: String,
    parameter: String,
    /// Median ns per iteration and its 95% confidence interval.
    median_ns: f64,
    lo_ns: f64,
    hi_ns: f64,
    /// FLOPs per iteration (criterion `Throughput::Elements`), if declared.
    flops: Option<f64>,
}

/// Every `*/new/estimates.json` under `dir` (criterion's layout), with its `benchmark.json`.
fn read_criterion(dir: &Path, out: &mut Vec<Measured>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        let est = path.join("new/estimates.json");
        if est.exists() {
            let e: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&est)?)?;
            let b: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(path.join("new/benchmark.json"))?)?;
            let median = &e["median"];
            let num = |v: &serde_json::Value| v.as_f64().ok_or_else(|| anyhow!("{}: no median", est.display()));
            out.push(Measured {
                group: b["group_id"].as_str().unwrap_or("?").to_string(),
                function: b["function_id"].as_str().unwrap_or("").to_string(),
                parameter: b["value_str"].as_str().unwrap_or("").to_string(),
                median_ns: num(&median["point_estimate"])?,
                lo_ns: num(&median["confidence_interval"]["lower_bound"])?,
                hi_ns: num(&median["confidence_interval"]["upper_bound"])?,
                flops: b["throughput"]["Elements"].as_f64(),
            });
        } else if path.file_name().is_some_and(|n| n != "report") {
            read_criterion(&path, out)?;
        }
    }
    Ok(())
}

fn time_str(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Writes the Markdown summary of the criterion results under `dir` to `out`.
fn criterion_summary(dir: &Path, out: &Path) -> Result<()> {
    let mut rows = Vec::new();
    read_criterion(dir, &mut rows)?;
    if rows.is_empty() {
        bail!("no criterion results under {} (run: cargo bench -p kestrel-bench --bench kernels)", dir.display());
    }
    rows.sort_by(|a, b| (&a.group, &a.function, &a.parameter).cmp(&(&b.group, &b.function, &b.parameter)));
    let mut md = String::from(
        "| group | benchmark | variant | median / call | 95% CI of the median | GFLOP/s |\n|---|---|---|---:|---|---:|\n",
    );
    for r in &rows {
        let gflops = r.flops.map_or("-".to_string(), |f| format!("{:.2}", f / r.median_ns));
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} – {} | {} |\n",
            r.group,
            r.function,
            r.parameter,
            time_str(r.median_ns),
            time_str(r.lo_ns),
            time_str(r.hi_ns),
            gflops
        ));
    }
    std::fs::write(out, md).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    println!("{} ({} benchmarks)", out.display(), rows.len());
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = match args.as_slice() {
        [cmd, dir] if cmd == "chart" => Path::new(dir).to_path_buf(),
        [cmd, dir, out] if cmd == "criterion-summary" => return criterion_summary(Path::new(dir), Path::new(out)),
        _ => bail!(
            "usage: kestrel-bench chart RESULTS_DIR   (reads results.json, writes chart.png)\n       \
             kestrel-bench criterion-summary CRITERION_DIR OUT.md"
        ),
    };
    let text = std::fs::read_to_string(dir.join("results.json"))?;
    let j: serde_json::Value = serde_json::from_str(&text)?;
    let rows = j["rows"].as_array().ok_or_else(|| anyhow!("results.json: no rows"))?;
    let col = |key: &str| rows.iter().map(|r| secs(&r[key])).collect::<Vec<_>>();
    let chart = Chart {
        title: "Seconds for 5,000 samples (log scale)".into(),
        labels: rows.iter().map(|r| r["model"].as_str().unwrap_or("?").to_string()).collect(),
        series: vec![
            ("Kestrel batch 1".into(), col("kestrel_b1")),
            ("Kestrel batched".into(), col("kestrel_batched")),
            ("Kestrel int8 batch 1".into(), col("kestrel_int8_b1")),
            ("tract batch 1".into(), col("tract_b1")),
            ("paper (Apple M2)".into(), rows.iter().map(|r| r["paper_m2_s"].as_f64()).collect()),
        ],
    };
    let out = dir.join("chart.png");
    draw(&out, &chart)?;
    println!("{}", out.display());
    Ok(())
}
