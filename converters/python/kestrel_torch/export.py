"""Export the benchmark models to ONNX fixtures for the ONNX→Kestrel converter.

Usage::

    python -m kestrel_torch.export --out ../fixtures            # every fixture + README.md
    python -m kestrel_torch.export --out /tmp/fx --only mnist_vit_super_h1
    python -m kestrel_torch.export --list

For each fixture ``NAME`` this writes ``OUT/NAME/``:

* ``model.onnx``: ``torch.onnx.export(dynamo=True, opset_version=18)`` with a dynamic batch axis,
  one self-contained file (no external data);
* ``input.npy``: a few deterministic samples (float32 images / activations, int64 token ids);
* ``output.npy``: PyTorch's output for them (float32);
* ``meta.json``: task, mechanism, heads, shapes, parameter counts, what was shrunk vs the paper,
  the onnxruntime check.

Every export is checked with ``onnx.checker`` and against PyTorch with onnxruntime (the full
batch and a batch of 1); a relative error above 1e-4 aborts. Weights are random (seeded), not
trained: these fixtures test conversion, not accuracy.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from . import models as M
from .mechanisms import Attention

OPSET = 18
SAMPLES = 4
REL_TOL = 1e-4
SEED = 1234


@dataclass
class Fixture:
    """One exported model.

    Attributes:
        name: directory name.
        task: benchmark task (``mnist``, ``cifar100``, ``imdb``, ``amazon``, ``mnist28``, ``layer``).
        mechanism: mechanism name (see :data:`kestrel_torch.models.MECHANISMS`).
        heads: heads h.
        build: builds the (random-weight) model.
        input_shape: per-batch input shape, batch first.
        token_ids: input is int64 token ids below ``vocab``.
        vocab: vocabulary size (text tasks).
        shrunk: what differs from the paper's model, ``{field: "paper -> fixture"}``.
        notes: free-form remarks (causal mode, window, kernel, ...).
    """

    name: str
    task: str
    mechanism: str
    heads: int
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    token_ids: bool = False
    vocab: int = 0
    shrunk: dict[str, str] = field(default_factory=dict)
    notes: str = ""


MNIST_HEAD = (16,)
TEXT_VOCAB = 2_000
CIFAR_HEAD = (16,)
CIFAR_LAYERS = 2
LAYER_T, LAYER_D = 16, 32


def fixtures() -> list[Fixture]:
    """Every fixture, in README order."""
    out: list[Fixture] = []
    mnist_shrunk = {"head_units": f"[2048, 1024] -> {list(MNIST_HEAD)}"}
    mnist = [
        ("standard", 1), ("standard", 2), ("standard", 4),
        ("optimised", 1), ("optimised", 2), ("optimised", 4),
        ("efficient", 1), ("super", 1),
        ("aft_full", 1), ("aft_local", 1), ("aft_simple", 1), ("aft_conv", 2), ("fastformer", 2),
        ("torch_mha", 2), ("handwritten", 2),
    ]  # fmt: skip
    for mech, h in mnist:
        kw: dict = {"head_units": MNIST_HEAD}
        notes = ""
        if mech == "aft_local":
            kw["window"] = 8
            notes = "window s = 8"
        if mech == "aft_conv":
            kw["kernel"] = 3
            notes = "8x8 token grid, kernel 3x3"
        if mech == "torch_mha":
            notes = "nn.MultiheadAttention(batch_first=True) in the attention slot (Standard attention)"
        if mech == "handwritten":
            notes = "hand-written Standard attention: packed QKV [in, 3d], bias after matmul, pre-scaled q, permuted k"
        out.append(Fixture(
            f"mnist_vit_{mech}_h{h}", "mnist", mech, h,
            _bind(M.mnist_vit, mech, h, **kw), (1, 64, 64), shrunk=dict(mnist_shrunk), notes=notes,
        ))  # fmt: skip

    out.append(Fixture(
        "mnist28_aftconv_classifier_h4", "mnist28", "aft_conv", 4,
        _bind(M.aft_conv_classifier, heads=4, kernel=5), (1, 28, 28),
        notes="not a paper model: 28x28 grey, 4x4 patches (7x7 grid), d=64, 3 pre-LN AFT-conv blocks (kernel 5x5), mean pool, head [128]",
    ))  # fmt: skip

    text = [("standard", 2), ("efficient", 1), ("super", 1), ("aft_simple", 1), ("fastformer", 2)]
    for task, builder, tokens in (("imdb", M.imdb_text, 32), ("amazon", M.amazon_text, 64)):
        for mech, h in text:
            out.append(Fixture(
                f"{task}_text_{mech}_h{h}", task, mech, h,
                _bind(builder, mech, h, vocab=TEXT_VOCAB), (tokens,), token_ids=True, vocab=TEXT_VOCAB,
                shrunk={"vocab": f"20000 -> {TEXT_VOCAB}"},
            ))  # fmt: skip

    out.append(Fixture(
        "cifar100_vit_super_h1", "cifar100", "super", 1,
        _bind(M.cifar100_vit, "super", 1, layers=CIFAR_LAYERS, head_units=CIFAR_HEAD), (3, 72, 72),
        shrunk={"layers": f"8 -> {CIFAR_LAYERS}", "head_units": f"[2048, 1024] -> {list(CIFAR_HEAD)}"},
    ))  # fmt: skip

    layer = [
        ("standard", 2, {"causal": True}), ("optimised", 2, {"causal": True}),
        ("efficient", 2, {"causal": True}), ("super", 2, {"causal": True}),
        ("aft_full", 1, {"rank": 4}), ("aft_full", 1, {"causal": True}),
        ("aft_local", 1, {"window": 3, "causal": True}), ("aft_simple", 1, {"causal": True}),
        ("aft_conv", 2, {"kernel": 3, "grid": (4, 4)}), ("fastformer", 4, {}),
        # One head, as in the paper-size benchmark models: the exporter writes K's projection
        # as [T, 1] -> [T] -> [T, 1] + b and a head view on only one side of each pooling.
        ("aft_conv", 1, {"kernel": 3, "grid": (1, 16)}), ("fastformer", 1, {}),
    ]  # fmt: skip
    for mech, h, kw in layer:
        tag = "_".join(["causal" if kw.get("causal") else ""] + [f"r{kw['rank']}" if "rank" in kw else ""])
        tag = "_".join(p for p in tag.split("_") if p)
        name = f"layer_{mech}_h{h}" + (f"_{tag}" if tag else "")
        notes = ", ".join(f"{k}={v}" for k, v in kw.items())
        out.append(Fixture(
            name, "layer", mech, h, _bind(M.mechanism_layer, mech, d=LAYER_D, tokens=LAYER_T, heads=h, **kw),
            (LAYER_T, LAYER_D), notes=f"single mechanism layer [N, {LAYER_T}, {LAYER_D}]" + (f"; {notes}" if notes else ""),
        ))  # fmt: skip
    return out


def _bind(fn: Callable[..., nn.Module], *args, **kw) -> Callable[[], nn.Module]:
    return lambda: fn(*args, **kw)


def _fixture_init(model: nn.Module, gen: torch.Generator) -> None:
    """Re-draw the weights so that every part of the model visibly shapes the output.

    PyTorch's default Linear init (uniform ±1/√in) gives near-uniform attention, so a converter
    that got the mechanism wrong could still land within tolerance. Here dense and conv weights
    are N(0, 1/fan_in) (unit gain: scores q·k/√c have variance ~1), biases N(0, 0.1²), Super's
    W^A N(0, 1/T), and LayerNorm γ, β are moved away from 1 and 0 (as after training).
    """
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.Linear, nn.Conv2d)):
                fan_in = mod.weight[0].numel()
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) / fan_in**0.5)
                if mod.bias is not None:
                    mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=gen))
            elif isinstance(mod, nn.MultiheadAttention):
                w = mod.in_proj_weight
                w.copy_(torch.randn(w.shape, generator=gen) / w.shape[1] ** 0.5)
                mod.in_proj_bias.copy_(0.1 * torch.randn(mod.in_proj_bias.shape, generator=gen))
            elif isinstance(mod, Attention) and mod.wa is not None:
                mod.wa.copy_(torch.randn(mod.wa.shape, generator=gen) / mod.wa.shape[1] ** 0.5)
                mod.ba.copy_(0.1 * torch.randn(mod.ba.shape, generator=gen))
        for mod in model.modules():
            if isinstance(mod, nn.LayerNorm):
                mod.weight.copy_(1.0 + 0.1 * torch.randn(mod.weight.shape, generator=gen))
                mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=gen))


def make_inputs(fx: Fixture, gen: torch.Generator) -> torch.Tensor:
    """Deterministic sample inputs, batch :data:`SAMPLES`."""
    shape = (SAMPLES, *fx.input_shape)
    if fx.token_ids:
        return torch.randint(0, fx.vocab, shape, generator=gen, dtype=torch.int64)
    if fx.task == "layer":
        return torch.randn(shape, generator=gen)
    return torch.rand(shape, generator=gen)  # images in [0, 1]


def export_fixture(fx: Fixture, out_dir: Path) -> dict:
    """Build, export, check and write one fixture; returns its meta."""
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = fx.build().eval()
    _fixture_init(model, gen)
    x = make_inputs(fx, gen)
    with torch.no_grad():
        y = model(x)

    dest = out_dir / fx.name
    dest.mkdir(parents=True, exist_ok=True)
    onnx_path = dest / "model.onnx"
    input_name = "ids" if fx.token_ids else "x"
    with tempfile.TemporaryDirectory() as tmp:
        prog = torch.onnx.export(
            model,
            (x,),
            dynamo=True,
            opset_version=OPSET,
            input_names=[input_name],
            output_names=["logits" if fx.task != "layer" else "y"],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            verbose=False,
        )
        tmp_path = Path(tmp) / "model.onnx"
        prog.save(tmp_path, external_data=False)
        proto = onnx.load(tmp_path, load_external_data=False)
        if any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer
        ):  # pragma: no cover - only with >2 GB models
            proto = onnx.load(tmp_path)
            onnx.save_model(proto, tmp_path, save_as_external_data=False)
        shutil.copyfile(tmp_path, onnx_path)
    for stale in dest.iterdir():
        if stale.name not in ("model.onnx", "input.npy", "output.npy", "meta.json"):
            stale.unlink()

    proto = onnx.load(onnx_path)
    onnx.checker.check_model(proto, full_check=True)
    errors = check_with_ort(onnx_path, x.numpy(), y.numpy())

    np.save(dest / "input.npy", x.numpy())
    np.save(dest / "output.npy", y.numpy().astype(np.float32))
    meta = {
        "name": fx.name,
        "task": fx.task,
        "mechanism": fx.mechanism,
        "heads": fx.heads,
        "input": {"name": input_name, "shape": list(x.shape), "dtype": str(x.numpy().dtype), "dynamic_axes": [0]},
        "output": {"name": proto.graph.output[0].name, "shape": list(y.shape), "dtype": "float32"},
        "config": _config(model),
        "parameters": sum(p.numel() for p in model.parameters()),
        "attention_parameters": M.attention_parameter_count(model),
        "attention_parameters_per_layer": _per_layer_attention(model),
        "shrunk": fx.shrunk,
        "notes": fx.notes,
        "weights": f"random (torch.manual_seed({SEED}), dense N(0, 1/fan_in), LayerNorm gamma/beta perturbed); not trained",
        "opset": OPSET,
        "exporter": f"torch {torch.__version__} torch.onnx.export(dynamo=True)",
        "ops": dict(sorted(Counter(n.op_type for n in proto.graph.node).items())),
        "onnxruntime": {"version": ort.__version__, **errors},
        "model_bytes": onnx_path.stat().st_size,
    }
    (dest / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def check_with_ort(path: Path, x: np.ndarray, y_ref: np.ndarray) -> dict:
    """Run ``path`` with onnxruntime on the full batch and on batch 1; raise if the relative
    error exceeds :data:`REL_TOL`. Returns the errors."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    y = sess.run(None, {name: x})[0]
    y1 = sess.run(None, {name: x[:1]})[0]
    scale = max(1.0, float(np.abs(y_ref).max()))
    err = float(np.abs(y - y_ref).max())
    err1 = float(np.abs(y1 - y_ref[:1]).max())
    if y.shape != y_ref.shape or max(err, err1) > REL_TOL * scale:
        raise RuntimeError(
            f"{path}: onnxruntime disagrees with PyTorch: shape {y.shape} vs {y_ref.shape}, "
            f"max abs diff {err:.3e} (batch 1: {err1:.3e}), allowed {REL_TOL * scale:.3e}"
        )
    return {"max_abs_diff": err, "max_abs_diff_batch1": err1, "max_abs_output": scale}


