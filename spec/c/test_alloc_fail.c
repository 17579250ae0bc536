/* test_alloc_fail.c — SQLite-style allocation-failure injection: every allocation of each operation made to fail in
 * turn; each must fail cleanly and leave the engine usable. */
/*
 * For each operation and N = 1, 2, ...: wisp_fault_alloc_after(N) makes the
 * Nth library allocation from now fail; the operation runs; if it made
 * fewer than N allocations it succeeded untouched and the loop ends.
 * Otherwise the operation must either
 *   - fail with WISP_ENOMEM, a message, and *out == NULL, leaving what the
 *     caller owns consistent (a batch keeps exactly the rows added before,
 *     a model file on disk is the old one, no temporary files are left), or
 *   - succeed with the right result (a best-effort allocation, e.g. the
 *     directory fsync after a model write: counted as "absorbed").
 * Then the same engine repeats the operation without faults and must get the
 * right answer. Leaks are caught by the sanitizer pass (LeakSanitizer) and
 * valgrind (spec/reliability.sh): this file frees everything it owns.
 * The closing lines say how many failure points were tried.
 */
#include "check.h"
#include "testrand.h"
#include "score/score.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static wisp_engine *eng;
static char tmpdir[256];
static uint64_t points_total, absorbed_total;

static const char *P(const char *name)
{
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

/* ---- a growable string --------------------------------------------------------- */

typedef struct { char *s; size_t n, cap; } str;
static void sputf(str *o, const char *fmt, ...) WISP_PRINTF(2, 3);
static void sputf(str *o, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->s ? o->s + o->n : NULL, o->s ? o->cap - o->n : 0, fmt, ap);
        va_end(ap);
        if (o->s && (size_t)k < o->cap - o->n) { o->n += (size_t)k; return; }
        o->cap = (o->cap + (size_t)k + 1) * 2;
        o->s = realloc(o->s, o->cap);
    }
}

/* ---- the reference data ------------------------------------------------------------ */

#define NF 5000u                 /* model features */
#define NROWS 700                /* > the batch's first row capacity (256); nnz > its first id capacity (4096) */

typedef struct { size_t nv, nb; uint64_t vids[24], bids[24]; float vals[24]; } row_t;
static row_t rows[NROWS];
static float weights[NF];
static double bias = -0.375;

static uint64_t gen_id(void)
{
    uint64_t r = rnd() % 100;
    if (r < 2) return (uint64_t)1 << 33;           /* >= 2^32: stored as out of range */
    if (r < 5) return NF + rnd() % 9;              /* just past the table */
    if (r < 8) return r & 1 ? 0 : NF - 1;          /* the table's edges */
    return rnd() % NF;
}

static void gen_data(void)
{
    for (size_t i = 0; i < NF; i++) weights[i] = (float)((double)(rnd() % 20001) / 10000.0 - 1.0);
    for (size_t r = 0; r < NROWS; r++) {
        row_t *w = &rows[r];
        int kind = (int)(rnd() % 4);               /* empty, binary, valued, mixed */
        w->nv = kind >= 2 ? 1 + rnd() % 12 : 0;
        w->nb = kind == 1 || kind == 3 ? 1 + rnd() % 12 : 0;
        for (size_t k = 0; k < w->nv; k++) {
            w->vids[k] = gen_id();
            w->vals[k] = (float)((int)(rnd() % 401) - 200) / 64.0f;
            if (w->vals[k] == 1.0f) w->vals[k] = 0.5f;   /* the parser stores 1.0 as binary */
        }
        for (size_t k = 0; k < w->nb; k++) w->bids[k] = gen_id();
    }
}

static float ref_score(const row_t *w)
{
    double z = bias;
    for (size_t k = 0; k < w->nv; k++) if (w->vids[k] < NF) z += (double)weights[w->vids[k]] * w->vals[k];
    for (size_t k = 0; k < w->nb; k++) if (w->bids[k] < NF) z += weights[w->bids[k]];
    return (float)(1.0 / (1.0 + exp(-z)));
}

