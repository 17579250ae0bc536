/* test_batch_parse.c — the libsvm parser into batches: grammar, malformed lines, limits, the streaming
 * protocol (final, max_rows, line numbers, consumed), every number form, a generated file one-shot vs the
 * reference vs chunked, random bytes, and its speed (printed, not asserted). */
#include "testbatch.h"

#include <float.h>
#include <stdarg.h>

/* ---- the parser: grammar ---------------------------------------------------------------- */

/* parse text one-shot (final) into a fresh batch; returns the render, sets *bad to render_bad */
static char *parse_render(wisp_engine *eng, const char *text, char **bad, uint64_t *lines, int *status)
{
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    uint64_t ln = 0;
    size_t used = 0;
    int st = wisp_batch_parse_libsvm(b, text, strlen(text), 1, 0, &ln, &used);
    if (status) *status = st;
    if (lines) *lines = ln;
    invariants(b, text);
    CHECK_MSG(st != WISP_OK || used == strlen(text), "'%s': consumed %zu of %zu", text, used, strlen(text));
    char *s = render(b);
    if (bad) *bad = render_bad(b);
    wisp_batch_free(b);
    return s;
}

static void test_parse_grammar(wisp_engine *eng)
{
    static const struct { const char *text, *want; } cases[] = {
        { "", "" },
        { "\n\n  \n\t\n", "" },
        { "# a comment\n   # indented comment 1:2\n", "" },
        { "1 3:0.5 7:2\n", "3:0.5 7:2|" },
        { "-1 3:0.5 7:2", "3:0.5 7:2|" },                          /* no final newline */
        { "+1 3:0.5\n0 4:0.25\n", "3:0.5|;4:0.25|" },
        { "0.5 3:0.5\n", "3:0.5|" },                               /* float label */
        { "1e3 3:0.5\n", "3:0.5|" },
        { "3:0.5 7:2\n", "3:0.5 7:2|" },                            /* no label */
        { "1 5 9 3:0.5\n", "3:0.5|5 9" },                           /* bare ids are binary; valued first */
        { "1\n", "|" },                                             /* label only: a row without features */
        { "1 3:1 4:1.0 5:1e0 6:10e-1 7:2\n", "7:2|3 4 5 6" },        /* 1.0 values ship as binary */
        { "1 3:-1 4:+1.5 5:.5 6:5. 7:1e-3 8:1E+3 9:-.25e1\n", "3:-1 4:1.5 5:0.5 6:5 7:0.00100000005 8:1000 9:-2.5|" },
        { "1 3:0 4:-0 5:0.0e10 6:000.000\n", "3:0 4:-0 5:0 6:0|" },
        { "1 007:0.5 0:2\n", "7:0.5 0:2|" },                        /* leading zeros, id 0 */
        { "1\t3:0.5\t\t7:2 \t\n", "3:0.5 7:2|" },                   /* tabs, trailing blanks */
        { "  1 3:0.5\n", "3:0.5|" },                                /* leading blanks */
        { "1 3:0.5\r\n2 4:2\r\n", "3:0.5|;4:2|" },                  /* CRLF */
        { "1 3:0.5 # comment 9:9 x:y\n", "3:0.5|" },
        { "1 3:0.5 #\n", "3:0.5|" },
        { "1 #only a comment\n", "|" },
        { "1 3:0.5\n\n# c\n\n2 4:2\n", "3:0.5|;4:2|" },
        { "1 4294967295:2 4294967296:3 18446744073709551615 4294967294\n",
          "4294967295:2 4294967295:3|4294967295 4294967294" },
        { "1 3:3.4028234e38 4:1e-45 5:1e-50\n", "3:3.40282347e+38 4:1.40129846e-45 5:0|" },
        { "1 3:0.1 4:0.123456789012345678901234567890 5:123456789012345678901234567890\n",
          "3:0.100000001 4:0.123456791 5:1.23456789e+29|" },
        { "1 3:2 3:2 3:5\n", "3:2 3:2 3:5|" },                      /* duplicates kept */
        { "\r\n", "" },
        { "1 3:0.5\r", "3:0.5|" },                                  /* lone CR at the very end */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad;
        int st;
        char *got = parse_render(eng, cases[i].text, &bad, NULL, &st);
        CHECK_MSG(st == WISP_OK && strcmp(got, cases[i].want) == 0 && bad[0] == 0,
                  "case %zu '%s': got '%s' want '%s' (bad: %s)", i, cases[i].text, got, cases[i].want, bad);
        free(got); free(bad);
    }
}

