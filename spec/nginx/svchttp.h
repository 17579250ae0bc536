/* svchttp.h — a small HTTP/1.1 client over raw loopback sockets and a JSON validator, for spec/nginx/svcfuzz.c and soak.c (no dependencies).
 *
 * One request a connection (the harnesses send "Connection: close" or their own bytes):
 * svc_connect, svc_send (all of it, or fail), svc_read_answer (status line, headers, the body
 * by Content-Length, chunked or close; every wait bounded by a poll timeout). The validator
 * accepts exactly RFC 8259 JSON (any value at the top, UTF-8 checked in strings), depth < 512.
 * Everything is static: each program includes it once.
 */
#ifndef SVCHTTP_H
#define SVCHTTP_H
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double svc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int svc_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* 0 when every byte went out; -1 (the peer closed, or timeout_ms passed without progress) */
static int svc_send(int fd, const void *buf, size_t len, int timeout_ms)
{
    const char *p = buf;
    while (len > 0) {
        struct pollfd pf = { fd, POLLOUT, 0 };
        if (poll(&pf, 1, timeout_ms) <= 0) return -1;
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) { if (errno == EINTR || errno == EAGAIN) continue; return -1; }
        p += n; len -= (size_t)n;
    }
    return 0;
}

typedef struct {
    int status;                 /* 0: no status line came */
    char *raw; size_t len, cap; /* everything read */
    size_t hdr_len;             /* bytes of the status line + headers + blank line */
    char *body; size_t body_len;/* decoded body (chunks joined), NUL-terminated */
    char ctype[128];
    bool has_clen, chunked, complete;
    int interim;                /* 1xx answers skipped (100 Continue) */
    const char *why;            /* why incomplete */
} svc_answer;

static void svc_answer_free(svc_answer *a) { free(a->raw); free(a->body); memset(a, 0, sizeof *a); }

static const char *svc_header(const svc_answer *a, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    const char *p = memchr(a->raw, '\n', a->hdr_len);
    const char *end = a->raw + a->hdr_len;
    while (p && p + 1 < end) {
        p++;
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) break;
        if ((size_t)(e - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1;
            while (v < e && (*v == ' ' || *v == '\t')) v++;
            const char *ve = e;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ')) ve--;
            *vlen = (size_t)(ve - v);
            return v;
        }
        p = e;
    }
    return NULL;
}

/* read until the answer is complete, the peer closes, or timeout_ms passes without a byte;
   head_only: the request was HEAD (no body follows the headers) */
static int svc_read_answer(int fd, svc_answer *a, int timeout_ms, bool head_only, size_t max_bytes)
{
    memset(a, 0, sizeof *a);
    a->cap = 65536;
    a->raw = malloc(a->cap + 1);
    if (!a->raw) return -1;
    size_t need_body = (size_t)-1;
    for (;;) {
        if (a->hdr_len) {
            size_t have = a->len - a->hdr_len;
            if (head_only || a->status == 204 || a->status == 304 || (a->status >= 100 && a->status < 200)) { a->complete = true; break; }
            if (a->has_clen && have >= need_body) { a->complete = true; break; }
            if (a->chunked && have >= 5 && memmem(a->raw + a->hdr_len, have, "\r\n0\r\n\r\n", 7)) { a->complete = true; break; }
            if (a->chunked && have >= 5 && memcmp(a->raw + a->hdr_len, "0\r\n\r\n", 5) == 0) { a->complete = true; break; }
        }
        if (a->len >= max_bytes) { a->why = "answer too long"; break; }
        struct pollfd pf = { fd, POLLIN, 0 };
        int pr = poll(&pf, 1, timeout_ms);
        if (pr <= 0) { a->why = "timed out"; break; }
        if (a->len == a->cap) {
            a->cap *= 2;
            char *r = realloc(a->raw, a->cap + 1);
            if (!r) { a->why = "out of memory"; break; }
            a->raw = r;
        }
        ssize_t n = recv(fd, a->raw + a->len, a->cap - a->len, 0);
        if (n < 0) { if (errno == EINTR) continue; a->why = "recv failed"; break; }
        if (n == 0) {                           /* closed: complete when read-until-close */
            if (a->hdr_len && !a->has_clen && !a->chunked) a->complete = true;
            else a->why = a->len ? "closed mid-answer" : "closed without an answer";
            break;
        }
        a->len += (size_t)n;
        a->raw[a->len] = '\0';
        if (!a->hdr_len) {
            char *e = memmem(a->raw, a->len, "\r\n\r\n", 4);
            if (!e) continue;
            a->hdr_len = (size_t)(e - a->raw) + 4;
            if (sscanf(a->raw, "HTTP/1.%*1[01] %d", &a->status) != 1 || a->status < 100 || a->status > 999) a->status = 0;
            if (a->status >= 100 && a->status < 200 && a->status != 101) {   /* 100 Continue: the answer follows */
                a->interim++;
                memmove(a->raw, a->raw + a->hdr_len, a->len - a->hdr_len);
                a->len -= a->hdr_len;
                a->raw[a->len] = '\0';
                a->hdr_len = 0; a->status = 0;
                if (a->len && memmem(a->raw, a->len, "\r\n\r\n", 4)) { e = NULL; }
                else continue;
                e = memmem(a->raw, a->len, "\r\n\r\n", 4);
                a->hdr_len = (size_t)(e - a->raw) + 4;
                if (sscanf(a->raw, "HTTP/1.%*1[01] %d", &a->status) != 1 || a->status < 100 || a->status > 999) a->status = 0;
            }
            size_t vl;
            const char *v = svc_header(a, "Content-Type", &vl);
            if (v) { if (vl >= sizeof a->ctype) vl = sizeof a->ctype - 1; memcpy(a->ctype, v, vl); a->ctype[vl] = '\0'; }
            v = svc_header(a, "Content-Length", &vl);
            if (v) { a->has_clen = true; need_body = (size_t)strtoull(v, NULL, 10); }
            v = svc_header(a, "Transfer-Encoding", &vl);
            if (v && vl >= 7 && strncasecmp(v, "chunked", 7) == 0) a->chunked = true;
        }
    }
    if (a->raw) a->raw[a->len] = '\0';
    /* the body */
    size_t have = a->hdr_len ? a->len - a->hdr_len : 0;
    a->body = malloc(have + 1);
    if (!a->body) return -1;
    if (a->chunked) {
        const char *p = a->raw + a->hdr_len, *e = a->raw + a->len;
        size_t o = 0;
        while (p < e) {
            char *q;
            unsigned long n = strtoul(p, &q, 16);
            const char *crlf = memmem(p, (size_t)(e - p), "\r\n", 2);
            if (!crlf || q == p) break;
            p = crlf + 2;
            if (n == 0) break;
            if ((size_t)(e - p) < n) { n = (unsigned long)(e - p); }
            memcpy(a->body + o, p, n); o += n; p += n;
            if (e - p >= 2) p += 2;
        }
        a->body_len = o;
    } else {
        size_t n = have;
        if (a->has_clen && need_body < n) n = need_body;
        memcpy(a->body, a->raw + a->hdr_len, n);
        a->body_len = n;
    }
    a->body[a->body_len] = '\0';
    return 0;
}

