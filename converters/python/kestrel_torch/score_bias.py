"""Attention with additive score biases (issue 33, item 4): three small modules as their families
write them, exported for `converters/onnx/tests/score_bias.rs`.

* ``swin``: Swin's window attention (packed ``qkv``, pre-scaled q, a relative-position bias
  gathered from a learned ``[(2W−1)², H]`` table by a fixed index, and the shifted-window mask
  ``[nW, N, N]`` of 0 / −100 added through Swin's ``view(B_ // nW, nW, H, N, N)``): one 4 × 4
  window (N = 16 tokens) of a shifted 4 × 4 map, so the mask splits it into four regions.
* ``swin_shifted``: the attention half of a shifted Swin block on an 8 × 8 map (``torch.roll``,
  ``window_partition`` into four 4 × 4 windows, the window attention above with Swin's per-window
  mask ``[4, 16, 16]``, ``window_reverse``, roll back).
* ``levit``: EfficientFormer / LeViT attention (packed ``qkv`` split per head into q, k, v,
  ``(q @ kᵀ) · scale + attention_biases[:, attention_bias_idxs]``): a learned bias per head and
  relative offset of a 4 × 4 map (N = 16).
* ``t5``: T5's self-attention (no scale, bucketed relative-position bias from an ``Embedding``
  over ``relative_position_bucket`` of the static positions, plus the padding bias transformers
  builds from an ``attention_mask`` input: ``where(mask, 0, finfo.min)``), T = 8.

Each is exported with the legacy exporter (``dynamo=False``, opset 17, dynamic batch) into
``OUT/score_bias_<name>.onnx`` with its inputs ``score_bias_<name>_in.npy`` (and
``score_bias_t5_mask.npy``) and onnxruntime's output ``score_bias_<name>_out.npy`` (3 samples).
Weights are random (seeded) and drawn large enough that the biases visibly shape the output::

    python -m kestrel_torch.score_bias --out ../onnx/tests/data
"""

import argparse
import math
import os

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

BATCH = 3


def _init(module: nn.Module, seed: int) -> None:
    """Dense weights N(0, 1/fan_in), biases N(0, 0.1²), tables N(0, 1): not near-uniform."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 2 and "table" not in name and "biases" not in name and "embed" not in name:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.1 if name.endswith("bias") else 1.0))


class SwinWindowAttention(nn.Module):
    """Swin's ``WindowAttention`` (microsoft/Swin-Transformer) over one window of a shifted map."""

    def __init__(self, dim=16, window=4, heads=2, shift=2):
        super().__init__()
        self.dim, self.window, self.heads = dim, window, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij"))
        flat = torch.flatten(coords, 1)
        rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window - 1
        rel[:, :, 1] += window - 1
        rel[:, :, 0] *= 2 * window - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        # The shifted-window mask of an H = W = window map shifted by `shift` (Swin's
        # SwinTransformerBlock): one window, four regions.
        img = torch.zeros(1, window, window, 1)
        cnt = 0
        for hs in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
            for ws in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                img[:, hs, ws, :] = cnt
                cnt += 1
        win = img.view(1, window * window)
        mask = win.unsqueeze(1) - win.unsqueeze(2)
        self.register_buffer("attn_mask", mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0))

    def forward(self, x):
        b_, n, c = x.shape
        qkv = self.qkv(x).reshape(b_, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        nw = self.attn_mask.shape[0]
        attn = attn.view(b_ // nw, nw, self.heads, n, n) + self.attn_mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, self.heads, n, n).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b_, n, c)
        return self.proj(x)


def window_partition(x, window):
    """Swin's ``window_partition``: ``[B, H, W, C]`` → ``[B·nW, window, window, C]``."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window, window, c)


def window_reverse(windows, window, h, w):
    """Swin's ``window_reverse`` (the batch read off as −1)."""
    x = windows.view(-1, h // window, w // window, window, window, windows.shape[-1])
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, w, windows.shape[-1])


def shifted_window_mask(res, window, shift):
    """Swin's ``attn_mask`` of a ``res × res`` map shifted by ``shift``: ``[nW, N, N]``, 0 / −100."""
    img = torch.zeros(1, res, res, 1)
    cnt = 0
    for hs in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
        for ws in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
            img[:, hs, ws, :] = cnt
            cnt += 1
    win = window_partition(img, window).view(-1, window * window)
    mask = win.unsqueeze(1) - win.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


class SwinShiftedBlock(nn.Module):
    """The attention half of a shifted Swin block on an 8 × 8 map: roll by −shift, partition into
    four 4 × 4 windows, window attention with the relative-position bias and the per-window
    shifted-window mask (``[nW, N, N]``), reverse, roll back."""

    def __init__(self, dim=16, res=8, window=4, heads=2, shift=2):
        super().__init__()
        self.res, self.window, self.shift = res, window, shift
        self.attn = SwinWindowAttention(dim, window, heads, shift)
        self.attn.attn_mask = shifted_window_mask(res, window, shift)

    def forward(self, x):
        b, n, c = x.shape
        x = x.view(b, self.res, self.res, c)
        x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        w = window_partition(x, self.window).view(-1, self.window * self.window, c)
        w = self.attn(w)
        x = window_reverse(w.view(-1, self.window, self.window, c), self.window, self.res, self.res)
        x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        return x.reshape(b, n, c)


class LevitAttention(nn.Module):
    """EfficientFormer's ``Attention`` (LeViT's bias table) with key_dim = value dim per head."""

    def __init__(self, dim=32, heads=4, resolution=4):
        super().__init__()
        self.heads = heads
        self.key_dim = dim // heads
        self.scale = self.key_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        pos = torch.stack(torch.meshgrid(torch.arange(resolution), torch.arange(resolution), indexing="ij")).flatten(1)
        rel = (pos[..., :, None] - pos[..., None, :]).abs()
        rel = (rel[0] * resolution) + rel[1]
        self.attention_biases = nn.Parameter(torch.zeros(heads, resolution * resolution))
        self.register_buffer("attention_bias_idxs", rel)

    def forward(self, x):
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, self.heads, -1).permute(0, 2, 1, 3)
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.key_dim], dim=3)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn + self.attention_biases[:, self.attention_bias_idxs]
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(b, n, -1)
        return self.proj(x)


