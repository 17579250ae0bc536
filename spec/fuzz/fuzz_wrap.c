/* fuzz_wrap.c — libFuzzer target: wisp_batch_wrap's validation of caller CSR arrays, and scoring what it accepts. */
/*
 * Input: byte 0: rows (% 33); byte 1: flags (bit 0 val_ptr, bit 1 vals,
 * bit 2 corrupt one indptr entry, bit 3 corrupt one val_ptr entry);
 * byte 2: the corrupted entry; bytes 3..6: the corrupting value (u32);
 * then one byte per row (features: low 4 bits, valued: high 4 bits), then
 * ids and values drawn from the rest.
 * Properties: wrap accepts exactly the arrays that satisfy the documented
 * rules (an independent check below); what it accepts scores like the
 * float64 reference, reading nothing past the arrays (each is an exactly
 * sized heap block, so a stray read is an ASan report); a row is listed
 * bad exactly when one of its values is not finite (the values rule:
 * value bytes 0, 1, 2 are NaN, +inf, -inf). wrap reads indptr, val_ptr
 * and the values (once), never the ids.
 */
#include "fuzz_common.h"

static wisp_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_common();
    float w[40];
    for (int i = 0; i < 40; i++) w[i] = (float)((i * 13 % 11) - 5) * 0.375f;
    const char *path = fuzz_path("wrap.wisp");
    if (wisp_model_write(path, w, 40, -0.5, WISP_F16, NULL, NULL) != WISP_OK ||
        wisp_model_load(fuzz_eng, path, &model) != WISP_OK) {
        fprintf(stderr, "fuzz_wrap: %s\n", wisp_errmsg());
        abort();
    }
    return 0;
}

struct src { const uint8_t *p; size_t n, i; };
static uint8_t next_byte(struct src *s) { return s->i < s->n ? s->p[s->i++] : 0; }

/* The rules of wisp.h section 4, checked plainly. */
static int valid(size_t rows, const uint32_t *rp, const uint32_t *vp, int have_vals)
{
    if (rp[0] != 0) return 0;
    for (size_t r = 0; r < rows; r++) {
        if (rp[r + 1] < rp[r] || rp[r + 1] > WISP_MAX_NNZ || rp[r + 1] - rp[r] > WISP_MAX_ROW_FEATURES) return 0;
    }
    if (vp) {
        if (vp[0] != 0) return 0;
        for (size_t r = 0; r < rows; r++)
            if (vp[r + 1] < vp[r] || vp[r + 1] - vp[r] > rp[r + 1] - rp[r]) return 0;
        if (vp[rows] && !have_vals) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct src s = { data, size, 0 };
    size_t rows = next_byte(&s) % 33;
    int flags = next_byte(&s);
    size_t which = next_byte(&s);
    uint32_t bad = 0;
    for (int i = 0; i < 4; i++) bad |= (uint32_t)next_byte(&s) << (8 * i);
    int use_vp = flags & 1, use_vals = (flags >> 1) & 1;

    uint32_t *rp = malloc((rows + 1) * sizeof *rp), *vp = use_vp ? malloc((rows + 1) * sizeof *vp) : NULL;
    rp[0] = 0;
    if (vp) vp[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        uint8_t b = next_byte(&s);
        uint32_t nf = b & 15, nv = b >> 4;
        rp[r + 1] = rp[r] + nf;
        if (vp) vp[r + 1] = vp[r] + (nv <= nf ? nv : nf);
    }
    if (flags & 4) rp[which % (rows + 1)] = bad;
    if (vp && (flags & 8)) vp[which % (rows + 1)] = bad ^ 0x5a5a5a5au;

    int ok = valid(rows, rp, vp, use_vals);
    /* the arrays' sizes: what the (possibly corrupted) pointers announce, when small */
    size_t nnz = rp[rows], nvals = vp ? vp[rows] : use_vals ? nnz : 0;
    if (ok && (nnz > 1024 || nvals > 1024)) ok = -1;   /* valid, but we do not allocate that much */
    uint32_t *ids = NULL;
    float *vals = NULL;
    if (ok == 1) {
        ids = malloc((nnz ? nnz : 1) * sizeof *ids);
        for (size_t k = 0; k < nnz; k++) {
            uint8_t b = next_byte(&s);
            ids[k] = b == 255 ? 0xFFFFFFFFu : b % 48;   /* ids 40..47 and 2^32-1 are out of range */
        }
        if (use_vals) {
            vals = malloc((nvals ? nvals : 1) * sizeof *vals);
            for (size_t k = 0; k < nvals; k++) {
                const uint8_t vb = next_byte(&s);
                vals[k] = vb == 0 ? NAN : vb == 1 ? INFINITY : vb == 2 ? -INFINITY : (float)((int)vb - 128) / 16.0f;
            }
        }
    }

    wisp_batch *b = (wisp_batch *)1;
    if (ok == -1) {
        /* only the verdict: a non-NULL dummy for the ids (never read by wrap); the values are
         * read once (the values rule), so they are real, zero, exactly sized (at most ~2^20) */
        static uint32_t dummy_ids[1];
        float *zv = use_vals ? calloc(nvals ? nvals : 1, sizeof *zv) : NULL;
        int st = wisp_batch_wrap(fuzz_eng, rows, rp, dummy_ids, vp, zv, &b);
        FUZZ_REQUIRE(st == WISP_OK, "wrap refused valid arrays: %d", st);
        FUZZ_REQUIRE(wisp_batch_bad_count(b) == 0, "zero values made %zu bad rows", wisp_batch_bad_count(b));
        wisp_batch_free(b);
        free(zv);
    } else {
        int st = wisp_batch_wrap(fuzz_eng, rows, rp, ok ? ids : NULL, vp, ok ? vals : NULL, &b);
        if (!ok) {
            FUZZ_REQUIRE(st == WISP_EINVAL || st == WISP_ELIMIT, "wrap accepted invalid arrays (%d)", st);
            FUZZ_REQUIRE(b == NULL, "failed wrap left *out set");
        } else {
            FUZZ_REQUIRE(st == WISP_OK, "wrap refused valid arrays: %d", st);
            FUZZ_REQUIRE(wisp_batch_rows(b) == rows && wisp_batch_nnz(b) == nnz && wisp_batch_nvals(b) == nvals,
                         "counts");
            FUZZ_REQUIRE(wisp_batch_add_row(b, NULL, NULL, 0) == WISP_ESTATE, "a wrapped batch grew");
            /* bad exactly where a value is not finite, in row order */
            size_t bi = 0, nbad = wisp_batch_bad_count(b);
            for (size_t r = 0; r < rows; r++) {
                size_t a = vp ? vp[r] : rp[r], z = vp ? vp[r + 1] : rp[r + 1];
                int nonfinite = 0;
                for (size_t k = a; use_vals && k < z; k++) nonfinite |= !isfinite(vals[k]);
                size_t brow = SIZE_MAX;
                if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, NULL, NULL);
                FUZZ_REQUIRE((brow == r) == nonfinite, "row %zu: %s a non-finite value but %slisted bad", r,
                             nonfinite ? "has" : "has no", brow == r ? "" : "not ");
                if (brow == r) bi++;
            }
            FUZZ_REQUIRE(bi == nbad, "%zu bad rows listed, %zu expected", nbad, bi);
            fuzz_check_scores(model, b);
            wisp_batch_free(b);
        }
    }
    free(ids);
    free(vals);
    free(rp);
    free(vp);
    return 0;
}
