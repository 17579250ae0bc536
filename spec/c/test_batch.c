/* test_batch.c — batches built and wrapped: the builders vs a reference, value modes, builder errors, wrap
 * checks, bad rows, the arena, the values rule on every path (the libsvm parser: test_batch_parse.c). */
#include "testbatch.h"

#include <float.h>
#include <stdarg.h>

/* ---- the builders vs the reference ---------------------------------------------------- */

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
    for (size_t i = 0; i < r.nv; i++) { r.vids[i] = ref_gen_id(); r.vals[i] = (float)(rndu() * 8 - 4); }
    for (size_t i = 0; i < r.nb; i++) r.bids[i] = ref_gen_id();
    if (r.nv > 2) r.vids[1] = r.vids[0];                   /* duplicates are kept */
    if (r.nb > 2) r.bids[2] = r.bids[1];
    return r;
}

static int add_ref_row(wisp_batch *b, const ref_row *r)
{
    if (r->nb == 0) return wisp_batch_add_row(b, r->vids, r->nv ? r->vals : NULL, r->nv);
    if (r->nv == 0 && rndn(2)) return wisp_batch_add_row(b, r->bids, NULL, r->nb);
    return wisp_batch_add_row_mixed(b, r->vids, r->vals, r->nv, r->bids, r->nb);
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
        const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b);
        wisp_batch_clear(b);
        CHECK(wisp_batch_rows(b) == 0 && wisp_batch_nnz(b) == 0 && wisp_batch_nvals(b) == 0);
        CHECK(wisp_batch_indptr(b)[0] == 0 && wisp_batch_vals(b) == NULL && wisp_batch_val_ptr(b) == NULL);
        CHECK(b->value_mode == WISP_VALUES_NONE);
        wisp_fault_alloc_after(0);
        for (size_t r = 0; r < n; r++) add_ref_row(b, &rows[r]);
        CHECK_MSG(wisp_fault_alloc_after(0) == 0, "%s: refilling after clear allocated", sc[s].name);
        CHECK(wisp_batch_indptr(b) == rp && wisp_batch_ids(b) == ids);
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
    CHECK(b->value_mode == WISP_VALUES_NONE && wisp_batch_rows(b) == 0 && wisp_batch_indptr(b)[0] == 0);
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
    CHECK(vp[4] == 4 && wisp_batch_indptr(b)[4] == 8 && wisp_batch_nvals(b) == 4 && wisp_batch_nnz(b) == 8);
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
    CHECK_FAILS(wisp_batch_add_row(b, ids, NULL, WISP_MAX_ROW_FEATURES + (size_t)1), WISP_ELIMIT,
                "WISP_MAX_ROW_FEATURES");
    CHECK_FAILS(wisp_batch_add_row_mixed(b, ids, vals, WISP_MAX_ROW_FEATURES, ids, 1), WISP_ELIMIT,
                "WISP_MAX_ROW_FEATURES");
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
        for (size_t i = 0; i < big.nv; i++) { big.vids[i] = ref_gen_id(); big.vals[i] = (float)i - 3.5f; }
        for (size_t i = 0; i < big.nb; i++) big.bids[i] = ref_gen_id();
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
    CHECK(wisp_batch_rows(NULL) == 0 && wisp_batch_indptr(NULL) == NULL && wisp_batch_vals(NULL) == NULL);
}

/* ---- wrap --------------------------------------------------------------------------- */

