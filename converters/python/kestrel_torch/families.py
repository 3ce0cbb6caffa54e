"""Whole model families, enumerated, exported with both PyTorch exporters (issue 33, item 6).

Usage::

    python -m kestrel_torch.families --out /tmp/families                     # everything
    python -m kestrel_torch.families --out /tmp/families --source timm --only resnet
    python -m kestrel_torch.families --list --source hf                      # what would run

Nothing here is a hand list: the models come from the libraries' own registries.

* **torchvision**: every classification model of ``torchvision.models.list_models(module=
  torchvision.models)`` with fewer than 50 M parameters (counted on the ``meta`` device with
  ``weights=None``).
* **timm**: ``timm.list_models()`` grouped into architecture families by the module that registers
  the model (``timm.models._registry._model_to_module``: ``resnet``, ``vision_transformer``, …);
  per family the smallest member by parameter count that builds with ``pretrained=False`` and
  exports (the next smallest is tried, up to :data:`TIMM_TRIES`, when one does not).
* **hf** (transformers): every model type of ``AutoModel``'s mapping (``MODEL_MAPPING_NAMES``),
  built from its config class with a tiny configuration (:func:`tiny_config`: hidden 32, 2
  layers, 2 heads, vocabulary 128, …, applied to nested text/vision/audio configs too), random
  init, ``from_config`` only (``HF_HUB_OFFLINE=1``; nothing is downloaded). Encoder-decoders
  export their encoder. Inputs come from the forward signature: ``input_ids`` (+
  ``attention_mask``, the last 4 positions padded), ``pixel_values``, ``input_values`` (a short
  waveform), ``input_features`` (log-mel frames). A type that cannot be built tiny or fed is
  recorded with the reason.

Each model is exported with the legacy exporter (``dynamo=False``, opset 17) and the dynamo
exporter (``dynamo=True``, opset 18), static shapes, batch 1, into
``OUT/<source>/<model>-<exporter>/``: ``model.onnx``, ``input.npy`` (``input1.npy`` … for further
inputs), ``output.npy`` (onnxruntime's first output on them, float32) and ``meta.json`` (source,
family, params, exporter, opset, inputs, ONNX op counts, onnxruntime's difference from PyTorch
and its median latency at one thread). A failed export writes only ``meta.json`` with
``export_error``: the failure is torch's, counted apart from the converter's. A model that cannot
be built writes ``OUT/<source>/<model>-build/meta.json`` with ``build_error``.

Every model runs under a time limit (SIGALRM, :data:`MODEL_SECONDS`) and every exception is
caught; the run resumes where it stopped (a folder with a ``meta.json`` is not redone), and
``--minutes`` bounds a source's wall time (models not reached are listed in
``OUT/<source>/not_run.json``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import random
import re
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from .zoo import perturb_norms  # noqa: E402

SEED = 7
MAX_PARAMS_TORCHVISION = 50_000_000
TIMM_TRIES = 3
MODEL_SECONDS = 150
IMAGE = 96
TEXT_LEN = 16
PAD = 4
VOCAB = 128
WAVE = 1600
EXPORTERS = (("legacy", 17), ("dynamo", 18))
ORT_RUNS = 7


class ModelTimeout(Exception):
    pass


@dataclass
class Entry:
    """One model to export: how to build it and feed it."""

    source: str
    name: str
    family: str
    make: Callable[[], tuple[nn.Module, Callable[[torch.Generator], tuple], tuple[str, ...]]]
    params: int = 0
    kind: str = ""
    candidates: list = field(default_factory=list)  # timm: further members to try


# --------------------------------------------------------------------------- helpers


def count_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def meta_params(build: Callable[[], nn.Module]) -> int:
    """Parameter count of a model built on the meta device (no memory, no init cost)."""
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return count_params(build())


def image_inputs(size: int, channels: int = 3) -> Callable[[torch.Generator], tuple]:
    return lambda g: (torch.rand(1, channels, size, size, generator=g),)


class FirstOutput(nn.Module):
    """Calls the model with keyword inputs and returns its first tensor output (ModelOutput,
    tuple or tensor), as float."""

    def __init__(self, model: nn.Module, names: tuple[str, ...], extra: dict | None = None) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.extra = extra or {}

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        out = self.model(**dict(zip(self.names, args)), **self.extra)
        return first_tensor(out)


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        for o in out:
            t = first_tensor(o) if not isinstance(o, torch.Tensor) else o
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                return t
    raise TypeError(f"no float tensor output in {type(out).__name__}")


# --------------------------------------------------------------------------- torchvision


def torchvision_entries() -> tuple[list[Entry], list[dict]]:
    import torchvision.models as tvm

    entries, skipped = [], []
    for name in tvm.list_models(module=tvm):
        try:
            params = meta_params(lambda: tvm.get_model(name, weights=None))
        except Exception as e:  # noqa: BLE001
            skipped.append({"name": name, "reason": f"cannot count parameters: {first_line(e)}"})
            continue
        if params >= MAX_PARAMS_TORCHVISION:
            skipped.append({"name": name, "reason": f"{params / 1e6:.1f} M parameters (limit 50 M)"})
            continue

        def make(name=name):
            model = tvm.get_model(name, weights=None)
            # Inception v3 and GoogLeNet have auxiliary heads only in training; ViT/MaxViT fix the size.
            return model, None, ("x",)

        entries.append(Entry("torchvision", name, name.rstrip("0123456789_").split("_")[0], make, params, "vision"))
    return entries, skipped


def image_size_that_runs(model: nn.Module, sizes: tuple[int, ...]) -> int:
    """The first of `sizes` the model's forward accepts."""
    last = None
    for s in sizes:
        try:
            with torch.no_grad():
                model(torch.rand(1, 3, s, s))
            return s
        except Exception as e:  # noqa: BLE001
            last = e
    raise RuntimeError(f"no image size of {sizes} runs: {first_line(last)}")


