/* cuda_internal.h — the CUDA backend's private header: devices, weights on devices, sessions, units, batches in flight.
 * Shared by the backend's files (engine/cuda/: cuda_device.c, cuda_session.c, cuda_plan.c, cuda_launch.c,
 * cuda_score.c, cuda_hooks.c, cuda_transform.c, cuda_device_batch.c); never included outside the backend
 * (CUDA builds only). */
#ifndef WISP_CUDA_INTERNAL_H
#define WISP_CUDA_INTERNAL_H

#include "model/model.h"
#include "batch/raw.h"
#include "core/wisp_test.h"
#include "../../kernels/score.cuh"

#include <cuda_runtime_api.h>
#include <stdatomic.h>

/* NVTX ranges for Nsight Systems: nvtx3 is header-only in CUDA 12+; with no tool attached
 * a range is a load and a branch. WISP_NO_NVTX compiles them out. */
#if !defined(WISP_NO_NVTX) && defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define NVTX_PUSH(name) nvtxRangePushA(name)
#define NVTX_POP() nvtxRangePop()
#endif
#endif
#ifndef NVTX_PUSH
#define NVTX_PUSH(name) ((void)0)
#define NVTX_POP() ((void)0)
#endif

enum { MAX_UNITS = 16, MAX_CHUNKS = 16, MAX_SHARDS = 16, MAX_COPIES = 8, MAX_GRAPHS = 8 };
enum { FAULT_NONE = 0, FAULT_OOM, FAULT_OOM_ONCE, FAULT_STICKY };
enum { SHARDING_AUTO = 0, SHARDING_PEER, SHARDING_BROADCAST };
enum { UNIT_STATS = 12 };
#define CHUNK_NNZ       (1u << 20)    /* ids per chunk before a unit's slice is split */
#define MAX_CHUNKS_AUTO 8
#define STAGE_ALL_BYTES (1u << 20)    /* batches below this are packed even when pinned */
#define ZC_SMALL_ROWS   4096
#define ALIGN 256

struct cdev {
    char name[256];
    uint64_t mem;
    int cap;
    atomic_int usable;
};

typedef struct cuda_ctx {
    wisp_engine *eng;
    int n;
    struct cdev dev[WISP_MAX_GPUS];
    atomic_size_t pinned;          /* bytes of pinned host memory handed out */
    /* [a][b]: a reads b's memory: 0 not tried, 1 enabled, -1 not possible */
    atomic_int peer[WISP_MAX_GPUS][WISP_MAX_GPUS];
    size_t pinned_max;
} cuda_ctx;

struct dcopy { uint32_t lo, span; void *p; size_t bytes; };
struct dmodel { int n; struct dcopy c[MAX_COPIES]; };

static inline size_t dtype_size(int dtype) { return dtype == WISP_F32 ? 4 : dtype == WISP_F16 ? 2 : 1; }

/* A unit's buffer (device memory, mirrored in the staging buffer when packed):
 * indptr | ids | val_ptr | vals | counter + header (64 B) | answers | per-row counts (zero-copy) */
struct lay { size_t rp, ids, vp, vals, cnt, out, oorr, flg, total; };
/* arena gaps up to this are shipped rather than paying a copy start (~4 us ~ 200 KB) */
#define GAP_MERGE ((size_t)128 << 10)
#define CNT_BYTES 64                  /* the out-of-range counter at cnt, a graph's size header at cnt + 32 */
#define HDR_OFF 32

enum { EV_START = 0, EV_H2D, EV_END, EV_CHUNK };   /* then 3 per chunk: kernel start, kernel end, d2h end */
#define NEV (EV_CHUNK + 3 * MAX_CHUNKS)

/* A CUDA graph of one small batch (copy in, kernel, copy out) for a bucket of sizes. */
struct gentry {
    cudaGraphExec_t exec;
    int vm, lanes;
    uint32_t rows_b, nnz_b, nvals_b;
    const void *w;
    uint64_t used;
};

