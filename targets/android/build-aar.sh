#!/usr/bin/env bash
# Assembles the Kestrel Android library as an AAR, without Gradle or the Android SDK's build tools:
#   classes.jar        the module's Kotlin and Java sources (kestrel/src/main), compiled with the
#                      kotlinc that kotlin-check.sh uses (kotlinc.sh) and javac, for JVM 17 (what
#                      the Gradle module sets), Kotlin language/API 2.2; the Kotlin stdlib is
#                      not bundled (an app has it: Kotlin 2.1+ reads these classes)
#   jni/<abi>/libkestrel_jni.so   the libraries build-android.sh wrote, one per ABI
#   AndroidManifest.xml          package = the module's namespace, uses-sdk minSdk (from
#                                kestrel/build.gradle.kts)
#   proguard.txt       kestrel/consumer-rules.pro: keeps what the native library looks up by name
#   R.txt (empty), res/ (empty), META-INF/com/android/build/gradle/aar-metadata.properties
# then checks the result with check-aar.py (layout, manifest, ELF machine per ABI, 16 KB alignment
# of Android libraries, the classes and keep rules the JNI symbols need).
#
# Usage:
#   targets/android/build-android.sh && targets/android/build-aar.sh      # the real AAR
#   targets/android/build-aar.sh --host                                   # smoke test (CI)
# Options: -o OUT.aar (default target/aar/kestrel-<version>.aar, or …-host-smoke.aar with --host);
#   --lib ABI=PATH (repeatable) takes that ABI's library from PATH instead of jniLibs/.
#
# The real AAR needs the NDK-built libraries (build-android.sh: arm64-v8a, armeabi-v7a, x86_64) and
# android.jar to compile KestrelAndroid.kt (ANDROID_JAR, else
# $ANDROID_HOME/platforms/android-<compileSdk>/android.jar). --host packs the host's
# libkestrel_jni.so (KESTREL_HOST_JNI_LIB, else cargo build -p kestrel-rt-jni) as the host ABI
# (x86_64 or arm64-v8a) and, when there is no android.jar, leaves KestrelAndroid.kt out: a layout test that runs on CI, not an
# AAR to ship (a glibc library does not load on Android).
#
# An app uses it with `implementation(files("libs/kestrel-<version>.aar"))` (docs/android.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
fail() {
    echo "build-aar: $*" >&2
    exit 1
}
host=0
out=""
declare -A libs=()
while (($#)); do
    case "$1" in
        --host) host=1 ;;
        -o) out="$2"; shift ;;
        --lib)
            [[ "$2" == *=* ]] || fail "--lib takes ABI=PATH"
            libs["${2%%=*}"]="${2#*=}"
            shift
            ;;
        *) fail "unknown argument $1 (usage: build-aar.sh [--host] [-o OUT.aar] [--lib ABI=PATH]…)" ;;
    esac
    shift
done

module=targets/android/kestrel
gradle="$module/build.gradle.kts"
namespace=$(sed -n 's/^ *namespace *= *"\([^"]*\)".*/\1/p' "$gradle")
min_sdk=$(sed -n 's/^ *minSdk *= *\([0-9]*\).*/\1/p' "$gradle")
compile_sdk=$(sed -n 's/^ *compileSdk *= *\([0-9]*\).*/\1/p' "$gradle")
read -r -a abis <<<"$(sed -n 's/.*abiFilters *+= *listOf(\(.*\)).*/\1/p' "$gradle" | tr -d '",')"
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
[[ -n "$namespace" && -n "$min_sdk" && -n "$compile_sdk" && ${#abis[@]} -gt 0 && -n "$version" ]] ||
    fail "could not read namespace/minSdk/compileSdk/abiFilters from $gradle or the version from Cargo.toml"

target_dir="${CARGO_TARGET_DIR:-target}"
if ((host)); then
    case "$(uname -m)" in
        x86_64) host_abi=x86_64 ;;
        aarch64) host_abi=arm64-v8a ;;
        *) fail "no Android ABI for host $(uname -m)" ;;
    esac
    # --lib, else a host library already built (KESTREL_HOST_JNI_LIB, set by CI), else the dev one.
    libs[$host_abi]="${libs[$host_abi]:-${KESTREL_HOST_JNI_LIB:-}}"
    if [[ -z "${libs[$host_abi]}" ]]; then
        cargo build -q -p kestrel-rt-jni
        libs[$host_abi]="$target_dir/debug/libkestrel_jni.so"
    fi
    abis=("${!libs[@]}")
    out="${out:-$target_dir/aar/kestrel-$version-host-smoke.aar}"
