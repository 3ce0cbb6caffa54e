//! Op records whose attributes carry meaning beyond shapes: Pool2d's validated geometry,
//! Conv2d's optional fused activation and LayerNorm's optional axis (split from `loader.rs`,
//! which tests whole files).

/// Pool2d records: 2 slots and 12 attributes (kind, kernel, stride, pad, dilation,
/// count_include_pad); an unknown kind, a zero kernel/stride/dilation, a count_include_pad other
/// than 0/1, or count_include_pad on a max pool is a typed error.
#[test]
fn pool2d_records_are_validated() {
    use kestrel_rt_format::ops::*;
    let good = [1u32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1];
    let op = Op::decode(kind::POOL2D, &[0, 1], &good).unwrap();
    let want = Pool2d {
        x: 0,
        kind: PoolKind::Avg,
        kernel: [3, 3],
        stride: [2, 2],
        pad: [1, 1, 1, 1],
        dilation: [1, 1],
        count_include_pad: true,
        y: 1,
    };
    assert_eq!(op, Op::Pool2d(want));
    assert_eq!(op.encode().attrs(), good);
    assert_eq!(op.name(), "Pool2d");
    let bad = |i: usize, v: u32| {
        let mut a = good;
        a[i] = v;
        Op::decode(kind::POOL2D, &[0, 1], &a).unwrap_err()
    };
    assert!(matches!(bad(0, 2), OpError::BadAttr { attr: "kind", value: 2, .. }));
    assert!(matches!(bad(1, 0), OpError::BadAttr { attr: "kernel", value: 0, .. }));
    assert!(matches!(bad(4, 0), OpError::BadAttr { attr: "stride", value: 0, .. }));
    assert!(matches!(bad(10, 0), OpError::BadAttr { attr: "dilation", value: 0, .. }));
    assert!(matches!(bad(11, 2), OpError::BadAttr { attr: "count_include_pad", value: 2, .. }));
    assert!(matches!(bad(0, 0), OpError::BadAttr { attr: "count_include_pad (Max)", .. }));
    assert!(matches!(
        Op::decode(kind::POOL2D, &[0, 1], &good[..11]),
        Err(OpError::AttrCount { expected: 12, found: 11, .. })
    ));
    assert!(matches!(Op::decode(kind::POOL2D, &[0, NONE], &good), Err(OpError::MissingTensor { slot: "y", .. })));
}

/// A Conv2d record has nine attributes (no activation: what earlier writers wrote, and what is
/// still written without a fused activation) or ten (the activation code, checked).
#[test]
fn conv2d_records_with_and_without_an_activation() {
    use kestrel_rt_format::ops::*;
    let conv = |act| {
        Op::Conv2d(Conv2d {
            clamp: None,
            residual: None,
            x: 0,
            proj: Proj { w: 1, b: None },
            stride: [1, 1],
            pad: [0; 4],
            dilation: [1, 1],
            groups: 1,
            act,
            y: 2,
        })
    };
    let plain = conv(Activation::None).encode();
    assert_eq!(plain.attrs().len(), 9);
    let fused = conv(Activation::Silu).encode();
    assert_eq!(fused.attrs().len(), 10);
    assert_eq!(Op::decode(kind::CONV2D, plain.tensors(), plain.attrs()).unwrap(), conv(Activation::None));
    assert_eq!(Op::decode(kind::CONV2D, fused.tensors(), fused.attrs()).unwrap(), conv(Activation::Silu));
    let mut bad = fused.attrs().to_vec();
    bad[9] = 99;
    assert!(matches!(
        Op::decode(kind::CONV2D, fused.tensors(), &bad),
        Err(OpError::BadAttr { attr: "activation", value: 99, .. })
    ));
    assert!(matches!(
        Op::decode(kind::CONV2D, fused.tensors(), &bad[..8]),
        Err(OpError::AttrCount { expected: 9, found: 8, .. })
    ));
}

