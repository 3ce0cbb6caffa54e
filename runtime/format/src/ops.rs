//! The op set: what a graph node computes, its tensor slots and its attributes.
//!
//! Every op has exactly one output tensor. Activation shapes are per sample (the batch axis is
//! implicit and leading); weights have no batch axis and broadcast over it. On disk an op is a
//! record `{kind: u16, n_tensors: u8, n_attrs: u8, tensors: [u32; n_tensors], attrs:
//! [u32; n_attrs]}` (see `docs/FORMAT.md`); absent optional tensors are [`NONE`], f32 attributes
//! are stored as their bit patterns. [`Op::decode`] and [`Op::encode`] convert between the two.

/// Index into the model's tensor table.
pub type TensorId = u32;

/// Tensor slot value meaning "absent" (an optional bias, say).
pub const NONE: u32 = u32::MAX;

/// Why an op record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// The kind id is not one this reader knows.
    #[error("unknown op kind id {0} (this reader knows ids 1-12 and 32-37)")]
    UnknownKind(u16),
    /// The record has the wrong number of tensor slots.
    #[error("op {op}: expected {expected} tensor slots, found {found}")]
    TensorCount {
        /// Op name.
        op: &'static str,
        /// Expected slot count.
        expected: usize,
        /// Found slot count.
        found: usize,
    },
    /// The record has the wrong number of attributes.
    #[error("op {op}: expected {expected} attributes, found {found}")]
    AttrCount {
        /// Op name.
        op: &'static str,
        /// Expected attribute count.
        expected: usize,
        /// Found attribute count.
        found: usize,
    },
    /// An attribute has a value outside its domain.
    #[error("op {op}: attribute `{attr}` has invalid value {value}")]
    BadAttr {
        /// Op name.
        op: &'static str,
        /// Attribute name.
        attr: &'static str,
        /// Raw value.
        value: u32,
    },
    /// A required tensor slot holds [`NONE`].
    #[error("op {op}: required tensor slot `{slot}` is absent")]
    MissingTensor {
        /// Op name.
        op: &'static str,
        /// Slot name.
        slot: &'static str,
    },
}

macro_rules! code_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $n:expr),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name { $($(#[$vm])* $v = $n),+ }
        impl $name {
            /// Decodes the on-disk code.
            pub fn from_u32(v: u32) -> Option<Self> {
                match v { $($n => Some(Self::$v),)+ _ => None }
            }
            /// Every value, in code order.
            pub const ALL: &'static [Self] = &[$(Self::$v),+];
        }
    };
}

code_enum!(
    /// Activation fused into a dense layer.
    Activation {
        /// Identity.
        None = 0,
        /// max(x, 0).
        Relu = 1,
        /// Exact GELU, x·Φ(x) with erf.
        Gelu = 2,
        /// tanh approximation of GELU.
        GeluTanh = 3,
    }
);

code_enum!(
    /// Element-wise unary functions.
    UnaryOp {
        /// max(x, 0).
        Relu = 0,
        /// Exact GELU.
        Gelu = 1,
        /// tanh-approximated GELU.
        GeluTanh = 2,
        /// Logistic sigmoid.
        Sigmoid = 3,
        /// tanh.
        Tanh = 4,
        /// e^x.
        Exp = 5,
        /// Natural log.
        Log = 6,
        /// Square root.
        Sqrt = 7,
        /// -x.
        Neg = 8,
        /// |x|.
        Abs = 9,
        /// erf(x).
        Erf = 10,
        /// 1/x.
        Reciprocal = 11,
        /// x·σ(x).
        Silu = 12,
    }
);

code_enum!(
    /// Element-wise binary functions with numpy broadcasting.
    BinaryOp {
        /// a + b.
        Add = 0,
        /// a - b.
        Sub = 1,
        /// a · b.
        Mul = 2,
        /// a / b.
        Div = 3,
        /// max(a, b).
        Max = 4,
        /// min(a, b).
        Min = 5,
        /// a^b.
        Pow = 6,
    }
);

code_enum!(
    /// Reductions over one axis.
    ReduceOp {
        /// Arithmetic mean.
        Mean = 0,
        /// Sum.
        Sum = 1,
        /// Maximum.
        Max = 2,
        /// Minimum.
        Min = 3,
    }
);

code_enum!(
    /// The four mechanisms of "You Need to Pay Better Attention" (DESIGN.md §1).
    AttentionVariant {
        /// softmax(QKᵀ/√c)V with Q, K, V projected.
        Standard = 0,
        /// V is the input itself (no W^V).
        Optimised = 1,
        /// K and V are the input itself.
        Efficient = 2,
        /// Efficient, with V = W^A X + b^A mixing tokens.
        Super = 3,
    }
);

/// A dense projection: weight `[out, in]` and an optional bias `[out]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proj {
    /// Weight tensor, `[out, in]`.
    pub w: TensorId,
    /// Optional bias tensor, `[out]`.
    pub b: Option<TensorId>,
}

