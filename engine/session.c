/* session.c — one caller's scoring state: device placement, GPU fallback, per-stage statistics. */
#include "internal.h"

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

/* Parse a device name into a placement; GPUs are discovered when one is named. */
static int parse_device(wisp_engine *eng, const char *dev, int *kind, int *gpus, int *ngpu)
{
    *ngpu = 0;
    if (!dev || !*dev)
        return wisp_fail(WISP_EINVAL, "device name is empty (use cpu, gpu, gpu:N, gpus or auto)");
    if (strlen(dev) >= 32)
        return wisp_fail(WISP_EINVAL, "device name '%.40s...' is too long", dev);
    if (!strcmp(dev, "cpu")) { *kind = WISP_PLACE_CPU; return WISP_OK; }
    int count = wisp_engine_gpu_count(eng);
    if (!strcmp(dev, "auto") || !strcmp(dev, "gpus")) {
        *kind = strcmp(dev, "auto") ? WISP_PLACE_GPU : WISP_PLACE_AUTO;
        for (int i = 0; i < count; i++) gpus[(*ngpu)++] = i;
        return WISP_OK;
    }
    if (!strncmp(dev, "gpu", 3) && (dev[3] == '\0' || dev[3] == ':')) {
        long n = 0;
        if (dev[3] == ':') {
            char *end;
            n = strtol(dev + 4, &end, 10);
            if (end == dev + 4 || *end || n < 0 || n >= WISP_MAX_GPUS)
                return wisp_fail(WISP_EINVAL, "bad device '%s': expected gpu:N with N from 0 to %d",
                                 dev, WISP_MAX_GPUS - 1);
        }
        *kind = WISP_PLACE_GPU;
        if (count > 0 && n >= count)
            return wisp_fail(WISP_ENODEV, "device '%s' does not exist: this machine has %d GPU%s (gpu:0%s)",
                             dev, count, count == 1 ? "" : "s", count == 1 ? "" : " ...");
        if (count > 0) gpus[(*ngpu)++] = (int)n;
        return WISP_OK;
    }
    return wisp_fail(WISP_EINVAL, "unknown device '%s' (use cpu, gpu, gpu:N, gpus or auto)", dev);
}

static void close_gpu(wisp_session *s)
{
    if (s->gpu_sctx && s->eng->gpu) s->eng->gpu->session_close(s->gpu_sctx);
    s->gpu_sctx = NULL;
    s->gpu_open_failed = false;
}

int wisp_session_set_device(wisp_session *s, const char *device)
{
    if (!s) return wisp_fail(WISP_EINVAL, "wisp_session_set_device: session is NULL");
    int kind = WISP_PLACE_CPU, gpus[WISP_MAX_GPUS], ngpu = 0;
    int st = parse_device(s->eng, device, &kind, gpus, &ngpu);
    if (st != WISP_OK) return st;
    if (kind == WISP_PLACE_GPU && ngpu == 0)
        wisp_log(s->eng, WISP_LOG_WARN, "device '%s' asked for, but %s; scoring runs on the CPU",
                 device, wisp_engine_gpu_status(s->eng));
    close_gpu(s);
    snprintf(s->device, sizeof s->device, "%s", device);
    s->kind = kind;
    s->ngpu = ngpu;
    memcpy(s->gpus, gpus, sizeof gpus);
    return WISP_OK;
}

int wisp_session_new(wisp_engine *eng, wisp_model *m, const char *device, wisp_session **out)
{
    if (!out) return wisp_fail(WISP_EINVAL, "wisp_session_new: out is NULL");
    *out = NULL;
    if (!eng || !m) return wisp_fail(WISP_EINVAL, "wisp_session_new: %s is NULL", eng ? "model" : "engine");
    wisp_session *s = wisp_calloc(1, sizeof *s);
    if (!s) return wisp_fail(WISP_ENOMEM, "wisp_session_new: out of memory");
    s->eng = eng;
    s->model = m;
    int st = wisp_session_set_device(s, device ? device : "auto");
    if (st != WISP_OK) {
        wisp_free(s);
        return st;
    }
    wisp_engine_retain(eng);
    wisp_model_retain(m);
    snprintf(s->last_device, sizeof s->last_device, "none");
    *out = s;
    return WISP_OK;
}

