/* test_batch.c — batches: builders vs a reference, wrap checks, value modes, bad rows, the libsvm parser. */
#include "internal.h"
#include "check.h"
#include "testutil.h"
#include "testrand.h"

#include <float.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>

/* ---- small tools --------------------------------------------------------------- */

static double rndu(void) { return rnd01(); }
/* Zipf-like: log-uniform over [1, n], so small ids are hot */
static uint64_t rnd_zipf(uint64_t n) { return (uint64_t)exp(rndu() * log((double)n)); }


/* The batch as text through the public accessors only:
 * rows separated by ';', a row is "vid:val vid:val|bid bid", a bad row "!LINE". */
static char *render(const wisp_batch *b)
{
    str o = {0};
    sputs(&o, "");
    const uint32_t *rp = wisp_batch_row_ptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
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
static char *render_bad(const wisp_batch *b)
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

static int expected_mode(const wisp_batch *b)
{
    size_t nv = wisp_batch_nvals(b), nnz = wisp_batch_nnz(b);
    return nv == 0 ? WISP_VALUES_NONE : nv == nnz ? WISP_VALUES_ALL : WISP_VALUES_MIXED;
}

/* Structural invariants every batch must keep; returns 0 when fine. */
static int invariants(const wisp_batch *b, const char *where)
{
    const uint32_t *rp = wisp_batch_row_ptr(b), *vp = wisp_batch_val_ptr(b);
    size_t rows = wisp_batch_rows(b), bad = 0;
    char why[200] = "";
    if (!rp) snprintf(why, sizeof why, "row_ptr NULL");
    else if (rp[0] != 0) snprintf(why, sizeof why, "row_ptr[0] = %u", rp[0]);
    else if (rp[rows] != wisp_batch_nnz(b)) snprintf(why, sizeof why, "row_ptr[rows] %u != nnz %zu", rp[rows], wisp_batch_nnz(b));
    else if (b->value_mode != expected_mode(b)) snprintf(why, sizeof why, "mode %d, counts say %d", b->value_mode, expected_mode(b));
    else if ((wisp_batch_vals(b) != NULL) != (b->value_mode != WISP_VALUES_NONE)) snprintf(why, sizeof why, "vals accessor vs mode");
    else if ((vp != NULL) != (b->value_mode == WISP_VALUES_MIXED)) snprintf(why, sizeof why, "val_ptr accessor vs mode");
    for (size_t r = 0; !why[0] && r < rows; r++) {
        if (rp[r + 1] < rp[r]) snprintf(why, sizeof why, "row_ptr decreases at %zu", r);
        if (vp && (vp[r + 1] < vp[r] || vp[r + 1] - vp[r] > rp[r + 1] - rp[r])) snprintf(why, sizeof why, "val_ptr bad at %zu", r);
        if (b->value_mode == WISP_VALUES_ALL && b->val_ptr && b->val_ptr[r + 1] != rp[r + 1])
            snprintf(why, sizeof why, "ALL mode but internal val_ptr != row_ptr at %zu", r);
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

/* ---- the builder reference ------------------------------------------------------- */

typedef struct { size_t nv, nb; uint64_t *vids, *bids; float *vals; } ref_row;

static uint64_t gen_id(void)
{
    switch (rndn(8)) {
    case 0: return rnd();                                  /* 64-bit: mostly >= 2^32 */
    case 1: { static const uint64_t edge[] = { 0, 1, 0xFFFFFFFEull, 0xFFFFFFFFull, 0x100000000ull, UINT64_MAX };
              return edge[rndn(6)]; }
    case 2: case 3: return rnd_zipf(1u << 26);
    default: return rnd() & 0xFFFFFFFFull;
    }
}

static ref_row gen_row(int kind)   /* 0 empty, 1 binary, 2 valued, 3 mixed, -1 any */
{
    ref_row r = {0};
    if (kind < 0) kind = (int)rndn(4);
    size_t n = rndn(5) == 0 ? rndn(400) : rndn(45);
    if (kind == 0) n = 0;
    if (kind == 1) r.nb = n;
    else if (kind == 2) r.nv = n;
    else if (kind == 3) { r.nv = rndn(n + 1); r.nb = n - r.nv; }
    r.vids = malloc((r.nv + 1) * sizeof *r.vids);
    r.bids = malloc((r.nb + 1) * sizeof *r.bids);
    r.vals = malloc((r.nv + 1) * sizeof *r.vals);
    for (size_t i = 0; i < r.nv; i++) { r.vids[i] = gen_id(); r.vals[i] = (float)(rndu() * 8 - 4); }
    for (size_t i = 0; i < r.nb; i++) r.bids[i] = gen_id();
    if (r.nv > 2) r.vids[1] = r.vids[0];                   /* duplicates are kept */
    if (r.nb > 2) r.bids[2] = r.bids[1];
    return r;
}

static void free_row(ref_row *r) { free(r->vids); free(r->bids); free(r->vals); }

static int add_ref_row(wisp_batch *b, const ref_row *r)
{
    if (r->nb == 0) return wisp_batch_add_row(b, r->vids, r->nv ? r->vals : NULL, r->nv);
    if (r->nv == 0 && rndn(2)) return wisp_batch_add_row(b, r->bids, NULL, r->nb);
    return wisp_batch_add_row_mixed(b, r->vids, r->vals, r->nv, r->bids, r->nb);
}

static uint32_t ref_id(uint64_t id) { return id > 0xFFFFFFFFull ? WISP_ID_NONE : (uint32_t)id; }

static char *render_ref(const ref_row *rows, size_t n)
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

/* compare b with the reference; one CHECK, first difference printed */
static void check_same(const wisp_batch *b, const ref_row *rows, size_t n, const char *where)
{
    char *got = render(b), *want = render_ref(rows, n);
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    CHECK_MSG(strcmp(got, want) == 0, "%s: batch differs from the reference at byte %zu: got '%.60s' want '%.60s'",
              where, i, got + (i > 20 ? i - 20 : 0), want + (i > 20 ? i - 20 : 0));
    size_t nnz = 0, nv = 0;
    for (size_t r = 0; r < n; r++) { nnz += rows[r].nv + rows[r].nb; nv += rows[r].nv; }
    CHECK_MSG(wisp_batch_rows(b) == n && wisp_batch_nnz(b) == nnz && wisp_batch_nvals(b) == nv,
              "%s: counts rows %zu/%zu nnz %zu/%zu nvals %zu/%zu", where, wisp_batch_rows(b), n,
              wisp_batch_nnz(b), nnz, wisp_batch_nvals(b), nv);
    invariants(b, where);
    free(got); free(want);
}

static void test_builders(wisp_engine *eng)
{
    /* scenario: row kinds fixed or random */
    static const struct { const char *name; int first, rest, mode; } sc[] = {
        { "all binary",           1, 1, WISP_VALUES_NONE },
        { "all valued",           2, 2, WISP_VALUES_ALL },
        { "empty then valued",    0, 2, WISP_VALUES_ALL },
        { "binary then valued",   1, 2, WISP_VALUES_MIXED },
        { "valued then binary",   2, 1, WISP_VALUES_MIXED },
        { "mixed rows",           3, 3, WISP_VALUES_MIXED },
        { "random kinds",        -1, -1, -1 },
    };
    for (size_t s = 0; s < sizeof sc / sizeof sc[0]; s++) {
        wisp_batch *b;
        CHECK_OK(wisp_batch_new(eng, &b));
        size_t n = 1500 + rndn(1000);
        ref_row *rows = calloc(n, sizeof *rows);
        for (size_t r = 0; r < n; r++) {
            rows[r] = gen_row(r < n / 3 ? sc[s].first : sc[s].rest);
            int st = add_ref_row(b, &rows[r]);
            if (st != WISP_OK) { CHECK_OK(st); break; }
        }
        check_same(b, rows, n, sc[s].name);
        if (sc[s].mode >= 0) CHECK_MSG(b->value_mode == sc[s].mode, "%s: mode %d", sc[s].name, b->value_mode);

        /* clear and reuse: same content, no new memory, same arrays */
        const uint32_t *rp = wisp_batch_row_ptr(b), *ids = wisp_batch_ids(b);
        wisp_batch_clear(b);
        CHECK(wisp_batch_rows(b) == 0 && wisp_batch_nnz(b) == 0 && wisp_batch_nvals(b) == 0);
        CHECK(wisp_batch_row_ptr(b)[0] == 0 && wisp_batch_vals(b) == NULL && wisp_batch_val_ptr(b) == NULL);
        CHECK(b->value_mode == WISP_VALUES_NONE);
        wisp_fault_alloc_after(0);
        for (size_t r = 0; r < n; r++) add_ref_row(b, &rows[r]);
        CHECK_MSG(wisp_fault_alloc_after(0) == 0, "%s: refilling after clear allocated", sc[s].name);
        CHECK(wisp_batch_row_ptr(b) == rp && wisp_batch_ids(b) == ids);
        check_same(b, rows, n, sc[s].name);

        /* reuse with different content after clear (modes reset) */
        wisp_batch_clear(b);
        size_t m = 300;
        ref_row *rows2 = calloc(m, sizeof *rows2);
        for (size_t r = 0; r < m; r++) { rows2[r] = gen_row(r % 2 ? 1 : 0); add_ref_row(b, &rows2[r]); }
        check_same(b, rows2, m, "binary rows after clear");
        CHECK(b->value_mode == WISP_VALUES_NONE);

        for (size_t r = 0; r < n; r++) free_row(&rows[r]);
        for (size_t r = 0; r < m; r++) free_row(&rows2[r]);
        free(rows); free(rows2);
        wisp_batch_free(b);
    }
}

static void test_value_modes(wisp_engine *eng)
{
    wisp_batch *b;
    uint64_t ids[] = { 5, 6, 7, 8 };
    float vals[] = { 0.5f, 2.0f, -3.0f, 4.0f };
    CHECK_OK(wisp_batch_new(eng, &b));
    CHECK(b->value_mode == WISP_VALUES_NONE && wisp_batch_rows(b) == 0 && wisp_batch_row_ptr(b)[0] == 0);
    CHECK_OK(wisp_batch_add_row(b, ids, NULL, 2));              /* binary */
    CHECK_OK(wisp_batch_add_row(b, ids, NULL, 0));              /* empty */
    CHECK(b->value_mode == WISP_VALUES_NONE && !wisp_batch_vals(b) && !wisp_batch_val_ptr(b));
    CHECK_OK(wisp_batch_add_row(b, ids + 1, vals, 3));          /* first valued row: val_ptr materialised */
    CHECK(b->value_mode == WISP_VALUES_MIXED);
    const uint32_t *vp = wisp_batch_val_ptr(b);
    CHECK(vp && vp[0] == 0 && vp[1] == 0 && vp[2] == 0 && vp[3] == 3);
    CHECK(wisp_batch_vals(b) && wisp_batch_vals(b)[2] == -3.0f);
    CHECK_OK(wisp_batch_add_row_mixed(b, ids, vals, 1, ids + 2, 2));
    vp = wisp_batch_val_ptr(b);
    CHECK(vp[4] == 4 && wisp_batch_row_ptr(b)[4] == 8 && wisp_batch_nvals(b) == 4 && wisp_batch_nnz(b) == 8);
    CHECK(wisp_batch_ids(b)[5] == 5 && wisp_batch_ids(b)[6] == 7 && wisp_batch_ids(b)[7] == 8);
    char *s = render(b);
    CHECK_MSG(strcmp(s, "|5 6;|;6:0.5 7:2 8:-3|;5:0.5|7 8") == 0, "got %s", s);
    free(s);
    invariants(b, "modes");

    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_add_row(b, ids, NULL, 0));              /* empty rows keep ALL possible */
    CHECK_OK(wisp_batch_add_row(b, ids, vals, 2));
    CHECK(b->value_mode == WISP_VALUES_ALL && wisp_batch_vals(b) && !wisp_batch_val_ptr(b));
    CHECK_OK(wisp_batch_add_row(b, ids, vals, 4));
    CHECK(b->value_mode == WISP_VALUES_ALL && wisp_batch_nvals(b) == 6);
    CHECK_OK(wisp_batch_add_row(b, ids, NULL, 1));              /* one binary feature: MIXED */
    CHECK(b->value_mode == WISP_VALUES_MIXED && wisp_batch_val_ptr(b)[3] == 6 && wisp_batch_val_ptr(b)[4] == 6);
    invariants(b, "modes 2");

    /* an add_row_mixed with no valued part is a binary row */
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_add_row_mixed(b, NULL, NULL, 0, ids, 3));
    CHECK(b->value_mode == WISP_VALUES_NONE && wisp_batch_nnz(b) == 3);

    /* ids >= 2^32 are WISP_ID_NONE */
    wisp_batch_clear(b);
    uint64_t big[] = { 0xFFFFFFFEull, 0xFFFFFFFFull, 0x100000000ull, UINT64_MAX, 0, 0x1234567890ull };
    CHECK_OK(wisp_batch_add_row(b, big, NULL, 6));
    const uint32_t *got = wisp_batch_ids(b);
    CHECK(got[0] == 0xFFFFFFFEu && got[1] == WISP_ID_NONE && got[2] == WISP_ID_NONE && got[3] == WISP_ID_NONE &&
          got[4] == 0 && got[5] == WISP_ID_NONE);
    wisp_batch_free(b);
}

static void test_builder_errors(wisp_engine *eng)
{
    wisp_batch *b;
    uint64_t ids[4] = { 1, 2, 3, 4 };
    float vals[4] = { 1, 2, 3, 4 };
    CHECK_FAILS(wisp_batch_new(NULL, &b), WISP_EINVAL, "engine");
    CHECK_FAILS(wisp_batch_new(eng, NULL), WISP_EINVAL, "out");
    CHECK_OK(wisp_batch_new(eng, &b));
    CHECK_FAILS(wisp_batch_add_row(NULL, ids, NULL, 1), WISP_EINVAL, "NULL");
    CHECK_FAILS(wisp_batch_add_row(b, NULL, NULL, 2), WISP_EINVAL, "ids is NULL");
    CHECK_FAILS(wisp_batch_add_row(b, NULL, vals, 2), WISP_EINVAL, "ids is NULL");
    CHECK_FAILS(wisp_batch_add_row_mixed(b, ids, NULL, 2, NULL, 0), WISP_EINVAL, "vals is NULL");
    CHECK_FAILS(wisp_batch_add_row_mixed(b, ids, vals, 1, NULL, 2), WISP_EINVAL, "bids is NULL");
    CHECK_OK(wisp_batch_add_row(b, NULL, NULL, 0));             /* an empty row needs no arrays */
    CHECK_FAILS(wisp_batch_add_row(b, ids, NULL, WISP_MAX_ROW_FEATURES + (size_t)1), WISP_ELIMIT, "WISP_MAX_ROW_FEATURES");
    CHECK_FAILS(wisp_batch_add_row_mixed(b, ids, vals, WISP_MAX_ROW_FEATURES, ids, 1), WISP_ELIMIT, "WISP_MAX_ROW_FEATURES");
    CHECK_FAILS(wisp_batch_add_row_mixed(b, ids, vals, SIZE_MAX, ids, 2), WISP_ELIMIT, "WISP_MAX_ROW_FEATURES");
    CHECK(wisp_batch_rows(b) == 1 && wisp_batch_nnz(b) == 0);

    /* limits reached by counts (faked: filling 2^26 rows or 2^32 ids takes too long) */
    size_t rows = b->rows;
    b->rows = WISP_MAX_ROWS;
    CHECK_FAILS(wisp_batch_add_row(b, ids, NULL, 1), WISP_ELIMIT, "WISP_MAX_ROWS");
    b->rows = rows;
    size_t nnz = b->nnz;
    b->nnz = WISP_MAX_NNZ - 1;
    CHECK_FAILS(wisp_batch_add_row(b, ids, NULL, 2), WISP_ELIMIT, "WISP_MAX_NNZ");
    b->nnz = nnz;

    /* all-or-nothing under allocation failures: the Nth allocation fails, nothing changes */
    ref_row keep[64];
    size_t nk = 0;
    int done = 0;
    wisp_batch_clear(b);
    for (int round = 0; round < 30 && !done; round++) {
        ref_row r = gen_row(round < 5 ? 1 : -1);
        if (round == 10) { free_row(&r); r = gen_row(2); }
        /* make rows large so the arrays must grow */
        ref_row big = {0};
        big.nv = r.nv * 40; big.nb = r.nb * 40;
        big.vids = malloc((big.nv + 1) * 8); big.vals = malloc((big.nv + 1) * 4); big.bids = malloc((big.nb + 1) * 8);
        for (size_t i = 0; i < big.nv; i++) { big.vids[i] = gen_id(); big.vals[i] = (float)i - 3.5f; }
        for (size_t i = 0; i < big.nb; i++) big.bids[i] = gen_id();
        free_row(&r);
        int ok = 0;
        for (uint64_t k = 1; k < 10 && !ok; k++) {
            wisp_fault_alloc_after(k);
            int st = add_ref_row(b, &big);
            wisp_fault_alloc_after(0);
            if (st == WISP_OK) ok = 1;
            else {
                CHECK_MSG(st == WISP_ENOMEM, "fault %d: %s", st, wisp_errmsg());
                check_same(b, keep, nk, "after a failed allocation");
            }
        }
        CHECK(ok);
        if (nk < 64) keep[nk++] = big; else { free_row(&big); done = 1; }
    }
    check_same(b, keep, nk, "after allocation faults");
    for (size_t i = 0; i < nk; i++) free_row(&keep[i]);

    /* fault in wisp_batch_new */
    wisp_batch *b2 = (wisp_batch *)1;
    for (uint64_t k = 1; k <= 2; k++) {
        wisp_fault_alloc_after(k);
        int st = wisp_batch_new(eng, &b2);
        wisp_fault_alloc_after(0);
        if (st == WISP_OK && k == 2 && eng->gpu) { wisp_batch_free(b2); continue; }   /* pinned: not counted */
        CHECK(st == WISP_ENOMEM && b2 == NULL);
    }
    wisp_batch_free(b);
    wisp_batch_free(NULL);
    wisp_batch_clear(NULL);
    CHECK(wisp_batch_rows(NULL) == 0 && wisp_batch_row_ptr(NULL) == NULL && wisp_batch_vals(NULL) == NULL);
}

/* ---- wrap --------------------------------------------------------------------------- */

static void test_wrap(wisp_engine *eng)
{
    wisp_batch *b;
    uint32_t rp[] = { 0, 2, 2, 5 }, ids[] = { 1, 2, 3, 4, 0xFFFFFFFFu }, vp[] = { 0, 1, 1, 3 };
    float vals[] = { 0.5f, 1.5f, 2.5f, 3.5f, 4.5f };

    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, NULL, NULL, &b));
    CHECK(b->value_mode == WISP_VALUES_NONE && wisp_batch_row_ptr(b) == rp && wisp_batch_ids(b) == ids);
    char *s = render(b);
    CHECK_MSG(strcmp(s, "|1 2;|;|3 4 4294967295") == 0, "%s", s); free(s);
    uint64_t one = 1;
    CHECK_FAILS(wisp_batch_add_row(b, &one, NULL, 1), WISP_ESTATE, "wraps");
    CHECK_FAILS(wisp_batch_parse_libsvm(b, "1 2\n", 4, 1, 0, NULL, NULL), WISP_ESTATE, "wraps");
    wisp_batch_clear(b);                                     /* refused silently: rows stay */
    CHECK(wisp_batch_rows(b) == 3);
    CHECK_OK(wisp_batch_mark_bad(b, 1, 7, "caller says bad"));
    CHECK(wisp_batch_bad_count(b) == 1);
    wisp_batch_free(b);

    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, NULL, vals, &b));
    CHECK(b->value_mode == WISP_VALUES_ALL && wisp_batch_vals(b) == vals && !wisp_batch_val_ptr(b) && wisp_batch_nvals(b) == 5);
    s = render(b);
    CHECK_MSG(strcmp(s, "1:0.5 2:1.5|;|;3:2.5 4:3.5 4294967295:4.5|") == 0, "%s", s); free(s);
    wisp_batch_free(b);

    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, vp, vals, &b));
    CHECK(b->value_mode == WISP_VALUES_MIXED && wisp_batch_val_ptr(b) == vp && wisp_batch_nvals(b) == 3);
    s = render(b);
    CHECK_MSG(strcmp(s, "1:0.5|2;|;3:1.5 4:2.5|4294967295") == 0, "%s", s); free(s);
    invariants(b, "wrap mixed");
    wisp_batch_free(b);

    uint32_t vp_all[] = { 0, 2, 2, 5 }, vp_none[] = { 0, 0, 0, 0 };
    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, vp_all, vals, &b));
    CHECK(b->value_mode == WISP_VALUES_ALL && !wisp_batch_val_ptr(b));   /* val_ptr == row_ptr */
    wisp_batch_free(b);
    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, vp_none, NULL, &b));
    CHECK(b->value_mode == WISP_VALUES_NONE && !wisp_batch_vals(b));
    wisp_batch_free(b);
    CHECK_OK(wisp_batch_wrap(eng, 0, NULL, NULL, NULL, NULL, &b));
    CHECK(wisp_batch_rows(b) == 0 && wisp_batch_row_ptr(b) && wisp_batch_row_ptr(b)[0] == 0);
    wisp_batch_free(b);
    uint32_t rp0[] = { 0, 0 };
    CHECK_OK(wisp_batch_wrap(eng, 1, rp0, NULL, NULL, NULL, &b));   /* no features: ids may be NULL */
    wisp_batch_free(b);

    /* validation errors, with the row named */
    b = (wisp_batch *)1;
    CHECK_FAILS(wisp_batch_wrap(NULL, 3, rp, ids, NULL, NULL, &b), WISP_EINVAL, "engine");
    CHECK(b == NULL);
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, NULL, NULL, NULL), WISP_EINVAL, "out");
    CHECK_FAILS(wisp_batch_wrap(eng, 3, NULL, ids, NULL, NULL, &b), WISP_EINVAL, "row_ptr is NULL");
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, NULL, NULL, NULL, &b), WISP_EINVAL, "ids is NULL");
    CHECK_FAILS(wisp_batch_wrap(eng, WISP_MAX_ROWS + (size_t)1, rp, ids, NULL, NULL, &b), WISP_ELIMIT, "WISP_MAX_ROWS");
    uint32_t rp_start[] = { 1, 2, 3 };
    CHECK_FAILS(wisp_batch_wrap(eng, 2, rp_start, ids, NULL, NULL, &b), WISP_EINVAL, "row_ptr[0] is 1");
    uint32_t rp_dec[] = { 0, 3, 4, 2, 5 };
    CHECK_FAILS(wisp_batch_wrap(eng, 4, rp_dec, ids, NULL, NULL, &b), WISP_EINVAL, "row_ptr decreases at row 2");
    uint32_t rp_wide[] = { 0, 1, 1 + WISP_MAX_ROW_FEATURES + 1 };
    CHECK_FAILS(wisp_batch_wrap(eng, 2, rp_wide, ids, NULL, NULL, &b), WISP_ELIMIT, "row 1 has 1048577 features");
    /* nnz beyond WISP_MAX_NNZ: 4095 rows of 2^20, then one of 0xFFFF8 */
    uint32_t *rp_big = malloc(4097 * sizeof *rp_big);
    rp_big[0] = 0;
    for (size_t r = 0; r < 4095; r++) rp_big[r + 1] = rp_big[r] + (1u << 20);
    rp_big[4096] = rp_big[4095] + 0xFFFF8u;
    CHECK_FAILS(wisp_batch_wrap(eng, 4096, rp_big, ids, NULL, NULL, &b), WISP_ELIMIT, "at row 4095 exceeds WISP_MAX_NNZ");
    rp_big[4096] = rp_big[4095] + 0xFFFF0u;                  /* exactly WISP_MAX_NNZ is fine */
    CHECK_OK(wisp_batch_wrap(eng, 4096, rp_big, ids, NULL, NULL, &b));
    CHECK(wisp_batch_nnz(b) == WISP_MAX_NNZ);
    wisp_batch_free(b);
    free(rp_big);
    uint32_t vp_start[] = { 1, 1, 1, 1 };
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, vp_start, vals, &b), WISP_EINVAL, "val_ptr[0] is 1");
    uint32_t vp_dec[] = { 0, 1, 0, 0 };
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, vp_dec, vals, &b), WISP_EINVAL, "val_ptr decreases at row 1");
    uint32_t vp_long[] = { 0, 1, 2, 2 };                     /* row 1 has no features but one value */
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, vp_long, vals, &b), WISP_EINVAL, "row 1 has 1 values but only 0 features");
    uint32_t vp_long2[] = { 0, 1, 1, 5 };
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, vp_long2, vals, &b), WISP_EINVAL, "row 2 has 4 values but only 3");
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, vp, NULL, &b), WISP_EINVAL, "vals is NULL");
    CHECK(b == NULL);
}

