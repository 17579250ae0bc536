/* test_device_batch.c — wisp_session_score_device (a CSR batch in CUDA device memory): on a GPU session the
 * checked kernel, on a CPU session the copy path, both against a float64 reference and the host path on random CSR
 * (uniform and Zipf ids, empty rows, duplicates, ids 0 and num_features-1, ids beyond the table, negative ids,
 * non-finite values, non-monotone and out-of-bounds indptr, a indptr[0] > 0), int32 and int64 indptr, values
 * or none, the answers to host (pageable or pinned) or device memory, f32/f16/i8 tables; the refusals; without a GPU,
 * WISP_ENODEV.
 * WISP_TEST_GPU=1: a GPU must be usable. WISP_TEST_QUICK / WISP_TEST_GPU_QUICK: 20k rows at most (else 200k). */
#include "testgpu.h"
#include "core/wisp_test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* not in wisp.h: the Python extension's hook (engine/cuda/cuda_device_batch.c, engine/cuda/cuda_stub.c) */
int wisp__device_sync(int dev);

/* One random batch, as the caller would hold it (int32 ids, int64 offsets), with the
 * expected outcome computed here, independently of the engine: per row, good or why not,
 * and for a good row its float64 probability. */
struct dcase {
    size_t rows, nnz;                 /* nnz = indptr[rows] (the ids array's length) */
    int64_t *rp;
    int32_t *ids;
    float *vals;
    int *why;                         /* 0 good; 1 range, 3 negative id, 4 non-finite value */
    double *ref, *ref_bin;            /* with values / binary features */
    uint64_t oor, oor_bin, good_nnz;
    size_t nbad, nbad_bin;
};

static void dcase_free(struct dcase *c)
{
    free(c->rp); free(c->ids); free(c->vals); free(c->why); free(c->ref); free(c->ref_bin);
    memset(c, 0, sizeof *c);
}

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* The expected outcome of row r (values or not) by the contract's rules. */
static int expect_row(const struct dcase *c, const wisp_model *m, size_t r, int with_vals, double *p, uint64_t *oor)
{
    const int64_t a = c->rp[r], b = c->rp[r + 1];
    const uint64_t nf = wisp_model_num_features(m);
    if (a < 0 || b < a || b > (int64_t)c->nnz) return 1;
    if (b - a > (int64_t)WISP_MAX_ROW_FEATURES) return 2;
    double z = 0;
    uint64_t o = 0;
    for (int64_t k = a; k < b; k++) {
        if (c->ids[k] < 0) return 3;
        if (with_vals && !isfinite(c->vals[k])) return 4;
        if ((uint64_t)c->ids[k] >= nf) { o++; continue; }
        z += wisp_model_weight(m, (uint64_t)c->ids[k]) * (with_vals ? (double)c->vals[k] : 1.0);
    }
    *p = sigmoid(wisp_model_bias(m) + z);
    *oor += o;
    return 0;
}

