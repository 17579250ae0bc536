/* test_score.c — the thread pool and CPU scoring against a float64 reference, plus a timing printout. */
#include "score/score.h"
#include "check.h"

#include <float.h>
#include "testrand.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- random numbers (spec/c/testrand.h) -------------------------------------- */

static uint32_t rnd_below(uint64_t n) { return (uint32_t)(((rnd() >> 32) * n) >> 32); }
static float rnd_range(float lo, float hi) { return lo + (hi - lo) * (float)rnd01(); }
/* hot ranks scattered over the table, as hashing does */
static uint32_t zipf_id(const struct zipf *z, uint64_t nf)
{
    return (uint32_t)(((zipf_rank(z) - 1) * 2654435761ull) % nf);
}

/* ---- fp16: the test's own conversion (model.c's may not exist yet) ---------- */

static float h2f(uint16_t h)
{
    int e = (h >> 10) & 31, mnt = h & 1023;
    double v = e == 0 ? ldexp(mnt, -24) : e == 31 ? (mnt ? NAN : INFINITY) : ldexp(mnt + 1024, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}
static uint16_t f2h(float f)                      /* finite |f| < 65504, round to nearest even */
{
    uint16_t best = 0;
    double bd = INFINITY;
    /* binary search over the ordered positive codes, then fix the sign */
    double a = fabs((double)f);
    int lo = 0, hi = 0x7bff;
    while (lo < hi) { int mid = (lo + hi + 1) / 2; if (h2f((uint16_t)mid) <= a) lo = mid; else hi = mid - 1; }
    for (int c = lo; c <= lo + 1 && c <= 0x7bff; c++) {
        double d = fabs(h2f((uint16_t)c) - a);
        if (d < bd || (d == bd && (c & 1) == 0)) { bd = d; best = (uint16_t)c; }
    }
    return (uint16_t)(best | (f < 0 ? 0x8000 : 0));
}

/* ---- models and batches built directly ------------------------------------- */

struct tmodel {
    struct wisp_model m;
    void *w;
    double *deq;                 /* dequantized weights, the reference's */
};

static void tmodel_init(struct tmodel *t, uint64_t nf, int dtype, double bias)
{
    memset(t, 0, sizeof *t);
    t->deq = malloc(nf * sizeof *t->deq);
    float *f = malloc(nf * sizeof *f);
    float maxabs = 0;
    for (uint64_t i = 0; i < nf; i++) {
        f[i] = rnd_range(-0.6f, 0.6f);
        if (fabsf(f[i]) > maxabs) maxabs = fabsf(f[i]);
    }
    t->m.num_features = nf;
    t->m.bias = bias;
    t->m.dtype = dtype;
    t->m.scale = 1.0f;
    if (dtype == WISP_F32) {
        t->w = f;
        for (uint64_t i = 0; i < nf; i++) t->deq[i] = f[i];
        f = NULL;
    } else if (dtype == WISP_F16) {
        uint16_t *h = malloc(nf * sizeof *h);
        for (uint64_t i = 0; i < nf; i++) h[i] = f2h(f[i]);
        /* subnormals, signed zeros, the largest finite, infinities, a NaN */
        const uint16_t special[] = { 0x0001, 0x83ff, 0x0000, 0x8000, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x03ff };
        for (size_t i = 0; i < sizeof special / sizeof special[0] && i + 1 < nf; i++) h[i + 1] = special[i];
        for (uint64_t i = 0; i < nf; i++) t->deq[i] = h2f(h[i]);
        t->w = h;
    } else {
        int8_t *q = malloc(nf);
        float scale = maxabs / 127.0f;
        for (uint64_t i = 0; i < nf; i++) { q[i] = (int8_t)lrintf(f[i] / scale); t->deq[i] = (double)q[i] * scale; }
        t->m.scale = scale;
        t->w = q;
    }
    free(f);
    t->m.weights = t->w;
}

static void tmodel_free(struct tmodel *t) { free(t->w); free(t->deq); }

struct tbatch {
    struct wisp_batch b;
    uint32_t *indptr, *ids, *val_ptr;
    float *vals;
    struct wisp_bad_row *bad;
};

enum { IDS_UNIFORM, IDS_ZIPF };

/* rows with 0..maxlen features (some empty); edge ids sprinkled in; for
 * MIXED, a random prefix of each row is valued */
static void tbatch_init(struct tbatch *t, size_t rows, int maxlen, int mode, int dist, uint64_t nf,
                        bool edges)
{
    memset(t, 0, sizeof *t);
    struct zipf z = zipf_new((double)nf, 1.05);
    uint32_t *lens = malloc((rows ? rows : 1) * sizeof *lens);
    size_t nnz = 0;
    for (size_t r = 0; r < rows; r++) {
        lens[r] = rnd_below(8) == 0 ? 0 : rnd_below((uint64_t)maxlen + 1);
        nnz += lens[r];
    }
    t->indptr = malloc((rows + 1) * sizeof(uint32_t));
    t->ids = malloc((nnz ? nnz : 1) * sizeof(uint32_t));
    if (mode != WISP_VALUES_NONE) t->vals = malloc((nnz ? nnz : 1) * sizeof(float));
    if (mode == WISP_VALUES_MIXED) t->val_ptr = malloc((rows + 1) * sizeof(uint32_t));
    size_t k = 0, nv = 0;
    const uint32_t edge[] = { 0, (uint32_t)(nf - 1), (uint32_t)nf, WISP_ID_NONE, (uint32_t)(nf + 1) };
    t->indptr[0] = 0;
    if (t->val_ptr) t->val_ptr[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t s = k;
        for (uint32_t j = 0; j < lens[r]; j++) {
            uint32_t id = dist == IDS_ZIPF ? zipf_id(&z, nf) : rnd_below(nf);
            if (edges && rnd_below(16) == 0) id = edge[rnd_below(5)];
            if (j > 0 && rnd_below(10) == 0) id = t->ids[k - 1 - rnd_below(j)];   /* duplicate */
            t->ids[k++] = id;
        }
        if (mode == WISP_VALUES_ALL) {
            for (size_t q = s; q < k; q++) t->vals[q] = rnd_range(-2.0f, 2.0f);
        } else if (mode == WISP_VALUES_MIXED) {
            uint32_t valued = lens[r] ? rnd_below(lens[r] + 1) : 0;
            for (uint32_t q = 0; q < valued; q++) t->vals[nv++] = rnd_range(-2.0f, 2.0f);
            t->val_ptr[r + 1] = (uint32_t)nv;
        }
        t->indptr[r + 1] = (uint32_t)k;
    }
    free(lens);
    t->b.rows = rows;
    t->b.nnz = nnz;
    t->b.nvals = mode == WISP_VALUES_ALL ? nnz : nv;
    t->b.indptr = t->indptr;
    t->b.ids = t->ids;
    t->b.val_ptr = t->val_ptr;
    t->b.vals = t->vals;
    t->b.value_mode = mode;
}

static void tbatch_mark_bad(struct tbatch *t, size_t row)
{
    t->bad = realloc(t->bad, (t->b.nbad + 1) * sizeof *t->bad);
    t->bad[t->b.nbad].row = row;
    t->bad[t->b.nbad].line = row + 1;
    t->bad[t->b.nbad].msg_off = 0;
    t->b.nbad++;
    t->b.bad = t->bad;
}

static void tbatch_free(struct tbatch *t)
{
    free(t->indptr); free(t->ids); free(t->val_ptr); free(t->vals); free(t->bad);
}

/* the float64 reference: in-order double sums of dequantized weights */
static uint64_t reference(const struct tmodel *tm, const struct tbatch *tb, double *p)
{
    const struct wisp_batch *b = &tb->b;
    uint64_t oor = 0;
    for (size_t r = 0; r < b->rows; r++) {
        uint32_t s = b->indptr[r], e = b->indptr[r + 1];
        uint32_t nv = b->value_mode == WISP_VALUES_ALL ? e - s
                    : b->value_mode == WISP_VALUES_MIXED ? b->val_ptr[r + 1] - b->val_ptr[r] : 0;
        const float *v = b->value_mode == WISP_VALUES_ALL ? b->vals + s
                       : b->value_mode == WISP_VALUES_MIXED ? b->vals + b->val_ptr[r] : NULL;
        double z = 0;
        for (uint32_t k = s; k < e; k++) {
            uint32_t id = b->ids[k];
            if (id >= tm->m.num_features) { oor++; continue; }
            double x = k - s < nv ? (double)v[k - s] : 1.0;
            z += tm->deq[id] * x;
        }
        p[r] = 1.0 / (1.0 + exp(-(tm->m.bias + z)));
    }
    for (size_t i = 0; i < b->nbad; i++) p[b->bad[i].row] = NAN;
    return oor;
}

static bool close_to(float got, double want)
{
    if (isnan(want)) return isnan(got);
    return fabs((double)got - want) <= 2e-7 * want + 1e-44;
}

/* ---- pool tests ---------------------------------------------------------- */

struct count_ctx { atomic_int *hits; atomic_int calls; wisp_pool *pool; };

static void count_task(void *ctx, size_t t)
{
    struct count_ctx *c = ctx;
    atomic_fetch_add(&c->hits[t], 1);
    atomic_fetch_add(&c->calls, 1);
}

static void nested_task(void *ctx, size_t t)
{
    struct count_ctx *c = ctx;
    struct count_ctx inner = { c->hits + 8 * t, 0, NULL };
    wisp__pool_run(c->pool, 8, count_task, &inner);     /* same pool: must run inline */
    atomic_fetch_add(&c->calls, atomic_load(&inner.calls));
}

struct tid_ctx { pthread_t tids[64]; atomic_int done[64]; };

static void tid_task(void *ctx, size_t t)
{
    struct tid_ctx *c = ctx;
    c->tids[t] = pthread_self();
    usleep(300);
    atomic_fetch_add(&c->done[t], 1);
}

/* 0 when every task ran once and on at least `min_threads` threads */
static int tid_check(struct tid_ctx *c, int min_threads)
{
    int distinct = 0;
    for (int i = 0; i < 64; i++) {
        if (atomic_load(&c->done[i]) != 1) return 1;
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= pthread_equal(c->tids[i], c->tids[j]);
        distinct += !seen;
    }
    return distinct >= min_threads ? 0 : 2;
}

/* fork: the child's pool starts its workers again; the parent's goes on */
static void test_pool_fork(void)
{
#ifdef __SANITIZE_THREAD__
    return;                              /* ThreadSanitizer cannot follow threads started after fork */
#endif
    wisp_pool *p = NULL;
    CHECK_OK(wisp__pool_new(3, &p));
    if (!p) return;
    struct tid_ctx c;
    memset(&c, 0, sizeof c);
    wisp__pool_run(p, 64, tid_task, &c);
    CHECK(tid_check(&c, 2) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        struct tid_ctx cc;
        memset(&cc, 0, sizeof cc);
        wisp__pool_run(p, 64, tid_task, &cc);
        int rc = tid_check(&cc, 2);
        wisp__pool_free(p);
        _exit(rc);
    }
    CHECK(pid > 0);
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child: status %d", status);
    memset(&c, 0, sizeof c);
    wisp__pool_run(p, 64, tid_task, &c);
    CHECK(tid_check(&c, 2) == 0);
    wisp__pool_free(p);
}

static void busy_task(void *ctx, size_t t)
{
    uint64_t until = wisp__now_ns() + *(const uint64_t *)ctx;
    while (wisp__now_ns() < until) { }
}

struct conc_arg { wisp_pool *pool; int ok; };

static void *concurrent_caller(void *arg)
{
    struct conc_arg *a = arg;
    atomic_int hits[97];
    a->ok = 1;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 97; i++) atomic_init(&hits[i], 0);
        struct count_ctx c = { hits, 0, NULL };
        wisp__pool_run(a->pool, 97, count_task, &c);
        for (int i = 0; i < 97; i++) if (atomic_load(&hits[i]) != 1) a->ok = 0;
    }
    return NULL;
}

