"""Generates the bounded-dynamic-shape fixtures of kestrel-rt-onnx (issue 34; run once, the
outputs are committed):

    python converters/onnx/tests/data/make_dynamic_models.py

(it writes into `dynamic/` beside itself from any working directory; it needs torch,
transformers, onnx, onnxruntime and numpy). Every model is randomly initialised from a fixed
seed (no downloads) and exported with symbolic dims:

* `bert_legacy.onnx`: transformers' `BertModel` (hidden 32, 2 layers, 2 heads, intermediate 64,
  vocab 100, 64 positions, transformers' default `sdpa` attention), the legacy exporter at
  opset 17; inputs `input_ids` and `attention_mask` (int64, [batch, sequence]), output
  `last_hidden_state` [batch, sequence, 32].
* `transformer_dynamo.onnx`: `nn.TransformerEncoder` (d_model 32, 4 heads, 2 layers, feed-forward
  64, batch_first, dropout 0), the dynamo exporter (opset 20, its default) with
  `torch.export.Dim`s for the batch (at most 1024) and the sequence (at most 64); input `src`
  [batch, sequence, 32], output `out`.
* `cnn_hw.onnx`: conv 3x3 stride 2 + BN + ReLU, max pool 3x3 stride 2 pad 1, depthwise conv 3x3,
  1x1 conv + ReLU, global average pool, linear head; the legacy exporter at opset 17; input
  `image` [batch, 3, h, w], output `logits` [batch, 10].
* `gpt2_dynamo.onnx`: transformers' `GPT2Model` (hidden 32, 2 layers, 2 heads, 64 positions,
  vocab 100, eager attention), the dynamo exporter (`Dim`s batch and sequence 2..=64): a decoder
  whose causal and packed-sequence masks are computed from the length, and whose value_info
  has dims such as `sequence + 1`; input `input_ids` (int64), output `last_hidden_state`.
* `alibi_window.onnx`: self-attention with a symmetric ALiBi score bias and a sliding-window
  mask (|i - j| <= 4), both computed from the sequence length, plus a residual; the legacy
  exporter at opset 17; input `x` [batch, sequence, 32], output `y`. tract folds the bias and
  the mask into `[2, T, T]` and `[T, T]` constants at each length: the bounded file keeps the
  bound's and slices them at run time.

For each model and reference size, `<model>_<case>_<input>.npy` holds an input and
`<model>_<case>_out.npy` onnxruntime's (CPUExecutionProvider) output; each output is also
checked against PyTorch's own. The script prints every model's input shapes, symbolic dims
named, and the size of the directory (kept under 2 MB).
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "dynamic")
MAX_SEQ = 64
HW_MAX = 64


def path(name):
    return os.path.join(OUT, name)


def print_inputs(file):
    m = onnx.load(path(file))
    print(file)
    for v in list(m.graph.input) + list(m.graph.output):
        dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in v.type.tensor_type.shape.dim]
        kind = "input " if v in m.graph.input else "output"
        print(f"  {kind} {v.name}: {onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type)} {dims}")
    print(f"  opset {[(o.domain or 'ai.onnx', o.version) for o in m.opset_import]}")


def save_case(model, case, feeds, torch_out):
    """Runs `model` in onnxruntime on `feeds`, checks it against PyTorch's `torch_out`, and saves
    the inputs and the output."""
    sess = ort.InferenceSession(path(model + ".onnx"), providers=["CPUExecutionProvider"])
    out = sess.run(None, feeds)[0]
    err = float(np.abs(out - torch_out).max())
    assert err < 1e-4, (model, case, err)
    for name, x in feeds.items():
        np.save(path(f"{model}_{case}_{name}.npy"), x)
    np.save(path(f"{model}_{case}_out.npy"), out.astype(np.float32))
    shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items())
    print(f"  {case}: {shapes} -> out {list(out.shape)} (ORT vs torch max abs {err:.1e})")


def bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_SEQ,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(config, add_pooling_layer=False).eval()

    class Wrap(nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    wrap = Wrap(model).eval()
    ids = torch.randint(1, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    torch.onnx.export(
        wrap, (ids, mask), path("bert_legacy.onnx"), input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"], opset_version=17, dynamo=False,
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
    )
    print_inputs("bert_legacy.onnx")
    gen = torch.Generator().manual_seed(1)
    cases = [(f"s{s}", 1, s, 0) for s in (1, 5, 13, MAX_SEQ)] + [("b2_s13_padded", 2, 13, 4)]
    for case, b, s, pad in cases:
        ids = torch.randint(1, 100, (b, s), generator=gen)
        mask = torch.ones(b, s, dtype=torch.int64)
        if pad:
            mask[1, s - pad:] = 0
        with torch.no_grad():
            want = wrap(ids, mask).numpy()
        save_case("bert_legacy", case, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}, want)


def transformer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()

    class Wrap(nn.Module):
        def __init__(self, enc):
            super().__init__()
            self.enc = enc

        def forward(self, src):
            return self.enc(src)

    wrap = Wrap(model).eval()
    x = torch.randn(2, 8, 32)
    batch = torch.export.Dim("batch", min=1, max=1024)
    seq = torch.export.Dim("sequence", min=1, max=MAX_SEQ)
    torch.onnx.export(
        wrap, (x,), path("transformer_dynamo.onnx"), input_names=["src"], output_names=["out"],
        dynamo=True, dynamic_shapes={"src": {0: batch, 1: seq}}, external_data=False,
    )
    strip_stack_traces("transformer_dynamo.onnx")
    print_inputs("transformer_dynamo.onnx")
    gen = torch.Generator().manual_seed(2)
    for s in (1, 5, 13, MAX_SEQ):
        x = torch.randn(2, s, 32, generator=gen)
        with torch.no_grad():
            want = wrap(x).numpy()
        save_case("transformer_dynamo", f"s{s}", {"src": x.numpy()}, want)


class Cnn(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 16, 1)
        self.head = nn.Linear(16, classes)

    def forward(self, image):
        x = self.pool(torch.relu(self.bn1(self.conv1(image))))
        x = torch.relu(self.pw(self.dw(x)))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def cnn():
    torch.manual_seed(0)
    model = Cnn()
    with torch.no_grad():  # statistics other than the identity, so that folding them matters
        model.bn1.running_mean.uniform_(-0.5, 0.5)
        model.bn1.running_var.uniform_(0.5, 2.0)
        model.bn1.weight.uniform_(0.5, 1.5)
        model.bn1.bias.uniform_(-0.5, 0.5)
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    axes = {0: "batch", 2: "h", 3: "w"}
    torch.onnx.export(
        model, (x,), path("cnn_hw.onnx"), input_names=["image"], output_names=["logits"], opset_version=17,
        dynamo=False, dynamic_axes={"image": axes, "logits": {0: "batch"}},
    )
    print_inputs("cnn_hw.onnx")
    gen = torch.Generator().manual_seed(3)
    for h, w in ((16, 16), (17, 23), (32, 48), (HW_MAX, HW_MAX)):
        x = torch.randn(2, 3, h, w, generator=gen)
        with torch.no_grad():
            want = model(x).numpy()
        save_case("cnn_hw", f"h{h}_w{w}", {"image": x.numpy()}, want)


def strip_stack_traces(file):
    """Drops the exporter's per-node Python stack traces (this machine's paths), so that the file
    is the same wherever the script runs."""
    m = onnx.load(path(file))
    for node in m.graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.save(m, path(file))


def gpt2():
    """A decoder: causal masks built from the sequence length, dynamo's `sequence + 1` dims."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=MAX_SEQ, vocab_size=100,
                     attn_implementation="eager")
    model = GPT2Model(cfg).eval()

    class Wrap(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).last_hidden_state

    wrap = Wrap(model).eval()
    ids = torch.randint(0, 100, (2, 13))
    batch = torch.export.Dim("batch", min=1, max=1024)
    seq = torch.export.Dim("sequence", min=2, max=MAX_SEQ)
    torch.onnx.export(
        wrap, (ids,), path("gpt2_dynamo.onnx"), input_names=["input_ids"], output_names=["last_hidden_state"],
        dynamo=True, dynamic_shapes={"input_ids": {0: batch, 1: seq}}, external_data=False,
    )
    strip_stack_traces("gpt2_dynamo.onnx")
    print_inputs("gpt2_dynamo.onnx")
    gen = torch.Generator().manual_seed(4)
    for s in (2, 7, 13, MAX_SEQ):
        ids = torch.randint(0, 100, (2, s), generator=gen)
        with torch.no_grad():
            want = wrap(ids).numpy()
        save_case("gpt2_dynamo", f"s{s}", {"input_ids": ids.numpy()}, want)


