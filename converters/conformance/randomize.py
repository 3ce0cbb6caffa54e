#!/usr/bin/env python3
"""The ONNX backend node test cases again, on fresh random data, expected outputs by ONNX Runtime.

    python converters/conformance/randomize.py CASES OUT [--seeds N] [--only SUBSTR] [--jobs J]

CASES is a folder `generate.py` wrote; OUT gets the same layout (`model.onnx`, `input_<i>.npy`,
`output_<i>.npy`, `case.json` per case), so the conformance example runs it unchanged:

    cargo run --release -p kestrel-rt-onnx --example conformance -- OUT --out DIR

Why: the standard's cases use fixed, often benign data (`test_celu` feeds only positive numbers,
so a Celu that drops `alpha` on negative inputs passes). Each in-scope case is written N times,
`<case>__rand<k>` (k = 0..N-1); a constant-parameter variant `<case>__constants` becomes
`<case>__constants__rand<k>`, the same random data as its base, baked into its initializers.

Inputs. Only floating-point inputs (f16, f32, f64) are redrawn, each from a generator seeded by
the case's name and k (runs are reproducible); integer and bool inputs (indices, shapes, axes,
conditions) are kept as they are. The rules, first that applies, per input:

  keep        the input holds NaN or ±inf (the case is about them), has at most one element
              (thresholds, ratios, exponents, Clip bounds, scalar operands), or is structural for
              its op (STRUCTURAL below: Resize/Upsample scales and roi, Range's operands,
              OneHot's indices and depth, RoiAlign/MaxRoiPool rois, NMS boxes, Clip bounds,
              Dropout's ratio): new values there would change the case's meaning or its shapes.
  constant    every element equal to v (a scale of ones, a zero bias): uniform in [v/2, 3v/2]
              (the sign kept), or in [-1, 1] for v = 0.
  ties        few distinct values (at most half the elements, four or more elements: masks,
              0/1 tensors, the `_select_last_index` ties): drawn from the original's own values,
              so the ties and the value set stay and the arrangement is new.
  widened+tail  the case's op is a sign-agnostic element-wise op (SIGN_AGNOSTIC: activations,
              sign/abs/neg, trigonometric functions defined everywhere, Add/Sub/Mul/Max/Min,
              softmax family): uniform in [-M, M], M = max(|min|, |max|, 4), so both signs and
              the saturating regions are reached, and 1 element in 8 (either sign) log-uniform in
              magnitude in [M, 25 M], where exp-, log1p- and tanh-based formulations overflow or
              cancel.
  widened     without the floor of 4 or the tail, an input that computes with any sign
              (SIGN_AGNOSTIC_INPUTS: convolution, matmul, pooling, reduction, normalization and
              data-movement inputs) whose original data is one-signed (np.random.rand).
  range       otherwise: uniform in [min, max] of the original input. An op's domain (Log,
              Sqrt and variances positive, Acos in [-1, 1], Acosh at least 1) is the original
              data's range, so it is kept without naming the ops.

Continuous draws make exact ties (argmax, comparisons, Round's halves) vanishingly rare.

Expectations. ONNX Runtime (CPU execution provider, graph optimizations disabled so ORT's own
fusions do not stand between the graph and the numbers), else `onnx.reference.ReferenceEvaluator`.
An engine is used only after it reproduces the case's own expected outputs on the original data
(the case's tolerances, at least rtol 1e-3 / atol 1e-5, f16 rtol 4e-3 / atol 1e-3): ORT where it
lacks an op or an opset, or where it departs from the standard, gives way to the reference
evaluator. case.json records the engine (`random.reference`). f16 cases: the expectation is the
engine's f16 result (ORT computes in f16 for most ops, the reference evaluator in numpy's f16);
the harness compares with its f16 tolerance as for the original cases.

Skipped, with the reason in OUT/randomize.json: out-of-scope cases; ops random by nature
(Bernoulli, Random*, Multinomial, Dropout in training mode with a non-zero ratio); cases with no
floating-point input to redraw (nothing new to test); cases neither engine reproduces on the
original data or runs on the new data; cases whose new expected outputs hold NaN or ±inf where
the original outputs held none.

Report: `random_report.py` reads the conformance results of the original and the random runs and
writes docs/onnx-conformance-random.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import shutil
import sys
import warnings
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper

RANDOM_OPS = {"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}

# Ops whose float inputs may take any sign: a one-signed original range is widened to both signs.
SIGN_AGNOSTIC = {
    "Abs", "Add", "Atan", "Ceil", "Celu", "Clip", "Cos", "Elu", "Erf", "Floor", "Gelu", "HardSigmoid",
    "HardSwish", "Hardmax", "Identity", "LeakyRelu", "LogSoftmax", "Max", "Mean", "Min", "Mish", "Mul",
    "Neg", "PRelu", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Softmax", "Softplus",
    "Softsign", "Sub", "Sum", "Swish", "Tanh", "ThresholdedRelu",
}
WIDEN_TO = 4.0
TAIL_FRACTION, TAIL_SPAN = 0.125, 25.0

# Inputs (by index; None: every float input) of ops that compute with any sign, though the
# standard's data for them is often one-signed (np.random.rand): a one-signed original range is
# widened to [-M, M], M = max(|min|, |max|) (no floor: the magnitudes stay). Variances, scales
# of quantization, grids, rois and weights of losses are left out: their sign means something.
SIGN_AGNOSTIC_INPUTS = {
    "ArgMax": {0}, "ArgMin": {0}, "Attention": None, "AveragePool": {0}, "BatchNormalization": {0, 1, 2, 3},
    "Col2Im": {0}, "Compress": {0}, "Concat": None, "Conv": None, "ConvTranspose": None, "CumProd": {0},
    "CumSum": {0}, "DFT": {0}, "DeformConv": {0, 1, 3}, "DepthToSpace": {0}, "Det": {0}, "Div": {0},
    "DynamicQuantizeLinear": {0}, "Einsum": None, "Expand": {0}, "Flatten": {0}, "GRU": None, "Gather": {0},
    "GatherElements": {0}, "GatherND": {0}, "Gemm": None, "GlobalAveragePool": {0}, "GlobalMaxPool": {0},
    "GridSample": {0}, "InstanceNormalization": None, "LSTM": None, "LayerNormalization": None,
    "LpNormalization": {0}, "LpPool": {0}, "MatMul": None, "MaxPool": {0}, "MaxRoiPool": {0}, "MaxUnpool": {0},
    "MeanVarianceNormalization": {0}, "NegativeLogLikelihoodLoss": {0}, "Pad": {0}, "QuantizeLinear": {0},
    "RNN": None, "ReduceL1": {0}, "ReduceL2": {0}, "ReduceLogSumExp": {0}, "ReduceMax": {0}, "ReduceMean": {0},
    "ReduceMin": {0}, "ReduceProd": {0}, "ReduceSum": {0}, "ReduceSumSquare": {0}, "Reshape": {0},
    "Resize": {0}, "ReverseSequence": {0}, "RoiAlign": {0}, "RotaryEmbedding": {0}, "Scatter": {0, 2},
    "ScatterElements": {0, 2}, "ScatterND": {0, 2}, "Slice": {0}, "SoftmaxCrossEntropyLoss": {0},
    "SpaceToDepth": {0}, "Split": {0}, "Squeeze": {0}, "Tile": {0}, "TopK": {0}, "Transpose": {0},
    "Unsqueeze": {0}, "Upsample": {0}, "Where": {1, 2},
}

# Float inputs (by index) that carry structure for their op, kept as they are.
STRUCTURAL = {
    "Resize": {1, 2},  # roi, scales
    "Upsample": {1},  # scales
    "Range": {0, 1, 2},  # the output's length
    "OneHot": {0, 1},  # indices, depth
    "RoiAlign": {1},  # rois
    "MaxRoiPool": {1},  # rois
    "NonMaxSuppression": {0, 3, 4},  # boxes, thresholds
    "Clip": {1, 2},  # bounds
    "Dropout": {1},  # ratio
}

FLOAT_KINDS = {"f"}


def allclose(expected: np.ndarray, found: np.ndarray, rtol: float, atol: float) -> bool:
    """numpy's allclose with NaN equal to NaN and shapes equal (a scalar and a one-element
    vector alike); integers and bools exact."""
    e, f = np.asarray(expected), np.asarray(found)
    if e.shape != f.shape and not (e.size == 1 and f.size == 1):
        return False
    if e.dtype.kind not in FLOAT_KINDS:
        return bool(np.array_equal(e.reshape(-1), f.reshape(-1).astype(e.dtype, copy=False)))
    e64, f64 = e.astype(np.float64).reshape(-1), f.astype(np.float64).reshape(-1)
    return bool(np.allclose(f64, e64, rtol=rtol, atol=atol, equal_nan=True))


def tolerances(meta: dict, dtype: np.dtype) -> tuple[float, float]:
    rtol, atol = (4e-3, 1e-3) if dtype == np.float16 else (1e-3, 1e-5)
    return max(rtol, meta["rtol"]), max(atol, meta["atol"])


def case_seed(name: str, k: int) -> int:
    return zlib.crc32(f"{name}/{k}".encode())


def redraw(a: np.ndarray, index: int, meta: dict, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """A new array for one input and the rule that drew it (see the header)."""
    if a.dtype.kind not in FLOAT_KINDS:
        return a, "kept (not floating-point)"
    op = meta["main_op"]
    if index in STRUCTURAL.get(op, ()):
        return a, "kept (structural)"
    if a.size <= 1:
        return a, "kept (one element)"
    x = a.astype(np.float64)
    if not np.all(np.isfinite(x)):
        return a, "kept (NaN or inf)"
    lo, hi = float(x.min()), float(x.max())
    distinct = np.unique(x)
    if len(distinct) == 1:
        v = lo
        lo, hi = (-1.0, 1.0) if v == 0 else sorted((0.5 * v, 1.5 * v))
        rule = "constant"
        new = rng.uniform(lo, hi, size=a.shape)
    elif a.size >= 4 and len(distinct) <= a.size // 2:
        rule = "ties"
        new = rng.choice(distinct, size=a.shape)
    elif op in SIGN_AGNOSTIC:
        # Both signs in [-M, M], and a tail of large magnitudes (exp, log1p and tanh
        # formulations that overflow or cancel far from zero).
        m = max(abs(lo), abs(hi), WIDEN_TO)
        new = rng.uniform(-m, m, size=a.shape)
        tail = rng.random(a.shape) < TAIL_FRACTION
        big = np.exp(rng.uniform(np.log(m), np.log(TAIL_SPAN * m), size=a.shape))
        new = np.where(tail, np.where(rng.random(a.shape) < 0.5, -big, big), new)
        lo, hi, rule = -TAIL_SPAN * m, TAIL_SPAN * m, "widened+tail"
    elif op in SIGN_AGNOSTIC_INPUTS and index in (SIGN_AGNOSTIC_INPUTS[op] or {index}) and (lo >= 0 or hi <= 0):
        m = max(abs(lo), abs(hi))
        lo, hi, rule = -m, m, "widened"
        new = rng.uniform(lo, hi, size=a.shape)
    else:
        rule = "range"
        new = rng.uniform(lo, hi, size=a.shape)
    return new.astype(a.dtype), f"{rule} [{lo:.4g}, {hi:.4g}]"


class Engine:
    """ONNX Runtime or the reference evaluator on one model."""

    def __init__(self, kind: str, model_bytes: bytes):
        self.kind = kind
        if kind == "onnxruntime":
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            so.log_severity_level = 4
            self.sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        else:
            from onnx.reference import ReferenceEvaluator

            self.sess = ReferenceEvaluator(onnx.load_from_string(model_bytes))

    def run(self, names: list[str], inputs: list[np.ndarray]) -> list[np.ndarray]:
        feeds = dict(zip(names, inputs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                outs = self.sess.run(None, feeds)
        return [np.asarray(o) for o in outs]


def reproduces(outs: list[np.ndarray], expected: list[np.ndarray], meta: dict) -> str | None:
    """None when `outs` match the expected outputs, else why not."""
    if len(outs) != len(expected):
        return f"{len(outs)} outputs, expected {len(expected)}"
    for i, (o, e) in enumerate(zip(outs, expected)):
        if o.dtype != e.dtype and not (o.dtype.kind == e.dtype.kind == "f"):
            return f"output {i} dtype {o.dtype}, expected {e.dtype}"
        rtol, atol = tolerances(meta, e.dtype)
        if not allclose(e, o, rtol, atol):
            return f"output {i} differs from the standard's expected output"
    return None


def finite_where_was(outs: list[np.ndarray], original: list[np.ndarray]) -> str | None:
    for i, (o, e) in enumerate(zip(outs, original)):
        if o.dtype.kind in FLOAT_KINDS and e.dtype.kind in FLOAT_KINDS:
            if not np.all(np.isfinite(o)) and np.all(np.isfinite(e)):
                return f"output {i} NaN or inf on the new data (finite on the original)"
    return None


def random_by_nature(meta: dict, inputs: list[np.ndarray]) -> str | None:
    ops = set(meta.get("ops", [])) | {meta["main_op"]}
    hit = sorted(ops & RANDOM_OPS)
    if hit:
        return f"random by nature ({', '.join(hit)})"
    if meta["main_op"] == "Dropout" and len(inputs) >= 3 and inputs[2].dtype == np.bool_ and inputs[2].size == 1:
        ratio = float(inputs[1].reshape(-1)[0]) if inputs[1].size == 1 else 0.5
        if bool(inputs[2].reshape(-1)[0]) and ratio != 0.0:
            return "random by nature (Dropout in training mode)"
    return None


def load_case(d: Path):
    meta = json.loads((d / "case.json").read_text())
    ins = [np.load(d / f"input_{i}.npy") for i in range(len(meta["inputs"]))]
    outs = [np.load(d / f"output_{i}.npy") for i in range(len(meta["outputs"]))]
    return meta, ins, outs


def randomize_case(job) -> list[dict]:
    """`randomize_one`, an unexpected error recorded as a skip."""
    try:
        return randomize_one(job)
    except Exception as ex:  # noqa: BLE001 - one bad case must not stop the run
        return [{"case": job[0].name, "seed": None, "op": "?", "skipped": f"randomize error: {type(ex).__name__}: {ex}"}]


def randomize_one(job) -> list[dict]:
    """Every seed of one standard case (and its constant-parameter variant): the records for
    randomize.json. Writes the case folders."""
    src, out, seeds, variant_dir = job
    meta, inputs, expected = load_case(src)
    name = meta["name"]
    records = []

    def skip(why: str, k=None):
        names = [name] + ([variant_dir.name] if variant_dir else [])
        return [{"case": n, "seed": k, "skipped": why, "op": meta["main_op"]} for n in names]

    why = random_by_nature(meta, inputs)
    if why:
        return skip(why)
    if not any(a.dtype.kind in FLOAT_KINDS for a in inputs):
        return skip("no floating-point input")
    model_bytes = (src / "model.onnx").read_bytes()
    names = [io["name"] for io in meta["inputs"]]
    engine, notes = None, []
    for kind in ("onnxruntime", "reference"):
        try:
            e = Engine(kind, model_bytes)
            bad = reproduces(e.run(names, inputs), expected, meta)
        except Exception as ex:  # noqa: BLE001 - any engine failure means: try the next
            bad = f"{type(ex).__name__}: {str(ex).splitlines()[0][:200] if str(ex) else ''}"
        if bad is None:
            engine = e
            break
        notes.append(f"{kind}: {bad}")
    if engine is None:
        return skip("no reference reproduces the original: " + "; ".join(notes))

    for k in range(seeds):
        rng = np.random.default_rng(case_seed(name, k))
        drawn = [redraw(a, i, meta, rng) for i, a in enumerate(inputs)]
        new_inputs, rules = [d[0] for d in drawn], [d[1] for d in drawn]
        if all(r.startswith("kept") for r in rules):
            records += skip("every floating-point input kept (structural, scalar or NaN/inf)", k)
            break
        try:
            new_outs = engine.run(names, new_inputs)
        except Exception as ex:  # noqa: BLE001
            records += skip(f"{engine.kind} fails on the new data: {str(ex).splitlines()[0][:200]}", k)
            continue
        bad = finite_where_was(new_outs, expected)
        if bad:
            records += skip(bad, k)
            continue
        new_outs = [o.astype(e.dtype) if o.dtype != e.dtype else o for o, e in zip(new_outs, expected)]
        info = {
            "source": name,
            "seed": k,
            "rng_seed": case_seed(name, k),
            "reference": engine.kind,
            "reference_note": "; ".join(notes) or None,
            "input_rules": rules,
        }
        if any(a.dtype == np.float16 for a in inputs + expected):
            info["f16"] = "expected values are the engine's f16 results; compared with the f16 tolerance"
        case_name = f"{name}__rand{k}"
        write_case(out / case_name, dict(meta, name=case_name, random=info), model_bytes, new_inputs, new_outs)
        records.append({"case": case_name, "seed": k, "op": meta["main_op"], "reference": engine.kind,
                        "input_rules": rules})
        if variant_dir is not None:
            vmeta, _, _ = load_case(variant_dir)
            vmodel = onnx.load(variant_dir / "model.onnx")
            # Only redrawn inputs are re-baked, each at its initializer's own shape (a 0-d
            # initializer may have been saved as a one-element .npy).
            baked = {n: a for n, a, r in zip(names[1:], new_inputs[1:], rules[1:]) if not r.startswith("kept")}
            for init in vmodel.graph.initializer:
                if init.name in baked:
                    a = baked[init.name].reshape(tuple(init.dims))
                    init.CopyFrom(onnx.numpy_helper.from_array(a, init.name))
            vname = f"{vmeta['name']}__rand{k}"
            vinfo = dict(info, source=vmeta["name"])
            write_case(out / vname, dict(vmeta, name=vname, random=vinfo), vmodel.SerializeToString(),
                       new_inputs[:1], new_outs)
            records.append({"case": vname, "seed": k, "op": meta["main_op"], "reference": engine.kind,
                            "input_rules": rules[:1] + [f"baked: {r}" for r in rules[1:]]})
    return records


def write_case(d: Path, meta: dict, model_bytes: bytes, inputs, outputs):
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "model.onnx").write_bytes(model_bytes)
    for what, arrays in (("input", inputs), ("output", outputs)):
        for i, a in enumerate(arrays):
            np.save(d / f"{what}_{i}.npy", np.ascontiguousarray(a), allow_pickle=False)
    for key, arrays in (("inputs", inputs), ("outputs", outputs)):
        for io, a in zip(meta[key], arrays):
            io["dtype"], io["shape"] = str(a.dtype), list(a.shape)
    (d / "case.json").write_text(json.dumps(meta, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", type=Path, help="a folder generate.py wrote")
    ap.add_argument("out", type=Path, help="folder to write the random cases into (replaced case by case)")
    ap.add_argument("--seeds", type=int, default=2, help="random data sets per case (default 2)")
    ap.add_argument("--only", default=None, help="only cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=max(1, (multiprocessing.cpu_count() or 2) - 0))
    args = ap.parse_args()

    jobs, records = [], []
    for d in sorted(p for p in args.cases.iterdir() if (p / "case.json").is_file()):
        meta = json.loads((d / "case.json").read_text())
        if meta.get("variant"):
            continue
        if args.only and args.only not in meta["name"]:
            continue
        if meta["out_of_scope"]:
            records.append({"case": meta["name"], "seed": None, "op": meta["main_op"], "skipped": "out of scope"})
            continue
        vdir = args.cases / (meta["name"] + "__constants")
        jobs.append((d, args.out, args.seeds, vdir if (vdir / "case.json").is_file() else None))
    args.out.mkdir(parents=True, exist_ok=True)
    # A case an earlier run wrote and this one skips must not be run again.
    for old in args.out.iterdir():
        if (old / "case.json").is_file() and "__rand" in old.name:
            shutil.rmtree(old)
    with multiprocessing.Pool(args.jobs) as pool:
        for recs in pool.imap_unordered(randomize_case, jobs, chunksize=4):
            records += recs
    records.sort(key=lambda r: (r["case"], r["seed"] if r["seed"] is not None else -1))
    written = [r for r in records if "skipped" not in r]
    skipped = Counter(r["skipped"].split(":")[0] for r in records if "skipped" in r)
    summary = {
        "source": str(args.cases),
        "generated": datetime.date.today().isoformat(),
        "command": "python converters/conformance/randomize.py " + " ".join(sys.argv[1:]),
        "onnx_version": onnx.__version__,
        "onnxruntime_version": __import__("onnxruntime").__version__,
        "numpy_version": np.__version__,
        "seeds": args.seeds,
        "written": len(written),
        "written_standard": sum(1 for r in written if "__constants" not in r["case"]),
        "by_reference": dict(Counter(r["reference"] for r in written)),
        "skipped_by_reason": dict(skipped.most_common()),
        "cases": records,
    }
    (args.out / "randomize.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{len(written)} random cases written to {args.out} ({summary['written_standard']} standard, "
          f"the rest constant-parameter variants); by reference: {summary['by_reference']}")
    for why, n in skipped.most_common():
        print(f"  skipped {n:5d}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
