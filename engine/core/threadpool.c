/* threadpool.c — a persistent pool of worker threads that run a job's tasks alongside the caller;
 * wisp_engine_run is its public door. */
#include "core/core.h"

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
 * `lock`, marks it open, bumps `generation` and wakes up to ntasks - 1
 * workers. A worker that sees a new generation joins the job only while it
 * is still open, counting itself in `active`; it claims tasks with an atomic
 * counter until none are left, then leaves (active--). The caller claims
 * tasks too; when it runs out it closes the job under `lock` (no worker
 * joins after that) and waits for `active` to drop to 0. Every claimed task
 * was claimed by the caller or by a worker counted in `active`, so at that
 * point all are done, and no worker can touch the job's (possibly
 * stack-allocated) ctx later.
 *
 * fork(): the engine (and its pool) may be created before a server forks
 * its workers. Only the forking thread lives on in the child, so an atfork
 * handler resets every pool's locks there and marks its workers gone; the
 * child's first wisp__pool_run starts them again (wisp__pool_free never joins
 * threads of another process). The prepare handler takes every pool's locks,
 * so a fork waits for jobs in flight and never copies a lock half-held. */
struct wisp_pool {
    int threads;                 /* total, the caller included */
    int nworkers;                /* threads - 1: the workers wanted */
    int live;                    /* workers running in this process */
    bool respawn;                /* forked: start the workers again before the next job */
    pthread_t *tids;
    pthread_mutex_t run_lock;    /* serialises wisp__pool_run callers */
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
    wisp_pool *next_pool;        /* the list the fork handlers walk */
};

/* Set while a thread runs tasks of a pool, so a task that calls
 * wisp__pool_run on the same pool runs inline instead of deadlocking. */
static _Thread_local const wisp_pool *tls_running;

/* Every live pool, for the fork handlers. */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static wisp_pool *pools;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_status;

static void atfork_prepare(void)
{
    pthread_mutex_lock(&pools_lock);
    for (wisp_pool *p = pools; p; p = p->next_pool) {
        pthread_mutex_lock(&p->run_lock);
        pthread_mutex_lock(&p->lock);
    }
}

static void atfork_parent(void)
{
    for (wisp_pool *p = pools; p; p = p->next_pool) {
        pthread_mutex_unlock(&p->lock);
        pthread_mutex_unlock(&p->run_lock);
    }
    pthread_mutex_unlock(&pools_lock);
}

static void atfork_child(void)
{
    for (wisp_pool *p = pools; p; p = p->next_pool) {
        /* this thread took both locks in prepare; the condition variables
         * may record waiters that do not exist here: make them fresh */
        pthread_cond_init(&p->wake, NULL);
        pthread_cond_init(&p->idle, NULL);
        p->live = 0;
        p->respawn = p->nworkers > 0;
        p->generation = 0;
        p->stop = false;
        p->open = false;
        p->caller_waiting = false;
        atomic_store_explicit(&p->active, 0, memory_order_relaxed);
        pthread_mutex_unlock(&p->lock);
        pthread_mutex_unlock(&p->run_lock);
    }
    pthread_mutex_unlock(&pools_lock);
}

