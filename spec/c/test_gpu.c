/* test_gpu.c — the CUDA backend's scoring of host batches: CPU fallback without a GPU; with WISP_TEST_GPU=1,
 * conformance against a float64 reference and the CPU (sums beyond float too), splits, shards, zero-copy, owned
 * batches shipped packed, faults. Submit/wait streams and batches in device memory: test_gpu_stream.c; what the
 * two share: testgpu.h. */
#include "testgpu.h"
#include "testbatch.h"        /* arena_ok */
#include "core/wisp_test.h"   /* wisp_cuda_units_read, wisp_cuda_time_resident */

#include <float.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* when >= 0, expect_gpu also wants this sharding mode (0 whole table, 1 broadcast, 2 peer), units and shards */
static int want_mode = -1, want_units, want_shards;

/* a case that must run on the GPU and agree with the float64 reference and the CPU */
static void expect_gpu(const char *what, wisp_engine *eng, wisp_model *m, const struct spec *sp, int wrap,
                       const char *device)
{
    struct data d;
    gen(&d, sp, m);
    struct outcome o = run_case(eng, m, &d, sp->vm, wrap, device);
    const int mode_ok = want_mode < 0 || (o.mode == want_mode && o.units == want_units && o.shards == want_shards);
    CHECK_MSG(o.unwritten == 0 && o.maxerr <= TOL && o.maxerr_cpu <= TOL && o.fallbacks == 0 && o.oor == d.oor
              && !strncmp(o.last, "gpu", 3) && mode_ok,
              "%s [%s, dtype %s, rows %zu, vm %d, %s ids, width %u-%u, %s]: unwritten %d, max |gpu - f64| %.3g, "
              "max |gpu - cpu| %.3g, fallbacks %llu, out of range %llu (want %llu), last device %s, "
              "mode %d units %d shards %d (want %d %d %d)",
              what, device, wisp_dtype_name(wisp_model_dtype(m)), sp->rows, sp->vm, sp->dist ? "zipf" : "uniform",
              sp->wmin, sp->wmax, wrap ? "wrapped" : "built", o.unwritten, o.maxerr, o.maxerr_cpu,
              (unsigned long long)o.fallbacks, (unsigned long long)o.oor, (unsigned long long)d.oor, o.last,
              o.mode, o.units, o.shards, want_mode, want_units, want_shards);
    data_free(&d);
}

/* ---- sums beyond float: the GPU sums as the CPU does (kernels/score.cu) -------------------------
 * Weights near FLT_MAX times values of 10 (and 3e38, and 1e30) give products and partial sums
 * that overflow float but not double; the int8 model's scale is FLT_MAX / 127. Summed in float
 * (the kernel before) these rows gave NaN (inf - inf) or 0/1; in double they are the finite
 * answers of the float64 reference. Every route: whole table (tiny, inline, small and large
 * batches), peer shards, broadcast shards (partial sums added on the host), 3 parts. */
static wisp_model *wide_model(wisp_engine *eng, int dtype)
{
    const uint64_t nf = 1024;
    float *w = calloc(nf, sizeof *w);
    for (uint64_t i = 3; i < nf; i++) w[i] = (float)((rnd01() - 0.5) * 0.01);
    w[0] = dtype == WISP_I8 ? FLT_MAX : 3e38f;
    w[1] = -w[0];
    w[2] = 1.5f;
    w[512] = -w[0];                                  /* in the second of 2 shards */
    w[513] = w[0];
    char path[256];
    snprintf(path, sizeof path, "/tmp/wisp_test_gpu_%d_%d.wisp", (int)getpid(), model_seq++);
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_write(path, w, nf, 0.25, dtype, "source=test_gpu wide\n", NULL));
    CHECK_OK(wisp_model_load(eng, path, &m));
    unlink(path);
    free(w);
    return m;
}

static void wide_data(struct data *d, const wisp_model *m, size_t copies)
{
    /* Every row's sum is the same in any order of addition: huge products that cancel exactly
     * (a - a, a + a - a) with nothing small beside them, or huge products that dominate every
     * small one. A row such as a - a + 1.5 has no order-free answer (1.5 summed sequentially, as
     * the CPU does; 0 when the GPU's lanes add 1.5 to a first): on the H200 such rows differ by
     * up to 0.502. Summed in float, rows 0, 1, 3, 4 and 6 would give NaN (inf - inf). */
    static const uint32_t rid[][3] = { { 0, 1, 9 }, { 0, 512, 9 }, { 0, 513, 2 }, { 0, 513, 1 }, { 0, 1, 9 },
                                       { 0, 2, 9 }, { 1, 512, 9 }, { 513, 1, 2 } };
    static const float rv[][3] = { { 10, 10, 0 }, { 10, 10, 0 }, { 10, 10, 1 }, { 10, 10, 10 }, { 3e38f, 3e38f, 0 },
                                   { 1e30f, -2, 0 }, { 10, -10, 0 }, { -3e38f, 3e38f, 7 } };
    static const unsigned rn[] = { 2, 2, 3, 3, 3, 3, 2, 3 };
    const size_t nr = sizeof rn / sizeof rn[0], rows = nr * copies;
    memset(d, 0, sizeof *d);
    d->rows = rows;
    d->indptr = malloc((rows + 1) * sizeof *d->indptr);
    d->val_ptr = malloc((rows + 1) * sizeof *d->val_ptr);
    d->ids = malloc(rows * 3 * sizeof *d->ids);
    d->ids64 = malloc(rows * 3 * sizeof *d->ids64);
    d->vals = malloc(rows * 3 * sizeof *d->vals);
    d->ref = malloc(rows * sizeof *d->ref);
    d->indptr[0] = d->val_ptr[0] = 0;
    for (size_t r = 0; r < rows; r++) {
        const size_t q = r % nr;
        /* the float64 reference: the weights as the model holds them (int8: the stored q, the
         * scale applied to the row's sum), products and sum in double */
        const int i8 = wisp_model_dtype(m) == WISP_I8;
        double sum = 0;
        for (unsigned k = 0; k < rn[q]; k++) {
            const uint32_t id = rid[q][k];
            d->ids[d->nnz] = id;
            d->ids64[d->nnz] = id;
            d->vals[d->nvals++] = rv[q][k];
            const double w = i8 ? (double)((const int8_t *)m->weights)[id] : (double)wisp_model_weight(m, id);
            sum += w * (double)rv[q][k];
            d->nnz++;
        }
        const double z = wisp_model_bias(m) + (i8 ? sum * (double)wisp_model_scale(m) : sum);
        d->indptr[r + 1] = (uint32_t)d->nnz;
        d->val_ptr[r + 1] = (uint32_t)d->nvals;
        d->ref[r] = z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
    }
}

