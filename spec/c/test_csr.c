/* test_csr.c — wisp_batch_from_csr against a float64 reference on fresh random CSR of every element type, its bad rows, STRICT, in place or copied, and the wisp_batch_wrap path's bits.
 *
 * Every case is generated here (seeded: WISP_TEST_SEED repeats one), with its expected outcome computed
 * independently of the engine: per row good (a float64 probability) or bad (why, at which feature), the
 * arrays the batch must use in place, the ids it counts out of range. Cases: each indptr type x id type x
 * values (none, float32, float64); uniform and Zipf ids; empty rows, duplicate ids, ids at the table's
 * edges and beyond (nf - 1, nf, 2^31 - 1, 2^32 - 1, 2^32, 2^63, negative); NaN, inf, 1e39 and
 * FLT_MAX-rounding values; a slice (indptr[0] > 0); broken offsets (decreasing, past the end, negative)
 * with and without WISP_CSR_STRICT; a row wider than WISP_MAX_ROW_FEATURES; unaligned arrays; and one bad
 * entry at every position of a small batch (so a scan that skips a block, or a row after a bad one, fails
 * here). The rows listed bad must be exactly the rows that hold a bad entry. */
#include "check.h"
#include "testrand.h"
#include "wisp.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL 1e-6

static wisp_engine *eng;
static wisp_model *model;
static uint64_t nf;
static double bias;
static float *weight;          /* the model's weights, read back */
static wisp_session *sessions[2];
static int nsessions;

static const char *type_name(int t)
{
    static const char *n[] = { "?", "int32", "int64", "uint32", "uint64", "float32", "float64" };
    return t >= 1 && t <= 6 ? n[t] : "none";
}

static size_t tsize(int t) { return t == WISP_CSR_INT64 || t == WISP_CSR_UINT64 || t == WISP_CSR_FLOAT64 ? 8 : 4; }

static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- a case: the arrays in canonical form (int64 offsets, ids as 64 bits, double values) ---------------- */

enum { GOOD = 0, BAD_RANGE = 1, BAD_WIDE = 2, BAD_NEG = 3, BAD_VALUE = 4 };

struct ccase {
    size_t rows, nnz;              /* nnz: the ids' length */
    int it, dt, vt;                /* element types; vt 0: no values */
    int64_t *ip;                   /* rows + 1 */
    uint64_t *ids;                 /* the bits (signed types: the int64's) */
    double *vals;
    /* the expected outcome */
    int *why;
    size_t *at;                    /* the bad entry's feature index in its row */
    double *ref;
    uint64_t oor;
    size_t nbad;
};

static void ccase_free(struct ccase *c)
{
    free(c->ip); free(c->ids); free(c->vals); free(c->why); free(c->at); free(c->ref);
    memset(c, 0, sizeof *c);
}

static int is_signed(int t) { return t == WISP_CSR_INT32 || t == WISP_CSR_INT64; }

/* the id as the batch stores it */
static uint32_t stored_id(uint64_t bits, int dt)
{
    if (tsize(dt) == 4) return (uint32_t)bits;
    return bits > UINT32_MAX ? 0xFFFFFFFFu : (uint32_t)bits;
}

static float as_f32(double v) { return (float)v; }

/* The outcome of every row, by the contract's rules, from the canonical arrays. */
static void expect(struct ccase *c, int strict)
{
    free(c->why); free(c->at); free(c->ref);
    c->why = calloc(c->rows ? c->rows : 1, sizeof *c->why);
    c->at = calloc(c->rows ? c->rows : 1, sizeof *c->at);
    c->ref = calloc(c->rows ? c->rows : 1, sizeof *c->ref);
    c->oor = 0;
    c->nbad = 0;
    for (size_t r = 0; r < c->rows; r++) {
        const int64_t a = c->ip[r], z = c->ip[r + 1];
        int why = GOOD;
        if (!strict && (a < 0 || z < a || (uint64_t)z > c->nnz)) why = BAD_RANGE;
        else if ((uint64_t)(z - a) > WISP_MAX_ROW_FEATURES) why = BAD_WIDE;
        double s = 0;
        if (why == GOOD) {
            for (int64_t k = a; k < z; k++) {
                const uint64_t id = c->ids[k];
                if (stored_id(id, c->dt) >= nf) c->oor++;
                if (why != GOOD) continue;
                if (is_signed(c->dt) && (int64_t)id < 0) { why = BAD_NEG; c->at[r] = (size_t)(k - a); continue; }
                const double v = c->vt ? (double)as_f32(c->vals[k]) : 1.0;
                if (!isfinite(v)) { why = BAD_VALUE; c->at[r] = (size_t)(k - a); continue; }
                if (id < nf) s += (double)weight[id] * v;
            }
        }
        c->why[r] = why;
        c->nbad += why != GOOD;
        c->ref[r] = why == GOOD ? 1.0 / (1.0 + exp(-(bias + s))) : NAN;
    }
}

