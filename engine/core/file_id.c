/* file_id.c — a file's identity (stat(2): device, inode, size, mtime, ctime) and a directory's names, for callers that read no struct stat or struct dirent (the Lua layer). */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

static const char *errstr(int e, char *buf, size_t n)
{
    return strerror_r(e, buf, n);   /* GNU variant: returns the message */
}

int wisp_file_id_read(const char *path, int64_t out[6])
{
    if (!path || !out) return wisp__fail(WISP_EINVAL, "wisp_file_id_read: %s is NULL", path ? "out" : "path");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char buf[128];
        return wisp__fail(WISP_EIO, "%s: cannot stat: %s", path, errstr(errno, buf, sizeof buf));
    }
    out[0] = (int64_t)(uint64_t)sb.st_dev;
    out[1] = (int64_t)(uint64_t)sb.st_ino;
    out[2] = (int64_t)sb.st_size;
    out[3] = (int64_t)sb.st_mtim.tv_sec * 1000000000 + (int64_t)sb.st_mtim.tv_nsec;
    out[4] = (int64_t)sb.st_ctim.tv_sec * 1000000000 + (int64_t)sb.st_ctim.tv_nsec;
    out[5] = S_ISDIR(sb.st_mode) ? 1 : 0;
    return WISP_OK;
}

int wisp_dir_list(const char *path, char *buf, size_t cap, size_t *len)
{
    if (!path || !len || (!buf && cap)) {
        if (len) *len = 0;
        return wisp__fail(WISP_EINVAL, "wisp_dir_list: %s is NULL", !path ? "path" : !len ? "len" : "buf");
    }
    *len = 0;
    char ebuf[128];
    DIR *d = opendir(path);
    if (!d) return wisp__fail(WISP_EIO, "%s: cannot open the directory: %s", path, errstr(errno, ebuf, sizeof ebuf));
    size_t need = 0, used = 0;
    bool full = false;         /* a name did not fit: later ones are counted, not written */
    for (;;) {
        errno = 0;
        struct dirent *ent = readdir(d);
        if (!ent) {
            int e = errno;
            closedir(d);
            if (e) return wisp__fail(WISP_EIO, "%s: cannot read the directory: %s", path, errstr(e, ebuf, sizeof ebuf));
            break;
        }
        const char *name = ent->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
        size_t n = strlen(name) + 1;
        if (!full && cap - used >= n) {
            memcpy(buf + used, name, n);
            used += n;
        } else {
            full = true;
        }
        need += n;
    }
    *len = need;
    return WISP_OK;
}
