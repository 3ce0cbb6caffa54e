#!/usr/bin/env python3
"""docs/onnx-conformance-random.md from the conformance results of the original cases and of
their random-data copies (randomize.py).

    python converters/conformance/generate.py /tmp/onnx-cases
    python converters/conformance/randomize.py /tmp/onnx-cases /tmp/onnx-rand --seeds 2
    cargo run --release -p kestrel-rt-onnx --example conformance -- /tmp/onnx-cases --out /tmp/conf-orig --doc /tmp/conf-orig/doc.md
    cargo run --release -p kestrel-rt-onnx --example conformance -- /tmp/onnx-rand --out /tmp/conf-rand --doc /tmp/conf-rand/doc.md
    python converters/conformance/random_report.py /tmp/conf-orig/results.json /tmp/conf-rand/results.json \\
        /tmp/onnx-rand/randomize.json [--out docs/onnx-conformance-random.md]

(`--doc` keeps the example from rewriting docs/onnx-conformance.md.) A failure on random data
of a case that passes on the standard's data is listed by op with the diagnosis in DIAGNOSES
(written by whoever looked at it); an op without one is marked `not diagnosed`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

# op -> diagnosis of its failures on random data (cases passing on the standard's data).
DIAGNOSES = {
    "Celu": (
        "tract's Celu expansion (tract-hir 0.23.9 `src/ops/activations.rs:90-102`, which Kestrel lowers) "
        "computes `max(0,x) + min(0, exp(x/alpha) - 1)`, dropping the `alpha *` factor: negative inputs come out "
        "scaled by 1/alpha (found -0.337, expected -0.674 with alpha 2). The standard's data is all "
        "positive. tract fails the same cases with the same numbers. Since this run, 08dfa77 parses "
        "Celu with the converter's own expansion (converters/onnx/src/expand/activations.rs); not re-run "
        "here."
    ),
    "LogSoftmax": (
        "tract expands LogSoftmax as `ln(softmax(x))` (tract-hir 0.23.9 `src/ops/nn/layer_max.rs:100-109`, "
        "LayerLogSoftmax::wire), which Kestrel lowered as a Softmax and a Log: an element more than "
        "~104 below its row's maximum has a softmax of 0 in f32 and a log-softmax of -inf (expected "
        "-10564.87; -118.84 in `test_logsoftmax_axis_1`, a row only ±100 wide); the finite elements "
        "were right (max abs error 8e-5). tract fails the same cases, and one more "
        "(`test_logsoftmax_default_axis__rand1`: -87.20 for -87.89, its softmax losing subnormals). Fixed: converters/onnx/src/lower/shape.rs lowers a "
        "Softmax whose only consumer is Ln as `(x - max) - ln sum exp(x - max)` "
        "(tests/log_softmax.rs)."
    ),
}
FIXED = {"LogSoftmax"}

RAND = re.compile(r"__rand\d+$")


def passed(o) -> bool:
    return bool(o) and o.get("status") == "pass"


def fmt(x) -> str:
    return "—" if x is None else f"{x:.3g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("original", type=Path, help="results.json of the conformance run on the original cases")
    ap.add_argument("random", type=Path, help="results.json of the conformance run on the random cases")
    ap.add_argument("summary", type=Path, help="randomize.json (randomize.py's summary)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "docs/onnx-conformance-random.md")
    args = ap.parse_args()

    orig = {r["name"]: r for r in json.loads(args.original.read_text())}
    rand = json.loads(args.random.read_text())
    summary = json.loads(args.summary.read_text())
    records = summary["cases"]

    def src(r):
        return orig.get(RAND.sub("", r["name"]))

    rows = [r for r in rand if r.get("out_of_scope") is None and src(r) is not None]
    std = [r for r in rows if not r.get("variant")]
    var = [r for r in rows if r.get("variant")]

    def totals(rs):
        return {
            "cases": len(rs),
            "sources": len({RAND.sub("", r["name"]) for r in rs}),
            "k_orig": sum(passed(src(r).get("kestrel")) for r in rs),
            "k_rand": sum(passed(r.get("kestrel")) for r in rs),
            "t_orig": sum(passed(src(r).get("tract")) for r in rs),
            "t_rand": sum(passed(r.get("tract")) for r in rs),
            "k_lost": sum(passed(src(r).get("kestrel")) and not passed(r.get("kestrel")) for r in rs),
            "t_lost": sum(passed(src(r).get("tract")) and not passed(r.get("tract")) for r in rs),
        }

    ts, tv = totals(std), totals(var)
    skipped_std = Counter()
    for r in records:
        if "skipped" in r and "__constants" not in r["case"]:
            skipped_std[r["skipped"].split(":")[0]] += 1
    refs = Counter(r["reference"] for r in records if "reference" in r and "__constants" not in r["case"])

    lost = defaultdict(list)
    tract_lost = defaultdict(list)
    for r in rows:
        o = src(r)
        if passed(o.get("kestrel")) and not passed(r.get("kestrel")):
            lost[r["op"]].append(r)
        if passed(o.get("tract")) and not passed(r.get("tract")) and passed(r.get("kestrel")):
            tract_lost[r["op"]].append(r)

    by_op = defaultdict(list)
    for r in std:
        by_op[r["op"]].append(r)

    L = []
    w = L.append
    w("# ONNX conformance on random data")
    w("")
    w(
        "Generated by `converters/conformance/random_report.py` — do not edit. The standard's backend node "
        "test cases (docs/onnx-conformance.md) use fixed, often benign data: `test_celu` feeds only positive "
        "numbers, so a Celu that drops `alpha` on negative inputs passes it. Here every in-scope case is run "
        f"again on {summary['seeds']} fresh random data sets (`<case>__rand<k>`): floating-point inputs redrawn "
        "(both signs where the op takes any sign, a tail of large magnitudes for element-wise activations, the "
        "original range where the op's domain needs it, ties kept where the case is about them; integer and "
        "bool inputs kept), expected outputs computed by ONNX Runtime "
        f"{summary['onnxruntime_version']} (CPU, graph optimizations disabled) or, where ORT does not "
        "reproduce the case's own expected outputs, by onnx's ReferenceEvaluator "
        f"(onnx {summary['onnx_version']}). The rules are in the header of "
        "`converters/conformance/randomize.py`. Same tolerances as the original cases."
    )
    w("")
    w(
        "A sample of 23 of these cases (`converters/onnx/tests/data/conformance-random/`) runs in CI, held "
        "against its `expected.txt` by `converters/onnx/tests/conformance.rs`."
    )
    w("")
    w("Regenerate (see `random_report.py`'s header for the full commands):")
    w("")
    w("```sh")
    w("python converters/conformance/randomize.py /tmp/onnx-cases /tmp/onnx-rand --seeds 2")
    w("cargo run --release -p kestrel-rt-onnx --example conformance -- /tmp/onnx-rand --out /tmp/conf-rand --doc /tmp/conf-rand/doc.md")
    w("python converters/conformance/random_report.py /tmp/conf-orig/results.json /tmp/conf-rand/results.json /tmp/onnx-rand/randomize.json")
    w("```")
    w("")
    w("## Totals")
    w("")
    w("Each random case is counted against the result of the original case it was drawn from.")
    w("")
    w("| | standard cases | constant-parameter variants |")
    w("|---|---:|---:|")
    w(f"| random cases run | {ts['cases']} | {tv['cases']} |")
    w(f"| … drawn from original cases | {ts['sources']} | {tv['sources']} |")
    w(f"| Kestrel passed, original data | {ts['k_orig']} | {tv['k_orig']} |")
    w(f"| Kestrel passed, random data | {ts['k_rand']} | {tv['k_rand']} |")
    w(f"| Kestrel passes the original, fails random | {ts['k_lost']} | {tv['k_lost']} |")
    w(f"| tract passed, original data | {ts['t_orig']} | {tv['t_orig']} |")
    w(f"| tract passed, random data | {ts['t_rand']} | {tv['t_rand']} |")
    w(f"| tract passes the original, fails random | {ts['t_lost']} | {tv['t_lost']} |")
    w("")
    w("Expected outputs by (random standard cases): " + ", ".join(f"{k} {v}" for k, v in refs.most_common()) + ".")
    w("")
    w("Standard cases not randomized (one line per case, or per case and seed):")
    w("")
    w("| reason | cases |")
    w("|---|---:|")
    for why, n in skipped_std.most_common():
        w(f"| {why} | {n} |")
    w("")
    w("## Kestrel: passes the standard's data, fails random data")
    w("")
    w("Max abs and rel errors are over the pairs where both values are finite; a NaN or ±inf where a "
      "number is expected fails the case without entering them.")
    w("")
    if not lost:
        w("None.")
    for op in sorted(lost):
        rs = lost[op]
        status = "fixed since this run" if op in FIXED else "open"
        w(f"### {op} ({len(rs)} cases, {status})")
        w("")
        w(DIAGNOSES.get(op, "Not diagnosed."))
        w("")
        w("| case | Kestrel max abs | Kestrel max rel | tract | tract max abs | first difference |")
        w("|---|---:|---:|---|---:|---|")
        for r in sorted(rs, key=lambda r: r["name"]):
            k, t = r["kestrel"], r.get("tract") or {}
            msg = (k.get("message") or "").replace("|", "\\|")
            msg = msg.split("(first at ", 1)[-1].rstrip(")") if "first at" in msg else msg[:120]
            w(
                f"| `{r['name']}` | {fmt(k.get('max_abs'))} | {fmt(k.get('max_rel'))} | "
                f"{'pass' if passed(t) else 'fail'} | {fmt(t.get('max_abs'))} | {msg} |"
            )
        w("")
    gone = sorted(op for op in FIXED if op not in lost)
    if gone:
        w("## Found by this run and fixed")
        w("")
        for op in gone:
            n = sum(1 for r in rows if r["op"] == op)
            ok = sum(1 for r in rows if r["op"] == op and passed(r.get("kestrel")))
            w(f"### {op} (Kestrel now passes {ok} of its {n} random cases)")
            w("")
            w(DIAGNOSES[op])
            w("")
    if tract_lost:
        w("## tract only: passes the standard's data, fails random data (Kestrel passes)")
        w("")
        w("| case | tract max abs | first difference |")
        w("|---|---:|---|")
        for op in sorted(tract_lost):
            for r in tract_lost[op]:
                t = r["tract"]
                msg = (t.get("message") or "").replace("|", "\\|")
                msg = msg.split("(first at ", 1)[-1].rstrip(")") if "first at" in msg else msg[:120]
                w(f"| `{r['name']}` | {fmt(t.get('max_abs'))} | {msg} |")
        w("")
    w("## Per op (standard cases)")
    w("")
    w("Random cases per op; Kestrel and tract passes on the original data (counted per random case) and on the random data.")
    w("")
    w("| op | random cases | Kestrel original | Kestrel random | tract original | tract random |")
    w("|---|---:|---:|---:|---:|---:|")
    for op in sorted(by_op):
        t = totals(by_op[op])
        w(f"| {op} | {t['cases']} | {t['k_orig']} | {t['k_rand']} | {t['t_orig']} | {t['t_rand']} |")
    w("")
    args.out.write_text("\n".join(L))
    print(f"wrote {args.out}: Kestrel {ts['k_orig']} -> {ts['k_rand']} of {ts['cases']} standard random cases, "
          f"{ts['k_lost']} lost; tract {ts['t_orig']} -> {ts['t_rand']}, {ts['t_lost']} lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
