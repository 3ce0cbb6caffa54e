package dev.kestrel

import java.io.Closeable
import java.nio.Buffer
import java.nio.ByteBuffer
import java.nio.FloatBuffer
import java.nio.IntBuffer
import java.nio.LongBuffer
import java.lang.ref.PhantomReference
import java.lang.ref.ReferenceQueue
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

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

/**
 * Process-wide settings of the native library.
 *
 * **Threads.** CPU sessions share one worker pool per process: it splits large dense layers and
 * runs the samples of attention/AFT/Fastformer ops in parallel; outputs are bit for bit the same
 * whatever the count. Unless the app sets [threads] first, the first [Model.session] sets it to
 * [defaultThreads] (min(4, performance cores, usable cores): the cores above a big.LITTLE SoC's
 * slowest tier, capped at 4). Set it before creating sessions: a session made earlier keeps the
 * scratch copies its arena has (its attention ops use at most that many threads).
 */
object Kestrel {
    @Volatile private var configured = false

    /**
     * The thread count CPU sessions use (the calling thread plus `threads - 1` workers, started
     * when it is set, never during a run). Setting 0 picks [defaultThreads]; a negative count or
     * one above 256 throws [KestrelException] INVALID_ARGUMENT. From Java:
     * `Kestrel.setThreads(2)`, `Kestrel.getThreads()`.
     */
    @JvmStatic
    var threads: Int
        get() = NativeBridge.threads()
        set(n) {
            synchronized(this) {
                NativeBridge.setThreads(n)
                configured = true
            }
        }

    /** min(4, performance cores, usable cores): what the first session applies unless [threads] was set. */
    @JvmStatic
    val defaultThreads: Int get() = NativeBridge.defaultThreads()

    /** Applies [defaultThreads] once, unless the app chose a count (called before each new session). */
    internal fun applyDefault() {
        if (configured) return
        synchronized(this) {
            if (configured) return
            configured = true
            try {
                NativeBridge.setThreads(0)
            } catch (_: KestrelException) {
                // The OS refused a worker thread: sessions still run, on the threads there are.
            }
        }
    }
}

/** Element type of a graph input or output. */
enum class DType { F32, I32, I64 }

/**
 * A graph input or output: name, element type, per-sample shape (no batch axis). Equal when the
 * three are (the shape compared element by element).
 */
data class TensorInfo(val name: String, val dtype: DType, val shape: IntArray) {
    /** Elements per sample. */
    val size: Int get() = shape.fold(1) { a, b -> a * b }

    override fun equals(other: Any?): Boolean =
        other is TensorInfo && name == other.name && dtype == other.dtype && shape.contentEquals(other.shape)

    override fun hashCode(): Int = (name.hashCode() * 31 + dtype.hashCode()) * 31 + shape.contentHashCode()

    override fun toString(): String = "TensorInfo(name=$name, dtype=$dtype, shape=${shape.contentToString()})"
}

/**
 * A bounded dim of a model (format 2.0 files): a named size, such as a sequence length, that the
 * model runs at any value in [min]..[max] (see [Session.setInputShapes]). [Model.inputs] reports
 * the inputs at [max].
 */
data class BoundedDim(val name: String, val min: Int, val max: Int)

/**
 * The byte layout of an 8-bit image (alpha is ignored: never premultiplied or blended). Android
 * `Bitmap.Config.ARGB_8888` pixels copied with `copyPixelsToBuffer` are [RGBA_8888]; colour ints
 * from `Bitmap.getPixels` (`0xAARRGGBB`) are read by the `IntArray` overload of [Session.classify].
 */
enum class PixelFormat(internal val code: Int) {
    /** R, G, B, A bytes. */
    RGBA_8888(NativeBridge.PIXEL_RGBA8888),
    /** B, G, R, A bytes. */
    BGRA_8888(NativeBridge.PIXEL_BGRA8888),
    /** R, G, B bytes. */
    RGB_888(NativeBridge.PIXEL_RGB888),
    /** One grey byte per pixel. */
    GREY_8(NativeBridge.PIXEL_GREY8),
}

