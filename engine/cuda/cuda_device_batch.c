/* cuda_device_batch.c — wisp_session_score_device: a CSR batch whose arrays are already CUDA device memory, checked
 * row by row and scored on the GPU that holds them, on the caller's stream (kernels/score_device.cu), or copied to
 * pinned host memory, checked by the same rules and scored on the session's device (CUDA builds;
 * engine/cuda/cuda_stub.c answers WISP_ENODEV otherwise). */
/*
 * Two paths, one contract (wisp.h):
 * - the device path: the session is placed on the GPU that holds indptr and has nothing
 *   in flight. On the caller's stream: indptr[rows] is read (4 or 8 bytes: it sizes the
 *   launch and must be checked before anything is read up to it), the checked kernel
 *   scores every row (its range, width, ids and values checked on the device: a bad row
 *   is NaN plus one record in a compact list), the answers go to the caller's device out
 *   or are copied to its host out, and the two counters (out-of-range ids, bad rows) come
 *   back. Only when there are bad rows are their records (and indptr, for the messages
 *   and the good rows' nnz) copied back. The weights are the session's device copy of
 *   the table (wisp__cuda_weights); a table too large for one device fails there and
 *   the call takes the copy path (a fallback, logged and counted).
 * - the copy path (a "cpu" session, a session on another GPU, submitted batches not yet
 *   waited for, a device failure): the arrays are copied to pinned host memory on the
 *   caller's stream, each row checked by the same rules on the host (check_rows), the good
 *   rows wrapped (in place when every row is good, else compacted) and scored with
 *   wisp_session_score on the session's device.
 * Both give the same answers, the same bad rows and the same messages (bad_message), so
 * spec/c/test_gpu_stream.c compares them with each other and with a host reference.
 */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"
#include "score/score.h"
#include "../../kernels/score_device.cuh"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char FN[] = "wisp_session_score_device";

