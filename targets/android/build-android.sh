#!/usr/bin/env bash
# Builds libkestrel_jni.so for every Android ABI into kestrel/src/main/jniLibs/<abi>/, the way
# `cargo ndk` does: one `cargo build --release --target <triple>` per ABI, linked by the NDK's
# clang for API level $ANDROID_API (default 24).
#
# Needs: the Android NDK (r25+; ANDROID_NDK_HOME or ANDROID_NDK_ROOT), and
#   rustup target add aarch64-linux-android armv7-linux-androideabi x86_64-linux-android
# With cargo-ndk installed (`cargo install cargo-ndk`) it simply runs
#   cargo ndk -t arm64-v8a -t armeabi-v7a -t x86_64 -o kestrel/src/main/jniLibs build --release -p kestrel-jni
#
# Usage: targets/android/build-android.sh [--profile release|release-mobile]
# The NDK is not available on the CI machine: CI runs `cargo check --target aarch64-linux-android`
# and the host JNI test (targets/android/jni/tests/java.rs) instead.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
profile="release-mobile"
if [[ "${1:-}" == "--profile" ]]; then profile="$2"; fi
out="$here/kestrel/src/main/jniLibs"
api="${ANDROID_API:-24}"

if command -v cargo-ndk >/dev/null 2>&1; then
    cd "$root"
    exec cargo ndk -p "$api" -t arm64-v8a -t armeabi-v7a -t x86_64 -o "$out" build --profile "$profile" -p kestrel-jni
fi

ndk="${ANDROID_NDK_HOME:-${ANDROID_NDK_ROOT:-}}"
if [[ -z "$ndk" || ! -d "$ndk" ]]; then
    echo "error: set ANDROID_NDK_HOME to an Android NDK (r25 or later), or install cargo-ndk" >&2
    exit 1
fi
host="$(uname -s | tr '[:upper:]' '[:lower:]')-x86_64"
bin="$ndk/toolchains/llvm/prebuilt/$host/bin"
[[ -d "$bin" ]] || { echo "error: no NDK LLVM toolchain at $bin" >&2; exit 1; }

# abi  rust-target  clang-prefix
abis=(
    "arm64-v8a aarch64-linux-android aarch64-linux-android"
    "armeabi-v7a armv7-linux-androideabi armv7a-linux-androideabi"
    "x86_64 x86_64-linux-android x86_64-linux-android"
)
cd "$root"
for entry in "${abis[@]}"; do
    read -r abi target clang <<<"$entry"
    upper="$(echo "$target" | tr '[:lower:]-' '[:upper:]_')"
    export "CARGO_TARGET_${upper}_LINKER=$bin/${clang}${api}-clang"
    export "CC_${target//-/_}=$bin/${clang}${api}-clang"
    export "AR_${target//-/_}=$bin/llvm-ar"
    cargo build --profile "$profile" --target "$target" -p kestrel-jni
    mkdir -p "$out/$abi"
    cp "target/$target/$profile/libkestrel_jni.so" "$out/$abi/"
    "$bin/llvm-strip" --strip-unneeded "$out/$abi/libkestrel_jni.so"
    echo "$abi: $(wc -c <"$out/$abi/libkestrel_jni.so") bytes"
done
