"""ConViT's gated positional self-attention (issue 33, item 4), for
`converters/onnx/tests/mixed_attention.rs` (tiny, random init, seeded; the attention as timm's
``GPSA`` computes it, written out here):

    attn = (1 - sigmoid(g_h)) * softmax(q k^T * scale) + sigmoid(g_h) * softmax(pos_h)
    attn = attn / attn.sum(-1, keepdim)
    y    = attn @ v

``pos`` is a linear map of the tokens' relative offsets (dx, dy, dx^2 + dy^2) on a 3x3 grid,
input-independent, so an exporter (or the converter) folds the mixed-in map to a constant. Two
blocks of ``x [B, 9, 16]`` (4 heads; projections, attention, output projection, residual),
exported with the legacy exporter (``convit``) and the dynamo exporter (``convit_dynamo``), at
opset 17 with a dynamic batch, into ``OUT/<stem>.onnx`` with ``<stem>_in.npy`` and onnxruntime's
``<stem>_out.npy`` (2 samples)::

    python -m kestrel_torch.convit --out ../onnx/tests/data
"""

import numpy as np
import torch
from .fixture_export import export_fixture, main

BATCH, GRID, C, HEADS = 2, 3, 16, 4
N = GRID * GRID


def offsets() -> torch.Tensor:
    """`[1, N, N, 3]`: (dx, dy, dx^2 + dy^2) from token i to token j on the grid."""
    ij = torch.stack(torch.meshgrid(torch.arange(GRID), torch.arange(GRID), indexing="ij"), -1)
    ij = ij.reshape(N, 2).float()
    d = ij[None, :, :] - ij[:, None, :]
    dy, dx = d[..., 0], d[..., 1]
    return torch.stack([dx, dy, dx * dx + dy * dy], -1)[None]


class GatedPositional(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.d = C // HEADS
        self.qk = torch.nn.Linear(C, 2 * C, bias=False)
        self.v = torch.nn.Linear(C, C, bias=False)
        self.o = torch.nn.Linear(C, C)
        self.pos = torch.nn.Linear(3, HEADS)
        self.gate = torch.nn.Parameter(torch.randn(HEADS))
        self.register_buffer("offsets", offsets(), persistent=False)

    def forward(self, x):
        b = x.shape[0]
        qk = self.qk(x).reshape(b, N, 2, HEADS, self.d).permute(2, 0, 3, 1, 4)
        q, k = qk[0], qk[1]
        content = torch.softmax(q @ k.transpose(-2, -1) * self.d**-0.5, dim=-1)
        position = torch.softmax(self.pos(self.offsets.expand(b, -1, -1, -1)).permute(0, 3, 1, 2), dim=-1)
        g = torch.sigmoid(self.gate.view(1, -1, 1, 1))
        attn = (1.0 - g) * content + g * position
        attn = attn / attn.sum(dim=-1).unsqueeze(-1)
        v = self.v(x).reshape(b, N, HEADS, self.d).permute(0, 2, 1, 3)
        return x + self.o((attn @ v).transpose(1, 2).reshape(b, N, C))


def build() -> torch.nn.Module:
    torch.manual_seed(43)
    return torch.nn.Sequential(GatedPositional(), GatedPositional()).eval()


def export(name: str, out: str) -> None:
    x = torch.from_numpy(np.random.default_rng(6).standard_normal((BATCH, N, C)).astype(np.float32))
    export_fixture(name, build(), x, out, dynamo=name.endswith("dynamo"))


if __name__ == "__main__":
    main(__doc__, ("convit", "convit_dynamo"), export)