static void atfork_register(void)
{
    atfork_status = pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

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
    uint64_t seen = 0;                   /* a late starter may still join the open job */
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

/* Start workers p->live .. p->nworkers; returns 0 or the pthread_create error. */
static int spawn_workers(wisp_pool *p)
{
    /* Workers block every signal: a host process (nginx) keeps its signal
     * handling on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    while (p->live < p->nworkers) {
        rc = pthread_create(&p->tids[p->live], NULL, worker_main, p);
        if (rc != 0) break;
        p->live++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void stop_workers(wisp_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->live; i++) pthread_join(p->tids[i], NULL);
    p->live = 0;
}

static void destroy_sync(wisp_pool *p)
{
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
}

int wisp__pool_new(int threads, wisp_pool **out)
{
    if (!out) return wisp__fail(WISP_EINVAL, "threadpool.c: wisp__pool_new: out is NULL");
    *out = NULL;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)(n < POOL_MAX_THREADS ? n : POOL_MAX_THREADS) : 1;
    }
    if (threads > POOL_MAX_THREADS)
        return wisp__fail(WISP_ELIMIT, "threadpool.c: wisp__pool_new: %d threads asked for, at most %d",
                         threads, POOL_MAX_THREADS);
    pthread_once(&atfork_once, atfork_register);
    if (atfork_status != 0)
        return wisp__fail(WISP_ENOMEM, "threadpool.c: wisp__pool_new: registering the fork handlers failed: %s",
                         strerror(atfork_status));

    wisp_pool *p = wisp__calloc(1, sizeof *p);
    if (!p) return wisp__fail(WISP_ENOMEM, "threadpool.c: wisp__pool_new: out of memory for the pool");
    p->threads = threads;
    p->nworkers = threads - 1;
    atomic_init(&p->next, 0);
    atomic_init(&p->active, 0);
    if (p->nworkers > 0) {
        p->tids = wisp__calloc((size_t)p->nworkers, sizeof *p->tids);
        if (!p->tids) {
            wisp__free(p);
            return wisp__fail(WISP_ENOMEM, "threadpool.c: wisp__pool_new: out of memory for %d thread ids",
                             threads - 1);
        }
    }

    int rc;
    if ((rc = pthread_mutex_init(&p->run_lock, NULL)) != 0) goto fail_sync0;
    if ((rc = pthread_mutex_init(&p->lock, NULL)) != 0) goto fail_sync1;
    if ((rc = pthread_cond_init(&p->wake, NULL)) != 0) goto fail_sync2;
    if ((rc = pthread_cond_init(&p->idle, NULL)) != 0) goto fail_sync3;

    rc = spawn_workers(p);
    if (rc != 0) {
        int started = p->live;
        stop_workers(p);
        destroy_sync(p);
        wisp__free(p->tids);
        wisp__free(p);
        return wisp__fail(rc == EAGAIN ? WISP_ENOMEM : WISP_EINVAL,
                         "threadpool.c: wisp__pool_new: creating worker thread %d of %d failed: %s",
                         started + 1, threads - 1, strerror(rc));
    }
    pthread_mutex_lock(&pools_lock);
    p->next_pool = pools;
    pools = p;
    pthread_mutex_unlock(&pools_lock);
    *out = p;
    return WISP_OK;

fail_sync3: pthread_cond_destroy(&p->wake);
fail_sync2: pthread_mutex_destroy(&p->lock);
fail_sync1: pthread_mutex_destroy(&p->run_lock);
fail_sync0:
    wisp__free(p->tids);
    wisp__free(p);
    return wisp__fail(WISP_ENOMEM, "threadpool.c: wisp__pool_new: initialising a lock failed: %s", strerror(rc));
}

void wisp__pool_free(wisp_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&pools_lock);
    for (wisp_pool **pp = &pools; *pp; pp = &(*pp)->next_pool)
        if (*pp == p) { *pp = p->next_pool; break; }
    pthread_mutex_unlock(&pools_lock);
    /* wait for a job in flight on another thread */
    pthread_mutex_lock(&p->run_lock);
    stop_workers(p);                     /* after a fork, live is 0: nothing to join */
    pthread_mutex_unlock(&p->run_lock);
    destroy_sync(p);
    wisp__free(p->tids);
    wisp__free(p);
}

int wisp__pool_threads(const wisp_pool *p)
{
    return p ? p->threads : 1;
}

void wisp__pool_run(wisp_pool *p, size_t ntasks, wisp_task_fn fn, void *ctx)
{
    if (ntasks == 0 || !fn) return;
    if (!p || p->nworkers == 0 || ntasks == 1 || tls_running == p) {
        run_inline(p, ntasks, fn, ctx);
        return;
    }

    pthread_mutex_lock(&p->run_lock);
    if (WISP_UNLIKELY(p->respawn)) {
        p->respawn = false;
        spawn_workers(p);                /* on failure: fewer workers, still correct */
    }
    if (p->live == 0) {
        pthread_mutex_unlock(&p->run_lock);
        run_inline(p, ntasks, fn, ctx);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->open = true;
    p->generation++;
    /* wake no more workers than there are tasks beyond the caller's first */
    if (ntasks - 1 >= (size_t)p->live) pthread_cond_broadcast(&p->wake);
    else for (size_t i = 0; i < ntasks - 1; i++) pthread_cond_signal(&p->wake);
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

/* The public door to the engine's pool (wisp.h). */
int wisp_engine_run(wisp_engine *eng, size_t ntasks, wisp_task_fn fn, void *ctx)
{
    if (!eng || !fn) return wisp__fail(WISP_EINVAL, "wisp_engine_run: %s is NULL", !eng ? "eng" : "fn");
    wisp__pool_run(eng->pool, ntasks, fn, ctx);
    return WISP_OK;
}

bool wisp__pool_inside(const wisp_pool *p) { return p && tls_running == p; }
