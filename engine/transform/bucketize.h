/* bucketize.h — TensorFlow's bucketized_column lookup, once, for C11 and CUDA device code
 * (std::upper_bound over float32 boundaries). */
/*
 * The bucket of x is the number of boundaries b with !(x < b): the
 * boundaries increase, so that is std::upper_bound's index, as
 * tensorflow/core/kernels/bucketize_op.cc computes it; NaN compares false
 * with everything and lands in the last bucket. Two users include it:
 * engine/transform/transform_cpu.c (the CPU transform) and kernels/transform.cu (the GPU
 * transform); it needs nothing from the engine's private headers (transform.cu cannot include
 * it). In C the function is `static inline`, under nvcc `static __device__`.
 */
#ifndef WISP_BUCKETIZE_H
#define WISP_BUCKETIZE_H

#include <stdint.h>

#ifdef __CUDACC__
#define WISP_BK_FN static __device__
#else
#define WISP_BK_FN static inline
#endif

WISP_BK_FN uint64_t wisp__bucketize(const float *b, uint32_t n, float x)
{
    uint32_t lo = 0, len = n;
    while (len > 0) {
        uint32_t half = len >> 1;
        if (!(x < b[lo + half])) { lo += half + 1; len -= half + 1; }
        else len = half;
    }
    return lo;
}

#undef WISP_BK_FN
#endif
