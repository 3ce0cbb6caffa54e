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
  init, ``from_config`` only (``HF_HUB_OFFLINE=1``; nothing is downloaded). The tiny config is
  rebuilt through the config's constructor so that derived sizes (head widths, rotary sections,
  sub-configs) follow the shrunk ones; bolder derivations (per-layer lists, Mamba heads, unset
  placeholder ids) fall back to the plain tiny config where they break a model. Encoder-decoders
  export their encoder. Inputs come from the forward signature (:class:`HfFeed`): ``input_ids`` (+
  ``attention_mask``, the last 4 positions padded, with the image/video/audio placeholder tokens
  the model's towers fill, + ``mm_token_type_ids``), ``pixel_values`` (4-D, 5-D with frames, or
  Qwen-VL/NaFlex flattened patches with ``grid_thw``/``spatial_shapes``, which are constants of
  the export), ``pixel_values_videos``, ``input_values`` (a waveform), ``input_features``
  (log-mel frames, either layout), ``past_values`` (time series); a failed call's error that says
  what the model expects instead (placeholder count, frames axis, mel width/length, waveform
  rank/length, patch layout) adapts the inputs and the call is retried. A type that cannot be
  built tiny or fed is recorded with the reason. ``--types a,b`` runs exact names.

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
    "kv_lora_rank": 16, "q_lora_rank": 16, "conv_dim_out": 32, "index_head_dim": 16, "index_n_heads": 2,
    "n_group": 2, "topk_group": 1, "num_expert_group": 2, "num_frames": 4,
    "vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 16, "num_kv_shared_layers": 0,
    "mamba_d_state": 16, "mamba_dt_rank": 8, "adapter_rank": 8, "laurel_rank": 8, "projection_size": 32,
    "pooler_output_size": 32, "mm_tokens_per_image": 16, "codebook_dim": 32, "codebook_size": 64,
    "num_filters": 4, "output_dim": 32, "output_proj_dims": 32, "image_token_embed_dim": 32, "num_embeddings": 64,
    "base_channels": 32, "latent_channels": 32, "embedding_dim": 32, "num_groups": 4,
    # depth
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2, "decoder_layers": 2,
    "num_decoder_layers": 2, "num_encoder_layers": 2, "depth": 2, "n_positions": 64,
    # heads
    "num_attention_heads": 2, "n_head": 2, "n_heads": 2, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
    "num_key_value_heads": 2, "num_kv_heads": 2, "multi_query_group_num": 2, "num_heads": 2,
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


