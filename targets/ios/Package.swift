// swift-tools-version:5.9
// Kestrel for iOS (and macOS): a Swift API over the C ABI of targets/ffi.
// KestrelFFI.xcframework is built by ./build-xcframework.sh on a Mac (see README.md); it holds
// libkestrel_ffi.a per platform with include/kestrel.h and include/module.modulemap.
import PackageDescription

let package = Package(
    name: "Kestrel",
    platforms: [.iOS(.v13), .macOS(.v12)],
    products: [
        .library(name: "Kestrel", targets: ["Kestrel"]),
    ],
    targets: [
        .binaryTarget(name: "KestrelFFI", path: "KestrelFFI.xcframework"),
        // The static library's wgpu backend (Metal) needs these frameworks at the app's link
        // (a static library cannot carry them; from the Rust crates' #[link] attributes).
        .target(
            name: "Kestrel", dependencies: ["KestrelFFI"], path: "Sources/Kestrel",
            linkerSettings: [
                .linkedFramework("Metal"), .linkedFramework("QuartzCore"), .linkedFramework("CoreGraphics"),
                .linkedFramework("CoreFoundation"), .linkedFramework("Foundation"), .linkedLibrary("objc"),
            ]
        ),
        .testTarget(name: "KestrelTests", dependencies: ["Kestrel"], path: "Tests/KestrelTests"),
    ]
)
