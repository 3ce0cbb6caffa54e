"""Attention sinks (issue 33, item 4): a learned logit per head in the softmax's denominator with
no value row, in the two forms Hugging Face models write, for `converters/onnx/tests/sinks.rs`
(tiny, random init, seeded; the attention code as transformers writes it):

* ``padded``: GPT-OSS's ``eager_attention_forward``: the scores (scaled, a causal sliding-window
  mask of 3 keys added) concatenated with ``sinks.reshape(1, -1, 1, 1).expand(b, -1, q, -1)``,
  ``softmax`` with its max subtracted, the sink column cut off, the product with values;
  grouped-query heads (4 over 2).
* ``gate``: GraniteMoeHybrid's sliding-window layers: ``softmax(s) @ v`` times
  ``sigmoid(logsumexp(s) - sinks)``; 2 heads, a causal mask.

Each is a 2-block encoder over ``x [B, 8, 32]`` (projections, attention, output projection,
residual), exported with the legacy exporter (``dynamo=False``, opset 17, dynamic batch) into
``OUT/sinks_<name>.onnx`` with its input ``sinks_<name>_in.npy`` and onnxruntime's output
``sinks_<name>_out.npy`` (2 samples)::

    python -m kestrel_torch.sinks --out ../onnx/tests/data
"""


import numpy as np
import torch
from .fixture_export import export_fixture, main

BATCH, T, C = 2, 8, 32


class Attn(torch.nn.Module):
    def __init__(self, form: str, heads: int, kv_heads: int):
        super().__init__()
        self.form, self.h, self.kv, self.d = form, heads, kv_heads, C // heads
        self.q = torch.nn.Linear(C, heads * self.d)
        self.k = torch.nn.Linear(C, kv_heads * self.d)
        self.v = torch.nn.Linear(C, kv_heads * self.d)
        self.o = torch.nn.Linear(heads * self.d, C)
        self.sinks = torch.nn.Parameter(torch.randn(heads) * 2.0)
        i = torch.arange(T)
        allowed = (i[None, :] <= i[:, None]) & ((i[:, None] - i[None, :]) < (3 if form == "padded" else T))
        self.register_buffer("mask", torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[None, None])

    def forward(self, x):
        b = x.shape[0]
        q = self.q(x).view(b, T, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(b, T, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, T, self.kv, self.d).transpose(1, 2)
        rep = self.h // self.kv
        k = k[:, :, None].expand(b, self.kv, rep, T, self.d).reshape(b, self.h, T, self.d)
        v = v[:, :, None].expand(b, self.kv, rep, T, self.d).reshape(b, self.h, T, self.d)
        s = q @ k.transpose(2, 3) * self.d**-0.5 + self.mask
        if self.form == "padded":
            sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, T, -1)
            logits = torch.cat([s, sinks], dim=-1)
            logits = logits - logits.max(dim=-1, keepdim=True).values
            p = torch.softmax(logits, dim=-1)[..., :-1]
            o = p @ v
        else:
            o = torch.softmax(s, dim=-1) @ v
            gate = torch.sigmoid(torch.logsumexp(s, dim=-1) - self.sinks.reshape(1, -1, 1))
            o = o * gate.unsqueeze(-1)
        return x + self.o(o.transpose(1, 2).reshape(b, T, C))


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(41)
    heads, kv = (4, 2) if name == "padded" else (2, 2)
    return torch.nn.Sequential(Attn(name, heads, kv), Attn(name, heads, kv)).eval()


def export(name: str, out: str) -> None:
    model = build(name)
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((BATCH, T, C)).astype(np.float32))
    export_fixture(f"sinks_{name}", model, x, out)


if __name__ == "__main__":
    main(__doc__, ("padded", "gate"), export)
