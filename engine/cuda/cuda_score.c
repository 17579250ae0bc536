/* cuda_score.c — scoring a batch on the CUDA backend: the plan (units, chunks, shards, zero-copy, graphs), copies and kernel launches, and collecting the answers and stage times. */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How a batch moves (see kernels/README.md for the measurements behind the numbers):
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


/* ---- scoring -------------------------------------------------------------------- */

static size_t al(size_t x) { return (x + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* nsh: answer arrays (one per shard held in the broadcast mode); osz: bytes
 * an answer (4: a float probability; 8: a double partial sum, OUT_SIZE). */
void wisp__cuda_layout(struct lay *L, size_t rows, size_t nnz, size_t nvals, int vm, int nsh, int zc, size_t osz)
{
    size_t o = 0;
    L->rp = o;   o = al(o + (rows + 1) * 4);
    L->ids = o;  o = al(o + nnz * 4);
    L->vp = o;   if (vm == WISP_VALUES_MIXED) o = al(o + (rows + 1) * 4);
    L->vals = o; if (vm != WISP_VALUES_NONE) o = al(o + nvals * 4);
    L->cnt = o;  o += CNT_BYTES;
    L->out = o;  o = al(o + (size_t)nsh * rows * osz);
    L->oorr = o; if (zc) o = al(o + rows * 4);
    L->flg = o;  if (zc) o = al(o + rows * 8);        /* the tiny kernel's answer slots (wisp_ktiny.slots) */
    L->total = o;
}

/* The layout of a whole owned batch shipped from its arena: val_ptr, indptr
 * and vals at the arena's own offsets (so neighbours go in one copy), ids after. */
static void layout_mirror(struct lay *L, const wisp_batch *b, size_t rows, size_t nnz, size_t nvals, int vm, int nsh,
                          size_t osz)
{
    size_t head = b->off_rp + (rows + 1) * 4;
    if (vm != WISP_VALUES_NONE && b->off_vals + nvals * 4 > head) head = b->off_vals + nvals * 4;
    L->vp = b->off_vp;
    L->rp = b->off_rp;
    L->vals = b->off_vals;
    size_t o = al(head);
    L->ids = o;  o = al(o + nnz * 4);
    L->cnt = o;  o += CNT_BYTES;
    L->out = o;  o = al(o + (size_t)nsh * rows * osz);
    L->oorr = o;
    L->flg = o;
    L->total = o;
}

/* First row r in [lo, hi] with indptr[r] >= target. */
static size_t lower_row(const uint32_t *rp, size_t lo, size_t hi, uint64_t target)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rp[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static uint32_t pow2_at_least(uint64_t x, uint32_t lo)
{
    uint64_t p = lo;
    while (p < x) p <<= 1;
    return p > 0x80000000u ? 0x80000000u : (uint32_t)p;
}

int wisp__cuda_grow_dbuf(sess *s, struct unit *u, size_t need)
{
    if (s->root->fault == FAULT_OOM || (s->root->fault == FAULT_OOM_ONCE && !s->root->fault_fired)) {
        s->root->fault_fired = 1;
        return wisp__fail(WISP_EDEVICE, "gpu:%d: out of device memory (%zu bytes for a batch; injected by WISP_FAULT_GPU)",
                         u->dev, need);
    }
    if (need <= u->dcap) return WISP_OK;
    wisp__cuda_graphs_clear(u);                                    /* they hold the old address */
    if (u->dbuf) {
        /* nothing is in flight between batches */
        cudaFree(u->dbuf);
        u->dbuf = NULL;
        u->dcap = 0;
    }
    size_t cap = need + need / 2;                       /* geometric growth */
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, cap);
    if (e == cudaErrorMemoryAllocation) {               /* try exactly what is needed */
        cudaGetLastError();
        cap = need;
        e = cudaMalloc(&p, cap);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (wisp__cuda_is_sticky(e)) wisp__cuda_mark_unusable(s->ctx, u->dev, e);
        return wisp__cuda_err_fail(u->dev, "allocating a batch buffer", e);
    }
    u->dbuf = p;
    u->dcap = cap;
    return WISP_OK;
}

static int grow_stage(sess *s, size_t need)
{
    if (need <= s->stage_cap) return WISP_OK;
    for (int i = 0; i < s->nunits; i++) {               /* graphs hold the old address */
        if (cudaSetDevice(s->u[i].dev) != cudaSuccess) cudaGetLastError();
        wisp__cuda_graphs_clear(&s->u[i]);
    }
    wisp__cuda_pin_free(s->ctx, s->stage);
    s->stage = NULL;
    s->stage_dev = NULL;
    s->stage_cap = 0;
    size_t cap = need + need / 2;
    char *p = wisp__cuda_pin_alloc(s->ctx, cap);
    if (!p) p = wisp__cuda_pin_alloc(s->ctx, cap = need);
    if (!p) return WISP_ENOMEM;
    void *dp = NULL;
    if (cudaHostGetDevicePointer(&dp, p, 0) != cudaSuccess || !dp) {
        cudaGetLastError();
        dp = p;                                         /* unified addressing: the same address */
    }
    s->stage = p;
    s->stage_dev = dp;
    s->stage_cap = cap;
    return WISP_OK;
}

static int use_timing(const struct job *j)
{
    return j->s->timing == 1 || (j->s->timing == -1 && !j->small);
}

static const float *vals_from(const struct job *j, const struct unit *u)
{
    return j->b->vals + (j->vm == WISP_VALUES_MIXED ? u->vbase : u->base);
}

/* A tiny batch of value mode ALL packed as MIXED (t.words from word vp: row r's value count
 * offsets, then the values each row keeps), when that is fewer words: a row keeps its values
 * up to the last that is not exactly 1.0f (bits 0x3f800000; -0.0, NaN and 1.0000001 are kept),
 * the rest score as binary entries. 1 if packed, 0 if ALL stays (nothing useful written). */
static int tiny_trim_ones(wisp_ktiny *t, const struct job *j, const struct unit *u, uint32_t vp)
{
    const size_t rows = u->r1 - u->r0;
    const uint32_t *rp = j->b->indptr + u->r0;
    const float *v = j->b->vals + u->base;
    if ((size_t)vp + rows + 1 >= WISP_TINY_WORDS) return 0;
    uint32_t *vpw = t->words + vp, *out = vpw + rows + 1;
    const uint32_t room = WISP_TINY_WORDS - vp - (uint32_t)rows - 1;
    uint32_t kept = 0;
    vpw[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        const uint32_t a = rp[r] - u->base;
        uint32_t z = rp[r + 1] - u->base;
        for (; z > a; z--) {
            uint32_t bits;
            memcpy(&bits, v + z - 1, 4);
            if (bits != 0x3f800000u) break;
        }
        if (kept + (z - a) > room) return 0;
        memcpy(out + kept, v + a, (size_t)(z - a) * 4);
        kept += z - a;
        vpw[r + 1] = kept;
    }
    return kept + rows + 1 < u->nvals;
}

/* Pack the unit's whole slice at its layout's offsets in hin (a small batch, or zero-copy). */
static void pack_all(struct job *j, struct unit *u, char *hin)
{
    const wisp_batch *b = j->b;
    const struct lay *L = &u->L;
    const size_t rows = u->r1 - u->r0;
    uint64_t t0 = wisp__now_ns();
    memcpy(hin + L->rp, b->indptr + u->r0, (rows + 1) * 4);
    if (u->nnz) memcpy(hin + L->ids, b->ids + u->base, (size_t)u->nnz * 4);
    if (j->vm == WISP_VALUES_MIXED) memcpy(hin + L->vp, b->val_ptr + u->r0, (rows + 1) * 4);
    if (j->vm != WISP_VALUES_NONE && u->nvals) memcpy(hin + L->vals, vals_from(j, u), (size_t)u->nvals * 4);
    memset(hin + L->cnt, 0, CNT_BYTES);
    uint32_t *hdr = (uint32_t *)(hin + L->cnt + HDR_OFF);
    hdr[0] = (uint32_t)rows;
    hdr[1] = u->nnz;
    hdr[2] = u->nvals;
    hdr[3] = u->base;
    hdr[4] = u->vbase;
    j->ns_stage += wisp__now_ns() - t0;
}

/* memcpy over the engine's threads (packing a large pageable batch is bound by one core's copy speed) */
struct pcopy { char *dst; const char *src; size_t n, per; };

static void pcopy_task(void *vctx, size_t t)
{
    const struct pcopy *c = vctx;
    size_t a = t * c->per;
    if (a < c->n) memcpy(c->dst + a, c->src + a, c->n - a < c->per ? c->n - a : c->per);
}

static void par_memcpy(const cuda_ctx *ctx, void *dst, const void *src, size_t n)
{
    int th = ctx->eng ? wisp_engine_threads(ctx->eng) : 1;
    NVTX_PUSH("wisp pack");
    if (n < ((size_t)1 << 20) || th <= 1) {
        memcpy(dst, src, n);
        NVTX_POP();
        return;
    }
    size_t tasks = n >> 18;                              /* at least 256 KB a task */
    if (tasks > (size_t)th * 2) tasks = (size_t)th * 2;
    struct pcopy c = { dst, src, n, ((n + tasks - 1) / tasks + 63) & ~(size_t)63 };
    wisp__pool_run(ctx->eng->pool, tasks, pcopy_task, &c);
    NVTX_POP();
}

/* One host -> device copy of n bytes at offset off of the unit's layout, packed first when staged. */
static void copy_in(struct job *j, struct unit *u, size_t off, const void *src, size_t n, cudaStream_t st)
{
    if (!n) return;
    if (j->staged) {
        char *h = j->s->stage + u->soff + off;
        uint64_t t0 = wisp__now_ns();
        par_memcpy(j->s->ctx, h, src, n);
        j->ns_stage += wisp__now_ns() - t0;
        src = h;
    }
    JOB_CHECK(j, u, cudaMemcpyAsync(u->dbuf + off, src, n, cudaMemcpyHostToDevice, st), "copying a batch to the device");
    j->bytes_h2d += n;
}

static void fill_params(const struct job *j, const struct unit *u, int i, size_t a, size_t z, wisp_kparams *p)
{
    const struct lay *L = &u->L;
    const int sh = u->sh[i];
    memset(p, 0, sizeof *p);
    p->indptr = (const uint32_t *)(u->dbuf + L->rp) + a;
    p->ids = (const uint32_t *)(u->dbuf + L->ids);
    p->val_ptr = j->vm == WISP_VALUES_MIXED ? (const uint32_t *)(u->dbuf + L->vp) + a : NULL;
    p->vals = j->vm != WISP_VALUES_NONE ? (const float *)(u->dbuf + L->vals) : NULL;
    p->weights = u->w[i];
    if (j->partial) p->part = (double *)(u->dbuf + L->out) + (size_t)i * (u->r1 - u->r0) + a;
    else p->out = (float *)(u->dbuf + L->out) + (size_t)i * (u->r1 - u->r0) + a;
    p->oor = (!j->partial || sh == 0) ? (unsigned long long *)(u->dbuf + L->cnt) : NULL;
    p->rows = (uint32_t)(z - a);
    p->ptr_base = u->base;
    p->val_base = u->vbase;
    p->nnz = u->nnz;
    p->nvals = u->nvals;
    p->id_lo = j->sh_lo[sh];
    p->id_span = j->sh_span[sh];
    p->num_features = j->nf;
    p->partial = j->partial;
    p->bias = j->m->bias;
    p->scale = j->m->dtype == WISP_I8 ? (double)j->m->scale : 1.0;
}

static int sticky_hook(struct job *j, struct unit *u, cudaStream_t st)
{
    sess *s = j->s;
    if (s->root->fault != FAULT_STICKY || s->root->fault_fired) return 0;
    s->root->fault_fired = 1;
    JOB_CHECK(j, u, wisp_k_trap(st), "launching the score kernel");
    return 1;
}

static void launch_chunk(struct job *j, struct unit *u, int c, cudaStream_t st)
{
    const size_t a = u->cb[c], z = u->cb[c + 1];
    if (z == a || sticky_hook(j, u, st)) return;
    if (j->peer) {
        wisp_kparams p;
        fill_params(j, u, 0, a, z, &p);
        JOB_CHECK(j, u, (cudaError_t)wisp_k_score_shards(&p, &j->kt, j->dtype, j->vm, j->lanes, st),
                  "launching the score kernel");
        return;
    }
    for (int i = 0; i < u->nsh; i++) {
        wisp_kparams p;
        fill_params(j, u, i, a, z, &p);
        JOB_CHECK(j, u, (cudaError_t)wisp_k_score(&p, j->dtype, j->vm, j->lanes, st), "launching the score kernel");
    }
}

/* The small batch's graph for its bucket: found, or captured now. NULL when capture is not possible. */
static cudaGraphExec_t small_graph(struct job *j, struct unit *u)
{
    sess *s = j->s;
    struct gentry *g = NULL, *victim = &u->g[0];
    for (int i = 0; i < MAX_GRAPHS; i++) {
        struct gentry *e = &u->g[i];
        if (e->exec && e->vm == j->vm && e->lanes == j->lanes && e->rows_b == u->rows_b && e->nnz_b == u->nnz_b
            && e->nvals_b == u->nvals_b && e->w == u->w[0]) {
            g = e;
            break;
        }
        if (!e->exec || (victim->exec && e->used < victim->used)) victim = e;
    }
    if (g) {
        g->used = ++u->gclock;
        return g->exec;
    }
    if (victim->exec) {
        if (cudaGraphExecDestroy(victim->exec) != cudaSuccess) cudaGetLastError();
        victim->exec = NULL;
    }
    const struct lay *L = &u->L;
    char *hin = s->stage + u->soff;
    wisp_kparams p;
    fill_params(j, u, 0, 0, u->rows_b, &p);
    p.rows = u->rows_b;
    p.nnz = u->nnz_b;
    p.nvals = u->nvals_b;
    p.hdr = (const uint32_t *)(u->dbuf + L->cnt + HDR_OFF);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamBeginCapture(u->comp, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        cudaError_t e1 = cudaMemcpyAsync(u->dbuf, hin, L->cnt + CNT_BYTES, cudaMemcpyHostToDevice, u->comp);
        cudaError_t e2 = e1 == cudaSuccess ? (cudaError_t)wisp_k_score(&p, j->dtype, j->vm, j->lanes, u->comp) : e1;
        cudaError_t e3 = e2 == cudaSuccess ? cudaMemcpyAsync(hin + L->cnt, u->dbuf + L->cnt, L->out - L->cnt + (size_t)u->rows_b * 4,
                                                             cudaMemcpyDeviceToHost, u->comp) : e2;
        e = cudaStreamEndCapture(u->comp, &graph);
        if (e == cudaSuccess) e = e3;
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cudaGetLastError();
        s->graphs = 0;                 /* plain launches from now on */
        return NULL;
    }
    *victim = (struct gentry){ exec, j->vm, j->lanes, u->rows_b, u->nnz_b, u->nvals_b, u->w[0], ++u->gclock };
    return exec;
}

/* The compute stream's part of a large batch: chunk c is scored once its ids
 * have landed, and its answers go back (see enqueue_unit_work). */
static void enqueue_large_compute(struct job *j, struct unit *u)
{
    sess *s = j->s;
    const size_t rows = u->r1 - u->r0;
    const struct lay *L = &u->L;
    const int timing = use_timing(j);
    char *hout = j->staged ? s->stage + u->soff + L->cnt : s->stage + u->soff;
    for (int c = 0; c < u->nchunks && j->err == cudaSuccess; c++) {
        const size_t a = u->cb[c], z = u->cb[c + 1];
        JOB_CHECK(j, u, cudaStreamWaitEvent(u->comp, u->ready[c], 0), "ordering streams");
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_CHUNK + 3 * c], u->comp), "recording an event");
        launch_chunk(j, u, c, u->comp);
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_CHUNK + 3 * c + 1], u->comp), "recording an event");
        if (z > a) {
            const size_t osz = OUT_SIZE(j);
            for (int i = 0; i < u->nout; i++) {
                size_t off = (size_t)i * rows * osz + a * osz;
                void *dst = u->direct_out ? (void *)(j->out + u->r0 + a) : (void *)(hout + (L->out - L->cnt) + off);
                JOB_CHECK(j, u, cudaMemcpyAsync(dst, u->dbuf + L->out + off, (z - a) * osz, cudaMemcpyDeviceToHost, u->comp),
                          "copying results from the device");
                j->bytes_d2h += (z - a) * osz;
            }
        }
        if (u->host_out) JOB_CHECK(j, u, cudaEventRecord(u->done[c], u->comp), "recording an event");
        if (timing && c < u->nchunks - 1)
            JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_CHUNK + 3 * c + 2], u->comp), "recording an event");
    }
    JOB_CHECK(j, u, cudaMemcpyAsync(hout, u->dbuf + L->cnt, 8, cudaMemcpyDeviceToHost, u->comp),
              "copying results from the device");
    j->bytes_d2h += 8;
    if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_END], u->comp), "recording an event");
    u->launched = timing && j->err == cudaSuccess;
}