WINDOW = 4


class AlibiWindow(nn.Module):
    """Self-attention with a symmetric ALiBi score bias and a sliding-window mask, both computed
    from the sequence length (tract folds them into `[h, T, T]` and `[T, T]` constants)."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.slopes = torch.tensor([0.5, 0.25]).view(1, heads, 1, 1)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        pos = torch.arange(t)
        rel = (pos.view(1, t) - pos.view(t, 1)).abs().float()
        att = (att - self.slopes * rel).masked_fill(rel > WINDOW, float("-inf"))
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
        return x + self.out(y)


def alibi():
    torch.manual_seed(0)
    model = AlibiWindow().eval()
    x = torch.randn(1, 13, 32)
    torch.onnx.export(
        model, (x,), path("alibi_window.onnx"), input_names=["x"], output_names=["y"], opset_version=17,
        dynamo=False, dynamic_axes={"x": {0: "batch", 1: "sequence"}, "y": {0: "batch", 1: "sequence"}},
    )
    print_inputs("alibi_window.onnx")
    gen = torch.Generator().manual_seed(5)
    for s in (WINDOW + 2, 11, 29, MAX_SEQ):
        x = torch.randn(2, s, 32, generator=gen)
        with torch.no_grad():
            want = model(x).numpy()
        save_case("alibi_window", f"s{s}", {"x": x.numpy()}, want)


def main():
    os.makedirs(OUT, exist_ok=True)
    bert()
    transformer()
    cnn()
    gpt2()
    alibi()
    total = sum(os.path.getsize(path(f)) for f in os.listdir(OUT))
    print(f"{OUT}: {total / 1024:.0f} KiB")
    assert total < 2 * 1024 * 1024, total


if __name__ == "__main__":
    main()
