/* test_gpu_stream.c — the CUDA backend's streams and device memory: submit/wait streams of batches (on every
 * placement, and without a GPU on the CPU), a device out of memory at submit, wisp_session_score_device refused
 * without a GPU (its GPU cases: test_device_batch.c), and last the sticky error that ruins the process's CUDA context.
 * With WISP_TEST_GPU=1 the GPU cases must run on the GPU. Scoring of host batches: test_gpu.c; shared: testgpu.h. */
#include "testgpu.h"
#include "core/wisp_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- submit / wait ----------------------------------------------------------------------
 * A stream of batches of varying sizes (empty ones, bad rows, built and wrapped,
 * pinned and pageable outs) through submit/wait, compared with a CPU session's
 * score of each batch: the order, the answers, ESTATE, WISP_MAX_PENDING, more
 * submits than the device holds, and score calls in between. on_gpu: the
 * batches must run on the GPU (no fallbacks), else on the CPU. */

#define NB_ASYNC 9

/* out == ref row by row: both NaN, or within tol; returns the number of rows that differ */
static size_t count_diff(const float *out, const float *ref, size_t rows, double tol)
{
    size_t bad = 0;
    for (size_t r = 0; r < rows; r++) {
        if (isnan(ref[r]) || isnan(out[r])) bad += !(isnan(ref[r]) && isnan(out[r]));
        else bad += !(fabs((double)out[r] - ref[r]) <= tol);
    }
    return bad;
}

