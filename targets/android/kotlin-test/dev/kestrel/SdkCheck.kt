// The Kotlin SDK's process settings and I/O on the host JVM against libkestrel_jni.so (run by
// targets/android/kotlin-check.sh, in a JVM of its own so the thread count starts unset): the
// thread count (issue 35, item 2) — its default applied by the first session, outputs identical
// for 1..4 threads, bad counts refused — and runs on direct buffers without copies (outputs equal
// the FloatArray API's, a reused output buffer, every bad buffer a KestrelException) — and models
// from a ByteBuffer (mapped and aligned direct ones read in place) and from an fd + offset + length
// (issue 35, item 3), every bad source a KestrelException — and Session.classify on decoded
// images against `kestrel classify`'s top-3 (issue 35, item 4) — and bounded dims (issue 34:
// Model.dims, Session.setInputShapes / run(inputs, shapes) / outputShape on the format 2.0 fixture
// targets/ffi/tests/data/bounded_dims.kes at several lengths).
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

/** The three sample images [classify] checks (under apps/kestrel-cli/samples). */
val CLASSIFY_SAMPLES = listOf("fmnist/ankle-boot/00000.png", "preprocess/bag-rgba-40x30.png", "preprocess/coat-rgb-56x56.png")

/**
 * What `kestrel classify --json --top 3 --batch 1` printed for [CLASSIFY_SAMPLES] with the same
 * model on this machine (kotlin-check.sh runs the CLI built from this checkout and passes the
 * file): per image, its top-3 as (index, label, probability), the probabilities the f32 values the
 * CLI prints. Read, not written down here: a kernel change may move the last bits, and the check
 * is that the SDK and the CLI agree exactly, whatever they give.
 */
private fun cliTop3(json: String): Map<String, List<Triple<Int, String, Double>>> {
    val image = Regex(""""path":\s*"([^"]*)",\s*"predictions":\s*\[(.*?)]""", RegexOption.DOT_MATCHES_ALL)
    val prediction = Regex(""""index":\s*(\d+),\s*"label":\s*"([^"]*)",\s*"probability":\s*([-+0-9.eE]+)""")
    val top = image.findAll(json).associate { m ->
        m.groupValues[1].substringAfter("apps/kestrel-cli/samples/") to prediction.findAll(m.groupValues[2]).map {
            Triple(it.groupValues[1].toInt(), it.groupValues[2], it.groupValues[3].toDouble())
        }.toList()
    }
    require(CLASSIFY_SAMPLES.all { top[it]?.size == 3 }) { "the CLI's JSON lacks a top-3 for a sample: $json" }
    return top
}

private lateinit var CLI_TOP3: Map<String, List<Triple<Int, String, Double>>>

/** Whether [got] is exactly the CLI's top-3 for [image] (indices, labels, probabilities bit for bit). */
private fun sameAsCli(image: String, got: List<Classification>, what: String) {
    val want = CLI_TOP3.getValue(image)
    val ok = got.size == want.size && got.zip(want).all { (g, w) ->
        g.index == w.first && g.label == w.second && g.probability.toDouble() == w.third
    }
    check(ok, "$what on $image: $got, kestrel classify gives $want")
}

/**
 * Session.classify (issue 35, item 4) on images decoded by javax.imageio, as an app holds them:
 * grey bytes (direct, heap and sliced ByteBuffers, a ByteArray, a padded stride), colour ints
 * (IntArray, as Bitmap.getPixels fills) and RGBA/BGRA/RGB bytes built from them — every one gives
 * exactly `kestrel classify`'s top-3; then the bad arguments.
 */
