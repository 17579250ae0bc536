/* cuda_stub.c — the CUDA backend of a build without nvcc: there is none, and its hooks (wisp_test.h) say so. */
#include "score/score.h"
#include "core/wisp_test.h"

const wisp_backend *wisp__cuda_backend(void) { return NULL; }

static int no_cuda(const char *fn) { return wisp__fail(WISP_ESTATE, "%s: this build has no CUDA backend", fn); }

int wisp_cuda_test_alloc(int dev, size_t n, void **out)
{
    (void)dev; (void)n;
    if (out) *out = NULL;
    return no_cuda("wisp_cuda_test_alloc");
}

int wisp_cuda_test_copy(void *dst, const void *src, size_t n)
{
    (void)dst; (void)src; (void)n;
    return no_cuda("wisp_cuda_test_copy");
}

void wisp_cuda_test_free(void *p) { (void)p; }

/* wisp.h: batches in device memory need the CUDA backend */
int wisp_session_score_device(wisp_session *s, size_t rows, const void *indptr, int indptr_bits, const int32_t *ids,
                              const float *vals, void *stream, float *out, int out_on_device)
{
    (void)rows; (void)indptr; (void)indptr_bits; (void)ids; (void)vals; (void)stream; (void)out; (void)out_on_device;
    if (s) s->nbad = 0;
    return wisp__fail(WISP_ENODEV,
                      "wisp_session_score_device: this build of wisp has no CUDA backend (nvcc was not found "
                     "at build time)");
}

int wisp_session_score_device_n(wisp_session *s, size_t rows, const void *indptr, int indptr_bits, const int32_t *ids,
                                const float *vals, size_t nnz, void *stream, float *out, int out_on_device)
{
    (void)nnz;
    return wisp_session_score_device(s, rows, indptr, indptr_bits, ids, vals, stream, out, out_on_device);
}

int wisp_device_alloc(int dev, size_t n, void **out)
{
    (void)dev; (void)n;
    if (out) *out = NULL;
    return wisp__fail(WISP_ENODEV, "wisp_device_alloc: this build of wisp has no CUDA backend (nvcc was not found at "
                     "build time)");
}

void wisp_device_free(int dev, void *p) { (void)dev; (void)p; }

/* Not in wisp.h (an internal hook for the Python extension, which links libwisp.a: see
 * engine/bindings/python/wisp/_wisp.h): wait until the work queued on CUDA device dev (every device
 * for dev -1) is done, what cudaFree would wait for, before a block is reused instead of freed. */
int wisp__device_sync(int dev)
{
    (void)dev;
    return wisp__fail(WISP_ENODEV, "wisp__device_sync: this build of wisp has no CUDA backend (nvcc was not found at "
                     "build time)");
}

int wisp_cuda_units_read(wisp_session *ws, double *v, size_t cap)
{
    (void)ws; (void)v; (void)cap;
    return no_cuda("wisp_cuda_units_read");
}

int wisp_cuda_time_resident(wisp_session *ws, const wisp_batch *b, int what, int lanes, int iters, float *ms,
                            float *out)
{
    (void)ws; (void)b; (void)what; (void)lanes; (void)iters; (void)ms; (void)out;
    return no_cuda("wisp_cuda_time_resident");
}

int wisp_cuda_timeline_start(wisp_session *ws, size_t cap)
{
    (void)ws; (void)cap;
    return no_cuda("wisp_cuda_timeline_start");
}

int wisp_cuda_timeline_read(wisp_session *ws, float *ms, size_t cap)
{
    (void)ws; (void)ms; (void)cap;
    return no_cuda("wisp_cuda_timeline_read");
}
