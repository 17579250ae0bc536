/* vw.c — Vowpal Wabbit: its MurmurHash3 feature hashing, its text input format parsed into batches, and the --readable_model / --invert_hash importer. */
/*
 * Every fact below was checked against the vowpalwabbit 9.11.9 package from
 * PyPI (spec/data/gen/vw_golden.py writes spec/data/vw_golden.json from it; the
 * parity test spec/interop/vw_parity.py trains and predicts with it) and
 * against VW's source (parse_example.cc, hashstring.h, parse_primitives.h,
 * fast_pow10.h, interactions_predict.h).
 *
 * Hashing (VW's "--hash strings", the default):
 *   uniform_hash(s, seed)   MurmurHash3_x86_32 of the bytes, seed truncated to 32 bits
 *   hashstring(s, seed)     bytes <= 0x20 trimmed from both ends; a name made
 *                           only of digits is the integer + seed (wrapping;
 *                           "0123" is 123), anything else uniform_hash(s, seed)
 *   "--hash all"            uniform_hash for everything
 *   namespace hash          hashstring(name, hash_seed); the default namespace
 *                           ("|" followed by a blank) is 0 when hash_seed is 0,
 *                           else uniform_hash("", hash_seed)
 *   feature "name[:value]"  hashstring(name, namespace hash)
 *   feature "name:string"   hashstring(string, hashstring(name, ns hash)), value 1
 *   feature ":value"        namespace hash + k for the k-th such feature of
 *                           the namespace (VW's anonymous features)
 *   constant                11650396 (VW's `constant`), value 1, unless --noconstant
 *   quadratic a,b           ((16777619 * h1) ^ h2) for every feature h1 of the
 *                           namespaces whose name starts with byte a and h2 of
 *                           those starting with b; value v1 * v2 (float). For
 *                           a == b, only pairs (i, j >= i) in line order (self
 *                           pairs included). Interactions equal up to order
 *                           ("ab" after "ba") are dropped, the first kept,
 *                           unless --leave_duplicate_interactions.
 *   index                   hash & (2^bits - 1): the weight's index as VW's
 *                           readable model prints it (the stride of VW's
 *                           in-memory table is not part of it).
 * Only the low 32 bits of any VW hash matter once masked (bits <= 31).
 *
 * Values: a feature's value is its ":value" times the namespace's
 * "|ns:weight" (float products). Values are converted exactly as VW's
 * parseFloat does: its fast path (sign '-', digits, '.', up to 35 decimals,
 * e/E with an optional '-', accumulated in float, times a float table of
 * powers of ten) when that path consumes the token and the token ends at a
 * blank or the line end, else strtof (C locale). Features whose value is 0
 * are dropped (as VW does); a value of exactly 1 is a binary feature.
 *
 * Lines (one example each; CRLF accepted; a UTF-8 BOM at a line's start skipped):
 *   [label section] ( '|' namespace features... )*
 * The label section is what precedes the first '|' (after its first tab,
 * as VW cuts it): words split by spaces; the last word is a tag when it
 * starts with '\'' or touches the '|'. Up to three words remain: label,
 * importance weight, initial prediction; each must be a number. The label
 * is ignored; an initial prediction other than 0 makes a bad row (wisp has
 * no per-row offset). A line with no '|' has no features but the constant.
 * Blank lines make no row (VW treats them as example separators).
 *
 * wisp is stricter than VW where VW warns and guesses: a malformed value
 * ("1:2", "5abc"), NaN or an infinity, an empty ":" value, "|:w" (a
 * namespace weight without a name), a bad namespace weight, a non-numeric
 * label, more than three label words, a carriage return inside a line, or
 * more than WISP_MAX_ROW_FEATURES features make a bad row
 * ("line N: <what>, at column C"), which scores NaN; so does a value or a
 * quadratic product that overflows a float (VW would sum an infinity).
 */
#include "model/model.h"
#include "batch/batch.h"
#include "parse/parse.h"
#include "parse/textnum.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VW_CONSTANT   11650396u
#define VW_FNV_PRIME  16777619u
#define VW_MAX_PAIRS  256

struct wisp_vw {
    int bits;
    uint32_t mask;
    uint32_t seed;
    uint32_t default_ns_hash;
    bool hash_all;
    bool noconstant;
    bool leave_duplicates;
    int npairs;
    unsigned char pairs[VW_MAX_PAIRS][2];
    bool needq[256];             /* namespace first bytes that appear in a pair */
    unsigned char qns[2 * VW_MAX_PAIRS]; int nqns;   /* those bytes, each once */
    bool drop[256];              /* --ignore / --keep: namespaces whose features are dropped */
    bool nolinear[256];          /* --ignore_linear: namespaces without linear terms */
    bool any_drop, any_nolinear;
    char ignore[257], keep[257], ignore_linear[257];
    char *options;               /* canonical option string */
};

/* ---- hashing ---------------------------------------------------------------- */

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

uint32_t wisp_vw_murmur3(const void *data, size_t len, uint32_t seed)
{
    const uint8_t *p = data;
    const size_t nblocks = len / 4;
    uint32_t h = seed;
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    for (size_t i = 0; i < nblocks; i++) {
        uint32_t k;
        memcpy(&k, p + 4 * i, 4);
        k *= c1; k = rotl32(k, 15); k *= c2;
        h ^= k; h = rotl32(h, 13); h = h * 5 + 0xe6546b64u;
    }
    const uint8_t *tail = p + nblocks * 4;
    uint32_t k = 0;
    switch (len & 3) {
    case 3: k ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: k ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: k ^= tail[0];
        k *= c1; k = rotl32(k, 15); k *= c2; h ^= k;
    }
    h ^= (uint32_t)len;
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    return h;
}

static inline bool vw_trim_byte(char c) { return (signed char)c >= 0 && c <= 0x20; }