/** One predicted class: its index in the model's output, its label (the index as text when the model has none), its probability. */
data class Classification(val index: Int, val label: String, val probability: Float)

/** One node's time in a profiled run. */
data class OpTiming(val op: String, val nanos: Long)

/**
 * A native handle, freed exactly once: by `close()`, or by the [SafetyNet] when its owner was
 * never closed. Reading it after that throws [KestrelException.CLOSED].
 *
 * Closing is safe from any thread at any time: the native layer (`kestrel_ffi::handles`) keeps the
 * object alive for calls already in flight (a run on another thread finishes normally, then the
 * memory goes) and answers later calls with the handle with `KESTREL_ERR_CLOSED`.
 */
internal class NativeHandle(handle: Long, private val what: String, private val free: (Long) -> Unit) {
    private val value = AtomicLong(handle)

    /** The handle, or [KestrelException.CLOSED]. */
    fun get(): Long {
        val h = value.get()
        if (h == 0L) throw KestrelException(KestrelException.CLOSED, "$what is closed")
        return h
    }

    /** Frees the handle unless that was done already (by any thread); true if this call did. */
    fun release(): Boolean {
        val h = value.getAndSet(0L)
        if (h == 0L) return false
        free(h)
        return true
    }
}

/**
 * The safety net for models and sessions that are never closed: when one becomes unreachable its
 * native handle is freed from a daemon thread. It is a net, not a way to manage them: when that
 * happens depends on the garbage collector, which does not see the native memory (a model's
 * weights, a session's arena) and may let a great deal of it pile up first. Close models and
 * sessions (`use { }`) when done.
 *
 * This is `java.lang.ref.Cleaner`'s mechanism (a phantom reference per object, one thread draining
 * their queue) written out, because `Cleaner` needs Android API 33 and this library supports 24.
 */
internal object SafetyNet {
    private val queue = ReferenceQueue<Any>()
    private val pending: MutableSet<Entry> = ConcurrentHashMap.newKeySet()

    /** Handles freed by the net rather than by `close()` (for tests and diagnostics). */
    val freed = AtomicLong()

    /** The registration of one object: [clean] frees its handle now (what `close()` does). */
    class Entry(owner: Any, private val handle: NativeHandle) : PhantomReference<Any>(owner, queue) {
        fun clean(): Boolean {
            pending.remove(this)
            clear()
            return handle.release()
        }
    }

    init {
        val t = Thread({
            while (true) {
                try {
                    val e = queue.remove() as Entry
                    if (e.clean()) freed.incrementAndGet()
                } catch (_: InterruptedException) {
                    // keep draining: the thread lives as long as the process
                } catch (_: Throwable) {
                    // a free never throws for a handle it was given; keep the thread alive regardless
                }
            }
        }, "kestrel-safety-net")
        t.isDaemon = true
        t.start()
    }

    /** Registers [owner], whose native handle is [handle]. */
    fun register(owner: Any, handle: NativeHandle): Entry = Entry(owner, handle).also { pending.add(it) }
}

/**
 * A validated `.kes` model. Thread-safe: every method may be called from any thread, [close]
 * included, at any time; a call on a closed model throws [KestrelException] with status
 * [KestrelException.CLOSED]. Sessions keep their own reference to the native model, so a model may
 * be closed before its sessions, and they keep working.
 *
 * Close it when done (`use { }`); a model never closed is freed after it becomes unreachable (see
 * [SafetyNet]), but only as a safety net.
 */
