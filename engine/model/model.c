/* model.c — the .wisp model file: validated loading into a private read-only copy, accessors, fp16/int8 codecs, atomic writing and conversion. */

/*
 * On-disk layout of a .wisp file (format version 1). Every integer is
 * little-endian; offsets and sizes are in bytes from the start of the file.
 *
 *   header, 64 bytes at offset 0
 *     0  char magic[8]            "WISPMDL\0"
 *     8  u32  version             WISP_FORMAT_VERSION (1)
 *    12  u32  section_count       1 .. 256
 *    16  u64  file_size           must equal the real size of the file
 *    24  u64  section_table_off   64-byte aligned, >= 64
 *    32  u64  num_features        1 .. WISP_MAX_FEATURES; == weights' count
 *    40  f64  bias                finite
 *    48  u64  header_checksum     XXH64 (seed 0) of the 64 header bytes with
 *                                 bytes 48..55 zeroed, followed by the
 *                                 section_count * 64 bytes of the table
 *    56  8 bytes reserved         written as zero (covered by the checksum)
 *
 *   section table: section_count entries of 64 bytes at section_table_off
 *     0  char name[16]            NUL-terminated, NUL-padded, non-empty,
 *                                 printable ASCII; names are unique
 *    16  u32  dtype               0 f32, 1 f16, 2 i8 (weights), 16 text (bytes)
 *    20  f32  scale               i8: the dequantization scale (finite, > 0);
 *                                 1.0 for every other known section
 *    24  u64  offset              64-byte aligned
 *    32  u64  size                bytes; size == count * element size
 *    40  u64  count               elements
 *    48  u64  checksum            XXH64 (seed 0) of the section's `size` bytes
 *    56  8 bytes reserved         written as zero (covered by the header checksum)
 *
 *   sections (non-empty ones may not overlap each other, the header or the table):
 *     "meta"     required, dtype text: "key=value\n" lines; keys are
 *                [A-Za-z0-9_.-]+ and unique, values have no NUL or '\n';
 *                empty lines are allowed. No NUL byte anywhere.
 *     "weights"  required, dtype f32/f16/i8, count == num_features, every
 *                weight finite; weight(id) = w[id] (f16 widened; i8: scale * q).
 *     "columns"  optional, dtype text: the feature-column description (no NUL).
 *     any other name: ignored (forward compatible) after its bounds,
 *                alignment, overlap and checksum are checked.
 *
 * The writer puts the table right after the header, then meta and columns
 * (each 64-byte aligned), then the weights at a 4096-byte aligned offset
 * (page aligned: madvise and device copies work on whole pages); the file
 * ends with the last weight byte. Gaps are zero and not checksummed.
 *
 * Validation order: magic, version, header size, file_size, table bounds,
 * header checksum, limits and bias, each entry (name, alignment, bounds,
 * overlap, dtype/count/scale), required sections, section checksums, meta
 * text, columns text, finite weights. A model file is untrusted input:
 * nothing is used before all of that passed.
 *
 * What a model serves is exactly the bytes it verified. The loader reads the
 * whole file with pread() into private anonymous memory (2 MiB aligned and
 * advised for transparent huge pages when the file is at least 2 MiB), checks
 * fstat before and after the read (device, inode, size, mtime, ctime; a ctime
 * change that comes with a link count change is a rename over the path or an
 * unlink, which leave the bytes being read alone) and refuses a file that
 * changed meanwhile ("changed while loading"; a short
 * read says "truncated", a byte past the size "grew"), validates that copy and
 * makes it read-only with mprotect. Nothing reads the file afterwards, so a
 * file rewritten, truncated or corrupted in place under a live process can
 * neither SIGBUS it nor mix two versions: the loaded model keeps answering
 * with the verified bytes, and wisp_model_file_changed() tells the caller the
 * path now holds something else (renamed over, rewritten, truncated, removed),
 * so that a reload can pick it up or refuse it. The cost: a model of N bytes
 * takes N bytes of private memory in every process that loads it (no
 * page-cache sharing), and a load copies the file once where a mapping read
 * it in place.
 *
 * Page-cache sharing (MAP_SHARED) was the old default and is not kept on any
 * path: a shared mapping is only safe when the file cannot change under the
 * process, and neither test wisp could make proves that. A read-only mount
 * (ST_RDONLY) is often a read-only bind of a writable file system (a container
 * volume) that the host still writes; FS_IMMUTABLE_FL can be cleared by root
 * and the file then truncated. Catching SIGBUS inside a library that runs in
 * nginx workers (siglongjmp out of a scoring loop) is worse than the memory.
 * WISP_LOAD_HUGEPAGES is still accepted: it now only asks for huge pages for
 * models below 2 MiB too (the copy is always private).
 *
 * The stat comparison cannot see a rewrite that keeps the size within the
 * file system's timestamp granularity and lands between the two fstat calls
 * without changing ctime: the checksums then refuse any bytes that differ.
 */

#include "model/model.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "wisp maps little-endian model files in place: a little-endian host is required"
#endif

#define HDR_SIZE        64u
#define ENTRY_SIZE      64u
#define SEC_ALIGN       64u
#define WEIGHTS_ALIGN   4096u
#define MAX_SECTIONS    256u
#define NAME_LEN        16u
#define DT_TEXT         16u
#define HUGE_PAGE       (2u << 20)

/* header field offsets */
enum { H_MAGIC = 0, H_VERSION = 8, H_COUNT = 12, H_FILE_SIZE = 16, H_TABLE = 24,
       H_NFEAT = 32, H_BIAS = 40, H_CHECKSUM = 48 };
/* section entry field offsets */
enum { E_NAME = 0, E_DTYPE = 16, E_SCALE = 20, E_OFFSET = 24, E_SIZE = 32, E_COUNT = 40,
       E_CHECKSUM = 48 };

typedef unsigned long long ull;

static uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static float    rdf32(const unsigned char *p) { float v; memcpy(&v, p, 4); return v; }
static double   rdf64(const unsigned char *p) { double v; memcpy(&v, p, 8); return v; }
static void wr32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static void wrf32(unsigned char *p, float v) { memcpy(p, &v, 4); }
static void wrf64(unsigned char *p, double v) { memcpy(p, &v, 8); }

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static const char *errstr(int e, char *buf, size_t n)
{
    return strerror_r(e, buf, n);   /* GNU variant: returns the message */
}

static size_t dtype_size(int dtype)
{
    switch (dtype) {
    case WISP_F32: return 4;
    case WISP_F16: return 2;
    case WISP_I8:  return 1;
    default:       return 0;
    }
}

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

/* Validate meta text t[0..n) and build the key/value array: one allocation
 * holding (2k+1) pointers and the split strings. Failures return `status`
 * with a message prefixed by `who`. *kv_out may be NULL (validate only). */
static int parse_meta(const char *t, size_t n, int status, const char *who, char ***kv_out)
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

/* ---- loading ------------------------------------------------------------ */

struct sec {
    char name[NAME_LEN + 1];
    uint32_t dtype;
    float scale;
    uint64_t off, size, count, sum;
};

struct layout {
    uint64_t num_features;
    double bias;
    const struct sec *meta, *weights, *columns;
    struct sec secs[MAX_SECTIONS];
    uint32_t nsec;
};

static const char *dtype_label(uint32_t dt)
{
    if (dt == DT_TEXT) return "text";
    const char *n = wisp_dtype_name((int)dt);
    return n ? n : "unknown";
}

static int check_weights_finite(const char *path, const void *w, uint64_t n, int dtype)
{
    uint64_t bad = UINT64_MAX;
    if (dtype == WISP_F32) {
        const uint32_t *b = w;
        for (uint64_t i = 0; i < n; i++)
            if ((b[i] & 0x7f800000u) == 0x7f800000u) { bad = i; break; }
    } else if (dtype == WISP_F16) {
        const uint16_t *b = w;
        for (uint64_t i = 0; i < n; i++)
            if ((b[i] & 0x7c00u) == 0x7c00u) { bad = i; break; }
    }
    if (bad != UINT64_MAX)
        return wisp__fail(WISP_EFORMAT, "%s: section 'weights': weight %llu is not finite (inf or NaN)",
                         path, (ull)bad);
    return WISP_OK;
}

