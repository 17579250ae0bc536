/* test_transform_gpu.c — the transform node on a session's device: GPU ids byte for byte against wisp_transform,
 * score_raw against transform + CPU score, on random descriptions and raw rows, score_raw's own bad rows
 * (wisp_session_bad_row); skips cleanly without a GPU. */
#include "batch/raw.h"
#include "score/score.h"
#include "check.h"
#include "testrand.h"
#include "testcols.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>


/* A model for a description: random weights (f32, f16 or i8) over its features. */
static wisp_model *model_for(wisp_engine *eng, const wisp_columns *c, int dtype, const char *path)
{
    uint64_t nf = wisp_columns_num_features(c);
    float *w = malloc(nf * sizeof *w);
    if (!w) return NULL;
    for (uint64_t i = 0; i < nf; i++) w[i] = (float)(rnd01() * 2 - 1) * 0.3f;
    wisp_model *m = NULL;
    if (wisp_model_write(path, w, nf, rnd01() - 0.5, dtype, "source=test_transform_gpu\n", NULL) == WISP_OK)
        wisp_model_load(eng, path, &m);
    free(w);
    return m;
}

/* An fp32 model of the weights w[0..n), written to a temporary file (removed once mapped). */
static wisp_model *model_of(wisp_engine *eng, const float *w, uint64_t n)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/wisp_xf_w_%d.wisp", (int)getpid());
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_write(path, w, n, 0, WISP_F32, NULL, NULL));
    CHECK_OK(wisp_model_load(eng, path, &m));
    unlink(path);
    return m;
}

/* A small case of one description: spec parsed, a model of n fp32 weights step * (i + 1) (n <= 64), a session
 * on dev, an empty raw batch of the description and an empty batch; xcase_close frees what was made. */
struct xcase { wisp_columns *c; wisp_model *m; wisp_session *s; wisp_raw *r; wisp_batch *b; };

static void xcase_open(struct xcase *x, wisp_engine *eng, const char *spec, int n, float step, const char *dev)
{
    memset(x, 0, sizeof *x);
    CHECK_OK(wisp_columns_parse(spec, strlen(spec), &x->c));
    float w[64];
    for (int i = 0; i < n; i++) w[i] = step * (float)(i + 1);
    x->m = model_of(eng, w, (uint64_t)n);
    CHECK_OK(wisp_session_new(eng, x->m, dev, &x->s));
    CHECK_OK(wisp_raw_new(eng, x->c, &x->r));
    CHECK_OK(wisp_batch_new(eng, &x->b));
}

static void xcase_close(struct xcase *x)
{
    wisp_batch_free(x->b);
    wisp_raw_free(x->r);
    wisp_session_free(x->s);
    wisp_model_free(x->m);
    wisp_columns_free(x->c);
}

/* The session's bad rows of its last score_raw are b's (the CPU transform's): rows, lines, messages. */
static int same_bad_rows(const wisp_session *s, const wisp_batch *b, char *why, size_t n)
{
    if (wisp_session_bad_count(s) != wisp_batch_bad_count(b)) {
        snprintf(why, n, "%zu bad rows, want %zu", wisp_session_bad_count(s), wisp_batch_bad_count(b));
        return 0;
    }
    for (size_t i = 0; i < wisp_batch_bad_count(b); i++) {
        size_t r1 = 0, r2 = 0;
        uint64_t l1 = 0, l2 = 0;
        const char *m1 = NULL, *m2 = NULL;
        if (wisp_batch_bad_row(b, i, &r1, &l1, &m1) != WISP_OK
            || wisp_session_bad_row(s, i, &r2, &l2, &m2) != WISP_OK
            || r1 != r2 || l1 != l2 || strcmp(m1, m2) != 0) {
            snprintf(why, n, "bad row %zu: row %zu line %llu '%s', want row %zu line %llu '%s'", i, r2,
                     (unsigned long long)l2, m2 ? m2 : "?", r1, (unsigned long long)l1, m1 ? m1 : "?");
            return 0;
        }
    }
    return 1;
}