static void wide_case(const char *what, wisp_engine *eng, wisp_model *m, size_t copies, int vm, int wrap,
                      const char *device)
{
    struct data d;
    wide_data(&d, m, copies);
    struct outcome o = run_case(eng, m, &d, vm, wrap, device);
    const int mode_ok = want_mode < 0 || (o.mode == want_mode && o.units == want_units && o.shards == want_shards);
    CHECK_MSG(o.unwritten == 0 && o.maxerr <= TOL && o.maxerr_cpu <= TOL && o.fallbacks == 0
              && !strncmp(o.last, "gpu", 3) && mode_ok,
              "sums beyond float, %s [dtype %s, rows %zu, %s, %s]: NaN answers %d, max |gpu - f64| %.3g, "
              "max |gpu - cpu| %.3g, fallbacks %llu, last device %s, mode %d units %d shards %d (want %d %d %d)",
              what, wisp_dtype_name(wisp_model_dtype(m)), d.rows, vm == VM_ALL ? "all valued" : "mixed",
              wrap ? "wrapped" : "built", o.unwritten, o.maxerr, o.maxerr_cpu, (unsigned long long)o.fallbacks,
              o.last, o.mode, o.units, o.shards, want_mode, want_units, want_shards);
    data_free(&d);
}

static void test_wide_sums(wisp_engine *eng, int quick)
{
    /* large: past STAGE_ALL_BYTES (1 MiB, cuda_internal.h) so the chunked path runs; small in quick mode
     * (sanitizers) */
    const size_t large = quick ? 6000 : 40000;
    const int dtypes[] = { WISP_F32, WISP_I8 };
    for (int t = 0; t < 2; t++) {
        /* the whole table: a tiny batch (inline), a small one (graph), a large one (chunks), zero-copy */
        wisp_model *m = wide_model(eng, dtypes[t]);
        wide_case("whole table, tiny", eng, m, 1, VM_ALL, 0, "gpu");
        wide_case("whole table, small", eng, m, 200, VM_MIXED, 0, "gpu");
        wide_case("whole table, large", eng, m, large, VM_ALL, 1, "gpu");
        set_env("WISP_GPU_ZEROCOPY", "all");
        wide_case("zero-copy", eng, m, large, VM_MIXED, 0, "gpu");
        set_env("WISP_GPU_ZEROCOPY", NULL);
        set_env("WISP_GPU_PARTS", "3");
        wide_case("3 parts", eng, m, large, VM_ALL, 0, "gpus");
        set_env("WISP_GPU_PARTS", NULL);
        wisp_model_free(m);
        /* shards: ids 0..511 and 512..1023, peer (kernels read each other's shard) and broadcast
         * (each unit's partial sums, added up on the host); a fresh model per mode */
        const char *modes[] = { "peer", "broadcast" };
        for (int k = 0; k < 2; k++) {
            m = wide_model(eng, dtypes[t]);
            set_env("WISP_GPU_SHARDING", modes[k]);
            set_env("WISP_GPU_PARTS", "2");
            set_env("WISP_GPU_SHARDS", "2");
            want_mode = k == 0 ? 2 : 1;
            want_units = 2;
            want_shards = 2;
            wide_case(modes[k], eng, m, 1, VM_ALL, 0, "gpu");
            wide_case(modes[k], eng, m, large, VM_MIXED, 1, "gpu");
            want_mode = -1;
            set_env("WISP_GPU_SHARDS", NULL);
            set_env("WISP_GPU_PARTS", NULL);
            set_env("WISP_GPU_SHARDING", NULL);
            wisp_model_free(m);
        }
    }

    /* the values rule on the GPU: a wrapped batch's rows with a non-finite value are listed bad when
     * wrapped and answered NaN on every route (tiny, large), the other rows as the CPU */
    {
        wisp_model *m = wide_model(eng, WISP_F32);
        const size_t rows = 20000;
        uint32_t *rp = malloc((rows + 1) * sizeof *rp), *ids = malloc(rows * 2 * sizeof *ids);
        float *vals = malloc(rows * 2 * sizeof *vals);
        rp[0] = 0;
        for (size_t r = 0; r < rows; r++) {
            ids[2 * r] = (uint32_t)(3 + r % 1000); ids[2 * r + 1] = (uint32_t)(5 + r % 900);
            vals[2 * r] = 0.5f;
            vals[2 * r + 1] = r % 7 == 1 ? NAN : r % 7 == 3 ? INFINITY : r % 7 == 5 ? -INFINITY : 2.0f;
            rp[r + 1] = (uint32_t)(2 * r + 2);
        }
        const size_t sizes[] = { 7, rows };
        for (int k = 0; k < 2; k++) {
            wisp_batch *b = NULL;
            wisp_session *g = NULL, *c = NULL;
            CHECK_OK(wisp_batch_wrap(eng, sizes[k], rp, ids, NULL, vals, &b));
            CHECK_OK(wisp_session_new(eng, m, "gpu", &g));
            CHECK_OK(wisp_session_new(eng, m, "cpu", &c));
            float *og = malloc(sizes[k] * sizeof *og), *oc = malloc(sizes[k] * sizeof *oc);
            if (b && g && c) {
                size_t want_bad = 0;
                for (size_t r = 0; r < sizes[k]; r++) want_bad += r % 7 == 1 || r % 7 == 3 || r % 7 == 5;
                CHECK_MSG(wisp_batch_bad_count(b) == want_bad, "%zu rows: %zu bad, want %zu", sizes[k],
                          wisp_batch_bad_count(b), want_bad);
                CHECK_OK(wisp_session_score(g, b, og));
                CHECK_OK(wisp_session_score(c, b, oc));
                size_t wrong = 0;
                for (size_t r = 0; r < sizes[k]; r++) {
                    const int bad = r % 7 == 1 || r % 7 == 3 || r % 7 == 5;
                    if (bad ? !isnan(og[r]) : !(fabs((double)og[r] - oc[r]) <= TOL)) wrong++;
                }
                CHECK_MSG(wrong == 0 && !strncmp(wisp_session_last_device(g), "gpu", 3),
                          "values rule on the GPU, %zu rows: %zu wrong answers (last device %s)", sizes[k], wrong,
                          wisp_session_last_device(g));
            }
            free(og); free(oc);
            wisp_session_free(g); wisp_session_free(c); wisp_batch_free(b);
        }
        free(rp); free(ids); free(vals);
        wisp_model_free(m);
    }
}

