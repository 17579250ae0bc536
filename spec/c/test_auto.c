/* test_auto.c — the CPU/GPU crossover (engine/score/autoplace.c): the choice rule (wisp_placement_summarize,
 * _acceptable, _choose) on hand-made points, and the "auto" device: sessions answer right from their first batch
 * while the GPUs come up in the background, several threads at once, an engine freed during the bring-up, the
 * state it reports, the points it measured (wisp_session_auto_points), the crossover it routes by
 * (WISP_AUTO_MIN_NNZ) and WISP_AUTO_WAIT. Without a GPU every answer is the CPU's and the state ends at
 * WISP_AUTO_CPU; with WISP_TEST_GPU=1 it must end at WISP_AUTO_ROUTING with its crossovers where the rule puts
 * them over its own points, a batch past the crossover must go to the GPU and one below it to the CPU, every
 * answer within 1e-6 of the float64 reference. */
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


/* ---- the choice rule -------------------------------------------------------------- */

static void test_summarize(void)
{
    double q[5];
    const double odd[] = { 3, 1, 2, 5, 4 };
    CHECK_OK(wisp_placement_summarize(odd, 5, q));
    CHECK(q[0] == 1 && q[1] == 2 && q[2] == 3 && q[3] == 4 && q[4] == 5);
    const double even[] = { 4, 1, 3, 2 };     /* quantiles linear between order statistics */
    CHECK_OK(wisp_placement_summarize(even, 4, q));
    CHECK(q[0] == 1 && q[1] == 1.75 && q[2] == 2.5 && q[3] == 3.25 && q[4] == 4);
    CHECK_OK(wisp_placement_summarize(even, 1, q));
    CHECK(q[0] == 4 && q[1] == 4 && q[2] == 4 && q[3] == 4 && q[4] == 4);
    double many[100];
    for (int i = 0; i < 100; i++) many[i] = (double)((i * 37) % 100);   /* 0 .. 99 shuffled: over the stack's 64 */
    CHECK_OK(wisp_placement_summarize(many, 100, q));
    CHECK(q[0] == 0 && q[2] == 49.5 && q[1] == 24.75 && q[3] == 74.25 && q[4] == 99);
    const double bad[] = { 1, NAN, 2 }, neg[] = { 1, -1 }, inf[] = { INFINITY };
    CHECK_FAILS(wisp_placement_summarize(bad, 3, q), WISP_EINVAL, "passes[1]");
    CHECK_FAILS(wisp_placement_summarize(neg, 2, q), WISP_EINVAL, "passes[1]");
    CHECK_FAILS(wisp_placement_summarize(inf, 1, q), WISP_EINVAL, "passes[0]");
    CHECK_FAILS(wisp_placement_summarize(odd, 0, q), WISP_EINVAL, "no passes");
    CHECK_FAILS(wisp_placement_summarize(NULL, 3, q), WISP_EINVAL, "NULL");
}

static void test_acceptable(void)
{
    int f = -1, ok[3] = { -1, -1, -1 };
    /* the GPU faster by median, within the two devices' spread: both acceptable */
    const double ms[] = { 1.50, 1.45 }, lo[] = { 1.40, 1.35 }, hi[] = { 1.60, 1.55 };
    CHECK(wisp_placement_acceptable(2, ms, lo, hi, &f, ok) == 2);
    CHECK(f == 1 && ok[0] == 1 && ok[1] == 1);
    /* the bands apart: only the faster */
    const double lo2[] = { 1.47, 1.43 }, hi2[] = { 1.52, 1.46 };
    CHECK(wisp_placement_acceptable(2, ms, lo2, hi2, &f, ok) == 1);
    CHECK(f == 1 && ok[0] == 0 && ok[1] == 1);
    /* no spread: only the fastest median; ties go to the first device */
    CHECK(wisp_placement_acceptable(2, ms, NULL, NULL, &f, ok) == 1 && f == 1 && ok[0] == 0);
    const double tie[] = { 2, 2, 3 };
    CHECK(wisp_placement_acceptable(3, tie, NULL, NULL, &f, ok) == 2 && f == 0 && ok[0] && ok[1] && !ok[2]);
    CHECK(wisp_placement_acceptable(3, tie, NULL, NULL, NULL, NULL) == 2);
    const double badlo[] = { 1.6, 1.35 };
    CHECK_FAILS(wisp_placement_acceptable(2, ms, badlo, hi, &f, ok), WISP_EINVAL, "device 0");
    CHECK_FAILS(wisp_placement_acceptable(0, ms, lo, hi, &f, ok), WISP_EINVAL, "no devices");
}

