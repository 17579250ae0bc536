/* testrand.h — the C tests' random numbers: splitmix64, and Zipf(s) by Hörmann & Derflinger's rejection-inversion. */
#ifndef WISP_TESTRAND_H
#define WISP_TESTRAND_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* the generator's state: a test seeds it (WISP_TEST_SEED) or keeps this default */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static inline uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform in [0, n); 0 for n = 0 */
static inline size_t rndn(size_t n) { return n ? (size_t)(rnd() % n) : 0; }
/* Seed from WISP_TEST_SEED, or from the clock and the pid; print it, so a failure
 * on a random seed can be repeated. */
static inline void testrand_seed(const char *test)
{
    const char *seed = getenv("WISP_TEST_SEED");
    rng_state = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("%s: seed %llu (WISP_TEST_SEED to repeat)\n", test, (unsigned long long)rng_state);
}

/* uniform in [0, 1) */
static inline double rnd01(void) { return (double)(rnd() >> 11) * 0x1p-53; }

/* Zipf(s) over ranks 1..n */
struct zipf { double n, s, hx1, hn, thr; };
static inline double zh1(double x) { return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }
static inline double zh2(double x)
{
    return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}
static inline double zH(const struct zipf *z, double x) { double l = log(x); return zh2((1 - z->s) * l) * l; }
static inline double zh(const struct zipf *z, double x) { return exp(-z->s * log(x)); }
static inline double zHinv(const struct zipf *z, double x)
{
    double t = x * (1 - z->s);
    if (t < -1) t = -1;
    return exp(zh1(t) * x);
}
static inline struct zipf zipf_new(double n, double s)
{
    struct zipf z = { n, s, 0, 0, 0 };
    z.hx1 = zH(&z, 1.5) - 1.0;
    z.hn = zH(&z, n + 0.5);
    z.thr = 2.0 - zHinv(&z, zH(&z, 2.5) - zh(&z, 2));
    return z;
}
static inline uint64_t zipf_rank(const struct zipf *z)
{
    for (;;) {
        double u = z->hn + rnd01() * (z->hx1 - z->hn);
        double x = zHinv(z, u);
        double k = floor(x + 0.5);
        if (k < 1) k = 1;
        else if (k > z->n) k = z->n;
        if (k - x <= z->thr || u >= zH(z, k + 0.5) - zh(z, k)) return (uint64_t)k;
    }
}

#endif