class Model private constructor(raw: Long) : Closeable {
    companion object {
        /** Memory-maps and validates a model file (e.g. one copied out of the APK's assets). */
        @JvmStatic
        fun load(path: String): Model = Model(NativeBridge.modelLoadPath(path))

        /** Copies and validates a model held in memory. */
        @JvmStatic
        fun fromBytes(bytes: ByteArray): Model = Model(NativeBridge.modelLoadBytes(bytes))

        /**
         * A model held in [buffer]'s remaining bytes (position to limit). A **direct** buffer whose
         * data starts on a 64-byte boundary — a file mapped with `FileChannel.map` at an offset
         * that is a multiple of 64 — is read in place, no copy ([storage] is BORROWED): the model
         * keeps the buffer reachable until it and its sessions are closed, and the app must not
         * write to those bytes meanwhile. Other buffers (heap, or direct but unaligned, as
         * `ByteBuffer.allocateDirect` gives) are copied once ([storage] COPIED).
         */
        @JvmStatic
        fun fromByteBuffer(buffer: ByteBuffer): Model {
            val view = buffer.slice()
            if (view.isDirect) return Model(NativeBridge.modelLoadBuffer(view))
            val bytes = ByteArray(view.remaining())
            view.get(bytes)
            return fromBytes(bytes)
        }

        /**
         * The model in [length] bytes at [offset] of the open file [fd] (an Android
         * `AssetFileDescriptor`: `parcelFileDescriptor.fd`, `startOffset`, `length`; see
         * `Model.load(assets, name)` in KestrelAndroid.kt). The fd stays the caller's (close it
         * whenever you like). Memory-mapped, no copy, when [offset] is a multiple of 64, else read
         * once. An fd that is not open or not a regular file (a pipe, socket, directory), a
         * negative or zero length, an offset past the end or a range past it throws
         * [KestrelException] (IO or INVALID_ARGUMENT) at once; it never blocks.
         */
        @JvmStatic
        fun fromFd(fd: Int, offset: Long, length: Long): Model = Model(NativeBridge.modelLoadFd(fd, offset, length))
    }

    /** Where the model's bytes are. */
    enum class Storage {
        /** Copied into memory the library owns. */
        COPIED,
        /** Memory-mapped from a file (read in place). */
        MAPPED,
        /** The app's memory (a direct buffer), read in place. */
        BORROWED,
    }

    private val handle = NativeHandle(raw, "the model", NativeBridge::modelFree)
    private val net = SafetyNet.register(this, handle)

    /** Keeps `this` reachable until the end of [f]: the safety net does not free a model mid-call. */
    @Volatile private var touched = 0

    private inline fun <T> native(f: (Long) -> T): T {
        val r = f(handle.get())
        touched = 1
        return r
    }

    /** Where the model's bytes are: copied, mapped from a file, or the app's buffer read in place. */
    val storage: Storage get() = Storage.values()[native { NativeBridge.modelStorage(it) }]

    val name: String get() = native { NativeBridge.modelName(it) }
    val task: String get() = native { NativeBridge.modelTask(it) }
    val labels: List<String> get() = native { NativeBridge.modelLabels(it).toList() }
    val inputs: List<TensorInfo> get() = infos(false)
    val outputs: List<TensorInfo> get() = infos(true)

    /**
     * The model's bounded dims (format 2.0), in the file's order; empty for a model of fixed
     * sizes. A session runs any value within them: [Session.setInputShapes].
     */
    val dims: List<BoundedDim>
        get() = native { m ->
            val names = NativeBridge.modelDimNames(m)
            val ranges = NativeBridge.modelDimRanges(m)
            names.indices.map { BoundedDim(names[it], ranges[2 * it], ranges[2 * it + 1]) }
        }

    private fun infos(output: Boolean): List<TensorInfo> = native { m ->
        (0 until NativeBridge.tensorCount(m, output)).map { i ->
            TensorInfo(
                NativeBridge.tensorName(m, output, i),
                DType.values()[NativeBridge.tensorDType(m, output, i)],
                NativeBridge.tensorShape(m, output, i),
            )
        }
    }