/* A batch: `hostile` adds negative ids, non-finite values and broken offsets. */
static void dcase_gen(struct dcase *c, const wisp_model *m, size_t rows, int zipf, int hostile, int base)
{
    memset(c, 0, sizeof *c);
    const uint64_t nf = wisp_model_num_features(m);
    c->rows = rows;
    c->rp = malloc((rows + 1) * sizeof *c->rp);
    size_t cap = rows * 40 + base + 16;
    c->ids = malloc(cap * sizeof *c->ids);
    c->vals = malloc(cap * sizeof *c->vals);
    struct zipf zf = zipf_new((double)nf, 1.1);
    size_t k = 0;
    for (; k < (size_t)base; k++) { c->ids[k] = -99; c->vals[k] = NAN; }    /* before indptr[0]: never read */
    c->rp[0] = base;
    for (size_t r = 0; r < rows; r++) {
        size_t w = rnd_below(10) == 0 ? 0 : 1 + rnd_below(39);              /* empty rows, widths 1..39 */
        for (size_t j = 0; j < w; j++, k++) {
            uint64_t id;
            switch (rnd_below(12)) {
            case 0: id = 0; break;
            case 1: id = nf - 1; break;
            case 2: id = nf + rnd_below(50); break;                         /* beyond the table: ignored */
            case 3: id = j ? (uint64_t)c->ids[k - 1] : 0; break;             /* a duplicate */
            default: id = zipf ? zipf_rank(&zf) - 1 : rnd_below(nf);
            }
            c->ids[k] = (int32_t)id;
            c->vals[k] = (float)(rnd01() * 4 - 2);
        }
        c->rp[r + 1] = (int64_t)k;
    }
    c->nnz = k;
    if (hostile && rows > 8) {
        for (int i = 0; i < 3; i++) {
            size_t r = 1 + rnd_below(rows - 2);
            if (c->rp[r + 1] > c->rp[r])
                c->ids[c->rp[r] + rnd_below((size_t)(c->rp[r + 1] - c->rp[r]))] = -(int32_t)(1 + rnd_below(1000));
            r = 1 + rnd_below(rows - 2);
            if (c->rp[r + 1] > c->rp[r])
                c->vals[c->rp[r] + rnd_below((size_t)(c->rp[r + 1] - c->rp[r]))] =
                    i == 0 ? NAN : i == 1 ? INFINITY : -INFINITY;
        }
        size_t r = 2 + rnd_below(rows - 4);
        c->rp[r] = c->rp[r + 1] + 3;                   /* a decrease: rows r-1 and r are out of order or past the end */
        r = 2 + rnd_below(rows - 4);
        c->rp[r] = -5;                                 /* negative: rows r-1 and r bad */
    }
    c->why = calloc(rows, sizeof *c->why);
    c->ref = calloc(rows, sizeof *c->ref);
    c->ref_bin = calloc(rows, sizeof *c->ref_bin);
    for (size_t r = 0; r < rows; r++) {
        c->why[r] = expect_row(c, m, r, 1, &c->ref[r], &c->oor);
        int wb = expect_row(c, m, r, 0, &c->ref_bin[r], &c->oor_bin);
        c->nbad += c->why[r] != 0;
        c->nbad_bin += wb != 0;
        if (wb) c->ref_bin[r] = NAN;
        if (c->why[r]) c->ref[r] = NAN;
        else c->good_nnz += (size_t)(c->rp[r + 1] - c->rp[r]);
    }
}

/* The bad rows the session lists: in row order, one per expected bad row, with the reason's words. */
static int check_bad_list(wisp_session *s, const wisp_model *m, const struct dcase *c, int with_vals, const char *what)
{
    size_t want = with_vals ? c->nbad : c->nbad_bin, got = wisp_session_bad_count(s), i = 0, wrong = 0;
    CHECK_MSG(got == want, "%s: %zu bad rows listed, %zu expected", what, got, want);
    for (size_t r = 0; r < c->rows && i < got; r++) {
        double p;
        uint64_t o = 0;
        const int why = expect_row(c, m, r, with_vals, &p, &o);
        if (!why) continue;
        size_t row = 0;
        uint64_t line = 0;
        const char *msg = NULL;
        if (wisp_session_bad_row(s, i++, &row, &line, &msg) != WISP_OK || row != r || !msg) { wrong++; continue; }
        const char *needle = why == 1 ? "is not a range inside"
                           : why == 3 ? "negative feature index" : "not a finite float32";
        if (!strstr(msg, needle)) {
            if (wrong++ < 3) fprintf(stderr, "%s: row %zu: '%s' lacks '%s'\n", what, r, msg, needle);
        }
    }
    CHECK_MSG(wrong == 0, "%s: %zu bad rows listed wrongly", what, wrong);
    return (int)wrong;
}

/* The case through wisp_session_score_device on s, every variant, against the reference. */
static wisp_engine *g_eng;          /* main's: run_dcase's pinned host outs */

