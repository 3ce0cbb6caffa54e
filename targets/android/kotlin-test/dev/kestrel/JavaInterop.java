package dev.kestrel;

import java.util.List;

/**
 * The Kotlin API called from Java (run by targets/android/kotlin-check.sh): the default arguments
 * of Model.session through @JvmOverloads, try-with-resources, getters, TensorInfo equality, and a
 * closed object's KestrelException, Kestrel.setThreads/getThreads/getDefaultThreads.
 */
public final class JavaInterop {
    private JavaInterop() {}

    private static int failed = 0;

    private static void check(boolean ok, String what) {
        if (!ok) {
            failed++;
            System.out.println("FAIL (Java): " + what);
        }
    }

    public static void main(String[] args) {
        int threads = Kestrel.getDefaultThreads();
        check(threads >= 1 && threads <= 4, "Kestrel.getDefaultThreads() from Java: " + threads);
        Kestrel.setThreads(1);
        check(Kestrel.getThreads() == 1, "Kestrel.setThreads/getThreads from Java");
        Model closed;
        try (Model model = Model.load(args[0]);
                Session a = model.session();
                Session b = model.session(2);
                Session c = model.session(1, Backend.CPU);
                Session d = model.session(1, Backend.CPU, GpuPrecision.F32)) {
            List<TensorInfo> inputs = model.getInputs();
            check(inputs.equals(model.getInputs()), "TensorInfo lists equal");
            float[] x = new float[inputs.get(0).getSize()];
            float[] y = c.run(x);
            check(y.length == model.getOutputs().get(0).getSize(), "run(float[]) from Java");
            check(java.util.Arrays.equals(y, d.run(x)), "same outputs");
            check(a.run(new Object[] {x}).size() == 1, "run(Object...) from Java");
            check(b.getBackend() != Backend.AUTO && !c.getDevice().isEmpty(), "getters from Java");
            check(!model.getLabels().isEmpty(), "labels from Java");
            check(model.getDims().isEmpty(), "getDims() from Java (a model of fixed sizes)");
            c.setInputShapes(inputs.get(0).getShape());
            check(java.util.Arrays.equals(c.inputShape(0), inputs.get(0).getShape())
                    && java.util.Arrays.equals(c.outputShape(0), model.getOutputs().get(0).getShape()),
                    "setInputShapes(int[]...) / inputShape / outputShape from Java");
            closed = model;
        }
        try {
            closed.getName();
            check(false, "getName after close: no exception");
        } catch (KestrelException e) {
            check(e.getStatus() == KestrelException.CLOSED, "getName after close: status " + e.getStatus());
        }
        System.out.println("Java interop: " + (failed == 0 ? "passed" : failed + " failed"));
        System.exit(failed == 0 ? 0 : 1);
    }
}