private fun classify(path: String) {
    val samples = java.io.File("apps/kestrel-cli/samples")
    Model.load(path).use { model ->
        model.session(1, Backend.CPU).use { s ->
            // Grey: the raster's bytes.
            val greyName = CLASSIFY_SAMPLES[0]
            val grey = javax.imageio.ImageIO.read(java.io.File(samples, greyName))
            check(grey.type == java.awt.image.BufferedImage.TYPE_BYTE_GRAY, "$greyName decodes to grey bytes")
            val g = (grey.raster.dataBuffer as java.awt.image.DataBufferByte).data
            val (w, h) = grey.width to grey.height
            val direct = ByteBuffer.allocateDirect(g.size).put(g).also { it.flip() }
            sameAsCli(greyName, s.classify(direct, w, h, w, PixelFormat.GREY_8, 3), "direct ByteBuffer")
            sameAsCli(greyName, s.classify(ByteBuffer.wrap(g), w, h, w, PixelFormat.GREY_8, 3), "heap ByteBuffer")
            sameAsCli(greyName, s.classify(g, w, h, w, PixelFormat.GREY_8, 3), "ByteArray")
            val shifted = ByteBuffer.allocate(g.size + 5).put(ByteArray(5)).put(g)
            shifted.position(5)
            sameAsCli(greyName, s.classify(shifted, w, h, w, PixelFormat.GREY_8, 3), "heap ByteBuffer at position 5")
            val ro = ByteBuffer.wrap(g).asReadOnlyBuffer()
            sameAsCli(greyName, s.classify(ro, w, h, w, PixelFormat.GREY_8, 3), "read-only ByteBuffer (copied)")
            val padded = ByteArray((w + 3) * h)
            for (y in 0 until h) System.arraycopy(g, y * w, padded, y * (w + 3), w)
            sameAsCli(greyName, s.classify(padded, w, h, w + 3, PixelFormat.GREY_8, 3), "stride w + 3")
            val top1 = s.classify(g, w, h, w, PixelFormat.GREY_8)
            check(top1.size == 1 && top1[0].index == 9, "k defaults to 1: $top1")
            val all = s.classify(g, w, h, w, PixelFormat.GREY_8, 10)
            check(all.map { it.index }.toSet() == (0 until 10).toSet(), "k = 10 gives every class")
            check(all.zipWithNext().all { (a, b) -> a.probability >= b.probability }, "best first")
            check(kotlin.math.abs(all.sumOf { it.probability.toDouble() } - 1.0) < 1e-5, "probabilities sum to 1")

            // Colour: ARGB ints (TYPE_4BYTE_ABGR / TYPE_3BYTE_BGR are sRGB: getRGB is exact).
            for (name in CLASSIFY_SAMPLES.drop(1)) {
                val img = javax.imageio.ImageIO.read(java.io.File(samples, name))
                val (cw, ch) = img.width to img.height
                val argb = img.getRGB(0, 0, cw, ch, null, 0, cw)
                sameAsCli(name, s.classify(argb, cw, ch, k = 3), "IntArray (colour ints)")
                val inRow = IntArray((cw + 2) * ch + 1)
                for (y in 0 until ch) System.arraycopy(argb, y * cw, inRow, 1 + y * (cw + 2), cw)
                sameAsCli(name, s.classify(inRow, cw, ch, cw + 2, 3, 1), "IntArray with offset 1 and stride w + 2")
                val rgba = ByteBuffer.allocateDirect(cw * ch * 4)
                val bgra = ByteArray(cw * ch * 4)
                val rgb = ByteArray(cw * ch * 3)
                for ((i, c) in argb.withIndex()) {
                    val (a, r, gg, b) = listOf(c ushr 24, (c shr 16) and 255, (c shr 8) and 255, c and 255).map { it.toByte() }
                    rgba.put(r).put(gg).put(b).put(a)
                    bgra[4 * i] = b; bgra[4 * i + 1] = gg; bgra[4 * i + 2] = r; bgra[4 * i + 3] = a
                    rgb[3 * i] = r; rgb[3 * i + 1] = gg; rgb[3 * i + 2] = b
                }
                rgba.flip()
                sameAsCli(name, s.classify(rgba, cw, ch, cw * 4, PixelFormat.RGBA_8888, 3), "RGBA direct ByteBuffer")
                sameAsCli(name, s.classify(bgra, cw, ch, cw * 4, PixelFormat.BGRA_8888, 3), "BGRA ByteArray")
                sameAsCli(name, s.classify(rgb, cw, ch, cw * 3, PixelFormat.RGB_888, 3), "RGB ByteArray")
            }

            // Bad arguments: clear statuses, never a crash.
            expectStatus(KestrelException.INVALID_ARGUMENT, "width 0") { s.classify(g, 0, h, w, PixelFormat.GREY_8) }
            expectStatus(KestrelException.INVALID_ARGUMENT, "height 0") { s.classify(g, w, 0, w, PixelFormat.GREY_8) }
            expectStatus(KestrelException.INVALID_ARGUMENT, "stride < width") { s.classify(g, w, h, w - 1, PixelFormat.GREY_8) }
            expectStatus(KestrelException.INVALID_ARGUMENT, "negative width") { s.classify(g, -1, h, w, PixelFormat.GREY_8) }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "short ByteArray") { s.classify(g, w, h + 1, w, PixelFormat.GREY_8) }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "RGBA from grey bytes") { s.classify(g, w, h, w * 4, PixelFormat.RGBA_8888) }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "offset past the end") { s.classify(g, w, h, w, PixelFormat.GREY_8, 1, g.size + 1) }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "short direct buffer") {
                s.classify(ByteBuffer.allocateDirect(10), w, h, w, PixelFormat.GREY_8)
            }
            expectStatus(KestrelException.INVALID_ARGUMENT, "k = 0") { s.classify(g, w, h, w, PixelFormat.GREY_8, 0) }
            expectStatus(KestrelException.INVALID_ARGUMENT, "k = 11 of 10 classes") { s.classify(g, w, h, w, PixelFormat.GREY_8, 11) }
            expectStatus(KestrelException.INVALID_ARGUMENT, "negative int stride") { s.classify(IntArray(4), 2, 2, -2) }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "short IntArray") { s.classify(IntArray(3), 2, 2) }
            // An unknown format code (the Kotlin enum cannot make one): straight to the bridge.
            val rawModel = NativeBridge.modelLoadPath(path)
            val raw = NativeBridge.sessionNew(rawModel, NativeBridge.BACKEND_CPU, 1)
            expectStatus(KestrelException.INVALID_ARGUMENT, "unknown format code") {
                NativeBridge.sessionClassify(raw, g, 0, w, h, w, 9, IntArray(1), FloatArray(1))
            }
            expectStatus(KestrelException.INVALID_ARGUMENT, "pixels of another type") {
                NativeBridge.sessionClassify(raw, FloatArray(784), 0, w, h, w, 3, IntArray(1), FloatArray(1))
            }
            expectStatus(KestrelException.BUFFER_TOO_SMALL, "probabilities shorter than k") {
                NativeBridge.sessionClassify(raw, g, 0, w, h, w, 3, IntArray(2), FloatArray(1))
            }
            NativeBridge.sessionFree(raw)
            NativeBridge.modelFree(rawModel)
        }
        expectStatus(KestrelException.CLOSED, "classify on a closed session") {
            val s = model.session(1, Backend.CPU)
            s.close()
            s.classify(ByteArray(784), 28, 28, 28, PixelFormat.GREY_8)
        }
    }
    // A model without image preprocessing (converted without --meta).
    Model.load("targets/embedded/model/mnist_vit_super_h1.int8.kes").use { bare ->
        bare.session(1, Backend.CPU).use { s ->
            expectStatus(KestrelException.UNSUPPORTED, "a model without image preprocessing") {
                s.classify(ByteArray(784), 28, 28, 28, PixelFormat.GREY_8)
            }
        }
    }
    println("classify: grey bytes (direct, heap, positioned, read-only, ByteArray, padded stride), colour ints " +
        "(IntArray, offset and stride) and RGBA/BGRA/RGB bytes give kestrel classify's top-3 exactly; bad arguments refused")
}

