#!/usr/bin/env bash
# Android packaging checks that run without the NDK (called by targets/ci.sh; runs alone too):
# 1. check-page-size.sh itself: a small library linked at 4 KB pages fails it and one linked with
#    build-android.sh's page-size arguments passes, for the host and for aarch64 (the GNU
#    cross-linker .ci/run installs); a file that is not ELF fails.
# 2. The aarch64 library CI links: libkestrel_jni.so (CPU only) for aarch64-unknown-linux-gnu,
#    linked with build-android.sh's arguments (--print-link-args), passes check-page-size.sh.
#    CI has no NDK, so the Android libraries themselves are checked by build-android.sh, which
#    runs check-page-size.sh on every ABI it links, where the NDK is installed.
# 3. build-aar.sh --host: an AAR of the host library and that aarch64 library (as arm64-v8a), its
#    layout checked by check-aar.py; then check-aar.py must reject broken copies of it (no keep
#    rule for NativeBridge, no manifest, a library under the wrong ABI, 4 KB alignment outside
#    --host, a stray entry); and its classes.jar and host library run JavaInterop.java on the JVM.
#    On an x86_64 host (CI's), so that the host and aarch64 libraries are two ABIs.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ "$(uname -m)" == x86_64 ]] || { echo "test-packaging: runs on x86_64 hosts" >&2; exit 1; }
android=targets/android
target_dir="${CARGO_TARGET_DIR:-target}"
work="$target_dir/tmp/test-packaging"
rm -rf "$work" && mkdir -p "$work"
fail() {
    echo "test-packaging: $*" >&2
    exit 1
}
read -r -a link_args <<<"$(bash $android/build-android.sh --print-link-args)"
[[ "${link_args[*]}" == *max-page-size=16384* ]] || fail "build-android.sh --print-link-args: ${link_args[*]}"
expect_fail() {
    local what="$1"
    shift
    if "$@" >"$work/out.txt" 2>&1; then
        cat "$work/out.txt" >&2
        fail "$what: passed, expected a failure"
    fi
    echo "test-packaging: $what: rejected as expected ($(tail -n 1 "$work/out.txt" | cut -c1-160))"
}

# 1. The checker on small libraries.
echo 'int kestrel_page_size_probe(void) { return 1; }' >"$work/probe.c"
for cc in cc aarch64-linux-gnu-gcc; do
    command -v "$cc" >/dev/null || fail "$cc is missing (.ci/run installs gcc-aarch64-linux-gnu)"
    "$cc" -shared -fPIC -Wl,-z,max-page-size=4096 -Wl,-z,common-page-size=4096 -o "$work/4k-$cc.so" "$work/probe.c"
    "$cc" -shared -fPIC "${link_args[@]}" -o "$work/16k-$cc.so" "$work/probe.c"
    expect_fail "check-page-size.sh on a 4 KB library ($cc)" bash $android/check-page-size.sh "$work/4k-$cc.so"
    bash $android/check-page-size.sh "$work/16k-$cc.so"
    expect_fail "check-page-size.sh on a 16 KB and a 4 KB library ($cc)" \
        bash $android/check-page-size.sh "$work/16k-$cc.so" "$work/4k-$cc.so"
done
expect_fail "check-page-size.sh on a C source file" bash $android/check-page-size.sh "$work/probe.c"

# 2. The aarch64 JNI library, CPU only (the wgpu backend adds minutes of release build and
#    nothing to the page alignment), linked with the page-size arguments.
rustc_link=()
for arg in "${link_args[@]}"; do rustc_link+=(-C "link-arg=$arg"); done
cargo rustc -q -p kestrel-rt-jni --lib --crate-type cdylib --no-default-features \
    --target aarch64-unknown-linux-gnu -- "${rustc_link[@]}"
aarch64_lib="$target_dir/aarch64-unknown-linux-gnu/debug/libkestrel_jni.so"
bash $android/check-page-size.sh "$aarch64_lib"

# 3. The AAR (host smoke test), and the checker rejecting broken ones.
aar="$work/kestrel-host-smoke.aar"
bash $android/build-aar.sh --host --lib "arm64-v8a=$aarch64_lib" -o "$aar"
host_abi=x86_64
check=(python3 $android/check-aar.py --namespace dev.kestrel --min-sdk 24 --jni-source $android/jni/src/lib.rs)
# mutate NAME: a copy of the AAR with one change (python below), checked to fail.
mutate() {
    python3 - "$aar" "$work/$1.aar" "$1" <<'EOF'
import sys, zipfile
src, dst, how = sys.argv[1:]
with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
    for info in z.infolist():
        data = z.read(info)
        if how == "no-keep-rule" and info.filename == "proguard.txt":
            data = b"\n".join(l for l in data.split(b"\n") if b"NativeBridge" not in l)
        if how == "no-manifest" and info.filename == "AndroidManifest.xml":
            continue
        if how == "wrong-abi" and info.filename.startswith("jni/arm64-v8a/"):
            info.filename = info.filename.replace("arm64-v8a", "armeabi-v7a")
        out.writestr(info, data)
    if how == "stray-entry":
        out.writestr("libs/extra.jar", b"")
EOF
}
abi_args=()
for abi in "$host_abi" arm64-v8a; do abi_args+=(--abi "$abi"); done
for how in no-keep-rule no-manifest stray-entry; do
    mutate "$how"
    expect_fail "check-aar.py, $how" "${check[@]}" "$work/$how.aar" --host "${abi_args[@]}"
done
mutate wrong-abi
expect_fail "check-aar.py, an aarch64 library under armeabi-v7a" \
    "${check[@]}" "$work/wrong-abi.aar" --host --abi "$host_abi" --abi armeabi-v7a
expect_fail "check-aar.py without --host (the host library is 4 KB aligned)" "${check[@]}" "$aar" "${abi_args[@]}"
"${check[@]}" "$aar" --host "${abi_args[@]}"

# The AAR's classes and host library work together: JavaInterop.java (the Kotlin check's Java
# caller) compiled against classes.jar alone and run with the AAR's jni/x86_64 library, on
# 512 KiB thread stacks (an iOS secondary thread's; kotlin-check.sh says why).
source $android/kotlinc.sh
mkdir -p "$work/unpacked" "$work/interop"
(cd "$work/unpacked" && jar xf ../kestrel-host-smoke.aar classes.jar jni/x86_64/libkestrel_jni.so)
javac -Xlint:all -Werror --release 17 -cp "$work/unpacked/classes.jar:$kotlin_stdlib" -d "$work/interop" \
    $android/kotlin-test/dev/kestrel/JavaInterop.java
java -Xss512k -Xcheck:jni -Djava.library.path="$work/unpacked/jni/x86_64" \
    -cp "$work/interop:$work/unpacked/classes.jar:$kotlin_stdlib" dev.kestrel.JavaInterop \
    apps/kestrel-cli/models/fmnist_vit_super.int8.kes >"$work/interop.txt" 2>&1 ||
    { cat "$work/interop.txt" >&2; fail "JavaInterop against the AAR's classes.jar and library failed"; }
if grep -q WARNING "$work/interop.txt"; then
    cat "$work/interop.txt" >&2
    fail "-Xcheck:jni warnings from JavaInterop against the AAR"
fi
echo "test-packaging: JavaInterop ran against the AAR's classes.jar and jni/x86_64 library"
echo "test-packaging: ok"