/* ---- bad rows ------------------------------------------------------------------------ */

static void test_bad_rows(wisp_engine *eng)
{
    wisp_batch *b;
    uint64_t ids[] = { 1, 2 };
    CHECK_OK(wisp_batch_new(eng, &b));
    for (int i = 0; i < 5; i++) CHECK_OK(wisp_batch_add_row(b, ids, NULL, i == 1 ? 2 : 0));
    CHECK_FAILS(wisp_batch_mark_bad(b, 5, 1, "x"), WISP_EINVAL, "row 5 out of range");
    CHECK_FAILS(wisp_batch_mark_bad(b, 1, 1, "x"), WISP_EINVAL, "row 1 has features");
    CHECK_OK(wisp_batch_mark_bad(b, 2, 30, "line 30: first"));
    CHECK_FAILS(wisp_batch_mark_bad(b, 2, 31, "x"), WISP_EINVAL, "not after");
    CHECK_FAILS(wisp_batch_mark_bad(b, 0, 31, "x"), WISP_EINVAL, "not after");
    CHECK_OK(wisp_batch_mark_bad(b, 4, 40, NULL));
    CHECK(wisp_batch_bad_count(b) == 2);
    size_t row; uint64_t line; const char *msg;
    CHECK_OK(wisp_batch_bad_row(b, 0, &row, &line, &msg));
    CHECK(row == 2 && line == 30 && strcmp(msg, "line 30: first") == 0);
    CHECK_OK(wisp_batch_bad_row(b, 1, &row, &line, &msg));
    CHECK(row == 4 && line == 40 && strcmp(msg, "") == 0);
    CHECK_OK(wisp_batch_bad_row(b, 1, NULL, NULL, NULL));
    CHECK_FAILS(wisp_batch_bad_row(b, 2, &row, &line, &msg), WISP_EINVAL, "index 2 out of range");
    /* many bad rows: the lists grow, messages stay right */
    for (int i = 0; i < 3000; i++) {
        wisp_batch_add_row(b, NULL, NULL, 0);
        char m[64];
        snprintf(m, sizeof m, "message number %d", i);
        CHECK_OK(wisp_batch_mark_bad(b, wisp_batch_rows(b) - 1, (uint64_t)i + 100, m));
    }
    int wrong = 0;
    for (int i = 0; i < 3000; i++) {
        char m[64];
        snprintf(m, sizeof m, "message number %d", i);
        wisp_batch_bad_row(b, (size_t)i + 2, &row, &line, &msg);
        wrong += row != (size_t)i + 5 || line != (uint64_t)i + 100 || strcmp(msg, m) != 0;
    }
    CHECK(wrong == 0);
    /* a failed allocation leaves the list as it was */
    size_t nbad = wisp_batch_bad_count(b);
    wisp_batch_add_row(b, NULL, NULL, 0);
    int failed = 0;
    for (uint64_t k = 1; k <= 2; k++) {
        wisp_fault_alloc_after(k);
        int st = wisp_batch_mark_bad(b, wisp_batch_rows(b) - 1, 9, "this message needs room...................................");
        wisp_fault_alloc_after(0);
        if (st == WISP_ENOMEM) failed++;
        if (st != WISP_OK) CHECK(wisp_batch_bad_count(b) == nbad);
        else break;
    }
    (void)failed;
    wisp_batch_clear(b);
    CHECK(wisp_batch_bad_count(b) == 0);
    wisp_batch_free(b);
}

