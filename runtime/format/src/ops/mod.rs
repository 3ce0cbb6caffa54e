//! The op set: what a graph node computes, its tensor slots and its attributes.
//!
//! Every op has exactly one output tensor. Activation shapes are per sample (the batch axis is
//! implicit and leading); weights have no batch axis and broadcast over it. On disk an op is a
//! record `{kind: u16, n_tensors: u8, n_attrs: u8, tensors: [u32; n_tensors], attrs:
//! [u32; n_attrs]}` (see `docs/FORMAT.md`); absent optional tensors are [`NONE`], f32 attributes
//! are stored as their bit patterns. [`Op::decode`] and [`Op::encode`] convert between the two.
//! Each op is one entry of the op table (`table.rs`): its kind id and its slots in record order,
//! from which the [`Op`] enum, the [`kind`] ids and the encoding are generated.

/// Index into the model's tensor table.
pub type TensorId = u32;

/// Tensor slot value meaning "absent" (an optional bias, say).
pub const NONE: u32 = u32::MAX;

/// Why an op record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// The kind id is not one this reader knows.
    #[error("unknown op kind id {0} (this reader knows ids {known})", known = KnownKinds)]
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
    ($(#[$m:meta])* $name:ident {
        $(#[$fm:meta])* $fv:ident = $fn:expr
        $(, $(#[$vm:meta])* $v:ident = $n:expr)* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name { $(#[$fm])* $fv = $fn, $($(#[$vm])* $v = $n),* }
        impl $name {
            /// Decodes the on-disk code.
            pub fn from_u32(v: u32) -> Option<Self> {
                match v { $fn => Some(Self::$fv), $($n => Some(Self::$v),)* _ => None }
            }
            /// Every value, in code order.
            pub const ALL: &'static [Self] = &[Self::$fv, $(Self::$v),*];
        }
        /// The first code (a blank op's placeholder before its record is read).
        impl Default for $name {
            fn default() -> Self {
                Self::$fv
            }
        }
        impl record::Code for $name {
            fn code(self) -> u32 {
                self as u32
            }
            fn from_code(v: u32) -> Option<Self> {
                Self::from_u32(v)
            }
        }
    };
}

code_enum!(
    /// Activation fused into a dense layer or a convolution.
    Activation {
        /// Identity.
        None = 0,
        /// max(x, 0).
        Relu = 1,
        /// Exact GELU, x·Φ(x) with erf.
        Gelu = 2,
        /// tanh approximation of GELU.
        GeluTanh = 3,
        /// SiLU (swish), x·σ(x).
        Silu = 4,
        /// Hard swish, x·clamp(x/6 + 1/2, 0, 1).
        HardSwish = 5,
        /// Hard sigmoid, clamp(x/6 + 1/2, 0, 1) = relu6(x + 3)/6 (ONNX HardSigmoid with
        /// α = 1/6, β = 1/2; PyTorch's `hardsigmoid`; MobileNetV3's squeeze-excitation gate).
        HardSigmoid = 6,
    }
);

code_enum!(
    /// Which axis a [`LayerNorm`] normalises over (its optional second attribute).
    NormAxis {
        /// The last axis: rows of `d` contiguous features (every record written before the
        /// attribute existed; the attribute is written only when not this).
        Last = 0,
        /// The first axis of a channels-first map: per sample `x [C, S…]`, each of the
        /// `S = Π S…` positions is normalised over its `C` values (stride `S`), as ConvNeXt's
        /// channels-first LayerNorm, without transposes.
        Channels = 1,
    }
);

code_enum!(
    /// What a 2-D pooling window computes.
    PoolKind {
        /// Maximum over the window's input elements.
        Max = 0,
        /// Mean over the window (see [`Pool2d::count_include_pad`] for the divisor).
        Avg = 1,
    }
);

code_enum!(
    /// The arithmetic of a mechanism's internal products (scores `Q·Kᵀ` and `P·V`): opt-in
    /// int8 at conversion (`kestrel convert --calibrate … --int8-attention`).
    Internals {
        /// f32 products (every file before this attribute).
        F32 = 0,
        /// int8 × int8 → i32 products on the CPU: the queries per block of rows with one
        /// scale (`max|Q| / 127`), the keys per key and the values per channel (`max / 127`
        /// each, taken at run time), the softmax weights of each query row scaled to a maximum
        /// of 127 (the row's scale is taken back after `P·V`), and, where its weights are
        /// integer, the output projection's input (the heads' outputs, one scale
        /// `max|O| / 127`); the softmax itself, the residual stream and the norms stay f32.
        /// Heads too narrow or too short for int8 to pay keep f32 scores and weighted values. The GPU backend computes these
        /// products in its own precision (f32 or f16) whatever this says.
        Int8 = 1,
    }
);

code_enum!(
    /// Direction of a recurrent op ([`Lstm`], [`Gru`]): ONNX's `direction` attribute.
    RnnDirection {
        /// t = 0, 1, …, T − 1 (one direction).
        Forward = 0,
        /// t = T − 1, …, 0 (one direction).
        Reverse = 1,
        /// Both: direction 0 forward, direction 1 reverse.
        Bidirectional = 2,
    }
);

code_enum!(
    /// Which output of ONNX's LSTM/GRU a recurrent node produces (every op has one output; a
    /// model that reads several is lowered to one node per output).
    RnnOutput {
        /// Every hidden state, `Y [T, dirs, H]` (`Y[t, d]` is direction d's state after step t).
        Y = 0,
        /// The last hidden state of each direction, `Y_h [dirs, H]` (the reverse direction's
        /// last state is its state after step t = 0).
        Hidden = 1,
        /// The last cell state of each direction, `Y_c [dirs, H]` (LSTM only).
        Cell = 2,
    }
);

code_enum!(
    /// Where a [`Gru`]'s reset gate acts in the candidate (ONNX's `linear_before_reset`; its
    /// optional fourth attribute).
    GruReset {
        /// On the recurrent product: `n = tanh(x_t W_hᵀ + Wb_h + r ⊙ (h R_hᵀ + Rb_h))` (ONNX
        /// `linear_before_reset = 1`, PyTorch's GRU; every record written before the attribute
        /// existed, and the attribute is written only when not this).
        Product = 0,
        /// On the state, before the product: `n = tanh(x_t W_hᵀ + Wb_h + (r ⊙ h) R_hᵀ + Rb_h)`
        /// (ONNX `linear_before_reset = 0`, ONNX's default; Keras/TensorFlow exports).
        State = 1,
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

impl AttentionVariant {
    /// Which projections the variant's record carries, `(W^K, W^V, W^A)`: the one statement of
    /// each variant's structure, which the kernels' weight checks, the builders and the
    /// converter's pattern matching all read.
    pub const fn projections(self) -> (bool, bool, bool) {
        match self {
            AttentionVariant::Standard => (true, true, false),
            AttentionVariant::Optimised => (true, false, false),
            AttentionVariant::Efficient => (false, false, false),
            AttentionVariant::Super => (false, false, true),
        }
    }

    /// The variant whose record carries these projections (see [`projections`](Self::projections)).
    pub fn from_projections(k: bool, v: bool, align: bool) -> Option<AttentionVariant> {
        AttentionVariant::ALL.iter().copied().find(|a| a.projections() == (k, v, align))
    }

    /// Whether K is projected (else K = X).
    pub const fn has_k(self) -> bool {
        self.projections().0
    }

    /// Whether V is projected (else V = X, or W^A's token mixing).
    pub const fn has_v(self) -> bool {
        self.projections().1
    }

    /// Whether V mixes tokens with W^A `[T, T]` (Super attention).
    pub const fn has_align(self) -> bool {
        self.projections().2
    }
}

/// A dense projection: weight `[out, in]` and an optional bias `[out]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Proj {
    /// Weight tensor, `[out, in]`.
    pub w: TensorId,
    /// Optional bias tensor, `[out]`.
    pub b: Option<TensorId>,
}

/// `y = act(x Wᵀ + b)` over the last axis of `x` (any rank), then clamped where `clamp` is set.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Dense {
    /// Input `[.., in]`.
    pub x: TensorId,
    /// Weight and bias.
    pub proj: Proj,
    /// Fused activation.
    pub act: Activation,
    /// Bounds applied after the activation, `y = min(max(act(·), lo), hi)`: an f32 weight
    /// `[lo, hi]` (a ReLU6's or Clip's bounds folded in); the record's optional slot before `y`,
    /// present only when used (records without it read as before).
    pub clamp: Option<TensorId>,
    /// Output `[.., out]`.
    pub y: TensorId,
}

/// Layer norm, `y = (x − mean) / √(var + ε) · γ + β` (biased variance), over the last axis or,
/// with [`NormAxis::Channels`], over the first axis of a channels-first `[C, S…]` map.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LayerNorm {
    /// Input.
    pub x: TensorId,
    /// Scale γ, `[d]` (`d` = the normalised axis' size).
    pub gamma: TensorId,
    /// Optional shift β, `[d]`.
    pub beta: Option<TensorId>,
    /// ε added to the variance.
    pub eps: f32,
    /// The normalised axis (an optional second attribute, written only when not
    /// [`NormAxis::Last`]; files written before it have none).
    pub axis: NormAxis,
    /// Output, same shape.
    pub y: TensorId,
}

impl LayerNorm {
    /// Whether the values of γ and β make the norm plain, `y = (x − mean) / √(var + ε)`: γ all
    /// ones and β absent or all zeros (what the converter leaves after folding a norm's affine
    /// part into the projections reading it).
    pub fn is_plain(gamma: &[f32], beta: Option<&[f32]>) -> bool {
        gamma.iter().all(|&g| g == 1.0) && beta.is_none_or(|b| b.iter().all(|&v| v == 0.0))
    }
}

/// Element-wise unary op.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Softmax {
    /// Input.
    pub x: TensorId,
    /// Output, same shape.
    pub y: TensorId,
}

/// Non-overlapping patch embedding: input `[C, H, W]`, patches `p×p` in row-major patch order,
/// weight `[d, C·p·p]` (flattened in `(c, i, j)` order, as a conv kernel `[d, C, p, p]`),
/// output `[(H/p)·(W/p), d]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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

/// Batched matrix product over the last two axes with numpy broadcasting of leading axes:
/// `a [.., M, K] · b [.., K, N]` (or `b [.., N, K]` with `transpose_b`). `b` may be a weight.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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

/// Scaled dot-product attention on activations (no projections): per sample, queries `q [Hq, Tq,
/// D]`, keys `k [Hk, Tk, D]` (or `[Hk, D, Tk]` with `k_transposed`, as a graph that transposed
/// them for its product holds them), values `v [Hk, Tk, Dv]`, output `y [Hq, Tq, Dv]`; rank 2
/// (`[Tq, D]`, …: one head) is accepted for all four alike. `Hq` is a multiple of `Hk`
/// (grouped-query and multi-query attention): query head `h` reads key/value head `h / (Hq /
/// Hk)`. `y[h, i] = Σ_j w_j v[h', j]` with `w = softmax_j(scale · q[h, i] · k[h', j] + bias[h, i,
/// j])` over the keys `j` query `i` sees: every key, or with `causal` the keys `j ≤ i`
/// (top-left aligned, as PyTorch's `is_causal`). `bias` (optional) is an additive score bias
/// broadcastable (numpy, right-aligned) to `[Hq, Tq, Tk]` (leading axes past three of size 1):
/// an f32 activation (one per sample: masks, relative position biases) or a weight stored as f32
/// (shared by every sample). A row whose every visible score is −∞ gets zero weights, so a zero
/// output row (as [`Attention`] and PyTorch's fully masked rows read as "attend to nothing"); a
/// finite bias such as f32::MIN on every key leaves equal scores, so uniform weights. With a
/// `softcap` `c > 0` the scaled scores are soft-capped before the bias is added (ONNX Attention's
/// `softcap`, Gemma 2's `attn_logit_softcapping`): `w = softmax_j(c · tanh(scale · q[h, i] ·
/// k[h', j] / c) + bias[h, i, j])`. With a `sink` (attention sinks: GPT-OSS's, FLiNT's,
/// GraniteMoeHybrid's learned logit per head) the softmax's denominator gains a term with no
/// value row: `w_j = exp(z_j − m) / (Σ_j' exp(z_j' − m) + exp(sink[h] − m))` over the scores `z`
/// above, `m` the maximum of the scores and the sink; the weights then sum to less than 1. The
/// sink is a weight stored as f32 of `Hq` elements (one per query head) or one (shared), any
/// shape, in the softmax's units (after the scale, the cap and the bias); a sink of −∞ is none.
/// With talking heads (CaiT's, EfficientFormerV2's) the scores are mixed across the query heads
/// before the softmax (`mix_pre`) and the weights after it (`mix_post`), each by a learned
/// `[Hq, Hq]` matrix and `[Hq]` bias: `z'[g, i, j] = Σ_h Wpre[g, h] · z[h, i, j] + cpre[g]` over
/// the scaled, capped and biased scores (the causal mask applied after it), the softmax (with
/// the sink) of `z'`, then `w'[g, i, j] = Σ_h Wpost[g, h] · w[h, i, j] + cpost[g]` over every
/// key (masked keys' weights 0 before the mix), and `y[g, i] = Σ_j w'[g, i, j] · v[g / group, j]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sdpa {
    /// Queries `[Hq, Tq, D]`.
    pub q: TensorId,
    /// Keys `[Hk, Tk, D]` (`[Hk, D, Tk]` with `k_transposed`).
    pub k: TensorId,
    /// Values `[Hk, Tk, Dv]`.
    pub v: TensorId,
    /// Additive score bias broadcastable to `[Hq, Tq, Tk]`.
    pub bias: Option<TensorId>,
    /// Multiplies `q · k` before the bias is added.
    pub scale: f32,
    /// Query `i` sees keys `0..=i` only.
    pub causal: bool,
    /// `k` is stored `[Hk, D, Tk]`.
    pub k_transposed: bool,
    /// Soft cap `c` of the scaled scores (`c · tanh(s / c)`), finite and positive; 0 = none (an
    /// optional fourth attribute, written only when set: records without it read as before).
    pub softcap: f32,
    /// Optional per-head sink logits (`Hq` or one f32 weight values): an optional sixth slot,
    /// present only when set (records without it read as before).
    pub sink: Option<TensorId>,
    /// Optional head mixing of the scores before the softmax (talking heads): an f32 weight of
    /// `Hq · (Hq + 1)` values, row `g` the weights `W[g, 0..Hq]` then the bias `c[g]`, so
    /// `z'[g] = Σ_h W[g, h] · z[h] + c[g]`; an optional seventh slot (`NONE` there when only
    /// `mix_post` is set; records without it read as before).
    pub mix_pre: Option<TensorId>,
    /// Optional head mixing of the weights after the softmax, laid out as `mix_pre`: an optional
    /// eighth slot.
    pub mix_post: Option<TensorId>,
    /// Output `[Hq, Tq, Dv]`.
    pub y: TensorId,
}

