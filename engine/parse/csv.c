/* csv.c — the delimited-text reader of raw batches: CSV (RFC 4180) and TSV
 * (the Criteo layout), the schema that maps fields to inputs, and the line
 * loop the JSON-lines reader (engine/parse/jsonl.c) shares.
 *
 * Delimited lines. A schema maps field positions to inputs ("criteo": label,
 * I1..I13, C1..C26; a header line; or a list of names). One line is one row
 * (blank lines make none); every dense input must be a field (a sparse one
 * may be absent: it has no values then); fields are split on the delimiter; with ',' a
 * field may be double-quoted ("a,b" and "" for a quote inside), and CSV is
 * RFC 4180: a quoted field may hold newlines, so a record may span lines
 * (wisp__csv_record_end finds its end; it is reported at its first line and
 * the line count goes on past its other lines); a quote elsewhere than at a
 * field's start is a literal byte. CRLF line ends; a UTF-8 byte order mark
 * (Excel's "CSV UTF-8", pandas' utf-8-sig) at the start of a line (of a
 * record) is skipped, in every format here: at the input's start, and where
 * such files were concatenated, wherever a reader cuts the text. An empty field is a missing value, quoted
 * or not (Spark's CSV writer: null as an empty field, "" as a quoted empty
 * one; pandas: NaN as an empty field). A line with another number of
 * fields than the schema is a bad row, as is a field that does not parse
 * as its input's type. Strings are taken byte for byte (TensorFlow hashes bytes; no UTF-8
 * check). Numbers follow decode_csv (absl::SimpleAtof / SimpleAtoi):
 * surrounding spaces allowed, float32 fields rounded once, directly from
 * the decimal to float32 ("nan", "inf", "infinity" accepted, 1e39 is inf;
 * the column decides what they mean: the values rule in jsonl.c), int64 fields
 * are [+-]digits within range.
 *
 * Speed: memchr finds line ends and delimiters; a per-call field plan
 * handles the common fields (small integers by SWAR, float32 by
 * wisp__textnum_f32: Clinger's fast path for float32, strtof otherwise;
 * engine/parse/textnum.c).
 */
#include "batch/raw.h"
#include "parse/parse.h"
#include "parse/rawtext.h"
#include "parse/textnum.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emmintrin.h>

/* ---- the schema ------------------------------------------------------------------ */

/* The text of a field for messages: at most 40 bytes, unprintable bytes as '?'. */
const char *wisp__text_excerpt(const char *s, size_t len, char *buf)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n < 40; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[n++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (len > 40) { memcpy(buf + n, "...", 3); n += 3; }
    buf[n] = '\0';
    return buf;
}

/* Map the names (split by sep) to inputs. */
static int set_fields(wisp_raw *r, const char *names, size_t len, char sep, const char *what)
{
    const wisp_columns *c = r->cols;
    size_t n = 1;
    for (size_t i = 0; i < len; i++) n += names[i] == sep;
    if (n > WISP_MAX_COLUMNS) return wisp__fail(WISP_ELIMIT, "%s: %zu fields, more than %u", what, n, WISP_MAX_COLUMNS);
    int32_t *map = wisp__malloc(n * sizeof *map);
    bool *seen = wisp__calloc(c->ninputs ? c->ninputs : 1, sizeof *seen);
    if (!map || !seen) {
        wisp__free(map);
        wisp__free(seen);
        return wisp__fail(WISP_ENOMEM, "%s: out of memory", what);
    }
    const char *p = names, *e = names + len;
    for (size_t f = 0; f < n; f++) {
        const char *q = memchr(p, sep, (size_t)(e - p));
        if (!q) q = e;
        const char *s = p;
        size_t l = (size_t)(q - p);
        wisp__textnum_trim(&s, &l);
        if (l >= 2 && s[0] == '"' && s[l - 1] == '"') { s++; l -= 2; }
        long in = l ? wisp__columns_find_input(c, s, l) : -1;
        if (in >= 0 && seen[in]) {
            wisp__free(map);
            wisp__free(seen);
            return wisp__fail(WISP_EINVAL, "%s: input '%s' names two fields", what, c->inputs[in].name);
        }
        if (in >= 0) seen[in] = true;
        map[f] = (int32_t)in;
        p = q + 1;
    }
    for (size_t i = 0; i < c->ninputs; i++)
        if (!seen[i] && !c->inputs[i].sparse) {      /* a sparse input may be absent: no values */
            int st = wisp__fail(WISP_EINVAL, "%s: the fields do not include input '%s' of the columns", what, c->inputs[i].name);
            wisp__free(map);
            wisp__free(seen);
            return st;
        }
    wisp__free(seen);
    wisp__free(r->field_input);
    r->field_input = map;
    r->nfields = n;
    return WISP_OK;
}

