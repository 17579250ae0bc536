/* test_parse_fast.c — the libsvm parser's fast path against its reference path (parse_line) and strtod/strtof, on random lines. */
#include "batch/raw.h"
#include "check.h"
#include "testutil.h"
#include "testrand.h"
#include "testbatch.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* libsvm.c: turns its fast path off (0) or on (1); returns the old setting */
int wisp__libsvm_fast_path(int on);
/* csv.c: the same for its per-call field plan (the common fields' fast path) */
#include "parse/rawtext.h"               /* wisp__csv_plan */



/* ---- random tokens: mostly the fast path's forms, often near its edges, sometimes not ---- */

static void gen_digits(str *o, int n)
{
    for (int i = 0; i < n; i++) { char c = (char)('0' + rndn(10)); sput(o, &c, 1); }
}

static void gen_id(str *o)
{
    switch (rndn(10)) {
    case 0: { static const char *edge[] = { "0", "1", "4294967294", "4294967295", "4294967296", "18446744073709551615",
                                            "18446744073709551616", "99999999999999999999", "0000000000000000000007",
                                            "9999999999999999", "10000000000000000", "00", "12345678", "123456789" };
              sputs(o, edge[rndn(sizeof edge / sizeof edge[0])]); return; }
    case 1: gen_digits(o, 1 + (int)rndn(24)); return;           /* any length, past 16 and 20 digits */
    case 2: sprintf_(o, "%" PRIu64, rnd()); return;
    default: sprintf_(o, "%" PRIu64, rnd() % (rndn(2) ? 100000 : 100000000)); return;
    }
}

static void gen_value(str *o)
{
    switch (rndn(16)) {
    case 0: { static const char *odd[] = { "1", "1.0", "1.", "01", "+1", "-1", "0", "-0", "+0", "0.0", "-0.0", ".5", "5.",
                                           "-.5", "1e0", "1E+0", "1e-50", "1e39", "-1e39", "3.4028235e38", "3.4028236e38",
                                           "1e-45", "1.4e-45", "7e-46", "1e-38", "1.17549435e-38", "2e-39", "nan", "NaN",
                                           "inf", "-inf", "Infinity", "0x10", "1.2.3", "--1", "+-1", "1e", "1e+", ".",
                                           "-", "+", "1,5", "1:2", "1.0000000596046448", "1.000000059604644775390626",
                                           "1.143291413784027", "7.743844270706177", "0.1392200067639351",
                                           "9007199254740993", "9007199254740992", "0.000000000001", "0.0000000000001",
                                           "123456789012345678901234567890", "0.30000001192092896" };
              sputs(o, odd[rndn(sizeof odd / sizeof odd[0])]); return; }
    case 1: {                                                      /* an exponent */
        if (rndn(3) == 0) sputs(o, "-");
        gen_digits(o, 1 + (int)rndn(8));
        if (rndn(2)) { sputs(o, "."); gen_digits(o, (int)rndn(8)); }
        sprintf_(o, "%s%s%d", rndn(2) ? "e" : "E", rndn(2) ? "-" : rndn(2) ? "+" : "", (int)rndn(rndn(4) ? 40 : 400));
        return;
    }
    case 2: {                                                      /* long: 13..24 digits around the dot */
        if (rndn(3) == 0) sputs(o, rndn(2) ? "-" : "+");
        int ip = (int)rndn(20), nf = (int)rndn(20);
        if (ip + nf == 0) ip = 1;
        gen_digits(o, ip);
        if (nf || rndn(2)) { sputs(o, "."); gen_digits(o, nf); }
        return;
    }
    case 3: sprintf_(o, "%.17g", (rnd01() - 0.5) * pow(10, (double)rndn(30) - 15)); return;   /* repr-like */
    case 4: sprintf_(o, "%.9g", (double)(float)((rnd01() - 0.5) * pow(10, (double)rndn(12) - 6))); return;
    default: {                                                     /* the common short decimals */
        if (rndn(5) == 0) sputs(o, rndn(4) ? "-" : "+");
        int ip = (int)rndn(4), nf = (int)rndn(rndn(4) ? 8 : 14);
        if (ip + nf == 0) ip = 1;
        if (ip == 0 && rndn(2)) ip = 1, sputs(o, "0");
        else gen_digits(o, ip);
        if (nf) { sputs(o, "."); gen_digits(o, nf); }
        else if (rndn(8) == 0) sputs(o, ".");
        return;
    }
    }
}

