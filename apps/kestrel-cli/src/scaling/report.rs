//! The reports of `kestrel bench scaling`: the Markdown table, the JSON document and the
//! log-log PNG.

use super::*;

/// The Markdown report: summary with slopes, then time, arena and weights per T.
pub fn markdown(series: &[Series], cfg: &Config, machine: &serde_json::Value) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Scaling with T (`kestrel bench scaling{}`)\n", if cfg.bounded { " --bounded" } else { "" });
    if cfg.bounded {
        let _ = writeln!(
            s,
            "**Bounded**: one model per mechanism for every T in {}..={} (format 2.0 bounded dims, fitted by \
             `builder::bounded_sweep` from builds at many sizes), its memory planned once at the largest T (the \
             arena column is therefore the bound's at every T), run at each T with `Session::set_input_shapes`: \
             the time is what one session pays at each actual length.\n",
            cfg.sizes[0],
            cfg.sizes.last().unwrap_or(&cfg.sizes[0])
        );
    }
    let _ = writeln!(
        s,
        "One layer `x [T, {d}] -> mechanism -> y [T, {d}]` per mechanism, built in code with **random \
         weights** (timing only), f32 weights, non-causal, batch 1, CPU runtime on one thread. Machine: {cpu} \
         ({cores} logical cores; ISA flags {flags}), kernels `{isa}`. Time: median of {reps} passes after a \
         warm-up run, each pass at least {ms} ms of samples (spread in the JSON). Arena = the memory plan's \
         activation bytes (batch 1) + kernel scratch; weights = stored f32 weight bytes. Sizes whose weights + \
         arena would exceed {cap} were skipped (listed below). Slopes: least-squares fit of log(value) \
         against log(T); ~1 = linear, ~2 = quadratic; \"top\" fits the largest {top} measured sizes, where the \
         T-independent projections no longer dominate.\n",
        d = cfg.d,
        cpu = machine["cpu"].as_str().unwrap_or("?"),
        cores = machine["logical_cores"],
        flags = machine["isa_flags"]
            .as_array()
            .map(|f| f.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        isa = machine["kestrel_isa"].as_str().unwrap_or("?"),
        reps = cfg.reps,
        ms = cfg.min_pass.as_millis(),
        cap = mib(cfg.mem_cap_bytes),
        top = TOP_POINTS,
    );
    if let (Some(a), Some(b)) = (machine["load_average_start"].as_f64(), machine["load_average_end"].as_f64()) {
        let _ = writeln!(
            s,
            "1-minute load average at the start / end of the run: {a:.2} / {b:.2} on {} logical cores{}.\n",
            machine["logical_cores"],
            if a.max(b) > machine["logical_cores"].as_f64().unwrap_or(1.0) {
                " (more runnable processes than cores: other jobs competed with the benchmark, read the times as \
                 indicative)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        s,
        "| mechanism | settings | T measured | time slope (all) | time slope (top) | expected time | arena slope | weight slope | expected weights |"
    );
    let _ = writeln!(s, "|---|---|---|---:|---:|---|---:|---:|---|");
    for se in series {
        let m = se.mechanism;
        let range = match (se.points.first(), se.points.last()) {
            (Some(a), Some(b)) => format!("{}-{}", a.t, b.t),
            _ => "none".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            m.name(),
            m.settings(cfg.heads),
            range,
            slope_s(se.time_slope()),
            slope_s(se.time_slope_top()),
            m.time_growth().name(),
            slope_s(se.arena_slope()),
            slope_s(se.weight_slope()),
            m.weight_growth().name(),
        );
    }
    let header = |s: &mut String, what: &str| {
        let _ = writeln!(s, "\n## {what}\n");
        let _ = write!(s, "| T |");
        for se in series {
            let _ = write!(s, " {} |", se.mechanism.name());
        }
        let _ = write!(s, "\n|---:|");
        for _ in series {
            let _ = write!(s, "---:|");
        }
        s.push('\n');
    };
    let cell = |se: &Series, t: usize, f: &dyn Fn(&Point) -> String| -> String {
        if let Some(p) = se.points.iter().find(|p| p.t == t) {
            f(p)
        } else if se.skipped.iter().any(|k| k.t == t) {
            "skipped".into()
        } else {
            "-".into()
        }
    };
    type Fmt = Box<dyn Fn(&Point) -> String>;
    let tables: [(&str, Fmt); 3] = [
        (
            "Time per sample (us, median)",
            Box::new(|p: &Point| p.timing.map_or("-".into(), |t| format!("{:.1}", t.median_us))),
        ),
        (
            "Arena (KiB: activations + scratch)",
            Box::new(|p: &Point| format!("{:.1}", p.footprint.arena() as f64 / 1024.0)),
        ),
        ("Weights (KiB)", Box::new(|p: &Point| format!("{:.1}", p.footprint.weights as f64 / 1024.0))),
    ];
    for (title, f) in &tables {
        header(&mut s, title);
        for &t in &cfg.sizes {
            let _ = write!(s, "| {t} |");
            for se in series {
                let _ = write!(s, " {} |", cell(se, t, f.as_ref()));
            }
            s.push('\n');
        }
    }
    let skipped: Vec<String> = series
        .iter()
        .flat_map(|se| se.skipped.iter().map(move |k| format!("- {} T={}: {}", se.mechanism.name(), k.t, k.reason)))
        .collect();
    let _ = writeln!(s, "\n## Skipped sizes\n");
    if skipped.is_empty() {
        let _ = writeln!(s, "None.");
    } else {
        for k in skipped {
            let _ = writeln!(s, "{k}");
        }
    }
    s
}

/// The JSON report (stable keys, see `benches/README.md`).
pub fn json(series: &[Series], cfg: &Config, machine: &serde_json::Value) -> serde_json::Value {
    // A point's footprint at `t` tokens.
    let fp = |f: &Footprint, t: usize| {
        serde_json::json!({
            "arena_bytes": f.arena(),
            "activation_bytes": f.activations,
            "scratch_bytes": f.scratch,
            "weight_bytes": f.weights,
            "t": t,
        })
    };
    let rows: Vec<_> = series
        .iter()
        .map(|se| {
            let m = se.mechanism;
            let points: Vec<_> = se
                .points
                .iter()
                .map(|p| {
                    let mut j = fp(&p.footprint, p.t);
                    if let Some(t) = p.timing {
                        j["us_per_sample"] = t.median_us.into();
                        j["us_per_sample_min"] = t.min_us.into();
                        j["us_per_sample_max"] = t.max_us.into();
                        j["samples_per_pass"] = t.samples_per_pass.into();
                        j["passes"] = t.passes.into();
                    }
                    j
                })
                .collect();
            let skipped: Vec<_> = se
                .skipped
                .iter()
                .map(|k| {
                    let mut j = fp(&k.predicted, k.t);
                    j["reason"] = k.reason.clone().into();
                    j
                })
                .collect();
            serde_json::json!({
                "mechanism": m.name(),
                "settings": m.settings(cfg.heads),
                "expected_time_growth": m.time_growth().name(),
                "expected_weight_growth": m.weight_growth().name(),
                "time_slope": se.time_slope(),
                "time_slope_top": se.time_slope_top(),
                "arena_slope": se.arena_slope(),
                "weight_slope": se.weight_slope(),
                "max_t": se.max_t(),
                "points": points,
                "skipped": skipped,
            })
        })
        .collect();
    serde_json::json!({
        "machine": machine,
        "weights": "random (timing only), f32",
        "bounded": cfg.bounded,
        "d": cfg.d,
        "heads": cfg.heads,
        "sizes": cfg.sizes,
        "reps": cfg.reps,
        "min_pass_ms": cfg.min_pass.as_millis() as u64,
        "mem_cap_bytes": cfg.mem_cap_bytes,
        "batch": 1,
        "threads": 1,
        "mechanisms": rows,
    })
}

/// Colours of the nine series: the tab10 palette (as matplotlib lists it, `0xRRGGBB`), one per
/// mechanism.
const COLOURS: [u32; 9] = [0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0x17becf];

/// Draws the log-log PNG: time per sample, arena bytes and weight bytes against T, one line per
/// mechanism, with dashed slope-1 and slope-2 guides on the time panel.
pub fn plot(series: &[Series], cfg: &Config, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    crate::plot::register_font();
    let (wpx, hpx) = (1800u32, 640u32);
    let mut buf = vec![255u8; (wpx * hpx * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (wpx, hpx)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("drawing the plot: {e}");
        root.fill(&WHITE).map_err(err)?;
        let (title, body) = root.split_vertically(40);
        title
            .draw(&Text::new(
                format!(
                    "Kestrel CPU, one layer, d = {}, batch 1, random weights: time and memory against T (log-log)",
                    cfg.d
                ),
                (12, 12),
                ("sans-serif", 18).into_font(),
            ))
            .map_err(err)?;
        let panels = body.split_evenly((1, 3));
        type Get = fn(&Point) -> Option<f64>;
        let specs: [(&str, &str, Get); 3] = [
            ("time per sample (legend: slope of the largest sizes)", "us / sample", |p| p.timing.map(|t| t.median_us)),
            ("arena: activations + scratch (legend: slope)", "bytes", |p| Some(p.footprint.arena() as f64)),
            ("stored weights (legend: slope)", "bytes", |p| Some(p.footprint.weights as f64)),
        ];
        let (t0, t1) = (cfg.sizes[0] as f64, *cfg.sizes.last().unwrap_or(&cfg.sizes[0]) as f64);
        for (k, (panel, (name, unit, get))) in panels.iter().zip(specs).enumerate() {
            let vals: Vec<f64> =
                series.iter().flat_map(|s| s.points.iter().filter_map(get)).filter(|v| *v > 0.0).collect();
            let (lo, hi) = vals.iter().fold((f64::INFINITY, 0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            if !lo.is_finite() {
                continue;
            }
            let mut chart = ChartBuilder::on(panel)
                .caption(name, ("sans-serif", 16))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(80)
                .build_cartesian_2d((t0 / 1.2..t1 * 1.2).log_scale(), (lo / 2.0..hi * 2.0).log_scale())
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("tokens T")
                .y_desc(unit)
                .x_label_formatter(&|x| format!("{}", x.round() as u64))
                .y_label_formatter(&|y| format!("{y:.0e}"))
                .draw()
                .map_err(err)?;
            if k == 0 {
                // Guides through the lowest value at t0: slope 1 and slope 2.
                for (slope, label) in [(1.0, "slope 1 (linear)"), (2.0, "slope 2 (quadratic)")] {
                    let y0 = lo;
                    let pts: Vec<(f64, f64)> = cfg
                        .sizes
                        .iter()
                        .map(|&t| (t as f64, y0 * (t as f64 / t0).powf(slope)))
                        .filter(|&(_, y)| y <= hi * 2.0)
                        .collect();
                    let style = ShapeStyle { color: BLACK.mix(0.5), filled: false, stroke_width: 1 };
                    chart
                        .draw_series(std::iter::once(plotters::element::DashedPathElement::new(pts, 6, 4, style)))
                        .map_err(err)?
                        .label(label)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.5)));
                }
            }
            for (i, se) in series.iter().enumerate() {
                let c = COLOURS[Mechanism::ALL.iter().position(|&m| m == se.mechanism).unwrap_or(i) % 9];
                let (r, g, b) = ((c >> 16) as u8, (c >> 8) as u8, c as u8);
                let colour = RGBColor(r, g, b);
                let pts: Vec<(f64, f64)> =
                    se.points.iter().filter_map(|p| get(p).map(|v| (p.t as f64, v))).filter(|p| p.1 > 0.0).collect();
                chart
                    .draw_series(std::iter::once(PathElement::new(pts.clone(), colour.stroke_width(2))))
                    .map_err(err)?;
                let anno = chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(err)?;
                let label = match k {
                    0 => format!("{} ({})", se.mechanism.name(), slope_s(se.time_slope_top())),
                    1 => format!("{} ({})", se.mechanism.name(), slope_s(se.arena_slope())),
                    _ => format!("{} ({})", se.mechanism.name(), slope_s(se.weight_slope())),
                };
                anno.label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 12))
                .draw()
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    crate::plot::save_rgb(path, wpx, hpx, buf)
}
