/* batch_csr.c — CSR arrays as a binding holds them, checked once into a batch (wisp_batch_from_csr), and CSR tensors appended row by row (wisp_batch_add_csr). */
/*
 * Design (read with section 4 of wisp.h and struct wisp_batch in batch/batch.h).
 *
 * One entry for every binding (Python, Java, Spark, the service's v2 tensors): the arrays
 * with their lengths and element types in, a batch out, every rule held here once. Three
 * passes at most, each over one array, none of them per element with a branch:
 *
 *   1. indptr: one loop that folds "monotone" and "no row wider than WISP_MAX_ROW_FEATURES"
 *      into one flag; only when the flag is up (or STRICT asks why) are the rows looked at
 *      one by one, to name the fault (STRICT: a call failure) or to list the rows it hits
 *      (a range that is not ordered inside [0, nnz], a row too wide: bad rows, left empty).
 *   2. conversion, only of the arrays that are not the engine's layout already (indptr
 *      int32/uint32 from 0, ids int32/uint32, values float32, each naturally aligned): into
 *      one block that trails the batch object (freed with it), indptr rebased to 0, ids to
 *      uint32 (>= 2^32 and negative ones as WISP_ID_NONE), float64 values rounded to float32.
 *      An array that is the layout already is used in place (the batch points into it).
 *   3. bad entries: one pass over the rows' ids and float32 values, 16 at a time without a
 *      branch (the sign bits of signed ids OR-ed together, the float32 exponent test of
 *      batch.c's first_nonfinite), and only a block that holds one is looked at entry by
 *      entry. Its row (a binary search of indptr) is listed bad with the first bad entry's
 *      words, and the scan goes on at the row's end. A negative int32 id is caught here
 *      even though its uint32 reading would only be out of range.
 *
 * The batch is a wrapped one (b->wrapped: it cannot grow; wisp_batch_clear leaves it as
 * it is). Rows with a bad entry keep their features (every device answers a listed row
 * NaN: session.c); rows with a bad range or too many features have none. When no row has
 * a range or width fault the rows are one run of positions [indptr[0], indptr[rows]) and
 * each array is taken in place or converted as a whole; otherwise (non-strict callers'
 * broken indptr) every array is rebuilt row by row, bad rows empty.
 */
#include "batch/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char FN[] = "wisp_batch_from_csr";

enum { BLOCK = 16 };

/* ---- typed reads (the type a constant in every caller, so each loop is made for one type) ---- */

static inline size_t esize(int t)
{
    return t == WISP_CSR_INT64 || t == WISP_CSR_UINT64 || t == WISP_CSR_FLOAT64 ? 8 : 4;
}

static inline __attribute__((always_inline)) int64_t ptr_at(const void *p, const int t, size_t i)
{
    if (t == WISP_CSR_INT64) { int64_t v; memcpy(&v, (const char *)p + 8 * i, 8); return v; }
    if (t == WISP_CSR_UINT32) { uint32_t v; memcpy(&v, (const char *)p + 4 * i, 4); return v; }
    int32_t v;
    memcpy(&v, (const char *)p + 4 * i, 4);
    return v;
}

/* id k as int64 for a message (a uint64 id beyond INT64_MAX reads negative: its sign is not looked at) */
static inline int64_t id_at(const void *p, int t, size_t k)
{
    switch (t) {
    case WISP_CSR_INT32:  { int32_t v;  memcpy(&v, (const char *)p + 4 * k, 4); return v; }
    case WISP_CSR_UINT32: { uint32_t v; memcpy(&v, (const char *)p + 4 * k, 4); return v; }
    default:              { int64_t v;  memcpy(&v, (const char *)p + 8 * k, 8); return v; }
    }
}

static inline int signed_ids(int t) { return t == WISP_CSR_INT32 || t == WISP_CSR_INT64; }

static int aligned(const void *p, int t) { return ((uintptr_t)p & (esize(t) - 1)) == 0; }

/* ---- pass 1: indptr ------------------------------------------------------------------------ */

/* 1 when every row is a range a <= z of at most WISP_MAX_ROW_FEATURES (nothing said of
 * indptr[0] and indptr[rows]): one loop, no branch per row. */