static const char *blank(void)
{
    static const char *b[] = { " ", " ", " ", " ", "\t", "  ", " \t ", "                                        " };
    return b[rndn(sizeof b / sizeof b[0])];
}

/* One line (without its end). About 1 in 8 lines is malformed somewhere. */
static void gen_line(str *o)
{
    int kind = (int)rndn(100);
    if (kind < 2) { sputs(o, rndn(2) ? "" : " \t "); return; }
    if (kind < 4) { sputs(o, rndn(2) ? "# comment 1:2" : "  #x 3:4"); return; }
    if (rndn(6) == 0) sputs(o, blank());
    static const char *labels[] = { "1", "-1", "+1", "0", "0.5", "2e0", "-1.25", "1.", ".5", "x", "1e999", "nan", "+", "3#" };
    int label = rndn(5) != 0;
    if (label) sputs(o, labels[rndn(rndn(8) ? 7 : sizeof labels / sizeof labels[0])]);
    size_t n = rndn(6) == 0 ? rndn(300) : rndn(45);         /* long lines cross 64-byte blocks and 4 KiB chunks */
    int bad = rndn(8) == 0;
    for (size_t i = 0; i < n; i++) {
        if (i || label) sputs(o, blank());
        if (bad && rndn(n + 1) == 0) {
            static const char *junk[] = { "abc", "3:", "3:x", "3:1:2", "-3:1", ":7", "4:-", "5:.e3", "3\x01:1", "3:1\x0b",
                                          "3:\r1", "3\r", "#inline 5:5", "7 :1", "8: 1", "9:1#", "\xff:1", "3:1\x00" };
            size_t k = rndn(sizeof junk / sizeof junk[0]);
            sput(o, junk[k], k == sizeof junk / sizeof junk[0] - 1 ? 4 : strlen(junk[k]));
            continue;
        }
        gen_id(o);
        int form = (int)rndn(10);
        if (form == 0 && !(i == 0 && !label)) continue;          /* a bare id (a bare first token is the label) */
        sputs(o, ":");
        if (form < 5) sputs(o, "1");
        else gen_value(o);
    }
    if (rndn(12) == 0) { sputs(o, blank()); sputs(o, "# trailing 5:6"); }
    else if (rndn(10) == 0) sputs(o, blank());
}

/* ---- the comparison ----------------------------------------------------------------------- */

typedef struct { int st; size_t consumed; uint64_t lines; char err[256]; } run_out;

static run_out parse(wisp_batch *b, const char *t, size_t len, int final, size_t max_rows, uint64_t line0)
{
    run_out r = { 0, 0, line0, "" };
    wisp_batch_clear(b);
    r.st = wisp_batch_parse_libsvm(b, t, len, final, max_rows, &r.lines, &r.consumed);
    if (r.st) snprintf(r.err, sizeof r.err, "%s", wisp_errmsg());
    return r;
}


/* fast vs reference on one text, whole and with limits; returns 1 when equal */
static int compare_text(wisp_batch *fa, wisp_batch *sl, const char *t, size_t len, int final, size_t max_rows)
{
    char why[320] = "";
    wisp__libsvm_fast_path(1);
    run_out a = parse(fa, t, len, final, max_rows, 7);
    wisp__libsvm_fast_path(0);
    run_out b = parse(sl, t, len, final, max_rows, 7);
    wisp__libsvm_fast_path(1);
    int ok = a.st == b.st && a.consumed == b.consumed && a.lines == b.lines && !strcmp(a.err, b.err)
             && same_batches(fa, sl, why, sizeof why);
    if (!ok) {
        static int shown;
        if (shown++ < 3) {
            fprintf(stderr, "fast %d/%zu/%llu '%s' vs reference %d/%zu/%llu '%s' (%s) on %zu bytes:\n", a.st, a.consumed,
                    (unsigned long long)a.lines, a.err, b.st, b.consumed, (unsigned long long)b.lines, b.err, why, len);
            fwrite(t, 1, len < 2000 ? len : 2000, stderr);
            fputc('\n', stderr);
        }
    }
    return ok;
}