static void test_parse_malformed(wisp_engine *eng)
{
    /* each: a good line, a blank line, a comment, then the bad line at line 4, then a good line */
    static const struct { const char *line, *msg; } cases[] = {
        { "1 abc:1",                    "line 4: bad feature id 'abc:1', at column 3" },
        { "1 3:0.5 x",                  "line 4: bad feature id 'x', at column 9" },
        { "1 -3:1",                     "line 4: bad feature id '-3:1', at column 3" },
        { "1 +3:1",                     "line 4: bad feature id '+3:1', at column 3" },
        { "1 3a:1",                     "line 4: bad feature id '3a:1', at column 3" },
        { "1 3.5:1",                    "line 4: bad feature id '3.5:1', at column 3" },
        { "1 :5",                       "line 4: bad feature id ':5', at column 3" },
        { ":5",                         "line 4: bad feature id ':5', at column 1" },
        { "1 3:",                       "line 4: missing value after ':' in '3:', at column 5" },
        { "1 3: 4",                     "line 4: missing value after ':' in '3:', at column 5" },
        { "1 3:abc",                    "line 4: bad value 'abc', at column 5" },
        { "1 3:1.2.3",                  "line 4: bad value '1.2.3', at column 5" },
        { "1 3:1e",                     "line 4: bad value '1e', at column 5" },
        { "1 3:1e+",                    "line 4: bad value '1e+', at column 5" },
        { "1 3:.",                      "line 4: bad value '.', at column 5" },
        { "1 3:-",                      "line 4: bad value '-', at column 5" },
        { "1 3:0x10",                   "line 4: bad value '0x10', at column 5" },
        { "1 3:1,5",                    "line 4: bad value '1,5', at column 5" },
        { "1 3:1#c",                    "line 4: bad value '1#c', at column 5" },
        { "1 3:1:2",                    "line 4: extra ':' in '3:1:2' (expected id:value), at column 6" },
        { "1 3:nan",                    "line 4: value 'nan' is not a finite number, at column 5" },
        { "1 3:NaN",                    "line 4: value 'NaN' is not a finite number, at column 5" },
        { "1 3:-inf",                   "line 4: value '-inf' is not a finite number, at column 5" },
        { "1 3:Infinity",               "line 4: value 'Infinity' is not a finite number, at column 5" },
        { "1 3:1e39",                   "line 4: value '1e39' is not a finite float, at column 5" },
        { "1 3:-3.5e38",                "line 4: value '-3.5e38' is not a finite float, at column 5" },
        { "1 3:1e99999999999",          "line 4: value '1e99999999999' is not a finite float, at column 5" },
        { "1 18446744073709551616:1",   "line 4: feature id '18446744073709551616' overflows 64 bits, at column 3" },
        { "1 99999999999999999999",     "line 4: feature id '99999999999999999999' overflows 64 bits, at column 3" },
        { "1 000000000000000000000000005:2 184467440737095516150",
          "line 4: feature id '184467440737095516150' overflows 64 bits, at column 33" },
        { "abc 3:1",                    "line 4: bad label 'abc' (expected a number), at column 1" },
        { "nan 3:1",                    "line 4: bad label 'nan' (expected a number), at column 1" },
        { "  1x 3:1",                   "line 4: bad label '1x' (expected a number), at column 3" },
        { "1 3:1\r5",                   "line 4: bad value '1?5', at column 5" },
        { "1 3:0.5 4:0.25 5:0.75 6:0.125 7:0.5 8:1.5 9:2.5 10:3.5 11:0.5 12:x23456789012345678901234567890123456789012345678901234567890",
          "line 4: bad value 'x234567890123456789012345678901234567890...', at column 66" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        str t = {0};
        sprintf_(&t, "1 1:0.5\n\n# c\n%s\n2 2:0.25\n", cases[i].line);
        char *bad;
        int st;
        uint64_t lines;
        char *got = parse_render(eng, t.s, &bad, &lines, &st);
        str want_bad = {0};
        sprintf_(&want_bad, "1@4:%s\n", cases[i].msg);
        CHECK_MSG(st == WISP_OK && strcmp(got, "1:0.5|;!4;2:0.25|") == 0 && strcmp(bad, want_bad.s) == 0 && lines == 5,
                  "malformed case %zu '%s':\n  got  '%s' %s\n  want '%s'", i, cases[i].line, got, bad, want_bad.s);
        free(got); free(bad); free(t.s); free(want_bad.s);
    }
    /* a very long number falls back to strtod; beyond 511 bytes it is refused */
    {
        str t = {0};
        sputs(&t, "1 3:0.");
        for (int i = 0; i < 400; i++) sputs(&t, "0");
        sputs(&t, "15\n1 4:1");
        for (int i = 0; i < 600; i++) sputs(&t, "0");
        sputs(&t, "\n");
        char *bad, *got = parse_render(eng, t.s, &bad, NULL, NULL);
        CHECK_MSG(strcmp(got, "3:0|;!2") == 0 && strstr(bad, "1@2:line 2: value '1000") && strstr(bad, "is longer than 511 bytes, at column 5"),
                  "long numbers: %s / %s", got, bad);
        free(got); free(bad); free(t.s);
    }
    /* several bad lines in a row, each its own row with its own line number */
    {
        char *bad, *got = parse_render(eng, "x\n1 3:\n\n1 4:5\n1 5:nan\r\n", &bad, NULL, NULL);
        CHECK_MSG(strcmp(got, "!1;!2;4:5|;!5") == 0, "%s", got);
        CHECK_MSG(strcmp(bad, "0@1:line 1: bad label 'x' (expected a number), at column 1\n"
                              "1@2:line 2: missing value after ':' in '3:', at column 5\n"
                              "3@5:line 5: value 'nan' is not a finite number, at column 5\n") == 0, "%s", bad);
        free(got); free(bad);
    }
}

/* too many features in a row, and a line longer than WISP_MAX_LINE_BYTES */
static void test_parse_limits(wisp_engine *eng)
{
    str t = {0};
    sputs(&t, "1");
    for (size_t i = 0; i < WISP_MAX_ROW_FEATURES; i++) sputs(&t, " 7");
    sputs(&t, "\n1 3:2\n1");
    for (size_t i = 0; i <= WISP_MAX_ROW_FEATURES; i++) sputs(&t, " 7");
    sputs(&t, "\n");
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    uint64_t ln = 0;
    size_t used = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, t.s, t.len, 1, 0, &ln, &used));
    CHECK(used == t.len && ln == 3 && wisp_batch_rows(b) == 3);
    CHECK(wisp_batch_indptr(b)[1] == WISP_MAX_ROW_FEATURES && wisp_batch_nnz(b) == WISP_MAX_ROW_FEATURES + 1);
    const char *msg = "";
    size_t row = 0;
    CHECK(wisp_batch_bad_count(b) == 1 && wisp_batch_bad_row(b, 0, &row, &ln, &msg) == WISP_OK);
    char want[128];
    snprintf(want, sizeof want, "line 3: more than WISP_MAX_ROW_FEATURES (1048576) features, at column %u",
             2 + 2 * WISP_MAX_ROW_FEATURES + 1);
    CHECK_MSG(row == 2 && ln == 3 && strcmp(msg, want) == 0, "%s", msg);
    invariants(b, "row features limit");
    free(t.s);

    /* a line of WISP_MAX_LINE_BYTES + 1 bytes */
    size_t n = WISP_MAX_LINE_BYTES + 1;
    char *big = malloc(n + 32);
    memcpy(big, "1 5:2\n", 6);
    memset(big + 6, ' ', n);
    big[6] = '1';
    memcpy(big + 6 + n, "\n1 6:2\n", 7);
    wisp_batch_clear(b);
    ln = 10;
    CHECK_OK(wisp_batch_parse_libsvm(b, big, 6 + n + 7, 0, 0, &ln, &used));
    char *s = render(b);
    CHECK_MSG(strcmp(s, "5:2|;!12;6:2|") == 0 && ln == 13 && used == 6 + n + 7, "%s", s);
    free(s);
    CHECK(wisp_batch_bad_row(b, 0, NULL, NULL, &msg) == WISP_OK &&
          strcmp(msg, "line 12: longer than WISP_MAX_LINE_BYTES (67108864 bytes), at column 67108865") == 0);
    /* the same line without its end, not final: no progress is possible, so WISP_ELIMIT */
    wisp_batch_clear(b);
    ln = 10;
    CHECK_FAILS(wisp_batch_parse_libsvm(b, big, 6 + n, 0, 0, &ln, &used), WISP_ELIMIT, "line 12: no end of line within");
    CHECK(used == 6 && ln == 11 && wisp_batch_rows(b) == 1);
    /* exactly WISP_MAX_LINE_BYTES is fine */
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_parse_libsvm(b, big + 6, n - 1, 1, 0, NULL, &used));
    CHECK(used == n - 1 && wisp_batch_rows(b) == 1 && wisp_batch_bad_count(b) == 0);
    free(big);

    /* WISP_MAX_NNZ / WISP_MAX_ROWS reached (faked counts) */
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2 3\n", 6, 1, 0, NULL, NULL));
    b->rows = WISP_MAX_ROWS;
    ln = 0;
    CHECK_FAILS(wisp_batch_parse_libsvm(b, "\n1 2\n", 5, 1, 0, &ln, &used), WISP_ELIMIT, "line 2: the batch already holds WISP_MAX_ROWS");
    CHECK(used == 1 && ln == 1);
    b->rows = 1;
    size_t nnz = b->nnz, id_cap = b->id_cap;
    b->nnz = WISP_MAX_NNZ - 1;
    b->id_cap = WISP_MAX_NNZ;            /* pretend: nothing is written there on this path */
    ln = 0;
    CHECK_FAILS(wisp_batch_parse_libsvm(b, "1\n1 2 3\n", 8, 1, 0, &ln, &used), WISP_ELIMIT, "line 2: the batch would hold more than WISP_MAX_NNZ");
    CHECK(used == 2 && ln == 1 && wisp_batch_rows(b) == 2);
    b->nnz = nnz;
    b->id_cap = id_cap;
    b->rows = 1;
    wisp_batch_free(b);
}

