/* fuzz_model.c — libFuzzer target: wisp_model_load on hostile .wisp files (raw, or with checksums repaired to reach the deeper checks). */
/*
 * Input: one mode byte, then the file.
 *   bit 0: repair the section checksums and the header checksum before loading
 *          (otherwise nearly every mutation stops at a checksum)
 *   bit 1: set the header's file_size to the real size
 *   bit 2: load with WISP_LOAD_HUGEPAGES
 * The file is written to a memfd and loaded through /proc/self/fd/N.
 * Properties: the load never crashes and either fails with a file-format
 * status and a message naming the path, or gives a model whose accessors are
 * consistent, whose weights are finite, whose scores match a float64
 * reference, and which converts (f16, i8) to a file that loads again.
 */
#include "fuzz_common.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <sys/mman.h>

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_init_common();
    memfd = memfd_create("wisp-fuzz-model", MFD_CLOEXEC);
    if (memfd < 0) { perror("memfd_create"); abort(); }
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    return 0;
}

static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* Recompute what can be recomputed: section sums (in bounds), then the header sum. */
static void repair(unsigned char *f, size_t n, int fix_size)
{
    if (n < 64) return;
    if (fix_size) put64(f + 16, n);
    uint32_t nsec = get32(f + 12);
    uint64_t toff = get64(f + 24);
    if (nsec == 0 || nsec > 256 || toff > n || (uint64_t)nsec * 64 > n - toff) return;
    for (uint32_t i = 0; i < nsec; i++) {
        unsigned char *e = f + toff + 64 * (size_t)i;
        uint64_t off = get64(e + 24), size = get64(e + 32);
        if (off <= n && size <= n - off) put64(e + 48, XXH64(f + off, (size_t)size, 0));
    }
    unsigned char h[64];
    memcpy(h, f, 64);
    memset(h + 48, 0, 8);
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, h, 64);
    XXH64_update(&st, f + toff, (size_t)nsec * 64);
    put64(f + 48, XXH64_digest(&st));
}