static void test_pool(void)
{
    wisp_pool *p = NULL;
    CHECK_FAILS(wisp__pool_new(100000, &p), WISP_ELIMIT, "threads");
    CHECK(p == NULL);
    CHECK_FAILS(wisp__pool_new(2, NULL), WISP_EINVAL, "NULL");
    wisp__pool_free(NULL);
    CHECK(wisp__pool_threads(NULL) == 1);

    CHECK_OK(wisp__pool_new(0, &p));
    CHECK(p && wisp__pool_threads(p) >= 1);
    wisp__pool_free(p);

    /* allocation failure: nothing leaks, a clear status */
    wisp_fault_alloc_after(2);
    p = NULL;
    CHECK_FAILS(wisp__pool_new(4, &p), WISP_ENOMEM, "threadpool.c");
    CHECK(p == NULL);
    wisp_fault_alloc_after(0);

    const int sizes[] = { 1, 2, 3, 8 };
    const size_t counts[] = { 0, 1, 2, 3, 17, 1000 };
    for (int si = 0; si < 4; si++) {
        CHECK_OK(wisp__pool_new(sizes[si], &p));
        if (!p) continue;
        CHECK(wisp__pool_threads(p) == sizes[si]);
        for (int ci = 0; ci < 6; ci++) {
            for (int rep = 0; rep < 20; rep++) {
                size_t n = counts[ci];
                atomic_int *hits = calloc(n + 1, sizeof *hits);
                struct count_ctx c = { hits, 0, NULL };
                wisp__pool_run(p, n, count_task, &c);
                int bad = 0;
                for (size_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
                CHECK_MSG(bad == 0 && atomic_load(&c.calls) == (int)n, "pool %d, %zu tasks: %d wrong", sizes[si], n, bad);
                free(hits);
            }
        }
        /* a task that runs the same pool again runs it inline */
        atomic_int hits[8 * 5] = { 0 };
        struct count_ctx c = { hits, 0, p };
        wisp__pool_run(p, 5, nested_task, &c);
        int bad = 0;
        for (int i = 0; i < 40; i++) bad += atomic_load(&hits[i]) != 1;
        CHECK_MSG(bad == 0 && atomic_load(&c.calls) == 40, "nested run on pool %d: %d wrong", sizes[si], bad);

        /* concurrent callers are serialised */
        pthread_t th[4];
        struct conc_arg ca[4];
        for (int i = 0; i < 4; i++) { ca[i].pool = p; pthread_create(&th[i], NULL, concurrent_caller, &ca[i]); }
        for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); CHECK_MSG(ca[i].ok, "concurrent caller %d on pool %d", i, sizes[si]); }
        wisp__pool_free(p);
    }

    /* overhead of a small job */
    CHECK_OK(wisp__pool_new(2, &p));
    if (p) {
        atomic_int hits[2];
        uint64_t best1 = UINT64_MAX, best2 = UINT64_MAX;
        for (int rep = 0; rep < 2000; rep++) {
            struct count_ctx c = { hits, 0, NULL };
            atomic_init(&hits[0], 0); atomic_init(&hits[1], 0);
            uint64_t t0 = wisp__now_ns();
            wisp__pool_run(p, 1, count_task, &c);
            uint64_t t1 = wisp__now_ns();
            wisp__pool_run(p, 2, count_task, &c);
            uint64_t t2 = wisp__now_ns();
            if (t1 - t0 < best1) best1 = t1 - t0;
            if (t2 - t1 < best2) best2 = t2 - t1;
        }
        /* two tasks of 20 us each: what the caller pays to get a worker going */
        uint64_t bestw = UINT64_MAX, spin_ns = 20000;
        for (int rep = 0; rep < 200; rep++) {
            uint64_t t0 = wisp__now_ns();
            wisp__pool_run(p, 2, busy_task, &spin_ns);
            uint64_t t = wisp__now_ns() - t0;
            if (t < bestw) bestw = t;
        }
        printf("pool: run of 1 task %.2f us, of 2 empty tasks on 2 threads %.2f us, of 2 tasks of 20 us %.2f us"
               " (best of 2000/2000/200)\n", best1 / 1e3, best2 / 1e3, bestw / 1e3);
        wisp__pool_free(p);
    }
}

