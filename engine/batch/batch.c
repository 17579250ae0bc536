/* batch.c — CSR batches: builders, wrapping caller arrays, value modes, bad rows. */
/*
 * Design (read with struct wisp_batch in batch/batch.h and section 4 of wisp.h).
 *
 * Arrays. An owned batch keeps its four arrays in ONE block of host memory
 * from wisp__host_alloc_batch (pinned while the GPU backend is live, unless the engine says plain), the arena,
 * laid out as regions at 256-byte aligned offsets, in this order:
 *     val_ptr (row_cap + 1) | indptr (row_cap + 1) | vals (val_cap) | ids (id_cap)
 * (b->off_vp, off_rp, off_vals, off_ids; b->arena_bytes in all). So the
 * CUDA backend checks one pointer for pinned memory, and ships the offsets
 * and values, which sit next to each other, with one copy when the gaps
 * between the used parts are small (the device buffer mirrors the same
 * offsets and the kernel finds each array by its offset), then the ids in
 * chunks (engine/cuda/cuda_score.c). Growth of any region lays the whole arena out
 * anew (allocate, copy the used parts, free), geometric (x2) per region, so
 * a failed growth leaves the batch as it was. The val_ptr region exists
 * from the start, but b->val_ptr stays NULL until the first valued row
 * (materialising it never allocates). indptr exists from wisp_batch_new
 * on, so indptr[0] == 0 is readable even for an empty batch; ids and vals
 * are NULL while their capacity is 0. The bad-row list and its messages
 * are plain wisp__malloc memory.
 *
 * Value modes. value_mode is a function of the counts, always:
 *     nvals == 0            WISP_VALUES_NONE   every feature binary
 *     nvals == nnz (> 0)    WISP_VALUES_ALL    vals[k] belongs to ids[k]
 *     otherwise             WISP_VALUES_MIXED  val_ptr says which are valued
 * (a row's valued features come first, so nvals == nnz means every row is
 * fully valued, i.e. val_ptr == indptr element by element).
 * Once an owned batch has val_ptr it keeps it up to date for every row,
 * including binary rows and rows after wisp_batch_clear; when the first
 * valued row arrives after binary rows, val_ptr is materialised with
 * zero-length value runs for the earlier rows. So, inside the library:
 *   NONE:  ignore val_ptr and vals (either may be NULL or stale);
 *   ALL:   vals is valid; b->val_ptr may be NULL (wrapped) or equal indptr;
 *   MIXED: val_ptr and vals are both valid.
 * The public accessors follow wisp.h: wisp_batch_vals() is NULL in NONE,
 * wisp_batch_val_ptr() is NULL except in MIXED. A wrapped batch gets its mode
 * from the same rule (vals without val_ptr means nvals = nnz).
 *
 * Ids. Input ids are uint64; an id >= 2^32 is stored as WISP_ID_NONE.
 *
 * Values: ONE RULE for every input path (wisp.h, batches). A value must be
 * a finite float32: NaN, +-inf, or a decimal/double whose float32 rounding
 * overflows (1e39, 3.4028236e38; FLT_MAX = 3.4028235e38 is fine, subnormals
 * and values that underflow to 0 are kept: they are representable) make
 * THAT row bad, with a message naming the feature and the value; the other
 * rows are unaffected. It is enforced at the lowest layer each path shares:
 * wisp_batch_add_row/_mixed here (an empty bad row in place of the row, the
 * call returns WISP_OK: a bad value is data), wisp_batch_wrap here (the
 * caller's vals are scanned once when wrapped, no copy; rows with a
 * non-finite value are listed as bad rows, which keep their features in a
 * wrapped batch and are answered NaN by every device, session.c), the
 * text parsers (libsvm.c, vw.c: the decimal itself is checked, so the
 * message quotes the text), and the Lua layer (init.lua) above them. The
 * feature-column path (raw inputs, csv.c, jsonl.c, textnum.c) reads numbers as
 * TensorFlow does (1e39 -> inf) and applies the rule where a value meets
 * a weight: a numeric column's non-finite value makes the row bad
 * (jsonl.c's opening comment lists the JSON decisions).
 *
 * Failure. Every append checks limits and reserves all memory before it
 * writes anything, so a failed append leaves the batch as it was (a grown
 * arena may have moved, with the same contents).
 *
 * Bad rows are kept in increasing row order (wisp__batch_mark_bad refuses
 * anything else); each is a row with no features, except in a wrapped
 * batch (its rows are the caller's: see Values).
 */