static void test_random_texts(wisp_engine *eng, int ntexts)
{
    wisp_batch *fa, *sl;
    CHECK_OK(wisp_batch_new(eng, &fa));
    CHECK_OK(wisp_batch_new(eng, &sl));
    str t = {0};
    int bad = 0, k = 0;
    size_t lines = 0, bytes = 0;
    for (; k < ntexts && bad < 3; k++) {
        t.len = 0;
        size_t nl = 1 + rndn(rndn(4) ? 12 : 80);
        for (size_t i = 0; i < nl; i++) {
            gen_line(&t);
            if (i + 1 < nl || rndn(2)) sputs(&t, rndn(6) == 0 ? "\r\n" : "\n");
        }
        lines += nl;
        bytes += t.len;
        /* the text as a whole, not final (the last line waits), and with a row limit */
        if (!compare_text(fa, sl, t.s, t.len, 1, 0)) bad++;
        if (!compare_text(fa, sl, t.s, t.len, 0, 0)) bad++;
        if (!compare_text(fa, sl, t.s, t.len, 1, 1 + rndn(nl))) bad++;
        /* a copy in an exactly sized buffer (no bytes readable past the end: ASan checks the padded-copy path) */
        char *exact = malloc(t.len ? t.len : 1);
        memcpy(exact, t.s, t.len);
        if (!compare_text(fa, sl, exact, t.len, 1, 0)) bad++;
        if (t.len) {                                               /* cut anywhere */
            size_t cut = rndn(t.len);
            if (!compare_text(fa, sl, exact, cut, rndn(2), 0)) bad++;
        }
        free(exact);
    }
    CHECK_MSG(bad == 0, "%d texts parse differently on the fast path", bad);
    printf("test_parse_fast: %d random texts (%zu lines, %zu bytes), %d parse differently on the fast path\n", k, lines,
           bytes, bad);
    free(t.s);
    wisp_batch_free(fa);
    wisp_batch_free(sl);
}

/* The fast path must take the common lines (else it is not fast). */
static void test_fast_path_taken(wisp_engine *eng)
{
    str t = {0};
    for (int r = 0; r < 20000; r++) {
        sputs(&t, rndn(2) ? "1" : "-1");
        for (int k = 0; k < 39; k++) {
            sprintf_(&t, " %d:", k < 13 ? k + 1 : (int)rndn(1u << 26));
            if (k < 13) sprintf_(&t, "%.6g", rnd01() * 10);
            else sputs(&t, "1");
        }
        sputs(&t, "\n");
    }
    wisp_batch *b;
    CHECK_OK(wisp_batch_new(eng, &b));
    double best[2] = { 1e30, 1e30 };
    for (int rep = 0; rep < 6; rep++) {
        wisp__libsvm_fast_path(rep & 1);
        wisp_batch_clear(b);
        uint64_t t0 = wisp__now_ns();
        CHECK_OK(wisp_batch_parse_libsvm(b, t.s, t.len, 1, 0, NULL, NULL));
        double s = (double)(wisp__now_ns() - t0) / 1e9;
        if (s < best[rep & 1]) best[rep & 1] = s;
    }
    wisp__libsvm_fast_path(1);
    printf("test_parse_fast: %zu bytes: fast path %.0f MB/s, reference path %.0f MB/s (%.2fx; timing only, not checked)\n",
           t.len, (double)t.len / best[1] / 1e6, (double)t.len / best[0] / 1e6, best[0] / best[1]);
    wisp_batch_free(b);
    free(t.s);
}

/* Values: exactly (float)strtod (the parser's contract); where the fast path
 * takes a value (<= 12 digits after the dot, no exponent, < 2^53), that is
 * also strtof's. Counts how often the two rules differ elsewhere. */
