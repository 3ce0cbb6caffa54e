import Foundation
import KestrelFFI

/// A Kestrel error: the C status code (`KESTREL_ERR_*`) and the library's message.
public struct KestrelError: Error, CustomStringConvertible {
    /// The KestrelStatus code.
    public let code: Int
    /// What went wrong.
    public let message: String

    public var description: String { "\(String(cString: kestrel_status_name(Int32(code)))): \(message)" }
}

/// Turns a KestrelStatus into a thrown error.
@inline(__always)
func check(_ status: KestrelStatus) throws {
    if status.rawValue != 0 {
        throw KestrelError(code: Int(status.rawValue), message: String(cString: kestrel_last_error()))
    }
}

/// Which engine runs a session.
public enum Backend: UInt32 {
    /// The CPU runtime (always available).
    case cpu = 0
    /// The wgpu backend on Metal. `Model.session` throws KESTREL_ERR_NO_GPU when no Metal device
    /// can be used, KESTREL_ERR_UNSUPPORTED in a library built without it.
    case wgpu = 1
    /// The GPU when a hardware adapter takes the model, else the CPU (never fails for lack of a GPU).
    case auto = 2

    /// Whether a session on this backend can be created on this device (`.wgpu` opens the GPU to tell).
    public var isAvailable: Bool {
        var ok = false
        return kestrel_backend_available(rawValue, &ok).rawValue == 0 && ok
    }
}

/// The arithmetic of a GPU session's dot-product kernels (CPU sessions ignore it).
public enum GpuPrecision: UInt32 {
    /// f32 throughout: the CPU runtime's arithmetic (the default).
    case f32 = 0
    /// f16 products with f32 accumulation (relative errors of about 1e-3). A device without
    /// SHADER_F16 refuses a `.wgpu` session with KESTREL_ERR_UNSUPPORTED (`.auto`: the CPU instead).
    case f16 = 1
    /// f16 where the device has SHADER_F16, else f32 (never an error).
    case auto = 2
}

/// How the times of `Session.profile()` were measured.
public enum TimingSource: UInt32 {
    /// The last run was not profiled.
    case none = 0
    /// CPU backend: wall clock around each op.
    case cpuWallClock = 1
    /// GPU backend: timestamp queries around each op's compute pass (GPU time only).
    case gpuTimestamps = 2
    /// GPU without timestamp queries: no per-op times, only `profileWallNanoseconds`.
    case gpuSubmission = 3
}

/// Element type of a graph input or output.
public enum DType: UInt32 {
    case float32 = 0, int32 = 1, int64 = 2
}

/// A graph input or output: name, element type, per-sample shape (no batch axis).
public struct TensorInfo {
    public let name: String
    public let dtype: DType
    public let shape: [Int]
    /// Elements per sample.
    public var count: Int { shape.reduce(1, *) }

    init(_ info: KestrelTensorInfo) {
        name = String(cString: info.name)
        dtype = DType(rawValue: info.dtype) ?? .float32
        var dims = info.dims
        shape = withUnsafeBytes(of: &dims) { Array($0.bindMemory(to: Int.self).prefix(info.rank)) }
    }
}

/// One input batch: the values of `batch` samples, row-major.
public enum TensorData {
    case float32([Float])
    case int32([Int32])
    case int64([Int64])

    var count: Int {
        switch self {
        case .float32(let v): return v.count
        case .int32(let v): return v.count
        case .int64(let v): return v.count
        }
    }
}

/// One node's time in a profiled run.
public struct OpTiming {
    public let node: Int
    public let op: String
    public let nanoseconds: UInt64
}

/// A validated `.kes` model. Thread-safe. Sessions keep their own reference to it.
public final class Model {
    let handle: OpaquePointer

    /// Memory-maps and validates a model file (e.g. `Bundle.main.path(forResource:ofType:)`).
    public init(path: String) throws {
        var h: OpaquePointer? = nil
        try check(kestrel_model_load_path(path, &h))
        handle = h!
    }

