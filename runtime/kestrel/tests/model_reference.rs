//! The two demo models, for every weight encoding and a batch of 3, against a plain f64 graph
//! interpreter (`common_graph`) that reads the weights decoded from the loaded file and the
//! shapes from its tensor table: the whole executor (tensor roles, batch loop, arena layout,
//! views, every kernel in context) end to end at `F32_MODEL`.

use crate::common_graph;

use common_graph::{reference_batch, run_session, Feed, Rng, DTYPES};
use kestrel_rt::demo::{image_model, text_model};
use kestrel_rt::Model;
use kestrel_rt_reference::tolerance::F32_MODEL;
use kestrel_rt_reference::{assert_close, compare};

const BATCH: usize = 3;

/// Runs `feeds` through a capacity-3 session and the interpreter and compares every output.
fn check(what: &str, model: &Model, feeds: &[Feed]) -> f64 {
    let got = run_session(model, BATCH, feeds);
    let want = reference_batch(model, feeds, BATCH);
    assert_eq!(got.len(), want.len(), "{what}: output count");
    let mut worst = 0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(w.iter().any(|v| *v != 0.0), "{what}: reference output {i} is all zeros");
        assert_close(&format!("{what} output {i}"), g, w, F32_MODEL);
        worst = worst.max(compare(g, w, F32_MODEL).max_rel_err);
    }
    worst
}

#[test]
fn image_model_matches_f64_interpreter_for_every_encoding() {
    for dtype in DTYPES {
        let model = Model::from_bytes(&image_model(7, dtype).unwrap()).unwrap();
        let mut rng = Rng::new(0xD1CE ^ dtype as u64);
        let x: Vec<f32> = (0..BATCH * 256).map(|_| rng.uniform(1.0)).collect();
        let err = check(&format!("image {dtype:?}"), &model, &[Feed::F32(x)]);
        eprintln!("image {dtype:?}: max error / max|want| = {err:e}");
    }
}

#[test]
fn text_model_matches_f64_interpreter_for_every_encoding() {
    for dtype in DTYPES {
        let model = Model::from_bytes(&text_model(13, dtype).unwrap()).unwrap();
        let mut rng = Rng::new(0x7E47 ^ dtype as u64);
        let ids: Vec<i32> = (0..BATCH * 24).map(|_| rng.below(100) as i32).collect();
        let err = check(&format!("text {dtype:?} i32"), &model, &[Feed::I32(ids.clone())]);
        eprintln!("text {dtype:?}: max error / max|want| = {err:e}");
        let wide: Vec<i64> = ids.iter().map(|&v| i64::from(v)).collect();
        check(&format!("text {dtype:?} i64"), &model, &[Feed::I64(wide)]);
    }
}

/// Every case of the shared mechanism table, and each of its stored-layout variants (AFT-full's
/// full and factorised bias, AFT-local's full and band bias, causal and not), as a one-layer
/// model `[T, d] → [T, d]` (T = 12, d = 8) against the interpreter: the table the demo, the
/// scaling bench and the fuzz seeds build from, checked case by case.
#[test]
fn every_mechanism_case_matches_f64_interpreter() {
    use kestrel_rt::mechanisms::{Case, Mechanism, CASES};
    let mut cases: Vec<Case> = CASES.to_vec();
    cases.push(Case { rank: 0, ..Case::new(Mechanism::AftFull) });
    cases.push(Case { band: true, causal: true, window: 2, ..Case::new(Mechanism::AftLocal) });
    cases.push(Case { causal: true, ..Case::new(Mechanism::AftSimple) });
    cases.push(Case { heads: 2, causal: true, ..Case::new(Mechanism::Super) });
    for m in Mechanism::ALL {
        assert!(cases.iter().any(|c| c.mechanism == m), "{} has no case", m.name());
    }
    let (t, d) = (12usize, 8usize);
    for case in cases {
        let bytes = kestrel_rt::demo::layer_model(&case, t, d, kestrel_rt::format::DType::F32, 0xCA5E).unwrap();
        let model = Model::from_bytes(&bytes).unwrap();
        let mut rng = Rng::new(0xFEED);
        let x: Vec<f32> = (0..BATCH * t * d).map(|_| rng.uniform(1.0)).collect();
        let err = check(&case.label(), &model, &[Feed::F32(x)]);
        eprintln!("{}: max error / max|want| = {err:e}", case.label());
    }
}
