#!/usr/bin/env bash
# The targets' CI steps (called by .ci/run after the workspace tests, which already ran the C ABI
# test under valgrind and the JNI test with java): mobile cross-checks, the release static
# libraries, the firmware under QEMU, and the size gate. Prints the time of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
step() {
    local t0=$SECONDS
    echo "== targets: $1"
    shift
    "$@"
    echo "== targets: done in $((SECONDS - t0)) s"
}
step "cargo check for Android (FFI + JNI)" \
    cargo check -p kestrel-ffi -p kestrel-jni --target aarch64-linux-android
step "cargo check for iOS (FFI)" cargo check -p kestrel-ffi --target aarch64-apple-ios
# Static libraries need no linker, so they build without the NDK or Xcode.
step "release static library, aarch64-linux-android" \
    cargo rustc -p kestrel-ffi --lib --crate-type staticlib --profile release-mobile --target aarch64-linux-android
step "release static library, aarch64-apple-ios" \
    cargo rustc -p kestrel-ffi --lib --crate-type staticlib --profile release-mobile --target aarch64-apple-ios
step "firmware: fmt and clippy" bash -c \
    'cargo fmt --manifest-path targets/embedded/Cargo.toml -- --check &&
     cargo clippy --manifest-path targets/embedded/Cargo.toml --release --locked -- -D warnings'
step "firmware: build and run under qemu-system-arm" bash targets/embedded/run.sh
step "binary sizes against targets/size-budgets.json" python3 targets/check_sizes.py
