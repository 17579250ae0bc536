/* engine.c — the engine object: thread pool, lazy GPU discovery, logging
 * (host memory for batches: engine/core/hostmem.c). */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int wisp_engine_new(int threads, wisp_engine **out)
{
    if (!out) return wisp__fail(WISP_EINVAL, "wisp_engine_new: out is NULL");
    *out = NULL;
    if (threads < 0 || threads > 1024)
        return wisp__fail(WISP_EINVAL, "wisp_engine_new: threads must be 0 (one per core) to 1024, got %d", threads);
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)(n > 256 ? 256 : n) : 1;
    }
    wisp_engine *eng = wisp__calloc(1, sizeof *eng);
    if (!eng) return wisp__fail(WISP_ENOMEM, "wisp_engine_new: out of memory");
    atomic_init(&eng->refs, 1);
    eng->log_level = WISP_LOG_WARN;
    const char *lvl = getenv("WISP_LOG");
    if (lvl) {
        if (!strcmp(lvl, "debug")) eng->log_level = WISP_LOG_DEBUG;
        else if (!strcmp(lvl, "info")) eng->log_level = WISP_LOG_INFO;
        else if (!strcmp(lvl, "error")) eng->log_level = WISP_LOG_ERROR;
        else if (!strcmp(lvl, "off")) eng->log_level = WISP_LOG_OFF;
    }
    if (pthread_mutex_init(&eng->lock, NULL) != 0) {
        wisp__free(eng);
        return wisp__fail(WISP_ENOMEM, "wisp_engine_new: cannot create a mutex");
    }
    if (pthread_mutex_init(&eng->gpu_lock, NULL) != 0) {
        pthread_mutex_destroy(&eng->lock);
        wisp__free(eng);
        return wisp__fail(WISP_ENOMEM, "wisp_engine_new: cannot create a mutex");
    }
    atomic_init(&eng->gpu_state, 0);
    atomic_init(&eng->bring, 0);
    const char *pb = getenv("WISP_BATCH_PINNED");   /* the default for wisp_engine_set_pinned_batches */
    atomic_init(&eng->pinned_batches, !(pb && !strcmp(pb, "0")));
    int st = wisp__pool_new(threads, &eng->pool);
    if (st != WISP_OK) {
        pthread_mutex_destroy(&eng->gpu_lock);
        pthread_mutex_destroy(&eng->lock);
        wisp__free(eng);
        return wisp__fail_context(st, "wisp_engine_new");
    }
    *out = eng;
    return WISP_OK;
}

void wisp__engine_retain(wisp_engine *eng)
{
    if (eng) atomic_fetch_add(&eng->refs, 1);
}

void wisp_engine_free(wisp_engine *eng)
{
    if (!eng || atomic_fetch_sub(&eng->refs, 1) != 1) return;
    /* the bring-up thread holds a reference while it runs: it is done (or it is this thread,
     * dropping the last reference as it ends) */
    if (atomic_load(&eng->bring) != 0) {
        if (pthread_equal(pthread_self(), eng->bring_thread)) pthread_detach(eng->bring_thread);
        else pthread_join(eng->bring_thread, NULL);
    }
    if (eng->gpu && eng->gpu->shutdown) eng->gpu->shutdown(eng->gpu_ctx);
    wisp__pool_free(eng->pool);
    pthread_mutex_destroy(&eng->gpu_lock);
    pthread_mutex_destroy(&eng->lock);
    wisp__free(eng);
}

int wisp_engine_threads(const wisp_engine *eng)
{
    return eng ? wisp__pool_threads(eng->pool) : 0;
}

/* ---- GPUs: discovered once, on first use ---------------------------------- */