/// 2-D convolution, NCHW per sample: input `[C, H, W]`, weight `[O, C/groups, kh, kw]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    /// Activation applied after the bias (an optional tenth attribute, written only when fused;
    /// files written before it have none).
    pub act: Activation,
    /// Bounds applied after the activation, `y = min(max(act(·), lo), hi)`: an f32 weight
    /// `[lo, hi]` (a ReLU6's or Clip's bounds folded in); the record's optional slot before `y`,
    /// present only when used (records without it read as before).
    pub clamp: Option<TensorId>,
    /// A residual added before the activation, `y = min(max(act(conv(x) + b + r), lo), hi)`: an
    /// f32 activation of the output's shape `[O, H', W']` (a ResNet block's skip connection,
    /// its `Add` folded in); an optional slot after `clamp` (`NONE` there when only the
    /// residual is set), present only when used (records without it read as before).
    pub residual: Option<TensorId>,
    /// Output `[O, H', W']`.
    pub y: TensorId,
}

/// 2-D pooling, NCHW per sample: input `[C, H, W]`, output `[C, H', W']` with
/// `H' = ⌊(H + pad_top + pad_bottom − dilation_h·(kh − 1) − 1) / stride_h⌋ + 1` (≥ 1; `W'` alike).
/// Output `(c, i, j)` pools the window of taps `(i·stride_h − pad_top + u·dilation_h,
/// j·stride_w − pad_left + v·dilation_w)`, `u < kh`, `v < kw`; taps in the padding are skipped
/// (no padding value enters a max or a sum). Every window must hold at least one input element.
/// ONNX's `ceil_mode` has no attribute: a converter resolves it into extra bottom/right padding.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pool2d {
    /// Input `[C, H, W]`.
    pub x: TensorId,
    /// Max or average.
    pub kind: PoolKind,
    /// Window (kh, kw), each ≥ 1.
    pub kernel: [u32; 2],
    /// Stride (h, w), each ≥ 1.
    pub stride: [u32; 2],
    /// Padding (top, left, bottom, right).
    pub pad: [u32; 4],
    /// Dilation (h, w), each ≥ 1.
    pub dilation: [u32; 2],
    /// Average only (false for Max): divide by `kh·kw` (every tap of the padded window counts)
    /// rather than by the number of taps inside the input.
    pub count_include_pad: bool,
    /// Output `[C, H', W']`.
    pub y: TensorId,
}