static void run(wisp_engine *eng, int gpu, int quick)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/wisp_xf_%d.wisp", (int)getpid());
    char *sbuf = malloc(WISP_MAX_STRING_BYTES + 16);
    int rounds = quick ? 12 : 40, differ = 0, gpu_batches = 0, score_bad = 0, compared = 0, bad_list_differ = 0,
        gpus_bad = 0;
    size_t rows_total = 0, bad_total = 0, nan_rows = 0;
    double worst = 0;
    for (int round = 0; round < rounds; round++) {
        const int wide = round % 4 == 3, clean = round % 2 == 0;
        /* half the rounds cut score_raw's rows into chunks (the copy/compute pipeline) */
        if (round % 3 == 1) setenv("WISP_GPU_XF_CHUNK_ROWS", round % 2 ? "100" : "7", 1);
        else unsetenv("WISP_GPU_XF_CHUNK_ROWS");
        const char *text = testcols_spec(wide);
        wisp_columns *c = NULL;
        if (wisp_columns_parse(text, strlen(text), &c) != WISP_OK) {
            CHECK_MSG(0, "random description refused: %s\n%s", wisp_errmsg(), text);
            continue;
        }
        const int dtype = (int)rndn(3);
        wisp_model *m = model_for(eng, c, dtype, path);
        CHECK(m != NULL);
        wisp_raw *raw = NULL;
        wisp_batch *ref = NULL, *got = NULL;
        wisp_session *sg = NULL, *sc = NULL, *sa = NULL;
        CHECK_OK(wisp_raw_new(eng, c, &raw));
        CHECK_OK(wisp_batch_new(eng, &ref));
        CHECK_OK(wisp_batch_new(eng, &got));
        CHECK_OK(wisp_session_new(eng, m, "gpu", &sg));
        CHECK_OK(wisp_session_new(eng, m, "cpu", &sc));
        CHECK_OK(wisp_session_new(eng, m, "gpus", &sa));
        if (!raw || !ref || !got || !sg || !sc || !sa || !m) break;
        size_t n = round % 5 == 4 ? 1 + rndn(3) : 1 + rndn(quick ? 800 : 3000);
        for (size_t i = 0; i < n; i++) testcols_row(raw, clean, sbuf);
        /* 1. ids: the session's transform against wisp_transform, byte for byte (messages too) */
        CHECK_OK(wisp_transform(raw, ref));
        uint64_t d2h0 = wisp_session_stat(sg, WISP_STAT_BYTES_D2H);
        CHECK_OK(wisp_session_transform(sg, raw, got));
        if (wisp_session_stat(sg, WISP_STAT_BYTES_D2H) > d2h0) gpu_batches++;      /* ids came back from the device */
        char why[128] = "";
        if (!same_batches(ref, got, why, sizeof why) && differ++ < 3)
            fprintf(stderr, "GPU and CPU transforms differ (%s) for\n%s\n", why, text);
        /* appending: a second transform into the same batch gives the rows twice */
        if (round == 0) {
            CHECK_OK(wisp_session_transform(sg, raw, got));
            CHECK(wisp_batch_rows(got) == 2 * wisp_batch_rows(ref));
        }
        /* 2. score_raw on the device against wisp_transform + the CPU score */
        float *o1 = malloc(n * sizeof *o1), *o2 = malloc(n * sizeof *o2);
        CHECK_OK(wisp_session_score(sc, ref, o1));
        for (size_t i = 0; i < n; i++) o2[i] = -7.0f;                    /* poison: every row must be written */
        uint64_t rows0 = wisp_session_stat(sg, WISP_STAT_ROWS), bad0 = wisp_session_stat(sg, WISP_STAT_BAD_ROWS);
        CHECK_OK(wisp_session_score_raw(sg, raw, o2));
        char bwhy[256] = "";
        if (!same_bad_rows(sg, ref, bwhy, sizeof bwhy) && bad_list_differ++ < 3)
            fprintf(stderr, "score_raw's bad rows on the session's device are not the CPU transform's (%s)\n", bwhy);
        CHECK(wisp_session_stat(sg, WISP_STAT_ROWS) - rows0 == n);
        CHECK_MSG(wisp_session_stat(sg, WISP_STAT_BAD_ROWS) - bad0 == wisp_batch_bad_count(ref),
                  "bad rows %llu, want %zu", (unsigned long long)(wisp_session_stat(sg, WISP_STAT_BAD_ROWS) - bad0),
                  wisp_batch_bad_count(ref));
        for (size_t i = 0; i < n; i++) {
            compared++;
            if (isnan(o1[i]) || isnan(o2[i])) {
                nan_rows += isnan(o1[i]);
                if (isnan(o1[i]) != isnan(o2[i]) && score_bad++ < 5)
                    fprintf(stderr, "row %zu: cpu %g, score_raw %g\n", i, o1[i], o2[i]);
                continue;
            }
            double d = fabs((double)o1[i] - o2[i]);
            if (d > worst) worst = d;
            if (d > 1e-6 && score_bad++ < 5) fprintf(stderr, "row %zu: cpu %.9g, score_raw %.9g\n", i, o1[i], o2[i]);
        }
        /* 2b. on every GPU ("gpus": the rows split into one part per device; the chunked
         * rounds split even small batches): the same answers and bad rows */
        for (size_t i = 0; i < n; i++) o2[i] = -7.0f;
        CHECK_OK(wisp_session_score_raw(sa, raw, o2));
        CHECK_MSG(same_bad_rows(sa, ref, bwhy, sizeof bwhy), "gpus score_raw's bad rows: %s", bwhy);
        for (size_t i = 0; i < n; i++) {
            if (isnan(o1[i]) || isnan(o2[i])) {
                if (isnan(o1[i]) != isnan(o2[i]) && gpus_bad++ < 5)
                    fprintf(stderr, "gpus row %zu: cpu %g, score_raw %g\n", i, o1[i], o2[i]);
                continue;
            }
            if (fabs((double)o1[i] - o2[i]) > 1e-6 && gpus_bad++ < 5)
                fprintf(stderr, "gpus row %zu: cpu %.9g, score_raw %.9g\n", i, o1[i], o2[i]);
        }
        /* 3. the CPU session's score_raw is the same as transform + score */
        CHECK_OK(wisp_session_score_raw(sc, raw, o2));
        int same = 1;
        for (size_t i = 0; i < n; i++) same &= (isnan(o1[i]) && isnan(o2[i])) || o1[i] == o2[i];
        CHECK_MSG(same, "cpu score_raw differs from transform + score");
        CHECK_MSG(same_bad_rows(sc, ref, bwhy, sizeof bwhy), "cpu score_raw's bad rows: %s", bwhy);
        rows_total += wisp_batch_rows(ref);
        bad_total += wisp_batch_bad_count(ref);
        free(o1);
        free(o2);
        wisp_session_free(sg);
        wisp_session_free(sc);
        wisp_session_free(sa);
        wisp_batch_free(ref);
        wisp_batch_free(got);
        wisp_raw_free(raw);
        wisp_model_free(m);
        wisp_columns_free(c);
    }
    unlink(path);
    free(sbuf);
    CHECK_MSG(differ == 0, "%d of %d random descriptions transform differently on the session's device", differ,
              rounds);
    CHECK_MSG(gpus_bad == 0, "%d rows: score_raw on \"gpus\" differs from transform + CPU score by more than 1e-6",
              gpus_bad);
    CHECK_MSG(bad_list_differ == 0, "%d of %d rounds: score_raw's bad rows differ from the CPU transform's",
              bad_list_differ, rounds);
    CHECK_MSG(score_bad == 0,
              "%d of %d rows: score_raw differs from transform + CPU score by more than 1e-6 (worst %.3g)",
              score_bad, compared, worst);
    CHECK_MSG(bad_total > 0 && bad_total < rows_total, "%zu bad rows of %zu: the inputs should exercise both",
              bad_total, rows_total);
    printf("test_transform_gpu: %d descriptions, %zu rows (%zu bad, %zu NaN scores), %d transforms answered by the "
           "GPU, score_raw worst |diff| %.3g\n", rounds, rows_total, bad_total, nan_rows, gpu_batches, worst);
    if (gpu)
        CHECK_MSG(gpu_batches >= rounds / 2 - 1, "only %d of %d transforms came back from the GPU", gpu_batches,
                  rounds);
    else CHECK(gpu_batches == 0);
}

