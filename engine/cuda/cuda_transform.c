/* cuda_transform.c — the transform on the GPU, part of the CUDA backend (cuda_internal.h): the description compiled
 * for the device, raw columns shipped, fused transform+score or ids back (CUDA builds only). */
/*
 * What crosses PCIe: the raw columns as wisp_raw holds them (per input: row
 * offsets of a sparse input; float32/int64 values, or string byte offsets +
 * bytes), a per-row skip flag only when the raw batch has bad rows, and the
 * compiled description once per session and description. What comes back:
 * the probabilities (score_raw) or the CSR ids (transform).
 *
 * wisp_raw's arrays are owned by engine/batch/raw.c; from 256 KB on they are pinned
 * (wisp__host_alloc) while the GPU backend is live. score_raw copies a pinned
 * array's slice to the device straight from where it is (one copy per array
 * and chunk, no host pass over the bytes); the other arrays are packed into a
 * pinned staging buffer by the engine's threads (256 KB tasks) and copied from
 * there. H200, 200k rows x 26 inputs (scripts/bench/bench_transform_gpu.py, both in
 * one device call): 2.84 ms a call direct, 3.21 ms packing everything
 * (WISP_GPU_XF_DIRECT=0, which turns the direct copies off). When
 * no array is pinned, a chunk is packed whole and moves in one copy. The
 * transform path (ids back) always packs: groups of segments, each group's
 * copy queued as soon as it is packed, so the packing of the next group
 * overlaps the copy of this one.
 *
 * score_raw: the rows go in up to 8 chunks (one copy each, on the copy
 * stream); on the compute stream each chunk is fingerprinted (Fingerprint64
 * of every value of the string inputs that a column hashes, once per value)
 * and scored by the fused kernel (kernels/transform.cu: 16 threads a row for
 * wide models, every column's ids computed and their weights summed; no id is
 * written anywhere) while the next chunk crosses PCIe. transform: one copy
 * group after another, the fingerprints, then count -> scan -> fill (CSR ids
 * and values) and everything back. Measurements: kernels/README.md.
 */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"
#include "../../kernels/transform.cuh"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kernels/transform.cu repeats transform/columns.h's node and normalizer codes */
_Static_assert(WISP_NODE_NUMERIC == 0 && WISP_NODE_BUCKETIZED == 1 && WISP_NODE_HASH == 2 && WISP_NODE_VOCAB == 3 &&
               WISP_NODE_IDENTITY == 4 && WISP_NODE_CROSSED == 5, "node codes of kernels/transform.cu");
_Static_assert(WISP_NORM_NONE == 0 && WISP_NORM_STANDARD == 1 && WISP_NORM_AFFINE == 2, "normalizer codes");

#define AL 256
#define GROUP_BYTES ((size_t)8 << 20)     /* packed and copied together */
#define PIECE_BYTES ((size_t)256 << 10)   /* one packing task */
#define MAX_XCHUNKS 8                     /* score_raw: row chunks shipped and scored in a pipeline */
#define XCHUNK_BYTES ((size_t)6 << 20)    /* ... of about this many raw bytes (and >= XCHUNK_ROWS rows) */
#define XCHUNK_ROWS 8192

enum { XEV_START = 0, XEV_H2D, XEV_FP, XEV_KERNEL, XEV_END, XNEV };

/* score_raw: a chunk of rows shipped and scored together (its first and end value per input) */
struct xchunk { size_t r0, r1, base, bytes; uint32_t lo[64], hi[64]; };

/* One device's part of a score_raw call: rows [r0, r1) of the raw batch, queued by
 * part_launch and collected by part_finish. */
struct xpart {
    size_t r0, r1, nch;
    struct xchunk ch[MAX_XCHUNKS];
    size_t oout, ocnt, back;       /* answers and counters in the device buffer; bytes coming back */
    uint64_t bytes;                /* shipped */
};

typedef struct xf {
    int dev;
    int k;                       /* the session's k-th device */
    cudaStream_t st;             /* copies in (and everything of the transform path) */
    cudaStream_t cst;            /* score_raw: kernels and the copy out */
    cudaEvent_t ev[XNEV];
    cudaEvent_t ready[MAX_XCHUNKS], fp0[MAX_XCHUNKS], fp1[MAX_XCHUNKS];
    /* the compiled description */
    wisp_columns *cols;          /* retained; NULL before the first call */
    void *dplan;
    wisp_tplan plan;
    /* buffers: device (raw + outputs), pinned staging, CSR outputs */
    char *dbuf; size_t dcap;
    char *stage; size_t scap;
    char *dcsr; size_t csr_cap;
    wisp_engine *eng;            /* whose pinned memory the staging is */
    /* the current call's layout */
    wisp_tinput *tin;            /* host copy of the device input array */
    struct xpart part;           /* score_raw: this device's rows of the call */
} xf;

static size_t al(size_t x) { return (x + AL - 1) & ~(size_t)(AL - 1); }

/* A CUDA failure on the session's k-th device (a sticky one marks it unusable). */
static int cfail(void *sctx, int k, cudaError_t e, const char *what)
{
    return wisp__cuda_failed(sctx, k, (int)e, what);
}

void wisp__cuda_xf_free(void *vx)
{
    xf *x = vx;
    if (!x) return;
    if (cudaSetDevice(x->dev) != cudaSuccess) cudaGetLastError();
    if (x->st && cudaStreamSynchronize(x->st) != cudaSuccess) cudaGetLastError();
    if (x->cst && cudaStreamSynchronize(x->cst) != cudaSuccess) cudaGetLastError();
    for (int i = 0; i < XNEV; i++) if (x->ev[i]) cudaEventDestroy(x->ev[i]);
    for (int i = 0; i < MAX_XCHUNKS; i++) {
        if (x->ready[i]) cudaEventDestroy(x->ready[i]);
        if (x->fp0[i]) cudaEventDestroy(x->fp0[i]);
        if (x->fp1[i]) cudaEventDestroy(x->fp1[i]);
    }
    if (x->st) cudaStreamDestroy(x->st);
    if (x->cst) cudaStreamDestroy(x->cst);
    if (x->dplan) cudaFree(x->dplan);
    if (x->dbuf) cudaFree(x->dbuf);
    if (x->dcsr) cudaFree(x->dcsr);
    cudaGetLastError();
    if (x->stage) wisp__host_free(x->eng, x->stage);
    wisp_columns_free(x->cols);
    wisp__free(x->tin);
    if (x->eng) wisp_engine_free(x->eng);
    wisp__free(x);
}

