/* testbatch.h — what the tests of batches share: an owned batch's arena invariants (test_batch, test_gpu), the
 * comparison of two batches bit for bit (test_columns, test_parse_fast, test_transform_gpu) and, for
 * test_batch.c and test_batch_parse.c, a batch rendered as text
 * through the public accessors, its bad rows as text, the structural invariants every batch keeps, the
 * reference rows (random ids of every width, their expected render) and the engine they run on. */
#ifndef WISP_TESTBATCH_H
#define WISP_TESTBATCH_H

#include "batch/batch.h"
#include "check.h"
#include "testutil.h"
#include "testrand.h"

#include <inttypes.h>
#include <stdlib.h>

/* An owned batch's arena keeps its invariants: every array a region of one block, in order, aligned, inside it
 * (test_batch, test_gpu). */
static inline int arena_ok(const wisp_batch *b)
{
    const char *a = b->arena;
    if (!a || b->wrapped) return 0;
    int ok = b->off_vp % 256 == 0 && b->off_rp % 256 == 0 && b->off_vals % 256 == 0 && b->off_ids % 256 == 0;
    ok = ok && b->off_vp + (b->row_cap + 1) * 4 <= b->off_rp && b->off_rp + (b->row_cap + 1) * 4 <= b->off_vals
         && b->off_vals + b->val_cap * 4 <= b->off_ids && b->off_ids + b->id_cap * 4 <= b->arena_bytes;
    ok = ok && (const char *)b->indptr == a + b->off_rp
         && (!b->val_ptr || (const char *)b->val_ptr == a + b->off_vp)
         && (!b->ids || (const char *)b->ids == a + b->off_ids)
         && (!b->vals || (const char *)b->vals == a + b->off_vals);
    return ok && b->rows <= b->row_cap && b->nnz <= b->id_cap && b->nvals <= b->val_cap;
}

/* Everything a caller can see of two batches, equal bit for bit? Says where not. */
static inline int same_batches(const wisp_batch *a, const wisp_batch *b, char *why, size_t whylen)
{
    size_t rows = wisp_batch_rows(a);
    if (rows != wisp_batch_rows(b) || wisp_batch_nnz(a) != wisp_batch_nnz(b)
        || wisp_batch_nvals(a) != wisp_batch_nvals(b)) {
        snprintf(why, whylen, "rows %zu/%zu nnz %zu/%zu nvals %zu/%zu", rows, wisp_batch_rows(b), wisp_batch_nnz(a),
                 wisp_batch_nnz(b), wisp_batch_nvals(a), wisp_batch_nvals(b));
        return 0;
    }
    if (a->value_mode != b->value_mode) { snprintf(why, whylen, "value modes differ"); return 0; }
    if (memcmp(wisp_batch_indptr(a), wisp_batch_indptr(b), (rows + 1) * 4)) {
        snprintf(why, whylen, "indptr");
        return 0;
    }
    if (wisp_batch_nnz(a) && memcmp(wisp_batch_ids(a), wisp_batch_ids(b), wisp_batch_nnz(a) * 4)) {
        snprintf(why, whylen, "ids");
        return 0;
    }
    const uint32_t *va = wisp_batch_val_ptr(a), *vb = wisp_batch_val_ptr(b);
    if (!va != !vb || (va && memcmp(va, vb, (rows + 1) * 4))) { snprintf(why, whylen, "val_ptr"); return 0; }
    if (wisp_batch_nvals(a) && memcmp(wisp_batch_vals(a), wisp_batch_vals(b), wisp_batch_nvals(a) * 4)) {
        snprintf(why, whylen, "values (bits)");
        return 0;
    }
    if (wisp_batch_bad_count(a) != wisp_batch_bad_count(b)) { snprintf(why, whylen, "bad-row counts"); return 0; }
    for (size_t i = 0; i < wisp_batch_bad_count(a); i++) {
        size_t ra, rb;
        uint64_t la, lb;
        const char *ma, *mb;
        wisp_batch_bad_row(a, i, &ra, &la, &ma);
        wisp_batch_bad_row(b, i, &rb, &lb, &mb);
        if (ra != rb || la != lb || strcmp(ma, mb)) {
            snprintf(why, whylen, "bad row %zu: '%s' vs '%s'", i, ma, mb);
            return 0;
        }
    }
    return 1;
}

