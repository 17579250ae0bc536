/* session.c — one caller's scoring state: device placement, GPU fallback, per-stage statistics. */
#include "batch/raw.h"
#include "score/score.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *stat_names[WISP_STAT_COUNT] = {
    "batches", "rows", "nnz", "out_of_range", "bad_rows", "fallbacks",
    "ns_parse", "ns_transform", "ns_h2d", "ns_kernel", "ns_d2h", "ns_sync", "ns_overhead", "ns_total",
    "bytes_h2d", "bytes_d2h",
};

const char *wisp_stat_name(int which)
{
    return which >= 0 && which < WISP_STAT_COUNT ? stat_names[which] : NULL;
}

int wisp_device_parse(const char *dev, int *kind, int *n)
{
    int kind_, n_;
    if (!kind) kind = &kind_;
    if (!n) n = &n_;
    *kind = WISP_DEVICE_CPU;
    *n = 0;
    if (!dev || !*dev)
        return wisp__fail(WISP_EINVAL, "device name is empty (use cpu, gpu, gpu:N, gpus, gpus:N or auto)");
    if (strlen(dev) >= 32)
        return wisp__fail(WISP_EINVAL, "device name '%.40s...' is too long", dev);
    if (!strcmp(dev, "cpu")) return WISP_OK;
    if (!strcmp(dev, "auto")) { *kind = WISP_DEVICE_AUTO; return WISP_OK; }
    if (!strcmp(dev, "gpus")) { *kind = WISP_DEVICE_GPUS; return WISP_OK; }
    if (!strncmp(dev, "gpus:", 5)) {
        /* the first N GPUs */
        char *end;
        long v = strtol(dev + 5, &end, 10);
        if (end == dev + 5 || *end || v < 1 || v > WISP_MAX_GPUS)
            return wisp__fail(WISP_EINVAL, "bad device '%s': expected gpus:N with N from 1 to %d", dev, WISP_MAX_GPUS);
        *kind = WISP_DEVICE_GPUS;
        *n = (int)v;
        return WISP_OK;
    }
    if (!strncmp(dev, "gpu", 3) && (dev[3] == '\0' || dev[3] == ':')) {
        long v = 0;
        if (dev[3] == ':') {
            char *end;
            v = strtol(dev + 4, &end, 10);
            if (end == dev + 4 || *end || v < 0 || v >= WISP_MAX_GPUS)
                return wisp__fail(WISP_EINVAL, "bad device '%s': expected gpu:N with N from 0 to %d",
                                 dev, WISP_MAX_GPUS - 1);
        }
        *kind = WISP_DEVICE_GPU;
        *n = (int)v;
        return WISP_OK;
    }
    return wisp__fail(WISP_EINVAL, "unknown device '%s' (use cpu, gpu, gpu:N, gpus, gpus:N or auto)", dev);
}

/* A device name (wisp_device_parse's grammar) as this machine's placement; GPUs are
 * discovered when one is named. */
static int parse_device(wisp_engine *eng, const char *dev, int *kind, int *gpus, int *ngpu)
{
    *ngpu = 0;
    int dk, n;
    int st = wisp_device_parse(dev, &dk, &n);
    if (st != WISP_OK) return st;
    if (dk == WISP_DEVICE_CPU) { *kind = WISP_PLACE_CPU; return WISP_OK; }
    if (dk == WISP_DEVICE_AUTO && !atomic_load_explicit(&eng->gpu_state, memory_order_acquire)) {
        *kind = WISP_PLACE_AUTO;         /* the GPUs come up in the background (autoplace.c): none yet */
        return WISP_OK;
    }
    int count = wisp_engine_gpu_count(eng);
    if (dk == WISP_DEVICE_AUTO || (dk == WISP_DEVICE_GPUS && n == 0)) {
        *kind = dk == WISP_DEVICE_AUTO ? WISP_PLACE_AUTO : WISP_PLACE_GPU;
        for (int i = 0; i < count; i++) gpus[(*ngpu)++] = i;
        return WISP_OK;
    }
    *kind = WISP_PLACE_GPU;
    if (dk == WISP_DEVICE_GPUS) {
        if (count > 0 && n > count)
            return wisp__fail(WISP_ENODEV, "device '%s' asks for %d GPUs: this machine has %d", dev, n, count);
        for (int i = 0; i < count && i < n; i++) gpus[(*ngpu)++] = i;
        return WISP_OK;
    }
    if (count > 0 && n >= count)
        return wisp__fail(WISP_ENODEV, "device '%s' does not exist: this machine has %d GPU%s (gpu:0%s)",
                         dev, count, count == 1 ? "" : "s", count == 1 ? "" : " ...");
    if (count > 0) gpus[(*ngpu)++] = n;
    return WISP_OK;
}

