/* cuda_launch.c — a planned batch on the CUDA backend enqueued: packing, copies in, kernel launches, copies out. */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"

#include <string.h>

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
    JOB_CHECK(j, u, cudaMemcpyAsync(u->dbuf + off, src, n, cudaMemcpyHostToDevice, st),
              "copying a batch to the device");
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
        cudaError_t e3 = e2 == cudaSuccess ? cudaMemcpyAsync(hin + L->cnt, u->dbuf + L->cnt,
                                                             L->out - L->cnt + (size_t)u->rows_b * 4,
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
                JOB_CHECK(j, u, cudaMemcpyAsync(dst, u->dbuf + L->out + off, (z - a) * osz, cudaMemcpyDeviceToHost,
                                                u->comp),
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
             * same products: w * 1.0 is w): fewer words in the launch */
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
            JOB_CHECK(j, u, (cudaError_t)wisp_k_tiny(&t, j->dtype, kvm, j->lanes, u->comp),
                      "launching the score kernel");
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
            JOB_CHECK(j, u, (cudaError_t)wisp_k_score(&p, j->dtype, j->vm, j->lanes, u->comp),
                      "launching the score kernel");
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
    if (j->vm == WISP_VALUES_MIXED)
        pc[np++] = (struct piece){ L->vp, (const char *)(b->val_ptr + u->r0), (rows + 1) * 4 };
    pc[np++] = (struct piece){ L->rp, (const char *)rp, (rows + 1) * 4 };
    if (j->vm != WISP_VALUES_NONE && u->nvals)
        pc[np++] = (struct piece){ L->vals, (const char *)vals_from(j, u), (size_t)u->nvals * 4 };
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
void wisp__cuda_enqueue_unit(struct job *j, struct unit *u, int phase)
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

#endif /* WISP_HAVE_CUDA */
