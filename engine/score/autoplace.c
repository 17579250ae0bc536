/* autoplace.c — the CPU/GPU crossover in one place: the choice rule that turns measured
 * points into the device for each batch size (wisp_placement_*), and the "auto" device, which
 * calibrates a crossover with that rule on each model and routes every batch by it.
 *
 * ONE OWNER. The core owns the crossover: how timed passes become a measured point (median and
 * quartiles: wisp_placement_summarize), which devices are acceptable at a point
 * (wisp_placement_acceptable) and where the breaks between devices go (wisp_placement_choose).
 * The auto device applies them to the probes it times here. Lua's wisp.calibrate
 * (lua/wisp/placement_calibrate.lua) times the caller's own sessions (the devices, batches and
 * row width the caller names) and hands its passes and points to the same three calls, as do
 * policy:check() and a pipeline's live re-check next to a break (lua/wisp/placement_live.lua);
 * wisp_session_auto_points hands the auto device's measured points to Lua
 * (placement.auto_policy), so both calibrations are read by one rule.
 * Why the core: the auto device must decide where no Lua runs (the CLI, the Python, Java and
 * C++ bindings, the service's default device), C cannot call into Lua, and a rule that every
 * binding meets is held once, in the core (STYLE.md, habit 8). Two timing loops remain because
 * they time two different callers: a background probe of the model alone, and a caller's own
 * sessions with its own batches.
 *
 * THE CHOICE RULE. At a measured size, let B be the device of the smallest median (ties: the
 * first listed). A device D is acceptable there when its band reaches B's: lo(D) <= hi(B), i.e.
 * D's median is slower than B's by no more than the two devices' measured spread,
 *     ms(D) - ms(B) <= (ms(D) - lo(D)) + (hi(B) - ms(B)).
 * Devices within each other's spread are equally good; otherwise only the faster one is (with
 * no spread, lo = hi = the median, only the fastest median is). The devices of the measured
 * sizes are, among the sequences that give every size an acceptable device, (1) the one with
 * the fewest switches, then (2) the least total relative excess over the fastest median, the
 * sum of (ms(D) - ms(B)) / ms(B) over the sizes (ties: the device listed first); so a device
 * faster only within the noise at one size makes no pair of breaks. Between two measured sizes
 * a < b choosing different devices A and B the break is where A's and B's medians, linear in
 * rows between a and b, cross; where they do not cross inside (the choice was within the
 * spread) at the geometric middle; rounded and kept in a+1 .. b, so each measured size gets
 * exactly the device chosen for it. Below the smallest size the first choice holds, above the
 * largest the last.
 *
 * THE AUTO DEVICE. Starting CUDA and putting a model's weights on a GPU takes a quarter of a
 * second or more; a caller that asked for "auto" and scores one small file must not wait for
 * that, and a batch too small to pay for the trip to the GPU must not go there.
 * 1. Bring-up. The first "auto" session of an engine whose devices are not discovered yet
 *    starts one thread (wisp__auto_bring_up): it discovers the devices (engine.c), then
 *    calibrates that session's model (below), which also uploads its weights to each GPU.
 *    Until it is done, "auto" sessions see no GPU (ngpu 0) and score on the CPU; no caller
 *    ever waits for it, except wisp_engine_free, which joins it (wisp_engine_gpu_starting
 *    lets a process that is about to exit skip that wait: the CLI does).
 * 2. Calibration (per model, once): probe batches of 39 features a row (13 valued, 26
 *    binary; uniform ids over the model's features) of 1, 2, 4 ... 16384 rows are scored on
 *    the session's GPUs and on the CPU, the devices interleaved in each of CAL_REPS passes;
 *    each probe keeps each device's median and quartiles (wisp_placement_summarize). The CPU
 *    is timed on one thread (how a caller that is itself a task of the engine's pool scores,
 *    such as the CLI's pieces); for any other caller, who scores on the pool, its time is
 *    estimated from that (see calibrate). For each of the two, the probes go through the
 *    choice rule, and the crossover is its last break from the CPU to the GPUs (in nonzeros:
 *    the break's rows times 39; the smallest probe when the GPUs win from the first; never
 *    when the rule keeps the CPU at the largest probe). wisp_session_auto_points reads the
 *    probes back. WISP_AUTO_MIN_NNZ=N fixes the crossover at N nonzeros (tests, operators;
 *    nothing is measured then); WISP_AUTO_WAIT=1 makes the first "auto" session wait for the
 *    bring-up (the GPU from the first batch).
 * 3. Routing (wisp__auto_route, per batch, a few loads): the CPU below the crossover for the
 *    calling thread's context, or while the GPUs are not up. Past it, what batches really
 *    cost on each device in this process is measured too (the calibration timed one caller
 *    alone; the CLI's sixteen parsing threads share one GPU): the GPU while it costs no more
 *    per nonzero than the CPU, else the CPU, trying the other device with one batch in 64.
 */