/* Validate the whole file image p[0..size); fills *L with pointers into p. */
static int parse_file(const unsigned char *p, uint64_t size, const char *path, struct layout *L)
{
    memset(L, 0, sizeof *L);
    if (size < 8)
        return wisp__fail(WISP_EFORMAT, "%s: truncated: the file is %llu bytes, shorter than the "
                         "%u-byte header", path, (ull)size, HDR_SIZE);
    if (memcmp(p + H_MAGIC, WISP_MAGIC, 8) != 0)
        return wisp__fail(WISP_EFORMAT, "%s: not a wisp model file (bad magic %02x %02x %02x %02x "
                         "%02x %02x %02x %02x, expected \"WISPMDL\\0\")", path,
                         p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
    if (size < 12)
        return wisp__fail(WISP_EFORMAT, "%s: truncated: the file is %llu bytes, shorter than the "
                         "%u-byte header", path, (ull)size, HDR_SIZE);
    uint32_t version = rd32(p + H_VERSION);
    if (version != WISP_FORMAT_VERSION)
        return wisp__fail(WISP_EVERSION, "%s: file format version %u, this build of wisp reads version %u",
                         path, version, (unsigned)WISP_FORMAT_VERSION);
    if (size < HDR_SIZE)
        return wisp__fail(WISP_EFORMAT, "%s: truncated: the file is %llu bytes, shorter than the "
                         "%u-byte header", path, (ull)size, HDR_SIZE);
    uint64_t file_size = rd64(p + H_FILE_SIZE);
    if (file_size != size)
        return wisp__fail(WISP_EFORMAT, "%s: the header says the file is %llu bytes but it is %llu (%s)",
                         path, (ull)file_size, (ull)size, size < file_size ? "truncated" : "extra bytes");
    uint32_t nsec = rd32(p + H_COUNT);
    if (nsec == 0 || nsec > MAX_SECTIONS)
        return wisp__fail(WISP_EFORMAT, "%s: section count %u is out of range (1 .. %u)", path, nsec, MAX_SECTIONS);
    uint64_t toff = rd64(p + H_TABLE), tsize = (uint64_t)nsec * ENTRY_SIZE, tend;
    if (toff < HDR_SIZE || toff % SEC_ALIGN != 0)
        return wisp__fail(WISP_EFORMAT, "%s: the section table offset %llu is not a 64-byte aligned offset "
                         "after the header", path, (ull)toff);
    if (__builtin_add_overflow(toff, tsize, &tend) || tend > size)
        return wisp__fail(WISP_EFORMAT, "%s: the section table extends past the end of the file "
                         "(offset %llu + %llu > %llu)", path, (ull)toff, (ull)tsize, (ull)size);
    const unsigned char *table = p + toff;

    /* header checksum: header with its checksum field zeroed, then the table */
    unsigned char hdr[HDR_SIZE];
    memcpy(hdr, p, HDR_SIZE);
    memset(hdr + H_CHECKSUM, 0, 8);
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, hdr, HDR_SIZE);
    XXH64_update(&st, table, (size_t)tsize);
    uint64_t hsum = XXH64_digest(&st), want = rd64(p + H_CHECKSUM);
    if (hsum != want)
        return wisp__fail(WISP_ECHECKSUM, "%s: checksum mismatch in the header and section table "
                         "(stored %016llx, computed %016llx)", path, (ull)want, (ull)hsum);

    L->num_features = rd64(p + H_NFEAT);
    L->bias = rdf64(p + H_BIAS);
    if (L->num_features == 0)
        return wisp__fail(WISP_EFORMAT, "%s: the model has no features (num_features 0)", path);
    if (L->num_features > WISP_MAX_FEATURES)
        return wisp__fail(WISP_ELIMIT, "%s: num_features %llu exceeds the limit of %llu", path,
                         (ull)L->num_features, (ull)WISP_MAX_FEATURES);
    if (!isfinite(L->bias))
        return wisp__fail(WISP_EFORMAT, "%s: the bias is not finite (%g)", path, L->bias);

    L->nsec = nsec;
    for (uint32_t i = 0; i < nsec; i++) {
        const unsigned char *e = table + (size_t)i * ENTRY_SIZE;
        struct sec *s = &L->secs[i];
        const unsigned char *nul = memchr(e + E_NAME, '\0', NAME_LEN);
        if (!nul)
            return wisp__fail(WISP_EFORMAT, "%s: section %u: the name is not NUL-terminated", path, i);
        size_t nlen = (size_t)(nul - (e + E_NAME));
        if (nlen == 0)
            return wisp__fail(WISP_EFORMAT, "%s: section %u has an empty name", path, i);
        for (size_t c = 0; c < nlen; c++)
            if (e[E_NAME + c] < 0x21 || e[E_NAME + c] > 0x7e)
                return wisp__fail(WISP_EFORMAT, "%s: section %u: the name has a non-printable byte 0x%02x",
                                 path, i, e[E_NAME + c]);
        memcpy(s->name, e + E_NAME, nlen);
        s->name[nlen] = '\0';
        s->dtype = rd32(e + E_DTYPE);
        s->scale = rdf32(e + E_SCALE);
        s->off = rd64(e + E_OFFSET);
        s->size = rd64(e + E_SIZE);
        s->count = rd64(e + E_COUNT);
        s->sum = rd64(e + E_CHECKSUM);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(L->secs[j].name, s->name) == 0)
                return wisp__fail(WISP_EFORMAT, "%s: section '%s' is listed twice (entries %u and %u)",
                                 path, s->name, j, i);
        uint64_t end;
        if (__builtin_add_overflow(s->off, s->size, &end) || end > size)
            return wisp__fail(WISP_EFORMAT, "%s: section '%s' extends past the end of the file "
                             "(offset %llu + %llu > %llu)", path, s->name, (ull)s->off, (ull)s->size, (ull)size);
        if (s->off % SEC_ALIGN != 0)
            return wisp__fail(WISP_EFORMAT, "%s: section '%s' is not 64-byte aligned (offset %llu)",
                             path, s->name, (ull)s->off);
        if (s->size > 0) {
            if (s->off < HDR_SIZE)
                return wisp__fail(WISP_EFORMAT, "%s: section '%s' overlaps the header (offset %llu)",
                                 path, s->name, (ull)s->off);
            if (s->off < tend && toff < end)
                return wisp__fail(WISP_EFORMAT, "%s: section '%s' overlaps the section table "
                                 "([%llu, %llu) and [%llu, %llu))", path, s->name,
                                 (ull)s->off, (ull)end, (ull)toff, (ull)tend);
            for (uint32_t j = 0; j < i; j++) {
                const struct sec *o = &L->secs[j];
                if (o->size > 0 && s->off < o->off + o->size && o->off < end)
                    return wisp__fail(WISP_EFORMAT, "%s: sections '%s' and '%s' overlap ([%llu, %llu) and "
                                     "[%llu, %llu))", path, o->name, s->name, (ull)o->off,
                                     (ull)(o->off + o->size), (ull)s->off, (ull)end);
            }
        }
        bool is_meta = strcmp(s->name, "meta") == 0, is_cols = strcmp(s->name, "columns") == 0;
        if (is_meta || is_cols) {
            if (s->dtype != DT_TEXT)
                return wisp__fail(WISP_EFORMAT, "%s: section '%s' has dtype %u, expected %u (text)",
                                 path, s->name, s->dtype, DT_TEXT);
            if (s->count != s->size)
                return wisp__fail(WISP_EFORMAT, "%s: section '%s': count %llu does not match its size "
                                 "%llu bytes", path, s->name, (ull)s->count, (ull)s->size);
            if (s->scale != 1.0f)
                return wisp__fail(WISP_EFORMAT, "%s: section '%s': scale %g, expected 1", path, s->name,
                                 (double)s->scale);
            if (is_meta) L->meta = s; else L->columns = s;
        } else if (strcmp(s->name, "weights") == 0) {
            size_t es = dtype_size((int)s->dtype);
            uint64_t bytes;
            if (es == 0)
                return wisp__fail(WISP_EFORMAT, "%s: section 'weights' has unknown dtype %u (expected "
                                 "0 f32, 1 f16 or 2 i8)", path, s->dtype);
            if (__builtin_mul_overflow(s->count, (uint64_t)es, &bytes))
                return wisp__fail(WISP_EFORMAT, "%s: section 'weights': count %llu of %s overflows "
                                 "a 64-bit size", path, (ull)s->count, dtype_label(s->dtype));
            if (bytes != s->size)
                return wisp__fail(WISP_EFORMAT, "%s: section 'weights': %llu %s values need %llu bytes, "
                                 "the section has %llu", path, (ull)s->count, dtype_label(s->dtype),
                                 (ull)bytes, (ull)s->size);
            if (s->count != L->num_features)
                return wisp__fail(WISP_EFORMAT, "%s: section 'weights' holds %llu weights but the header "
                                 "says num_features %llu", path, (ull)s->count, (ull)L->num_features);
            if (s->dtype == WISP_I8) {
                if (!(isfinite(s->scale) && s->scale > 0))
                    return wisp__fail(WISP_EFORMAT, "%s: section 'weights': int8 scale %g is not a finite "
                                     "positive number", path, (double)s->scale);
            } else if (s->scale != 1.0f) {
                return wisp__fail(WISP_EFORMAT, "%s: section 'weights': scale %g on %s weights, expected 1",
                                 path, (double)s->scale, dtype_label(s->dtype));
            }
            L->weights = s;
        }
        /* other names: from a later writer; bounds checked above, checksum below */
    }
    if (!L->weights) return wisp__fail(WISP_EFORMAT, "%s: missing section 'weights'", path);
    if (!L->meta) return wisp__fail(WISP_EFORMAT, "%s: missing section 'meta'", path);

    for (uint32_t i = 0; i < nsec; i++) {
        const struct sec *s = &L->secs[i];
        uint64_t h = XXH64(p + s->off, (size_t)s->size, 0);
        if (h != s->sum)
            return wisp__fail(WISP_ECHECKSUM, "%s: checksum mismatch in section '%s' (stored %016llx, "
                             "computed %016llx)", path, s->name, (ull)s->sum, (ull)h);
    }
    int rc = parse_meta((const char *)p + L->meta->off, (size_t)L->meta->size, WISP_EFORMAT, path, NULL);
    if (rc) return rc;
    if (L->columns && memchr(p + L->columns->off, '\0', (size_t)L->columns->size))
        return wisp__fail(WISP_EFORMAT, "%s: section 'columns' contains a NUL byte", path);
    return check_weights_finite(path, p + L->weights->off, L->num_features, (int)L->weights->dtype);
}