/// `y = act(x Wᵀ + b)` over the last axis of `x` (any rank).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dense {
    /// Input `[.., in]`.
    pub x: TensorId,
    /// Weight and bias.
    pub proj: Proj,
    /// Fused activation.
    pub act: Activation,
    /// Output `[.., out]`.
    pub y: TensorId,
}

/// Layer norm over the last axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm {
    /// Input.
    pub x: TensorId,
    /// Scale γ, `[d]`.
    pub gamma: TensorId,
    /// Optional shift β, `[d]`.
    pub beta: Option<TensorId>,
    /// ε added to the variance.
    pub eps: f32,
    /// Output, same shape.
    pub y: TensorId,
}

/// Element-wise unary op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unary {
    /// Input.
    pub x: TensorId,
    /// Function.
    pub op: UnaryOp,
    /// Output, same shape.
    pub y: TensorId,
}

/// Element-wise binary op with numpy broadcasting of per-sample shapes; either operand may be a
/// weight (broadcast over the batch too).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Binary {
    /// Left operand.
    pub a: TensorId,
    /// Right operand.
    pub b: TensorId,
    /// Function.
    pub op: BinaryOp,
    /// Output, the broadcast shape.
    pub y: TensorId,
}

/// Softmax over the last axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Softmax {
    /// Input.
    pub x: TensorId,
    /// Output, same shape.
    pub y: TensorId,
}

/// Non-overlapping patch embedding: input `[C, H, W]`, patches `p×p` in row-major patch order,
/// weight `[d, C·p·p]` (flattened in `(c, i, j)` order, as a conv kernel `[d, C, p, p]`),
/// output `[(H/p)·(W/p), d]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PatchEmbed {
    /// Image `[C, H, W]`.
    pub x: TensorId,
    /// Projection, weight `[d, C·p·p]`.
    pub proj: Proj,
    /// Patch size p.
    pub patch: u32,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// Token embedding lookup plus optional position embedding: ids `[T]` (i32) → `[T, d]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Embedding {
    /// Token ids `[T]`, i32.
    pub ids: TensorId,
    /// Table `[vocab, d]`.
    pub table: TensorId,
    /// Optional position table `[T_max ≥ T, d]`, row t added to token t.
    pub pos: Option<TensorId>,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// Reduction over one per-sample axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reduce {
    /// Input.
    pub x: TensorId,
    /// Function.
    pub op: ReduceOp,
    /// Per-sample axis reduced.
    pub axis: u32,
    /// Keep the reduced axis with size 1.
    pub keep_dims: bool,
    /// Output.
    pub y: TensorId,
}

/// Reshape/flatten: a view. The output shares the input's arena bytes (same offset).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reshape {
    /// Input.
    pub x: TensorId,
    /// Output, same element count, same arena offset.
    pub y: TensorId,
}

/// Permutation of per-sample axes (materialised: our kernels read contiguous tensors).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transpose {
    /// Input.
    pub x: TensorId,
    /// `perm[i]` is the input axis that becomes output axis i; entries past the rank are unused.
    pub perm: [u8; crate::dtype::MAX_RANK],
    /// Output.
    pub y: TensorId,
}

