/* svcfuzz.c — the service fuzzer: random methods, paths, headers, framings and mutated bodies sent to a real nginx over raw sockets; every answer checked.
 *
 *   svcfuzz --port P --dir D [--seconds 30] [--seed N] [--conns 2] [--out DIR]
 *   svcfuzz --port P --replay FILE          send FILE's bytes as they are, print the answer, check it
 *
 * D: the bodies of spec/nginx/models.lua (rows.json, rows.libsvm, rows.ndjson for the columns model
 * "ctr", plain.json, plain.libsvm for "plain"); spec/nginx/svcfuzz.sh makes them and starts nginx.
 * Each execution is one connection, one request built from: a method (the real ones, lowercase,
 * garbage, overlong), a path (every route, models that exist and not, :predict/:reload/odd verbs,
 * percent-encoded, query strings, absolute URIs, 6 KB paths, bytes that are not UTF-8), headers
 * (every Content-Type the service knows, with charset parameters, odd case, unknown, missing;
 * Content-Length right, missing, short, long, huge, negative, twice; Transfer-Encoding chunked,
 * valid and broken; Content-Encoding gzip; Expect: 100-continue; a 70 KB header; 300 headers)
 * and a body (a valid one of each format, or a mutation: truncated, bytes flipped, quotes,
 * newlines or NULs inserted, huge numbers, 100k-deep nesting, invalid UTF-8, random bytes); 3 in
 * 100 connections close before the request is whole, 1 in 8 carries 2-5 requests (keepalive).
 * Properties checked on every answer:
 *   answer   an HTTP answer comes (except where the request leaves nginx waiting for body bytes)
 *   status   never 500, 502, 504; 503 only for "worker threads busy"; a clean request (valid
 *            framing, no mutation) gets exactly the status the README's contract gives it
 *   json     every body is JSON (but /metrics' text), checked by a strict validator
 *   ctype    a JSON body says Content-Type: application/json
 * The first failing requests of each property are saved as OUT/svcfuzz-PROPERTY-N.req (replay
 * with --replay). Prints "svcfuzz: executions N", a line per property and "svcfuzz: N passed,
 * N failed" (properties); spec/nginx/svcfuzz.sh adds the workers' check (the same pids, none
 * exited on a signal).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "svchttp.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

static int port = 0, conns = 2;
static double seconds = 30;
static unsigned long long seed = 1;
static const char *dir = NULL, *outdir = "/tmp";

enum { P_ANSWER, P_STATUS, P_JSON, P_CTYPE, P_N };
static const char *pname[P_N] = { "answer", "status", "json", "ctype" };
static atomic_long keepalive_conns, keepalive_reuses;
static atomic_long checked[P_N], violated[P_N], executions, early_closes, no_answer_ok, clean_requests;
static atomic_long by_status[P_N][1000];     /* violations by the answer's status */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int saved[P_N], saved_st[P_N][1000];     /* kept so far: of a property, of a property and status */

