//! The outputs of `kestrel bench ops`: the JSON lines, the markdown table and the roofline plot.

use anyhow::Result;
use std::fmt::Write as _;
use std::path::Path;

use super::*;

/// The JSON object with one line per case (small and diffable).
pub(super) fn json_lines(obj: &serde_json::Value) -> Result<String> {
    let mut head = obj.clone();
    let cases = head.as_object_mut().and_then(|o| o.remove("cases")).unwrap_or_default();
    let mut s = serde_json::to_string_pretty(&head)?;
    s.truncate(s.trim_end().len() - 1); // drop the closing brace
    s.push_str(",\n  \"cases\": [\n");
    let items = cases.as_array().cloned().unwrap_or_default();
    for (i, c) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { "," } else { "" };
        writeln!(s, "    {c}{sep}")?;
    }
    s.push_str("  ]\n}\n");
    Ok(s)
}

fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

pub(super) fn markdown(
    rows: &[Row],
    fams: &[Family],
    copies: &[(&str, f64)],
    obj: &serde_json::Value,
    quick: bool,
) -> Result<String> {
    let mut md = String::new();
    let m = &obj["machine"];
    let load = |k: &str| obj[k].as_f64().map_or("?".to_string(), |v| format!("{v:.2}"));
    writeln!(md, "# Op roofline (`kestrel bench ops{}`)\n", if quick { " --quick" } else { "" })?;
    writeln!(
        md,
        "Machine: {} ({} logical cores; ISA flags {}), Kestrel kernels `{}`, {} thread(s), batch 1. \
         1-minute load average {} at the start, {} at the end; {} cases in {:.0} s.\n",
        m["cpu"].as_str().unwrap_or("?"),
        m["logical_cores"],
        m["isa_flags"].as_array().map_or(String::new(), |a| a
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")),
        m["kestrel_isa"].as_str().unwrap_or("?"),
        obj["threads"],
        load("load_average_start"),
        load("load_average_end"),
        rows.len(),
        obj["seconds"].as_f64().unwrap_or(0.0),
    )?;
    writeln!(
        md,
        "Peers measured in this run: FMA peak **{:.1} GFLOP/s** (`kestrel bench gemm`'s probe × threads; {:.1} at the start, \
         {:.1} at the end, the higher used); copy bandwidth, median of the cases' copy peers per level: {}. \
         Clock read: {:.0} ns, taken off every timed run. Node floor (a `Neg` of one element, timed the same way): \
         {:.0} ns, which every case pays beyond its kernel's work.\n",
        obj["peak_gflops"].as_f64().unwrap_or(0.0),
        obj["peak_gflops_start"].as_f64().unwrap_or(0.0),
        obj["peak_gflops_end"].as_f64().unwrap_or(0.0),
        copies.iter().map(|(l, g)| format!("{l} {g:.1} GB/s")).collect::<Vec<_>>().join(", "),
        obj["clock_overhead_ns"].as_f64().unwrap_or(0.0),
        obj["node_floor_ns"].as_f64().unwrap_or(0.0),
    )?;
    writeln!(
        md,
        "Method: each case is a one-node model (`kestrel_rt::ModelBuilder`, f32 weights, random values in the op's \
         domain) in a batch-1 CPU session; the node alone is timed (a clock read before and after it), median of the \
         runs of {} ms after a warm-up. Its copy peer is a `memcpy` of half the case's bytes (so as many bytes read + \
         written as the case moves), timed the same way and interleaved with it (5 rounds; copies under 2 µs \
         repeated within one timed interval; the source refreshed from another buffer before each interval and the \
         destination read out after it, untimed, as the session copies the op's input in and its output out). Bytes and FLOPs: the \
         runtime's cost model (`op_bytes`: inputs + output + weights once; `op_flops`: element-wise ops count 1 \
         per element, data movement 0). A case is **memory-bound** when its FLOP/byte is below the machine balance \
         at its size (peak ÷ its copy bandwidth), and its efficiency is its GB/s ÷ the copy's (target ≥ {}); else \
         **compute-bound**, efficiency = GFLOP/s ÷ peak (target ≥ {}). Levels: where the case's bytes fit on this \
         machine (≤ 48 KiB L1, ≤ 1 MiB L2, ≤ 24 MiB L3, else DRAM).\n",
        obj["case_ms"],
        pct(MEMORY_TARGET),
        pct(COMPUTE_TARGET),
    )?;
    let cores = m["logical_cores"].as_f64().unwrap_or(1.0);
    let busy = ["load_average_start", "load_average_end"].iter().any(|k| obj[*k].as_f64().is_some_and(|l| l > cores));
    writeln!(
        md,
        "**Shared machine**: other processes may run beside the benchmark (on a VM, other tenants too); absolute \
         figures can move by ~1.5× between minutes. {}The ratios are against peers measured in the same run (the copy \
         interleaved with each case, the FMA peak at both ends), which is what makes them meaningful.\n",
        if busy {
            format!(
                "In this run the load average exceeded the {cores} logical cores: other processes (builds) competed \
                 with it, and the FMA probe read {:.0} and {:.0} GFLOP/s at its two ends. ",
                obj["peak_gflops_start"].as_f64().unwrap_or(0.0),
                obj["peak_gflops_end"].as_f64().unwrap_or(0.0),
            )
        } else {
            String::new()
        },
    )?;
    let mut command = String::from("kestrel bench ops");
    if quick {
        command.push_str(" --quick");
    }
    if obj["threads"].as_u64() != Some(1) {
        write!(command, " --threads {}", obj["threads"])?;
    }
    let default_ms = if quick { 3.0 } else { 100.0 };
    if obj["case_ms"].as_f64() != Some(default_ms) {
        write!(command, " --case-ms {}", obj["case_ms"])?;
    }
    for o in obj["only"].as_array().into_iter().flatten().filter_map(|v| v.as_str()) {
        write!(command, " --only {o:?}")?;
    }
    writeln!(md, "Command: `{command}`.\n")?;
    let below = rows.iter().filter(|r| !r.meets_target).count();
    writeln!(md, "**{below} of {} cases below target.**\n", rows.len())?;
    writeln!(md, "## Per family\n")?;
    writeln!(md, "| family | cases | below target | median efficiency | worst case | worst efficiency |")?;
    writeln!(md, "|---|---:|---:|---:|---|---:|")?;
    for f in fams {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            f.family,
            f.cases,
            f.below_target,
            pct(f.median_efficiency),
            f.worst_case,
            pct(f.worst_efficiency)
        )?;
    }
    writeln!(md, "\n## Every case, worst efficiency first\n")?;
    writeln!(
        md,
        "| case | shape | level | bytes | FLOP/B | µs | GB/s | GFLOP/s | copy GB/s | bound | efficiency | meets target |"
    )?;
    writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")?;
    for r in rows {
        writeln!(
            md,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.2} | {:.1} | {} | {} | {} |",
            r.case,
            r.shape,
            r.level,
            human_bytes(r.bytes),
            r.flop_per_byte,
            r.us,
            r.gbs,
            r.gflops,
            r.copy_gbs,
            r.bound,
            pct(r.efficiency),
            if r.meets_target { "yes" } else { "**no**" },
        )?;
    }
    Ok(md)
}

