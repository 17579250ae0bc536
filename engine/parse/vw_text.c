/* vw_text.c — Vowpal Wabbit's text format parsed into batches (wisp_batch_parse_vw), hashed by transform/vw_hash.c. */
/*
 * Every fact below was checked against the vowpalwabbit 9.11.9 package from
 * PyPI (spec/data/gen/vw_golden.py writes spec/data/vw_golden.json from it; the
 * parity test spec/interop/vw_parity.py trains and predicts with it) and
 * against VW's source (parse_example.cc, hashstring.h, parse_primitives.h,
 * fast_pow10.h, interactions_predict.h).
 *
 * Values: a feature's value is its ":value" times the namespace's
 * "|ns:weight" (float products). Values are converted exactly as VW's
 * parseFloat does: its fast path (sign '-', digits, '.', up to 35 decimals,
 * e/E with an optional '-', accumulated in float, times a float table of
 * powers of ten) when that path consumes the token and the token ends at a
 * blank or the line end, else strtof (C locale). Features whose value is 0
 * are dropped (as VW does); a value of exactly 1 is a binary feature.
 *
 * Lines (one example each; CRLF accepted; a UTF-8 BOM at a line's start skipped):
 *   [label section] ( '|' namespace features... )*
 * The label section is what precedes the first '|' (after its first tab,
 * as VW cuts it): words split by spaces; the last word is a tag when it
 * starts with '\'' or touches the '|'. Up to three words remain: label,
 * importance weight, initial prediction; each must be a number. The label
 * is ignored; an initial prediction other than 0 makes a bad row (wisp has
 * no per-row offset). A line with no '|' has no features but the constant.
 * Blank lines make no row (VW treats them as example separators).
 *
 * wisp is stricter than VW where VW warns and guesses: a malformed value
 * ("1:2", "5abc"), NaN or an infinity, an empty ":" value, "|:w" (a
 * namespace weight without a name), a bad namespace weight, a non-numeric
 * label, more than three label words, a carriage return inside a line, or
 * more than WISP_MAX_ROW_FEATURES features make a bad row
 * ("line N: <what>, at column C"), which scores NaN; so does a value or a
 * quadratic product that overflows a float (VW would sum an infinity).
 */
#include "transform/vw.h"
#include "batch/batch.h"
#include "parse/parse.h"
#include "parse/textnum.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- VW's parseFloat ---------------------------------------------------------- */

static float pow10_pos[39], pow10_neg[38];
static pthread_once_t vw_once = PTHREAD_ONCE_INIT;

static void vw_init_tables(void)
{
    /* fast_pow10.h: 10^k by repeated float multiplication, 10^-k by repeated
     * float division (FLT_MAX_10_EXP = 38, FLT_MIN_10_EXP = -37) */
    volatile float p = 1.0f;
    for (int k = 0; k <= 38; k++) { pow10_pos[k] = p; p = p * 10.0f; }
    p = 1.0f;
    for (int k = 0; k <= 37; k++) { pow10_neg[k] = p; p = p / 10.0f; }
}

static inline float vw_fast_pow10(int8_t e)
{
    if (e > 38) return INFINITY;
    if (e < -37) return 0.0f;
    return e >= 0 ? pow10_pos[e] : pow10_neg[-e];
}

enum { VAL_NUMBER = 0, VAL_STRING = 1, VAL_JUNK = 2 };

/* The value token s[0..n) (n > 0, no blanks in it), followed in the line by
 * `next` ('|' or 0 for a blank or the line end). VAL_NUMBER with *out as VW
 * computes it; VAL_STRING when strtof reads nothing (VW then hashes the
 * text); VAL_JUNK when a number is followed by other bytes. */
