/* test_textnum.c — the text-number module (engine/parse/textnum.c) against the C library: strtof, strtod and strtoll on random and edge decimals (subnormals, 9+ digits, long mantissas, exponents, inf/nan words), and libsvm's values against (float)strtod through wisp_batch_parse_libsvm. */
#include "batch/batch.h"
#include "parse/json.h"
#include "parse/textnum.h"
#include "check.h"
#include "testrand.h"

#include <errno.h>
#include <locale.h>
#include <stdlib.h>

#define RANDOM_CASES 200000

static const char *const edge[] = {
    "0", "-0", "+0.0", "0.0e0", "1", "-1", "0.1", "1.5", "3.14159265", "1e0", "1E+2", "1e-2",
    "1.4e-45", "1.401298464324817e-45", "7e-46", "7.1e-46", "7.006492321624085e-46", "1e-46",
    "1.17549435e-38", "1.1754942e-38", "1.17549421e-38", "5.877472e-39", "1e-38", "1e-39", "1e-40",
    "3.4028235e38", "3.4028236e38", "3.40282357e38", "3.4028234663852886e38", "3.4028235677973366e38",
    "1e38", "1e39", "1e-50", "1e308", "1.7976931348623157e308", "1.7976931348623159e308", "1e309",
    "4.9406564584124654e-324", "2.4703282292062327e-324", "2.2250738585072011e-308", "2.2250738585072014e-308",
    "1.143291413784027", "9007199254740993", "9007199254740992.5", "123456789", "1234567890",
    "16777216", "16777217", "16777217.0000000001", "33554433", "0.000000000000000000000000000000000000000000001",
    "123456789012345678901234567890", "0.1234567890123456789012345", "1e23", "8.589973e9", "1e22", "1e-22",
    "00000000000000000001.5", "1.000000000000000000000000000000001", "0.999999999999999999999999999",
    "4294967295", "4294967296.5", "1e10", "1e-10", "1e11", "9.999999e9", ".5", "5.", "-.5e1", "1e+0038",
};

/* A random decimal in the reader's grammar: sign, 0..25 integer digits,
 * maybe a point and 0..25 fraction digits (at least one digit), maybe an
 * exponent aimed at float32's range ends. json: JSON's stricter grammar. */
static size_t random_decimal(char *buf, bool json)
{
    size_t n = 0;
    unsigned r = (unsigned)rnd();
    if (r & 1) buf[n++] = '-';
    else if (!json && (r & 6) == 2) buf[n++] = '+';
    size_t ni = rnd() % 26, nf = (rnd() & 1) ? rnd() % 26 : 0;
    if (json && ni == 0) ni = 1;
    if (!json && ni == 0 && nf == 0) ni = 1;
    for (size_t i = 0; i < ni; i++) {
        char d = (char)('0' + rnd() % 10);
        if (json && i == 0 && ni > 1 && d == '0') d = '1';
        buf[n++] = d;
    }
    if (nf || (!json && (rnd() & 7) == 0)) {
        buf[n++] = '.';
        if (json && !nf) nf = 1;
        for (size_t i = 0; i < nf; i++) buf[n++] = (char)('0' + rnd() % 10);
    }
    if (rnd() & 1) {
        static const int aims[] = { 0, 5, 10, 22, 23, 30, 37, 38, 39, 40, 44, 45, 46, 50, 300, 308, 320, 330 };
        int e = aims[rnd() % (sizeof aims / sizeof aims[0])] + (int)(rnd() % 5) - 2 - (int)ni;
        if (rnd() & 1) e = -e;
        n += (size_t)sprintf(buf + n, "%c%s%d", (rnd() & 1) ? 'e' : 'E', e >= 0 && (rnd() & 1) ? "+" : "", e);
    }
    buf[n] = '\0';
    return n;
}

static bool same_f32(float a, float b) { return !memcmp(&a, &b, 4) || (isnan(a) && isnan(b)); }
static bool same_f64(double a, double b) { return !memcmp(&a, &b, 8) || (isnan(a) && isnan(b)); }