/* final, max_rows, line_no, consumed */
static void test_parse_protocol(wisp_engine *eng)
{
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    const char *t = "1 1:2\n\n# c\n1 2:2\n1 3:2\n1 4";
    size_t len = strlen(t), used = 99;
    uint64_t ln = 100;
    CHECK_OK(wisp_batch_parse_libsvm(b, t, len, 0, 0, &ln, &used));
    CHECK_MSG(used == len - 3 && ln == 105 && wisp_batch_rows(b) == 3, "used %zu ln %" PRIu64, used, ln);
    CHECK_OK(wisp_batch_parse_libsvm(b, t + used, 3, 0, 0, &ln, &used));   /* still partial */
    CHECK(used == 0 && ln == 105 && wisp_batch_rows(b) == 3);
    CHECK_OK(wisp_batch_parse_libsvm(b, t + len - 3, 3, 1, 0, &ln, &used));
    CHECK(used == 3 && ln == 106 && wisp_batch_rows(b) == 4 && wisp_batch_ids(b)[3] == 4);

    /* max_rows: stops right after the row that reaches it; skipped lines before it count */
    wisp_batch_clear(b);
    ln = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, t, len, 1, 2, &ln, &used));
    CHECK(used == 17 && ln == 4 && wisp_batch_rows(b) == 2);
    CHECK_OK(wisp_batch_parse_libsvm(b, t + used, len - used, 1, 1, &ln, &used));
    CHECK(used == 6 && ln == 5 && wisp_batch_rows(b) == 3);
    /* bad rows count toward max_rows */
    wisp_batch_clear(b);
    ln = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, "x\ny\n1 2\n", 8, 1, 2, &ln, &used));
    CHECK(used == 4 && ln == 2 && wisp_batch_rows(b) == 2 && wisp_batch_bad_count(b) == 2);
    /* NULL line_no and consumed are fine; NULL text only with len 0 */
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2\n", 4, 1, 0, NULL, NULL));
    CHECK_OK(wisp_batch_parse_libsvm(b, NULL, 0, 1, 0, NULL, NULL));
    CHECK_FAILS(wisp_batch_parse_libsvm(b, NULL, 5, 1, 0, NULL, &used), WISP_EINVAL, "text is NULL");
    CHECK(used == 0);
    CHECK_FAILS(wisp_batch_parse_libsvm(NULL, "1\n", 2, 1, 0, NULL, NULL), WISP_EINVAL, "batch is NULL");
    /* final with a trailing blank partial line consumes it, and counts it */
    wisp_batch_clear(b);
    ln = 0;
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2\n  ", 6, 1, 0, &ln, &used));
    CHECK(used == 6 && ln == 2 && wisp_batch_rows(b) == 1);
    /* text parsed into a batch that already has builder rows: appended, modes follow */
    wisp_batch_clear(b);
    uint64_t ids[] = { 9 };
    wisp_batch_add_row(b, ids, NULL, 1);
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2:0.5 3\n", 10, 1, 0, NULL, NULL));
    char *s = render(b);
    CHECK_MSG(strcmp(s, "|9;2:0.5|3") == 0 && b->value_mode == WISP_VALUES_MIXED, "%s", s);
    free(s);
    wisp_batch_clear(b);
    CHECK_OK(wisp_batch_parse_libsvm(b, "1 2:0.5 3:2\n\n1 4:3\n", 19, 1, 0, NULL, NULL));
    CHECK(b->value_mode == WISP_VALUES_ALL);
    wisp_batch_free(b);
}

