/* test_auto.c — the "auto" device (engine/score/autoplace.c): sessions answer right from their first batch while the
 * GPUs come up in the background, several threads at once, an engine freed during the bring-up, the state it
 * reports, the crossover it routes by (WISP_AUTO_MIN_NNZ) and WISP_AUTO_WAIT. Without a GPU every answer is the
 * CPU's and the state ends at WISP_AUTO_CPU; with WISP_TEST_GPU=1 it must end at WISP_AUTO_ROUTING, a batch past
 * the crossover must go to the GPU and one below it to the CPU, every answer within 1e-6 of the float64
 * reference. */
#include "testgpu.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static int want_gpu;

static void sleep_ms(int ms)
{
    struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

/* score b (d's rows) on s, compare with d's reference; the max error (1 for a failed call or a NaN
 * where a number is due). No CHECK: threads call it (the check counters are the main thread's). */
static double batch_err(wisp_session *s, wisp_batch *b, const struct data *d)
{
    float *out = malloc((d->rows ? d->rows : 1) * sizeof *out);
    if (!out || !b) { free(out); return 1; }
    for (size_t r = 0; r < d->rows; r++) out[r] = NAN;
    double e = wisp_session_score(s, b, out) != WISP_OK ? 1 : 0;
    for (size_t r = 0; r < d->rows; r++) {
        double x = isnan(out[r]) ? 1.0 : fabs(out[r] - d->ref[r]);
        if (x > e) e = x;
    }
    free(out);
    return e;
}

/* score d on s, built (make_batch: builders or wrapped) */
static double score_err(wisp_engine *eng, wisp_session *s, const struct data *d, int vm, int wrap)
{
    wisp_batch *b = make_batch(eng, d, vm, wrap);
    double e = batch_err(s, b, d);
    wisp_batch_free(b);
    return e;
}

/* wait (at most 60 s) until s leaves WISP_AUTO_STARTING, scoring small batches meanwhile */
static int settle(wisp_engine *eng, wisp_model *m, wisp_session *s, double *maxerr, int *scored_while_starting)
{
    int st = WISP_AUTO_STARTING;
    for (int i = 0; i < 6000 && (st = wisp_session_auto_state(s, NULL, NULL)) == WISP_AUTO_STARTING; i++) {
        struct spec sp = { (size_t)(1 + rnd_below(300)), (int)rnd_below(3), (int)rnd_below(2), 0, 60, 0.05, 0.05, 0.05 };
        struct data d;
        gen(&d, &sp, m);
        double e = score_err(eng, s, &d, sp.vm, (int)rnd_below(2));
        if (e > *maxerr) *maxerr = e;
        if (scored_while_starting) (*scored_while_starting)++;
        data_free(&d);
        sleep_ms(10);
    }
    return st;
}

static void test_bring_up(void)
{
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(2, &eng));
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    wisp_model *m = make_model(eng, 200000, WISP_F32, 0.125);
    wisp_session *s = NULL, *cpu = NULL;
    CHECK_OK(wisp_session_new(eng, m, "auto", &s));
    CHECK_OK(wisp_session_new(eng, m, "cpu", &cpu));
    CHECK(wisp_session_auto_state(cpu, NULL, NULL) == WISP_AUTO_FIXED);
    CHECK_FAILS(wisp_session_auto_state(NULL, NULL, NULL), WISP_EINVAL, "NULL");
    double maxerr = 0;
    int early = 0;
    int st = settle(eng, m, s, &maxerr, &early);
    CHECK_MSG(maxerr <= 1e-6, "auto while starting: max error %.3g over %d batches", maxerr, early);
    CHECK(!wisp_engine_gpu_starting(eng));
    uint64_t one = 0, pool = 0;
    st = wisp_session_auto_state(s, &one, &pool);
    if (want_gpu) {
        CHECK_MSG(st == WISP_AUTO_ROUTING, "auto on a GPU machine ended in state %d, not routing", st);
        CHECK_MSG(one >= 39 && pool >= 39, "crossovers %llu / %llu", (unsigned long long)one, (unsigned long long)pool);
        printf("test_auto: crossover %llu nonzeros from a pool task, %llu from another thread; %d batches scored while starting\n",
               (unsigned long long)one, (unsigned long long)pool, early);
        /* past the crossover (this thread is not a pool task: the pool's) the GPU, below it the CPU */
        if (pool != UINT64_MAX) {
            size_t rows = (size_t)(pool / 40 + 2);
            struct spec big = { rows, VM_MIXED, ID_UNIFORM, 40, 60, 0.0, 0.05, 0.05 };
            struct data d;
            gen(&d, &big, m);
            CHECK(d.nnz >= pool);
            double e = score_err(eng, s, &d, big.vm, 1);
            CHECK_MSG(e <= 1e-6 && !strncmp(wisp_session_last_device(s), "gpu", 3),
                      "a batch of %zu nonzeros (crossover %llu): error %.3g on %s", d.nnz, (unsigned long long)pool, e,
                      wisp_session_last_device(s));
            data_free(&d);
        }
        if (pool > 40) {
            struct spec small = { 1, VM_MIXED, ID_UNIFORM, 1, 20, 0.0, 0.05, 0.05 };
            struct data d;
            gen(&d, &small, m);
            double e = score_err(eng, s, &d, small.vm, 1);
            CHECK_MSG(e <= 1e-6 && !strcmp(wisp_session_last_device(s), "cpu"),
                      "a batch of %zu nonzeros below the crossover %llu: error %.3g on %s", d.nnz, (unsigned long long)pool,
                      e, wisp_session_last_device(s));
            data_free(&d);
        }
        CHECK(wisp_session_stat(s, WISP_STAT_FALLBACKS) == 0);
    } else {
        CHECK_MSG(st == WISP_AUTO_CPU || (wisp_engine_gpu_count(eng) > 0 && st == WISP_AUTO_ROUTING),
                  "auto ended in state %d", st);
        if (wisp_engine_gpu_count(eng) == 0) CHECK(one == UINT64_MAX && pool == UINT64_MAX);
    }
    /* every size, after the bring-up: the same answers whichever device took them */
    for (int k = 0; k < 12; k++) {
        struct spec sp = { (size_t)1 << (rnd_below(15)), (int)rnd_below(3), (int)rnd_below(2), 0, 60, 0.05, 0.05, 0.05 };
        struct data d;
        gen(&d, &sp, m);
        double e = score_err(eng, s, &d, sp.vm, (int)rnd_below(2));
        CHECK_MSG(e <= 1e-6, "auto, %zu rows: max error %.3g on %s", sp.rows, e, wisp_session_last_device(s));
        data_free(&d);
    }
    wisp_session_free(cpu);
    wisp_session_free(s);
    wisp_model_free(m);
    wisp_engine_free(eng);
}

