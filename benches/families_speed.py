"""Kestrel vs onnxruntime on real-size models of the enumerated families (issue 37, item 7).

Standard configurations of torchvision, timm and Hugging Face models (random init, nothing
downloaded), plus LSTM/GRU models, at their real widths and depths: exported with the legacy
exporter (``torch.onnx.export(..., dynamo=False)``, opset 17) at batch 1, converted with
``kestrel convert`` (f32 and ``--weights int8``), and timed on one thread (``--threads N``: N)
against onnxruntime (``intra_op_num_threads`` the same, ``inter_op_num_threads=1``, sequential,
all graph optimisations).

Usage (needs torch, torchvision, timm, transformers, onnx, onnxruntime from PyPI; a release CLI)::

    cargo build --release -p kestrel-rt-cli
    python3 benches/families_speed.py --out benches/results/NAME/families-speed [--reps 20] \
        [--work /tmp/families-speed] [--only resnet18,vit_tiny_patch16_224]

Per model: Kestrel f32, Kestrel int8 and onnxruntime are timed interleaved (after a warm-up,
``--reps`` rounds, each round one pass of each in a rotating order; a pass is ``kestrel bench
--samples S --reps 1 --threads 1 --batch 1 --json`` or S ``session.run`` calls, S chosen so a
pass takes about ``--pass-ms``), and the median µs/sample of the rounds is reported, so a slow
spell of a shared machine is spread over all three. Outputs are checked: ``kestrel run`` (f32
and int8) and onnxruntime on the same seeded input, max abs difference (and relative to the
largest reference magnitude). Then ``kestrel profile --json`` of the f32 model gives the top
op kinds (time share) for the slowest ten by f32 ratio.

Targets (issue 37 item 7): f32 / ORT <= 1.0 for CNNs, <= 0.7 for transformers and RNNs;
int8 / ORT f32 <= 0.6 for every model. Writes ``table.md`` and ``results.json`` to ``--out``
(rewritten after every model, so a partial run leaves a partial table).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"CNN": 1.0, "transformer": 0.7, "RNN": 0.7}
INT8_TARGET = 0.6


# --------------------------------------------------------------------------------------------
# Models: (name, family, library, builder) with builder() -> (torch module, example inputs,
# input names, human description of the input).

def _tv(name, px=224, **kw):
    def build():
        import torch
        import torchvision
        m = getattr(torchvision.models, name)(weights=None, **kw)
        return m, (torch.rand(1, 3, px, px),), ["input"], f"1x3x{px}x{px}"
    return build


def _timm(name, px=224):
    def build():
        import timm
        import torch
        m = timm.create_model(name, pretrained=False)
        return m, (torch.rand(1, 3, px, px),), ["input"], f"1x3x{px}x{px}"
    return build


def _distilbert(seq=64):
    def build():
        import torch
        from transformers import DistilBertConfig, DistilBertModel

        class Enc(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = DistilBertModel(DistilBertConfig())  # defaults: dim 768, 6 layers, 12 heads

            def forward(self, ids):
                return self.m(input_ids=ids).last_hidden_state

        ids = (torch.arange(seq) % 2).reshape(1, seq).long()
        return Enc(), (ids,), ["input_ids"], f"1x{seq} token ids"
    return build


def _bert_base(seq=64):
    def build():
        import torch
        from transformers import BertConfig, BertModel

        class Enc(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = BertModel(BertConfig())  # defaults = bert-base: hidden 768, 12 layers, 12 heads

            def forward(self, ids):
                return self.m(input_ids=ids).last_hidden_state

        ids = (torch.arange(seq) % 2).reshape(1, seq).long()
        return Enc(), (ids,), ["input_ids"], f"1x{seq} token ids"
    return build


def _t5_encoder(seq=64):
    def build():
        import torch
        from transformers import T5Config, T5EncoderModel

        class Enc(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = T5EncoderModel(T5Config())  # defaults = t5-small: d_model 512, 6 layers, 8 heads

            def forward(self, ids):
                return self.m(input_ids=ids).last_hidden_state

        ids = (torch.arange(seq) % 2).reshape(1, seq).long()
        return Enc(), (ids,), ["input_ids"], f"1x{seq} token ids"
    return build


def _rnn(kind, feat=80, hidden=256, layers=2, seq=100, bidir=False):
    def build():
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
                self.rnn = cls(feat, hidden, num_layers=layers, batch_first=True, bidirectional=bidir)
                self.head = torch.nn.Linear(hidden * (2 if bidir else 1), 32)

            def forward(self, x):
                y, _ = self.rnn(x)
                return self.head(y)

        return Net(), (torch.rand(1, seq, feat),), ["input"], f"1x{seq}x{feat}"
    return build


MODELS = [
    ("resnet18", "CNN", "torchvision", _tv("resnet18")),
    ("mobilenet_v2", "CNN", "torchvision", _tv("mobilenet_v2")),
    ("mobilenet_v3_small", "CNN", "torchvision", _tv("mobilenet_v3_small")),
    ("shufflenet_v2_x1_0", "CNN", "torchvision", _tv("shufflenet_v2_x1_0")),
    ("squeezenet1_1", "CNN", "torchvision", _tv("squeezenet1_1")),
    ("efficientnet_b0", "CNN", "torchvision", _tv("efficientnet_b0")),
    ("densenet121", "CNN", "torchvision", _tv("densenet121")),
    ("regnet_y_400mf", "CNN", "torchvision", _tv("regnet_y_400mf")),
    ("mnasnet0_5", "CNN", "torchvision", _tv("mnasnet0_5")),
    ("resnet50", "CNN", "torchvision", _tv("resnet50")),
    ("mobilenet_v3_large", "CNN", "torchvision", _tv("mobilenet_v3_large")),
    ("googlenet", "CNN", "torchvision", _tv("googlenet", aux_logits=False, init_weights=False)),
    ("convnext_atto", "CNN", "timm", _timm("convnext_atto")),
    ("vit_tiny_patch16_224", "transformer", "timm", _timm("vit_tiny_patch16_224")),
    # deit_tiny_patch16_224 is the same graph as vit_tiny_patch16_224 (d 192, 12 blocks, 3 heads) at random init.
    ("levit_128s", "transformer", "timm", _timm("levit_128s")),
    ("efficientformer_l1", "transformer", "timm", _timm("efficientformer_l1")),
    ("mobilevit_xxs", "transformer", "timm", _timm("mobilevit_xxs", 256)),
    ("distilbert_base", "transformer", "huggingface", _distilbert(64)),
    ("bert_base", "transformer", "huggingface", _bert_base(64)),
    ("t5_small_encoder", "transformer", "huggingface", _t5_encoder(64)),
    ("lstm_2x256", "RNN", "torch.nn", _rnn("lstm")),
    ("gru_2x256", "RNN", "torch.nn", _rnn("gru")),
    ("bilstm_2x256", "RNN", "torch.nn", _rnn("lstm", bidir=True)),
]


# --------------------------------------------------------------------------------------------

def machine_info() -> dict:
    import onnxruntime as ort
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor())
    info = {"cpu": cpu, "cores": os.cpu_count(), "onnxruntime": ort.__version__, "python": platform.python_version()}
    for mod in ("torch", "torchvision", "timm", "transformers", "onnx"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            pass
    try:
        info["kestrel_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                                capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    return info


def export(name: str, builder, work: Path) -> tuple[Path, dict]:
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    path = work / f"{name}.onnx"
    model, args, names, desc = builder()
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    meta = {"params": params, "input": desc, "input_names": names}
    if not path.exists():
        with torch.no_grad():
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, input_names=names,
                              output_names=["output"], do_constant_folding=True)
    meta["onnx_mb"] = path.stat().st_size / 1e6
    return path, meta


# Threads of both runtimes (``--threads``): onnxruntime's intra-op pool, Kestrel's worker pool.
THREADS = 1


def ort_session(path: Path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def make_feed(sess) -> dict:
    """Same synthetic inputs as ``kestrel bench``: uniform [0, 1) floats, token ids ``i mod 2``."""
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        n = int(np.prod(shape))
        if "int" in i.type:
            out[i.name] = (np.arange(n) % 2).astype(np.int64).reshape(shape)
        else:
            out[i.name] = np.random.default_rng(0).random(shape, dtype=np.float32)
    return out


def time_ort(sess, feed: dict, samples: int) -> float:
    t = time.perf_counter()
    for _ in range(samples):
        sess.run(None, feed)
    return (time.perf_counter() - t) / samples * 1e6


def time_kestrel(cli: Path, kes: Path, samples: int) -> float:
    r = subprocess.run([str(cli), "bench", str(kes), "--samples", str(samples), "--reps", "1", "--threads", str(THREADS),
                        "--batch", "1", "--json"], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["us_per_sample"]


def convert(cli: Path, onnx: Path, kes: Path, weights: str) -> tuple[bool, str]:
    if kes.exists():
        return True, ""
    r = subprocess.run([str(cli), "convert", str(onnx), "-o", str(kes), "--weights", weights],
                       capture_output=True, text=True)
    if r.returncode != 0:
        lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
        return False, (lines[-1] if lines else f"exit {r.returncode}")[:300]
    return True, ""


def check_outputs(cli: Path, kes: Path, feed: dict, ref: np.ndarray, work: Path) -> dict:
    ins = []
    for k, v in feed.items():
        p = work / f"in_{k}.npy"
        np.save(p, v)
        ins += ["--input", str(p)]
    outp = work / "out.npy"
    r = subprocess.run([str(cli), "run", str(kes), *ins, "--output", str(outp)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:300]}
    y = np.load(outp).astype(np.float64)
    ref = ref.astype(np.float64)
    if y.size != ref.size:
        return {"error": f"output size {y.shape} vs {ref.shape}"}
    d = float(np.max(np.abs(y.reshape(-1) - ref.reshape(-1))))
    scale = float(np.max(np.abs(ref))) or 1.0
    return {"max_abs_diff": d, "max_abs_ref": scale, "rel": d / scale}


def profile_top(cli: Path, kes: Path, runs: int, top: int = 3) -> dict:
    r = subprocess.run([str(cli), "profile", str(kes), "-n", str(runs), "--warmup", "2", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:300]}
    p = json.loads(r.stdout)
    if isinstance(p, list):
        p = p[0]
    kinds: dict[str, dict] = {}
    for o in p["ops"]:
        k = kinds.setdefault(o["op"], {"op": o["op"], "nodes": 0, "mean_us": 0.0, "share": 0.0, "flops": 0,
                                       "bytes": 0})
        k["nodes"] += 1
        k["mean_us"] += o["mean_us"]
        k["share"] += o["share"] or 0.0
        k["flops"] += o["flops"] or 0
        k["bytes"] += o["bytes"] or 0
    ranked = sorted(kinds.values(), key=lambda k: -k["mean_us"])
    for k in ranked:
        t = k["mean_us"] * 1e-6
        k["gflops"] = k["flops"] / t / 1e9 if t > 0 and k["flops"] else None
        k["gbps"] = k["bytes"] / t / 1e9 if t > 0 and k["bytes"] else None
    nodes = [{"node": o["node"], "op": o["op"], "mean_us": o["mean_us"], "share": o["share"],
              "gflops_p50": o["gflops_p50"], "gbps_p50": o["gbps_p50"]} for o in p["ops"][:5]]
    return {"total_mean_us": p["total"]["mean_us"], "gflops_p50": p["total"]["gflops_p50"],
            "executed_ops": p["executed_ops"], "top_kinds": ranked[:top], "top_nodes": nodes}


def fmt(x, spec=".1f", none="–"):
    return none if x is None else format(x, spec)


def write(out: Path, machine: dict, args, rows: list, cmd: str) -> None:
    (out / "results.json").write_text(json.dumps(
        {"machine": machine, "command": cmd, "reps": args.reps, "pass_ms": args.pass_ms,
         "targets": {"f32_over_ort": TARGETS, "int8_over_ort_f32": INT8_TARGET}, "rows": rows}, indent=1) + "\n")
    timed = [r for r in rows if r.get("f32_over_ort") is not None]
    met = [r for r in timed if r["meets_f32"]]
    met8 = [r for r in timed if r.get("meets_int8")]
    lines = [
        f"# Real-size family models: Kestrel vs onnxruntime {machine['onnxruntime']} (issue 37 item 7)\n",
        f"Machine: {machine['cpu']}, {machine['cores']} logical cores, a **shared VM** (other builds and tests "
        "were running at the same time, so absolute times are noisy; the ratios compare runs interleaved over "
        f"the same stretch of time). Kestrel at {machine.get('kestrel_commit', '?')}; torch "
        f"{machine.get('torch', '?')}, torchvision {machine.get('torchvision', '?')}, timm {machine.get('timm', '?')}, "
        f"transformers {machine.get('transformers', '?')}.\n",
        f"Command: `{cmd}`\n",
        f"f32, batch 1, {THREADS} thread{'s' if THREADS > 1 else ''} (Kestrel `bench --threads {THREADS}`; onnxruntime "
        f"intra-op {THREADS}, inter-op 1, sequential, "
        "ORT_ENABLE_ALL). Random init, legacy exporter (opset 17), static shapes. Times: median µs/sample over "
        f"{args.reps} interleaved rounds (each round one pass of Kestrel f32, Kestrel int8 and onnxruntime, "
        f"rotating order; a pass ~{args.pass_ms} ms). Ratio = Kestrel / onnxruntime f32 (below 1: Kestrel faster). "
        "`diff` = max |Kestrel f32 − ORT| / max |ORT| on the same seeded input.\n",
        f"Targets: f32/ORT ≤ 1.0 (CNN), ≤ 0.7 (transformer, RNN): **{len(met)} of {len(timed)} met**. "
        f"int8/ORT f32 ≤ 0.6: **{len(met8)} of {len(timed)} met**.\n",
        "| model | family | library | params | input | ORT f32 ms | Kestrel f32 ms | f32/ORT | target | met | "
        "Kestrel int8 ms | int8/ORT | int8 ≤ 0.6 | diff f32 | diff int8 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("f32_over_ort") is None:
            lines.append(f"| {r['model']} | {r['family']} | {r['library']} | {fmt(r.get('params_m'), '.2f')}M | "
                         f"{r.get('input', '')} | {fmt(r.get('ort_ms'), '.2f')} | – | – | {TARGETS[r['family']]} | "
                         f"**error**: {r.get('error', '?').replace('|', '/')} | | | | | |")
            continue
        d32 = r.get("check_f32", {})
        d8 = r.get("check_int8", {})
        lines.append(
            f"| {r['model']} | {r['family']} | {r['library']} | {r['params_m']:.2f}M | {r['input']} | "
            f"{r['ort_ms']:.2f} | {r['kestrel_f32_ms']:.2f} | {r['f32_over_ort']:.2f} | ≤ {r['target']} | "
            f"{'yes' if r['meets_f32'] else '**no**'} | {fmt(r.get('kestrel_int8_ms'), '.2f')} | "
            f"{fmt(r.get('int8_over_ort'), '.2f')} | "
            f"{'–' if r.get('meets_int8') is None else ('yes' if r['meets_int8'] else '**no**')} | "
            f"{fmt(d32.get('rel'), '.1e', d32.get('error', '–'))} | {fmt(d8.get('rel'), '.1e', d8.get('error', '–'))} |")
    slow = sorted(timed, key=lambda r: -r["f32_over_ort"])[:10]
    lines += ["", "## The slowest ten (by f32 / ORT) and their top ops (`kestrel profile`, f32)\n",
              "Op kinds ranked by summed mean time over their nodes; share of the profiled run, nodes, and "
              "the kind's GFLOP/s (GB/s where FLOPs are ~0).\n",
              "| model | f32/ORT | profiled ms | model GFLOP/s | top op 1 | top op 2 | top op 3 |",
              "|---|---|---|---|---|---|---|"]
    for r in slow:
        p = r.get("profile") or {}
        if "top_kinds" not in p:
            lines.append(f"| {r['model']} | {r['f32_over_ort']:.2f} | – | – | {p.get('error', 'not profiled')} | | |")
            continue
        cells = []
        for k in p["top_kinds"]:
            rate = f"{k['gflops']:.1f} GFLOP/s" if k.get("gflops") else (f"{k['gbps']:.1f} GB/s" if k.get("gbps") else "")
            cells.append(f"{k['op']} {100 * k['share']:.0f} % ({k['nodes']} nodes, {rate})")
        cells += [""] * (3 - len(cells))
        lines.append(f"| {r['model']} | {r['f32_over_ort']:.2f} | {p['total_mean_us'] / 1e3:.2f} | "
                     f"{fmt(p.get('gflops_p50'))} | " + " | ".join(cells) + " |")
    (out / "table.md").write_text("\n".join(lines) + "\n")


def compare(out: Path, files: list[Path]) -> None:
    """``runs.md``: each model's f32 / ORT and int8 / ORT in every run of ``files`` (results.json of
    separate runs of this script), their median, and the verdicts on the median."""
    runs = [json.loads(f.read_text()) for f in files]
    names = []
    for r in runs:
        names += [row["model"] for row in r["rows"] if row["model"] not in names]
    by = [{row["model"]: row for row in r["rows"]} for r in runs]
    lines = ["# f32 / ORT and int8 / ORT across runs (shared machine: the run-to-run spread)\n",
             "Runs: " + ", ".join(f"{i + 1}: `{f.name}` ({len(r['rows'])} models)" for i, (f, r) in
                                  enumerate(zip(files, runs))) + ". Verdicts on the median over the runs that timed "
             "the model.\n",
             "| model | family | " + " | ".join(f"f32/ORT run {i + 1}" for i in range(len(runs))) +
             " | f32 median | target | met | " + " | ".join(f"int8/ORT run {i + 1}" for i in range(len(runs))) +
             " | int8 median | ≤ 0.6 |",
             "|---|---|" + "---|" * (2 * len(runs) + 5)]
    met = met8 = n = 0
    for m in names:
        rows = [b.get(m) for b in by]
        fam = next(r["family"] for r in rows if r)
        f = [r.get("f32_over_ort") if r else None for r in rows]
        q = [r.get("int8_over_ort") if r else None for r in rows]
        fv = [x for x in f if x is not None]
        qv = [x for x in q if x is not None]
        fm = statistics.median(fv) if fv else None
        qm = statistics.median(qv) if qv else None
        ok = fm is not None and fm <= TARGETS[fam]
        ok8 = qm is not None and qm <= INT8_TARGET
        n += fm is not None
        met += ok
        met8 += ok8
        lines.append(f"| {m} | {fam} | " + " | ".join(fmt(x, ".2f") for x in f) + f" | {fmt(fm, '.2f')} | "
                     f"≤ {TARGETS[fam]} | {'yes' if ok else '**no**'} | " + " | ".join(fmt(x, ".2f") for x in q) +
                     f" | {fmt(qm, '.2f')} | {'yes' if ok8 else '**no**'} |")
    lines.insert(2, f"On the medians: f32 target met by **{met} of {n}**, int8 ≤ 0.6 by **{met8} of {n}**.\n")
    (out / "runs.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/families-speed"))
    ap.add_argument("--cli", type=Path, default=ROOT / "target/release/kestrel")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="threads of both runtimes (default 1)")
    ap.add_argument("--pass-ms", type=float, default=60.0, help="target duration of one timed pass")
    ap.add_argument("--profile-runs", type=int, default=10)
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--skip", default="", help="comma-separated model names to leave out")
    ap.add_argument("--compare", type=Path, nargs="+", metavar="RESULTS.json",
                    help="time nothing: write OUT/runs.md, the ratios of these runs side by side")
    args = ap.parse_args()
    if args.compare:
        args.out.mkdir(parents=True, exist_ok=True)
        compare(args.out, args.compare)
        return 0
    global THREADS
    THREADS = args.threads
    cmd = "python3 " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    only = {m for m in args.only.split(",") if m}
    skip = {m for m in args.skip.split(",") if m}
    machine = machine_info()
    rows = []
    for name, family, library, builder in MODELS:
        if (only and name not in only) or name in skip:
            continue
        row = {"model": name, "family": family, "library": library, "target": TARGETS[family]}
        rows.append(row)
        t0 = time.time()
        try:
            onnx, meta = export(name, builder, args.work)
        except Exception as e:  # noqa: BLE001
            row["error"] = f"export: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            print(f"{name}: {row['error']}", flush=True)
            traceback.print_exc()
            write(args.out, machine, args, rows, cmd)
            continue
        row.update(params_m=meta["params"] / 1e6, input=meta["input"], onnx_mb=meta["onnx_mb"])
        sess = ort_session(onnx)
        feed = make_feed(sess)
        ref = sess.run(None, feed)[0]
        ort_once = time_ort(sess, feed, 2)
        row["ort_ms"] = ort_once / 1e3
        kes = {}
        for w in ("f32", "int8"):
            path = args.work / f"{name}.{w}.kes"
            ok, err = convert(args.cli, onnx, path, w)
            if ok:
                kes[w] = path
            else:
                row[f"convert_{w}_error"] = err
        if "f32" not in kes:
            row["error"] = "convert: " + row.get("convert_f32_error", "?")
            print(f"{name}: {row['error']}", flush=True)
            write(args.out, machine, args, rows, cmd)
            continue
        for w, path in kes.items():
            row[f"check_{w}"] = check_outputs(args.cli, path, feed, ref, args.work)
        samples = max(1, min(50, round(args.pass_ms * 1e3 / ort_once)))
        row["samples_per_pass"] = samples
        # warm-up: one pass each
        time_ort(sess, feed, samples)
        times = {"ort": [], **{w: [] for w in kes}}
        order = list(times)
        try:
            for rep in range(args.reps):
                for who in order[rep % len(order):] + order[: rep % len(order)]:
                    times[who].append(time_ort(sess, feed, samples) if who == "ort"
                                      else time_kestrel(args.cli, kes[who], samples))
        except subprocess.CalledProcessError as e:
            row["error"] = f"kestrel bench: {(e.stderr or '').strip().splitlines()[-1:] }"
            print(f"{name}: {row['error']}", flush=True)
            write(args.out, machine, args, rows, cmd)
            continue
        med = {k: statistics.median(v) for k, v in times.items()}
        row.update(ort_ms=med["ort"] / 1e3, kestrel_f32_ms=med["f32"] / 1e3,
                   f32_over_ort=med["f32"] / med["ort"], times_us=times)
        row["meets_f32"] = row["f32_over_ort"] <= row["target"]
        if "int8" in med:
            row.update(kestrel_int8_ms=med["int8"] / 1e3, int8_over_ort=med["int8"] / med["ort"])
            row["meets_int8"] = row["int8_over_ort"] <= INT8_TARGET
        row["profile"] = profile_top(args.cli, kes["f32"], args.profile_runs)
        row["seconds"] = time.time() - t0
        print(f"{name:24} ort {row['ort_ms']:8.2f} ms  f32 {row['kestrel_f32_ms']:8.2f} ({row['f32_over_ort']:.2f}x)  "
              f"int8 {fmt(row.get('kestrel_int8_ms'), '8.2f')} ({fmt(row.get('int8_over_ort'), '.2f')}x)  "
              f"diff {fmt(row['check_f32'].get('rel'), '.1e', row['check_f32'].get('error', '?'))}  "
              f"[{row['seconds']:.0f} s]", flush=True)
        write(args.out, machine, args, rows, cmd)
        del sess
    write(args.out, machine, args, rows, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