/* every value form, exactly (float)strtod */
static void gen_number(str *o)
{
    char buf[128];
    size_t n = 0;
    int form = (int)rndn(10);
    if (rndn(4) == 0) buf[n++] = rndn(2) ? '-' : '+';
    if (form == 0) {                      /* plain integer */
        n += (size_t)snprintf(buf + n, 40, "%" PRIu64, rnd() >> rndn(64));
    } else {
        int nd = 1 + (int)rndn(form == 1 ? 28 : 12);
        int dot = (int)rndn((size_t)nd + 2) - 1;        /* -1: no dot */
        int lead0 = (int)rndn(4);
        for (int i = 0; i < lead0; i++) buf[n++] = '0';
        for (int i = 0; i < nd; i++) {
            if (i == dot) buf[n++] = '.';
            buf[n++] = (char)('0' + rndn(10));
        }
        if (dot == nd) buf[n++] = '.';
        if (rndn(2)) {
            buf[n++] = rndn(2) ? 'e' : 'E';
            if (rndn(2)) buf[n++] = rndn(2) ? '-' : '+';
            int ex = (int)rndn(form == 2 ? 400 : 45);
            n += (size_t)snprintf(buf + n, 12, "%d", ex);
        }
    }
    buf[n] = '\0';
    sputs(o, buf);
}

