/* columns_impl.h — private: what the column description (engine/transform/columns.c), raw
 * batches (engine/batch/raw.c) and the CPU transform (engine/transform/transform_cpu.c) share
 * beyond transform/columns.h: the bucket remainder by multiplication, the vocabulary
 * slot mix, and input type names for messages. */
#ifndef WISP_COLUMNS_IMPL_H
#define WISP_COLUMNS_IMPL_H

#include "transform/columns.h"

/* "float32", "int64" or "string": the name of a WISP_INPUT_* input type. */
static inline const char *wisp__input_type_name(int d)
{
    return d == WISP_INPUT_FLOAT32 ? "float32" : d == WISP_INPUT_INT64 ? "int64" : "string";
}

/* The vocabulary hash tables' slot mix (a 64-bit finalizer: murmur3's fmix64). */
static inline uint64_t wisp__mix64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* h % n by multiplication (Lemire, Kaser and Kurz, "Faster remainder by
 * direct computation", 2019): with M = floor((2^128 - 1) / n) + 1, the
 * remainder is the high 64 bits of (M * h mod 2^128) * n, for every 64-bit h
 * and n (n = 1: M wraps to 0 and so does the result). Four multiplies
 * instead of a 64-bit division. */
typedef unsigned __int128 u128;
static inline uint64_t fastmod_buckets(uint64_t h, const struct wisp_node *nd)
{
    if (nd->pow2_mask) return h & nd->pow2_mask;
    u128 m = ((u128)nd->magic_hi << 64) | nd->magic_lo;
    u128 low = m * h;
    u128 bottom = ((low & UINT64_MAX) * (u128)nd->buckets) >> 64;
    u128 top = (low >> 64) * (u128)nd->buckets;
    return (uint64_t)((bottom + top) >> 64);
}

/* h % n through a double quotient, for 2^13 <= n < 2^62 with inv = 1.0 / n:
 * branch-free and vectorizable (AVX-512: eight lanes), where the 128-bit
 * products above are not. (double)h is within 2^10 of h, inv within 2^-53
 * relative of 1/n, the product within 2^-53 relative of theirs: the
 * quotient is off from h / n by at most (2^10 + 2^11 + 2^11) / n < 1, so q
 * is floor(h / n) - 1, + 0 or + 1 and r = h - q n lies in [-n, 2n) (no int64
 * overflow as n < 2^62); one correction each way makes it h % n exactly. */
static inline uint64_t fpmod(uint64_t h, uint64_t n, double inv)
{
    uint64_t q = (uint64_t)(int64_t)((double)h * inv);     /* < 2^51: fits */
    int64_t r = (int64_t)(h - q * n);
    r += (r >> 63) & (int64_t)n;
    r -= r >= (int64_t)n ? (int64_t)n : 0;
    return (uint64_t)r;
}

static inline bool fpmod_ok(const struct wisp_node *nd)
{
    return !nd->pow2_mask && nd->buckets >= (1u << 13) && nd->buckets < (1ull << 62);
}

#endif