/* ---- owned batches: one arena, shipped packed (engine/batch/batch.c, engine/cuda/cuda_launch.c) --------------- */

/* score b on s and on the CPU; rows [0, n1) against d1's reference, the rest against d2's */
static void check_parts(const char *what, wisp_session *s, wisp_session *cpu, wisp_batch *b,
                        const struct data *d1, const struct data *d2)
{
    const size_t rows = wisp_batch_rows(b);
    float *out = malloc(rows * sizeof *out), *outc = malloc(rows * sizeof *outc);
    for (size_t r = 0; r < rows; r++) out[r] = NAN;
    const uint64_t fb0 = wisp_session_stat(s, WISP_STAT_FALLBACKS);
    CHECK_OK(wisp_session_score(s, b, out));
    CHECK_OK(wisp_session_score(cpu, b, outc));
    size_t bad = 0, first = 0;
    double maxerr = 0;
    for (size_t r = 0; r < rows; r++) {
        const double ref = r < d1->rows ? d1->ref[r] : d2->ref[r - d1->rows];
        const double e = fabs(out[r] - ref), ec = fabs((double)out[r] - outc[r]);
        if (!(e <= TOL && ec <= TOL)) { if (!bad++) first = r; }
        if (e > maxerr) maxerr = e;
    }
    CHECK_MSG(bad == 0 && wisp_session_stat(s, WISP_STAT_FALLBACKS) == fb0
              && !strncmp(wisp_session_last_device(s), "gpu", 3),
              "%s: rows %zu (nnz %zu, nvals %zu, mode %d, row_cap %zu): %zu rows wrong (first %zu), max err %.3g, "
              "fallbacks %llu, last device %s", what, rows, wisp_batch_nnz(b), wisp_batch_nvals(b), b->value_mode,
              b->row_cap, bad, first, maxerr, (unsigned long long)(wisp_session_stat(s, WISP_STAT_FALLBACKS) - fb0),
              wisp_session_last_device(s));
    free(out);
    free(outc);
}

/* Owned batches through the packed copies: sizes on both sides of the gap rule
 * (65536 rows: no gap between the offsets; 70001: a large gap) and of the chunk
 * bounds, every value mode, growth after scoring, clear and reuse with another
 * mode, binary rows then valued ones (val_ptr materialised late), zero-copy
 * from the arena; then many tiny batches (their answer slots' tag changes every batch). */
static void test_packed(wisp_engine *eng, int quick)
{
    wisp_model *m = make_model(eng, (uint64_t)1 << 22, WISP_F32, -0.4);
    wisp_session *cpu = NULL;
    CHECK_OK(wisp_session_new(eng, m, "cpu", &cpu));
    const char *chunks[] = { NULL, "3", "16", "1" };
    const size_t sizes[] = { 65536, 70001, 6000, 200000 };
    const size_t nsizes = quick ? 3 : 4;
    char what[160];
    for (size_t c = 0; c < (quick ? 2u : 4u); c++) {
        set_env("WISP_GPU_CHUNKS", chunks[c]);
        wisp_session *s = NULL;
        CHECK_OK(wisp_session_new(eng, m, "gpu", &s));
        for (size_t k = 0; k < nsizes; k++)
            for (int vm = 0; vm < 3; vm++) {
                const unsigned wmin = sizes[k] < 10000 ? 40 : 10, wmax = sizes[k] < 10000 ? 60 : 60;
                struct spec sp = { sizes[k], vm, (int)(k & 1), wmin, wmax, 0.02, 0.001, 0.01 };
                struct data d1, d2;
                gen(&d1, &sp, m);
                wisp_batch *b = NULL;
                CHECK_OK(wisp_batch_new(eng, &b));
                if (!b) { data_free(&d1); continue; }
                append_rows(b, &d1, vm);
                CHECK_MSG(arena_ok(b), "arena invariants after building %zu rows", d1.rows);
                snprintf(what, sizeof what, "packed, chunks %s, built", chunks[c] ? chunks[c] : "auto");
                check_parts(what, s, cpu, b, &d1, &d1);
                /* growth after scoring: more rows of the next mode (the arena is laid out anew) */
                struct spec sq = { sizes[k] / 2 + 1, (vm + 1) % 3, 0, wmin, wmax, 0.02, 0.001, 0.01 };
                gen(&d2, &sq, m);
                append_rows(b, &d2, sq.vm);
                CHECK_MSG(arena_ok(b), "arena invariants after growing to %zu rows", wisp_batch_rows(b));
                snprintf(what, sizeof what, "packed, chunks %s, grown (mode %d then %d)",
                         chunks[c] ? chunks[c] : "auto", vm, sq.vm);
                check_parts(what, s, cpu, b, &d1, &d2);
                /* clear and reuse: the second part alone, in its own mode */
                wisp_batch_clear(b);
                append_rows(b, &d2, sq.vm);
                CHECK_MSG(arena_ok(b) && wisp_batch_rows(b) == d2.rows, "arena invariants after clear and reuse");
                snprintf(what, sizeof what, "packed, chunks %s, cleared and reused", chunks[c] ? chunks[c] : "auto");
                check_parts(what, s, cpu, b, &d2, &d2);
                wisp_batch_free(b);
                data_free(&d1);
                data_free(&d2);
            }
        wisp_session_free(s);
    }
    set_env("WISP_GPU_CHUNKS", NULL);

    /* binary rows first, valued rows after (val_ptr materialised mid-batch), one copy of the head or not */
    for (size_t k = 0; k < 2; k++) {
        wisp_session *s = NULL;
        CHECK_OK(wisp_session_new(eng, m, "gpu", &s));
        struct spec a = { k ? 40000 : 32768, VM_NONE, 0, 20, 40, 0.01, 0.001, 0.01 };
        struct spec z = { k ? 30001 : 32768, VM_ALL, 1, 20, 40, 0.01, 0.001, 0.01 };
        struct data d1, d2;
        gen(&d1, &a, m);
        gen(&d2, &z, m);
        wisp_batch *b = NULL;
        CHECK_OK(wisp_batch_new(eng, &b));
        if (b) {
            append_rows(b, &d1, VM_NONE);
            CHECK(b->val_ptr == NULL && arena_ok(b));
            append_rows(b, &d2, VM_ALL);
            CHECK(b->value_mode == WISP_VALUES_MIXED && b->val_ptr != NULL && arena_ok(b));
            check_parts("packed, binary rows then valued rows", s, cpu, b, &d1, &d2);
            wisp_batch_free(b);
        }
        data_free(&d1);
        data_free(&d2);
        wisp_session_free(s);
    }

    /* zero-copy straight from an owned batch's arena (a large batch, every mode) */
    set_env("WISP_GPU_ZEROCOPY", "all");
    for (int vm = 0; vm < 3; vm++) {
        struct spec sp = { 30000, vm, 0, 20, 60, 0.02, 0.001, 0.01 };
        expect_gpu("zero-copy from the arena", eng, m, &sp, 0, "gpu");
    }
    set_env("WISP_GPU_ZEROCOPY", NULL);

    /* many tiny batches in a row: each waits on its rows' answer slots (1 to 4 blocks), the slot tag changes every
     * batch */
    wisp_session *s = NULL;
    CHECK_OK(wisp_session_new(eng, m, "gpu", &s));
    wisp_batch *b = NULL;
    CHECK_OK(wisp_batch_new(eng, &b));
    size_t wrong = 0;
    for (int i = 0; i < (quick ? 200 : 1000) && s && b; i++) {
        const int kind = i % 4;
        struct spec sp = kind == 0 ? (struct spec){ 1 + rnd_below(10), i % 3, 0, 1, 40, 0.05, 0.05, 0.05 }
                       : kind == 1 ? (struct spec){ 20 + rnd_below(20), i % 3, 0, 1, 12, 0.05, 0.05, 0.05 }
                       : kind == 2 ? (struct spec){ 150 + rnd_below(60), VM_NONE, 0, 1, 3, 0.05, 0.05, 0.05 }
                                   : (struct spec){ 10, VM_MIXED, 1, 39, 39, 0, 0.01, 0 };
        struct data d;
        gen(&d, &sp, m);
        wisp_batch_clear(b);
        append_rows(b, &d, sp.vm);
        float out[256];
        for (size_t r = 0; r < d.rows; r++) out[r] = NAN;
        CHECK_OK(wisp_session_score(s, b, out));
        for (size_t r = 0; r < d.rows; r++) if (!(fabs(out[r] - d.ref[r]) <= TOL)) wrong++;
        data_free(&d);
    }
    CHECK_MSG(wrong == 0 && wisp_session_stat(s, WISP_STAT_FALLBACKS) == 0
              && !strncmp(wisp_session_last_device(s), "gpu", 3),
              "tiny batches: %zu rows wrong, %llu fallbacks", wrong,
              (unsigned long long)wisp_session_stat(s, WISP_STAT_FALLBACKS));
    wisp_batch_free(b);
    wisp_session_free(s);
    wisp_session_free(cpu);
    wisp_model_free(m);
}

