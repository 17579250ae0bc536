/* tsv.c — text readers into raw columns: delimited lines (the Criteo TSV layout, CSV) and JSON lines; number parsing as TensorFlow's decode_csv does it. */
/*
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
 * the column decides what they mean: see the values below), int64 fields
 * are [+-]digits within range.
 *
 * JSON lines. One object per line; keys are input names; null is missing;
 * a number for a float32 input is read as a double and rounded to float32
 * (what json.loads followed by numpy's float32 does); an int64 input needs
 * an integer literal in range; a string input needs a JSON string (valid
 * UTF-8, as JSON requires); an array gives a sparse input its values. An
 * unknown key, a wrong type or malformed JSON make the row bad.
 *
 * THE JSON DECISIONS, one list for every JSON reader (this one, and the
 * service's bodies in lua/wisp/nginx.lua, which must match it): each
 * refusal makes that row bad with a message naming the real type and value.
 *   - values: NaN, Infinity, -Infinity (json.dumps' defaults for non-finite
 *     floats; not JSON) are refused, naming the token. A number is read as
 *     TensorFlow reads it (json.loads, then numpy float32): 1e39 and
 *     3.4028236e38 become inf, as "nan"/"inf"/"1e39" do in a CSV/TSV field
 *     (decode_csv, absl::SimpleAtof). The values rule (batch.c, wisp.h)
 *     applies where a value meets a weight: a numeric column whose value is
 *     not a finite float32 makes the row bad (columns.c, naming the column
 *     and NaN/+inf/-inf); a bucketized column puts it in TensorFlow's
 *     bucket (NaN and +inf last, -inf first: spec/data/tf_golden.json), as
 *     it is a bucket id, not a value. FLT_MAX is kept, and values that
 *     underflow (1e-50 -> 0, subnormals) too. The service's "vals" (a
 *     value per weight: lua/wisp/nginx.lua) follow the values rule.
 *   - int64: an integer literal only, read exactly from the text (never
 *     through a double, so 2^53 + 1 stays exact), in [-2^63, 2^63);
 *     1.0, 1e3 and 1.5 for an int64 input are refused (not integer
 *     literals), as is a value beyond the range.
 *   - strings for numbers are refused: "input 'x': a string where float32
 *     is expected, got the string \"1\"" (no coercion); numbers for strings too.
 *   - true/false refused for every input type; null is a missing value.
 *   - nested arrays (and objects, and null inside an array) are refused;
 *     an array only for a sparse input.
 *   - leading zeros (01), a leading '+', '.5', '5.' are not JSON numbers:
 *     refused as invalid JSON; -0 is 0 for int64 and -0.0 for float32.
 *   - duplicate keys: a dense input given twice is refused ("takes one value
 *     per row"); a sparse input's values are appended.
 *   - \uXXXX escapes (json.dumps' ensure_ascii default) are decoded,
 *     surrogate pairs to one code point; a lone surrogate is refused.
 *
 * Speed: memchr finds line ends and delimiters; the common float32 field
 * (up to 7 significant digits, a small exponent) is one exact float
 * multiply or divide (Clinger's fast path for float32); everything else
 * goes through strtof on a NUL-terminated copy.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <emmintrin.h>

#define MAX_NUM_TOKEN 511

static const float pow10f_exact[11] = { 1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f };
static const double pow10_exact[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22
};

static inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

/* The decimal at s[0..len): sign, mantissa digits (up to 19 kept), decimal
 * exponent. Returns false when the text is not [+-](d+[.d*]|.d+)([eE][+-]d+)?. */
