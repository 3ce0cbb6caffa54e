"""Where a model's time goes, Kestrel against onnxruntime, op by op (issue 37).

Profiles one ONNX model in onnxruntime (its built-in profiler, one thread unless ``--threads``,
all graph optimisations) and its Kestrel conversion (``kestrel profile --json``), on the same
seeded input, and prints:

* the time per op kind on each side (onnxruntime's fused kernels keep their ONNX names: a
  ``Conv`` there may include its activation and residual, as Kestrel's ``Conv2d`` does);
* every convolution side by side, matched in execution order by their multiply-adds (within
  2 %), with the input/weight/output shapes from onnxruntime's profile, sorted by the time
  Kestrel loses (``--top N`` rows): the list of layers to look at first.

Usage::

    cargo build --release -p kestrel-rt-cli
    kestrel convert model.onnx -o model.kes
    python3 benches/ort_node_compare.py model.onnx model.kes [--cli target/release/kestrel] \
        [--runs 20] [--threads 1] [--top 15] [--json out.json]

Both sides' numbers are means over ``--runs`` runs after warm-ups; on a shared machine run it
twice. Needs numpy and onnxruntime (PyPI).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def feeds_for(sess, seed: int = 0) -> dict:
    """Uniform [0, 1) floats and token ids ``i mod 2``, as ``kestrel bench``'s synthetic inputs."""
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        n = int(np.prod(shape))
        if "int" in i.type:
            out[i.name] = (np.arange(n) % 2).astype(np.int64).reshape(shape)
        else:
            out[i.name] = np.random.default_rng(seed).random(shape, dtype=np.float32)
    return out


def ort_profile(onnx: Path, runs: int, threads: int) -> list[dict]:
    """Mean kernel time per node (µs), in execution order, with op name and shapes."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(str(onnx), so, providers=["CPUExecutionProvider"])
        feed = feeds_for(sess)
        for _ in range(5):
            sess.run(None, feed)
        for _ in range(runs):
            sess.run(None, feed)
        events = json.loads(Path(sess.end_profiling()).read_text())
    nodes: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        a = e["args"]
        n = nodes.setdefault(e["name"], {"op": a.get("op_name", "?"), "durs": [],
                                         "inputs": [list(x.values())[0] for x in a.get("input_type_shape", [])],
                                         "outputs": [list(x.values())[0] for x in a.get("output_type_shape", [])]})
        n["durs"].append(e["dur"])
    out = []
    for name, n in nodes.items():
        durs = n["durs"][-runs:]
        out.append({"name": name, "op": n["op"], "us": sum(durs) / len(durs), "inputs": n["inputs"],
                    "outputs": n["outputs"]})
    return out


def kestrel_profile(cli: Path, kes: Path, runs: int, threads: int) -> dict:
    r = subprocess.run([str(cli), "profile", str(kes), "--threads", str(threads), "--runs", str(runs), "--json"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def conv_macs(node: dict) -> int | None:
    """Multiply-adds of an onnxruntime Conv node from its weight and output shapes."""
    if len(node["inputs"]) < 2 or not node["outputs"]:
        return None
    w, y = node["inputs"][1], node["outputs"][0]
    return int(np.prod(y)) * int(np.prod(w[1:]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("onnx", type=Path)
    ap.add_argument("kes", type=Path)
    ap.add_argument("--cli", type=Path, default=ROOT / "target/release/kestrel")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", type=Path, help="write both profiles and the matched convolutions here")
    args = ap.parse_args()
    ort_nodes = ort_profile(args.onnx, args.runs, args.threads)
    kp = kestrel_profile(args.cli, args.kes, args.runs, args.threads)
    ort_total = sum(n["us"] for n in ort_nodes)
    by_ort = collections.defaultdict(float)
    for n in ort_nodes:
        by_ort[n["op"]] += n["us"]
    by_kes = collections.defaultdict(float)
    for n in kp["ops"]:
        by_kes[n["op"]] += n["p50_us"]
    kes_total = sum(by_kes.values())
    print(f"{args.onnx.name}: onnxruntime kernels {ort_total:.0f} µs, Kestrel nodes {kes_total:.0f} µs "
          f"({kes_total / max(ort_total, 1e-9):.2f}×), {args.threads} thread(s)")
    share = 0.01 * ort_total
    print("  onnxruntime:", ", ".join(f"{o} {t:.0f}" for o, t in sorted(by_ort.items(), key=lambda x: -x[1]) if t >= share))
    print("  Kestrel:    ", ", ".join(f"{o} {t:.0f}" for o, t in sorted(by_kes.items(), key=lambda x: -x[1]) if t >= share))
    # Convolutions matched in order by their multiply-adds (Kestrel counts a multiply-add as 2 FLOPs).
    ort_convs = [n for n in ort_nodes if n["op"] in ("Conv", "FusedConv")]
    used: set[int] = set()
    rows = []
    for kn in sorted((n for n in kp["ops"] if n["op"] == "Conv2d"), key=lambda n: n["node"]):
        macs = kn["flops"] / 2
        match = None
        for j, on in enumerate(ort_convs):
            m = conv_macs(on)
            if j not in used and m and abs(m - macs) <= 0.02 * m:
                used.add(j)
                match = on
                break
        rows.append({"node": kn["node"], "kestrel_us": kn["p50_us"], "gflops": kn["gflops_p50"],
                     "ort_us": match["us"] if match else None,
                     "x": match["inputs"][0] if match else None, "w": match["inputs"][1] if match else None,
                     "y": match["outputs"][0] if match else None})
    matched = [r for r in rows if r["ort_us"] is not None]
    print(f"  convolutions: Kestrel {len(rows)} ({sum(r['kestrel_us'] for r in rows):.0f} µs), onnxruntime "
          f"{len(ort_convs)} ({sum(n['us'] for n in ort_convs):.0f} µs), {len(matched)} matched")
    print(f"  {'Kestrel µs':>10} {'ORT µs':>8} {'ratio':>6} {'lost µs':>8} {'GFLOP/s':>8}  input → weight → output")
    for r in sorted(matched, key=lambda r: -(r["kestrel_us"] - r["ort_us"]))[: args.top]:
        print(f"  {r['kestrel_us']:10.0f} {r['ort_us']:8.0f} {r['kestrel_us'] / r['ort_us']:6.2f} "
              f"{r['kestrel_us'] - r['ort_us']:8.0f} {r['gflops']:8.1f}  {r['x']} → {r['w']} → {r['y']}")
    if args.json:
        args.json.write_text(json.dumps({"onnxruntime": ort_nodes, "kestrel": kp, "convolutions": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