/* ---- scoring correctness ----------------------------------------------------- */

static const char *mode_name(int mode) { return mode == WISP_VALUES_NONE ? "none" : mode == WISP_VALUES_ALL ? "all" : "mixed"; }

static void compare(const char *what, const struct tmodel *tm, const struct tbatch *tb, const float *out,
                    uint64_t oor)
{
    size_t rows = tb->b.rows;
    double *ref = malloc((rows ? rows : 1) * sizeof *ref);
    uint64_t want_oor = reference(tm, tb, ref);
    size_t bad = 0, first = 0;
    for (size_t r = 0; r < rows; r++)
        if (!close_to(out[r], ref[r])) { if (!bad) first = r; bad++; }
    CHECK_MSG(bad == 0, "%s: %zu of %zu rows differ, first row %zu: %.9g vs %.9g", what, bad, rows, first,
              bad ? out[first] : 0.0, bad ? ref[first] : 0.0);
    CHECK_MSG(oor == want_oor, "%s: out-of-range %llu, want %llu", what, (unsigned long long)oor,
              (unsigned long long)want_oor);
    free(ref);
}

static void test_modes_dtypes(void)
{
    const int dtypes[] = { WISP_F32, WISP_F16, WISP_I8 };
    /* a table that stays in cache (no prefetching) and one that does not */
    for (int ni = 0; ni < 2; ni++)
    for (int di = 0; di < 3; di++) {
        const uint64_t nf = ni ? 1500007 : 100003;
        struct tmodel tm;
        tmodel_init(&tm, nf, dtypes[di], -0.25);
        for (int mode = 0; mode < 3; mode++) {
            for (int dist = 0; dist < 2; dist++) {
                struct tbatch tb;
                tbatch_init(&tb, 1000, 60, mode, dist, nf, true);
                tbatch_mark_bad(&tb, 3);
                tbatch_mark_bad(&tb, 999);
                float *out = malloc(1000 * sizeof *out);
                char what[96];
                snprintf(what, sizeof what, "%llu features, dtype %s, values %s, ids %s", (unsigned long long)nf,
                         dtypes[di] == WISP_F32 ? "f32" : dtypes[di] == WISP_F16 ? "f16" : "i8", mode_name(mode),
                         dist ? "zipf" : "uniform");
                uint64_t oor = wisp__cpu_score_rows(&tm.m, &tb.b, 0, 1000, out);
                compare(what, &tm, &tb, out, oor);
                CHECK(isnan(out[3]) && isnan(out[999]));
                /* a sub-range writes only its rows and counts only its ids */
                float *part = malloc(1000 * sizeof *part);
                for (int i = 0; i < 1000; i++) part[i] = -1.0f;
                uint64_t o1 = wisp__cpu_score_rows(&tm.m, &tb.b, 0, 400, part);
                uint64_t o2 = wisp__cpu_score_rows(&tm.m, &tb.b, 400, 1000, part);
                CHECK_MSG(o1 + o2 == oor && memcmp(part, out, 1000 * sizeof *out) == 0, "%s: split rows", what);
                for (int i = 0; i < 1000; i++) part[i] = -1.0f;
                wisp__cpu_score_rows(&tm.m, &tb.b, 10, 20, part);
                CHECK(part[9] == -1.0f && part[20] == -1.0f && part[10] == out[10] && part[19] == out[19]);
                free(part);
                free(out);
                tbatch_free(&tb);
            }
        }
        tmodel_free(&tm);
    }
}