/// ONNX LSTM (default activations: σ for the gates, tanh for the cell and the output; no clip
/// or coupled input-forget gate), per sample: input `x [T, I]`, weights in ONNX's
/// gate order i, o, f, c with ONNX's leading direction axis merged into the rows (plain `[out, in]`
/// matrices, so quantisation scales are per gate row and a direction is a row range):
/// `w [dirs·4H, I]`, `r [dirs·4H, H]`, `b [dirs, 8H]` (`Wb` then `Rb`); optional initial states
/// `h0`, `c0` `[dirs, H]` (absent: zeros), shared by every sample; optional peephole weights
/// `p [dirs, 3H]` (ONNX's `P`: `P_i`, `P_o`, `P_f`; absent: zeros). With `g = x_t Wᵀ + h Rᵀ + Wb +
/// Rb` and `c` the previous cell state: `i = σ(g_i + P_i ⊙ c)`, `f = σ(g_f + P_f ⊙ c)`,
/// `c' = f ⊙ c + i ⊙ tanh(g_c)`, `o = σ(g_o + P_o ⊙ c')`, `h = o ⊙ tanh(c')`. Output per
/// [`RnnOutput`]: `[T, dirs, H]` or `[dirs, H]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lstm {
    /// Input `[T, I]`.
    pub x: TensorId,
    /// Input weights `[dirs·4H, I]` (gates i, o, f, c; direction 0's rows first).
    pub w: TensorId,
    /// Recurrent weights `[dirs·4H, H]`.
    pub r: TensorId,
    /// Biases `[dirs, 8H]`: `Wb` (4H) then `Rb` (4H).
    pub b: TensorId,
    /// Optional initial hidden state `[dirs, H]`.
    pub h0: Option<TensorId>,
    /// Optional initial cell state `[dirs, H]`.
    pub c0: Option<TensorId>,
    /// Optional peephole weights `[dirs, 3H]` (`P_i`, `P_o`, `P_f`; the record's 8th slot, in the
    /// record only when present).
    pub p: Option<TensorId>,
    /// Hidden size H (≥ 1).
    pub hidden: u32,
    /// Direction(s): dirs = 2 for bidirectional, else 1.
    pub direction: RnnDirection,
    /// Which output this node produces.
    pub output: RnnOutput,
    /// Output `[T, dirs, H]` (Y) or `[dirs, H]` (Y_h, Y_c).
    pub y: TensorId,
}