static void drain_gpu(wisp_session *s);

static void close_gpu(wisp_session *s)
{
    drain_gpu(s);                        /* nothing may be in flight when the backend session closes */
    if (s->gpu_sctx && s->eng->gpu) s->eng->gpu->session_close(s->gpu_sctx);
    s->gpu_sctx = NULL;
    s->gpu_open_failed = false;
}

int wisp_session_set_device(wisp_session *s, const char *device)
{
    if (!s) return wisp__fail(WISP_EINVAL, "wisp_session_set_device: session is NULL");
    int kind = WISP_PLACE_CPU, gpus[WISP_MAX_GPUS], ngpu = 0;
    int st = parse_device(s->eng, device, &kind, gpus, &ngpu);
    if (st != WISP_OK) return st;
    if (kind == WISP_PLACE_GPU && ngpu == 0)
        wisp__log(s->eng, WISP_LOG_WARN, "device '%s' asked for, but %s; scoring runs on the CPU",
                 device, wisp_engine_gpu_status(s->eng));
    close_gpu(s);
    snprintf(s->device, sizeof s->device, "%s", device);
    s->kind = kind;
    s->ngpu = ngpu;
    memcpy(s->gpus, gpus, sizeof gpus);
    s->auto_pending = kind == WISP_PLACE_AUTO && !atomic_load_explicit(&s->eng->gpu_state, memory_order_acquire);
    if (kind == WISP_PLACE_AUTO && s->model) wisp__auto_bring_up(s->eng, s->model);
    return WISP_OK;
}

/* An "auto" session whose engine discovered its GPUs since: take them (every usable one).
 * wait: discover now if need be (a caller whose data is on a GPU already). */
void wisp__session_auto_refresh(wisp_session *s, bool wait)
{
    if (!s->auto_pending) return;
    if (wait) wisp__engine_discover(s->eng);
    if (!atomic_load_explicit(&s->eng->gpu_state, memory_order_acquire)) return;
    int count = s->eng->gpu_count, n = 0;
    for (int i = 0; i < count && i < WISP_MAX_GPUS; i++) s->gpus[n++] = i;
    s->ngpu = n;
    s->auto_pending = false;
}

/* Whether batch b goes to the session's GPUs: a named GPU whenever there is one; "auto"
 * when its GPUs are up and b is past the model's calibrated crossover (autoplace.c). */
static bool want_gpu(wisp_session *s, const wisp_batch *b)
{
    if (!b->rows || s->kind == WISP_PLACE_CPU) return false;
    if (s->kind == WISP_PLACE_AUTO) {
        wisp__session_auto_refresh(s, false);
        return s->ngpu > 0 && s->eng->gpu && wisp__auto_route(s, b->nnz, s->gpu_sctx != NULL);
    }
    return s->ngpu > 0 && s->eng->gpu;
}

int wisp_session_new(wisp_engine *eng, wisp_model *m, const char *device, wisp_session **out)
{
    if (!out) return wisp__fail(WISP_EINVAL, "wisp_session_new: out is NULL");
    *out = NULL;
    if (!eng || !m) return wisp__fail(WISP_EINVAL, "wisp_session_new: %s is NULL", eng ? "model" : "engine");
    wisp_session *s = wisp__calloc(1, sizeof *s);
    if (!s) return wisp__fail(WISP_ENOMEM, "wisp_session_new: out of memory");
    s->eng = eng;
    s->model = m;
    s->max_in_flight = WISP_MAX_IN_FLIGHT;
    const char *fl = getenv("WISP_IN_FLIGHT");          /* 1..WISP_MAX_IN_FLIGHT: fewer batches on the device */
    if (fl && *fl) {
        long n = strtol(fl, NULL, 10);
        s->max_in_flight = n < 1 ? 1 : n > WISP_MAX_IN_FLIGHT ? WISP_MAX_IN_FLIGHT : (int)n;
    }
    int st = wisp_session_set_device(s, device ? device : "auto");   /* s->model set: auto starts its bring-up */
    if (st != WISP_OK) {
        wisp__free(s);
        return st;
    }
    wisp__engine_retain(eng);
    wisp__model_retain(m);
    snprintf(s->last_device, sizeof s->last_device, "none");
    *out = s;
    return WISP_OK;
}

