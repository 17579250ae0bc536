/* test_model.c — .wisp model files: fp16 codec, round trips, meta, hostile files, conversion, LIBLINEAR import. */
#include "check.h"
#include "testutil.h"
#include "model/model.h"

#include <xxhash.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

static char tmpdir[256];
static wisp_engine *eng;

static const char *P(const char *name)          /* a path inside the test's directory */
{
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static uint64_t rng_state;
static uint64_t rnd(void)                        /* xorshift64* */
{
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static double unif(void) { return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0); }

/* a whole file (testutil.h's slurp), as bytes */
static unsigned char *read_all(const char *path, size_t *len) { return (unsigned char *)slurp(path, len); }

static void write_all(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    if (len) fwrite(buf, 1, len, f);
    fclose(f);
}

static void write_text(const char *path, const char *text) { write_all(path, text, strlen(text)); }

/* the layout this test knows (see the comment at the top of engine/model/format.h) */
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static unsigned char *entry(unsigned char *f, int i) { return f + get64(f + 24) + 64 * (size_t)i; }
static int find_entry(unsigned char *f, const char *name)
{
    uint32_t n; memcpy(&n, f + 12, 4);
    for (uint32_t i = 0; i < n; i++) if (strcmp((char *)entry(f, (int)i), name) == 0) return (int)i;
    return -1;
}
static void fix_header_sum(unsigned char *f)
{
    uint32_t n; memcpy(&n, f + 12, 4);
    unsigned char h[64];
    memcpy(h, f, 64);
    memset(h + 48, 0, 8);
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, h, 64);
    XXH64_update(st, f + get64(f + 24), 64 * (size_t)n);
    put64(f + 48, XXH64_digest(st));
    XXH64_freeState(st);
}
static void fix_section_sum(unsigned char *f, int i)
{
    unsigned char *e = entry(f, i);
    put64(e + 48, XXH64(f + get64(e + 24), get64(e + 32), 0));
    fix_header_sum(f);
}

/* load bytes as a model file; returns the status, frees the model */
static int load_bytes(const unsigned char *buf, size_t len, const char *name)
{
    write_all(P(name), buf, len);
    wisp_model *m = (wisp_model *)1;
    int rc = wisp_model_load(eng, P(name), &m);
    if (rc != WISP_OK) CHECK(m == NULL);
    wisp_model_free(m);
    return rc;
}

static int leftovers(const char *dir, const char *prefix)   /* temporary files left behind */
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, ".tmp-") && strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

/* ---- dtype names and the fp16 codec ---------------------------------------- */

static void test_dtypes(void)
{
    CHECK(strcmp(wisp_dtype_name(WISP_F32), "f32") == 0);
    CHECK(strcmp(wisp_dtype_name(WISP_F16), "f16") == 0);
    CHECK(strcmp(wisp_dtype_name(WISP_I8), "i8") == 0);
    CHECK(wisp_dtype_name(3) == NULL && wisp_dtype_name(-1) == NULL);
    CHECK(wisp_dtype_parse("f32") == WISP_F32 && wisp_dtype_parse("fp32") == WISP_F32 &&
          wisp_dtype_parse("float32") == WISP_F32);
    CHECK(wisp_dtype_parse("f16") == WISP_F16 && wisp_dtype_parse("fp16") == WISP_F16 &&
          wisp_dtype_parse("half") == WISP_F16);
    CHECK(wisp_dtype_parse("i8") == WISP_I8 && wisp_dtype_parse("int8") == WISP_I8);
    CHECK(wisp_dtype_parse("f64") == -1 && wisp_dtype_parse("") == -1 && wisp_dtype_parse(NULL) == -1);
}

/* the value of a half by its definition, in double */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* reference float -> half by search: the nearest half, ties to the even one */
static uint16_t ref_half(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    unsigned lo = 0, hi = 0x7bff;                /* largest h with value(h) <= a */
    while (lo < hi) {
        unsigned mid = (lo + hi + 1) / 2;
        if (half_value((uint16_t)mid) <= a) lo = mid; else hi = mid - 1;
    }
    if (lo == 0x7bff) return sign | 0x7bff;      /* in [65504, 65520): rounds down */
    double dl = a - half_value((uint16_t)lo), du = half_value((uint16_t)(lo + 1)) - a;
    unsigned r = dl < du ? lo : du < dl ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
    return sign | (uint16_t)r;
}

static void test_half(void)
{
    int bad_value = 0, bad_trip = 0, bad_order = 0, bad_native = 0;
    float prev = -INFINITY;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = wisp__half_to_float((uint16_t)h);
        bool nan = ((h >> 10) & 31) == 31 && (h & 1023);
        if (nan) {
            if (!isnan(f)) bad_value++;
        } else if ((double)f != (((h >> 10) & 31) == 31 ? ((h & 0x8000) ? -INFINITY : INFINITY)
                                 : half_value((uint16_t)h))) {
            bad_value++;
        } else if (!!signbit(f) != !!(h & 0x8000)) {
            bad_value++;
        }
        if (wisp__float_to_half(f) != h) bad_trip++;     /* exact round trip, NaN payloads included */
#ifdef __FLT16_MAX__
        _Float16 nat;
        uint16_t hh = (uint16_t)h;
        memcpy(&nat, &hh, 2);
        if (!nan && (float)nat != f) bad_native++;
#endif
        (void)prev;
    }
    /* monotone over the non-negative finite halves */
    prev = -1;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float f = wisp__half_to_float((uint16_t)h);
        if (!(f > prev)) bad_order++;
        prev = f;
    }
    CHECK_MSG(bad_value == 0, "%d halves decode to the wrong value", bad_value);
    CHECK_MSG(bad_trip == 0, "%d halves do not round-trip", bad_trip);
    CHECK_MSG(bad_order == 0, "%d halves out of order", bad_order);
    CHECK_MSG(bad_native == 0, "%d halves differ from the compiler's _Float16", bad_native);

    /* float -> half: random bit patterns and values near the interesting edges,
     * against the search reference and the compiler's _Float16 conversion */
    int bad_ref = 0, bad_nat = 0, shown = 0;
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        float f;
        uint32_t bits = (uint32_t)rnd();
        switch (i % 5) {
        case 0: memcpy(&f, &bits, 4); break;                                  /* anything */
        case 1: f = (float)ldexp(unif(), -14 - (int)(rnd() % 12)); break;     /* subnormal halves */
        case 2: f = (float)(65504.0 + unif() * 32.0); break;                  /* overflow edge */
        case 3: {                                                             /* exact ties */
            uint16_t h = (uint16_t)(rnd() % 0x7bff);
            f = (float)((half_value(h) + half_value((uint16_t)(h + 1))) / 2);
            break;
        }
        default: f = (float)((unif() - 0.5) * ldexp(1.0, (int)(rnd() % 40) - 24)); break;
        }
        if (rnd() & 1) f = -f;
        uint16_t got = wisp__float_to_half(f);
        if (isnan(f)) {
            if (!isnan(wisp__half_to_float(got))) bad_ref++;
            continue;
        }
        uint16_t want = ref_half(f);
        if (got != want) {
            bad_ref++;
            if (shown++ < 5) fprintf(stderr, "float_to_half(%a) = %04x, reference %04x\n", (double)f, got, want);
        }