def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """transformers' ``T5Attention._relative_position_bucket``."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


class T5SelfAttention(nn.Module):
    """transformers' ``T5Attention`` (encoder self-attention, with its relative attention bias)
    and the padding bias of an ``attention_mask`` input, as ``T5Stack`` builds it."""

    def __init__(self, dim=16, heads=2, buckets=8, max_distance=16):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.buckets, self.max_distance = buckets, max_distance
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.relative_attention_bias = nn.Embedding(buckets, heads)

    def compute_bias(self, t):
        context = torch.arange(t, dtype=torch.long)[:, None]
        memory = torch.arange(t, dtype=torch.long)[None, :]
        buckets = _relative_position_bucket(memory - context, True, self.buckets, self.max_distance)
        values = self.relative_attention_bias(buckets)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, x, attention_mask):
        b, t, _ = x.shape
        c = self.dim // self.heads
        shape = lambda s: s.view(b, -1, self.heads, c).transpose(1, 2)  # noqa: E731
        q, k, v = shape(self.q(x)), shape(self.k(x)), shape(self.v(x))
        scores = torch.matmul(q, k.transpose(3, 2))
        # transformers' 4-D padding bias: 0 where kept, finfo.min where padded.
        keep = attention_mask[:, None, None, :].bool()
        ext = torch.where(keep, torch.tensor(0.0), torch.tensor(torch.finfo(x.dtype).min))
        position_bias = self.compute_bias(t) + ext
        scores += position_bias
        attn = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, -1, self.dim)
        return self.o(out)


def _export(model, args, names, path):
    dyn = {n: {0: "b"} for n in names + ["y"]}
    torch.onnx.export(
        model, args, path, input_names=names, output_names=["y"], opset_version=17, dynamo=False,
        dynamic_axes=dyn,
    )


def build(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(33)
    specs = {
        "swin": (SwinWindowAttention(), 16, 16),
        "levit": (LevitAttention(), 16, 32),
        "t5": (T5SelfAttention(), 8, 16),
        "swin_shifted": (SwinShiftedBlock(), 64, 16),
    }
    for seed, (name, (model, t, d)) in enumerate(specs.items()):
        _init(model, seed)
        model.eval()
        x = torch.randn(BATCH, t, d, generator=g)
        path = os.path.join(out, f"score_bias_{name}.onnx")
        feeds = {"x": x.numpy()}
        if name == "t5":
            mask = torch.ones(BATCH, t, dtype=torch.int64)
            mask[1, 5:] = 0
            mask[2, 2:] = 0
            _export(model, (x, mask), ["x", "mask"], path)
            feeds["mask"] = mask.numpy()
            with torch.no_grad():
                want = model(x, mask).numpy()
        else:
            _export(model, (x,), ["x"], path)
            with torch.no_grad():
                want = model(x).numpy()
        got = ort.InferenceSession(path).run(None, feeds)[0]
        err = float(np.abs(got - want).max())
        assert err < 1e-4 * max(1.0, float(np.abs(want).max())), (name, err)
        np.save(os.path.join(out, f"score_bias_{name}_in.npy"), feeds["x"])
        if "mask" in feeds:
            np.save(os.path.join(out, f"score_bias_{name}_mask.npy"), feeds["mask"])
        np.save(os.path.join(out, f"score_bias_{name}_out.npy"), got)
        print(f"{name}: {os.path.getsize(path)} bytes, onnxruntime vs torch {err:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    build(ap.parse_args().out)


if __name__ == "__main__":
    main()
