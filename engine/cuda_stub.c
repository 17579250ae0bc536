/* cuda_stub.c — the CUDA backend of a build without nvcc: there is none, and its benchmark hooks (wisp_test.h) say so. */
#include "internal.h"
#include "wisp_test.h"

const wisp_backend *wisp_cuda_backend(void) { return NULL; }

static int no_cuda(const char *fn) { return wisp_fail(WISP_ESTATE, "%s: this build has no CUDA backend", fn); }

int wisp_cuda_units_read(wisp_session *ws, double *v, size_t cap)
{
    (void)ws; (void)v; (void)cap;
    return no_cuda("wisp_cuda_units_read");
}

int wisp_cuda_time_resident(wisp_session *ws, const wisp_batch *b, int what, int lanes, int iters, float *ms, float *out)
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
