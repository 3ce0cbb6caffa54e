// The Kotlin SDK's process settings and I/O on the host JVM against libkestrel_jni.so (run by
// targets/android/kotlin-check.sh, in a JVM of its own so the thread count starts unset): the
// thread count (issue 35, item 2) — its default applied by the first session, outputs identical
// for 1..4 threads, bad counts refused — and runs on direct buffers without copies (outputs equal
// the FloatArray API's, a reused output buffer, every bad buffer a KestrelException) — and models
// from a ByteBuffer (mapped and aligned direct ones read in place) and from an fd + offset + length
// (issue 35, item 3), every bad source a KestrelException.
//
// Usage: SdkCheckKt MODEL.kes
package dev.kestrel

import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.FloatBuffer
import kotlin.system.exitProcess

private var passed = 0
private var failed = 0

private fun check(ok: Boolean, what: String) {
    if (ok) {
        passed++
    } else {
        failed++
        println("FAIL: $what")
    }
}

/** Runs [f], which must throw KestrelException with [status]. */
private inline fun expectStatus(status: Int, what: String, f: () -> Unit) {
    try {
        f()
        check(false, "$what: no exception")
    } catch (e: KestrelException) {
        check(e.status == status, "$what: status ${e.status} (${e.message}), expected $status")
    } catch (e: Throwable) {
        check(false, "$what: $e instead of KestrelException")
    }
}

private const val BATCH = 8

private fun threads(path: String) {
    check(Kestrel.threads == 1, "no thread started before the first session: ${Kestrel.threads}")
    val d = Kestrel.defaultThreads
    check(d in 1..4, "defaultThreads $d")
    Model.load(path).use { model ->
        val per = model.inputs[0].size
        val x = FloatArray(BATCH * per) { ((it * 37) % 101) / 50f - 1f }
        val want = model.session(BATCH, Backend.CPU).use { it.run(x) }
        check(Kestrel.threads == d, "the first session applied the default $d: ${Kestrel.threads}")
        for (n in listOf(1, 2, 3, 4)) {
            Kestrel.threads = n
            check(Kestrel.threads == n, "threads = $n")
            model.session(BATCH, Backend.CPU).use {
                check(it.run(x).contentEquals(want), "batch $BATCH on $n threads: outputs differ")
            }
        }
        Kestrel.threads = 2
        expectStatus(KestrelException.INVALID_ARGUMENT, "threads = -1") { Kestrel.threads = -1 }
        expectStatus(KestrelException.INVALID_ARGUMENT, "threads = 257") { Kestrel.threads = 257 }
        check(Kestrel.threads == 2, "a refused count changes nothing: ${Kestrel.threads}")
        model.session(1, Backend.CPU).close()
        check(Kestrel.threads == 2, "a chosen count is not replaced by the default")
        Kestrel.threads = 0
        check(Kestrel.threads == d, "0 is the default")
    }
    println("threads: default $d applied by the first session; batch $BATCH on 1/2/3/4 threads bit-identical; " +
        "-1 and 257 refused (INVALID_ARGUMENT)")
}

private fun direct(floats: Int): ByteBuffer = ByteBuffer.allocateDirect(4 * floats).order(ByteOrder.nativeOrder())

private fun FloatBuffer.toArray(n: Int): FloatArray = FloatArray(n) { get(it) }

