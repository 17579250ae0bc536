/* cuda_plan.c — a batch planned on the CUDA backend: rows over units, shards, chunks, zero-copy, graphs, buffers. */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
        return wisp__fail(WISP_EDEVICE,
                          "gpu:%d: out of device memory (%zu bytes for a batch; injected by WISP_FAULT_GPU)",
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
    /* submitted behind other batches: their kernels overlap this copy, so one chunk (fewest copies) */
    if (!n && s->root->qlen > 0) n = 1;
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
        size_t r = lower_row(b->indptr, u->r0 + u->cb[nc - 1], u->r1,
                             (uint64_t)u->base + (uint64_t)u->nnz * i / n) - u->r0;
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
            wisp__log(ctx->eng, e == cudaSuccess ? WISP_LOG_INFO : WISP_LOG_WARN, "gpu:%d reads gpu:%d's memory: %s",
                      da, db, e == cudaSuccess ? "peer access enabled" : cudaGetErrorString(e));
            atomic_store(&ctx->peer[da][db], e == cudaSuccess ? 1 : -1);
            if (e != cudaSuccess) return 0;
        }
    return 1;
}

/* Plan the batch over the units: rows, shards, chunks, layouts, buffers. */
int wisp__cuda_plan(struct job *j)
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
                          && (j->vm == WISP_VALUES_NONE
                              || wisp__cuda_mapped(nvals ? b->vals + vb : NULL, &j->zc_vals)));
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
            u->nvals_b = j->vm == WISP_VALUES_MIXED ? pow2_at_least(u->nvals, 256)
                       : j->vm == WISP_VALUES_ALL ? u->nnz_b : 0;
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
            int st = wisp__cuda_get_weights(s->ctx, m, u->dev, j->sh_lo[u->sh[i]], j->sh_span[u->sh[i]], &u->w[i],
                                            j->stats);
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

#endif /* WISP_HAVE_CUDA */
