/* cuda_score.c — scoring a batch on the CUDA backend: how a batch moves; a job started, waited for, collected. */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"

#include <math.h>
#include <string.h>

/* How a batch moves (the plan: cuda_plan.c; the copies and launches: cuda_launch.c; the measurements
 * behind the numbers: kernels/README.md):
 *
 * - Rows are split across "units". A unit is one device with its own two
 *   streams (copies in, compute + copies out), device buffer and events. On
 *   "gpus" there is one unit per device and the rows are split by nnz;
 *   WISP_GPU_PARTS=k makes k units round-robin over the devices (k > ndev puts
 *   several units on one GPU, which is how the split path is tested on one).
 * - Sharding (a table split by id range): WISP_GPU_SHARDS=S makes S shards of
 *   the table, shard s on unit s % units. It is chosen automatically when
 *   the table is larger than one device's share (WISP_GPU_TABLE_MB, default
 *   80% of the smallest device's memory) and the session has several units.
 *   Two ways to score against shards (WISP_GPU_SHARDING):
 *   peer (the default where every pair of the session's devices has peer
 *   access, and always on one device): the rows are split over the units as
 *   without shards, and each kernel reads every weight where it lives, its own
 *   shard locally and the others from the peers' memory (NVLink); shard
 *   ranges are powers of two so an id's shard is its high bits. Each row
 *   crosses PCIe once and there is nothing to add up.
 *   broadcast (the fallback without peer access): every unit scores all rows
 *   against its own shards into partial sums, and the host adds them up; every
 *   row crosses PCIe once per unit.
 * - Each unit ships its slice in chunks of rows: chunk c+1 crosses PCIe on
 *   the copy stream while chunk c is scored and chunk c-1 comes back on the
 *   compute stream (double buffering inside one batch).
 * - Batch arrays in pinned memory are copied straight from where they are;
 *   small batches, and batches in pageable memory, are first packed into a
 *   pinned staging buffer the session owns (one copy moves a small batch).
 *   A large batch goes as its head (value offsets, row offsets, values)
 *   first, then its ids one copy a chunk. An owned batch keeps its arrays
 *   in one pinned arena (batch.c): one pointer query, and the device buffer
 *   mirrors the arena's offsets so the head's neighbours go in one copy when
 *   the gaps between them are small.
 * - Tiny batches (inline) wait on per-row answer slots the kernel writes in
 *   mapped host memory, not on events; blocking calls sync the streams
 *   (nothing else is on them) instead of recording end events.
 * - Zero-copy (WISP_GPU_ZEROCOPY=1: batches of up to 4096 rows; =all: every
 *   batch): the kernel reads the rows straight from mapped pinned host
 *   memory and writes the probabilities there; no copies at all.
 * - Submit/wait (wisp_session_submit): up to WISP_MAX_IN_FLIGHT batches in
 *   flight, each in a slot (its own device buffer, staging, events, graphs)
 *   sharing the units' two streams: batch i+1's copies queue right behind
 *   batch i's on the copy stream and cross PCIe while batch i is scored and
 *   its answers come back on the compute stream. A wait syncs on the
 *   batch's own end events, never on the streams. The blocking path is
 *   slot 0 with nothing in flight.
 * - Stage times come from CUDA events; ns_sync is the wall time from the
 *   first enqueue to the end of the synchronisation not covered by the
 *   device stages (launch gaps and waiting); for a submitted batch, the time
 *   its wait was blocked. With chunks, stages overlap. */

float wisp__cuda_elapsed_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return ms > 0 ? ms : 0;
}

/* score_cpu.c's sigmoid, the same operations: exp of a non-positive number
 * only, in double, rounded to float once. */
static float sigmoid_cpu(double z)
{
    if (z >= 0) return (float)(1.0 / (1.0 + exp(-z)));
    double e = exp(z);
    return (float)(e / (1.0 + e));
}

/* Broadcast shards: out = sigmoid(bias + the sum of the partial sums), rows
 * [t * per, (t + 1) * per); the partial sums are doubles and are added in
 * double, the sigmoid is the CPU's. */