/* choose over n points of two devices given as {rows, ms0, lo0, hi0, ms1, lo1, hi1} (lo = -1: no spread) */
static int choose2(int n, const double (*p)[7], int *chosen, uint64_t *breaks)
{
    uint64_t rows[16];
    double ms[32], lo[32], hi[32];
    int spread = p[0][2] >= 0;
    for (int i = 0; i < n; i++) {
        rows[i] = (uint64_t)p[i][0];
        for (int d = 0; d < 2; d++) {
            ms[2 * i + d] = p[i][1 + 3 * d];
            lo[2 * i + d] = p[i][2 + 3 * d];
            hi[2 * i + d] = p[i][3 + 3 * d];
        }
    }
    return wisp_placement_choose((size_t)n, 2, rows, ms, spread ? lo : NULL, spread ? hi : NULL, chosen, breaks);
}

static void test_choose(void)
{
    int c[16];
    uint64_t b[16];
    /* medians only: cpu 0.01 + 0.09 (r - 10) / 990, gpu 0.02 + 0.01 (r - 10) / 990: equal at r = 133.75 */
    const double lin[][7] = { { 10, 0.01, -1, -1, 0.02, -1, -1 }, { 1000, 0.1, -1, -1, 0.03, -1, -1 },
                              { 100000, 10, -1, -1, 1, -1, -1 } };
    CHECK_OK(choose2(3, lin, c, b));
    CHECK(c[0] == 0 && c[1] == 1 && c[2] == 1 && b[0] == 134 && b[1] == 0);
    /* a device faster only within the noise at 100 rows makes no pair of breaks: one break, where the
     * medians cross between 178 and 1000 (178 + 822 * 0.3 / 3.3 = 252.7) */
    const double noisy[][7] = { { 10, 1.0, 0.9, 1.1, 2.0, 1.9, 2.1 }, { 100, 1.50, 1.40, 1.60, 1.45, 1.35, 1.55 },
                                { 178, 1.6, 1.5, 1.7, 1.9, 1.85, 1.95 }, { 1000, 5.0, 4.9, 5.1, 2.0, 1.9, 2.1 } };
    CHECK_OK(choose2(4, noisy, c, b));
    CHECK(c[0] == 0 && c[1] == 0 && c[2] == 0 && c[3] == 1);
    CHECK(b[0] == 0 && b[1] == 0 && b[2] == 253);
    /* the bands apart at 100: the faster there, three breaks (95.7, 111.1, 252.7) */
    const double apart[][7] = { { 10, 1.0, 0.9, 1.1, 2.0, 1.9, 2.1 }, { 100, 1.50, 1.47, 1.52, 1.45, 1.43, 1.46 },
                                { 178, 1.6, 1.5, 1.7, 1.9, 1.85, 1.95 }, { 1000, 5.0, 4.9, 5.1, 2.0, 1.9, 2.1 } };
    CHECK_OK(choose2(4, apart, c, b));
    CHECK(c[0] == 0 && c[1] == 1 && c[2] == 0 && c[3] == 1);
    CHECK(b[0] == 96 && b[1] == 111 && b[2] == 253);
    /* a crossing just above a measured size leaves that size its device: the break is kept in a+1 .. b */
    const double near[][7] = { { 100, 1.0, -1, -1, 1.1, -1, -1 }, { 101, 1.5, -1, -1, 1.1, -1, -1 } };
    CHECK_OK(choose2(2, near, c, b));
    CHECK(c[0] == 0 && c[1] == 1 && b[0] == 101);
    /* the medians tied at 100 (no crossing inside 100 .. 400): the geometric middle */
    const double tied[][7] = { { 25, 0.5, 0.45, 0.55, 1.0, 0.95, 1.05 }, { 100, 1.0, 0.9, 1.1, 1.0, 0.9, 1.1 },
                               { 400, 3.0, 2.9, 3.1, 1.0, 0.9, 1.1 } };
    CHECK_OK(choose2(3, tied, c, b));
    CHECK_MSG(c[0] == 0 && c[1] == 0 && c[2] == 1 && b[0] == 0 && b[1] == 200, "tied: %d %d %d, break %llu", c[0], c[1],
              c[2], (unsigned long long)b[1]);
    /* one point; NULL breaks */
    CHECK_OK(choose2(1, lin, c, NULL));
    CHECK(c[0] == 0);
    /* three devices: cpu, then gpu:0, then gpu:1 */
    uint64_t rows3[] = { 10, 100, 1000 };
    const double ms3[] = { 1, 3, 4, 3, 2, 2.5, 9, 5, 3 };
    CHECK_OK(wisp_placement_choose(3, 3, rows3, ms3, NULL, NULL, c, b));
    CHECK(c[0] == 0 && c[1] == 1 && c[2] == 2 && b[0] > 10 && b[0] <= 100 && b[1] > 100 && b[1] <= 1000);
    /* refused: sizes not increasing, no points, a bad band */
    uint64_t down[] = { 10, 10 };
    const double ms2[] = { 1, 2, 1, 2 };
    CHECK_FAILS(wisp_placement_choose(2, 2, down, ms2, NULL, NULL, c, b), WISP_EINVAL, "rows[1]");
    CHECK_FAILS(wisp_placement_choose(0, 2, down, ms2, NULL, NULL, c, b), WISP_EINVAL, "no points");
    const double lo2[] = { 1.5, 2, 1, 2 };
    CHECK_FAILS(wisp_placement_choose(2, 2, rows3, ms2, lo2, NULL, c, b), WISP_EINVAL, "point 0, device 0");
    /* probes as the auto device measures them (1, 2, 4 ... 16384 rows): cpu 200 ns + 1 us a row, the GPUs
     * 20 us + 0.1 us a row, +-2 %: one break, where the lines cross (22 rows), between 16 and 32 */
    uint64_t prow[15];
    double pms[30], plo[30], phi[30];
    for (int k = 0; k < 15; k++) {
        prow[k] = (uint64_t)1 << k;
        double r = (double)prow[k], cpu = 0.0002 + 0.001 * r, gpu = 0.02 + 0.0001 * r;
        pms[2 * k] = cpu; plo[2 * k] = cpu * 0.98; phi[2 * k] = cpu * 1.02;
        pms[2 * k + 1] = gpu; plo[2 * k + 1] = gpu * 0.98; phi[2 * k + 1] = gpu * 1.02;
    }
    CHECK_OK(wisp_placement_choose(15, 2, prow, pms, plo, phi, c, b));
    int switches = 0;
    for (int k = 0; k < 14; k++) switches += c[k] != c[k + 1];
    CHECK_MSG(switches == 1 && c[4] == 0 && c[5] == 1 && b[4] == 22, "probes: %d switches, break %llu", switches,
              (unsigned long long)b[4]);
}

