/* test_file_id.c — wisp_file_id_read against stat(2) (a file, a directory, a symlink, a missing path, a file rewritten in place or renamed over) and wisp_dir_list. */
#include "check.h"
#include "wisp.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

/* the paths this test makes, each "tmpdir/name": made once by main, read by the cases as P(name) */
static const char *const NAMES[] = { "a.wisp", "d", "link.wisp", "dlink", "dangling.wisp", "missing.wisp", "a.wisp/x",
                                     "m.wisp", "m.wisp.new", "repo", "repo/1", "repo/2", "repo/config.json", "empty",
                                     "nodir" };
enum { NNAMES = sizeof NAMES / sizeof NAMES[0] };
static char paths[NNAMES][300];

static const char *P(const char *name)
{
    for (int i = 0; i < NNAMES; i++)
        if (strcmp(NAMES[i], name) == 0) return paths[i];
    fprintf(stderr, "test_file_id: no path for %s\n", name);
    exit(2);
}

static int write_file(const char *path, const char *text, int flags)
{
    int fd = open(path, O_WRONLY | O_CREAT | flags, 0644);
    if (fd < 0) return -1;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

static int64_t ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

/* every field of id against stat(path) */
static void check_against_stat(const char *what, const char *path, const int64_t id[6])
{
    struct stat sb;
    CHECK_MSG(stat(path, &sb) == 0, "%s: stat(%s)", what, path);
    CHECK_MSG((uint64_t)id[0] == (uint64_t)sb.st_dev, "%s: dev %lld vs %llu", what, (long long)id[0],
              (unsigned long long)sb.st_dev);
    CHECK_MSG((uint64_t)id[1] == (uint64_t)sb.st_ino, "%s: ino %lld vs %llu", what, (long long)id[1],
              (unsigned long long)sb.st_ino);
    CHECK_MSG(id[2] == (int64_t)sb.st_size, "%s: size %lld vs %lld", what, (long long)id[2], (long long)sb.st_size);
    CHECK_MSG(id[3] == ns_of(sb.st_mtim), "%s: mtime %lld vs %lld", what, (long long)id[3], (long long)ns_of(sb.st_mtim));
    CHECK_MSG(id[4] == ns_of(sb.st_ctim), "%s: ctime %lld vs %lld", what, (long long)id[4], (long long)ns_of(sb.st_ctim));
    CHECK_MSG(id[5] == (S_ISDIR(sb.st_mode) ? 1 : 0), "%s: is_dir %lld", what, (long long)id[5]);
}

static void test_file_and_dir(void)
{
    int64_t id[6];
    CHECK(write_file(P("a.wisp"), "twelve bytes", O_TRUNC) == 0);
    /* an mtime with nanoseconds of its own, so that a truncated or rounded field shows */
    struct timespec times[2] = { { 1700000000, 123456789 }, { 1700000001, 987654321 } };
    CHECK(utimensat(AT_FDCWD, P("a.wisp"), times, 0) == 0);
    CHECK_OK(wisp_file_id_read(P("a.wisp"), id));
    check_against_stat("file", P("a.wisp"), id);
    CHECK(id[2] == 12);
    CHECK(id[3] == 1700000001LL * 1000000000 + 987654321);
    CHECK(id[5] == 0);

    CHECK(mkdir(P("d"), 0755) == 0);
    CHECK_OK(wisp_file_id_read(P("d"), id));
    check_against_stat("directory", P("d"), id);
    CHECK(id[5] == 1);
}

static void test_symlink(void)
{
    int64_t id[6], target[6];
    CHECK(symlink("a.wisp", P("link.wisp")) == 0);
    CHECK_OK(wisp_file_id_read(P("link.wisp"), id));
    CHECK_OK(wisp_file_id_read(P("a.wisp"), target));
    check_against_stat("symlink", P("link.wisp"), id);     /* stat follows the link */
    CHECK(memcmp(id, target, sizeof id) == 0);
    struct stat lsb;
    CHECK(lstat(P("link.wisp"), &lsb) == 0 && (uint64_t)lsb.st_ino != (uint64_t)id[1]);
    /* a link to a directory is a directory */
    CHECK(symlink("d", P("dlink")) == 0);
    CHECK_OK(wisp_file_id_read(P("dlink"), id));
    CHECK(id[5] == 1);
    /* a dangling link cannot be examined */
    CHECK(symlink("nowhere.wisp", P("dangling.wisp")) == 0);
    int64_t keep[6] = { 1, 2, 3, 4, 5, 6 };
    CHECK_FAILS(wisp_file_id_read(P("dangling.wisp"), keep), WISP_EIO, "dangling.wisp: cannot stat");
    CHECK(keep[0] == 1 && keep[5] == 6);
}

static void test_missing_and_args(void)
{
    int64_t id[6] = { 7, 7, 7, 7, 7, 7 };
    CHECK_FAILS(wisp_file_id_read(P("missing.wisp"), id), WISP_EIO, "missing.wisp: cannot stat: No such file");
    for (int i = 0; i < 6; i++) CHECK(id[i] == 7);                  /* unchanged on failure */
    CHECK_FAILS(wisp_file_id_read(P("a.wisp/x"), id), WISP_EIO, "cannot stat");   /* a file as a directory */
    CHECK_FAILS(wisp_file_id_read(NULL, id), WISP_EINVAL, "path is NULL");
    CHECK_FAILS(wisp_file_id_read(P("a.wisp"), NULL), WISP_EINVAL, "out is NULL");
}

static void test_rewritten_and_renamed(void)
{
    int64_t before[6], after[6];
    CHECK(write_file(P("m.wisp"), "version one", O_TRUNC) == 0);
    struct timespec old[2] = { { 1600000000, 5 }, { 1600000000, 5 } };
    CHECK(utimensat(AT_FDCWD, P("m.wisp"), old, 0) == 0);
    CHECK_OK(wisp_file_id_read(P("m.wisp"), before));

    /* rewritten in place (cp over it): the same device and inode, another size and mtime */
    CHECK(write_file(P("m.wisp"), "version two, longer", O_TRUNC) == 0);
    CHECK_OK(wisp_file_id_read(P("m.wisp"), after));
    check_against_stat("rewritten", P("m.wisp"), after);
    CHECK(after[0] == before[0] && after[1] == before[1]);
    CHECK(after[2] == 19 && after[2] != before[2]);
    CHECK(after[3] != before[3]);
    CHECK(after[4] >= before[4]);

    /* renamed over (the safe replacement): another inode at the same path */
    CHECK_OK(wisp_file_id_read(P("m.wisp"), before));
    CHECK(write_file(P("m.wisp.new"), "version three", O_TRUNC | O_EXCL) == 0);
    int64_t fresh[6];
    CHECK_OK(wisp_file_id_read(P("m.wisp.new"), fresh));
    CHECK(rename(P("m.wisp.new"), P("m.wisp")) == 0);
    CHECK_OK(wisp_file_id_read(P("m.wisp"), after));
    check_against_stat("renamed over", P("m.wisp"), after);
    CHECK(after[1] != before[1]);
    CHECK(after[1] == fresh[1] && after[2] == 13);
}

/* the NUL-separated names of buf[0..len) contain name exactly once */
static int count_name(const char *buf, size_t len, const char *name)
{
    int n = 0;
    for (size_t i = 0; i < len; i += strlen(buf + i) + 1)
        if (strcmp(buf + i, name) == 0) n++;
    return n;
}

static void test_dir_list(void)
{
    CHECK(mkdir(P("repo"), 0755) == 0);
    CHECK(mkdir(P("repo/1"), 0755) == 0);
    CHECK(mkdir(P("repo/2"), 0755) == 0);
    CHECK(write_file(P("repo/config.json"), "{}", O_TRUNC) == 0);
    char buf[256];
    size_t len = 0;
    CHECK_OK(wisp_dir_list(P("repo"), buf, sizeof buf, &len));
    CHECK(len == strlen("1") + strlen("2") + strlen("config.json") + 3);
    CHECK(count_name(buf, len, "1") == 1 && count_name(buf, len, "2") == 1 && count_name(buf, len, "config.json") == 1);
    CHECK(count_name(buf, len, ".") == 0 && count_name(buf, len, "..") == 0);

    /* too small a buffer: whole names only, and the length all of them need */
    char small[8];
    memset(small, 'x', sizeof small);
    size_t need = 0;
    CHECK_OK(wisp_dir_list(P("repo"), small, 5, &need));
    CHECK(need == len);
    size_t used = 0;
    while (used < 5 && small[used] != 'x') used += strlen(small + used) + 1;
    CHECK(used <= 5);
    CHECK(small[5] == 'x');                                   /* nothing written past cap */
    CHECK_OK(wisp_dir_list(P("repo"), NULL, 0, &need));       /* only the length */
    CHECK(need == len);

    /* an empty directory */
    CHECK(mkdir(P("empty"), 0755) == 0);
    CHECK_OK(wisp_dir_list(P("empty"), buf, sizeof buf, &len));
    CHECK(len == 0);

    /* failures */
    len = 99;
    CHECK_FAILS(wisp_dir_list(P("nodir"), buf, sizeof buf, &len), WISP_EIO, "nodir: cannot open the directory");
    CHECK(len == 0);
    CHECK_FAILS(wisp_dir_list(P("a.wisp"), buf, sizeof buf, &len), WISP_EIO, "cannot open the directory");
    CHECK_FAILS(wisp_dir_list(NULL, buf, sizeof buf, &len), WISP_EINVAL, "path is NULL");
    CHECK_FAILS(wisp_dir_list(P("repo"), buf, sizeof buf, NULL), WISP_EINVAL, "len is NULL");
    CHECK_FAILS(wisp_dir_list(P("repo"), NULL, 4, &len), WISP_EINVAL, "buf is NULL");
}

static void rm_tree(void)
{
    const char *files[] = { "a.wisp", "link.wisp", "dlink", "dangling.wisp", "m.wisp", "repo/config.json" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(P(files[i]));
    const char *dirs[] = { "repo/1", "repo/2", "repo", "empty", "d" };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) rmdir(P(dirs[i]));
    rmdir(tmpdir);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/wisp-fileid-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    for (int i = 0; i < NNAMES; i++) snprintf(paths[i], sizeof paths[i], "%s/%s", tmpdir, NAMES[i]);
    test_file_and_dir();
    test_symlink();
    test_missing_and_args();
    test_rewritten_and_renamed();
    test_dir_list();
    rm_tree();
    return CHECK_DONE("test_file_id");
}