/* freed while the bring-up may still run: the engine waits for it, nothing leaks or crashes */
static void test_free_during_bring_up(void)
{
    for (int rep = 0; rep < 3; rep++) {
        wisp_engine *eng = NULL;
        CHECK_OK(wisp_engine_new(2, &eng));
        wisp_engine_set_log_level(eng, WISP_LOG_OFF);
        wisp_model *m = make_model(eng, 5000, WISP_F32, -0.5);
        wisp_session *s = NULL;
        CHECK_OK(wisp_session_new(eng, m, "auto", &s));
        struct spec sp = { 50, VM_MIXED, ID_UNIFORM, 0, 30, 0.05, 0.05, 0.05 };
        struct data d;
        gen(&d, &sp, m);
        CHECK(score_err(eng, s, &d, sp.vm, rep & 1) <= 1e-6);
        data_free(&d);
        if (rep == 0) { wisp_session_free(s); wisp_model_free(m); wisp_engine_free(eng); }
        else if (rep == 1) { wisp_engine_free(eng); wisp_model_free(m); wisp_session_free(s); }
        else { wisp_model_free(m); wisp_session_free(s); wisp_engine_free(eng); }
        CHECK(1);
    }
}

struct targ { wisp_engine *eng; wisp_model *m; struct data d[6]; int vm[6]; double maxerr; int ok; };

