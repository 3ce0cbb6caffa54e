"""Mechanism modules against independent naive formulas (float64), and model builder shapes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from kestrel_torch import models as M
from kestrel_torch.mechanisms import AftConv, AftFull, AftLocal, AftSimple, Attention, Fastformer

torch.set_default_dtype(torch.float64)
N, T, D = 3, 12, 16
ATOL = 1e-10


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def x_input(n: int = N, t: int = T, d: int = D) -> Tensor:
    return torch.randn(n, t, d)


def lin(layer: nn.Linear, x: Tensor) -> Tensor:
    return x @ layer.weight.T + layer.bias


# --- naive formulas, written from DESIGN.md independently of the modules ---------------------


def naive_attention(m: Attention, x: Tensor) -> Tensor:
    """Explicit loops over heads and query rows."""
    n, t, d = x.shape
    c = d // m.heads
    q = lin(m.wq, x)
    k = lin(m.wk, x) if m.wk is not None else x
    if m.variant.value == "standard":
        v = lin(m.wv, x)
    elif m.variant.value == "super":
        wa = torch.tril(m.wa) if m.causal else m.wa
        v = torch.einsum("ij,njf->nif", wa, x) + m.ba[None, :, None]
    else:
        v = x
    out = torch.zeros(n, t, d)
    for b in range(n):
        for h in range(m.heads):
            cols = slice(h * c, (h + 1) * c)
            for i in range(t):
                s = torch.stack([q[b, i, cols] @ k[b, j, cols] * m.scale for j in range(t)])
                if m.causal:
                    s[i + 1 :] = -math.inf
                p = torch.exp(s - s.max())
                p = p / p.sum()
                out[b, i, cols] = (p[:, None] * v[b, :, cols]).sum(0)
    return lin(m.wo, out)


def naive_aft(q: Tensor, k: Tensor, v: Tensor, w: Tensor, causal: bool) -> Tensor:
    """Direct σ(Q_t) ⊙ Σ_t' exp(K_t' + w_tt') V_t' / Σ_t' exp(K_t' + w_tt'); w is ``[T, T]`` or
    per feature ``[T, T, d]``. Materialises the ``[N, T, T, d]`` logits (fine at test sizes)."""
    if w.dim() == 2:
        w = w[:, :, None]
    logits = k[:, None, :, :] + w[None]  # [N, t, t', d]
    if causal:
        t = q.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        logits = logits.masked_fill(mask[None, :, :, None], -math.inf)
    e = torch.exp(logits)
    return torch.sigmoid(q) * (e * v[:, None]).sum(2) / e.sum(2)


def naive_aft_module(m: AftFull | AftLocal | AftSimple, x: Tensor, w: Tensor) -> Tensor:
    return lin(m.wo, naive_aft(lin(m.wq, x), lin(m.wk, x), lin(m.wv, x), w, m.causal))


def conv_bias_matrix(w: Tensor, grid: tuple[int, int], c: int) -> Tensor:
    """AFT-conv's kernel as an explicit ``[T, T, d]`` bias: w[i, a, b] where t' = t + (a − s//2,
    b − s//2) on the row-major grid, 0 elsewhere; head i's kernel on its c features."""
    h, s, _ = w.shape
    gh, gw = grid
    t = gh * gw
    out = torch.zeros(t, t, h * c)
    for ti in range(t):
        yi, xi = divmod(ti, gw)
        for tj in range(t):
            yj, xj = divmod(tj, gw)
            a, b = yj - yi + s // 2, xj - xi + s // 2
            if 0 <= a < s and 0 <= b < s:
                out[ti, tj] = w[:, a, b].repeat_interleave(c)
    return out


def naive_fastformer_per_head(m: Fastformer, x: Tensor, wq_c: Tensor, wk_c: Tensor) -> Tensor:
    """DESIGN.md §3 literally: per head, c-vectors ``wq_c[i], wk_c[i]`` on the head's slice."""
    n, t, d = x.shape
    c = d // m.heads
    q, k, v = lin(m.wq, x), lin(m.wk, x), lin(m.wv, x)
    u = torch.zeros(n, t, d)
    for b in range(n):
        for i in range(m.heads):
            cols = slice(i * c, (i + 1) * c)
            qi, ki, vi = q[b, :, cols], k[b, :, cols], v[b, :, cols]
            alpha = torch.softmax(qi @ wq_c[i] / math.sqrt(c), dim=0)
            g = (alpha[:, None] * qi).sum(0)
            p = g * ki
            beta = torch.softmax(p @ wk_c[i] / math.sqrt(c), dim=0)
            gk = (beta[:, None] * p).sum(0)
            u[b, :, cols] = gk * vi
    return lin(m.wr, u) + q


def naive_fastformer(m: Fastformer, x: Tensor) -> Tensor:
    """The ``[h, d]`` scoring-vector form: head i scores with all d features, pools its c."""
    n, t, d = x.shape
    c = d // m.heads
    q, k, v = lin(m.wq, x), lin(m.wk, x), lin(m.wv, x)

    def pool(rows: Tensor, score: Tensor) -> Tensor:
        out = torch.zeros(n, 1, d)
        for i in range(m.heads):
            a = torch.softmax(rows @ score[i] * m.scale, dim=1)  # [N, T]
            out[:, 0, i * c : (i + 1) * c] = (a[:, :, None] * rows[:, :, i * c : (i + 1) * c]).sum(1)
        return out

    p = pool(q, m.wqa) * k
    return lin(m.wr, pool(p, m.wka) * v) + q


# --- attention variants ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["standard", "optimised", "efficient", "super"])
@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_naive(variant: str, heads: int, causal: bool) -> None:
    m = Attention(D, T, variant, heads=heads, causal=causal)
    x = x_input()
    torch.testing.assert_close(m(x), naive_attention(m, x), atol=ATOL, rtol=0)


def test_attention_parameter_names_and_shapes() -> None:
    shapes = {k: tuple(v.shape) for k, v in Attention(D, T, "super").named_parameters()}
    assert shapes == {"wq.weight": (D, D), "wq.bias": (D,), "wa": (T, T), "ba": (T,), "wo.weight": (D, D), "wo.bias": (D,)}
    names = {k for k, _ in Attention(D, T, "standard").named_parameters()}
    assert names == {f"{p}.{s}" for p in ("wq", "wk", "wv", "wo") for s in ("weight", "bias")}
    names = {k for k, _ in Attention(D, T, "optimised").named_parameters()}
    assert names == {f"{p}.{s}" for p in ("wq", "wk", "wo") for s in ("weight", "bias")}


@pytest.mark.parametrize("variant", ["standard", "optimised", "efficient", "super"])
def test_attention_scale_default(variant: str) -> None:
    assert Attention(D, T, variant, heads=4).scale == pytest.approx(1 / math.sqrt(D // 4))


def test_torch_mha_and_handwritten_are_standard_attention() -> None:
    std = Attention(D, T, "standard", heads=4)
    mha = M.TorchMhaAttention(D, 4)
    hand = M.HandwrittenAttention(D, 4)
    with torch.no_grad():
        w = torch.cat([std.wq.weight, std.wk.weight, std.wv.weight])
        b = torch.cat([std.wq.bias, std.wk.bias, std.wv.bias])
        mha.mha.in_proj_weight.copy_(w)
        mha.mha.in_proj_bias.copy_(b)
        mha.mha.out_proj.weight.copy_(std.wo.weight)
        mha.mha.out_proj.bias.copy_(std.wo.bias)
        hand.qkv_weight.copy_(w.T)
        hand.qkv_bias.copy_(b)
        hand.proj.weight.copy_(std.wo.weight)
        hand.proj.bias.copy_(std.wo.bias)
    x = x_input()
    torch.testing.assert_close(mha.eval()(x), std(x), atol=1e-10, rtol=0)
    torch.testing.assert_close(hand(x), std(x), atol=1e-10, rtol=0)


# --- AFT ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_aft_full_matches_naive(causal: bool) -> None:
    m = AftFull(D, T, causal=causal)
    x = x_input()
    torch.testing.assert_close(m(x), naive_aft_module(m, x, m.w), atol=ATOL, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_aft_full_factorised(causal: bool) -> None:
    m = AftFull(D, T, causal=causal, rank=3)
    assert m.u.shape == (T, 3) and m.v.shape == (T, 3)
    x = x_input()
    torch.testing.assert_close(m(x), naive_aft_module(m, x, m.u @ m.v.T), atol=ATOL, rtol=0)


@pytest.mark.parametrize("window", [1, 3, T, T + 5])
@pytest.mark.parametrize("causal", [False, True])
def test_aft_local_is_aft_full_with_windowed_w(window: int, causal: bool) -> None:
    local = AftLocal(D, T, window=window, causal=causal)
    full = AftFull(D, T, causal=causal)
    full.load_state_dict(local.state_dict(), strict=False)
    idx = torch.arange(T)
    inside = (idx[:, None] - idx[None, :]).abs() < window
    with torch.no_grad():
        full.w.copy_(torch.where(inside, local.w, torch.zeros(())))  # 0, not -inf, outside
    x = x_input()
    torch.testing.assert_close(local(x), full(x), atol=ATOL, rtol=0)
    torch.testing.assert_close(local(x), naive_aft_module(local, x, full.w), atol=ATOL, rtol=0)


def test_aft_local_keeps_global_connectivity() -> None:
    """A token outside every window still changes the output (w = 0 there, not −∞)."""
    m = AftLocal(D, T, window=2)
    x = x_input()
    x2 = x.clone()
    x2[:, -1] += 1.0
    assert (m(x)[:, 0] - m(x2)[:, 0]).abs().max() > 1e-6


@pytest.mark.parametrize("causal", [False, True])
def test_aft_simple_is_aft_full_with_zero_w(causal: bool) -> None:
    m = AftSimple(D, T, causal=causal)
    x = x_input()
    torch.testing.assert_close(m(x), naive_aft_module(m, x, torch.zeros(T, T)), atol=ATOL, rtol=0)
    # and the literal Eq. 5 (non-causal): σ(Q) ⊙ Σ_t' softmax_t'(K) ⊙ V
    if not causal:
        q, k, v = lin(m.wq, x), lin(m.wk, x), lin(m.wv, x)
        eq5 = torch.sigmoid(q) * (torch.softmax(k, dim=1) * v).sum(1, keepdim=True)
        torch.testing.assert_close(m(x), lin(m.wo, eq5), atol=ATOL, rtol=0)


@pytest.mark.parametrize("heads,kernel,grid", [(1, 3, (3, 4)), (2, 3, (4, 4)), (4, 5, (3, 5)), (2, 7, (2, 3))])
def test_aft_conv_matches_naive(heads: int, kernel: int, grid: tuple[int, int]) -> None:
    t = grid[0] * grid[1]
    m = AftConv(D, grid, heads=heads, kernel=kernel)
    assert m.wk.weight.shape == (heads, D) and m.w.shape == (heads, kernel, kernel)
    x = x_input(t=t)
    c = D // heads
    q, k, v = lin(m.wq, x), lin(m.wk, x).repeat_interleave(c, dim=-1), lin(m.wv, x)
    want = lin(m.wo, naive_aft(q, k, v, conv_bias_matrix(m.w, grid, c), causal=False))
    torch.testing.assert_close(m(x), want, atol=ATOL, rtol=0)


def test_aft_conv_is_aft_full_with_equivalent_w() -> None:
    """One head: AFT-conv equals AFT-full whose T×T w is the kernel laid on the grid and whose
    key projection repeats the single key channel on every feature."""
    grid = (4, 5)
    t = grid[0] * grid[1]
    conv = AftConv(D, grid, heads=1, kernel=3)
    full = AftFull(D, t)
    with torch.no_grad():
        for name in ("wq", "wv", "wo"):
            getattr(full, name).load_state_dict(getattr(conv, name).state_dict())
        full.wk.weight.copy_(conv.wk.weight.repeat(D, 1))
        full.wk.bias.copy_(conv.wk.bias.repeat(D))
        full.w.copy_(conv_bias_matrix(conv.w, grid, D)[:, :, 0])
    x = x_input(t=t)
    torch.testing.assert_close(conv(x), full(x), atol=ATOL, rtol=0)


def test_aft_conv_rejects_even_kernel() -> None:
    with pytest.raises(ValueError):
        AftConv(D, (4, 4), kernel=4)


@pytest.mark.parametrize(
    "module",
    [
        lambda: AftFull(D, T),
        lambda: AftFull(D, T, causal=True),
        lambda: AftLocal(D, T, window=3),
        lambda: AftSimple(D, T, causal=True),
        lambda: AftConv(D, (3, 4), heads=2),
    ],
)
def test_aft_is_stable_for_large_keys_and_biases(module) -> None:
    """Subtracting the maxima keeps float32 finite where exp(K) alone would overflow."""
    torch.set_default_dtype(torch.float32)
    try:
        m = module().float()
        with torch.no_grad():
            m.wk.bias.fill_(200.0)
            if getattr(m, "w", None) is not None:
                m.w.add_(150.0)
        y = m(torch.randn(2, T, D))
        assert torch.isfinite(y).all()
    finally:
        torch.set_default_dtype(torch.float64)


# --- causal independence -----------------------------------------------------------------------


CAUSAL = [
    lambda: Attention(D, T, "standard", heads=2, causal=True),
    lambda: Attention(D, T, "optimised", heads=2, causal=True),
    lambda: Attention(D, T, "efficient", heads=4, causal=True),
    lambda: Attention(D, T, "super", heads=1, causal=True),
    lambda: Attention(D, T, "super", heads=2, causal=True),
    lambda: AftFull(D, T, causal=True),
    lambda: AftFull(D, T, causal=True, rank=2),
    lambda: AftLocal(D, T, window=4, causal=True),
    lambda: AftSimple(D, T, causal=True),
]


@pytest.mark.parametrize("make", CAUSAL)
def test_causal_output_ignores_later_tokens(make) -> None:
    m = make()
    x = x_input()
    for t in (0, T // 2, T - 2):
        x2 = x.clone()
        x2[:, t + 1 :] = torch.randn_like(x2[:, t + 1 :]) * 3
        torch.testing.assert_close(m(x)[:, : t + 1], m(x2)[:, : t + 1], atol=1e-10, rtol=0)
        assert (m(x)[:, t + 1 :] - m(x2)[:, t + 1 :]).abs().max() > 1e-6


# --- Fastformer --------------------------------------------------------------------------------


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_fastformer_matches_naive(heads: int) -> None:
    m = Fastformer(D, heads=heads)
    assert m.wqa.shape == (heads, D) and m.wka.shape == (heads, D)
    x = x_input()
    torch.testing.assert_close(m(x), naive_fastformer(m, x), atol=ATOL, rtol=0)


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_fastformer_block_diagonal_is_per_head_form(heads: int) -> None:
    """With wqa, wka zero outside each head's columns, the [h, d] form is DESIGN.md §3's per-head
    c-vector form."""
    m = Fastformer(D, heads=heads)
    c = D // heads
    wq_c, wk_c = torch.randn(heads, c), torch.randn(heads, c)
    with torch.no_grad():
        m.wqa.zero_()
        m.wka.zero_()
        for i in range(heads):
            m.wqa[i, i * c : (i + 1) * c] = wq_c[i]
            m.wka[i, i * c : (i + 1) * c] = wk_c[i]
    x = x_input()
    torch.testing.assert_close(m(x), naive_fastformer_per_head(m, x, wq_c, wk_c), atol=ATOL, rtol=0)


def test_fastformer_parameters() -> None:
    names = {k: tuple(v.shape) for k, v in Fastformer(D, heads=2).named_parameters()}
    assert names["wqa"] == (2, D) and names["wka"] == (2, D)
    assert set(names) == {"wqa", "wka"} | {f"{p}.{s}" for p in ("wq", "wk", "wv", "wr") for s in ("weight", "bias")}


# --- model builders ----------------------------------------------------------------------------

TASKS = {
    # builder, input shape, T, d, layers, classes, input dtype
    "mnist": (M.mnist_vit, (1, 64, 64), 64, 64, 2, 10),
    "cifar100": (M.cifar100_vit, (3, 72, 72), 144, 144, 8, 100),
    "imdb": (M.imdb_text, (32,), 32, 32, 1, 2),
    "amazon": (M.amazon_text, (64,), 64, 64, 3, 5),
}
#: The paper's attention layer parameter counts with T = d (DESIGN.md §4, Table 5 of 004_*).
PAPER_COUNTS = {
    "standard": lambda d, t: 4 * (d * d + d),
    "optimised": lambda d, t: 3 * (d * d + d),
    "efficient": lambda d, t: 2 * (d * d + d),
    "super": lambda d, t: 2 * (d * d + d) + t * t + t,
}


def _inputs(task: str, shape: tuple[int, ...], n: int = 2) -> Tensor:
    if task in ("imdb", "amazon"):
        return torch.randint(0, 100, (n, *shape))
    return torch.rand(n, *shape)


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("mechanism", ["standard", "optimised", "efficient", "super"])
@pytest.mark.parametrize("heads", [1, 2, 4])
def test_paper_attention_parameter_counts(task: str, mechanism: str, heads: int) -> None:
    builder, shape, t, d, layers, classes = TASKS[task]
    # full paper sizes except the classifier head (irrelevant to the attention counts, and the
    # flattened CIFAR head alone is 42M parameters)
    kw = {"head_units": (8,)} if task in ("mnist", "cifar100") else {}
    model = builder(mechanism, heads, **kw)
    per_layer = PAPER_COUNTS[mechanism](d, t)
    assert per_layer == M.expected_attention_parameters(mechanism, d, t)
    assert M.attention_parameter_count(model) == layers * per_layer
    for block in model.blocks:
        assert sum(p.numel() for p in block.attn.parameters()) == per_layer
    assert model.tokens == t


def test_paper_counts_spot_values() -> None:
    """A few absolute values, so the formula itself is pinned: MNIST (T = d = 64)."""
    assert M.expected_attention_parameters("standard", 64, 64) == 16_640
    assert M.expected_attention_parameters("optimised", 64, 64) == 12_480
    assert M.expected_attention_parameters("efficient", 64, 64) == 8_320
    assert M.expected_attention_parameters("super", 64, 64) == 12_480


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("mechanism", [m for m in M.MECHANISMS])
def test_builders_shapes_every_mechanism(task: str, mechanism: str) -> None:
    builder, shape, t, d, layers, classes = TASKS[task]
    heads = 2 if mechanism in M.MULTI_HEAD else 1
    if mechanism == "aft_conv" and task in ("imdb", "amazon"):
        kw: dict = {"grid": (4, 8) if t == 32 else (8, 8)}  # a 1-D text as a 2-D grid, for completeness
    else:
        kw = {}
    if task in ("imdb", "amazon"):
        kw["vocab"] = 500
    else:
        kw["head_units"] = (16,)
    model = builder(mechanism, heads, **kw).eval()
    assert len(model.blocks) == layers
    x = _inputs(task, shape)
    with torch.no_grad():
        y = model(x)
        tokens = model.patch_embed(x).flatten(2).transpose(1, 2) if hasattr(model, "patch_embed") else model.tok(x)
    assert tokens.shape == (2, t, d)
    assert y.shape == (2, classes)
    assert torch.isfinite(y).all()


def test_paper_head_sizes_are_the_defaults() -> None:
    m = M.mnist_vit("efficient")
    assert [l.out_features for l in m.head if isinstance(l, nn.Linear)] == [2048, 1024]
    assert m.head[0].in_features == 64 * 64  # keras.io flattens the [T, d] representation
    assert m.classifier.out_features == 10
    assert all(isinstance(n, nn.LayerNorm) and n.eps == 1e-6 for n in (m.norm, m.blocks[0].norm1))
    text = M.imdb_text("efficient")
    assert text.tok.num_embeddings == 20_000 and text.pos.num_embeddings == 32


def test_aft_conv_classifier() -> None:
    m = M.aft_conv_classifier().eval()
    assert m.tokens == 49 and m.blocks[0].attn.grid == (7, 7)
    assert m(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_mechanism_layer_shapes() -> None:
    for mech in M.MECHANISMS:
        kw = {"grid": (4, 4)} if mech == "aft_conv" else {}
        m = M.mechanism_layer(mech, d=32, tokens=16, heads=2 if mech in M.MULTI_HEAD else 1, **kw)
        assert m(torch.randn(3, 16, 32)).shape == (3, 16, 32)


# --- export ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["layer_super_h2_causal", "layer_aft_conv_h2", "imdb_text_fastformer_h2"])
def test_export_fixture_roundtrip(tmp_path, name: str) -> None:
    """Export one fixture; export_fixture itself checks onnx.checker and onnxruntime vs PyTorch."""
    import json

    import numpy as np
    import onnx

    from kestrel_torch import export as E

    torch.set_default_dtype(torch.float32)
    try:
        fx = next(f for f in E.fixtures() if f.name == name)
        meta = E.export_fixture(fx, tmp_path)
    finally:
        torch.set_default_dtype(torch.float64)
    d = tmp_path / name
    assert sorted(p.name for p in d.iterdir()) == ["input.npy", "meta.json", "model.onnx", "output.npy"]
    proto = onnx.load(d / "model.onnx", load_external_data=False)
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    assert json.loads((d / "meta.json").read_text())["name"] == name
    assert np.load(d / "output.npy").dtype == np.float32
    assert meta["onnxruntime"]["max_abs_diff"] < 1e-4