static void run_dcase(const wisp_model *m, wisp_session *s, const struct dcase *c, const char *label, int want_gpu)
{
    const size_t rows = c->rows;
    int32_t *rp32 = malloc((rows + 1) * sizeof *rp32);
    for (size_t r = 0; r <= rows; r++) rp32[r] = (int32_t)c->rp[r];
    float *got = malloc(rows * sizeof *got);
    void *drp32 = NULL, *drp64 = NULL, *dids = NULL, *dvals = NULL, *dout = NULL;
    float *pout = NULL;
    CHECK_OK(wisp_cuda_test_alloc(0, (rows + 1) * 4, &drp32));
    CHECK_OK(wisp_cuda_test_alloc(0, (rows + 1) * 8, &drp64));
    CHECK_OK(wisp_cuda_test_alloc(0, c->nnz * 4, &dids));
    CHECK_OK(wisp_cuda_test_alloc(0, c->nnz * 4, &dvals));
    CHECK_OK(wisp_cuda_test_alloc(0, rows * 4, &dout));
    if (!drp32 || !drp64 || !dids || !dvals || !dout) goto done;
    CHECK_OK(wisp_cuda_test_copy(drp32, rp32, (rows + 1) * 4));
    CHECK_OK(wisp_cuda_test_copy(drp64, c->rp, (rows + 1) * 8));
    CHECK_OK(wisp_cuda_test_copy(dids, c->ids, c->nnz * 4));
    CHECK_OK(wisp_cuda_test_copy(dvals, c->vals, c->nnz * 4));
    /* passes 8..11: the host out in wisp_engine_host_alloc memory (pinned: the answers come
     * back in one DMA, as the Python package's host outputs of GPU batches do) */
    CHECK_OK(wisp_engine_host_alloc(g_eng, rows * 4, (void **)&pout));
    if (!pout) goto done;
    if (want_gpu) CHECK(wisp_engine_host_pinned(g_eng, pout));
    for (int pass = 0; pass < 12; pass++) {
        const int pinned = pass >= 8, bits = pass & 1 ? 64 : 32, on_dev = !pinned && ((pass >> 1) & 1);
        const int with_vals = pinned ? !(pass & 2) : !(pass & 4);
        float *hout = pinned ? pout : got;
        char what[160];
        snprintf(what, sizeof what, "%s, %s, indptr int%d, out on the %s, %s", label, wisp_session_device(s), bits,
                 on_dev ? "device" : pinned ? "host (pinned)" : "host", with_vals ? "values" : "binary");
        for (size_t r = 0; r < rows; r++) got[r] = hout[r] = -7.0f;
        if (on_dev) CHECK_OK(wisp_cuda_test_copy(dout, got, rows * 4));
        uint64_t before[WISP_STAT_COUNT];
        for (int k = 0; k < WISP_STAT_COUNT; k++) before[k] = wisp_session_stat(s, k);
        CHECK_OK(wisp_session_score_device(s, rows, bits == 64 ? drp64 : drp32, bits, dids, with_vals ? dvals : NULL,
                                           NULL, on_dev ? dout : hout, on_dev));
        if (on_dev) CHECK_OK(wisp_cuda_test_copy(got, dout, rows * 4));
        if (pinned) memcpy(got, pout, rows * 4);
        const double *ref = with_vals ? c->ref : c->ref_bin;
        size_t nan_differ = 0, far = 0;
        double worst = 0;
        for (size_t r = 0; r < rows; r++) {
            if (isnan(ref[r]) || isnan(got[r])) { nan_differ += isnan(ref[r]) != isnan(got[r]); continue; }
            double d = fabs(ref[r] - got[r]);
            far += d > TOL;
            worst = fmax(worst, d);
        }
        CHECK_MSG(nan_differ == 0 && far == 0, "%s: %zu NaN rows differ, %zu rows off, worst %.3g", what, nan_differ,
                  far, worst);
        check_bad_list(s, m, c, with_vals, what);
        const uint64_t oor = with_vals ? c->oor : c->oor_bin;
        CHECK_MSG(wisp_session_stat(s, WISP_STAT_OUT_OF_RANGE) - before[WISP_STAT_OUT_OF_RANGE] == oor,
                  "%s: out_of_range +%llu, expected %llu", what,
                  (unsigned long long)(wisp_session_stat(s, WISP_STAT_OUT_OF_RANGE) - before[WISP_STAT_OUT_OF_RANGE]),
                  (unsigned long long)oor);
        CHECK(wisp_session_stat(s, WISP_STAT_ROWS) - before[WISP_STAT_ROWS] == rows);
        CHECK(wisp_session_stat(s, WISP_STAT_BAD_ROWS) - before[WISP_STAT_BAD_ROWS]
              == (with_vals ? c->nbad : c->nbad_bin));
        if (with_vals)
            CHECK_MSG(wisp_session_stat(s, WISP_STAT_NNZ) - before[WISP_STAT_NNZ] == c->good_nnz,
                      "%s: nnz +%llu, good rows hold %llu", what,
                      (unsigned long long)(wisp_session_stat(s, WISP_STAT_NNZ) - before[WISP_STAT_NNZ]),
                      (unsigned long long)c->good_nnz);
        CHECK(wisp_session_stat(s, WISP_STAT_FALLBACKS) == before[WISP_STAT_FALLBACKS]);
        const char *ld = wisp_session_last_device(s);
        CHECK_MSG(want_gpu ? strncmp(ld, "gpu", 3) == 0 : strcmp(ld, "cpu") == 0, "%s: scored on %s", what, ld);
    }
done:
    wisp_engine_host_free(g_eng, pout);
    wisp_cuda_test_free(drp32);
    wisp_cuda_test_free(drp64);
    wisp_cuda_test_free(dids);
    wisp_cuda_test_free(dvals);
    wisp_cuda_test_free(dout);
    free(rp32);
    free(got);
}

