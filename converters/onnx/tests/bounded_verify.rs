//! `verify` (what `kestrel convert --verify` runs) on files with bounded dims: the ONNX model run
//! by tract, typed at the inputs' own sizes, against the one converted file run by Kestrel at
//! those sizes. Every reference case of every bounded fixture (`tests/data/dynamic/`: BERT and
//! `nn.TransformerEncoder` over `sequence`, a CNN over `h`, `w`, a GPT-2 decoder whose causal mask
//! tract computes with a CumSum over shape values, an ALiBi/window model) verifies from one file,
//! the report naming the size, and tract's side matches onnxruntime's output there (so it really
//! ran at that size); a size outside the file's ranges, a fixed axis that differs and a rank that
//! fits neither are errors naming the input, before anything runs.

use crate::dynamic;

use dynamic::{cases, fixture, max_abs_diff, MODELS};
use kestrel_rt_onnx::{convert, run_kestrel, verify, ConvertError, ConvertOptions, InputTensor};

const TOL: f64 = 1e-4;

fn bounded(model: &str, bounds: Option<Vec<(String, usize, usize)>>) -> Vec<u8> {
    let f = fixture(model);
    let opts = ConvertOptions { bounds: bounds.unwrap_or_else(|| f.bounds()), ..ConvertOptions::default() };
    convert(&f.onnx, &opts).unwrap_or_else(|e| panic!("{model}: converting with bounds: {e}")).kes
}

#[test]
fn every_reference_size_verifies_from_one_file() {
    for model in MODELS {
        let f = fixture(model);
        let kes = bounded(model, None);
        for case in cases(model) {
            let what = format!("{model} {}", case.name);
            let r = verify(&f.onnx, &kes, &case.inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            println!("{what}: {:?} batch {}: max abs err {:.2e}", r.dims, r.batch, r.max_abs_err);
            assert_eq!(r.dims, case.dims, "{what}");
            assert_eq!(r.batch, case.inputs[0].shape[0], "{what}");
            assert!(r.max_abs_err <= TOL, "{what}: max abs err {:.2e}", r.max_abs_err);
            assert!(r.max_rel_err <= TOL, "{what}: max rel err {:.2e}", r.max_rel_err);
            assert_eq!(r.top1_agreement, 1.0, "{what}");
            // tract ran at this size: its output is onnxruntime's there.
            let (shape, want) = &case.expected[0];
            assert_eq!(r.tract[0].len(), shape.iter().product::<usize>(), "{what}: tract's output");
            let err = max_abs_diff(want, &r.tract[0]);
            assert!(f64::from(err) <= TOL, "{what}: tract vs onnxruntime {err:.2e}");
            // And the file alone, at the same size, gives what the report compared.
            assert_eq!(run_kestrel(&kes, &case.inputs).unwrap(), r.kestrel, "{what}");
        }
    }
}

#[test]
fn sizes_outside_the_file_and_wrong_shapes_are_errors_naming_the_dim() {
    let model = "transformer_dynamo";
    let f = fixture(model);
    let kes = bounded(model, Some(vec![("sequence".into(), 2, 12)]));
    let cs = cases(model);
    let case = |name: &str| cs.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
    let refused = |inputs: &[InputTensor], want: &[&str]| {
        let e = verify(&f.onnx, &kes, inputs).expect_err("refused");
        assert!(matches!(e, ConvertError::Verify { .. }), "{e:?}");
        let msg = e.to_string();
        for w in want {
            assert!(msg.contains(w), "{msg:?} lacks {w:?}");
        }
    };
    // In range: verified there.
    let r = verify(&f.onnx, &kes, &case("s5").inputs).unwrap();
    assert_eq!(r.dims, vec![("sequence".to_string(), 5)]);
    assert!(r.max_abs_err <= TOL, "{:.2e}", r.max_abs_err);
    // Above and below the range.
    for (name, v) in [("s13", 13), ("s1", 1)] {
        let s = format!("`sequence` = {v} is outside its range 2..=12");
        refused(&case(name).inputs, &["sequence 2..=12", &s, "input 0 of shape"]);
    }
    // A fixed axis that differs, and a rank that is neither a sample's nor a batch's.
    let src = &case("s5").inputs[0];
    let (b, t, d) = (src.shape[0], src.shape[1], src.shape[2]);
    refused(&[InputTensor::f32(&[b, t, d + 1], vec![0.5; b * t * (d + 1)])], &["per-sample shape [5, 32]"]);
    refused(&[InputTensor::f32(&[1, b, t, d], vec![0.5; b * t * d])], &["rank 2 per sample", "[1, 2, 5, 32]"]);
    // A model of fixed sizes reports no dims.
    let opts = ConvertOptions { dims: vec![("sequence".into(), 5)], ..ConvertOptions::default() };
    let fixed = convert(&f.onnx, &opts).unwrap().kes;
    let r = verify(&f.onnx, &fixed, &case("s5").inputs).unwrap();
    assert!(r.dims.is_empty(), "{:?}", r.dims);
}
