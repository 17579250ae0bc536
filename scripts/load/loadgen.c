/* loadgen.c — an open-loop HTTP/1.1 load generator for scripts/bench/bench_nginx.sh: requests at scheduled times (constant rate or Poisson), latency from the schedule, microsecond timing. */
/*
 * wrk drives a closed loop: a connection sends its next request when the last
 * answer is in (plus a think time of whole milliseconds, wrk's delay()), and
 * it times each request from its own write. At a given fraction of the peak
 * that gives bursts at millisecond ticks and hides queueing behind the
 * schedule (coordinated omission). wrk2 fixes both but is not packaged. This
 * program is the small part of wrk2 that bench_nginx.sh needs:
 *
 *   - arrivals on a schedule: --arrivals const (every 1/rate s, the way wrk2
 *     -R paces) or poisson (exponential gaps, a random stream of clients);
 *   - each request is timed from its scheduled time, so a request that waits
 *     for a free connection, or behind a slow answer, counts the wait;
 *   - keep-alive connections, the same request bytes each time; an answer is
 *     complete when its Content-Length bytes are in (the service sends it: lua/wisp/nginx/http.lua);
 *   - --threads T: T threads, each with its own epoll, connections and a
 *     schedule of rate/T (constant: phases spread over one period; Poisson:
 *     the sum of T Poisson streams is one); each thread spins on
 *     epoll_wait(0) between arrivals (a core each, no timer slack).
 *
 *   cc -O2 -pthread -o loadgen scripts/load/loadgen.c
 *   loadgen --port 8080 --path /v1/models/m:predict --body FILE --ctype text/x-libsvm \
 *           --rate 20000 --duration 5 [--warmup 1] [--connections 64] [--threads 2]
 *           [--arrivals const|poisson] [--seed N]
 *
 * Output: one JSON object on stdout: rate asked and achieved, requests sent,
 * answered (2xx), non-2xx, errors, and latency percentiles in microseconds
 * (p50, p90, p99, p99.9, max) over the requests scheduled after the warm-up;
 * and send_slip: how late the requests were written after their scheduled
 * time (waiting for a connection included): when its p99 is large while the
 * server keeps up, the generator itself was held up (another task on its core).
 * Exit status 1 on a usage or connection error (the message on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int port = 8080, nconn = 64, nthreads = 1, poisson = 0;
static double rate = 1000, duration = 5, warmup = 1;
static const char *path = "/", *body_file = NULL, *ctype = "application/octet-stream";
static unsigned long long seed = 1;
static char *req;          /* the request bytes */
static size_t req_len;
static double t_start;     /* the schedule's origin, shared by the threads */

struct conn {
    int fd, busy;
    size_t sent;           /* request bytes written */
    char buf[8192];
    size_t have;           /* answer bytes held in buf (headers not parsed yet) */
    long need;             /* body bytes still to come once the headers are in; -1: headers not in */
    int status, close_after;
    double sched;          /* the scheduled time of the request in flight */
};

struct worker {
    int id, ep;
    struct conn *c;
    int nc;
    double rate, phase;
    unsigned long long rng;
    double *lat;           /* latencies (s) of requests scheduled after the warm-up */
    size_t nlat, cap;
    double *slip;          /* how late each of those was written (s): the generator's own delay */
    size_t nslip, scap;
    size_t sent, ok, non2xx, errors, late;
    double *backlog;       /* scheduled times waiting for a free connection (a ring) */
    size_t bl_head, bl_n, bl_cap;
    int *idle, nidle;
    char err[256];
};

static double next_gap(struct worker *w)
{
    if (!poisson) return 1.0 / w->rate;
    w->rng ^= w->rng << 13; w->rng ^= w->rng >> 7; w->rng ^= w->rng << 17;
    double u = ((double)(w->rng >> 11) + 0.5) / 9007199254740992.0;
    return -log(u) / w->rate;
}

static int open_conn(struct worker *w, struct conn *c)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) { snprintf(w->err, sizeof w->err, "socket: %s", strerror(errno)); return -1; }
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(w->err, sizeof w->err, "connect 127.0.0.1:%d: %s", port, strerror(errno));
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    c->fd = fd;
    c->busy = 0;
    struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c };
    epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev);
    return 0;
}


/* write what the socket takes of the request in flight */
static void pump_write(struct worker *w, struct conn *c)
{
    while (c->busy && c->sent < req_len) {
        ssize_t k = write(c->fd, req + c->sent, req_len - c->sent);
        if (k > 0) { c->sent += (size_t)k; continue; }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        w->errors++;
        c->busy = 0;
        return;
    }
}

