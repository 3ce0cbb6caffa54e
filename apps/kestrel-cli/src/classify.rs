//! `kestrel classify`: images (files or folders) → top-k labels, with the model's own
//! preprocessing; `--eval` over a labelled folder (accuracy, confusion matrix, `--plot`).

use crate::backend::{BackendArgs, Runner};
use crate::preprocess::{ImagePrep, InputPrep, Pixels};
use anyhow::{bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use kestrel_rt::{Input, Model};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A model bundled in the binary (`apps/kestrel-cli/models/`), usable as `--model NAME`.
pub struct Bundled {
    /// Name for `--model`.
    pub name: &'static str,
    /// What it is.
    pub about: &'static str,
    /// The `.kes` bytes.
    pub bytes: &'static [u8],
}

/// The bundled models; the first is the default.
pub const BUNDLED: &[Bundled] = &[
    Bundled {
        name: "fmnist-vit-super",
        about: "Fashion-MNIST, ViT with Super attention, int8 weights",
        bytes: include_bytes!("../models/fmnist_vit_super.int8.kes"),
    },
    Bundled {
        name: "fmnist-aftconv",
        about: "Fashion-MNIST, AFT-conv classifier, int8 weights",
        bytes: include_bytes!("../models/fmnist_aftconv.int8.kes"),
    },
    Bundled {
        name: "digits-vit-super",
        about: "handwritten digits (OpenCV digits.png, white on black), ViT with Super attention, int8 weights",
        bytes: include_bytes!("../models/digits_vit_super.int8.kes"),
    },
];

/// `kestrel classify` arguments.
#[derive(Args, Debug)]
pub struct ClassifyArgs {
    /// Image files or folders (searched recursively for image files).
    #[arg(required = true, value_name = "IMAGE|FOLDER")]
    pub paths: Vec<PathBuf>,
    /// A .kes file, or the name of a bundled model (default: the first bundled model;
    /// `--model list` lists them).
    #[arg(long, short)]
    pub model: Option<String>,
    /// Predictions per image.
    #[arg(long, short = 'k', default_value_t = 3)]
    pub top: usize,
    /// Print one JSON array: per image `{"path", "predictions": [{"label", "index", "probability"}]}`.
    #[arg(long)]
    pub json: bool,
    /// Images per model run.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Where the model runs.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Evaluate: each image's class is its parent folder's name (a label or a class index);
    /// prints accuracy and the confusion matrix instead of per-image predictions.
    #[arg(long)]
    pub eval: bool,
    /// With --eval: write the confusion matrix as a PNG.
    #[arg(long, value_name = "OUT.png", requires = "eval")]
    pub plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// One prediction.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Class label (the index as text when the model has no labels).
    pub label: String,
    /// Class index in the model's label list.
    pub index: usize,
    /// Probability.
    pub probability: f32,
}

/// A loaded classifier: model, preprocessing, labels.
pub struct Classifier {
    model: Model,
    /// The input preprocessing.
    pub prep: InputPrep,
    /// Class labels (index order).
    pub labels: Vec<String>,
    /// Model name from the metadata.
    pub name: String,
    softmax: bool,
    classes: usize,
}

impl Classifier {
    /// Loads a .kes file or a bundled model by name (`None`: the default bundled model).
    pub fn open(model: Option<&str>) -> Result<Self> {
        let m = match model {
            None => Model::from_bytes(BUNDLED[0].bytes)?,
            Some(name) => match BUNDLED.iter().find(|b| b.name == name) {
                Some(b) => Model::from_bytes(b.bytes)?,
                None => {
                    let p = Path::new(name);
                    if !p.exists() {
                        let names: Vec<&str> = BUNDLED.iter().map(|b| b.name).collect();
                        bail!("--model {name}: no such file, and not a bundled model ({})", names.join(", "));
                    }
                    crate::load_model(p)?
                }
            },
        };
        Self::from_model(m)
    }

    /// Wraps a loaded model (its checks are the SDK's: [`kestrel_rt::image::Classifier::of`]).
    pub fn from_model(model: Model) -> Result<Self> {
        let cpu = model.cpu()?;
        let kestrel_rt::image::Classifier { prep, classes, softmax } = kestrel_rt::image::Classifier::of(&cpu)?;
        let meta = cpu.file().meta();
        let mut labels: Vec<String> = meta.labels().map(String::from).collect();
        if labels.is_empty() {
            labels = (0..classes).map(|i| i.to_string()).collect();
        }
        let name = meta.model_name().to_string();
        Ok(Self { model, prep, labels, name, softmax, classes })
    }

    /// Class probabilities for a batch of decoded images (one run per `batch` images).
    pub fn probabilities(&self, images: &[&Pixels], session: &mut Runner<'_>) -> Result<Vec<Vec<f32>>> {
        let mut x =
            kestrel_rt::mem::with_capacity::<f32>(images.len().saturating_mul(self.prep.numel()), "the model inputs")?;
        for px in images {
            self.prep.apply(px, &mut x);
        }
        let mut y = kestrel_rt::mem::zeroed_vec::<f32>(images.len().saturating_mul(self.classes), "the model outputs")?;
        session.run(&[Input::F32(&x)], &mut [&mut y])?;
        Ok(y.chunks(self.classes.max(1))
            .map(|row| {
                let mut p = row.to_vec();
                if self.softmax {
                    kestrel_rt::image::softmax_in_place(&mut p);
                }
                p
            })
            .collect())
    }

    /// The top `k` predictions of one probability row, best first ([`kestrel_rt::image::top_k`]).
    pub fn top(&self, probs: &[f32], k: usize) -> Vec<Prediction> {
        let mut idx = vec![0; k.min(probs.len())];
        kestrel_rt::image::top_k(probs, &mut idx);
        idx.into_iter().map(|i| Prediction { label: self.labels[i].clone(), index: i, probability: probs[i] }).collect()
    }

    /// A session for batches up to `batch` on the backend `args` choose.
    pub fn session(&self, batch: usize, args: &BackendArgs) -> Result<Runner<'_>> {
        Runner::new(&self.model, batch, args)
    }

    /// Maps a folder name to a class index: a label (case-insensitive, `_`/`-`/space alike) or
    /// a class index.
    pub fn class_of(&self, folder: &str) -> Option<usize> {
        let norm = |s: &str| s.to_lowercase().replace(['_', '-', ' '], "");
        let f = norm(folder);
        self.labels.iter().position(|l| norm(l) == f).or_else(|| folder.parse().ok().filter(|&i| i < self.classes))
    }
}