/* Enqueue what unit u does for this batch (see enqueue_unit): everything, or
 * for a large batch only the copies in (phase 0; enqueue_large_compute is
 * phase 1), so on several units every unit's copies start before any unit's
 * kernels are enqueued. */
static void enqueue_unit_work(struct job *j, struct unit *u)
{
    sess *s = j->s;
    const wisp_batch *b = j->b;
    const size_t rows = u->r1 - u->r0;
    const struct lay *L = &u->L;
    const int timing = use_timing(j);
    u->launched = 0;
    JOB_CHECK(j, u, cudaSetDevice(u->dev), "selecting the device");
    if (j->err != cudaSuccess) return;

    if (j->inl) {
        /* a tiny batch: carried in the launch's parameters, answers written to mapped host memory */
        char *din = s->stage_dev + u->soff;
        wisp_ktiny t;
        uint64_t t0 = wisp__now_ns();
        memset(&t.p, 0, sizeof t.p);
        uint32_t n = 0;
        t.rp_off = n;
        memcpy(t.words + n, b->indptr + u->r0, (rows + 1) * 4);
        n += (uint32_t)rows + 1;
        t.ids_off = n;
        memcpy(t.words + n, b->ids + u->base, (size_t)u->nnz * 4);
        n += u->nnz;
        t.vp_off = n;
        int kvm = j->vm;                    /* the kernel's value mode */
        uint32_t kvals = u->nvals, kvbase = u->vbase;
        if (j->vm == WISP_VALUES_ALL && tiny_trim_ones(&t, j, u, n)) {
            /* every value a row ends with that is exactly 1.0 goes as a binary entry (the
             * same products: w * 1.0 is w): fewer words in the launch (issue 20) */
            kvm = WISP_VALUES_MIXED;
            kvals = t.words[n + rows];
            kvbase = 0;
            n += (uint32_t)rows + 1;
            t.vals_off = n;
            n += kvals;
        } else {
            if (j->vm == WISP_VALUES_MIXED) {
                memcpy(t.words + n, b->val_ptr + u->r0, (rows + 1) * 4);
                n += (uint32_t)rows + 1;
            }
            t.vals_off = n;
            if (j->vm != WISP_VALUES_NONE) {
                memcpy(t.words + n, vals_from(j, u), (size_t)u->nvals * 4);
                n += u->nvals;
            }
        }
        t.nwords = n;
        t.p.weights = u->w[0];
        t.p.out = (float *)(din + L->out);
        t.p.oor_rows = (uint32_t *)(din + L->oorr);
        t.p.rows = (uint32_t)rows;
        t.p.ptr_base = u->base;
        t.p.val_base = kvbase;
        t.p.nnz = u->nnz;
        t.p.nvals = kvals;
        t.p.id_span = j->nf;
        t.p.num_features = j->nf;
        t.p.bias = j->m->bias;
        t.p.scale = j->m->dtype == WISP_I8 ? (double)j->m->scale : 1.0;
        t.slots = NULL;
        t.seq = 0;
        if (j->poll) {
            /* each row's answer comes back as one 8-byte slot in mapped host memory tagged
             * with seq; cleared here first (the staging buffer may be new, or hold an older
             * batch's slots), so no stale value can match */
            volatile uint64_t *sl = (volatile uint64_t *)(s->stage + u->soff + L->flg);
            u->seq = (u->seq + 1) & WISP_TINY_SEQ_MASK;
            if (u->seq == 0) u->seq = 1;
            for (size_t i = 0; i < rows; i++) sl[i] = 0;
            t.slots = (unsigned long long *)(din + L->flg);
            t.seq = u->seq;
        }
        j->ns_stage += wisp__now_ns() - t0;
        j->bytes_h2d += (uint64_t)n * 4;
        j->bytes_d2h += rows * 8;
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_START], u->comp), "recording an event");
        if (!sticky_hook(j, u, u->comp))
            JOB_CHECK(j, u, (cudaError_t)wisp_k_tiny(&t, j->dtype, kvm, j->lanes, u->comp), "launching the score kernel");
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_END], u->comp), "recording an event");
        u->launched = timing && j->err == cudaSuccess;
        return;
    }

    if (j->zc) {
        /* zero-copy: the kernel reads the rows from mapped host memory and writes the answers there */
        char *hin = s->stage + u->soff, *din = s->stage_dev + u->soff;
        void *drp = j->zc_rp, *dids = j->zc_ids, *dvp = j->zc_vp, *dvals = j->zc_vals;
        if (j->staged) {
            pack_all(j, u, hin);
            drp = din + L->rp;
            dids = din + L->ids;
            dvp = din + L->vp;
            dvals = din + L->vals;
        }
        j->bytes_h2d += (rows + 1) * 4 + (size_t)u->nnz * 4 + (j->vm == WISP_VALUES_MIXED ? (rows + 1) * 4 : 0)
                        + (j->vm != WISP_VALUES_NONE ? (size_t)u->nvals * 4 : 0);
        j->bytes_d2h += rows * 8;
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_START], u->comp), "recording an event");
        if (!sticky_hook(j, u, u->comp)) {
            wisp_kparams p;
            memset(&p, 0, sizeof p);
            p.indptr = drp;
            p.ids = dids;
            p.val_ptr = dvp;
            p.vals = dvals;
            p.weights = u->w[0];
            p.out = (float *)(din + L->out);
            p.oor_rows = (uint32_t *)(din + L->oorr);
            p.rows = (uint32_t)rows;
            p.ptr_base = u->base;
            p.val_base = u->vbase;
            p.nnz = u->nnz;
            p.nvals = u->nvals;
            p.id_lo = 0;
            p.id_span = j->nf;
            p.num_features = j->nf;
            p.bias = j->m->bias;
            p.scale = j->m->dtype == WISP_I8 ? (double)j->m->scale : 1.0;
            JOB_CHECK(j, u, (cudaError_t)wisp_k_score(&p, j->dtype, j->vm, j->lanes, u->comp), "launching the score kernel");
        }
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_END], u->comp), "recording an event");
        u->launched = timing && j->err == cudaSuccess;
        return;
    }

    if (j->small) {
        /* a small batch: packed with its size header, one copy in, the kernel, one copy out;
         * through a CUDA graph per bucket of sizes when possible (one launch in all) */
        char *hin = s->stage + u->soff;
        pack_all(j, u, hin);
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_START], u->comp), "recording an event");
        cudaGraphExec_t exec = u->graph && j->err == cudaSuccess ? small_graph(j, u) : NULL;
        if (exec) {
            JOB_CHECK(j, u, cudaGraphLaunch(exec, u->comp), "launching a graph");
            j->bytes_h2d += L->cnt + CNT_BYTES;
            j->bytes_d2h += L->out - L->cnt + (size_t)u->rows_b * 4;
        } else {
            u->graph = 0;
            JOB_CHECK(j, u, cudaMemcpyAsync(u->dbuf, hin, L->cnt + CNT_BYTES, cudaMemcpyHostToDevice, u->comp),
                      "copying a batch to the device");
            launch_chunk(j, u, 0, u->comp);
            size_t n = L->out - L->cnt + (size_t)u->nout * rows * OUT_SIZE(j);
            JOB_CHECK(j, u, cudaMemcpyAsync(hin + L->cnt, u->dbuf + L->cnt, n, cudaMemcpyDeviceToHost, u->comp),
                      "copying results from the device");
            j->bytes_h2d += L->cnt + CNT_BYTES;
            j->bytes_d2h += n;
        }
        if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_END], u->comp), "recording an event");
        u->launched = timing && j->err == cudaSuccess;
        return;
    }

    /* a large batch: every copy in is queued first on the copy stream: the
     * head (value offsets, row offsets, values: a quarter of the bytes at the
     * usual widths), then the ids chunk by chunk, one copy each; the compute
     * stream scores chunk c as soon as its ids have landed and sends its
     * answers back, so copies in, kernels and copies out overlap. Shipped
     * from an owned batch's arena, the head's neighbours go in one copy when
     * the gaps between them are small (u->mirror). (Two copy streams measured
     * slower: kernels/README.md, run 4; each copy start costs ~4 us.) */
    const uint32_t *rp = b->indptr + u->r0;
    if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_START], u->copy), "recording an event");
    JOB_CHECK(j, u, cudaMemsetAsync(u->dbuf + L->cnt, 0, 8, u->copy), "clearing a counter");
    struct piece { size_t off; const char *src; size_t n; } pc[3];
    int np = 0;
    if (j->vm == WISP_VALUES_MIXED) pc[np++] = (struct piece){ L->vp, (const char *)(b->val_ptr + u->r0), (rows + 1) * 4 };
    pc[np++] = (struct piece){ L->rp, (const char *)rp, (rows + 1) * 4 };
    if (j->vm != WISP_VALUES_NONE && u->nvals) pc[np++] = (struct piece){ L->vals, (const char *)vals_from(j, u), (size_t)u->nvals * 4 };
    if (u->mirror) {
        /* neighbours in the arena at the same distance on the device: one copy, gap included */
        const char *arena = b->arena;
        int m = 0;
        for (int i = 1; i < np; i++) {
            struct piece *a = &pc[m], *z = &pc[i];
            if ((size_t)(a->src - arena) == a->off && (size_t)(z->src - arena) == z->off && z->off >= a->off + a->n
                && z->off - (a->off + a->n) <= GAP_MERGE) {
                a->n = z->off + z->n - a->off;
            } else {
                pc[++m] = *z;
            }
        }
        np = m + 1;
    }
    for (int i = 0; i < np; i++) copy_in(j, u, pc[i].off, pc[i].src, pc[i].n, u->copy);
    for (int c = 0; c < u->nchunks && j->err == cudaSuccess; c++) {
        const size_t a = u->cb[c], z = u->cb[c + 1];
        const size_t k0 = rp[a] - u->base, k1 = rp[z] - u->base;
        copy_in(j, u, L->ids + k0 * 4, b->ids + u->base + k0, (k1 - k0) * 4, u->copy);
        JOB_CHECK(j, u, cudaEventRecord(u->ready[c], u->copy), "recording an event");
    }
    if (timing) JOB_CHECK(j, u, cudaEventRecord(u->ev[EV_H2D], u->copy), "recording an event");
}