static void push(double **v, size_t *n, size_t *cap, double x)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 65536;
        *v = realloc(*v, *cap * sizeof **v);
        if (!*v) { fprintf(stderr, "loadgen: out of memory\n"); exit(1); }
    }
    (*v)[(*n)++] = x;
}

static void record(struct worker *w, double sched, double t)
{
    if (sched >= t_start + warmup) push(&w->lat, &w->nlat, &w->cap, t - sched);
}

static void start(struct worker *w, struct conn *c, double sched)
{
    if (sched >= t_start + warmup) push(&w->slip, &w->nslip, &w->scap, now_s() - sched);
    c->busy = 1;
    c->sent = 0;
    c->have = 0;
    c->need = -1;
    c->status = 0;
    c->close_after = 0;
    c->sched = sched;
    w->sent++;
    pump_write(w, c);
}

static void reconnect(struct worker *w, struct conn *c)
{
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (open_conn(w, c) != 0) { fprintf(stderr, "loadgen: %s\n", w->err); exit(1); }
}

/* the connection is free: the oldest waiting request goes, or it joins the idle list */
static void release(struct worker *w, struct conn *c)
{
    if (w->bl_n) {
        double s = w->backlog[w->bl_head];
        w->bl_head = (w->bl_head + 1) % w->bl_cap;
        w->bl_n--;
        start(w, c, s);
    } else {
        w->idle[w->nidle++] = (int)(c - w->c);
    }
}

/* read the answer; 1 when it is complete */
static int pump_read(struct conn *c)
{
    for (;;) {
        char tmp[65536];
        char *dst = c->need < 0 ? c->buf + c->have : tmp;
        size_t room = c->need < 0 ? sizeof c->buf - 1 - c->have : sizeof tmp;
        ssize_t k = read(c->fd, dst, room);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) return -1;                 /* closed or failed */
        if (c->need >= 0) {
            c->need -= k;
        } else {
            c->have += (size_t)k;
            c->buf[c->have] = 0;
            char *end = strstr(c->buf, "\r\n\r\n");
            if (!end) {
                if (c->have >= sizeof c->buf - 1) return -1;   /* headers too long */
                continue;
            }
            c->status = atoi(c->buf + 9);
            char *cl = strcasestr(c->buf, "\r\nContent-Length:");
            if (!cl) return -1;                /* chunked answers are not read here */
            long len = atol(cl + 17);
            c->close_after = strcasestr(c->buf, "\r\nConnection: close") != NULL && strcasestr(c->buf, "\r\nConnection: close") < end;
            size_t head = (size_t)(end + 4 - c->buf);
            c->need = len - (long)(c->have - head);
        }
        if (c->need <= 0 && c->busy) return 1;
    }
}

static void *run(void *arg)
{
    struct worker *w = arg;
    w->ep = epoll_create1(0);
    w->idle = calloc((size_t)w->nc, sizeof *w->idle);
    w->bl_cap = 1 << 20;
    w->backlog = malloc(w->bl_cap * sizeof *w->backlog);
    for (int i = 0; i < w->nc; i++) {
        if (open_conn(w, &w->c[i]) != 0) return w;
        w->idle[w->nidle++] = i;
    }
    double next = t_start + w->phase;
    const double end = t_start + warmup + duration;
    struct epoll_event evs[256];
    for (;;) {
        double t = now_s();
        while (next <= t && next < end) {               /* every arrival that is due */
            if (w->nidle) start(w, &w->c[w->idle[--w->nidle]], next);
            else {
                if (w->bl_n == w->bl_cap) { w->errors++; }
                else { w->backlog[(w->bl_head + w->bl_n) % w->bl_cap] = next; w->bl_n++; w->late++; }
            }
            next += next_gap(w);
        }
        int busy = w->nidle < w->nc || w->bl_n;
        if (t >= end && !busy) break;
        if (t >= end + 10) { w->errors += (size_t)(w->nc - w->nidle) + w->bl_n; break; }  /* answers that never came */
        int n = epoll_wait(w->ep, evs, 256, 0);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c->busy) {
                if (evs[i].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) reconnect(w, c);
                continue;
            }
            if (evs[i].events & EPOLLOUT) pump_write(w, c);
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                int r = pump_read(c);
                if (r == 0) continue;
                double done = now_s();
                if (r > 0) {
                    if (c->status >= 200 && c->status < 300) { w->ok++; record(w, c->sched, done); }
                    else w->non2xx++;
                    c->busy = 0;
                    if (c->close_after) reconnect(w, c);
                } else {
                    w->errors++;
                    c->busy = 0;
                    reconnect(w, c);
                }
                release(w, c);
            }
        }
    }
    return w;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double q)
{
    if (!n) return 0;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1] * 1e6;
}

