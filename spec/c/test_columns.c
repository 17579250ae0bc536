/* test_columns.c — feature columns in C: TensorFlow's fingerprints (golden), number parsing, the transform against an independent reference, scores, text readers, misuse and allocation failures. */
#include "batch/raw.h"
#include "score/score.h"
#include "parse/parse.h"
#include "parse/textnum.h"
#include "check.h"
#include "testutil.h"
#include "testrand.h"
#include "testcols.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- small tools --------------------------------------------------------------- */





/* ---- 1. TensorFlow's fingerprints ------------------------------------------------ */

static void test_golden_fingerprints(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tf_golden_fingerprint.json", data_dir());
    size_t len;
    char *text = slurp(path, &len);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    if (!text) return;
    CHECK(strstr(text, "\"generator\": \"spec/data/gen/tf_golden.py") != NULL);
    int nfp = 0, ncross = 0, section = 0;
    unsigned char buf[1024];
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"fingerprint64\"")) { section = 1; continue; }
        if (strstr(line, "\"cross\"")) { section = 2; continue; }
        if (section == 1 && line[0] == '[' && line[1] == '"') {
            char *q = strchr(line + 2, '"');
            size_t n = unhex(line + 2, (size_t)(q - line - 2), buf);
            char *d = strchr(q + 1, '"') + 1;
            uint64_t want = strtoull(d, NULL, 10);
            uint64_t got = wisp_fingerprint64(buf, n);
            CHECK_MSG(got == want, "Fingerprint64 of %zu bytes: wisp %" PRIu64 ", TensorFlow %" PRIu64, n, got, want);
            nfp++;
        } else if (section == 2 && line[0] == '[' && line[1] == '[') {
            /* [["s:hex", "i:dec", ...], buckets, "key", "result"] */
            char *p = line + 2, *end = strchr(line, ']');
            uint64_t key, want, buckets, feats[16];
            int nf = 0;
            while (p < end && nf < 16) {
                char *s = strchr(p, '"');
                if (!s || s > end) break;
                char *e = strchr(s + 1, '"');
                if (s[1] == 's') {
                    size_t n = unhex(s + 3, (size_t)(e - s - 3), buf);
                    feats[nf++] = wisp_fingerprint64(buf, n);
                } else {
                    feats[nf++] = (uint64_t)strtoll(s + 3, NULL, 10);
                }
                p = e + 1;
            }
            char *rest = end + 1;
            buckets = strtoull(rest + 1, &rest, 10);
            key = strtoull(strchr(rest, '"') + 1, &rest, 10);
            want = strtoull(strchr(rest + 1, '"') + 1, NULL, 10);
            uint64_t h = key ? key : 0xDECAFCAFFEull;
            for (int i = 0; i < nf; i++) h = wisp_fingerprint_cat64(h, feats[i]);
            uint64_t got = buckets ? h % buckets : h % (uint64_t)INT64_MAX;
            CHECK_MSG(got == want, "cross of %d inputs, key %" PRIu64 ", %" PRIu64 " buckets: wisp %" PRIu64 ", TensorFlow %" PRIu64,
                      nf, key, buckets, got, want);
            ncross++;
        }
    }
    CHECK_MSG(nfp >= 190, "only %d fingerprints read", nfp);
    CHECK_MSG(ncross >= 40, "only %d crosses read", ncross);
    free(text);
    /* the published vector */
    const char *in[3] = { "batch1-FC1-F1", "batch1-FC2-F1", "batch1-FC3-F1" };
    uint64_t h = 0xDECAFCAFFEull;
    for (int i = 0; i < 3; i++) h = wisp_fingerprint_cat64(h, wisp_fingerprint64(in[i], strlen(in[i])));
    CHECK(h % (uint64_t)INT64_MAX == 1971693436396284976ull);
    CHECK(h % 100 == 83);
}

/* ---- 2. numbers ----------------------------------------------------------------------- */

static void test_numbers(void)
{
    char s[64];
    int mismatches = 0;
    for (int i = 0; i < 200000; i++) {
        int nd = 1 + (int)rndn(12), dot = (int)rndn((size_t)nd + 2), ex = (int)rndn(40) - 20;
        size_t n = 0;
        if (rnd() & 1) s[n++] = '-';
        for (int k = 0; k < nd; k++) {
            if (k == dot) s[n++] = '.';
            s[n++] = (char)('0' + (k == 0 && nd > 1 ? 1 + rndn(9) : rndn(10)));
        }
        if (rnd() & 1) n += (size_t)snprintf(s + n, sizeof s - n, "e%d", ex);
        s[n] = '\0';
        float got, want = strtof(s, NULL);
        if (wisp__textnum_f32(s, n, 0, &got) != 0 || memcmp(&got, &want, 4) != 0) {
            if (mismatches++ < 5) fprintf(stderr, "wisp__textnum_f32('%s') = %.9g, strtof %.9g\n", s, (double)got, (double)want);
        }
    }
    CHECK_MSG(mismatches == 0, "%d of 200000 decimals parse differently from strtof", mismatches);
    /* ties and long mantissas go through strtof */
    const char *hard[] = { "16777217", "0.1", "3.4028235e38", "3.4028236e38", "1e-46", "1.00000005960464477539062500001",
                           "  7.25 ", "+0.5", "-0", "123456789012345678901234567890" };
    for (size_t i = 0; i < sizeof hard / sizeof *hard; i++) {
        float got, want = strtof(hard[i], NULL);
        CHECK_MSG(wisp__textnum_f32(hard[i], strlen(hard[i]), 0, &got) == 0 && memcmp(&got, &want, 4) == 0, "'%s'", hard[i]);
    }
    float f;
    CHECK(wisp__textnum_f32("nan", 3, 1, &f) == 0 && isnan(f));
    CHECK(wisp__textnum_f32("-Infinity", 9, 1, &f) == 0 && f == -INFINITY);
    CHECK(wisp__textnum_f32("inf", 3, 0, &f) == -1);
    const char *notnum[] = { "", "  ", "abc", "1e", "1.2.3", "0x10", "--1", "1,5", "." };
    for (size_t i = 0; i < sizeof notnum / sizeof *notnum; i++)
        CHECK_MSG(wisp__textnum_f32(notnum[i], strlen(notnum[i]), 1, &f) == -1, "'%s' parsed", notnum[i]);
    int64_t v;
    CHECK(wisp__textnum_i64("9223372036854775807", 19, &v) == 0 && v == INT64_MAX);
    CHECK(wisp__textnum_i64("-9223372036854775808", 20, &v) == 0 && v == INT64_MIN);
    CHECK(wisp__textnum_i64("9223372036854775808", 19, &v) == -2);
    CHECK(wisp__textnum_i64("-9223372036854775809", 20, &v) == -2);
    CHECK(wisp__textnum_i64("99999999999999999999999", 23, &v) == -2);
    CHECK(wisp__textnum_i64(" +42 ", 5, &v) == 0 && v == 42);
    CHECK(wisp__textnum_i64("4.0", 3, &v) == -1);
    CHECK(wisp__textnum_i64("-", 1, &v) == -1);
}

