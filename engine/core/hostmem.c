/* hostmem.c — host memory for batch arrays: the internal allocator and its public face.
 * wisp__host_alloc/free (pinned while the GPU backend is live); wisp_engine_host_alloc/free/pinned. */
#include "core/core.h"

#include <stdint.h>

/* ---- host memory for batch arrays ----------------------------------------
 * 64-byte aligned; pinned (page-locked) when the GPU backend is live, so one
 * asynchronous copy moves a batch. A small header in front of the block
 * records where it came from, so wisp__host_free always frees it right even
 * after the pinned pool ran out and plain memory was used instead. */

struct host_hdr { void *base; int pinned; };
#define HOST_PAD 64

static void *host_alloc(wisp_engine *eng, size_t n, int pin)
{
    if (n > SIZE_MAX - 2 * HOST_PAD) return NULL;
    void *base = NULL;
    int pinned = 0;
    const wisp_backend *gpu = eng && pin ? __atomic_load_n(&eng->gpu, __ATOMIC_ACQUIRE) : NULL;
    if (gpu && gpu->host_alloc) {
        base = gpu->host_alloc(eng->gpu_ctx, n + 2 * HOST_PAD);
        pinned = base != NULL;
    }
    if (!base) base = wisp__malloc(n + 2 * HOST_PAD);   /* still correct, just not pinned */
    if (!base) return NULL;
    uintptr_t a = ((uintptr_t)base + sizeof(struct host_hdr) + HOST_PAD - 1) & ~(uintptr_t)(HOST_PAD - 1);
    struct host_hdr *h = (struct host_hdr *)a - 1;
    h->base = base;
    h->pinned = pinned;
    return (void *)a;
}

void *wisp__host_alloc(wisp_engine *eng, size_t n) { return host_alloc(eng, n, 1); }

/* A batch's own arrays (batch.c): pinned while the GPU backend is live, as wisp__host_alloc,
 * unless the engine was told otherwise (wisp_engine_set_pinned_batches; WISP_BATCH_PINNED=0/1
 * sets the default). Pinned, a GPU session ships a batch in one DMA: on the H200 a 200k-row
 * builder batch goes in 0.87 ms pinned against about 2.5 ms staged from plain memory
 * (measured with the seed experiment, scripts/bench/seed_experiment.lua). But pinning every
 * growth of a batch is slow when many threads grow batches at once: the CLI's 16 parsing
 * threads spent 5.0 s of thread time on a 1M-row file against 1.1 s in plain memory, so the
 * CLI turns it off (its scoring is a small part of its time: bench_auto-h200.json). */
void *wisp__host_alloc_batch(wisp_engine *eng, size_t n)
{
    return host_alloc(eng, n, eng ? atomic_load_explicit(&eng->pinned_batches, memory_order_relaxed) : 0);
}

void wisp_engine_set_pinned_batches(wisp_engine *eng, int on)
{
    if (eng) atomic_store(&eng->pinned_batches, on ? 1 : 0);
}

void wisp__host_free(wisp_engine *eng, void *p)
{
    if (!p) return;
    struct host_hdr *h = (struct host_hdr *)p - 1;
    const wisp_backend *gpu = eng ? __atomic_load_n(&eng->gpu, __ATOMIC_ACQUIRE) : NULL;
    if (h->pinned && gpu && gpu->host_free) gpu->host_free(eng->gpu_ctx, h->base);
    else wisp__free(h->base);
}

/* ---- the public API (wisp.h, "Host memory for batch arrays") -------------- */

int wisp_engine_host_alloc(wisp_engine *eng, size_t bytes, void **out)
{
    if (out) *out = NULL;
    if (!eng || !out)
        return wisp__fail(WISP_EINVAL, "wisp_engine_host_alloc: %s is NULL", !eng ? "engine" : "out");
    /* discover the devices first, so the first allocation is pinned when a GPU is usable */
    wisp_engine_gpu_count(eng);
    void *p = wisp__host_alloc(eng, bytes);
    if (!p)
        return wisp__fail(WISP_ENOMEM, "wisp_engine_host_alloc: out of memory allocating %zu bytes", bytes);
    *out = p;
    return WISP_OK;
}

void wisp_engine_host_free(wisp_engine *eng, void *p)
{
    if (eng) wisp__host_free(eng, p);
}

int wisp_engine_host_pinned(const wisp_engine *eng, const void *p)
{
    if (!eng || !p) return 0;
    return ((const struct host_hdr *)p - 1)->pinned;
}