/* exact cases: edges, duplicates, empty rows, saturation */
static void test_exact_cases(void)
{
    const uint64_t nf = 1000;
    struct tmodel tm;
    tmodel_init(&tm, nf, WISP_F32, 0.5);
    float *w = tm.w;
    w[0] = 0.25f; w[999] = -1.5f; w[7] = 1000.0f; w[8] = -1000.0f;
    tm.deq[0] = 0.25; tm.deq[999] = -1.5; tm.deq[7] = 1000; tm.deq[8] = -1000;
    /* rows: {0}, {999}, {1000}, {NONE}, {}, {0,0,0}, {7}, {8}, {0,999,1000,NONE,0} */
    uint32_t rp[] = { 0, 1, 2, 3, 4, 4, 7, 8, 9, 14 };
    uint32_t ids[] = { 0, 999, 1000, WISP_ID_NONE, 0, 0, 0, 7, 8, 0, 999, 1000, WISP_ID_NONE, 0 };
    struct wisp_batch b = { 0 };
    b.rows = 9; b.nnz = 14; b.indptr = rp; b.ids = ids; b.value_mode = WISP_VALUES_NONE;
    float out[9];
    uint64_t oor = wisp__cpu_score_rows(&tm.m, &b, 0, 9, out);
    CHECK(oor == 4);
    double sig[] = { 0.75, -1.0, 0.5, 0.5, 0.5, 1.25, 1000.5, -999.5, 0.5 + 0.25 - 1.5 + 0.25 };
    for (int r = 0; r < 9; r++) CHECK_NEAR(out[r], 1.0 / (1.0 + exp(-sig[r])), 1e-7);
    CHECK(out[6] == 1.0f && out[7] == 0.0f);
    CHECK(!isnan(out[6]) && !isnan(out[7]));

    /* the pool path agrees, counting the same way */
    wisp_pool *p = NULL;
    CHECK_OK(wisp__pool_new(3, &p));
    struct wisp_engine eng;
    memset(&eng, 0, sizeof eng);
    eng.pool = p;
    float out2[9];
    uint64_t oor2 = 10;
    wisp__cpu_score(&eng, &tm.m, &b, out2, &oor2);
    CHECK(oor2 == 14);                                 /* added to what was there */
    CHECK(memcmp(out, out2, sizeof out) == 0);
    /* no engine, or an engine without a pool: the calling thread does it */
    uint64_t oor3 = 0;
    wisp__cpu_score(NULL, &tm.m, &b, out2, &oor3);
    CHECK(oor3 == 4 && memcmp(out, out2, sizeof out) == 0);

    /* values: ALL and MIXED exactly, including a value on an out-of-range id */
    float vals[] = { 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f };
    b.vals = vals; b.value_mode = WISP_VALUES_ALL;
    wisp__cpu_score_rows(&tm.m, &b, 0, 9, out);
    CHECK_NEAR(out[0], 1.0 / (1.0 + exp(-(0.5 + 0.25 * 2))), 1e-7);
    CHECK_NEAR(out[5], 1.0 / (1.0 + exp(-(0.5 + 0.25 * (6 + 7 + 8)))), 1e-7);
    CHECK_NEAR(out[8], 1.0 / (1.0 + exp(-(0.5 + 0.25 * 11 - 1.5 * 12 + 0.25 * 15))), 1e-7);
    uint32_t vp[] = { 0, 1, 1, 1, 1, 1, 2, 2, 2, 4 };   /* row 0: 1 valued; row 5: 1 of 3; row 8: 2 of 5 */
    b.val_ptr = vp; b.value_mode = WISP_VALUES_MIXED;
    wisp__cpu_score_rows(&tm.m, &b, 0, 9, out);
    CHECK_NEAR(out[0], 1.0 / (1.0 + exp(-(0.5 + 0.25 * 2))), 1e-7);
    CHECK_NEAR(out[1], 1.0 / (1.0 + exp(-(0.5 - 1.5))), 1e-7);
    CHECK_NEAR(out[5], 1.0 / (1.0 + exp(-(0.5 + 0.25 * 3 + 0.25 + 0.25))), 1e-7);
    CHECK_NEAR(out[8], 1.0 / (1.0 + exp(-(0.5 + 0.25 * 4 - 1.5 * 5 + 0.25))), 1e-7);

    /* zero rows; a NULL batch or output does nothing */
    b.rows = 0;
    CHECK(wisp__cpu_score_rows(&tm.m, &b, 0, 0, out) == 0);
    wisp__cpu_score(&eng, &tm.m, &b, out, &oor3);
    CHECK(wisp__cpu_score_rows(&tm.m, NULL, 0, 1, out) == 0);
    wisp__cpu_score(&eng, &tm.m, NULL, out, NULL);
    wisp__pool_free(p);
    tmodel_free(&tm);
}

