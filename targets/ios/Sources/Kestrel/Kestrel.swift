import Foundation
import KestrelFFI

/// A Kestrel error: the C status (`KESTREL_ERR_*`) as a `Code`, and the library's message. Every
/// failure of the SDK is one, including a call on a closed `Model` or `Session` (`.closed`, also
/// when another thread closed it during the call) and a run of a session another thread is running
/// (`.busy`).
public struct KestrelError: Error, LocalizedError, CustomStringConvertible, Equatable, Sendable {
    /// The kinds of failure (the C ABI's `KestrelStatus` codes).
    public enum Code: Int32, Sendable {
        case nullPointer = 1, invalidArgument = 2, invalidHandle = 3, misaligned = 4, tooLarge = 5, io = 6,
             invalidModel = 7, shape = 8, index = 9, inputValue = 10, unsupported = 11, bufferTooSmall = 12,
             panic = 13, internalError = 14, noGpu = 15, gpu = 16
        /// The model or session was closed (possibly by another thread during the call).
        case closed = 17
        /// The session is running on another thread (one run at a time per session).
        case busy = 18
        /// A status this version of the wrapper does not know.
        case unknown = -1
    }

    /// The kind of failure.
    public let code: Code
    /// The raw KestrelStatus value (equal to `code.rawValue` unless `code` is `.unknown`).
    public let status: Int32
    /// What went wrong.
    public let message: String

    public init(status: Int32, message: String) {
        self.code = Code(rawValue: status) ?? .unknown
        self.status = status
        self.message = message
    }

    init(_ code: Code, _ message: String) {
        self.init(status: code.rawValue, message: message)
    }

    /// The C name of the status, e.g. "KESTREL_ERR_SHAPE".
    public var name: String { String(cString: kestrel_status_name(status)) }

    public var description: String { "\(name): \(message)" }

    /// `LocalizedError`: what `localizedDescription` shows.
    public var errorDescription: String? { description }
}

/// Turns a KestrelStatus into a thrown error.
@inline(__always)
func check(_ status: KestrelStatus) throws {
    if status.rawValue != 0 {
        throw KestrelError(status: Int32(bitPattern: UInt32(truncatingIfNeeded: status.rawValue)),
                           message: String(cString: kestrel_last_error()))
    }
}

/// A native handle freed exactly once, by `close()` or by `deinit`, whichever comes first; safe
/// from any thread. The C library keeps the object alive for calls already in flight (a run on
/// another thread finishes normally) and answers later ones with `KESTREL_ERR_CLOSED`, so a
/// handle read just before another thread closes it is never a dangling pointer.
final class Handle: @unchecked Sendable {
    private let lock = NSLock()
    private var raw: OpaquePointer?
    private let what: String
    private let free: (OpaquePointer) -> KestrelStatus

    init(_ raw: OpaquePointer, what: String, free: @escaping (OpaquePointer) -> KestrelStatus) {
        self.raw = raw
        self.what = what
        self.free = free
    }

    /// The handle, or `KestrelError.closed`.
    func get() throws -> OpaquePointer {
        lock.lock()
        defer { lock.unlock() }
        guard let raw else { throw KestrelError(.closed, "\(what) is closed") }
        return raw
    }

    /// Frees the handle unless that was done already.
    func close() {
        lock.lock()
        let r = raw
        raw = nil
        lock.unlock()
        if let r { _ = free(r) }
    }

    deinit { close() }
}

/// Process-wide settings of the native library.
///
/// **Threads.** CPU sessions share one worker pool per process: it splits large dense layers and
/// runs the samples of attention/AFT/Fastformer ops in parallel; outputs are bit for bit the same
/// whatever the count. Unless the app calls `setThreads(_:)` first, the first `Model.session`
/// applies `defaultThreads` (min(4, cores the process may use); the C library reads performance
/// cores from Linux/Android sysfs only, so on iOS it is the usable cores capped at 4). Set it
/// before creating sessions: a session made earlier keeps the scratch copies its arena has.
public enum Kestrel {
    private final class State: @unchecked Sendable {
        let lock = NSLock()
        var configured = false
    }
    private static let state = State()

