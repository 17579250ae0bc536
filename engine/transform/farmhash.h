/* farmhash.h — TensorFlow's Fingerprint64 and FingerprintCat64, once, for C11 and CUDA device code
 * (Fingerprint64 is FarmHash's farmhashna::Hash64). */
/*
 * TensorFlow hashes strings for categorical_column_with_hash_bucket,
 * vocabulary out-of-vocabulary buckets and crossed_column with
 * Fingerprint64, which is FarmHash's `util::Fingerprint64`, defined as
 * `farmhashna::Hash64` (the portable 64-bit variant, frozen: its values
 * never change across FarmHash versions or platforms). This is a C
 * transcription of that function for a little-endian machine, checked
 * against TensorFlow's own outputs (spec/data/tf_golden_fingerprint.json, written by
 * spec/data/gen/tf_golden.py) and against Debian's libfarmhash when it is
 * installed (spec/interop/farmhash_check.cc, `make test-interop`).
 * FingerprintCat64 is TensorFlow's combiner for crosses
 * (tensorflow/core/platform/fingerprint.h).
 *
 * Three users include it: engine/transform/farmhash.c (the exported
 * wisp_fingerprint64/wisp_fingerprint_cat64), engine/transform/columns.h (inline
 * short strings and crosses for the CPU transform's loops, engine/transform/transform_cpu.c)
 * and kernels/transform.cu (the GPU transform). It needs nothing from
 * the engine's private headers or wisp.h (transform.cu cannot include them).
 *
 * In C the functions are `static inline`; under nvcc they are `__device__`
 * (the small helpers forced inline, the per-length hashes plain calls) and
 * lengths are uint32_t, the device's string offsets. Loads are memcpy on
 * the host; on the device an 8-byte load is one load when the address is
 * aligned and bytes otherwise (strings start anywhere in a batch's bytes).
 */
#ifndef WISP_FARMHASH_H
#define WISP_FARMHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define WISP_FH_INLINE static __device__ __forceinline__ /* small helpers */
/* WISP_FH_CALL: the per-length hashes, not forced inline (nvcc decides) */
#define WISP_FH_CALL   static __device__
typedef uint32_t wisp__fh_len;
#else
#define WISP_FH_INLINE static inline
#define WISP_FH_CALL   static inline
typedef size_t wisp__fh_len;
#endif

#define WISP_FH_K0 0xc3a5c85c97cb3127ull
#define WISP_FH_K1 0xb492b66fbe98f273ull
#define WISP_FH_K2 0x9ae16a3b2f90404full

/* little-endian loads of 8 and 4 bytes at any address */
WISP_FH_INLINE uint64_t wisp__fh_fetch64(const char *p)
{
#ifdef __CUDA_ARCH__
    const unsigned char *q = (const unsigned char *)p;
    if (((uintptr_t)q & 7) == 0) return *(const uint64_t *)q;
    uint64_t v = 0;
#pragma unroll
    for (int i = 7; i >= 0; i--) v = (v << 8) | q[i];
    return v;
#else
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#endif
}

