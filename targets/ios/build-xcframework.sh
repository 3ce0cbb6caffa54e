#!/usr/bin/env bash
# Builds KestrelFFI.xcframework (static libkestrel_ffi.a for iOS devices, the iOS simulator and
# macOS, with kestrel.h and the module map) into targets/ios/, where the repository root's
# Package.swift takes it by path. Runs on a Mac with Xcode:
#   rustup target add aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin
#   targets/ios/build-xcframework.sh [--zip]     # then, at the repository root: swift build / swift test
# --zip also writes targets/ios/KestrelFFI.xcframework.zip and prints its SwiftPM checksum: the
# release asset and the checksum for the url: form of the binaryTarget in Package.swift.
#
# The headers go under Headers/KestrelFFI/ in each slice, not at the root of Headers/: Xcode copies
# every XCFramework's headers into one include directory of the build, so two packages that each
# ship Headers/module.modulemap clash ("Multiple commands produce …/include/module.modulemap"). In
# a subdirectory named after the module it declares, the map stays apart and clang still finds it
# (a search path's <dir>/<Module>/module.modulemap).
#
# It cannot run on Linux CI (no Xcode, lipo or xcodebuild); CI runs
# `cargo check --target aarch64-apple-ios` and builds the iOS static library to measure its size.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
profile="${PROFILE:-release-mobile}"
zip=0
if [[ "${1:-}" == "--zip" ]]; then zip=1; fi
cd "$root"
build() {
    cargo rustc -p kestrel-rt-ffi --lib --crate-type staticlib --profile "$profile" --target "$1"
}
for t in aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin; do
    build "$t"
done
target_dir="${CARGO_TARGET_DIR:-target}"
lib() { echo "$target_dir/$1/$profile/libkestrel_ffi.a"; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/headers/KestrelFFI" "$work/sim" "$work/mac"
cp targets/ffi/include/kestrel.h targets/ios/include/module.modulemap "$work/headers/KestrelFFI/"
lipo -create "$(lib aarch64-apple-ios-sim)" "$(lib x86_64-apple-ios)" -output "$work/sim/libkestrel_ffi.a"
lipo -create "$(lib aarch64-apple-darwin)" "$(lib x86_64-apple-darwin)" -output "$work/mac/libkestrel_ffi.a"
xcf="$here/KestrelFFI.xcframework"
rm -rf "$xcf"
xcodebuild -create-xcframework \
    -library "$(lib aarch64-apple-ios)" -headers "$work/headers" \
    -library "$work/sim/libkestrel_ffi.a" -headers "$work/headers" \
    -library "$work/mac/libkestrel_ffi.a" -headers "$work/headers" \
    -output "$xcf"
# Every slice has the map in its own subdirectory and none at the root of Headers/.
for slice in "$xcf"/*/; do
    [[ -d "$slice/Headers" ]] || continue
    [[ -f "$slice/Headers/KestrelFFI/module.modulemap" && -f "$slice/Headers/KestrelFFI/kestrel.h" ]] ||
        { echo "error: $slice has no Headers/KestrelFFI/module.modulemap" >&2; exit 1; }
    [[ ! -e "$slice/Headers/module.modulemap" ]] || { echo "error: $slice has Headers/module.modulemap" >&2; exit 1; }
done
echo "wrote $xcf"
if ((zip)); then
    rm -f "$xcf.zip"
    (cd "$here" && ditto -c -k --sequesterRsrc --keepParent KestrelFFI.xcframework KestrelFFI.xcframework.zip)
    echo "wrote $xcf.zip; checksum for Package.swift: $(swift package compute-checksum "$xcf.zip")"
fi
