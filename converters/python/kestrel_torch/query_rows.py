"""Attention forms the timm family exports left unfused (issue 33, item 4): three real timm
architectures at tiny sizes (random init, seeded), exported for
`converters/onnx/tests/query_rows.rs`.

* ``beit``: ``Beit`` with its relative-position bias per block and average pooling of the patch
  tokens (``global_pool='avg'``, 32 × 32 image, patch 8, width 32, 2 blocks of 2 heads): the
  class token's row of the last block's attention never reaches the output, so tract cuts the
  weights to the patch rows after the softmax (and the constant bias's rows with them).
* ``tnt``: ``TNT`` (Transformer in Transformer; 32 × 32, patch 16, outer width 32, inner 8, 2
  blocks): its outer attention's class-token row and patch rows go different ways, so tract reads
  the weights through two slices of query rows, each with its own product with values.
* ``mvitv2``: ``MultiScaleVit`` (two stages of one block, width 16, one and two heads, 32 × 32):
  the decomposed relative-position bias added where the scores' key axis is split into
  ``[.., Tq, kh, kw]``, ``rel_h [.., kh, 1]`` and ``rel_w [.., 1, kw]``.

Each is exported with the legacy exporter (``dynamo=False``, opset 17, dynamic batch) into
``OUT/query_rows_<name>.onnx`` with its input ``query_rows_<name>_in.npy`` and onnxruntime's
output ``query_rows_<name>_out.npy`` (2 samples)::

    python -m kestrel_torch.query_rows --out ../onnx/tests/data
"""


import numpy as np
import torch
from .fixture_export import export_fixture, main

BATCH = 2
IMAGE = 32


def build(name: str) -> torch.nn.Module:
    from timm.models import beit, mvitv2, tnt

    torch.manual_seed(33)
    if name == "beit":
        m = beit.Beit(img_size=IMAGE, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10,
                      use_rel_pos_bias=True, use_abs_pos_emb=False, global_pool="avg")
    elif name == "tnt":
        m = tnt.TNT(img_size=IMAGE, patch_size=16, embed_dim=32, inner_dim=8, depth=2, num_heads_inner=2,
                    num_heads_outer=2, num_classes=10, first_stride=4)
    elif name == "mvitv2":
        cfg = mvitv2.MultiScaleVitCfg(depths=(1, 1), embed_dim=(16, 32), num_heads=(1, 2))
        m = mvitv2.MultiScaleVit(cfg, img_size=(IMAGE, IMAGE), num_classes=10)
    else:
        raise ValueError(name)
    with torch.no_grad():  # relative-position tables are zero at init: draw them
        for n, p in m.named_parameters():
            if "relative_position" in n or "rel_pos" in n or "pos_embed" in n or "cls_token" in n:
                p.normal_(0, 0.5)
    return m.eval()


def export(name: str, out: str) -> None:
    model = build(name)
    x = torch.from_numpy(np.random.default_rng(7).standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(np.float32))
    export_fixture(f"query_rows_{name}", model, x, out)


if __name__ == "__main__":
    main(__doc__, ("beit", "tnt", "mvitv2"), export)
