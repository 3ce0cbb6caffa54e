"""Real-world architectures, as users bring them, exported for the converter's zoo tests.

Usage::

    python -m kestrel_torch.zoo --out ../zoo                  # every model, every exporter
    python -m kestrel_torch.zoo --out /tmp/zoo --only bert     # names containing "bert"
    python -m kestrel_torch.zoo --list

Each model is a common architecture from ``torch.nn``, ``transformers`` or ``timm`` in a small
configuration (random, seeded weights; no pretrained downloads), exported with both PyTorch
exporters: the legacy TorchScript exporter (``dynamo=False``, opset 17) and the dynamo exporter
(opset 18; opset 20 too for the transformers, where ``Gelu`` becomes one ONNX op). For each
export ``NAME`` this writes ``OUT/NAME/``:

* ``model.onnx``: one self-contained file with a dynamic batch axis;
* ``input.npy`` (and ``input1.npy`` … for further inputs): two deterministic samples;
* ``output.npy``: **onnxruntime's** output for them on the CPU (float32) — the reference the
  Rust tests compare Kestrel with;
* ``meta.json``: family, source library, exporter, opset, ONNX op counts, parameter count, the
  max difference between onnxruntime and PyTorch.

An export whose onnxruntime output differs from PyTorch's by more than 1e-4 (relative) aborts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

SEED = 7
SAMPLES = 2
REL_TOL = 1e-4


# --------------------------------------------------------------------------- model builders


class SmallCnn(nn.Module):
    """conv-bn-relu-maxpool twice, global average pool, linear (a classic small image CNN)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """torchvision's resnet18 layout (7×7 stem, max pool, 4 stages of 2 BasicBlocks, avg pool,
    fc) at width 8 instead of 64, so the fixture stays small."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        layers, cin = [], width
        for i, cout in enumerate([width, 2 * width, 4 * width, 8 * width]):
            stride = 1 if i == 0 else 2
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class RnnClassifier(nn.Module):
    """Embedding, a 1-layer LSTM or GRU (batch_first), the last hidden state, linear."""

    def __init__(self, cell: str, vocab: int = 100, dim: int = 32, hidden: int = 32, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(ids))
        return self.head(out[:, -1])


class TextCnn(nn.Module):
    """Kim-style text CNN: embedding, Conv1d of widths 3 and 5, ReLU, max over time, linear."""

    def __init__(self, vocab: int = 100, dim: int = 32, channels: int = 32, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.convs = nn.ModuleList([nn.Conv1d(dim, channels, k, padding=k // 2) for k in (3, 5)])
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids).transpose(1, 2)
        pooled = [torch.relu(c(x)).amax(dim=2) for c in self.convs]
        return self.head(torch.cat(pooled, dim=1))


class TorchEncoder(nn.Module):
    """``nn.TransformerEncoder`` (2 layers, batch_first, GELU) over token embeddings, mean pool."""

    def __init__(self, vocab: int = 100, dim: int = 32, heads: int = 4, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


class HfText(nn.Module):
    """A transformers sequence classifier called with input ids and a 0/1 attention mask,
    returning the logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, attention_mask=mask).logits


