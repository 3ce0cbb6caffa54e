"""LongT5's local attention (issue 33, item 4), for `converters/onnx/tests/floor_mod.rs` (tiny,
random init, seeded; the attention as transformers' ``LongT5LocalAttention`` computes it, written
out here without the relative position buckets): the sequence padded to a multiple of the block
(``pad = -len % block``, which the legacy exporter traces as ``Neg(Shape)``, ``Mod``, ``Pad``),
split into blocks, each block's queries scored against the keys of the block before it, its own
and the one after (three blocks concatenated, zero-padded at the ends), a learned bias and the
local mask added (a key further than the block length from its query, or in the padding, is
masked), a softmax, the product with the values, the padded rows cut off.

``x [B, 6, 16]``, blocks of 4 (one padded block after the sequence), 2 heads, one block of
attention; exported with the legacy exporter (``longt5``: ONNX ``Mod`` with ``fmod = 0`` on shape
values, which tract computed as the truncated remainder; the dynamo exporter folds the padding to
constants, so it has no such ``Mod``), at opset 17 with a dynamic batch, into ``OUT/longt5.onnx``
with ``longt5_in.npy`` and onnxruntime's ``longt5_out.npy`` (2 samples). ``longt5_one_block``: 3
tokens, one block padded to 4 (as the measured export, 16 tokens in one block of 128: the padded
query rows cut right after the softmax, the weights transposed and cut on the key axis there)::

    python -m kestrel_torch.longt5 --out ../onnx/tests/data
"""

import numpy as np
import torch
import torch.nn.functional as F
from .fixture_export import export_fixture, main

BATCH, T, C, HEADS, BLOCK = 2, 6, 16, 2, 4
# ``longt5_one_block``'s tokens: one block, padded.
ONE_BLOCK = 3


def blocks(x: torch.Tensor) -> torch.Tensor:
    """`[B, L, H, D]` padded to a multiple of BLOCK and viewed `[B, L / BLOCK, BLOCK, H, D]`."""
    pad = -x.shape[1] % BLOCK
    x = F.pad(x, (0, 0, 0, 0, 0, pad))
    return x.reshape(x.shape[0], x.shape[1] // BLOCK, BLOCK, x.shape[2], x.shape[3])


def three_blocks(x: torch.Tensor) -> torch.Tensor:
    """Each block with the one before and after it: `[B, N, 3 * BLOCK, H, D]`."""
    n = x.shape[1]
    x = F.pad(x, (0, 0, 0, 0, 0, 0, 1, 1))
    return torch.cat([x[:, i : i + n] for i in range(3)], dim=2)


def local_mask(length: int) -> torch.Tensor:
    """`[N, BLOCK, 3 * BLOCK]` additive mask: 0 where the key is a real token within BLOCK of the
    query, -1e10 elsewhere."""
    n = -(-length // BLOCK)
    pos = torch.arange(n * BLOCK).reshape(n, BLOCK)
    keys = F.pad(pos, (0, 0, 1, 1), value=-(10**6))
    keys = torch.cat([keys[i : i + n] for i in range(3)], dim=1)
    near = (keys[:, None, :] - pos[:, :, None]).abs() < BLOCK
    real = (keys[:, None, :] >= 0) & (keys[:, None, :] < length)
    return torch.where(near & real, 0.0, -1e10)


class LocalAttention(torch.nn.Module):
    def __init__(self, length: int = T):
        super().__init__()
        self.d = C // HEADS
        self.q, self.k, self.v = (torch.nn.Linear(C, C, bias=False) for _ in range(3))
        self.o = torch.nn.Linear(C, C, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(HEADS, BLOCK, 3 * BLOCK) * 0.5)
        self.register_buffer("mask", local_mask(length), persistent=False)

    def forward(self, x):
        b, length = x.shape[0], x.shape[1]
        q = blocks(self.q(x).reshape(b, length, HEADS, self.d))
        k = three_blocks(blocks(self.k(x).reshape(b, length, HEADS, self.d)))
        v = three_blocks(blocks(self.v(x).reshape(b, length, HEADS, self.d)))
        s = torch.einsum("...qhd,...khd->...hqk", q, k) + self.bias + self.mask[None, :, None]
        w = torch.softmax(s, dim=-1)
        y = torch.einsum("...hqk,...khd->...qhd", w, v).reshape(b, -1, C)[:, :length]
        return x + self.o(y)


def build(length: int = T) -> torch.nn.Module:
    torch.manual_seed(53)
    return LocalAttention(length).eval()


def export(name: str, out: str) -> None:
    length = ONE_BLOCK if name == "longt5_one_block" else T
    x = torch.from_numpy(np.random.default_rng(9).standard_normal((BATCH, length, C)).astype(np.float32))
    export_fixture(name, build(length), x, out)


if __name__ == "__main__":
    main(__doc__, ("longt5", "longt5_one_block"), export)