/* ---- the parser: grammar ---------------------------------------------------------------- */

/* parse text one-shot (final) into a fresh batch; returns the render, sets *bad to render_bad */
static char *parse_render(wisp_engine *eng, const char *text, char **bad, uint64_t *lines, int *status)
{
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    uint64_t ln = 0;
    size_t used = 0;
    int st = wisp_batch_parse_libsvm(b, text, strlen(text), 1, 0, &ln, &used);
    if (status) *status = st;
    if (lines) *lines = ln;
    invariants(b, text);
    CHECK_MSG(st != WISP_OK || used == strlen(text), "'%s': consumed %zu of %zu", text, used, strlen(text));
    char *s = render(b);
    if (bad) *bad = render_bad(b);
    wisp_batch_free(b);
    return s;
}

static void test_parse_grammar(wisp_engine *eng)
{
    static const struct { const char *text, *want; } cases[] = {
        { "", "" },
        { "\n\n  \n\t\n", "" },
        { "# a comment\n   # indented comment 1:2\n", "" },
        { "1 3:0.5 7:2\n", "3:0.5 7:2|" },
        { "-1 3:0.5 7:2", "3:0.5 7:2|" },                          /* no final newline */
        { "+1 3:0.5\n0 4:0.25\n", "3:0.5|;4:0.25|" },
        { "0.5 3:0.5\n", "3:0.5|" },                               /* float label */
        { "1e3 3:0.5\n", "3:0.5|" },
        { "3:0.5 7:2\n", "3:0.5 7:2|" },                            /* no label */
        { "1 5 9 3:0.5\n", "3:0.5|5 9" },                           /* bare ids are binary; valued first */
        { "1\n", "|" },                                             /* label only: a row without features */
        { "1 3:1 4:1.0 5:1e0 6:10e-1 7:2\n", "7:2|3 4 5 6" },        /* 1.0 values ship as binary */
        { "1 3:-1 4:+1.5 5:.5 6:5. 7:1e-3 8:1E+3 9:-.25e1\n", "3:-1 4:1.5 5:0.5 6:5 7:0.00100000005 8:1000 9:-2.5|" },
        { "1 3:0 4:-0 5:0.0e10 6:000.000\n", "3:0 4:-0 5:0 6:0|" },
        { "1 007:0.5 0:2\n", "7:0.5 0:2|" },                        /* leading zeros, id 0 */
        { "1\t3:0.5\t\t7:2 \t\n", "3:0.5 7:2|" },                   /* tabs, trailing blanks */
        { "  1 3:0.5\n", "3:0.5|" },                                /* leading blanks */
        { "1 3:0.5\r\n2 4:2\r\n", "3:0.5|;4:2|" },                  /* CRLF */
        { "1 3:0.5 # comment 9:9 x:y\n", "3:0.5|" },
        { "1 3:0.5 #\n", "3:0.5|" },
        { "1 #only a comment\n", "|" },
        { "1 3:0.5\n\n# c\n\n2 4:2\n", "3:0.5|;4:2|" },
        { "1 4294967295:2 4294967296:3 18446744073709551615 4294967294\n",
          "4294967295:2 4294967295:3|4294967295 4294967294" },
        { "1 3:3.4028234e38 4:1e-45 5:1e-50\n", "3:3.40282347e+38 4:1.40129846e-45 5:0|" },
        { "1 3:0.1 4:0.123456789012345678901234567890 5:123456789012345678901234567890\n",
          "3:0.100000001 4:0.123456791 5:1.23456789e+29|" },
        { "1 3:2 3:2 3:5\n", "3:2 3:2 3:5|" },                      /* duplicates kept */
        { "\r\n", "" },
        { "1 3:0.5\r", "3:0.5|" },                                  /* lone CR at the very end */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad;
        int st;
        char *got = parse_render(eng, cases[i].text, &bad, NULL, &st);
        CHECK_MSG(st == WISP_OK && strcmp(got, cases[i].want) == 0 && bad[0] == 0,
                  "case %zu '%s': got '%s' want '%s' (bad: %s)", i, cases[i].text, got, cases[i].want, bad);
        free(got); free(bad);
    }
}