/* ---- without a usable GPU: everything still answers, on the CPU -------------------------- */

static void test_no_gpu(wisp_engine *eng)
{
    wisp_model *m = make_model(eng, 5000, WISP_F32, -0.25);
    const char *devs[] = { "gpu", "gpu:0", "gpus", "auto" };
    for (int i = 0; i < 4; i++) {
        struct spec sp = { 300, i % 3, ID_UNIFORM, 0, 60, 0.05, 0.05, 0.05 };
        struct data d;
        gen(&d, &sp, m);
        struct outcome o = run_case(eng, m, &d, sp.vm, i & 1, devs[i]);
        int gpu_asked = strcmp(devs[i], "auto") != 0;
        CHECK_MSG(o.unwritten == 0 && o.maxerr <= 1e-6 && !strcmp(o.last, "cpu")
                  && o.fallbacks == (uint64_t)(gpu_asked ? 1 : 0) && o.oor == d.oor,
                  "no GPU, device %s (a placement on a GPU that cannot score counts a fallback, session.c): "
                  "unwritten %d, err %.3g, last %s, fallbacks %llu, oor %llu/%llu", devs[i],
                  o.unwritten, o.maxerr, o.last, (unsigned long long)o.fallbacks, (unsigned long long)o.oor,
                  (unsigned long long)d.oor);
        data_free(&d);
    }
    wisp_model_free(m);
    /* submit/wait on these placements without a GPU: test_gpu_stream.c */
}

/* ---- with a GPU ---------------------------------------------------------------------- */

/* several threads score on one model at once; their data are made beforehand (rnd() is not thread-safe) */
struct thread_arg { wisp_engine *eng; wisp_model *m; int vm; struct data d; double maxerr; int ok; };

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    const struct data *d = &a->d;
    wisp_batch *b = NULL;
    wisp_session *s = NULL;
    float *out = malloc(d->rows * sizeof *out);
    a->ok = wisp_batch_wrap(a->eng, d->rows, d->indptr, d->ids, a->vm == VM_MIXED ? d->val_ptr : NULL,
                            a->vm == VM_NONE ? NULL : d->vals, &b) == WISP_OK
            && wisp_session_new(a->eng, a->m, "gpu", &s) == WISP_OK;
    for (int rep = 0; a->ok && rep < 5; rep++) {
        for (size_t r = 0; r < d->rows; r++) out[r] = NAN;
        a->ok = wisp_session_score(s, b, out) == WISP_OK && !strncmp(wisp_session_last_device(s), "gpu", 3);
        for (size_t r = 0; r < d->rows; r++) {
            double e = isnan(out[r]) ? 1.0 : fabs(out[r] - d->ref[r]);
            if (e > a->maxerr) a->maxerr = e;
        }
    }
    free(out);
    wisp_session_free(s);
    wisp_batch_free(b);
    return NULL;
}

