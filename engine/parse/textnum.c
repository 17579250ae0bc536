/* textnum.c — decimal text to numbers for every text reader: the decimal
 * scanner, strtof's and strtod's roundings with Clinger's fast paths, int64,
 * and the C-locale slow paths (textnum.h says which reader uses which, and why
 * they differ). */
#include "core/core.h"
#include "parse/textnum.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const float wisp__pow10f_exact[11] = { 1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f };
const double wisp__pow10_exact[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22
};

static inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void) { c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

locale_t wisp__textnum_c_locale(void)
{
    pthread_once(&c_locale_once, make_c_locale);
    return c_locale;
}

/* s[0..len) as a NUL-terminated copy in buf (cut at WISP_TEXTNUM_MAX_TOKEN). */
static void token_copy(char buf[WISP_TEXTNUM_MAX_TOKEN + 1], const char *s, size_t len)
{
    if (len > WISP_TEXTNUM_MAX_TOKEN) len = WISP_TEXTNUM_MAX_TOKEN;
    memcpy(buf, s, len);
    buf[len] = '\0';
}

double wisp__textnum_strtod(const char *s, size_t len, size_t *used)
{
    char buf[WISP_TEXTNUM_MAX_TOKEN + 1], *end;
    token_copy(buf, s, len);
    locale_t c = wisp__textnum_c_locale();
    double d = c ? strtod_l(buf, &end, c) : strtod(buf, &end);
    if (used) *used = (size_t)(end - buf);
    return d;
}

float wisp__textnum_strtof(const char *s, size_t len, size_t *used)
{
    char buf[WISP_TEXTNUM_MAX_TOKEN + 1], *end;
    token_copy(buf, s, len);
    locale_t c = wisp__textnum_c_locale();
    float f = c ? strtof_l(buf, &end, c) : strtof(buf, &end);
    if (used) *used = (size_t)(end - buf);
    return f;
}

/* The decimal at s[0..len): sign, mantissa digits (up to 19 kept), decimal
 * exponent. Returns false when the text is not [+-](d+[.d*]|.d+)([eE][+-]d+)?. */
bool wisp__textnum_scan(const char *s, size_t len, bool *neg, uint64_t *mant, int *ndig, long *exp10)
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

void wisp__textnum_trim(const char **s, size_t *len)
{
    const char *p = *s, *e = p + *len;
    while (p < e && is_space(*p)) p++;
    while (e > p && is_space(e[-1])) e--;
    *s = p;
    *len = (size_t)(e - p);
}

int wisp__textnum_f32(const char *s, size_t len, int words, float *out)
{
    wisp__textnum_trim(&s, &len);
    bool neg;
    uint64_t m;
    int nsig;
    long ex;
    if (!wisp__textnum_scan(s, len, &neg, &m, &nsig, &ex)) {
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
        f = ex < 0 ? f / wisp__pow10f_exact[-ex] : f * wisp__pow10f_exact[ex];
        *out = neg ? -f : f;
        return 0;
    }
    if (len > WISP_TEXTNUM_MAX_TOKEN) return -1;
    *out = wisp__textnum_strtof(s, len, NULL);
    return 0;
}

/* A JSON number (already validated) as a double, exactly as strtod. */
double wisp__textnum_f64(const char *s, size_t len)
{
    bool neg;
    uint64_t m;
    int nsig;
    long ex;
    if (wisp__textnum_scan(s, len, &neg, &m, &nsig, &ex)) {
        if (m == 0) return neg ? -0.0 : 0.0;
        double d;
        if (wisp__textnum_clinger(m, ex, neg, &d)) return d;
    }
    return wisp__textnum_strtod(s, len, NULL);
}

int wisp__textnum_i64(const char *s, size_t len, int64_t *out)
{
    wisp__textnum_trim(&s, &len);
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
