/* testgpu.h — what test_gpu.c and test_gpu_stream.c share: models of random weights, random CSR data with
 * their float64 reference (uniform or Zipf ids, edge ids, duplicates, empty rows), the batch of those data
 * (built row by row or wrapped), one case scored on a device and on the CPU (run_case), a case that must fall
 * back to the CPU, a case set up to score (gcase) and its distance from the reference (max_err), and setting
 * or clearing an environment variable. */
#ifndef WISP_TESTGPU_H
#define WISP_TESTGPU_H

#include "score/score.h"
#include "core/wisp_test.h"   /* wisp_cuda_units_read */
#include "check.h"
#include "testrand.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- random numbers (spec/c/testrand.h) -------------------------------------- */

static inline uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- models -------------------------------------------------------------------------- */

static int model_seq;

static inline wisp_model *make_model(wisp_engine *eng, uint64_t nf, int dtype, double bias)
{
    float *w = malloc((nf ? nf : 1) * sizeof *w);
    for (uint64_t i = 0; i < nf; i++) w[i] = (float)((rnd01() - 0.5) * 0.8);
    char path[256];
    snprintf(path, sizeof path, "/tmp/wisp_test_gpu_%d_%d.wisp", (int)getpid(), model_seq++);
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_write(path, w, nf, bias, dtype, "source=test_gpu\n", NULL));
    CHECK_OK(wisp_model_load(eng, path, &m));
    unlink(path);
    free(w);
    return m;
}

/* ---- batches: generated flat, then built (pinned builders) or wrapped (caller memory) ---- */

enum { VM_NONE = 0, VM_ALL = 1, VM_MIXED = 2 };
enum { ID_UNIFORM = 0, ID_ZIPF = 1 };

struct spec {
    size_t rows;
    int vm, dist;
    unsigned wmin, wmax;         /* row width range */
    double p_empty, p_edge, p_dup;
};

struct data {
    size_t rows, nnz, nvals;
    uint32_t *indptr, *val_ptr, *ids;
    uint64_t *ids64;             /* as given to the builders (ids >= 2^32 stay large) */
    float *vals;
    double *ref;                 /* float64 probabilities */
    uint64_t oor;
};

static inline void data_free(struct data *d)
{
    free(d->indptr); free(d->val_ptr); free(d->ids); free(d->ids64); free(d->vals); free(d->ref);
    memset(d, 0, sizeof *d);
}

static inline uint64_t edge_id(uint64_t nf)
{
    switch (rnd_below(6)) {
    case 0: return 0;
    case 1: return nf ? nf - 1 : 0;
    case 2: return nf;                               /* just out of range */
    case 3: return nf + 1 + rnd_below(1000);
    case 4: return 0xFFFFFFFFull;                    /* stored as WISP_ID_NONE */
    default: return (1ull << 32) + rnd_below(1000);  /* >= 2^32 */
    }
}

static inline void gen(struct data *d, const struct spec *sp, const wisp_model *m)
{
    const uint64_t nf = wisp_model_num_features(m);
    struct zipf z = zipf_new((double)(nf ? nf : 1), 1.1);
    memset(d, 0, sizeof *d);
    d->rows = sp->rows;
    size_t cap = sp->rows * (size_t)(sp->wmax + 1) + 1;
    d->indptr = malloc((sp->rows + 1) * sizeof *d->indptr);
    d->val_ptr = malloc((sp->rows + 1) * sizeof *d->val_ptr);
    d->ids = malloc(cap * sizeof *d->ids);
    d->ids64 = malloc(cap * sizeof *d->ids64);
    d->vals = malloc(cap * sizeof *d->vals);
    d->ref = malloc(sp->rows * sizeof *d->ref);
    d->indptr[0] = d->val_ptr[0] = 0;
    const double bias = wisp_model_bias(m);
    for (size_t r = 0; r < sp->rows; r++) {
        unsigned n = sp->wmin + (unsigned)rnd_below(sp->wmax - sp->wmin + 1);
        if (rnd01() < sp->p_empty) n = 0;
        unsigned nv = sp->vm == VM_NONE ? 0 : sp->vm == VM_ALL ? n : (unsigned)rnd_below(n + 1);
        double zsum = bias;
        for (unsigned k = 0; k < n; k++) {
            uint64_t id;
            if (k > 0 && rnd01() < sp->p_dup) id = d->ids64[d->nnz - 1 - rnd_below(k)];
            else if (rnd01() < sp->p_edge) id = edge_id(nf);
            else if (sp->dist == ID_ZIPF) id = ((zipf_rank(&z) - 1) * 2654435761ull) % (nf ? nf : 1);
            else id = rnd_below(nf);
            d->ids64[d->nnz] = id;
            d->ids[d->nnz] = id >= (1ull << 32) ? WISP_ID_NONE : (uint32_t)id;
            double v = 1.0;
            if (k < nv) {
                float fv = (float)(rnd01() * 4.0 - 1.0);
                d->vals[d->nvals++] = fv;
                v = fv;
            }
            if (id < nf) zsum += (double)wisp_model_weight(m, id) * v;
            else d->oor++;
            d->nnz++;
        }
        d->indptr[r + 1] = (uint32_t)d->nnz;
        d->val_ptr[r + 1] = (uint32_t)d->nvals;
        d->ref[r] = 1.0 / (1.0 + exp(-zsum));
    }
}

