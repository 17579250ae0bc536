/* error.c — thread-local error messages, status strings, and the counted allocator. */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char errbuf[1024];

const char *wisp_version(void) { return "0.1.0"; }

const char *wisp_errmsg(void) { return errbuf; }

void wisp__clear_error(void) { errbuf[0] = '\0'; }

int wisp__failv(int status, const char *fmt, va_list ap)
{
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    return status;
}

int wisp__fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wisp__failv(status, fmt, ap);
    va_end(ap);
    return status;
}

int wisp__fail_context(int status, const char *fmt, ...)
{
    char prefix[512], old[sizeof errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, errbuf, sizeof old);
    snprintf(errbuf, sizeof errbuf, "%s: %s", prefix, old[0] ? old : wisp_strerror(status));
    return status;
}

static const struct { int code; const char *name, *text; } codes[] = {
    { WISP_OK,        "WISP_OK",        "success" },
    { WISP_EINVAL,    "WISP_EINVAL",    "invalid argument" },
    { WISP_ENOMEM,    "WISP_ENOMEM",    "out of host memory" },
    { WISP_EIO,       "WISP_EIO",       "input/output error" },
    { WISP_EFORMAT,   "WISP_EFORMAT",   "malformed model file" },
    { WISP_ECHECKSUM, "WISP_ECHECKSUM", "checksum mismatch" },
    { WISP_EVERSION,  "WISP_EVERSION",  "unsupported model file version" },
    { WISP_EPARSE,    "WISP_EPARSE",    "malformed input" },
    { WISP_ELIMIT,    "WISP_ELIMIT",    "limit exceeded" },
    { WISP_ENODEV,    "WISP_ENODEV",    "no such device" },
    { WISP_EDEVICE,   "WISP_EDEVICE",   "device failure" },
    { WISP_ESTATE,    "WISP_ESTATE",    "operation not allowed in this state" },
};

const char *wisp_strerror(int status)
{
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].code == status) return codes[i].text;
    return "unknown status";
}

const char *wisp_err_name(int status)
{
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (codes[i].code == status) return codes[i].name;
    return "WISP_EUNKNOWN";
}

/* ---- counted allocation, with a fault-injection hook for tests ---------- */

static atomic_uint_fast64_t alloc_seen;
static atomic_uint_fast64_t alloc_fail_at;   /* 0: never */

uint64_t wisp_fault_alloc_after(uint64_t nth)
{
    uint64_t seen = atomic_exchange(&alloc_seen, 0);
    atomic_store(&alloc_fail_at, nth);
    return seen;
}

static bool alloc_should_fail(void)
{
    uint64_t n = atomic_fetch_add(&alloc_seen, 1) + 1;
    uint64_t at = atomic_load_explicit(&alloc_fail_at, memory_order_relaxed);
    return WISP_UNLIKELY(at != 0 && n == at);
}

void *wisp__malloc(size_t n)
{
    if (alloc_should_fail()) return NULL;
    return malloc(n ? n : 1);
}

void *wisp__calloc(size_t n, size_t size)
{
    if (alloc_should_fail()) return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *wisp__realloc(void *p, size_t n)
{
    if (alloc_should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void wisp__free(void *p) { free(p); }

char *wisp__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = wisp__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

uint64_t wisp__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