/* Enqueue unit u's part of the batch, then mark its end on each stream it
 * used: a wait syncs on these events, not on the streams, which may
 * already hold the next batches (submit/wait). */
static void enqueue_unit(struct job *j, struct unit *u, int phase)
{
    const int large = !j->inl && !j->zc && !j->small;
    if (phase == 0) {
        const uint64_t h2d0 = j->bytes_h2d;
        enqueue_unit_work(j, u);
        u->bytes_h2d = j->bytes_h2d - h2d0;
        if (large) return;
    } else {
        if (!large || j->err != cudaSuccess) return;
        JOB_CHECK(j, u, cudaSetDevice(u->dev), "selecting the device");
        if (j->err == cudaSuccess) enqueue_large_compute(j, u);
    }
    if (j->err != cudaSuccess || j->poll || !j->submitted) return;   /* blocking: the streams hold only this batch */
    JOB_CHECK(j, u, cudaEventRecord(u->fin_comp, u->comp), "recording an event");
    if (!j->small && !j->zc) JOB_CHECK(j, u, cudaEventRecord(u->fin_copy, u->copy), "recording an event");
}

float wisp__cuda_elapsed_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return ms > 0 ? ms : 0;
}

/* Chunk row bounds of a large slice: equal shares of about CHUNK_NNZ ids, at
 * most MAX_CHUNKS_AUTO (measured on the H200, kernels/README.md: 4 to 8
 * equal chunks beat 1, 2 and 16, and beat a schedule of halving chunks, whose
 * small kernels are latency-bound and pile up after the last copy).
 * A batch submitted while others are in flight goes in one chunk: the
 * pipeline across batches already overlaps its copy with their kernels, and
 * each copy start costs ~4 us of link time (kernels/README.md, run 3).
 * WISP_GPU_CHUNKS=n asks for n chunks. */
