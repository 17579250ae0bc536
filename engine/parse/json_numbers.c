/* json_numbers.c — one JSON list of numbers read into a typed array (wisp_json_numbers: the service's v2 tensor data). */
/*
 * The Open Inference Protocol's JSON tensors (the service's v2 endpoints, lua/wisp/nginx/v2/data.lua):
 * each number read as the JSON-lines reader reads it (engine/parse/textnum.h: an integer exactly, a float
 * as strtod, then rounded to float32 for a float32 array, as json.loads + numpy do). The Lua layer finds
 * the lists in nginx's body buffer and hands each one here; anything this refuses (a fraction for an
 * integer, an integer out of range, not a number) it reads again itself to say which element is wrong, so
 * this only answers yes or no. CSR tensors then become a batch through wisp_batch_from_csr
 * (engine/batch/batch_csr.c).
 *
 * Speed (the per-number cost of a v2 JSON request): the reader is one function made four
 * (is_float x bits: no test of them a token), and when the text ends with its ']' (always so
 * for the lists the Lua layer hands over) the digit loops run without a bound check: every
 * digit run stops at a byte that is not a digit, ']' at the latest. (SWAR digit sums a token
 * measured ~1.6x the byte loop here, and a SSE2 comma mask walk ~1.3x: the tokens are short,
 * 1 to 7 digits.)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wisp.h"
#include "parse/json.h"
#include "parse/textnum.h"

static inline const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static inline const char *skip_ws_unguarded(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    return p;
}

/* a digit at q (guarded: and q before the end) */
#define DIGIT_AT(q) ((!guarded || (q) < e) && (unsigned)((unsigned char)*(q) - '0') <= 9)
/* q is before the end (unguarded: always so where it is asked, the sentinel being after it) */
#define IN(q) (!guarded || (q) < e)
/* the digits at q into acc (acc = acc * 10^k + their value; it wraps past 19 digits), two a
 * step (half the loop's branches and counter updates: the tokens are digit runs) */
#define READ_DIGITS(q, acc) do {                                                     \
        for (;;) {                                                                   \
            if (!IN(q)) break;                                                       \
            unsigned d0_ = (unsigned)((unsigned char)(q)[0] - '0');                  \
            if (d0_ > 9) break;                                                      \
            unsigned d1_ = IN((q) + 1) ? (unsigned)((unsigned char)(q)[1] - '0') : 10u; \
            if (d1_ > 9) { (acc) = (acc) * 10 + d0_; (q)++; break; }                 \
            (acc) = (acc) * 100 + d0_ * 10 + d1_;                                    \
            (q) += 2;                                                                \
        }                                                                            \
    } while (0)
/* blanks skipped (unguarded: they stop at the sentinel at the latest) */
#define SKIP_WS(q, end_) (guarded ? skip_ws((q), (end_)) : skip_ws_unguarded(q))