WISP_FH_INLINE uint64_t wisp__fh_fetch32(const char *p)
{
#ifdef __CUDA_ARCH__
    const unsigned char *q = (const unsigned char *)p;
    return (uint64_t)q[0] | (uint64_t)q[1] << 8 | (uint64_t)q[2] << 16 | (uint64_t)q[3] << 24;
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

/* A right rotation; shift is never 0 here. */
WISP_FH_INLINE uint64_t wisp__fh_rot(uint64_t v, int shift) { return (v >> shift) | (v << (64 - shift)); }
WISP_FH_INLINE uint64_t wisp__fh_shift_mix(uint64_t v) { return v ^ (v >> 47); }

WISP_FH_INLINE uint64_t wisp__fh_len16(uint64_t u, uint64_t v, uint64_t mul)
{
    uint64_t a = (u ^ v) * mul;
    a ^= a >> 47;
    uint64_t b = (v ^ a) * mul;
    b ^= b >> 47;
    return b * mul;
}

/* Fingerprint64 of a string of at most 16 bytes (HashLen0to16): the CPU
 * transform inlines it for short strings (transform/columns.h's wisp__fp64). */
WISP_FH_CALL uint64_t wisp__fp64_short(const char *s, wisp__fh_len len)
{
    if (len >= 8) {
        uint64_t mul = WISP_FH_K2 + len * 2;
        uint64_t a = wisp__fh_fetch64(s) + WISP_FH_K2;
        uint64_t b = wisp__fh_fetch64(s + len - 8);
        uint64_t c = wisp__fh_rot(b, 37) * mul + a;
        uint64_t d = (wisp__fh_rot(a, 25) + b) * mul;
        return wisp__fh_len16(c, d, mul);
    }
    if (len >= 4) {
        uint64_t mul = WISP_FH_K2 + len * 2;
        uint64_t a = wisp__fh_fetch32(s);
        return wisp__fh_len16(len + (a << 3), wisp__fh_fetch32(s + len - 4), mul);
    }
    if (len > 0) {
        uint8_t a = (uint8_t)s[0], b = (uint8_t)s[len >> 1], c = (uint8_t)s[len - 1];
        uint32_t y = (uint32_t)a + ((uint32_t)b << 8);
        uint32_t z = (uint32_t)len + ((uint32_t)c << 2);
        return wisp__fh_shift_mix(y * WISP_FH_K2 ^ z * WISP_FH_K0) * WISP_FH_K2;
    }
    return WISP_FH_K2;
}

WISP_FH_CALL uint64_t wisp__fh_len17to32(const char *s, wisp__fh_len len)
{
    uint64_t mul = WISP_FH_K2 + len * 2;
    uint64_t a = wisp__fh_fetch64(s) * WISP_FH_K1;
    uint64_t b = wisp__fh_fetch64(s + 8);
    uint64_t c = wisp__fh_fetch64(s + len - 8) * mul;
    uint64_t d = wisp__fh_fetch64(s + len - 16) * WISP_FH_K2;
    return wisp__fh_len16(wisp__fh_rot(a + b, 43) + wisp__fh_rot(c, 30) + d, a + wisp__fh_rot(b + WISP_FH_K2, 18) + c, mul);
}

WISP_FH_CALL uint64_t wisp__fh_len33to64(const char *s, wisp__fh_len len)
{
    uint64_t mul = WISP_FH_K2 + len * 2;
    uint64_t a = wisp__fh_fetch64(s) * WISP_FH_K2;
    uint64_t b = wisp__fh_fetch64(s + 8);
    uint64_t c = wisp__fh_fetch64(s + len - 8) * mul;
    uint64_t d = wisp__fh_fetch64(s + len - 16) * WISP_FH_K2;
    uint64_t y = wisp__fh_rot(a + b, 43) + wisp__fh_rot(c, 30) + d;
    uint64_t z = wisp__fh_len16(y, a + wisp__fh_rot(b + WISP_FH_K2, 18) + c, mul);
    uint64_t e = wisp__fh_fetch64(s + 16) * mul;
    uint64_t f = wisp__fh_fetch64(s + 24);
    uint64_t g = (y + wisp__fh_fetch64(s + len - 32)) * mul;
    uint64_t h = (z + wisp__fh_fetch64(s + len - 24)) * mul;
    return wisp__fh_len16(wisp__fh_rot(e + f, 43) + wisp__fh_rot(g, 30) + h, e + wisp__fh_rot(f + a, 18) + g, mul);
}

/* FarmHash's WeakHashLen32WithSeeds over s[0..32) and seeds a, b: a pair. */
WISP_FH_INLINE void wisp__fh_weak32(const char *s, uint64_t a, uint64_t b, uint64_t *first, uint64_t *second)
{
    uint64_t w = wisp__fh_fetch64(s), x = wisp__fh_fetch64(s + 8), y = wisp__fh_fetch64(s + 16), z = wisp__fh_fetch64(s + 24);
    a += w;
    b = wisp__fh_rot(b + a + z, 21);
    uint64_t c = a;
    a += x;
    a += y;
    b += wisp__fh_rot(a, 44);
    *first = a + z;
    *second = b + c;
}

/* more than 64 bytes */
WISP_FH_CALL uint64_t wisp__fh_long(const char *s, wisp__fh_len len)
{
    const uint64_t seed = 81;
    uint64_t x = seed;
    uint64_t y = seed * WISP_FH_K1 + 113;
    uint64_t z = wisp__fh_shift_mix(y * WISP_FH_K2 + 113) * WISP_FH_K2;
    uint64_t v1 = 0, v2 = 0, w1 = 0, w2 = 0, t;
    x = x * WISP_FH_K2 + wisp__fh_fetch64(s);
    const char *end = s + ((len - 1) / 64) * 64;
    const char *last64 = end + ((len - 1) & 63) - 63;
    do {
        x = wisp__fh_rot(x + y + v1 + wisp__fh_fetch64(s + 8), 37) * WISP_FH_K1;
        y = wisp__fh_rot(y + v2 + wisp__fh_fetch64(s + 48), 42) * WISP_FH_K1;
        x ^= w2;
        y += v1 + wisp__fh_fetch64(s + 40);
        z = wisp__fh_rot(z + w1, 33) * WISP_FH_K1;
        wisp__fh_weak32(s, v2 * WISP_FH_K1, x + w1, &v1, &v2);
        wisp__fh_weak32(s + 32, z + w2, y + wisp__fh_fetch64(s + 16), &w1, &w2);
        t = z; z = x; x = t;
        s += 64;
    } while (s != end);
    uint64_t mul = WISP_FH_K1 + ((z & 0xff) << 1);
    s = last64;
    w1 += (len - 1) & 63;
    v1 += w1;
    w1 += v1;
    x = wisp__fh_rot(x + y + v1 + wisp__fh_fetch64(s + 8), 37) * mul;
    y = wisp__fh_rot(y + v2 + wisp__fh_fetch64(s + 48), 42) * mul;
    x ^= w2 * 9;
    y += v1 * 9 + wisp__fh_fetch64(s + 40);
    z = wisp__fh_rot(z + w1, 33) * mul;
    wisp__fh_weak32(s, v2 * mul, x + w1, &v1, &v2);
    wisp__fh_weak32(s + 32, z + w2, y + wisp__fh_fetch64(s + 16), &w1, &w2);
    t = z; z = x; x = t;
    return wisp__fh_len16(wisp__fh_len16(v1, w1, mul) + wisp__fh_shift_mix(y) * WISP_FH_K0 + z,
                          wisp__fh_len16(v2, w2, mul) + x, mul);
}

/* Fingerprint64 of s[0..len) (farmhashna::Hash64). */
WISP_FH_CALL uint64_t wisp__fingerprint64(const char *s, wisp__fh_len len)
{
    if (len <= 16) return wisp__fp64_short(s, len);
    if (len <= 32) return wisp__fh_len17to32(s, len);
    if (len <= 64) return wisp__fh_len33to64(s, len);
    return wisp__fh_long(s, len);
}

/* TensorFlow's FingerprintCat64: kMul = 0xc6a4a7935bd1e995; r = fp1 ^ kMul;
 * r ^= ShiftMix(fp2 * kMul) * kMul; r *= kMul; r = ShiftMix(r) * kMul; r = ShiftMix(r). */
WISP_FH_INLINE uint64_t wisp__cat64(uint64_t fp1, uint64_t fp2)
{
    const uint64_t kMul = 0xc6a4a7935bd1e995ull;
    uint64_t r = fp1 ^ kMul;
    r ^= wisp__fh_shift_mix(fp2 * kMul) * kMul;
    r *= kMul;
    r = wisp__fh_shift_mix(r) * kMul;
    return wisp__fh_shift_mix(r);
}

#undef WISP_FH_K0
#undef WISP_FH_K1
#undef WISP_FH_K2
#undef WISP_FH_INLINE
#undef WISP_FH_CALL

#endif