private const val BOUNDED = "targets/ffi/tests/data/bounded_dims.kes"

private fun maxDiff(a: FloatArray, b: FloatArray): Float =
    if (a.size != b.size) Float.POSITIVE_INFINITY else a.indices.maxOfOrNull { kotlin.math.abs(a[it] - b[it]) } ?: 0f

/** Bounded dims (issue 34): the format 2.0 fixture (x [sequence, 8], sequence in 2..=16) run at several lengths. */
private fun boundedDims() {
    val d = 8
    val input = { batch: Int, t: Int -> FloatArray(batch * t * d) { ((it * 37 + t * 11) % 101) / 50f - 1f } }
    Model.load(BOUNDED).use { model ->
        check(model.dims == listOf(BoundedDim("sequence", 2, 16)), "Model.dims: ${model.dims}")
        check(model.inputs[0].shape.contentEquals(intArrayOf(16, d)), "the model's input is at the bound")
        model.session(2, Backend.CPU).use { s ->
            check(s.inputShape(0).contentEquals(intArrayOf(16, d)), "a new session is at the bound")
            for (t in listOf(2, 5, 9, 12, 16, 3)) {
                s.setInputShapes(intArrayOf(t, d))
                check(s.inputShape(0).contentEquals(intArrayOf(t, d)), "inputShape at T = $t")
                check(s.outputShape(0).contentEquals(intArrayOf(2, t - 1, d / 2)), "outputShape(0) at T = $t")
                check(s.outputShape(1).contentEquals(intArrayOf(2, d / 2)), "outputShape(1) at T = $t")
                val x = input(2, t)
                val y = s.run(*arrayOf<Any>(x))
                check(y.size == 2 && y[0].size == 2 * 2 * (t - 1) * (d / 2) && y[1].size == 2 * 2 * (d / 2),
                    "output sizes at T = $t: ${y.map { it.size }}")
                val shaped = s.run(listOf<Any>(x), listOf(intArrayOf(t, d)))
                check(shaped.indices.all { shaped[it].contentEquals(y[it]) }, "run(inputs, shapes) at T = $t")
                // Direct buffers sized from outputShape.
                val xb = direct(x.size)
                xb.asFloatBuffer().put(x)
                val ys = (0 until 2).map { direct(2 * s.outputShape(it).fold(1) { a, b -> a * b }) }
                s.runBuffers(listOf(xb), ys, 2)
                check((0 until 2).all { ys[it].asFloatBuffer().toArray(y[it].size).contentEquals(y[it]) },
                    "runBuffers at T = $t")
                if (t == 5 || t == 12) {
                    Model.load("targets/ffi/tests/data/bounded_dims_fixed_t$t.kes").use { fixed ->
                        val want = fixed.session(2, Backend.CPU).use { it.run(*arrayOf<Any>(x)) }
                        for (o in 0 until 2) {
                            val e = maxDiff(y[o], want[o])
                            check(e <= 1e-6f, "T = $t output $o vs the graph built at T: $e")
                        }
                    }
                }
            }
            // Bad shapes: SHAPE naming the dim and its range; the session is back at the bound and runs.
            try {
                s.setInputShapes(intArrayOf(17, d))
                check(false, "T = 17: no exception")
            } catch (e: KestrelException) {
                val m = e.message ?: ""
                check(e.status == KestrelException.SHAPE && m.contains("`sequence` = 17") && m.contains("2..=16"),
                    "T = 17: ${e.status} $m")
            }
            check(s.inputShape(0).contentEquals(intArrayOf(16, d)), "back at the bound after an error")
            expectStatus(KestrelException.SHAPE, "T = 1") { s.setInputShapes(intArrayOf(1, d)) }
            expectStatus(KestrelException.SHAPE, "a fixed axis") { s.setInputShapes(intArrayOf(5, d + 1)) }
            expectStatus(KestrelException.SHAPE, "a rank") { s.setInputShapes(intArrayOf(5)) }
            expectStatus(KestrelException.SHAPE, "a negative dim") { s.setInputShapes(intArrayOf(-5, d)) }
            expectStatus(KestrelException.SHAPE, "two shapes for one input") {
                s.setInputShapes(intArrayOf(5, d), intArrayOf(5, d))
            }
            expectStatus(KestrelException.SHAPE, "no shape") { s.setInputShapes() }
            expectStatus(KestrelException.INDEX, "outputShape(2)") { s.outputShape(2) }
            s.setInputShapes(intArrayOf(4, d))
            expectStatus(KestrelException.SHAPE, "a run at other shapes than set") { s.run(*arrayOf<Any>(input(1, 5))) }
            check(s.run(*arrayOf<Any>(input(1, 4)))[1].size == 2 * (d / 2), "still runs after the errors")
        }
        // A GPU session (lavapipe here) takes the same calls: lowered again at each length.
        if (Backend.WGPU.isAvailable) {
            model.session(2, Backend.WGPU).use { g ->
                for (t in listOf(5, 12, 5)) {
                    val x = input(2, t)
                    val y = g.run(listOf<Any>(x), listOf(intArrayOf(t, d)))
                    val want = Model.load("targets/ffi/tests/data/bounded_dims_fixed_t$t.kes").use { fixed ->
                        fixed.session(2, Backend.CPU).use { it.run(*arrayOf<Any>(x)) }
                    }
                    for (o in 0 until 2) {
                        val e = maxDiff(y[o], want[o])
                        check(e <= 1e-4f, "GPU session at T = $t output $o vs the graph built at T: $e")
                    }
                }
                expectStatus(KestrelException.SHAPE, "GPU session at T = 17") { g.setInputShapes(intArrayOf(17, d)) }
                check(g.inputShape(0).contentEquals(intArrayOf(16, d)), "GPU session back at the bound")
                check(g.run(*arrayOf<Any>(input(1, 16)))[0].size == 2 * 15 * (d / 2), "GPU session runs at the bound")
            }
        }
        // Two sessions of one model at different lengths on two threads at once.
        val want = listOf(3, 11).associateWith { t -> model.session(2, Backend.CPU).use { it.run(listOf<Any>(input(2, t)), listOf(intArrayOf(t, d))) } }
        val errors = java.util.concurrent.ConcurrentLinkedQueue<String>()
        val threads = want.map { (t, y) ->
            Thread {
                model.session(2, Backend.CPU).use { s ->
                    s.setInputShapes(intArrayOf(t, d))
                    repeat(50) { i ->
                        val got = s.run(*arrayOf<Any>(input(2, t)))
                        if (!(0 until 2).all { got[it].contentEquals(y[it]) }) errors.add("T = $t, run $i differs")
                    }
                }
            }
        }
        threads.forEach { it.start() }
        threads.forEach { it.join() }
        check(errors.isEmpty(), "two sessions at T = 3 and 11 at once: $errors")
    }
    Model.load("targets/ffi/tests/data/bounded_dims_fixed_t5.kes").use { fixed ->
        check(fixed.dims.isEmpty(), "a model of fixed sizes has no dims")
        fixed.session(1, Backend.CPU).use { s ->
            s.setInputShapes(intArrayOf(5, d))
            expectStatus(KestrelException.SHAPE, "a fixed model at another size") { s.setInputShapes(intArrayOf(4, d)) }
        }
    }
    println("bounded dims: `sequence` 2..=16 at T = 2, 3, 5, 9, 12, 16 (run, run(inputs, shapes), runBuffers; " +
        "T = 5, 12 equal to the graphs built at them), two sessions at different T at once, bad shapes refused" +
        if (Backend.WGPU.isAvailable) "; a WGPU session at T = 5, 12, 5" else "; no GPU: the WGPU session skipped")
}

fun main(args: Array<String>) {
    val path = args[0]
    CLI_TOP3 = cliTop3(java.io.File(args[1]).readText())
    threads(path)
    boundedDims()
    buffers(path)
    sources(path)
    classify(path)
    println("Kotlin SDK I/O check: $passed passed, $failed failed")
    exitProcess(if (failed == 0) 0 else 1)
}