    /// The thread count CPU sessions use now (1 until set or until the first session).
    public static var threads: Int {
        var n = 1
        _ = kestrel_threads(&n)
        return n
    }

    /// The default (`kestrel_default_threads`): what the first session applies unless
    /// `setThreads(_:)` was called.
    public static var defaultThreads: Int {
        var n = 1
        _ = kestrel_default_threads(&n)
        return n
    }

    /// Uses `n` threads for CPU sessions (the calling thread plus `n - 1` workers, started now,
    /// never during a run); 0 picks `defaultThreads`. Returns the count in effect. Throws
    /// `.invalidArgument` above 256 (negative counts too), `.unsupported` when the OS refuses a
    /// worker thread.
    @discardableResult
    public static func setThreads(_ n: Int) throws -> Int {
        guard n >= 0 else { throw KestrelError(.invalidArgument, "thread count \(n) is negative (0 is the default)") }
        state.lock.lock()
        defer { state.lock.unlock() }
        var now = 0
        try check(kestrel_set_threads(n, &now))
        state.configured = true
        return now
    }

    /// Applies `defaultThreads` once, unless the app chose a count (called before each new session).
    static func applyDefault() {
        state.lock.lock()
        defer { state.lock.unlock() }
        guard !state.configured else { return }
        state.configured = true
        // A refused worker thread leaves the sessions on the threads there are.
        _ = kestrel_set_threads(0, nil)
    }
}

/// Which engine runs a session.
public enum Backend: UInt32, Sendable {
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
public enum GpuPrecision: UInt32, Sendable {
    /// f32 throughout: the CPU runtime's arithmetic (the default).
    case f32 = 0
    /// f16 products with f32 accumulation (relative errors of about 1e-3). A device without
    /// SHADER_F16 refuses a `.wgpu` session with KESTREL_ERR_UNSUPPORTED (`.auto`: the CPU instead).
    case f16 = 1
    /// f16 where the device has SHADER_F16, else f32 (never an error).
    case auto = 2
}

/// How the times of `Session.profile()` were measured.
public enum TimingSource: UInt32, Sendable {
    /// The last run was not profiled (named so that it is not confused with `Optional.none`).
    case notProfiled = 0
    /// CPU backend: wall clock around each op.
    case cpuWallClock = 1
    /// GPU backend: timestamp queries around each op's compute pass (GPU time only).
    case gpuTimestamps = 2
    /// GPU without timestamp queries: no per-op times, only `profileWallNanoseconds`.
    case gpuSubmission = 3
}

/// Element type of a graph input or output.
public enum DType: UInt32, Sendable {
    case float32 = 0, int32 = 1, int64 = 2
}

/// A graph input or output: name, element type, per-sample shape (no batch axis).
public struct TensorInfo: Equatable, Hashable, Sendable {
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

/// A bounded dim of a model (format 2.0 files): a named size, such as a sequence length, that the
/// model runs at any value in `min...max` (see `Session.setInputShapes(_:)`). `Model.inputs`
/// reports the inputs at `max`.
public struct BoundedDim: Equatable, Hashable, Sendable {
    public let name: String
    public let min: Int
    public let max: Int

    public init(name: String, min: Int, max: Int) {
        self.name = name
        self.min = min
        self.max = max
    }
}

/// One input batch: the values of `batch` samples, row-major.
public enum TensorData: Sendable {
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

/// One input read in place by `Session.run(batch:inputs:outputs:)`: memory the caller owns, borrowed
/// for the call (not `Sendable`: it is a pointer).
public enum InputBuffer {
    case float32(UnsafeBufferPointer<Float>)
    case int32(UnsafeBufferPointer<Int32>)
    case int64(UnsafeBufferPointer<Int64>)

    var count: Int {
        switch self {
        case .float32(let b): return b.count
        case .int32(let b): return b.count
        case .int64(let b): return b.count
        }
    }