typedef struct { char *p; size_t len, cap; } buf;
static void b_add(buf *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->len + n + 1) c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p) { perror("svcfuzz"); exit(2); }
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}
static void b_str(buf *b, const char *s) { b_add(b, s, strlen(s)); }
static void b_fmt(buf *b, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void b_fmt(buf *b, const char *f, ...)
{
    char t[1024];
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(t, sizeof t, f, ap);
    va_end(ap);
    b_add(b, t, n < (int)sizeof t ? (size_t)n : sizeof t - 1);
}

static uint64_t rnd(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static size_t rn(uint64_t *s, size_t n) { return n ? (size_t)(rnd(s) % n) : 0; }
static bool chance(uint64_t *s, int pct) { return (int)rn(s, 100) < pct; }

typedef struct { const char *name; char *data; size_t len; const char *model; const char *ctype; } body_t;
static body_t bodies[5];
static int nbodies = 0;

/* route kinds for the clean-request contract */
enum { RT_PREDICT, RT_META, RT_LIST, RT_HEALTH, RT_READY, RT_METRICS, RT_RELOAD, RT_UNKNOWN_MODEL, RT_UNKNOWN_VERB, RT_NOT_FOUND, RT_ODD };
typedef struct { const char *path; int kind; const char *model; } route_t;
static const route_t routes[] = {
    { "/v1/models/ctr:predict", RT_PREDICT, "ctr" }, { "/v1/models/plain:predict", RT_PREDICT, "plain" },
    { "/v1/models/ctr:predict", RT_PREDICT, "ctr" }, { "/v1/models/plain:predict", RT_PREDICT, "plain" },
    { "/v1/models/ctr", RT_META, "ctr" }, { "/v1/models/plain", RT_META, "plain" }, { "/v1/models", RT_LIST, NULL },
    { "/v1/models/", RT_LIST, NULL }, { "/healthz", RT_HEALTH, NULL }, { "/readyz", RT_READY, NULL },
    { "/metrics", RT_METRICS, NULL }, { "/v1/models/ctr:reload", RT_RELOAD, "ctr" },
    { "/v1/models/nosuch:predict", RT_UNKNOWN_MODEL, NULL }, { "/v1/models/ctr:explain", RT_UNKNOWN_VERB, NULL },
    { "/v2/whatever", RT_NOT_FOUND, NULL }, { "/", RT_NOT_FOUND, NULL },
    { "/v1/models/ctr:", RT_ODD, NULL }, { "/v1/models/ctr:predict/x", RT_ODD, NULL }, { "/v1/models/ctr%3Apredict", RT_ODD, NULL },
    { "/v1/models/%63tr:predict", RT_ODD, NULL }, { "/%2e%2e/%2e%2e/etc/passwd", RT_ODD, NULL }, { "/v1/models/ctr:predict?x=1&y", RT_ODD, NULL },
    { "/v1/models/ctr:predict%00", RT_ODD, NULL }, { "/v1/models/ct\xffr:predict", RT_ODD, NULL }, { "//v1//models/ctr:predict", RT_ODD, NULL },
    { "http://127.0.0.1/v1/models/ctr:predict", RT_ODD, NULL }, { "/v1/models/ctr:predict#frag", RT_ODD, NULL },
    { "/v1/models/../models/ctr:predict", RT_ODD, NULL }, { "/healthz/", RT_ODD, NULL }, { "/v1/models/ctr::predict", RT_ODD, NULL },
    { "/v1/models/plain:reload?", RT_ODD, NULL }, { "/v1/models/:predict", RT_ODD, NULL },
};
#define NROUTES (sizeof routes / sizeof routes[0])

static const char *ctypes[] = { "application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "Application/Json;charset=UTF-8",
    "text/plain", "text/x-libsvm", "text/plain; charset=latin1", "application/x-ndjson", "application/jsonl", "application/jsonl; charset=utf-8",
    "application/xml", "multipart/form-data; boundary=x", "", "application/json;", " application/json ", "application/x-www-form-urlencoded",
    "text/html", "\x01\x02", "application/json, text/plain", "*/*" };
#define NCTYPES (sizeof ctypes / sizeof ctypes[0])
/* the body kind a Content-Type names: 'j' json, 'l' libsvm, 'n' JSON lines, 0 unsupported */
static char ctype_kind(const char *c)
{
    while (*c == ' ') c++;
    char t[64]; size_t n = 0;
    while (c[n] && c[n] != ';' && c[n] != ' ' && n < sizeof t - 1) { t[n] = (char)(c[n] >= 'A' && c[n] <= 'Z' ? c[n] + 32 : c[n]); n++; }
    t[n] = '\0';
    if (!strcmp(t, "application/json")) return 'j';
    if (!strcmp(t, "text/plain") || !strcmp(t, "text/x-libsvm")) return 'l';
    if (!strcmp(t, "application/x-ndjson") || !strcmp(t, "application/jsonl")) return 'n';
    return 0;
}

static void mutate(buf *b, uint64_t *s)
{
    int rounds = 1 + (int)rn(s, 4);
    for (int r = 0; r < rounds; r++) {
        int k = (int)rn(s, 9);
        if (b->len == 0) k = 7;
        size_t at = rn(s, b->len + 1);
        switch (k) {
        case 0: b->len = at; b->p[b->len] = '\0'; break;                              /* truncate */
        case 1: for (int i = 0; i < 4 && b->len; i++) b->p[rn(s, b->len)] ^= (char)(1u << rn(s, 8)); break;  /* flip bits */
        case 2: case 3: case 4: case 5: case 6: {                                    /* insert */
            static const char *ins[] = { "\"", "\n", "\0", "1e999999", "-0", "123456789012345678901234567890", "9223372036854775808",
                                         "\xff\xfe", "\xc3\x28", "\xed\xa0\x80", "\\u0000", "\\ud800", "{", "}", "[", "]", ",", ":", "null", "NaN",
                                         "Infinity", "1e39", "\r\n", "\t", " 1:2", "4294967297:1", "#", "{\"x\":" };
            size_t w = rn(s, sizeof ins / sizeof ins[0]);
            size_t il = w == 2 ? 1 : strlen(ins[w]);
            buf t = { 0 };
            b_add(&t, b->p, at); b_add(&t, ins[w], il); b_add(&t, b->p + at, b->len - at);
            free(b->p); *b = t;
            break;
        }
        case 7: { size_t n = 1 + rn(s, 64); for (size_t i = 0; i < n; i++) { char c = (char)rnd(s); b_add(b, &c, 1); } break; }
        case 8: { /* deep nesting at a random point */
            size_t depth = chance(s, 50) ? 100000 : 40 + rn(s, 600);
            buf t = { 0 };
            b_add(&t, b->p, at);
            for (size_t i = 0; i < depth; i++) b_add(&t, "[", 1);
            for (size_t i = 0; i < depth; i++) b_add(&t, "]", 1);
            b_add(&t, b->p + at, b->len - at);
            free(b->p); *b = t;
            break;
        }
        }
    }
}

typedef struct {
    buf req;                /* the bytes sent */
    bool head;              /* HEAD: no body in the answer */
    bool may_hang;          /* the request leaves nginx waiting (more body announced than sent) */
    bool early_close;       /* we close before the request is whole */
    bool clean;             /* valid framing, known method, no mutation: the contract gives the status */
    int want;               /* the contract's status for a clean request (0: any allowed) */
    int want_alt;           /* a second allowed status */
    bool metrics;           /* GET /metrics: text */
    size_t cut;             /* early_close: bytes sent */
} req_t;

/* ka: one of several requests on a keepalive connection: its framing is right (else the stream
   would desynchronise) and it never closes early */
static void build(req_t *q, uint64_t *s, bool ka)
{
    memset(q, 0, sizeof *q);
    buf *r = &q->req;
    bool clean = true;
    /* method */
    static const char *methods[] = { "POST", "POST", "POST", "POST", "GET", "GET", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE",
                                     "post", "FOO", "P\x01ST", "CONNECT" };
    size_t mi = rn(s, sizeof methods / sizeof methods[0]);
    const char *method = methods[mi];
    char longm[400];
    if (chance(s, 1)) { memset(longm, 'X', sizeof longm - 1); longm[sizeof longm - 1] = '\0'; method = longm; }
    bool known = !strcmp(method, "POST") || !strcmp(method, "GET") || !strcmp(method, "HEAD") || !strcmp(method, "PUT") ||
                 !strcmp(method, "DELETE") || !strcmp(method, "OPTIONS") || !strcmp(method, "PATCH");
    if (!known) clean = false;
    q->head = !strcmp(method, "HEAD");
    /* path */
    const route_t *rt = chance(s, 35) ? &routes[rn(s, 2)] : &routes[rn(s, NROUTES)];   /* :predict most */
    if (rt->kind == RT_RELOAD && !chance(s, 10)) rt = &routes[0];    /* :reload rarely (it loads the file) */
    buf path = { 0 };
    int pk = (int)rn(s, 100);
    if (pk < 2) { b_str(&path, "/v1/models/"); for (int i = 0; i < 6000; i++) b_add(&path, "a", 1); b_str(&path, ":predict"); clean = false; }
    else if (pk < 4) { b_str(&path, "/v1/models/"); for (int i = 0; i < 300; i++) b_add(&path, "%41", 3); b_str(&path, ":predict"); clean = false; }
    else b_str(&path, rt->path);
    if (rt->kind == RT_ODD) clean = false;
    const char *version = "HTTP/1.1";
    int vk = (int)rn(s, 100);
    if (vk < 5) version = "HTTP/1.0";
    else if (vk < 7) { version = chance(s, 50) ? "HTTP/2.0" : "HTTP/1.1x"; clean = false; }
    b_fmt(r, "%s ", method); b_add(r, path.p, path.len); b_fmt(r, " %s\r\n", version);
    free(path.p);
    if (!chance(s, 3)) b_str(r, "Host: 127.0.0.1\r\n"); else if (strcmp(version, "HTTP/1.0")) clean = false;
    b_str(r, ka ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    /* body */
    buf body = { 0 };
    const body_t *bd = NULL;
    bool want_body = !strcmp(method, "POST") || !strcmp(method, "PUT") || chance(s, 10);
    if (want_body && nbodies) {
        if (chance(s, 5)) { size_t n = rn(s, 2000); for (size_t i = 0; i < n; i++) { char c = (char)rnd(s); b_add(&body, &c, 1); } clean = false; }
        else {
            bd = &bodies[rn(s, (size_t)nbodies)];
            if (rt->model && chance(s, 70)) {         /* a body of the route's model */
                for (int t = 0; t < 8; t++) { const body_t *c = &bodies[rn(s, (size_t)nbodies)]; if (!strcmp(c->model, rt->model)) { bd = c; break; } }
            }
            size_t n = bd->len;
            if (chance(s, 30)) {                      /* fewer rows: cut at a line (libsvm / JSON lines) */
                if (bd->ctype[0] != 'a' || strstr(bd->ctype, "ndjson")) {
                    size_t lines = 1 + rn(s, 10), at = 0;
                    for (size_t i = 0; i < lines && at < n; i++) { const char *e = memchr(bd->data + at, '\n', n - at); at = e ? (size_t)(e - bd->data) + 1 : n; }
                    n = at;
                }
            }
            b_add(&body, bd->data, n);
            if (chance(s, 45)) { mutate(&body, s); clean = false; }
        }
    }
    /* Content-Type */
    const char *ct = NULL;
    int ck = (int)rn(s, 100);
    if (bd && ck < 60) ct = bd->ctype;
    else if (ck < 92) ct = ctypes[rn(s, NCTYPES)];
    if (ct) b_fmt(r, "Content-Type: %s\r\n", ct);
    if (ct && (ct[0] == '\x01' || strchr(ct, ','))) clean = false;
    bool gz = chance(s, 6);                 /* the service does not decode: 415 (README) */
    if (gz) b_str(r, "Content-Encoding: gzip\r\n");
    bool expect = chance(s, 4);
    if (expect) b_str(r, "Expect: 100-continue\r\n");
    if (chance(s, 2)) { b_str(r, "X-Big: "); for (int i = 0; i < 70000; i++) b_add(r, "b", 1); b_str(r, "\r\n"); clean = false; }
    if (chance(s, 2)) { for (int i = 0; i < 300; i++) b_fmt(r, "X-H%d: v\r\n", i); clean = false; }
    if (chance(s, 2)) { b_str(r, "X-Bad\x7f: \xff\r\n"); clean = false; }
    /* framing */
    int fk = (int)rn(s, 100);
    if (ka && fk >= 70 && fk < 89) fk = 0;
    bool chunked = false;
    if (body.len == 0 && fk < 70) { if (want_body || chance(s, 50)) b_str(r, "Content-Length: 0\r\n"); }
    else if (fk < 70) b_fmt(r, "Content-Length: %zu\r\n", body.len);
    else if (fk < 76) { clean = false; }                                                    /* no length: the body is ignored */
    else if (fk < 80) { b_fmt(r, "Content-Length: %zu\r\n", body.len + 1 + rn(s, 100)); q->may_hang = true; clean = false; }
    else if (fk < 83) { b_fmt(r, "Content-Length: %zu\r\n", body.len ? rn(s, body.len) : 0); clean = false; }
    else if (fk < 85) { b_str(r, chance(s, 50) ? "Content-Length: 99999999999\r\n" : "Content-Length: 18446744073709551617\r\n"); q->may_hang = true; clean = false; }
    else if (fk < 87) { b_str(r, chance(s, 50) ? "Content-Length: -5\r\n" : "Content-Length: 12abc\r\n"); clean = false; }
    else if (fk < 89) { b_fmt(r, "Content-Length: %zu\r\nContent-Length: %zu\r\n", body.len, body.len + 3); clean = false; }
    else {
        chunked = true;
        b_str(r, "Transfer-Encoding: chunked\r\n");
        if (!strcmp(version, "HTTP/1.0")) clean = false;        /* chunked is HTTP/1.1's: nginx says 400 */
        if (chance(s, 10)) { b_fmt(r, "Content-Length: %zu\r\n", body.len); clean = false; }   /* both: 400 */
    }
    b_str(r, "\r\n");
    if (chunked) {
        bool broken = !ka && chance(s, 35);
        size_t at = 0;
        while (at < body.len) {
            size_t n = 1 + rn(s, 4000);
            if (n > body.len - at) n = body.len - at;
            if (broken && chance(s, 20)) { b_str(r, chance(s, 50) ? "zz\r\n" : "ffffffffffffffffff\r\n"); q->may_hang = true; }
            else b_fmt(r, "%zx\r\n", n);
            b_add(r, body.p + at, n); b_str(r, "\r\n");
            at += n;
        }
        if (!broken || chance(s, 50)) b_str(r, "0\r\n\r\n"); else q->may_hang = true;
        if (broken) clean = false;
    } else b_add(r, body.p, body.len);
    if (!ka && chance(s, 3)) { q->early_close = true; q->cut = rn(s, r->len); }

    /* the contract for a clean request */
    q->clean = clean && !q->early_close && !q->may_hang && !expect;
    q->metrics = rt->kind == RT_METRICS;
    int want = 0, alt = 0;
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST"), head = q->head;
    switch (rt->kind) {
    case RT_HEALTH: want = (get || head) ? 200 : 405; break;
    case RT_READY: want = (get || head) ? 200 : 405; break;
    case RT_METRICS: want = get ? 200 : 405; alt = head ? 200 : 0; break;
    case RT_LIST: want = get ? 200 : 405; alt = head ? 200 : 0; break;
    case RT_META: want = (get || head) ? 200 : 405; break;
    case RT_RELOAD: want = post ? 200 : 405; alt = post ? 500 : 0; break;
    case RT_UNKNOWN_MODEL: want = 404; break;
    case RT_UNKNOWN_VERB: want = 404; break;
    case RT_NOT_FOUND: want = 404; break;
    case RT_PREDICT:
        if (!post) { want = 405; break; }
        if (gz && body.len > 0) { want = 415; break; }
        if (body.len == 0) { want = ct && ctype_kind(ct) ? 400 : 415; alt = 400; break; }
        if (!ct || !ctype_kind(ct)) { want = 415; break; }
        if (ctype_kind(ct) == 'n' && !strcmp(rt->model, "plain")) { want = 415; break; }
        /* a valid body of this model in its own format: 200; another model's or format's body: 400 (or 200 when it happens to parse) */
        if (bd && !strcmp(bd->model, rt->model) && ctype_kind(ct) == ctype_kind(bd->ctype)) want = 200;
        else { want = 400; alt = 200; }
        break;
    default: want = 0;
    }
    if (gz && !(rt->kind == RT_PREDICT && post && body.len > 0)) q->clean = false;
    q->want = want; q->want_alt = alt;
    free(body.p);
}

static void save(int prop, const req_t *q, const char *why, int status)
{
    if (status >= 0 && status < 1000) atomic_fetch_add(&by_status[prop][status], 1);
    pthread_mutex_lock(&mu);
    int st = status >= 0 && status < 1000 ? status : 0;
    int n = saved[prop];
    if (saved_st[prop][st]++ < 2 && n < 8) {                 /* two of each status, eight in all */
        saved[prop]++;
        char path[4096];
        snprintf(path, sizeof path, "%s/svcfuzz-%s-%d.req", outdir, pname[prop], n + 1);
        FILE *f = fopen(path, "wb");
        if (f) { fwrite(q->req.p, 1, q->req.len, f); fclose(f); }
        printf("FAIL %s: %s\n     request (%zu bytes): %.160s%s\n     saved: %s (replay: sh spec/nginx/svcfuzz.sh --replay %s)\n", pname[prop], why,
               q->req.len, q->req.p, q->req.len > 160 ? "..." : "", path, path);
        fflush(stdout);
    }
    pthread_mutex_unlock(&mu);
}

static void excerpt(char *dst, size_t dl, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < dl; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f) dst[o++] = (char)c;
        else o += (size_t)snprintf(dst + o, dl - o, "\\x%02x", c);
    }
    dst[o] = '\0';
}

static bool check(int fd, req_t *q, bool verbose);

/* send one request and check the answer; verbose: print it (replay) */
static void execute(req_t *q, bool verbose)
{
    atomic_fetch_add(&executions, 1);
    int fd = svc_connect(port);
    if (fd < 0) {
        atomic_fetch_add(&checked[P_ANSWER], 1); atomic_fetch_add(&violated[P_ANSWER], 1);
        save(P_ANSWER, q, "connect failed (nginx not listening?)", 0);
        return;
    }
    if (q->early_close) {
        svc_send(fd, q->req.p, q->cut, 2000);
        close(fd);
        atomic_fetch_add(&early_closes, 1);
        return;
    }
    check(fd, q, verbose);
    close(fd);
}

/* send q on fd, read and check its answer; returns true when the connection can carry another */
static bool check(int fd, req_t *q, bool verbose)
{
    int src = svc_send(fd, q->req.p, q->req.len, 5000);
    svc_answer a;
    svc_read_answer(fd, &a, q->may_hang ? 1500 : 10000, q->head, 1 << 24);
    size_t cl;
    const char *conn = a.hdr_len ? svc_header(&a, "Connection", &cl) : NULL;
    bool again = a.complete && a.status && !(conn && cl >= 5 && strncasecmp(conn, "close", 5) == 0);
    char why[1200], ex[700];
    excerpt(ex, sizeof ex, a.raw ? a.raw : "", a.len < 300 ? a.len : 300);
    if (verbose) printf("answer (%zu bytes%s%s): %s\n", a.len, a.complete ? "" : ", incomplete: ", a.complete ? "" : (a.why ? a.why : "?"), ex);
    atomic_fetch_add(&checked[P_ANSWER], 1);
    if (!a.complete || a.status == 0) {
        if (q->may_hang && a.len == 0) atomic_fetch_add(&no_answer_ok, 1);
        else if (src != 0 && a.len == 0) atomic_fetch_add(&no_answer_ok, 1);  /* nginx answered early and closed while we sent */
        else {
            atomic_fetch_add(&violated[P_ANSWER], 1);
            snprintf(why, sizeof why, "no complete HTTP answer (%s; %zu bytes read: %s)", a.why ? a.why : "no status line", a.len, ex);
            save(P_ANSWER, q, why, 0);
        }
        svc_answer_free(&a);
        return false;
    }
    /* status */
    atomic_fetch_add(&checked[P_STATUS], 1);
    bool st_ok = true;
    const char *what = "";
    if (a.status == 500 || a.status == 502 || a.status == 504) { st_ok = false; what = "a status the contract never gives"; }
    else if (a.status == 503 && !strstr(a.body, "busy")) { st_ok = false; what = "503 while every model is loaded"; }
    else if (q->clean) {
        atomic_fetch_add(&clean_requests, 1);
        if (q->want && a.status != q->want && a.status != q->want_alt) { st_ok = false; what = "the contract's status for this clean request is another"; }
    }
    bool contract_says_so = q->clean && q->want && (a.status == q->want || a.status == q->want_alt);
    if (!st_ok && !contract_says_so) {
        atomic_fetch_add(&violated[P_STATUS], 1);
        if (q->clean && q->want) snprintf(why, sizeof why, "HTTP %d (%s; expected %d%s%.0d): %s", a.status, what, q->want, q->want_alt ? " or " : "", q->want_alt, ex);
        else snprintf(why, sizeof why, "HTTP %d (%s): %s", a.status, what, ex);
        save(P_STATUS, q, why, a.status);
    }
    /* body: JSON, with its Content-Type */
    if (!q->head && a.body_len > 0 && !(q->metrics && a.status == 200)) {
        atomic_fetch_add(&checked[P_JSON], 1);
        if (!svc_is_json(a.body, a.body_len)) {
            atomic_fetch_add(&violated[P_JSON], 1);
            snprintf(why, sizeof why, "HTTP %d with a body that is not JSON: %s", a.status, ex);
            save(P_JSON, q, why, a.status);
        }
        atomic_fetch_add(&checked[P_CTYPE], 1);
        if (strncasecmp(a.ctype, "application/json", 16) != 0) {
            atomic_fetch_add(&violated[P_CTYPE], 1);
            snprintf(why, sizeof why, "HTTP %d: Content-Type '%s' (a JSON answer says application/json): %s", a.status, a.ctype, ex);
            save(P_CTYPE, q, why, a.status);
        }
    }
    svc_answer_free(&a);
    return again;
}

static void *worker(void *arg)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)(uintptr_t)arg * 104729 + 1;
    double t0 = svc_now();
    while (svc_now() - t0 < seconds) {
        req_t q;
        if (chance(&s, 12)) {                     /* 2-5 requests on one keepalive connection */
            int fd = svc_connect(port);
            if (fd < 0) continue;
            int n = 2 + (int)rn(&s, 4);
            atomic_fetch_add(&keepalive_conns, 1);
            for (int i = 0; i < n; i++) {
                build(&q, &s, i + 1 < n);
                atomic_fetch_add(&executions, 1);
                bool again = check(fd, &q, false);
                free(q.req.p);
                if (!again) break;
                atomic_fetch_add(&keepalive_reuses, 1);
            }
            close(fd);
            continue;
        }
        build(&q, &s, false);
        execute(&q, false);
        free(q.req.p);
    }
    return NULL;
}