/// Batched matrix product over the last two axes with numpy broadcasting of leading axes:
/// `a [.., M, K] · b [.., K, N]` (or `b [.., N, K]` with `transpose_b`). `b` may be a weight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatMul {
    /// Left operand.
    pub a: TensorId,
    /// Right operand.
    pub b: TensorId,
    /// Read `b` as `[.., N, K]`.
    pub transpose_b: bool,
    /// Output `[.., M, N]`.
    pub y: TensorId,
}

/// 2-D convolution, NCHW per sample: input `[C, H, W]`, weight `[O, C/groups, kh, kw]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Conv2d {
    /// Input `[C, H, W]`.
    pub x: TensorId,
    /// Weight `[O, C/groups, kh, kw]` and optional bias `[O]`.
    pub proj: Proj,
    /// Stride (h, w).
    pub stride: [u32; 2],
    /// Padding (top, left, bottom, right).
    pub pad: [u32; 4],
    /// Dilation (h, w).
    pub dilation: [u32; 2],
    /// Groups.
    pub groups: u32,
    /// Output `[O, H', W']`.
    pub y: TensorId,
}

/// Fused multi-head attention of the four variants (DESIGN.md §1), input and output `[T, d]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    /// Input `[T, d]`.
    pub x: TensorId,
    /// Which mechanism.
    pub variant: AttentionVariant,
    /// Heads h (c = d/h).
    pub heads: u32,
    /// Lower-triangular mask on the scores (and on W^A for Super).
    pub causal: bool,
    /// Score scale, normally 1/√c.
    pub scale: f32,
    /// W^Q `[d, d]`.
    pub q: Proj,
    /// W^K `[d, d]`: Standard and Optimised only.
    pub k: Option<Proj>,
    /// W^V `[d, d]`: Standard only.
    pub v: Option<Proj>,
    /// W^A `[T, T]`, b^A `[T]`: Super only.
    pub align: Option<Proj>,
    /// W^O `[d, d]`.
    pub o: Proj,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// AFT-full (DESIGN.md §2): w is `[T, T]`, or factorised `u [T, r]`, `v [T, r]` with w = u vᵀ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AftFull {
    /// Input `[T, d]`.
    pub x: TensorId,
    /// Sum over t' ≤ t only.
    pub causal: bool,
    /// Query projection.
    pub q: Proj,
    /// Key projection.
    pub k: Proj,
    /// Value projection.
    pub v: Proj,
    /// Position biases.
    pub bias: AftBias,
    /// Output projection.
    pub o: Proj,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// AFT-full's pairwise position bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AftBias {
    /// Full `[T, T]` matrix.
    Full(TensorId),
    /// w = u vᵀ, u and v `[T, r]`.
    Factorised {
        /// u `[T, r]`.
        u: TensorId,
        /// v `[T, r]`.
        v: TensorId,
    },
}

