/* libsvm.c — the fast libsvm text parser (wisp_batch_parse_libsvm) and the batch text parsers' line loop. */
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
 * correctly rounded double; everything else goes to strtod (C locale, engine/parse/textnum.c) on a NUL-terminated
 * copy of the token (the text itself is not NUL-terminated). Rounding twice
 * (to double, then to float) is not always strtof's single rounding (e.g.
 * "1.143291413784027": 16 digits, the double nearest is a float midpoint);
 * the fast path takes only values where both agree (see fast_decimal).
 *
 * Speed: memchr finds each line end. Lines in the common form go through
 * the fast path below (SIMD token index, then each token from one 32-byte
 * load: bit masks and shuffle/multiply-add digit conversion; AVX2 chosen at
 * run time); any other line, and any line the fast path is unsure of, goes
 * through parse_line, the reference: digits eight at a time from one 8-byte
 * load (SWAR), "id:1" recognised without a number parse, no scanf, no
 * strtod in the common case, no copies. Either way a line's features are
 * written straight into the batch's arrays (binary ids into a scratch array
 * appended at the end of the line), after one capacity check per line (a
 * line of L bytes holds at most L/2 + 1 tokens).
 *
 * Bad lines become rows with no features, marked bad with
 * "line N: <what>, at column C" (C counts bytes from 1).
 */
#include "batch/batch.h"
#include "parse/parse.h"
#include "parse/textnum.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static inline int is_blank(char c) { return c == ' ' || c == '\t'; }

enum { NUM_OK = 0, NUM_SYNTAX = 1, NUM_TOOLONG = 2 };

#define NUM_MAX_TOKEN WISP_TEXTNUM_MAX_TOKEN

static const uint64_t pow10_u64[9] = { 1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000 };

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
        n = wisp__textnum_swar8(p, &chunk);
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
        if (WISP_LIKELY(wisp__textnum_clinger(m, exp10, neg, out))) return NUM_OK;
    }
    size_t n = (size_t)(p - start);
    if (n > NUM_MAX_TOKEN) return NUM_TOOLONG;
    *out = wisp__textnum_strtod(start, n, NULL);
    return NUM_OK;
}

static inline uint32_t id32(uint64_t id)
{
    return id > UINT32_MAX ? WISP_ID_NONE : (uint32_t)id;
}

/* The token at s (up to a blank or e) for a message: at most 40 bytes,
 * non-printable bytes as '?', "..." when cut (buf: 44 bytes). vw_text.c uses it too. */
const char *wisp__excerpt(const char *s, const char *e, char *buf)
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
            snprintf(o->what, sizeof o->what, "bad label '%s' (expected a number)", wisp__excerpt(p, e, ex));
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
            snprintf(o->what, sizeof o->what, "bad feature id '%s'", wisp__excerpt(tok, e, ex));
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
                    snprintf(o->what, sizeof o->what, "feature id '%s' overflows 64 bits", wisp__excerpt(tok, p, ex));
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
                snprintf(o->what, sizeof o->what, "missing value after ':' in '%s'", wisp__excerpt(tok, e, ex));
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
                    snprintf(o->what, sizeof o->what, "extra ':' in '%s' (expected id:value)",
                             wisp__excerpt(tok, e, ex));
                } else if (nonfinite_word(vs, e)) {
                    o->err_at = vs;
                    snprintf(o->what, sizeof o->what, "value '%s' is not a finite number", wisp__excerpt(vs, e, ex));
                } else if (r == NUM_TOOLONG) {
                    o->err_at = vs;
                    snprintf(o->what, sizeof o->what, "value '%s' is longer than %d bytes", wisp__excerpt(vs, e, ex),
                             NUM_MAX_TOKEN);
                } else {
                    o->err_at = vs;
                    snprintf(o->what, sizeof o->what, "bad value '%s'", wisp__excerpt(vs, e, ex));
                }
                return LINE_BAD;
            }
            float f = (float)v;
            if (WISP_UNLIKELY(!isfinite(f))) {
                o->err_at = vs;
                snprintf(o->what, sizeof o->what, "value '%s' is not a finite float", wisp__excerpt(vs, e, ex));
                return LINE_BAD;
            }
            if (f == 1.0f) bid[nb++] = id32(id);
            else { vid[nv] = id32(id); vv[nv] = f; nv++; }
        } else {
            o->err_at = tok;
            snprintf(o->what, sizeof o->what, "bad feature id '%s'", wisp__excerpt(tok, e, ex));
            return LINE_BAD;
        }
        while (p < e && is_blank(*p)) p++;
    }
    o->nv = nv;
    o->nb = nb;
    return LINE_OK;
}