static void test_parse_malformed(wisp_engine *eng)
{
    /* each: a good line, a blank line, a comment, then the bad line at line 4, then a good line */
    static const struct { const char *line, *msg; } cases[] = {
        { "1 abc:1",                    "line 4: bad feature id 'abc:1', at column 3" },
        { "1 3:0.5 x",                  "line 4: bad feature id 'x', at column 9" },
        { "1 -3:1",                     "line 4: bad feature id '-3:1', at column 3" },
        { "1 +3:1",                     "line 4: bad feature id '+3:1', at column 3" },
        { "1 3a:1",                     "line 4: bad feature id '3a:1', at column 3" },
        { "1 3.5:1",                    "line 4: bad feature id '3.5:1', at column 3" },
        { "1 :5",                       "line 4: bad feature id ':5', at column 3" },
        { ":5",                         "line 4: bad feature id ':5', at column 1" },
        { "1 3:",                       "line 4: missing value after ':' in '3:', at column 5" },
        { "1 3: 4",                     "line 4: missing value after ':' in '3:', at column 5" },
        { "1 3:abc",                    "line 4: bad value 'abc', at column 5" },
        { "1 3:1.2.3",                  "line 4: bad value '1.2.3', at column 5" },
        { "1 3:1e",                     "line 4: bad value '1e', at column 5" },
        { "1 3:1e+",                    "line 4: bad value '1e+', at column 5" },
        { "1 3:.",                      "line 4: bad value '.', at column 5" },
        { "1 3:-",                      "line 4: bad value '-', at column 5" },
        { "1 3:0x10",                   "line 4: bad value '0x10', at column 5" },
        { "1 3:1,5",                    "line 4: bad value '1,5', at column 5" },
        { "1 3:1#c",                    "line 4: bad value '1#c', at column 5" },
        { "1 3:1:2",                    "line 4: extra ':' in '3:1:2' (expected id:value), at column 6" },
        { "1 3:nan",                    "line 4: value 'nan' is not a finite number, at column 5" },
        { "1 3:NaN",                    "line 4: value 'NaN' is not a finite number, at column 5" },
        { "1 3:-inf",                   "line 4: value '-inf' is not a finite number, at column 5" },
        { "1 3:Infinity",               "line 4: value 'Infinity' is not a finite number, at column 5" },
        { "1 3:1e39",                   "line 4: value '1e39' is not a finite float, at column 5" },
        { "1 3:-3.5e38",                "line 4: value '-3.5e38' is not a finite float, at column 5" },
        { "1 3:1e99999999999",          "line 4: value '1e99999999999' is not a finite float, at column 5" },
        { "1 18446744073709551616:1",   "line 4: feature id '18446744073709551616' overflows 64 bits, at column 3" },
        { "1 99999999999999999999",     "line 4: feature id '99999999999999999999' overflows 64 bits, at column 3" },
        { "1 000000000000000000000000005:2 184467440737095516150",
          "line 4: feature id '184467440737095516150' overflows 64 bits, at column 33" },
        { "abc 3:1",                    "line 4: bad label 'abc' (expected a number), at column 1" },
        { "nan 3:1",                    "line 4: bad label 'nan' (expected a number), at column 1" },
        { "  1x 3:1",                   "line 4: bad label '1x' (expected a number), at column 3" },
        { "1 3:1\r5",                   "line 4: bad value '1?5', at column 5" },
        { "1 3:0.5 4:0.25 5:0.75 6:0.125 7:0.5 8:1.5 9:2.5 10:3.5 11:0.5 12:x23456789012345678901234567890123456789012345678901234567890",
          "line 4: bad value 'x234567890123456789012345678901234567890...', at column 66" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        str t = {0};
        sprintf_(&t, "1 1:0.5\n\n# c\n%s\n2 2:0.25\n", cases[i].line);
        char *bad;
        int st;
        uint64_t lines;
        char *got = parse_render(eng, t.s, &bad, &lines, &st);
        str want_bad = {0};
        sprintf_(&want_bad, "1@4:%s\n", cases[i].msg);
        CHECK_MSG(st == WISP_OK && strcmp(got, "1:0.5|;!4;2:0.25|") == 0 && strcmp(bad, want_bad.s) == 0 && lines == 5,
                  "malformed case %zu '%s':\n  got  '%s' %s\n  want '%s'", i, cases[i].line, got, bad, want_bad.s);
        free(got); free(bad); free(t.s); free(want_bad.s);
    }
    /* a very long number falls back to strtod; beyond 511 bytes it is refused */
    {
        str t = {0};
        sputs(&t, "1 3:0.");
        for (int i = 0; i < 400; i++) sputs(&t, "0");
        sputs(&t, "15\n1 4:1");
        for (int i = 0; i < 600; i++) sputs(&t, "0");
        sputs(&t, "\n");
        char *bad, *got = parse_render(eng, t.s, &bad, NULL, NULL);
        CHECK_MSG(strcmp(got, "3:0|;!2") == 0 && strstr(bad, "1@2:line 2: value '1000") && strstr(bad, "is longer than 511 bytes, at column 5"),
                  "long numbers: %s / %s", got, bad);
        free(got); free(bad); free(t.s);
    }
    /* several bad lines in a row, each its own row with its own line number */
    {
        char *bad, *got = parse_render(eng, "x\n1 3:\n\n1 4:5\n1 5:nan\r\n", &bad, NULL, NULL);
        CHECK_MSG(strcmp(got, "!1;!2;4:5|;!5") == 0, "%s", got);
        CHECK_MSG(strcmp(bad, "0@1:line 1: bad label 'x' (expected a number), at column 1\n"
                              "1@2:line 2: missing value after ':' in '3:', at column 5\n"
                              "3@5:line 5: value 'nan' is not a finite number, at column 5\n") == 0, "%s", bad);
        free(got); free(bad);
    }
}

/* too many features in a row, and a line longer than WISP_MAX_LINE_BYTES */
static void test_parse_limits(wisp_engine *eng)
{
    str t = {0};
    sputs(&t, "1");
    for (size_t i = 0; i < WISP_MAX_ROW_FEATURES; i++) sputs(&t, " 7");
    sputs(&t, "\n1 3:2\n1");
    for (size_t i = 0; i <= WISP_MAX_ROW_FEATURES; i++) sputs(&t, " 7");
    sputs(&t, "\n");
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    uint64_t ln = 0;
    size_t used = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, t.s, t.len, 1, 0, &ln, &used));
    CHECK(used == t.len && ln == 3 && wisp_batch_rows(b) == 3);
    CHECK(wisp_batch_row_ptr(b)[1] == WISP_MAX_ROW_FEATURES && wisp_batch_nnz(b) == WISP_MAX_ROW_FEATURES + 1);
    const char *msg = "";
    size_t row = 0;
    CHECK(wisp_batch_bad_count(b) == 1 && wisp_batch_bad_row(b, 0, &row, &ln, &msg) == WISP_OK);
    char want[128];
    snprintf(want, sizeof want, "line 3: more than WISP_MAX_ROW_FEATURES (1048576) features, at column %u",
             2 + 2 * WISP_MAX_ROW_FEATURES + 1);
    CHECK_MSG(row == 2 && ln == 3 && strcmp(msg, want) == 0, "%s", msg);
    invariants(b, "row features limit");
    free(t.s);

    /* a line of WISP_MAX_LINE_BYTES + 1 bytes */
    size_t n = WISP_MAX_LINE_BYTES + 1;
    char *big = malloc(n + 32);
    memcpy(big, "1 5:2\n", 6);
    memset(big + 6, ' ', n);
    big[6] = '1';
    memcpy(big + 6 + n, "\n1 6:2\n", 7);
    wisp_batch_clear(b);
    ln = 10;
    CHECK_OK(wisp_batch_parse_libsvm(b, big, 6 + n + 7, 0, 0, &ln, &used));
    char *s = render(b);
    CHECK_MSG(strcmp(s, "5:2|;!12;6:2|") == 0 && ln == 13 && used == 6 + n + 7, "%s", s);
    free(s);
    CHECK(wisp_batch_bad_row(b, 0, NULL, NULL, &msg) == WISP_OK &&
          strcmp(msg, "line 12: longer than WISP_MAX_LINE_BYTES (67108864 bytes), at column 67108865") == 0);
    /* the same line without its end, not final: no progress is possible, so WISP_ELIMIT */
    wisp_batch_clear(b);
    ln = 10;
    CHECK_FAILS(wisp_batch_parse_libsvm(b, big, 6 + n, 0, 0, &ln, &used), WISP_ELIMIT, "line 12: no end of line within");
    CHECK(used == 6 && ln == 11 && wisp_batch_rows(b) == 1);
    /* exactly WISP_MAX_LINE_BYTES is fine */
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_parse_libsvm(b, big + 6, n - 1, 1, 0, NULL, &used));
    CHECK(used == n - 1 && wisp_batch_rows(b) == 1 && wisp_batch_bad_count(b) == 0);
    free(big);

    /* WISP_MAX_NNZ / WISP_MAX_ROWS reached (faked counts) */
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2 3\n", 6, 1, 0, NULL, NULL));
    b->rows = WISP_MAX_ROWS;
    ln = 0;
    CHECK_FAILS(wisp_batch_parse_libsvm(b, "\n1 2\n", 5, 1, 0, &ln, &used), WISP_ELIMIT, "line 2: the batch already holds WISP_MAX_ROWS");
    CHECK(used == 1 && ln == 1);
    b->rows = 1;
    size_t nnz = b->nnz, id_cap = b->id_cap;
    b->nnz = WISP_MAX_NNZ - 1;
    b->id_cap = WISP_MAX_NNZ;            /* pretend: nothing is written there on this path */
    ln = 0;
    CHECK_FAILS(wisp_batch_parse_libsvm(b, "1\n1 2 3\n", 8, 1, 0, &ln, &used), WISP_ELIMIT, "line 2: the batch would hold more than WISP_MAX_NNZ");
    CHECK(used == 2 && ln == 1 && wisp_batch_rows(b) == 2);
    b->nnz = nnz;
    b->id_cap = id_cap;
    b->rows = 1;
    wisp_batch_free(b);
}

