/* bench_java_c.c — the C side of scripts/bench/bench_java.sh: wrap + wisp_session_score of the same rows BenchJava.java scores.
 *
 *   bench_java_c DIR THREADS DEVICE    (reads DIR/model.wisp, DIR/{ptr,ids,vals}.bin; prints one JSON object of figures) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "wisp.h"

enum { ROWS = 200000, PER_ROW = 39, SMALL = 10 };

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void *slurp(const char *dir, const char *name, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(bytes);
    if (!f || !p || fread(p, 1, bytes, f) != bytes) { fprintf(stderr, "bench_java_c: cannot read %s\n", path); exit(1); }
    fclose(f);
    return p;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }

/* wrap + score, as the JNI shim does for each call */
static void score(wisp_engine *e, wisp_session *s, size_t rows, const uint32_t *p, const uint32_t *i, const float *v, float *out)
{
    wisp_batch *b = NULL;
    if (wisp_batch_wrap(e, rows, p, i, NULL, v, &b) != WISP_OK || wisp_session_score(s, b, out) != WISP_OK) {
        fprintf(stderr, "bench_java_c: %s\n", wisp_errmsg());
        exit(1);
    }
    wisp_batch_free(b);
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: bench_java_c DIR THREADS DEVICE\n"); return 2; }
    const char *dir = argv[1];
    size_t nnz = (size_t)ROWS * PER_ROW;
    uint32_t *ptr = slurp(dir, "ptr.bin", 4 * (ROWS + 1)), *ids = slurp(dir, "ids.bin", 4 * nnz);
    float *vals = slurp(dir, "vals.bin", 4 * nnz), *out = malloc(4 * ROWS);
    char mp[4096];
    snprintf(mp, sizeof mp, "%s/model.wisp", dir);
    wisp_engine *e; wisp_model *m; wisp_session *s;
    if (wisp_engine_new(atoi(argv[2]), &e) || wisp_model_load(e, mp, &m) || wisp_session_new(e, m, argv[3], &s)) {
        fprintf(stderr, "bench_java_c: %s\n", wisp_errmsg());
        return 1;
    }
    int calls = 200000, reps = 7, breps = 15;
    double t[15];
    for (int i = 0; i < 50000; i++) score(e, s, SMALL, ptr, ids, vals, out);
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (int i = 0; i < calls; i++) score(e, s, SMALL, ptr, ids, vals, out);
        t[r] = (now_ns() - t0) / calls;
    }
    double small = median(t, reps);
    for (int i = 0; i < 3; i++) score(e, s, ROWS, ptr, ids, vals, out);
    for (int r = 0; r < breps; r++) {
        double t0 = now_ns();
        score(e, s, ROWS, ptr, ids, vals, out);
        t[r] = (now_ns() - t0) / 1e6;
    }
    printf("{\"c_10rows_ns_per_call\": %.1f, \"c_200k_ms\": %.3f, \"c_threads\": %d, \"c_last_device\": \"%s\"}\n", small,
           median(t, breps), wisp_engine_threads(e), wisp_session_last_device(s));
    wisp_session_free(s); wisp_model_free(m); wisp_engine_free(e);
    return 0;
}