static void test_async(wisp_engine *eng, const char *device, int on_gpu, int quick)
{
    wisp_model *m = make_model(eng, 50000, WISP_F32, -0.4);
    const size_t sizes[NB_ASYNC] = { 0, 1, 33, 2000, quick ? 20000 : 70001, 5, 0, 30000, 300 };
    struct data d[NB_ASYNC];
    wisp_batch *b[NB_ASYNC];
    float *ref[NB_ASYNC], *out[NB_ASYNC];
    size_t rows[NB_ASYNC];
    int pinned_out[NB_ASYNC];
    wisp_session *cpu = NULL, *s = NULL;
    CHECK_OK(wisp_session_new(eng, m, "cpu", &cpu));
    CHECK_OK(wisp_session_new(eng, m, device, &s));
    const double tol = on_gpu ? TOL : 0;
    for (int i = 0; i < NB_ASYNC; i++) {
        struct spec sp = { sizes[i], i % 3, i % 2 ? ID_ZIPF : ID_UNIFORM, 0, 60, 0.05, 0.02, 0.05 };
        gen(&d[i], &sp, m);
        const int wrap = i % 4 == 1;                           /* caller memory (pageable), else pinned builders */
        b[i] = make_batch(eng, &d[i], sp.vm, wrap);
        if (!wrap && i % 3 != 0) {                            /* a bad row at the end (and one in front of it) */
            static const char bad[] = "1 5:abc\n0 7:0.5 9\n";
            CHECK_OK(wisp_batch_parse_libsvm(b[i], bad, sizeof bad - 1, 1, 0, NULL, NULL));
        }
        rows[i] = wisp_batch_rows(b[i]);
        pinned_out[i] = i % 2;                                /* answers into pinned memory: copied there directly */
        out[i] = pinned_out[i] ? wisp__host_alloc(eng, (rows[i] + 1) * sizeof(float))
                               : malloc((rows[i] + 1) * sizeof(float));
        ref[i] = malloc((rows[i] + 1) * sizeof(float));
        CHECK_OK(wisp_session_score(cpu, b[i], ref[i]));
        size_t nb = wisp_batch_bad_count(b[i]);
        if (!wrap && i % 3 != 0) CHECK(nb == 1 && isnan(ref[i][rows[i] - 2]));
    }
    const wisp_batch *done = (const wisp_batch *)1;

    /* nothing in flight; NULL arguments */
    CHECK_FAILS(wisp_session_wait(s, &done), WISP_ESTATE, "no batch is in flight");
    CHECK(done == NULL);
    CHECK_FAILS(wisp_session_wait(NULL, NULL), WISP_EINVAL, "NULL");
    CHECK_FAILS(wisp_session_submit(s, NULL, out[0]), WISP_EINVAL, "batch");
    CHECK_FAILS(wisp_session_submit(s, b[2], NULL), WISP_EINVAL, "out");
    CHECK_FAILS(wisp_session_wait(s, NULL), WISP_ESTATE, "in flight");

    /* 1. all at once (more than WISP_MAX_IN_FLIGHT), then every wait in order */
    for (int i = 0; i < NB_ASYNC; i++) {
        for (size_t r = 0; r < rows[i]; r++) out[i][r] = 2.0f;   /* poison: not a probability */
        CHECK_OK(wisp_session_submit(s, b[i], out[i]));
    }
    for (int i = 0; i < NB_ASYNC; i++) {
        done = NULL;
        CHECK_OK(wisp_session_wait(s, &done));
        CHECK_MSG(done == b[i], "wait %d returned batch %p, wanted %p", i, (const void *)done, (const void *)b[i]);
        size_t n = count_diff(out[i], ref[i], rows[i], tol);
        CHECK_MSG(n == 0, "%s, all submitted first: batch %d (%zu rows): %zu rows differ from the CPU", device, i,
                  rows[i], n);
    }
    CHECK_FAILS(wisp_session_wait(s, &done), WISP_ESTATE, "in flight");
    CHECK(wisp_session_stat(s, WISP_STAT_BATCHES) == NB_ASYNC);

    /* 2. a rolling stream with WISP_MAX_IN_FLIGHT in flight, three rounds */
    const int depth = WISP_MAX_IN_FLIGHT, total = 3 * NB_ASYNC;
    for (int i = 0; i < total + depth; i++) {
        if (i >= depth) {
            const int k = (i - depth) % NB_ASYNC;
            CHECK_OK(wisp_session_wait(s, &done));
            CHECK(done == b[k]);
            size_t n = count_diff(out[k], ref[k], rows[k], tol);
            CHECK_MSG(n == 0, "%s, rolling: batch %d (%zu rows): %zu rows differ from the CPU", device, k, rows[k], n);
        }
        if (i < total) {
            const int k = i % NB_ASYNC;
            for (size_t r = 0; r < rows[k]; r++) out[k][r] = 2.0f;
            CHECK_OK(wisp_session_submit(s, b[k], out[k]));
        }
    }
    CHECK_FAILS(wisp_session_wait(s, NULL), WISP_ESTATE, "in flight");

    /* 3. score calls between submits: the submitted ones stay owed their waits, in order */
    for (int i = 0; i < NB_ASYNC; i++)
        for (size_t r = 0; r < rows[i]; r++) out[i][r] = 2.0f;
    CHECK_OK(wisp_session_submit(s, b[4], out[4]));
    CHECK_OK(wisp_session_submit(s, b[7], out[7]));
    CHECK_OK(wisp_session_score(s, b[3], out[3]));
    CHECK(count_diff(out[3], ref[3], rows[3], tol) == 0);
    CHECK_OK(wisp_session_submit(s, b[8], out[8]));
    CHECK_OK(wisp_session_score(s, b[2], out[2]));
    CHECK(count_diff(out[2], ref[2], rows[2], tol) == 0);
    const int order[] = { 4, 7, 8 };
    for (int i = 0; i < 3; i++) {
        CHECK_OK(wisp_session_wait(s, &done));
        CHECK(done == b[order[i]]);
        CHECK_MSG(count_diff(out[order[i]], ref[order[i]], rows[order[i]], tol) == 0,
                  "%s, with score calls between: batch %d differs", device, order[i]);
    }
    CHECK_FAILS(wisp_session_wait(s, NULL), WISP_ESTATE, "in flight");

    /* 4. WISP_MAX_PENDING submitted and not waited for; one more is refused and changes nothing */
    {
        float *o1 = malloc((WISP_MAX_PENDING + 1) * sizeof *o1);
        for (int i = 0; i <= WISP_MAX_PENDING; i++) o1[i] = 2.0f;
        for (int i = 0; i < WISP_MAX_PENDING; i++) CHECK_OK(wisp_session_submit(s, b[1], o1 + i));
        CHECK_FAILS(wisp_session_submit(s, b[1], o1 + WISP_MAX_PENDING), WISP_ELIMIT, "WISP_MAX_PENDING");
        CHECK(o1[WISP_MAX_PENDING] == 2.0f);
        int ok = 1;
        for (int i = 0; i < WISP_MAX_PENDING; i++) {
            ok &= wisp_session_wait(s, &done) == WISP_OK && done == b[1];
            ok &= count_diff(o1 + i, ref[1], 1, tol) == 0;
        }
        CHECK_MSG(ok, "%s: %d one-row batches in flight", device, WISP_MAX_PENDING);
        CHECK_FAILS(wisp_session_wait(s, NULL), WISP_ESTATE, "in flight");
        free(o1);
    }

    /* statistics and placement: every batch counted once; fallbacks as score counts them */
    uint64_t nonempty = 0, all = 0;
    for (int i = 0; i < NB_ASYNC; i++) { all++; nonempty += rows[i] > 0; }
    const uint64_t want_batches = all + 3 * all + 5 + WISP_MAX_PENDING;
    CHECK_MSG(wisp_session_stat(s, WISP_STAT_BATCHES) == want_batches, "%s: batches %llu, want %llu", device,
              (unsigned long long)wisp_session_stat(s, WISP_STAT_BATCHES), (unsigned long long)want_batches);
    const uint64_t fb = wisp_session_stat(s, WISP_STAT_FALLBACKS);
    if (on_gpu) {
        CHECK_MSG(fb == 0, "%s: %llu fallbacks", device, (unsigned long long)fb);
        CHECK_MSG(!strncmp(wisp_session_last_device(s), "gpu", 3), "%s: last device %s", device,
                  wisp_session_last_device(s));
    } else if (strcmp(device, "cpu") && strcmp(device, "auto")) {
        const uint64_t want = nonempty + 3 * nonempty + 5 + WISP_MAX_PENDING;
        CHECK_MSG(fb == want, "%s without a GPU: %llu fallbacks, want %llu", device, (unsigned long long)fb,
                  (unsigned long long)want);
        CHECK(!strcmp(wisp_session_last_device(s), "cpu"));
    } else {
        CHECK(fb == 0 && !strcmp(wisp_session_last_device(s), "cpu"));
    }

    /* freeing a session with batches in flight finishes them first */
    for (size_t r = 0; r < rows[7]; r++) out[7][r] = 2.0f;
    CHECK_OK(wisp_session_submit(s, b[7], out[7]));
    wisp_session_free(s);
    CHECK(count_diff(out[7], ref[7], rows[7], tol) == 0);

    for (int i = 0; i < NB_ASYNC; i++) {
        if (pinned_out[i]) wisp__host_free(eng, out[i]);
        else free(out[i]);
        free(ref[i]);
        wisp_batch_free(b[i]);
        data_free(&d[i]);
    }
    wisp_session_free(cpu);
    wisp_model_free(m);
}