def _config(model: nn.Module) -> dict:
    """Architecture facts for meta.json."""
    cfg: dict = {"class": type(model).__name__}
    if isinstance(model, M.ViT):
        cfg.update(
            tokens=model.tokens,
            d=model.pos.shape[1],
            layers=len(model.blocks),
            patch=model.patch_embed.kernel_size[0],
            channels=model.patch_embed.in_channels,
            pool=model.pool,
            head_units=[m.out_features for m in model.head if isinstance(m, nn.Linear)],
            classes=model.classifier.out_features,
            norm="pre-LN, eps 1e-6",
            mlp="GELU after every MLP layer",
        )
    elif isinstance(model, M.TextClassifier):
        cfg.update(
            tokens=model.tokens,
            d=model.tok.embedding_dim,
            vocab=model.tok.num_embeddings,
            layers=len(model.blocks),
            ffn=model.blocks[0].ffn[0].out_features,
            head_units=[m.out_features for m in model.head if isinstance(m, nn.Linear)],
            classes=model.classifier.out_features,
            norm="post-LN, eps 1e-6",
            pool="mean",
        )
    attn = next((m.attn for m in model.modules() if hasattr(m, "attn")), None)
    if attn is not None:
        cfg["mixer"] = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in vars(attn).items()
            if k in ("heads", "causal", "scale", "window", "kernel", "grid", "rank", "tokens", "d")
        }
        if hasattr(attn, "variant"):
            cfg["mixer"]["variant"] = attn.variant.value
    return cfg


