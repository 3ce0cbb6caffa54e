#!/usr/bin/env python3
"""Writes the ONNX backend *node* test cases as files the conformance harness reads.

    python converters/conformance/generate.py OUT            # every case (1,884 in onnx 1.23.2)
    python converters/conformance/generate.py OUT --sample   # the CI sample (see --help)

For each case `OUT/<case name>/` gets `model.onnx`, `input_<i>.npy` and `output_<i>.npy` (the
case's first data set) and `case.json`: the graph's op types, the op under test (`main_op`),
the opset, each input's and output's name, element type and shape, the case's own tolerances,
and `out_of_scope` (a reason, or null).

A case is out of scope only for its types and domains, never for its op: sequence, optional,
map or sparse values; string tensors; element types Kestrel never takes as activations
(complex, bfloat16, the 8-, 6-, 4- and 2-bit types); training ops; non-default domains; data
numpy cannot save as a plain `.npy`. An op the converter does not take is a failure, counted by
the harness, not a reason to leave a case out.

Each in-scope case with more than one graph input also gets a *constant-parameter* variant,
`OUT/<case name>__constants/`: the same model and data with every input but the first stored in
the model as an initializer holding the case's data (`variant: "constants"` in case.json). The
standard feeds weights, scales, axes and shapes as graph inputs; exported models hold them as
constants, which is what an ahead-of-time converter (Kestrel, tract's optimiser, TFLite) plans
around. The harness reports the variant apart from the standard cases.

`python -m onnx.backend.test.cmd_tools generate-data` writes nothing for node cases in onnx
1.23, so the cases are collected in-process.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import shutil
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
from onnx import TensorProto
from onnx.backend.test.case.node import collect_testcases

DEFAULT_DOMAINS = ("", "ai.onnx")
TRAINING_DOMAIN = "ai.onnx.preview.training"

# Element types Kestrel never takes as activations, with the reason written to case.json.
NEVER_ACTIVATIONS = {
    TensorProto.STRING: "string tensors",
    TensorProto.COMPLEX64: "complex element type",
    TensorProto.COMPLEX128: "complex element type",
    TensorProto.BFLOAT16: "bfloat16 element type",
}
for _name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0"):
    NEVER_ACTIVATIONS[getattr(TensorProto, _name)] = "float8 element type"
for _name in ("FLOAT4E2M1", "FLOAT6E2M3", "FLOAT6E3M2"):
    if hasattr(TensorProto, _name):
        NEVER_ACTIVATIONS[getattr(TensorProto, _name)] = "4/6-bit float element type"
for _name in ("INT4", "UINT4", "INT2", "UINT2"):
    if hasattr(TensorProto, _name):
        NEVER_ACTIVATIONS[getattr(TensorProto, _name)] = "int4/uint4/int2/uint2 element type"

# numpy dtypes saved as plain .npy files (what the Rust harness reads).
NPY_KINDS = {"f", "i", "u", "b"}


def elem_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type).lower()


def value_info(vi: onnx.ValueInfoProto) -> dict:
    """Name, element type and declared shape of a graph input or output (or its non-tensor kind)."""
    t = vi.type
    kind = t.WhichOneof("value")
    out = {"name": vi.name, "kind": kind}
    if kind == "tensor_type":
        out["elem_type"] = elem_name(t.tensor_type.elem_type)
        if t.tensor_type.HasField("shape"):
            out["declared_shape"] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.tensor_type.shape.dim
            ]
    return out


def all_nodes(graph: onnx.GraphProto):
    """Every node of the graph, those in subgraphs (If, Loop, Scan bodies) included."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from all_nodes(g)


