"""Reference PyTorch modules for every mechanism Kestrel fuses.

Each module maps ``x [N, T, d] -> y [N, T, d]`` and owns exactly the parameters of the
matching fused op in ``runtime/format/src/ops/mod.rs`` (Q/K/V projections *and* the output
projection), under the names used there, so that the ONNX→Kestrel converter can recover them:

============  ================================================================================
module        parameters (PyTorch layout, weights ``[out, in]``)
============  ================================================================================
Attention     ``wq`` Linear(d, d); ``wk`` (Standard, Optimised); ``wv`` (Standard);
              ``wa [T, T]`` + ``ba [T]`` (Super); ``wo`` Linear(d, d)
AftFull       ``wq, wk, wv, wo`` Linear(d, d); ``w [T, T]`` or ``u, v [T, r]`` (w = u vᵀ)
AftLocal      ``wq, wk, wv, wo``; ``w [T, T]`` read only where ``|t - t'| < window``
AftSimple     ``wq, wk, wv, wo``
AftConv       ``wq`` Linear(d, d); ``wk`` Linear(d, h); ``wv, wo`` Linear(d, d); ``w [h, s, s]``
Fastformer    ``wq, wk, wv`` Linear(d, d); ``wqa, wka [h, d]`` (no bias); ``wr`` Linear(d, d)
============  ================================================================================

The formulas are those of ``docs/DESIGN.md`` §1–3 and ``docs/DESIGN-NOTES.md``; the f64
reference in ``runtime/reference/src/mechanisms.rs`` computes the same functions naively.
Numerics follow DESIGN.md: softmaxes subtract their maximum (``torch.softmax`` does), AFT
subtracts the per-channel maximum of K over t' and the per-row maximum of w before ``exp``.
"""

from __future__ import annotations

import math
from enum import Enum

import torch
from torch import Tensor, nn

__all__ = [
    "AttentionVariant",
    "Attention",
    "AftFull",
    "AftLocal",
    "AftSimple",
    "AftConv",
    "Fastformer",
]


class AttentionVariant(str, Enum):
    """The four mechanisms of "You Need to Pay Better Attention" (DESIGN.md §1)."""

    STANDARD = "standard"
    OPTIMISED = "optimised"
    EFFICIENT = "efficient"
    SUPER = "super"


def _lower_mask(tokens: int) -> Tensor:
    """``[T, T]`` bool, True where t' ≤ t (the entries a causal layer may read)."""
    return torch.ones(tokens, tokens, dtype=torch.bool).tril()


