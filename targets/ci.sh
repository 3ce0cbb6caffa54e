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
step "cargo check for Android (FFI + JNI, with wgpu)" \
    cargo check -p kestrel-rt-ffi -p kestrel-rt-jni --target aarch64-linux-android
step "cargo check for iOS (FFI, with wgpu)" cargo check -p kestrel-rt-ffi --target aarch64-apple-ios
step "clippy, CPU-only FFI + JNI (--no-default-features)" \
    cargo clippy -p kestrel-rt-ffi -p kestrel-rt-jni --all-targets --no-default-features -- -D warnings
# The Kotlin SDK compiled (kotlinc -Werror, installed from npm when missing) and run on the host
# JVM against libkestrel_jni.so: API, Java interop, and close/use races (issue 35). Under 2 minutes.
step "Kotlin SDK on the host JVM (API, Java interop, concurrency)" bash targets/android/kotlin-check.sh
# Android packaging without the NDK (targets/android/test-packaging.sh): check-page-size.sh tested on
# 4 KB and 16 KB libraries (host and aarch64), the aarch64 libkestrel_jni.so (CPU only, linked for
# aarch64 Linux with build-android.sh's page-size arguments) checked, and build-aar.sh --host: an
# AAR's layout, manifest, JNI keep rules and classes checked, broken ones rejected, and its
# classes run on the JVM with its library. The Android .so files are checked by build-android.sh
# where the NDK is installed. About a minute.
step "Android packaging: 16 KB page alignment, AAR layout (host smoke test)" bash targets/android/test-packaging.sh
# Static libraries need no linker, so they build without the NDK or Xcode. Both variants are
# gated: CPU only (--no-default-features) and with the wgpu backend (the default). The library's
# file names carry no hash, so each CPU-only variant gets its own target directory (its few
# dependencies are rebuilt there; check_sizes.py reads them).
target_dir="${CARGO_TARGET_DIR:-target}"
staticlib() {
    cargo rustc -p kestrel-rt-ffi --lib --crate-type staticlib --profile release-mobile --target "$@"
}
# The two CPU-only libraries build at once, in the background (Cargo locks a target directory per
# build, hence one each): with codegen-units = 1 each crate is one rustc thread and each library
# ends in one single-threaded fat-LTO link, so one after the other they left the second of CI's
# two cores idle. Measured from clean on 2 cores: 115 + 107 s one after the other, 152 s at once.
# (The wgpu library has parallelism of its own: all three at once took 457 s against 485.)
# Each one's output is printed, in a fixed order, when both have finished.
logs="$target_dir/tmp/staticlibs"
rm -rf "$logs" && mkdir -p "$logs"
cpu_only() {
    local t0=$SECONDS
    echo "== targets: release static libraries, CPU only: aarch64-linux-android and aarch64-apple-ios at once"
    staticlib aarch64-linux-android --no-default-features --target-dir "$target_dir/cpu-only" \
        >"$logs/android.log" 2>&1 &
    local android=$!
    staticlib aarch64-apple-ios --no-default-features --target-dir "$target_dir/cpu-only-ios" \
        >"$logs/ios.log" 2>&1 &
    local ios=$!
    local failed=()
    wait "$android" || failed+=(aarch64-linux-android)
    wait "$ios" || failed+=(aarch64-apple-ios)
    for log in android ios; do
        echo "-- $log:"
        cat "$logs/$log.log"
    done
    echo "== targets: done in $((SECONDS - t0)) s"
    if ((${#failed[@]})); then
        echo "targets/ci.sh: CPU-only static library failed: ${failed[*]}" >&2
        return 1
    fi
}
cpu_only
step "release static library, aarch64-linux-android, with wgpu" staticlib aarch64-linux-android
# A release build of wgpu costs about 3 minutes per target on CI's 2 cores, so only the Android
# wgpu library (the larger one, and the one an APK ships per ABI) is gated on every run; the iOS
# one is built and gated with KESTREL_SIZE_IOS_WGPU=1 (its size is in targets/README.md, and
# `cargo check --target aarch64-apple-ios` above still compiles the Metal backend).
size_args=()
if [[ "${KESTREL_SIZE_IOS_WGPU:-0}" == 1 ]]; then
    step "release static library, aarch64-apple-ios, with wgpu" staticlib aarch64-apple-ios
else
    size_args+=(--skip ios_aarch64_wgpu_staticlib)
fi
# The firmware is its own workspace with its own target directory (targets/embedded/target, where
# run.sh and check_sizes.py look), whatever CARGO_TARGET_DIR says for the main one.
step "firmware: fmt and clippy" env -u CARGO_TARGET_DIR bash -c \
    'cargo fmt --manifest-path targets/embedded/Cargo.toml -- --check &&
     cargo clippy --manifest-path targets/embedded/Cargo.toml --release --locked -- -D warnings'
step "firmware: build and run under qemu-system-arm" env -u CARGO_TARGET_DIR bash targets/embedded/run.sh
step "binary sizes against targets/size-budgets.json" python3 targets/check_sizes.py "${size_args[@]}"