struct unit {
    int dev;
    cudaStream_t copy, comp;               /* copies in; kernels + copies out */
    int shared_streams;                    /* a slot's unit: the streams belong to the session's unit */
    cudaEvent_t ev[NEV];
    cudaEvent_t fin_comp, fin_copy;        /* no timing: the batch's work on each stream is done */
    cudaEvent_t ready[MAX_CHUNKS];         /* no timing: chunk c is on the device */
    cudaEvent_t done[MAX_CHUNKS];          /* no timing: chunk c's answers are in the staging buffer */
    char *dbuf; size_t dcap;
    struct gentry g[MAX_GRAPHS];
    uint64_t gclock;
    /* the current batch */
    size_t r0, r1;                         /* rows */
    uint32_t base, vbase, nnz, nvals;
    int nsh, sh[MAX_SHARDS];               /* the shards this unit holds (its one table: shard 0) */
    const void *w[MAX_SHARDS];
    int nout;                              /* answer arrays: one, or one partial sum per shard held (broadcast) */
    uint64_t bytes_h2d;                    /* copied in for this batch */
    struct lay L;
    size_t soff;                           /* offset in the staging buffer */
    int nchunks;
    size_t cb[MAX_CHUNKS + 1];             /* chunk row bounds, relative to r0 */
    int graph;                             /* a small batch through a CUDA graph */
    uint32_t rows_b, nnz_b, nvals_b;       /* its bucket */
    int launched;                          /* timing events were recorded */
    int direct_out;                        /* answers are copied straight into the caller's out */
    int host_out;                          /* the host copies answers chunk by chunk as they land */
    int mirror;                            /* L mirrors the batch's arena (shipped straight from it) */
    /* tiny batches: the answer slots' tag of the last launch (1 .. WISP_TINY_SEQ_MASK) */
    uint32_t seq;
};

struct job;

typedef struct sess {
    cuda_ctx *ctx;
    int ndev, devs[WISP_MAX_GPUS];
    int nunits;
    struct unit u[MAX_UNITS];
    int fault, fault_fired;
    int shards_env, parts_env, chunks_env, lanes_env;
    int sharding;                          /* SHARDING_AUTO, _PEER or _BROADCAST (WISP_GPU_SHARDING) */
    /* weight bytes one device holds before the table is sharded (0: 80% of memory) */
    uint64_t table_max;
    int peer_warned;                       /* peer sharding was asked for but is not possible: said once */
    /* the last finished batch, unit by unit (wisp_cuda_units_read) */
    double ustat[MAX_UNITS][UNIT_STATS];
    int nustat;
    int timing;                            /* -1: events for large batches only; 0: never; 1: always */
    int graphs;                            /* CUDA graphs for small batches */
    int inline_on;                         /* tiny batches inside the launch (WISP_GPU_INLINE) */
    size_t zc_rows;                        /* zero-copy up to this many rows (0: off) */
    char *stage; size_t stage_cap; char *stage_dev;   /* pinned, mapped staging (host and device addresses) */
    /* submit/wait. A slot holds one batch in flight: its own device buffers,
     * staging, events and graphs, and the streams of the session's units, so
     * the copies of successive batches queue back to back on one copy stream
     * (two copy streams contend on PCIe: kernels/README.md, run 4) while the
     * kernels of the batch before run on the compute stream. slot[0] is the
     * session itself (also used by the blocking path, with nothing in flight). */
    struct sess *root;                     /* the session a slot belongs to (itself for the session) */
    struct sess *slot[WISP_MAX_IN_FLIGHT]; /* root only; created on first use */
    int qhead, qlen;                       /* root only: slots in flight, oldest first, cyclic */
    struct job *job;                       /* this slot's batch (allocated on first submit) */
    /* the timeline hook (root only): per batch, event times from `epoch` */
    cudaEvent_t epoch;
    float *tl; size_t tl_n, tl_cap;
    /* root only: the GPU transform's state per device (engine/cuda/cuda_transform.c) */
    void *xf[WISP_MAX_GPUS];
    /* root only: wisp_session_score_device's scratch per device (engine/cuda/cuda_device_batch.c):
     * device memory for the answers and the bad-row list, a pinned header for the counters */
    struct dvscratch { void *d; size_t cap; void *h; } dvs[WISP_MAX_GPUS];
} sess;

/* One batch in flight. */
struct job {
    sess *s;
    wisp_model *m;
    const wisp_batch *b;
    float *out;
    int vm, dtype, lanes, sharded, nshards, zc, inl, staged, small, out_pinned;
    int peer;                                 /* sharded, rows split, weights read where they live (kernel shards) */
    int partial;                              /* sharded by broadcast: partial sums the host adds up */
    wisp_kshards kt;                          /* peer: every shard's address, each on the device that holds it */
    int arena;                                /* an owned batch whose arena is pinned (one pointer query) */
    /* submit/wait: end events per stream; else the streams hold only this batch */
    int submitted;
    /* a tiny batch whose blocks raise flags in mapped host memory: no events */
    int poll;
    void *zc_rp, *zc_ids, *zc_vp, *zc_vals;   /* zero-copy from a pinned batch: its device addresses */
    uint32_t nf;
    uint32_t sh_lo[MAX_SHARDS], sh_span[MAX_SHARDS];
    cudaError_t err;
    int err_dev;
    const char *err_what;
    uint64_t bytes_h2d, bytes_d2h, ns_stage, ns_combine;
    uint64_t *stats;
    uint64_t t_enq;                           /* when the first work was enqueued */
};

