import XCTest
import CoreGraphics
import CoreVideo
import ImageIO
@testable import Kestrel

/// `Session.classify` against `kestrel classify` (issue 35, item 4). Written for `swift test` on a
/// Mac, not run here (no Swift toolchain on Linux CI). The expected top-3 are what `kestrel
/// classify --json --top 3` prints for the bundled model (the same as SdkCheck.kt checks on the
/// JVM); the files are read from the repository this package sits in.
final class ClassifyTests: XCTestCase {
    /// The repository root (this file is targets/ios/Tests/KestrelTests/ClassifyTests.swift).
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    let cliTop3: [String: [(Int, String, Double)]] = [
        "fmnist/ankle-boot/00000.png": [(9, "Ankle boot", 0.8547242283821106), (5, "Sandal", 0.03612028434872627),
                                        (7, "Sneaker", 0.023155534639954567)],
        "preprocess/coat-rgb-56x56.png": [(4, "Coat", 0.48648613691329956), (2, "Pullover", 0.3500171899795532),
                                          (1, "Trouser", 0.032218486070632935)],
    ]

    func session() throws -> Session {
        let model = try Model(contentsOf: root.appendingPathComponent("apps/kestrel-cli/models/fmnist_vit_super.int8.kes"))
        return try model.session(capacity: 1, backend: .cpu)
    }

    func image(_ name: String) throws -> CGImage {
        let url = root.appendingPathComponent("apps/kestrel-cli/samples/" + name)
        guard let src = CGImageSourceCreateWithURL(url as CFURL, nil),
              let img = CGImageSourceCreateImageAtIndex(src, 0, nil) else {
            throw XCTSkip("cannot decode \(url.path)")
        }
        return img
    }

    func assertCli(_ got: [Classification], _ name: String, file: StaticString = #filePath, line: UInt = #line) {
        let want = cliTop3[name]!
        XCTAssertEqual(got.count, want.count, file: file, line: line)
        for (g, w) in zip(got, want) {
            XCTAssertEqual(g.index, w.0, file: file, line: line)
            XCTAssertEqual(g.label, w.1, file: file, line: line)
            XCTAssertEqual(Double(g.probability), w.2, "\(name): bit for bit", file: file, line: line)
        }
    }

    func testClassifyCGImageMatchesTheCli() throws {
        let s = try session()
        for name in cliTop3.keys {
            assertCli(try s.classify(cgImage: try image(name), k: 3), name)
        }
    }

    func testClassifyPixelsAndPixelBuffer() throws {
        let s = try session()
        // RGBX bytes of the RGB sample, then the same pixels as a 32BGRA CVPixelBuffer.
        let name = "preprocess/coat-rgb-56x56.png"
        let img = try image(name)
        let (w, h) = (img.width, img.height)
        var rgbx = [UInt8](repeating: 0, count: w * h * 4)
        rgbx.withUnsafeMutableBytes { buf in
            let ctx = CGContext(data: buf.baseAddress, width: w, height: h, bitsPerComponent: 8, bytesPerRow: w * 4,
                                space: img.colorSpace!, bitmapInfo: CGImageAlphaInfo.noneSkipLast.rawValue)!
            ctx.draw(img, in: CGRect(x: 0, y: 0, width: w, height: h))
        }
        try rgbx.withUnsafeBytes {
            assertCli(try s.classify(pixels: $0, width: w, height: h, bytesPerRow: w * 4, format: .rgba8888, k: 3), name)
        }
        var pb: CVPixelBuffer?
        XCTAssertEqual(CVPixelBufferCreate(nil, w, h, kCVPixelFormatType_32BGRA, nil, &pb), kCVReturnSuccess)
        let buffer = pb!
        CVPixelBufferLockBaseAddress(buffer, [])
        let base = CVPixelBufferGetBaseAddress(buffer)!.assumingMemoryBound(to: UInt8.self)
        let stride = CVPixelBufferGetBytesPerRow(buffer)
        for y in 0..<h {
            for x in 0..<w {
                let i = (y * w + x) * 4, o = y * stride + x * 4
                base[o] = rgbx[i + 2]; base[o + 1] = rgbx[i + 1]; base[o + 2] = rgbx[i]; base[o + 3] = 255
            }
        }
        CVPixelBufferUnlockBaseAddress(buffer, [])
        assertCli(try s.classify(pixelBuffer: buffer, k: 3), name)

        // Bad arguments.
        let cases: [(Int, Int, Int, Int, KestrelError.Code)] = [
            (0, h, w * 4, 1, .invalidArgument), (w, h, w * 4 - 1, 1, .invalidArgument),
            (w, h + 1, w * 4, 1, .bufferTooSmall), (w, h, w * 4, 0, .invalidArgument), (w, h, w * 4, 11, .invalidArgument),
        ]
        try rgbx.withUnsafeBytes { px in
            for (w2, h2, bpr, k, code) in cases {
                XCTAssertThrowsError(try s.classify(pixels: px, width: w2, height: h2, bytesPerRow: bpr,
                                                    format: .rgba8888, k: k)) {
                    XCTAssertEqual(($0 as? KestrelError)?.code, code)
                }
            }
        }
        var yuv: CVPixelBuffer?
        CVPixelBufferCreate(nil, 8, 8, kCVPixelFormatType_420YpCbCr8BiPlanarVideoRange, nil, &yuv)
        XCTAssertThrowsError(try s.classify(pixelBuffer: yuv!)) {
            XCTAssertEqual(($0 as? KestrelError)?.code, .unsupported)
        }
    }
}