/* final, max_rows, line_no, consumed */
static void test_parse_protocol(wisp_engine *eng)
{
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    const char *t = "1 1:2\n\n# c\n1 2:2\n1 3:2\n1 4";
    size_t len = strlen(t), used = 99;
    uint64_t ln = 100;
    CHECK_OK(wisp_batch_parse_libsvm(b, t, len, 0, 0, &ln, &used));
    CHECK_MSG(used == len - 3 && ln == 105 && wisp_batch_rows(b) == 3, "used %zu ln %" PRIu64, used, ln);
    CHECK_OK(wisp_batch_parse_libsvm(b, t + used, 3, 0, 0, &ln, &used));   /* still partial */
    CHECK(used == 0 && ln == 105 && wisp_batch_rows(b) == 3);
    CHECK_OK(wisp_batch_parse_libsvm(b, t + len - 3, 3, 1, 0, &ln, &used));
    CHECK(used == 3 && ln == 106 && wisp_batch_rows(b) == 4 && wisp_batch_ids(b)[3] == 4);

    /* max_rows: stops right after the row that reaches it; skipped lines before it count */
    wisp_batch_clear(b);
    ln = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, t, len, 1, 2, &ln, &used));
    CHECK(used == 17 && ln == 4 && wisp_batch_rows(b) == 2);
    CHECK_OK(wisp_batch_parse_libsvm(b, t + used, len - used, 1, 1, &ln, &used));
    CHECK(used == 6 && ln == 5 && wisp_batch_rows(b) == 3);
    /* bad rows count toward max_rows */
    wisp_batch_clear(b);
    ln = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, "x\ny\n1 2\n", 8, 1, 2, &ln, &used));
    CHECK(used == 4 && ln == 2 && wisp_batch_rows(b) == 2 && wisp_batch_bad_count(b) == 2);
    /* NULL line_no and consumed are fine; NULL text only with len 0 */
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2\n", 4, 1, 0, NULL, NULL));
    CHECK_OK(wisp_batch_parse_libsvm(b, NULL, 0, 1, 0, NULL, NULL));
    CHECK_FAILS(wisp_batch_parse_libsvm(b, NULL, 5, 1, 0, NULL, &used), WISP_EINVAL, "text is NULL");
    CHECK(used == 0);
    CHECK_FAILS(wisp_batch_parse_libsvm(NULL, "1\n", 2, 1, 0, NULL, NULL), WISP_EINVAL, "batch is NULL");
    /* final with a trailing blank partial line consumes it, and counts it */
    wisp_batch_clear(b);
    ln = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2\n  ", 6, 1, 0, &ln, &used));
    CHECK(used == 6 && ln == 2 && wisp_batch_rows(b) == 1);
    /* text parsed into a batch that already has builder rows: appended, modes follow */
    wisp_batch_clear(b);
    uint64_t ids[] = { 9 };
    wisp_batch_add_row(b, ids, NULL, 1);
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2:0.5 3\n", 10, 1, 0, NULL, NULL));
    char *s = render(b);
    CHECK_MSG(strcmp(s, "|9;2:0.5|3") == 0 && b->value_mode == WISP_VALUES_MIXED, "%s", s);
    free(s);
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2:0.5 3:2\n\n1 4:3\n", 19, 1, 0, NULL, NULL));
    CHECK(b->value_mode == WISP_VALUES_ALL);
    wisp_batch_free(b);
}

/* every value form, exactly (float)strtod */
static void gen_number(str *o)
{
    char buf[128];
    size_t n = 0;
    int form = (int)rndn(10);
    if (rndn(4) == 0) buf[n++] = rndn(2) ? '-' : '+';
    if (form == 0) {                      /* plain integer */
        n += (size_t)snprintf(buf + n, 40, "%" PRIu64, rnd() >> rndn(64));
    } else {
        int nd = 1 + (int)rndn(form == 1 ? 28 : 12);
        int dot = (int)rndn((size_t)nd + 2) - 1;        /* -1: no dot */
        int lead0 = (int)rndn(4);
        for (int i = 0; i < lead0; i++) buf[n++] = '0';
        for (int i = 0; i < nd; i++) {
            if (i == dot) buf[n++] = '.';
            buf[n++] = (char)('0' + rndn(10));
        }
        if (dot == nd) buf[n++] = '.';
        if (rndn(2)) {
            buf[n++] = rndn(2) ? 'e' : 'E';
            if (rndn(2)) buf[n++] = rndn(2) ? '-' : '+';
            int ex = (int)rndn(form == 2 ? 400 : 45);
            n += (size_t)snprintf(buf + n, 12, "%d", ex);
        }
    }
    buf[n] = '\0';
    sputs(o, buf);
}

