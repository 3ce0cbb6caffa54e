"""Convert the trained models with ``kestrel convert`` and measure their test accuracy with
Kestrel (``kestrel classify --eval``), not PyTorch.

Usage (after ``python -m kestrel_torch.train``)::

    cargo build --release -p kestrel-rt-cli
    python -m kestrel_torch.evaluate --kestrel ../../target/release/kestrel --train ../../target/train \\
        --out ../../target/eval

For every trained model and weight encoding (f32, f16, int8, int8 with the first and last
layers kept at f16, int4, int8 with calibrated activations, and that with int8 attention
internals) this runs::

    kestrel convert TRAIN/NAME/model.onnx -o OUT/NAME.ENC.kes --weights ENC --meta TRAIN/NAME/kes-meta.json
    kestrel classify TRAIN/NAME/test --model OUT/NAME.ENC.kes --eval --json --quiet
    kestrel classify TRAIN/NAME/test --model OUT/NAME.ENC.kes --json --top 1 --quiet

and writes ``OUT/accuracy.json`` and ``OUT/accuracy.md`` (accuracy, top-1 agreement with f32,
file size). The test folders hold the full test sets as PNG (10,000 Fashion-MNIST test images;
the 1,000 held-out OpenCV digits).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

MODELS = ("fmnist_vit_super", "fmnist_aftconv", "digits_vit_super")
ENCODINGS = (
    ("f32", []),
    ("f16", []),
    ("int8", []),
    ("int8-keep-first-last", ["--keep-first-last"]),
    ("int4", []),
    # int8 weights with calibrated int8 activations (`--calibrate` on 256 training images written
    # by `train` as calib.npy), and the same with the fused attention's internals in int8.
    ("int8-calibrated", ["--calibrate", "{calib}"]),
    ("int8-calibrated-attention", ["--calibrate", "{calib}", "--int8-attention"]),
)


def run(cmd: list[str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kestrel", type=Path, default=Path("../../target/release/kestrel"))
    ap.add_argument("--train", type=Path, default=Path("../../target/train"))
    ap.add_argument("--out", type=Path, default=Path("../../target/eval"))
    ap.add_argument("--model", action="append", help="only these models")
    ap.add_argument("--encoding", action="append", help="only these encodings (f32 always runs first)")
    args = ap.parse_args(argv)
    k = str(args.kestrel)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.model or MODELS:
        src = args.train / name
        test = src / "test"
        preds_f32: dict[str, int] | None = None
        for enc, extra in ENCODINGS:
            if args.encoding and enc != "f32" and enc not in args.encoding:
                continue
            weights = enc.split("-")[0]
            kes = args.out / f"{name}.{enc}.kes"
            extra = [e.replace("{calib}", str(src / "calib.npy")) for e in extra]
            if "--int8-attention" in extra and "aftconv" in name:
                continue  # AFT-conv has no fused attention op
            run([k, "convert", str(src / "model.onnx"), "-o", str(kes), "--weights", weights,
                 "--meta", str(src / "kes-meta.json"), *extra])  # fmt: skip
            t0 = time.time()
            ev = json.loads(run([k, "classify", str(test), "--model", str(kes), "--eval", "--json", "--quiet"]))
            eval_s = time.time() - t0
            top1 = json.loads(run([k, "classify", str(test), "--model", str(kes), "--json", "--top", "1", "--quiet"]))
            preds = {item["path"]: item["predictions"][0]["index"] for item in top1}
            if enc == "f32":
                preds_f32 = preds
            agree = sum(preds[p] == preds_f32[p] for p in preds) / len(preds) if preds_f32 else float("nan")
            row = {
                "model": name,
                "weights": enc,
                "images": ev["images"],
                "accuracy": ev["accuracy"],
                "agreement_with_f32": agree,
                "kes_bytes": kes.stat().st_size,
                "eval_seconds": round(eval_s, 2),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    (args.out / "accuracy.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "| model | weights | test images | accuracy (Kestrel) | top-1 agreement with f32 | .kes size |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['weights']} | {r['images']:,} | {100 * r['accuracy']:.2f}% | "
            f"{100 * r['agreement_with_f32']:.2f}% | {r['kes_bytes'] / 1024:.1f} KiB |"
        )
    (args.out / "accuracy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