static int vw_value(const char *s, size_t n, int next, float *out)
{
    const char *p = s, *e = s + n;
    int sign = 1;
    if (p < e && *p == '-') { sign = -1; p++; }
    float acc = 0;
    while (p < e && (unsigned)(*p - '0') <= 9) { acc = acc * 10.0f + (float)*p; acc = acc - 48.0f; p++; }
    int num_dec = 0;
    if (p < e && *p == '.') {
        p++;
        while (p < e && (unsigned)(*p - '0') <= 9) {
            if (num_dec < 35) { acc = acc * 10.0f + (float)(*p - '0'); num_dec++; }
            p++;
        }
    }
    int exp_acc = 0, ok = 1;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int es = 1, nd = 0;
        if (p < e && *p == '-') { es = -1; p++; }
        while (p < e && (unsigned)(*p - '0') <= 9) {
            if (++nd > 9) ok = 0;
            else exp_acc = exp_acc * 10 + (*p - '0');
            p++;
        }
        exp_acc *= es;
    }
    if (p == e && next != '|' && ok) {
        *out = (float)sign * (acc * vw_fast_pow10((int8_t)(exp_acc - num_dec)));
        return VAL_NUMBER;
    }
    if (n > WISP_TEXTNUM_MAX_TOKEN) return VAL_JUNK;
    size_t used;
    float f = wisp__textnum_strtof(s, n, &used);
    if (used == 0) return VAL_STRING;
    if (used != n) return VAL_JUNK;
    *out = f;
    return VAL_NUMBER;
}

/* ---- the text parser -------------------------------------------------------- */

struct feat { uint32_t h; float v; unsigned char ns; };

struct scratch {
    struct feat *f; size_t fcap;
    uint32_t *pos; size_t pcap;          /* quadratic namespaces: positions grouped by namespace */
};

static int grow(void **p, size_t *cap, size_t need, size_t esize)
{
    if (need <= *cap) return WISP_OK;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    void *q = wisp__realloc(*p, nc * esize);
    if (!q) return wisp__fail(WISP_ENOMEM, "wisp_batch_parse_vw: out of memory for %zu features of scratch", nc);
    *p = q;
    *cap = nc;
    return WISP_OK;
}

static inline int is_blank(char c) { return c == ' ' || c == '\t'; }

/* byte classes for the scanning loops: bit 1 ends a name (blank, ':', '|'),
 * bit 2 ends a value (blank, '|'), bit 4 ends a string value (blank) */
static const unsigned char cls[256] = {
    [' '] = 7, ['\t'] = 7, [':'] = 1, ['|'] = 3,
};
#define END_NAME 1
#define END_VALUE 2
#define END_STRING 4

struct line_err { const char *at; char what[200]; };

#define BAD(pos, ...) do { err->at = (pos); snprintf(err->what, sizeof err->what, __VA_ARGS__); return -1; } while (0)

/* The label section s[0..e): VW's words, tag rule and simple label. */
static int parse_label(const char *s, const char *e, struct line_err *err)
{
    char ex[48];
    const char *tab = memchr(s, '\t', (size_t)(e - s));
    if (tab) s = tab + 1;
    const char *w[4];
    size_t wl[4];
    int nw = 0;
    const char *p = s, *last = NULL;
    size_t last_len = 0;
    while (p < e) {
        while (p < e && *p == ' ') p++;
        if (p == e) break;
        const char *t = p;
        while (p < e && *p != ' ') p++;
        if (nw < 4) { w[nw] = t; wl[nw] = (size_t)(p - t); }
        nw++;
        last = t; last_len = (size_t)(p - t);
    }
    /* the tag: a last word that starts with '\'' or touches the end of the section (the '|' or the line end) */
    if (nw > 0 && (last[0] == '\'' || last + last_len == e)) nw--;
    if (nw > 3) BAD(w[3], "%d label words before the first '|' (a simple label has at most 3: label, weight, "
                    "initial prediction)", nw);
    for (int i = 0; i < nw; i++) {
        float f;
        int k = vw_value(w[i], wl[i], 0, &f);
        if (k != VAL_NUMBER || isnan(f))
            BAD(w[i], "label word '%s' is not a number", wisp__excerpt(w[i], e, ex));
        if (i == 2 && f != 0.0f)
            BAD(w[i], "initial prediction '%s' in the label is not supported (wisp has no per-row offset)",
                wisp__excerpt(w[i], e, ex));
    }
    return 0;
}

