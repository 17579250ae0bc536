/* cuda_device.c — the CUDA backend's devices and memory: discovery, sticky errors, pinned host memory, the weights
 * on each device, and the backend table. */
#ifdef WISP_HAVE_CUDA

#include "cuda/cuda_internal.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- devices ------------------------------------------------------------------ */


int wisp__cuda_is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace: case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError: case cudaErrorAssert: case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable: case cudaErrorUnknown: case cudaErrorDevicesUnavailable:
    case cudaErrorNvlinkUncorrectable: case cudaErrorContextIsDestroyed: case cudaErrorIllegalState:
    case cudaErrorTimeout: case cudaErrorExternalDevice:
        return 1;
    default:
        return 0;
    }
}

static int cu_init(wisp_engine *eng, void **out, char *why, size_t whylen)
{
    *out = NULL;
    /* the runtime is linked statically; without libcuda it says "driver
     * version is insufficient", which misleads on a machine with no driver */
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv) {
        snprintf(why, whylen, "no NVIDIA driver (libcuda.so.1 cannot be loaded)");
        return 0;
    }
    dlclose(drv);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        if (e != cudaSuccess) {
            snprintf(why, whylen, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
            cudaGetLastError();
        } else {
            snprintf(why, whylen, "the driver reports no CUDA device");
        }
        return 0;
    }
    cuda_ctx *ctx = wisp__calloc(1, sizeof *ctx);
    if (!ctx) {
        snprintf(why, whylen, "out of host memory");
        return 0;
    }
    ctx->eng = eng;
    if (n > WISP_MAX_GPUS) n = WISP_MAX_GPUS;
    /* ordinals stay CUDA's, so only the leading run of devices the kernels
     * were built for (the Makefile's CUDA_ARCHS: sm_90 and newer by default) is used */
    const int min_cap = wisp_k_min_capability();
    int usable = 0;
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp prop;
        struct cdev *d = &ctx->dev[i];
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
            cudaGetLastError();
            break;
        }
        if (prop.major * 10 + prop.minor < min_cap) break;
        snprintf(d->name, sizeof d->name, "%s", prop.name);
        d->mem = prop.totalGlobalMem;
        d->cap = prop.major * 10 + prop.minor;
        atomic_init(&d->usable, 1);
        usable++;
    }
    if (usable == 0) {
        snprintf(why, whylen,
                 "%d CUDA device%s found, none of compute capability %d.%d or newer (the kernels were built "
                 "for sm_%d and up: CUDA_ARCHS in the Makefile)", n, n == 1 ? "" : "s", min_cap / 10, min_cap % 10,
                 min_cap);
        wisp__free(ctx);
        return 0;
    }
    ctx->n = usable;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    ctx->pinned_max = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz / 4 : (size_t)8 << 30;
    const char *pm = getenv("WISP_PINNED_MAX_MB");
    if (pm && *pm) ctx->pinned_max = (size_t)strtoull(pm, NULL, 10) << 20;
    atomic_init(&ctx->pinned, 0);
    *out = ctx;
    return usable;
}

static void cu_shutdown(void *vctx)
{
    /* no cudaDeviceReset: other code in the process may share the contexts */
    wisp__free(vctx);
}

static const char *cu_device_name(void *vctx, int dev)
{
    cuda_ctx *ctx = vctx;
    return ctx && dev >= 0 && dev < ctx->n ? ctx->dev[dev].name : NULL;
}

static uint64_t cu_device_memory(void *vctx, int dev)
{
    cuda_ctx *ctx = vctx;
    return ctx && dev >= 0 && dev < ctx->n ? ctx->dev[dev].mem : 0;
}

static int cu_device_capability(void *vctx, int dev)
{
    cuda_ctx *ctx = vctx;
    return ctx && dev >= 0 && dev < ctx->n ? ctx->dev[dev].cap : 0;
}

static int cu_device_usable(void *vctx, int dev)
{
    cuda_ctx *ctx = vctx;
    return ctx && dev >= 0 && dev < ctx->n ? atomic_load(&ctx->dev[dev].usable) : 0;
}