def as_array(value):
    """A data set value as a numpy array: numpy scalars and TensorProtos converted, anything
    else (sequences, optionals, maps) returned as it is."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, TensorProto):
        return onnx.numpy_helper.to_array(value)
    return value


def scope_reason(model: onnx.ModelProto, inputs, outputs) -> str | None:
    """Why the case is out of scope (types and domains only), or None."""
    for node in all_nodes(model.graph):
        if node.domain == TRAINING_DOMAIN:
            return f"training op ({TRAINING_DOMAIN})"
        if node.domain not in DEFAULT_DOMAINS:
            return f"non-default domain {node.domain}"
    for vi in list(model.graph.input) + list(model.graph.output):
        kind = vi.type.WhichOneof("value")
        if kind == "sequence_type":
            return "sequence type"
        if kind == "optional_type":
            return "optional type"
        if kind == "map_type":
            return "map type"
        if kind == "sparse_tensor_type":
            return "sparse tensor type"
        if kind != "tensor_type":
            return f"{kind} value"
        why = NEVER_ACTIVATIONS.get(vi.type.tensor_type.elem_type)
        if why:
            return why
    for what, arrays in (("input", inputs), ("output", outputs)):
        for a in arrays:
            if not isinstance(a, np.ndarray):
                return f"{what} data of type {type(a).__name__} (not an array)"
            if a.dtype.kind not in NPY_KINDS:
                return f"{what} data of numpy dtype {a.dtype} (not saved as a plain .npy)"
    return None


def main_op(case, by_name: dict) -> str:
    """The op under test: the graph's only node, the base case's op for an `_expanded` case
    (a function body), or the node whose type names the case."""
    ops = [n.op_type for n in case.model.graph.node]
    if len(set(ops)) == 1:
        return ops[0]
    if "_expanded" in case.name:
        base = by_name.get(case.name.split("_expanded")[0])
        if base is not None and len({n.op_type for n in base.model.graph.node}) == 1:
            return base.model.graph.node[0].op_type
    name = case.name.removeprefix("test_").replace("_", "").lower()
    matches = [op for op in ops if name.startswith(op.lower())]
    if matches:
        return max(matches, key=len)
    return next((op for op in ops if op != "Constant"), ops[0] if ops else "?")


def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def describe(case, by_name: dict) -> tuple[dict, list[tuple[str, bytes]]]:
    """case.json's contents and the files to write (empty when data cannot be saved)."""
    model = case.model
    inputs, outputs = case.data_sets[0] if case.data_sets else ([], [])
    inputs, outputs = [as_array(a) for a in inputs], [as_array(a) for a in outputs]
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    reason = scope_reason(model, inputs, outputs)
    files = [("model.onnx", model.SerializeToString())]
    arrays = {"inputs": [], "outputs": []}
    if reason is None:
        for what, data in (("input", inputs), ("output", outputs)):
            for i, a in enumerate(data):
                try:
                    files.append((f"{what}_{i}.npy", npy_bytes(a)))
                except (ValueError, TypeError) as e:
                    reason = f"{what} {i} cannot be saved as .npy ({e})"
                    break
                arrays[f"{what}s"].append({"dtype": str(a.dtype), "shape": list(a.shape)})
    io_info = {"inputs": [value_info(v) for v in model.graph.input], "outputs": [value_info(v) for v in model.graph.output]}
    for key in ("inputs", "outputs"):
        for info, arr in zip(io_info[key], arrays[key]):
            info.update(arr)
    meta = {
        "name": case.name,
        "main_op": main_op(case, by_name),
        "ops": [n.op_type for n in model.graph.node],
        "domains": sorted({n.domain or "ai.onnx" for n in all_nodes(model.graph)}),
        "opset": opset,
        "expanded": "_expanded" in case.name,
        "rtol": case.rtol,
        "atol": case.atol,
        "inputs": io_info["inputs"],
        "outputs": io_info["outputs"],
        "out_of_scope": reason,
        "variant": None,
    }
    return meta, (files if reason is None else files[:1])


VARIANT_SUFFIX = "__constants"