/* Sums beyond float (the GPU's spec in test_gpu.c has the same rows): weights near FLT_MAX times
 * values of 10, 3e38 and 1e30 give products and sums that overflow float but not double; an int8
 * table whose scale is FLT_MAX / 127 (what the writer gives a table holding FLT_MAX; the loader
 * accepts any finite positive scale). The CPU widens each weight and value to double, multiplies
 * and sums in double, applies the int8 scale to the double sum: finite answers equal to a float64
 * reference, never NaN (inf - inf) or a saturated 0/1 by overflow. */
static void test_wide_sums(void)
{
    static const uint32_t rid[][3] = { { 0, 1, 9 }, { 0, 512, 9 }, { 0, 1, 2 }, { 0, 513, 1 }, { 0, 1, 2 }, { 0, 512, 2 },
                                       { 1, 512, 9 }, { 513, 1, 2 } };
    static const float rv[][3] = { { 10, 10, 0 }, { 10, 10, 0 }, { 10, 10, 1 }, { 10, 10, 10 }, { 3e38f, 3e38f, 1 },
                                   { 1e30f, 1e30f, -2 }, { 10, -10, 0 }, { 3e38f, 3e38f, 7 } };
    static const unsigned rn[] = { 2, 2, 3, 3, 3, 3, 2, 3 };
    enum { NR = 8 };
    for (int t = 0; t < 2; t++) {
        struct tmodel tm;
        tmodel_init(&tm, 1024, t ? WISP_I8 : WISP_F32, 0.25);
        if (t == 0) {
            float *w = tm.w;
            w[0] = 3e38f; w[1] = -3e38f; w[2] = 1.5f; w[512] = -3e38f; w[513] = 3e38f;
            for (int i = 0; i < 1024; i++) tm.deq[i] = w[i];
        } else {
            int8_t *q = tm.w;
            tm.m.scale = FLT_MAX / 127.0f;
            for (int i = 0; i < 1024; i++) q[i] = 0;
            q[0] = 127; q[1] = -127; q[2] = 1; q[512] = -127; q[513] = 127;
            for (int i = 0; i < 1024; i++) tm.deq[i] = q[i];          /* the scale goes on the sum */
        }
        tm.m.weights = tm.w;
        uint32_t rp[NR + 1], ids[NR * 3];
        float vals[NR * 3];
        double ref[NR];
        rp[0] = 0;
        size_t k = 0;
        for (int r = 0; r < NR; r++) {
            double sum = 0;
            for (unsigned j = 0; j < rn[r]; j++, k++) {
                ids[k] = rid[r][j];
                vals[k] = rv[r][j];
                sum += tm.deq[rid[r][j]] * (double)rv[r][j];
            }
            rp[r + 1] = (uint32_t)k;
            const double z = 0.25 + (t ? sum * (double)tm.m.scale : sum);
            ref[r] = z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
        }
        struct wisp_batch b = { 0 };
        b.rows = NR; b.nnz = k; b.nvals = k; b.indptr = rp; b.ids = ids; b.vals = vals;
        b.value_mode = WISP_VALUES_ALL;
        float out[NR];
        wisp__cpu_score_rows(&tm.m, &b, 0, NR, out);
        for (int r = 0; r < NR; r++)
            CHECK_MSG(isfinite(out[r]) && fabs(out[r] - ref[r]) <= 1e-7, "%s row %d: %.9g, float64 reference %.9g",
                      t ? "int8, scale FLT_MAX/127" : "fp32 near FLT_MAX", r, (double)out[r], ref[r]);
        CHECK(out[0] == (float)ref[0] && fabs(out[0] - 0.5621765) < 1e-6);   /* sigmoid(0.25): the products cancel */
        tmodel_free(&tm);
    }
}