static inline __attribute__((always_inline)) int ptr_all_ok_t(const void *p, const int t, size_t rows)
{
    uint64_t bad = 0;
    int64_t a = ptr_at(p, t, 0);
    for (size_t r = 0; r < rows; r++) {
        const int64_t z = ptr_at(p, t, r + 1);
        bad |= (uint64_t)(z < a) | (uint64_t)((uint64_t)z - (uint64_t)a > WISP_MAX_ROW_FEATURES);
        a = z;
    }
    return bad == 0;
}

static int ptr_all_ok(const void *p, int t, size_t rows)
{
    switch (t) {
    case WISP_CSR_INT32:  return ptr_all_ok_t(p, WISP_CSR_INT32, rows);
    case WISP_CSR_UINT32: return ptr_all_ok_t(p, WISP_CSR_UINT32, rows);
    default:              return ptr_all_ok_t(p, WISP_CSR_INT64, rows);
    }
}

/* Row r's fault, 0 for none: 1 its range is not ordered inside [0, nnz], 2 it is wider
 * than WISP_MAX_ROW_FEATURES. */
static int row_fault(const void *p, int t, size_t r, size_t nnz)
{
    const int64_t a = ptr_at(p, t, r), z = ptr_at(p, t, r + 1);
    if (a < 0 || z < a || (uint64_t)z > nnz) return 1;
    return (uint64_t)(z - a) > WISP_MAX_ROW_FEATURES ? 2 : 0;
}

static void fault_msg(char *buf, size_t cap, int why, const void *p, int t, size_t r, size_t nnz)
{
    const long long a = (long long)ptr_at(p, t, r), z = (long long)ptr_at(p, t, r + 1);
    if (why == 1)
        snprintf(buf, cap, "indptr[%zu] .. indptr[%zu] = %lld .. %lld is not a range inside [0, %zu] (the ids' length)",
                 r, r + 1, a, z, nnz);
    else
        snprintf(buf, cap, "%lld features, more than WISP_MAX_ROW_FEATURES (%u)", z - a, WISP_MAX_ROW_FEATURES);
}

/* STRICT (scipy's rules): indptr[0] == 0, never decreasing, indptr[rows] == nnz; else the call fails. */
static int strict_check(const void *p, int t, size_t rows, size_t nnz, int all_ok)
{
    const int64_t first = ptr_at(p, t, 0);
    if (first != 0)
        return wisp__fail(WISP_EINVAL, "%s: indptr[0] = %lld%s, must be 0", FN, (long long)first,
                          first < 0 ? " is negative" : "");
    if (!all_ok)
        for (size_t r = 0; r < rows; r++) {
            const int64_t a = ptr_at(p, t, r), z = ptr_at(p, t, r + 1);
            if (z < a)
                return wisp__fail(WISP_EINVAL, "%s: indptr decreases at row %zu (indptr[%zu] = %lld < indptr[%zu] = %lld)",
                                  FN, r, r + 1, (long long)z, r, (long long)a);
        }
    const int64_t last = ptr_at(p, t, rows);
    if ((uint64_t)last != nnz)
        return wisp__fail(WISP_EINVAL, "%s: indptr[-1] = %lld but indices has %zu entries", FN, (long long)last, nnz);
    return WISP_OK;
}

/* ---- pass 2: conversions ------------------------------------------------------------------- */

static void convert_ids(const void *src, int t, size_t n, uint32_t *dst)
{
    if (t == WISP_CSR_INT32 || t == WISP_CSR_UINT32) {
        memcpy(dst, src, n * 4);                       /* an int32 id's bits: a negative one is listed bad */
        return;
    }
    const char *s = src;
    for (size_t k = 0; k < n; k++) {
        uint64_t v;
        memcpy(&v, s + 8 * k, 8);
        dst[k] = v > UINT32_MAX ? WISP_ID_NONE : (uint32_t)v;   /* negative int64 ids too: listed bad */
    }
}

static void convert_vals(const void *src, int t, size_t n, float *dst)
{
    if (t == WISP_CSR_FLOAT32) {
        memcpy(dst, src, n * 4);
        return;
    }
    const char *s = src;
    for (size_t k = 0; k < n; k++) {
        double d;
        memcpy(&d, s + 8 * k, 8);
        dst[k] = (float)d;                             /* 1e39 rounds to inf: the row is listed bad */
    }
}