/* ---- small tools --------------------------------------------------------------- */

static inline double rndu(void) { return rnd01(); }
/* Zipf-like: log-uniform over [1, n], so small ids are hot */
static inline uint64_t rnd_zipf(uint64_t n) { return (uint64_t)exp(rndu() * log((double)n)); }


/* The batch as text through the public accessors only:
 * rows separated by ';', a row is "vid:val vid:val|bid bid", a bad row "!LINE". */
static inline char *render(const wisp_batch *b)
{
    str o = {0};
    sputs(&o, "");
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    size_t nbad = wisp_batch_bad_count(b), bi = 0;
    for (size_t r = 0; r < wisp_batch_rows(b); r++) {
        if (r) sputs(&o, ";");
        size_t brow = (size_t)-1; uint64_t bline = 0;
        if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, &bline, NULL);
        if (brow == r) {
            sprintf_(&o, "!%" PRIu64, bline);
            bi++;
            if (rp[r + 1] != rp[r]) sputs(&o, "(HAS FEATURES)");
            continue;
        }
        size_t a = rp[r], z = rp[r + 1];
        size_t nv = vp ? vp[r + 1] - vp[r] : vals ? z - a : 0;
        size_t v0 = vp ? vp[r] : a;
        for (size_t k = 0; k < nv; k++) sprintf_(&o, "%s%u:%.9g", k ? " " : "", ids[a + k], (double)vals[v0 + k]);
        sputs(&o, "|");
        for (size_t k = a + nv; k < z; k++) sprintf_(&o, "%s%u", k > a + nv ? " " : "", ids[k]);
    }
    return o.s;
}

/* bad rows as text: "row@line:msg\n" each */
static inline char *render_bad(const wisp_batch *b)
{
    str o = {0};
    sputs(&o, "");
    for (size_t i = 0; i < wisp_batch_bad_count(b); i++) {
        size_t row; uint64_t line; const char *msg;
        wisp_batch_bad_row(b, i, &row, &line, &msg);
        sprintf_(&o, "%zu@%" PRIu64 ":%s\n", row, line, msg);
    }
    return o.s;
}

static inline int expected_mode(const wisp_batch *b)
{
    size_t nv = wisp_batch_nvals(b), nnz = wisp_batch_nnz(b);
    return nv == 0 ? WISP_VALUES_NONE : nv == nnz ? WISP_VALUES_ALL : WISP_VALUES_MIXED;
}

