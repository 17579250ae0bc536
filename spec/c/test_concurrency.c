/* test_concurrency.c — many threads on one engine and one model: identical results to single-threaded scoring, model
 * replacement and reload while scoring, thread-local errors; run under TSan too. */
/*
 * 1. 8 threads, each with its own session and batch on one shared engine
 *    and model, score the same rows again and again: every result is
 *    bit-identical to a single-threaded engine's (engines of 1 and 2 pool
 *    threads: a pool serialises its callers, a 1-thread engine scores on
 *    the callers' threads, truly at the same time).
 * 2. A writer thread replaces the model file (wisp_model_write: temporary
 *    file + rename) with version after version and reloads it, publishing
 *    each new model; scorer threads take the current model, keep sessions
 *    on old versions across replacements, and load the path themselves
 *    while it is being replaced. Every score matches the reference of the
 *    version the model says it is (meta "version"), bit for bit.
 * 3. Errors are per thread: threads failing on different paths at the same
 *    time each read their own message. GPU discovery, logging and freeing
 *    the engine first, from many threads at once.
 * WISP_TEST_QUICK=1 (valgrind) shortens the loops.
 */
#include "check.h"
#include "testrand.h"
#include "score/score.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define NTHREADS 8
#define NF 50000u
#define NROWS 1500
#define NVERSIONS 5

static int quick;
static char tmpdir[256];
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;

/* CHECK from many threads: the harness counters are plain ints */
#define TCHECK(cond, ...) do { \
    pthread_mutex_lock(&check_lock); CHECK_MSG(cond, __VA_ARGS__); pthread_mutex_unlock(&check_lock); \
} while (0)

static const char *P(char *buf, const char *name)
{
    snprintf(buf, 512, "%s/%s", tmpdir, name);
    return buf;
}

/* ---- data: one libsvm text every thread parses, references per model version ---- */

static char *text;
static size_t text_len;
static float *weights[NVERSIONS + 1];        /* [0]: the base model; [1..]: versions of the replaced file */
static double biases[NVERSIONS + 1];
static float *ref[NVERSIONS + 1];            /* single-threaded scores of the text's rows */

static void gen_text(void)
{
    size_t cap = 1 << 20, n = 0;
    text = malloc(cap);
    for (int r = 0; r < NROWS; r++) {
        if (cap - n < 4096) text = realloc(text, cap *= 2);
        n += (size_t)sprintf(text + n, "%d", r & 1);
        int k = (int)(rnd() % 40);
        for (int i = 0; i < k; i++) {
            /* zipf-like ids: mostly small, a long tail past the table */
            uint64_t id = (uint64_t)(exp((double)(rnd() % 10000) / 10000.0 * log(NF * 1.05)));
            if (rnd() % 3)
                n += (size_t)sprintf(text + n, " %" PRIu64 ":%.4f", id, (double)(rnd() % 2000) / 500.0 - 2.0);
            else n += (size_t)sprintf(text + n, " %" PRIu64, id);
        }
        if (r % 97 == 13) n += (size_t)sprintf(text + n, " 5:nan");   /* a bad row, NaN */
        text[n++] = '\n';
    }
    text_len = n;
}

static wisp_batch *parse_text(wisp_engine *eng)
{
    wisp_batch *b = NULL;
    int st = wisp_batch_new(eng, &b);
    if (st == WISP_OK) st = wisp_batch_parse_libsvm(b, text, text_len, 1, 0, NULL, NULL);
    TCHECK(st == WISP_OK && b && wisp_batch_rows(b) == NROWS, "parse -> %d (%s)", st, wisp_errmsg());
    return b;
}

static int same_scores(const float *a, const float *b)
{
    return memcmp(a, b, NROWS * sizeof *a) == 0;     /* NaN rows compare by bits too */
}

static int write_version(const char *path, int v)
{
    char meta[64];
    snprintf(meta, sizeof meta, "version=%d\nsource=test_concurrency", v);
    return wisp_model_write(path, weights[v], NF, biases[v], v % 2 ? WISP_F16 : WISP_F32, meta, NULL);
}