static inline __attribute__((always_inline)) void rebase_t(const void *p, const int t, size_t rows, int64_t base,
                                                           uint32_t *dst)
{
    for (size_t r = 0; r <= rows; r++) dst[r] = (uint32_t)(ptr_at(p, t, r) - base);
}

static void rebase(const void *p, int t, size_t rows, int64_t base, uint32_t *dst)
{
    switch (t) {
    case WISP_CSR_INT32:  rebase_t(p, WISP_CSR_INT32, rows, base, dst); break;
    case WISP_CSR_UINT32: rebase_t(p, WISP_CSR_UINT32, rows, base, dst); break;
    default:              rebase_t(p, WISP_CSR_INT64, rows, base, dst); break;
    }
}

/* ---- pass 3: bad entries ------------------------------------------------------------------- */

static inline __attribute__((always_inline)) int entry_bad(const void *ids, const int t, const float *vals, size_t k)
{
    int bad = 0;
    if (t == WISP_CSR_INT32) bad |= id_at(ids, WISP_CSR_INT32, k) < 0;
    if (t == WISP_CSR_INT64) bad |= id_at(ids, WISP_CSR_INT64, k) < 0;
    if (vals) {
        uint32_t u;
        memcpy(&u, vals + k, 4);
        bad |= (u & 0x7fffffffu) >= 0x7f800000u;       /* inf or NaN */
    }
    return bad;
}

/* The first k in [k0, k1) whose id is negative (signed types) or whose value is not a finite
 * float32, or k1. ids and vals are indexed alike (vals NULL: binary). 16 at a time, no branch
 * in a block; the compiler vectorizes the blocks. */
static inline __attribute__((always_inline)) size_t first_bad_t(const void *ids, const int t, const float *vals,
                                                                 const int has_vals, size_t k0, size_t k1)
{
    size_t k = k0;
    for (; k + BLOCK <= k1; k += BLOCK) {
        uint32_t any = 0;
        if (t == WISP_CSR_INT32) {
            const char *s = (const char *)ids + 4 * k;
            for (int i = 0; i < BLOCK; i++) { uint32_t u; memcpy(&u, s + 4 * i, 4); any |= u >> 31; }
        } else if (t == WISP_CSR_INT64) {
            const char *s = (const char *)ids + 8 * k;
            for (int i = 0; i < BLOCK; i++) { uint64_t u; memcpy(&u, s + 8 * i, 8); any |= (uint32_t)(u >> 63); }
        }
        if (has_vals)
            for (int i = 0; i < BLOCK; i++) {
                uint32_t u;
                memcpy(&u, vals + k + i, 4);
                any |= (uint32_t)((u & 0x7fffffffu) >= 0x7f800000u);
            }
        if (any) break;
    }
    for (; k < k1; k++)
        if (entry_bad(ids, t, has_vals ? vals : NULL, k)) return k;
    return k1;
}

static size_t first_bad(const void *ids, int t, const float *vals, size_t k0, size_t k1)
{
    const int signed_t = signed_ids(t) ? t : 0;
    if (vals) {
        switch (signed_t) {
        case WISP_CSR_INT32: return first_bad_t(ids, WISP_CSR_INT32, vals, 1, k0, k1);
        case WISP_CSR_INT64: return first_bad_t(ids, WISP_CSR_INT64, vals, 1, k0, k1);
        default:             return first_bad_t(ids, 0, vals, 1, k0, k1);
        }
    }
    switch (signed_t) {
    case WISP_CSR_INT32: return first_bad_t(ids, WISP_CSR_INT32, NULL, 0, k0, k1);
    case WISP_CSR_INT64: return first_bad_t(ids, WISP_CSR_INT64, NULL, 0, k0, k1);
    default:             return k1;                    /* unsigned ids, no values: nothing can be bad */
    }
}

/* The message of the bad entry k (feature #j of its row). */
static void entry_msg(char *buf, size_t cap, const void *ids, int t, const float *vals, size_t k, size_t j)
{
    const int64_t id = id_at(ids, t, k);
    if (signed_ids(t) && id < 0)
        snprintf(buf, cap, "feature #%zu: a negative feature index (%lld)", j + 1, (long long)id);
    else
        wisp__batch_nonfinite_msg(buf, cap, j, (uint64_t)id, vals[k]);
}