#include "batch/batch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MIN_ROW_CAP 256
#define MIN_ID_CAP  4096
#define ARENA_ALIGN 256

/* ---- the arena -------------------------------------------------------------- */

static size_t grown_cap(size_t cap, size_t need, size_t min_cap, size_t max_cap)
{
    size_t nc = cap ? cap : min_cap;
    while (nc < need) nc = nc > SIZE_MAX / 2 ? need : nc * 2;
    if (nc > max_cap) nc = max_cap > need ? max_cap : need;
    return nc;
}

static size_t arena_up(size_t x) { return (x + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

/* Lay the arena out anew for these capacities (each >= what is used),
 * keeping the used parts. On failure the batch is unchanged. */
static int relayout(wisp_batch *b, size_t rc, size_t ic, size_t vc)
{
    if (rc > WISP_MAX_ROWS || ic > WISP_MAX_NNZ || vc > WISP_MAX_NNZ)
        return wisp__fail(WISP_ELIMIT, "batch: capacities %zu rows, %zu ids, %zu values exceed the limits", rc, ic, vc);
    size_t o = 0, vp_off, rp_off, vals_off, ids_off;
    vp_off = o;   o = arena_up(o + (rc + 1) * sizeof(uint32_t));
    rp_off = o;   o = arena_up(o + (rc + 1) * sizeof(uint32_t));
    vals_off = o; o = arena_up(o + vc * sizeof(float));
    ids_off = o;  o = arena_up(o + ic * sizeof(uint32_t));
    char *p = wisp__host_alloc_batch(b->eng, o);
    if (!p) return wisp__fail(WISP_ENOMEM, "batch: cannot allocate %zu bytes of batch memory (%zu rows, %zu feature ids, %zu feature values)",
                             o, rc, ic, vc);
    uint32_t *rp = (uint32_t *)(p + rp_off), *vp = (uint32_t *)(p + vp_off), *ids = (uint32_t *)(p + ids_off);
    float *vals = (float *)(p + vals_off);
    if (b->indptr) memcpy(rp, b->indptr, (b->rows + 1) * sizeof *rp);
    else rp[0] = 0;
    if (b->val_ptr) memcpy(vp, b->val_ptr, (b->rows + 1) * sizeof *vp);
    if (b->ids && b->nnz) memcpy(ids, b->ids, b->nnz * sizeof *ids);
    if (b->vals && b->nvals) memcpy(vals, b->vals, b->nvals * sizeof *vals);
    wisp__host_free(b->eng, b->arena);
    b->arena = p;
    b->arena_bytes = o;
    b->off_vp = vp_off;
    b->off_rp = rp_off;
    b->off_vals = vals_off;
    b->off_ids = ids_off;
    b->indptr = rp;
    b->val_ptr = b->val_ptr ? vp : NULL;
    b->ids = ic ? ids : NULL;
    b->vals = vc ? vals : NULL;
    b->row_cap = rc;
    b->id_cap = ic;
    b->val_cap = vc;
    return WISP_OK;
}

/* Room for rows_need rows, ids_need ids and vals_need values in all. */
static int reserve(wisp_batch *b, size_t rows_need, size_t ids_need, size_t vals_need)
{
    if (b->arena && rows_need <= b->row_cap && ids_need <= b->id_cap && vals_need <= b->val_cap) return WISP_OK;
    size_t rc = b->arena && rows_need <= b->row_cap ? b->row_cap : grown_cap(b->row_cap, rows_need, MIN_ROW_CAP, WISP_MAX_ROWS);
    size_t ic = ids_need <= b->id_cap ? b->id_cap : grown_cap(b->id_cap, ids_need, MIN_ID_CAP, WISP_MAX_NNZ);
    size_t vc = vals_need <= b->val_cap ? b->val_cap : grown_cap(b->val_cap, vals_need, MIN_ID_CAP, WISP_MAX_NNZ);
    return relayout(b, rc, ic, vc);
}

/* Room for one more row, nid more ids and nval more values. */
static int reserve_row(wisp_batch *b, size_t nid, size_t nval)
{
    return reserve(b, b->rows + 1, b->nnz + nid, b->nvals + nval);
}

/* Materialise val_ptr in its region: every row so far has no values. Never fails. */
static int ensure_val_ptr(wisp_batch *b)
{
    if (b->val_ptr) return WISP_OK;
    uint32_t *vp = (uint32_t *)((char *)b->arena + b->off_vp);
    memset(vp, 0, (b->rows + 1) * sizeof *vp);
    b->val_ptr = vp;
    return WISP_OK;
}

static void update_mode(wisp_batch *b)
{
    b->value_mode = b->nvals == 0 ? WISP_VALUES_NONE
                  : b->nvals == b->nnz ? WISP_VALUES_ALL : WISP_VALUES_MIXED;
}

/* Commit the row whose nv valued ids/values sit at ids[nnz..], vals[nvals..]
 * and whose nb binary ids sit at ids[nnz+nv..]. Capacity is reserved. */
static void commit_row(wisp_batch *b, size_t nv, size_t nb)
{
    b->nnz += nv + nb;
    b->nvals += nv;
    b->rows++;
    b->indptr[b->rows] = (uint32_t)b->nnz;
    if (b->val_ptr) b->val_ptr[b->rows] = (uint32_t)b->nvals;
    update_mode(b);
}

static inline uint32_t id32(uint64_t id)
{
    return id > UINT32_MAX ? WISP_ID_NONE : (uint32_t)id;
}

/* ---- lifetime --------------------------------------------------------------- */

int wisp_batch_new(wisp_engine *eng, wisp_batch **out)
{
    if (out) *out = NULL;
    if (!eng || !out) return wisp__fail(WISP_EINVAL, "wisp_batch_new: %s is NULL", !eng ? "engine" : "out");
    wisp_batch *b = wisp__calloc(1, sizeof *b);
    if (!b) return wisp__fail(WISP_ENOMEM, "wisp_batch_new: out of memory");
    b->eng = eng;
    if (reserve(b, MIN_ROW_CAP, 0, 0) != WISP_OK) {
        wisp__free(b);
        return wisp__fail_context(WISP_ENOMEM, "wisp_batch_new");
    }
    b->indptr[0] = 0;
    wisp__engine_retain(eng);
    *out = b;
    return WISP_OK;
}

void wisp_batch_free(wisp_batch *b)
{
    if (!b) return;
    wisp_engine *eng = b->eng;
    if (!b->wrapped) wisp__host_free(eng, b->arena);
    wisp__free(b->bad);
    wisp__free(b->msgs);
    wisp__free(b->scratch);
    wisp__free(b);
    wisp_engine_free(eng);
}

void wisp_batch_clear(wisp_batch *b)
{
    if (!b || b->wrapped) return;
    b->rows = b->nnz = b->nvals = 0;
    b->indptr[0] = 0;
    if (b->val_ptr) b->val_ptr[0] = 0;
    b->value_mode = WISP_VALUES_NONE;
    b->nbad = 0;
    b->msgs_len = 0;
}

/* ---- builders --------------------------------------------------------------- */

static int check_append(wisp_batch *b, size_t n, const char *fn)
{
    if (!b) return wisp__fail(WISP_EINVAL, "%s: batch is NULL", fn);
    if (b->wrapped) return wisp__fail(WISP_ESTATE, "%s: the batch wraps caller arrays and cannot grow", fn);
    if (n > WISP_MAX_ROW_FEATURES)
        return wisp__fail(WISP_ELIMIT, "%s: row %zu has %zu features, more than WISP_MAX_ROW_FEATURES (%u)",
                         fn, b->rows, n, WISP_MAX_ROW_FEATURES);
    if (b->rows >= WISP_MAX_ROWS)
        return wisp__fail(WISP_ELIMIT, "%s: the batch already holds WISP_MAX_ROWS (%u) rows", fn, WISP_MAX_ROWS);
    if (n > WISP_MAX_NNZ - b->nnz)
        return wisp__fail(WISP_ELIMIT, "%s: row %zu would bring the batch to %zu features, more than WISP_MAX_NNZ (%u)",
                         fn, b->rows, b->nnz + n, WISP_MAX_NNZ);
    return WISP_OK;
}

static int push_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg, const char *fn);

/* The position of the first value of v[0..n) that is not a finite float32, or n.
 * 16 values at a time without a branch (exponent bits all ones: inf or NaN; the compiler
 * vectorizes the block at -O2), then one at a time from the block that holds one: a
 * one-at-a-time isfinite loop was 90% of wisp_batch_wrap on 10 rows of 39 values
 * (perf, the Python package's 10-row call, issue 20). */
static size_t first_nonfinite(const float *v, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint32_t any = 0;
        for (int k = 0; k < 16; k++) {
            uint32_t u;
            memcpy(&u, v + i + k, sizeof u);
            any |= (uint32_t)((u & 0x7fffffffu) >= 0x7f800000u);
        }
        if (any) break;
    }
    for (; i < n; i++)
        if (!isfinite(v[i])) return i;
    return n;
}

