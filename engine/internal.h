/* internal.h — the struct bodies and cross-file helpers behind wisp.h; never installed. */
#ifndef WISP_INTERNAL_H
#define WISP_INTERNAL_H

#include "wisp.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#if defined(__GNUC__)
#define WISP_LIKELY(x)   __builtin_expect(!!(x), 1)
#define WISP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define WISP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define WISP_LIKELY(x) (x)
#define WISP_UNLIKELY(x) (x)
#define WISP_PRINTF(a, b)
#endif

/* The id a batch stores for input ids >= 2^32: out of range of any model. */
#define WISP_ID_NONE 0xFFFFFFFFu

/* ---- errors (error.c) ---------------------------------------------------- */

/* Set the calling thread's message and return status (for `return wisp_fail(...)`). */
int  wisp_fail(int status, const char *fmt, ...) WISP_PRINTF(2, 3);
int  wisp_failv(int status, const char *fmt, va_list ap);
/* Prefix the current message with "context: " and return status. */
int  wisp_fail_context(int status, const char *fmt, ...) WISP_PRINTF(2, 3);
void wisp_clear_error(void);

/* ---- allocation (error.c) -------------------------------------------------
 * Every allocation of the library goes through these, so a test build can
 * make the Nth one fail (WISP_FAULT_ALLOC, see spec/c) and the CUDA backend
 * can supply pinned host memory. */
void *wisp_malloc(size_t n);
void *wisp_calloc(size_t n, size_t size);
void *wisp_realloc(void *p, size_t n);
void  wisp_free(void *p);
char *wisp_strdup(const char *s);
/* Test hook: fail the allocation numbered `nth` (1-based) from now; 0 disables.
 * Returns the number of allocations seen since the last call. */
uint64_t wisp_fault_alloc_after(uint64_t nth);

/* Monotonic nanoseconds. */
uint64_t wisp_now_ns(void);

/* ---- thread pool (threadpool.c) ---------------------------------------- */

typedef struct wisp_pool wisp_pool;
/* fn(ctx, task) is called once for each task in [0, ntasks), spread over
 * the pool's threads and the calling thread; returns when all are done. */
typedef void (*wisp_task_fn)(void *ctx, size_t task);
int  wisp_pool_new(int threads, wisp_pool **out);
void wisp_pool_free(wisp_pool *p);
int  wisp_pool_threads(const wisp_pool *p);
/* Runs the tasks; concurrent callers are serialised. Never fails. */
void wisp_pool_run(wisp_pool *p, size_t ntasks, wisp_task_fn fn, void *ctx);

/* ---- backends -------------------------------------------------------------
 * A device backend is a table of functions plus a context pointer, in the
 * ggml style. The CPU backend is built in; the CUDA backend (engine/cuda.c)
 * is present when the library was built with nvcc. Optional entries say
 * what happens when they are NULL. */

typedef struct wisp_backend {
    int version;                 /* WISP_BACKEND_VERSION */
    const char *name;            /* "cuda" */
    /* Discover devices. Returns the number of usable devices (>= 0); on 0
     * writes the reason into why. Called once, under the engine's lock. */
    int  (*init)(wisp_engine *eng, void **ctx, char *why, size_t whylen);
    void (*shutdown)(void *ctx);
    const char *(*device_name)(void *ctx, int dev);
    uint64_t    (*device_memory)(void *ctx, int dev);
    int         (*device_capability)(void *ctx, int dev);
    int         (*device_usable)(void *ctx, int dev);
    /* Per-session state for scoring on devices devs[0..ndev). */
    int  (*session_open)(void *ctx, const int *devs, int ndev, void **sctx);
    void (*session_close)(void *sctx);
    /* Score b into out (host memory). Adds its stage times and bytes into
     * stats[WISP_STAT_*]. On failure the caller falls back to the CPU. */
    int  (*score)(void *sctx, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats);
    /* Release device copies of a model being freed. Optional (NULL: nothing to release). */
    void (*model_release)(void *ctx, wisp_model *m);
    /* Pinned host memory for batches. Optional (NULL: plain memory). */
    void *(*host_alloc)(void *ctx, size_t n);
    void  (*host_free)(void *ctx, void *p);
} wisp_backend;

#define WISP_BACKEND_VERSION 1

/* The CUDA backend, or NULL in a build without CUDA (engine/cuda_stub.c). */
const wisp_backend *wisp_cuda_backend(void);

/* ---- engine (engine.c) ----------------------------------------------------- */

struct wisp_engine {
    atomic_int refs;
    wisp_pool *pool;
    int log_level;
    pthread_mutex_t lock;        /* guards device discovery and last_log */
    char last_log[512];
    /* GPUs */
    int gpu_state;               /* 0: not discovered yet, 1: discovered */
    int gpu_count;
    char gpu_status[256];
    const wisp_backend *gpu;     /* NULL when no GPU backend is usable */
    void *gpu_ctx;
};