/* The transform's state on the session's k-th device (created on first use), that device current. */
static int xf_get(void *sctx, int k, wisp_engine *eng, xf **out)
{
    void **slot = &((sess *)sctx)->xf[k];
    xf *x = *slot;
    int dev = ((sess *)sctx)->devs[k];
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) return cfail(sctx, k, e, "selecting the device");
    if (!x) {
        x = wisp__calloc(1, sizeof *x);
        if (!x) return wisp__fail(WISP_ENOMEM, "cuda transform: out of host memory");
        x->dev = dev;
        x->k = k;
        x->eng = eng;
        wisp__engine_retain(eng);
        e = cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&x->cst, cudaStreamNonBlocking);
        for (int i = 0; i < XNEV && e == cudaSuccess; i++) e = cudaEventCreate(&x->ev[i]);
        for (int i = 0; i < MAX_XCHUNKS && e == cudaSuccess; i++) {
            e = cudaEventCreateWithFlags(&x->ready[i], cudaEventDisableTiming);
            if (e == cudaSuccess) e = cudaEventCreate(&x->fp0[i]);
            if (e == cudaSuccess) e = cudaEventCreate(&x->fp1[i]);
        }
        if (e != cudaSuccess) {
            wisp__cuda_xf_free(x);
            return cfail(sctx, k, e, "creating the transform's stream");
        }
        *slot = x;
    }
    *out = x;
    return WISP_OK;
}

/* ---- the description, compiled for the device ---------------------------------------- */

struct planlay { size_t nodes, cols, bounds, keys, slots, hash, vint, soff, slen, bytes, total; };

static int plan_build(void *sctx, xf *x, wisp_columns *c)
{
    if (x->cols == c) return WISP_OK;
    for (size_t ni = 0; ni < c->nnodes; ni++) {
        const struct wisp_node *nd = &c->nodes[ni];
        if (nd->kind != WISP_NODE_CROSSED) continue;
        for (uint32_t k = 0; k < nd->nkeys; k++)
            if (!nd->keys[k].raw && c->nodes[nd->keys[k].index].kind == WISP_NODE_CROSSED)
                return wisp__fail(WISP_EDEVICE,
                                  "cuda transform: column node %zu crosses a crossed node (not flattened)", ni);
    }
    size_t nb = 0, nk = 0, ns = 0, ne = 0, nby = 0;
    for (size_t ni = 0; ni < c->nnodes; ni++) {
        const struct wisp_node *nd = &c->nodes[ni];
        nb += nd->nbounds;
        nk += nd->nkeys;
        if (nd->kind == WISP_NODE_VOCAB) {
            ns += (size_t)nd->vocab_mask + 1;
            ne += nd->vocab_n;
            if (nd->vocab_str)
                for (uint32_t i = 0; i < nd->vocab_n; i++) nby += nd->vocab_len[i];
        }
    }
    struct planlay L;
    size_t o = 0;
    L.nodes = o; o += al(c->nnodes * sizeof(wisp_tnode) + 1);
    L.cols = o; o += al(c->ncols * sizeof(wisp_tcol) + 1);
    L.bounds = o; o += al(nb * 4 + 1);
    L.keys = o; o += al(nk * 4 + 1);
    L.slots = o; o += al(ns * 4 + 1);
    L.hash = o; o += al(ne * 8 + 1);
    L.vint = o; o += al(ne * 8 + 1);
    L.soff = o; o += al(ne * 4 + 1);
    L.slen = o; o += al(ne * 4 + 1);
    L.bytes = o; o += al(nby + 1);
    L.total = o;
    char *h = wisp__calloc(1, L.total);
    if (!h) return wisp__fail(WISP_ENOMEM, "cuda transform: out of host memory for the compiled description");
    wisp_tnode *tn = (wisp_tnode *)(h + L.nodes);
    wisp_tcol *tc = (wisp_tcol *)(h + L.cols);
    float *tb = (float *)(h + L.bounds);
    uint32_t *tk = (uint32_t *)(h + L.keys), *tsl = (uint32_t *)(h + L.slots);
    uint64_t *th = (uint64_t *)(h + L.hash);
    int64_t *ti = (int64_t *)(h + L.vint);
    uint32_t *tso = (uint32_t *)(h + L.soff), *tsn = (uint32_t *)(h + L.slen);
    char *tby = h + L.bytes;
    size_t ob = 0, okk = 0, os = 0, oe = 0, oby = 0;
    for (size_t ni = 0; ni < c->nnodes; ni++) {
        const struct wisp_node *nd = &c->nodes[ni];
        wisp_tnode *t = &tn[ni];
        t->kind = nd->kind;
        t->input = (int32_t)nd->input;
        t->norm = nd->norm;
        t->source = (int32_t)nd->source;
        t->norm_a = nd->norm_a;
        t->norm_b = nd->norm_b;
        t->bounds_off = (uint32_t)ob;
        t->nbounds = nd->nbounds;
        if (nd->nbounds) memcpy(tb + ob, nd->bounds, nd->nbounds * sizeof *tb);
        ob += nd->nbounds;
        t->buckets = nd->buckets;
        t->magic_lo = nd->magic_lo;
        t->magic_hi = nd->magic_hi;
        t->pow2_mask = nd->pow2_mask;
        t->default_value = nd->default_value;
        t->num_oov = nd->num_oov;
        t->has_default = nd->has_default;
        t->keys_off = (uint32_t)okk;
        t->nkeys = nd->nkeys;
        for (uint32_t k = 0; k < nd->nkeys; k++) tk[okk++] = (nd->keys[k].raw ? 0x80000000u : 0) | nd->keys[k].index;
        t->hash_key = nd->hash_key;
        if (nd->kind == WISP_NODE_VOCAB) {
            t->vocab_n = nd->vocab_n;
            t->vocab_mask = nd->vocab_mask;
            t->vocab_slots_off = (uint32_t)os;
            t->vocab_ent_off = (uint32_t)oe;
            memcpy(tsl + os, nd->vocab_slots, ((size_t)nd->vocab_mask + 1) * 4);
            os += (size_t)nd->vocab_mask + 1;
            for (uint32_t i = 0; i < nd->vocab_n; i++) {
                th[oe + i] = nd->vocab_hash[i];
                if (nd->vocab_int) ti[oe + i] = nd->vocab_int[i];
                if (nd->vocab_str) {
                    tso[oe + i] = (uint32_t)oby;
                    tsn[oe + i] = nd->vocab_len[i];
                    memcpy(tby + oby, nd->vocab_str[i], nd->vocab_len[i]);
                    oby += nd->vocab_len[i];
                }
            }
            oe += nd->vocab_n;
        }
    }
    for (size_t ci = 0; ci < c->ncols; ci++) {
        tc[ci].node = c->cols[ci].node;
        tc[ci].offset = c->cols[ci].offset;
    }
    char *d = NULL;
    cudaError_t e = cudaMalloc((void **)&d, L.total);
    if (e == cudaSuccess) e = cudaMemcpy(d, h, L.total, cudaMemcpyHostToDevice);
    wisp__free(h);
    if (e != cudaSuccess) {
        if (d) cudaFree(d);
        return cfail(sctx, x->k, e, "uploading the compiled description");
    }
    if (x->dplan) cudaFree(x->dplan);
    x->dplan = d;
    wisp_tplan *p = &x->plan;
    p->nodes = (const wisp_tnode *)(d + L.nodes);
    p->cols = (const wisp_tcol *)(d + L.cols);
    p->bounds = (const float *)(d + L.bounds);
    p->keys = (const uint32_t *)(d + L.keys);
    p->vocab_slots = (const uint32_t *)(d + L.slots);
    p->vocab_hash = (const uint64_t *)(d + L.hash);
    p->vocab_int = (const int64_t *)(d + L.vint);
    p->vocab_soff = (const uint32_t *)(d + L.soff);
    p->vocab_slen = (const uint32_t *)(d + L.slen);
    p->vocab_bytes = d + L.bytes;
    p->nnodes = (uint32_t)c->nnodes;
    p->ncols = (uint32_t)c->ncols;
    p->ninputs = (uint32_t)c->ninputs;
    wisp__columns_retain(c);
    wisp_columns_free(x->cols);
    x->cols = c;
    wisp_tinput *tin = wisp__realloc(x->tin, (c->ninputs ? c->ninputs : 1) * sizeof *tin);
    if (!tin) return wisp__fail(WISP_ENOMEM, "cuda transform: out of host memory");
    x->tin = tin;
    return WISP_OK;
}