/* ---- the fast path -------------------------------------------------------------
 * A line in the common form (an optional plain-decimal label, then tokens
 * "id", "id:value" with value [+-]digits[.digits] of at most 19 digits and
 * no exponent, separated by spaces/tabs, an optional '#' comment) is parsed
 * in two stages. Stage 1 finds every token's start from 64-byte masks of the
 * blanks (so no token's loads wait for the token before it). Stage 2 loads
 * the 32 bytes at each token's start once and takes bit masks of its blanks,
 * colons, digits and dots: the token's length, its colon and its value's dot
 * come from a few bit operations, and each digit run (of known length, the
 * dot skipped) is converted by one shuffle and three multiply-adds (SSE4.1),
 * or by SWAR. Anything else (an exponent, a long token or run, a syntax
 * error, a '\r' inside the line, the row limit) returns FAST_NO before the
 * row is committed, and parse_line above parses the line again: it is the
 * reference. For the lines it takes, the fast path computes the same
 * mantissa m and exponent as parse_number and the same step (m == 0: a
 * signed zero; else (double)m / 10^k, exact operands, one rounding), hence
 * the same double and the same float: bit-identical rows
 * (spec/c/test_parse_fast.c compares both paths on random lines). */
#if defined(__SSE2__)
#include <emmintrin.h>
#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif
#define HAVE_FAST_PATH 1

enum { FAST_OK = 0, FAST_NO = 1 };
#define FAST_SLACK 48                      /* readable bytes needed after a token's start */

static const uint64_t pow10_u64_19[20] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull, 100000000ull,
    1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull,
    100000000000000ull, 1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
    1000000000000000000ull, 10000000000000000000ull
};

/* The value of the n (0..8) digits at s (8 bytes readable, all n are digits). */
static inline __attribute__((always_inline)) uint64_t swar_n(const char *s, unsigned n)
{
    uint64_t w;
    memcpy(&w, s, 8);
    w -= 0x3030303030303030ull;            /* borrows run to later bytes, which the shift drops */
    uint64_t d = n ? w << (64 - 8 * n) : 0;
    d = (d * 10 + (d >> 8)) & 0x00FF00FF00FF00FFull;
    d = (d * 100 + (d >> 16)) & 0x0000FFFF0000FFFFull;
    d = (d * 10000 + (d >> 32)) & 0xFFFFFFFFull;
    return d;
}

/* The value of the n (0..16) digits at s (n + 8 bytes readable). */
static inline __attribute__((always_inline)) uint64_t digits_n(const char *s, unsigned n)
{
    if (WISP_LIKELY(n <= 8)) return swar_n(s, n);
    return swar_n(s, n - 8) * 100000000ull + swar_n(s + n - 8, 8);
}

#if defined(__SSE4_1__)
/* pshufb controls from sliding windows: loadu(slide + nd) holds, in lane j,
 * j - (16 - nd) when that is >= 0 (the digit to take) and -1 (a zero lane)
 * before; loadu(after_dot + nf) holds 1 in the last nf lanes (the digits after a
 * dot come one byte later). */
static const int8_t slide[32] __attribute__((aligned(32))) = {
    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
static const int8_t after_dot[32] __attribute__((aligned(32))) = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };

/* The value of 16 digit lanes (leading zero lanes): three multiply-adds. */
static inline __attribute__((always_inline)) uint64_t digits16(__m128i y)
{
    y = _mm_maddubs_epi16(y, _mm_set1_epi16(0x010A));               /* pairs: 10 a + b */
    y = _mm_madd_epi16(y, _mm_set1_epi32(0x00010064));              /* quads: 100 a + b */
    y = _mm_packus_epi32(y, y);
    y = _mm_madd_epi16(y, _mm_set1_epi32(0x00012710));              /* eights: 10000 a + b */
    return (uint64_t)(uint32_t)_mm_cvtsi128_si32(y) * 100000000ull + (uint32_t)_mm_extract_epi32(y, 1);
}
#endif

