#!/usr/bin/env bash
# H100 device run (2026-11-26, fourth session): kernels tested on the GPU, A/Bs of HEAD (new)
# against 98e4b29 (mid: end of the H200 sessions) and 20a58b9 (base: before issue 17), roofline
# profiles, then the Table 5 script with what time is left. Everything lands in $OUT/r and
# $OUT/r.tgz.
T0=$SECONDS
LIMIT=${LIMIT:-470}
for f in .gl/*.deb; do dpkg -x $f / ; done; ldconfig
B=/tmp/b; mkdir -p $B; xz -dc .dev/all.txz | tar xf - -C $B
R=/tmp/r; mkdir -p $R/ab-mid-new $R/ab-base-new $R/roofline
mkdir -p /work; ln -sfn "$PWD" /work/main
$B/knew devices > $R/devices.txt 2>&1; head -6 $R/devices.txt
echo "== tests $((SECONDS-T0))s"
(cd runtime/wgpu && timeout 150 $B/t_ops --test-threads 4 > $R/ops-tests.txt 2>&1; echo "ops rc $?"; \
 timeout 60 $B/t_steady > $R/steady-tests.txt 2>&1; echo "steady rc $?"; \
 [[ -x $B/t_models ]] && { timeout 120 $B/t_models > $R/models-tests.txt 2>&1; echo "models rc $?"; })
grep -h "test result" $R/*-tests.txt
echo "== convert $((SECONDS-T0))s"
M=/tmp/m; mkdir -p $M
VITS="vit_tiny-legacy17 hf_vit-legacy17 deit_tiny_distilled-legacy17"
CNNS="small_cnn-legacy17 efficientnet-legacy17 mobilenetv3-legacy17 resnet18_w8-legacy17 convnext_atto-legacy17"
for n in $VITS $CNNS; do for v in mid new; do $B/k$v convert converters/zoo/$n/model.onnx -o $M/$n.$v.kes > $M/$n.$v.log 2>&1 & done; done
for v in base mid new; do $B/k$v convert converters/fixtures/mnist_vit_standard_h1/model.onnx -o $M/mnist_vit_standard_h1.$v.kes > /dev/null 2>&1 & done
for n in $VITS; do $B/kbase convert converters/zoo/$n/model.onnx -o $M/$n.base.kes > $M/$n.base.log 2>&1 & done
wait; ls $M/*.kes | wc -l
pairs() { for n in "$@"; do echo "$M/$n.$A_.kes=$M/$n.new.kes"; done; }
echo "== ab mid/new $((SECONDS-T0))s"
A_=mid; ROUNDS=2 benches/gpu_ab.sh $B/kmid $B/knew $R/ab-mid-new $(pairs mnist_vit_standard_h1 $VITS $CNNS) > /dev/null 2>&1; cat $R/ab-mid-new/ab.md
echo "== ab base/new $((SECONDS-T0))s"
A_=base; ROUNDS=2 benches/gpu_ab.sh $B/kbase $B/knew $R/ab-base-new $(pairs mnist_vit_standard_h1 $VITS) > /dev/null 2>&1; cat $R/ab-base-new/ab.md
echo "== roofline $((SECONDS-T0))s"
for m in apps/kestrel-cli/models/*.int8.kes $M/vit_tiny-legacy17.new.kes $M/deit_tiny_distilled-legacy17.new.kes; do n=$(basename $m .kes); n=${n%.new}; for b in 1 32; do
  $B/knew profile $m --backend wgpu --batch $b --runs 20 --warmup 3 > $R/roofline/$n.b$b.txt 2>&1
  $B/knew profile $m --backend wgpu --batch $b --runs 20 --warmup 3 --json > $R/roofline/$n.b$b.json 2>&1
done; done
tar czf $OUT/r.tgz -C /tmp r
LEFT=$((LIMIT - (SECONDS-T0)))
echo "== table5 $((SECONDS-T0))s, budget $LEFT"
if (( LEFT > 90 )); then
  KESTREL=$B/knew BUDGET_S=$((LEFT - 20)) benches/gpu_results.sh /tmp/r/table5 > $R/gpu_results.log 2>&1
  tail -5 $R/gpu_results.log; head -40 /tmp/r/table5/table.md 2>/dev/null
fi
tar czf $OUT/r.tgz -C /tmp r
echo "== done $((SECONDS-T0))s"