const IMAGE_EXTENSIONS: &[&str] = &[
    "png", "jpg", "jpeg", "gif", "bmp", "webp", "tif", "tiff", "pnm", "pgm", "ppm", "pbm", "pam", "ico", "tga", "qoi",
];

/// Expands folders (recursively, sorted) into their image files; other paths are kept as given.
/// Returns the files and how many non-image files the folders held (skipped).
pub fn collect(paths: &[PathBuf]) -> (Vec<PathBuf>, usize, bool) {
    let mut files = Vec::new();
    let mut skipped = 0;
    let mut any_folder = false;
    fn walk(dir: &Path, files: &mut Vec<PathBuf>, skipped: &mut usize) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            files.push(dir.to_path_buf()); // reported as unreadable later
            return;
        };
        let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            if p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.')) {
                continue;
            }
            if p.is_dir() {
                walk(&p, files, skipped);
            } else if p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
            {
                files.push(p);
            } else {
                *skipped += 1;
            }
        }
    }
    for p in paths {
        if p.is_dir() {
            any_folder = true;
            walk(p, &mut files, &mut skipped);
        } else {
            files.push(p.clone());
        }
    }
    (files, skipped, any_folder)
}

/// One classified image.
struct Classified {
    path: PathBuf,
    predictions: Vec<Prediction>,
    best: usize,
}