/* an id of the type's edges */
static uint64_t edge_id(int dt)
{
    switch (dt) {
    case WISP_CSR_INT32:
        switch (rnd_below(3)) { case 0: return 0x7FFFFFFFull; case 1: return nf; default: return nf + rnd_below(100); }
    case WISP_CSR_UINT32:
        switch (rnd_below(4)) { case 0: return 0x7FFFFFFFull; case 1: return 0x80000000ull; case 2: return 0xFFFFFFFFull;
                                default: return nf; }
    case WISP_CSR_INT64:
        switch (rnd_below(5)) { case 0: return 0x7FFFFFFFull; case 1: return 0xFFFFFFFFull; case 2: return 1ull << 32;
                                case 3: return (1ull << 40) + rnd_below(9); default: return nf; }
    default:
        switch (rnd_below(5)) { case 0: return 0xFFFFFFFFull; case 1: return 1ull << 32; case 2: return 1ull << 63;
                                case 3: return UINT64_MAX; default: return nf; }
    }
}

static uint64_t negative_id(int dt)
{
    switch (rnd_below(3)) {
    case 0: return (uint64_t)(int64_t)-1;
    case 1: return (uint64_t)-(int64_t)(1 + rnd_below(1000));
    default: return dt == WISP_CSR_INT32 ? (uint64_t)(int64_t)INT32_MIN : (uint64_t)INT64_MIN;
    }
}

static double bad_value(int vt)
{
    switch (rnd_below(vt == WISP_CSR_FLOAT64 ? 5 : 3)) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return 1e39;                    /* finite in float64, inf in float32 */
    default: return -3.4028236e38;          /* rounds to -inf */
    }
}

/* A fresh random case. hostile: negative ids (signed types) and values that are not finite float32s. */
static void gen(struct ccase *c, size_t rows, int it, int dt, int vt, int zipf, int hostile, int64_t base)
{
    memset(c, 0, sizeof *c);
    c->rows = rows;
    c->it = it; c->dt = dt; c->vt = vt;
    const size_t cap = (size_t)base + rows * 40 + 64;
    c->ip = malloc((rows + 1) * sizeof *c->ip);
    c->ids = malloc(cap * sizeof *c->ids);
    c->vals = malloc(cap * sizeof *c->vals);
    struct zipf zf = zipf_new((double)nf, 1.1);
    size_t k = 0;
    for (; k < (size_t)base; k++) { c->ids[k] = negative_id(WISP_CSR_INT64); c->vals[k] = NAN; }   /* never read */
    c->ip[0] = base;
    for (size_t r = 0; r < rows; r++) {
        size_t w;
        switch (rnd_below(10)) {
        case 0: w = 0; break;
        case 1: w = 15 + rnd_below(3); break;              /* about one block */
        default: w = 1 + rnd_below(39);
        }
        for (size_t j = 0; j < w; j++, k++) {
            uint64_t id;
            switch (rnd_below(14)) {
            case 0: id = 0; break;
            case 1: id = nf - 1; break;
            case 2: id = edge_id(dt); break;
            case 3: id = j ? c->ids[k - 1] : 0; break;    /* a duplicate */
            default: id = zipf ? zipf_rank(&zf) - 1 : rnd_below(nf);
            }
            double v;
            switch (rnd_below(16)) {
            case 0: v = FLT_MAX; break;                    /* finite: kept */
            case 1: v = 1e-40; break;                      /* a subnormal float32 */
            case 2: v = 1e-50; break;                      /* underflows to 0 in float32 */
            default: v = rnd01() * 4 - 2;
            }
            if (vt == WISP_CSR_FLOAT32 || !vt) v = (double)as_f32(v);
            if (hostile && rnd_below(97) == 0 && is_signed(dt)) id = negative_id(dt);
            if (hostile && vt && rnd_below(89) == 0) v = bad_value(vt);
            c->ids[k] = dt == WISP_CSR_INT32 ? (uint64_t)(int64_t)(int32_t)(uint32_t)id
                      : dt == WISP_CSR_UINT32 ? (uint64_t)(uint32_t)id : id;
            c->vals[k] = v;
        }
        c->ip[r + 1] = (int64_t)k;
    }
    /* bad entries at both ends (the first and last blocks' edges) */
    if (hostile && k > (size_t)base + 1) {
        size_t ends[2] = { (size_t)base, k - 1 };
        for (int i = 0; i < 2; i++) {
            if (vt && (i == 0 || !is_signed(dt))) c->vals[ends[i]] = bad_value(vt);
            else if (is_signed(dt)) c->ids[ends[i]] = negative_id(dt);
        }
    }
    c->nnz = k;
}

