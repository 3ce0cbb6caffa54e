//! int8 (and int4) top-1 agreement with f32, over N seeded random inputs, for every committed
//! fixture (or the fixture directories given): each model is converted at f32, int8, int8 with
//! the first and last layers kept f16, int8 with calibrated activations, and int4, and all are
//! run by Kestrel on the same inputs. Prints a Markdown table.
//!
//! ```text
//! cargo run --release -p kestrel-rt-onnx --example int8_agreement -- [--samples 256] [FIXTURE_DIR…]
//! ```
//!
//! Image inputs are N(0, 1)-like (uniform ±√3), token ids uniform over the vocabulary the
//! fixture's input uses. The fixtures have random weights, so their logits are close together:
//! agreement on them is a harsher test than on a trained model.

use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{convert, run_kestrel, write_npy_f32, ConvertOptions, DType, InputData, InputTensor};
use std::path::{Path, PathBuf};

fn top1(out: &[f32], classes: usize) -> Vec<usize> {
    out.chunks(classes).map(|r| r.iter().enumerate().fold(0, |b, (i, &v)| if v > r[b] { i } else { b })).collect()
}

fn inputs(dir: &Path, n: usize, seed: u64) -> Vec<InputTensor> {
    let sample = kestrel_rt_onnx::read_npy(dir.join("input.npy")).expect("input.npy");
    let mut shape = sample.shape.clone();
    shape[0] = n;
    let per: usize = shape[1..].iter().product();
    let mut rng = Rng::new(seed);
    match sample.data {
        InputData::F32(_) => vec![InputTensor::f32(&shape, rng.vec(n * per, 3f32.sqrt()))],
        InputData::I64(ids) => {
            let vocab = ids.iter().copied().max().unwrap_or(1).max(1) + 1;
            let v =
                (0..n * per).map(|_| (((rng.uniform() + 1.0) / 2.0 * vocab as f32) as i64).min(vocab - 1)).collect();
            vec![InputTensor::i64(&shape, v)]
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut samples = 256;
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--samples" {
            samples = it.next().and_then(|s| s.parse().ok()).expect("--samples N");
        } else {
            dirs.push(PathBuf::from(a));
        }
    }
    if dirs.is_empty() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        dirs = kestrel_rt_onnx::model_dirs(&root).expect("converters/fixtures");
        // Classifiers only: the single-layer fixtures output [T, d] features, not classes.
        dirs.retain(|d| !d.to_string_lossy().contains("/layer_"));
    }
    let tmp = std::env::temp_dir().join(format!("kestrel-agree-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("temp dir");
    println!("| fixture | samples | int8 | int8 keep-first-last | int8 + calibrated activations | int4 |");
    println!("|---|---|---|---|---|---|");
    for d in dirs {
        let name = d.file_name().unwrap_or_default().to_string_lossy().to_string();
        let onnx = d.join("model.onnx");
        let test = inputs(&d, samples, 7);
        let cal = inputs(&d, 64, 8);
        let cal_path = tmp.join(format!("{name}_cal.npy"));
        let cal_file = match &cal[0].data {
            InputData::F32(v) => write_npy_f32(&cal_path, &cal[0].shape, v).ok().map(|_| cal_path.clone()),
            InputData::I64(_) => None, // ids: calibrate on the f32 path only for image fixtures here
        };
        let run = |o: ConvertOptions| -> Option<Vec<f32>> {
            let c = convert(&onnx, &o).ok()?;
            run_kestrel(&c.kes, &test).ok().map(|mut v| v.remove(0))
        };
        let Some(reference) = run(ConvertOptions::default()) else {
            println!("| {name} | conversion failed | | | | |");
            continue;
        };
        let classes = reference.len() / samples;
        let want = top1(&reference, classes);
        let agree = |o: ConvertOptions| -> String {
            match run(o) {
                Some(out) => {
                    let got = top1(&out, classes);
                    let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
                    format!("{:.1}%", 100.0 * same as f64 / samples as f64)
                }
                None => "—".into(),
            }
        };
        let i8o = ConvertOptions { weights: DType::I8, ..Default::default() };
        let kfl = ConvertOptions { weights: DType::I8, keep_first_last: true, ..Default::default() };
        let calo = cal_file.map(|p| ConvertOptions { weights: DType::I8, calibrate: vec![p], ..Default::default() });
        let i4o = ConvertOptions { weights: DType::I4, ..Default::default() };
        println!(
            "| {name} | {samples} | {} | {} | {} | {} |",
            agree(i8o),
            agree(kfl),
            calo.map_or_else(|| "—".into(), agree),
            agree(i4o)
        );
    }
    std::fs::remove_dir_all(&tmp).ok();
}
