#!/bin/bash
# Interleaved A/B: before and after3, rows sweep then GEMVs; raw JSON lines tagged by binary.
# Run from a folder holding the two builds of runtime/cpu/examples/gemm_ab.rs as ./before and ./after3.
out=raw.jsonl; : > $out
echo "{\"kind\":\"start\",\"date\":\"$(date -u +%FT%TZ)\",\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $out
for rep in 1 2; do
  for kn in 192 384 768; do for e in f32 i8 i4 i8q8 i4q8; do for b in before after3; do
    ./$b rows $kn $e 15 | sed "s/^{/{\"bin\":\"$b\",\"rep\":$rep,/" >> $out
  done; done; done
done
echo "{\"kind\":\"mid\",\"date\":\"$(date -u +%FT%TZ)\",\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $out
for rep in 1 2; do
  for b in before after3; do ./$b bandwidth | sed "s/^{/{\"bin\":\"$b\",\"rep\":$rep,/" >> $out; done
  for s in 2048x4096 1024x2048 2048x20736; do for e in f32 f16 i8 i4 i8q8 i4q8; do for m in 1 2 3; do for b in before after3; do
    ./$b gemv $s $e 100 $m | sed "s/^{/{\"bin\":\"$b\",\"rep\":$rep,/" >> $out
  done; done; done; done
done
echo "{\"kind\":\"end\",\"date\":\"$(date -u +%FT%TZ)\",\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $out