int wisp_raw_set_schema(wisp_raw *r, const char *schema, int delim)
{
    if (!r || !schema) return wisp__fail(WISP_EINVAL, "wisp_raw_set_schema: %s is NULL", !r ? "raw" : "schema");
    if (delim != '\t' && delim != ',')
        return wisp__fail(WISP_EINVAL, "wisp_raw_set_schema: the delimiter must be '\\t' or ',' (got %d)", delim);
    if (!strcmp(schema, "header")) {
        wisp__free(r->field_input);
        r->field_input = NULL;
        r->nfields = 0;
        r->want_header = true;
        r->delim = delim;
        return WISP_OK;
    }
    int st;
    if (!strcmp(schema, "criteo")) {
        char names[512];
        size_t n = (size_t)snprintf(names, sizeof names, "label");
        for (int i = 1; i <= 13; i++) n += (size_t)snprintf(names + n, sizeof names - n, ",I%d", i);
        for (int i = 1; i <= 26; i++) n += (size_t)snprintf(names + n, sizeof names - n, ",C%d", i);
        st = set_fields(r, names, n, ',', "schema 'criteo'");
    } else {
        st = set_fields(r, schema, strlen(schema), ',', "schema");
    }
    if (st) return st;
    r->want_header = false;
    r->delim = delim;
    return WISP_OK;
}

/* ---- delimited lines -------------------------------------------------------------- */

/* The first `c` in [p, e), or e; 16 bytes at a time while 16 are readable before bufend. */
static inline const char *find_byte(const char *p, const char *e, const char *bufend, char c)
{
    const __m128i needle = _mm_set1_epi8(c);
    while (bufend - p >= 16) {
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)p), needle));
        if (m) {
            const char *q = p + __builtin_ctz(m);
            return q < e ? q : e;
        }
        if (e - p <= 16) return e;
        p += 16;
    }
    while (p < e && *p != c) p++;
    return p;
}

/* Convert one field to its input's type and append it, or reject the row.
 * Room was reserved for the line (wisp__raw_reserve_line); `bufend` bounds
 * word-sized over-reads of the source. */
static inline __attribute__((always_inline)) void put_field(wisp_raw *r, size_t f, int32_t in, const char *s, size_t len,
                                                           const char *bufend)
{
    const struct wisp_input *inp = &r->cols->inputs[in];
    struct wisp_raw_input *ri = &r->in[in];
    char ex[48];
    switch (inp->dtype) {
    case WISP_INPUT_STRING: {
        if (WISP_UNLIKELY(len > WISP_MAX_STRING_BYTES)) {
            wisp__raw_reject(r, "field %zu (%s): a string of %zu bytes, more than WISP_MAX_STRING_BYTES (%u)",
                             f + 1, inp->name, len, WISP_MAX_STRING_BYTES);
            return;
        }
        char *dst = ri->bytes + ri->nbytes;
        if (len <= 16 && bufend - s >= 16) {             /* two word copies; 16 bytes of slack were reserved */
            uint64_t w0, w1;
            memcpy(&w0, s, 8);
            memcpy(&w1, s + 8, 8);
            memcpy(dst, &w0, 8);
            memcpy(dst + 8, &w1, 8);
        } else {
            memcpy(dst, s, len);
        }
        ri->nbytes += len;
        ri->str_off[++ri->n] = (uint32_t)ri->nbytes;
        return;
    }
    case WISP_INPUT_FLOAT32: {
        float v;
        /* the common field: a small integer, exact in float32 */
        if (len <= 7) {
            const char *d = s;
            size_t nd = len;
            bool neg = *d == '-';
            if (neg) { d++; nd--; }
            uint32_t iv = 0;
            size_t i = 0;
            for (; i < nd; i++) {
                unsigned dg = (unsigned)((unsigned char)d[i] - '0');
                if (dg > 9) break;
                iv = iv * 10 + dg;
            }
            if (i == nd && nd > 0) {
                v = (float)iv;
                ((float *)ri->vals)[ri->n++] = neg ? -v : v;
                return;
            }
        }
        if (WISP_UNLIKELY(wisp__textnum_f32(s, len, 1, &v))) {
            wisp__raw_reject(r, "field %zu (%s): '%s' is not a number", f + 1, inp->name, wisp__text_excerpt(s, len, ex));
            return;
        }
        ((float *)ri->vals)[ri->n++] = v;
        return;
    }
    default: {
        int64_t v;
        int e = wisp__textnum_i64(s, len, &v);
        if (WISP_UNLIKELY(e)) {
            wisp__raw_reject(r, "field %zu (%s): '%s' is %s", f + 1, inp->name, wisp__text_excerpt(s, len, ex),
                             e == -2 ? "out of the int64 range" : "not an integer");
            return;
        }
        ((int64_t *)ri->vals)[ri->n++] = v;
        return;
    }
    }
}