# --------------------------------------------------------------------------- timm


def timm_entries(cache: Path) -> tuple[list[Entry], list[dict]]:
    import timm
    from timm.models import _registry

    counts: dict[str, int] = json.loads(cache.read_text()) if cache.exists() else {}
    names = timm.list_models()
    fresh = [n for n in names if n not in counts]
    for i, n in enumerate(fresh):
        try:
            counts[n] = meta_params(lambda: timm.create_model(n, pretrained=False))
        except Exception:  # noqa: BLE001
            counts[n] = -1
        if i % 100 == 0:
            print(f"  timm parameter counts: {i}/{len(fresh)}", flush=True)
    if fresh:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(counts, indent=0, sort_keys=True))
    families: dict[str, list[tuple[int, str]]] = {}
    for n in names:
        families.setdefault(_registry._model_to_module.get(n, "?"), []).append((counts.get(n, -1), n))
    entries, skipped = [], []
    for fam, members in sorted(families.items()):
        members = sorted((p, n) for p, n in members if p > 0)
        if not members:
            skipped.append({"name": fam, "reason": "no member builds on the meta device"})
            continue
        cands = [Entry("timm", n, fam, timm_maker(n), p, "vision") for p, n in members[:TIMM_TRIES]]
        first = cands[0]
        first.candidates = cands[1:]
        entries.append(first)
    return entries, skipped


def timm_maker(name: str):
    def make():
        import timm

        cfg = timm.get_pretrained_cfg(name)
        cfg = cfg.to_dict() if cfg is not None and hasattr(cfg, "to_dict") else {}
        default = tuple(cfg.get("input_size", (3, 224, 224)))
        model = None
        if cfg.get("fixed_input_size", False):
            try:  # a smaller image where the model takes img_size
                model = timm.create_model(name, pretrained=False, img_size=IMAGE)
                image_size_that_runs(model, (IMAGE,))
                return model, image_inputs(IMAGE, default[0]), ("x",)
            except Exception:  # noqa: BLE001
                model = None
        model = timm.create_model(name, pretrained=False)
        model.eval()
        sizes = (IMAGE, default[1]) if not cfg.get("fixed_input_size", False) else (default[1],)
        if default[0] != 3:
            return model, image_inputs(default[1], default[0]), ("x",)
        size = image_size_that_runs(model, sizes)
        return model, image_inputs(size), ("x",)

    return make


# --------------------------------------------------------------------------- Hugging Face

TINY_INT = {
    # widths
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "dim": 32, "embed_dim": 32, "embedding_size": 32,
    "projection_dim": 32, "text_embed_dim": 32, "vision_embed_dim": 32, "word_embed_proj_dim": 32,
    "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "d_ff": 64,
    "hidden_dim": 64, "n_inner": 64, "mlp_dim": 64, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "d_kv": 16, "head_dim": 16, "kv_channels": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16,
    "kv_lora_rank": 16, "q_lora_rank": 16, "conv_dim_out": 32,
    # depth
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2, "decoder_layers": 2,
    "num_decoder_layers": 2, "num_encoder_layers": 2, "depth": 2, "n_positions": 64,
    # heads
    "num_attention_heads": 2, "n_head": 2, "n_heads": 2, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
    "num_key_value_heads": 2, "num_kv_heads": 2, "multi_query_group_num": 2,
    # experts
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    # tables
    "vocab_size": VOCAB, "max_position_embeddings": 64, "max_source_positions": 16, "max_target_positions": 16,
    "image_size": 64, "patch_size": 8, "num_labels": 4, "type_vocab_size": 2,
}
TINY_LIST_WIDTH = ("hidden_sizes", "embed_dims", "dims", "conv_dim", "channels", "hidden_dims", "embed_dim")
TINY_LIST_DEPTH = ("depths", "num_layers", "layers", "num_hidden_layers", "block_repeats")
TINY_LIST_HEADS = ("num_heads", "num_attention_heads", "heads")
SUBCONFIGS = ("text_config", "vision_config", "audio_config", "encoder", "decoder", "encoder_config",
              "decoder_config", "speech_config", "backbone_config", "qformer_config")