/* The GPU session's and the CPU session's answers agree (TOL: the GPU adds a row's products in
 * another order) with NaN in the same rows, and their bad rows and messages are the same, byte for byte. */
static void same_on_both(wisp_session *sg, wisp_session *sc, const struct dcase *c)
{
    const size_t rows = c->rows;
    void *drp = NULL, *dids = NULL, *dvals = NULL;
    float *a = malloc(rows * 4), *b = malloc(rows * 4);
    CHECK_OK(wisp_cuda_test_alloc(0, (rows + 1) * 8, &drp));
    CHECK_OK(wisp_cuda_test_alloc(0, c->nnz * 4, &dids));
    CHECK_OK(wisp_cuda_test_alloc(0, c->nnz * 4, &dvals));
    if (drp && dids && dvals) {
        CHECK_OK(wisp_cuda_test_copy(drp, c->rp, (rows + 1) * 8));
        CHECK_OK(wisp_cuda_test_copy(dids, c->ids, c->nnz * 4));
        CHECK_OK(wisp_cuda_test_copy(dvals, c->vals, c->nnz * 4));
        CHECK_OK(wisp_session_score_device(sg, rows, drp, 64, dids, dvals, NULL, a, 0));
        CHECK_OK(wisp_session_score_device(sc, rows, drp, 64, dids, dvals, NULL, b, 0));
        size_t differ = 0;
        for (size_t r = 0; r < rows; r++)
            differ += isnan(a[r]) != isnan(b[r]) || (!isnan(a[r]) && fabs((double)a[r] - b[r]) > TOL);
        CHECK_MSG(differ == 0, "gpu and cpu sessions: %zu answers differ", differ);
        size_t n = wisp_session_bad_count(sg), mism = 0;
        CHECK(n == wisp_session_bad_count(sc));
        for (size_t i = 0; i < n && n == wisp_session_bad_count(sc); i++) {
            size_t ra, rb;
            const char *ma, *mb;
            if (wisp_session_bad_row(sg, i, &ra, NULL, &ma) || wisp_session_bad_row(sc, i, &rb, NULL, &mb)
                || ra != rb || strcmp(ma, mb)) mism++;
        }
        CHECK_MSG(mism == 0, "gpu and cpu sessions: %zu bad rows differ", mism);
    }
    wisp_cuda_test_free(drp);
    wisp_cuda_test_free(dids);
    wisp_cuda_test_free(dvals);
    free(a);
    free(b);
}

