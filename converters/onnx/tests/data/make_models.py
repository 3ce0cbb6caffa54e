"""Generates the tiny ONNX test models of kestrel-rt-onnx (run once; the outputs are committed).

    python3 converters/onnx/tests/data/make_models.py

Every model has a symbolic leading batch dimension `N` and pseudo-random weights from a fixed
seed. Each file stays well under 50 KB.
"""

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(7)
OPSET = [helper.make_opsetid("", 18)]


class G:
    """A small graph builder over onnx.helper."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, base, value, dtype=np.float32):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def w(self, base, shape, fan_in):
        return self.const(base, RNG.standard_normal(shape) / math.sqrt(fan_in))

    def op(self, kind, inputs, **attrs):
        out = self.name(kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def linear(self, x, d_in, d_out):
        return self.op("Add", [self.op("MatMul", [x, self.w("w", [d_in, d_out], d_in)]), self.w("b", [d_out], d_in)])

    def gelu_erf(self, x):
        inner = self.op("Erf", [self.op("Div", [x, self.const("sqrt2", math.sqrt(2.0))])])
        one_plus = self.op("Add", [inner, self.const("one", 1.0)])
        return self.op("Mul", [self.op("Mul", [x, one_plus]), self.const("half", 0.5)])

    def save(self, file, inputs, outputs):
        graph = helper.make_graph(self.nodes, os.path.splitext(file)[0], inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=OPSET, producer_name="kestrel-rt-onnx tests")
        model.ir_version = 8
        onnx.checker.check_model(model)
        path = os.path.join(HERE, file)
        onnx.save(model, path)
        print(f"{file}: {os.path.getsize(path)} bytes")


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp():
    """Gemm + Relu, MatMul + Add + GELU (erf form), MatMul + Add, Softmax."""
    g = G()
    h = g.op("Gemm", ["x", g.w("w1", [32, 16], 16), g.w("b1", [32], 16)], transB=1)
    h = g.op("Relu", [h])
    h = g.gelu_erf(g.linear(h, 32, 32))
    y = g.op("Softmax", [g.linear(h, 32, 10)], axis=-1)
    g.nodes[-1].output[0] = "probs"
    g.save("mlp.onnx", [f32("x", ["N", 16])], [f32("probs", ["N", 10])])


def vit():
    """Conv patchify, flatten + transpose, position add, LayerNormalization, 2-head attention
    (MatMul/Transpose/Softmax/Mul scale), residuals, ReLU MLP, mean pool, classifier."""
    g = G()
    d, heads, t, c = 16, 2, 16, 8
    p = g.op("Conv", ["x", g.w("patch_w", [d, 1, 4, 4], 16), g.w("patch_b", [d], 16)], kernel_shape=[4, 4], strides=[4, 4])
    p = g.op("Reshape", [p, g.const("shape", [0, d, t], np.int64)])
    x = g.op("Transpose", [p], perm=[0, 2, 1])
    x = g.op("Add", [x, g.w("pos", [t, d], 4)])
    ln = lambda v: g.op(
        "LayerNormalization",
        [v, g.const("ln_g", 1.0 + 0.1 * RNG.standard_normal(d)), g.const("ln_b", 0.1 * RNG.standard_normal(d))],
        axis=-1,
        epsilon=1e-5,
    )
    h = ln(x)
    heads_shape = g.const("heads", [0, t, heads, c], np.int64)
    split = lambda v: g.op("Transpose", [g.op("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
    q, k, v = (split(g.linear(h, d, d)) for _ in range(3))
    s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    s = g.op("Mul", [s, g.const("scale", 1.0 / math.sqrt(c))])
    a = g.op("Softmax", [s], axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [a, v])], perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const("merge", [0, t, d], np.int64)])
    x = g.op("Add", [x, g.linear(o, d, d)])
    h = g.op("Relu", [g.linear(ln(x), d, 32)])
    x = g.op("Add", [x, g.linear(h, 32, d)])
    pooled = g.op("ReduceMean", [ln(x), g.const("axes", [1], np.int64)], keepdims=0)
    y = g.linear(pooled, d, 10)
    g.nodes[-1].output[0] = "logits"
    g.save("vit.onnx", [f32("x", ["N", 1, 16, 16])], [f32("logits", ["N", 10])])


def cnn():
    """3x3 padded conv + ReLU, strided conv, global average pool, flatten, Gemm."""
    g = G()
    h = g.op("Conv", ["x", g.w("c1", [4, 2, 3, 3], 18), g.w("c1b", [4], 18)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    h = g.op("Relu", [h])
    h = g.op("Conv", [h, g.w("c2", [8, 4, 3, 3], 36), g.w("c2b", [8], 36)], kernel_shape=[3, 3], strides=[2, 2])
    h = g.op("Sigmoid", [h])
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    g.op("Gemm", [h, g.w("fc", [8, 5], 8), g.w("fcb", [5], 8)])
    g.nodes[-1].output[0] = "logits"
    g.save("cnn.onnx", [f32("x", ["N", 2, 9, 9])], [f32("logits", ["N", 5])])


def text():
    """Gather embedding of int64 ids, position add, tanh, mean over tokens, MatMul + Add, sigmoid."""
    g = G()
    e = g.op("Gather", [g.w("table", [50, 16], 1), "ids"], axis=0)
    e = g.op("Add", [e, g.w("pos", [8, 16], 4)])
    e = g.op("Tanh", [e])
    m = g.op("ReduceMean", [e, g.const("axes", [1], np.int64)], keepdims=0)
    g.op("Sigmoid", [g.linear(m, 16, 4)])
    g.nodes[-1].output[0] = "scores"
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 8])
    g.save("text.onnx", [ids], [f32("scores", ["N", 4])])
    np.save(os.path.join(HERE, "text_ids.npy"), (np.arange(16, dtype=np.int64) * 7 % 50).reshape(2, 8))


def misc():
    """Transposes, unary math, broadcasting binaries, multi-axis and keepdims reductions, softmax
    over a non-last axis, activation x activation MatMul."""
    g = G()
    x = g.op("Transpose", ["x"], perm=[0, 2, 1])  # [N, 6, 4]
    a = g.op("Sqrt", [g.op("Add", [g.op("Abs", [x]), g.const("one", 1.0)])])
    b = g.op("Div", [g.op("Exp", [g.op("Neg", [x])]), a])
    c = g.op("Max", [g.op("Min", [b, g.const("hi", 3.0)]), g.const("lo", -3.0)])
    c = g.op("Sub", [c, g.op("ReduceMax", [c, g.const("ax", [-1], np.int64)], keepdims=1)])
    s = g.op("Softmax", [c], axis=1)
    l = g.op("Log", [g.op("Add", [g.op("Pow", [x, g.const("two", 2.0)]), g.const("one", 1.0)])])
    r = g.op("Reciprocal", [g.op("Add", [g.op("Sigmoid", [l]), g.const("half", 0.5)])])
    m = g.op("MatMul", [g.op("Mul", [s, r]), g.op("Transpose", [x], perm=[0, 2, 1])])  # [N, 6, 6]
    m = g.op("Mul", [m, g.w("scale", [6, 1], 1)])
    total = g.op("ReduceSum", [m, g.const("axes", [1, 2], np.int64)], keepdims=1)  # [N, 1, 1]
    y = g.op("Add", [g.op("ReduceMin", [m, g.const("ax1", [1], np.int64)], keepdims=0), g.op("Squeeze", [total, g.const("sq", [2], np.int64)])])
    g.nodes[-1].output[0] = "y"
    g.save("misc.onnx", [f32("x", ["N", 4, 6])], [f32("y", ["N", 6])])


def select():
    """Ops without a Kestrel op of their own: Where with a constant mask (masked fill with -inf)
    before a softmax, Gather of constant indices from an activation, Slice, CumSum. Four outputs."""
    g = G()
    mask = np.triu(np.ones((4, 6), dtype=bool), k=1)
    filled = g.op("Where", [g.const("mask", mask, np.bool_), g.const("ninf", -np.inf), "x"])
    g.op("Softmax", [filled], axis=-1)
    g.nodes[-1].output[0] = "masked"
    g.op("Gather", ["x", g.const("idx", [2, 0, -1], np.int64)], axis=2)
    g.nodes[-1].output[0] = "gathered"
    g.op("Slice", ["x", g.const("starts", [1], np.int64), g.const("ends", [3], np.int64), g.const("axes", [1], np.int64)])
    g.nodes[-1].output[0] = "sliced"
    g.op("CumSum", ["x", g.const("axis", 1, np.int64)])
    g.nodes[-1].output[0] = "cumsum"
    outs = [f32("masked", ["N", 4, 6]), f32("gathered", ["N", 4, 3]), f32("sliced", ["N", 2, 6]), f32("cumsum", ["N", 4, 6])]
    g.save("select.onnx", [f32("x", ["N", 4, 6])], outs)


def assemble():
    """Concat (a class token expanded over the batch, as torch exports it, and two activation
    pieces), Pad (constant, reflect, edge), Expand of an activation. Five outputs."""
    g = G()
    batch = g.op("Gather", [g.op("Shape", ["x"]), g.const("zero", [0], np.int64)], axis=0)
    shape = g.op("Concat", [batch, g.const("rest", [1, 6], np.int64)], axis=0)
    cls = g.op("Expand", [g.w("cls", [1, 1, 6], 1), shape])
    g.op("Concat", [cls, "x"], axis=1)
    g.nodes[-1].output[0] = "with_cls"
    g.op("Concat", ["x", g.op("Mul", ["x", g.const("two", 2.0)])], axis=2)
    g.nodes[-1].output[0] = "doubled"
    g.op("Pad", ["x", g.const("pads", [0, 1, 2, 0, 0, 1], np.int64), g.const("value", 0.5)], mode="constant")
    g.nodes[-1].output[0] = "padded"
    g.op("Pad", ["x", g.const("pads", [0, 0, 2, 0, 1, 1], np.int64)], mode="reflect")
    reflect = g.nodes[-1].output[0]
    g.op("Pad", [reflect, g.const("pads", [0, 1, 0, 0, 1, 0], np.int64)], mode="edge")
    g.nodes[-1].output[0] = "reflect_edge"
    col = g.op("ReduceMax", ["x", g.const("ax", [2], np.int64)], keepdims=1)
    g.op("Expand", [col, g.const("to", [1, 4, 6], np.int64)])
    g.nodes[-1].output[0] = "expanded"
    outs = [
        f32("with_cls", ["N", 5, 6]),
        f32("doubled", ["N", 4, 12]),
        f32("padded", ["N", 5, 9]),
        f32("reflect_edge", ["N", 7, 9]),
        f32("expanded", ["N", 4, 6]),
    ]
    g.save("assemble.onnx", [f32("x", ["N", 4, 6])], outs)


def nhwc():
    """A channels-last image around a conv (tract may keep the conv in NHWC)."""
    g = G()
    h = g.op("Transpose", ["x"], perm=[0, 3, 1, 2])
    h = g.op("Conv", [h, g.w("c", [4, 3, 3, 3], 27), g.w("cb", [4], 27)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g.op("Transpose", [h], perm=[0, 2, 3, 1])
    g.nodes[-1].output[0] = "y"
    g.save("nhwc.onnx", [f32("x", ["N", 6, 6, 3])], [f32("y", ["N", 6, 6, 4])])


def pool():
    """MaxPool 3x3 s2 p1; AveragePool 2x2 s2 with ceil_mode=1 on an odd width, with and without
    count_include_pad; AveragePool 3x3 s2 p1 count_include_pad=1 ceil_mode=1 (a window reaching
    past the explicit padding); MaxPool 2x2 dilation 2; GlobalMaxPool; GlobalAveragePool; and an
    NHWC image around an AveragePool 3x3 s1 p1 (tract may keep the pool channels-last). No
    weights: the RNG of the other models is untouched."""
    g = G()
    g.op("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    g.nodes[-1].output[0] = "max3"
    g.op("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    g.nodes[-1].output[0] = "avg2_ceil"
    g.op("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=1)
    g.nodes[-1].output[0] = "avg2_ceil_pad"
    g.op("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1)
    g.nodes[-1].output[0] = "avg2_pad"
    g.op("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
         count_include_pad=1)
    g.nodes[-1].output[0] = "avg3_ceil_pad"
    g.op("MaxPool", ["x"], kernel_shape=[2, 2], dilations=[2, 2])
    g.nodes[-1].output[0] = "max2_dil"
    g.op("GlobalMaxPool", ["x"])
    g.nodes[-1].output[0] = "gmax"
    g.op("GlobalAveragePool", ["x"])
    g.nodes[-1].output[0] = "gavg"
    h = g.op("Transpose", ["xh"], perm=[0, 3, 1, 2])
    h = g.op("AveragePool", [h], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g.op("Transpose", [h], perm=[0, 2, 3, 1])
    g.nodes[-1].output[0] = "nhwc_avg"
    outs = [
        f32("max3", ["N", 3, 5, 5]),
        f32("avg2_ceil", ["N", 3, 5, 5]),
        f32("avg2_ceil_pad", ["N", 3, 5, 5]),
        f32("avg2_pad", ["N", 3, 5, 4]),
        f32("avg3_ceil_pad", ["N", 3, 6, 5]),
        f32("max2_dil", ["N", 3, 8, 7]),
        f32("gmax", ["N", 3, 1, 1]),
        f32("gavg", ["N", 3, 1, 1]),
        f32("nhwc_avg", ["N", 6, 6, 4]),
    ]
    g.save("pool.onnx", [f32("x", ["N", 3, 10, 9]), f32("xh", ["N", 6, 6, 4])], outs)


def unsupported():
    """RandomNormal (a random draw: never converted, a model's outputs must be repeatable) added
    to a computed tensor has no Kestrel lowering: the converter must name it."""
    g = G()
    x2 = g.op("Mul", ["x", g.const("two", 2.0)])
    g.op("Add", [x2, g.op("RandomNormal", [], shape=[1, 4])])
    g.nodes[-1].output[0] = "y"
    g.save("unsupported.onnx", [f32("x", [1, 4])], [f32("y", [1, 4])])


def unsupported_many():
    """Two blockers in sequence: RandomNormal, then IsInf (detecting neither sign) on a value
    computed from it, whose boolean output a Where reads. Both must be listed: the one after the
    first is not hidden behind it, nor is anything behind a boolean blocker's output."""
    g = G()
    x2 = g.op("Mul", ["x", g.const("two", 2.0)])
    s = g.op("Add", [x2, g.op("RandomNormal", [], shape=[1, 4])])
    inf = g.op("IsInf", [g.op("Add", [s, g.const("one", 1.0)])], detect_positive=0, detect_negative=0)
    g.op("Where", [inf, s, "x"])
    g.nodes[-1].output[0] = "y"
    g.save("unsupported_many.onnx", [f32("x", [1, 4])], [f32("y", [1, 4])])


def trilu():
    """Trilu on an activation, both triangles, with and without the diagonal offset k: two
    outputs (the lowering is `When(x, mask)`, exact)."""
    g = G()
    g.op("Trilu", ["x", g.const("k", 1, np.int64)], upper=1)
    g.nodes[-1].output[0] = "upper"
    g.op("Trilu", ["x", g.const("k", -1, np.int64)], upper=0)
    g.nodes[-1].output[0] = "lower"
    g.op("Trilu", ["x"], upper=0)
    g.nodes[-1].output[0] = "lower0"
    outs = [f32("upper", ["N", 4, 6]), f32("lower", ["N", 4, 6]), f32("lower0", ["N", 4, 6])]
    g.save("trilu.onnx", [f32("x", ["N", 4, 6])], outs)


def contrib_ops():
    """Two onnxruntime contrib ops (com.microsoft EmbedLayerNormalization, DecoderAttention;
    operands not meaningful) which the importer has no parser for: both listed at once, with the
    remedy."""
    g = G()
    a = g.op("EmbedLayerNormalization", ["x"], domain="com.microsoft")
    g.op("DecoderAttention", [a], domain="com.microsoft")
    g.nodes[-1].output[0] = "y"
    graph = helper.make_graph(g.nodes, "contrib_ops", [f32("x", ["N", 4])], [f32("y", ["N", 4])], g.inits)
    opsets = list(OPSET) + [helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="kestrel-rt-onnx tests")
    model.ir_version = 8
    path = os.path.join(HERE, "contrib_ops.onnx")
    onnx.save(model, path)
    print(f"contrib_ops.onnx: {os.path.getsize(path)} bytes")


def logic():
    """LeakyRelu, Clip, Dropout and a 0/1 integer mask through Cast(bool), Or, Xor, Not and
    Where with computed conditions."""
    g = G()
    a = g.op("LeakyRelu", ["x"], alpha=0.1)
    b = g.op("Clip", ["x", g.const("lo", -0.5), g.const("hi", 0.5)])
    d = g.op("Dropout", ["x"])
    m = g.op("Cast", ["mask"], to=TensorProto.BOOL)
    k = g.const("k", np.array([True, False, True, False]), dtype=np.bool_)
    o = g.op("Or", [m, k])
    xo = g.op("Xor", [m, k])
    n = g.op("Not", [m])
    zero = g.const("zero", 0.0)
    s = g.op("Add", [g.op("Where", [o, a, b]), g.op("Where", [xo, d, zero])])
    g.op("Add", [s, g.op("Where", [n, b, zero])])
    g.nodes[-1].output[0] = "y"
    mask = helper.make_tensor_value_info("mask", TensorProto.INT64, ["N", 4])
    g.save("logic.onnx", [f32("x", ["N", 4]), mask], [f32("y", ["N", 4])])


def hard_sigmoid():
    """Hard sigmoid in every form the converter fuses, and one it must not: ONNX HardSigmoid
    (alpha 1/6, beta 1/2) after a MatMul + Add and after a padded 3x3 Conv; relu6(x + 3)/6 as
    Add, Clip(0, 6), Div 6 after a Dense and after a bias-free 1x1 Conv; the x * (1/6) form on a Dense
    output that is read twice (a standalone Unary); HardSigmoid with ONNX's default alpha 0.2
    (Keras constants, left as arithmetic). Two inputs, two outputs; its own seed."""
    global RNG
    RNG = np.random.default_rng(23)
    g = G()

    def relu6_form(v, scale_op="Div"):
        v = g.op("Clip", [g.op("Add", [v, g.const("three", 3.0)]), g.const("lo", 0.0), g.const("hi", 6.0)])
        if scale_op == "Div":
            return g.op("Div", [v, g.const("six", 6.0)])
        return g.op("Mul", [v, g.const("sixth", 1.0 / 6.0)])

    def linear(x, d_in, d_out, gain):
        # Weights `gain` times the usual scale: pre-activations reach past both kinks (±3).
        w = g.const("w", RNG.standard_normal([d_in, d_out]) * gain / math.sqrt(d_in))
        return g.op("Add", [g.op("MatMul", [x, w]), g.w("b", [d_out], 1)])

    h = g.op("HardSigmoid", [linear("x", 8, 12, 3.0)], alpha=1.0 / 6.0, beta=0.5)
    h = relu6_form(linear(h, 12, 12, 12.0))
    l3 = linear(h, 12, 12, 12.0)
    r = g.op("Add", [l3, relu6_form(l3, "Mul")])
    g.op("HardSigmoid", [r])
    g.nodes[-1].output[0] = "y"
    c = g.op("Conv", ["img", g.w("c1", [4, 3, 3, 3], 1), g.w("c1b", [4], 1)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    c = g.op("HardSigmoid", [c], alpha=1.0 / 6.0, beta=0.5)
    # No bias: tract folds a bias Add and the `Add 3` after it into one Add, which the conv
    # absorbs as its bias, leaving relu6(·)/6 of a shifted value (not matched: arithmetic stays).
    c = g.op("Conv", [c, g.w("c2", [5, 4, 1, 1], 0.1)], kernel_shape=[1, 1])
    c = relu6_form(c)
    # A max pool after it: tract moves a scale past an average (a linear op) into the mean.
    g.op("Flatten", [g.op("GlobalMaxPool", [c])], axis=1)
    g.nodes[-1].output[0] = "z"
    g.save(
        "hard_sigmoid.onnx",
        [f32("x", ["N", 8]), f32("img", ["N", 3, 6, 6])],
        [f32("y", ["N", 12]), f32("z", ["N", 5])],
    )


if __name__ == "__main__":
    trilu()
    mlp()
    vit()
    cnn()
    text()
    misc()
    select()
    nhwc()
    assemble()
    unsupported()
    unsupported_many()
    contrib_ops()
    logic()
    pool()
    hard_sigmoid()
