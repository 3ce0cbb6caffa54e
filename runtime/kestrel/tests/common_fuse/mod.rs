//! What the synthetic-graph attention fusion tests (`fuse_query_rows.rs`,
//! `fuse_const_queries.rs`, `fuse_mixed.rs`, `fuse_concat_keys.rs`, `fuse_talking.rs`) share: running a graph on
//! seeded inputs, comparing a fused graph with the graph it replaces, the fused-or-reported
//! checks, and building nodes.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::{fuse, unfused_attention};
use kestrel_rt::{Input, Model, ModelBuilder};

/// `b` built and run at batch 2 on seeded random inputs (uniform, scale 2): every output,
/// concatenated.
pub fn run(b: &ModelBuilder) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let cpu = model.cpu().unwrap();
    let mut rng = Rng::new(33);
    let feeds: Vec<Vec<f32>> =
        (0..cpu.input_count()).map(|i| rng.vec(2 * cpu.input(i).unwrap().shape.numel().unwrap(), 2.0)).collect();
    let inputs: Vec<Input<'_>> = feeds.iter().map(|f| Input::F32(f)).collect();
    model.session(2).unwrap().run_vec(&inputs).unwrap().concat()
}

/// `fused` computes what `b` does: finite outputs within 1e-5 of their largest magnitude.
pub fn assert_same_outputs(b: &ModelBuilder, fused: &ModelBuilder) {
    let (want, got) = (run(b), run(fused));
    assert_eq!(want.len(), got.len());
    assert!(want.iter().chain(&got).all(|v| v.is_finite()));
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = want.iter().zip(&got).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(err <= 1e-5 * scale, "{err} of {scale}");
}

/// Fuses a copy of `b`; checks `nodes` Sdpa nodes, no softmax left and nothing reported, and the
/// same outputs; the fused copy.
pub fn fuses_to(b: &ModelBuilder, nodes: usize) -> ModelBuilder {
    let mut fused = b.clone();
    let report = fuse(&mut fused);
    let sdpa = fused.ops().iter().filter(|o| matches!(o, Op::Sdpa(_))).count();
    assert_eq!(sdpa, nodes, "{report:?}\n{:?}", unfused_attention(&fused));
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Softmax(_))), "{:?}", fused.ops());
    assert!(unfused_attention(&fused).is_empty());
    assert_same_outputs(b, &fused);
    fused
}

/// Leaves `b` unfused (no Sdpa node); the one report's reason contains `why`.
pub fn reported(b: &ModelBuilder, why: &str) {
    let mut fused = b.clone();
    fuse(&mut fused);
    assert!(!fused.ops().iter().any(|o| matches!(o, Op::Sdpa(_))), "{:?}", fused.ops());
    let left = unfused_attention(&fused);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].reason.contains(why), "{left:?}");
}

pub fn op(b: &mut ModelBuilder, f: impl FnOnce(TensorId) -> Op) -> TensorId {
    b.op(f).unwrap()
}

pub fn binary(b: &mut ModelBuilder, a: TensorId, c: TensorId, op: BinaryOp) -> TensorId {
    self::op(b, |y| Op::Binary(Binary { a, b: c, op, y }))
}