static void *thread_main(void *p)
{
    struct targ *a = p;
    wisp_session *s = NULL;
    a->ok = wisp_session_new(a->eng, a->m, "auto", &s) == WISP_OK;
    /* wrapped here, not through make_batch: no CHECK in a thread (tsan) */
    for (int k = 0; a->ok && k < 6; k++) {
        const struct data *d = &a->d[k];
        wisp_batch *b = NULL;
        a->ok = wisp_batch_wrap(a->eng, d->rows, d->indptr, d->ids, a->vm[k] == VM_MIXED ? d->val_ptr : NULL,
                                a->vm[k] == VM_NONE ? NULL : d->vals, &b) == WISP_OK;
        double e = a->ok ? batch_err(s, b, d) : 1;
        if (e > a->maxerr) a->maxerr = e;
        wisp_batch_free(b);
    }
    wisp_session_free(s);
    return NULL;
}

static void test_threads(void)
{
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(4, &eng));
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    wisp_model *m = make_model(eng, 100000, WISP_F16, 0.5);
    enum { NT = 6 };
    struct targ t[NT];
    pthread_t th[NT];
    memset(t, 0, sizeof t);
    for (int i = 0; i < NT; i++) {
        t[i].eng = eng;
        t[i].m = m;
        for (int k = 0; k < 6; k++) {
            struct spec sp = { (size_t)1 << rnd_below(13), (int)rnd_below(3), (int)rnd_below(2), 0, 50, 0.05, 0.05, 0.05 };
            t[i].vm[k] = sp.vm;
            gen(&t[i].d[k], &sp, m);
        }
    }
    for (int i = 0; i < NT; i++) CHECK(pthread_create(&th[i], NULL, thread_main, &t[i]) == 0);
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < NT; i++) {
        CHECK_MSG(t[i].ok && t[i].maxerr <= 1e-6, "thread %d: ok %d, max error %.3g", i, t[i].ok, t[i].maxerr);
        for (int k = 0; k < 6; k++) data_free(&t[i].d[k]);
    }
    wisp_model_free(m);
    wisp_engine_free(eng);
}

/* WISP_AUTO_MIN_NNZ fixes the crossover; WISP_AUTO_WAIT=1 makes the session wait for the bring-up */
static void test_env(void)
{
    set_env("WISP_AUTO_MIN_NNZ", "500");
    set_env("WISP_AUTO_WAIT", "1");
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(2, &eng));
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    wisp_model *m = make_model(eng, 20000, WISP_F32, 0.0);
    wisp_session *s = NULL;
    CHECK_OK(wisp_session_new(eng, m, "auto", &s));
    uint64_t one = 0, pool = 0;
    int st = wisp_session_auto_state(s, &one, &pool);
    CHECK_MSG(st != WISP_AUTO_STARTING, "WISP_AUTO_WAIT=1: state %d right after the session", st);
    if (wisp_engine_gpu_count(eng) > 0) {
        CHECK_MSG(st == WISP_AUTO_ROUTING && one == 500 && pool == 500, "WISP_AUTO_MIN_NNZ=500: state %d, %llu / %llu", st,
                  (unsigned long long)one, (unsigned long long)pool);
        struct spec big = { 40, VM_NONE, ID_UNIFORM, 20, 30, 0.0, 0.0, 0.0 }, small = { 10, VM_NONE, ID_UNIFORM, 1, 20, 0, 0, 0 };
        struct data d;
        gen(&d, &big, m);
        CHECK(score_err(eng, s, &d, big.vm, 1) <= 1e-6 && !strncmp(wisp_session_last_device(s), "gpu", 3));
        data_free(&d);
        gen(&d, &small, m);
        CHECK(score_err(eng, s, &d, small.vm, 1) <= 1e-6 && !strcmp(wisp_session_last_device(s), "cpu"));
        data_free(&d);
    } else {
        CHECK(st == WISP_AUTO_CPU);
    }
    wisp_session_free(s);
    wisp_model_free(m);
    wisp_engine_free(eng);
    set_env("WISP_AUTO_MIN_NNZ", NULL);
    set_env("WISP_AUTO_WAIT", NULL);
}

int main(void)
{
    testrand_seed("test_auto");
    const char *tg = getenv("WISP_TEST_GPU");
    want_gpu = tg && *tg && strcmp(tg, "0") != 0;
    test_bring_up();
    test_free_during_bring_up();
    test_threads();
    test_env();
    return CHECK_DONE("test_auto");
}
