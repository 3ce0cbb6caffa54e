#!/usr/bin/env bash
# Isolated convolutions, two builds of runtime/cpu/examples/gemm_ab.rs alternated: the fastest
# call (GFLOP/s) of each layer over 300 ms, three rounds. Usage: ab.sh BASE_BIN HEAD_BIN
set -euo pipefail
base=$1 head=$2
layers=(
  "64x56x56 64 3 1 1" "128x28x28 128 3 1 1" "256x14x14 256 3 1 1" "512x7x7 512 3 1 1"
  "128x56x56 128 3 2 1" "64x56x56 256 1 1 0" "256x56x56 64 1 1 0" "256x14x14 1024 1 1 0"
  "64x13x13 256 3 1 1" "16x112x112 96 1 1 0" "144x56x56 24 1 1 0" "3x224x224 64 7 2 3"
)
for round in 1 2 3; do
  for l in "${layers[@]}"; do
    for b in base head; do
      bin=$base; [[ $b == head ]] && bin=$head
      g=$("$bin" conv $l 300 | grep -o '"gflops":[0-9.]*' | cut -d: -f2)
      echo "{\"round\":$round,\"layer\":\"$l\",\"build\":\"$b\",\"gflops\":$g}"
    done
  done
done