uint32_t wisp_vw_hashstring(const char *s, size_t len, uint32_t seed)
{
    while (len > 0 && vw_trim_byte(s[0])) { s++; len--; }
    while (len > 0 && vw_trim_byte(s[len - 1])) len--;
    uint32_t ret = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9) return wisp_vw_murmur3(s, len, seed);
        ret = ret * 10 + d;                  /* VW wraps in 64 bits; the low 32 are the same */
    }
    return ret + seed;
}

static inline uint32_t vw_hash(const wisp_vw *v, const char *s, size_t len, uint32_t seed)
{
    return v->hash_all ? wisp_vw_murmur3(s, len, seed) : wisp_vw_hashstring(s, len, seed);
}

uint32_t wisp_vw_hash_namespace(const wisp_vw *v, const char *name, size_t len)
{
    if (!v) return 0;
    if (len == 0 || (len == 1 && name[0] == ' ')) return v->default_ns_hash;
    return vw_hash(v, name, len, v->seed);
}

uint32_t wisp_vw_hash_feature(const wisp_vw *v, const char *name, size_t len, uint32_t ns_hash)
{
    if (!v) return 0;
    return vw_hash(v, name, len, ns_hash) & v->mask;
}

uint32_t wisp_vw_hash_quadratic(const wisp_vw *v, uint32_t h1, uint32_t h2)
{
    if (!v) return 0;
    return ((VW_FNV_PRIME * h1) ^ h2) & v->mask;
}

/* ---- VW's parseFloat ---------------------------------------------------------- */

static float pow10_pos[39], pow10_neg[38];
static pthread_once_t vw_once = PTHREAD_ONCE_INIT;

static void vw_init_tables(void)
{
    /* fast_pow10.h: 10^k by repeated float multiplication, 10^-k by repeated
     * float division (FLT_MAX_10_EXP = 38, FLT_MIN_10_EXP = -37) */
    volatile float p = 1.0f;
    for (int k = 0; k <= 38; k++) { pow10_pos[k] = p; p = p * 10.0f; }
    p = 1.0f;
    for (int k = 0; k <= 37; k++) { pow10_neg[k] = p; p = p / 10.0f; }
}

static inline float vw_fast_pow10(int8_t e)
{
    if (e > 38) return INFINITY;
    if (e < -37) return 0.0f;
    return e >= 0 ? pow10_pos[e] : pow10_neg[-e];
}

enum { VAL_NUMBER = 0, VAL_STRING = 1, VAL_JUNK = 2 };

/* The value token s[0..n) (n > 0, no blanks in it), followed in the line by
 * `next` ('|' or 0 for a blank or the line end). VAL_NUMBER with *out as VW
 * computes it; VAL_STRING when strtof reads nothing (VW then hashes the
 * text); VAL_JUNK when a number is followed by other bytes. */
static int vw_value(const char *s, size_t n, int next, float *out)
{
    const char *p = s, *e = s + n;
    int sign = 1;
    if (p < e && *p == '-') { sign = -1; p++; }
    float acc = 0;
    while (p < e && (unsigned)(*p - '0') <= 9) { acc = acc * 10.0f + (float)*p; acc = acc - 48.0f; p++; }
    int num_dec = 0;
    if (p < e && *p == '.') {
        p++;
        while (p < e && (unsigned)(*p - '0') <= 9) {
            if (num_dec < 35) { acc = acc * 10.0f + (float)(*p - '0'); num_dec++; }
            p++;
        }
    }
    int exp_acc = 0, ok = 1;
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        int es = 1, nd = 0;
        if (p < e && *p == '-') { es = -1; p++; }
        while (p < e && (unsigned)(*p - '0') <= 9) {
            if (++nd > 9) ok = 0;
            else exp_acc = exp_acc * 10 + (*p - '0');
            p++;
        }
        exp_acc *= es;
    }
    if (p == e && next != '|' && ok) {
        *out = (float)sign * (acc * vw_fast_pow10((int8_t)(exp_acc - num_dec)));
        return VAL_NUMBER;
    }
    if (n > WISP_TEXTNUM_MAX_TOKEN) return VAL_JUNK;
    size_t used;
    float f = wisp__textnum_strtof(s, n, &used);
    if (used == 0) return VAL_STRING;
    if (used != n) return VAL_JUNK;
    *out = f;
    return VAL_NUMBER;
}

/* ---- options -------------------------------------------------------------- */

static int add_pair(wisp_vw *v, const char *ab, const char *where)
{
    size_t n = strlen(ab);
    if (n == 3 || (n > 3 && !strchr(ab, ':')))
        return wisp__fail(WISP_EINVAL, "%s: interaction '%s': wisp supports quadratic interactions (two namespaces) "
                         "only, not cubic or higher", where, ab);
    if (n != 2)
        return wisp__fail(WISP_EINVAL, "%s: interaction '%s' must name two namespaces by their first letters "
                         "(as -q ab)", where, ab);
    if (ab[0] == ':' || ab[1] == ':')
        return wisp__fail(WISP_EINVAL, "%s: interaction '%s': the ':' wildcard (all namespaces) is not supported; "
                         "list the pairs", where, ab);
    if (ab[0] == '\\' || ab[1] == '\\')
        return wisp__fail(WISP_EINVAL, "%s: interaction '%s': escaped namespace characters are not supported", where, ab);
    if (v->npairs >= VW_MAX_PAIRS)
        return wisp__fail(WISP_ELIMIT, "%s: more than %d interactions", where, VW_MAX_PAIRS);
    v->pairs[v->npairs][0] = (unsigned char)ab[0];
    v->pairs[v->npairs][1] = (unsigned char)ab[1];
    v->npairs++;
    return WISP_OK;
}

static int parse_u32(const char *s, const char *opt, const char *where, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        return wisp__fail(WISP_EINVAL, "%s: %s needs a non-negative integer, got '%s'", where, opt, s ? s : "");
    unsigned long long x = strtoull(s, &end, 10);
    if (*end || errno || x > max)
        return wisp__fail(WISP_EINVAL, "%s: %s: '%.40s' is not an integer from 0 to %llu", where, opt, s,
                         (unsigned long long)max);
    *out = x;
    return WISP_OK;
}

