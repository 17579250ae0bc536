/* fuzz_rawtext.c — libFuzzer target: TSV/CSV (wisp_raw_parse_tsv) and JSON lines (wisp_raw_parse_jsonl) under one description, one-shot against chunked, then transformed and scored. */
/*
 * Input: three option bytes, then the text.
 *   byte 0: bit 0 JSON lines (else delimited text); bit 1 ',' (else tab);
 *           bit 2 schema "header" (else "label,x,s,t,k")
 *   byte 1: chunk size of the streaming pass (1 + byte % 97)
 *   byte 2: max_rows per streaming call (byte % 8; 0 = no limit)
 * Properties: the one-shot final parse succeeds (or, for a "header" schema,
 * fails with WISP_EPARSE having consumed only blank lines); feeding the
 * same text in chunks gives the same rows (compared after the transform:
 * ids, values and bad rows with their lines); every id lies inside the
 * table; CPU scores match a float64 reference, NaN for bad rows. Buffers
 * are exactly sized heap copies (ASan sees any read past the text).
 */
#include "fuzz_common.h"

static const char SPEC[] =
    "{\"format\":\"wisp-columns\",\"version\":1,"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"float32\",\"default\":0.5},{\"name\":\"s\",\"dtype\":\"string\"},"
    "{\"name\":\"t\",\"dtype\":\"string\",\"sparse\":true},{\"name\":\"k\",\"dtype\":\"int64\"}],"
    "\"columns\":["
    "{\"name\":\"x\",\"type\":\"numeric\",\"key\":\"x\",\"normalizer\":{\"type\":\"standard\",\"mean\":1.5,\"std\":3},\"offset\":0},"
    "{\"name\":\"x_b\",\"type\":\"bucketized\",\"source\":{\"type\":\"numeric\",\"key\":\"x\"},\"boundaries\":[0,1,2.5,10],\"offset\":1},"
    "{\"name\":\"s\",\"type\":\"hash_bucket\",\"key\":\"s\",\"buckets\":100,\"offset\":6},"
    "{\"name\":\"k\",\"type\":\"hash_bucket\",\"key\":\"k\",\"buckets\":77,\"offset\":106},"
    "{\"name\":\"t\",\"type\":\"vocabulary_list\",\"key\":\"t\",\"vocabulary\":[\"v0\",\"v1\",\"v2\"],\"num_oov_buckets\":4,\"offset\":183},"
    "{\"name\":\"k_id\",\"type\":\"identity\",\"key\":\"k\",\"buckets\":50,\"default_value\":49,\"offset\":190},"
    "{\"name\":\"kxs\",\"type\":\"crossed\",\"keys\":[\"k\",\"s\",{\"type\":\"bucketized\",\"source\":{\"type\":\"numeric\",\"key\":\"x\"},\"boundaries\":[0,1,2.5,10]}],\"buckets\":1003,\"offset\":240},"
    "{\"name\":\"txs\",\"type\":\"crossed\",\"keys\":[\"t\",\"s\"],\"buckets\":500,\"hash_key\":\"0x1234\",\"offset\":1243}"
    "],\"num_features\":1743}";

static wisp_columns *cols;
static wisp_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_common();
    if (wisp_columns_parse(SPEC, sizeof SPEC - 1, &cols) != WISP_OK) {
        fprintf(stderr, "fuzz_rawtext: %s\n", wisp_errmsg());
        abort();
    }
    uint64_t nf = wisp_columns_num_features(cols);
    float *w = malloc(nf * sizeof *w);
    for (uint64_t i = 0; i < nf; i++) w[i] = (float)((int)(i * 7919 % 401) - 200) / 256.0f;
    const char *path = fuzz_path("rawtext.wisp");
    if (wisp_model_write(path, w, nf, 0.125, WISP_F32, "source=fuzz", SPEC) != WISP_OK ||
        wisp_model_load(fuzz_eng, path, &model) != WISP_OK) {
        fprintf(stderr, "fuzz_rawtext: %s\n", wisp_errmsg());
        abort();
    }
    free(w);
    return 0;
}

typedef int (*parse_fn)(wisp_raw *, const char *, size_t, int, size_t, uint64_t *, size_t *);

static wisp_raw *new_raw(int jsonl, const char *schema, int delim)
{
    wisp_raw *r = NULL;
    int st = wisp_raw_new(fuzz_eng, cols, &r);
    FUZZ_REQUIRE(st == WISP_OK, "raw_new -> %d", st);
    if (!jsonl) {
        st = wisp_raw_set_schema(r, schema, delim);
        FUZZ_REQUIRE(st == WISP_OK, "set_schema -> %d", st);
    }
    return r;
}