/// AFT-local (DESIGN.md §2): w `[T, T]` used only where |t − t'| < window, 0 elsewhere; global
/// connectivity kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AftLocal {
    /// Input `[T, d]`.
    pub x: TensorId,
    /// Sum over t' ≤ t only.
    pub causal: bool,
    /// Window s ≥ 1.
    pub window: u32,
    /// Query projection.
    pub q: Proj,
    /// Key projection.
    pub k: Proj,
    /// Value projection.
    pub v: Proj,
    /// w `[T, T]`.
    pub w: TensorId,
    /// Output projection.
    pub o: Proj,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// AFT-simple (DESIGN.md §2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AftSimple {
    /// Input `[T, d]`.
    pub x: TensorId,
    /// Sum over t' ≤ t only.
    pub causal: bool,
    /// Query projection.
    pub q: Proj,
    /// Key projection.
    pub k: Proj,
    /// Value projection.
    pub v: Proj,
    /// Output projection.
    pub o: Proj,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// AFT-conv (DESIGN.md §2) on a `grid_h × grid_w` token grid (T = grid_h·grid_w, row-major).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AftConv {
    /// Input `[T, d]`.
    pub x: TensorId,
    /// Heads h (c = d/h).
    pub heads: u32,
    /// Kernel size s (odd).
    pub kernel: u32,
    /// Token grid (h, w).
    pub grid: [u32; 2],
    /// Query projection `[d, d]`.
    pub q: Proj,
    /// Key projection `[h, d]` (one key channel per head).
    pub k: Proj,
    /// Value projection `[d, d]`.
    pub v: Proj,
    /// Kernel w `[h, s, s]` (the kernel applies exp(w) − 1).
    pub w: TensorId,
    /// Output projection.
    pub o: Proj,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// Fastformer additive attention (DESIGN.md §3): output_t = W^R (G ⊙ v_t) + b^R + q_t.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fastformer {
    /// Input `[T, d]`.
    pub x: TensorId,
    /// Heads h (c = d/h).
    pub heads: u32,
    /// Score scale, normally 1/√c.
    pub scale: f32,
    /// Query projection.
    pub q: Proj,
    /// Key projection.
    pub k: Proj,
    /// Value projection.
    pub v: Proj,
    /// Query scoring vectors `[h, d]`: head i's score is `q_t · wqa[i]` (a per-head
    /// `c`-vector is the block-diagonal case).
    pub wqa: TensorId,
    /// Key scoring vectors `[h, d]`, applied to p_t = g ⊙ k_t.
    pub wka: TensorId,
    /// W^R `[d, d]` and b^R.
    pub r: Proj,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// One graph node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// See [`Dense`].
    Dense(Dense),
    /// See [`LayerNorm`].
    LayerNorm(LayerNorm),
    /// See [`Unary`].
    Unary(Unary),
    /// See [`Binary`].
    Binary(Binary),
    /// See [`Softmax`].
    Softmax(Softmax),
    /// See [`PatchEmbed`].
    PatchEmbed(PatchEmbed),
    /// See [`Embedding`].
    Embedding(Embedding),
    /// See [`Reduce`].
    Reduce(Reduce),
    /// See [`Reshape`].
    Reshape(Reshape),
    /// See [`Transpose`].
    Transpose(Transpose),
    /// See [`MatMul`].
    MatMul(MatMul),
    /// See [`Conv2d`].
    Conv2d(Conv2d),
    /// See [`Attention`].
    Attention(Attention),
    /// See [`AftFull`].
    AftFull(AftFull),
    /// See [`AftLocal`].
    AftLocal(AftLocal),
    /// See [`AftSimple`].
    AftSimple(AftSimple),
    /// See [`AftConv`].
    AftConv(AftConv),
    /// See [`Fastformer`].
    Fastformer(Fastformer),
}

/// Maximum tensor slots of any op record.
pub const MAX_OP_TENSORS: usize = 16;
/// Maximum attributes of any op record.
pub const MAX_OP_ATTRS: usize = 12;

/// Fixed-capacity buffers an op encodes into (no allocation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpRecordBuf {
    /// Kind id.
    pub kind: u16,
    /// Tensor slots used.
    pub n_tensors: u8,
    /// Attributes used.
    pub n_attrs: u8,
    /// Tensor slots.
    pub tensors: [u32; MAX_OP_TENSORS],
    /// Attributes.
    pub attrs: [u32; MAX_OP_ATTRS],
}

impl OpRecordBuf {
    /// The used tensor slots.
    pub fn tensors(&self) -> &[u32] {
        &self.tensors[..self.n_tensors as usize]
    }
    /// The used attributes.
    pub fn attrs(&self) -> &[u32] {
        &self.attrs[..self.n_attrs as usize]
    }
    fn t(&mut self, id: TensorId) {
        self.tensors[self.n_tensors as usize] = id;
        self.n_tensors += 1;
    }
    fn opt(&mut self, id: Option<TensorId>) {
        self.t(id.unwrap_or(NONE));
    }
    fn proj(&mut self, p: Proj) {
        self.t(p.w);
        self.opt(p.b);
    }
    fn oproj(&mut self, p: Option<Proj>) {
        match p {
            Some(p) => self.proj(p),
            None => {
                self.t(NONE);
                self.t(NONE);
            }
        }
    }
    fn a(&mut self, v: u32) {
        self.attrs[self.n_attrs as usize] = v;
        self.n_attrs += 1;
    }
}

/// Reads slots and attributes of one record with typed errors.
struct Reader<'a> {
    op: &'static str,
    tensors: &'a [u32],
    attrs: &'a [u32],
    ti: usize,
    ai: usize,
}

