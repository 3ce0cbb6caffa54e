package dev.kestrel;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * Host test of the JNI layer: the real dev.kestrel.NativeBridge against libkestrel_jni.so built
 * for Linux. Run by targets/android/jni/tests/java.rs as
 *   java -Djava.library.path=TARGET_DIR -cp CLASSES dev.kestrel.JniTest FIXTURE_DIR
 * (fixtures as in targets/ffi/tests/support/fixtures.rs). Prints "N passed, N failed".
 */
public final class JniTest {
    private static int passed = 0, failed = 0;
    private static final double TOL = 1e-4;
    /** The wgpu backend vs PyTorch (f32 throughout, other summation order): the C test's GPU_TOL. */
    private static final double GPU_TOL = 1e-4;
    /** f16 products on the GPU vs PyTorch: the C test's bound for f16 sessions. */
    private static final double F16_TOL = 5e-2;

    private static void check(boolean ok, String what) {
        if (ok) {
            passed++;
        } else {
            failed++;
            System.err.println("FAIL: " + what);
        }
    }

    interface Body { void run(); }

    private static void expectStatus(int status, Body body, String what) {
        try {
            body.run();
            check(false, what + ": no exception");
        } catch (KestrelException e) {
            check(e.getStatus() == status && !e.getMessage().isEmpty(),
                    what + ": status " + e.getStatus() + " (" + e.getMessage() + "), expected " + status);
        }
    }

    private static ByteBuffer le(Path p) throws IOException {
        return ByteBuffer.wrap(Files.readAllBytes(p)).order(ByteOrder.LITTLE_ENDIAN);
    }

    private static float[] floats(Path p) throws IOException {
        ByteBuffer b = le(p);
        float[] v = new float[b.remaining() / 4];
        b.asFloatBuffer().get(v);
        return v;
    }

    private static long[] longs(Path p) throws IOException {
        ByteBuffer b = le(p);
        long[] v = new long[b.remaining() / 8];
        b.asLongBuffer().get(v);
        return v;
    }

    private static double maxRelErr(float[] a, float[] b) {
        if (a.length != b.length) return Double.POSITIVE_INFINITY;
        double worst = 0;
        for (int i = 0; i < a.length; i++) {
            double e = Math.abs((double) a[i] - b[i]) / (1 + Math.abs((double) b[i]));
            if (!(e <= worst)) worst = e;
        }
        return worst;
    }