/* append d's rows to b as value mode vm (VM_MIXED: valued then binary features of each row) */
static inline void append_rows(wisp_batch *b, const struct data *d, int vm)
{
    int st = WISP_OK;
    for (size_t r = 0; r < d->rows && st == WISP_OK; r++) {
        const uint64_t *ids = d->ids64 + d->indptr[r];
        size_t n = d->indptr[r + 1] - d->indptr[r], nv = d->val_ptr[r + 1] - d->val_ptr[r];
        const float *v = d->vals + d->val_ptr[r];
        if (vm == VM_NONE) st = wisp_batch_add_row(b, ids, NULL, n);
        else if (vm == VM_ALL) st = wisp_batch_add_row(b, ids, v, n);
        else st = wisp_batch_add_row_mixed(b, ids, v, nv, ids + nv, n - nv);
    }
    CHECK_OK(st);
}

/* the batch of d: appended row by row to a builder (pinned when a GPU is live) or wrapped */
static inline wisp_batch *make_batch(wisp_engine *eng, const struct data *d, int vm, int wrap)
{
    wisp_batch *b = NULL;
    if (wrap) {
        CHECK_OK(wisp_batch_wrap(eng, d->rows, d->indptr, d->ids, vm == VM_MIXED ? d->val_ptr : NULL,
                                 vm == VM_NONE ? NULL : d->vals, &b));
        return b;
    }
    CHECK_OK(wisp_batch_new(eng, &b));
    if (!b) return NULL;
    append_rows(b, d, vm);
    return b;
}

/* ---- one conformance case -------------------------------------------------------------- */

struct outcome {
    double maxerr; double maxerr_cpu; uint64_t fallbacks, oor; int unwritten; char last[32]; int units, mode, shards;
};

static inline struct outcome run_case(wisp_engine *eng, wisp_model *m, const struct data *d, int vm, int wrap,
                               const char *device)
{
    struct outcome o = { 0, 0, 0, 0, 0, "", 0, -1, 0 };
    wisp_batch *b = make_batch(eng, d, vm, wrap);
    wisp_session *s = NULL, *cpu = NULL;
    CHECK_OK(wisp_session_new(eng, m, device, &s));
    CHECK_OK(wisp_session_new(eng, m, "cpu", &cpu));
    float *out = malloc((d->rows ? d->rows : 1) * sizeof *out), *outc = malloc((d->rows ? d->rows : 1) * sizeof *out);
    for (size_t r = 0; r < d->rows; r++) out[r] = outc[r] = NAN;       /* poison: every row must be written */
    if (b && s && cpu) {
        CHECK_OK(wisp_session_score(s, b, out));
        CHECK_OK(wisp_session_score(cpu, b, outc));
        for (size_t r = 0; r < d->rows; r++) {
            if (isnan(out[r])) { o.unwritten++; continue; }
            double e = fabs(out[r] - d->ref[r]), ec = fabs((double)out[r] - outc[r]);
            if (e > o.maxerr) o.maxerr = e;
            if (ec > o.maxerr_cpu) o.maxerr_cpu = ec;
        }
        o.fallbacks = wisp_session_stat(s, WISP_STAT_FALLBACKS);
        o.oor = wisp_session_stat(s, WISP_STAT_OUT_OF_RANGE);
        snprintf(o.last, sizeof o.last, "%s", wisp_session_last_device(s));
        double us[16][12];
        int n = !strncmp(o.last, "gpu", 3) ? wisp_cuda_units_read(s, &us[0][0], 16) : 0;
        for (int k = 0; k < n && k < 16; k++) {
            o.units++;
            o.mode = (int)us[k][4];
            o.shards += (int)us[k][3];
        }
    }
    free(out); free(outc);
    wisp_session_free(s); wisp_session_free(cpu); wisp_batch_free(b);
    return o;
}

#define TOL 1e-5

/* The largest distance of out's answers for d from d's float64 reference (a NaN answer counts as 1). */
static inline double max_err(const float *out, const struct data *d)
{
    double err = 0;
    for (size_t r = 0; r < d->rows; r++) err = fmax(err, isnan(out[r]) ? 1 : fabs(out[r] - d->ref[r]));
    return err;
}

/* A case ready to score on a device: data generated from sp, their batch built row by row as value
 * mode sp->vm, a session on device, room for the answers. */
struct gcase { struct data d; wisp_batch *b; wisp_session *s; float *out; };

static inline void gcase_open(struct gcase *c, wisp_engine *eng, wisp_model *m, const struct spec *sp,
                              const char *device)
{
    gen(&c->d, sp, m);
    c->b = make_batch(eng, &c->d, sp->vm, 0);
    c->s = NULL;
    CHECK_OK(wisp_session_new(eng, m, device, &c->s));
    c->out = malloc(c->d.rows * sizeof *c->out);
}

static inline void gcase_close(struct gcase *c)
{
    free(c->out);
    wisp_session_free(c->s);
    wisp_batch_free(c->b);
    data_free(&c->d);
}

/* a case that must fall back to the CPU and still be right */
static inline void expect_fallback(const char *what, wisp_engine *eng, wisp_model *m, const struct spec *sp,
                                   const char *device)
{
    struct data d;
    gen(&d, sp, m);
    struct outcome o = run_case(eng, m, &d, sp->vm, 0, device);
    CHECK_MSG(o.unwritten == 0 && o.maxerr <= 1e-6 && o.fallbacks == 1 && o.oor == d.oor && !strcmp(o.last, "cpu"),
              "%s [%s, rows %zu]: unwritten %d, max err %.3g, fallbacks %llu, oor %llu/%llu, last device %s",
              what, device, sp->rows, o.unwritten, o.maxerr, (unsigned long long)o.fallbacks,
              (unsigned long long)o.oor, (unsigned long long)d.oor, o.last);
    data_free(&d);
}

static inline void set_env(const char *k, const char *v)
{
    if (v) setenv(k, v, 1);
    else unsetenv(k);
}

#endif