/// ONNX GRU (default activations σ and tanh), per
/// sample: input `x [T, I]`, `w [dirs·3H, I]`, `r [dirs·3H, H]` in gate order z, r, h (rows as for
/// [`Lstm`]),
/// `b [dirs, 6H]` (`Wb` then `Rb`), optional initial state `h0 [dirs, H]` (absent: zeros).
/// `z = σ(x_t W_zᵀ + h R_zᵀ + Wb_z + Rb_z)`, `r` alike, the candidate `n` per [`GruReset`]
/// (`tanh(x_t W_hᵀ + Wb_h + r ⊙ (h R_hᵀ + Rb_h))` for `linear_before_reset = 1`, `tanh(x_t W_hᵀ +
/// Wb_h + (r ⊙ h) R_hᵀ + Rb_h)` for 0), `h = (1 − z) ⊙ n + z ⊙ h`. Output per [`RnnOutput`] (not
/// `Cell`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gru {
    /// Input `[T, I]`.
    pub x: TensorId,
    /// Input weights `[dirs·3H, I]` (gates z, r, h; direction 0's rows first).
    pub w: TensorId,
    /// Recurrent weights `[dirs·3H, H]`.
    pub r: TensorId,
    /// Biases `[dirs, 6H]`: `Wb` (3H) then `Rb` (3H).
    pub b: TensorId,
    /// Optional initial hidden state `[dirs, H]`.
    pub h0: Option<TensorId>,
    /// Hidden size H (≥ 1).
    pub hidden: u32,
    /// Direction(s): dirs = 2 for bidirectional, else 1.
    pub direction: RnnDirection,
    /// Which output this node produces (`Y` or `Hidden`).
    pub output: RnnOutput,
    /// Where the reset gate acts (the record's optional 4th attribute, written only when
    /// [`GruReset::State`]).
    pub reset: GruReset,
    /// Output `[T, dirs, H]` (Y) or `[dirs, H]` (Y_h).
    pub y: TensorId,
}

