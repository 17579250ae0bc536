/* score_cpu.c — CPU scoring: gather each row's weights, sum in double, add the bias, sigmoid; split over the pool. */
#include "score/score.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SCORE_X86 1
#else
#define SCORE_X86 0
#endif

/* How far ahead, in features of the flat ids array, the weight of a future
 * feature is prefetched, and with which locality hint. The gathers are
 * random reads in a table much larger than the caches, so each is a DRAM
 * (and, without huge pages, a TLB) miss, and a core is limited by how many
 * misses it keeps in flight. Measured on the GPU machine's CPU (16-core Xeon
 * VM, 137 ns DRAM latency; 200k rows x 39 features, 2^26 fp32 weights, huge
 * pages, one core, best of 9 runs, variants compiled side by side and
 * interleaved in one process):
 *   distance 32, t0, one row at a time     55.6 ms   (naive CSR loop 48.3 ms, scipy 78.7 ms)
 *   distance 64, t0                         54.0 ms
 *   distance 128, t1, two rows              43.3 ms   (Zipf ids: 27.9 ms; 4 KiB pages: 69.7 ms)
 *   distance 256, t1, two rows              43.0 ms
 *   distance 512, t1, two rows              43.4 ms
 * On a second machine of the same kind: this kernel 46.5 ms,
 * naive loop 50.3 ms, scipy 56.8 ms; 2 threads 21.2 ms, 4 threads 11.4 ms.
 * prefetcht1 (into L2) beats prefetcht0 at every distance, most likely
 * because the line does not hold an L1 fill buffer while it waits, so more
 * misses are in flight. A raw gather probe tops out at ~5.6 ns/gather (~24
 * misses in flight per core); 128 and up sit at that floor, and 128 is the
 * shortest distance that does (a short distance matters for small batches). */
#ifndef WISP_SCORE_PF_DIST
#define WISP_SCORE_PF_DIST 128
#endif
/* __builtin_prefetch locality: 3 = prefetcht0, 2 = t1, 1 = t2, 0 = nta. */
#ifndef WISP_SCORE_PF_HINT
#define WISP_SCORE_PF_HINT 2
#endif
/* Tables up to this size are taken to stay in the core's L2: no
 * prefetching (it costs ~35% there, measured with a 16 KB table). */
#ifndef WISP_SCORE_PF_MIN_BYTES
#define WISP_SCORE_PF_MIN_BYTES (1u << 20)
#endif
/* Work per pool task, in features (a row counts as ROW_COST features of its
 * own for the sigmoid and the store). Tasks are whole rows. */
#ifndef WISP_SCORE_CHUNK
#define WISP_SCORE_CHUNK 4096
#endif
#define ROW_COST 4
/* Use the F16C instruction for fp16 weights when the CPU has it (0: never). */
#ifndef WISP_SCORE_F16C
#define WISP_SCORE_F16C 1
#endif
/* Rows summed side by side (1 or 2): 2 gives two independent add chains,
 * 5-10% faster than 1 in the measurements above (Zipf ids, cached tables). */
#ifndef WISP_SCORE_ROWS
#define WISP_SCORE_ROWS 2
#endif

#define AI static inline __attribute__((always_inline))

/* Weight loaders: one kernel per dtype (F16 twice: portable and F16C). */
enum { K_F32 = 0, K_F16 = 1, K_F16C = 2, K_I8 = 3 };

struct kern_args {
    const uint32_t *indptr;
    const uint32_t *ids;
    const uint32_t *val_ptr;     /* WISP_VALUES_MIXED only */
    const float *vals;           /* WISP_VALUES_ALL / MIXED */
    const char *w;               /* the weight table, as bytes */
    uint32_t lim;                /* ids >= lim are out of range */
    uint64_t pf_end;             /* one past the batch's last feature: prefetch bound */
    double bias;
    double scale;                /* int8: applied to the row's sum; 1 otherwise */
    int mode;                    /* WISP_VALUES_* */
    int kind;                    /* K_* */
    bool prefetch;               /* the table is larger than WISP_SCORE_PF_MIN_BYTES */
};