void wisp_vw_free(wisp_vw *v)
{
    if (!v) return;
    wisp__free(v->options);
    wisp__free(v);
}

/* Options as VW's command line spells them. Understood: -b/--bit_precision N,
 * -q/--quadratic ab, --interactions ab, --hash_seed N, --noconstant,
 * --hash strings|all, --leave_duplicate_interactions; --link X and
 * --loss_function X are accepted and ignored (they do not change hashing). */
int wisp_vw_new(const char *options, wisp_vw **out)
{
    static const char where[] = "wisp_vw_new";
    if (!out) return wisp__fail(WISP_EINVAL, "%s: out is NULL", where);
    *out = NULL;
    pthread_once(&vw_once, vw_init_tables);
    wisp_vw *v = wisp__calloc(1, sizeof *v);
    if (!v) return wisp__fail(WISP_ENOMEM, "%s: out of memory", where);
    v->bits = 18;
    size_t olen = options ? strlen(options) : 0;
    char *buf = wisp__malloc(olen + 1);
    if (!buf) { wisp__free(v); return wisp__fail(WISP_ENOMEM, "%s: out of memory", where); }
    if (olen) memcpy(buf, options, olen);
    buf[olen] = '\0';
    char *save = NULL, *tok = strtok_r(buf, " \t\r\n", &save);
    int rc = WISP_OK;
    while (tok && rc == WISP_OK) {
        char *val = NULL, *eq = NULL;
        if (tok[0] == '-' && tok[1] == '-' && (eq = strchr(tok, '=')) != NULL) { *eq = '\0'; val = eq + 1; }
        bool takes = !strcmp(tok, "-b") || !strcmp(tok, "--bit_precision") || !strcmp(tok, "-q") ||
                     !strcmp(tok, "--quadratic") || !strcmp(tok, "--interactions") || !strcmp(tok, "--hash_seed") ||
                     !strcmp(tok, "--hash") || !strcmp(tok, "--link") || !strcmp(tok, "--loss_function") ||
                     !strcmp(tok, "--ignore") || !strcmp(tok, "--keep") || !strcmp(tok, "--ignore_linear");
        bool flag = !strcmp(tok, "--noconstant") || !strcmp(tok, "--leave_duplicate_interactions");
        if (!takes && !flag) {
            if (!strncmp(tok, "-q", 2) && strlen(tok) == 4) { val = tok + 2; tok = "-q"; takes = true; }
            else if (!strncmp(tok, "-b", 2) && tok[2]) { val = tok + 2; tok = "-b"; takes = true; }
            else {
                rc = wisp__fail(WISP_EINVAL, "%s: option '%.60s' is not supported (wisp understands -b, -q/--quadratic, "
                               "--interactions of two namespaces, --hash_seed, --hash, --noconstant, "
                               "--leave_duplicate_interactions, --ignore, --keep, --ignore_linear, --link, "
                               "--loss_function)", where, tok);
                break;
            }
        }
        if (takes && !val) {
            val = strtok_r(NULL, " \t\r\n", &save);
            if (!val) { rc = wisp__fail(WISP_EINVAL, "%s: option %s needs a value", where, tok); break; }
        }
        if (flag && val) { rc = wisp__fail(WISP_EINVAL, "%s: option %s takes no value", where, tok); break; }
        uint64_t x;
        if (!strcmp(tok, "-b") || !strcmp(tok, "--bit_precision")) {
            if ((rc = parse_u32(val, "-b", where, 31, &x)) == WISP_OK) {
                if (x < 1) rc = wisp__fail(WISP_EINVAL, "%s: -b %llu: bits must be from 1 to 31", where,
                                          (unsigned long long)x);
                else v->bits = (int)x;
            }
        } else if (!strcmp(tok, "-q") || !strcmp(tok, "--quadratic") || !strcmp(tok, "--interactions")) {
            rc = add_pair(v, val, where);
        } else if (!strcmp(tok, "--hash_seed")) {
            if ((rc = parse_u32(val, "--hash_seed", where, UINT32_MAX, &x)) == WISP_OK) v->seed = (uint32_t)x;
        } else if (!strcmp(tok, "--hash")) {
            if (!strcmp(val, "all")) v->hash_all = true;
            else if (!strcmp(val, "strings")) v->hash_all = false;
            else rc = wisp__fail(WISP_EINVAL, "%s: --hash '%.40s': expected strings or all", where, val);
        } else if (!strcmp(tok, "--noconstant")) {
            v->noconstant = true;
        } else if (!strcmp(tok, "--leave_duplicate_interactions")) {
            v->leave_duplicates = true;
        } else if (!strcmp(tok, "--ignore") || !strcmp(tok, "--keep") || !strcmp(tok, "--ignore_linear")) {
            char *dst = tok[2] == 'k' ? v->keep : !strcmp(tok, "--ignore") ? v->ignore : v->ignore_linear;
            if (strchr(val, '\\'))
                rc = wisp__fail(WISP_EINVAL, "%s: %s '%.40s': escaped namespace characters are not supported", where, tok, val);
            else if (strlen(dst) + strlen(val) > 256)
                rc = wisp__fail(WISP_ELIMIT, "%s: %s: too many namespaces", where, tok);
            else strcat(dst, val);
        } /* --link, --loss_function: accepted, no effect on hashing */
        tok = strtok_r(NULL, " \t\r\n", &save);
    }
    wisp__free(buf);
    if (rc != WISP_OK) { wisp_vw_free(v); return rc; }
    /* VW's duplicate filter: drop an interaction equal (up to order) to an earlier one */
    if (!v->leave_duplicates) {
        int n = 0;
        for (int i = 0; i < v->npairs; i++) {
            unsigned char a = v->pairs[i][0], b = v->pairs[i][1];
            bool dup = false;
            for (int j = 0; j < n; j++) {
                unsigned char c = v->pairs[j][0], d = v->pairs[j][1];
                if ((a == c && b == d) || (a == d && b == c)) dup = true;
            }
            if (!dup) { v->pairs[n][0] = a; v->pairs[n][1] = b; n++; }
        }
        v->npairs = n;
    }
    for (int i = 0; i < v->npairs; i++)
        for (int k = 0; k < 2; k++) {
            unsigned char c = v->pairs[i][k];
            if (!v->needq[c]) { v->needq[c] = true; v->qns[v->nqns++] = c; }
        }
    if (v->keep[0]) {
        for (int c = 0; c < 256; c++) v->drop[c] = true;
        for (const char *c = v->keep; *c; c++) v->drop[(unsigned char)*c] = false;
    }
    for (const char *c = v->ignore; *c; c++) v->drop[(unsigned char)*c] = true;
    for (const char *c = v->ignore_linear; *c; c++) v->nolinear[(unsigned char)*c] = true;
    v->any_drop = v->keep[0] || v->ignore[0];
    v->any_nolinear = v->ignore_linear[0] != 0;
    v->mask = (uint32_t)((1ull << v->bits) - 1);
    v->default_ns_hash = v->seed == 0 ? 0 : wisp_vw_murmur3("", 0, v->seed);
    /* canonical options */
    size_t cap = 160 + (size_t)v->npairs * 6 + 3 * 256;
    v->options = wisp__malloc(cap);
    if (!v->options) { wisp_vw_free(v); return wisp__fail(WISP_ENOMEM, "%s: out of memory", where); }
    int k = snprintf(v->options, cap, "-b %d", v->bits);
    for (int i = 0; i < v->npairs; i++) k += snprintf(v->options + k, cap - (size_t)k, " -q %c%c", v->pairs[i][0], v->pairs[i][1]);
    if (v->seed) k += snprintf(v->options + k, cap - (size_t)k, " --hash_seed %u", v->seed);
    if (v->hash_all) k += snprintf(v->options + k, cap - (size_t)k, " --hash all");
    if (v->noconstant) k += snprintf(v->options + k, cap - (size_t)k, " --noconstant");
    if (v->leave_duplicates) k += snprintf(v->options + k, cap - (size_t)k, " --leave_duplicate_interactions");
    if (v->ignore[0]) k += snprintf(v->options + k, cap - (size_t)k, " --ignore %s", v->ignore);
    if (v->keep[0]) k += snprintf(v->options + k, cap - (size_t)k, " --keep %s", v->keep);
    if (v->ignore_linear[0]) snprintf(v->options + k, cap - (size_t)k, " --ignore_linear %s", v->ignore_linear);
    *out = v;
    return WISP_OK;
}