/* rows of b scored in float64 from the batch's arrays; returns the number of rows off by > 1e-6 */
static int check_f64(const wisp_model *m, const wisp_batch *b, const float *got)
{
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    size_t nbad = wisp_batch_bad_count(b), bi = 0;
    int bad = 0;
    for (size_t r = 0; r < wisp_batch_rows(b); r++) {
        size_t brow = SIZE_MAX;
        if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, NULL, NULL);
        if (brow == r) { bi++; bad += !isnan(got[r]); continue; }
        size_t a = rp[r], z = rp[r + 1], nv = vp ? vp[r + 1] - vp[r] : vals ? z - a : 0, v0 = vp ? vp[r] : a;
        double acc = wisp_model_bias(m);
        for (size_t k = a; k < z; k++) {
            double w = wisp_model_weight(m, ids[k]);
            acc += k - a < nv ? w * vals[v0 + k - a] : w;
        }
        bad += fabs(got[r] - 1.0 / (1.0 + exp(-acc))) > 1e-6;
    }
    return bad;
}

/* ---- 1. one model, many sessions ------------------------------------------------------ */

struct score_arg {
    wisp_engine *eng;
    wisp_model *model;
    int iters;
    int mismatches;
};

static void *score_thread(void *p)
{
    struct score_arg *a = p;
    wisp_batch *b = parse_text(a->eng);
    wisp_session *s = NULL;
    int st = wisp_session_new(a->eng, a->model, "cpu", &s);
    TCHECK(st == WISP_OK, "session_new -> %d", st);
    float *out = malloc(NROWS * sizeof *out);
    for (int i = 0; i < a->iters && st == WISP_OK && b; i++) {
        memset(out, 0, NROWS * sizeof *out);
        st = wisp_session_score(s, b, out);
        if (st != WISP_OK || !same_scores(out, ref[0])) a->mismatches++;
    }
    TCHECK(wisp_session_stat(s, WISP_STAT_BATCHES) == (uint64_t)a->iters &&
           wisp_session_stat(s, WISP_STAT_ROWS) == (uint64_t)a->iters * NROWS, "session statistics");
    free(out);
    wisp_session_free(s);
    wisp_batch_free(b);
    return NULL;
}

static void test_shared_model(int pool_threads, const char *model_path)
{
    wisp_engine *eng = NULL;
    wisp_model *m = NULL;
    CHECK_OK(wisp_engine_new(pool_threads, &eng));
    CHECK_OK(wisp_model_load(eng, model_path, &m));
    pthread_t th[NTHREADS];
    struct score_arg args[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        args[t] = (struct score_arg){ eng, m, quick ? 3 : 40, 0 };
        pthread_create(&th[t], NULL, score_thread, &args[t]);
    }
    int bad = 0;
    for (int t = 0; t < NTHREADS; t++) { pthread_join(th[t], NULL); bad += args[t].mismatches; }
    CHECK_MSG(bad == 0, "engine of %d pool threads: %d of %d concurrent scorings differ from single-threaded",
              pool_threads, bad, NTHREADS * args[0].iters);
    wisp_model_free(m);
    wisp_engine_free(eng);
}

/* ---- 2. replacing and reloading the model file while others score ----------------------- */

struct reload_state {
    wisp_engine *eng;
    char path[512];
    pthread_mutex_t lock;
    wisp_model *current;         /* the published model (one reference held here) */
    atomic_int done;
    atomic_int swaps;
};

static int model_version(const wisp_model *m)
{
    const char *v = wisp_model_meta(m, "version");
    return v ? atoi(v) : -1;
}

static void *writer_thread(void *p)
{
    struct reload_state *rs = p;
    int rounds = quick ? 6 : 40;
    for (int i = 0; i < rounds; i++) {
        int v = 1 + i % NVERSIONS;
        int st = write_version(rs->path, v);
        TCHECK(st == WISP_OK, "write version %d -> %d (%s)", v, st, wisp_errmsg());
        wisp_model *m = NULL;
        st = wisp_model_load(rs->eng, rs->path, &m);
        TCHECK(st == WISP_OK, "reload -> %d (%s)", st, wisp_errmsg());
        if (st != WISP_OK) continue;
        TCHECK(model_version(m) >= 1, "reloaded model has no version");
        pthread_mutex_lock(&rs->lock);
        wisp_model *old = rs->current;
        rs->current = m;
        pthread_mutex_unlock(&rs->lock);
        wisp_model_free(old);        /* sessions on it keep it alive */
        atomic_fetch_add(&rs->swaps, 1);
        usleep(1000);
    }
    atomic_store(&rs->done, 1);
    return NULL;
}

struct reader_arg {
    struct reload_state *rs;
    int id;
    int scored, loads, mismatches;
};