/* Bytes an answer takes in a unit's buffers: a float probability, or in the
 * broadcast mode a double partial sum (a float one could overflow where the
 * CPU's double sum does not). */
#define OUT_SIZE(j) ((j)->partial ? sizeof(double) : sizeof(float))

/* Whether the batch records timing events (WISP_GPU_TIMING; by default large batches only). */
static inline int use_timing(const struct job *j)
{
    return j->s->timing == 1 || (j->s->timing == -1 && !j->small);
}

#define JOB_CHECK(j, u, call, what) do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess && (j)->err == cudaSuccess) { \
        (j)->err = e_; (j)->err_dev = (u)->dev; (j)->err_what = (what); \
    } \
} while (0)


/* ---- shared between the backend's files (wisp__cuda_*: internal, external linkage) ---- */

int wisp__cuda_is_sticky(cudaError_t e);
void wisp__cuda_mark_unusable(cuda_ctx *ctx, int dev, cudaError_t e);
void *wisp__cuda_pin_alloc(cuda_ctx *ctx, size_t n);
void wisp__cuda_pin_free(cuda_ctx *ctx, void *p);
int wisp__cuda_host_pinned(const void *p, void **devp);
int wisp__cuda_mapped(const void *p, void **dp);
int wisp__cuda_err_fail(int dev, const char *what, cudaError_t e);
int wisp__cuda_get_weights(cuda_ctx *ctx, wisp_model *m, int dev, uint32_t lo, uint32_t span,
                       const void **out, uint64_t *stats);
void wisp__cuda_graphs_clear(struct unit *u);
void wisp__cuda_session_close(void *vs);
int wisp__cuda_session_open(void *vctx, const int *devs, int ndev, void **out);
int wisp__cuda_score(void *vs, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats);
int wisp__cuda_submit(void *vs, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats);
int wisp__cuda_wait(void *vs, uint64_t *stats);
void wisp__cuda_layout(struct lay *L, size_t rows, size_t nnz, size_t nvals, int vm, int nsh, int zc, size_t osz);
int wisp__cuda_grow_dbuf(sess *s, struct unit *u, size_t need);
float wisp__cuda_elapsed_ms(cudaEvent_t a, cudaEvent_t b);
/* a batch scored (engine/cuda/cuda_score.c: check, plan, enqueue; wait, collect): the plan of the job over the
 * session's units, buffers allocated, nothing enqueued (cuda_plan.c); unit u's part enqueued, phase 0 its copies
 * in (everything for a batch that is not large), phase 1 a large batch's kernels and copies out (cuda_launch.c) */
int wisp__cuda_job_start(sess *s, struct job *j, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats,
                     const char *fn, int submitted);
int wisp__cuda_job_finish(struct job *j, uint64_t *stats, int async);
int wisp__cuda_plan(struct job *j);
void wisp__cuda_enqueue_unit(struct job *j, struct unit *u, int phase);

/* the GPU transform (engine/cuda/cuda_transform.c) */
int  wisp__cuda_xf_transform(void *sctx, const wisp_raw *r, wisp_batch *b, uint64_t *stats);
int  wisp__cuda_xf_score_raw(void *sctx, wisp_model *m, const wisp_raw *r, float *out, uint64_t *stats);
void wisp__cuda_xf_free(void *xf);
/* wisp_session_score_device's scratch of a session (engine/cuda/cuda_device_batch.c) */
void wisp__cuda_dv_free(sess *s);
/* what it uses of a session: the model's weights on the session's k-th device, and the failure
 * path on that device (a message; a sticky error marks the device unusable) */
int  wisp__cuda_weights(void *sctx, int k, wisp_model *m, const void **w, uint64_t *stats);
int  wisp__cuda_failed(void *sctx, int k, int cuda_error, const char *what);

#endif /* WISP_CUDA_INTERNAL_H */