#include "score/score.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAL_MAX_LOG2 14          /* probes of 1 .. 16384 rows */
#define CAL_REPS 7
#define CAL_WIDTH 39
#define CAL_VALUED 13
#define POOL_WAKE_NS 4000        /* waking the pool's threads for one job (an estimate: see calibrate) */
#define EXPLORE 64               /* past the crossover, with the GPU measured slower: one batch in 64 tries it again */
#define OBSERVE_MIN_NNZ 4096     /* before the crossover is known: CPU batches this large teach the CPU's rate */
#define PROBE_NS 1000000000ull  /* a first GPU batch unanswered this long may be tried by another */

_Static_assert(CAL_MAX_LOG2 + 1 == WISP__AUTO_PROBES, "the model keeps one point a probe");

/* ---- the choice rule (wisp.h, section 5: wisp_placement_*) ------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of sorted s[0 .. n), linear between order statistics. */
static double quantile(const double *s, size_t n, double q)
{
    double h = (double)(n - 1) * q;
    size_t i = (size_t)floor(h);
    if (i >= n - 1) return s[n - 1];
    return s[i] + (h - (double)i) * (s[i + 1] - s[i]);
}

int wisp_placement_summarize(const double *passes, size_t n, double *q)
{
    if (!passes || !q || n == 0) return wisp__fail(WISP_EINVAL, "wisp_placement_summarize: %s",
                                                   !passes || !q ? "a NULL array" : "no passes");
    for (size_t i = 0; i < n; i++)
        if (!(passes[i] >= 0) || isinf(passes[i]))
            return wisp__fail(WISP_EINVAL, "wisp_placement_summarize: passes[%zu] is %g, not a time", i, passes[i]);
    double small[64], *s = n <= 64 ? small : wisp__malloc(n * sizeof *s);
    if (!s) return wisp__fail(WISP_ENOMEM, "wisp_placement_summarize: out of memory");
    memcpy(s, passes, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    q[0] = s[0];
    q[1] = quantile(s, n, 0.25);
    q[2] = quantile(s, n, 0.5);
    q[3] = quantile(s, n, 0.75);
    q[4] = s[n - 1];
    if (s != small) wisp__free(s);
    return WISP_OK;
}

/* The fastest device of one point by median (ties: the first) and each device's verdict. */
static int acceptable_at(size_t nd, const double *ms, const double *lo, const double *hi, int *fastest, int *ok)
{
    size_t b = 0;
    for (size_t k = 1; k < nd; k++) if (ms[k] < ms[b]) b = k;
    const double bhi = hi ? hi[b] : ms[b];
    int n = 0;
    for (size_t k = 0; k < nd; k++) {
        int a = (lo ? lo[k] : ms[k]) <= bhi;
        if (ok) ok[k] = a;
        n += a;
    }
    if (fastest) *fastest = (int)b;
    return n;
}

/* Check one point's times: finite, 0 <= lo <= ms <= hi. */
static int check_point(const char *fn, size_t i, size_t nd, const double *ms, const double *lo, const double *hi)
{
    for (size_t k = 0; k < nd; k++) {
        double m = ms[k], l = lo ? lo[k] : m, h = hi ? hi[k] : m;
        if (!(l >= 0 && l <= m && m <= h) || isinf(h))
            return wisp__fail(WISP_EINVAL, "%s: point %zu, device %zu: lo %g, median %g, hi %g: "
                              "0 <= lo <= median <= hi, finite, expected", fn, i, k, l, m, h);
    }
    return WISP_OK;
}

int wisp_placement_acceptable(size_t ndevices, const double *ms, const double *lo, const double *hi,
                              int *fastest, int *acceptable)
{
    if (ndevices == 0 || !ms)
        return wisp__fail(WISP_EINVAL, "wisp_placement_acceptable: %s", !ms ? "ms is NULL" : "no devices");
    int rc = check_point("wisp_placement_acceptable", 0, ndevices, ms, lo, hi);
    if (rc) return rc;
    return acceptable_at(ndevices, ms, lo, hi, fastest, acceptable);
}

int wisp_placement_choose(size_t npoints, size_t ndevices, const uint64_t *rows, const double *ms, const double *lo,
                          const double *hi, int *chosen, uint64_t *breaks)
{
    static const char fn[] = "wisp_placement_choose";
    if (npoints == 0 || ndevices == 0 || !rows || !ms || !chosen)
        return wisp__fail(WISP_EINVAL, "%s: %s", fn, npoints == 0 ? "no points" : ndevices == 0 ? "no devices"
                                                   : "rows, ms and chosen must not be NULL");
    if (ndevices > 4096 || npoints > (SIZE_MAX / sizeof(double)) / ndevices / 4)
        return wisp__fail(WISP_ELIMIT, "%s: %zu points of %zu devices is too many", fn, npoints, ndevices);
    for (size_t i = 0; i < npoints; i++) {
        if (rows[i] == 0 || (i > 0 && rows[i] <= rows[i - 1]))
            return wisp__fail(WISP_EINVAL, "%s: rows[%zu] = %llu: sizes >= 1 in increasing order expected", fn, i,
                              (unsigned long long)rows[i]);
        const size_t at = i * ndevices;
        int rc = check_point(fn, i, ndevices, ms + at, lo ? lo + at : NULL, hi ? hi + at : NULL);
        if (rc) return rc;
    }
    const size_t n = npoints, nd = ndevices, cells = n * nd;
    /* sw: switches (-1: the device is not acceptable there), ex: total relative excess,
     * back: the previous point's device on the best sequence ending here */
    char *mem = wisp__malloc(cells * (sizeof(double) + 2 * sizeof(int)) + nd * sizeof(int));
    if (!mem) return wisp__fail(WISP_ENOMEM, "%s: out of memory", fn);
    double *ex = (double *)mem;
    int *sw = (int *)(ex + cells), *back = sw + cells, *ok = back + cells;
    for (size_t i = 0; i < n; i++) {
        const double *pm = ms + i * nd;
        int b;
        acceptable_at(nd, pm, lo ? lo + i * nd : NULL, hi ? hi + i * nd : NULL, &b, ok);
        const double bt = pm[b];
        for (size_t k = 0; k < nd; k++) {
            size_t c = i * nd + k;
            sw[c] = -1;
            back[c] = -1;
            if (!ok[k]) continue;
            double cost = (pm[k] - bt) / (bt > 1e-12 ? bt : 1e-12);
            if (i == 0) { sw[c] = 0; ex[c] = cost; continue; }
            int bs = INT32_MAX, bj = -1;
            double be = HUGE_VAL;
            for (size_t j = 0; j < nd; j++) {
                size_t pc = (i - 1) * nd + j;
                if (sw[pc] < 0) continue;
                int s = sw[pc] + (j == k ? 0 : 1);
                double e = ex[pc] + cost;
                if (s < bs || (s == bs && e < be)) { bs = s; be = e; bj = (int)j; }
            }
            sw[c] = bs; ex[c] = be; back[c] = bj;
        }
    }
    int bk = -1, bs = INT32_MAX;
    double be = HUGE_VAL;
    for (size_t k = 0; k < nd; k++) {
        size_t c = (n - 1) * nd + k;
        if (sw[c] >= 0 && (sw[c] < bs || (sw[c] == bs && ex[c] < be))) { bs = sw[c]; be = ex[c]; bk = (int)k; }
    }
    for (size_t i = n; i-- > 0;) {
        chosen[i] = bk;
        bk = back[i * nd + (size_t)bk];
    }
    wisp__free(mem);
    for (size_t i = 0; breaks && i + 1 < n; i++) {
        int cur = chosen[i], nxt = chosen[i + 1];
        breaks[i] = 0;
        if (cur == nxt) continue;
        const double a = (double)rows[i], b = (double)rows[i + 1];
        const double d0 = ms[i * nd + (size_t)cur] - ms[i * nd + (size_t)nxt];
        const double d1 = ms[(i + 1) * nd + (size_t)cur] - ms[(i + 1) * nd + (size_t)nxt];
        double x = d0 < 0 && d1 > 0 ? a + (b - a) * d0 / (d0 - d1) : sqrt(a * b);
        double at = floor(x + 0.5);
        if (at < a + 1) at = a + 1;
        if (at > b) at = b;
        breaks[i] = (uint64_t)at;
    }
    return WISP_OK;
}

/* ---- the auto device ---------------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    return *end ? dflt : (uint64_t)n;
}

/* The rows from which the GPUs take a batch, by the choice rule over the probes' points for one
 * CPU context (d: 0 one thread, 1 the pool): the last break from the CPU to the GPUs, the
 * smallest probe when the GPUs are chosen from the first, UINT64_MAX when the CPU keeps the
 * largest probe. */
static uint64_t crossover_rows(const wisp_model *m, int nprobe, int d)
{
    double ms[2 * WISP__AUTO_PROBES], lo[2 * WISP__AUTO_PROBES], hi[2 * WISP__AUTO_PROBES];
    int chosen[WISP__AUTO_PROBES];
    uint64_t brk[WISP__AUTO_PROBES];
    for (int k = 0; k < nprobe; k++)
        for (int j = 0; j < 2; j++) {
            const double *t = m->auto_cal_ns[k][j == 0 ? d : 2];
            ms[2 * k + j] = t[0]; lo[2 * k + j] = t[1]; hi[2 * k + j] = t[2];
        }
    if (wisp_placement_choose((size_t)nprobe, 2, m->auto_cal_rows, ms, lo, hi, chosen, brk) != WISP_OK)
        return UINT64_MAX;
    if (chosen[nprobe - 1] != 1) return UINT64_MAX;
    int j = nprobe - 1;
    while (j > 0 && chosen[j - 1] == 1) j--;
    return j == 0 ? m->auto_cal_rows[0] : brk[j - 1];
}

/* Calibrate m on the engine's GPUs (the devices are discovered): fills m's points and crossovers. */
static void calibrate(wisp_engine *eng, wisp_model *m)
{
    const uint64_t forced = env_u64("WISP_AUTO_MIN_NNZ", 0);
    if (forced) {
        atomic_store(&m->auto_nnz_one, forced);
        atomic_store(&m->auto_nnz_pool, forced);
        atomic_store_explicit(&m->auto_cal, 2, memory_order_release);
        return;
    }
    const size_t max_rows = (size_t)1 << CAL_MAX_LOG2;
    const int nprobe = CAL_MAX_LOG2 + 1;
    uint32_t *indptr = malloc((max_rows + 1) * sizeof *indptr), *val_ptr = malloc((max_rows + 1) * sizeof *val_ptr);
    uint32_t *ids = malloc(max_rows * CAL_WIDTH * sizeof *ids);
    float *vals = malloc(max_rows * CAL_VALUED * sizeof *vals), *out = malloc(max_rows * sizeof *out);
    wisp_session *gs = NULL;
    int ok = indptr && val_ptr && ids && vals && out && m->num_features > 0
          && wisp_session_new(eng, m, "gpus", &gs) == WISP_OK;
    if (ok) {
        uint64_t x = 0x9E3779B97F4A7C15ull ^ m->num_features;
        for (size_t r = 0; r <= max_rows; r++) { indptr[r] = (uint32_t)(r * CAL_WIDTH); val_ptr[r] = (uint32_t)(r * CAL_VALUED); }
        for (size_t i = 0; i < max_rows * CAL_WIDTH; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            ids[i] = (uint32_t)(x % m->num_features);
        }
        for (size_t i = 0; i < max_rows * CAL_VALUED; i++) vals[i] = (float)((i * 2654435761u) % 1000) / 250.0f;
    }
    const uint64_t threads = (uint64_t)wisp__pool_threads(eng->pool);
    for (int k = 0; ok && k < nprobe; k++) {
        const size_t rows = (size_t)1 << k;
        wisp_batch *b = NULL;
        if (wisp_batch_wrap(eng, rows, indptr, ids, val_ptr, vals, &b) != WISP_OK) { ok = 0; break; }
        /* the pool's time, estimated: the one-thread time split over the tasks the pool
         * would cut this batch into (score_cpu.c: about one per 4096 nonzeros), at most its
         * threads, plus waking them (POOL_WAKE_NS). Timing the pool here would time whatever
         * else the caller's process runs on it meanwhile (the CLI parses on it). */
        uint64_t tasks = ((uint64_t)rows * (CAL_WIDTH + 4) + 4095) / 4096;
        if (tasks > rows) tasks = rows;
        if (tasks > threads) tasks = threads;
        double t[3][CAL_REPS];            /* ns a pass: the CPU on one thread, the pool (estimated), the GPUs */
        uint64_t oor = 0;
        wisp__cpu_score(NULL, m, b, out, &oor);                        /* warm: caches, pages */
        for (int w = 0; w < 2 && ok; w++) ok = wisp_session_score(gs, b, out) == WISP_OK;
        for (int rep = 0; rep < CAL_REPS && ok; rep++) {
            uint64_t t0 = wisp__now_ns();
            wisp__cpu_score(NULL, m, b, out, &oor);
            t[0][rep] = (double)(wisp__now_ns() - t0);
            t[1][rep] = tasks <= 1 ? t[0][rep] : t[0][rep] / (double)tasks + POOL_WAKE_NS;
            t0 = wisp__now_ns();
            ok = wisp_session_score(gs, b, out) == WISP_OK;
            t[2][rep] = (double)(wisp__now_ns() - t0);
        }
        if (ok && wisp_session_stat(gs, WISP_STAT_FALLBACKS) != 0) ok = 0;   /* the GPU did not score them */
        wisp_batch_free(b);
        if (!ok) break;
        m->auto_cal_rows[k] = rows;
        for (int d = 0; d < 3 && ok; d++) {
            double q[5];
            ok = wisp_placement_summarize(t[d], CAL_REPS, q) == WISP_OK;
            m->auto_cal_ns[k][d][0] = q[2];
            m->auto_cal_ns[k][d][1] = q[1];
            m->auto_cal_ns[k][d][2] = q[3];
        }
    }
    uint64_t none = UINT64_MAX;
    if (ok) {
        uint64_t r1 = crossover_rows(m, nprobe, 0), rp = crossover_rows(m, nprobe, 1);
        uint64_t n1 = r1 == none ? none : r1 * CAL_WIDTH, np = rp == none ? none : rp * CAL_WIDTH;
        m->auto_cal_n = nprobe;
        atomic_store(&m->auto_nnz_one, n1);
        atomic_store(&m->auto_nnz_pool, np);
        char one[32], pool[32];
        if (n1 == none) snprintf(one, sizeof one, "never"); else snprintf(one, sizeof one, "%llu", (unsigned long long)n1);
        if (np == none) snprintf(pool, sizeof pool, "never"); else snprintf(pool, sizeof pool, "%llu", (unsigned long long)np);
        const double (*c)[3][3] = (const double (*)[3][3])m->auto_cal_ns;
        wisp__log(eng, WISP_LOG_INFO, "auto: %s calibrated: batches of at least %s features go to the GPU from one "
                 "thread, %s from the pool (8 rows: cpu %.1f us, gpu %.1f us; 16384 rows: cpu %.0f us (pool %.0f), gpu %.0f us)",
                 m->path ? m->path : "the model", one, pool, c[3][0][0] / 1e3, c[3][2][0] / 1e3,
                 c[nprobe - 1][0][0] / 1e3, c[nprobe - 1][1][0] / 1e3, c[nprobe - 1][2][0] / 1e3);
    } else {
        /* no GPU answered the probes: auto keeps the CPU */
        atomic_store(&m->auto_nnz_one, none);
        atomic_store(&m->auto_nnz_pool, none);
        if (wisp_engine_gpu_count(eng) > 0)
            wisp__log(eng, WISP_LOG_INFO, "auto: the GPU did not score the calibration batches (%s); auto scores on the CPU",
                     wisp_errmsg());
    }
    atomic_store_explicit(&m->auto_cal, 2, memory_order_release);
    wisp_session_free(gs);
    free(indptr); free(val_ptr); free(ids); free(vals); free(out);
}

/* The model's crossovers: calibrated once (by whichever thread gets there first; the others
 * keep the CPU until it is done). */
static void ensure_calibrated(wisp_engine *eng, wisp_model *m)
{
    int expect = 0;
    if (atomic_load_explicit(&m->auto_cal, memory_order_acquire) != 0) return;
    if (!atomic_compare_exchange_strong(&m->auto_cal, &expect, 1)) return;
    if (wisp_engine_gpu_count(eng) == 0) {
        atomic_store(&m->auto_nnz_one, UINT64_MAX);
        atomic_store(&m->auto_nnz_pool, UINT64_MAX);
        atomic_store_explicit(&m->auto_cal, 2, memory_order_release);
        return;
    }
    calibrate(eng, m);
}

/* ---- the bring-up thread ---------------------------------------------------------- */

struct bring_arg { wisp_engine *eng; wisp_model *m; uint64_t t0; };

static void *bring_up_main(void *p)
{
    struct bring_arg *a = p;
    wisp_engine *eng = a->eng;
    wisp__engine_discover(eng);
    if (a->m) ensure_calibrated(eng, a->m);
    if (eng->gpu)
        wisp__log(eng, WISP_LOG_INFO, "auto: %s up after %.1f ms in the background", eng->gpu_status,
                 (double)(wisp__now_ns() - a->t0) / 1e6);
    atomic_store_explicit(&eng->bring, 2, memory_order_release);
    wisp_model *m = a->m;
    wisp__free(a);
    wisp_model_free(m);                  /* may drop the engine's last reference: wisp_engine_free detaches this thread */
    wisp_engine_free(eng);
    return NULL;
}

void wisp__auto_bring_up(wisp_engine *eng, wisp_model *m)
{
    if (atomic_load_explicit(&eng->gpu_state, memory_order_acquire)) {
        if (eng->gpu && m) ensure_calibrated(eng, m);   /* devices known: only this model's crossover */
        return;
    }
    const char *w = getenv("WISP_AUTO_WAIT");
    int wait = w && *w && strcmp(w, "0") != 0;
    int expect = 0;
    if (!wait && atomic_compare_exchange_strong(&eng->bring, &expect, 1)) {
        struct bring_arg *a = wisp__calloc(1, sizeof *a);
        if (a) {
            a->eng = eng;
            a->m = m;
            a->t0 = wisp__now_ns();
            wisp__engine_retain(eng);
            if (m) wisp__model_retain(m);
            pthread_attr_t attr;
            int started = pthread_attr_init(&attr) == 0;
            if (started) {
                pthread_attr_setstacksize(&attr, 1u << 20);
                started = pthread_create(&eng->bring_thread, &attr, bring_up_main, a) == 0;
                pthread_attr_destroy(&attr);
            }
            if (started) return;
            wisp_model_free(m);
            wisp_engine_free(eng);
            wisp__free(a);
        }
        atomic_store(&eng->bring, 0);    /* no thread: discover here */
    }
    if (atomic_load(&eng->bring) == 1) return;    /* another session started it */
    wisp__engine_discover(eng);
    if (eng->gpu && m) ensure_calibrated(eng, m);
}

/* ---- routing ---------------------------------------------------------------------- */

/* The caller's context: a task of the engine's pool (the CLI's pieces: the CPU runs the
 * batch on this one thread) or any other thread (the CPU runs it on the whole pool). */
static int context_of(wisp_session *s)
{
    return wisp__pool_inside(s->eng->pool) || wisp__pool_threads(s->eng->pool) <= 1 ? 0 : 1;
}

int wisp__auto_route(wisp_session *s, uint64_t nnz, bool gpu_open)
{
    wisp_model *m = s->model;
    if (atomic_load_explicit(&m->auto_cal, memory_order_acquire) != 2) {
        if (!wisp__engine_gpu_settled(s->eng)) return 0;
        wisp__auto_bring_up(s->eng, m);  /* another model of a settled engine: calibrate it now */
        if (atomic_load_explicit(&m->auto_cal, memory_order_acquire) != 2) return 0;
    }
    const int c = context_of(s);
    uint64_t need = atomic_load_explicit(c == 0 ? &m->auto_nnz_one : &m->auto_nnz_pool, memory_order_relaxed);
    if (need == UINT64_MAX || nnz < need) return 0;
    /* Past the crossover. The calibration timed one caller alone; here the GPU may be shared
     * by many threads at once (the CLI's 16 parsing threads each scoring its piece), so what
     * batches really cost is measured too (wisp__auto_observe) and wins once both are known:
     * the GPU while it costs no more per nonzero than the CPU, else the CPU, with one batch in
     * EXPLORE sent to the GPU to see whether that changed (from a session whose GPU is open
     * already, so exploring never opens one). The first GPU batch of a context is one at a
     * time: the other sessions keep the CPU until it has told what the GPU costs. */
    uint64_t rc = atomic_load_explicit(&m->auto_rate[c][0], memory_order_relaxed);
    uint64_t rg = atomic_load_explicit(&m->auto_rate[c][1], memory_order_relaxed);
    if (rg == 0) {
        /* a probe unanswered for PROBE_NS (a submitted batch tells no time) may be taken again */
        uint64_t now = wisp__now_ns(), t = atomic_load_explicit(&m->auto_probe[c], memory_order_relaxed);
        if (t != 0 && now - t < PROBE_NS) return 0;
        return atomic_compare_exchange_strong(&m->auto_probe[c], &t, now);
    }
    if (rc == 0) return 0;               /* the CPU's side is measured by this batch */
    unsigned tick = atomic_fetch_add_explicit(&m->auto_tick[c], 1, memory_order_relaxed);
    const int explore = tick % EXPLORE == EXPLORE - 1;   /* now and then the other device, to see whether that changed */
    if (rg <= rc) return !explore;
    return gpu_open && explore;
}

void wisp__auto_observe(wisp_session *s, int gpu, uint64_t nnz, uint64_t ns)
{
    wisp_model *m = s->model;
    const int c = context_of(s);
    /* only the batches the choice is about: past the crossover (before it is known, the
     * CPU's batches of OBSERVE_MIN_NNZ or more, so its side is known when the GPU comes up) */
    uint64_t need = atomic_load_explicit(&m->auto_cal, memory_order_acquire) != 2 ? (gpu ? UINT64_MAX : OBSERVE_MIN_NNZ)
                  : atomic_load_explicit(c == 0 ? &m->auto_nnz_one : &m->auto_nnz_pool, memory_order_relaxed);
    if (need == UINT64_MAX || nnz < need || nnz == 0) return;
    uint64_t x = ns * 1024 / nnz;
    if (x == 0) x = 1;
    _Atomic uint64_t *r = &m->auto_rate[c][gpu];
    uint64_t old = atomic_load_explicit(r, memory_order_relaxed);
    /* a moving average (a quarter to the new batch); concurrent updates may lose one: harmless */
    atomic_store_explicit(r, old ? (3 * old + x) / 4 : x, memory_order_relaxed);
    if (gpu) atomic_store_explicit(&m->auto_probe[c], 0, memory_order_relaxed);
}

/* ---- the public face (wisp.h) ------------------------------------------------------- */

int wisp_engine_gpu_starting(wisp_engine *eng)
{
    return eng && atomic_load_explicit(&eng->bring, memory_order_acquire) == 1;
}

int wisp_session_auto_state(wisp_session *s, uint64_t *min_nnz_one, uint64_t *min_nnz_pool)
{
    if (min_nnz_one) *min_nnz_one = UINT64_MAX;
    if (min_nnz_pool) *min_nnz_pool = UINT64_MAX;
    if (!s) return wisp__fail(WISP_EINVAL, "wisp_session_auto_state: session is NULL");
    if (s->kind != WISP_PLACE_AUTO) return WISP_AUTO_FIXED;
    if (!wisp__engine_gpu_settled(s->eng) || atomic_load_explicit(&s->model->auto_cal, memory_order_acquire) == 1)
        return WISP_AUTO_STARTING;
    if (wisp_engine_gpu_count(s->eng) == 0) return WISP_AUTO_CPU;
    if (atomic_load_explicit(&s->model->auto_cal, memory_order_acquire) != 2) return WISP_AUTO_STARTING;
    uint64_t a = atomic_load(&s->model->auto_nnz_one), b = atomic_load(&s->model->auto_nnz_pool);
    if (min_nnz_one) *min_nnz_one = a;
    if (min_nnz_pool) *min_nnz_pool = b;
    return a == UINT64_MAX && b == UINT64_MAX ? WISP_AUTO_CPU : WISP_AUTO_ROUTING;
}

int wisp_session_auto_points(wisp_session *s, size_t cap, size_t *n, uint64_t *rows, double *cpu_one, double *cpu_pool,
                             double *gpus)
{
    if (n) *n = 0;
    if (!s) return wisp__fail(WISP_EINVAL, "wisp_session_auto_points: session is NULL");
    wisp_model *m = s->model;
    if (atomic_load_explicit(&m->auto_cal, memory_order_acquire) != 2) {
        if (wisp__engine_gpu_settled(s->eng) && wisp_engine_gpu_count(s->eng) == 0) return WISP_OK;   /* no GPU: none */
        return wisp__fail(WISP_ESTATE, "wisp_session_auto_points: %s is not calibrated yet (its first \"auto\" "
                          "session calibrates it once the GPUs are up)", m->path ? m->path : "the model");
    }
    const size_t np = (size_t)m->auto_cal_n;
    double *dst[3] = { cpu_one, cpu_pool, gpus };
    for (size_t k = 0; k < np && k < cap; k++) {
        if (rows) rows[k] = m->auto_cal_rows[k];
        for (int d = 0; d < 3; d++)
            if (dst[d]) for (int j = 0; j < 3; j++) dst[d][3 * k + (size_t)j] = m->auto_cal_ns[k][d][j] / 1e6;
    }
    if (n) *n = np;
    return WISP_OK;
}