static void test_gpu(wisp_engine *eng, int quick)
{
    const int dtypes[] = { WISP_F32, WISP_F16, WISP_I8 };
    const size_t big = quick ? 20000 : 150000;
    /* 1. every dtype x value mode x id distribution, small tables (edges often hit) and a large one */
    for (int t = 0; t < 3; t++) {
        wisp_model *small = make_model(eng, 1000, dtypes[t], 0.3);
        wisp_model *large = make_model(eng, (uint64_t)1 << 22, dtypes[t], -0.7);
        for (int vm = 0; vm < 3; vm++)
            for (int dist = 0; dist < 2; dist++) {
                const size_t sizes[] = { 1, 2, 31, 33, 1000, 70001 };
                for (size_t k = 0; k < (quick ? 5u : sizeof sizes / sizeof sizes[0]); k++) {
                    struct spec sp = { sizes[k], vm, dist, 0, 400, 0.05, 0.02, 0.05 };
                    expect_gpu("small table", eng, small, &sp, (int)(k & 1), "gpu");
                    struct spec sq = { sizes[k], vm, dist, 10, 60, 0.02, 0.001, 0.01 };
                    expect_gpu("large table", eng, large, &sq, (int)((k + 1) & 1), k % 3 == 0 ? "gpus" : "gpu:0");
                }
            }
        wisp_model_free(small);
        wisp_model_free(large);
    }

    wisp_model *m = make_model(eng, (uint64_t)1 << 24, WISP_F32, 0.1);
    /* 2. row widths that pick every lane count, and each lane count forced */
    const unsigned widths[][2] = { { 1, 8 }, { 20, 40 }, { 60, 120 }, { 200, 400 }, { 0, 3 } };
    for (int i = 0; i < 5; i++) {
        struct spec sp = { 5000, VM_MIXED, ID_UNIFORM, widths[i][0], widths[i][1], 0.03, 0.01, 0.03 };
        expect_gpu("row widths", eng, m, &sp, i & 1, "gpu");
    }
    const char *lanes[] = { "4", "8", "16", "32" };
    for (int i = 0; i < 4; i++) {
        set_env("WISP_GPU_LANES", lanes[i]);
        struct spec sp = { 3000, i % 3, ID_ZIPF, 0, 150, 0.03, 0.01, 0.03 };
        expect_gpu("forced lanes", eng, m, &sp, 0, "gpu");
    }
    set_env("WISP_GPU_LANES", NULL);

    /* 3. big batches: chunked pipeline from pinned memory, staged from pageable memory, 1M rows */
    {
        struct spec sp = { quick ? 100000 : 1000000, VM_MIXED, ID_UNIFORM, 39, 39, 0.0, 0.0, 0.0 };
        /* 13 valued + 26 binary per row, the benchmark's shape */
        struct data d;
        gen(&d, &sp, m);
        for (size_t r = 0; r < d.rows; r++) d.val_ptr[r + 1] = d.val_ptr[r] + 13;
        /* regenerate the reference for 13 valued features a row */
        d.nvals = 0;
        for (size_t r = 0; r < d.rows; r++) {
            double z = wisp_model_bias(m);
            for (uint32_t k = d.indptr[r]; k < d.indptr[r + 1]; k++) {
                unsigned j = k - d.indptr[r];
                double v = 1.0;
                if (j < 13) { d.vals[d.nvals] = (float)(rnd01() * 2 - 1); v = d.vals[d.nvals++]; }
                if (d.ids64[k] < wisp_model_num_features(m)) z += (double)wisp_model_weight(m, d.ids64[k]) * v;
            }
            d.ref[r] = 1.0 / (1.0 + exp(-z));
        }
        for (int wrap = 0; wrap < 2; wrap++) {
            struct outcome o = run_case(eng, m, &d, VM_MIXED, wrap, "gpu");
            CHECK_MSG(o.unwritten == 0 && o.maxerr <= TOL && o.fallbacks == 0 && !strcmp(o.last, "gpu:0"),
                      "%zu rows x 39 (%s): unwritten %d, err %.3g, fallbacks %llu, last %s", d.rows,
                      wrap ? "pageable" : "pinned", o.unwritten, o.maxerr, (unsigned long long)o.fallbacks, o.last);
        }
        set_env("WISP_GPU_CHUNKS", "1");
        struct outcome o = run_case(eng, m, &d, VM_MIXED, 0, "gpu");
        CHECK_MSG(o.unwritten == 0 && o.maxerr <= TOL && o.fallbacks == 0, "one chunk: err %.3g", o.maxerr);
        set_env("WISP_GPU_CHUNKS", NULL);
        data_free(&d);
    }

    /* 4. the N-device paths on one GPU: rows split over 3 parts, the table in 2 and 3 logical shards */
    set_env("WISP_GPU_PARTS", "3");
    for (int vm = 0; vm < 3; vm++) {
        struct spec sp = { vm == 1 ? 2 : big, vm, ID_UNIFORM, 0, 80, 0.05, 0.01, 0.02 };
        expect_gpu("3 parts", eng, m, &sp, vm & 1, "gpus");
    }
    set_env("WISP_GPU_PARTS", NULL);
    const char *shards[] = { "2", "3" };
    for (int i = 0; i < 2; i++) {
        set_env("WISP_GPU_SHARDS", shards[i]);
        for (int vm = 0; vm < 3; vm++) {
            struct spec sp = { vm == 2 ? 1 : big, vm, vm ? ID_ZIPF : ID_UNIFORM, 0, 80, 0.05, 0.01, 0.02 };
            expect_gpu("logical shards", eng, m, &sp, vm & 1, "gpu");
        }
        wisp_model *sm = make_model(eng, 1001, WISP_I8, 0.0);   /* shard edges on a small table */
        struct spec sp = { 5000, VM_MIXED, ID_UNIFORM, 0, 50, 0.05, 0.1, 0.05 };
        expect_gpu("logical shards, small table", eng, sm, &sp, 0, "gpu");
        wisp_model_free(sm);
    }
    set_env("WISP_GPU_SHARDS", NULL);

    /* 4b. both ways to score a sharded table, checked through the units hook: peer (rows split,
     *     each kernel reads every shard where it lives; on one GPU every shard is local) and
     *     broadcast (every unit scores all rows against its shards, the host adds the partial
     *     sums); two units on one GPU, a shard each; the table over one device's share
     *     (WISP_GPU_TABLE_MB: m is 2^24 fp32 = 64 MB) sharded without WISP_GPU_SHARDS */
    const char *modes[] = { "peer", "broadcast" };
    for (int k = 0; k < 2; k++) {
        /* shard edges off powers of two; a fresh model per mode: shard copies stay on a device
         * for the model's life, at most 8 (peer's 2 + 4 and broadcast's 2 + 5 would be 13) */
        wisp_model *edge = make_model(eng, 1001, WISP_F16, -0.2);
        set_env("WISP_GPU_SHARDING", modes[k]);
        want_mode = k == 0 ? 2 : 1;
        set_env("WISP_GPU_PARTS", "2");
        set_env("WISP_GPU_SHARDS", "2");
        want_units = 2;
        want_shards = 2;
        for (int vm = 0; vm < 3; vm++) {
            struct spec sp = { vm == 1 ? 3 : big, vm, vm == 2 ? ID_ZIPF : ID_UNIFORM, 0, 80, 0.05, 0.01, 0.02 };
            expect_gpu("2 shards on 2 units", eng, m, &sp, vm & 1, "gpu");
        }
        struct spec se = { 4000, VM_MIXED, ID_UNIFORM, 0, 40, 0.05, 0.1, 0.05 };
        expect_gpu("2 shards on 2 units, small table", eng, edge, &se, 1, "gpu");
        set_env("WISP_GPU_SHARDS", NULL);
        set_env("WISP_GPU_TABLE_MB", "40");
        struct spec st = { big, VM_MIXED, ID_UNIFORM, 0, 60, 0.03, 0.01, 0.02 };
        expect_gpu("table over its share", eng, m, &st, 0, "gpu");
        set_env("WISP_GPU_TABLE_MB", "20");              /* 64 MB over 20 MB: 4 shards on the 2 units */
        want_shards = 4;
        expect_gpu("table over its share, 4 shards", eng, m, &st, 1, "gpu");
        set_env("WISP_GPU_TABLE_MB", NULL);
        set_env("WISP_GPU_PARTS", NULL);
        /* 5 shards on one unit: peer ranges are powers of two (1001 ids: 256 each, 4 shards) */
        set_env("WISP_GPU_SHARDS", "5");
        want_units = 1;
        want_shards = k == 0 ? 4 : 5;
        expect_gpu("5 shards asked, one unit", eng, edge, &se, 0, "gpu");
        set_env("WISP_GPU_SHARDS", NULL);
        wisp_model_free(edge);
    }
    want_mode = -1;
    set_env("WISP_GPU_SHARDING", NULL);

    /* 5. zero-copy: small batches (staged and straight from a pinned batch), then every batch */
    set_env("WISP_GPU_ZEROCOPY", "1");
    for (int vm = 0; vm < 3; vm++) {
        struct spec sp = { 10, vm, ID_UNIFORM, 0, 60, 0.1, 0.05, 0.05 };
        expect_gpu("zero-copy small", eng, m, &sp, 0, "gpu");
        expect_gpu("zero-copy small", eng, m, &sp, 1, "gpu");
    }
    set_env("WISP_GPU_ZEROCOPY", "all");
    {
        struct spec sp = { big, VM_MIXED, ID_ZIPF, 0, 80, 0.02, 0.01, 0.02 };
        expect_gpu("zero-copy all", eng, m, &sp, 0, "gpu");
        expect_gpu("zero-copy all", eng, m, &sp, 1, "gpu");
    }
    set_env("WISP_GPU_ZEROCOPY", NULL);

    /* 6. event timing forced on and off; graphs off; many batches of changing sizes in one session
     *    (graphs per size bucket are reused, evicted, and dropped when buffers grow) */
    const char *timing[] = { "1", "0" };
    for (int i = 0; i < 2; i++) {
        set_env("WISP_GPU_TIMING", timing[i]);
        struct spec sp = { 5000, VM_ALL, ID_UNIFORM, 0, 60, 0.02, 0.01, 0.02 };
        expect_gpu("timing forced", eng, m, &sp, 0, "gpu");
        struct spec sq = { big, VM_MIXED, ID_UNIFORM, 0, 60, 0.02, 0.01, 0.02 };
        expect_gpu("timing forced", eng, m, &sq, 1, "gpu");
    }
    set_env("WISP_GPU_TIMING", NULL);
    set_env("WISP_GPU_GRAPHS", "0");
    for (int vm = 0; vm < 3; vm++) {
        struct spec sp = { 700, vm, ID_ZIPF, 0, 60, 0.05, 0.02, 0.02 };
        expect_gpu("graphs off", eng, m, &sp, vm & 1, "gpu");
    }
    set_env("WISP_GPU_GRAPHS", NULL);
    /* tiny batches: inside the launch (default), and through graphs with that off */
    for (int inl = 1; inl >= 0; inl--) {
        set_env("WISP_GPU_INLINE", inl ? NULL : "0");
        for (int vm = 0; vm < 3; vm++)
            for (int rows = 1; rows <= 20; rows += 9) {
                struct spec sp = { (size_t)rows, vm, (int)rnd_below(2), 0, 39, 0.1, 0.2, 0.1 };
                expect_gpu(inl ? "tiny, inline" : "tiny, graph", eng, m, &sp, rows & 1, "gpu");
            }
    }
    set_env("WISP_GPU_INLINE", NULL);
    {
        wisp_session *s = NULL;
        CHECK_OK(wisp_session_new(eng, m, "gpu", &s));
        double err = 0;
        uint64_t want_oor = 0;
        int n = quick ? 12 : 60;
        for (int i = 0; i < n; i++) {
            struct spec sp = { 1 + rnd_below(i % 5 == 4 ? 40000 : 3000), (int)rnd_below(3), (int)rnd_below(2),
                               0, 1 + (unsigned)rnd_below(100), 0.05, 0.02, 0.02 };
            struct data d;
            gen(&d, &sp, m);
            wisp_batch *b = make_batch(eng, &d, sp.vm, i & 1);
            float *out = malloc(d.rows * sizeof *out);
            for (size_t r = 0; r < d.rows; r++) out[r] = NAN;
            CHECK_OK(wisp_session_score(s, b, out));
            for (size_t r = 0; r < d.rows; r++) err = fmax(err, isnan(out[r]) ? 1 : fabs(out[r] - d.ref[r]));
            want_oor += d.oor;
            free(out);
            wisp_batch_free(b);
            data_free(&d);
        }
        CHECK_MSG(err <= TOL, "changing sizes in one session: max err %.3g", err);
        CHECK(wisp_session_stat(s, WISP_STAT_FALLBACKS) == 0);
        CHECK(wisp_session_stat(s, WISP_STAT_OUT_OF_RANGE) == want_oor);
        CHECK(!strcmp(wisp_session_last_device(s), "gpu:0"));
        wisp_session_free(s);
    }

    /* 7. stats: stages and bytes are counted; a session keeps working over many batches */
    {
        struct spec sp = { 50000, VM_MIXED, ID_UNIFORM, 20, 60, 0.0, 0.0, 0.0 };
        struct gcase c;
        gcase_open(&c, eng, m, &sp, "gpu");
        struct data d = c.d;
        wisp_batch *b = c.b;
        wisp_session *s = c.s;
        float *out = c.out;
        double err = 0;
        for (int rep = 0; rep < 20; rep++) {
            CHECK_OK(wisp_session_score(s, b, out));
            err = fmax(err, max_err(out, &d));
        }
        CHECK_NEAR(err, 0, TOL);
        CHECK(wisp_session_stat(s, WISP_STAT_BATCHES) == 20);
        CHECK(wisp_session_stat(s, WISP_STAT_FALLBACKS) == 0);
        CHECK(wisp_session_stat(s, WISP_STAT_NS_KERNEL) > 0);
        CHECK(wisp_session_stat(s, WISP_STAT_NS_H2D) > 0);
        CHECK(wisp_session_stat(s, WISP_STAT_NS_D2H) > 0);
        CHECK(wisp_session_stat(s, WISP_STAT_BYTES_H2D) >= 20 * (uint64_t)d.nnz * 4);
        CHECK(wisp_session_stat(s, WISP_STAT_BYTES_D2H) >= 20 * (uint64_t)d.rows * 4);
        /* the resident-kernel hook agrees too */
        {
            float ms[3];
            for (size_t r = 0; r < d.rows; r++) out[r] = NAN;
            CHECK_OK(wisp_cuda_time_resident(s, b, 0, 0, 3, ms, out));
            CHECK_NEAR(max_err(out, &d), 0, TOL);
            CHECK(ms[2] > 0);
            CHECK_OK(wisp_cuda_time_resident(s, b, 1, 0, 2, ms, NULL));
            CHECK(ms[1] > 0);
        }
        gcase_close(&c);
    }

    /* 8. several threads share one model (uploaded once, lazily, under its lock) */
    {
        wisp_model *tm = make_model(eng, (uint64_t)1 << 20, WISP_F16, 0.5);
        pthread_t th[4];
        struct thread_arg ta[4];
        for (int i = 0; i < 4; i++) {
            memset(&ta[i], 0, sizeof ta[i]);
            ta[i].eng = eng;
            ta[i].m = tm;
            ta[i].vm = i % 3;
            struct spec sp = { 20000, i % 3, ID_UNIFORM, 1, 80, 0.02, 0.01, 0.02 };
            gen(&ta[i].d, &sp, tm);
        }
        for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, thread_main, &ta[i]) == 0);
        for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < 4; i++) {
            CHECK_MSG(ta[i].ok && ta[i].maxerr <= TOL, "thread %d: ok %d, err %.3g", i, ta[i].ok, ta[i].maxerr);
            data_free(&ta[i].d);
        }
        wisp_model_free(tm);
    }

    /* 9. device out of memory: the batch moves to the CPU, the device stays usable */
    set_env("WISP_FAULT_GPU", "oom");
    {
        struct spec sp = { 4000, VM_MIXED, ID_UNIFORM, 0, 60, 0.05, 0.02, 0.02 };
        expect_fallback("injected oom", eng, m, &sp, "gpu");
        CHECK(wisp_engine_gpu_usable(eng, 0) == 1);
        char log[512];
        CHECK(wisp_engine_last_log(eng, log, sizeof log) > 0 && strstr(log, "out of device memory"));
    }
    set_env("WISP_FAULT_GPU", "oom1");
    {
        struct spec sp = { 4000, VM_ALL, ID_UNIFORM, 0, 60, 0.05, 0.02, 0.02 };
        struct gcase c;
        gcase_open(&c, eng, m, &sp, "gpu");
        for (int rep = 0; rep < 3; rep++) {
            for (size_t r = 0; r < c.d.rows; r++) c.out[r] = NAN;
            CHECK_OK(wisp_session_score(c.s, c.b, c.out));
            CHECK_NEAR(max_err(c.out, &c.d), 0, TOL);
            CHECK(!strcmp(wisp_session_last_device(c.s), rep == 0 ? "cpu" : "gpu:0"));
        }
        CHECK(wisp_session_stat(c.s, WISP_STAT_FALLBACKS) == 1);
        gcase_close(&c);
    }
    set_env("WISP_FAULT_GPU", NULL);
    wisp_model_free(m);
}