static void test_wrap(wisp_engine *eng)
{
    wisp_batch *b;
    uint32_t rp[] = { 0, 2, 2, 5 }, ids[] = { 1, 2, 3, 4, 0xFFFFFFFFu }, vp[] = { 0, 1, 1, 3 };
    float vals[] = { 0.5f, 1.5f, 2.5f, 3.5f, 4.5f };

    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, NULL, NULL, &b));
    CHECK(b->value_mode == WISP_VALUES_NONE && wisp_batch_indptr(b) == rp && wisp_batch_ids(b) == ids);
    char *s = render(b);
    CHECK_MSG(strcmp(s, "|1 2;|;|3 4 4294967295") == 0, "%s", s); free(s);
    uint64_t one = 1;
    CHECK_FAILS(wisp_batch_add_row(b, &one, NULL, 1), WISP_ESTATE, "wraps");
    CHECK_FAILS(wisp_batch_parse_libsvm(b, "1 2\n", 4, 1, 0, NULL, NULL), WISP_ESTATE, "wraps");
    wisp_batch_clear(b);                                     /* refused silently: rows stay */
    CHECK(wisp_batch_rows(b) == 3);
    CHECK_OK(wisp__batch_mark_bad(b, 1, 7, "caller says bad"));
    CHECK(wisp_batch_bad_count(b) == 1);
    wisp_batch_free(b);

    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, NULL, vals, &b));
    CHECK(b->value_mode == WISP_VALUES_ALL && wisp_batch_vals(b) == vals && !wisp_batch_val_ptr(b)
          && wisp_batch_nvals(b) == 5);
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
    CHECK(b->value_mode == WISP_VALUES_ALL && !wisp_batch_val_ptr(b));   /* val_ptr == indptr */
    wisp_batch_free(b);
    CHECK_OK(wisp_batch_wrap(eng, 3, rp, ids, vp_none, NULL, &b));
    CHECK(b->value_mode == WISP_VALUES_NONE && !wisp_batch_vals(b));
    wisp_batch_free(b);
    CHECK_OK(wisp_batch_wrap(eng, 0, NULL, NULL, NULL, NULL, &b));
    CHECK(wisp_batch_rows(b) == 0 && wisp_batch_indptr(b) && wisp_batch_indptr(b)[0] == 0);
    wisp_batch_free(b);
    uint32_t rp0[] = { 0, 0 };
    CHECK_OK(wisp_batch_wrap(eng, 1, rp0, NULL, NULL, NULL, &b));   /* no features: ids may be NULL */
    wisp_batch_free(b);

    /* validation errors, with the row named */
    b = (wisp_batch *)1;
    CHECK_FAILS(wisp_batch_wrap(NULL, 3, rp, ids, NULL, NULL, &b), WISP_EINVAL, "engine");
    CHECK(b == NULL);
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, NULL, NULL, NULL), WISP_EINVAL, "out");
    CHECK_FAILS(wisp_batch_wrap(eng, 3, NULL, ids, NULL, NULL, &b), WISP_EINVAL, "indptr is NULL");
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, NULL, NULL, NULL, &b), WISP_EINVAL, "ids is NULL");
    CHECK_FAILS(wisp_batch_wrap(eng, WISP_MAX_ROWS + (size_t)1, rp, ids, NULL, NULL, &b), WISP_ELIMIT, "WISP_MAX_ROWS");
    uint32_t rp_start[] = { 1, 2, 3 };
    CHECK_FAILS(wisp_batch_wrap(eng, 2, rp_start, ids, NULL, NULL, &b), WISP_EINVAL, "indptr[0] is 1");
    uint32_t rp_dec[] = { 0, 3, 4, 2, 5 };
    CHECK_FAILS(wisp_batch_wrap(eng, 4, rp_dec, ids, NULL, NULL, &b), WISP_EINVAL, "indptr decreases at row 2");
    uint32_t rp_wide[] = { 0, 1, 1 + WISP_MAX_ROW_FEATURES + 1 };
    CHECK_FAILS(wisp_batch_wrap(eng, 2, rp_wide, ids, NULL, NULL, &b), WISP_ELIMIT, "row 1 has 1048577 features");
    /* nnz beyond WISP_MAX_NNZ: 4095 rows of 2^20, then one of 0xFFFF8 */
    uint32_t *rp_big = malloc(4097 * sizeof *rp_big);
    rp_big[0] = 0;
    for (size_t r = 0; r < 4095; r++) rp_big[r + 1] = rp_big[r] + (1u << 20);
    rp_big[4096] = rp_big[4095] + 0xFFFF8u;
    CHECK_FAILS(wisp_batch_wrap(eng, 4096, rp_big, ids, NULL, NULL, &b), WISP_ELIMIT,
                "at row 4095 exceeds WISP_MAX_NNZ");
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
    CHECK_FAILS(wisp_batch_wrap(eng, 3, rp, ids, vp_long, vals, &b), WISP_EINVAL,
                "row 1 has 1 values but only 0 features");
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
    CHECK_FAILS(wisp__batch_mark_bad(b, 5, 1, "x"), WISP_EINVAL, "row 5 out of range");
    CHECK_FAILS(wisp__batch_mark_bad(b, 1, 1, "x"), WISP_EINVAL, "row 1 has features");
    CHECK_OK(wisp__batch_mark_bad(b, 2, 30, "line 30: first"));
    CHECK_FAILS(wisp__batch_mark_bad(b, 2, 31, "x"), WISP_EINVAL, "not after");
    CHECK_FAILS(wisp__batch_mark_bad(b, 0, 31, "x"), WISP_EINVAL, "not after");
    CHECK_OK(wisp__batch_mark_bad(b, 4, 40, NULL));
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
        CHECK_OK(wisp__batch_mark_bad(b, wisp_batch_rows(b) - 1, (uint64_t)i + 100, m));
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
        int st = wisp__batch_mark_bad(b, wisp_batch_rows(b) - 1, 9,
                                      "this message needs room...................................");
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

