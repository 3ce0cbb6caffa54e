#!/usr/bin/env bash
# H100 device run 3 (2026-11-26): v3 = 46d71f2 (LayerNorm fold, lane-split prologue, heads'
# scale folded, row slices read in place) against base 20a58b9 and new 86d12ae; ops tests.
T0=$SECONDS
for f in .gl/*.deb; do dpkg -x $f / ; done; ldconfig
B=/tmp/b; mkdir -p $B; xz -dc .dev/all.txz | tar xf - -C $B
R=/tmp/r3; mkdir -p $R/ab-base-v3 $R/ab-new-v3 $R/profiles
mkdir -p /work; ln -sfn "$PWD" /work/main
$B/kv3 devices > $R/devices.txt 2>&1; head -2 $R/devices.txt
(cd runtime/wgpu && timeout 120 $B/t_ops --test-threads 4 > $R/ops-tests.txt 2>&1; echo "ops rc $?")
grep -h "test result" $R/*-tests.txt
M=/tmp/m; mkdir -p $M
VITS="vit_tiny-legacy17 hf_vit-legacy17 deit_tiny_distilled-legacy17 hf_vit-dynamo18"
for n in $VITS; do for v in base new v3; do $B/k$v convert converters/zoo/$n/model.onnx -o $M/$n.$v.kes > $M/$n.$v.log 2>&1 & done; done
for v in base new v3; do $B/k$v convert converters/fixtures/mnist_vit_standard_h1/model.onnx -o $M/mnist_vit_standard_h1.$v.kes > /dev/null 2>&1 & done
wait; ls $M/*.kes | wc -l
pairs() { for n in "$@"; do [[ -f $M/$n.$A_.kes ]] && echo "$M/$n.$A_.kes=$M/$n.v3.kes"; done; }
echo "== ab base/v3 $((SECONDS-T0))s"
A_=base; ROUNDS=3 benches/gpu_ab.sh $B/kbase $B/kv3 $R/ab-base-v3 $(pairs mnist_vit_standard_h1 $VITS) > /dev/null 2>&1; cat $R/ab-base-v3/ab.md
echo "== ab new/v3 $((SECONDS-T0))s"
A_=new; ROUNDS=3 benches/gpu_ab.sh $B/knew $B/kv3 $R/ab-new-v3 $(pairs mnist_vit_standard_h1 $VITS) > /dev/null 2>&1; cat $R/ab-new-v3/ab.md
echo "== profiles $((SECONDS-T0))s"
for n in mnist_vit_standard_h1 vit_tiny-legacy17 hf_vit-legacy17 deit_tiny_distilled-legacy17; do for v in new v3; do for b in 1 32; do
  $B/k$v profile $M/$n.$v.kes --backend wgpu --batch $b --runs 20 --warmup 3 > $R/profiles/$n.$v.b$b.txt 2>&1
done; done; done
grep -h -E "^model|^dispatches|^total" $R/profiles/*.b1.txt | paste - - - | awk '{print $2, $(NF-5), $(NF-4)}' 
tar czf $OUT/r3.tgz -C /tmp r3
echo "== done $((SECONDS-T0))s"