/* a device that fails at submit (injected: out of memory once) moves that batch to the CPU */
static void test_async_oom(wisp_engine *eng)
{
    wisp_model *m = make_model(eng, 100000, WISP_F32, 0.2);
    set_env("WISP_FAULT_GPU", "oom1");
    wisp_session *s = NULL, *cpu = NULL;
    CHECK_OK(wisp_session_new(eng, m, "gpu", &s));
    CHECK_OK(wisp_session_new(eng, m, "cpu", &cpu));
    struct spec sp = { 30000, VM_MIXED, ID_UNIFORM, 10, 60, 0.02, 0.01, 0.02 };
    struct data d;
    gen(&d, &sp, m);
    wisp_batch *b = make_batch(eng, &d, VM_MIXED, 0);
    float *ref = malloc(d.rows * sizeof *ref), *out[4];
    CHECK_OK(wisp_session_score(cpu, b, ref));
    for (int i = 0; i < 4; i++) {
        out[i] = malloc(d.rows * sizeof *out[i]);
        for (size_t r = 0; r < d.rows; r++) out[i][r] = 2.0f;
        CHECK_OK(wisp_session_submit(s, b, out[i]));
    }
    for (int i = 0; i < 4; i++) {
        CHECK_OK(wisp_session_wait(s, NULL));
        CHECK_MSG(count_diff(out[i], ref, d.rows, TOL) == 0, "oom1 submit: batch %d differs", i);
        free(out[i]);
    }
    CHECK_MSG(wisp_session_stat(s, WISP_STAT_FALLBACKS) == 1, "oom1 submit: %llu fallbacks",
              (unsigned long long)wisp_session_stat(s, WISP_STAT_FALLBACKS));
    CHECK(!strncmp(wisp_session_last_device(s), "gpu", 3));
    set_env("WISP_FAULT_GPU", NULL);
    free(ref);
    wisp_batch_free(b);
    data_free(&d);
    wisp_session_free(s);
    wisp_session_free(cpu);
    wisp_model_free(m);
}

