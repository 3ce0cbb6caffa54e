//! The ONNX ops the converter takes, what each becomes in Kestrel and its limits — the source
//! of `docs/onnx-ops.md` (a test keeps the two equal) — and the remedies printed with blockers.

use std::sync::LazyLock;

/// One ONNX op the converter handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnnxOp {
    /// ONNX op type.
    pub op: &'static str,
    /// What it becomes in a `.kes` file.
    pub kestrel: &'static str,
    /// Limits (empty when none beyond the ONNX spec).
    pub limits: &'static str,
}

/// Every ONNX op the converter lowers, sorted by name, one a line: the ONNX op type, what it
/// becomes in Kestrel, its limits (none when the line stops after the second field). Any op whose
/// inputs are all constants is also accepted: it is evaluated at conversion time and its result
/// stored.
const TABLE: &str = "
Abs | Unary
Acos | Unary
Acosh | Unary
Add | Binary (or a Dense/LayerNorm bias) | numpy broadcasting
AffineGrid | parsed by Kestrel (`src/expand/`): a constant grid of homogeneous base points times theta, Binary Mul and Reduce Sum | constant size; 2-D and 3-D, align_corners honoured
And | Binary Mul on 0/1 values | boolean operands
ArgMax | Reduce ArgMax / ArgMaxLast (the index as an f32 value) | select_last_index honoured
ArgMin | Reduce ArgMin / ArgMinLast (the index as an f32 value) | select_last_index honoured
Asin | Unary
Asinh | Unary
Atan | Unary
Atanh | Unary
Attention | parsed by Kestrel (`src/attention/`, opsets 23–25): without a mask or the attributes below, tract's `Sdpa` as its importer wires it; else the onnx reference op by op: the products per key-head group, the scale, the soft cap (`softcap`: `c·tanh(s/c)` for c > 0, none otherwise, as the reference and onnxruntime), one additive mask (a float or boolean `attn_mask`, padded with −∞ to the keys; causal, offset by a past key/value cache or `nonpad_kv_seqlen`; sliding windows `left_window_size`/`right_window_size`; the key padding of `nonpad_kv_seqlen`), the softmax with a row that attends no key 0, present key/value, `qk_matmul_output` in modes 0–3; fused back into `Sdpa` where a mechanism is recognised (not with `qk_matmul_output`) | softmax computed in f32: `softmax_precision` other than 1 (f32) refused; bf16 inputs refused
AveragePool | Pool2d Avg (3-D: one over (H, W), one over D) | 1-D, 2-D and 3-D; ceil_mode and count_include_pad honoured
BatchNormalization | folded into constants (inference mode)
BitShift | a·2^b wrapped to the type's width (two's complement for signed types) / floor(a / 2^b); a shift outside 0..w gives 0 (−1 for a negative value shifted right). 32- and 64-bit types: on the value's byte limbs (exact over the whole range; inputs and outputs fed and read as limbs, `kestrel_rt::format::limbs`), the 64 bits through a barrel shifter of Slices | 8- and 16-bit types as f32 values (exact); a limb result read by another op is exact within ±2^24, NaN beyond
BitwiseAnd | the bits as a trailing axis (floor, fmod 2), combined bit by bit and summed back; 32- and 64-bit types on their byte limbs (exact over the whole range, as BitShift), 8- and 16-bit types as f32 values with the sign as one more bit | as BitShift
BitwiseNot | 255 − l on each byte limb of the type (32 and 64 bits); −1 − x (signed), 2^w − 1 − x (unsigned) for 8 and 16 bits | as BitShift
BitwiseOr | as BitwiseAnd
BitwiseXor | as BitwiseAnd
Cast | nothing (f32→f32, ids→ids; to f16 or f64 computed in f32, with a notice); f32 values to an integer type: truncated, x − fmod(x, 1); to bool: x ≠ 0; ids to a float: read as values (Embedding into 0..V) / ids to bool: Embedding into [0, 1] | ids→bool only for 0/1 ids (another is a run-time error)
CausalConvWithState | parsed by Kestrel (`src/expand/`): the past state (or zeros) concatenated before the input, a grouped Conv (depthwise), SiLU as Sigmoid and Mul, present_state a Slice | weight constant or computed at run time
Ceil | Unary
Celu | parsed by Kestrel (`src/expand/activations.rs`; tract's expansion drops the α of the negative branch): max(0, x) + α·(exp(min(0, x)/α) − 1) as Unary and Binary ops | α ≠ 0
CenterCropPad | parsed by Kestrel (`src/expand/`): a Slice (crop, the start rounded down) and a zero Pad (an odd extra on the end) per listed axis | constant shape
Clip | Binary Max/Min | constant bounds
Col2Im | parsed by Kestrel (`src/expand/`): the columns reshaped to the blocks and a transposed convolution with one group per channel and a one-hot kernel (then as ConvTranspose) | constant image_shape and block_shape; every stride, dilation and padding
Concat | a Slice per piece (a copy into its place; fused from a 0/1 placing Dense)
Constant | weights where read
ConstantOfShape | folded | constant shape
Conv | Conv2d (fused attention where a mechanism is recognised; 3-D: a 0/1 Dense picking each output depth's taps, then one Conv2d over the output depths as images); a kernel computed at run time: im2col (one 0/1 Dense over the flattened spatial axis) and a MatMul | 1-D, 2-D and 3-D, kernel and bias constant or computed at run time (im2col's selection within the composed-constant bound); a fixed first axis N > 1 runs as N× the groups (3-D: the weight is stored once per output depth and image)
ConvInteger | as QLinearConv with unit scales (an exact integer sum in f32, to 2^24); a kernel or kernel zero point computed at run time: the kernel dequantised as an activation
ConvTranspose | a 0/1 Dense per spatial axis (zero insertion, padding, cropping) and a Conv2d (3-D: Conv's 3-D lowering) with the flipped kernel; a kernel computed at run time: the same zero insertion, then im2col and a MatMul with the taps reversed | 1-D, 2-D and 3-D, kernel and bias constant or computed at run time; every stride, dilation, group count, pads, auto_pad, output_padding and output_shape
Cos | Unary
Cosh | Unary
CumProd | parsed by Kestrel (`src/expand/`): a log-step scan, ⌈log₂ n⌉ Binary Mul of the running product with itself shifted (a Slice and a Pad with ones) | constant axis; exclusive and reverse
CumSum | Dense with a triangular 0/1 weight | constant axis
DFT | one Dense with the constant [2N, 2N] cos/sin matrix over each line's (real, imaginary) pairs (tract's Fft); inverse scaled by 1/N, onesided sliced | constant axis and length (tract's importer); N² weights within the composed-constant bound
DequantizeLinear | (x − zero_point) · scale on the integer values (constant weights folded at conversion) | per-tensor parameters on activations (tract's importer needs constant scales)
Det | parsed by Kestrel (`src/expand/`): the sum over the n! permutations of the signed products of their entries (a constant-index Gather, Reduce Prod, Reduce Sum) | matrices up to 6 × 6
Div | Binary
Dropout | nothing (inference, or a ratio of 0), the mask all true; ratio or training_mode computed at run time: the identity guarded by them | random dropout (training mode, ratio above 0) refused when constant, NaN when asked for at run time
DynamicQuantizeLinear | Reduce Max/Min over the whole tensor, then the scale, zero point and quantisation as element-wise ops (Div, Round, Max/Min), bit for bit as onnxruntime computes them (scale 1 for an all-zero input)
Einsum | two operands: Dense (a constant operand) or MatMul, with the transposes the equation needs; one operand (transpose, diagonal, sums): one Dense with the constant 0/1 matrix from input to output positions | at most two operands; a one-operand einsum within the composed-constant bound
Elu | Exp, a comparison and a select (tract's expansion)
Equal | Binary Equal (1 or 0)
Erf | Unary (or fused into GELU)
Exp | Unary
Expand | Dense with a 0/1 weight
Flatten | Reshape view
Floor | Unary
GRU | Gru (one node per output read; a fixed batch of N sequences: N nodes on slices, their outputs placed side by side); with W, R, B or the initial state computed at run time (graph inputs): the steps unrolled (an input MatMul, per step a MatMul, Slices, Binary and Unary ops) | default activations, either linear_before_reset (1: PyTorch's GRU; 0: ONNX's default, Keras/TensorFlow's), no clip, full-length constant sequence_lens; unrolled: at most 65,536 node copies per model
Gather | Embedding (constant table), a Slice (evenly spaced constant indices), a Gather (other constant indices, stored as an f32 weight); at run time a Gather reading the indices as f32 values (ids first through Embedding into 0..N, exact; f32 indices the graph computed as they are) | run-time integer indices in 0..N (another is a run-time error naming it); computed f32 indices outside −N..N (or fractional) are a run-time error on the CPU and zeros on the GPU; axes of < 2^24
GatherElements | a one-hot pick (a constant one-hot, the ids through Embedding and Equal, or computed f32 indices compared with 0..N and −N..0) with When and a Sum; constant data as an exact f32 weight | indices as long as the data on the other axes; run-time integer indices in 0..N
GatherND | a Gather of the tuples' flat rows (constant indices); at run time the tuples' flat rows (each component counted from the end when negative), their one-hot, When and a Sum | any batch_dims; a run-time tuple with a component outside its axis picks zeros; run-time tuples into < 2^24 rows
Gelu | Unary Gelu / GeluTanh (or fused into the Dense before it)
Gemm | Dense | constant B
GlobalAveragePool | Reduce Mean
GlobalMaxPool | Reduce Max
Greater | Binary Greater (1 or 0)
GreaterOrEqual | Binary GreaterEq (1 or 0)
GridSample | separable weights: per spatial axis the grid component unnormalised, rounded (nearest) and padded (border: clamped; reflection: a triangle wave via Fmod) where outside the image, the kernel (nearest: Equal; linear: relu(1 − |u − j|); cubic: Keys, A = −0.75) at every tap index, folded onto the pixels by a 0/1 Dense; then a MatMul over the last axis and a Mul and Sum per other axis (a constant grid: the weights computed at conversion) | every mode, padding_mode and align_corners; 2-D and 3-D (any number of spatial axes, cubic included); the sampled input computed at run time; at most 2^26 elements in N·C·S₁…S_{k−1}·(output points)
HardSigmoid | fused into the Dense/Conv2d before it (activation HardSigmoid), else Unary HardSigmoid | alpha = 1/6, beta = 1/2 (PyTorch's hardsigmoid; also relu6(x + 3)/6 written out); other constants: Binary arithmetic
HardSwish | Unary HardSwish (or fused into the Dense/Conv2d before it)
Hardmax | ArgMax and a one-hot (tract's expansion)
Identity | nothing
IsInf | Unary IsInf / IsPosInf / IsNegInf (1 or 0) | at least one sign detected
IsNaN | Unary IsNan (1 or 0)
LRN | Square, a Dense along the channels with a constant 0/1 band [C, C] (the window), then (bias + α/size·Σ)^β and a Div | NCHW input
LSTM | Lstm (one node per output read; a fixed batch of N sequences: N nodes on slices, their outputs placed side by side); with W, R, B, peepholes or initial states computed at run time (graph inputs): the steps unrolled (an input MatMul, per step a MatMul, Slices, Binary and Unary ops) | default activations, no clip or input_forget, full-length constant sequence_lens; unrolled: at most 65,536 node copies per model
LayerNormalization | LayerNorm
LeakyRelu | Binary Mul + Max | alpha ≥ 0
Less | Binary Less (1 or 0)
LessOrEqual | Binary LessEq (1 or 0)
LinearAttention | parsed by Kestrel (`src/lower/linear_attn.rs`): LinearAttn (one node per output read: output, present_state), every update rule (linear, gated, delta, gated_delta), grouped-query heads, per-key or per-head decay, per-head or shared beta, optional past_state | rank-3 packed Q/K/V; on the GPU d_k ≤ 256
Log | Unary
LpPool | parsed by Kestrel (`src/expand/`): Unary Abs, the p-th power, a zero Pad (pads, auto_pad, ceil mode), Pool2d Avg times the window size, the 1/p-th power | integer p; 1-D, 2-D and 3-D, every stride and dilation
MatMul | Dense (constant operand) or MatMul; fused into Attention / AFT / Fastformer
MatMulInteger | as QLinearMatMul with unit scales (an exact integer sum in f32, to 2^24)
Max | Binary | two operands
MaxPool | Pool2d Max (3-D: one over (H, W), one over D); the indices: a Gather of every window, Reduce ArgMax over its taps and a one-hot pick of a constant index table | 1-D, 2-D and 3-D; indices (storage_order 0 or 1) count within each sample (ONNX's at batch 1), exact below 2^24 elements
MaxUnpool | parsed by Kestrel (`src/expand/`): ScatterElements of X into zeros at the flat indices, a reshape, a zero Pad up to output_shape (onnx's reference) | indices constant or computed at run time; constant output_shape
Min | Binary | two operands
Mod | Binary Fmod (fmod = 1); fmod = 0: the remainder with the divisor's sign, from Fmod, comparisons and a select
Mul | Binary
Neg | Unary
NegativeLogLikelihoodLoss | parsed by Kestrel (`src/expand/`): the targets compared with the class indices (a one-hot mask, ignore_index masked out), times the scores and weights, Reduce Sum over the classes; sum and mean as Reduce Sum and Div (mean by the weights picked) | targets constant or computed at run time
NonMaxSuppression | Kestrel's Nms op (greedy per batch and class, as the standard's reference: score threshold, highest first with ties in index order, IoU above the threshold suppresses; `-1` past the last kept row), its count a run-time dim (`nms:<node>`, the rows not `-1` summed) and the output sliced to it | both box encodings; limits constant or computed at run time; at least one box selected per run (an empty selection is a run-time error), B·C·N < 2^24; the CPU (the GPU refuses run-time dims)
NonZero | its count a run-time dim (`nonzero:<node>`, 1..=N): the running count of the mask by log-step shifted adds, the one-hot of the ranks times a constant coordinate table | at least one non-zero entry per run, N·N ≤ 2^24 (the one-hot at the bound); the CPU (the GPU refuses run-time dims)
Not | Binary 1 − x | boolean operand
OneHot | the indices as values (integers exact to 2^24), truncated, compared with 0..D and −D..0, scaled to the values | constant depth and values; an index outside −D..D gives an all-off row, as ONNX defines
Or | Binary Max on 0/1 values | boolean operands
PRelu | Mul, a comparison and a select (tract's expansion)
Pad | a Slice into zeros plus the constant (edge, reflect: Dense with a 0/1 weight) | constant mode, constant pads
Pow | Binary; a constant exponent 2, 3, 4 as products, ½ as Sqrt, −½ as Rsqrt, −1 as Reciprocal
QLinearConv | the data dequantised (x − x0)·xs, the kernel and bias dequantised at conversion (per output channel), the float convolution, then (y / ys + y0) rounded half to even and saturated | data and output parameters per tensor (constant or computed); kernel parameters constant or computed (a computed kernel scale only with a zero bias)
QLinearMatMul | dequantised operands (scale·(x − zero_point), per-tensor or per-axis; parameters constant or computed), the float product, then round half to even + zero point, saturated to the output type | 8-bit outputs; f16 scales refused by tract's importer
QuantizeLinear | clamp(round_half_even(x / scale) + zero_point) on activations (× tract's stored 1/scale: a value on an exact tie may land one step away) | u8/i8 outputs, constant per-tensor parameters
RNN | the steps unrolled (an input MatMul, per step a MatMul, an Add and a Tanh; Slices place the states) | default activation (Tanh), no clip, full-length constant sequence_lens; at most 65,536 node copies per model
RandomNormal | parsed by Kestrel (`src/random.rs`, with Bernoulli: mean, scale, dtype, shape; seeded by the node's `seed`, else by its name), for tract; folded away where only its shape is read | a draw that reaches an output is refused: no runtime reproduces another's draws
RandomNormalLike | as RandomNormal (the input's shape) | as RandomNormal
RandomUniform | as RandomNormal (low, high) | as RandomNormal
RandomUniformLike | as RandomNormal (the input's shape; low, high) | as RandomNormal
Range | folded | constant bounds
Reciprocal | Unary
ReduceL1 | Unary Abs and Reduce Sum (tract's expansion) | constant axes
ReduceL2 | Reduce of the squares and Sqrt (tract's expansion) | constant axes
ReduceLogSum | Reduce Sum and Log (tract's expansion) | constant axes
ReduceLogSumExp | Exp, Reduce Sum and Log (tract's expansion) | constant axes
ReduceMax | Reduce
ReduceMean | Reduce (or part of LayerNorm)
ReduceMin | Reduce
ReduceProd | Reduce Prod
ReduceSum | Reduce
ReduceSumSquare | Reduce of the squares (tract's expansion) | constant axes
Relu | Unary (or fused into the Dense before it)
Reshape | Reshape view | constant shape
Resize | a Dense per resized axis with the exact interpolation weights (plus the extrapolation value as its bias) | constant scales, sizes and roi; every mode (nearest, linear, cubic), coordinate transformation, nearest_mode, cubic_coeff_a, antialias, exclude_outside, axes and keep_aspect_ratio_policy; not the first (batch) axis
ReverseSequence | parsed by Kestrel (`src/expand/`): a Gather along the time axis at t < L ? L − 1 − t : t (constant when sequence_lens is)
Round | Unary (halves to even)
STFT | one Conv2d over each signal's (real, imaginary) planes with the constant [2N, 2, N] kernel of windowed cos/sin terms, stride the frame step (tract's Stft); onesided sliced | constant frame step and window or frame length (tract's importer); a window no longer than the frame, centred; 4N² weights per signal line within the composed-constant bound
Scan | its body lowered once per iteration (scanned inputs as Slices, states passed on, scan outputs placed by Slices); an inclusive cumulative sum from zero: a Dense with a triangular 0/1 weight | a static trip count; scanned inputs in whole chunks; a reversed scan output of one element per step; at most 65,536 body node copies per model
Scatter | as ScatterElements (opset < 11)
ScatterElements | a one-hot of each update's index (constant, or at run time as Gather's), each update picked by When onto its place and combined by a Reduce over the updates (Sum, Prod, Max, Min); `none` keeps the data where nothing is written (Unless) | every reduction; updates as long as the data on the other axes; constant indices outside −N..N are an error, a repeated constant index with `none` keeps the last update; repeated run-time indices with `none` are summed (ONNX requires them distinct)
ScatterND | as ScatterElements, over the rows the index tuples name (a constant one-hot, or the tuples' flat rows at run time) | every reduction; run-time tuples into < 2^24 rows, one outside the data writes nothing
Selu | Exp, a comparison and a select (tract's expansion)
Shape | folded | static shapes (batch fixed at conversion)
Shrink | comparisons and selects (tract's expansion)
Sigmoid | Unary (x·σ(x) becomes Silu)
Sign | Unary
Sin | Unary
Sinh | Unary
Slice | Slice (one copy; fused from a one-hot Dense and the transposes around it) | constant bounds
Softmax | Softmax (fused into attention where recognised) | one axis
SoftmaxCrossEntropyLoss | parsed by Kestrel (`src/expand/`): log-softmax over the classes (Reduce Max, Exp, Reduce Sum, Log), then as NegativeLogLikelihoodLoss; the optional log_prob output | as NegativeLogLikelihoodLoss
Softplus | Exp, Add, Log (tract's expansion)
Softsign | Abs, Add, Div (tract's expansion)
SpaceToDepth | parsed by Kestrel (`src/expand/space_to_depth.rs`; tract's parser ignores `mode`): reshapes and one transpose | DCR and CRD modes; H and W multiples of blocksize
Split | a Slice per part | constant split sizes
Sqrt | Unary
Squeeze | Reshape view
Sub | Binary
SwiGLU | parsed by Kestrel (`src/expand/`): A · sigmoid(α·A) · B (Sigmoid, Binary Mul)
Swish | Unary Silu (α = 1); else parsed by Kestrel (`src/expand/activations.rs`; tract's parser ignores `alpha`): x · sigmoid(α·x) as Binary and Unary ops
Tan | Unary
Tanh | Unary
TensorScatter | parsed by Kestrel (`src/expand/`): ScatterElements along the axis at write_indices[b] + j (modulo the length when circular) | write_indices constant or computed at run time
ThresholdedRelu | a comparison and a select (tract's expansion)
Tile | a repeating 0/1 Dense per repeated axis | constant repeats
TopK | by ranks: pairwise comparisons along the axis (ties in index order), their one-hot below K picking values and indices (When and a Sum; indices as f32 values); a k computed at run time is a run-time dim (the graph at the bound, the one-hot with K leading, k read during each run) | k constant, or computed at run time in 1..=N (the CPU; the GPU refuses run-time dims); at most 2^26 pairwise comparisons (axis length² × the other elements)
Transpose | Transpose (a view when only size-1 axes move)
Trilu | Binary When against a 0/1 triangle (exact): a constant one, or the constant j − i compared with a k computed at run time
Unsqueeze | Reshape view
Upsample | parsed by Kestrel (`src/expand/`): as Resize with the scales (asymmetric coordinates; nearest: the floor) | constant scales (attribute or input); nearest or linear
Where | Binary When + Unless + Add (each branch where the condition picks it) | exact for any branch values, ±inf included
Xor | Binary |a − b| on 0/1 values | boolean operands
";

/// The table of ONNX ops (`TABLE`, one line per op), parsed once.
pub static ONNX_OPS: LazyLock<Vec<OnnxOp>> = LazyLock::new(|| {
    TABLE
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut fields = l.split(" | ");
            let (op, kestrel) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
            OnnxOp { op, kestrel, limits: fields.next().unwrap_or("") }
        })
        .collect()
});

/// What a user can do about an ONNX op that does not convert, when something helps.
pub fn remedy(op_type: &str) -> Option<&'static str> {
    Some(match op_type {
        "Loop" | "If" | "Scan" => {
            "export without data-dependent control flow (trace the model with fixed shapes, or move the loop into the application)"
        }
        "NonZero" | "NonMaxSuppression" | "TopK" | "Unique" => {
            "its output shape depends on the data: cut the model before it and run this step in the application"
        }
        "QuantizeLinear" | "DequantizeLinear" | "DynamicQuantizeLinear" | "QLinearConv" | "QLinearMatMul"
        | "MatMulInteger" | "ConvInteger" => {
            "convert the float model instead: Kestrel quantises it itself (--weights int8, --calibrate)"
        }
        "Attention" | "MultiHeadAttention" | "FastGelu" | "SkipLayerNormalization" | "EmbedLayerNormalization"
        | "BiasGelu" | "DecoderAttention" | "NhwcConv" => {
            "this is an onnxruntime contrib op: convert the model as exported from PyTorch, before onnxruntime's optimizer fuses it"
        }
        "RandomNormal" | "RandomUniform" | "RandomNormalLike" | "RandomUniformLike" | "Bernoulli" | "Multinomial" => {
            "a random draw: Kestrel draws no random numbers, and no runtime reproduces another's draws; export the model without sampling (eval mode, the distribution's mean), or make the noise a model input"
        }
        _ => return None,
    })
}

/// The table as Markdown: `docs/onnx-ops.md`.
pub fn supported_ops_markdown() -> String {
    let mut s = String::from(
        "# ONNX ops the converter takes\n\n\
         Generated from `converters/onnx/src/ops_table.rs` (a test keeps this file equal to it: \
         `KESTREL_UPDATE_DOCS=1 cargo test -p kestrel-rt-onnx --test suite ops_doc::` rewrites it).\n\n\
         Any op whose inputs are all constants is also accepted: it is evaluated at conversion \
         time and its result stored. tract (the ONNX importer) rewrites some ops into others \
         first (BatchNormalization into constants, Gemm into a matrix product); the lowering \
         works on what it produces. A model that does not convert gets every blocking node \
         listed at once, by ONNX op type and node name, with a remedy where one exists.\n\n\
         Inputs that decide a shape — axes, target shapes, sizes and scales, pads, split sizes, \
         repeats, a range's bounds — must be constants or fold to constants (an initializer, a \
         `Constant`, shape arithmetic on declared dims): a model's memory is planned once, when \
         it loads. Exported models hold them so; the ONNX standard's backend test cases feed \
         them as graph inputs, and tract refuses those as Kestrel does. `docs/onnx-conformance.md` \
         runs each such case again with every input but the first stored as an initializer (its \
         constant-parameter variant), where they pass; ops whose first input is itself such a \
         parameter (ConstantOfShape, the window functions, MelWeightMatrix) fold entirely when \
         it is constant. Sizes that data decide (NonZero, NonMaxSuppression) are run-time dims \
         within a bound.\n\n\
         | ONNX op | becomes in Kestrel | limits |\n|---|---|---|\n",
    );
    for o in ONNX_OPS.iter() {
        s.push_str(&format!("| {} | {} | {} |\n", o.op, o.kestrel, o.limits));
    }
    s
}

#[cfg(test)]
mod tests {
    /// The parser takes the first three ` | `-separated fields and reads a missing one as empty:
    /// a line with a fourth field, or with an empty op or target, would lose text silently.
    #[test]
    fn every_table_line_has_two_or_three_nonempty_fields() {
        for line in super::TABLE.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let fields: Vec<&str> = line.split(" | ").collect();
            assert!((2..=3).contains(&fields.len()), "{line:?}: {} fields", fields.len());
            assert!(fields.iter().all(|f| !f.trim().is_empty()), "{line:?}: an empty field");
        }
        assert_eq!(super::ONNX_OPS.len(), super::TABLE.lines().filter(|l| !l.trim().is_empty()).count());
    }
}