static void usage(void)
{
    fprintf(stderr, "usage: loadgen --port N --path P --body FILE [--ctype T] --rate R [--duration S] [--warmup S]\n"
                    "               [--connections C] [--threads T] [--arrivals const|poisson] [--seed N]\n");
    exit(1);
}

int main(int argc, char **argv)
{
    const char *arrivals = "const";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--port")) port = atoi(v);
        else if (!strcmp(a, "--path")) path = v;
        else if (!strcmp(a, "--body")) body_file = v;
        else if (!strcmp(a, "--ctype")) ctype = v;
        else if (!strcmp(a, "--rate")) rate = atof(v);
        else if (!strcmp(a, "--duration")) duration = atof(v);
        else if (!strcmp(a, "--warmup")) warmup = atof(v);
        else if (!strcmp(a, "--connections")) nconn = atoi(v);
        else if (!strcmp(a, "--threads")) nthreads = atoi(v);
        else if (!strcmp(a, "--arrivals")) arrivals = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 0);
        else usage();
    }
    if (!strcmp(arrivals, "poisson")) poisson = 1;
    else if (strcmp(arrivals, "const")) usage();
    if (!body_file || rate <= 0 || duration <= 0 || nthreads < 1 || nconn < nthreads) usage();
    FILE *f = fopen(body_file, "rb");
    if (!f) { fprintf(stderr, "loadgen: %s: %s\n", body_file, strerror(errno)); return 1; }
    fseek(f, 0, SEEK_END);
    long blen = ftell(f);
    fseek(f, 0, SEEK_SET);
    char head[1024];
    int hl = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: %s\r\nContent-Length: %ld\r\n\r\n",
                      path, port, ctype, blen);
    req_len = (size_t)hl + (size_t)blen;
    req = malloc(req_len);
    memcpy(req, head, (size_t)hl);
    if (fread(req + hl, 1, (size_t)blen, f) != (size_t)blen) { fprintf(stderr, "loadgen: cannot read %s\n", body_file); return 1; }
    fclose(f);

    struct worker *w = calloc((size_t)nthreads, sizeof *w);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    t_start = now_s() + 0.2;                     /* connections first, then the schedule */
    for (int i = 0; i < nthreads; i++) {
        w[i].id = i;
        w[i].nc = nconn / nthreads + (i < nconn % nthreads);
        w[i].c = calloc((size_t)w[i].nc, sizeof *w[i].c);
        w[i].rate = rate / nthreads;
        w[i].phase = poisson ? 0 : (double)i / rate;
        w[i].rng = seed * 0x9E3779B97F4A7C15ull + (unsigned long long)i * 0xD1B54A32D192ED03ull + 1;
        pthread_create(&th[i], NULL, run, &w[i]);
    }
    size_t n = 0, sent = 0, ok = 0, non2xx = 0, errors = 0, late = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        if (w[i].err[0]) { fprintf(stderr, "loadgen: %s\n", w[i].err); return 1; }
        n += w[i].nlat; sent += w[i].sent; ok += w[i].ok; non2xx += w[i].non2xx; errors += w[i].errors; late += w[i].late;
    }
    double *all = malloc((n ? n : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < nthreads; i++) { memcpy(all + k, w[i].lat, w[i].nlat * sizeof *all); k += w[i].nlat; }
    qsort(all, n, sizeof *all, cmp);
    size_t ns = 0;
    for (int i = 0; i < nthreads; i++) ns += w[i].nslip;
    double *sl = malloc((ns ? ns : 1) * sizeof *sl);
    k = 0;
    for (int i = 0; i < nthreads; i++) { memcpy(sl + k, w[i].slip, w[i].nslip * sizeof *sl); k += w[i].nslip; }
    qsort(sl, ns, sizeof *sl, cmp);
    printf("{\"arrivals\":\"%s\",\"rate\":%.1f,\"achieved_rps\":%.1f,\"seconds\":%.3f,\"connections\":%d,\"threads\":%d,"
           "\"sent\":%zu,\"ok\":%zu,\"non2xx\":%zu,\"errors\":%zu,\"waited_for_connection\":%zu,\"measured\":%zu,"
           "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,"
           "\"send_slip_p50_us\":%.1f,\"send_slip_p99_us\":%.1f,\"send_slip_max_us\":%.1f}\n",
           arrivals, rate, (double)n / duration, duration, nconn, nthreads, sent, ok, non2xx, errors, late, n,
           pct(all, n, 0.5), pct(all, n, 0.9), pct(all, n, 0.99), pct(all, n, 0.999), n ? all[n - 1] * 1e6 : 0.0,
           pct(sl, ns, 0.5), pct(sl, ns, 0.99), ns ? sl[ns - 1] * 1e6 : 0.0);
    return 0;
}
