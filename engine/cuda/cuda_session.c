/* cuda_session.c — the CUDA backend's sessions: units (streams, events, buffers) per device, submit slots, and the
 * score/submit/wait entries of the backend table. */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- sessions -------------------------------------------------------------------- */


static int env_int(const char *name, int def, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    long x = strtol(v, NULL, 10);
    return x < lo ? lo : x > hi ? hi : (int)x;
}

void wisp__cuda_graphs_clear(struct unit *u)
{
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (u->g[i].exec) {
            if (cudaGraphExecDestroy(u->g[i].exec) != cudaSuccess) cudaGetLastError();
            u->g[i].exec = NULL;
        }
}

static void unit_destroy(struct unit *u)
{
    if (cudaSetDevice(u->dev) != cudaSuccess) cudaGetLastError();
    wisp__cuda_graphs_clear(u);
    for (int i = 0; i < NEV; i++) if (u->ev[i]) cudaEventDestroy(u->ev[i]);
    if (u->fin_comp) cudaEventDestroy(u->fin_comp);
    if (u->fin_copy) cudaEventDestroy(u->fin_copy);
    for (int i = 0; i < MAX_CHUNKS; i++) if (u->ready[i]) cudaEventDestroy(u->ready[i]);
    for (int i = 0; i < MAX_CHUNKS; i++) if (u->done[i]) cudaEventDestroy(u->done[i]);
    if (u->copy && !u->shared_streams) cudaStreamDestroy(u->copy);
    if (u->comp && !u->shared_streams) cudaStreamDestroy(u->comp);
    if (u->dbuf) cudaFree(u->dbuf);
    cudaGetLastError();
    memset(u, 0, sizeof *u);
}

/* A slot's or the session's own memory (not the slots'). */
static void sess_free_one(sess *s)
{
    for (int i = 0; i < s->nunits; i++) unit_destroy(&s->u[i]);
    wisp__cuda_pin_free(s->ctx, s->stage);
    wisp__free(s->job);
    wisp__free(s);
}

void wisp__cuda_session_close(void *vs)
{
    sess *s = vs;
    if (!s) return;
    /* session.c closes with nothing in flight; wait for the streams anyway before memory goes */
    for (int i = 0; i < s->nunits; i++) {
        struct unit *u = &s->u[i];
        if (cudaSetDevice(u->dev) != cudaSuccess) cudaGetLastError();
        if (u->comp && cudaStreamSynchronize(u->comp) != cudaSuccess) cudaGetLastError();
        if (u->copy && cudaStreamSynchronize(u->copy) != cudaSuccess) cudaGetLastError();
    }
    for (int k = 1; k < WISP_MAX_IN_FLIGHT; k++)
        if (s->slot[k]) sess_free_one(s->slot[k]);       /* before the session's units: they own the streams */
    if (s->epoch) {
        if (cudaSetDevice(s->u[0].dev) != cudaSuccess) cudaGetLastError();
        cudaEventDestroy(s->epoch);
        cudaGetLastError();
    }
    wisp__free(s->tl);
    for (int k = 0; k < WISP_MAX_GPUS; k++) wisp__cuda_xf_free(s->xf[k]);
    wisp__cuda_dv_free(s);
    sess_free_one(s);
}

/* A unit on dev with its own streams, or (share != NULL) with share's streams. */
static int unit_create(sess *s, struct unit *u, int dev, const struct unit *share)
{
    u->dev = dev;
    cudaError_t e = cudaSetDevice(dev);
    if (share) {
        u->copy = share->copy;
        u->comp = share->comp;
        u->shared_streams = 1;
    } else {
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&u->copy, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&u->comp, cudaStreamNonBlocking);
    }
    for (int i = 0; e == cudaSuccess && i < NEV; i++) e = cudaEventCreate(&u->ev[i]);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&u->fin_comp, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&u->fin_copy, cudaEventDisableTiming);
    for (int i = 0; e == cudaSuccess && i < MAX_CHUNKS; i++)
        e = cudaEventCreateWithFlags(&u->ready[i], cudaEventDisableTiming);
    for (int i = 0; e == cudaSuccess && i < MAX_CHUNKS; i++)
        e = cudaEventCreateWithFlags(&u->done[i], cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (wisp__cuda_is_sticky(e)) wisp__cuda_mark_unusable(s->ctx, dev, e);
        return wisp__cuda_err_fail(dev, "creating streams and events", e);
    }
    return WISP_OK;
}