/* ---- JSON validator (RFC 8259) ---------------------------------------------------- */
typedef struct { const unsigned char *p, *e; int depth; } svc_js;
static void js_ws(svc_js *j) { while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++; }
static bool js_value(svc_js *j);
static bool js_string(svc_js *j)
{
    if (j->p >= j->e || *j->p != '"') return false;
    j->p++;
    while (j->p < j->e) {
        unsigned c = *j->p;
        if (c == '"') { j->p++; return true; }
        if (c < 0x20) return false;
        if (c == '\\') {
            j->p++;
            if (j->p >= j->e) return false;
            c = *j->p;
            if (c == 'u') {
                if (j->e - j->p < 5) return false;
                for (int k = 1; k <= 4; k++) if (!strchr("0123456789abcdefABCDEF", j->p[k]) || !j->p[k]) return false;
                j->p += 5;
            } else if (strchr("\"\\/bfnrt", (int)c) && c) j->p++;
            else return false;
            continue;
        }
        if (c < 0x80) { j->p++; continue; }
        int n = c >= 0xf0 && c <= 0xf4 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 && c < 0xe0 ? 1 : -1;
        if (n < 0 || j->e - j->p <= n) return false;
        for (int k = 1; k <= n; k++) if ((j->p[k] & 0xc0) != 0x80) return false;
        j->p += n + 1;
    }
    return false;
}
static bool js_number(svc_js *j)
{
    const unsigned char *s = j->p;
    if (j->p < j->e && *j->p == '-') j->p++;
    if (j->p >= j->e) return false;
    if (*j->p == '0') j->p++;
    else if (*j->p >= '1' && *j->p <= '9') while (j->p < j->e && *j->p >= '0' && *j->p <= '9') j->p++;
    else return false;
    if (j->p < j->e && *j->p == '.') {
        j->p++;
        if (j->p >= j->e || *j->p < '0' || *j->p > '9') return false;
        while (j->p < j->e && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (j->p < j->e && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->e && (*j->p == '+' || *j->p == '-')) j->p++;
        if (j->p >= j->e || *j->p < '0' || *j->p > '9') return false;
        while (j->p < j->e && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    return j->p > s;
}
static bool js_lit(svc_js *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->e - j->p) < n || memcmp(j->p, w, n)) return false;
    j->p += n;
    return true;
}
static bool js_value(svc_js *j)
{
    js_ws(j);
    if (j->p >= j->e) return false;
    if (++j->depth > 512) return false;
    bool ok;
    unsigned c = *j->p;
    if (c == '{') {
        j->p++; js_ws(j);
        ok = true;
        if (j->p < j->e && *j->p == '}') j->p++;
        else for (;;) {
            js_ws(j);
            if (!js_string(j)) { ok = false; break; }
            js_ws(j);
            if (j->p >= j->e || *j->p != ':') { ok = false; break; }
            j->p++;
            if (!js_value(j)) { ok = false; break; }
            js_ws(j);
            if (j->p < j->e && *j->p == ',') { j->p++; continue; }
            if (j->p < j->e && *j->p == '}') { j->p++; break; }
            ok = false; break;
        }
    } else if (c == '[') {
        j->p++; js_ws(j);
        ok = true;
        if (j->p < j->e && *j->p == ']') j->p++;
        else for (;;) {
            if (!js_value(j)) { ok = false; break; }
            js_ws(j);
            if (j->p < j->e && *j->p == ',') { j->p++; continue; }
            if (j->p < j->e && *j->p == ']') { j->p++; break; }
            ok = false; break;
        }
    } else if (c == '"') ok = js_string(j);
    else if (c == 't') ok = js_lit(j, "true");
    else if (c == 'f') ok = js_lit(j, "false");
    else if (c == 'n') ok = js_lit(j, "null");
    else ok = js_number(j);
    j->depth--;
    return ok;
}
/* true when buf[0, len) is one JSON value (surrounding whitespace allowed) */
static bool svc_is_json(const char *buf, size_t len)
{
    svc_js j = { (const unsigned char *)buf, (const unsigned char *)buf + len, 0 };
    if (!js_value(&j)) return false;
    js_ws(&j);
    return j.p == j.e;
}

static char *svc_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) { b[n] = '\0'; *len = (size_t)n; }
    return b;
}
#endif