#ifdef __FLT16_MAX__
        _Float16 nat = (_Float16)f;
        uint16_t nb;
        memcpy(&nb, &nat, 2);
        if (nb != got) bad_nat++;
#endif
    }
    CHECK_MSG(bad_ref == 0, "%d of %d floats convert differently from the reference", bad_ref, N);
    CHECK_MSG(bad_nat == 0, "%d of %d floats convert differently from _Float16", bad_nat, N);
    CHECK(wisp__float_to_half(65519.99f) == 0x7bff && wisp__float_to_half(65520.0f) == 0x7c00);
    CHECK(wisp__float_to_half(-0.0f) == 0x8000 && wisp__float_to_half(INFINITY) == 0x7c00);
    CHECK(wisp__float_to_half((float)ldexp(1, -25)) == 0 && wisp__float_to_half((float)ldexp(1.5, -25)) == 1);
    CHECK(wisp__float_to_half((float)ldexp(3, -25)) == 2);   /* 1.5 ulp ties to even 2 */
    CHECK(isnan(wisp__half_to_float(wisp__float_to_half(NAN))));
}

/* ---- round trips -------------------------------------------------------------- */

static float *random_weights(uint64_t n)
{
    float *w = malloc(n * sizeof *w);
    for (uint64_t i = 0; i < n; i++) {
        double r = unif();
        w[i] = r < 0.05 ? 0.0f : (float)((unif() - 0.5) * ldexp(1.0, (int)(rnd() % 16) - 8));
    }
    w[0] = 0.0f;
    if (n > 3) { w[1] = -0.0f; w[2] = 1e-6f; w[n - 1] = -3.25f; }
    return w;
}

static void check_roundtrip(int dtype, uint64_t n, unsigned flags)
{
    float *w = random_weights(n);
    double bias = (unif() - 0.5) * 7.0;
    const char *meta = "source=test\nname=round trip\nformula=a=b+c\n";
    const char *cols = "hash(site) 1000\ncross(a,b) 4096\n";
    char name[64];
    snprintf(name, sizeof name, "rt_%s.wisp", wisp_dtype_name(dtype));
    CHECK_OK(wisp_model_write(P(name), w, n, bias, dtype, meta, cols));
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_load_ex(eng, P(name), flags, &m));
    if (!m) { free(w); return; }
    CHECK(wisp_model_num_features(m) == n);
    CHECK(wisp_model_bias(m) == bias);
    CHECK(wisp_model_dtype(m) == dtype);
    CHECK(strcmp(wisp_model_path(m), P(name)) == 0);
    struct stat sb;
    stat(P(name), &sb);
    CHECK(wisp_model_file_size(m) == (uint64_t)sb.st_size);
    CHECK(strcmp(wisp_model_meta_text(m), meta) == 0);
    CHECK(strcmp(wisp_model_columns(m), cols) == 0);
    CHECK(wisp_model_meta(m, "name") && strcmp(wisp_model_meta(m, "name"), "round trip") == 0);
    CHECK(wisp_model_meta(m, "formula") && strcmp(wisp_model_meta(m, "formula"), "a=b+c") == 0);
    CHECK(wisp_model_meta(m, "nope") == NULL);
    double maxabs = 0;
    for (uint64_t i = 0; i < n; i++) maxabs = fmax(maxabs, fabs((double)w[i]));
    float scale = wisp_model_scale(m);
    if (dtype == WISP_I8) CHECK(scale == (maxabs > 0 ? (float)(maxabs / 127.0) : 1.0f));
    else CHECK(scale == 1.0f);
    int bad = 0;
    double worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        double ref = (double)w[i], got = (double)wisp_model_weight(m, i), err = fabs(got - ref), tol;
        switch (dtype) {
        case WISP_F32: tol = 0; break;
        case WISP_F16:
            tol = fmax(fabs(ref) * ldexp(1, -11), ldexp(1, -25));            /* half an fp16 ulp */
            if (got != (double)wisp__half_to_float(wisp__float_to_half(w[i]))) bad++;
            break;
        default: tol = scale / 2.0 + fabs(ref) * ldexp(1, -23); break;      /* scale/2, plus the float product */
        }
        if (err > tol) {
            if (bad++ < 5) fprintf(stderr, "%s w[%llu] = %.9g, got %.9g\n", name, (unsigned long long)i, ref, got);
        }
        worst = fmax(worst, err);
    }
    CHECK_MSG(bad == 0, "%s: %d weights off (worst error %g)", name, bad, worst);
    CHECK(wisp_model_weight(m, n) == 0.0f && wisp_model_weight(m, UINT64_MAX) == 0.0f);
    wisp_model_free(m);
    free(w);
}

static void test_roundtrips(void)
{
    for (int dt = 0; dt < 3; dt++) {
        check_roundtrip(dt, 1 + rnd() % 5000, 0);
        check_roundtrip(dt, 70001, WISP_LOAD_HUGEPAGES);   /* more than one write chunk */
        check_roundtrip(dt, 1, 0);
    }
    /* an all-zero int8 table has scale 1 */
    float z[5] = { 0 };
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_write(P("zero.wisp"), z, 5, 0.0, WISP_I8, NULL, NULL));
    CHECK_OK(wisp_model_load(eng, P("zero.wisp"), &m));
    CHECK(m && wisp_model_scale(m) == 1.0f && wisp_model_weight(m, 3) == 0.0f);
    CHECK(m && strcmp(wisp_model_meta_text(m), "") == 0 && strcmp(wisp_model_columns(m), "") == 0);
    CHECK(m && wisp_model_meta(m, "source") == NULL);
    /* the model keeps the engine alive; extra references */
    wisp__model_retain(m);
    wisp_model_free(m);
    CHECK(m && wisp_model_weight(m, 0) == 0.0f);
    wisp_model_free(m);
    /* int8 of a table with tiny weights: a positive scale, errors within scale/2 */
    float tiny[3] = { 1e-40f, -3e-41f, 0 };
    CHECK_OK(wisp_model_write(P("tiny.wisp"), tiny, 3, 0.0, WISP_I8, NULL, NULL));
    CHECK_OK(wisp_model_load(eng, P("tiny.wisp"), &m));
    CHECK(m && wisp_model_scale(m) > 0 && fabs((double)wisp_model_weight(m, 0) - 1e-40) <= wisp_model_scale(m) / 2.0);
    wisp_model_free(m);
    /* meta without a final newline, and empty lines, are accepted */
    float one = 0.5f;
    CHECK_OK(wisp_model_write(P("meta.wisp"), &one, 1, 0.0, WISP_F32, "a=1\n\nb=\nc=x y", NULL));
    CHECK_OK(wisp_model_load(eng, P("meta.wisp"), &m));
    CHECK(m && strcmp(wisp_model_meta(m, "a"), "1") == 0 && strcmp(wisp_model_meta(m, "b"), "") == 0 &&
          strcmp(wisp_model_meta(m, "c"), "x y") == 0);
    CHECK(m && strcmp(wisp_model_meta_text(m), "a=1\n\nb=\nc=x y\n") == 0);
    wisp_model_free(m);
    /* NULL handles are harmless */
    wisp_model_free(NULL);
    CHECK(wisp_model_num_features(NULL) == 0 && wisp_model_weight(NULL, 0) == 0.0f
          && wisp_model_meta(NULL, "a") == NULL);
}