static void test_parse_numbers(wisp_engine *eng)
{
    enum { N = 60000 };
    str t = {0};
    size_t *at = malloc(N * sizeof *at);
    for (int i = 0; i < N; i++) {
        sputs(&t, "0 1:");
        at[i] = t.len;
        gen_number(&t);
        sputs(&t, "\n");
    }
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    CHECK_OK(wisp_batch_parse_libsvm(b, t.s, t.len, 1, 0, NULL, NULL));
    CHECK(wisp_batch_rows(b) == N);
    const uint32_t *rp = wisp_batch_row_ptr(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    int wrong = 0, nbad = 0, nfinite = 0;
    size_t bi = 0;
    for (int i = 0; i < N && wrong < 5; i++) {
        const char *num = t.s + at[i];
        double d = strtod(num, NULL);
        float want = (float)d;
        size_t brow = (size_t)-1;
        if (bi < wisp_batch_bad_count(b)) wisp_batch_bad_row(b, bi, &brow, NULL, NULL);
        if (!isfinite(want)) {
            if (brow != (size_t)i) { wrong++; fprintf(stderr, "number %.*s: want a bad row\n", (int)strcspn(num, "\n"), num); }
            else bi++;
            nbad++;
            continue;
        }
        nfinite++;
        float got;
        if (brow == (size_t)i) { wrong++; fprintf(stderr, "number %.*s: bad row\n", (int)strcspn(num, "\n"), num); bi++; continue; }
        size_t nv = vp ? vp[i + 1] - vp[i] : (size_t)(rp[i + 1] - rp[i]);
        if (nv == 1) got = vals[vp ? vp[i] : rp[i]];
        else got = 1.0f;
        if (memcmp(&got, &want, sizeof got) != 0 || rp[i + 1] - rp[i] != 1) {
            wrong++;
            fprintf(stderr, "number %.*s: got %.9g want %.9g\n", (int)strcspn(num, "\n"), num, (double)got, (double)want);
        }
    }
    CHECK_MSG(wrong == 0, "%d numbers parsed wrong", wrong);
    CHECK(nbad > 0 && nfinite > N / 2);
    wisp_batch_free(b);
    free(t.s); free(at);
}

/* ---- the parser: a generated file, one-shot vs reference vs chunked ------------------------ */

static const char *sep(void) { static const char *s[] = { " ", " ", " ", "\t", "  ", " \t" }; return s[rndn(6)]; }

/* Append one line; fills *ref with its expected row (when not bad) and returns
 * 0 no row, 1 a good row, 2 a bad row. */
static int gen_line(str *o, ref_row *ref)
{
    memset(ref, 0, sizeof *ref);
    int kind = (int)rndn(100);
    if (kind < 3) { sputs(o, rndn(2) ? "" : " \t "); return 0; }
    if (kind < 5) { sputs(o, rndn(2) ? "# comment 1:2" : "  #x"); return 0; }
    size_t n = rndn(5) == 0 ? rndn(120) : rndn(40);
    int bad_at = kind < 12 ? (int)rndn(n + 1) : -1;
    ref->vids = malloc((n + 1) * 8); ref->bids = malloc((n + 1) * 8); ref->vals = malloc((n + 1) * 4);
    static const char *labels[] = { "1", "-1", "+1", "0", "0.5", "2e0" };
    int label = rndn(5) != 0;
    if (label) sputs(o, labels[rndn(6)]);
    else if (rndn(10) == 0) sputs(o, "  ");
    for (size_t i = 0; i < n; i++) {
        if (i || label) sputs(o, sep());
        if ((int)i == bad_at) {
            static const char *bads[] = { "abc", "3:", "3:x", "3:1:2", "3:nan", "3:inf", "3:1e39", "-3:1",
                                          "18446744073709551616:1", "3:1.2.3", "4:-", "5:.e3", ":7" };
            sputs(o, bads[rndn(sizeof bads / sizeof bads[0])]);
            continue;
        }
        uint64_t id = gen_id();
        if (rndn(20) == 0) sputs(o, "00");
        sprintf_(o, "%" PRIu64, id);
        int vk = (int)rndn(4);
        if (vk == 0 && i == 0 && !label) vk = 2;             /* a bare first token would be the label */
        if (vk == 0) { ref->bids[ref->nb++] = id; continue; }
        sputs(o, ":");
        size_t v0 = o->len;
        if (vk == 1 && rndn(3) == 0) sputs(o, rndn(2) ? "1" : "1.0");
        else {
            do { o->len = v0; gen_number(o); } while (!isfinite((float)strtod(o->s + v0, NULL)));
        }
        float f = (float)strtod(o->s + v0, NULL);
        if (f == 1.0f) ref->bids[ref->nb++] = id;
        else { ref->vids[ref->nv] = id; ref->vals[ref->nv++] = f; }
    }
    if (rndn(10) == 0) { sputs(o, sep()); sputs(o, "# trailing 5:6"); }
    else if (rndn(10) == 0) sputs(o, sep());
    if (bad_at >= 0 && (size_t)bad_at < n) return 2;
    return label || n ? 1 : 0;                               /* no label, no features: a blank line */
}

static void test_parse_chunked(wisp_engine *eng)
{
    enum { LINES = 10000 };
    str t = {0};
    ref_row *ref = calloc(LINES, sizeof *ref);
    int *kind = calloc(LINES, sizeof *kind);
    size_t nrows = 0;
    for (int i = 0; i < LINES; i++) {
        kind[i] = gen_line(&t, &ref[i]);
        nrows += kind[i] != 0;
        if (i < LINES - 1 || rndn(2)) sputs(&t, rndn(8) ? "\n" : "\r\n");
    }
    /* the expected render */
    str want = {0};
    sputs(&want, "");
    int first = 1;
    for (int i = 0; i < LINES; i++) {
        if (!kind[i]) continue;
        if (!first) sputs(&want, ";");
        first = 0;
        if (kind[i] == 2) { sprintf_(&want, "!%d", i + 1); continue; }
        char *r = render_ref(&ref[i], 1);
        sputs(&want, r);
        free(r);
    }

    /* one shot */
    wisp_batch *one;
    wisp_batch_new(eng, &one);
    uint64_t ln = 0;
    size_t used = 0;
    uint64_t t0 = wisp_now_ns();
    CHECK_OK(wisp_batch_parse_libsvm(one, t.s, t.len, 1, 0, &ln, &used));
    uint64_t t1 = wisp_now_ns();
    CHECK(used == t.len && ln == LINES && wisp_batch_rows(one) == nrows);
    invariants(one, "one-shot");
    char *got = render(one), *got_bad = render_bad(one);
    size_t i = 0;
    while (got[i] && got[i] == want.s[i]) i++;
    CHECK_MSG(strcmp(got, want.s) == 0, "generated file: differs at byte %zu: got '%.80s' want '%.80s'",
              i, got + (i > 30 ? i - 30 : 0), want.s + (i > 30 ? i - 30 : 0));
    printf("test_batch: generated file: %zu lines, %zu bytes, %zu rows, %zu bad, parsed in %.2f ms\n",
           (size_t)LINES, t.len, nrows, wisp_batch_bad_count(one), (double)(t1 - t0) / 1e6);

    /* chunked, several ways; also with allocation failures (retried) */
    for (int way = 0; way < 6; way++) {
        wisp_batch *b;
        wisp_batch_new(eng, &b);
        size_t start = 0, avail = 0;
        ln = 0;
        int calls = 0, faults = 0, stuck = 0, insane = 0;
        while (start < t.len && stuck < 1000) {
            size_t grow = way == 0 ? 1 + rndn(64) : way == 1 ? 1 + rndn(300) : 1 + rndn(20000);
            if (rndn(3) == 0 || avail == start) avail = avail + grow > t.len ? t.len : avail + grow;
            int final = avail == t.len;
            size_t max_rows = way == 3 || rndn(4) == 0 ? 1 + rndn(40) : 0;
            int fault = way >= 4 && rndn(3) == 0;
            if (fault) wisp_fault_alloc_after(1 + rndn(3));
            uint64_t ln0 = ln;
            int st = wisp_batch_parse_libsvm(b, t.s + start, avail - start, final, max_rows, &ln, &used);
            wisp_fault_alloc_after(0);
            calls++;
            if (st != WISP_OK) {
                faults++;
                CHECK_MSG(st == WISP_ENOMEM, "chunked: %s", wisp_errmsg());
                if (st != WISP_ENOMEM) break;
            }
            if (used > avail - start || ln < ln0) insane++;
            if (used == 0) stuck++; else stuck = 0;
            start += used;
        }
        CHECK(start == t.len && ln == LINES && insane == 0);
        char *g = render(b), *gb = render_bad(b);
        CHECK_MSG(strcmp(g, got) == 0 && strcmp(gb, got_bad) == 0, "chunked way %d (%d calls, %d faults) differs from one-shot",
                  way, calls, faults);
        invariants(b, "chunked");
        free(g); free(gb);
        wisp_batch_free(b);
    }

    /* chunked with a clear after every call, the rows collected (what a streaming reader does) */
    {
        wisp_batch *b;
        wisp_batch_new(eng, &b);
        str acc = {0}, accbad = {0};
        sputs(&acc, ""); sputs(&accbad, "");
        size_t start = 0, rows_before = 0;
        ln = 0;
        while (start < t.len) {
            size_t len = 1 + rndn(5000);
            if (start + len > t.len) len = t.len - start;
            int final = start + len == t.len;
            wisp_batch_clear(b);
            CHECK_OK(wisp_batch_parse_libsvm(b, t.s + start, len, final, 100, &ln, &used));
            if (used == 0 && !final) {
                /* grow the window: parse again with more text (simulated by a bigger len next time) */
                size_t more = t.len - start < 200000 ? t.len - start : 200000;
                wisp_batch_clear(b);
                CHECK_OK(wisp_batch_parse_libsvm(b, t.s + start, more, start + more == t.len, 100, &ln, &used));
            }
            char *g = render(b);
            if (wisp_batch_rows(b)) { if (acc.len) sputs(&acc, ";"); sputs(&acc, g); }
            free(g);
            for (size_t k = 0; k < wisp_batch_bad_count(b); k++) {
                size_t row; uint64_t line; const char *msg;
                wisp_batch_bad_row(b, k, &row, &line, &msg);
                sprintf_(&accbad, "%zu@%" PRIu64 ":%s\n", row + rows_before, line, msg);
            }
            rows_before += wisp_batch_rows(b);
            start += used;
        }
        CHECK_MSG(strcmp(acc.s, got) == 0 && strcmp(accbad.s, got_bad) == 0 && ln == LINES,
                  "streaming with clear differs from one-shot");
        free(acc.s); free(accbad.s);
        wisp_batch_free(b);
    }

    free(got); free(got_bad);
    for (int k = 0; k < LINES; k++) free_row(&ref[k]);
    free(ref); free(kind); free(want.s); free(t.s);
    wisp_batch_free(one);
}

/* random bytes never crash and always leave a consistent batch */
static void test_parse_fuzz(wisp_engine *eng)
{
    static const char alpha[] = "0123456789:.eE+-#  \t\t\r\n\n\nnaifx";
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    char buf[600];
    int broken = 0;
    for (int it = 0; it < 4000; it++) {
        size_t n = rndn(sizeof buf);
        int raw = it % 4 == 0;
        for (size_t i = 0; i < n; i++) buf[i] = raw ? (char)rnd() : alpha[rndn(sizeof alpha - 1)];
        if (it % 8 == 0) wisp_batch_clear(b);
        size_t start = 0, used;
        uint64_t ln = 0;
        int guard = 0;
        while (start < n && guard++ < 1000) {
            size_t len = 1 + rndn(n - start);
            int final = start + len == n;
            char *exact = malloc(len);                       /* so ASan sees any read past len */
            memcpy(exact, buf + start, len);
            int st = wisp_batch_parse_libsvm(b, exact, len, final, rndn(3) ? 0 : 1 + rndn(5), &ln, &used);
            free(exact);
            if (st != WISP_OK) { broken++; break; }
            if (used == 0 && final) break;
            if (used > len) { broken++; break; }
            start += used;
        }
        if (invariants(b, "fuzz")) break;
    }
    CHECK(broken == 0);
    /* memory of the fuzzed batch is readable end to end (ASan would complain otherwise) */
    volatile uint64_t sum = 0;
    for (size_t i = 0; i < wisp_batch_nnz(b); i++) sum += wisp_batch_ids(b)[i];
    (void)sum;
    wisp_batch_free(b);
}

/* ---- speed (printed, not asserted) ------------------------------------------------------------ */

static char *put_u64(char *p, uint64_t v)
{
    char t[24];
    int n = 0;
    do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = t[--n];
    return p;
}

static void test_parse_speed(wisp_engine *eng, int reps)
{
    enum { ROWS = 200000, NVAL = 13, NBIN = 26 };
    /* a pool of value strings like real numeric features (a few significant digits) */
    static char vpool[1024][16];
    for (int i = 0; i < 1024; i++) {
        int k = (int)rndn(4);
        if (k == 0) snprintf(vpool[i], 16, "%d", (int)rndn(1000) + 2);
        else if (k == 1) snprintf(vpool[i], 16, "%.3f", rndu() * 10);
        else snprintf(vpool[i], 16, "%.6g", rndu());
    }
    size_t cap = (size_t)ROWS * 600;
    char *text = malloc(cap), *p = text;
    for (int r = 0; r < ROWS; r++) {
        *p++ = rndn(2) ? '1' : '0';
        for (int k = 0; k < NVAL + NBIN; k++) {
            *p++ = ' ';
            p = put_u64(p, k < NVAL ? (uint64_t)k + 1 : rnd_zipf(1u << 26) + 14);
            *p++ = ':';
            if (k < NVAL) { size_t l = strlen(vpool[(r * 7 + k) & 1023]); memcpy(p, vpool[(r * 7 + k) & 1023], l); p += l; }
            else *p++ = '1';
        }
        *p++ = '\n';
    }
    size_t len = (size_t)(p - text);
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    double best = 1e30, first = 0;
    for (int rep = 0; rep < reps; rep++) {
        wisp_batch_clear(b);
        uint64_t t0 = wisp_now_ns();
        int st = wisp_batch_parse_libsvm(b, text, len, 1, 0, NULL, NULL);
        double s = (double)(wisp_now_ns() - t0) / 1e9;
        if (st != WISP_OK) { CHECK_OK(st); break; }
        if (rep == 0) first = s;
        if (s < best) best = s;
    }
    CHECK(wisp_batch_rows(b) == ROWS && wisp_batch_nnz(b) == (size_t)ROWS * (NVAL + NBIN) && wisp_batch_bad_count(b) == 0);
    CHECK(b->value_mode == WISP_VALUES_MIXED);
    double feats = (double)ROWS * (NVAL + NBIN);
    printf("test_batch: parse speed: %d rows x %d features (%d valued + %d id:1), %.1f MB: "
           "best %.1f ms = %.0f MB/s, %.2f ns/feature, %.0f ns/row (first run into a fresh batch: %.1f ms)\n",
           ROWS, NVAL + NBIN, NVAL, NBIN, (double)len / 1e6, best * 1e3, (double)len / best / 1e6,
           best * 1e9 / feats, best * 1e9 / ROWS, first * 1e3);
    wisp_batch_free(b);
    free(text);
}


/* ---- the arena: one block, regions in order, aligned; contents survive every re-layout ---- */

static int arena_ok(const wisp_batch *b)
{
    const char *a = b->arena;
    if (!a || b->wrapped) return 0;
    int ok = b->off_vp % 256 == 0 && b->off_rp % 256 == 0 && b->off_vals % 256 == 0 && b->off_ids % 256 == 0;
    ok = ok && b->off_vp + (b->row_cap + 1) * 4 <= b->off_rp && b->off_rp + (b->row_cap + 1) * 4 <= b->off_vals
         && b->off_vals + b->val_cap * 4 <= b->off_ids && b->off_ids + b->id_cap * 4 <= b->arena_bytes;
    ok = ok && (const char *)b->row_ptr == a + b->off_rp && (!b->val_ptr || (const char *)b->val_ptr == a + b->off_vp)
         && (!b->ids || (const char *)b->ids == a + b->off_ids) && (!b->vals || (const char *)b->vals == a + b->off_vals);
    return ok && b->rows <= b->row_cap && b->nnz <= b->id_cap && b->nvals <= b->val_cap;
}

static void test_arena(wisp_engine *eng)
{
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_new(eng, &b));
    if (!b) return;
    CHECK(arena_ok(b) && b->ids == NULL && b->vals == NULL && b->val_ptr == NULL && b->row_ptr[0] == 0);
    uint64_t seed = 12345;
    for (int round = 0; round < 3; round++) {
        /* binary rows, then valued ones (val_ptr appears late), then mixed; growth past every first capacity */
        uint32_t *xr = malloc(9001 * 4), *xid = malloc(9000 * 40 * 4), *xvp = malloc(9001 * 4);
        float *xv = malloc(9000 * 40 * 4);
        size_t nnz = 0, nv = 0, rows = 3000 + 3000 * (size_t)round;
        xr[0] = xvp[0] = 0;
        int ok = 1;
        for (size_t r = 0; r < rows; r++) {
            uint64_t ids[40]; float vals[40];
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            size_t n = (size_t)(seed >> 59) + (r % 7 == 0 ? 0 : 5), v = r < rows / 3 ? 0 : r < 2 * rows / 3 ? n : n / 2;
            for (size_t k = 0; k < n; k++) { ids[k] = (seed >> 20) % 100000 + k; vals[k] = (float)k * 0.25f - 1.0f; }
            int st = v == n && v ? wisp_batch_add_row(b, ids, vals, n) : !v ? wisp_batch_add_row(b, ids, NULL, n)
                   : wisp_batch_add_row_mixed(b, ids, vals, v, ids + v, n - v);
            if (st != WISP_OK || !arena_ok(b)) { ok = 0; break; }
            for (size_t k = 0; k < n; k++) xid[nnz++] = (uint32_t)ids[k];
            for (size_t k = 0; k < v; k++) xv[nv++] = vals[k];
            xr[r + 1] = (uint32_t)nnz;
            xvp[r + 1] = (uint32_t)nv;
        }
        CHECK_MSG(ok, "round %d: append or arena invariants failed at %zu rows", round, wisp_batch_rows(b));
        CHECK(wisp_batch_rows(b) == rows && wisp_batch_nnz(b) == nnz && wisp_batch_nvals(b) == nv);
        CHECK(b->value_mode == WISP_VALUES_MIXED && b->val_ptr != NULL);
        CHECK(!memcmp(b->row_ptr, xr, (rows + 1) * 4) && !memcmp(b->ids, xid, nnz * 4)
              && !memcmp(b->val_ptr, xvp, (rows + 1) * 4) && !memcmp(b->vals, xv, nv * 4));
        free(xr); free(xid); free(xvp); free(xv);
        const void *arena = b->arena;
        wisp_batch_clear(b);                       /* keeps the arena and val_ptr */
        CHECK(b->arena == arena && arena_ok(b) && b->rows == 0 && b->row_ptr[0] == 0 && b->val_ptr[0] == 0);
    }
    wisp_batch_free(b);
}

