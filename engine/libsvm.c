/* libsvm.c — the fast libsvm-format text parser behind wisp_batch_parse_libsvm. */
/*
 * Grammar of one line (fields separated by spaces and/or tabs, CRLF accepted):
 *     [label] feature feature ... [# comment]
 *     label    the first token when it has no ':'; must be a finite number; ignored
 *     feature  id ":" value   (valued)   or   id   (binary, value 1.0)
 *     id       decimal digits, up to 2^64-1 (ids >= 2^32 are stored as WISP_ID_NONE)
 *     value    [+-] (digits [. [digits]] | . digits) [(e|E) [+-] digits], finite as a float
 * Blank lines and lines whose first non-blank byte is '#' make no row.
 * A value that is exactly 1.0f is stored as a binary feature (it ships no
 * value and scores the same); each part keeps the order of the line, and a
 * row's valued features come before its binary ones.
 *
 * Values are (float)strtod(token) exactly: the common case (up to 19
 * significant digits, mantissa < 2^53, |exponent| <= 22) is Clinger's fast
 * path, one exact multiply or divide of two exact doubles, hence the
 * correctly rounded double; everything else goes to strtod on a NUL-terminated
 * copy of the token (the text itself is not NUL-terminated).
 *
 * Speed: memchr finds each line end; digits are read eight at a time from
 * one 8-byte load (SWAR: no per-digit branch, so no mispredicted loop exit
 * per token) where 8 bytes are readable, byte by byte near the end of the
 * text; "id:1" is recognised without a number parse; no scanf, no strtod in
 * the common case, no copies. A line's
 * features are written straight into the batch's arrays (binary ids into a
 * scratch array appended at the end of the line), after one capacity check
 * per line (a line of L bytes holds at most L/2 + 1 tokens).
 *
 * Bad lines become rows with no features, marked bad with
 * "line N: <what>, at column C" (C counts bytes from 1).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double pow10_exact[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22
};

static inline int is_blank(char c) { return c == ' ' || c == '\t'; }

enum { NUM_OK = 0, NUM_SYNTAX = 1, NUM_TOOLONG = 2 };

#define NUM_MAX_TOKEN 511

static const uint64_t pow10_u64[9] = { 1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000 };

/* The leading decimal digits of the 8 bytes at p (all readable): returns
 * how many (0..8) and their value in *val. Eight digits at once: no
 * per-digit branch, so no mispredicted loop exit per token. */
static inline __attribute__((always_inline)) unsigned swar_digits(const char *p, uint64_t *val)
{
    uint64_t w;
    memcpy(&w, p, 8);                                   /* little-endian: p[0] is the low byte */
    uint64_t lo = w - 0x3030303030303030ull;            /* digit bytes become 0..9 */
    uint64_t hi = w + 0x4646464646464646ull;            /* bytes above '9' get their top bit */
    uint64_t nondigit = (lo | hi) & 0x8080808080808080ull;
    unsigned n = nondigit ? (unsigned)__builtin_ctzll(nondigit) >> 3 : 8;
    if (n == 0) { *val = 0; return 0; }
    uint64_t d = lo << (64 - 8 * n);                    /* keep the n digits, leading zeros below */
    d = (d * 10 + (d >> 8)) & 0x00FF00FF00FF00FFull;
    d = (d * 100 + (d >> 16)) & 0x0000FFFF0000FFFFull;
    d = (d * 10000 + (d >> 32)) & 0xFFFFFFFFull;
    *val = d;
    return n;
}

/* Digits at *pp into *m (m = m * 10^k + digits, wrapping past 19 digits):
 * eight at a time while 8 bytes are readable before `bufend`, then byte by
 * byte up to e. Returns the number of digits. */
static inline __attribute__((always_inline)) size_t read_digits(const char **pp, const char *e, const char *bufend,
                                                               uint64_t *m)
{
    const char *p = *pp, *s = p;
    uint64_t v = *m, chunk;
    unsigned n = 8, d;
    while (n == 8 && bufend - p >= 8) {
        n = swar_digits(p, &chunk);
        v = v * pow10_u64[n] + chunk;
        p += n;
    }
    if (n == 8)
        while (p < e && (d = (unsigned char)*p - '0') <= 9) { v = v * 10 + d; p++; }
    *pp = p;
    *m = v;
    return (size_t)(p - s);
}

