/* model.c — .wisp model files loaded: read into a private copy, validated, made read-only; file changes seen. */

/*
 * The file format: engine/model/format.h.
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
 * page-cache sharing), and a load copies the file once (a mapping would read
 * it in place).
 *
 * Page-cache sharing (MAP_SHARED) is used on no path: a shared mapping is
 * only safe when the file cannot change under the process, and neither test
 * wisp could make proves that. A read-only mount
 * (ST_RDONLY) is often a read-only bind of a writable file system (a container
 * volume) that the host still writes; FS_IMMUTABLE_FL can be cleared by root
 * and the file then truncated. Catching SIGBUS inside a library that runs in
 * nginx workers (siglongjmp out of a scoring loop) is worse than the memory.
 * WISP_LOAD_HUGEPAGES asks for huge pages for models below 2 MiB too (the
 * copy is always private).
 *
 * The stat comparison cannot see a rewrite that keeps the size within the
 * file system's timestamp granularity and lands between the two fstat calls
 * without changing ctime: the checksums then refuse any bytes that differ.
 */

#include "model/format.h"

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
    int rc = wisp__model_parse_meta((const char *)p + L->meta->off, (size_t)L->meta->size, WISP_EFORMAT, path, NULL);
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
    if (sb.st_size == 0) {
        close(fd);
        return wisp__fail(WISP_EFORMAT, "%s: empty file (0 bytes), not a wisp model", path);
    }
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
        return wisp__fail(WISP_EIO, "%s: cannot make the model's copy read-only: %s", path,
                          errstr(errno, buf, sizeof buf));
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
    rc = wisp__model_parse_meta(m->meta, (size_t)L->meta->size, WISP_EFORMAT, path, &m->meta_kv);
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
