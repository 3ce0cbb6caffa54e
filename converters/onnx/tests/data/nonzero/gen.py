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