/* ---- the writer's refusals and atomicity ------------------------------------ */

static void test_write_errors(void)
{
    float w[4] = { 1, 2, 3, 4 };
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, NAN, WISP_F32, NULL, NULL), WISP_EINVAL, "bias");
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, INFINITY, WISP_F32, NULL, NULL), WISP_EINVAL, "bias");
    w[2] = NAN;
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, WISP_F32, NULL, NULL), WISP_EINVAL, "weight 2 is NaN");
    w[2] = -INFINITY;
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, WISP_I8, NULL, NULL), WISP_EINVAL, "weight 2 is infinite");
    w[2] = 70000;
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, WISP_F16, NULL, NULL), WISP_EINVAL, "fp16 range");
    w[2] = 3;
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, 7, NULL, NULL), WISP_EINVAL, "dtype");
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 0, 0, WISP_F32, NULL, NULL), WISP_EINVAL, "num_features 0");
    CHECK_FAILS(wisp_model_write(P("e.wisp"), NULL, 4, 0, WISP_F32, NULL, NULL), WISP_EINVAL, "NULL");
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, WISP_F32, "novalue\n", NULL), WISP_EINVAL, "meta line 1");
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, WISP_F32, "a=1\n=2\n", NULL), WISP_EINVAL,
                "meta line 2: empty key");
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, WISP_F32, "a b=1\n", NULL), WISP_EINVAL, "key");
    CHECK_FAILS(wisp_model_write(P("e.wisp"), w, 4, 0, WISP_F32, "a=1\nb=2\na=3\n", NULL), WISP_EINVAL,
                "'a' appears more than once");
    CHECK(access(P("e.wisp"), F_OK) != 0);
    CHECK_FAILS(wisp_model_write(P("no/such/dir/e.wisp"), w, 4, 0, WISP_F32, NULL, NULL), WISP_EIO,
                "no/such/dir/e.wisp");
    /* the target is a directory: refused before anything is written, no temporary file */
    mkdir(P("adir"), 0755);
    CHECK_FAILS(wisp_model_write(P("adir"), w, 4, 0, WISP_F32, NULL, NULL), WISP_EINVAL, "is a directory");
    CHECK(leftovers(tmpdir, "adir") == 0);

    /* a write that fails half way (file size limit) leaves the old file and no temporary */
    CHECK_OK(wisp_model_write(P("keep.wisp"), w, 4, 0.25, WISP_F32, "v=old\n", NULL));
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 2000;
    signal(SIGXFSZ, SIG_IGN);
    float *big = calloc(4000, sizeof(float));
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        int rc = wisp_model_write(P("keep.wisp"), big, 4000, 0, WISP_F32, "v=new\n", NULL);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK_MSG(rc == WISP_EIO && strstr(wisp_errmsg(), "keep.wisp"), "rc %d: %s", rc, wisp_errmsg());
        CHECK(leftovers(tmpdir, "keep.wisp") == 0);
        wisp_model *m = NULL;
        CHECK_OK(wisp_model_load(eng, P("keep.wisp"), &m));
        CHECK(m && strcmp(wisp_model_meta(m, "v"), "old") == 0 && wisp_model_num_features(m) == 4);
        wisp_model_free(m);
    } else {
        printf("note: setrlimit(RLIMIT_FSIZE) failed, half-way write failure not tested\n");
    }
    free(big);
    /* replacing a model that is loaded: the loaded one keeps its mapping */
    wisp_model *m1 = NULL, *m2 = NULL;
    CHECK_OK(wisp_model_load(eng, P("keep.wisp"), &m1));
    float w2[2] = { 9, 8 };
    CHECK_OK(wisp_model_write(P("keep.wisp"), w2, 2, 0, WISP_F16, "v=new\n", NULL));
    CHECK_OK(wisp_model_load(eng, P("keep.wisp"), &m2));
    CHECK(m1 && wisp_model_num_features(m1) == 4 && wisp_model_weight(m1, 3) == 4.0f);
    CHECK(m2 && wisp_model_num_features(m2) == 2 && wisp_model_weight(m2, 1) == 8.0f);
    CHECK(leftovers(tmpdir, "keep.wisp") == 0);
    wisp_model_free(m1);
    wisp_model_free(m2);
}

/* where a write goes: a symlink's target (the link kept), a character device or
 * FIFO directly (the node kept), /dev/full fails */