/* ---- 3. the transform against an independent reference ------------------------------- */

static const char *SPEC =
    "{\"format\":\"wisp-columns\",\"version\":1,\n"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"float32\",\"default\":0.5},{\"name\":\"s\",\"dtype\":\"string\"},\n"
    "  {\"name\":\"t\",\"dtype\":\"string\",\"sparse\":true},{\"name\":\"k\",\"dtype\":\"int64\"}],\n"
    "\"columns\":[\n"
    " {\"name\":\"x\",\"type\":\"numeric\",\"key\":\"x\",\"normalizer\":{\"type\":\"standard\",\"mean\":1.5,\"std\":3},\"offset\":0},\n"
    " {\"name\":\"x_bucketized\",\"type\":\"bucketized\",\"source\":{\"type\":\"numeric\",\"key\":\"x\"},\"boundaries\":[0,1,2.5,10],\"offset\":1},\n"
    " {\"name\":\"s\",\"type\":\"hash_bucket\",\"key\":\"s\",\"buckets\":1000,\"offset\":6},\n"
    " {\"name\":\"k\",\"type\":\"hash_bucket\",\"key\":\"k\",\"buckets\":777,\"offset\":1006},\n"
    " {\"name\":\"t\",\"type\":\"vocabulary_list\",\"key\":\"t\",\"vocabulary\":[\"v0\",\"v1\",\"v2\"],\"num_oov_buckets\":4,\"offset\":1783},\n"
    " {\"name\":\"k_id\",\"type\":\"identity\",\"key\":\"k\",\"buckets\":50,\"default_value\":49,\"offset\":1790},\n"
    " {\"name\":\"k_X_s_X_x_bk\",\"type\":\"crossed\",\"keys\":[\"k\",\"s\",{\"type\":\"bucketized\",\"source\":{\"type\":\"numeric\",\"key\":\"x\"},\"boundaries\":[0,1,2.5,10]}],\"buckets\":100003,\"offset\":1840},\n"
    " {\"name\":\"t_X_s\",\"type\":\"crossed\",\"keys\":[\"t\",\"s\"],\"buckets\":5000,\"hash_key\":\"0x1234\",\"offset\":101843}\n"
    "],\"num_features\":106843}";

struct refrow {
    bool has_x; float x;
    bool has_s; char s[24]; size_t slen;
    int nt; char t[4][8]; size_t tlen[4];
    bool has_k; int64_t k;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t ref_bucket(float x)
{
    static const float b[4] = { 0, 1, 2.5f, 10 };
    uint64_t k = 0;
    while (k < 4 && !(x < b[k])) k++;           /* upper_bound, linearly */
    return k;
}

static uint64_t fp_str(const char *s, size_t n) { return wisp_fingerprint64(s, n); }
static uint64_t fp_dec(int64_t v)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%" PRId64, v);
    return wisp_fingerprint64(buf, (size_t)n);
}

/* The expected binary ids (sorted) and the numeric value of one row. */
static size_t ref_ids(const struct refrow *r, uint64_t *out, float *xv)
{
    size_t n = 0;
    float x = r->has_x ? r->x : 0.5f;
    float y = (x - 1.5f) / 3.0f;
    *xv = y;
    uint64_t bk = ref_bucket(x);
    out[n++] = 1 + bk;
    const char *s = r->has_s ? r->s : "";
    size_t sl = r->has_s ? r->slen : 0;
    if (sl) out[n++] = 6 + fp_str(s, sl) % 1000;
    int64_t k = r->has_k ? r->k : -1;
    if (k != -1) out[n++] = 1006 + fp_dec(k) % 777;
    for (int i = 0; i < r->nt; i++) {
        uint64_t id = 3 + fp_str(r->t[i], r->tlen[i]) % 4;
        for (int v = 0; v < 3; v++) {
            char name[3] = { 'v', (char)('0' + v), 0 };
            if (r->tlen[i] == 2 && !memcmp(r->t[i], name, 2)) id = (uint64_t)v;
        }
        out[n++] = 1783 + id;
    }
    if (k != -1) out[n++] = 1790 + (k >= 0 && k < 50 ? (uint64_t)k : 49);
    /* cross: the bucketized key is sparse, so it goes first; then k, s (dense, no drops) */
    uint64_t h = 0xDECAFCAFFEull;
    h = wisp_fingerprint_cat64(h, bk);
    h = wisp_fingerprint_cat64(h, (uint64_t)k);
    h = wisp_fingerprint_cat64(h, fp_str(s, sl));
    out[n++] = 1840 + h % 100003;
    /* t (sparse) x s (dense) with key 0x1234 */
    for (int i = 0; i < r->nt; i++) {
        uint64_t g = wisp_fingerprint_cat64(wisp_fingerprint_cat64(0x1234, fp_str(r->t[i], r->tlen[i])), fp_str(s, sl));
        out[n++] = 101843 + g % 5000;
    }
    qsort(out, n, sizeof *out, cmp_u64);
    return n;
}

static void random_row(struct refrow *r)
{
    memset(r, 0, sizeof *r);
    r->has_x = rndn(10) != 0;
    static const float xs[] = { -1, 0, 0.5f, 1, 2.5f, 2.4999998f, 9.999999f, 10, 1e6f, -0.0f };
    r->x = rndn(3) ? xs[rndn(10)] : (float)(rndu() * 20 - 5);
    r->has_s = rndn(10) != 0;
    r->slen = (size_t)snprintf(r->s, sizeof r->s, "%08" PRIx64, rnd_zipf(1u << 30));
    if (rndn(20) == 0) r->slen = 0;                       /* a present "" */
    r->nt = (int)rndn(4);
    for (int i = 0; i < r->nt; i++)
        r->tlen[i] = (size_t)snprintf(r->t[i], sizeof r->t[i], rndn(2) ? "v%d" : "w%d", (int)rndn(5));
    r->has_k = rndn(8) != 0;
    static const int64_t ks[] = { -1, 0, 49, 50, -7, INT64_MAX, INT64_MIN };
    r->k = rndn(3) ? ks[rndn(7)] : (int64_t)rndn(60);
}

static void add_ref_row(wisp_raw *raw, const struct refrow *r, uint64_t line)
{
    CHECK_OK(wisp_raw_row_begin(raw, line));
    if (r->has_x) CHECK_OK(wisp_raw_add_float(raw, 0, r->x));
    if (r->has_s) CHECK_OK(wisp_raw_add_string(raw, 1, r->s, r->slen));
    for (int i = 0; i < r->nt; i++) CHECK_OK(wisp_raw_add_string(raw, 2, r->t[i], r->tlen[i]));
    if (r->has_k) CHECK_OK(wisp_raw_add_int(raw, 3, r->k));
    CHECK_OK(wisp_raw_row_end(raw));
}

