#!/usr/bin/env bash
# Builds the firmware (release) and runs it under qemu-system-arm (MPS2 AN386, Cortex-M4F) with
# semihosting. Fails unless the firmware's class equals the class the host's CPU runtime
# computed for the same .kes and input at build time, and prints the cycle count.
#
# Under `-icount shift=0` QEMU advances virtual time by 1 ns per instruction, and SysTick counts
# the 25 MHz core clock of the board model, so instructions ≈ SysTick cycles × 40. QEMU is not
# cycle-accurate: on silicon, cycles ≈ instructions × CPI (≈1.1–1.5 for this code on an M4).
set -euo pipefail
cd "$(dirname "$0")"
command -v qemu-system-arm >/dev/null || { echo "error: qemu-system-arm not found (apt-get install qemu-system-arm)" >&2; exit 1; }
cargo build --release --locked
elf=target/thumbv7em-none-eabihf/release/kestrel-firmware
log=target/qemu.log
timeout 300 qemu-system-arm -cpu cortex-m4 -machine mps2-an386 -nographic -monitor none -serial none \
    -icount shift=0 -semihosting-config enable=on,target=native -kernel "$elf" | tee "$log"
grep -q '^PASS$' "$log" || { echo "error: the firmware did not report PASS" >&2; exit 1; }
read -r class host < <(sed -n 's/^class \([0-9]*\) host class \([0-9]*\)$/\1 \2/p' "$log")
[[ -n "${class:-}" && "$class" == "$host" ]] || { echo "error: class '$class' != host class '$host'" >&2; exit 1; }
cycles=$(sed -n 's/^inference cycles \([0-9]*\) .*/\1/p' "$log")
echo "embedded: class $class matches the host; inference $cycles SysTick cycles at 25 MHz" \
     "($((cycles / 25000)) ms virtual, ≈ $((cycles * 40)) instructions under -icount shift=0)"
