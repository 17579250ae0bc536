/* columns.c — feature columns exact to TensorFlow: the JSON description, raw-input batches, and the CPU transform. */
/*
 * THE DESCRIPTION (JSON, UTF-8; the "columns" section of a .wisp file)
 *
 *   {
 *     "format": "wisp-columns", "version": 1,
 *     "inputs": [ input, ... ],
 *     "columns": [ column, ... ],
 *     "num_features": N                      optional: checked >= every offset + size
 *   }
 *   input  = {"name": str, "dtype": "float32" | "int64" | "string",
 *             "sparse": bool (false), "default": value | null}
 *   column = {"name": str, "type": ..., "offset": int, "size": int (optional, checked), ...}
 *     "numeric"          "key": input, "normalizer": {"type": "standard", "mean": m, "std": s}
 *                        | {"type": "affine", "scale": a, "shift": b}          size 1
 *     "bucketized"       "source": a numeric column (object; name/offset unused),
 *                        "boundaries": [increasing numbers]                     size len + 1
 *     "hash_bucket"      "key": input, "buckets": n                             size n
 *     "vocabulary_list"  "key": input, "vocabulary": [str... | int...],
 *                        "num_oov_buckets": k (0), "default_value": d (-1)      size len + k
 *     "identity"         "key": input, "buckets": n, "default_value": d | null  size n
 *     "crossed"          "keys": [input name | column object, ...] (2 or more),
 *                        "buckets": n, "hash_key": int | "0x..." (0xDECAFCAFFE)  size n
 *   Top-level column names are unique and their slices do not overlap.
 *   Numbers that TensorFlow keeps as float32 (boundaries, normalizer
 *   constants, float defaults) are read as a double and rounded to float32,
 *   which is what TensorFlow does with the Python float.
 *
 * INPUTS (what "missing" means; TensorFlow's dense-input rules)
 *   A dense input (the default) has exactly one value per row, as a dense
 *   tensor fed to TensorFlow (decode_csv, FixedLenFeature, a numpy
 *   column). A row that leaves it out gets its "default"; absent "default"
 *   means "" for strings and -1 for int64 (TensorFlow's own missing
 *   markers), and no default for float32; with no default a missing value
 *   makes the row bad (decode_csv's "Field N is required").
 *   A sparse input (TensorFlow: a SparseTensor, VarLenFeature) has any
 *   number of values per row, zero meaning missing.
 *
 * TENSORFLOW FACTS (tensorflow/python/feature_column/feature_column_v2.py,
 * ops/sparse_ops.py, ops/lookup_ops.py, kernels/sparse_cross_op.cc,
 * bucketize_op.cc; each checked by a golden vector in spec/data/tf_golden.json
 * made by scripts/tf_golden.py from a real TensorFlow):
 *   - Categorical columns (hash_bucket, vocabulary_list, identity) turn a
 *     dense input into a sparse one dropping "" (strings) and -1 (integers):
 *     _to_sparse_input_and_drop_ignore_values. Sparse inputs keep every value.
 *   - hash_bucket: Fingerprint64(value) % buckets; integers go through
 *     as_string (decimal) first.
 *   - vocabulary_list: index in the list; out of vocabulary: size +
 *     Fingerprint64(as_string(value)) % num_oov_buckets when k > 0, else
 *     default_value; ids < 0 add no weight (safe_embedding_lookup_sparse).
 *   - identity: the value when in [0, buckets), else default_value; with no
 *     default TensorFlow fails, here the row is bad.
 *   - bucketized: std::upper_bound over float32 boundaries of the float32
 *     (normalized) value: NaN and +inf land in the last bucket, -inf in the
 *     first. (A NaN source is not an error for TensorFlow; it is not here.)
 *   - numeric: normalizer_fn, then float32; the linear model multiplies the
 *     value by its one weight. A NaN or infinite value makes the row bad
 *     here (TensorFlow would return a NaN or saturated score).
 *   - crossed: the leaf keys (nested crossed columns flattened, in order)
 *     go to sparse_cross_hashed, which puts SPARSE inputs first and DENSE
 *     ones after (categorical columns are sparse; raw inputs are as fed),
 *     keeping the order within each group. Per combination of values
 *     h = hash_key; h = FingerprintCat64(h, f) for each key, f being
 *     Fingerprint64(string), the int64 value itself, or a categorical id
 *     (a vocabulary's -1 included); id = h % buckets (uint64). Raw float
 *     inputs are cast to int64 (truncation). Dense raw inputs drop
 *     nothing: a "" string is hashed like any other. A hash_key of 0 means
 *     the default key. A hash_bucket column cannot be a key (TensorFlow
 *     refuses it).
 *   - The linear model sums w[id] over a row's ids with duplicates counted
 *     (sparse_combiner "sum", LinearClassifier's default).
 *
 * RAW INPUTS (wisp_raw): column by column, the layout a device would ship.
 * A dense input holds exactly one value per row (value k is row k's; a
 * missing one is filled with the default when the row ends; a bad row
 * keeps a placeholder); a sparse input has row offsets. Values: float32,
 * int64, or strings as byte offsets + bytes. Bad rows are listed with
 * their line and message. The text readers (tsv.c) append straight into
 * these arrays after one capacity check per line.
 *
 * THE TRANSFORM (bottom of this file). wisp_transform goes over chunks of
 * 256 rows and evaluates each column over the chunk (the loop a GPU kernel
 * has: one row per thread), then assembles the rows into the batch; columns
 * over sparse inputs and unusual rows (bad values) take the row-wise path,
 * wisp_transform__rowwise, which is also the reference the tests compare
 * the column path with. Fingerprints of dense strings are computed once per
 * value; h % buckets is a multiplication (or a mask for powers of two); the
 * chunk loops are also compiled for x86-64-v4 and picked at load time.
 */
#include "internal.h"
#include "bucketize.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emmintrin.h>

#define DEFAULT_HASH_KEY 0xDECAFCAFFEull
#define JSON_MAX_DEPTH   64

/* ======================================================================
 * JSON: a small strict parser into a tree (descriptions are small)
 * ====================================================================== */

enum { J_NULL = 0, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int t;
    size_t off;                  /* byte offset of the value in the text */
    char *s;                     /* J_STR: decoded (NUL-terminated); J_NUM: the token */
    size_t len;
    struct jv *items;            /* J_ARR, J_OBJ values */
    char **keys;                 /* J_OBJ keys (NUL-terminated) */
    size_t *klen;
    size_t n, cap;
} jv;

typedef struct {
    const char *text, *p, *end;
    char err[256];
    size_t err_off;
    int status;
} jparser;

static void jv_free(jv *v)
{
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys) wisp_free(v->keys[i]);
    }
    wisp_free(v->items);
    wisp_free(v->keys);
    wisp_free(v->klen);
    wisp_free(v->s);
}

static int jfail(jparser *jp, int status, const char *msg)
{
    if (!jp->status) {
        jp->status = status;
        jp->err_off = (size_t)(jp->p - jp->text);
        snprintf(jp->err, sizeof jp->err, "%s", msg);
    }
    return status;
}

static void jskip(jparser *jp)
{
    while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r')) jp->p++;
}

static int utf8_seq(const unsigned char *s, const unsigned char *e)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n;
    unsigned min;
    if ((c & 0xE0) == 0xC0) { n = 2; min = 0x80; c &= 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; min = 0x800; c &= 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; min = 0x10000; c &= 0x07; }
    else return 0;
    if (e - s < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    return n;
}

bool wisp_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + len;
    while (p < e) {
        if (*p < 0x80) { p++; continue; }
        int n = utf8_seq(p, e);
        if (!n) return false;
        p += n;
    }
    return true;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned c)
{
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

const char *wisp_json__string(const char **pp, const char *end, char *out, size_t *out_len)
{
    const char *p = *pp;
    size_t n = 0;
    if (p >= end || *p != '"') return "expected a string";
    p++;
    for (;;) {
        /* a run of plain bytes */
        const char *s = p;
        while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80) p++;
        memcpy(out + n, s, (size_t)(p - s));
        n += (size_t)(p - s);
        if (p >= end) { *pp = p; return "unterminated string"; }
        unsigned char c = (unsigned char)*p;
        if (c == '"') { p++; break; }
        if (c < 0x20) { *pp = p; return "control character in a string"; }
        if (c >= 0x80) {
            int k = utf8_seq((const unsigned char *)p, (const unsigned char *)end);
            if (!k) { *pp = p; return "invalid UTF-8 in a string"; }
            memcpy(out + n, p, (size_t)k);
            n += (size_t)k;
            p += k;
            continue;
        }
        /* an escape */
        if (end - p < 2) { *pp = p; return "unterminated string"; }
        char e = p[1];
        p += 2;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned u;
            if (hex4(p, end, &u)) { *pp = p; return "bad \\u escape"; }
            p += 4;
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned lo;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    *pp = p;
                    return "unpaired surrogate in a \\u escape";
                }
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            } else if (u >= 0xDC00 && u <= 0xDFFF) {
                *pp = p;
                return "unpaired surrogate in a \\u escape";
            }
            n += put_utf8(out + n, u);
            break;
        }
        default: *pp = p - 2; return "bad escape in a string";
        }
    }
    *pp = p;
    *out_len = n;
    return NULL;
}

size_t wisp_json__number_len(const char *p, const char *end)
{
    const char *s = p;
    if (p < end && *p == '-') p++;
    if (p >= end) return 0;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return 0;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    return (size_t)(p - s);
}

static int jparse_value(jparser *jp, jv *v, int depth);

static int jpush(jparser *jp, jv *v, size_t *idx, bool obj)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        jv *ni = wisp_realloc(v->items, nc * sizeof *ni);
        if (!ni) return jfail(jp, WISP_ENOMEM, "out of memory");
        v->items = ni;
        if (obj) {
            char **nk = wisp_realloc(v->keys, nc * sizeof *nk);
            if (!nk) return jfail(jp, WISP_ENOMEM, "out of memory");
            v->keys = nk;
            size_t *nl = wisp_realloc(v->klen, nc * sizeof *nl);
            if (!nl) return jfail(jp, WISP_ENOMEM, "out of memory");
            v->klen = nl;
        }
        v->cap = nc;
    }
    *idx = v->n;
    memset(&v->items[v->n], 0, sizeof v->items[0]);
    if (obj) { v->keys[v->n] = NULL; v->klen[v->n] = 0; }
    v->n++;
    return 0;
}

static int jstring(jparser *jp, char **out, size_t *len)
{
    /* decoded length <= raw length: scan to the closing quote first */
    const char *q = jp->p + 1;
    while (q < jp->end && *q != '"') q += (*q == '\\' && q + 1 < jp->end) ? 2 : 1;
    size_t cap = (size_t)(q - jp->p) + 1;
    char *buf = wisp_malloc(cap);
    if (!buf) return jfail(jp, WISP_ENOMEM, "out of memory");
    const char *err = wisp_json__string(&jp->p, jp->end, buf, len);
    if (err) { wisp_free(buf); return jfail(jp, WISP_EPARSE, err); }
    buf[*len] = '\0';
    *out = buf;
    return 0;
}

static int jparse_value(jparser *jp, jv *v, int depth)
{
    jskip(jp);
    v->off = (size_t)(jp->p - jp->text);
    if (jp->p >= jp->end) return jfail(jp, WISP_EPARSE, "unexpected end of text");
    char c = *jp->p;
    if (c == '{' || c == '[') {
        if (depth >= JSON_MAX_DEPTH) return jfail(jp, WISP_ELIMIT, "nested deeper than 64 levels");
        bool obj = c == '{';
        v->t = obj ? J_OBJ : J_ARR;
        jp->p++;
        jskip(jp);
        if (jp->p < jp->end && *jp->p == (obj ? '}' : ']')) { jp->p++; return 0; }
        for (;;) {
            size_t i;
            if (jpush(jp, v, &i, obj)) return jp->status;
            if (obj) {
                jskip(jp);
                if (jp->p >= jp->end || *jp->p != '"') return jfail(jp, WISP_EPARSE, "expected a key string");
                if (jstring(jp, &v->keys[i], &v->klen[i])) return jp->status;
                for (size_t k = 0; k < i; k++)
                    if (v->klen[k] == v->klen[i] && !memcmp(v->keys[k], v->keys[i], v->klen[i]))
                        return jfail(jp, WISP_EPARSE, "duplicate key in an object");
                jskip(jp);
                if (jp->p >= jp->end || *jp->p != ':') return jfail(jp, WISP_EPARSE, "expected ':'");
                jp->p++;
            }
            if (jparse_value(jp, &v->items[i], depth + 1)) return jp->status;
            jskip(jp);
            if (jp->p < jp->end && *jp->p == ',') { jp->p++; continue; }
            if (jp->p < jp->end && *jp->p == (obj ? '}' : ']')) { jp->p++; return 0; }
            return jfail(jp, WISP_EPARSE, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        v->t = J_STR;
        return jstring(jp, &v->s, &v->len);
    }
    static const struct { const char *w; int t; } words[] = { { "null", J_NULL }, { "true", J_TRUE }, { "false", J_FALSE } };
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].w);
        if ((size_t)(jp->end - jp->p) >= n && !memcmp(jp->p, words[i].w, n)) {
            v->t = words[i].t;
            jp->p += n;
            return 0;
        }
    }
    size_t n = wisp_json__number_len(jp->p, jp->end);
    if (!n) return jfail(jp, WISP_EPARSE, "expected a value");
    v->t = J_NUM;
    v->s = wisp_malloc(n + 1);
    if (!v->s) return jfail(jp, WISP_ENOMEM, "out of memory");
    memcpy(v->s, jp->p, n);
    v->s[n] = '\0';
    v->len = n;
    jp->p += n;
    return 0;
}

static const jv *jget(const jv *o, const char *key)
{
    if (!o || o->t != J_OBJ) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < o->n; i++)
        if (o->klen[i] == kl && !memcmp(o->keys[i], key, kl)) return &o->items[i];
    return NULL;
}

/* ======================================================================
 * Building the description
 * ====================================================================== */

typedef struct {
    wisp_columns *c;
    const char *text;
    char where[200];             /* "columns[3] 'city_X_age'" */
    size_t node_cap, col_cap;
} builder;

static void line_col(const char *text, size_t off, size_t *line, size_t *col)
{
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') { l++; c = 1; } else c++;
    }
    *line = l;
    *col = c;
}

static int bfail(builder *b, const jv *at, int status, const char *fmt, ...) WISP_PRINTF(4, 5);
static int bfail(builder *b, const jv *at, int status, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) {
        size_t l, col;
        line_col(b->text, at->off, &l, &col);
        return wisp_fail(status, "columns: line %zu, column %zu: %s%s%s", l, col, b->where, b->where[0] ? ": " : "", msg);
    }
    return wisp_fail(status, "columns: %s%s%s", b->where, b->where[0] ? ": " : "", msg);
}