static void test_values_vs_libc(wisp_engine *eng)
{
    enum { N = 40000 };
    str t = {0}, one = {0};
    size_t *at = malloc(N * sizeof *at);
    for (int i = 0; i < N; i++) {
        sputs(&t, "0 5:");
        at[i] = t.len;
        one.len = 0;
        do { one.len = 0; gen_value(&one); } while (!isfinite((float)strtod(one.s, NULL)));
        sputs(&t, one.s);
        sputs(&t, "\n");
    }
    wisp_batch *b;
    CHECK_OK(wisp_batch_new(eng, &b));
    CHECK_OK(wisp_batch_parse_libsvm(b, t.s, t.len, 1, 0, NULL, NULL));
    const uint32_t *rp = wisp_batch_indptr(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    int wrong = 0, differ = 0, fast_form = 0, fast_differ = 0;
    size_t bi = 0, nbad = wisp_batch_bad_count(b);
    for (int i = 0; i < N; i++) {
        const char *num = t.s + at[i];
        int len = (int)strcspn(num, "\n");
        char tok[600];
        snprintf(tok, sizeof tok, "%.*s", len, num);
        size_t brow = (size_t)-1;
        if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, NULL, NULL);
        if (brow == (size_t)i) { bi++; continue; }                /* syntax the parser refuses ("1.", "1e") */
        float want = (float)strtod(tok, NULL), f32 = strtof(tok, NULL);
        float got = 1.0f;
        if (vp && vp[i + 1] > vp[i]) got = vals[vp[i]];
        if (memcmp(&got, &want, 4) || rp[i + 1] - rp[i] != 1) {
            if (wrong++ < 5) fprintf(stderr, "'%s': got %.9g, (float)strtod %.9g\n", tok, (double)got, (double)want);
        }
        differ += memcmp(&want, &f32, 4) != 0;
        /* the fast path's form: [+-]digits[.digits], at most 19 digits, 12 after the dot, below 2^53 */
        const char *p = tok + (*tok == '+' || *tok == '-');
        size_t ip = strspn(p, "0123456789"), nf = p[ip] == '.' ? strspn(p + ip + 1, "0123456789") : 0;
        size_t span = ip + (p[ip] == '.' ? 1 + nf : 0);
        if (p[span] == '\0' && ip + nf >= 1 && ip + nf <= 15 && nf <= 12) {
            fast_form++;
            if (memcmp(&want, &f32, 4)) {
                if (fast_differ++ < 5) fprintf(stderr, "'%s': (float)strtod %.9g != strtof %.9g\n", tok, (double)want, (double)f32);
            }
        }
    }
    CHECK_MSG(wrong == 0, "%d values differ from (float)strtod", wrong);
    CHECK_MSG(fast_differ == 0, "%d of %d fast-path-form values differ between strtof and (float)strtod", fast_differ, fast_form);
    CHECK(fast_form > N / 3);
    printf("test_parse_fast: %d values = (float)strtod; %d in the fast path's form, all = strtof; "
           "%d others where strtof differs (the double-rounding strings of gen_value)\n", N, fast_form, differ);
    /* the double-rounding examples: (float)strtod, not strtof (the contract); the fast path leaves them */
    static const char *dr[] = { "1.143291413784027", "7.743844270706177", "0.1392200067639351", "1.0000000596046448" };
    for (size_t k = 0; k < sizeof dr / sizeof dr[0]; k++) {
        char line[64];
        int n = snprintf(line, sizeof line, "0 5:%s\n", dr[k]);
        wisp_batch_clear(b);
        CHECK_OK(wisp_batch_parse_libsvm(b, line, (size_t)n, 1, 0, NULL, NULL));
        float want = (float)strtod(dr[k], NULL);
        if (want == 1.0f) CHECK(wisp_batch_nnz(b) == 1 && wisp_batch_nvals(b) == 0);   /* 1.0: stored as binary */
        else CHECK(wisp_batch_nvals(b) == 1 && memcmp(wisp_batch_vals(b), &want, 4) == 0);
        CHECK(want != strtof(dr[k], NULL));
    }
    wisp_batch_free(b);
    free(at);
    free(t.s);
    free(one.s);
}

