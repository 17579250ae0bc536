/* fuzz_vw.c — libFuzzer target: wisp_batch_parse_vw one-shot against non-final and chunked streaming, batch invariants, and wisp_import_vw on the same bytes. */
/*
 * Input: two option bytes, then the text.
 *   byte 0: the options: bits 8 + (b & 7) (8..15), -q ab when b & 8, -q aa when
 *           b & 16, --noconstant when b & 32, --hash all when b & 64,
 *           --hash_seed 7 when b & 128
 *   byte 1: chunk size for the streaming pass (1 + byte % 61) and max_rows (byte % 5)
 * Properties checked (any difference traps):
 *   1. one call with final=1 returns WISP_OK, consumes everything and counts every line;
 *   2. every id is below 2^bits, every value finite (1.0 is stored as binary),
 *      every bad row is an empty row whose message starts with "line N: " and says
 *      ", at column ";
 *   3. feeding the text in chunks with final=0 and max_rows, as a streaming reader
 *      would, gives the same batch (rows, ids, values, bad rows, messages);
 *   4. wisp_import_vw of the same bytes as a model file never crashes and, when it
 *      succeeds, writes a loadable model of 2^bits weights whose options parse.
 * Buffers passed to the parser are exactly sized heap copies, so reading a
 * byte past the text is an ASan report.
 */
#include "fuzz_common.h"

static int options_for(uint8_t b, char *buf, size_t n)
{
    int bits = 8 + (b & 7);
    snprintf(buf, n, "-b %d%s%s%s%s%s", bits, b & 8 ? " -q ab" : "", b & 16 ? " -q aa" : "",
             b & 32 ? " --noconstant" : "", b & 64 ? " --hash all" : "", b & 128 ? " --hash_seed 7" : "");
    return bits;
}

static wisp_batch *new_batch(void)
{
    wisp_batch *b = NULL;
    int st = wisp_batch_new(fuzz_eng, &b);
    FUZZ_REQUIRE(st == WISP_OK, "batch_new -> %d", st);
    return b;
}

static void check_invariants(const wisp_batch *b, int bits)
{
    size_t rows = wisp_batch_rows(b), nbad = wisp_batch_bad_count(b), bi = 0;
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    for (size_t r = 0; r < rows; r++) {
        size_t brow = SIZE_MAX;
        uint64_t line = 0;
        const char *msg = NULL;
        if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, &line, &msg);
        if (brow == r) {
            bi++;
            char prefix[40];
            snprintf(prefix, sizeof prefix, "line %llu: ", (unsigned long long)line);
            FUZZ_REQUIRE(rp[r + 1] == rp[r], "bad row %zu has features", r);
            FUZZ_REQUIRE(msg && !strncmp(msg, prefix, strlen(prefix)) &&
                         (strstr(msg, ", at column ") || strstr(msg, "WISP_MAX_LINE_BYTES")),
                         "bad row %zu: message '%s'", r, msg ? msg : "(null)");
            continue;
        }
        size_t nv = vp ? vp[r + 1] - vp[r] : vals ? rp[r + 1] - rp[r] : 0, v0 = vp ? vp[r] : rp[r];
        for (size_t k = rp[r]; k < rp[r + 1]; k++) {
            FUZZ_REQUIRE(ids[k] >> bits == 0, "row %zu: id %u beyond 2^%d", r, ids[k], bits);
            if (k - rp[r] < nv) {
                float v = vals[v0 + (k - rp[r])];
                FUZZ_REQUIRE(isfinite(v) && v != 1.0f, "row %zu: value %g", r, (double)v);
            }
        }
    }
    FUZZ_REQUIRE(bi == nbad, "%zu of %zu bad rows matched rows", bi, nbad);
}

