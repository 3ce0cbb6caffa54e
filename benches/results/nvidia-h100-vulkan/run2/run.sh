#!/usr/bin/env bash
# H100 device run 2 (2026-11-26): the LayerNorm fold + lane-split norm prologue (fold, bf8cec3)
# against 86d12ae (new); the new ops/models tests on the GPU; per-op profiles of the two CNNs
# that were slower after the lavapipe session (mid 98e4b29 vs new), and their A/B again.
T0=$SECONDS
for f in .gl/*.deb; do dpkg -x $f / ; done; ldconfig
B=/tmp/b; mkdir -p $B; xz -dc .dev/all.txz | tar xf - -C $B
R=/tmp/r2; mkdir -p $R/ab-new-fold $R/ab-mid-new-cnn $R/profiles
mkdir -p /work; ln -sfn "$PWD" /work/main
$B/kfold devices > $R/devices.txt 2>&1; head -2 $R/devices.txt
(cd runtime/wgpu && timeout 120 $B/t_ops --test-threads 4 > $R/ops-tests.txt 2>&1; echo "ops rc $?"; \
 timeout 120 $B/t_models > $R/models-tests.txt 2>&1; echo "models rc $?")
grep -h "test result" $R/*-tests.txt
echo "== convert $((SECONDS-T0))s"
M=/tmp/m; mkdir -p $M
VITS="vit_tiny-legacy17 hf_vit-legacy17 deit_tiny_distilled-legacy17 hf_vit-dynamo18"
CNNS="mobilenetv3-legacy17 convnext_atto-legacy17"
for n in $VITS; do for v in new fold; do $B/k$v convert converters/zoo/$n/model.onnx -o $M/$n.$v.kes > $M/$n.$v.log 2>&1 & done; done
for v in new fold; do $B/k$v convert converters/fixtures/mnist_vit_standard_h1/model.onnx -o $M/mnist_vit_standard_h1.$v.kes > /dev/null 2>&1 & done
for n in $CNNS; do for v in mid new; do $B/k$v convert converters/zoo/$n/model.onnx -o $M/$n.$v.kes > /dev/null 2>&1 & done; done
wait; ls $M/*.kes | wc -l
pairs() { for n in "$@"; do echo "$M/$n.$A_.kes=$M/$n.$B_.kes"; done; }
echo "== ab new/fold $((SECONDS-T0))s"
A_=new; B_=fold; ROUNDS=4 benches/gpu_ab.sh $B/knew $B/kfold $R/ab-new-fold $(pairs mnist_vit_standard_h1 $VITS) > /dev/null 2>&1; cat $R/ab-new-fold/ab.md
echo "== ab mid/new cnn $((SECONDS-T0))s"
A_=mid; B_=new; ROUNDS=4 benches/gpu_ab.sh $B/kmid $B/knew $R/ab-mid-new-cnn $(pairs $CNNS) > /dev/null 2>&1; cat $R/ab-mid-new-cnn/ab.md
echo "== profiles $((SECONDS-T0))s"
for n in $CNNS; do for v in mid new; do for i in 1 2; do
  $B/k$v profile $M/$n.$v.kes --backend wgpu --batch 32 --runs 20 --warmup 3 --json > $R/profiles/$n.$v.b32.$i.json 2>/dev/null
done; done; done
for n in vit_tiny-legacy17 deit_tiny_distilled-legacy17; do for v in new fold; do for b in 1 32; do
  $B/k$v profile $M/$n.$v.kes --backend wgpu --batch $b --runs 20 --warmup 3 > $R/profiles/$n.$v.b$b.txt 2>&1
done; done; done
grep -h "^dispatches" $R/profiles/*.txt
tar czf $OUT/r2.tgz -C /tmp r2
echo "== done $((SECONDS-T0))s"