/* The value of the nd (1..16) digits at v (16 bytes readable). */
static inline __attribute__((always_inline)) uint64_t digits_plain(const char *v, unsigned nd)
{
#if defined(__SSE4_1__)
    __m128i x = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)(const void *)v), _mm_set1_epi8('0'));
    return digits16(_mm_shuffle_epi8(x, _mm_loadu_si128((const __m128i *)(const void *)(slide + nd))));
#else
    return digits_n(v, nd);
#endif
}

/* The value of the nd (0..16) digits at v, the first ip of them followed by
 * a '.' when ip < nd (so the text spans nd + (ip < nd) <= 16 bytes; 16
 * bytes readable at v). */
static inline __attribute__((always_inline)) uint64_t digits_dot(const char *v, unsigned nd, unsigned ip)
{
#if defined(__SSE4_1__)
    __m128i x = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)(const void *)v), _mm_set1_epi8('0'));
    __m128i src = _mm_add_epi8(_mm_loadu_si128((const __m128i *)(const void *)(slide + nd)),
                               _mm_loadu_si128((const __m128i *)(const void *)(after_dot + (nd - ip))));
    return digits16(_mm_shuffle_epi8(x, src));
#else
    if (ip == nd) return digits_n(v, nd);
    return digits_n(v, ip) * pow10_u64_19[nd - ip] + digits_n(v + ip + 1, nd - ip);
#endif
}

/* The masks of the 32 bytes at p (bit i: byte p[i]): `term` marks the bytes
 * up to ' ' (blanks and the line's end; stage 1 made sure the line holds no
 * other such byte). */
struct win { uint32_t term, colon, digit, dot; };

static inline __attribute__((always_inline)) void scan32_sse2(const char *p, struct win *w)
{
    const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + 16));
    const __m128i col = _mm_set1_epi8(':'), dot = _mm_set1_epi8('.'), zero = _mm_set1_epi8('0');
    const __m128i nine = _mm_set1_epi8(9), sp = _mm_set1_epi8(' ');
#define M2(x, y) ((uint32_t)_mm_movemask_epi8(x) | (uint32_t)_mm_movemask_epi8(y) << 16)
    w->term = M2(_mm_cmpeq_epi8(_mm_min_epu8(a, sp), a), _mm_cmpeq_epi8(_mm_min_epu8(b, sp), b));   /* <= ' ' */
    w->colon = M2(_mm_cmpeq_epi8(a, col), _mm_cmpeq_epi8(b, col));
    w->dot = M2(_mm_cmpeq_epi8(a, dot), _mm_cmpeq_epi8(b, dot));
    const __m128i da = _mm_sub_epi8(a, zero), db = _mm_sub_epi8(b, zero);
    w->digit = M2(_mm_cmpeq_epi8(_mm_min_epu8(da, nine), da), _mm_cmpeq_epi8(_mm_min_epu8(db, nine), db));
#undef M2
}

/* The blanks (space, tab) of the 64 bytes at p as bits; in *ctl the other
 * bytes below ' ' (which scan32 would take for token ends). */
static inline __attribute__((always_inline)) uint64_t blanks64_sse2(const char *p, uint64_t *ctl)
{
    const __m128i sp = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t');
    uint64_t m = 0, c = 0;
    for (int k = 0; k < 4; k++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
        m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, sp),
                                                                _mm_cmpeq_epi8(x, tab))) << (16 * k);
        c |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(x, sp), x)) << (16 * k);
    }
    *ctl = c & ~m;
    return m;
}

/* The same with AVX2 (VEX-encoded, BMI code around it), chosen at run time
 * where the CPU has it. */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#define AVX2_TARGET __attribute__((target("avx2,bmi,bmi2,popcnt")))
static inline __attribute__((always_inline)) AVX2_TARGET void scan32_avx2(const char *p, struct win *w)
{
    const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
    const __m256i d = _mm256_sub_epi8(x, _mm256_set1_epi8('0'));
    w->term = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(x, _mm256_set1_epi8(' ')), x));
    w->colon = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, _mm256_set1_epi8(':')));
    w->dot = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, _mm256_set1_epi8('.')));
    w->digit = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(d, _mm256_set1_epi8(9)), d));
}