static void load_body(const char *name, const char *model, const char *ctype)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len;
    char *d = svc_slurp(path, &len);
    if (!d) { fprintf(stderr, "svcfuzz: cannot read %s\n", path); exit(2); }
    bodies[nbodies++] = (body_t){ name, d, len, model, ctype };
}

int main(int argc, char **argv)
{
    const char *replay = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port")) port = atoi(v);
        else if (!strcmp(k, "--dir")) dir = v;
        else if (!strcmp(k, "--seconds")) seconds = atof(v);
        else if (!strcmp(k, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--conns")) conns = atoi(v);
        else if (!strcmp(k, "--out")) outdir = v;
        else if (!strcmp(k, "--replay")) replay = v;
        else { fprintf(stderr, "svcfuzz: unknown option %s\n", k); return 2; }
    }
    if (!port || (!dir && !replay) || seed == 0 || conns < 1 || conns > 16) {
        fprintf(stderr, "usage: svcfuzz --port P --dir D [--seconds S] [--seed N>0] [--conns N] [--out DIR] | --port P --replay FILE\n");
        return 2;
    }
    if (replay) {
        req_t q;
        memset(&q, 0, sizeof q);
        size_t len;
        q.req.p = svc_slurp(replay, &len);
        if (!q.req.p) { fprintf(stderr, "svcfuzz: cannot read %s\n", replay); return 2; }
        q.req.len = len;
        q.head = !strncmp(q.req.p, "HEAD ", 5);
        q.metrics = strstr(q.req.p, " /metrics ") != NULL;
        outdir = "/tmp";
        execute(&q, true);
        long v = 0;
        for (int p = 0; p < P_N; p++) v += atomic_load(&violated[p]);
        printf("replay: %s\n", v ? "FAILED (above)" : "the answer passes every check");
        return v ? 1 : 0;
    }
    load_body("rows.json", "ctr", "application/json");
    load_body("rows.libsvm", "ctr", "text/x-libsvm");
    load_body("rows.ndjson", "ctr", "application/x-ndjson");
    load_body("plain.json", "plain", "application/json");
    load_body("plain.libsvm", "plain", "text/plain");
    printf("svcfuzz: seed %llu, %d connections at a time, %.0f s\n", seed, conns, seconds);
    fflush(stdout);
    pthread_t th[16];
    for (int i = 0; i < conns; i++) pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
    for (int i = 0; i < conns; i++) pthread_join(th[i], NULL);
    printf("svcfuzz: executions %ld (clean requests checked against the contract %ld, closed early %ld, left waiting for a body %ld, "
           "%ld keepalive connections carried %ld more requests)\n", atomic_load(&executions), atomic_load(&clean_requests),
           atomic_load(&early_closes), atomic_load(&no_answer_ok), atomic_load(&keepalive_conns), atomic_load(&keepalive_reuses));
    int pass = 0, fail = 0;
    for (int p = 0; p < P_N; p++) {
        long c = atomic_load(&checked[p]), v = atomic_load(&violated[p]);
        printf("svcfuzz: property %-6s %ld answers checked, %ld violations", pname[p], c, v);
        const char *sep = " (by status:";
        for (int st = 0; st < 1000; st++) {
            long k = atomic_load(&by_status[p][st]);
            if (k) { printf("%s %d x%ld", sep, st, k); sep = ","; }
        }
        printf("%s\n", *sep == ',' ? ")" : "");
        if (v == 0 && c > 0) pass++; else fail++;
    }
    printf("svcfuzz: %d passed, %d failed\n", pass, fail);
    return fail ? 1 : 0;
}