/* A quoted CSV field at p (after the opening quote), unescaped into r->qbuf.
 * Returns the position after the closing quote, or NULL if unterminated. */
static const char *unquote(wisp_raw *r, const char *p, const char *e, size_t *qlen, int *st)
{
    size_t need = (size_t)(e - p);
    if (need > r->qbuf_cap) {
        char *nb = wisp__realloc(r->qbuf, need);
        if (!nb) { *st = wisp__fail(WISP_ENOMEM, "csv: out of memory for a quoted field of %zu bytes", need); return NULL; }
        r->qbuf = nb;
        r->qbuf_cap = need;
    }
    size_t n = 0;
    while (p < e) {
        if (*p == '"') {
            if (p + 1 < e && p[1] == '"') { r->qbuf[n++] = '"'; p += 2; continue; }
            *qlen = n;
            return p + 1;
        }
        r->qbuf[n++] = *p++;
    }
    return NULL;
}

/* An empty field: a dense input takes its default (inline: room was
 * reserved for it), a sparse one gets no value. */
static inline __attribute__((always_inline)) void put_missing(wisp_raw *r, int32_t in)
{
    const struct wisp_input *inp = &r->cols->inputs[in];
    if (inp->sparse) return;
    if (WISP_UNLIKELY(!inp->has_default)) {
        wisp__raw_reject(r, "input '%s' is missing and has no default", inp->name);
        return;
    }
    struct wisp_raw_input *ri = &r->in[in];
    switch (inp->dtype) {
    case WISP_INPUT_STRING:
        memcpy(ri->bytes + ri->nbytes, inp->def_s, inp->def_len);
        ri->nbytes += inp->def_len;
        ri->str_off[++ri->n] = (uint32_t)ri->nbytes;
        return;
    case WISP_INPUT_FLOAT32: ((float *)ri->vals)[ri->n++] = inp->def_f; return;
    default: ((int64_t *)ri->vals)[ri->n++] = inp->def_i; return;
    }
}

static inline __attribute__((always_inline)) void put(wisp_raw *r, size_t f, const char *s, size_t len,
                                                     const char *src_end)
{
    if (f >= r->nfields) return;
    int32_t in = r->field_input[f];
    if (in < 0) return;
    if (len) put_field(r, f, in, s, len, src_end);
    else put_missing(r, in);
}

/* Finish a parsed line: a good row is committed directly, a bad one goes
 * through wisp_raw_row_end (placeholders, the bad-row list). */
static inline int finish_line(wisp_raw *r, size_t f)
{
    if (f != r->nfields && !r->open_bad) wisp__raw_reject(r, "%zu fields, the schema has %zu", f, r->nfields);
    if (WISP_UNLIKELY(r->open_bad)) return wisp_raw_row_end(r);
    wisp__raw_commit_row(r);
    return WISP_OK;
}

/* The fields' plan for one wisp_raw_parse_tsv call: per field, what to do
 * with it and where it goes, so the common fields need no lookups. */
enum { FP_SKIP = 0, FP_STRING, FP_F32, FP_I64 };
struct fplan {
    uint8_t kind;
    uint8_t miss;                        /* an empty field: 0 through put_missing, 1 an empty string, 2 def_f */
    int32_t in;
    float def_f;
    struct wisp_raw_input *ri;
};
#define PLAN_MAX 128
typedef struct {
    const int32_t *fi; size_t nf;        /* the field map the plan was made for */
    bool ok;                             /* made (nfields <= PLAN_MAX) */
    struct fplan f[PLAN_MAX];
} tsv_ctx;

/* spec/c/test_parse_fast.c turns the plan off to compare it with put() (rawtext.h). */
static int plan_on = 1;
int wisp__csv_plan(int on)
{
    return __atomic_exchange_n(&plan_on, on, __ATOMIC_RELAXED);
}