class HfImage(nn.Module):
    """A transformers image classifier returning the logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=x).logits


def bert() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, num_labels=4, attn_implementation="eager",
    )
    return HfText(BertForSequenceClassification(cfg))


def distilbert() -> nn.Module:
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    cfg = DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, num_labels=4,
        attn_implementation="eager",
    )
    return HfText(DistilBertForSequenceClassification(cfg))


def hf_vit() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=10, attn_implementation="eager",
    )
    return HfImage(ViTForImageClassification(cfg))


def mobilevit_xxs() -> nn.Module:
    """timm's mobilevit_xxs layout at half width, one transformer layer per MobileViT block and
    a 96-feature head (the full model's fixture would be 5 MB)."""
    from dataclasses import replace

    from timm.models import byobnet, mobilevit

    cfg = mobilevit.model_cfgs["mobilevit_xxs"]

    def shrink(b):
        if isinstance(b, tuple):
            return tuple(shrink(x) for x in b)
        if b.type == "mobilevit":
            kw = {**b.block_kwargs, "transformer_depth": 1, "transformer_dim": b.block_kwargs["transformer_dim"] // 2}
            return replace(b, c=b.c // 2, block_kwargs=kw)
        return replace(b, c=b.c // 2)

    small = replace(cfg, blocks=shrink(cfg.blocks), num_features=96, stem_chs=8)
    return byobnet.ByobNet(small, num_classes=10)


def mobilenetv3_small() -> nn.Module:
    """timm's MobileNetV3-small layout (hard-swish, squeeze-excite, depthwise convs) at channel
    multiplier 0.25 with a 128-channel head convolution instead of 1024."""
    from timm.models import mobilenetv3

    m = mobilenetv3._gen_mobilenet_v3("mobilenetv3_small_050", 0.25, pretrained=False, num_classes=10)
    m.conv_head = nn.Conv2d(m.conv_head.in_channels, 128, 1)
    m.classifier = nn.Linear(128, 10)
    return m


def timm_model(name: str, **kw) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, **kw)

    return make


@dataclass
class Arch:
    """One architecture: how to build it and what it eats."""

    name: str
    family: str  # "transformer" or "cnn" or "rnn"
    library: str
    make: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple]
    names: tuple[str, ...] = ("x",)
    opsets_dynamo: tuple[int, ...] = (18,)


def image(size: int) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.rand(SAMPLES, 3, size, size, generator=g),)


def tokens(length: int = 16, vocab: int = 100) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.randint(1, vocab, (SAMPLES, length), generator=g),)


def tokens_and_mask(length: int = 16, vocab: int = 100) -> Callable[[torch.Generator], tuple]:
    def make(g: torch.Generator) -> tuple:
        ids = torch.randint(1, vocab, (SAMPLES, length), generator=g)
        mask = torch.ones(SAMPLES, length, dtype=torch.int64)
        mask[1, length - 5 :] = 0  # the second sample is padded
        return ids, mask

    return make


ARCHS: list[Arch] = [
    Arch("torch_encoder", "transformer", "torch.nn", TorchEncoder, tokens(), ("ids",)),
    Arch("bert", "transformer", "transformers", bert, tokens_and_mask(), ("ids", "mask"), (18, 20)),
    Arch("distilbert", "transformer", "transformers", distilbert, tokens_and_mask(), ("ids", "mask"), (18, 20)),
    Arch("hf_vit", "transformer", "transformers", hf_vit, image(32), ("x",), (18, 20)),
    Arch("vit_tiny", "transformer", "timm",
         timm_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3,
                    num_classes=10), image(32)),
    Arch("deit_tiny_distilled", "transformer", "timm",
         timm_model("deit_tiny_distilled_patch16_224", img_size=32, patch_size=8, embed_dim=48, depth=2,
                    num_heads=3, num_classes=10), image(32)),
    Arch("levit_128s", "transformer", "timm",
         timm_model("levit_128s", img_size=64, num_classes=10, embed_dim=(32, 48, 64), key_dim=8,
                    num_heads=(2, 3, 4), depth=(1, 1, 1)), image(64)),
    Arch("mobilevit_xxs", "transformer", "timm", mobilevit_xxs, image(64)),
    Arch("convnext_atto", "cnn", "timm",
         timm_model("convnext_atto", num_classes=10, dims=(16, 32, 48, 64), depths=(1, 1, 1, 1)), image(64)),
    Arch("resnet18_w8", "cnn", "torch.nn", ResNet18, image(64)),
    Arch("efficientnet", "cnn", "timm", timm_model("test_efficientnet", num_classes=10), image(64)),
    Arch("mobilenetv3", "cnn", "timm", mobilenetv3_small, image(64)),
    Arch("small_cnn", "cnn", "torch.nn", SmallCnn, image(32)),
    Arch("lstm", "rnn", "torch.nn", lambda: RnnClassifier("lstm"), tokens(), ("ids",)),
    Arch("gru", "rnn", "torch.nn", lambda: RnnClassifier("gru"), tokens(), ("ids",)),
    Arch("text_cnn", "cnn", "torch.nn", TextCnn, tokens(), ("ids",)),
]