static char *copy_text(const unsigned char *p, uint64_t n)
{
    char *s = wisp__malloc((size_t)n + 1);
    if (s) { if (n) memcpy(s, p, (size_t)n); s[n] = '\0'; }
    return s;
}

void (*wisp_model_read_hook)(const char *path);

static void file_id_of(const struct stat *sb, wisp_model *m)
{
    m->file_id.dev = (uint64_t)sb->st_dev;
    m->file_id.ino = (uint64_t)sb->st_ino;
    m->file_id.size = (uint64_t)sb->st_size;
    m->file_id.mtime_s = (int64_t)sb->st_mtim.tv_sec;
    m->file_id.mtime_ns = (int64_t)sb->st_mtim.tv_nsec;
    m->file_id.ctime_s = (int64_t)sb->st_ctim.tv_sec;
    m->file_id.ctime_ns = (int64_t)sb->st_ctim.tv_nsec;
}

/* Which of size, mtime, ctime, inode and device differ between two fstats of
 * the open file; NULL when none does. A ctime change that comes with a link
 * count change is not one: a rename over the path (the safe way to replace a
 * model) unlinks the inode being read, which sets its ctime but not its bytes. */
static const char *stat_change(const struct stat *a, const struct stat *b)
{
    if (a->st_dev != b->st_dev || a->st_ino != b->st_ino) return "replaced (another inode)";
    if (a->st_size > b->st_size) return "truncated";
    if (a->st_size < b->st_size) return "grown";
    if (a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec)
        return "rewritten in place (mtime)";
    if ((a->st_ctim.tv_sec != b->st_ctim.tv_sec || a->st_ctim.tv_nsec != b->st_ctim.tv_nsec) &&
        a->st_nlink == b->st_nlink)
        return "changed in place (ctime)";
    return NULL;
}

/* The private region for a file image of `size` bytes: anonymous memory,
 * 2 MiB aligned and advised for transparent huge pages when the file is at
 * least a huge page (or `huge`), page aligned otherwise. */
static unsigned char *private_region(size_t size, bool huge, size_t *len_out)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096u;
    bool use_huge = huge || size >= HUGE_PAGE;
    size_t len = (size_t)align_up(size, use_huge ? HUGE_PAGE : page);
    size_t extra = use_huge ? HUGE_PAGE : 0;
    /* no MAP_NORESERVE: a copy larger than memory fails here, cleanly, not in the read */
    unsigned char *raw = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    unsigned char *al = raw;
    if (use_huge) {
        al = (unsigned char *)(uintptr_t)align_up((uintptr_t)raw, HUGE_PAGE);
        if (al > raw) munmap(raw, (size_t)(al - raw));
        size_t tail = (size_t)((raw + len + extra) - (al + len));
        if (tail) munmap(al + len, tail);
#ifdef MADV_HUGEPAGE
        madvise(al, len, MADV_HUGEPAGE);   /* best effort: THP may be disabled */
#endif
    }
    *len_out = len;
    return al;
}

/* Read the whole file (size bytes, as fstat said) into p with pread. A short
 * read, or a byte past `size`, means the file changed while being read. */
static int read_image(int fd, const char *path, unsigned char *p, size_t size)
{
    char buf[128];
    size_t got = 0;
    while (got < size) {
        size_t want = size - got < (8u << 20) ? size - got : (8u << 20);
        ssize_t n = pread(fd, p + got, want, (off_t)got);
        if (n < 0) {
            if (errno == EINTR) continue;
            return wisp__fail(WISP_EIO, "%s: read error at byte %zu: %s", path, got, errstr(errno, buf, sizeof buf));
        }
        if (n == 0)
            return wisp__fail(WISP_EIO, "%s: the file changed while being read (truncated: %zu of the %zu bytes "
                             "it had when opened); replace a served model by rename, never in place", path, got, size);
        got += (size_t)n;
    }
    unsigned char more;
    ssize_t n;
    do n = pread(fd, &more, 1, (off_t)size);
    while (n < 0 && errno == EINTR);
    if (n > 0)
        return wisp__fail(WISP_EIO, "%s: the file changed while being read (it grew past the %zu bytes it had "
                         "when opened); replace a served model by rename, never in place", path, size);
    return WISP_OK;
}

static void model_destroy(wisp_model *m)
{
    if (m->map) munmap(m->map, m->map_len);
    wisp__free(m->meta);
    wisp__free(m->columns);
    wisp__free(m->meta_kv);
    wisp__free(m->path);
    pthread_mutex_destroy(&m->dev_lock);
    wisp__free(m);
}