/* The transform of r as text: one line per row ("!line" for bad rows). */
static char *render(const wisp_raw *r, wisp_batch **keep)
{
    wisp_batch *b = NULL;
    FUZZ_REQUIRE(wisp_batch_new(fuzz_eng, &b) == WISP_OK, "batch_new");
    int st = wisp_transform(r, b);
    FUZZ_REQUIRE(st == WISP_OK, "transform -> %d", st);
    /* the transform may add bad rows (NaN in a numeric column), never drop one */
    FUZZ_REQUIRE(wisp_batch_rows(b) == wisp_raw_rows(r) && wisp_batch_bad_count(b) >= wisp_raw_bad_count(r),
                 "transform: %zu rows (%zu bad) from %zu raw rows (%zu bad)", wisp_batch_rows(b),
                 wisp_batch_bad_count(b), wisp_raw_rows(r), wisp_raw_bad_count(r));
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    size_t rows = wisp_batch_rows(b), nbad = wisp_batch_bad_count(b), bi = 0, cap = 64, n = 0;
    uint64_t nf = wisp_columns_num_features(cols);
    char *s = malloc(cap);
    s[0] = '\0';
    for (size_t i = 0; i < rows; i++) {
        size_t brow = SIZE_MAX;
        uint64_t bline = 0;
        if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, &bline, NULL);
        size_t a = rp[i], z = rp[i + 1], nv = vp ? vp[i + 1] - vp[i] : vals ? z - a : 0, v0 = vp ? vp[i] : a;
        size_t need = n + 64 + (z - a) * 40;
        if (need > cap) { cap = need * 2; s = realloc(s, cap); }
        if (brow == i) {
            bi++;
            FUZZ_REQUIRE(z == a, "bad row %zu has features", i);
            n += (size_t)sprintf(s + n, "!%llu\n", (unsigned long long)bline);
            continue;
        }
        for (size_t k = a; k < z; k++) {
            FUZZ_REQUIRE(ids[k] < nf, "row %zu: id %u outside the table", i, ids[k]);
            if (k - a < nv) n += (size_t)sprintf(s + n, "%u:%a ", ids[k], (double)vals[v0 + k - a]);
            else n += (size_t)sprintf(s + n, "%u ", ids[k]);
        }
        s[n++] = '\n';
        s[n] = '\0';
    }
    if (keep) *keep = b;
    else wisp_batch_free(b);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    int jsonl = data[0] & 1, delim = data[0] & 2 ? ',' : '\t';
    const char *schema = data[0] & 4 ? "header" : "label,x,s,t,k";
    size_t chunk = 1 + data[1] % 97, max_rows = data[2] % 8, len = size - 3;
    char *text = malloc(len ? len : 1);
    memcpy(text, data + 3, len);
    parse_fn parse = jsonl ? wisp_raw_parse_jsonl : wisp_raw_parse_tsv;

    /* one call */
    wisp_raw *r1 = new_raw(jsonl, schema, delim);
    uint64_t ln = 0;
    size_t used = 0;
    int st = parse(r1, text, len, 1, 0, &ln, &used);
    if (st != WISP_OK) {
        /* only a bad header fails a call; what was consumed before it are blank lines */
        FUZZ_REQUIRE(!jsonl && (data[0] & 4) && st == WISP_EPARSE && strstr(wisp_errmsg(), "header"),
                     "final parse -> %d (%s), used %zu", st, wisp_err_name(st), used);
        for (size_t i = 0; i < used; i++)
            FUZZ_REQUIRE(text[i] == '\n' || text[i] == '\r', "a failed header parse consumed byte %zu (0x%02x)", i,
                         (unsigned)(unsigned char)text[i]);
        wisp_raw_free(r1);
        free(text);
        return 0;
    }
    FUZZ_REQUIRE(used == len, "final parse used %zu of %zu bytes", used, len);
    wisp_batch *b1 = NULL;
    char *want = render(r1, &b1);
    fuzz_check_scores(model, b1);
    wisp_batch_free(b1);

    /* chunks through a growing buffer, with max_rows, as a streaming reader */
    wisp_raw *r2 = new_raw(jsonl, schema, delim);
    char *buf = NULL;
    size_t have = 0, fed = 0;
    uint64_t ln2 = 0;
    for (;;) {
        int final = fed == len;
        size_t u = 0;
        char *exact = malloc(have ? have : 1);
        if (have) memcpy(exact, buf, have);
        st = parse(r2, exact, have, final, max_rows, &ln2, &u);
        free(exact);
        FUZZ_REQUIRE(st == WISP_OK && u <= have, "streaming parse -> %d (%s), used %zu of %zu", st,
                     wisp_err_name(st), u, have);
        if (have > u) memmove(buf, buf + u, have - u);
        have -= u;
        if (final && have == 0) break;
        if (u > 0 && max_rows) continue;
        if (final) FUZZ_REQUIRE(u > 0, "final streaming call made no progress with %zu bytes left", have);
        else {
            size_t k = len - fed < chunk ? len - fed : chunk;
            buf = realloc(buf, have + k + 1);
            memcpy(buf + have, text + fed, k);
            have += k;
            fed += k;
        }
    }
    free(buf);
    FUZZ_REQUIRE(ln2 == ln, "streaming counted %llu lines, one call %llu", (unsigned long long)ln2,
                 (unsigned long long)ln);
    char *got = render(r2, NULL);
    FUZZ_REQUIRE(strcmp(got, want) == 0, "streaming gives other rows than one call:\n%s---\n%s", got, want);

    free(got);
    free(want);
    wisp_raw_free(r1);
    wisp_raw_free(r2);
    free(text);
    return 0;
}
