#!/usr/bin/env bash
# GPU (wgpu) timings for a results directory: per-model µs/sample on the GPU beside the CPU, and
# per-op GPU profiles from timestamp queries, on the adapter KESTREL_ADAPTER (or --adapter) names.
#
# Usage (after `cargo build --release -p kestrel-cli`):
#   benches/gpu_results.sh OUT_DIR [MODEL.kes ...]
# Default models: the bundled int8 models and the converter fixtures' classifiers converted to f32.
# Environment: ADAPTER (name or index; default: the best adapter), SAMPLES (200), REPS (5),
# BATCHES ("1 32"), PRECISIONS ("f32 auto").
#
# Writes OUT_DIR/devices.txt (`kestrel devices`), OUT_DIR/models.md and models.jsonl (one `kestrel
# bench --json` object per model × backend × batch × precision), and OUT_DIR/profiles/*.json (one
# `kestrel profile --json` per model) plus Chrome traces. On a software adapter (lavapipe) the
# numbers describe the emulator, not a GPU: the script says so in models.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: benches/gpu_results.sh OUT_DIR [MODEL.kes ...]}
shift
K=target/release/kestrel
[[ -x $K ]] || { echo "build first: cargo build --release -p kestrel-cli" >&2; exit 1; }
SAMPLES=${SAMPLES:-200}
REPS=${REPS:-5}
BATCHES=${BATCHES:-"1 32"}
PRECISIONS=${PRECISIONS:-"f32 auto"}
ADAPTER_ARGS=()
[[ -n ${ADAPTER:-} ]] && ADAPTER_ARGS=(--adapter "$ADAPTER")
mkdir -p "$OUT/profiles"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

models=("$@")
if ((${#models[@]} == 0)); then
  models=(apps/kestrel-cli/models/*.int8.kes)
  for fx in converters/fixtures/mnist_vit_*; do
    [[ -f $fx/model.onnx ]] || continue
    name=$(basename "$fx")
    "$K" convert "$fx/model.onnx" -o "$TMP/$name.f32.kes" >/dev/null
    models+=("$TMP/$name.f32.kes")
  done
fi

"$K" devices > "$OUT/devices.txt"
: > "$OUT/models.jsonl"
{
  echo "# GPU timings (\`benches/gpu_results.sh\`)"
  echo
  echo "Adapter: ${ADAPTER:-best available}; see devices.txt. $REPS passes × $SAMPLES samples, median µs/sample [min–max]."
  echo "GPU times include the input upload and the output readback. CPU: one thread, best ISA."
  if grep -qi "llvmpipe\|lavapipe\|swiftshader\|(Cpu)" "$OUT/devices.txt"; then
    echo
    echo "**The adapter list includes a software renderer: numbers on it describe the emulator, not a GPU.**"
  fi
  echo
  echo "| model | batch | cpu | wgpu f32 | wgpu ${PRECISIONS##* } |"
  echo "|---|---:|---:|---:|---:|"
} > "$OUT/models.md"

fmt() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f\"{d['us_per_sample']:.1f} [{d['us_per_sample_min']:.1f}–{d['us_per_sample_max']:.1f}]\")" "$1"; }

for m in "${models[@]}"; do
  name=$(basename "$m" .kes)
  for b in $BATCHES; do
    n=$(( SAMPLES > b ? SAMPLES : b ))
    row="| $name | $b"
    cpu=$("$K" bench "$m" --samples "$n" --reps "$REPS" --batch "$b" --json)
    echo "$cpu" >> "$OUT/models.jsonl"
    row="$row | $(fmt "$cpu")"
    for p in $PRECISIONS; do
      if g=$("$K" bench "$m" --samples "$n" --reps "$REPS" --batch "$b" --backend wgpu --gpu-precision "$p" "${ADAPTER_ARGS[@]}" --json); then
        echo "$g" >> "$OUT/models.jsonl"
        row="$row | $(fmt "$g")"
      else
        row="$row | failed"
      fi
    done
    echo "$row |" >> "$OUT/models.md"
  done
  "$K" profile "$m" --backend wgpu "${ADAPTER_ARGS[@]}" --runs 50 --warmup 5 --json \
    --trace "$OUT/profiles/$name.trace.json" > "$OUT/profiles/$name.json"
done
echo "wrote $OUT/models.md, $OUT/models.jsonl, $OUT/profiles/ ($(wc -l < "$OUT/models.jsonl") timings)"
