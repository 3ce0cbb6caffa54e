"""Fixtures of converters/onnx/tests/sized_by_data.rs: ops whose output size the data decide
besides NonZero (tests/data/nonzero): TopK with k computed at run time, NonMaxSuppression.
Regenerate with `python3 gen.py` (onnx only; deterministic)."""
import onnx
from onnx import TensorProto, helper as h


def save(name, nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], producer_name="kestrel-tests")
    onnx.checker.check_model(m)
    onnx.save(m, f"{name}.onnx")


f32, i64 = TensorProto.FLOAT, TensorProto.INT64
# TopK with k a graph input (as the standard's own cases feed it): both outputs [3, k].
save(
    "topk_input_k",
    [
        h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name="top"),
        h.make_node("Cast", ["i"], ["fi"], to=f32),
    ],
    [h.make_tensor_value_info("x", f32, [3, 10]), h.make_tensor_value_info("k", i64, [1])],
    [h.make_tensor_value_info("v", f32, [3, "k"]), h.make_tensor_value_info("fi", f32, [3, "k"])],
)
# TopK with k computed from the data (the number of entries above a threshold, at least 1), the
# smallest first along axis 0, then a reduction of the values the run keeps.
save(
    "topk_data_k",
    [
        h.make_node("Greater", ["x", "t"], ["above"]),
        h.make_node("Cast", ["above"], ["af"], to=f32),
        h.make_node("ReduceSum", ["af"], ["count"], keepdims=0),
        h.make_node("Max", ["count", "one"], ["atleast"]),
        h.make_node("Cast", ["atleast"], ["ki"], to=i64),
        h.make_node("Reshape", ["ki", "shape1"], ["k"]),
        h.make_node("Reshape", ["x", "flat"], ["xf"]),
        h.make_node("TopK", ["xf", "k"], ["v", "i"], axis=0, largest=0, name="smallest"),
        h.make_node("ReduceSum", ["v"], ["s"], keepdims=1),
        h.make_node("Cast", ["i"], ["fi"], to=f32),
    ],
    [h.make_tensor_value_info("x", f32, [4, 5])],
    [h.make_tensor_value_info("s", f32, [1]), h.make_tensor_value_info("fi", f32, ["k"])],
    [
        h.make_tensor("t", f32, [], [0.5]),
        h.make_tensor("one", f32, [], [1.0]),
        h.make_tensor("shape1", i64, [1], [1]),
        h.make_tensor("flat", i64, [1], [20]),
    ],
)
# NonMaxSuppression with constant limits (as detectors export it), corner boxes: the selected
# (batch, class, box) rows, and the kept boxes themselves gathered by their index.
save(
    "nms_gather",
    [
        h.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_t"], ["sel"], name="nms"),
        h.make_node("Gather", ["sel", "col2"], ["bi"], axis=1),
        h.make_node("Squeeze", ["boxes", "zero"], ["b2"]),
        h.make_node("Gather", ["b2", "bi"], ["kept"], axis=0),
        h.make_node("Cast", ["sel"], ["fsel"], to=f32),
    ],
    [h.make_tensor_value_info("boxes", f32, [1, 8, 4]), h.make_tensor_value_info("scores", f32, [1, 3, 8])],
    [h.make_tensor_value_info("fsel", f32, ["n", 3]), h.make_tensor_value_info("kept", f32, ["n", 4])],
    [
        h.make_tensor("max_out", i64, [1], [3]),
        h.make_tensor("iou", f32, [1], [0.4]),
        h.make_tensor("score_t", f32, [1], [0.2]),
        h.make_tensor("col2", i64, [], [2]),
        h.make_tensor("zero", i64, [1], [0]),
    ],
)
# NonMaxSuppression with every limit a graph input (the standard's cases), centre-point boxes,
# two batches.
save(
    "nms_inputs",
    [
        h.make_node(
            "NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_t"], ["sel"], center_point_box=1
        ),
        h.make_node("Cast", ["sel"], ["fsel"], to=f32),
    ],
    [
        h.make_tensor_value_info("boxes", f32, [2, 6, 4]),
        h.make_tensor_value_info("scores", f32, [2, 2, 6]),
        h.make_tensor_value_info("max_out", i64, [1]),
        h.make_tensor_value_info("iou", f32, [1]),
        h.make_tensor_value_info("score_t", f32, [1]),
    ],
    [h.make_tensor_value_info("fsel", f32, ["n", 3])],
)