def _split_heads(x: Tensor, heads: int) -> Tensor:
    """``[N, T, d] -> [N, h, T, c]``."""
    n, t, d = x.shape
    return x.reshape(n, t, heads, d // heads).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    """``[N, h, T, c] -> [N, T, d]``."""
    n, h, t, c = x.shape
    return x.transpose(1, 2).reshape(n, t, h * c)


class Attention(nn.Module):
    """Multi-head attention, Standard / Optimised / Efficient / Super (DESIGN.md §1).

    head_i = softmax(Q_i K_iᵀ · scale) V_i with

    * Standard:  Q = X W^Q + b, K = X W^K + b, V = X W^V + b;
    * Optimised: V = X (head i reads its slice X_i);
    * Efficient: K = V = X;
    * Super:     K = X, V = W^A X + b^A (W^A ``[T, T]`` mixes tokens, shared by the heads).

    Output: concat_i(head_i) W^O + b^O. Causal mode masks the scores to t' ≤ t and, for Super,
    W^A to its lower triangle. The scale defaults to 1/√c with c = d/h.
    """

    def __init__(
        self,
        d: int,
        tokens: int,
        variant: AttentionVariant | str = AttentionVariant.STANDARD,
        heads: int = 1,
        causal: bool = False,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"d={d} is not divisible by heads={heads}")
        self.variant = AttentionVariant(variant)
        self.d, self.tokens, self.heads, self.causal = d, tokens, heads, causal
        self.scale = scale if scale is not None else 1.0 / math.sqrt(d // heads)
        v = self.variant
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, d) if v in (AttentionVariant.STANDARD, AttentionVariant.OPTIMISED) else None
        self.wv = nn.Linear(d, d) if v is AttentionVariant.STANDARD else None
        if v is AttentionVariant.SUPER:
            self.wa = nn.Parameter(torch.empty(tokens, tokens))
            self.ba = nn.Parameter(torch.empty(tokens))
            nn.init.kaiming_uniform_(self.wa, a=math.sqrt(5))
            nn.init.uniform_(self.ba, -1.0 / math.sqrt(tokens), 1.0 / math.sqrt(tokens))
        else:
            self.wa = None
            self.ba = None
        self.wo = nn.Linear(d, d)
        if causal:
            self.register_buffer("mask", _lower_mask(tokens), persistent=False)
        else:
            self.mask = None

    def values(self, x: Tensor) -> Tensor:
        """V ``[N, T, d]`` before the split into heads."""
        if self.wv is not None:
            return self.wv(x)
        if self.wa is None:
            return x
        wa = self.wa if self.mask is None else self.wa.masked_fill(~self.mask, 0.0)
        # (W^A X)[t, f] = Σ_t' W^A[t, t'] X[t', f]; b^A[t] is added to every feature of token t.
        return torch.matmul(wa, x) + self.ba.unsqueeze(-1)

    def forward(self, x: Tensor) -> Tensor:
        q = _split_heads(self.wq(x), self.heads)
        k = _split_heads(self.wk(x) if self.wk is not None else x, self.heads)
        v = _split_heads(self.values(x), self.heads)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        if self.mask is not None:
            scores = scores.masked_fill(~self.mask, float("-inf"))
        heads = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.wo(_merge_heads(heads))


def _aft_pool(q: Tensor, k: Tensor, v: Tensor, w: Tensor, causal_mask: Tensor | None) -> Tensor:
    """σ(Q_t) ⊙ Σ_t' exp(K_t' + w_tt') V_t' / Σ_t' exp(K_t' + w_tt') in the efficient form.

    ``q, k, v [N, T, d]``, ``w [T, T]``. With exp(w) on the left: num = exp(w)(exp(K) ⊙ V),
    den = exp(w) exp(K); O(T²d) time, no T×T×d tensor. The per-channel max of K over t' and the
    per-row max of w are subtracted first (the ratio is unchanged).
    """
    if causal_mask is not None:
        w = w.masked_fill(~causal_mask, float("-inf"))
    ew = torch.exp(w - w.amax(dim=-1, keepdim=True))
    ek = torch.exp(k - k.amax(dim=1, keepdim=True))
    num = torch.matmul(ew, ek * v)
    den = torch.matmul(ew, ek)
    return torch.sigmoid(q) * num / den


class _AftBase(nn.Module):
    """Q, K, V and output projections shared by the AFT variants."""

    def __init__(self, d: int, tokens: int, causal: bool, key_dim: int | None = None) -> None:
        super().__init__()
        self.d, self.tokens, self.causal = d, tokens, causal
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, key_dim if key_dim is not None else d)
        self.wv = nn.Linear(d, d)
        self.wo = nn.Linear(d, d)
        if causal:
            self.register_buffer("mask", _lower_mask(tokens), persistent=False)
        else:
            self.mask = None


class AftFull(_AftBase):
    """AFT-full (DESIGN.md §2, Eq. 2), w ``[T, T]`` or factorised ``u, v [T, r]`` (Eq. 7).

    Causal mode sums over t' ≤ t only.
    """

    def __init__(self, d: int, tokens: int, causal: bool = False, rank: int | None = None) -> None:
        super().__init__(d, tokens, causal)
        self.rank = rank
        if rank is None:
            self.w = nn.Parameter(torch.randn(tokens, tokens) * 0.5)
            self.u = self.v = None
        else:
            self.w = None
            self.u = nn.Parameter(torch.randn(tokens, rank) / math.sqrt(rank))
            self.v = nn.Parameter(torch.randn(tokens, rank) / math.sqrt(rank))

    def bias(self) -> Tensor:
        """The pairwise position bias w ``[T, T]``."""
        if self.w is not None:
            return self.w
        return torch.matmul(self.u, self.v.transpose(0, 1))

    def forward(self, x: Tensor) -> Tensor:
        y = _aft_pool(self.wq(x), self.wk(x), self.wv(x), self.bias(), self.mask)
        return self.wo(y)