static void chunk_bounds(const sess *s, const wisp_batch *b, struct unit *u)
{
    const size_t urows = u->r1 - u->r0;
    int n = s->chunks_env;
    if (!n && s->root->qlen > 0) n = 1;   /* submitted behind other batches: their kernels overlap this copy, so one chunk (fewest copies) */
    if (!n) {
        /* also for peer shards, whose kernels (half their reads over NVLink) barely keep pace
         * with the copies: 16 chunks there measured slower than 8 on 2 H200s (1M rows, two
         * runs: 2.94 against 2.63 ms; more, smaller kernels and copies back) */
        uint64_t c = ((uint64_t)u->nnz + CHUNK_NNZ - 1) / CHUNK_NNZ;
        n = c < 1 ? 1 : c > MAX_CHUNKS_AUTO ? MAX_CHUNKS_AUTO : (int)c;
    }
    u->cb[0] = 0;
    int nc = 1;
    for (int i = 1; i < n && nc < MAX_CHUNKS; i++) {
        size_t r = lower_row(b->indptr, u->r0 + u->cb[nc - 1], u->r1, (uint64_t)u->base + (uint64_t)u->nnz * i / n) - u->r0;
        if (r > u->cb[nc - 1] && r < urows) u->cb[nc++] = r;
    }
    u->cb[nc] = urows;
    u->nchunks = nc;
}