/* score_raw's own bad rows (wisp_session_bad_row) on dev: a row the parse refused, a row its
 * transform refuses (NaN numeric), their lines and messages; a fresh list every call; a copy
 * that outlives the raw batch. */
static void test_bad_rows(wisp_engine *eng, const char *dev)
{
    const char *spec = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":[{\"name\":\"s\",\"dtype\":\"string\"},"
                       "{\"name\":\"x\",\"dtype\":\"float32\"}],\"columns\":["
                       "{\"name\":\"s\",\"type\":\"hash_bucket\",\"key\":\"s\",\"buckets\":8,\"offset\":0},"
                       "{\"name\":\"x\",\"type\":\"numeric\",\"key\":\"x\",\"offset\":8}]}";
    struct xcase x;
    xcase_open(&x, eng, spec, 9, 0.1f, dev);
    wisp_session *s = x.s;
    wisp_raw *r = x.r;
    wisp_batch *ref = x.b;
    if (!s || !r || !ref) goto done;
    CHECK(wisp_session_bad_count(s) == 0);
    CHECK(wisp_session_bad_count(NULL) == 0);
    CHECK_FAILS(wisp_session_bad_row(s, 0, NULL, NULL, NULL), WISP_EINVAL, "out of range");
    CHECK_FAILS(wisp_session_bad_row(NULL, 0, NULL, NULL, NULL), WISP_EINVAL, "session is NULL");
    /* rows: good, parse-refused (line 12), good, NaN numeric (line 14), good */
    const double xs[5] = { 1, 2, 3, NAN, 5 };
    for (int i = 0; i < 5; i++) {
        CHECK_OK(wisp_raw_row_begin(r, 11 + (uint64_t)i));
        CHECK_OK(wisp_raw_add_string(r, 0, "abc", (size_t)(i % 4)));
        CHECK_OK(wisp_raw_add_float(r, 1, xs[i]));
        if (i == 1) CHECK_OK(wisp_raw_row_reject(r, "unknown input 'zz'"));
        CHECK_OK(wisp_raw_row_end(r));
    }
    float out[5];
    CHECK_OK(wisp_session_score_raw(s, r, out));
    CHECK_OK(wisp_transform(r, ref));
    char why[256] = "";
    CHECK_MSG(same_bad_rows(s, ref, why, sizeof why), "%s: %s", dev, why);
    CHECK(wisp_session_bad_count(s) == 2);
    size_t row = 0;
    uint64_t line = 0;
    const char *msg = NULL;
    CHECK_OK(wisp_session_bad_row(s, 0, &row, &line, &msg));
    CHECK_MSG(row == 1 && line == 12 && msg && strstr(msg, "unknown input 'zz'"), "%s: row %zu line %llu '%s'", dev,
              row, (unsigned long long)line, msg ? msg : "");
    CHECK_OK(wisp_session_bad_row(s, 1, &row, &line, &msg));
    CHECK_MSG(row == 3 && line == 14 && msg && strstr(msg, "column 'x'") && strstr(msg, "NaN"),
              "%s: row %zu line %llu '%s'", dev, row, (unsigned long long)line, msg ? msg : "");
    CHECK(isnan(out[1]) && isnan(out[3]) && !isnan(out[0]) && !isnan(out[2]) && !isnan(out[4]));
    CHECK_OK(wisp_session_bad_row(s, 1, NULL, NULL, NULL));          /* every out-parameter may be NULL */
    /* a copy: the raw batch may change */
    wisp_raw_clear(r);
    CHECK_OK(wisp_session_bad_row(s, 1, &row, &line, &msg));
    CHECK(row == 3 && line == 14 && msg && strstr(msg, "NaN"));
    /* a fresh list every call: clean rows leave none, a failed call none */
    for (int i = 0; i < 3; i++) {
        CHECK_OK(wisp_raw_row_begin(r, 0));
        CHECK_OK(wisp_raw_add_string(r, 0, "ab", 2));
        CHECK_OK(wisp_raw_add_float(r, 1, i));
        CHECK_OK(wisp_raw_row_end(r));
    }
    CHECK_OK(wisp_session_score_raw(s, r, out));
    CHECK(wisp_session_bad_count(s) == 0);
    CHECK_OK(wisp_raw_row_begin(r, 0));
    CHECK_OK(wisp_raw_add_float(r, 1, NAN));
    CHECK_OK(wisp_raw_row_end(r));
    CHECK_OK(wisp_session_score_raw(s, r, out));
    CHECK(wisp_session_bad_count(s) == 1);
    CHECK_FAILS(wisp_session_score_raw(s, r, NULL), WISP_EINVAL, "out is NULL");
    CHECK(wisp_session_bad_count(s) == 0);
done:
    xcase_close(&x);
}