/* Hand-picked lines where the two paths could part: each compared. */
static void test_edges(wisp_engine *eng)
{
    static const char *lines[] = {
        "1 1:1 2:0.5 3\n", "-1\t4:2 \t5:-0 6:+0.25\r\n", "+1 7:1.0 8:1. 9:.5\n", "0 0:1 4294967295:2 4294967296:3\n",
        "1 18446744073709551615:1\n", "1 18446744073709551616:1\n", "1 12345678901234567:1 1234567890123456:2\n",
        "1 5:1e-50\n", "1 5:1e39\n", "1 5:nan\n", "1 5:inf\n", "1 5:1e-45\n", "1 5:3.4028235e38\n", "1 5\n",
        "1 5:\n", "1 :5\n", "1 5::1\n", "1 5:1:1\n", "5:1 6:2\n", "5 6:1\n", "# all comment\n", "1 2:3 # c 4:5\n",
        "1 2:3#c\n", "1 2:3 #\n", "   \t  \n", "1 2:3 \r\n", "1 2:3\r4:5\n", "1 2:3\v4:5\n", "1 2:3\f\n",
        "1 2:0.1234567890123\n", "1 2:0.123456789012\n", "1 2:123456789012345.5\n", "1 2:9007199254740993\n",
        "1 2:12345678901234567890\n", "1 2:0000000000000000000000001.5\n", "1 2:-.5 3:-5. 4:+.5\n", "1 2:.\n",
        "1 2:-\n", "1 2:+\n", "1. 2:3\n", "x 2:3\n", "1e5 2:3\n", "nan 2:3\n", "1 2:3 ",
        "1 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:1\n", "1 2:11111111111111111111111111111111111111111111\n",
    };
    wisp_batch *fa, *sl;
    CHECK_OK(wisp_batch_new(eng, &fa));
    CHECK_OK(wisp_batch_new(eng, &sl));
    int bad = 0;
    str t = {0};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++) {
        t.len = 0;
        sputs(&t, lines[k]);
        if (!compare_text(fa, sl, t.s, t.len, 1, 0)) bad++;
        for (int r = 0; r < 3; r++) sputs(&t, "2 1:1 2:0.5 3:7\n");   /* then lines after it (the in-place path) */
        sputs(&t, lines[k]);
        for (int r = 0; r < 3; r++) sputs(&t, "2 1:1 2:0.5 3:7\n");
        if (!compare_text(fa, sl, t.s, t.len, 1, 0)) bad++;
    }
    /* a line of 3000 features (over the 4 KiB index chunk) with a bad token near the end */
    t.len = 0;
    sputs(&t, "1");
    for (int i = 0; i < 3000; i++) sprintf_(&t, " %d:%d.%d", i + 1, i % 7, i % 100);
    sputs(&t, "\n");
    for (int r = 0; r < 3; r++) sputs(&t, "2 1:1\n");
    if (!compare_text(fa, sl, t.s, t.len, 1, 0)) bad++;
    CHECK(wisp_batch_rows(fa) == 4 && wisp_batch_bad_count(fa) == 0 && wisp_batch_nnz(fa) == 3003);
    t.len = 0;
    sputs(&t, "1");
    for (int i = 0; i < 3000; i++) sprintf_(&t, " %d:%s", i + 1, i == 2900 ? "1:1" : "0.5");
    sputs(&t, "\n2 1:1\n");
    if (!compare_text(fa, sl, t.s, t.len, 1, 0)) bad++;
    CHECK(wisp_batch_bad_count(fa) == 1);
    CHECK_MSG(bad == 0, "%d edge texts parse differently on the fast path", bad);
    free(t.s);
    wisp_batch_free(fa);
    wisp_batch_free(sl);
}

/* The libsvm fuzz corpus and regression inputs (spec/fuzz/: two option bytes, then the
 * text), each compared whole, not final, and cut: the fuzzer's hard cases on both paths. */
static void test_fuzz_corpus(wisp_engine *eng)
{
    static const char *dirs[] = { "spec/fuzz/corpus/fuzz_libsvm", "spec/fuzz/regress/fuzz_libsvm" };
    wisp_batch *fa, *sl;
    CHECK_OK(wisp_batch_new(eng, &fa));
    CHECK_OK(wisp_batch_new(eng, &sl));
    int files = 0, bad = 0;
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        DIR *dir = opendir(dirs[d]);
        if (!dir) continue;
        struct dirent *de;
        while ((de = readdir(dir)) != NULL) {
            if (de->d_name[0] == '.') continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dirs[d], de->d_name);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            str t = {0};
            char buf[4096];
            size_t n;
            while ((n = fread(buf, 1, sizeof buf, f)) > 0) sput(&t, buf, n);
            fclose(f);
            files++;
            if (t.len > 2) {
                size_t len = t.len - 2;
                char *exact = malloc(len ? len : 1);
                memcpy(exact, t.s + 2, len);
                if (!compare_text(fa, sl, exact, len, 1, 0)) bad++;
                if (!compare_text(fa, sl, exact, len, 0, 0)) bad++;
                if (!compare_text(fa, sl, exact, len, 1, 1 + (unsigned char)t.s[1] % 8)) bad++;
                free(exact);
            }
            free(t.s);
        }
        closedir(dir);
    }
    if (files) printf("test_parse_fast: %d fuzz corpus files, %d parse differently on the fast path\n", files, bad);
    else printf("test_parse_fast: no fuzz corpus here (run from the repository root to include it)\n");
    CHECK_MSG(bad == 0, "%d fuzz corpus inputs parse differently on the fast path", bad);
    wisp_batch_free(fa);
    wisp_batch_free(sl);
}

