/* fuzz_common.h — shared helpers of the libFuzzer targets: one engine, a scratch directory, a checked abort. */
#ifndef WISP_FUZZ_COMMON_H
#define WISP_FUZZ_COMMON_H

#include "score/score.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A broken property of the library: print it and trap, so libFuzzer keeps the input. */
#define FUZZ_REQUIRE(cond, ...) do { \
    if (!(cond)) { \
        fprintf(stderr, "%s:%d: fuzz property failed: %s: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); \
        fprintf(stderr, " [wisp_errmsg: %s]\n", wisp_errmsg()); \
        __builtin_trap(); \
    } \
} while (0)

static wisp_engine *fuzz_eng;
static char fuzz_dir[256];

/* A scratch directory on tmpfs when there is one (the model writer fsyncs). */
static inline void fuzz_setup_dir(void)
{
    const char *bases[] = { getenv("WISP_FUZZ_TMP"), "/dev/shm", getenv("TMPDIR"), "/tmp" };
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        if (!bases[i] || access(bases[i], W_OK) != 0) continue;
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/wisp-fuzz-XXXXXX", bases[i]);
        if (mkdtemp(fuzz_dir)) return;
    }
    fprintf(stderr, "fuzz: cannot create a scratch directory\n");
    abort();
}

static inline void fuzz_cleanup(void)
{
    if (!fuzz_dir[0]) return;
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: cannot remove %s\n", fuzz_dir);
}

static inline const char *fuzz_path(const char *name)
{
    static char bufs[4][320];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 320, "%s/%s", fuzz_dir, name);
    return b;
}

static inline void fuzz_init_common(void)
{
    if (fuzz_eng) return;
    if (wisp_engine_new(1, &fuzz_eng) != WISP_OK) {
        fprintf(stderr, "fuzz: wisp_engine_new: %s\n", wisp_errmsg());
        abort();
    }
    wisp_engine_set_log_level(fuzz_eng, WISP_LOG_OFF);
    fuzz_setup_dir();
    atexit(fuzz_cleanup);
}

static inline int fuzz_write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) { close(fd); return -1; }
        p += w;
        n -= (size_t)w;
    }
    return close(fd);
}

static inline double fuzz_sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* Score b with m on a CPU session and compare with a float64 reference taken
 * from the batch's own arrays and wisp_model_weight. */
static inline void fuzz_check_scores(wisp_model *m, const wisp_batch *b)
{
    size_t rows = wisp_batch_rows(b);
    wisp_session *s = NULL;
    int st = wisp_session_new(fuzz_eng, m, "cpu", &s);
    FUZZ_REQUIRE(st == WISP_OK, "session_new -> %d", st);
    float *out = malloc((rows ? rows : 1) * sizeof *out);
    st = wisp_session_score(s, b, out);
    FUZZ_REQUIRE(st == WISP_OK, "score -> %d", st);
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    uint64_t nf = wisp_model_num_features(m);
    size_t nbad = wisp_batch_bad_count(b), bi = 0;
    for (size_t r = 0; r < rows; r++) {
        size_t brow = SIZE_MAX;
        if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, NULL, NULL);
        if (brow == r) {
            bi++;
            FUZZ_REQUIRE(isnan(out[r]), "bad row %zu scored %g, not NaN", r, (double)out[r]);
            continue;
        }
        size_t a = rp[r], z = rp[r + 1];
        size_t nv = vp ? vp[r + 1] - vp[r] : vals ? z - a : 0, v0 = vp ? vp[r] : a;
        double acc = wisp_model_bias(m), mag = fabs(acc);
        for (size_t k = a; k < z; k++) {
            if (ids[k] >= nf) continue;
            double w = wisp_model_weight(m, ids[k]);
            double t = k - a < nv ? w * (double)vals[v0 + (k - a)] : w;
            acc += t;
            mag += fabs(t);
        }
        double want = fuzz_sigmoid(acc);
        /* float weights summed in double; int8 tables apply their scale once per
         * row while wisp_model_weight rounds scale*q to float per weight, so the
         * terms may differ by a float rounding each: a relative 2^-23 of the
         * magnitude (times sigmoid' <= 1/4), plus the final rounding */
        double tol = 1e-6 + 0.25 * mag * 0x1p-23;
        FUZZ_REQUIRE(fabs((double)out[r] - want) <= tol || (isnan(want) && isnan(out[r])),
                     "row %zu: score %.9g, reference %.9g", r, (double)out[r], want);
    }
    free(out);
    wisp_session_free(s);
}

#endif
