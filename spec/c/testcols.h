/* testcols.h — random feature-column descriptions and raw rows for the C tests (test_columns: column-major against
 * row-wise transforms; test_transform_gpu: the GPU against the CPU), with testbatch.h's batch comparison. */
#ifndef WISP_TESTCOLS_H
#define WISP_TESTCOLS_H

#include "batch/raw.h"
#include "testrand.h"
#include "testbatch.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- random descriptions: every column kind, dense and sparse inputs, crosses of 2..4 keys ---- */

static char *testcols_spec(int wide)
{
    static char buf[131072];
    size_t n = 0;
#define OUT(...) (n += (size_t)snprintf(buf + n, sizeof buf - n, __VA_ARGS__))
    OUT("{\"format\":\"wisp-columns\",\"version\":1,\"inputs\":["
        "{\"name\":\"f\",\"dtype\":\"float32\",\"default\":%s},"
        "{\"name\":\"g\",\"dtype\":\"float32\"},"
        "{\"name\":\"i\",\"dtype\":\"int64\"},"
        "{\"name\":\"s\",\"dtype\":\"string\",\"default\":\"%s\"},"
        "{\"name\":\"u\",\"dtype\":\"string\"},"
        "{\"name\":\"t\",\"dtype\":\"string\",\"sparse\":%s},"
        "{\"name\":\"j\",\"dtype\":\"int64\",\"sparse\":%s},"
        "{\"name\":\"h\",\"dtype\":\"float32\",\"sparse\":true}],\"columns\":[",
        rndn(2) ? "1.5" : "null", rndn(2) ? "" : "dflt", rndn(3) ? "true" : "false", rndn(3) ? "true" : "false");
    static const uint64_t buckets[] = { 1, 2, 3, 7, 64, 1000, 65536, 1000003 };   /* tables of a few MB */
    uint64_t off = 0;
    /* wide: 96..125 columns (the fused kernel's 16 lanes a row), tables kept small */
    int ncols = wide ? 96 + (int)rndn(30) : 3 + (int)rndn(8);
    const char *bk = "{\"type\":\"bucketized\",\"source\":{\"type\":\"numeric\",\"key\":\"f\"},"
                     "\"boundaries\":[-1,0,0.5,2,1e9]}";
    const char *voc = "{\"type\":\"vocabulary_list\",\"key\":\"u\","
                      "\"vocabulary\":[\"a\",\"b\",\"c\",\"0123456789abcdefg\"],\"num_oov_buckets\":2}";
    const char *vocj = "{\"type\":\"vocabulary_list\",\"key\":\"j\",\"vocabulary\":[0,1,2,5,-7]}";
    const char *ident = "{\"type\":\"identity\",\"key\":\"i\",\"buckets\":10,\"default_value\":3}";
    const char *identj = "{\"type\":\"identity\",\"key\":\"j\",\"buckets\":6,\"default_value\":0}";
    for (int c = 0; c < ncols; c++) {
        uint64_t b = buckets[rndn(sizeof buckets / sizeof *buckets - (wide ? 1 : 0))], size = b;
        OUT("%s{\"name\":\"c%d\",\"offset\":%llu,", c ? "," : "", c, (unsigned long long)off);
        switch (rndn(12)) {
        case 0: OUT("\"type\":\"numeric\",\"key\":\"%s\"}", rndn(2) ? "f" : "g"); size = 1; break;
        case 1: if (rndn(2)) OUT("\"type\":\"numeric\",\"key\":\"i\"}");
                else OUT("\"type\":\"numeric\",\"key\":\"f\","
                         "\"normalizer\":{\"type\":\"affine\",\"scale\":0.3,\"shift\":-0.7}}");
                size = 1; break;
        case 2: OUT("\"type\":\"bucketized\",\"source\":{\"type\":\"numeric\",\"key\":\"g\","
                    "\"normalizer\":{\"type\":\"standard\",\"mean\":1,\"std\":3}},\"boundaries\":[-2,0,1]}");
                size = 4; break;
        case 3: OUT("\"type\":\"hash_bucket\",\"key\":\"%s\",\"buckets\":%llu}", rndn(2) ? "s" : "t",
                    (unsigned long long)b); break;
        case 4: OUT("\"type\":\"hash_bucket\",\"key\":\"%s\",\"buckets\":%llu}", rndn(2) ? "i" : "j",
                    (unsigned long long)b); break;
        case 5: OUT("\"type\":\"vocabulary_list\",\"key\":\"%s\",\"vocabulary\":[\"a\",\"b\",\"c\",\"d\"]%s}",
                    rndn(2) ? "u" : "t", rndn(2) ? ",\"num_oov_buckets\":3" : ""); size = 7; break;
        case 6: OUT("\"type\":\"vocabulary_list\",\"key\":\"j\",\"vocabulary\":[3,1,4,-1,5]%s}",
                    rndn(2) ? ",\"num_oov_buckets\":2" : ",\"default_value\":0"); size = 7; break;
        case 7: OUT("\"type\":\"identity\",\"key\":\"i\",\"buckets\":10%s}", rndn(2) ? ",\"default_value\":0" : "");
                size = 10; break;
        default: {
            static const char *keys[] = { "\"s\"", "\"u\"", "\"i\"", "\"g\"", "\"t\"", "\"j\"", "\"h\"",
                                          NULL, NULL, NULL, NULL, NULL };
            int nk = 2 + (int)rndn(3);
            OUT("\"type\":\"crossed\",\"buckets\":%llu,%s\"keys\":[", (unsigned long long)b,
                rndn(3) ? "" : "\"hash_key\":77,");
            for (int k = 0; k < nk; k++) {
                size_t w = rndn(12);
                OUT("%s%s", k ? "," : "",
                    keys[w] ? keys[w] : w == 7 ? bk : w == 8 ? voc : w == 9 ? ident : w == 10 ? vocj : identj);
            }
            OUT("]}");
        }
        }
        off += size;
    }
    OUT("]}");
#undef OUT
    return buf;
}

