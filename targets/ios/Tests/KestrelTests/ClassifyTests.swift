import XCTest
import CoreGraphics
import CoreVideo
import ImageIO
@testable import Kestrel

/// `Session.classify` against `kestrel classify` (issue 35, item 4). Written for `swift test` on a
/// Mac, not run here (no Swift toolchain on Linux CI). The expected top-3 are what `kestrel
/// classify --json --top 3 --batch 1` prints for the bundled model on this machine: the test runs
/// the CLI of the repository this package sits in (`cargo run`), as kotlin-check.sh does for the
/// JVM, so the two agree bit for bit whatever the kernels give (the numbers are never written here:
/// NEON and AVX-512 differ in the last bits, and a kernel change may move them).
final class ClassifyTests: XCTestCase {
    /// The repository root (this file is targets/ios/Tests/KestrelTests/ClassifyTests.swift).
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let samples = ["fmnist/ankle-boot/00000.png", "preprocess/coat-rgb-56x56.png"]
    let modelPath = "apps/kestrel-cli/models/fmnist_vit_super.int8.kes"

    /// Per sample, the CLI's top-3 as (index, label, probability).
    lazy var cliTop3: [String: [(Int, String, Double)]] = {
        let cli = Process()
        cli.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        cli.currentDirectoryURL = self.root
        cli.arguments = ["cargo", "run", "-q", "--release", "-p", "kestrel-rt-cli", "--", "classify", "--model",
                         self.modelPath, "--json", "--top", "3", "--batch", "1"]
            + self.samples.map { "apps/kestrel-cli/samples/" + $0 }
        let out = Pipe()
        cli.standardOutput = out
        guard (try? cli.run()) != nil else { return [:] }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        cli.waitUntilExit()
        guard cli.terminationStatus == 0,
              let images = (try? JSONSerialization.jsonObject(with: data)) as? [[String: Any]] else { return [:] }
        var top: [String: [(Int, String, Double)]] = [:]
        for image in images {
            guard let path = image["path"] as? String, let preds = image["predictions"] as? [[String: Any]] else { continue }
            let name = String(path.dropFirst("apps/kestrel-cli/samples/".count))
            top[name] = preds.compactMap { p in
                guard let i = p["index"] as? Int, let l = p["label"] as? String, let q = p["probability"] as? Double
                else { return nil }
                return (i, l, q)
            }
        }
        return top
    }()

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
        guard let want = cliTop3[name], want.count == 3 else {
            return XCTFail("`cargo run -p kestrel-rt-cli -- classify --json` gave no top-3 for \(name)", file: file, line: line)
        }
        XCTAssertEqual(got.count, want.count, file: file, line: line)
        for (g, w) in zip(got, want) {
            XCTAssertEqual(g.index, w.0, file: file, line: line)
            XCTAssertEqual(g.label, w.1, file: file, line: line)
            XCTAssertEqual(Double(g.probability), w.2, "\(name): bit for bit", file: file, line: line)
        }
    }

    func testClassifyCGImageMatchesTheCli() throws {
        let s = try session()
        for name in samples {
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
