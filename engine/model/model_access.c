/* model_access.c — what a loaded model answers (its accessors and meta), the weight dtypes and the fp16 codecs. */
#include "model/format.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- dtypes and fp16 ---------------------------------------------------- */

const char *wisp_dtype_name(int dtype)
{
    switch (dtype) {
    case WISP_F32: return "f32";
    case WISP_F16: return "f16";
    case WISP_I8:  return "i8";
    default:       return NULL;
    }
}

int wisp_dtype_parse(const char *name)
{
    static const struct { const char *name; int dtype; } names[] = {
        { "f32", WISP_F32 }, { "fp32", WISP_F32 }, { "float32", WISP_F32 }, { "float", WISP_F32 },
        { "f16", WISP_F16 }, { "fp16", WISP_F16 }, { "float16", WISP_F16 }, { "half", WISP_F16 },
        { "i8", WISP_I8 },   { "int8", WISP_I8 },
    };
    if (!name) return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(name, names[i].name) == 0) return names[i].dtype;
    return -1;
}

float wisp__half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);               /* inf, NaN (payload kept) */
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);        /* normal: rebias 15 -> 127 */
    } else if (m == 0) {
        x = sign;                                          /* +-0 */
    } else {                                               /* subnormal: m * 2^-24 */
        uint32_t sh = 0;
        while (!(m & 0x400u)) { m <<= 1; sh++; }
        x = sign | ((113u - sh) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t wisp__float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {                               /* inf or NaN */
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        uint32_t payload = (ax >> 13) & 0x3ffu;            /* keep the top payload bits */
        return sign | 0x7c00u | (payload ? payload : 0x200u);
    }
    if (ax >= 0x477ff000u) return sign | 0x7c00u;          /* >= 65520: rounds to inf */
    if (ax >= 0x38800000u) {                               /* half normal range (>= 2^-14) */
        uint32_t r = ax - 0x38000000u;                     /* rebias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);                    /* round to nearest, ties to even */
        return sign | (uint16_t)(r >> 13);
    }
    /* half subnormal or zero: result = round(value / 2^-24) */
    uint32_t e = ax >> 23;
    if (e < 102) return sign;                              /* < 2^-25: rounds to 0 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;             /* value = m * 2^(e-150) */
    uint32_t s = 126u - e;                                 /* units of 2^-24: m >> s; 14 <= s <= 24 */
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | (uint16_t)q;
}

/* ---- meta text ------------------------------------------------------------ */

static bool key_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
}

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int wisp__model_parse_meta(const char *t, size_t n, int status, const char *who, char ***kv_out)
{
    if (kv_out) *kv_out = NULL;
    const char *nul = memchr(t, '\0', n);
    if (nul) {
        size_t line = 1;
        for (const char *q = t; q < nul; q++) line += (*q == '\n');
        return wisp__fail(status, "%s: meta line %zu: contains a NUL byte", who, line);
    }
    /* pass 1: validate and count */
    size_t k = 0, lineno = 0;
    for (size_t i = 0; i < n;) {
        const char *ln = t + i;
        const char *nl = memchr(ln, '\n', n - i);
        size_t len = nl ? (size_t)(nl - ln) : n - i;
        lineno++;
        i += len + (nl ? 1 : 0);
        if (len == 0) continue;
        const char *eq = memchr(ln, '=', len);
        if (!eq) return wisp__fail(status, "%s: meta line %zu: expected key=value", who, lineno);
        if (eq == ln) return wisp__fail(status, "%s: meta line %zu: empty key", who, lineno);
        for (const char *q = ln; q < eq; q++)
            if (!key_char((unsigned char)*q))
                return wisp__fail(status, "%s: meta line %zu: key has a character other than "
                                 "[A-Za-z0-9_.-] (byte 0x%02x)", who, lineno, (unsigned)(unsigned char)*q);
        k++;
    }
    size_t ptr_bytes = (2 * k + 1) * sizeof(char *);
    char **kv = wisp__malloc(ptr_bytes + n + 1);
    if (!kv) return wisp__fail(WISP_ENOMEM, "%s: out of memory for the meta keys", who);
    char *s = (char *)kv + ptr_bytes;
    memcpy(s, t, n);
    s[n] = '\0';
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        char *ln = s + i;
        char *nl = memchr(ln, '\n', n - i);
        size_t len = nl ? (size_t)(nl - ln) : n - i;
        i += len + (nl ? 1 : 0);
        if (nl) *nl = '\0';
        if (len == 0) continue;
        char *eq = strchr(ln, '=');
        *eq = '\0';
        kv[j++] = ln;
        kv[j++] = eq + 1;
    }
    kv[j] = NULL;
    /* unique keys: sort a copy of the key pointers */
    if (k > 1) {
        char **keys = wisp__malloc(k * sizeof *keys);
        if (!keys) { wisp__free(kv); return wisp__fail(WISP_ENOMEM, "%s: out of memory for the meta keys", who); }
        for (size_t i = 0; i < k; i++) keys[i] = kv[2 * i];
        qsort(keys, k, sizeof *keys, cmp_strp);
        for (size_t i = 1; i < k; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0) {
                int st = wisp__fail(status, "%s: meta key '%.64s' appears more than once", who, keys[i]);
                wisp__free(keys);
                wisp__free(kv);
                return st;
            }
        wisp__free(keys);
    }
    if (kv_out) *kv_out = kv;
    else wisp__free(kv);
    return WISP_OK;
}

/* ---- accessors ------------------------------------------------------------ */

uint64_t    wisp_model_num_features(const wisp_model *m) { return m ? m->num_features : 0; }
double      wisp_model_bias(const wisp_model *m) { return m ? m->bias : 0.0; }
int         wisp_model_dtype(const wisp_model *m) { return m ? m->dtype : -1; }
float       wisp_model_scale(const wisp_model *m) { return m ? m->scale : 1.0f; }
const char *wisp_model_path(const wisp_model *m) { return m ? m->path : NULL; }
uint64_t    wisp_model_file_size(const wisp_model *m) { return m ? (uint64_t)m->map_size : 0; }
const char *wisp_model_meta_text(const wisp_model *m) { return m ? m->meta : ""; }
const char *wisp_model_columns(const wisp_model *m) { return m ? m->columns : ""; }

float wisp_model_weight(const wisp_model *m, uint64_t id)
{
    if (!m || id >= m->num_features) return 0.0f;
    switch (m->dtype) {
    case WISP_F32: { float f; memcpy(&f, (const char *)m->weights + id * 4, 4); return f; }
    case WISP_F16: { uint16_t h; memcpy(&h, (const char *)m->weights + id * 2, 2); return wisp__half_to_float(h); }
    case WISP_I8:  return m->scale * (float)((const int8_t *)m->weights)[id];
    default:       return 0.0f;
    }
}

const char *wisp_model_meta(const wisp_model *m, const char *key)
{
    if (!m || !key || !m->meta_kv) return NULL;
    for (char **kv = m->meta_kv; kv[0]; kv += 2)
        if (strcmp(kv[0], key) == 0) return kv[1];
    return NULL;
}
