/* testutil.h — small helpers shared by the C tests: a growable string and reading a whole file. */
#ifndef WISP_TESTUTIL_H
#define WISP_TESTUTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a growable string, always NUL-terminated; out of memory ends the test (exit 2) */
typedef struct { char *s; size_t len, cap; } str;
static inline void sput(str *o, const char *p, size_t n)
{
    if (o->len + n + 1 > o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 4096;
        while (nc < o->len + n + 1) nc *= 2;
        o->s = realloc(o->s, nc);
        if (!o->s) { fprintf(stderr, "test: out of memory\n"); exit(2); }
        o->cap = nc;
    }
    memcpy(o->s + o->len, p, n);
    o->len += n;
    o->s[o->len] = '\0';
}
static inline void sputs(str *o, const char *p) { sput(o, p, strlen(p)); }
static inline void sprintf_(str *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void sprintf_(str *o, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sput(o, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* a whole file, NUL-terminated (NULL when it cannot be read); *len its size */
static inline char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    fclose(f);
    if (s) { s[n] = '\0'; if (len) *len = (size_t)n; }
    return s;
}

/* n hex digits at h as bytes into out; returns the byte count */
static inline size_t unhex(const char *h, size_t n, unsigned char *out)
{
    size_t k = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned v;
        sscanf(h + i, "%2x", &v);
        out[k++] = (unsigned char)v;
    }
    return k;
}

/* where the golden-vector files are: $WISP_SPEC_DATA, or spec/data */
static inline const char *data_dir(void)
{
    const char *d = getenv("WISP_SPEC_DATA");
    return d ? d : "spec/data";
}

#endif