/* The row r holding position k of rows with monotone offsets off(r) = ptr_at(p, t, r) - base:
 * off(r) <= k < off(r + 1), found from r0 on. */
static size_t row_of(const void *p, int t, int64_t base, size_t r0, size_t rows, size_t k)
{
    size_t lo = r0, hi = rows;                         /* off(lo) <= k < off(hi) */
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)(ptr_at(p, t, mid) - base) <= k) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* ---- the batch -------------------------------------------------------------------------------- */

/* A wrapped batch with `extra` bytes for its copies trailing the object, 64-aligned (*copies). */
static wisp_batch *new_batch(wisp_engine *eng, size_t extra, char **copies)
{
    const size_t head = (sizeof(wisp_batch) + 63) & ~(size_t)63;
    if (extra > SIZE_MAX - head - 64) return NULL;
    char *m = wisp__malloc(head + extra + 64);
    if (!m) return NULL;
    wisp_batch *b = (wisp_batch *)m;
    memset(b, 0, sizeof *b);
    b->eng = eng;
    b->wrapped = true;
    *copies = (char *)(((uintptr_t)m + head + 63) & ~(uintptr_t)63);
    return b;
}

static void drop_batch(wisp_batch *b)
{
    wisp__free(b->bad);
    wisp__free(b->msgs);
    wisp__free(b);
}

static void finish(wisp_batch *b, size_t rows, size_t nnz, int valued)
{
    b->rows = rows;
    b->nnz = nnz;
    b->nvals = valued ? nnz : 0;
    b->value_mode = b->nvals ? WISP_VALUES_ALL : WISP_VALUES_NONE;
}

/* Every row a good range: the rows are positions [p0, p1) of ids and values, one run. */
static int from_run(wisp_engine *eng, size_t rows, const void *indptr, int it, const void *ids, int dt,
                    const void *values, int vt, wisp_batch **out)
{
    const int64_t p0 = ptr_at(indptr, it, 0);
    const size_t n = (size_t)(ptr_at(indptr, it, rows) - p0);
    const int ptr_here = it != WISP_CSR_INT64 && p0 == 0 && aligned(indptr, it);
    const int ids_here = !ids || (esize(dt) == 4 && aligned(ids, dt));
    const int vals_here = !values || (vt == WISP_CSR_FLOAT32 && aligned(values, vt));
    const size_t pbytes = ptr_here ? 0 : ((rows + 1) * 4 + 63) & ~(size_t)63;
    const size_t ibytes = ids_here ? 0 : (n * 4 + 63) & ~(size_t)63;
    const size_t vbytes = vals_here ? 0 : n * 4;
    char *c;
    wisp_batch *b = new_batch(eng, pbytes + ibytes + vbytes, &c);
    if (!b) return wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu rows and %zu features", FN, rows, n);
    const char *id0 = ids ? (const char *)ids + esize(dt) * (size_t)p0 : NULL;
    const char *v0 = values ? (const char *)values + esize(vt) * (size_t)p0 : NULL;
    if (ptr_here) b->indptr = (uint32_t *)indptr;
    else rebase(indptr, it, rows, p0, b->indptr = (uint32_t *)c);
    if (ids_here) b->ids = (uint32_t *)id0;
    else convert_ids(id0, dt, n, b->ids = (uint32_t *)(c + pbytes));
    if (vals_here) b->vals = (float *)v0;
    else convert_vals(v0, vt, n, b->vals = (float *)(c + pbytes + ibytes));
    finish(b, rows, n, values != NULL);
    /* bad entries: the first of each row, the scan going on at that row's end */
    const float *vals = values ? b->vals : NULL;
    size_t k = 0, r = 0;
    while ((k = first_bad(id0, dt, vals, k, n)) < n) {
        r = row_of(indptr, it, p0, r, rows, k);
        char msg[192];
        entry_msg(msg, sizeof msg, id0, dt, vals, k, k - b->indptr[r]);
        const int st = wisp__batch_list_bad(b, r, 0, msg, FN);
        if (st != WISP_OK) { drop_batch(b); return st; }
        k = b->indptr[r + 1];
    }
    *out = b;
    return WISP_OK;
}

