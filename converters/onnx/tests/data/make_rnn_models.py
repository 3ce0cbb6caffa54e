"""Generates the recurrent test models of kestrel-rt-onnx (run once; the outputs are committed).

    python converters/onnx/tests/data/make_rnn_models.py

(it writes beside itself from any working directory; it needs torch, onnx, onnxruntime and numpy,
as listed in converters/python/requirements.txt).

* `lstm_bi2.onnx`: nn.LSTM, 2 layers, bidirectional, batch_first, the legacy exporter; the head
  reads Y (`out[:, -1]`), Y_h (`h_n[-1]`) and Y_c (`c_n[0]`).
* `gru_bi2.onnx`: nn.GRU, 2 layers, bidirectional, time-major (the model transposes its
  batch-first input), a learned non-zero initial state; the head reads `out.mean(0)` and
  `h_n[-1]`.
* `lstm_reverse.onnx`: one ONNX LSTM node with `direction = reverse` (PyTorch never writes
  one), written with onnx.helper, initial states given.
* `lstm_clip.onnx`: an LSTM with `clip`, which does not convert (the test checks the error
  names it).
* `gru_lbr0.onnx`: a GRU with `linear_before_reset = 0` (ONNX's default form), which converts
  and is checked against tract on `lstm_reverse_in.npy` (the same input shape).

Each model has a symbolic batch axis; `<name>_in.npy` holds a batch of 3 inputs and
`<name>_out.npy` onnxruntime's output for it. Every file stays far below 200 KB.
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
T, I, H, CLASSES, BATCH = 6, 8, 12, 5, 3


class LstmBi2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(I, H, num_layers=2, bidirectional=True, batch_first=True)
        self.head = torch.nn.Linear(2 * H + H + H, CLASSES)

    def forward(self, x):
        out, (h_n, c_n) = self.rnn(x)
        return self.head(torch.cat([out[:, -1], h_n[-1], c_n[0]], dim=1))


class GruBi2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(I, H, num_layers=2, bidirectional=True)
        self.h0 = torch.nn.Parameter(torch.randn(4, 1, H) * 0.5)
        self.head = torch.nn.Linear(2 * H + H, CLASSES)

    def forward(self, x):
        xt = x.transpose(0, 1)
        out, h_n = self.rnn(xt, self.h0.expand(-1, x.shape[0], -1).contiguous())
        return self.head(torch.cat([out.mean(0), h_n[-1]], dim=1))


def export_torch(name, model, x):
    path = os.path.join(HERE, f"{name}.onnx")
    model.eval()
    torch.onnx.export(
        model,
        (x,),
        path,
        input_names=["x"],
        output_names=["logits"],
        dynamic_axes={"x": {0: "N"}, "logits": {0: "N"}},
        opset_version=17,
        dynamo=False,
    )
    return path


def recurrent_node_model(name, op, direction, attrs, with_states):
    """One LSTM/GRU node on a batch-first input [N, T, I] (transposed to time-major), the last
    hidden state out as [N, dirs·H]."""
    rng = np.random.default_rng(11)
    gates = 4 if op == "LSTM" else 3
    dirs = 2 if direction == "bidirectional" else 1
    init = lambda n, shape, s: numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), n)
    inits = [
        init("W", [dirs, gates * H, I], 1 / np.sqrt(I)),
        init("R", [dirs, gates * H, H], 1 / np.sqrt(H)),
        init("B", [dirs, 2 * gates * H], 0.3),
    ]
    ins = ["xt", "W", "R", "B", ""]
    if with_states:
        # Initial states [dirs, 1, H] broadcast over the batch with Expand.
        inits.append(init("h0", [dirs, 1, H], 0.5))
        ins.append("h0b")
        if op == "LSTM":
            inits.append(init("c0", [dirs, 1, H], 0.5))
            ins.append("c0b")
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2])]
    if with_states:
        nodes += [
            helper.make_node("Shape", ["x"], ["xs"], start=0, end=1),
            helper.make_node("Concat", ["one", "xs", "hdim"], ["st_shape"], axis=0),
            helper.make_node("Expand", ["h0", "st_shape"], ["h0b"]),
        ]
        inits += [
            numpy_helper.from_array(np.array([dirs], dtype=np.int64), "one"),
            numpy_helper.from_array(np.array([H], dtype=np.int64), "hdim"),
        ]
        if op == "LSTM":
            nodes.append(helper.make_node("Expand", ["c0", "st_shape"], ["c0b"]))
    outs = ["", "yh"]
    nodes.append(helper.make_node(op, ins, outs, hidden_size=H, direction=direction, **attrs))
    nodes += [
        helper.make_node("Transpose", ["yh"], ["yhb"], perm=[1, 0, 2]),
        helper.make_node("Flatten", ["yhb"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", T, I])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", dirs * H])],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    path = os.path.join(HERE, f"{name}.onnx")
    onnx.save(m, path)
    return path


def save_io(name, path, x):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    np.save(os.path.join(HERE, f"{name}_in.npy"), x)
    np.save(os.path.join(HERE, f"{name}_out.npy"), y.astype(np.float32))
    print(f"{name}: {os.path.getsize(path)} bytes, output {y.shape}")


def main():
    torch.manual_seed(3)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((BATCH, T, I)).astype(np.float32)
    xt = torch.from_numpy(x)
    for name, model in [("lstm_bi2", LstmBi2()), ("gru_bi2", GruBi2())]:
        path = export_torch(name, model, xt)
        save_io(name, path, x)
    path = recurrent_node_model("lstm_reverse", "LSTM", "reverse", {}, True)
    save_io("lstm_reverse", path, x)
    recurrent_node_model("lstm_clip", "LSTM", "forward", {"clip": 2.0}, False)
    recurrent_node_model("gru_lbr0", "GRU", "forward", {"linear_before_reset": 0}, False)


if __name__ == "__main__":
    main()