static void test_transform_reference(wisp_engine *eng)
{
    wisp_columns *c = NULL;
    CHECK_OK(wisp_columns_parse(SPEC, strlen(SPEC), &c));
    if (!c) return;
    CHECK(wisp_columns_num_features(c) == 106843);
    CHECK(wisp_columns_count(c) == 8);
    CHECK(!strcmp(wisp_columns_type(c, 6), "crossed") && wisp_columns_offset(c, 6) == 1840 && wisp_columns_size(c, 6) == 100003);
    CHECK(wisp_columns_input_index(c, "t", 1) == 2 && wisp_columns_input_index(c, "q", 1) == -1);
    CHECK(wisp_columns_input_sparse(c, 2) == 1 && wisp_columns_input_dtype(c, 3) == WISP_INPUT_INT64);
    CHECK(wisp_columns_name(c, 99) == NULL && wisp_columns_input_dtype(c, 99) == -1);

    wisp_raw *raw = NULL;
    wisp_batch *b = NULL;
    CHECK_OK(wisp_raw_new(eng, c, &raw));
    CHECK_OK(wisp_batch_new(eng, &b));
    enum { N = 3000 };
    struct refrow *rows = malloc(N * sizeof *rows);
    for (int i = 0; i < N; i++) {
        random_row(&rows[i]);
        add_ref_row(raw, &rows[i], 0);
    }
    CHECK(wisp_raw_rows(raw) == N && wisp_raw_bad_count(raw) == 0);
    CHECK_OK(wisp_transform(raw, b));
    CHECK(wisp_batch_rows(b) == N && wisp_batch_bad_count(b) == 0);
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    int wrong = 0;
    uint64_t want[64], got[64];
    for (int i = 0; i < N; i++) {
        float xv;
        size_t n = ref_ids(&rows[i], want, &xv);
        /* row i: one valued feature (x), then the binary ones */
        size_t nv = vp ? vp[i + 1] - vp[i] : rp[i + 1] - rp[i];
        size_t nb = rp[i + 1] - rp[i] - nv;
        bool ok = nv == 1 && ids[rp[i]] == 0 && vals[vp ? vp[i] : rp[i]] == xv && nb == n;
        for (size_t k = 0; ok && k < nb; k++) got[k] = ids[rp[i] + 1 + k];
        if (ok) {
            qsort(got, nb, sizeof *got, cmp_u64);
            ok = !memcmp(got, want, n * sizeof *want);
        }
        if (!ok && wrong++ < 3) fprintf(stderr, "row %d differs from the reference (%zu valued, %zu binary, want %zu)\n", i, nv, nb, n);
    }
    CHECK_MSG(wrong == 0, "%d of %d rows differ from the reference", wrong, N);

    /* scores: a model with these columns, against a float64 reference */
    char path[] = "/tmp/wisp_test_columnsXXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    uint64_t nf = wisp_columns_num_features(c);
    float *w = malloc(nf * sizeof *w);
    for (uint64_t i = 0; i < nf; i++) w[i] = (float)(rndu() - 0.5);
    CHECK_OK(wisp_model_write(path, w, nf, -0.25, WISP_F32, "source=test_columns\n", SPEC));
    wisp_model *m = NULL;
    wisp_columns *mc = NULL;
    wisp_session *s = NULL;
    CHECK_OK(wisp_model_load(eng, path, &m));
    CHECK_OK(wisp_columns_from_model(m, &mc));
    CHECK(mc && wisp_columns_num_features(mc) == nf);
    CHECK_OK(wisp_session_new(eng, m, "cpu", &s));
    float *p = malloc(N * sizeof *p);
    CHECK_OK(wisp_session_score(s, b, p));
    double maxerr = 0;
    for (int i = 0; i < N; i++) {
        float xv;
        size_t n = ref_ids(&rows[i], want, &xv);
        double z = -0.25 + (double)w[0] * xv;
        for (size_t k = 0; k < n; k++) z += w[want[k]];
        double e = fabs(p[i] - 1 / (1 + exp(-z)));
        if (e > maxerr) maxerr = e;
    }
    CHECK_MSG(maxerr < 1e-6, "scores differ from the float64 reference by %g", maxerr);
    /* a model too small for the columns is refused */
    CHECK_OK(wisp_model_write(path, w, 1000, 0, WISP_F32, NULL, SPEC));
    wisp_model *small = NULL;
    wisp_columns *sc = NULL;
    CHECK_OK(wisp_model_load(eng, path, &small));
    CHECK_FAILS(wisp_columns_from_model(small, &sc), WISP_EFORMAT, "the columns use 106843 weights but the model has 1000");
    CHECK(sc == NULL);
    CHECK_OK(wisp_model_write(path, w, 1000, 0, WISP_F32, NULL, NULL));
    wisp_model *none = NULL;
    CHECK_OK(wisp_model_load(eng, path, &none));
    CHECK_FAILS(wisp_columns_from_model(none, &sc), WISP_ESTATE, "no \"columns\" section");
    unlink(path);
    wisp_model_free(none);
    wisp_model_free(small);
    wisp_session_free(s);
    wisp_columns_free(mc);
    wisp_model_free(m);
    free(p);
    free(w);
    free(rows);
    wisp_batch_free(b);
    wisp_raw_free(raw);
    wisp_columns_free(c);
}

/* ---- 4. bad rows, misuse ----------------------------------------------------------------- */