class AftLocal(_AftBase):
    """AFT-local (DESIGN.md §2, Eq. 4): w is read only where |t − t'| < window and is **0**
    (not −∞) elsewhere, so every t' still contributes exp(K_t'): global connectivity is kept.

    This module computes it as AFT-full with the windowed w (clear, O(T²d)); the Rust kernel uses
    the banded form (global sums plus an (exp(w) − 1) correction inside the band).
    """

    def __init__(self, d: int, tokens: int, window: int, causal: bool = False) -> None:
        super().__init__(d, tokens, causal)
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self.w = nn.Parameter(torch.randn(tokens, tokens) * 0.5)
        idx = torch.arange(tokens)
        self.register_buffer("band", (idx[:, None] - idx[None, :]).abs() < window, persistent=False)

    def local_bias(self) -> Tensor:
        """w with everything outside the window set to 0."""
        return self.w.masked_fill(~self.band, 0.0)

    def forward(self, x: Tensor) -> Tensor:
        y = _aft_pool(self.wq(x), self.wk(x), self.wv(x), self.local_bias(), self.mask)
        return self.wo(y)


class AftSimple(_AftBase):
    """AFT-simple (DESIGN.md §2, Eq. 5): Y_t = σ(Q_t) ⊙ Σ_t' softmax_t'(K)_t' ⊙ V_t'.

    O(Td). Causal mode: running sums over t' ≤ t (cumulative sums of exp(K) ⊙ V and exp(K)).
    """

    def __init__(self, d: int, tokens: int, causal: bool = False) -> None:
        super().__init__(d, tokens, causal)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if not self.causal:
            y = torch.sigmoid(q) * (torch.softmax(k, dim=1) * v).sum(dim=1, keepdim=True)
        else:
            ek = torch.exp(k - k.amax(dim=1, keepdim=True))
            y = torch.sigmoid(q) * torch.cumsum(ek * v, dim=1) / torch.cumsum(ek, dim=1)
        return self.wo(y)


