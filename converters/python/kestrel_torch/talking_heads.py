"""Talking-heads attention (issue 33, item 4): the scores mixed across the heads by a learned
``[H, H]`` matrix and bias before the softmax, and the weights again after it, in the two forms
timm writes, for ``converters/onnx/tests/talking_heads.rs`` (tiny, random init, seeded; the
attention written here as the timm modules compute it):

* ``cait``: CaiT's ``TalkingHeadAttn``: ``attn = q·scale @ kᵀ``, ``proj_l`` (a Linear over the
  head axis moved last), softmax, ``proj_w`` likewise, ``attn @ v``; a 2-block encoder (layer
  norm, attention, residual) over ``x [B, 9, 16]``, 4 heads.
* ``effv2``: EfficientFormerV2's ``Attention2d``: 1×1-conv projections of ``x [B, 16, 3, 3]``,
  ``(q @ k)·scale + attention_biases[:, idxs]`` (a relative-position bias per head),
  ``talking_head1`` (a 1×1 Conv over the heads), softmax, ``talking_head2``, ``attn @ v`` plus a
  depth-wise local branch of the values, GELU and a projection; 4 heads.

Each is exported with the legacy exporter (opset 17) as ``OUT/talking_<name>.onnx`` and with the
dynamo exporter (opset 17; ``fixture_export``) as ``OUT/talking_<name>_dynamo.onnx``, a dynamic batch, with the input
``…_in.npy`` and onnxruntime's output ``…_out.npy`` (2 samples)::

    python -m kestrel_torch.talking_heads --out ../onnx/tests/data
"""

import numpy as np
import torch
from torch import nn
from .fixture_export import export_fixture, main

BATCH = 2


class TalkingHeadAttn(nn.Module):
    """CaiT's talking-heads attention."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.h, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj_l = nn.Linear(heads, heads)
        self.proj_w = nn.Linear(heads, heads)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        attn = self.proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        attn = attn.softmax(dim=-1)
        attn = self.proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class CaitBlocks(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 4, depth: int = 2):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.attns = nn.ModuleList(TalkingHeadAttn(dim, heads) for _ in range(depth))

    def forward(self, x):
        for norm, attn in zip(self.norms, self.attns):
            x = x + attn(norm(x))
        return x


class Attention2d(nn.Module):
    """EfficientFormerV2's attention (stride 1), its convolutions without batch norms."""

    def __init__(self, dim: int = 16, key_dim: int = 4, heads: int = 4, attn_ratio: int = 2, resolution: int = 3):
        super().__init__()
        self.h, self.scale, self.n = heads, key_dim**-0.5, resolution**2
        self.dh = attn_ratio * key_dim * heads
        self.q = nn.Conv2d(dim, key_dim * heads, 1)
        self.k = nn.Conv2d(dim, key_dim * heads, 1)
        self.v = nn.Conv2d(dim, self.dh, 1)
        self.v_local = nn.Conv2d(self.dh, self.dh, 3, padding=1, groups=self.dh)
        self.talking_head1 = nn.Conv2d(heads, heads, 1)
        self.talking_head2 = nn.Conv2d(heads, heads, 1)
        self.proj = nn.Conv2d(self.dh, dim, 1)
        pos = torch.stack(torch.meshgrid(torch.arange(resolution), torch.arange(resolution), indexing="ij")).flatten(1)
        rel = (pos[..., :, None] - pos[..., None, :]).abs()
        self.attention_biases = nn.Parameter(torch.randn(heads, self.n) * 0.5)
        self.register_buffer("attention_bias_idxs", rel[0] * resolution + rel[1], persistent=False)

    def forward(self, x):
        b, c, hh, ww = x.shape
        q = self.q(x).reshape(b, self.h, -1, self.n).permute(0, 1, 3, 2)
        k = self.k(x).reshape(b, self.h, -1, self.n)
        v = self.v(x)
        v_local = self.v_local(v)
        v = v.reshape(b, self.h, -1, self.n).permute(0, 1, 3, 2)
        attn = (q @ k) * self.scale + self.attention_biases[:, self.attention_bias_idxs]
        attn = self.talking_head1(attn)
        attn = attn.softmax(dim=-1)
        attn = self.talking_head2(attn)
        x = (attn @ v).transpose(2, 3).reshape(b, self.dh, hh, ww) + v_local
        return self.proj(torch.nn.functional.gelu(x))


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(43)
    rng = np.random.default_rng(7)
    if name.startswith("cait"):
        model, shape = CaitBlocks(), (BATCH, 9, 16)
    else:
        model, shape = Attention2d(), (BATCH, 16, 3, 3)
    return model.eval(), torch.from_numpy(rng.standard_normal(shape).astype(np.float32))


def export(name: str, out: str) -> None:
    model, x = build(name)
    export_fixture(f"talking_{name}", model, x, out, dynamo=name.endswith("_dynamo"))


if __name__ == "__main__":
    main(__doc__, ("cait", "cait_dynamo", "effv2", "effv2_dynamo"), export)