void wisp_session_free(wisp_session *s)
{
    if (!s) return;
    close_gpu(s);
    wisp_batch_free(s->raw_batch);
    wisp__free(s->bad);
    wisp__free(s->bad_msgs);
    wisp_model_free(s->model);
    wisp_engine_free(s->eng);
    wisp__free(s);
}

const char *wisp_session_device(const wisp_session *s) { return s ? s->device : ""; }
const char *wisp_session_last_device(const wisp_session *s) { return s ? s->last_device : ""; }

/* The session's GPUs ready to take a batch: all usable, backend session open. */
static int gpu_ready(wisp_session *s)
{
    wisp_engine *eng = s->eng;
    const wisp_backend *be = eng->gpu;
    int usable = 0;
    for (int i = 0; i < s->ngpu; i++) usable += be->device_usable(eng->gpu_ctx, s->gpus[i]);
    if (usable < s->ngpu) {
        if (s->gpu_sctx) {
            wisp__log(eng, WISP_LOG_WARN, "a GPU of device '%s' is no longer usable; scoring moves to the CPU",
                      s->device);
            close_gpu(s);
            s->gpu_open_failed = true;
        }
        return WISP_EDEVICE;
    }
    if (!s->gpu_sctx) {
        if (s->gpu_open_failed) return WISP_EDEVICE;
        int st = be->session_open(eng->gpu_ctx, s->gpus, s->ngpu, &s->gpu_sctx);
        if (st != WISP_OK) {
            s->gpu_sctx = NULL;
            s->gpu_open_failed = true;
            wisp__log(eng, WISP_LOG_WARN, "cannot use device '%s' (%s); scoring runs on the CPU", s->device,
                      wisp_errmsg());
            return st;
        }
    }
    return WISP_OK;
}

static void set_last_gpu(wisp_session *s)
{
    /* the name is made only when the session's GPUs change (an snprintf a batch costs ~0.1 us
     * of a 10-row call's 11); key: gpu:N -> N + 1, gpus:N -> -N, never 0 with a GPU */
    const int key = s->ngpu == 1 ? s->gpus[0] + 1 : -s->ngpu;
    if (s->gpu_label_key != key) {
        if (s->ngpu == 1) snprintf(s->gpu_label, sizeof s->gpu_label, "gpu:%d", s->gpus[0]);
        else snprintf(s->gpu_label, sizeof s->gpu_label, "gpus:%d", s->ngpu);
        s->gpu_label_key = key;
    }
    memcpy(s->last_device, s->gpu_label, sizeof s->last_device);
}

static void log_batch_failed(wisp_session *s, const wisp_batch *b)
{
    wisp__log(s->eng, WISP_LOG_WARN, "device '%s' failed on a batch of %zu rows (%s); this batch runs on the CPU",
             s->device, b->rows, wisp_errmsg());
}

/* Try the session's GPUs; WISP_OK when they scored the batch. */
static int score_gpu(wisp_session *s, const wisp_batch *b, float *out)
{
    int st = gpu_ready(s);
    if (st != WISP_OK) return st;
    uint64_t t0 = wisp__now_ns();         /* after opening: the cost auto learns is the batch's own */
    st = s->eng->gpu->score(s->gpu_sctx, s->model, b, out, s->stats);
    if (s->kind == WISP_PLACE_AUTO && st == WISP_OK) wisp__auto_observe(s, 1, b->nnz, wisp__now_ns() - t0);
    if (st != WISP_OK) {
        log_batch_failed(s, b);
        return st;
    }
    set_last_gpu(s);
    return WISP_OK;
}

static void score_on_cpu(wisp_session *s, const wisp_batch *b, float *out)
{
    uint64_t k0 = wisp__now_ns(), oor = 0;
    wisp__cpu_score(s->eng, s->model, b, out, &oor);
    s->stats[WISP_STAT_NS_KERNEL] += wisp__now_ns() - k0;
    s->stats[WISP_STAT_OUT_OF_RANGE] += oor;
    memcpy(s->last_device, "cpu", 4);
}

