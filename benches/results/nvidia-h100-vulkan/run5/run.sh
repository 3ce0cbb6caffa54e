#!/usr/bin/env bash
# H100 device run 5: patches read in place by the lane-split form (v4 = 39209ac) against v3
# (46d71f2): ops tests, A/B, GPU-time profiles.
T0=$SECONDS
for f in .gl/*.deb; do dpkg -x $f / ; done; ldconfig
B=/tmp/b; mkdir -p $B; xz -dc .dev/all.txz | tar xf - -C $B
R=/tmp/r5; mkdir -p $R/ab-v3-v4 $R/profiles
(cd runtime/wgpu && timeout 100 $B/t_ops --test-threads 4 > $R/ops-tests.txt 2>&1; echo "ops rc $?")
grep -h "test result" $R/ops-tests.txt
M=/tmp/m; mkdir -p $M
MODELS="vit_tiny-legacy17 hf_vit-legacy17 deit_tiny_distilled-legacy17 convnext_atto-legacy17"
for n in $MODELS; do for v in v3 v4; do $B/k$v convert converters/zoo/$n/model.onnx -o $M/$n.$v.kes > /dev/null 2>&1 & done; done
wait
pairs() { for n in "$@"; do echo "$M/$n.v3.kes=$M/$n.v4.kes"; done; }
ROUNDS=3 benches/gpu_ab.sh $B/kv3 $B/kv4 $R/ab-v3-v4 $(pairs $MODELS) > /dev/null 2>&1; cat $R/ab-v3-v4/ab.md
for n in $MODELS; do for v in v3 v4; do for b in 1 32; do
  $B/k$v profile $M/$n.$v.kes --backend wgpu --batch $b --runs 20 --warmup 3 > $R/profiles/$n.$v.b$b.txt 2>&1
done; done; done
for f in $R/profiles/*.txt; do echo "$(basename $f) $(grep -o 'per-op sum [0-9.]* µs' $f) $(grep -o '^dispatches [0-9]*' $f)"; done
tar czf $OUT/r5.tgz -C /tmp r5
echo "== done $((SECONDS-T0))s"