/* a random string: short ones (every farmhash length class up to 64), long ones (> 64, a few near the limit) */
static size_t testcols_string(char *s)
{
    static const char *strs[] = { "a", "b", "c", "d", "", "Zürich", "0123456789abcdef", "0123456789abcdefg", "\xff" };
    size_t len;
    switch (rndn(6)) {
    case 0: len = rndn(17); break;
    case 1: len = 17 + rndn(48); break;
    case 2: len = 65 + rndn(rndn(50) == 0 ? 20000 : 300); break;
    case 3: if (rndn(200) == 0) { len = WISP_MAX_STRING_BYTES; break; } /* fall through */
    default: { const char *x = strs[rndn(9)]; len = strlen(x); memcpy(s, x, len); return len; }
    }
    for (size_t i = 0; i < len; i++) s[i] = (char)(rnd() & 0xff);
    return len;
}

/* clean: no value that makes a row bad (NaN, inf, identity out of range, uncastable floats), so the GPU answers for
 * the whole batch */
static void testcols_row(wisp_raw *raw, int clean, char *sbuf)
{
    wisp_raw_row_begin(raw, rndn(3) ? 0 : 1 + rndn(100));
    if (rndn(5) || clean) {
        static const float fs[] = { -1, 0, 0.5f, 2, 3.5f, 1e9f, -1e30f, 7.25f };
        float v = !clean && rndn(40) == 0 ? NAN : !clean && rndn(40) == 0 ? INFINITY : fs[rndn(8)];
        wisp_raw_add_float(raw, 0, v);
    }
    if (rndn(8) || clean)
        wisp_raw_add_float(raw, 1, !clean && rndn(30) == 0 ? NAN
                                   : !clean && rndn(30) == 0 ? 9.5e18 : (double)((int)rndn(21) - 10) * 0.75);
    if (rndn(5) || clean)
        wisp_raw_add_int(raw, 2, rndn(10) == 0 ? -1
                                 : !clean && rndn(10) == 0 ? INT64_MIN
                                 : (int64_t)rndn(clean ? 10 : 15) - (clean ? 0 : 2));
    if (rndn(5)) { size_t l = testcols_string(sbuf); wisp_raw_add_string(raw, 3, sbuf, l); }
    if (rndn(5) || clean) { size_t l = testcols_string(sbuf); wisp_raw_add_string(raw, 4, sbuf, l); }
    const int tmax = wisp_columns_input_sparse(raw->cols, 5) ? 6 : 2,
              jmax = wisp_columns_input_sparse(raw->cols, 6) ? 6 : 2;
    int nt = (int)rndn(tmax);                                  /* 0..5 values of a sparse input, 0..1 of a dense one */
    for (int k = 0; k < nt; k++) { size_t l = testcols_string(sbuf); wisp_raw_add_string(raw, 5, sbuf, l); }
    int nj = (int)rndn(jmax);
    for (int k = 0; k < nj; k++) wisp_raw_add_int(raw, 6, (int64_t)rndn(8) - 1);
    int nh = (int)rndn(4);
    for (int k = 0; k < nh; k++)
        wisp_raw_add_float(raw, 7, !clean && rndn(50) == 0 ? 1e30 : (double)((int)rndn(200) - 100) * 0.37);
    if (rndn(60) == 0) wisp_raw_row_reject(raw, "rejected by the test");
    wisp_raw_row_end(raw);
}

#endif