def tiny_config(cfg) -> None:
    """Shrinks a transformers config in place (and its nested configs)."""
    d = cfg.to_dict() if hasattr(cfg, "to_dict") else {}
    for key, value in d.items():
        if key in SUBCONFIGS:
            sub = getattr(cfg, key, None)
            if sub is not None and hasattr(sub, "to_dict"):
                tiny_config(sub)
            continue
        if isinstance(value, bool):
            continue
        if key in TINY_INT and isinstance(value, int) and value > TINY_INT[key]:
            setattr(cfg, key, TINY_INT[key])
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                                for v in value):
            if key in TINY_LIST_WIDTH:
                setattr(cfg, key, type(value)(min(v, 16 * 2**i) for i, v in enumerate(value)))
            elif key in TINY_LIST_DEPTH:
                setattr(cfg, key, type(value)(1 for _ in value))
            elif key in TINY_LIST_HEADS:
                setattr(cfg, key, type(value)(min(v, 2**i) for i, v in enumerate(value)))
    # Special tokens inside the small vocabulary.
    vocab = getattr(cfg, "vocab_size", None)
    if isinstance(vocab, int):
        for key, value in d.items():
            if key.endswith("token_id") and isinstance(value, int) and value >= vocab:
                setattr(cfg, key, min(3, vocab - 1))
            elif key.endswith("token_id") and isinstance(value, list):
                setattr(cfg, key, [min(v, vocab - 1) for v in value if isinstance(v, int)])
    for key in ("use_cache", "output_attentions", "output_hidden_states"):
        if hasattr(cfg, key):
            setattr(cfg, key, False)


def hf_entries(only: str = "") -> tuple[list[Entry], list[dict]]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

    entries = []
    for mtype, cls in sorted(MODEL_MAPPING_NAMES.items()):
        if isinstance(cls, (list, tuple)):
            cls = cls[0]
        kind = "decoder" if mtype in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else "encoder"
        entries.append(Entry("hf", mtype, mtype, hf_maker(mtype, cls), 0, kind))
    return entries, []


def hf_maker(mtype: str, cls_name: str):
    def make():
        import transformers
        from transformers import AutoConfig

        cfg = AutoConfig.for_model(mtype)
        tiny_config(cfg)
        for attr in ("_attn_implementation",):
            if hasattr(cfg, attr):
                try:
                    setattr(cfg, attr, "eager")
                except Exception:  # noqa: BLE001
                    pass
        cls = getattr(transformers, cls_name)
        torch.manual_seed(SEED)
        model = cls(cfg)
        model.eval()
        if getattr(cfg, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
            model = model.get_encoder()
        sig = inspect.signature(model.forward).parameters
        names, makers = [], []
        vocab = min(int(getattr(cfg, "vocab_size", None) or getattr(getattr(cfg, "text_config", None), "vocab_size",
                                                                      VOCAB) or VOCAB), VOCAB)
        vision = getattr(cfg, "vision_config", None) or cfg
        size = int(getattr(vision, "image_size", 32) or 32) if not isinstance(getattr(vision, "image_size", 32),
                                                                             (list, tuple)) else 32
        chans = int(getattr(vision, "num_channels", 3) or 3)
        if "input_ids" in sig:
            names.append("input_ids")
            makers.append(lambda g: torch.randint(4, max(5, vocab), (1, TEXT_LEN), generator=g))
            if "attention_mask" in sig:
                names.append("attention_mask")

                def mask(g):
                    m = torch.ones(1, TEXT_LEN, dtype=torch.int64)
                    m[0, TEXT_LEN - PAD:] = 0
                    return m

                makers.append(mask)
        if "pixel_values" in sig:
            names.append("pixel_values")
            makers.append(lambda g: torch.rand(1, chans, size, size, generator=g))
        if "input_values" in sig:
            names.append("input_values")
            makers.append(lambda g: torch.randn(1, WAVE, generator=g))
        if "input_features" in sig:
            names.append("input_features")
            mel = int(getattr(cfg, "num_mel_bins", 80) or 80)
            frames = 2 * int(getattr(cfg, "max_source_positions", 16) or 16)
            if "whisper" in mtype or "moonshine" in mtype:
                makers.append(lambda g: torch.randn(1, mel, frames, generator=g))
            else:
                feat = int(getattr(cfg, "input_feat_per_channel", mel) or mel) * int(
                    getattr(cfg, "input_channels", 1) or 1)
                makers.append(lambda g: torch.randn(1, frames, feat, generator=g))
        if not names:
            raise ValueError(f"no input it can be fed ({', '.join(list(sig)[:6])})")
        # Parameters without a default that we do not feed make the call fail: say which.
        missing = [p for p, v in sig.items() if v.default is inspect.Parameter.empty
                   and v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL) and p not in names]
        if missing:
            raise ValueError(f"needs inputs {missing}")
        extra = {k: False for k in ("use_cache",) if k in sig}
        if "return_dict" in sig:
            extra["return_dict"] = True
        if "pixel_values" in names and "input_ids" in names:
            kind = "vision-language"
        elif "pixel_values" in names:
            kind = "vision"
        elif "input_values" in names or "input_features" in names:
            kind = "audio"
        else:
            kind = "text"
        model = FirstOutput(model, tuple(names), extra)
        gen = lambda g: tuple(m(g) for m in makers)  # noqa: E731
        model.hf_kind = kind
        return model, gen, tuple(names)

    return make


