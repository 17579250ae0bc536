/* test_vw.c — Vowpal Wabbit: MurmurHash3/hashstring/parse/prediction golden vectors from the real VW, parser edge
 * cases and bad lines, streaming, options, the importer. */
#include "score/score.h"
#include "parse/json.h"
#include "check.h"
#include "testutil.h"
#include "testrand.h"

#include <float.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- a small JSON reader (enough for spec/data/vw_golden.json) ------------------- */

enum { J_NULL, J_NUM, J_STR, J_ARR, J_OBJ, J_BOOL };
typedef struct jv {
    int t;
    double num;
    char *str; size_t len;           /* J_STR (decoded bytes) */
    struct jv *items; size_t n;      /* J_ARR, J_OBJ (values) */
    char **keys;                     /* J_OBJ */
} jv;

static const char *jws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int jparse(const char **pp, const char *e, jv *out)
{
    const char *p = jws(*pp, e);
    memset(out, 0, sizeof *out);
    if (p >= e) return -1;
    if (*p == '"') {
        const char *q = p + 1;                      /* the raw length bounds the decoded one */
        while (q < e && *q != '"') q += *q == '\\' ? 2 : 1;
        char *buf = malloc((size_t)(q - p) + 2);
        size_t n;
        if (wisp__json_string(&p, e, buf, &n)) { free(buf); return -1; }
        buf[n] = '\0';
        out->t = J_STR; out->str = buf; out->len = n;
    } else if (*p == '[' || *p == '{') {
        int obj = *p == '{';
        char close = obj ? '}' : ']';
        out->t = obj ? J_OBJ : J_ARR;
        size_t cap = 0;
        p = jws(p + 1, e);
        if (p < e && *p == close) { *pp = p + 1; return 0; }
        for (;;) {
            if (out->n == cap) {
                cap = cap ? cap * 2 : 8;
                out->items = realloc(out->items, cap * sizeof *out->items);
                if (obj) out->keys = realloc(out->keys, cap * sizeof *out->keys);
            }
            if (obj) {
                jv k;
                if (jparse(&p, e, &k) || k.t != J_STR) return -1;
                out->keys[out->n] = k.str;
                p = jws(p, e);
                if (p >= e || *p != ':') return -1;
                p++;
            }
            if (jparse(&p, e, &out->items[out->n])) return -1;
            out->n++;
            p = jws(p, e);
            if (p < e && *p == ',') { p++; continue; }
            if (p < e && *p == close) { p++; break; }
            return -1;
        }
    } else if (!strncmp(p, "null", 4)) { out->t = J_NULL; p += 4; }
    else if (!strncmp(p, "true", 4)) { out->t = J_BOOL; out->num = 1; p += 4; }
    else if (!strncmp(p, "false", 5)) { out->t = J_BOOL; p += 5; }
    else {
        char *end;
        out->t = J_NUM;
        out->num = strtod(p, &end);
        if (end == p) return -1;
        p = end;
    }
    *pp = p;
    return 0;
}