private fun buffers(path: String) {
    Model.load(path).use { model ->
        val per = model.inputs[0].size
        val outPer = model.outputs[0].size
        val batch = 4
        val x = FloatArray(batch * per) { ((it * 29) % 97) / 48f - 1f }
        model.session(batch, Backend.CPU).use { s ->
            val want = s.run(x)
            // ByteBuffer in, ByteBuffer out.
            val xb = direct(x.size).also { it.asFloatBuffer().put(x) }
            val yb = direct(want.size)
            s.runBuffers(xb, yb, batch)
            check(yb.asFloatBuffer().toArray(want.size).contentEquals(want), "ByteBuffer in/out equals run(FloatArray)")
            // FloatBuffer views, the output reused run after run; one sample from the same buffers.
            val xf = xb.asFloatBuffer()
            val yf = direct(want.size).asFloatBuffer()
            var same = true
            repeat(100) {
                yf.clear()
                yf.put(FloatArray(want.size) { Float.NaN }, 0, want.size)
                s.runBuffers(listOf(xf), listOf(yf), batch)
                same = same && yf.toArray(want.size).contentEquals(want)
            }
            check(same, "100 runs into one reused FloatBuffer")
            val y1 = direct(outPer).asFloatBuffer()
            s.runBuffers(xf, y1)
            check(y1.toArray(outPer).contentEquals(s.run(x.copyOf(per))), "batch 1 (the default) reads the first sample")
            // A larger buffer than needed is fine (read from index 0).
            s.runBuffers(xf, direct(want.size + 7).asFloatBuffer(), batch)

            // Every bad buffer: a KestrelException, never a crash.
            val inv = KestrelException.INVALID_ARGUMENT
            expectStatus(inv, "a heap ByteBuffer input") {
                s.runBuffers(ByteBuffer.allocate(4 * x.size).order(ByteOrder.nativeOrder()), yb, batch)
            }
            expectStatus(inv, "a wrapped FloatArray input") { s.runBuffers(FloatBuffer.wrap(x), yb, batch) }
            expectStatus(inv, "a heap output") { s.runBuffers(xb, FloatBuffer.allocate(want.size), batch) }
            val other = if (ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN) ByteOrder.BIG_ENDIAN else ByteOrder.LITTLE_ENDIAN
            expectStatus(inv, "an input in the other byte order") {
                s.runBuffers(ByteBuffer.allocateDirect(4 * x.size).order(other), yb, batch)
            }
            expectStatus(inv, "a FloatBuffer view in the other byte order") {
                s.runBuffers(ByteBuffer.allocateDirect(4 * x.size).order(other).asFloatBuffer(), yb, batch)
            }
            expectStatus(inv, "a read-only output") { s.runBuffers(xb, direct(want.size).asReadOnlyBuffer(), batch) }
            expectStatus(inv, "the output is the input") { s.runBuffers(xb, xb, batch) }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "an input one float short") {
                s.runBuffers(direct(x.size - 1), yb, batch)
            }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "an output one float short") {
                s.runBuffers(xb, direct(want.size - 1), batch)
            }
            expectStatus(KestrelException.SHAPE, "an IntBuffer for a float input") {
                s.runBuffers(ByteBuffer.allocateDirect(4 * x.size).order(ByteOrder.nativeOrder()).asIntBuffer(), yb, batch)
            }
            expectStatus(KestrelException.SHAPE, "an IntBuffer output") {
                s.runBuffers(xb, direct(want.size).asIntBuffer(), batch)
            }
            expectStatus(KestrelException.SHAPE, "two inputs for a one-input model") {
                s.runBuffers(listOf(xb, xb), listOf(yb), batch)
            }
            expectStatus(KestrelException.SHAPE, "batch 0") { s.runBuffers(xb, yb, 0) }
            expectStatus(KestrelException.SHAPE, "batch above the capacity") {
                s.runBuffers(direct(8 * per), direct(8 * outPer), 8)
            }
            val odd = ByteBuffer.allocateDirect(4 * x.size + 4).order(ByteOrder.nativeOrder())
            odd.position(1)
            val misaligned = odd.slice().order(ByteOrder.nativeOrder())
            expectStatus(KestrelException.MISALIGNED, "a ByteBuffer slice at an odd address") {
                s.runBuffers(misaligned, yb, batch)
            }
        }
        // Through the bridge (as Java could call it): a null element or a non-buffer, typed errors too.
        val mh = NativeBridge.modelLoadPath(path)
        val sh = NativeBridge.sessionNew(mh, NativeBridge.BACKEND_CPU, batch)
        val yb = direct(batch * outPer)
        expectStatus(KestrelException.NULL_POINTER, "a null input") {
            NativeBridge.sessionRunBuffers(sh, batch, arrayOf<Any?>(null), arrayOf<Any>(yb))
        }
        expectStatus(KestrelException.INVALID_ARGUMENT, "a float[] where a buffer goes") {
            NativeBridge.sessionRunBuffers(sh, batch, arrayOf<Any>(x), arrayOf<Any>(yb))
        }
        NativeBridge.sessionFree(sh)
        NativeBridge.modelFree(mh)
        val closed = model.session(1, Backend.CPU)
        closed.close()
        expectStatus(KestrelException.CLOSED, "runBuffers on a closed session") { closed.runBuffers(direct(per), direct(outPer)) }
    }
    println("direct buffers: ByteBuffer and FloatBuffer I/O equal to run(FloatArray), 100 runs into one reused " +
        "output; heap, other-order, read-only, short, wrong-type, misaligned, null and overlapping buffers refused")
}

/** The int fd of an open stream (host JVM: FileDescriptor's private field; Android: ParcelFileDescriptor.fd). */
private fun intFd(fd: java.io.FileDescriptor): Int {
    val f = java.io.FileDescriptor::class.java.getDeclaredField("fd")
    f.isAccessible = true
    return f.getInt(fd)
}

