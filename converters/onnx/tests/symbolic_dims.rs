//! Inputs with symbolic dims other than the batch (an export with `dynamic_axes`): without
//! values the conversion names every such dim and where it appears; `--dim NAME=N`
//! (`ConvertOptions::dims`) converts at those sizes; verification binds the symbols from the
//! arrays given, and two inputs disagreeing on one symbol is a typed error. The converted model
//! against tract on seeded random inputs at several batch sizes.

use crate::proto;

use kestrel_rt::demo::Rng;
use kestrel_rt_onnx::{convert, run_tract, verify, ConvertError, ConvertOptions, InputTensor};
use proto::{f32_tensor, float_value, float_value_sym, i64_tensor, Msg};

/// `y [N, T, 4] = (x [N, T, 8] · W) ⊙ m [N, T, 1]` and `z2 [N, S] = 2·z`: the symbol `T` on two
/// inputs, `S` on a third, `N` the batch.
fn model() -> Vec<u8> {
    let node = |op: &str, ins: &[&str], out: &str| {
        ins.iter().fold(Msg::default(), |n, i| n.str(1, i)).str(2, out).str(3, out).str(4, op)
    };
    let mut rng = Rng::new(0x5D1);
    let w = rng.vec(8 * 4, 0.5);
    let graph = Msg::default()
        .msg(1, node("MatMul", &["x", "w"], "xw"))
        .msg(1, node("Unsqueeze", &["m", "axes"], "m3"))
        .msg(1, node("Mul", &["xw", "m3"], "y"))
        .msg(1, node("Mul", &["z", "two"], "z2"))
        .str(2, "g")
        .msg(5, f32_tensor("w", &[8, 4], &w))
        .msg(5, i64_tensor("axes", &[1], &[2]))
        .msg(5, f32_tensor("two", &[], &[2.0]))
        .msg(11, float_value_sym("x", &["N", "T", "8"]))
        .msg(11, float_value_sym("m", &["N", "T"]))
        .msg(11, float_value_sym("z", &["N", "S"]))
        .msg(12, float_value("y", None))
        .msg(12, float_value("z2", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "symbolic_dims.rs").msg(7, graph).0
}

/// The model written to a file of this test's own (the tests run in parallel).
fn write_model(test: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("kestrel-symbolic-dims-{}-{test}.onnx", std::process::id()));
    std::fs::write(&path, model()).unwrap();
    path
}

fn opts(dims: &[(&str, usize)]) -> ConvertOptions {
    ConvertOptions { dims: dims.iter().map(|&(n, v)| (n.to_string(), v)).collect(), ..ConvertOptions::default() }
}

fn inputs(rng: &mut Rng, batch: usize, t: usize, s: usize) -> Vec<InputTensor> {
    vec![
        InputTensor::f32(&[batch, t, 8], rng.vec(batch * t * 8, 1.0)),
        InputTensor::f32(&[batch, t], rng.vec(batch * t, 1.0)),
        InputTensor::f32(&[batch, s], rng.vec(batch * s, 1.0)),
    ]
}

#[test]
fn unbound_symbols_are_all_named_with_their_inputs() {
    let path = write_model("unbound");
    let e = convert(&path, &opts(&[])).unwrap_err();
    let ConvertError::UnboundDims { dims, .. } = &e else { panic!("expected UnboundDims, got {e}") };
    let got: Vec<(&str, Vec<(&str, usize)>)> =
        dims.iter().map(|d| (d.symbol.as_str(), d.uses.iter().map(|(i, a)| (i.as_str(), *a)).collect())).collect();
    assert_eq!(got, vec![("T", vec![("x", 1), ("m", 1)]), ("S", vec![("z", 1)])]);
    let msg = e.to_string();
    assert!(msg.contains("--dim T=") && msg.contains("input `m` axis 1"), "{msg}");
    // One bound, one left: only the one left is named.
    let e = convert(&path, &opts(&[("T", 5)])).unwrap_err();
    assert!(matches!(&e, ConvertError::UnboundDims { dims, .. } if dims.len() == 1 && dims[0].symbol == "S"), "{e}");
    // A name no input carries (a typo) is refused, listing the symbols there are.
    let e = convert(&path, &opts(&[("T", 5), ("S", 3), ("Q", 2)])).unwrap_err();
    assert!(matches!(&e, ConvertError::UnknownDim { name, symbols } if name == "Q" && symbols == "N, S, T"), "{e}");
    std::fs::remove_file(path).ok();
}

#[test]
fn bound_symbols_convert_and_match_tract_at_every_batch() {
    let path = write_model("bound");
    let mut rng = Rng::new(0xD1A5);
    for (t, s) in [(1, 1), (5, 3), (16, 7)] {
        let conv = convert(&path, &opts(&[("T", t), ("S", s)])).unwrap();
        for batch in [1, 3] {
            let ins = inputs(&mut rng, batch, t, s);
            let v = verify(&path, &conv.kes, &ins).unwrap();
            assert_eq!(v.batch, batch);
            assert!(v.max_abs_err <= 1e-5, "T={t} S={s} batch {batch}: max abs err {}", v.max_abs_err);
            // The values themselves (verify compares Kestrel with tract; this pins tract's side
            // to the model's definition on one element).
            let outs = run_tract(&path, &ins).unwrap();
            assert_eq!(outs[0].0, vec![batch, t, 4]);
            assert_eq!(outs[1].0, vec![batch, s]);
        }
        // Arrays of another size than converted: Kestrel refuses them (typed error).
        let ins = inputs(&mut rng, 1, t + 1, s);
        assert!(verify(&path, &conv.kes, &ins).is_err());
    }
    std::fs::remove_file(path).ok();
}

#[test]
fn inputs_disagreeing_on_a_symbol_are_refused() {
    let path = write_model("disagree");
    let mut rng = Rng::new(7);
    let mut ins = inputs(&mut rng, 2, 5, 3);
    ins[1] = InputTensor::f32(&[2, 6], rng.vec(12, 1.0));
    let e = run_tract(&path, &ins).unwrap_err();
    assert!(matches!(&e, ConvertError::BadInput { input, .. } if input == "m"), "{e}");
    assert!(e.to_string().contains("`T`"), "{e}");
    std::fs::remove_file(path).ok();
}

#[test]
fn input_layouts_tell_batched_inputs_from_whole_ones() {
    let path = write_model("layouts");
    let dims = [("T".to_string(), 5), ("S".to_string(), 3)];
    let l = kestrel_rt_onnx::input_layouts(&path, &dims).unwrap();
    let got: Vec<(&str, &[usize], bool)> = l.iter().map(|l| (l.name.as_str(), l.shape.as_slice(), l.batched)).collect();
    assert_eq!(got, vec![("x", &[1, 5, 8][..], true), ("m", &[1, 5][..], true), ("z", &[1, 3][..], true)]);
    // A fixed first axis N > 1: one whole sample, its declared shape.
    let fixed = Msg::default()
        .msg(1, Msg::default().str(1, "x").str(1, "two").str(2, "y").str(3, "y").str(4, "Mul"))
        .str(2, "g")
        .msg(5, f32_tensor("two", &[], &[2.0]))
        .msg(11, float_value_sym("x", &["3", "T"]))
        .msg(12, float_value("y", None));
    let bytes = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "fixed").msg(7, fixed).0;
    std::fs::write(&path, bytes).unwrap();
    let l = kestrel_rt_onnx::input_layouts(&path, &[("T".to_string(), 4)]).unwrap();
    assert_eq!((l[0].shape.as_slice(), l[0].batched), (&[3, 4][..], false));
    std::fs::remove_file(path).ok();
}
