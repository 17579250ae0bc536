/* fuzz_columns.c — libFuzzer target: wisp_columns_parse on hostile feature-column descriptions (JSON from model files), then one row through the transform. */
/*
 * Input: the description text (not NUL-terminated: an exactly sized copy).
 * Properties: no crash; a failure is WISP_EPARSE / WISP_ELIMIT with a message
 * starting "columns"; a success has consistent accessors (names, types,
 * slices inside num_features, inputs found by name), and a row with one
 * value per input transforms into a batch row whose ids all lie inside the
 * table (or the row is bad, with no features).
 */
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_common();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    wisp_columns *c = (wisp_columns *)1;
    int st = wisp_columns_parse(text, size, &c);
    free(text);
    if (st != WISP_OK) {
        FUZZ_REQUIRE(c == NULL, "failed parse left *out set");
        FUZZ_REQUIRE(st == WISP_EPARSE || st == WISP_ELIMIT, "status %d (%s)", st, wisp_err_name(st));
        FUZZ_REQUIRE(strncmp(wisp_errmsg(), "columns", 7) == 0, "message does not start with 'columns'");
        return 0;
    }
    uint64_t nf = wisp_columns_num_features(c);
    size_t nc = wisp_columns_count(c), ni = wisp_columns_num_inputs(c);
    for (size_t i = 0; i < nc; i++) {
        FUZZ_REQUIRE(wisp_columns_name(c, i) && wisp_columns_type(c, i), "column %zu", i);
        uint64_t off = wisp_columns_offset(c, i), sz = wisp_columns_size(c, i);
        FUZZ_REQUIRE(off <= nf && sz <= nf - off, "column %zu: slice [%llu, +%llu) past %llu", i,
                     (unsigned long long)off, (unsigned long long)sz, (unsigned long long)nf);
    }
    FUZZ_REQUIRE(wisp_columns_name(c, nc) == NULL && wisp_columns_input_name(c, ni) == NULL, "out of range");
    for (size_t i = 0; i < ni; i++) {
        const char *name = wisp_columns_input_name(c, i);
        int dt = wisp_columns_input_dtype(c, i);
        FUZZ_REQUIRE(name && dt >= WISP_INPUT_FLOAT32 && dt <= WISP_INPUT_STRING, "input %zu", i);
        FUZZ_REQUIRE(wisp_columns_input_index(c, name, strlen(name)) == (long)i, "input '%s' not found by name", name);
    }

    /* one row: a value of the right type for every input (two for a sparse one) */
    if (ni <= 256) {
        wisp_raw *r = NULL;
        wisp_batch *b = NULL;
        st = wisp_raw_new(fuzz_eng, c, &r);
        FUZZ_REQUIRE(st == WISP_OK, "raw_new -> %d", st);
        FUZZ_REQUIRE(wisp_batch_new(fuzz_eng, &b) == WISP_OK, "batch_new");
        FUZZ_REQUIRE(wisp_raw_row_begin(r, 1) == WISP_OK, "row_begin");
        for (size_t i = 0; i < ni; i++) {
            int reps = wisp_columns_input_sparse(c, i) ? 2 : 1;
            for (int k = 0; k < reps; k++) {
                switch (wisp_columns_input_dtype(c, i)) {
                case WISP_INPUT_FLOAT32: st = wisp_raw_add_float(r, i, 0.75 + k); break;
                case WISP_INPUT_INT64:   st = wisp_raw_add_int(r, i, 3 + k); break;
                default:                 st = wisp_raw_add_string(r, i, k ? "b" : "a", 1); break;
                }
                FUZZ_REQUIRE(st == WISP_OK, "add to input %zu -> %d", i, st);
            }
        }
        st = wisp_raw_row_end(r);
        FUZZ_REQUIRE(st == WISP_OK, "row_end -> %d", st);
        st = wisp_transform(r, b);
        /* a crossed column over many sparse keys can exceed a row's feature limit */
        FUZZ_REQUIRE(st == WISP_OK || st == WISP_ELIMIT, "transform -> %d", st);
        if (st == WISP_OK) {
            FUZZ_REQUIRE(wisp_batch_rows(b) == 1, "transform made %zu rows", wisp_batch_rows(b));
            const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b);
            for (uint32_t k = rp[0]; k < rp[1]; k++)
                FUZZ_REQUIRE(ids[k] < nf, "feature id %u outside the table of %llu", ids[k], (unsigned long long)nf);
            if (wisp_batch_bad_count(b)) FUZZ_REQUIRE(rp[1] == rp[0], "a bad row with features");
        }
        wisp_batch_free(b);
        wisp_raw_free(r);
    }
    wisp_columns_free(c);
    return 0;
}