static const char *jtype_name(int t)
{
    static const char *n[] = { "null", "false", "true", "a number", "a string", "an array", "an object" };
    return n[t];
}

/* A field of obj that must be present with type t (J_TRUE stands for any boolean). */
static int need(builder *b, const jv *obj, const char *key, int t, const jv **out)
{
    const jv *v = jget(obj, key);
    *out = NULL;
    if (!v) return bfail(b, obj, WISP_EPARSE, "missing \"%s\"", key);
    bool ok = t == J_TRUE ? (v->t == J_TRUE || v->t == J_FALSE) : v->t == t;
    if (!ok) return bfail(b, v, WISP_EPARSE, "\"%s\" must be %s, not %s", key,
                          t == J_TRUE ? "true or false" : jtype_name(t), jtype_name(v->t));
    *out = v;
    return WISP_OK;
}

/* Only these keys may appear in obj (catches typos like "bucket"). */
static int only_keys(builder *b, const jv *obj, const char *const *allowed)
{
    for (size_t i = 0; i < obj->n; i++) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(obj->keys[i], *a)) { ok = true; break; }
        if (!ok) return bfail(b, &obj->items[i], WISP_EPARSE, "unknown field \"%s\"", obj->keys[i]);
    }
    return WISP_OK;
}

/* An integer literal (no fraction or exponent) in [lo, hi]. */
static int get_int(builder *b, const jv *v, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    if (v->t != J_NUM) return bfail(b, v, WISP_EPARSE, "%s must be an integer, not %s", what, jtype_name(v->t));
    int64_t x;
    int r = wisp_parse_i64(v->s, v->len, &x);
    if (r == -1) return bfail(b, v, WISP_EPARSE, "%s must be an integer, not %s", what, v->s);
    if (r == -2 || x < lo || x > hi)
        return bfail(b, v, WISP_EPARSE, "%s is %s, outside [%lld, %lld]", what, v->s, (long long)lo, (long long)hi);
    *out = x;
    return WISP_OK;
}

/* A count in [1, max]: an integer literal that may exceed int64 only up to max. */
static int get_count(builder *b, const jv *obj, const char *key, uint64_t max, uint64_t *out)
{
    const jv *v;
    int st = need(b, obj, key, J_NUM, &v);
    if (st) return st;
    int64_t x;
    st = get_int(b, v, key, 1, (int64_t)max, &x);
    if (st) return st;
    *out = (uint64_t)x;
    return WISP_OK;
}

/* A number (any JSON number), as TensorFlow rounds a Python float to float32. */
static int get_f32(builder *b, const jv *v, const char *what, float *out)
{
    if (v->t != J_NUM) return bfail(b, v, WISP_EPARSE, "%s must be a number, not %s", what, jtype_name(v->t));
    double d = strtod(v->s, NULL);
    float f = (float)d;
    if (!isfinite(f)) return bfail(b, v, WISP_EPARSE, "%s (%s) is not a finite float32", what, v->s);
    *out = f;
    return WISP_OK;
}

static int add_node(builder *b, uint32_t *idx)
{
    *idx = 0;
    wisp_columns *c = b->c;
    if (c->nnodes == b->node_cap) {
        size_t nc = b->node_cap ? b->node_cap * 2 : 16;
        if (nc > WISP_MAX_COLUMNS * 4u) return bfail(b, NULL, WISP_ELIMIT, "more than %u column nodes", WISP_MAX_COLUMNS * 4u);
        struct wisp_node *nn = wisp_realloc(c->nodes, nc * sizeof *nn);
        if (!nn) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        c->nodes = nn;
        b->node_cap = nc;
    }
    memset(&c->nodes[c->nnodes], 0, sizeof c->nodes[0]);
    *idx = (uint32_t)c->nnodes++;
    return WISP_OK;
}

static int find_input(builder *b, const jv *v, const char *what, uint32_t *out)
{
    if (v->t != J_STR) return bfail(b, v, WISP_EPARSE, "%s must be an input name (a string), not %s", what, jtype_name(v->t));
    long i = wisp_columns__find_input(b->c, v->s, v->len);
    if (i < 0) return bfail(b, v, WISP_EPARSE, "%s: unknown input '%s' (not in \"inputs\")", what, v->s);
    *out = (uint32_t)i;
    return WISP_OK;
}

static const char *dtype_str(int d)
{
    return d == WISP_INPUT_FLOAT32 ? "float32" : d == WISP_INPUT_INT64 ? "int64" : "string";
}

/* h % n by multiplication (Lemire, Kaser and Kurz, "Faster remainder by
 * direct computation", 2019): with M = floor((2^128 - 1) / n) + 1, the
 * remainder is the high 64 bits of (M * h mod 2^128) * n, for every 64-bit h
 * and n (n = 1: M wraps to 0 and so does the result). Four multiplies
 * instead of a 64-bit division. */
typedef unsigned __int128 u128;
static inline uint64_t fastmod_buckets(uint64_t h, const struct wisp_node *nd)
{
    if (nd->pow2_mask) return h & nd->pow2_mask;
    u128 m = ((u128)nd->magic_hi << 64) | nd->magic_lo;
    u128 low = m * h;
    u128 bottom = ((low & UINT64_MAX) * (u128)nd->buckets) >> 64;
    u128 top = (low >> 64) * (u128)nd->buckets;
    return (uint64_t)((bottom + top) >> 64);
}

/* h % n through a double quotient, for 2^13 <= n < 2^62 with inv = 1.0 / n:
 * branch-free and vectorizable (AVX-512: eight lanes), where the 128-bit
 * products above are not. (double)h is within 2^10 of h, inv within 2^-53
 * relative of 1/n, the product within 2^-53 relative of theirs: the
 * quotient is off from h / n by at most (2^10 + 2^11 + 2^11) / n < 1, so q
 * is floor(h / n) - 1, + 0 or + 1 and r = h - q n lies in [-n, 2n) (no int64
 * overflow as n < 2^62); one correction each way makes it h % n exactly. */
static inline uint64_t fpmod(uint64_t h, uint64_t n, double inv)
{
    uint64_t q = (uint64_t)(int64_t)((double)h * inv);     /* < 2^51: fits */
    int64_t r = (int64_t)(h - q * n);
    r += (r >> 63) & (int64_t)n;
    r -= r >= (int64_t)n ? (int64_t)n : 0;
    return (uint64_t)r;
}

static inline bool fpmod_ok(const struct wisp_node *nd)
{
    return !nd->pow2_mask && nd->buckets >= (1u << 13) && nd->buckets < (1ull << 62);
}

static void set_magic(struct wisp_node *nd)
{
    u128 m = (~(u128)0) / nd->buckets + 1;
    nd->magic_lo = (uint64_t)m;
    nd->magic_hi = (uint64_t)(m >> 64);
    nd->pow2_mask = nd->buckets > 1 && !(nd->buckets & (nd->buckets - 1)) ? nd->buckets - 1 : 0;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static int parse_column(builder *b, const jv *o, bool top, uint32_t *out, uint64_t *size);

static int parse_vocab(builder *b, const jv *o, struct wisp_node *nd_in, uint32_t ni)
{
    wisp_columns *c = b->c;
    const jv *voc;
    int st = need(b, o, "vocabulary", J_ARR, &voc);
    if (st) return st;
    if (voc->n == 0) return bfail(b, voc, WISP_EPARSE, "\"vocabulary\" is empty");
    if (voc->n > WISP_MAX_COLUMNS * 64u)
        return bfail(b, voc, WISP_ELIMIT, "\"vocabulary\" has %zu entries, more than %u", voc->n, WISP_MAX_COLUMNS * 64u);
    int dt = c->inputs[nd_in->input].dtype;
    if (dt == WISP_INPUT_FLOAT32)
        return bfail(b, o, WISP_EPARSE, "a vocabulary_list needs a string or int64 input; '%s' is float32",
                     c->inputs[nd_in->input].name);
    size_t n = voc->n;
    uint32_t slots = 16;
    while (slots < 2 * n) slots <<= 1;
    struct wisp_node *nd = &c->nodes[ni];
    nd->vocab_n = (uint32_t)n;
    nd->vocab_hash = wisp_calloc(n, sizeof *nd->vocab_hash);
    nd->vocab_slots = wisp_calloc(slots, sizeof *nd->vocab_slots);
    if (dt == WISP_INPUT_STRING) {
        nd->vocab_str = wisp_calloc(n, sizeof *nd->vocab_str);
        nd->vocab_len = wisp_calloc(n, sizeof *nd->vocab_len);
    } else {
        nd->vocab_int = wisp_calloc(n, sizeof *nd->vocab_int);
    }
    if (!nd->vocab_hash || !nd->vocab_slots || (dt == WISP_INPUT_STRING ? !nd->vocab_str || !nd->vocab_len : !nd->vocab_int))
        return bfail(b, NULL, WISP_ENOMEM, "out of memory for a vocabulary of %zu entries", n);
    nd->vocab_mask = slots - 1;
    for (size_t i = 0; i < n; i++) {
        const jv *e = &voc->items[i];
        uint64_t h;
        if (dt == WISP_INPUT_STRING) {
            if (e->t != J_STR) return bfail(b, e, WISP_EPARSE, "vocabulary[%zu] must be a string (input '%s' is string)", i, c->inputs[nd->input].name);
            if (e->len > WISP_MAX_STRING_BYTES) return bfail(b, e, WISP_ELIMIT, "vocabulary[%zu] is longer than %u bytes", i, WISP_MAX_STRING_BYTES);
            nd->vocab_str[i] = wisp_malloc(e->len + 1);
            if (!nd->vocab_str[i]) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
            memcpy(nd->vocab_str[i], e->s, e->len + 1);
            nd->vocab_len[i] = (uint32_t)e->len;
            h = wisp_fingerprint64(e->s, e->len);
        } else {
            int64_t x;
            char what[48];
            snprintf(what, sizeof what, "vocabulary[%zu]", i);
            if ((st = get_int(b, e, what, INT64_MIN, INT64_MAX, &x))) return st;
            nd->vocab_int[i] = x;
            h = mix64((uint64_t)x);
        }
        nd->vocab_hash[i] = h;
        uint32_t s = (uint32_t)h & nd->vocab_mask;
        while (nd->vocab_slots[s]) {
            uint32_t k = nd->vocab_slots[s] - 1;
            bool same = dt == WISP_INPUT_STRING
                ? nd->vocab_len[k] == nd->vocab_len[i] && !memcmp(nd->vocab_str[k], nd->vocab_str[i], nd->vocab_len[i])
                : nd->vocab_int[k] == nd->vocab_int[i];
            if (same) return bfail(b, e, WISP_EPARSE, "vocabulary[%zu] repeats vocabulary[%u] (TensorFlow refuses duplicate keys)", i, k);
            s = (s + 1) & nd->vocab_mask;
        }
        nd->vocab_slots[s] = (uint32_t)i + 1;
    }
    const jv *v;
    int64_t x;
    nd->num_oov = 0;
    if ((v = jget(o, "num_oov_buckets"))) {
        if ((st = get_int(b, v, "num_oov_buckets", 0, (int64_t)WISP_MAX_FEATURES, &x))) return st;
        nd->num_oov = (uint64_t)x;
    }
    nd->has_default = true;
    nd->default_value = -1;
    if ((v = jget(o, "default_value")) && v->t != J_NULL) {
        if ((st = get_int(b, v, "default_value", -1, (int64_t)n - 1, &x))) return st;
        nd->default_value = x;
    }
    if (nd->num_oov && nd->default_value != -1)
        return bfail(b, o, WISP_EPARSE, "num_oov_buckets and default_value cannot both be set (as in TensorFlow)");
    nd->buckets = n + nd->num_oov;
    return WISP_OK;
}

static int parse_crossed(builder *b, const jv *o, uint32_t ni)
{
    wisp_columns *c = b->c;
    const jv *keys;
    int st = need(b, o, "keys", J_ARR, &keys);
    if (st) return st;
    if (keys->n < 2) return bfail(b, keys, WISP_EPARSE, "a crossed column needs at least 2 keys, has %zu", keys->n);
    /* flatten nested crosses in order */
    struct wisp_cross_key *flat = NULL;
    size_t nflat = 0, cap = 0;
    for (size_t i = 0; i < keys->n; i++) {
        const jv *k = &keys->items[i];
        struct wisp_cross_key add[1];
        const struct wisp_cross_key *src = add;
        size_t nadd = 1;
        if (k->t == J_STR) {
            uint32_t in;
            char what[32];
            snprintf(what, sizeof what, "keys[%zu]", i);
            if ((st = find_input(b, k, what, &in))) goto fail;
            add[0].raw = true;
            add[0].index = in;
        } else if (k->t == J_OBJ) {
            uint32_t sub;
            uint64_t sz;
            char saved[sizeof b->where];
            memcpy(saved, b->where, sizeof saved);
            size_t wl = strlen(b->where);
            snprintf(b->where + wl, sizeof b->where - wl, ": keys[%zu]", i);
            st = parse_column(b, k, false, &sub, &sz);
            memcpy(b->where, saved, sizeof saved);
            if (st) goto fail;
            struct wisp_node *sn = &c->nodes[sub];
            if (sn->kind == WISP_NODE_HASH) {
                st = bfail(b, k, WISP_EPARSE, "keys[%zu]: a hash_bucket column cannot be crossed (TensorFlow refuses "
                           "it: cross the input's name instead)", i);
                goto fail;
            }
            if (sn->kind == WISP_NODE_NUMERIC) {
                st = bfail(b, k, WISP_EPARSE, "keys[%zu]: a numeric column cannot be crossed (bucketize it, or cross the input's name)", i);
                goto fail;
            }
            if (sn->kind == WISP_NODE_CROSSED) { src = sn->keys; nadd = sn->nkeys; }
            else { add[0].raw = false; add[0].index = sub; }
        } else {
            st = bfail(b, k, WISP_EPARSE, "keys[%zu] must be an input name or a column object, not %s", i, jtype_name(k->t));
            goto fail;
        }
        if (nflat + nadd > cap) {
            size_t ncap = cap ? cap * 2 : 8;
            while (ncap < nflat + nadd) ncap *= 2;
            struct wisp_cross_key *nf = wisp_realloc(flat, ncap * sizeof *nf);
            if (!nf) { st = bfail(b, NULL, WISP_ENOMEM, "out of memory"); goto fail; }
            flat = nf;
            cap = ncap;
        }
        memcpy(flat + nflat, src, nadd * sizeof *src);
        nflat += nadd;
    }
    if (nflat > 64) { st = bfail(b, keys, WISP_ELIMIT, "a cross of %zu keys (more than 64)", nflat); goto fail; }
    /* TensorFlow's order: sparse keys (categorical columns, sparse inputs) first, then dense inputs */
    struct wisp_node *nd = &c->nodes[ni];
    nd->keys = wisp_malloc(nflat * sizeof *nd->keys);
    if (!nd->keys) { st = bfail(b, NULL, WISP_ENOMEM, "out of memory"); goto fail; }
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < nflat; i++) {
            bool sparse = !flat[i].raw || c->inputs[flat[i].index].sparse;
            if (sparse == (pass == 0)) nd->keys[k++] = flat[i];
        }
    nd->nkeys = (uint32_t)nflat;
    for (size_t i = 0; i < nflat; i++)
        if (nd->keys[i].raw && c->inputs[nd->keys[i].index].dtype == WISP_INPUT_STRING)
            c->inputs[nd->keys[i].index].need_fp = true;
    wisp_free(flat);
    if ((st = get_count(b, o, "buckets", WISP_MAX_FEATURES, &nd->buckets))) return st;
    nd->hash_key = DEFAULT_HASH_KEY;
    const jv *hk = jget(o, "hash_key");
    if (hk && hk->t != J_NULL) {
        uint64_t key = 0;
        if (hk->t == J_STR && hk->len > 2 && hk->len <= 18 && hk->s[0] == '0' && (hk->s[1] | 0x20) == 'x') {
            for (size_t i = 2; i < hk->len; i++) {
                int h = hexval(hk->s[i]);
                if (h < 0) return bfail(b, hk, WISP_EPARSE, "hash_key '%s' is not hexadecimal", hk->s);
                key = key << 4 | (uint64_t)h;
            }
        } else if (hk->t == J_NUM && hk->len <= 20 && strspn(hk->s, "0123456789") == hk->len) {
            errno = 0;
            unsigned long long x = strtoull(hk->s, NULL, 10);
            if (errno) return bfail(b, hk, WISP_EPARSE, "hash_key %s overflows 64 bits", hk->s);
            key = x;
        } else if (hk->t == J_NUM && hk->s[0] == '-') {
            int64_t x;          /* TensorFlow's int64 attribute, used as uint64 */
            if ((st = get_int(b, hk, "hash_key", INT64_MIN, -1, &x))) return st;
            key = (uint64_t)x;
        } else {
            return bfail(b, hk, WISP_EPARSE, "hash_key must be an integer in [-2^63, 2^64) or a \"0x...\" string");
        }
        if (key) nd->hash_key = key;    /* sparse_cross_hashed: hash_key or the default */
    }
    return WISP_OK;
fail:
    wisp_free(flat);
    return st;
}