/* Parse the namespaces of a line (p at its first '|') into sc->f. Returns the
 * feature count, or -1 with err set. */
static long parse_features(const wisp_vw *v, const char *p, const char *e, struct scratch *sc, struct line_err *err)
{
    char ex[48];
    size_t n = 0;
    while (p < e) {
        /* p at '|' */
        p++;
        unsigned char ns;
        uint32_t ch;
        float nsw = 1.0f;
        if (p == e || is_blank(*p) || *p == '|') {
            ns = ' ';
            ch = v->default_ns_hash;
        } else if (*p == ':') {
            BAD(p, "a namespace weight without a namespace name");
        } else {
            const char *name = p;
            while (p < e && !(cls[(unsigned char)*p] & END_NAME)) p++;
            ns = (unsigned char)name[0];
            ch = vw_hash(v, name, (size_t)(p - name), v->seed);
            if (p < e && *p == ':') {
                p++;
                const char *vs = p;
                while (p < e && !(cls[(unsigned char)*p] & END_VALUE)) p++;
                if (p == vs) BAD(vs, "missing namespace weight after ':'");
                int k = vw_value(vs, (size_t)(p - vs), p < e && *p == '|' ? '|' : 0, &nsw);
                if (k != VAL_NUMBER) BAD(vs, "bad namespace weight '%s'", wisp__excerpt(vs, e, ex));
                if (!isfinite(nsw)) BAD(vs, "namespace weight '%s' is not a finite number", wisp__excerpt(vs, e, ex));
            }
        }
        uint32_t anon = 0;
        while (p < e && *p != '|') {
            if (is_blank(*p)) { p++; continue; }
            const char *name = p;
            while (p < e && !(cls[(unsigned char)*p] & END_NAME)) p++;
            size_t nl = (size_t)(p - name);
            uint32_t h;
            float val = 1.0f;
            if (p < e && *p == ':') {
                p++;
                const char *vs = p;
                while (p < e && !(cls[(unsigned char)*p] & END_VALUE)) p++;
                if (p == vs) BAD(vs, "missing value after ':' in '%s'", wisp__excerpt(name, e, ex));
                float f;
                int k = vw_value(vs, (size_t)(p - vs), p < e && *p == '|' ? '|' : 0, &f);
                if (k == VAL_JUNK) BAD(vs, "bad value '%s'", wisp__excerpt(vs, e, ex));
                if (k == VAL_STRING) {
                    /* VW hashes the string value; it runs to the next blank, '|' included */
                    while (p < e && !(cls[(unsigned char)*p] & END_STRING)) p++;
                    if (nl == 0) BAD(name, "a string value without a feature name");
                    h = vw_hash(v, vs, (size_t)(p - vs), vw_hash(v, name, nl, ch));
                    val = 1.0f;
                } else {
                    if (!isfinite(f)) BAD(vs, "value '%s' is not a finite number", wisp__excerpt(vs, e, ex));
                    val = nsw * f;
                    if (!isfinite(val)) BAD(vs, "value '%s' times the namespace weight overflows a float",
                                            wisp__excerpt(vs, e, ex));
                    h = nl ? vw_hash(v, name, nl, ch) : ch + anon++;
                }
            } else {
                val = nsw;
                h = vw_hash(v, name, nl, ch);
            }
            if (val == 0.0f || v->drop[ns]) continue;      /* VW drops 0-valued features, and --ignore'd namespaces */
            if (n >= WISP_MAX_ROW_FEATURES) BAD(name, "more than WISP_MAX_ROW_FEATURES (%u) features",
                                                WISP_MAX_ROW_FEATURES);
            if (n >= sc->fcap && grow((void **)&sc->f, &sc->fcap, n + 1, sizeof *sc->f) != WISP_OK) {
                err->at = NULL;
                return -2;
            }
            sc->f[n].h = h;
            sc->f[n].v = val;
            sc->f[n].ns = ns;
            n++;
        }
    }
    return (long)n;
}

