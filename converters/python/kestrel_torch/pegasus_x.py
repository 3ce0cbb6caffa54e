"""Pegasus-X's local block attention (issue 33, item 4), for
`converters/onnx/tests/concat_keys.rs` (tiny, random init, seeded; the attention as transformers'
``PegasusXGlobalLocalAttention`` computes its local part, written out here): the tokens, cut into
blocks, attend to the global tokens and to their own block's tokens with one softmax over the two
score products concatenated on the key axis, the weights split back and multiplied with the
matching values:

    q = q * scale
    s = cat([q @ k_global^T, q @ k_block^T], -1)
    w = softmax(s)
    y = w[..., :G] @ v_global + w[..., G:] @ v_block

The first block's global tokens are learned (constants once exported, as at Pegasus-X's first
layer), the second's are the first G tokens (activations). ``pegasus_x_global`` (and ``_dynamo``): the global branch (``GlobalTokens``) at the first layer,
the learned global tokens the queries (constants once exported) against the keys joined
``[global; tokens]``, the weights split back by columns into the two products with values.

``pegasus_x_blocks``: ``x [B, 16, 16]`` in two blocks of 8, the global tokens' keys and values
shared by the blocks (as the measured export's second layer).

``x [B, 8, 16]`` in one block of 8 (as
the measured export, 16 tokens in one block of 512: with several blocks the global keys are shared
by every block, which the fusion does not join yet), 2 global tokens, 2 heads; exported with the legacy exporter (``pegasus_x``) and the dynamo exporter
(``pegasus_x_dynamo``), at opset 17 with a dynamic batch, into ``OUT/<stem>.onnx`` with
``<stem>_in.npy`` and onnxruntime's ``<stem>_out.npy`` (2 samples)::

    python -m kestrel_torch.pegasus_x --out ../onnx/tests/data
    python -m kestrel_torch.pegasus_x --out ../onnx/tests/data --only global
    python -m kestrel_torch.pegasus_x --out ../onnx/tests/data --only blocks
"""

import numpy as np
import torch
from .fixture_export import export_fixture, main

BATCH, T, C, HEADS, BLOCK, GLOBAL = 2, 8, 16, 2, 8, 2
# ``pegasus_x_blocks``'s blocks.
BLOCKS = 2


class LocalBlocks(torch.nn.Module):
    def __init__(self, learned_global: bool, t: int = T):
        super().__init__()
        self.t = t
        self.d = C // HEADS
        self.q, self.k, self.v = (torch.nn.Linear(C, C) for _ in range(3))
        self.o = torch.nn.Linear(C, C)
        self.glob = torch.nn.Parameter(torch.randn(GLOBAL, C)) if learned_global else None

    def heads(self, t):
        return t.reshape(t.shape[0], t.shape[1], HEADS, self.d).transpose(1, 2)

    def forward(self, x):
        b, t = x.shape[0], self.t
        nb = t // BLOCK
        g = self.glob.expand(b, GLOBAL, C) if self.glob is not None else x[:, :GLOBAL]
        q = self.heads(self.q(x) * self.d**-0.5).reshape(b, HEADS, nb, BLOCK, self.d)
        k = self.heads(self.k(x)).reshape(b, HEADS, nb, BLOCK, self.d)
        v = self.heads(self.v(x)).reshape(b, HEADS, nb, BLOCK, self.d)
        kg, vg = self.heads(self.k(g)), self.heads(self.v(g))
        to_global = torch.einsum("bhnxd,bhgd->bhnxg", q, kg)
        to_block = torch.einsum("bhnxd,bhnyd->bhnxy", q, k)
        w = torch.softmax(torch.cat([to_global, to_block], dim=-1), dim=-1)
        y = torch.einsum("bhnxg,bhgd->bhnxd", w[..., :GLOBAL], vg)
        y = y + torch.einsum("bhnxy,bhnyd->bhnxd", w[..., GLOBAL:], v)
        y = y.reshape(b, HEADS, t, self.d).transpose(1, 2).reshape(b, t, C)
        return x + self.o(y)


class GlobalTokens(torch.nn.Module):
    """Pegasus-X's global branch at its first layer: the learned global tokens (constants once
    exported, their projections folded) attend to themselves and to every token, one softmax over
    the keys joined ``[global; tokens]``, the product with the values joined likewise (which the
    converter splits back by columns, each range times its own values)."""

    def __init__(self):
        super().__init__()
        self.d = C // HEADS
        self.q, self.k, self.v = (torch.nn.Linear(C, C) for _ in range(3))
        self.o = torch.nn.Linear(C, C)
        self.glob = torch.nn.Parameter(torch.randn(GLOBAL, C))

    def heads(self, t):
        return t.reshape(t.shape[0], t.shape[1], HEADS, self.d).transpose(1, 2)

    def forward(self, x):
        g = self.glob.expand(x.shape[0], GLOBAL, C)
        q = self.heads(self.q(g) * self.d**-0.5)
        k = torch.cat([self.heads(self.k(g)), self.heads(self.k(x))], dim=2)
        v = torch.cat([self.heads(self.v(g)), self.heads(self.v(x))], dim=2)
        w = torch.softmax(torch.einsum("bhgd,bhxd->bhgx", q, k), dim=-1)
        y = torch.einsum("bhgx,bhxd->bhgd", w, v).transpose(1, 2).reshape(x.shape[0], GLOBAL, C)
        return self.o(y)


def build(t: int = T) -> torch.nn.Module:
    torch.manual_seed(47)
    return torch.nn.Sequential(LocalBlocks(True, t), LocalBlocks(False, t)).eval()


def build_global() -> torch.nn.Module:
    torch.manual_seed(48)
    return GlobalTokens().eval()


def export(name: str, out: str) -> None:
    x = torch.from_numpy(np.random.default_rng(8).standard_normal((BATCH, T, C)).astype(np.float32))
    if "blocks" in name:
        x = torch.from_numpy(np.random.default_rng(8).standard_normal((BATCH, BLOCKS * BLOCK, C)).astype(np.float32))
    model = build_global() if "global" in name else build(x.shape[1])
    export_fixture(name, model, x, out, dynamo=name.endswith("dynamo"))


if __name__ == "__main__":
    names = ("pegasus_x", "pegasus_x_dynamo", "pegasus_x_global", "pegasus_x_global_dynamo", "pegasus_x_blocks")
    main(__doc__, names, export)