/* Structural invariants every batch must keep; returns 0 when fine. */
static inline int invariants(const wisp_batch *b, const char *where)
{
    const uint32_t *rp = wisp_batch_indptr(b), *vp = wisp_batch_val_ptr(b);
    size_t rows = wisp_batch_rows(b), bad = 0;
    char why[200] = "";
    if (!rp) snprintf(why, sizeof why, "indptr NULL");
    else if (rp[0] != 0) snprintf(why, sizeof why, "indptr[0] = %u", rp[0]);
    else if (rp[rows] != wisp_batch_nnz(b))
        snprintf(why, sizeof why, "indptr[rows] %u != nnz %zu", rp[rows], wisp_batch_nnz(b));
    else if (b->value_mode != expected_mode(b))
        snprintf(why, sizeof why, "mode %d, counts say %d", b->value_mode, expected_mode(b));
    else if ((wisp_batch_vals(b) != NULL) != (b->value_mode != WISP_VALUES_NONE))
        snprintf(why, sizeof why, "vals accessor vs mode");
    else if ((vp != NULL) != (b->value_mode == WISP_VALUES_MIXED))
        snprintf(why, sizeof why, "val_ptr accessor vs mode");
    for (size_t r = 0; !why[0] && r < rows; r++) {
        if (rp[r + 1] < rp[r]) snprintf(why, sizeof why, "indptr decreases at %zu", r);
        if (vp && (vp[r + 1] < vp[r] || vp[r + 1] - vp[r] > rp[r + 1] - rp[r]))
            snprintf(why, sizeof why, "val_ptr bad at %zu", r);
        if (b->value_mode == WISP_VALUES_ALL && b->val_ptr && b->val_ptr[r + 1] != rp[r + 1])
            snprintf(why, sizeof why, "ALL mode but internal val_ptr != indptr at %zu", r);
    }
    if (!why[0] && vp && vp[rows] != wisp_batch_nvals(b)) snprintf(why, sizeof why, "val_ptr[rows] != nvals");
    for (size_t i = 0; !why[0] && i < wisp_batch_bad_count(b); i++) {
        size_t row; uint64_t line; const char *msg;
        if (wisp_batch_bad_row(b, i, &row, &line, &msg) != WISP_OK) snprintf(why, sizeof why, "bad_row %zu fails", i);
        else if (row >= rows || rp[row + 1] != rp[row]) snprintf(why, sizeof why, "bad row %zu has features", row);
        else if (i && row <= bad) snprintf(why, sizeof why, "bad rows out of order");
        else if (!msg || !msg[0]) snprintf(why, sizeof why, "bad row without message");
        bad = row;
    }
    CHECK_MSG(!why[0], "%s: %s", where, why);
    return why[0] != 0;
}

/* ---- the reference rows ------------------------------------------------------------ */

typedef struct { size_t nv, nb; uint64_t *vids, *bids; float *vals; } ref_row;

static inline uint64_t ref_gen_id(void)
{
    switch (rndn(8)) {
    case 0: return rnd();                                  /* 64-bit: mostly >= 2^32 */
    case 1: { static const uint64_t edge[] = { 0, 1, 0xFFFFFFFEull, 0xFFFFFFFFull, 0x100000000ull, UINT64_MAX };
              return edge[rndn(6)]; }
    case 2: case 3: return rnd_zipf(1u << 26);
    default: return rnd() & 0xFFFFFFFFull;
    }
}

static inline void free_row(ref_row *r) { free(r->vids); free(r->bids); free(r->vals); }

static inline uint32_t ref_id(uint64_t id) { return id > 0xFFFFFFFFull ? WISP_ID_NONE : (uint32_t)id; }

static inline char *render_ref(const ref_row *rows, size_t n)
{
    str o = {0};
    sputs(&o, "");
    for (size_t r = 0; r < n; r++) {
        if (r) sputs(&o, ";");
        for (size_t k = 0; k < rows[r].nv; k++)
            sprintf_(&o, "%s%u:%.9g", k ? " " : "", ref_id(rows[r].vids[k]), (double)rows[r].vals[k]);
        sputs(&o, "|");
        for (size_t k = 0; k < rows[r].nb; k++) sprintf_(&o, "%s%u", k ? " " : "", ref_id(rows[r].bids[k]));
    }
    return o.s;
}

/* the engine of a batch test (one pool thread); with WISP_TEST_GPU it says whether batch memory is pinned */
static inline wisp_engine *testbatch_engine(const char *test)
{
    wisp_engine *eng;
    if (wisp_engine_new(1, &eng) != WISP_OK) {
        fprintf(stderr, "%s: wisp_engine_new: %s\n", test, wisp_errmsg());
        return NULL;
    }
    if (getenv("WISP_TEST_GPU")) {
        /* with a live GPU backend every batch array is pinned host memory */
        int n = wisp_engine_gpu_count(eng);
        printf("%s: %d GPU(s) (%s); batch memory is %s\n", test, n, wisp_engine_gpu_status(eng),
               eng->gpu && eng->gpu->host_alloc ? "pinned" : "plain");
    }
    return eng;
}

#endif