/* fp16 weights that are subnormal, zero, huge, infinite or NaN */
static void test_f16_specials(void)
{
    struct tmodel tm;
    tmodel_init(&tm, 64, WISP_F16, 0.0);
    /* rows {1} .. {10}, {7, 8} (inf - inf), {5, 1}, {6, 40} */
    uint32_t rp[14], ids[16];
    for (int i = 0; i < 10; i++) { rp[i] = (uint32_t)i; ids[i] = (uint32_t)i + 1; }
    rp[10] = 10; ids[10] = 7; ids[11] = 8;
    rp[11] = 12; ids[12] = 5; ids[13] = 1;
    rp[12] = 14; ids[14] = 6; ids[15] = 40;
    rp[13] = 16;
    struct tbatch tb;
    memset(&tb, 0, sizeof tb);
    tb.b.rows = 13; tb.b.nnz = 16; tb.b.indptr = rp; tb.b.ids = ids; tb.b.value_mode = WISP_VALUES_NONE;
    float out[13];
    uint64_t oor = wisp__cpu_score_rows(&tm.m, &tb.b, 0, 13, out);
    compare("fp16 specials", &tm, &tb, out, oor);
    CHECK(out[6] == 1.0f && out[7] == 0.0f && isnan(out[8]) && isnan(out[10]));
    CHECK(out[2] == 0.5f && out[3] == 0.5f && out[9] > 0.5f && out[1] < 0.5f && out[4] == 1.0f && out[5] == 0.0f);
    tmodel_free(&tm);
}