static void test_refusals(wisp_engine *eng, wisp_session *s)
{
    (void)eng;
    int32_t rp[4] = { 0, 1, 2, 3 }, ids[3] = { 1, 2, 3 };
    float got[3];
    void *drp = NULL, *dids = NULL;
    CHECK_OK(wisp_cuda_test_alloc(0, sizeof rp, &drp));
    CHECK_OK(wisp_cuda_test_alloc(0, sizeof ids, &dids));
    if (!drp || !dids) goto done;
    CHECK_OK(wisp_cuda_test_copy(drp, rp, sizeof rp));
    CHECK_OK(wisp_cuda_test_copy(dids, ids, sizeof ids));
    CHECK_FAILS(wisp_session_score_device(s, 3, drp, 16, dids, NULL, NULL, got, 0), WISP_EINVAL, "indptr_bits");
    CHECK_FAILS(wisp_session_score_device(s, 3, rp, 32, dids, NULL, NULL, got, 0), WISP_EINVAL,
                "not CUDA device memory");
    CHECK_FAILS(wisp_session_score_device(s, 3, drp, 32, dids, NULL, NULL, got, 1), WISP_EINVAL, "out is not memory");
    CHECK_FAILS(wisp_session_score_device(s, 3, drp, 32, ids, NULL, NULL, got, 0), WISP_EINVAL, "ids is not memory");
    CHECK_FAILS(wisp_session_score_device(s, 3, drp, 32, NULL, NULL, NULL, got, 0), WISP_EINVAL, "ids is NULL");
    CHECK_FAILS(wisp_session_score_device(NULL, 3, drp, 32, dids, NULL, NULL, got, 0), WISP_EINVAL, "session is NULL");
    CHECK_FAILS(wisp_session_score_device(s, 3, NULL, 32, dids, NULL, NULL, got, 0), WISP_EINVAL, "indptr is NULL");
    CHECK_OK(wisp_session_score_device(s, 0, NULL, 32, NULL, NULL, NULL, NULL, 0));      /* no rows: nothing to do */
    CHECK(wisp_session_bad_count(s) == 0);
    /* the _n form: indptr[rows] past the ids' length is refused before an id is read */
    CHECK_FAILS(wisp_session_score_device_n(s, 3, drp, 32, dids, NULL, 2, NULL, got, 0), WISP_EINVAL,
                "but ids has 2 entries");
    CHECK_OK(wisp_session_score_device_n(s, 3, drp, 32, dids, NULL, 3, NULL, got, 0));
    rp[3] = -1;                                                                       /* indptr[rows] negative */
    CHECK_OK(wisp_cuda_test_copy(drp, rp, sizeof rp));
    CHECK_FAILS(wisp_session_score_device(s, 3, drp, 32, dids, NULL, NULL, got, 0), WISP_EINVAL, "negative");
    CHECK(wisp_session_bad_count(s) == 0);
    int64_t rp64[2] = { 0, (int64_t)WISP_MAX_NNZ + 1 };
    void *drp64 = NULL;
    CHECK_OK(wisp_cuda_test_alloc(0, sizeof rp64, &drp64));
    if (drp64) {
        CHECK_OK(wisp_cuda_test_copy(drp64, rp64, sizeof rp64));
        CHECK_FAILS(wisp_session_score_device(s, 1, drp64, 64, dids, NULL, NULL, got, 0), WISP_ELIMIT, "WISP_MAX_NNZ");
        wisp_cuda_test_free(drp64);
    }
    CHECK(wisp_session_bad_count(s) == 0);
done:
    wisp_cuda_test_free(drp);
    wisp_cuda_test_free(dids);
}