class AftConv(_AftBase):
    """AFT-conv (DESIGN.md §2, Eq. 6) on a row-major ``grid = (H, W)`` token grid.

    h heads of c = d/h channels; the key projection has one channel per head (``wk`` is
    Linear(d, h)), broadcast over the head's c value channels; w ``[h, s, s]`` (s odd):

        Y^i = σ(Q^i) ⊙ [conv(exp(K^i) ⊙ V^i, exp(w^i) − 1) + Σ_t' exp(K^i) ⊙ V^i]
                     / [conv(exp(K^i),        exp(w^i) − 1) + Σ_t' exp(K^i)]

    conv is depth-wise, "same" padded cross-correlation (kernel index (a, b) reads the token at
    offset (a − s//2, b − s//2)), the head's kernel shared by its c channels. For stability the
    per-channel max of K and m_i = max(0, max w^i) (w is 0 outside the kernel) are subtracted:
    the kernel becomes exp(w^i − m_i) − exp(−m_i) and the global sums are scaled by exp(−m_i).
    No causal mode (the mechanism is 2-D).
    """

    def __init__(self, d: int, grid: tuple[int, int], heads: int = 1, kernel: int = 3) -> None:
        if kernel % 2 != 1:
            raise ValueError("kernel must be odd")
        if d % heads:
            raise ValueError(f"d={d} is not divisible by heads={heads}")
        super().__init__(d, grid[0] * grid[1], causal=False, key_dim=heads)
        self.grid, self.heads, self.kernel = (int(grid[0]), int(grid[1])), heads, kernel
        self.w = nn.Parameter(torch.randn(heads, kernel, kernel) * 0.5)

    def forward(self, x: Tensor) -> Tensor:
        n, t, d = x.shape
        (gh, gw), h, s = self.grid, self.heads, self.kernel
        c = d // h
        q, k, v = self.wq(x), self.wk(x), self.wv(x)  # k: [N, T, h]
        ek = torch.exp(k - k.amax(dim=1, keepdim=True))  # [N, T, h]
        ekv = ek.unsqueeze(-1) * v.reshape(n, t, h, c)  # [N, T, h, c]

        m = self.w.amax(dim=(1, 2)).clamp(min=0.0)  # [h]
        scale = torch.exp(-m)  # weight of the tokens outside the kernel
        kern = torch.exp(self.w - m[:, None, None]) - scale[:, None, None]  # [h, s, s]

        # Depth-wise convolutions on [N, channels, H, W] images of the token grid.
        ekv_img = ekv.reshape(n, gh, gw, d).permute(0, 3, 1, 2)
        ek_img = ek.reshape(n, gh, gw, h).permute(0, 3, 1, 2)
        kern_v = kern.repeat_interleave(c, dim=0).unsqueeze(1)  # [d, 1, s, s]
        num = nn.functional.conv2d(ekv_img, kern_v, padding=s // 2, groups=d)
        den = nn.functional.conv2d(ek_img, kern.unsqueeze(1), padding=s // 2, groups=h)
        num = num.permute(0, 2, 3, 1).reshape(n, t, h, c)
        den = den.permute(0, 2, 3, 1).reshape(n, t, h, 1)

        num = num + scale[:, None] * ekv.sum(dim=1, keepdim=True)
        den = den + scale[:, None] * ek.sum(dim=1, keepdim=True).unsqueeze(-1)
        y = torch.sigmoid(q) * (num / den).reshape(n, t, d)
        return self.wo(y)


class Fastformer(nn.Module):
    """Fastformer additive attention (DESIGN.md §3, DESIGN-NOTES "scoring vectors").

    Per head i (columns i·c .. (i+1)·c):
    α = softmax_t(q_t · wqa[i] · scale), g = Σ_t α_t q_t;  p_t = g ⊙ k_t,
    β = softmax_t(p_t · wka[i] · scale), G = Σ_t β_t p_t;  output_t = W^R (G ⊙ v_t) + b^R + q_t.
    ``wqa, wka [h, d]``: each head's scoring vector spans all d features (the per-head c-vector
    form is the block-diagonal special case). No scoring biases (they cancel in the softmax).
    """

    def __init__(self, d: int, heads: int = 1, scale: float | None = None) -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"d={d} is not divisible by heads={heads}")
        self.d, self.heads = d, heads
        self.scale = scale if scale is not None else 1.0 / math.sqrt(d // heads)
        self.wq = nn.Linear(d, d)
        self.wk = nn.Linear(d, d)
        self.wv = nn.Linear(d, d)
        self.wqa = nn.Parameter(torch.randn(heads, d) / math.sqrt(d))
        self.wka = nn.Parameter(torch.randn(heads, d) / math.sqrt(d))
        self.wr = nn.Linear(d, d)

    def _pool(self, rows: Tensor, score: Tensor) -> Tensor:
        """Head i pools ``rows [N, T, d]`` over t on its c columns with weights
        softmax_t(rows_t · score[i] · scale); returns ``[N, 1, d]``."""
        n, t, d = rows.shape
        a = torch.softmax(torch.matmul(rows, score.transpose(0, 1)) * self.scale, dim=1)  # [N, T, h]
        pooled = (a.unsqueeze(-1) * rows.reshape(n, t, self.heads, d // self.heads)).sum(dim=1)
        return pooled.reshape(n, 1, d)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        g = self._pool(q, self.wqa)
        p = g * k
        gk = self._pool(p, self.wka)
        return self.wr(gk * v) + q
