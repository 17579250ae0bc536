/* columns.c — the column description: reading its JSON (engine/COLUMNS.md is the
 * grammar and the TensorFlow rules it follows) into wisp_columns (inputs,
 * columns, the node graph with bucket magic and vocabulary hash tables), the
 * accessors of wisp.h, and reference counting. Raw batches are engine/batch/raw.c,
 * the CPU transform engine/transform/transform_cpu.c. */
#include "model/model.h"
#include "transform/columns.h"
#include "transform/columns_impl.h"
#include "parse/json.h"
#include "parse/textnum.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_HASH_KEY 0xDECAFCAFFEull

typedef struct {
    wisp_columns *c;
    const char *text;
    char where[200];             /* "columns[3] 'city_X_age'" */
    size_t node_cap, col_cap;
} builder;


static int bfail(builder *b, const wisp_jv *at, int status, const char *fmt, ...) WISP_PRINTF(4, 5);
static int bfail(builder *b, const wisp_jv *at, int status, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) {
        size_t l, col;
        wisp__json_line_col(b->text, at->off, &l, &col);
        return wisp__fail(status, "columns: line %zu, column %zu: %s%s%s", l, col, b->where, b->where[0] ? ": " : "", msg);
    }
    return wisp__fail(status, "columns: %s%s%s", b->where, b->where[0] ? ": " : "", msg);
}


/* A field of obj that must be present with type t (WISP_JSON_TRUE stands for any boolean). */
static int need(builder *b, const wisp_jv *obj, const char *key, int t, const wisp_jv **out)
{
    const wisp_jv *v = wisp__json_get(obj, key);
    *out = NULL;
    if (!v) return bfail(b, obj, WISP_EPARSE, "missing \"%s\"", key);
    bool ok = t == WISP_JSON_TRUE ? (v->t == WISP_JSON_TRUE || v->t == WISP_JSON_FALSE) : v->t == t;
    if (!ok) return bfail(b, v, WISP_EPARSE, "\"%s\" must be %s, not %s", key,
                          t == WISP_JSON_TRUE ? "true or false" : wisp__json_type_name(t), wisp__json_type_name(v->t));
    *out = v;
    return WISP_OK;
}

/* Only these keys may appear in obj (catches typos like "bucket"). */
static int only_keys(builder *b, const wisp_jv *obj, const char *const *allowed)
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
static int get_int(builder *b, const wisp_jv *v, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    if (v->t != WISP_JSON_NUM) return bfail(b, v, WISP_EPARSE, "%s must be an integer, not %s", what, wisp__json_type_name(v->t));
    int64_t x;
    int r = wisp__textnum_i64(v->s, v->len, &x);
    if (r == -1) return bfail(b, v, WISP_EPARSE, "%s must be an integer, not %s", what, v->s);
    if (r == -2 || x < lo || x > hi)
        return bfail(b, v, WISP_EPARSE, "%s is %s, outside [%lld, %lld]", what, v->s, (long long)lo, (long long)hi);
    *out = x;
    return WISP_OK;
}

/* A count in [1, max]: an integer literal that may exceed int64 only up to max. */
static int get_count(builder *b, const wisp_jv *obj, const char *key, uint64_t max, uint64_t *out)
{
    const wisp_jv *v;
    int st = need(b, obj, key, WISP_JSON_NUM, &v);
    if (st) return st;
    int64_t x;
    st = get_int(b, v, key, 1, (int64_t)max, &x);
    if (st) return st;
    *out = (uint64_t)x;
    return WISP_OK;
}

/* A number (any JSON number), as TensorFlow rounds a Python float to float32. */
static int get_f32(builder *b, const wisp_jv *v, const char *what, float *out)
{
    if (v->t != WISP_JSON_NUM) return bfail(b, v, WISP_EPARSE, "%s must be a number, not %s", what, wisp__json_type_name(v->t));
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
        struct wisp_node *nn = wisp__realloc(c->nodes, nc * sizeof *nn);
        if (!nn) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        c->nodes = nn;
        b->node_cap = nc;
    }
    memset(&c->nodes[c->nnodes], 0, sizeof c->nodes[0]);
    *idx = (uint32_t)c->nnodes++;
    return WISP_OK;
}