    public static void main(String[] args) throws Exception {
        Path dir = Path.of(args[0]);

        // Image model, loaded from a path.
        long m = NativeBridge.modelLoadPath(dir.resolve("image.kes").toString());
        check(m != 0, "model handle");
        check(NativeBridge.tensorCount(m, false) == 1 && NativeBridge.tensorCount(m, true) == 1, "tensor counts");
        check(NativeBridge.tensorName(m, false, 0).equals("x"), "input name");
        check(NativeBridge.tensorDType(m, false, 0) == NativeBridge.DTYPE_F32, "input dtype");
        check(Arrays.equals(NativeBridge.tensorShape(m, false, 0), new int[] {1, 64, 64}), "input shape");
        check(Arrays.equals(NativeBridge.tensorShape(m, true, 0), new int[] {10}), "output shape");
        check(NativeBridge.modelName(m).equals("model"), "model name " + NativeBridge.modelName(m));
        check(NativeBridge.modelTask(m) != null, "task");
        check(NativeBridge.modelLabels(m) != null, "labels");

        float[] x = floats(dir.resolve("image_input.bin"));
        float[] want = floats(dir.resolve("image_expected.bin"));
        check(NativeBridge.backendAvailable(NativeBridge.BACKEND_CPU)
                && NativeBridge.backendAvailable(NativeBridge.BACKEND_AUTO), "cpu and auto available");
        expectStatus(KestrelException.INVALID_ARGUMENT, () -> NativeBridge.backendAvailable(7), "backend code 7");
        boolean gpu = NativeBridge.backendAvailable(NativeBridge.BACKEND_WGPU);
        if ("1".equals(System.getenv("KESTREL_REQUIRE_GPU"))) {
            check(gpu, "KESTREL_REQUIRE_GPU=1 but the wgpu backend is not available");
        }
        if (gpu) {
            long g = NativeBridge.sessionNew(m, NativeBridge.BACKEND_WGPU, 4);
            check(NativeBridge.sessionBackend(g) == NativeBridge.BACKEND_WGPU, "wgpu session backend");
            String device = NativeBridge.sessionDevice(g);
            check(!device.startsWith("cpu"), "wgpu session device " + device);
            check(NativeBridge.profileSource(g) == NativeBridge.TIMING_NONE, "no profile before a run");
            NativeBridge.sessionSetProfiling(g, true);
            float[] yg = NativeBridge.sessionRun(g, new Object[] {x})[0];
            double gerr = maxRelErr(yg, want);
            check(gerr <= GPU_TOL, "image batch 4 on the GPU vs PyTorch: max rel err " + gerr);
            int src = NativeBridge.profileSource(g);
            long[] gn = NativeBridge.profileNanos(g);
            long gtotal = Arrays.stream(gn).sum();
            check(src == NativeBridge.TIMING_GPU_TIMESTAMPS ? gn.length > 0 && gtotal > 0
                    && gtotal <= NativeBridge.profileWallNanos(g)
                    : src == NativeBridge.TIMING_GPU_SUBMISSION && gn.length == 0, "GPU profile, source " + src);
            check(NativeBridge.profileOps(g).length == gn.length, "GPU profile ops and times");
            System.out.printf("image model via JNI on %s: max rel err %.2e vs PyTorch, timing source %d, %d ops "
                    + "timed, %.3f ms GPU time%n", device, gerr, src, gn.length, gtotal / 1e6);
            // GPU precision: f32 by sessionNew; AUTO takes f16 where the device has SHADER_F16.
            check(!NativeBridge.sessionGpuF16(g), "sessionNew made an f16 GPU session");
            NativeBridge.sessionFree(g);
            long h = NativeBridge.sessionNewWithPrecision(m, NativeBridge.BACKEND_WGPU, 4,
                    NativeBridge.GPU_PRECISION_AUTO);
            boolean h16 = NativeBridge.sessionGpuF16(h);
            double herr = maxRelErr(NativeBridge.sessionRun(h, new Object[] {x})[0], want);
            check(herr <= (h16 ? F16_TOL : GPU_TOL), "AUTO precision (f16 " + h16 + ") vs PyTorch: " + herr);
            NativeBridge.sessionFree(h);
        } else {
            // Built without wgpu (UNSUPPORTED) or no usable adapter (NO_GPU).
            try {
                NativeBridge.sessionFree(NativeBridge.sessionNew(m, NativeBridge.BACKEND_WGPU, 4));
                check(false, "wgpu session without wgpu: no exception");
            } catch (KestrelException e) {
                check(e.getStatus() == KestrelException.UNSUPPORTED || e.getStatus() == KestrelException.NO_GPU,
                        "wgpu session without wgpu: status " + e.getStatus() + " (" + e.getMessage() + ")");
            }
        }
        // AUTO: the GPU when a hardware adapter is there (a software renderer such as lavapipe only
        // when KESTREL_ADAPTER names it), else the CPU.
        long a = NativeBridge.sessionNew(m, NativeBridge.BACKEND_AUTO, 1);
        int auto = NativeBridge.sessionBackend(a);
        check(auto == NativeBridge.BACKEND_CPU || (gpu && auto == NativeBridge.BACKEND_WGPU), "auto resolves to "
                + auto);
        String autoDevice = NativeBridge.sessionDevice(a);
        check(auto == NativeBridge.BACKEND_CPU ? autoDevice.startsWith("cpu") : !autoDevice.startsWith("cpu"),
                "auto session device " + autoDevice);
        float[] ya = NativeBridge.sessionRun(a, new Object[] {Arrays.copyOf(x, 64 * 64)})[0];
        check(maxRelErr(ya, Arrays.copyOf(want, 10)) <= (auto == NativeBridge.BACKEND_CPU ? TOL : GPU_TOL),
                "auto batch 1");
        System.out.println("AUTO: " + autoDevice);
        NativeBridge.sessionFree(a);

        long s = NativeBridge.sessionNew(m, NativeBridge.BACKEND_CPU, 4);
        check(NativeBridge.sessionDevice(s).equals("cpu"), "cpu session device");
        NativeBridge.sessionSetProfiling(s, true);
        float[][] y = NativeBridge.sessionRun(s, new Object[] {x});
        check(y.length == 1 && y[0].length == 40, "batch-4 output length");
        double err = maxRelErr(y[0], want);
        check(err <= TOL, "image batch 4 vs PyTorch: max rel err " + err);
        String[] ops = NativeBridge.profileOps(s);
        long[] nanos = NativeBridge.profileNanos(s);
        long total = Arrays.stream(nanos).sum();
        check(ops.length > 0 && ops.length == nanos.length && total > 0, "profile");
        check(NativeBridge.profileSource(s) == NativeBridge.TIMING_CPU_WALL_CLOCK, "cpu profile source");
        check(NativeBridge.profileWallNanos(s) >= total, "cpu profile wall time");
        System.out.printf("image model via JNI: max rel err %.2e vs PyTorch, %d ops timed, %.3f ms%n", err,
                ops.length, total / 1e6);
        // Batch 1.
        float[][] y1 = NativeBridge.sessionRun(s, new Object[] {Arrays.copyOf(x, 64 * 64)});
        check(y1[0].length == 10 && maxRelErr(y1[0], Arrays.copyOf(want, 10)) <= TOL, "batch 1");

        // Same model from bytes; the model may be freed before its session.
        long m2 = NativeBridge.modelLoadBytes(Files.readAllBytes(dir.resolve("image.kes")));
        long s2 = NativeBridge.sessionNew(m2, NativeBridge.BACKEND_CPU, 1);
        NativeBridge.modelFree(m2);
        float[][] y2 = NativeBridge.sessionRun(s2, new Object[] {Arrays.copyOf(x, 64 * 64)});
        check(Arrays.equals(y2[0], y1[0]), "bytes-loaded model agrees");
        NativeBridge.sessionFree(s2);

        // Error paths.
        expectStatus(KestrelException.IO, () -> NativeBridge.modelLoadPath(dir.resolve("missing.kes").toString()),
                "missing file");
        expectStatus(KestrelException.INVALID_MODEL,
                () -> NativeBridge.modelLoadPath(dir.resolve("image_input.bin").toString()), "not a model");
        expectStatus(KestrelException.NULL_POINTER, () -> NativeBridge.modelLoadPath(null), "null path");
        expectStatus(KestrelException.NULL_POINTER, () -> NativeBridge.modelLoadBytes(null), "null bytes");
        expectStatus(KestrelException.INVALID_MODEL, () -> NativeBridge.modelLoadBytes(new byte[100]), "zeros");
        expectStatus(KestrelException.NULL_POINTER, () -> NativeBridge.modelName(0), "null model handle");
        expectStatus(KestrelException.INVALID_HANDLE, () -> NativeBridge.modelName(m + 1), "misaligned handle");
        expectStatus(KestrelException.INVALID_HANDLE, () -> NativeBridge.modelName(s), "session as model");
        expectStatus(KestrelException.INVALID_HANDLE, () -> NativeBridge.sessionRun(m, new Object[] {x}),
                "model as session");
        expectStatus(KestrelException.CLOSED, () -> NativeBridge.modelName(m2), "freed model");
        expectStatus(KestrelException.CLOSED, () -> NativeBridge.sessionFree(s2), "double free");
        expectStatus(KestrelException.INDEX, () -> NativeBridge.tensorName(m, false, 1), "input index");
        expectStatus(KestrelException.INDEX, () -> NativeBridge.tensorShape(m, true, -1), "negative index");
        expectStatus(KestrelException.INVALID_ARGUMENT, () -> NativeBridge.sessionNew(m, 9, 1), "bad backend");
        expectStatus(KestrelException.INVALID_ARGUMENT,
                () -> NativeBridge.sessionNewWithPrecision(m, NativeBridge.BACKEND_CPU, 1, 7), "bad GPU precision");
        expectStatus(KestrelException.INVALID_ARGUMENT,
                () -> NativeBridge.sessionNewWithPrecision(m, NativeBridge.BACKEND_CPU, 1, -1), "negative precision");
        long c16 = NativeBridge.sessionNewWithPrecision(m, NativeBridge.BACKEND_CPU, 1, NativeBridge.GPU_PRECISION_F16);
        check(NativeBridge.sessionBackend(c16) == NativeBridge.BACKEND_CPU && !NativeBridge.sessionGpuF16(c16),
                "a CPU session ignores F16");
        NativeBridge.sessionFree(c16);
        expectStatus(KestrelException.NULL_POINTER, () -> NativeBridge.sessionGpuF16(0), "gpuF16 of a null session");
        expectStatus(KestrelException.INVALID_ARGUMENT, () -> NativeBridge.sessionNew(m, 0, 0), "capacity 0");
        expectStatus(KestrelException.INVALID_ARGUMENT, () -> NativeBridge.sessionNew(m, 0, -1), "capacity -1");
        expectStatus(KestrelException.SHAPE, () -> NativeBridge.sessionRun(s, new Object[] {}), "no inputs");
        expectStatus(KestrelException.SHAPE, () -> NativeBridge.sessionRun(s, new Object[] {x, x}), "two inputs");
        expectStatus(KestrelException.SHAPE, () -> NativeBridge.sessionRun(s, new Object[] {new float[100]}),
                "partial sample");
        expectStatus(KestrelException.SHAPE, () -> NativeBridge.sessionRun(s, new Object[] {new float[5 * 4096]}),
                "over capacity");
        // Integers into a float input are taken as exact values; one past 2^24 has no exact f32.
        int[] big = new int[4096];
        big[5] = (1 << 24) + 1;
        expectStatus(KestrelException.INPUT_VALUE, () -> NativeBridge.sessionRun(s, new Object[] {big}),
                "an integer without an exact f32 into a float input");
        expectStatus(KestrelException.SHAPE, () -> NativeBridge.sessionRun(s, new Object[] {"text"}), "a String");
        expectStatus(KestrelException.NULL_POINTER, () -> NativeBridge.sessionRun(s, new Object[] {null}),
                "null input");
        expectStatus(KestrelException.NULL_POINTER, () -> NativeBridge.sessionRun(s, null), "null inputs");
        expectStatus(KestrelException.INVALID_HANDLE, () -> NativeBridge.sessionDevice(m), "model as session");
        expectStatus(KestrelException.NULL_POINTER, () -> NativeBridge.profileSource(0), "null session");
        expectStatus(KestrelException.PANIC, NativeBridge::selftestPanic, "panic is caught");
        // Still works after all that.
        check(maxRelErr(NativeBridge.sessionRun(s, new Object[] {x})[0], want) <= TOL, "after errors");
        NativeBridge.sessionFree(s);
        NativeBridge.modelFree(m);
        NativeBridge.modelFree(0);

        // Text model: i64 and i32 token ids.
        long t = NativeBridge.modelLoadPath(dir.resolve("text.kes").toString());
        check(NativeBridge.tensorDType(t, false, 0) == NativeBridge.DTYPE_I32, "ids dtype");
        long ts = NativeBridge.sessionNew(t, NativeBridge.BACKEND_CPU, 4);
        long[] ids = longs(dir.resolve("text_input.bin"));
        float[] twant = floats(dir.resolve("text_expected.bin"));
        float[] y64 = NativeBridge.sessionRun(ts, new Object[] {ids})[0];
        int[] ids32 = Arrays.stream(ids).mapToInt(v -> (int) v).toArray();
        float[] y32 = NativeBridge.sessionRun(ts, new Object[] {ids32})[0];
        double terr = maxRelErr(y64, twant);
        check(terr <= TOL, "text vs PyTorch: max rel err " + terr);
        check(Arrays.equals(y64, y32), "i32 and i64 ids agree");
        System.out.printf("text model via JNI: max rel err %.2e vs PyTorch%n", terr);
        ids32[3] = 1 << 30;
        expectStatus(KestrelException.INPUT_VALUE, () -> NativeBridge.sessionRun(ts, new Object[] {ids32}),
                "id outside the vocabulary");
        ids[3] = 1L << 40;
        expectStatus(KestrelException.INPUT_VALUE, () -> NativeBridge.sessionRun(ts, new Object[] {ids}),
                "id beyond i32");
        NativeBridge.sessionFree(ts);
        NativeBridge.modelFree(t);

        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }
}
