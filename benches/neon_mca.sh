#!/usr/bin/env bash
# Static throughput estimates of the NEON inner loops: builds kestrel-rt-cpu in release for
# aarch64-unknown-linux-gnu with its assembly (`--emit asm`, line tables), finds every innermost
# loop of the NEON entry points (neon.rs, q8_neon.rs over q8_driver.rs, the vmath NEON paths) by
# its backward branch, and runs llvm-mca 19 on each with -mcpu=neoverse-n1 (standing in for
# Cortex-A76/A78) and -mcpu=neoverse-v1 (Cortex-X1): cycles per iteration, the bottleneck unit
# and the % of the bottleneck pipe (benches/neon_mca.py says how each is counted).
# These are static estimates (data in L1, perfect branch prediction), not timings.
#
# Usage: benches/neon_mca.sh [label]   (from the repository root; default label: the commit)
# Writes benches/results/llvm-mca-neon/<label>/results.{md,json}.
# Needs: rustup target aarch64-unknown-linux-gnu, gcc-aarch64-linux-gnu (the linker,
# .cargo/config.toml), llvm-19 (apt-get install -y llvm-19), python3.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
label=${1:-$(git -C "$root" rev-parse --short HEAD)}
mca=${LLVM_MCA:-/usr/lib/llvm-19/bin/llvm-mca}
target_dir=${CARGO_TARGET_DIR:-$root/target/neon-mca}
out=$root/benches/results/llvm-mca-neon/$label

[ -x "$mca" ] || { echo "llvm-mca not found at $mca (apt-get install -y llvm-19, or set LLVM_MCA)" >&2; exit 1; }
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
    { echo "missing target: rustup target add aarch64-unknown-linux-gnu" >&2; exit 1; }

deps=$target_dir/aarch64-unknown-linux-gnu/release/deps
build() {
    (cd "$root" && CARGO_TARGET_DIR=$target_dir cargo rustc -p kestrel-rt-cpu --release \
        --target aarch64-unknown-linux-gnu --lib -- \
        --emit asm,link -C codegen-units=1 -C debuginfo=line-tables-only)
}
build
if ! compgen -G "$deps/kestrel_rt_cpu-*.s" >/dev/null; then
    # A fresh build whose assembly was removed: build the crate again.
    (cd "$root" && CARGO_TARGET_DIR=$target_dir cargo clean -p kestrel-rt-cpu --release --target aarch64-unknown-linux-gnu)
    build
fi
# The newest assembly (cargo rewrites it whenever the crate is rebuilt with these flags).
asm=$(ls -t "$deps"/kestrel_rt_cpu-*.s | head -n 1)

python3 "$root/benches/neon_mca.py" "$asm" --src "$root" --mca "$mca" --out "$out" --label "$label"
echo "wrote $out/results.md and results.json"