impl RnnDirection {
    /// Number of directions: 2 for bidirectional, else 1.
    pub fn dirs(self) -> usize {
        if self == RnnDirection::Bidirectional {
            2
        } else {
            1
        }
    }

    /// Whether direction `d` (`< dirs()`) walks the sequence backwards.
    pub fn reversed(self, d: usize) -> bool {
        self == RnnDirection::Reverse || (self == RnnDirection::Bidirectional && d == 1)
    }
}

/// Fused multi-head attention of the four variants (DESIGN.md §1), input and output `[T, d]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    /// Optional additive mask on the scores: an f32 activation (per sample) or a weight stored
    /// as f32 (a constant shared by every sample), `[T]` (a key-padding bias, `S[i, j] =
    /// q_i·k_j·scale + mask[j]` for every query i and head), `[T, T]` (per query and key, `+
    /// mask[i, j]` in every head: what transformers' mask utilities give, `[B, 1, T, T]` with
    /// the head axis broadcast) or `[H, T, T]` (per head, `+ mask[h, i, j]` in head h: Swin's
    /// relative-position bias, T5's bucketed bias, EfficientFormer's and LeViT's learned
    /// biases); over a `[G, T, d]` input also `[G, 1, T, T]` or `[G, H, T, T]`, sequence g reading
    /// block g (Swin's shifted-window mask, one per window). Added before the softmax, on the
    /// keys the causal mask leaves visible when both are present. Typically 0 for kept keys
    /// and a large negative (f32::MIN, HF's finfo.min) for padding. A row whose every visible
    /// score is −∞ gets zero weights (its head output is 0) rather than NaN; a finite bias such
    /// as f32::MIN on every key leaves the scores equal, so uniform weights, as PyTorch and
    /// onnxruntime compute. On disk: a 13th tensor slot before `y`, written only when present,
    /// so records without a mask are unchanged.
    pub mask: Option<TensorId>,
    /// Output `[T, d]`.
    pub y: TensorId,
    /// Arithmetic of the scores and the weighted sum of values. On disk a trailing attribute
    /// written only when not f32, so f32 records are unchanged.
    pub internals: Internals,
}