static void test_write_targets(void)
{
    float w[4] = { 1, -2, 3, 0.5f };
    struct stat sb;
    /* a symlink (relative, through a second link) to an existing model, and a dangling one */
    CHECK_OK(wisp_model_write(P("target.wisp"), w, 4, 0, WISP_F32, "v=1\n", NULL));
    CHECK(symlink("target.wisp", P("link1.wisp")) == 0);
    CHECK(symlink(P("link1.wisp"), P("link2.wisp")) == 0);
    CHECK_OK(wisp_model_write(P("link2.wisp"), w, 2, 0, WISP_F16, "v=2\n", NULL));
    CHECK(lstat(P("link2.wisp"), &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(lstat(P("link1.wisp"), &sb) == 0 && S_ISLNK(sb.st_mode));
    wisp_model *m = NULL;
    CHECK_OK(wisp_model_load(eng, P("target.wisp"), &m));
    CHECK(m && wisp_model_num_features(m) == 2 && strcmp(wisp_model_meta(m, "v"), "2") == 0);
    wisp_model_free(m);
    CHECK(leftovers(tmpdir, "target.wisp") == 0 && leftovers(tmpdir, "link") == 0);
    CHECK(symlink("newtarget.wisp", P("dangling.wisp")) == 0);
    CHECK_OK(wisp_model_write(P("dangling.wisp"), w, 4, 0, WISP_I8, NULL, NULL));
    CHECK(lstat(P("dangling.wisp"), &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(stat(P("newtarget.wisp"), &sb) == 0 && S_ISREG(sb.st_mode));
    /* a link loop */
    CHECK(symlink("loop2.wisp", P("loop1.wisp")) == 0 && symlink("loop1.wisp", P("loop2.wisp")) == 0);
    CHECK_FAILS(wisp_model_write(P("loop1.wisp"), w, 4, 0, WISP_F32, NULL, NULL), WISP_EIO, "symbolic link");
    /* character devices: written in place, the node stays a device. Our own node where
     * we may make one (as root, a writer that renamed over its output would replace the
     * system's /dev/null), else /dev/null */
    const char *null = mknod(P("null"), S_IFCHR | 0666, makedev(1, 3)) == 0 ? P("null") : "/dev/null";
    CHECK_OK(wisp_model_write(null, w, 4, 0, WISP_F32, NULL, NULL));
    CHECK(stat(null, &sb) == 0 && S_ISCHR(sb.st_mode));
    const char *full = mknod(P("full"), S_IFCHR | 0666, makedev(1, 7)) == 0 ? P("full") : "/dev/full";
    if (stat(full, &sb) == 0 && S_ISCHR(sb.st_mode))
        CHECK_FAILS(wisp_model_write(full, w, 4, 0, WISP_F32, NULL, NULL), WISP_EIO, "No space left");
    CHECK(stat(full, &sb) != 0 || S_ISCHR(sb.st_mode));
    /* a FIFO: a reader gets exactly the file a regular write makes */
    CHECK(mkfifo(P("pipe.wisp"), 0644) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *in = fopen(P("pipe.wisp"), "rb"), *out = fopen(P("frompipe.wisp"), "wb");
        char buf[4096];
        size_t k;
        while (in && out && (k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, out);
        _exit(in && out && fclose(out) == 0 ? 0 : 1);
    }
    CHECK_OK(wisp_model_write(P("pipe.wisp"), w, 4, 0.5, WISP_F16, "via=fifo\n", "cols"));
    int status = 1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(lstat(P("pipe.wisp"), &sb) == 0 && S_ISFIFO(sb.st_mode));
    CHECK_OK(wisp_model_write(P("regular.wisp"), w, 4, 0.5, WISP_F16, "via=fifo\n", "cols"));
    size_t la = 0, lb = 0;
    unsigned char *a = read_all(P("frompipe.wisp"), &la), *b = read_all(P("regular.wisp"), &lb);
    CHECK(a && b && la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
    CHECK(leftovers(tmpdir, "pipe.wisp") == 0);
}

/* ---- conversion ----------------------------------------------------------------- */

static void test_convert(void)
{
    uint64_t n = 3000;
    float *w = random_weights(n);
    CHECK_OK(wisp_model_write(P("c32.wisp"), w, n, -1.5, WISP_F32, "source=test\nconverted_from=x\nk=v", "cols\n"));
    wisp_model *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_OK(wisp_model_load(eng, P("c32.wisp"), &a));
    CHECK_OK(wisp_model_convert(a, P("c16.wisp"), WISP_F16));
    CHECK_OK(wisp_model_load(eng, P("c16.wisp"), &b));
    CHECK_OK(wisp_model_convert(b, P("c8.wisp"), WISP_I8));
    CHECK_OK(wisp_model_load(eng, P("c8.wisp"), &c));
    CHECK_OK(wisp_model_convert(c, P("c32b.wisp"), WISP_F32));
    CHECK_OK(wisp_model_load(eng, P("c32b.wisp"), &d));
    if (a && b && c && d) {
        CHECK(wisp_model_dtype(b) == WISP_F16 && wisp_model_dtype(c) == WISP_I8 && wisp_model_dtype(d) == WISP_F32);
        CHECK(wisp_model_bias(b) == -1.5 && wisp_model_bias(c) == -1.5 && wisp_model_bias(d) == -1.5);
        CHECK(strcmp(wisp_model_meta(b, "converted_from"), "f32") == 0);
        CHECK(strcmp(wisp_model_meta(c, "converted_from"), "f16") == 0);
        CHECK(strcmp(wisp_model_meta(d, "converted_from"), "i8") == 0);
        CHECK(strcmp(wisp_model_meta_text(d), "source=test\nk=v\nconverted_from=i8\n") == 0);
        CHECK(strcmp(wisp_model_columns(d), "cols\n") == 0);
        int bad = 0;
        for (uint64_t i = 0; i < n; i++) {
            float h = wisp__half_to_float(wisp__float_to_half(w[i]));
            if (wisp_model_weight(b, i) != h) bad++;
            if (fabs((double)wisp_model_weight(c, i) - h) > wisp_model_scale(c) / 2 + fabs(h) * ldexp(1, -23)) bad++;
            if (wisp_model_weight(d, i) != wisp_model_weight(c, i)) bad++;
        }
        CHECK_MSG(bad == 0, "%d converted weights off", bad);
    }
    /* convert onto the file that is loaded */
    CHECK_OK(wisp_model_convert(a, P("c32.wisp"), WISP_I8));
    CHECK(a && wisp_model_dtype(a) == WISP_F32 && wisp_model_weight(a, n - 1) == -3.25f);
    CHECK_FAILS(wisp_model_convert(a, P("cx.wisp"), 9), WISP_EINVAL, "dtype");
    CHECK_FAILS(wisp_model_convert(NULL, P("cx.wisp"), WISP_F32), WISP_EINVAL, "NULL");
    wisp_model_free(a); wisp_model_free(b); wisp_model_free(c); wisp_model_free(d);
    free(w);
}

/* ---- hostile files --------------------------------------------------------------- */

static unsigned char *small_model(int dtype, size_t *len, float *w, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) w[i] = (float)((double)(i % 7) - 2.5) * 0.75f;
    CHECK_OK(wisp_model_write(P("small.wisp"), w, n, 0.125, dtype, "source=test\nk=v\n", "col a\ncol b\n"));
    return read_all(P("small.wisp"), len);
}

static void test_hostile(void)
{
    size_t len;
    float w[37];
    unsigned char *good = small_model(WISP_F32, &len, w, 37);
    if (!good) { CHECK(0); return; }
    unsigned char *f = malloc(len + 128);
    int iw = find_entry(good, "weights"), im = find_entry(good, "meta"), ic = find_entry(good, "columns");
    CHECK(iw >= 0 && im >= 0 && ic >= 0);
    CHECK(get64(good + 16) == len && len % 4096 == 37 * 4 && get64(entry(good, iw) + 24) % 4096 == 0);
    CHECK(load_bytes(good, len, "h.wisp") == WISP_OK);
#define RESET() memcpy(f, good, len)

    RESET(); f[3] = 'X';
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "bad magic");
    CHECK(strstr(wisp_errmsg(), "h.wisp") != NULL);
    RESET(); put32(f + 8, 2); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EVERSION, "version 2, this build of wisp reads version 1");
    RESET(); put32(f + 8, 0);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EVERSION, "version 0");
    /* extra bytes and a wrong file_size */
    RESET(); memset(f + len, 0, 64);
    CHECK_FAILS(load_bytes(f, len + 64, "h.wisp"), WISP_EFORMAT, "extra bytes");
    /* the header checksum: a flipped bias */
    RESET(); f[41] ^= 4;
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_ECHECKSUM, "header");
    /* a section checksum */
    RESET(); f[get64(entry(f, iw) + 24) + 5] ^= 1;
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_ECHECKSUM, "checksum mismatch in section 'weights'");
    RESET(); f[get64(entry(f, ic) + 24)] ^= 1;
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_ECHECKSUM, "section 'columns'");
    /* section counts and the table */
    RESET(); put32(f + 12, 0); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section count 0");
    RESET(); put32(f + 12, 100000); put64(f + 48, 0);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section count 100000");
    RESET(); put64(f + 24, UINT64_MAX - 63); put64(f + 48, 0);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section table extends past the end");
    RESET(); put64(f + 24, 32); put64(f + 48, 0);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section table offset 32");
    /* header fields */
    RESET(); put64(f + 32, 0); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "num_features 0");
    RESET(); put64(f + 32, WISP_MAX_FEATURES + 1); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_ELIMIT, "exceeds the limit");
    RESET(); put64(f + 32, 36); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "holds 37 weights but the header says num_features 36");
    RESET(); { double nan = NAN; memcpy(f + 40, &nan, 8); } fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "bias is not finite");
    /* offsets past the end */
    RESET(); put64(entry(f, iw) + 24, len - 64 - (len % 64)); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT,
                "section 'weights' extends past the end of the file (offset");
    RESET(); put64(entry(f, iw) + 24, UINT64_MAX - 63); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section 'weights' extends past the end");
    RESET(); put64(entry(f, im) + 32, UINT64_MAX); put64(entry(f, im) + 40, UINT64_MAX); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section 'meta' extends past the end");
    /* counts whose byte size overflows 64 bits (count * 4 wraps to the real size) */
    RESET(); put64(entry(f, iw) + 40, (1ull << 62) + 37); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "overflows");
    RESET(); put64(entry(f, iw) + 40, 38); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "need 152 bytes, the section has 148");
    RESET(); put64(entry(f, im) + 40, 3); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section 'meta': count 3");
    /* alignment and overlaps */
    RESET(); put64(entry(f, ic) + 24, get64(entry(f, ic) + 24) + 8); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "not 64-byte aligned");
    RESET(); put64(entry(f, ic) + 24, get64(entry(f, im) + 24)); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "overlap");
    RESET(); put64(entry(f, im) + 24, 64); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "overlaps the section table");
    RESET(); put64(entry(f, im) + 24, 0); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "overlaps the header");
    /* names */
    RESET(); memcpy(entry(f, ic), "weights", 8); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "'weights' is listed twice");
    RESET(); memcpy(entry(f, iw), "weightz", 8); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "missing section 'weights'");
    RESET(); memcpy(entry(f, im), "mota", 5); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "missing section 'meta'");
    RESET(); memset(entry(f, ic), 'x', 16); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "not NUL-terminated");
    RESET(); memset(entry(f, ic), 0, 16); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "empty name");
    RESET(); memcpy(entry(f, ic), "a\tb", 4); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "non-printable");
    /* an unknown section is ignored: the same weights, no columns */
    RESET(); memcpy(entry(f, ic), "future\0\0", 8); fix_header_sum(f);
    write_all(P("h.wisp"), f, len);
    {
        wisp_model *m = NULL;
        CHECK_OK(wisp_model_load(eng, P("h.wisp"), &m));
        CHECK(m && strcmp(wisp_model_columns(m), "") == 0 && wisp_model_weight(m, 36) == w[36]);
        wisp_model_free(m);
    }
    /* dtypes and scales */
    RESET(); put32(entry(f, iw) + 16, 5); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "unknown dtype 5");
    RESET(); put32(entry(f, im) + 16, 0); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section 'meta' has dtype 0");
    RESET(); { float s = 2; memcpy(entry(f, iw) + 20, &s, 4); } fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "scale 2 on f32 weights");
    /* f32 weights as f16: the byte count no longer matches */
    RESET(); put32(entry(f, iw) + 16, 1); fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "need 74 bytes");
    /* a NaN weight with a correct checksum */
    RESET(); { float nan = NAN; memcpy(f + get64(entry(f, iw) + 24) + 4 * 9, &nan, 4); } fix_section_sum(f, iw);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "weight 9 is not finite");
    /* meta text with a NUL, a line without '=', a duplicate key */
    size_t mo = get64(entry(good, im) + 24);
    RESET(); f[mo + 3] = 0; fix_section_sum(f, im);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "meta line 1: contains a NUL byte");
    RESET(); f[mo + 12] = '_'; fix_section_sum(f, im);   /* "source=test\nk=v\n" -> "source=test\n_=v" ... */
    CHECK_MSG(load_bytes(f, len, "h.wisp") == WISP_OK, "%s", wisp_errmsg());
    RESET(); f[mo + 13] = '-'; fix_section_sum(f, im);   /* "k-v" */
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "meta line 2: expected key=value");
    RESET(); memcpy(f + mo, "k=test\nk=v\n", 11); memcpy(f + mo + 11, "\n\n\n\n\n", 5); fix_section_sum(f, im);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "meta key 'k' appears more than once");
    RESET(); f[get64(entry(good, ic) + 24) + 2] = 0; fix_section_sum(f, ic);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "section 'columns' contains a NUL byte");
    /* int8 scale */
    free(good);
    good = small_model(WISP_I8, &len, w, 37);
    iw = find_entry(good, "weights");
    RESET(); { float s = 0; memcpy(entry(f, iw) + 20, &s, 4); } fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "int8 scale 0");
    RESET(); { float s = -INFINITY; memcpy(entry(f, iw) + 20, &s, 4); } fix_header_sum(f);
    CHECK_FAILS(load_bytes(f, len, "h.wisp"), WISP_EFORMAT, "int8 scale");
    free(good);
    free(f);