/* "feature #k (id N): value nan is not a finite float32" (k 1-based, in the row) */
void wisp__batch_nonfinite_msg(char *buf, size_t cap, size_t k, uint64_t id, float v)
{
    snprintf(buf, cap, "feature #%zu (id %llu): value %g is not a finite float32", k + 1, (unsigned long long)id,
             (double)v);
}

static int add_row(wisp_batch *b, const uint64_t *vids, const float *vals, size_t nv,
                   const uint64_t *bids, size_t nb, const char *fn)
{
    if (nv > WISP_MAX_ROW_FEATURES || nb > WISP_MAX_ROW_FEATURES) {
        /* keeps nv + nb from overflowing; the message is check_append's */
        return check_append(b, WISP_MAX_ROW_FEATURES + (size_t)1, fn);
    }
    int st = check_append(b, nv + nb, fn);
    if (st != WISP_OK) return st;
    if ((nv && (!vids || !vals)) || (nb && !bids))
        return wisp__fail(WISP_EINVAL, "%s: row %zu: %s is NULL", fn, b->rows,
                         nv && !vids ? (nb ? "vids" : "ids") : nv && !vals ? "vals" : vids ? "bids" : "ids");
    const size_t bad = nv ? first_nonfinite(vals, nv) : 0;
    if (WISP_UNLIKELY(bad < nv)) {
        /* a bad value is data: the row goes in empty, as a bad row naming it */
        char msg[160];
        wisp__batch_nonfinite_msg(msg, sizeof msg, bad, vids[bad], vals[bad]);
        if ((st = reserve_row(b, 0, 0)) != WISP_OK) return wisp__fail_context(st, "%s: row %zu", fn, b->rows);
        commit_row(b, 0, 0);
        if ((st = push_bad(b, b->rows - 1, 0, msg, fn)) != WISP_OK) {
            b->rows--;                                 /* unchanged on failure */
            update_mode(b);
            return st;
        }
        return WISP_OK;
    }
    if ((st = reserve_row(b, nv + nb, nv)) != WISP_OK) return wisp__fail_context(st, "%s: row %zu", fn, b->rows);
    if (nv && (st = ensure_val_ptr(b)) != WISP_OK) return wisp__fail_context(st, "%s: row %zu", fn, b->rows);
    uint32_t *ip = b->ids ? b->ids + b->nnz : NULL;   /* NULL + 0 is undefined: ids may not exist yet */
    for (size_t i = 0; i < nv; i++) ip[i] = id32(vids[i]);
    for (size_t i = 0; i < nb; i++) ip[nv + i] = id32(bids[i]);
    if (nv) memcpy(b->vals + b->nvals, vals, nv * sizeof *vals);
    commit_row(b, nv, nb);
    return WISP_OK;
}

