// swift-tools-version:5.9
// Kestrel for iOS (and macOS) as a Swift package at the repository root, so SwiftPM and Xcode can
// add it by the repository's URL: the `Kestrel` library (a Swift API, targets/ios/Sources/Kestrel)
// over `KestrelFFI`, the C ABI of targets/ffi as an XCFramework (static libkestrel_ffi.a per
// platform; kestrel.h and module.modulemap under Headers/KestrelFFI/). docs/ios.md has the steps.
// Not built on the Linux CI (no Swift toolchain): reviewed, with XCTests for `swift test` on a Mac.
import PackageDescription

// Development (this checkout): the XCFramework that targets/ios/build-xcframework.sh writes.
let kestrelFFI: Target = .binaryTarget(name: "KestrelFFI", path: "targets/ios/KestrelFFI.xcframework")
// Releases: the XCFramework is a build output, not in the repository, so a release tag's manifest
// names the zipped XCFramework by URL and checksum instead (both printed by
// `targets/ios/build-xcframework.sh --zip`; the URL is wherever the release's assets live):
// let kestrelFFI: Target = .binaryTarget(
//     name: "KestrelFFI",
//     url: "https://github.com/OWNER/kestrel/releases/download/v0.1.0/KestrelFFI.xcframework.zip",
//     checksum: "the 64 hex digits of `swift package compute-checksum KestrelFFI.xcframework.zip`"
// )

let package = Package(
    name: "Kestrel",
    platforms: [.iOS(.v13), .macOS(.v12)],
    products: [
        .library(name: "Kestrel", targets: ["Kestrel"]),
    ],
    targets: [
        kestrelFFI,
        // The static library's wgpu backend (Metal) needs these frameworks at the app's link
        // (a static library cannot carry them; from the Rust crates' #[link] attributes).
        .target(
            name: "Kestrel", dependencies: ["KestrelFFI"], path: "targets/ios/Sources/Kestrel",
            linkerSettings: [
                .linkedFramework("Metal"), .linkedFramework("QuartzCore"), .linkedFramework("CoreGraphics"),
                .linkedFramework("CoreFoundation"), .linkedFramework("Foundation"), .linkedLibrary("objc"),
            ]
        ),
        .testTarget(name: "KestrelTests", dependencies: ["Kestrel"], path: "targets/ios/Tests/KestrelTests"),
    ]
)