static void test_parse_numbers(wisp_engine *eng)
{
    enum { N = 60000 };
    str t = {0};
    size_t *at = malloc(N * sizeof *at);
    for (int i = 0; i < N; i++) {
        sputs(&t, "0 1:");
        at[i] = t.len;
        gen_number(&t);
        sputs(&t, "\n");
    }
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    CHECK_OK(wisp_batch_parse_libsvm(b, t.s, t.len, 1, 0, NULL, NULL));
    CHECK(wisp_batch_rows(b) == N);
    const uint32_t *rp = wisp_batch_indptr(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    int wrong = 0, nbad = 0, nfinite = 0;
    size_t bi = 0;
    for (int i = 0; i < N && wrong < 5; i++) {
        const char *num = t.s + at[i];
        double d = strtod(num, NULL);
        float want = (float)d;
        size_t brow = (size_t)-1;
        if (bi < wisp_batch_bad_count(b)) wisp_batch_bad_row(b, bi, &brow, NULL, NULL);
        if (!isfinite(want)) {
            if (brow != (size_t)i) { wrong++; fprintf(stderr, "number %.*s: want a bad row\n", (int)strcspn(num, "\n"), num); }
            else bi++;
            nbad++;
            continue;
        }
        nfinite++;
        float got;
        if (brow == (size_t)i) { wrong++; fprintf(stderr, "number %.*s: bad row\n", (int)strcspn(num, "\n"), num); bi++; continue; }
        size_t nv = vp ? vp[i + 1] - vp[i] : (size_t)(rp[i + 1] - rp[i]);
        if (nv == 1) got = vals[vp ? vp[i] : rp[i]];
        else got = 1.0f;
        if (memcmp(&got, &want, sizeof got) != 0 || rp[i + 1] - rp[i] != 1) {
            wrong++;
            fprintf(stderr, "number %.*s: got %.9g want %.9g\n", (int)strcspn(num, "\n"), num, (double)got, (double)want);
        }
    }
    CHECK_MSG(wrong == 0, "%d numbers parsed wrong", wrong);
    CHECK(nbad > 0 && nfinite > N / 2);
    wisp_batch_free(b);
    free(t.s); free(at);
}

/* ---- the parser: a generated file, one-shot vs reference vs chunked ------------------------ */

static const char *sep(void) { static const char *s[] = { " ", " ", " ", "\t", "  ", " \t" }; return s[rndn(6)]; }

/* Append one line; fills *ref with its expected row (when not bad) and returns
 * 0 no row, 1 a good row, 2 a bad row. */
static int gen_line(str *o, ref_row *ref)
{
    memset(ref, 0, sizeof *ref);
    int kind = (int)rndn(100);
    if (kind < 3) { sputs(o, rndn(2) ? "" : " \t "); return 0; }
    if (kind < 5) { sputs(o, rndn(2) ? "# comment 1:2" : "  #x"); return 0; }
    size_t n = rndn(5) == 0 ? rndn(120) : rndn(40);
    int bad_at = kind < 12 ? (int)rndn(n + 1) : -1;
    ref->vids = malloc((n + 1) * 8); ref->bids = malloc((n + 1) * 8); ref->vals = malloc((n + 1) * 4);
    static const char *labels[] = { "1", "-1", "+1", "0", "0.5", "2e0" };
    int label = rndn(5) != 0;
    if (label) sputs(o, labels[rndn(6)]);
    else if (rndn(10) == 0) sputs(o, "  ");
    for (size_t i = 0; i < n; i++) {
        if (i || label) sputs(o, sep());
        if ((int)i == bad_at) {
            static const char *bads[] = { "abc", "3:", "3:x", "3:1:2", "3:nan", "3:inf", "3:1e39", "-3:1",
                                          "18446744073709551616:1", "3:1.2.3", "4:-", "5:.e3", ":7" };
            sputs(o, bads[rndn(sizeof bads / sizeof bads[0])]);
            continue;
        }
        uint64_t id = ref_gen_id();
        if (rndn(20) == 0) sputs(o, "00");
        sprintf_(o, "%" PRIu64, id);
        int vk = (int)rndn(4);
        if (vk == 0 && i == 0 && !label) vk = 2;             /* a bare first token would be the label */
        if (vk == 0) { ref->bids[ref->nb++] = id; continue; }
        sputs(o, ":");
        size_t v0 = o->len;
        if (vk == 1 && rndn(3) == 0) sputs(o, rndn(2) ? "1" : "1.0");
        else {
            do { o->len = v0; gen_number(o); } while (!isfinite((float)strtod(o->s + v0, NULL)));
        }
        float f = (float)strtod(o->s + v0, NULL);
        if (f == 1.0f) ref->bids[ref->nb++] = id;
        else { ref->vids[ref->nv] = id; ref->vals[ref->nv++] = f; }
    }
    if (rndn(10) == 0) { sputs(o, sep()); sputs(o, "# trailing 5:6"); }
    else if (rndn(10) == 0) sputs(o, sep());
    if (bad_at >= 0 && (size_t)bad_at < n) return 2;
    return label || n ? 1 : 0;                               /* no label, no features: a blank line */
}

static void test_parse_chunked(wisp_engine *eng)
{
    enum { LINES = 10000 };
    str t = {0};
    ref_row *ref = calloc(LINES, sizeof *ref);
    int *kind = calloc(LINES, sizeof *kind);
    size_t nrows = 0;
    for (int i = 0; i < LINES; i++) {
        kind[i] = gen_line(&t, &ref[i]);
        nrows += kind[i] != 0;
        if (i < LINES - 1 || rndn(2)) sputs(&t, rndn(8) ? "\n" : "\r\n");
    }
    /* the expected render */
    str want = {0};
    sputs(&want, "");
    int first = 1;
    for (int i = 0; i < LINES; i++) {
        if (!kind[i]) continue;
        if (!first) sputs(&want, ";");
        first = 0;
        if (kind[i] == 2) { sprintf_(&want, "!%d", i + 1); continue; }
        char *r = render_ref(&ref[i], 1);
        sputs(&want, r);
        free(r);
    }

    /* one shot */
    wisp_batch *one;
    wisp_batch_new(eng, &one);
    uint64_t ln = 0;
    size_t used = 0;
    uint64_t t0 = wisp__now_ns();
    CHECK_OK(wisp_batch_parse_libsvm(one, t.s, t.len, 1, 0, &ln, &used));
    uint64_t t1 = wisp__now_ns();
    CHECK(used == t.len && ln == LINES && wisp_batch_rows(one) == nrows);
    invariants(one, "one-shot");
    char *got = render(one), *got_bad = render_bad(one);
    size_t i = 0;
    while (got[i] && got[i] == want.s[i]) i++;
    CHECK_MSG(strcmp(got, want.s) == 0, "generated file: differs at byte %zu: got '%.80s' want '%.80s'",
              i, got + (i > 30 ? i - 30 : 0), want.s + (i > 30 ? i - 30 : 0));
    printf("test_batch: generated file: %zu lines, %zu bytes, %zu rows, %zu bad, parsed in %.2f ms\n",
           (size_t)LINES, t.len, nrows, wisp_batch_bad_count(one), (double)(t1 - t0) / 1e6);

    /* chunked, several ways; also with allocation failures (retried) */
    for (int way = 0; way < 6; way++) {
        wisp_batch *b;
        wisp_batch_new(eng, &b);
        size_t start = 0, avail = 0;
        ln = 0;
        int calls = 0, faults = 0, stuck = 0, insane = 0;
        while (start < t.len && stuck < 1000) {
            size_t grow = way == 0 ? 1 + rndn(64) : way == 1 ? 1 + rndn(300) : 1 + rndn(20000);
            if (rndn(3) == 0 || avail == start) avail = avail + grow > t.len ? t.len : avail + grow;
            int final = avail == t.len;
            size_t max_rows = way == 3 || rndn(4) == 0 ? 1 + rndn(40) : 0;
            int fault = way >= 4 && rndn(3) == 0;
            if (fault) wisp_fault_alloc_after(1 + rndn(3));
            uint64_t ln0 = ln;
            int st = wisp_batch_parse_libsvm(b, t.s + start, avail - start, final, max_rows, &ln, &used);
            wisp_fault_alloc_after(0);
            calls++;
            if (st != WISP_OK) {
                faults++;
                CHECK_MSG(st == WISP_ENOMEM, "chunked: %s", wisp_errmsg());
                if (st != WISP_ENOMEM) break;
            }
            if (used > avail - start || ln < ln0) insane++;
            if (used == 0) stuck++; else stuck = 0;
            start += used;
        }
        CHECK(start == t.len && ln == LINES && insane == 0);
        char *g = render(b), *gb = render_bad(b);
        CHECK_MSG(strcmp(g, got) == 0 && strcmp(gb, got_bad) == 0, "chunked way %d (%d calls, %d faults) differs from one-shot",
                  way, calls, faults);
        invariants(b, "chunked");
        free(g); free(gb);
        wisp_batch_free(b);
    }

    /* chunked with a clear after every call, the rows collected (what a streaming reader does) */
    {
        wisp_batch *b;
        wisp_batch_new(eng, &b);
        str acc = {0}, accbad = {0};
        sputs(&acc, ""); sputs(&accbad, "");
        size_t start = 0, rows_before = 0;
        ln = 0;
        while (start < t.len) {
            size_t len = 1 + rndn(5000);
            if (start + len > t.len) len = t.len - start;
            int final = start + len == t.len;
            wisp_batch_clear(b);
            CHECK_OK(wisp_batch_parse_libsvm(b, t.s + start, len, final, 100, &ln, &used));
            if (used == 0 && !final) {
                /* grow the window: parse again with more text (simulated by a bigger len next time) */
                size_t more = t.len - start < 200000 ? t.len - start : 200000;
                wisp_batch_clear(b);
                CHECK_OK(wisp_batch_parse_libsvm(b, t.s + start, more, start + more == t.len, 100, &ln, &used));
            }
            char *g = render(b);
            if (wisp_batch_rows(b)) { if (acc.len) sputs(&acc, ";"); sputs(&acc, g); }
            free(g);
            for (size_t k = 0; k < wisp_batch_bad_count(b); k++) {
                size_t row; uint64_t line; const char *msg;
                wisp_batch_bad_row(b, k, &row, &line, &msg);
                sprintf_(&accbad, "%zu@%" PRIu64 ":%s\n", row + rows_before, line, msg);
            }
            rows_before += wisp_batch_rows(b);
            start += used;
        }
        CHECK_MSG(strcmp(acc.s, got) == 0 && strcmp(accbad.s, got_bad) == 0 && ln == LINES,
                  "streaming with clear differs from one-shot");
        free(acc.s); free(accbad.s);
        wisp_batch_free(b);
    }

    free(got); free(got_bad);
    for (int k = 0; k < LINES; k++) free_row(&ref[k]);
    free(ref); free(kind); free(want.s); free(t.s);
    wisp_batch_free(one);
}

/* random bytes never crash and always leave a consistent batch */
static void test_parse_fuzz(wisp_engine *eng)
{
    static const char alpha[] = "0123456789:.eE+-#  \t\t\r\n\n\nnaifx";
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    char buf[600];
    int broken = 0;
    for (int it = 0; it < 4000; it++) {
        size_t n = rndn(sizeof buf);
        int raw = it % 4 == 0;
        for (size_t i = 0; i < n; i++) buf[i] = raw ? (char)rnd() : alpha[rndn(sizeof alpha - 1)];
        if (it % 8 == 0) wisp_batch_clear(b);
        size_t start = 0, used;
        uint64_t ln = 0;
        int guard = 0;
        while (start < n && guard++ < 1000) {
            size_t len = 1 + rndn(n - start);
            int final = start + len == n;
            char *exact = malloc(len);                       /* so ASan sees any read past len */
            memcpy(exact, buf + start, len);
            int st = wisp_batch_parse_libsvm(b, exact, len, final, rndn(3) ? 0 : 1 + rndn(5), &ln, &used);
            free(exact);
            if (st != WISP_OK) { broken++; break; }
            if (used == 0 && final) break;
            if (used > len) { broken++; break; }
            start += used;
        }
        if (invariants(b, "fuzz")) break;
    }
    CHECK(broken == 0);
    /* memory of the fuzzed batch is readable end to end (ASan would complain otherwise) */
    volatile uint64_t sum = 0;
    for (size_t i = 0; i < wisp_batch_nnz(b); i++) sum += wisp_batch_ids(b)[i];
    (void)sum;
    wisp_batch_free(b);
}

/* ---- speed (printed, not asserted) ------------------------------------------------------------ */

static char *put_u64(char *p, uint64_t v)
{
    char t[24];
    int n = 0;
    do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = t[--n];
    return p;
}

static void test_parse_speed(wisp_engine *eng, int reps)
{
    enum { ROWS = 200000, NVAL = 13, NBIN = 26 };
    /* a pool of value strings like real numeric features (a few significant digits) */
    static char vpool[1024][16];
    for (int i = 0; i < 1024; i++) {
        int k = (int)rndn(4);
        if (k == 0) snprintf(vpool[i], 16, "%d", (int)rndn(1000) + 2);
        else if (k == 1) snprintf(vpool[i], 16, "%.3f", rndu() * 10);
        else snprintf(vpool[i], 16, "%.6g", rndu());
    }
    size_t cap = (size_t)ROWS * 600;
    char *text = malloc(cap), *p = text;
    for (int r = 0; r < ROWS; r++) {
        *p++ = rndn(2) ? '1' : '0';
        for (int k = 0; k < NVAL + NBIN; k++) {
            *p++ = ' ';
            p = put_u64(p, k < NVAL ? (uint64_t)k + 1 : rnd_zipf(1u << 26) + 14);
            *p++ = ':';
            if (k < NVAL) { size_t l = strlen(vpool[(r * 7 + k) & 1023]); memcpy(p, vpool[(r * 7 + k) & 1023], l); p += l; }
            else *p++ = '1';
        }
        *p++ = '\n';
    }
    size_t len = (size_t)(p - text);
    wisp_batch *b;
    wisp_batch_new(eng, &b);
    double best = 1e30, first = 0;
    for (int rep = 0; rep < reps; rep++) {
        wisp_batch_clear(b);
        uint64_t t0 = wisp__now_ns();
        int st = wisp_batch_parse_libsvm(b, text, len, 1, 0, NULL, NULL);
        double s = (double)(wisp__now_ns() - t0) / 1e9;
        if (st != WISP_OK) { CHECK_OK(st); break; }
        if (rep == 0) first = s;
        if (s < best) best = s;
    }
    CHECK(wisp_batch_rows(b) == ROWS && wisp_batch_nnz(b) == (size_t)ROWS * (NVAL + NBIN) && wisp_batch_bad_count(b) == 0);
    CHECK(b->value_mode == WISP_VALUES_MIXED);
    double feats = (double)ROWS * (NVAL + NBIN);
    printf("test_batch: parse speed: %d rows x %d features (%d valued + %d id:1), %.1f MB: "
           "best %.1f ms = %.0f MB/s, %.2f ns/feature, %.0f ns/row (first run into a fresh batch: %.1f ms)\n",
           ROWS, NVAL + NBIN, NVAL, NBIN, (double)len / 1e6, best * 1e3, (double)len / best / 1e6,
           best * 1e9 / feats, best * 1e9 / ROWS, first * 1e3);
    wisp_batch_free(b);
    free(text);
}

int main(void)
{
    wisp_engine *eng = testbatch_engine("test_batch_parse");
    if (!eng) return 1;
    /* The generator's state after test_batch.c's tests: these tests ran after them in one program
     * before the split, so from here they draw the same inputs (and count the same checks) as then. */
    rng_state = 0x48D4B5CC65FEB611ull;
    test_parse_grammar(eng);
    test_parse_malformed(eng);
    test_parse_protocol(eng);
    test_parse_numbers(eng);
    test_parse_chunked(eng);
    test_parse_fuzz(eng);
    test_parse_limits(eng);
    if (!getenv("WISP_TEST_QUICK")) test_parse_speed(eng, 4);
    wisp_engine_free(eng);
    return CHECK_DONE("test_batch_parse");
}