static bool scan_decimal(const char *s, size_t len, bool *neg, uint64_t *mant, int *ndig, long *exp10)
{
    const char *p = s, *e = s + len;
    *neg = false;
    if (p < e && (*p == '+' || *p == '-')) { *neg = *p == '-'; p++; }
    uint64_t m = 0;
    int nd = 0, nsig = 0;
    long ex = 0;
    bool any = false;
    while (p < e && *p >= '0' && *p <= '9') {
        any = true;
        if (nsig < 19) { if (m || *p != '0') { m = m * 10 + (uint64_t)(*p - '0'); nsig += m != 0; } }
        else ex++;
        nd++;
        p++;
    }
    if (p < e && *p == '.') {
        p++;
        while (p < e && *p >= '0' && *p <= '9') {
            any = true;
            if (nsig < 19) { if (m || *p != '0') { m = m * 10 + (uint64_t)(*p - '0'); nsig += m != 0; } ex--; }
            p++;
        }
    }
    if (!any) return false;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        bool eneg = false;
        if (p < e && (*p == '+' || *p == '-')) { eneg = *p == '-'; p++; }
        if (p >= e || *p < '0' || *p > '9') return false;
        long x = 0;
        while (p < e && *p >= '0' && *p <= '9') { if (x < 100000) x = x * 10 + (*p - '0'); p++; }
        ex += eneg ? -x : x;
    }
    if (p != e) return false;
    *mant = m;
    *ndig = nsig;
    *exp10 = ex;
    (void)nd;
    return true;
}

static bool word_eq(const char *s, size_t len, const char *w)
{
    size_t n = strlen(w);
    if (len != n) return false;
    for (size_t i = 0; i < n; i++)
        if ((s[i] | 0x20) != w[i]) return false;
    return true;
}

static void trim(const char **s, size_t *len)
{
    const char *p = *s, *e = p + *len;
    while (p < e && is_space(*p)) p++;
    while (e > p && is_space(e[-1])) e--;
    *s = p;
    *len = (size_t)(e - p);
}

int wisp_parse_f32(const char *s, size_t len, int words, float *out)
{
    trim(&s, &len);
    bool neg;
    uint64_t m;
    int nsig;
    long ex;
    if (!scan_decimal(s, len, &neg, &m, &nsig, &ex)) {
        if (!words) return -1;
        const char *w = s;
        size_t wl = len;
        bool wneg = false;
        if (wl && (*w == '+' || *w == '-')) { wneg = *w == '-'; w++; wl--; }
        if (word_eq(w, wl, "nan")) { *out = wneg ? -NAN : NAN; return 0; }
        if (word_eq(w, wl, "inf") || word_eq(w, wl, "infinity")) { *out = wneg ? -INFINITY : INFINITY; return 0; }
        return -1;
    }
    if (m == 0) { *out = neg ? -0.0f : 0.0f; return 0; }
    if (m < (1u << 24) && ex >= -10 && ex <= 10) {      /* exact operands, one correctly rounded op */
        float f = (float)m;
        f = ex < 0 ? f / pow10f_exact[-ex] : f * pow10f_exact[ex];
        *out = neg ? -f : f;
        return 0;
    }
    if (len > MAX_NUM_TOKEN) return -1;
    char buf[MAX_NUM_TOKEN + 1];
    memcpy(buf, s, len);
    buf[len] = '\0';
    *out = strtof(buf, NULL);
    return 0;
}

/* A JSON number (already validated) as a double, exactly as strtod. */
static double parse_f64(const char *s, size_t len)
{
    bool neg;
    uint64_t m;
    int nsig;
    long ex;
    if (scan_decimal(s, len, &neg, &m, &nsig, &ex)) {
        if (m == 0) return neg ? -0.0 : 0.0;
        if (m < (1ull << 53) && ex >= -22 && ex <= 22) {
            double d = (double)m;
            d = ex < 0 ? d / pow10_exact[-ex] : d * pow10_exact[ex];
            return neg ? -d : d;
        }
    }
    char buf[MAX_NUM_TOKEN + 1];
    if (len > MAX_NUM_TOKEN) len = MAX_NUM_TOKEN;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return strtod(buf, NULL);
}

int wisp_parse_i64(const char *s, size_t len, int64_t *out)
{
    trim(&s, &len);
    const char *p = s, *e = s + len;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-')) { neg = *p == '-'; p++; }
    if (p >= e) return -1;
    uint64_t v = 0;
    for (; p < e; p++) {
        unsigned d = (unsigned)((unsigned char)*p - '0');
        if (d > 9) return -1;
        if (v > (UINT64_MAX - d) / 10) { v = UINT64_MAX; continue; }
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return -2;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return -2;
        *out = (int64_t)v;
    }
    return 0;
}

