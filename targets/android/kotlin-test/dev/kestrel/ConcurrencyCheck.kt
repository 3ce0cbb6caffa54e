// The Kotlin API on the host JVM against libkestrel_jni.so (run by targets/android/kotlin-check.sh):
// the API as an app uses it, then the lifetime and concurrency guarantees of issue 35 — a session
// closed while another thread runs it, a model closed while other threads read it and open
// sessions, racing closes, getters during a run, the safety net for objects never closed. Every
// loser must get a KestrelException with status CLOSED (or BUSY for a second run of one session);
// nothing may crash, hang or throw anything else.
//
// Usage: ConcurrencyCheckKt MODEL.kes [ITERATIONS] [SECONDS]: each scenario stops after ITERATIONS
// (default 1000) or its share of SECONDS (default 80), whichever comes first, and says how many ran.
package dev.kestrel

import java.util.concurrent.Executors
import java.util.concurrent.Future
import java.util.concurrent.TimeUnit
import java.util.concurrent.TimeoutException
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.locks.LockSupport
import kotlin.random.Random
import kotlin.system.exitProcess

private var passed = 0
private var failed = 0

@Synchronized
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

/** Waits for [f] (a hang is a failure, reported as such). */
private fun <T> await(f: Future<T>, what: String): T? =
    try {
        f.get(30, TimeUnit.SECONDS)
    } catch (e: TimeoutException) {
        check(false, "$what: no result after 30 s (a hang)")
        null
    } catch (e: java.util.concurrent.ExecutionException) {
        check(false, "$what: threw ${e.cause}")
        null
    }

private class Budget(val iterations: Int, seconds: Double) {
    private val end = System.nanoTime() + (seconds * 1e9).toLong()
    fun more(i: Int) = i < iterations && System.nanoTime() < end
}

