package dev.kestrel;

/**
 * A Kestrel error: the C ABI's status code (KESTREL_ERR_*) and its message. Every failure of the
 * SDK is one, including a call on a closed {@link Model} or {@link Session} ({@link #CLOSED}, also
 * when another thread closed it during the call) and a call on a session another thread is
 * running ({@link #BUSY}).
 */
public class KestrelException extends RuntimeException {
    /** KestrelStatus codes (targets/ffi/include/kestrel.h). */
    public static final int NULL_POINTER = 1, INVALID_ARGUMENT = 2, INVALID_HANDLE = 3, MISALIGNED = 4,
            TOO_LARGE = 5, IO = 6, INVALID_MODEL = 7, SHAPE = 8, INDEX = 9, INPUT_VALUE = 10, UNSUPPORTED = 11,
            BUFFER_TOO_SMALL = 12, PANIC = 13, INTERNAL = 14, NO_GPU = 15, GPU = 16, CLOSED = 17, BUSY = 18;

    private static final long serialVersionUID = 1L;

    private final int status;

    public KestrelException(int status, String message) {
        super(message);
        this.status = status;
    }

    /** The KestrelStatus code (one of the constants above). */
    public int getStatus() {
        return status;
    }
}