def tiny_value(key: str, value):
    """The tiny replacement of one config value, or ``None`` to keep it."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if key in TINY_INT and value > TINY_INT[key]:
            return TINY_INT[key]
        # Widths another config must agree with (encoder_hidden_size, vision_hidden_size, …): every width
        # here is 32, so shrinking them alike keeps the towers' projections consistent.
        if key.endswith("hidden_size") and key not in TINY_INT and not key.startswith("true_") and value > 32:
            return 32
        # Further head widths, head counts and feed-forward widths by their names' endings (linear
        # attention's ``linear_key_head_dim``/``linear_num_value_heads``, ``alignment_intermediate_size``, …).
        if key.endswith("head_dim") and value > 16:
            return 16
        if key.startswith("linear_num_") and key.endswith("heads") and value > 2:
            return 2
        if (key.endswith("_attention_heads") or key.endswith("_num_heads") or key.endswith("key_value_heads")) \
                and "mamba" not in key and value > 2:  # predictor, sliding-window, … heads
            return 2
        if key.endswith("intermediate_size") and value > 64:
            return 64
        if key.startswith("num_") and key.endswith("_labels") and value > VOCAB:  # extra vocabularies
            return VOCAB
        return None
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          for v in value):
        if key in TINY_LIST_WIDTH:
            return type(value)(min(v, 16 * 2**i) for i, v in enumerate(value))
        if key in TINY_LIST_DEPTH:
            return type(value)(1 for _ in value)
        if key in TINY_LIST_HEADS:
            if len(set(value)) == 1 and len(value) > 1:  # the same heads at every stage (and width)
                return type(value)(min(v, 2) for v in value)
            return type(value)(min(v, 2**i) for i, v in enumerate(value))
        if key in TINY_INT and key.endswith("intermediate_size"):  # per-layer widths
            return type(value)(min(v, TINY_INT[key]) for v in value)
    return None


def cget(cfg, key: str, default=None):
    """``getattr`` that reads per-layer attributes of heterogeneous configs too (their global read
    raises) and never raises."""
    try:
        return getattr(cfg, key, default)
    except Exception:  # noqa: BLE001
        return cfg.__dict__.get(key, default)


def seen_keys(cfg) -> set:
    """Keys that alias another key of the config (``attribute_map``): set through the key they name."""
    return set(getattr(type(cfg), "attribute_map", {}) or {})


def is_config(x) -> bool:
    return hasattr(x, "to_dict") and hasattr(x, "model_type") and not isinstance(x, type)


def fit_rope(cfg) -> None:
    """Multimodal rotary sections (``mrope_section``) that must add up to half the rotary width of the
    tiny head: scaled in proportion where the config has them, and set where the model would fall back
    to a default sized for the full model (configs that exempt ``mrope_section`` from validation)."""
    heads = cget(cfg, "num_attention_heads")
    hidden = cget(cfg, "hidden_size")
    hd = cget(cfg, "head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None)
    if not isinstance(hd, int) or not hd:
        return
    uses = "mrope_section" in (getattr(type(cfg), "ignore_keys_at_rope_validation", None) or ())

    def fit(rope: dict) -> None:
        prf = rope.get("partial_rotary_factor", cget(cfg, "partial_rotary_factor", 1.0)) or 1.0
        want = int(hd * prf) // 2
        sec = rope.get("mrope_section")
        if isinstance(sec, (list, tuple)) and sec and all(isinstance(v, int) for v in sec):
            if sum(sec) != want:
                new = [max(1, v * want // sum(sec)) for v in sec]
                new[0] += want - sum(new)
                rope["mrope_section"] = type(sec)(new)
        elif uses and sec is None and want >= 3:
            rope["mrope_section"] = [want - 2 * (want // 3), want // 3, want // 3]

    rope = cget(cfg, "rope_parameters")
    if isinstance(rope, dict):
        nested = [v for v in rope.values() if isinstance(v, dict)]
        for r in nested or [rope]:
            fit(r)


def fit_layers(d: dict, changes: dict) -> None:
    """The bolder derivations (a fallback without them is tried where they break a model): per-layer
    ``layer_types`` cut to the tiny depth, a head width left to be derived (None) set, Mamba-2 heads
    (2 heads splitting the expanded width)."""
    # Per-layer lists (``layer_types``) as long as the tiny depth.
    depth = changes.get("num_hidden_layers", d.get("num_hidden_layers"))
    lt = d.get("layer_types")
    if isinstance(depth, int) and isinstance(lt, (list, tuple)) and lt and len(lt) != depth and \
            all(isinstance(v, str) for v in lt):
        changes["layer_types"] = list(lt[:depth]) if depth < len(lt) else list(lt) + [lt[-1]] * (depth - len(lt))
    # A head width left to be derived (None) where the model reads it directly.
    heads = changes.get("num_attention_heads", d.get("num_attention_heads"))
    hidden = changes.get("hidden_size", d.get("hidden_size"))
    if "head_dim" in d and d["head_dim"] is None and isinstance(hidden, int) and isinstance(heads, int) and heads:
        changes["head_dim"] = hidden // heads
    # Convolutional audio codecs double their channels at every down/upsampling stage: start narrow.
    if any(isinstance(d.get(k), (list, tuple)) for k in ("downsampling_ratios", "upsampling_ratios")):
        for k in ("encoder_hidden_size", "decoder_hidden_size"):
            if isinstance(d.get(k), int) and d[k] > 8:
                changes[k] = 8
    # State-space (Mamba-2) heads: 2 heads splitting the expanded width.
    expand = d.get("mamba_expand", 2)
    if isinstance(hidden, int) and isinstance(expand, int):
        for nh, hd in (("mamba_n_heads", "mamba_d_head"), ("n_mamba_heads", "mamba_headdim"),
                       ("mamba_num_heads", "mamba_head_dim")):
            if nh in d and isinstance(d[nh], int) and d[nh] > 2:
                changes[nh] = 2
                if hd in d:
                    changes[hd] = expand * hidden // 2


def tiny_config(cfg, bold: bool = True):
    """A tiny copy of a transformers config (and of its nested configs), rebuilt through the config's
    constructor so that values derived from the shrunk ones (``head_dim = qk_rope_head_dim``,
    ``qk_head_dim``, sub-config defaults) are derived again. Falls back to shrinking in place where
    the class cannot be rebuilt. Returns the config to use."""
    import dataclasses

    d = cfg.to_dict() if hasattr(cfg, "to_dict") else {}
    subs = {k: cget(cfg, k) for k in d if k in SUBCONFIGS or is_config(cget(cfg, k))}
    subs = {k: tiny_config(v, bold) for k, v in subs.items() if is_config(v)}
    changes = {}
    for key, value in d.items():
        if key in subs:
            continue
        v = tiny_value(key, cget(cfg, key, value))
        if v is not None:
            changes[key] = v
    # Special tokens inside the small vocabulary, each its own id at the top of it (ids 4 … vocab - 17
    # stay ordinary text).
    vocab, free = changes.get("vocab_size", cget(cfg, "vocab_size")), None
    if isinstance(vocab, int) and vocab > 24:
        free = iter(range(vocab - 1, vocab - 9, -1))
    elif is_config(subs.get("text_config")) and isinstance(cget(subs["text_config"], "vocab_size"), int):
        # The placeholder tokens of a multimodal config index its text model's vocabulary: take ids apart
        # from the text config's own special tokens.
        vocab = cget(subs["text_config"], "vocab_size")
        free = iter(range(vocab - 9, vocab - 17, -1))
    if free is not None and vocab > 24:
        seen: dict[int, int] = {}
        for key, value in d.items():
            if not (key.endswith("token_id") or key.endswith("token_index")):
                continue
            placeholder = re.match(r"(image|video|audio)_token_(id|index)$", key)
            if bold and value is None and placeholder and key not in seen_keys(cfg):  # a placeholder left unset
                changes[key] = next(free, 3)
            elif isinstance(value, int) and not isinstance(value, bool) and value >= vocab - 16:
                if value not in seen:
                    seen[value] = next(free, 3)
                changes[key] = seen[value]
            elif key.endswith("token_id") and isinstance(value, list):
                changes[key] = [min(v, vocab - 1) for v in value if isinstance(v, int)]
    for key in ("use_cache", "output_attentions", "output_hidden_states"):
        if hasattr(cfg, key):
            changes[key] = False
    if "vocab_size" in d and d["vocab_size"] is None:  # a vocabulary left to the checkpoint (esm)
        changes["vocab_size"] = VOCAB
        if "pad_token_id" in d and d["pad_token_id"] is None:
            changes["pad_token_id"] = 1
    if "num_experts_per_tok" in d and d["num_experts_per_tok"] is None and any(
            isinstance(d.get(k), int) and d[k] > 1 for k in ("n_routed_experts", "num_experts", "num_local_experts")):
        changes["num_experts_per_tok"] = 2
    if bold:
        fit_layers(d, changes)
    # Multi-head latent attention: the query/key head is the no-position part plus the rotary part, and
    # the rotary embedding is as wide as the rotary part.
    nope = changes.get("qk_nope_head_dim", d.get("qk_nope_head_dim"))
    rot = changes.get("qk_rope_head_dim", d.get("qk_rope_head_dim"))
    if isinstance(nope, int) and isinstance(rot, int) and ("qk_nope_head_dim" in changes or "qk_rope_head_dim" in changes):
        if "qk_head_dim" in d:
            changes["qk_head_dim"] = nope + rot
        if "head_dim" in d:
            changes["head_dim"] = rot
    new = None
    if dataclasses.is_dataclass(cfg):
        try:
            fields = {f.name for f in dataclasses.fields(cfg) if f.init}
            kwargs = {f: cget(cfg, f) for f in fields if f in d or f in cfg.__dict__}
            kwargs.update({k: v for k, v in changes.items() if k in fields})
            kwargs.update({k: v for k, v in subs.items() if k in fields})
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                new = type(cfg)(**kwargs)
            for k, v in cfg.__dict__.items():  # attributes the class sets outside its constructor
                if k not in new.__dict__ and k not in changes and k not in subs:
                    new.__dict__[k] = v
            for k in ("out_features", "out_indices"):  # a backbone's chosen stages stay as they were
                if cget(new, k) != cget(cfg, k):
                    setattr(new, k, cget(cfg, k))
            for k, v in {**changes, **subs}.items():  # what is not a constructor field and not derived
                if k not in fields and cget(new, k) == cget(cfg, k):
                    setattr(new, k, v)
        except Exception:  # noqa: BLE001
            new = None
    if new is None:
        new = cfg
        for k, v in {**changes, **subs}.items():
            try:
                setattr(new, k, v)
            except Exception:  # noqa: BLE001
                pass
    fit_rope(new)
    return new


def hf_entries(only: str = "") -> tuple[list[Entry], list[dict]]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

    entries = []
    for mtype, cls in sorted(MODEL_MAPPING_NAMES.items()):
        if isinstance(cls, (list, tuple)):
            cls = cls[0]
        kind = "decoder" if mtype in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES else "encoder"
        entries.append(Entry("hf", mtype, mtype, hf_maker(mtype, cls), 0, kind))
    return entries, []


ADAPT_TRIES = 8
CONST_INPUTS = ("grid_thw", "image_grid_thw", "video_grid_thw", "image_sizes", "spatial_shapes", "target_sizes",
                "image_merge_sizes")
IMAGE_INPUTS = ("pixel_values", "pixel_values_videos", "hidden_states")
MAX_MEDIA_TOKENS = 512


def sub_config(cfg, *keys):
    """The first of `keys` that is a nested config, else `cfg` itself."""
    for k in keys:
        v = cget(cfg, k)
        if is_config(v):
            return v
    return cfg


def first_int(*values, default: int) -> int:
    for v in values:
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
            v = v[0]
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return default


class HfFeed:
    """The inputs a transformers model's forward signature asks for, with shapes from its config:
    token ids (with the image/video placeholder tokens its vision tower fills), images (4-D, or 5-D
    with a frames axis), Qwen-VL-style flattened patches with their ``grid_thw``, videos, waveforms and
    log-mel features (either layout). :meth:`adapt` reads a failed call's error and changes what the
    model says it expects instead; it returns False when it has nothing to change."""

    def __init__(self, cfg, sig, mtype: str) -> None:
        self.cfg, self.sig, self.mtype = cfg, sig, mtype
        text = sub_config(cfg, "text_config")
        self.vocab = min(first_int(cget(cfg, "vocab_size"), cget(text, "vocab_size"), default=VOCAB), VOCAB)
        self.vision = sub_config(cfg, "vision_config", "vision_tower_config", "visual_config", "image_config")
        img = cget(self.vision, "image_size")
        if isinstance(img, (list, tuple)) and len(img) == 2 and all(isinstance(v, int) for v in img):
            self.hw = tuple(img) if max(img) <= 128 else (32, 32)
        else:
            s = first_int(img, default=32)
            self.hw = (s, s)
        self.chans = first_int(cget(self.vision, "num_channels"), cget(self.vision, "in_channels"),
                               cget(self.vision, "in_chans"), default=3)
        self.frames_n = first_int(cget(cfg, "num_frames"), cget(self.vision, "num_frames"), default=4)
        self.grid = "grid_thw" in sig or "image_grid_thw" in sig
        self.image_tokens = 0
        self.video_tokens = 0
        self.audio_tokens = 0
        self.patch_feat = None  # features per flattened patch, where the model says so
        self.pixel_mask = False
        self.patch_rank = 2  # flattened patches: 2 (n, c·t·p·p), 4 (n, c, p, p) or 5 (1, n, c, p, p)
        self.frames = None  # None: 4-D pixel_values; else the length of a frames axis
        self.mel_first = "whisper" in mtype or "moonshine" in mtype
        self.mel_len = 2 * first_int(cget(cfg, "max_source_positions"),
                                     cget(sub_config(cfg, "audio_config", "encoder_config"), "max_source_positions"),
                                     default=16)
        audio = sub_config(cfg, "audio_config", "encoder_config", "speech_config")
        mel = first_int(cget(audio, "num_mel_bins"), cget(cfg, "num_mel_bins"), default=80)
        self.mel = first_int(cget(audio, "input_feat_per_channel"), cget(cfg, "input_feat_per_channel"), default=mel) * \
            first_int(cget(cfg, "input_channels"), default=1)
        self.wave = WAVE
        self.wave_rank = 2
        self.decoder_ids = False
        self.tried: set = set()

    # ------------------------------------------------------------------ shapes

    def token(self, *names) -> int | None:
        for c in (self.cfg, sub_config(self.cfg, "text_config")):
            for n in names:
                v = cget(c, n)
                if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < self.vocab:
                    return v
        return None

    def patch_layout(self) -> tuple[int, int, int, int]:
        """(patches, features per patch, grid h, grid w) of a flattened-patch vision tower."""
        v = self.vision
        p = first_int(cget(v, "patch_size"), default=14)
        tp = first_int(cget(v, "temporal_patch_size"), default=1)
        m = first_int(cget(v, "spatial_merge_size"), cget(self.cfg, "spatial_merge_size"),
                      cget(v, "merge_kernel_size"), default=1)
        h = w = 2 * m
        return h * w, self.patch_feat or self.chans * tp * p * p, h, w

    def inputs(self) -> tuple[list[str], list]:
        sig, names, makers = self.sig, [], []

        def add(n, f):
            if n not in names:
                names.append(n)
                makers.append(f)

        n_media = self.image_tokens + self.video_tokens + self.audio_tokens
        length = max(TEXT_LEN, n_media + 8)
        if "input_ids" in sig:
            img_id = self.token("image_token_id", "image_token_index", "image_token", "image_pad_token_id")
            vid_id = self.token("video_token_id", "video_token_index", "video_token")
            aud_id = self.token("audio_token_id", "audio_token_index", "audio_token")
            start = self.token("vision_start_token_id", "image_start_token_id", "boi_token_id")
            end = self.token("vision_end_token_id", "image_end_token_id", "eoi_token_id")
            vocab = self.vocab
            spans, pos = [], 1  # (first, count, token, type) of each run of placeholder tokens
            for n, tid, kind in ((self.image_tokens, img_id, 1), (self.video_tokens, vid_id, 2),
                                 (self.audio_tokens, aud_id, 3)):
                if n and tid is not None:
                    spans.append((pos, n, tid, kind))
                    pos += n + 2

            def ids(g):
                x = torch.randint(4, max(5, vocab - 16), (1, length), generator=g)
                for first, n, tid, _ in spans:
                    if start is not None:
                        x[0, first - 1] = start
                    x[0, first:first + n] = tid
                    if end is not None:
                        x[0, first + n] = end
                return x

            add("input_ids", ids)
            if "attention_mask" in sig:
                def mask(g):
                    m = torch.ones(1, length, dtype=torch.int64)
                    m[0, length - PAD:] = 0
                    return m

                add("attention_mask", mask)
            if "mm_token_type_ids" in sig and spans:  # 1 image, 2 video placeholders (processor convention)
                def types(g):
                    t = torch.zeros(1, length, dtype=torch.int64)
                    for first, n, _, kind in spans:
                        t[0, first:first + n] = kind
                    return t

                add("mm_token_type_ids", types)
        if "qformer_input_ids" in sig:
            qv = min(first_int(cget(sub_config(self.cfg, "qformer_config"), "vocab_size"), default=VOCAB), VOCAB)
            add("qformer_input_ids", lambda g: torch.randint(4, max(5, qv - 16), (1, TEXT_LEN), generator=g))
        if "decoder_input_ids" in sig and (self.decoder_ids or sig["decoder_input_ids"].default is
                                           inspect.Parameter.empty):
            add("decoder_input_ids", lambda g: torch.randint(4, max(5, self.vocab - 16), (1, 8), generator=g))
        c, (hh, ww) = self.chans, self.hw
        if "spatial_shapes" in sig and "pixel_values" in sig:
            # Variable-resolution (NaFlex) vision: flattened patches, their mask and the patch grid.
            p = first_int(cget(self.vision, "patch_size"), default=16)
            gh, gw = max(1, hh // p), max(1, ww // p)
            n_p, f = gh * gw, c * p * p
            add("pixel_values", lambda g: torch.randn(1, n_p, f, generator=g))
            if "pixel_attention_mask" in sig:
                add("pixel_attention_mask", lambda g: torch.ones(1, n_p, dtype=torch.int64))
            add("spatial_shapes", lambda g: torch.tensor([[gh, gw]], dtype=torch.int64))
        elif self.grid or ("hidden_states" in sig and "grid_thw" in sig):
            n, f, gh, gw = self.patch_layout()
            grid = torch.tensor([[1, gh, gw]], dtype=torch.int64)
            if "hidden_states" in sig and "grid_thw" in sig:
                add("hidden_states", lambda g: torch.randn(n, f, generator=g))
                add("grid_thw", lambda g: grid.clone())
            if "pixel_values" in sig:
                p = first_int(cget(self.vision, "patch_size"), default=14)
                shape = {2: (n, f), 4: (n, c, p, p), 5: (1, n, c, p, p)}[self.patch_rank]
                add("pixel_values", lambda g: torch.randn(*shape, generator=g))
                for k in ("image_grid_thw", "grid_thw"):
                    if k in sig:
                        add(k, lambda g: grid.clone())
                if "image_merge_sizes" in sig:
                    merge = first_int(cget(self.vision, "spatial_merge_size"), default=1)
                    add("image_merge_sizes", lambda g: torch.tensor([merge], dtype=torch.int64))
        elif "pixel_values" in sig:
            t = self.frames
            if t:
                add("pixel_values", lambda g: torch.rand(1, t, c, hh, ww, generator=g))
            else:
                add("pixel_values", lambda g: torch.rand(1, c, hh, ww, generator=g))
            if "image_sizes" in sig:  # the original size of each image (height, width)
                add("image_sizes", lambda g: torch.tensor([[hh, ww]], dtype=torch.int64))
            if "target_sizes" in sig:  # patches per side of each image
                p = first_int(cget(self.vision, "patch_size"), default=14)
                add("target_sizes", lambda g: torch.tensor([[max(1, hh // p), max(1, ww // p)]], dtype=torch.int64))
            if "pixel_attention_mask" in sig and self.pixel_mask:
                shape = (1, t, hh, ww) if t else (1, hh, ww)
                add("pixel_attention_mask", lambda g: torch.ones(*shape, dtype=torch.bool))
        if "pixel_values_videos" in sig and (self.video_tokens or "pixel_values" not in names):
            t = self.frames_n
            if self.grid and "video_grid_thw" in sig:
                n, f, gh, gw = self.patch_layout()
                add("pixel_values_videos", lambda g: torch.randn(n, f, generator=g))
                add("video_grid_thw", lambda g: torch.tensor([[1, gh, gw]], dtype=torch.int64))
            else:
                add("pixel_values_videos", lambda g: torch.rand(1, t, c, hh, ww, generator=g))
        if "input_values" in sig:
            wv, r = self.wave, self.wave_rank
            add("input_values", lambda g: torch.randn(*(1,) * (r - 1), wv, generator=g))
        if "input_features" in sig:
            mel, fr = self.mel, self.mel_len
            if self.mel_first:
                add("input_features", lambda g: torch.randn(1, mel, fr, generator=g))
            else:
                add("input_features", lambda g: torch.randn(1, fr, mel, generator=g))
            for k in ("input_features_mask", "feature_attention_mask", "audio_attention_mask"):
                if k in sig:
                    add(k, lambda g: torch.ones(1, fr, dtype=torch.int64))
        if "past_values" in sig:  # time series: (batch, context, channels)
            ctx = first_int(cget(self.cfg, "context_length"), default=32)
            ch = first_int(cget(self.cfg, "num_input_channels"), cget(self.cfg, "input_size"), default=1)
            add("past_values", lambda g: torch.randn(1, ctx, ch, generator=g))
        if not names and "inputs_embeds" in sig:  # a stage fed embeddings: (batch, sequence, width)
            width = first_int(cget(self.cfg, "hidden_size"), cget(self.cfg, "d_model"), default=32)
            add("inputs_embeds", lambda g: torch.randn(1, TEXT_LEN, width, generator=g))
        if not names:
            raise ValueError(f"no input it can be fed ({', '.join(list(sig)[:6])})")
        # Parameters without a default that are not fed make the call fail: say which.
        missing = [p for p, v in sig.items() if v.default is inspect.Parameter.empty
                   and v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL) and p not in names]
        if missing:
            raise ValueError(f"needs inputs {missing}")
        return names, makers

    # ------------------------------------------------------------------ adapting

    def once(self, key) -> bool:
        if key in self.tried:
            return False
        self.tried.add(key)
        return True

    def adapt(self, err: Exception) -> bool:
        msg = str(err)
        if os.environ.get("FAMILIES_DEBUG"):
            print(f"    adapt: {first_line(err)}", file=sys.stderr)
        m = re.search(r"(?:[Ii]mage|Multimodal) features and (?:image )?tokens do not match[:,]? tokens:? (\d+), "
                      r"features:? (\d+)", msg)
        if m and int(m.group(2)) <= MAX_MEDIA_TOKENS and self.once(("image", m.group(2))):
            self.image_tokens = int(m.group(2))
            return True
        m = re.search(r"[Aa]udio features and audio tokens do not match,? tokens: (\d+), features:? (\d+)", msg)
        if m and int(m.group(2)) <= MAX_MEDIA_TOKENS and self.once(("audio", m.group(2))):
            self.audio_tokens = int(m.group(2))
            return True
        m = re.search(r"[Vv]ideo features and video tokens do not match,? tokens: (\d+), features:? (\d+)", msg)
        if m and int(m.group(2)) <= MAX_MEDIA_TOKENS and self.once(("video", m.group(2))):
            self.video_tokens = int(m.group(2))
            return True
        if self.grid and "pixel_values" in self.sig:
            if ("input to conv2d" in msg or "expected 4, got 2" in msg) and self.once("patch4"):
                self.patch_rank = 4
                return True
            if "expected 5, got" in msg and self.once("patch5"):
                self.patch_rank = 5
                return True
        if "expected 5, got 4" in msg and "pixel_values" in self.sig and not self.grid and self.once("frames"):
            self.frames = first_int(cget(self.cfg, "num_frames"), cget(self.vision, "num_frames"), default=1)
            return True
        m = re.search(r"mel input features to be of length (\d+)", msg)
        if m and self.once(("mel", m.group(1))):
            self.mel_first, self.mel_len = True, int(m.group(1))
            return True
        m = re.search(r"padded_feature_length` to be a multiple of [^(]*\((\d+)\)", msg)
        if m and self.once(("melmul", m.group(1))):
            k = int(m.group(1))
            self.mel_len = max(k, -(-self.mel_len // k) * k)
            return True
        m = re.search(r"`input_values` length (\d+) is not a multiple of (\d+)", msg)
        if m and self.once(("wave", m.group(2))):
            self.wave = int(m.group(2))
            return True
        if "input_values" in self.sig and ("mono" in msg or "expected 3, got 2" in msg or str(self.wave) in msg
                                           or "Dimension out of range" in msg) and self.once("wave3"):
            self.wave_rank = 3
            return True
        if "input_values" in self.sig and "can't be greater than actual input size" in msg and self.wave < 64 * WAVE \
                and self.once(("wave-long", self.wave)):  # a deep strided encoder: a longer waveform
            self.wave *= 8
            return True
        if re.search(r"decoder_input_ids|decoder_inputs_embeds", msg) and "decoder_input_ids" in self.sig \
                and self.once("decoder"):
            self.decoder_ids = True
            return True
        m = re.search(r"shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", msg)
        if m:
            b, c = int(m.group(2)), int(m.group(3))
            if self.grid and b == self.patch_layout()[1] and self.once(("patch", c)):
                self.patch_feat = c
                return True
            if "input_features" in self.sig and not self.mel_first and b == self.mel and self.once(("melw", c)):
                self.mel = c
                return True
        m = re.search(r"normalized_shape=\[(\d+)\], expected input with shape \[\*, \d+\], but got input of size\[.*?(\d+)\]",
                      msg)
        if m and "input_features" in self.sig and not self.mel_first and int(m.group(2)) == self.mel \
                and self.once(("meln", m.group(1))):
            self.mel = int(m.group(1))
            return True
        if "pixel_attention_mask" in self.sig and "NoneType" in msg and self.once("pixel_mask"):
            self.pixel_mask = True
            return True
        if "input_features" in self.sig and self.once("mel-layout"):
            self.mel_first = not self.mel_first
            return True
        return False


def hf_maker(mtype: str, cls_name: str):
    def make():
        # The tiny config with the bolder derivations first; where it does not build or feed, without
        # them (the error reported is the first one).
        try:
            return make_with(True)
        except ModelTimeout:
            raise
        except Exception as first:  # noqa: BLE001
            try:
                return make_with(False)
            except ModelTimeout:
                raise
            except Exception:  # noqa: BLE001
                raise first from None

    def make_with(bold: bool):
        import transformers
        from transformers import AutoConfig

        cfg = tiny_config(AutoConfig.for_model(mtype), bold)
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
        feed = HfFeed(cfg, sig, mtype)
        extra = {k: False for k in ("use_cache",) if k in sig}
        if "return_dict" in sig:
            extra["return_dict"] = True
        # Feed, and where the model says what it expects instead (image tokens to match the image
        # features, a frames axis, the mel layout, …), adapt and feed again.
        for _ in range(ADAPT_TRIES):
            names, makers = feed.inputs()
            wrapped = FirstOutput(model, tuple(names), extra)
            g = torch.Generator().manual_seed(SEED)
            try:
                with torch.no_grad():
                    wrapped(*(m(g) for m in makers))
                break
            except Exception as err:  # noqa: BLE001
                if not feed.adapt(err):
                    raise
        if any(n in names for n in IMAGE_INPUTS) and "input_ids" in names:
            kind = "vision-language"
        elif any(n in names for n in IMAGE_INPUTS):
            kind = "vision"
        elif "input_values" in names or "input_features" in names:
            kind = "audio"
        else:
            kind = "text"
        # Inputs that describe the (static) image layout rather than its data are constants of the
        # export, as a static-shape deployment has them: the values the shapes are computed from.
        consts = [i for i, n in enumerate(names) if n in CONST_INPUTS]
        if consts and len(consts) < len(names):
            g = torch.Generator().manual_seed(SEED)
            values = [m(g) for m in makers]
            extra.update({names[i]: values[i] for i in consts})
            makers = [m for i, m in enumerate(makers) if i not in consts]
            names = [n for i, n in enumerate(names) if i not in consts]
            wrapped = FirstOutput(model, tuple(names), extra)
        model = wrapped
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


ORT_TYPES = {"float32": "tensor(float)", "int64": "tensor(int64)", "int32": "tensor(int32)", "bool": "tensor(bool)",
             "float16": "tensor(float16)", "float64": "tensor(double)"}


def match_inputs(graph_inputs, names, inputs) -> dict:
    """The tensor for each graph input: by name where every name fits its tensor (type, rank, fixed
    sizes), else each graph input takes the first unused tensor that fits (an input the graph does not
    use is dropped from it, and the legacy exporter's names then shift onto the wrong tensors)."""
    def fits(gi, t):
        dims = list(gi.shape)
        return ORT_TYPES.get(str(t.dtype).replace("torch.", "")) == gi.type and len(dims) == t.dim() and all(
            not isinstance(d, int) or d == s for d, s in zip(dims, t.shape))

    by_name = dict(zip(names, inputs))
    if all(gi.name in by_name and fits(gi, by_name[gi.name]) for gi in graph_inputs):
        return {gi.name: by_name[gi.name] for gi in graph_inputs}
    used, feeds = set(), {}
    for k, gi in enumerate(graph_inputs):
        pick = next((j for j, t in enumerate(inputs) if j not in used and fits(gi, t)), None)
        if pick is None:  # nothing fits: by position, and onnxruntime says what is wrong
            pick = min(k, len(inputs) - 1)
        used.add(pick)
        feeds[gi.name] = inputs[pick]
    return feeds


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
    stale_build = base / f"{e.name}-build"  # an earlier failed build of this model: it builds now
    if stale_build.is_dir():
        for f in stale_build.iterdir():
            f.unlink()
        stale_build.rmdir()
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
            feeds = {k: t.numpy() for k, t in match_inputs(sess.get_inputs(), names, inputs).items()}
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
            for i, x in enumerate(sess.get_inputs()):  # the graph's inputs, in its order
                np.save(d / ("input.npy" if i == 0 else f"input{i}.npy"), feeds[x.name])
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
    ap.add_argument("--types", default="", help="comma-separated exact model names (e.g. to redo failed builds)")
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
        if args.types:
            wanted = set(args.types.split(","))
            entries = [e for e in entries if e.name in wanted]
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
