/* jsonl.c — the JSON-lines reader of raw batches: one object per line into a
 * raw batch, and THE JSON DECISIONS every JSON reader of rows follows.
 *
 * JSON lines. One object per line; keys are input names; null is missing;
 * a number for a float32 input is read as a double and rounded to float32
 * (what json.loads followed by numpy's float32 does); an int64 input needs
 * an integer literal in range; a string input needs a JSON string (valid
 * UTF-8, as JSON requires); an array gives a sparse input its values. An
 * unknown key, a wrong type or malformed JSON make the row bad.
 *
 * THE JSON DECISIONS, one list for every JSON reader (this one, and the
 * service's bodies in lua/wisp/nginx/v1/decode.lua, which must match it): each
 * refusal makes that row bad with a message naming the real type and value.
 *   - values: NaN, Infinity, -Infinity (json.dumps' defaults for non-finite
 *     floats; not JSON) are refused, naming the token. A number is read as
 *     TensorFlow reads it (json.loads, then numpy float32): 1e39 and
 *     3.4028236e38 become inf, as "nan"/"inf"/"1e39" do in a CSV/TSV field
 *     (decode_csv, absl::SimpleAtof). The values rule (batch.c, wisp.h)
 *     applies where a value meets a weight: a numeric column whose value is
 *     not a finite float32 makes the row bad (transform_cpu.c, naming the column
 *     and NaN/+inf/-inf); a bucketized column puts it in TensorFlow's
 *     bucket (NaN and +inf last, -inf first: spec/data/tf_golden_columns.json), as
 *     it is a bucket id, not a value. FLT_MAX is kept, and values that
 *     underflow (1e-50 -> 0, subnormals) too. The service's "vals" (a
 *     value per weight: lua/wisp/nginx/v1/decode.lua) follow the values rule.
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
 */
#include "batch/raw.h"
#include "parse/json.h"
#include "parse/rawtext.h"
#include "parse/textnum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        char *nb = wisp__realloc(r->qbuf, need);
        if (!nb) { *st = wisp__fail(WISP_ENOMEM, "jsonl: out of memory for a string of %zu bytes", need); return "out of memory"; }
        r->qbuf = nb;
        r->qbuf_cap = need;
    }
    return wisp__json_string(p, e, r->qbuf, len);
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
        if (err) { *pp = NULL; return wisp__raw_reject(r, "input '%s': %s at column %zu", inp->name, err, (size_t)(p - ls) + 1); }
        *pp = p;
        if (inp->dtype != WISP_INPUT_STRING)
            return wisp__raw_reject(r, "input '%s': a string where %s is expected, got the string \"%s\"", inp->name,
                                    inp->dtype == WISP_INPUT_INT64 ? "int64" : "float32", wisp__text_excerpt(r->qbuf, len, ex));
        return wisp__raw_push_str(r, (size_t)in, r->qbuf, len);
    }
    size_t n = wisp__json_number_len(p, e);
    if (n) {
        *pp = p + n;
        if (inp->dtype == WISP_INPUT_STRING)
            return wisp__raw_reject(r, "input '%s': a number where a string is expected", inp->name);
        if (inp->dtype == WISP_INPUT_INT64) {
            int64_t v;
            bool integral = !memchr(p, '.', n) && !memchr(p, 'e', n) && !memchr(p, 'E', n);
            int rc = integral ? wisp__textnum_i64(p, n, &v) : -1;
            if (rc) return wisp__raw_reject(r, "input '%s': %s is not an int64", inp->name, wisp__text_excerpt(p, n, ex));
            return wisp__raw_push_i64(r, (size_t)in, v);
        }
        /* wisp__textnum_f64 reads at most WISP_TEXTNUM_MAX_TOKEN bytes: refuse, never cut the text */
        if (n > WISP_TEXTNUM_MAX_TOKEN)
            return wisp__raw_reject(r, "input '%s': a number of %zu characters ('%s'), longer than the %d bytes the readers take",
                                    inp->name, n, wisp__text_excerpt(p, n, ex), WISP_TEXTNUM_MAX_TOKEN);
        return wisp__raw_push_f32(r, (size_t)in, (float)wisp__textnum_f64(p, n));
    }
    /* NaN, Infinity, -Infinity: not JSON, but what Python's json.dumps writes
     * for float('nan') and float('inf') by default (allow_nan=True) */
    {
        static const char *const nonjson[] = { "NaN", "Infinity", "-Infinity" };
        for (int k = 0; k < 3; k++) {
            const size_t kl = strlen(nonjson[k]);
            if ((size_t)(e - p) >= kl && !memcmp(p, nonjson[k], kl)) {
                *pp = NULL;
                return wisp__raw_reject(r, "input '%s': %s is not a finite float32 (and not JSON: Python's json.dumps "
                                        "writes it for a NaN or infinite float)", inp->name, nonjson[k]);
            }
        }
    }
    if (((size_t)(e - p) >= 4 && !memcmp(p, "true", 4)) || ((size_t)(e - p) >= 5 && !memcmp(p, "false", 5))) {
        *pp = p + (p[0] == 't' ? 4 : 5);
        return wisp__raw_reject(r, "input '%s': a boolean where %s is expected", inp->name,
                                inp->dtype == WISP_INPUT_STRING ? "a string" : inp->dtype == WISP_INPUT_INT64 ? "int64" : "float32");
    }
    *pp = NULL;
    if (p < e && *p == '{') return wisp__raw_reject(r, "input '%s': an object is not a value", inp->name);
    return wisp__raw_reject(r, "invalid JSON at column %zu", (size_t)(p - ls) + 1);
}

static int parse_json_line(wisp_raw *r, const char *ls, const char *e, const char *bufend, uint64_t line, void *ctx)
{
    (void)bufend;
    (void)ctx;
    int st = wisp_raw_row_begin(r, line);
    if (st) return st;
    const char *p = jws(ls, e);
#define JBAD(...) do { wisp__raw_reject(r, __VA_ARGS__); goto done; } while (0)
    if (p >= e || *p != '{') JBAD("invalid JSON at column %zu: expected an object", (size_t)(p - ls) + 1);
    p = jws(p + 1, e);
    if (p < e && *p == '}') { p++; goto tail; }
    for (;;) {
        if (p >= e || *p != '"') JBAD("invalid JSON at column %zu: expected a key", (size_t)(p - ls) + 1);
        size_t klen;
        const char *err = jstr(r, &p, e, &klen, &st);
        if (st) { wisp__raw_abort(r); return st; }
        if (err) JBAD("invalid JSON at column %zu: %s", (size_t)(p - ls) + 1, err);
        long in = wisp__columns_find_input(r->cols, r->qbuf, klen);
        char ex[48];
        if (in < 0) JBAD("unknown input '%s'", wisp__text_excerpt(r->qbuf, klen, ex));
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
                if (st) { wisp__raw_abort(r); return st; }
                if (!p || r->open_bad) goto done;
                p = jws(p, e);
                if (p < e && *p == ',') { p = jws(p + 1, e); continue; }
                if (p < e && *p == ']') { p++; break; }
                JBAD("invalid JSON at column %zu: expected ',' or ']'", (size_t)(p - ls) + 1);
            }
        } else {
            st = json_scalar(r, in, &p, e, ls);
            if (st) { wisp__raw_abort(r); return st; }
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
    return wisp__raw_text_lines(r, text, len, final, max_rows, line_no, consumed, parse_json_line, NULL,
                                "wisp_raw_parse_jsonl", false);
}