/* The crossover in nonzeros by the rule over the points wisp_session_auto_points gave (d: 0 cpu_one, 1 cpu_pool). */
static uint64_t rule_crossover(size_t n, const uint64_t *rows, const double *cpu, const double *gpu)
{
    double ms[32], lo[32], hi[32];
    int c[16];
    uint64_t b[16];
    for (size_t k = 0; k < n; k++) {
        ms[2 * k] = cpu[3 * k]; lo[2 * k] = cpu[3 * k + 1]; hi[2 * k] = cpu[3 * k + 2];
        ms[2 * k + 1] = gpu[3 * k]; lo[2 * k + 1] = gpu[3 * k + 1]; hi[2 * k + 1] = gpu[3 * k + 2];
    }
    if (wisp_placement_choose(n, 2, rows, ms, lo, hi, c, b) != WISP_OK || c[n - 1] != 1) return UINT64_MAX;
    size_t j = n - 1;
    while (j > 0 && c[j - 1] == 1) j--;
    return (j == 0 ? rows[0] : b[j - 1]) * 39;
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
        /* the points it measured, and its crossovers where the rule puts them over those points */
        size_t n = 0;
        uint64_t rows[16];
        double c1[48], cp[48], g[48];
        CHECK_OK(wisp_session_auto_points(s, 16, &n, rows, c1, cp, g));
        CHECK_MSG(n == 15, "auto points: %zu probes", n);
        for (size_t k = 0; k < n && k < 16; k++) {
            CHECK(rows[k] == (uint64_t)1 << k);
            CHECK(c1[3 * k + 1] <= c1[3 * k] && c1[3 * k] <= c1[3 * k + 2] && c1[3 * k + 1] > 0);
            CHECK(g[3 * k + 1] <= g[3 * k] && g[3 * k] <= g[3 * k + 2] && g[3 * k + 1] > 0);
            CHECK(cp[3 * k] > 0);
        }
        if (n == 15) {
            CHECK_MSG(rule_crossover(n, rows, c1, g) == one, "one thread: the rule says %llu, auto routes from %llu",
                      (unsigned long long)rule_crossover(n, rows, c1, g), (unsigned long long)one);
            CHECK_MSG(rule_crossover(n, rows, cp, g) == pool, "the pool: the rule says %llu, auto routes from %llu",
                      (unsigned long long)rule_crossover(n, rows, cp, g), (unsigned long long)pool);
        }
        size_t n2 = 0;
        CHECK_OK(wisp_session_auto_points(cpu, 2, &n2, rows, NULL, NULL, g));   /* the model's, from any session */
        CHECK(n2 == n && rows[1] == 2);
    } else {
        CHECK_MSG(st == WISP_AUTO_CPU || (wisp_engine_gpu_count(eng) > 0 && st == WISP_AUTO_ROUTING),
                  "auto ended in state %d", st);
        if (wisp_engine_gpu_count(eng) == 0) {
            CHECK(one == UINT64_MAX && pool == UINT64_MAX);
            size_t n = 99;
            CHECK_OK(wisp_session_auto_points(s, 0, &n, NULL, NULL, NULL, NULL));   /* calibrated: nothing measured */
            CHECK(n == 0);
        }
    }
    CHECK_FAILS(wisp_session_auto_points(NULL, 0, NULL, NULL, NULL, NULL, NULL), WISP_EINVAL, "NULL");
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
    CHECK_OK(wisp_session_new(eng, m, "cpu", &s));
    /* a model no "auto" session has used is not calibrated */
    CHECK_FAILS(wisp_session_auto_points(s, 0, NULL, NULL, NULL, NULL, NULL), WISP_ESTATE, "not calibrated");
    wisp_session_free(s);
    s = NULL;
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
    /* calibrated, with the crossover fixed by WISP_AUTO_MIN_NNZ (or no GPU): nothing measured */
    size_t n = 99;
    CHECK_OK(wisp_session_auto_points(s, 0, &n, NULL, NULL, NULL, NULL));
    CHECK(n == 0);
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
    test_summarize();
    test_acceptable();
    test_choose();
    test_bring_up();
    test_free_during_bring_up();
    test_threads();
    test_env();
    return CHECK_DONE("test_auto");
}
