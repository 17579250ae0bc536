/* model_write.c — .wisp files written: weights encoded (f32, f16, int8) and checksummed, replaced atomically by
 * rename (or written in place to a FIFO or character device); a loaded model converted to another dtype. */
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
#include <sys/stat.h>
#include <unistd.h>

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
                return wisp__fail(WISP_EIO, "%s: cannot follow the symbolic link: %s", path,
                                  errstr(e, ebuf, sizeof ebuf));
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
    int rc = wisp__model_parse_meta(meta ? meta : "", mlen, WISP_EINVAL, path, NULL);
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
        if (fd < 0)
            rc = wisp__fail(WISP_EIO, "%s: cannot open for writing: %s", path, errstr(errno, ebuf, sizeof ebuf));
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
                       direct ? "it"
                       : strcmp(what, "rename") == 0 ? "the temporary file into place" : "the temporary file",
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
