/*
 * C test of the Kestrel ABI: loads fixture models (from a path and from memory), runs them,
 * compares with PyTorch's outputs, reads metadata and per-op timings, and exercises every error
 * path. Built with the system `cc` and run by targets/ffi/tests/c_abi.rs, which converts the
 * fixtures first and passes the directory holding them:
 *
 *   test_kestrel DIR cpu              CPU backend only; never touches a GPU (run under valgrind)
 *   test_kestrel DIR cpu-only-build   `cpu` plus: a library built without wgpu refuses WGPU
 *                                     (KESTREL_ERR_UNSUPPORTED, "built without") and AUTO uses the CPU
 *   test_kestrel DIR gpu wgpu|cpu     the wgpu backend on a usable adapter: outputs vs PyTorch and
 *                                     the CPU, profiling from GPU timestamps, errors, threads; AUTO
 *                                     must resolve to the given backend (cpu on a software adapter)
 *   test_kestrel DIR no-gpu           wgpu built in but no adapter: WGPU is KESTREL_ERR_NO_GPU,
 *                                     AUTO falls back to the CPU
 *
 * DIR holds image.kes (float input [4, 1, 64, 64] -> [4, 10]) with image_input.bin and
 * image_expected.bin, and text.kes (i64 token ids [4, 32] -> [4, 2]) with text_input.bin and
 * text_expected.bin (raw little-endian arrays), and classifier.kes (the bundled Fashion-MNIST model,
 * with image preprocessing) and bare.kes (the firmware's model, without) for test_classify, and
 * bounded_dims.kes with bounded_dims_fixed_t5.kes and _t12.kes (tests/data/) for test_bounded_dims.
 */
#include "kestrel.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed = 0, failed = 0;

#define CHECK(cond, ...)                                                                                  \
    do {                                                                                                  \
        if (cond) {                                                                                       \
            passed++;                                                                                     \
        } else {                                                                                          \
            failed++;                                                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                               \
            fprintf(stderr, __VA_ARGS__);                                                                 \
            fprintf(stderr, " (last error: %s)\n", kestrel_last_error());                                 \
        }                                                                                                 \
    } while (0)