/* misuse: the same answers as wisp_transform's */
static void test_misuse(wisp_engine *eng)
{
    const char *spec = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":[{\"name\":\"s\",\"dtype\":\"string\"}],"
                       "\"columns\":[{\"name\":\"s\",\"type\":\"hash_bucket\",\"key\":\"s\",\"buckets\":8,"
                       "\"offset\":0}]}";
    struct xcase x;
    xcase_open(&x, eng, spec, 8, 0.0f, "auto");
    wisp_session *s = x.s;
    wisp_raw *r = x.r;
    wisp_batch *b = x.b;
    float out[2];
    CHECK_FAILS(wisp_session_transform(NULL, r, b), WISP_EINVAL, "session is NULL");
    CHECK_FAILS(wisp_session_transform(s, NULL, b), WISP_EINVAL, "raw is NULL");
    CHECK_FAILS(wisp_session_score_raw(s, r, NULL), WISP_OK, "");   /* an empty raw batch needs no out */
    CHECK_OK(wisp_raw_row_begin(r, 0));
    CHECK_FAILS(wisp_session_score_raw(s, r, out), WISP_ESTATE, "still open");
    CHECK_FAILS(wisp_session_transform(s, r, b), WISP_ESTATE, "still open");
    CHECK_OK(wisp_raw_add_string(r, 0, "x", 1));
    CHECK_OK(wisp_raw_row_end(r));
    CHECK_FAILS(wisp_session_score_raw(s, r, NULL), WISP_EINVAL, "out is NULL");
    CHECK_OK(wisp_session_score_raw(s, r, out));
    CHECK_NEAR(out[0], 0.5, 1e-7);
    xcase_close(&x);
}

