/* core.h — private: what every subsystem of the engine uses: branch hints, errors, the counted allocator,
 * the clock, the thread pool, the device backend table and the engine object (never installed). */
#ifndef WISP_CORE_H
#define WISP_CORE_H

#include "wisp.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

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

/* Set the calling thread's message and return status (for `return wisp__fail(...)`). */
int  wisp__fail(int status, const char *fmt, ...) WISP_PRINTF(2, 3);
int  wisp__failv(int status, const char *fmt, va_list ap);
/* Prefix the current message with "context: " and return status. */
int  wisp__fail_context(int status, const char *fmt, ...) WISP_PRINTF(2, 3);
void wisp__clear_error(void);

/* ---- allocation (error.c) -------------------------------------------------
 * Every allocation of the library goes through these, so a test build can
 * make the Nth one fail (WISP_FAULT_ALLOC, see spec/c) and the CUDA backend
 * can supply pinned host memory. */
void *wisp__malloc(size_t n);
void *wisp__calloc(size_t n, size_t size);
void *wisp__realloc(void *p, size_t n);
void  wisp__free(void *p);
char *wisp__strdup(const char *s);
/* Test hooks (wisp_fault_alloc_after, wisp_model_read_hook, the CUDA benchmark hooks): wisp_test.h */
#include "core/wisp_test.h"

/* Monotonic nanoseconds. */
uint64_t wisp__now_ns(void);

/* ---- thread pool (threadpool.c) ---------------------------------------- */

typedef struct wisp_pool wisp_pool;
/* fn(ctx, task) (wisp_task_fn, wisp.h) is called once for each task in
 * [0, ntasks), spread over the pool's threads and the calling thread;
 * returns when all are done. wisp_engine_run is the public door. */
int  wisp__pool_new(int threads, wisp_pool **out);
void wisp__pool_free(wisp_pool *p);
int  wisp__pool_threads(const wisp_pool *p);
/* true when the calling thread is running a task of p (work it starts runs inline) */
bool wisp__pool_inside(const wisp_pool *p);
/* Runs the tasks; concurrent callers are serialised. Never fails. */
void wisp__pool_run(wisp_pool *p, size_t ntasks, wisp_task_fn fn, void *ctx);

/* ---- backends -------------------------------------------------------------
 * A device backend is a table of functions plus a context pointer, in the
 * ggml style. The CPU backend is built in; the CUDA backend (engine/cuda/)
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
    /* Asynchronous scoring (optional: both NULL, and session.c scores with
     * `score` at submit time). submit enqueues b -> out and returns; wait
     * completes the OLDEST submitted batch (first in, first out) and adds
     * its stage times and bytes into stats. session.c keeps at most
     * WISP_MAX_IN_FLIGHT batches submitted and not yet waited for, calls
     * wait exactly once for each submit that returned WISP_OK, and calls
     * `score` or session_close only with nothing in flight. A failed submit
     * leaves nothing in flight (its device work, if any, finished);
     * a failed wait means b's answers are not (all) in out, and the caller
     * scores b on the CPU. b and out stay untouched until the wait. */
    int  (*submit)(void *sctx, wisp_model *m, const wisp_batch *b, float *out, uint64_t *stats);
    int  (*wait)(void *sctx, uint64_t *stats);
    /* Release device copies of a model being freed. Optional (NULL: nothing to release). */
    void (*model_release)(void *ctx, wisp_model *m);
    /* Pinned host memory for batches. Optional (NULL: plain memory). */
    void *(*host_alloc)(void *ctx, size_t n);
    void  (*host_free)(void *ctx, void *p);
    /* The transform on the device (optional: NULL, and session.c runs
     * wisp_transform). transform appends r's rows to b as wisp_transform
     * does; score_raw scores r's rows into out (transform and score fused
     * on the device; it counts batches, rows, nnz and bad rows itself).
     * Both add their stage times and bytes into stats; called with nothing
     * in flight. On a device failure (WISP_EDEVICE, before b changed) the
     * caller falls back to the CPU; any other failure is the call's. */
    int  (*transform)(void *sctx, const wisp_raw *r, wisp_batch *b, uint64_t *stats);
    int  (*score_raw)(void *sctx, wisp_model *m, const wisp_raw *r, float *out, uint64_t *stats);
} wisp_backend;

#define WISP_BACKEND_VERSION 2   /* 2: submit/wait */

/* The CUDA backend, or NULL in a build without CUDA (engine/cuda/cuda_stub.c). */
const wisp_backend *wisp__cuda_backend(void);

/* The backend's own structures and its GPU transform: engine/cuda/cuda_internal.h (CUDA builds only). */

/* ---- engine (engine.c) ----------------------------------------------------- */

struct wisp_engine {
    atomic_int refs;
    wisp_pool *pool;
    int log_level;
    pthread_mutex_t lock;        /* guards last_log */
    char last_log[512];
    /* GPUs */
    pthread_mutex_t gpu_lock;    /* guards discovery; held while CUDA starts (a quarter of a second) */
    atomic_int gpu_state;        /* 0: not discovered yet, 1: discovered */
    /* the background bring-up an "auto" session starts (engine/score/autoplace.c): 0 none, 1 running, 2 done */
    atomic_int bring;
    pthread_t bring_thread;
    atomic_int pinned_batches;   /* a batch's own arrays pinned while a GPU is live (hostmem.c) */
    int gpu_count;
    char gpu_status[256];
    const wisp_backend *gpu;     /* NULL when no GPU backend is usable */
    void *gpu_ctx;
};

void wisp__engine_retain(wisp_engine *eng);
/* Discover the devices now (wisp_engine_gpu_count without the count). */
void wisp__engine_discover(wisp_engine *eng);
/* 1 once discovery is done and no background bring-up is still running: the GPU facts are final. */
int  wisp__engine_gpu_settled(wisp_engine *eng);
/* Log through the engine (stderr by default) and keep warnings/errors. */
void wisp__log(wisp_engine *eng, int level, const char *fmt, ...) WISP_PRINTF(3, 4);
/* Host memory for batch arrays: pinned when the GPU backend is live. */
void *wisp__host_alloc(wisp_engine *eng, size_t n);
/* A batch's own arrays: as wisp__host_alloc unless the engine says plain
 * (wisp_engine_set_pinned_batches; why: hostmem.c). */
void *wisp__host_alloc_batch(wisp_engine *eng, size_t n);
void  wisp__host_free(wisp_engine *eng, void *p);

#endif /* WISP_CORE_H */
