//! What an op is without its record, beyond what its table entry generates ([`Op::name`],
//! [`Op::kind`], [`Op::output`], [`kind_name`](super::kind_name)): its class, a layer or a
//! mechanism ([`Op::class`], [`Op::layer`], [`Op::mechanism`]), and its inputs (read through its
//! record).

use super::*;

impl Op {
    /// True for the fused attention mechanisms (kind ids 32 and up).
    pub fn kind_is_mechanism(&self) -> bool {
        self.kind() >= kind::ATTENTION
    }

    /// The op's class, borrowed: a layer ([`LayerOp`]) or a fused mechanism ([`MechanismOp`]).
    /// Every op is named here once, so an op added to the format fails to compile until it is
    /// classed; the backends then match the class's enum exhaustively in their layer or their
    /// mechanism lowering (a new mechanism touches no layer code, and the reverse).
    pub fn class(&self) -> OpClass<'_> {
        use LayerOp as L;
        use MechanismOp as M;
        match self {
            Op::Attention(o) => OpClass::Mechanism(M::Attention(o)),
            Op::AftFull(o) => OpClass::Mechanism(M::AftFull(o)),
            Op::AftLocal(o) => OpClass::Mechanism(M::AftLocal(o)),
            Op::AftSimple(o) => OpClass::Mechanism(M::AftSimple(o)),
            Op::AftConv(o) => OpClass::Mechanism(M::AftConv(o)),
            Op::Fastformer(o) => OpClass::Mechanism(M::Fastformer(o)),
            Op::Dense(o) => OpClass::Layer(L::Dense(o)),
            Op::LayerNorm(o) => OpClass::Layer(L::LayerNorm(o)),
            Op::Embedding(o) => OpClass::Layer(L::Embedding(o)),
            Op::MatMul(o) => OpClass::Layer(L::MatMul(o)),
            Op::Sdpa(o) => OpClass::Layer(L::Sdpa(o)),
            Op::Unary(o) => OpClass::Layer(L::Unary(o)),
            Op::Binary(o) => OpClass::Layer(L::Binary(o)),
            Op::Softmax(o) => OpClass::Layer(L::Softmax(o)),
            Op::Reduce(o) => OpClass::Layer(L::Reduce(o)),
            Op::Reshape(o) => OpClass::Layer(L::Reshape(o)),
            Op::Slice(o) => OpClass::Layer(L::Slice(o)),
            Op::Gather(o) => OpClass::Layer(L::Gather(o)),
            Op::Nms(o) => OpClass::Layer(L::Nms(o)),
            Op::Concat(o) => OpClass::Layer(L::Concat(o)),
            Op::Transpose(o) => OpClass::Layer(L::Transpose(o)),
            Op::Conv2d(o) => OpClass::Layer(L::Conv2d(o)),
            Op::PatchEmbed(o) => OpClass::Layer(L::PatchEmbed(o)),
            Op::Pool2d(o) => OpClass::Layer(L::Pool2d(o)),
            Op::Lstm(o) => OpClass::Layer(L::Lstm(o)),
            Op::Gru(o) => OpClass::Layer(L::Gru(o)),
            Op::Chain(o) => OpClass::Layer(L::Chain(o)),
            Op::LinearAttn(o) => OpClass::Layer(L::LinearAttn(o)),
        }
    }

    /// The op as a [`MechanismOp`], `None` for the layer ops ([`Op::class`]).
    pub fn mechanism(&self) -> Option<MechanismOp<'_>> {
        match self.class() {
            OpClass::Mechanism(m) => Some(m),
            OpClass::Layer(_) => None,
        }
    }

    /// The op as a [`LayerOp`], `None` for the mechanisms ([`Op::class`]).
    pub fn layer(&self) -> Option<LayerOp<'_>> {
        match self.class() {
            OpClass::Layer(l) => Some(l),
            OpClass::Mechanism(_) => None,
        }
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

/// An op's class ([`Op::class`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OpClass<'a> {
    /// A layer op (kind ids below 32).
    Layer(LayerOp<'a>),
    /// A fused mechanism (kind ids 32 and up).
    Mechanism(MechanismOp<'a>),
}

/// A layer op (kind ids below 32), borrowed from its [`Op`] ([`Op::layer`]): by family, dense,
/// element-wise and reductions, layout, grids, recurrences.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LayerOp<'a> {
    /// [`Op::Dense`].
    Dense(&'a Dense),
    /// [`Op::LayerNorm`].
    LayerNorm(&'a LayerNorm),
    /// [`Op::Embedding`].
    Embedding(&'a Embedding),
    /// [`Op::MatMul`].
    MatMul(&'a MatMul),
    /// [`Op::Sdpa`]: attention on computed activations, a layer (no weights of its own; the
    /// mechanism class reads its input through W^Q).
    Sdpa(&'a Sdpa),
    /// [`Op::Unary`].
    Unary(&'a Unary),
    /// [`Op::Binary`].
    Binary(&'a Binary),
    /// [`Op::Softmax`].
    Softmax(&'a Softmax),
    /// [`Op::Reduce`].
    Reduce(&'a Reduce),
    /// [`Op::Reshape`].
    Reshape(&'a Reshape),
    /// [`Op::Slice`].
    Slice(&'a Slice),
    /// [`Op::Gather`].
    Gather(&'a Gather),
    /// [`Op::Nms`].
    Nms(&'a Nms),
    /// [`Op::Concat`].
    Concat(&'a Concat),
    /// [`Op::Transpose`].
    Transpose(&'a Transpose),
    /// [`Op::Conv2d`].
    Conv2d(&'a Conv2d),
    /// [`Op::PatchEmbed`].
    PatchEmbed(&'a PatchEmbed),
    /// [`Op::Pool2d`].
    Pool2d(&'a Pool2d),
    /// [`Op::Lstm`].
    Lstm(&'a Lstm),
    /// [`Op::Gru`].
    Gru(&'a Gru),
    /// [`Op::LinearAttn`]: linear attention with a recurrent state, on computed activations.
    LinearAttn(&'a LinearAttn),
    /// [`Op::Chain`].
    Chain(&'a Chain),
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

impl MechanismOp<'_> {
    /// The input `[T, d]` (`[G, T, d]` for grouped attention).
    pub fn x(&self) -> TensorId {
        match self {
            MechanismOp::Attention(o) => o.x,
            MechanismOp::AftFull(o) => o.x,
            MechanismOp::AftLocal(o) => o.x,
            MechanismOp::AftSimple(o) => o.x,
            MechanismOp::AftConv(o) => o.x,
            MechanismOp::Fastformer(o) => o.x,
        }
    }

    /// W^Q, the projection every mechanism applies to its input first.
    pub fn q(&self) -> Proj {
        match self {
            MechanismOp::Attention(o) => o.q,
            MechanismOp::AftFull(o) => o.q,
            MechanismOp::AftLocal(o) => o.q,
            MechanismOp::AftSimple(o) => o.q,
            MechanismOp::AftConv(o) => o.q,
            MechanismOp::Fastformer(o) => o.q,
        }
    }
}