/* bit-identical results for any thread count and batch size */
static void test_threads(void)
{
    const int sizes[] = { 1, 2, 3, 8 };
    wisp_pool *pools[4] = { 0 };
    for (int i = 0; i < 4; i++) CHECK_OK(wisp__pool_new(sizes[i], &pools[i]));
    const size_t batch[] = { 0, 1, 7, 1000, 100000 };
    const int dtypes[] = { WISP_F32, WISP_F16, WISP_I8 };
    const uint64_t nf = 1u << 20;
    for (int di = 0; di < 3; di++) {
        struct tmodel tm;
        tmodel_init(&tm, nf, dtypes[di], 0.1);
        for (int bi = 0; bi < 5; bi++) {
            size_t rows = batch[bi];
            int mode = (bi + di) % 3, dist = bi & 1;
            struct tbatch tb;
            tbatch_init(&tb, rows, 48, mode, dist, nf, true);
            if (rows > 5) { tbatch_mark_bad(&tb, rows / 2); tbatch_mark_bad(&tb, rows - 1); }
            float *single = malloc((rows + 1) * sizeof *single), *multi = malloc((rows + 1) * sizeof *multi);
            uint64_t oor1 = wisp__cpu_score_rows(&tm.m, &tb.b, 0, rows, single);
            char what[96];
            snprintf(what, sizeof what, "dtype %d, %zu rows, values %s, ids %s", dtypes[di], rows,
                     mode_name(mode), dist ? "zipf" : "uniform");
            compare(what, &tm, &tb, single, oor1);
            for (int i = 0; i < 4; i++) {
                struct wisp_engine eng;
                memset(&eng, 0, sizeof eng);
                eng.pool = pools[i];
                uint64_t oor = 0;
                memset(multi, 0x55, (rows + 1) * sizeof *multi);
                wisp__cpu_score(&eng, &tm.m, &tb.b, multi, &oor);
                CHECK_MSG(memcmp(single, multi, rows * sizeof *multi) == 0 && oor == oor1,
                          "%s: %d threads differ from one", what, sizes[i]);
                CHECK(((uint32_t *)multi)[rows] == 0x55555555u);   /* nothing past the end */
            }
            free(single); free(multi);
            tbatch_free(&tb);
        }
        tmodel_free(&tm);
    }
    for (int i = 0; i < 4; i++) wisp__pool_free(pools[i]);
}

/* ---- timing printout (not an assertion) ---------------------------------------- */