static void discover(wisp_engine *eng)
{
    if (atomic_load_explicit(&eng->gpu_state, memory_order_acquire)) return;
    /* its own lock, not eng->lock: starting CUDA takes a quarter of a second, and a
     * background bring-up (autoplace.c) must not hold up logging meanwhile */
    pthread_mutex_lock(&eng->gpu_lock);
    if (!atomic_load_explicit(&eng->gpu_state, memory_order_relaxed)) {
        const wisp_backend *be = wisp__cuda_backend();
        const char *off = getenv("WISP_NO_GPU");
        if (off && *off && strcmp(off, "0") != 0) {
            snprintf(eng->gpu_status, sizeof eng->gpu_status, "GPUs disabled by WISP_NO_GPU");
        } else if (!be) {
            snprintf(eng->gpu_status, sizeof eng->gpu_status, "this build of wisp has no CUDA backend (nvcc was not found at build time)");
        } else {
            char why[sizeof eng->gpu_status] = "";
            void *ctx = NULL;
            int n = be->init(eng, &ctx, why, sizeof why);
            if (n > 0) {
                eng->gpu_ctx = ctx;
                eng->gpu_count = n > WISP_MAX_GPUS ? WISP_MAX_GPUS : n;
                snprintf(eng->gpu_status, sizeof eng->gpu_status, "%d CUDA device%s", eng->gpu_count,
                         eng->gpu_count == 1 ? "" : "s");
                /* published after its context: wisp__host_alloc/free read it without a lock */
                __atomic_store_n(&eng->gpu, be, __ATOMIC_RELEASE);
            } else {
                if (ctx && be->shutdown) be->shutdown(ctx);
                snprintf(eng->gpu_status, sizeof eng->gpu_status, "no CUDA device: %s", why[0] ? why : "none found");
            }
        }
        atomic_store_explicit(&eng->gpu_state, 1, memory_order_release);
        if (!eng->gpu) {
            pthread_mutex_unlock(&eng->gpu_lock);
            wisp__log(eng, WISP_LOG_INFO, "%s; scoring runs on the CPU", eng->gpu_status);
            return;
        }
    }
    pthread_mutex_unlock(&eng->gpu_lock);
}

void wisp__engine_discover(wisp_engine *eng)
{
    if (eng) discover(eng);
}

int wisp__engine_gpu_settled(wisp_engine *eng)
{
    return eng && atomic_load_explicit(&eng->gpu_state, memory_order_acquire)
        && atomic_load_explicit(&eng->bring, memory_order_acquire) != 1;
}

int wisp_engine_gpu_count(wisp_engine *eng)
{
    if (!eng) return 0;
    discover(eng);
    return eng->gpu_count;
}

const char *wisp_engine_gpu_status(wisp_engine *eng)
{
    if (!eng) return "no engine";
    discover(eng);
    return eng->gpu_status;
}

#define GPU_QUERY(ret, fn, field, none)                               \
    ret fn(wisp_engine *eng, int i)                                   \
    {                                                                 \
        if (!eng || i < 0 || i >= wisp_engine_gpu_count(eng)) return none; \
        return eng->gpu->field(eng->gpu_ctx, i);                      \
    }
GPU_QUERY(const char *, wisp_engine_gpu_name, device_name, NULL)
GPU_QUERY(uint64_t, wisp_engine_gpu_memory, device_memory, 0)
GPU_QUERY(int, wisp_engine_gpu_capability, device_capability, 0)
GPU_QUERY(int, wisp_engine_gpu_usable, device_usable, 0)

/* ---- logging ------------------------------------------------------------ */

void wisp_engine_set_log_level(wisp_engine *eng, int level)
{
    if (eng && level >= WISP_LOG_DEBUG && level <= WISP_LOG_OFF) eng->log_level = level;
}

size_t wisp_engine_last_log(wisp_engine *eng, char *buf, size_t len)
{
    if (!eng) return 0;
    pthread_mutex_lock(&eng->lock);
    size_t n = strlen(eng->last_log);
    if (buf && len) snprintf(buf, len, "%s", eng->last_log);
    pthread_mutex_unlock(&eng->lock);
    return n;
}

void wisp__log(wisp_engine *eng, int level, const char *fmt, ...)
{
    static const char *names[] = { "debug", "info", "warning", "error" };
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!eng) return;
    if (level >= WISP_LOG_WARN) {
        pthread_mutex_lock(&eng->lock);
        snprintf(eng->last_log, sizeof eng->last_log, "%s", msg);
        pthread_mutex_unlock(&eng->lock);
    }
    if (level >= eng->log_level && level < WISP_LOG_OFF)
        fprintf(stderr, "wisp: %s: %s\n", names[level], msg);
}
