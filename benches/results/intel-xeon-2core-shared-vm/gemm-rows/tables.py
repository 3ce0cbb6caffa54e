"""Tables from the interleaved A/B run (raw.jsonl: one JSON object per line, `bin` before/after,
from runtime/cpu/examples/gemm_ab.rs driven by ab.sh): gemm_rows.md and gemm_rows.json.

    python3 tables.py raw.jsonl > gemm_rows.md   (writes gemm_rows.json beside raw.jsonl)
"""
import collections
import json
import statistics
import sys

raw = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
marks = {r["kind"]: r for r in raw if r["kind"] in ("start", "mid", "end")}
rows = collections.defaultdict(list)
gemv = collections.defaultdict(list)
bw = collections.defaultdict(list)
for r in raw:
    if r["kind"] == "rows":
        rows[(r["kn"], r["enc"], r["m"], r["bin"])].append(r["gflops"])
    elif r["kind"] == "gemv":
        gemv[(r["n"], r["k"], r["enc"], r["m"], r["bin"])].append((r["us"], r["gbs"], r["bytes"]))
    elif r["kind"] == "bandwidth":
        bw[r["bin"]].append(r.get("read_gbs", r["gbs"]))
BINS = ("before", "after3")
SWEEP_M = [1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 37, 63, 64, 65, 100, 127, 128, 129, 197, 255, 256, 257, 300]
ENCS = [("f32", "f32"), ("i8", "i8"), ("i4", "i4"), ("i8q8", "i8 x q8"), ("i4q8", "i4 x q8")]
med = statistics.median


def g(kn, enc, m, b):
    return med(rows[(kn, enc, m, b)])


out = {"rows_sweep": [], "gemv": []}
print("# GFLOP/s against the row count M, and the batch-1 to 3 GEMVs (before / after)\n")
print(
    "Intel Xeon (`Intel(R) Xeon(R) Processor`, AVX-512 + VNNI + AMX, 2 MiB L2 per core, 480 MiB L3 as the VM reports it), "
    "**a shared 2-core VM** with other sessions' builds running beside (load average "
    f"{marks['start']['load']} at the start, {marks['mid']['load']} between the halves, {marks['end']['load']} at the end): "
    "absolute numbers are noisy; ratios within one run are what count. One thread, AVX-512 kernels. "
    "Before: the kernels at 3c43430 (d3fd67d's parent); after: d3fd67d (the few-row stream, the vpermps int4 decode; "
    "ae7376c's int4 x q8 change is measured apart, below). Both builds from the same working tree otherwise. "
    "The two binaries (`runtime/cpu/examples/gemm_ab.rs` built at each) alternate per (width, encoding) and per GEMV "
    "point, two passes each; each cell is the median of the two passes' medians.\n"
)
print(
    "y [M, N] = x [M, K] · Wᵀ through `kestrel_rt_cpu::linear` (f32 activations) or `kernels::linear::linear_q8` "
    "(x q8: calibrated int8 activations at scale 1/127), random data, median call over ≥ 15 ms per point. Each cell: "
    "GFLOP/s before → after, and in brackets the ratio to the rate at the next multiple of 8 rows (the AVX-512 GEMM "
    "tile) in the same binary and pass, before → after. Rows at or above 0.90 meet issue 37's item 1.\n"
)
for kn in (192, 384, 768):
    print(f"\n## K = N = {kn}\n")
    print("| M | " + " | ".join(n for _, n in ENCS) + " |")
    print("|---:|" + "---:|" * len(ENCS))
    for m in SWEEP_M:
        nt = -(-m // 8) * 8
        cells = []
        for e, name in ENCS:
            gb, ga = g(kn, e, m, "before"), g(kn, e, m, "after3")
            rb, ra = gb / g(kn, e, nt, "before"), ga / g(kn, e, nt, "after3")
            cells.append(f"{gb:.0f} → {ga:.0f} ({rb:.2f} → {ra:.2f})")
            out["rows_sweep"].append(
                {"kn": kn, "m": m, "dtype": name, "next_tile_m": nt, "gflops_before": round(gb, 1),
                 "gflops_after": round(ga, 1), "ratio_before": round(rb, 3), "ratio_after": round(ra, 3)}
            )
        print(f"| {m} | " + " | ".join(cells) + " |")

B = max(max(v) for v in bw.values())
print(
    f"\n## Batch-1 to 3 GEMV, weights evicted (µs per call, GB/s of weight bytes incl. scales, % of the read bandwidth)\n\n"
    f"Each call's weight and scale bytes are evicted from every cache level first (`clflush` per line, then `mfence`: "
    f"the VM's 480 MiB L3 would hold them through the 64 MiB stream `kestrel bench gemm` uses); median call over "
    f"≥ 100 ms. Read bandwidth: one thread reading a flushed 256 MiB buffer, 64-byte lines into eight AVX-512 sums "
    f"with an 8 KiB software prefetch (as the GEMV stream does), best of 5 per pass, best over passes and binaries: "
    f"**{B:.1f} GB/s** (per binary: "
    + ", ".join(f"{b} {max(v):.1f}" for b, v in bw.items())
    + "). The SIMD dot kernel `kestrel bench gemm` reads with reaches less here (see gemm_rows.json).\n"
)
print("| N × K | weights | M | before µs | after µs | before GB/s (%) | after GB/s (%) |")
print("|---|---|---:|---:|---:|---:|---:|")
for n, k in ((2048, 4096), (1024, 2048), (2048, 20736)):
    for e, name in (("f32", "f32"), ("f16", "f16"), ("i8", "i8"), ("i4", "i4"), ("i8q8", "i8 x q8"), ("i4q8", "i4 x q8")):
        for m in (1, 2, 3):
            c = []
            for b in BINS:
                v = gemv.get((n, k, e, m, b))
                if not v:
                    c.append(None)
                    continue
                c.append((med(x[0] for x in v), med(x[1] for x in v), v[0][2]))
            if None in c:
                continue
            (ub, gb, by), (ua, ga, _) = c
            print(f"| {n} × {k} | {name} | {m} | {ub:.0f} | {ua:.0f} | {gb:.1f} ({100*gb/B:.0f}%) | {ga:.1f} ({100*ga/B:.0f}%) |")
            out["gemv"].append({"n": n, "k": k, "dtype": name, "m": m, "weight_bytes": by, "us_before": round(ub, 1),
                                "us_after": round(ua, 1), "gbs_before": round(gb, 2), "gbs_after": round(ga, 2),
                                "fraction_before": round(gb / B, 3), "fraction_after": round(ga / B, 3)})
out["read_bandwidth_gbs"] = B
out["bandwidth_runs"] = [r for r in raw if r["kind"] == "bandwidth"]
out["machine"] = "Intel Xeon (AVX-512, VNNI, AMX), shared 2-core VM, other builds running beside"
out["marks"] = marks
json.dump(out, open(sys.argv[1].rsplit("/", 1)[0] + "/gemm_rows.json" if "/" in sys.argv[1] else "gemm_rows.json", "w"), indent=1)