int wisp__cuda_session_open(void *vctx, const int *devs, int ndev, void **out)
{
    cuda_ctx *ctx = vctx;
    *out = NULL;
    if (!ctx || ndev <= 0 || ndev > WISP_MAX_GPUS)
        return wisp__fail(WISP_EINVAL, "cuda: a session needs 1 to %d devices, got %d", WISP_MAX_GPUS, ndev);
    for (int i = 0; i < ndev; i++)
        if (devs[i] < 0 || devs[i] >= ctx->n || !atomic_load(&ctx->dev[devs[i]].usable))
            return wisp__fail(WISP_ENODEV, "cuda: gpu:%d is not a usable device", devs[i]);
    sess *s = wisp__calloc(1, sizeof *s);
    if (!s) return wisp__fail(WISP_ENOMEM, "cuda: out of host memory for a session");
    s->ctx = ctx;
    s->root = s;
    s->slot[0] = s;
    s->ndev = ndev;
    memcpy(s->devs, devs, (size_t)ndev * sizeof *devs);
    const char *f = getenv("WISP_FAULT_GPU");
    if (f && !strcmp(f, "oom")) s->root->fault = FAULT_OOM;
    else if (f && !strcmp(f, "oom1")) s->root->fault = FAULT_OOM_ONCE;
    else if (f && !strcmp(f, "sticky")) s->root->fault = FAULT_STICKY;
    s->shards_env = env_int("WISP_GPU_SHARDS", 0, 0, MAX_SHARDS);
    const char *shm = getenv("WISP_GPU_SHARDING");
    s->sharding = shm && !strcmp(shm, "peer") ? SHARDING_PEER : shm && !strcmp(shm, "broadcast") ? SHARDING_BROADCAST
                : SHARDING_AUTO;
    if (shm && *shm && s->sharding == SHARDING_AUTO && strcmp(shm, "auto"))
        wisp__log(ctx->eng, WISP_LOG_WARN, "WISP_GPU_SHARDING='%.40s' is not peer, broadcast or auto; using auto", shm);
    s->table_max = (uint64_t)env_int("WISP_GPU_TABLE_MB", 0, 0, 1 << 30) << 20;
    s->parts_env = env_int("WISP_GPU_PARTS", 0, 0, MAX_UNITS);
    s->chunks_env = env_int("WISP_GPU_CHUNKS", 0, 0, MAX_CHUNKS);
    s->lanes_env = env_int("WISP_GPU_LANES", 0, 0, 32);
    if (s->lanes_env != 4 && s->lanes_env != 8 && s->lanes_env != 16 && s->lanes_env != 32) s->lanes_env = 0;
    s->timing = env_int("WISP_GPU_TIMING", -1, -1, 1);
    s->graphs = env_int("WISP_GPU_GRAPHS", 1, 0, 1);
    s->inline_on = env_int("WISP_GPU_INLINE", 1, 0, 1);
    const char *zc = getenv("WISP_GPU_ZEROCOPY");
    if (zc && !strcmp(zc, "all")) s->zc_rows = WISP_MAX_ROWS;
    else if (zc && *zc && strcmp(zc, "0") && strcmp(zc, "off")) s->zc_rows = ZC_SMALL_ROWS;
    /* units: one per device, or WISP_GPU_PARTS round-robin; shards use one per device they land on */
    int nunits = ndev;
    if (s->parts_env > ndev) nunits = s->parts_env;
    else if (s->shards_env >= 2) nunits = s->shards_env < ndev ? s->shards_env : ndev;
    s->nunits = nunits;
    for (int i = 0; i < nunits; i++) {
        int st = unit_create(s, &s->u[i], devs[i % ndev], NULL);
        if (st != WISP_OK) {
            wisp__cuda_session_close(s);
            return st;
        }
    }
    *out = s;
    return WISP_OK;
}