/// AFT-full (DESIGN.md §2): w is `[T, T]`, or factorised `u [T, r]`, `v [T, r]` with w = u vᵀ.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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

/// A placeholder (a blank op's, before its record is read).
impl Default for AftBias {
    fn default() -> Self {
        AftBias::Full(0)
    }
}

/// AFT-local (DESIGN.md §2): w used only where |t − t'| < window, 0 elsewhere; global
/// connectivity kept. w is stored as its band `[T, 2s − 1]` when that is narrower than T
/// ([`AftLocal::w_cols`]: row i, column k holds `w[i, i − (s − 1) + k]`, 0 where that key is
/// outside 0..T), else as the full `[T, T]` (files from before the band always are).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    /// w: the band `[T, 2s − 1]`, or `[T, T]` (see [`AftLocal`]).
    pub w: TensorId,
    /// Output projection.
    pub o: Proj,
    /// Output `[T, d]`.
    pub y: TensorId,
}

/// AFT-simple (DESIGN.md §2).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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

mod band;
mod elementwise;
pub use elementwise::{BinaryKernel, BinaryOp, UnaryKernel, UnaryOp};
mod reduce;
pub use reduce::{Fold, FoldVisitor, ReduceOp};
mod concat;
mod detect;
mod linear_attn;
pub use concat::{Concat, MAX_CONCAT_INPUTS};
pub use linear_attn::{LinearAttn, LinearOutput, LinearRule};
mod layout;
pub use detect::Nms;
pub use layout::{Gather, Reshape, Slice, Transpose};
mod ident;
pub use ident::{LayerOp, MechanismOp, OpClass};
mod table;
pub use table::{kind, kind_name, Op};

mod record;
pub use record::{OpRecordBuf, MAX_OP_ATTRS, MAX_OP_TENSORS};
mod known;
use known::KnownKinds;
mod chain;
pub use chain::{Chain, ChainStep, ChainSteps, MAX_CHAIN_STEPS};
