/* cuda_stub.c — the CUDA backend of a build without nvcc: there is none. */
#include "internal.h"

const wisp_backend *wisp_cuda_backend(void) { return NULL; }