static inline __attribute__((always_inline)) AVX2_TARGET uint64_t blanks64_avx2(const char *p, uint64_t *ctl)
{
    const __m256i sp = _mm256_set1_epi8(' '), tab = _mm256_set1_epi8('\t');
    const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)p);
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
    uint64_t m = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(a, sp),
                                                                          _mm256_cmpeq_epi8(a, tab)))
               | (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(b, sp),
                                                                          _mm256_cmpeq_epi8(b, tab))) << 32;
    uint64_t c = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(a, sp), a))
               | (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(b, sp), b)) << 32;
    *ctl = c & ~m;
    return m;
}
#else
#define HAVE_AVX2_PATH 0
#endif

/* The decimal v[0..n) (n >= 1), masks relative to v: [+-]digits[.digits],
 * 1..19 digits, at most 12 after the dot, mantissa m < 2^53. Its value
 * exactly as parse_number gives it, or FAST_NO.
 *
 * These values are also exactly strtof's (correctly rounded to float), so
 * the fast path is right under either rule. (double)m / 10^k (k <= 12) is
 * the double nearest the decimal d; rounding that double to float can differ
 * from rounding d only if the double is a float midpoint (25 significant
 * bits, q 2^j, q odd) while d is not. If j + k >= 0, d - mid is a nonzero
 * multiple of 10^-k, so |d - mid| / d >= 1/m > 2^-53; else it is a nonzero
 * multiple of 2^j / 5^k, so |d - mid| / mid >= 1 / (q 5^k) > 2^-25 5^-12
 * > 2^-53. Either way d is more than half a double ulp from mid, so its
 * nearest double is not mid. (k = 13 already breaks this: see
 * spec/c/test_parse_fast.c, "1.0000000596046448" goes to parse_number.) */
static inline __attribute__((always_inline)) int fast_decimal(const char *v, unsigned n, uint32_t digit, uint32_t dotb,
                                                              double *out)
{
    int neg = 0;
    if (*v == '-' || *v == '+') {
        neg = *v == '-';
        v++; n--; digit >>= 1; dotb >>= 1;
    }
    uint32_t all = (1u << n) - 1;                             /* n <= 30 */
    dotb &= all;
    /* other bytes, two dots */
    if (WISP_UNLIKELY(((digit | dotb) & all) != all || (dotb & (dotb - 1)))) return FAST_NO;
    unsigned nd = n - (dotb != 0);                            /* digits */
    unsigned ip = dotb ? (unsigned)__builtin_ctz(dotb) : n;   /* integer digits */
    unsigned nf = nd - ip;                                    /* fraction digits */
    if (WISP_UNLIKELY(nd == 0 || nf > 12)) return FAST_NO;
    uint64_t m;
    if (WISP_LIKELY(n <= 16)) m = digits_dot(v, nd, ip);
    else {
        if (WISP_UNLIKELY(ip > 16 || nf > 16 || nd > 19)) return FAST_NO;
        m = digits_n(v, ip) * pow10_u64_19[nf] + digits_n(v + ip + 1, nf);
    }
    if (WISP_UNLIKELY(m >= (1ull << 53))) return FAST_NO;
    double d = (double)m / wisp__pow10_exact[nf];                   /* m == 0: +0.0, then the sign: as parse_number */
    *out = neg ? -d : d;
    return FAST_OK;
}

/* The feature token at s (not blank; w: the masks of its 32 bytes):
 * appended (FAST_OK), a comment (FAST_COMMENT), or FAST_NO. */