/// The families' colours (by first appearance in the sorted family names).
const COLOURS: [u32; 16] = [
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf, 0x393b79,
    0xad494a, 0x637939, 0xce6dbd, 0x8c6d31, 0x000000,
];

/// The roofline PNG: FLOP/byte against GFLOP/s (log-log), the FMA-peak roof, one copy-bandwidth
/// slope per level, one point per case coloured by family. Cases without FLOPs (data movement)
/// are drawn as triangles at the left edge, at the height their GB/s gives there (so their
/// distance below each slope is their bandwidth efficiency).
pub(super) fn plot(
    rows: &[Row],
    peak: f64,
    copies: &[(&str, f64)],
    path: &Path,
    obj: &serde_json::Value,
) -> Result<()> {
    use plotters::prelude::*;
    kestrel_rt_cli::plot::register_font();
    let with_flops: Vec<&Row> = rows.iter().filter(|r| r.flops > 0).collect();
    let x_min_flops = with_flops.iter().map(|r| r.flop_per_byte).fold(f64::INFINITY, f64::min);
    let x_edge = if x_min_flops.is_finite() { x_min_flops / 4.0 } else { 0.01 };
    let x_max = with_flops.iter().map(|r| r.flop_per_byte).fold(x_edge * 16.0, f64::max) * 2.0;
    let point = |r: &Row| if r.flops > 0 { (r.flop_per_byte, r.gflops) } else { (x_edge, r.gbs * x_edge) };
    let ys: Vec<f64> = rows.iter().map(|r| point(r).1).filter(|y| *y > 0.0).collect();
    let y_min = ys.iter().copied().fold(peak, f64::min) / 2.0;
    let y_max = peak * 2.5;
    let mut fams: Vec<&str> = rows.iter().map(|r| r.family.as_str()).collect();
    fams.sort_unstable();
    fams.dedup();
    let (wpx, hpx) = (1500u32, 1000u32);
    let mut buf = vec![255u8; (wpx * hpx * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (wpx, hpx)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("drawing the plot: {e}");
        root.fill(&WHITE).map_err(err)?;
        let title = format!(
            "Kestrel CPU ops, batch 1, {} thread(s), {}: roofline against the same run's copy and FMA peers",
            obj["threads"],
            obj["machine"]["kestrel_isa"].as_str().unwrap_or("?")
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((x_edge / 1.5..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity, FLOP / byte (left edge: no FLOPs, placed by GB/s)")
            .y_desc("GFLOP/s")
            .x_label_formatter(&|x| format!("{x:.2}"))
            .y_label_formatter(&|y| format!("{y:.2}"))
            .draw()
            .map_err(err)?;
        let grey = |a: f64| RGBColor(60, 60, 60).mix(a);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x_edge / 1.5, peak), (x_max, peak)],
                grey(0.9).stroke_width(2),
            )))
            .map_err(err)?
            .label(format!("FMA peak {peak:.0} GFLOP/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey(0.9).stroke_width(2)));
        for (k, &(level, bw)) in copies.iter().enumerate() {
            let x_knee = (peak / bw).min(x_max);
            let pts = vec![(x_edge / 1.5, bw * x_edge / 1.5), (x_knee, bw * x_knee)];
            let style = ShapeStyle { color: grey(0.35 + 0.15 * k as f64), filled: false, stroke_width: 1 };
            chart
                .draw_series(std::iter::once(plotters::element::DashedPathElement::new(pts, 8, 4, style)))
                .map_err(err)?
                .label(format!("copy {level} {bw:.0} GB/s"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        for (i, fam) in fams.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let colour = RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8);
            let mine: Vec<&Row> = rows.iter().filter(|r| r.family == *fam).collect();
            chart
                .draw_series(
                    mine.iter().filter(|r| r.flops == 0).map(|r| TriangleMarker::new(point(r), 4, colour.filled())),
                )
                .map_err(err)?;
            let anno = chart
                .draw_series(mine.iter().filter(|r| r.flops > 0).map(|r| Circle::new(point(r), 3, colour.filled())))
                .map_err(err)?;
            let n_below = mine.iter().filter(|r| !r.meets_target).count();
            anno.label(format!("{fam} ({n_below}/{} below target)", mine.len()))
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    kestrel_rt_cli::plot::save_rgb(path, wpx, hpx, buf)
}