static void jfree(jv *v)
{
    free(v->str);
    for (size_t i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

static const jv *jget(const jv *o, const char *key)
{
    if (!o || o->t != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return &o->items[i];
    return NULL;
}




/* ---- helpers ----------------------------------------------------------------------- */

static wisp_engine *eng;

/* the (id, value) pairs of batch row r, sorted */
typedef struct { uint32_t id; float v; } iv;
static int iv_cmp(const void *a, const void *b)
{
    const iv *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}
static size_t row_pairs(const wisp_batch *b, size_t r, iv **out)
{
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    size_t n = rp[r + 1] - rp[r], nvalued = 0, voff = 0;
    if (vals && vp) { nvalued = vp[r + 1] - vp[r]; voff = vp[r]; }
    else if (vals) { nvalued = n; voff = rp[r]; }
    iv *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t k = 0; k < n; k++) {
        p[k].id = ids[rp[r] + k];
        p[k].v = k < nvalued ? vals[voff + k] : 1.0f;
    }
    qsort(p, n, sizeof *p, iv_cmp);
    *out = p;
    return n;
}

static float gold_weight(uint32_t i)
{
    return (float)((double)(uint32_t)(i * 2654435761u) / 4294967296.0 * 0.2 - 0.1);
}

/* parse one line (final) under options into a fresh batch */
static wisp_batch *parse1(const wisp_vw *v, const char *line, size_t len)
{
    wisp_batch *b = NULL;
    if (wisp_batch_new(eng, &b) != WISP_OK) return NULL;
    uint64_t ln = 0;
    size_t used = 0;
    if (wisp_batch_parse_vw(b, v, line, len, 1, 0, &ln, &used) != WISP_OK) { wisp_batch_free(b); return NULL; }
    return b;
}

/* ---- 1. golden vectors from VW ---------------------------------------------------- */

static void test_golden(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vw_golden.json", data_dir());
    size_t len;
    char *text = slurp(path, &len);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    if (!text) return;
    jv root;
    const char *p = text;
    int prc = jparse(&p, text + len, &root);
    CHECK_MSG(prc == 0 && root.t == J_OBJ, "%s: not JSON", path);
    if (prc) { jfree(&root); free(text); return; }
    const jv *gen = jget(&root, "generator");
    CHECK(gen && gen->t == J_STR && !strcmp(gen->str, "spec/data/gen/vw_golden.py"));
    unsigned char buf[4096];

    /* murmur3 and hashstring */
    const jv *mm = jget(&root, "murmur3"), *hs = jget(&root, "hashstring");
    CHECK(mm && mm->n >= 300 && hs && hs->n >= 80);
    int bad = 0;
    for (size_t i = 0; mm && i < mm->n; i++) {
        const jv *r = &mm->items[i];
        size_t n = unhex(jget(r, "hex")->str, strlen(jget(r, "hex")->str), buf);
        uint32_t got = wisp_vw_murmur3(buf, n, (uint32_t)jget(r, "seed")->num), want = (uint32_t)jget(r, "hash")->num;
        if (got != want && bad++ < 5) fprintf(stderr, "murmur3('%s', %u) = %u, VW %u\n", jget(r, "hex")->str,
                                               (uint32_t)jget(r, "seed")->num, got, want);
    }
    CHECK_MSG(bad == 0, "%d murmur3 values differ from VW's", bad);
    bad = 0;
    for (size_t i = 0; hs && i < hs->n; i++) {
        const jv *r = &hs->items[i];
        size_t n = unhex(jget(r, "hex")->str, strlen(jget(r, "hex")->str), buf);
        uint32_t got = wisp_vw_hashstring((const char *)buf, n, (uint32_t)jget(r, "seed")->num);
        uint32_t want = (uint32_t)jget(r, "hash")->num;
        if (got != want && bad++ < 5) fprintf(stderr, "hashstring('%s', %u) = %u, VW %u\n", jget(r, "hex")->str,
                                               (uint32_t)jget(r, "seed")->num, got, want);
    }
    CHECK_MSG(bad == 0, "%d hashstring values differ from VW's", bad);

    /* namespaces */
    const jv *ns = jget(&root, "namespaces");
    CHECK(ns && ns->n >= 30);
    bad = 0;
    for (size_t i = 0; ns && i < ns->n; i++) {
        const jv *r = &ns->items[i];
        wisp_vw *v = NULL;
        CHECK_OK(wisp_vw_new(jget(r, "options")->str, &v));
        size_t n = unhex(jget(r, "hex")->str, strlen(jget(r, "hex")->str), buf);
        uint32_t got = wisp_vw_hash_namespace(v, (const char *)buf, n), want = (uint32_t)jget(r, "hash")->num;
        if (got != want && bad++ < 5) fprintf(stderr, "namespace '%s' under '%s' = %u, VW %u\n", jget(r, "hex")->str,
                                               jget(r, "options")->str, got, want);
        wisp_vw_free(v);
    }
    CHECK_MSG(bad == 0, "%d namespace hashes differ from VW's", bad);

    /* parsed lines: wisp's features (linear + constant) equal VW's example */
    const jv *lines = jget(&root, "lines");
    CHECK(lines && lines->n >= 600);
    int nbadline = 0, nwrong = 0, nfeat = 0;
    for (size_t i = 0; lines && i < lines->n; i++) {
        const jv *r = &lines->items[i], *ln = jget(r, "line"), *fs = jget(r, "features");
        wisp_vw *v = NULL;
        if (wisp_vw_new(jget(r, "options")->str, &v) != WISP_OK) { nwrong++; continue; }
        wisp_batch *b = parse1(v, ln->str, ln->len);
        if (!b || wisp_batch_rows(b) != 1 || wisp_batch_bad_count(b)) {
            const char *msg = "";
            size_t row; uint64_t l;
            if (b && wisp_batch_bad_count(b)) wisp_batch_bad_row(b, 0, &row, &l, &msg);
            if (nbadline++ < 5) fprintf(stderr, "line '%s' (%s): %zu rows, bad: %s\n", ln->str, jget(r, "options")->str,
                                        b ? wisp_batch_rows(b) : 0, msg);
            wisp_batch_free(b); wisp_vw_free(v);
            continue;
        }
        iv *got;
        size_t n = row_pairs(b, 0, &got);
        iv *want = malloc((fs->n ? fs->n : 1) * sizeof *want);
        for (size_t k = 0; k < fs->n; k++) {
            want[k].id = (uint32_t)fs->items[k].items[0].num;
            want[k].v = (float)fs->items[k].items[1].num;
        }
        qsort(want, fs->n, sizeof *want, iv_cmp);
        int same = n == fs->n;
        for (size_t k = 0; same && k < n; k++) same = got[k].id == want[k].id && got[k].v == want[k].v;
        if (!same && nwrong++ < 5) {
            fprintf(stderr, "line '%s' (%s): wisp %zu features, VW %zu:", ln->str, jget(r, "options")->str, n, fs->n);
            for (size_t k = 0; k < n || k < fs->n; k++)
                fprintf(stderr, " [%u %.9g | %u %.9g]", k < n ? got[k].id : 0, k < n ? (double)got[k].v : 0.0,
                        k < fs->n ? want[k].id : 0, k < fs->n ? (double)want[k].v : 0.0);
            fputc('\n', stderr);
        }
        nfeat += (int)n;
        free(got); free(want);
        wisp_batch_free(b);
        wisp_vw_free(v);
    }
    CHECK_MSG(nbadline == 0, "%d golden lines were bad rows in wisp", nbadline);
    CHECK_MSG(nwrong == 0, "%d golden lines parse differently from VW", nwrong);
    CHECK(nfeat > 5000);

    /* predictions with interactions: sum of weight(id) * value equals VW's raw prediction */
    const jv *preds = jget(&root, "predictions");
    CHECK(preds && preds->n >= 1000);
    int pwrong = 0, pbad = 0, nonconst = 0;
    double maxdiff = 0;
    for (size_t i = 0; preds && i < preds->n; i++) {
        const jv *r = &preds->items[i], *ln = jget(r, "line");
        wisp_vw *v = NULL;
        if (wisp_vw_new(jget(r, "options")->str, &v) != WISP_OK) { pwrong++; continue; }
        wisp_batch *b = parse1(v, ln->str, ln->len);
        if (!b || wisp_batch_rows(b) != 1 || wisp_batch_bad_count(b)) {
            if (pbad++ < 5) fprintf(stderr, "prediction line '%s' is bad in wisp\n", ln->str);
            wisp_batch_free(b); wisp_vw_free(v);
            continue;
        }
        iv *got;
        size_t n = row_pairs(b, 0, &got);
        double sum = 0, mag = 0;
        for (size_t k = 0; k < n; k++) {
            double t = (double)gold_weight(got[k].id) * got[k].v;
            sum += t;
            mag += fabs(t);
        }
        nonconst += n > 1;
        double want = jget(r, "raw")->num, clipped = sum < -50 ? -50 : sum > 50 ? 50 : sum;
        double d = fabs(clipped - want) / (1 + mag);     /* VW sums in float: relative to the terms' size */
        if (d > maxdiff) maxdiff = d;
        if (d > 2e-6 && pwrong++ < 5)
            fprintf(stderr, "prediction '%s' (%s): wisp %.9g, VW %.9g\n", ln->str, jget(r, "options")->str, clipped,
                    want);
        free(got);
        wisp_batch_free(b);
        wisp_vw_free(v);
    }
    CHECK_MSG(pbad == 0, "%d prediction lines were bad rows in wisp", pbad);
    CHECK_MSG(pwrong == 0, "%d predictions differ from VW's (max relative |diff| %.3g)", pwrong, maxdiff);
    CHECK(nonconst > 900);
    printf("test_vw: golden: %zu murmur3, %zu hashstring, %zu namespaces, %zu lines (%d features), %zu predictions "
           "(max |diff| / (1 + sum |w x|) %.3g)\n", mm ? mm->n : 0, hs ? hs->n : 0, ns ? ns->n : 0,
           lines ? lines->n : 0, nfeat, preds ? preds->n : 0, maxdiff);
    jfree(&root);
    free(text);
}

/* ---- 2. the parser: hand-made cases ----------------------------------------------- */

static void test_parser_cases(void)
{
    wisp_vw *v = NULL;
    CHECK_OK(wisp_vw_new("-b 18 -q ab", &v));
    CHECK(!strcmp(wisp_vw_options(v), "-b 18 -q ab"));
    CHECK(wisp_vw_bits(v) == 18);
    const uint32_t mask = (1u << 18) - 1, K = 11650396u & mask;
    uint32_t ha = wisp_vw_hash_namespace(v, "a", 1), hb = wisp_vw_hash_namespace(v, "b", 1);
    CHECK(ha == 1009084850u);                       /* murmur3("a", 0), VW's hash_space("a") */
    CHECK(wisp_vw_hash_namespace(v, " ", 1) == 0 && wisp_vw_hash_namespace(v, "", 0) == 0);
    uint32_t hx = wisp_vw_hash_feature(v, "x", 1, ha), h12 = wisp_vw_hash_feature(v, "12", 2, ha);
    CHECK(h12 == ((ha + 12) & mask));
    CHECK(wisp_vw_hash_feature(v, "0012", 4, ha) == h12);
    uint32_t hp = wisp_vw_hash_feature(v, "p", 1, hb);

    /* one line: linear a, b, the quadratic a x b, the constant */
    const char *line = "1 |a x:0.5 12 |b p";
    wisp_batch *b = parse1(v, line, strlen(line));
    CHECK(b && wisp_batch_rows(b) == 1 && wisp_batch_bad_count(b) == 0);
    iv *got;
    size_t n = row_pairs(b, 0, &got);
    iv want[] = { {hx, 0.5f}, {h12, 1}, {hp, 1}, {K, 1},
                  {wisp_vw_hash_quadratic(v, wisp_vw_murmur3("x", 1, ha), wisp_vw_murmur3("p", 1, hb)), 0.5f},
                  {wisp_vw_hash_quadratic(v, ha + 12, wisp_vw_murmur3("p", 1, hb)), 1} };
    qsort(want, 6, sizeof *want, iv_cmp);
    CHECK(n == 6);
    for (size_t k = 0; k < n && k < 6; k++) CHECK_MSG(got[k].id == want[k].id && got[k].v == want[k].v,
                                                   "feature %zu: %u %g vs %u %g", k, got[k].id, got[k].v, want[k].id,
                                                   want[k].v);
    /* the quadratic index is VW's: ((16777619 * h1) ^ h2) & mask */
    CHECK(wisp_vw_hash_quadratic(v, 3, 5) == (((16777619u * 3u) ^ 5u) & mask));
    free(got);
    wisp_batch_free(b);

    /* a namespace's features interact with themselves as pairs j >= i (-q aa) */
    wisp_vw *vaa = NULL;
    CHECK_OK(wisp_vw_new("-b 20 -q aa --noconstant", &vaa));
    b = parse1(vaa, "|a x y z", 8);
    CHECK(b && wisp_batch_nnz(b) == 3 + 6);
    wisp_batch_free(b);
    wisp_vw_free(vaa);

    /* blank lines make no row; CRLF; a line without '|' has only the constant */
    const char *text = "\n   \n1 |a x\r\n\t\n-1\n";
    wisp_batch_new(eng, &b);
    uint64_t ln = 0;
    size_t used = 0;
    CHECK_OK(wisp_batch_parse_vw(b, v, text, strlen(text), 1, 0, &ln, &used));
    CHECK(wisp_batch_rows(b) == 2 && ln == 5 && used == strlen(text) && wisp_batch_bad_count(b) == 0);
    n = row_pairs(b, 1, &got);
    CHECK(n == 1 && got[0].id == K);
    free(got);
    wisp_batch_free(b);

    /* bad lines: each a bad row with its line and a message; the good rows around them kept */
    static const struct { const char *line; const char *msg; } cases[] = {
        { "1 |a x:1:2", "bad value '1:2'" },
        { "1 |a x:5abc", "bad value '5abc'" },
        { "1 |a x:nan", "not a finite number" },
        { "1 |a x:inf", "not a finite number" },
        { "1 |a x:1e40", "not a finite number" },
        { "1 |a x:1e-3000", "not a finite number" },
        { "1 |a:1e30 x:1e30", "overflows a float" },
        { "1 |a x:1e30 |b y:1e30", "quadratic feature's value" },    /* VW: its int8 exponent wraps to 10^72: inf */
        { "1 |a x:", "missing value after ':'" },
        { "1 |a x: y", "missing value after ':'" },
        { "1 |:2 x", "namespace weight without a namespace name" },
        { "1 |a: x", "missing namespace weight" },
        { "1 |a:zz x", "bad namespace weight 'zz'" },
        { "1 |a:nan x", "not a finite number" },
        { "abc |a x", "label word 'abc' is not a number" },
        { "1 2 3 4 |a x", "4 label words" },
        { "1 1 0.5 |a x", "initial prediction '0.5'" },
        { "1 |a x\ry", "carriage return" },
        { "1 3:1 5:1", "label word '3:1' is not a number" },
        { "1 |a :x", "a string value without a feature name" },
    };
    const size_t ncases = sizeof cases / sizeof *cases;
    char all[4096];
    size_t off = 0;
    for (size_t i = 0; i < ncases; i++)
        off += (size_t)snprintf(all + off, sizeof all - off, "1 |a good\n%s\n", cases[i].line);
    wisp_batch_new(eng, &b);
    ln = 100;
    CHECK_OK(wisp_batch_parse_vw(b, v, all, off, 1, 0, &ln, &used));
    CHECK(wisp_batch_rows(b) == 2 * ncases && wisp_batch_bad_count(b) == ncases && ln == 100 + 2 * ncases);
    for (size_t i = 0; i < ncases && i < wisp_batch_bad_count(b); i++) {
        size_t row; uint64_t l; const char *msg;
        CHECK_OK(wisp_batch_bad_row(b, i, &row, &l, &msg));
        char prefix[64];
        snprintf(prefix, sizeof prefix, "line %zu: ", (size_t)(100 + 2 * i + 2));
        CHECK_MSG(row == 2 * i + 1 && l == 100 + 2 * i + 2 && !strncmp(msg, prefix, strlen(prefix)) &&
                  strstr(msg, cases[i].msg) && strstr(msg, ", at column "),
                  "case %zu '%s': row %zu line %" PRIu64 " msg '%s', wanted '%s'", i, cases[i].line, row, l, msg,
                  cases[i].msg);
    }
    /* the bad rows score NaN, the good ones do not */
    wisp_model *m = NULL;
    wisp_session *s = NULL;
    float *w = calloc((size_t)1 << 18, sizeof *w);
    for (uint32_t i = 0; i < (1u << 18); i++) w[i] = gold_weight(i);
    char mp[] = "/tmp/wisp_test_vw_XXXXXX";
    int fd = mkstemp(mp);
    if (fd >= 0) close(fd);
    CHECK_OK(wisp_model_write(mp, w, (uint64_t)1 << 18, 0.0, WISP_F32, "vw_options=-b 18 -q ab\n", NULL));
    CHECK_OK(wisp_model_load(eng, mp, &m));
    CHECK_OK(wisp_session_new(eng, m, "cpu", &s));
    float *out = malloc(wisp_batch_rows(b) * sizeof *out);
    CHECK_OK(wisp_session_score(s, b, out));
    for (size_t r = 0; r < wisp_batch_rows(b); r++) CHECK(r % 2 ? isnan(out[r]) : !isnan(out[r]));
    /* the probability is sigmoid(sum of the weights) */
    double sum = (double)gold_weight(wisp_vw_hash_feature(v, "good", 4, ha)) + gold_weight(K);
    CHECK_NEAR(out[0], 1.0 / (1.0 + exp(-sum)), 1e-6);
    wisp_vw *vm = NULL;
    CHECK_OK(wisp_vw_from_model(m, &vm));
    CHECK(vm && !strcmp(wisp_vw_options(vm), "-b 18 -q ab"));
    wisp_vw_free(vm);
    free(out);
    wisp_session_free(s);
    wisp_model_free(m);
    unlink(mp);
    free(w);
    wisp_batch_free(b);

    /* a model with fewer weights than 2^bits, and one without vw_options */
    CHECK_OK(wisp_model_write(mp, (float[]){1, 2}, 2, 0.0, WISP_F32, "vw_options=-b 4\n", NULL));
    CHECK_OK(wisp_model_load(eng, mp, &m));
    vm = (wisp_vw *)1;
    CHECK_FAILS(wisp_vw_from_model(m, &vm), WISP_EFORMAT, "-b 4 but the model has only 2 weights");
    CHECK(vm == NULL);
    wisp_model_free(m);
    CHECK_OK(wisp_model_write(mp, (float[]){1, 2}, 2, 0.0, WISP_F32, "source=x\n", NULL));
    CHECK_OK(wisp_model_load(eng, mp, &m));
    CHECK_FAILS(wisp_vw_from_model(m, &vm), WISP_ESTATE, "not a Vowpal Wabbit model");
    wisp_model_free(m);
    unlink(mp);
    wisp_vw_free(v);

    /* NULLs */
    CHECK_FAILS(wisp_batch_parse_vw(NULL, v, "", 0, 1, 0, NULL, NULL), WISP_EINVAL, "batch is NULL");
    wisp_batch_new(eng, &b);
    CHECK_FAILS(wisp_batch_parse_vw(b, NULL, "", 0, 1, 0, NULL, NULL), WISP_EINVAL, "NULL");
    wisp_batch_free(b);
}

/* ---- 3. options --------------------------------------------------------------------- */

static void test_options(void)
{
    wisp_vw *v = NULL;
    CHECK_OK(wisp_vw_new(NULL, &v));
    CHECK(wisp_vw_bits(v) == 18 && !strcmp(wisp_vw_options(v), "-b 18"));
    wisp_vw_free(v);
    CHECK_OK(wisp_vw_new("--bit_precision=20 --quadratic ab -q ba -qcd --interactions ef --hash_seed 7 --noconstant "
                         "--hash all --link logistic --loss_function logistic --ignore z --ignore_linear a", &v));
    CHECK_MSG(!strcmp(wisp_vw_options(v), "-b 20 -q ab -q cd -q ef --hash_seed 7 --hash all --noconstant --ignore z "
                      "--ignore_linear a"), "%s", wisp_vw_options(v));     /* "ba" dropped: a duplicate of "ab" */
    wisp_vw_free(v);
    CHECK_OK(wisp_vw_new("-q ab -q ba --leave_duplicate_interactions", &v));
    CHECK(strstr(wisp_vw_options(v), "-q ab -q ba"));
    wisp_vw_free(v);
    v = (wisp_vw *)1;
    CHECK_FAILS(wisp_vw_new("--cubic abc", &v), WISP_EINVAL, "'--cubic' is not supported");
    CHECK(v == NULL);
    CHECK_FAILS(wisp_vw_new("-q abc", &v), WISP_EINVAL, "quadratic interactions (two namespaces) only");
    CHECK_FAILS(wisp_vw_new("--interactions abc", &v), WISP_EINVAL, "not cubic or higher");
    CHECK_FAILS(wisp_vw_new("-q ::", &v), WISP_EINVAL, "wildcard");
    CHECK_FAILS(wisp_vw_new("-q a:", &v), WISP_EINVAL, "wildcard");
    CHECK_FAILS(wisp_vw_new("-b 32", &v), WISP_EINVAL, "-b");
    CHECK_FAILS(wisp_vw_new("-b 0", &v), WISP_EINVAL, "bits must be from 1 to 31");
    CHECK_FAILS(wisp_vw_new("-b", &v), WISP_EINVAL, "needs a value");
    CHECK_FAILS(wisp_vw_new("--oaa 3", &v), WISP_EINVAL, "'--oaa' is not supported");
    CHECK_FAILS(wisp_vw_new("--hash crazy", &v), WISP_EINVAL, "expected strings or all");
    CHECK_FAILS(wisp_vw_new("--hash_seed -1", &v), WISP_EINVAL, "--hash_seed");
    CHECK_FAILS(wisp_vw_new("--noconstant=1", &v), WISP_EINVAL, "takes no value");
    CHECK_FAILS(wisp_vw_new("-q a\\x20", &v), WISP_EINVAL, "");
}

/* ---- 4. streaming: chunks, max_rows, line numbers ----------------------------------- */

static void test_streaming(void)
{
    wisp_vw *v = NULL;
    CHECK_OK(wisp_vw_new("-b 16 -q ab --hash_seed 3", &v));
    /* random text */
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap);
    int nrows = 0;
    for (int i = 0; i < 2000; i++) {
        int kind = (int)(rnd() % 20);
        if (kind == 0) { len += (size_t)sprintf(text + len, "\n"); continue; }
        if (kind == 1) { len += (size_t)sprintf(text + len, "1 |a x:1:2\n"); nrows++; continue; }
        len += (size_t)sprintf(text + len, "%d |a", (int)(rnd() % 2) * 2 - 1);
        for (int k = (int)(rnd() % 6); k > 0; k--)
            len += (size_t)sprintf(text + len, " f%u:%.3f", (unsigned)(rnd() % 1000), rnd01());
        len += (size_t)sprintf(text + len, " |b");
        for (int k = (int)(rnd() % 4); k > 0; k--)
            len += (size_t)sprintf(text + len, " %u", (unsigned)(rnd() % 100000));
        len += (size_t)sprintf(text + len, rnd() % 5 ? "\n" : "\r\n");
        nrows++;
    }
    len -= 1;          /* the last line without its '\n' */
    wisp_batch *whole = NULL, *part = NULL;
    wisp_batch_new(eng, &whole);
    wisp_batch_new(eng, &part);
    uint64_t ln = 0;
    size_t used = 0;
    CHECK_OK(wisp_batch_parse_vw(whole, v, text, len, 1, 0, &ln, &used));
    CHECK((int)wisp_batch_rows(whole) == nrows && used == len && ln == 2000);
    /* in chunks of random sizes, final=0 until the end, max_rows limits */
    size_t pos = 0, fed = 0;
    uint64_t pln = 0;
    int calls = 0;
    while (pos < len && calls < 100000) {
        calls++;
        size_t want = fed + 1 + rnd() % 4000;
        if (want > len) want = len;
        fed = want;
        size_t u = 0;
        CHECK_OK(wisp_batch_parse_vw(part, v, text + pos, fed - pos, fed == len, 1 + rnd() % 50, &pln, &u));
        pos += u;
        if (u == 0 && fed == len && pos < len) { CHECK(0); break; }
    }
    CHECK(pos == len && pln == ln);
    CHECK(wisp_batch_rows(part) == wisp_batch_rows(whole) && wisp_batch_nnz(part) == wisp_batch_nnz(whole));
    CHECK(wisp_batch_bad_count(part) == wisp_batch_bad_count(whole) && wisp_batch_bad_count(whole) > 50);
    int same = 1;
    for (size_t r = 0; r < wisp_batch_rows(whole) && same; r++) {
        iv *a, *c;
        size_t na = row_pairs(whole, r, &a), nc = row_pairs(part, r, &c);
        same = na == nc && !memcmp(a, c, na * sizeof *a);
        free(a); free(c);
    }
    CHECK(same);
    for (size_t i = 0; i < wisp_batch_bad_count(whole); i++) {
        size_t r1, r2; uint64_t l1, l2; const char *m1, *m2;
        wisp_batch_bad_row(whole, i, &r1, &l1, &m1);
        wisp_batch_bad_row(part, i, &r2, &l2, &m2);
        CHECK(r1 == r2 && l1 == l2 && !strcmp(m1, m2));
    }
    /* final = 0 leaves an unterminated last line */
    wisp_batch_clear(part);
    pln = 0;
    CHECK_OK(wisp_batch_parse_vw(part, v, "1 |a x\n1 |a y", 13, 0, 0, &pln, &used));
    CHECK(wisp_batch_rows(part) == 1 && used == 7 && pln == 1);
    wisp_batch_free(whole);
    wisp_batch_free(part);
    free(text);
    wisp_vw_free(v);
}

/* ---- 5. the importer ---------------------------------------------------------------- */

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static const char *HEADER =
    "Version 9.11.9\nId \nMin label:-50\nMax label:50\nbits:%d\nlda:0\n0 ngram:\n0 skip:\noptions:%s\n"
    "Checksum: 3432043552\n:1\ninitial_t 0\nnorm normalizer 29.3889\nt 5\nsum_loss 3.24932\n";

static void test_import(void)
{
    char src[] = "/tmp/wisp_test_vw_src_XXXXXX", dst[] = "/tmp/wisp_test_vw_dst_XXXXXX";
    int fd = mkstemp(src); if (fd >= 0) close(fd);
    fd = mkstemp(dst); if (fd >= 0) close(fd);
    char text[8192];
    wisp_model *m = NULL;

    /* a readable model */
    int k = snprintf(text, sizeof text, HEADER, 10, " --link logistic --quadratic ab --hash_seed 5");
    snprintf(text + k, sizeof text - (size_t)k, "7:0.25 1.3 2\n348:-0.125 0.5 1\n1023:1e-3 1 1\n\n");
    CHECK(write_text(src, text) == 0);
    CHECK_OK(wisp_import_vw(src, dst, WISP_F32));
    CHECK_OK(wisp_model_load(eng, dst, &m));
    if (m) {
        CHECK(wisp_model_num_features(m) == 1024 && wisp_model_bias(m) == 0);
        CHECK(wisp_model_weight(m, 7) == 0.25f && wisp_model_weight(m, 348) == -0.125f
              && wisp_model_weight(m, 1023) == 1e-3f);
        CHECK(wisp_model_weight(m, 8) == 0);
        CHECK(!strcmp(wisp_model_meta(m, "source"), "vw"));
        CHECK(!strcmp(wisp_model_meta(m, "vw_options"), "-b 10 -q ab --hash_seed 5"));
        CHECK(!strcmp(wisp_model_meta(m, "vw_link"), "logistic") && !strcmp(wisp_model_meta(m, "vw_loss"), "logistic"));
        CHECK(!strcmp(wisp_model_meta(m, "vw_version"), "9.11.9"));
        wisp_model_free(m);
    }
    /* an --invert_hash model, squared loss, f16 */
    k = snprintf(text, sizeof text, "Version 9.11.9\nId \nMin label:-1\nMax label:1\nbits:8\nlda:0\n0 ngram:\n0 skip:\n"
                 "options: --noconstant\nChecksum: 1\n:1\ninitial_t 0\n");
    snprintf(text + k, sizeof text - (size_t)k, "a^x:12:0.5 1 1\na^x*b^p:200:-2 3 1\nConstant:255:0.75\n");
    CHECK(write_text(src, text) == 0);
    CHECK_OK(wisp_import_vw(src, dst, WISP_F16));
    CHECK_OK(wisp_model_load(eng, dst, &m));
    if (m) {
        CHECK(wisp_model_num_features(m) == 256 && wisp_model_dtype(m) == WISP_F16);
        CHECK(wisp_model_weight(m, 12) == 0.5f && wisp_model_weight(m, 200) == -2.0f
              && wisp_model_weight(m, 255) == 0.75f);
        CHECK(!strcmp(wisp_model_meta(m, "vw_loss"), "unknown") && !strcmp(wisp_model_meta(m, "vw_link"), "identity"));
        CHECK(!strcmp(wisp_model_meta(m, "vw_options"), "-b 8 --noconstant"));
        wisp_model_free(m);
    }
    /* refusals */
    static const struct { int bits; const char *opts; const char *weights; int code; const char *msg; } bad[] = {
        { 10, " --oaa 3", "1:1\n", WISP_EINVAL, "'--oaa' is not supported" },
        { 10, " --cubic abc", "1:1\n", WISP_EINVAL, "'--cubic' is not supported" },
        { 10, " --interactions abc", "1:1\n", WISP_EINVAL, "not cubic or higher" },
        { 10, " --quadratic ::", "1:1\n", WISP_EINVAL, "wildcard" },
        { 10, " --nn 5", "1:1\n", WISP_EINVAL, "'--nn' is not supported" },
        { 10, "", "1024:1\n", WISP_EFORMAT, "index 1024 is outside the table of 2^10 weights" },
        { 10, "", "1:1\njunk here\n", WISP_EPARSE, "expected a weight line" },
        { 10, "", "1:1\n1:2\n", WISP_EFORMAT, "appears twice with different weights" },
        { 10, "", "1:nan\n", WISP_EPARSE, "not a finite 32-bit float" },
        { 10, "", "1:1e39\n", WISP_EPARSE, "not a finite 32-bit float" },
        { 32, "", "1:1\n", WISP_ELIMIT, "1 to 31 bits" },
        { 10, " -b1", "1:1\n", WISP_EFORMAT, "the options say -b 1 but the header says bits:10" },
        { 10, " --bit_precision 12", "", WISP_EFORMAT, "the options say -b 12 but the header says bits:10" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        k = snprintf(text, sizeof text, HEADER, bad[i].bits, bad[i].opts);
        snprintf(text + k, sizeof text - (size_t)k, "%s", bad[i].weights);
        CHECK(write_text(src, text) == 0);
        int st = wisp_import_vw(src, dst, WISP_F32);
        CHECK_MSG(st == bad[i].code && strstr(wisp_errmsg(), bad[i].msg) && strstr(wisp_errmsg(), src),
                  "case %zu: %d '%s', wanted %d '%s'", i, st, wisp_errmsg(), bad[i].code, bad[i].msg);
    }
    /* an option -b that agrees with bits: is fine */
    k = snprintf(text, sizeof text, HEADER, 10, " --bit_precision 10 --noconstant");
    snprintf(text + k, sizeof text - (size_t)k, "5:0.25\n");
    CHECK(write_text(src, text) == 0);
    CHECK_MSG(wisp_import_vw(src, dst, WISP_F32) == WISP_OK, "%s", wisp_errmsg());
    CHECK(write_text(src, "Version 9\nId \nbits:10\nlda:2\n") == 0);
    CHECK_FAILS(wisp_import_vw(src, dst, WISP_F32), WISP_EPARSE, "LDA");
    CHECK(write_text(src, "Version 9\nbits:10\n2 ngram:a2\n0 skip:\n") == 0);
    CHECK_FAILS(wisp_import_vw(src, dst, WISP_F32), WISP_EPARSE, "n-grams");
    CHECK(write_text(src, "solver_type L2R_LR\nnr_class 2\n") == 0);
    CHECK_FAILS(wisp_import_vw(src, dst, WISP_F32), WISP_EPARSE, "not a VW --readable_model");
    CHECK(write_text(src, "1:0.5\n") == 0);
    CHECK_FAILS(wisp_import_vw(src, dst, WISP_F32), WISP_EPARSE, "before the header's 'Version' line");
    CHECK_FAILS(wisp_import_vw("/nonexistent/model.txt", dst, WISP_F32), WISP_EIO, "cannot open");
    CHECK_FAILS(wisp_import_vw(src, dst, 7), WISP_EINVAL, "unknown weight dtype");
    CHECK_FAILS(wisp_import_vw(NULL, dst, 0), WISP_EINVAL, "NULL");
    unlink(src);
    unlink(dst);
}

/* ---- 6. parse throughput (informative) --------------------------------------------- */

static void bench_parse(void)
{
    wisp_vw *v = NULL;
    if (wisp_vw_new("-b 18 -q ab", &v) != WISP_OK) return;
    size_t cap = 8 << 20, len = 0;
    char *text = malloc(cap);
    int rows = 0;
    while (len + 512 < cap) {
        len += (size_t)sprintf(text + len, "%d |a", (int)(rnd() % 2) * 2 - 1);
        for (int k = 0; k < 8; k++) len += (size_t)sprintf(text + len, " n%d:%.4f", k, 0.5 + rnd01() * 10);
        len += (size_t)sprintf(text + len, " |b");
        for (int k = 0; k < 4; k++) len += (size_t)sprintf(text + len, " c%d_%08x", k, (unsigned)(rnd() % 100000));
        text[len++] = '\n';
        rows++;
    }
    wisp_batch *b = NULL;
    wisp_batch_new(eng, &b);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        wisp_batch_clear(b);
        uint64_t t0 = wisp__now_ns();
        wisp_batch_parse_vw(b, v, text, len, 1, 0, NULL, NULL);
        double s = (double)(wisp__now_ns() - t0) / 1e9;
        if (s < best) best = s;
    }
    CHECK((int)wisp_batch_rows(b) == rows && wisp_batch_nnz(b) == (size_t)rows * (8 + 4 + 32 + 1));
    printf("test_vw: parse -b 18 -q ab, 8 valued a x 4 string b (45 features/row): %.1f MB/s, %.2f M rows/s (one core, "
           "shared machine)\n", (double)len / best / 1e6, rows / best / 1e6);
    wisp_batch_free(b);
    free(text);
    wisp_vw_free(v);
}

int main(void)
{
    if (wisp_engine_new(1, &eng) != WISP_OK) { fprintf(stderr, "engine: %s\n", wisp_errmsg()); return 1; }
    test_golden();
    test_parser_cases();
    test_options();
    test_streaming();
    test_import();
    if (!getenv("WISP_TEST_NO_BENCH")) bench_parse();
    wisp_engine_free(eng);
    return CHECK_DONE("test_vw");
}
