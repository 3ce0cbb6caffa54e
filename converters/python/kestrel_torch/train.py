"""Train the bundled image classifiers on real data (offline, CPU) and export them to ONNX.

Usage::

    python -m kestrel_torch.train --list
    python -m kestrel_torch.train --model fmnist_vit_super --out ../../target/train
    python -m kestrel_torch.train --model digits_vit_super --out ../../target/train --epochs 20

Data sets (installed from Debian, never downloaded at run time):

* Fashion-MNIST (``apt-get install dataset-fashion-mnist``): the IDX files in
  ``/usr/share/datasets/fashion-mnist``, 60,000 training and 10,000 test images, 28×28 grey,
  10 classes. © 2017 Zalando SE, MIT licence.
* OpenCV's handwritten digits (``apt-get install opencv-doc``):
  ``/usr/share/doc/opencv-doc/examples/data/digits.png``, a 2000×1000 sheet of 5,000 20×20
  digits, 500 per class (label = cell row ÷ 5). Apache-2.0 (OpenCV). A seeded, stratified split
  keeps 100 per class (1,000) as the test set.

For a model ``NAME`` this writes ``OUT/NAME/``:

* ``model.onnx``: ``torch.onnx.export(dynamo=True, opset_version=18)``, dynamic batch axis,
  checked with ``onnx.checker`` and onnxruntime against PyTorch;
* ``kes-meta.json``: what ``kestrel convert --meta`` puts in the ``.kes`` metadata (name, task,
  class labels, the input's preprocessing: grey, CHW, resize, pixel scale 1/255, mean, std);
* ``train.json``: settings, time per epoch, loss, PyTorch test accuracy each epoch;
* ``test/<label>/<index>.png``: the test set as PNG files (for ``kestrel classify --eval``).

Preprocessing convention (the Rust side in ``apps/kestrel-cli/src/classify.rs`` does the same):
decode to float pixels in 0..255 (RGB → grey as 0.299 R + 0.587 G + 0.114 B, no rounding),
resize with an antialiased triangle filter (``F.interpolate(mode="bilinear", antialias=True,
align_corners=False)``) to the metadata's resize size, centre-crop to the input size, then
``x = (p · pixel_scale − mean) / std``. See :func:`preprocess_reference`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import models as M

FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
DIGITS_PNG = Path("/usr/share/doc/opencv-doc/examples/data/digits.png")
FMNIST_LABELS = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
DIGIT_LABELS = [str(i) for i in range(10)]
OPSET = 18
SEED = 2024


@dataclass
class Spec:
    """One trainable model.

    Attributes:
        name: directory name.
        data: ``fmnist`` or ``digits``.
        build: builds the (untrained) model.
        epochs: default number of epochs.
        lr: peak learning rate (AdamW, linear warm-up then cosine decay).
        batch: batch size.
        flip: horizontal flips in augmentation (not for digits).
        shift: random translation in pixels (augmentation).
        notes: architecture summary for the README.
    """

    name: str
    data: str
    build: Callable[[], nn.Module]
    epochs: int
    lr: float = 2e-3
    batch: int = 128
    flip: bool = True
    shift: int = 2
    notes: str = ""
    extra: dict = field(default_factory=dict)


def grey_super_vit(image_size: int, patch: int, d: int, mlp_units: list[int], head_units: tuple[int, ...]) -> nn.Module:
    """A ViT classifier of 10 classes on grey images: Super attention (2 heads), 2 blocks, mean pool."""
    return M.ViT(
        image_size=image_size, channels=1, patch=patch, d=d, layers=2, classes=10,
        mixer=M.MixerConfig(mechanism="super", heads=2), mlp_units=mlp_units, head_units=head_units, pool="mean",
    )  # fmt: skip


def specs() -> list[Spec]:
    """The bundled models."""
    return [
        Spec(
            "fmnist_vit_super",
            "fmnist",
            lambda: grey_super_vit(image_size=28, patch=7, d=64, mlp_units=[128, 64], head_units=(128,)),
            epochs=6,
            notes="ViT, Super attention (2 heads), 28x28 grey, 7x7 patches (T=16), d=64, 2 pre-LN blocks, "
            "MLP [128, 64], mean pool, head [128]",
        ),  # fmt: skip
        Spec(
            "fmnist_aftconv",
            "fmnist",
            lambda: M.aft_conv_classifier(heads=4, kernel=3, patch=7, layers=2),
            epochs=6,
            notes="AFT-conv (4 heads, 3x3 kernel), 28x28 grey, 7x7 patches (4x4 grid), d=64, 2 pre-LN blocks, "
            "MLP [128, 64], mean pool, head [128]",
        ),
        Spec(
            "digits_vit_super",
            "digits",
            lambda: grey_super_vit(image_size=20, patch=5, d=48, mlp_units=[96, 48], head_units=(64,)),
            epochs=20,
            flip=False,
            shift=1,
            notes="ViT, Super attention (2 heads), 20x20 grey, 5x5 patches (T=16), d=48, 2 pre-LN blocks, "
            "MLP [96, 48], mean pool, head [64]",
        ),  # fmt: skip
    ]


# --- data ---------------------------------------------------------------------------------------


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (optionally gzipped) as a numpy array (uint8 data only)."""
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    if raw[:2] != b"\0\0" or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != math.prod(dims):
        raise ValueError(f"{path}: {data.size} bytes of data for dims {dims}")
    return data.reshape(dims)