int main(void)
{
    testrand_seed("test_device_batch");
    const char *tg = getenv("WISP_TEST_GPU");
    const int want_gpu = tg && *tg && strcmp(tg, "0") != 0;
    const int quick = getenv("WISP_TEST_QUICK") != NULL || getenv("WISP_TEST_GPU_QUICK") != NULL;
    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(2, &eng));
    if (!eng) return CHECK_DONE("test_device_batch");
    g_eng = eng;
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    const int n = wisp_engine_gpu_count(eng);
    printf("test_device_batch: %d GPU(s): %s\n", n, wisp_engine_gpu_status(eng));
    if (n == 0) {
        /* a batch in device memory needs a GPU: refused with the reason, on every placement */
        CHECK_MSG(!want_gpu, "WISP_TEST_GPU is set but no GPU is usable: %s", wisp_engine_gpu_status(eng));
        wisp_model *m = make_model(eng, 4, WISP_F32, 0);
        const char *devs[] = { "gpu", "cpu", "auto" };
        for (int i = 0; i < 3; i++) {
            wisp_session *s = NULL;
            CHECK_OK(wisp_session_new(eng, m, devs[i], &s));
            uint32_t rp1[2] = { 0, 0 };
            float o1;
            /* "no usable GPU" (a CUDA build) or "no CUDA backend" (a build without nvcc) */
            CHECK_FAILS(wisp_session_score_device(s, 1, rp1, 32, NULL, NULL, NULL, &o1, 0), WISP_ENODEV,
                        "wisp_session_score_device: ");
            CHECK_FAILS(wisp_session_score_device_n(s, 1, rp1, 32, NULL, NULL, 0, NULL, &o1, 0), WISP_ENODEV,
                        "wisp_session_score_device: ");
            CHECK(wisp_session_bad_count(s) == 0);
            wisp_session_free(s);
        }
        void *p = (void *)1;
        CHECK_FAILS(wisp_device_alloc(0, 64, &p), WISP_ENODEV, "wisp_device_alloc");
        CHECK(p == NULL);
        wisp_device_free(0, NULL);
        CHECK_FAILS(wisp__device_sync(-1), WISP_ENODEV, "wisp__device_sync");
        CHECK_FAILS(wisp__device_sync(0), WISP_ENODEV, "wisp__device_sync");
        wisp_model_free(m);
        wisp_engine_free(eng);
        return CHECK_DONE("test_device_batch");
    }
    /* wisp__device_sync: one device, every device, refusals */
    CHECK_OK(wisp__device_sync(0));
    CHECK_OK(wisp__device_sync(-1));
    CHECK_FAILS(wisp__device_sync(-2), WISP_EINVAL, "does not exist");
    CHECK_FAILS(wisp__device_sync(1 << 20), WISP_EINVAL, "does not exist");
    const int dtypes[] = { WISP_F32, WISP_F16, WISP_I8 };
    for (int di = 0; di < 3; di++) {
        wisp_model *m = make_model(eng, di == 0 ? 100000 : 5000, dtypes[di], 0.25);
        wisp_session *sg = NULL, *sc = NULL;
        CHECK_OK(wisp_session_new(eng, m, "gpu", &sg));
        CHECK_OK(wisp_session_new(eng, m, "cpu", &sc));
        if (!sg || !sc) break;
        const size_t sizes[] = { 1, 9, 300, 4097, quick ? 20000 : 200000 };
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int hostile = 0; hostile < 2; hostile++) {
                struct dcase c;
                const int zipf = (int)((si + hostile) & 1), base = si == 2 && hostile ? 7 : 0;
                dcase_gen(&c, m, sizes[si], zipf, hostile, base);
                char label[96];
                snprintf(label, sizeof label, "%s, %zu rows, %s ids%s%s", wisp_dtype_name(dtypes[di]), sizes[si],
                         zipf ? "Zipf" : "uniform", hostile ? ", hostile" : "", base ? ", indptr[0] > 0" : "");
                run_dcase(m, sg, &c, label, 1);
                if (sizes[si] <= 4097 || !quick) run_dcase(m, sc, &c, label, 0);
                same_on_both(sg, sc, &c);
                dcase_free(&c);
            }
        if (di == 0) {
            test_refusals(eng, sg);
            test_refusals(eng, sc);
        }
        wisp_session_free(sg);
        wisp_session_free(sc);
        wisp_model_free(m);
    }
    wisp_engine_free(eng);
    return CHECK_DONE("test_device_batch");
}