/// Runs `kestrel classify`.
pub fn run(w: &mut String, args: &ClassifyArgs) -> Result<()> {
    if args.model.as_deref() == Some("list") {
        for b in BUNDLED {
            writeln!(w, "{:<18} {:>8} bytes  {}", b.name, b.bytes.len(), b.about)?;
        }
        return Ok(());
    }
    if args.batch == 0 || args.top == 0 {
        bail!("--batch and --top must be at least 1");
    }
    let t_load = Instant::now();
    let clf = Classifier::open(args.model.as_deref())?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;
    let (files, skipped, any_folder) = collect(&args.paths);
    if skipped > 0 {
        eprintln!("note: skipped {skipped} file(s) without an image extension in the folders given");
    }
    if files.is_empty() {
        bail!("no image files found in {:?}", args.paths);
    }
    let truth: Vec<Option<usize>> = if args.eval {
        files
            .iter()
            .map(|f| f.parent().and_then(|d| d.file_name()).and_then(|n| n.to_str()).and_then(|n| clf.class_of(n)))
            .collect()
    } else {
        vec![None; files.len()]
    };
    if args.eval {
        if let Some(i) = truth.iter().position(Option::is_none) {
            bail!(
                "--eval: {} is not in a folder named after a class (labels: {})",
                files[i].display(),
                clf.labels.join(", ")
            );
        }
    }
    let pb = if any_folder && !args.quiet && files.len() > 1 {
        let pb = ProgressBar::new(files.len() as u64);
        pb.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} images [{elapsed} < {eta}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb
    } else {
        ProgressBar::hidden()
    };
    let batch = args.batch.min(files.len());
    let t_session = Instant::now();
    let mut session = clf.session(batch, &args.backend)?;
    let session_ms = t_session.elapsed().as_secs_f64() * 1e3;
    let mut results: Vec<Classified> = Vec::new();
    let mut failed: Vec<(PathBuf, String)> = Vec::new();
    let mut infer_s = 0f64;
    let t_all = Instant::now();
    for chunk in files.chunks(batch) {
        let mut decoded = Vec::with_capacity(chunk.len());
        for f in chunk {
            match clf.prep.load(f) {
                Ok(px) => decoded.push((f.clone(), px)),
                Err(e) => {
                    let msg = format!("{e:#}");
                    pb.suspend(|| eprintln!("error: {msg}"));
                    failed.push((f.clone(), msg));
                }
            }
        }
        if !decoded.is_empty() {
            let imgs: Vec<&Pixels> = decoded.iter().map(|(_, p)| p).collect();
            let t = Instant::now();
            let probs = clf.probabilities(&imgs, &mut session)?;
            infer_s += t.elapsed().as_secs_f64();
            for ((path, _), p) in decoded.into_iter().zip(probs) {
                if let Some((n, _)) = kestrel_rt::npy::non_finite(&p) {
                    pb.suspend(|| {
                        eprintln!(
                            "warning: {}: {n} of the model's {} outputs are NaN or infinite: its prediction is meaningless",
                            path.display(),
                            p.len()
                        )
                    });
                }
                let predictions = clf.top(&p, args.top.min(clf.labels.len()));
                let best = predictions[0].index;
                results.push(Classified { path, predictions, best });
            }
        }
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    let total_s = t_all.elapsed().as_secs_f64();

    if args.eval {
        let pos: std::collections::HashMap<&Path, usize> =
            files.iter().enumerate().map(|(i, f)| (f.as_path(), i)).collect();
        let n = clf.labels.len();
        let mut confusion = vec![vec![0usize; n]; n];
        for r in &results {
            if let Some(t) = truth[pos[r.path.as_path()]] {
                confusion[t][r.best] += 1;
            }
        }
        let ev = Evaluation { labels: clf.labels.clone(), confusion };
        if args.json {
            writeln!(w, "{}", serde_json::to_string_pretty(&ev.to_json(&clf.name))?)?;
        } else {
            ev.write_table(w, &clf.name)?;
        }
        if let Some(p) = &args.plot {
            ev.plot(p, &clf.name)?;
            if !args.json {
                writeln!(w, "plot       {}", p.display())?;
            }
        }
    } else if args.json {
        let arr: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "path": r.path.display().to_string(),
                    "predictions": r.predictions.iter().map(|p| serde_json::json!({
                        "label": p.label, "index": p.index, "probability": p.probability,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        writeln!(w, "{}", serde_json::to_string_pretty(&serde_json::Value::Array(arr))?)?;
    } else {
        for r in &results {
            writeln!(w, "{}", r.path.display())?;
            for (i, p) in r.predictions.iter().enumerate() {
                writeln!(w, "  {}. {:<16} {:>6.2}%", i + 1, p.label, p.probability * 100.0)?;
            }
        }
    }
    if !args.json {
        let n = results.len();
        writeln!(
            w,
            "{n} image(s) with {} ({}): model loaded in {load_ms:.1} ms, session in {session_ms:.1} ms, inference {:.3} ms/image, total {:.1} ms",
            clf.name,
            session.on(),
            if n > 0 { infer_s * 1e3 / n as f64 } else { 0.0 },
            total_s * 1e3
        )?;
    }
    if !failed.is_empty() {
        bail!("{} of {} file(s) could not be classified (see the errors above)", failed.len(), files.len());
    }
    Ok(())
}

/// Accuracy and confusion matrix (rows: true class, columns: predicted).
pub struct Evaluation {
    /// Class labels.
    pub labels: Vec<String>,
    /// `confusion[true][predicted]` counts.
    pub confusion: Vec<Vec<usize>>,
}

impl Evaluation {
    /// Images counted.
    pub fn total(&self) -> usize {
        self.confusion.iter().flatten().sum()
    }

    /// Correct predictions.
    pub fn correct(&self) -> usize {
        (0..self.confusion.len()).map(|i| self.confusion[i][i]).sum()
    }

    /// Top-1 accuracy (0..=1).
    pub fn accuracy(&self) -> f64 {
        let t = self.total();
        if t == 0 {
            0.0
        } else {
            self.correct() as f64 / t as f64
        }
    }

    fn to_json(&self, model: &str) -> serde_json::Value {
        serde_json::json!({
            "model": model,
            "images": self.total(),
            "correct": self.correct(),
            "accuracy": self.accuracy(),
            "labels": self.labels,
            "confusion": self.confusion,
        })
    }

    fn write_table(&self, w: &mut String, model: &str) -> Result<()> {
        writeln!(
            w,
            "accuracy   {:.2}% ({} of {} images, model {model})",
            self.accuracy() * 100.0,
            self.correct(),
            self.total()
        )?;
        writeln!(w)?;
        writeln!(w, "confusion matrix (rows: true class, columns: predicted)")?;
        let width = self.labels.iter().enumerate().map(|(i, l)| format!("{i} {l}").len()).max().unwrap_or(4).max(5);
        let cell = self.confusion.iter().flatten().max().map_or(1, |m| m.to_string().len()).max(3);
        write!(w, "{:>width$}", "")?;
        for i in 0..self.labels.len() {
            write!(w, " {:>cell$}", i)?;
        }
        writeln!(w, "  recall")?;
        for (i, row) in self.confusion.iter().enumerate() {
            write!(w, "{:>width$}", format!("{i} {}", self.labels[i]))?;
            for v in row {
                write!(w, " {v:>cell$}")?;
            }
            let n: usize = row.iter().sum();
            let recall = if n > 0 { format!("{:>6.1}%", 100.0 * row[i] as f64 / n as f64) } else { "    -".into() };
            writeln!(w, "  {recall}")?;
        }
        Ok(())
    }

    /// Writes the confusion matrix as a PNG heat map (cells shaded by the row's share, counts
    /// written in them; rows: true class, columns: predicted).
    pub fn plot(&self, path: &Path, model: &str) -> Result<()> {
        use plotters::prelude::*;
        use plotters::style::text_anchor::{HPos, Pos, VPos};
        crate::plot::register_font();
        let n = self.labels.len() as i32;
        let (cell, left, top) = (52i32, 130i32, 90i32);
        let (wpx, hpx) = ((left + cell * n + 90) as u32, (top + cell * n + 30) as u32);
        let mut buf = vec![255u8; (wpx * hpx * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (wpx, hpx)).into_drawing_area();
            root.fill(&WHITE).map_err(plot_err)?;
            let centre = Pos::new(HPos::Center, VPos::Center);
            let title = format!("{model}: accuracy {:.2}% of {} images", self.accuracy() * 100.0, self.total());
            root.draw(&Text::new(title, (12, 12), ("sans-serif", 18).into_font())).map_err(plot_err)?;
            let small = ("sans-serif", 13).into_font();
            root.draw(&Text::new(
                "predicted",
                (left + cell * n / 2, top - 38),
                TextStyle::from(small.clone()).pos(centre),
            ))
            .map_err(plot_err)?;
            root.draw(&Text::new("true", (14, top - 14), small.clone())).map_err(plot_err)?;
            for (t, row) in self.confusion.iter().enumerate() {
                let t = t as i32;
                let y0 = top + t * cell;
                let label = self.labels[t as usize].clone();
                root.draw(&Text::new(
                    label,
                    (10, y0 + cell / 2),
                    TextStyle::from(small.clone()).pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(plot_err)?;
                let total = row.iter().sum::<usize>().max(1) as f64;
                for (p, &v) in row.iter().enumerate() {
                    let p = p as i32;
                    let x0 = left + p * cell;
                    let frac = v as f64 / total;
                    let shade = (255.0 * (1.0 - frac)).round() as u8;
                    root.draw(&Rectangle::new(
                        [(x0, y0), (x0 + cell, y0 + cell)],
                        RGBColor(shade, shade, 255).filled(),
                    ))
                    .map_err(plot_err)?;
                    root.draw(&Rectangle::new([(x0, y0), (x0 + cell, y0 + cell)], RGBColor(200, 200, 200)))
                        .map_err(plot_err)?;
                    let colour = if frac > 0.5 { WHITE } else { BLACK };
                    root.draw(&Text::new(
                        v.to_string(),
                        (x0 + cell / 2, y0 + cell / 2),
                        small.clone().color(&colour).pos(centre),
                    ))
                    .map_err(plot_err)?;
                }
                let recall = format!("{:.1}%", 100.0 * row[t as usize] as f64 / total);
                root.draw(&Text::new(
                    recall,
                    (left + n * cell + 8, y0 + cell / 2),
                    TextStyle::from(small.clone()).pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(plot_err)?;
            }
            for (p, l) in self.labels.iter().enumerate() {
                let x = left + p as i32 * cell + cell / 2;
                root.draw(&Text::new(truncate(l, 7), (x, top - 14), TextStyle::from(small.clone()).pos(centre)))
                    .map_err(plot_err)?;
            }
            root.present().map_err(plot_err)?;
        }
        crate::plot::save_rgb(path, wpx, hpx, buf)
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn plot_err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e}")
}
