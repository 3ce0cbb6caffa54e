"""Export the sample images bundled with the ``kestrel`` CLI, and the PyTorch-side preprocessing
reference the Rust tests compare against.

Usage (after ``python -m kestrel_torch.train``, which writes the ``kes-meta.json`` files)::

    python -m kestrel_torch.samples --train ../../target/train --out ../../apps/kestrel-cli/samples

Writes:

* ``fmnist/<label>/<test index>.png``: the first ``--per-class`` Fashion-MNIST *test* images of
  every class, 28×28 8-bit grey, as in the data set (© Zalando SE, MIT);
* ``digits/<digit>/<index>.png``: the first held-out test digits of every class from OpenCV's
  ``digits.png`` (20×20 grey, Apache-2.0);
* ``preprocess/``: the same kind of images in other sizes, colour models and formats (RGB,
  RGBA, 16-bit grey, palette GIF, BMP, JPEG, non-square, smaller than the input), derived from
  Fashion-MNIST test images;
* ``preprocess/reference.npy`` ``[N, 1, 28, 28]`` float32 and ``preprocess/reference.json`` (file
  order): the model input for each lossless file of ``preprocess/`` as
  :func:`kestrel_torch.train.preprocess_reference` computes it from the Fashion-MNIST model's
  metadata; ``reference_jpeg.npy`` likewise for the JPEG file (decoders may differ by a level).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from .train import FMNIST_LABELS, load_digits, load_fmnist, preprocess_reference


def folder_name(label: str) -> str:
    return label.lower().replace(" ", "-").replace("/", "-")


def decode(path: Path) -> np.ndarray:
    """Float pixels 0..255, ``[H, W]`` grey or ``[H, W, 3]`` RGB, alpha dropped (as the CLI)."""
    from PIL import Image

    im = Image.open(path)
    if im.mode in ("I;16", "I;16B", "I"):
        a = np.asarray(im, dtype=np.float64)
        return (a / 65535.0 * 255.0).astype(np.float32)
    if im.mode in ("L", "LA"):
        return np.asarray(im.convert("L"), dtype=np.float32)
    return np.asarray(im.convert("RGB"), dtype=np.float32)


def main(argv: list[str] | None = None) -> int:
    from PIL import Image

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", type=Path, default=Path("../../target/train"))
    ap.add_argument("--out", type=Path, default=Path("../../apps/kestrel-cli/samples"))
    ap.add_argument("--per-class", type=int, default=2)
    args = ap.parse_args(argv)
    out: Path = args.out

    _, _, te_x, te_y = load_fmnist()
    for c, label in enumerate(FMNIST_LABELS):
        idx = np.flatnonzero(te_y == c)[: args.per_class]
        d = out / "fmnist" / folder_name(label)
        d.mkdir(parents=True, exist_ok=True)
        for i in idx:
            Image.fromarray(te_x[i], mode="L").save(d / f"{i:05d}.png")

    _, _, dg_x, dg_y = load_digits()
    for c in range(10):
        idx = np.flatnonzero(dg_y == c)[: args.per_class]
        d = out / "digits" / str(c)
        d.mkdir(parents=True, exist_ok=True)
        for i in idx:
            Image.fromarray(dg_x[i], mode="L").save(d / f"{i:04d}.png")

    # Variants for the preprocessing test, from the first test image of some classes.
    pre = out / "preprocess"
    pre.mkdir(parents=True, exist_ok=True)
    first = {label: te_x[np.flatnonzero(te_y == c)[0]] for c, label in enumerate(FMNIST_LABELS)}
    tint = np.array([1.0, 0.8, 0.55])
    coat = np.kron(first["Coat"], np.ones((2, 2), dtype=np.uint8))  # 56x56
    Image.fromarray((coat[..., None] * tint).astype(np.uint8), mode="RGB").save(pre / "coat-rgb-56x56.png")
    bag = np.asarray(Image.fromarray(first["Bag"]).resize((40, 30), Image.NEAREST))
    rgba = np.stack([bag, (bag * 0.9).astype(np.uint8), bag, np.full_like(bag, 255)], -1)
    Image.fromarray(rgba, mode="RGBA").save(pre / "bag-rgba-40x30.png")
    sneaker16 = first["Sneaker"].astype(np.uint16) * 257 + 3
    Image.fromarray(sneaker16).save(pre / "sneaker-grey16.png")  # mode I;16
    trouser = first["Trouser"][::2, ::2]  # 14x14: upsampled by the preprocessing
    Image.fromarray(np.ascontiguousarray(trouser), mode="L").save(pre / "trouser-14x14.png")
    Image.fromarray(first["Dress"], mode="L").convert("P").save(pre / "dress-palette.gif")
    Image.fromarray(np.repeat(first["Shirt"][..., None], 3, -1), mode="RGB").save(pre / "shirt-rgb.bmp")
    Image.fromarray(np.repeat(first["Sandal"][..., None], 3, -1), mode="RGB").resize((64, 64), Image.BILINEAR).save(
        pre / "sandal-64x64.jpg", quality=92
    )

    meta = json.loads((args.train / "fmnist_vit_super" / "kes-meta.json").read_text())
    lossless = sorted(p for p in pre.iterdir() if p.suffix in (".png", ".gif", ".bmp"))
    ref = np.stack([preprocess_reference(decode(p), meta) for p in lossless]).astype(np.float32)
    np.save(pre / "reference.npy", ref)
    jpeg = sorted(p for p in pre.iterdir() if p.suffix == ".jpg")
    np.save(pre / "reference_jpeg.npy", np.stack([preprocess_reference(decode(p), meta) for p in jpeg]).astype(np.float32))
    (pre / "reference.json").write_text(
        json.dumps(
            {
                "files": [p.name for p in lossless],
                "jpeg_files": [p.name for p in jpeg],
                "preprocess": meta["preprocess"],
                "input_shape": meta["input_shape"],
                "how": "kestrel_torch.train.preprocess_reference (F.interpolate bilinear, antialias=True)",
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote samples under {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