/* libsvm text of the rows, with blank and comment lines and a bad line every 16 rows */
static char *libsvm_text(size_t *len, size_t *nbad)
{
    str o = { 0 };
    *nbad = 0;
    for (size_t r = 0; r < NROWS; r++) {
        const row_t *w = &rows[r];
        if (r % 50 == 0) sputf(&o, "# comment %zu\n\n", r);
        if (r % 16 == 5) { sputf(&o, "1 3:x%zu bad\n", r); (*nbad)++; }
        sputf(&o, "%d", (int)(r & 1));
        for (size_t k = 0; k < w->nv; k++) sputf(&o, " %" PRIu64 ":%.9g", w->vids[k], (double)w->vals[k]);
        for (size_t k = 0; k < w->nb; k++) sputf(&o, " %" PRIu64, w->bids[k]);
        sputf(&o, "\n");
    }
    *len = o.n;
    return o.s;
}

/* ---- rendering a batch, row by row ------------------------------------------------ */

static char *render(const wisp_batch *b, size_t upto)
{
    str o = { 0 };
    sputf(&o, "%s", "");
    const uint32_t *rp = wisp_batch_indptr(b), *ids = wisp_batch_ids(b), *vp = wisp_batch_val_ptr(b);
    const float *vals = wisp_batch_vals(b);
    size_t n = wisp_batch_rows(b), nbad = wisp_batch_bad_count(b), bi = 0;
    if (upto > n) upto = n;
    for (size_t r = 0; r < upto; r++) {
        size_t brow = SIZE_MAX;
        uint64_t bline = 0;
        if (bi < nbad) wisp_batch_bad_row(b, bi, &brow, &bline, NULL);
        if (brow == r) { bi++; sputf(&o, "!%" PRIu64 "\n", bline); continue; }
        size_t a = rp[r], z = rp[r + 1];
        size_t nv = vp ? vp[r + 1] - vp[r] : vals ? z - a : 0, v0 = vp ? vp[r] : a;
        for (size_t k = 0; k < nv; k++) sputf(&o, "%u:%a ", ids[a + k], (double)vals[v0 + k]);
        sputf(&o, "|");
        for (size_t k = a + nv; k < z; k++) sputf(&o, " %u", ids[k]);
        sputf(&o, "\n");
    }
    return o.s;
}

/* the batch is exactly the first rows of the reference batch */
static int is_prefix(const wisp_batch *b, const wisp_batch *ref)
{
    char *x = render(b, SIZE_MAX), *y = render(ref, wisp_batch_rows(b));
    int same = wisp_batch_rows(b) <= wisp_batch_rows(ref) && strcmp(x, y) == 0;
    free(x);
    free(y);
    return same;
}

static int add_ref_row(wisp_batch *b, size_t r)
{
    const row_t *w = &rows[r];
    if (r % 3 == 0 && (w->nv == 0 || w->nb == 0))        /* the plain builder, some of the time */
        return w->nv ? wisp_batch_add_row(b, w->vids, w->vals, w->nv) : wisp_batch_add_row(b, w->bids, NULL, w->nb);
    return wisp_batch_add_row_mixed(b, w->vids, w->vals, w->nv, w->bids, w->nb);
}

static int check_scores(wisp_session *s, const wisp_batch *b, const char *what)
{
    float *out = malloc(NROWS * sizeof *out);
    int st = wisp_session_score(s, b, out), bad = 0;
    CHECK_MSG(st == WISP_OK, "%s: score -> %d", what, st);
    for (size_t r = 0; r < NROWS && st == WISP_OK; r++)
        if (fabsf(out[r] - ref_score(&rows[r])) > 2e-6f) {
            bad++;
            if (bad < 4)
                fprintf(stderr, "%s: row %zu: %.9g, want %.9g\n", what, r, (double)out[r], (double)ref_score(&rows[r]));
        }
    CHECK_MSG(bad == 0, "%s: %d wrong scores", what, bad);
    free(out);
    return bad;
}

