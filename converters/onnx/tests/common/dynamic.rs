//! The bounded-dynamic-shape fixtures of `tests/data/dynamic/` (issue 34; written by
//! `tests/data/make_dynamic_models.py`, described in its README): each model, its symbolic dims
//! with their bounds, and its reference cases (inputs and onnxruntime's output at one size),
//! read from the `.npy` files (`#[path]`-included).
#![allow(dead_code)]

use kestrel_rt_onnx::{read_npy, InputData, InputTensor};
use std::path::PathBuf;

/// The fixture models, by name.
pub const MODELS: [&str; 5] = ["bert_legacy", "transformer_dynamo", "cnn_hw", "gpt2_dynamo", "alibi_window"];

/// One fixture model: where it is and what its inputs' symbolic dims are.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// The name (`bert_legacy`, ...), also the prefix of its `.npy` files.
    pub name: &'static str,
    /// The ONNX file.
    pub onnx: PathBuf,
    /// The inputs' names, in the model's input order (the `.npy` files' last name part).
    pub inputs: &'static [&'static str],
    /// Each symbolic dim other than the batch: its name, the input and axis that carry it
    /// (the first of them), and its bounds `min..=max`.
    pub symbols: &'static [Symbol],
    /// The symbol on every input's first axis (given no value at conversion).
    pub batch: &'static str,
}

/// A symbolic dim other than the batch.
#[derive(Clone, Copy, Debug)]
pub struct Symbol {
    pub name: &'static str,
    pub input: usize,
    pub axis: usize,
    pub min: usize,
    pub max: usize,
}

/// One reference size of a model.
#[derive(Clone, Debug)]
pub struct Case {
    /// The case's part of the file names (`s13`, `b2_s13_padded`, `h17_w23`).
    pub name: String,
    /// The value of each of the model's symbols in this case, in [`Fixture::symbols`] order
    /// (what `ConvertOptions::dims` takes).
    pub dims: Vec<(String, usize)>,
    /// The inputs, in the model's input order, batch first.
    pub inputs: Vec<InputTensor>,
    /// onnxruntime's outputs: shape and values.
    pub expected: Vec<(Vec<usize>, Vec<f32>)>,
}

impl Fixture {
    /// The bounds of the symbols, `(name, min, max)` (the form of `ConvertOptions::bounds`).
    pub fn bounds(&self) -> Vec<(String, usize, usize)> {
        self.symbols.iter().map(|s| (s.name.to_string(), s.min, s.max)).collect()
    }
}

const fn sym(name: &'static str, input: usize, axis: usize, min: usize, max: usize) -> Symbol {
    Symbol { name, input, axis, min, max }
}

/// `sequence` on axis 1 of the first input, 1..=64 (BERT's position table; the transformer's
/// `torch.export.Dim` bound).
const SEQUENCE: [Symbol; 1] = [sym("sequence", 0, 1, 1, 64)];
/// `sequence` 2..=64 (GPT-2's `torch.export.Dim`, whose minimum is 2).
const SEQUENCE_2: [Symbol; 1] = [sym("sequence", 0, 1, 2, 64)];
/// `sequence` 6..=64: below 6 the sliding window (|i - j| <= 4) masks nothing and tract drops
/// the mask, a different graph.
const SEQUENCE_6: [Symbol; 1] = [sym("sequence", 0, 1, 6, 64)];
/// `h` and `w` on axes 2 and 3 of the image, 16..=64 each.
const HW: [Symbol; 2] = [sym("h", 0, 2, 16, 64), sym("w", 0, 3, 16, 64)];

/// The directory of the fixtures.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/dynamic")
}

/// The fixture model `name` (one of [`MODELS`]).
pub fn fixture(name: &str) -> Fixture {
    let (name, inputs, symbols): (&'static str, &'static [&'static str], &'static [Symbol]) = match name {
        "bert_legacy" => ("bert_legacy", &["input_ids", "attention_mask"], &SEQUENCE),
        "transformer_dynamo" => ("transformer_dynamo", &["src"], &SEQUENCE),
        "cnn_hw" => ("cnn_hw", &["image"], &HW),
        "gpt2_dynamo" => ("gpt2_dynamo", &["input_ids"], &SEQUENCE_2),
        "alibi_window" => ("alibi_window", &["x"], &SEQUENCE_6),
        _ => panic!("no dynamic fixture named `{name}` (there are {MODELS:?})"),
    };
    Fixture { name, onnx: dir().join(format!("{name}.onnx")), inputs, symbols, batch: "batch" }
}

/// Every reference case of model `name`, smallest symbol values first (then by name).
pub fn cases(name: &str) -> Vec<Case> {
    let f = fixture(name);
    let prefix = format!("{name}_");
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap_or_else(|e| panic!("{}: {e}", dir().display()))
        .filter_map(|e| {
            let file = e.ok()?.file_name().into_string().ok()?;
            Some(file.strip_prefix(&prefix)?.strip_suffix("_out.npy")?.to_string())
        })
        .collect();
    names.sort();
    let mut cases: Vec<Case> = names.into_iter().map(|c| case(&f, &c)).collect();
    cases.sort_by(|a, b| a.dims.cmp(&b.dims).then_with(|| a.name.cmp(&b.name)));
    assert!(!cases.is_empty(), "no cases of `{name}` in {}", dir().display());
    cases
}

/// The case `case` of fixture `f`.
pub fn case(f: &Fixture, case: &str) -> Case {
    let load = |part: &str| {
        let p = dir().join(format!("{}_{case}_{part}.npy", f.name));
        read_npy(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let inputs: Vec<InputTensor> = f.inputs.iter().map(|i| load(i)).collect();
    let dims = f
        .symbols
        .iter()
        .map(|s| {
            let d = inputs[s.input].shape[s.axis];
            assert!(
                (s.min..=s.max).contains(&d),
                "{} case {case}: {} = {d} outside {}..={}",
                f.name,
                s.name,
                s.min,
                s.max
            );
            (s.name.to_string(), d)
        })
        .collect();
    let out = load("out");
    let InputData::F32(values) = out.data else { panic!("{} case {case}: the output is not f32", f.name) };
    Case { name: case.to_string(), dims, inputs, expected: vec![(out.shape, values)] }
}

/// The largest absolute difference between two arrays of the same length.
pub fn max_abs_diff(want: &[f32], got: &[f32]) -> f32 {
    assert_eq!(want.len(), got.len(), "lengths differ");
    want.iter().zip(got).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}