int wisp_model_load_ex(wisp_engine *eng, const char *path, unsigned flags, wisp_model **out)
{
    if (out) *out = NULL;
    if (!eng || !path || !out)
        return wisp__fail(WISP_EINVAL, "wisp_model_load: %s is NULL", !eng ? "eng" : !path ? "path" : "out");
    if (flags & ~(unsigned)WISP_LOAD_HUGEPAGES)
        return wisp__fail(WISP_EINVAL, "%s: unknown load flags 0x%x", path, flags);
    char buf[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return wisp__fail(WISP_EIO, "%s: cannot open: %s", path, errstr(errno, buf, sizeof buf));
    struct stat sb, sb2;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return wisp__fail(WISP_EIO, "%s: cannot stat: %s", path, errstr(e, buf, sizeof buf));
    }
    if (S_ISDIR(sb.st_mode)) { close(fd); return wisp__fail(WISP_EIO, "%s: is a directory, not a model file", path); }
    if (!S_ISREG(sb.st_mode)) { close(fd); return wisp__fail(WISP_EIO, "%s: not a regular file", path); }
    if (sb.st_size == 0) { close(fd); return wisp__fail(WISP_EFORMAT, "%s: empty file (0 bytes), not a wisp model", path); }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return wisp__fail(WISP_ELIMIT, "%s: %llu bytes is too large for this address space", path, (ull)sb.st_size);
    }
    size_t size = (size_t)sb.st_size, len = 0;
    unsigned char *img = private_region(size, (flags & WISP_LOAD_HUGEPAGES) != 0, &len);
    if (!img) {
        int e = errno;
        close(fd);
        return wisp__fail(WISP_ENOMEM, "%s: cannot allocate %zu bytes for the model's private copy: %s", path,
                         size, errstr(e, buf, sizeof buf));
    }
    if (wisp_model_read_hook) wisp_model_read_hook(path);
    int rc = read_image(fd, path, img, size);
    if (rc == WISP_OK) {
        const char *how;
        if (fstat(fd, &sb2) != 0)
            rc = wisp__fail(WISP_EIO, "%s: cannot stat: %s", path, errstr(errno, buf, sizeof buf));
        else if ((how = stat_change(&sb, &sb2)) != NULL)
            rc = wisp__fail(WISP_EIO, "%s: the file changed while loading (%s between the open and the end of the "
                           "read); replace a served model by rename, never in place", path, how);
    }
    close(fd);
    if (rc) { munmap(img, len); return rc; }
    /* from here on only the private copy is read: the file may change, the model cannot */
    if (mprotect(img, len, PROT_READ) != 0) {
        munmap(img, len);
        return wisp__fail(WISP_EIO, "%s: cannot make the model's copy read-only: %s", path, errstr(errno, buf, sizeof buf));
    }

    struct layout *L = wisp__malloc(sizeof *L);
    if (!L) { munmap(img, len); return wisp__fail(WISP_ENOMEM, "%s: out of memory", path); }
    rc = parse_file(img, size, path, L);
    if (rc) { wisp__free(L); munmap(img, len); return rc; }

    wisp_model *m = wisp__calloc(1, sizeof *m);
    if (!m) { wisp__free(L); munmap(img, len); return wisp__fail(WISP_ENOMEM, "%s: out of memory", path); }
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->dev_lock, NULL);
    atomic_init(&m->auto_cal, 0);
    atomic_init(&m->auto_nnz_one, UINT64_MAX);
    atomic_init(&m->auto_nnz_pool, UINT64_MAX);
    for (int c = 0; c < 2; c++) {
        atomic_init(&m->auto_rate[c][0], 0);
        atomic_init(&m->auto_rate[c][1], 0);
        atomic_init(&m->auto_tick[c], 0);
        atomic_init(&m->auto_probe[c], 0);
    }
    m->map = img;
    m->map_size = size;
    m->map_len = len;
    file_id_of(&sb, m);
    const unsigned char *p = img;
    m->num_features = L->num_features;
    m->bias = L->bias;
    m->dtype = (int)L->weights->dtype;
    m->scale = m->dtype == WISP_I8 ? L->weights->scale : 1.0f;
    m->weights = p + L->weights->off;
    m->eng = eng;                /* the reference is taken once the load succeeded */
    m->path = wisp__strdup(path);
    m->meta = copy_text(p + L->meta->off, L->meta->size);
    m->columns = L->columns ? copy_text(p + L->columns->off, L->columns->size) : copy_text(p, 0);
    if (!m->path || !m->meta || !m->columns) {
        wisp__free(L);
        model_destroy(m);
        return wisp__fail(WISP_ENOMEM, "%s: out of memory", path);
    }
    rc = parse_meta(m->meta, (size_t)L->meta->size, WISP_EFORMAT, path, &m->meta_kv);
    wisp__free(L);
    if (rc) { model_destroy(m); return rc; }
    wisp__engine_retain(eng);
    *out = m;
    return WISP_OK;
}

