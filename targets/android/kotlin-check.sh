#!/usr/bin/env bash
# The Kotlin SDK on the host JVM (called by targets/ci.sh; runs alone too): compiles the Android
# module's Kotlin and Java sources (kestrel/src/main) with kotlinc -Werror and javac -Werror, with
# the checks in kotlin-test/, against the host libkestrel_jni.so, and runs them with
# java -Xcheck:jni: the API, Java interop (@JvmOverloads, TensorInfo equality) and the concurrency
# and lifetime guarantees (close during a run, close racing getters and session(), racing closes,
# getters during runs, the safety net for unclosed objects); in a JVM of its own, SdkCheck.kt: the
# thread count and its default. Bounded: KESTREL_KOTLIN_ITERATIONS
# (default 1000) per scenario, within KESTREL_KOTLIN_SECONDS (default 80) in all.
#
# Needs a JDK (17+), and kotlinc: from PATH, else the npm package kotlin-compiler (pinned in
# kotlinc.sh), installed with npm into KESTREL_TOOLS_DIR (default ~/.cache/kestrel-tools) when
# missing. A missing JDK or npm is installed with apt-get when running as root; otherwise, or when
# an install fails, the script fails (it never skips).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() {
    echo "kotlin-check: $*" >&2
    exit 1
}
# Sets $kotlinc and $kotlin_stdlib (installing kotlinc and a JDK when missing).
source targets/android/kotlinc.sh
stdlib="$kotlin_stdlib"

target_dir="${CARGO_TARGET_DIR:-target}"
# KESTREL_HOST_JNI_LIB: a host libkestrel_jni.so already built (.ci/run passes the one its
# workspace tests built, optimised as [profile.test] is: building the dev one here recompiled the
# CPU kernels at opt-level 1 and every crate above them, about 5 of CI's minutes). Unset, the debug
# (dev) library is built and checked, its stack included (-Xss512k below).
lib="${KESTREL_HOST_JNI_LIB:-}"
if [[ -z "$lib" ]]; then
    cargo build -q -p kestrel-rt-jni
    lib="$target_dir/debug/libkestrel_jni.so"
fi
[[ -f "$lib" ]] || fail "$lib was not built"

out="$target_dir/tmp/kotlin-check"
rm -rf "$out" && mkdir -p "$out/classes"
src=targets/android/kestrel/src/main
tests=targets/android/kotlin-test/dev/kestrel
t0=$SECONDS
# kotlinc reads the Java sources for their declarations; javac compiles them below.
"$kotlinc" -Werror -jvm-target 17 -d "$out/classes" \
    "$src/kotlin/dev/kestrel/Kestrel.kt" "$tests/ConcurrencyCheck.kt" "$tests/SdkCheck.kt" \
    "$src/java/dev/kestrel/NativeBridge.java" "$src/java/dev/kestrel/KestrelException.java" ||
    fail "kotlinc failed"
javac -Xlint:all -Werror --release 17 -cp "$out/classes:$stdlib" -d "$out/classes" \
    "$src/java/dev/kestrel/NativeBridge.java" "$src/java/dev/kestrel/KestrelException.java" \
    "$tests/JavaInterop.java"
echo "kotlin-check: compiled in $((SECONDS - t0)) s"
model=apps/kestrel-cli/models/fmnist_vit_super.int8.kes
run_java() {
    local err="$out/stderr.txt"
    # --add-opens: SdkCheck reads the int fd of a FileDescriptor and a direct buffer's address
    # (what Android hands out as ParcelFileDescriptor.fd; the host JVM keeps them private).
    # -Xss512k: every Java thread (the checks' own and the ones they start) gets the stack of an
    # iOS secondary thread, half of Android's 1 MiB: the SDK must run there, and this is the
    # *debug* library (the workspace's dev profile optimises the kernel and GPU crates at
    # opt-level 1, whose frames at opt-level 0 reached 1 MiB and overflowed the JVM's default).
    timeout 150 java -Xss512k -Xcheck:jni --add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED \
        -Djava.library.path="$(dirname "$lib")" -cp "$out/classes:$stdlib" "$@" 2>"$err" ||
        {
            cat "$err" >&2
            fail "java $1 failed"
        }
    # -Xcheck:jni reports misuse of the JNI API as warnings on stderr.
    if grep -q WARNING "$err"; then
        cat "$err" >&2
        fail "-Xcheck:jni warnings from $1"
    fi
}
run_java dev.kestrel.JavaInterop "$model"
# SdkCheck's classify() checks the SDK against the CLI built from this checkout, on this machine
# (the same kernels, so bit for bit). `cargo test --workspace` has built it in CI (with the
# workspace's features: `cargo build -p kestrel-rt-cli` would rebuild its dependencies, minutes),
# so a binary newer than every source and manifest is used as it is.
# KESTREL_CLI: a `kestrel` binary already built (.ci/run passes the one its workspace tests built:
# a source file newer than it, say after a `git pull` into a built clone, rebuilt the CLI in the
# dev profile here, 7 minutes of CI). Unset, the debug one is built when missing or older than
# the sources.
cli="${KESTREL_CLI:-$target_dir/debug/kestrel}"
if [[ -z "${KESTREL_CLI:-}" ]] && { [[ ! -x "$cli" ]] || [[ -n "$(find apps runtime converters targets Cargo.toml Cargo.lock \( -name '*.rs' -o -name Cargo.toml -o -name Cargo.lock \) -newer "$cli" -print -quit)" ]]; }; then
    cargo build -q -p kestrel-rt-cli
fi
[[ -x "$cli" ]] || fail "$cli is not an executable"
samples=apps/kestrel-cli/samples
"$cli" classify --model "$model" --json --top 3 --batch 1 \
    "$samples/fmnist/ankle-boot/00000.png" "$samples/preprocess/bag-rgba-40x30.png" \
    "$samples/preprocess/coat-rgb-56x56.png" >"$out/cli-top3.json" || fail "kestrel classify failed"
run_java dev.kestrel.SdkCheckKt "$model" "$out/cli-top3.json"
run_java dev.kestrel.ConcurrencyCheckKt "$model" "${KESTREL_KOTLIN_ITERATIONS:-1000}" "${KESTREL_KOTLIN_SECONDS:-80}"
