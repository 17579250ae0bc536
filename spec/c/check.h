/* check.h — the tiny assertion harness of the C unit tests: counts, never aborts. */
#ifndef WISP_CHECK_H
#define WISP_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond) do { \
    if (cond) check_passed++; \
    else { check_failed++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
} while (0)

#define CHECK_MSG(cond, ...) do { \
    if (cond) check_passed++; \
    else { check_failed++; fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
} while (0)

/* a status call that must succeed; prints wisp_errmsg() when it does not */
#define CHECK_OK(call) do { int st_ = (call); \
    CHECK_MSG(st_ == 0, "%s -> %d (%s)", #call, st_, wisp_errmsg()); } while (0)

/* a status call that must fail with `code` and a message containing `needle` */
#define CHECK_FAILS(call, code, needle) do { int st_ = (call); \
    CHECK_MSG(st_ == (code) && strstr(wisp_errmsg(), (needle)) != NULL, \
              "%s -> %d '%s', wanted %d with '%s'", #call, st_, wisp_errmsg(), (int)(code), (needle)); } while (0)

#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); \
    CHECK_MSG(fabs(a_ - b_) <= (tol), "%s = %.9g, %s = %.9g, tol %g", #a, a_, #b, b_, (double)(tol)); } while (0)

/* the closing line every test program prints; the runner adds them up */
#define CHECK_DONE(name) ( printf("%s: %d passed, %d failed\n", (name), check_passed, check_failed), \
                           check_failed ? 1 : 0 )

#endif