    var dtype: DType {
        switch self {
        case .float32: return .float32
        case .int32: return .int32
        case .int64: return .int64
        }
    }

    var address: UnsafeRawPointer? {
        switch self {
        case .float32(let b): return b.baseAddress.map { UnsafeRawPointer($0) }
        case .int32(let b): return b.baseAddress.map { UnsafeRawPointer($0) }
        case .int64(let b): return b.baseAddress.map { UnsafeRawPointer($0) }
        }
    }
}

/// One node's time in a profiled run.
public struct OpTiming: Sendable {
    public let node: Int
    public let op: String
    public let nanoseconds: UInt64
}

/// A validated `.kes` model. Thread-safe (`Sendable`): every method may be called from any
/// thread, `close()` included, at any time; a call on a closed model throws `KestrelError.closed`.
/// Sessions keep their own reference to the native model, so they keep working after `close()`.
/// Without `close()`, the model is freed when the last reference to this object goes.
public final class Model: @unchecked Sendable {
    let handle: Handle

    /// Memory-maps and validates a model file (e.g. `Bundle.main.path(forResource:ofType:)`).
    public init(path: String) throws {
        var h: OpaquePointer? = nil
        try check(kestrel_model_load_path(path, &h))
        guard let h else { throw KestrelError(.internalError, "kestrel_model_load_path returned no model") }
        handle = Handle(h, what: "the model", free: { kestrel_model_free($0) })
    }

    /// Memory-maps and validates the model file at a file URL, e.g.
    /// `Bundle.main.url(forResource: "model", withExtension: "kes")!`: the weights are read in place
    /// from the mapping (pages load on first use; nothing is copied). The file must not be
    /// truncated or rewritten while the model lives (bundle resources never are). A URL that is
    /// not a file URL throws `.invalidArgument`; a missing file `.io`.
    public convenience init(contentsOf url: URL) throws {
        guard url.isFileURL else {
            throw KestrelError(.invalidArgument, "\(url) is not a file URL (download the model to a file first)")
        }
        let path = url.withUnsafeFileSystemRepresentation { $0.map { String(cString: $0) } }
        guard let path else { throw KestrelError(.invalidArgument, "\(url) has no file-system path") }
        try self.init(path: path)
    }

    /// Where the model's bytes are.
    public enum Storage: UInt32, Sendable {
        /// Copied into memory the library owns (`init(data:)`).
        case copied = 0
        /// Memory-mapped from a file (`init(path:)`, `init(contentsOf:)`): read in place.
        case mapped = 1
        /// The caller's memory, read in place (`kestrel_model_load_borrowed`).
        case borrowed = 2
    }

    /// Where the model's bytes are: copied, memory-mapped or borrowed.
    public var storage: Storage {
        get throws {
            var v: UInt32 = 0
            try check(kestrel_model_storage(try handle.get(), &v))
            guard let s = Storage(rawValue: v) else { throw KestrelError(.internalError, "storage code \(v)") }
            return s
        }
    }

    /// Copies and validates a model held in memory.
    public init(data: Data) throws {
        var h: OpaquePointer? = nil
        // An empty buffer has no base address (the C function would answer NULL_POINTER).
        guard !data.isEmpty else { throw KestrelError(.invalidModel, "the model data is empty") }
        try data.withUnsafeBytes { (buf: UnsafeRawBufferPointer) in
            try check(kestrel_model_load_memory(buf.bindMemory(to: UInt8.self).baseAddress, buf.count, &h))
        }
        guard let h else { throw KestrelError(.internalError, "kestrel_model_load_memory returned no model") }
        handle = Handle(h, what: "the model", free: { kestrel_model_free($0) })
    }

    /// Frees the model now (its sessions keep what they need). Any thread; a second call does nothing.
    public func close() { handle.close() }

    private func string(_ f: (OpaquePointer, UnsafeMutablePointer<UnsafePointer<CChar>?>) -> KestrelStatus) throws -> String {
        var p: UnsafePointer<CChar>? = nil
        try check(f(try handle.get(), &p))
        guard let p else { throw KestrelError(.internalError, "no string returned") }
        return String(cString: p)
    }