/* Parse a decimal number at *pp (not past e) into *out, exactly as strtod
 * would; *pp moves past it. NaN and infinity spellings are syntax errors.
 * Bytes up to bufend may be read (the digits stop at e: the byte there is
 * a line end or a blank, never a digit). */
static inline __attribute__((always_inline)) int parse_number(const char **pp, const char *e, const char *bufend,
                                                              double *out)
{
    const char *p = *pp, *start = p;
    int neg = 0;
    if (p < e && (*p == '-' || *p == '+')) { neg = *p == '-'; p++; }
    uint64_t m = 0;                 /* wraps past 19 digits; then strtod decides */
    unsigned d;
    size_t ndig = read_digits(&p, e, bufend, &m), nfrac = 0;
    if (p < e && *p == '.') {
        p++;
        nfrac = read_digits(&p, e, bufend, &m);
        ndig += nfrac;
    }
    if (WISP_UNLIKELY(ndig == 0)) return NUM_SYNTAX;
    long exp10 = -(long)nfrac;
    if (p < e && (*p | 0x20) == 'e') {
        const char *q = p + 1;
        int eneg = 0;
        if (q < e && (*q == '-' || *q == '+')) { eneg = *q == '-'; q++; }
        if (q >= e || (unsigned)((unsigned char)*q - '0') > 9) return NUM_SYNTAX;
        long ex = 0;
        while (q < e && (d = (unsigned char)*q - '0') <= 9) {
            if (ex < 100000) ex = ex * 10 + d;
            q++;
        }
        exp10 += eneg ? -ex : ex;
        p = q;
    }
    *pp = p;
    if (WISP_LIKELY(ndig <= 19)) {             /* m is exact */
        if (m == 0) { *out = neg ? -0.0 : 0.0; return NUM_OK; }
        if (WISP_LIKELY(m < (1ull << 53) && exp10 >= -22 && exp10 <= 22)) {
            double v = (double)m;
            v = exp10 < 0 ? v / pow10_exact[-exp10] : v * pow10_exact[exp10];
            *out = neg ? -v : v;
            return NUM_OK;
        }
    }
    size_t n = (size_t)(p - start);
    if (n > NUM_MAX_TOKEN) return NUM_TOOLONG;
    char buf[NUM_MAX_TOKEN + 1];
    memcpy(buf, start, n);
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    return NUM_OK;
}

static inline uint32_t id32(uint64_t id)
{
    return id > UINT32_MAX ? WISP_ID_NONE : (uint32_t)id;
}

/* The token at s (up to a blank or e) for a message: at most 40 bytes,
 * non-printable bytes as '?', "..." when cut. */