static void make_plan(const wisp_raw *r, tsv_ctx *x)
{
    x->fi = r->field_input;
    x->nf = r->nfields;
    x->ok = r->nfields <= PLAN_MAX && __atomic_load_n(&plan_on, __ATOMIC_RELAXED);
    if (!x->ok) return;
    for (size_t f = 0; f < r->nfields; f++) {
        int32_t in = r->field_input[f];
        x->f[f].in = in;
        x->f[f].ri = in >= 0 ? &r->in[in] : NULL;
        int dt = in >= 0 ? r->cols->inputs[in].dtype : -1;
        x->f[f].kind = in < 0 ? FP_SKIP : dt == WISP_INPUT_STRING ? FP_STRING : dt == WISP_INPUT_FLOAT32 ? FP_F32 : FP_I64;
        x->f[f].miss = 0;
        x->f[f].def_f = 0;
        if (in >= 0) {
            const struct wisp_input *inp = &r->cols->inputs[in];
            if (!inp->sparse && inp->has_default && dt == WISP_INPUT_STRING && inp->def_len == 0) x->f[f].miss = 1;
            if (!inp->sparse && inp->has_default && dt == WISP_INPUT_FLOAT32) { x->f[f].miss = 2; x->f[f].def_f = inp->def_f; }
        }
    }
}

/* [-]digits, at most 8 digits, 8 bytes readable at s + (sign): the value as
 * strtof gives it in *v (the integer is exact below 10^8, so one rounding;
 * "-0" is -0.0f); false when the field is anything else. */
static inline __attribute__((always_inline)) bool small_int(const char *s, size_t len, float *v)
{
    bool neg = *s == '-';
    s += neg;
    len -= neg;
    if (len - 1 >= 8) return false;                     /* len 0, or more than 8 digits */
    uint64_t d;
    if (wisp__textnum_swar8(s, &d) != len) return false; /* a non-digit among the first len */
    float f = (float)(uint32_t)d;
    *v = neg ? -f : f;
    return true;
}

/* One field through the plan (room for the line was reserved). */
static inline __attribute__((always_inline)) void put_planned(wisp_raw *r, const tsv_ctx *x, size_t f, const char *s,
                                                             size_t len, const char *bufend)
{
    if (WISP_UNLIKELY(f >= x->nf)) return;
    const struct fplan *pl = &x->f[f];
    if (pl->kind == FP_SKIP) return;
    struct wisp_raw_input *ri = pl->ri;
    if (WISP_UNLIKELY(len == 0)) {                       /* missing: the input's default, as put_missing */
        if (pl->miss == 1) ri->str_off[++ri->n] = (uint32_t)ri->nbytes;
        else if (pl->miss == 2) ((float *)ri->vals)[ri->n++] = pl->def_f;
        else put_missing(r, pl->in);
        return;
    }
    if (pl->kind == FP_STRING && WISP_LIKELY(len <= 16 && bufend - s >= 16)) {
        size_t nb = ri->nbytes, n = ri->n;
        uint64_t w0, w1;                                 /* two word copies; 16 bytes of slack were reserved */
        memcpy(&w0, s, 8);
        memcpy(&w1, s + 8, 8);
        char *dst = ri->bytes + nb;
        memcpy(dst, &w0, 8);
        memcpy(dst + 8, &w1, 8);
        ri->nbytes = nb + len;
        ri->str_off[n + 1] = (uint32_t)(nb + len);
        ri->n = n + 1;
        return;
    }
    if (pl->kind == FP_F32 && WISP_LIKELY(bufend - s >= 9)) {
        float fv;
        if (small_int(s, len, &fv)) {
            ((float *)ri->vals)[ri->n++] = fv;
            return;
        }
    }
    put_field(r, f, pl->in, s, len, bufend);
}

