/* autoplace.c — the "auto" device: the GPUs are brought up in the background while the CPU
 * scores, then each batch goes to the device that a crossover calibrated on the model picks
 * for its size (issue 20).
 *
 * Why: starting CUDA and putting a model's weights on a GPU takes a quarter of a second or
 * more; a caller that asked for "auto" and scores one small file must not wait for that,
 * and a batch too small to pay for the trip to the GPU must not go there.
 *
 * 1. Bring-up. The first "auto" session of an engine whose devices are not discovered yet
 *    starts one thread (wisp__auto_bring_up): it discovers the devices (engine.c), then
 *    calibrates that session's model (below), which also uploads its weights to each GPU.
 *    Until it is done, "auto" sessions see no GPU (ngpu 0) and score on the CPU; no caller
 *    ever waits for it, except wisp_engine_free, which joins it (wisp_engine_gpu_starting
 *    lets a process that is about to exit skip that wait: the CLI does).
 * 2. Calibration (per model, once): probe batches of 39 features a row (13 valued, 26
 *    binary; uniform ids over the model's features) of 1, 2, 4 ... 16384 rows are scored on
 *    the session's GPUs and on the CPU, the devices interleaved in each of CAL_REPS passes,
 *    medians kept. The CPU is timed on one thread (how a caller that is itself a task of the
 *    engine's pool scores, such as the CLI's pieces); for any other caller, who scores on the
 *    pool, its time is estimated from that (see calibrate). For each, the crossover is the smallest probe size (in features, i.e. nonzeros)
 *    from which the GPU was faster at every larger probe: between two probes the CPU keeps
 *    the batch, so a batch goes to the GPU only at a size where the GPU was measured faster.
 *    WISP_AUTO_MIN_NNZ=N fixes the crossover at N nonzeros (tests, operators);
 *    WISP_AUTO_WAIT=1 makes the first "auto" session wait for the bring-up (the old
 *    behaviour: the GPU from the first batch).
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
#define POOL_WAKE_NS 4000
#define EXPLORE 64               /* past the crossover, with the GPU measured slower: one batch in 64 tries it again */
#define OBSERVE_MIN_NNZ 4096     /* before the crossover is known: CPU batches this large teach the CPU's rate */
#define PROBE_NS 1000000000ull  /* a first GPU batch unanswered this long may be tried by another */        /* waking the pool's threads for one job (an estimate: see calibrate) */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    return *end ? dflt : (uint64_t)n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median_u64(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* The smallest probe index from which the GPU was faster at every larger probe (nprobe: never). */
static int first_gpu_win(const uint64_t *cpu, const uint64_t *gpu, int nprobe)
{
    int k = nprobe;
    while (k > 0 && gpu[k - 1] < cpu[k - 1]) k--;
    return k;
}

/* Calibrate m on the engine's GPUs (the devices are discovered): fills m's crossovers. */
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
    uint64_t cpu1[CAL_MAX_LOG2 + 1], cpup[CAL_MAX_LOG2 + 1], gpu[CAL_MAX_LOG2 + 1];
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
    for (int k = 0; ok && k < nprobe; k++) {
        const size_t rows = (size_t)1 << k;
        wisp_batch *b = NULL;
        if (wisp_batch_wrap(eng, rows, indptr, ids, val_ptr, vals, &b) != WISP_OK) { ok = 0; break; }
        uint64_t t1[CAL_REPS], tg[CAL_REPS], oor = 0;
        wisp__cpu_score(NULL, m, b, out, &oor);                        /* warm: caches, pages */
        for (int w = 0; w < 2 && ok; w++) ok = wisp_session_score(gs, b, out) == WISP_OK;
        for (int rep = 0; rep < CAL_REPS && ok; rep++) {
            uint64_t t0 = wisp__now_ns();
            wisp__cpu_score(NULL, m, b, out, &oor);
            t1[rep] = wisp__now_ns() - t0;
            t0 = wisp__now_ns();
            ok = wisp_session_score(gs, b, out) == WISP_OK;
            tg[rep] = wisp__now_ns() - t0;
        }
        if (ok && wisp_session_stat(gs, WISP_STAT_FALLBACKS) != 0) ok = 0;   /* the GPU did not score them */
        wisp_batch_free(b);
        if (!ok) break;
        cpu1[k] = median_u64(t1, CAL_REPS);
        gpu[k] = median_u64(tg, CAL_REPS);
        /* the pool's time, estimated: the one-thread time split over the tasks the pool
         * would cut this batch into (score_cpu.c: about one per 4096 nonzeros), at most its
         * threads, plus waking them (POOL_WAKE_NS). Timing the pool here would time whatever
         * else the caller's process runs on it meanwhile (the CLI parses on it). */
        uint64_t tasks = ((uint64_t)rows * (CAL_WIDTH + 4) + 4095) / 4096, threads = (uint64_t)wisp__pool_threads(eng->pool);
        if (tasks > rows) tasks = rows;
        if (tasks > threads) tasks = threads;
        cpup[k] = tasks <= 1 ? cpu1[k] : cpu1[k] / tasks + POOL_WAKE_NS;
    }
    uint64_t none = UINT64_MAX;
    if (ok) {
        int k1 = first_gpu_win(cpu1, gpu, nprobe), kp = first_gpu_win(cpup, gpu, nprobe);
        uint64_t n1 = k1 < nprobe ? ((uint64_t)1 << k1) * CAL_WIDTH : none;
        uint64_t np = kp < nprobe ? ((uint64_t)1 << kp) * CAL_WIDTH : none;
        atomic_store(&m->auto_nnz_one, n1);
        atomic_store(&m->auto_nnz_pool, np);
        char one[32], pool[32];
        if (n1 == none) snprintf(one, sizeof one, "never"); else snprintf(one, sizeof one, "%llu", (unsigned long long)n1);
        if (np == none) snprintf(pool, sizeof pool, "never"); else snprintf(pool, sizeof pool, "%llu", (unsigned long long)np);
        wisp__log(eng, WISP_LOG_INFO, "auto: %s calibrated: batches of at least %s features go to the GPU from one "
                 "thread, %s from the pool (10 rows: cpu %.1f us, gpu %.1f us; 16384 rows: cpu %.0f us (pool %.0f), gpu %.0f us)",
                 m->path ? m->path : "the model", one, pool, cpu1[3] / 1e3, gpu[3] / 1e3,
                 cpu1[nprobe - 1] / 1e3, cpup[nprobe - 1] / 1e3, gpu[nprobe - 1] / 1e3);
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
