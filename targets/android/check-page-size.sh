#!/usr/bin/env bash
# Fails unless every LOAD segment of every ELF shared library given is aligned to at least 16 KiB
# (0x4000): what Google Play requires of native libraries in apps targeting Android 15+ (devices
# with 16 KB pages cannot load a library whose segments are aligned to 4 KB). The alignment is
# the last column of `readelf -lW`'s program headers, as in Android's check_elf_alignment.sh.
#
# Usage: targets/android/check-page-size.sh LIB.so...
#   READELF=…/llvm-readelf to use another readelf (the NDK's, on a machine without binutils).
# build-android.sh runs it on every library it builds; targets/ci.sh tests it (a library linked at
# 4 KB must fail, one linked with build-android.sh's flags must pass) and runs it on the aarch64
# JNI library CI links (targets/android/test-packaging.sh).
set -euo pipefail
if (($# == 0)); then
    echo "usage: $0 LIB.so..." >&2
    exit 2
fi
readelf="${READELF:-}"
if [[ -z "$readelf" ]]; then
    readelf=$(command -v readelf || command -v llvm-readelf || true)
fi
[[ -n "$readelf" ]] || {
    echo "check-page-size: no readelf (install binutils, or set READELF to the NDK's llvm-readelf)" >&2
    exit 2
}
min=$((0x4000))
status=0
for lib in "$@"; do
    if ! headers=$("$readelf" -lW "$lib" 2>&1); then
        echo "FAIL $lib: readelf could not read it: $headers" >&2
        status=1
        continue
    fi
    loads=0
    bad=()
    while read -r type _ _ _ _ _ rest; do
        [[ "$type" == LOAD ]] || continue
        loads=$((loads + 1))
        # The flags column is one or more words (R, R E, RW): the alignment is the last field.
        align="${rest##* }"
        if [[ ! "$align" =~ ^0x[0-9a-fA-F]+$ ]] || (($align < min)); then
            bad+=("$align")
        fi
    done <<<"$headers"
    if ((loads == 0)); then
        echo "FAIL $lib: no LOAD segments (not a linked ELF library?)" >&2
        status=1
    elif ((${#bad[@]})); then
        echo "FAIL $lib: LOAD segment alignment ${bad[*]} below 0x4000 (16 KB): link with" \
            "-Wl,-z,max-page-size=16384 -Wl,-z,common-page-size=16384 (targets/android/build-android.sh)" >&2
        status=1
    else
        echo "ok   $lib: $loads LOAD segments aligned to 16 KB or more"
    fi
done
exit "$status"