/* ---- shipping the raw columns ---------------------------------------------------------- */

struct seg { char *dst; const char *src; size_t len; };

typedef struct {
    struct seg *segs; size_t nsegs, cap;
    /* packing tasks of the current group */
    struct seg *pieces; size_t npieces, pcap;
} shipper;

static int add_seg(shipper *sh, char *dst, const void *src, size_t len)
{
    if (!len) return WISP_OK;
    if (sh->nsegs == sh->cap) {
        size_t nc = sh->cap ? sh->cap * 2 : 64;
        struct seg *n = wisp__realloc(sh->segs, nc * sizeof *n);
        if (!n) return wisp__fail(WISP_ENOMEM, "cuda transform: out of host memory");
        sh->segs = n;
        sh->cap = nc;
    }
    sh->segs[sh->nsegs++] = (struct seg){ dst, src, len };
    return WISP_OK;
}

static void pack_task(void *ctx, size_t i)
{
    shipper *sh = ctx;
    memcpy(sh->pieces[i].dst, sh->pieces[i].src, sh->pieces[i].len);
}

/* The raw batch's device layout: fills x->tin (device pointers) and the segments to ship. */
struct rawlay { size_t tin, skip, shipped, out, cnt, total; };

static int raw_layout(xf *x, const wisp_raw *r, shipper *sh, struct rawlay *L, size_t extra_out)
{
    const wisp_columns *c = r->cols;
    const size_t rows = r->rows;
    size_t o = 0;
    L->tin = o; o += al(c->ninputs * sizeof(wisp_tinput) + 1);
    L->skip = o; if (r->nbad) o += al(rows);
    /* per input arrays (offsets into the buffer recorded in tin as integers first) */
    for (size_t i = 0; i < c->ninputs; i++) {
        const struct wisp_input *in = &c->inputs[i];
        const struct wisp_raw_input *ri = &r->in[i];
        wisp_tinput *t = &x->tin[i];
        memset(t, 0, sizeof *t);
        t->dtype = in->dtype;
        t->sparse = in->sparse;
        t->need_fp = in->need_fp && in->dtype == WISP_INPUT_STRING;
        size_t n = in->sparse ? ri->n : rows;
        /* (never for a raw batch built by raw.c; EDEVICE sends such a batch to the CPU path) */
        if (in->sparse ? (!ri->indptr || ri->indptr[rows] != ri->n || ri->indptr[0] != 0) : ri->n < rows)
            return wisp__fail(WISP_EDEVICE, "cuda transform: input '%s': %zu values do not match %zu rows", in->name,
                              ri->n, rows);
        if (n > 0xFFFFFFF0u || (in->dtype == WISP_INPUT_STRING && n && (!ri->str_off || ri->str_off[0] != 0)))
            return wisp__fail(WISP_EDEVICE, "cuda transform: input '%s': %zu values, not shippable", in->name, n);
        t->n = (uint32_t)n;
        if (in->sparse) { t->indptr = (const uint32_t *)(uintptr_t)o; o += al((rows + 1) * 4); }
        if (in->dtype == WISP_INPUT_STRING) {
            t->str_off = (const uint32_t *)(uintptr_t)o; o += al((n + 1) * 4);
            t->vals = (const void *)(uintptr_t)o; o += al((n ? ri->str_off[n] : 0) + 8);
        } else {
            t->vals = (const void *)(uintptr_t)o;
            o += al(n * (in->dtype == WISP_INPUT_INT64 ? 8 : 4) + 1);
        }
    }
    L->shipped = o;
    for (size_t i = 0; i < c->ninputs; i++)
        if (x->tin[i].need_fp) { x->tin[i].fp = (uint64_t *)(uintptr_t)o; o += al((size_t)x->tin[i].n * 8 + 1); }
    L->out = o; o += al(extra_out + 1);
    L->cnt = o; o += al(sizeof(wisp_tcount));
    L->total = o;
    return WISP_OK;
}

static int ensure(void *sctx, xf *x, size_t dbytes, size_t sbytes)
{
    if (dbytes > x->dcap) {
        if (x->dbuf) cudaFree(x->dbuf);
        x->dbuf = NULL;
        x->dcap = 0;
        size_t cap = dbytes + dbytes / 4;
        cudaError_t e = cudaMalloc((void **)&x->dbuf, cap);
        if (e != cudaSuccess) {
            x->dbuf = NULL;
            return cfail(sctx, x->k, e, "allocating the transform's device buffer");
        }
        x->dcap = cap;
    }
    if (sbytes > x->scap) {
        if (x->stage) wisp__host_free(x->eng, x->stage);
        size_t cap = sbytes + sbytes / 4;
        x->stage = wisp__host_alloc(x->eng, cap);
        x->scap = x->stage ? cap : 0;
        if (!x->stage) return wisp__fail(WISP_EDEVICE, "cuda transform: no pinned staging memory (%zu bytes)", cap);
    }
    return WISP_OK;
}