#undef RESET

    /* not model files at all */
    wisp_model *m = (wisp_model *)1;
    CHECK_FAILS(wisp_model_load(eng, P("missing.wisp"), &m), WISP_EIO, "missing.wisp: cannot open: No such file");
    CHECK(m == NULL);
    write_all(P("empty.wisp"), "", 0);
    CHECK_FAILS(wisp_model_load(eng, P("empty.wisp"), &m), WISP_EFORMAT, "empty.wisp: empty file");
    CHECK_FAILS(wisp_model_load(eng, tmpdir, &m), WISP_EIO, "is a directory");
    if (mkfifo(P("fifo"), 0600) == 0)
        CHECK_FAILS(wisp_model_load(eng, P("fifo"), &m), WISP_EIO, "not a regular file");
    write_text(P("text.wisp"), "solver_type L2R_LR\nnr_class 2\n");
    CHECK_FAILS(wisp_model_load(eng, P("text.wisp"), &m), WISP_EFORMAT, "bad magic");
    CHECK_FAILS(wisp_model_load(NULL, P("x"), &m), WISP_EINVAL, "eng");
    CHECK_FAILS(wisp_model_load(eng, NULL, &m), WISP_EINVAL, "path");
    CHECK_FAILS(wisp_model_load(eng, P("x"), NULL), WISP_EINVAL, "out");
    CHECK_FAILS(wisp_model_load_ex(eng, P("x"), 0x80, &m), WISP_EINVAL, "flags");
}

