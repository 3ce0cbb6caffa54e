"""Fixtures of converters/onnx/tests/nonzero.rs: ONNX NonZero, whose output size the data decide
(a run-time dim). Regenerate with `python3 gen.py` (onnx only; deterministic)."""
import numpy as np
import onnx
from onnx import TensorProto, helper as h


def save(name, nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], producer_name="kestrel-tests")
    onnx.checker.check_model(m)
    onnx.save(m, f"{name}.onnx")


f32, i64 = TensorProto.FLOAT, TensorProto.INT64
# The coordinates themselves, a graph output of [3, count] (as f32).
save(
    "coords",
    [
        h.make_node("Greater", ["x", "zero"], ["pos"]),
        h.make_node("NonZero", ["pos"], ["nz"], name="nz"),
        h.make_node("Cast", ["nz"], ["y"], to=f32),
    ],
    [h.make_tensor_value_info("x", f32, [2, 3, 4])],
    [h.make_tensor_value_info("y", f32, [3, "count"])],
    [h.make_tensor("zero", f32, [], [0.0])],
)
# Boolean indexing (x[x > t]) then fixed-size reductions: the count cancels out of the output.
save(
    "select_sum",
    [
        h.make_node("Greater", ["x", "t"], ["keep"]),
        h.make_node("NonZero", ["keep"], ["nz"], name="select"),
        h.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        h.make_node("GatherND", ["x", "idx"], ["sel"]),
        h.make_node("ReduceSum", ["sel"], ["s"], keepdims=1),
        h.make_node("ReduceMax", ["sel"], ["m"], keepdims=1),
        h.make_node("Concat", ["s", "m"], ["y"], axis=0),
    ],
    [h.make_tensor_value_info("x", f32, [1, 16])],
    [h.make_tensor_value_info("y", f32, [2])],
    [h.make_tensor("t", f32, [], [0.25])],
)
# data.masked_scatter(mask, source) as both PyTorch exporters write it (Hugging Face's multimodal
# models: features put where the ids hold a placeholder): ScatterND(data, Transpose(NonZero(mask)),
# Slice(Reshape(source, [-1]), 0, count)). The output has the data's shape.
save(
    "masked_scatter",
    [
        h.make_node("Equal", ["ids", "token"], ["eq"]),
        h.make_node("Unsqueeze", ["eq", "last"], ["eq3"]),
        h.make_node("Shape", ["data"], ["dshape"]),
        h.make_node("Expand", ["eq3", "dshape"], ["mask"]),
        h.make_node("NonZero", ["mask"], ["nz"], name="placeholders"),
        h.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        h.make_node("Reshape", ["source", "flat"], ["src"]),
        h.make_node("Shape", ["idx"], ["ishape"]),
        h.make_node("Gather", ["ishape", "zero_i"], ["count"], axis=0),
        h.make_node("Unsqueeze", ["count", "first"], ["ends"]),
        h.make_node("Slice", ["src", "zero_1", "ends", "first"], ["updates"]),
        h.make_node("ScatterND", ["data", "idx", "updates"], ["y"]),
    ],
    [
        h.make_tensor_value_info("ids", i64, [1, 6]),
        h.make_tensor_value_info("data", f32, [1, 6, 4]),
        h.make_tensor_value_info("source", f32, [1, 3, 4]),
    ],
    [h.make_tensor_value_info("y", f32, [1, 6, 4])],
    [
        h.make_tensor("token", i64, [], [7]),
        h.make_tensor("last", i64, [1], [2]),
        h.make_tensor("flat", i64, [1], [-1]),
        h.make_tensor("zero_i", i64, [], [0]),
        h.make_tensor("first", i64, [1], [0]),
        h.make_tensor("zero_1", i64, [1], [0]),
    ],
)