/* Pack and copy [0, L->shipped) of the layout: the input table, skip flags, raw arrays. */
static int ship(void *sctx, xf *x, const wisp_raw *r, const struct rawlay *L, uint64_t *bytes)
{
    const wisp_columns *c = r->cols;
    const size_t rows = r->rows;
    char *d = x->dbuf, *h = x->stage;
    shipper sh;
    memset(&sh, 0, sizeof sh);
    int st = WISP_OK;
    /* device pointers into the table (its host copy stays with offsets made absolute) */
    for (size_t i = 0; i < c->ninputs; i++) {
        wisp_tinput *t = &x->tin[i];
        const struct wisp_raw_input *ri = &r->in[i];
        const size_t n = t->n;
        if (t->indptr) {
            size_t off = (uintptr_t)t->indptr;
            t->indptr = (const uint32_t *)(d + off);
            st |= add_seg(&sh, h + off, ri->indptr, (rows + 1) * 4);
        }
        if (t->dtype == WISP_INPUT_STRING) {
            size_t so = (uintptr_t)t->str_off, vo = (uintptr_t)t->vals;
            t->str_off = (const uint32_t *)(d + so);
            t->vals = d + vo;
            static const uint32_t zero = 0;
            st |= add_seg(&sh, h + so, n ? (const void *)ri->str_off : (const void *)&zero, (n + 1) * 4);
            if (n) st |= add_seg(&sh, h + vo, ri->bytes, ri->str_off[n]);
        } else {
            size_t vo = (uintptr_t)t->vals;
            t->vals = d + vo;
            st |= add_seg(&sh, h + vo, ri->vals, n * (t->dtype == WISP_INPUT_INT64 ? 8 : 4));
        }
        if (t->fp) t->fp = (uint64_t *)(d + (uintptr_t)t->fp);
    }
    if (st) { wisp__free(sh.segs); return WISP_ENOMEM; }
    memcpy(h + L->tin, x->tin, c->ninputs * sizeof *x->tin);
    if (r->nbad) {
        memset(h + L->skip, 0, rows);
        for (size_t i = 0; i < r->nbad; i++) if (r->bad[i].row < rows) h[L->skip + r->bad[i].row] = 1;
    }
    cudaError_t e = cudaEventRecord(x->ev[XEV_START], x->st);
    /* the table and flags first (small), then groups of segments as they are packed */
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(d, h, L->tin + al(c->ninputs * sizeof(wisp_tinput) + 1) + (r->nbad ? al(rows) : 0),
                                              cudaMemcpyHostToDevice, x->st);
    *bytes = L->tin + al(c->ninputs * sizeof(wisp_tinput) + 1) + (r->nbad ? al(rows) : 0);
    size_t k = 0;
    while (e == cudaSuccess && k < sh.nsegs) {
        /* a group: segments up to GROUP_BYTES, cut into pieces for the pool */
        size_t g0 = k, gbytes = 0;
        while (k < sh.nsegs && (k == g0 || gbytes + sh.segs[k].len <= GROUP_BYTES)) gbytes += sh.segs[k++].len;
        sh.npieces = 0;
        for (size_t q = g0; q < k; q++) {
            for (size_t off = 0; off < sh.segs[q].len; off += PIECE_BYTES) {
                if (sh.npieces == sh.pcap) {
                    size_t nc = sh.pcap ? sh.pcap * 2 : 64;
                    struct seg *n = wisp__realloc(sh.pieces, nc * sizeof *n);
                    if (!n) {
                        wisp__free(sh.segs);
                        wisp__free(sh.pieces);
                        return wisp__fail(WISP_ENOMEM, "cuda transform: out of host memory");
                    }
                    sh.pieces = n;
                    sh.pcap = nc;
                }
                size_t len = sh.segs[q].len - off < PIECE_BYTES ? sh.segs[q].len - off : PIECE_BYTES;
                sh.pieces[sh.npieces++] = (struct seg){ sh.segs[q].dst + off, sh.segs[q].src + off, len };
            }
        }
        NVTX_PUSH("wisp pack raw");
        if (sh.npieces > 1) wisp__pool_run(x->eng->pool, sh.npieces, pack_task, &sh);
        else if (sh.npieces == 1) pack_task(&sh, 0);
        NVTX_POP();
        /* one copy from the group's first byte to its last (the alignment gaps are few and small) */
        char *lo = sh.segs[g0].dst, *hi = sh.segs[k - 1].dst + sh.segs[k - 1].len;
        e = cudaMemcpyAsync(d + (lo - h), lo, (size_t)(hi - lo), cudaMemcpyHostToDevice, x->st);
        *bytes += (size_t)(hi - lo);
    }
    wisp__free(sh.segs);
    wisp__free(sh.pieces);
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[XEV_H2D], x->st);
    if (e != cudaSuccess) return cfail(sctx, x->k, e, "copying the raw columns");
    return WISP_OK;
}

static uint64_t ev_ns(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) { cudaGetLastError(); return 0; }
    return ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
}

static int prepare(void *sctx, const wisp_raw *r, size_t out_bytes, xf **px, struct rawlay *L, wisp_traw *traw,
                   uint64_t *stats)
{
    if (r->rows > 0xFFFFFFF0u) return wisp__fail(WISP_ELIMIT, "cuda transform: %zu rows", r->rows);
    xf *x = NULL;
    int st = xf_get(sctx, 0, r->eng, &x);
    if (st) return st;
    st = plan_build(sctx, x, r->cols);
    if (st) return st;
    shipper none;
    memset(&none, 0, sizeof none);
    st = raw_layout(x, r, &none, L, out_bytes);
    if (st) return st;
    const size_t back = L->total - L->out;             /* what comes back lands in the staging too */
    st = ensure(sctx, x, L->total, L->shipped > back ? L->shipped : back);
    if (st) return st;
    uint64_t bytes = 0;
    NVTX_PUSH("wisp ship raw");
    st = ship(sctx, x, r, L, &bytes);
    NVTX_POP();
    if (st) return st;
    stats[WISP_STAT_BYTES_H2D] += bytes;
    traw->in = (const wisp_tinput *)(x->dbuf + L->tin);
    traw->skip = r->nbad ? (const uint8_t *)(x->dbuf + L->skip) : NULL;
    traw->rows = (uint32_t)r->rows;
    traw->row0 = 0;
    NVTX_PUSH("wisp fingerprints");
    cudaError_t e = (cudaError_t)wisp_k_fingerprints(x->tin, (uint32_t)r->cols->ninputs, NULL, NULL, x->st);
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[XEV_FP], x->st);
    NVTX_POP();
    if (e != cudaSuccess) return cfail(sctx, x->k, e, "fingerprinting the raw strings");
    *px = x;
    return WISP_OK;
}

/* ---- score_raw: fused, in a pipeline of row chunks -----------------------------------------
 * The rows are cut into up to MAX_XCHUNKS chunks. Chunk c's slice of every input (row
 * offsets, values, string offsets and bytes) is laid out contiguously in the device
 * buffer behind its own input table, whose pointers are biased so that the kernels
 * index every array with the batch's absolute indices; so one copy moves a chunk.
 * The host packs chunk c+1 (the engine's threads) while chunk c crosses PCIe on the
 * copy stream and chunk c-1 is fingerprinted and scored on the compute stream. */


/* the string offsets of a string input that holds no value (wisp_raw allocates them with the first) */
static const uint32_t no_strings[1] = { 0 };