struct combine { size_t rows, per; float *out; double bias; int nparts; const double *part[MAX_SHARDS]; };

static void combine_task(void *vc, size_t t)
{
    const struct combine *c = vc;
    const size_t a = t * c->per, z = a + c->per < c->rows ? a + c->per : c->rows;
    for (size_t r = a; r < z; r++) {
        double x = c->part[0][r];
        for (int i = 1; i < c->nparts; i++) x += c->part[i][r];
        c->out[r] = sigmoid_cpu(c->bias + x);
    }
}

static int unit_active(const struct job *j, const struct unit *u)
{
    return j->partial || u->r1 > u->r0;
}

/* Check the batch and the model, plan, and enqueue everything; j->t_enq is
 * when the first work went in. A failure before anything was enqueued is
 * returned; a failure while enqueueing is left in j->err for job_finish. */
int wisp__cuda_job_start(sess *s, struct job *j, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats,
                     const char *fn, int submitted)
{
    if (!s || !m || !b || (!out && b->rows))
        return wisp__fail(WISP_EINVAL, "cuda: %s: %s is NULL", fn,
                          !s ? "session" : !m ? "model" : !b ? "batch" : "out");
    const size_t rows = b->rows;
    const uint32_t *rp = b->indptr;
    if (rows == 0 || rows > WISP_MAX_ROWS || !rp)
        return wisp__fail(WISP_EINVAL, "cuda: %s: a batch of %zu rows%s", fn, rows,
                         !rows ? " (empty batches are the caller's)"
                         : rp ? " is over the limit" : " has no row offsets");
    if (rp[rows] < rp[0])
        return wisp__fail(WISP_EINVAL, "cuda: %s: row offsets decrease (indptr[0] = %u, indptr[%zu] = %u)", fn, rp[0],
                          rows, rp[rows]);
    const int vm = b->value_mode;
    if ((rp[rows] > rp[0] && !b->ids) || vm < WISP_VALUES_NONE || vm > WISP_VALUES_MIXED
        || (vm == WISP_VALUES_MIXED && (!b->val_ptr || (b->val_ptr[rows] < b->val_ptr[0])))
        || (vm != WISP_VALUES_NONE && !b->vals
            && (vm == WISP_VALUES_ALL ? rp[rows] > rp[0] : b->val_ptr[rows] > b->val_ptr[0])))
        return wisp__fail(WISP_EINVAL, "cuda: %s: the batch's arrays do not match its value mode %d", fn, vm);
    if (m->num_features > WISP_MAX_FEATURES || (m->num_features && !m->weights)
        || m->dtype < WISP_F32 || m->dtype > WISP_I8)
        return wisp__fail(WISP_EINVAL, "cuda: %s: the model has no usable weight table", fn);

    memset(j, 0, sizeof *j);
    j->s = s;
    j->m = m;
    j->b = b;
    j->out = out;
    j->vm = vm;
    j->dtype = m->dtype;
    j->nf = (uint32_t)m->num_features;
    j->stats = stats;
    j->err = cudaSuccess;
    j->lanes = s->lanes_env ? s->lanes_env : wisp_k_lanes_for((double)(rp[rows] - rp[0]) / (double)rows);
    j->submitted = submitted;
    int st = wisp__cuda_plan(j);
    if (st != WISP_OK) return st;               /* nothing was enqueued */
    /* a tiny batch waits on its blocks' flags, not on events (unless timed) */
    j->poll = j->inl && !use_timing(j);

    j->t_enq = wisp__now_ns();
    for (int k = 0; k < s->nunits && j->err == cudaSuccess; k++)
        if (unit_active(j, &s->u[k])) wisp__cuda_enqueue_unit(j, &s->u[k], 0);
    for (int k = 0; k < s->nunits && j->err == cudaSuccess; k++)
        if (unit_active(j, &s->u[k])) wisp__cuda_enqueue_unit(j, &s->u[k], 1);
    return WISP_OK;
}