void wisp__cuda_mark_unusable(cuda_ctx *ctx, int dev, cudaError_t e)
{
    if (dev < 0 || dev >= ctx->n) return;
    if (atomic_exchange(&ctx->dev[dev].usable, 0))
        wisp__log(ctx->eng, WISP_LOG_ERROR, "gpu:%d marked unusable after a sticky CUDA error: %s (%s); "
                 "its work moves to the CPU", dev, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ---- pinned host memory ----------------------------------------------------------
 * A 64-byte prefix in front of each block records its size, so the pinned
 * total can be kept under WISP_PINNED_MAX_MB (default: a quarter of RAM). */

#define PIN_PAD 64

void *wisp__cuda_pin_alloc(cuda_ctx *ctx, size_t n)
{
    if (n > SIZE_MAX - PIN_PAD) return NULL;
    size_t total = n + PIN_PAD;
    size_t prev = atomic_fetch_add(&ctx->pinned, total);
    if (prev + total > ctx->pinned_max) {
        atomic_fetch_sub(&ctx->pinned, total);
        return NULL;
    }
    void *p = NULL;
    if (cudaHostAlloc(&p, total, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess || !p) {
        cudaGetLastError();
        atomic_fetch_sub(&ctx->pinned, total);
        return NULL;
    }
    *(size_t *)p = total;
    return (char *)p + PIN_PAD;
}

void wisp__cuda_pin_free(cuda_ctx *ctx, void *p)
{
    if (!p) return;
    char *base = (char *)p - PIN_PAD;
    size_t total = *(size_t *)base;
    if (cudaFreeHost(base) != cudaSuccess) cudaGetLastError();
    atomic_fetch_sub(&ctx->pinned, total);
}

static void *cu_host_alloc(void *vctx, size_t n) { return vctx ? wisp__cuda_pin_alloc(vctx, n) : NULL; }
static void cu_host_free(void *vctx, void *p) { if (vctx) wisp__cuda_pin_free(vctx, p); }

/* Pinned (page-locked) host memory the device can address; *devp gets its device address. */
int wisp__cuda_host_pinned(const void *p, void **devp)
{
    if (devp) *devp = NULL;
    if (!p) return 1;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (a.type != cudaMemoryTypeHost) return 0;
    if (devp) *devp = a.devicePointer;
    return !devp || a.devicePointer != NULL;
}

/* p is NULL, or mapped pinned memory: *dp gets its device address. */
int wisp__cuda_mapped(const void *p, void **dp)
{
    *dp = NULL;
    if (!p) return 1;
    return wisp__cuda_host_pinned(p, dp) && *dp != NULL;
}

/* ---- weights on the devices -------------------------------------------------------
 * m->dev[dev] holds the copies on that device: the whole table, or shards
 * (an id range each). Uploaded lazily, under m->dev_lock, kept in the model's
 * dtype, freed in model_release. */


int wisp__cuda_err_fail(int dev, const char *what, cudaError_t e)
{
    if (e == cudaErrorMemoryAllocation)
        return wisp__fail(WISP_EDEVICE, "gpu:%d: out of device memory (%s)", dev, what);
    return wisp__fail(WISP_EDEVICE, "gpu:%d: %s failed: %s (%s)", dev, what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

int wisp__cuda_get_weights(cuda_ctx *ctx, wisp_model *m, int dev, uint32_t lo, uint32_t span,
                       const void **out, uint64_t *stats)
{
    int st = WISP_OK;
    pthread_mutex_lock(&m->dev_lock);
    struct dmodel *dm = m->dev[dev];
    if (!dm) {
        dm = wisp__calloc(1, sizeof *dm);
        if (!dm) {
            pthread_mutex_unlock(&m->dev_lock);
            return wisp__fail(WISP_ENOMEM, "gpu:%d: out of host memory for the model's device record", dev);
        }
        m->dev[dev] = dm;
    }
    for (int i = 0; i < dm->n; i++)
        if (dm->c[i].lo == lo && dm->c[i].span == span) {
            *out = dm->c[i].p;
            pthread_mutex_unlock(&m->dev_lock);
            return WISP_OK;
        }
    if (dm->n == MAX_COPIES) {
        pthread_mutex_unlock(&m->dev_lock);
        return wisp__fail(WISP_EDEVICE, "gpu:%d: the model already has %d shard copies on this device", dev,
                          MAX_COPIES);
    }
    uint64_t t0 = wisp__now_ns();
    size_t elt = dtype_size(m->dtype), bytes = (size_t)span * elt;
    void *p = NULL;
    /* on dev, whatever device this thread last used (the GPU transform asks for the
     * weights before it selects its device; on several GPUs that can be another one) */
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMalloc(&p, bytes < ALIGN ? ALIGN : bytes);
    if (e == cudaSuccess && bytes)
        e = cudaMemcpy(p, (const char *)m->weights + (size_t)lo * elt, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (p) cudaFree(p);
        st = wisp__cuda_err_fail(dev, "uploading the weights", e);
        if (wisp__cuda_is_sticky(e)) wisp__cuda_mark_unusable(ctx, dev, e);
    } else {
        dm->c[dm->n++] = (struct dcopy){ lo, span, p, bytes };
        *out = p;
        stats[WISP_STAT_NS_H2D] += wisp__now_ns() - t0;
        stats[WISP_STAT_BYTES_H2D] += bytes;
    }
    pthread_mutex_unlock(&m->dev_lock);
    return st;
}

static void cu_model_release(void *vctx, wisp_model *m)
{
    cuda_ctx *ctx = vctx;
    if (!ctx || !m) return;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) cudaGetLastError();
    pthread_mutex_lock(&m->dev_lock);
    for (int d = 0; d < WISP_MAX_GPUS; d++) {
        struct dmodel *dm = m->dev[d];
        if (!dm) continue;
        if (d < ctx->n && cudaSetDevice(d) == cudaSuccess) {
            for (int i = 0; i < dm->n; i++)
                /* a failed device: memory is gone anyway */
                if (cudaFree(dm->c[i].p) != cudaSuccess) cudaGetLastError();
        } else {
            cudaGetLastError();
        }
        wisp__free(dm);
        m->dev[d] = NULL;
    }
    pthread_mutex_unlock(&m->dev_lock);
    if (cur >= 0 && cudaSetDevice(cur) != cudaSuccess) cudaGetLastError();
}

/* ---- for the GPU transform (engine/cuda/cuda_transform.c; cuda_internal.h) --------------------- */

int wisp__cuda_weights(void *vs, int k, wisp_model *m, const void **w, uint64_t *stats)
{
    sess *s = vs;
    if (m->num_features == 0 || m->num_features > WISP_MAX_FEATURES)
        return wisp__fail(WISP_EINVAL, "cuda: a model of %llu weights", (unsigned long long)m->num_features);
    return wisp__cuda_get_weights(s->ctx, m, s->devs[k], 0, (uint32_t)m->num_features, w, stats);
}

int wisp__cuda_failed(void *vs, int k, int err, const char *what)
{
    sess *s = vs;
    cudaError_t e = (cudaError_t)err;
    int dev = s->devs[k];
    cudaGetLastError();
    int st = wisp__cuda_err_fail(dev, what, e);
    if (wisp__cuda_is_sticky(e)) {
        wisp__cuda_mark_unusable(s->ctx, dev, e);
        wisp__fail_context(st, "sticky CUDA error, gpu:%d is marked unusable", dev);
    }
    return st;
}

/* ---- the backend table ------------------------------------------------------------ */

static const wisp_backend cuda_backend = {
    .version = WISP_BACKEND_VERSION,
    .name = "cuda",
    .init = cu_init,
    .shutdown = cu_shutdown,
    .device_name = cu_device_name,
    .device_memory = cu_device_memory,
    .device_capability = cu_device_capability,
    .device_usable = cu_device_usable,
    .session_open = wisp__cuda_session_open,
    .session_close = wisp__cuda_session_close,
    .score = wisp__cuda_score,
    .submit = wisp__cuda_submit,
    .wait = wisp__cuda_wait,
    .model_release = cu_model_release,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .transform = wisp__cuda_xf_transform,
    .score_raw = wisp__cuda_xf_score_raw,
};

const wisp_backend *wisp__cuda_backend(void) { return &cuda_backend; }

#endif /* WISP_HAVE_CUDA */