/* ---- the schema ------------------------------------------------------------------ */

/* The text of a field for messages: at most 40 bytes, unprintable bytes as '?'. */
static const char *excerpt(const char *s, size_t len, char *buf)
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
    if (n > WISP_MAX_COLUMNS) return wisp_fail(WISP_ELIMIT, "%s: %zu fields, more than %u", what, n, WISP_MAX_COLUMNS);
    int32_t *map = wisp_malloc(n * sizeof *map);
    bool *seen = wisp_calloc(c->ninputs ? c->ninputs : 1, sizeof *seen);
    if (!map || !seen) {
        wisp_free(map);
        wisp_free(seen);
        return wisp_fail(WISP_ENOMEM, "%s: out of memory", what);
    }
    const char *p = names, *e = names + len;
    for (size_t f = 0; f < n; f++) {
        const char *q = memchr(p, sep, (size_t)(e - p));
        if (!q) q = e;
        const char *s = p;
        size_t l = (size_t)(q - p);
        trim(&s, &l);
        if (l >= 2 && s[0] == '"' && s[l - 1] == '"') { s++; l -= 2; }
        long in = l ? wisp_columns__find_input(c, s, l) : -1;
        if (in >= 0 && seen[in]) {
            wisp_free(map);
            wisp_free(seen);
            return wisp_fail(WISP_EINVAL, "%s: input '%s' names two fields", what, c->inputs[in].name);
        }
        if (in >= 0) seen[in] = true;
        map[f] = (int32_t)in;
        p = q + 1;
    }
    for (size_t i = 0; i < c->ninputs; i++)
        if (!seen[i] && !c->inputs[i].sparse) {      /* a sparse input may be absent: no values */
            int st = wisp_fail(WISP_EINVAL, "%s: the fields do not include input '%s' of the columns", what, c->inputs[i].name);
            wisp_free(map);
            wisp_free(seen);
            return st;
        }
    wisp_free(seen);
    wisp_free(r->field_input);
    r->field_input = map;
    r->nfields = n;
    return WISP_OK;
}