void wisp_session_free(wisp_session *s)
{
    if (!s) return;
    close_gpu(s);
    wisp_model_free(s->model);
    wisp_engine_free(s->eng);
    wisp_free(s);
}

const char *wisp_session_device(const wisp_session *s) { return s ? s->device : ""; }
const char *wisp_session_last_device(const wisp_session *s) { return s ? s->last_device : ""; }

/* Try the session's GPUs; WISP_OK when they scored the batch. */
static int score_gpu(wisp_session *s, const wisp_batch *b, float *out)
{
    wisp_engine *eng = s->eng;
    const wisp_backend *be = eng->gpu;
    int usable = 0;
    for (int i = 0; i < s->ngpu; i++) usable += be->device_usable(eng->gpu_ctx, s->gpus[i]);
    if (usable < s->ngpu) {
        if (s->gpu_sctx) {
            wisp_log(eng, WISP_LOG_WARN, "a GPU of device '%s' is no longer usable; scoring moves to the CPU", s->device);
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
            wisp_log(eng, WISP_LOG_WARN, "cannot use device '%s' (%s); scoring runs on the CPU", s->device, wisp_errmsg());
            return st;
        }
    }
    int st = be->score(s->gpu_sctx, s->model, b, out, s->stats);
    if (st != WISP_OK) {
        wisp_log(eng, WISP_LOG_WARN, "device '%s' failed on a batch of %zu rows (%s); this batch runs on the CPU",
                 s->device, b->rows, wisp_errmsg());
        return st;
    }
    if (s->ngpu == 1) snprintf(s->last_device, sizeof s->last_device, "gpu:%d", s->gpus[0]);
    else snprintf(s->last_device, sizeof s->last_device, "gpus:%d", s->ngpu);
    return WISP_OK;
}

int wisp_session_score(wisp_session *s, const wisp_batch *b, float *out)
{
    if (!s || !b || (!out && b->rows))
        return wisp_fail(WISP_EINVAL, "wisp_session_score: %s is NULL", !s ? "session" : !b ? "batch" : "out");
    uint64_t t0 = wisp_now_ns();
    uint64_t before[WISP_STAT_COUNT];
    memcpy(before, s->stats, sizeof before);
    bool done = false;
    if (b->rows && s->kind != WISP_PLACE_CPU && s->ngpu > 0 && s->eng->gpu) {
        done = score_gpu(s, b, out) == WISP_OK;
        if (!done) s->stats[WISP_STAT_FALLBACKS]++;
    } else if (b->rows && s->kind == WISP_PLACE_GPU) {
        s->stats[WISP_STAT_FALLBACKS]++;   /* a GPU was asked for by name and there is none */
    }
    if (!done) {
        uint64_t k0 = wisp_now_ns(), oor = 0;
        wisp_score_cpu(s->eng, s->model, b, out, &oor);
        s->stats[WISP_STAT_NS_KERNEL] += wisp_now_ns() - k0;
        s->stats[WISP_STAT_OUT_OF_RANGE] += oor;
        snprintf(s->last_device, sizeof s->last_device, "cpu");
    }
    /* bad rows are NaN whichever device scored them: one bad row never passes silently */
    for (size_t i = 0; i < b->nbad; i++) out[b->bad[i].row] = NAN;
    s->stats[WISP_STAT_BATCHES]++;
    s->stats[WISP_STAT_ROWS] += b->rows;
    s->stats[WISP_STAT_NNZ] += b->nnz;
    s->stats[WISP_STAT_BAD_ROWS] += b->nbad;
    uint64_t total = wisp_now_ns() - t0, staged = 0;
    for (int k = WISP_STAT_NS_TRANSFORM; k <= WISP_STAT_NS_SYNC; k++) staged += s->stats[k] - before[k];
    s->stats[WISP_STAT_NS_TOTAL] += total;
    s->stats[WISP_STAT_NS_OVERHEAD] += total > staged ? total - staged : 0;
    return WISP_OK;
}

uint64_t wisp_session_stat(const wisp_session *s, int which)
{
    return s && which >= 0 && which < WISP_STAT_COUNT ? s->stats[which] : 0;
}

void wisp_session_reset_stats(wisp_session *s)
{
    if (s) memset(s->stats, 0, sizeof s->stats);
}

void wisp_session_add_stat(wisp_session *s, int which, uint64_t amount)
{
    if (s && which >= 0 && which < WISP_STAT_COUNT) s->stats[which] += amount;
}
