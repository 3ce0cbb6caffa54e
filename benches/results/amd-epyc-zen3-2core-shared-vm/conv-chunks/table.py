"""Best call per binary and shape from run.sh's JSON lines (stdin), as a markdown table."""
import json
import sys

best = {}
for line in sys.stdin:
    d = json.loads(line)
    r = d["r"]
    key = (tuple(r["input"]), r["out"], r["k"], r["stride"], r["pad"])
    cur = best.setdefault(key, {})
    cur[d["bin"]] = max(cur.get(d["bin"], 0.0), r["gflops"])
print("| conv | input | out | before GFLOP/s | after GFLOP/s | after / before |")
print("|---|---|---:|---:|---:|---:|")
for (inp, o, k, s, p), v in best.items():
    form = f"{k}x{k}" + (f" s{s}" if s > 1 else "")
    print(f"| {form} | {'x'.join(map(str, inp))} | {o} | {v['old']:.1f} | {v['new']:.1f} | {v['new'] / v['old']:.2f} |")