/* Some rows are bad ranges or too wide: every array rebuilt row by row, those rows empty. */
static int from_rows(wisp_engine *eng, size_t rows, const void *indptr, int it, const void *ids, int dt, size_t nnz,
                     const void *values, int vt, wisp_batch **out)
{
    uint64_t total = 0;
    for (size_t r = 0; r < rows; r++)
        if (!row_fault(indptr, it, r, nnz)) total += (uint64_t)(ptr_at(indptr, it, r + 1) - ptr_at(indptr, it, r));
    if (total > WISP_MAX_NNZ)
        return wisp__fail(WISP_ELIMIT, "%s: the rows hold %llu features in all (their ranges overlap), more than "
                          "WISP_MAX_NNZ (%u)", FN, (unsigned long long)total, WISP_MAX_NNZ);
    const size_t pbytes = ((rows + 1) * 4 + 63) & ~(size_t)63, ibytes = ((size_t)total * 4 + 63) & ~(size_t)63;
    char *c;
    wisp_batch *b = new_batch(eng, pbytes + ibytes + (values ? (size_t)total * 4 : 0), &c);
    if (!b) return wisp__fail(WISP_ENOMEM, "%s: out of memory for %zu rows and %llu features", FN, rows,
                              (unsigned long long)total);
    uint32_t *rp = (uint32_t *)c, *oi = (uint32_t *)(c + pbytes);
    float *ov = values ? (float *)(c + pbytes + ibytes) : NULL;
    b->indptr = rp;
    b->ids = oi;
    b->vals = ov;
    finish(b, rows, (size_t)total, values != NULL);
    b->rows = 0;                                       /* grows with the rows below (bad rows listed in order) */
    size_t o = 0;
    rp[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        char msg[192];
        const int why = row_fault(indptr, it, r, nnz);
        int bad = why != 0;
        if (why) {
            fault_msg(msg, sizeof msg, why, indptr, it, r, nnz);
        } else {
            const size_t a = (size_t)ptr_at(indptr, it, r), n = (size_t)ptr_at(indptr, it, r + 1) - a;
            const char *ia = n ? (const char *)ids + esize(dt) * a : NULL;
            if (n) convert_ids(ia, dt, n, oi + o);
            if (n && values) convert_vals((const char *)values + esize(vt) * a, vt, n, ov + o);
            const size_t k = n ? first_bad(ia, dt, values ? ov + o : NULL, 0, n) : 0;
            if (k < n) {
                bad = 1;
                entry_msg(msg, sizeof msg, ia, dt, values ? ov + o : NULL, k, k);
            }
            o += n;
        }
        rp[r + 1] = (uint32_t)o;
        b->rows = r + 1;
        if (bad) {
            const int st = wisp__batch_list_bad(b, r, 0, msg, FN);
            if (st != WISP_OK) { drop_batch(b); return st; }
        }
    }
    *out = b;
    return WISP_OK;
}