def load_fmnist() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images [60000, 28, 28] u8, train labels, test images [10000, 28, 28], test labels)."""
    missing = [p for p in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz") if not (FMNIST_DIR / p).exists()]
    if missing:
        sys.exit(f"Fashion-MNIST not found in {FMNIST_DIR}: apt-get install dataset-fashion-mnist")
    tr_x = read_idx(FMNIST_DIR / "train-images-idx3-ubyte.gz")
    tr_y = read_idx(FMNIST_DIR / "train-labels-idx1-ubyte.gz")
    te_x = read_idx(FMNIST_DIR / "t10k-images-idx3-ubyte.gz")
    te_y = read_idx(FMNIST_DIR / "t10k-labels-idx1-ubyte.gz")
    return tr_x, tr_y, te_x, te_y


def load_digits(test_per_class: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV's digits sheet cut into 5,000 20×20 cells; a seeded stratified split."""
    if not DIGITS_PNG.exists():
        sys.exit(f"{DIGITS_PNG} not found: apt-get install opencv-doc")
    from PIL import Image

    sheet = np.asarray(Image.open(DIGITS_PNG).convert("L"))
    if sheet.shape != (1000, 2000):
        raise ValueError(f"{DIGITS_PNG}: expected 1000x2000 pixels, found {sheet.shape}")
    cells = sheet.reshape(50, 20, 100, 20).transpose(0, 2, 1, 3).reshape(5000, 20, 20)
    labels = np.repeat(np.arange(10), 500).astype(np.uint8)  # 5 rows of 100 cells per class
    rng = np.random.default_rng(SEED)
    test = np.zeros(5000, dtype=bool)
    for c in range(10):
        idx = np.flatnonzero(labels == c)
        test[rng.choice(idx, test_per_class, replace=False)] = True
    return cells[~test], labels[~test], cells[test], labels[test]


def data_for(spec: Spec):
    return load_fmnist() if spec.data == "fmnist" else load_digits()


def labels_for(spec: Spec) -> list[str]:
    return FMNIST_LABELS if spec.data == "fmnist" else DIGIT_LABELS


def norm_stats(train_x: np.ndarray) -> tuple[float, float]:
    """Mean and std of the training pixels in [0, 1], rounded to 4 digits."""
    x = train_x.astype(np.float64) / 255.0
    return round(float(x.mean()), 4), round(float(x.std()), 4)


# --- preprocessing (the reference the Rust side is tested against) ------------------------------


def preprocess_reference(pixels: np.ndarray, meta: dict) -> np.ndarray:
    """Float pixels ``[H, W]`` (grey) or ``[H, W, 3]`` (RGB), values 0..255, to the model input
    ``[C, h, w]`` as the ``.kes`` metadata ``meta`` (a ``kes-meta.json`` preprocess block plus
    ``input_shape``) says: colour conversion, antialiased bilinear resize, centre crop, scale,
    mean/std."""
    p = meta["preprocess"]
    x = torch.from_numpy(np.asarray(pixels, dtype=np.float32))
    if x.ndim == 2:
        x = x[None]  # [1, H, W]
    else:
        x = x.permute(2, 0, 1)  # [3, H, W]
    if p["colour"] == "grey" and x.shape[0] == 3:
        x = (0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2])[None]
    elif p["colour"] == "rgb" and x.shape[0] == 1:
        x = x.expand(3, -1, -1)
    c, h, w = meta["input_shape"][-3:]
    rh, rw = p.get("resize") or (h, w)
    if (x.shape[1], x.shape[2]) != (rh, rw):
        x = F.interpolate(x[None], size=(rh, rw), mode="bilinear", align_corners=False, antialias=True)[0]
    top, left = (rh - h) // 2, (rw - w) // 2
    x = x[:, top : top + h, left : left + w]
    mean = torch.tensor(p["mean"], dtype=torch.float32)[:, None, None]
    std = torch.tensor(p["std"], dtype=torch.float32)[:, None, None]
    return ((x * p["pixel_scale"] - mean) / std).numpy()