    public var name: String { get throws { try string { kestrel_model_name($0, $1) } } }
    public var task: String { get throws { try string { kestrel_model_task($0, $1) } } }

    public var labels: [String] {
        get throws {
            let h = try handle.get()
            var n = 0
            try check(kestrel_model_label_count(h, &n))
            return try (0..<n).map { i in
                var p: UnsafePointer<CChar>? = nil
                try check(kestrel_model_label(h, i, &p))
                return p.map { String(cString: $0) } ?? ""
            }
        }
    }

    public var inputs: [TensorInfo] {
        get throws { try infos(count: kestrel_model_input_count, info: kestrel_model_input_info) }
    }
    public var outputs: [TensorInfo] {
        get throws { try infos(count: kestrel_model_output_count, info: kestrel_model_output_info) }
    }

    /// The model's bounded dims (format 2.0), in the file's order; empty for a model of fixed
    /// sizes. A session runs any value within them: `Session.setInputShapes(_:)`.
    public var dims: [BoundedDim] {
        get throws {
            let h = try handle.get()
            var n = 0
            try check(kestrel_model_dim_count(h, &n))
            return try (0..<n).map { i in
                var d = KestrelDimInfo()
                try check(kestrel_model_dim_info(h, i, &d))
                return BoundedDim(name: d.name.map { String(cString: $0) } ?? "", min: d.min, max: d.max)
            }
        }
    }

    private func infos(
        count: (OpaquePointer?, UnsafeMutablePointer<Int>?) -> KestrelStatus,
        info: (OpaquePointer?, Int, UnsafeMutablePointer<KestrelTensorInfo>?) -> KestrelStatus
    ) throws -> [TensorInfo] {
        let h = try handle.get()
        var n = 0
        try check(count(h, &n))
        return try (0..<n).map { i in
            var t = KestrelTensorInfo()
            try check(info(h, i, &t))
            return TensorInfo(t)
        }
    }

    /// A session for batches of 1...capacity samples; its arena is allocated here, once (GPU: f32).
    public func session(capacity: Int = 1, backend: Backend = .auto) throws -> Session {
        try session(capacity: capacity, backend: backend, gpuPrecision: .f32)
    }

    /// `session(capacity:backend:)` with the GPU's arithmetic `gpuPrecision` (see `GpuPrecision`;
    /// CPU sessions ignore it).
    public func session(capacity: Int, backend: Backend, gpuPrecision: GpuPrecision) throws -> Session {
        let ins = try inputs, outs = try outputs
        Kestrel.applyDefault()
        var s: OpaquePointer? = nil
        try check(kestrel_session_new_with_precision(try handle.get(), backend.rawValue, capacity,
                                                     gpuPrecision.rawValue, &s))
        guard let s else { throw KestrelError(.internalError, "kestrel_session_new returned no session") }
        return Session(handle: Handle(s, what: "the session", free: { kestrel_session_free($0) }),
                       inputs: ins, outputs: outs)
    }
}

/// A model bound to an arena. One run at a time: a `run` (or `profile()`) while another thread
/// runs the session throws `KestrelError.busy`; use one session per thread for parallel runs. The
/// facts (`backend`, `device`, `gpuF16`) are readable from any thread, also during a run.
/// `close()` is safe from any thread at any time: a run in progress elsewhere finishes normally
/// (the native session is freed when it ends) and later calls throw `KestrelError.closed`.
/// Without `close()`, the session is freed when the last reference to this object goes.
public final class Session: @unchecked Sendable {
    let handle: Handle
    private let lock = NSLock()
    private var profilingOn = false
    /// The inputs and outputs at the session's current sizes (guarded by `lock`).
    private var currentInputs: [TensorInfo]
    private var currentOutputs: [TensorInfo]

    init(handle: Handle, inputs: [TensorInfo], outputs: [TensorInfo]) {
        self.handle = handle
        currentInputs = inputs
        currentOutputs = outputs
    }