/* ---- the arrays as a binding hands them over --------------------------------------------------------- */

struct typed { void *ip, *ids, *vals; char *blk[3]; };

static void typed_free(struct typed *t) { for (int i = 0; i < 3; i++) free(t->blk[i]); memset(t, 0, sizeof *t); }

/* The case in its element types; shift bytes off natural alignment (0: aligned). */
static void materialize(const struct ccase *c, struct typed *t, size_t shift)
{
    memset(t, 0, sizeof *t);
    const size_t n = c->nnz ? c->nnz : 1;
    t->blk[0] = malloc((c->rows + 1) * tsize(c->it) + 16);
    t->blk[1] = malloc(n * tsize(c->dt) + 16);
    t->blk[2] = malloc(n * 8 + 16);
    t->ip = t->blk[0] + shift;
    t->ids = t->blk[1] + shift;
    t->vals = c->vt ? t->blk[2] + shift : NULL;
    for (size_t r = 0; r <= c->rows; r++) {
        const int64_t v = c->ip[r];
        if (c->it == WISP_CSR_INT64) memcpy((char *)t->ip + 8 * r, &v, 8);
        else { uint32_t u = (uint32_t)v; memcpy((char *)t->ip + 4 * r, &u, 4); }
    }
    for (size_t k = 0; k < c->nnz; k++) {
        if (tsize(c->dt) == 8) memcpy((char *)t->ids + 8 * k, &c->ids[k], 8);
        else { uint32_t u = (uint32_t)c->ids[k]; memcpy((char *)t->ids + 4 * k, &u, 4); }
        if (c->vt == WISP_CSR_FLOAT64) memcpy((char *)t->vals + 8 * k, &c->vals[k], 8);
        else if (c->vt) { float f = as_f32(c->vals[k]); memcpy((char *)t->vals + 4 * k, &f, 4); }
    }
}

/* ---- one case through wisp_batch_from_csr, every session, against the reference --------------------- */

static const char *reason_words(int why)
{
    switch (why) {
    case BAD_RANGE: return "is not a range inside [0, ";
    case BAD_WIDE: return "features, more than WISP_MAX_ROW_FEATURES (1048576)";
    case BAD_NEG: return ": a negative feature index (";
    default: return "is not a finite float32";
    }
}

/* The bad-row list is exactly the rows expected bad, in order, each with its reason's words. */
static void check_bad_rows(const struct ccase *c, const wisp_batch *b, const char *what)
{
    size_t i = 0, wrong = 0;
    CHECK_MSG(wisp_batch_bad_count(b) == c->nbad, "%s: %zu bad rows listed, %zu expected", what,
              wisp_batch_bad_count(b), c->nbad);
    for (size_t r = 0; r < c->rows; r++) {
        if (c->why[r] == GOOD) continue;
        size_t row = 0;
        uint64_t line = 1;
        const char *msg = NULL;
        if (wisp_batch_bad_row(b, i++, &row, &line, &msg) != WISP_OK || !msg) { wrong++; continue; }
        char want[96];
        if (c->why[r] == BAD_NEG || c->why[r] == BAD_VALUE) snprintf(want, sizeof want, "feature #%zu", c->at[r] + 1);
        else want[0] = '\0';
        char neg[64] = "";
        if (c->why[r] == BAD_NEG) snprintf(neg, sizeof neg, "a negative feature index (%lld)",
                                           (long long)(c->dt == WISP_CSR_INT32 ? (int32_t)c->ids[c->ip[r] + c->at[r]]
                                                                               : (int64_t)c->ids[c->ip[r] + c->at[r]]));
        if (row != r || line != 0 || !strstr(msg, reason_words(c->why[r])) || !strstr(msg, want) || !strstr(msg, neg)) {
            if (wrong++ < 4) fprintf(stderr, "%s: bad row %zu (listed %zu): '%s', want '%s' '%s' '%s'\n", what, r, row, msg,
                                     reason_words(c->why[r]), want, neg);
        }
    }
    CHECK_MSG(wrong == 0, "%s: %zu bad rows listed wrongly", what, wrong);
}