static inline void emit(uint32_t id, float val, uint32_t *vid, float *vv, size_t *nv, uint32_t *bid, size_t *nb)
{
    if (val == 1.0f) bid[(*nb)++] = id;
    else { vid[*nv] = id; vv[*nv] = val; (*nv)++; }
}

/* One line s[0..e) (no '\n', '\r' stripped): append its row. Returns
 * WISP_OK, or a status (ENOMEM, ELIMIT); *bad set with err for a bad line. */
static int parse_line(const wisp_vw *v, wisp_batch *b, const char *s, const char *e, struct scratch *sc,
                      int *bad, struct line_err *err)
{
    *bad = 0;
    if (memchr(s, '\r', (size_t)(e - s))) {
        err->at = (const char *)memchr(s, '\r', (size_t)(e - s));
        snprintf(err->what, sizeof err->what, "a carriage return inside the line");
        *bad = 1;
        return WISP_OK;
    }
    const char *bar = memchr(s, '|', (size_t)(e - s));
    if (parse_label(s, bar ? bar : e, err) < 0) { *bad = 1; return WISP_OK; }
    long nf = 0;
    if (bar) {
        nf = parse_features(v, bar, e, sc, err);
        if (nf == -2) return WISP_ENOMEM;
        if (nf < 0) { *bad = 1; return WISP_OK; }
    }
    /* how many features in all: linear, quadratic, constant */
    size_t nlin = (size_t)nf, nq = 0, cnt[256], start[256], fill[256];
    if (v->nqns) {
        for (int k = 0; k < v->nqns; k++) cnt[v->qns[k]] = 0;
        for (size_t i = 0; i < nlin; i++)
            if (v->needq[sc->f[i].ns]) cnt[sc->f[i].ns]++;
        size_t o = 0;
        for (int k = 0; k < v->nqns; k++) { unsigned char c = v->qns[k]; start[c] = fill[c] = o; o += cnt[c]; }
        for (int i = 0; i < v->npairs && nq <= WISP_MAX_ROW_FEATURES; i++) {
            size_t ca = cnt[v->pairs[i][0]], cb = cnt[v->pairs[i][1]];
            nq += v->pairs[i][0] == v->pairs[i][1] ? ca * (ca + 1) / 2 : ca * cb;
        }
        if (o && grow((void **)&sc->pos, &sc->pcap, o, sizeof *sc->pos) != WISP_OK) return WISP_ENOMEM;
    }
    size_t total = nlin + nq + (v->noconstant ? 0 : 1);
    if (total > WISP_MAX_ROW_FEATURES) {
        err->at = bar ? bar : s;
        snprintf(err->what, sizeof err->what, "%zu features with the interactions, more than "
                 "WISP_MAX_ROW_FEATURES (%u)", total, WISP_MAX_ROW_FEATURES);
        *bad = 1;
        return WISP_OK;
    }
    if (total > WISP_MAX_NNZ - b->nnz)
        return wisp__fail(WISP_ELIMIT, "the batch would hold more than WISP_MAX_NNZ (%u) features", WISP_MAX_NNZ);
    uint32_t *vid, *bid;
    float *vv;
    int st = wisp__batch_reserve_line(b, total, &vid, &vv, &bid);
    if (st != WISP_OK) return st;
    size_t nv = 0, nb = 0;
    int overflow = 0;
    const uint32_t mask = v->mask;
    if (v->any_nolinear) {
        for (size_t i = 0; i < nlin; i++)
            if (!v->nolinear[sc->f[i].ns]) emit(sc->f[i].h & mask, sc->f[i].v, vid, vv, &nv, bid, &nb);
    } else {
        for (size_t i = 0; i < nlin; i++) emit(sc->f[i].h & mask, sc->f[i].v, vid, vv, &nv, bid, &nb);
    }
    if (nq) {
        /* the interacting namespaces' features, grouped by namespace, in line order */
        for (size_t i = 0; i < nlin; i++)
            if (v->needq[sc->f[i].ns]) sc->pos[fill[sc->f[i].ns]++] = (uint32_t)i;
        for (int q = 0; q < v->npairs; q++) {
            unsigned char a = v->pairs[q][0], c = v->pairs[q][1];
            for (size_t i = start[a]; i < fill[a]; i++) {
                const struct feat *f1 = &sc->f[sc->pos[i]];
                const uint32_t half = VW_FNV_PRIME * f1->h;
                const float v1 = f1->v;
                for (size_t j = a == c ? i : start[c]; j < fill[c]; j++) {
                    const struct feat *f2 = &sc->f[sc->pos[j]];
                    const float x = v1 * f2->v;
                    overflow |= isinf(x);
                    emit((half ^ f2->h) & mask, x, vid, vv, &nv, bid, &nb);
                }
            }
        }
        if (overflow) {                 /* nothing committed: the row becomes a bad row */
            err->at = bar;
            snprintf(err->what, sizeof err->what, "a quadratic feature's value (a product of two values) "
                     "overflows a float");
            *bad = 1;
            return WISP_OK;
        }
    }
    if (!v->noconstant) bid[nb++] = VW_CONSTANT & mask;
    return wisp__batch_commit_line(b, nv, nb);
}