int wisp_batch_from_csr(wisp_engine *eng, size_t rows, const void *indptr, int indptr_type, const void *ids,
                        int id_type, size_t nnz, const void *values, int value_type, unsigned flags, wisp_batch **out)
{
    static const uint32_t zero_ptr[1] = { 0 };
    if (out) *out = NULL;
    if (!eng || !out) return wisp__fail(WISP_EINVAL, "%s: %s is NULL", FN, !eng ? "engine" : "out");
    if (indptr_type != WISP_CSR_INT32 && indptr_type != WISP_CSR_INT64 && indptr_type != WISP_CSR_UINT32)
        return wisp__fail(WISP_EINVAL, "%s: indptr_type %d is not WISP_CSR_INT32, _INT64 or _UINT32", FN, indptr_type);
    if (id_type < WISP_CSR_INT32 || id_type > WISP_CSR_UINT64)
        return wisp__fail(WISP_EINVAL, "%s: id_type %d is not WISP_CSR_INT32, _INT64, _UINT32 or _UINT64", FN, id_type);
    if (values && value_type != WISP_CSR_FLOAT32 && value_type != WISP_CSR_FLOAT64)
        return wisp__fail(WISP_EINVAL, "%s: value_type %d is not WISP_CSR_FLOAT32 or _FLOAT64", FN, value_type);
    if (flags & ~(unsigned)WISP_CSR_STRICT) return wisp__fail(WISP_EINVAL, "%s: unknown flags 0x%x", FN, flags);
    if (rows > WISP_MAX_ROWS)
        return wisp__fail(WISP_ELIMIT, "%s: %zu rows, more than WISP_MAX_ROWS (%u)", FN, rows, WISP_MAX_ROWS);
    if (nnz > WISP_MAX_NNZ)
        return wisp__fail(WISP_ELIMIT, "%s: %zu features, more than WISP_MAX_NNZ (%u)", FN, nnz, WISP_MAX_NNZ);
    if (!indptr) {
        if (rows) return wisp__fail(WISP_EINVAL, "%s: indptr is NULL for %zu rows", FN, rows);
        indptr = zero_ptr;
        indptr_type = WISP_CSR_UINT32;
    }
    if (!ids && nnz) return wisp__fail(WISP_EINVAL, "%s: ids is NULL for %zu features", FN, nnz);
    if (!ids) values = NULL;                           /* no features: nothing to read */
    const int all_ok = ptr_all_ok(indptr, indptr_type, rows);
    int st;
    if ((flags & WISP_CSR_STRICT) && (st = strict_check(indptr, indptr_type, rows, nnz, all_ok)) != WISP_OK) return st;
    const int64_t first = ptr_at(indptr, indptr_type, 0), last = ptr_at(indptr, indptr_type, rows);
    if (all_ok && first >= 0 && (uint64_t)last <= nnz)
        st = from_run(eng, rows, indptr, indptr_type, ids, id_type, values, value_type, out);
    else
        st = from_rows(eng, rows, indptr, indptr_type, ids, id_type, nnz, values, value_type, out);
    if (st == WISP_OK) wisp__engine_retain(eng);
    return st;
}

/* ---- CSR tensors appended row by row (superseded by wisp_batch_from_csr) ------------------------ */

static inline int64_t load_int(const void *base, int bits, size_t i)
{
    if (bits == 64) { int64_t v; memcpy(&v, (const char *)base + 8 * i, 8); return v; }
    int32_t v;
    memcpy(&v, (const char *)base + 4 * i, 4);
    return v;
}

int wisp_batch_add_csr(wisp_batch *b, const void *indptr, int indptr_bits, size_t r0, size_t r1, const void *ids,
                       int id_bits, const float *vals, size_t *added, int64_t *bad_at)
{
    if (added) *added = 0;
    if (bad_at) *bad_at = -1;
    if (!b || !indptr || !added || r1 < r0 || (indptr_bits != 32 && indptr_bits != 64) || (id_bits != 32 && id_bits != 64))
        return WISP_EINVAL;
    uint64_t stackbuf[256], *buf = stackbuf;
    size_t cap = 256;
    int rc = WISP_OK;
    int64_t a = load_int(indptr, indptr_bits, r0);
    size_t r;
    for (r = r0; r < r1; r++) {
        int64_t z = load_int(indptr, indptr_bits, r + 1);
        if (a < 0 || z < a || (z > a && !ids)) { rc = WISP_EINVAL; break; }
        size_t len = (size_t)(z - a);
        if (len > cap) {
            uint64_t *nb = malloc(len * sizeof *nb);
            if (!nb) { rc = WISP_ENOMEM; break; }
            if (buf != stackbuf) free(buf);
            buf = nb;
            cap = len;
        }
        size_t k;
        for (k = 0; k < len; k++) {
            int64_t id = load_int(ids, id_bits, (size_t)a + k);
            if (id < 0) break;
            buf[k] = (uint64_t)id;
        }
        if (k < len) {                           /* a negative id: the caller makes this row bad */
            if (bad_at) *bad_at = a + (int64_t)k;
            break;
        }
        rc = wisp_batch_add_row(b, buf, vals ? vals + a : NULL, len);
        if (rc != WISP_OK) break;
        a = z;
    }
    if (buf != stackbuf) free(buf);
    *added = r - r0;
    return rc;
}
