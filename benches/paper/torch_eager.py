"""Time the paper's Table 5 models in PyTorch eager mode on a GPU (CUDA), as JSON.

The models are built by the same builders and seeds as ``export_paper_models.py`` (and, for the
shrunk fixture names such as ``mnist_vit_super_h1``, as ``kestrel_torch.export.fixtures()``), so
PyTorch runs the graphs Kestrel runs after conversion. Timing only: random weights.

Usage (from the repository root; needs torch, ideally with CUDA)::

    python3 benches/paper/torch_eager.py --models mnist_super_h1 cifar100_super_h1 \\
        --batches 1 32 --samples 64 --reps 5 --out torch_eager.json

For every model, dtype (``f32``; ``f16``: ``model.half()``, float inputs in half) and batch:
one warm-up pass, then ``--reps`` timed passes of ``--samples`` samples in batches (the last
one may be smaller), each pass bracketed by CUDA events and followed by a synchronize. Two
figures per configuration, median µs/sample with min/max over passes:

* ``resident``: inputs already on the GPU, outputs left there (the kernels alone);
* ``copies``: inputs copied from host memory and outputs copied back every batch (what
  ``kestrel bench --backend wgpu`` measures: upload and readback included).

Exit status: 0 done (a model that fails is recorded with its error), 2 bad arguments,
3 torch is not installed, 4 no CUDA device (unless ``--device cpu``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PAPER_TASKS = ("mnist", "cifar100", "imdb", "amazon")
DTYPES = ("f32", "f16")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", required=True, metavar="NAME",
                   help="paper rows (TASK_MECHANISM_hH, e.g. mnist_super_h1) or fixture names (mnist_vit_super_h1)")
    p.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    p.add_argument("--samples", type=int, default=64, help="samples per timed pass (at least the batch)")
    p.add_argument("--reps", type=int, default=5, help="timed passes")
    p.add_argument("--dtypes", nargs="+", default=["f32", "f16"], choices=DTYPES)
    p.add_argument("--device", default="cuda", help="torch device (default cuda; cpu for a CPU-only check)")
    p.add_argument("--no-copies", action="store_true", help="skip the upload/readback-included timing")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="start no new model after this many seconds (0: no limit); skipped ones are listed")
    p.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    a = p.parse_args(argv)
    if a.samples < 1 or a.reps < 1 or any(b < 1 for b in a.batches):
        p.error("--samples, --reps and every --batches value must be at least 1")
    for name in a.models:
        if resolve_spec(name) is None:
            p.error(f"unknown model {name!r}: expected TASK_MECHANISM_hH with TASK in {PAPER_TASKS} or a fixture name")
    return a


def resolve_spec(name: str) -> tuple[str, str, str, int] | None:
    """``("paper"|"fixture", task, mechanism, heads)`` from a model name, without torch."""
    base, _, h = name.rpartition("_h")
    if not h.isdigit() or not base:
        return None
    heads = int(h)
    for task in PAPER_TASKS:
        if base.startswith(task + "_vit_") or base.startswith(task + "_text_"):
            return ("fixture", task, base.split("_", 2)[2], heads)
        if base.startswith(task + "_"):
            return ("paper", task, base[len(task) + 1:], heads)
    return None


def build(name: str):
    """The model (random weights, the exporters' seeds) and a function making a batch of inputs."""
    sys.path[:0] = [str(ROOT / "converters" / "python"), str(HERE)]
    import torch
    from kestrel_torch import export as E

    kind, task, mech, heads = resolve_spec(name)
    if kind == "paper":
        import export_paper_models as P

        fx = P.fixture(task, mech, heads)
    else:
        found = [f for f in E.fixtures() if f.name == name]
        if not found:
            raise ValueError(f"no fixture named {name}")
        fx = found[0]
    torch.manual_seed(E.SEED)
    gen = torch.Generator().manual_seed(E.SEED)
    model = fx.build().eval()
    E._fixture_init(model, gen)

    def inputs(batch: int):
        shape = (batch, *fx.input_shape)
        if fx.token_ids:
            return torch.randint(0, fx.vocab, shape, generator=gen, dtype=torch.int64)
        return torch.rand(shape, generator=gen)

    params = sum(p.numel() for p in model.parameters())
    return model, inputs, params


def time_config(torch, model, x_host, batch: int, samples: int, reps: int, device, copies: bool) -> dict:
    """Median/min/max µs per sample over ``reps`` passes of ``samples`` samples."""
    cuda = device.type == "cuda"
    x_dev = x_host.to(device)
    if cuda and copies:
        x_host = x_host.pin_memory()

    def one_pass() -> float:
        done = 0
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        while done < samples:
            b = min(batch, samples - done)
            if copies:
                y = model(x_host[:b].to(device, non_blocking=True))
                y.to("cpu")
            else:
                model(x_dev[:b])
            done += b
        if cuda:
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) * 1e3 / samples
        return (time.perf_counter() - t0) * 1e6 / samples

    one_pass()  # warm-up (kernel selection, allocator)
    us = [one_pass() for _ in range(reps)]
    return {"us_per_sample": statistics.median(us), "us_per_sample_min": min(us), "us_per_sample_max": max(us)}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch_eager: torch is not installed: no PyTorch timings", file=sys.stderr)
        return 3
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_eager: torch has no CUDA device: no PyTorch GPU timings (--device cpu times the CPU)",
              file=sys.stderr)
        return 4
    torch.set_grad_enabled(False)
    info = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "threads": torch.get_num_threads(),
        "samples": a.samples,
        "reps": a.reps,
        "timing": "CUDA events around each pass, then synchronize" if device.type == "cuda" else "host clock",
    }
    results = []
    begin = time.perf_counter()
    for name in a.models:
        t0 = time.perf_counter()
        if a.deadline_s and t0 - begin >= a.deadline_s:
            results.append({"model": name, "error": f"skipped: --deadline-s {a.deadline_s:g} reached"})
            print(f"torch_eager: {name}: skipped (deadline)", file=sys.stderr)
            continue
        try:
            model, make, params = build(name)
        except Exception as e:  # noqa: BLE001 - record and go on
            results.append({"model": name, "error": f"build: {e}"})
            print(f"torch_eager: {name}: {e}", file=sys.stderr)
            continue
        for dt in a.dtypes:
            if dt == "f16" and device.type == "cpu":
                continue
            m = (model.half() if dt == "f16" else model.float()).to(device)
            for b in a.batches:
                n = max(a.samples, b)
                x = make(b)
                if dt == "f16" and x.is_floating_point():
                    x = x.half()
                row = {"model": name, "dtype": dt, "batch": b, "samples": n, "parameters": params}
                try:
                    with torch.inference_mode():
                        row["resident"] = time_config(torch, m, x, b, n, a.reps, device, copies=False)
                        if not a.no_copies:
                            row["copies"] = time_config(torch, m, x, b, n, a.reps, device, copies=True)
                except Exception as e:  # noqa: BLE001 - e.g. out of memory: record it
                    row["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
                results.append(row)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"torch_eager: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    out = json.dumps({"machine": info, "results": results}, indent=1) + "\n"
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(out)
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TORCH_LOGS", "-all")
    sys.exit(main())