    /**
     * A session for batches of 1..[capacity] samples on [backend], its GPU arithmetic
     * [gpuPrecision] (see [GpuPrecision]; CPU sessions ignore it); its arena is allocated here,
     * once. From Java: `session()`, `session(capacity)`, `session(capacity, backend)` or all three.
     */
    @JvmOverloads
    fun session(
        capacity: Int = 1,
        backend: Backend = Backend.AUTO,
        gpuPrecision: GpuPrecision = GpuPrecision.F32,
    ): Session {
        Kestrel.applyDefault()
        return native { Session(NativeBridge.sessionNewWithPrecision(it, backend.code, capacity, gpuPrecision.code)) }
    }

    /** Frees the model (its sessions keep it alive as long as they need it). A second call does nothing. */
    override fun close() {
        net.clean()
    }
}

/**
 * A model bound to an arena. A session runs one batch at a time: a [run] (or [profile] read)
 * while another thread runs it throws [KestrelException.BUSY]; use one session per thread for
 * parallel runs. The facts ([backend], [device], [gpuF16]) are readable from any thread, also
 * during a run. [close] is safe from any thread at any time: a run in progress on another thread
 * finishes normally (the native session is freed when it ends) and every later call throws
 * [KestrelException] with status [KestrelException.CLOSED].
 *
 * Close it when done (`use { }`); a session never closed is freed after it becomes unreachable
 * (see [SafetyNet]), but only as a safety net.
 */
class Session internal constructor(raw: Long) : Closeable {
    private val handle = NativeHandle(raw, "the session", NativeBridge::sessionFree)
    private val net = SafetyNet.register(this, handle)

    /** Keeps `this` reachable until the end of a native call (see [Model]). */
    @Volatile private var touched = 0

    private inline fun <T> native(f: (Long) -> T): T {
        val r = f(handle.get())
        touched = 1
        return r
    }

    /** The backend actually running this session (AUTO resolves to a concrete one). */
    val backend: Backend get() = Backend.of(native { NativeBridge.sessionBackend(it) })

    /** What runs the session, for logs: "cpu", the GPU adapter, or "cpu (auto: reason)". */
    val device: String get() = native { NativeBridge.sessionDevice(it) }

    /** Whether the dot products compute in f16 (see [GpuPrecision]); false on the CPU. */
    val gpuF16: Boolean get() = native { NativeBridge.sessionGpuF16(it) }

    /** Per-op timing of later runs (see [profile]). */
    @Volatile
    var profiling: Boolean = false
        set(on) {
            native { NativeBridge.sessionSetProfiling(it, on) }
            field = on
        }

    /**
     * Runs a batch. Each input is a FloatArray, IntArray or LongArray (token ids) of
     * `batch × per-sample` elements in graph-input order; returns every output.
     */
    fun run(vararg inputs: Any): List<FloatArray> = native { NativeBridge.sessionRun(it, arrayOf(*inputs)).toList() }

    /** Runs a single-input, single-output model on float data. */
    fun run(input: FloatArray): FloatArray = native { NativeBridge.sessionRun(it, arrayOf<Any>(input))[0] }

    /**
     * Sets each input's per-sample shape (no batch axis, graph-input order) for the following
     * runs, for a model with bounded dims ([Model.dims]): each dim's value comes from the input
     * axes that are that dim, within its range; fixed axes keep their size. The session then
     * computes only that size, in the memory planned at the bound (nothing is allocated). [run]
     * then takes `batch × per-sample` elements at these shapes, and returns outputs of
     * [outputShape]. A model of fixed sizes takes only its own shapes. A shape out of range, of
     * another rank, a fixed axis that differs or two inputs disagreeing on a dim throws
     * [KestrelException] SHAPE (the message names the input, the dim and its range), and the
     * session is back at the bound ([Model.inputs]). A GPU session is lowered again at new sizes
     * (a GPU limit at them throws TOO_LARGE or UNSUPPORTED, and also leaves it at the bound). One
     * call at a time per session, as [run] (BUSY otherwise). From Java:
     * `setInputShapes(new int[] {12, 8})`.
     */
    fun setInputShapes(vararg shapes: IntArray) {
        native { NativeBridge.sessionSetInputShapes(it, arrayOf<Any>(*shapes)) }
    }