int wisp_raw_set_schema(wisp_raw *r, const char *schema, int delim)
{
    if (!r || !schema) return wisp_fail(WISP_EINVAL, "wisp_raw_set_schema: %s is NULL", !r ? "raw" : "schema");
    if (delim != '\t' && delim != ',')
        return wisp_fail(WISP_EINVAL, "wisp_raw_set_schema: the delimiter must be '\\t' or ',' (got %d)", delim);
    if (!strcmp(schema, "header")) {
        wisp_free(r->field_input);
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
 * Room was reserved for the line (wisp_raw__reserve_line); `bufend` bounds
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
            wisp_raw__reject(r, "field %zu (%s): a string of %zu bytes, more than WISP_MAX_STRING_BYTES (%u)",
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
        if (WISP_UNLIKELY(wisp_parse_f32(s, len, 1, &v))) {
            wisp_raw__reject(r, "field %zu (%s): '%s' is not a number", f + 1, inp->name, excerpt(s, len, ex));
            return;
        }
        ((float *)ri->vals)[ri->n++] = v;
        return;
    }
    default: {
        int64_t v;
        int e = wisp_parse_i64(s, len, &v);
        if (WISP_UNLIKELY(e)) {
            wisp_raw__reject(r, "field %zu (%s): '%s' is %s", f + 1, inp->name, excerpt(s, len, ex),
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
        char *nb = wisp_realloc(r->qbuf, need);
        if (!nb) { *st = wisp_fail(WISP_ENOMEM, "csv: out of memory for a quoted field of %zu bytes", need); return NULL; }
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
        wisp_raw__reject(r, "input '%s' is missing and has no default", inp->name);
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
    if (f != r->nfields && !r->open_bad) wisp_raw__reject(r, "%zu fields, the schema has %zu", f, r->nfields);
    if (WISP_UNLIKELY(r->open_bad)) return wisp_raw_row_end(r);
    wisp_raw__commit_row(r);
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

/* spec/c/test_parse_fast.c turns the plan off to compare it with put(). */
int wisp_tsv__plan(int on);
static int plan_on = 1;
int wisp_tsv__plan(int on)
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
    uint64_t w;
    memcpy(&w, s, 8);
    uint64_t lo = w - 0x3030303030303030ull;            /* digit bytes become 0..9 */
    uint64_t hi = w + 0x4646464646464646ull;            /* bytes above '9' get their top bit */
    uint64_t keep = len == 8 ? ~0ull : ((1ull << (8 * len)) - 1);
    if (((lo | hi) & 0x8080808080808080ull) & keep) return false;   /* a non-digit among the first len */
    uint64_t d = (lo & keep) << (64 - 8 * len);         /* the len digits at the top, zeros below */
    d = (d * 10 + (d >> 8)) & 0x00FF00FF00FF00FFull;
    d = (d * 100 + (d >> 16)) & 0x0000FFFF0000FFFFull;
    d = (d * 10000 + (d >> 32)) & 0xFFFFFFFFull;
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
    int st = wisp_raw__row_begin(r, line);
    if (st) return st;
    if ((st = wisp_raw__reserve_line(r, (size_t)(e - p)))) { wisp_raw__abort(r); return st; }
    if (r->delim == '\t') {
        tsv_ctx *x = ctx;
        if (x && (x->fi != r->field_input || x->nf != r->nfields)) make_plan(r, x);   /* first line, or after a header */
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
            if (st) { wisp_raw__abort(r); return st; }
            if (!q || (q < e && *q != ',')) {
                wisp_raw__reject(r, "field %zu: %s", f + 1, !q ? "unterminated quoted field" : "text after a closing quote");
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

typedef int (*line_fn)(wisp_raw *r, const char *p, const char *e, const char *bufend, uint64_t line, void *ctx);

/* The end of a CSV record (RFC 4180): see internal.h. Outside quotes the
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

/* A UTF-8 byte order mark (Excel's "CSV UTF-8", pandas' utf-8-sig) */
static const char utf8_bom[3] = { '\xEF', '\xBB', '\xBF' };

/* The line loop shared by both formats (the contract of wisp_batch_parse_libsvm). */
static int parse_lines(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows, uint64_t *line_no,
                       size_t *consumed, line_fn fn, void *ctx, const char *fname)
{
    if (consumed) *consumed = 0;
    if (!r) return wisp_fail(WISP_EINVAL, "%s: raw is NULL", fname);
    if (!text && len) return wisp_fail(WISP_EINVAL, "%s: text is NULL", fname);
    if (r->open) return wisp_fail(WISP_ESTATE, "%s: a row is open (call wisp_raw_row_end)", fname);
    uint64_t line = line_no ? *line_no : 0;
    const char *p = text, *end = text + len;
    size_t added = 0;
    int st = WISP_OK;
    /* a byte order mark at the start of the input (no lines before) is not data */
    const uint64_t line0 = line;
    bool bom = false;
    /* CSV: a record may span lines (a quoted field holding newlines) */
    const bool csv = fn == parse_delimited_line && r->delim == ',';
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
            wisp_raw__reject(r, "the line is longer than WISP_MAX_LINE_BYTES (%u)", WISP_MAX_LINE_BYTES);
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
        if (r->want_header && fn == parse_delimited_line) {
            st = set_fields(r, p, (size_t)(e - p), (char)r->delim, "header");
            if (st) {
                st = wisp_fail_context(WISP_EPARSE, "line %llu", (unsigned long long)line);
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
        return wisp_fail(WISP_ESTATE, "wisp_raw_parse_tsv: no schema (call wisp_raw_set_schema first)");
    }
    tsv_ctx x;
    x.fi = NULL;
    x.nf = 0;
    x.ok = false;
    return parse_lines(r, text, len, final, max_rows, line_no, consumed, parse_delimited_line, &x, "wisp_raw_parse_tsv");
}

/* ---- JSON lines ---------------------------------------------------------------------- */

static inline const char *jws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* Decode the JSON string at *p into r->qbuf. */
static const char *jstr(wisp_raw *r, const char **p, const char *e, size_t *len, int *st)
{
    size_t need = (size_t)(e - *p);
    if (need > r->qbuf_cap) {
        char *nb = wisp_realloc(r->qbuf, need);
        if (!nb) { *st = wisp_fail(WISP_ENOMEM, "jsonl: out of memory for a string of %zu bytes", need); return "out of memory"; }
        r->qbuf = nb;
        r->qbuf_cap = need;
    }
    return wisp_json__string(p, e, r->qbuf, len);
}

/* One scalar JSON value at *p for input `in` (appended, or the row rejected). */
static int json_scalar(wisp_raw *r, long in, const char **pp, const char *e, const char *ls)
{
    const struct wisp_input *inp = &r->cols->inputs[in];
    const char *p = *pp;
    char ex[48];
    int st = WISP_OK;
    if (*p == '"') {
        size_t len;
        const char *err = jstr(r, &p, e, &len, &st);
        if (st) return st;
        if (err) { *pp = NULL; return wisp_raw__reject(r, "input '%s': %s at column %zu", inp->name, err, (size_t)(p - ls) + 1); }
        *pp = p;
        if (inp->dtype != WISP_INPUT_STRING)
            return wisp_raw__reject(r, "input '%s': a string where %s is expected, got the string \"%s\"", inp->name,
                                    inp->dtype == WISP_INPUT_INT64 ? "int64" : "float32", excerpt(r->qbuf, len, ex));
        return wisp_raw__push_str(r, (size_t)in, r->qbuf, len);
    }
    size_t n = wisp_json__number_len(p, e);
    if (n) {
        *pp = p + n;
        if (inp->dtype == WISP_INPUT_STRING)
            return wisp_raw__reject(r, "input '%s': a number where a string is expected", inp->name);
        if (inp->dtype == WISP_INPUT_INT64) {
            int64_t v;
            bool integral = !memchr(p, '.', n) && !memchr(p, 'e', n) && !memchr(p, 'E', n);
            int rc = integral ? wisp_parse_i64(p, n, &v) : -1;
            if (rc) return wisp_raw__reject(r, "input '%s': %s is not an int64", inp->name, excerpt(p, n, ex));
            return wisp_raw__push_i64(r, (size_t)in, v);
        }
        if (n > MAX_NUM_TOKEN)          /* parse_f64 reads at most that much: refuse, never cut the text */
            return wisp_raw__reject(r, "input '%s': a number of %zu characters ('%s'), longer than the %d bytes the readers take",
                                    inp->name, n, excerpt(p, n, ex), MAX_NUM_TOKEN);
        return wisp_raw__push_f32(r, (size_t)in, (float)parse_f64(p, n));
    }
    /* NaN, Infinity, -Infinity: not JSON, but what Python's json.dumps writes
     * for float('nan') and float('inf') by default (allow_nan=True) */
    {
        static const char *const nonjson[] = { "NaN", "Infinity", "-Infinity" };
        for (int k = 0; k < 3; k++) {
            const size_t kl = strlen(nonjson[k]);
            if ((size_t)(e - p) >= kl && !memcmp(p, nonjson[k], kl)) {
                *pp = NULL;
                return wisp_raw__reject(r, "input '%s': %s is not a finite float32 (and not JSON: Python's json.dumps "
                                        "writes it for a NaN or infinite float)", inp->name, nonjson[k]);
            }
        }
    }
    if (((size_t)(e - p) >= 4 && !memcmp(p, "true", 4)) || ((size_t)(e - p) >= 5 && !memcmp(p, "false", 5))) {
        *pp = p + (p[0] == 't' ? 4 : 5);
        return wisp_raw__reject(r, "input '%s': a boolean where %s is expected", inp->name,
                                inp->dtype == WISP_INPUT_STRING ? "a string" : inp->dtype == WISP_INPUT_INT64 ? "int64" : "float32");
    }
    *pp = NULL;
    if (p < e && *p == '{') return wisp_raw__reject(r, "input '%s': an object is not a value", inp->name);
    return wisp_raw__reject(r, "invalid JSON at column %zu", (size_t)(p - ls) + 1);
}

static int parse_json_line(wisp_raw *r, const char *ls, const char *e, const char *bufend, uint64_t line, void *ctx)
{
    (void)bufend;
    (void)ctx;
    int st = wisp_raw_row_begin(r, line);
    if (st) return st;
    const char *p = jws(ls, e);
#define JBAD(...) do { wisp_raw__reject(r, __VA_ARGS__); goto done; } while (0)
    if (p >= e || *p != '{') JBAD("invalid JSON at column %zu: expected an object", (size_t)(p - ls) + 1);
    p = jws(p + 1, e);
    if (p < e && *p == '}') { p++; goto tail; }
    for (;;) {
        if (p >= e || *p != '"') JBAD("invalid JSON at column %zu: expected a key", (size_t)(p - ls) + 1);
        size_t klen;
        const char *err = jstr(r, &p, e, &klen, &st);
        if (st) { wisp_raw__abort(r); return st; }
        if (err) JBAD("invalid JSON at column %zu: %s", (size_t)(p - ls) + 1, err);
        long in = wisp_columns__find_input(r->cols, r->qbuf, klen);
        char ex[48];
        if (in < 0) JBAD("unknown input '%s'", excerpt(r->qbuf, klen, ex));
        p = jws(p, e);
        if (p >= e || *p != ':') JBAD("invalid JSON at column %zu: expected ':'", (size_t)(p - ls) + 1);
        p = jws(p + 1, e);
        if (p >= e) JBAD("invalid JSON: the line ends inside an object");
        if (*p == 'n' && e - p >= 4 && !memcmp(p, "null", 4)) {
            p += 4;                                                 /* missing */
        } else if (*p == '[') {
            if (!r->cols->inputs[in].sparse)
                JBAD("input '%s' is dense and takes one value per row (declare it sparse for lists)", r->cols->inputs[in].name);
            p = jws(p + 1, e);
            if (p < e && *p == ']') p++;
            else for (;;) {
                if (p >= e) JBAD("invalid JSON: the line ends inside an array");
                if (*p == '[' || *p == '{' || (*p == 'n' && e - p >= 4 && !memcmp(p, "null", 4)))
                    JBAD("input '%s': an array may hold only strings or numbers", r->cols->inputs[in].name);
                st = json_scalar(r, in, &p, e, ls);
                if (st) { wisp_raw__abort(r); return st; }
                if (!p || r->open_bad) goto done;
                p = jws(p, e);
                if (p < e && *p == ',') { p = jws(p + 1, e); continue; }
                if (p < e && *p == ']') { p++; break; }
                JBAD("invalid JSON at column %zu: expected ',' or ']'", (size_t)(p - ls) + 1);
            }
        } else {
            st = json_scalar(r, in, &p, e, ls);
            if (st) { wisp_raw__abort(r); return st; }
            if (!p || r->open_bad) goto done;
        }
        p = jws(p, e);
        if (p < e && *p == ',') { p = jws(p + 1, e); continue; }
        if (p < e && *p == '}') { p++; break; }
        JBAD("invalid JSON at column %zu: expected ',' or '}'", (size_t)(p - ls) + 1);
    }
tail:
    p = jws(p, e);
    if (p != e) JBAD("invalid JSON at column %zu: text after the object", (size_t)(p - ls) + 1);
#undef JBAD
done:
    return wisp_raw_row_end(r);
}

int wisp_raw_parse_jsonl(wisp_raw *r, const char *text, size_t len, int final, size_t max_rows, uint64_t *line_no,
                         size_t *consumed)
{
    return parse_lines(r, text, len, final, max_rows, line_no, consumed, parse_json_line, NULL, "wisp_raw_parse_jsonl");
}
