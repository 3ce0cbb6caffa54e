"""Kestrel vs onnxruntime on the real-world zoo: one thread, batch 1, in one run.

Usage (release build of the CLI first; onnxruntime and numpy from PyPI)::

    cargo build --release -p kestrel-rt-cli
    python3 benches/zoo_vs_ort.py --out benches/results/NAME/zoo [--exporter all|legacy17,dynamo18] [--reps 7]

For every zoo export (``converters/zoo/*-EXPORTER``; ``--exporter all``, the default: every
exporter, legacy and dynamo) that converts: the ONNX file is converted
with ``kestrel convert`` (f32 and int8 weights), then Kestrel (``kestrel bench --json``, one
thread, batch 1) and onnxruntime (``intra_op_num_threads=1``, sequential, all graph
optimisations, batch 1) are timed back to back, alternating, ``--reps`` passes each; a pass runs
``--samples`` single-sample inferences. Inputs are synthetic for both (uniform [0, 1) floats;
integer inputs ``i mod 2``, a valid 0/1 mask and valid token ids). Reported: median µs/sample,
and the ratio Kestrel / onnxruntime (below 1 = Kestrel faster), checked against issue 14's
targets (transformers and RNNs at most 0.7× onnxruntime's time, CNNs at most 1.0×, f32
weights). Writes ``table.md`` and ``results.json`` (with the machine) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]

# Issue 14's targets: Kestrel f32 time over onnxruntime's, per family.
TARGETS = {"transformer": 0.7, "rnn": 0.7, "cnn": 1.0}


def machine_info() -> dict:
    """The CPU (as /proc/cpuinfo names it), its logical cores, onnxruntime's and Python's versions."""
    return {
        "cpu": next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                     if l.startswith("model name")), platform.processor()),
        "cores": __import__("os").cpu_count(),
        "onnxruntime": ort.__version__,
        "python": platform.python_version(),
    }


def ort_session(path: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def feeds(sess: ort.InferenceSession, meta: dict) -> dict:
    out = {}
    for spec in meta["inputs"]:
        shape = [1] + spec["shape"][1:]
        n = int(np.prod(shape))
        if spec["dtype"].startswith("int"):
            out[spec["name"]] = (np.arange(n) % 2).astype(np.int64).reshape(shape)
        else:
            out[spec["name"]] = np.random.default_rng(0).random(shape, dtype=np.float32)
    return out


def time_ort(sess: ort.InferenceSession, f: dict, samples: int) -> float:
    t = time.perf_counter()
    for _ in range(samples):
        sess.run(None, f)
    return (time.perf_counter() - t) / samples * 1e6


def time_kestrel(cli: Path, kes: Path, samples: int) -> float:
    r = subprocess.run(
        [str(cli), "bench", str(kes), "--samples", str(samples), "--reps", "1", "--threads", "1", "--batch", "1",
         "--json"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(r.stdout)["us_per_sample"]


def convert_configs(cli: Path, d: Path, work: Path, configs: dict, optional=lambda who, stderr: False) -> dict:
    """``d/model.onnx`` converted once per configuration (name -> ``kestrel convert`` flags) to
    ``work/{d.name}.{name}.kes``: name -> path, or ``{}`` (with a message) when one does not
    convert. A configuration that fails where ``optional(name, stderr)`` holds is left out."""
    kes = {}
    for who, flags in configs.items():
        path = work / f"{d.name}.{who}.kes"
        r = subprocess.run([str(cli), "convert", str(d / "model.onnx"), "-o", str(path), *flags],
                           capture_output=True, text=True)
        if r.returncode != 0 and optional(who, r.stderr):
            continue
        if r.returncode != 0:
            print(f"{d.name} ({who}): does not convert: {r.stderr.strip().splitlines()[-1]}", file=sys.stderr)
            return {}
        kes[who] = path
    return kes


def time_alternating(cli: Path, sess: ort.InferenceSession, feed: dict, kes: dict, reps: int,
                     samples: int) -> dict:
    """``reps`` passes of onnxruntime and of each Kestrel model in ``kes`` (name -> .kes), the
    order rotated by one each pass: µs/sample per pass, by name ("ort" for onnxruntime)."""
    times = {"ort": [], **{k: [] for k in kes}}
    order = list(times)
    for rep in range(reps):
        for who in order[rep % len(order):] + order[: rep % len(order)]:
            if who == "ort":
                times[who].append(time_ort(sess, feed, samples))
            else:
                times[who].append(time_kestrel(cli, kes[who], samples))
    return times


def write_results(out: Path, machine: dict, fields: dict, rows: list, lines: list) -> None:
    """``results.json`` (the machine, ``fields``, the rows) and ``table.md`` (``lines``) in ``out``."""
    (out / "results.json").write_text(json.dumps({"machine": machine, **fields, "rows": rows}, indent=1) + "\n")
    (out / "table.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--exporter", default="all", help="all, or comma-separated (legacy17,dynamo18,dynamo20)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--cli", type=Path, default=ROOT / "target/release/kestrel")
    ap.add_argument("--only", default="", help="comma-separated model names (e.g. resnet18_w8,small_cnn): "
                    "time only these, print the table, write nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = ROOT / "target/zoo-bench"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    exporters = None if args.exporter == "all" else set(args.exporter.split(","))
    dirs = [d for d in sorted((ROOT / "converters/zoo").iterdir())
            if (d / "meta.json").exists() and (exporters is None or d.name.rsplit("-", 1)[1] in exporters)]
    for d in dirs:
        meta = json.loads((d / "meta.json").read_text())
        only = [m for m in args.only.split(",") if m]
        if only and d.name.rsplit("-", 1)[0] not in only:
            continue
        kes = convert_configs(args.cli, d, work, {w: ["--weights", w] for w in ("f32", "int8")})
        if not kes:
            continue
        sess = ort_session(d / "model.onnx")
        f = feeds(sess, meta)
        time_ort(sess, f, 5)  # warm-up
        times = time_alternating(args.cli, sess, f, kes, args.reps, args.samples)
        med = {k: statistics.median(v) for k, v in times.items()}
        target = TARGETS.get(meta["family"], 1.0)
        row = {
            "model": d.name, "family": meta["family"], "library": meta["library"],
            "ort_us": med["ort"], "kestrel_f32_us": med["f32"], "kestrel_int8_us": med["int8"],
            "f32_over_ort": med["f32"] / med["ort"], "int8_over_ort": med["int8"] / med["ort"],
            "target": target, "meets_target": med["f32"] / med["ort"] <= target,
            "samples": times,
        }
        rows.append(row)
        print(f"{d.name:30} ort {med['ort']:9.1f} µs  kestrel f32 {med['f32']:9.1f} ({row['f32_over_ort']:.2f}×)"
              f"  int8 {med['int8']:9.1f} ({row['int8_over_ort']:.2f}×)", flush=True)
    if args.only:
        return 0
    machine = machine_info()
    lines = [
        f"# Kestrel vs onnxruntime {ort.__version__} on the zoo ({args.exporter} exports)\n",
        f"{machine['cpu']}, one thread, batch 1, median of {args.reps} alternating passes of {args.samples} "
        "samples; synthetic inputs. Ratio = Kestrel time / onnxruntime time (below 1: Kestrel faster).\n",
        "Target: f32 / ORT at most 0.7 for transformers and RNNs, 1.0 for CNNs. "
        f"{sum(r['meets_target'] for r in rows)} of {len(rows)} exports meet it.\n",
        "| model | family | onnxruntime µs | Kestrel f32 µs | f32 / ORT | target | Kestrel int8 µs | int8 / ORT |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "≤" if r["meets_target"] else "**>**"
        lines.append(f"| {r['model']} | {r['family']} | {r['ort_us']:.1f} | {r['kestrel_f32_us']:.1f} | "
                     f"{r['f32_over_ort']:.2f} | {mark} {r['target']:.1f} | {r['kestrel_int8_us']:.1f} | "
                     f"{r['int8_over_ort']:.2f} |")
    write_results(args.out, machine, {"exporter": args.exporter, "reps": args.reps, "samples": args.samples},
                  rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