    /// Copies and validates a model held in memory.
    public init(data: Data) throws {
        var h: OpaquePointer? = nil
        try data.withUnsafeBytes { (buf: UnsafeRawBufferPointer) in
            try check(kestrel_model_load_memory(buf.bindMemory(to: UInt8.self).baseAddress, buf.count, &h))
        }
        handle = h!
    }

    deinit { _ = kestrel_model_free(handle) }

    private func string(_ f: (OpaquePointer, UnsafeMutablePointer<UnsafePointer<CChar>?>) -> KestrelStatus) throws -> String {
        var p: UnsafePointer<CChar>? = nil
        try check(f(handle, &p))
        return String(cString: p!)
    }

    public var name: String { (try? string { kestrel_model_name($0, $1) }) ?? "" }
    public var task: String { (try? string { kestrel_model_task($0, $1) }) ?? "" }

    public var labels: [String] {
        var n = 0
        guard (try? check(kestrel_model_label_count(handle, &n))) != nil else { return [] }
        return (0..<n).compactMap { i in
            var p: UnsafePointer<CChar>? = nil
            return (try? check(kestrel_model_label(handle, i, &p))).map { String(cString: p!) }
        }
    }

    public var inputs: [TensorInfo] { infos(count: kestrel_model_input_count, info: kestrel_model_input_info) }
    public var outputs: [TensorInfo] { infos(count: kestrel_model_output_count, info: kestrel_model_output_info) }

    private func infos(
        count: (OpaquePointer?, UnsafeMutablePointer<Int>?) -> KestrelStatus,
        info: (OpaquePointer?, Int, UnsafeMutablePointer<KestrelTensorInfo>?) -> KestrelStatus
    ) -> [TensorInfo] {
        var n = 0
        guard count(handle, &n).rawValue == 0 else { return [] }
        return (0..<n).compactMap { i in
            var t = KestrelTensorInfo()
            return info(handle, i, &t).rawValue == 0 ? TensorInfo(t) : nil
        }
    }

    /// A session for batches of 1...capacity samples; its arena is allocated here, once (GPU: f32).
    public func session(capacity: Int = 1, backend: Backend = .auto) throws -> Session {
        try session(capacity: capacity, backend: backend, gpuPrecision: .f32)
    }

    /// `session(capacity:backend:)` with the GPU's arithmetic `gpuPrecision` (see `GpuPrecision`;
    /// CPU sessions ignore it).
    public func session(capacity: Int, backend: Backend, gpuPrecision: GpuPrecision) throws -> Session {
        var s: OpaquePointer? = nil
        try check(kestrel_session_new_with_precision(handle, backend.rawValue, capacity, gpuPrecision.rawValue, &s))
        return Session(handle: s!, model: self)
    }
}

/// A model bound to an arena. Not thread-safe: one session per thread.
public final class Session {
    let handle: OpaquePointer
    /// The model, for its shapes (the C session holds its own reference too).
    public let model: Model

    init(handle: OpaquePointer, model: Model) {
        self.handle = handle
        self.model = model
    }

    deinit { _ = kestrel_session_free(handle) }

    /// The backend actually running this session.
    public var backend: Backend {
        var b: UInt32 = 0
        _ = kestrel_session_backend(handle, &b)
        return Backend(rawValue: b) ?? .cpu
    }

    /// What runs the session, for logs: "cpu", the GPU adapter, or "cpu (auto: reason)".
    public var device: String {
        var p: UnsafePointer<CChar>? = nil
        guard kestrel_session_device(handle, &p).rawValue == 0, let p else { return "" }
        return String(cString: p)
    }

    /// Whether the dot products compute in f16 (see `GpuPrecision`); false on the CPU.
    public var gpuF16: Bool {
        var v = false
        return kestrel_session_gpu_f16(handle, &v).rawValue == 0 && v
    }

    /// How the last run's `profile()` was measured.
    public var profileSource: TimingSource {
        var v: UInt32 = 0
        _ = kestrel_session_profile_source(handle, &v)
        return TimingSource(rawValue: v) ?? .none
    }

