#!/usr/bin/env python3
"""Static throughput estimates of the NEON inner loops (llvm-mca), the helper of `neon_mca.sh`.

Reads the release assembly of `kestrel-rt-cpu` for aarch64 (built with `--emit asm` and line
tables), finds every innermost loop (a backward branch to a label of the same function) of the
NEON entry points, runs llvm-mca on each loop body per CPU model, and writes `results.json` and
`results.md` to the output folder.

These are static estimates of a loop running from L1 with perfect branch prediction, not timings.

Per loop and model:
* cycles/iter: llvm-mca's total cycles / iterations (steady state of the loop body).
* bottleneck: the execution unit with the highest pressure per iteration; "latency" when the
  cycles exceed that pressure by more than 15 % (a dependency chain, e.g. the FMA latency).
* % of pipe: ideal cycles / cycles. For a product loop (one with multiply-accumulates: fmla,
  fmul, sdot, smull, sadalp, ...) the ideal is llvm-mca's resource bound (Block RThroughput) of
  the useful instructions alone (the multiply-accumulates and the vector loads of operands, not
  stack reloads, widenings, conversions, shuffles or loop control): useful vector ops / pipe
  capacity. For any other loop (packing, quantising, the math functions) every instruction
  counts: the loop's resource bound / cycles.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys

ENTRY_POINTS = {
    "neon::dot_f32": r"4neon7dot_f32",
    "neon::dot_i8": r"4neon6dot_i8",
    "neon::matmul_wt": r"4neon9matmul_wt",
    "q8_neon::q8_i8_dotprod": r"7q8_neon13q8_i8_dotprod",
    "q8_neon::q8_dense_i8_dotprod": r"7q8_neon19q8_dense_i8_dotprod",
    "vmath::unary_neon": r"3arm10unary_neon",
    "vmath::pow_neon": r"3arm8pow_neon",
}

MAC = re.compile(
    r"^(fmla|fmls|fmul|fmulx|sdot|udot|usdot|sudot|smull2?|umull2?|smlal2?|umlal2?|sadalp|uadalp|"
    r"smmla|ummla|usmmla|bfdot|bfmmla|fmlal2?)$"
)
BRANCH = re.compile(r"^(b|b\.\w+|cbn?z|tbn?z)$")
VREG = re.compile(r"\b(v\d+\.|q\d+\b)")
LOADS = re.compile(r"^(ld1r?|ld[234]r?|ldr|ldur|ldp|ldnp)$")

MODELS = ["neoverse-n1", "neoverse-v1"]

# Loops that run a bounded, small number of times per call (the target does not apply): matched
# on the text of the loop's source line.
TAILS = [
    (r"w\.get\(", "column tail: < 8 columns, scalar (LLVM's vectorised body of it never runs)"),
    (r"while k < kn \{", "k remainder of the GEMM tile: < 4 steps per KC block"),
    (r"while i \+ 4 <= n", "4-lane remainder of dot_f32: < 4 steps"),
    (r"quantize_act|fn quantize_act", "quantiser tail: < 8 inputs"),
    (r"\bs \+= \*pa|\bs \+= i32::from", "scalar tail: < 4 (f32) or < 16 (i8) elements"),
]
VSTORE = re.compile(r"^(st1|st[234]|str|stur|stp|stnp)$")


def parse_asm(path):
    """Functions of interest: name -> list of (kind, text, loc) in order (kind: 'label'|'insn')."""
    files, funcs = {}, {}
    cur, loc = None, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            m = re.match(r'\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?', line)
            if m:
                files[int(m.group(1))] = m.group(3) or m.group(2)
                continue
            m = re.match(r"^([A-Za-z_$][\w.$]*):", line)
            if m and not m.group(1).startswith(".L"):
                name = m.group(1)
                cur = next((k for k, pat in ENTRY_POINTS.items() if re.search(pat, name)), None)
                if cur is not None:
                    funcs.setdefault(cur, [])
                loc = None
                continue
            if cur is None:
                continue
            if re.match(r"\s*\.cfi_endproc", line):
                cur = None
                continue
            m = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", line)
            if m:
                loc = (int(m.group(1)), int(m.group(2)))
                continue
            m = re.match(r"^(\.L[\w$]+):", line)
            if m:
                if not m.group(1).startswith(".Ltmp"):
                    funcs[cur].append(("label", m.group(1), loc))
                continue
            s = line.split("//")[0].strip()
            if not s or s.startswith("."):
                continue
            funcs[cur].append(("insn", s, loc))
    return files, funcs


def innermost_loops(body):
    """(start, end) index pairs of innermost loops: label at start, backward branch at end."""
    labels = {t: i for i, (k, t, _) in enumerate(body) if k == "label"}
    spans = {}
    for i, (k, t, _) in enumerate(body):
        if k != "insn":
            continue
        parts = t.split(None, 1)
        if not BRANCH.match(parts[0]) or len(parts) < 2:
            continue
        target = parts[1].split(",")[-1].strip()
        if target in labels and labels[target] < i:
            s = labels[target]
            spans[s] = max(spans.get(s, i), i)
    # A branch back in the layout is a loop only where its target reaches it again (LLVM also
    # places straight-line blocks after the code they branch back into).
    loops = sorted((s, e) for s, e in spans.items() if reaches(body, labels, s, e))
    return [(s, e) for s, e in loops if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in loops)]


def source_line(src_root, rel, line):
    enclosing_fn(src_root, rel, 1)
    text = _SRC.get(rel, [])
    return text[line - 1] if 0 < line <= len(text) else ""


_SRC = {}


def successors(body, labels, i):
    """Indices control reaches from instruction or label i."""
    k, t, _ = body[i]
    nxt = [i + 1] if i + 1 < len(body) else []
    if k != "insn":
        return nxt
    parts = t.split(None, 1)
    mn = parts[0]
    if mn in ("ret", "br", "brk", "udf"):
        return []
    if BRANCH.match(mn) and len(parts) > 1:
        target = labels.get(parts[1].split(",")[-1].strip())
        succ = [target] if target is not None else []
        return succ if mn == "b" else succ + nxt
    return nxt


def reaches(body, labels, s, e):
    """Whether control flows from index s to index e (through the function's branches)."""
    seen, todo = {s}, [s]
    while todo:
        i = todo.pop()
        if i == e:
            return True
        for j in successors(body, labels, i):
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return False


def enclosing_fn(src_root, rel, line, cache=_SRC):
    if rel not in cache:
        p = os.path.join(src_root, rel) if not os.path.isabs(rel) else rel
        try:
            with open(p, encoding="utf-8") as f:
                cache[rel] = f.read().split("\n")
        except OSError:
            cache[rel] = []
    text = cache[rel]
    for i in range(min(line, len(text)) - 1, -1, -1):
        m = re.search(r"\bfn\s+(\w+)|macro_rules!\s+(\w+)", text[i])
        if m:
            return m.group(1) or m.group(2) + "!"
    return "?"


def mnemonic(t):
    return t.split(None, 1)[0]


def is_vector(t):
    return bool(VREG.search(t))


def is_useful(t):
    mn = mnemonic(t)
    if MAC.match(mn) and is_vector(t):
        return True
    if LOADS.match(mn) and re.search(r"\b[qd]\d+\b|\bv\d+\.", t) and "[sp" not in t:
        return True
    return False


def run_mca(mca, insns, cpu):
    src = "\n".join(insns) + "\n"
    r = subprocess.run(
        [mca, "-mtriple=aarch64", f"-mcpu={cpu}", "-iterations=300", "--json"],
        input=src,
        capture_output=True,
        text=True,
        check=True,
    )
    d = json.loads(r.stdout)
    reg = d["CodeRegions"][0]
    names = [n.replace("\x00", "0").replace("\x01", "1").replace("\x02", "2").replace("\x03", "3") for n in d["TargetInfo"]["Resources"]]
    summ = reg["SummaryView"]
    n = len(insns)
    total = collections.defaultdict(float)
    for e in reg["ResourcePressureView"]["ResourcePressureInfo"]:
        i, res, u = e["InstructionIndex"], names[e["ResourceIndex"]], e["ResourceUsage"]
        if i < n:
            total[res] += u
    return summ["TotalCycles"] / summ["Iterations"], dict(total), summ["BlockRThroughput"]


def group(unit):
    """V1UnitV2 -> V, N1UnitL.0 -> L, V1UnitL01.1 -> L."""
    m = re.match(r"^(?:N1|V1)Unit([A-Z]+)", unit)
    return m.group(1) if m else unit


def describe(insns):
    c = collections.Counter()
    for t in insns:
        mn = mnemonic(t)
        if not is_vector(t) and not mn.startswith("ld") and not mn.startswith("st"):
            continue
        if mn in ("fmla", "sdot") and "[" in t and "]" in t.split(",")[-1]:
            mn += "(lane)"
        if mn.startswith("ld") or mn.startswith("st"):
            if "[sp" in t:
                mn += "(stack)"
        c[mn] += 1
    return ", ".join(f"{v} {k}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def decode_of(insns):
    mns = {mnemonic(t) for t in insns}
    if "fcvtl" in mns or "fcvtl2" in mns:
        return "f16"
    if mns & {"sdot", "udot"}:
        return "int8 x int8 (sdot)"
    if mns & {"smull", "smull2", "sadalp"}:
        return "int8 x int8 (smull)"
    if ("ushr" in mns or "shl" in mns) and "and" in mns and mns & {"zip1", "sshll", "sxtl"}:
        return "int4"
    if mns & {"scvtf", "sshll", "sxtl", "sshll2", "sxtl2", "tbl"} and "fmla" in mns:
        return "int8"
    if "fmla" in mns:
        return "f32"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("asm")
    ap.add_argument("--src", default=".")
    ap.add_argument("--mca", default="/usr/lib/llvm-19/bin/llvm-mca")
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    files, funcs = parse_asm(a.asm)
    rows, seen = [], {}
    for entry in ENTRY_POINTS:
        body = funcs.get(entry, [])
        for s, e in innermost_loops(body):
            seg = body[s : e + 1]
            insns = [t for k, t, _ in seg if k == "insn"]
            if not any(is_vector(t) for t in insns):
                continue
            sig = (entry, tuple(re.sub(r"\b[xwvqdsbh]\d+\b", "r", re.sub(r"\.L\w+", ".L", t)) for t in insns))
            if sig in seen:
                seen[sig]["copies"] += 1
                continue
            product = entry.split("::")[0] != "vmath" and any(MAC.match(mnemonic(t)) and is_vector(t) for t in insns)
            # Where: the source line most of the loop's vector (or multiply-accumulate) work comes from.
            # (the standard library's intrinsics' lines are skipped: the innermost of this repository's).
            ours = [(t, loc) for k, t, loc in seg if k == "insn" and loc and "library/" not in files.get(loc[0], "library/")]
            key = [loc for t, loc in ours if is_vector(t) and (not product or MAC.match(mnemonic(t)))]
            key = key or [loc for t, loc in ours if is_vector(t)] or [loc for _, loc in ours]
            site = "?"
            if key:
                (fi, ln), _ = collections.Counter(key).most_common(1)[0]
                rel = files.get(fi, "?")
                rel = rel.split("runtime/cpu/src/kernels/simd/")[-1]
                site = f"{rel}:{ln} {enclosing_fn(a.src, files.get(fi, '?'), ln)}"
            line_text = "\n".join(source_line(a.src, files.get(fi, "?"), ln) for fi, ln in sorted({loc for _, loc in ours}))
            tail = next((why for pat, why in TAILS if re.search(pat, line_text + "\n" + site)), None)
            stores = any(VSTORE.match(mnemonic(t)) and is_vector(t) and "[sp" not in t for t in insns)
            fn = site.rsplit(" ", 1)[-1]
            if tail:
                role, product = "tail", product
            elif (product and not stores) or fn in ("map", "map2", "quantize"):
                role = "inner"
            else:
                role = "setup"
            if fn == "quantize" or role == "setup":
                # Packing and quantising: their shuffles and conversions are the work.
                product = False
            row = {
                "entry": entry,
                "site": site,
                "label": seg[0][1],
                "kind": "product" if product else "other",
                "role": role,
                "note": tail or "",
                "decode": decode_of(insns) if product else "",
                "instructions": len(insns),
                "copies": 1,
                "mix": describe(insns),
                "models": {},
            }
            useful = [t for t in insns if is_useful(t)]
            for cpu in MODELS:
                cyc, total, rthroughput = run_mca(a.mca, insns, cpu)
                busiest = max(total, key=total.get)
                # The useful work's own bound: the resource bound of those instructions alone.
                ideal = run_mca(a.mca, useful, cpu)[2] if product and useful else rthroughput
                bound = "latency" if cyc > 1.15 * rthroughput else group(busiest)
                row["models"][cpu] = {
                    "cycles_per_iter": round(cyc, 2),
                    "bottleneck": bound,
                    "busiest_unit": f"{group(busiest)} {total[busiest]:.2f}",
                    "ideal_cycles": round(ideal, 2),
                    "pct_of_pipe": round(100.0 * ideal / cyc, 1) if cyc > 0 else 0.0,
                }
            seen[sig] = row
            rows.append(row)
    os.makedirs(a.out, exist_ok=True)
    doc = {
        "what": "llvm-mca static estimates of the NEON inner loops (not timings: L1-resident, perfect prediction)",
        "label": a.label,
        "models": MODELS,
        "loops": rows,
    }
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(f"# NEON inner loops, llvm-mca static estimates ({a.label})\n\n")
        f.write(
            "**Static estimates, not timings**: llvm-mca 19 steady state of each innermost loop body, "
            "data in L1, perfect branch prediction; `neoverse-n1` stands in for Cortex-A76/A78, "
            "`neoverse-v1` for Cortex-X1. % of pipe: useful vector ops (multiply-accumulates and operand "
            "loads) / the capacity of their pipes (llvm-mca's resource bound of those instructions alone) "
            "for product loops; the loop's resource bound / cycles for the others (packing, quantising, math "
            "functions). Bottleneck: the unit with the highest pressure, or `latency` where the cycles exceed "
            "the resource bound by more than 15 % (a dependency chain). Generated by `benches/neon_mca.sh`.\n\n"
        )
        f.write(
            "Roles: **inner** (a hot loop: the target applies), **tail** (a bounded remainder, a few iterations "
            "per call), **setup** (packing, epilogues, the driver's bookkeeping: once per panel or tile). "
            "`copies`: identical loops (the same code monomorphised more than once).\n\n"
        )
        f.write("| role | entry point | loop (source) | decode | copies | insns | N1 cyc/it | N1 bottleneck | N1 % | V1 cyc/it | V1 bottleneck | V1 % | mix |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        order = {"inner": 0, "tail": 1, "setup": 2}
        for r in sorted(rows, key=lambda r: order[r["role"]]):
            n1, v1 = r["models"]["neoverse-n1"], r["models"]["neoverse-v1"]
            f.write(
                f"| {r['role']} | {r['entry']} | {r['site']} | {r['decode']} | {r['copies']} | {r['instructions']} | {n1['cycles_per_iter']} | "
                f"{n1['bottleneck']} | {n1['pct_of_pipe']} | {v1['cycles_per_iter']} | {v1['bottleneck']} | "
                f"{v1['pct_of_pipe']} | {r['mix']} |\n"
            )
        inner = [r for r in rows if r["role"] == "inner"]
        low = [r for r in inner if min(m["pct_of_pipe"] for m in r["models"].values()) < 80]
        summary = f"{len(rows)} distinct loops, {len(inner)} inner; {len(low)} inner loops below 80 % of their pipe on at least one model"
        f.write(f"\n{summary}.\n")
        tails = sorted({r["note"] for r in rows if r["role"] == "tail"})
        if tails:
            f.write("\nTails:\n" + "".join(f"* {t}\n" for t in tails))
    print(summary, file=sys.stderr)


if __name__ == "__main__":
    main()