def _per_layer_attention(model: nn.Module) -> int:
    attn = next((m.attn for m in model.modules() if hasattr(m, "attn")), None)
    return sum(p.numel() for p in attn.parameters()) if attn is not None else 0


def write_readme(out_dir: Path) -> str:
    """Write ``out_dir/README.md`` from the fixtures' meta.json and model.onnx files."""
    metas = []
    for d in sorted(p for p in out_dir.iterdir() if (p / "meta.json").exists()):
        metas.append(json.loads((d / "meta.json").read_text()))
    order = {f.name: i for i, f in enumerate(fixtures())}
    metas.sort(key=lambda m: order.get(m["name"], len(order)))

    node_counts: Counter[str] = Counter()
    fixture_counts: Counter[str] = Counter()
    total = 0
    rows = []
    for m in metas:
        d = out_dir / m["name"]
        proto = onnx.load(d / "model.onnx")
        ops = Counter(n.op_type for n in proto.graph.node)
        node_counts.update(ops)
        fixture_counts.update(ops.keys())
        size = sum(f.stat().st_size for f in d.iterdir())
        total += size
        shrunk = "; ".join(f"{k} {v}" for k, v in m["shrunk"].items()) or "none"
        notes = f" ({m['notes']})" if m["notes"] else ""
        rows.append(
            f"| `{m['name']}` | {m['task']} | {m['mechanism']} | {m['heads']} | {m['input']['shape']} "
            f"{m['input']['dtype']} → {m['output']['shape']} | {m['parameters']:,} | "
            f"{m['attention_parameters_per_layer']:,} | {size / 1e6:.2f} MB | "
            f"{m['onnxruntime']['max_abs_diff']:.1e} | {shrunk}{notes} |"
        )
    op_rows = [f"| {op} | {node_counts[op]} | {fixture_counts[op]} |" for op in sorted(node_counts)]
    text = f"""# ONNX fixtures for the ONNX → Kestrel converter

Produced by `converters/python` (`python -m kestrel_torch.export --out ../fixtures`, see
[`../python/README.md`](../python/README.md)); do not edit by hand. Each directory holds

- `model.onnx`: `torch.onnx.export(dynamo=True, opset_version={OPSET})`, dynamic batch axis 0,
  one self-contained file (no external data), checked by `onnx.checker`;
- `input.npy`: {SAMPLES} deterministic samples (float32 images in [0, 1] / activations, or int64 token ids);
- `output.npy`: PyTorch's float32 output for them (logits; `[N, T, d]` for `layer_*`);
- `meta.json`: task, mechanism, heads, shapes, configuration, parameter counts, what was shrunk
  against the paper, ONNX op counts, onnxruntime's max abs difference from PyTorch.

**Weights are random** (seeded, LayerNorm γ/β perturbed away from 1/0), not trained: training is a
later issue. The fixtures test that a converted model computes what PyTorch computes; use a
relative tolerance around 1e-4 in f32.

Models (see `kestrel_torch/models.py`; DESIGN.md §4): ViTs are keras.io-style (Conv2d patch
embedding, learned position embedding, pre-LN, MLP [2d, d] with GELU after every layer, final LN,
flatten, GELU head, linear classifier); text models are token + position embedding, post-LN,
FFN [32 ReLU, d], mean pool, Dense(20, ReLU), classifier. Outputs are logits (no softmax).
Inputs: `x` for images/activations, `ids` for token ids. The MNIST ViT takes 64×64 (28×28
resized, done outside the model).

What the exporter does to the graph (the converter must cope): its optimiser constant-folds
parameter-only subgraphs, so weight transposes, AFT's `exp(w − max w)` (with the AFT-local window
and causal masks applied), AFT-conv's `exp(w) − 1` kernels, Super's masked W^A and the like appear
as constant initializers with generated names (`val_*`, `exp`), and identical initializers may be
shared between layers. AFT is invariant to adding a per-row constant to w, so `log` of such a
constant is a valid w for AFT-full; for AFT-local subtract the row's out-of-window value.

## Fixtures ({len(metas)}, {total / 1e6:.2f} MB in total)

"attn/layer" is the parameter count of one attention layer (the paper's counts: Standard
4(d²+d), Optimised 3(d²+d), Efficient 2(d²+d), Super 2(d²+d)+T²+T). "ORT diff" is
onnxruntime's max abs difference from PyTorch on `input.npy`.

| fixture | task | mechanism | heads | input → output | params | attn/layer | size | ORT diff | shrunk vs paper (notes) |
|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

## ONNX op types across all fixtures

The converter must lower every one of these ({len(node_counts)} op types, domain `ai.onnx`,
opset {OPSET}). Counts are nodes over all fixtures, and how many fixtures use the op.

| op | nodes | fixtures |
|---|---|---|
{chr(10).join(op_rows)}
"""
    (out_dir / "README.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kestrel_torch.export", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="output directory (one subdirectory per fixture)")
    parser.add_argument("--only", action="append", default=[], help="export only this fixture (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the fixtures and exit")
    parser.add_argument("--no-readme", action="store_true", help="do not (re)write OUT/README.md")
    args = parser.parse_args(argv)

    all_fx = fixtures()
    if args.list:
        for fx in all_fx:
            print(fx.name)
        return 0
    if args.out is None:
        parser.error("--out is required")
    names = {f.name for f in all_fx}
    unknown = set(args.only) - names
    if unknown:
        parser.error(f"unknown fixture(s) {sorted(unknown)}; see --list")
    chosen = [f for f in all_fx if not args.only or f.name in args.only]

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    os.environ.setdefault("TORCH_LOGS", "-all")
    args.out.mkdir(parents=True, exist_ok=True)
    worst = 0.0
    for fx in chosen:
        meta = export_fixture(fx, args.out)
        e = meta["onnxruntime"]
        worst = max(worst, e["max_abs_diff"] / e["max_abs_output"], e["max_abs_diff_batch1"] / e["max_abs_output"])
        print(
            f"{fx.name:40s} params {meta['parameters']:>9,}  onnx {meta['model_bytes'] / 1e6:6.2f} MB  "
            f"ORT max abs diff {e['max_abs_diff']:.2e} (batch 1 {e['max_abs_diff_batch1']:.2e})",
            flush=True,
        )
    print(f"worst relative ORT difference: {worst:.2e} (limit {REL_TOL:.0e})")
    if not args.no_readme:
        write_readme(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