    /// Wall time of the last profiled run in ns (GPU: submission to readback); 0 if not profiled.
    public var profileWallNanoseconds: UInt64 {
        var v: UInt64 = 0
        _ = kestrel_session_profile_wall_nanos(handle, &v)
        return v
    }

    /// Per-op timing of later runs (see `profile()`).
    public var profiling: Bool = false {
        didSet { _ = kestrel_session_set_profiling(handle, profiling) }
    }

    /// Runs a batch: one `TensorData` per graph input, each `batch × per-sample` values.
    /// Returns every output (`batch × per-sample` floats).
    public func run(_ inputs: [TensorData]) throws -> [[Float]] {
        let ins = model.inputs, outs = model.outputs
        guard let first = ins.first, inputs.count == ins.count, first.count > 0 else {
            throw KestrelError(code: 8, message: "expected \(ins.count) inputs, got \(inputs.count)")
        }
        let batch = inputs[0].count / first.count
        // Stable copies of the inputs and their shapes for the duration of the call.
        var buffers: [UnsafeMutableRawPointer] = []
        var shapes: [UnsafeMutablePointer<Int>] = []
        defer {
            buffers.forEach { $0.deallocate() }
            shapes.forEach { $0.deallocate() }
        }
        func shape(_ info: TensorInfo) -> UnsafeMutablePointer<Int> {
            let dims = [batch] + info.shape
            let p = UnsafeMutablePointer<Int>.allocate(capacity: dims.count)
            p.initialize(from: dims, count: dims.count)
            shapes.append(p)
            return p
        }
        func copy<T>(_ v: [T]) -> UnsafeMutableRawPointer {
            let p = UnsafeMutableRawPointer.allocate(byteCount: max(1, v.count * MemoryLayout<T>.stride),
                                                     alignment: MemoryLayout<T>.alignment)
            v.withUnsafeBytes { p.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            buffers.append(p)
            return p
        }
        var tensors: [KestrelTensor] = []
        for (data, info) in zip(inputs, ins) {
            let (dtype, ptr): (DType, UnsafeMutableRawPointer)
            switch data {
            case .float32(let v): (dtype, ptr) = (.float32, copy(v))
            case .int32(let v): (dtype, ptr) = (.int32, copy(v))
            case .int64(let v): (dtype, ptr) = (.int64, copy(v))
            }
            tensors.append(KestrelTensor(dtype: dtype.rawValue, data: UnsafeRawPointer(ptr), shape: UnsafePointer(shape(info)),
                                         rank: info.shape.count + 1))
        }
        var results = outs.map { [Float](repeating: 0, count: batch * $0.count) }
        var outputs: [KestrelOutput] = []
        let outPtrs = results.indices.map { i -> UnsafeMutablePointer<Float> in
            let p = UnsafeMutablePointer<Float>.allocate(capacity: max(1, results[i].count))
            buffers.append(UnsafeMutableRawPointer(p))
            return p
        }
        for (i, info) in outs.enumerated() {
            outputs.append(KestrelOutput(data: outPtrs[i], shape: UnsafePointer(shape(info)), rank: info.shape.count + 1))
        }
        try check(kestrel_session_run(handle, tensors, tensors.count, outputs, outputs.count, nil))
        for i in results.indices {
            results[i] = Array(UnsafeBufferPointer(start: outPtrs[i], count: results[i].count))
        }
        return results
    }

    /// Per-op times of the last run (empty unless `profiling` was on); see `profileSource`.
    public func profile() -> [OpTiming] {
        var n = 0
        guard kestrel_session_profile_count(handle, &n).rawValue == 0 else { return [] }
        return (0..<n).compactMap { i in
            var t = KestrelOpTiming()
            guard kestrel_session_profile_entry(handle, i, &t).rawValue == 0 else { return nil }
            return OpTiming(node: Int(t.node), op: String(cString: t.op), nanoseconds: t.nanos)
        }
    }
}