int wisp__cuda_score(void *vs, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats)
{
    sess *s = vs;
    if (s && s->qlen)
        return wisp__fail(WISP_ESTATE, "cuda: score: %d submitted batches are still in flight", s->qlen);
    if (b && b->rows == 0 && s && m) return WISP_OK;
    struct job j;
    NVTX_PUSH("wisp score: copies + kernels enqueued");
    int st = wisp__cuda_job_start(s, &j, m, b, out, stats, "score", 0);
    NVTX_POP();
    if (st != WISP_OK) return st;
    NVTX_PUSH("wisp score: sync");
    st = wisp__cuda_job_finish(&j, stats, 0);
    NVTX_POP();
    return st;
}

/* slot k of the session: created on first use, sharing the session's streams */
static int slot_get(sess *root, int k, sess **out)
{
    sess *s = root->slot[k];
    if (!s) {
        s = wisp__calloc(1, sizeof *s);
        if (!s) return wisp__fail(WISP_ENOMEM, "cuda: out of host memory for a submit slot");
        s->ctx = root->ctx;
        s->root = root;
        s->ndev = root->ndev;
        memcpy(s->devs, root->devs, sizeof s->devs);
        s->shards_env = root->shards_env;
        s->parts_env = root->parts_env;
        s->chunks_env = root->chunks_env;
        s->lanes_env = root->lanes_env;
        s->timing = root->timing;
        s->graphs = root->graphs;
        s->inline_on = root->inline_on;
        s->zc_rows = root->zc_rows;
        s->sharding = root->sharding;
        s->table_max = root->table_max;
        s->nunits = root->nunits;
        for (int i = 0; i < s->nunits; i++) {
            int st = unit_create(s, &s->u[i], root->u[i].dev, &root->u[i]);
            if (st != WISP_OK) {
                sess_free_one(s);
                return st;
            }
        }
        root->slot[k] = s;
    }
    if (!s->job && !(s->job = wisp__calloc(1, sizeof *s->job)))
        return wisp__fail(WISP_ENOMEM, "cuda: out of host memory for a submit slot");
    *out = s;
    return WISP_OK;
}

int wisp__cuda_submit(void *vs, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats)
{
    sess *root = vs;
    if (!root) return wisp__fail(WISP_EINVAL, "cuda: submit: session is NULL");
    if (root->qlen >= WISP_MAX_IN_FLIGHT)
        return wisp__fail(WISP_ESTATE, "cuda: submit: %d batches are already in flight", root->qlen);
    sess *s = NULL;
    int st = slot_get(root, (root->qhead + root->qlen) % WISP_MAX_IN_FLIGHT, &s);
    if (st != WISP_OK) return st;
    struct job *j = s->job;
    NVTX_PUSH("wisp submit");
    st = wisp__cuda_job_start(s, j, m, b, out, stats, "submit", 1);
    NVTX_POP();
    if (st != WISP_OK) return st;               /* nothing was enqueued */
    /* waits for what went in, reports the failure */
    if (j->err != cudaSuccess) return wisp__cuda_job_finish(j, stats, 0);
    stats[WISP_STAT_NS_H2D] += j->ns_stage;     /* host packing, done by now */
    root->qlen++;
    return WISP_OK;
}

int wisp__cuda_wait(void *vs, uint64_t *stats)
{
    sess *root = vs;
    if (!root || !root->qlen) return wisp__fail(WISP_ESTATE, "cuda: wait: no batch is in flight");
    sess *s = root->slot[root->qhead];
    root->qhead = (root->qhead + 1) % WISP_MAX_IN_FLIGHT;
    root->qlen--;
    NVTX_PUSH("wisp wait");
    int st = wisp__cuda_job_finish(s->job, stats, 1);
    NVTX_POP();
    return st;
}

#endif /* WISP_HAVE_CUDA */
