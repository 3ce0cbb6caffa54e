//! What an op is without its record: its kind id and name, whether it is a mechanism, its main
//! input and output (matches over [`Op`], no encoding: the runtime asks for some of them on
//! every node of every run), and the names of kind ids.

use super::*;

impl Op {
    /// The op's kind id ([`kind`]), the one its record is encoded with. (A match, not an
    /// encode: the runtime asks for it, and for [`output`](Self::output), on every node of
    /// every run.)
    pub fn kind(&self) -> u16 {
        match self {
            Op::Dense(_) => kind::DENSE,
            Op::LayerNorm(_) => kind::LAYER_NORM,
            Op::Unary(_) => kind::UNARY,
            Op::Binary(_) => kind::BINARY,
            Op::Softmax(_) => kind::SOFTMAX,
            Op::PatchEmbed(_) => kind::PATCH_EMBED,
            Op::Embedding(_) => kind::EMBEDDING,
            Op::Reduce(_) => kind::REDUCE,
            Op::Reshape(_) => kind::RESHAPE,
            Op::Transpose(_) => kind::TRANSPOSE,
            Op::MatMul(_) => kind::MATMUL,
            Op::Slice(_) => kind::SLICE,
            Op::Conv2d(_) => kind::CONV2D,
            Op::Pool2d(_) => kind::POOL2D,
            Op::Lstm(_) => kind::LSTM,
            Op::Gru(_) => kind::GRU,
            Op::Attention(_) => kind::ATTENTION,
            Op::AftFull(_) => kind::AFT_FULL,
            Op::AftLocal(_) => kind::AFT_LOCAL,
            Op::AftSimple(_) => kind::AFT_SIMPLE,
            Op::AftConv(_) => kind::AFT_CONV,
            Op::Fastformer(_) => kind::FASTFORMER,
        }
    }

    /// The op's name as shown in reports and errors.
    pub fn name(&self) -> &'static str {
        kind_name(self.kind()).unwrap_or("?")
    }

    /// True for the fused attention mechanisms (kind ids 32 and up).
    pub fn kind_is_mechanism(&self) -> bool {
        self.kind() >= kind::ATTENTION
    }

    /// The main activation input (slot 0: `x`, `a` or `ids`).
    pub fn main_input(&self) -> TensorId {
        self.encode().tensors()[0]
    }

    /// The single output tensor (the record's last slot; read straight from the op, which
    /// sessions do for every node of every run).
    pub fn output(&self) -> TensorId {
        match self {
            Op::Dense(o) => o.y,
            Op::LayerNorm(o) => o.y,
            Op::Unary(o) => o.y,
            Op::Binary(o) => o.y,
            Op::Softmax(o) => o.y,
            Op::PatchEmbed(o) => o.y,
            Op::Embedding(o) => o.y,
            Op::Reduce(o) => o.y,
            Op::Reshape(o) => o.y,
            Op::Transpose(o) => o.y,
            Op::MatMul(o) => o.y,
            Op::Slice(o) => o.y,
            Op::Conv2d(o) => o.y,
            Op::Pool2d(o) => o.y,
            Op::Lstm(o) => o.y,
            Op::Gru(o) => o.y,
            Op::Attention(o) => o.y,
            Op::AftFull(o) => o.y,
            Op::AftLocal(o) => o.y,
            Op::AftSimple(o) => o.y,
            Op::AftConv(o) => o.y,
            Op::Fastformer(o) => o.y,
        }
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
/// The name of an op kind id, `None` if unknown.
pub fn kind_name(kind_id: u16) -> Option<&'static str> {
    Some(match kind_id {
        kind::DENSE => "Dense",
        kind::LAYER_NORM => "LayerNorm",
        kind::UNARY => "Unary",
        kind::BINARY => "Binary",
        kind::SOFTMAX => "Softmax",
        kind::PATCH_EMBED => "PatchEmbed",
        kind::EMBEDDING => "Embedding",
        kind::REDUCE => "Reduce",
        kind::RESHAPE => "Reshape",
        kind::TRANSPOSE => "Transpose",
        kind::MATMUL => "MatMul",
        kind::CONV2D => "Conv2d",
        kind::POOL2D => "Pool2d",
        kind::LSTM => "Lstm",
        kind::GRU => "Gru",
        kind::SLICE => "Slice",
        kind::ATTENTION => "Attention",
        kind::AFT_FULL => "AftFull",
        kind::AFT_LOCAL => "AftLocal",
        kind::AFT_SIMPLE => "AftSimple",
        kind::AFT_CONV => "AftConv",
        kind::FASTFORMER => "Fastformer",
        _ => return None,
    })
}