def constants_variant(case, meta: dict, files: list[tuple[str, bytes]]):
    """The constant-parameter variant of an in-scope case with two or more graph inputs (every
    input but the first an initializer holding the case's data), or None."""
    model = case.model
    if meta["out_of_scope"] is not None or len(model.graph.input) < 2:
        return None
    inputs = [as_array(a) for a in case.data_sets[0][0]]
    if len(inputs) != len(model.graph.input):
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    baked = list(m.graph.input[1:])
    del m.graph.input[1:]
    for vi, a in zip(baked, inputs[1:]):
        m.graph.initializer.append(onnx.numpy_helper.from_array(a, vi.name))
    vmeta = dict(meta, name=meta["name"] + VARIANT_SUFFIX, variant="constants", inputs=meta["inputs"][:1])
    keep = [(n, b) for n, b in files if n.startswith("output_") or n == "input_0.npy"]
    return vmeta, [("model.onnx", m.SerializeToString())] + keep


def pick_sample(metas: dict, sizes: dict, per_op: int, max_case_bytes: int, max_total_bytes: int) -> list[str]:
    """A deterministic sample: per op (alphabetical) and per variant (the standard form, the
    constant-parameter one), up to `per_op` in-scope cases, the
    original form before `_expanded` ones, then the smallest, then by name; cases larger than
    `max_case_bytes` are skipped and the total stays under `max_total_bytes`."""
    by_op = defaultdict(list)
    for name, m in metas.items():
        if m["out_of_scope"] is None and sizes[name] <= max_case_bytes:
            by_op[(m["main_op"], m["variant"] or "")].append(name)
    picked, total = [], 0
    for op in sorted(by_op):
        names = sorted(by_op[op], key=lambda n: (metas[n]["expanded"], sizes[n], n))
        for name in names[:per_op]:
            if total + sizes[name] > max_total_bytes:
                continue
            picked.append(name)
            total += sizes[name]
    return sorted(picked)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder to write the cases into (replaced case by case)")
    ap.add_argument("--sample", action="store_true", help="write only a deterministic sample (the CI sample)")
    ap.add_argument("--per-op", type=int, default=1, help="with --sample: cases per op (default 1)")
    ap.add_argument("--max-case-bytes", type=int, default=24_000, help="with --sample: largest case kept")
    ap.add_argument("--max-total-bytes", type=int, default=3_000_000, help="with --sample: total size")
    ap.add_argument("--only", default=None, help="only cases whose name contains this")
    args = ap.parse_args()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    cases = [c for c in cases if c.kind == "node"]
    by_name = {c.name: c for c in cases}
    if args.only:
        cases = [c for c in cases if args.only in c.name]

    metas, files = {}, {}
    for case in cases:
        metas[case.name], files[case.name] = describe(case, by_name)
        variant = constants_variant(case, metas[case.name], files[case.name])
        if variant is not None:
            metas[variant[0]["name"]], files[variant[0]["name"]] = variant
    sizes = {n: sum(len(b) for _, b in fs) for n, fs in files.items()}
    names = sorted(metas)
    if args.sample:
        names = pick_sample(metas, sizes, args.per_op, args.max_case_bytes, args.max_total_bytes)

    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        d = args.out / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        for fname, data in files[name]:
            (d / fname).write_bytes(data)
        (d / "case.json").write_text(json.dumps(metas[name], indent=1) + "\n")
    suite = {
        "onnx_version": onnx.__version__,
        "generated": datetime.date.today().isoformat(),
        "command": "python converters/conformance/generate.py " + " ".join(sys.argv[1:]),
        "cases": len(names),
    }
    if not args.sample:
        (args.out / "suite.json").write_text(json.dumps(suite, indent=1) + "\n")
    in_scope = sum(1 for n in names if metas[n]["out_of_scope"] is None)
    ops = len({metas[n]["main_op"] for n in names})
    total = sum(sizes[n] for n in names)
    print(
        f"{len(names)} cases ({in_scope} in scope, {ops} ops, {total / 1e6:.2f} MB of data) "
        f"written to {args.out} (onnx {onnx.__version__})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