/* ---- tiny batches: the answer slots, and values of exactly 1.0 sent as binary entries --------
 * A tiny batch's answers come back as one 8-byte {probability, seq | out-of-range ids} store a
 * row (kernels/score.cuh, wisp_ktiny.slots); a batch of value mode ALL goes in the launch as MIXED
 * when the values each row ends with that are exactly 1.0f make it shorter (cuda_launch.c,
 * tiny_trim_ones). Rows of 0 to 60 features, values drawn from 1.0f, its neighbours
 * (0.99999994f, 1.0000001f), -0.0f, 0 and random ones, whole rows of 1.0f, ids past the table;
 * against the float64 reference and the CPU, the out-of-range count, and bit for bit against
 * the same batch through the ordinary kernel (WISP_GPU_INLINE=0: the same lanes, the same
 * products and order, the values as given). Then many batches in a row through one session
 * (the slot tag changes every batch; 1..4 blocks). */
static void test_tiny_slots(wisp_engine *eng, int quick)
{
    const uint64_t nf = 5000;
    wisp_model *m = make_model(eng, nf, WISP_F32, 0.15);
    wisp_session *inl = NULL, *plain = NULL, *cpu = NULL;
    CHECK_OK(wisp_session_new(eng, m, "gpu", &inl));
    set_env("WISP_GPU_INLINE", "0");
    CHECK_OK(wisp_session_new(eng, m, "gpu", &plain));
    set_env("WISP_GPU_INLINE", NULL);
    CHECK_OK(wisp_session_new(eng, m, "cpu", &cpu));
    const float picks[] = { 1.0f, 0.99999994f, 1.0000001f, -0.0f, 0.0f, 2.5f, -1.0f };
    size_t bad_ref = 0, bad_cpu = 0, bad_bits = 0, bad_oor = 0, trimmed_batches = 0;
    double maxerr = 0;
    const int n = quick ? 150 : 800;
    for (int it = 0; it < n && inl && plain && cpu; it++) {
        const size_t rows = 1 + rnd_below(it % 5 == 0 ? 24 : 10);
        const unsigned wmax = it % 3 == 0 ? 60 : 39;
        uint32_t rp[25], ids[25 * 60];
        float vals[25 * 60], out_i[25], out_p[25], out_c[25];
        double ref[25];
        uint64_t oor = 0;
        size_t nnz = 0, ones_at_end = 0;
        rp[0] = 0;
        for (size_t r = 0; r < rows; r++) {
            const unsigned w = (unsigned)rnd_below(wmax + 1);
            const int style = (int)rnd_below(4);    /* 0 random, 1 all 1.0, 2 valued then 1.0s, 3 1.0s then one other */
            double z = 0.15;
            for (unsigned k = 0; k < w; k++) {
                const uint32_t id = rnd_below(20) == 0 ? (uint32_t)(nf + rnd_below(100)) : (uint32_t)rnd_below(nf);
                float v;
                if (style == 1 || (style == 2 && k >= w / 3) || (style == 3 && k + 1 < w)) v = 1.0f;
                else v = rnd_below(2) ? picks[rnd_below(sizeof picks / sizeof picks[0])] : (float)(rnd01() * 4 - 2);
                ids[nnz] = id;
                vals[nnz] = v;
                nnz++;
                if (id < nf) z += (double)wisp_model_weight(m, id) * (double)v;
                else oor++;
            }
            if (w && vals[nnz - 1] == 1.0f && !signbit(vals[nnz - 1])) ones_at_end++;
            rp[r + 1] = (uint32_t)nnz;
            ref[r] = z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
        }
        if (ones_at_end) trimmed_batches++;
        wisp_batch *b = NULL;
        CHECK_OK(wisp_batch_wrap(eng, rows, rp, ids, NULL, vals, &b));
        if (!b) break;
        const uint64_t o0 = wisp_session_stat(inl, WISP_STAT_OUT_OF_RANGE);
        for (size_t r = 0; r < rows; r++) out_i[r] = out_p[r] = out_c[r] = NAN;
        CHECK_OK(wisp_session_score(inl, b, out_i));
        CHECK_OK(wisp_session_score(plain, b, out_p));
        CHECK_OK(wisp_session_score(cpu, b, out_c));
        if (wisp_session_stat(inl, WISP_STAT_OUT_OF_RANGE) - o0 != oor) bad_oor++;
        for (size_t r = 0; r < rows; r++) {
            const double e = isnan(out_i[r]) ? 1 : fabs(out_i[r] - ref[r]);
            maxerr = fmax(maxerr, e);
            bad_ref += !(e <= TOL);
            bad_cpu += !(fabs(out_i[r] - out_c[r]) <= TOL);
            bad_bits += memcmp(&out_i[r], &out_p[r], 4) != 0;
        }
        wisp_batch_free(b);
    }
    CHECK_MSG(bad_ref == 0 && bad_cpu == 0 && bad_bits == 0 && bad_oor == 0,
              "tiny batches through the answer slots: %zu rows off the float64 reference (max %.3g), %zu off the CPU, "
              "%zu not bit-identical to the ordinary kernel's, %zu batches with a wrong out-of-range count",
              bad_ref, maxerr, bad_cpu, bad_bits, bad_oor);
    CHECK_MSG(trimmed_batches > (size_t)n / 4, "the case mix sent %zu of %d batches with rows ending in 1.0",
              trimmed_batches, n);
    CHECK_MSG(inl && wisp_session_stat(inl, WISP_STAT_FALLBACKS) == 0
              && !strcmp(wisp_session_last_device(inl), "gpu:0"),
              "the inline session fell back (%llu) or ran on %s",
              inl ? (unsigned long long)wisp_session_stat(inl, WISP_STAT_FALLBACKS) : 0ull,
              inl ? wisp_session_last_device(inl) : "?");
    wisp_session_free(inl);
    wisp_session_free(plain);
    wisp_session_free(cpu);
    wisp_model_free(m);
}

