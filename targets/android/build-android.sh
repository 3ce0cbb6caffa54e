#!/usr/bin/env bash
# Builds libkestrel_jni.so for every Android ABI into kestrel/src/main/jniLibs/<abi>/, the way
# `cargo ndk` does: one `cargo build --target <triple>` per ABI, linked by the NDK's clang for API
# level $ANDROID_API (default 24). Then `targets/android/build-aar.sh` packs them into an AAR.
#
# Needs: the Android NDK (r25+): ANDROID_NDK_HOME or ANDROID_NDK_ROOT, else the newest
# $ANDROID_HOME/ndk/<version> (or $ANDROID_SDK_ROOT/ndk/…), and
#   rustup target add aarch64-linux-android armv7-linux-androideabi x86_64-linux-android
#
# 16 KB pages: every ABI is linked with -z max-page-size=16384 and -z common-page-size=16384
# (Google Play requires 16 KB-aligned native libraries for apps targeting Android 15+; NDK r28+
# links that way by default, r25-r27 do not), passed as `-C link-arg=…` in RUSTFLAGS (appended to
# the caller's; with --target they reach only the target's artifacts, not build scripts), and each
# library written is checked with check-page-size.sh (readelf program headers: every LOAD segment
# aligned to 0x4000 or more) before the script reports it. This script does not go through
# cargo-ndk, which sets its own rustflags (CARGO_ENCODED_RUSTFLAGS), so the flags cannot be lost.
#
# Usage: targets/android/build-android.sh [--profile release|release-mobile]
#        targets/android/build-android.sh --print-link-args   # the page-size linker arguments
# The NDK is not available on the CI machine: CI runs `cargo check --target aarch64-linux-android`,
# the host JNI test (targets/android/jni/tests/java.rs) and targets/android/test-packaging.sh
# (check-page-size.sh tested, and run on an aarch64 Linux build of the JNI library linked with
# these arguments; the AAR script on the host library).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# The 16 KB page linker arguments: one definition (test-packaging.sh reads it with
# --print-link-args).
page_size_link_args=(-Wl,-z,max-page-size=16384 -Wl,-z,common-page-size=16384)
if [[ "${1:-}" == "--print-link-args" ]]; then
    echo "${page_size_link_args[*]}"
    exit 0
fi
profile="release-mobile"
if [[ "${1:-}" == "--profile" ]]; then profile="$2"; fi
out="$here/kestrel/src/main/jniLibs"
api="${ANDROID_API:-24}"

ndk="${ANDROID_NDK_HOME:-${ANDROID_NDK_ROOT:-}}"
if [[ -z "$ndk" ]]; then
    sdk="${ANDROID_HOME:-${ANDROID_SDK_ROOT:-}}"
    if [[ -n "$sdk" && -d "$sdk/ndk" ]]; then
        ndk="$(find "$sdk/ndk" -mindepth 1 -maxdepth 1 -type d | sort -V | tail -n 1)"
    fi
fi
if [[ -z "$ndk" || ! -d "$ndk" ]]; then
    echo "error: set ANDROID_NDK_HOME to an Android NDK (r25 or later), or ANDROID_HOME to an SDK with ndk/<version>" >&2
    exit 1
fi
host="$(uname -s | tr '[:upper:]' '[:lower:]')-x86_64"
bin="$ndk/toolchains/llvm/prebuilt/$host/bin"
[[ -d "$bin" ]] || { echo "error: no NDK LLVM toolchain at $bin" >&2; exit 1; }

# The page-size arguments, in whichever rustflags variable cargo reads (the encoded one wins).
if [[ -n "${CARGO_ENCODED_RUSTFLAGS:-}" ]]; then
    for arg in "${page_size_link_args[@]}"; do
        CARGO_ENCODED_RUSTFLAGS+=$'\x1f'"-Clink-arg=$arg"
    done
    export CARGO_ENCODED_RUSTFLAGS
else
    for arg in "${page_size_link_args[@]}"; do
        RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C link-arg=$arg"
    done
    export RUSTFLAGS
fi

# abi  rust-target  clang-prefix
abis=(
    "arm64-v8a aarch64-linux-android aarch64-linux-android"
    "armeabi-v7a armv7-linux-androideabi armv7a-linux-androideabi"
    "x86_64 x86_64-linux-android x86_64-linux-android"
)
target_dir="${CARGO_TARGET_DIR:-target}"
cd "$root"
for entry in "${abis[@]}"; do
    read -r abi target clang <<<"$entry"
    upper="$(echo "$target" | tr '[:lower:]-' '[:upper:]_')"
    export "CARGO_TARGET_${upper}_LINKER=$bin/${clang}${api}-clang"
    export "CC_${target//-/_}=$bin/${clang}${api}-clang"
    export "AR_${target//-/_}=$bin/llvm-ar"
    cargo build --profile "$profile" --target "$target" -p kestrel-rt-jni
    mkdir -p "$out/$abi"
    cp "$target_dir/$target/$profile/libkestrel_jni.so" "$out/$abi/"
    "$bin/llvm-strip" --strip-unneeded "$out/$abi/libkestrel_jni.so"
    READELF="${READELF:-$bin/llvm-readelf}" bash "$here/check-page-size.sh" "$out/$abi/libkestrel_jni.so"
    echo "$abi: $(wc -c <"$out/$abi/libkestrel_jni.so") bytes"
done