/* A batch whose answers are in out: bad rows NaN, counted. */
static void finish_batch(wisp_session *s, const wisp_batch *b, float *out)
{
    /* bad rows are NaN whichever device scored them: one bad row never passes silently */
    for (size_t i = 0; i < b->nbad; i++) out[b->bad[i].row] = NAN;
    s->stats[WISP_STAT_BATCHES]++;
    s->stats[WISP_STAT_ROWS] += b->rows;
    s->stats[WISP_STAT_NNZ] += b->nnz;
    s->stats[WISP_STAT_BAD_ROWS] += b->nbad;
}

/* A call's start: its clock, and the statistics before it (what account() compares with). */
static uint64_t call_start(const wisp_session *s, uint64_t *before)
{
    const uint64_t t0 = wisp__now_ns();
    memcpy(before, s->stats, sizeof s->stats);
    return t0;
}

/* The wall time of one call, and the part of it no stage accounts for. */
static void account(wisp_session *s, uint64_t t0, const uint64_t *before)
{
    uint64_t total = wisp__now_ns() - t0, staged = 0;
    for (int k = WISP_STAT_NS_TRANSFORM; k <= WISP_STAT_NS_SYNC; k++) staged += s->stats[k] - before[k];
    s->stats[WISP_STAT_NS_TOTAL] += total;
    s->stats[WISP_STAT_NS_OVERHEAD] += total > staged ? total - staged : 0;
    if (s->profiling) {                  /* the per-call record; off: this branch is all it costs */
        for (int k = 0; k < WISP_STAT_COUNT; k++) s->last[k] = s->stats[k] - before[k];
        s->last_start_ns = t0;
    }
}

/* Complete the oldest batch still in the backend (it is the backend's oldest
 * too: both queues are first in, first out); a device failure moves it to the CPU. */
static void complete_oldest_gpu(wisp_session *s)
{
    for (int k = 0; k < s->npend; k++) {
        struct wisp_pending *p = &s->pend[(s->pend_head + k) % WISP_MAX_PENDING];
        if (!p->on_gpu) continue;
        p->on_gpu = 0;
        s->ngpu_pend--;
        if (s->eng->gpu->wait(s->gpu_sctx, s->stats) == WISP_OK) {
            set_last_gpu(s);
        } else {
            log_batch_failed(s, p->b);
            s->stats[WISP_STAT_FALLBACKS]++;
            score_on_cpu(s, p->b, p->out);
        }
        finish_batch(s, p->b, p->out);
        p->status = WISP_OK;
        return;
    }
    s->ngpu_pend = 0;                    /* not reached: the count and the ring agree */
}

static void drain_gpu(wisp_session *s)
{
    while (s->ngpu_pend > 0) complete_oldest_gpu(s);
}

/* Score b on the session's device (the CPU when that fails), bad rows NaN, counted. */
static void score_batch(wisp_session *s, const wisp_batch *b, float *out)
{
    bool done = false;
    if (want_gpu(s, b)) {
        done = score_gpu(s, b, out) == WISP_OK;
        if (!done) s->stats[WISP_STAT_FALLBACKS]++;
    } else if (b->rows && s->kind == WISP_PLACE_GPU) {
        s->stats[WISP_STAT_FALLBACKS]++;   /* a GPU was asked for by name and there is none */
    }
    if (!done) {
        const uint64_t t0 = s->kind == WISP_PLACE_AUTO ? wisp__now_ns() : 0;   /* what auto learns */
        score_on_cpu(s, b, out);
        if (s->kind == WISP_PLACE_AUTO) wisp__auto_observe(s, 0, b->nnz, wisp__now_ns() - t0);
    }
    finish_batch(s, b, out);
}

int wisp_session_score(wisp_session *s, const wisp_batch *b, float *out)
{
    if (!s || !b || (!out && b->rows))
        return wisp__fail(WISP_EINVAL, "wisp_session_score: %s is NULL", !s ? "session" : !b ? "batch" : "out");
    uint64_t before[WISP_STAT_COUNT];
    const uint64_t t0 = call_start(s, before);
    drain_gpu(s);                        /* submitted batches finish first; they stay owed a wait */
    score_batch(s, b, out);
    account(s, t0, before);
    return WISP_OK;
}