/* every prefix of a small file fails cleanly; every flipped byte is caught or harmless */
static void test_truncate_and_flip(void)
{
    for (int dt = 0; dt < 3; dt++) {
        size_t len;
        float w[37];
        unsigned char *good = small_model(dt, &len, w, 37);
        if (!good) { CHECK(0); continue; }
        wisp_model *ref = NULL;
        CHECK_OK(wisp_model_load(eng, P("small.wisp"), &ref));
        if (!ref) { free(good); continue; }
        int bad_trunc = 0, undetected = 0, harmless = 0, caught = 0;
        /* shrink one file in place (cheap: rewriting a file from zero length makes
         * ext4 flush it on close) */
        write_all(P("t.wisp"), good, len);
        int fd = open(P("t.wisp"), O_RDWR);
        for (size_t n = len; n-- > 0;) {
            wisp_model *m = (wisp_model *)1;
            int rc = ftruncate(fd, (off_t)n) == 0 ? wisp_model_load(eng, P("t.wisp"), &m) : -100;
            if (rc != WISP_EFORMAT || m != NULL) {
                if (bad_trunc++ < 3) fprintf(stderr, "prefix %zu: %d %s\n", n, rc, wisp_errmsg());
                if (rc == WISP_OK) wisp_model_free(m);
            }
        }
        close(fd);
        CHECK_MSG(bad_trunc == 0, "%s: %d truncated files not refused with WISP_EFORMAT", wisp_dtype_name(dt),
                  bad_trunc);
        write_all(P("f.wisp"), good, len);
        fd = open(P("f.wisp"), O_RDWR);
        for (size_t i = 0; i < len; i++) {
            unsigned char flipped = good[i] ^ (unsigned char)(1u << (i % 8));
            wisp_model *m = NULL;
            int rc = pwrite(fd, &flipped, 1, (off_t)i) == 1 ? wisp_model_load(eng, P("f.wisp"), &m) : -100;
            if (pwrite(fd, &good[i], 1, (off_t)i) != 1) CHECK(0);
            if (rc != WISP_OK) { caught++; continue; }
            bool same = wisp_model_num_features(m) == 37 && wisp_model_bias(m) == wisp_model_bias(ref) &&
                        wisp_model_dtype(m) == dt && wisp_model_scale(m) == wisp_model_scale(ref) &&
                        strcmp(wisp_model_meta_text(m), wisp_model_meta_text(ref)) == 0 &&
                        strcmp(wisp_model_columns(m), wisp_model_columns(ref)) == 0;
            for (uint64_t k = 0; k < 37 && same; k++)
                same = memcmp(&(float){ wisp_model_weight(m, k) }, &(float){ wisp_model_weight(ref, k) }, 4) == 0;
            if (same) harmless++;
            else if (undetected++ < 3) fprintf(stderr, "%s: flip at byte %zu changed the model unnoticed\n",
                                               wisp_dtype_name(dt), i);
            wisp_model_free(m);
        }
        CHECK_MSG(undetected == 0, "%s: %d flips undetected", wisp_dtype_name(dt), undetected);
        printf("%s: %zu-byte file: %zu prefixes refused, flips: %d caught, %d in gaps (same model), %d undetected\n",
               wisp_dtype_name(dt), len, len, caught, harmless, undetected);
        /* every byte of the header, table and sections is covered: only the gaps are harmless */
        CHECK_MSG(caught >= 256 + 16 + 12 + (dt == 0 ? 148 : dt == 1 ? 74 : 37), "%s: only %d flips caught",
                  wisp_dtype_name(dt), caught);
        close(fd);
        free(good);
        wisp_model_free(ref);
    }
}

