package dev.kestrel

import java.io.Closeable

/** Which engine runs a session. */
enum class Backend(internal val code: Int) {
    /** The CPU runtime (always available). */
    CPU(NativeBridge.BACKEND_CPU),
    /**
     * The wgpu GPU backend (Vulkan). [Model.session] throws [KestrelException] NO_GPU when the
     * device has no usable Vulkan adapter, UNSUPPORTED in a library built without it.
     */
    WGPU(NativeBridge.BACKEND_WGPU),
    /** The GPU when a hardware adapter takes the model, else the CPU (never fails for lack of a GPU). */
    AUTO(NativeBridge.BACKEND_AUTO);

    /** Whether a session on this backend can be created on this device (WGPU opens the GPU to tell). */
    val isAvailable: Boolean get() = NativeBridge.backendAvailable(code)

    internal companion object {
        fun of(code: Int): Backend = values().first { it.code == code }
    }
}

/** The arithmetic of a GPU session's dot-product kernels (CPU sessions ignore it). */
enum class GpuPrecision(internal val code: Int) {
    /** f32 throughout: the CPU runtime's arithmetic (the default). */
    F32(NativeBridge.GPU_PRECISION_F32),
    /**
     * f16 products with f32 accumulation (relative errors of about 1e-3). A device without
     * SHADER_F16 refuses a [Backend.WGPU] session with [KestrelException] UNSUPPORTED
     * ([Backend.AUTO] then uses the CPU).
     */
    F16(NativeBridge.GPU_PRECISION_F16),
    /** f16 where the device has SHADER_F16, else f32 (never an error). */
    AUTO(NativeBridge.GPU_PRECISION_AUTO),
}

/** How the times of [Session.profile] were measured. */
enum class TimingSource {
    /** The last run was not profiled. */
    NONE,
    /** CPU backend: wall clock around each op. */
    CPU_WALL_CLOCK,
    /** GPU backend: timestamp queries around each op's compute pass (GPU time only). */
    GPU_TIMESTAMPS,
    /** GPU without timestamp queries: no per-op times, only [Session.profileWallNanos]. */
    GPU_SUBMISSION,
}

/** Element type of a graph input or output. */
enum class DType { F32, I32, I64 }

/** A graph input or output: name, element type, per-sample shape (no batch axis). */
data class TensorInfo(val name: String, val dtype: DType, val shape: IntArray) {
    /** Elements per sample. */
    val size: Int get() = shape.fold(1) { a, b -> a * b }
}

/** One node's time in a profiled run. */
data class OpTiming(val op: String, val nanos: Long)

/**
 * A validated `.kes` model. Thread-safe; close it when done (sessions keep their own reference,
 * so a model may be closed before its sessions).
 */
class Model private constructor(private var handle: Long) : Closeable {
    companion object {
        /** Memory-maps and validates a model file (e.g. one copied out of the APK's assets). */
        @JvmStatic
        fun load(path: String): Model = Model(NativeBridge.modelLoadPath(path))

        /** Copies and validates a model held in memory. */
        @JvmStatic
        fun fromBytes(bytes: ByteArray): Model = Model(NativeBridge.modelLoadBytes(bytes))
    }

    private fun h(): Long = synchronized(this) { check(handle != 0L) { "model is closed" }; handle }

    val name: String get() = NativeBridge.modelName(h())
    val task: String get() = NativeBridge.modelTask(h())
    val labels: List<String> get() = NativeBridge.modelLabels(h()).toList()
    val inputs: List<TensorInfo> get() = infos(false)
    val outputs: List<TensorInfo> get() = infos(true)

    private fun infos(output: Boolean): List<TensorInfo> {
        val m = h()
        return (0 until NativeBridge.tensorCount(m, output)).map { i ->
            TensorInfo(
                NativeBridge.tensorName(m, output, i),
                DType.values()[NativeBridge.tensorDType(m, output, i)],
                NativeBridge.tensorShape(m, output, i),
            )
        }
    }

    /** A session for batches of 1..[capacity] samples; its arena is allocated here, once (GPU: f32). */
    fun session(capacity: Int = 1, backend: Backend = Backend.AUTO): Session =
        session(capacity, backend, GpuPrecision.F32)

    /** [session] with the GPU's arithmetic [gpuPrecision] (see [GpuPrecision]; CPU sessions ignore it). */
    fun session(capacity: Int, backend: Backend, gpuPrecision: GpuPrecision): Session =
        Session(NativeBridge.sessionNewWithPrecision(h(), backend.code, capacity, gpuPrecision.code))

    override fun close() = synchronized(this) {
        if (handle != 0L) NativeBridge.modelFree(handle)
        handle = 0L
    }
}

/** A model bound to an arena. Not thread-safe: use one session per thread. */
class Session internal constructor(private var handle: Long) : Closeable {
    private fun h(): Long { check(handle != 0L) { "session is closed" }; return handle }

    /** The backend actually running this session (AUTO resolves to a concrete one). */
    val backend: Backend get() = Backend.of(NativeBridge.sessionBackend(h()))

    /** What runs the session, for logs: "cpu", the GPU adapter, or "cpu (auto: reason)". */
    val device: String get() = NativeBridge.sessionDevice(h())

    /** Whether the dot products compute in f16 (see [GpuPrecision]); false on the CPU. */
    val gpuF16: Boolean get() = NativeBridge.sessionGpuF16(h())

    /** Per-op timing of later runs (see [profile]). */
    var profiling: Boolean = false
        set(on) { NativeBridge.sessionSetProfiling(h(), on); field = on }

    /**
     * Runs a batch. Each input is a FloatArray, IntArray or LongArray (token ids) of
     * `batch × per-sample` elements in graph-input order; returns every output.
     */
    fun run(vararg inputs: Any): List<FloatArray> = NativeBridge.sessionRun(h(), arrayOf(*inputs)).toList()

    /** Runs a single-input, single-output model on float data. */
    fun run(input: FloatArray): FloatArray = NativeBridge.sessionRun(h(), arrayOf<Any>(input))[0]

    /** How the last run's [profile] was measured. */
    val profileSource: TimingSource get() = TimingSource.values()[NativeBridge.profileSource(h())]

    /** Wall time of the last profiled run in ns (GPU: submission to readback), 0 if not profiled. */
    val profileWallNanos: Long get() = NativeBridge.profileWallNanos(h())

    /** Per-op times of the last run (empty unless [profiling] was on), see [profileSource]. */
    fun profile(): List<OpTiming> {
        val ops = NativeBridge.profileOps(h())
        val nanos = NativeBridge.profileNanos(h())
        return ops.indices.map { OpTiming(ops[it], nanos[it]) }
    }

    override fun close() {
        if (handle != 0L) NativeBridge.sessionFree(handle)
        handle = 0L
    }
}
