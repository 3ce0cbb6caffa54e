//! Dense and Conv2d records with and without the optional clamp slot (and a Conv2d's residual
//! slot after it): both round-trip through `Op::encode` / `Op::decode`, a record without the
//! slots is exactly the four slots it always was, the clamp and the residual are inputs (not the
//! output), and a record with a slot too many is refused.

use kestrel_rt_format::ops::*;

fn round_trip(kind: u16, tensors: &[u32], attrs: &[u32], want: Op) {
    let op = Op::decode(kind, tensors, attrs).unwrap();
    assert_eq!(op, want);
    assert_eq!(op.encode().tensors(), tensors);
    assert_eq!(op.encode().attrs(), attrs);
    let mut inputs = Vec::new();
    op.for_each_input(|t| inputs.push(t));
    assert_eq!(Some(op.output()), tensors.last().copied());
    assert_eq!(inputs, tensors[..tensors.len() - 1].iter().copied().filter(|&t| t != NONE).collect::<Vec<_>>());
}

#[test]
fn dense_and_conv_records_with_and_without_clamp() {
    let dense = |clamp| Dense { x: 0, proj: Proj { w: 1, b: Some(2) }, act: Activation::Relu, clamp, y: 4 };
    round_trip(kind::DENSE, &[0, 1, 2, 4], &[1], Op::Dense(dense(None)));
    round_trip(kind::DENSE, &[0, 1, 2, 3, 4], &[1], Op::Dense(dense(Some(3))));
    let conv = |clamp, act| Conv2d {
        x: 0,
        proj: Proj { w: 1, b: None },
        stride: [1, 2],
        pad: [0, 1, 0, 1],
        dilation: [1, 1],
        groups: 1,
        act,
        clamp,
        residual: None,
        y: 4,
    };
    let geometry = [1, 2, 0, 1, 0, 1, 1, 1, 1];
    round_trip(kind::CONV2D, &[0, 1, NONE, 4], &geometry, Op::Conv2d(conv(None, Activation::None)));
    // A clamp without an activation: the slot is there, the optional attribute is not.
    round_trip(kind::CONV2D, &[0, 1, NONE, 3, 4], &geometry, Op::Conv2d(conv(Some(3), Activation::None)));
    let with_act: Vec<u32> = geometry.iter().copied().chain([1]).collect();
    round_trip(kind::CONV2D, &[0, 1, NONE, 3, 4], &with_act, Op::Conv2d(conv(Some(3), Activation::Relu)));
    // A residual: its slot after the clamp's, `NONE` there when only the residual is set.
    let res = |clamp, residual| Op::Conv2d(Conv2d { residual, ..conv(clamp, Activation::Relu) });
    round_trip(kind::CONV2D, &[0, 1, NONE, NONE, 5, 4], &with_act, res(None, Some(5)));
    round_trip(kind::CONV2D, &[0, 1, NONE, 3, 5, 4], &with_act, res(Some(3), Some(5)));
    // Seven slots: one more than any Conv2d record has.
    assert!(matches!(Op::decode(kind::CONV2D, &[0, 1, NONE, 3, 5, 6, 4], &with_act), Err(OpError::TensorCount { .. })));
    // Six slots: one more than any Dense record has.
    assert!(matches!(Op::decode(kind::DENSE, &[0, 1, 2, 3, 5, 4], &[1]), Err(OpError::TensorCount { .. })));
}