/* Can the device of every unit read the memory of every other? Peer access is
 * enabled once per pair of devices, for the whole process; units on one
 * device need none. */
static int peers_ready(sess *s)
{
    cuda_ctx *ctx = s->ctx;
    for (int a = 0; a < s->nunits; a++)
        for (int b = 0; b < s->nunits; b++) {
            const int da = s->u[a].dev, db = s->u[b].dev;
            if (da == db) continue;
            int st = atomic_load(&ctx->peer[da][db]);
            if (st < 0) return 0;
            if (st > 0) continue;
            int can = 0;
            cudaError_t e = cudaDeviceCanAccessPeer(&can, da, db);
            if (e == cudaSuccess && !can) e = cudaErrorPeerAccessUnsupported;
            if (e == cudaSuccess) e = cudaSetDevice(da);
            if (e == cudaSuccess) e = cudaDeviceEnablePeerAccess(db, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;   /* another session did it */
            cudaGetLastError();
            wisp__log(ctx->eng, e == cudaSuccess ? WISP_LOG_INFO : WISP_LOG_WARN, "gpu:%d reads gpu:%d's memory: %s", da, db,
                     e == cudaSuccess ? "peer access enabled" : cudaGetErrorString(e));
            atomic_store(&ctx->peer[da][db], e == cudaSuccess ? 1 : -1);
            if (e != cudaSuccess) return 0;
        }
    return 1;
}

/* Plan the batch over the units: rows, shards, chunks, layouts, buffers. */
static int plan(struct job *j)
{
    sess *s = j->s;
    const wisp_batch *b = j->b;
    wisp_model *m = j->m;
    const size_t rows = b->rows;
    const uint32_t *rp = b->indptr;
    const uint64_t nnz = (uint64_t)rp[rows] - rp[0];
    const uint64_t nvals = j->vm == WISP_VALUES_MIXED ? (uint64_t)b->val_ptr[rows] - b->val_ptr[0]
                         : j->vm == WISP_VALUES_ALL ? nnz : 0;

    /* shards: asked for, or needed because the table is larger than one device's share
     * (WISP_GPU_TABLE_MB, else 80% of the smallest device; the default needs several devices) */
    int nsh = s->shards_env >= 2 ? s->shards_env : 1;
    const uint64_t table = (uint64_t)j->nf * dtype_size(m->dtype);
    if (nsh == 1 && s->nunits > 1 && (s->table_max || s->ndev > 1)) {
        uint64_t share = s->table_max;
        if (!share) {
            uint64_t minmem = UINT64_MAX;
            for (int i = 0; i < s->ndev; i++)
                if (s->ctx->dev[s->devs[i]].mem < minmem) minmem = s->ctx->dev[s->devs[i]].mem;
            share = minmem / 10 * 8;
        }
        if (table > share) {
            uint64_t need = (table + share - 1) / share;
            nsh = need > (uint64_t)s->nunits ? (need > MAX_SHARDS ? MAX_SHARDS : (int)need) : s->nunits;
        }
    }
    if (nsh > MAX_SHARDS) nsh = MAX_SHARDS;
    if ((uint64_t)nsh > j->nf) nsh = j->nf ? (int)j->nf : 1;
    j->peer = 0;
    if (nsh > 1 && s->sharding != SHARDING_BROADCAST) {
        if (nsh <= WISP_K_MAX_SHARDS && peers_ready(s)) {
            j->peer = 1;
        } else if (s->sharding == SHARDING_PEER && !s->root->peer_warned) {
            s->root->peer_warned = 1;
            wisp__log(s->ctx->eng, WISP_LOG_WARN, "WISP_GPU_SHARDING=peer: %s; the shards are scored by broadcast",
                     nsh > WISP_K_MAX_SHARDS ? "more shards than a kernel reads (8)"
                                             : "the session's GPUs cannot read each other's memory (no peer access)");
        }
    }
    if (j->peer) {
        /* power-of-two ranges: an id's shard is its high bits */
        const uint64_t per = (j->nf + (uint64_t)nsh - 1) / (uint64_t)nsh;
        uint32_t shift = 0;
        while (((uint64_t)1 << shift) < per) shift++;
        nsh = (int)((j->nf + ((uint64_t)1 << shift) - 1) >> shift);
        for (int i = 0; i < nsh; i++) {
            uint64_t lo = (uint64_t)i << shift, hi = (uint64_t)(i + 1) << shift;
            j->sh_lo[i] = (uint32_t)lo;
            j->sh_span[i] = (uint32_t)((hi < j->nf ? hi : j->nf) - lo);
        }
        j->kt.n = (uint32_t)nsh;
        j->kt.shift = shift;
        j->peer = nsh > 1;
    } else {
        for (int i = 0; i < nsh; i++) {
            uint64_t lo = (uint64_t)j->nf * i / nsh, hi = (uint64_t)j->nf * (i + 1) / nsh;
            j->sh_lo[i] = (uint32_t)lo;
            j->sh_span[i] = (uint32_t)(hi - lo);
        }
    }
    if (nsh <= 1) {
        nsh = 1;
        j->sh_lo[0] = 0;
        j->sh_span[0] = j->nf;
    }
    j->sharded = nsh > 1;
    j->partial = j->sharded && !j->peer;
    j->nshards = nsh;
    j->zc = !j->sharded && s->nunits == 1 && s->zc_rows && rows <= s->zc_rows;

    /* small batches are packed (one copy each way); large ones are copied from
     * where they are when pinned, packed chunk by chunk when pageable */
    const uint64_t bytes = (rows + 1) * 4 * (j->vm == WISP_VALUES_MIXED ? 2 : 1) + nnz * 4 + nvals * 4;
    j->small = bytes < STAGE_ALL_BYTES;
    /* a tiny batch on one unit travels inside the kernel launch */
    if (j->small && !j->sharded && s->nunits == 1 && s->inline_on && bytes / 4 <= WISP_TINY_WORDS
        && !(s->root->fault == FAULT_STICKY && !s->root->fault_fired))
        j->inl = j->zc = 1;
    if (j->small) {
        j->staged = 1;
    } else {
        /* an owned batch is one arena: one pointer query; a wrapped one, one per array */
        void *adev = NULL;
        const int owned = !b->wrapped && b->arena;
        int pinned = owned ? wisp__cuda_host_pinned(b->arena, j->zc ? &adev : NULL)
                   : wisp__cuda_host_pinned(rp, NULL) && wisp__cuda_host_pinned(b->ids, NULL)
                     && (j->vm != WISP_VALUES_MIXED || wisp__cuda_host_pinned(b->val_ptr, NULL))
                     && (j->vm == WISP_VALUES_NONE || wisp__cuda_host_pinned(b->vals, NULL));
        j->staged = !pinned;
        j->arena = owned && pinned;
        j->out_pinned = wisp__cuda_host_pinned(j->out, NULL);
        if (j->zc && j->arena) {
            /* zero-copy straight from the arena: its device address plus the region offsets */
            char *d = adev;
            const uint32_t vb = j->vm == WISP_VALUES_MIXED ? b->val_ptr[0] : rp[0];
            j->staged = d == NULL;
            if (d) {
                j->zc_rp = d + b->off_rp;
                j->zc_ids = nnz ? d + b->off_ids + (size_t)rp[0] * 4 : NULL;
                j->zc_vp = j->vm == WISP_VALUES_MIXED ? d + b->off_vp : NULL;
                j->zc_vals = j->vm != WISP_VALUES_NONE && nvals ? d + b->off_vals + (size_t)vb * 4 : NULL;
            }
        } else if (j->zc && pinned) {
            /* zero-copy straight from the batch: every array must be mapped */
            const uint32_t vb = j->vm == WISP_VALUES_MIXED ? b->val_ptr[0] : rp[0];
            j->staged = !(wisp__cuda_mapped(rp, &j->zc_rp) && wisp__cuda_mapped(nnz ? b->ids + rp[0] : NULL, &j->zc_ids)
                          && (j->vm != WISP_VALUES_MIXED || wisp__cuda_mapped(b->val_ptr, &j->zc_vp))
                          && (j->vm == WISP_VALUES_NONE || wisp__cuda_mapped(nvals ? b->vals + vb : NULL, &j->zc_vals)));
        }
    }

    /* rows over units */
    const int nunits = s->nunits;
    for (int k = 0; k < nunits; k++) {
        struct unit *u = &s->u[k];
        u->nsh = 0;
        u->graph = 0;
        if (j->partial) {
            u->r0 = 0;
            u->r1 = rows;
        } else {
            u->r0 = k == 0 ? 0 : s->u[k - 1].r1;
            u->r1 = k == nunits - 1 ? rows : lower_row(rp, u->r0, rows, rp[0] + nnz * (uint64_t)(k + 1) / nunits);
            if (u->r1 < u->r0) u->r1 = u->r0;
        }
        if (j->sharded) for (int i = k; i < nsh; i += nunits) u->sh[u->nsh++] = i;
        else u->sh[u->nsh++] = 0;
        u->nout = j->partial ? u->nsh : 1;
    }
    size_t stage_need = 0;
    for (int k = 0; k < nunits; k++) {
        struct unit *u = &s->u[k];
        const size_t urows = u->r1 - u->r0;
        u->base = rp[u->r0];
        u->nnz = rp[u->r1] - rp[u->r0];
        if (j->vm == WISP_VALUES_MIXED) {
            u->vbase = b->val_ptr[u->r0];
            u->nvals = b->val_ptr[u->r1] - b->val_ptr[u->r0];
        } else {
            u->vbase = u->base;
            u->nvals = j->vm == WISP_VALUES_ALL ? u->nnz : 0;
        }
        /* a small batch on one unit goes through a graph captured for its bucket of sizes */
        /* (not while other batches are queued on the stream it would be captured on: plain launches then) */
        u->graph = j->small && !j->zc && !j->sharded && nunits == 1 && s->graphs && s->root->qlen == 0
                   && !(s->root->fault == FAULT_STICKY && !s->root->fault_fired);
        if (u->graph) {
            u->rows_b = pow2_at_least(urows, 16);
            u->nnz_b = pow2_at_least(u->nnz, 256);
            u->nvals_b = j->vm == WISP_VALUES_MIXED ? pow2_at_least(u->nvals, 256) : j->vm == WISP_VALUES_ALL ? u->nnz_b : 0;
            wisp__cuda_layout(&u->L, u->rows_b, u->nnz_b, u->nvals_b, j->vm, 1, 0, 4);
        } else {
            wisp__cuda_layout(&u->L, urows, u->nnz, u->nvals, j->vm, u->nout, j->zc, OUT_SIZE(j));
        }
        /* a whole owned batch, copied from its arena: the device buffer mirrors the arena's offsets */
        u->mirror = j->arena && !j->small && !j->zc && !j->staged && u->r0 == 0 && u->r1 == rows;
        if (u->mirror) layout_mirror(&u->L, b, urows, u->nnz, u->nvals, j->vm, u->nout, OUT_SIZE(j));
        u->direct_out = !j->partial && !j->small && !j->zc && j->out_pinned;
        u->host_out = !j->partial && !j->small && !j->zc && !j->out_pinned;
        if (j->small || j->zc) {
            u->nchunks = 1;
            u->cb[0] = 0;
            u->cb[1] = urows;
        } else {
            chunk_bounds(s, b, u);
        }
        /* staging: the whole layout when packed, else only the counter and the answers */
        u->soff = stage_need;
        stage_need += al((j->staged || j->zc) ? u->L.total : u->L.total - u->L.cnt);
    }
    /* allocations: weights, device buffers, the staging buffer; nothing is enqueued before they all exist */
    for (int k = 0; k < nunits; k++) {
        struct unit *u = &s->u[k];
        cudaError_t e = cudaSetDevice(u->dev);
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (wisp__cuda_is_sticky(e)) wisp__cuda_mark_unusable(s->ctx, u->dev, e);
            return wisp__cuda_err_fail(u->dev, "selecting the device", e);
        }
        for (int i = 0; i < u->nsh; i++) {
            int st = wisp__cuda_get_weights(s->ctx, m, u->dev, j->sh_lo[u->sh[i]], j->sh_span[u->sh[i]], &u->w[i], j->stats);
            if (st != WISP_OK) return st;
        }
        if (!j->zc) {
            int st = wisp__cuda_grow_dbuf(s, u, u->L.total);
            if (st != WISP_OK) return st;
        }
    }
    if (j->peer)
        for (int i = 0; i < nsh; i++) j->kt.w[i] = s->u[i % nunits].w[i / nunits];
    if (grow_stage(s, stage_need) != WISP_OK)
        return wisp__fail(WISP_EDEVICE, "cuda: cannot pin %zu bytes of host memory for staging "
                         "(pinned so far: %zu of at most %zu bytes, WISP_PINNED_MAX_MB)", stage_need,
                         atomic_load(&s->ctx->pinned), s->ctx->pinned_max);
    if (j->zc && !s->stage_dev) return wisp__fail(WISP_EDEVICE, "cuda: the staging buffer is not mapped for zero-copy");
    return WISP_OK;
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
        return wisp__fail(WISP_EINVAL, "cuda: %s: %s is NULL", fn, !s ? "session" : !m ? "model" : !b ? "batch" : "out");
    const size_t rows = b->rows;
    const uint32_t *rp = b->indptr;
    if (rows == 0 || rows > WISP_MAX_ROWS || !rp)
        return wisp__fail(WISP_EINVAL, "cuda: %s: a batch of %zu rows%s", fn, rows,
                         !rows ? " (empty batches are the caller's)" : rp ? " is over the limit" : " has no row offsets");
    if (rp[rows] < rp[0])
        return wisp__fail(WISP_EINVAL, "cuda: %s: row offsets decrease (indptr[0] = %u, indptr[%zu] = %u)", fn, rp[0], rows, rp[rows]);
    const int vm = b->value_mode;
    if ((rp[rows] > rp[0] && !b->ids) || vm < WISP_VALUES_NONE || vm > WISP_VALUES_MIXED
        || (vm == WISP_VALUES_MIXED && (!b->val_ptr || (b->val_ptr[rows] < b->val_ptr[0])))
        || (vm != WISP_VALUES_NONE && !b->vals && (vm == WISP_VALUES_ALL ? rp[rows] > rp[0] : b->val_ptr[rows] > b->val_ptr[0])))
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
    int st = plan(j);
    if (st != WISP_OK) return st;               /* nothing was enqueued */
    /* a tiny batch waits on its blocks' flags, not on events (unless timed) */
    j->poll = j->inl && !use_timing(j);

    j->t_enq = wisp__now_ns();
    for (int k = 0; k < s->nunits && j->err == cudaSuccess; k++)
        if (unit_active(j, &s->u[k])) enqueue_unit(j, &s->u[k], 0);
    for (int k = 0; k < s->nunits && j->err == cudaSuccess; k++)
        if (unit_active(j, &s->u[k])) enqueue_unit(j, &s->u[k], 1);
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
        for (int k = 0; k < s->nunits; k++) {   /* nothing of the batch may still be running; does the device still answer? */
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
                ud += wisp__cuda_elapsed_ms(u->ev[EV_CHUNK + 3 * c + 1], u->ev[c == u->nchunks - 1 ? EV_END : EV_CHUNK + 3 * c + 2]);
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