int wisp_model_file_changed(const wisp_model *m, char *why, size_t why_len)
{
    if (why && why_len) why[0] = '\0';
    if (!m) return wisp__fail(WISP_EINVAL, "wisp_model_file_changed: model is NULL");
    struct stat sb;
    char buf[128];
    const char *how = NULL;
    char detail[160] = "";
    if (stat(m->path, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            return wisp__fail(WISP_EIO, "%s: cannot stat: %s", m->path, errstr(errno, buf, sizeof buf));
        how = "removed (no file at the path now)";
    } else if ((uint64_t)sb.st_dev != m->file_id.dev || (uint64_t)sb.st_ino != m->file_id.ino) {
        how = "replaced (another file, e.g. renamed over it)";
    } else if ((uint64_t)sb.st_size < m->file_id.size) {
        how = "truncated in place";
        snprintf(detail, sizeof detail, " (%llu -> %llu bytes)", (ull)m->file_id.size, (ull)sb.st_size);
    } else if ((uint64_t)sb.st_size > m->file_id.size) {
        how = "rewritten in place";
        snprintf(detail, sizeof detail, " (grew %llu -> %llu bytes)", (ull)m->file_id.size, (ull)sb.st_size);
    } else if ((int64_t)sb.st_mtim.tv_sec != m->file_id.mtime_s || (int64_t)sb.st_mtim.tv_nsec != m->file_id.mtime_ns) {
        how = "rewritten in place";
        snprintf(detail, sizeof detail, " (same size, new modification time)");
    } else if ((int64_t)sb.st_ctim.tv_sec != m->file_id.ctime_s || (int64_t)sb.st_ctim.tv_nsec != m->file_id.ctime_ns) {
        how = "changed in place";
        snprintf(detail, sizeof detail, " (new inode change time: permissions, links or contents)");
    }
    if (!how) return 0;
    if (why && why_len)
        snprintf(why, why_len, "%s: %s%s since it was loaded; the loaded model still serves the bytes it verified",
                 m->path, how, detail);
    return 1;
}

int wisp_model_load(wisp_engine *eng, const char *path, wisp_model **out)
{
    return wisp_model_load_ex(eng, path, 0, out);
}

void wisp__model_retain(wisp_model *m)
{
    if (m) atomic_fetch_add(&m->refs, 1);
}

void wisp_model_free(wisp_model *m)
{
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    wisp_engine *eng = m->eng;
    const wisp_backend *gpu = NULL;
    void *gpu_ctx = NULL;
    if (eng) {
        gpu = __atomic_load_n(&eng->gpu, __ATOMIC_ACQUIRE);   /* published after its context (engine.c) */
        gpu_ctx = gpu ? eng->gpu_ctx : NULL;
    }
    if (gpu && gpu->model_release) gpu->model_release(gpu_ctx, m);
    model_destroy(m);
    wisp_engine_free(eng);
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

/* ---- writing ---------------------------------------------------------------- */

/* Produces n fp32 weights starting at index start into dst. */
typedef void (*fill_fn)(const void *ctx, uint64_t start, size_t n, float *dst);

static void fill_from_array(const void *ctx, uint64_t start, size_t n, float *dst)
{
    memcpy(dst, (const float *)ctx + start, n * sizeof(float));
}

static void fill_from_model(const void *ctx, uint64_t start, size_t n, float *dst)
{
    const wisp_model *m = ctx;
    for (size_t i = 0; i < n; i++) dst[i] = wisp_model_weight(m, start + i);
}

static void put_entry(unsigned char *e, const char *name, uint32_t dtype, float scale, uint64_t off,
                      uint64_t size, uint64_t count, uint64_t sum)
{
    memset(e, 0, ENTRY_SIZE);
    memcpy(e + E_NAME, name, strlen(name));
    wr32(e + E_DTYPE, dtype);
    wrf32(e + E_SCALE, scale);
    wr64(e + E_OFFSET, off);
    wr64(e + E_SIZE, size);
    wr64(e + E_COUNT, count);
    wr64(e + E_CHECKSUM, sum);
}

#define CHUNK 65536u

/* Encode weights [start, start + k) as dtype into obuf. */
static void encode_chunk(fill_fn fill, const void *ctx, uint64_t start, size_t k, int dtype, float scale,
                         float *fbuf, unsigned char *obuf)
{
    fill(ctx, start, k, fbuf);
    if (dtype == WISP_F32) {
        memcpy(obuf, fbuf, k * 4);
    } else if (dtype == WISP_F16) {
        for (size_t i = 0; i < k; i++) {
            uint16_t h = wisp__float_to_half(fbuf[i]);
            memcpy(obuf + 2 * i, &h, 2);
        }
    } else {
        for (size_t i = 0; i < k; i++) {
            double q = nearbyint((double)fbuf[i] / (double)scale);
            if (q > 127) q = 127;
            if (q < -127) q = -127;
            ((int8_t *)obuf)[i] = (int8_t)q;
        }
    }
}

/* Sequential output (a file, a FIFO, a character device): bytes at increasing
 * offsets, the gaps written as zeros. -1 with errno on a failed write. */
struct seq_out { int fd; uint64_t pos; };

static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) { errno = EIO; return -1; }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int seq_write(struct seq_out *w, uint64_t off, const void *buf, size_t n)
{
    static const unsigned char zeros[WEIGHTS_ALIGN];
    while (w->pos < off) {
        size_t z = off - w->pos < sizeof zeros ? (size_t)(off - w->pos) : sizeof zeros;
        if (write_full(w->fd, zeros, z)) return -1;
        w->pos += z;
    }
    if (n && write_full(w->fd, buf, n)) return -1;
    w->pos += n;
    return 0;
}

/* The file a write to `path` goes to: path itself, or (through any chain of
 * symbolic links) the file the link names, so the link stays a link. *direct
 * is set for a character device or a FIFO (written in place: a rename would
 * replace the node by a regular file). A directory, a socket or a block
 * device is refused. *out is the caller's to wisp__free. */
static int resolve_target(const char *path, char **out, bool *direct)
{
    char ebuf[128];
    *out = NULL;
    *direct = false;
    char *cur = wisp__strdup(path);
    if (!cur) return wisp__fail(WISP_ENOMEM, "%s: out of memory", path);
    for (int depth = 0;; depth++) {
        struct stat sb;
        if (lstat(cur, &sb) != 0) {
            if (errno == ENOENT) break;                     /* a new file (or a dangling link's target) */
            int e = errno;
            wisp__free(cur);
            return wisp__fail(WISP_EIO, "%s: cannot stat: %s", path, errstr(e, ebuf, sizeof ebuf));
        }
        if (S_ISLNK(sb.st_mode)) {
            char link[4096];
            ssize_t k = depth < 40 ? readlink(cur, link, sizeof link - 1) : -1;
            if (k < 0 || (size_t)k >= sizeof link - 1) {
                int e = depth < 40 ? (k < 0 ? errno : ENAMETOOLONG) : ELOOP;
                wisp__free(cur);
                return wisp__fail(WISP_EIO, "%s: cannot follow the symbolic link: %s", path, errstr(e, ebuf, sizeof ebuf));
            }
            link[k] = '\0';
            const char *slash = strrchr(cur, '/');
            size_t dlen = link[0] == '/' || !slash ? 0 : (size_t)(slash - cur) + 1;
            char *next = wisp__malloc(dlen + (size_t)k + 1);
            if (!next) { wisp__free(cur); return wisp__fail(WISP_ENOMEM, "%s: out of memory", path); }
            memcpy(next, cur, dlen);
            memcpy(next + dlen, link, (size_t)k + 1);
            wisp__free(cur);
            cur = next;
            continue;
        }
        if (S_ISDIR(sb.st_mode)) {
            wisp__free(cur);
            return wisp__fail(WISP_EINVAL, "%s: is a directory; name the model file to write", path);
        }
        if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) *direct = true;
        else if (!S_ISREG(sb.st_mode)) {
            wisp__free(cur);
            return wisp__fail(WISP_EINVAL, "%s: is a %s, not a regular file, character device or FIFO", path,
                             S_ISBLK(sb.st_mode) ? "block device" : S_ISSOCK(sb.st_mode) ? "socket" : "special file");
        }
        break;
    }
    *out = cur;
    return WISP_OK;
}