    /// The graph inputs at the session's current sizes: the model's (read once when the session
    /// was made; the session outlives a closed model), or for a model with bounded dims the shapes
    /// `setInputShapes(_:)` set. What `run` takes.
    public var inputs: [TensorInfo] {
        lock.lock()
        defer { lock.unlock() }
        return currentInputs
    }

    /// The graph outputs at the session's current sizes: what `run` returns (`batch ×` each
    /// one's `count` floats).
    public var outputs: [TensorInfo] {
        lock.lock()
        defer { lock.unlock() }
        return currentOutputs
    }

    /// Sets each input's per-sample shape (no batch axis, graph-input order) for the following
    /// runs, for a model with bounded dims (`Model.dims`): each dim's value comes from the input
    /// axes that are that dim, within its range; fixed axes keep their size. The session then
    /// computes only that size, in the memory planned at the bound (nothing is allocated);
    /// `inputs`, `outputs`, `inputShape(_:)` and `outputShape(_:)` follow. A model of fixed sizes
    /// takes only its own shapes. A shape out of range, of another rank, a fixed axis that differs
    /// or two inputs disagreeing on a dim throws `.shape` (the message names the input, the dim
    /// and its range), and the session is back at the bound (`Model.inputs`). A GPU session is
    /// lowered again at new sizes (a GPU limit at them: `.tooLarge` or `.unsupported`, also back
    /// at the bound). `.busy` while another thread runs the session.
    public func setInputShapes(_ shapes: [[Int]]) throws {
        guard shapes.allSatisfy({ $0.allSatisfy { $0 >= 0 } }) else {
            throw KestrelError(.shape, "input shapes \(shapes) have a negative dim")
        }
        let h = try handle.get()
        let ranks = shapes.map { $0.count }
        let dims = shapes.flatMap { $0 }
        let status = kestrel_session_set_input_shapes(h, dims, ranks, ranks.count)
        // The native message before anything else can overwrite it on this thread.
        let failure: KestrelError? = status.rawValue == 0 ? nil
            : KestrelError(status: Int32(bitPattern: UInt32(truncatingIfNeeded: status.rawValue)),
                           message: String(cString: kestrel_last_error()))
        // On success the new shapes, on failure the bound: read back either way.
        refreshShapes(h)
        if let failure { throw failure }
    }

    /// `setInputShapes(_:)` then `run(_:)`: one `TensorData` per input, each `batch ×` the
    /// product of its shape in `shapes`.
    public func run(_ inputs: [TensorData], shapes: [[Int]]) throws -> [[Float]] {
        try setInputShapes(shapes)
        return try run(inputs)
    }

    /// Per-sample shape of input `index` at the session's current sizes
    /// (`kestrel_session_input_info`).
    public func inputShape(_ index: Int) throws -> [Int] {
        var t = KestrelTensorInfo()
        try check(kestrel_session_input_info(try handle.get(), index, &t))
        return TensorInfo(t).shape
    }

    /// Per-sample shape of output `index` at the session's current sizes: a run writes `batch ×`
    /// its product floats (`kestrel_session_output_info`).
    public func outputShape(_ index: Int) throws -> [Int] {
        var t = KestrelTensorInfo()
        try check(kestrel_session_output_info(try handle.get(), index, &t))
        return TensorInfo(t).shape
    }

    /// Reads the session's current input and output shapes into `inputs` and `outputs` (left as
    /// they were if the session cannot be read now: a run elsewhere, or closed; `run` is checked
    /// against the native shapes regardless).
    private func refreshShapes(_ h: OpaquePointer) {
        func read(_ count: Int, _ info: (OpaquePointer?, Int, UnsafeMutablePointer<KestrelTensorInfo>?) -> KestrelStatus)
            -> [TensorInfo]? {
            var out: [TensorInfo] = []
            for i in 0..<count {
                var t = KestrelTensorInfo()
                guard info(h, i, &t).rawValue == 0 else { return nil }
                out.append(TensorInfo(t))
            }
            return out
        }
        let (nIn, nOut) = (inputs.count, outputs.count)
        guard let ins = read(nIn, kestrel_session_input_info), let outs = read(nOut, kestrel_session_output_info) else {
            return
        }
        lock.lock()
        currentInputs = ins
        currentOutputs = outs
        lock.unlock()
    }