fun main(args: Array<String>) {
    val path = args[0]
    val iterations = args.getOrNull(1)?.toInt() ?: 1000
    val seconds = args.getOrNull(2)?.toDouble() ?: 80.0
    val pool = Executors.newFixedThreadPool(4)
    val t0 = System.nanoTime()

    // --- The API as an app uses it.
    val model = Model.load(path)
    check(model.labels.isNotEmpty(), "labels: ${model.labels}")
    check(model.inputs.size == 1 && model.outputs.size == 1, "one input, one output")
    val again = Model.load(path)
    check(model.inputs == again.inputs && model.outputs == again.outputs, "TensorInfo equality is structural")
    check(model.inputs.hashCode() == again.inputs.hashCode(), "TensorInfo hashCode follows the shape's contents")
    check(setOf(model.inputs[0], again.inputs[0]).size == 1, "equal TensorInfos in a set")
    check(model.inputs[0].toString().contains("shape=["), "TensorInfo.toString shows the shape: ${model.inputs[0]}")
    again.close()
    val x = FloatArray(model.inputs[0].size) { ((it * 37) % 101) / 101f }
    val session = model.session(1, Backend.CPU)
    val want = session.run(x)
    check(want.size == model.outputs[0].size, "output size ${want.size}")
    check(session.run(x).contentEquals(want), "a second run gives the same outputs")
    check(session.backend == Backend.CPU && session.device == "cpu" && !session.gpuF16, "session facts")
    session.profiling = true
    session.run(x)
    check(session.profile().isNotEmpty() && session.profileSource == TimingSource.CPU_WALL_CLOCK, "profile")
    session.profiling = false
    model.session().use { check(it.run(x).contentEquals(want), "model.session() with defaults") }

    // --- Getters of facts during runs: never "in use by another thread".
    run {
        val running = AtomicInteger(1)
        val runner = pool.submit<Int> {
            var n = 0
            val end = System.nanoTime() + 300_000_000L
            while (System.nanoTime() < end) {
                check(session.run(x).contentEquals(want), "run during getters")
                n++
            }
            running.set(0)
            n
        }
        var reads = 0
        while (running.get() == 1) {
            try {
                check(session.backend == Backend.CPU, "backend during a run")
                check(session.device == "cpu", "device during a run")
                check(!session.gpuF16, "gpuF16 during a run")
                check(model.labels.isNotEmpty() && model.inputs[0].size == x.size, "model getters during a run")
                reads++
            } catch (e: Throwable) {
                check(false, "a getter during a run threw $e")
                break
            }
        }
        val runs = await(runner, "runner") ?: 0
        // A second run of the same session while one is in progress: BUSY, never a crash.
        val busy = AtomicInteger()
        val a = pool.submit<Unit> {
            repeat(50) {
                try {
                    session.run(x)
                } catch (e: KestrelException) {
                    check(e.status == KestrelException.BUSY, "concurrent run: status ${e.status}")
                    busy.incrementAndGet()
                }
            }
        }
        repeat(50) {
            try {
                session.run(x)
            } catch (e: KestrelException) {
                check(e.status == KestrelException.BUSY, "concurrent run: status ${e.status}")
                busy.incrementAndGet()
            }
        }
        await(a, "concurrent runs")
        println("getters during runs: $reads reads of backend/device/gpuF16/labels/inputs during $runs runs, none " +
            "failed; two threads running one session: ${busy.get()} of 100 runs BUSY")
    }

    // --- Closed: KestrelException CLOSED (not IllegalStateException), a second close does nothing.
    session.close()
    session.close()
    expectStatus(KestrelException.CLOSED, "run after close") { session.run(x) }
    expectStatus(KestrelException.CLOSED, "backend after close") { session.backend }
    expectStatus(KestrelException.CLOSED, "profile after close") { session.profile() }
    expectStatus(KestrelException.CLOSED, "profiling after close") { session.profiling = true }

    // --- A session closed while another thread runs it (the Android pattern: inference on an
    // executor, close() in onDestroy), sometimes by two threads at once.
    run {
        val budget = Budget(iterations, seconds * 0.4)
        var i = 0
        var okRuns = 0
        val rng = Random(35)
        while (budget.more(i)) {
            i++
            val s = model.session(1, Backend.CPU)
            val started = java.util.concurrent.CountDownLatch(1)
            val runner = pool.submit<Int> {
                var n = 0
                started.countDown()
                while (true) {
                    try {
                        check(s.run(x).contentEquals(want), "a run racing close: outputs differ")
                        n++
                    } catch (e: KestrelException) {
                        check(e.status == KestrelException.CLOSED, "a run racing close: status ${e.status} ${e.message}")
                        break
                    }
                }
                n
            }
            val reader = pool.submit<Unit> {
                while (true) {
                    try {
                        check(s.backend == Backend.CPU && s.device == "cpu", "facts racing close")
                    } catch (e: KestrelException) {
                        check(e.status == KestrelException.CLOSED, "a getter racing close: status ${e.status}")
                        break
                    }
                }
            }
            started.await()
            LockSupport.parkNanos(rng.nextLong(0, 3_000_000))
            if (i % 4 == 0) {
                val other = pool.submit<Unit> { s.close() }
                s.close()
                await(other, "a second close")
            } else {
                s.close()
            }
            okRuns += await(runner, "a runner racing close") ?: 0
            await(reader, "a reader racing close")
        }
        println("session closed during runs: $i iterations (a runner and a getter thread against close(), " +
            "every fourth closed by two threads at once), $okRuns runs completed with the reference outputs, " +
            "every loser CLOSED")
    }

    // --- A model closed while other threads read it and open sessions.
    run {
        val budget = Budget(iterations, seconds * 0.3)
        var i = 0
        val afterClose = AtomicInteger()
        val rng = Random(36)
        while (budget.more(i)) {
            i++
            val m = Model.load(path)
            val started = java.util.concurrent.CountDownLatch(2)
            val users = (0 until 2).map { t ->
                pool.submit<Unit> {
                    var kept: Session? = null
                    var k = 0
                    started.countDown()
                    while (true) {
                        try {
                            when ((k++ + t) % 5) {
                                0 -> check(m.labels.isNotEmpty(), "labels racing close")
                                1 -> check(m.inputs[0].size == x.size, "inputs racing close")
                                2 -> m.name
                                3 -> check(m.outputs[0].size == want.size, "outputs racing close")
                                else -> {
                                    kept?.close()
                                    kept = null
                                    kept = m.session(1, Backend.CPU)
                                }
                            }
                        } catch (e: KestrelException) {
                            check(e.status == KestrelException.CLOSED, "a model call racing close: status ${e.status}")
                            break
                        }
                    }
                    // A session opened before the model closed keeps working.
                    kept?.use {
                        check(it.run(x).contentEquals(want), "a session run after its model closed")
                        afterClose.incrementAndGet()
                    }
                }
            }
            started.await()
            LockSupport.parkNanos(rng.nextLong(0, 1_000_000))
            m.close()
            users.forEachIndexed { t, f -> await(f, "model user $t") }
            expectStatus(KestrelException.CLOSED, "session() on a closed model") { m.session() }
        }
        println("model closed during use: $i iterations (two threads reading labels/inputs/outputs/name and " +
            "opening sessions against close()), ${afterClose.get()} sessions ran after their model was closed")
    }

    // --- The safety net: models and sessions never closed are freed once unreachable.
    run {
        val before = SafetyNet.freed.get()
        val n = minOf(3000, iterations * 3)
        for (k in 0 until n) {
            val m = Model.load(path)
            if (k % 10 == 0) m.session(1, Backend.CPU)
        }
        val end = System.nanoTime() + 20_000_000_000L
        while (SafetyNet.freed.get() - before < n && System.nanoTime() < end) {
            System.gc()
            Thread.sleep(20)
        }
        val freed = SafetyNet.freed.get() - before
        // The last few may still be on a stack frame the collector treats as live.
        check(freed >= n - 5, "safety net freed $freed of ${n + n / 10}")
        println("safety net: ${n} models and ${n / 10} sessions never closed, $freed handles freed by it")
    }

    model.close()
    model.close()
    expectStatus(KestrelException.CLOSED, "name after close") { model.name }
    expectStatus(KestrelException.CLOSED, "session() after close") { model.session() }
    pool.shutdown()
    check(pool.awaitTermination(10, TimeUnit.SECONDS), "the pool's threads end")
    println("Kotlin SDK check: $passed passed, $failed failed in %.1f s".format((System.nanoTime() - t0) / 1e9))
    exitProcess(if (failed == 0) 0 else 1)
}