static void test_bad_rows(wisp_engine *eng)
{
    wisp_columns *c = NULL;
    CHECK_OK(wisp_columns_parse(SPEC, strlen(SPEC), &c));
    if (!c) return;
    wisp_raw *raw = NULL;
    wisp_batch *b = NULL;
    CHECK_OK(wisp_raw_new(eng, c, &raw));
    CHECK_OK(wisp_batch_new(eng, &b));
    /* misuse */
    CHECK_FAILS(wisp_raw_add_float(raw, 0, 1), WISP_ESTATE, "no open row");
    CHECK_FAILS(wisp_raw_row_end(raw), WISP_ESTATE, "no open row");
    CHECK_OK(wisp_raw_row_begin(raw, 7));
    CHECK_FAILS(wisp_raw_add_float(raw, 4, 1), WISP_EINVAL, "input 4 out of range");
    CHECK_FAILS(wisp_transform(raw, b), WISP_ESTATE, "a row is still open");
    CHECK_FAILS(wisp_raw_parse_tsv(raw, "x", 1, 1, 0, NULL, NULL), WISP_ESTATE, "no schema");
    /* row 0 (line 7): a string for a float input */
    CHECK_OK(wisp_raw_add_string(raw, 0, "abc", 3));
    CHECK_OK(wisp_raw_add_int(raw, 3, 5));                     /* ignored: the row is bad */
    CHECK_OK(wisp_raw_row_end(raw));
    /* row 1: NaN in a numeric column */
    CHECK_OK(wisp_raw_row_begin(raw, 0));
    CHECK_OK(wisp_raw_add_float(raw, 0, NAN));
    CHECK_OK(wisp_raw_row_end(raw));
    /* row 2: fine */
    CHECK_OK(wisp_raw_row_begin(raw, 0));
    CHECK_OK(wisp_raw_row_end(raw));
    /* row 3: two values for a dense input */
    CHECK_OK(wisp_raw_row_begin(raw, 0));
    CHECK_OK(wisp_raw_add_string(raw, 1, "a", 1));
    CHECK_OK(wisp_raw_add_string(raw, 1, "b", 1));
    CHECK_OK(wisp_raw_row_end(raw));
    /* row 4: 1.5 for an int64 input; row 5: a rejected row */
    CHECK_OK(wisp_raw_row_begin(raw, 0));
    CHECK_OK(wisp_raw_add_float(raw, 3, 1.5));
    CHECK_OK(wisp_raw_row_end(raw));
    CHECK_OK(wisp_raw_row_begin(raw, 0));
    CHECK_OK(wisp_raw_row_reject(raw, "unknown input 'q'"));
    CHECK_OK(wisp_raw_row_end(raw));
    /* row 6: -inf: the bucketized column takes it (TensorFlow's bucket 0) but the numeric column refuses it */
    CHECK_OK(wisp_raw_row_begin(raw, 0));
    CHECK_OK(wisp_raw_add_float(raw, 0, -INFINITY));
    CHECK_OK(wisp_raw_row_end(raw));
    CHECK(wisp_raw_rows(raw) == 7);
    CHECK(wisp_raw_bad_count(raw) == 4);
    CHECK_OK(wisp_transform(raw, b));
    CHECK(wisp_batch_rows(b) == 7 && wisp_batch_bad_count(b) == 6);
    const char *want[][2] = { { "0", "line 7: input 'x': a string where float32 is expected" },
                              { "1", "row 1: column 'x': the value is NaN" },
                              { "3", "row 3: input 's' is dense and takes one value per row" },
                              { "4", "row 4: input 'k': 1.5 where int64 is expected" },
                              { "5", "row 5: unknown input 'q'" },
                              { "6", "row 6: column 'x': the value is -inf" } };
    for (size_t i = 0; i < 6; i++) {
        size_t row;
        uint64_t line;
        const char *msg;
        CHECK_OK(wisp_batch_bad_row(b, i, &row, &line, &msg));
        CHECK_MSG(row == (size_t)atoi(want[i][0]) && strstr(msg, want[i][1]) == msg, "bad row %zu: row %zu '%s'", i, row, msg);
    }
    float p[7];
    wisp_model *m = NULL;
    wisp_session *s = NULL;
    char path[] = "/tmp/wisp_test_columnsXXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    float *w = calloc(106843, sizeof *w);
    CHECK_OK(wisp_model_write(path, w, 106843, 0, WISP_F32, NULL, SPEC));
    CHECK_OK(wisp_model_load(eng, path, &m));
    CHECK_OK(wisp_session_new(eng, m, "cpu", &s));
    CHECK_OK(wisp_session_score(s, b, p));
    CHECK(isnan(p[0]) && isnan(p[1]) && p[2] == 0.5f && isnan(p[3]) && isnan(p[4]) && isnan(p[5]) && isnan(p[6]));
    unlink(path);
    free(w);
    wisp_session_free(s);
    wisp_model_free(m);
    /* an identity value out of range without a default: a bad row */
    const char *id_spec = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":[{\"name\":\"u\",\"dtype\":\"int64\"}],"
                          "\"columns\":[{\"name\":\"u\",\"type\":\"identity\",\"key\":\"u\",\"buckets\":4,\"offset\":0}]}";
    wisp_columns *ic = NULL;
    wisp_raw *ir = NULL;
    CHECK_OK(wisp_columns_parse(id_spec, strlen(id_spec), &ic));
    CHECK_OK(wisp_raw_new(eng, ic, &ir));
    wisp_batch_clear(b);
    CHECK_OK(wisp_raw_set_schema(ir, "u", '\t'));
    CHECK_OK(wisp_raw_parse_tsv(ir, "3\n4\n\n-1\n", 8, 1, 0, NULL, NULL));
    CHECK_OK(wisp_transform(ir, b));
    CHECK(wisp_batch_rows(b) == 3 && wisp_batch_bad_count(b) == 1 && wisp_batch_nnz(b) == 1);
    const char *msg = NULL;
    uint64_t line = 0;
    wisp_batch_bad_row(b, 0, NULL, &line, &msg);
    CHECK(line == 2 && msg && strstr(msg, "line 2: input 'u': 4 is outside the identity column's [0, 4)"));
    wisp_raw_free(ir);
    wisp_columns_free(ic);
    wisp_batch_free(b);
    wisp_raw_free(raw);
    wisp_columns_free(c);
    /* NULLs */
    wisp_columns_free(NULL);
    wisp_raw_free(NULL);
    wisp_columns *nc = (wisp_columns *)1;
    CHECK_FAILS(wisp_columns_parse(NULL, 3, &nc), WISP_EINVAL, "text is NULL");
    CHECK(nc == NULL);
    CHECK_FAILS(wisp_columns_parse("{}", 2, &nc), WISP_EPARSE, "missing \"format\"");
    CHECK_FAILS(wisp_columns_parse("{\"a\":1,\"a\":2}", 13, &nc), WISP_EPARSE, "duplicate key");
    char deep[200];
    memset(deep, '[', sizeof deep);
    CHECK_FAILS(wisp_columns_parse(deep, sizeof deep, &nc), WISP_ELIMIT, "nested deeper than 64");
    CHECK_FAILS(wisp_raw_new(eng, NULL, &raw), WISP_EINVAL, "columns is NULL");
}

/* ---- 5. text: TSV chunks, CRLF, limits; JSON lines -------------------------------------- */