int wisp_vw_from_model(const wisp_model *m, wisp_vw **out)
{
    if (!out) return wisp__fail(WISP_EINVAL, "wisp_vw_from_model: out is NULL");
    *out = NULL;
    if (!m) return wisp__fail(WISP_EINVAL, "wisp_vw_from_model: model is NULL");
    const char *opts = wisp_model_meta(m, "vw_options");
    if (!opts)
        return wisp__fail(WISP_ESTATE, "%s: not a Vowpal Wabbit model (no 'vw_options' in its meta; make it with "
                         "`wisp import vw`)", wisp_model_path(m));
    int rc = wisp_vw_new(opts, out);
    if (rc != WISP_OK) return wisp__fail_context(rc, "%s: meta vw_options", wisp_model_path(m));
    if (((uint64_t)1 << (*out)->bits) > wisp_model_num_features(m)) {
        int bits = (*out)->bits;
        wisp_vw_free(*out);
        *out = NULL;
        return wisp__fail(WISP_EFORMAT, "%s: vw_options say -b %d but the model has only %llu weights",
                         wisp_model_path(m), bits, (unsigned long long)wisp_model_num_features(m));
    }
    return WISP_OK;
}

int wisp_vw_bits(const wisp_vw *v) { return v ? v->bits : 0; }
const char *wisp_vw_options(const wisp_vw *v) { return v ? v->options : NULL; }

/* ---- the text parser -------------------------------------------------------- */

struct feat { uint32_t h; float v; unsigned char ns; };

struct scratch {
    struct feat *f; size_t fcap;
    uint32_t *pos; size_t pcap;          /* quadratic namespaces: positions grouped by namespace */
};

static int grow(void **p, size_t *cap, size_t need, size_t esize)
{
    if (need <= *cap) return WISP_OK;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    void *q = wisp__realloc(*p, nc * esize);
    if (!q) return wisp__fail(WISP_ENOMEM, "wisp_batch_parse_vw: out of memory for %zu features of scratch", nc);
    *p = q;
    *cap = nc;
    return WISP_OK;
}

static inline int is_blank(char c) { return c == ' ' || c == '\t'; }

/* byte classes for the scanning loops: bit 1 ends a name (blank, ':', '|'),
 * bit 2 ends a value (blank, '|'), bit 4 ends a string value (blank) */
static const unsigned char cls[256] = {
    [' '] = 7, ['\t'] = 7, [':'] = 1, ['|'] = 3,
};
#define END_NAME 1
#define END_VALUE 2
#define END_STRING 4

struct line_err { const char *at; char what[200]; };

#define BAD(pos, ...) do { err->at = (pos); snprintf(err->what, sizeof err->what, __VA_ARGS__); return -1; } while (0)

/* The label section s[0..e): VW's words, tag rule and simple label. */
static int parse_label(const char *s, const char *e, struct line_err *err)
{
    char ex[48];
    const char *tab = memchr(s, '\t', (size_t)(e - s));
    if (tab) s = tab + 1;
    const char *w[4];
    size_t wl[4];
    int nw = 0;
    const char *p = s, *last = NULL;
    size_t last_len = 0;
    while (p < e) {
        while (p < e && *p == ' ') p++;
        if (p == e) break;
        const char *t = p;
        while (p < e && *p != ' ') p++;
        if (nw < 4) { w[nw] = t; wl[nw] = (size_t)(p - t); }
        nw++;
        last = t; last_len = (size_t)(p - t);
    }
    /* the tag: a last word that starts with '\'' or touches the end of the section (the '|' or the line end) */
    if (nw > 0 && (last[0] == '\'' || last + last_len == e)) nw--;
    if (nw > 3) BAD(w[3], "%d label words before the first '|' (a simple label has at most 3: label, weight, "
                    "initial prediction)", nw);
    for (int i = 0; i < nw; i++) {
        float f;
        int k = vw_value(w[i], wl[i], 0, &f);
        if (k != VAL_NUMBER || isnan(f))
            BAD(w[i], "label word '%s' is not a number", wisp__excerpt(w[i], e, ex));
        if (i == 2 && f != 0.0f)
            BAD(w[i], "initial prediction '%s' in the label is not supported (wisp has no per-row offset)",
                wisp__excerpt(w[i], e, ex));
    }
    return 0;
}

