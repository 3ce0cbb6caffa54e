#!/bin/bash
# Alternates old and new kestrel bench runs per model: 3 rounds, median of the rounds' us_per_sample.
# Usage: OLD=old/kestrel NEW=new/kestrel alt.sh [MODEL.kes ...]  (models in $DIR, default /tmp/bm;
# without arguments, the sixth session's seven).
cd "${DIR:-/tmp/bm}" || exit 1
OLD=${OLD:-/tmp/kestrel-old} NEW=${NEW:-/tmp/kestrel-new}
models=("$@")
if ((${#models[@]} == 0)); then
  models=(digits_vit_super.int8.kes fmnist_vit_super.int8.kes fmnist_aftconv.int8.kes mnist_vit_super_h1.q8.kes
          amazon_text_efficient_h1.q8.kes paper_mnist_super_h1.q8.kes paper_amazon_standard_h1.q8a.kes)
fi
for m in "${models[@]}"; do
  o=(); n=()
  for r in 1 2 3; do
    o+=($($OLD bench $m --samples 300 --reps 5 --threads 1 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['us_per_sample'])"))
    n+=($($NEW bench $m --samples 300 --reps 5 --threads 1 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['us_per_sample'])"))
  done
  python3 - "$m" "${o[*]}" "${n[*]}" <<'PY'
import sys, statistics as st
m, o, n = sys.argv[1], [float(v) for v in sys.argv[2].split()], [float(v) for v in sys.argv[3].split()]
print(f"| {m} | {st.median(o):.1f} | {st.median(n):.1f} | {st.median(n)/st.median(o):.3f} | {' '.join(f'{v:.1f}' for v in o)} | {' '.join(f'{v:.1f}' for v in n)} |")
PY
done