int wisp_session_submit(wisp_session *s, const wisp_batch *b, float *out)
{
    if (!s || !b || (!out && b->rows))
        return wisp__fail(WISP_EINVAL, "wisp_session_submit: %s is NULL", !s ? "session" : !b ? "batch" : "out");
    if (s->npend >= WISP_MAX_PENDING)
        return wisp__fail(WISP_ELIMIT, "wisp_session_submit: %d batches are already submitted and not waited for "
                         "(WISP_MAX_PENDING); call wisp_session_wait first", s->npend);
    uint64_t before[WISP_STAT_COUNT];
    const uint64_t t0 = call_start(s, before);
    const wisp_backend *be = s->eng->gpu;
    bool on_gpu = false, done = false;
    if (want_gpu(s, b)) {
        if (be->submit && be->wait) {
            if (s->ngpu_pend >= s->max_in_flight) complete_oldest_gpu(s);
            if (gpu_ready(s) == WISP_OK) {
                if (be->submit(s->gpu_sctx, s->model, b, out, s->stats) == WISP_OK) on_gpu = true;
                else log_batch_failed(s, b);
            }
        } else {
            done = score_gpu(s, b, out) == WISP_OK;   /* a backend without submit: blocking */
        }
        if (!on_gpu && !done) s->stats[WISP_STAT_FALLBACKS]++;
    } else if (b->rows && s->kind == WISP_PLACE_GPU) {
        s->stats[WISP_STAT_FALLBACKS]++;   /* a GPU was asked for by name and there is none */
    }
    if (!on_gpu) {
        if (!done) score_on_cpu(s, b, out);
        finish_batch(s, b, out);
    }
    s->pend[(s->pend_head + s->npend) % WISP_MAX_PENDING] = (struct wisp_pending){ b, out, on_gpu, WISP_OK };
    s->npend++;
    if (on_gpu) s->ngpu_pend++;
    account(s, t0, before);
    return WISP_OK;
}

int wisp_session_wait(wisp_session *s, const wisp_batch **done)
{
    if (done) *done = NULL;
    if (!s) return wisp__fail(WISP_EINVAL, "wisp_session_wait: session is NULL");
    if (s->npend == 0) return wisp__fail(WISP_ESTATE, "wisp_session_wait: no batch is in flight (submit one first)");
    uint64_t before[WISP_STAT_COUNT];
    const uint64_t t0 = call_start(s, before);
    struct wisp_pending *p = &s->pend[s->pend_head];
    if (p->on_gpu) complete_oldest_gpu(s);   /* the oldest entry is the oldest one in the backend */
    const wisp_batch *b = p->b;
    int st = p->status;
    s->pend_head = (s->pend_head + 1) % WISP_MAX_PENDING;
    s->npend--;
    account(s, t0, before);
    if (done) *done = b;
    return st;
}

uint64_t wisp_session_stat(const wisp_session *s, int which)
{
    return s && which >= 0 && which < WISP_STAT_COUNT ? s->stats[which] : 0;
}

void wisp_session_reset_stats(wisp_session *s)
{
    if (!s) return;
    memset(s->stats, 0, sizeof s->stats);
    memset(s->last, 0, sizeof s->last);
    s->last_start_ns = 0;
}

void wisp_session_set_profiling(wisp_session *s, int on)
{
    if (!s) return;
    s->profiling = on != 0;
    if (!on) { memset(s->last, 0, sizeof s->last); s->last_start_ns = 0; }
}

int wisp_session_profiling(const wisp_session *s) { return s ? s->profiling : 0; }

uint64_t wisp_session_last_stat(const wisp_session *s, int which)
{
    return s && s->profiling && which >= 0 && which < WISP_STAT_COUNT ? s->last[which] : 0;
}

uint64_t wisp_session_last_start_ns(const wisp_session *s) { return s && s->profiling ? s->last_start_ns : 0; }

uint64_t wisp_clock_ns(void) { return wisp__now_ns(); }

void wisp_session_add_stat(wisp_session *s, int which, uint64_t amount)
{
    if (s && which >= 0 && which < WISP_STAT_COUNT) s->stats[which] += amount;
}

