/* test_limits.c — the documented WISP_MAX_* limits reached for real where memory allows, each refused with WISP_ELIMIT (or WISP_EINVAL) and a message naming it. */
/*
 * Complements the faked-count limit checks of test_batch.c, test_batch_parse.c and test_model.c:
 *   WISP_MAX_ROWS          a batch really filled with 2^26 rows (add_row),
 *                          then add_row, add_row_mixed and parse_libsvm refuse
 *                          the next row and leave the batch as it was
 *                          (~400 MB peak; skipped with WISP_TEST_QUICK=1)
 *   WISP_MAX_ROW_FEATURES  2^20 features are fine, 2^20 + 1 are not (builders, wrap)
 *   WISP_MAX_LINE_BYTES    a LIBLINEAR model file with a longer line
 *                          (64 MiB file; skipped with WISP_TEST_QUICK=1)
 *   WISP_MAX_FEATURES      wisp_model_write refuses a larger table before reading it
 *   WISP_MAX_GPUS          device names gpu:0 .. gpu:15 parse, gpu:16 does not
 *   engine threads         0 .. 1024
 */
#include "check.h"
#include "score/score.h"
#include "parse/parse.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static wisp_engine *eng;
static char tmpdir[256];

static const char *P(const char *name)
{
    static char buf[2][512];
    static int k;
    char *b = buf[k++ & 1];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static void test_max_rows(void)
{
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_new(eng, &b));
    int st = WISP_OK;
    for (size_t r = 0; r < WISP_MAX_ROWS && st == WISP_OK; r++) st = wisp_batch_add_row(b, NULL, NULL, 0);
    CHECK_MSG(st == WISP_OK, "filling the batch: %d (%s)", st, wisp_errmsg());
    CHECK(wisp_batch_rows(b) == WISP_MAX_ROWS);
    uint64_t ids[2] = { 1, 2 };
    float vals[2] = { 0.5f, 2.0f };
    CHECK_FAILS(wisp_batch_add_row(b, ids, NULL, 2), WISP_ELIMIT, "WISP_MAX_ROWS");
    CHECK_FAILS(wisp_batch_add_row(b, NULL, NULL, 0), WISP_ELIMIT, "WISP_MAX_ROWS");
    CHECK_FAILS(wisp_batch_add_row_mixed(b, ids, vals, 1, ids + 1, 1), WISP_ELIMIT, "WISP_MAX_ROWS");
    uint64_t line = 7;
    size_t used = 99;
    CHECK_FAILS(wisp_batch_parse_libsvm(b, "\n# note\n1 2:3\n", 14, 1, 0, &line, &used), WISP_ELIMIT,
                "line 10: the batch already holds WISP_MAX_ROWS");
    CHECK(used == 8 && line == 9);                 /* the blank and comment lines were consumed */
    CHECK_OK(wisp_batch_parse_libsvm(b, "\n\n# only comments\n", 18, 1, 0, NULL, &used));
    CHECK(used == 18);
    CHECK(wisp_batch_rows(b) == WISP_MAX_ROWS && wisp_batch_nnz(b) == 0 && wisp_batch_bad_count(b) == 0);
    /* and usable again once cleared */
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_add_row(b, ids, vals, 2));
    CHECK(wisp_batch_rows(b) == 1 && wisp_batch_nnz(b) == 2);
    wisp_batch_free(b);
}