/* ---- TSV: the planned fields against put_field, on random fields ---------------------- */

static void gen_tsv_field(str *o, int kind)
{
    static const char *odd[] = { "", "", "-0", "+0", "0", "-", "+", "007", "-007", "12345678", "123456789", "-12345678",
                                 "99999999", "16777217", "-16777217", "1e5", " 7", "7 ", " ", "0x1f", "1.5", "-2.25",
                                 "nan", "-inf", "Infinity", "3.4e39", "1,5", "9223372036854775807",
                                 "9223372036854775808", "-9223372036854775808", "abc", "\xff\xfe", "12345678abcdefgh",
                                 "0123456789abcdef0", "x" };
    if (rndn(4) == 0) { sputs(o, odd[rndn(sizeof odd / sizeof odd[0])]); return; }
    if (kind == 2 && rndn(2)) {                                    /* strings: hex like Criteo's, 0..20 bytes */
        int n = rndn(4) ? 8 : (int)rndn(21);
        for (int i = 0; i < n; i++) { char c = "0123456789abcdef"[rndn(16)]; sput(o, &c, 1); }
        return;
    }
    if (rndn(6) == 0) sputs(o, "-");
    gen_digits(o, 1 + (int)rndn(rndn(4) ? 4 : 12));
}

static void test_tsv_plan(wisp_engine *eng)
{
    static const char spec[] =
        "{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":["
        "{\"name\":\"f\",\"dtype\":\"float32\",\"default\":-1.5},"
        "{\"name\":\"g\",\"dtype\":\"float32\"},"
        "{\"name\":\"i\",\"dtype\":\"int64\",\"default\":7},"
        "{\"name\":\"s\",\"dtype\":\"string\",\"default\":\"\"},"
        "{\"name\":\"u\",\"dtype\":\"string\",\"default\":\"dflt\"},"
        "{\"name\":\"t\",\"dtype\":\"string\",\"sparse\":true}],"
        "\"columns\":["
        "{\"name\":\"f\",\"type\":\"numeric\",\"key\":\"f\",\"offset\":0},"
        "{\"name\":\"g\",\"type\":\"numeric\",\"key\":\"g\",\"offset\":1},"
        "{\"name\":\"i\",\"type\":\"hash_bucket\",\"key\":\"i\",\"buckets\":100,\"offset\":2},"
        "{\"name\":\"s\",\"type\":\"hash_bucket\",\"key\":\"s\",\"buckets\":1000003,\"offset\":102},"
        "{\"name\":\"u\",\"type\":\"hash_bucket\",\"key\":\"u\",\"buckets\":100,\"offset\":1000105},"
        "{\"name\":\"t\",\"type\":\"hash_bucket\",\"key\":\"t\",\"buckets\":100,\"offset\":1000205}]}";
    static const char *schema = "label,f,s,i,g,skip,u,t,s2";   /* "s2" and "skip": no input, skipped */
    static const int kinds[] = { 1, 1, 2, 1, 1, 2, 2, 2, 2 };   /* 1 number-like, 2 string-like */
    wisp_columns *c = NULL;
    CHECK_OK(wisp_columns_parse(spec, strlen(spec), &c));
    if (!c) return;
    wisp_raw *ra = NULL, *rb = NULL;
    CHECK_OK(wisp_raw_new(eng, c, &ra));
    CHECK_OK(wisp_raw_new(eng, c, &rb));
    CHECK_OK(wisp_raw_set_schema(ra, schema, '\t'));
    CHECK_OK(wisp_raw_set_schema(rb, schema, '\t'));
    str t = {0};
    int bad = 0;
    size_t rows = 0, badrows = 0;
    for (int round = 0; round < 400 && bad < 3; round++) {
        t.len = 0;
        size_t nl = 1 + rndn(60);
        for (size_t l = 0; l < nl; l++) {
            size_t nf = rndn(20) ? 9 : rndn(12);                   /* now and then a wrong field count */
            for (size_t f = 0; f < nf; f++) {
                if (f) sputs(&t, "\t");
                gen_tsv_field(&t, kinds[f < 9 ? f : 8]);
            }
            if (l + 1 < nl || rndn(2)) sputs(&t, rndn(8) ? "\n" : "\r\n");
        }
        char *exact = malloc(t.len ? t.len : 1);
        memcpy(exact, t.s, t.len);
        wisp_raw_clear(ra);
        wisp_raw_clear(rb);
        uint64_t la = 0, lb = 0;
        size_t ua = 0, ub = 0;
        wisp__csv_plan(1);
        int sa = wisp_raw_parse_tsv(ra, exact, t.len, 1, 0, &la, &ua);
        wisp__csv_plan(0);
        int sb = wisp_raw_parse_tsv(rb, exact, t.len, 1, 0, &lb, &ub);
        wisp__csv_plan(1);
        int same = sa == sb && la == lb && ua == ub && wisp_raw_rows(ra) == wisp_raw_rows(rb) &&
                   wisp_raw_bad_count(ra) == wisp_raw_bad_count(rb);
        for (size_t i = 0; same && i < 6; i++) {
            const uint32_t *rpa, *rpb, *soa, *sob;
            const void *va, *vb;
            wisp_raw_input(ra, i, &rpa, &va, &soa);
            wisp_raw_input(rb, i, &rpb, &vb, &sob);
            size_t n = rpa ? rpa[wisp_raw_rows(ra)] : wisp_raw_rows(ra);
            if (rpa && (!rpb || memcmp(rpa, rpb, (wisp_raw_rows(ra) + 1) * 4))) same = 0;
            else if (soa) same = sob && !memcmp(soa, sob, (n + 1) * 4) && !memcmp(va, vb, soa[n]);
            else same = !memcmp(va, vb, n * (i == 2 ? 8 : 4));
        }
        for (size_t i = 0; same && i < wisp_raw_bad_count(ra); i++) {
            size_t r1, r2;
            uint64_t l1, l2;
            const char *m1, *m2;
            wisp_raw_bad_row(ra, i, &r1, &l1, &m1);
            wisp_raw_bad_row(rb, i, &r2, &l2, &m2);
            same = r1 == r2 && l1 == l2 && !strcmp(m1, m2);
        }
        if (!same && bad++ < 2) {
            fprintf(stderr, "TSV parsed differently with the field plan:\n");
            fwrite(t.s, 1, t.len < 1500 ? t.len : 1500, stderr);
            fputc('\n', stderr);
        }
        rows += wisp_raw_rows(ra);
        badrows += wisp_raw_bad_count(ra);
        free(exact);
    }
    CHECK_MSG(bad == 0, "%d TSV texts parse differently through the field plan", bad);
    CHECK(badrows > 0 && badrows < rows);
    printf("test_parse_fast: TSV: %zu rows (%zu bad), planned fields == put_field\n", rows, badrows);
    /* "-0" is -0.0f, as strtof */
    wisp_raw_clear(ra);
    static const char neg0[] = "1\t-0\tab\t3\t-0\tx\tu\tt\ty\n";
    CHECK_OK(wisp_raw_parse_tsv(ra, neg0, strlen(neg0), 1, 0, NULL, NULL));
    const void *fv;
    wisp_raw_input(ra, 0, NULL, &fv, NULL);
    CHECK(wisp_raw_rows(ra) == 1 && signbit(((const float *)fv)[0]));
    free(t.s);
    wisp_raw_free(ra);
    wisp_raw_free(rb);
    wisp_columns_free(c);
}

int main(void)
{
    testrand_seed("test_parse_fast");
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(1, &eng));
    int was = wisp__libsvm_fast_path(1);
    CHECK(was == 1 || was == 0);
    test_edges(eng);
    test_fuzz_corpus(eng);
    test_tsv_plan(eng);
    test_random_texts(eng, 3000);
    test_values_vs_libc(eng);
    test_fast_path_taken(eng);
    wisp_engine_free(eng);
    return CHECK_DONE("test_parse_fast");
}