/// A LayerNorm record has one attribute (eps: the last axis, what earlier writers wrote and what
/// is still written for it) or two (eps, then the axis code: 1 channels-first); an unknown axis
/// code is a typed error naming the attribute, and a file with a channels-first LayerNorm
/// round-trips through the writer and the reader.
#[test]
fn layer_norm_records_with_and_without_an_axis() {
    use kestrel_rt_format::ops::*;
    let ln = |axis| Op::LayerNorm(LayerNorm { x: 0, gamma: 1, beta: Some(2), eps: 1e-6, axis, y: 3 });
    let last = ln(NormAxis::Last).encode();
    assert_eq!(last.attrs(), [1e-6f32.to_bits()]);
    let channels = ln(NormAxis::Channels).encode();
    assert_eq!(channels.attrs(), [1e-6f32.to_bits(), 1]);
    assert_eq!(Op::decode(kind::LAYER_NORM, last.tensors(), last.attrs()).unwrap(), ln(NormAxis::Last));
    assert_eq!(Op::decode(kind::LAYER_NORM, channels.tensors(), channels.attrs()).unwrap(), ln(NormAxis::Channels));
    // An explicit 0 is the last axis too (a writer may spell the default out).
    let explicit = [1e-6f32.to_bits(), 0];
    assert_eq!(Op::decode(kind::LAYER_NORM, last.tensors(), &explicit).unwrap(), ln(NormAxis::Last));
    for bad in [2u32, 7, u32::MAX] {
        let err = Op::decode(kind::LAYER_NORM, channels.tensors(), &[1e-6f32.to_bits(), bad]).unwrap_err();
        assert!(matches!(err, OpError::BadAttr { op: "LayerNorm", attr: "axis", value } if value == bad), "{err:?}");
        assert!(err.to_string().contains("axis"), "{err}");
    }
    assert!(matches!(
        Op::decode(kind::LAYER_NORM, channels.tensors(), &[1e-6f32.to_bits(), 1, 0]),
        Err(OpError::AttrCount { expected: 1, found: 3, .. })
    ));
    assert!(matches!(
        Op::decode(kind::LAYER_NORM, channels.tensors(), &[f32::NAN.to_bits(), 1]),
        Err(OpError::BadAttr { attr: "eps", .. })
    ));

    // Whole files: the record's axis survives the writer, and the reader rejects a patched code.
    use kestrel_rt_format::weight::EncodedWeight;
    use kestrel_rt_format::*;
    let w = |name: &str, v: f32| TensorSpec::Weight {
        name: name.into(),
        shape: Shape::new(&[4]).unwrap(),
        weight: EncodedWeight::encode(DType::F32, 1, 4, &[v; 4]).unwrap(),
    };
    let a = |name: &str, offset| TensorSpec::Activation {
        name: name.into(),
        dtype: DType::F32,
        shape: Shape::new(&[4, 3, 5]).unwrap(),
        offset,
        act_scale: None,
    };
    let spec = ModelSpec {
        meta: MetadataSpec::default(),
        tensors: vec![a("x", 0), w("gamma", 1.5), w("beta", 0.25), a("y", 256)],
        ops: vec![ln(NormAxis::Channels)],
        inputs: vec![0],
        outputs: vec![3],
        plan: MemoryPlan { arena_bytes_per_sample: 512, scratch_bytes: 0 },
    };
    let bytes = write_model(&spec).unwrap();
    let f = KesFile::parse(&aligned_copy(&bytes)).map(|f| f.op(0).unwrap()).unwrap();
    assert_eq!(f, ln(NormAxis::Channels));
    // The axis code is the record's last word: find it after the eps bits and patch it.
    let eps = 1e-6f32.to_bits().to_le_bytes();
    let at = bytes.windows(8).position(|w| w[..4] == eps && w[4..] == 1u32.to_le_bytes()).unwrap() + 4;
    let mut patched = bytes.clone();
    patched[at..at + 4].copy_from_slice(&5u32.to_le_bytes());
    reseal(&mut patched);
    let err = KesFile::parse(&aligned_copy(&patched)).unwrap_err();
    assert!(err.to_string().contains("axis"), "{err}");
}

/// Hard sigmoid is activation code 6 (Dense's attribute 0, Conv2d's optional tenth) and Unary
/// op code 14: each record round-trips with it, and the next code of each enum (unknown to this
/// reader, as 6 and 14 are to a reader from before them) is a typed error, not a panic.
#[test]
fn hard_sigmoid_codes_round_trip_and_the_next_codes_are_rejected() {
    use kestrel_rt_format::ops::*;
    assert_eq!((Activation::HardSigmoid as u32, UnaryOp::HardSigmoid as u32), (6, 14));
    let conv = Op::Conv2d(Conv2d {
        clamp: None,
        residual: None,
        x: 0,
        proj: Proj { w: 1, b: Some(2) },
        stride: [1, 1],
        pad: [0; 4],
        dilation: [1, 1],
        groups: 1,
        act: Activation::HardSigmoid,
        y: 3,
    });
    let dense =
        Op::Dense(Dense { clamp: None, x: 0, proj: Proj { w: 1, b: Some(2) }, act: Activation::HardSigmoid, y: 3 });
    let unary = Op::Unary(Unary { x: 0, op: UnaryOp::HardSigmoid, y: 1 });
    let next_act = Activation::ALL.len() as u32;
    let next_unary = UnaryOp::ALL.len() as u32;
    for (op, attr, code, name, next) in
        [(conv, 9, 6, "activation", next_act), (dense, 0, 6, "activation", next_act), (unary, 0, 14, "op", next_unary)]
    {
        let r = op.encode();
        assert_eq!(r.attrs()[attr], code, "{op:?}");
        assert_eq!(Op::decode(r.kind, r.tensors(), r.attrs()).unwrap(), op);
        let mut bad = r.attrs().to_vec();
        bad[attr] = next;
        let err = Op::decode(r.kind, r.tensors(), &bad).unwrap_err();
        assert!(matches!(err, OpError::BadAttr { attr: a, value, .. } if a == name && value == next), "{err:?}");
    }
}

/// Each fused activation is one element-wise function and back (`Activation::as_unary` /
/// `of_unary`: what the fusion passes fold and what the GPU runs where it does not fuse), the
/// identity none, and no two activations share a function.
#[test]
fn activations_map_to_their_element_wise_functions() {
    use kestrel_rt_format::ops::{Activation, UnaryOp};
    for &a in Activation::ALL {
        match a.as_unary() {
            None => assert_eq!(a, Activation::None),
            Some(u) => assert_eq!(Activation::of_unary(u), Some(a), "{a:?} -> {u:?} -> back"),
        }
    }
    let mapped: Vec<_> = UnaryOp::ALL.iter().filter_map(|&u| Activation::of_unary(u).map(|a| (u, a))).collect();
    assert_eq!(mapped.len(), Activation::ALL.len() - 1, "{mapped:?}");
    for (u, a) in mapped {
        assert_eq!(a.as_unary(), Some(u));
    }
}