static void test_row_features(void)
{
    size_t n = WISP_MAX_ROW_FEATURES + (size_t)1;
    uint64_t *ids = malloc(n * sizeof *ids);
    float *vals = malloc(n * sizeof *vals);
    for (size_t i = 0; i < n; i++) { ids[i] = i % 100; vals[i] = 0.25f; }
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_new(eng, &b));
    CHECK_OK(wisp_batch_add_row(b, ids, vals, WISP_MAX_ROW_FEATURES));
    CHECK_FAILS(wisp_batch_add_row(b, ids, vals, n), WISP_ELIMIT, "more than WISP_MAX_ROW_FEATURES (1048576)");
    CHECK_FAILS(wisp_batch_add_row(b, ids, NULL, n), WISP_ELIMIT, "WISP_MAX_ROW_FEATURES");
    CHECK_FAILS(wisp_batch_add_row_mixed(b, ids, vals, n - 2, ids, 2), WISP_ELIMIT, "WISP_MAX_ROW_FEATURES");
    CHECK(wisp_batch_rows(b) == 1 && wisp_batch_nnz(b) == WISP_MAX_ROW_FEATURES);
    wisp_batch_free(b);
    /* wrap: a row of exactly the limit is fine, one more is not */
    uint32_t *ids32 = calloc(n, sizeof *ids32);
    uint32_t rp_ok[2] = { 0, WISP_MAX_ROW_FEATURES }, rp_bad[3] = { 0, 1, 1 + (uint32_t)n };
    CHECK_OK(wisp_batch_wrap(eng, 1, rp_ok, ids32, NULL, NULL, &b));
    wisp_batch_free(b);
    CHECK_FAILS(wisp_batch_wrap(eng, 2, rp_bad, ids32, NULL, NULL, &b), WISP_ELIMIT, "row 1 has 1048577 features");
    CHECK(b == NULL);
    free(ids32);
    free(ids);
    free(vals);
}

static void test_liblinear_line(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s", P("long_line.txt"));
    FILE *f = fopen(path, "w");
    fputs("solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n", f);
    /* one weight line of WISP_MAX_LINE_BYTES + 1 bytes: "0.000...0001" */
    fputs("0.", f);
    for (size_t i = 2; i < WISP_MAX_LINE_BYTES; i++) fputc('0', f);
    fputs("1\n", f);
    fclose(f);
    CHECK_FAILS(wisp_import_liblinear(path, P("out.wisp"), WISP_F32), WISP_ELIMIT, "long_line.txt:7: line longer than 67108864 bytes");
    CHECK(access(P("out.wisp"), F_OK) != 0);
    unlink(path);
}

static void test_max_features(void)
{
    float w[1] = { 0.5f };    /* never read past: the count is refused first */
    CHECK_FAILS(wisp_model_write(P("big.wisp"), w, WISP_MAX_FEATURES + 1, 0, WISP_F32, NULL, NULL), WISP_ELIMIT,
                "num_features 4294967295 exceeds the limit of 4294967294");
    CHECK_FAILS(wisp_model_write(P("big.wisp"), w, UINT64_MAX, 0, WISP_I8, NULL, NULL), WISP_ELIMIT, "exceeds the limit");
    CHECK(access(P("big.wisp"), F_OK) != 0);
}

static void test_devices_threads(void)
{
    float w[4] = { 1, 2, 3, 4 };
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_write(P("small.wisp"), w, 4, 0, WISP_F32, NULL, NULL));
    CHECK_OK(wisp_model_load(eng, P("small.wisp"), &m));
    wisp_session *s = NULL;
    char name[16];
    int count = wisp_engine_gpu_count(eng);
    for (int i = 0; i < WISP_MAX_GPUS; i++) {
        snprintf(name, sizeof name, "gpu:%d", i);
        int st = wisp_session_new(eng, m, name, &s);
        /* without that many GPUs: WISP_ENODEV naming the device, or the CPU when there are none */
        CHECK_MSG(st == WISP_OK || (st == WISP_ENODEV && i >= count && strstr(wisp_errmsg(), name)), "%s -> %d (%s)",
                  name, st, wisp_errmsg());
        wisp_session_free(s);
        s = NULL;
    }
    for (int i = 1; i <= WISP_MAX_GPUS; i++) {
        snprintf(name, sizeof name, "gpus:%d", i);
        int st = wisp_session_new(eng, m, name, &s);
        /* the first N GPUs: WISP_ENODEV naming the count when there are fewer, the CPU when there are none */
        CHECK_MSG(st == WISP_OK || (st == WISP_ENODEV && i > count && strstr(wisp_errmsg(), name)), "%s -> %d (%s)",
                  name, st, wisp_errmsg());
        if (st == WISP_OK && count == 0) CHECK(!strcmp(wisp_session_device(s), name));
        wisp_session_free(s);
        s = NULL;
    }
    CHECK_FAILS(wisp_session_new(eng, m, "gpus:0", &s), WISP_EINVAL, "expected gpus:N with N from 1 to 16");
    CHECK_FAILS(wisp_session_new(eng, m, "gpus:17", &s), WISP_EINVAL, "gpus:N");
    CHECK_FAILS(wisp_session_new(eng, m, "gpus:", &s), WISP_EINVAL, "gpus:N");
    CHECK_FAILS(wisp_session_new(eng, m, "gpus:2x", &s), WISP_EINVAL, "gpus:N");
    CHECK_FAILS(wisp_session_new(eng, m, "gpu:16", &s), WISP_EINVAL, "expected gpu:N with N from 0 to 15");
    CHECK_FAILS(wisp_session_new(eng, m, "gpu:-1", &s), WISP_EINVAL, "gpu:N");
    CHECK_FAILS(wisp_session_new(eng, m, "gpu:99999999999999999999", &s), WISP_EINVAL, "gpu:N");
    CHECK_FAILS(wisp_session_new(eng, m, "gpu:0123456789012345678901234567890", &s), WISP_EINVAL, "too long");
    CHECK(s == NULL);
    wisp_model_free(m);
    unlink(P("small.wisp"));

    wisp_engine *e = NULL;
    CHECK_FAILS(wisp_engine_new(1025, &e), WISP_EINVAL, "0 (one per core) to 1024");
    CHECK_FAILS(wisp_engine_new(-1, &e), WISP_EINVAL, "to 1024");
    CHECK(e == NULL);
    CHECK_OK(wisp_engine_new(64, &e));           /* more threads than cores is allowed */
    CHECK(wisp_engine_threads(e) == 64);
    wisp_engine_free(e);
}