/* Parse one column object into a node; *size is its slice size. */
static int parse_column(builder *b, const jv *o, bool top, uint32_t *out, uint64_t *size)
{
    wisp_columns *c = b->c;
    if (o->t != J_OBJ) return bfail(b, o, WISP_EPARSE, "a column must be an object, not %s", jtype_name(o->t));
    const jv *type, *v;
    int st = need(b, o, "type", J_STR, &type);
    if (st) return st;
    uint32_t ni = 0;
    if ((st = add_node(b, &ni))) return st;
    struct wisp_node *nd = &c->nodes[ni];
    const char *t = type->s;
    if (!strcmp(t, "numeric")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "key", "normalizer", "shape", "default", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        nd->kind = WISP_NODE_NUMERIC;
        if ((st = need(b, o, "key", J_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
        const struct wisp_input *in = &c->inputs[nd->input];
        if (in->dtype == WISP_INPUT_STRING)
            return bfail(b, v, WISP_EPARSE, "a numeric column needs a float32 or int64 input; '%s' is string", in->name);
        if (in->sparse)
            return bfail(b, v, WISP_EPARSE, "a numeric column needs a dense input; '%s' is sparse (TensorFlow refuses SparseTensors here)", in->name);
        if ((v = jget(o, "shape")) && !(v->t == J_NUM && !strcmp(v->s, "1")) &&
            !(v->t == J_ARR && v->n == 1 && v->items[0].t == J_NUM && !strcmp(v->items[0].s, "1")))
            return bfail(b, v, WISP_EPARSE, "only numeric columns of shape 1 are supported");
        if ((v = jget(o, "default")))
            return bfail(b, v, WISP_EPARSE, "put the default on the input (\"inputs\"), not on the column");
        nd->norm = WISP_NORM_NONE;
        if ((v = jget(o, "normalizer")) && v->t != J_NULL) {
            const jv *nt, *a, *bb;
            if (v->t != J_OBJ) return bfail(b, v, WISP_EPARSE, "\"normalizer\" must be an object");
            if ((st = need(b, v, "type", J_STR, &nt))) return st;
            if (in->dtype != WISP_INPUT_FLOAT32)
                return bfail(b, v, WISP_EPARSE, "a normalizer needs a float32 input; '%s' is int64", in->name);
            if (!strcmp(nt->s, "standard")) {
                static const char *const nk[] = { "type", "mean", "std", NULL };
                if ((st = only_keys(b, v, nk)) || (st = need(b, v, "mean", J_NUM, &a)) || (st = need(b, v, "std", J_NUM, &bb)) ||
                    (st = get_f32(b, a, "mean", &nd->norm_a)) || (st = get_f32(b, bb, "std", &nd->norm_b)))
                    return st;
                if (nd->norm_b == 0) return bfail(b, bb, WISP_EPARSE, "std is 0");
                nd->norm = WISP_NORM_STANDARD;
            } else if (!strcmp(nt->s, "affine")) {
                static const char *const nk[] = { "type", "scale", "shift", NULL };
                if ((st = only_keys(b, v, nk)) || (st = need(b, v, "scale", J_NUM, &a)) || (st = need(b, v, "shift", J_NUM, &bb)) ||
                    (st = get_f32(b, a, "scale", &nd->norm_a)) || (st = get_f32(b, bb, "shift", &nd->norm_b)))
                    return st;
                nd->norm = WISP_NORM_AFFINE;
            } else {
                return bfail(b, nt, WISP_EPARSE, "unknown normalizer '%s' (use standard or affine)", nt->s);
            }
        }
        *size = 1;
    } else if (!strcmp(t, "bucketized")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "source", "boundaries", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        const jv *src, *bd;
        if ((st = need(b, o, "source", J_OBJ, &src)) || (st = need(b, o, "boundaries", J_ARR, &bd))) return st;
        uint32_t sn;
        uint64_t ssz;
        char saved[sizeof b->where];
        memcpy(saved, b->where, sizeof saved);
        size_t wl = strlen(b->where);
        snprintf(b->where + wl, sizeof b->where - wl, ": source");
        st = parse_column(b, src, false, &sn, &ssz);
        memcpy(b->where, saved, sizeof saved);
        if (st) return st;
        nd = &c->nodes[ni];      /* nodes may have moved */
        if (c->nodes[sn].kind != WISP_NODE_NUMERIC)
            return bfail(b, src, WISP_EPARSE, "the source of a bucketized column must be a numeric column");
        nd->kind = WISP_NODE_BUCKETIZED;
        nd->source = sn;
        if (bd->n == 0) return bfail(b, bd, WISP_EPARSE, "\"boundaries\" is empty");
        if (bd->n > WISP_MAX_COLUMNS) return bfail(b, bd, WISP_ELIMIT, "more than %u boundaries", WISP_MAX_COLUMNS);
        /* padded to a multiple of 4 with NaN for the SSE count (NaN pads always count: subtracted) */
        nd->bounds = wisp_malloc((bd->n + 3) / 4 * 4 * sizeof *nd->bounds);
        if (!nd->bounds) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        nd->nbounds = (uint32_t)bd->n;
        for (size_t i = bd->n; i < (bd->n + 3) / 4 * 4; i++) nd->bounds[i] = NAN;
        double prev = -INFINITY;
        for (size_t i = 0; i < bd->n; i++) {
            char what[40];
            snprintf(what, sizeof what, "boundaries[%zu]", i);
            if ((st = get_f32(b, &bd->items[i], what, &nd->bounds[i]))) return st;
            double d = strtod(bd->items[i].s, NULL);
            if (i && !(d > prev))
                return bfail(b, &bd->items[i], WISP_EPARSE, "boundaries must increase (TensorFlow: a sorted list); boundaries[%zu] = %s", i, bd->items[i].s);
            prev = d;
        }
        *size = bd->n + 1;
    } else if (!strcmp(t, "hash_bucket")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "key", "buckets", "dtype", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        nd->kind = WISP_NODE_HASH;
        if ((st = need(b, o, "key", J_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
        struct wisp_input *in = &c->inputs[nd->input];
        if (in->dtype == WISP_INPUT_FLOAT32)
            return bfail(b, v, WISP_EPARSE, "a hash_bucket column needs a string or int64 input; '%s' is float32", in->name);
        if (in->dtype == WISP_INPUT_STRING) in->need_fp = true;
        if ((st = get_count(b, o, "buckets", WISP_MAX_FEATURES, &nd->buckets))) return st;
        *size = nd->buckets;
    } else if (!strcmp(t, "vocabulary_list")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "key", "vocabulary", "num_oov_buckets",
                                          "default_value", "dtype", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        nd->kind = WISP_NODE_VOCAB;
        if ((st = need(b, o, "key", J_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
        if ((st = parse_vocab(b, o, nd, ni))) return st;
        nd = &c->nodes[ni];
        if (c->inputs[nd->input].dtype == WISP_INPUT_STRING) c->inputs[nd->input].need_fp = true;
        *size = nd->buckets;
    } else if (!strcmp(t, "identity")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "key", "buckets", "default_value", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        nd->kind = WISP_NODE_IDENTITY;
        if ((st = need(b, o, "key", J_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
        if (c->inputs[nd->input].dtype != WISP_INPUT_INT64)
            return bfail(b, v, WISP_EPARSE, "an identity column needs an int64 input; '%s' is %s", c->inputs[nd->input].name,
                         dtype_str(c->inputs[nd->input].dtype));
        if ((st = get_count(b, o, "buckets", WISP_MAX_FEATURES, &nd->buckets))) return st;
        if ((v = jget(o, "default_value")) && v->t != J_NULL) {
            int64_t x;
            if ((st = get_int(b, v, "default_value", 0, (int64_t)nd->buckets - 1, &x))) return st;
            nd->has_default = true;
            nd->default_value = x;
        }
        *size = nd->buckets;
    } else if (!strcmp(t, "crossed")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "keys", "buckets", "hash_key", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        if ((st = parse_crossed(b, o, ni))) return st;
        nd = &c->nodes[ni];
        nd->kind = WISP_NODE_CROSSED;
        *size = nd->buckets;
    } else {
        return bfail(b, type, WISP_EPARSE, "unknown column type '%s' (numeric, bucketized, hash_bucket, "
                     "vocabulary_list, identity, crossed)", t);
    }
    (void)top;
    nd = &c->nodes[ni];
    switch (nd->kind) {
    case WISP_NODE_NUMERIC: case WISP_NODE_BUCKETIZED: nd->scalar = true; break;
    case WISP_NODE_CROSSED:
        nd->scalar = true;
        for (uint32_t k = 0; k < nd->nkeys; k++)
            if (nd->keys[k].raw ? c->inputs[nd->keys[k].index].sparse : !c->nodes[nd->keys[k].index].scalar) nd->scalar = false;
        break;
    default: nd->scalar = !c->inputs[nd->input].sparse; break;
    }
    if (nd->buckets) set_magic(nd);
    *out = ni;
    return WISP_OK;
}

static int parse_inputs(builder *b, const jv *arr)
{
    wisp_columns *c = b->c;
    if (arr->n > WISP_MAX_COLUMNS) return bfail(b, arr, WISP_ELIMIT, "more than %u inputs", WISP_MAX_COLUMNS);
    c->inputs = wisp_calloc(arr->n ? arr->n : 1, sizeof *c->inputs);
    uint32_t slots = 16;
    while (slots < 2 * arr->n) slots <<= 1;
    c->name_slots = wisp_calloc(slots, sizeof *c->name_slots);
    if (!c->inputs || !c->name_slots) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
    c->name_mask = slots - 1;
    for (size_t i = 0; i < arr->n; i++) {
        const jv *o = &arr->items[i], *v;
        snprintf(b->where, sizeof b->where, "inputs[%zu]", i);
        if (o->t != J_OBJ) return bfail(b, o, WISP_EPARSE, "an input must be an object, not %s", jtype_name(o->t));
        static const char *const ok[] = { "name", "dtype", "sparse", "default", NULL };
        int st;
        if ((st = only_keys(b, o, ok)) || (st = need(b, o, "name", J_STR, &v))) return st;
        if (v->len == 0) return bfail(b, v, WISP_EPARSE, "empty input name");
        /* names are C strings (wisp_strdup below, name_len hashed): a \u0000 would cut them short */
        if (memchr(v->s, '\0', v->len)) return bfail(b, v, WISP_EPARSE, "the input name contains a NUL (\\u0000)");
        if (wisp_columns__find_input(c, v->s, v->len) >= 0) return bfail(b, v, WISP_EPARSE, "input '%s' is declared twice", v->s);
        struct wisp_input *in = &c->inputs[i];
        in->name = wisp_strdup(v->s);
        if (!in->name) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        c->ninputs = i + 1;          /* owned from here on (freed with c) */
        in->name_len = v->len;
        snprintf(b->where, sizeof b->where, "inputs[%zu] '%.80s'", i, in->name);
        if ((st = need(b, o, "dtype", J_STR, &v))) return st;
        if (!strcmp(v->s, "float32")) in->dtype = WISP_INPUT_FLOAT32;
        else if (!strcmp(v->s, "int64")) in->dtype = WISP_INPUT_INT64;
        else if (!strcmp(v->s, "string")) in->dtype = WISP_INPUT_STRING;
        else return bfail(b, v, WISP_EPARSE, "unknown dtype '%s' (float32, int64 or string)", v->s);
        if ((v = jget(o, "sparse"))) {
            if (v->t != J_TRUE && v->t != J_FALSE) return bfail(b, v, WISP_EPARSE, "\"sparse\" must be true or false");
            in->sparse = v->t == J_TRUE;
        }
        v = jget(o, "default");
        if (in->sparse) {
            if (v && v->t != J_NULL) return bfail(b, v, WISP_EPARSE, "a sparse input has no default (missing means no value)");
        } else if (!v) {                    /* TensorFlow's missing markers */
            in->has_default = in->dtype != WISP_INPUT_FLOAT32;
            in->def_i = -1;
            in->def_s = wisp_strdup("");
            if (!in->def_s) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        } else if (v->t != J_NULL) {
            in->has_default = true;
            if (in->dtype == WISP_INPUT_STRING) {
                if (v->t != J_STR) return bfail(b, v, WISP_EPARSE, "the default of a string input must be a string");
                if (v->len > WISP_MAX_STRING_BYTES) return bfail(b, v, WISP_ELIMIT, "the default is longer than %u bytes", WISP_MAX_STRING_BYTES);
                in->def_s = wisp_malloc(v->len + 1);
                if (!in->def_s) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
                memcpy(in->def_s, v->s, v->len + 1);
                in->def_len = (uint32_t)v->len;
            } else if (in->dtype == WISP_INPUT_INT64) {
                if ((st = get_int(b, v, "default", INT64_MIN, INT64_MAX, &in->def_i))) return st;
            } else {
                if ((st = get_f32(b, v, "default", &in->def_f))) return st;
            }
        }
        uint64_t h = wisp_fingerprint64(in->name, in->name_len);
        uint32_t s = (uint32_t)h & c->name_mask;
        while (c->name_slots[s]) s = (s + 1) & c->name_mask;
        c->name_slots[s] = (uint32_t)i + 1;
    }
    b->where[0] = '\0';
    return WISP_OK;
}

long wisp_columns__find_input(const wisp_columns *c, const char *name, size_t len)
{
    if (!c || !c->name_slots) return -1;
    uint64_t h = wisp_fingerprint64(name, len);
    uint32_t s = (uint32_t)h & c->name_mask;
    while (c->name_slots[s]) {
        const struct wisp_input *in = &c->inputs[c->name_slots[s] - 1];
        if (in->name_len == len && !memcmp(in->name, name, len)) return (long)(c->name_slots[s] - 1);
        s = (s + 1) & c->name_mask;
    }
    return -1;
}

static void columns_destroy(wisp_columns *c)
{
    for (size_t i = 0; i < c->ninputs; i++) {
        wisp_free(c->inputs[i].name);
        wisp_free(c->inputs[i].def_s);
    }
    wisp_free(c->inputs);
    for (size_t i = 0; i < c->nnodes; i++) {
        struct wisp_node *nd = &c->nodes[i];
        wisp_free(nd->bounds);
        if (nd->vocab_str)
            for (uint32_t k = 0; k < nd->vocab_n; k++) wisp_free(nd->vocab_str[k]);
        wisp_free(nd->vocab_str);
        wisp_free(nd->vocab_len);
        wisp_free(nd->vocab_int);
        wisp_free(nd->vocab_hash);
        wisp_free(nd->vocab_slots);
        wisp_free(nd->keys);
    }
    wisp_free(c->nodes);
    for (size_t i = 0; i < c->ncols; i++) wisp_free(c->cols[i].name);
    wisp_free(c->cols);
    wisp_free(c->name_slots);
    wisp_free(c);
}

static int cmp_slice(const void *a, const void *b)
{
    const struct wisp_column *x = *(const struct wisp_column *const *)a, *y = *(const struct wisp_column *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int build(builder *b, const jv *root)
{
    wisp_columns *c = b->c;
    const jv *v;
    int st;
    if (root->t != J_OBJ) return bfail(b, root, WISP_EPARSE, "the description must be a JSON object");
    static const char *const ok[] = { "format", "version", "inputs", "columns", "num_features", "comment", NULL };
    if ((st = only_keys(b, root, ok))) return st;
    if ((st = need(b, root, "format", J_STR, &v))) return st;
    if (strcmp(v->s, "wisp-columns")) return bfail(b, v, WISP_EPARSE, "\"format\" is '%s', expected 'wisp-columns'", v->s);
    if ((st = need(b, root, "version", J_NUM, &v))) return st;
    if (strcmp(v->s, "1")) return bfail(b, v, WISP_EPARSE, "version %s is not supported (this build reads version 1)", v->s);
    if ((st = need(b, root, "inputs", J_ARR, &v)) || (st = parse_inputs(b, v))) return st;
    const jv *cols;
    if ((st = need(b, root, "columns", J_ARR, &cols))) return st;
    if (cols->n == 0) return bfail(b, cols, WISP_EPARSE, "\"columns\" is empty");
    if (cols->n > WISP_MAX_COLUMNS) return bfail(b, cols, WISP_ELIMIT, "more than %u columns", WISP_MAX_COLUMNS);
    c->cols = wisp_calloc(cols->n, sizeof *c->cols);
    if (!c->cols) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
    for (size_t i = 0; i < cols->n; i++) {
        const jv *o = &cols->items[i], *nm;
        snprintf(b->where, sizeof b->where, "columns[%zu]", i);
        if (o->t != J_OBJ) return bfail(b, o, WISP_EPARSE, "a column must be an object, not %s", jtype_name(o->t));
        if ((st = need(b, o, "name", J_STR, &nm))) return st;
        snprintf(b->where, sizeof b->where, "columns[%zu] '%.80s'", i, nm->s);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(c->cols[k].name, nm->s)) return bfail(b, nm, WISP_EPARSE, "the name repeats columns[%zu]", k);
        struct wisp_column *col = &c->cols[i];
        col->name = wisp_strdup(nm->s);
        if (!col->name) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        c->ncols = i + 1;
        uint64_t size;
        if ((st = parse_column(b, o, true, &col->node, &size))) return st;
        int64_t x;
        if ((st = need(b, o, "offset", J_NUM, &v)) || (st = get_int(b, v, "offset", 0, (int64_t)WISP_MAX_FEATURES, &x))) return st;
        col->offset = (uint64_t)x;
        col->size = size;
        if ((v = jget(o, "size"))) {
            if ((st = get_int(b, v, "size", 0, INT64_MAX, &x))) return st;
            if ((uint64_t)x != size) return bfail(b, v, WISP_EPARSE, "size is %lld but the column has %llu weights",
                                                  (long long)x, (unsigned long long)size);
        }
        if (size > WISP_MAX_FEATURES - col->offset)
            return bfail(b, o, WISP_ELIMIT, "the slice [%llu, %llu) passes WISP_MAX_FEATURES",
                         (unsigned long long)col->offset, (unsigned long long)(col->offset + size));
        if (col->offset + size > c->num_features) c->num_features = col->offset + size;
    }
    b->where[0] = '\0';
    /* slices may not overlap */
    struct wisp_column **order = wisp_malloc(c->ncols * sizeof *order);
    if (!order) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
    for (size_t i = 0; i < c->ncols; i++) order[i] = &c->cols[i];
    qsort(order, c->ncols, sizeof *order, cmp_slice);
    for (size_t i = 1; i < c->ncols; i++)
        if (order[i]->offset < order[i - 1]->offset + order[i - 1]->size) {
            st = bfail(b, NULL, WISP_EPARSE, "the slices of columns '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                       order[i - 1]->name, (unsigned long long)order[i - 1]->offset,
                       (unsigned long long)(order[i - 1]->offset + order[i - 1]->size), order[i]->name,
                       (unsigned long long)order[i]->offset, (unsigned long long)(order[i]->offset + order[i]->size));
            wisp_free(order);
            return st;
        }
    wisp_free(order);
    if ((v = jget(root, "num_features"))) {
        int64_t x;
        if ((st = get_int(b, v, "num_features", 0, (int64_t)WISP_MAX_FEATURES, &x))) return st;
        if ((uint64_t)x < c->num_features)
            return bfail(b, v, WISP_EPARSE, "num_features is %lld but the columns use %llu weights", (long long)x,
                         (unsigned long long)c->num_features);
        c->num_features = (uint64_t)x;
    }
    return WISP_OK;
}

int wisp_columns_parse(const char *text, size_t len, wisp_columns **out)
{
    if (out) *out = NULL;
    if (!out || (!text && len)) return wisp_fail(WISP_EINVAL, "wisp_columns_parse: %s is NULL", !out ? "out" : "text");
    if (len > WISP_MAX_SPEC_BYTES)
        return wisp_fail(WISP_ELIMIT, "columns: %zu bytes of description, more than WISP_MAX_SPEC_BYTES (%u)", len, WISP_MAX_SPEC_BYTES);
    jparser jp = { .text = text ? text : "", .p = text ? text : "", .end = (text ? text : "") + len };
    jv root;
    memset(&root, 0, sizeof root);
    int st = jparse_value(&jp, &root, 0);
    if (!st) {
        jskip(&jp);
        if (jp.p != jp.end) st = jfail(&jp, WISP_EPARSE, "text after the JSON value");
    }
    if (st) {
        size_t l, col;
        line_col(jp.text, jp.err_off, &l, &col);
        jv_free(&root);
        return wisp_fail(jp.status, "columns: line %zu, column %zu: %s", l, col, jp.err);
    }
    wisp_columns *c = wisp_calloc(1, sizeof *c);
    if (!c) { jv_free(&root); return wisp_fail(WISP_ENOMEM, "columns: out of memory"); }
    atomic_init(&c->refs, 1);
    builder b = { .c = c, .text = jp.text };
    st = build(&b, &root);
    jv_free(&root);
    if (st) { columns_destroy(c); return st; }
    *out = c;
    return WISP_OK;
}

int wisp_columns_from_model(const wisp_model *m, wisp_columns **out)
{
    if (out) *out = NULL;
    if (!m || !out) return wisp_fail(WISP_EINVAL, "wisp_columns_from_model: %s is NULL", !m ? "model" : "out");
    const char *text = wisp_model_columns(m);
    if (!text || !*text) return wisp_fail(WISP_ESTATE, "%s: the model has no \"columns\" section", wisp_model_path(m));
    wisp_columns *c;
    int st = wisp_columns_parse(text, strlen(text), &c);
    if (st) return wisp_fail_context(st, "%s", wisp_model_path(m));
    if (c->num_features > wisp_model_num_features(m)) {
        unsigned long long need_f = (unsigned long long)c->num_features;
        wisp_columns_free(c);
        return wisp_fail(WISP_EFORMAT, "%s: the columns use %llu weights but the model has %llu", wisp_model_path(m),
                         need_f, (unsigned long long)wisp_model_num_features(m));
    }
    *out = c;
    return WISP_OK;
}

void wisp_columns_retain(wisp_columns *c)
{
    if (c) atomic_fetch_add(&c->refs, 1);
}

void wisp_columns_free(wisp_columns *c)
{
    if (!c) return;
    if (atomic_fetch_sub(&c->refs, 1) == 1) columns_destroy(c);
}

/* ---- accessors ---------------------------------------------------------------- */

uint64_t wisp_columns_num_features(const wisp_columns *c) { return c ? c->num_features : 0; }
size_t   wisp_columns_count(const wisp_columns *c) { return c ? c->ncols : 0; }
size_t   wisp_columns_num_inputs(const wisp_columns *c) { return c ? c->ninputs : 0; }

const char *wisp_columns_name(const wisp_columns *c, size_t i)
{
    return c && i < c->ncols ? c->cols[i].name : NULL;
}

const char *wisp_columns_type(const wisp_columns *c, size_t i)
{
    static const char *const names[] = { "numeric", "bucketized", "hash_bucket", "vocabulary_list", "identity", "crossed" };
    return c && i < c->ncols ? names[c->nodes[c->cols[i].node].kind] : NULL;
}

uint64_t wisp_columns_offset(const wisp_columns *c, size_t i) { return c && i < c->ncols ? c->cols[i].offset : 0; }
uint64_t wisp_columns_size(const wisp_columns *c, size_t i) { return c && i < c->ncols ? c->cols[i].size : 0; }

const char *wisp_columns_input_name(const wisp_columns *c, size_t i)
{
    return c && i < c->ninputs ? c->inputs[i].name : NULL;
}

int wisp_columns_input_dtype(const wisp_columns *c, size_t i) { return c && i < c->ninputs ? c->inputs[i].dtype : -1; }
int wisp_columns_input_sparse(const wisp_columns *c, size_t i) { return c && i < c->ninputs ? c->inputs[i].sparse : -1; }

long wisp_columns_input_index(const wisp_columns *c, const char *name, size_t len)
{
    if (!c || !name) return -1;
    return wisp_columns__find_input(c, name, len);
}

/* ======================================================================
 * Raw inputs (wisp_raw)
 * ====================================================================== */

#define RAW_MIN_ROWS 256
#define RAW_MIN_VALS 256

/* The arrays a device ships (each input's row_ptr, vals, str_off, bytes) come
 * from wisp_host_alloc: once an array reaches RAW_PIN_BYTES it is allocated
 * with the raw batch's engine, so it is pinned (page-locked, mapped) while the
 * GPU backend is live and engine/cuda_transform.c copies it to the device
 * straight from where it is; smaller arrays (and every array without a GPU)
 * are plain memory with the same header (wisp_host_alloc(NULL, ...)), so
 * wisp_host_free frees both. Pinning costs a system call per block, so the
 * small arrays of small batches (the Lua/FFI one-row path) stay pageable; a
 * device copy packs those. Growth is allocate + copy the used part + free,
 * so a failed growth leaves the array as it was. */
#define RAW_PIN_BYTES ((size_t)256 << 10)

static void *raw_alloc(wisp_engine *eng, size_t bytes)
{
    return wisp_host_alloc(bytes >= RAW_PIN_BYTES ? eng : NULL, bytes);
}

/* Resize a raw array to new_bytes, keeping its first used_bytes. NULL on failure (p unchanged). */
static void *raw_realloc(wisp_engine *eng, void *p, size_t used_bytes, size_t new_bytes)
{
    void *q = raw_alloc(eng, new_bytes);
    if (!q) return NULL;
    if (p && used_bytes) memcpy(q, p, used_bytes < new_bytes ? used_bytes : new_bytes);
    wisp_host_free(eng, p);
    return q;
}

int wisp_raw_new(wisp_engine *eng, wisp_columns *c, wisp_raw **out)
{
    if (out) *out = NULL;
    if (!eng || !c || !out) return wisp_fail(WISP_EINVAL, "wisp_raw_new: %s is NULL", !eng ? "engine" : !c ? "columns" : "out");
    wisp_raw *r = wisp_calloc(1, sizeof *r);
    if (!r) return wisp_fail(WISP_ENOMEM, "wisp_raw_new: out of memory");
    r->in = wisp_calloc(c->ninputs ? c->ninputs : 1, sizeof *r->in);
    if (!r->in) { wisp_free(r); return wisp_fail(WISP_ENOMEM, "wisp_raw_new: out of memory"); }
    r->eng = eng;
    r->cols = c;
    r->sparse_idx = wisp_malloc((c->ninputs ? c->ninputs : 1) * sizeof *r->sparse_idx);
    if (!r->sparse_idx) { wisp_free(r->in); wisp_free(r); return wisp_fail(WISP_ENOMEM, "wisp_raw_new: out of memory"); }
    for (size_t i = 0; i < c->ninputs; i++) {
        if (c->inputs[i].sparse) r->sparse_idx[r->nsparse++] = (uint32_t)i;
        if (c->inputs[i].def_len > r->max_def_len) r->max_def_len = c->inputs[i].def_len;
    }
    wisp_engine_retain(eng);
    wisp_columns_retain(c);
    *out = r;
    return WISP_OK;
}

void wisp_raw_free(wisp_raw *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->cols->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        wisp_host_free(r->eng, in->row_ptr);
        wisp_host_free(r->eng, in->vals);
        wisp_host_free(r->eng, in->str_off);
        wisp_host_free(r->eng, in->bytes);
    }
    wisp_free(r->in);
    wisp_free(r->lines);
    wisp_free(r->bad);
    wisp_free(r->msgs);
    wisp_free(r->field_input);
    wisp_free(r->qbuf);
    wisp_free(r->sparse_idx);
    wisp_columns_free(r->cols);
    wisp_engine *eng = r->eng;
    wisp_free(r);
    wisp_engine_free(eng);
}

void wisp_raw_clear(wisp_raw *r)
{
    if (!r) return;
    r->rows = 0;
    r->nbad = 0;
    r->msgs_len = 0;
    r->open = false;
    for (size_t i = 0; i < r->cols->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        in->n = 0;
        in->nbytes = 0;
        if (in->row_ptr) in->row_ptr[0] = 0;     /* sparse inputs only */
        if (in->str_off) in->str_off[0] = 0;
    }
}

size_t wisp_raw_rows(const wisp_raw *r) { return r ? r->rows : 0; }
size_t wisp_raw_bad_count(const wisp_raw *r) { return r ? r->nbad : 0; }

int wisp_raw_bad_row(const wisp_raw *r, size_t i, size_t *row, uint64_t *line, const char **msg)
{
    if (!r) return wisp_fail(WISP_EINVAL, "wisp_raw_bad_row: raw is NULL");
    if (i >= r->nbad) return wisp_fail(WISP_EINVAL, "wisp_raw_bad_row: index %zu out of range (%zu bad rows)", i, r->nbad);
    if (row) *row = r->bad[i].row;
    if (line) *line = r->bad[i].line;
    if (msg) *msg = r->msgs + r->bad[i].msg_off;
    return WISP_OK;
}

int wisp_raw_input(const wisp_raw *r, size_t i, const uint32_t **row_ptr, const void **values, const uint32_t **str_off)
{
    static const uint32_t zero[1] = { 0 };
    if (!r) return wisp_fail(WISP_EINVAL, "wisp_raw_input: raw is NULL");
    if (i >= r->cols->ninputs)
        return wisp_fail(WISP_EINVAL, "wisp_raw_input: input %zu out of range (%zu inputs)", i, r->cols->ninputs);
    const struct wisp_raw_input *in = &r->in[i];
    bool str = r->cols->inputs[i].dtype == WISP_INPUT_STRING;
    if (row_ptr) *row_ptr = r->cols->inputs[i].sparse ? (in->row_ptr ? in->row_ptr : zero) : NULL;
    if (values) *values = str ? (const void *)in->bytes : (const void *)in->vals;
    if (str_off) *str_off = str ? (in->str_off ? in->str_off : zero) : NULL;
    return WISP_OK;
}

/* Room for `need` elements in the raw array *p (of which `used` hold data). */
static int grow(wisp_engine *eng, void **p, size_t *cap, size_t used, size_t need, size_t elem, size_t min)
{
    if (need <= *cap && *p) return WISP_OK;
    size_t nc = *cap ? *cap : min;
    while (nc < need) nc *= 2;
    void *q = raw_realloc(eng, *p, (*p ? used : 0) * elem, nc * elem);
    if (!q) return wisp_fail(WISP_ENOMEM, "raw: cannot allocate %zu bytes", nc * elem);
    *p = q;
    *cap = nc;
    return WISP_OK;
}

static void raw_truncate(wisp_raw *r);

int wisp_raw_row_begin(wisp_raw *r, uint64_t line)
{
    if (!r) return wisp_fail(WISP_EINVAL, "wisp_raw_row_begin: raw is NULL");
    if (r->rows >= WISP_MAX_ROWS)
        return wisp_fail(WISP_ELIMIT, "wisp_raw_row_begin: the raw batch already holds WISP_MAX_ROWS (%u) rows", WISP_MAX_ROWS);
    if (r->rows + 1 > r->row_cap || !r->lines) {
        size_t nc = r->row_cap ? r->row_cap * 2 : RAW_MIN_ROWS;
        uint64_t *nl = wisp_realloc(r->lines, nc * sizeof *nl);
        if (!nl) return wisp_fail(WISP_ENOMEM, "wisp_raw_row_begin: out of memory for %zu rows", nc);
        r->lines = nl;
        for (size_t i = 0; i < r->cols->ninputs; i++) {
            struct wisp_raw_input *in = &r->in[i];
            if (!r->cols->inputs[i].sparse) continue;        /* dense: value k is row k's */
            uint32_t *np = raw_realloc(r->eng, in->row_ptr, in->row_ptr ? (r->rows + 1) * sizeof *np : 0, (nc + 1) * sizeof *np);
            if (!np) return wisp_fail(WISP_ENOMEM, "wisp_raw_row_begin: out of memory for %zu rows", nc);
            if (!in->row_ptr) np[0] = 0;
            in->row_ptr = np;
        }
        r->row_cap = nc;
    }
    if (r->open) raw_truncate(r);    /* drop what an abandoned row left */
    r->open = true;
    r->open_bad = false;
    r->open_line = line;
    return WISP_OK;
}

int wisp_raw__reject(wisp_raw *r, const char *fmt, ...)
{
    if (r->open_bad) return WISP_OK;          /* the first problem is the one reported */
    r->open_bad = true;
    size_t n = 0;
    if (r->open_line) n = (size_t)snprintf(r->open_msg, sizeof r->open_msg, "line %llu: ", (unsigned long long)r->open_line);
    else n = (size_t)snprintf(r->open_msg, sizeof r->open_msg, "row %zu: ", r->rows);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->open_msg + n, sizeof r->open_msg - n, fmt, ap);
    va_end(ap);
    return WISP_OK;
}

int wisp_raw_row_reject(wisp_raw *r, const char *msg)
{
    if (!r) return wisp_fail(WISP_EINVAL, "wisp_raw_row_reject: raw is NULL");
    if (!r->open) return wisp_fail(WISP_ESTATE, "wisp_raw_row_reject: no open row (call wisp_raw_row_begin)");
    return wisp_raw__reject(r, "%s", msg ? msg : "rejected");
}

/* The dense rule: a dense input takes one value per row. */
static inline bool dense_full(wisp_raw *r, size_t input)
{
    const struct wisp_raw_input *in = &r->in[input];
    return !r->cols->inputs[input].sparse && in->n > r->rows;
}

static int dense_twice(wisp_raw *r, size_t input)
{
    return wisp_raw__reject(r, "input '%s' is dense and takes one value per row (declare it sparse for lists)",
                            r->cols->inputs[input].name);
}

/* Room for one more fixed-size value of `input`: *slot points at it (the
 * caller stores the value and nothing else changes on failure), or NULL
 * when the row is already bad and the value is to be dropped. */
static int push_slot(wisp_raw *r, size_t input, size_t esize, void **slot)
{
    *slot = NULL;
    r->room_rows = 0;                    /* the text readers' reserve no longer holds */
    if (WISP_UNLIKELY(r->open_bad)) return WISP_OK;
    if (WISP_UNLIKELY(dense_full(r, input))) return dense_twice(r, input);
    struct wisp_raw_input *in = &r->in[input];
    if (WISP_UNLIKELY(in->n >= WISP_MAX_NNZ)) return wisp_fail(WISP_ELIMIT, "raw: input '%s' holds WISP_MAX_NNZ values", r->cols->inputs[input].name);
    if (WISP_UNLIKELY(in->n + 1 > in->val_cap)) {
        int st = grow(r->eng, &in->vals, &in->val_cap, in->n, in->n + 1, esize, RAW_MIN_VALS);
        if (st) { wisp_raw__reject(r, "out of memory"); return st; }
    }
    *slot = (char *)in->vals + esize * in->n++;
    return WISP_OK;
}

int wisp_raw__push_f32(wisp_raw *r, size_t input, float v)
{
    void *slot;
    int st = push_slot(r, input, sizeof v, &slot);
    if (slot) memcpy(slot, &v, sizeof v);
    return st;
}

int wisp_raw__push_i64(wisp_raw *r, size_t input, int64_t v)
{
    void *slot;
    int st = push_slot(r, input, sizeof v, &slot);
    if (slot) memcpy(slot, &v, sizeof v);
    return st;
}

int wisp_raw__push_str(wisp_raw *r, size_t input, const char *s, size_t len)
{
    r->room_rows = 0;                    /* the text readers' reserve no longer holds */
    if (WISP_UNLIKELY(r->open_bad)) return WISP_OK;
    if (WISP_UNLIKELY(dense_full(r, input))) return dense_twice(r, input);
    if (WISP_UNLIKELY(len > WISP_MAX_STRING_BYTES))
        return wisp_raw__reject(r, "input '%s': a string of %zu bytes, more than WISP_MAX_STRING_BYTES (%u)",
                                r->cols->inputs[input].name, len, WISP_MAX_STRING_BYTES);
    struct wisp_raw_input *in = &r->in[input];
    if (WISP_UNLIKELY(in->n >= WISP_MAX_NNZ || len > UINT32_MAX - in->nbytes))
        return wisp_fail(WISP_ELIMIT, "raw: input '%s' holds more than 4 GiB of strings or WISP_MAX_NNZ values",
                         r->cols->inputs[input].name);
    if (WISP_UNLIKELY(in->n + 2 > in->val_cap || !in->str_off)) {
        size_t cap = in->val_cap;
        int st = grow(r->eng, (void **)&in->str_off, &cap, in->n + 1, in->n + 2, sizeof(uint32_t), RAW_MIN_VALS);
        if (st) { wisp_raw__reject(r, "out of memory"); return st; }
        if (!in->val_cap) in->str_off[0] = 0;
        in->val_cap = cap;
    }
    if (WISP_UNLIKELY(in->nbytes + len > in->bytes_cap || !in->bytes)) {
        int st = grow(r->eng, (void **)&in->bytes, &in->bytes_cap, in->nbytes, in->nbytes + len + 1, 1, 4096);
        if (st) { wisp_raw__reject(r, "out of memory"); return st; }
    }
    memcpy(in->bytes + in->nbytes, s, len);
    in->nbytes += len;
    in->str_off[++in->n] = (uint32_t)in->nbytes;
    return WISP_OK;
}

void wisp_raw__abort(wisp_raw *r)
{
    if (r->open) raw_truncate(r);
    r->open = false;
}

#define ROOM_ROWS  256
#define ROOM_BYTES (64u << 10)

/* The reserve behind the text readers (wisp_raw__reserve_line, inline in
 * internal.h): every input has room for room_rows more values and every
 * string input for room_bytes more bytes. A line takes at most one value and
 * (line length + longest default) bytes per input, so most lines only
 * decrement the counters. The checked push functions (the Lua/FFI path) set
 * room_rows to 0, so the next line reserves again. */
int wisp_raw__reserve_line_slow(wisp_raw *r, size_t bytes)
{
    const wisp_columns *c = r->cols;
    size_t want_bytes = bytes > ROOM_BYTES ? bytes : ROOM_BYTES;
    for (size_t i = 0; i < c->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        if (WISP_UNLIKELY(in->n + ROOM_ROWS + 2 >= WISP_MAX_NNZ))
            return wisp_fail(WISP_ELIMIT, "raw: input '%s' holds WISP_MAX_NNZ values", c->inputs[i].name);
        if (c->inputs[i].dtype == WISP_INPUT_STRING) {
            if (in->n + ROOM_ROWS + 2 > in->val_cap || !in->str_off) {
                size_t cap = in->val_cap;
                int st = grow(r->eng, (void **)&in->str_off, &cap, in->n + 1, in->n + ROOM_ROWS + 2, sizeof(uint32_t), RAW_MIN_VALS);
                if (st) return st;
                if (!in->val_cap) in->str_off[0] = 0;
                in->val_cap = cap;
            }
            if (WISP_UNLIKELY(want_bytes > UINT32_MAX - in->nbytes))
                return wisp_fail(WISP_ELIMIT, "raw: input '%s' holds more than 4 GiB of strings", c->inputs[i].name);
            if (in->nbytes + want_bytes > in->bytes_cap || !in->bytes) {
                int st = grow(r->eng, (void **)&in->bytes, &in->bytes_cap, in->nbytes, in->nbytes + want_bytes, 1, 4096);
                if (st) return st;
            }
        } else if (in->n + ROOM_ROWS + 1 > in->val_cap || !in->vals) {
            int st = grow(r->eng, &in->vals, &in->val_cap, in->n, in->n + ROOM_ROWS + 1,
                          c->inputs[i].dtype == WISP_INPUT_FLOAT32 ? sizeof(float) : sizeof(int64_t), RAW_MIN_VALS);
            if (st) return st;
        }
    }
    r->room_rows = ROOM_ROWS - 1;
    r->room_bytes = want_bytes - bytes;
    return WISP_OK;
}

static int need_open(wisp_raw *r, size_t input, const char *fn)
{
    if (!r) return wisp_fail(WISP_EINVAL, "%s: raw is NULL", fn);
    if (!r->open) return wisp_fail(WISP_ESTATE, "%s: no open row (call wisp_raw_row_begin)", fn);
    if (input >= r->cols->ninputs) return wisp_fail(WISP_EINVAL, "%s: input %zu out of range (%zu inputs)", fn, input, r->cols->ninputs);
    return WISP_OK;
}

int wisp_raw_add_float(wisp_raw *r, size_t input, double v)
{
    int st = need_open(r, input, "wisp_raw_add_float");
    if (st) return st;
    const struct wisp_input *in = &r->cols->inputs[input];
    switch (in->dtype) {
    case WISP_INPUT_FLOAT32: return wisp_raw__push_f32(r, input, (float)v);
    case WISP_INPUT_INT64:
        if (v == floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0)
            return wisp_raw__push_i64(r, input, (int64_t)v);
        return wisp_raw__reject(r, "input '%s': %.17g where int64 is expected", in->name, v);
    default:
        return wisp_raw__reject(r, "input '%s': a number where a string is expected", in->name);
    }
}

int wisp_raw_add_int(wisp_raw *r, size_t input, int64_t v)
{
    int st = need_open(r, input, "wisp_raw_add_int");
    if (st) return st;
    const struct wisp_input *in = &r->cols->inputs[input];
    switch (in->dtype) {
    case WISP_INPUT_FLOAT32: return wisp_raw__push_f32(r, input, (float)v);
    case WISP_INPUT_INT64: return wisp_raw__push_i64(r, input, v);
    default: return wisp_raw__reject(r, "input '%s': a number where a string is expected", in->name);
    }
}

int wisp_raw_add_string(wisp_raw *r, size_t input, const char *s, size_t len)
{
    int st = need_open(r, input, "wisp_raw_add_string");
    if (st) return st;
    if (!s && len) return wisp_fail(WISP_EINVAL, "wisp_raw_add_string: s is NULL");
    const struct wisp_input *in = &r->cols->inputs[input];
    if (in->dtype != WISP_INPUT_STRING)
        return wisp_raw__reject(r, "input '%s': a string where %s is expected", in->name, dtype_str(in->dtype));
    return wisp_raw__push_str(r, input, s ? s : "", len);
}

static int raw_add_bad(wisp_raw *r, size_t row, uint64_t line, const char *msg)
{
    size_t len = strlen(msg) + 1;
    if (r->msgs_len + len > UINT32_MAX) return wisp_fail(WISP_ELIMIT, "raw: bad-row messages exceed 4 GiB");
    if (r->nbad == r->bad_cap) {
        size_t nc = r->bad_cap ? r->bad_cap * 2 : 16;
        struct wisp_bad_row *nb = wisp_realloc(r->bad, nc * sizeof *nb);
        if (!nb) return wisp_fail(WISP_ENOMEM, "raw: out of memory for the bad-row list");
        r->bad = nb;
        r->bad_cap = nc;
    }
    if (r->msgs_len + len > r->msgs_cap) {
        size_t nc = r->msgs_cap ? r->msgs_cap : 1024;
        while (nc < r->msgs_len + len) nc *= 2;
        char *nm = wisp_realloc(r->msgs, nc);
        if (!nm) return wisp_fail(WISP_ENOMEM, "raw: out of memory for bad-row messages");
        r->msgs = nm;
        r->msgs_cap = nc;
    }
    memcpy(r->msgs + r->msgs_len, msg, len);
    r->bad[r->nbad].row = row;
    r->bad[r->nbad].line = line;
    r->bad[r->nbad].msg_off = (uint32_t)r->msgs_len;
    r->nbad++;
    r->msgs_len += len;
    return WISP_OK;
}

/* Drop the open row's values. */
static void raw_truncate(wisp_raw *r)
{
    for (size_t i = 0; i < r->cols->ninputs; i++) {
        struct wisp_raw_input *in = &r->in[i];
        in->n = r->cols->inputs[i].sparse ? in->row_ptr[r->rows] : r->rows;
        if (in->str_off) in->nbytes = in->str_off[in->n];
    }
}

/* Append input i's default (or, for a bad row, a placeholder: the default or zero). */
static int push_default(wisp_raw *r, size_t i)
{
    const struct wisp_input *in = &r->cols->inputs[i];
    bool was_bad = r->open_bad;
    r->open_bad = false;                 /* the push functions skip values of bad rows */
    int st = in->dtype == WISP_INPUT_FLOAT32 ? wisp_raw__push_f32(r, i, in->has_default ? in->def_f : 0.0f)
           : in->dtype == WISP_INPUT_INT64 ? wisp_raw__push_i64(r, i, in->has_default ? in->def_i : 0)
           : wisp_raw__push_str(r, i, in->def_s ? in->def_s : "", in->def_s ? in->def_len : 0);
    r->open_bad = was_bad;
    return st;
}

int wisp_raw_row_end(wisp_raw *r)
{
    if (!r) return wisp_fail(WISP_EINVAL, "wisp_raw_row_end: raw is NULL");
    if (!r->open) return wisp_fail(WISP_ESTATE, "wisp_raw_row_end: no open row (call wisp_raw_row_begin)");
    const wisp_columns *c = r->cols;
    const size_t row = r->rows;
    int st = WISP_OK;
    /* a dense input without a value takes its default */
    for (size_t i = 0; i < c->ninputs && !r->open_bad; i++) {
        const struct wisp_input *in = &c->inputs[i];
        if (in->sparse || r->in[i].n > row) continue;
        if (!in->has_default) {
            wisp_raw__reject(r, "input '%s' is missing and has no default", in->name);
            break;
        }
        if ((st = push_default(r, i))) break;
    }
    if (st == WISP_OK && r->open_bad) {
        /* a bad row has no values, but a dense input keeps one placeholder (value k is row k's) */
        raw_truncate(r);
        for (size_t i = 0; i < c->ninputs && st == WISP_OK; i++)
            if (!c->inputs[i].sparse) st = push_default(r, i);
        if (st == WISP_OK) st = raw_add_bad(r, row, r->open_line, r->open_msg);
    }
    if (st != WISP_OK) {
        raw_truncate(r);
        r->open = false;
        return st;
    }
    for (size_t i = 0; i < c->ninputs; i++)
        if (c->inputs[i].sparse) r->in[i].row_ptr[row + 1] = (uint32_t)r->in[i].n;
    r->lines[row] = r->open_line;
    r->rows = row + 1;
    r->open = false;
    return WISP_OK;
}

/* ======================================================================
 * The transform (CPU)
 * ====================================================================== */

typedef struct {
    const wisp_columns *c;
    const wisp_raw *r;
    size_t row;
    /* per row: fingerprints of string inputs that need them */
    uint64_t **fp;               /* per input: pointer into fpbuf, or NULL */
    uint64_t *fpbuf; size_t fp_cap;
    /* an id stack for categorical values (int64 stored as uint64) */
    uint64_t *stk; size_t top, stk_cap;
    /* the row's features */
    uint64_t *vids; float *vvals; size_t nv, v_cap;
    uint64_t *bids; size_t nb, b_cap;
    char msg[256];
    bool bad;
} tctx;

static int tbad(tctx *t, const char *fmt, ...) WISP_PRINTF(2, 3);
static int tbad(tctx *t, const char *fmt, ...)
{
    if (t->bad) return 1;
    t->bad = true;
    uint64_t line = t->r->lines[t->row];
    size_t n = line ? (size_t)snprintf(t->msg, sizeof t->msg, "line %llu: ", (unsigned long long)line)
                    : (size_t)snprintf(t->msg, sizeof t->msg, "row %zu: ", t->row);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->msg + n, sizeof t->msg - n, fmt, ap);
    va_end(ap);
    return 1;
}

static int stk_reserve(tctx *t, size_t more)
{
    if (t->top + more <= t->stk_cap) return WISP_OK;
    size_t nc = t->stk_cap ? t->stk_cap : 1024;
    while (nc < t->top + more) nc *= 2;
    uint64_t *ns = wisp_realloc(t->stk, nc * sizeof *ns);
    if (!ns) return wisp_fail(WISP_ENOMEM, "transform: out of memory (%zu ids of scratch)", nc);
    t->stk = ns;
    t->stk_cap = nc;
    return WISP_OK;
}

/* Row `row`'s values of input i: [*a, *z). Dense inputs hold value k for row k. */
static inline void span(const wisp_raw *r, size_t i, size_t row, uint32_t *a, uint32_t *z)
{
    if (r->cols->inputs[i].sparse) { *a = r->in[i].row_ptr[row]; *z = r->in[i].row_ptr[row + 1]; }
    else { *a = (uint32_t)row; *z = (uint32_t)row + 1; }
}

/* Decimal string of v (as_string), into buf; returns its length. */
static size_t i64_decimal(int64_t v, char *buf)
{
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    size_t k = 0;
    if (v < 0) buf[k++] = '-';
    while (n) buf[k++] = tmp[--n];
    return k;
}

static inline uint64_t fp_int(int64_t v)
{
    char buf[24];
    return wisp_fingerprint64(buf, i64_decimal(v, buf));
}

/* The float32 value of a dense numeric input for this row (after the normalizer). */
static inline float numeric_value(tctx *t, const struct wisp_node *nd)
{
    const struct wisp_raw_input *ri = &t->r->in[nd->input];
    uint32_t k = (uint32_t)t->row;              /* numeric inputs are dense */
    float x = t->c->inputs[nd->input].dtype == WISP_INPUT_FLOAT32 ? ((const float *)ri->vals)[k]
                                                                    : (float)((const int64_t *)ri->vals)[k];
    if (nd->norm == WISP_NORM_STANDARD) { x = x - nd->norm_a; x = x / nd->norm_b; }
    else if (nd->norm == WISP_NORM_AFFINE) { x = x * nd->norm_a; x = x + nd->norm_b; }
    return x;
}

static inline int64_t vocab_lookup(const struct wisp_node *nd, bool str, const char *s, uint32_t len, uint64_t h, int64_t iv)
{
    uint32_t slot = (uint32_t)h & nd->vocab_mask;
    for (;;) {
        uint32_t e = nd->vocab_slots[slot];
        if (!e) return -1;
        e--;
        if (nd->vocab_hash[e] == h) {
            if (str ? nd->vocab_len[e] == len && !memcmp(nd->vocab_str[e], s, len) : nd->vocab_int[e] == iv) return e;
        }
        slot = (slot + 1) & nd->vocab_mask;
    }
}

/* Push the ids of a categorical node for this row onto the stack (may
 * include -1 from a vocabulary). Returns WISP_OK (t->bad set for a bad row)
 * or a failure status. */
static int eval_ids(tctx *t, const struct wisp_node *nd);

static int eval_crossed(tctx *t, const struct wisp_node *nd)
{
    const wisp_columns *c = t->c;
    const wisp_raw *r = t->r;
    uint32_t nk = nd->nkeys;
    size_t base = t->top;
    /* each key's values, one after the other on the stack */
    size_t kstart[64], kcount[64];
    uint64_t total = 1;
    for (uint32_t k = 0; k < nk; k++) {
        const struct wisp_cross_key *key = &nd->keys[k];
        kstart[k] = t->top;
        if (key->raw) {
            const struct wisp_input *in = &c->inputs[key->index];
            const struct wisp_raw_input *ri = &r->in[key->index];
            uint32_t a, z;
            span(r, key->index, t->row, &a, &z);
            int st = stk_reserve(t, z - a);
            if (st) return st;
            if (in->dtype == WISP_INPUT_STRING) {
                const uint64_t *f = t->fp[key->index];
                for (uint32_t i = 0; i < z - a; i++) t->stk[t->top++] = f[i];
            } else if (in->dtype == WISP_INPUT_INT64) {
                const int64_t *v = (const int64_t *)ri->vals;
                for (uint32_t i = a; i < z; i++) t->stk[t->top++] = (uint64_t)v[i];
            } else {
                const float *v = (const float *)ri->vals;
                for (uint32_t i = a; i < z; i++) {
                    float x = v[i];
                    if (!(x > -9223372036854775808.0f && x < 9223372036854775808.0f)) {
                        t->top = base;
                        tbad(t, "input '%s': %g cannot be cast to int64 for crossing", in->name, (double)x);
                        return WISP_OK;
                    }
                    t->stk[t->top++] = (uint64_t)(int64_t)x;      /* truncation, as TensorFlow's cast */
                }
            }
        } else {
            int st = eval_ids(t, &c->nodes[key->index]);
            if (st) return st;
            if (t->bad) { t->top = base; return WISP_OK; }
        }
        kcount[k] = t->top - kstart[k];
        total *= kcount[k];
        if (total == 0) { t->top = base; return WISP_OK; }
        if (total > WISP_MAX_ROW_FEATURES) {
            t->top = base;
            tbad(t, "a crossed column makes more than WISP_MAX_ROW_FEATURES (%u) combinations", WISP_MAX_ROW_FEATURES);
            return WISP_OK;
        }
    }
    /* the keys' values sit at [base, keys_end); the crossed ids go after them */
    size_t keys_end = t->top;
    int st = stk_reserve(t, (size_t)total);
    if (st) return st;
    uint64_t *out = t->stk + keys_end;
    const uint64_t *s = t->stk;
    if (nk == 2) {
        uint64_t h0 = nd->hash_key;
        size_t n = 0;
        for (size_t i = 0; i < kcount[0]; i++) {
            uint64_t h1 = wisp__cat64(h0, s[kstart[0] + i]);
            for (size_t j = 0; j < kcount[1]; j++) out[n++] = wisp__cat64(h1, s[kstart[1] + j]) % nd->buckets;
        }
    } else {
        size_t idx[64] = { 0 };
        for (uint64_t n = 0; n < total; n++) {
            uint64_t h = nd->hash_key;
            for (uint32_t k = 0; k < nk; k++) h = wisp__cat64(h, s[kstart[k] + idx[k]]);
            out[n] = h % nd->buckets;
            for (int k = (int)nk - 1; k >= 0; k--) {          /* odometer, last key fastest */
                if (++idx[k] < kcount[k]) break;
                idx[k] = 0;
            }
        }
    }
    memmove(t->stk + base, out, (size_t)total * sizeof *out);
    t->top = base + (size_t)total;
    return WISP_OK;
}

static int eval_ids(tctx *t, const struct wisp_node *nd)
{
    const wisp_columns *c = t->c;
    const wisp_raw *r = t->r;
    if (nd->kind == WISP_NODE_BUCKETIZED) {
        int st = stk_reserve(t, 1);
        if (st) return st;
        float x = numeric_value(t, &c->nodes[nd->source]);
        t->stk[t->top++] = wisp__bucketize(nd->bounds, nd->nbounds, x);   /* bucketize.h, as on the GPU */
        return WISP_OK;
    }
    if (nd->kind == WISP_NODE_CROSSED) return eval_crossed(t, nd);
    const struct wisp_input *in = &c->inputs[nd->input];
    const struct wisp_raw_input *ri = &r->in[nd->input];
    uint32_t a, z;
    span(r, nd->input, t->row, &a, &z);
    int st = stk_reserve(t, z - a);
    if (st) return st;
    bool dense = !in->sparse;
    if (in->dtype == WISP_INPUT_STRING) {
        const uint64_t *f = t->fp[nd->input];
        const uint32_t *off = ri->str_off;
        for (uint32_t i = a; i < z; i++) {
            uint32_t len = off[i + 1] - off[i];
            if (dense && len == 0) continue;                  /* "" is missing */
            uint64_t h = f[i - a];
            if (nd->kind == WISP_NODE_HASH) {
                t->stk[t->top++] = h % nd->buckets;
            } else {                                          /* vocabulary */
                int64_t id = vocab_lookup(nd, true, ri->bytes + off[i], len, h, 0);
                if (id < 0) id = nd->num_oov ? (int64_t)(nd->vocab_n + h % nd->num_oov) : nd->default_value;
                t->stk[t->top++] = (uint64_t)id;
            }
        }
    } else {
        const int64_t *v = (const int64_t *)ri->vals;
        for (uint32_t i = a; i < z; i++) {
            int64_t x = v[i];
            if (dense && x == -1) continue;                   /* -1 is missing */
            if (nd->kind == WISP_NODE_HASH) {
                t->stk[t->top++] = fp_int(x) % nd->buckets;
            } else if (nd->kind == WISP_NODE_VOCAB) {
                int64_t id = vocab_lookup(nd, false, NULL, 0, mix64((uint64_t)x), x);
                if (id < 0) id = nd->num_oov ? (int64_t)(nd->vocab_n + fp_int(x) % nd->num_oov) : nd->default_value;
                t->stk[t->top++] = (uint64_t)id;
            } else {                                          /* identity */
                if (x >= 0 && (uint64_t)x < nd->buckets) t->stk[t->top++] = (uint64_t)x;
                else if (nd->has_default) t->stk[t->top++] = (uint64_t)nd->default_value;
                else {
                    tbad(t, "input '%s': %lld is outside the identity column's [0, %llu) and it has no default_value",
                         in->name, (long long)x, (unsigned long long)nd->buckets);
                    return WISP_OK;
                }
            }
        }
    }
    return WISP_OK;
}

static int feat_reserve(tctx *t, size_t nb_more, size_t nv_more)
{
    if (t->nb + nb_more > t->b_cap) {
        size_t nc = t->b_cap ? t->b_cap : 256;
        while (nc < t->nb + nb_more) nc *= 2;
        uint64_t *n = wisp_realloc(t->bids, nc * sizeof *n);
        if (!n) return wisp_fail(WISP_ENOMEM, "transform: out of memory");
        t->bids = n;
        t->b_cap = nc;
    }
    if (t->nv + nv_more > t->v_cap) {
        size_t nc = t->v_cap ? t->v_cap : 64;
        while (nc < t->nv + nv_more) nc *= 2;
        uint64_t *n = wisp_realloc(t->vids, nc * sizeof *n);
        if (!n) return wisp_fail(WISP_ENOMEM, "transform: out of memory");
        t->vids = n;
        float *f = wisp_realloc(t->vvals, nc * sizeof *f);
        if (!f) return wisp_fail(WISP_ENOMEM, "transform: out of memory");
        t->vvals = f;
        t->v_cap = nc;
    }
    return WISP_OK;
}

/* Fingerprint the row's string values of every input that needs them. */
static int row_fingerprints(tctx *t)
{
    const wisp_columns *c = t->c;
    const wisp_raw *r = t->r;
    size_t need_n = 0;
    for (size_t i = 0; i < c->ninputs; i++)
        if (c->inputs[i].need_fp) {
            uint32_t a, z;
            span(r, i, t->row, &a, &z);
            need_n += z - a;
        }
    if (need_n > t->fp_cap) {
        size_t nc = t->fp_cap ? t->fp_cap : 256;
        while (nc < need_n) nc *= 2;
        uint64_t *n = wisp_realloc(t->fpbuf, nc * sizeof *n);
        if (!n) return wisp_fail(WISP_ENOMEM, "transform: out of memory");
        t->fpbuf = n;
        t->fp_cap = nc;
    }
    uint64_t *f = t->fpbuf;
    for (size_t i = 0; i < c->ninputs; i++) {
        if (!c->inputs[i].need_fp) continue;
        const struct wisp_raw_input *ri = &r->in[i];
        uint32_t a, z;
        span(r, i, t->row, &a, &z);
        t->fp[i] = f;
        for (uint32_t k = a; k < z; k++)
            *f++ = wisp_fingerprint64(ri->bytes + ri->str_off[k], ri->str_off[k + 1] - ri->str_off[k]);
    }
    return WISP_OK;
}

static int transform_row(tctx *t)
{
    const wisp_columns *c = t->c;
    t->nv = t->nb = 0;
    t->top = 0;
    int st = row_fingerprints(t);
    if (st) return st;
    for (size_t ci = 0; ci < c->ncols && !t->bad; ci++) {
        const struct wisp_column *col = &c->cols[ci];
        const struct wisp_node *nd = &c->nodes[col->node];
        if (nd->kind == WISP_NODE_NUMERIC) {
            float x = numeric_value(t, nd);
            if (!isfinite(x)) {
                tbad(t, "column '%s': the value is %s (numeric columns need finite values)", col->name,
                     isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf");
                break;
            }
            if ((st = feat_reserve(t, 0, 1))) return st;
            t->vids[t->nv] = col->offset;
            t->vvals[t->nv++] = x;
            continue;
        }
        t->top = 0;
        if ((st = eval_ids(t, nd))) return st;
        if (t->bad) break;
        if ((st = feat_reserve(t, t->top, 0))) return st;
        for (size_t k = 0; k < t->top; k++) {
            int64_t id = (int64_t)t->stk[k];
            if (id >= 0) t->bids[t->nb++] = col->offset + (uint64_t)id;
        }
    }
    if (!t->bad && t->nv + t->nb > WISP_MAX_ROW_FEATURES)
        tbad(t, "%zu features, more than WISP_MAX_ROW_FEATURES (%u)", t->nv + t->nb, WISP_MAX_ROW_FEATURES);
    return WISP_OK;
}

/* Append a bad row (no features) with its line and message; on failure
 * the batch is as before. */
static int add_bad_row(wisp_batch *b, uint64_t line, const char *msg)
{
    int st = wisp_batch_add_row(b, NULL, NULL, 0);
    if (st != WISP_OK) return st;
    st = wisp_batch_mark_bad(b, b->rows - 1, line, msg);
    if (st != WISP_OK) b->rows--;               /* the empty row goes again (as libsvm.c does) */
    return st;
}

int wisp_transform__rowwise(const wisp_raw *r, wisp_batch *b)
{
    if (!r || !b) return wisp_fail(WISP_EINVAL, "wisp_transform: %s is NULL", !r ? "raw" : "batch");
    if (r->open) return wisp_fail(WISP_ESTATE, "wisp_transform: a row is still open (call wisp_raw_row_end)");
    tctx t;
    memset(&t, 0, sizeof t);
    t.c = r->cols;
    t.r = r;
    t.fp = wisp_calloc(r->cols->ninputs ? r->cols->ninputs : 1, sizeof *t.fp);
    if (!t.fp) return wisp_fail(WISP_ENOMEM, "wisp_transform: out of memory");
    int st = WISP_OK;
    size_t nextbad = 0;
    for (size_t row = 0; row < r->rows && st == WISP_OK; row++) {
        const char *msg = NULL;
        t.row = row;
        t.bad = false;
        if (nextbad < r->nbad && r->bad[nextbad].row == row) {
            msg = r->msgs + r->bad[nextbad].msg_off;
            nextbad++;
        } else {
            st = transform_row(&t);
            if (st) break;
            if (t.bad) msg = t.msg;
        }
        if (msg) {
            st = add_bad_row(b, r->lines[row], msg);
        } else {
            st = wisp_batch_add_row_mixed(b, t.vids, t.vvals, t.nv, t.bids, t.nb);
        }
    }
    wisp_free(t.fp);
    wisp_free(t.fpbuf);
    wisp_free(t.stk);
    wisp_free(t.vids);
    wisp_free(t.vvals);
    wisp_free(t.bids);
    if (st) return wisp_fail_context(st, "wisp_transform");
    return WISP_OK;
}

/* ---- the column-major transform ------------------------------------------------------
 * Rows go in chunks of TCHUNK. For each chunk, every "scalar" node (at most one
 * id or value per row: all its inputs are dense) is evaluated over the chunk's
 * rows, one node at a time (sequential reads of one input's arrays; the same
 * loop shape a GPU kernel has, one thread per row), children before parents
 * (a nested column has a higher node index than its parent). Fingerprints of
 * dense string inputs are computed once per value and shared by every column.
 * Then each row is assembled in column order straight into the batch; columns
 * that are not scalar (sparse inputs) are evaluated for that row by the
 * row-wise evaluator above. A row where anything is unusual (a bad raw row, a
 * non-finite numeric value, an identity value out of range, a cross key that
 * cannot be cast) is done again by the row-wise evaluator, so messages and
 * results are those of the reference path (spec/c/test_columns.c checks that
 * both paths agree).
 */

#define TCHUNK 256

/* The chunk loops are compiled twice: for the build's baseline (x86-64-v2)
 * and for x86-64-v4 (AVX-512: eight 64-bit multiplies per instruction for the
 * fingerprints and crosses), chosen at load time by an ifunc resolver. Both
 * compute the same integers. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(WISP_NO_CLONES)
#define WISP_HOT_CLONES __attribute__((target_clones("arch=x86-64-v4", "default"), optimize("O3")))
#else
#define WISP_HOT_CLONES
#endif
#define ID_NONE INT64_MIN               /* no id for this row (missing) */
#define ID_ERR  (INT64_MIN + 1)         /* the row needs the row-wise path */

typedef struct {
    tctx t;
    int64_t *ids;                       /* [nnodes][TCHUNK] */
    float *num;                         /* [nnodes][TCHUNK] numeric nodes' values */
    uint64_t *fp;                       /* [ninputs][TCHUNK] dense string fingerprints */
    uint8_t *slow;                      /* [TCHUNK] a bad raw row */
    uint8_t *redo;                      /* [TCHUNK] a row for the row-wise path */
    uint8_t *top;                       /* [nnodes] the node is a column's (not only a key or a source) */
    size_t *gfrom, *gto;                /* [ncols] a row's ids of each non-scalar column in t.stk */
    size_t r0, n;                       /* the chunk: rows [r0, r0 + n) */
    /* the columns for the assembly: numeric ones (valued), then the others in order */
    size_t nnum, ncat;
    uint32_t *num_node, *num_off;
    uint32_t *cat_col, *cat_node, *cat_off;
    uint8_t *cat_general;
} cctx;


/* A dense input's value index for row r: r itself (a bad raw row holds a
 * placeholder; bad rows never reach the assembly). */
static inline long dense_index(const struct wisp_raw_input *ri, size_t r)
{
    (void)ri;
    return (long)r;
}

WISP_HOT_CLONES static void chunk_fingerprints(cctx *x)
{
    const wisp_columns *c = x->t.c;
    const wisp_raw *r = x->t.r;
    for (size_t i = 0; i < c->ninputs; i++) {
        const struct wisp_input *in = &c->inputs[i];
        if (!in->need_fp || in->sparse) continue;
        const struct wisp_raw_input *ri = &r->in[i];
        uint64_t *out = x->fp + i * TCHUNK;
        for (size_t k = 0; k < x->n; k++) {
            long j = dense_index(ri, x->r0 + k);
            out[k] = j < 0 ? 0 : wisp__fp64(ri->bytes + ri->str_off[j], ri->str_off[j + 1] - ri->str_off[j]);
        }
    }
}

/* wisp__bucketize (bucketize.h) four boundaries at a time: !(x < b) for each, NaN pads subtracted. */
static inline uint64_t bucketize_sse(const float *b, uint32_t n, float x)
{
    const __m128 xv = _mm_set1_ps(x);
    uint32_t npad = (n + 3) & ~3u, k = 0;
    for (uint32_t i = 0; i < npad; i += 4)
        k += (uint32_t)__builtin_popcount((unsigned)_mm_movemask_ps(_mm_cmpnlt_ps(xv, _mm_loadu_ps(b + i))));
    return k - (npad - n);
}

/* Evaluate scalar node ni over the chunk. */
WISP_HOT_CLONES static void chunk_node(cctx *x, uint32_t ni)
{
    const wisp_columns *c = x->t.c;
    const wisp_raw *r = x->t.r;
    const struct wisp_node *nd = &c->nodes[ni];
    int64_t *out = x->ids + (size_t)ni * TCHUNK;
    const size_t n = x->n, r0 = x->r0;
    switch (nd->kind) {
    case WISP_NODE_NUMERIC: {
        const struct wisp_raw_input *ri = &r->in[nd->input];
        bool f32 = c->inputs[nd->input].dtype == WISP_INPUT_FLOAT32;
        float *v = x->num + (size_t)ni * TCHUNK;
        for (size_t k = 0; k < n; k++) {
            long j = dense_index(ri, r0 + k);
            if (j < 0) { v[k] = NAN; out[k] = ID_ERR; continue; }
            float y = f32 ? ((const float *)ri->vals)[j] : (float)((const int64_t *)ri->vals)[j];
            if (nd->norm == WISP_NORM_STANDARD) { y = y - nd->norm_a; y = y / nd->norm_b; }
            else if (nd->norm == WISP_NORM_AFFINE) { y = y * nd->norm_a; y = y + nd->norm_b; }
            v[k] = y;
            out[k] = isfinite(y) ? 0 : ID_ERR;
        }
        break;
    }
    case WISP_NODE_BUCKETIZED: {
        const float *v = x->num + (size_t)nd->source * TCHUNK;
        const int64_t *src = x->ids + (size_t)nd->source * TCHUNK;
        (void)src;                      /* NaN and infinities are buckets here, as in TensorFlow */
        if (nd->nbounds <= 64) {           /* one boundary at a time over the chunk's rows: vectorizes */
            uint32_t cnt[TCHUNK];
            for (size_t k = 0; k < n; k++) cnt[k] = 0;
            for (uint32_t i = 0; i < nd->nbounds; i++) {
                const float bd = nd->bounds[i];
                for (size_t k = 0; k < n; k++) cnt[k] += !(v[k] < bd);   /* NaN: every boundary, as bucketize_sse */
            }
            for (size_t k = 0; k < n; k++) out[k] = (int64_t)cnt[k];
        } else {
            for (size_t k = 0; k < n; k++) out[k] = (int64_t)bucketize_sse(nd->bounds, nd->nbounds, v[k]);
        }
        break;
    }
    case WISP_NODE_HASH:
    case WISP_NODE_VOCAB:
    case WISP_NODE_IDENTITY: {
        const struct wisp_raw_input *ri = &r->in[nd->input];
        if (c->inputs[nd->input].dtype == WISP_INPUT_STRING && nd->kind == WISP_NODE_HASH && fpmod_ok(nd)) {
            /* a dense input: row r0 + k's string is str_off[r0 + k .. r0 + k + 1] */
            const uint64_t *f = x->fp + (size_t)nd->input * TCHUNK;
            const uint32_t *so = ri->str_off + r0;
            const uint64_t nb = nd->buckets;
            const double inv = 1.0 / (double)nb;
            for (size_t k = 0; k < n; k++) {
                int64_t id = (int64_t)fpmod(f[k], nb, inv);
                out[k] = so[k + 1] == so[k] ? ID_NONE : id;         /* empty: missing */
            }
        } else if (c->inputs[nd->input].dtype == WISP_INPUT_STRING) {
            const uint64_t *f = x->fp + (size_t)nd->input * TCHUNK;
            for (size_t k = 0; k < n; k++) {
                long j = dense_index(ri, r0 + k);
                if (j < 0) { out[k] = ID_ERR; continue; }
                uint32_t len = ri->str_off[j + 1] - ri->str_off[j];
                if (len == 0) { out[k] = ID_NONE; continue; }
                if (nd->kind == WISP_NODE_HASH) { out[k] = (int64_t)fastmod_buckets(f[k], nd); continue; }
                int64_t id = vocab_lookup(nd, true, ri->bytes + ri->str_off[j], len, f[k], 0);
                if (id < 0) id = nd->num_oov ? (int64_t)(nd->vocab_n + f[k] % nd->num_oov) : nd->default_value;
                out[k] = id;
            }
        } else {
            const int64_t *v = (const int64_t *)ri->vals;
            for (size_t k = 0; k < n; k++) {
                long j = dense_index(ri, r0 + k);
                if (j < 0) { out[k] = ID_ERR; continue; }
                int64_t xv = v[j];
                if (xv == -1) { out[k] = ID_NONE; continue; }
                if (nd->kind == WISP_NODE_HASH) out[k] = (int64_t)fastmod_buckets(fp_int(xv), nd);
                else if (nd->kind == WISP_NODE_VOCAB) {
                    int64_t id = vocab_lookup(nd, false, NULL, 0, mix64((uint64_t)xv), xv);
                    if (id < 0) id = nd->num_oov ? (int64_t)(nd->vocab_n + fp_int(xv) % nd->num_oov) : nd->default_value;
                    out[k] = id;
                } else {
                    out[k] = xv >= 0 && (uint64_t)xv < nd->buckets ? xv : nd->has_default ? nd->default_value : ID_ERR;
                }
            }
        }
        break;
    }
    case WISP_NODE_CROSSED: {
        /* every key has one value per row (or none): each key as an array of
         * uint64 values, then h = hash_key; h = cat(h, value) per key; h % buckets */
        const uint64_t *kv[64];
        bool check[64];
        uint64_t tmp[4][TCHUNK];                  /* float keys cast to int64 (at most 4 here) */
        int ntmp = 0;
        bool general = false;
        for (uint32_t q = 0; q < nd->nkeys && !general; q++) {
            const struct wisp_cross_key *key = &nd->keys[q];
            check[q] = false;
            if (!key->raw) {
                kv[q] = (const uint64_t *)(x->ids + (size_t)key->index * TCHUNK);
                check[q] = true;
                continue;
            }
            const struct wisp_input *in = &c->inputs[key->index];
            const struct wisp_raw_input *ri = &r->in[key->index];
            if (in->dtype == WISP_INPUT_STRING) {
                kv[q] = x->fp + (size_t)key->index * TCHUNK;
            } else if (in->dtype == WISP_INPUT_INT64) {
                kv[q] = (const uint64_t *)ri->vals + r0;      /* dense: value k is row k's */
            } else if (ntmp < 4) {
                const float *v = (const float *)ri->vals + r0;
                uint64_t *t = tmp[ntmp++];
                for (size_t k = 0; k < n; k++) {
                    float xv = v[k];
                    bool ok = xv > -9223372036854775808.0f && xv < 9223372036854775808.0f;
                    t[k] = ok ? (uint64_t)(int64_t)xv : (uint64_t)ID_ERR;   /* truncation, as TensorFlow's cast */
                    if (!ok) x->redo[k] = 1;                  /* the row-wise path says why */
                }
                kv[q] = t;
            } else {
                general = true;
            }
        }
        if (general) {                           /* many float keys: the row-wise path */
            for (size_t k = 0; k < n; k++) out[k] = ID_ERR;
            break;
        }
        const uint32_t nk = nd->nkeys;
        const uint64_t key0 = nd->hash_key;
        if (nk == 2 && !check[0] && !check[1]) {
            const uint64_t *a = kv[0], *bb = kv[1];
            if (fpmod_ok(nd)) {
                const uint64_t nb = nd->buckets;
                const double inv = 1.0 / (double)nb;
                for (size_t k = 0; k < n; k++) out[k] = (int64_t)fpmod(wisp__cat64(wisp__cat64(key0, a[k]), bb[k]), nb, inv);
            } else {
                for (size_t k = 0; k < n; k++) out[k] = (int64_t)fastmod_buckets(wisp__cat64(wisp__cat64(key0, a[k]), bb[k]), nd);
            }
            break;
        }
        for (size_t k = 0; k < n; k++) {
            uint64_t h = key0;
            int64_t status = 0;
            for (uint32_t q = 0; q < nk; q++) {
                uint64_t v = kv[q][k];
                if (check[q]) {
                    if ((int64_t)v == ID_ERR) status = ID_ERR;
                    else if ((int64_t)v == ID_NONE && status != ID_ERR) status = ID_NONE;
                }
                h = wisp__cat64(h, v);
            }
            out[k] = status ? status : (int64_t)fastmod_buckets(h, nd);
        }
        break;
    }
    }
    if (x->top[ni]) {                            /* a column's unusual value: its row goes the row-wise way */
        int any = 0;
        for (size_t k = 0; k < n; k++) any |= out[k] == ID_ERR;
        if (WISP_UNLIKELY(any))
            for (size_t k = 0; k < n; k++) x->redo[k] |= out[k] == ID_ERR;
    }
}

/* Assemble row r0 + k from the chunk's node outputs (fast path). Returns a
 * status; sets *redo when the row must go through the row-wise path. */
static int assemble_row(cctx *x, size_t k, wisp_batch *b, bool any_general, bool *redo)
{
    const wisp_columns *c = x->t.c;
    tctx *t = &x->t;
    size_t nextra = 0;
    int st;
    *redo = false;
    if (any_general) {                  /* columns over sparse inputs: evaluated for this row first */
        t->row = x->r0 + k;
        t->bad = false;
        t->top = 0;
        if ((st = row_fingerprints(t))) return st;
        for (size_t ci = 0; ci < c->ncols; ci++) {
            const struct wisp_node *nd = &c->nodes[c->cols[ci].node];
            if (nd->scalar) continue;
            x->gfrom[ci] = t->top;
            if ((st = eval_ids(t, nd))) return st;
            if (t->bad) { *redo = true; return WISP_OK; }
            x->gto[ci] = t->top;
        }
        nextra = t->top;
    }
    size_t bound = c->ncols + nextra;
    if (bound > WISP_MAX_ROW_FEATURES) { *redo = true; return WISP_OK; }
    if (b->rows >= WISP_MAX_ROWS)
        return wisp_fail(WISP_ELIMIT, "the batch already holds WISP_MAX_ROWS (%u) rows", WISP_MAX_ROWS);
    if (WISP_MAX_NNZ - b->nnz < bound)
        return wisp_fail(WISP_ELIMIT, "the batch would hold more than WISP_MAX_NNZ (%u) features", WISP_MAX_NNZ);
    uint32_t *vid, *bid;
    float *vv;
    if ((st = wisp_batch__reserve_line(b, bound, &vid, &vv, &bid))) return st;
    size_t nv = 0, nb = 0;
    /* numeric columns first (valued), then the others in column order */
    for (size_t q = 0; q < x->nnum; q++) {
        vid[nv] = x->num_off[q];
        vv[nv++] = x->num[(size_t)x->num_node[q] * TCHUNK + k];
    }
    if (!any_general) {                 /* every column scalar: one load and a branch-free store each */
        for (size_t q = 0; q < x->ncat; q++) {
            int64_t id = x->ids[(size_t)x->cat_node[q] * TCHUNK + k];
            bid[nb] = x->cat_off[q] + (uint32_t)id;   /* kept when id >= 0 */
            nb += id >= 0;
        }
        return wisp_batch__commit_line(b, nv, nb);
    }
    for (size_t q = 0; q < x->ncat; q++) {
        uint32_t ci = x->cat_col[q];
        if (WISP_UNLIKELY(x->cat_general[q])) {
            const struct wisp_column *col = &c->cols[ci];
            for (size_t z = x->gfrom[ci]; z < x->gto[ci]; z++) {
                int64_t id = (int64_t)t->stk[z];
                if (id >= 0) bid[nb++] = (uint32_t)(col->offset + (uint64_t)id);
            }
            continue;
        }
        int64_t id = x->ids[(size_t)x->cat_node[q] * TCHUNK + k];
        bid[nb] = x->cat_off[q] + (uint32_t)id;       /* branchless: kept when id >= 0 */
        nb += id >= 0;
    }
    return wisp_batch__commit_line(b, nv, nb);
}

int wisp_transform(const wisp_raw *r, wisp_batch *b)
{
    if (!r || !b) return wisp_fail(WISP_EINVAL, "wisp_transform: %s is NULL", !r ? "raw" : "batch");
    if (r->open) return wisp_fail(WISP_ESTATE, "wisp_transform: a row is still open (call wisp_raw_row_end)");
    if (b->wrapped) return wisp_fail(WISP_ESTATE, "wisp_transform: the batch wraps caller arrays and cannot grow");
    const wisp_columns *c = r->cols;
    cctx x;
    memset(&x, 0, sizeof x);
    x.t.c = c;
    x.t.r = r;
    x.t.fp = wisp_calloc(c->ninputs ? c->ninputs : 1, sizeof *x.t.fp);
    x.ids = wisp_malloc(c->nnodes * TCHUNK * sizeof *x.ids);
    x.num = wisp_malloc(c->nnodes * TCHUNK * sizeof *x.num);
    x.fp = wisp_malloc((c->ninputs ? c->ninputs : 1) * TCHUNK * sizeof *x.fp);
    x.slow = wisp_malloc(TCHUNK);
    x.redo = wisp_malloc(TCHUNK);
    x.top = wisp_calloc(c->nnodes ? c->nnodes : 1, 1);
    if (x.top) for (size_t ci = 0; ci < c->ncols; ci++) x.top[c->cols[ci].node] = 1;
    x.gfrom = wisp_calloc(c->ncols, sizeof *x.gfrom);
    x.gto = wisp_calloc(c->ncols, sizeof *x.gto);
    x.num_node = wisp_malloc(c->ncols * sizeof *x.num_node);
    x.num_off = wisp_malloc(c->ncols * sizeof *x.num_off);
    x.cat_col = wisp_malloc(c->ncols * sizeof *x.cat_col);
    x.cat_node = wisp_malloc(c->ncols * sizeof *x.cat_node);
    x.cat_off = wisp_malloc(c->ncols * sizeof *x.cat_off);
    x.cat_general = wisp_malloc(c->ncols);
    int st = WISP_OK;
    if (!x.t.fp || !x.ids || !x.num || !x.fp || !x.slow || !x.redo || !x.top || !x.gfrom || !x.gto || !x.num_node || !x.num_off ||
        !x.cat_col || !x.cat_node || !x.cat_off || !x.cat_general)
        st = wisp_fail(WISP_ENOMEM, "out of memory");
    for (size_t ci = 0; st == WISP_OK && ci < c->ncols; ci++) {
        const struct wisp_column *col = &c->cols[ci];
        const struct wisp_node *nd = &c->nodes[col->node];
        if (nd->kind == WISP_NODE_NUMERIC) {
            x.num_node[x.nnum] = col->node;
            x.num_off[x.nnum++] = (uint32_t)col->offset;
        } else {
            x.cat_col[x.ncat] = (uint32_t)ci;
            x.cat_node[x.ncat] = col->node;
            x.cat_off[x.ncat] = (uint32_t)col->offset;
            x.cat_general[x.ncat++] = !nd->scalar;
        }
    }
    bool any_general = false;
    for (size_t ci = 0; ci < c->ncols; ci++) any_general |= !c->nodes[c->cols[ci].node].scalar;
    size_t nextbad = 0;
    for (size_t r0 = 0; r0 < r->rows && st == WISP_OK; r0 += TCHUNK) {
        x.r0 = r0;
        x.n = r->rows - r0 < TCHUNK ? r->rows - r0 : TCHUNK;
        memset(x.slow, 0, x.n);
        memset(x.redo, 0, x.n);
        size_t nb0 = nextbad;
        while (nextbad < r->nbad && r->bad[nextbad].row < r0 + x.n) x.slow[r->bad[nextbad++].row - r0] = 1;
        chunk_fingerprints(&x);
        for (size_t ni = c->nnodes; ni-- > 0;)
            if (c->nodes[ni].scalar) chunk_node(&x, (uint32_t)ni);

        size_t bi = nb0;
        for (size_t k = 0; k < x.n && st == WISP_OK; k++) {
            size_t row = r0 + k;
            if (x.slow[k]) {                                   /* a bad raw row */
                st = add_bad_row(b, r->lines[row], r->msgs + r->bad[bi++].msg_off);
                continue;
            }
            bool redo = x.redo[k];
            if (!redo) {
                st = assemble_row(&x, k, b, any_general, &redo);
                if (st || !redo) continue;
            }
            /* the row-wise path: exact messages for unusual rows */
            tctx *t = &x.t;
            t->row = row;
            t->bad = false;
            if ((st = transform_row(t))) break;
            if (t->bad) {
                st = add_bad_row(b, r->lines[row], t->msg);
            } else {
                st = wisp_batch_add_row_mixed(b, t->vids, t->vvals, t->nv, t->bids, t->nb);
            }
        }
    }
    wisp_free(x.t.fp);
    wisp_free(x.t.fpbuf);
    wisp_free(x.t.stk);
    wisp_free(x.t.vids);
    wisp_free(x.t.vvals);
    wisp_free(x.t.bids);
    wisp_free(x.ids);
    wisp_free(x.num);
    wisp_free(x.fp);
    wisp_free(x.slow);
    wisp_free(x.gfrom);
    wisp_free(x.gto);
    wisp_free(x.redo);
    wisp_free(x.top);
    wisp_free(x.num_node);
    wisp_free(x.num_off);
    wisp_free(x.cat_col);
    wisp_free(x.cat_node);
    wisp_free(x.cat_off);
    wisp_free(x.cat_general);
    if (st) return wisp_fail_context(st, "wisp_transform");
    return WISP_OK;
}
