//! The CPU loader's semantic checks: files that are well-formed containers but describe an
//! invalid program are rejected at load with a typed error naming what is wrong (never a panic,
//! never a failure at run time).

use kestrel_rt::format::ops::{Activation, Dense, Op, Proj, Reshape, Unary, UnaryOp};
use kestrel_rt::format::weight::EncodedWeight;
use kestrel_rt::format::{aligned_copy, write_model, DType, MemoryPlan, MetadataSpec, ModelSpec, Shape, TensorSpec};
use kestrel_rt_cpu::{LoadError, Model, ShapeError};

fn act(name: &str, dims: &[u32], offset: u64) -> TensorSpec {
    TensorSpec::Activation {
        name: name.into(),
        dtype: DType::F32,
        shape: Shape::new(dims).unwrap(),
        offset,
        act_scale: None,
    }
}

fn weight(name: &str, dims: &[u32]) -> TensorSpec {
    let shape = Shape::new(dims).unwrap();
    let (r, c) = shape.as_matrix().unwrap();
    let v: Vec<f32> = (0..r * c).map(|i| (i as f32 * 0.3).sin()).collect();
    TensorSpec::Weight { name: name.into(), shape, weight: EncodedWeight::encode(DType::F32, r, c, &v).unwrap() }
}

/// x [4, 8] → Dense(w [8, 8], b [8]) → y [4, 8] → Relu → z [4, 8]; tensors 0 x, 1 w, 2 b, 3 y, 4 z.
fn valid() -> ModelSpec {
    ModelSpec {
        meta: MetadataSpec { name: "validation".into(), ..Default::default() },
        tensors: vec![
            act("x", &[4, 8], 0),
            weight("w", &[8, 8]),
            weight("b", &[8]),
            act("y", &[4, 8], 128),
            act("z", &[4, 8], 0),
        ],
        ops: vec![
            Op::Dense(Dense { clamp: None, x: 0, proj: Proj { w: 1, b: Some(2) }, act: Activation::None, y: 3 }),
            Op::Unary(Unary { x: 3, op: UnaryOp::Relu, y: 4 }),
        ],
        inputs: vec![0],
        outputs: vec![4],
        plan: MemoryPlan { arena_bytes_per_sample: 256, scratch_bytes: 0 },
    }
}

fn load(spec: &ModelSpec) -> Result<(), LoadError> {
    let bytes = aligned_copy(&write_model(spec).expect("the container itself is well formed"));
    Model::parse(&bytes).map(|_| ())
}

#[test]
fn the_base_model_is_valid() {
    load(&valid()).unwrap();
}

#[test]
fn plan_sizes_must_be_aligned() {
    let mut s = valid();
    s.plan.arena_bytes_per_sample = 260;
    assert!(matches!(
        load(&s),
        Err(LoadError::PlanAlignment { what: "arena_bytes_per_sample", value: 260, align: 64 })
    ));
    let mut s = valid();
    s.plan.scratch_bytes = 6;
    assert!(matches!(load(&s), Err(LoadError::PlanAlignment { what: "scratch_bytes", .. })));
}

#[test]
fn scratch_must_cover_the_largest_node() {
    let mut s = valid();
    // A layer norm needs 2·d scratch elements for its decoded γ and β.
    s.tensors.push(weight("gamma", &[8]));
    s.tensors.push(act("n", &[4, 8], 128));
    s.ops.push(Op::LayerNorm(kestrel_rt::format::ops::LayerNorm {
        x: 4,
        gamma: 5,
        beta: None,
        eps: 1e-5,
        axis: kestrel_rt::format::ops::NormAxis::Last,
        y: 6,
    }));
    s.outputs = vec![6];
    assert!(matches!(load(&s), Err(LoadError::ScratchTooSmall { required: 64, found: 0 })), "{:?}", load(&s));
    s.plan.scratch_bytes = 64;
    load(&s).unwrap();
}

#[test]
fn an_output_overlapping_its_input_is_rejected() {
    let mut s = valid();
    s.tensors[3] = act("y", &[4, 8], 64); // overlaps x at [0, 128)
    assert!(matches!(load(&s), Err(LoadError::Overlap { node: 0, output: 3, input: 0, .. })), "{:?}", load(&s));
}

#[test]
fn reading_before_writing_is_rejected() {
    let mut s = valid();
    s.ops.swap(0, 1);
    assert!(matches!(load(&s), Err(LoadError::UseBeforeDefinition { node: 0, tensor: 3, .. })), "{:?}", load(&s));
}