/* The arrays of b are the caller's exactly when they should be. */
static void check_in_place(const struct ccase *c, const struct typed *t, const wisp_batch *b, int faulted,
                           size_t shift, const char *what)
{
    const int64_t p0 = c->ip[0];
    const int ip_here = !faulted && !shift && c->it != WISP_CSR_INT64 && p0 == 0;
    const int ids_here = !faulted && !shift && tsize(c->dt) == 4;
    const int vals_here = !faulted && !shift && c->vt == WISP_CSR_FLOAT32;
    const void *ip = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vals = wisp_batch_vals(b);
    CHECK_MSG((ip == t->ip) == ip_here, "%s: indptr %s", what, ip_here ? "copied" : "not copied");
    if (c->nnz && c->ip[c->rows] > p0) {
        CHECK_MSG((ids == (const char *)t->ids + 4 * (size_t)p0) == ids_here, "%s: ids %s", what,
                  ids_here ? "copied" : "not copied");
        if (c->vt) CHECK_MSG((vals == (const char *)t->vals + 4 * (size_t)p0) == vals_here, "%s: values %s", what,
                             vals_here ? "copied" : "not copied");
    }
    if (!c->vt) CHECK(vals == NULL);
    CHECK(wisp_batch_val_ptr(b) == NULL);
}

/* The same rows wrapped with wisp_batch_wrap (converted here): the good rows' answers, bit for bit. */
static void check_wrap_bits(const struct ccase *c, wisp_session *s, const float *got, const char *what)
{
    const size_t rows = c->rows;
    size_t n = 0;
    for (size_t r = 0; r < rows; r++) if (c->why[r] == GOOD) n += (size_t)(c->ip[r + 1] - c->ip[r]);
    uint32_t *rp = malloc((rows + 1) * 4), *ids = malloc((n ? n : 1) * 4);
    float *vals = malloc((n ? n : 1) * 4), *out = malloc((rows ? rows : 1) * 4);
    size_t o = 0;
    rp[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        if (c->why[r] == GOOD)
            for (int64_t k = c->ip[r]; k < c->ip[r + 1]; k++, o++) {
                ids[o] = stored_id(c->ids[k], c->dt);
                vals[o] = as_f32(c->vals[k]);
            }
        rp[r + 1] = (uint32_t)o;
    }
    wisp_batch *w = NULL;
    CHECK_OK(wisp_batch_wrap(eng, rows, rp, ids, NULL, c->vt ? vals : NULL, &w));
    if (w) {
        CHECK_OK(wisp_session_score(s, w, out));
        size_t differ = 0;
        for (size_t r = 0; r < rows; r++)
            if (c->why[r] == GOOD && memcmp(&out[r], &got[r], 4) != 0 && differ++ < 3)
                fprintf(stderr, "%s: row %zu: %.9g through wisp_batch_wrap, %.9g here\n", what, r, out[r], got[r]);
        CHECK_MSG(differ == 0, "%s: %zu good rows differ from the wisp_batch_wrap path", what, differ);
    }
    wisp_batch_free(w);
    free(rp); free(ids); free(vals); free(out);
}