# --- training -----------------------------------------------------------------------------------


def augment(x: torch.Tensor, gen: torch.Generator, flip: bool, shift: int) -> torch.Tensor:
    """Random horizontal flips and translations by up to ``shift`` pixels (zero padding)."""
    n, _, h, w = x.shape
    if flip:
        m = torch.rand(n, generator=gen) < 0.5
        x = torch.where(m[:, None, None, None], x.flip(-1), x)
    if shift:
        xp = F.pad(x, (shift, shift, shift, shift))
        dy = torch.randint(0, 2 * shift + 1, (n,), generator=gen)
        dx = torch.randint(0, 2 * shift + 1, (n,), generator=gen)
        rows = (dy[:, None] + torch.arange(h)[None]).clamp(max=h + 2 * shift - 1)  # [n, h]
        cols = (dx[:, None] + torch.arange(w)[None]).clamp(max=w + 2 * shift - 1)
        x = xp[torch.arange(n)[:, None, None], :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    return x


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        correct += int((model(x[i : i + batch]).argmax(-1) == y[i : i + batch]).sum())
    return correct / len(x)


def train(
    spec: Spec, out: Path, epochs: int | None, threads: int, limit: int | None = None, minutes: float | None = None
) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    tr_x, tr_y, te_x, te_y = data_for(spec)
    if limit:
        tr_x, tr_y = tr_x[:limit], tr_y[:limit]
    mean, std = norm_stats(tr_x)
    to_t = lambda a: ((torch.from_numpy(a.astype(np.float32)) / 255.0 - mean) / std)[:, None]  # noqa: E731
    xtr, ytr = to_t(tr_x), torch.from_numpy(tr_y.astype(np.int64))
    xte, yte = to_t(te_x), torch.from_numpy(te_y.astype(np.int64))
    model = spec.build()
    epochs = epochs or spec.epochs
    steps_per_epoch = math.ceil(len(xtr) / spec.batch)
    total = epochs * steps_per_epoch
    warm = min(steps_per_epoch, max(1, total // 10))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.05)
    # The schedule reads `total`, which a time budget may shorten after the first steps.
    sched_total = [total]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (s + 1) / warm
        if s < warm
        else 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warm) / max(1, sched_total[0] - warm)))),
    )
    params = sum(p.numel() for p in model.parameters())
    log = {"name": spec.name, "params": params, "epochs_planned": epochs, "batch": spec.batch, "lr": spec.lr,
           "optimizer": "AdamW(weight_decay=0.05), linear warm-up (10% of the steps, <= 1 epoch), cosine decay to 0",
           "loss": "cross-entropy, label smoothing 0.1",
           "augmentation": f"horizontal flip: {spec.flip}, random shift ±{spec.shift} px",
           "threads": threads, "minutes_budget": minutes, "torch": torch.__version__, "train_images": len(xtr),
           "test_images": len(xte), "mean": mean, "std": std, "history": []}  # fmt: skip
    print(f"{spec.name}: {params} parameters, {len(xtr)} train / {len(xte)} test, {epochs} epochs", flush=True)
    t_start = time.time()
    step = 0
    ep = 0
    while step < sched_total[0]:
        model.train()
        t0 = time.time()
        perm = torch.randperm(len(xtr), generator=gen)
        run_loss, n_steps = 0.0, 0
        for i in range(steps_per_epoch):
            if step >= sched_total[0]:
                break
            idx = perm[i * spec.batch : (i + 1) * spec.batch]
            xb = augment(xtr[idx], gen, spec.flip, spec.shift)
            loss = F.cross_entropy(model(xb), ytr[idx], label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run_loss += float(loss.detach())
            n_steps += 1
            step += 1
            if minutes and step == 50:
                per_step = (time.time() - t_start) / step
                fit = int(minutes * 60 / per_step)
                if fit < sched_total[0]:
                    sched_total[0] = max(fit, warm + 1)
                    print(f"{spec.name}: {per_step * 1e3:.0f} ms/step; time budget {minutes} min -> "
                          f"{sched_total[0]} steps ({sched_total[0] / steps_per_epoch:.2f} epochs)", flush=True)
        ep += 1
        acc = accuracy(model, xte, yte)
        rec = {"epoch": ep, "steps": step, "loss": run_loss / max(1, n_steps), "test_accuracy": acc,
               "seconds": time.time() - t0}  # fmt: skip
        log["history"].append(rec)
        print(json.dumps(rec), flush=True)
    log["steps"] = step
    log["epochs"] = round(step / steps_per_epoch, 3)
    log["train_seconds"] = time.time() - t_start
    log["test_accuracy_torch"] = log["history"][-1]["test_accuracy"]
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / "model.pt")
    export(model, spec, out, xte, mean, std, log)
    # Calibration data for `kestrel convert --calibrate` (int8 activations): 256 training images,
    # preprocessed as the model sees them, never test images.
    np.save(out / "calib.npy", xtr[:256].numpy().astype(np.float32))
    write_test_pngs(te_x, te_y, labels_for(spec), out / "test")
    (out / "train.json").write_text(json.dumps(log, indent=2) + "\n")
    return log