/* ---- the arena: one block, regions in order, aligned; contents survive every re-layout ---- */

static void test_arena(wisp_engine *eng)
{
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_new(eng, &b));
    if (!b) return;
    CHECK(arena_ok(b) && b->ids == NULL && b->vals == NULL && b->val_ptr == NULL && b->indptr[0] == 0);
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
        CHECK(!memcmp(b->indptr, xr, (rows + 1) * 4) && !memcmp(b->ids, xid, nnz * 4)
              && !memcmp(b->val_ptr, xvp, (rows + 1) * 4) && !memcmp(b->vals, xv, nv * 4));
        free(xr); free(xid); free(xvp); free(xv);
        const void *arena = b->arena;
        wisp_batch_clear(b);                       /* keeps the arena and val_ptr */
        CHECK(b->arena == arena && arena_ok(b) && b->rows == 0 && b->indptr[0] == 0 && b->val_ptr[0] == 0);
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
    const uint32_t *rp = wisp_batch_indptr(b);
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
                  "%s: value '%s': bad row %zu (want %zu) '%s' (want it to name '%s')", where, edge_text[k], row, r,
                  msg, want);
    }
}

/* wisp_batch_wrap's pass over the values (16 at a time, then row by row only when one is not
 * finite): random wrapped batches, ALL and MIXED, with NaN or +-inf at random places (block
 * edges, a row's first and last value, several in a row, none); the bad rows must be exactly
 * the rows holding one, each named once, in row order. */
static void test_wrap_values_pass(wisp_engine *eng)
{
    const float badv[] = { NAN, INFINITY, -INFINITY };
    size_t wrong = 0;
    for (int it = 0; it < 3000; it++) {
        const size_t rows = 1 + rndn(40);
        const int mixed = (int)rndn(2);
        uint32_t rp[41], vp[41], ids[40 * 50];
        float vals[40 * 50];
        int want[40];
        size_t nnz = 0, nv = 0;
        rp[0] = vp[0] = 0;
        const int nbad = rndn(3) == 0 ? 0 : 1 + (int)rndn(4);
        for (size_t r = 0; r < rows; r++) {
            const size_t w = rndn(50), k = mixed ? rndn(w + 1) : w;
            for (size_t j = 0; j < w; j++) ids[nnz + j] = (uint32_t)rndn(1000);
            for (size_t j = 0; j < k; j++) vals[nv + j] = (float)(rndu() * 4 - 2);
            nnz += w;
            nv += k;
            rp[r + 1] = (uint32_t)nnz;
            vp[r + 1] = (uint32_t)nv;
            want[r] = 0;
        }
        for (int i = 0; i < nbad && nv; i++) {
            const size_t at = rndn(4) == 0 ? (rndn(2) ? (nv - 1) : (rndn(nv / 16 + 1) * 16) % nv) : rndn(nv);
            vals[at] = badv[rndn(3)];
        }
        for (size_t r = 0; r < rows; r++) {
            const size_t a = mixed ? vp[r] : rp[r], z = mixed ? vp[r + 1] : rp[r + 1];
            for (size_t j = a; j < z; j++) if (!isfinite(vals[j])) want[r] = 1;
        }
        wisp_batch *b = NULL;
        if (wisp_batch_wrap(eng, rows, rp, ids, mixed ? vp : NULL, nv || !mixed ? vals : NULL, &b) != WISP_OK || !b) {
            wrong++;
            continue;
        }
        size_t nb = wisp_batch_bad_count(b), bi = 0, wanted = 0;
        for (size_t r = 0; r < rows; r++) wanted += (size_t)want[r];
        if (nb != wanted) wrong++;
        for (size_t r = 0; r < rows && nb == wanted; r++) {
            if (!want[r]) continue;
            size_t row = 0;
            uint64_t line = 0;
            const char *msg = "";
            if (wisp_batch_bad_row(b, bi++, &row, &line, &msg) != WISP_OK || row != r
                || !strstr(msg, "not a finite float32"))
                wrong++;
        }
        wisp_batch_free(b);
    }
    CHECK_MSG(wrong == 0, "wrapped batches: %zu with the wrong bad rows", wrong);
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
                CHECK_MSG(fabs(out[3 * k] - p) < 1e-6 && fabs(out[3 * k + 2] - p) < 1e-6, "good rows around %s",
                          edge_text[k]);
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
    wisp_engine *eng = testbatch_engine("test_batch");
    if (!eng) return 1;
    test_builders(eng);
    test_arena(eng);
    test_value_modes(eng);
    test_builder_errors(eng);
    test_wrap(eng);
    test_bad_rows(eng);
    test_values_rule(eng);
    test_wrap_values_pass(eng);
    wisp_engine_free(eng);
    return CHECK_DONE("test_batch");
}