private fun sources(path: String) {
    val file = java.io.File(path)
    val bytes = file.readBytes()
    val want = Model.load(path).use { m ->
        check(m.storage == Model.Storage.MAPPED, "a path is mapped: ${m.storage}")
        m.session(1, Backend.CPU).use { it.run(FloatArray(m.inputs[0].size) { i -> (i % 7) / 7f }) }
    }
    fun same(m: Model, what: String) {
        m.session(1, Backend.CPU).use {
            check(it.run(FloatArray(m.inputs[0].size) { i -> (i % 7) / 7f }).contentEquals(want), "$what: outputs")
        }
    }
    // From a ByteBuffer: a mapped file (page-aligned: read in place), a direct and a heap buffer (copied).
    java.io.RandomAccessFile(file, "r").use { raf ->
        val mapped = raf.channel.map(java.nio.channels.FileChannel.MapMode.READ_ONLY, 0, bytes.size.toLong())
        Model.fromByteBuffer(mapped).use { m ->
            check(m.storage == Model.Storage.BORROWED, "a mapped ByteBuffer is read in place: ${m.storage}")
            same(m, "mapped ByteBuffer")
        }
    }
    val directBuf = ByteBuffer.allocateDirect(bytes.size + 64)
    val shift = (64 - (java.lang.Long.remainderUnsigned(directAddress(directBuf), 64L)).toInt()) % 64
    directBuf.position(shift)
    directBuf.put(bytes)
    directBuf.position(shift)
    directBuf.limit(shift + bytes.size)
    Model.fromByteBuffer(directBuf).use { m ->
        check(m.storage == Model.Storage.BORROWED, "an aligned direct ByteBuffer is read in place: ${m.storage}")
        same(m, "aligned direct ByteBuffer")
    }
    directBuf.position(shift + 1)
    directBuf.limit(shift + 1 + bytes.size - 1)
    expectStatus(KestrelException.INVALID_MODEL, "a ByteBuffer cut at its front") { Model.fromByteBuffer(directBuf) }
    Model.fromByteBuffer(ByteBuffer.wrap(bytes)).use { m ->
        check(m.storage == Model.Storage.COPIED, "a heap ByteBuffer is copied: ${m.storage}")
        same(m, "heap ByteBuffer")
    }
    expectStatus(KestrelException.INVALID_ARGUMENT, "an empty ByteBuffer") { Model.fromByteBuffer(ByteBuffer.allocateDirect(0)) }
    expectStatus(KestrelException.INVALID_MODEL, "a heap ByteBuffer of junk") { Model.fromByteBuffer(ByteBuffer.wrap(ByteArray(4096) { 7 })) }

    // From a file descriptor + offset + length (an AssetFileDescriptor's range): mapped at a
    // multiple of 64, read at another offset; the fd may be closed at once.
    val tmp = java.io.File.createTempFile("kestrel-sdk", ".bin")
    try {
        for ((prefix, storage) in listOf(0 to Model.Storage.MAPPED, 4160 to Model.Storage.MAPPED, 13 to Model.Storage.COPIED)) {
            tmp.writeBytes(ByteArray(prefix) { 1 } + bytes + ByteArray(33))
            val m = java.io.FileInputStream(tmp).use { Model.fromFd(intFd(it.fd), prefix.toLong(), bytes.size.toLong()) }
            m.use {
                check(it.storage == storage, "fd at offset $prefix: ${it.storage}, expected $storage")
                same(it, "fd at offset $prefix")
            }
        }
        tmp.writeBytes(bytes)
        java.io.FileInputStream(tmp).use { s ->
            val fd = intFd(s.fd)
            val n = bytes.size.toLong()
            val inv = KestrelException.INVALID_ARGUMENT
            expectStatus(inv, "fd -1") { Model.fromFd(-1, 0, n) }
            expectStatus(inv, "length 0") { Model.fromFd(fd, 0, 0) }
            expectStatus(inv, "a negative offset") { Model.fromFd(fd, -1, n) }
            expectStatus(inv, "a negative length (UNKNOWN_LENGTH)") { Model.fromFd(fd, 0, -1) }
            expectStatus(KestrelException.IO, "an offset past the end") { Model.fromFd(fd, n + 10, 64) }
            expectStatus(KestrelException.IO, "a short file") { Model.fromFd(fd, 0, n + 1) }
            expectStatus(KestrelException.IO, "an fd that is not open") { Model.fromFd(987_654, 0, n) }
            expectStatus(KestrelException.INVALID_MODEL, "a truncated model") { Model.fromFd(fd, 0, n - 100) }
        }
        // A pipe: not a regular file, refused at once (a read would block forever).
        val p = ProcessBuilder("sleep", "30").start()
        try {
            val inner = p.inputStream
            val field = java.io.FilterInputStream::class.java.getDeclaredField("in")
            field.isAccessible = true
            val fis = field.get(inner) as java.io.FileInputStream
            val t0 = System.nanoTime()
            expectStatus(KestrelException.IO, "a pipe") { Model.fromFd(intFd(fis.fd), 0, 64) }
            check(System.nanoTime() - t0 < 5_000_000_000L, "a pipe is refused without blocking")
        } finally {
            p.destroy()
        }
    } finally {
        tmp.delete()
    }
    println("model sources: a mapped and an aligned direct ByteBuffer read in place (BORROWED), a heap one copied; " +
        "fd ranges at offsets 0 and 4160 mapped, 13 read; -1, 0, negative, past-the-end, short, closed, pipe, " +
        "truncated and junk refused with their statuses")
}

/** A direct buffer's address (host JVM: java.nio.Buffer's private field), to place the model on a 64-byte boundary. */
private fun directAddress(b: ByteBuffer): Long {
    val f = java.nio.Buffer::class.java.getDeclaredField("address")
    f.isAccessible = true
    return f.getLong(b)
}

fun main(args: Array<String>) {
    val path = args[0]
    threads(path)
    buffers(path)
    sources(path)
    println("Kotlin SDK I/O check: $passed passed, $failed failed")
    exitProcess(if (failed == 0) 0 else 1)
}