/* ---- the transform node on the session's device (wisp.h section 6) ------------------------ */

/* The session's GPU backend with a device transform, ready; NULL when the CPU runs it
 * (with count: a fallback counted when a GPU was named, or when the backend failed to open;
 * score_raw's CPU path counts its own, through score_batch). */
static const wisp_backend *transform_gpu(wisp_session *s, size_t rows, bool count)
{
    if (!rows || s->kind == WISP_PLACE_CPU) return NULL;
    if (s->kind == WISP_PLACE_AUTO) {
        /* auto: once the GPUs are up, by the crossover (a raw row counted as 39 features,
         * a Criteo row's columns: the probes' width) */
        wisp__session_auto_refresh(s, false);
        if (s->ngpu == 0 || !wisp__auto_route(s, (uint64_t)rows * 39, true)) return NULL;
    }
    const wisp_backend *be = s->eng->gpu;
    if (s->ngpu == 0 || !be || !be->transform || !be->score_raw) {
        if (count && s->kind == WISP_PLACE_GPU) s->stats[WISP_STAT_FALLBACKS]++;
        return NULL;
    }
    if (gpu_ready(s) != WISP_OK) {
        if (count) s->stats[WISP_STAT_FALLBACKS]++;
        return NULL;
    }
    return be;
}

static void log_raw_failed(wisp_session *s, const wisp_raw *r, const char *what)
{
    wisp__log(s->eng, WISP_LOG_WARN, "device '%s' failed to %s %zu raw rows (%s); they run on the CPU",
             s->device, what, r->rows, wisp_errmsg());
    s->stats[WISP_STAT_FALLBACKS]++;
}

int wisp_session_transform(wisp_session *s, const wisp_raw *r, wisp_batch *b)
{
    if (!s || !r || !b)
        return wisp__fail(WISP_EINVAL, "wisp_session_transform: %s is NULL", !s ? "session" : !r ? "raw" : "batch");
    if (r->open) return wisp__fail(WISP_ESTATE, "wisp_session_transform: a row is still open (call wisp_raw_row_end)");
    if (b->wrapped)
        return wisp__fail(WISP_ESTATE, "wisp_session_transform: the batch wraps caller arrays and cannot grow");
    uint64_t before[WISP_STAT_COUNT];
    const uint64_t t0 = call_start(s, before);
    drain_gpu(s);
    int st = WISP_EDEVICE;
    const wisp_backend *be = transform_gpu(s, r->rows, true);
    if (be) {
        st = be->transform(s->gpu_sctx, r, b, s->stats);
        if (st == WISP_OK) set_last_gpu(s);
        else if (st == WISP_EDEVICE) log_raw_failed(s, r, "transform");
    }
    if (st == WISP_EDEVICE) {
        uint64_t k0 = wisp__now_ns();
        st = wisp_transform(r, b);
        s->stats[WISP_STAT_NS_TRANSFORM] += wisp__now_ns() - k0;
        snprintf(s->last_device, sizeof s->last_device, "cpu");
    }
    account(s, t0, before);
    return st;
}

/* Keep a copy of a bad-row list (a raw batch's or a batch's: the same records) as the
 * session's; on failure the session's list is left empty. */
static int keep_bad_rows(wisp_session *s, const struct wisp_bad_row *bad, size_t nbad, const char *msgs)
{
    s->nbad = 0;
    s->bad_msgs_len = 0;
    if (!nbad) return WISP_OK;
    if (nbad > s->bad_cap) {
        struct wisp_bad_row *n = wisp__realloc(s->bad, nbad * sizeof *n);
        if (!n) return wisp__fail(WISP_ENOMEM, "out of memory for %zu bad rows", nbad);
        s->bad = n;
        s->bad_cap = nbad;
    }
    size_t len = 0;
    for (size_t i = 0; i < nbad; i++) len += strlen(msgs + bad[i].msg_off) + 1;
    if (len > UINT32_MAX) return wisp__fail(WISP_ELIMIT, "the bad rows' messages take %zu bytes", len);
    if (len > s->bad_msgs_cap) {
        char *n = wisp__realloc(s->bad_msgs, len);
        if (!n) return wisp__fail(WISP_ENOMEM, "out of memory for %zu bad rows", nbad);
        s->bad_msgs = n;
        s->bad_msgs_cap = len;
    }
    for (size_t i = 0; i < nbad; i++) {
        const char *m = msgs + bad[i].msg_off;
        size_t n = strlen(m) + 1;
        memcpy(s->bad_msgs + s->bad_msgs_len, m, n);
        s->bad[i] = (struct wisp_bad_row){ bad[i].row, bad[i].line, (uint32_t)s->bad_msgs_len };
        s->bad_msgs_len += n;
    }
    s->nbad = nbad;
    return WISP_OK;
}

