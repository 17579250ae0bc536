/* cuda_hooks.c — the CUDA backend's benchmark and test hooks (declared in wisp_test.h): resident-kernel timing, the
 * per-batch timeline, the per-unit record. */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"
#include "score/score.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- test and benchmark hook (not in wisp.h) ---------------------------------------
 * Run only the score kernel (what = 0) or the random-read probe (what = 1)
 * over batch b held on the device, iters times, each launch timed with CUDA
 * events into ms[i]. The session must have scored a batch on a GPU (so its
 * device state exists); its first device is used. lanes: 0 = automatic.
 * out (may be NULL) receives the last run's probabilities (what = 0). */
int wisp_cuda_time_resident(wisp_session *ws, const wisp_batch *b, int what, int lanes, int iters, float *ms,
                            float *out)
{
    if (!ws || !b || !ms || iters <= 0 || b->rows == 0)
        return wisp__fail(WISP_EINVAL, "wisp_cuda_time_resident: bad arguments");
    sess *s = ws->gpu_sctx;
    if (!s || ws->eng->gpu != wisp__cuda_backend())
        return wisp__fail(WISP_ESTATE, "wisp_cuda_time_resident: the session has not scored on a GPU yet");
    wisp_model *m = ws->model;
    struct unit *u = &s->u[0];
    const size_t rows = b->rows;
    const uint32_t *rp = b->indptr;
    const int vm = b->value_mode;
    const uint32_t nnz = rp[rows] - rp[0];
    const uint32_t nvals = vm == WISP_VALUES_MIXED ? b->val_ptr[rows] - b->val_ptr[0] : vm == WISP_VALUES_ALL ? nnz : 0;
    const uint32_t vbase = vm == WISP_VALUES_MIXED ? b->val_ptr[0] : rp[0];
    cudaError_t e = cudaSetDevice(u->dev);
    if (e != cudaSuccess) return wisp__cuda_err_fail(u->dev, "selecting the device", e);
    uint64_t junk[WISP_STAT_COUNT] = { 0 };
    const void *w = NULL;
    int st = wisp__cuda_get_weights(s->ctx, m, u->dev, 0, (uint32_t)m->num_features, &w, junk);
    if (st != WISP_OK) return st;
    struct lay L;
    wisp__cuda_layout(&L, rows, nnz, nvals, vm, 1, 0, 4);
    st = wisp__cuda_grow_dbuf(s, u, L.total);
    if (st != WISP_OK) return st;
    char *d = u->dbuf;
    e = cudaMemcpy(d + L.rp, rp, (rows + 1) * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && nnz) e = cudaMemcpy(d + L.ids, b->ids + rp[0], (size_t)nnz * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && vm == WISP_VALUES_MIXED)
        e = cudaMemcpy(d + L.vp, b->val_ptr, (rows + 1) * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && nvals)
        e = cudaMemcpy(d + L.vals, b->vals + vbase, (size_t)nvals * 4, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemset(d + L.cnt, 0, 16);
    float *sink = NULL;
    if (e == cudaSuccess && what == 1) e = cudaMalloc((void **)&sink, (size_t)wisp_k_probe_blocks() * sizeof(float));
    wisp_kparams p;
    memset(&p, 0, sizeof p);
    p.indptr = (const uint32_t *)(d + L.rp);
    p.ids = (const uint32_t *)(d + L.ids);
    p.val_ptr = vm == WISP_VALUES_MIXED ? (const uint32_t *)(d + L.vp) : NULL;
    p.vals = vm != WISP_VALUES_NONE ? (const float *)(d + L.vals) : NULL;
    p.weights = w;
    p.out = (float *)(d + L.out);
    p.oor = (unsigned long long *)(d + L.cnt);
    p.rows = (uint32_t)rows;
    p.ptr_base = rp[0];
    p.val_base = vbase;
    p.nnz = nnz;
    p.nvals = nvals;
    p.id_span = (uint32_t)m->num_features;
    p.num_features = (uint32_t)m->num_features;
    p.bias = m->bias;
    p.scale = m->dtype == WISP_I8 ? (double)m->scale : 1.0;
    if (!lanes) lanes = wisp_k_lanes_for((double)nnz / (double)rows);
    for (int i = 0; i < iters && e == cudaSuccess; i++) {
        e = cudaEventRecord(u->ev[EV_START], u->comp);
        if (e == cudaSuccess)
            e = what == 1 ? (cudaError_t)wisp_k_probe(p.ids, nnz, w, m->dtype, p.id_span ? p.id_span : 1, sink, u->comp)
                          : (cudaError_t)wisp_k_score(&p, m->dtype, vm, lanes, u->comp);
        if (e == cudaSuccess) e = cudaEventRecord(u->ev[EV_END], u->comp);
        if (e == cudaSuccess) e = cudaStreamSynchronize(u->comp);
        ms[i] = wisp__cuda_elapsed_ms(u->ev[EV_START], u->ev[EV_END]);
    }
    if (e == cudaSuccess && out && what == 0) e = cudaMemcpy(out, d + L.out, rows * 4, cudaMemcpyDeviceToHost);
    if (sink) cudaFree(sink);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (wisp__cuda_is_sticky(e)) wisp__cuda_mark_unusable(s->ctx, u->dev, e);
        return wisp__cuda_err_fail(u->dev, "timing a resident batch", e);
    }
    return WISP_OK;
}