/* faulted: offsets broken on purpose (the batch must rebuild every array) */
static void run_case(struct ccase *c, unsigned flags, int faulted, size_t shift, const char *label)
{
    char what[256];
    snprintf(what, sizeof what, "%s: indptr %s, ids %s, values %s%s, %zu rows%s", label, type_name(c->it),
             type_name(c->dt), type_name(c->vt), flags & WISP_CSR_STRICT ? ", strict" : "", c->rows,
             shift ? ", unaligned" : "");
    expect(c, (flags & WISP_CSR_STRICT) != 0);
    struct typed t;
    materialize(c, &t, shift);
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_from_csr(eng, c->rows, t.ip, c->it, t.ids, c->dt, c->nnz, t.vals,
                                 c->vt ? c->vt : 99, flags, &b));
    if (!b) { typed_free(&t); return; }
    size_t kept = 0;
    for (size_t r = 0; r < c->rows; r++)
        if (c->why[r] != BAD_RANGE && c->why[r] != BAD_WIDE) kept += (size_t)(c->ip[r + 1] - c->ip[r]);
    CHECK_MSG(wisp_batch_rows(b) == c->rows && wisp_batch_nnz(b) == kept, "%s: %zu rows, %zu features (want %zu, %zu)",
              what, wisp_batch_rows(b), wisp_batch_nnz(b), c->rows, kept);
    CHECK(wisp_batch_nvals(b) == (c->vt ? kept : 0));
    check_in_place(c, &t, b, faulted, shift, what);
    check_bad_rows(c, b, what);
    float *got = malloc((c->rows ? c->rows : 1) * sizeof *got);
    for (int si = 0; si < nsessions; si++) {
        wisp_session *s = sessions[si];
        for (size_t r = 0; r < c->rows; r++) got[r] = -7.0f;
        const uint64_t oor0 = wisp_session_stat(s, WISP_STAT_OUT_OF_RANGE);
        const uint64_t bad0 = wisp_session_stat(s, WISP_STAT_BAD_ROWS);
        CHECK_OK(wisp_session_score(s, b, got));
        size_t nan_differ = 0, far = 0;
        double worst = 0;
        for (size_t r = 0; r < c->rows; r++) {
            if (isnan(c->ref[r]) || isnan(got[r])) { nan_differ += isnan(c->ref[r]) != isnan(got[r]); continue; }
            const double d = fabs(c->ref[r] - got[r]);
            far += d > TOL;
            worst = fmax(worst, d);
        }
        CHECK_MSG(nan_differ == 0 && far == 0, "%s on %s: %zu NaN rows differ, %zu rows off, worst %.3g", what,
                  wisp_session_device(s), nan_differ, far, worst);
        CHECK(wisp_session_stat(s, WISP_STAT_BAD_ROWS) - bad0 == c->nbad);
        if (si == 0)
            CHECK_MSG(wisp_session_stat(s, WISP_STAT_OUT_OF_RANGE) - oor0 == c->oor, "%s: out_of_range +%llu, want %llu",
                      what, (unsigned long long)(wisp_session_stat(s, WISP_STAT_OUT_OF_RANGE) - oor0),
                      (unsigned long long)c->oor);
        if (si == 0) check_wrap_bits(c, s, got, what);
    }
    /* a batch from wisp_batch_from_csr does not grow */
    uint64_t one = 1;
    CHECK(wisp_batch_add_row(b, &one, NULL, 1) == WISP_ESTATE);
    wisp_batch_clear(b);
    CHECK(wisp_batch_rows(b) == c->rows);
    free(got);
    wisp_batch_free(b);
    typed_free(&t);
}

/* ---- the cases ----------------------------------------------------------------------------------------- */

static const int ITYPES[] = { WISP_CSR_INT32, WISP_CSR_INT64, WISP_CSR_UINT32 };
static const int DTYPES[] = { WISP_CSR_INT32, WISP_CSR_INT64, WISP_CSR_UINT32, WISP_CSR_UINT64 };
static const int VTYPES[] = { 0, WISP_CSR_FLOAT32, WISP_CSR_FLOAT64 };

static void random_cases(void)
{
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 4; d++)
            for (int v = 0; v < 3; v++)
                for (int pass = 0; pass < 4; pass++) {
                    const int zipf = pass & 1, hostile = pass >= 2;
                    struct ccase c;
                    gen(&c, 200 + rnd_below(2000), ITYPES[i], DTYPES[d], VTYPES[v], zipf, hostile, 0);
                    run_case(&c, WISP_CSR_STRICT, 0, 0, zipf ? "Zipf" : "uniform");
                    run_case(&c, 0, 0, 0, zipf ? "Zipf" : "uniform");
                    if (pass == 3) run_case(&c, WISP_CSR_STRICT, 0, 1 + rnd_below(3), "uniform");
                    ccase_free(&c);
                    /* a slice: indptr[0] > 0, ids after indptr[rows] (not read, not counted) */
                    gen(&c, 100 + rnd_below(500), ITYPES[i], DTYPES[d], VTYPES[v], zipf, hostile, 1 + (int64_t)rnd_below(40));
                    c.nnz += rnd_below(30);
                    for (size_t k = (size_t)c.ip[c.rows]; k < c.nnz; k++) { c.ids[k] = (uint64_t)-1; c.vals[k] = NAN; }
                    run_case(&c, 0, 0, 0, "slice");
                    ccase_free(&c);
                }
}

