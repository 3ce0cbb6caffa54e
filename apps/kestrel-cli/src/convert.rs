//! `kestrel convert`: ONNX → `.kes`, the report, and optional verification against tract.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kestrel_onnx::{ConvertOptions, InputData, InputTensor};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

fn spinner(msg: String) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(msg);
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// The conversion's stages on one indicatif bar: a bar where the step count is known (lowering
/// per node), a spinner otherwise.
struct Bar(ProgressBar);

impl kestrel_onnx::Progress for Bar {
    fn stage(&mut self, name: &str, steps: u64) {
        let template =
            if steps > 0 { "{msg} [{bar:30}] {pos}/{len} [{elapsed}]" } else { "{spinner} {msg} [{elapsed}]" };
        self.0.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
        self.0.set_length(steps);
        self.0.set_position(0);
        self.0.set_message(name.to_string());
    }

    fn step(&mut self) {
        self.0.inc(1);
    }
}

/// Converts, writes, prints the report and, if asked, verifies.
pub fn run(
    w: &mut String,
    onnx: &Path,
    out: &Path,
    opts: &ConvertOptions,
    verify: Option<&Path>,
    json: bool,
) -> Result<()> {
    let mut bar = Bar(spinner(format!("converting {}", onnx.display())));
    let conv = kestrel_onnx::convert_with_progress(onnx, opts, &mut bar);
    bar.0.finish_and_clear();
    let conv = conv.with_context(|| format!("converting {}", onnx.display()))?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(out, &conv.kes).with_context(|| format!("writing {}", out.display()))?;
    let verification = match verify {
        None => None,
        Some(p) => {
            let inputs =
                if p.as_os_str().is_empty() { random_inputs(&conv.kes)? } else { vec![kestrel_onnx::read_npy(p)?] };
            let pb = spinner("verifying against tract".into());
            let v = kestrel_onnx::verify(onnx, &conv.kes, &inputs);
            pb.finish_and_clear();
            Some(v.context("verifying")?)
        }
    };
    if json {
        let mut obj = serde_json::json!({ "report": conv.report, "output": out.display().to_string() });
        if let Some(v) = &verification {
            obj["verify"] = serde_json::json!({
                "batch": v.batch,
                "max_abs_err": v.max_abs_err,
                "max_rel_err": v.max_rel_err,
                "top1_agreement": v.top1_agreement,
            });
        }
        writeln!(w, "{}", serde_json::to_string_pretty(&obj)?)?;
    } else {
        write!(w, "{}", conv.report.to_table())?;
        writeln!(w, "written    {}", out.display())?;
        if let Some(v) = &verification {
            writeln!(
                w,
                "verify     batch {}: max abs err {:.3e}, max rel err {:.3e}, top-1 agreement {:.1}%",
                v.batch,
                v.max_abs_err,
                v.max_rel_err,
                v.top1_agreement * 100.0
            )?;
        }
    }
    Ok(())
}

/// Four seeded random samples shaped like the model's inputs (token ids in 0..10).
fn random_inputs(kes: &[u8]) -> Result<Vec<InputTensor>> {
    let model = kestrel::Model::from_bytes(kes)?;
    let cpu = model.cpu()?;
    let meta = cpu.file().meta();
    let mut rng = kestrel::demo::Rng::new(42);
    let batch = 4;
    let mut out = Vec::new();
    for (i, spec) in meta.inputs().enumerate() {
        let t = cpu.input(i)?;
        let mut shape = vec![batch];
        shape.extend(spec.shape.dims().iter().map(|&d| d as usize));
        let n = batch * t.shape.numel().unwrap_or(0);
        let data = if t.dtype == kestrel::format::DType::I32 {
            InputData::I64((0..n).map(|k| (k * 7 % 10) as i64).collect())
        } else {
            InputData::F32(rng.vec(n, 1.0))
        };
        out.push(InputTensor { shape, data });
    }
    Ok(out)
}
