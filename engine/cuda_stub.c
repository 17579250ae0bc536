/* cuda_stub.c — the CUDA backend of a build without nvcc: there is none. */
#include "internal.h"

const wisp_backend *wisp_cuda_backend(void) { return NULL; }

/* the benchmark hook of engine/cuda.c: nothing was scored on a GPU */
int wisp_cuda_units_read(wisp_session *ws, double *v, size_t cap);
int wisp_cuda_units_read(wisp_session *ws, double *v, size_t cap)
{
    (void)ws; (void)v; (void)cap;
    return wisp_fail(WISP_ESTATE, "wisp_cuda_units_read: this build has no CUDA backend");
}