/* Slot r of a tiny batch holds row r's answer once its tag is seq (wisp_ktiny.slots). */
static inline int slot_done(uint64_t v, uint32_t seq) { return (uint32_t)(v >> (32 + WISP_TINY_OOR_BITS)) == seq; }

/* Wait until every row's slot of unit u's tiny kernel carries this batch's seq (each
 * slot is one 8-byte store of the answer and its tag: nothing else to wait for). The
 * stream is asked now and then, so a kernel that failed is reported rather than
 * waited for forever. */
static cudaError_t poll_slots(sess *s, struct unit *u)
{
    const volatile uint64_t *sl = (const volatile uint64_t *)(s->stage + u->soff + u->L.flg);
    const uint32_t seq = u->seq;
    const size_t rows = u->r1 - u->r0;
    size_t i = 0;
    for (uint64_t spin = 1;; spin++) {
        while (i < rows && slot_done(sl[i], seq)) i++;
        if (i == rows) break;
        if ((spin & 1023) == 0) {
            cudaError_t e = cudaStreamQuery(u->comp);
            if (e == cudaErrorNotReady) continue;
            if (e != cudaSuccess) return e;
            /* the stream is done: every slot must be filled now */
            while (i < rows && slot_done(sl[i], seq)) i++;
            if (i != rows) return cudaErrorNotReady;   /* not sticky: the batch moves to the CPU */
            break;
        }
    }
    return cudaSuccess;
}

/* Wait for the batch of j (enqueued by wisp__cuda_job_start), gather its answers into
 * its out, add its statistics. async: the batch was submitted earlier
 * (its host staging time was counted then; ns_sync is the time blocked here). */