int wisp_batch_add_row_mixed(wisp_batch *b, const uint64_t *vids, const float *vals, size_t nv,
                             const uint64_t *bids, size_t nb)
{
    return add_row(b, vids, vals, nv, bids, nb, "wisp_batch_add_row_mixed");
}

int wisp_batch_add_row(wisp_batch *b, const uint64_t *ids, const float *vals, size_t n)
{
    if (vals) return add_row(b, ids, vals, n, NULL, 0, "wisp_batch_add_row");
    return add_row(b, NULL, NULL, 0, ids, n, "wisp_batch_add_row");
}

/* ---- wrapping caller arrays ------------------------------------------------- */

int wisp_batch_wrap(wisp_engine *eng, size_t rows, const uint32_t *indptr, const uint32_t *ids,
                    const uint32_t *val_ptr, const float *vals, wisp_batch **out)
{
    static const uint32_t zero_ptr[1] = { 0 };
    static const char fn[] = "wisp_batch_wrap";
    if (out) *out = NULL;
    if (!eng || !out) return wisp__fail(WISP_EINVAL, "%s: %s is NULL", fn, !eng ? "engine" : "out");
    if (rows > WISP_MAX_ROWS)
        return wisp__fail(WISP_ELIMIT, "%s: %zu rows, more than WISP_MAX_ROWS (%u)", fn, rows, WISP_MAX_ROWS);
    if (!indptr) {
        if (rows) return wisp__fail(WISP_EINVAL, "%s: indptr is NULL for %zu rows", fn, rows);
        indptr = zero_ptr;
    }
    if (indptr[0] != 0) return wisp__fail(WISP_EINVAL, "%s: indptr[0] is %u, must be 0", fn, indptr[0]);
    for (size_t r = 0; r < rows; r++) {
        uint32_t a = indptr[r], z = indptr[r + 1];
        if (z < a)
            return wisp__fail(WISP_EINVAL, "%s: indptr decreases at row %zu (indptr[%zu] = %u < indptr[%zu] = %u)",
                             fn, r, r + 1, z, r, a);
        if (z > WISP_MAX_NNZ)
            return wisp__fail(WISP_ELIMIT, "%s: indptr[%zu] = %u at row %zu exceeds WISP_MAX_NNZ (%u)",
                             fn, r + 1, z, r, WISP_MAX_NNZ);
        if (z - a > WISP_MAX_ROW_FEATURES)
            return wisp__fail(WISP_ELIMIT, "%s: row %zu has %u features, more than WISP_MAX_ROW_FEATURES (%u)",
                             fn, r, z - a, WISP_MAX_ROW_FEATURES);
    }
    size_t nnz = indptr[rows];
    if (nnz && !ids) return wisp__fail(WISP_EINVAL, "%s: ids is NULL for %zu features", fn, nnz);
    size_t nvals;
    if (val_ptr) {
        if (val_ptr[0] != 0) return wisp__fail(WISP_EINVAL, "%s: val_ptr[0] is %u, must be 0", fn, val_ptr[0]);
        for (size_t r = 0; r < rows; r++) {
            uint32_t a = val_ptr[r], z = val_ptr[r + 1];
            if (z < a)
                return wisp__fail(WISP_EINVAL, "%s: val_ptr decreases at row %zu (val_ptr[%zu] = %u < val_ptr[%zu] = %u)",
                                 fn, r, r + 1, z, r, a);
            if (z - a > indptr[r + 1] - indptr[r])
                return wisp__fail(WISP_EINVAL, "%s: row %zu has %u values but only %u features",
                                 fn, r, z - a, indptr[r + 1] - indptr[r]);
        }
        nvals = val_ptr[rows];
        if (nvals && !vals)
            return wisp__fail(WISP_EINVAL, "%s: val_ptr announces %zu values but vals is NULL", fn, nvals);
    } else {
        nvals = vals ? nnz : 0;
    }
    wisp_batch *b = wisp__calloc(1, sizeof *b);
    if (!b) return wisp__fail(WISP_ENOMEM, "%s: out of memory", fn);
    b->eng = eng;
    b->wrapped = true;
    b->rows = rows;
    b->nnz = nnz;
    b->nvals = nvals;
    b->indptr = (uint32_t *)indptr;
    b->ids = (uint32_t *)ids;
    b->val_ptr = (uint32_t *)val_ptr;
    b->vals = (float *)vals;
    update_mode(b);
    /* the values rule (top of file): one pass over the caller's values, no
     * copy; a row holding a non-finite value is listed bad (answered NaN). The rows'
     * values are vals[0 .. nvals) in order: the rows are looked at one by one only
     * when the pass over all of them found a value that is not finite. */
    if (b->value_mode != WISP_VALUES_NONE && first_nonfinite(vals, nvals) < nvals) {
        for (size_t r = 0; r < rows; r++) {
            const size_t a = b->value_mode == WISP_VALUES_MIXED ? val_ptr[r] : indptr[r];
            const size_t z = b->value_mode == WISP_VALUES_MIXED ? val_ptr[r + 1] : indptr[r + 1];
            const size_t k = first_nonfinite(vals + a, z - a);
            if (WISP_LIKELY(k == z - a)) continue;
            char msg[160];
            wisp__batch_nonfinite_msg(msg, sizeof msg, k, ids[indptr[r] + k], vals[a + k]);
            int st = push_bad(b, r, 0, msg, fn);
            if (st != WISP_OK) {
                wisp__free(b->bad);
                wisp__free(b->msgs);
                wisp__free(b);
                return st;
            }
        }
    }
    wisp__engine_retain(eng);
    *out = b;
    return WISP_OK;
}

