"""Model builders for the edge benchmark of DESIGN.md §4 (Table 5 of "You Need to Pay Better
Attention"), with any mechanism in the attention slot, plus an AFT-conv image classifier and two
"written by other people" attention layers for the converter's robustness tests.

The architectures follow the keras.io examples the paper used:

* ViT (``keras.io/examples/vision/image_classification_with_vision_transformer``): patch
  embedding (here a Conv2d with kernel = stride = patch, the usual PyTorch form, equivalent to
  the Keras patch extraction + Dense) plus a learned position embedding; pre-LN blocks
  ``x + attn(LN(x))``, ``x + mlp(LN(x))`` with MLP [2d, d] and GELU after *every* MLP layer;
  final LN, flatten, MLP head [2048, 1024] with GELU, then a linear classifier (logits).
  LayerNorm eps = 1e-6.
* Text (``keras.io/examples/nlp/text_classification_with_transformer``): token + position
  embedding; post-LN blocks ``LN(x + attn(x))``, ``LN(x + ffn(x))`` with FFN [ffn (ReLU), d];
  mean pool over tokens, Dense(20, ReLU), linear classifier (logits; Keras applies softmax).

Dropout is omitted (inference only). Every size is a keyword argument so fixtures can be shrunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor, nn

from .mechanisms import AftConv, AftFull, AftLocal, AftSimple, Attention, Fastformer

LN_EPS = 1e-6

#: Mechanism names accepted by :func:`build_mixer`.
MECHANISMS = (
    "standard",
    "optimised",
    "efficient",
    "super",
    "aft_full",
    "aft_local",
    "aft_simple",
    "aft_conv",
    "fastformer",
    "torch_mha",
    "handwritten",
)

#: Mechanisms whose head count is a free parameter (the others run with h = 1 or ignore h).
MULTI_HEAD = ("standard", "optimised", "efficient", "super", "aft_conv", "fastformer", "torch_mha", "handwritten")


@dataclass
class MixerConfig:
    """How to build the token mixer of each block.

    Attributes:
        mechanism: one of :data:`MECHANISMS`.
        heads: heads h (c = d/h).
        causal: causal mode (attention variants, AFT-full/local/simple).
        window: AFT-local window s (|t − t'| < s).
        kernel: AFT-conv kernel size s (odd).
        grid: AFT-conv token grid (H, W); H·W must equal T.
        rank: AFT-full factorisation rank r (None: full ``[T, T]`` w).
    """

    mechanism: str = "standard"
    heads: int = 1
    causal: bool = False
    window: int = 8
    kernel: int = 3
    grid: tuple[int, int] | None = None
    rank: int | None = None


class TorchMhaAttention(nn.Module):
    """Self-attention through ``nn.MultiheadAttention(batch_first=True)``, as many PyTorch
    models write it (packed ``in_proj_weight [3d, d]``)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


class HandwrittenAttention(nn.Module):
    """Standard attention in a different hand-written style: one packed QKV weight stored
    ``[in, 3d]`` (x @ W, bias added after the matmul), q pre-multiplied by a precomputed scale,
    keys laid out by ``permute`` as ``[N, h, c, T]``, output Linear."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.scale = self.head_dim**-0.5
        self.qkv_weight = nn.Parameter(torch.randn(d, 3 * d) / math.sqrt(d))
        self.qkv_bias = nn.Parameter(torch.randn(3 * d) * 0.02)
        self.proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        n, t, d = x.shape
        qkv = x @ self.qkv_weight
        qkv = qkv + self.qkv_bias
        q, k, v = qkv.chunk(3, dim=-1)
        q = q.view(n, t, self.heads, self.head_dim).permute(0, 2, 1, 3)  # [N, h, T, c]
        k = k.view(n, t, self.heads, self.head_dim).permute(0, 2, 3, 1)  # [N, h, c, T]
        v = v.view(n, t, self.heads, self.head_dim).permute(0, 2, 1, 3)
        attn = (q * self.scale) @ k
        attn = attn.softmax(dim=-1)
        out = (attn @ v).permute(0, 2, 1, 3).reshape(n, t, d)
        return self.proj(out)


def build_mixer(cfg: MixerConfig, d: int, tokens: int) -> nn.Module:
    """The token-mixing layer ``[N, T, d] -> [N, T, d]`` described by ``cfg``."""
    m = cfg.mechanism
    if m in ("standard", "optimised", "efficient", "super"):
        return Attention(d, tokens, m, heads=cfg.heads, causal=cfg.causal)
    if m == "aft_full":
        return AftFull(d, tokens, causal=cfg.causal, rank=cfg.rank)
    if m == "aft_local":
        return AftLocal(d, tokens, window=cfg.window, causal=cfg.causal)
    if m == "aft_simple":
        return AftSimple(d, tokens, causal=cfg.causal)
    if m == "aft_conv":
        grid = cfg.grid or _square_grid(tokens)
        if grid[0] * grid[1] != tokens:
            raise ValueError(f"grid {grid} does not hold {tokens} tokens")
        return AftConv(d, grid, heads=cfg.heads, kernel=cfg.kernel)
    if m == "fastformer":
        return Fastformer(d, heads=cfg.heads)
    if m == "torch_mha":
        return TorchMhaAttention(d, cfg.heads)
    if m == "handwritten":
        return HandwrittenAttention(d, cfg.heads)
    raise ValueError(f"unknown mechanism {m!r}; expected one of {MECHANISMS}")


def _square_grid(tokens: int) -> tuple[int, int]:
    side = math.isqrt(tokens)
    if side * side != tokens:
        raise ValueError(f"T={tokens} is not square; give MixerConfig.grid")
    return side, side


class PreLnBlock(nn.Module):
    """ViT block: ``x + attn(LN(x))`` then ``x + mlp(LN(x))``, MLP layers each followed by GELU."""

    def __init__(self, d: int, tokens: int, mixer: MixerConfig, mlp_units: Sequence[int], eps: float = LN_EPS):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.attn = build_mixer(mixer, d, tokens)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.mlp = _mlp(d, mlp_units, nn.GELU)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PostLnBlock(nn.Module):
    """Text block (keras.io): ``LN(x + attn(x))`` then ``LN(x + ffn(x))``, FFN [ffn ReLU, d]."""

    def __init__(self, d: int, tokens: int, mixer: MixerConfig, ffn: int, eps: float = LN_EPS):
        super().__init__()
        self.attn = build_mixer(mixer, d, tokens)
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))
        self.norm2 = nn.LayerNorm(d, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ffn(x))


def _mlp(d_in: int, units: Sequence[int], act: type[nn.Module]) -> nn.Sequential:
    """Dense layers ``units``, each followed by ``act`` (the keras.io ``mlp`` helper)."""
    layers: list[nn.Module] = []
    for u in units:
        layers += [nn.Linear(d_in, u), act()]
        d_in = u
    return nn.Sequential(*layers)


class ViT(nn.Module):
    """keras.io-style ViT: ``[N, C, H, W]`` image -> ``[N, classes]`` logits."""

    def __init__(
        self,
        image_size: int,
        channels: int,
        patch: int,
        d: int,
        layers: int,
        classes: int,
        mixer: MixerConfig,
        mlp_units: Sequence[int] | None = None,
        head_units: Sequence[int] = (2048, 1024),
        pool: str = "flatten",
        eps: float = LN_EPS,
    ) -> None:
        super().__init__()
        if image_size % patch:
            raise ValueError("image size must be a multiple of the patch size")
        grid = image_size // patch
        self.tokens = grid * grid
        if mixer.mechanism == "aft_conv" and mixer.grid is None:
            mixer = MixerConfig(**{**mixer.__dict__, "grid": (grid, grid)})
        if pool not in ("flatten", "mean"):
            raise ValueError("pool must be 'flatten' or 'mean'")
        self.pool = pool
        self.patch_embed = nn.Conv2d(channels, d, kernel_size=patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(self.tokens, d) * 0.02)
        mlp_units = list(mlp_units) if mlp_units is not None else [2 * d, d]
        self.blocks = nn.ModuleList(PreLnBlock(d, self.tokens, mixer, mlp_units, eps) for _ in range(layers))
        self.norm = nn.LayerNorm(d, eps=eps)
        feat = self.tokens * d if pool == "flatten" else d
        self.head = _mlp(feat, head_units, nn.GELU)
        self.classifier = nn.Linear(head_units[-1] if head_units else feat, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos  # [N, T, d], row-major patches
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        x = x.flatten(1) if self.pool == "flatten" else x.mean(dim=1)
        return self.classifier(self.head(x))


class TextClassifier(nn.Module):
    """keras.io-style text transformer: ``[N, T]`` int64 token ids -> ``[N, classes]`` logits."""

    def __init__(
        self,
        vocab: int,
        tokens: int,
        d: int,
        layers: int,
        classes: int,
        mixer: MixerConfig,
        ffn: int = 32,
        head_units: Sequence[int] = (20,),
        eps: float = LN_EPS,
    ) -> None:
        super().__init__()
        self.tokens = tokens
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(tokens, d)
        self.blocks = nn.ModuleList(PostLnBlock(d, tokens, mixer, ffn, eps) for _ in range(layers))
        self.head = _mlp(d, head_units, nn.ReLU)
        self.classifier = nn.Linear(head_units[-1] if head_units else d, classes)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.tok(ids) + self.pos.weight
        for block in self.blocks:
            x = block(x)
        return self.classifier(self.head(x.mean(dim=1)))


class MixerOnly(nn.Module):
    """A single mechanism layer ``[N, T, d] -> [N, T, d]`` (layer-level fixtures)."""

    def __init__(self, d: int, tokens: int, mixer: MixerConfig) -> None:
        super().__init__()
        self.attn = build_mixer(mixer, d, tokens)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x)


# --- The benchmark tasks of DESIGN.md §4 --------------------------------------------------------


def mnist_vit(mechanism: str = "standard", heads: int = 1, **kw) -> ViT:
    """MNIST ViT: ``[N, 1, 64, 64]`` (28×28 resized to 64×64), 8×8 patches (T = 64), d = 64,
    2 layers, MLP [128, 64], head [2048, 1024], 10 classes. ``kw`` overrides sizes and
    :class:`MixerConfig` fields (``window``, ``kernel``, ``rank``, ``causal``)."""
    mixer, kw = _split_mixer_kw(mechanism, heads, kw)
    args = dict(image_size=64, channels=1, patch=8, d=64, layers=2, classes=10, head_units=(2048, 1024))
    return ViT(**{**args, **kw}, mixer=mixer)


def cifar100_vit(mechanism: str = "standard", heads: int = 1, **kw) -> ViT:
    """CIFAR-100 ViT: ``[N, 3, 72, 72]``, 6×6 patches (T = 144), d = 144, 8 layers,
    MLP [288, 144], head [2048, 1024], 100 classes."""
    mixer, kw = _split_mixer_kw(mechanism, heads, kw)
    args = dict(image_size=72, channels=3, patch=6, d=144, layers=8, classes=100, head_units=(2048, 1024))
    return ViT(**{**args, **kw}, mixer=mixer)


def imdb_text(mechanism: str = "standard", heads: int = 1, **kw) -> TextClassifier:
    """IMDB: T = 32, d = 32, vocabulary 20,000, 1 post-LN layer, FFN 32, mean pool, 2 classes."""
    mixer, kw = _split_mixer_kw(mechanism, heads, kw)
    args = dict(vocab=20_000, tokens=32, d=32, layers=1, classes=2, ffn=32)
    return TextClassifier(**{**args, **kw}, mixer=mixer)


def amazon_text(mechanism: str = "standard", heads: int = 1, **kw) -> TextClassifier:
    """Amazon reviews: as IMDB with T = d = 64, 3 layers, 5 classes."""
    mixer, kw = _split_mixer_kw(mechanism, heads, kw)
    args = dict(vocab=20_000, tokens=64, d=64, layers=3, classes=5, ffn=32)
    return TextClassifier(**{**args, **kw}, mixer=mixer)


def aft_conv_classifier(heads: int = 4, kernel: int = 5, **kw) -> ViT:
    """AFT-conv image classifier: ``[N, 1, 28, 28]`` grey, 4×4 patches (7×7 grid, T = 49),
    d = 64, 3 pre-LN AFT-conv blocks, MLP [128, 64], final LN, mean pool, head [128], 10 classes."""
    mixer, kw = _split_mixer_kw("aft_conv", heads, {"kernel": kernel, **kw})
    args = dict(image_size=28, channels=1, patch=4, d=64, layers=3, classes=10, head_units=(128,), pool="mean")
    return ViT(**{**args, **kw}, mixer=mixer)


def mechanism_layer(mechanism: str, d: int = 32, tokens: int = 16, heads: int = 1, **kw) -> MixerOnly:
    """One bare mechanism layer (for layer-level tests and fixtures)."""
    mixer, kw = _split_mixer_kw(mechanism, heads, kw)
    if kw:
        raise TypeError(f"unexpected arguments {sorted(kw)}")
    return MixerOnly(d, tokens, mixer)


_MIXER_FIELDS = ("causal", "window", "kernel", "grid", "rank")


def _split_mixer_kw(mechanism: str, heads: int, kw: dict) -> tuple[MixerConfig, dict]:
    mixer_kw = {k: kw.pop(k) for k in list(kw) if k in _MIXER_FIELDS}
    return MixerConfig(mechanism=mechanism, heads=heads, **mixer_kw), kw


def attention_parameter_count(module: nn.Module) -> int:
    """Parameters of the attention layers (the ``attn`` submodules) of a model."""
    return sum(p.numel() for name, p in module.named_parameters() if ".attn." in f".{name}")


def expected_attention_parameters(mechanism: str, d: int, tokens: int) -> int:
    """The paper's per-layer attention parameter counts (DESIGN.md §1)."""
    base = {"standard": 4, "optimised": 3, "efficient": 2, "super": 2}[mechanism] * (d * d + d)
    return base + (tokens * tokens + tokens if mechanism == "super" else 0)
