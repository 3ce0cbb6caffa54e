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

import argparse
import os

import numpy as np
import onnxruntime as ort
import torch

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
    path = os.path.join(out, f"const_queries_{name}.onnx")
    torch.onnx.export(model, (x[:1],), path, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(y - want).max() <= 1e-4 * np.abs(want).max(), f"{name}: onnxruntime differs from torch"
    np.save(os.path.join(out, f"const_queries_{name}_in.npy"), x.numpy())
    np.save(os.path.join(out, f"const_queries_{name}_out.npy"), y.astype(np.float32))
    print(name, os.path.getsize(path), "bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    for name in ("map", "latents"):
        if args.only in name:
            export(name, args.out)


if __name__ == "__main__":
    main()