/* a sticky error ruins the process's context on that device: this runs last */
static void test_sticky(wisp_engine *eng)
{
    wisp_model *m = make_model(eng, 100000, WISP_F32, 0.2);
    set_env("WISP_FAULT_GPU", "sticky");
    struct spec sp = { 3000, VM_MIXED, ID_UNIFORM, 0, 60, 0.05, 0.02, 0.02 };
    expect_fallback("injected sticky error", eng, m, &sp, "gpu");
    set_env("WISP_FAULT_GPU", NULL);
    CHECK(wisp_engine_gpu_usable(eng, 0) == 0);
    char log[512];
    CHECK(wisp_engine_last_log(eng, log, sizeof log) > 0);
    CHECK_MSG(strstr(log, "sticky") || strstr(log, "no longer usable"), "last log: %s", log);
    /* later sessions and batches keep answering, on the CPU */
    expect_fallback("after a sticky error", eng, m, &sp, "gpu");
    expect_fallback("after a sticky error", eng, m, &sp, "gpus");
    wisp_model_free(m);                      /* frees device copies on a failed device: no crash */
}

int main(void)
{
    testrand_seed("test_gpu_stream");
    const char *tg = getenv("WISP_TEST_GPU");
    const int want_gpu = tg && *tg && strcmp(tg, "0") != 0;
    const int quick = getenv("WISP_TEST_GPU_QUICK") != NULL;

    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(2, &eng));
    if (!eng) return CHECK_DONE("test_gpu_stream");
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    const int n = wisp_engine_gpu_count(eng);
    printf("test_gpu_stream: %d GPU(s): %s\n", n, wisp_engine_gpu_status(eng));

    if (n == 0) {
        /* no usable GPU: submit/wait answers on the CPU for every placement */
        CHECK_MSG(!want_gpu, "WISP_TEST_GPU is set but no GPU is usable: %s", wisp_engine_gpu_status(eng));
        test_async(eng, "cpu", 0, 1);
        test_async(eng, "gpu", 0, 1);
        test_async(eng, "auto", 0, 1);
        /* a batch in device memory needs a GPU: refused with the reason */
        wisp_model *m = make_model(eng, 4, WISP_F32, 0);
        wisp_session *s = NULL;
        CHECK_OK(wisp_session_new(eng, m, "gpu", &s));
        uint32_t rp1[2] = { 0, 0 };
        float o1;
        CHECK_FAILS(wisp_session_score_device(s, 1, rp1, 32, NULL, NULL, NULL, &o1, 0), WISP_ENODEV, "");
        CHECK(wisp_session_bad_count(s) == 0);
        wisp_session_free(s);
        wisp_model_free(m);
    } else {
        /* submit/wait without a GPU, with the GPU switched off for a second engine */
        setenv("WISP_NO_GPU", "1", 1);
        wisp_engine *off = NULL;
        CHECK_OK(wisp_engine_new(2, &off));
        if (off) {
            wisp_engine_set_log_level(off, WISP_LOG_OFF);
            test_async(off, "cpu", 0, 1);
            test_async(off, "gpu", 0, 1);
            test_async(off, "auto", 0, 1);
            wisp_engine_free(off);
        }
        unsetenv("WISP_NO_GPU");
        if (want_gpu) {
            test_async(eng, "gpu", 1, quick);
            test_async(eng, "gpu:0", 1, quick);
            test_async(eng, "gpus", 1, quick);
            test_async(eng, "cpu", 0, quick);
            /* the stream through the other paths: units on one GPU, shards, zero-copy, events on every batch, one
             * chunk */
            const char *paths[][2] = { { "WISP_GPU_PARTS", "3" }, { "WISP_GPU_SHARDS", "2" },
                                       { "WISP_GPU_ZEROCOPY", "all" }, { "WISP_GPU_TIMING", "1" },
                                       { "WISP_GPU_CHUNKS", "1" }, { "WISP_GPU_GRAPHS", "0" } };
            for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
                set_env(paths[i][0], paths[i][1]);
                test_async(eng, "gpu", 1, 1);
                set_env(paths[i][0], NULL);
            }
            test_async_oom(eng);
            if (!getenv("WISP_TEST_NO_STICKY")) test_sticky(eng);
        }
    }
    wisp_engine_free(eng);
    return CHECK_DONE("test_gpu_stream");
}