void wisp_engine_retain(wisp_engine *eng);
/* Log through the engine (stderr by default) and keep warnings/errors. */
void wisp_log(wisp_engine *eng, int level, const char *fmt, ...) WISP_PRINTF(3, 4);
/* Host memory for batch arrays: pinned when the GPU backend is live. */
void *wisp_host_alloc(wisp_engine *eng, size_t n);
void  wisp_host_free(wisp_engine *eng, void *p);

/* ---- model (model.c) ------------------------------------------------------- */

#define WISP_MAGIC "WISPMDL"     /* 8 bytes with the NUL */
#define WISP_FORMAT_VERSION 1

struct wisp_model {
    atomic_int refs;
    wisp_engine *eng;
    char *path;
    void *map;                   /* the whole file, mapped read-only */
    size_t map_size;
    void *private_weights;       /* WISP_LOAD_HUGEPAGES copy, or NULL */
    const void *weights;         /* num_features elements of dtype */
    uint64_t num_features;
    double bias;
    int dtype;
    float scale;                 /* int8 dequantization scale; 1 otherwise */
    char *meta;                  /* NUL-terminated copies */
    char *columns;
    char **meta_kv;              /* key, value, key, value, ..., NULL */
    /* Device copies, owned by the GPU backend (freed via model_release). */
    pthread_mutex_t dev_lock;
    void *dev[WISP_MAX_GPUS];
};

void wisp_model_retain(wisp_model *m);

/* fp16 <-> fp32 (round to nearest even). */
float    wisp_half_to_float(uint16_t h);
uint16_t wisp_float_to_half(float f);

/* ---- batch (batch.c) ------------------------------------------------------- */

struct wisp_bad_row {
    size_t row;
    uint64_t line;
    uint32_t msg_off;            /* offset into the batch's message buffer */
};

struct wisp_batch {
    wisp_engine *eng;
    bool wrapped;                /* arrays are the caller's */
    size_t rows;
    size_t nnz;
    size_t nvals;
    /* CSR arrays; for owned batches, host memory from wisp_host_alloc */
    uint32_t *row_ptr;  size_t row_cap;   /* row_cap + 1 entries */
    uint32_t *ids;      size_t id_cap;
    uint32_t *val_ptr;                    /* same capacity as row_ptr; NULL until a valued row */
    float    *vals;     size_t val_cap;
    int value_mode;                       /* WISP_VALUES_* */
    /* bad rows */
    struct wisp_bad_row *bad; size_t nbad, bad_cap;
    char *msgs; size_t msgs_len, msgs_cap;
    /* scratch for the libsvm parser (binary features of the current line) */
    uint32_t *scratch; size_t scratch_cap;
};

enum { WISP_VALUES_NONE = 0, WISP_VALUES_ALL = 1, WISP_VALUES_MIXED = 2 };

/* For the text parsers: reserve room for one line of up to nfeat features
 * (valued ids and values go to ids[] and vals[], binary ids to scratch[]), then commit
 * nv valued and nb binary features as one row. */
int wisp_batch__reserve_line(wisp_batch *b, size_t nfeat, uint32_t **ids, float **vals, uint32_t **scratch);
int wisp_batch__commit_line(wisp_batch *b, size_t nv, size_t nb);

/* Mark row `row` (already appended, with no features) bad. */
int wisp_batch_mark_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg);

/* ---- CPU scoring (score_cpu.c) ------------------------------------------- */

/* Score rows [0, rows) of b on the engine's pool; adds out-of-range ids to
 * *out_of_range. Bad rows get NaN. */
void wisp_score_cpu(wisp_engine *eng, const wisp_model *m, const wisp_batch *b, float *out,
                    uint64_t *out_of_range);
/* Score rows [r0, r1) on the calling thread only (the reference and the
 * building block). Returns the out-of-range count. */
uint64_t wisp_score_cpu_rows(const wisp_model *m, const wisp_batch *b, size_t r0, size_t r1, float *out);

/* ---- session (session.c) ---------------------------------------------------- */

struct wisp_session {
    wisp_engine *eng;
    wisp_model *model;
    char device[32];             /* as asked */
    char last_device[32];        /* what scored the last batch */
    int kind;                    /* WISP_PLACE_* resolved from device */
    int ngpu;
    int gpus[WISP_MAX_GPUS];
    void *gpu_sctx;              /* backend session state, opened lazily */
    bool gpu_open_failed;
    uint64_t stats[WISP_STAT_COUNT];
};

enum { WISP_PLACE_CPU = 0, WISP_PLACE_GPU = 1, WISP_PLACE_AUTO = 2 };

#endif /* WISP_INTERNAL_H */