/* Parse the namespaces of a line (p at its first '|') into sc->f. Returns the
 * feature count, or -1 with err set. */
static long parse_features(const wisp_vw *v, const char *p, const char *e, struct scratch *sc, struct line_err *err)
{
    char ex[48];
    size_t n = 0;
    while (p < e) {
        /* p at '|' */
        p++;
        unsigned char ns;
        uint32_t ch;
        float nsw = 1.0f;
        if (p == e || is_blank(*p) || *p == '|') {
            ns = ' ';
            ch = v->default_ns_hash;
        } else if (*p == ':') {
            BAD(p, "a namespace weight without a namespace name");
        } else {
            const char *name = p;
            while (p < e && !(cls[(unsigned char)*p] & END_NAME)) p++;
            ns = (unsigned char)name[0];
            ch = vw_hash(v, name, (size_t)(p - name), v->seed);
            if (p < e && *p == ':') {
                p++;
                const char *vs = p;
                while (p < e && !(cls[(unsigned char)*p] & END_VALUE)) p++;
                if (p == vs) BAD(vs, "missing namespace weight after ':'");
                int k = vw_value(vs, (size_t)(p - vs), p < e && *p == '|' ? '|' : 0, &nsw);
                if (k != VAL_NUMBER) BAD(vs, "bad namespace weight '%s'", wisp__excerpt(vs, e, ex));
                if (!isfinite(nsw)) BAD(vs, "namespace weight '%s' is not a finite number", wisp__excerpt(vs, e, ex));
            }
        }
        uint32_t anon = 0;
        while (p < e && *p != '|') {
            if (is_blank(*p)) { p++; continue; }
            const char *name = p;
            while (p < e && !(cls[(unsigned char)*p] & END_NAME)) p++;
            size_t nl = (size_t)(p - name);
            uint32_t h;
            float val = 1.0f;
            if (p < e && *p == ':') {
                p++;
                const char *vs = p;
                while (p < e && !(cls[(unsigned char)*p] & END_VALUE)) p++;
                if (p == vs) BAD(vs, "missing value after ':' in '%s'", wisp__excerpt(name, e, ex));
                float f;
                int k = vw_value(vs, (size_t)(p - vs), p < e && *p == '|' ? '|' : 0, &f);
                if (k == VAL_JUNK) BAD(vs, "bad value '%s'", wisp__excerpt(vs, e, ex));
                if (k == VAL_STRING) {
                    /* VW hashes the string value; it runs to the next blank, '|' included */
                    while (p < e && !(cls[(unsigned char)*p] & END_STRING)) p++;
                    if (nl == 0) BAD(name, "a string value without a feature name");
                    h = vw_hash(v, vs, (size_t)(p - vs), vw_hash(v, name, nl, ch));
                    val = 1.0f;
                } else {
                    if (!isfinite(f)) BAD(vs, "value '%s' is not a finite number", wisp__excerpt(vs, e, ex));
                    val = nsw * f;
                    if (!isfinite(val)) BAD(vs, "value '%s' times the namespace weight overflows a float",
                                            wisp__excerpt(vs, e, ex));
                    h = nl ? vw_hash(v, name, nl, ch) : ch + anon++;
                }
            } else {
                val = nsw;
                h = vw_hash(v, name, nl, ch);
            }
            if (val == 0.0f || v->drop[ns]) continue;      /* VW drops 0-valued features, and --ignore'd namespaces */
            if (n >= WISP_MAX_ROW_FEATURES) BAD(name, "more than WISP_MAX_ROW_FEATURES (%u) features",
                                                WISP_MAX_ROW_FEATURES);
            if (n >= sc->fcap && grow((void **)&sc->f, &sc->fcap, n + 1, sizeof *sc->f) != WISP_OK) {
                err->at = NULL;
                return -2;
            }
            sc->f[n].h = h;
            sc->f[n].v = val;
            sc->f[n].ns = ns;
            n++;
        }
    }
    return (long)n;
}

/* Append an empty row marked bad. On failure nothing changed. */
static int add_bad_row(wisp_batch *b, uint64_t line, const char *msg)
{
    uint32_t *ids, *scr;
    float *vals;
    int st = wisp__batch_reserve_line(b, 0, &ids, &vals, &scr);
    if (st == WISP_OK) st = wisp__batch_commit_line(b, 0, 0);
    if (st != WISP_OK) return st;
    st = wisp__batch_mark_bad(b, b->rows - 1, line, msg);
    if (st != WISP_OK) b->rows--;
    return st;
}

static inline void emit(uint32_t id, float val, uint32_t *vid, float *vv, size_t *nv, uint32_t *bid, size_t *nb)
{
    if (val == 1.0f) bid[(*nb)++] = id;
    else { vid[*nv] = id; vv[*nv] = val; (*nv)++; }
}

/* One line s[0..e) (no '\n', '\r' stripped): append its row. Returns
 * WISP_OK, or a status (ENOMEM, ELIMIT); *bad set with err for a bad line. */