static int find_input(builder *b, const wisp_jv *v, const char *what, uint32_t *out)
{
    if (v->t != WISP_JSON_STR) return bfail(b, v, WISP_EPARSE, "%s must be an input name (a string), not %s", what, wisp__json_type_name(v->t));
    long i = wisp__columns_find_input(b->c, v->s, v->len);
    if (i < 0) return bfail(b, v, WISP_EPARSE, "%s: unknown input '%s' (not in \"inputs\")", what, v->s);
    *out = (uint32_t)i;
    return WISP_OK;
}


static void set_magic(struct wisp_node *nd)
{
    u128 m = (~(u128)0) / nd->buckets + 1;
    nd->magic_lo = (uint64_t)m;
    nd->magic_hi = (uint64_t)(m >> 64);
    nd->pow2_mask = nd->buckets > 1 && !(nd->buckets & (nd->buckets - 1)) ? nd->buckets - 1 : 0;
}


static int parse_column(builder *b, const wisp_jv *o, bool top, uint32_t *out, uint64_t *size);

static int parse_vocab(builder *b, const wisp_jv *o, struct wisp_node *nd_in, uint32_t ni)
{
    wisp_columns *c = b->c;
    const wisp_jv *voc;
    int st = need(b, o, "vocabulary", WISP_JSON_ARR, &voc);
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
    nd->vocab_hash = wisp__calloc(n, sizeof *nd->vocab_hash);
    nd->vocab_slots = wisp__calloc(slots, sizeof *nd->vocab_slots);
    if (dt == WISP_INPUT_STRING) {
        nd->vocab_str = wisp__calloc(n, sizeof *nd->vocab_str);
        nd->vocab_len = wisp__calloc(n, sizeof *nd->vocab_len);
    } else {
        nd->vocab_int = wisp__calloc(n, sizeof *nd->vocab_int);
    }
    if (!nd->vocab_hash || !nd->vocab_slots || (dt == WISP_INPUT_STRING ? !nd->vocab_str || !nd->vocab_len : !nd->vocab_int))
        return bfail(b, NULL, WISP_ENOMEM, "out of memory for a vocabulary of %zu entries", n);
    nd->vocab_mask = slots - 1;
    for (size_t i = 0; i < n; i++) {
        const wisp_jv *e = &voc->items[i];
        uint64_t h;
        if (dt == WISP_INPUT_STRING) {
            if (e->t != WISP_JSON_STR) return bfail(b, e, WISP_EPARSE, "vocabulary[%zu] must be a string (input '%s' is string)", i, c->inputs[nd->input].name);
            if (e->len > WISP_MAX_STRING_BYTES) return bfail(b, e, WISP_ELIMIT, "vocabulary[%zu] is longer than %u bytes", i, WISP_MAX_STRING_BYTES);
            nd->vocab_str[i] = wisp__malloc(e->len + 1);
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
            h = wisp__mix64((uint64_t)x);
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
    const wisp_jv *v;
    int64_t x;
    nd->num_oov = 0;
    if ((v = wisp__json_get(o, "num_oov_buckets"))) {
        if ((st = get_int(b, v, "num_oov_buckets", 0, (int64_t)WISP_MAX_FEATURES, &x))) return st;
        nd->num_oov = (uint64_t)x;
    }
    nd->has_default = true;
    nd->default_value = -1;
    if ((v = wisp__json_get(o, "default_value")) && v->t != WISP_JSON_NULL) {
        if ((st = get_int(b, v, "default_value", -1, (int64_t)n - 1, &x))) return st;
        nd->default_value = x;
    }
    if (nd->num_oov && nd->default_value != -1)
        return bfail(b, o, WISP_EPARSE, "num_oov_buckets and default_value cannot both be set (as in TensorFlow)");
    nd->buckets = n + nd->num_oov;
    return WISP_OK;
}

static int parse_crossed(builder *b, const wisp_jv *o, uint32_t ni)
{
    wisp_columns *c = b->c;
    const wisp_jv *keys;
    int st = need(b, o, "keys", WISP_JSON_ARR, &keys);
    if (st) return st;
    if (keys->n < 2) return bfail(b, keys, WISP_EPARSE, "a crossed column needs at least 2 keys, has %zu", keys->n);
    /* flatten nested crosses in order */
    struct wisp_cross_key *flat = NULL;
    size_t nflat = 0, cap = 0;
    for (size_t i = 0; i < keys->n; i++) {
        const wisp_jv *k = &keys->items[i];
        struct wisp_cross_key add[1];
        const struct wisp_cross_key *src = add;
        size_t nadd = 1;
        if (k->t == WISP_JSON_STR) {
            uint32_t in;
            char what[32];
            snprintf(what, sizeof what, "keys[%zu]", i);
            if ((st = find_input(b, k, what, &in))) goto fail;
            add[0].raw = true;
            add[0].index = in;
        } else if (k->t == WISP_JSON_OBJ) {
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
            st = bfail(b, k, WISP_EPARSE, "keys[%zu] must be an input name or a column object, not %s", i, wisp__json_type_name(k->t));
            goto fail;
        }
        if (nflat + nadd > cap) {
            size_t ncap = cap ? cap * 2 : 8;
            while (ncap < nflat + nadd) ncap *= 2;
            struct wisp_cross_key *nf = wisp__realloc(flat, ncap * sizeof *nf);
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
    nd->keys = wisp__malloc(nflat * sizeof *nd->keys);
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
    wisp__free(flat);
    if ((st = get_count(b, o, "buckets", WISP_MAX_FEATURES, &nd->buckets))) return st;
    nd->hash_key = DEFAULT_HASH_KEY;
    const wisp_jv *hk = wisp__json_get(o, "hash_key");
    if (hk && hk->t != WISP_JSON_NULL) {
        uint64_t key = 0;
        if (hk->t == WISP_JSON_STR && hk->len > 2 && hk->len <= 18 && hk->s[0] == '0' && (hk->s[1] | 0x20) == 'x') {
            for (size_t i = 2; i < hk->len; i++) {
                int h = wisp__json_hex_digit(hk->s[i]);
                if (h < 0) return bfail(b, hk, WISP_EPARSE, "hash_key '%s' is not hexadecimal", hk->s);
                key = key << 4 | (uint64_t)h;
            }
        } else if (hk->t == WISP_JSON_NUM && hk->len <= 20 && strspn(hk->s, "0123456789") == hk->len) {
            errno = 0;
            unsigned long long x = strtoull(hk->s, NULL, 10);
            if (errno) return bfail(b, hk, WISP_EPARSE, "hash_key %s overflows 64 bits", hk->s);
            key = x;
        } else if (hk->t == WISP_JSON_NUM && hk->s[0] == '-') {
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
    wisp__free(flat);
    return st;
}

/* Parse one column object into a node; *size is its slice size. */
static int parse_column(builder *b, const wisp_jv *o, bool top, uint32_t *out, uint64_t *size)
{
    wisp_columns *c = b->c;
    if (o->t != WISP_JSON_OBJ) return bfail(b, o, WISP_EPARSE, "a column must be an object, not %s", wisp__json_type_name(o->t));
    const wisp_jv *type, *v;
    int st = need(b, o, "type", WISP_JSON_STR, &type);
    if (st) return st;
    uint32_t ni = 0;
    if ((st = add_node(b, &ni))) return st;
    struct wisp_node *nd = &c->nodes[ni];
    const char *t = type->s;
    if (!strcmp(t, "numeric")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "key", "normalizer", "shape", "default", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        nd->kind = WISP_NODE_NUMERIC;
        if ((st = need(b, o, "key", WISP_JSON_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
        const struct wisp_input *in = &c->inputs[nd->input];
        if (in->dtype == WISP_INPUT_STRING)
            return bfail(b, v, WISP_EPARSE, "a numeric column needs a float32 or int64 input; '%s' is string", in->name);
        if (in->sparse)
            return bfail(b, v, WISP_EPARSE, "a numeric column needs a dense input; '%s' is sparse (TensorFlow refuses SparseTensors here)", in->name);
        if ((v = wisp__json_get(o, "shape")) && !(v->t == WISP_JSON_NUM && !strcmp(v->s, "1")) &&
            !(v->t == WISP_JSON_ARR && v->n == 1 && v->items[0].t == WISP_JSON_NUM && !strcmp(v->items[0].s, "1")))
            return bfail(b, v, WISP_EPARSE, "only numeric columns of shape 1 are supported");
        if ((v = wisp__json_get(o, "default")))
            return bfail(b, v, WISP_EPARSE, "put the default on the input (\"inputs\"), not on the column");
        nd->norm = WISP_NORM_NONE;
        if ((v = wisp__json_get(o, "normalizer")) && v->t != WISP_JSON_NULL) {
            const wisp_jv *nt, *a, *bb;
            if (v->t != WISP_JSON_OBJ) return bfail(b, v, WISP_EPARSE, "\"normalizer\" must be an object");
            if ((st = need(b, v, "type", WISP_JSON_STR, &nt))) return st;
            if (in->dtype != WISP_INPUT_FLOAT32)
                return bfail(b, v, WISP_EPARSE, "a normalizer needs a float32 input; '%s' is int64", in->name);
            if (!strcmp(nt->s, "standard")) {
                static const char *const nk[] = { "type", "mean", "std", NULL };
                if ((st = only_keys(b, v, nk)) || (st = need(b, v, "mean", WISP_JSON_NUM, &a)) || (st = need(b, v, "std", WISP_JSON_NUM, &bb)) ||
                    (st = get_f32(b, a, "mean", &nd->norm_a)) || (st = get_f32(b, bb, "std", &nd->norm_b)))
                    return st;
                if (nd->norm_b == 0) return bfail(b, bb, WISP_EPARSE, "std is 0");
                nd->norm = WISP_NORM_STANDARD;
            } else if (!strcmp(nt->s, "affine")) {
                static const char *const nk[] = { "type", "scale", "shift", NULL };
                if ((st = only_keys(b, v, nk)) || (st = need(b, v, "scale", WISP_JSON_NUM, &a)) || (st = need(b, v, "shift", WISP_JSON_NUM, &bb)) ||
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
        const wisp_jv *src, *bd;
        if ((st = need(b, o, "source", WISP_JSON_OBJ, &src)) || (st = need(b, o, "boundaries", WISP_JSON_ARR, &bd))) return st;
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
        nd->bounds = wisp__malloc((bd->n + 3) / 4 * 4 * sizeof *nd->bounds);
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
        if ((st = need(b, o, "key", WISP_JSON_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
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
        if ((st = need(b, o, "key", WISP_JSON_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
        if ((st = parse_vocab(b, o, nd, ni))) return st;
        nd = &c->nodes[ni];
        if (c->inputs[nd->input].dtype == WISP_INPUT_STRING) c->inputs[nd->input].need_fp = true;
        *size = nd->buckets;
    } else if (!strcmp(t, "identity")) {
        static const char *const ok[] = { "name", "type", "offset", "size", "key", "buckets", "default_value", NULL };
        if ((st = only_keys(b, o, ok))) return st;
        nd->kind = WISP_NODE_IDENTITY;
        if ((st = need(b, o, "key", WISP_JSON_STR, &v)) || (st = find_input(b, v, "key", &nd->input))) return st;
        if (c->inputs[nd->input].dtype != WISP_INPUT_INT64)
            return bfail(b, v, WISP_EPARSE, "an identity column needs an int64 input; '%s' is %s", c->inputs[nd->input].name,
                         wisp__input_type_name(c->inputs[nd->input].dtype));
        if ((st = get_count(b, o, "buckets", WISP_MAX_FEATURES, &nd->buckets))) return st;
        if ((v = wisp__json_get(o, "default_value")) && v->t != WISP_JSON_NULL) {
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

static int parse_inputs(builder *b, const wisp_jv *arr)
{
    wisp_columns *c = b->c;
    if (arr->n > WISP_MAX_COLUMNS) return bfail(b, arr, WISP_ELIMIT, "more than %u inputs", WISP_MAX_COLUMNS);
    c->inputs = wisp__calloc(arr->n ? arr->n : 1, sizeof *c->inputs);
    uint32_t slots = 16;
    while (slots < 2 * arr->n) slots <<= 1;
    c->name_slots = wisp__calloc(slots, sizeof *c->name_slots);
    if (!c->inputs || !c->name_slots) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
    c->name_mask = slots - 1;
    for (size_t i = 0; i < arr->n; i++) {
        const wisp_jv *o = &arr->items[i], *v;
        snprintf(b->where, sizeof b->where, "inputs[%zu]", i);
        if (o->t != WISP_JSON_OBJ) return bfail(b, o, WISP_EPARSE, "an input must be an object, not %s", wisp__json_type_name(o->t));
        static const char *const ok[] = { "name", "dtype", "sparse", "default", NULL };
        int st;
        if ((st = only_keys(b, o, ok)) || (st = need(b, o, "name", WISP_JSON_STR, &v))) return st;
        if (v->len == 0) return bfail(b, v, WISP_EPARSE, "empty input name");
        /* names are C strings (wisp__strdup below, name_len hashed): a \u0000 would cut them short */
        if (memchr(v->s, '\0', v->len)) return bfail(b, v, WISP_EPARSE, "the input name contains a NUL (\\u0000)");
        if (wisp__columns_find_input(c, v->s, v->len) >= 0) return bfail(b, v, WISP_EPARSE, "input '%s' is declared twice", v->s);
        struct wisp_input *in = &c->inputs[i];
        in->name = wisp__strdup(v->s);
        if (!in->name) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        c->ninputs = i + 1;          /* owned from here on (freed with c) */
        in->name_len = v->len;
        snprintf(b->where, sizeof b->where, "inputs[%zu] '%.80s'", i, in->name);
        if ((st = need(b, o, "dtype", WISP_JSON_STR, &v))) return st;
        if (!strcmp(v->s, "float32")) in->dtype = WISP_INPUT_FLOAT32;
        else if (!strcmp(v->s, "int64")) in->dtype = WISP_INPUT_INT64;
        else if (!strcmp(v->s, "string")) in->dtype = WISP_INPUT_STRING;
        else return bfail(b, v, WISP_EPARSE, "unknown dtype '%s' (float32, int64 or string)", v->s);
        if ((v = wisp__json_get(o, "sparse"))) {
            if (v->t != WISP_JSON_TRUE && v->t != WISP_JSON_FALSE) return bfail(b, v, WISP_EPARSE, "\"sparse\" must be true or false");
            in->sparse = v->t == WISP_JSON_TRUE;
        }
        v = wisp__json_get(o, "default");
        if (in->sparse) {
            if (v && v->t != WISP_JSON_NULL) return bfail(b, v, WISP_EPARSE, "a sparse input has no default (missing means no value)");
        } else if (!v) {                    /* TensorFlow's missing markers */
            in->has_default = in->dtype != WISP_INPUT_FLOAT32;
            in->def_i = -1;
            in->def_s = wisp__strdup("");
            if (!in->def_s) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        } else if (v->t != WISP_JSON_NULL) {
            in->has_default = true;
            if (in->dtype == WISP_INPUT_STRING) {
                if (v->t != WISP_JSON_STR) return bfail(b, v, WISP_EPARSE, "the default of a string input must be a string");
                if (v->len > WISP_MAX_STRING_BYTES) return bfail(b, v, WISP_ELIMIT, "the default is longer than %u bytes", WISP_MAX_STRING_BYTES);
                in->def_s = wisp__malloc(v->len + 1);
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

long wisp__columns_find_input(const wisp_columns *c, const char *name, size_t len)
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
        wisp__free(c->inputs[i].name);
        wisp__free(c->inputs[i].def_s);
    }
    wisp__free(c->inputs);
    for (size_t i = 0; i < c->nnodes; i++) {
        struct wisp_node *nd = &c->nodes[i];
        wisp__free(nd->bounds);
        if (nd->vocab_str)
            for (uint32_t k = 0; k < nd->vocab_n; k++) wisp__free(nd->vocab_str[k]);
        wisp__free(nd->vocab_str);
        wisp__free(nd->vocab_len);
        wisp__free(nd->vocab_int);
        wisp__free(nd->vocab_hash);
        wisp__free(nd->vocab_slots);
        wisp__free(nd->keys);
    }
    wisp__free(c->nodes);
    for (size_t i = 0; i < c->ncols; i++) wisp__free(c->cols[i].name);
    wisp__free(c->cols);
    wisp__free(c->name_slots);
    wisp__free(c);
}

static int cmp_slice(const void *a, const void *b)
{
    const struct wisp_column *x = *(const struct wisp_column *const *)a, *y = *(const struct wisp_column *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int build(builder *b, const wisp_jv *root)
{
    wisp_columns *c = b->c;
    const wisp_jv *v;
    int st;
    if (root->t != WISP_JSON_OBJ) return bfail(b, root, WISP_EPARSE, "the description must be a JSON object");
    static const char *const ok[] = { "format", "version", "inputs", "columns", "num_features", "comment", NULL };
    if ((st = only_keys(b, root, ok))) return st;
    if ((st = need(b, root, "format", WISP_JSON_STR, &v))) return st;
    if (strcmp(v->s, "wisp-columns")) return bfail(b, v, WISP_EPARSE, "\"format\" is '%s', expected 'wisp-columns'", v->s);
    if ((st = need(b, root, "version", WISP_JSON_NUM, &v))) return st;
    if (strcmp(v->s, "1")) return bfail(b, v, WISP_EPARSE, "version %s is not supported (this build reads version 1)", v->s);
    if ((st = need(b, root, "inputs", WISP_JSON_ARR, &v)) || (st = parse_inputs(b, v))) return st;
    const wisp_jv *cols;
    if ((st = need(b, root, "columns", WISP_JSON_ARR, &cols))) return st;
    if (cols->n == 0) return bfail(b, cols, WISP_EPARSE, "\"columns\" is empty");
    if (cols->n > WISP_MAX_COLUMNS) return bfail(b, cols, WISP_ELIMIT, "more than %u columns", WISP_MAX_COLUMNS);
    c->cols = wisp__calloc(cols->n, sizeof *c->cols);
    if (!c->cols) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
    for (size_t i = 0; i < cols->n; i++) {
        const wisp_jv *o = &cols->items[i], *nm;
        snprintf(b->where, sizeof b->where, "columns[%zu]", i);
        if (o->t != WISP_JSON_OBJ) return bfail(b, o, WISP_EPARSE, "a column must be an object, not %s", wisp__json_type_name(o->t));
        if ((st = need(b, o, "name", WISP_JSON_STR, &nm))) return st;
        snprintf(b->where, sizeof b->where, "columns[%zu] '%.80s'", i, nm->s);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(c->cols[k].name, nm->s)) return bfail(b, nm, WISP_EPARSE, "the name repeats columns[%zu]", k);
        struct wisp_column *col = &c->cols[i];
        col->name = wisp__strdup(nm->s);
        if (!col->name) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
        c->ncols = i + 1;
        uint64_t size;
        if ((st = parse_column(b, o, true, &col->node, &size))) return st;
        int64_t x;
        if ((st = need(b, o, "offset", WISP_JSON_NUM, &v)) || (st = get_int(b, v, "offset", 0, (int64_t)WISP_MAX_FEATURES, &x))) return st;
        col->offset = (uint64_t)x;
        col->size = size;
        if ((v = wisp__json_get(o, "size"))) {
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
    struct wisp_column **order = wisp__malloc(c->ncols * sizeof *order);
    if (!order) return bfail(b, NULL, WISP_ENOMEM, "out of memory");
    for (size_t i = 0; i < c->ncols; i++) order[i] = &c->cols[i];
    qsort(order, c->ncols, sizeof *order, cmp_slice);
    for (size_t i = 1; i < c->ncols; i++)
        if (order[i]->offset < order[i - 1]->offset + order[i - 1]->size) {
            st = bfail(b, NULL, WISP_EPARSE, "the slices of columns '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                       order[i - 1]->name, (unsigned long long)order[i - 1]->offset,
                       (unsigned long long)(order[i - 1]->offset + order[i - 1]->size), order[i]->name,
                       (unsigned long long)order[i]->offset, (unsigned long long)(order[i]->offset + order[i]->size));
            wisp__free(order);
            return st;
        }
    wisp__free(order);
    if ((v = wisp__json_get(root, "num_features"))) {
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
    if (!out || (!text && len)) return wisp__fail(WISP_EINVAL, "wisp_columns_parse: %s is NULL", !out ? "out" : "text");
    if (len > WISP_MAX_SPEC_BYTES)
        return wisp__fail(WISP_ELIMIT, "columns: %zu bytes of description, more than WISP_MAX_SPEC_BYTES (%u)", len, WISP_MAX_SPEC_BYTES);
    const char *t = text ? text : "";
    wisp_jv root;
    char err[256];
    size_t err_off = 0;
    int st = wisp__json_parse(t, len, &root, err, sizeof err, &err_off);
    if (st) {
        size_t l, col;
        wisp__json_line_col(t, err_off, &l, &col);
        return wisp__fail(st, "columns: line %zu, column %zu: %s", l, col, err);
    }
    wisp_columns *c = wisp__calloc(1, sizeof *c);
    if (!c) { wisp__json_free(&root); return wisp__fail(WISP_ENOMEM, "columns: out of memory"); }
    atomic_init(&c->refs, 1);
    builder b = { .c = c, .text = t };
    st = build(&b, &root);
    wisp__json_free(&root);
    if (st) { columns_destroy(c); return st; }
    *out = c;
    return WISP_OK;
}

int wisp_columns_from_model(const wisp_model *m, wisp_columns **out)
{
    if (out) *out = NULL;
    if (!m || !out) return wisp__fail(WISP_EINVAL, "wisp_columns_from_model: %s is NULL", !m ? "model" : "out");
    const char *text = wisp_model_columns(m);
    if (!text || !*text) return wisp__fail(WISP_ESTATE, "%s: the model has no \"columns\" section", wisp_model_path(m));
    wisp_columns *c;
    int st = wisp_columns_parse(text, strlen(text), &c);
    if (st) return wisp__fail_context(st, "%s", wisp_model_path(m));
    if (c->num_features > wisp_model_num_features(m)) {
        unsigned long long need_f = (unsigned long long)c->num_features;
        wisp_columns_free(c);
        return wisp__fail(WISP_EFORMAT, "%s: the columns use %llu weights but the model has %llu", wisp_model_path(m),
                         need_f, (unsigned long long)wisp_model_num_features(m));
    }
    *out = c;
    return WISP_OK;
}

void wisp__columns_retain(wisp_columns *c)
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
    return wisp__columns_find_input(c, name, len);
}
