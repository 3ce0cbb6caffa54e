"""The report of ``benches/gpu_results.sh``: ``table.md``, ``results.json`` and ``chart.png``.

Reads, in OUT_DIR: ``kestrel.tsv`` (``name<TAB>config<TAB>batch<TAB>kestrel bench --json`` or
``ERROR message``), ``torch_eager.json`` (optional), ``profiles/*.b<B>.json`` (``kestrel profile
--json``, optional), ``devices.txt`` and ``notices.txt``. Standard library only; the PNG needs
matplotlib (skipped with a notice without it).

    python3 benches/paper/gpu_report.py OUT_DIR [--source paper|fixtures|given] [--threads N] ...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_eager import resolve_spec  # noqa: E402 - no torch import at module level

# Kestrel configurations, in column order: (key, column title).
CONFIGS = [
    ("cpu1-f32", "CPU 1T f32"),
    ("cpu1-int8", "CPU 1T int8"),
    ("cpuN-f32", "CPU {T}T f32"),
    ("cpuN-int8", "CPU {T}T int8"),
    ("gpu-f32", "GPU f32"),
    ("gpu-f16", "GPU f16"),
    ("gpu-int8", "GPU int8 w"),
]
TORCH = [("f32", "torch f32"), ("f16", "torch f16")]
# The paper's Apple M2 seconds for 5,000 samples (DESIGN.md §4; as in apps/kestrel-cli/src/bench_paper.rs).
PAPER_M2_S = {
    ("mnist", "standard", 1): 2.53, ("mnist", "standard", 2): 2.72, ("mnist", "standard", 4): 3.27,
    ("mnist", "optimised", 1): 2.45, ("mnist", "optimised", 2): 2.64, ("mnist", "optimised", 4): 3.16,
    ("mnist", "efficient", 1): 2.32, ("mnist", "super", 1): 2.50,
    ("cifar100", "standard", 1): 35.68, ("cifar100", "standard", 2): 41.34,
    ("cifar100", "standard", 4): 51.52, ("cifar100", "standard", 6): 55.47,
    ("cifar100", "optimised", 1): 34.51, ("cifar100", "optimised", 2): 40.70,
    ("cifar100", "optimised", 4): 51.01, ("cifar100", "optimised", 6): 52.18,
    ("cifar100", "efficient", 1): 32.29, ("cifar100", "super", 1): 33.45,
    ("imdb", "standard", 1): 0.219, ("imdb", "standard", 2): 0.247, ("imdb", "standard", 4): 0.284,
    ("imdb", "optimised", 1): 0.213, ("imdb", "optimised", 2): 0.242, ("imdb", "optimised", 4): 0.284,
    ("imdb", "efficient", 1): 0.208, ("imdb", "super", 1): 0.221,
    ("amazon", "standard", 1): 1.43, ("amazon", "standard", 2): 1.54, ("amazon", "standard", 4): 2.09,
    ("amazon", "optimised", 1): 1.40, ("amazon", "optimised", 2): 1.52, ("amazon", "optimised", 4): 2.05,
    ("amazon", "efficient", 1): 1.23, ("amazon", "super", 1): 1.22,
}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--source", default="paper", choices=["paper", "fixtures", "given"])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--samples", type=int, default=0)
    p.add_argument("--reps", type=int, default=0)
    p.add_argument("--seconds", type=int, default=0, help="wall time of the whole run")
    return p.parse_args(argv)


def read_kestrel(path: Path) -> dict:
    """``{(name, batch): {config: bench object or {"error": msg}}}`` and the model order."""
    cells: dict = {}
    order: list[str] = []
    if not path.exists():
        return {"cells": cells, "order": order}
    for line in path.read_text().splitlines():
        parts = line.split("\t", 3)
        if len(parts) != 4:
            continue
        name, config, batch, payload = parts
        if name not in order:
            order.append(name)
        if payload.startswith("ERROR"):
            value = {"error": payload[5:].strip() or "failed"}
        else:
            try:
                value = json.loads(payload)
            except json.JSONDecodeError:
                value = {"error": "unreadable output: " + payload[:200]}
        cells.setdefault((name, int(batch)), {})[config] = value
    return {"cells": cells, "order": order}


def read_torch(path: Path) -> dict:
    if not path.exists():
        return {"machine": None, "cells": {}, "order": []}
    doc = json.loads(path.read_text())
    cells: dict = {}
    order: list[str] = []
    for r in doc.get("results", []):
        if r["model"] not in order:
            order.append(r["model"])
        if "batch" not in r:
            for dt, _ in TORCH:
                cells.setdefault((r["model"], None), {})[dt] = {"error": r.get("error", "failed")}
            continue
        cells.setdefault((r["model"], r["batch"]), {})[r["dtype"]] = r
    return {"machine": doc.get("machine"), "cells": cells, "order": order}


def adapters(devices: str) -> list[dict]:
    """``[{"name", "type", "backend"}]`` from ``kestrel devices``."""
    out: list[dict] = []
    for line in devices.splitlines():
        m = re.match(r"^\[(\d+)\]\s+(.*)$", line)
        if m:
            out.append({"index": int(m.group(1)), "name": m.group(2).strip()})
            continue
        m = re.match(r"^\s+(type|backend|driver)\s+(.*)$", line)
        if m and out:
            out[-1][m.group(1)] = m.group(2).strip()
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def profile_summary(path: Path) -> dict | None:
    try:
        p = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    ops = p.get("ops", [])
    top = ops[0] if ops else {}
    t = p.get("total", {})
    return {
        "model": p.get("model"),
        "file": path.name,
        "batch": p.get("batch"),
        "backend": p.get("backend"),
        "dispatches_per_run": p.get("dispatches_per_run"),
        "executed_ops": p.get("executed_ops"),
        "total_p50_us": t.get("p50_us"),
        "ops_mean_us": t.get("ops_mean_us"),
        "known_flops": p.get("known_flops"),
        "known_bytes": p.get("known_bytes"),
        "gflops_p50": t.get("gflops_p50"),
        "gbps_p50": t.get("gbps_p50"),
        "top_op": {k: top.get(k) for k in ("node", "op", "share", "gflops_p50", "gbps_p50", "intensity_flop_per_byte")},
    }


def us(v) -> float | None:
    return v.get("us_per_sample") if isinstance(v, dict) else None


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 1000 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out: Path = a.out
    kes = read_kestrel(out / "kestrel.tsv")
    torch = read_torch(out / "torch_eager.json")
    devices = (out / "devices.txt").read_text() if (out / "devices.txt").exists() else ""
    notices = [n for n in (out / "notices.txt").read_text().splitlines() if n] if (out / "notices.txt").exists() else []
    profiles = [s for s in (profile_summary(p) for p in sorted((out / "profiles").glob("*.b*.json"))
                            if not p.name.endswith(".trace.json")) if s]
    batches = sorted({b for (_, b) in kes["cells"]} | {b for (_, b) in torch["cells"] if b is not None})
    order = kes["order"] + [m for m in torch["order"] if m not in kes["order"]]
    gpu_label = next((c["backend"] for cells in kes["cells"].values() for k, c in cells.items()
                      if k.startswith("gpu") and "backend" in c), None)

    rows = []
    for name in order:
        spec = resolve_spec(name)
        task, mech, heads = (spec[1], spec[2], spec[3]) if spec else (None, None, None)
        paper_s = PAPER_M2_S.get((task, mech, heads)) if a.source == "paper" else None
        for b in batches:
            cells = kes["cells"].get((name, b), {})
            tcells = torch["cells"].get((name, b), torch["cells"].get((name, None), {}))
            row = {"model": name, "task": task, "mechanism": mech, "heads": heads, "batch": b,
                   "kestrel": {k: cells.get(k) for k, _ in CONFIGS},
                   "torch": {dt: tcells.get(dt) for dt, _ in TORCH},
                   "paper_m2_us_per_sample": paper_s * 1e6 / 5000 if paper_s else None}
            cpu = [us(cells.get(k)) for k in ("cpu1-f32", "cpu1-int8", "cpuN-f32", "cpuN-int8")]
            gpu = [us(cells.get(k)) for k in ("gpu-f32", "gpu-f16", "gpu-int8")]
            cpu, gpu = [v for v in cpu if v], [v for v in gpu if v]
            row["best_cpu_over_best_gpu"] = min(cpu) / min(gpu) if cpu and gpu else None
            rows.append(row)

    t = a.threads
    lines = ["# Table 5 models: Kestrel on the GPU beside the CPU, and PyTorch eager (`benches/gpu_results.sh`)", ""]
    lines.append(f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores; `{t}T` = {t} threads.")
    for ad in adapters(devices):
        lines.append(f"- wgpu adapter [{ad['index']}]: {ad['name']} ({ad.get('backend', '?')}, {ad.get('type', '?')}; "
                     f"{ad.get('driver', '')})")
    if gpu_label:
        lines.append(f"- GPU columns ran on: {gpu_label}.")
    if torch["machine"]:
        m = torch["machine"]
        lines.append(f"- PyTorch {m['torch']} eager on {m['device']} (CUDA {m['cuda']}, TF32 matmul "
                     f"{m['tf32_matmul']}, TF32 cuDNN {m['tf32_cudnn']}); {m['timing']}.")
    src = {"paper": "the paper's models at their real shapes (random weights, timing only)",
           "fixtures": "the bundled converters/fixtures models, SHRUNK against the paper (not Table 5's sizes)",
           "given": "the models given on the command line"}[a.source]
    lines.append(f"- Models: {src}. {a.reps} passes × {a.samples} samples (at least the batch) after a warm-up "
                 "pass; median µs per sample.")
    lines.append(f"- Whole run: {a.seconds} s.")
    lines += ["", "Kestrel: `f32`/`int8` = weights stored f32/int8; GPU `f16` = f32 weights, f16 products "
              "(`--gpu-precision f16`); GPU times include the input upload and the output readback. "
              "PyTorch: with host↔device copies of inputs and outputs, as Kestrel's GPU figures (in "
              "brackets: inputs and outputs resident on the GPU). `paper M2`: the paper's Apple M2 seconds "
              "for 5,000 samples, as µs per sample (its batch size and threads are not stated). "
              "`CPU/GPU`: best CPU over best "
              "Kestrel GPU figure (> 1: the GPU is faster).", ""]
    if notices:
        lines += ["**Notices**", ""] + [f"- {n}" for n in notices] + [""]
    head = ["model", "batch"] + [title.format(T=t) for _, title in CONFIGS] + [title for _, title in TORCH]
    head += ["paper M2", "CPU/GPU"]
    lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    errors = []
    for r in rows:
        cells = [r["model"], str(r["batch"])]
        for k, _ in CONFIGS:
            v = r["kestrel"][k]
            if isinstance(v, dict) and "error" in v:
                errors.append(f"{r['model']} b{r['batch']} {k}: {v['error']}")
                cells.append("err")
            else:
                cells.append(fmt(us(v)))
        for dt, _ in TORCH:
            v = r["torch"][dt]
            if isinstance(v, dict) and "error" in v:
                errors.append(f"{r['model']} b{r['batch']} torch {dt}: {v['error']}")
                cells.append("err")
            elif isinstance(v, dict):
                c, res = us(v.get("copies")), us(v.get("resident"))
                cells.append(f"{fmt(c)} ({fmt(res)})" if c is not None else f"({fmt(res)})")
            else:
                cells.append("-")
        cells.append(fmt(r["paper_m2_us_per_sample"]))
        ratio = r["best_cpu_over_best_gpu"]
        cells.append(f"{ratio:.3g}×" if ratio else "-")
        lines.append("| " + " | ".join(cells) + " |")
    if errors:
        lines += ["", "Errors:", ""] + [f"- {e}" for e in errors]
    if profiles:
        lines += ["", "## GPU roofline (`kestrel profile --backend wgpu`, f32 weights and arithmetic)", "",
                  "Per run: compute dispatches; p50 wall time (upload to mapped outputs); FLOPs and bytes "
                  "(activations at the batch + weights in their stored encoding, each read once) over the p50 "
                  "time; the costliest op with its share, intensity (FLOP/byte) and achieved rates. Per-op "
                  "tables in `profiles/`.", "",
                  "| profile | dispatches | p50 µs | MFLOP | MB | GFLOP/s | GB/s | top op | share | FLOP/B "
                  "| op GB/s |",
                  "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
        for p in profiles:
            top = p["top_op"]
            lines.append("| " + " | ".join([
                p["file"].removesuffix(".json"), str(p["dispatches_per_run"]), fmt(p["total_p50_us"]),
                fmt((p["known_flops"] or 0) / 1e6), fmt((p["known_bytes"] or 0) / 1e6), fmt(p["gflops_p50"]),
                fmt(p["gbps_p50"]), f"#{top.get('node')} {top.get('op')}",
                f"{100 * (top.get('share') or 0):.0f}%", fmt(top.get("intensity_flop_per_byte")),
                fmt(top.get("gbps_p50"))]) + " |")
    chart = out / "chart.png"
    plotted = plot(rows, chart, t)
    if plotted is not True:
        lines += ["", f"No chart.png: {plotted}"]
        print(f"notice: no chart.png: {plotted}", file=sys.stderr)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    results = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": t, "adapters": adapters(devices),
                    "gpu_backend": gpu_label, "torch": torch["machine"]},
        "source": a.source, "samples": a.samples, "reps": a.reps, "seconds": a.seconds,
        "notices": notices, "configs": dict(CONFIGS), "rows": rows, "profiles": profiles,
    }
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out / 'table.md'}, {out / 'results.json'}" + (f", {chart}" if plotted is True else ""),
          file=sys.stderr)
    return 0


def plot(rows: list[dict], path: Path, threads: int):
    """Grouped log-scale bars, one panel per batch; True, or why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed"
    batches = sorted({r["batch"] for r in rows})
    if not batches:
        return "no timings"
    series = [(k, title.format(T=threads), "kestrel") for k, title in CONFIGS]
    series += [(dt, title, "torch") for dt, title in TORCH]
    fig, axes = plt.subplots(len(batches), 1, figsize=(max(8, 1.2 * len(rows) / len(batches) + 4), 4.5 * len(batches)),
                             squeeze=False)
    for ax, b in zip(axes[:, 0], batches):
        rs = [r for r in rows if r["batch"] == b]
        width = 0.8 / len(series)
        for i, (k, title, kind) in enumerate(series):
            vals = []
            for r in rs:
                v = r[kind][k]
                vals.append((us(v.get("copies")) if kind == "torch" and isinstance(v, dict) else us(v)) or 0)
            if any(vals):
                ax.bar([j + i * width for j in range(len(rs))], vals, width, label=title)
        ax.set_yscale("log")
        ax.set_ylabel("µs per sample (median)")
        ax.set_title(f"batch {b}")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rs))])
        ax.set_xticklabels([r["model"] for r in rs], rotation=30, ha="right", fontsize=8)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


if __name__ == "__main__":
    sys.exit(main())