int main(void)
{
    testrand_seed("test_gpu");
    const char *tg = getenv("WISP_TEST_GPU");
    const int want_gpu = tg && *tg && strcmp(tg, "0") != 0;
    const int quick = getenv("WISP_TEST_GPU_QUICK") != NULL;

    wisp_engine *eng = NULL;
    CHECK_OK(wisp_engine_new(2, &eng));
    if (!eng) return CHECK_DONE("test_gpu");
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    const int n = wisp_engine_gpu_count(eng);
    const char *status = wisp_engine_gpu_status(eng);
    printf("test_gpu: %d GPU(s): %s\n", n, status);
    CHECK(status && *status);
    CHECK(wisp_engine_gpu_name(eng, n) == NULL && wisp_engine_gpu_memory(eng, -1) == 0);

    if (n == 0) {
        /* no usable GPU: the status explains why, and every GPU placement answers on the CPU */
        CHECK_MSG(strstr(status, "no CUDA device") || strstr(status, "WISP_NO_GPU")
                  || strstr(status, "no CUDA backend"),
                  "status: %s", status);
        CHECK_MSG(!want_gpu, "WISP_TEST_GPU is set but no GPU is usable: %s", status);
        test_no_gpu(eng);
        /* a batch in device memory is refused without a GPU: test_gpu_stream.c */
    } else {
        for (int i = 0; i < n; i++) {
            printf("test_gpu: gpu:%d %s, %.1f GiB, sm_%d\n", i, wisp_engine_gpu_name(eng, i),
                   wisp_engine_gpu_memory(eng, i) / 1073741824.0, wisp_engine_gpu_capability(eng, i));
            CHECK(wisp_engine_gpu_name(eng, i) && wisp_engine_gpu_memory(eng, i) > 0);
            CHECK(wisp_engine_gpu_capability(eng, i) >= 80 && wisp_engine_gpu_usable(eng, i) == 1);
        }
        /* the fallback path, with the GPU switched off for a second engine */
        setenv("WISP_NO_GPU", "1", 1);
        wisp_engine *off = NULL;
        CHECK_OK(wisp_engine_new(2, &off));
        wisp_engine_set_log_level(off, WISP_LOG_OFF);
        CHECK(wisp_engine_gpu_count(off) == 0 && strstr(wisp_engine_gpu_status(off), "WISP_NO_GPU"));
        test_no_gpu(off);
        wisp_engine_free(off);
        unsetenv("WISP_NO_GPU");
        if (want_gpu) {
            test_gpu(eng, quick);
            test_wide_sums(eng, quick);
            test_packed(eng, quick);
            test_tiny_slots(eng, quick);
            /* then submit/wait, device out of memory, batches in device memory, the sticky error: test_gpu_stream.c */
        }
    }
    wisp_engine_free(eng);
    return CHECK_DONE("test_gpu");
}
