/* farmhash.c — TensorFlow's string fingerprints: Fingerprint64 (FarmHash's farmhashna::Hash64) and FingerprintCat64. */
/*
 * TensorFlow hashes strings for categorical_column_with_hash_bucket,
 * vocabulary out-of-vocabulary buckets and crossed_column with
 * Fingerprint64, which is FarmHash's `util::Fingerprint64`, defined as
 * `farmhashna::Hash64` (the portable 64-bit variant, frozen: its values
 * never change across FarmHash versions or platforms). This file is a C
 * transcription of that function, for a little-endian host; it is checked
 * against TensorFlow's own outputs (spec/data/tf_golden.json, written by
 * scripts/tf_golden.py) and against Debian's libfarmhash when it is
 * installed (spec/interop/farmhash_check.cc, `make test-interop`).
 *
 * Debian's libfarmhash-dev is not linked: it exports a C++ API only
 * (namespace util, mangled names), so a C library would need a C++ shim,
 * and the call could not be inlined into the transform's inner loop. The
 * CUDA transform carries a device copy of the same function.
 *
 * FingerprintCat64 is TensorFlow's combiner for crosses
 * (tensorflow/core/platform/fingerprint.h).
 */
#include "internal.h"

#include <string.h>

static const uint64_t k0 = 0xc3a5c85c97cb3127ull;
static const uint64_t k1 = 0xb492b66fbe98f273ull;
static const uint64_t k2 = 0x9ae16a3b2f90404full;

static inline uint64_t fetch64(const char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint64_t fetch32(const char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
/* A right rotation; shift is never 0 here. */
static inline uint64_t rot(uint64_t v, int shift) { return (v >> shift) | (v << (64 - shift)); }
static inline uint64_t shift_mix(uint64_t v) { return v ^ (v >> 47); }

static inline uint64_t hash_len16(uint64_t u, uint64_t v, uint64_t mul)
{
    uint64_t a = (u ^ v) * mul;
    a ^= a >> 47;
    uint64_t b = (v ^ a) * mul;
    b ^= b >> 47;
    return b * mul;
}

static inline uint64_t hash_len0to16(const char *s, size_t len)
{
    if (len >= 8) {
        uint64_t mul = k2 + len * 2;
        uint64_t a = fetch64(s) + k2;
        uint64_t b = fetch64(s + len - 8);
        uint64_t c = rot(b, 37) * mul + a;
        uint64_t d = (rot(a, 25) + b) * mul;
        return hash_len16(c, d, mul);
    }
    if (len >= 4) {
        uint64_t mul = k2 + len * 2;
        uint64_t a = fetch32(s);
        return hash_len16(len + (a << 3), fetch32(s + len - 4), mul);
    }
    if (len > 0) {
        uint8_t a = (uint8_t)s[0], b = (uint8_t)s[len >> 1], c = (uint8_t)s[len - 1];
        uint32_t y = (uint32_t)a + ((uint32_t)b << 8);
        uint32_t z = (uint32_t)len + ((uint32_t)c << 2);
        return shift_mix(y * k2 ^ z * k0) * k2;
    }
    return k2;
}

static inline uint64_t hash_len17to32(const char *s, size_t len)
{
    uint64_t mul = k2 + len * 2;
    uint64_t a = fetch64(s) * k1;
    uint64_t b = fetch64(s + 8);
    uint64_t c = fetch64(s + len - 8) * mul;
    uint64_t d = fetch64(s + len - 16) * k2;
    return hash_len16(rot(a + b, 43) + rot(c, 30) + d, a + rot(b + k2, 18) + c, mul);
}

static inline uint64_t hash_len33to64(const char *s, size_t len)
{
    uint64_t mul = k2 + len * 2;
    uint64_t a = fetch64(s) * k2;
    uint64_t b = fetch64(s + 8);
    uint64_t c = fetch64(s + len - 8) * mul;
    uint64_t d = fetch64(s + len - 16) * k2;
    uint64_t y = rot(a + b, 43) + rot(c, 30) + d;
    uint64_t z = hash_len16(y, a + rot(b + k2, 18) + c, mul);
    uint64_t e = fetch64(s + 16) * mul;
    uint64_t f = fetch64(s + 24);
    uint64_t g = (y + fetch64(s + len - 32)) * mul;
    uint64_t h = (z + fetch64(s + len - 24)) * mul;
    return hash_len16(rot(e + f, 43) + rot(g, 30) + h, e + rot(f + a, 18) + g, mul);
}

/* FarmHash's WeakHashLen32WithSeeds over s[0..32) and seeds a, b: a pair. */
static inline void weak32(const char *s, uint64_t a, uint64_t b, uint64_t *first, uint64_t *second)
{
    uint64_t w = fetch64(s), x = fetch64(s + 8), y = fetch64(s + 16), z = fetch64(s + 24);
    a += w;
    b = rot(b + a + z, 21);
    uint64_t c = a;
    a += x;
    a += y;
    b += rot(a, 44);
    *first = a + z;
    *second = b + c;
}

static uint64_t hash_long(const char *s, size_t len)
{
    const uint64_t seed = 81;
    uint64_t x = seed;
    uint64_t y = seed * k1 + 113;
    uint64_t z = shift_mix(y * k2 + 113) * k2;
    uint64_t v1 = 0, v2 = 0, w1 = 0, w2 = 0, t;
    x = x * k2 + fetch64(s);
    const char *end = s + ((len - 1) / 64) * 64;
    const char *last64 = end + ((len - 1) & 63) - 63;
    do {
        x = rot(x + y + v1 + fetch64(s + 8), 37) * k1;
        y = rot(y + v2 + fetch64(s + 48), 42) * k1;
        x ^= w2;
        y += v1 + fetch64(s + 40);
        z = rot(z + w1, 33) * k1;
        weak32(s, v2 * k1, x + w1, &v1, &v2);
        weak32(s + 32, z + w2, y + fetch64(s + 16), &w1, &w2);
        t = z; z = x; x = t;
        s += 64;
    } while (s != end);
    uint64_t mul = k1 + ((z & 0xff) << 1);
    s = last64;
    w1 += (len - 1) & 63;
    v1 += w1;
    w1 += v1;
    x = rot(x + y + v1 + fetch64(s + 8), 37) * mul;
    y = rot(y + v2 + fetch64(s + 48), 42) * mul;
    x ^= w2 * 9;
    y += v1 * 9 + fetch64(s + 40);
    z = rot(z + w1, 33) * mul;
    weak32(s, v2 * mul, x + w1, &v1, &v2);
    weak32(s + 32, z + w2, y + fetch64(s + 16), &w1, &w2);
    t = z; z = x; x = t;
    return hash_len16(hash_len16(v1, w1, mul) + shift_mix(y) * k0 + z,
                      hash_len16(v2, w2, mul) + x, mul);
}

uint64_t wisp_fingerprint64(const void *data, size_t len)
{
    const char *s = data;
    if (len <= 16) return hash_len0to16(s, len);
    if (len <= 32) return hash_len17to32(s, len);
    if (len <= 64) return hash_len33to64(s, len);
    return hash_long(s, len);
}

uint64_t wisp_fingerprint_cat64(uint64_t fp1, uint64_t fp2)
{
    /* kMul = 0xc6a4a7935bd1e995; r = fp1 ^ kMul; r ^= ShiftMix(fp2 * kMul) * kMul;
     * r *= kMul; r = ShiftMix(r) * kMul; r = ShiftMix(r) (in internal.h, inlined by the transform) */
    return wisp__cat64(fp1, fp2);
}
