//! The ONNX ops the converter takes, what each becomes in Kestrel and its limits — the source
//! of `docs/onnx-ops.md` (a test keeps the two equal) — and the remedies printed with blockers.

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

const fn op(op: &'static str, kestrel: &'static str, limits: &'static str) -> OnnxOp {
    OnnxOp { op, kestrel, limits }
}

/// Every ONNX op the converter lowers, sorted by name. Any op whose inputs are all constants
/// is also accepted: it is evaluated at conversion time and its result stored.
pub const ONNX_OPS: &[OnnxOp] = &[
    op("Abs", "Unary", ""),
    op("Add", "Binary (or a Dense/LayerNorm bias)", "numpy broadcasting"),
    op("And", "Binary Mul on 0/1 values", "boolean operands"),
    op("AveragePool", "Pool2d Avg", "1-D and 2-D; ceil_mode and count_include_pad honoured"),
    op("BatchNormalization", "folded into constants (inference mode)", ""),
    op(
        "Cast",
        "nothing (f32→f32, int→int) / Embedding into [0, 1]",
        "int→bool only for a 0/1 input (an id ≥ 2 is a run-time error)",
    ),
    op("Clip", "Binary Max/Min", "constant bounds"),
    op("Concat", "a Slice per piece (a copy into its place; fused from a 0/1 placing Dense)", ""),
    op("Constant", "weights where read", ""),
    op("ConstantOfShape", "folded", "constant shape"),
    op("Conv", "Conv2d (fused attention where a mechanism is recognised)", "1-D and 2-D, constant kernel and bias"),
    op("CumSum", "Dense with a triangular 0/1 weight", "constant axis"),
    op("Div", "Binary", ""),
    op("Dropout", "nothing (inference)", ""),
    op("Equal", "folded", "constant operands"),
    op("Erf", "Unary (or fused into GELU)", ""),
    op("Exp", "Unary", ""),
    op("Expand", "Dense with a 0/1 weight", ""),
    op("Flatten", "Reshape view", ""),
    op(
        "GRU",
        "Gru (one node per output read)",
        "default activations, linear_before_reset = 1 (PyTorch's GRU), constant weights and initial state, \
         no clip, full-length sequence_lens",
    ),
    op(
        "Gather",
        "Embedding (constant table), or a Slice (evenly spaced indices) or a Dense with a one-hot weight",
        "constant indices when gathering from an activation",
    ),
    op("GatherElements", "folded", "constant operands"),
    op("GatherND", "Dense with a one-hot weight", "constant indices, batch_dims 0"),
    op("Gelu", "Unary Gelu / GeluTanh (or fused into the Dense before it)", ""),
    op("Gemm", "Dense", "constant B"),
    op("GlobalAveragePool", "Reduce Mean", ""),
    op("GlobalMaxPool", "Reduce Max", ""),
    op("GreaterOrEqual", "folded", "constant operands"),
    op(
        "HardSigmoid",
        "fused into the Dense/Conv2d before it (activation HardSigmoid), else Unary HardSigmoid",
        "alpha = 1/6, beta = 1/2 (PyTorch's hardsigmoid; also relu6(x + 3)/6 written out); other \
         constants: Binary arithmetic",
    ),
    op("HardSwish", "Unary HardSwish (or fused into the Dense/Conv2d before it)", ""),
    op("Identity", "nothing", ""),
    op(
        "LSTM",
        "Lstm (one node per output read)",
        "default activations, no peepholes, clip or input_forget, constant weights and initial states, \
         full-length sequence_lens",
    ),
    op("LayerNormalization", "LayerNorm", ""),
    op("LeakyRelu", "Binary Mul + Max", "alpha ≥ 0"),
    op("Log", "Unary", ""),
    op("MatMul", "Dense (constant operand) or MatMul; fused into Attention / AFT / Fastformer", ""),
    op("Max", "Binary", "two operands"),
    op("MaxPool", "Pool2d Max", "1-D and 2-D; one output (no indices)"),
    op("Min", "Binary", "two operands"),
    op("Mod", "folded", "constant operands"),
    op("Mul", "Binary", ""),
    op("Neg", "Unary", ""),
    op("Not", "Binary 1 − x", "boolean operand"),
    op("Or", "Binary Max on 0/1 values", "boolean operands"),
    op(
        "Pad",
        "a Slice into zeros plus the constant (edge, reflect: Dense with a 0/1 weight)",
        "constant mode, constant pads",
    ),
    op("Pow", "Binary", ""),
    op("Range", "folded", "constant bounds"),
    op("Reciprocal", "Unary", ""),
    op("ReduceMax", "Reduce", ""),
    op("ReduceMean", "Reduce (or part of LayerNorm)", ""),
    op("ReduceMin", "Reduce", ""),
    op("ReduceSum", "Reduce", ""),
    op("Relu", "Unary (or fused into the Dense before it)", ""),
    op("Reshape", "Reshape view", "constant shape"),
    op("Shape", "folded", "static shapes (batch fixed at conversion)"),
    op("Sigmoid", "Unary (x·σ(x) becomes Silu)", ""),
    op("Slice", "Slice (one copy; fused from a one-hot Dense and the transposes around it)", "constant bounds"),
    op("Softmax", "Softmax (fused into attention where recognised)", "one axis"),
    op("Split", "a Slice per part", "constant split sizes"),
    op("Sqrt", "Unary", ""),
    op("Squeeze", "Reshape view", ""),
    op("Sub", "Binary", ""),
    op("Tanh", "Unary", ""),
    op("Transpose", "Transpose (a view when only size-1 axes move)", ""),
    op("Unsqueeze", "Reshape view", ""),
    op(
        "Where",
        "Binary arithmetic c·a + (1 − c)·b",
        "0/1 condition, finite branches (±inf constants become ±f32::MAX)",
    ),
    op("Xor", "Binary |a − b| on 0/1 values", "boolean operands"),
];

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
        "RandomNormal" | "RandomUniform" | "RandomNormalLike" | "RandomUniformLike" | "Multinomial" => {
            "random ops have no place in an inference graph: export the model in eval mode"
        }
        _ => return None,
    })
}

/// The table as Markdown: `docs/onnx-ops.md`.
pub fn supported_ops_markdown() -> String {
    let mut s = String::from(
        "# ONNX ops the converter takes\n\n\
         Generated from `converters/onnx/src/ops_table.rs` (a test keeps this file equal to it: \
         `KESTREL_UPDATE_DOCS=1 cargo test -p kestrel-onnx --test ops_doc` rewrites it).\n\n\
         Any op whose inputs are all constants is also accepted: it is evaluated at conversion \
         time and its result stored. tract (the ONNX importer) rewrites some ops into others \
         first (BatchNormalization into constants, Gemm into a matrix product); the lowering \
         works on what it produces. A model that does not convert gets every blocking node \
         listed at once, by ONNX op type and node name, with a remedy where one exists.\n\n\
         | ONNX op | becomes in Kestrel | limits |\n|---|---|---|\n",
    );
    for o in ONNX_OPS {
        s.push_str(&format!("| {} | {} | {} |\n", o.op, o.kestrel, o.limits));
    }
    s
}