    /** [setInputShapes] with a list, one shape per input. */
    fun setInputShapes(shapes: List<IntArray>) {
        native { NativeBridge.sessionSetInputShapes(it, shapes.toTypedArray<Any>()) }
    }

    /**
     * Sets the input shapes ([setInputShapes]) and runs [inputs] at them ([run]) in one call, so no
     * other call on the session comes between; returns every output, of [outputShape] per sample.
     */
    fun run(inputs: List<Any>, shapes: List<IntArray>): List<FloatArray> = native {
        NativeBridge.sessionRunShaped(it, inputs.toTypedArray(), shapes.toTypedArray<Any>()).toList()
    }

    /** Per-sample shape of input [index] at the session's current sizes ([setInputShapes]; the model's until set). */
    fun inputShape(index: Int): IntArray = native { NativeBridge.sessionTensorShape(it, false, index) }

    /** Per-sample shape of output [index] at the session's current sizes: a run returns `batch ×` its product floats. */
    fun outputShape(index: Int): IntArray = native { NativeBridge.sessionTensorShape(it, true, index) }

    /**
     * Runs [batch] samples without copying the data: each input is read from, and each output
     * written into, a **direct** buffer in the platform's byte order (the native code reads and
     * writes their memory in place: `GetDirectBufferAddress`), so outputs can be reused run after
     * run and nothing is allocated for the data. Inputs in graph-input order: a [ByteBuffer]
     * holding the input's element type (floats, or i32 token ids), a [FloatBuffer], or an
     * [IntBuffer]/[LongBuffer] of token ids; outputs in graph-output order: [ByteBuffer] or
     * [FloatBuffer] of floats. Each is read from index 0 (its position and limit are not used)
     * and must hold at least `batch × per-sample` elements.
     *
     * Make them with `ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder())` (and
     * `.asFloatBuffer()`), or map a file. A heap buffer (`ByteBuffer.allocate`, `FloatBuffer.wrap`),
     * another byte order or a read-only output throws [KestrelException] INVALID_ARGUMENT; a
     * buffer too small BUFFER_TOO_SMALL; a buffer of the wrong type SHAPE; misaligned data
     * (a slice at an odd offset) MISALIGNED; an output overlapping another buffer
     * INVALID_ARGUMENT. At most 16 inputs and 16 outputs. Do not change the buffers from another
     * thread during the call.
     */
    @JvmOverloads
    fun runBuffers(inputs: List<Buffer>, outputs: List<Buffer>, batch: Int = 1) {
        native { NativeBridge.sessionRunBuffers(it, batch, inputs.toTypedArray<Any>(), outputs.toTypedArray<Any>()) }
    }

    /** [runBuffers] for a model with one input and one output. */
    @JvmOverloads
    fun runBuffers(input: Buffer, output: Buffer, batch: Int = 1) {
        native { NativeBridge.sessionRunBuffers(it, batch, arrayOf<Any>(input), arrayOf<Any>(output)) }
    }

    /** The model's class names, read once (see [classify]). */
    @Volatile private var classNames: List<String>? = null

    private fun classes(indices: IntArray, probabilities: FloatArray): List<Classification> {
        val names = classNames ?: native { NativeBridge.sessionLabels(it).toList() }.also { classNames = it }
        return indices.indices.map { Classification(indices[it], names[indices[it]], probabilities[it]) }
    }

    private fun classifyNative(pixels: Any, offset: Int, width: Int, height: Int, stride: Int, format: PixelFormat, k: Int): List<Classification> {
        if (k < 1) throw KestrelException(KestrelException.INVALID_ARGUMENT, "k = $k: at least 1")
        val indices = IntArray(k)
        val probabilities = FloatArray(k)
        native { NativeBridge.sessionClassify(it, pixels, offset, width, height, stride, format.code, indices, probabilities) }
        return classes(indices, probabilities)
    }