impl<'a> Reader<'a> {
    fn new(op: &'static str, tensors: &'a [u32], attrs: &'a [u32], nt: usize, na: usize) -> Result<Self, OpError> {
        if tensors.len() != nt {
            return Err(OpError::TensorCount { op, expected: nt, found: tensors.len() });
        }
        if attrs.len() != na {
            return Err(OpError::AttrCount { op, expected: na, found: attrs.len() });
        }
        Ok(Self { op, tensors, attrs, ti: 0, ai: 0 })
    }
    fn opt(&mut self) -> Option<TensorId> {
        let v = self.tensors[self.ti];
        self.ti += 1;
        (v != NONE).then_some(v)
    }
    fn t(&mut self, slot: &'static str) -> Result<TensorId, OpError> {
        self.opt().ok_or(OpError::MissingTensor { op: self.op, slot })
    }
    fn proj(&mut self, slot: &'static str) -> Result<Proj, OpError> {
        let w = self.t(slot)?;
        Ok(Proj { w, b: self.opt() })
    }
    fn oproj(&mut self) -> Option<Proj> {
        let w = self.opt();
        let b = self.opt();
        w.map(|w| Proj { w, b })
    }
    fn raw(&mut self) -> u32 {
        let v = self.attrs[self.ai];
        self.ai += 1;
        v
    }
    fn f32(&mut self, attr: &'static str) -> Result<f32, OpError> {
        let v = self.raw();
        let f = f32::from_bits(v);
        if f.is_finite() {
            Ok(f)
        } else {
            Err(OpError::BadAttr { op: self.op, attr, value: v })
        }
    }
    fn bool(&mut self, attr: &'static str) -> Result<bool, OpError> {
        match self.raw() {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(OpError::BadAttr { op: self.op, attr, value }),
        }
    }
    fn pos(&mut self, attr: &'static str) -> Result<u32, OpError> {
        match self.raw() {
            0 => Err(OpError::BadAttr { op: self.op, attr, value: 0 }),
            v => Ok(v),
        }
    }
    fn code<T>(&mut self, attr: &'static str, f: fn(u32) -> Option<T>) -> Result<T, OpError> {
        let v = self.raw();
        f(v).ok_or(OpError::BadAttr { op: self.op, attr, value: v })
    }
}

/// Kind ids on disk.
pub mod kind {
    #![allow(missing_docs)]
    pub const DENSE: u16 = 1;
    pub const LAYER_NORM: u16 = 2;
    pub const UNARY: u16 = 3;
    pub const BINARY: u16 = 4;
    pub const SOFTMAX: u16 = 5;
    pub const PATCH_EMBED: u16 = 6;
    pub const EMBEDDING: u16 = 7;
    pub const REDUCE: u16 = 8;
    pub const RESHAPE: u16 = 9;
    pub const TRANSPOSE: u16 = 10;
    pub const MATMUL: u16 = 11;
    pub const CONV2D: u16 = 12;
    pub const ATTENTION: u16 = 32;
    pub const AFT_FULL: u16 = 33;
    pub const AFT_LOCAL: u16 = 34;
    pub const AFT_SIMPLE: u16 = 35;
    pub const AFT_CONV: u16 = 36;
    pub const FASTFORMER: u16 = 37;
}

