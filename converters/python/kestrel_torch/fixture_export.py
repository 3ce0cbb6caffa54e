"""What the small test-fixture exporters share (`query_rows.py`, `const_queries.py`, `sinks.py`,
`convit.py`): export one model with the legacy exporter (or the dynamo one where asked; opset 17, a
dynamic batch axis), check onnxruntime
against torch on the whole batch, and save `<stem>.onnx`, `<stem>_in.npy`, `<stem>_out.npy`
(onnxruntime's output, the reference the Rust tests compare with)."""

import argparse
import os
from collections.abc import Callable, Iterable

import numpy as np
import onnxruntime as ort
import torch


def export_fixture(stem: str, model: torch.nn.Module, x: torch.Tensor, out: str, dynamo: bool = False) -> None:
    """Exports `model` at one sample of `x` (with the dynamo exporter where `dynamo`, at the whole
    batch, since it fixes a batch of 1, its weights kept in the one file), checks onnxruntime on all of `x` against torch within 1e-4 of the
    output's scale, and saves the fixture files under `out`."""
    path = os.path.join(out, f"{stem}.onnx")
    if dynamo:
        prog = torch.onnx.export(model, (x,), input_names=["x"], output_names=["y"], opset_version=17,
                                 dynamic_shapes=({0: torch.export.Dim("batch")},), dynamo=True)
        prog.save(path, external_data=False)
    else:
        torch.onnx.export(model, (x[:1],), path, input_names=["x"], output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(y - want).max() <= 1e-4 * np.abs(want).max(), f"{stem}: onnxruntime differs from torch"
    np.save(os.path.join(out, f"{stem}_in.npy"), x.numpy())
    np.save(os.path.join(out, f"{stem}_out.npy"), y.astype(np.float32))
    print(stem, os.path.getsize(path), "bytes")


def main(doc: str, names: Iterable[str], export: Callable[[str, str], None]) -> None:
    """`--out DIR [--only SUBSTRING]`: `export(name, DIR)` for each of `names` matching."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    for name in names:
        if args.only in name:
            export(name, args.out)
