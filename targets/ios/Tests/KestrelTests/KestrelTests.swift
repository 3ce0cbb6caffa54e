import XCTest
@testable import Kestrel

/// Runs on a Mac (`swift test` after ./build-xcframework.sh) with KESTREL_TEST_DIR pointing at a
/// fixture directory made by `cargo test -p kestrel-ffi --test c_abi`
/// (target/tmp/kestrel-ffi-c: image.kes, image_input.bin, image_expected.bin).
final class KestrelTests: XCTestCase {
    func testImageModelMatchesPyTorch() throws {
        guard let dir = ProcessInfo.processInfo.environment["KESTREL_TEST_DIR"] else {
            throw XCTSkip("set KESTREL_TEST_DIR to a directory made by the kestrel-ffi c_abi test")
        }
        let model = try Model(path: dir + "/image.kes")
        XCTAssertEqual(model.inputs.first?.shape, [1, 64, 64])
        if Backend.wgpu.isAvailable {
            let gpu = try model.session(capacity: 4, backend: .wgpu)
            XCTAssertEqual(gpu.backend, .wgpu)
            XCTAssertFalse(gpu.device.hasPrefix("cpu"))
            XCTAssertFalse(gpu.gpuF16)
            let half = try model.session(capacity: 4, backend: .wgpu, gpuPrecision: .auto)
            XCTAssertEqual(half.backend, .wgpu)
        } else {
            XCTAssertThrowsError(try model.session(capacity: 4, backend: .wgpu))
        }
        let session = try model.session(capacity: 4)
        XCTAssertFalse(try model.session(capacity: 1, backend: .cpu, gpuPrecision: .f16).gpuF16)
        XCTAssert(session.backend == .cpu || Backend.wgpu.isAvailable, "AUTO on \(session.device)")
        func floats(_ name: String) throws -> [Float] {
            let data = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))
            return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        }
        session.profiling = true
        let y = try session.run([.float32(try floats("image_input.bin"))])[0]
        let want = try floats("image_expected.bin")
        XCTAssertEqual(y.count, want.count)
        for (a, b) in zip(y, want) {
            XCTAssertEqual(a, b, accuracy: 1e-4 * (1 + abs(b)))
        }
        XCTAssertFalse(session.profile().isEmpty)
        XCTAssert([.cpuWallClock, .gpuTimestamps].contains(session.profileSource))
        XCTAssertThrowsError(try session.run([.int32([1, 2, 3])]))
    }
}