impl Op {
    /// The op's name as shown in reports and errors.
    pub fn name(&self) -> &'static str {
        kind_name(self.encode().kind).unwrap_or("?")
    }

    /// True for the fused attention mechanisms (kind ids 32 and up).
    pub fn kind_is_mechanism(&self) -> bool {
        self.encode().kind >= kind::ATTENTION
    }

    /// The single output tensor.
    pub fn output(&self) -> TensorId {
        let r = self.encode();
        r.tensors()[r.tensors().len() - 1]
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

    /// Encodes into a fixed-capacity record (tensor slots end with the output).
    pub fn encode(&self) -> OpRecordBuf {
        let mut r = OpRecordBuf::default();
        match *self {
            Op::Dense(o) => {
                r.kind = kind::DENSE;
                r.t(o.x);
                r.proj(o.proj);
                r.t(o.y);
                r.a(o.act as u32);
            }
            Op::LayerNorm(o) => {
                r.kind = kind::LAYER_NORM;
                r.t(o.x);
                r.t(o.gamma);
                r.opt(o.beta);
                r.t(o.y);
                r.a(o.eps.to_bits());
            }
            Op::Unary(o) => {
                r.kind = kind::UNARY;
                r.t(o.x);
                r.t(o.y);
                r.a(o.op as u32);
            }
            Op::Binary(o) => {
                r.kind = kind::BINARY;
                r.t(o.a);
                r.t(o.b);
                r.t(o.y);
                r.a(o.op as u32);
            }
            Op::Softmax(o) => {
                r.kind = kind::SOFTMAX;
                r.t(o.x);
                r.t(o.y);
            }
            Op::PatchEmbed(o) => {
                r.kind = kind::PATCH_EMBED;
                r.t(o.x);
                r.proj(o.proj);
                r.t(o.y);
                r.a(o.patch);
            }
            Op::Embedding(o) => {
                r.kind = kind::EMBEDDING;
                r.t(o.ids);
                r.t(o.table);
                r.opt(o.pos);
                r.t(o.y);
            }
            Op::Reduce(o) => {
                r.kind = kind::REDUCE;
                r.t(o.x);
                r.t(o.y);
                r.a(o.op as u32);
                r.a(o.axis);
                r.a(o.keep_dims as u32);
            }
            Op::Reshape(o) => {
                r.kind = kind::RESHAPE;
                r.t(o.x);
                r.t(o.y);
            }
            Op::Transpose(o) => {
                r.kind = kind::TRANSPOSE;
                r.t(o.x);
                r.t(o.y);
                for p in o.perm {
                    r.a(u32::from(p));
                }
            }
            Op::MatMul(o) => {
                r.kind = kind::MATMUL;
                r.t(o.a);
                r.t(o.b);
                r.t(o.y);
                r.a(o.transpose_b as u32);
            }
            Op::Conv2d(o) => {
                r.kind = kind::CONV2D;
                r.t(o.x);
                r.proj(o.proj);
                r.t(o.y);
                for v in o.stride.into_iter().chain(o.pad).chain(o.dilation) {
                    r.a(v);
                }
                r.a(o.groups);
            }
            Op::Attention(o) => {
                r.kind = kind::ATTENTION;
                r.t(o.x);
                r.proj(o.q);
                r.oproj(o.k);
                r.oproj(o.v);
                r.oproj(o.align);
                r.proj(o.o);
                r.t(o.y);
                r.a(o.variant as u32);
                r.a(o.heads);
                r.a(o.causal as u32);
                r.a(o.scale.to_bits());
            }
            Op::AftFull(o) => {
                r.kind = kind::AFT_FULL;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                match o.bias {
                    AftBias::Full(w) => {
                        r.t(w);
                        r.t(NONE);
                        r.t(NONE);
                    }
                    AftBias::Factorised { u, v } => {
                        r.t(NONE);
                        r.t(u);
                        r.t(v);
                    }
                }
                r.proj(o.o);
                r.t(o.y);
                r.a(o.causal as u32);
            }
            Op::AftLocal(o) => {
                r.kind = kind::AFT_LOCAL;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.t(o.w);
                r.proj(o.o);
                r.t(o.y);
                r.a(o.causal as u32);
                r.a(o.window);
            }
            Op::AftSimple(o) => {
                r.kind = kind::AFT_SIMPLE;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.proj(o.o);
                r.t(o.y);
                r.a(o.causal as u32);
            }
            Op::AftConv(o) => {
                r.kind = kind::AFT_CONV;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.t(o.w);
                r.proj(o.o);
                r.t(o.y);
                r.a(o.heads);
                r.a(o.kernel);
                r.a(o.grid[0]);
                r.a(o.grid[1]);
            }
            Op::Fastformer(o) => {
                r.kind = kind::FASTFORMER;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.t(o.wqa);
                r.t(o.wka);
                r.proj(o.r);
                r.t(o.y);
                r.a(o.heads);
                r.a(o.scale.to_bits());
            }
        }
        r
    }

    /// Decodes a record, checking slot and attribute counts and attribute domains. Tensor ids
    /// are not range-checked here (the model loader does that against its tensor table).
    pub fn decode(kind_id: u16, tensors: &[u32], attrs: &[u32]) -> Result<Op, OpError> {
        let name = kind_name(kind_id).ok_or(OpError::UnknownKind(kind_id))?;
        let rd = |nt, na| Reader::new(name, tensors, attrs, nt, na);
        Ok(match kind_id {
            kind::DENSE => {
                let mut r = rd(4, 1)?;
                Op::Dense(Dense {
                    x: r.t("x")?,
                    proj: r.proj("w")?,
                    y: r.t("y")?,
                    act: r.code("activation", Activation::from_u32)?,
                })
            }
            kind::LAYER_NORM => {
                let mut r = rd(4, 1)?;
                Op::LayerNorm(LayerNorm {
                    x: r.t("x")?,
                    gamma: r.t("gamma")?,
                    beta: r.opt(),
                    y: r.t("y")?,
                    eps: r.f32("eps")?,
                })
            }
            kind::UNARY => {
                let mut r = rd(2, 1)?;
                Op::Unary(Unary { x: r.t("x")?, y: r.t("y")?, op: r.code("op", UnaryOp::from_u32)? })
            }
            kind::BINARY => {
                let mut r = rd(3, 1)?;
                Op::Binary(Binary { a: r.t("a")?, b: r.t("b")?, y: r.t("y")?, op: r.code("op", BinaryOp::from_u32)? })
            }
            kind::SOFTMAX => {
                let mut r = rd(2, 0)?;
                Op::Softmax(Softmax { x: r.t("x")?, y: r.t("y")? })
            }
            kind::PATCH_EMBED => {
                let mut r = rd(4, 1)?;
                Op::PatchEmbed(PatchEmbed { x: r.t("x")?, proj: r.proj("w")?, y: r.t("y")?, patch: r.pos("patch")? })
            }
            kind::EMBEDDING => {
                let mut r = rd(4, 0)?;
                Op::Embedding(Embedding { ids: r.t("ids")?, table: r.t("table")?, pos: r.opt(), y: r.t("y")? })
            }
            kind::REDUCE => {
                let mut r = rd(2, 3)?;
                Op::Reduce(Reduce {
                    x: r.t("x")?,
                    y: r.t("y")?,
                    op: r.code("op", ReduceOp::from_u32)?,
                    axis: r.raw(),
                    keep_dims: r.bool("keep_dims")?,
                })
            }
            kind::RESHAPE => {
                let mut r = rd(2, 0)?;
                Op::Reshape(Reshape { x: r.t("x")?, y: r.t("y")? })
            }
            kind::TRANSPOSE => {
                let mut r = rd(2, crate::dtype::MAX_RANK)?;
                let (x, y) = (r.t("x")?, r.t("y")?);
                let mut perm = [0u8; crate::dtype::MAX_RANK];
                for p in &mut perm {
                    let v = r.raw();
                    *p = u8::try_from(v)
                        .ok()
                        .filter(|&v| (v as usize) < crate::dtype::MAX_RANK)
                        .ok_or(OpError::BadAttr { op: name, attr: "perm", value: v })?;
                }
                Op::Transpose(Transpose { x, perm, y })
            }
            kind::MATMUL => {
                let mut r = rd(3, 1)?;
                Op::MatMul(MatMul { a: r.t("a")?, b: r.t("b")?, y: r.t("y")?, transpose_b: r.bool("transpose_b")? })
            }
            kind::CONV2D => {
                let mut r = rd(4, 9)?;
                let (x, proj, y) = (r.t("x")?, r.proj("w")?, r.t("y")?);
                Op::Conv2d(Conv2d {
                    x,
                    proj,
                    y,
                    stride: [r.pos("stride")?, r.pos("stride")?],
                    pad: [r.raw(), r.raw(), r.raw(), r.raw()],
                    dilation: [r.pos("dilation")?, r.pos("dilation")?],
                    groups: r.pos("groups")?,
                })
            }
            kind::ATTENTION => {
                let mut r = rd(12, 4)?;
                let x = r.t("x")?;
                let q = r.proj("wq")?;
                let k = r.oproj();
                let v = r.oproj();
                let align = r.oproj();
                let o = r.proj("wo")?;
                let y = r.t("y")?;
                let variant = r.code("variant", AttentionVariant::from_u32)?;
                let heads = r.pos("heads")?;
                let causal = r.bool("causal")?;
                let scale = r.f32("scale")?;
                let need = |present: bool, want: bool, slot| match (present, want) {
                    (true, false) | (false, true) => {
                        Err(OpError::BadAttr { op: name, attr: slot, value: variant as u32 })
                    }
                    _ => Ok(()),
                };
                use AttentionVariant::*;
                need(k.is_some(), matches!(variant, Standard | Optimised), "variant (wk)")?;
                need(v.is_some(), matches!(variant, Standard), "variant (wv)")?;
                need(align.is_some(), matches!(variant, Super), "variant (wa)")?;
                Op::Attention(Attention { x, variant, heads, causal, scale, q, k, v, align, o, y })
            }
            kind::AFT_FULL => {
                let mut r = rd(13, 1)?;
                let (x, q, k, v) = (r.t("x")?, r.proj("wq")?, r.proj("wk")?, r.proj("wv")?);
                let bias = match (r.opt(), r.opt(), r.opt()) {
                    (Some(w), None, None) => AftBias::Full(w),
                    (None, Some(u), Some(v)) => AftBias::Factorised { u, v },
                    _ => return Err(OpError::MissingTensor { op: name, slot: "w (or u and v)" }),
                };
                Op::AftFull(AftFull { x, q, k, v, bias, o: r.proj("wo")?, y: r.t("y")?, causal: r.bool("causal")? })
            }
            kind::AFT_LOCAL => {
                let mut r = rd(11, 2)?;
                Op::AftLocal(AftLocal {
                    x: r.t("x")?,
                    q: r.proj("wq")?,
                    k: r.proj("wk")?,
                    v: r.proj("wv")?,
                    w: r.t("w")?,
                    o: r.proj("wo")?,
                    y: r.t("y")?,
                    causal: r.bool("causal")?,
                    window: r.pos("window")?,
                })
            }
            kind::AFT_SIMPLE => {
                let mut r = rd(10, 1)?;
                Op::AftSimple(AftSimple {
                    x: r.t("x")?,
                    q: r.proj("wq")?,
                    k: r.proj("wk")?,
                    v: r.proj("wv")?,
                    o: r.proj("wo")?,
                    y: r.t("y")?,
                    causal: r.bool("causal")?,
                })
            }
            kind::AFT_CONV => {
                let mut r = rd(11, 4)?;
                let (x, q, k, v) = (r.t("x")?, r.proj("wq")?, r.proj("wk")?, r.proj("wv")?);
                let (w, o, y) = (r.t("w")?, r.proj("wo")?, r.t("y")?);
                let heads = r.pos("heads")?;
                let kernel = r.pos("kernel")?;
                if kernel % 2 == 0 {
                    return Err(OpError::BadAttr { op: name, attr: "kernel (must be odd)", value: kernel });
                }
                let grid = [r.pos("grid_h")?, r.pos("grid_w")?];
                Op::AftConv(AftConv { x, heads, kernel, grid, q, k, v, w, o, y })
            }
            kind::FASTFORMER => {
                let mut r = rd(12, 2)?;
                Op::Fastformer(Fastformer {
                    x: r.t("x")?,
                    q: r.proj("wq")?,
                    k: r.proj("wk")?,
                    v: r.proj("wv")?,
                    wqa: r.t("wqa")?,
                    wka: r.t("wka")?,
                    r: r.proj("wr")?,
                    y: r.t("y")?,
                    heads: r.pos("heads")?,
                    scale: r.f32("scale")?,
                })
            }
            _ => return Err(OpError::UnknownKind(kind_id)),
        })
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
        kind::ATTENTION => "Attention",
        kind::AFT_FULL => "AftFull",
        kind::AFT_LOCAL => "AftLocal",
        kind::AFT_SIMPLE => "AftSimple",
        kind::AFT_CONV => "AftConv",
        kind::FASTFORMER => "Fastformer",
        _ => return None,
    })
}