/* every allocation failure is reported as WISP_ENOMEM, nothing crashes */
static void test_alloc_faults(void)
{
    float w[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    CHECK_OK(wisp_model_write(P("af.wisp"), w, 10, 1, WISP_F16, "a=b\nc=d\n", "cols"));
    write_text(P("af.txt"), "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias 1\nw\n0.5\n-1\n2\n");
    int bad = 0;
    for (int what = 0; what < 4; what++) {
        for (uint64_t k = 1; k < 100; k++) {
            wisp_model *m = NULL, *src = NULL;
            if (what == 3) { CHECK_OK(wisp_model_load(eng, P("af.wisp"), &src)); }
            wisp_fault_alloc_after(k);
            int rc = what == 0 ? wisp_model_load(eng, P("af.wisp"), &m)
                   : what == 1 ? wisp_model_write(P("af2.wisp"), w, 10, 1, WISP_I8, "a=b\nc=d\n", "cols")
                   : what == 2 ? wisp_import_liblinear(P("af.txt"), P("af3.wisp"), WISP_F32)
                   : wisp_model_convert(src, P("af4.wisp"), WISP_F32);
            wisp_fault_alloc_after(0);
            wisp_model_free(m);
            wisp_model_free(src);
            if (rc == WISP_OK) break;
            if (rc != WISP_ENOMEM) {
                if (bad++ < 3)
                    fprintf(stderr, "fault %d/%llu: %d %s\n", what, (unsigned long long)k, rc, wisp_errmsg());
            }
        }
    }
    CHECK_MSG(bad == 0, "%d allocation failures not reported as WISP_ENOMEM", bad);
    CHECK(leftovers(tmpdir, "af") == 0);
}

/* ---- LIBLINEAR import ----------------------------------------------------------- */

static void test_liblinear_handmade(void)
{
    wisp_model *m = NULL;
    /* with a bias feature (bias 2): model bias = w_last * 2 */
    write_text(P("ll_bias.txt"),
               "solver_type L2R_LR\nnr_class 2\nlabel -1 1\nnr_feature 3\nbias 2\nw\n"
               "0.5 \n-0.25 \n1.0000000000000002 \n-0.75 \n");
    CHECK_OK(wisp_import_liblinear(P("ll_bias.txt"), P("ll_bias.wisp"), WISP_F32));
    CHECK_OK(wisp_model_load(eng, P("ll_bias.wisp"), &m));
    if (m) {
        CHECK(wisp_model_num_features(m) == 4);
        CHECK(wisp_model_weight(m, 0) == 0.0f && wisp_model_weight(m, 1) == 0.5f &&
              wisp_model_weight(m, 2) == -0.25f && wisp_model_weight(m, 3) == 1.0f);
        CHECK(wisp_model_bias(m) == -1.5);
        CHECK(strcmp(wisp_model_meta(m, "source"), "liblinear") == 0);
        CHECK(strcmp(wisp_model_meta(m, "solver"), "L2R_LR") == 0);
        CHECK(strcmp(wisp_model_meta(m, "labels"), "-1 1") == 0);
        CHECK(strcmp(wisp_model_meta(m, "score_label"), "-1") == 0);
        CHECK(strcmp(wisp_model_meta(m, "liblinear_bias"), "2") == 0);
    }
    wisp_model_free(m);
    /* without bias (-1), keywords in another order, CRLF line ends, a rho line, trailing blank lines */
    write_text(P("ll_nobias.txt"),
               "solver_type L1R_LR\r\nnr_class 2\r\nnr_feature 2\r\nlabel 1 0\r\nbias -1\r\nrho 0\r\nw\r\n"
               "0\r\n3.5e-3\r\n\r\n\n");
    CHECK_OK(wisp_import_liblinear(P("ll_nobias.txt"), P("ll_nobias.wisp"), WISP_F16));
    CHECK_OK(wisp_model_load(eng, P("ll_nobias.wisp"), &m));
    if (m) {
        CHECK(wisp_model_num_features(m) == 3 && wisp_model_bias(m) == 0.0);
        CHECK(wisp_model_dtype(m) == WISP_F16);
        CHECK(wisp_model_weight(m, 1) == 0.0f
              && wisp_model_weight(m, 2) == wisp__half_to_float(wisp__float_to_half(3.5e-3f)));
        CHECK(strcmp(wisp_model_meta(m, "solver"), "L1R_LR") == 0 && strcmp(wisp_model_meta(m, "labels"), "1 0") == 0);
    }
    wisp_model_free(m);
    /* bias 0: a bias feature of value 0 (its weight line is still there) */
    write_text(P("ll_b0.txt"), "solver_type L2R_LR_DUAL\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias 0\nw\n2\n7\n");
    CHECK_OK(wisp_import_liblinear(P("ll_b0.txt"), P("ll_b0.wisp"), WISP_F32));
    CHECK_OK(wisp_model_load(eng, P("ll_b0.wisp"), &m));
    CHECK(m && wisp_model_bias(m) == 0.0 && wisp_model_weight(m, 1) == 2.0f && wisp_model_num_features(m) == 2);
    wisp_model_free(m);

    /* malformed files: WISP_EPARSE naming file:line */
    static const struct { const char *text, *needle; int code; } bad[] = {
        { "solver_type L2R_L2LOSS_SVC_DUAL\nnr_class 2\n",
         "ll_bad.txt:1: solver L2R_L2LOSS_SVC_DUAL is not logistic regression", WISP_EPARSE },
        { "nr_class 2\nsolver_type MCSVM_CS\n", "ll_bad.txt:2: solver MCSVM_CS", WISP_EPARSE },
        { "solver_type FANCY\n", "ll_bad.txt:1: unknown solver 'FANCY'", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 3\n", "ll_bad.txt:2: nr_class 3", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class two\n", "ll_bad.txt:2: nr_class: 'two' is not an integer", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1\n", "ll_bad.txt:3: the label line has 1 label", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 2 3\n", "ll_bad.txt:3: more than 2 labels", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 x\n", "ll_bad.txt:3: label: 'x'", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature -4\n", "ll_bad.txt:4: nr_feature -4 is negative",
         WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 99999999999\n",
         "ll_bad.txt:4: nr_feature 99999999999 exceeds", WISP_ELIMIT },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias nan\n",
         "ll_bad.txt:5: bias: 'nan' is not a finite number", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias 1 2\n",
         "ll_bad.txt:5: 'bias' takes one value", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nweights\n",
         "ll_bad.txt:6: unknown keyword 'weights'", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\n",
         "ll_bad.txt:6: the file ends before the 'w' line", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nbias -1\nw\n1\n",
         "ll_bad.txt:5: 'w' comes before the 'nr_feature' line", WISP_EPARSE },
        { "solver_type L2R_LR\nsolver_type L2R_LR\n", "ll_bad.txt:2: a second 'solver_type' line", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 3\nbias -1\nw\n1\n2\n",
         "ll_bad.txt:9: the file ends after 2 of 3 weights", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 3\nbias 1\nw\n1\n2\n3\n",
         "ll_bad.txt:10: the file ends after 3 of 4 weights", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 3\nbias -1\nw\n1\n2x\n3\n",
         "ll_bad.txt:8: weight: '2x' is not a number", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 3\nbias -1\nw\n1\n\n3\n",
         "ll_bad.txt:8: expected weight 2 of 3, found an empty line", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n1 2\n3 4\n",
         "ll_bad.txt:7: expected one weight per line", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n1\ninf\n",
         "ll_bad.txt:8: weight: 'inf' is not a finite", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 2\nbias -1\nw\n1\n2\n3\n",
         "ll_bad.txt:9: unexpected text after the last of 2 weights", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n1e39\n",
         "ll_bad.txt:7: weight 9.9999999999999994e+38 does not fit in a 32-bit float", WISP_EPARSE },
        { "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 1000000\nbias -1\nw\n1\n",
         "expected 1000000 weight lines", WISP_EPARSE },
        { "", "ll_bad.txt:1: empty file", WISP_EPARSE },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(P("ll_bad.txt"), bad[i].text);
        unlink(P("ll_bad.wisp"));
        int rc = wisp_import_liblinear(P("ll_bad.txt"), P("ll_bad.wisp"), WISP_F32);
        CHECK_MSG(rc == bad[i].code && strstr(wisp_errmsg(), bad[i].needle), "case %zu: %d '%s', wanted '%s'",
                  i, rc, wisp_errmsg(), bad[i].needle);
        CHECK(access(P("ll_bad.wisp"), F_OK) != 0);
    }
    {   /* a NUL byte in the middle of a line */
        const char t[] = "solver_type L2R_LR\nnr_\0class 2\n";
        write_all(P("ll_bad.txt"), t, sizeof t - 1);
        CHECK_FAILS(wisp_import_liblinear(P("ll_bad.txt"), P("ll_bad.wisp"), WISP_F32), WISP_EPARSE,
                    "ll_bad.txt:2: contains a NUL byte");
    }
    CHECK_FAILS(wisp_import_liblinear(P("ll_missing.txt"), P("x.wisp"), WISP_F32), WISP_EIO,
                "ll_missing.txt: cannot open");
    CHECK_FAILS(wisp_import_liblinear(tmpdir, P("x.wisp"), WISP_F32), WISP_EIO, "is a directory");
    CHECK_FAILS(wisp_import_liblinear(P("ll_bias.txt"), P("x.wisp"), 5), WISP_EINVAL, "dtype");
    CHECK_FAILS(wisp_import_liblinear(P("ll_bias.txt"), P("no/dir/x.wisp"), WISP_F32), WISP_EIO, "no/dir/x.wisp");
}

static int have_liblinear(void)
{
    return system("command -v liblinear-train >/dev/null 2>&1 && command -v liblinear-predict >/dev/null 2>&1") == 0;
}

/* libsvm rows: ids ascending in 1..maxid, values; the first row's label is -1 */
static void gen_libsvm(const char *path, int rows, int maxid, int cover, const double *truth)
{
    FILE *f = fopen(path, "w");
    for (int r = 0; r < rows; r++) {
        int ids[16], k = 0;
        for (int id = 1; id <= maxid && k < 16; id++)
            if (rnd() % (unsigned)maxid < 6 || (r == 0 && id == cover)) ids[k++] = id;
        double vals[16], dot = 0.3;
        for (int i = 0; i < k; i++) {
            vals[i] = (rnd() & 3) == 0 ? 1.0 : (double)(int)((unif() * 4 - 1) * 1000) / 1000;
            if (ids[i] <= 60) dot += truth[ids[i]] * vals[i];
        }
        int y = r == 0 ? -1 : (dot + (unif() - 0.5) * 1.5 > 0 ? 1 : -1);
        fprintf(f, "%d", y);
        for (int i = 0; i < k; i++) fprintf(f, " %d:%g", ids[i], vals[i]);
        fputc('\n', f);
    }
    fclose(f);
}