/* One tab-separated line [p, e): the tabs of 64 bytes at a time as a bit mask. */
static int parse_tab_line(wisp_raw *r, const tsv_ctx *x, const char *p, const char *e, const char *bufend)
{
    const __m128i tab = _mm_set1_epi8('\t');
    const char *fs = p;                   /* the current field's start */
    size_t f = 0;
    const char *bp = p;
    while (bp < e) {
        uint64_t m;
        if (bufend - bp >= 64) {
            m = (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)bp), tab))
              | (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(bp + 16)), tab)) << 16
              | (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(bp + 32)), tab)) << 32
              | (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(bp + 48)), tab)) << 48;
        } else {
            m = 0;
            size_t n = (size_t)(e - bp) < 64 ? (size_t)(e - bp) : 64;
            for (size_t i = 0; i < n; i++) m |= (uint64_t)(bp[i] == '\t') << i;
        }
        if ((size_t)(e - bp) < 64) m &= ((uint64_t)1 << (e - bp)) - 1;    /* tabs past the line end are not ours */
        while (m) {
            const char *q = bp + __builtin_ctzll(m);
            m &= m - 1;
            if (x) put_planned(r, x, f, fs, (size_t)(q - fs), bufend);
            else put(r, f, fs, (size_t)(q - fs), bufend);
            if (WISP_UNLIKELY(r->open_bad)) return finish_line(r, f + 1);
            f++;
            fs = q + 1;
        }
        bp += 64;
    }
    if (x) put_planned(r, x, f, fs, (size_t)(e - fs), bufend);     /* the last field */
    else put(r, f, fs, (size_t)(e - fs), bufend);
    return finish_line(r, f + 1);
}

/* One line [p, e) (no '\n', '\r' stripped) into one row. */
static int parse_delimited_line(wisp_raw *r, const char *p, const char *e, const char *bufend, uint64_t line, void *ctx)
{
    int st = wisp__raw_row_begin(r, line);
    if (st) return st;
    if ((st = wisp__raw_reserve_line(r, (size_t)(e - p)))) { wisp__raw_abort(r); return st; }
    if (r->delim == '\t') {
        tsv_ctx *x = ctx;
        /* the first line, or a line after a header: a new plan */
        if (x && (x->fi != r->field_input || x->nf != r->nfields)) make_plan(r, x);
        return parse_tab_line(r, x && x->ok ? x : NULL, p, e, bufend);
    }
    size_t f = 0;
    for (;;) {
        const char *s = p, *q, *src_end = bufend;
        size_t len;
        if (p < e && *p == '"') {
            size_t qlen = 0;
            st = WISP_OK;
            q = unquote(r, p + 1, e, &qlen, &st);
            if (st) { wisp__raw_abort(r); return st; }
            if (!q || (q < e && *q != ',')) {
                wisp__raw_reject(r, "field %zu: %s", f + 1, !q ? "unterminated quoted field" : "text after a closing quote");
                break;
            }
            s = r->qbuf;
            len = qlen;
            src_end = r->qbuf;                            /* no over-reads of qbuf */
        } else {
            q = find_byte(p, e, bufend, ',');
            len = (size_t)(q - p);
        }
        put(r, f, s, len, src_end);
        if (WISP_UNLIKELY(r->open_bad)) break;
        f++;
        if (q >= e) break;
        p = q + 1;
    }
    return finish_line(r, f + (r->open_bad ? 1 : 0));
}


/* The end of a CSV record (RFC 4180): see parse/parse.h. Outside quotes the
 * scan jumps from quote to quote with memchr (newlines between them end
 * records); a quote opens a quoted field only at a field's start (after
 * ',' or at a record's start), elsewhere it is a literal byte, as the
 * field parser takes it; inside, "" is a quote and newlines are data. */
const char *wisp__csv_record_end(const char *p, const char *e, const char *want, uint64_t *inner)
{
    const char *s = p;
    uint64_t n_in = 0;
    while (s < e) {
        const char *q = memchr(s, '"', (size_t)(e - s));
        const char *lim = q ? q : e;
        for (const char *x = s; x < lim;) {              /* newlines before the quote end records */
            const char *nl = memchr(x, '\n', (size_t)(lim - x));
            if (!nl) break;
            if (nl >= want) {
                if (inner) *inner = n_in;
                return nl;
            }
            n_in = 0;                                    /* a record ended: count the next one's */
            x = nl + 1;
        }
        if (!q) break;
        if (!(q == p || q[-1] == ',' || q[-1] == '\n')) { s = q + 1; continue; }   /* a literal quote */
        const char *c = q + 1;                           /* a quoted field: to its closing quote */
        for (;;) {
            const char *z = memchr(c, '"', (size_t)(e - c));
            if (!z || z + 1 >= e) return NULL;           /* the text ends inside (or at the end of) the field */
            if (z[1] == '"') { c = z + 2; continue; }
            for (const char *x = q + 1; (x = memchr(x, '\n', (size_t)(z - x))) != NULL; x++) n_in++;
            s = z + 1;
            break;
        }
    }
    return NULL;
}

const char *wisp_raw_csv_record_end(const char *text, const char *end, const char *want)
{
    if (!text || !end || end < text) return NULL;
    if (!want || want < text) want = text;
    return wisp__csv_record_end(text, end, want, NULL);
}