static void same_batches(const wisp_batch *a, const wisp_batch *b)
{
    size_t rows = wisp_batch_rows(a);
    FUZZ_REQUIRE(rows == wisp_batch_rows(b) && wisp_batch_nnz(a) == wisp_batch_nnz(b) &&
                 wisp_batch_nvals(a) == wisp_batch_nvals(b) && wisp_batch_bad_count(a) == wisp_batch_bad_count(b),
                 "batches differ: rows %zu/%zu nnz %zu/%zu bad %zu/%zu", rows, wisp_batch_rows(b), wisp_batch_nnz(a),
                 wisp_batch_nnz(b), wisp_batch_bad_count(a), wisp_batch_bad_count(b));
    size_t nnz = wisp_batch_nnz(a), nvals = wisp_batch_nvals(a);
    FUZZ_REQUIRE(!memcmp(wisp_batch_indptr(a), wisp_batch_indptr(b), (rows + 1) * sizeof(uint32_t)), "indptr differs");
    FUZZ_REQUIRE(!nnz || !memcmp(wisp_batch_ids(a), wisp_batch_ids(b), nnz * sizeof(uint32_t)), "ids differ");
    FUZZ_REQUIRE(!nvals || !memcmp(wisp_batch_vals(a), wisp_batch_vals(b), nvals * sizeof(float)), "values differ");
    for (size_t i = 0; i < wisp_batch_bad_count(a); i++) {
        size_t r1, r2; uint64_t l1, l2; const char *m1, *m2;
        wisp_batch_bad_row(a, i, &r1, &l1, &m1);
        wisp_batch_bad_row(b, i, &r2, &l2, &m2);
        FUZZ_REQUIRE(r1 == r2 && l1 == l2 && !strcmp(m1, m2), "bad row %zu: '%s' vs '%s'", i, m1, m2);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    fuzz_init_common();
    char opts[128];
    int bits = options_for(data[0], opts, sizeof opts);
    size_t chunk = 1 + data[1] % 61, max_rows = data[1] % 5;
    size_t len = size - 2;
    char *text = malloc(len ? len : 1);
    memcpy(text, data + 2, len);
    wisp_vw *v = NULL;
    int st = wisp_vw_new(opts, &v);
    FUZZ_REQUIRE(st == WISP_OK, "wisp_vw_new('%s') -> %d", opts, st);

    /* 1, 2. one call */
    wisp_batch *b1 = new_batch();
    uint64_t ln = 0, lines = 0;
    size_t used = 0;
    st = wisp_batch_parse_vw(b1, v, text, len, 1, 0, &ln, &used);
    FUZZ_REQUIRE(st == WISP_OK, "final parse -> %d", st);
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (len && text[len - 1] != '\n') lines++;
    FUZZ_REQUIRE(used == len && ln == lines, "used %zu of %zu, %llu lines of %llu", used, len,
                 (unsigned long long)ln, (unsigned long long)lines);
    check_invariants(b1, bits);

    /* 3. streaming through a growing buffer */
    wisp_batch *b2 = new_batch();
    char *buf = NULL;
    size_t have = 0, pos = 0;
    uint64_t sln = 0;
    for (int guard = 0; guard < 1000000; guard++) {
        size_t add = len - have < chunk ? len - have : chunk;
        if (add) {
            char *nb = malloc(have + add);           /* exactly sized again */
            if (have) memcpy(nb, buf, have);
            memcpy(nb + have, text + have, add);
            free(buf);
            buf = nb;
            have += add;
        }
        int final = have == len;
        size_t u = 0;
        st = wisp_batch_parse_vw(b2, v, buf ? buf + pos : "", have - pos, final, max_rows, &sln, &u);
        FUZZ_REQUIRE(st == WISP_OK, "streaming parse -> %d", st);
        pos += u;
        if (final && pos == len) break;
        FUZZ_REQUIRE(!(final && u == 0 && max_rows == 0), "a final call consumed nothing at %zu of %zu", pos, len);
    }
    FUZZ_REQUIRE(pos == len && sln == ln, "streaming stopped at %zu of %zu", pos, len);
    same_batches(b1, b2);
    free(buf);
    wisp_batch_free(b1);
    wisp_batch_free(b2);
    wisp_vw_free(v);

    /* 4. the same bytes as a model file (tables of at most 2^16 weights: libFuzzer's memory limit) */
    int small = 1;
    for (size_t i = 0; i + 5 < len; i++)
        if ((i == 0 || text[i - 1] == '\n') && !memcmp(text + i, "bits:", 5)) {
            size_t k = i + 5, d = 0;
            long nb = 0;
            while (k < len && text[k] >= '0' && text[k] <= '9' && d < 12) { nb = nb * 10 + (text[k] - '0'); k++; d++; }
            if (nb > 16 || d >= 12) small = 0;
        }
    const char *src = fuzz_path("model.txt"), *dst = fuzz_path("model.wisp");
    if (small && fuzz_write_file(src, data + 2, len) == 0 && wisp_import_vw(src, dst, WISP_F32) == WISP_OK) {
        wisp_model *m = NULL;
        st = wisp_model_load(fuzz_eng, dst, &m);
        FUZZ_REQUIRE(st == WISP_OK, "imported model does not load -> %d", st);
        st = wisp_vw_from_model(m, &v);
        FUZZ_REQUIRE(st == WISP_OK, "imported model's options -> %d", st);
        FUZZ_REQUIRE(wisp_model_num_features(m) == (uint64_t)1 << wisp_vw_bits(v), "table of %llu weights for -b %d",
                     (unsigned long long)wisp_model_num_features(m), wisp_vw_bits(v));
        wisp_vw_free(v);
        wisp_model_free(m);
    }
    free(text);
    return 0;
}