/* wisp_engine_run: every task once, nested calls run inline, misuse refused */
typedef struct { wisp_engine *eng; _Atomic unsigned hits[64]; _Atomic unsigned inner; } run_ctx;
static void inner_task(void *ctx, size_t i) { (void)i; atomic_fetch_add(&((run_ctx *)ctx)->inner, 1); }
static void outer_task(void *ctx, size_t i)
{
    run_ctx *x = ctx;
    atomic_fetch_add(&x->hits[i], 1);
    if (i % 16 == 0) wisp_engine_run(x->eng, 3, inner_task, x);     /* from inside a task: inline */
}

static void test_engine_run(void)
{
    wisp_engine *e4 = NULL;
    CHECK_OK(wisp_engine_new(4, &e4));
    if (!e4) return;
    static run_ctx x;
    x.eng = e4;
    for (int round = 0; round < 50; round++) {
        for (size_t i = 0; i < 64; i++) atomic_store(&x.hits[i], 0);
        atomic_store(&x.inner, 0);
        CHECK_OK(wisp_engine_run(e4, 64, outer_task, &x));
        size_t wrong = 0;
        for (size_t i = 0; i < 64; i++) wrong += atomic_load(&x.hits[i]) != 1;
        CHECK_MSG(wrong == 0 && atomic_load(&x.inner) == 12, "round %d: %zu tasks not run once, %u inner", round, wrong,
                  atomic_load(&x.inner));
    }
    CHECK_OK(wisp_engine_run(e4, 0, outer_task, &x));                  /* no tasks: nothing to do */
    CHECK_FAILS(wisp_engine_run(NULL, 1, outer_task, &x), WISP_EINVAL, "eng is NULL");
    CHECK_FAILS(wisp_engine_run(e4, 1, NULL, &x), WISP_EINVAL, "fn is NULL");
    wisp_engine_free(e4);
}

int main(void)
{
    int quick = getenv("WISP_TEST_QUICK") != NULL;
    snprintf(tmpdir, sizeof tmpdir, "%s/wisp_limits_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    CHECK_OK(wisp_engine_new(1, &eng));
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    test_row_features();
    test_max_features();
    test_devices_threads();
    if (!quick) {
        test_max_rows();
        test_liblinear_line();
    } else {
        printf("test_limits: WISP_TEST_QUICK: skipping the 2^26-row batch and the 64 MiB line\n");
    }
    wisp_engine_free(eng);
    CHECK_MSG(rmdir(tmpdir) == 0, "%s is not empty", tmpdir);
    test_engine_run();
    return CHECK_DONE("test_limits");
}
