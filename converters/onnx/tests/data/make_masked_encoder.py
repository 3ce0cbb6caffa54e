"""Writes `torch_encoder_mask.onnx` and its inputs/outputs for `tests/masked_attention.rs`:
nn.TransformerEncoder (2 layers, batch_first, GELU) called with `src_key_padding_mask` built from
a 0/1 int64 mask input (`~mask.bool()`), exported with the legacy exporter (opset 17, dynamic
batch). Inputs: `torch_encoder_mask_ids.npy`, `torch_encoder_mask_mask.npy` (3 samples, the
second and third padded); output: onnxruntime's, `torch_encoder_mask_out.npy`.

    python make_masked_encoder.py   # in converters/onnx/tests/data, with torch, onnxruntime
"""

import numpy as np
import onnxruntime as ort
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab=20, dim=16, heads=2, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids, mask):
        h = self.encoder(self.embed(ids), src_key_padding_mask=torch.logical_not(mask.bool()))
        return self.head(h.mean(dim=1))


def main():
    torch.manual_seed(0)
    model = Encoder().eval()
    ids = torch.randint(1, 20, (3, 8))
    mask = torch.ones(3, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    torch.onnx.export(
        model, (ids, mask), "torch_encoder_mask.onnx", input_names=["ids", "mask"], output_names=["logits"],
        opset_version=17, dynamo=False, dynamic_axes={"ids": {0: "b"}, "mask": {0: "b"}, "logits": {0: "b"}},
    )
    out = ort.InferenceSession("torch_encoder_mask.onnx").run(None, {"ids": ids.numpy(), "mask": mask.numpy()})[0]
    with torch.no_grad():
        want = model(ids, mask).numpy()
    assert np.abs(out - want).max() < 1e-5, np.abs(out - want).max()
    np.save("torch_encoder_mask_ids.npy", ids.numpy())
    np.save("torch_encoder_mask_mask.npy", mask.numpy())
    np.save("torch_encoder_mask_out.npy", out)


if __name__ == "__main__":
    main()
