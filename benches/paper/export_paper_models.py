"""Export the paper's four benchmark models (DESIGN.md §4) at their real shapes to ONNX.

Weights are random (seeded), not trained: the models are for timing only.

Usage (from the repository root; needs torch, onnx, onnxruntime — not installed by CI)::

    PYTHONPATH=converters/python python3 benches/paper/export_paper_models.py --out target/paper-models
    PYTHONPATH=converters/python python3 benches/paper/export_paper_models.py --out target/paper-models --task mnist

Writes ``OUT/<task>_<mechanism>_h<heads>/{model.onnx,input.npy,output.npy,meta.json}`` (the
layout of ``converters/fixtures``). The CIFAR-100 models are ~170 MB each (the flatten head is
20736×2048), so they are not committed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from kestrel_torch import export as E
from kestrel_torch import models as M

TASKS = {
    # task: (builder, input shape, token ids, tokens)
    "mnist": (M.mnist_vit, (1, 64, 64), False, 64),
    "cifar100": (M.cifar100_vit, (3, 72, 72), False, 144),
    "imdb": (M.imdb_text, (32,), True, 32),
    "amazon": (M.amazon_text, (64,), True, 64),
}


def rows(task: str) -> list[tuple[str, int]]:
    """The benchmark's (mechanism, heads) rows for a task (issue 5)."""
    heads = (1, 2, 4, 6) if task == "cifar100" else (1, 2, 4)
    out = [("standard", h) for h in heads] + [("optimised", h) for h in heads]
    out += [("efficient", 1), ("super", 1)]
    out += [("aft_full", 1), ("aft_local", 1), ("aft_simple", 1), ("aft_conv", 1), ("fastformer", 1)]
    return out


def fixture(task: str, mech: str, heads: int) -> E.Fixture:
    builder, shape, token_ids, tokens = TASKS[task]
    kw: dict = {}
    notes = "paper shapes, random weights (timing only)"
    if mech == "aft_local":
        kw["window"] = 8
        notes += "; AFT-local window s = 8"
    if mech == "aft_conv":
        kw["kernel"] = 3
        if token_ids:
            kw["grid"] = (1, tokens)
            notes += f"; AFT-conv on a 1x{tokens} token grid, kernel 3x3"
        else:
            notes += "; AFT-conv kernel 3x3 on the patch grid"
    return E.Fixture(
        f"{task}_{mech}_h{heads}",
        task,
        mech,
        heads,
        E._bind(builder, mech, heads, **kw),
        shape,
        token_ids=token_ids,
        vocab=20_000 if token_ids else 0,
        notes=notes,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--task", action="append", choices=sorted(TASKS), help="only these tasks (repeatable)")
    p.add_argument("--only", action="append", default=[], help="only models whose name contains this (repeatable)")
    p.add_argument("--skip-existing", action="store_true", help="keep models already exported")
    args = p.parse_args(argv)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    os.environ.setdefault("TORCH_LOGS", "-all")
    args.out.mkdir(parents=True, exist_ok=True)
    for task in args.task or ["imdb", "mnist", "amazon", "cifar100"]:
        for mech, h in rows(task):
            fx = fixture(task, mech, h)
            if args.only and not any(o in fx.name for o in args.only):
                continue
            if args.skip_existing and (args.out / fx.name / "meta.json").exists():
                continue
            try:
                meta = E.export_fixture(fx, args.out)
            except Exception as e:  # noqa: BLE001 - report and go on with the other rows
                print(f"{fx.name:28s} FAILED: {e}", flush=True)
                continue
            print(f"{fx.name:28s} params {meta['parameters']:>11,}  onnx {meta['model_bytes'] / 1e6:7.2f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
