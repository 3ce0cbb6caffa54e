#!/usr/bin/env bash
# Builds KestrelFFI.xcframework (static libkestrel_ffi.a for iOS devices, the iOS simulator and
# macOS, with kestrel.h and the module map) next to Package.swift. Runs on a Mac with Xcode:
#   rustup target add aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin
#   targets/ios/build-xcframework.sh            # then: cd targets/ios && swift build / open in Xcode
# It cannot run on Linux CI (no Xcode, lipo or xcodebuild); CI runs
# `cargo check --target aarch64-apple-ios` and builds the iOS static library to measure its size.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
profile="${PROFILE:-release-mobile}"
cd "$root"
build() {
    cargo rustc -p kestrel-ffi --lib --crate-type staticlib --profile "$profile" --target "$1"
}
for t in aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin; do
    build "$t"
done
lib() { echo "target/$1/$profile/libkestrel_ffi.a"; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/headers" "$work/sim" "$work/mac"
cp targets/ffi/include/kestrel.h targets/ios/include/module.modulemap "$work/headers/"
lipo -create "$(lib aarch64-apple-ios-sim)" "$(lib x86_64-apple-ios)" -output "$work/sim/libkestrel_ffi.a"
lipo -create "$(lib aarch64-apple-darwin)" "$(lib x86_64-apple-darwin)" -output "$work/mac/libkestrel_ffi.a"
rm -rf "$here/KestrelFFI.xcframework"
xcodebuild -create-xcframework \
    -library "$(lib aarch64-apple-ios)" -headers "$work/headers" \
    -library "$work/sim/libkestrel_ffi.a" -headers "$work/headers" \
    -library "$work/mac/libkestrel_ffi.a" -headers "$work/headers" \
    -output "$here/KestrelFFI.xcframework"
echo "wrote $here/KestrelFFI.xcframework"