/* The CPU transform of r into the session's batch (its bad rows are then r's rows' and the
 * transform's, with their messages), timed as the transform. */
static int cpu_transform_raw(wisp_session *s, const wisp_raw *r)
{
    int st = WISP_OK;
    if (!s->raw_batch && (st = wisp_batch_new(s->eng, &s->raw_batch)) != WISP_OK) return st;
    wisp_batch_clear(s->raw_batch);
    uint64_t k0 = wisp__now_ns();
    st = wisp_transform(r, s->raw_batch);
    s->stats[WISP_STAT_NS_TRANSFORM] += wisp__now_ns() - k0;
    return st;
}

int wisp_session_score_raw(wisp_session *s, const wisp_raw *r, float *out)
{
    if (s) s->nbad = 0;
    if (!s || !r || (!out && r && r->rows))
        return wisp__fail(WISP_EINVAL, "wisp_session_score_raw: %s is NULL", !s ? "session" : !r ? "raw" : "out");
    if (r->open) return wisp__fail(WISP_ESTATE, "wisp_session_score_raw: a row is still open (call wisp_raw_row_end)");
    uint64_t before[WISP_STAT_COUNT];
    const uint64_t t0 = call_start(s, before);
    drain_gpu(s);
    int st = WISP_EDEVICE;
    const wisp_backend *be = transform_gpu(s, r->rows, false);
    if (be) {
        st = be->score_raw(s->gpu_sctx, s->model, r, out, s->stats);
        if (st == WISP_OK) set_last_gpu(s);
        else log_raw_failed(s, r, "score");
        if (st != WISP_OK) st = WISP_EDEVICE;
    }
    if (st == WISP_OK) {
        /* the device counts the rows its transform refused but cannot say why: when there are
         * any beyond r's own, the CPU transform finds them and their messages */
        if (s->stats[WISP_STAT_BAD_ROWS] - before[WISP_STAT_BAD_ROWS] > r->nbad) {
            st = cpu_transform_raw(s, r);
            if (st == WISP_OK) st = keep_bad_rows(s, s->raw_batch->bad, s->raw_batch->nbad, s->raw_batch->msgs);
            if (st != WISP_OK) st = wisp__fail_context(st, "explaining the rows the device refused");
        } else {
            st = keep_bad_rows(s, r->bad, r->nbad, r->msgs);
        }
    } else {
        /* the CPU transform into the session's batch, then the score node on the session's device */
        st = cpu_transform_raw(s, r);
        if (st == WISP_OK) {
            score_batch(s, s->raw_batch, out);
            st = keep_bad_rows(s, s->raw_batch->bad, s->raw_batch->nbad, s->raw_batch->msgs);
        }
    }
    account(s, t0, before);
    if (st != WISP_OK) return wisp__fail_context(st, "wisp_session_score_raw");
    return WISP_OK;
}

int wisp__session_keep_bad(wisp_session *s, const wisp_batch *b)
{
    return keep_bad_rows(s, b->bad, b->nbad, b->msgs);
}

size_t wisp_session_bad_count(const wisp_session *s) { return s ? s->nbad : 0; }

int wisp_session_bad_row(const wisp_session *s, size_t i, size_t *row, uint64_t *line, const char **msg)
{
    if (!s) return wisp__fail(WISP_EINVAL, "wisp_session_bad_row: session is NULL");
    if (i >= s->nbad)
        return wisp__fail(WISP_EINVAL, "wisp_session_bad_row: index %zu out of range (%zu bad rows)", i, s->nbad);
    if (row) *row = s->bad[i].row;
    if (line) *line = s->bad[i].line;
    if (msg) *msg = s->bad_msgs + s->bad[i].msg_off;
    return WISP_OK;
}