/* A UTF-8 byte order mark (Excel's "CSV UTF-8", pandas' utf-8-sig) */
static const char utf8_bom[3] = { '\xEF', '\xBB', '\xBF' };

/* The line loop of both raw-text formats (rawtext.h). */
int wisp__raw_text_lines(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows, uint64_t *line_no,
                         size_t *consumed, wisp__line_fn fn, void *ctx, const char *fname, bool delimited)
{
    if (consumed) *consumed = 0;
    if (!r) return wisp__fail(WISP_EINVAL, "%s: raw is NULL", fname);
    if (!text && len) return wisp__fail(WISP_EINVAL, "%s: text is NULL", fname);
    if (r->open) return wisp__fail(WISP_ESTATE, "%s: a row is open (call wisp_raw_row_end)", fname);
    uint64_t line = line_no ? *line_no : 0;
    const char *p = text, *end = text + len;
    size_t added = 0;
    int st = WISP_OK;
    /* a byte order mark at the start of the input (no lines before) is not data */
    const uint64_t line0 = line;
    bool bom = false;
    /* CSV: a record may span lines (a quoted field holding newlines) */
    const bool csv = delimited && r->delim == ',';
    while (p < end && (max_rows == 0 || added < max_rows)) {
        /* a byte order mark at a line's start is not data: the input's start, or where
         * files were concatenated (cat a.csv b.csv); at every line start, so the answer
         * does not depend on where a reader cut the text (cli.c's pieces) */
        const char *rec = p;                                      /* the record's start, before a mark */
        if (end - p >= 3 && !memcmp(p, utf8_bom, 3)) { p += 3; bom = true; }
        uint64_t inner = 0;
        const char *nl = csv ? wisp__csv_record_end(p, end, p, &inner) : memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > WISP_MAX_LINE_BYTES) {
            /* an over-long line (CSV: record, or an open quote with no end in reach): a bad row,
             * skipped to the next line end, so an unclosed quote costs one row, not the rest */
            const char *pl = memchr(p, '\n', (size_t)(end - p));
            if (!pl && !final) { p = rec; break; }
            line++;
            if ((st = wisp_raw_row_begin(r, line))) break;
            wisp__raw_reject(r, "the line is longer than WISP_MAX_LINE_BYTES (%u)", WISP_MAX_LINE_BYTES);
            if ((st = wisp_raw_row_end(r))) break;
            added++;
            p = pl ? pl + 1 : end;
            continue;
        }
        /* an unfinished record consumes nothing, its mark included: the next call sees the
         * same record start (and skips the same one mark), wherever the text was cut */
        if (!nl && !final) { p = rec; break; }
        if (csv && !nl) {                                         /* final: the rest is one record */
            for (const char *x = p; (x = memchr(x, '\n', (size_t)(end - x))) != NULL; x++) inner++;
        }
        const char *e = le;
        if (e > p && e[-1] == '\r') e--;
        line++;
        if (e == p) { p = nl ? nl + 1 : end; continue; }          /* blank line */
        if (r->want_header && delimited) {
            st = set_fields(r, p, (size_t)(e - p), (char)r->delim, "header");
            if (st) {
                st = wisp__fail_context(WISP_EPARSE, "line %llu", (unsigned long long)line);
                line--;
                if (bom) { p = text; line = line0; }             /* a failed header consumes no byte but blank lines */
                break;
            }
            r->want_header = false;
            p = nl ? nl + 1 : end;
            continue;
        }
        st = fn(r, p, e, end, line, ctx);
        if (st) { line--; break; }
        added++;
        line += inner;                                            /* the record's other lines */
        p = nl ? nl + 1 : end;
    }
    if (line_no) *line_no = line;
    if (consumed) *consumed = (size_t)(p - text);
    return st;
}

int wisp_raw_parse_tsv(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows, uint64_t *line_no,
                       size_t *consumed)
{
    if (r && !r->delim) {
        if (consumed) *consumed = 0;
        return wisp__fail(WISP_ESTATE, "wisp_raw_parse_tsv: no schema (call wisp_raw_set_schema first)");
    }
    tsv_ctx x;
    x.fi = NULL;
    x.nf = 0;
    x.ok = false;
    return wisp__raw_text_lines(r, text, len, final, max_rows, line_no, consumed, parse_delimited_line, &x,
                                "wisp_raw_parse_tsv", true);
}