static inline __attribute__((always_inline)) int read_list(const char *text, size_t len, const int is_float,
                                                           const int bits, void *out, size_t cap, size_t *count,
                                                           size_t *consumed, const int guarded)
{
    const char *p = text, *e = text + len;
    size_t n = 0;
    int depth = 0;
    for (;;) {
        /* p: at '[' (a list opens) or at a value */
        if (*p == '[') {
            if (++depth > WISP_JSON_MAX_DEPTH) return WISP_EPARSE;
            p = SKIP_WS(p + 1, e);
            if (p >= e) return WISP_EPARSE;
            if (*p == ']') goto close;
            continue;
        }
        if (n >= cap) return WISP_ELIMIT;
        size_t tl;
        if (is_float) {
            /* one pass over the token, JSON's grammar -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?: the
             * common short decimal ("0.173287", "1", "-2.5": at most 19 digits, no exponent) is
             * Clinger's exact case (strtod's answer); anything else goes to wisp__textnum_f64
             * (strtod) with the token's span */
            const char *q = p;
            int neg = 0;
            if (IN(q) && *q == '-') { neg = 1; q++; }
            const char *d0 = q;
            uint64_t m = 0;
            READ_DIGITS(q, m);
            int nd = (int)(q - d0), frac = 0, expo = 0;
            if (nd == 0 || (nd > 1 && *d0 == '0')) return WISP_EPARSE;
            if (IN(q) && *q == '.') {
                const char *f0 = ++q;
                READ_DIGITS(q, m);
                frac = (int)(q - f0);
                if (frac == 0) return WISP_EPARSE;
                nd += frac;
            }
            if (IN(q) && (*q == 'e' || *q == 'E')) {
                q++;
                if (IN(q) && (*q == '+' || *q == '-')) q++;
                const char *x0 = q;
                while (DIGIT_AT(q)) q++;
                if (q == x0) return WISP_EPARSE;
                expo = 1;
            }
            tl = (size_t)(q - p);
            double v;
            if (!expo && nd <= 19 && m < (1ull << 53) && frac <= 22) {
                v = frac ? (double)m / wisp__pow10_exact[frac] : (double)m;
                if (neg) v = -v;
            } else {
                v = wisp__textnum_f64(p, tl);               /* the sign is in the token */
            }
            if (bits == 32) ((float *)out)[n] = (float)v; else ((double *)out)[n] = v;
        } else {
            /* an integer token in one pass: -?(0|[1-9][0-9]*), then a delimiter (a '.', an 'e'
             * or anything else right after the digits is not an integer: EPARSE) */
            const char *q = p;
            int neg = 0;
            if (IN(q) && *q == '-') { neg = 1; q++; }
            const char *d0 = q;
            uint64_t v = 0;
            READ_DIGITS(q, v);
            size_t nd = (size_t)(q - d0);
            if (nd == 0 || (nd > 1 && *d0 == '0') || nd > 19) return WISP_EPARSE;   /* none, a leading zero, >= 10^19 */
            if (IN(q) && (*q == '.' || *q == 'e' || *q == 'E')) return WISP_EPARSE;
            if (bits == 64) {
                if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return WISP_EPARSE;
                ((int64_t *)out)[n] = neg ? (int64_t)(0 - v) : (int64_t)v;
            } else {
                if (neg ? v > (uint64_t)INT32_MAX + 1 : v > (uint64_t)INT32_MAX) return WISP_EPARSE;
                ((int32_t *)out)[n] = neg ? (int32_t)(0 - (int64_t)v) : (int32_t)v;
            }
            tl = (size_t)(q - p);
        }
        n++;
        p = SKIP_WS(p + tl, e);
        if (p >= e) return WISP_EPARSE;
        if (*p == ',') {
            p = SKIP_WS(p + 1, e);
            if (p >= e || *p == ']') return WISP_EPARSE;
            continue;
        }
        if (*p != ']') return WISP_EPARSE;
    close:
        /* p: at ']' */
        for (;;) {
            p++;
            if (--depth == 0) {
                *count = n;
                if (consumed) *consumed = (size_t)(p - text);
                return WISP_OK;
            }
            p = skip_ws(p, e);                   /* (guarded: this ']' may be the last byte) */
            if (p >= e) return WISP_EPARSE;
            if (*p == ']') continue;
            if (*p != ',') return WISP_EPARSE;
            p = skip_ws(p + 1, e);
            if (p >= e || *p == ']') return WISP_EPARSE;
            break;
        }
    }
}
#undef DIGIT_AT
#undef IN
#undef READ_DIGITS
#undef SKIP_WS

int wisp_json_numbers(const char *text, size_t len, int is_float, int bits, void *out, size_t cap,
                      size_t *count, size_t *consumed)
{
    if (count) *count = 0;
    if (consumed) *consumed = 0;
    if (!text || !count || (cap && !out) || (bits != 32 && bits != 64)) return WISP_EINVAL;
    if (len == 0 || *text != '[') return WISP_EPARSE;
    if (text[len - 1] == ']') {                  /* the sentinel: no digit run reaches the end */
        if (is_float) return bits == 32 ? read_list(text, len, 1, 32, out, cap, count, consumed, 0)
                                        : read_list(text, len, 1, 64, out, cap, count, consumed, 0);
        return bits == 32 ? read_list(text, len, 0, 32, out, cap, count, consumed, 0)
                          : read_list(text, len, 0, 64, out, cap, count, consumed, 0);
    }
    return read_list(text, len, is_float, bits, out, cap, count, consumed, 1);
}