static void test_f32(void)
{
    char buf[128];
    size_t bad = 0, n = sizeof edge / sizeof edge[0];
    for (size_t i = 0; i < n + RANDOM_CASES; i++) {
        const char *s = i < n ? edge[i] : buf;
        size_t len = i < n ? strlen(s) : random_decimal(buf, false);
        float want = strtof(s, NULL), got;
        if (wisp__textnum_f32(s, len, 0, &got) != 0 || !same_f32(got, want))
            if (bad++ < 5) fprintf(stderr, "wisp__textnum_f32('%s') = %.9g, strtof %.9g\n", s, (double)got, (double)want);
    }
    CHECK_MSG(bad == 0, "%zu of %zu decimals differ from strtof", bad, n + RANDOM_CASES);
    /* surrounding white space, as decode_csv allows */
    float f;
    CHECK(wisp__textnum_f32("  1.25\t", 7, 0, &f) == 0 && f == 1.25f);
    /* the words: accepted only when asked, any case, signed */
    static const struct { const char *s; int cls; } words[] = {
        { "nan", 0 }, { "NaN", 0 }, { "-nan", 0 }, { "inf", 1 }, { "+Inf", 1 }, { "infinity", 1 },
        { "INFINITY", 1 }, { "-inf", -1 }, { "-Infinity", -1 },
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        const char *s = words[i].s;
        CHECK_MSG(wisp__textnum_f32(s, strlen(s), 0, &f) == -1, "'%s' without words", s);
        int rc = wisp__textnum_f32(s, strlen(s), 1, &f);
        bool ok = rc == 0 && (words[i].cls == 0 ? isnan(f) : f == (words[i].cls > 0 ? INFINITY : -INFINITY));
        CHECK_MSG(ok, "'%s' with words: rc %d, %g", s, rc, (double)f);
    }
    static const char *const junk[] = { "", " ", "+", "-", ".", "e5", "1e", "1e+", "1.2.3", "0x10", "1,5", "infinit", "nana", "1 2", "--1" };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        CHECK_MSG(wisp__textnum_f32(junk[i], strlen(junk[i]), 1, &f) == -1, "'%s' parsed", junk[i]);
    /* off the fast path, a token longer than the slow path's copy is refused, never cut */
    char longnum[WISP_TEXTNUM_MAX_TOKEN + 8];
    memset(longnum, '1', sizeof longnum);
    CHECK(wisp__textnum_f32(longnum, sizeof longnum, 0, &f) == -1);
}

static void test_f64(void)
{
    char buf[128];
    size_t bad = 0, n = 0;
    for (size_t i = 0; i < RANDOM_CASES; i++) {
        size_t len = random_decimal(buf, true);
        if (len != wisp__json_number_len(buf, buf + len)) continue;
        n++;
        double want = strtod(buf, NULL), got = wisp__textnum_f64(buf, len);
        if (!same_f64(got, want) && bad++ < 5) fprintf(stderr, "wisp__textnum_f64('%s') = %.17g, strtod %.17g\n", buf, got, want);
    }
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        const char *s = edge[i];
        if (strlen(s) != wisp__json_number_len(s, s + strlen(s))) continue;
        n++;
        double want = strtod(s, NULL), got = wisp__textnum_f64(s, strlen(s));
        if (!same_f64(got, want) && bad++ < 5) fprintf(stderr, "wisp__textnum_f64('%s') = %.17g, strtod %.17g\n", s, got, want);
    }
    CHECK_MSG(n > RANDOM_CASES / 2, "only %zu JSON numbers made", n);
    CHECK_MSG(bad == 0, "%zu of %zu JSON numbers differ from strtod", bad, n);
}

static void test_i64(void)
{
    char buf[64];
    size_t bad = 0;
    for (size_t i = 0; i < RANDOM_CASES; i++) {
        size_t n = 0, nd = 1 + rnd() % 21;
        if (rnd() & 1) buf[n++] = (rnd() & 1) ? '-' : '+';
        for (size_t k = 0; k < nd; k++) buf[n++] = (char)('0' + rnd() % 10);
        buf[n] = '\0';
        errno = 0;
        long long want = strtoll(buf, NULL, 10);
        int want_rc = errno == ERANGE ? -2 : 0;
        int64_t got = 0;
        int rc = wisp__textnum_i64(buf, n, &got);
        if ((rc != want_rc || (rc == 0 && got != want)) && bad++ < 5)
            fprintf(stderr, "wisp__textnum_i64('%s') = %d/%lld, strtoll %d/%lld\n", buf, rc, (long long)got, want_rc, want);
    }
    CHECK_MSG(bad == 0, "%zu of %d integers differ from strtoll", bad, RANDOM_CASES);
    int64_t v;
    CHECK(wisp__textnum_i64("9223372036854775807", 19, &v) == 0 && v == INT64_MAX);
    CHECK(wisp__textnum_i64("-9223372036854775808", 20, &v) == 0 && v == INT64_MIN);
    CHECK(wisp__textnum_i64("9223372036854775808", 19, &v) == -2);
    CHECK(wisp__textnum_i64("1e3", 3, &v) == -1);
    CHECK(wisp__textnum_i64("", 0, &v) == -1);
}

