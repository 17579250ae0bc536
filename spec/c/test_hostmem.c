/* test_hostmem.c — the public host allocator (wisp_engine_host_alloc/free/pinned, engine/core/hostmem.c): alignment, usable memory, a batch wrapped over it scoring as a built one, and every failure path with its message. */
/*
 * Without a GPU the blocks are plain memory (pinned 0); on a machine with a
 * usable GPU they must be pinned (pinned 1) and a "gpu" session scores the
 * wrapped batch exactly as the CPU does. Uses wisp.h alone.
 */
#include "check.h"
#include "wisp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static wisp_engine *eng;

static void test_alloc_free(void)
{
    int gpus = wisp_engine_gpu_count(eng);
    size_t sizes[] = {1, 63, 64, 4096, (size_t)3 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        void *p = (void *)1;
        CHECK_OK(wisp_engine_host_alloc(eng, sizes[k], &p));
        CHECK_MSG(p != NULL && ((uintptr_t)p & 63) == 0, "%zu bytes at %p: not 64-byte aligned", sizes[k], p);
        if (!p) continue;
        unsigned char *c = p;
        for (size_t i = 0; i < sizes[k]; i++) c[i] = (unsigned char)(i * 7 + k);
        size_t bad = 0;
        for (size_t i = 0; i < sizes[k]; i++) bad += c[i] != (unsigned char)(i * 7 + k);
        CHECK_MSG(bad == 0, "%zu of %zu bytes read back wrong", bad, sizes[k]);
        int pinned = wisp_engine_host_pinned(eng, p);
        CHECK_MSG(pinned == (gpus > 0), "%zu bytes: pinned %d with %d usable GPUs (%s)", sizes[k], pinned, gpus,
                  wisp_engine_gpu_status(eng));
        wisp_engine_host_free(eng, p);
    }
    /* 0 bytes: a valid block of its own, freed like any other */
    void *z1 = NULL, *z2 = NULL;
    CHECK_OK(wisp_engine_host_alloc(eng, 0, &z1));
    CHECK_OK(wisp_engine_host_alloc(eng, 0, &z2));
    CHECK(z1 != NULL && z2 != NULL && z1 != z2);
    wisp_engine_host_free(eng, z1);
    wisp_engine_host_free(eng, z2);
    /* freeing NULL, or with no engine, does nothing */
    wisp_engine_host_free(eng, NULL);
    wisp_engine_host_free(NULL, NULL);
    CHECK(wisp_engine_host_pinned(eng, NULL) == 0);
    CHECK(wisp_engine_host_pinned(NULL, NULL) == 0);
}

static void test_failures(void)
{
    void *p = (void *)1;
    CHECK_FAILS(wisp_engine_host_alloc(NULL, 64, &p), WISP_EINVAL, "engine is NULL");
    CHECK(p == NULL);
    CHECK_FAILS(wisp_engine_host_alloc(eng, 64, NULL), WISP_EINVAL, "out is NULL");
    size_t sizes[] = {SIZE_MAX, SIZE_MAX - 64, (size_t)1 << 62};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        p = (void *)1;
        CHECK_FAILS(wisp_engine_host_alloc(eng, sizes[k], &p), WISP_ENOMEM, "out of memory allocating");
        CHECK_MSG(p == NULL, "%zu bytes: *out is %p after a failure", sizes[k], p);
    }
    /* the engine still allocates after the failures */
    CHECK_OK(wisp_engine_host_alloc(eng, 128, &p));
    wisp_engine_host_free(eng, p);
}

/* A batch wrapped over host memory scores exactly as the same rows built with add_row. */
static void test_wrapped_batch(void)
{
    enum { NF = 1000, ROWS = 257, PER = 9 };
    float *w = malloc(NF * sizeof *w);
    for (int i = 0; i < NF; i++) w[i] = (float)sin(i * 0.37) * 0.5f;
    char path[256];
    snprintf(path, sizeof path, "%s/wisp_hostmem_%d.wisp", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    CHECK_OK(wisp_model_write(path, w, NF, 0.25, WISP_F32, NULL, NULL));
    free(w);
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_load(eng, path, &m));
    unlink(path);
    if (!m) return;
    uint32_t *rp = NULL, *ids = NULL;
    float *vals = NULL;
    CHECK_OK(wisp_engine_host_alloc(eng, (ROWS + 1) * sizeof *rp, (void **)&rp));
    CHECK_OK(wisp_engine_host_alloc(eng, ROWS * PER * sizeof *ids, (void **)&ids));
    CHECK_OK(wisp_engine_host_alloc(eng, ROWS * PER * sizeof *vals, (void **)&vals));
    wisp_batch *built = NULL, *wrapped = NULL;
    CHECK_OK(wisp_batch_new(eng, &built));
    if (!rp || !ids || !vals || !built) goto out;
    rp[0] = 0;
    for (int r = 0; r < ROWS; r++) {
        uint64_t rid[PER];
        for (int j = 0; j < PER; j++) {
            size_t k = (size_t)r * PER + j;
            ids[k] = (uint32_t)((r * 131 + j * 17) % NF);
            vals[k] = (float)((r + j) % 5) * 0.5f - 1.0f;
            rid[j] = ids[k];
        }
        rp[r + 1] = (uint32_t)((r + 1) * PER);
        CHECK_OK(wisp_batch_add_row(built, rid, vals + (size_t)r * PER, PER));
    }
    CHECK_OK(wisp_batch_wrap(eng, ROWS, rp, ids, NULL, vals, &wrapped));
    const char *devices[] = {"cpu", "gpu"};
    int ndev = wisp_engine_gpu_count(eng) > 0 ? 2 : 1;
    for (int d = 0; d < ndev && wrapped; d++) {
        wisp_session *s = NULL;
        CHECK_OK(wisp_session_new(eng, m, devices[d], &s));
        if (!s) continue;
        float a[ROWS], b[ROWS];
        CHECK_OK(wisp_session_score(s, built, a));
        CHECK_OK(wisp_session_score(s, wrapped, b));
        int diff = 0;
        for (int r = 0; r < ROWS; r++) diff += !(fabsf(a[r] - b[r]) <= 1e-6f);
        CHECK_MSG(diff == 0, "%s: %d of %d rows differ between the built and the wrapped batch", devices[d], diff, ROWS);
        wisp_session_free(s);
    }
out:
    wisp_batch_free(wrapped);
    wisp_batch_free(built);
    wisp_engine_host_free(eng, rp);
    wisp_engine_host_free(eng, ids);
    wisp_engine_host_free(eng, vals);
    wisp_model_free(m);
}

int main(void)
{
    CHECK_OK(wisp_engine_new(1, &eng));
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    test_alloc_free();
    test_failures();
    test_wrapped_batch();
    wisp_engine_free(eng);
    return CHECK_DONE("test_hostmem");
}