static int parse_line(const wisp_vw *v, wisp_batch *b, const char *s, const char *e, struct scratch *sc,
                      int *bad, struct line_err *err)
{
    *bad = 0;
    if (memchr(s, '\r', (size_t)(e - s))) {
        err->at = (const char *)memchr(s, '\r', (size_t)(e - s));
        snprintf(err->what, sizeof err->what, "a carriage return inside the line");
        *bad = 1;
        return WISP_OK;
    }
    const char *bar = memchr(s, '|', (size_t)(e - s));
    if (parse_label(s, bar ? bar : e, err) < 0) { *bad = 1; return WISP_OK; }
    long nf = 0;
    if (bar) {
        nf = parse_features(v, bar, e, sc, err);
        if (nf == -2) return WISP_ENOMEM;
        if (nf < 0) { *bad = 1; return WISP_OK; }
    }
    /* how many features in all: linear, quadratic, constant */
    size_t nlin = (size_t)nf, nq = 0, cnt[256], start[256], fill[256];
    if (v->nqns) {
        for (int k = 0; k < v->nqns; k++) cnt[v->qns[k]] = 0;
        for (size_t i = 0; i < nlin; i++)
            if (v->needq[sc->f[i].ns]) cnt[sc->f[i].ns]++;
        size_t o = 0;
        for (int k = 0; k < v->nqns; k++) { unsigned char c = v->qns[k]; start[c] = fill[c] = o; o += cnt[c]; }
        for (int i = 0; i < v->npairs && nq <= WISP_MAX_ROW_FEATURES; i++) {
            size_t ca = cnt[v->pairs[i][0]], cb = cnt[v->pairs[i][1]];
            nq += v->pairs[i][0] == v->pairs[i][1] ? ca * (ca + 1) / 2 : ca * cb;
        }
        if (o && grow((void **)&sc->pos, &sc->pcap, o, sizeof *sc->pos) != WISP_OK) return WISP_ENOMEM;
    }
    size_t total = nlin + nq + (v->noconstant ? 0 : 1);
    if (total > WISP_MAX_ROW_FEATURES) {
        err->at = bar ? bar : s;
        snprintf(err->what, sizeof err->what, "%zu features with the interactions, more than "
                 "WISP_MAX_ROW_FEATURES (%u)", total, WISP_MAX_ROW_FEATURES);
        *bad = 1;
        return WISP_OK;
    }
    if (total > WISP_MAX_NNZ - b->nnz)
        return wisp__fail(WISP_ELIMIT, "the batch would hold more than WISP_MAX_NNZ (%u) features", WISP_MAX_NNZ);
    uint32_t *vid, *bid;
    float *vv;
    int st = wisp__batch_reserve_line(b, total, &vid, &vv, &bid);
    if (st != WISP_OK) return st;
    size_t nv = 0, nb = 0;
    int overflow = 0;
    const uint32_t mask = v->mask;
    if (v->any_nolinear) {
        for (size_t i = 0; i < nlin; i++)
            if (!v->nolinear[sc->f[i].ns]) emit(sc->f[i].h & mask, sc->f[i].v, vid, vv, &nv, bid, &nb);
    } else {
        for (size_t i = 0; i < nlin; i++) emit(sc->f[i].h & mask, sc->f[i].v, vid, vv, &nv, bid, &nb);
    }
    if (nq) {
        /* the interacting namespaces' features, grouped by namespace, in line order */
        for (size_t i = 0; i < nlin; i++)
            if (v->needq[sc->f[i].ns]) sc->pos[fill[sc->f[i].ns]++] = (uint32_t)i;
        for (int q = 0; q < v->npairs; q++) {
            unsigned char a = v->pairs[q][0], c = v->pairs[q][1];
            for (size_t i = start[a]; i < fill[a]; i++) {
                const struct feat *f1 = &sc->f[sc->pos[i]];
                const uint32_t half = VW_FNV_PRIME * f1->h;
                const float v1 = f1->v;
                for (size_t j = a == c ? i : start[c]; j < fill[c]; j++) {
                    const struct feat *f2 = &sc->f[sc->pos[j]];
                    const float x = v1 * f2->v;
                    overflow |= isinf(x);
                    emit((half ^ f2->h) & mask, x, vid, vv, &nv, bid, &nb);
                }
            }
        }
        if (overflow) {                 /* nothing committed: the row becomes a bad row */
            err->at = bar;
            snprintf(err->what, sizeof err->what, "a quadratic feature's value (a product of two values) "
                     "overflows a float");
            *bad = 1;
            return WISP_OK;
        }
    }
    if (!v->noconstant) bid[nb++] = VW_CONSTANT & mask;
    return wisp__batch_commit_line(b, nv, nb);
}

int wisp_batch_parse_vw(wisp_batch *b, const wisp_vw *v, const char *text, size_t len, int final,
                        size_t max_rows, uint64_t *line_no, size_t *consumed)
{
    static const char fn[] = "wisp_batch_parse_vw";
    if (consumed) *consumed = 0;
    if (!b) return wisp__fail(WISP_EINVAL, "%s: batch is NULL", fn);
    if (!v) return wisp__fail(WISP_EINVAL, "%s: options (wisp_vw) are NULL", fn);
    if (b->wrapped) return wisp__fail(WISP_ESTATE, "%s: the batch wraps caller arrays and cannot grow", fn);
    if (!text && len) return wisp__fail(WISP_EINVAL, "%s: text is NULL", fn);
    pthread_once(&vw_once, vw_init_tables);

    uint64_t ln = line_no ? *line_no : 0;
    size_t pos = 0, added = 0;
    int st = WISP_OK;
    char msg[320];
    struct line_err err;
    struct scratch sc = {0};

    while (pos < len && (max_rows == 0 || added < max_rows)) {
        const char *s = text + pos, *e = NULL;
        size_t next = 0;
        const int cut = wisp__next_line(text, len, pos, final, ln, &e, &next);
        if (cut <= 0) { st = cut; break; }       /* more text needed (WISP_OK), or a line too long */
        uint64_t this_line = ln + 1;
        size_t L = (size_t)(e - s);
        int bad = 0;
        if (WISP_UNLIKELY(L > WISP_MAX_LINE_BYTES)) {
            snprintf(msg, sizeof msg, "line %llu: longer than WISP_MAX_LINE_BYTES (%u bytes), at column %u",
                     (unsigned long long)this_line, WISP_MAX_LINE_BYTES, WISP_MAX_LINE_BYTES + 1);
            bad = 1;
        } else {
            if (e > s && e[-1] == '\r') e--;
            if (e - s >= 3 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF)
                s += 3;                                  /* VW skips a UTF-8 BOM at a line's start */
            const char *p = s;
            while (p < e && is_blank(*p)) p++;
            if (p == e) { ln = this_line; pos = next; continue; }   /* blank: no row */
        }
        if (b->rows >= WISP_MAX_ROWS) {
            st = wisp__fail(WISP_ELIMIT, "line %llu: the batch already holds WISP_MAX_ROWS (%u) rows",
                           (unsigned long long)this_line, WISP_MAX_ROWS);
            break;
        }
        if (!bad) {
            st = parse_line(v, b, s, e, &sc, &bad, &err);
            if (st != WISP_OK) {
                wisp__fail_context(st, "line %llu", (unsigned long long)this_line);
                break;
            }
            if (bad)
                snprintf(msg, sizeof msg, "line %llu: %s, at column %zu", (unsigned long long)this_line, err.what,
                         (size_t)(err.at - (text + pos)) + 1);
        }
        if (bad && (st = add_bad_row(b, this_line, msg)) != WISP_OK) {
            wisp__fail_context(st, "line %llu", (unsigned long long)this_line);
            break;
        }
        ln = this_line;
        pos = next;
        added++;
    }
    wisp__free(sc.f);
    wisp__free(sc.pos);
    if (line_no) *line_no = ln;
    if (consumed) *consumed = pos;
    return st;
}

