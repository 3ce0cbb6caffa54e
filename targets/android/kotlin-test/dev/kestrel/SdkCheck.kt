// The Kotlin SDK's process settings and I/O on the host JVM against libkestrel_jni.so (run by
// targets/android/kotlin-check.sh, in a JVM of its own so the thread count starts unset): the
// thread count (issue 35, item 2) — its default applied by the first session, outputs identical
// for 1..4 threads, bad counts refused.
//
// Usage: SdkCheckKt MODEL.kes
package dev.kestrel

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

fun main(args: Array<String>) {
    val path = args[0]
    threads(path)
    println("Kotlin SDK I/O check: $passed passed, $failed failed")
    exitProcess(if (failed == 0) 0 else 1)
}