/* no temporary files of the atomic writer are left in tmpdir */
static int tmp_leftovers(void)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) if (strstr(e->d_name, ".tmp-")) n++;
    if (d) closedir(d);
    return n;
}

static int file_equals(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* ---- the driver -------------------------------------------------------------------- */

typedef struct op {
    const char *name;
    void (*prepare)(void);                /* fault-free setup before each attempt */
    int  (*run)(void);                    /* the operation, under the fault */
    void (*after_fail)(int st, uint64_t n);  /* state checks after a failure, then a fault-free retry */
    void (*after_ok)(uint64_t n);         /* checks after a success */
    void (*cleanup)(void);
} op_t;

static void drive(const op_t *op)
{
    uint64_t points = 0, absorbed = 0, n;
    for (n = 1; n < 100000; n++) {
        if (op->prepare) op->prepare();
        wisp__clear_error();
        wisp_fault_alloc_after(n);
        int st = op->run();
        uint64_t seen = wisp_fault_alloc_after(0);
        if (seen < n) {                    /* the Nth allocation never came: done */
            CHECK_MSG(st == WISP_OK, "%s: without a fault -> %d (%s)", op->name, st, wisp_errmsg());
            if (op->after_ok) op->after_ok(n);
            if (op->cleanup) op->cleanup();
            break;
        }
        points++;
        if (st == WISP_OK) {
            absorbed++;
            if (op->after_ok) op->after_ok(n);
        } else {
            CHECK_MSG(st == WISP_ENOMEM && wisp_errmsg()[0], "%s: allocation %" PRIu64 " failed -> %d '%s', "
                      "wanted WISP_ENOMEM with a message", op->name, n, st, wisp_errmsg());
            if (op->after_fail) op->after_fail(st, n);
        }
        if (op->cleanup) op->cleanup();
    }
    CHECK_MSG(points > 0, "%s: no allocation was seen", op->name);
    printf("  %-24s %4" PRIu64 " failure points (%" PRIu64 " absorbed as best effort)\n", op->name, points, absorbed);
    points_total += points;
    absorbed_total += absorbed;
}

/* ---- the operations ------------------------------------------------------------------ */

static wisp_engine *e2;
static wisp_model *model, *m2;
static wisp_batch *bat, *ref_batch;
static wisp_session *sess;
static char *text;
static size_t text_len, text_bad;

/* engine_new with 2 threads */
static int run_engine(void) { e2 = (wisp_engine *)1; return wisp_engine_new(2, &e2); }
static void engine_fail(int st, uint64_t n)
{
    CHECK_MSG(e2 == NULL, "engine_new failed at %" PRIu64 " but *out is set", n);
    CHECK_OK(wisp_engine_new(2, &e2));
    CHECK(wisp_engine_threads(e2) == 2);
}
static void engine_ok(uint64_t n) { CHECK(e2 && wisp_engine_threads(e2) == 2); }
static void engine_cleanup(void) { if (e2 != (wisp_engine *)1) wisp_engine_free(e2); e2 = NULL; }

/* model load (plain and huge pages) */
static unsigned load_flags;
static int run_load(void) { m2 = (wisp_model *)1; return wisp_model_load_ex(eng, P("m.wisp"), load_flags, &m2); }
static void check_model(wisp_model *m)
{
    CHECK(wisp_model_num_features(m) == NF && wisp_model_bias(m) == bias);
    int bad = 0;
    for (uint64_t i = 0; i < NF; i++) bad += wisp_model_weight(m, i) != weights[i];
    CHECK_MSG(bad == 0, "%d weights differ", bad);
    CHECK(wisp_model_meta(m, "source") && strcmp(wisp_model_meta(m, "source"), "alloc_fail") == 0);
    CHECK(wisp_model_meta(m, "k2") && strcmp(wisp_model_meta(m, "k2"), "v2") == 0);
    CHECK(strcmp(wisp_model_columns(m), "a hash 100\n") == 0);
}
static void load_fail(int st, uint64_t n)
{
    CHECK_MSG(m2 == NULL, "load failed at %" PRIu64 " but *out is set", n);
    CHECK(strstr(wisp_errmsg(), "m.wisp") != NULL);
    CHECK_OK(wisp_model_load_ex(eng, P("m.wisp"), load_flags, &m2));
    if (m2) check_model(m2);
}
static void load_ok(uint64_t n) { check_model(m2); }
static void load_cleanup(void) { if (m2 != (wisp_model *)1) wisp_model_free(m2); m2 = NULL; }

/* batch_new, then every reference row through the builders */
static size_t built;
static int run_build(void)
{
    built = 0;
    bat = NULL;
    int st = wisp_batch_new(eng, &bat);
    while (st == WISP_OK && built < NROWS && (st = add_ref_row(bat, built)) == WISP_OK) built++;
    return st;
}
static void build_finish(const char *what)
{
    CHECK_MSG(is_prefix(bat, ref_batch), "%s: the batch is not the rows added before the failure", what);
    for (; built < NROWS; built++) CHECK_OK(add_ref_row(bat, built));
    char *x = render(bat, SIZE_MAX), *y = render(ref_batch, SIZE_MAX);
    CHECK_MSG(strcmp(x, y) == 0, "%s: the finished batch differs from the reference", what);
    free(x);
    free(y);
    check_scores(sess, bat, what);
}
static void build_fail(int st, uint64_t n)
{
    if (!bat) { CHECK_OK(wisp_batch_new(eng, &bat)); built = 0; }   /* batch_new itself failed */
    else CHECK_MSG(wisp_batch_rows(bat) == built, "build failed at %" PRIu64 ": %zu rows, %zu added", n,
                   wisp_batch_rows(bat), built);
    build_finish("builders");
}
static void build_ok(uint64_t n) { build_finish("builders"); }
static void batch_cleanup(void) { wisp_batch_free(bat); bat = NULL; }

/* parse_libsvm over the text, as a streaming caller: on failure, resume from *consumed */
static size_t parse_pos;
static uint64_t parse_line;
static void prepare_parse(void) { CHECK_OK(wisp_batch_new(eng, &bat)); parse_pos = 0; parse_line = 0; }
static int run_parse(void)
{
    size_t used = 0;
    int st = wisp_batch_parse_libsvm(bat, text, text_len, 1, 0, &parse_line, &used);
    parse_pos += used;
    return st;
}
static void parse_finish(const char *what)
{
    /* every line consumed made its row: parse_line counts the lines before parse_pos */
    size_t lines = 0;
    for (size_t i = 0; i < parse_pos; i++) lines += text[i] == '\n';
    CHECK_MSG(parse_line == lines, "%s: line_no %" PRIu64 ", %zu lines consumed", what, parse_line, lines);
    CHECK_MSG(is_prefix(bat, ref_batch), "%s: the batch is not the rows parsed before the failure", what);
    size_t used = 0;
    CHECK_OK(wisp_batch_parse_libsvm(bat, text + parse_pos, text_len - parse_pos, 1, 0, &parse_line, &used));
    CHECK(parse_pos + used == text_len);
    char *x = render(bat, SIZE_MAX), *y = render(ref_batch, SIZE_MAX);
    CHECK_MSG(strcmp(x, y) == 0, "%s: the resumed batch differs from a fault-free parse", what);
    free(x);
    free(y);
}
static void parse_fail(int st, uint64_t n) { parse_finish("parse_libsvm"); }
static void parse_ok(uint64_t n) { parse_finish("parse_libsvm"); }

/* wrap caller arrays */
static uint32_t w_rp[4] = { 0, 2, 2, 5 }, w_ids[5] = { 1, 4999, 5000, 0, 7 };
static float w_vals[5] = { 0.5f, -2.0f, 3.0f, 0.25f, 8.0f };
static int run_wrap(void) { bat = (wisp_batch *)1; return wisp_batch_wrap(eng, 3, w_rp, w_ids, NULL, w_vals, &bat); }
static void wrap_check(void)
{
    float out[3];
    wisp_session *s = NULL;
    CHECK_OK(wisp_session_new(eng, model, "cpu", &s));
    CHECK_OK(wisp_session_score(s, bat, out));
    double z0 = bias + 0.5 * weights[1] - 2.0 * weights[4999], z2 = bias + 0.25 * weights[0] + 8.0 * weights[7];
    CHECK_NEAR(out[0], 1 / (1 + exp(-z0)), 1e-6);
    CHECK_NEAR(out[1], 1 / (1 + exp(-bias)), 1e-6);
    CHECK_NEAR(out[2], 1 / (1 + exp(-z2)), 1e-6);
    wisp_session_free(s);
}
static void wrap_fail(int st, uint64_t n)
{
    CHECK(bat == NULL);
    CHECK_OK(wisp_batch_wrap(eng, 3, w_rp, w_ids, NULL, w_vals, &bat));
    wrap_check();
}
static void wrap_ok(uint64_t n) { wrap_check(); }
static void wrap_cleanup(void) { if (bat != (wisp_batch *)1) wisp_batch_free(bat); bat = NULL; }

/* session_new ("auto": GPU discovery when there is a backend) and a score */
static wisp_session *s2;
static int run_session(void)
{
    s2 = (wisp_session *)1;
    int st = wisp_session_new(eng, model, "auto", &s2);
    if (st != WISP_OK) return st;
    float *out = malloc(NROWS * sizeof *out);
    st = wisp_session_score(s2, ref_batch, out);
    free(out);
    return st;
}
static void session_fail(int st, uint64_t n)
{
    CHECK_MSG(s2 != (wisp_session *)1, "session_new failed at %" PRIu64 " and left *out as it was", n);
    if (s2 == NULL || s2 == (wisp_session *)1) CHECK_OK(wisp_session_new(eng, model, "auto", &s2));
    if (s2) check_scores(s2, ref_batch, "session");
}
static void session_ok(uint64_t n) { check_scores(s2, ref_batch, "session"); }
static void session_cleanup(void) { if (s2 != (wisp_session *)1) wisp_session_free(s2); s2 = NULL; }

/* model_write over an existing file: a failure keeps the old file */
static const float old_w[3] = { 1, 2, 3 };
static void prepare_write(void) { CHECK_OK(wisp_model_write(P("w.wisp"), old_w, 3, 0, WISP_F32, "old=1", NULL)); }
static int run_write(void)
{
    return wisp_model_write(P("w.wisp"), weights, NF, bias, WISP_F16, "source=alloc_fail\nk2=v2", "a hash 100\n");
}
/* w.wisp is what a fault-free call writes (ref), with no temporary file left */
static void written_check(const char *what, const char *ref, const char *differs)
{
    CHECK_MSG(file_equals(P("w.wisp"), P(ref)), "%s: the %s", what, differs);
    CHECK_MSG(tmp_leftovers() == 0, "%s: temporary files left behind", what);
}
/* a call that writes w.wisp failed at allocation n: the old file is whole, nothing is left; then it works */
static void written_fail(const char *call, uint64_t n, int (*run)(void), void (*check)(const char *), const char *what)
{
    CHECK_MSG(file_equals(P("w.wisp"), P("old.wisp")), "%s failed at %" PRIu64 " and changed the old file", call, n);
    CHECK_MSG(tmp_leftovers() == 0, "%s failed at %" PRIu64 " and left a temporary file", call, n);
    CHECK_OK(run());
    check(what);
}
static void write_check(const char *what)
{
    written_check(what, "ref_f16.wisp", "written file differs from a fault-free write");
}
static void write_fail(int st, uint64_t n) { written_fail("model_write", n, run_write, write_check, "model_write"); }
static void write_ok(uint64_t n) { write_check("model_write"); }

/* model_convert */
static int run_convert(void) { return wisp_model_convert(model, P("w.wisp"), WISP_I8); }
static void convert_check(const char *what)
{
    written_check(what, "ref_i8.wisp", "converted file differs from a fault-free one");
}
static void convert_fail(int st, uint64_t n)
{
    written_fail("convert", n, run_convert, convert_check, "model_convert");
}
static void convert_ok(uint64_t n) { convert_check("model_convert"); }

/* import_liblinear */
static void prepare_import(void) { unlink(P("imp.wisp")); }
static int run_import(void) { return wisp_import_liblinear(P("ll.txt"), P("imp.wisp"), WISP_F32); }
static void import_check(const char *what)
{
    CHECK_MSG(file_equals(P("imp.wisp"), P("ref_imp.wisp")), "%s: the imported file differs from a fault-free import",
              what);
    CHECK_MSG(tmp_leftovers() == 0, "%s: temporary files left behind", what);
}
static void import_fail(int st, uint64_t n)
{
    CHECK_MSG(access(P("imp.wisp"), F_OK) != 0, "import failed at %" PRIu64 " but wrote its output", n);
    CHECK_MSG(tmp_leftovers() == 0, "import failed at %" PRIu64 " and left a temporary file", n);
    CHECK_OK(run_import());
    import_check("import_liblinear");
}
static void import_ok(uint64_t n) { import_check("import_liblinear"); }

/* the whole pipeline as a caller writes it: every object freed on every path */
static float *pipe_out;
static int run_pipeline(void)
{
    wisp_engine *e = NULL;
    wisp_model *m = NULL;
    wisp_batch *b = NULL, *t = NULL;
    wisp_session *s = NULL;
    int st = wisp_engine_new(2, &e);
    if (st == WISP_OK) { wisp_engine_set_log_level(e, WISP_LOG_OFF); st = wisp_model_load(e, P("m.wisp"), &m); }
    if (st == WISP_OK) st = wisp_batch_new(e, &b);
    for (size_t r = 0; st == WISP_OK && r < NROWS; r++) st = add_ref_row(b, r);
    if (st == WISP_OK) st = wisp_batch_new(e, &t);
    if (st == WISP_OK) st = wisp_batch_parse_libsvm(t, text, text_len, 1, 0, NULL, NULL);
    if (st == WISP_OK) st = wisp_session_new(e, m, "auto", &s);
    /* free in an unusual order: the engine first (the others keep it alive) */
    wisp_engine_free(e);
    wisp_model_free(m);
    if (st == WISP_OK) st = wisp_session_score(s, b, pipe_out);
    wisp_batch_free(t);
    wisp_batch_free(b);
    wisp_session_free(s);
    return st;
}
static void pipeline_check(const char *what)
{
    int bad = 0;
    for (size_t r = 0; r < NROWS; r++) bad += fabsf(pipe_out[r] - ref_score(&rows[r])) > 2e-6f;
    CHECK_MSG(bad == 0, "%s: %d wrong scores", what, bad);
}
static void pipeline_fail(int st, uint64_t n) { CHECK_OK(run_pipeline()); pipeline_check("pipeline"); }
static void pipeline_ok(uint64_t n) { pipeline_check("pipeline"); }

/* ---- main ---------------------------------------------------------------------------- */

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/wisp_alloc_fail_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    rng_state = 0x243F6A8885A308D3ull;           /* the seed of this test's data (testrand.h's rnd) */
    gen_data();
    CHECK_OK(wisp_engine_new(2, &eng));
    wisp_engine_set_log_level(eng, WISP_LOG_OFF);

    /* fault-free references */
    CHECK_OK(wisp_model_write(P("m.wisp"), weights, NF, bias, WISP_F32, "source=alloc_fail\nk2=v2", "a hash 100\n"));
    CHECK_OK(wisp_model_write(P("ref_f16.wisp"), weights, NF, bias, WISP_F16, "source=alloc_fail\nk2=v2",
                              "a hash 100\n"));
    CHECK_OK(wisp_model_write(P("old.wisp"), old_w, 3, 0, WISP_F32, "old=1", NULL));
    CHECK_OK(wisp_model_load(eng, P("m.wisp"), &model));
    CHECK_OK(wisp_model_convert(model, P("ref_i8.wisp"), WISP_I8));
    {
        FILE *f = fopen(P("ll.txt"), "w");
        fprintf(f, "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 300\nbias 1\nw\n");
        for (int i = 0; i <= 300; i++) fprintf(f, "%.17g \n", (double)weights[i]);
        fclose(f);
    }
    CHECK_OK(wisp_import_liblinear(P("ll.txt"), P("ref_imp.wisp"), WISP_F32));
    CHECK_OK(wisp_session_new(eng, model, "cpu", &sess));
    CHECK_OK(wisp_batch_new(eng, &ref_batch));
    for (size_t r = 0; r < NROWS; r++) CHECK_OK(add_ref_row(ref_batch, r));
    CHECK(wisp_batch_nnz(ref_batch) > 4096 && wisp_batch_rows(ref_batch) > 256);
    check_scores(sess, ref_batch, "reference batch");
    text = libsvm_text(&text_len, &text_bad);
    wisp_batch *parsed = NULL;
    CHECK_OK(wisp_batch_new(eng, &parsed));
    CHECK_OK(wisp_batch_parse_libsvm(parsed, text, text_len, 1, 0, NULL, NULL));
    CHECK(wisp_batch_bad_count(parsed) == text_bad && text_bad > 16);

    pipe_out = malloc(NROWS * sizeof *pipe_out);
    printf("test_alloc_fail: every allocation of each operation fails in turn\n");
    const op_t ops[] = {
        { "engine_new", NULL, run_engine, engine_fail, engine_ok, engine_cleanup },
        { "model_load", NULL, run_load, load_fail, load_ok, load_cleanup },
        { "model_load(hugepages)", NULL, run_load, load_fail, load_ok, load_cleanup },
        { "batch add_row(_mixed)", NULL, run_build, build_fail, build_ok, batch_cleanup },
        { "batch_parse_libsvm", prepare_parse, run_parse, parse_fail, parse_ok, batch_cleanup },
        { "batch_wrap", NULL, run_wrap, wrap_fail, wrap_ok, wrap_cleanup },
        { "session_new+score", NULL, run_session, session_fail, session_ok, session_cleanup },
        { "model_write", prepare_write, run_write, write_fail, write_ok, NULL },
        { "model_convert", prepare_write, run_convert, convert_fail, convert_ok, NULL },
        { "import_liblinear", prepare_import, run_import, import_fail, import_ok, NULL },
        { "pipeline", NULL, run_pipeline, pipeline_fail, pipeline_ok, NULL },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        load_flags = strstr(ops[i].name, "hugepages") ? WISP_LOAD_HUGEPAGES : 0;
        if (ops[i].prepare == prepare_parse) {
            /* the reference for the parser is the fault-free parse */
            wisp_batch *t = ref_batch;
            ref_batch = parsed;
            drive(&ops[i]);
            ref_batch = t;
        } else {
            drive(&ops[i]);
        }
    }
    printf("test_alloc_fail: failure points tried: %" PRIu64 " (%" PRIu64 " absorbed)\n", points_total, absorbed_total);

    /* the engine is still fine after all of that */
    check_scores(sess, ref_batch, "final");
    wisp_batch_free(parsed);
    wisp_batch_free(ref_batch);
    wisp_session_free(sess);
    wisp_model_free(model);
    wisp_engine_free(eng);
    free(text);
    free(pipe_out);
    const char *names[] = { "m.wisp", "ref_f16.wisp", "old.wisp", "ref_i8.wisp", "ll.txt", "ref_imp.wisp", "w.wisp",
                           "imp.wisp" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(P(names[i]));
    CHECK_MSG(rmdir(tmpdir) == 0, "%s is not empty", tmpdir);
    return CHECK_DONE("test_alloc_fail");
}