static uintptr_t biased(const char *base, size_t off, size_t index_bias)
{
    return (uintptr_t)base + off - index_bias;
}

/* p is page-locked host memory (a copy from it is a DMA, no staging). 0 for NULL. */
static int pinned_host(const void *p)
{
    if (!p) return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Queue the copies of one chunk's segments: those in `packed` from their place in
 * the staging (already packed), those in `direct` from their pinned source. */
static cudaError_t copy_segs(const shipper *packed, const shipper *direct, char *d, const char *h, cudaStream_t st,
                             uint64_t *bytes)
{
    cudaError_t e = cudaSuccess;
    for (size_t g = 0; g < packed->nsegs && e == cudaSuccess; g++) {
        const struct seg *sg = &packed->segs[g];
        e = cudaMemcpyAsync(d + (sg->dst - h), sg->dst, sg->len, cudaMemcpyHostToDevice, st);
        *bytes += sg->len;
    }
    for (size_t g = 0; g < direct->nsegs && e == cudaSuccess; g++) {
        const struct seg *sg = &direct->segs[g];
        e = cudaMemcpyAsync(d + (sg->dst - h), sg->src, sg->len, cudaMemcpyHostToDevice, st);
        *bytes += sg->len;
    }
    return e;
}

/* Queue rows [R0, R1) of r on the session's k-th device: chunks shipped on the copy
 * stream, fingerprinted and scored on the compute stream, the answers copied back into
 * the staging; nothing waits. Device arrays are biased by the part's first row (and
 * first value), so the kernels index everything with the batch's absolute indices. */
static int part_launch(void *sctx, int k, wisp_model *m, const wisp_raw *r, size_t R0, size_t R1, xf **px,
                       uint64_t *stats)
{
    const size_t rows = r->rows, prows = R1 - R0;
    const void *w = NULL;
    xf *x = NULL;
    int st = wisp__cuda_weights(sctx, k, m, &w, stats);
    if (st) return st;
    if ((st = xf_get(sctx, k, r->eng, &x))) return st;
    if ((st = plan_build(sctx, x, r->cols))) return st;
    const wisp_columns *c = r->cols;
    const size_t ni = c->ninputs;
    /* the whole layout first: it checks the raw batch and sizes the fingerprints */
    struct rawlay L;
    shipper none;
    memset(&none, 0, sizeof none);
    if ((st = raw_layout(x, r, &none, &L, 0))) return st;
    if (ni > 64) return wisp__fail(WISP_EDEVICE, "cuda transform: %zu inputs (the chunked path takes 64)", ni);
    struct xpart *P = &x->part;
    P->r0 = R0;
    P->r1 = R1;
    P->bytes = 0;
    size_t nch = (size_t)((double)L.shipped * (double)prows / (double)rows) / XCHUNK_BYTES;
    if (nch > prows / XCHUNK_ROWS) nch = prows / XCHUNK_ROWS;
    const char *cr = getenv("WISP_GPU_XF_CHUNK_ROWS");      /* tests: chunks of this many rows (at most 8) */
    if (cr && *cr && strtoul(cr, NULL, 10) > 0) nch = prows / strtoul(cr, NULL, 10);
    if (nch < 1) nch = 1;
    if (nch > MAX_XCHUNKS) nch = MAX_XCHUNKS;
    P->nch = nch;
    /* device layout: head (skip flags of the part's rows) | chunks | fingerprints | out | counters */
    const size_t tab = al(ni * sizeof(wisp_tinput) + 1);
    struct xchunk *ch = P->ch;
    size_t o = al(r->nbad ? prows : 1);
    for (size_t q0 = 0; q0 < nch; q0++) {
        struct xchunk *q = &ch[q0];
        q->r0 = R0 + prows * q0 / nch;
        q->r1 = R0 + prows * (q0 + 1) / nch;
        q->base = o;
        size_t b = tab;
        for (size_t i = 0; i < ni; i++) {
            const struct wisp_input *in = &c->inputs[i];
            const struct wisp_raw_input *ri = &r->in[i];
            size_t a = in->sparse ? ri->indptr[q->r0] : q->r0, z = in->sparse ? ri->indptr[q->r1] : q->r1;
            q->lo[i] = (uint32_t)a;
            q->hi[i] = (uint32_t)z;
            if (in->sparse) b += al((q->r1 - q->r0 + 1) * 4);
            if (in->dtype == WISP_INPUT_STRING) {
                const uint32_t *so = ri->str_off ? ri->str_off : no_strings;   /* a string input with no value yet */
                b += al((z - a + 1) * 4) + al(so[z] - so[a] + 8);
            }
            else b += al((z - a) * (in->dtype == WISP_INPUT_INT64 ? 8 : 4) + 1);
        }
        q->bytes = b;
        o += b;
    }
    const size_t shipped = o;
    size_t fpo[64];
    for (size_t i = 0; i < ni; i++)
        if (x->tin[i].need_fp) { fpo[i] = o; o += al((size_t)(ch[nch - 1].hi[i] - ch[0].lo[i]) * 8 + 1); }
    P->oout = o;
    o += al(prows * 4);
    P->ocnt = o;
    o += al(sizeof(wisp_tcount));
    P->back = o - P->oout;
    if ((st = ensure(sctx, x, o, shipped > P->back ? shipped : P->back))) return st;
    char *d = x->dbuf, *h = x->stage;
    /* head: the skip flags */
    cudaError_t e = cudaEventRecord(x->ev[XEV_START], x->st);
    uint64_t bytes = 0;
    if (r->nbad) {
        memset(h, 0, prows);
        for (size_t i = 0; i < r->nbad; i++)
            if (r->bad[i].row >= R0 && r->bad[i].row < R1) h[r->bad[i].row - R0] = 1;
        if (e == cudaSuccess) e = cudaMemcpyAsync(d, h, prows, cudaMemcpyHostToDevice, x->st);
        bytes += prows;
    }
    wisp_tcount *dcnt = (wisp_tcount *)(d + P->ocnt);
    if (e == cudaSuccess) e = cudaMemsetAsync(dcnt, 0, sizeof *dcnt, x->cst);
    /* which arrays are pinned: their slices go to the device without packing
     * (pin[i]: 1 indptr, 2 vals or string bytes, 4 string offsets) */
    unsigned char pin[64];
    int direct = 0;
    /* WISP_GPU_XF_DIRECT=0: pack every array (the path before direct copies, kept to compare) */
    const char *dx = getenv("WISP_GPU_XF_DIRECT");
    const int allow_direct = !(dx && strcmp(dx, "0") == 0);
    for (size_t i = 0; i < ni; i++) {
        const struct wisp_input *in = &c->inputs[i];
        const struct wisp_raw_input *ri = &r->in[i];
        const int str = in->dtype == WISP_INPUT_STRING;
        pin[i] = 0;
        if (!allow_direct) continue;
        if (in->sparse && pinned_host(ri->indptr)) pin[i] |= 1;
        if (pinned_host(str ? (const void *)ri->bytes : ri->vals)) pin[i] |= 2;
        if (str && pinned_host(ri->str_off)) pin[i] |= 4;
        direct |= pin[i] != 0;
    }
    shipper sh, dsh;                 /* segments to pack; segments copied from pinned memory */
    memset(&sh, 0, sizeof sh);
    memset(&dsh, 0, sizeof dsh);
    wisp_tinput tins[64];
    float *dout = (float *)biased(d, P->oout, R0 * 4);
    const uint8_t *dskip = r->nbad ? (const uint8_t *)biased(d, 0, R0) : NULL;
    for (size_t q0 = 0; q0 < nch && e == cudaSuccess; q0++) {
        struct xchunk *q = &ch[q0];
        /* the chunk's table (biased pointers) and its segments */
        size_t b = q->base + tab;
        sh.nsegs = 0;
        dsh.nsegs = 0;
        for (size_t i = 0; i < ni; i++) {
            const struct wisp_input *in = &c->inputs[i];
            const struct wisp_raw_input *ri = &r->in[i];
            wisp_tinput *t = &tins[i];
            *t = x->tin[i];
            const size_t a = q->lo[i], z = q->hi[i];
            if (in->sparse) {
                t->indptr = (const uint32_t *)biased(d, b, q->r0 * 4);
                st |= add_seg(pin[i] & 1 ? &dsh : &sh, h + b, ri->indptr + q->r0, (q->r1 - q->r0 + 1) * 4);
                b += al((q->r1 - q->r0 + 1) * 4);
            }
            if (in->dtype == WISP_INPUT_STRING) {
                t->str_off = (const uint32_t *)biased(d, b, a * 4);
                const uint32_t *so = ri->str_off ? ri->str_off : no_strings;   /* NULL: no value, a == z == 0 */
                st |= add_seg(pin[i] & 4 ? &dsh : &sh, h + b, so + a, (z - a + 1) * 4);
                b += al((z - a + 1) * 4);
                t->vals = (const void *)biased(d, b, so[a]);
                if (so[z] > so[a]) st |= add_seg(pin[i] & 2 ? &dsh : &sh, h + b, ri->bytes + so[a], so[z] - so[a]);
                b += al(so[z] - so[a] + 8);
            } else {
                const size_t elt = in->dtype == WISP_INPUT_INT64 ? 8 : 4;
                t->vals = (const void *)biased(d, b, a * elt);
                st |= add_seg(pin[i] & 2 ? &dsh : &sh, h + b, (const char *)ri->vals + a * elt, (z - a) * elt);
                b += al((z - a) * elt + 1);
            }
            t->fp = t->need_fp ? (uint64_t *)biased(d, fpo[i], (size_t)ch[0].lo[i] * 8) : NULL;
        }
        if (st) break;
        memcpy(h + q->base, tins, ni * sizeof *tins);
        /* pack (the engine's threads), then one copy for the chunk */
        sh.npieces = 0;
        for (size_t g = 0; g < sh.nsegs && st == WISP_OK; g++)
            for (size_t off = 0; off < sh.segs[g].len; off += PIECE_BYTES) {
                if (sh.npieces == sh.pcap) {
                    size_t nc = sh.pcap ? sh.pcap * 2 : 256;
                    struct seg *nw = wisp__realloc(sh.pieces, nc * sizeof *nw);
                    if (!nw) { st = WISP_ENOMEM; break; }
                    sh.pieces = nw;
                    sh.pcap = nc;
                }
                size_t len = sh.segs[g].len - off < PIECE_BYTES ? sh.segs[g].len - off : PIECE_BYTES;
                sh.pieces[sh.npieces++] = (struct seg){ sh.segs[g].dst + off, sh.segs[g].src + off, len };
            }
        if (st) break;
        NVTX_PUSH("wisp pack raw chunk");
        if (sh.npieces > 1) wisp__pool_run(x->eng->pool, sh.npieces, pack_task, &sh);
        else if (sh.npieces == 1) pack_task(&sh, 0);
        NVTX_POP();
        NVTX_PUSH("wisp copy raw chunk");
        if (!direct) {                   /* everything packed: one copy for the chunk */
            e = cudaMemcpyAsync(d + q->base, h + q->base, q->bytes, cudaMemcpyHostToDevice, x->st);
            bytes += q->bytes;
        } else {                         /* the table, then each segment from the staging or its pinned source */
            e = cudaMemcpyAsync(d + q->base, h + q->base, ni * sizeof *tins, cudaMemcpyHostToDevice, x->st);
            bytes += ni * sizeof *tins;
            if (e == cudaSuccess) e = copy_segs(&sh, &dsh, d, h, x->st, &bytes);
        }
        if (e == cudaSuccess) e = cudaEventRecord(x->ready[q0], x->st);
        NVTX_POP();
        /* the compute stream: this chunk's fingerprints, then the fused kernel over its rows */
        NVTX_PUSH("wisp fingerprints + fused kernel");
        if (e == cudaSuccess) e = cudaStreamWaitEvent(x->cst, x->ready[q0], 0);
        if (e == cudaSuccess) e = cudaEventRecord(x->fp0[q0], x->cst);
        if (e == cudaSuccess) e = (cudaError_t)wisp_k_fingerprints(tins, (uint32_t)ni, q->lo, q->hi, x->cst);
        if (e == cudaSuccess) e = cudaEventRecord(x->fp1[q0], x->cst);
        wisp_traw traw = { (const wisp_tinput *)(d + q->base), dskip, (uint32_t)q->r1, (uint32_t)q->r0 };
        if (e == cudaSuccess)
            e = (cudaError_t)wisp_k_xf_score(&x->plan, &traw, w, m->dtype, m->scale, m->num_features, m->bias, dout,
                                             dcnt, x->cst);
        NVTX_POP();
    }
    wisp__free(sh.segs);
    wisp__free(sh.pieces);
    wisp__free(dsh.segs);
    if (st) {
        if (cudaStreamSynchronize(x->st) != cudaSuccess || cudaStreamSynchronize(x->cst) != cudaSuccess)
            cudaGetLastError();
        return wisp__fail(WISP_ENOMEM, "cuda score_raw: out of host memory");
    }
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[XEV_H2D], x->st);
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[XEV_KERNEL], x->cst);
    /* into the staging: its shipped part has crossed by the time this lands */
    if (e == cudaSuccess) e = cudaMemcpyAsync(h, d + P->oout, P->back, cudaMemcpyDeviceToHost, x->cst);
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[XEV_END], x->cst);
    P->bytes = bytes;
    if (e != cudaSuccess) {
        if (cudaStreamSynchronize(x->st) != cudaSuccess || cudaStreamSynchronize(x->cst) != cudaSuccess)
            cudaGetLastError();
        return cfail(sctx, x->k, e, "scoring raw rows");
    }
    *px = x;
    return WISP_OK;
}