/* ---- accessors -------------------------------------------------------------- */

size_t wisp_batch_rows(const wisp_batch *b)  { return b ? b->rows : 0; }
size_t wisp_batch_nnz(const wisp_batch *b)   { return b ? b->nnz : 0; }
size_t wisp_batch_nvals(const wisp_batch *b) { return b ? b->nvals : 0; }

const uint32_t *wisp_batch_indptr(const wisp_batch *b) { return b ? b->indptr : NULL; }
const uint32_t *wisp_batch_row_ptr(const wisp_batch *b) { return wisp_batch_indptr(b); }
const uint32_t *wisp_batch_ids(const wisp_batch *b)     { return b ? b->ids : NULL; }

const uint32_t *wisp_batch_val_ptr(const wisp_batch *b)
{
    return b && b->value_mode == WISP_VALUES_MIXED ? b->val_ptr : NULL;
}

const float *wisp_batch_vals(const wisp_batch *b)
{
    return b && b->value_mode != WISP_VALUES_NONE ? b->vals : NULL;
}

/* ---- bad rows ---------------------------------------------------------------- */

int wisp__batch_mark_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg)
{
    static const char fn[] = "wisp__batch_mark_bad";
    if (!b) return wisp__fail(WISP_EINVAL, "%s: batch is NULL", fn);
    if (row >= b->rows) return wisp__fail(WISP_EINVAL, "%s: row %zu out of range (%zu rows)", fn, row, b->rows);
    if (b->indptr[row + 1] != b->indptr[row])
        return wisp__fail(WISP_EINVAL, "%s: row %zu has features; a bad row must have none", fn, row);
    if (b->nbad && row <= b->bad[b->nbad - 1].row)
        return wisp__fail(WISP_EINVAL, "%s: row %zu is not after the last bad row %zu", fn, row, b->bad[b->nbad - 1].row);
    return push_bad(b, row, line, msg, fn);
}