int wisp__cuda_job_finish(struct job *j, uint64_t *stats, int async)
{
    sess *s = j->s;
    wisp_model *m = j->m;
    float *out = j->out;
    const size_t rows = j->b->rows;
    const uint64_t t_wait = wisp__now_ns();
    j->stats = stats;
    /* answers bound for pageable memory: copied chunk by chunk as they land,
     * while later chunks are still in flight */
    for (int k = 0; k < s->nunits && j->err == cudaSuccess; k++) {
        struct unit *u = &s->u[k];
        if (!unit_active(j, u) || !u->host_out) continue;
        const char *hres = (j->staged ? s->stage + u->soff + u->L.cnt : s->stage + u->soff) + (u->L.out - u->L.cnt);
        for (int c = 0; c < u->nchunks; c++) {
            if (cudaEventSynchronize(u->done[c]) != cudaSuccess) break;    /* the sync below reports it */
            memcpy(out + u->r0 + u->cb[c], hres + u->cb[c] * 4, (u->cb[c + 1] - u->cb[c]) * 4);
        }
    }
    /* the batch's end on each stream; after a failure while enqueueing (the
     * end events may not be recorded), the whole streams */
    const int enq_failed = j->err != cudaSuccess;
    cudaError_t serr = cudaSuccess;
    int sdev = -1;
    for (int k = 0; k < s->nunits; k++) {
        struct unit *u = &s->u[k];
        if (!unit_active(j, u)) continue;
        cudaError_t e = cudaSetDevice(u->dev);
        if (!enq_failed && j->poll) {
            if (e == cudaSuccess) e = poll_slots(s, u);
        } else if (enq_failed || !j->submitted) {
            /* after a failure while enqueueing (the end events may not be recorded), or a
             * blocking batch (nothing else is on the streams): the whole streams */
            if (e == cudaSuccess) e = cudaStreamSynchronize(u->comp);
            if (e == cudaSuccess && !j->small && !j->zc) e = cudaStreamSynchronize(u->copy);
        } else {
            if (e == cudaSuccess) e = cudaEventSynchronize(u->fin_comp);
            if (e == cudaSuccess && !j->small && !j->zc) e = cudaEventSynchronize(u->fin_copy);
        }
        if (e != cudaSuccess && serr == cudaSuccess) {
            serr = e;
            sdev = u->dev;
        }
    }
    const uint64_t t_done = wisp__now_ns();
    if (j->err == cudaSuccess && serr != cudaSuccess) {
        j->err = serr;
        j->err_dev = sdev;
        j->err_what = "scoring a batch";
    }
    if (j->err != cudaSuccess) {
        cudaError_t e = j->err;
        cudaGetLastError();                     /* clears a recoverable error */
        int sticky = wisp__cuda_is_sticky(e);
        /* nothing of the batch may still be running; does the device still answer? */
        for (int k = 0; k < s->nunits; k++) {
            struct unit *u = &s->u[k];
            if (!unit_active(j, u)) continue;
            cudaError_t q = cudaSetDevice(u->dev);
            if (q == cudaSuccess) q = cudaStreamSynchronize(u->comp);
            if (q == cudaSuccess) q = cudaStreamSynchronize(u->copy);
            if (q != cudaSuccess) {
                if (u->dev == j->err_dev && !sticky) sticky = wisp__cuda_is_sticky(q);
                cudaGetLastError();
            }
        }
        if (sticky) wisp__cuda_mark_unusable(s->ctx, j->err_dev, e);
        int st = wisp__cuda_err_fail(j->err_dev, j->err_what ? j->err_what : "scoring a batch", e);
        if (sticky) wisp__fail_context(st, "sticky CUDA error, gpu:%d is marked unusable", j->err_dev);
        return st;
    }

    /* answers: already in out, or in the staging buffer; shards add up here */
    uint64_t oor = 0;
    for (int k = 0; k < s->nunits; k++) {
        struct unit *u = &s->u[k];
        if (!unit_active(j, u)) continue;
        const size_t urows = u->r1 - u->r0;
        const struct lay *L = &u->L;
        if (j->poll) {
            /* the tiny kernel's slots: the probability's bits and the row's out-of-range ids */
            const volatile uint64_t *sl = (const volatile uint64_t *)(s->stage + u->soff + L->flg);
            for (size_t r = 0; r < urows; r++) {
                const uint64_t v = sl[r];
                const uint32_t bits = (uint32_t)v;
                memcpy(out + u->r0 + r, &bits, 4);
                oor += (v >> 32) & ((1u << WISP_TINY_OOR_BITS) - 1u);
            }
            continue;
        }
        if (j->zc) {
            const char *h = s->stage + u->soff;
            memcpy(out + u->r0, h + L->out, urows * 4);
            const uint32_t *o = (const uint32_t *)(h + L->oorr);
            for (size_t r = 0; r < urows; r++) oor += o[r];
            continue;
        }
        const char *hout = j->staged ? s->stage + u->soff + L->cnt : s->stage + u->soff;
        uint64_t c;
        memcpy(&c, hout, sizeof c);
        oor += c;
        if (!j->partial && !u->direct_out && !u->host_out) memcpy(out + u->r0, hout + (L->out - L->cnt), urows * 4);
    }
    if (j->partial) {
        const uint64_t t_comb = wisp__now_ns();
        struct combine c = { .rows = rows, .out = out, .bias = m->bias, .nparts = j->nshards };
        for (int sh = 0; sh < j->nshards; sh++) {
            const struct unit *u = &s->u[sh % s->nunits];
            const size_t i = (size_t)(sh / s->nunits);
            const char *hout = (j->staged ? s->stage + u->soff + u->L.cnt : s->stage + u->soff) + (u->L.out - u->L.cnt);
            c.part[sh] = (const double *)hout + i * rows;
        }
        /* over the engine's threads: one core adds 4M rows of 2 shards in ~25 ms (H200 host) */
        const int th = s->ctx->eng ? wisp_engine_threads(s->ctx->eng) : 1;
        size_t tasks = rows >> 16;
        if (tasks > (size_t)th * 2) tasks = (size_t)th * 2;
        if (tasks < 1 || th <= 1) tasks = 1;
        c.per = (rows + tasks - 1) / tasks;
        if (tasks == 1) combine_task(&c, 0);
        else wisp__pool_run(s->ctx->eng->pool, tasks, combine_task, &c);
        j->ns_combine = wisp__now_ns() - t_comb;
    }

    /* statistics: device stages from events (large batches), else the device time as kernel time */
    uint64_t h2d = 0, ker = 0, d2h = 0;
    int timed = 0;
    sess *root = s->root;
    root->nustat = 0;
    for (int k = 0; k < s->nunits; k++) {
        struct unit *u = &s->u[k];
        double *us = root->ustat[root->nustat++];   /* every unit: one with no rows may still hold a shard */
        us[0] = u->dev;
        us[1] = (double)u->r0;
        us[2] = (double)u->r1;
        us[3] = j->sharded ? u->nsh : 0;
        us[4] = j->peer ? 2 : j->partial ? 1 : 0;
        us[5] = (double)u->bytes_h2d;
        for (int i = 6; i < UNIT_STATS; i++) us[i] = 0;
        us[10] = j->ns_combine / 1e6;
        if (!unit_active(j, u) || !u->launched) continue;
        timed = 1;
        double uh = 0, uk = 0, ud = 0;
        us[9] = wisp__cuda_elapsed_ms(u->ev[EV_START], u->ev[EV_END]);
        if (j->zc || j->small) {
            uk = us[9];
        } else {
            uh = wisp__cuda_elapsed_ms(u->ev[EV_START], u->ev[EV_H2D]);
            for (int c = 0; c < u->nchunks; c++) {
                uk += wisp__cuda_elapsed_ms(u->ev[EV_CHUNK + 3 * c], u->ev[EV_CHUNK + 3 * c + 1]);
                ud += wisp__cuda_elapsed_ms(u->ev[EV_CHUNK + 3 * c + 1],
                                            u->ev[c == u->nchunks - 1 ? EV_END : EV_CHUNK + 3 * c + 2]);
            }
        }
        us[6] = uh;
        us[7] = uk;
        us[8] = ud;
        if ((uint64_t)(uh * 1e6) > h2d) h2d = (uint64_t)(uh * 1e6);
        if ((uint64_t)(uk * 1e6) > ker) ker = (uint64_t)(uk * 1e6);
        if ((uint64_t)(ud * 1e6) > d2h) d2h = (uint64_t)(ud * 1e6);
    }
    uint64_t sync;
    if (async) {
        /* the host staging was counted at submit; the time blocked here is the wait */
        const uint64_t waited = t_done - t_wait;
        if (!timed) ker = waited;
        sync = timed ? waited : 0;
        stats[WISP_STAT_NS_H2D] += h2d;
    } else {
        const uint64_t wall = t_done - j->t_enq;
        if (!timed) ker = wall > j->ns_stage ? wall - j->ns_stage : 0;
        const uint64_t staged = h2d + ker + d2h + j->ns_stage;
        sync = wall > staged ? wall - staged : 0;
        stats[WISP_STAT_NS_H2D] += h2d + j->ns_stage;
    }
    stats[WISP_STAT_NS_KERNEL] += ker;
    stats[WISP_STAT_NS_D2H] += d2h;
    stats[WISP_STAT_NS_SYNC] += sync;
    stats[WISP_STAT_BYTES_H2D] += j->bytes_h2d;
    stats[WISP_STAT_BYTES_D2H] += j->bytes_d2h;
    stats[WISP_STAT_OUT_OF_RANGE] += oor;

    /* the timeline hook: the first unit's stages, in ms from the epoch */
    struct unit *u0 = &s->u[0];
    if (root->tl && root->tl_n < root->tl_cap && unit_active(j, u0) && u0->launched) {
        float *e = root->tl + 6 * root->tl_n++;
        for (int i = 0; i < 6; i++) e[i] = -1;
        if (j->zc || j->small) {
            e[2] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_START]);
            e[3] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_END]);
        } else {
            const int last = u0->nchunks - 1;
            e[0] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_START]);
            e[1] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_H2D]);
            e[2] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_CHUNK]);
            e[3] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_CHUNK + 3 * last + 1]);
            e[4] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_CHUNK + 1]);
            e[5] = wisp__cuda_elapsed_ms(root->epoch, u0->ev[EV_END]);
        }
    }
    return WISP_OK;
}

#endif /* WISP_HAVE_CUDA */