# --------------------------------------------------------------------------- export


def first_line(e) -> str:
    s = str(e).strip() or type(e).__name__
    lines = [ln for ln in s.splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


def ort_session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def export_model(model: nn.Module, inputs: tuple, names: tuple[str, ...], exporter: str, opset: int,
                 path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "legacy":
            torch.onnx.export(model, inputs, str(path), input_names=list(names), output_names=["output"],
                              opset_version=opset, dynamo=False)
        else:
            prog = torch.onnx.export(model, inputs, input_names=list(names), output_names=["output"],
                                     opset_version=opset, dynamo=True, external_data=False, verbose=False)
            prog.save(str(path), external_data=False)


def run_entry(e: Entry, out: Path, force: bool) -> list[dict]:
    """Builds one model and exports it with both exporters; returns the metas written."""
    base = out / e.source
    todo = [(x, o) for x, o in EXPORTERS if force or not (base / f"{e.name}-{x}" / "meta.json").exists()]
    if not todo:
        return [json.loads((base / f"{e.name}-{x}" / "meta.json").read_text()) for x, _ in EXPORTERS]
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    common = {"source": e.source, "model": e.name, "family": e.family}
    t0 = time.time()
    try:
        model, gen, names = e.make()
        model.eval()
        with torch.no_grad():
            perturb_norms(model, g)
        if gen is None:
            size = image_size_that_runs(model, (IMAGE, 224, 299))
            gen = image_inputs(size)
        inputs = gen(g)
        with torch.no_grad():
            want = first_tensor(model(*inputs)).float().numpy()
    except Exception as err:  # noqa: BLE001
        d = base / f"{e.name}-build"
        d.mkdir(parents=True, exist_ok=True)
        meta = {**common, "build_error": first_line(err), "seconds": round(time.time() - t0, 1)}
        (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        return [meta]
    params = count_params(model)
    kind = getattr(model, "hf_kind", e.kind)
    metas = []
    for exporter, opset in todo:
        d = base / f"{e.name}-{exporter}"
        d.mkdir(parents=True, exist_ok=True)
        for stale in d.iterdir():
            stale.unlink()
        meta = {**common, "kind": kind, "params": params, "exporter": exporter, "opset": opset,
                "inputs": [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
                           for n, t in zip(names, inputs)],
                "output_shape": list(want.shape)}
        t1 = time.time()
        path = d / "model.onnx"
        try:
            export_model(model, inputs, names, exporter, opset, path)
            proto = onnx.load(str(path))
            meta["onnx_ops"] = dict(sorted(Counter(n.op_type for n in proto.graph.node).items()))
            meta["onnx_bytes"] = path.stat().st_size
            meta["export_seconds"] = round(time.time() - t1, 1)
        except Exception as err:  # noqa: BLE001
            path.unlink(missing_ok=True)
            meta["export_error"] = first_line(err)
            (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
            metas.append(meta)
            continue
        try:
            sess = ort_session(path)
            feeds = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)}
            got = sess.run(None, feeds)[0].astype(np.float32)
            times = []
            for _ in range(ORT_RUNS):
                s = time.perf_counter()
                sess.run(None, feeds)
                times.append(time.perf_counter() - s)
            meta["ort_median_ms"] = float(np.median(times) * 1e3)
            meta["ort_vs_torch_max_abs"] = float(np.abs(got - want).max()) if got.shape == want.shape else None
            meta["output_max_abs"] = float(np.abs(got).max()) if got.size else 0.0
            meta["ort_inputs"] = [i.name for i in sess.get_inputs()]
            for i, (n, t) in enumerate(zip(names, inputs)):
                if any(x.name == n for x in sess.get_inputs()) or i < len(sess.get_inputs()):
                    np.save(d / ("input.npy" if i == 0 else f"input{i}.npy"), t.numpy())
            np.save(d / "output.npy", got)
        except Exception as err:  # noqa: BLE001
            meta["export_error"] = "onnxruntime: " + first_line(err)
            path.unlink(missing_ok=True)
        meta["versions"] = {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": ort.__version__}
        (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        metas.append(meta)
    return metas


def enumerate_source(source: str, out: Path) -> tuple[list[Entry], list[dict]]:
    if source == "torchvision":
        return torchvision_entries()
    if source == "timm":
        return timm_entries(out / "timm" / "params.json")
    return hf_entries()


def alarm(_sig, _frame):
    raise ModelTimeout(f"over the {MODEL_SECONDS} s limit per model")


def main(argv: list[str] | None = None) -> int:
    global MODEL_SECONDS
    ap = argparse.ArgumentParser(prog="python -m kestrel_torch.families", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--source", action="append", choices=["torchvision", "timm", "hf"], default=[])
    ap.add_argument("--only", default="", help="models whose name contains this")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--force", action="store_true", help="redo models already exported")
    ap.add_argument("--minutes", type=float, default=0, help="wall-time budget per source (0: none)")
    ap.add_argument("--seconds", type=int, default=MODEL_SECONDS, help="time limit per model")
    args = ap.parse_args(argv)
    MODEL_SECONDS = args.seconds
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, alarm)
    for source in args.source or ["torchvision", "timm", "hf"]:
        entries, skipped = enumerate_source(source, args.out)
        entries = [e for e in entries if args.only in e.name]
        if source == "hf":  # a fixed shuffle: a budget-cut run is still a sample of every kind
            random.Random(SEED).shuffle(entries)
        (args.out / source).mkdir(parents=True, exist_ok=True)
        (args.out / source / "enumerated.json").write_text(json.dumps(
            {"models": [{"name": e.name, "family": e.family, "params": e.params} for e in entries],
             "skipped": skipped}, indent=1) + "\n")
        print(f"{source}: {len(entries)} models enumerated, {len(skipped)} skipped", flush=True)
        if args.list:
            for e in entries:
                print(f"  {e.name:40} {e.family:24} {e.params:>12,}")
            continue
        start = time.time()
        not_run = []
        for k, e in enumerate(entries):
            if args.minutes and time.time() - start > 60 * args.minutes:
                not_run.append(e.name)
                continue
            tries = [e, *e.candidates]
            for t in tries:
                signal.alarm(MODEL_SECONDS)
                t0 = time.time()
                try:
                    metas = run_entry(t, args.out, args.force)
                except BaseException as err:  # noqa: BLE001 — the time limit included
                    if isinstance(err, KeyboardInterrupt):
                        raise
                    d = args.out / t.source / f"{t.name}-build"
                    d.mkdir(parents=True, exist_ok=True)
                    metas = [{"source": t.source, "model": t.name, "family": t.family,
                              "build_error": first_line(err)}]
                    (d / "meta.json").write_text(json.dumps(metas[0], indent=1) + "\n")
                    if not isinstance(err, ModelTimeout):
                        traceback.print_exc(limit=2)
                finally:
                    signal.alarm(0)
                ok = [m for m in metas if "export_error" not in m and "build_error" not in m]
                status = ", ".join(
                    f"{m.get('exporter', 'build')}: " + ("ok" if m in ok else (m.get("export_error")
                                                                              or m.get("build_error", ""))[:90])
                    for m in metas)
                print(f"[{source} {k + 1}/{len(entries)}] {t.name} ({time.time() - t0:.0f} s) {status}", flush=True)
                if ok:
                    break
        if not_run:
            (args.out / source / "not_run.json").write_text(json.dumps(
                {"reason": f"the {args.minutes:g}-minute budget of the run was spent", "models": not_run},
                indent=1) + "\n")
            print(f"{source}: {len(not_run)} models not run (budget)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
