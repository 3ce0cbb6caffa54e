#!/usr/bin/env bash
# The conv-chunks A/B (see README.md): gemm_ab's `conv` mode, built before (OLD) and after (NEW)
# the change, interleaved process by process, ROUNDS rounds, weights evicted ("cold"). Prints one
# JSON line per call with the binary's label; table.py keeps each binary's best. Shapes as
# arguments ("CxHxW O K S P" each) replace the default list.
set -euo pipefail
OLD=${OLD:?path to gemm_ab built before}; NEW=${NEW:?path to gemm_ab built after}; ROUNDS=${ROUNDS:-3}
shapes=(
    # 1x1 (pointwise): MNASNet/EfficientNet/ResNet-50 shapes, small and large maps
    "320x7x7 1280 1 1 0" "1152x7x7 320 1 1 0" "192x7x7 1152 1 1 0" "96x7x7 576 1 1 0"
    "1024x14x14 256 1 1 0" "112x14x14 672 1 1 0" "48x14x14 288 1 1 0" "24x28x28 144 1 1 0"
    "16x56x56 48 1 1 0" "64x56x56 256 1 1 0" "8x112x112 24 1 1 0" "32x192x192 32 1 1 0"
    # 3x3: ResNet stages, a stem, a stride-2 layer
    "512x7x7 512 3 1 1" "256x14x14 256 3 1 1" "128x28x28 128 3 1 1" "64x56x56 64 3 1 1"
    "3x224x224 32 3 2 1" "256x14x14 512 3 2 1"
)
if (($#)); then shapes=("$@"); fi
for r in $(seq "$ROUNDS"); do
    for s in "${shapes[@]}"; do
        read -r in o k st p <<<"$s"
        for b in old new; do
            bin=$OLD; [[ $b == new ]] && bin=$NEW
            echo "{\"bin\":\"$b\",\"round\":$r,\"r\":$("$bin" conv "$in" "$o" "$k" "$st" "$p" 150 cold)}"
        done
    done
done