/* A VW line's row starts after a UTF-8 byte order mark, if any; a blank line makes none. */
static const char *vw_first(const char *s, const char *e)
{
    if (e - s >= 3 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
        s += 3;                                  /* VW skips a UTF-8 BOM at a line's start */
    const char *p = s;
    while (p < e && is_blank(*p)) p++;
    return p == e ? NULL : s;                    /* blank: no row */
}

struct vw_ctx { const wisp_vw *v; struct scratch sc; };

/* The row of line number `line` (s its start, its text at p..e). */
static int vw_row(void *vctx, wisp_batch *b, const char *s, const char *p, const char *e, const char *bufend,
                  uint64_t line, int *bad, char *msg, size_t msg_len)
{
    struct vw_ctx *c = vctx;
    struct line_err err;
    int st = parse_line(c->v, b, p, e, &c->sc, bad, &err);
    if (st != WISP_OK) return wisp__fail_context(st, "line %llu", (unsigned long long)line);
    if (*bad)
        snprintf(msg, msg_len, "line %llu: %s, at column %zu", (unsigned long long)line, err.what,
                 (size_t)(err.at - s) + 1);
    return WISP_OK;
}

int wisp_batch_parse_vw(wisp_batch *b, const wisp_vw *v, const char *text, size_t len, int final,
                        size_t max_rows, uint64_t *line_no, size_t *consumed)
{
    static const char fn[] = "wisp_batch_parse_vw";
    if (consumed) *consumed = 0;
    if (!b) return wisp__fail(WISP_EINVAL, "%s: batch is NULL", fn);
    if (!v) return wisp__fail(WISP_EINVAL, "%s: options (wisp_vw) are NULL", fn);
    if (b->wrapped) return wisp__fail(WISP_ESTATE, "%s: the batch wraps caller arrays and cannot grow", fn);
    if (!text && len) return wisp__fail(WISP_EINVAL, "%s: text is NULL", fn);
    pthread_once(&vw_once, vw_init_tables);
    struct vw_ctx c = { v, {0} };
    const wisp__text_rows rows = { vw_first, vw_row, &c };
    int st = wisp__parse_text_rows(b, text, len, final, max_rows, line_no, consumed, &rows);
    wisp__free(c.sc.f);
    wisp__free(c.sc.pos);
    return st;
}
