/* transform_cpu.c — the transform on the CPU: a raw batch (engine/batch/raw.c) into a
 * batch of feature ids and values, exact to TensorFlow (engine/COLUMNS.md).
 * wisp_transform goes over chunks of 256 rows and evaluates each column over
 * the chunk (the loop a GPU kernel has: one row per thread), then assembles
 * the rows into the batch; columns over sparse inputs and unusual rows (bad
 * values) take the row-wise path, wisp__transform_rowwise, which is also the
 * reference the tests compare the column path with. Fingerprints of dense
 * strings are computed once per value; h % buckets is a multiplication (or a
 * mask for powers of two); the chunk loops are also compiled for x86-64-v4
 * and picked at load time. */
#include "batch/raw.h"
#include "transform/bucketize.h"
#include "transform/columns_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emmintrin.h>

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
    uint64_t *ns = wisp__realloc(t->stk, nc * sizeof *ns);
    if (!ns) return wisp__fail(WISP_ENOMEM, "transform: out of memory (%zu ids of scratch)", nc);
    t->stk = ns;
    t->stk_cap = nc;
    return WISP_OK;
}

/* Row `row`'s values of input i: [*a, *z). Dense inputs hold value k for row k. */
static inline void span(const wisp_raw *r, size_t i, size_t row, uint32_t *a, uint32_t *z)
{
    if (r->cols->inputs[i].sparse) { *a = r->in[i].indptr[row]; *z = r->in[i].indptr[row + 1]; }
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
                int64_t id = vocab_lookup(nd, false, NULL, 0, wisp__mix64((uint64_t)x), x);
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
        uint64_t *n = wisp__realloc(t->bids, nc * sizeof *n);
        if (!n) return wisp__fail(WISP_ENOMEM, "transform: out of memory");
        t->bids = n;
        t->b_cap = nc;
    }
    if (t->nv + nv_more > t->v_cap) {
        size_t nc = t->v_cap ? t->v_cap : 64;
        while (nc < t->nv + nv_more) nc *= 2;
        uint64_t *n = wisp__realloc(t->vids, nc * sizeof *n);
        if (!n) return wisp__fail(WISP_ENOMEM, "transform: out of memory");
        t->vids = n;
        float *f = wisp__realloc(t->vvals, nc * sizeof *f);
        if (!f) return wisp__fail(WISP_ENOMEM, "transform: out of memory");
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
        uint64_t *n = wisp__realloc(t->fpbuf, nc * sizeof *n);
        if (!n) return wisp__fail(WISP_ENOMEM, "transform: out of memory");
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
 * the batch is unchanged. */
static int add_bad_row(wisp_batch *b, uint64_t line, const char *msg)
{
    int st = wisp_batch_add_row(b, NULL, NULL, 0);
    if (st != WISP_OK) return st;
    st = wisp__batch_mark_bad(b, b->rows - 1, line, msg);
    if (st != WISP_OK) b->rows--;               /* the empty row goes again (as libsvm.c does) */
    return st;
}

int wisp__transform_rowwise(const wisp_raw *r, wisp_batch *b)
{
    if (!r || !b) return wisp__fail(WISP_EINVAL, "wisp_transform: %s is NULL", !r ? "raw" : "batch");
    if (r->open) return wisp__fail(WISP_ESTATE, "wisp_transform: a row is still open (call wisp_raw_row_end)");
    tctx t;
    memset(&t, 0, sizeof t);
    t.c = r->cols;
    t.r = r;
    t.fp = wisp__calloc(r->cols->ninputs ? r->cols->ninputs : 1, sizeof *t.fp);
    if (!t.fp) return wisp__fail(WISP_ENOMEM, "wisp_transform: out of memory");
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
    wisp__free(t.fp);
    wisp__free(t.fpbuf);
    wisp__free(t.stk);
    wisp__free(t.vids);
    wisp__free(t.vvals);
    wisp__free(t.bids);
    if (st) return wisp__fail_context(st, "wisp_transform");
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
                    int64_t id = vocab_lookup(nd, false, NULL, 0, wisp__mix64((uint64_t)xv), xv);
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
        return wisp__fail(WISP_ELIMIT, "the batch already holds WISP_MAX_ROWS (%u) rows", WISP_MAX_ROWS);
    if (WISP_MAX_NNZ - b->nnz < bound)
        return wisp__fail(WISP_ELIMIT, "the batch would hold more than WISP_MAX_NNZ (%u) features", WISP_MAX_NNZ);
    uint32_t *vid, *bid;
    float *vv;
    if ((st = wisp__batch_reserve_line(b, bound, &vid, &vv, &bid))) return st;
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
        return wisp__batch_commit_line(b, nv, nb);
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
    return wisp__batch_commit_line(b, nv, nb);
}

int wisp_transform(const wisp_raw *r, wisp_batch *b)
{
    if (!r || !b) return wisp__fail(WISP_EINVAL, "wisp_transform: %s is NULL", !r ? "raw" : "batch");
    if (r->open) return wisp__fail(WISP_ESTATE, "wisp_transform: a row is still open (call wisp_raw_row_end)");
    if (b->wrapped) return wisp__fail(WISP_ESTATE, "wisp_transform: the batch wraps caller arrays and cannot grow");
    const wisp_columns *c = r->cols;
    cctx x;
    memset(&x, 0, sizeof x);
    x.t.c = c;
    x.t.r = r;
    x.t.fp = wisp__calloc(c->ninputs ? c->ninputs : 1, sizeof *x.t.fp);
    x.ids = wisp__malloc(c->nnodes * TCHUNK * sizeof *x.ids);
    x.num = wisp__malloc(c->nnodes * TCHUNK * sizeof *x.num);
    x.fp = wisp__malloc((c->ninputs ? c->ninputs : 1) * TCHUNK * sizeof *x.fp);
    x.slow = wisp__malloc(TCHUNK);
    x.redo = wisp__malloc(TCHUNK);
    x.top = wisp__calloc(c->nnodes ? c->nnodes : 1, 1);
    if (x.top) for (size_t ci = 0; ci < c->ncols; ci++) x.top[c->cols[ci].node] = 1;
    x.gfrom = wisp__calloc(c->ncols, sizeof *x.gfrom);
    x.gto = wisp__calloc(c->ncols, sizeof *x.gto);
    x.num_node = wisp__malloc(c->ncols * sizeof *x.num_node);
    x.num_off = wisp__malloc(c->ncols * sizeof *x.num_off);
    x.cat_col = wisp__malloc(c->ncols * sizeof *x.cat_col);
    x.cat_node = wisp__malloc(c->ncols * sizeof *x.cat_node);
    x.cat_off = wisp__malloc(c->ncols * sizeof *x.cat_off);
    x.cat_general = wisp__malloc(c->ncols);
    int st = WISP_OK;
    if (!x.t.fp || !x.ids || !x.num || !x.fp || !x.slow || !x.redo || !x.top || !x.gfrom || !x.gto || !x.num_node || !x.num_off ||
        !x.cat_col || !x.cat_node || !x.cat_off || !x.cat_general)
        st = wisp__fail(WISP_ENOMEM, "out of memory");
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
    wisp__free(x.t.fp);
    wisp__free(x.t.fpbuf);
    wisp__free(x.t.stk);
    wisp__free(x.t.vids);
    wisp__free(x.t.vvals);
    wisp__free(x.t.bids);
    wisp__free(x.ids);
    wisp__free(x.num);
    wisp__free(x.fp);
    wisp__free(x.slow);
    wisp__free(x.gfrom);
    wisp__free(x.gto);
    wisp__free(x.redo);
    wisp__free(x.top);
    wisp__free(x.num_node);
    wisp__free(x.num_off);
    wisp__free(x.cat_col);
    wisp__free(x.cat_node);
    wisp__free(x.cat_off);
    wisp__free(x.cat_general);
    if (st) return wisp__fail_context(st, "wisp_transform");
    return WISP_OK;
}
