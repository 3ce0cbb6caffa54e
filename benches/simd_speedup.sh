#!/usr/bin/env bash
# SIMD vs scalar kernels per weight encoding, through `kestrel bench --isa`.
# Usage: benches/simd_speedup.sh [FIXTURE_DIR] [OUT.md]   (after `cargo build --release -p kestrel-rt-cli`)
set -euo pipefail
cd "$(dirname "$0")/.."
FX=${1:-converters/fixtures/mnist_vit_standard_h1}
OUT=${2:-/dev/stdout}
K=target/release/kestrel
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SAMPLES=${SAMPLES:-100}
REPS=${REPS:-5}
BATCH=${BATCH:-1}
{
  echo "SIMD vs scalar on \`$FX\` (batch $BATCH, $REPS passes × $SAMPLES samples, median µs/sample [min–max])"
  echo
  echo "| weights | activations | scalar | avx2 | avx2-vnni | avx512 | speedup (best SIMD / scalar) |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  for w in f32 f16 int8 int4 int8-cal int4-cal; do
    case $w in
      *-cal) base=${w%-cal}; extra=(--calibrate "$FX/input.npy"); act="int8 (calibrated)" ;;
      *) base=$w; extra=(); act=f32 ;;
    esac
    "$K" convert "$FX/model.onnx" -o "$TMP/$w.kes" --weights "$base" "${extra[@]}" >/dev/null
    row="| $base | $act"
    declare -A med=()
    for isa in scalar avx2 avx2-vnni avx512; do
      if j=$("$K" bench "$TMP/$w.kes" --input "$FX/input.npy" --samples "$SAMPLES" --reps "$REPS" --batch "$BATCH" --isa "$isa" --json 2>/dev/null); then
        m=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(f\"{d['us_per_sample']:.1f} [{d['us_per_sample_min']:.1f}–{d['us_per_sample_max']:.1f}]\")" "$j")
        med[$isa]=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['us_per_sample'])" "$j")
        row="$row | $m"
      else
        row="$row | n/a"
      fi
    done
    best=$(python3 -c "import sys; v=[float(x) for x in sys.argv[2:] if x]; print(f'{float(sys.argv[1])/min(v):.2f}×' if v else 'n/a')" "${med[scalar]}" "${med[avx2]:-}" "${med[avx2-vnni]:-}" "${med[avx512]:-}")
    echo "$row | $best |"
  done
} > "$OUT"