/* ---- the values rule: a value that is not a finite float32 makes its row bad, on every path ----
 * (batch.c's top comment). Each path gets the same edge values between two good rows; the bad
 * row's message names the value, the good rows keep their features, scores are NaN only there. */
static const char *const edge_text[] = { "nan", "inf", "-inf", "1e39", "-1e39", "3.4028236e38", "3.4028235e38",
                                         "1e-50", "1.4e-45" };
static const int edge_bad[] = { 1, 1, 1, 1, 1, 1, 0, 0, 0 };   /* FLT_MAX, underflow to 0, a subnormal: kept */
#define NEDGE (sizeof edge_bad / sizeof edge_bad[0])

/* b holds [good, edge, good] x NEDGE rows in this order; check which are bad and what they say */
static void check_edge_rows(const wisp_batch *b, const char *where, const char *quote_fmt)
{
    CHECK_MSG(wisp_batch_rows(b) == 3 * NEDGE, "%s: %zu rows", where, wisp_batch_rows(b));
    size_t nbad = 0;
    for (size_t k = 0; k < NEDGE; k++) nbad += (size_t)edge_bad[k];
    CHECK_MSG(wisp_batch_bad_count(b) == nbad, "%s: %zu bad rows, want %zu", where, wisp_batch_bad_count(b), nbad);
    size_t bi = 0;
    const uint32_t *rp = wisp_batch_row_ptr(b);
    for (size_t k = 0; k < NEDGE; k++) {
        const size_t r = 3 * k + 1;
        CHECK_MSG(rp[r] - rp[r - 1] == 2 && rp[r + 2] - rp[r + 1] == 2, "%s: the good rows around '%s' lost features",
                  where, edge_text[k]);
        if (!edge_bad[k]) continue;
        size_t row = 0;
        uint64_t line = 0;
        const char *msg = "";
        CHECK_OK(wisp_batch_bad_row(b, bi++, &row, &line, &msg));
        char want[96];
        snprintf(want, sizeof want, quote_fmt, edge_text[k]);
        CHECK_MSG(row == r && strstr(msg, want) && strstr(msg, "not a finite "),
                  "%s: value '%s': bad row %zu (want %zu) '%s' (want it to name '%s')", where, edge_text[k], row, r, msg, want);
    }
}