/* broken offsets without STRICT: exactly the rows they hit are bad (and empty), the others as before */
static void broken_offsets(void)
{
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 4; d++)
            for (int v = 0; v < 3; v++) {
                struct ccase c;
                gen(&c, 300 + rnd_below(700), ITYPES[i], DTYPES[d], VTYPES[v], (int)rnd_below(2), 1, 0);
                for (int f = 0; f < 4; f++) {
                    const size_t r = 1 + rnd_below(c.rows - 2);
                    switch (f) {
                    case 0: c.ip[r] = c.ip[r + 1] + 3; break;                       /* a decrease */
                    case 1: if (ITYPES[i] != WISP_CSR_UINT32) c.ip[r] = -5; break;  /* negative */
                    case 2: c.ip[r] = (int64_t)c.nnz + 1 + (int64_t)rnd_below(9); break;   /* past the end */
                    default: c.ip[r] = c.ip[r - 1]; break;                          /* row r-1 emptied: still good */
                    }
                }
                c.ip[c.rows] = (int64_t)c.nnz + 2;                                  /* the last row past the end */
                run_case(&c, 0, 1, 0, "broken offsets");
                run_case(&c, 0, 1, 2, "broken offsets");
                ccase_free(&c);
            }
}

/* One bad entry at each position of a small batch (3 rows of 14): every block, every row after a bad one. */
static void every_position(void)
{
    for (int d = 0; d < 4; d++)
        for (int v = 0; v < 3; v++) {
            if (!is_signed(DTYPES[d]) && !VTYPES[v]) continue;
            for (size_t p = 0; p < 42; p++)
                for (int two = 0; two < 2; two++) {
                    struct ccase c;
                    memset(&c, 0, sizeof c);
                    c.rows = 3; c.nnz = 42; c.it = WISP_CSR_INT32; c.dt = DTYPES[d]; c.vt = VTYPES[v];
                    c.ip = malloc(4 * sizeof *c.ip);
                    c.ids = malloc(42 * sizeof *c.ids);
                    c.vals = malloc(42 * sizeof *c.vals);
                    for (int r = 0; r <= 3; r++) c.ip[r] = 14 * r;
                    for (size_t k = 0; k < 42; k++) { c.ids[k] = rnd_below(nf); c.vals[k] = rnd01(); }
                    /* p bad, and (two) the entry 16 after it too: the next block, maybe the next row */
                    for (size_t q = p; q < 42 && (q == p || two); q += 16) {
                        if (is_signed(c.dt) && (!c.vt || (q & 1))) c.ids[q] = negative_id(WISP_CSR_INT32);
                        else c.vals[q] = NAN;
                        if (!two) break;
                    }
                    run_case(&c, WISP_CSR_STRICT, 0, 0, "every position");
                    ccase_free(&c);
                }
        }
}

/* a row wider than WISP_MAX_ROW_FEATURES: bad (and empty) with or without STRICT; exactly the limit is fine */
static void wide_rows(void)
{
    struct ccase c;
    memset(&c, 0, sizeof c);
    c.rows = 4;
    c.it = WISP_CSR_INT64; c.dt = WISP_CSR_INT32; c.vt = WISP_CSR_FLOAT32;
    const size_t w[4] = { 3, WISP_MAX_ROW_FEATURES + 1, WISP_MAX_ROW_FEATURES, 2 };
    c.nnz = w[0] + w[1] + w[2] + w[3];
    c.ip = malloc(5 * sizeof *c.ip);
    c.ids = malloc(c.nnz * sizeof *c.ids);
    c.vals = malloc(c.nnz * sizeof *c.vals);
    c.ip[0] = 0;
    for (int r = 0; r < 4; r++) c.ip[r + 1] = c.ip[r] + (int64_t)w[r];
    for (size_t k = 0; k < c.nnz; k++) { c.ids[k] = rnd_below(nf); c.vals[k] = (double)as_f32(rnd01() * 0.001); }
    run_case(&c, WISP_CSR_STRICT, 1, 0, "wide");
    run_case(&c, 0, 1, 0, "wide");
    ccase_free(&c);
}

