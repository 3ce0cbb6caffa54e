//! What an op is without its record, beyond what its table entry generates ([`Op::name`],
//! [`Op::kind`], [`Op::output`], [`kind_name`](super::kind_name)): whether it is a mechanism
//! (and which, [`Op::mechanism`]), and its inputs (read through its record).

use super::*;

impl Op {
    /// True for the fused attention mechanisms (kind ids 32 and up).
    pub fn kind_is_mechanism(&self) -> bool {
        self.kind() >= kind::ATTENTION
    }

    /// The op as a [`MechanismOp`], `None` for the layer ops. Every op is named here, so an op
    /// added to the format fails to compile until it is classed; the backends' mechanism
    /// lowerings then match [`MechanismOp`] exhaustively.
    pub fn mechanism(&self) -> Option<MechanismOp<'_>> {
        Some(match self {
            Op::Attention(o) => MechanismOp::Attention(o),
            Op::AftFull(o) => MechanismOp::AftFull(o),
            Op::AftLocal(o) => MechanismOp::AftLocal(o),
            Op::AftSimple(o) => MechanismOp::AftSimple(o),
            Op::AftConv(o) => MechanismOp::AftConv(o),
            Op::Fastformer(o) => MechanismOp::Fastformer(o),
            // The layer ops, by family: dense, elementwise and reductions, layout, grids,
            // recurrences.
            Op::Dense(_) | Op::LayerNorm(_) | Op::Embedding(_) | Op::MatMul(_) => return None,
            Op::Unary(_) | Op::Binary(_) | Op::Softmax(_) | Op::Reduce(_) => return None,
            Op::Reshape(_) | Op::Slice(_) | Op::Transpose(_) => return None,
            Op::Conv2d(_) | Op::PatchEmbed(_) | Op::Pool2d(_) => return None,
            Op::Lstm(_) | Op::Gru(_) => return None,
        })
    }

    /// The main activation input (slot 0: `x`, `a` or `ids`).
    pub fn main_input(&self) -> TensorId {
        self.encode().tensors()[0]
    }

    /// Every tensor the op reads (activations and weights), absent optional slots skipped, in
    /// slot order. The first entry is the main activation input.
    pub fn for_each_input(&self, mut f: impl FnMut(TensorId)) {
        let r = self.encode();
        let ts = r.tensors();
        for &t in &ts[..ts.len() - 1] {
            if t != NONE {
                f(t);
            }
        }
    }
}

/// A fused mechanism op (kind ids 32 and up), borrowed from its [`Op`] ([`Op::mechanism`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MechanismOp<'a> {
    /// [`Op::Attention`].
    Attention(&'a Attention),
    /// [`Op::AftFull`].
    AftFull(&'a AftFull),
    /// [`Op::AftLocal`].
    AftLocal(&'a AftLocal),
    /// [`Op::AftSimple`].
    AftSimple(&'a AftSimple),
    /// [`Op::AftConv`].
    AftConv(&'a AftConv),
    /// [`Op::Fastformer`].
    Fastformer(&'a Fastformer),
}