static void check_version_scores(struct reader_arg *a, wisp_session *s, wisp_batch *b, float *out, int v)
{
    int st = wisp_session_score(s, b, out);
    if (st != WISP_OK || v < 1 || v > NVERSIONS || !same_scores(out, ref[v])) a->mismatches++;
    a->scored++;
}

static void *reader_thread(void *p)
{
    struct reader_arg *a = p;
    struct reload_state *rs = a->rs;
    wisp_batch *b = parse_text(rs->eng);
    float *out = malloc(NROWS * sizeof *out);
    wisp_session *held = NULL;   /* a session kept across replacements */
    int held_v = -1;
    for (int i = 0; !atomic_load(&rs->done) || i < 3; i++) {
        /* the published model */
        wisp_session *s = NULL;
        pthread_mutex_lock(&rs->lock);
        int v = model_version(rs->current);
        int st = wisp_session_new(rs->eng, rs->current, "cpu", &s);
        pthread_mutex_unlock(&rs->lock);
        TCHECK(st == WISP_OK, "session_new -> %d", st);
        if (st != WISP_OK) break;
        check_version_scores(a, s, b, out, v);
        if (!held || i % 4 == 0) {
            wisp_session_free(held);
            held = s;
            held_v = v;
        } else {
            wisp_session_free(s);
        }
        /* the old model, maybe replaced on disk and unpublished by now */
        check_version_scores(a, held, b, out, held_v);
        /* the path, loaded while the writer renames over it */
        if (i % 3 == a->id % 3) {
            wisp_model *m = NULL;
            st = wisp_model_load(rs->eng, rs->path, &m);
            TCHECK(st == WISP_OK, "load while replacing -> %d (%s)", st, wisp_errmsg());
            if (st == WISP_OK) {
                wisp_session *s2 = NULL;
                if (wisp_session_new(rs->eng, m, "cpu", &s2) == WISP_OK)
                    check_version_scores(a, s2, b, out, model_version(m));
                wisp_session_free(s2);
                wisp_model_free(m);
                a->loads++;
            }
        }
    }
    wisp_session_free(held);
    free(out);
    wisp_batch_free(b);
    return NULL;
}

static void test_reload(void)
{
    struct reload_state rs;
    memset(&rs, 0, sizeof rs);
    pthread_mutex_init(&rs.lock, NULL);
    CHECK_OK(wisp_engine_new(2, &rs.eng));
    P(rs.path, "live.wisp");
    CHECK_OK(write_version(rs.path, NVERSIONS));
    CHECK_OK(wisp_model_load(rs.eng, rs.path, &rs.current));
    pthread_t w, r[NTHREADS - 1];
    struct reader_arg ra[NTHREADS - 1];
    pthread_create(&w, NULL, writer_thread, &rs);
    for (int t = 0; t < NTHREADS - 1; t++) {
        ra[t] = (struct reader_arg){ &rs, t, 0, 0, 0 };
        pthread_create(&r[t], NULL, reader_thread, &ra[t]);
    }
    pthread_join(w, NULL);
    int scored = 0, loads = 0, bad = 0;
    for (int t = 0; t < NTHREADS - 1; t++) {
        pthread_join(r[t], NULL);
        scored += ra[t].scored;
        loads += ra[t].loads;
        bad += ra[t].mismatches;
    }
    CHECK_MSG(bad == 0, "%d of %d scorings during reloads differ from their version's reference", bad, scored);
    CHECK(atomic_load(&rs.swaps) == (quick ? 6 : 40));
    CHECK(loads > 0);
    printf("test_concurrency: %d model swaps, %d scorings and %d loads during them, %d mismatches\n",
           atomic_load(&rs.swaps), scored, loads, bad);
    wisp_model_free(rs.current);
    wisp_engine_free(rs.eng);
    pthread_mutex_destroy(&rs.lock);
    unlink(rs.path);
}

/* ---- 3. thread-local errors, discovery, logging, freeing the engine first -------------- */

struct misc_arg { wisp_engine *eng; wisp_model *model; int id; int bad; atomic_int *go; };

