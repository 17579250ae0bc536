/* bench_python_c.c — the C side of scripts/bench/bench_python.py: times wisp_batch_wrap + wisp_session_score over CSR arrays read from files, in a C loop; with --device, wisp_session_score_device over the same arrays copied to GPU memory first (the device-resident C figure).
 *
 *   bench_python_c MODEL ROWPTR.u32 IDS.u32 VALS.f32 ITERS REPEATS THREADS
 *   bench_python_c --device MODEL ROWPTR.u32 IDS.u32 VALS.f32 ITERS REPEATS THREADS
 *
 * --device (linked against libwisp.a, whose test hooks wisp_cuda_test_alloc/copy put
 * the arrays on gpu:0): a "gpu" session scores them in place, the answers to device
 * memory ("device_out"), to host memory from malloc ("host_out": pageable, one buffer
 * every call reuses, so already faulted in) and to pinned host memory from
 * wisp_engine_host_alloc ("host_pinned_out", "host_pinned": whether it was pinned),
 * each timed as the host path is.
 *
 * The arrays are the ones the Python side scores (written raw by bench_python.py).
 * Prints one JSON object: {"rows", "nnz", "best_ns_per_call", "median_ns_per_call"} over REPEATS
 * runs of ITERS calls each, the same work Session.score does per call in C
 * (wrap the caller's arrays, score, free the wrapper).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wisp.h"
#include "wisp_test.h"

static void *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "%s: read failed\n", path); exit(2); }
    fclose(f);
    *len = (size_t)n;
    return p;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t best_of(uint64_t *t, long repeats, uint64_t *median)
{
    qsort(t, (size_t)repeats, sizeof *t, cmp_u64);
    *median = t[repeats / 2];
    return t[0];
}

static int device_main(int argc, char **argv)
{
    size_t lp, li, lv;
    uint32_t *indptr = slurp(argv[2], &lp), *ids = slurp(argv[3], &li);
    float *vals = slurp(argv[4], &lv);
    size_t rows = lp / 4 - 1, nnz = indptr[rows];
    long iters = atol(argv[5]), repeats = atol(argv[6]);
    wisp_engine *eng; wisp_model *m; wisp_session *s;
    void *drp, *dids, *dvals, *dout;
    if (wisp_engine_new(atoi(argv[7]), &eng) || wisp_model_load(eng, argv[1], &m) || wisp_session_new(eng, m, "gpu", &s) ||
        wisp_cuda_test_alloc(0, lp, &drp) || wisp_cuda_test_alloc(0, nnz * 4, &dids) ||
        wisp_cuda_test_alloc(0, nnz * 4, &dvals) || wisp_cuda_test_alloc(0, rows * 4, &dout) ||
        wisp_cuda_test_copy(drp, indptr, lp) || wisp_cuda_test_copy(dids, ids, nnz * 4) ||
        wisp_cuda_test_copy(dvals, vals, nnz * 4)) {
        fprintf(stderr, "%s\n", wisp_errmsg());
        return 1;
    }
    float *out = malloc(rows * sizeof *out), *pout = NULL;
    if (wisp_engine_host_alloc(eng, rows * sizeof *out, (void **)&pout)) { fprintf(stderr, "%s\n", wisp_errmsg()); return 1; }
    uint64_t *t = malloc((size_t)repeats * sizeof *t), best[3], med[3];
    for (int mode = 0; mode < 3; mode++) {       /* 0: out on the device, 1: pageable host memory, 2: pinned */
        float *o = mode == 0 ? dout : mode == 1 ? out : pout;
        for (long rep = -1; rep < repeats; rep++) {
            uint64_t t0 = wisp_clock_ns();
            for (long i = 0; i < iters; i++)
                if (wisp_session_score_device(s, rows, drp, 32, (const int32_t *)dids, dvals, NULL, o, !mode)) {
                    fprintf(stderr, "%s\n", wisp_errmsg());
                    return 1;
                }
            if (rep >= 0) t[rep] = (wisp_clock_ns() - t0) / (uint64_t)iters;
        }
        best[mode] = best_of(t, repeats, &med[mode]);
    }
    printf("{\"rows\": %zu, \"nnz\": %zu, \"device_out_best_ns\": %llu, \"device_out_median_ns\": %llu, "
           "\"host_out_best_ns\": %llu, \"host_out_median_ns\": %llu, \"host_pinned_out_best_ns\": %llu, "
           "\"host_pinned_out_median_ns\": %llu, \"host_pinned\": %d, \"last_device\": \"%s\", \"checksum\": %.9g}\n",
           rows, nnz, (unsigned long long)best[0], (unsigned long long)med[0], (unsigned long long)best[1],
           (unsigned long long)med[1], (unsigned long long)best[2], (unsigned long long)med[2],
           wisp_engine_host_pinned(eng, pout), wisp_session_last_device(s), (double)(out[0] == pout[0] ? out[0] : -1.0));
    wisp_engine_host_free(eng, pout);
    wisp_cuda_test_free(drp); wisp_cuda_test_free(dids); wisp_cuda_test_free(dvals); wisp_cuda_test_free(dout);
    wisp_session_free(s);
    wisp_model_free(m);
    wisp_engine_free(eng);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 9 && !strcmp(argv[1], "--device")) return device_main(argc - 1, argv + 1);
    if (argc != 8) {
        fprintf(stderr, "usage: %s MODEL ROWPTR.u32 IDS.u32 VALS.f32 ITERS REPEATS THREADS\n", argv[0]);
        return 2;
    }
    size_t lp, li, lv;
    uint32_t *indptr = slurp(argv[2], &lp), *ids = slurp(argv[3], &li);
    float *vals = slurp(argv[4], &lv);
    size_t rows = lp / 4 - 1;
    long iters = atol(argv[5]), repeats = atol(argv[6]);
    wisp_engine *eng; wisp_model *m; wisp_session *s;
    if (wisp_engine_new(atoi(argv[7]), &eng) || wisp_model_load(eng, argv[1], &m) ||
        wisp_session_new(eng, m, "cpu", &s)) {
        fprintf(stderr, "%s\n", wisp_errmsg());
        return 1;
    }
    float *out = malloc(rows * sizeof *out);
    uint64_t *t = malloc((size_t)repeats * sizeof *t);
    for (long rep = -1; rep < repeats; rep++) {          /* rep -1: warm-up */
        uint64_t t0 = wisp_clock_ns();
        for (long i = 0; i < iters; i++) {
            wisp_batch *b;
            if (wisp_batch_wrap(eng, rows, indptr, ids, NULL, vals, &b) || wisp_session_score(s, b, out)) {
                fprintf(stderr, "%s\n", wisp_errmsg());
                return 1;
            }
            wisp_batch_free(b);
        }
        if (rep >= 0) t[rep] = (wisp_clock_ns() - t0) / (uint64_t)iters;
    }
    qsort(t, (size_t)repeats, sizeof *t, cmp_u64);
    printf("{\"rows\": %zu, \"nnz\": %u, \"best_ns_per_call\": %llu, \"median_ns_per_call\": %llu, \"checksum\": %.9g}\n",
           rows, indptr[rows], (unsigned long long)t[0], (unsigned long long)t[repeats / 2], (double)out[0]);
    wisp_session_free(s);
    wisp_model_free(m);
    wisp_engine_free(eng);
    return 0;
}