static void test_values_rule(wisp_engine *eng)
{
    /* libsvm text: the decimal is quoted */
    {
        str t = { 0 };
        for (size_t k = 0; k < NEDGE; k++)
            sprintf_(&t, "1 1:0.5 2:1\n0 3:%s 4:1\n1 5:2 6:-1\n", edge_text[k]);
        wisp_batch *b = NULL;
        CHECK_OK(wisp_batch_new(eng, &b));
        CHECK_OK(wisp_batch_parse_libsvm(b, t.s, t.len, 1, 0, NULL, NULL));
        check_edge_rows(b, "libsvm", "'%s'");
        wisp_batch_free(b);
        free(t.s);
    }
    /* VW text */
    {
        wisp_vw *v = NULL;
        CHECK_OK(wisp_vw_new("-b 18", &v));
        str t = { 0 };
        for (size_t k = 0; k < NEDGE; k++)
            sprintf_(&t, "1 |a x:0.5\n0 |a y:%s\n1 |a z:2\n", edge_text[k]);
        wisp_batch *b = NULL;
        CHECK_OK(wisp_batch_new(eng, &b));
        if (v) CHECK_OK(wisp_batch_parse_vw(b, v, t.s, t.len, 1, 0, NULL, NULL));
        check_edge_rows(b, "vw", "'%s'");           /* each row: the feature and the constant */
        wisp_batch_free(b);
        wisp_vw_free(v);
        free(t.s);
    }
    /* the builders: a float argument can only be NaN or +-inf (1e39 is inf once a float) */
    {
        const float fv[] = { NAN, INFINITY, -INFINITY, (float)1e39, (float)-1e39, INFINITY, FLT_MAX, 0.0f, 1.4e-45f };
        wisp_batch *b = NULL, *m = NULL;
        CHECK_OK(wisp_batch_new(eng, &b));
        CHECK_OK(wisp_batch_new(eng, &m));
        const uint64_t ids[2] = { 7, 9 };
        for (size_t k = 0; k < NEDGE; k++) {
            const float good[2] = { 0.5f, 1 }, edge[2] = { 1, fv[k] };
            CHECK_OK(wisp_batch_add_row(b, ids, good, 2));
            CHECK_OK(wisp_batch_add_row(b, ids, edge, 2));   /* a bad value is data: WISP_OK, a bad row */
            CHECK_OK(wisp_batch_add_row(b, ids, good, 2));
            CHECK_OK(wisp_batch_add_row_mixed(m, ids, good, 1, ids + 1, 1));
            CHECK_OK(wisp_batch_add_row_mixed(m, ids, edge + 1, 1, ids + 1, 1));
            CHECK_OK(wisp_batch_add_row_mixed(m, ids, good, 1, ids + 1, 1));
        }
        check_edge_rows(b, "wisp_batch_add_row", "(id 9): value ");
        check_edge_rows(m, "wisp_batch_add_row_mixed", "(id 7): value ");
        /* the message names the float: nan, inf, -inf */
        size_t row;
        uint64_t line;
        const char *msg;
        CHECK_OK(wisp_batch_bad_row(b, 0, &row, &line, &msg));
        CHECK_MSG(strstr(msg, "feature #2 (id 9): value nan is not a finite float32") == msg, "'%s'", msg);
        CHECK_OK(wisp_batch_bad_row(b, 2, &row, &line, &msg));
        CHECK_MSG(strstr(msg, "value -inf is not a finite float32"), "'%s'", msg);
        /* scores: NaN exactly on the bad rows */
        float *w = calloc(16, sizeof *w);
        for (int i = 0; i < 16; i++) w[i] = 0.1f * (float)(i - 8);
        char path[] = "/tmp/wisp_test_batch_valuesXXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) close(fd);
        wisp_model *mod = NULL;
        wisp_session *s = NULL;
        CHECK_OK(wisp_model_write(path, w, 16, 0.1, WISP_F32, NULL, NULL));
        CHECK_OK(wisp_model_load(eng, path, &mod));
        CHECK_OK(wisp_session_new(eng, mod, "cpu", &s));
        float out[3 * NEDGE];
        if (s) {
            CHECK_OK(wisp_session_score(s, b, out));
            for (size_t k = 0; k < NEDGE; k++) {
                const double z = 0.1 + 0.5 * (double)w[7] + (double)w[9];
                const double p = 1.0 / (1.0 + exp(-z));
                CHECK_MSG(fabs(out[3 * k] - p) < 1e-6 && fabs(out[3 * k + 2] - p) < 1e-6, "good rows around %s", edge_text[k]);
                CHECK_MSG(edge_bad[k] ? isnan(out[3 * k + 1]) : isfinite(out[3 * k + 1]), "edge row %s: %g",
                          edge_text[k], (double)out[3 * k + 1]);
            }
        }
        /* zero-copy: the caller's values are checked once when wrapped; bad rows keep their features */
        uint32_t rp[3 * NEDGE + 1], wid[6 * NEDGE];
        float wv[6 * NEDGE];
        rp[0] = 0;
        for (size_t r = 0; r < 3 * NEDGE; r++) {
            wid[2 * r] = 7; wid[2 * r + 1] = 9;
            wv[2 * r] = r % 3 == 1 ? 1 : 0.5f;
            wv[2 * r + 1] = r % 3 == 1 ? fv[r / 3] : 1;
            rp[r + 1] = (uint32_t)(2 * r + 2);
        }
        wisp_batch *wb = NULL;
        CHECK_OK(wisp_batch_wrap(eng, 3 * NEDGE, rp, wid, NULL, wv, &wb));
        if (wb) {
            check_edge_rows(wb, "wisp_batch_wrap", "(id 9): value ");
            if (s) {
                float o2[3 * NEDGE];
                CHECK_OK(wisp_session_score(s, wb, o2));
                for (size_t r = 0; r < 3 * NEDGE; r++)
                    CHECK_MSG(isnan(out[r]) ? isnan(o2[r]) : o2[r] == out[r], "wrapped row %zu: %g vs built %g", r,
                              (double)o2[r], (double)out[r]);
            }
        }
        wisp_batch_free(wb);
        wisp_session_free(s);
        wisp_model_free(mod);
        unlink(path);
        free(w);
        wisp_batch_free(b);
        wisp_batch_free(m);
    }
}

int main(void)
{
    wisp_engine *eng;
    if (wisp_engine_new(1, &eng) != WISP_OK) {
        fprintf(stderr, "test_batch: wisp_engine_new: %s\n", wisp_errmsg());
        return 1;
    }
    if (getenv("WISP_TEST_GPU")) {
        /* with a live GPU backend every batch array is pinned host memory */
        int n = wisp_engine_gpu_count(eng);
        printf("test_batch: %d GPU(s) (%s); batch memory is %s\n", n, wisp_engine_gpu_status(eng),
               eng->gpu && eng->gpu->host_alloc ? "pinned" : "plain");
    }
    test_builders(eng);
    test_arena(eng);
    test_value_modes(eng);
    test_builder_errors(eng);
    test_wrap(eng);
    test_bad_rows(eng);
    test_values_rule(eng);
    test_parse_grammar(eng);
    test_parse_malformed(eng);
    test_parse_protocol(eng);
    test_parse_numbers(eng);
    test_parse_chunked(eng);
    test_parse_fuzz(eng);
    test_parse_limits(eng);
    if (!getenv("WISP_TEST_QUICK")) test_parse_speed(eng, 4);
    wisp_engine_free(eng);
    return CHECK_DONE("test_batch");
}