enum { FAST_COMMENT = 2 };
static inline __attribute__((always_inline)) int fast_token(const char *s, const struct win *w,
                                                            size_t *nvp, size_t *nbp, uint32_t *vid, float *vv,
                                                            uint32_t *bid)
{
    if (WISP_UNLIKELY(!(w->digit & 1))) return *s == '#' ? FAST_COMMENT : FAST_NO;
    if (WISP_UNLIKELY(!w->term)) return FAST_NO;             /* a token of 32 bytes or more */
    unsigned L = (unsigned)__builtin_ctz(w->term);
    uint32_t tok = (1u << L) - 1;
    uint32_t colon = w->colon & tok;
    size_t nv = *nvp, nb = *nbp;
    if (!colon) {                                            /* "id": binary */
        if (WISP_UNLIKELY((w->digit & tok) != tok || L > 16)) return FAST_NO;
        bid[nb] = id32(digits_plain(s, L));
        *nbp = nb + 1;
        return FAST_OK;
    }
    unsigned c = (unsigned)__builtin_ctz(colon);
    uint32_t idb = (1u << c) - 1;
    if (WISP_UNLIKELY((w->digit & idb) != idb || c > 16)) return FAST_NO;
    uint32_t id = id32(digits_plain(s, c));
    const char *v = s + c + 1;
    unsigned n = L - c - 1;
    float f = 1.0f;
    if (!(n == 1 && *v == '1')) {                            /* not "id:1" */
        if (WISP_UNLIKELY(n == 0)) return FAST_NO;
        double d;
        if (WISP_UNLIKELY(fast_decimal(v, n, w->digit >> (c + 1), w->dot >> (c + 1), &d) != FAST_OK)) return FAST_NO;
        f = (float)d;                                        /* finite: at most 19 digits, no exponent */
    }
    /* both stores, one count advanced: no branch on the value */
    size_t one = f == 1.0f;
    vid[nv] = id;
    vv[nv] = f;
    bid[nb] = id;
    *nvp = nv + (1 - one);
    *nbp = nb + one;
    return FAST_OK;
}

/* parse_line's result for the line [p, e) (p at its first non-blank byte,
 * not '#'; the byte at e is '\n', '\r' or ' '; FAST_SLACK + 64 bytes
 * readable past e), or FAST_NO (nothing committed). For each 64-byte block:
 * the blank mask gives the tokens' starts (a non-blank after a blank), so no
 * token's loads wait for the token before it; then each token is converted.
 * Compiled for SSE2 (SSE4.1 where the build allows) and for AVX2. */