/* STRICT refuses scipy's faults as call failures, naming the arrays; *out stays NULL */
static void strict_faults(void)
{
    static const struct { int64_t ip[4]; size_t rows, nnz; const char *words; } cases[] = {
        { { 0, 3, 2 }, 2, 3, "indptr decreases at row 1 (indptr[2] = 2 < indptr[1] = 3)" },
        { { 0, 2, 9 }, 2, 3, "indptr[-1] = 9 but indices has 3 entries" },
        { { 0, 2, 2 }, 2, 3, "indptr[-1] = 2 but indices has 3 entries" },
        { { 1, 2, 3 }, 2, 3, "indptr[0] = 1, must be 0" },
        { { -1, 2 }, 1, 3, "indptr[0] = -1 is negative, must be 0" },
        { { 0, 1, 0, 3 }, 3, 3, "indptr decreases at row 1 (indptr[2] = 0 < indptr[1] = 1)" },
    };
    const int32_t ids[3] = { 1, 2, 3 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int t = 0; t < 3; t++) {
            if (ITYPES[t] == WISP_CSR_UINT32 && cases[i].ip[0] < 0) continue;
            union { int32_t i32[4]; int64_t i64[4]; uint32_t u32[4]; } ip;
            for (int r = 0; r < 4; r++) {
                ip.i64[r] = 0;
            }
            for (size_t r = 0; r <= cases[i].rows; r++) {
                if (ITYPES[t] == WISP_CSR_INT64) ip.i64[r] = cases[i].ip[r];
                else ip.u32[r] = (uint32_t)cases[i].ip[r];
            }
            wisp_batch *b = (wisp_batch *)&ip;
            CHECK_FAILS(wisp_batch_from_csr(eng, cases[i].rows, &ip, ITYPES[t], ids, WISP_CSR_INT32, cases[i].nnz, NULL, 0,
                                            WISP_CSR_STRICT, &b), WISP_EINVAL, cases[i].words);
            CHECK(b == NULL);
            CHECK(strstr(wisp_errmsg(), "wisp_batch_from_csr: ") == wisp_errmsg());
            /* without STRICT the same arrays make a batch (the faults are bad rows or a slice) */
            CHECK_OK(wisp_batch_from_csr(eng, cases[i].rows, &ip, ITYPES[t], ids, WISP_CSR_INT32, cases[i].nnz, NULL, 0, 0, &b));
            wisp_batch_free(b);
        }
}

/* the call's own refusals */
static void refusals(void)
{
    const int32_t ip[3] = { 0, 1, 2 }, ids[2] = { 1, 2 };
    const float vals[2] = { 1, 2 };
    wisp_batch *b = (wisp_batch *)1;
    CHECK_FAILS(wisp_batch_from_csr(NULL, 2, ip, WISP_CSR_INT32, ids, WISP_CSR_INT32, 2, NULL, 0, 0, &b), WISP_EINVAL, "engine is NULL");
    CHECK(b == NULL);
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_INT32, ids, WISP_CSR_INT32, 2, NULL, 0, 0, NULL), WISP_EINVAL, "out is NULL");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, NULL, WISP_CSR_INT32, ids, WISP_CSR_INT32, 2, NULL, 0, 0, &b), WISP_EINVAL, "indptr is NULL");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_INT32, NULL, WISP_CSR_INT32, 2, NULL, 0, 0, &b), WISP_EINVAL, "ids is NULL");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_UINT64, ids, WISP_CSR_INT32, 2, NULL, 0, 0, &b), WISP_EINVAL, "indptr_type");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, 0, ids, WISP_CSR_INT32, 2, NULL, 0, 0, &b), WISP_EINVAL, "indptr_type");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_INT32, ids, WISP_CSR_FLOAT32, 2, NULL, 0, 0, &b), WISP_EINVAL, "id_type");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_INT32, ids, 0, 2, NULL, 0, 0, &b), WISP_EINVAL, "id_type");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_INT32, ids, WISP_CSR_INT32, 2, vals, WISP_CSR_INT32, 0, &b), WISP_EINVAL, "value_type");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_INT32, ids, WISP_CSR_INT32, 2, NULL, 0, 2, &b), WISP_EINVAL, "unknown flags");
    CHECK_FAILS(wisp_batch_from_csr(eng, (size_t)WISP_MAX_ROWS + 1, ip, WISP_CSR_INT32, ids, WISP_CSR_INT32, 2, NULL, 0, 0, &b),
                WISP_ELIMIT, "WISP_MAX_ROWS");
    CHECK_FAILS(wisp_batch_from_csr(eng, 2, ip, WISP_CSR_INT32, ids, WISP_CSR_INT32, (size_t)WISP_MAX_NNZ + 1, NULL, 0, 0, &b),
                WISP_ELIMIT, "WISP_MAX_NNZ");
    CHECK(b == NULL);
    /* no rows: indptr may be NULL; no features: ids may be NULL */
    CHECK_OK(wisp_batch_from_csr(eng, 0, NULL, WISP_CSR_INT32, NULL, WISP_CSR_INT32, 0, NULL, 0, WISP_CSR_STRICT, &b));
    CHECK(b && wisp_batch_rows(b) == 0 && wisp_batch_indptr(b) && wisp_batch_indptr(b)[0] == 0);
    wisp_batch_free(b);
    const int64_t empty[3] = { 0, 0, 0 };
    CHECK_OK(wisp_batch_from_csr(eng, 2, empty, WISP_CSR_INT64, NULL, WISP_CSR_INT32, 0, NULL, 0, WISP_CSR_STRICT, &b));
    CHECK(b && wisp_batch_rows(b) == 2 && wisp_batch_nnz(b) == 0 && wisp_batch_bad_count(b) == 0);
    wisp_batch_free(b);
    const int64_t past[3] = { 0, 0, 2 };
    CHECK_OK(wisp_batch_from_csr(eng, 2, past, WISP_CSR_INT64, NULL, WISP_CSR_INT32, 0, NULL, 0, 0, &b));
    CHECK(b && wisp_batch_bad_count(b) == 1);
    wisp_batch_free(b);
}

