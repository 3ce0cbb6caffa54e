import XCTest
import KestrelFFI
@testable import Kestrel

/// Runs on a Mac (`swift test` after ./build-xcframework.sh) with KESTREL_TEST_DIR pointing at a
/// fixture directory made by `cargo test -p kestrel-rt-ffi --test suite c_abi::`
/// (target/tmp/kestrel-ffi-c: image.kes, image_input.bin, image_expected.bin).
final class KestrelTests: XCTestCase {
    func testImageModelMatchesPyTorch() throws {
        guard let dir = ProcessInfo.processInfo.environment["KESTREL_TEST_DIR"] else {
            throw XCTSkip("set KESTREL_TEST_DIR to a directory made by the kestrel-rt-ffi c_abi test")
        }
        let model = try Model(path: dir + "/image.kes")
        XCTAssertEqual(try model.inputs.first?.shape, [1, 64, 64])
        if Backend.wgpu.isAvailable {
            let gpu = try model.session(capacity: 4, backend: .wgpu)
            XCTAssertEqual(try gpu.backend, .wgpu)
            XCTAssertFalse(try gpu.device.hasPrefix("cpu"))
            XCTAssertFalse(try gpu.gpuF16)
            let half = try model.session(capacity: 4, backend: .wgpu, gpuPrecision: .auto)
            XCTAssertEqual(try half.backend, .wgpu)
        } else {
            XCTAssertThrowsError(try model.session(capacity: 4, backend: .wgpu))
        }
        let session = try model.session(capacity: 4)
        XCTAssertFalse(try model.session(capacity: 1, backend: .cpu, gpuPrecision: .f16).gpuF16)
        let device = try session.device
        XCTAssert(try session.backend == .cpu || Backend.wgpu.isAvailable, "AUTO on \(device)")
        func floats(_ name: String) throws -> [Float] {
            let data = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))
            return data.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        }
        try session.setProfiling(true)
        let y = try session.run([.float32(try floats("image_input.bin"))])[0]
        let want = try floats("image_expected.bin")
        XCTAssertEqual(y.count, want.count)
        for (a, b) in zip(y, want) {
            XCTAssertEqual(a, b, accuracy: 1e-4 * (1 + abs(b)))
        }
        XCTAssertFalse(try session.profile().isEmpty)
        XCTAssert([.cpuWallClock, .gpuTimestamps].contains(try session.profileSource))
        XCTAssertThrowsError(try session.run([.int32([1, 2, 3])]))
    }

    /// Issue 34: bounded dims. bounded_dims.kes (copied into the fixture directory by the c_abi
    /// test from targets/ffi/tests/data) takes x [sequence, 8], `sequence` in 2...16; run at several
    /// lengths it matches the graphs built at 5 and 12; bad shapes are `.shape` and leave the
    /// session at the bound.
    func testBoundedDims() throws {
        guard let dir = ProcessInfo.processInfo.environment["KESTREL_TEST_DIR"] else {
            throw XCTSkip("set KESTREL_TEST_DIR to a directory made by the kestrel-rt-ffi c_abi test")
        }
        let model = try Model(path: dir + "/bounded_dims.kes")
        XCTAssertEqual(try model.dims, [BoundedDim(name: "sequence", min: 2, max: 16)])
        XCTAssertEqual(try model.inputs.first?.shape, [16, 8])
        let session = try model.session(capacity: 2, backend: .cpu)
        XCTAssertEqual(session.inputs.first?.shape, [16, 8])
        for t in [2, 5, 9, 12, 16] {
            try session.setInputShapes([[t, 8]])
            XCTAssertEqual(try session.inputShape(0), [t, 8])
            XCTAssertEqual(try session.outputShape(0), [2, t - 1, 4])
            XCTAssertEqual(session.outputs.map { $0.shape }, [[2, t - 1, 4], [2, 4]])
            let x = (0..<(2 * t * 8)).map { Float(($0 * 37 + t * 11) % 101) / 50 - 1 }
            let y = try session.run([.float32(x)])
            XCTAssertEqual(y.map { $0.count }, [2 * 2 * (t - 1) * 4, 2 * 2 * 4])
            XCTAssertEqual(try session.run([.float32(x)], shapes: [[t, 8]]), y)
            if t == 5 || t == 12 {
                let fixed = try Model(path: dir + "/bounded_dims_fixed_t\(t).kes")
                XCTAssertEqual(try fixed.dims, [])
                let want = try fixed.session(capacity: 2, backend: .cpu).run([.float32(x)])
                for (g, w) in zip(y, want) {
                    XCTAssertEqual(g.count, w.count)
                    for (a, b) in zip(g, w) { XCTAssertEqual(a, b, accuracy: 1e-6) }
                }
            }
        }
        XCTAssertThrowsError(try session.setInputShapes([[17, 8]])) {
            let e = $0 as? KestrelError
            XCTAssertEqual(e?.code, .shape)
            XCTAssert(e?.message.contains("2..=16") ?? false, e?.message ?? "")
        }
        XCTAssertEqual(session.inputs.first?.shape, [16, 8])
        XCTAssertThrowsError(try session.setInputShapes([[5]]))
        XCTAssertThrowsError(try session.setInputShapes([[5, 8], [5, 8]]))
        XCTAssertThrowsError(try session.setInputShapes([[-5, 8]]))
        XCTAssertThrowsError(try session.outputShape(2)) { XCTAssertEqual(($0 as? KestrelError)?.code, .index) }
    }

    /// A panic inside the library is caught at the C boundary and becomes `.panic`.
    func testPanicIsCaughtAtTheBoundary() {
        XCTAssertEqual(kestrel_selftest_panic(), KESTREL_ERR_PANIC)
        XCTAssertThrowsError(try check(kestrel_selftest_panic())) {
            XCTAssertEqual(($0 as? KestrelError)?.code, .panic)
            XCTAssertFalse(($0 as? KestrelError)?.message.isEmpty ?? true)
        }
    }

    /// Issue 35: a session closed while another thread runs it, a model closed while other threads
    /// read it, racing closes. Every loser gets `KestrelError.closed` (or `.busy`); nothing crashes.
    func testCloseRacingUse() throws {
        guard let dir = ProcessInfo.processInfo.environment["KESTREL_TEST_DIR"] else {
            throw XCTSkip("set KESTREL_TEST_DIR to a directory made by the kestrel-rt-ffi c_abi test")
        }
        let path = dir + "/image.kes"
        let model = try Model(path: path)
        let x = [Float](repeating: 0.5, count: try model.inputs[0].count)
        let want = try model.session(capacity: 1, backend: .cpu).run([.float32(x)])[0]
        for i in 0..<200 {
            let s = try model.session(capacity: 1, backend: .cpu)
            let done = expectation(description: "runner \(i)")
            DispatchQueue.global().async {
                while true {
                    do {
                        XCTAssertEqual(try s.run([.float32(x)])[0], want)
                        XCTAssertEqual(try s.backend, .cpu, "a fact during a run")
                    } catch let e as KestrelError {
                        XCTAssertEqual(e.code, .closed, "\(e)")
                        break
                    } catch {
                        XCTFail("\(error)")
                        break
                    }
                }
                done.fulfill()
            }
            usleep(UInt32.random(in: 0..<2000))
            DispatchQueue.global().async { s.close() }
            s.close()
            wait(for: [done], timeout: 30)
        }
        for _ in 0..<100 {
            let m = try Model(path: path)
            let kept = try m.session(capacity: 1, backend: .cpu)
            let done = expectation(description: "reader")
            DispatchQueue.global().async {
                while true {
                    do {
                        _ = try m.labels
                        _ = try m.inputs
                        _ = try m.session(capacity: 1, backend: .cpu)
                    } catch let e as KestrelError {
                        XCTAssertEqual(e.code, .closed, "\(e)")
                        break
                    } catch {
                        XCTFail("\(error)")
                        break
                    }
                }
                done.fulfill()
            }
            usleep(UInt32.random(in: 0..<1000))
            m.close()
            m.close()
            wait(for: [done], timeout: 30)
            XCTAssertEqual(try kept.run([.float32(x)])[0], want, "a session outlives its closed model")
            XCTAssertThrowsError(try m.name) { XCTAssertEqual(($0 as? KestrelError)?.code, .closed) }
            XCTAssertEqual(KestrelError(.closed, "x").errorDescription, "KESTREL_ERR_CLOSED: x")
        }
    }

    /// The thread count: outputs bit-identical for 1...4 threads, bad counts refused.
    func testThreadsDoNotChangeOutputs() throws {
        guard let dir = ProcessInfo.processInfo.environment["KESTREL_TEST_DIR"] else {
            throw XCTSkip("set KESTREL_TEST_DIR to a directory made by the kestrel-rt-ffi c_abi test")
        }
        XCTAssert((1...4).contains(Kestrel.defaultThreads))
        let model = try Model(path: dir + "/image.kes")
        let per = try model.inputs[0].count
        let x = (0..<(4 * per)).map { Float(($0 * 37) % 101) / 50 - 1 }
        try Kestrel.setThreads(1)
        let want = try model.session(capacity: 4, backend: .cpu).run([.float32(x)])[0]
        for n in 2...4 {
            XCTAssertEqual(try Kestrel.setThreads(n), n)
            XCTAssertEqual(try model.session(capacity: 4, backend: .cpu).run([.float32(x)])[0], want)
        }
        XCTAssertThrowsError(try Kestrel.setThreads(257))
        XCTAssertThrowsError(try Kestrel.setThreads(-1))
        XCTAssertEqual(Kestrel.threads, 4)
        XCTAssertEqual(try Kestrel.setThreads(0), Kestrel.defaultThreads)
    }

    /// Buffer-pointer runs: the same outputs as `run([TensorData])`, written into a reused buffer;
    /// short buffers refused.
    func testBufferPointerRunsWithoutCopies() throws {
        guard let dir = ProcessInfo.processInfo.environment["KESTREL_TEST_DIR"] else {
            throw XCTSkip("set KESTREL_TEST_DIR to a directory made by the kestrel-rt-ffi c_abi test")
        }
        let model = try Model(path: dir + "/image.kes")
        let per = try model.inputs[0].count, outPer = try model.outputs[0].count
        let x = (0..<(4 * per)).map { Float(($0 * 29) % 97) / 48 - 1 }
        let session = try model.session(capacity: 4, backend: .cpu)
        let want = try session.run([.float32(x)])[0]
        var y = [Float](repeating: .nan, count: 4 * outPer)
        try x.withUnsafeBufferPointer { xb in
            try y.withUnsafeMutableBufferPointer { yb in
                for _ in 0..<10 { try session.run(xb, into: yb, batch: 4) }
                XCTAssertThrowsError(try session.run(UnsafeBufferPointer(rebasing: xb[0..<(per - 1)]), into: yb)) {
                    XCTAssertEqual(($0 as? KestrelError)?.code, .bufferTooSmall)
                }
                XCTAssertThrowsError(try session.run(xb, into: UnsafeMutableBufferPointer(rebasing: yb[0..<1]))) {
                    XCTAssertEqual(($0 as? KestrelError)?.code, .bufferTooSmall)
                }
                XCTAssertThrowsError(try session.run(xb, into: yb, batch: 0)) {
                    XCTAssertEqual(($0 as? KestrelError)?.code, .shape)
                }
            }
        }
        XCTAssertEqual(y, want)
    }

    /// `Model(contentsOf:)` maps the file; a non-file URL is refused.
    func testModelFromURLIsMapped() throws {
        guard let dir = ProcessInfo.processInfo.environment["KESTREL_TEST_DIR"] else {
            throw XCTSkip("set KESTREL_TEST_DIR to a directory made by the kestrel-rt-ffi c_abi test")
        }
        let model = try Model(contentsOf: URL(fileURLWithPath: dir + "/image.kes"))
        XCTAssertEqual(try model.storage, .mapped)
        XCTAssertEqual(try Model(data: Data(contentsOf: URL(fileURLWithPath: dir + "/image.kes"))).storage, .copied)
        XCTAssertThrowsError(try Model(contentsOf: URL(string: "https://example.com/model.kes")!)) {
            XCTAssertEqual(($0 as? KestrelError)?.code, .invalidArgument)
        }
    }
}