static int cuda_fail(cudaError_t e, const char *what)
{
    cudaGetLastError();
    return wisp__fail(WISP_EDEVICE, "%s: %s failed: %s (%s)", FN, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* The CUDA device that owns p, or -1 (host memory, or not CUDA's). */
static int device_of(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

static int64_t rp_at(const void *rp, int rp64, size_t r)
{
    return rp64 ? ((const int64_t *)rp)[r] : (int64_t)((const int32_t *)rp)[r];
}

/* ---- the rules, on the host (the kernel applies the same ones) ---------------------------- */

/* The message of a refused row, the same words on both paths. */
static void bad_message(char *buf, size_t cap, const wisp_kdbad *e, const void *hrp, int rp64, uint64_t nnz)
{
    const size_t r = e->row;
    switch (e->code) {
    case WISP_KD_RANGE:
        snprintf(buf, cap, "indptr[%zu] .. indptr[%zu] = %lld .. %lld is not a range inside [0, %llu] (indptr[rows])",
                 r, r + 1, (long long)rp_at(hrp, rp64, r), (long long)rp_at(hrp, rp64, r + 1), (unsigned long long)nnz);
        break;
    case WISP_KD_WIDE:
        snprintf(buf, cap, "%lld features, more than WISP_MAX_ROW_FEATURES (%u)",
                 (long long)(rp_at(hrp, rp64, r + 1) - rp_at(hrp, rp64, r)), WISP_MAX_ROW_FEATURES);
        break;
    case WISP_KD_NEG_ID:
        snprintf(buf, cap, "feature #%u: a negative feature index (%d)", e->pos + 1, (int)e->id);
        break;
    default:
        snprintf(buf, cap, "feature #%u (id %d): value %g is not a finite float32", e->pos + 1, (int)e->id,
                 (double)e->val);
    }
}

/* Row r checked as the kernel checks it: 0 when good, else *e filled. */
static int check_row(size_t r, const void *hrp, int rp64, uint64_t nnz, const int32_t *ids, const float *vals,
                     wisp_kdbad *e)
{
    const int64_t a = rp_at(hrp, rp64, r), b = rp_at(hrp, rp64, r + 1);
    memset(e, 0, sizeof *e);
    e->row = (uint32_t)r;
    if (a < 0 || b < a || b > (int64_t)nnz) e->code = WISP_KD_RANGE;
    else if (b - a > (int64_t)WISP_MAX_ROW_FEATURES) e->code = WISP_KD_WIDE;
    else
        for (int64_t k = a; k < b; k++)
            if (ids[k] < 0 || (vals && !isfinite(vals[k]))) {
                e->pos = (uint32_t)(k - a);
                e->id = ids[k];
                e->val = vals ? vals[k] : 1.f;
                e->code = ids[k] < 0 ? WISP_KD_NEG_ID : WISP_KD_NONFINITE;
                break;
            }
    return e->code;
}

/* The records (sorted by row) as the session's bad rows (wisp_session_bad_row). */
static int keep_records(wisp_session *s, const wisp_kdbad *bad, size_t n, const void *hrp, int rp64, uint64_t nnz)
{
    s->nbad = 0;
    s->bad_msgs_len = 0;
    if (!n) return WISP_OK;
    if (n > s->bad_cap) {
        struct wisp_bad_row *v = wisp__realloc(s->bad, n * sizeof *v);
        if (!v) return wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu bad rows", FN, n);
        s->bad = v;
        s->bad_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        char m[192];
        bad_message(m, sizeof m, &bad[i], hrp, rp64, nnz);
        const size_t len = strlen(m) + 1;
        if (s->bad_msgs_len + len > s->bad_msgs_cap) {
            size_t cap = s->bad_msgs_cap ? s->bad_msgs_cap : 4096;
            while (cap < s->bad_msgs_len + len) cap *= 2;
            if (cap > UINT32_MAX) return wisp__fail(WISP_ELIMIT, "%s: the bad rows' messages take %zu bytes", FN, cap);
            char *v = wisp__realloc(s->bad_msgs, cap);
            if (!v) return wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu bad rows", FN, n);
            s->bad_msgs = v;
            s->bad_msgs_cap = cap;
        }
        memcpy(s->bad_msgs + s->bad_msgs_len, m, len);
        s->bad[i] = (struct wisp_bad_row){ bad[i].row, 0, (uint32_t)s->bad_msgs_len };
        s->bad_msgs_len += len;
    }
    s->nbad = n;
    return WISP_OK;
}

static int cmp_rec(const void *x, const void *y)
{
    const wisp_kdbad *a = x, *b = y;
    return a->row < b->row ? -1 : a->row > b->row;
}

/* indptr[rows] as the batch's feature count: negative or past WISP_MAX_NNZ refuses the call */
static int check_nnz(int64_t nnz, size_t cap, uint64_t *out)
{
    if (nnz < 0) return wisp__fail(WISP_EINVAL, "%s: indptr[rows] = %lld is negative", FN, (long long)nnz);
    if ((uint64_t)nnz > WISP_MAX_NNZ)
        return wisp__fail(WISP_ELIMIT, "%s: indptr[rows] = %lld, more than WISP_MAX_NNZ (%u) features", FN,
                         (long long)nnz, WISP_MAX_NNZ);
    if ((uint64_t)nnz > cap)
        return wisp__fail(WISP_EINVAL, "%s: indptr[rows] = %lld but ids has %zu entries", FN, (long long)nnz, cap);
    *out = (uint64_t)nnz;
    return WISP_OK;
}

/* ---- the copy path ---------------------------------------------------------------------------- */

static int copy_path(wisp_session *s, int dev, size_t rows, const void *indptr, int rp64, const int32_t *ids,
                     const float *vals, size_t cap, cudaStream_t st, float *out, int out_on_device)
{
    const size_t esz = rp64 ? 8 : 4;
    int status = WISP_OK;
    void *hrp = wisp__host_alloc(s->eng, (rows + 1) * esz);
    int32_t *hids = NULL;
    float *hvals = NULL, *hout = NULL, *gout = NULL;
    uint32_t *rp32 = NULL, *cids = NULL;
    float *cvals = NULL;
    wisp_kdbad *bad = NULL;
    size_t nbad = 0;
    wisp_batch *b = NULL;
    uint64_t nnz = 0;
    cudaError_t e = cudaSetDevice(dev);
    if (!hrp) { status = wisp__fail(WISP_ENOMEM, "%s: out of host memory for %zu rows", FN, rows); goto done; }
    if (e == cudaSuccess) e = cudaMemcpyAsync(hrp, indptr, (rows + 1) * esz, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) { status = cuda_fail(e, "reading indptr"); goto done; }
    if ((status = check_nnz(rp_at(hrp, rp64, rows), cap, &nnz)) != WISP_OK) goto done;
    if (nnz && !ids) {
        status = wisp__fail(WISP_EINVAL, "%s: ids is NULL for %llu features", FN, (unsigned long long)nnz);
        goto done;
    }
    if (nnz) {
        hids = wisp__host_alloc(s->eng, nnz * 4);
        hvals = vals ? wisp__host_alloc(s->eng, nnz * 4) : NULL;
        if (!hids || (vals && !hvals)) {
            status = wisp__fail(WISP_ENOMEM, "%s: out of host memory for %llu features", FN, (unsigned long long)nnz);
            goto done;
        }
        e = cudaMemcpyAsync(hids, ids, nnz * 4, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess && vals) e = cudaMemcpyAsync(hvals, vals, nnz * 4, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess) { status = cuda_fail(e, "reading ids and values"); goto done; }
    }
    /* the rules, row by row; the good rows in place when all are good and indptr is a
     * 32-bit CSR from 0, else compacted into fresh arrays */
    wisp_kdbad rec;
    size_t ngood_nnz = 0;
    for (size_t r = 0; r < rows; r++) {
        if (!check_row(r, hrp, rp64, nnz, hids, hvals, &rec)) continue;
        if (!bad && !(bad = malloc(rows * sizeof *bad))) {
            status = wisp__fail(WISP_ENOMEM, "%s: out of memory for bad rows", FN);
            goto done;
        }
        bad[nbad++] = rec;
    }
    const size_t ngood = rows - nbad;
    if (!nbad && !rp64 && ((const int32_t *)hrp)[0] == 0) {
        rp32 = hrp;
        cids = (uint32_t *)hids;
        cvals = hvals;
        ngood_nnz = nnz;
    } else {
        rp32 = malloc((ngood + 1) * sizeof *rp32);
        if (!rp32) { status = wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu rows", FN, rows); goto done; }
        size_t j = 0, nb = 0;
        rp32[0] = 0;
        for (size_t r = 0; r < rows; r++) {
            if (nb < nbad && bad[nb].row == r) { nb++; continue; }
            ngood_nnz += (size_t)(rp_at(hrp, rp64, r + 1) - rp_at(hrp, rp64, r));
            rp32[++j] = (uint32_t)ngood_nnz;
        }
        cids = malloc((ngood_nnz ? ngood_nnz : 1) * 4);
        cvals = vals ? malloc((ngood_nnz ? ngood_nnz : 1) * 4) : NULL;
        if (!cids || (vals && !cvals)) {
            status = wisp__fail(WISP_ENOMEM, "%s: out of memory compacting the good rows", FN);
            goto done;
        }
        j = 0; nb = 0;
        for (size_t r = 0; r < rows; r++) {
            if (nb < nbad && bad[nb].row == r) { nb++; continue; }
            const int64_t a = rp_at(hrp, rp64, r), n = rp_at(hrp, rp64, r + 1) - a;
            if (n) memcpy(cids + rp32[j], hids + a, (size_t)n * 4);
            if (n && vals) memcpy(cvals + rp32[j], hvals + a, (size_t)n * 4);
            j++;
        }
    }
    if ((status = wisp_batch_wrap(s->eng, ngood, rp32, cids, NULL, cvals, &b)) != WISP_OK) goto done;
    hout = out_on_device ? wisp__host_alloc(s->eng, rows * 4) : out;
    gout = nbad ? malloc((ngood ? ngood : 1) * 4) : hout;
    if (!hout || !gout) {
        status = wisp__fail(WISP_ENOMEM, "%s: out of host memory for %zu answers", FN, rows);
        goto done;
    }
    if ((status = wisp_session_score(s, b, gout)) != WISP_OK) goto done;
    if (nbad) {
        for (size_t r = 0, j = 0, nb = 0; r < rows; r++) {
            if (nb < nbad && bad[nb].row == r) { hout[r] = NAN; nb++; }
            else hout[r] = gout[j++];
        }
        s->stats[WISP_STAT_ROWS] += nbad;
        s->stats[WISP_STAT_BAD_ROWS] += nbad;
        if (s->profiling) { s->last[WISP_STAT_ROWS] += nbad; s->last[WISP_STAT_BAD_ROWS] += nbad; }
    }
    if ((status = keep_records(s, bad, nbad, hrp, rp64, nnz)) != WISP_OK) goto done;
    if (out_on_device) {
        e = cudaSetDevice(dev);
        if (e == cudaSuccess) e = cudaMemcpyAsync(out, hout, rows * 4, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess) status = cuda_fail(e, "writing the answers");
    }
done:
    if (status != WISP_OK) s->nbad = 0;
    wisp_batch_free(b);
    if (gout && gout != hout) free(gout);
    if (hout && hout != out) wisp__host_free(s->eng, hout);
    if (rp32 && rp32 != hrp) free(rp32);
    if (cids && cids != (uint32_t *)hids) free(cids);
    if (cvals && cvals != hvals) free(cvals);
    free(bad);
    wisp__host_free(s->eng, hrp);
    wisp__host_free(s->eng, hids);
    wisp__host_free(s->eng, hvals);
    return status;
}

/* ---- the device path --------------------------------------------------------------------------- */

void wisp__cuda_dv_free(sess *s)
{
    for (int k = 0; k < WISP_MAX_GPUS; k++) {
        struct dvscratch *d = &s->dvs[k];
        if (d->d) {
            if (cudaSetDevice(s->devs[k]) != cudaSuccess) cudaGetLastError();
            if (cudaFree(d->d) != cudaSuccess) cudaGetLastError();
        }
        if (d->h) wisp__cuda_pin_free(s->ctx, d->h);
        memset(d, 0, sizeof *d);
    }
}

/* The session's backend state when it is placed on GPUs that are all usable (opened on
 * first use, as session.c does); NULL otherwise. */
static sess *backend_of(wisp_session *ws)
{
    wisp_engine *eng = ws->eng;
    wisp__session_auto_refresh(ws, true);   /* "auto" with the data on a GPU: the GPUs now */
    const wisp_backend *be = eng->gpu;
    if (ws->kind == WISP_PLACE_CPU || ws->ngpu == 0 || !be || ws->npend) return NULL;
    for (int i = 0; i < ws->ngpu; i++)
        if (!be->device_usable(eng->gpu_ctx, ws->gpus[i])) return NULL;
    if (!ws->gpu_sctx) {
        if (ws->gpu_open_failed) return NULL;
        if (be->session_open(eng->gpu_ctx, ws->gpus, ws->ngpu, &ws->gpu_sctx) != WISP_OK) {
            ws->gpu_sctx = NULL;
            ws->gpu_open_failed = true;
            wisp__log(eng, WISP_LOG_WARN, "cannot use device '%s' (%s); scoring runs on the CPU", ws->device,
                      wisp_errmsg());
            return NULL;
        }
    }
    return ws->gpu_sctx;
}

#define DV_ALIGN(n) (((n) + 255) & ~(size_t)255)

/* WISP_DEVICE_OUT_MAPPED=1 (an experiment, off by default): a host out in mapped pinned
 * memory (wisp_engine_host_alloc's) is written by the kernel itself over PCIe, with no copy
 * after it; bench_python --gpu times the C peer both ways. */
static int mapped_out_wanted(void)
{
    static int v = -1;
    int x = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (x < 0) {
        const char *e = getenv("WISP_DEVICE_OUT_MAPPED");
        x = e && e[0] == '1';
        __atomic_store_n(&v, x, __ATOMIC_RELAXED);
    }
    return x;
}

static int device_path(wisp_session *ws, sess *bs, int k, size_t rows, const void *indptr, int rp64,
                       const int32_t *ids, const float *vals, size_t cap, cudaStream_t st, float *out,
                       int out_on_device)
{
    const int dev = bs->devs[k];
    const size_t esz = rp64 ? 8 : 4;
    uint64_t *stats = ws->stats;
    wisp_model *m = ws->model;
    const void *w = NULL;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) return wisp__cuda_failed(bs, k, e, "selecting the arrays' device");
    int status = wisp__cuda_weights(bs, k, m, &w, stats);
    if (status != WISP_OK) return status == WISP_ENOMEM ? status : WISP_EDEVICE;
    if ((e = cudaSetDevice(dev)) != cudaSuccess) return wisp__cuda_failed(bs, k, e, "selecting the arrays' device");
    /* scratch: [answers for a host out] [bad-row records] [counters] */
    struct dvscratch *d = &bs->dvs[k];
    const size_t o_out = 0, o_bad = out_on_device ? 0 : DV_ALIGN(rows * 4);
    const size_t o_cnt = o_bad + DV_ALIGN(rows * sizeof(wisp_kdbad)), need = o_cnt + 64;
    if (d->cap < need) {
        if (d->d && cudaFree(d->d) != cudaSuccess) cudaGetLastError();
        d->d = NULL;
        d->cap = 0;
        const size_t grow = need + need / 4;
        if ((e = cudaMalloc(&d->d, grow)) != cudaSuccess) {
            d->d = NULL;
            return wisp__cuda_failed(bs, k, e, "allocating scratch for the answers");
        }
        d->cap = grow;
    }
    if (!d->h && !(d->h = wisp__cuda_pin_alloc(bs->ctx, 64)))
        return wisp__fail(WISP_EDEVICE, "%s: no pinned host memory for the counters", FN);
    char *db = d->d;
    volatile unsigned long long *h = d->h;     /* [0] indptr[rows], [1] out-of-range ids, [2] bad rows, [3] indptr[0] */
    unsigned long long *cnt = (unsigned long long *)(db + o_cnt);
    /* indptr[rows] first, in the caller's stream order: it bounds every read after it */
    uint64_t t0 = wisp__now_ns();
    h[0] = h[3] = 0;
    e = cudaMemcpyAsync((void *)h, (const char *)indptr + rows * esz, esz, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaMemcpyAsync((void *)(h + 3), indptr, esz, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaMemsetAsync(cnt, 0, 2 * sizeof *cnt, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return wisp__cuda_failed(bs, k, e, "reading indptr[rows]");
    const int64_t last = rp64 ? (int64_t)h[0] : (int64_t)(int32_t)(uint32_t)h[0];
    uint64_t nnz = 0;
    if ((status = check_nnz(last, cap, &nnz)) != WISP_OK) return status;
    if (nnz && !ids) return wisp__fail(WISP_EINVAL, "%s: ids is NULL for %llu features", FN, (unsigned long long)nnz);
    uint64_t t1 = wisp__now_ns();
    void *mapped = NULL;
    const int direct = !out_on_device && mapped_out_wanted() && wisp__cuda_mapped(out, &mapped) && mapped;
    wisp_kdev p = {
        .indptr = indptr, .rp64 = rp64, .ids = ids, .vals = vals, .weights = w,
        .out = out_on_device ? out : direct ? (float *)mapped : (float *)(db + o_out),
        .bad = (wisp_kdbad *)(db + o_bad), .cnt = cnt,
        .rows = (uint32_t)rows, .nnz = (uint32_t)nnz, .num_features = (uint32_t)m->num_features,
        .bias = m->bias, .scale = m->dtype == WISP_I8 ? (double)m->scale : 1.0,
    };
    int lanes = bs->lanes_env ? bs->lanes_env : 0;
    e = (cudaError_t)wisp_k_score_device(&p, m->dtype, lanes, st);
    if (e == cudaSuccess && !out_on_device && !direct)
        e = cudaMemcpyAsync(out, p.out, rows * 4, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaMemcpyAsync((void *)(h + 1), cnt, 2 * sizeof *cnt, cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) return wisp__cuda_failed(bs, k, e, "scoring the batch");
    uint64_t t2 = wisp__now_ns();
    const uint64_t oor = h[1];
    size_t nbad = h[2] < rows ? (size_t)h[2] : rows;
    uint64_t good_nnz = nnz;
    wisp_kdbad *bad = NULL;
    void *hrp = NULL;
    if (nbad) {
        /* the refused rows' records, and indptr for their messages and the good rows' nnz */
        bad = malloc(nbad * sizeof *bad);
        hrp = wisp__host_alloc(ws->eng, (rows + 1) * esz);
        if (!bad || !hrp) {
            free(bad);
            wisp__host_free(ws->eng, hrp);
            return wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu bad rows", FN, nbad);
        }
        e = cudaMemcpyAsync(bad, p.bad, nbad * sizeof *bad, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaMemcpyAsync(hrp, indptr, (rows + 1) * esz, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess) {
            free(bad);
            wisp__host_free(ws->eng, hrp);
            return wisp__cuda_failed(bs, k, e, "reading the bad rows");
        }
        qsort(bad, nbad, sizeof *bad, cmp_rec);
        good_nnz = 0;
        for (size_t r = 0, nb = 0; r < rows; r++) {
            if (nb < nbad && bad[nb].row == r) { nb++; continue; }
            good_nnz += (uint64_t)(rp_at(hrp, rp64, r + 1) - rp_at(hrp, rp64, r));
        }
    } else {
        /* every row good: the ranges are ordered, so their features are indptr[rows] - indptr[0] */
        const int64_t first = rp64 ? (int64_t)h[3] : (int64_t)(int32_t)(uint32_t)h[3];
        good_nnz = nnz - (uint64_t)first;
    }
    status = keep_records(ws, bad, nbad, hrp, rp64, nnz);
    free(bad);
    wisp__host_free(ws->eng, hrp);
    uint64_t t3 = wisp__now_ns();
    stats[WISP_STAT_BATCHES]++;
    stats[WISP_STAT_ROWS] += rows;
    stats[WISP_STAT_NNZ] += good_nnz;
    stats[WISP_STAT_OUT_OF_RANGE] += oor;
    stats[WISP_STAT_BAD_ROWS] += nbad;
    stats[WISP_STAT_NS_SYNC] += t1 - t0;          /* waiting for the caller's stream and indptr[rows] */
    stats[WISP_STAT_NS_KERNEL] += t2 - t1;        /* kernel + the answers' copy, as one span */
    stats[WISP_STAT_NS_D2H] += t3 - t2;           /* the bad rows' records and their messages */
    stats[WISP_STAT_BYTES_D2H] += 2 * esz + 16 + (out_on_device ? 0 : rows * 4)
                                  + (nbad ? nbad * sizeof(wisp_kdbad) + (rows + 1) * esz : 0);
    snprintf(ws->last_device, sizeof ws->last_device, "gpu:%d", dev);
    return status;
}

int wisp_session_score_device(wisp_session *s, size_t rows, const void *indptr, int indptr_bits, const int32_t *ids,
                              const float *vals, void *stream, float *out, int out_on_device)
{
    return wisp_session_score_device_n(s, rows, indptr, indptr_bits, ids, vals, SIZE_MAX, stream, out, out_on_device);
}

int wisp_session_score_device_n(wisp_session *s, size_t rows, const void *indptr, int indptr_bits, const int32_t *ids,
                                const float *vals, size_t cap, void *stream, float *out, int out_on_device)
{
    if (s) s->nbad = 0;
    if (!s) return wisp__fail(WISP_EINVAL, "%s: session is NULL", FN);
    if (indptr_bits != 32 && indptr_bits != 64)
        return wisp__fail(WISP_EINVAL, "%s: indptr_bits is %d (32 or 64)", FN, indptr_bits);
    if (rows > WISP_MAX_ROWS)
        return wisp__fail(WISP_ELIMIT, "%s: %zu rows, more than WISP_MAX_ROWS (%u)", FN, rows, WISP_MAX_ROWS);
    if (rows == 0) return WISP_OK;
    if (!indptr || !out) return wisp__fail(WISP_EINVAL, "%s: %s is NULL", FN, !indptr ? "indptr" : "out");
    if (wisp_engine_gpu_count(s->eng) == 0)
        return wisp__fail(WISP_ENODEV, "%s: no usable GPU (%s)", FN, wisp_engine_gpu_status(s->eng));
    const int dev = device_of(indptr);
    if (dev < 0) return wisp__fail(WISP_EINVAL, "%s: indptr is not CUDA device memory", FN);
    if (out_on_device && device_of(out) != dev)
        return wisp__fail(WISP_EINVAL, "%s: out is not memory of gpu:%d (indptr's)", FN, dev);
    if (ids && device_of(ids) != dev)
        return wisp__fail(WISP_EINVAL, "%s: ids is not memory of gpu:%d (indptr's)", FN, dev);
    if (vals && device_of(vals) != dev)
        return wisp__fail(WISP_EINVAL, "%s: vals is not memory of gpu:%d (indptr's)", FN, dev);
    const int rp64 = indptr_bits == 64;
    cudaStream_t st = (cudaStream_t)stream;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cudaGetLastError();
    uint64_t t0 = wisp__now_ns();
    uint64_t before[WISP_STAT_COUNT];
    memcpy(before, s->stats, sizeof before);
    int status = WISP_EDEVICE, k = -1;
    sess *bs = backend_of(s);
    for (int i = 0; bs && i < bs->ndev; i++)
        if (bs->devs[i] == dev) k = i;
    if (bs && k >= 0) {
        status = device_path(s, bs, k, rows, indptr, rp64, ids, vals, cap, st, out, out_on_device);
        if (status == WISP_EDEVICE) {
            wisp__log(s->eng, WISP_LOG_WARN,
                      "device '%s' failed on %zu device-resident rows (%s); they take the copy path",
                     s->device, rows, wisp_errmsg());
            s->stats[WISP_STAT_FALLBACKS]++;
        } else {
            uint64_t total = wisp__now_ns() - t0, staged = 0;
            for (int j = WISP_STAT_NS_TRANSFORM; j <= WISP_STAT_NS_SYNC; j++) staged += s->stats[j] - before[j];
            s->stats[WISP_STAT_NS_TOTAL] += total;
            s->stats[WISP_STAT_NS_OVERHEAD] += total > staged ? total - staged : 0;
            if (s->profiling) {
                for (int j = 0; j < WISP_STAT_COUNT; j++) s->last[j] = s->stats[j] - before[j];
                s->last_start_ns = t0;
            }
        }
    }
    if (status == WISP_EDEVICE) status = copy_path(s, dev, rows, indptr, rp64, ids, vals, cap, st, out, out_on_device);
    if (status != WISP_OK) s->nbad = 0;
    if (cur >= 0 && cudaSetDevice(cur) != cudaSuccess) cudaGetLastError();
    return status == WISP_OK ? WISP_OK : wisp__fail_context(status, "%s", FN);
}

/* ---- wisp_device_alloc / wisp_device_free (wisp.h), wisp__device_sync (the Python extension's) ---- */

int wisp_device_alloc(int dev, size_t n, void **out)
{
    if (!out) return wisp__fail(WISP_EINVAL, "wisp_device_alloc: out is NULL");
    *out = NULL;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) { cudaGetLastError(); ndev = 0; }
    if (ndev == 0) return wisp__fail(WISP_ENODEV, "wisp_device_alloc: no CUDA device");
    if (dev < 0 || dev >= ndev)
        return wisp__fail(WISP_EINVAL, "wisp_device_alloc: gpu:%d does not exist (%d CUDA devices)", dev, ndev);
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cudaGetLastError();
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMalloc(out, n ? n : 1);
    if (cur >= 0 && cudaSetDevice(cur) != cudaSuccess) cudaGetLastError();
    if (e != cudaSuccess) {
        *out = NULL;
        cudaGetLastError();
        return wisp__fail(WISP_EDEVICE, "wisp_device_alloc: %zu bytes on gpu:%d: %s (%s)", n, dev,
                          cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return WISP_OK;
}

void wisp_device_free(int dev, void *p)
{
    if (!p) return;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cudaGetLastError();
    if (cudaSetDevice(dev) != cudaSuccess) cudaGetLastError();
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();
    if (cur >= 0 && cudaSetDevice(cur) != cudaSuccess) cudaGetLastError();
}

/* 1 when CUDA device d's primary context is active (work of the runtime's users, CuPy and
 * PyTorch among them, can be queued there), 0 when not, -1 when the driver cannot say. Asked
 * of libcuda directly (already loaded by the runtime), so asking creates no context. */
static int primary_active(int d)
{
    typedef int (*get_fn)(int *, int);
    typedef int (*state_fn)(int, unsigned *, int *);
    static get_fn dev_get;
    static state_fn ctx_state;
    static int looked;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
        if (h) {
            dev_get = (get_fn)dlsym(h, "cuDeviceGet");
            ctx_state = (state_fn)dlsym(h, "cuDevicePrimaryCtxGetState");
        }
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);   /* h stays open: the runtime holds libcuda anyway */
    }
    int cu = 0, active = 0;
    unsigned flags = 0;
    if (!dev_get || !ctx_state || dev_get(&cu, d) != 0 || ctx_state(cu, &flags, &active) != 0) return -1;
    return active != 0;
}

/* Not in wisp.h (an internal hook for the Python extension, which links libwisp.a: see
 * engine/bindings/python/wisp/_wisp.h): wait until the work queued on CUDA device dev is done, what
 * cudaFree would wait for, before a block is reused instead of freed. dev -1: every device
 * whose primary context is active (a device nobody opened has nothing queued, and is not
 * opened here; every device when the driver cannot say). */
int wisp__device_sync(int dev)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) { cudaGetLastError(); ndev = 0; }
    if (ndev == 0) return wisp__fail(WISP_ENODEV, "wisp__device_sync: no CUDA device");
    if (dev < -1 || dev >= ndev)
        return wisp__fail(WISP_EINVAL, "wisp__device_sync: gpu:%d does not exist (%d CUDA devices)", dev, ndev);
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cudaGetLastError();
    cudaError_t e = cudaSuccess;
    int bad = -1;
    for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? ndev : dev + 1) && e == cudaSuccess; d++) {
        if (dev < 0 && primary_active(d) == 0) continue;
        e = cudaSetDevice(d);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e != cudaSuccess) bad = d;
    }
    if (cur >= 0 && cudaSetDevice(cur) != cudaSuccess) cudaGetLastError();
    if (e != cudaSuccess) {
        cudaGetLastError();
        return wisp__fail(WISP_EDEVICE, "wisp__device_sync: gpu:%d: %s (%s)", bad, cudaGetErrorString(e),
                          cudaGetErrorName(e));
    }
    return WISP_OK;
}

/* ---- test hooks (wisp_test.h): device memory for specs that have no CUDA headers ---- */

int wisp_cuda_test_alloc(int dev, size_t n, void **out)
{
    if (!out) return wisp__fail(WISP_EINVAL, "wisp_cuda_test_alloc: out is NULL");
    *out = NULL;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMalloc(out, n ? n : 1);
    if (e != cudaSuccess) { *out = NULL; return cuda_fail(e, "wisp_cuda_test_alloc"); }
    return WISP_OK;
}

int wisp_cuda_test_copy(void *dst, const void *src, size_t n)
{
    cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
    return e == cudaSuccess ? WISP_OK : cuda_fail(e, "wisp_cuda_test_copy");
}

void wisp_cuda_test_free(void *p)
{
    if (p && cudaFree(p) != cudaSuccess) cudaGetLastError();
}

#endif /* WISP_HAVE_CUDA */