else
    for abi in "${abis[@]}"; do
        libs[$abi]="${libs[$abi]:-$module/src/main/jniLibs/$abi/libkestrel_jni.so}"
    done
    out="${out:-$target_dir/aar/kestrel-$version.aar}"
fi
for abi in "${abis[@]}"; do
    [[ -f "${libs[$abi]}" ]] ||
        fail "no ${libs[$abi]} (build the Android libraries first: targets/android/build-android.sh)"
done

android_jar="${ANDROID_JAR:-}"
if [[ -z "$android_jar" ]]; then
    sdk="${ANDROID_HOME:-${ANDROID_SDK_ROOT:-}}"
    [[ -n "$sdk" ]] && android_jar="$sdk/platforms/android-$compile_sdk/android.jar"
fi
sources=("$module/src/main/kotlin/dev/kestrel/Kestrel.kt")
cp_args=()
if [[ -n "$android_jar" && -f "$android_jar" ]]; then
    sources+=("$module/src/main/kotlin/dev/kestrel/KestrelAndroid.kt")
    cp_args=(-classpath "$android_jar")
elif ((host)); then
    echo "build-aar: no android.jar (ANDROID_JAR or ANDROID_HOME): KestrelAndroid.kt left out of this smoke-test AAR"
else
    fail "KestrelAndroid.kt needs android.jar: set ANDROID_JAR, or ANDROID_HOME with platforms/android-$compile_sdk"
fi
java_sources=("$module/src/main/java/dev/kestrel/NativeBridge.java" "$module/src/main/java/dev/kestrel/KestrelException.java")

# Sets $kotlinc and $kotlin_stdlib.
source targets/android/kotlinc.sh

work="$target_dir/tmp/build-aar"
rm -rf "$work" && mkdir -p "$work/classes" "$work/aar/res" "$work/aar/META-INF/com/android/build/gradle"
# kotlinc reads the Java sources for their declarations; javac compiles them. Language and API
# version 2.2 (the oldest kotlinc 2.4 takes without a deprecation warning): the classes carry
# Kotlin metadata 2.2, which apps on Kotlin 2.1+ can read, and call only stdlib 2.2 API.
"$kotlinc" -Werror -jvm-target 17 -language-version 2.2 -api-version 2.2 -module-name kestrel "${cp_args[@]}" -d "$work/classes" \
    "${sources[@]}" "${java_sources[@]}" || fail "kotlinc failed"
javac -Xlint:all -Werror --release 17 -cp "$work/classes:$kotlin_stdlib${android_jar:+:$android_jar}" \
    -d "$work/classes" "${java_sources[@]}" || fail "javac failed"
jar --create --no-manifest --file "$work/aar/classes.jar" -C "$work/classes" .

cat >"$work/aar/AndroidManifest.xml" <<EOF
<?xml version="1.0" encoding="utf-8"?>
<manifest xmlns:android="http://schemas.android.com/apk/res/android"
    package="$namespace">

    <uses-sdk android:minSdkVersion="$min_sdk" />

</manifest>
EOF
cp "$module/consumer-rules.pro" "$work/aar/proguard.txt"
: >"$work/aar/R.txt"
cat >"$work/aar/META-INF/com/android/build/gradle/aar-metadata.properties" <<EOF
aarFormatVersion=1.0
aarMetadataVersion=1.0
minCompileSdk=1
minCompileSdkExtension=0
minAndroidGradlePluginVersion=1.0.0
EOF
for abi in "${abis[@]}"; do
    mkdir -p "$work/aar/jni/$abi"
    cp "${libs[$abi]}" "$work/aar/jni/$abi/libkestrel_jni.so"
done

# A zip with directory entries (res/ stays, empty), fixed timestamps and sorted names.
mkdir -p "$(dirname "$out")"
python3 - "$work/aar" "$out" <<'EOF'
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
entries = []
for d, dirs, files in os.walk(src):
    rel = os.path.relpath(d, src)
    if rel != ".":
        entries.append((rel.replace(os.sep, "/") + "/", None))
    entries += [(os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/"), os.path.join(d, f)) for f in files]
with zipfile.ZipFile(out, "w") as z:
    for name, path in sorted(entries):
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        if path is None:
            info.external_attr = (0o40755 << 16) | 0x10
            z.writestr(info, b"")
        else:
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(path, "rb") as f:
                z.writestr(info, f.read())
EOF

check=(python3 targets/android/check-aar.py "$out" --namespace "$namespace" --min-sdk "$min_sdk"
    --jni-source targets/android/jni/src/lib.rs)
for abi in "${abis[@]}"; do check+=(--abi "$abi"); done
((host)) && check+=(--host)
"${check[@]}"
echo "build-aar: wrote $out ($(wc -c <"$out") bytes; ABIs: ${abis[*]})"