static int write_model(const char *path, fill_fn fill, const void *ctx, uint64_t n, double bias,
                       int dtype, const char *meta, const char *columns)
{
    char ebuf[128];
    if (!path || !*path) return wisp__fail(WISP_EINVAL, "wisp_model_write: path is NULL or empty");
    size_t es = dtype_size(dtype);
    if (es == 0) return wisp__fail(WISP_EINVAL, "%s: unknown weight dtype %d (f32 0, f16 1, i8 2)", path, dtype);
    if (n == 0) return wisp__fail(WISP_EINVAL, "%s: a model needs at least one feature (num_features 0)", path);
    if (n > WISP_MAX_FEATURES)
        return wisp__fail(WISP_ELIMIT, "%s: num_features %llu exceeds the limit of %llu", path, (ull)n,
                         (ull)WISP_MAX_FEATURES);
    if (!isfinite(bias)) return wisp__fail(WISP_EINVAL, "%s: the bias is not finite (%g)", path, bias);

    /* meta: validated, and ended with a newline */
    size_t mlen = meta ? strlen(meta) : 0;
    int rc = parse_meta(meta ? meta : "", mlen, WISP_EINVAL, path, NULL);
    if (rc) return rc;
    size_t clen = columns ? strlen(columns) : 0;

    float *fbuf = wisp__malloc(CHUNK * sizeof(float));
    unsigned char *obuf = wisp__malloc(CHUNK * 4);
    char *mtext = wisp__malloc(mlen + 2);
    if (!fbuf || !obuf || !mtext) {
        wisp__free(fbuf); wisp__free(obuf); wisp__free(mtext);
        return wisp__fail(WISP_ENOMEM, "%s: out of memory", path);
    }
    memcpy(mtext, meta ? meta : "", mlen);
    if (mlen > 0 && mtext[mlen - 1] != '\n') mtext[mlen++] = '\n';
    mtext[mlen] = '\0';

    /* pass 1: every weight finite and representable; max |w| for int8 */
    float maxabs = 0.0f;
    rc = WISP_OK;
    for (uint64_t start = 0; start < n && rc == WISP_OK; start += CHUNK) {
        size_t k = (size_t)(n - start < CHUNK ? n - start : CHUNK);
        fill(ctx, start, k, fbuf);
        for (size_t i = 0; i < k; i++) {
            float a = fabsf(fbuf[i]);
            if (!isfinite(a)) {
                rc = wisp__fail(WISP_EINVAL, "%s: weight %llu is %s", path, (ull)(start + i),
                               isnan(a) ? "NaN" : "infinite");
                break;
            }
            if (dtype == WISP_F16 && a >= 65520.0f) {
                rc = wisp__fail(WISP_EINVAL, "%s: weight %llu (%g) is outside the fp16 range "
                               "(|w| < 65520)", path, (ull)(start + i), (double)fbuf[i]);
                break;
            }
            if (a > maxabs) maxabs = a;
        }
    }
    float scale = 1.0f;
    if (dtype == WISP_I8 && maxabs > 0.0f) {
        scale = (float)((double)maxabs / 127.0);
        if (!(scale >= FLT_MIN)) scale = FLT_MIN;   /* tiny tables: keep the scale normal and positive */
    }

    /* layout */
    uint32_t nsec = clen ? 3 : 2;
    uint64_t toff = HDR_SIZE, tsize = (uint64_t)nsec * ENTRY_SIZE;
    uint64_t moff = align_up(toff + tsize, SEC_ALIGN);
    uint64_t coff = align_up(moff + mlen, SEC_ALIGN);
    uint64_t woff = align_up(clen ? coff + clen : moff + mlen, WEIGHTS_ALIGN);
    uint64_t wbytes = n * es, fsize = woff + wbytes;

    /* where the bytes go: `path`, or the file a symlink at `path` names */
    char *target = NULL;
    bool direct = false;
    if (rc == WISP_OK) rc = resolve_target(path, &target, &direct);
    char *tmp = NULL;
    if (rc == WISP_OK && !direct && !(tmp = wisp__malloc(strlen(target) + 64)))
        rc = wisp__fail(WISP_ENOMEM, "%s: out of memory", path);

    /* pass 2: the weights' checksum (the header, written first, holds it) */
    uint64_t wsum = 0;
    if (rc == WISP_OK) {
        XXH64_state_t st;
        XXH64_reset(&st, 0);
        for (uint64_t start = 0; start < n; start += CHUNK) {
            size_t k = (size_t)(n - start < CHUNK ? n - start : CHUNK);
            encode_chunk(fill, ctx, start, k, dtype, scale, fbuf, obuf);
            XXH64_update(&st, obuf, k * es);
        }
        wsum = XXH64_digest(&st);
    }

    /* a regular file (or a new one): a temporary file next to it, then rename;
     * a character device or a FIFO: written directly, in offset order */
    int fd = -1;
    bool created = false;
    if (rc == WISP_OK && direct) {
        fd = open(target, O_WRONLY | O_CLOEXEC);
        if (fd < 0) rc = wisp__fail(WISP_EIO, "%s: cannot open for writing: %s", path, errstr(errno, ebuf, sizeof ebuf));
    } else if (rc == WISP_OK) {
        static atomic_uint counter;
        for (int tries = 0; tries < 100; tries++) {
            snprintf(tmp, strlen(target) + 64, "%s.tmp-%ld-%u", target, (long)getpid(),
                     atomic_fetch_add(&counter, 1) + 1);
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (fd >= 0 || errno != EEXIST) break;
        }
        if (fd < 0) rc = wisp__fail(WISP_EIO, "%s: cannot create the temporary file %s: %s", path, tmp,
                                   errstr(errno, ebuf, sizeof ebuf));
        else created = true;
    }
    int io_errno = 0;
    const char *what = NULL;
    if (rc == WISP_OK) {
        struct seq_out w = { fd, 0 };
        unsigned char head[HDR_SIZE + 3 * ENTRY_SIZE];
        memset(head, 0, sizeof head);
        memcpy(head + H_MAGIC, WISP_MAGIC, 8);
        wr32(head + H_VERSION, WISP_FORMAT_VERSION);
        wr32(head + H_COUNT, nsec);
        wr64(head + H_FILE_SIZE, fsize);
        wr64(head + H_TABLE, toff);
        wr64(head + H_NFEAT, n);
        wrf64(head + H_BIAS, bias);
        unsigned char *t = head + HDR_SIZE;
        put_entry(t, "meta", DT_TEXT, 1.0f, moff, mlen, mlen, XXH64(mtext, mlen, 0));
        put_entry(t + ENTRY_SIZE, "weights", (uint32_t)dtype, scale, woff, wbytes, n, wsum);
        if (clen) put_entry(t + 2 * ENTRY_SIZE, "columns", DT_TEXT, 1.0f, coff, clen, clen, XXH64(columns, clen, 0));
        wr64(head + H_CHECKSUM, XXH64(head, HDR_SIZE + tsize, 0));
        bool ok = seq_write(&w, 0, head, HDR_SIZE + tsize) == 0 && seq_write(&w, moff, mtext, mlen) == 0 &&
                  (!clen || seq_write(&w, coff, columns, clen) == 0);
        for (uint64_t start = 0; ok && start < n; start += CHUNK) {
            size_t k = (size_t)(n - start < CHUNK ? n - start : CHUNK);
            encode_chunk(fill, ctx, start, k, dtype, scale, fbuf, obuf);
            ok = seq_write(&w, woff + start * es, obuf, k * es) == 0;
        }
        if (!ok) { io_errno = errno; what = "write"; }
        else if (w.pos != fsize) { io_errno = EIO; what = "write"; }
        /* fsync a file; a device or FIFO may not support it (EINVAL): its writes are done */
        else if (fsync(fd) && !(direct && (errno == EINVAL || errno == EROFS || errno == ENOTSUP)))
            { io_errno = errno; what = "fsync"; }
    }
    if (fd >= 0) {
        if (close(fd) && rc == WISP_OK && !what) { io_errno = errno; what = "close"; }
    }
    if (rc == WISP_OK && !what && !direct && rename(tmp, target)) { io_errno = errno; what = "rename"; }
    if (rc == WISP_OK && what)
        rc = wisp__fail(WISP_EIO, "%s: cannot %s %s: %s", path, what,
                       direct ? "it" : strcmp(what, "rename") == 0 ? "the temporary file into place" : "the temporary file",
                       errstr(io_errno, ebuf, sizeof ebuf));
    if (rc != WISP_OK && created) unlink(tmp);
    if (rc == WISP_OK && !direct) {
        /* make the rename durable: fsync the directory (best effort) */
        char *dir = wisp__strdup(target);
        if (dir) {
            char *slash = strrchr(dir, '/');
            const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
            int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) { fsync(dfd); close(dfd); }
            wisp__free(dir);
        }
    }
    wisp__free(fbuf); wisp__free(obuf); wisp__free(mtext); wisp__free(tmp); wisp__free(target);
    return rc;
}

