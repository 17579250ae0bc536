/* threadpool.c — a persistent pool of worker threads that run a job's tasks alongside the caller. */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_PAUSE() _mm_pause()
#else
#define POOL_PAUSE() ((void)0)
#endif

/* A sanity bound on the thread count (a typo, not a machine, asks for more). */
#define POOL_MAX_THREADS 1024
/* How long (pause instructions, ~10 us) the caller spins for stragglers before it sleeps. */
#define POOL_WAIT_SPINS 200

/* Protocol. The caller publishes a job (fn, ctx, ntasks, next = 0) under
 * `lock`, marks it open, bumps `generation` and wakes the workers. A worker
 * that sees a new generation joins the job only while it is still open,
 * counting itself in `active`; it claims tasks with an atomic counter until
 * none are left, then leaves (active--). The caller claims tasks too; when it
 * runs out it closes the job under `lock` (no worker joins after that) and
 * waits for `active` to drop to 0. Every claimed task was claimed by the
 * caller or by a worker counted in `active`, so at that point all are done,
 * and no worker can touch the job's (possibly stack-allocated) ctx later. */
struct wisp_pool {
    int threads;                 /* total, the caller included */
    int nworkers;                /* threads - 1 */
    pthread_t *tids;
    pthread_mutex_t run_lock;    /* serialises wisp_pool_run callers */
    pthread_mutex_t lock;        /* guards the fields below except next/active reads */
    pthread_cond_t wake;         /* workers sleep here between jobs */
    pthread_cond_t idle;         /* the caller sleeps here for active == 0 */
    uint64_t generation;
    bool stop;
    bool open;
    bool caller_waiting;
    wisp_task_fn fn;
    void *ctx;
    size_t ntasks;
    atomic_size_t next;          /* next unclaimed task */
    atomic_int active;           /* workers inside the current job */
};

/* Set while a thread runs tasks of a pool, so a task that calls
 * wisp_pool_run on the same pool runs inline instead of deadlocking. */
static _Thread_local const wisp_pool *tls_running;

static void run_inline(const wisp_pool *p, size_t ntasks, wisp_task_fn fn, void *ctx)
{
    const wisp_pool *saved = tls_running;
    tls_running = p;
    for (size_t t = 0; t < ntasks; t++) fn(ctx, t);
    tls_running = saved;
}

static void claim_tasks(wisp_pool *p, wisp_task_fn fn, void *ctx, size_t ntasks)
{
    for (;;) {
        size_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= ntasks) break;
        fn(ctx, t);
    }
}