static void check_model(wisp_model *m, const char *path)
{
    uint64_t nf = wisp_model_num_features(m);
    int dt = wisp_model_dtype(m);
    FUZZ_REQUIRE(nf >= 1 && nf <= WISP_MAX_FEATURES, "num_features %llu", (unsigned long long)nf);
    FUZZ_REQUIRE(dt == WISP_F32 || dt == WISP_F16 || dt == WISP_I8, "dtype %d", dt);
    FUZZ_REQUIRE(isfinite(wisp_model_bias(m)), "bias");
    float sc = wisp_model_scale(m);
    FUZZ_REQUIRE(isfinite(sc) && sc > 0 && (dt == WISP_I8 || sc == 1.0f), "scale %g", (double)sc);
    FUZZ_REQUIRE(strcmp(wisp_model_path(m), path) == 0, "path");
    for (uint64_t i = 0; i < nf && i < 4096; i++)
        FUZZ_REQUIRE(isfinite(wisp_model_weight(m, i)), "weight %llu", (unsigned long long)i);
    FUZZ_REQUIRE(wisp_model_weight(m, nf) == 0.0f && wisp_model_weight(m, UINT64_MAX) == 0.0f, "weight out of range");
    /* every meta line is key=value and found again by its key */
    const char *meta = wisp_model_meta_text(m), *cols = wisp_model_columns(m);
    FUZZ_REQUIRE(meta && cols, "meta/columns NULL");
    for (const char *ln = meta; *ln;) {
        const char *nlp = strchr(ln, '\n');
        size_t l = nlp ? (size_t)(nlp - ln) : strlen(ln);
        if (l) {
            const char *eq = memchr(ln, '=', l);
            FUZZ_REQUIRE(eq && eq > ln, "meta line without key=value");
            char key[256];
            size_t kl = (size_t)(eq - ln);
            if (kl < sizeof key) {
                memcpy(key, ln, kl);
                key[kl] = '\0';
                const char *v = wisp_model_meta(m, key);
                FUZZ_REQUIRE(v && strlen(v) == l - kl - 1 && memcmp(v, eq + 1, l - kl - 1) == 0, "meta key '%s'", key);
            }
        }
        ln += l + (nlp ? 1 : 0);
    }
    FUZZ_REQUIRE(wisp_model_meta(m, "") == NULL, "empty key found");

    /* score ids at the table's edges, binary and valued */
    wisp_batch *b = NULL;
    FUZZ_REQUIRE(wisp_batch_new(fuzz_eng, &b) == WISP_OK, "batch_new");
    uint64_t ids[6] = { 0, nf - 1, nf, nf / 2, UINT32_MAX, (uint64_t)1 << 40 };
    float vals[6] = { 0.5f, -2.0f, 3.0f, 1.5f, 7.0f, 1.0f };
    FUZZ_REQUIRE(wisp_batch_add_row(b, ids, NULL, 6) == WISP_OK, "add_row");
    FUZZ_REQUIRE(wisp_batch_add_row(b, ids, vals, 6) == WISP_OK, "add_row");
    FUZZ_REQUIRE(wisp_batch_add_row_mixed(b, ids, vals, 2, ids + 2, 4) == WISP_OK, "add_row_mixed");
    FUZZ_REQUIRE(wisp_batch_add_row(b, NULL, NULL, 0) == WISP_OK, "empty row");
    fuzz_check_scores(m, b);
    wisp_batch_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int mode = data[0];
    size_t n = size - 1;
    unsigned char *f = malloc(n ? n : 1);
    memcpy(f, data + 1, n);
    if (mode & 1) repair(f, n, mode & 2);
    else if ((mode & 2) && n >= 24) put64(f + 16, n);

    if (ftruncate(memfd, 0) != 0 || (n && pwrite(memfd, f, n, 0) != (ssize_t)n)) { perror("memfd"); abort(); }
    free(f);

    wisp_model *m = (wisp_model *)1;
    unsigned flags = (mode & 4) && n < (1u << 16) ? WISP_LOAD_HUGEPAGES : 0;
    int st = wisp_model_load_ex(fuzz_eng, memfd_path, flags, &m);
    if (st != WISP_OK) {
        FUZZ_REQUIRE(m == NULL, "failed load left *out set");
        FUZZ_REQUIRE(st == WISP_EFORMAT || st == WISP_ECHECKSUM || st == WISP_EVERSION || st == WISP_ELIMIT,
                     "status %d (%s)", st, wisp_err_name(st));
        FUZZ_REQUIRE(strstr(wisp_errmsg(), memfd_path) != NULL, "the message does not name the file");
        return 0;
    }
    check_model(m, memfd_path);

    /* convert: the writer's output always loads and keeps the table's shape */
    if (wisp_model_num_features(m) <= 65536) {
        static const int to[2] = { WISP_F16, WISP_I8 };
        const char *out = fuzz_path("converted.wisp");
        int dt = to[(mode >> 3) & 1];
        st = wisp_model_convert(m, out, dt);
        if (st == WISP_OK) {
            wisp_model *c = NULL;
            st = wisp_model_load(fuzz_eng, out, &c);
            FUZZ_REQUIRE(st == WISP_OK, "a converted model does not load");
            FUZZ_REQUIRE(wisp_model_num_features(c) == wisp_model_num_features(m) &&
                         wisp_model_bias(c) == wisp_model_bias(m) && wisp_model_dtype(c) == dt &&
                         strcmp(wisp_model_columns(c), wisp_model_columns(m)) == 0 &&
                         wisp_model_meta(c, "converted_from") != NULL, "converted model differs");
            check_model(c, out);
            wisp_model_free(c);
        } else {
            /* fp16 cannot hold |w| >= 65520: the only reason a conversion may fail */
            FUZZ_REQUIRE(st == WISP_EINVAL && dt == WISP_F16 && strstr(wisp_errmsg(), "fp16 range"),
                         "convert -> %d", st);
        }
    }
    wisp_model_free(m);
    return 0;
}
