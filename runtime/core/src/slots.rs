//! The roles of an op's tensor slots (what each input slot accepts), read from the op's record
//! layout: shared by validation and by every backend's binding of inputs.

use kestrel_rt_format::ops::{kind, Op, TensorId, NONE};

/// What a tensor slot accepts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An f32 activation.
    Act,
    /// An i32 activation (token ids).
    Ids,
    /// A weight.
    Weight,
    /// An f32 activation or a weight (broadcast operands).
    ActOrWeight,
    /// An f32 activation or a weight stored as f32 (Attention's and Sdpa's additive score bias,
    /// Gather's indices).
    ActOrF32Weight,
    /// A weight stored as f32 (a dense layer's or a convolution's clamp bounds).
    F32Weight,
    /// An f32 or an i32 activation (a concatenation's pieces: values or ids, copied as bits).
    AnyAct,
}

/// Calls `f(slot name, tensor id, role)` for every present input slot of `op`.
pub fn for_each_slot(op: &Op, mut f: impl FnMut(&'static str, TensorId, Role)) {
    let rec = op.encode();
    let ts = rec.tensors();
    let n = ts.len() - 1; // the last slot is the output
    for (i, &id) in ts[..n].iter().enumerate() {
        if id == NONE {
            continue;
        }
        let (slot, role) = match (rec.kind, i) {
            (kind::EMBEDDING, 0) => ("ids", Role::Ids),
            (kind::BINARY, 0) => ("a", Role::ActOrWeight),
            (kind::BINARY, 1) => ("b", Role::ActOrWeight),
            (kind::MATMUL, 1) => ("b", Role::ActOrWeight),
            (kind::ATTENTION, 11) => ("mask", Role::ActOrF32Weight),
            (kind::SDPA, 0) => ("q", Role::Act),
            (kind::SDPA, 1) => ("k", Role::Act),
            (kind::SDPA, 2) => ("v", Role::Act),
            (kind::SDPA, 3) => ("bias", Role::ActOrF32Weight),
            (kind::SDPA, 4) => ("sink", Role::F32Weight),
            (kind::SDPA, 5) => ("mix_pre", Role::F32Weight),
            (kind::SDPA, 6) => ("mix_post", Role::F32Weight),
            (kind::LINEAR_ATTN, i) => (["q", "k", "v", "state", "decay", "beta"][i.min(5)], Role::Act),
            (kind::GATHER, 1) => ("idx", Role::ActOrF32Weight),
            (kind::NMS, 1) => ("scores", Role::ActOrF32Weight),
            (kind::NMS, 2) => ("max_out", Role::ActOrF32Weight),
            (kind::NMS, 3) => ("iou", Role::ActOrF32Weight),
            (kind::NMS, 4) => ("score", Role::ActOrF32Weight),
            (kind::DENSE | kind::CONV2D, 3) => ("clamp", Role::F32Weight),
            (kind::CONV2D, 4) => ("residual", Role::Act),
            (kind::CONCAT, _) => ("x", Role::AnyAct),
            (_, 0) => ("x", Role::Act),
            _ => ("weight", Role::Weight),
        };
        f(slot, id, role);
    }
}