int wisp__batch_list_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg, const char *fn)
{
    if (row >= b->rows || (b->nbad && row <= b->bad[b->nbad - 1].row))
        return wisp__fail(WISP_EINVAL, "%s: bad row %zu is out of order or out of range (%zu rows)", fn, row, b->rows);
    return push_bad(b, row, line, msg, fn);
}

/* Append (row, line, msg) to the bad-row list; row is after the last one. */
static int push_bad(wisp_batch *b, size_t row, uint64_t line, const char *msg, const char *fn)
{
    if (!msg) msg = "";
    size_t len = strlen(msg) + 1;
    if (b->msgs_len + len > UINT32_MAX)
        return wisp__fail(WISP_ELIMIT, "%s: the batch's bad-row messages exceed 4 GiB", fn);
    if (b->nbad == b->bad_cap) {
        size_t nc = b->bad_cap ? b->bad_cap * 2 : 16;
        struct wisp_bad_row *nb = wisp__realloc(b->bad, nc * sizeof *nb);
        if (!nb) return wisp__fail(WISP_ENOMEM, "%s: out of memory for the bad-row list", fn);
        b->bad = nb;
        b->bad_cap = nc;
    }
    if (b->msgs_len + len > b->msgs_cap) {
        size_t nc = b->msgs_cap ? b->msgs_cap : 1024;
        while (nc < b->msgs_len + len) nc *= 2;
        char *nm = wisp__realloc(b->msgs, nc);
        if (!nm) return wisp__fail(WISP_ENOMEM, "%s: out of memory for bad-row messages", fn);
        b->msgs = nm;
        b->msgs_cap = nc;
    }
    memcpy(b->msgs + b->msgs_len, msg, len);
    b->bad[b->nbad].row = row;
    b->bad[b->nbad].line = line;
    b->bad[b->nbad].msg_off = (uint32_t)b->msgs_len;
    b->nbad++;
    b->msgs_len += len;
    return WISP_OK;
}