static void *misc_thread(void *p)
{
    struct misc_arg *a = p;
    while (!atomic_load(a->go)) { }
    char path[512], name[64];
    for (int i = 0; i < (quick ? 20 : 200); i++) {
        snprintf(name, sizeof name, "missing-%d-%d.wisp", a->id, i);
        P(path, name);
        wisp_model *m = NULL;
        int st = wisp_model_load(a->eng, path, &m);
        if (st != WISP_EIO || !strstr(wisp_errmsg(), name)) a->bad++;
        if (i % 10 == 0) {
            (void)wisp_engine_gpu_count(a->eng);
            (void)wisp_engine_gpu_status(a->eng);
            char buf[128];
            wisp_engine_last_log(a->eng, buf, sizeof buf);
        }
    }
    /* objects made from an engine the main thread already dropped */
    wisp_batch *b = parse_text(a->eng);
    wisp_session *s = NULL;
    float *out = malloc(NROWS * sizeof *out);
    /* "cpu": the reference is the CPU path, compared bit for bit (a GPU sums in float32) */
    if (wisp_session_new(a->eng, a->model, "cpu", &s) != WISP_OK || wisp_session_score(s, b, out) != WISP_OK ||
        !same_scores(out, ref[0]))
        a->bad++;
    free(out);
    wisp_session_free(s);
    wisp_batch_free(b);
    return NULL;
}

static void test_misc(const char *model_path)
{
    wisp_engine *eng = NULL;
    wisp_model *m = NULL;
    CHECK_OK(wisp_engine_new(2, &eng));
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);
    CHECK_OK(wisp_model_load(eng, model_path, &m));
    /* each thread holds its own references: session (model) and batch (engine) */
    atomic_int go = 0;
    pthread_t th[NTHREADS];
    struct misc_arg args[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        args[t] = (struct misc_arg){ eng, m, t, 0, &go };
        wisp__engine_retain(eng);
        wisp__model_retain(m);
        pthread_create(&th[t], NULL, misc_thread, &args[t]);
    }
    /* the main thread lets go of both before the threads even start */
    wisp_model_free(m);
    wisp_engine_free(eng);
    atomic_store(&go, 1);
    int bad = 0;
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        bad += args[t].bad;
        wisp_model_free(args[t].model);
        wisp_engine_free(args[t].eng);
    }
    CHECK_MSG(bad == 0, "%d thread-local errors or scores were wrong", bad);
}

/* ---- main ------------------------------------------------------------------------------ */

int main(void)
{
    quick = getenv("WISP_TEST_QUICK") != NULL;
    snprintf(tmpdir, sizeof tmpdir, "%s/wisp_concurrency_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    gen_text();
    for (int v = 0; v <= NVERSIONS; v++) {
        weights[v] = malloc(NF * sizeof(float));
        for (uint32_t i = 0; i < NF; i++)
            weights[v][i] = (float)((double)(rnd() % 20001) / 10000.0 - 1.0) * (float)(1 + v);
        biases[v] = 0.125 * v - 0.25;
    }

    /* the single-threaded references: an engine of one thread, one session, per version */
    char path[512], vpath[512];
    wisp_engine *eng1 = NULL;
    CHECK_OK(wisp_engine_new(1, &eng1));
    wisp_batch *b = parse_text(eng1);
    CHECK(wisp_batch_bad_count(b) > 0);
    for (int v = 0; v <= NVERSIONS; v++) {
        char name[32];
        snprintf(name, sizeof name, "v%d.wisp", v);
        CHECK_OK(write_version(P(vpath, name), v));
        wisp_model *m = NULL;
        wisp_session *s = NULL;
        ref[v] = malloc(NROWS * sizeof(float));
        CHECK_OK(wisp_model_load(eng1, vpath, &m));
        CHECK_OK(wisp_session_new(eng1, m, "cpu", &s));
        CHECK_OK(wisp_session_score(s, b, ref[v]));
        CHECK(model_version(m) == v);
        /* the reference itself against float64 */
        CHECK_MSG(check_f64(m, b, ref[v]) == 0, "version %d: single-threaded scores differ from float64", v);
        wisp_session_free(s);
        wisp_model_free(m);
        if (v) unlink(vpath);
    }
    CHECK(!same_scores(ref[1], ref[2]));
    wisp_batch_free(b);
    wisp_engine_free(eng1);
    P(path, "v0.wisp");

    test_shared_model(2, path);
    test_shared_model(1, path);
    test_reload();
    test_misc(path);

    unlink(path);
    CHECK_MSG(rmdir(tmpdir) == 0, "%s is not empty", tmpdir);
    for (int v = 0; v <= NVERSIONS; v++) { free(weights[v]); free(ref[v]); }
    free(text);
    return CHECK_DONE("test_concurrency");
}
