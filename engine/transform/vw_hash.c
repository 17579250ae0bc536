/* vw_hash.c — Vowpal Wabbit's feature hashing (MurmurHash3, hashstring, namespaces, quadratic pairs) and its
 * hashing options (wisp_vw: wisp_vw_new, wisp_vw_from_model). */
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
 */
#include "transform/vw.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        return wisp__fail(WISP_EINVAL, "%s: interaction '%s': escaped namespace characters are not supported", where,
                          ab);
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
                rc = wisp__fail(WISP_EINVAL,
                                "%s: option '%.60s' is not supported (wisp understands -b, -q/--quadratic, "
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
                rc = wisp__fail(WISP_EINVAL, "%s: %s '%.40s': escaped namespace characters are not supported", where,
                                tok, val);
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
    for (int i = 0; i < v->npairs; i++)
        k += snprintf(v->options + k, cap - (size_t)k, " -q %c%c", v->pairs[i][0], v->pairs[i][1]);
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