    /**
     * Classifies an 8-bit image: preprocessed as the model file records (colour, antialiased
     * resize, centre crop, mean/std), run at batch 1, softmax, and the [k] most probable classes,
     * best first (equal probabilities: the lower index first) — the same numbers as `kestrel
     * classify` for an image file that decodes to these pixels. The image is read from the
     * buffer's position: [height] rows of [width] pixels of [format], [stride] bytes apart
     * (at least `width × bytes per pixel`). A direct buffer is read in place; a heap buffer
     * through its array (a read-only heap buffer is copied). Bad geometry (0 sizes, a stride too
     * small, a buffer too short) throws [KestrelException] INVALID_ARGUMENT or BUFFER_TOO_SMALL,
     * `k` 0 or above the classes INVALID_ARGUMENT, a model without image preprocessing
     * UNSUPPORTED. The session keeps its buffers between calls (a CPU session allocates no native
     * memory after the first call for images of one size). Like [run], one call at a time per
     * session (BUSY otherwise). On Android, `classify(bitmap)` (KestrelAndroid.kt) calls this.
     */
    @JvmOverloads
    fun classify(pixels: ByteBuffer, width: Int, height: Int, stride: Int, format: PixelFormat, k: Int = 1): List<Classification> =
        when {
            pixels.isDirect -> classifyNative(pixels, pixels.position(), width, height, stride, format, k)
            pixels.hasArray() ->
                classifyNative(pixels.array(), pixels.arrayOffset() + pixels.position(), width, height, stride, format, k)
            else -> {
                val bytes = ByteArray(pixels.remaining())
                pixels.duplicate().get(bytes)
                classifyNative(bytes, 0, width, height, stride, format, k)
            }
        }

    /** [classify] on a byte array (read in place from [offset]). */
    @JvmOverloads
    fun classify(pixels: ByteArray, width: Int, height: Int, stride: Int, format: PixelFormat, k: Int = 1, offset: Int = 0): List<Classification> =
        classifyNative(pixels, offset, width, height, stride, format, k)

    /**
     * [classify] on colour ints `0xAARRGGBB` (what Android's `Bitmap.getPixels(pixels, offset,
     * stride, …)` fills): the image starts at [offset] and its rows are [stride] **ints** apart
     * (default [width]), as in `getPixels`. Read in place.
     */
    @JvmOverloads
    fun classify(pixels: IntArray, width: Int, height: Int, stride: Int = width, k: Int = 1, offset: Int = 0): List<Classification> {
        if (stride < 0 || offset < 0 || stride > Int.MAX_VALUE / 4 || offset > Int.MAX_VALUE / 4) {
            throw KestrelException(KestrelException.INVALID_ARGUMENT, "stride $stride or offset $offset is negative or too large")
        }
        return classifyNative(pixels, offset * 4, width, height, stride * 4, PixelFormat.BGRA_8888, k)
    }

    /** How the last run's [profile] was measured. */
    val profileSource: TimingSource get() = TimingSource.values()[native { NativeBridge.profileSource(it) }]

    /** Wall time of the last profiled run in ns (GPU: submission to readback), 0 if not profiled. */
    val profileWallNanos: Long get() = native { NativeBridge.profileWallNanos(it) }

    /** Per-op times of the last run (empty unless [profiling] was on), see [profileSource]. */
    fun profile(): List<OpTiming> = native { h ->
        val ops = NativeBridge.profileOps(h)
        val nanos = NativeBridge.profileNanos(h)
        ops.indices.map { OpTiming(ops[it], nanos[it]) }
    }

    /** Frees the session, from any thread, also during a run (see the class). A second call does nothing. */
    override fun close() {
        net.clean()
    }
}