/* A call that must fail with `expected`, leaving a non-empty message. */
#define EXPECT_STATUS(call, expected)                                                                     \
    do {                                                                                                  \
        KestrelStatus st_ = (call);                                                                       \
        CHECK(st_ == (expected), "%s returned %s, expected %s", #call, kestrel_status_name(st_),          \
              kestrel_status_name(expected));                                                             \
        if ((expected) != KESTREL_OK) {                                                                   \
            CHECK(strlen(kestrel_last_error()) > 0, "no message after %s", #call);                        \
        }                                                                                                 \
    } while (0)

#define REQUIRE_OK(call)                                                                                  \
    do {                                                                                                  \
        KestrelStatus st_ = (call);                                                                       \
        if (st_ != KESTREL_OK) {                                                                          \
            fprintf(stderr, "FATAL %s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,                      \
                    kestrel_status_name(st_), kestrel_last_error());                                      \
            exit(2);                                                                                      \
        }                                                                                                 \
    } while (0)

static void *read_file(const char *dir, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FATAL: cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 8);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "FATAL: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* max |a - b| / (1 + |b|) over n values */
static double max_rel_err(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        if (!(e <= worst)) worst = e; /* also catches NaN */
    }
    return worst;
}

static const double TOL = 1e-4; /* converted f32 model vs PyTorch (the converter's own bound is 3e-6) */
/* The wgpu backend vs PyTorch and vs the CPU backend: f32 throughout, but other summation orders
 * and GPU exp/tanh; the backend's own model tests use the same 1e-4 bound (tolerance F32_MODEL). */
static const double GPU_TOL = 1e-4;

static void *thread_last_error(void *arg) {
    (void)arg;
    /* A fresh thread has no last error, whatever failed on the main thread. */
    return (void *)(uintptr_t)(strlen(kestrel_last_error()) == 0);
}

/* One thread's job: its own session on a shared model, batch 1, checked against `want`. */
struct shared_run {
    const KestrelModel *model;
    uint32_t backend;
    double tol;
    const float *x;
    const float *want;
    double err;
    KestrelStatus status;
};

static void *run_on_shared_model(void *arg) {
    struct shared_run *job = arg;
    KestrelSession *s = NULL;
    job->err = INFINITY;
    job->status = kestrel_session_new(job->model, job->backend, 1, &s);
    if (job->status != KESTREL_OK) return NULL;
    float y[10];
    size_t xs[4] = {1, 1, 64, 64}, ys[2] = {1, 10};
    KestrelTensor xt = {KESTREL_DTYPE_F32, job->x, xs, 4};
    KestrelOutput yt = {y, ys, 2};
    for (int i = 0; i < 3 && job->status == KESTREL_OK; i++) {
        job->status = kestrel_session_run(s, &xt, 1, &yt, 1, NULL);
    }
    if (job->status == KESTREL_OK) job->err = max_rel_err(y, job->want, 10);
    kestrel_session_free(s);
    return NULL;
}

static void test_image(const char *dir) {
    char *path = join(dir, "image.kes");
    KestrelModel *model = NULL;
    REQUIRE_OK(kestrel_model_load_path(path, &model));
    free(path);

    size_t n = 0;
    REQUIRE_OK(kestrel_model_input_count(model, &n));
    CHECK(n == 1, "input count %zu", n);
    REQUIRE_OK(kestrel_model_output_count(model, &n));
    CHECK(n == 1, "output count %zu", n);
    KestrelTensorInfo in, out;
    REQUIRE_OK(kestrel_model_input_info(model, 0, &in));
    CHECK(in.dtype == KESTREL_DTYPE_F32 && in.rank == 3 && in.dims[0] == 1 && in.dims[1] == 64 && in.dims[2] == 64,
          "input info dtype %u rank %zu", in.dtype, in.rank);
    CHECK(strcmp(in.name, "x") == 0, "input name %s", in.name);
    REQUIRE_OK(kestrel_model_output_info(model, 0, &out));
    CHECK(out.dtype == KESTREL_DTYPE_F32 && out.rank == 1 && out.dims[0] == 10, "output rank %zu", out.rank);
    CHECK(strlen(out.name) > 0, "output name empty");
    const char *s = NULL;
    REQUIRE_OK(kestrel_model_name(model, &s));
    CHECK(s && strcmp(s, "model") == 0, "model name %s", s ? s : "(null)");
    REQUIRE_OK(kestrel_model_task(model, &s));
    CHECK(s != NULL, "task NULL");
    size_t labels = 99;
    REQUIRE_OK(kestrel_model_label_count(model, &labels));
    EXPECT_STATUS(kestrel_model_label(model, labels, &s), KESTREL_ERR_INDEX);
    size_t ops = 0, arena1 = 0, arena4 = 0;
    REQUIRE_OK(kestrel_model_op_count(model, &ops));
    CHECK(ops > 5, "op count %zu", ops);
    REQUIRE_OK(kestrel_model_arena_bytes(model, 1, &arena1));
    REQUIRE_OK(kestrel_model_arena_bytes(model, 4, &arena4));
    CHECK(arena1 > 0 && arena4 > arena1, "arena %zu %zu", arena1, arena4);

    size_t len = 0;
    float *x = read_file(dir, "image_input.bin", &len);
    CHECK(len == 4 * 64 * 64 * sizeof(float), "input bytes %zu", len);
    float *want = read_file(dir, "image_expected.bin", &len);
    CHECK(len == 4 * 10 * sizeof(float), "expected bytes %zu", len);

    bool avail = false;
    REQUIRE_OK(kestrel_backend_available(KESTREL_BACKEND_CPU, &avail));
    CHECK(avail, "cpu unavailable");
    REQUIRE_OK(kestrel_backend_available(KESTREL_BACKEND_AUTO, &avail));
    CHECK(avail, "auto unavailable");
    KestrelSession *session = NULL;
    REQUIRE_OK(kestrel_session_new(model, KESTREL_BACKEND_CPU, 4, &session));
    uint32_t backend = 99;
    REQUIRE_OK(kestrel_session_backend(session, &backend));
    CHECK(backend == KESTREL_BACKEND_CPU, "cpu session on backend %u", backend);
    const char *device = NULL;
    REQUIRE_OK(kestrel_session_device(session, &device));
    CHECK(device && strcmp(device, "cpu") == 0, "cpu session device %s", device ? device : "(null)");
    uint32_t source = 99;
    uint64_t wall = 1;
    REQUIRE_OK(kestrel_session_profile_source(session, &source));
    REQUIRE_OK(kestrel_session_profile_wall_nanos(session, &wall));
    CHECK(source == KESTREL_TIMING_NONE && wall == 0, "profile before any run: source %u wall %llu", source,
          (unsigned long long)wall);

    /* Batch 4 with profiling. */
    float y[4 * 10];
    size_t xs[4] = {4, 1, 64, 64}, ys[2] = {4, 10};
    KestrelTensor xt = {KESTREL_DTYPE_F32, x, xs, 4};
    KestrelOutput yt = {y, ys, 2};
    REQUIRE_OK(kestrel_session_set_profiling(session, true));
    size_t batch = 0;
    memset(y, 0xff, sizeof y); /* NaN: every output must be written */
    REQUIRE_OK(kestrel_session_run(session, &xt, 1, &yt, 1, &batch));
    CHECK(batch == 4, "batch %zu", batch);
    double err = max_rel_err(y, want, 40);
    CHECK(err <= TOL, "batch 4 vs PyTorch: max rel err %g", err);
    size_t entries = 0;
    REQUIRE_OK(kestrel_session_profile_count(session, &entries));
    CHECK(entries > 0 && entries <= ops, "profile entries %zu of %zu ops", entries, ops);
    uint64_t total = 0;
    int named = 1;
    for (size_t i = 0; i < entries; i++) {
        KestrelOpTiming t;
        REQUIRE_OK(kestrel_session_profile_entry(session, i, &t));
        total += t.nanos;
        named &= t.op != NULL && strlen(t.op) > 0 && t.node < ops;
    }
    CHECK(named, "a profile entry lacks an op name");
    CHECK(total > 0, "profile total 0 ns");
    REQUIRE_OK(kestrel_session_profile_source(session, &source));
    CHECK(source == KESTREL_TIMING_CPU_WALL_CLOCK, "cpu timing source %u", source);
    REQUIRE_OK(kestrel_session_profile_wall_nanos(session, &wall));
    CHECK(wall >= total, "run wall time %llu ns < sum of its nodes %llu ns", (unsigned long long)wall,
          (unsigned long long)total);
    printf("image model: %zu ops, %zu timed, %.3f ms total, max rel err %.2e vs PyTorch\n", ops, entries,
           (double)total / 1e6, err);
    EXPECT_STATUS(kestrel_session_profile_entry(session, entries, &(KestrelOpTiming){0}), KESTREL_ERR_INDEX);

    /* Batch 1 (the first sample), profiling off. */
    REQUIRE_OK(kestrel_session_set_profiling(session, false));
    xs[0] = 1;
    ys[0] = 1;
    REQUIRE_OK(kestrel_session_run(session, &xt, 1, &yt, 1, NULL));
    err = max_rel_err(y, want, 10);
    CHECK(err <= TOL, "batch 1 vs PyTorch: max rel err %g", err);
    REQUIRE_OK(kestrel_session_profile_count(session, &entries));
    CHECK(entries == 0, "profile after an unprofiled run: %zu", entries);
    REQUIRE_OK(kestrel_session_profile_source(session, &source));
    CHECK(source == KESTREL_TIMING_NONE, "timing source after an unprofiled run: %u", source);

    /* Load from memory: same outputs; the buffer may be freed at once. */
    size_t kes_len = 0;
    void *kes = read_file(dir, "image.kes", &kes_len);
    KestrelModel *model2 = NULL;
    REQUIRE_OK(kestrel_model_load_memory(kes, kes_len, &model2));
    /* Corrupted and truncated copies are rejected. */
    KestrelModel *bad = (KestrelModel *)1;
    EXPECT_STATUS(kestrel_model_load_memory(kes, kes_len / 2, &bad), KESTREL_ERR_INVALID_MODEL);
    CHECK(bad == NULL, "out not cleared");
    ((unsigned char *)kes)[kes_len - 100] ^= 0x5a;
    EXPECT_STATUS(kestrel_model_load_memory(kes, kes_len, &bad), KESTREL_ERR_INVALID_MODEL);
    EXPECT_STATUS(kestrel_model_load_memory(kes, 0, &bad), KESTREL_ERR_INVALID_MODEL);
    free(kes);
    KestrelSession *session2 = NULL;
    REQUIRE_OK(kestrel_session_new(model2, KESTREL_BACKEND_CPU, 1, &session2));
    /* The model may be freed before its sessions. */
    REQUIRE_OK(kestrel_model_free(model2));
    float y2[10];
    KestrelOutput yt2 = {y2, ys, 2};
    REQUIRE_OK(kestrel_session_run(session2, &xt, 1, &yt2, 1, NULL));
    CHECK(memcmp(y, y2, sizeof y2) == 0, "memory-loaded model differs from the path-loaded one");

    /* ---- error paths on a live model and session ---- */
    xs[0] = 4;
    ys[0] = 4;
    KestrelTensor t = xt;
    /* handles */
    EXPECT_STATUS(kestrel_model_input_count(NULL, &n), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_model_input_count((KestrelModel *)((char *)model + 1), &n), KESTREL_ERR_INVALID_HANDLE);
    EXPECT_STATUS(kestrel_model_input_count((KestrelModel *)session, &n), KESTREL_ERR_INVALID_HANDLE);
    EXPECT_STATUS(kestrel_model_input_count((KestrelModel *)&t, &n), KESTREL_ERR_INVALID_HANDLE);
    EXPECT_STATUS(kestrel_session_run((KestrelSession *)model, &xt, 1, &yt, 1, NULL), KESTREL_ERR_INVALID_HANDLE);
    EXPECT_STATUS(kestrel_session_run(session2, &xt, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE); /* capacity 1 */
    EXPECT_STATUS(kestrel_model_free((KestrelModel *)session), KESTREL_ERR_INVALID_HANDLE);
    EXPECT_STATUS(kestrel_session_free((KestrelSession *)model), KESTREL_ERR_INVALID_HANDLE);
    /* freed handles: use after free and double free are CLOSED and do nothing (handles are
       never reused nor dereferenced) */
    EXPECT_STATUS(kestrel_model_input_count(model2, &n), KESTREL_ERR_CLOSED);
    EXPECT_STATUS(kestrel_model_free(model2), KESTREL_ERR_CLOSED);
    REQUIRE_OK(kestrel_session_free(session2));
    EXPECT_STATUS(kestrel_session_free(session2), KESTREL_ERR_CLOSED);
    EXPECT_STATUS(kestrel_session_run(session2, &xt, 1, &yt2, 1, NULL), KESTREL_ERR_CLOSED);
    REQUIRE_OK(kestrel_model_free(NULL));
    REQUIRE_OK(kestrel_session_free(NULL));
    /* out-pointers */
    EXPECT_STATUS(kestrel_model_input_count(model, NULL), KESTREL_ERR_NULL_POINTER);
    char raw[32];
    EXPECT_STATUS(kestrel_model_input_count(model, (size_t *)(raw + 1)), KESTREL_ERR_MISALIGNED);
    EXPECT_STATUS(kestrel_model_input_info(model, 1, &in), KESTREL_ERR_INDEX);
    EXPECT_STATUS(kestrel_model_output_info(model, 7, &out), KESTREL_ERR_INDEX);
    EXPECT_STATUS(kestrel_model_arena_bytes(model, 0, &n), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_model_arena_bytes(model, SIZE_MAX, &n), KESTREL_ERR_TOO_LARGE);
    EXPECT_STATUS(kestrel_backend_available(42, &avail), KESTREL_ERR_INVALID_ARGUMENT);
    /* sessions */
    KestrelSession *s2 = NULL;
    EXPECT_STATUS(kestrel_session_new(model, KESTREL_BACKEND_CPU, 0, &s2), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_session_new(model, 99, 1, &s2), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_session_new(model, KESTREL_BACKEND_CPU, SIZE_MAX, &s2), KESTREL_ERR_TOO_LARGE);
    EXPECT_STATUS(kestrel_session_new(model, KESTREL_BACKEND_CPU, 1, NULL), KESTREL_ERR_NULL_POINTER);
    CHECK(s2 == NULL, "session out set on failure");
    /* run arguments */
    EXPECT_STATUS(kestrel_session_run(NULL, &xt, 1, &yt, 1, NULL), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_session_run(session, &xt, 0, &yt, 1, NULL), KESTREL_ERR_SHAPE);
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, &yt, 2, NULL), KESTREL_ERR_SHAPE);
    EXPECT_STATUS(kestrel_session_run(session, &xt, SIZE_MAX, &yt, 1, NULL), KESTREL_ERR_SHAPE);
    EXPECT_STATUS(kestrel_session_run(session, NULL, 1, &yt, 1, NULL), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, NULL, 1, NULL), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_session_run(session, (KestrelTensor *)(raw + 1), 1, &yt, 1, NULL), KESTREL_ERR_MISALIGNED);
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, &yt, 1, (size_t *)(raw + 1)), KESTREL_ERR_MISALIGNED);
    t = xt, t.dtype = 7;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_INVALID_ARGUMENT);
    t = xt, t.dtype = KESTREL_DTYPE_I32;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE);
    t = xt, t.rank = 3;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE);
    t = xt, t.rank = SIZE_MAX;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE);
    t = xt, t.shape = NULL;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_NULL_POINTER);
    t = xt, t.shape = (const size_t *)(raw + 1);
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_MISALIGNED);
    size_t bad_shape[4] = {0, 1, 64, 64};
    t = xt, t.shape = bad_shape;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE); /* batch 0 */
    bad_shape[0] = 5;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE); /* over capacity */
    bad_shape[0] = 4, bad_shape[2] = 32, bad_shape[3] = 128;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE); /* same count, other dims */
    t = xt, t.data = NULL;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_NULL_POINTER);
    t = xt, t.data = (const char *)x + 2;
    EXPECT_STATUS(kestrel_session_run(session, &t, 1, &yt, 1, NULL), KESTREL_ERR_MISALIGNED);
    size_t ys3[2] = {3, 10};
    KestrelOutput o = {y, ys3, 2};
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, &o, 1, NULL), KESTREL_ERR_SHAPE); /* batch differs */
    size_t ys_wrong[2] = {4, 11};
    o = (KestrelOutput){y, ys_wrong, 2};
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, &o, 1, NULL), KESTREL_ERR_SHAPE);
    o = (KestrelOutput){NULL, ys, 2};
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, &o, 1, NULL), KESTREL_ERR_NULL_POINTER);
    o = (KestrelOutput){(float *)((char *)y + 1), ys, 2};
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, &o, 1, NULL), KESTREL_ERR_MISALIGNED);
    o = (KestrelOutput){x + 100, ys, 2}; /* writing into the input */
    EXPECT_STATUS(kestrel_session_run(session, &xt, 1, &o, 1, NULL), KESTREL_ERR_INVALID_ARGUMENT);
    /* the session still works after all of that */
    memset(y, 0xff, sizeof y);
    REQUIRE_OK(kestrel_session_run(session, &xt, 1, &yt, 1, NULL));
    err = max_rel_err(y, want, 40);
    CHECK(err <= TOL, "after errors: max rel err %g", err);

    /* a panic is caught at the boundary */
    EXPECT_STATUS(kestrel_selftest_panic(), KESTREL_ERR_PANIC);
    CHECK(strstr(kestrel_last_error(), "deliberate") != NULL, "panic message: %s", kestrel_last_error());
    REQUIRE_OK(kestrel_session_run(session, &xt, 1, &yt, 1, NULL));

    /* a model is shared by sessions on several threads at once */
    struct shared_run jobs[3];
    pthread_t workers[3];
    for (int i = 0; i < 3; i++) {
        jobs[i] = (struct shared_run){model, KESTREL_BACKEND_CPU, TOL, x + i * 64 * 64, want + i * 10, 0, KESTREL_OK};
        CHECK(pthread_create(&workers[i], NULL, run_on_shared_model, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(workers[i], NULL);
        CHECK(jobs[i].status == KESTREL_OK && jobs[i].err <= jobs[i].tol, "thread %d: %s, max rel err %g", i,
              kestrel_status_name(jobs[i].status), jobs[i].err);
    }

    /* the last error is per thread */
    pthread_t th;
    void *fresh = NULL;
    CHECK(pthread_create(&th, NULL, thread_last_error, NULL) == 0, "pthread_create");
    pthread_join(th, &fresh);
    CHECK(fresh != NULL, "a new thread sees another thread's last error");

    REQUIRE_OK(kestrel_session_free(session));
    REQUIRE_OK(kestrel_model_free(model));
    free(x);
    free(want);
}

static void test_loading_errors(const char *dir) {
    KestrelModel *m = (KestrelModel *)1;
    EXPECT_STATUS(kestrel_model_load_path(NULL, &m), KESTREL_ERR_NULL_POINTER);
    CHECK(m == NULL, "out not cleared");
    EXPECT_STATUS(kestrel_model_load_path("x.kes", NULL), KESTREL_ERR_NULL_POINTER);
    char *missing = join(dir, "no-such-model.kes");
    EXPECT_STATUS(kestrel_model_load_path(missing, &m), KESTREL_ERR_IO);
    CHECK(strstr(kestrel_last_error(), "no-such-model.kes") != NULL, "IO message lacks the path");
    free(missing);
    char *not_a_model = join(dir, "image_input.bin");
    EXPECT_STATUS(kestrel_model_load_path(not_a_model, &m), KESTREL_ERR_INVALID_MODEL);
    free(not_a_model);
    unsigned char byte = 0;
    EXPECT_STATUS(kestrel_model_load_memory(NULL, 10, &m), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_model_load_memory(&byte, 1, NULL), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_model_load_memory(&byte, SIZE_MAX, &m), KESTREL_ERR_TOO_LARGE);
    EXPECT_STATUS(kestrel_model_load_memory(&byte, 1, &m), KESTREL_ERR_INVALID_MODEL);
    CHECK(m == NULL, "out not cleared");
}

static void test_statics(void) {
    CHECK(strlen(kestrel_version()) > 0, "version");
    CHECK(strcmp(kestrel_status_name(KESTREL_OK), "KESTREL_OK") == 0, "OK name");
    CHECK(strcmp(kestrel_status_name(KESTREL_ERR_SHAPE), "KESTREL_ERR_SHAPE") == 0, "SHAPE name");
    CHECK(strcmp(kestrel_status_name(-3), "KESTREL_UNKNOWN_STATUS") == 0, "unknown name");
    CHECK(strcmp(kestrel_status_name(KESTREL_ERR_NO_GPU), "KESTREL_ERR_NO_GPU") == 0, "NO_GPU name");
    CHECK(strcmp(kestrel_status_name(KESTREL_ERR_GPU), "KESTREL_ERR_GPU") == 0, "GPU name");
    CHECK(strcmp(kestrel_status_name(KESTREL_ERR_CLOSED), "KESTREL_ERR_CLOSED") == 0, "CLOSED name");
    CHECK(strcmp(kestrel_status_name(KESTREL_ERR_BUSY), "KESTREL_ERR_BUSY") == 0, "BUSY name");
    CHECK(strcmp(kestrel_status_name(KESTREL_ERR_BUSY + 1), "KESTREL_UNKNOWN_STATUS") == 0, "unknown name");
    CHECK(strcmp(kestrel_last_error(), "") == 0, "last error before any failure: %s", kestrel_last_error());
}

/* ---- backends other than the plain CPU ---- */

struct fixture {
    KestrelModel *model;
    float *x, *want;
    size_t ops;
};

static struct fixture load_image(const char *dir) {
    struct fixture f = {0};
    char *path = join(dir, "image.kes");
    REQUIRE_OK(kestrel_model_load_path(path, &f.model));
    free(path);
    REQUIRE_OK(kestrel_model_op_count(f.model, &f.ops));
    size_t len = 0;
    f.x = read_file(dir, "image_input.bin", &len);
    CHECK(len == 4 * 64 * 64 * sizeof(float), "input bytes %zu", len);
    f.want = read_file(dir, "image_expected.bin", &len);
    CHECK(len == 4 * 10 * sizeof(float), "expected bytes %zu", len);
    return f;
}

static void free_fixture(struct fixture *f) {
    REQUIRE_OK(kestrel_model_free(f->model));
    free(f->x);
    free(f->want);
}

/* Runs the first `batch` images through `s` into y (batch x 10 floats, NaN-filled first). */
static KestrelStatus run_image(KestrelSession *s, const float *x, float *y, size_t batch, size_t *batch_out) {
    size_t xs[4] = {batch, 1, 64, 64}, ys[2] = {batch, 10};
    KestrelTensor xt = {KESTREL_DTYPE_F32, x, xs, 4};
    KestrelOutput yt = {y, ys, 2};
    memset(y, 0xff, batch * 10 * sizeof(float));
    return kestrel_session_run(s, &xt, 1, &yt, 1, batch_out);
}

static uint32_t backend_of(const KestrelSession *s) {
    uint32_t b = 99;
    REQUIRE_OK(kestrel_session_backend(s, &b));
    return b;
}

static const char *device_of(const KestrelSession *s) {
    const char *d = NULL;
    REQUIRE_OK(kestrel_session_device(s, &d));
    return d ? d : "(null)";
}

/* `check_auto`'s `expected` where AUTO times the CPU and the GPU: either backend, with what was
 * measured in the device string, and a second session takes the cached choice. */
#define AUTO_MEASURED UINT32_MAX

/* AUTO on this machine must give `expected`, and the outputs must match PyTorch. */
static void check_auto(struct fixture *f, uint32_t expected) {
    KestrelSession *s = NULL;
    REQUIRE_OK(kestrel_session_new(f->model, KESTREL_BACKEND_AUTO, 2, &s));
    uint32_t b = backend_of(s);
    const char *device = device_of(s);
    if (expected == AUTO_MEASURED) {
        CHECK(strstr(device, "(auto: ") != NULL && strstr(device, "ms per run") != NULL,
              "AUTO does not say what it measured: %s", device);
        KestrelSession *again = NULL;
        REQUIRE_OK(kestrel_session_new(f->model, KESTREL_BACKEND_AUTO, 2, &again));
        CHECK(backend_of(again) == b, "the cached AUTO choice differs from the measured one");
        CHECK(strstr(device_of(again), "cached") != NULL, "AUTO's second session is not cached: %s",
              device_of(again));
        printf("AUTO again -> %s\n", device_of(again));
        REQUIRE_OK(kestrel_session_free(again));
    } else {
        CHECK(b == expected, "AUTO resolved to backend %u (%s), expected %u", b, device, expected);
    }
    if (b == KESTREL_BACKEND_CPU) {
        CHECK(strncmp(device, "cpu (auto: ", 11) == 0 && strlen(device) > 20, "AUTO fallback gives no reason: %s",
              device);
    } else {
        CHECK(strncmp(device, "cpu", 3) != 0, "AUTO on the GPU names device %s", device);
    }
    printf("AUTO -> %s on %s\n", b == KESTREL_BACKEND_WGPU ? "WGPU" : "CPU", device);
    float y[2 * 10];
    size_t batch = 0;
    REQUIRE_OK(run_image(s, f->x, y, 2, &batch));
    double err = max_rel_err(y, f->want, 20);
    CHECK(batch == 2 && err <= (b == KESTREL_BACKEND_WGPU ? GPU_TOL : TOL), "AUTO batch %zu: max rel err %g", batch,
          err);
    REQUIRE_OK(kestrel_session_free(s));
}

/* Where wgpu cannot be used (`where`): it is not available, and a WGPU session is refused with
 * `status` and a message containing `message`, its out pointer cleared. */
static void check_no_wgpu(const struct fixture *f, const char *where, KestrelStatus status, const char *message) {
    bool avail = true;
    REQUIRE_OK(kestrel_backend_available(KESTREL_BACKEND_WGPU, &avail));
    CHECK(!avail, "wgpu claims to be available %s", where);
    KestrelSession *s = (KestrelSession *)1;
    EXPECT_STATUS(kestrel_session_new(f->model, KESTREL_BACKEND_WGPU, 4, &s), status);
    CHECK(s == NULL, "out not cleared on failure");
    CHECK(strstr(kestrel_last_error(), message) != NULL, "message: %s", kestrel_last_error());
}

/* A library built without the wgpu feature. */
static void test_cpu_only_build(const char *dir) {
    struct fixture f = load_image(dir);
    check_no_wgpu(&f, "in a CPU-only build", KESTREL_ERR_UNSUPPORTED, "built without the wgpu backend");
    KestrelSession *s = (KestrelSession *)1;
    /* A GPU precision changes none of that: WGPU is refused, AUTO runs on the CPU in f32. */
    EXPECT_STATUS(kestrel_session_new_with_precision(f.model, KESTREL_BACKEND_WGPU, 4, KESTREL_GPU_PRECISION_F16, &s),
                  KESTREL_ERR_UNSUPPORTED);
    CHECK(s == NULL, "out not cleared on failure");
    REQUIRE_OK(kestrel_session_new_with_precision(f.model, KESTREL_BACKEND_AUTO, 4, KESTREL_GPU_PRECISION_AUTO, &s));
    bool f16 = true;
    REQUIRE_OK(kestrel_session_gpu_f16(s, &f16));
    CHECK(!f16 && backend_of(s) == KESTREL_BACKEND_CPU, "AUTO with AUTO precision in a CPU-only build");
    REQUIRE_OK(kestrel_session_free(s));
    check_auto(&f, KESTREL_BACKEND_CPU);
    free_fixture(&f);
}

/* wgpu built in, but no adapter on this machine (the test hides the Vulkan drivers). */
static void test_no_gpu(const char *dir) {
    struct fixture f = load_image(dir);
    check_no_wgpu(&f, "without an adapter", KESTREL_ERR_NO_GPU, "no GPU adapter");
    printf("WGPU without an adapter: %s\n", kestrel_last_error());
    check_auto(&f, KESTREL_BACKEND_CPU);
    free_fixture(&f);
}

static void test_gpu_image(const char *dir, uint32_t auto_expected) {
    struct fixture f = load_image(dir);
    bool avail = false;
    REQUIRE_OK(kestrel_backend_available(KESTREL_BACKEND_WGPU, &avail));
    CHECK(avail, "wgpu is not available");
    KestrelSession *gpu = NULL, *cpu = NULL;
    REQUIRE_OK(kestrel_session_new(f.model, KESTREL_BACKEND_WGPU, 4, &gpu));
    CHECK(backend_of(gpu) == KESTREL_BACKEND_WGPU, "WGPU session on backend %u", backend_of(gpu));
    const char *device = device_of(gpu);
    CHECK(strlen(device) > 0 && strncmp(device, "cpu", 3) != 0, "GPU session device %s", device);
    printf("GPU: %s\n", device);
    REQUIRE_OK(kestrel_session_new(f.model, KESTREL_BACKEND_CPU, 4, &cpu));

    /* Batch 4, unprofiled: vs PyTorch and vs the CPU backend. */
    float y[4 * 10], ycpu[4 * 10];
    size_t batch = 0;
    REQUIRE_OK(run_image(cpu, f.x, ycpu, 4, NULL));
    REQUIRE_OK(run_image(gpu, f.x, y, 4, &batch));
    CHECK(batch == 4, "batch %zu", batch);
    double err = max_rel_err(y, f.want, 40), err_cpu = max_rel_err(y, ycpu, 40);
    CHECK(err <= GPU_TOL, "GPU batch 4 vs PyTorch: max rel err %g", err);
    CHECK(err_cpu <= GPU_TOL, "GPU batch 4 vs CPU: max rel err %g", err_cpu);
    size_t entries = 99;
    uint32_t source = 99;
    REQUIRE_OK(kestrel_session_profile_count(gpu, &entries));
    REQUIRE_OK(kestrel_session_profile_source(gpu, &source));
    CHECK(entries == 0 && source == KESTREL_TIMING_NONE, "unprofiled GPU run: %zu entries, source %u", entries, source);

    /* Profiled: per-node GPU timestamps. */
    REQUIRE_OK(kestrel_session_set_profiling(gpu, true));
    REQUIRE_OK(run_image(gpu, f.x, y, 4, NULL));
    err = max_rel_err(y, f.want, 40);
    CHECK(err <= GPU_TOL, "profiled GPU batch 4 vs PyTorch: max rel err %g", err);
    REQUIRE_OK(kestrel_session_profile_source(gpu, &source));
    REQUIRE_OK(kestrel_session_profile_count(gpu, &entries));
    uint64_t wall = 0, total = 0;
    REQUIRE_OK(kestrel_session_profile_wall_nanos(gpu, &wall));
    CHECK(wall > 0, "GPU submission wall time 0");
    int named = 1;
    for (size_t i = 0; i < entries; i++) {
        KestrelOpTiming t;
        REQUIRE_OK(kestrel_session_profile_entry(gpu, i, &t));
        total += t.nanos;
        named &= t.op != NULL && strlen(t.op) > 0 && t.node < f.ops;
        if (i > 0) {
            KestrelOpTiming prev;
            REQUIRE_OK(kestrel_session_profile_entry(gpu, i - 1, &prev));
            named &= prev.node < t.node; /* execution order */
        }
    }
    CHECK(named, "a GPU profile entry lacks an op name or is out of order");
    if (source == KESTREL_TIMING_GPU_TIMESTAMPS) {
        CHECK(entries > 0 && entries <= f.ops, "GPU profile entries %zu of %zu ops", entries, f.ops);
        CHECK(total > 0, "GPU timestamps total 0 ns");
        /* Every pass runs between the submission and the readback. */
        CHECK(total <= wall, "GPU node times %llu ns exceed the submission's wall time %llu ns",
              (unsigned long long)total, (unsigned long long)wall);
    } else {
        CHECK(source == KESTREL_TIMING_GPU_SUBMISSION && entries == 0, "GPU timing source %u with %zu entries",
              source, entries);
    }
    printf("timing source: %s\n", source == KESTREL_TIMING_GPU_TIMESTAMPS ? "GPU_TIMESTAMPS" : "GPU_SUBMISSION");
    printf("image model on the GPU: %zu ops, %zu timed, %.3f ms of GPU time, %.3f ms submission, max rel err "
           "%.2e vs PyTorch, %.2e vs CPU\n",
           f.ops, entries, (double)total / 1e6, (double)wall / 1e6, err, err_cpu);
    EXPECT_STATUS(kestrel_session_profile_entry(gpu, entries, &(KestrelOpTiming){0}), KESTREL_ERR_INDEX);

    /* Batch 1 after batch 4 (the batch is a uniform: it must be rewritten), profiling off. */
    REQUIRE_OK(kestrel_session_set_profiling(gpu, false));
    REQUIRE_OK(run_image(gpu, f.x, y, 1, &batch));
    err = max_rel_err(y, f.want, 10);
    CHECK(batch == 1 && err <= GPU_TOL, "GPU batch 1 vs PyTorch: max rel err %g", err);
    REQUIRE_OK(kestrel_session_profile_source(gpu, &source));
    CHECK(source == KESTREL_TIMING_NONE, "timing source after profiling off: %u", source);

    /* Errors on a GPU session are the same typed errors; the session still works afterwards. */
    size_t xs[4] = {5, 1, 64, 64}, ys[2] = {5, 10};
    KestrelTensor xt = {KESTREL_DTYPE_F32, f.x, xs, 4};
    KestrelOutput yt = {y, ys, 2};
    EXPECT_STATUS(kestrel_session_run(gpu, &xt, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE); /* over capacity */
    xs[0] = ys[0] = 2;
    xt.dtype = KESTREL_DTYPE_I32;
    EXPECT_STATUS(kestrel_session_run(gpu, &xt, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE);
    xt.dtype = KESTREL_DTYPE_F32;
    yt.data = f.x + 8;
    EXPECT_STATUS(kestrel_session_run(gpu, &xt, 1, &yt, 1, NULL), KESTREL_ERR_INVALID_ARGUMENT); /* overlap */
    KestrelSession *bad = (KestrelSession *)1;
    EXPECT_STATUS(kestrel_session_new(f.model, KESTREL_BACKEND_WGPU, 0, &bad), KESTREL_ERR_INVALID_ARGUMENT);
    CHECK(bad == NULL, "out not cleared");
    EXPECT_STATUS(kestrel_session_new(f.model, KESTREL_BACKEND_WGPU, SIZE_MAX, &bad), KESTREL_ERR_TOO_LARGE);
    EXPECT_STATUS(kestrel_session_device(gpu, NULL), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_session_profile_source((KestrelSession *)f.model, &source), KESTREL_ERR_INVALID_HANDLE);
    EXPECT_STATUS(kestrel_session_profile_wall_nanos(NULL, &wall), KESTREL_ERR_NULL_POINTER);
    REQUIRE_OK(run_image(gpu, f.x, y, 4, NULL));
    err = max_rel_err(y, f.want, 40);
    CHECK(err <= GPU_TOL, "GPU after errors: max rel err %g", err);

    /* Sessions on one model and one device from several threads at once. */
    struct shared_run jobs[2];
    pthread_t workers[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (struct shared_run){f.model, KESTREL_BACKEND_WGPU, GPU_TOL, f.x + i * 64 * 64, f.want + i * 10, 0,
                                      KESTREL_OK};
        CHECK(pthread_create(&workers[i], NULL, run_on_shared_model, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(workers[i], NULL);
        CHECK(jobs[i].status == KESTREL_OK && jobs[i].err <= jobs[i].tol, "GPU thread %d: %s, max rel err %g", i,
              kestrel_status_name(jobs[i].status), jobs[i].err);
    }

    check_auto(&f, auto_expected);

    /* GPU precision: f32 by default and on request; f16 where the device has SHADER_F16 (else
     * a typed UNSUPPORTED), within f16's rounding of the f32 results and with the same top
     * class; AUTO resolves as the device allows; unknown codes are INVALID_ARGUMENT; the CPU
     * ignores it. */
    bool f16 = true;
    REQUIRE_OK(kestrel_session_gpu_f16(gpu, &f16));
    CHECK(!f16, "kestrel_session_new made an f16 GPU session");
    REQUIRE_OK(kestrel_session_gpu_f16(cpu, &f16));
    CHECK(!f16, "a CPU session reports f16");
    KestrelSession *half = NULL;
    KestrelStatus st =
        kestrel_session_new_with_precision(f.model, KESTREL_BACKEND_WGPU, 4, KESTREL_GPU_PRECISION_F16, &half);
    if (st == KESTREL_OK) {
        REQUIRE_OK(kestrel_session_gpu_f16(half, &f16));
        CHECK(f16, "an F16 GPU session does not report f16");
        float yh[4 * 10];
        REQUIRE_OK(run_image(half, f.x, yh, 4, NULL));
        double err16 = max_rel_err(yh, ycpu, 40);
        CHECK(err16 <= 5e-2, "f16 GPU vs CPU: max rel err %g", err16);
        for (int i = 0; i < 4; i++) {
            int a = 0, b = 0;
            for (int k = 1; k < 10; k++) {
                a = yh[i * 10 + k] > yh[i * 10 + a] ? k : a;
                b = ycpu[i * 10 + k] > ycpu[i * 10 + b] ? k : b;
            }
            CHECK(a == b, "f16 GPU sample %d: class %d, CPU class %d", i, a, b);
        }
        printf("f16 GPU session: max rel err %.2e vs the CPU\n", err16);
        REQUIRE_OK(kestrel_session_free(half));
    } else {
        CHECK(st == KESTREL_ERR_UNSUPPORTED && half == NULL, "F16 session: %s", kestrel_status_name(st));
        printf("no SHADER_F16: %s\n", kestrel_last_error());
    }
    REQUIRE_OK(kestrel_session_new_with_precision(f.model, KESTREL_BACKEND_WGPU, 4, KESTREL_GPU_PRECISION_AUTO, &half));
    REQUIRE_OK(kestrel_session_gpu_f16(half, &f16));
    CHECK(f16 == (st == KESTREL_OK), "AUTO precision: f16 %d, F16 session %s", f16, kestrel_status_name(st));
    REQUIRE_OK(kestrel_session_free(half));
    REQUIRE_OK(kestrel_session_new_with_precision(f.model, KESTREL_BACKEND_WGPU, 4, KESTREL_GPU_PRECISION_F32, &half));
    REQUIRE_OK(kestrel_session_gpu_f16(half, &f16));
    CHECK(!f16, "an F32 GPU session reports f16");
    REQUIRE_OK(kestrel_session_free(half));
    half = (KestrelSession *)1;
    EXPECT_STATUS(kestrel_session_new_with_precision(f.model, KESTREL_BACKEND_WGPU, 4, 7, &half),
                  KESTREL_ERR_INVALID_ARGUMENT);
    CHECK(half == NULL, "out not cleared");
    REQUIRE_OK(kestrel_session_new_with_precision(f.model, KESTREL_BACKEND_CPU, 4, KESTREL_GPU_PRECISION_F16, &half));
    REQUIRE_OK(kestrel_session_gpu_f16(half, &f16));
    CHECK(!f16 && backend_of(half) == KESTREL_BACKEND_CPU, "a CPU session with F16 asked");
    REQUIRE_OK(kestrel_session_free(half));

    /* The model may be freed before its GPU session. */
    REQUIRE_OK(kestrel_session_free(cpu));
    KestrelModel *model = f.model;
    f.model = NULL;
    REQUIRE_OK(kestrel_model_free(model));
    REQUIRE_OK(run_image(gpu, f.x, y, 3, NULL));
    err = max_rel_err(y, f.want, 30);
    CHECK(err <= GPU_TOL, "GPU session after its model was freed: max rel err %g", err);
    REQUIRE_OK(kestrel_session_free(gpu));
    EXPECT_STATUS(kestrel_session_free(gpu), KESTREL_ERR_CLOSED);
    free(f.x);
    free(f.want);
}

/* The text model (int64 and int32 token ids) on `backend` (CPU or WGPU): both id types agree and
 * match PyTorch; ids outside the vocabulary or beyond i32 are refused, and the session still
 * runs afterwards. */
static void test_text(const char *dir, uint32_t backend) {
    int gpu = backend == KESTREL_BACKEND_WGPU;
    const char *on = gpu ? "GPU " : "";
    char *path = join(dir, "text.kes");
    KestrelModel *model = NULL;
    REQUIRE_OK(kestrel_model_load_path(path, &model));
    free(path);
    KestrelTensorInfo in;
    REQUIRE_OK(kestrel_model_input_info(model, 0, &in));
    CHECK(in.dtype == KESTREL_DTYPE_I32 && in.rank == 1 && in.dims[0] == 32, "ids input dtype %u rank %zu",
          in.dtype, in.rank);
    size_t len = 0;
    int64_t *ids = read_file(dir, "text_input.bin", &len);
    CHECK(len == 4 * 32 * sizeof(int64_t), "ids bytes %zu", len);
    float *want = read_file(dir, "text_expected.bin", &len);
    CHECK(len == 4 * 2 * sizeof(float), "expected bytes %zu", len);
    KestrelSession *s = NULL;
    REQUIRE_OK(kestrel_session_new(model, backend, 4, &s));
    CHECK(backend_of(s) == backend, "text session on backend %u", backend_of(s));
    float y[8], y32[8];
    size_t xs[2] = {4, 32}, ys[2] = {4, 2};
    KestrelTensor x64 = {KESTREL_DTYPE_I64, ids, xs, 2};
    KestrelOutput yt = {y, ys, 2};
    REQUIRE_OK(kestrel_session_run(s, &x64, 1, &yt, 1, NULL));
    double err = max_rel_err(y, want, 8);
    CHECK(err <= (gpu ? GPU_TOL : TOL), "%si64 ids vs PyTorch: max rel err %g", on, err);
    int32_t ids32[4 * 32];
    for (int i = 0; i < 4 * 32; i++) ids32[i] = (int32_t)ids[i];
    KestrelTensor x32 = {KESTREL_DTYPE_I32, ids32, xs, 2};
    KestrelOutput yt32 = {y32, ys, 2};
    REQUIRE_OK(kestrel_session_run(s, &x32, 1, &yt32, 1, NULL));
    CHECK(memcmp(y, y32, sizeof y) == 0, "%si32 and i64 ids differ", on);
    printf("text model%s: i64 and i32 ids agree, max rel err %.2e vs PyTorch\n", gpu ? " on the GPU" : "", err);
    if (!gpu) {
        KestrelTensor xf = {KESTREL_DTYPE_F32, y, xs, 2};
        EXPECT_STATUS(kestrel_session_run(s, &xf, 1, &yt, 1, NULL), KESTREL_ERR_SHAPE);
    }
    /* ids outside the vocabulary (above it, or below -vocab: a negative id counts from the end),
     * or beyond i32 */
    ids32[5] = 1000000;
    EXPECT_STATUS(kestrel_session_run(s, &x32, 1, &yt32, 1, NULL), KESTREL_ERR_INPUT_VALUE);
    ids32[5] = -1000000;
    EXPECT_STATUS(kestrel_session_run(s, &x32, 1, &yt32, 1, NULL), KESTREL_ERR_INPUT_VALUE);
    int64_t saved = ids[7];
    ids[7] = (int64_t)1 << 40;
    EXPECT_STATUS(kestrel_session_run(s, &x64, 1, &yt, 1, NULL), KESTREL_ERR_INPUT_VALUE);
    ids[7] = saved;
    memset(y, 0xff, sizeof y);
    REQUIRE_OK(kestrel_session_run(s, &x64, 1, &yt, 1, NULL));
    CHECK(memcmp(y, y32, sizeof y) == 0, "%stext session after errors differs", on);
    REQUIRE_OK(kestrel_session_free(s));
    REQUIRE_OK(kestrel_model_free(model));
    free(ids);
    free(want);
}

/* kestrel_image_to_input and kestrel_classify on the bundled Fashion-MNIST model (DIR/classifier.kes,
 * 28x28 grey input, 10 labelled classes): an RGBA 40x30 image with a padded stride, the top-k against
 * the tensor run by hand, and every bad argument (run under valgrind in the cpu modes). */
static void test_classify(const char *dir) {
    char *path = join(dir, "classifier.kes");
    KestrelModel *model = NULL;
    REQUIRE_OK(kestrel_model_load_path(path, &model));
    free(path);
    KestrelSession *session = NULL;
    REQUIRE_OK(kestrel_session_new(model, KESTREL_BACKEND_CPU, 1, &session));
    enum { W = 40, H = 30, STRIDE = W * 4 + 7 };
    static uint8_t px[STRIDE * H];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 7 % 256);
    float x[28 * 28 + 1];
    x[28 * 28] = -7.0f;
    REQUIRE_OK(kestrel_image_to_input(model, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, x, 28 * 28 + 1));
    CHECK(x[28 * 28] == -7.0f, "image_to_input wrote past the input");
    float y[10];
    size_t xs[4] = {1, 1, 28, 28}, ys[2] = {1, 10};
    KestrelTensor xt = {KESTREL_DTYPE_F32, x, xs, 4};
    KestrelOutput yt = {y, ys, 2};
    REQUIRE_OK(kestrel_session_run(session, &xt, 1, &yt, 1, NULL));
    size_t best = 0;
    for (size_t i = 1; i < 10; i++)
        if (y[i] > y[best]) best = i;
    KestrelClass top[10];
    REQUIRE_OK(kestrel_classify(session, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, 10, top));
    CHECK(top[0].index == best, "classify's best %zu, the run's %zu", top[0].index, best);
    double sum = 0;
    unsigned seen = 0;
    for (int i = 0; i < 10; i++) {
        sum += top[i].probability;
        seen |= 1u << top[i].index;
        CHECK(i == 0 || top[i - 1].probability >= top[i].probability, "sorted at %d", i);
        const char *label = NULL;
        REQUIRE_OK(kestrel_model_label(model, top[i].index, &label));
        CHECK(top[i].label != NULL && strcmp(top[i].label, label) == 0, "label of class %zu", top[i].index);
    }
    CHECK(seen == 0x3ff && fabs(sum - 1.0) < 1e-5, "classes %x, probabilities sum to %g", seen, sum);
    /* Same pixels as BGRA: the same result. */
    static uint8_t bgra[STRIDE * H];
    memcpy(bgra, px, sizeof px);
    for (int r = 0; r < H; r++)
        for (int c = 0; c < W; c++) {
            uint8_t *p = bgra + r * STRIDE + c * 4, t = p[0];
            p[0] = p[2];
            p[2] = t;
        }
    KestrelClass top2[3];
    REQUIRE_OK(kestrel_classify(session, bgra, W, H, STRIDE, KESTREL_PIXEL_BGRA8888, 3, top2));
    CHECK(top2[0].index == top[0].index && top2[0].probability == top[0].probability, "BGRA differs from RGBA");
    /* Bad arguments. */
    EXPECT_STATUS(kestrel_classify(session, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, 0, top), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_classify(session, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, 11, top), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_classify(session, px, W, H, W * 4 - 1, KESTREL_PIXEL_RGBA8888, 1, top), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_classify(session, px, 0, H, STRIDE, KESTREL_PIXEL_RGBA8888, 1, top), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_classify(session, px, W, H, STRIDE, 4, 1, top), KESTREL_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(kestrel_classify(session, NULL, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, 1, top), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_classify(session, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, 1, NULL), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_classify(NULL, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, 1, top), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_image_to_input(model, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, x, 28 * 28 - 1),
                  KESTREL_ERR_BUFFER_TOO_SMALL);
    EXPECT_STATUS(kestrel_image_to_input(model, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, NULL, 28 * 28),
                  KESTREL_ERR_NULL_POINTER);
    /* Labels stay valid while the session holds the freed model. */
    REQUIRE_OK(kestrel_model_free(model));
    REQUIRE_OK(kestrel_classify(session, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, 1, top));
    CHECK(top[0].label != NULL && strlen(top[0].label) > 0, "label after the model was freed");
    REQUIRE_OK(kestrel_session_free(session));
    /* A model without image preprocessing. */
    path = join(dir, "bare.kes");
    REQUIRE_OK(kestrel_model_load_path(path, &model));
    free(path);
    EXPECT_STATUS(kestrel_image_to_input(model, px, W, H, STRIDE, KESTREL_PIXEL_RGBA8888, x, 28 * 28),
                  KESTREL_ERR_UNSUPPORTED);
    REQUIRE_OK(kestrel_model_free(model));
}

/* Bounded dims (format 2.0) on `backend`: DIR/bounded_dims.kes takes x [sequence, 8] with
 * `sequence` in 2..=16 and outputs probs [2, sequence - 1, 4] and mean [2, 4]; run at several
 * lengths (output buffers sized from kestrel_session_output_info) it must match the graph built at
 * that length (bounded_dims_fixed_t5.kes, _t12.kes, on the CPU). Bad shapes are KESTREL_ERR_SHAPE
 * naming the dim and its range and leave the session at the bound. A GPU session (lowered again at
 * each length) must match them too, within GPU_TOL. */
static size_t numel_of(const KestrelTensorInfo *t) {
    size_t n = 1;
    for (size_t i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

/* Runs `s` at batch 2 on x (2 x T x 8 floats) into freshly allocated outputs sized from the
 * session's current shapes; returns the status, the outputs in y[0], y[1] (caller frees). */
static KestrelStatus run_bounded(KestrelSession *s, const float *x, float *y[2], size_t n[2]) {
    KestrelTensorInfo in, out[2];
    REQUIRE_OK(kestrel_session_input_info(s, 0, &in));
    size_t xs[3] = {2, in.dims[0], in.dims[1]};
    size_t ys[2][4];
    KestrelOutput o[2];
    for (size_t i = 0; i < 2; i++) {
        REQUIRE_OK(kestrel_session_output_info(s, i, &out[i]));
        ys[i][0] = 2;
        for (size_t d = 0; d < out[i].rank; d++) ys[i][d + 1] = out[i].dims[d];
        n[i] = 2 * numel_of(&out[i]);
        y[i] = malloc(n[i] * sizeof(float));
        for (size_t k = 0; k < n[i]; k++) y[i][k] = NAN;
        o[i].data = y[i];
        o[i].shape = ys[i];
        o[i].rank = out[i].rank + 1;
    }
    KestrelTensor t = {KESTREL_DTYPE_F32, x, xs, 3};
    return kestrel_session_run(s, &t, 1, o, 2, NULL);
}

static void test_bounded_dims(const char *dir, uint32_t backend) {
    int gpu = backend == KESTREL_BACKEND_WGPU;
    char *path = join(dir, "bounded_dims.kes");
    KestrelModel *model = NULL;
    REQUIRE_OK(kestrel_model_load_path(path, &model));
    free(path);
    size_t n_dims = 0;
    REQUIRE_OK(kestrel_model_dim_count(model, &n_dims));
    KestrelDimInfo dim = {NULL, 0, 0};
    REQUIRE_OK(kestrel_model_dim_info(model, 0, &dim));
    CHECK(n_dims == 1 && strcmp(dim.name, "sequence") == 0 && dim.min == 2 && dim.max == 16,
          "dims: %zu, %s %zu..=%zu", n_dims, dim.name, dim.min, dim.max);
    EXPECT_STATUS(kestrel_model_dim_info(model, 1, &dim), KESTREL_ERR_INDEX);
    EXPECT_STATUS(kestrel_model_dim_info(model, 0, NULL), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_model_dim_count(NULL, &n_dims), KESTREL_ERR_NULL_POINTER);
    KestrelSession *s = NULL;
    KestrelStatus st = kestrel_session_new(model, backend, 2, &s);
    if (gpu && st == KESTREL_ERR_UNSUPPORTED) {
        printf("bounded dims on the GPU: skipped, the session is refused (%s)\n", kestrel_last_error());
        REQUIRE_OK(kestrel_model_free(model));
        return;
    }
    REQUIRE_OK(st);
    KestrelTensorInfo in;
    REQUIRE_OK(kestrel_session_input_info(s, 0, &in));
    CHECK(in.rank == 2 && in.dims[0] == 16 && in.dims[1] == 8, "at the bound until set: [%zu, %zu]", in.dims[0],
          in.dims[1]);
    const size_t lengths[4] = {5, 12, 16, 5};
    for (int k = 0; k < 4; k++) {
        size_t T = lengths[k], ranks[1] = {2}, dims[2] = {T, 8};
        st = kestrel_session_set_input_shapes(s, dims, ranks, 1);
        CHECK(st == KESTREL_OK, "set_input_shapes at T = %zu: %s", T, kestrel_status_name(st));
        REQUIRE_OK(kestrel_session_input_info(s, 0, &in));
        CHECK(in.dims[0] == T, "input shape at T = %zu: %zu", T, in.dims[0]);
        float *x = malloc(2 * T * 8 * sizeof(float));
        for (size_t i = 0; i < 2 * T * 8; i++) x[i] = (float)((i * 37 + T * 11) % 101) / 50.0f - 1.0f;
        float *y[2], *want[2];
        size_t n[2], wn[2];
        REQUIRE_OK(run_bounded(s, x, y, n));
        CHECK(n[0] == 2 * 2 * (T - 1) * 4 && n[1] == 2 * 2 * 4, "output sizes at T = %zu: %zu, %zu", T, n[0], n[1]);
        if (T != 16) {
            char name[64];
            snprintf(name, sizeof name, "bounded_dims_fixed_t%zu.kes", T);
            path = join(dir, name);
            KestrelModel *fixed = NULL;
            REQUIRE_OK(kestrel_model_load_path(path, &fixed));
            free(path);
            KestrelSession *fs = NULL;
            REQUIRE_OK(kestrel_session_new(fixed, KESTREL_BACKEND_CPU, 2, &fs));
            REQUIRE_OK(run_bounded(fs, x, want, wn));
            for (int i = 0; i < 2; i++) {
                double err = wn[i] == n[i] ? max_rel_err(y[i], want[i], n[i]) : INFINITY;
                CHECK(err <= (gpu ? GPU_TOL : 1e-6), "T = %zu output %d vs the graph built at T: %g", T, i, err);
                free(want[i]);
            }
            REQUIRE_OK(kestrel_session_free(fs));
            REQUIRE_OK(kestrel_model_free(fixed));
        }
        for (int i = 0; i < 2; i++) free(y[i]);
        free(x);
    }
    /* Bad shapes: typed errors naming the dim and its range; the session is then at the bound. */
    size_t ranks[2] = {2, 2}, big[4] = {17, 8, 5, 8}, wide[2] = {5, 9}, rank7[1] = {7};
    EXPECT_STATUS(kestrel_session_set_input_shapes(s, big, ranks, 1), KESTREL_ERR_SHAPE);
    CHECK(strstr(kestrel_last_error(), "`sequence` = 17") && strstr(kestrel_last_error(), "2..=16"),
          "out-of-range message: %s", kestrel_last_error());
    EXPECT_STATUS(kestrel_session_set_input_shapes(s, wide, ranks, 1), KESTREL_ERR_SHAPE);
    EXPECT_STATUS(kestrel_session_set_input_shapes(s, big, ranks, 2), KESTREL_ERR_SHAPE);
    EXPECT_STATUS(kestrel_session_set_input_shapes(s, big, rank7, 1), KESTREL_ERR_SHAPE);
    EXPECT_STATUS(kestrel_session_set_input_shapes(s, big, NULL, 1), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_session_set_input_shapes(s, NULL, ranks, 1), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_session_set_input_shapes(NULL, big, ranks, 1), KESTREL_ERR_NULL_POINTER);
    EXPECT_STATUS(kestrel_session_input_info(s, 1, &in), KESTREL_ERR_INDEX);
    EXPECT_STATUS(kestrel_session_output_info(s, 0, NULL), KESTREL_ERR_NULL_POINTER);
    REQUIRE_OK(kestrel_session_input_info(s, 0, &in));
    CHECK(in.dims[0] == 16, "at the bound after the errors: %zu", in.dims[0]);
    {
        /* ... and it runs there (a GPU session's lowering is back at the bound too). */
        float x[2 * 16 * 8], *y[2];
        size_t n[2];
        for (size_t i = 0; i < 2 * 16 * 8; i++) x[i] = (float)(i % 13) / 13.0f;
        KestrelStatus rs = run_bounded(s, x, y, n);
        CHECK(rs == KESTREL_OK && n[0] == 2 * 2 * 15 * 4, "a run at the bound after the errors: %s",
              kestrel_status_name(rs));
        for (int i = 0; i < 2; i++) free(y[i]);
    }
    printf("bounded dims%s: `sequence` 2..=16, T = 5, 12, 16, 5 match the graphs built at them; bad shapes refused\n",
           gpu ? " on the GPU" : "");
    REQUIRE_OK(kestrel_session_free(s));
    REQUIRE_OK(kestrel_model_free(model));
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s FIXTURE_DIR cpu|cpu-only-build|no-gpu|gpu AUTO_BACKEND(measured|cpu)\n", argv0);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage(argv[0]);
    const char *dir = argv[1], *mode = argv[2];
    printf("kestrel %s, %s\n", kestrel_version(), mode);
    test_statics();
    if (strcmp(mode, "cpu") == 0 || strcmp(mode, "cpu-only-build") == 0) {
        test_loading_errors(dir);
        test_image(dir);
        test_text(dir, KESTREL_BACKEND_CPU);
        test_classify(dir);
        test_bounded_dims(dir, KESTREL_BACKEND_CPU);
        if (strcmp(mode, "cpu-only-build") == 0) test_cpu_only_build(dir);
    } else if (strcmp(mode, "no-gpu") == 0) {
        test_no_gpu(dir);
    } else if (strcmp(mode, "gpu") == 0 && argc == 4 &&
               (strcmp(argv[3], "measured") == 0 || strcmp(argv[3], "cpu") == 0)) {
        test_gpu_image(dir, strcmp(argv[3], "measured") == 0 ? AUTO_MEASURED : KESTREL_BACKEND_CPU);
        test_text(dir, KESTREL_BACKEND_WGPU);
        test_bounded_dims(dir, KESTREL_BACKEND_WGPU);
    } else {
        return usage(argv[0]);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