# --------------------------------------------------------------------------- export


def perturb_norms(model: nn.Module, g: torch.Generator) -> None:
    """Random-init norms are identities (γ=1, β=0, running stats 0/1): perturb them so that a
    converter that drops one is caught."""
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.copy_(1.0 + 0.2 * torch.rand(m.running_var.shape, generator=g))
        weight, bias = getattr(m, "weight", None), getattr(m, "bias", None)
        if isinstance(m, (nn.LayerNorm, nn.BatchNorm2d, nn.BatchNorm1d, nn.GroupNorm)):
            if weight is not None:
                weight.copy_(1.0 + 0.1 * torch.randn(weight.shape, generator=g))
            if bias is not None:
                bias.copy_(0.1 * torch.randn(bias.shape, generator=g))


def export_one(arch: Arch, exporter: str, opset: int, out: Path) -> dict:
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    model = arch.make().eval()
    with torch.no_grad():
        perturb_norms(model, g)
    inputs = arch.inputs(g)
    with torch.no_grad():
        want = model(*inputs).float().numpy()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.onnx"
    dynamic = {n: {0: "batch"} for n in arch.names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            torch.onnx.export(
                model, inputs, str(path), input_names=list(arch.names), output_names=["logits"],
                dynamic_axes={**dynamic, "logits": {0: "batch"}}, opset_version=opset, dynamo=False,
            )
        else:
            batch = torch.export.Dim("batch", min=1, max=1024)
            shapes = tuple({0: batch} for _ in arch.names)
            prog = torch.onnx.export(
                model, inputs, input_names=list(arch.names), output_names=["logits"], dynamic_shapes=shapes,
                opset_version=opset, dynamo=True, external_data=False,
            )
            prog.save(str(path), external_data=False)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {n: t.numpy() for n, t in zip(arch.names, inputs)}
    got = sess.run(None, feeds)[0].astype(np.float32)
    scale = float(np.abs(want).max()) or 1.0
    diff = float(np.abs(got - want).max())
    if diff > REL_TOL * scale:
        raise RuntimeError(f"{out.name}: onnxruntime differs from PyTorch by {diff:.3g} (scale {scale:.3g})")
    for i, (n, t) in enumerate(zip(arch.names, inputs)):
        np.save(out / ("input.npy" if i == 0 else f"input{i}.npy"), t.numpy())
    np.save(out / "output.npy", got)
    ops = Counter(n.op_type for n in proto.graph.node)
    meta = {
        "name": out.name,
        "architecture": arch.name,
        "family": arch.family,
        "library": arch.library,
        "exporter": exporter,
        "opset": opset,
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
                   for n, t in zip(arch.names, inputs)],
        "output_shape": list(got.shape),
        "params": sum(p.numel() for p in model.parameters()),
        "onnx_bytes": path.stat().st_size,
        "onnx_ops": dict(sorted(ops.items())),
        "ort_vs_torch_max_abs": diff,
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": ort.__version__},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def exports(arch: Arch) -> list[tuple[str, int, str]]:
    rows = [("legacy", 17, f"{arch.name}-legacy17")]
    rows += [("dynamo", o, f"{arch.name}-dynamo{o}") for o in arch.opsets_dynamo]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "zoo")
    ap.add_argument("--only", default="", help="export only names containing this")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    todo = [(a, e, o, n) for a in ARCHS for (e, o, n) in exports(a) if args.only in n]
    if args.list:
        for a, e, o, n in todo:
            print(f"{n:34} {a.family:12} {a.library}")
        return 0
    failed = []
    for a, e, o, n in todo:
        try:
            meta = export_one(a, e, o, args.out / n)
            print(f"{n:34} {meta['params']:>9} params {meta['onnx_bytes'] / 1024:8.1f} KiB  "
                  f"ort-torch {meta['ort_vs_torch_max_abs']:.1e}", flush=True)
        except Exception as err:  # noqa: BLE001 — report every failing export, then fail
            failed.append(n)
            print(f"{n:34} FAILED: {str(err).splitlines()[0][:200]}", file=sys.stderr, flush=True)
    if failed:
        print(f"{len(failed)} exports failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