static size_t anon_huge_kb(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

/* scipy's csr_matvec loop (float32 data incl. 1.0 for binary features), as the peer */
static double naive_ms(const float *w, const uint32_t *rp, const uint32_t *ids, const float *data, size_t rows,
                       float *out)
{
    uint64_t t0 = wisp__now_ns();
    for (size_t r = 0; r < rows; r++) {
        float s = 0;
        for (uint32_t k = rp[r]; k < rp[r + 1]; k++) s += data[k] * w[ids[k]];
        out[r] = s;
    }
    return (wisp__now_ns() - t0) / 1e6;
}

static void bench(void)
{
    const uint64_t nf = 1ull << 26;
    const size_t rows = 200000, nvalued = 13, nbin = 26, per = nvalued + nbin, nnz = rows * per;
    const size_t bytes = nf * sizeof(float);
    float *plain = aligned_alloc(1 << 21, bytes), *huge = aligned_alloc(1 << 21, bytes);
    if (!plain || !huge) { printf("bench: no memory for two 256 MB tables, skipped\n"); free(plain); free(huge); return; }
    madvise(plain, bytes, MADV_NOHUGEPAGE);
    size_t hk0 = anon_huge_kb();
    int hm = madvise(huge, bytes, MADV_HUGEPAGE);
    for (uint64_t i = 0; i < nf; i++) plain[i] = (float)((int32_t)(rnd() >> 32)) * 0x1p-33f;
    memcpy(huge, plain, bytes);
    size_t hk = anon_huge_kb() - hk0;
    printf("bench: 2^26 fp32 table (256 MB); hugepage copy: madvise %s, %zu MB in huge pages\n",
           hm == 0 ? "ok" : "failed", hk / 1024);

    uint32_t *rp = malloc((rows + 1) * sizeof *rp), *vp = malloc((rows + 1) * sizeof *vp);
    uint32_t *ids = malloc(nnz * sizeof *ids);
    float *vals = malloc(rows * nvalued * sizeof *vals), *data = malloc(nnz * sizeof *data);
    float *out = malloc(rows * sizeof *out), *out2 = malloc(rows * sizeof *out2);
    for (size_t r = 0; r <= rows; r++) { rp[r] = (uint32_t)(r * per); vp[r] = (uint32_t)(r * nvalued); }
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < per; j++) {
            float v = j < nvalued ? rnd_range(0.0f, 3.0f) : 1.0f;
            if (j < nvalued) vals[r * nvalued + j] = v;
            data[r * per + j] = v;
        }
    wisp_pool *p1 = NULL, *p2 = NULL;
    wisp__pool_new(1, &p1);
    wisp__pool_new(2, &p2);
    struct zipf z = zipf_new((double)nf, 1.05);
    for (int dist = 0; dist < 2; dist++) {
        for (size_t k = 0; k < nnz; k++) ids[k] = dist ? zipf_id(&z, nf) : rnd_below(nf);
        struct wisp_batch b = { 0 };
        b.rows = rows; b.nnz = nnz; b.nvals = rows * nvalued;
        b.indptr = rp; b.ids = ids; b.val_ptr = vp; b.vals = vals; b.value_mode = WISP_VALUES_MIXED;
        for (int pages = 0; pages < 2; pages++) {
            float *w = pages ? huge : plain;
            struct wisp_model m = { 0 };
            m.weights = w; m.num_features = nf; m.dtype = WISP_F32; m.scale = 1; m.bias = 0.1;
            double peer = 1e30;
            for (int rep = 0; rep < 3; rep++) { double t = naive_ms(w, rp, ids, data, rows, out2); if (t < peer) peer = t; }
            for (int th = 1; th <= 2; th++) {
                struct wisp_engine eng;
                memset(&eng, 0, sizeof eng);
                eng.pool = th == 1 ? p1 : p2;
                double best = 1e30;
                for (int rep = 0; rep < 3; rep++) {
                    uint64_t t0 = wisp__now_ns(), oor = 0;
                    wisp__cpu_score(&eng, &m, &b, out, &oor);
                    double t = (wisp__now_ns() - t0) / 1e6;
                    if (t < best) best = t;
                }
                printf("bench: %-7s ids, %s pages, %d thread%s: %6.2f ms, %5.2f M rows/s, %5.2f ns/gather"
                       "  (naive CSR loop, 1 thread: %6.2f ms, %.2fx)\n",
                       dist ? "zipf" : "uniform", pages ? "huge " : "4 KiB", th, th > 1 ? "s" : " ", best,
                       rows / best / 1e3, best * 1e6 / nnz, peer, peer / best);
            }
        }
    }
    /* small batch: 10 rows through the pool, end to end */
    {
        struct wisp_batch b = { 0 };
        b.rows = 10; b.nnz = 10 * per; b.indptr = rp; b.ids = ids; b.val_ptr = vp; b.vals = vals;
        b.value_mode = WISP_VALUES_MIXED;
        struct wisp_model m = { 0 };
        m.weights = huge; m.num_features = nf; m.dtype = WISP_F32; m.scale = 1;
        struct wisp_engine eng;
        memset(&eng, 0, sizeof eng);
        eng.pool = p2;
        uint64_t best = UINT64_MAX;
        for (int rep = 0; rep < 1000; rep++) {
            uint64_t t0 = wisp__now_ns(), oor = 0;
            wisp__cpu_score(&eng, &m, &b, out, &oor);
            uint64_t t = wisp__now_ns() - t0;
            if (t < best) best = t;
        }
        printf("bench: 10 rows x 39 features through a 2-thread pool: %.2f us (best of 1000, warm)\n", best / 1e3);
    }
    wisp__pool_free(p1);
    wisp__pool_free(p2);
    free(plain); free(huge); free(rp); free(vp); free(ids); free(vals); free(data); free(out); free(out2);
}

int main(int argc, char **argv)
{
    test_pool();
    test_pool_fork();
    test_exact_cases();
    test_wide_sums();
    test_modes_dtypes();
    test_f16_specials();
    test_threads();
    if (!getenv("WISP_TEST_NO_BENCH")) bench();
    return CHECK_DONE("test_score");
}