static void test_liblinear_parity(void)
{
    if (!have_liblinear()) {
        printf("note: liblinear-train / liblinear-predict not on PATH: LIBLINEAR parity NOT tested (skipped)\n");
        return;
    }
    double truth[61];
    for (int i = 0; i <= 60; i++) truth[i] = (unif() - 0.5) * 3;
    gen_libsvm(P("ll_train.svm"), 500, 60, 60, truth);
    gen_libsvm(P("ll_test.svm"), 300, 66, 0, truth);     /* ids up to 66: beyond nr_feature, dropped by both */
    static const struct { const char *solver, *opts; } runs[] = {
        { "0", "-B 1" }, { "0", "" }, { "6", "" }, { "6", "-B 1" }, { "7", "-B 2.5" }, { "7", "-c 0.1" },
    };
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        char cmd[2048], model[256], pred[256], wm[256];
        snprintf(model, sizeof model, "%s", P("ll_model.txt"));
        snprintf(pred, sizeof pred, "%s", P("ll_pred.txt"));
        snprintf(wm, sizeof wm, "%s", P("ll_model.wisp"));
        snprintf(cmd, sizeof cmd, "liblinear-train -q -s %s %s %s %s >/dev/null 2>&1 && "
                 "liblinear-predict -b 1 %s %s %s >/dev/null 2>&1", runs[k].solver, runs[k].opts,
                 P("ll_train.svm"), model, P("ll_test.svm"), model, pred);
        int sys = system(cmd);
        CHECK_MSG(sys == 0, "%s failed", cmd);
        if (sys != 0) continue;
        CHECK_OK(wisp_import_liblinear(model, wm, WISP_F32));
        wisp_model *m = NULL;
        CHECK_OK(wisp_model_load(eng, wm, &m));
        if (!m) continue;
        FILE *pf = fopen(pred, "r"), *tf = fopen(P("ll_test.svm"), "r");
        char line[4096], lab[2][32];
        int nl = 0;
        if (fgets(line, sizeof line, pf)) nl = sscanf(line, "labels %31s %31s", lab[0], lab[1]);
        char want_labels[80];
        snprintf(want_labels, sizeof want_labels, "%s %s", lab[0], lab[1]);
        CHECK_MSG(nl == 2 && strcmp(wisp_model_meta(m, "labels"), want_labels) == 0, "labels '%s' vs '%s'",
                  wisp_model_meta(m, "labels"), want_labels);
        int rows = 0, bad = 0;
        double worst = 0, worst_tol = 0;
        char tline[4096];
        while (fgets(line, sizeof line, pf) && fgets(tline, sizeof tline, tf)) {
            double pl, p0, p1;
            if (sscanf(line, "%lf %lf %lf", &pl, &p0, &p1) != 3) { bad++; continue; }
            /* wisp's score in double from the stored weights */
            double dec = wisp_model_bias(m), mag = fabs(dec);
            char *s = strchr(tline, ' ');
            while (s && *s) {
                char *e;
                unsigned long id = strtoul(s, &e, 10);
                if (e == s || *e != ':') break;
                double v = strtod(e + 1, &s);
                dec += (double)wisp_model_weight(m, id) * v;
                mag += fabs((double)wisp_model_weight(m, id) * v);
            }
            double p = 1.0 / (1.0 + exp(-dec));
            /* tolerance: liblinear prints %g (6 significant digits: at most half a unit in
             * the 6th digit, <= 5e-7 since p < 1), and wisp stores weights as fp32 (each
             * product off by <= 2^-24 relative, so dec by <= mag * 2^-24 and p by a quarter of
             * that, sigmoid' <= 1/4). Both stay within 1e-6 absolute, the target. */
            double tol0 = p0 > 0 ? fmin(5e-7, 0.5 * pow(10, floor(log10(p0)) - 5)) : 5e-7;
            double tol1 = p1 > 0 ? fmin(5e-7, 0.5 * pow(10, floor(log10(p1)) - 5)) : 5e-7;
            double model_err = 0.25 * mag * ldexp(1, -24) * 1.01 + 1e-12;
            double err0 = fabs(p - p0), err1 = fabs((1 - p) - p1), err = fmax(err0, err1);
            double tol = fmax(tol0, tol1) + model_err;
            if (err0 > tol0 + model_err || err1 > tol1 + model_err || err > 1e-6) {
                if (bad++ < 3) fprintf(stderr, "-s %s %s row %d: liblinear %.9g %.9g, wisp %.9g %.9g\n",
                                       runs[k].solver, runs[k].opts, rows, p0, p1, p, 1 - p);
            }
            worst = fmax(worst, err);
            worst_tol = fmax(worst_tol, tol);
            rows++;
        }
        fclose(pf);
        fclose(tf);
        CHECK_MSG(rows == 300 && bad == 0, "-s %s %s: %d of %d rows off (worst %g)", runs[k].solver, runs[k].opts, bad,
                  rows, worst);
        printf("liblinear -s %s %-7s: %d rows, labels '%s', max |p_wisp - p_liblinear| = %.2g (tolerance <= %.2g)\n",
               runs[k].solver, runs[k].opts, rows, want_labels, worst, worst_tol);
        wisp_model_free(m);
    }
}

int main(void)
{
    uint64_t seed = getenv("WISP_SEED") ? strtoull(getenv("WISP_SEED"), NULL, 0)
                                        : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_state = seed ? seed : 1;
    printf("test_model: seed %llu (WISP_SEED=%llu reproduces)\n", (unsigned long long)seed, (unsigned long long)seed);
    snprintf(tmpdir, sizeof tmpdir, "%s/wisp_test_model_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    CHECK_OK(wisp_engine_new(1, &eng));
    if (!eng) return CHECK_DONE("test_model");

    static const struct { const char *name; void (*fn)(void); } parts[] = {
        { "dtypes", test_dtypes }, { "half", test_half }, { "roundtrips", test_roundtrips },
        { "write_errors", test_write_errors }, { "write_targets", test_write_targets }, { "convert", test_convert },
        { "hostile", test_hostile },
        { "truncate_and_flip", test_truncate_and_flip }, { "alloc_faults", test_alloc_faults },
        { "liblinear_handmade", test_liblinear_handmade }, { "liblinear_parity", test_liblinear_parity },
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        uint64_t t0 = wisp__now_ns();
        parts[i].fn();
        printf("  %-20s %7.1f ms\n", parts[i].name, (double)(wisp__now_ns() - t0) / 1e6);
    }

    wisp_engine_free(eng);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return CHECK_DONE("test_model");
}