#[test]
fn writing_twice_is_rejected() {
    let mut s = valid();
    s.ops.push(Op::Unary(Unary { x: 3, op: UnaryOp::Exp, y: 4 }));
    assert!(matches!(load(&s), Err(LoadError::Redefinition { node: 2, tensor: 4, .. })), "{:?}", load(&s));
    let mut s = valid();
    s.ops[1] = Op::Unary(Unary { x: 3, op: UnaryOp::Relu, y: 0 }); // overwrites the graph input
    assert!(matches!(load(&s), Err(LoadError::Redefinition { node: 1, tensor: 0, .. })), "{:?}", load(&s));
}

#[test]
fn slots_must_hold_the_right_kind_of_tensor() {
    let mut s = valid();
    s.ops[0] = Op::Dense(Dense { clamp: None, x: 1, proj: Proj { w: 1, b: Some(2) }, act: Activation::None, y: 3 });
    assert!(matches!(load(&s), Err(LoadError::TensorRole { slot: "x", tensor: 1, expected: "an f32 activation", .. })));
    let mut s = valid();
    s.ops[0] = Op::Dense(Dense { clamp: None, x: 0, proj: Proj { w: 0, b: Some(2) }, act: Activation::None, y: 3 });
    assert!(matches!(load(&s), Err(LoadError::TensorRole { tensor: 0, expected: "a weight", .. })));
}

#[test]
fn declared_output_shapes_must_match() {
    let mut s = valid();
    s.tensors[4] = act("z", &[8, 4], 0);
    assert!(matches!(load(&s), Err(LoadError::OutputShape { node: 1, tensor: 4, .. })), "{:?}", load(&s));
}

#[test]
fn kernel_weight_shapes_are_checked() {
    let mut s = valid();
    s.tensors[2] = weight("b", &[7]); // bias of 7 for 8 outputs
    match load(&s) {
        Err(LoadError::Shape { node: 0, source: ShapeError::Mismatch { expected: 8, found: 7, .. }, .. }) => {}
        other => panic!("{other:?}"),
    }
    let mut s = valid();
    s.tensors[1] = weight("w", &[8, 6]);
    assert!(matches!(load(&s), Err(LoadError::Shape { node: 0, .. })), "{:?}", load(&s));
}

#[test]
fn a_reshape_must_alias_its_input() {
    let mut s = valid();
    s.tensors.push(act("r", &[32], 128));
    s.ops.push(Op::Reshape(Reshape { x: 4, y: 5 }));
    s.outputs = vec![5];
    assert!(matches!(load(&s), Err(LoadError::ReshapeAlias { node: 2, input_offset: 0, output_offset: 128 })));
    if let TensorSpec::Activation { offset, .. } = &mut s.tensors[5] {
        *offset = 0;
    }
    load(&s).unwrap();
    // The element count must agree too.
    s.tensors[5] = act("r", &[31], 0);
    assert!(matches!(load(&s), Err(LoadError::Shape { node: 2, .. })), "{:?}", load(&s));
}

#[test]
fn every_output_must_be_written() {
    let mut s = valid();
    s.tensors.push(act("orphan", &[4], 128));
    s.outputs = vec![4, 5];
    assert!(matches!(load(&s), Err(LoadError::OutputNeverWritten { tensor: 5 })), "{:?}", load(&s));
}

#[test]
fn errors_name_what_was_expected_and_found() {
    let mut s = valid();
    s.tensors[2] = weight("b", &[7]);
    let msg = load(&s).unwrap_err().to_string();
    assert!(msg.contains("node 0") && msg.contains("Dense") && msg.contains('8') && msg.contains('7'), "{msg}");
}

/// Files of more tensors than the loader's on-stack definition bitset (4 096) take the scanning
/// path: the same verdicts.
#[test]
fn definition_checks_hold_for_large_tensor_tables() {
    let pad = |mut s: ModelSpec| {
        for i in 0..4100 {
            s.tensors.push(weight(&format!("unused{i}"), &[1]));
        }
        s
    };
    assert!(load(&pad(valid())).is_ok(), "{:?}", load(&pad(valid())).err());
    let mut s = valid();
    s.ops.swap(0, 1);
    let s = pad(s);
    assert!(matches!(load(&s), Err(LoadError::UseBeforeDefinition { node: 0, tensor: 3, .. })), "{:?}", load(&s));
    let mut s = valid();
    s.ops.push(Op::Unary(Unary { x: 3, op: UnaryOp::Exp, y: 4 }));
    let s = pad(s);
    assert!(matches!(load(&s), Err(LoadError::Redefinition { node: 2, tensor: 4, .. })), "{:?}", load(&s));
}