/* ---- the importer: --readable_model and --invert_hash files ------------------
 *
 * VW 9 writes (gd's save_load_regressor, text mode):
 *     Version 9.11.9
 *     Id <id>
 *     Min label:-50                    logistic loss sets -50 / 50; others the labels seen
 *     Max label:50
 *     bits:18
 *     lda:0
 *     0 ngram:
 *     0 skip:
 *     options: --link logistic --quadratic ab
 *     Checksum: 3432043552
 *     ...                              learner state ("initial_t 0", "t 5", ":1", ...)
 *     7880:0.0180065 1.34637 2         index:weight [per-weight learner state]
 *     a^x*b^p:537:0.0486315 2.33 2     (--invert_hash: name:index:weight ...)
 * The index is the weight's position in VW's table without its stride, so
 * weights land at index in a table of 2^bits, the constant included (at
 * 11650396 & mask, like any feature), and the model bias is 0: wisp then
 * computes exactly VW's sum, and p = sigmoid(sum) is VW's -p output with
 * --link logistic for a model trained with --loss_function logistic
 * (VW also clips the sum to [min label, max label] = [-50, 50] first:
 * sigmoid(-50) = 2e-22, so the difference is below 1e-21).
 * Options that change what a prediction is (reductions such as --oaa,
 * --nn, --lrq, cubic interactions, n-grams, ...) are refused with a message.
 */

static bool all_digits(const char *s, size_t n)
{
    if (n == 0 || n > 10) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned)(s[i] - '0') > 9) return false;
    return true;
}

/* A weight line: "index:weight[ extra...]" or "name:index:weight[ extra...]".
 * Returns 1 with *index and *wt, 0 when the line is not one. */
static int weight_line(const char *ln, uint64_t *index, double *wt)
{
    size_t t = strcspn(ln, " \t");
    const char *c2 = NULL, *c1 = NULL;         /* the last and second-last ':' within the first token */
    for (const char *p = ln; p < ln + t; p++)
        if (*p == ':') { c1 = c2; c2 = p; }
    if (!c2) return 0;
    const char *is = c1 ? c1 + 1 : ln;
    if (!all_digits(is, (size_t)(c2 - is))) return 0;
    char *end;
    double w = strtod_l(c2 + 1, &end, wisp__textnum_c_locale());
    if (end == c2 + 1 || end != ln + t) return 0;
    *index = strtoull(is, NULL, 10);
    *wt = w;
    return 1;
}

static const char *const vw_refuse_hint =
    "wisp imports linear models (gd, the default learner) with quadratic interactions";

/* The header is complete: parse its options with bits: first, check that an
 * option -b (if any) says the same as bits: (bits: sizes the table; a model whose
 * options disagree would hash into a smaller table than it has), and allocate
 * the zeroed table of 2^bits weights. */
static int vw_header_table(const char *vw_path, long bits, const char *options, unsigned long long opt_line,
                           wisp_vw **v, float **w)
{
    char vopts[4200];
    snprintf(vopts, sizeof vopts, "-b %ld %s", bits, options);
    int rc = wisp_vw_new(vopts, v);
    if (rc != WISP_OK) {
        const char *m = wisp_errmsg();
        if (!strncmp(m, "wisp_vw_new: ", 13)) m += 13;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", m);
        return wisp__fail(rc, "%s:%llu: %s; %s", vw_path, opt_line, copy, vw_refuse_hint);
    }
    if (wisp_vw_bits(*v) != bits)
        return wisp__fail(WISP_EFORMAT, "%s:%llu: the options say -b %d but the header says bits:%ld", vw_path,
                         opt_line, wisp_vw_bits(*v), bits);
    *w = wisp__calloc((size_t)1 << bits, sizeof **w);
    if (!*w) return wisp__fail(WISP_ENOMEM, "%s: out of memory for 2^%ld weights", vw_path, bits);
    return WISP_OK;
}

