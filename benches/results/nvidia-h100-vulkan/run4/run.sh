#!/usr/bin/env bash
# H100 device run 4: the wgpu ops tests of 8eef4db (split_pos refactor) on the GPU.
for f in .gl/*.deb; do dpkg -x $f / ; done; ldconfig
B=/tmp/b; mkdir -p $B; xz -dc .dev/all.txz | tar xf - -C $B
cd runtime/wgpu && timeout 150 $B/t_ops --test-threads 4 2>&1 | tee $OUT/ops-tests.txt | grep -E "test result|panicked|FAILED|^test "
