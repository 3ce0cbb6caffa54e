#!/usr/bin/env bash
# Two kestrel binaries timed on the same models, interleaved (A, B, A, B, ...), so that a change's
# effect on a GPU (or any backend) is read from one run on one machine.
#
# Usage: benches/gpu_ab.sh A_BINARY B_BINARY OUT_DIR MODEL.kes [MODEL.kes ...]
#
# A model given as `A.kes=B.kes` runs A's file on A and B's on B: the same model converted by
# each binary's own converter (a file using ops the older binary cannot read).
#
# Environment: BATCHES "1 32", ROUNDS 2 (A/B alternations per model and batch), SAMPLES 64,
# REPS 3, BACKEND wgpu, ADAPTER (wgpu adapter name or index).
# Writes OUT_DIR/raw.txt (one line per timing: model batch binary µs/sample) and OUT_DIR/ab.md
# (per model and batch: the median of each binary's timings and B's speed-up over A).
set -uo pipefail
A=${1:?usage: benches/gpu_ab.sh A_BINARY B_BINARY OUT_DIR MODEL.kes ...}
B=${2:?}
OUT=${3:?}
shift 3
BATCHES=${BATCHES:-"1 32"}
ROUNDS=${ROUNDS:-2}
SAMPLES=${SAMPLES:-64}
REPS=${REPS:-3}
BACKEND=${BACKEND:-wgpu}
ADAPTER_ARGS=()
[[ -n ${ADAPTER:-} ]] && ADAPTER_ARGS=(--adapter "$ADAPTER")
mkdir -p "$OUT"
RAW=$OUT/raw.txt
: > "$RAW"
for pair in "$@"; do
  kes_a=${pair%%=*}
  kes_b=${pair#*=}
  name=$(basename "$kes_b" .kes)
  for b in $BATCHES; do
    n=$(( SAMPLES > b ? SAMPLES : b ))
    for ((r = 0; r < ROUNDS; r++)); do
      for which in A B; do
        bin=$A
        kes=$kes_a
        [[ $which == B ]] && bin=$B && kes=$kes_b
        us=$("$bin" bench "$kes" --backend "$BACKEND" "${ADAPTER_ARGS[@]}" --batch "$b" --samples "$n" \
          --reps "$REPS" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["us_per_sample"])' \
          2>/dev/null) || us=
        echo "$name $b $which ${us:-failed}" | tee -a "$RAW"
      done
    done
  done
done
python3 - "$RAW" "$A" "$B" > "$OUT/ab.md" <<'PY'
import statistics, sys
raw, a, b = sys.argv[1:]
t = {}
for line in open(raw):
    name, batch, which, us = line.split()
    if us != "failed":
        t.setdefault((name, int(batch)), {}).setdefault(which, []).append(float(us))
print(f"A: `{a}`  \nB: `{b}`\n")
print("| model | batch | A µs/sample | B µs/sample | B speed-up |")
print("|---|---:|---:|---:|---:|")
for (name, batch), v in t.items():
    if "A" in v and "B" in v:
        ma, mb = statistics.median(v["A"]), statistics.median(v["B"])
        print(f"| {name} | {batch} | {ma:.1f} | {mb:.1f} | {ma / mb:.2f}× |")
PY
cat "$OUT/ab.md"