/* Wait for a launched part's answers (into out[r0, r1)); its stage times into t[] (h2d,
 * fingerprints, kernel, d2h) and its counters into cnt. */
static int part_finish(void *sctx, xf *x, float *out, uint64_t *t, wisp_tcount *cnt)
{
    const struct xpart *P = &x->part;
    cudaError_t e = cudaSetDevice(x->dev);
    NVTX_PUSH("wisp sync");
    if (e == cudaSuccess) e = cudaEventSynchronize(x->ev[XEV_END]);
    NVTX_POP();
    if (e != cudaSuccess) {
        if (cudaStreamSynchronize(x->st) != cudaSuccess || cudaStreamSynchronize(x->cst) != cudaSuccess)
            cudaGetLastError();
        return cfail(sctx, x->k, e, "scoring raw rows");
    }
    const char *hout = x->stage;
    memcpy(out + P->r0, hout, (P->r1 - P->r0) * 4);
    memcpy(cnt, hout + (P->ocnt - P->oout), sizeof *cnt);
    uint64_t fp = 0;
    for (size_t q = 0; q < P->nch; q++) fp += ev_ns(x->fp0[q], x->fp1[q]);
    const uint64_t comp = ev_ns(x->fp0[0], x->ev[XEV_KERNEL]);
    t[0] = ev_ns(x->ev[XEV_START], x->ev[XEV_H2D]);
    t[1] = fp;
    t[2] = comp > fp ? comp - fp : 0;
    t[3] = ev_ns(x->ev[XEV_KERNEL], x->ev[XEV_END]);
    t[4] = comp;
    return WISP_OK;
}