static void test_text(wisp_engine *eng)
{
    const char *spec = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":[{\"name\":\"a\",\"dtype\":\"string\"},"
                       "{\"name\":\"n\",\"dtype\":\"float32\",\"default\":0}],\"columns\":["
                       "{\"name\":\"a\",\"type\":\"hash_bucket\",\"key\":\"a\",\"buckets\":100,\"offset\":0},"
                       "{\"name\":\"n\",\"type\":\"numeric\",\"key\":\"n\",\"offset\":100}]}";
    wisp_columns *c = NULL;
    wisp_raw *r = NULL;
    CHECK_OK(wisp_columns_parse(spec, strlen(spec), &c));
    if (!c) return;
    CHECK_OK(wisp_raw_new(eng, c, &r));
    CHECK_FAILS(wisp_raw_set_schema(r, "a,n", ';'), WISP_EINVAL, "delimiter");
    CHECK_FAILS(wisp_raw_set_schema(r, "a,label", '\t'), WISP_EINVAL, "do not include input 'n'");
    CHECK_FAILS(wisp_raw_set_schema(r, "a,n,a", '\t'), WISP_EINVAL, "input 'a' names two fields");
    CHECK_OK(wisp_raw_set_schema(r, "label,a,n", '\t'));
    /* chunks: a partial last line waits for the next call */
    const char *text = "1\tx\t2.5\r\n0\ty\t\n1\t\tnan\n0\tz\t1e39\n1\tw\t";
    uint64_t line = 0;
    size_t used = 0;
    CHECK_OK(wisp_raw_parse_tsv(r, text, strlen(text), 0, 0, &line, &used));
    CHECK(used == strlen(text) - 4 && line == 4 && wisp_raw_rows(r) == 4);
    CHECK_OK(wisp_raw_parse_tsv(r, text + used, strlen(text) - used, 0, 0, &line, &used));
    CHECK(used == 0 && wisp_raw_rows(r) == 4);
    CHECK_OK(wisp_raw_parse_tsv(r, "1\tw\t", 4, 1, 0, &line, &used));
    CHECK(used == 4 && line == 5 && wisp_raw_rows(r) == 5 && wisp_raw_bad_count(r) == 0);
    const uint32_t *rp, *off;
    const void *vals;
    CHECK_OK(wisp_raw_input(r, 1, &rp, &vals, &off));
    CHECK(off == NULL && rp == NULL);                        /* dense: value k is row k's */
    const float *nv = vals;
    CHECK(nv[0] == 2.5f && nv[1] == 0 && isnan(nv[2]) && isinf(nv[3]) && nv[4] == 0);
    CHECK_OK(wisp_raw_input(r, 0, &rp, &vals, &off));
    CHECK(off != NULL && rp == NULL && off[2] - off[1] == 1 && off[3] == off[2]);   /* a missing string is "" */
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_new(eng, &b));
    CHECK_OK(wisp_transform(r, b));
    CHECK(wisp_batch_rows(b) == 5 && wisp_batch_bad_count(b) == 2);  /* nan, 1e39 = inf as float32 */
    /* max_rows */
    wisp_raw_clear(r);
    used = 0;
    CHECK_OK(wisp_raw_parse_tsv(r, "1\ta\t1\n1\tb\t2\n1\tc\t3\n", 18, 1, 2, NULL, &used));
    CHECK(wisp_raw_rows(r) == 2 && used == 12);
    /* over-long strings */
    wisp_raw_clear(r);
    size_t big = WISP_MAX_STRING_BYTES + 10;
    char *long_line = malloc(big + 16);
    memcpy(long_line, "1\t", 2);
    memset(long_line + 2, 'q', big);
    memcpy(long_line + 2 + big, "\t1\n", 3);
    CHECK_OK(wisp_raw_parse_tsv(r, long_line, big + 5, 1, 0, NULL, NULL));
    CHECK(wisp_raw_rows(r) == 1 && wisp_raw_bad_count(r) == 1);
    const char *msg;
    wisp_raw_bad_row(r, 0, NULL, NULL, &msg);
    CHECK(strstr(msg, "more than WISP_MAX_STRING_BYTES") != NULL);
    free(long_line);
    /* JSON lines: floats as doubles rounded once to float32 */
    wisp_raw_clear(r);
    const char *jl = "{\"a\":\"x\",\"n\":0.1}\n{\"n\":1e-50}\n{\"n\":16777217}\n";
    CHECK_OK(wisp_raw_parse_jsonl(r, jl, strlen(jl), 1, 0, NULL, NULL));
    CHECK_OK(wisp_raw_input(r, 1, &rp, &vals, &off));
    nv = vals;
    CHECK(wisp_raw_rows(r) == 3 && nv[0] == (float)0.1 && nv[1] == 0 && nv[2] == 16777216.0f);
    wisp_batch_free(b);
    wisp_raw_free(r);
    wisp_columns_free(c);
}

/* ---- the values rule on the text readers (jsonl.c's JSON decisions): a float32 field or JSON number
 * is read as TensorFlow reads it (1e39 -> inf), and the numeric column, where the value meets its
 * weight, makes a row whose value is not a finite float32 bad, naming the column; NaN/Infinity
 * tokens in JSON lines are refused where read, named; the rows around keep theirs ---- */
static void test_values_rule_text(wisp_engine *eng)
{
    const char *spec = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":[{\"name\":\"a\",\"dtype\":\"string\"},"
                       "{\"name\":\"n\",\"dtype\":\"float32\",\"default\":0}],\"columns\":["
                       "{\"name\":\"a\",\"type\":\"hash_bucket\",\"key\":\"a\",\"buckets\":100,\"offset\":0},"
                       "{\"name\":\"n\",\"type\":\"numeric\",\"key\":\"n\",\"offset\":100}]}";
    static const char *const tx[] = { "nan", "inf", "-inf", "1e39", "-1e39", "3.4028236e38", "3.4028235e38", "1e-50",
                                      "NaN", "Infinity", "-Infinity" };
    /* 1: bad (a value that is not a finite float32), 0: kept; in JSON lines nan/inf/-inf are not
     * tokens at all (invalid JSON) and NaN/Infinity/-Infinity are named where read */
    static const int bad[] = { 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1 };
    static const char *const why_text[] = { "the value is NaN", "the value is +inf", "the value is -inf", "the value is +inf",
                                            "the value is -inf", "the value is +inf", "", "", "the value is NaN",
                                            "the value is +inf", "the value is -inf" };
    static const char *const why_json[] = { "invalid JSON", "invalid JSON", "invalid JSON", "the value is +inf",
                                            "the value is -inf", "the value is +inf", "", "",
                                            "NaN is not a finite float32 (and not JSON", "Infinity is not a finite float32",
                                            "-Infinity is not a finite float32" };
    const size_t n = sizeof tx / sizeof tx[0];
    wisp_columns *c = NULL;
    CHECK_OK(wisp_columns_parse(spec, strlen(spec), &c));
    if (!c) return;
    for (int mode = 0; mode < 3; mode++) {               /* TSV, CSV, JSON lines */
        wisp_raw *r = NULL;
        CHECK_OK(wisp_raw_new(eng, c, &r));
        if (!r) break;
        char *text = malloc(n * 96 + 1);
        size_t len = 0;
        for (size_t k = 0; k < n; k++) {
            if (mode == 2)
                len += (size_t)sprintf(text + len, "{\"a\":\"x\",\"n\":0.5}\n{\"a\":\"y\",\"n\":%s}\n{\"a\":\"z\",\"n\":2}\n", tx[k]);
            else
                len += (size_t)sprintf(text + len, mode ? "x,0.5\ny,%s\nz,2\n" : "x\t0.5\ny\t%s\nz\t2\n", tx[k]);
        }
        if (mode < 2) CHECK_OK(wisp_raw_set_schema(r, "a,n", mode ? ',' : '\t'));
        uint64_t line = 0;
        if (mode < 2) CHECK_OK(wisp_raw_parse_tsv(r, text, len, 1, 0, &line, NULL));
        else CHECK_OK(wisp_raw_parse_jsonl(r, text, len, 1, 0, &line, NULL));
        const char *what = mode == 0 ? "tsv" : mode == 1 ? "csv" : "jsonl";
        CHECK_MSG(wisp_raw_rows(r) == 3 * n, "%s: %zu rows", what, wisp_raw_rows(r));
        wisp_batch *b = NULL;
        CHECK_OK(wisp_batch_new(eng, &b));
        CHECK_OK(wisp_transform(r, b));
        size_t bi = 0, nbad = wisp_batch_bad_count(b);
        CHECK_MSG(wisp_batch_rows(b) == 3 * n, "%s: transform: %zu rows", what, wisp_batch_rows(b));
        const uint32_t *rp = wisp_batch_indptr(b);
        for (size_t k = 0; k < n && rp; k++) {
            CHECK_MSG(rp[3 * k + 1] - rp[3 * k] == 2 && rp[3 * k + 3] - rp[3 * k + 2] == 2,
                      "%s: the rows around '%s' lost features", what, tx[k]);
            if (!bad[k]) continue;
            CHECK_MSG(bi < nbad, "%s: '%s' is not a bad row", what, tx[k]);
            if (bi >= nbad) continue;
            size_t row = 0;
            uint64_t ln = 0;
            const char *msg = "";
            CHECK_OK(wisp_batch_bad_row(b, bi++, &row, &ln, &msg));
            const char *why = mode == 2 ? why_json[k] : why_text[k];
            CHECK_MSG(row == 3 * k + 1 && ln == 3 * k + 2 && strstr(msg, why), "%s: value '%s': bad row %zu line %llu '%s' (want '%s')",
                      what, tx[k], row, (unsigned long long)ln, msg, why);
        }
        CHECK_MSG(bi == nbad, "%s: %zu bad rows, %zu expected", what, nbad, bi);
        wisp_batch_free(b);
        free(text);
        wisp_raw_free(r);
    }
    /* a string for a number: the message names the string */
    wisp_raw *r = NULL;
    CHECK_OK(wisp_raw_new(eng, c, &r));
    if (r) {
        const char *jl = "{\"a\":\"x\",\"n\":\"1\"}\n";
        CHECK_OK(wisp_raw_parse_jsonl(r, jl, strlen(jl), 1, 0, NULL, NULL));
        const char *msg = "";
        CHECK(wisp_raw_bad_count(r) == 1);
        if (wisp_raw_bad_count(r)) CHECK_OK(wisp_raw_bad_row(r, 0, NULL, NULL, &msg));
        CHECK_MSG(strstr(msg, "input 'n': a string where float32 is expected, got the string \"1\""), "'%s'", msg);
        wisp_raw_free(r);
    }
    wisp_columns_free(c);
}

