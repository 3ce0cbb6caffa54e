// Image classification (issue 35, item 4): `Session.classify` over the C ABI's
// `kestrel_classify`, which preprocesses an 8-bit image as the model file records (the code
// `kestrel classify` runs, so the same pixels give the same top-k bit for bit). Not compiled
// here (no Swift toolchain on Linux CI): reviewed only; the C function under it is tested
// (targets/ffi, apps/kestrel-cli/tests/sdk_classify.rs), and XCTest `testClassify*` covers this
// file on a Mac.
import Foundation
import KestrelFFI
#if canImport(CoreGraphics)
import CoreGraphics
#endif
#if canImport(CoreVideo)
import CoreVideo
#endif

/// The byte layout of an 8-bit image (`KestrelPixelFormat`). Alpha is ignored: never
/// premultiplied or blended.
public enum PixelFormat: UInt32, Sendable {
    /// R, G, B, A bytes (`kCVPixelFormatType_32RGBA`; a CGContext with `noneSkipLast`).
    case rgba8888 = 0
    /// B, G, R, A bytes (`kCVPixelFormatType_32BGRA`: camera frames).
    case bgra8888 = 1
    /// R, G, B bytes (`kCVPixelFormatType_24RGB`).
    case rgb888 = 2
    /// One grey byte per pixel (`kCVPixelFormatType_OneComponent8`).
    case grey8 = 3

    /// Bytes per pixel.
    public var bytesPerPixel: Int {
        switch self {
        case .rgba8888, .bgra8888: return 4
        case .rgb888: return 3
        case .grey8: return 1
        }
    }
}

/// One predicted class: its index in the model's output, its label (the index as text when the
/// model has none) and its probability.
public struct Classification: Equatable, Sendable {
    public let index: Int
    public let label: String
    public let probability: Float
}

extension Session {
    /// Classifies an 8-bit image: preprocessed as the model file records (colour conversion,
    /// antialiased resize, centre crop, mean/std), run at batch 1, softmax, and the `k` most
    /// probable classes, best first (equal probabilities: the lower index first) — the numbers
    /// `kestrel classify` gives for an image file decoding to these pixels. The image is `height`
    /// rows of `width` pixels of `format`, rows `bytesPerRow` bytes apart (at least `width ×
    /// bytesPerPixel`; the last row needs no padding); `pixels` must hold them all (checked here,
    /// before the C call: `.bufferTooSmall`). Errors: `.invalidArgument` for a 0 size, a short
    /// row stride or `k` outside 1...classes; `.unsupported` for a model without image
    /// preprocessing; `.busy` while another thread runs the session. The session keeps its
    /// buffers between calls (a CPU session allocates nothing natively after the first call for
    /// images of one size); the pixels are only borrowed for the call.
    public func classify(pixels: UnsafeRawBufferPointer, width: Int, height: Int, bytesPerRow: Int,
                         format: PixelFormat, k: Int = 1) throws -> [Classification] {
        guard width > 0, height > 0 else {
            throw KestrelError(.invalidArgument, "the image is empty (\(width)x\(height) pixels)")
        }
        guard k >= 1 else { throw KestrelError(.invalidArgument, "k = \(k): at least 1") }
        let (row, o1) = width.multipliedReportingOverflow(by: format.bytesPerPixel)
        guard !o1, bytesPerRow >= row else {
            throw KestrelError(.invalidArgument, "bytesPerRow \(bytesPerRow) is less than a row's \(row) bytes")
        }
        let (rows, o2) = (height - 1).multipliedReportingOverflow(by: bytesPerRow)
        let (needed, o3) = rows.addingReportingOverflow(row)
        guard !o2, !o3, pixels.count >= needed else {
            throw KestrelError(.bufferTooSmall, "the pixel buffer holds \(pixels.count) bytes; a \(width)x\(height) " +
                               "image with \(bytesPerRow) bytes per row needs \(needed)")
        }
        guard let base = pixels.baseAddress else { throw KestrelError(.nullPointer, "the pixel buffer has no memory") }
        var out = [KestrelClass](repeating: KestrelClass(index: 0, probability: 0, label: nil), count: k)
        let h = try handle.get()
        try out.withUnsafeMutableBufferPointer { o in
            try check(kestrel_classify(h, base.assumingMemoryBound(to: UInt8.self), width, height, bytesPerRow,
                                       format.rawValue, k, o.baseAddress))
        }
        // Labels are owned by the model, which this session keeps alive: copied into Strings here.
        return out.map { c in
            Classification(index: Int(c.index), label: c.label.map { String(cString: $0) } ?? String(c.index),
                           probability: c.probability)
        }
    }