/* Fused transform + score. On a session of several GPUs the rows are split into one
 * contiguous part per device (as score splits a batch), each part queued on its device
 * before any is waited for, so the devices work at once. Stage times are the slowest
 * part's (the parts overlap); bytes and counts add up. */
int wisp__cuda_xf_score_raw(void *sctx, wisp_model *m, const wisp_raw *r, float *out, uint64_t *stats)
{
    if (!sctx || !m || !r) return wisp__fail(WISP_EINVAL, "cuda score_raw: NULL argument");
    const size_t rows = r->rows;
    if (!rows) return WISP_OK;
    if (rows > 0xFFFFFFF0u) return wisp__fail(WISP_ELIMIT, "cuda transform: %zu rows", rows);
    const uint64_t t0 = wisp__now_ns();
    /* parts: one per device, each of at least XCHUNK_ROWS rows (WISP_GPU_XF_CHUNK_ROWS, for
     * tests, splits small batches too) */
    int nparts = ((sess *)sctx)->ndev;
    const char *cr = getenv("WISP_GPU_XF_CHUNK_ROWS");
    const size_t min_rows = cr && *cr && strtoul(cr, NULL, 10) > 0 ? 1 : XCHUNK_ROWS;
    if ((size_t)nparts > rows / min_rows) nparts = (int)(rows / min_rows);
    if (nparts < 1) nparts = 1;
    xf *parts[WISP_MAX_GPUS];
    int st = WISP_OK, launched = 0;
    for (int k = 0; k < nparts && st == WISP_OK; k++) {
        st = part_launch(sctx, k, m, r, rows * (size_t)k / (size_t)nparts, rows * (size_t)(k + 1) / (size_t)nparts,
                         &parts[k], stats);
        if (st == WISP_OK) launched++;
    }
    uint64_t tmax[5] = { 0 }, bytes = 0, back = 0;
    wisp_tcount sum = { 0 };
    for (int k = 0; k < launched; k++) {
        uint64_t t[5];
        wisp_tcount cnt;
        if (st != WISP_OK) {                 /* a part failed: the others are waited for, their answers dropped */
            if (cudaSetDevice(parts[k]->dev) != cudaSuccess
                || cudaEventSynchronize(parts[k]->ev[XEV_END]) != cudaSuccess)
                cudaGetLastError();
            continue;
        }
        st = part_finish(sctx, parts[k], out, t, &cnt);
        if (st != WISP_OK) continue;
        for (int i = 0; i < 5; i++) if (t[i] > tmax[i]) tmax[i] = t[i];
        bytes += parts[k]->part.bytes;
        back += parts[k]->part.back;
        sum.bad += cnt.bad;
        sum.oor += cnt.oor;
        sum.nnz += cnt.nnz;
    }
    if (st != WISP_OK) return st;
    const uint64_t h2d = tmax[0], d2h = tmax[3], comp = tmax[4];
    const uint64_t wall = wisp__now_ns() - t0, staged = h2d + d2h + (comp > h2d ? comp - h2d : 0);
    stats[WISP_STAT_NS_H2D] += h2d;
    stats[WISP_STAT_NS_TRANSFORM] += tmax[1];
    stats[WISP_STAT_NS_KERNEL] += tmax[2];
    stats[WISP_STAT_NS_D2H] += d2h;
    stats[WISP_STAT_NS_SYNC] += wall > staged ? wall - staged : 0;
    stats[WISP_STAT_BYTES_H2D] += bytes;
    stats[WISP_STAT_BYTES_D2H] += back;
    stats[WISP_STAT_BATCHES]++;
    stats[WISP_STAT_ROWS] += rows;
    stats[WISP_STAT_NNZ] += sum.nnz;
    stats[WISP_STAT_OUT_OF_RANGE] += sum.oor;
    stats[WISP_STAT_BAD_ROWS] += sum.bad + r->nbad;
    return WISP_OK;
}

/* ---- transform: ids back ----------------------------------------------------------------------- */

static int add_bad_row(wisp_batch *b, uint64_t line, const char *msg)
{
    int st = wisp_batch_add_row(b, NULL, NULL, 0);
    if (st != WISP_OK) return st;
    st = wisp__batch_mark_bad(b, b->rows - 1, line, msg);
    if (st != WISP_OK) b->rows--;
    return st;
}

static int cpu_transform(const wisp_raw *r, wisp_batch *b, uint64_t *stats)
{
    uint64_t k0 = wisp__now_ns();
    int st = wisp_transform(r, b);
    stats[WISP_STAT_NS_TRANSFORM] += wisp__now_ns() - k0;
    return st;
}