/* wisp_batch_add_csr, superseded, keeps working as documented */
static void add_csr(void)
{
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_new(eng, &b));
    if (!b) return;
    const int64_t ip[4] = { 0, 2, 3, 5 };
    const int32_t ids[5] = { 1, 2, 3, -4, 5 };
    const float vals[5] = { 1, 2, 3, 4, 5 };
    size_t added = 9;
    int64_t bad_at = 9;
    CHECK_OK(wisp_batch_add_csr(b, ip, 64, 0, 3, ids, 32, vals, &added, &bad_at));
    CHECK(added == 2 && bad_at == 3 && wisp_batch_rows(b) == 2 && wisp_batch_nnz(b) == 3);
    CHECK(wisp_batch_add_csr(b, ip, 16, 0, 3, ids, 32, vals, &added, &bad_at) == WISP_EINVAL);
    wisp_batch_free(b);
}

int main(void)
{
    testrand_seed("test_csr");
    CHECK_OK(wisp_engine_new(2, &eng));
    if (!eng) return CHECK_DONE("test_csr");
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    nf = 3000 + rnd_below(3000);
    bias = rnd01() - 0.5;
    float *w = malloc(nf * sizeof *w);
    for (uint64_t i = 0; i < nf; i++) w[i] = (float)((rnd01() - 0.5) * 0.8);
    char path[256];
    snprintf(path, sizeof path, "/tmp/wisp_test_csr_%d.wisp", (int)getpid());
    CHECK_OK(wisp_model_write(path, w, nf, bias, WISP_F32, "source=test_csr\n", NULL));
    CHECK_OK(wisp_model_load(eng, path, &model));
    unlink(path);
    free(w);
    if (!model) return CHECK_DONE("test_csr");
    weight = malloc(nf * sizeof *weight);
    for (uint64_t i = 0; i < nf; i++) weight[i] = wisp_model_weight(model, i);
    bias = wisp_model_bias(model);
    CHECK_OK(wisp_session_new(eng, model, "cpu", &sessions[nsessions++]));
    if (wisp_engine_gpu_count(eng) > 0) CHECK_OK(wisp_session_new(eng, model, "gpu", &sessions[nsessions++]));
    printf("test_csr: %llu features, sessions on %s%s\n", (unsigned long long)nf, wisp_session_device(sessions[0]),
           nsessions > 1 ? " and gpu" : "");

    refusals();
    strict_faults();
    every_position();
    random_cases();
    broken_offsets();
    wide_rows();
    add_csr();

    for (int i = 0; i < nsessions; i++) wisp_session_free(sessions[i]);
    wisp_model_free(model);
    free(weight);
    wisp_engine_free(eng);
    return CHECK_DONE("test_csr");
}