/* ---- timeline hook (not in wisp.h; for scripts/bench/bench_gpu.py) -------------------------
 * wisp_cuda_timeline_start: from now on, keep up to cap batches' stage times
 * (clearing what was kept), measured from an event recorded now on the
 * session's first device; call it with nothing in flight, after the session
 * scored on a GPU once. wisp_cuda_timeline_read: copy up to cap batches into
 * ms, 6 floats each (ms from that event; -1 when not measured): h2d start,
 * h2d end, kernel start (first chunk), kernel end (last chunk), d2h start
 * (end of the first chunk's kernel), d2h end. Returns the number kept
 * (>= 0), or a negative status. Small batches have kernel start/end only
 * (and only with WISP_GPU_TIMING=1). */
static sess *hook_sess(wisp_session *ws, const char *fn)
{
    sess *s = ws ? ws->gpu_sctx : NULL;
    if (!s || ws->eng->gpu != wisp__cuda_backend()) {
        wisp__fail(WISP_ESTATE, "%s: the session has not scored on a GPU yet", fn);
        return NULL;
    }
    return s;
}

int wisp_cuda_timeline_start(wisp_session *ws, size_t cap)
{
    sess *s = hook_sess(ws, "wisp_cuda_timeline_start");
    if (!s) return WISP_ESTATE;
    if (cap == 0 || cap > ((size_t)1 << 24)) return wisp__fail(WISP_EINVAL, "wisp_cuda_timeline_start: cap %zu", cap);
    float *tl = wisp__malloc(cap * 6 * sizeof *tl);
    if (!tl) return wisp__fail(WISP_ENOMEM, "wisp_cuda_timeline_start: out of memory");
    cudaError_t e = cudaSetDevice(s->u[0].dev);
    if (e == cudaSuccess && !s->epoch) e = cudaEventCreate(&s->epoch);
    if (e == cudaSuccess) e = cudaEventRecord(s->epoch, s->u[0].comp);
    if (e != cudaSuccess) {
        cudaGetLastError();
        wisp__free(tl);
        return wisp__cuda_err_fail(s->u[0].dev, "recording the timeline's origin", e);
    }
    wisp__free(s->tl);
    s->tl = tl;
    s->tl_cap = cap;
    s->tl_n = 0;
    return WISP_OK;
}

int wisp_cuda_timeline_read(wisp_session *ws, float *ms, size_t cap)
{
    sess *s = hook_sess(ws, "wisp_cuda_timeline_read");
    if (!s) return WISP_ESTATE;
    size_t n = s->tl_n < cap ? s->tl_n : cap;
    if (n && ms) memcpy(ms, s->tl, n * 6 * sizeof *ms);
    return (int)(s->tl_n > (size_t)INT32_MAX ? INT32_MAX : s->tl_n);
}

/* wisp_cuda_units_read (not in wisp.h; for scripts/bench/bench_multigpu.py): the last
 * batch scored, unit by unit: up to cap units, UNIT_STATS (12) doubles each:
 * device, first row, end row, shards held (0: the whole table), mode (0 whole
 * table, 1 broadcast shards, 2 peer shards), bytes copied in, h2d ms, kernel
 * ms, d2h ms (CUDA events; overlapping when chunked; 0 when not timed), span
 * ms (the unit's first event to its last), the host's combine ms (adding
 * partial sums; the batch's), 0. Returns the number of units. */
int wisp_cuda_units_read(wisp_session *ws, double *v, size_t cap)
{
    sess *s = hook_sess(ws, "wisp_cuda_units_read");
    if (!s) return WISP_ESTATE;
    size_t n = (size_t)s->nustat < cap ? (size_t)s->nustat : cap;
    if (n && v) memcpy(v, s->ustat, n * UNIT_STATS * sizeof *v);
    return s->nustat;
}

#endif /* WISP_HAVE_CUDA */