    /// Frees the session now, also during a run on another thread. Any thread; a second call does nothing.
    public func close() { handle.close() }

    /// The backend actually running this session.
    public var backend: Backend {
        get throws {
            var b: UInt32 = 0
            try check(kestrel_session_backend(try handle.get(), &b))
            guard let v = Backend(rawValue: b) else { throw KestrelError(.internalError, "backend code \(b)") }
            return v
        }
    }

    /// What runs the session, for logs: "cpu", the GPU adapter, or "cpu (auto: reason)".
    public var device: String {
        get throws {
            var p: UnsafePointer<CChar>? = nil
            try check(kestrel_session_device(try handle.get(), &p))
            return p.map { String(cString: $0) } ?? ""
        }
    }

    /// Whether the dot products compute in f16 (see `GpuPrecision`); false on the CPU.
    public var gpuF16: Bool {
        get throws {
            var v = false
            try check(kestrel_session_gpu_f16(try handle.get(), &v))
            return v
        }
    }

    /// How the last run's `profile()` was measured.
    public var profileSource: TimingSource {
        get throws {
            var v: UInt32 = 0
            try check(kestrel_session_profile_source(try handle.get(), &v))
            return TimingSource(rawValue: v) ?? .notProfiled
        }
    }

    /// Wall time of the last profiled run in ns (GPU: submission to readback); 0 if not profiled.
    public var profileWallNanoseconds: UInt64 {
        get throws {
            var v: UInt64 = 0
            try check(kestrel_session_profile_wall_nanos(try handle.get(), &v))
            return v
        }
    }

    /// Whether later runs are timed per op (see `setProfiling(_:)` and `profile()`).
    public var profiling: Bool {
        lock.lock()
        defer { lock.unlock() }
        return profilingOn
    }

    /// Turns per-op timing of later runs on or off.
    public func setProfiling(_ on: Bool) throws {
        try check(kestrel_session_set_profiling(try handle.get(), on))
        lock.lock()
        profilingOn = on
        lock.unlock()
    }

    /// Runs a batch: one `TensorData` per graph input, each `batch × per-sample` values (the same
    /// batch for all) at the session's current shapes (`inputs`; see `setInputShapes(_:)`).
    /// Returns every output (`batch × per-sample` floats, per `outputs`).
    public func run(_ inputs: [TensorData]) throws -> [[Float]] {
        let ins = self.inputs, outs = outputs
        guard inputs.count == ins.count else {
            throw KestrelError(.shape, "expected \(ins.count) inputs, got \(inputs.count)")
        }
        // Every input's batch from its own length: a length that is not a whole number of
        // samples, or batches that differ, are refused here (the C library reads exactly
        // `batch × per-sample` elements of each buffer).
        var batch = 0
        for (i, (data, info)) in zip(inputs, ins).enumerated() {
            let per = info.count
            guard per > 0, data.count > 0, data.count % per == 0 else {
                throw KestrelError(.shape, "input \(i) (\(info.name)) has \(data.count) values, not a whole number " +
                                   "of samples of \(per)")
            }
            let b = data.count / per
            if i == 0 {
                batch = b
            } else if b != batch {
                throw KestrelError(.shape, "input \(i) (\(info.name)) has batch \(b), input 0 \(batch)")
            }
        }
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
            v.withUnsafeBytes { src in
                if let base = src.baseAddress { p.copyMemory(from: base, byteCount: src.count) }
            }
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
        try check(kestrel_session_run(try handle.get(), tensors, tensors.count, outputs, outputs.count, nil))
        for i in results.indices {
            results[i] = Array(UnsafeBufferPointer(start: outPtrs[i], count: results[i].count))
        }
        return results
    }