#define FAST_LINE_PADDED(NAME, ATTR, BLANKS64, SCAN32)                                                     \
static ATTR int NAME(const char *p, const char *e, size_t lim, uint32_t *vid, float *vv, uint32_t *bid,   \
                     struct line_out *o)                                                                   \
{                                                                                                          \
    const size_t len = (size_t)(e - p);                                                                    \
    size_t nv = 0, nb = 0;                                                                                 \
    uint64_t prev_blank = 0;               /* p is a token's start, handled first */                       \
    size_t base = 0;                                                                                       \
    {                                      /* a first token without ':' is the label */                    \
        struct win w;                                                                                      \
        SCAN32(p, &w);                                                                                     \
        if (WISP_UNLIKELY(!w.term)) return FAST_NO;                                                        \
        unsigned L = (unsigned)__builtin_ctz(w.term);                                                      \
        if (!(w.colon & ((1u << L) - 1))) {                                                                \
            double lv;                                                                                     \
            if (fast_decimal(p, L, w.digit, w.dot, &lv) != FAST_OK) return FAST_NO;                        \
        } else prev_blank = 1;             /* no label: the first token is a feature */                    \
    }                                                                                                      \
    for (; base < len; base += 64) {                                                                       \
        uint64_t ctl, B = BLANKS64(p + base, &ctl);                                                        \
        if (len - base < 64) {                                        /* past the line end: blank */       \
            uint64_t past = ~0ull << (len - base);                                                         \
            B |= past;                                                                                     \
            ctl &= ~past;                                                                                  \
        }                                                                                                  \
        uint64_t S = ~B & ((B << 1) | prev_blank);                    /* non-blank after a blank */        \
        prev_blank = B >> 63;                                                                              \
        if (WISP_UNLIKELY(ctl || nv + nb + (size_t)__builtin_popcountll(S) > lim)) return FAST_NO;         \
        while (S) {                                                                                        \
            const char *s = p + base + (size_t)__builtin_ctzll(S);                                         \
            S &= S - 1;                                                                                    \
            struct win w;                                                                                  \
            SCAN32(s, &w);                                                                                 \
            int r = fast_token(s, &w, &nv, &nb, vid, vv, bid);                                             \
            if (WISP_UNLIKELY(r != FAST_OK)) {                                                             \
                if (r == FAST_COMMENT) goto done;                     /* a comment ends the line */        \
                return FAST_NO;                                                                            \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
done:                                                                                                      \
    o->nv = nv;                                                                                            \
    o->nb = nb;                                                                                            \
    return FAST_OK;                                                                                        \
}

FAST_LINE_PADDED(fast_line_padded_sse2, , blanks64_sse2, scan32_sse2)
#if HAVE_AVX2_PATH
FAST_LINE_PADDED(fast_line_padded_avx2, AVX2_TARGET, blanks64_avx2, scan32_avx2)
#endif

static inline int fast_line_padded(const char *p, const char *e, size_t lim, uint32_t *vid, float *vv, uint32_t *bid,
                                   struct line_out *o)
{
#if HAVE_AVX2_PATH
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2"))
        return fast_line_padded_avx2(p, e, lim, vid, vv, bid, o);
#endif
    return fast_line_padded_sse2(p, e, lim, vid, vv, bid, o);
}

/* fast_line_padded in place where the text allows it, else on a padded
 * copy of a short line (the last lines of a text, single-line calls); long
 * lines near the text's end go to parse_line. */
static int fast_line(const char *p, const char *e, const char *bufend, size_t lim,
                     uint32_t *vid, float *vv, uint32_t *bid, struct line_out *o)
{
    size_t len = (size_t)(e - p);
    if (WISP_LIKELY(bufend - e >= 64 + FAST_SLACK)) return fast_line_padded(p, e, lim, vid, vv, bid, o);
    if (len > 1024) return FAST_NO;
    char buf[1024 + 64 + FAST_SLACK];
    memcpy(buf, p, len);
    memset(buf + len, ' ', 64 + FAST_SLACK);
    return fast_line_padded(buf, buf + len, lim, vid, vv, bid, o);
}
#else
#define HAVE_FAST_PATH 0
#endif

/* spec/c/test_parse_fast.c turns the fast path off to compare it with parse_line. */
int wisp__libsvm_fast_path(int on);
static int fast_path_on = HAVE_FAST_PATH;
int wisp__libsvm_fast_path(int on)
{
    return __atomic_exchange_n(&fast_path_on, on && HAVE_FAST_PATH, __ATOMIC_RELAXED);
}

/* Append an empty row marked bad. On failure nothing changed. */
static int add_bad_row(wisp_batch *b, uint64_t line, const char *msg)
{
    uint32_t *ids, *scratch;
    float *vals;
    int st = wisp__batch_reserve_line(b, 0, &ids, &vals, &scratch);
    if (st == WISP_OK) st = wisp__batch_commit_line(b, 0, 0);
    if (st != WISP_OK) return st;
    st = wisp__batch_mark_bad(b, b->rows - 1, line, msg);
    if (st != WISP_OK) b->rows--;              /* the empty row goes again; counts are as before */
    return st;
}

/* wisp__parse_text_rows' body: inlined into wisp_batch_parse_libsvm, whose first() and row() then inline too. */
static inline __attribute__((always_inline)) int text_rows(wisp_batch *b, const char *text, size_t len, int final,
                                                           size_t max_rows, uint64_t *line_no, size_t *consumed,
                                                           const wisp__text_rows *fn)
{
    uint64_t ln = line_no ? *line_no : 0;
    size_t pos = 0, added = 0;
    int st = WISP_OK;
    char msg[320];

    while (pos < len && (max_rows == 0 || added < max_rows)) {
        const char *s = text + pos, *e = NULL, *p = NULL;
        size_t next = 0;
        const int cut = wisp__next_line(text, len, pos, final, ln, &e, &next);
        if (cut <= 0) { st = cut; break; }       /* more text needed (WISP_OK), or a line too long */
        uint64_t this_line = ln + 1;
        size_t L = (size_t)(e - s);
        int bad = 0;
        if (WISP_UNLIKELY(L > WISP_MAX_LINE_BYTES)) {
            snprintf(msg, sizeof msg, "line %llu: longer than WISP_MAX_LINE_BYTES (%u bytes), at column %u",
                     (unsigned long long)this_line, WISP_MAX_LINE_BYTES, WISP_MAX_LINE_BYTES + 1);
            bad = 1;
        } else {
            if (e > s && e[-1] == '\r') e--;
            if (!(p = fn->first(s, e))) { ln = this_line; pos = next; continue; }   /* no row */
        }
        if (b->rows >= WISP_MAX_ROWS) {
            st = wisp__fail(WISP_ELIMIT, "line %llu: the batch already holds WISP_MAX_ROWS (%u) rows",
                           (unsigned long long)this_line, WISP_MAX_ROWS);
            break;
        }
        if (!bad && (st = fn->row(fn->ctx, b, s, p, e, text + len, this_line, &bad, msg, sizeof msg)) != WISP_OK)
            break;
        if (bad && (st = add_bad_row(b, this_line, msg)) != WISP_OK) {
            wisp__fail_context(st, "line %llu", (unsigned long long)this_line);
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

int wisp__parse_text_rows(wisp_batch *b, const char *text, size_t len, int final, size_t max_rows,
                          uint64_t *line_no, size_t *consumed, const wisp__text_rows *fn)
{
    return text_rows(b, text, len, final, max_rows, line_no, consumed, fn);
}

/* A libsvm line's row starts at its first non-blank byte; a blank line or a comment makes none. */
static const char *libsvm_first(const char *s, const char *e)
{
    const char *p = s;
    while (p < e && is_blank(*p)) p++;
    return p == e || *p == '#' ? NULL : p;
}

struct libsvm_ctx {
    int fast_on;                 /* the fast path, read once a call */
    struct line_out o;
};

/* The row of line number `line` (s its start, its text at p..e): straight into the batch's arrays. */
static int libsvm_row(void *vctx, wisp_batch *b, const char *s, const char *p, const char *e, const char *bufend,
                      uint64_t line, int *bad, char *msg, size_t msg_len)
{
    struct libsvm_ctx *c = vctx;
    size_t lim = WISP_MAX_ROW_FEATURES;
    int row_lim = 1;
    if (WISP_MAX_NNZ - b->nnz < lim) { lim = WISP_MAX_NNZ - b->nnz; row_lim = 0; }
    size_t nfeat = (size_t)(e - p) / 2 + 1;
    if (nfeat > lim) nfeat = lim;
    uint32_t *vid, *bid;
    float *vv;
    int st = wisp__batch_reserve_line(b, nfeat, &vid, &vv, &bid);
    if (st != WISP_OK) return wisp__fail_context(st, "line %llu", (unsigned long long)line);
    int r = LINE_BAD;
#if HAVE_FAST_PATH
    if (WISP_LIKELY(c->fast_on)) r = fast_line(p, e, bufend, lim, vid, vv, bid, &c->o) == FAST_OK ? LINE_OK : LINE_BAD;
    if (r != LINE_OK)
#endif
        r = parse_line(p, e, bufend, lim, row_lim, vid, vv, bid, &c->o);
    if (r == LINE_OK) {
        if ((st = wisp__batch_commit_line(b, c->o.nv, c->o.nb)) != WISP_OK)
            return wisp__fail_context(st, "line %llu", (unsigned long long)line);
    } else if (r == LINE_LIMIT) {
        return wisp__fail(WISP_ELIMIT, "line %llu: the batch would hold more than WISP_MAX_NNZ (%u) features",
                          (unsigned long long)line, WISP_MAX_NNZ);
    } else {
        snprintf(msg, msg_len, "line %llu: %s, at column %zu", (unsigned long long)line, c->o.what,
                 (size_t)(c->o.err_at - s) + 1);
        *bad = 1;
    }
    return WISP_OK;
}

int wisp_batch_parse_libsvm(wisp_batch *b, const char *text, size_t len, int final,
                            size_t max_rows, uint64_t *line_no, size_t *consumed)
{
    static const char fn[] = "wisp_batch_parse_libsvm";
    if (consumed) *consumed = 0;
    if (!b) return wisp__fail(WISP_EINVAL, "%s: batch is NULL", fn);
    if (b->wrapped) return wisp__fail(WISP_ESTATE, "%s: the batch wraps caller arrays and cannot grow", fn);
    if (!text && len) return wisp__fail(WISP_EINVAL, "%s: text is NULL", fn);
    struct libsvm_ctx c;
    c.fast_on = 0;
#if HAVE_FAST_PATH
    c.fast_on = __atomic_load_n(&fast_path_on, __ATOMIC_RELAXED);
#endif
    const wisp__text_rows rows = { libsvm_first, libsvm_row, &c };
    return text_rows(b, text, len, final, max_rows, line_no, consumed, &rows);
}
