"""Constant queries (issue 33, item 4): attention-pooling heads whose learned query tokens tract
folds with their projection, so the queries are a constant. Two tiny timm ViTs (random init,
seeded), exported for `converters/onnx/tests/const_queries.rs`:

* ``map``: ``VisionTransformer`` with the MAP head (``global_pool='map'``: ``AttentionPoolLatent``
  with one latent, SigLIP's probe), 32 × 32 image, patch 8, width 32, one block of 2 heads, MLP ratio 1 (a
  small file), no class token: the probe's scores, the keys times the constant, ``[.., Tk, 1]``, viewed as
  ``[.., 1, Tk]``.
* ``latents``: the same ViT with an ``AttentionPoolLatent`` of three latents averaged
  (``latent_len=3, pool_type='avg'``, a Q-Former's several queries): ``[.., Tk, 3]`` transposed to
  ``[.., 3, Tk]``.

Each is exported with the legacy exporter (``dynamo=False``, opset 17, dynamic batch) into
``OUT/const_queries_<name>.onnx`` with its input ``const_queries_<name>_in.npy`` and onnxruntime's
output ``const_queries_<name>_out.npy`` (2 samples)::

    python -m kestrel_torch.const_queries --out ../onnx/tests/data
"""


import numpy as np
import torch
from .fixture_export import export_fixture, main

BATCH = 2
IMAGE = 32
WIDTH = 32


def build(name: str) -> torch.nn.Module:
    from timm.layers import AttentionPoolLatent
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(33)
    m = VisionTransformer(img_size=IMAGE, patch_size=8, embed_dim=WIDTH, depth=1, num_heads=2, num_classes=10,
                          global_pool="map", class_token=False, mlp_ratio=1.0)
    if name == "latents":
        m.attn_pool = AttentionPoolLatent(WIDTH, num_heads=2, latent_len=3, pool_type="avg", mlp_ratio=1.0,
                                          norm_layer=torch.nn.LayerNorm)
    elif name != "map":
        raise ValueError(name)
    with torch.no_grad():  # the latents at a visible scale
        for n, p in m.named_parameters():
            if "latent" in n or "pos_embed" in n:
                p.normal_(0, 0.5)
    return m.eval()


def export(name: str, out: str) -> None:
    model = build(name)
    x = torch.from_numpy(np.random.default_rng(7).standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(np.float32))
    export_fixture(f"const_queries_{name}", model, x, out)


if __name__ == "__main__":
    main(__doc__, ("map", "latents"), export)