/* fp16 bits -> float, exact (portable; the F16C kernel uses the instruction). */
AI float half_bits_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t ex = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (WISP_LIKELY(ex - 1u < 30u)) {                  /* normal */
        bits = sign | ((ex + 112u) << 23) | (man << 13);
    } else if (ex == 31u) {                            /* inf, nan */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (man == 0) {                             /* +-0 */
        bits = sign;
    } else {                                           /* subnormal: man * 2^-24, exact */
        float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#if SCORE_X86
/* vcvtph2ps through inline asm, so the generic kernel needs no target
 * attribute; only reached after a runtime check for F16C. */
AI float half_bits_to_float_f16c(uint16_t h)
{
    __m128 r;
    __m128i x = _mm_cvtsi32_si128(h);
    __asm__("vcvtph2ps %1, %0" : "=x"(r) : "x"(x));
    return _mm_cvtss_f32(r);
}
#else
#define half_bits_to_float_f16c half_bits_to_float
#endif

AI size_t kind_size(int kind)
{
    return kind == K_F32 ? 4 : kind == K_I8 ? 1 : 2;
}

AI double load_weight(const char *w, uint32_t id, int kind)
{
    switch (kind) {
    case K_F32: { float f; memcpy(&f, w + (size_t)id * 4, 4); return f; }
    case K_F16: { uint16_t h; memcpy(&h, w + (size_t)id * 2, 2); return half_bits_to_float(h); }
    case K_F16C: { uint16_t h; memcpy(&h, w + (size_t)id * 2, 2); return half_bits_to_float_f16c(h); }
    default: return (double)(int8_t)w[id];             /* scaled once per row */
    }
}

/* Prefetch the weight of the feature at flat position *pk, then advance it.
 * Out-of-range ids prefetch w[0] (never an address outside the table). */
AI void prefetch_next(const struct kern_args *a, uint64_t *pk, int kind, bool pf)
{
    uint64_t k = (*pk)++;
    if (pf && WISP_LIKELY(k < a->pf_end)) {
        uint32_t id = a->ids[k];
        id = id < a->lim ? id : 0;
        __builtin_prefetch(a->w + (size_t)id * kind_size(kind), 0, WISP_SCORE_PF_HINT);
    }
}

/* A row being summed: features ids[k .. e), those before vend valued with
 * vals[k + voff]; acc is the running sum in feature order. */
struct row_cursor {
    uint32_t k, e, vend;
    int64_t voff;
    double acc;
};

AI void row_open(const struct kern_args *a, size_t r, struct row_cursor *c, int mode)
{
    uint32_t s = a->indptr[r], e = a->indptr[r + 1];
    if (WISP_UNLIKELY(e < s)) e = s;                   /* a corrupt indptr reads nothing */
    c->k = s;
    c->e = e;
    c->acc = 0.0;
    c->vend = s;
    c->voff = 0;
    if (mode == WISP_VALUES_ALL) {
        c->vend = e;
    } else if (mode == WISP_VALUES_MIXED) {
        uint32_t v0 = a->val_ptr[r], v1 = a->val_ptr[r + 1];
        uint32_t nv = v1 > v0 ? v1 - v0 : 0;
        if (nv > e - s) nv = e - s;
        c->vend = s + nv;
        c->voff = (int64_t)v0 - (int64_t)s;
    }
}

/* Add the row's next feature, valued or binary as the caller knows it is
 * (k < vend). An out-of-range id adds nothing and is counted. Every row sees
 * the same operations in the same order whichever rows it is interleaved
 * with, so results do not depend on how rows were split over tasks. */
AI void row_step(const struct kern_args *a, struct row_cursor *c, bool valued, uint64_t *oor, int kind)
{
    uint32_t k = c->k++;
    uint32_t id = a->ids[k];
    if (WISP_LIKELY(id < a->lim)) {
        double t = load_weight(a->w, id, kind);
        if (valued) t *= (double)a->vals[(int64_t)k + c->voff];
        c->acc += t;
    } else {
        (*oor)++;
    }
}

/* n features of a row, all valued or all binary. */
AI void row_steps(const struct kern_args *a, struct row_cursor *c, uint32_t n, bool valued, uint64_t *pk,
                  uint64_t *oor, int kind, bool pf)
{
    for (uint32_t i = 0; i < n; i++) {
        prefetch_next(a, pk, kind, pf);
        row_step(a, c, valued, oor, kind);
    }
}

/* n features of each of two rows, side by side. */
AI void pair_steps(const struct kern_args *a, struct row_cursor *c0, struct row_cursor *c1, uint32_t n,
                   bool valued0, bool valued1, uint64_t *pk, uint64_t *oor, int kind, bool pf)
{
    for (uint32_t i = 0; i < n; i++) {
        prefetch_next(a, pk, kind, pf);
        prefetch_next(a, pk, kind, pf);
        row_step(a, c0, valued0, oor, kind);
        row_step(a, c1, valued1, oor, kind);
    }
}

/* The rest of one row: its valued run, then its binary run. */
AI void row_rest(const struct kern_args *a, struct row_cursor *c, uint64_t *pk, uint64_t *oor, int kind, int mode,
                 bool pf)
{
    if (mode != WISP_VALUES_NONE && c->k < c->vend) row_steps(a, c, c->vend - c->k, true, pk, oor, kind, pf);
    row_steps(a, c, c->e - c->k, false, pk, oor, kind, pf);
}

/* sigmoid without overflow: exp of a non-positive number only. */
AI float sigmoid(double z)
{
    if (z >= 0) return (float)(1.0 / (1.0 + exp(-z)));
    double e = exp(z);                                 /* NaN z lands here and stays NaN */
    return (float)(e / (1.0 + e));
}

AI float row_finish(const struct kern_args *a, const struct row_cursor *c, int kind)
{
    double acc = c->acc;
    if (kind == K_I8) acc *= a->scale;
    return sigmoid(a->bias + acc);
}

/* Rows [r0, r1), WISP_SCORE_ROWS at a time: interleaving two rows gives the
 * core two independent add chains (the double add's latency, not the
 * loads, bounds rows whose weights are in cache). The runs of features that
 * are valued (or binary) in both rows go through one loop each, so there is
 * no per-feature test of the value mode. The prefetch cursor walks the flat
 * ids array a fixed distance ahead of the features consumed. */
AI uint64_t score_rows_generic(const struct kern_args *a, size_t r0, size_t r1, float *out, int kind, int mode,
                               bool pf)
{
    uint64_t oor = 0;
    uint64_t pk = a->indptr[r0];
    if (pf)
        for (int i = 0; i < WISP_SCORE_PF_DIST; i++) prefetch_next(a, &pk, kind, pf);
    size_t r = r0;
#if WISP_SCORE_ROWS >= 2
    for (; r + 1 < r1; r += 2) {
        struct row_cursor c0, c1;
        row_open(a, r, &c0, mode);
        row_open(a, r + 1, &c1, mode);
        if (mode == WISP_VALUES_NONE) {
            uint32_t n0 = c0.e - c0.k, n1 = c1.e - c1.k;
            pair_steps(a, &c0, &c1, n0 < n1 ? n0 : n1, false, false, &pk, &oor, kind, pf);
        } else {
            while (c0.k < c0.e && c1.k < c1.e) {
                bool v0 = c0.k < c0.vend, v1 = c1.k < c1.vend;
                uint32_t n0 = (v0 ? c0.vend : c0.e) - c0.k, n1 = (v1 ? c1.vend : c1.e) - c1.k;
                uint32_t n = n0 < n1 ? n0 : n1;
                if (v0 && v1) pair_steps(a, &c0, &c1, n, true, true, &pk, &oor, kind, pf);
                else if (v0) pair_steps(a, &c0, &c1, n, true, false, &pk, &oor, kind, pf);
                else if (v1) pair_steps(a, &c0, &c1, n, false, true, &pk, &oor, kind, pf);
                else pair_steps(a, &c0, &c1, n, false, false, &pk, &oor, kind, pf);
            }
        }
        row_rest(a, &c0, &pk, &oor, kind, mode, pf);
        row_rest(a, &c1, &pk, &oor, kind, mode, pf);
        out[r] = row_finish(a, &c0, kind);
        out[r + 1] = row_finish(a, &c1, kind);
    }
#endif
    for (; r < r1; r++) {
        struct row_cursor c;
        row_open(a, r, &c, mode);
        row_rest(a, &c, &pk, &oor, kind, mode, pf);
        out[r] = row_finish(a, &c, kind);
    }
    return oor;
}

/* One function per dtype; the value mode and prefetching are chosen once per call. */
#define DISPATCH_MODE(kind) \
    if (a->prefetch) { \
        switch (a->mode) { \
        case WISP_VALUES_NONE: return score_rows_generic(a, r0, r1, out, kind, WISP_VALUES_NONE, true); \
        case WISP_VALUES_ALL:  return score_rows_generic(a, r0, r1, out, kind, WISP_VALUES_ALL, true); \
        default:               return score_rows_generic(a, r0, r1, out, kind, WISP_VALUES_MIXED, true); \
        } \
    } \
    switch (a->mode) { \
    case WISP_VALUES_NONE: return score_rows_generic(a, r0, r1, out, kind, WISP_VALUES_NONE, false); \
    case WISP_VALUES_ALL:  return score_rows_generic(a, r0, r1, out, kind, WISP_VALUES_ALL, false); \
    default:               return score_rows_generic(a, r0, r1, out, kind, WISP_VALUES_MIXED, false); \
    }

static uint64_t score_rows_f32(const struct kern_args *a, size_t r0, size_t r1, float *out) { DISPATCH_MODE(K_F32) }
static uint64_t score_rows_f16(const struct kern_args *a, size_t r0, size_t r1, float *out) { DISPATCH_MODE(K_F16) }
static uint64_t score_rows_f16c(const struct kern_args *a, size_t r0, size_t r1, float *out) { DISPATCH_MODE(K_F16C) }
static uint64_t score_rows_i8(const struct kern_args *a, size_t r0, size_t r1, float *out) { DISPATCH_MODE(K_I8) }

typedef uint64_t (*score_rows_fn)(const struct kern_args *a, size_t r0, size_t r1, float *out);
static const score_rows_fn score_rows_by_kind[4] = {
    [K_F32] = score_rows_f32, [K_F16] = score_rows_f16, [K_F16C] = score_rows_f16c, [K_I8] = score_rows_i8,
};

static bool have_f16c(void)
{
#if SCORE_X86 && defined(__GNUC__)
    static atomic_int cached;                          /* 0 unknown, 1 no, 2 yes */
    int c = atomic_load_explicit(&cached, memory_order_relaxed);
    if (c == 0) {
        /* cpuid, not __builtin_cpu_supports("f16c"): clang 14 rejects that
         * name. vcvtph2ps is VEX-encoded, so the OS must save the AVX state
         * too (OSXSAVE, and XCR0 bits 1 and 2). */
        unsigned a, b, cx, d;
        bool yes = false;
        if (__get_cpuid(1, &a, &b, &cx, &d) && (cx & bit_F16C) && (cx & bit_AVX) && (cx & bit_OSXSAVE)) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            yes = (lo & 6u) == 6u;
        }
        c = yes ? 2 : 1;
        atomic_store_explicit(&cached, c, memory_order_relaxed);
    }
    return c == 2;
#else
    return false;
#endif
}

/* Fill a from m and b; false when there is nothing to score. */
static bool prepare(const wisp_model *m, const wisp_batch *b, struct kern_args *a)
{
    memset(a, 0, sizeof *a);
    if (!m || !b || b->rows == 0 || !b->indptr) return false;
    a->indptr = b->indptr;
    a->ids = b->ids;
    a->mode = b->value_mode;
    a->vals = b->vals;
    a->val_ptr = b->val_ptr;
    if (a->mode != WISP_VALUES_ALL && a->mode != WISP_VALUES_MIXED) a->mode = WISP_VALUES_NONE;
    if (!a->vals) a->mode = WISP_VALUES_NONE;
    if (a->mode == WISP_VALUES_MIXED && !a->val_ptr) a->mode = WISP_VALUES_ALL;
    a->w = m->weights;
    uint64_t nf = m->num_features;
    a->lim = m->weights ? (nf > UINT32_MAX ? UINT32_MAX : (uint32_t)nf) : 0;
    a->pf_end = b->indptr[b->rows];
    if (!a->ids) { a->pf_end = 0; a->lim = 0; }
    /* out-of-range ids read w[0] (and add 0): give an empty table one zero */
    static const uint64_t zero_weight = 0;
    if (a->lim == 0) a->w = (const char *)&zero_weight;
    a->bias = m->bias;
    a->scale = 1.0;
    switch (m->dtype) {
    case WISP_F32: a->kind = K_F32; break;
    case WISP_F16: a->kind = WISP_SCORE_F16C && have_f16c() ? K_F16C : K_F16; break;
    case WISP_I8:  a->kind = K_I8; a->scale = m->scale; break;
    default:       a->kind = -1; break;
    }
    a->prefetch = a->kind >= 0 && (uint64_t)a->lim * kind_size(a->kind) > WISP_SCORE_PF_MIN_BYTES;
    return true;
}

static uint64_t run_rows(const struct kern_args *a, size_t r0, size_t r1, float *out)
{
    if (r0 >= r1) return 0;
    if (a->kind < 0 || (!a->ids && a->indptr[r1] > a->indptr[r0])) {
        for (size_t r = r0; r < r1; r++) out[r] = NAN;   /* unknown dtype: no score */
        return 0;
    }
    return score_rows_by_kind[a->kind](a, r0, r1, out);
}

static void mark_bad_rows(const wisp_batch *b, size_t r0, size_t r1, float *out)
{
    if (!b->bad) return;
    for (size_t i = 0; i < b->nbad; i++) {
        size_t r = b->bad[i].row;
        if (r >= r0 && r < r1) out[r] = NAN;
    }
}

uint64_t wisp__cpu_score_rows(const wisp_model *m, const wisp_batch *b, size_t r0, size_t r1, float *out)
{
    struct kern_args a;
    if (!out || !prepare(m, b, &a)) return 0;
    if (r1 > b->rows) r1 = b->rows;
    if (r0 >= r1) return 0;
    uint64_t oor = run_rows(&a, r0, r1, out);
    mark_bad_rows(b, r0, r1, out);
    return oor;
}

/* ---- over the pool ---------------------------------------------------------- */

struct score_job {
    struct kern_args a;
    float *out;
    size_t rows;
    size_t ntasks;
    uint64_t total;              /* cost(rows) */
    atomic_uint_fast64_t oor;
};

AI uint64_t row_cost(const struct score_job *j, size_t r)
{
    return (uint64_t)(j->a.indptr[r] - j->a.indptr[0]) + (uint64_t)r * ROW_COST;
}

/* The first row of task t: the first row whose cost reaches t/ntasks of the total. */
static size_t task_first_row(const struct score_job *j, size_t t)
{
    if (t == 0) return 0;
    if (t >= j->ntasks) return j->rows;
    uint64_t target = j->total * t / j->ntasks;
    size_t lo = 0, hi = j->rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (row_cost(j, mid) < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void score_task(void *ctx, size_t t)
{
    struct score_job *j = ctx;
    size_t r0 = task_first_row(j, t), r1 = task_first_row(j, t + 1);
    uint64_t n = run_rows(&j->a, r0, r1, j->out);
    if (n) atomic_fetch_add_explicit(&j->oor, n, memory_order_relaxed);
}

void wisp__cpu_score(wisp_engine *eng, const wisp_model *m, const wisp_batch *b, float *out,
                    uint64_t *out_of_range)
{
    struct score_job j;
    if (!out || !prepare(m, b, &j.a)) return;
    j.out = out;
    j.rows = b->rows;
    atomic_init(&j.oor, 0);
    wisp_pool *pool = eng ? eng->pool : NULL;

    bool monotone = b->indptr[b->rows] >= b->indptr[0];
    j.total = monotone ? row_cost(&j, j.rows) : (uint64_t)j.rows * ROW_COST;
    size_t ntasks = (size_t)((j.total + WISP_SCORE_CHUNK - 1) / WISP_SCORE_CHUNK);
    if (ntasks > j.rows) ntasks = j.rows;
    if (!pool || wisp__pool_threads(pool) <= 1 || !monotone || ntasks <= 1) {
        uint64_t n = run_rows(&j.a, 0, j.rows, out);
        atomic_fetch_add_explicit(&j.oor, n, memory_order_relaxed);
    } else {
        j.ntasks = ntasks;
        wisp__pool_run(pool, ntasks, score_task, &j);
    }
    mark_bad_rows(b, 0, b->rows, out);
    if (out_of_range) *out_of_range += atomic_load_explicit(&j.oor, memory_order_relaxed);
}