def kes_meta(spec: Spec, mean: float, std: float, input_shape: list[int]) -> dict:
    """The metadata ``kestrel convert --meta`` writes into the ``.kes`` file."""
    return {
        "name": spec.name,
        "task": "image-classification",
        "labels": labels_for(spec),
        "input_shape": input_shape,
        "preprocess": {
            "layout": "chw",
            "colour": "grey",
            "resize": input_shape[-2:],
            "pixel_scale": 1.0 / 255.0,
            "mean": [mean],
            "std": [std],
        },
        "output_kind": "logits",
    }


def export(model: nn.Module, spec: Spec, out: Path, xte: torch.Tensor, mean: float, std: float, log: dict) -> None:
    import onnx
    import onnxruntime as ort

    x = xte[:8]
    path = out / "model.onnx"
    prog = torch.onnx.export(
        model, (x,), dynamo=True, opset_version=OPSET, input_names=["x"], output_names=["logits"],
        dynamic_shapes=({0: torch.export.Dim("batch")},), verbose=False,
    )  # fmt: skip
    prog.save(path, external_data=False)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        ref = model(xte).numpy()
    got = np.concatenate([sess.run(None, {"x": xte[i : i + 1000].numpy()})[0] for i in range(0, len(xte), 1000)])
    err = float(np.abs(got - ref).max())
    if err > 1e-3 * max(1.0, float(np.abs(ref).max())):
        raise RuntimeError(f"onnxruntime disagrees with PyTorch: max abs diff {err:.3e}")
    log["onnxruntime_max_abs_diff"] = err
    log["onnx_bytes"] = path.stat().st_size
    meta = kes_meta(spec, mean, std, [1, *x.shape[2:]])
    (out / "kes-meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def write_test_pngs(images: np.ndarray, labels: np.ndarray, names: list[str], dest: Path) -> None:
    """The test set as ``dest/<label>/<index>.png`` (8-bit grey)."""
    from PIL import Image

    for name in names:
        (dest / name).mkdir(parents=True, exist_ok=True)
    for i, (img, y) in enumerate(zip(images, labels)):
        Image.fromarray(img, mode="L").save(dest / names[int(y)] / f"{i:05d}.png", optimize=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help="model name (repeatable; default: all)")
    ap.add_argument("--out", type=Path, default=Path("../../target/train"))
    ap.add_argument("--epochs", type=int, help="override the model's default epoch count")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--minutes", type=float, help="time budget: shorten the schedule to fit (measured after 50 steps)")
    ap.add_argument("--limit", type=int, help="use only the first N training images (smoke tests)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    all_specs = {s.name: s for s in specs()}
    if args.list:
        for s in all_specs.values():
            print(f"{s.name:<20} {s.data:<7} {s.epochs:>3} epochs  {s.notes}")
        return 0
    for name in args.model or list(all_specs):
        if name not in all_specs:
            ap.error(f"unknown model {name!r}; one of {sorted(all_specs)}")
        log = train(all_specs[name], args.out / name, args.epochs, args.threads, args.limit, args.minutes)
        print(f"{name}: test accuracy (PyTorch) {log['test_accuracy_torch']:.4f} in {log['train_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    sys.exit(main())