int wisp_import_vw(const char *vw_path, const char *out_path, int dtype)
{
    if (!vw_path || !out_path)
        return wisp__fail(WISP_EINVAL, "wisp_import_vw: %s is NULL", !vw_path ? "vw_path" : "out_path");
    if (!wisp_dtype_name(dtype))
        return wisp__fail(WISP_EINVAL, "%s: unknown weight dtype %d (f32 0, f16 1, i8 2)", out_path, dtype);
    pthread_once(&vw_once, vw_init_tables);
    if (!wisp__textnum_c_locale()) return wisp__fail(WISP_ENOMEM, "wisp_import_vw: cannot create the C locale");
    char *buf = NULL;
    size_t len = 0;
    int rc = wisp__read_file(vw_path, "Vowpal Wabbit model", &buf, &len);
    if (rc) return rc;
    if (memchr(buf, '\0', len)) { wisp__free(buf); return wisp__fail(WISP_EPARSE, "%s: contains a NUL byte: not a VW text model", vw_path); }

    char version[64] = "", options[4096] = "", link[32] = "identity";
    double min_label = NAN, max_label = NAN;
    long bits = -1;
    unsigned long long lineno = 0, opt_line = 0, nweights = 0;
    bool in_weights = false, have_version = false;
    float *w = NULL;
    wisp_vw *v = NULL;
    for (char *p = buf, *end = buf + len; p < end;) {
        char *ln = p, *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        p = nl ? nl + 1 : end;
        ln[n] = '\0';
        lineno++;
        while (n && (ln[n - 1] == '\r' || ln[n - 1] == ' ' || ln[n - 1] == '\t')) ln[--n] = '\0';
        if (n == 0) continue;
        uint64_t index;
        double wt;
        if (weight_line(ln, &index, &wt)) {
            if (!in_weights) {
                /* the header is complete: check it, make the table */
                if (!have_version || bits < 0) {
                    rc = wisp__fail(WISP_EPARSE, "%s:%llu: a weight line before the header's %s line: not a VW "
                                   "--readable_model or --invert_hash file", vw_path, lineno,
                                   !have_version ? "'Version'" : "'bits:'");
                    goto out;
                }
                if ((rc = vw_header_table(vw_path, bits, options, opt_line, &v, &w)) != WISP_OK) goto out;
                in_weights = true;
            }
            if (index >> bits) {
                rc = wisp__fail(WISP_EFORMAT, "%s:%llu: index %llu is outside the table of 2^%ld weights (bits:%ld)",
                               vw_path, lineno, (unsigned long long)index, bits, bits);
                goto out;
            }
            if (!isfinite(wt) || fabs(wt) > FLT_MAX) {
                rc = wisp__fail(WISP_EPARSE, "%s:%llu: weight %.17g is not a finite 32-bit float", vw_path, lineno, wt);
                goto out;
            }
            float f = (float)wt;
            if (w[index] != 0.0f && w[index] != f) {
                rc = wisp__fail(WISP_EFORMAT, "%s:%llu: index %llu appears twice with different weights (%.9g, %.9g)",
                               vw_path, lineno, (unsigned long long)index, (double)w[index], (double)f);
                goto out;
            }
            w[index] = f;
            nweights++;
            continue;
        }
        if (in_weights) {
            rc = wisp__fail(WISP_EPARSE, "%s:%llu: expected a weight line (index:weight or name:index:weight), "
                           "found '%.40s'", vw_path, lineno, ln);
            goto out;
        }
        /* header lines */
        if (!strncmp(ln, "Version ", 8)) {
            snprintf(version, sizeof version, "%s", ln + 8);
            have_version = true;
        } else if (!strncmp(ln, "bits:", 5)) {
            char *bend;
            bits = strtol(ln + 5, &bend, 10);
            if (bend == ln + 5 || *bend || bits < 1 || bits > 31) {
                rc = wisp__fail(bits > 31 && *bend == '\0' ? WISP_ELIMIT : WISP_EPARSE,
                               "%s:%llu: '%s': wisp imports models of 1 to 31 bits", vw_path, lineno, ln);
                goto out;
            }
        } else if (!strncmp(ln, "Min label:", 10)) {
            min_label = strtod_l(ln + 10, NULL, wisp__textnum_c_locale());
        } else if (!strncmp(ln, "Max label:", 10)) {
            max_label = strtod_l(ln + 10, NULL, wisp__textnum_c_locale());
        } else if (!strncmp(ln, "lda:", 4)) {
            if (strtol(ln + 4, NULL, 10) != 0) {
                rc = wisp__fail(WISP_EPARSE, "%s:%llu: an LDA model (%s) is not supported; %s", vw_path, lineno, ln,
                               vw_refuse_hint);
                goto out;
            }
        } else if (strstr(ln, " ngram:") || strstr(ln, " skip:")) {
            if (strtol(ln, NULL, 10) != 0) {
                rc = wisp__fail(WISP_EPARSE, "%s:%llu: '%s': n-grams and skips (--ngram, --skips) are not "
                               "supported; %s", vw_path, lineno, ln, vw_refuse_hint);
                goto out;
            }
        } else if (!strncmp(ln, "options:", 8)) {
            if (strlen(ln + 8) >= sizeof options) {
                rc = wisp__fail(WISP_ELIMIT, "%s:%llu: the options line is too long", vw_path, lineno);
                goto out;
            }
            snprintf(options, sizeof options, "%s", ln + 8);
            opt_line = lineno;
            const char *l = strstr(options, "--link ");
            if (l) sscanf(l + 7, "%31s", link);
        }
    }
    if (!in_weights) {
        if (!have_version || bits < 0)
            rc = wisp__fail(WISP_EPARSE, "%s: not a VW --readable_model or --invert_hash file (no %s line)", vw_path,
                           !have_version ? "'Version'" : "'bits:'");
        else {
            /* a model whose weights are all 0: still a model */
            rc = vw_header_table(vw_path, bits, options, opt_line, &v, &w);
        }
        if (rc) goto out;
    }
    {
        bool logistic = min_label == -50 && max_label == 50;
        char meta[4800];
        snprintf(meta, sizeof meta,
                 "source=vw\nvw_version=%s\nvw_options=%s\nvw_link=%s\nvw_loss=%s\nvw_min_label=%.9g\n"
                 "vw_max_label=%.9g\nvw_weights=%llu\n",
                 version, wisp_vw_options(v), link, logistic ? "logistic" : "unknown", min_label, max_label, nweights);
        rc = wisp_model_write(out_path, w, (uint64_t)1 << bits, 0.0, dtype, meta, NULL);
    }
out:
    wisp__free(w);
    wisp_vw_free(v);
    wisp__free(buf);
    return rc;
}
