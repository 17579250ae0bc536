/* textnum.h — private: decimal text to numbers, the one module every text reader
 * uses (engine/parse/libsvm.c, engine/parse/vw_text.c, engine/parse/csv.c, engine/parse/jsonl.c; the column
 * description's integers in engine/transform/columns.c). Three roundings, one per peer a
 * reader must match bit for bit, all built from the same pieces here:
 *   - wisp__textnum_f32: strtof's single rounding to float32 (TensorFlow's
 *     decode_csv, absl::SimpleAtof): the CSV/TSV readers;
 *   - wisp__textnum_f64: strtod (json.loads; then the caller rounds to
 *     float32, as numpy does): the JSON-lines reader; and libsvm's
 *     (float)strtod (LIBLINEAR reads values with strtod), whose inline
 *     token parser uses wisp__textnum_clinger and wisp__textnum_strtod;
 *   - VW's own parseFloat (engine/parse/vw_text.c), which is not correctly rounded and
 *     must not be: it falls back to wisp__textnum_strtof as VW does.
 * Every slow path is strtod/strtof in the C locale (strtod_l): a host process
 * that set LC_NUMERIC (a Python or nginx embedding) cannot turn "1.5" into 1.
 * spec/c/test_textnum.c checks each against the C library on random and edge
 * inputs. */
#ifndef WISP_TEXTNUM_H
#define WISP_TEXTNUM_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The longest number token the slow paths take (a NUL-terminated copy on the stack). */
#define WISP_TEXTNUM_MAX_TOKEN 511

extern const double wisp__pow10_exact[23];     /* 10^0 .. 10^22: exact doubles */
extern const float  wisp__pow10f_exact[11];    /* 10^0 .. 10^10: exact floats */

/* The leading decimal digits of the 8 bytes at p (all readable): returns how
 * many (0..8) and their value in *val. Eight digits at once (SWAR): no
 * per-digit branch. */
static inline __attribute__((always_inline)) unsigned wisp__textnum_swar8(const char *p, uint64_t *val)
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

/* Clinger's fast path: m * 10^exp10 as the correctly rounded double (strtod's
 * answer) when m < 2^53 and |exp10| <= 22 (one exact multiply or divide of
 * two exact doubles); false otherwise (m == 0 is the caller's: +-0.0). */
static inline __attribute__((always_inline)) bool wisp__textnum_clinger(uint64_t m, long exp10, bool neg, double *out)
{
    if (m >= (1ull << 53) || exp10 < -22 || exp10 > 22) return false;
    double v = (double)m;
    v = exp10 < 0 ? v / wisp__pow10_exact[-exp10] : v * wisp__pow10_exact[exp10];
    *out = neg ? -v : v;
    return true;
}

/* The decimal at s[0..len) (no blanks): sign, mantissa (up to 19 significant
 * digits kept, *nsig of them), decimal exponent. False when the text is not
 * [+-](d+[.d*]|.d+)([eE][+-]d+)?. */
bool wisp__textnum_scan(const char *s, size_t len, bool *neg, uint64_t *mant, int *nsig, long *exp10);
/* s[0..len) without surrounding white space (space, \t, \r, \n, \v, \f). */
void wisp__textnum_trim(const char **s, size_t *len);

/* Decimal text -> float32 rounded once (as strtof): fast for short
 * decimals, strtof otherwise; surrounding white space allowed; accepts
 * nan/inf/infinity (any case, signed) when `words`. Returns 0 on success, -1
 * when the text is not a number (or longer than WISP_TEXTNUM_MAX_TOKEN and
 * off the fast path). */
int    wisp__textnum_f32(const char *s, size_t len, int words, float *out);
/* A number already validated (a JSON number token) as a double, exactly as
 * strtod; at most WISP_TEXTNUM_MAX_TOKEN bytes are read. */
double wisp__textnum_f64(const char *s, size_t len);
/* Decimal text -> int64 ([+-]digits, surrounding white space allowed).
 * 0 on success, -1 not a number, -2 out of range. */
int    wisp__textnum_i64(const char *s, size_t len, int64_t *out);

/* The slow paths: strtod / strtof in the C locale on a NUL-terminated copy
 * of s[0..len) (len <= WISP_TEXTNUM_MAX_TOKEN; longer text is cut there).
 * *used (may be NULL) is the number of bytes the C library read (0: none). */
double wisp__textnum_strtod(const char *s, size_t len, size_t *used);
float  wisp__textnum_strtof(const char *s, size_t len, size_t *used);
/* The C locale for strtod_l and friends (made once), or (locale_t)0 when it
 * cannot be made (out of memory); the slow paths then use the process's. */
locale_t wisp__textnum_c_locale(void);

#endif