int wisp_model_write(const char *path, const float *weights, uint64_t num_features, double bias, int dtype,
                     const char *meta, const char *columns)
{
    if (!weights && num_features > 0)
        return wisp__fail(WISP_EINVAL, "%s: weights is NULL", path ? path : "wisp_model_write");
    return write_model(path, fill_from_array, weights, num_features, bias, dtype, meta, columns);
}

int wisp_model_convert(const wisp_model *m, const char *path, int dtype)
{
    if (!m) return wisp__fail(WISP_EINVAL, "wisp_model_convert: model is NULL");
    if (!wisp_dtype_name(dtype))
        return wisp__fail(WISP_EINVAL, "%s: unknown weight dtype %d (f32 0, f16 1, i8 2)", path ? path : "?", dtype);
    /* the meta without any converted_from line, then converted_from=<dtype> */
    const char *from = wisp_dtype_name(m->dtype);
    size_t len = strlen(m->meta);
    char *meta = wisp__malloc(len + 128);
    if (!meta) return wisp__fail(WISP_ENOMEM, "%s: out of memory", path ? path : "?");
    size_t o = 0;
    for (const char *ln = m->meta; *ln;) {
        const char *nl = strchr(ln, '\n');
        size_t l = nl ? (size_t)(nl - ln) : strlen(ln);
        if (l > 0 && strncmp(ln, "converted_from=", 15) != 0) {
            memcpy(meta + o, ln, l);
            o += l;
            meta[o++] = '\n';
        }
        ln += l + (nl ? 1 : 0);
    }
    o += (size_t)snprintf(meta + o, 64, "converted_from=%s\n", from ? from : "unknown");
    meta[o] = '\0';
    int rc = write_model(path, fill_from_model, m, m->num_features, m->bias, dtype, meta,
                         m->columns[0] ? m->columns : NULL);
    wisp__free(meta);
    return rc;
}