size_t wisp_batch_bad_count(const wisp_batch *b) { return b ? b->nbad : 0; }

int wisp_batch_bad_row(const wisp_batch *b, size_t i, size_t *row, uint64_t *line, const char **msg)
{
    if (!b) return wisp__fail(WISP_EINVAL, "wisp_batch_bad_row: batch is NULL");
    if (i >= b->nbad)
        return wisp__fail(WISP_EINVAL, "wisp_batch_bad_row: index %zu out of range (%zu bad rows)", i, b->nbad);
    if (row) *row = b->bad[i].row;
    if (line) *line = b->bad[i].line;
    if (msg) *msg = b->msgs + b->bad[i].msg_off;
    return WISP_OK;
}

/* ---- for the text parser (libsvm.c) --------------------------------------------
 * Not in batch/batch.h on purpose: libsvm.c declares these two itself. */


/* Reserve one row of up to nfeat features; returns where its valued ids,
 * its values and its binary ids (scratch) go. */
int wisp__batch_reserve_line(wisp_batch *b, size_t nfeat, uint32_t **ids, float **vals, uint32_t **scratch)
{
    int st = reserve_row(b, nfeat, nfeat);
    if (st != WISP_OK) return st;
    if (nfeat > b->scratch_cap) {
        size_t nc = grown_cap(b->scratch_cap, nfeat, 1024, WISP_MAX_ROW_FEATURES + (size_t)1);
        uint32_t *s = wisp__malloc(nc * sizeof *s);
        if (!s) return wisp__fail(WISP_ENOMEM, "batch: out of memory for the parser's scratch (%zu entries)", nc);
        wisp__free(b->scratch);
        b->scratch = s;
        b->scratch_cap = nc;
    }
    *ids = b->ids ? b->ids + b->nnz : NULL;            /* nfeat 0: the arrays may not exist yet */
    *vals = b->vals ? b->vals + b->nvals : NULL;
    *scratch = b->scratch;
    return WISP_OK;
}

/* Commit the reserved row: nv valued ids and values are in place, nb binary
 * ids are in scratch. On failure nothing changed. */
int wisp__batch_commit_line(wisp_batch *b, size_t nv, size_t nb)
{
    if (nv) {
        int st = ensure_val_ptr(b);
        if (st != WISP_OK) return st;
    }
    if (nb) memcpy(b->ids + b->nnz + nv, b->scratch, nb * sizeof *b->scratch);
    commit_row(b, nv, nb);
    return WISP_OK;
}