static void *worker_main(void *arg)
{
    wisp_pool *p = arg;
    tls_running = p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        if (!p->open) continue;          /* the caller finished it alone */
        wisp_task_fn fn = p->fn;
        void *ctx = p->ctx;
        size_t ntasks = p->ntasks;
        atomic_fetch_add_explicit(&p->active, 1, memory_order_relaxed);
        pthread_mutex_unlock(&p->lock);

        claim_tasks(p, fn, ctx, ntasks);

        pthread_mutex_lock(&p->lock);
        /* release: the caller that sees active == 0 sees our task results */
        if (atomic_fetch_sub_explicit(&p->active, 1, memory_order_release) == 1 && p->caller_waiting)
            pthread_cond_signal(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void stop_workers(wisp_pool *p, int started)
{
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < started; i++) pthread_join(p->tids[i], NULL);
}

static void destroy_sync(wisp_pool *p)
{
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
}

int wisp_pool_new(int threads, wisp_pool **out)
{
    if (!out) return wisp_fail(WISP_EINVAL, "threadpool.c: wisp_pool_new: out is NULL");
    *out = NULL;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)(n < POOL_MAX_THREADS ? n : POOL_MAX_THREADS) : 1;
    }
    if (threads > POOL_MAX_THREADS)
        return wisp_fail(WISP_ELIMIT, "threadpool.c: wisp_pool_new: %d threads asked for, at most %d",
                         threads, POOL_MAX_THREADS);

    wisp_pool *p = wisp_calloc(1, sizeof *p);
    if (!p) return wisp_fail(WISP_ENOMEM, "threadpool.c: wisp_pool_new: out of memory for the pool");
    p->threads = threads;
    p->nworkers = threads - 1;
    atomic_init(&p->next, 0);
    atomic_init(&p->active, 0);
    if (p->nworkers > 0) {
        p->tids = wisp_calloc((size_t)p->nworkers, sizeof *p->tids);
        if (!p->tids) {
            wisp_free(p);
            return wisp_fail(WISP_ENOMEM, "threadpool.c: wisp_pool_new: out of memory for %d thread ids",
                             p->nworkers);
        }
    }

    int rc;
    if ((rc = pthread_mutex_init(&p->run_lock, NULL)) != 0) goto fail_sync0;
    if ((rc = pthread_mutex_init(&p->lock, NULL)) != 0) goto fail_sync1;
    if ((rc = pthread_cond_init(&p->wake, NULL)) != 0) goto fail_sync2;
    if ((rc = pthread_cond_init(&p->idle, NULL)) != 0) goto fail_sync3;

    /* Workers block every signal: a host process (nginx) keeps its signal
     * handling on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int started = 0;
    for (; started < p->nworkers; started++) {
        rc = pthread_create(&p->tids[started], NULL, worker_main, p);
        if (rc != 0) break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started < p->nworkers) {
        stop_workers(p, started);
        destroy_sync(p);
        wisp_free(p->tids);
        wisp_free(p);
        return wisp_fail(rc == EAGAIN ? WISP_ENOMEM : WISP_EINVAL,
                         "threadpool.c: wisp_pool_new: creating worker thread %d of %d failed: %s",
                         started + 1, threads - 1, strerror(rc));
    }
    *out = p;
    return WISP_OK;

fail_sync3: pthread_cond_destroy(&p->wake);
fail_sync2: pthread_mutex_destroy(&p->lock);
fail_sync1: pthread_mutex_destroy(&p->run_lock);
fail_sync0:
    wisp_free(p->tids);
    wisp_free(p);
    return wisp_fail(WISP_ENOMEM, "threadpool.c: wisp_pool_new: initialising a lock failed: %s", strerror(rc));
}

void wisp_pool_free(wisp_pool *p)
{
    if (!p) return;
    /* wait for a job in flight on another thread */
    pthread_mutex_lock(&p->run_lock);
    stop_workers(p, p->nworkers);
    pthread_mutex_unlock(&p->run_lock);
    destroy_sync(p);
    wisp_free(p->tids);
    wisp_free(p);
}

int wisp_pool_threads(const wisp_pool *p)
{
    return p ? p->threads : 1;
}

void wisp_pool_run(wisp_pool *p, size_t ntasks, wisp_task_fn fn, void *ctx)
{
    if (ntasks == 0 || !fn) return;
    if (!p || p->nworkers == 0 || ntasks == 1 || tls_running == p) {
        run_inline(p, ntasks, fn, ctx);
        return;
    }

    pthread_mutex_lock(&p->run_lock);
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->open = true;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    const wisp_pool *saved = tls_running;
    tls_running = p;
    claim_tasks(p, fn, ctx, ntasks);
    tls_running = saved;

    /* Every task is claimed. Close the job, then wait for the workers still in it. */
    pthread_mutex_lock(&p->lock);
    p->open = false;
    if (atomic_load_explicit(&p->active, memory_order_acquire) != 0) {
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < POOL_WAIT_SPINS && atomic_load_explicit(&p->active, memory_order_acquire) != 0; i++)
            POOL_PAUSE();
        pthread_mutex_lock(&p->lock);
        p->caller_waiting = true;
        while (atomic_load_explicit(&p->active, memory_order_acquire) != 0)
            pthread_cond_wait(&p->idle, &p->lock);
        p->caller_waiting = false;
    }
    p->fn = NULL;
    p->ctx = NULL;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->run_lock);
}