/* libsvm's values are (float)strtod(token): through the whole reader (its
 * fast line path and the reference), random tokens in one text. */
static void test_libsvm(wisp_engine *eng)
{
    enum { N = 20000 };
    char (*tok)[128] = malloc(sizeof *tok * N);
    char *text = malloc((size_t)N * 140);
    wisp_batch *b = NULL;
    CHECK(tok && text);
    if (!tok || !text) goto done;
    size_t len = 0;
    for (size_t i = 0; i < N; i++) {
        size_t n = random_decimal(tok[i], false);
        if (n > 100 || !strcmp(tok[i], "-") ) { strcpy(tok[i], "2.5"); n = 3; }
        len += (size_t)sprintf(text + len, "1 7:%s\n", tok[i]);
    }
    CHECK_OK(wisp_batch_new(eng, &b));
    if (!b) goto done;
    size_t used = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, text, len, 1, 0, NULL, &used));
    CHECK(used == len && wisp_batch_rows(b) == N);
    size_t bad = 0, kb = 0, nbad = wisp_batch_bad_count(b);
    for (size_t r = 0; r < N && r < wisp_batch_rows(b); r++) {
        float want = (float)strtod(tok[r], NULL);
        size_t brow = SIZE_MAX;
        if (kb < nbad) wisp_batch_bad_row(b, kb, &brow, NULL, NULL);
        if (brow == r) {                      /* refused: only a value that is not a finite float32 */
            kb++;
            if (isfinite(want) && bad++ < 5) fprintf(stderr, "libsvm refused '%s' (strtod: %.9g)\n", tok[r], (double)want);
            continue;
        }
        bool valued = b->val_ptr && b->val_ptr[r + 1] > b->val_ptr[r];
        float got = valued ? b->vals[b->val_ptr[r]] : 1.0f;
        bool present = b->indptr[r + 1] > b->indptr[r];
        if (!present) got = 0.0f;                 /* a zero value adds no feature */
        if (!(same_f32(got, want) || (!present && want == 0.0f)) && bad++ < 5)
            fprintf(stderr, "libsvm '%s' = %.9g, (float)strtod %.9g\n", tok[r], (double)got, (double)want);
    }
    CHECK_MSG(bad == 0, "%zu of %d libsvm values differ from (float)strtod", bad, N);
done:
    wisp_batch_free(b);
    free(tok);
    free(text);
}

/* The slow paths read in the C locale whatever the process set (where a
 * locale with a decimal comma is installed). */
static void test_locale(void)
{
    static const char *const commas[] = { "de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", NULL };
    const char *set = NULL;
    for (size_t i = 0; commas[i] && !set; i++) set = setlocale(LC_NUMERIC, commas[i]);
    if (!set) { printf("test_textnum: no decimal-comma locale installed; the locale check skipped\n"); return; }
    float f;
    CHECK(wisp__textnum_f32("1.0000000001e-40", 16, 0, &f) == 0 && same_f32(f, 1.0000000001e-40f));
    CHECK(wisp__textnum_f64("1.5e300", 7) == 1.5e300);
    size_t used;
    CHECK(wisp__textnum_strtof("2.75", 4, &used) == 2.75f && used == 4);
    setlocale(LC_NUMERIC, "C");
}

int main(void)
{
    testrand_seed("test_textnum");
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(1, &eng));
    test_f32();
    test_f64();
    test_i64();
    if (eng) test_libsvm(eng);
    test_locale();
    wisp_engine_free(eng);
    return CHECK_DONE("test_textnum");
}
