package dev.kestrel;

/**
 * The native methods of libkestrel_jni.so (Rust: targets/android/jni/src/lib.rs). Internal: apps
 * use {@link Model} and {@link Session} (Kotlin). Handles are opaque longs checked on the native
 * side (0, freed or wrong-kind handles throw {@link KestrelException}, they never crash). Kept in
 * Java so the very same class is compiled and run against the host library by the JNI test.
 */
public final class NativeBridge {
    static {
        System.loadLibrary("kestrel_jni");
    }

    private NativeBridge() {}

    /** KestrelBackend codes. */
    public static final int BACKEND_CPU = 0, BACKEND_WGPU = 1, BACKEND_AUTO = 2;
    /** KestrelGpuPrecision codes. */
    public static final int GPU_PRECISION_F32 = 0, GPU_PRECISION_F16 = 1, GPU_PRECISION_AUTO = 2;
    /** KestrelDType codes. */
    public static final int DTYPE_F32 = 0, DTYPE_I32 = 1, DTYPE_I64 = 2;
    /** KestrelPixelFormat codes. */
    public static final int PIXEL_RGBA8888 = 0, PIXEL_BGRA8888 = 1, PIXEL_RGB888 = 2, PIXEL_GREY8 = 3;
    /** KestrelTimingSource codes. */
    public static final int TIMING_NONE = 0, TIMING_CPU_WALL_CLOCK = 1, TIMING_GPU_TIMESTAMPS = 2,
            TIMING_GPU_SUBMISSION = 3;

    /** Whether a session on this backend can be created here (WGPU: built in and a GPU opens). */
    public static native boolean backendAvailable(int backend);

    public static native long modelLoadPath(String path);
    public static native long modelLoadBytes(byte[] data);
    /** The model in length bytes at offset of an open file (not taken over); see kestrel_model_load_fd. */
    public static native long modelLoadFd(int fd, long offset, long length);
    /** A direct ByteBuffer's bytes (0 to capacity): read in place when 64-byte aligned, else copied. */
    public static native long modelLoadBuffer(java.nio.ByteBuffer data);
    /** A KestrelStorage code: 0 copied, 1 memory-mapped, 2 the caller's memory read in place. */
    public static native int modelStorage(long model);
    public static native void modelFree(long model);
    public static native String modelName(long model);
    public static native String modelTask(long model);
    public static native String[] modelLabels(long model);
    public static native int tensorCount(long model, boolean output);
    public static native String tensorName(long model, boolean output, int index);
    public static native int tensorDType(long model, boolean output, int index);
    public static native int[] tensorShape(long model, boolean output, int index);
    /** The names of the model's bounded dims (format 2.0; empty for a model of fixed sizes). */
    public static native String[] modelDimNames(long model);
    /** min, max of each bounded dim, in {@link #modelDimNames}'s order. */
    public static native int[] modelDimRanges(long model);

    /** A session; GPU sessions compute in f32 (see {@link #sessionNewWithPrecision}). */
    public static native long sessionNew(long model, int backend, int capacity);
    /**
     * {@link #sessionNew} with the GPU arithmetic (a GPU_PRECISION_* code; CPU sessions ignore it):
     * F16 on a device without SHADER_F16 throws UNSUPPORTED (AUTO backend: the CPU instead).
     */
    public static native long sessionNewWithPrecision(long model, int backend, int capacity, int gpuPrecision);
    /** Whether the session's dot products compute in f16 (a GPU session made with F16, or AUTO on a device with it). */
    public static native boolean sessionGpuF16(long session);
    public static native void sessionFree(long session);
    public static native int sessionBackend(long session);
    /** What runs the session, for logs: "cpu", the GPU adapter, or "cpu (auto: REASON)". */
    public static native String sessionDevice(long session);
    public static native void sessionSetProfiling(long session, boolean on);
    /** Each input a float[], int[] or long[] of batch x per-sample elements; returns every output. */
    public static native float[][] sessionRun(long session, Object[] inputs);
    /**
     * Each input's per-sample shape (an int[] per input, no batch axis) for the following runs of a
     * model with bounded dims: kestrel_session_set_input_shapes (SHAPE naming the dim and its range;
     * the session is then at the bound).
     */
    public static native void sessionSetInputShapes(long session, Object[] shapes);
    /** {@link #sessionSetInputShapes} then {@link #sessionRun}, under one lock. */
    public static native float[][] sessionRunShaped(long session, Object[] inputs, Object[] shapes);
    /** Per-sample shape of input or output index at the session's current sizes. */
    public static native int[] sessionTensorShape(long session, boolean output, int index);
    /**
     * Runs {@code batch} samples without copying: each input read from, each output written into a
     * direct java.nio buffer in the native byte order (ByteBuffer of the element type, FloatBuffer,
     * IntBuffer/LongBuffer for token ids; outputs ByteBuffer/FloatBuffer), from index 0, holding at
     * least batch x per-sample elements. Heap, wrong-order or read-only (output) buffers throw
     * INVALID_ARGUMENT, short ones BUFFER_TOO_SMALL. At most 16 inputs and 16 outputs.
     */
    public static native void sessionRunBuffers(long session, int batch, Object[] inputs, Object[] outputs);
    /**
     * kestrel_classify: the 8-bit image in pixels (a direct ByteBuffer from its index 0, a byte[], or
     * an int[] of colour ints 0xAARRGGBB, read in place) starting offset bytes in, rows stride bytes
     * apart, of a PIXEL_* format; writes the indices.length best classes into indices and their
     * probabilities into probabilities. Bad geometry, format or k: KestrelException.
     */
    public static native void sessionClassify(long session, Object pixels, int offset, int width, int height,
            int stride, int format, int[] indices, float[] probabilities);
    /** The class names of the session's model (its labels, or the indices as text). */
    public static native String[] sessionLabels(long session);
    public static native String[] profileOps(long session);
    public static native long[] profileNanos(long session);
    /** A TIMING_* code: how profileNanos was measured. */
    public static native int profileSource(long session);
    public static native long profileWallNanos(long session);

    /**
     * Sets the CPU worker pool's thread count for the process (0: {@link #defaultThreads}); returns
     * the count in effect. Negative or above 256 throws INVALID_ARGUMENT.
     */
    public static native int setThreads(int n);
    /** The thread count CPU sessions use now (1 until set). */
    public static native int threads();
    /** min(4, performance cores, usable cores): the default for phones. */
    public static native int defaultThreads();

    /** Panics inside the native guard: throws KestrelException(KESTREL_ERR_PANIC). For tests. */
    public static native void selftestPanic();
}