/* sparse inputs that hold no value in any row (a string input's offsets are never
 * allocated then): score_raw and transform on the session's device answer as the CPU
 * does. */
static void test_empty_sparse(wisp_engine *eng, const char *dev)
{
    const char *spec = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":["
                       "{\"name\":\"s\",\"dtype\":\"string\"},{\"name\":\"t\",\"dtype\":\"string\",\"sparse\":true},"
                       "{\"name\":\"j\",\"dtype\":\"int64\",\"sparse\":true}],\"columns\":["
                       "{\"name\":\"s\",\"type\":\"hash_bucket\",\"key\":\"s\",\"buckets\":8,\"offset\":0},"
                       "{\"name\":\"t\",\"type\":\"hash_bucket\",\"key\":\"t\",\"buckets\":8,\"offset\":8},"
                       "{\"name\":\"j\",\"type\":\"hash_bucket\",\"key\":\"j\",\"buckets\":8,\"offset\":16}]}";
    struct xcase x;
    xcase_open(&x, eng, spec, 24, 0.01f, dev);
    wisp_session *s = x.s, *sc = NULL;
    wisp_raw *r = x.r;
    wisp_batch *ref = x.b, *got = NULL;
    CHECK_OK(wisp_session_new(eng, x.m, "cpu", &sc));
    CHECK_OK(wisp_batch_new(eng, &got));
    if (!s || !sc || !r || !ref || !got) goto done;
    for (int chunked = 0; chunked < 2; chunked++) {
        if (chunked) setenv("WISP_GPU_XF_CHUNK_ROWS", "2", 1);
        else unsetenv("WISP_GPU_XF_CHUNK_ROWS");
        float o1[5], o2[5];
        wisp_raw_clear(r);
        for (int i = 0; i < 5; i++) {
            CHECK_OK(wisp_raw_row_begin(r, 0));
            CHECK_OK(wisp_raw_add_string(r, 0, "abc", (size_t)(i % 4)));
            CHECK_OK(wisp_raw_row_end(r));
        }
        CHECK_OK(wisp_session_score_raw(sc, r, o1));
        CHECK_OK(wisp_session_score_raw(s, r, o2));
        for (int i = 0; i < 5; i++) CHECK_MSG(o1[i] == o2[i], "row %d: cpu %.9g, %s %.9g", i, o1[i], dev, o2[i]);
        wisp_batch_clear(ref);
        wisp_batch_clear(got);
        CHECK_OK(wisp_transform(r, ref));
        CHECK_OK(wisp_session_transform(s, r, got));
        char why[128] = "";
        CHECK_MSG(same_batches(ref, got, why, sizeof why), "empty sparse inputs transform differently on %s (%s)", dev,
                  why);
    }
    unsetenv("WISP_GPU_XF_CHUNK_ROWS");
done:
    wisp_batch_free(got);
    wisp_session_free(sc);
    xcase_close(&x);
}

int main(void)
{
    testrand_seed("test_transform_gpu");
    const char *tg = getenv("WISP_TEST_GPU");
    const int want_gpu = tg && *tg && strcmp(tg, "0") != 0;
    const int quick = getenv("WISP_TEST_GPU_QUICK") != NULL || !want_gpu;
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(2, &eng));
    if (!eng) return CHECK_DONE("test_transform_gpu");
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    const int n = wisp_engine_gpu_count(eng);
    if (n == 0) {
        /* no GPU: skipped, not failed; the calls still answer (on the CPU), checked quickly */
        printf("test_transform_gpu: skipped the GPU comparison: %s\n", wisp_engine_gpu_status(eng));
        run(eng, 0, 1);
    } else {
        run(eng, 1, quick);
    }
    test_empty_sparse(eng, n ? "gpu" : "cpu");
    test_bad_rows(eng, "cpu");
    if (n) test_bad_rows(eng, "gpu");
    test_misuse(eng);
    wisp_engine_free(eng);
    return CHECK_DONE("test_transform_gpu");
}