/* ---- text real tools write (RFC 4180 CSV: Excel, pandas, Spark; json.dumps) -------------------
 * A quoted field may hold newlines ("" is a quote), so a record may span lines: one row, reported
 * at its first line, and every later row keeps its own line and values; CRLF line ends; a UTF-8
 * byte order mark; a last line without a newline; any chunking of the text (a chunk may end inside
 * a quoted field). */
static void test_csv_real_tools(wisp_engine *eng)
{
    const char *spec = "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":[{\"name\":\"a\",\"dtype\":\"string\"},"
                       "{\"name\":\"n\",\"dtype\":\"float32\",\"default\":0}],\"columns\":["
                       "{\"name\":\"a\",\"type\":\"hash_bucket\",\"key\":\"a\",\"buckets\":1000,\"offset\":0},"
                       "{\"name\":\"n\",\"type\":\"numeric\",\"key\":\"n\",\"offset\":1000}]}";
    /* what pandas.DataFrame.to_csv writes for a = ["x", "two\nlines", "say \"hi\"", "a,b", "", "\r\nz"],
     * n = [1, 2, 3, 4, NaN, 6], through utf-8-sig and lineterminator="\r\n"; then a last line without one */
    const char *csv = "\xEF\xBB\xBF" "a,n\r\n"
                      "x,1\r\n"
                      "\"two\nlines\",2\r\n"
                      "\"say \"\"hi\"\"\",3\r\n"
                      "\"a,b\",4\r\n"
                      "\"\",\r\n"
                      "\"\r\nz\",6\r\n"
                      "tail,7";
    static const char *const want_a[] = { "x", "two\nlines", "say \"hi\"", "a,b", "", "\r\nz", "tail" };
    static const float want_n[] = { 1, 2, 3, 4, 0, 6, 7 };
    static const uint64_t want_line[] = { 2, 3, 5, 6, 7, 8, 10 };
    const size_t nrows = 7, len = strlen(csv);
    wisp_columns *c = NULL;
    CHECK_OK(wisp_columns_parse(spec, strlen(spec), &c));
    if (!c) return;
    /* whole, then in every split into two chunks (final = 0, then the rest with final = 1) */
    for (size_t cut = 0; cut <= len; cut++) {
        wisp_raw *r = NULL;
        CHECK_OK(wisp_raw_new(eng, c, &r));
        if (!r) break;
        CHECK_OK(wisp_raw_set_schema(r, "header", ','));
        uint64_t line = 0;
        size_t used = 0, pos = 0;
        if (cut < len) {
            CHECK_OK(wisp_raw_parse_tsv(r, csv, cut, 0, 0, &line, &used));
            pos = used;
        }
        CHECK_OK(wisp_raw_parse_tsv(r, csv + pos, len - pos, 1, 0, &line, &used));
        CHECK_MSG(pos + used == len && line == 10, "cut %zu: used %zu of %zu, %llu lines", cut, pos + used, len,
                  (unsigned long long)line);
        CHECK_MSG(wisp_raw_rows(r) == nrows && wisp_raw_bad_count(r) == 0, "cut %zu: %zu rows, %zu bad", cut,
                  wisp_raw_rows(r), wisp_raw_bad_count(r));
        if (wisp_raw_bad_count(r)) {
            const char *msg;
            wisp_raw_bad_row(r, 0, NULL, NULL, &msg);
            printf("cut %zu: %s\n", cut, msg);
        }
        const uint32_t *rp, *off;
        const void *vals;
        if (wisp_raw_rows(r) == nrows && wisp_raw_input(r, 0, &rp, &vals, &off) == WISP_OK && off) {
            const char *bytes = vals;
            for (size_t i = 0; i < nrows; i++) {
                size_t n = off[i + 1] - off[i];
                CHECK_MSG(n == strlen(want_a[i]) && !memcmp(bytes + off[i], want_a[i], n), "cut %zu: row %zu: a = '%.*s'",
                          cut, i, (int)n, bytes + off[i]);
            }
            CHECK_OK(wisp_raw_input(r, 1, &rp, &vals, &off));
            const float *nv = vals;
            for (size_t i = 0; i < nrows; i++) CHECK_MSG(nv[i] == want_n[i], "cut %zu: row %zu: n = %g", cut, i, (double)nv[i]);
        }
        /* the line of each row: a bad value in every row (a string for n) reports its record's first line */
        wisp_raw_free(r);
        if (cut != len / 2 && cut != 0) continue;
        CHECK_OK(wisp_raw_new(eng, c, &r));
        if (!r) break;
        CHECK_OK(wisp_raw_set_schema(r, "a,n", ','));
        char *bad = malloc(len * 2 + 64);
        size_t bl = 0;
        /* the same records with n replaced by the word "no": every row bad, at its first line */
        const char *p = csv + 3;
        p = strchr(p, '\n') + 1;
        bl += (size_t)sprintf(bad, "a,n\n");
        for (size_t i = 0; i < nrows; i++) {
            const char *q = wisp__csv_record_end(p, csv + len, p, NULL);
            const char *e = q ? q : csv + len;
            const char *comma = e;
            while (comma > p && *comma != ',') comma--;
            memcpy(bad + bl, p, (size_t)(comma - p));
            bl += (size_t)(comma - p);
            bl += (size_t)sprintf(bad + bl, ",no\n");
            p = q ? q + 1 : csv + len;
        }
        line = 0;
        CHECK_OK(wisp_raw_parse_tsv(r, bad + 4, bl - 4, 1, 0, &line, NULL));
        CHECK_MSG(wisp_raw_rows(r) == nrows && wisp_raw_bad_count(r) == nrows, "bad lines: %zu rows, %zu bad",
                  wisp_raw_rows(r), wisp_raw_bad_count(r));
        for (size_t i = 0; i < wisp_raw_bad_count(r) && i < nrows; i++) {
            size_t row;
            uint64_t ln;
            const char *msg;
            CHECK_OK(wisp_raw_bad_row(r, i, &row, &ln, &msg));
            CHECK_MSG(row == i && ln == want_line[i] - 1, "bad row %zu: row %zu line %llu (want %llu): %s", i, row,
                      (unsigned long long)ln, (unsigned long long)(want_line[i] - 1), msg);
        }
        free(bad);
        wisp_raw_free(r);
    }
    /* the cut for pieces (cli.c): never inside a quoted field */
    const char *t = "a,1\n\"b\nc\",2\n\"d\"\"\n\",3\nx\"y\n,4\n";
    const char *te = t + strlen(t);
    const char *cuts[] = { "a,1\n", "a,1\n\"b\nc\",2\n", "a,1\n\"b\nc\",2\n\"d\"\"\n\",3\n",
                           "a,1\n\"b\nc\",2\n\"d\"\"\n\",3\nx\"y\n" };
    for (size_t w = 0; w < strlen(t); w++) {
        const char *nl = wisp__csv_record_end(t, te, t + w, NULL);
        size_t got = nl ? (size_t)(nl - t) + 1 : 0, want = 0;
        for (size_t k = 0; k < 4; k++)
            if (strlen(cuts[k]) > w) { want = strlen(cuts[k]); break; }
        if (!want) want = strlen(t);                   /* the last record's own newline */
        CHECK_MSG(got == want, "cut at or after %zu: %zu (want %zu)", w, got, want);
    }
    uint64_t inner = 0;
    CHECK(wisp__csv_record_end(t + 4, te, t + 4, &inner) == t + 11 && inner == 1);
    /* the public cut (wisp.h) is the same cut; bad pointers answer NULL, a want before text is text */
    for (size_t w = 0; w < strlen(t); w++)
        CHECK_MSG(wisp_raw_csv_record_end(t, te, t + w) == wisp__csv_record_end(t, te, t + w, NULL), "public cut at %zu", w);
    CHECK(wisp_raw_csv_record_end(t, te, NULL) == t + 3);
    CHECK(wisp_raw_csv_record_end(NULL, te, t) == NULL);
    CHECK(wisp_raw_csv_record_end(te, t, t) == NULL);
    CHECK(wisp_raw_csv_record_end("\"open\n", (const char *)"\"open\n" + 6, NULL) == NULL);
    /* two files with byte order marks, concatenated (cat a.csv b.csv): each BOM is skipped at its line's start */
    {
        wisp_raw *r = NULL;
        CHECK_OK(wisp_raw_new(eng, c, &r));
        const char *cat = "\xEF\xBB\xBFx,1\r\ny,2\r\n\xEF\xBB\xBFz,3\r\n";
        if (r) CHECK_OK(wisp_raw_set_schema(r, "a,n", ','));
        if (r) CHECK_OK(wisp_raw_parse_tsv(r, cat, strlen(cat), 1, 0, NULL, NULL));
        const uint32_t *rp3, *off3;
        const void *v3;
        CHECK(r && wisp_raw_rows(r) == 3 && wisp_raw_bad_count(r) == 0);
        if (r && wisp_raw_rows(r) == 3 && wisp_raw_input(r, 0, &rp3, &v3, &off3) == WISP_OK && off3)
            CHECK_MSG(off3[3] - off3[2] == 1 && ((const char *)v3)[off3[2]] == 'z', "third row's a: %u bytes",
                      off3[3] - off3[2]);
        wisp_raw_free(r);
    }
    /* json.dumps defaults (ensure_ascii: \uXXXX escapes, a surrogate pair for U+1F600; allow_nan: NaN),
     * through a byte order mark (utf-8-sig): the string arrives as UTF-8, NaN makes its row bad, named */
    {
        wisp_raw *r = NULL;
        CHECK_OK(wisp_raw_new(eng, c, &r));
        const char *jl = "\xEF\xBB\xBF{\"a\": \"caf\\u00e9 \\ud83d\\ude00\", \"n\": 1.5}\r\n{\"a\": \"x\", \"n\": NaN}\r\n"
                         "{\"a\": \"\\ud83d\", \"n\": 1}\n{\"n\": Infinity}";
        uint64_t ln = 0;
        if (r) CHECK_OK(wisp_raw_parse_jsonl(r, jl, strlen(jl), 1, 0, &ln, NULL));
        CHECK(r && wisp_raw_rows(r) == 4 && wisp_raw_bad_count(r) == 3 && ln == 4);
        const uint32_t *rp2, *off2;
        const void *v2;
        if (r && wisp_raw_input(r, 0, &rp2, &v2, &off2) == WISP_OK && off2) {
            const char *want = "caf\xC3\xA9 \xF0\x9F\x98\x80";
            CHECK_MSG(off2[1] - off2[0] == strlen(want) && !memcmp(v2, want, strlen(want)), "'%.*s'", (int)(off2[1] - off2[0]),
                      (const char *)v2);
        }
        const char *m1 = "", *m2 = "", *m3 = "";
        if (r && wisp_raw_bad_count(r) == 3) {
            wisp_raw_bad_row(r, 0, NULL, NULL, &m1);
            wisp_raw_bad_row(r, 1, NULL, NULL, &m2);
            wisp_raw_bad_row(r, 2, NULL, NULL, &m3);
        }
        CHECK_MSG(strstr(m1, "line 2: input 'n': NaN is not a finite float32"), "'%s'", m1);
        CHECK_MSG(strstr(m2, "line 3: ") && strstr(m2, "unpaired surrogate"), "'%s'", m2);
        CHECK_MSG(strstr(m3, "line 4: input 'n': Infinity is not a finite float32"), "'%s'", m3);
        wisp_raw_free(r);
    }
    CHECK(wisp__csv_record_end("\"open\n", (const char *)"\"open\n" + 6, "\"open\n", NULL) == NULL);
    wisp_columns_free(c);
}

/* ---- 5b. the column-major transform against the row-wise reference, random descriptions ---- */

static void test_paths_agree(wisp_engine *eng)
{
    int specs = 0, differ = 0;
    size_t rows_total = 0, bad_total = 0;
    char *sbuf = malloc(WISP_MAX_STRING_BYTES + 16), why[128] = "";
    for (int round = 0; round < 60 && sbuf; round++) {
        const char *text = testcols_spec(round % 10 == 9);   /* testcols.h: every column kind; one round in ten wide */
        wisp_columns *c = NULL;
        if (wisp_columns_parse(text, strlen(text), &c) != WISP_OK) {
            CHECK_MSG(0, "random description refused: %s\n%s", wisp_errmsg(), text);
            continue;
        }
        specs++;
        wisp_raw *raw = NULL;
        wisp_batch *b1 = NULL, *b2 = NULL;
        CHECK_OK(wisp_raw_new(eng, c, &raw));
        CHECK_OK(wisp_batch_new(eng, &b1));
        CHECK_OK(wisp_batch_new(eng, &b2));
        size_t n = 1 + rndn(700);
        for (size_t i = 0; i < n; i++) testcols_row(raw, 0, sbuf);
        CHECK_OK(wisp_transform(raw, b1));
        CHECK_OK(wisp__transform_rowwise(raw, b2));
        if (!same_batches(b1, b2, why, sizeof why) && differ++ < 3)
            fprintf(stderr, "the two transforms differ (%s) for\n%s\n", why, text);
        rows_total += wisp_batch_rows(b1);
        bad_total += wisp_batch_bad_count(b1);
        wisp_batch_free(b1);
        wisp_batch_free(b2);
        wisp_raw_free(raw);
        wisp_columns_free(c);
    }
    free(sbuf);
    CHECK_MSG(differ == 0, "%d of %d random descriptions transform differently by column and by row", differ, specs);
    CHECK_MSG(bad_total > 0 && bad_total < rows_total, "%zu bad rows of %zu: the inputs should exercise both", bad_total, rows_total);
    /* the inline short fingerprint is Fingerprint64 */
    char s[17];
    int wrong = 0;
    for (int k = 0; k < 2000; k++) {
        size_t len = rndn(17);
        for (size_t i = 0; i < len; i++) s[i] = (char)rnd();
        wrong += wisp__fp64_short(s, len) != wisp_fingerprint64(s, len);
    }
    CHECK_MSG(wrong == 0, "wisp__fp64_short differs from wisp_fingerprint64 %d times", wrong);
}

/* ---- 6. allocation failures and threads --------------------------------------------------- */

static void test_faults(wisp_engine *eng)
{
    int failures = 0, bad_status = 0;
    for (uint64_t nth = 1; nth < 400; nth++) {
        wisp_fault_alloc_after(nth);
        wisp_columns *c = NULL;
        int st = wisp_columns_parse(SPEC, strlen(SPEC), &c);
        wisp_raw *raw = NULL;
        wisp_batch *b = NULL;
        if (st == WISP_OK) st = wisp_raw_new(eng, c, &raw);
        if (st == WISP_OK) st = wisp_batch_new(eng, &b);
        for (int i = 0; st == WISP_OK && i < 300; i++) {
            struct refrow row;
            random_row(&row);
            st = wisp_raw_row_begin(raw, 0);
            if (st == WISP_OK && row.has_s) st = wisp_raw_add_string(raw, 1, row.s, row.slen);
            for (int k = 0; st == WISP_OK && k < row.nt; k++) st = wisp_raw_add_string(raw, 2, row.t[k], row.tlen[k]);
            if (st == WISP_OK) st = wisp_raw_row_end(raw);
        }
        if (st == WISP_OK) st = wisp_raw_parse_tsv(raw, "", 0, 1, 0, NULL, NULL) == WISP_ESTATE ? WISP_OK : -99;
        if (st == WISP_OK) st = wisp_transform(raw, b);
        wisp_fault_alloc_after(0);
        if (st != WISP_OK) {
            failures++;
            if (st != WISP_ENOMEM) { bad_status++; fprintf(stderr, "nth %" PRIu64 ": status %d (%s)\n", nth, st, wisp_errmsg()); }
        }
        wisp_batch_free(b);
        wisp_raw_free(raw);
        wisp_columns_free(c);
    }
    CHECK_MSG(failures > 50, "only %d injected failures hit", failures);
    CHECK_MSG(bad_status == 0, "%d injected failures gave another status than WISP_ENOMEM", bad_status);
}

struct thread_job { wisp_engine *eng; wisp_columns *c; uint64_t nnz; };

static void *thread_main(void *arg)
{
    struct thread_job *j = arg;
    wisp_raw *raw = NULL;
    wisp_batch *b = NULL;
    if (wisp_raw_new(j->eng, j->c, &raw) || wisp_batch_new(j->eng, &b)) return NULL;
    uint64_t seed = 42;
    for (int i = 0; i < 2000; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        char s[24];
        int n = snprintf(s, sizeof s, "%" PRIx64, seed >> 40);
        wisp_raw_row_begin(raw, 0);
        wisp_raw_add_string(raw, 1, s, (size_t)n);
        wisp_raw_add_int(raw, 3, (int64_t)(seed >> 58));
        wisp_raw_row_end(raw);
    }
    wisp_transform(raw, b);
    j->nnz = wisp_batch_nnz(b);
    wisp_batch_free(b);
    wisp_raw_free(raw);
    return NULL;
}

static void test_threads(wisp_engine *eng)
{
    wisp_columns *c = NULL;
    CHECK_OK(wisp_columns_parse(SPEC, strlen(SPEC), &c));
    struct thread_job jobs[3] = { { eng, c, 0 }, { eng, c, 0 }, { eng, c, 0 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, thread_main, &jobs[i]);
    thread_main(&jobs[2]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    wisp_columns_free(c);     /* the raws kept it alive while they ran */
    CHECK(jobs[0].nnz > 0 && jobs[0].nnz == jobs[1].nnz && jobs[1].nnz == jobs[2].nnz);
}

int main(void)
{
    rng_state = 0x243F6A8885A308D3ull;   /* this test's default seed */
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(1, &eng));
    test_golden_fingerprints();
    test_numbers();
    test_transform_reference(eng);
    test_bad_rows(eng);
    test_text(eng);
    test_values_rule_text(eng);
    test_csv_real_tools(eng);
    test_paths_agree(eng);
    test_faults(eng);
    test_threads(eng);
    wisp_engine_free(eng);
    return CHECK_DONE("test_columns");
}