static const char *excerpt(const char *s, const char *e, char *buf)
{
    size_t n = 0;
    while (s < e && !is_blank(*s) && n < 40) {
        unsigned char c = (unsigned char)*s++;
        buf[n++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (s < e && !is_blank(*s)) { memcpy(buf + n, "...", 3); n += 3; }
    buf[n] = '\0';
    return buf;
}

static int nonfinite_word(const char *s, const char *e)
{
    if (s < e && (*s == '+' || *s == '-')) s++;
    if (e - s < 3) return 0;
    char w[4] = { (char)(s[0] | 0x20), (char)(s[1] | 0x20), (char)(s[2] | 0x20), 0 };
    return strcmp(w, "inf") == 0 || strcmp(w, "nan") == 0;
}

struct line_out {
    size_t nv, nb;
    const char *err_at;          /* where the problem is, for the column */
    char what[160];              /* the problem, without "line N:" */
};

enum { LINE_OK = 0, LINE_BAD = 1, LINE_LIMIT = 2 };

/* Parse the features of one line, p at its first non-blank byte (not '#'),
 * e at its end ('\r' stripped). At most `lim` features; `row_lim` says
 * whether lim is WISP_MAX_ROW_FEATURES (a bad line) or the batch's
 * remaining WISP_MAX_NNZ room (WISP_ELIMIT). */
static int parse_line(const char *p, const char *e, const char *bufend, size_t lim, int row_lim,
                      uint32_t *vid, float *vv, uint32_t *bid, struct line_out *o)
{
    char ex[48];
    size_t nv = 0, nb = 0;

    /* the label: a first token without ':' */
    const char *t = p;
    while (t < e && !is_blank(*t) && *t != ':') t++;
    if (t == e || *t != ':') {
        const char *q = p;
        double v;
        int r = parse_number(&q, t, bufend, &v);
        if (r != NUM_OK || q != t || !isfinite(v)) {
            o->err_at = p;
            snprintf(o->what, sizeof o->what, "bad label '%s' (expected a number)", excerpt(p, e, ex));
            return LINE_BAD;
        }
        p = t;
        while (p < e && is_blank(*p)) p++;
    }

    while (p < e) {
        if (*p == '#') break;
        const char *tok = p;
        if ((unsigned)((unsigned char)*p - '0') > 9) {
            o->err_at = tok;
            snprintf(o->what, sizeof o->what, "bad feature id '%s'", excerpt(tok, e, ex));
            return LINE_BAD;
        }
        uint64_t id = 0;
        read_digits(&p, e, bufend, &id);
        if (WISP_UNLIKELY(p - tok > 19)) {     /* 20+ digits: recount with overflow checks */
            const char *q = tok;
            id = 0;
            for (; q < p; q++)
                if (__builtin_mul_overflow(id, 10, &id) || __builtin_add_overflow(id, (uint64_t)(*q - '0'), &id)) {
                    o->err_at = tok;
                    snprintf(o->what, sizeof o->what, "feature id '%s' overflows 64 bits", excerpt(tok, p, ex));
                    return LINE_BAD;
                }
        }
        if (WISP_UNLIKELY(nv + nb == lim)) {
            o->err_at = tok;
            if (!row_lim) return LINE_LIMIT;
            snprintf(o->what, sizeof o->what, "more than WISP_MAX_ROW_FEATURES (%u) features", WISP_MAX_ROW_FEATURES);
            return LINE_BAD;
        }
        if (p == e || is_blank(*p)) {
            bid[nb++] = id32(id);
        } else if (*p == ':') {
            p++;
            if (p == e || is_blank(*p)) {
                o->err_at = p;
                snprintf(o->what, sizeof o->what, "missing value after ':' in '%s'", excerpt(tok, e, ex));
                return LINE_BAD;
            }
            if (*p == '1' && (p + 1 == e || is_blank(p[1]))) {   /* "id:1", the common binary form */
                bid[nb++] = id32(id);
                p++;
                while (p < e && is_blank(*p)) p++;
                continue;
            }
            const char *vs = p;
            double v;
            int r = parse_number(&p, e, bufend, &v);
            if (WISP_UNLIKELY(r != NUM_OK || (p < e && !is_blank(*p)))) {
                if (r == NUM_OK && *p == ':') {
                    o->err_at = p;
                    snprintf(o->what, sizeof o->what, "extra ':' in '%s' (expected id:value)", excerpt(tok, e, ex));
                } else if (nonfinite_word(vs, e)) {
                    o->err_at = vs;
                    snprintf(o->what, sizeof o->what, "value '%s' is not a finite number", excerpt(vs, e, ex));
                } else if (r == NUM_TOOLONG) {
                    o->err_at = vs;
                    snprintf(o->what, sizeof o->what, "value '%s' is longer than %d bytes", excerpt(vs, e, ex),
                             NUM_MAX_TOKEN);
                } else {
                    o->err_at = vs;
                    snprintf(o->what, sizeof o->what, "bad value '%s'", excerpt(vs, e, ex));
                }
                return LINE_BAD;
            }
            float f = (float)v;
            if (WISP_UNLIKELY(!isfinite(f))) {
                o->err_at = vs;
                snprintf(o->what, sizeof o->what, "value '%s' is not a finite float", excerpt(vs, e, ex));
                return LINE_BAD;
            }
            if (f == 1.0f) bid[nb++] = id32(id);
            else { vid[nv] = id32(id); vv[nv] = f; nv++; }
        } else {
            o->err_at = tok;
            snprintf(o->what, sizeof o->what, "bad feature id '%s'", excerpt(tok, e, ex));
            return LINE_BAD;
        }
        while (p < e && is_blank(*p)) p++;
    }
    o->nv = nv;
    o->nb = nb;
    return LINE_OK;
}

/* Append an empty row marked bad. On failure nothing changed. */
static int add_bad_row(wisp_batch *b, uint64_t line, const char *msg)
{
    uint32_t *ids, *scratch;
    float *vals;
    int st = wisp_batch__reserve_line(b, 0, &ids, &vals, &scratch);
    if (st == WISP_OK) st = wisp_batch__commit_line(b, 0, 0);
    if (st != WISP_OK) return st;
    st = wisp_batch_mark_bad(b, b->rows - 1, line, msg);
    if (st != WISP_OK) b->rows--;              /* the empty row goes again; counts are as before */
    return st;
}

int wisp_batch_parse_libsvm(wisp_batch *b, const char *text, size_t len, int final,
                            size_t max_rows, uint64_t *line_no, size_t *consumed)
{
    static const char fn[] = "wisp_batch_parse_libsvm";
    if (consumed) *consumed = 0;
    if (!b) return wisp_fail(WISP_EINVAL, "%s: batch is NULL", fn);
    if (b->wrapped) return wisp_fail(WISP_ESTATE, "%s: the batch wraps caller arrays and cannot grow", fn);
    if (!text && len) return wisp_fail(WISP_EINVAL, "%s: text is NULL", fn);

    uint64_t ln = line_no ? *line_no : 0;
    size_t pos = 0, added = 0;
    int st = WISP_OK;
    char msg[256];
    struct line_out o;

    while (pos < len && (max_rows == 0 || added < max_rows)) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        const char *e;
        size_t next;
        if (nl) { e = nl; next = (size_t)(nl - text) + 1; }
        else if (final) { e = text + len; next = len; }
        else {
            if (len - pos > WISP_MAX_LINE_BYTES)
                st = wisp_fail(WISP_ELIMIT, "line %llu: no end of line within WISP_MAX_LINE_BYTES (%u bytes)",
                               (unsigned long long)(ln + 1), WISP_MAX_LINE_BYTES);
            break;
        }
        uint64_t this_line = ln + 1;
        size_t L = (size_t)(e - s);
        int bad = 0;
        if (WISP_UNLIKELY(L > WISP_MAX_LINE_BYTES)) {
            if (b->rows >= WISP_MAX_ROWS) {
                st = wisp_fail(WISP_ELIMIT, "line %llu: the batch already holds WISP_MAX_ROWS (%u) rows",
                               (unsigned long long)this_line, WISP_MAX_ROWS);
                break;
            }
            snprintf(msg, sizeof msg, "line %llu: longer than WISP_MAX_LINE_BYTES (%u bytes), at column %u",
                     (unsigned long long)this_line, WISP_MAX_LINE_BYTES, WISP_MAX_LINE_BYTES + 1);
            bad = 1;
        } else {
            if (e > s && e[-1] == '\r') e--;
            const char *p = s;
            while (p < e && is_blank(*p)) p++;
            if (p == e || *p == '#') { ln = this_line; pos = next; continue; }   /* no row */
            if (b->rows >= WISP_MAX_ROWS) {
                st = wisp_fail(WISP_ELIMIT, "line %llu: the batch already holds WISP_MAX_ROWS (%u) rows",
                               (unsigned long long)this_line, WISP_MAX_ROWS);
                break;
            }
            size_t lim = WISP_MAX_ROW_FEATURES;
            int row_lim = 1;
            if (WISP_MAX_NNZ - b->nnz < lim) { lim = WISP_MAX_NNZ - b->nnz; row_lim = 0; }
            size_t nfeat = (size_t)(e - p) / 2 + 1;
            if (nfeat > lim) nfeat = lim;
            uint32_t *vid, *bid;
            float *vv;
            if ((st = wisp_batch__reserve_line(b, nfeat, &vid, &vv, &bid)) != WISP_OK) {
                wisp_fail_context(st, "line %llu", (unsigned long long)this_line);
                break;
            }
            int r = parse_line(p, e, text + len, lim, row_lim, vid, vv, bid, &o);
            if (r == LINE_OK) {
                if ((st = wisp_batch__commit_line(b, o.nv, o.nb)) != WISP_OK) {
                    wisp_fail_context(st, "line %llu", (unsigned long long)this_line);
                    break;
                }
            } else if (r == LINE_LIMIT) {
                st = wisp_fail(WISP_ELIMIT, "line %llu: the batch would hold more than WISP_MAX_NNZ (%u) features",
                               (unsigned long long)this_line, WISP_MAX_NNZ);
                break;
            } else {
                snprintf(msg, sizeof msg, "line %llu: %s, at column %zu", (unsigned long long)this_line,
                         o.what, (size_t)(o.err_at - s) + 1);
                bad = 1;
            }
        }
        if (bad && (st = add_bad_row(b, this_line, msg)) != WISP_OK) {
            wisp_fail_context(st, "line %llu", (unsigned long long)this_line);
            break;
        }
        ln = this_line;
        pos = next;
        added++;
    }
    if (line_no) *line_no = ln;
    if (consumed) *consumed = pos;
    return st;
}