int wisp__cuda_xf_transform(void *sctx, const wisp_raw *r, wisp_batch *b, uint64_t *stats)
{
    if (!sctx || !r || !b) return wisp__fail(WISP_EINVAL, "cuda transform: NULL argument");
    const size_t rows = r->rows;
    if (!rows) return WISP_OK;
    const uint64_t t0 = wisp__now_ns();
    /* the outputs: n_row, nv_row (rows + 1 each), indptr, val_ptr (rows + 1), bad (rows), scan scratch */
    const size_t scan = wisp_k_scan_bytes((uint32_t)rows);
    if (!scan) return wisp__fail(WISP_EDEVICE, "cuda transform: the scan's scratch size is unknown");
    const size_t w4 = al((rows + 1) * 4);
    const size_t out_bytes = 4 * w4 + al(rows) + al(scan);
    xf *x = NULL;
    struct rawlay L;
    wisp_traw traw;
    int st = prepare(sctx, r, out_bytes, &x, &L, &traw, stats);
    if (st) return st;
    char *o = x->dbuf + L.out;
    uint32_t *n_row = (uint32_t *)o, *nv_row = (uint32_t *)(o + w4), *rp = (uint32_t *)(o + 2 * w4),
             *vp = (uint32_t *)(o + 3 * w4);
    uint8_t *bad = (uint8_t *)(o + 4 * w4);
    void *tmp = o + 4 * w4 + al(rows);
    NVTX_PUSH("wisp transform count+scan");
    cudaError_t e = cudaMemsetAsync(n_row + rows, 0, 4, x->st);
    if (e == cudaSuccess) e = cudaMemsetAsync(nv_row + rows, 0, 4, x->st);
    if (e == cudaSuccess) e = (cudaError_t)wisp_k_xf_count(&x->plan, &traw, n_row, nv_row, bad, x->st);
    if (e == cudaSuccess) e = (cudaError_t)wisp_k_scan(n_row, nv_row, rp, vp, (uint32_t)rows, tmp, scan, x->st);
    NVTX_POP();
    /* bad flags and the totals back (the staging's raw part is shipped by now) */
    char *h = x->stage;             /* at least out_bytes: prepare made it so */
    if (e == cudaSuccess) e = cudaMemcpyAsync(h, bad, rows, cudaMemcpyDeviceToHost, x->st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(h + al(rows), rp + rows, 4, cudaMemcpyDeviceToHost, x->st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(h + al(rows) + 4, vp + rows, 4, cudaMemcpyDeviceToHost, x->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(x->st);
    if (e != cudaSuccess) return cfail(sctx, x->k, e, "counting the transform's features");
    for (size_t i = 0; i < rows; i++)
        if (h[i] == 1) return cpu_transform(r, b, stats);          /* a row the CPU must explain */
    uint32_t nnz, nvals;
    memcpy(&nnz, h + al(rows), 4);
    memcpy(&nvals, h + al(rows) + 4, 4);
    if ((uint64_t)nnz + b->nnz > WISP_MAX_NNZ || rows + b->rows > WISP_MAX_ROWS) return cpu_transform(r, b, stats);
    /* ids and values on the device, then everything back */
    const size_t csr = al((size_t)nnz * 4 + 1) + al((size_t)nvals * 4 + 1);
    if (csr > x->csr_cap) {
        if (x->dcsr) cudaFree(x->dcsr);
        x->dcsr = NULL;
        x->csr_cap = 0;
        e = cudaMalloc((void **)&x->dcsr, csr + csr / 4);
        if (e != cudaSuccess) { x->dcsr = NULL; return cfail(sctx, x->k, e, "allocating the transform's ids"); }
        x->csr_cap = csr + csr / 4;
    }
    uint32_t *dids = (uint32_t *)x->dcsr;
    float *dvals = (float *)(x->dcsr + al((size_t)nnz * 4 + 1));
    const size_t back = 2 * w4 + csr;
    st = ensure(sctx, x, 0, back);
    if (st) return st;
    h = x->stage;
    NVTX_PUSH("wisp transform fill");
    e = (cudaError_t)wisp_k_xf_fill(&x->plan, &traw, rp, vp, dids, dvals, x->st);
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[XEV_KERNEL], x->st);
    NVTX_POP();
    uint32_t *hrp = (uint32_t *)h, *hvp = (uint32_t *)(h + w4), *hids = (uint32_t *)(h + 2 * w4);
    float *hvals = (float *)(h + 2 * w4 + al((size_t)nnz * 4 + 1));
    if (e == cudaSuccess) e = cudaMemcpyAsync(hrp, rp, (rows + 1) * 4, cudaMemcpyDeviceToHost, x->st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(hvp, vp, (rows + 1) * 4, cudaMemcpyDeviceToHost, x->st);
    if (e == cudaSuccess && nnz) e = cudaMemcpyAsync(hids, dids, (size_t)nnz * 4, cudaMemcpyDeviceToHost, x->st);
    if (e == cudaSuccess && nvals) e = cudaMemcpyAsync(hvals, dvals, (size_t)nvals * 4, cudaMemcpyDeviceToHost, x->st);
    if (e == cudaSuccess) e = cudaEventRecord(x->ev[XEV_END], x->st);
    NVTX_PUSH("wisp sync");
    if (e == cudaSuccess) e = cudaEventSynchronize(x->ev[XEV_END]);
    NVTX_POP();
    if (e != cudaSuccess) return cfail(sctx, x->k, e, "transforming raw rows");
    const uint64_t h2d = ev_ns(x->ev[XEV_START], x->ev[XEV_H2D]), d2h = ev_ns(x->ev[XEV_KERNEL], x->ev[XEV_END]);
    stats[WISP_STAT_NS_H2D] += h2d;
    stats[WISP_STAT_NS_D2H] += d2h;
    stats[WISP_STAT_BYTES_D2H] += rows + 8 + 2 * (rows + 1) * 4 + ((size_t)nnz + nvals) * 4;
    /* the rows into b, as wisp_transform appends them */
    size_t nextbad = 0;
    for (size_t row = 0; row < rows && st == WISP_OK; row++) {
        if (nextbad < r->nbad && r->bad[nextbad].row == row) {
            st = add_bad_row(b, r->lines[row], r->msgs + r->bad[nextbad].msg_off);
            nextbad++;
            continue;
        }
        const uint32_t s0 = hrp[row], n = hrp[row + 1] - s0, v0 = hvp[row], nv = hvp[row + 1] - v0;
        uint32_t *vid, *bid;
        float *vv;
        st = wisp__batch_reserve_line(b, n, &vid, &vv, &bid);
        if (st) break;
        if (nv) {
            memcpy(vid, hids + s0, (size_t)nv * 4);
            memcpy(vv, hvals + v0, (size_t)nv * 4);
        }
        if (n > nv) memcpy(bid, hids + s0 + nv, (size_t)(n - nv) * 4);
        st = wisp__batch_commit_line(b, nv, n - nv);
    }
    const uint64_t now = wisp__now_ns(), wall = now - t0;
    stats[WISP_STAT_NS_TRANSFORM] += wall > h2d + d2h ? wall - h2d - d2h : 0;
    if (st) return wisp__fail_context(st, "wisp_session_transform");
    return WISP_OK;
}

#endif /* WISP_HAVE_CUDA */