    #if canImport(CoreGraphics)
    /// Classifies a `CGImage` (see `classify(pixels:…)`). The image is drawn, unscaled, into an
    /// 8-bit bitmap in its own colour space — grey images into a grey bitmap (`.grey8`), others
    /// into RGBX (`.rgba8888`, alpha skipped) — so an opaque PNG gives exactly `kestrel
    /// classify`'s result for that file. Transparent pixels are composited over black by the
    /// drawing (the CLI reads their colour as stored): for those, pass the unpremultiplied pixels
    /// to `classify(pixels:…)` yourself. A colour space that is neither grey nor RGB (CMYK, Lab)
    /// is converted to sRGB by Core Graphics.
    public func classify(cgImage image: CGImage, k: Int = 1) throws -> [Classification] {
        let width = image.width, height = image.height
        guard width > 0, height > 0 else {
            throw KestrelError(.invalidArgument, "the image is empty (\(width)x\(height) pixels)")
        }
        let grey = image.colorSpace?.model == .monochrome
        let format: PixelFormat = grey ? .grey8 : .rgba8888
        let space: CGColorSpace
        if let own = image.colorSpace, own.model == (grey ? .monochrome : .rgb) {
            space = own
        } else if grey {
            space = CGColorSpaceCreateDeviceGray()
        } else {
            space = CGColorSpace(name: CGColorSpace.sRGB) ?? CGColorSpaceCreateDeviceRGB()
        }
        let bytesPerRow = width * format.bytesPerPixel
        let info = grey ? CGImageAlphaInfo.none.rawValue : CGImageAlphaInfo.noneSkipLast.rawValue
        var bytes = [UInt8](repeating: 0, count: bytesPerRow * height)
        return try bytes.withUnsafeMutableBytes { buf in
            guard let ctx = CGContext(data: buf.baseAddress, width: width, height: height, bitsPerComponent: 8,
                                      bytesPerRow: bytesPerRow, space: space, bitmapInfo: info) else {
                throw KestrelError(.unsupported, "cannot make an 8-bit \(grey ? "grey" : "RGB") bitmap of the image")
            }
            ctx.interpolationQuality = .none
            ctx.setBlendMode(.copy)
            ctx.draw(image, in: CGRect(x: 0, y: 0, width: width, height: height))
            return try classify(pixels: UnsafeRawBufferPointer(buf), width: width, height: height,
                                bytesPerRow: bytesPerRow, format: format, k: k)
        }
    }
    #endif

    #if canImport(CoreVideo)
    /// Classifies a `CVPixelBuffer` in place (see `classify(pixels:…)`): `kCVPixelFormatType_32BGRA`
    /// (the camera's usual output: set `kCVPixelBufferPixelFormatTypeKey` on
    /// `AVCaptureVideoDataOutput.videoSettings`), `_32RGBA`, `_24RGB` or `_OneComponent8`, its
    /// rows `CVPixelBufferGetBytesPerRow` apart. Planar YUV formats (`420v`, `420f`) are
    /// `.unsupported`: convert them first (`VTPixelTransferSession`, vImage). The buffer is
    /// locked read-only for the call.
    public func classify(pixelBuffer: CVPixelBuffer, k: Int = 1) throws -> [Classification] {
        let format: PixelFormat
        let type = CVPixelBufferGetPixelFormatType(pixelBuffer)
        switch type {
        case kCVPixelFormatType_32BGRA: format = .bgra8888
        case kCVPixelFormatType_32RGBA: format = .rgba8888
        case kCVPixelFormatType_24RGB: format = .rgb888
        case kCVPixelFormatType_OneComponent8: format = .grey8
        default:
            throw KestrelError(.unsupported, "pixel buffer format \(type) is not 32BGRA, 32RGBA, 24RGB or " +
                               "OneComponent8 (convert planar YUV with VTPixelTransferSession first)")
        }
        guard !CVPixelBufferIsPlanar(pixelBuffer) else {
            throw KestrelError(.unsupported, "planar pixel buffers are not supported")
        }
        guard CVPixelBufferLockBaseAddress(pixelBuffer, .readOnly) == kCVReturnSuccess else {
            throw KestrelError(.invalidArgument, "cannot lock the pixel buffer")
        }
        defer { CVPixelBufferUnlockBaseAddress(pixelBuffer, .readOnly) }
        guard let base = CVPixelBufferGetBaseAddress(pixelBuffer) else {
            throw KestrelError(.nullPointer, "the pixel buffer has no memory")
        }
        let width = CVPixelBufferGetWidth(pixelBuffer), height = CVPixelBufferGetHeight(pixelBuffer)
        let bytesPerRow = CVPixelBufferGetBytesPerRow(pixelBuffer)
        let size = CVPixelBufferGetDataSize(pixelBuffer)
        let count = size > 0 ? size : bytesPerRow * height
        return try classify(pixels: UnsafeRawBufferPointer(start: base, count: count), width: width, height: height,
                            bytesPerRow: bytesPerRow, format: format, k: k)
    }
    #endif
}
