#!/usr/bin/env bash
# The paper's Table 5 models on the GPU beside the CPU, plus PyTorch eager on the same GPU, in one
# command: Markdown, JSON and a PNG under one OUT_DIR (tar it and ship it).
#
# Usage (after `cargo build --release -p kestrel-rt-cli`):
#   benches/gpu_results.sh OUT_DIR [MODEL_DIR ...]
#
# Models: the paper's rows exported by benches/paper/export_paper_models.py into PAPER_MODELS
# (default target/paper-models; exported there first when torch is installed and rows are
# missing). Without torch and without exported rows: the bundled, shrunk fixtures in
# converters/fixtures, with a notice. MODEL_DIR arguments (fixture layout: model.onnx) replace
# the set. Each is converted to .kes with f32 and with int8 weights (cached in KES_CACHE).
#
# Timed per model and batch (kestrel bench --json, median µs/sample over REPS passes of SAMPLES
# samples): CPU one thread and THREADS threads, f32 and int8 weights; GPU (wgpu) f32 weights at
# f32 and f16 precision, int8 weights at f32. PyTorch eager (benches/paper/torch_eager.py) on
# CUDA when torch sees a GPU. Per-op GPU roofline profiles (kestrel profile --backend wgpu).
#
# Environment:
#   ROWS        h1 (default: standard, optimised, efficient, super with 1 head, per task) | all
#   TASKS       "mnist imdb amazon cifar100" (the order they are timed in: CIFAR-100 is slowest)
#   BATCHES     "1 32"          SAMPLES 64 (per pass, at least the batch)   REPS 3
#   THREADS     all-threads CPU column (default: nproc)
#   ADAPTER     wgpu adapter name or index (default: the best one)
#   TORCH       auto (default) | 0 (skip PyTorch) | cpu (PyTorch eager on the CPU, a check only)
#   PROFILE_BATCHES "1 32" ("" skips the profiles)   PROFILE_RUNS 20
#   BUDGET_S    330: the run's time target. Kestrel's timings start no new model after
#               BUDGET_S - TORCH_RESERVE_S (60, when PyTorch runs) - PROFILE_RESERVE_S (30, when
#               profiles run); PyTorch starts no new model after BUDGET_S - PROFILE_RESERVE_S; the
#               profiles none after BUDGET_S. What was skipped is listed in the notices; the
#               report is always written. A first run also exports the models (one-time).
#   PAPER_MODELS target/paper-models   KES_CACHE target/gpu-results-kes
#   JOBS 4 (conversions at a time)     EXPORT_JOBS nproc/2 (export processes at a time)
#   KESTREL     the binary (default target/release/kestrel)
#
# Writes OUT_DIR/: table.md, results.json, chart.png (needs matplotlib), kestrel.tsv (raw bench
# JSON per configuration), torch_eager.json, profiles/NAME.bB.{json,trace.json}, devices.txt,
# notices.txt, logs/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: benches/gpu_results.sh OUT_DIR [MODEL_DIR ...]}
shift
START=$SECONDS
K=${KESTREL:-target/release/kestrel}
[[ -x $K ]] || { echo "build first: cargo build --release -p kestrel-rt-cli" >&2; exit 1; }
ROWS=${ROWS:-h1}
TASKS=${TASKS:-"mnist imdb amazon cifar100"}
BATCHES=${BATCHES:-"1 32"}
SAMPLES=${SAMPLES:-64}
REPS=${REPS:-3}
THREADS=${THREADS:-$(nproc)}
TORCH=${TORCH:-auto}
PROFILE_BATCHES=${PROFILE_BATCHES-"1 32"}
PROFILE_RUNS=${PROFILE_RUNS:-20}
BUDGET_S=${BUDGET_S:-330}
TORCH_RESERVE_S=${TORCH_RESERVE_S:-60}
PROFILE_RESERVE_S=${PROFILE_RESERVE_S:-30}
PM=${PAPER_MODELS:-target/paper-models}
CACHE=${KES_CACHE:-target/gpu-results-kes}
JOBS=${JOBS:-4}
EXPORT_JOBS=${EXPORT_JOBS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
ADAPTER_ARGS=()
[[ -n ${ADAPTER:-} ]] && ADAPTER_ARGS=(--adapter "$ADAPTER")
mkdir -p "$OUT/profiles" "$OUT/logs" "$CACHE"
: > "$OUT/notices.txt"
: > "$OUT/kestrel.tsv"
notice() { echo "notice: $*" >&2; echo "$*" >> "$OUT/notices.txt"; }
over_budget() { (( SECONDS - START >= ${1:-$BUDGET_S} )); }
log() { echo "[gpu_results $((SECONDS - START))s] $*" >&2; }

# --- The devices: a GPU for wgpu? torch with CUDA? ---------------------------------------------
"$K" devices > "$OUT/devices.txt" 2> "$OUT/logs/devices.stderr" || true
GPU=1
if ! grep -q '^\[0\]' "$OUT/devices.txt"; then
  GPU=0
  notice "no GPU adapter: wgpu finds none on this machine, so the GPU columns and profiles are empty (CPU and PyTorch only)"
elif ! grep -E '^\s+type\s' "$OUT/devices.txt" | grep -qv 'Cpu'; then
  notice "the only GPU adapters are software renderers (lavapipe/llvmpipe): the GPU numbers describe an emulator on the CPU, not a GPU"
fi
PY=${PYTHON:-python3}
command -v "$PY" > /dev/null || { echo "python3 is needed for the report" >&2; exit 1; }
HAVE_TORCH=0
if [[ $TORCH != 0 ]] && "$PY" -c "import torch" 2> /dev/null; then
  HAVE_TORCH=1
fi
TORCH_DEVICE=""
if ((HAVE_TORCH)); then
  if [[ $TORCH == cpu ]]; then
    TORCH_DEVICE=cpu
  elif "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; then
    TORCH_DEVICE=cuda
  else
    notice "torch is installed but sees no CUDA GPU: no PyTorch eager column (TORCH=cpu times it on the CPU)"
  fi
elif [[ $TORCH == 0 ]]; then
  notice "TORCH=0: no PyTorch eager column"
else
  notice "torch is not installed: no PyTorch eager column, and no export of missing paper models"
fi

# --- The models -------------------------------------------------------------------------------
SOURCE="paper"
wanted=()
if (($# > 0)); then
  SOURCE="given"
  dirs=("$@")
else
  if [[ $ROWS == h1 ]]; then
    for t in $TASKS; do
      for m in standard optimised efficient super; do wanted+=("${t}_${m}_h1"); done
    done
  fi
  missing=()
  for w in "${wanted[@]}"; do [[ -f $PM/$w/model.onnx ]] || missing+=("$w"); done
  if ((HAVE_TORCH)) && { ((${#missing[@]} > 0)) || [[ $ROWS == all ]]; }; then
    # One process per model (per task for ROWS=all), EXPORT_JOBS at a time, 2 threads each.
    log "exporting ${#missing[@]} paper models into $PM ($EXPORT_JOBS processes at a time)"
    export_one() {  # TASK [NAME]
      local only=() tag=$1
      [[ -n ${2:-} ]] && only=(--only "$2") && tag=$2
      OMP_NUM_THREADS=2 PYTHONPATH=converters/python "$PY" benches/paper/export_paper_models.py \
        --out "$PM" --task "$1" --skip-existing "${only[@]}" > "$OUT/logs/export-$tag.log" 2>&1
    }
    if [[ $ROWS == all ]]; then
      for t in $TASKS; do export_one "$t" & done
    else
      for w in "${missing[@]}"; do
        while (($(jobs -rp | wc -l) >= EXPORT_JOBS)); do wait -n; done
        export_one "${w%%_*}" "$w" &
      done
    fi
    wait
    log "export done"
  fi
  dirs=()
  if [[ $ROWS == all ]]; then
    for t in $TASKS; do
      for d in "$PM/${t}"_*_h*; do [[ -f $d/model.onnx ]] && dirs+=("$d"); done
    done
  else
    absent=()
    for w in "${wanted[@]}"; do
      if [[ -f $PM/$w/model.onnx ]]; then dirs+=("$PM/$w"); else absent+=("$w"); fi
    done
    ((${#dirs[@]} > 0 && ${#absent[@]} > 0)) && notice "not exported under $PM, so not timed: ${absent[*]}"
  fi
  if ((${#dirs[@]} == 0)); then
    SOURCE="fixtures"
    notice "no exported paper models: using the bundled converters/fixtures models instead, which are SHRUNK (smaller heads, CIFAR-100 with 2 layers, vocabulary 2,000): not Table 5's sizes"
    for t in $TASKS; do
      case $t in
        mnist) for m in standard optimised efficient super; do dirs+=("converters/fixtures/mnist_vit_${m}_h1"); done ;;
        cifar100) dirs+=("converters/fixtures/cifar100_vit_super_h1") ;;
        imdb | amazon) for m in standard_h2 efficient_h1 super_h1; do dirs+=("converters/fixtures/${t}_text_$m"); done ;;
      esac
    done
  fi
fi
log "${#dirs[@]} models (${SOURCE}): $(for d in "${dirs[@]}"; do basename "$d"; done | tr '\n' ' ')"

# --- Conversions (cached; JOBS at a time) -------------------------------------------------------
convert() {  # DIR WEIGHTS -> the .kes path on stdout
  local d=$1 w=$2 name kes
  name=$(basename "$d")
  kes="$CACHE/$SOURCE-$name.$w.kes"
  if [[ ! -s $kes || $d/model.onnx -nt $kes ]]; then
    "$K" convert "$d/model.onnx" -o "$kes.tmp" --weights "$w" > "$OUT/logs/convert-$name.$w.log" 2>&1 \
      && mv "$kes.tmp" "$kes"
  fi
}
log "converting to .kes (f32 and int8 weights) into $CACHE"
for d in "${dirs[@]}"; do
  for w in f32 int8; do
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
    convert "$d" "$w" &
  done
done
wait
log "conversions done"

# --- Kestrel timings ----------------------------------------------------------------------------
bench() {  # NAME CONFIG BATCH KES ARGS... -> one line of kestrel.tsv
  local name=$1 config=$2 b=$3 kes=$4
  shift 4
  local n=$((SAMPLES > b ? SAMPLES : b)) out
  if [[ ! -s $kes ]]; then
    printf '%s\t%s\t%s\tERROR conversion failed (see logs/)\n' "$name" "$config" "$b" >> "$OUT/kestrel.tsv"
    return
  fi
  if out=$("$K" bench "$kes" --samples "$n" --reps "$REPS" --batch "$b" --json "$@" 2> "$OUT/logs/bench.stderr"); then
    printf '%s\t%s\t%s\t%s\n' "$name" "$config" "$b" "$out" >> "$OUT/kestrel.tsv"
  else
    printf '%s\t%s\t%s\tERROR %s\n' "$name" "$config" "$b" \
      "$(grep -v XDG_RUNTIME_DIR "$OUT/logs/bench.stderr" | tr '\n\t' '  ' | cut -c1-300)" >> "$OUT/kestrel.tsv"
  fi
}
# Kestrel's timings stop early enough to leave PyTorch and the profiles their share of the budget.
preserve=0
((GPU)) && [[ -n $PROFILE_BATCHES ]] && preserve=$PROFILE_RESERVE_S
reserve=$preserve
[[ -n $TORCH_DEVICE ]] && reserve=$((reserve + TORCH_RESERVE_S))
skipped=()
for d in "${dirs[@]}"; do
  name=$(basename "$d")
  if over_budget $((BUDGET_S - reserve)); then skipped+=("$name"); continue; fi
  f32="$CACHE/$SOURCE-$name.f32.kes"
  i8="$CACHE/$SOURCE-$name.int8.kes"
  log "$name: timing"
  for b in $BATCHES; do
    bench "$name" cpu1-f32 "$b" "$f32" --threads 1
    bench "$name" cpu1-int8 "$b" "$i8" --threads 1
    bench "$name" cpuN-f32 "$b" "$f32" --threads "$THREADS"
    bench "$name" cpuN-int8 "$b" "$i8" --threads "$THREADS"
    if ((GPU)); then
      bench "$name" gpu-f32 "$b" "$f32" --backend wgpu --gpu-precision f32 "${ADAPTER_ARGS[@]}"
      bench "$name" gpu-f16 "$b" "$f32" --backend wgpu --gpu-precision f16 "${ADAPTER_ARGS[@]}"
      bench "$name" gpu-int8 "$b" "$i8" --backend wgpu --gpu-precision f32 "${ADAPTER_ARGS[@]}"
    fi
  done
done
((${#skipped[@]} > 0)) && notice "time budget (BUDGET_S=$BUDGET_S s, less ${reserve} s kept for PyTorch and the profiles) spent: Kestrel did not time: ${skipped[*]}"

# --- PyTorch eager --------------------------------------------------------------------------------
rm -f "$OUT/torch_eager.json"
if [[ -n $TORCH_DEVICE ]]; then
  log "PyTorch eager on $TORCH_DEVICE"
  names=()
  for d in "${dirs[@]}"; do names+=("$(basename "$d")"); done
  left=$((BUDGET_S - (SECONDS - START) - preserve))
  "$PY" benches/paper/torch_eager.py --models "${names[@]}" --batches $BATCHES --samples "$SAMPLES" \
    --reps "$REPS" --device "$TORCH_DEVICE" --deadline-s $((left > 20 ? left : 20)) \
    --out "$OUT/torch_eager.json" 2> "$OUT/logs/torch_eager.log" \
    || notice "torch_eager.py failed (exit $?): see logs/torch_eager.log"
fi

# --- GPU roofline profiles ---------------------------------------------------------------------------
if ((GPU)) && [[ -n $PROFILE_BATCHES ]]; then
  pskipped=()
  for d in "${dirs[@]}"; do
    name=$(basename "$d")
    for b in $PROFILE_BATCHES; do
      if over_budget; then pskipped+=("$name b$b"); continue; fi
      log "$name: GPU profile at batch $b"
      "$K" profile "$CACHE/$SOURCE-$name.f32.kes" --backend wgpu "${ADAPTER_ARGS[@]}" --batch "$b" \
        --runs "$PROFILE_RUNS" --warmup 3 --json --trace "$OUT/profiles/$name.b$b.trace.json" \
        > "$OUT/profiles/$name.b$b.json" 2> "$OUT/logs/profile-$name.b$b.log" \
        || { rm -f "$OUT/profiles/$name.b$b.json"; notice "$name: GPU profile at batch $b failed (logs/profile-$name.b$b.log)"; }
    done
  done
  ((${#pskipped[@]} > 0)) && notice "time budget spent: no GPU profile for: ${pskipped[*]}"
fi

# --- The report -------------------------------------------------------------------------------------
"$PY" benches/paper/gpu_report.py "$OUT" --source "$SOURCE" --threads "$THREADS" --samples "$SAMPLES" \
  --reps "$REPS" --seconds $((SECONDS - START))
log "done in $((SECONDS - START)) s"