    /// Runs `batch` samples without copying: each input is read where the caller keeps it and each
    /// output written straight into the caller's buffer (reusable run after run; nothing is
    /// allocated for the data). Inputs and outputs in graph order; each buffer must hold at least
    /// `batch × per-sample` elements at the session's current shapes (`inputs`, `outputs`; more
    /// is fine: the first ones are used). Throws `.shape` for
    /// wrong counts or a batch outside 1...capacity, `.bufferTooSmall` for a short buffer,
    /// `.nullPointer` for an empty one, `.invalidArgument` for an output overlapping another
    /// buffer, `.misaligned` for misaligned memory. The buffers are only borrowed for the call.
    public func run(batch: Int, inputs: [InputBuffer], outputs: [UnsafeMutableBufferPointer<Float>]) throws {
        let ins = self.inputs, outs = self.outputs
        guard inputs.count == ins.count, outputs.count == outs.count else {
            throw KestrelError(.shape, "the model takes \(ins.count) inputs and \(outs.count) outputs, " +
                               "got \(inputs.count) and \(outputs.count)")
        }
        guard batch >= 1 else { throw KestrelError(.shape, "batch \(batch) is not at least 1") }
        func need(_ info: TensorInfo, _ count: Int, _ what: String, _ i: Int) throws {
            let (n, overflow) = batch.multipliedReportingOverflow(by: info.count)
            guard !overflow, count >= n else {
                throw KestrelError(.bufferTooSmall, "\(what) \(i) (\(info.name)) holds \(count) elements; " +
                                   "batch \(batch) needs \(batch) × \(info.count)")
            }
        }
        var dims: [Int] = []
        for (i, (buffer, info)) in zip(inputs, ins).enumerated() {
            try need(info, buffer.count, "input", i)
            guard buffer.address != nil else { throw KestrelError(.nullPointer, "input \(i) has no memory") }
            dims.append(batch)
            dims.append(contentsOf: info.shape)
        }
        for (i, (buffer, info)) in zip(outputs, outs).enumerated() {
            try need(info, buffer.count, "output", i)
            guard buffer.baseAddress != nil else { throw KestrelError(.nullPointer, "output \(i) has no memory") }
            dims.append(batch)
            dims.append(contentsOf: info.shape)
        }
        let h = try handle.get()
        try dims.withUnsafeBufferPointer { d in
            guard let base = d.baseAddress else { throw KestrelError(.internalError, "no shapes") }
            var at = 0
            var tensors: [KestrelTensor] = []
            for (buffer, info) in zip(inputs, ins) {
                tensors.append(KestrelTensor(dtype: buffer.dtype.rawValue, data: buffer.address, shape: base + at,
                                             rank: info.shape.count + 1))
                at += info.shape.count + 1
            }
            var results: [KestrelOutput] = []
            for (buffer, info) in zip(outputs, outs) {
                results.append(KestrelOutput(data: buffer.baseAddress, shape: base + at, rank: info.shape.count + 1))
                at += info.shape.count + 1
            }
            try check(kestrel_session_run(h, tensors, tensors.count, results, results.count, nil))
        }
    }

    /// `run(batch:inputs:outputs:)` for a model with one float input and one output.
    public func run(_ input: UnsafeBufferPointer<Float>, into output: UnsafeMutableBufferPointer<Float>,
                    batch: Int = 1) throws {
        try run(batch: batch, inputs: [.float32(input)], outputs: [output])
    }

    /// Per-op times of the last run (empty unless profiling was on); see `profileSource`.
    public func profile() throws -> [OpTiming] {
        let h = try handle.get()
        var n = 0
        try check(kestrel_session_profile_count(h, &n))
        return try (0..<n).map { i in
            var t = KestrelOpTiming()
            try check(kestrel_session_profile_entry(h, i, &t))
            return OpTiming(node: Int(t.node), op: t.op.map { String(cString: $0) } ?? "", nanoseconds: t.nanos)
        }
    }
}
